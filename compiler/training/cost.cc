#include "training/cost.h"

#include "model/einsum.h"

#include <algorithm>
#include <array>
#include <string>
#include <unordered_map>

namespace autovm::training {
namespace {

const Shape* shape_of(const model::Model& m, int value) {
  if (value < 0 || value >= static_cast<int>(m.values.size())) return nullptr;
  const auto& v = m.values[static_cast<size_t>(value)];
  return v.shape_known ? &v.shape : nullptr;
}

double numel(const Shape* s) { return s ? static_cast<double>(element_count(*s)) : 0.0; }

// FLOPs per output element of elementwise ops.
double elementwise_cost(const std::string& op) {
  static const std::unordered_map<std::string, double> cost = {
      {"Relu", 1}, {"Clip", 2}, {"HardSigmoid", 3}, {"HardSwish", 5}, {"Sigmoid", 4},
      {"Erf", 8},  {"Exp", 8},  {"Sqrt", 4}, {"Add", 1},         {"Sub", 1},       {"Mul", 1},
      {"Div", 1},  {"Pow", 8},  {"Where", 1},       {"Dropout", 2},   {"LeakyRelu", 2},
      {"Elu", 8},  {"Selu", 8}, {"Tanh", 8},        {"Softplus", 8},  {"Mish", 12},
      {"Gelu", 12}, {"Silu", 5}, {"Less", 1}, {"Greater", 1}, {"LessOrEqual", 1}, {"GreaterOrEqual", 1}, {"Mod", 2}, {"ScatterND", 1},    {"RandomUniformLike", 4}};
  auto it = cost.find(op);
  return it == cost.end() ? 0.0 : it->second;
}

}  // namespace

bool is_matrix_product(std::string_view op) {
  constexpr std::string_view grad = "Grad";
  if (op.size() > grad.size() && op.ends_with(grad)) op.remove_suffix(grad.size());
  constexpr std::array<std::string_view, 7> products = {
      "Conv", "ConvTranspose", "Einsum", "Gemm", "Linear", "MatMul", "ScaledDotProductAttention"};
  return std::find(products.begin(), products.end(), op) != products.end();
}

double forward_flops(const model::Model& m, const model::Node& n) {
  const Shape* in0 = n.inputs.empty() ? nullptr : shape_of(m, n.inputs[0]);
  const Shape* out0 = n.outputs.empty() ? nullptr : shape_of(m, n.outputs[0]);
  const std::string& op = n.op;
  if (op == "Conv") {
    const Shape* w = n.inputs.size() > 1 ? shape_of(m, n.inputs[1]) : nullptr;
    if (!w || !out0 || w->size() < 2) return 0;
    double per_output = 1;
    for (size_t i = 1; i < w->size(); ++i) per_output *= static_cast<double>((*w)[i]);
    bool bias = n.inputs.size() > 2 && n.inputs[2] >= 0;
    return numel(out0) * (2 * per_output + (bias ? 1 : 0));
  }
  if (op == "ConvTranspose") {
    // Every input element is multiplied by Cout / group * k... weights.
    const Shape* w = n.inputs.size() > 1 ? shape_of(m, n.inputs[1]) : nullptr;
    if (!w || !out0 || w->size() < 2) return 0;
    double per_input = 1;
    for (size_t i = 1; i < w->size(); ++i) per_input *= static_cast<double>((*w)[i]);
    bool bias = n.inputs.size() > 2 && n.inputs[2] >= 0;
    return numel(in0) * 2 * per_input + (bias ? numel(out0) : 0);
  }
  if (op == "Gemm") {
    const Shape* a = in0;
    if (!a || !out0 || a->size() != 2) return 0;
    double k = static_cast<double>(n.attr_i("transA", 0) ? (*a)[0] : (*a)[1]);
    return numel(out0) * (2 * k + 1);
  }
  if (op == "Linear") {  // X [..., K] W^T + B
    if (!in0 || !out0 || in0->empty()) return 0;
    return numel(out0) * (2 * static_cast<double>(in0->back()) + 1);
  }
  if (op == "MatMul") {
    if (!in0 || !out0 || in0->empty()) return 0;
    return numel(out0) * 2 * static_cast<double>(in0->back());
  }
  if (op == "Einsum") {
    const Shape* b = n.inputs.size() > 1 ? shape_of(m, n.inputs[1]) : nullptr;
    if (!in0 || !b) return 0;
    const model::EinsumEquation e = model::parse_einsum(n.attr_s("equation", ""));
    return model::einsum_flops(model::einsum_extents(e, {in0, b}));
  }
  if (op == "ScaledDotProductAttention") {  // Q K^T and P V, and the softmax between them
    const Shape* k = n.inputs.size() > 1 ? shape_of(m, n.inputs[1]) : nullptr;
    if (!in0 || !out0 || !k || k->size() < 2 || in0->empty()) return 0;
    const double scores = numel(in0) / static_cast<double>(in0->back()) * static_cast<double>((*k)[k->size() - 2]);
    return scores * (2 * static_cast<double>(in0->back()) + 2 * static_cast<double>(out0->back()) + 5);
  }
  if (op == "BatchNormalization" || op == "LayerNormalization" || op == "InstanceNormalization" ||
      op == "GroupNormalization")
    return 8 * numel(in0);
  if (op == "MaxPool" || op == "AveragePool") {
    double window = 1;
    for (int64_t k : n.attr_ints("kernel_shape")) window *= static_cast<double>(k);
    return numel(out0) * window;
  }
  if (op == "GlobalAveragePool" || op == "GlobalMaxPool" || op == "ReduceMean" || op == "ReduceSum" ||
      op == "ReduceMax")
    return numel(in0);
  if (op == "ReduceL2") return 2 * numel(in0);  // a square and a sum per element
  if (op == "Sum" || op == "Max" || op == "Min")
    return numel(out0) * static_cast<double>(std::max<size_t>(n.inputs.size(), 2) - 1);
  if (op == "Resize" || op == "Upsample") {
    // Per output element: one read (nearest), 2^d weighted reads (linear), 4^d (cubic), over
    // the d spatial axes.
    const std::string mode = n.attr_s("mode", "nearest");
    double taps = 1;
    for (size_t i = 2; out0 && i < out0->size(); ++i) taps *= mode == "cubic" ? 4 : mode == "nearest" ? 1 : 2;
    return numel(out0) * (mode == "nearest" ? 1 : 2 * taps);
  }
  if (op == "Softmax") return 5 * numel(in0);
  if (op == "LRN") return numel(in0) * (2 * static_cast<double>(n.attr_i("size", 1)) + 4);
  return numel(out0) * elementwise_cost(op);
}

int64_t conv_workspace_bytes(const model::Model& m, const model::Node& conv, int64_t limit) {
  const Shape* x = conv.inputs.empty() ? nullptr : shape_of(m, conv.inputs[0]);
  const Shape* w = conv.inputs.size() > 1 ? shape_of(m, conv.inputs[1]) : nullptr;
  const Shape* y = conv.outputs.empty() ? nullptr : shape_of(m, conv.outputs[0]);
  if (!x || !w || !y || w->size() < 3 || y->size() < 3) return 0;
  bool unit_kernel = true;
  for (size_t i = 2; i < w->size(); ++i) unit_kernel = unit_kernel && (*w)[i] == 1;
  bool unit_stride = true;
  for (int64_t s : conv.attr_ints("strides")) unit_stride = unit_stride && s == 1;
  bool no_pad = true;
  for (int64_t p : conv.attr_ints("pads")) no_pad = no_pad && p == 0;
  if (unit_kernel && unit_stride && no_pad) return 0;
  // A transposed convolution's column matrix is over its input grid (col2im).
  const Shape* grid = conv.op == "ConvTranspose" ? x : y;
  double elements = static_cast<double>((*grid)[0]);     // N
  for (size_t i = 2; i < grid->size(); ++i) elements *= static_cast<double>((*grid)[i]);  // Ho*Wo
  for (size_t i = 1; i < w->size(); ++i) elements *= static_cast<double>((*w)[i]);  // Cin/g*kh*kw
  int64_t elt = element_size(m.values[static_cast<size_t>(conv.inputs[0])].dtype);
  double bytes = elements * static_cast<double>(elt);
  return bytes >= static_cast<double>(limit) ? limit : static_cast<int64_t>(bytes);
}

}  // namespace autovm::training
