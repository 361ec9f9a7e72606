// The bookkeeping of trainer_paging.h. poll() pages out what has landed (cudaEventQuery) at
// every boundary; page_out_now() is where the host must wait: the host runs ahead of the device
// (PyTorch enqueues a whole step before the loss is read), so without that wait a prefetch
// would come first and cancel the page-out, and device memory would stay at the step's peak
// (docs/trainer-paging.md gives the figures). reclaim() is the pool's: an allocation the limit
// refuses waits for every pending copy out and pages those tensors out.
#include "trainer_paging.h"

#include <algorithm>
#include <mutex>
#include <string>

#include "host_timer.h"

#include "cuda_driver.h"

namespace autovm::rt {

TrainerPaging::TrainerPaging(DevicePool& pool, size_t tensors)
    : pool_(pool), tensors_(tensors), remote_(tensors) {
  if (!pool.pages())
    throw Error(AUTOVM_ERR_INVALID_ARGUMENT,
                "the mapped mechanism on trainer memory needs the trainer's tensors on a vmm pool "
                "(autovm_pool_options.memory AUTOVM_POOL_VMM; in Python "
                "autovm.allocator.install('vmm')); a managed pool moves by migration: use the "
                "prefetch mechanism");
  pool_.add_reclaimer(this, [this] { return reclaim(); });
}

TrainerPaging::~TrainerPaging() {
  pool_.remove_reclaimer(this);
  pool_.drop_holds(this);
  for (Remote& r : remote_)
    if (r.done) cudaEventDestroy(r.done);
}

void TrainerPaging::bind(const Tensor& t, void* p) {
  std::lock_guard<std::mutex> lock(mutex_);
  State& st = state(t);
  Remote& r = remote_[static_cast<size_t>(t.id)];
  if (r.mapped) {  // the binding ends with the host memory mapped: the range keeps it, lent
    r.mapped = false;
    if (st.live) {
      r.lent = st.live;
      r.lent_address = st.address;
      r.lent_bytes = st.bytes;
    }
  }
  if (st.away) --away_count_;
  if (p == nullptr) {
    st = State{};
    cancel_page_out(t.id);
    return;
  }
  const auto live = pool_.live(p, static_cast<uint64_t>(t.bytes));
  if (!live)
    throw Error(AUTOVM_ERR_INVALID_ARGUMENT,
                "the range bound to '" + t.name + "' is not inside one live allocation of the "
                "vmm pool, which the mapped mechanism on trainer memory needs");
  st = State{live, reinterpret_cast<uintptr_t>(p), static_cast<uint64_t>(t.bytes), false, false, 0};
}

void TrainerPaging::evicting(const Tensor& t, cudaEvent_t copied) {
  std::lock_guard<std::mutex> lock(mutex_);
  State& st = state(t);
  if (!st.live) return;
  if (!st.away) ++away_count_;
  st.away = true;
  pending_.push_back(PageOut{t.id, copied});
}

void TrainerPaging::cancel_page_out(TensorId id) {
  pending_.erase(std::remove_if(pending_.begin(), pending_.end(),
                                [&](const PageOut& o) { return o.tensor == id; }),
                 pending_.end());
}

bool TrainerPaging::away(const Tensor& t) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return state(t).away;
}

void TrainerPaging::poll() {
  std::lock_guard<std::mutex> lock(mutex_);
  size_t kept = 0;
  for (const PageOut& o : pending_) {
    const cudaError_t done = cudaEventQuery(o.copied);
    if (done == cudaErrorNotReady) {
      pending_[kept++] = o;
      continue;
    }
    check(done, "cudaEventQuery of an eviction's copy");
    page_out(o.tensor);
  }
  pending_.resize(kept);
}

bool TrainerPaging::reclaim() {
  std::unique_lock<std::mutex> lock(mutex_, std::try_to_lock);
  if (!lock.owns_lock()) return false;  // busy on another thread: its own boundary pages out
  bool any = false;
  for (const PageOut& o : pending_) any = land(o) || any;
  pending_.clear();
  return any;
}

