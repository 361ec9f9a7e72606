// The vmm pool's chunks (cuda_pool.h; device_pool.cc says how they are mapped, shared, given
// back and paged): mapping and unmapping, their users, stream-ordered release, spares, paging
// a runtime's tensors out and in, and host memory mapped at paged-out chunks for remote reads.
#include <algorithm>
#include <string>

#include "cuda_pool.h"
#include "host_timer.h"

namespace autovm::rt::pool_detail {

std::optional<CudaPool::Live> CudaPool::live(const void* address, uint64_t bytes) const {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto a = find_locked(reinterpret_cast<uintptr_t>(address));
  if (!a || reinterpret_cast<uintptr_t>(address) + bytes > a->address + a->requested)
    return std::nullopt;
  const auto serial = serials_.find(a->address);
  if (serial == serials_.end()) return std::nullopt;
  return Live{a->address, a->requested, serial->second};
}

int64_t CudaPool::page_out(const Live& a, uintptr_t address, uint64_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!va_base_ || !is_live(a) || bytes == 0) return 0;
  // The chunks wholly inside the range: an edge chunk may hold a neighbour's bytes.
  const uintptr_t begin = (address - va_base_ + chunk_ - 1) / chunk_;
  uintptr_t end = (address + bytes - va_base_) / chunk_;
  const auto whole = whole_.find(a.address);  // owns its last chunk too
  if (whole != whole_.end() && address == a.address && bytes >= whole->second.requested)
    end = (address + whole->second.span - va_base_) / chunk_;
  int64_t released = 0;
  for (uintptr_t i = begin; i < end; ++i)
    if (handles_[i]) {
      unmap_chunk(i);
      released += static_cast<int64_t>(chunk_);
    }
  stats_.paged_out_bytes += released;
  return released;
}

bool CudaPool::page_in(const Live& a, uintptr_t address, uint64_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!va_base_ || bytes == 0) return true;
  if (!is_live(a)) return false;
  const auto [first, last] = chunks_of(address, bytes);
  for (size_t i = first; i <= last; ++i)
    if (host_[i]) unmap_host_chunk(i);  // the caller guarantees nothing queued reads them
  const int64_t needed = unmapped_bytes(address, bytes);
  // The tensor is the trainer's, so it comes back whatever the capacity says; what no
  // allocation uses goes first, so that the pool stays within it where it can.
  if (resident_ + beyond_spares(needed) > limit_) release_until_fits(needed);
  for (size_t i = first; i <= last; ++i) {
    if (handles_[i]) continue;
    if (!map_chunk(i)) {
      release_unused();  // synchronises, then gives back the chunks no allocation uses
      if (!map_chunk(i))
        throw Error(AUTOVM_ERR_OUT_OF_MEMORY,
                    "out of memory: CUDA device " + std::to_string(options_.device) +
                        " has no " + gib(static_cast<int64_t>(chunk_)) +
                        " left to bring a paged-out tensor back (" + gib(resident_) +
                        " held by the vmm pool)");
    }
    stats_.paged_in_bytes += static_cast<int64_t>(chunk_);
  }
  return true;
}

int64_t CudaPool::map_host(const Live& a, uintptr_t address, uint64_t bytes,
                           const uint64_t* handles, size_t count) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!va_base_ || !is_live(a) || bytes == 0) return 0;
  const size_t origin = (address - va_base_) / chunk_;  // handles[0]'s chunk
  const auto [first, last] = chunks_of(address, bytes);
  CUmemAccessDesc access{};
  access.location = prop_.location;  // the device
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  int64_t mapped = 0;
  for (size_t i = first; i <= last; ++i) {
    // Paged out: a chunk of the allocation's own, without memory (page_out left edge chunks).
    if (handles_[i] || host_[i] || users_[i] == 0 || i - origin >= count) continue;
    const CUdeviceptr at = chunk_address(i);
    check(vmm_.map(at, chunk_, 0, handles[i - origin], 0), "cuMemMap of host memory at a pool chunk");
    host_[i] = handles[i - origin];
    const CUresult access_set = vmm_.set_access(at, chunk_, &access, 1);
    if (access_set != CUDA_SUCCESS) unmap_host_chunk(i);
    check(access_set, "cuMemSetAccess of host memory at a pool chunk");
    mapped += static_cast<int64_t>(chunk_);
  }
  return mapped;
}

void CudaPool::hold(const Live& a, void* event, const void* owner) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!is_live(a)) return;
  holds_[a.address] = Hold{a.serial, event, owner};
}

void CudaPool::drop_holds(const void* owner) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto it = holds_.begin(); it != holds_.end();)
    it = it->second.owner == owner ? holds_.erase(it) : std::next(it);
}

