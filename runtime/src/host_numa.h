// Contract: host memory the device reads over the link through device addresses, for remote
// reads (docs/execution-model.md, "Remote reads"). Pinned host memory of the NUMA node nearest
// the device, from the virtual memory management API (cuMemCreate with
// CU_MEM_LOCATION_TYPE_HOST_NUMA), in chunks of `chunk` bytes, each a handle of its own, mapped
// one after the other at a reserved range of device addresses (the staging address, base()),
// readable and writable by the device and the host. The copy engine writes an evicted tensor
// there (cudaMemcpyAsync between device addresses), a kernel reads it there, and a chunk's
// handle can be mapped at a second address too (a vmm pool's chunk: DevicePool::map_host), since
// a handle may back several mappings.
//
// Creating pins the pages, which is slow (2 GiB took 777 ms on the H200,
// ../shared/facts/h200.md), so a runtime creates what it needs once, with the runtime, and reuses
// it every training step. The destructor unmaps the staging range and releases the handles: a
// chunk still mapped elsewhere keeps its memory until that mapping goes too (the driver frees an
// allocation once it has neither handle nor mapping). Failures throw rt::Error(AUTOVM_ERR_BACKEND)
// naming the call; a device without host NUMA memory through the VMM API is reported so.
// Included by CUDA translation units only.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <string>
#include <vector>

#include "cuda_driver.h"

namespace autovm::rt {

class HostNumaChunks {
 public:
  // At least `bytes` of host memory for `device`, in chunks of `chunk` bytes (0: the host
  // memory's granularity; else a multiple of it). `what` names the use in messages.
  HostNumaChunks(const Vmm& vmm, int device, int64_t bytes, int64_t chunk, const std::string& what);
  ~HostNumaChunks();
  HostNumaChunks(const HostNumaChunks&) = delete;
  HostNumaChunks& operator=(const HostNumaChunks&) = delete;

  char* base() const { return reinterpret_cast<char*>(base_); }
  int64_t chunk() const { return chunk_; }
  int64_t bytes() const { return chunk_ * static_cast<int64_t>(handles_.size()); }
  const std::vector<uint64_t>& handles() const { return handles_; }

  // The allocation granularity of host NUMA memory for `device`.
  static int64_t granularity(const Vmm& vmm, int device);

 private:
  void release() noexcept;

  Vmm vmm_;
  int64_t chunk_ = 0;
  CUdeviceptr base_ = 0;
  size_t reserved_ = 0;
  std::vector<uint64_t> handles_;  // CUmemGenericAllocationHandle of chunk k
  size_t mapped_ = 0;              // chunks mapped at the staging range
};

}  // namespace autovm::rt
