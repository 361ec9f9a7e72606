// Contract: the CUDA pool behind DevicePool (device_pool.h), shared by the two files that define
// it: device_pool.cc (creation, allocation, frees, limits, managed memory; its design is there)
// and device_pool_vmm.cc (the vmm pool's chunks, paging and remote reads). Internal: included by
// those two only.
#pragma once

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "cuda_driver.h"
#include "device_pool.h"

namespace autovm::rt::pool_detail {

constexpr size_t kManagedChunk = size_t{2} << 20;

inline int64_t round_up(int64_t bytes, int64_t unit) { return (bytes + unit - 1) / unit * unit; }

// Restores the calling thread's current device (PyTorch's) on the way out.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    check(cudaGetDevice(&previous_), "cudaGetDevice");
    if (previous_ != device) check(cudaSetDevice(device), "cudaSetDevice");
  }
  ~DeviceGuard() { cudaSetDevice(previous_); }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
};

class CudaPool final : public DevicePool {
 public:
  explicit CudaPool(const DevicePoolOptions& options);
  ~CudaPool() override;
  int device() const override { return options_.device; }
  void* allocate(int64_t bytes, int device, void* stream) override;
  void add_reclaimer(const void* owner, Reclaimer reclaim) override;
  void remove_reclaimer(const void* owner) override;

  // The block for `bytes` (nullptr for 0 bytes), or nullopt when the memory refuses; throws
  // for a wrong request. Holds mutex_.
  std::optional<void*> try_allocate(int64_t bytes, int device, void* stream);

  // Whether a reclaimer gave memory back. Holds reclaim_mutex_, not mutex_ (reclaimers page
  // out through the pool).
  bool reclaim();
  void deallocate(void* ptr, void* stream) override;
  std::optional<SubAllocator::Allocation> find(const void* address) const override;
  autovm_pool_stats stats() const override;
  autovm_pool_stats stats_unlocked() const;
  void reset_peaks() override;
  void trim() override;
  void set_limit(int64_t bytes) override;
  std::optional<Live> live(const void* address, uint64_t bytes) const override;
  bool pages() const override { return va_base_ != 0; }
  int64_t page_out(const Live& a, uintptr_t address, uint64_t bytes) override;
  bool page_in(const Live& a, uintptr_t address, uint64_t bytes) override;
  int64_t map_host(const Live& a, uintptr_t address, uint64_t bytes, const uint64_t* handles,
                   size_t count) override;
  int64_t chunk_bytes() const override { return va_base_ ? static_cast<int64_t>(chunk_) : 0; }
  void hold(const Live& a, void* event, const void* owner) override;
  void drop_holds(const void* owner) override;

 private:
  int64_t allocated() const;
  uint64_t allocation_count() const;
  // The bookkeeping an address belongs to: the small allocations' range, or the rest.
  SubAllocator& owner(uintptr_t address);
  const SubAllocator& owner(uintptr_t address) const;

  // The allocation `address` lies in, as its caller sees it (a whole-chunk allocation from its
  // chunk-aligned start, its bytes as asked for).
  std::optional<SubAllocator::Allocation> find_locked(uintptr_t address) const;
  bool is_live(const Live& a) const;

  // A block for `bytes`, its chunks populated or mapped; nullopt when the capacity (or the
  // device's free memory, for managed chunks) refuses.
  // `span` > 0: only the `span` bytes from the block's first chunk boundary are used (mapped).
  std::optional<SubAllocator::Taken> take(SubAllocator& sub, int64_t bytes, SubAllocator::Tag tag,
                                          int64_t span = 0);
  cudaMemLocation device_location() const;
  void allocate_managed();

  // Prefetches to the device, on the allocating stream, the chunks of [address, address +
  // bytes) no allocation has reached yet; false (nothing changed) when the device has not that
  // much free memory less the margin now (unless oversubscription is allowed): another process
  // may have taken what was free at the pool's creation.
  bool populate(uintptr_t address, uint64_t bytes, SubAllocator::Tag tag);
  void reserve_addresses();
  CUdeviceptr chunk_address(size_t i) const { return va_base_ + i * chunk_; }
  std::pair<size_t, size_t> chunks_of(uintptr_t address, uint64_t bytes) const;

  // Maps what [address, address + bytes) needs and counts its users; false (nothing changed)
  // when that would pass the capacity or the device refuses the memory.
  bool use_chunks(uintptr_t address, uint64_t bytes);

  // Returns whether a mapped chunk has no user now; those are stamped with the free's number.
  bool unuse_chunks(uintptr_t address, uint64_t bytes);

  // Free number free_count_ + 1 happened on `stream`: an event there says when the device has
  // passed it (every use of the chunks it left unused is then done).
  void mark_free(cudaStream_t stream);

  // Unmaps the unused chunks whose last free the device has passed, into the spares, without
  // waiting: the frees are passed in order of their numbers as far as their events have
  // completed.
  void release_settled();

