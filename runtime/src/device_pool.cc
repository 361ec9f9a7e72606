// The CUDA half of the pool (device_pool.h; the class is cuda_pool.h's, the vmm pool's chunks
// and paging are in device_pool_vmm.cc): where SubAllocator's region comes from, how blocks
// taken from another stream are ordered, and how memory goes back. Either way the pool is one
// region, an address range, with device memory behind it in chunks:
//
//   managed  one cudaMallocManaged range of the capacity, advised preferred-location and
//            accessed-by the device: no pages until they are touched, and the capacity is at
//            most the device's free memory at creation less the margin. A chunk (2 MiB) is
//            populated, prefetched to the device on the allocating stream, when an allocation
//            first reaches it (so kernels never fault), once the device has that much free
//            memory less the margin; populated chunks stay until the pool goes (the driver
//            gives managed pages back only with the range).
//   vmm      an address range of twice the capacity plus the device's memory (what a runtime
//            may have paged out), so that fragmentation of the addresses never refuses what
//            the capacity allows. Chunk i (the allocation granularity, or a multiple of it:
//            chunk_bytes) is mapped while an allocation overlaps it, counted in users_[i]; a
//            chunk whose users drop to 0 stays mapped (a training step frees and reallocates
//            the same bytes each step: remapping would cost 61 + 46 us a 2 MiB chunk on the
//            H200) until trim() or the limit needs it (below). A chunk unmapped keeps
//            its device memory as a spare, which the next chunk to be mapped takes before
//            any new memory (cuMemMap alone, not cuMemCreate too); the pool holds its spares
//            (resident bytes) until trim() or a lower limit gives them back. An
//            allocation of a chunk or more starts on a chunk boundary and owns whole chunks
//            (its block asks for a chunk more, for the alignment: addresses, not memory).
//            Smaller allocations come from a second address range (a SubAllocator of their
//            own), where best-fit packs them into few chunks: among the large allocations
//            each small one would keep a freed large tensor's chunk mapped, and a training
//            step's few hundred parameters, gradients and statistics would hold hundreds of
//            chunks that no large tensor can reuse.
//
// The limit (set_limit; the capacity unless lowered) is what every check below calls the
// capacity.
//
// Paging (vmm): a runtime that moves a trainer's allocation to the host unmaps the chunks
// wholly inside it (page_out: their memory becomes spares, for the allocations that need it
// meanwhile) and maps them again before copying it back (page_in). For a remote read it maps
// the runtime's host memory at such chunks (map_host: host_[i]), which then hold no device
// memory (neither resident nor in use); page_in unmaps them first. Once their allocation is
// freed they are unmapped like unused chunks, when the device has passed the free, or at once,
// after waiting for the free, when another allocation reaches them.
// A chunk with users but no memory is paged out; an allocation that reaches a chunk without
// memory maps it, whoever paged it out. Every allocation gets a serial, so that a runtime pages
// only the allocation it bound, never one the trainer made later at the same address; and a
// hold makes the free of an allocation whose copies are still queued on a runtime's stream
// wait for them on the device.
//
// One range, not one per request: per-request ranges fragmented VGG-19's training (tensors of
// 3.29 GB each took a range of their own, later split by small tensors) to twice its bytes.
//
// Ordering: a block SubAllocator hands over with another stream's tag is reused only after
// cudaEventRecord(tag's stream) + cudaStreamWaitEvent(allocating stream). One event serves every
// such wait: a wait takes the event's latest record at the time it is enqueued.
//
// Giving memory back: a kernel still queued on a freed block must not find its pages gone. A
// vmm allocation or page-in over the limit first unmaps, into the spares, the unused chunks
// whose last free the device has passed (each free that leaves a chunk unused records an event
// on its stream), then waits for the next frees in order, one at a time, until there is room
// (release_until_fits). An allocation synchronises the device only if the device itself refuses
// memory; a lower limit synchronises if the settled chunks are not enough, and trim always does,
// and both give the spares back to the device. If an allocation still finds no room, the
// reclaimers (a runtime's paging) wait for their copies out and page those tensors out, and the
// allocation is tried once more.
#include "cuda_pool.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace autovm::rt {
namespace pool_detail {

CudaPool::CudaPool(const DevicePoolOptions& options) : options_(options) {
  int count = 0;
  check(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
  if (options.device < 0 || options.device >= count)
    throw Error(AUTOVM_ERR_INVALID_ARGUMENT,
                "autovm_pool_create: CUDA device " + std::to_string(options.device) +
                    " does not exist (" + std::to_string(count) + " devices)");
  DeviceGuard guard(options.device);
  if (options.memory == AUTOVM_POOL_MANAGED) {
    int managed = 0;
    check(cudaDeviceGetAttribute(&managed, cudaDevAttrManagedMemory, options.device),
          "cudaDeviceGetAttribute(ManagedMemory)");
    if (!managed)
      throw Error(AUTOVM_ERR_BACKEND, "autovm_pool_create: CUDA device " +
                                          std::to_string(options.device) +
                                          " has no managed memory: use the vmm pool");
  }
  size_t free = 0, total = 0;
  check(cudaMemGetInfo(&free, &total), "cudaMemGetInfo");
  const int64_t usable = static_cast<int64_t>(free) - options.free_margin_bytes;
  capacity_ = options.capacity_bytes > 0 ? options.capacity_bytes : usable;
  limit_ = capacity_;
  const bool oversubscribe = options.memory == AUTOVM_POOL_MANAGED && options.allow_oversubscribe;
  if (capacity_ <= 0 || (capacity_ > usable && !oversubscribe))
    throw Error(AUTOVM_ERR_OUT_OF_MEMORY,
                "autovm_pool_create: a capacity of " + gib(capacity_) + " does not fit the " +
                    gib(static_cast<int64_t>(free)) + " free on CUDA device " +
                    std::to_string(options.device) + " less the margin of " +
                    gib(options.free_margin_bytes) +
                    "; ask for less (capacity_bytes)" +
                    (options.memory == AUTOVM_POOL_MANAGED
                         ? ", or set allow_oversubscribe if this GPU is yours alone"
                         : ""));
  if (options.memory == AUTOVM_POOL_VMM) {
    reserve_addresses();
  } else {
    allocate_managed();
  }
  const cudaError_t created = cudaEventCreateWithFlags(&order_event_, cudaEventDisableTiming);
  if (created != cudaSuccess && va_base_) vmm_.address_free(va_base_, va_bytes_);
  if (created != cudaSuccess && managed_base_) cudaFree(managed_base_);
  check(created, "cudaEventCreate");
}

CudaPool::~CudaPool() {
  cudaSetDevice(options_.device);
  cudaDeviceSynchronize();
  if (managed_base_) cudaFree(managed_base_);
  if (va_base_) {
    for (size_t i = 0; i < handles_.size(); ++i) {
      if (handles_[i]) {
        vmm_.unmap(chunk_address(i), chunk_);
        vmm_.release(handles_[i]);
      }
      if (host_[i]) vmm_.unmap(chunk_address(i), chunk_);  // the runtime's memory
    }
    for (CUmemGenericAllocationHandle h : spares_) vmm_.release(h);
    vmm_.address_free(va_base_, va_bytes_);
  }
  if (order_event_) cudaEventDestroy(order_event_);
  for (const FreeMark& f : frees_) cudaEventDestroy(f.event);
  for (cudaEvent_t e : spare_events_) cudaEventDestroy(e);
}

void* CudaPool::allocate(int64_t bytes, int device, void* stream) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++stats_.alloc_calls;
    if (auto p = try_allocate(bytes, device, stream)) return *p;
  }
  if (reclaim()) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (auto p = try_allocate(bytes, device, stream)) return *p;
  }
  std::lock_guard<std::mutex> lock(mutex_);
  ++stats_.failed_allocations;
  stats_.last_failed_bytes = bytes;
  throw Error(AUTOVM_ERR_OUT_OF_MEMORY, out_of_memory(bytes));
}

