// HardSwish: Mul(x, HardSigmoid(x)) with alpha 1/6 and beta 1/2, torch's hardswish as exporters
// before opset 14 write it. PyTorch runs one kernel that saves its input.
#include "model/fusion/match.h"

namespace autovm::model::fusion {

int fuse_hard_swish(Matcher& g) {
  int fused = 0;
  for (size_t i = 0; i < g.node_count(); ++i) {
    const Node* mul = g.node(i, "Mul");
    if (!mul || mul->inputs.size() != 2 || mul->outputs.empty()) continue;
    for (int h : mul->inputs) {
      size_t hs_index = 0;
      const Node* hs = g.producer(h, "HardSigmoid", &hs_index);
      if (!hs || hs->inputs.size() != 1 || g.readers(h) != 1) continue;
      if (!near(hs->attr_f("alpha", 0.2), 1.0 / 6) || !near(hs->attr_f("beta", 0.5), 0.5)) continue;
      int x = hs->inputs[0];
      if (x < 0 || Matcher::other_input(*mul, h) != x) continue;
      g.fuse(i, fused_node(*mul, "HardSwish", {x}), {hs_index});
      fused++;
      break;
    }
  }
  return fused;
}

}  // namespace autovm::model::fusion
