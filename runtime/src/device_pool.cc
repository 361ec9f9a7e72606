// The CUDA half of the pool (device_pool.h): where SubAllocator's region comes from, how blocks
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
// meanwhile) and maps them again before copying it back (page_in).
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
// vmm allocation (or page-in, or a lower limit) over the capacity first unmaps, into the
// spares, the unused chunks whose last free the device has passed (each free that leaves a
// chunk unused records an event on its stream), and synchronises the device only if that is
// not enough; trim always synchronises, and gives the spares back to the device. If that is still not enough, the reclaimers (a runtime's paging) wait for their
// copies out and page those tensors out, and the allocation is tried once more.
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <deque>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "cuda_driver.h"
#include "device_pool.h"

namespace autovm::rt {
namespace {

constexpr size_t kManagedChunk = size_t{2} << 20;

int64_t round_up(int64_t bytes, int64_t unit) { return (bytes + unit - 1) / unit * unit; }

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
  explicit CudaPool(const DevicePoolOptions& options) : options_(options) {
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

  ~CudaPool() override {
    cudaSetDevice(options_.device);
    cudaDeviceSynchronize();
    if (managed_base_) cudaFree(managed_base_);
    if (va_base_) {
      for (size_t i = 0; i < handles_.size(); ++i)
        if (handles_[i]) {
          vmm_.unmap(chunk_address(i), chunk_);
          vmm_.release(handles_[i]);
        }
      for (CUmemGenericAllocationHandle h : spares_) vmm_.release(h);
      vmm_.address_free(va_base_, va_bytes_);
    }
    if (order_event_) cudaEventDestroy(order_event_);
    for (const FreeMark& f : frees_) cudaEventDestroy(f.event);
    for (cudaEvent_t e : spare_events_) cudaEventDestroy(e);
  }

  int device() const override { return options_.device; }

  void* allocate(int64_t bytes, int device, void* stream) override {
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

  void add_reclaimer(const void* owner, Reclaimer reclaim) override {
    std::lock_guard<std::mutex> lock(reclaim_mutex_);
    reclaimers_.emplace_back(owner, std::move(reclaim));
  }

  void remove_reclaimer(const void* owner) override {
    std::lock_guard<std::mutex> lock(reclaim_mutex_);
    reclaimers_.erase(std::remove_if(reclaimers_.begin(), reclaimers_.end(),
                                     [&](const auto& r) { return r.first == owner; }),
                      reclaimers_.end());
  }

  // The block for `bytes` (nullptr for 0 bytes), or nullopt when the memory refuses; throws
  // for a wrong request. Holds mutex_.
  std::optional<void*> try_allocate(int64_t bytes, int device, void* stream) {
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
  bool reclaim() {
    std::lock_guard<std::mutex> lock(reclaim_mutex_);
    bool any = false;
    for (const auto& r : reclaimers_) any = r.second() || any;
    return any;
  }

  void deallocate(void* ptr, void* stream) override {
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

  std::optional<SubAllocator::Allocation> find(const void* address) const override {
    std::lock_guard<std::mutex> lock(mutex_);
    return find_locked(reinterpret_cast<uintptr_t>(address));
  }

  autovm_pool_stats stats() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    return stats_unlocked();
  }

  autovm_pool_stats stats_unlocked() const {
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
    for (size_t i = (small_base_ - va_base_) / chunk_; i < handles_.size(); ++i)
      if (handles_[i] && users_[i] > 0) s.small_chunk_bytes += static_cast<int64_t>(chunk_);
    return s;
  }

  void reset_peaks() override {
    std::lock_guard<std::mutex> lock(mutex_);
    stats_.peak_allocated_bytes = stats_.allocated_bytes;
    stats_.peak_resident_bytes = resident_;
    stats_.peak_in_use_bytes = in_use_;
  }

  void trim() override {
    std::lock_guard<std::mutex> lock(mutex_);
    release_unused();
    release_spares();
  }

  void set_limit(int64_t bytes) override {
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

  std::optional<Live> live(const void* address, uint64_t bytes) const override {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto a = find_locked(reinterpret_cast<uintptr_t>(address));
    if (!a || reinterpret_cast<uintptr_t>(address) + bytes > a->address + a->requested)
      return std::nullopt;
    const auto serial = serials_.find(a->address);
    if (serial == serials_.end()) return std::nullopt;
    return Live{a->address, a->requested, serial->second};
  }

  bool pages() const override { return va_base_ != 0; }

  int64_t page_out(const Live& a, uintptr_t address, uint64_t bytes) override {
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

  bool page_in(const Live& a, uintptr_t address, uint64_t bytes) override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!va_base_ || bytes == 0) return true;
    if (!is_live(a)) return false;
    const auto [first, last] = chunks_of(address, bytes);
    int64_t needed = 0;
    for (size_t i = first; i <= last; ++i)
      if (!handles_[i]) needed += static_cast<int64_t>(chunk_);
    // The tensor is the trainer's, so it comes back whatever the capacity says; what no
    // allocation uses goes first, so that the pool stays within it where it can.
    if (resident_ + beyond_spares(needed) > limit_) release_settled();
    if (resident_ + beyond_spares(needed) > limit_) release_unused();
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

  void hold(const Live& a, void* event, const void* owner) override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!is_live(a)) return;
    holds_[a.address] = Hold{a.serial, event, owner};
  }

  void drop_holds(const void* owner) override {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto it = holds_.begin(); it != holds_.end();)
      it = it->second.owner == owner ? holds_.erase(it) : std::next(it);
  }

 private:
  int64_t allocated() const {
    return static_cast<int64_t>(sub_.requested_bytes() + small_.requested_bytes() -
                                padding_bytes_);
  }
  uint64_t allocation_count() const {
    return sub_.allocation_count() + small_.allocation_count();
  }
  // The bookkeeping an address belongs to: the small allocations' range, or the rest.
  SubAllocator& owner(uintptr_t address) {
    return small_base_ && address >= small_base_ ? small_ : sub_;
  }
  const SubAllocator& owner(uintptr_t address) const {
    return small_base_ && address >= small_base_ ? small_ : sub_;
  }

  // The allocation `address` lies in, as its caller sees it (a whole-chunk allocation from its
  // chunk-aligned start, its bytes as asked for).
  std::optional<SubAllocator::Allocation> find_locked(uintptr_t address) const {
    auto a = owner(address).find(address);
    if (!a) return std::nullopt;
    const auto whole = whole_by_block_.find(a->address);
    if (whole == whole_by_block_.end()) return a;
    const Whole& w = whole_.at(whole->second);
    if (address < whole->second || address >= whole->second + w.requested) return std::nullopt;
    return SubAllocator::Allocation{whole->second, w.requested, w.span};
  }

  bool is_live(const Live& a) const {
    const auto serial = serials_.find(a.address);
    return serial != serials_.end() && serial->second == a.serial;
  }

  // A block for `bytes`, its chunks populated or mapped; nullopt when the capacity (or the
  // device's free memory, for managed chunks) refuses.
  // `span` > 0: only the `span` bytes from the block's first chunk boundary are used (mapped).
  std::optional<SubAllocator::Taken> take(SubAllocator& sub, int64_t bytes, SubAllocator::Tag tag,
                                          int64_t span = 0) {
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
    if (!used_now) {
      release_settled();  // chunks whose frees the device has passed: no wait
      used_now = use_chunks(start, length);
    }
    if (!used_now) {
      release_unused();  // synchronises: every free block is then kAnyStream
      used_now = use_chunks(start, length);
    }
    if (!used_now) {
      sub.free(taken->address, SubAllocator::kAnyStream);
      return std::nullopt;
    }
    return taken;
  }

  cudaMemLocation device_location() const {
    cudaMemLocation l{};
    l.type = cudaMemLocationTypeDevice;
    l.id = options_.device;
    return l;
  }

  void allocate_managed() {
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
  bool populate(uintptr_t address, uint64_t bytes, SubAllocator::Tag tag) {
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

  void reserve_addresses() {
    vmm_ = Vmm::load();
    prop_.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop_.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop_.location.id = options_.device;
    size_t granularity = 0;
    check(vmm_.granularity(&granularity, &prop_, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED),
          "cuMemGetAllocationGranularity");
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
    users_.assign(va_bytes_ / chunk_, 0);
    freed_at_.assign(va_bytes_ / chunk_, 0);
    small_base_ = static_cast<uintptr_t>(va_base_) + large_bytes;
    sub_.add_region(static_cast<uintptr_t>(va_base_), large_bytes);
    small_.add_region(small_base_, small_bytes);
  }

  CUdeviceptr chunk_address(size_t i) const { return va_base_ + i * chunk_; }
  std::pair<size_t, size_t> chunks_of(uintptr_t address, uint64_t bytes) const {
    const size_t first = (address - va_base_) / chunk_;
    const size_t last = (address + bytes - 1 - va_base_) / chunk_;
    return {first, last};
  }

  // Maps what [address, address + bytes) needs and counts its users; false (nothing changed)
  // when that would pass the capacity or the device refuses the memory.
  bool use_chunks(uintptr_t address, uint64_t bytes) {
    const auto [first, last] = chunks_of(address, bytes);
    int64_t needed = 0;
    for (size_t i = first; i <= last; ++i)
      if (!handles_[i]) needed += static_cast<int64_t>(chunk_);
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
  bool unuse_chunks(uintptr_t address, uint64_t bytes) {
    const auto [first, last] = chunks_of(address, bytes);
    bool unused = false;
    for (size_t i = first; i <= last; ++i)
      if (--users_[i] == 0 && handles_[i]) {
        in_use_ -= static_cast<int64_t>(chunk_);
        freed_at_[i] = free_count_ + 1;
        unused = true;
      }
    return unused;
  }

  // Free number free_count_ + 1 happened on `stream`: an event there says when the device has
  // passed it (every use of the chunks it left unused is then done).
  void mark_free(cudaStream_t stream) {
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
  void release_settled() {
    while (!frees_.empty()) {
      const cudaError_t done = cudaEventQuery(frees_.front().event);
      if (done == cudaErrorNotReady) break;
      check(done, "cudaEventQuery of a free");
      settled_ = frees_.front().number;
      spare_events_.push_back(frees_.front().event);
      frees_.pop_front();
    }
    for (size_t i = 0; i < handles_.size(); ++i)
      if (handles_[i] && users_[i] == 0 && freed_at_[i] <= settled_) unmap_chunk(i);
  }

  // Maps chunk i with a spare, or with new device memory; false when the device has none.
  bool map_chunk(size_t i) {
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
  int64_t beyond_spares(int64_t bytes) const {
    return std::max<int64_t>(0, bytes - static_cast<int64_t>(spares_.size() * chunk_));
  }

  // Gives the spares' device memory back to the device.
  void release_spares() {
    for (CUmemGenericAllocationHandle h : spares_) {
      check(vmm_.release(h), "cuMemRelease of a pool chunk");
      resident_ -= static_cast<int64_t>(chunk_);
      stats_.released_bytes += static_cast<int64_t>(chunk_);
    }
    spares_.clear();
  }

  void add_in_use(int64_t bytes) {
    in_use_ += bytes;
    stats_.peak_in_use_bytes = std::max(stats_.peak_in_use_bytes, in_use_);
  }

  // Unmaps chunk i, keeping its memory as a spare (the pool still holds it).
  void unmap_chunk(size_t i) {
    check(vmm_.unmap(chunk_address(i), chunk_), "cuMemUnmap of a pool chunk");
    spares_.push_back(handles_[i]);
    handles_[i] = 0;
    if (users_[i] > 0) in_use_ -= static_cast<int64_t>(chunk_);  // paged out
  }

  // Synchronises the device, then unmaps what no allocation uses, into the spares.
  void release_unused() {
    DeviceGuard guard(options_.device);
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize before giving pool memory back");
    sub_.retag_free();
    small_.retag_free();
    if (!va_base_) return;  // managed: populated pages go back only with the whole range
    for (const FreeMark& f : frees_) spare_events_.push_back(f.event);
    frees_.clear();
    settled_ = free_count_;
    for (size_t i = 0; i < handles_.size(); ++i)
      if (handles_[i] && users_[i] == 0) unmap_chunk(i);
  }

  std::string out_of_memory(int64_t bytes) const {
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
  std::string held_detail() const {
    if (!va_base_) return "";
    const autovm_pool_stats s = stats_unlocked();
    return " (" + gib(s.small_chunk_bytes) + " in chunks of allocations under " +
           gib(static_cast<int64_t>(chunk_)) + ", " + gib(s.unused_chunk_bytes) + " unused)";
  }

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

}  // namespace

std::unique_ptr<DevicePool> make_device_pool(const DevicePoolOptions& options) {
  return std::make_unique<CudaPool>(options);
}

}  // namespace autovm::rt