void CudaPool::add_reclaimer(const void* owner, Reclaimer reclaim) {
  std::lock_guard<std::mutex> lock(reclaim_mutex_);
  reclaimers_.emplace_back(owner, std::move(reclaim));
}

void CudaPool::remove_reclaimer(const void* owner) {
  std::lock_guard<std::mutex> lock(reclaim_mutex_);
  reclaimers_.erase(std::remove_if(reclaimers_.begin(), reclaimers_.end(),
                                   [&](const auto& r) { return r.first == owner; }),
                    reclaimers_.end());
}

// The block for `bytes` (nullptr for 0 bytes), or nullopt when the memory refuses; throws
// for a wrong request. Holds mutex_.
std::optional<void*> CudaPool::try_allocate(int64_t bytes, int device, void* stream) {
  if (bytes < 0)
    throw Error(AUTOVM_ERR_INVALID_ARGUMENT,
                "bytes is negative (" + std::to_string(bytes) + ")");
  if (device != options_.device)
    throw Error(AUTOVM_ERR_INVALID_ARGUMENT,
                "device " + std::to_string(device) +
                    " asked of a pool of device " + std::to_string(options_.device) +
                    " (one pool a device: a process a GPU)");
  if (bytes == 0) return std::optional<void*>(nullptr);  // a value: 0 B always succeeds
  const auto tag = reinterpret_cast<SubAllocator::Tag>(stream);
  // vmm: an allocation of a chunk or more starts on a chunk and owns whole chunks, so that a
  // runtime paging it out gives back all of it, not its inside less two edge chunks.
  const bool whole = va_base_ && bytes >= static_cast<int64_t>(chunk_);
  const int64_t span = whole ? round_up(bytes, static_cast<int64_t>(chunk_)) : bytes;
  const int64_t ask = whole ? span + static_cast<int64_t>(chunk_) : bytes;
  const bool small = va_base_ && !whole;
  auto taken = take(small ? small_ : sub_, ask, tag, whole ? span : 0);
  if (!taken) return std::nullopt;
  if (taken->after != tag && taken->after != SubAllocator::kAnyStream) {
    auto* after = reinterpret_cast<cudaStream_t>(taken->after);
    check(cudaEventRecord(order_event_, after), "cudaEventRecord on the freeing stream");
    check(cudaStreamWaitEvent(static_cast<cudaStream_t>(stream), order_event_, 0),
          "cudaStreamWaitEvent on the allocating stream");
    ++stats_.cross_stream_waits;
  }
  uintptr_t address = taken->address;
  if (whole) {
    address = static_cast<uintptr_t>(round_up(static_cast<int64_t>(taken->address - va_base_),
                                              static_cast<int64_t>(chunk_))) + va_base_;
    whole_[address] = Whole{taken->address, static_cast<uint64_t>(bytes),
                            static_cast<uint64_t>(span)};
    whole_by_block_[taken->address] = address;
    padding_bytes_ += static_cast<uint64_t>(ask - bytes);
  }
  stats_.allocated_bytes = allocated();
  stats_.peak_allocated_bytes = std::max(stats_.peak_allocated_bytes, stats_.allocated_bytes);
  serials_[address] = ++serial_count_;
  return reinterpret_cast<void*>(address);
}

