// LayerNormalization from its decomposition (exporters before opset 17):
//   mean = ReduceMean(x); d = Sub(x, mean); var = ReduceMean(Pow(d, 2));
//   y = Add(Mul(Div(d, Sqrt(Add(var, eps))), scale), bias)
// with both means over the same trailing axes, kept (keepdims 1), and scale and bias of the
// normalised shape. PyTorch runs native_layer_norm, which saves its input, the mean and the
// reciprocal standard deviation; the decomposition would keep d, its square root and more.
#include <algorithm>

#include "model/fusion/match.h"

namespace autovm::model::fusion {
namespace {

// The first axis of a mean over the trailing axes of its rank-`rank` input, or -1.
int64_t trailing_axis(const Matcher& g, const Node& mean, size_t rank) {
  if (mean.attr_i("keepdims", 1) != 1) return -1;
  std::vector<int64_t> axes = mean.attr_ints("axes");
  if (mean.inputs.size() > 1 && mean.inputs[1] >= 0) {  // opset 18: the axes are an input
    const auto& v = g.model().values[size_t(mean.inputs[1])].value;
    if (!v) return -1;
    axes = v->ints;
  }
  if (axes.empty()) return -1;
  for (int64_t& a : axes) {
    if (a < 0) a += int64_t(rank);
    if (a < 0 || a >= int64_t(rank)) return -1;
  }
  std::sort(axes.begin(), axes.end());
  for (size_t k = 0; k < axes.size(); ++k)
    if (axes[k] != int64_t(rank - axes.size() + k)) return -1;
  return axes[0];
}

bool same_axes(const Matcher& g, const Node& a, const Node& b, size_t rank) {
  return trailing_axis(g, a, rank) >= 0 && trailing_axis(g, a, rank) == trailing_axis(g, b, rank);
}

// `v` has the shape of x's axes from `axis` on.
bool normalised_shape(const Matcher& g, int v, const Shape& x, int64_t axis) {
  if (v < 0 || !g.model().values[size_t(v)].shape_known) return false;
  const Shape& s = g.model().values[size_t(v)].shape;
  return s == Shape(x.begin() + axis, x.end());
}

}  // namespace

int fuse_layer_norm(Matcher& g) {
  int fused = 0;
  for (size_t i = 0; i < g.node_count(); ++i) {
    const Node* add_bias = g.node(i, "Add");
    if (!add_bias || add_bias->inputs.size() != 2 || add_bias->outputs.empty()) continue;
    int scaled = -1, normed = -1, sd = -1, ve = -1, var = -1, sq = -1, mean = -1;
    size_t mul_i = 0, div_i = 0, sqrt_i = 0, add_eps_i = 0, var_i = 0, pow_i = 0, sub_i = 0, mean_i = 0;
    const Node* mul = g.sole_operand(*add_bias, "Mul", &scaled, &mul_i);
    if (!mul) continue;
    const Node* div = g.sole_operand(*mul, "Div", &normed, &div_i);
    if (!div || div->inputs.size() != 2) continue;
    const int d = div->inputs[0];
    sd = div->inputs[1];
    const Node* sqrt = g.producer(sd, "Sqrt", &sqrt_i);
    if (!sqrt || g.readers(sd) != 1 || sqrt->inputs.size() != 1) continue;
    ve = sqrt->inputs[0];
    const Node* add_eps = g.producer(ve, "Add", &add_eps_i);
    if (!add_eps || g.readers(ve) != 1) continue;
    const Node* var_node = g.sole_operand(*add_eps, "ReduceMean", &var, &var_i);
    if (!var_node) continue;
    const std::optional<double> eps = g.scalar(Matcher::other_input(*add_eps, var));
    if (!eps || *eps < 0) continue;
    sq = var_node->inputs.empty() ? -1 : var_node->inputs[0];
    const Node* pow = g.producer(sq, "Pow", &pow_i);
    if (!pow || g.readers(sq) != 1 || pow->inputs.size() != 2 || pow->inputs[0] != d ||
        !near(g.scalar(pow->inputs[1]), 2.0))
      continue;
    const Node* sub = g.producer(d, "Sub", &sub_i);
    if (!sub || g.readers(d) != 2 || sub->inputs.size() != 2) continue;
    const int x = sub->inputs[0];
    mean = sub->inputs[1];
    const Node* mean_node = g.producer(mean, "ReduceMean", &mean_i);
    if (x < 0 || !mean_node || g.readers(mean) != 1 || mean_node->inputs.empty() ||
        mean_node->inputs[0] != x || !g.model().values[size_t(x)].shape_known)
      continue;
    const Shape& xs = g.model().values[size_t(x)].shape;
    if (!same_axes(g, *mean_node, *var_node, xs.size())) continue;
    const int64_t axis = trailing_axis(g, *mean_node, xs.size());
    const int scale = Matcher::other_input(*mul, normed), bias = Matcher::other_input(*add_bias, scaled);
    if (!normalised_shape(g, scale, xs, axis) || !normalised_shape(g, bias, xs, axis)) continue;
    Attributes::Map attrs;
    attrs["axis"].kind = Attribute::Kind::i;
    attrs["axis"].i = axis;
    attrs["epsilon"].kind = Attribute::Kind::f;
    attrs["epsilon"].f = *eps;
    g.fuse(i, fused_node(*add_bias, "LayerNormalization", {x, scale, bias}, attrs),
           {mul_i, div_i, sqrt_i, add_eps_i, var_i, pow_i, sub_i, mean_i});
    fused++;
  }
  return fused;
}

}  // namespace autovm::model::fusion
