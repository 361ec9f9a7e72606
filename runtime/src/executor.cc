#include "executor.h"

#include <algorithm>
#include <cassert>
#include <sstream>

#include "host_timer.h"

namespace autovm::rt {
namespace {

bool counts_resident(autovm_residency r) {
  return r == AUTOVM_RESIDENCY_RESIDENT || r == AUTOVM_RESIDENCY_EVICTING ||
         r == AUTOVM_RESIDENCY_PREFETCHING;
}

const char* describe(autovm_residency r) {
  switch (r) {
    case AUTOVM_RESIDENCY_UNALLOCATED: return "outside its lifetime";
    case AUTOVM_RESIDENCY_RESIDENT: return "resident";
    case AUTOVM_RESIDENCY_EVICTING: return "being evicted (its copy to the host is in flight)";
    case AUTOVM_RESIDENCY_ON_HOST: return "on the host (evicted)";
    case AUTOVM_RESIDENCY_PREFETCHING: return "being prefetched (its copy is in flight)";
    case AUTOVM_RESIDENCY_DISCARDED: return "discarded";
  }
  return "?";
}

}  // namespace

Executor::Executor(std::shared_ptr<const Plan> plan, std::unique_ptr<Backend> backend,
                   int64_t budget_bytes, bool strict, autovm_mode mode, bool trainer_memory)
    : plan_(std::move(plan)), backend_(std::move(backend)), budget_bytes_(budget_bytes),
      strict_(strict), mode_(mode), trainer_memory_(trainer_memory) {
  const auto n = static_cast<size_t>(plan_->step_count());
  issued_after_.resize(n + 1);
  due_before_.resize(n + 1);
  remote_at_.resize(n);
  present_at_.resize(n);
  allocated_at_.resize(n);
  freed_after_.resize(n);
  const size_t scheduled = mode_ == AUTOVM_MODE_RESIDENT ? 0 : plan_->actions.size();
  for (size_t i = 0; i < scheduled; ++i) {
    const Action& a = plan_->actions[i];
    if (a.kind == AUTOVM_ACTION_RECOMPUTE) {
      due_before_[static_cast<size_t>(a.ready_before_step)].push_back(i);
      const Tensor& t = plan_->tensors[static_cast<size_t>(a.tensor)];
      if (is_chain_temporary(a, t))  // freed after its one step
        freed_after_[static_cast<size_t>(a.ready_before_step)].push_back(a.tensor);
      continue;
    }
    if (a.kind == AUTOVM_ACTION_READ_REMOTE) {  // at step_begin(ready_before_step)
      remote_at_[static_cast<size_t>(a.ready_before_step)].push_back(i);
      continue;
    }
    issued_after_[static_cast<size_t>(a.after_step + 1)].push_back(i);
    if (a.kind == AUTOVM_ACTION_EVICT || a.kind == AUTOVM_ACTION_PREFETCH)
      due_before_[static_cast<size_t>(a.ready_before_step)].push_back(i);
  }
  // An eviction a prefetch at the same point must wait for (Action::wait_evicted: a range of an
  // arena packed by residency passes from one tensor to the other) is issued first, so that the
  // prefetch's copy finds that eviction's event recorded.
  for (auto& batch : issued_after_) {
    std::vector<TensorId> waited;
    for (size_t i : batch)
      for (TensorId t : plan_->actions[i].wait_evicted) waited.push_back(t);
    if (waited.empty()) continue;
    std::stable_partition(batch.begin(), batch.end(), [&](size_t i) {
      const Action& a = plan_->actions[i];
      return a.kind == AUTOVM_ACTION_EVICT &&
             std::find(waited.begin(), waited.end(), a.tensor) != waited.end();
    });
  }
  // Evictions complete before the prefetches due at the same step: in an arena packed by
  // residency the range an eviction frees may be the one a prefetch fills (the host backend
  // poisons at completion and copies back at completion).
  for (auto& due : due_before_)
    std::stable_partition(due.begin(), due.end(), [&](size_t i) {
      return plan_->actions[i].kind == AUTOVM_ACTION_EVICT;
    });
  state_.assign(plan_->tensors.size(), AUTOVM_RESIDENCY_UNALLOCATED);
  unmoved_.assign(plan_->tensors.size(), false);
  remote_now_.assign(plan_->tensors.size(), false);
  temporary_offset_.assign(plan_->tensors.size(), kNoTemporary);
  for (const Tensor& t : plan_->tensors) {
    if (t.persistent) {
      set_state(t.id, AUTOVM_RESIDENCY_RESIDENT);
      continue;
    }
    (allocated_by_its_step(*plan_, t) ? allocated_at_ : present_at_)[static_cast<size_t>(t.first)]
        .push_back(t.id);
    freed_after_[static_cast<size_t>(t.last)].push_back(t.id);
  }
  stats_.accounting_only = backend_->has_memory() ? 0 : 1;
}

void Executor::set_state(TensorId t, autovm_residency next) {
  const auto i = static_cast<size_t>(t);
  auto& s = state_[i];
  const int64_t bytes = tensor(t).bytes;
  if (counts_resident(s) || unmoved_[i]) stats_.resident_bytes -= bytes;
  // Back on the device by the plan's count, or freed: no longer unmoved.
  if (next == AUTOVM_RESIDENCY_RESIDENT || next == AUTOVM_RESIDENCY_UNALLOCATED) unmoved_[i] = false;
  if (counts_resident(next) || unmoved_[i]) stats_.resident_bytes += bytes;
  s = next;
}

void Executor::set_unmoved(TensorId t, bool unmoved) {
  const auto i = static_cast<size_t>(t);
  const bool held = counts_resident(state_[i]) || unmoved_[i];
  unmoved_[i] = unmoved;
  const bool now = counts_resident(state_[i]) || unmoved_[i];
  stats_.resident_bytes += (now ? tensor(t).bytes : 0) - (held ? tensor(t).bytes : 0);
}

bool Executor::skip(const Tensor& t, int64_t bytes) {
  if (!trainer_memory_) return false;
  if (!unmoved_[static_cast<size_t>(t.id)] && backend_->bound(t)) return false;
  ++stats_.unbound_actions;
  stats_.unbound_bytes += bytes;
  set_unmoved(t.id, true);
  return true;
}

std::string Executor::step_label(StepIndex s) const {
  const Step& step = plan_->steps[static_cast<size_t>(s)];
  std::ostringstream out;
  out << "step " << s << " (" << step.op << " " << step.phase;
  if (!step.node.empty()) out << ", node " << step.node;
  out << ")";
  return out.str();
}

void Executor::issue(StepIndex after_step, void* stream) {
  for (size_t i : issued_after_[static_cast<size_t>(after_step + 1)]) {
    const Action& a = plan_->actions[i];
    const Tensor& t = tensor(a.tensor);
    const autovm_residency now = residency(a.tensor);
    switch (a.kind) {
      case AUTOVM_ACTION_EVICT:
        assert(now == AUTOVM_RESIDENCY_RESIDENT);
        if (!skip(t, a.bytes)) backend_->evict_issue(t, stream);
        set_state(t.id, AUTOVM_RESIDENCY_EVICTING);
        stats_.bytes_to_host += a.bytes;
        ++stats_.evictions;
        break;
      case AUTOVM_ACTION_PREFETCH:
        assert(now == AUTOVM_RESIDENCY_ON_HOST);
        set_state(t.id, AUTOVM_RESIDENCY_PREFETCHING);
        if (mode_ != AUTOVM_MODE_DEMAND_PAGING && !skip(t, a.bytes))
          backend_->prefetch_issue(t, a, stream);
        stats_.bytes_to_device += a.bytes;
        ++stats_.prefetches;
        break;
      case AUTOVM_ACTION_DISCARD:
        assert(now == AUTOVM_RESIDENCY_RESIDENT);
        if (!skip(t, a.bytes)) backend_->discard(t, stream);
        set_state(t.id, AUTOVM_RESIDENCY_DISCARDED);
        ++stats_.discards;
        break;
      case AUTOVM_ACTION_ADVISE: ++stats_.advises; break;
      case AUTOVM_ACTION_RECOMPUTE:
      case AUTOVM_ACTION_READ_REMOTE: break;  // scheduled by ready_before_step
    }
    (void)now;
  }
}

void Executor::complete(StepIndex before_step, void* stream) {
  for (size_t i : due_before_[static_cast<size_t>(before_step)]) {
    const Action& a = plan_->actions[i];
    const Tensor& t = tensor(a.tensor);
    const autovm_residency now = residency(a.tensor);
    // A tensor freed while its copy was in flight (its lifetime ended) stays freed.
    switch (a.kind) {
      case AUTOVM_ACTION_EVICT:
        if (now != AUTOVM_RESIDENCY_EVICTING) break;
        if (!unmoved_[static_cast<size_t>(t.id)]) backend_->evict_complete(t, stream);
        set_state(t.id, AUTOVM_RESIDENCY_ON_HOST);
        break;
      case AUTOVM_ACTION_PREFETCH:
        if (now != AUTOVM_RESIDENCY_PREFETCHING) break;
        if (mode_ != AUTOVM_MODE_DEMAND_PAGING && !unmoved_[static_cast<size_t>(t.id)])
          backend_->prefetch_complete(t, stream);
        set_state(t.id, AUTOVM_RESIDENCY_RESIDENT);
        break;
      case AUTOVM_ACTION_RECOMPUTE:
        if (now == AUTOVM_RESIDENCY_UNALLOCATED) {  // a chain temporary, resident for this step
          assert(a.temporary_offset != kNoTemporary);
          temporary_offset_[static_cast<size_t>(t.id)] = a.temporary_offset;
          set_state(t.id, AUTOVM_RESIDENCY_RESIDENT);
          chain_temporary_bytes_ += t.bytes;
          ++stats_.recomputes;
          break;
        }
        if (now == AUTOVM_RESIDENCY_RESIDENT) break;  // the same temporary named twice
        assert(now == AUTOVM_RESIDENCY_DISCARDED);
        if (!unmoved_[static_cast<size_t>(t.id)]) backend_->recompute_prepare(t, stream);
        set_state(t.id, AUTOVM_RESIDENCY_RESIDENT);
        ++stats_.recomputes;
        break;
      default: break;
    }
  }
}

void Executor::read_remotely(StepIndex s, void* stream) {
  for (size_t i : remote_at_[static_cast<size_t>(s)]) {
    const Action& a = plan_->actions[i];
    const Tensor& t = tensor(a.tensor);
    ++stats_.remote_reads;
    stats_.remote_read_bytes += a.bytes;
    if (residency(t.id) != AUTOVM_RESIDENCY_ON_HOST) continue;  // the plan checked: not met
    remote_now_[static_cast<size_t>(t.id)] = true;
    // Unmoved (trainer memory): its eviction was skipped, its bytes stayed: a local read.
    if (mode_ == AUTOVM_MODE_PLAN && !unmoved_[static_cast<size_t>(t.id)])
      backend_->remote_read_prepare(t, s, stream);
  }
}

void Executor::step_begin(StepIndex s, void* stream) {
  const HostTimer timer(stats_.host_us);
  const StepIndex n = plan_->step_count();
  if (running_)
    throw Error(AUTOVM_ERR_STATE, "autovm_step_begin(" + std::to_string(s) + ") while step " +
                                      std::to_string(*running_) +
                                      " is running; call autovm_step_end for it first");
  if (s != next_)
    throw Error(AUTOVM_ERR_STATE,
                "autovm_step_begin(" + std::to_string(s) + ") out of order: the next step is " +
                    std::to_string(next_) + " (steps run 0.." + std::to_string(n - 1) +
                    ", then a new training step starts at 0)");
  if (s == 0 && mode_ != AUTOVM_MODE_RESIDENT) {
    backend_->step_enqueued(-1, stream);
    for (const Tensor& t : plan_->tensors) {
      if (!t.starts_on_host || residency(t.id) != AUTOVM_RESIDENCY_RESIDENT) continue;
      if (!skip(t, t.bytes)) {
        backend_->evict_issue(t, stream);
        backend_->evict_complete(t, stream);
      }
      set_state(t.id, AUTOVM_RESIDENCY_ON_HOST);
      stats_.initial_offload_bytes += t.bytes;
    }
    issue(-1, stream);
  }
  // The moment before step s (docs/execution-model.md): the transfers due complete and the
  // chains run, with their temporaries; what s allocates as it starts is not there yet.
  chain_temporary_bytes_ = 0;
  for (TensorId t : present_at_[static_cast<size_t>(s)]) set_state(t, AUTOVM_RESIDENCY_RESIDENT);
  complete(s, stream);
  read_remotely(s, stream);
  const int64_t before = stats_.resident_bytes;
  for (TensorId t : allocated_at_[static_cast<size_t>(s)]) set_state(t, AUTOVM_RESIDENCY_RESIDENT);
  backend_->waits_done(s, stream);
  running_ = s;
  // Step s itself: its chains' temporaries are gone (their state stays resident until
  // step_end, for autovm_tensor_pointer, but their bytes are free).
  const int64_t held = std::max(before, stats_.resident_bytes - chain_temporary_bytes_);
  stats_.peak_resident_bytes = std::max(stats_.peak_resident_bytes, held);
  if (mode_ != AUTOVM_MODE_RESIDENT && held > budget_bytes_) {
    ++stats_.violations;
    if (strict_)
      throw Error(AUTOVM_ERR_OUT_OF_MEMORY,
                  step_label(s) + " has " + std::to_string(held) +
                      " bytes resident (in it or in the moment before it), over the budget of " + std::to_string(budget_bytes_) +
                      "; plan again with autovm-plan --budget " + std::to_string(budget_bytes_) +
                      "B, or raise budget_bytes (the step has begun)");
  }
}

void Executor::step_end(StepIndex s, void* stream) {
  const HostTimer timer(stats_.host_us);
  const StepIndex n = plan_->step_count();
  if (!running_ || *running_ != s)
    throw Error(AUTOVM_ERR_STATE,
                "autovm_step_end(" + std::to_string(s) + ") without autovm_step_begin(" +
                    std::to_string(s) + ")" +
                    (running_ ? "; step " + std::to_string(*running_) + " is running"
                              : "; no step is running"));
  backend_->step_enqueued(s, stream);
  for (size_t i : remote_at_[static_cast<size_t>(s)])
    remote_now_[static_cast<size_t>(plan_->actions[i].tensor)] = false;
  issue(s, stream);
  if (s == n - 1) complete(n, stream);
  for (TensorId t : freed_after_[static_cast<size_t>(s)]) {
    set_state(t, AUTOVM_RESIDENCY_UNALLOCATED);
    temporary_offset_[static_cast<size_t>(t)] = kNoTemporary;
    // The trainer's range may hold another tensor from here: bound again next training step.
    if (trainer_memory_ && !tensor(t).persistent) backend_->bind(tensor(t), nullptr);
  }
  running_.reset();
  if (s == n - 1) {
    next_ = 0;
    ++stats_.training_steps;
  } else {
    next_ = s + 1;
  }
}

void Executor::touch(StepIndex s, TensorId id) {
  if (!running_ || *running_ != s)
    throw Error(AUTOVM_ERR_STATE, "autovm_touch at step " + std::to_string(s) +
                                      (running_ ? " while step " + std::to_string(*running_) +
                                                      " is running"
                                                : " while no step is running") +
                                      "; touch tensors between step_begin and step_end");
  const autovm_residency now = residency(id);
  if (now == AUTOVM_RESIDENCY_RESIDENT) return;
  if (now == AUTOVM_RESIDENCY_ON_HOST && remote_now_[static_cast<size_t>(id)]) return;  // read remotely
  ++stats_.violations;
  if (!strict_) return;
  const Tensor& t = tensor(id);
  throw Error(AUTOVM_ERR_NOT_RESIDENT,
              step_label(s) + " uses tensor '" + t.name + "' (id " + std::to_string(id) +
                  "), which is " + describe(now) + " at that step; the plan does not keep it "
                  "resident there: check it with 'autovm-inspect verify', or plan again");
}

void Executor::require(TensorId id, void* stream) {
  const Tensor& t = tensor(id);
  if (mode_ == AUTOVM_MODE_RESIDENT || !backend_->bound(t)) return;
  backend_->require(t, stream);
}

void Executor::bind(TensorId id, void* p, int64_t bytes) {
  const Tensor& t = tensor(id);
  if (p != nullptr && bytes != t.bytes)
    throw Error(AUTOVM_ERR_INVALID_ARGUMENT, "autovm_tensor_bind: tensor '" + t.name + "' has " +
                                                 std::to_string(t.bytes) + " bytes, not " +
                                                 std::to_string(bytes));
  const autovm_residency now = residency(id);
  if (now != AUTOVM_RESIDENCY_RESIDENT && now != AUTOVM_RESIDENCY_UNALLOCATED &&
      !unmoved_[static_cast<size_t>(id)])
    throw Error(AUTOVM_ERR_STATE, "autovm_tensor_bind of '" + t.name + "', which is " +
                                      describe(now) +
                                      "; bind it while it is resident or outside its lifetime");
  backend_->bind(t, p);
}

autovm_stats Executor::stats() const {
  autovm_stats out = stats_;
  const BackendStats& stalls = backend_->stats();
  out.stall_us = stalls.total_us;
  out.late_prefetches = stalls.late;
  out.measured_waits = stalls.measured;
  out.late_requires = stalls.late_requires;
  out.stale_prefetches = stalls.stale_prefetches;
  out.host_wait_us = stalls.host_wait_us;
  out.paging_us = stalls.paging_us;
  out.memory_bytes = trainer_memory_ ? 0 : plan_->memory_bytes();
  return out;
}

void Executor::reset_stats() {
  const autovm_stats keep = stats_;
  stats_ = autovm_stats{};
  stats_.resident_bytes = keep.resident_bytes;
  stats_.peak_resident_bytes = keep.resident_bytes;
  stats_.accounting_only = keep.accounting_only;
  backend_->reset_stats();
}

double Executor::step_stall_us(StepIndex s) const {
  const BackendStats& stalls = backend_->stats();
  const auto i = static_cast<size_t>(s);
  return i < stalls.by_step_us.size() ? stalls.by_step_us[i] : 0.0;
}

}  // namespace autovm::rt
