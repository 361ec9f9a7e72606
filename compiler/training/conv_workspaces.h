// Contract: convolution workspaces measured on the trainer's GPU (autovm-plan
// --conv-workspaces FILE), which replace the estimate of training/cost.h.
//
// cuDNN chooses a convolution's algorithm the first time it runs, by the memory free then: the
// fast algorithms take scratch memory of up to several times the convolution's output, and
// one whose workspace cannot be allocated is passed over for a slower one, which PyTorch then
// keeps for the rest of the process. A plan that leaves each convolution the workspace of the
// algorithm chosen with memory to spare keeps it at full speed; docs/conv-workspaces.md gives
// the measured figures. python/autovm/conv_workspaces.py measures the file.
//
// FILE is JSON: {"convolutions": [ENTRY, ...]}, each ENTRY
//   {"op": "Conv" | "ConvTranspose", "dtype": "float32" | "float16" | "bfloat16",
//    "input": [N, C, ...], "weight": [...], "output": [N, C, ...],
//    "strides": [...], "pads": [...], "dilations": [...], "group": G,
//    "forward_bytes": B, "backward_bytes": B,
//    "forward_us": T, "backward_us": T, "backward_weight_us": T}   (the times optional)
// with one stride, leading pad and dilation per spatial axis, and the dtype the convolution
// computes in (under autocast, autocast's). A node matches an entry when its op, compute dtype,
// the three shapes, strides, leading pads (ONNX's first half of "pads"), dilations and group all
// agree; its forward step then takes forward_bytes as its workspace and its backward step
// backward_bytes (the larger of the data and filter gradients'). Nodes no entry matches keep
// the estimate. Entries that match no node are allowed (a file can serve several models).
//
// The times, in microseconds, are the convolution's alone on that GPU with its measured
// workspace: forward, backward to the input and the weight, and backward to the weight alone
// (a first convolution's, whose input needs no gradient); each a number in [0, 1e12]. The cost
// model takes them over its roofline for the matched steps (plan/cost_model.h); a workspace the
// budget cuts (plan/workspace_fit.h) keeps the time of the whole one, which the slower
// algorithm cuDNN then runs exceeds.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "ir/types.h"
#include "model/model.h"

namespace autovm::training {

struct ConvWorkspace {
  int64_t forward_bytes = 0;
  int64_t backward_bytes = 0;
  double forward_us = -1;          // < 0: not measured
  double backward_us = -1;
  double backward_weight_us = -1;
  int entry = -1;  // its index in the file's "convolutions"
};

class ConvWorkspaceTable {
 public:
  // Reads FILE; throws Error(usage) naming the file, the entry and what is wrong.
  static ConvWorkspaceTable load(const std::string& path);
  // The measured workspaces of Conv or ConvTranspose node `conv` computing in `compute`, if an
  // entry matches it.
  std::optional<ConvWorkspace> find(const model::Model& m, const model::Node& conv, DType compute) const;

 private:
  // The matching key of a convolution: every field an entry is matched by.
  static std::string key(const std::string& op, DType compute, const Shape& input, const Shape& weight,
                         const Shape& output, const Shape& strides, const Shape& pads,
                         const Shape& dilations, int64_t group);
  std::map<std::string, ConvWorkspace> by_key_;
};

}  // namespace autovm::training