// Whether a reclaimer gave memory back. Holds reclaim_mutex_, not mutex_ (reclaimers page
// out through the pool).
bool CudaPool::reclaim() {
  std::lock_guard<std::mutex> lock(reclaim_mutex_);
  bool any = false;
  for (const auto& r : reclaimers_) any = r.second() || any;
  return any;
}

void CudaPool::deallocate(void* ptr, void* stream) {
  if (ptr == nullptr) return;
  std::lock_guard<std::mutex> lock(mutex_);
  ++stats_.free_calls;
  const auto address = reinterpret_cast<uintptr_t>(ptr);
  const auto serial = serials_.find(address);
  const auto held = holds_.find(address);
  if (held != holds_.end()) {
    if (serial != serials_.end() && held->second.serial == serial->second)
      check(cudaStreamWaitEvent(static_cast<cudaStream_t>(stream),
                                static_cast<cudaEvent_t>(held->second.event), 0),
            "cudaStreamWaitEvent for a runtime's copies of a freed allocation");
    holds_.erase(held);
  }
  const auto whole = whole_.find(address);
  const uintptr_t block = whole != whole_.end() ? whole->second.block : address;
  const auto freed = owner(block).free(block, reinterpret_cast<SubAllocator::Tag>(stream));
  if (serial != serials_.end()) serials_.erase(serial);
  bool unused = false;  // a chunk no allocation uses now
  if (whole != whole_.end()) {
    unused = unuse_chunks(address, whole->second.span);
    padding_bytes_ -= freed.requested - whole->second.requested;
    whole_by_block_.erase(block);
    whole_.erase(whole);
  } else if (va_base_) {
    unused = unuse_chunks(freed.address, freed.bytes);
  }
  if (unused) mark_free(static_cast<cudaStream_t>(stream));
  stats_.allocated_bytes = allocated();
}

std::optional<SubAllocator::Allocation> CudaPool::find(const void* address) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return find_locked(reinterpret_cast<uintptr_t>(address));
}

autovm_pool_stats CudaPool::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_unlocked();
}

autovm_pool_stats CudaPool::stats_unlocked() const {
  autovm_pool_stats s = stats_;
  s.resident_bytes = resident_;
  s.capacity_bytes = capacity_;
  s.limit_bytes = limit_;
  s.allocations = static_cast<int64_t>(allocation_count());
  if (!va_base_) {  // managed: every populated chunk counts as used
    s.in_use_bytes = resident_;
    s.peak_in_use_bytes = s.peak_resident_bytes;
    return s;
  }
  s.in_use_bytes = in_use_;
  s.unused_chunk_bytes = resident_ - in_use_;
  s.pressure_wait_us = std::llround(pressure_wait_us_);
  for (size_t i = (small_base_ - va_base_) / chunk_; i < handles_.size(); ++i)
    if (handles_[i] && users_[i] > 0) s.small_chunk_bytes += static_cast<int64_t>(chunk_);
  return s;
}

