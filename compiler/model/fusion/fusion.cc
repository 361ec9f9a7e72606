// fuse_kernels (fusion.h): each pattern over the whole model, then one rewrite.
#include "model/fusion/fusion.h"

#include "model/fusion/match.h"

namespace autovm::model {

FusionCounts fuse_kernels(Model& model) {
  fusion::Matcher g(model);
  FusionCounts counts;
  // Larger patterns first: none of them is part of another, but each takes its nodes.
  const std::pair<const char*, int (*)(fusion::Matcher&)> patterns[] = {
      {"ScaledDotProductAttention", fusion::fuse_attention},
      {"LayerNormalization", fusion::fuse_layer_norm}, {"Gelu", fusion::fuse_gelu},
      {"Mish", fusion::fuse_mish},                      {"HardSwish", fusion::fuse_hard_swish},
      {"Silu", fusion::fuse_silu},
      {"Linear", fusion::fuse_linear}};
  bool any = false;
  for (const auto& [op, fuse] : patterns)
    if (int n = fuse(g)) {
      counts[op] = n;
      any = true;
    }
  if (any) g.apply();
  return counts;
}

}  // namespace autovm::model
