// Contract: the small value types every layer of the compiler shares.
//
// Glossary (the planner's terms, defined once here):
//   tensor     a buffer the training step reads or writes: an input, a parameter, an activation...
//              Identified by a dense TensorId (its index in TrainingGraph::tensors).
//   step       one operation of the training step, in execution order. Time is the step index
//              (StepIndex): step s runs after step s-1 finishes on the compute stream.
//   interval   a span of steps [first, last]. BOTH ENDS ARE INCLUSIVE, everywhere in AutoVM.
//   lifetime   the interval from the step that defines a tensor to the last step that uses it.
//   live bytes the bytes of every tensor whose lifetime contains a step; the peak of live bytes
//              is the bound no arena layout can beat.
//   residency  whether a tensor's bytes sit on the GPU at a given step (swap planning).
//   action     a memory operation attached before or after a step: prefetch, evict, discard,
//              recompute, advise.
//   budget     the most bytes that may be resident on the GPU at any step, in either of its
//              two moments.
//   moment     each step has two: the one before it, where the recompute chains due there run
//              with their temporaries and what the step allocates as it starts (its new outputs,
//              its workspace) is not there yet; and the step itself, without the temporaries
//              (docs/execution-model.md, plan/gaps.h step_allocations).
//   gap        a stretch between two consecutive uses of a tensor where it may be off the GPU
//              (plan/gaps.h).
//   gap split  a backward step added to a saved activation's uses while planning, so that the
//              planner may regenerate it there and move it from there (plan/gap_split.h).
//   bound      a step time no plan beats under a budget (plan/bound.h); a pair bound counts
//              the departures before one step and the tail after a later one together, and a
//              sequence of such steps carries the earliest start of one to the next.
//   workspace  a step's scratch memory, live for that step alone (a tensor of kind workspace);
//              a convolution's is the im2col estimate (training/cost.h) or, measured on the
//              trainer's GPU, what cuDNN's fastest algorithm takes (training/conv_workspaces.h),
//              cut where the budget cannot hold it (plan/workspace_fit.h).
//   chain      the forward steps a recompute runs again to make a tensor: its producer and the
//              producers of its inputs that died (temporaries, there in the moment before the
//              step the chain is due at); only steps whose op the options allow
//              (plan/recompute_ops.h, autovm-plan --recompute-ops).
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

namespace autovm {

using TensorId = int32_t;
using StepIndex = int64_t;  // an index into the flattened schedule of the training step
using Shape = std::vector<int64_t>;

inline constexpr TensorId kNoTensor = -1;

enum class DType : uint8_t { undefined, f32, f16, bf16, f64, i64, i32, i16, i8, u8, boolean };

enum class TensorKind : uint8_t {
  input,            // the training batch's data
  label,            // integer class labels of the batch
  parameter,        // trainable weight: lives across steps
  buffer,           // non-trainable state (batch norm running statistics, float constants)
  gradient,         // gradient of a parameter: defined in backward, consumed by the optimizer
  optimizer_state,  // momentum, Adam moments: live across steps
  activation,       // forward value (and the loss's saved values)
  activation_grad,  // gradient of an activation: backward only
  workspace,        // scratch memory of one step (convolution algorithms), live for that step only
};
inline constexpr int kTensorKindCount = 9;

enum class Phase : uint8_t { forward, loss, backward, optimizer };

std::string_view name(DType);
std::string_view name(TensorKind);
std::string_view name(Phase);
int64_t element_size(DType);       // bytes of one element; 0 for undefined
bool is_floating(DType);
bool persists_across_steps(TensorKind);  // parameter, buffer, optimizer_state

int64_t element_count(const Shape&);  // product of dims; 1 for a scalar

}  // namespace autovm
