// The CUDA backend: one arena on the device holding every tensor at its planned offset, and the
// plan's transfers on the runtime's own copy streams, ordered against the trainer's compute
// stream with events only (runtime/README.md, "The CUDA backend").
//
//   memory    managed (cudaMallocManaged) for the prefetch and staged mechanisms and for demand
//             paging; device memory from the virtual memory management API (cuMemCreate +
//             cuMemMap into one reserved range) for mapped. Either way the arena starts resident
//             on the device and zeroed, and the budget is the executor's accounting: the arena
//             is never larger than the device's free memory less a margin unless the user opts in.
//   evict     the copy stream waits for the event recorded when the trainer enqueued the step
//             after which the plan evicts; then, by mechanism:
//               prefetch  cudaMemPrefetchAsync to the host
//               staged    cudaMemcpyAsync to a pinned host buffer, then cudaMemDiscardBatchAsync
//               mapped    cudaMemcpyAsync to a pinned host buffer
//             and records the tensor's evict event.
//   prefetch  the copy stream waits for the step after which the plan prefetches (so the bytes
//             come back no earlier than the plan counts them resident, whatever the host's lead)
//             and for the tensor's evict event; then
//               prefetch  cudaMemPrefetchAsync to the device
//               staged    cudaMemDiscardAndPrefetchBatchAsync (pages come back without stale
//                         data), then cudaMemcpyAsync from the pinned buffer
//               mapped    cudaMemcpyAsync from the pinned buffer
//             and records the tensor's ready event, which the compute stream waits for before
//             the step named ready_before_step.
//   complete  at step_begin(ready_before_step) of an evict the compute stream waits for the
//             tensor's evict event: from that step the plan counts its memory free. These two
//             are the only places the trainer's stream ever waits; the host never does,
//             except with trainer paging (below), where it waits for the copy out here.
//   discard   managed: cudaMemDiscardBatchAsync after the step; mapped: nothing to do.
//   trainer   (AUTOVM_MEMORY_TRAINER) no arena: only the ranges the trainer binds (the executor
//             skips actions on tensors not bound). Either managed ranges, by the prefetch
//             mechanism, whose migrations never change a byte; or allocations of a vmm pool, by
//             the mapped mechanism: the copies above, and the pages of an evicted tensor
//             unmapped once its copy has landed and mapped again before its copy back
//             (trainer_paging.h), so that device memory really follows the plan. A tensor the
//             trainer freed meanwhile is not copied back; a free while copies are queued
//             waits for them (DevicePool::hold); require() brings back one the trainer reads
//             early.
//
// Streams: mapped copies each direction on its own stream (device memory reaches the link's
// full duplex). Managed copies share one stream: on the H200, copies touching managed memory in
// both directions at once did not overlap (52 GB/s in total) and one combination collapsed to
// 1.6 GB/s (../shared/facts/h200.md), so the staged and prefetch mechanisms serialise them.
//
// Discards touch only whole 2 MiB blocks inside a tensor's range: a discard of a partial page
// could drop a neighbour's bytes. The edges stay resident and are copied like the rest.
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <string>

#include "backend.h"
#include "cuda_driver.h"
#include "trainer_paging.h"

