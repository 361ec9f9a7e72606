// Contract: a stream-ordered pool of one CUDA device's memory (autovm.h, "Memory pools", says
// what callers see): SubAllocator's bookkeeping over one managed range or one VMM address
// range, plus the CUDA work that bookkeeping asks for (populating, mapping, waits between
// streams, releasing). Every method is thread-safe. Failures throw rt::Error: AUTOVM_ERR_OUT_OF_MEMORY
// with the pool's figures, AUTOVM_ERR_INVALID_ARGUMENT for a wrong device or address,
// AUTOVM_ERR_BACKEND for a CUDA call that failed.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>

#include "autovm/autovm.h"
#include "sub_allocator.h"

namespace autovm::rt {

struct DevicePoolOptions {
  autovm_pool_memory memory = AUTOVM_POOL_MANAGED;
  int device = 0;
  int64_t capacity_bytes = 0;  // 0: the device's free memory less the margin
  int64_t chunk_bytes = 0;     // vmm: the unit mapped (0: the allocation granularity)
  int64_t free_margin_bytes = int64_t{1} << 30;
  bool allow_oversubscribe = false;
};

class DevicePool {
 public:
  virtual ~DevicePool() = default;
  virtual int device() const = 0;
  // nullptr for 0 bytes. `device` is the caller's (PyTorch's) device: it must be the pool's.
  virtual void* allocate(int64_t bytes, int device, void* stream) = 0;
  virtual void deallocate(void* ptr, void* stream) = 0;
  virtual std::optional<SubAllocator::Allocation> find(const void* address) const = 0;
  virtual autovm_pool_stats stats() const = 0;
  virtual void reset_peaks() = 0;
  virtual void trim() = 0;
  // autovm_pool_set_limit (autovm.h): vmm only, bytes in (0, capacity], 0 the capacity.
  virtual void set_limit(int64_t bytes) = 0;

  // Paging the trainer's allocations (vmm pools; runtime/README.md, "The trainer's memory on
  // the vmm pool"). An allocation is named by its base address and the serial the pool gave it
  // (a later allocation at the same address has another serial), so that a runtime never pages
  // an allocation the trainer freed in the meantime.
  struct Live {
    uintptr_t address;
    uint64_t bytes;   // asked for
    uint64_t serial;  // 1, 2, ...: the pool's count of allocations when it was made
  };
  // The live allocation that [address, address + bytes) lies in; nullopt if none.
  virtual std::optional<Live> live(const void* address, uint64_t bytes) const = 0;
  // Whether page_out and page_in do anything (vmm pools).
  virtual bool pages() const = 0;
  // Unmaps the chunks wholly inside [address, address + bytes) of allocation `serial`, their
  // memory kept for the pool's next mappings; returns the bytes unmapped (0 when the
  // allocation is gone or none are whole).
  // The caller guarantees that no queued work touches the range.
  virtual int64_t page_out(const Live& a, uintptr_t address, uint64_t bytes) = 0;
  // Maps again the chunks of [address, address + bytes) that have no memory; false (nothing
  // done) when allocation `serial` is gone. Throws AUTOVM_ERR_OUT_OF_MEMORY when the device
  // has no memory for them (the capacity does not refuse: the range is the trainer's). Chunks
  // of the range that map host memory (map_host) are unmapped first: the caller guarantees
  // that no queued work reads them.
  virtual bool page_in(const Live& a, uintptr_t address, uint64_t bytes) = 0;
  // Remote reads (docs/execution-model.md, "Remote reads"): maps host memory at the paged-out
  // chunks of [address, address + bytes) of allocation `a`, so that kernels read the tensor
  // there, at its own address, over the link. handles[k] (CUmemGenericAllocationHandle of
  // chunk_bytes() of host memory, HostNumaChunks) goes to the k-th chunk from the one holding
  // `address`; `count` of them. Returns the bytes mapped (0 when `a` is gone or nothing is
  // paged out). A chunk mapping host memory holds no device memory: it counts in neither
  // resident_bytes nor in_use_bytes. It stays mapped until page_in, or, once `a` is freed,
  // until the device has passed the free (as for unused chunks); an allocation never uses
  // such a chunk of another one: one that reaches it maps device memory there first. The
  // caller keeps the handles alive while they may be mapped (a released handle's memory lives
  // until its last mapping goes).
  virtual int64_t map_host(const Live& a, uintptr_t address, uint64_t bytes,
                           const uint64_t* handles, size_t count) = 0;
  // The unit of memory a vmm pool maps (0 for a managed pool).
  virtual int64_t chunk_bytes() const = 0;
  // Work on another stream uses allocation `a` until `event` (a cudaEvent_t of `owner`)
  // completes: when the trainer frees it, the freeing stream first waits for the event's latest
  // record. A hold lasts until the allocation is freed or its owner drops it.
  virtual void hold(const Live& a, void* event, const void* owner) = 0;
  virtual void drop_holds(const void* owner) = 0;

  // Memory a runtime can give back on demand: an allocation the limit (or the device) refuses
  // calls each reclaimer, in the order added, without the pool's lock held, and is tried once
  // more if one returns true. A reclaimer waits for work it queued (a runtime's copies out) and
  // pages out what that work has freed, so that a late copy costs the trainer a wait, not an
  // out-of-memory error. remove_reclaimer returns once no call of the owner's is running.
  using Reclaimer = std::function<bool()>;
  virtual void add_reclaimer(const void* owner, Reclaimer reclaim) = 0;
  virtual void remove_reclaimer(const void* owner) = 0;
};

// The process-wide pool of PyTorch's allocator hooks (autovm_torch_pool), created on first use.
DevicePool& torch_device_pool();
// The pool behind a C handle (not NULL).
DevicePool& device_pool_of(autovm_pool* pool);

// Throws Error(AUTOVM_ERR_BACKEND) in a build without CUDA.
std::unique_ptr<DevicePool> make_device_pool(const DevicePoolOptions& options);

}  // namespace autovm::rt