  // Waits until the device has passed free number `number` (host waits; for host memory
  // mapped at a freed allocation's chunk that another allocation reaches).
  void settle_through(uint64_t number);

  // Unmaps unused chunks into the spares until `needed` more bytes of chunks fit under the
  // limit: first those whose last free the device has passed, then, oldest first, the host
  // waits for the device to pass the next free and unmaps what it left unused. So the host
  // waits until the device reaches the free that makes room, not for the work queued after it:
  // a device synchronisation would also wait for the copy streams' queued prefetches and let
  // the compute stream run dry (docs/trainer-paging.md, "Waiting for room"). True when they fit.
  bool release_until_fits(int64_t needed);

  // The device has passed the oldest free not known passed (frees_.front()): it is settled,
  // and its event goes back to the spares.
  void pass_oldest_free();

  // Of [address, address + bytes), the bytes of the chunks without device memory mapped.
  int64_t unmapped_bytes(uintptr_t address, uint64_t bytes) const;

  // Unmaps the runtime's host memory from chunk i (its handle stays the runtime's).
  void unmap_host_chunk(size_t i);

  // Maps chunk i with a spare, or with new device memory; false when the device has none.
  bool map_chunk(size_t i);

  // Of `bytes` to map, what the spares do not cover: the device memory mapping them adds.
  int64_t beyond_spares(int64_t bytes) const;

  // Gives the spares' device memory back to the device.
  void release_spares();
  void add_in_use(int64_t bytes);

  // Unmaps chunk i, keeping its memory as a spare (the pool still holds it).
  void unmap_chunk(size_t i);

  // Synchronises the device, then unmaps what no allocation uses, into the spares.
  void release_unused();
  std::string out_of_memory(int64_t bytes) const;

  // vmm: what the held memory is, for an out-of-memory message.
  std::string held_detail() const;
  DevicePoolOptions options_;
  mutable std::mutex mutex_;
  std::mutex reclaim_mutex_;  // guards reclaimers_ and their calls
  std::vector<std::pair<const void*, Reclaimer>> reclaimers_;
  SubAllocator sub_;
  int64_t capacity_ = 0;
  int64_t limit_ = 0;  // the capacity, or a lower limit (set_limit)
  int64_t resident_ = 0;
  int64_t in_use_ = 0;  // vmm: mapped chunks some live allocation overlaps
  autovm_pool_stats stats_{};
  cudaEvent_t order_event_ = nullptr;
  // managed:
  void* managed_base_ = nullptr;
  size_t managed_bytes_ = 0;
  std::vector<bool> populated_;  // chunk i prefetched to the device
  // vmm:
  Vmm vmm_;
  CUmemAllocationProp prop_{};
  CUdeviceptr va_base_ = 0;
  size_t va_bytes_ = 0;
  size_t chunk_ = 0;
  SubAllocator small_;        // allocations under a chunk, in [small_base_, va end)
  uintptr_t small_base_ = 0;  // 0: no such range (managed)
  std::vector<CUmemGenericAllocationHandle> handles_;  // 0: not mapped
  std::vector<uint64_t> host_;  // a runtime's host memory mapped there for a remote read; 0: none
  // Device memory the pool holds unmapped (counted in resident_), which map_chunk takes before
  // asking the device for more: a chunk paged out or released under the limit is mapped again
  // at once elsewhere without cuMemRelease + cuMemCreate. trim() and a lower limit give it back.
  std::vector<CUmemGenericAllocationHandle> spares_;
  std::vector<uint32_t> users_;                        // live allocations overlapping the chunk
  // Stream-ordered release: chunk i, unused since free number freed_at_[i], may go without a
  // device synchronisation once the device has passed that free (settled_).
  struct FreeMark {
    uint64_t number;
    cudaEvent_t event;
  };
  std::vector<uint64_t> freed_at_;
  std::deque<FreeMark> frees_;  // not known passed yet, oldest first
  std::vector<cudaEvent_t> spare_events_;
  uint64_t free_count_ = 0, settled_ = 0;
  double pressure_wait_us_ = 0;  // SUM: autovm_pool_stats.pressure_wait_us, unrounded
  // paging:
  struct Hold {
    uint64_t serial;
    void* event;  // cudaEvent_t
    const void* owner;
  };
  std::unordered_map<uintptr_t, uint64_t> serials_;  // live allocation's address -> serial
  uint64_t serial_count_ = 0;
  std::unordered_map<uintptr_t, Hold> holds_;        // by the allocation's address
  // whole-chunk allocations (vmm):
  struct Whole {
    uintptr_t block;     // SubAllocator's block, which starts up to a chunk before
    uint64_t requested;  // the bytes asked for
    uint64_t span;       // the whole chunks it owns
  };
  std::unordered_map<uintptr_t, Whole> whole_;             // by the caller's address
  std::unordered_map<uintptr_t, uintptr_t> whole_by_block_;  // block -> the caller's address
  uint64_t padding_bytes_ = 0;  // SUM: what whole-chunk allocations asked beyond their bytes
};

}  // namespace autovm::rt::pool_detail
