// Gelu: Mul(Mul(x, Add(Erf(Div(x, sqrt 2)), 1)), 0.5), torch's exact gelu (approximate="none")
// as the TorchScript exporter writes it. PyTorch runs one kernel that saves its input; the
// decomposition would keep the erf's input and output and the product as well.
#include <cmath>

#include "model/fusion/match.h"

namespace autovm::model::fusion {
int fuse_gelu(Matcher& g) {
  int fused = 0;
  for (size_t i = 0; i < g.node_count(); ++i) {
    const Node* half = g.node(i, "Mul");
    if (!half || half->inputs.size() != 2 || half->outputs.empty()) continue;
    int q = -1, p = -1, e = -1, a = -1;
    size_t product_index = 0, add_index = 0, erf_index = 0, div_index = 0;
    const Node* product = g.sole_operand(*half, "Mul", &q, &product_index);
    if (!product || !near(g.scalar(Matcher::other_input(*half, q)), 0.5)) continue;
    const Node* add = g.sole_operand(*product, "Add", &p, &add_index);
    if (!add) continue;
    const int x = Matcher::other_input(*product, p);
    const Node* erf = g.sole_operand(*add, "Erf", &e, &erf_index);
    if (x < 0 || !erf || !near(g.scalar(Matcher::other_input(*add, e)), 1.0)) continue;
    a = erf->inputs.empty() ? -1 : erf->inputs[0];
    const Node* div = g.producer(a, "Div", &div_index);
    if (!div || g.readers(a) != 1 || div->inputs.size() != 2 || div->inputs[0] != x ||
        !near(g.scalar(div->inputs[1]), std::sqrt(2.0)))
      continue;
    g.fuse(i, fused_node(*half, "Gelu", {x}), {product_index, add_index, erf_index, div_index});
    fused++;
  }
  return fused;
}

}  // namespace autovm::model::fusion
