// Contract: builds the whole training step from a shape-inferred model.
//
//   forward   one step per running model node (folded shape arithmetic and views excluded)
//   loss      one loss term per floating-point graph output, by TrainingOptions::loss (below)
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
#include "training/autocast.h"
#include "training/conv_workspaces.h"

namespace autovm::training {

enum class Optimizer { sgd, momentum, adam };
std::string_view name(Optimizer);
std::optional<Optimizer> parse_optimizer(std::string_view);

// The loss (autovm-plan --loss), one term per floating-point graph output, each of any shape
// [N, ...]; the first output's term is the plan's `loss`:
//   cross_entropy  softmax cross-entropy over axis 1 against int64 labels of the output's shape
//                  without axis 1: class logits [N, C] with labels [N], or per pixel / voxel,
//                  [N, C, H, W] with [N, H, W]. Every output is scored against the same labels
//                  (torchvision's segmentation models: out and aux). Steps
//                  "SoftmaxCrossEntropyLoss" {output, label} -> {loss, log_prob} and its Grad
//                  {log_prob, label} -> {d output}.
//   mse            mean squared error against a float target of the output's shape (tensor kind
//                  label: "label" for the first output, "label.K" for output K). Steps
//                  "MeanSquaredErrorLoss" {output, target} -> {loss} and its Grad
//                  {output, target} -> {d output}.
//   external       the training script computes the loss outside the plan (Dice, focal, ...):
//                  step "ExternalLoss" {outputs} -> {loss} with a workspace of the outputs'
//                  bytes (the loss's own memory, counted as a reserve: an elementwise loss holds
//                  at least one tensor of its input's size; a measured --reserve for
//                  "/ExternalLoss" adds to it), then "ExternalLossGrad" {output} -> {d output}
//                  for each output: backward starts from the outputs' gradients.
enum class Loss { cross_entropy, mse, external };
std::string_view name(Loss);  // "cross-entropy", "mse", "external"
std::optional<Loss> parse_loss(std::string_view);

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
  // Measured workspaces (autovm-plan --conv-workspaces), in place of the estimate for the
  // convolutions they match.
  ConvWorkspaceTable conv_workspaces;
  DataParallelOptions data_parallel;
  // Max pooling keeps the int64 positions of its maxima (an "Indices" output of the output's
  // shape, named "<node>/indices" when the model has none) and its backward reads them and
  // its input, not its output: what PyTorch's autograd saves for max_pool2d (autovm-plan
  // --pool-indices). A MaxPool node whose model gives it an Indices output always works so.
  bool pool_indices = false;
  Loss loss = Loss::cross_entropy;
  // torch.autocast (autovm-plan --autocast; autocast.h): per-op dtypes, the weights' cast
  // copies ("<parameter>/autocast_bf16", a "Cast" step each, kept for backward), fp32
  // parameters, gradients and optimizer state; with fp16, GradScaler's steps
  // "GradScalerUnscale" (every gradient, in place, before the optimizer) and "GradScalerUpdate".
  Autocast autocast = Autocast::none;
};

struct TrainingStep {
  TrainingGraph graph;
  // The graph outputs the loss reads (floating-point ones, in the model's order), their storage
  // (a view's source may have another shape) and their shapes as the model has them.
  std::vector<TensorId> outputs;
  std::vector<Shape> output_shapes;
  TensorId logits = kNoTensor;  // outputs[0]
  Shape logits_shape;           // output_shapes[0]: [batch, classes] for a classifier
  int conv_workspaces_measured = 0;  // convolutions whose workspaces TrainingOptions' table gave
  // Their workspace tensors (forward and backward), each with the estimate it replaced.
  struct MeasuredWorkspace {
    TensorId tensor = kNoTensor;
    int64_t estimate_bytes = 0;
    int entry = -1;         // the measured entry (ConvWorkspace::entry)
    bool backward = false;  // of the backward step, else of the forward
    int64_t measured_bytes = 0;  // set when cut: what was measured (the tensor has the cut size)
    bool cut = false;       // by plan/workspace_fit.h, to fit the budget
  };
  std::vector<MeasuredWorkspace> measured_workspaces;
  TensorId label = kNoTensor;   // the first term's labels or target
  TensorId loss = kNoTensor;    // the first term's scalar loss
  Loss loss_kind = Loss::cross_entropy;
  DataParallelOptions data_parallel;     // what build_training_step applied
  std::vector<TensorId> gradient_buckets;  // DDP's buckets, in the order they are filled
  // True when the model looks like an inference export (batch norm folded into convolutions,
  // no dropout); `inference_hint` then says why and how to export for training.
  bool looks_like_inference_export = false;
  std::string inference_hint;
};

// Throws Error(invalid_model) when the model has no floating-point output of rank 2 or more
// computed by the model (or, for cross-entropy, one with no class axis), and
// Error(unsupported) when a node that must run has no gradient rule.
TrainingStep build_training_step(const model::Model& model, const TrainingOptions& options);

}  // namespace autovm::training
