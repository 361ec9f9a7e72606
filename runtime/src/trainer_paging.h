// Contract: which of the trainer's tensors have their pages off the device, for the CUDA
// backend's mapped mechanism on trainer memory (runtime/README.md, "The trainer's memory on the
// vmm pool"). Host bookkeeping over a vmm DevicePool; the backend issues the copies.
//
// Per bound tensor, in the backend's order:
//   evicting(t, copied)  its bytes are being copied out; once `copied` has completed, poll()
//                        unmaps the chunks wholly inside it (DevicePool::page_out), and
//                        page_out_now(t), where the plan counts its memory free, waits for
//                        the copy if need be
//   bring_back(t)        before a copy back: kIntact when its pages never went (the page-out
//                        is cancelled: no copy needed), kCopy when they are mapped again now
//                        (the caller copies the bytes back), kStale when the trainer freed the
//                        allocation meanwhile (nothing to do: its bytes are nobody's)
// An allocation is the one bound (address and serial), so a tensor the trainer freed and a new
// one at the same address are never confused, and pages another bound tensor still uses (a
// view of the same storage) never go. hold() makes the trainer's free of a tensor wait
// (on the device) for the copies queued on it. The host waits only in page_out_now and when
// the pool, short of memory for an allocation, calls reclaim() (registered as the pool's
// reclaimer for the paging's life). Every method is thread-safe (PyTorch allocates from
// autograd's threads too).
#pragma once

#include <cuda_runtime_api.h>

#include <mutex>
#include <optional>
#include <vector>

#include "device_pool.h"
#include "plan.h"

namespace autovm::rt {

class TrainerPaging {
 public:
  TrainerPaging(DevicePool& pool, size_t tensors);
  ~TrainerPaging();
  TrainerPaging(const TrainerPaging&) = delete;
  TrainerPaging& operator=(const TrainerPaging&) = delete;

  // Records the allocation [p, p + t.bytes) lies in (p nullptr: unbound). Throws
  // Error(AUTOVM_ERR_INVALID_ARGUMENT) when p is not inside one live allocation of the pool.
  void bind(const Tensor& t, void* p);
  void evicting(const Tensor& t, cudaEvent_t copied);
  enum class Back { kIntact, kCopy, kStale };
  Back bring_back(const Tensor& t);
  // Whether t's bytes are off the device by a copy not yet brought back.
  bool away(const Tensor& t) const;
  // The tensors away whose ranges overlap [p, p + bytes): bring them back before a tensor is
  // bound there (a view of their storage would find its pages gone).
  std::vector<TensorId> away_overlapping(const void* p, uint64_t bytes) const;
  void hold(const Tensor& t, cudaEvent_t event);
  // Pages out the tensors whose copies out have completed.
  void poll();
  // The plan counts t's memory free from here: the host waits for its copy out (if it has not
  // landed yet) and pages it out, so that device memory follows the plan however far the host
  // runs ahead of the device.
  void page_out_now(const Tensor& t);
  // The pool's reclaimer: waits for every pending copy out and pages those tensors out; true
  // when memory went back. Returns false at once while another thread is in this paging.
  bool reclaim();

 private:
  struct State {
    std::optional<DevicePool::Live> live;  // the allocation bound
    uintptr_t address = 0;                  // the range bound: [address, address + bytes)
    uint64_t bytes = 0;
    bool away = false;                      // copied out, not brought back
    bool paged = false;                     // its whole chunks unmapped
  };
  struct PageOut {
    TensorId tensor;
    cudaEvent_t copied;
  };
  State& state(const Tensor& t) { return tensors_[static_cast<size_t>(t.id)]; }
  const State& state(const Tensor& t) const { return tensors_[static_cast<size_t>(t.id)]; }
  // Unmaps tensor id's chunks, unless another bound tensor that is not away overlaps its range
  // (two plan tensors on one storage: a view): its pages then stay, and no copy back is needed.
  // True when chunks went back.
  bool page_out(TensorId id);
  // Waits for o's copy out, then page_out(o.tensor).
  bool land(const PageOut& o);
  // Drops tensor id's page-out, if one is pending.
  void cancel_page_out(TensorId id);

  mutable std::mutex mutex_;  // guards everything below
  DevicePool& pool_;
  std::vector<State> tensors_;
  std::vector<PageOut> pending_;  // copies out not yet waited for, oldest first
  size_t away_count_ = 0;         // COUNT: tensors away
};

}  // namespace autovm::rt
