// Contract: builds the whole training step from a shape-inferred model.
//
//   forward   one step per running model node (folded shape arithmetic and views excluded)
//   loss      softmax cross-entropy of the first graph output (the logits, [batch, classes])
//             against integer labels [batch]
//   backward  one "<Op>Grad" step per forward step that has a gradient to propagate, in reverse
//             order, from the gradient rules table; a "GradSum" step accumulates in place when a
//             tensor receives a second gradient
//   optimizer one update step per parameter, in place, with its state tensors
//
// The order is deterministic: it follows the model's topological order.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ir/graph.h"
#include "model/model.h"

namespace autovm::training {

enum class Optimizer { sgd, momentum, adam };
std::string_view name(Optimizer);
std::optional<Optimizer> parse_optimizer(std::string_view);

// Data-parallel training (torch.nn.parallel.DistributedDataParallel, autovm-plan
// --data-parallel): DDP's Reducer keeps, for the whole of training, one flat bucket tensor per
// group of parameter gradients (gradient_as_bucket_view=False, the default: gradients are copied
// into their bucket, all-reduced there and copied back into .grad). Buckets are filled in the
// order gradients are ready in backward; a bucket closes once it holds at least its cap: the
// first `first_bucket_bytes` (torch.distributed._DEFAULT_FIRST_BUCKET_BYTES), every later one
// `bucket_cap_bytes` (DDP's bucket_cap_mb, MiB). append_gradient_buckets adds each bucket as a
// persistent tensor of kind buffer named "ddp_bucket.K", so that every budget, the swap plan
// and the PyTorch memory model count them.
struct DataParallelOptions {
  bool enabled = false;
  int64_t bucket_cap_bytes = int64_t(25) << 20;
  int64_t first_bucket_bytes = int64_t(1) << 20;
};

struct TrainingOptions {
  Optimizer optimizer = Optimizer::sgd;
  int64_t conv_workspace_limit = int64_t(256) << 20;  // see training/cost.h
  DataParallelOptions data_parallel;
  // Max pooling keeps the int64 positions of its maxima (an "Indices" output of the output's
  // shape, named "<node>/indices" when the model has none) and its backward reads them and
  // its input, not its output: what PyTorch's autograd saves for max_pool2d (autovm-plan
  // --pool-indices). A MaxPool node whose model gives it an Indices output always works so.
  bool pool_indices = false;
};

struct TrainingStep {
  TrainingGraph graph;
  TensorId logits = kNoTensor;  // its storage; may be a view's source of another shape
  Shape logits_shape;           // [batch, classes]
  TensorId label = kNoTensor;
  TensorId loss = kNoTensor;
  DataParallelOptions data_parallel;     // what build_training_step applied
  std::vector<TensorId> gradient_buckets;  // DDP's buckets, in the order they are filled
  // True when the model looks like an inference export (batch norm folded into convolutions,
  // no dropout); `inference_hint` then says why and how to export for training.
  bool looks_like_inference_export = false;
  std::string inference_hint;
};

// Throws Error(invalid_model) when the model has no usable logits output, and
// Error(unsupported) when a node that must run has no gradient rule.
TrainingStep build_training_step(const model::Model& model, const TrainingOptions& options);

}  // namespace autovm::training
