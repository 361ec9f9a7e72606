// Contract: memory a trainer holds beyond the training graph's tensors, step by step.
//
// A trainer's framework allocates more than the graph has tensors for: PyTorch's cuDNN
// workspaces (its algorithm choice takes what is free), max pooling's indices, the caching
// allocator's rounding, tensors its Python code still references. A profile run measures it
// (the PyTorch adapter's memory trace: python/autovm/README.md, "The budget is PyTorch's"),
// and `autovm-plan --reserve FILE` plans with it: each step's reserve is scratch memory of that
// step only, so it becomes part of the step's workspace tensor (a new one,
// "<node>/<op>/reserve_step<id>", where the step has none). Every pass then counts it as it counts a workspace: in the step's
// working set, unavoidable there, never moved. Step times are left as they were (the reserve
// is not memory the step's kernels read or write). Step::reserve_bytes records each step's
// part, which the plan writes as steps[].reserve_bytes, so that a trace of a run under the
// plan can tell the trainer's memory from the plan's.
//
// FILE is JSON: {"step_bytes": [bytes for step 0, step 1, ...]}, one non-negative integer per
// step of the training step, or {"by_node": {"<node>/<op>": bytes}} for the steps named (the
// keys of --step-times); steps not named reserve nothing.
#pragma once

#include <string>

#include "ir/graph.h"

namespace autovm {

// Throws Error(usage) naming the file and what is wrong with it. Returns the bytes added.
int64_t apply_step_reserve(const std::string& path, TrainingGraph& graph);

}  // namespace autovm
