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
//   remote    a read_remote at step s (docs/execution-model.md, "Remote reads"), at step_begin(s):
//               managed (prefetch, staged; arena or trainer memory)  the evict migrated the
//                         tensor to the host (staged too, for the tensors the plan reads
//                         remotely: their bytes must stay in their pages); the range is advised
//                         preferred location host and accessed by the device, so kernels read
//                         it there over the link instead of faulting it back. Its preferred
//                         location is restored before a prefetch of it, and after the last step
//                         that reads it remotely, when the range also migrates back to the
//                         device after that step (migration never changes a byte, so the
//                         range's next tensor never races it).
//               mapped, arena  the evict copies into host NUMA memory mapped into the
//                         device's address space (HostNumaChunks, created with the backend),
//                         and step s reads it there (remote_address): the arena is one mapping
//                         (cuMemUnmap cannot unmap part of it), and its range, packed by
//                         residency, is another tensor's at s.
//               mapped, trainer memory  the copy out lands in host NUMA memory of the
//                         tensor's own, which is mapped at its paged-out chunks for s
//                         (trainer_paging.h): kernels read it at its own address.
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
#include <memory>
#include <string>

#include "backend.h"
#include "cuda_arena.h"
#include "cuda_driver.h"
#include "host_numa.h"
#include "remote_advice.h"
#include "stall_timer.h"
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
      : options_(options), tensors_(plan.tensors.size()), plan_tensors_(plan.tensors),
        advice_(plan.tensors.size(), options.device) {
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
        arena_ = std::make_unique<DeviceArena>(options_, std::max<int64_t>(plan.memory_bytes(), 1));
      }
      check(cudaStreamCreateWithFlags(&out_stream_, cudaStreamNonBlocking), "cudaStreamCreate");
      if (managed_) {
        in_stream_ = out_stream_;
      } else {
        check(cudaStreamCreateWithFlags(&in_stream_, cudaStreamNonBlocking), "cudaStreamCreate");
      }
      check(cudaEventCreateWithFlags(&step_event_, cudaEventDisableTiming), "cudaEventCreate");
      stats_.by_step_us.assign(plan.steps.size(), 0.0);
      if (options_.mode == AUTOVM_MODE_PLAN) plan_remote_reads(plan);
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
      for (TensorId t : paging_->lent()) give_back(plan_tensors_[static_cast<size_t>(t)]);
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
    host_.clear();
    for (auto& t : tensors_) {
      if (t.evicted) cudaEventDestroy(t.evicted);
      if (t.ready) cudaEventDestroy(t.ready);
      if (t.lent_back) cudaEventDestroy(t.lent_back);
    }
    if (step_event_) cudaEventDestroy(step_event_);
    if (in_stream_ && in_stream_ != out_stream_) cudaStreamDestroy(in_stream_);
    if (out_stream_) cudaStreamDestroy(out_stream_);
    if (pinned_) cudaFreeHost(pinned_);
    arena_.reset();
  }

  void* at(int64_t offset) override { return arena_ ? arena_->base() + offset : nullptr; }

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
      // One whose host memory is mapped in its range (its last use read it remotely) keeps it
      // there, lent: its bytes stay readable where the trainer has them.
      if (Backend::bound(t) && paging_->away(t) && !(p == nullptr && paging_->readable(t)))
        copy_back(t);
      if (p != nullptr) {
        for (TensorId other : paging_->away_overlapping(p, static_cast<uint64_t>(t.bytes)))
          copy_back(plan_tensors_[static_cast<size_t>(other)]);
        for (TensorId other : paging_->lent_overlapping(p, static_cast<uint64_t>(t.bytes)))
          give_back(plan_tensors_[static_cast<size_t>(other)]);
      }
      paging_->bind(t, p);
    }
    Backend::bind(t, p);
  }
  bool has_memory() const override { return true; }

  void step_enqueued(StepIndex s, void* stream) override {
    check(cudaEventRecord(step_event_, as_stream(stream)), "cudaEventRecord (step)");
    out_waited_ = in_waited_ = false;
    for (const Tensor* t : reading_) {  // the remote reads of step s, now enqueued
      if (paging_) {
        paging_->remote_done(*t, as_stream(stream));
      } else if (managed_ && last_remote_[static_cast<size_t>(t->id)] == s) {
        unadvise(*t);
        // Back to the device, after s, for the range's next tensor (bytes unchanged).
        wait_for_step(in_stream_);
        check(cudaMemPrefetchAsync(pointer(*t), static_cast<size_t>(t->bytes), device_location(),
                                   0, in_stream_),
              "cudaMemPrefetchAsync to the device of '" + t->name + "' after its remote read");
        record(state(*t).ready, in_stream_, *t);
      }
    }
    reading_.clear();
    if (paging_) paging_->poll();
  }

  void evict_issue(const Tensor& t, void*) override {
    wait_for_step(out_stream_);
    State& st = state(t);
    if (paging_ && st.remote) give_back(t);  // its host memory, before it is written again
    switch (options_.mechanism) {
      case AUTOVM_MECHANISM_PREFETCH:
        migrate(t, host_location(), out_stream_, "to the host");
        break;
      case AUTOVM_MECHANISM_STAGED:
        if (st.remote) {  // read remotely later: its bytes stay in its pages, on the host
          migrate(t, host_location(), out_stream_, "to the host");
          break;
        }
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
    unadvise(t);
    switch (options_.mechanism) {
      case AUTOVM_MECHANISM_PREFETCH:
        migrate(t, device_location(), in_stream_, "to the device");
        break;
      case AUTOVM_MECHANISM_STAGED:
        if (st.remote) {  // evicted by migration
          migrate(t, device_location(), in_stream_, "to the device");
          break;
        }
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
      migrate(t, device_location(), in_stream_, "to the device");
    } else {
      discard_and_prefetch_blocks(t, in_stream_);
    }
    record(st.ready, in_stream_, t);
    wait_ready(st.ready, stream);
  }

  void require(const Tensor& t, void* stream) override {
    if (!paging_) return;
    State& st = state(t);
    if (paging_->readable(t)) return;  // read remotely in place: its bytes are there
    if (paging_->away(t)) {
      copy_back(t);
    } else if (!st.copying_in) {
      return;
    }
    ++stats_.late_requires;
    wait_ready(st.ready, stream);
    st.copying_in = false;
  }

  void remote_read_prepare(const Tensor& t, StepIndex, void* stream) override {
    if (paging_) {
      switch (paging_->map_remote(t, as_stream(stream))) {
        case TrainerPaging::RemoteRead::kMapped: reading_.push_back(&t); break;
        case TrainerPaging::RemoteRead::kLocal: break;
        case TrainerPaging::RemoteRead::kBack:  // its pages could not all map its host memory
          copy_back(t);
          wait_ready(state(t).ready, stream);
          state(t).copying_in = false;
          break;
      }
      return;
    }
    if (!managed_) return;  // the mapped arena: remote_address() is where its copy lies
    advise(t);
    reading_.push_back(&t);
  }

  void* remote_address(const Tensor& t) override {
    const auto i = static_cast<size_t>(t.id);
    return i < host_.size() && host_[i] ? host_[i]->base() : nullptr;
  }

  void waits_done(StepIndex s, void* stream) override {
    timer_.close(s, as_stream(stream));
    timer_.harvest(stats_, false);
  }

  const BackendStats& stats() override {
    timer_.harvest(stats_, true);
    if (paging_) {
      const TrainerPaging::HostTimes times = paging_->host_times();
      stats_.host_wait_us = times.wait_us;
      stats_.paging_us = times.vmm_us;
    }
    return stats_;
  }

  void reset_stats() override {
    timer_.harvest(stats_, true);
    const size_t steps = stats_.by_step_us.size();
    stats_ = BackendStats{};
    stats_.by_step_us.assign(steps, 0.0);
    if (paging_) paging_->reset_host_times();
  }

 private:
  struct State {
    cudaEvent_t evicted = nullptr;  // recorded after the tensor's last evict or discard
    cudaEvent_t ready = nullptr;    // recorded after its last prefetch
    cudaEvent_t lent_back = nullptr;  // trainer paging: after its host memory's copy back
    int64_t shadow_offset = -1;     // in the pinned buffer; -1: none
    bool copying_in = false;        // trainer paging: a copy back not yet waited for
    bool remote = false;            // some step reads it remotely (mode PLAN)
  };

  static cudaStream_t as_stream(void* stream) { return static_cast<cudaStream_t>(stream); }
  cudaMemLocation device_location() const { return rt::device_location(options_.device); }
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

  // Remote reads (mode PLAN): which tensors, and the host memory they are read from where the
  // backend copies them (mapped). Created here, once: pinning host memory is slow.
  void plan_remote_reads(const Plan& plan) {
    const std::vector<bool> remote = read_remotely(plan);
    host_.resize(plan.tensors.size());
    for (const Tensor& t : plan.tensors) state(t).remote = remote[static_cast<size_t>(t.id)];
    last_remote_ = last_remote_reads(plan);
    if (managed_) return;
    vmm_ = Vmm::load();
    for (const Tensor& t : plan.tensors) {
      if (!remote[static_cast<size_t>(t.id)]) continue;
      const std::string what = "the remote reads of '" + t.name + "'";
      if (paging_) {
        const int64_t chunk = options_.pool->chunk_bytes();
        paging_->add_remote(t, std::make_unique<HostNumaChunks>(vmm_, options_.device,
                                                                t.bytes + chunk, chunk, what));
      } else {
        host_[static_cast<size_t>(t.id)] =
            std::make_unique<HostNumaChunks>(vmm_, options_.device, t.bytes, 0, what);
      }
    }
  }

  // Managed memory: migration of the tensor's range (bytes unchanged).
  void migrate(const Tensor& t, cudaMemLocation to, cudaStream_t stream, const char* way) {
    check(cudaMemPrefetchAsync(pointer(t), static_cast<size_t>(t.bytes), to, 0, stream),
          std::string("cudaMemPrefetchAsync ") + way + " of '" + t.name + "'");
  }

  // Managed memory, a remote read (remote_advice.h).
  void advise(const Tensor& t) { advice_.advise(static_cast<size_t>(t.id), pointer(t), t.bytes, t.name); }
  void unadvise(const Tensor& t) {
    advice_.restore(static_cast<size_t>(t.id), pointer(t), t.bytes, t.name);
  }

  // Trainer paging: t's host memory back from the range it is lent to (trainer_paging.h),
  // before it is written again: the bytes go to that range first, and later copies out wait.
  void give_back(const Tensor& t) {
    const auto lent = paging_->take_back(t);
    if (!lent) return;
    check(cudaMemcpyAsync(reinterpret_cast<void*>(lent->address), lent->from,
                          static_cast<size_t>(lent->bytes), cudaMemcpyDefault, in_stream_),
          "cudaMemcpyAsync of '" + t.name + "' back into the range it was read remotely in");
    State& st = state(t);
    record(st.lent_back, in_stream_, t);
    paging_->hold(lent->live, st.lent_back);
    if (in_stream_ != out_stream_)
      check(cudaStreamWaitEvent(out_stream_, st.lent_back, 0), "cudaStreamWaitEvent (lent back)");
  }

  // One pinned host buffer with a slot per tensor the plan moves through the copy engine
  // (staged, mapped): every evicted tensor, and the persistent ones kept on the host; with
  // trainer paging the discarded ones too (the trainer's bytes are copied out, never dropped).
  // Not those read remotely: their host memory is host_ (mapped), their own (trainer paging),
  // or their pages (staged: migration).
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
      if (!moved[static_cast<size_t>(t.id)] || state(t).remote) continue;
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
    if (state(t).remote) {
      if (paging_) return paging_->staging(t);
      if (host_[static_cast<size_t>(t.id)]) return host_[static_cast<size_t>(t.id)]->base();
    }
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
  void wait_ready(cudaEvent_t event, void* stream) { timer_.wait(event, as_stream(stream)); }

  CudaBackendOptions options_;
  bool managed_ = true;
  std::unique_ptr<DeviceArena> arena_;  // runtime memory
  char* pinned_ = nullptr;
  Vmm vmm_;
  std::unique_ptr<TrainerPaging> paging_;  // trainer memory on a vmm pool

  cudaStream_t out_stream_ = nullptr, in_stream_ = nullptr;
  cudaEvent_t step_event_ = nullptr;
  bool out_waited_ = false, in_waited_ = false;
  std::vector<State> tensors_;
  std::vector<Tensor> plan_tensors_;  // the plan's, for restore_trainer_memory

  StallTimer timer_;
  BackendStats stats_;  // stalls of the waits harvested so far, and trainer paging's counts
  // Remote reads (mode PLAN): the mapped arena's host copies ([tensor], nullptr: none), the
  // step after which each tensor's host copy serves nothing (last_remote_reads, plan.h), and
  // the tensors the running step reads remotely.
  std::vector<std::unique_ptr<HostNumaChunks>> host_;
  std::vector<StepIndex> last_remote_;
  RemoteAdvice advice_;
  std::vector<const Tensor*> reading_;
};

}  // namespace

std::unique_ptr<Backend> make_cuda_backend(const Plan& plan, const CudaBackendOptions& options) {
  return std::make_unique<CudaBackend>(plan, options);
}

}  // namespace autovm::rt
