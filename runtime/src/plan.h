// Contract: the plan as the runtime sees it, read from JSON by load_plan() and validated so that
// the executor never meets an id, a step or an offset out of range, nor an action sequence its
// state machine cannot follow. Every problem throws rt::Error(AUTOVM_ERR_PLAN) naming the field
// and index ("tensors[3].offset"). Names are kept for messages and lookups; the executor works
// on integer ids only.
#pragma once

#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "autovm/autovm.h"

namespace autovm::rt {

// The one internal error type; converted to a status and a message at the C boundary.
class Error : public std::runtime_error {
 public:
  Error(autovm_status status, std::string message)
      : std::runtime_error(std::move(message)), status_(status) {}
  autovm_status status() const { return status_; }

 private:
  autovm_status status_;
};

using TensorId = int32_t;
using StepIndex = int64_t;  // an index into the steps; -1: before step 0; n: the end

struct Tensor {
  TensorId id = 0;
  std::string name;
  autovm_tensor_kind kind = AUTOVM_TENSOR_ACTIVATION;
  std::string dtype;
  int64_t bytes = 0;
  int64_t offset = 0;
  StepIndex first = 0, last = 0;  // lifetime, inclusive
  bool persistent = false;
  // The plan keeps it on the host between training steps: its first action in a step is a
  // prefetch, or a remote read, with no evict before it (execution model, rule 4).
  bool starts_on_host = false;
};

struct Step {
  StepIndex id = 0;
  std::string op, phase, node;
  std::vector<TensorId> inputs, outputs;
  TensorId workspace = -1;
  double compute_us = 0;  // predicted by the planner; 0 when the plan does not say
  int64_t reserve_bytes = 0;  // of the workspace: the trainer's memory (--reserve)
};

inline constexpr int64_t kNoTemporary = std::numeric_limits<int64_t>::min();

struct Action {
  autovm_action_kind kind = AUTOVM_ACTION_ADVISE;
  TensorId tensor = 0;
  int64_t bytes = 0;
  StepIndex after_step = -1;
  StepIndex ready_before_step = 0;
  StepIndex source_step = -1;
  std::string advice;
  // A chain temporary (a recompute after the tensor's lifetime): where it lies for its one
  // step, counted from the end of the arena (the arena's range is another tensor's by then;
  // negative: inside an arena packed by residency, residency_layout.h); else kNoTemporary.
  int64_t temporary_offset = kNoTemporary;
  // A prefetch into a range that these tensors' evictions may still be reading when it may start
  // (an arena packed by residency, residency_layout.h): its copy waits for them. Else empty.
  std::vector<TensorId> wait_evicted;
};

struct Plan {
  std::string source;  // the file, or "<memory>", for messages
  int64_t arena_bytes = 0;
  int64_t budget_bytes = 0;
  int64_t temporary_bytes = 0;  // room after the arena for the chain temporaries of any one step
  std::string mechanism;  // options.mechanism: the transfer mechanism the plan was made for
  std::vector<Tensor> tensors;
  std::vector<Step> steps;
  std::vector<Action> actions;
  std::unordered_map<std::string, TensorId> by_name;  // names and aliases

  StepIndex step_count() const { return static_cast<StepIndex>(steps.size()); }
  // The bytes a backend allocates: the arena, then the temporaries' room.
  int64_t memory_bytes() const { return arena_bytes + temporary_bytes; }
};

// A recompute after the tensor's lifetime: the tensor is a chain temporary for that one step
// (the runtime's own copy of docs/execution-model.md, "Recompute chains and temporaries").
inline bool is_chain_temporary(const Action& a, const Tensor& t) {
  return a.kind == AUTOVM_ACTION_RECOMPUTE && !t.persistent && a.ready_before_step > t.last;
}

// Whether step `first`, the first of t's lifetime, allocates t as it starts, after the recompute
// chains before it (docs/execution-model.md, "The moment before a step"): t is one of its outputs
// that it does not read, or its workspace when the trainer reserves none of it. Such a tensor is
// not there in the moment before its first step, where chain temporaries are.
inline bool allocated_by_its_step(const Plan& p, const Tensor& t) {
  if (t.persistent || t.first < 0 || t.first >= p.step_count()) return false;
  const Step& s = p.steps[static_cast<size_t>(t.first)];
  if (s.workspace == t.id) return s.reserve_bytes == 0;
  auto has = [&](const std::vector<TensorId>& ids) {
    for (TensorId id : ids)
      if (id == t.id) return true;
    return false;
  };
  return has(s.outputs) && !has(s.inputs);
}

// Points in the runtime's timeline, in order: issue after step -1 (at step_begin(0)) < completion
// at step_begin(s) < issue at step_end(s) < completion by the end (at step_end(n-1)). A tensor's
// actions are met in the order of their issue points. Recomputes and remote reads happen at
// step_begin(ready_before_step), after the completions due there.
inline int64_t issue_point(const Action& a) {
  return a.kind == AUTOVM_ACTION_RECOMPUTE || a.kind == AUTOVM_ACTION_READ_REMOTE
             ? 4 * a.ready_before_step
             : 4 * a.after_step + 2;
}

// The tensors some step of the plan reads remotely (AUTOVM_ACTION_READ_REMOTE), by id.
inline std::vector<bool> read_remotely(const Plan& p) {
  std::vector<bool> out(p.tensors.size(), false);
  for (const Action& a : p.actions)
    if (a.kind == AUTOVM_ACTION_READ_REMOTE) out[static_cast<size_t>(a.tensor)] = true;
  return out;
}

// [tensor] the step of its last remote read in a training step when no prefetch of it comes
// at or after it and it is not persistent: after that step its host copy serves nothing (its
// range is then done with remote reads); -1 otherwise.
std::vector<StepIndex> last_remote_reads(const Plan& p);

// Parses and validates. source names the plan in messages.
Plan load_plan(std::string_view json_text, std::string source);
// Reads the file (AUTOVM_ERR_IO when it cannot), then load_plan.
Plan load_plan_file(const std::string& path);

const char* name(autovm_action_kind kind);

}  // namespace autovm::rt