namespace autovm::rt {
namespace {

constexpr int64_t kDiscardBlock = int64_t{2} << 20;
constexpr size_t kPinnedAlignment = 4096;

const char* name(autovm_mechanism m) {
  switch (m) {
    case AUTOVM_MECHANISM_PREFETCH: return "prefetch";
    case AUTOVM_MECHANISM_STAGED: return "staged";
    case AUTOVM_MECHANISM_MAPPED: return "mapped";
    case AUTOVM_MECHANISM_PLAN: break;
  }
  return "plan";
}

class CudaBackend final : public Backend {
 public:
  CudaBackend(const Plan& plan, const CudaBackendOptions& options)
      : options_(options), tensors_(plan.tensors.size()), plan_tensors_(plan.tensors) {
    managed_ = options.mechanism != AUTOVM_MECHANISM_MAPPED;
    if (options.mode == AUTOVM_MODE_DEMAND_PAGING) {
      if (!managed_)
        throw Error(AUTOVM_ERR_INVALID_ARGUMENT,
                    "demand paging needs managed memory: use the prefetch or staged mechanism");
      // The driver evicts and faults back: a staged eviction would leave the data only in a
      // pinned buffer that nothing brings back.
      options_.mechanism = AUTOVM_MECHANISM_PREFETCH;
    }
    if (options_.trainer_memory && options_.mechanism == AUTOVM_MECHANISM_STAGED)
      throw Error(AUTOVM_ERR_INVALID_ARGUMENT,
                  "autovm_runtime_create: with memory AUTOVM_MEMORY_TRAINER the trainer's "
                  "tensors move by migration (mechanism AUTOVM_MECHANISM_PREFETCH, managed "
                  "memory) or by copies with their pages unmapped (AUTOVM_MECHANISM_MAPPED, a "
                  "vmm pool), not by the staged mechanism (its discards would drop bytes of "
                  "ranges the trainer may have reused)");
    try {
      select_device();
      if (options_.trainer_memory && !managed_) {
        if (options_.pool == nullptr)
          throw Error(AUTOVM_ERR_INVALID_ARGUMENT,
                      "autovm_runtime_create: the mapped mechanism on trainer memory needs the "
                      "vmm pool the trainer's tensors lie in");
        paging_ = std::make_unique<TrainerPaging>(*options_.pool, plan.tensors.size());
      }
      if (!options_.trainer_memory) {  // else only the ranges the trainer binds
        arena_bytes_ = std::max<int64_t>(plan.memory_bytes(), 1);
        check_fits();
        if (managed_) {
          allocate_managed();
        } else {
          allocate_mapped();
        }
      }
      check(cudaStreamCreateWithFlags(&out_stream_, cudaStreamNonBlocking), "cudaStreamCreate");
      if (managed_) {
        in_stream_ = out_stream_;
      } else {
        check(cudaStreamCreateWithFlags(&in_stream_, cudaStreamNonBlocking), "cudaStreamCreate");
      }
      check(cudaEventCreateWithFlags(&step_event_, cudaEventDisableTiming), "cudaEventCreate");
      stats_.by_step_us.assign(plan.steps.size(), 0.0);
      allocate_shadows(plan);
    } catch (...) {
      release();  // what was allocated before the failure
      throw;
    }
  }

  ~CudaBackend() override {
    restore_trainer_memory();
    release();
  }

  // Trainer paging: the trainer keeps its tensors after the runtime is gone (a plan may end a
  // training step with parameters on the host), so every one still away comes back first.
  // Errors are ignored, as in release().
  void restore_trainer_memory() noexcept {
    if (!paging_) return;
    try {
      copy_back_away();
      cudaStreamSynchronize(in_stream_);
    } catch (...) {
    }
  }

  void restore(void* stream) override {
    if (!paging_) return;
    for (const Tensor* t : copy_back_away()) {
      wait_ready(state(*t).ready, stream);
      state(*t).copying_in = false;
    }
  }

  // Frees whatever was allocated. Errors are ignored: nothing could report them, and the
  // memory goes either way.
  void release() noexcept {
    cudaSetDevice(options_.device);
    if (out_stream_) cudaStreamSynchronize(out_stream_);
    if (in_stream_ && in_stream_ != out_stream_) cudaStreamSynchronize(in_stream_);
    paging_.reset();  // its holds name the events destroyed below
    for (auto& t : tensors_) {
      if (t.evicted) cudaEventDestroy(t.evicted);
      if (t.ready) cudaEventDestroy(t.ready);
    }
    for (auto& w : pending_) {
      cudaEventDestroy(w.before);
      cudaEventDestroy(w.after);
    }
    for (cudaEvent_t e : spare_events_) cudaEventDestroy(e);
    if (step_event_) cudaEventDestroy(step_event_);
    if (in_stream_ && in_stream_ != out_stream_) cudaStreamDestroy(in_stream_);
    if (out_stream_) cudaStreamDestroy(out_stream_);
    if (pinned_) cudaFreeHost(pinned_);
    if (managed_ && arena_) cudaFree(arena_);
    if (!managed_ && mapped_base_) {
      vmm_.unmap(mapped_base_, mapped_bytes_);
      vmm_.release(mapped_handle_);
      vmm_.address_free(mapped_base_, mapped_bytes_);
    }
  }

  void* at(int64_t offset) override { return arena_ ? arena_ + offset : nullptr; }

