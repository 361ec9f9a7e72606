// Contract: a stream-ordered pool of one CUDA device's memory (autovm.h, "Memory pools", says
// what callers see): SubAllocator's bookkeeping over one managed range or one VMM address
// range, plus the CUDA work that bookkeeping asks for (populating, mapping, waits between
// streams, releasing). Every method is thread-safe. Failures throw rt::Error: AUTOVM_ERR_OUT_OF_MEMORY
// with the pool's figures, AUTOVM_ERR_INVALID_ARGUMENT for a wrong device or address,
// AUTOVM_ERR_BACKEND for a CUDA call that failed.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>

#include "autovm/autovm.h"
#include "sub_allocator.h"

namespace autovm::rt {

struct DevicePoolOptions {
  autovm_pool_memory memory = AUTOVM_POOL_MANAGED;
  int device = 0;
  int64_t capacity_bytes = 0;  // 0: the device's free memory less the margin
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
};

// Throws Error(AUTOVM_ERR_BACKEND) in a build without CUDA.
std::unique_ptr<DevicePool> make_device_pool(const DevicePoolOptions& options);

}  // namespace autovm::rt
