// Contract: what the CUDA code of the runtime shares: status checks that throw rt::Error naming
// the call, a size printer for messages, and the driver's virtual memory management entry
// points reached through the runtime (no link against libcuda, so the library loads on machines
// without a driver). Included by CUDA translation units only.
#pragma once

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <cstdio>
#include <string>
#include <type_traits>

#include "plan.h"

namespace autovm::rt {

inline void check(cudaError_t status, const std::string& what) {
  if (status == cudaSuccess) return;
  cudaGetLastError();  // clear a sticky-free error so later calls report their own
  throw Error(AUTOVM_ERR_BACKEND, what + " failed: " + cudaGetErrorName(status) + " (" +
                                      cudaGetErrorString(status) + ")");
}

inline void check(CUresult status, const std::string& what) {
  if (status == CUDA_SUCCESS) return;
  throw Error(AUTOVM_ERR_BACKEND, what + " failed: CUresult " + std::to_string(status));
}

inline std::string gib(int64_t bytes) {
  char text[64];
  std::snprintf(text, sizeof text, "%.2f GiB (%lld B)", static_cast<double>(bytes) / (1 << 30),
                static_cast<long long>(bytes));
  return text;
}

// Where unified memory lives, as the CUDA 13 calls that take a cudaMemLocation name it.
inline cudaMemLocation host_location() {
  cudaMemLocation l{};
  l.type = cudaMemLocationTypeHost;
  return l;
}
inline cudaMemLocation device_location(int device) {
  cudaMemLocation l{};
  l.type = cudaMemLocationTypeDevice;
  l.id = device;
  return l;
}

// Pinned memory on `device`, as cuMemCreate takes it.
inline CUmemAllocationProp device_allocation(int device) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  return prop;
}

// The driver entry points of the virtual memory management API.
struct Vmm {
  decltype(&cuMemAddressReserve) reserve = nullptr;
  decltype(&cuMemAddressFree) address_free = nullptr;
  decltype(&cuMemCreate) create = nullptr;
  decltype(&cuMemRelease) release = nullptr;
  decltype(&cuMemMap) map = nullptr;
  decltype(&cuMemUnmap) unmap = nullptr;
  decltype(&cuMemSetAccess) set_access = nullptr;
  decltype(&cuMemGetAllocationGranularity) granularity = nullptr;

  // The granularity the driver recommends for allocations of `prop`.
  size_t recommended_granularity(const CUmemAllocationProp& prop) const {
    size_t g = 0;
    check(granularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED), "cuMemGetAllocationGranularity");
    return g;
  }

  static Vmm load() {
    Vmm v;
    auto get = [](const char* symbol, auto& fn) {
      void* p = nullptr;
      cudaDriverEntryPointQueryResult found{};
      check(cudaGetDriverEntryPointByVersion(symbol, &p, 12000, cudaEnableDefault, &found),
            std::string("cudaGetDriverEntryPointByVersion(") + symbol + ")");
      if (found != cudaDriverEntryPointSuccess || p == nullptr)
        throw Error(AUTOVM_ERR_BACKEND,
                    std::string("the CUDA driver has no ") + symbol +
                        ": virtual memory management (the mapped mechanism, VMM pools) needs "
                        "CUDA 12 or newer");
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(p);
    };
    get("cuMemAddressReserve", v.reserve);
    get("cuMemAddressFree", v.address_free);
    get("cuMemCreate", v.create);
    get("cuMemRelease", v.release);
    get("cuMemMap", v.map);
    get("cuMemUnmap", v.unmap);
    get("cuMemSetAccess", v.set_access);
    get("cuMemGetAllocationGranularity", v.granularity);
    return v;
  }
};

}  // namespace autovm::rt
