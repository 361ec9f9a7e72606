// Shape rules of the ops dense-prediction and modern CNNs add (contract in shape_rules.h):
// transposed convolution, instance and group normalization, the variadic elementwise ops
// Sum, Max and Min, and RandomUniformLike (the dynamo exporter's dropout draws its mask with it).
#include <unordered_map>

#include "model/shape_rules.h"

namespace autovm::model::shape_rules {
namespace {

// Max and Min with more inputs than this are refused: their gradient rule names each input.
constexpr size_t kMaxVariadicInputs = 8;

std::vector<int64_t> per_axis(const Node& n, const char* key, int64_t fallback, size_t size, const Shape& x) {
  std::vector<int64_t> v = n.attr_ints(key);
  if (v.empty()) v.assign(size, fallback);
  if (v.size() != size) {
    fail(std::string(key) + " has " + num(int64_t(v.size())) + " values; input " + str(x) + " needs " + num(int64_t(size)));
  }
  return v;
}

// ConvTranspose: X [N, Cin, d...], W [Cin, Cout / group, k...], optional B [Cout]. Along each
// spatial axis: out = stride * (in - 1) + output_padding + (k - 1) * dilation + 1 - pads
// (begin and end), or `output_shape` when given, or in * stride with auto_pad SAME_*.
void infer_conv_transpose(Ctx& c) {
  const Shape &x = c.shape(0), &w = c.shape(1);
  const Node& n = c.node();
  if (x.size() < 3) fail("input has shape " + str(x) + "; ConvTranspose needs [N, C, spatial...]");
  if (w.size() != x.size()) fail("weight has shape " + str(w) + " but input has shape " + str(x) + "; their ranks must match");
  const int64_t group = n.attr_i("group", 1);
  if (group < 1) fail("group must be positive, got " + num(group));
  if (w[0] != x[1]) {
    fail("input has " + num(x[1]) + " channels but the weight " + str(w) + " expects " + num(w[0]) +
         " (ConvTranspose weights are [Cin, Cout / group, k...])");
  }
  if (x[1] % group != 0) fail("input channels " + num(x[1]) + " are not divisible by group " + num(group));
  const int64_t channels = mul(w[1], group);
  if (c.has_input(2) && c.shape(2) != Shape{channels}) {
    fail("bias has shape " + str(c.shape(2)) + " but the output has " + num(channels) + " channels");
  }
  const size_t k = x.size() - 2;
  const Shape kernel(w.begin() + 2, w.end());
  const auto kernel_attr = n.attr_ints("kernel_shape");
  if (!kernel_attr.empty() && kernel_attr != kernel) fail("kernel_shape " + str(kernel_attr) + " does not match the weight " + str(w));
  const auto strides = per_axis(n, "strides", 1, k, x), dilations = per_axis(n, "dilations", 1, k, x);
  const auto output_padding = per_axis(n, "output_padding", 0, k, x), pads = per_axis(n, "pads", 0, 2 * k, x);
  const std::vector<int64_t> output_shape = n.attr_ints("output_shape");
  if (!output_shape.empty() && output_shape.size() != k) {
    fail("output_shape " + str(output_shape) + " needs one entry per spatial axis of the input " + str(x));
  }
  const std::string auto_pad = n.attr_s("auto_pad", "NOTSET");
  Shape out{x[0], channels};
  for (size_t i = 0; i < k; ++i) {
    if (kernel[i] < 1 || strides[i] < 1 || dilations[i] < 1) {
      fail("kernel " + str(kernel) + ", strides " + str(strides) + " and dilations " + str(dilations) + " must be positive");
    }
    if (output_padding[i] < 0 || output_padding[i] >= std::max(strides[i], dilations[i])) {
      fail("output_padding " + str(output_padding) + " must be non-negative and smaller than the stride or the dilation");
    }
    if (!output_shape.empty()) {
      out.push_back(output_shape[i]);
    } else if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
      out.push_back(mul(x[2 + i], strides[i]));
    } else if (auto_pad == "VALID" || auto_pad == "NOTSET" || auto_pad.empty()) {
      const int64_t before = auto_pad == "VALID" ? 0 : pads[i], after = auto_pad == "VALID" ? 0 : pads[i + k];
      if (before < 0 || after < 0) fail("pads " + str(pads) + " must be non-negative");
      const int64_t window = add(mul(kernel[i] - 1, dilations[i]), 1);
      const int64_t full = add(add(mul(strides[i], x[2 + i] - 1), output_padding[i]), window);
      if (full - before - after < 1) {
        fail("pads " + str(pads) + " remove the whole output (" + num(full) + ") along spatial axis " + num(int64_t(i)));
      }
      out.push_back(full - before - after);
    } else {
      fail("auto_pad " + quote(auto_pad) + " is not NOTSET, SAME_UPPER, SAME_LOWER or VALID");
    }
  }
  c.set(0, c.dtype(0), out);
}

// InstanceNormalization: X [N, C, d...], scale and B [C]; Y like X.
void infer_instance_norm(Ctx& c) {
  const Shape& x = c.shape(0);
  if (x.size() < 3) fail("input has shape " + str(x) + "; InstanceNormalization needs [N, C, spatial...]");
  const char* names[] = {"scale", "bias"};
  for (size_t i = 1; i <= 2; ++i) {
    if (c.shape(i) != Shape{x[1]}) {
      fail(std::string(names[i - 1]) + " has shape " + str(c.shape(i)) + " but the input " + str(x) + " has " + num(x[1]) + " channels");
    }
  }
  c.set(0, c.dtype(0), x);
}

// GroupNormalization (opset 18): X [N, C, d...], num_groups G dividing C; scale and bias have
// one entry per group (opset 18's text) or per channel (opset 21's); Y like X.
void infer_group_norm(Ctx& c) {
  const Shape& x = c.shape(0);
  if (x.size() < 3) fail("input has shape " + str(x) + "; GroupNormalization needs [N, C, spatial...]");
  if (!c.node().attr("num_groups")) fail("GroupNormalization needs a 'num_groups' attribute");
  const int64_t groups = c.node().attr_i("num_groups", 0);
  if (groups < 1 || x[1] % groups != 0) fail("num_groups " + num(groups) + " does not divide the " + num(x[1]) + " channels of " + str(x));
  const char* names[] = {"scale", "bias"};
  for (size_t i = 1; i <= 2; ++i) {
    if (c.shape(i) != Shape{groups} && c.shape(i) != Shape{x[1]}) {
      fail(std::string(names[i - 1]) + " has shape " + str(c.shape(i)) + "; input " + str(x) + " with " + num(groups) +
           " groups needs [" + num(groups) + "] or [" + num(x[1]) + "]");
    }
  }
  c.set(0, c.dtype(0), x);
}

// Sum, Max, Min: numpy broadcasting of every input.
void infer_variadic(Ctx& c) {
  if (c.num_inputs() == 0) fail(c.node().op + " needs at least one input");
  if (c.node().op != "Sum" && c.num_inputs() > kMaxVariadicInputs) {
    fail("has " + num(int64_t(c.num_inputs())) + " inputs; AutoVM plans " + c.node().op + " of at most " +
         num(int64_t(kMaxVariadicInputs)));
  }
  std::vector<const Shape*> shapes;
  for (size_t i = 0; i < c.num_inputs(); ++i) shapes.push_back(&c.shape(i));
  c.set(0, c.dtype(0), broadcast(shapes));
}

// RandomUniformLike: input's shape, the `dtype` attribute's type or else the input's.
void infer_random_like(Ctx& c) {
  DType dtype = c.dtype(0);
  if (const Attribute* a = c.node().attr("dtype")) {
    dtype = dtype_from_onnx(int32_t(a->i));
    if (!is_floating(dtype)) fail("dtype " + num(a->i) + " is not a floating-point type");
  }
  c.set(0, dtype, c.shape(0));
}

}  // namespace

const Rule* find_dense_rule(std::string_view op) {
  static const std::unordered_map<std::string_view, Rule> rules = {
      {"ConvTranspose", {infer_conv_transpose}},
      {"GroupNormalization", {infer_group_norm}},
      {"InstanceNormalization", {infer_instance_norm}},
      {"Max", {infer_variadic}},
      {"Min", {infer_variadic}},
      {"RandomUniformLike", {infer_random_like}},
      {"Sum", {infer_variadic}},
  };
  auto it = rules.find(op);
  return it == rules.end() ? nullptr : &it->second;
}

}  // namespace autovm::model::shape_rules
