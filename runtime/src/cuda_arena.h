// Contract: the CUDA backend's arena (runtime/README.md, "The CUDA backend"): one range of
// `bytes` holding every tensor at its offset for the runtime's life, allocated whole, resident
// on the device and zeroed. Managed memory (cudaMallocManaged, prefetched to the device; advised
// accessed-by the device for the staged mechanism) for the prefetch and staged mechanisms and
// demand paging; device memory from the virtual memory management API (cuMemCreate + cuMemMap
// into one reserved range, at a stable address like managed memory) for mapped. Refused with
// AUTOVM_ERR_OUT_OF_MEMORY, before anything is allocated, when it is larger than the device's
// free memory less the margin, unless oversubscription is allowed for managed memory: on a
// shared GPU oversubscribed managed memory can hang the device for everyone. The destructor
// gives the memory back (errors ignored). Included by CUDA translation units only; failures
// throw rt::Error.
#pragma once

#include <cuda.h>

#include <cstdint>

#include "backend.h"
#include "cuda_driver.h"

namespace autovm::rt {

class DeviceArena {
 public:
  // options.mechanism resolved: managed memory unless it is mapped.
  DeviceArena(const CudaBackendOptions& options, int64_t bytes);
  ~DeviceArena();
  DeviceArena(const DeviceArena&) = delete;
  DeviceArena& operator=(const DeviceArena&) = delete;

  char* base() const { return base_; }

 private:
  void check_fits() const;
  void allocate_managed();
  void allocate_mapped();
  void release() noexcept;

  CudaBackendOptions options_;
  bool managed_ = true;
  int64_t bytes_ = 0;
  char* base_ = nullptr;
  Vmm vmm_;
  CUdeviceptr mapped_base_ = 0;
  size_t mapped_bytes_ = 0;
  CUmemGenericAllocationHandle mapped_handle_ = 0;
};

}  // namespace autovm::rt