  // The trainer's own range: managed memory for the managed mechanisms (the driver moves and
  // discards it), managed or device memory for mapped (the copy engine moves it).
  void bind(const Tensor& t, void* p) override {
    if (p != nullptr) {
      cudaPointerAttributes a{};
      check(cudaPointerGetAttributes(&a, p), "cudaPointerGetAttributes for '" + t.name + "'");
      const bool ok = a.type == cudaMemoryTypeManaged ||
                      (!managed_ && a.type == cudaMemoryTypeDevice && a.device == options_.device);
      if (!ok)
        throw Error(AUTOVM_ERR_INVALID_ARGUMENT,
                    "the range bound to '" + t.name + "' is not " +
                        (managed_ ? std::string("managed memory (cudaMallocManaged), which the ") +
                                        name(options_.mechanism) + " mechanism needs"
                                  : std::string("device or managed memory of device ") +
                                        std::to_string(options_.device)));
    }
    if (paging_) {
      // A binding ends with the tensor's lifetime: one still away comes back first, so the
      // trainer never keeps a range whose pages are gone.
      if (Backend::bound(t) && paging_->away(t)) copy_back(t);
      if (p != nullptr)
        for (TensorId other : paging_->away_overlapping(p, static_cast<uint64_t>(t.bytes)))
          copy_back(plan_tensors_[static_cast<size_t>(other)]);
      paging_->bind(t, p);
    }
    Backend::bind(t, p);
  }
  bool has_memory() const override { return true; }

  void step_enqueued(StepIndex, void* stream) override {
    check(cudaEventRecord(step_event_, as_stream(stream)), "cudaEventRecord (step)");
    out_waited_ = in_waited_ = false;
    if (paging_) paging_->poll();
  }

  void evict_issue(const Tensor& t, void*) override {
    wait_for_step(out_stream_);
    State& st = state(t);
    switch (options_.mechanism) {
      case AUTOVM_MECHANISM_PREFETCH:
        check(cudaMemPrefetchAsync(pointer(t), static_cast<size_t>(t.bytes), host_location(), 0,
                                   out_stream_),
              "cudaMemPrefetchAsync to the host of '" + t.name + "'");
        break;
      case AUTOVM_MECHANISM_STAGED:
        copy(shadow(t), pointer(t), t, out_stream_, "to the host");
        discard_blocks(t, out_stream_);
        break;
      default:
        copy(shadow(t), pointer(t), t, out_stream_, "to the host");
        break;
    }
    record(st.evicted, out_stream_, t);
    if (paging_) {
      paging_->hold(t, st.evicted);
      paging_->evicting(t, st.evicted);
    }
  }

  // The plan counts the tensor's memory free from here: the compute stream waits for the copy
  // out (and the discard) to finish, so the resident bytes never exceed the budget in time.
  void evict_complete(const Tensor& t, void* stream) override {
    wait_ready(state(t).evicted, stream);
    if (paging_) paging_->page_out_now(t);
  }

  void prefetch_issue(const Tensor& t, const Action& a, void*) override {
    wait_for_step(in_stream_);
    State& st = state(t);
    if (st.evicted && in_stream_ != out_stream_)
      check(cudaStreamWaitEvent(in_stream_, st.evicted, 0), "cudaStreamWaitEvent (evicted)");
    for (TensorId other : a.wait_evicted) {  // earlier occupants of a packed range
      cudaEvent_t evicted = tensors_[static_cast<size_t>(other)].evicted;
      if (evicted && in_stream_ != out_stream_)
        check(cudaStreamWaitEvent(in_stream_, evicted, 0), "cudaStreamWaitEvent (range free)");
    }
    if (paging_) {
      bring_back(t);
      return;
    }
    switch (options_.mechanism) {
      case AUTOVM_MECHANISM_PREFETCH:
        check(cudaMemPrefetchAsync(pointer(t), static_cast<size_t>(t.bytes), device_location(),
                                   0, in_stream_),
              "cudaMemPrefetchAsync to the device of '" + t.name + "'");
        break;
      case AUTOVM_MECHANISM_STAGED:
        discard_and_prefetch_blocks(t, in_stream_);
        copy(pointer(t), shadow(t), t, in_stream_, "to the device");
        break;
      default:
        copy(pointer(t), shadow(t), t, in_stream_, "to the device");
        break;
    }
    record(st.ready, in_stream_, t);
  }