void CudaPool::reserve_addresses() {
  vmm_ = Vmm::load();
  prop_ = device_allocation(options_.device);
  const size_t granularity = vmm_.recommended_granularity(prop_);
  chunk_ = options_.chunk_bytes > 0
               ? static_cast<size_t>(round_up(options_.chunk_bytes,
                                              static_cast<int64_t>(granularity)))
               : granularity;
  const auto g = static_cast<int64_t>(chunk_);
  // Addresses for twice what may be allocated: the capacity, and what a runtime may have
  // paged out (live allocations without memory), at most the device's memory again.
  size_t free = 0, total = 0;
  check(cudaMemGetInfo(&free, &total), "cudaMemGetInfo");
  // Then the small allocations' range: they are never paged out (no chunk lies wholly
  // inside one), so at most the capacity of them lives; twice that, for their fragmentation.
  const auto large_bytes =
      static_cast<size_t>(round_up(capacity_ + static_cast<int64_t>(total), g) * 2);
  const auto small_bytes = static_cast<size_t>(round_up(capacity_, g) * 2);
  va_bytes_ = large_bytes + small_bytes;
  check(vmm_.reserve(&va_base_, va_bytes_, chunk_, 0, 0),
        "cuMemAddressReserve of " + gib(static_cast<int64_t>(va_bytes_)) + " of addresses");
  handles_.assign(va_bytes_ / chunk_, 0);
  host_.assign(va_bytes_ / chunk_, 0);
  users_.assign(va_bytes_ / chunk_, 0);
  freed_at_.assign(va_bytes_ / chunk_, 0);
  small_base_ = static_cast<uintptr_t>(va_base_) + large_bytes;
  sub_.add_region(static_cast<uintptr_t>(va_base_), large_bytes);
  small_.add_region(small_base_, small_bytes);
}

std::pair<size_t, size_t> CudaPool::chunks_of(uintptr_t address, uint64_t bytes) const {
  const size_t first = (address - va_base_) / chunk_;
  const size_t last = (address + bytes - 1 - va_base_) / chunk_;
  return {first, last};
}

// Maps what [address, address + bytes) needs and counts its users; false (nothing changed)
// when that would pass the capacity or the device refuses the memory.
bool CudaPool::use_chunks(uintptr_t address, uint64_t bytes) {
  const auto [first, last] = chunks_of(address, bytes);
  // Host memory a runtime mapped for a freed allocation's remote read: never another one's.
  // Its free may still have kernels queued before it that read there: wait for them first.
  for (size_t i = first; i <= last; ++i)
    if (host_[i]) {
      settle_through(freed_at_[i]);
      unmap_host_chunk(i);
    }
  const int64_t needed = unmapped_bytes(address, bytes);
  if (resident_ + beyond_spares(needed) > limit_) return false;
  std::vector<size_t> mapped_now;
  for (size_t i = first; i <= last; ++i) {
    if (handles_[i]) continue;
    if (!map_chunk(i)) {
      for (size_t j : mapped_now) unmap_chunk(j);
      return false;
    }
    mapped_now.push_back(i);
  }
  for (size_t i = first; i <= last; ++i)
    if (users_[i]++ == 0) add_in_use(static_cast<int64_t>(chunk_));
  return true;
}

// Returns whether a mapped chunk has no user now; those are stamped with the free's number.
bool CudaPool::unuse_chunks(uintptr_t address, uint64_t bytes) {
  const auto [first, last] = chunks_of(address, bytes);
  bool unused = false;
  for (size_t i = first; i <= last; ++i)
    if (--users_[i] == 0 && (handles_[i] || host_[i])) {
      if (handles_[i]) in_use_ -= static_cast<int64_t>(chunk_);
      freed_at_[i] = free_count_ + 1;
      unused = true;
    }
  return unused;
}

// Free number free_count_ + 1 happened on `stream`: an event there says when the device has
// passed it (every use of the chunks it left unused is then done).
void CudaPool::mark_free(cudaStream_t stream) {
  cudaEvent_t e = nullptr;
  if (!spare_events_.empty()) {
    e = spare_events_.back();
    spare_events_.pop_back();
  } else {
    check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
  }
  check(cudaEventRecord(e, stream), "cudaEventRecord at a free");
  frees_.push_back(FreeMark{++free_count_, e});
}

// Unmaps the unused chunks whose last free the device has passed, into the spares, without
// waiting: the frees are passed in order of their numbers as far as their events have
// completed.
void CudaPool::release_settled() {
  while (!frees_.empty()) {
    const cudaError_t done = cudaEventQuery(frees_.front().event);
    if (done == cudaErrorNotReady) break;
    check(done, "cudaEventQuery of a free");
    pass_oldest_free();
  }
  for (size_t i = 0; i < handles_.size(); ++i) {
    if (users_[i] != 0 || freed_at_[i] > settled_) continue;
    if (handles_[i]) unmap_chunk(i);
    if (host_[i]) unmap_host_chunk(i);
  }
}

