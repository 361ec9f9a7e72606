// Mish: Mul(x, Tanh(Softplus(x))), torch's mish as the TorchScript exporter writes it. PyTorch
// runs one kernel that saves its input; the decomposition would keep the tanh's output too.
#include "model/fusion/match.h"

namespace autovm::model::fusion {

int fuse_mish(Matcher& g) {
  int fused = 0;
  for (size_t i = 0; i < g.node_count(); ++i) {
    const Node* mul = g.node(i, "Mul");
    if (!mul || mul->inputs.size() != 2 || mul->outputs.empty()) continue;
    for (int t : mul->inputs) {
      size_t tanh_index = 0, softplus_index = 0;
      const Node* tanh = g.producer(t, "Tanh", &tanh_index);
      if (!tanh || tanh->inputs.size() != 1 || g.readers(t) != 1) continue;
      int sp = tanh->inputs[0];
      const Node* softplus = g.producer(sp, "Softplus", &softplus_index);
      if (!softplus || softplus->inputs.size() != 1 || g.readers(sp) != 1) continue;
      int x = softplus->inputs[0];
      if (x < 0 || Matcher::other_input(*mul, t) != x) continue;
      g.fuse(i, fused_node(*mul, "Mish", {x}), {tanh_index, softplus_index});
      fused++;
      break;
    }
  }
  return fused;
}

}  // namespace autovm::model::fusion