bool TrainerPaging::land(const PageOut& o) {
  {
    const HostTimer waiting(times_.wait_us);
    check(cudaEventSynchronize(o.copied), "cudaEventSynchronize of an eviction's copy");
  }
  return page_out(o.tensor);
}

bool TrainerPaging::page_out(TensorId id) {
  State& st = tensors_[static_cast<size_t>(id)];
  if (!st.live || !st.away) return false;
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const State& other = tensors_[i];
    if (static_cast<TensorId>(i) == id || !other.live || other.away ||
        other.live->serial != st.live->serial)
      continue;
    if (other.address < st.address + st.bytes && st.address < other.address + other.bytes)
      return false;  // shares the storage
  }
  int64_t released = 0;
  {
    const HostTimer paging(times_.vmm_us);
    released = pool_.page_out(*st.live, st.address, st.bytes);
  }
  st.paged = released > 0 || st.paged;
  st.paged_bytes += released;
  return released > 0;
}

void TrainerPaging::page_out_now(const Tensor& t) {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto it = std::find_if(pending_.begin(), pending_.end(),
                               [&](const PageOut& o) { return o.tensor == t.id; });
  if (it == pending_.end()) return;
  land(*it);
  pending_.erase(it);
}

TrainerPaging::Back TrainerPaging::bring_back(const Tensor& t) {
  std::lock_guard<std::mutex> lock(mutex_);
  State& st = state(t);
  Remote& r = remote_[static_cast<size_t>(t.id)];
  if (!st.live) {
    r.mapped = false;  // the trainer freed it: the pool unmaps the host memory
    return Back::kStale;
  }
  cancel_page_out(t.id);
  if (st.away) --away_count_;
  st.away = false;
  if (!st.paged) return Back::kIntact;  // a pending page-out is cancelled: the bytes stayed
  st.paged = false;
  st.paged_bytes = 0;
  if (r.mapped) {  // page_in unmaps the host memory: the step reading it must have run
    settle(r);
    r.mapped = false;
  }
  bool mapped = false;
  {
    const HostTimer paging(times_.vmm_us);
    mapped = pool_.page_in(*st.live, st.address, st.bytes);
  }
  if (!mapped) {
    st.live.reset();  // the trainer freed it: nothing of it is ours to move
    return Back::kStale;
  }
  return Back::kCopy;
}

std::vector<TensorId> TrainerPaging::away_overlapping(const void* p, uint64_t bytes) const {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto begin = reinterpret_cast<uintptr_t>(p);
  std::vector<TensorId> out;
  if (away_count_ == 0) return out;  // every bind asks: most find nothing away
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const State& st = tensors_[i];
    if (st.live && st.away && st.address < begin + bytes && begin < st.address + st.bytes)
      out.push_back(static_cast<TensorId>(i));
  }
  return out;
}

void TrainerPaging::hold(const Tensor& t, cudaEvent_t event) {
  std::lock_guard<std::mutex> lock(mutex_);
  const State& st = state(t);
  if (st.live) pool_.hold(*st.live, event, this);
}

// ---- remote reads ------------------------------------------------------------------------

void TrainerPaging::add_remote(const Tensor& t, std::unique_ptr<HostNumaChunks> host) {
  std::lock_guard<std::mutex> lock(mutex_);
  remote_[static_cast<size_t>(t.id)].host = std::move(host);
}

bool TrainerPaging::remote(const Tensor& t) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return remote_[static_cast<size_t>(t.id)].host != nullptr;
}

char* TrainerPaging::staging(const Tensor& t) const {
  std::lock_guard<std::mutex> lock(mutex_);
  const Remote& r = remote_[static_cast<size_t>(t.id)];
  const State& st = state(t);
  if (!r.host || st.address == 0)
    throw Error(AUTOVM_ERR_BACKEND, "tensor '" + t.name + "' has no host memory for its copy");
  return r.host->base() + st.address % static_cast<uintptr_t>(r.host->chunk());
}

