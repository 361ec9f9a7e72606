// Contract: the residency state machine of every tensor, driven by the trainer's step boundaries
// and the plan's action schedule, by the table of docs/execution-model.md:
//
//   step_begin(s): [s == 0: move persistent tensors the plan keeps on the host there (first
//                  training step only); issue actions with after_step -1]
//                  allocate tensors whose lifetime starts at s (UNALLOCATED -> RESIDENT)
//                  complete actions due before s: evict EVICTING -> ON_HOST,
//                  prefetch PREFETCHING -> RESIDENT, recompute DISCARDED -> RESIDENT
//                  remote reads at s: the tensor stays ON_HOST (counted nowhere) and the backend
//                  makes its host copy readable for s (Backend::remote_read_prepare)
//                  check the resident bytes against the budget
//   step_end(s):   issue actions with after_step s: evict RESIDENT -> EVICTING,
//                  prefetch ON_HOST -> PREFETCHING, discard RESIDENT -> DISCARDED
//                  [s == n-1: complete actions due by the end]
//                  free tensors whose lifetime ends at s (-> UNALLOCATED; not persistent ones)
//
// Modes (autovm_mode): PLAN follows every action; DEMAND_PAGING follows them too but never asks
// the backend to prefetch or to read remotely (the tensor counts as resident again at the same
// points: its pages fault back when touched); RESIDENT ignores every action and the budget.
//
// A remote read at step s (AUTOVM_ACTION_READ_REMOTE) changes no state: s may touch the tensor
// though it is ON_HOST, and pointer() is where the backend has it readable during s. It reaches
// the backend only when the tensor's eviction did (not unmoved, below): else its bytes stayed
// where they were, and the read is local.
//
// Trainer memory (AUTOVM_MEMORY_TRAINER): an evict, prefetch, discard or initial offload of a
// tensor the trainer has not bound is skipped (never reaches the backend) and counted; the
// tensor is then "unmoved": its state follows the plan, but it counts resident until the plan
// has it resident again (its bytes stayed where the trainer left them), the actions after it up
// to that point are skipped too, and it may be bound. A non-persistent tensor's binding ends
// when it is freed.
//
// So an evicted tensor is resident through ready_before_step - 1, a prefetched one from
// after_step + 1, a discarded one is off from after_step + 1 and a recomputed one is resident
// from ready_before_step. load_plan() has checked that every tensor's actions follow these
// transitions in order; the executor asserts it.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "backend.h"
#include "plan.h"

namespace autovm::rt {

class Executor {
 public:
  Executor(std::shared_ptr<const Plan> plan, std::unique_ptr<Backend> backend, int64_t budget_bytes,
           bool strict, autovm_mode mode = AUTOVM_MODE_PLAN, bool trainer_memory = false);

  // Throw Error(AUTOVM_ERR_STATE) out of order. step_begin throws AUTOVM_ERR_OUT_OF_MEMORY in
  // strict mode when the step is over the budget, after beginning it.
  void step_begin(StepIndex s, void* stream);
  void step_end(StepIndex s, void* stream);
  // Error(AUTOVM_ERR_NOT_RESIDENT) in strict mode when t is not RESIDENT; a counted violation
  // otherwise.
  void touch(StepIndex s, TensorId t);

  // A chain temporary lies at Action::temporary_offset from the arena's end while it exists; a
  // tensor read remotely by the running step, where the backend has it readable
  // (Backend::remote_address), if not in its own range.
  void* pointer(TensorId t) {
    const int64_t temp = temporary_offset_[static_cast<size_t>(t)];
    if (temp != kNoTemporary) return backend_->at(plan_->arena_bytes + temp);
    if (remote_now_[static_cast<size_t>(t)])
      if (void* p = backend_->remote_address(tensor(t))) return p;
    return backend_->pointer(tensor(t));
  }
  // The trainer's own memory for tensor t (nullptr: back to the arena, or unbound). Only while
  // its bytes are where the trainer left them (resident, outside its lifetime, or unmoved);
  // throws Error otherwise.
  void bind(TensorId t, void* p, int64_t bytes);
  autovm_residency residency(TensorId t) const { return state_[static_cast<size_t>(t)]; }
  // The trainer is about to read t on `stream` (autovm_tensor_require): a bound tensor's bytes
  // are back before `stream` goes on, whatever the plan says (Backend::require).
  void require(TensorId t, void* stream);
  // Every bound tensor off the device comes back (autovm_runtime_restore); the plan's count
  // is unchanged.
  void restore(void* stream) { backend_->restore(stream); }
  // Reads the backend's stall timings too (may synchronise with the device).
  autovm_stats stats() const;
  void reset_stats();
  double step_stall_us(StepIndex s) const;
  const Plan& plan() const { return *plan_; }

 private:
  const Tensor& tensor(TensorId t) const { return plan_->tensors[static_cast<size_t>(t)]; }
  void set_state(TensorId t, autovm_residency next);
  // Trainer memory: whether the action on t is skipped (t not bound, or unmoved already); a
  // skip is counted and leaves t unmoved.
  bool skip(const Tensor& t, int64_t bytes);
  void set_unmoved(TensorId t, bool unmoved);
  void issue(StepIndex after_step, void* stream);
  void complete(StepIndex before_step, void* stream);
  // The remote reads of step s, after the completions due before it.
  void read_remotely(StepIndex s, void* stream);
  std::string step_label(StepIndex s) const;

  std::shared_ptr<const Plan> plan_;
  std::unique_ptr<Backend> backend_;
  int64_t budget_bytes_;
  bool strict_;
  autovm_mode mode_;
  bool trainer_memory_;

  // The schedule, by step: [after_step + 1], [ready_before_step] (n: by the end), [first], [last].
  std::vector<std::vector<size_t>> issued_after_, due_before_;
  std::vector<std::vector<size_t>> remote_at_;  // [step] its read_remote actions
  // [step] tensors whose lifetime starts there: there before the step (an input, say), or
  // allocated by the step as it starts (allocated_by_its_step, plan.h).
  std::vector<std::vector<TensorId>> present_at_, allocated_at_, freed_after_;

  std::vector<autovm_residency> state_;  // [tensor]
  std::vector<bool> unmoved_;            // [tensor] trainer memory: its last move was skipped
  std::vector<bool> remote_now_;         // [tensor] read remotely by the running step
  int64_t chain_temporary_bytes_ = 0;  // of the chains before the running step
  std::vector<int64_t> temporary_offset_;  // [tensor] while it is a chain temporary; else kNoTemporary
  std::optional<StepIndex> running_;     // between step_begin and step_end
  StepIndex next_ = 0;                   // the step step_begin expects
  autovm_stats stats_{};
};

}  // namespace autovm::rt