void CudaPool::reset_peaks() {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.peak_allocated_bytes = stats_.allocated_bytes;
  stats_.peak_resident_bytes = resident_;
  stats_.peak_in_use_bytes = in_use_;
}

void CudaPool::trim() {
  std::lock_guard<std::mutex> lock(mutex_);
  release_unused();
  release_spares();
}

void CudaPool::set_limit(int64_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!va_base_)
    throw Error(AUTOVM_ERR_INVALID_ARGUMENT,
                "a managed pool gives its pages back only with the pool: its limit is its "
                "capacity (use a vmm pool to hold a budget on the device)");
  if (bytes < 0 || bytes > capacity_)
    throw Error(AUTOVM_ERR_INVALID_ARGUMENT,
                "a limit of " + std::to_string(bytes) + " B is outside (0, the capacity " +
                    std::to_string(capacity_) + " B] (0: the capacity)");
  limit_ = bytes == 0 ? capacity_ : bytes;
  if (resident_ > limit_) {
    release_settled();
    release_spares();
  }
  if (resident_ > limit_) {
    release_unused();
    release_spares();
  }
}

int64_t CudaPool::allocated() const {
  return static_cast<int64_t>(sub_.requested_bytes() + small_.requested_bytes() -
                              padding_bytes_);
}

uint64_t CudaPool::allocation_count() const {
  return sub_.allocation_count() + small_.allocation_count();
}

// The bookkeeping an address belongs to: the small allocations' range, or the rest.
SubAllocator& CudaPool::owner(uintptr_t address) {
  return small_base_ && address >= small_base_ ? small_ : sub_;
}

const SubAllocator& CudaPool::owner(uintptr_t address) const {
  return small_base_ && address >= small_base_ ? small_ : sub_;
}

// The allocation `address` lies in, as its caller sees it (a whole-chunk allocation from its
// chunk-aligned start, its bytes as asked for).
std::optional<SubAllocator::Allocation> CudaPool::find_locked(uintptr_t address) const {
  auto a = owner(address).find(address);
  if (!a) return std::nullopt;
  const auto whole = whole_by_block_.find(a->address);
  if (whole == whole_by_block_.end()) return a;
  const Whole& w = whole_.at(whole->second);
  if (address < whole->second || address >= whole->second + w.requested) return std::nullopt;
  return SubAllocator::Allocation{whole->second, w.requested, w.span};
}

bool CudaPool::is_live(const Live& a) const {
  const auto serial = serials_.find(a.address);
  return serial != serials_.end() && serial->second == a.serial;
}

// A block for `bytes`, its chunks populated or mapped; nullopt when the capacity (or the
// device's free memory, for managed chunks) refuses.
// `span` > 0: only the `span` bytes from the block's first chunk boundary are used (mapped).
std::optional<SubAllocator::Taken> CudaPool::take(SubAllocator& sub, int64_t bytes,
                                                  SubAllocator::Tag tag, int64_t span) {
  auto taken = sub.allocate(static_cast<uint64_t>(bytes), tag);
  if (!taken) return std::nullopt;  // the address range is full
  auto used = [&] {
    if (span == 0) return std::pair<uintptr_t, uint64_t>{taken->address, taken->bytes};
    const auto start = static_cast<uintptr_t>(round_up(
                           static_cast<int64_t>(taken->address - va_base_),
                           static_cast<int64_t>(chunk_))) + va_base_;
    return std::pair<uintptr_t, uint64_t>{start, static_cast<uint64_t>(span)};
  };
  if (managed_base_) {
    if (populate(taken->address, taken->bytes, tag)) return taken;
    sub.free(taken->address, taken->after);
    return std::nullopt;
  }
  // use_chunks counts the chunks' users when it succeeds: call it until it does, no more.
  const auto [start, length] = used();
  bool used_now = use_chunks(start, length);
  if (!used_now && release_until_fits(unmapped_bytes(start, length)))
    used_now = use_chunks(start, length);
  if (!used_now) {
    release_unused();  // synchronises: the device may be short of memory beside the limit
    used_now = use_chunks(start, length);
  }
  if (!used_now) {
    sub.free(taken->address, SubAllocator::kAnyStream);
    return std::nullopt;
  }
  return taken;
}

