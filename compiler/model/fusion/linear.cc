// Linear: Add(MatMul(x, Transpose(W)), b), torch.nn.functional.linear on an input of rank 3 or
// more as the TorchScript exporter writes it (rank 2 becomes Gemm). PyTorch runs one addmm over
// the flattened input: W.t() is a view, the bias is added in the same kernel (so under autocast
// the output stays in the low precision), and it saves x and W.
#include "model/fusion/match.h"

namespace autovm::model::fusion {
namespace {

const Shape* shape(const Matcher& g, int v) {
  if (v < 0 || !g.model().values[size_t(v)].shape_known) return nullptr;
  return &g.model().values[size_t(v)].shape;
}

}  // namespace

int fuse_linear(Matcher& g) {
  int fused = 0;
  for (size_t i = 0; i < g.node_count(); ++i) {
    const Node* add = g.node(i, "Add");
    if (!add || add->inputs.size() != 2 || add->outputs.empty()) continue;
    for (int mm : add->inputs) {
      size_t mm_index = 0, t_index = 0;
      const Node* matmul = g.producer(mm, "MatMul", &mm_index);
      if (!matmul || matmul->inputs.size() != 2 || g.readers(mm) != 1) continue;
      const int x = matmul->inputs[0], wt = matmul->inputs[1], b = Matcher::other_input(*add, mm);
      const Node* transpose = g.producer(wt, "Transpose", &t_index);
      if (!transpose || transpose->inputs.size() != 1 || g.readers(wt) != 1 ||
          transpose->attr_ints("perm") != std::vector<int64_t>{1, 0})
        continue;
      const int w = transpose->inputs[0];
      const Shape *xs = shape(g, x), *ws = shape(g, w), *bs = shape(g, b);
      if (!xs || !ws || !bs || xs->size() < 2 || ws->size() != 2 || ws->at(1) != xs->back() ||
          *bs != Shape{ws->at(0)})
        continue;
      g.fuse(i, fused_node(*add, "Linear", {x, w, b}), {mm_index, t_index});
      fused++;
      break;
    }
  }
  return fused;
}

}  // namespace autovm::model::fusion