TrainerPaging::RemoteRead TrainerPaging::map_remote(const Tensor& t, cudaStream_t stream) {
  std::lock_guard<std::mutex> lock(mutex_);
  State& st = state(t);
  Remote& r = remote_[static_cast<size_t>(t.id)];
  if (!st.live || !st.away) return RemoteRead::kLocal;
  cancel_page_out(t.id);  // pages still there stay for the step
  if (!st.paged) return RemoteRead::kLocal;
  r.stream = stream;
  r.done_recorded = false;
  if (r.mapped) return RemoteRead::kMapped;  // since an earlier step's remote read
  if (!r.host) return RemoteRead::kBack;
  const std::vector<uint64_t>& handles = r.host->handles();
  const int64_t mapped = pool_.map_host(*st.live, st.address, st.bytes, handles.data(), handles.size());
  r.mapped = mapped > 0;
  return r.mapped && mapped == st.paged_bytes ? RemoteRead::kMapped : RemoteRead::kBack;
}

void TrainerPaging::remote_done(const Tensor& t, cudaStream_t stream) {
  std::lock_guard<std::mutex> lock(mutex_);
  Remote& r = remote_[static_cast<size_t>(t.id)];
  if (!r.mapped) return;
  if (!r.done)
    check(cudaEventCreateWithFlags(&r.done, cudaEventDisableTiming),
          "cudaEventCreate for '" + t.name + "'");
  check(cudaEventRecord(r.done, stream), "cudaEventRecord after the remote read of '" + t.name + "'");
  r.stream = stream;
  r.done_recorded = true;
}

void TrainerPaging::settle(Remote& r) {
  if (!r.done_recorded) {
    if (!r.done)
      check(cudaEventCreateWithFlags(&r.done, cudaEventDisableTiming), "cudaEventCreate");
    check(cudaEventRecord(r.done, r.stream), "cudaEventRecord (a remote read's step)");
    r.done_recorded = true;
  }
  const HostTimer waiting(times_.wait_us);
  check(cudaEventSynchronize(r.done), "cudaEventSynchronize of a remote read's step");
}

bool TrainerPaging::readable(const Tensor& t) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return remote_[static_cast<size_t>(t.id)].mapped && state(t).away;
}

std::optional<TrainerPaging::Lent> TrainerPaging::take_back(const Tensor& t) {
  std::lock_guard<std::mutex> lock(mutex_);
  Remote& r = remote_[static_cast<size_t>(t.id)];
  if (!r.lent) return std::nullopt;
  const DevicePool::Live old = *r.lent;
  r.lent.reset();
  settle(r);
  bool mapped = false;
  {
    const HostTimer paging(times_.vmm_us);
    mapped = pool_.page_in(old, r.lent_address, r.lent_bytes);
  }
  if (!mapped) return std::nullopt;  // freed
  return Lent{old, r.lent_address, r.lent_bytes,
              r.host->base() + r.lent_address % static_cast<uintptr_t>(r.host->chunk())};
}

void TrainerPaging::hold(const DevicePool::Live& a, cudaEvent_t event) {
  std::lock_guard<std::mutex> lock(mutex_);
  pool_.hold(a, event, this);
}

std::vector<TensorId> TrainerPaging::lent_overlapping(const void* p, uint64_t bytes) const {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto begin = reinterpret_cast<uintptr_t>(p);
  std::vector<TensorId> out;
  for (size_t i = 0; i < remote_.size(); ++i) {
    const Remote& r = remote_[i];
    if (r.lent && r.lent_address < begin + bytes && begin < r.lent_address + r.lent_bytes)
      out.push_back(static_cast<TensorId>(i));
  }
  return out;
}

TrainerPaging::HostTimes TrainerPaging::host_times() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return times_;
}

void TrainerPaging::reset_host_times() {
  std::lock_guard<std::mutex> lock(mutex_);
  times_ = HostTimes{};
}

std::vector<TensorId> TrainerPaging::lent() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<TensorId> out;
  for (size_t i = 0; i < remote_.size(); ++i)
    if (remote_[i].lent) out.push_back(static_cast<TensorId>(i));
  return out;
}

}  // namespace autovm::rt