cudaMemLocation CudaPool::device_location() const { return rt::device_location(options_.device); }

void CudaPool::allocate_managed() {
  managed_bytes_ = static_cast<size_t>(capacity_) / kManagedChunk * kManagedChunk;
  if (managed_bytes_ == 0)
    throw Error(AUTOVM_ERR_INVALID_ARGUMENT, "autovm_pool_create: a managed pool needs a "
                                             "capacity of at least 2 MiB");
  check(cudaMallocManaged(&managed_base_, managed_bytes_, cudaMemAttachGlobal),
        "cudaMallocManaged of the pool (" + gib(static_cast<int64_t>(managed_bytes_)) + ")");
  try {
    check(cudaMemAdvise(managed_base_, managed_bytes_, cudaMemAdviseSetPreferredLocation,
                        device_location()),
          "cudaMemAdvise(SetPreferredLocation) of the pool");
    check(cudaMemAdvise(managed_base_, managed_bytes_, cudaMemAdviseSetAccessedBy,
                        device_location()),
          "cudaMemAdvise(SetAccessedBy) of the pool");
  } catch (...) {
    cudaFree(managed_base_);
    throw;
  }
  populated_.assign(managed_bytes_ / kManagedChunk, false);
  sub_.add_region(reinterpret_cast<uintptr_t>(managed_base_), managed_bytes_);
}

// Prefetches to the device, on the allocating stream, the chunks of [address, address +
// bytes) no allocation has reached yet; false (nothing changed) when the device has not that
// much free memory less the margin now (unless oversubscription is allowed): another process
// may have taken what was free at the pool's creation.
bool CudaPool::populate(uintptr_t address, uint64_t bytes, SubAllocator::Tag tag) {
  const auto base = reinterpret_cast<uintptr_t>(managed_base_);
  const size_t first = (address - base) / kManagedChunk;
  const size_t last = (address + bytes - 1 - base) / kManagedChunk;
  int64_t needed = 0;
  for (size_t i = first; i <= last; ++i)
    if (!populated_[i]) needed += static_cast<int64_t>(kManagedChunk);
  if (needed == 0) return true;
  if (!options_.allow_oversubscribe) {
    DeviceGuard guard(options_.device);
    size_t free = 0, total = 0;
    check(cudaMemGetInfo(&free, &total), "cudaMemGetInfo");
    const int64_t margin = options_.free_margin_bytes;
    if (needed > static_cast<int64_t>(free) - margin) return false;
  }
  const auto stream = tag == SubAllocator::kAnyStream ? nullptr
                                                      : reinterpret_cast<cudaStream_t>(tag);
  for (size_t i = first; i <= last;) {
    if (populated_[i]) {
      ++i;
      continue;
    }
    size_t end = i;
    while (end <= last && !populated_[end]) populated_[end++] = true;
    check(cudaMemPrefetchAsync(reinterpret_cast<void*>(base + i * kManagedChunk),
                               (end - i) * kManagedChunk, device_location(), 0, stream),
          "cudaMemPrefetchAsync of pool memory to the device");
    i = end;
  }
  resident_ += needed;
  stats_.peak_resident_bytes = std::max(stats_.peak_resident_bytes, resident_);
  return true;
}

std::string CudaPool::out_of_memory(int64_t bytes) const {
  return "out of memory: cannot allocate " + gib(bytes) + " on CUDA device " +
         std::to_string(options_.device) + " (" +
         (options_.memory == AUTOVM_POOL_VMM ? "vmm" : "managed") + " pool): " +
         gib(allocated()) + " allocated in " + std::to_string(allocation_count()) +
         " allocations, " + gib(resident_) + " held" + held_detail() + " of " +
         (limit_ < capacity_ ? "a limit of " + gib(limit_) + " (capacity " + gib(capacity_) + ")"
                             : "a capacity of " + gib(capacity_)) +
         ", largest free block " + gib(static_cast<int64_t>(sub_.largest_free_block()));
}

// vmm: what the held memory is, for an out-of-memory message.
std::string CudaPool::held_detail() const {
  if (!va_base_) return "";
  const autovm_pool_stats s = stats_unlocked();
  return " (" + gib(s.small_chunk_bytes) + " in chunks of allocations under " +
         gib(static_cast<int64_t>(chunk_)) + ", " + gib(s.unused_chunk_bytes) + " unused)";
}

}  // namespace pool_detail

std::unique_ptr<DevicePool> make_device_pool(const DevicePoolOptions& options) {
  return std::make_unique<pool_detail::CudaPool>(options);
}

}  // namespace autovm::rt
