// Contract: what the executor asks of the memory underneath it. The executor owns the residency
// bookkeeping (when a tensor is resident, docs/execution-model.md); a backend only moves bytes
// and orders its work against the trainer's compute stream.
//
// Calls come in the executor's order. Per training-step boundary: step_enqueued(s) once the
// trainer has enqueued step s (s = -1: before step 0), then the actions issued after s. Per
// tensor: evict_issue, then evict_complete; prefetch_issue, then prefetch_complete; discard, then
// (maybe) recompute_prepare; between an evict_complete and the next prefetch_issue (if any),
// remote_read_prepare for each step that reads it remotely. At step_begin(s): the completions
// due before s, then the remote reads of s, then waits_done(s).
// `stream` is the trainer's compute stream (the CUDA backend records and waits on events against
// it; the host backend ignores it). Failures throw rt::Error.
#pragma once

#include <memory>
#include <vector>

#include "plan.h"

namespace autovm::rt {

class DevicePool;  // device_pool.h

// What a backend measures and counts (CUDA backend; empty elsewhere): the stalls measured on
// the compute stream, by step, and trainer paging's counts.
struct BackendStats {
  std::vector<double> by_step_us;  // [step] summed over the waits measured
  double total_us = 0;
  int64_t late = 0;      // waits that held the compute stream longer than kLateUs
  int64_t measured = 0;  // waits timed
  // Trainer memory on a vmm pool (the mapped mechanism), counted by the backend:
  int64_t late_requires = 0;     // require() calls that had to bring a tensor back or wait
  int64_t stale_prefetches = 0;  // copies back skipped: the trainer had freed the allocation
  double host_wait_us = 0;       // SUM: TrainerPaging::HostTimes::wait_us
  double paging_us = 0;          // SUM: TrainerPaging::HostTimes::vmm_us
};
inline constexpr double kLateUs = 5.0;

class Backend {
 public:
  virtual ~Backend() = default;
  // Where the tensor lies: the range the trainer bound to it, else its place in the arena;
  // nullptr when the backend has no memory (accounting only).
  void* pointer(const Tensor& t) {
    const auto i = static_cast<size_t>(t.id);
    return i < bound_.size() && bound_[i] ? bound_[i] : at(t.offset);
  }
  // The address `offset` bytes into the backend's memory (the arena, then the room for chain
  // temporaries: Plan::memory_bytes()); nullptr in accounting-only mode.
  virtual void* at(int64_t offset) = 0;
  // From now on the tensor lies at `p` (t.bytes long, the trainer's memory); nullptr: back in
  // the arena. Throws Error(AUTOVM_ERR_INVALID_ARGUMENT) for memory the backend cannot move.
  virtual void bind(const Tensor& t, void* p) {
    if (bound_.size() <= static_cast<size_t>(t.id)) bound_.resize(static_cast<size_t>(t.id) + 1);
    bound_[static_cast<size_t>(t.id)] = p;
  }
  // Whether the trainer bound a range to the tensor.
  bool bound(const Tensor& t) const {
    const auto i = static_cast<size_t>(t.id);
    return i < bound_.size() && bound_[i] != nullptr;
  }
  virtual bool has_memory() const = 0;
  // The trainer has enqueued step s on `stream` (-1: the start of the training step): copies
  // issued from here on may start once the stream passes this point.
  virtual void step_enqueued(StepIndex, void*) {}
  // Copy the tensor's bytes to host memory (issued after its last use before the eviction).
  virtual void evict_issue(const Tensor& t, void* stream) = 0;
  // The copy is complete: release the tensor's memory.
  virtual void evict_complete(const Tensor& t, void* stream) = 0;
  // The tensor's memory is back; start copying its bytes from host memory, once the evictions of
  // a.wait_evicted (the prefetch action) no longer read the range.
  virtual void prefetch_issue(const Tensor& t, const Action& a, void* stream) = 0;
  // The bytes must be in place before the step that waits on this starts.
  virtual void prefetch_complete(const Tensor& t, void* stream) = 0;
  // Drop the tensor's memory without a copy.
  virtual void discard(const Tensor& t, void* stream) = 0;
  // A discarded tensor is about to be written again by a recomputation: its memory must be back
  // (its contents need not be) before the step.
  virtual void recompute_prepare(const Tensor&, void*) {}
  // Step s reads t, which an evict has put on the host, remotely (docs/execution-model.md,
  // "Remote reads"). Before s runs on `stream`, kernels must be able to read t's bytes, from
  // host memory, with no page fault and no copy to the device, at t's own address, or at
  // remote_address(t) while s runs where the backend cannot map its own; t's device memory
  // stays released. The backend undoes what it did (if anything) once s no longer needs it,
  // before a later prefetch of t (which must still work) and before t's range is freed or
  // reused: its step_enqueued(s) is the first point where s is enqueued.
  virtual void remote_read_prepare(const Tensor&, StepIndex, void*) {}
  // Where a step reading t remotely finds it, when that is not t's own range (pointer(t)):
  // nullptr when it is.
  virtual void* remote_address(const Tensor&) { return nullptr; }
  // The trainer is about to read t on `stream`: wherever the backend has its bytes, they are
  // back in t's range before `stream` goes on (a late or wrong plan costs time, never a read of
  // memory that is not there). Backends whose moves keep the bytes addressable do nothing.
  virtual void require(const Tensor&, void*) {}
  // Every bound tensor whose bytes the backend has off the device comes back, `stream` waiting
  // for them (autovm_runtime_restore).
  virtual void restore(void*) {}
  // step_begin(s) has made every wait it needs before step s.
  virtual void waits_done(StepIndex, void*) {}
  // The figures so far (may synchronise with the device; valid until the next call);
  // reset_stats() zeroes them. Backends that measure none report none.
  virtual const BackendStats& stats() {
    static const BackendStats none;
    return none;
  }
  virtual void reset_stats() {}