  void prefetch_complete(const Tensor& t, void* stream) override {
    wait_ready(state(t).ready, stream);
    state(t).copying_in = false;
  }

  // The trainer's memory is never discarded (its bytes may belong to a tensor the trainer still
  // holds): its pages migrate to the host instead, bytes kept.
  void discard(const Tensor& t, void* stream) override {
    if (options_.trainer_memory) return evict_issue(t, stream);
    if (!managed_) return;  // device memory: nothing to tell the driver
    wait_for_step(out_stream_);
    discard_blocks(t, out_stream_);
    record(state(t).evicted, out_stream_, t);
  }

  void recompute_prepare(const Tensor& t, void* stream) override {
    if (paging_) {  // the trainer's bytes were copied out, not dropped: they come back
      if (paging_->away(t)) copy_back(t);
      wait_ready(state(t).ready, stream);
      state(t).copying_in = false;
      return;
    }
    if (!managed_ || options_.mode == AUTOVM_MODE_DEMAND_PAGING) return;
    State& st = state(t);
    if (st.evicted && in_stream_ != out_stream_)
      check(cudaStreamWaitEvent(in_stream_, st.evicted, 0), "cudaStreamWaitEvent (discarded)");
    if (options_.trainer_memory) {
      check(cudaMemPrefetchAsync(pointer(t), static_cast<size_t>(t.bytes), device_location(), 0,
                                 in_stream_),
            "cudaMemPrefetchAsync to the device of '" + t.name + "'");
    } else {
      discard_and_prefetch_blocks(t, in_stream_);
    }
    record(st.ready, in_stream_, t);
    wait_ready(st.ready, stream);
  }

  void require(const Tensor& t, void* stream) override {
    if (!paging_) return;
    State& st = state(t);
    if (paging_->away(t)) {
      copy_back(t);
    } else if (!st.copying_in) {
      return;
    }
    ++stats_.late_requires;
    wait_ready(st.ready, stream);
    st.copying_in = false;
  }

  void waits_done(StepIndex s, void* stream) override {
    if (wait_open_) {
      cudaEvent_t after = timing_event();
      check(cudaEventRecord(after, as_stream(stream)), "cudaEventRecord (after waits)");
      pending_.push_back(Wait{s, wait_before_, after});
      wait_open_ = false;
    }
    harvest(false);
  }

  const BackendStats& stats() override {
    harvest(true);
    return stats_;
  }

  void reset_stats() override {
    harvest(true);
    const size_t steps = stats_.by_step_us.size();
    stats_ = BackendStats{};
    stats_.by_step_us.assign(steps, 0.0);
  }

 private:
  struct State {
    cudaEvent_t evicted = nullptr;  // recorded after the tensor's last evict or discard
    cudaEvent_t ready = nullptr;    // recorded after its last prefetch
    int64_t shadow_offset = -1;     // in the pinned buffer; -1: none
    bool copying_in = false;        // trainer paging: a copy back not yet waited for
  };
  struct Wait {
    StepIndex step;
    cudaEvent_t before, after;
  };

  static cudaStream_t as_stream(void* stream) { return static_cast<cudaStream_t>(stream); }
  cudaMemLocation host_location() const {
    cudaMemLocation l{};
    l.type = cudaMemLocationTypeHost;
    return l;
  }
  cudaMemLocation device_location() const {
    cudaMemLocation l{};
    l.type = cudaMemLocationTypeDevice;
    l.id = options_.device;
    return l;
  }
  State& state(const Tensor& t) { return tensors_[static_cast<size_t>(t.id)]; }

