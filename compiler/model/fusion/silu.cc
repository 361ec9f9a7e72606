// Silu: Mul(x, Sigmoid(x)), torch.nn.functional.silu as the TorchScript exporter writes it.
// PyTorch runs one kernel that saves its input; the decomposition would keep the sigmoid's
// output as well.
#include "model/fusion/match.h"

namespace autovm::model::fusion {

int fuse_silu(Matcher& g) {
  int fused = 0;
  for (size_t i = 0; i < g.node_count(); ++i) {
    const Node* mul = g.node(i, "Mul");
    if (!mul || mul->inputs.size() != 2 || mul->outputs.empty()) continue;
    for (int s : mul->inputs) {
      size_t sig_index = 0;
      const Node* sig = g.producer(s, "Sigmoid", &sig_index);
      if (!sig || sig->inputs.size() != 1 || g.readers(s) != 1) continue;
      int x = sig->inputs[0];
      if (x < 0 || Matcher::other_input(*mul, s) != x) continue;
      g.fuse(i, fused_node(*mul, "Silu", {x}), {sig_index});
      fused++;
      break;
    }
  }
  return fused;
}

}  // namespace autovm::model::fusion
