// Shape inference and static evaluation for the supported ops (contract in shape_inference.h).
//
// Tables map each op type to a Rule (shape_rules.h): `infer` sets the outputs' dtypes and shapes
// (and checks the inputs agree), `eval` computes output values when every input value is known.
// This file holds the table of the compute ops and constants and looks the others up in
// shape_rules_layout.cc and shape_rules_dense.cc. Rules report problems by throwing Failure;
// infer_shapes turns that into an Error naming the node.
#include "model/shape_inference.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <functional>
#include <string_view>
#include <unordered_map>

#include "model/einsum.h"
#include "model/shape_rules.h"
#include "util/error.h"

namespace autovm::model {
namespace {

using namespace shape_rules;

// Nodes whose outputs have more elements than this are not evaluated.
constexpr int64_t kMaxFoldElements = int64_t{1} << 16;


// ---- Elementwise ops ----

void infer_same(Ctx& c) { c.set(0, c.dtype(0), c.shape(0)); }

void infer_not(Ctx& c) { c.set(0, DType::boolean, c.shape(0)); }

Shape broadcast_inputs(const Ctx& c, size_t first, size_t count) {
  std::vector<const Shape*> shapes;
  for (size_t i = first; i < first + count; ++i) shapes.push_back(&c.shape(i));
  return broadcast(shapes);
}

void infer_arith(Ctx& c) { c.set(0, c.dtype(0), broadcast_inputs(c, 0, 2)); }
// Mod: integers with either sign rule; floating point only as C's fmod (ONNX requires fmod 1).
void infer_mod(Ctx& c) {
  const int64_t fmod = c.node().attr_i("fmod", 0);
  if (fmod != 0 && fmod != 1) fail("fmod must be 0 or 1, got " + num(fmod));
  if ((is_floating(c.dtype(0)) || is_floating(c.dtype(1))) && fmod != 1)
    fail("floating-point Mod needs fmod=1 (the ONNX spec's rule)");
  infer_arith(c);
}

void infer_compare(Ctx& c) { c.set(0, DType::boolean, broadcast_inputs(c, 0, 2)); }
void infer_where(Ctx& c) { c.set(0, c.dtype(1), broadcast_inputs(c, 0, 3)); }

enum class Arith { add, sub, mul, div, pow, mod };

int64_t int_pow(int64_t base, int64_t e) {
  if (e < 0) fail("integer Pow with a negative exponent " + num(e));
  int64_t r = 1;
  while (e > 0) {
    if (e & 1) r = mul(r, base);
    e >>= 1;
    if (e) base = mul(base, base);
  }
  return r;
}

template <Arith op>
bool eval_arith(Ctx& c) {
  const ConstValue &a = *c.value(0), &b = *c.value(1);
  ConstValue out = c.blank(0);
  const bool ints = !is_floating(out.dtype) && !is_floating(a.dtype) && !is_floating(b.dtype);
  const bool fmod = c.node().attr_i("fmod", 0) != 0;
  for_each_broadcast(out.shape, {&a.shape, &b.shape}, [&](const std::vector<int64_t>& at) {
    if (ints) {
      int64_t x = a.ints[at[0]], y = b.ints[at[1]], r = 0;
      bool overflow = false;
      switch (op) {
        case Arith::add: overflow = __builtin_add_overflow(x, y, &r); break;
        case Arith::sub: overflow = __builtin_sub_overflow(x, y, &r); break;
        case Arith::mul: overflow = __builtin_mul_overflow(x, y, &r); break;
        case Arith::div:
          if (y == 0) fail("integer division by zero");
          overflow = x == INT64_MIN && y == -1;
          r = overflow ? 0 : x / y;
          break;
        case Arith::pow: r = int_pow(x, y); break;
        case Arith::mod:  // fmod 0: the sign of the divisor (Python's %); 1: of the dividend
          if (y == 0) fail("integer modulo by zero");
          r = y == -1 ? 0 : x % y;
          if (!fmod && r != 0 && (r < 0) != (y < 0)) r += y;
          break;
      }
      if (overflow) fail("integer overflow evaluating " + num(x) + " and " + num(y));
      out.ints.push_back(r);
    } else {
      double x = get_f(a, at[0]), y = get_f(b, at[1]);
      switch (op) {
        case Arith::add: put_number(out, x + y); break;
        case Arith::sub: put_number(out, x - y); break;
        case Arith::mul: put_number(out, x * y); break;
        case Arith::div: put_number(out, x / y); break;
        case Arith::pow: put_number(out, std::pow(x, y)); break;
        case Arith::mod: put_number(out, std::fmod(x, y)); break;
      }
    }
  });
  c.set_value(0, std::move(out));
  return true;
}

bool eval_equal(Ctx& c) {
  const ConstValue &a = *c.value(0), &b = *c.value(1);
  ConstValue out = c.blank(0);
  const bool floats = is_floating(a.dtype) || is_floating(b.dtype);
  for_each_broadcast(out.shape, {&a.shape, &b.shape}, [&](const std::vector<int64_t>& at) {
    out.ints.push_back(floats ? get_f(a, at[0]) == get_f(b, at[1]) : a.ints[at[0]] == b.ints[at[1]]);
  });
  c.set_value(0, std::move(out));
  return true;
}

bool eval_where(Ctx& c) {
  const ConstValue &cond = *c.value(0), &x = *c.value(1), &y = *c.value(2);
  ConstValue out = c.blank(0);
  for_each_broadcast(out.shape, {&cond.shape, &x.shape, &y.shape}, [&](const std::vector<int64_t>& at) {
    if (get_f(cond, at[0]) != 0) put(out, x, at[1]);
    else put(out, y, at[2]);
  });
  c.set_value(0, std::move(out));
  return true;
}

bool eval_not(Ctx& c) {
  ConstValue out = c.blank(0);
  const ConstValue& x = *c.value(0);
  for (int64_t i = 0; i < x.size(); ++i) out.ints.push_back(get_f(x, i) == 0);
  c.set_value(0, std::move(out));
  return true;
}

bool eval_neg(Ctx& c) {
  ConstValue out = c.blank(0);
  const ConstValue& x = *c.value(0);
  for (int64_t i = 0; i < x.size(); ++i) {
    if (is_floating(x.dtype)) {
      put_number(out, -x.floats[i]);
    } else {
      if (x.ints[i] == INT64_MIN) fail("integer overflow negating " + num(x.ints[i]));
      out.ints.push_back(-x.ints[i]);
    }
  }
  c.set_value(0, std::move(out));
  return true;
}

bool eval_sqrt(Ctx& c) {
  const ConstValue& x = *c.value(0);
  if (!is_floating(x.dtype)) return false;
  ConstValue out = c.blank(0);
  for (double f : x.floats) out.floats.push_back(std::sqrt(f));
  c.set_value(0, std::move(out));
  return true;
}

void infer_cast(Ctx& c) {
  DType to = dtype_from_onnx(int32_t(c.node().attr_i("to", 0)));
  if (to == DType::undefined) fail("cast target type " + num(c.node().attr_i("to", 0)) + " is not one AutoVM handles");
  c.set(0, to, c.shape(0));
}

bool eval_cast(Ctx& c) {
  ConstValue out = c.blank(0);
  const ConstValue& x = *c.value(0);
  for (int64_t i = 0; i < x.size(); ++i) {
    if (is_floating(out.dtype)) {
      out.floats.push_back(out.dtype == DType::f32 ? double(float(get_f(x, i))) : get_f(x, i));
      continue;
    }
    int64_t v = out.dtype == DType::boolean ? get_f(x, i) != 0 : get_i(x, i);
    switch (out.dtype) {  // wrap like a C cast to the narrower type
      case DType::i32: v = int32_t(uint32_t(uint64_t(v))); break;
      case DType::i16: v = int16_t(uint16_t(uint64_t(v))); break;
      case DType::i8: v = int8_t(uint8_t(uint64_t(v))); break;
      case DType::u8: v = uint8_t(uint64_t(v)); break;
      default: break;
    }
    out.ints.push_back(v);
  }
  c.set_value(0, std::move(out));
  return true;
}

void infer_dropout(Ctx& c) {
  c.set(0, c.dtype(0), c.shape(0));
  c.set(1, DType::boolean, c.shape(0));  // optional mask
}

void infer_softmax(Ctx& c) {
  norm_axis(c.node().attr_i("axis", c.opset() < 13 ? 1 : -1), c.rank(0));
  infer_same(c);
}

void infer_lrn(Ctx& c) {
  if (c.rank(0) < 3) fail("input has shape " + str(c.shape(0)) + "; LRN needs [N, C, spatial...]");
  if (c.node().attr_i("size", 0) < 1) fail("LRN needs a positive 'size' attribute");
  infer_same(c);
}

// ---- Convolution and pooling ----

// Output spatial dims of a sliding window (Conv, MaxPool, AveragePool) over x's spatial dims.
Shape window_output(const Ctx& c, const Shape& x, const Shape& kernel, bool ceil_mode) {
  const Node& n = c.node();
  const size_t k = kernel.size();
  auto per_dim = [&](const char* key, int64_t fallback, size_t size) {
    std::vector<int64_t> v = n.attr_ints(key);
    if (v.empty()) v.assign(size, fallback);
    if (v.size() != size) {
      fail(std::string(key) + " has " + num(int64_t(v.size())) + " values; input " + str(x) + " needs " + num(int64_t(size)));
    }
    return v;
  };
  const auto strides = per_dim("strides", 1, k), dilations = per_dim("dilations", 1, k), pads = per_dim("pads", 0, 2 * k);
  const std::string auto_pad = n.attr_s("auto_pad", "NOTSET");
  Shape out;
  for (size_t i = 0; i < k; ++i) {
    const int64_t in = x[2 + i], s = strides[i];
    if (kernel[i] < 1 || s < 1 || dilations[i] < 1) {
      fail("kernel " + str(kernel) + ", strides " + str(strides) + " and dilations " + str(dilations) + " must be positive");
    }
    if (pads[i] < 0 || pads[i + k] < 0) fail("pads " + str(pads) + " must be non-negative");
    const int64_t window = add(mul(kernel[i] - 1, dilations[i]), 1);
    if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
      out.push_back(in / s + (in % s != 0));
    } else if (auto_pad == "VALID" || auto_pad == "NOTSET" || auto_pad.empty()) {
      const int64_t before = auto_pad == "VALID" ? 0 : pads[i];
      const int64_t padded = auto_pad == "VALID" ? in : add(add(in, pads[i]), pads[i + k]);
      if (padded < window) {
        fail("the window (" + num(window) + ") is larger than the padded input (" + num(padded) +
             ") along spatial axis " + num(int64_t(i)) + ": input " + str(x) + ", kernel " + str(kernel));
      }
      int64_t o = (padded - window) / s + 1;
      // ceil_mode rounds up, but a window may not start in the right padding (PyTorch's rule).
      if (ceil_mode && (padded - window) % s != 0 && mul(o, s) < add(in, before)) ++o;
      out.push_back(o);
    } else {
      fail("auto_pad " + quote(auto_pad) + " is not NOTSET, SAME_UPPER, SAME_LOWER or VALID");
    }
  }
  return out;
}

void infer_conv(Ctx& c) {
  const Shape &x = c.shape(0), &w = c.shape(1);
  if (x.size() < 3) fail("input has shape " + str(x) + "; Conv needs [N, C, spatial...]");
  if (w.size() != x.size()) fail("weight has shape " + str(w) + " but input has shape " + str(x) + "; their ranks must match");
  const int64_t group = c.node().attr_i("group", 1);
  if (group < 1) fail("group must be positive, got " + num(group));
  if (mul(w[1], group) != x[1]) {
    fail("input has " + num(x[1]) + " channels but the weight expects " + num(w[1]) + " x group " + num(group) +
         " (input " + str(x) + ", weight " + str(w) + ")");
  }
  if (w[0] % group != 0) fail("weight " + str(w) + " has " + num(w[0]) + " output channels, not divisible by group " + num(group));
  if (c.has_input(2) && c.shape(2) != Shape{w[0]}) {
    fail("bias has shape " + str(c.shape(2)) + " but the weight " + str(w) + " has " + num(w[0]) + " output channels");
  }
  const Shape kernel(w.begin() + 2, w.end());
  const auto kernel_attr = c.node().attr_ints("kernel_shape");
  if (!kernel_attr.empty() && kernel_attr != kernel) fail("kernel_shape " + str(kernel_attr) + " does not match the weight " + str(w));
  Shape out{x[0], w[0]};
  for (int64_t d : window_output(c, x, kernel, false)) out.push_back(d);
  c.set(0, c.dtype(0), out);
}

void infer_pool(Ctx& c) {
  const Shape& x = c.shape(0);
  if (x.size() < 3) fail("input has shape " + str(x) + "; pooling needs [N, C, spatial...]");
  const Shape kernel = c.node().attr_ints("kernel_shape");
  if (kernel.size() != x.size() - 2) {
    fail("kernel_shape " + str(kernel) + " needs one entry per spatial axis of the input " + str(x));
  }
  Shape out{x[0], x[1]};
  for (int64_t d : window_output(c, x, kernel, c.node().attr_i("ceil_mode", 0) != 0)) out.push_back(d);
  c.set(0, c.dtype(0), out);
  c.set(1, DType::i64, out);  // MaxPool's optional Indices
}

void infer_global_pool(Ctx& c) {
  Shape x = c.shape(0);
  if (x.size() < 3) fail("input has shape " + str(x) + "; global pooling needs [N, C, spatial...]");
  std::fill(x.begin() + 2, x.end(), 1);
  c.set(0, c.dtype(0), x);
}

// LayerNormalization (opset 17): Y like X; optional Mean and InvStdDev keep the dims before
// `axis` and have 1 from it on.
void infer_layer_norm(Ctx& c) {
  const Shape& x = c.shape(0);
  int64_t axis = norm_axis(c.node().attr_i("axis", -1), c.rank(0));
  c.set(0, c.dtype(0), x);
  Shape stats = x;
  for (size_t i = size_t(axis); i < stats.size(); ++i) stats[i] = 1;
  for (size_t k = 1; k < c.num_outputs() && k < 3; ++k)
    if (c.has_output(k)) c.set(k, DType::f32, stats);
}

void infer_batch_norm(Ctx& c) {
  const Shape& x = c.shape(0);
  if (x.size() < 2) fail("input has shape " + str(x) + "; BatchNormalization needs [N, C, ...]");
  const char* names[] = {"scale", "bias", "mean", "var"};
  for (size_t i = 1; i <= 4; ++i) {
    if (c.shape(i) != Shape{x[1]}) {
      fail(std::string(names[i - 1]) + " has shape " + str(c.shape(i)) + " but the input " + str(x) + " has " + num(x[1]) + " channels");
    }
  }
  // Opset 14+: Y, running_mean, running_var (training_mode). Before: up to Y, mean, var,
  // saved_mean, saved_var.
  const size_t max_outputs = c.opset() >= 14 ? 3 : 5;
  if (c.num_outputs() > max_outputs) {
    fail("has " + num(int64_t(c.num_outputs())) + " outputs; opset " + num(c.opset()) + " allows at most " + num(int64_t(max_outputs)));
  }
  c.set(0, c.dtype(0), x);
  for (size_t k = 1; k < c.num_outputs(); ++k) c.set(k, c.dtype(3), {x[1]});
}

// ---- Reductions, matrix products ----

// Which axes a Reduce* node reduces; empty when it is a no-op (noop_with_empty_axes). The axes
// are an input from opset 13 for ReduceSum, from 18 for the others; an attribute before.
std::vector<bool> reduced_axes(const Ctx& c) {
  const int64_t rank = c.rank(0);
  std::vector<int64_t> axes;
  if (c.opset() >= (c.node().op == "ReduceSum" ? 13 : 18)) {
    if (c.has_input(1)) axes = c.need_ints(1, "axes");
  } else {
    axes = c.node().attr_ints("axes");
  }
  if (axes.empty()) {
    if (c.node().attr_i("noop_with_empty_axes", 0) != 0) return {};
    return std::vector<bool>(size_t(rank), true);
  }
  std::vector<bool> mask(size_t(rank), false);
  for (int64_t a : axes) {
    int64_t ax = norm_axis(a, rank);
    if (mask[ax]) fail("axes " + str(axes) + " repeat axis " + num(a));
    mask[ax] = true;
  }
  return mask;
}

Shape reduced_shape(const Shape& x, const std::vector<bool>& mask, bool keepdims) {
  if (mask.empty()) return x;
  Shape out;
  for (size_t j = 0; j < x.size(); ++j) {
    if (!mask[j]) out.push_back(x[j]);
    else if (keepdims) out.push_back(1);
  }
  return out;
}

void infer_reduce(Ctx& c) {
  c.set(0, c.dtype(0), reduced_shape(c.shape(0), reduced_axes(c), c.node().attr_i("keepdims", 1) != 0));
}

enum class Reduce { mean, prod, sum };

template <Reduce kind>
bool eval_reduce(Ctx& c) {
  constexpr bool mean = kind == Reduce::mean, additive = kind != Reduce::prod;
  const ConstValue& x = *c.value(0);
  const std::vector<bool> mask = reduced_axes(c);
  if (mask.empty()) return eval_copy(c);
  const Shape kept = reduced_shape(x.shape, mask, true);
  const int64_t n = element_count(kept);
  if (n == 0) return eval_copy(c);  // an empty output: nothing to compute
  std::vector<double> acc_f(size_t(n), additive ? 0.0 : 1.0);
  std::vector<int64_t> acc_i(size_t(n), additive ? 0 : 1);
  const bool ints = !is_floating(x.dtype);
  int64_t e = 0;
  for_each_broadcast(x.shape, {&kept}, [&](const std::vector<int64_t>& at) {
    if (ints) {
      acc_i[at[0]] = additive ? add(acc_i[at[0]], x.ints[e]) : mul(acc_i[at[0]], x.ints[e]);
    } else {
      acc_f[at[0]] = additive ? acc_f[at[0]] + x.floats[e] : acc_f[at[0]] * x.floats[e];
    }
    ++e;
  });
  const int64_t per_output = n ? x.size() / n : 1;
  ConstValue out = c.blank(0);
  for (int64_t i = 0; i < n; ++i) {
    if (ints) out.ints.push_back(mean ? acc_i[i] / std::max<int64_t>(per_output, 1) : acc_i[i]);
    else put_number(out, mean ? acc_f[i] / double(std::max<int64_t>(per_output, 1)) : acc_f[i]);
  }
  c.set_value(0, std::move(out));
  return true;
}

void infer_gemm(Ctx& c) {
  const Shape &a = c.shape(0), &b = c.shape(1);
  if (a.size() != 2 || b.size() != 2) fail("A " + str(a) + " and B " + str(b) + " must both be 2-D");
  const bool ta = c.node().attr_i("transA", 0) != 0, tb = c.node().attr_i("transB", 0) != 0;
  const int64_t m = a[ta ? 1 : 0], k = a[ta ? 0 : 1], kb = b[tb ? 1 : 0], n = b[tb ? 0 : 1];
  if (k != kb) {
    fail("A " + str(a) + (ta ? " (transposed)" : "") + " and B " + str(b) + (tb ? " (transposed)" : "") +
         " disagree on the inner dimension: " + num(k) + " vs " + num(kb));
  }
  const Shape out{m, n};
  if (c.has_input(2) && (c.rank(2) > 2 || broadcast({&c.shape(2), &out}) != out)) {
    fail("C has shape " + str(c.shape(2)) + ", which does not broadcast to the output " + str(out));
  }
  c.set(0, c.dtype(0), out);
}

void infer_matmul(Ctx& c) {
  Shape a = c.shape(0), b = c.shape(1);
  if (a.empty() || b.empty()) fail("inputs " + str(a) + " and " + str(b) + " must have rank 1 or more");
  const bool vec_a = a.size() == 1, vec_b = b.size() == 1;
  if (vec_a) a.insert(a.begin(), 1);
  if (vec_b) b.push_back(1);
  if (a.back() != b[b.size() - 2]) {
    fail("inner dimensions differ: " + str(c.shape(0)) + " x " + str(c.shape(1)));
  }
  const Shape batch_a(a.begin(), a.end() - 2), batch_b(b.begin(), b.end() - 2);
  Shape out = broadcast({&batch_a, &batch_b});
  if (!vec_a) out.push_back(a[a.size() - 2]);
  if (!vec_b) out.push_back(b.back());
  c.set(0, c.dtype(0), out);
}

// Einsum of two operands (model/einsum.h); an equation the planner does not support is refused
// as unsupported, naming the node.
void infer_einsum(Ctx& c) {
  try {
    const EinsumEquation e = parse_einsum(c.node().attr_s("equation", ""));
    std::vector<const Shape*> shapes;
    for (size_t i = 0; i < c.num_inputs(); ++i) shapes.push_back(&c.shape(i));
    c.set(0, c.dtype(0), einsum_output_shape(e, einsum_extents(e, shapes)));
  } catch (const Error& err) {
    if (err.kind() == ErrorKind::invalid_model) fail(err.what());
    throw Error(err.kind(), "node " + quote(c.node().name) + " (Einsum): " + err.what());
  }
}

// The planner's Linear (model/fusion/): X [..., K], W [M, K], B [M] -> [..., M].
void infer_linear(Ctx& c) {
  const Shape &x = c.shape(0), &w = c.shape(1), &b = c.shape(2);
  if (x.empty() || w.size() != 2 || w[1] != x.back() || b != Shape{w[0]})
    fail("inputs " + str(x) + ", " + str(w) + ", " + str(b) + " are not [..., K], [M, K], [M]");
  Shape out = x;
  out.back() = w[0];
  c.set(0, c.dtype(0), out);
}

// The planner's ScaledDotProductAttention (model/fusion/): Q [..., Lq, d], K [..., Lk, d],
// V [..., Lk, dv] with the same leading dims -> [..., Lq, dv].
void infer_attention(Ctx& c) {
  const Shape &q = c.shape(0), &k = c.shape(1), &v = c.shape(2);
  const size_t r = q.size();
  if (r < 2 || k.size() != r || v.size() != r || !std::equal(q.begin(), q.end() - 2, k.begin()) ||
      !std::equal(q.begin(), q.end() - 2, v.begin()) || k[r - 1] != q[r - 1] || v[r - 2] != k[r - 2])
    fail("inputs " + str(q) + ", " + str(k) + ", " + str(v) + " are not [..., Lq, d], [..., Lk, d], [..., Lk, dv]");
  Shape out = q;
  out.back() = v.back();
  c.set(0, c.dtype(0), out);
}

// ---- Constants and generators ----

// Constant's value attribute (value, value_int(s), value_float(s)); the loader gives each a tensor.
const Attribute& constant_value(const Node& n) {
  for (const char* key : {"value", "value_int", "value_ints", "value_float", "value_floats"}) {
    const Attribute* a = n.attr(key);
    if (a && a->tensor_dtype != DType::undefined) return *a;
  }
  fail("Constant has no value AutoVM can read (sparse and string constants are not supported)");
}

void infer_constant(Ctx& c) {
  const Attribute& a = constant_value(c.node());
  c.set(0, a.tensor_dtype, a.tensor_shape);
}

bool eval_constant(Ctx& c) {
  const Attribute& a = constant_value(c.node());
  if (!a.tensor) return false;
  c.set_value(0, *a.tensor);
  return true;
}

void infer_constant_of_shape(Ctx& c) {
  const std::vector<int64_t> dims = c.need_ints(0, "shape");
  if (c.rank(0) != 1) fail("its shape input must be 1-D, got shape " + str(c.shape(0)));
  for (int64_t d : dims) {
    if (d < 0) fail("shape " + str(dims) + " has a negative dim");
  }
  const Attribute* value = c.node().attr("value");
  if (value && (value->tensor_dtype == DType::undefined || element_count(value->tensor_shape) != 1)) {
    fail("its value attribute must be a tensor of one element");
  }
  c.set(0, value ? value->tensor_dtype : DType::f32, dims);
}

bool eval_constant_of_shape(Ctx& c) {
  const Attribute* value = c.node().attr("value");
  if (value && !value->tensor) return false;
  ConstValue out = c.blank(0);
  for (int64_t i = 0; i < element_count(out.shape); ++i) {
    if (value) put(out, *value->tensor, 0);
    else out.floats.push_back(0.0);
  }
  c.set_value(0, std::move(out));
  return true;
}

void infer_expand(Ctx& c) {
  const std::vector<int64_t> target = c.need_ints(1, "target shape");
  for (int64_t d : target) {
    if (d < 0) fail("target shape " + str(target) + " has a negative dim");
  }
  c.set(0, c.dtype(0), broadcast({&c.shape(0), &target}));
}

bool eval_expand(Ctx& c) {
  const ConstValue& x = *c.value(0);
  ConstValue out = c.blank(0);
  for_each_broadcast(out.shape, {&x.shape}, [&](const std::vector<int64_t>& at) { put(out, x, at[0]); });
  c.set_value(0, std::move(out));
  return true;
}

// Range's length; start, limit and delta must be known scalars.
int64_t range_length(const Ctx& c) {
  const char* names[] = {"start", "limit", "delta"};
  for (size_t i = 0; i < 3; ++i) {
    if (c.need_value(i, names[i]).size() != 1) fail(std::string(names[i]) + " must be a scalar, got shape " + str(c.shape(i)));
  }
  const ConstValue &s = *c.value(0), &l = *c.value(1), &d = *c.value(2);
  if (is_floating(s.dtype) || is_floating(l.dtype) || is_floating(d.dtype)) {
    const double step = get_f(d, 0), n = std::ceil((get_f(l, 0) - get_f(s, 0)) / step);
    if (step == 0 || !(n < double(kMaxElements))) fail("Range with delta " + std::to_string(step) + " has no finite length");
    return n > 0 ? int64_t(n) : 0;
  }
  const __int128 diff = __int128(l.ints[0]) - s.ints[0], step = d.ints[0];
  if (step == 0) fail("Range delta is 0");
  __int128 n = diff / step;
  if (diff % step != 0 && (diff > 0) == (step > 0)) ++n;
  if (n > kMaxElements) fail("Range would have " + num(int64_t(n > INT64_MAX ? INT64_MAX : n)) + " elements, too many");
  return std::max<int64_t>(int64_t(n), 0);
}

void infer_range(Ctx& c) { c.set(0, c.dtype(0), {range_length(c)}); }

bool eval_range(Ctx& c) {
  const ConstValue &s = *c.value(0), &d = *c.value(2);
  ConstValue out = c.blank(0);
  for (int64_t i = 0; i < out.shape[0]; ++i) {
    if (is_floating(out.dtype)) out.floats.push_back(get_f(s, 0) + double(i) * get_f(d, 0));
    // The result lies between start and limit, but i * delta alone may not fit: wrap through uint64.
    else out.ints.push_back(int64_t(uint64_t(get_i(s, 0)) + uint64_t(i) * uint64_t(get_i(d, 0))));
  }
  c.set_value(0, std::move(out));
  return true;
}

const Rule* find_rule(std::string_view op) {
  static const std::unordered_map<std::string_view, Rule> rules = {
      {"Add", {infer_arith, eval_arith<Arith::add>}},
      {"AveragePool", {infer_pool}},
      {"BatchNormalization", {infer_batch_norm}},
      {"Cast", {infer_cast, eval_cast}},
      {"Clip", {infer_same}},
      {"Constant", {infer_constant, eval_constant}},
      {"ConstantOfShape", {infer_constant_of_shape, eval_constant_of_shape}},
      {"Conv", {infer_conv}},
      {"Div", {infer_arith, eval_arith<Arith::div>}},
      {"Dropout", {infer_dropout}},
      {"Einsum", {infer_einsum}},
      {"Elu", {infer_same}},
      {"Equal", {infer_compare, eval_equal}},
      {"Erf", {infer_same}},
      {"Exp", {infer_same}},
      {"Expand", {infer_expand, eval_expand}},
      {"Gelu", {infer_same}},
      {"Gemm", {infer_gemm}},
      {"GlobalAveragePool", {infer_global_pool}},
      {"GlobalMaxPool", {infer_global_pool}},
      {"Greater", {infer_compare}},
      {"GreaterOrEqual", {infer_compare}},
      {"HardSigmoid", {infer_same}},
      {"HardSwish", {infer_same}},
      {"Identity", {infer_same, eval_copy}},
      {"LRN", {infer_lrn}},
      {"LayerNormalization", {infer_layer_norm}},
      {"LeakyRelu", {infer_same}},
      {"Less", {infer_compare}},
      {"LessOrEqual", {infer_compare}},
      {"Linear", {infer_linear}},  // the planner's own op, made by fuse_kernels
      {"MatMul", {infer_matmul}},
      {"MaxPool", {infer_pool}},
      {"Mish", {infer_same}},
      {"Mod", {infer_mod, eval_arith<Arith::mod>}},
      {"Mul", {infer_arith, eval_arith<Arith::mul>}},
      {"Neg", {infer_same, eval_neg}},
      {"Not", {infer_not, eval_not}},
      {"Pow", {infer_arith, eval_arith<Arith::pow>}},
      {"Range", {infer_range, eval_range}},
      {"ReduceL2", {infer_reduce}},
      {"ReduceMax", {infer_reduce}},
      {"ReduceMean", {infer_reduce, eval_reduce<Reduce::mean>}},
      {"ReduceProd", {infer_reduce, eval_reduce<Reduce::prod>}},
      {"ReduceSum", {infer_reduce, eval_reduce<Reduce::sum>}},
      {"Relu", {infer_same}},
      {"ScaledDotProductAttention", {infer_attention}},  // the planner's own op, made by fuse_kernels
      {"Selu", {infer_same}},
      {"Sigmoid", {infer_same}},
      {"Silu", {infer_same}},  // the planner's own op, made by fuse_kernels
      {"Softmax", {infer_softmax}},
      {"Softplus", {infer_same}},
      {"Sqrt", {infer_same, eval_sqrt}},
      {"Sub", {infer_arith, eval_arith<Arith::sub>}},
      {"Tanh", {infer_same}},
      {"Where", {infer_where, eval_where}},
  };
  auto it = rules.find(op);
  if (it != rules.end()) return &it->second;
  const Rule* layout = find_layout_rule(op);
  return layout ? layout : find_dense_rule(op);
}

void set_input_shape(Value& v, int64_t batch) {
  if (!v.shape_declared) {
    throw Error(ErrorKind::invalid_model, "graph input " + quote(v.name) + " has no declared shape; AutoVM needs "
                "one (export with a sample input of the training shape)");
  }
  Shape s = v.declared_shape;
  if (!s.empty()) s[0] = batch;
  for (size_t j = 1; j < s.size(); ++j) {
    if (s[j] < 0) {
      throw Error(ErrorKind::invalid_model, "graph input " + quote(v.name) + " has shape " + str(v.declared_shape, true) +
                  ": dim " + num(int64_t(j)) + " has no fixed size; only the batch dim (0) may be symbolic, so "
                  "re-export with fixed sizes");
    }
  }
  if (checked_element_count(s) < 0) {
    throw Error(ErrorKind::invalid_model, "graph input " + quote(v.name) + " with batch " + num(batch) +
                " has shape " + str(s) + ", which is too large");
  }
  v.shape = std::move(s);
  v.shape_known = true;
}

void infer_node(Model& m, Node& n) {
  auto error = [&](ErrorKind kind, const std::string& message) {
    return Error(kind, "node " + quote(n.name) + " (" + n.op + "): " + message);
  };
  const Rule* rule = n.domain.empty() ? find_rule(n.op) : nullptr;
  if (!rule) throw error(ErrorKind::unsupported, "AutoVM has no shape rule for this op" + (n.domain.empty() ? "" : " of domain " + quote(n.domain)));
  bool inputs_known = true;
  for (int v : n.inputs) {
    if (v < 0) continue;
    if (!m.values[v].shape_known) throw error(ErrorKind::invalid_model, "input " + quote(m.values[v].name) + " has no known shape");
    inputs_known = inputs_known && m.values[v].value.has_value();
  }
  Ctx c(m, n);
  try {
    rule->infer(c);
    // Evaluate only when every output is present (an omitted one has no shape to fill) and small.
    bool evaluable = !n.outputs.empty();
    for (int v : n.outputs) {
      if (v < 0) {
        evaluable = false;
        continue;
      }
      if (!m.values[v].shape_known) fail("has " + num(int64_t(n.outputs.size())) + " outputs, more than this op produces");
      evaluable = evaluable && element_count(m.values[v].shape) <= kMaxFoldElements;
    }
    // Shape needs only its input's shape; every other op needs its inputs' values (Constant has none).
    if (rule->eval && evaluable && (n.op == "Shape" || inputs_known)) n.folded = rule->eval(c);
    if (n.op == "Constant") n.folded = true;
  } catch (const Failure& f) {
    throw error(ErrorKind::invalid_model, f.message);
  }
}

}  // namespace

bool has_shape_rule(std::string_view op) { return find_rule(op) != nullptr; }

void infer_shapes(Model& model, int64_t batch) {
  if (batch < 1) throw Error(ErrorKind::usage, "the batch size must be at least 1, got " + std::to_string(batch));
  for (Value& v : model.values) {
    if (v.source != ValueSource::node_output) continue;
    v.dtype = DType::undefined;
    v.shape.clear();
    v.shape_known = false;
    v.value.reset();
  }
  for (int i : model.inputs) set_input_shape(model.values[i], batch);
  for (Node& n : model.nodes) {
    n.folded = false;
    infer_node(model, n);
  }
}

}  // namespace autovm::model