  void select_device() {
    int count = 0;
    check(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
    if (options_.device < 0 || options_.device >= count)
      throw Error(AUTOVM_ERR_INVALID_ARGUMENT, "CUDA device " + std::to_string(options_.device) +
                                                   " does not exist (" + std::to_string(count) +
                                                   " devices)");
    check(cudaSetDevice(options_.device), "cudaSetDevice");
    if (managed_) {
      int managed = 0, concurrent = 0;
      check(cudaDeviceGetAttribute(&managed, cudaDevAttrManagedMemory, options_.device),
            "cudaDeviceGetAttribute");
      check(cudaDeviceGetAttribute(&concurrent, cudaDevAttrConcurrentManagedAccess,
                                   options_.device),
            "cudaDeviceGetAttribute");
      if (!managed || !concurrent)
        throw Error(AUTOVM_ERR_BACKEND,
                    std::string("device ") + std::to_string(options_.device) +
                        " lacks concurrent managed access, which the " + name(options_.mechanism) +
                        " mechanism needs; use the mapped mechanism");
    }
  }

  // Never ask for more device memory than is free (less the margin): on a shared GPU,
  // oversubscribed managed memory can hang the device for everyone.
  void check_fits() const {
    size_t free = 0, total = 0;
    check(cudaMemGetInfo(&free, &total), "cudaMemGetInfo");
    const int64_t usable = static_cast<int64_t>(free) - options_.free_margin_bytes;
    if (arena_bytes_ <= usable) return;
    if (managed_ && options_.allow_oversubscribe) return;
    throw Error(AUTOVM_ERR_OUT_OF_MEMORY,
                std::string("the plan's arena of ") + gib(arena_bytes_) + " does not fit the " +
                    gib(static_cast<int64_t>(free)) + " free on CUDA device " +
                    std::to_string(options_.device) + " less the margin of " +
                    gib(options_.free_margin_bytes) +
                    (managed_ ? "; plan for a smaller arena, or set allow_oversubscribe if this "
                                "GPU is yours alone"
                              : "; plan for a smaller arena"));
  }

  void allocate_managed() {
    void* p = nullptr;
    check(cudaMallocManaged(&p, static_cast<size_t>(arena_bytes_), cudaMemAttachGlobal),
          "cudaMallocManaged of the arena (" + gib(arena_bytes_) + ")");
    arena_ = static_cast<char*>(p);
    // Memory advice, where it helps (tools/bench/staged_in.cu, BENCHMARKS.md): the copy engine
    // writing managed pages that are not on the device faults them in one by one (0.5-0.8
    // GB/s), and cudaMemDiscardAndPrefetchBatchAsync does not always leave a discarded range
    // mapped on the device (the staged way back then collapsed to 0.7-1.3 GB/s from 256 MiB
    // up). AccessedBy(device) keeps the device's mapping: the way back stays at the copy
    // engine's speed. Only for staged: under prefetch and demand paging it would turn the
    // driver's migrations into remote accesses over the link.
    if (options_.mechanism == AUTOVM_MECHANISM_STAGED && options_.mode == AUTOVM_MODE_PLAN &&
        options_.advise_accessed_by)
      check(cudaMemAdvise(arena_, static_cast<size_t>(arena_bytes_), cudaMemAdviseSetAccessedBy,
                          device_location()),
            "cudaMemAdvise(SetAccessedBy) of the arena");
    check(cudaMemPrefetchAsync(arena_, static_cast<size_t>(arena_bytes_), device_location(), 0,
                               nullptr),
          "cudaMemPrefetchAsync of the arena");
    check(cudaMemset(arena_, 0, static_cast<size_t>(arena_bytes_)), "cudaMemset of the arena");
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  }

  void allocate_mapped() {
    vmm_ = Vmm::load();
    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = options_.device;
    size_t granularity = 0;
    check(vmm_.granularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED),
          "cuMemGetAllocationGranularity");
    const auto g = static_cast<int64_t>(granularity);
    mapped_bytes_ = static_cast<size_t>((arena_bytes_ + g - 1) / g * g);
    check(vmm_.reserve(&mapped_base_, mapped_bytes_, granularity, 0, 0), "cuMemAddressReserve");
    check(vmm_.create(&mapped_handle_, mapped_bytes_, &prop, 0),
          "cuMemCreate of the arena (" + gib(static_cast<int64_t>(mapped_bytes_)) + ")");
    check(vmm_.map(mapped_base_, mapped_bytes_, 0, mapped_handle_, 0), "cuMemMap");
    CUmemAccessDesc access{};
    access.location = prop.location;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    check(vmm_.set_access(mapped_base_, mapped_bytes_, &access, 1), "cuMemSetAccess");
    arena_ = reinterpret_cast<char*>(mapped_base_);
    check(cudaMemset(arena_, 0, mapped_bytes_), "cudaMemset of the arena");
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  }

