// The CUDA backend's arena (cuda_arena.h).
#include "cuda_arena.h"

#include <cuda_runtime_api.h>

#include <string>

namespace autovm::rt {

DeviceArena::DeviceArena(const CudaBackendOptions& options, int64_t bytes)
    : options_(options), managed_(options.mechanism != AUTOVM_MECHANISM_MAPPED), bytes_(bytes) {
  check_fits();
  try {
    if (managed_) {
      allocate_managed();
    } else {
      allocate_mapped();
    }
  } catch (...) {
    release();  // what was allocated before the failure
    throw;
  }
}

DeviceArena::~DeviceArena() { release(); }

// Never ask for more device memory than is free (less the margin): on a shared GPU,
// oversubscribed managed memory can hang the device for everyone.
void DeviceArena::check_fits() const {
  size_t free = 0, total = 0;
  check(cudaMemGetInfo(&free, &total), "cudaMemGetInfo");
  const int64_t usable = static_cast<int64_t>(free) - options_.free_margin_bytes;
  if (bytes_ <= usable) return;
  if (managed_ && options_.allow_oversubscribe) return;
  throw Error(AUTOVM_ERR_OUT_OF_MEMORY,
              std::string("the plan's arena of ") + gib(bytes_) + " does not fit the " +
                  gib(static_cast<int64_t>(free)) + " free on CUDA device " +
                  std::to_string(options_.device) + " less the margin of " +
                  gib(options_.free_margin_bytes) +
                  (managed_ ? "; plan for a smaller arena, or set allow_oversubscribe if this "
                              "GPU is yours alone"
                            : "; plan for a smaller arena"));
}

void DeviceArena::allocate_managed() {
  void* p = nullptr;
  check(cudaMallocManaged(&p, static_cast<size_t>(bytes_), cudaMemAttachGlobal),
        "cudaMallocManaged of the arena (" + gib(bytes_) + ")");
  base_ = static_cast<char*>(p);
  const cudaMemLocation device = device_location(options_.device);
  // Memory advice, where it helps (tools/bench/staged_in.cu, BENCHMARKS.md): the copy engine
  // writing managed pages that are not on the device faults them in one by one (0.5-0.8
  // GB/s), and cudaMemDiscardAndPrefetchBatchAsync does not always leave a discarded range
  // mapped on the device (the staged way back then collapsed to 0.7-1.3 GB/s from 256 MiB
  // up). AccessedBy(device) keeps the device's mapping: the way back stays at the copy
  // engine's speed. Only for staged: under prefetch and demand paging it would turn the
  // driver's migrations into remote accesses over the link.
  if (options_.mechanism == AUTOVM_MECHANISM_STAGED && options_.mode == AUTOVM_MODE_PLAN &&
      options_.advise_accessed_by)
    check(cudaMemAdvise(base_, static_cast<size_t>(bytes_), cudaMemAdviseSetAccessedBy, device),
          "cudaMemAdvise(SetAccessedBy) of the arena");
  check(cudaMemPrefetchAsync(base_, static_cast<size_t>(bytes_), device, 0, nullptr),
        "cudaMemPrefetchAsync of the arena");
  check(cudaMemset(base_, 0, static_cast<size_t>(bytes_)), "cudaMemset of the arena");
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
}

void DeviceArena::allocate_mapped() {
  vmm_ = Vmm::load();
  const CUmemAllocationProp prop = device_allocation(options_.device);
  const size_t granularity = vmm_.recommended_granularity(prop);
  const auto g = static_cast<int64_t>(granularity);
  mapped_bytes_ = static_cast<size_t>((bytes_ + g - 1) / g * g);
  check(vmm_.reserve(&mapped_base_, mapped_bytes_, granularity, 0, 0), "cuMemAddressReserve");
  check(vmm_.create(&mapped_handle_, mapped_bytes_, &prop, 0),
        "cuMemCreate of the arena (" + gib(static_cast<int64_t>(mapped_bytes_)) + ")");
  check(vmm_.map(mapped_base_, mapped_bytes_, 0, mapped_handle_, 0), "cuMemMap");
  CUmemAccessDesc access{};
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  check(vmm_.set_access(mapped_base_, mapped_bytes_, &access, 1), "cuMemSetAccess");
  base_ = reinterpret_cast<char*>(mapped_base_);
  check(cudaMemset(base_, 0, mapped_bytes_), "cudaMemset of the arena");
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
}

void DeviceArena::release() noexcept {
  if (managed_ && base_) cudaFree(base_);
  if (!managed_ && mapped_base_) {
    vmm_.unmap(mapped_base_, mapped_bytes_);
    if (mapped_handle_) vmm_.release(mapped_handle_);
    vmm_.address_free(mapped_base_, mapped_bytes_);
  }
  base_ = nullptr;
  mapped_base_ = 0;
}

}  // namespace autovm::rt