bool CudaPool::release_until_fits(int64_t needed) {
  auto fits = [&] { return resident_ + beyond_spares(needed) <= limit_; };
  release_settled();
  while (!fits() && !frees_.empty()) {
    {
      const HostTimer waiting(pressure_wait_us_);
      check(cudaEventSynchronize(frees_.front().event), "cudaEventSynchronize of a free");
    }
    ++stats_.pressure_waits;
    pass_oldest_free();
    release_settled();  // and any later frees the device has passed meanwhile
  }
  return fits();
}

void CudaPool::pass_oldest_free() {
  settled_ = frees_.front().number;
  spare_events_.push_back(frees_.front().event);
  frees_.pop_front();
}

int64_t CudaPool::unmapped_bytes(uintptr_t address, uint64_t bytes) const {
  const auto [first, last] = chunks_of(address, bytes);
  int64_t out = 0;
  for (size_t i = first; i <= last; ++i)
    if (!handles_[i]) out += static_cast<int64_t>(chunk_);
  return out;
}

// Waits until the device has passed free number `number` (host waits; for host memory
// mapped at a freed allocation's chunk that another allocation reaches).
void CudaPool::settle_through(uint64_t number) {
  while (settled_ < number && !frees_.empty()) {
    check(cudaEventSynchronize(frees_.front().event), "cudaEventSynchronize of a free");
    pass_oldest_free();
  }
}

// Unmaps the runtime's host memory from chunk i (its handle stays the runtime's).
void CudaPool::unmap_host_chunk(size_t i) {
  host_[i] = 0;
  check(vmm_.unmap(chunk_address(i), chunk_), "cuMemUnmap of host memory at a pool chunk");
}

// Maps chunk i with a spare, or with new device memory; false when the device has none.
bool CudaPool::map_chunk(size_t i) {
  CUmemGenericAllocationHandle h = 0;
  const bool fresh = spares_.empty();
  if (!fresh) {
    h = spares_.back();
    spares_.pop_back();
  } else if (vmm_.create(&h, chunk_, &prop_, 0) != CUDA_SUCCESS) {
    return false;
  }
  const CUdeviceptr at = chunk_address(i);
  check(vmm_.map(at, chunk_, 0, h, 0), "cuMemMap of a pool chunk");
  CUmemAccessDesc access{};
  access.location = prop_.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  check(vmm_.set_access(at, chunk_, &access, 1), "cuMemSetAccess of a pool chunk");
  handles_[i] = h;
  if (fresh) {
    resident_ += static_cast<int64_t>(chunk_);
    stats_.peak_resident_bytes = std::max(stats_.peak_resident_bytes, resident_);
  }
  if (users_[i] > 0) add_in_use(static_cast<int64_t>(chunk_));  // paged in
  return true;
}

// Of `bytes` to map, what the spares do not cover: the device memory mapping them adds.
int64_t CudaPool::beyond_spares(int64_t bytes) const {
  return std::max<int64_t>(0, bytes - static_cast<int64_t>(spares_.size() * chunk_));
}

// Gives the spares' device memory back to the device.
void CudaPool::release_spares() {
  for (CUmemGenericAllocationHandle h : spares_) {
    check(vmm_.release(h), "cuMemRelease of a pool chunk");
    resident_ -= static_cast<int64_t>(chunk_);
    stats_.released_bytes += static_cast<int64_t>(chunk_);
  }
  spares_.clear();
}

void CudaPool::add_in_use(int64_t bytes) {
  in_use_ += bytes;
  stats_.peak_in_use_bytes = std::max(stats_.peak_in_use_bytes, in_use_);
}

// Unmaps chunk i, keeping its memory as a spare (the pool still holds it).
void CudaPool::unmap_chunk(size_t i) {
  check(vmm_.unmap(chunk_address(i), chunk_), "cuMemUnmap of a pool chunk");
  spares_.push_back(handles_[i]);
  handles_[i] = 0;
  if (users_[i] > 0) in_use_ -= static_cast<int64_t>(chunk_);  // paged out
}

// Synchronises the device, then unmaps what no allocation uses, into the spares.
void CudaPool::release_unused() {
  DeviceGuard guard(options_.device);
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize before giving pool memory back");
  sub_.retag_free();
  small_.retag_free();
  if (!va_base_) return;  // managed: populated pages go back only with the whole range
  for (const FreeMark& f : frees_) spare_events_.push_back(f.event);
  frees_.clear();
  settled_ = free_count_;
  for (size_t i = 0; i < handles_.size(); ++i) {
    if (handles_[i] && users_[i] == 0) unmap_chunk(i);
    if (host_[i] && users_[i] == 0) unmap_host_chunk(i);
  }
}

}  // namespace autovm::rt::pool_detail