  // Trainer paging: the pages of t come back (or never went) and its bytes are copied back on
  // the in stream after its copy out, unless the trainer freed it; records t's ready event.
  void bring_back(const Tensor& t) {
    State& st = state(t);
    switch (paging_->bring_back(t)) {
      case TrainerPaging::Back::kCopy:
        copy(pointer(t), shadow(t), t, in_stream_, "to the device");
        st.copying_in = true;
        break;
      case TrainerPaging::Back::kIntact:
        break;
      case TrainerPaging::Back::kStale:
        ++stats_.stale_prefetches;
        break;
    }
    record(st.ready, in_stream_, t);
    paging_->hold(t, st.ready);
  }

  // Trainer paging: every bound tensor away comes back (copy_back); returns them.
  std::vector<const Tensor*> copy_back_away() {
    std::vector<const Tensor*> back;
    for (const Tensor& t : plan_tensors_)
      if (Backend::bound(t) && paging_->away(t)) {
        copy_back(t);
        back.push_back(&t);
      }
    return back;
  }

  // bring_back outside the plan's prefetch: after the tensor's copy out.
  void copy_back(const Tensor& t) {
    State& st = state(t);
    if (st.evicted) check(cudaStreamWaitEvent(in_stream_, st.evicted, 0), "cudaStreamWaitEvent (evicted)");
    bring_back(t);
  }

  // One pinned host buffer with a slot per tensor the plan moves through the copy engine
  // (staged, mapped): every evicted tensor, and the persistent ones kept on the host; with
  // trainer paging the discarded ones too (the trainer's bytes are copied out, never dropped).
  void allocate_shadows(const Plan& plan) {
    if (options_.mechanism == AUTOVM_MECHANISM_PREFETCH || options_.mode != AUTOVM_MODE_PLAN)
      return;
    std::vector<bool> moved(plan.tensors.size(), false);
    for (const Action& a : plan.actions)
      if (a.kind == AUTOVM_ACTION_EVICT || (paging_ && a.kind == AUTOVM_ACTION_DISCARD))
        moved[static_cast<size_t>(a.tensor)] = true;
    for (const Tensor& t : plan.tensors)
      if (t.starts_on_host) moved[static_cast<size_t>(t.id)] = true;
    int64_t total = 0;
    for (const Tensor& t : plan.tensors) {
      if (!moved[static_cast<size_t>(t.id)]) continue;
      state(t).shadow_offset = total;
      total += (t.bytes + kPinnedAlignment - 1) / kPinnedAlignment * kPinnedAlignment;
    }
    if (total == 0) return;
    void* p = nullptr;
    check(cudaHostAlloc(&p, static_cast<size_t>(total), cudaHostAllocPortable),
          "cudaHostAlloc of " + gib(total) + " of pinned host memory for evicted tensors");
    pinned_ = static_cast<char*>(p);
  }

  char* shadow(const Tensor& t) {
    const int64_t offset = state(t).shadow_offset;
    if (offset < 0 || pinned_ == nullptr)
      throw Error(AUTOVM_ERR_BACKEND, "tensor '" + t.name + "' has no host buffer");
    return pinned_ + offset;
  }

  void copy(void* to, const void* from, const Tensor& t, cudaStream_t stream, const char* way) {
    check(cudaMemcpyAsync(to, from, static_cast<size_t>(t.bytes), cudaMemcpyDefault, stream),
          std::string("cudaMemcpyAsync ") + way + " of '" + t.name + "'");
  }

  // The whole 2 MiB blocks inside the tensor's range; false when there are none.
  bool blocks(const Tensor& t, void*& begin, size_t& size) {
    const auto base = static_cast<int64_t>(reinterpret_cast<uintptr_t>(pointer(t)));
    const int64_t first = (base + kDiscardBlock - 1) / kDiscardBlock * kDiscardBlock;
    const int64_t end = (base + t.bytes) / kDiscardBlock * kDiscardBlock;
    if (end <= first) return false;
    begin = reinterpret_cast<void*>(first);
    size = static_cast<size_t>(end - first);
    return true;
  }

  void discard_blocks(const Tensor& t, cudaStream_t stream) {
    void* p = nullptr;
    size_t size = 0;
    if (!blocks(t, p, size)) return;
    check(cudaMemDiscardBatchAsync(&p, &size, 1, 0, stream),
          "cudaMemDiscardBatchAsync of '" + t.name + "'");
  }

