// Event simulation of one training step: a plan's actions (simulate) and the driver's demand
// paging (simulate_demand_paging). Both walk the steps once in order; see simulator.h.
#include "plan/simulator.h"

#include <algorithm>
#include <cassert>
#include <list>
#include <map>

namespace autovm {

namespace {

bool is_transfer(ActionKind k) { return k == ActionKind::evict || k == ActionKind::prefetch; }

void size_by_step(SimResult& r, size_t n) {
  r.start_us.assign(n, 0);
  r.end_us.assign(n, 0);
  r.stall_before_us.assign(n, 0);
}

}  // namespace

SimResult simulate(const TrainingGraph& graph, const std::vector<Action>& actions,
                   const std::vector<double>& compute_us, const Mechanism& mechanism,
                   const DeviceProfile& device) {
  const StepIndex n = graph.step_count();
  assert(compute_us.size() == static_cast<size_t>(n));
  SimResult r;
  size_by_step(r, static_cast<size_t>(n));
  r.issue_us.assign(actions.size(), 0);
  r.ready_us.assign(actions.size(), 0);

  // Actions bucketed by the step they are issued after (index after_step + 1) and by the step
  // that waits on them (ready_before_step, n for the end), each in action order.
  std::vector<std::vector<size_t>> issued_after(static_cast<size_t>(n) + 1);
  std::vector<std::vector<size_t>> due_before(static_cast<size_t>(n) + 1);
  for (size_t i = 0; i < actions.size(); ++i) {
    const Action& a = actions[i];
    assert(a.after_step >= -1 && a.after_step < n);
    assert(a.ready_before_step >= 0 && a.ready_before_step <= n);
    if (a.kind == ActionKind::recompute) {
      assert(a.ready_before_step < n && a.source_step >= 0 && a.source_step < n);
      due_before[static_cast<size_t>(a.ready_before_step)].push_back(i);
      continue;
    }
    issued_after[static_cast<size_t>(a.after_step + 1)].push_back(i);
    if (is_transfer(a.kind)) {
      assert(a.ready_before_step > a.after_step);
      due_before[static_cast<size_t>(a.ready_before_step)].push_back(i);
    }
  }

  // Copy queues: free times of the to-host and to-device streams (one shared queue when the
  // mechanism is not duplex), and of the discard queue.
  double to_host_free = 0, to_device_free = 0, discard_free = 0;
  auto issue = [&](StepIndex after, double now) {
    for (size_t i : issued_after[static_cast<size_t>(after + 1)]) {
      const Action& a = actions[i];
      r.issue_us[i] = now;
      double* queue = nullptr;
      double busy = 0;
      switch (a.kind) {
        case ActionKind::evict:
          queue = mechanism.duplex ? &to_host_free : &to_device_free;
          busy = mechanism.to_host.time_us(a.bytes);
          r.bytes_to_host += a.bytes;
          break;
        case ActionKind::prefetch:
          queue = &to_device_free;
          busy = mechanism.to_device.time_us(a.bytes);
          r.bytes_to_device += a.bytes;
          break;
        case ActionKind::discard:
          queue = &discard_free;
          busy = static_cast<double>(a.bytes) / (device.discard_gbps * 1e3);
          break;
        case ActionKind::advise:
        case ActionKind::recompute:
        case ActionKind::read_remote:  // its time is in the step's own (remote_reads.h)
          break;
      }
      if (queue == nullptr) {
        r.ready_us[i] = now;
        continue;
      }
      *queue = std::max(*queue, now) + busy;
      r.ready_us[i] = *queue;
    }
  };

  issue(-1, 0.0);
  double t = 0;  // end of the previous step
  for (StepIndex s = 0; s < n; ++s) {
    const auto& due = due_before[static_cast<size_t>(s)];
    double start = t;
    for (size_t i : due) {
      if (!is_transfer(actions[i].kind)) continue;
      if (r.ready_us[i] > t) ++r.late_actions;
      start = std::max(start, r.ready_us[i]);
    }
    r.stall_before_us[static_cast<size_t>(s)] = start - t;
    r.stall_us += start - t;

    // Recomputes run on the compute stream after the wait, in action order; several actions
    // with the same source step (its several outputs) run it once.
    std::map<StepIndex, size_t> ran;  // source step -> the action that ran it
    for (size_t i : due) {
      const Action& a = actions[i];
      if (a.kind != ActionKind::recompute) continue;
      auto [it, first] = ran.emplace(a.source_step, i);
      if (first) {
        r.issue_us[i] = start;
        start += compute_us[static_cast<size_t>(a.source_step)];
        r.recompute_us += compute_us[static_cast<size_t>(a.source_step)];
        r.ready_us[i] = start;
      } else {
        r.issue_us[i] = r.issue_us[it->second];
        r.ready_us[i] = r.ready_us[it->second];
      }
    }
    r.start_us[static_cast<size_t>(s)] = start;
    t = start + compute_us[static_cast<size_t>(s)];
    r.end_us[static_cast<size_t>(s)] = t;
    r.compute_us += compute_us[static_cast<size_t>(s)];
    issue(s, t);
  }
  r.compute_us += r.recompute_us;

  double end = t;  // transfers due by the end of the training step extend it
  for (size_t i : due_before[static_cast<size_t>(n)]) {
    if (r.ready_us[i] > t) ++r.late_actions;
    end = std::max(end, r.ready_us[i]);
  }
  r.stall_us += end - t;
  r.step_time_us = end;
  return r;
}

SimResult simulate_demand_paging(const TrainingGraph& graph, const std::vector<Lifetime>& life,
                                 const std::vector<double>& compute_us, int64_t budget_bytes,
                                 const DeviceProfile& device) {
  const StepIndex n = graph.step_count();
  const size_t tensors = graph.tensors.size();
  assert(compute_us.size() == static_cast<size_t>(n) && life.size() == tensors);
  assert(budget_bytes > 0);

  // Non-persistent tensors are freed after their last step.
  std::vector<std::vector<TensorId>> dies_after(static_cast<size_t>(n));
  for (size_t x = 0; x < tensors; ++x)
    if (!life[x].persistent && !life[x].uses.empty())
      dies_after[static_cast<size_t>(life[x].last)].push_back(static_cast<TensorId>(x));

  std::list<TensorId> lru;  // resident tensors, least recently used first
  std::vector<std::list<TensorId>::iterator> where(tensors);
  std::vector<char> resident(tensors, 0);
  std::vector<char> on_host(tensors, 0);  // its data waits on the host (faults in when used)
  for (size_t x = 0; x < tensors; ++x) on_host[x] = life[x].persistent;
  std::vector<StepIndex> needed_at(tensors, -1);  // the step that last needed it (this pass)
  int64_t resident_bytes = 0;
  auto bytes = [&](TensorId x) { return graph.tensor(x).bytes; };

  SimResult r;
  for (int pass = 0; pass < 2; ++pass) {  // pass 0 warms up; pass 1 is the steady state
    r = SimResult{};
    size_by_step(r, static_cast<size_t>(n));
    std::fill(needed_at.begin(), needed_at.end(), -1);
    double t = 0;
    for (StepIndex s = 0; s < n; ++s) {
      const Step& step = graph.step(s);
      std::vector<TensorId> needed;
      auto need = [&](TensorId x) {
        if (needed_at[static_cast<size_t>(x)] == s) return;
        needed_at[static_cast<size_t>(x)] = s;
        needed.push_back(x);
      };
      for (TensorId x : step.inputs) need(x);
      for (TensorId x : step.outputs) need(x);
      if (step.workspace != kNoTensor) need(step.workspace);

      // The step's resident tensors become the most recently used.
      int64_t incoming = 0;
      for (TensorId x : needed) {
        if (resident[static_cast<size_t>(x)]) lru.splice(lru.end(), lru, where[static_cast<size_t>(x)]);
        else incoming += bytes(x);
      }
      double stall = 0;
      auto evict_front = [&]() {
        TensorId v = lru.front();
        lru.pop_front();
        resident[static_cast<size_t>(v)] = 0;
        on_host[static_cast<size_t>(v)] = 1;
        resident_bytes -= bytes(v);
        stall += device.driver_eviction.time_us(bytes(v));
        r.bytes_to_host += bytes(v);
      };
      // Make room by evicting the least recently used tensors the step does not need.
      while (resident_bytes + incoming > budget_bytes && !lru.empty() &&
             needed_at[static_cast<size_t>(lru.front())] != s)
        evict_front();
      // Missing tensors fault in whole, or appear on first write (no copy).
      for (TensorId x : needed) {
        size_t xi = static_cast<size_t>(x);
        if (resident[xi]) continue;
        if (on_host[xi]) {
          stall += device.demand_paging.time_us(bytes(x));
          r.bytes_to_device += bytes(x);
          ++r.faults;
          on_host[xi] = 0;
        }
        resident[xi] = 1;
        where[xi] = lru.insert(lru.end(), x);
        resident_bytes += bytes(x);
      }
      // Thrashing: the step alone exceeds the budget; it runs anyway, and the driver evicts its
      // least recently used tensors to get back under the budget, charged to this step.
      while (resident_bytes > budget_bytes && !lru.empty()) evict_front();

      r.stall_before_us[static_cast<size_t>(s)] = stall;
      r.stall_us += stall;
      r.start_us[static_cast<size_t>(s)] = t + stall;
      t += stall + compute_us[static_cast<size_t>(s)];
      r.end_us[static_cast<size_t>(s)] = t;
      r.compute_us += compute_us[static_cast<size_t>(s)];

      for (TensorId x : dies_after[static_cast<size_t>(s)]) {  // freed without copying
        size_t xi = static_cast<size_t>(x);
        if (resident[xi]) {
          lru.erase(where[xi]);
          resident_bytes -= bytes(x);
        }
        resident[xi] = 0;
        on_host[xi] = 0;
      }
    }
    r.step_time_us = t;
  }
  return r;
}

}  // namespace autovm