 private:
  std::vector<void*> bound_;  // [tensor] the trainer's range, or nullptr
};

struct HostBackendOptions {
  int64_t arena_cap_bytes = int64_t{1} << 30;  // a larger arena runs in accounting-only mode
  // No arena: only the ranges the trainer binds (AUTOVM_MEMORY_TRAINER), which the host backend
  // never writes or reads (like migration, a move leaves their bytes as they are).
  bool trainer_memory = false;
};

// The arena in host memory: evict copies to a per-tensor shadow buffer and poisons the arena
// range with kPoison; prefetch copies back; discard poisons; a remote read copies the shadow into
// the range for its step and poisons it again at the next boundary (the arena packed by
// residency keeps the range the tensor's at that step: residency_layout.h). With trainer memory
// it only counts.
std::unique_ptr<Backend> make_host_backend(const Plan& plan, const HostBackendOptions& options);

inline constexpr unsigned char kPoison = 0xA5;

// The CUDA backend (runtime/src/cuda_backend.cc), in builds with CUDA (AUTOVM_WITH_CUDA).
struct CudaBackendOptions {
  autovm_mechanism mechanism = AUTOVM_MECHANISM_STAGED;  // resolved: never MECHANISM_PLAN
  autovm_mode mode = AUTOVM_MODE_PLAN;
  int device = 0;
  int64_t free_margin_bytes = int64_t{1} << 30;
  bool allow_oversubscribe = false;
  // Trainer memory with the mapped mechanism: the vmm pool the trainer's tensors lie in.
  DevicePool* pool = nullptr;
  // staged: advise the arena cudaMemAdviseSetAccessedBy(device), so that the copy bringing a
  // discarded range back finds its pages mapped (cuda_backend.cc; off only to measure).
  bool advise_accessed_by = true;
  // No arena: only the ranges the trainer binds (AUTOVM_MEMORY_TRAINER), moved by migration
  // (the prefetch mechanism, managed memory) or by the copy engine with their pages unmapped
  // while they are away (the mapped mechanism, a vmm pool: trainer_paging.h).
  bool trainer_memory = false;
};
std::unique_ptr<Backend> make_cuda_backend(const Plan& plan, const CudaBackendOptions& options);

}  // namespace autovm::rt