  void discard_and_prefetch_blocks(const Tensor& t, cudaStream_t stream) {
    void* p = nullptr;
    size_t size = 0;
    if (!blocks(t, p, size)) return;
    cudaMemLocation where = device_location();
    size_t index = 0;
    check(cudaMemDiscardAndPrefetchBatchAsync(&p, &size, 1, &where, &index, 1, 0, stream),
          "cudaMemDiscardAndPrefetchBatchAsync of '" + t.name + "'");
  }

  // The copy stream waits (once per step boundary) until the compute stream has passed the
  // step just enqueued.
  void wait_for_step(cudaStream_t copy_stream) {
    bool& waited = copy_stream == out_stream_ ? out_waited_ : in_waited_;
    if (waited) return;
    check(cudaStreamWaitEvent(copy_stream, step_event_, 0), "cudaStreamWaitEvent (step)");
    waited = true;
    if (in_stream_ == out_stream_) out_waited_ = in_waited_ = true;
  }

  void record(cudaEvent_t& event, cudaStream_t stream, const Tensor& t) {
    if (!event)
      check(cudaEventCreateWithFlags(&event, cudaEventDisableTiming),
            "cudaEventCreate for '" + t.name + "'");
    check(cudaEventRecord(event, stream), "cudaEventRecord for '" + t.name + "'");
  }

  // The compute stream waits for `event` (timed with the other waits before this step).
  void wait_ready(cudaEvent_t event, void* stream) {
    if (!event) return;
    if (!wait_open_) {
      wait_before_ = timing_event();
      check(cudaEventRecord(wait_before_, as_stream(stream)), "cudaEventRecord (before waits)");
      wait_open_ = true;
    }
    check(cudaStreamWaitEvent(as_stream(stream), event, 0), "cudaStreamWaitEvent");
  }

  cudaEvent_t timing_event() {
    if (!spare_events_.empty()) {
      cudaEvent_t e = spare_events_.back();
      spare_events_.pop_back();
      return e;
    }
    cudaEvent_t e = nullptr;
    check(cudaEventCreate(&e), "cudaEventCreate");
    return e;
  }

  // Reads the timings of the waits whose events have completed, oldest first; with `all`,
  // waits for the rest.
  void harvest(bool all) {
    while (!pending_.empty()) {
      Wait& w = pending_.front();
      if (all) {
        check(cudaEventSynchronize(w.after), "cudaEventSynchronize");
      } else {
        const cudaError_t s = cudaEventQuery(w.after);
        if (s == cudaErrorNotReady) return;
        check(s, "cudaEventQuery");
      }
      float ms = 0;
      check(cudaEventElapsedTime(&ms, w.before, w.after), "cudaEventElapsedTime");
      const double us = 1000.0 * ms;
      stats_.by_step_us[static_cast<size_t>(w.step)] += us;
      stats_.total_us += us;
      ++stats_.measured;
      if (us > kLateUs) ++stats_.late;
      spare_events_.push_back(w.before);
      spare_events_.push_back(w.after);
      pending_.pop_front();
    }
  }

  CudaBackendOptions options_;
  bool managed_ = true;
  int64_t arena_bytes_ = 0;
  char* arena_ = nullptr;
  char* pinned_ = nullptr;
  Vmm vmm_;
  CUdeviceptr mapped_base_ = 0;
  size_t mapped_bytes_ = 0;
  CUmemGenericAllocationHandle mapped_handle_ = 0;
  std::unique_ptr<TrainerPaging> paging_;  // trainer memory on a vmm pool

  cudaStream_t out_stream_ = nullptr, in_stream_ = nullptr;
  cudaEvent_t step_event_ = nullptr;
  bool out_waited_ = false, in_waited_ = false;
  std::vector<State> tensors_;
  std::vector<Tensor> plan_tensors_;  // the plan's, for restore_trainer_memory

  bool wait_open_ = false;
  cudaEvent_t wait_before_ = nullptr;
  std::deque<Wait> pending_;
  std::vector<cudaEvent_t> spare_events_;
  BackendStats stats_;  // stalls of the waits harvested so far, and trainer paging's counts
};

}  // namespace

std::unique_ptr<Backend> make_cuda_backend(const Plan& plan, const CudaBackendOptions& options) {
  return std::make_unique<CudaBackend>(plan, options);
}

}  // namespace autovm::rt
