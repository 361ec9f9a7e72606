// Host NUMA memory mapped into the device's address space (host_numa.h).
#include "host_numa.h"

#include <cuda_runtime_api.h>

#include <algorithm>

namespace autovm::rt {
namespace {

// The host NUMA node nearest the device; 0 where the system has no NUMA (what cuMemCreate
// wants then).
int numa_node(int device) {
  int node = -1;
  check(cudaDeviceGetAttribute(&node, cudaDevAttrHostNumaId, device),
        "cudaDeviceGetAttribute(HostNumaId)");
  return node < 0 ? 0 : node;
}

CUmemAllocationProp host_prop(int device) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_HOST_NUMA;
  prop.location.id = numa_node(device);
  return prop;
}

}  // namespace

int64_t HostNumaChunks::granularity(const Vmm& vmm, int device) {
  const CUmemAllocationProp prop = host_prop(device);
  size_t g = 0;
  check(vmm.granularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
        "cuMemGetAllocationGranularity of host NUMA memory (remote reads need host memory the "
        "device maps: CUDA 12.2 or newer, a driver and device that support it)");
  return static_cast<int64_t>(g);
}

HostNumaChunks::HostNumaChunks(const Vmm& vmm, int device, int64_t bytes, int64_t chunk,
                               const std::string& what)
    : vmm_(vmm) {
  const int64_t g = granularity(vmm, device);
  if (chunk == 0) chunk = g;
  if (chunk <= 0 || chunk % g != 0)
    throw Error(AUTOVM_ERR_BACKEND, what + ": chunks of " + std::to_string(chunk) +
                                        " B are not a multiple of host NUMA memory's granularity (" +
                                        std::to_string(g) + " B)");
  chunk_ = chunk;
  const int64_t count = std::max<int64_t>(1, (bytes + chunk - 1) / chunk);
  const CUmemAllocationProp prop = host_prop(device);
  try {
    reserved_ = static_cast<size_t>(count * chunk);
    check(vmm_.reserve(&base_, reserved_, static_cast<size_t>(chunk), 0, 0),
          "cuMemAddressReserve for " + what);
    CUmemAccessDesc access[2]{};
    access[0].location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    access[0].location.id = device;
    access[0].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    access[1].location = prop.location;  // the host, for diagnostics and tests
    access[1].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    handles_.reserve(static_cast<size_t>(count));
    for (int64_t k = 0; k < count; ++k) {
      CUmemGenericAllocationHandle h = 0;
      check(vmm_.create(&h, static_cast<size_t>(chunk), &prop, 0),
            "cuMemCreate of host NUMA memory (node " + std::to_string(prop.location.id) +
                ") for " + what + " (" + gib(count * chunk) + " in all)");
      handles_.push_back(h);
      const CUdeviceptr at = base_ + static_cast<CUdeviceptr>(k * chunk);
      check(vmm_.map(at, static_cast<size_t>(chunk), 0, h, 0), "cuMemMap of host memory for " + what);
      ++mapped_;
      check(vmm_.set_access(at, static_cast<size_t>(chunk), access, 2),
            "cuMemSetAccess of host memory for " + what);
    }
  } catch (...) {
    release();
    throw;
  }
}

HostNumaChunks::~HostNumaChunks() { release(); }

// Errors are ignored: nothing could report them, and the memory goes either way.
void HostNumaChunks::release() noexcept {
  for (size_t k = 0; k < mapped_; ++k)
    vmm_.unmap(base_ + static_cast<CUdeviceptr>(k) * static_cast<CUdeviceptr>(chunk_),
               static_cast<size_t>(chunk_));
  mapped_ = 0;
  for (uint64_t h : handles_) vmm_.release(h);
  handles_.clear();
  if (base_) vmm_.address_free(base_, reserved_);
  base_ = 0;
}

}  // namespace autovm::rt
