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
// (on the device) for the copies queued on it. The host waits only in page_out_now, before
// host memory mapped for a remote read goes (below), and when the pool, short of memory for an
// allocation, calls reclaim() (registered as the pool's reclaimer for the paging's life). Every
// method is thread-safe (PyTorch allocates from autograd's threads too).
//
// Remote reads (docs/execution-model.md, "Remote reads"): a tensor the plan reads remotely has
// host memory of its own (add_remote: HostNumaChunks in the pool's chunks), where its copy out
// lands and from where it comes back (staging(t), at the bound address's offset in its chunk,
// so that chunk k of that memory holds what chunk k of the tensor's range held). For the step
// that reads it, map_remote(t) maps that memory at its paged-out chunks (DevicePool::map_host):
// kernels read it at its own address, the edge chunks (never unmapped) from device memory.
// remote_done(t, stream) marks the end of that step on its stream. VMM mappings are not
// stream-ordered, so before the host memory goes (bring_back, for a prefetch, a require or a
// bind; page_in unmaps it) the host waits for that mark. A binding that ends while the host
// memory is mapped (the tensor's last use read it remotely) leaves it there, lent: the trainer's
// range keeps the tensor's bytes readable, until the trainer frees the allocation (the pool
// then unmaps it once the device has passed the free) or the runtime needs the memory again
// (take_back: the allocation gets device memory back, and the caller copies the bytes there).
#pragma once

#include <cuda_runtime_api.h>

#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "device_pool.h"
#include "host_numa.h"
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

  // Remote reads (contract above). `host` holds at least t.bytes plus a chunk, in chunks of the
  // pool's chunk_bytes().
  void add_remote(const Tensor& t, std::unique_ptr<HostNumaChunks> host);
  bool remote(const Tensor& t) const;
  // Where t's copy lies in its host memory (t bound). Throws Error(AUTOVM_ERR_BACKEND) when t
  // has none or is not bound.
  char* staging(const Tensor& t) const;
  // The step about to run on `stream` reads t remotely: kMapped when t's paged-out chunks map
  // its host memory now; kLocal when its pages never went (its bytes are on the device, or
  // nobody's: the trainer freed it); kBack when they could not all map it: the caller brings t
  // back (a local read too).
  enum class RemoteRead { kMapped, kLocal, kBack };
  RemoteRead map_remote(const Tensor& t, cudaStream_t stream);
  // The step that reads t remotely is enqueued on `stream` (after map_remote).
  void remote_done(const Tensor& t, cudaStream_t stream);
  // Whether t is away with its host memory mapped at its paged-out chunks (its bytes readable).
  bool readable(const Tensor& t) const;
  // t's host memory back from the allocation it is lent to (its binding ended while mapped),
  // before the memory is written again: nullopt when none is lent or the trainer freed it (the
  // pool unmaps it); else the allocation has device memory again (page_in, after the host
  // waited for the step that read it), and the caller copies `bytes` from `from` to `address`.
  struct Lent {
    DevicePool::Live live;
    uintptr_t address;
    uint64_t bytes;
    const char* from;
  };
  std::optional<Lent> take_back(const Tensor& t);
  // The trainer's free of `a` waits for `event` (that copy back): DevicePool::hold.
  void hold(const DevicePool::Live& a, cudaEvent_t event);
  // The tensors whose host memory is lent to a range overlapping [p, p + bytes); every one.
  std::vector<TensorId> lent_overlapping(const void* p, uint64_t bytes) const;
  std::vector<TensorId> lent() const;

  // Host time spent by this paging since the last reset (SUM, microseconds): blocked on the
  // device (copies out waited for before their pages go, remote reads' steps waited for before
  // their host memory goes), and in the pool's mapping and unmapping of chunks.
  struct HostTimes {
    double wait_us = 0;
    double vmm_us = 0;
  };
  HostTimes host_times() const;
  void reset_host_times();

 private:
  struct State {
    std::optional<DevicePool::Live> live;  // the allocation bound
    uintptr_t address = 0;                  // the range bound: [address, address + bytes)
    uint64_t bytes = 0;
    bool away = false;                      // copied out, not brought back
    bool paged = false;                     // its whole chunks unmapped
    int64_t paged_bytes = 0;                // SUM: what its page-outs unmapped
  };
  struct Remote {
    std::unique_ptr<HostNumaChunks> host;  // nullptr: the plan never reads it remotely
    bool mapped = false;                   // at the bound allocation's paged-out chunks
    std::optional<DevicePool::Live> lent;  // still mapped at this allocation: its binding ended
    uintptr_t lent_address = 0;
    uint64_t lent_bytes = 0;
    cudaStream_t stream = nullptr;  // of the step that reads it remotely
    cudaEvent_t done = nullptr;     // recorded after that step
    bool done_recorded = false;
  };
  // The host waits until the step that reads r remotely has run (recording the mark now, on
  // its stream, if the step is still being enqueued).
  void settle(Remote& r);
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
  std::vector<Remote> remote_;    // [tensor]
  std::vector<PageOut> pending_;  // copies out not yet waited for, oldest first
  size_t away_count_ = 0;         // COUNT: tensors away
  HostTimes times_;
};

}  // namespace autovm::rt
