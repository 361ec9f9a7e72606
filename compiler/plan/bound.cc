#include "plan/bound.h"

#include "plan/gaps.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>

namespace autovm {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Chains of steps that regenerate each tensor off-able at step s (see bound.h).
class RecomputeCost {
 public:
  RecomputeCost(const TrainingGraph& g, const std::vector<Lifetime>& life, StepIndex s,
                const std::vector<double>& compute_us, MovableKinds movable)
      : g_(g), life_(life), s_(s), movable_(movable) {
    std::vector<TensorId> off_able;
    for (const Tensor& t : g.tensors) {
      const Lifetime& l = life[size_t(t.id)];
      if (t.bytes == 0 || !movable.has(t.kind) || l.first > s || l.last < s) continue;
      if (std::binary_search(l.uses.begin(), l.uses.end(), s)) continue;
      off_able.push_back(t.id);
    }
    std::map<StepIndex, int> users;  // step -> how many off-able tensors' chains hold it
    std::vector<std::vector<StepIndex>> chains(off_able.size());
    for (size_t i = 0; i < off_able.size(); ++i) {
      if (!chain(off_able[i], chains[i])) {
        chains[i].clear();
        items_.push_back({kInf, g.tensor(off_able[i]).bytes});
        continue;
      }
      for (StepIndex q : chains[i]) users[q]++;
      items_.push_back({0, g.tensor(off_able[i]).bytes});
    }
    for (size_t i = 0; i < off_able.size(); ++i)
      for (StepIndex q : chains[i]) items_[i].cost += compute_us[size_t(q)] / users[q];
    std::sort(items_.begin(), items_.end(), [](const Item& a, const Item& b) {
      return a.cost * double(b.bytes) < b.cost * double(a.bytes);
    });
  }

  // Bytes off-able at s (moved or regenerated).
  double total() const {
    double sum = 0;
    for (const Item& it : items_) sum += double(it.bytes);
    return sum;
  }

  // Bytes that some chain can regenerate.
  double capacity() const {
    double sum = 0;
    for (const Item& it : items_)
      if (!std::isinf(it.cost)) sum += double(it.bytes);
    return sum;
  }

  // Least compute that regenerates `bytes` bytes (fractional), kInf if it cannot.
  double operator()(double bytes) const {
    double time = 0;
    for (const Item& it : items_) {
      if (bytes <= 0) break;
      if (std::isinf(it.cost)) return kInf;
      double take = std::min(bytes, double(it.bytes));
      time += it.cost * take / double(it.bytes);
      bytes -= take;
    }
    return bytes > 0 ? kInf : time;
  }

 private:
  struct Item {
    double cost;
    int64_t bytes;
  };

  // Steps that must run again to regenerate t after s: its producer and, for each input dead
  // by s, that input's chain. False when t has no producer that can run again.
  bool chain(TensorId t, std::vector<StepIndex>& steps) const {
    const Lifetime& l = life_[size_t(t)];
    const Tensor& tensor = g_.tensor(t);
    if (l.persistent || tensor.kind == TensorKind::input || tensor.kind == TensorKind::label)
      return false;
    const Step& p = g_.step(l.first);
    if (p.phase != Phase::forward || p.op == "Dropout") return false;
    if (std::find(steps.begin(), steps.end(), p.id) != steps.end()) return true;
    steps.push_back(p.id);
    for (TensorId in : p.inputs) {
      const Lifetime& li = life_[size_t(in)];
      if (li.persistent || li.last >= s_) continue;  // still there after s
      if (!movable_.has(g_.tensor(in).kind)) return false;  // no recompute may make it
      if (steps.size() > 64 || !chain(in, steps)) return false;
    }
    return true;
  }

  const TrainingGraph& g_;
  const std::vector<Lifetime>& life_;
  StepIndex s_;
  MovableKinds movable_;
  std::vector<Item> items_;
};

// The forced stall before each step b (bound.h): max(F(b), D(b)), F(b) the to-device time of
// the tensors that can only arrive at b by a prefetch issued when step b-1 finishes, D(b) the
// to-host time of those that can only leave at b by an eviction issued then.
std::vector<double> forced_arrival_us(const TrainingGraph& g, const std::vector<Lifetime>& life,
                                      int64_t budget, const Mechanism& mech,
                                      MovableKinds movable) {
  const StepIndex n = g.step_count();
  std::vector<double> forced(size_t(n), 0);
  std::vector<int64_t> unavoidable = unavoidable_bytes(g, life, movable);
  auto used_at = [&](TensorId t, StepIndex s) {
    const auto& u = life[size_t(t)].uses;
    return std::binary_search(u.begin(), u.end(), s);
  };
  auto live_at = [&](TensorId t, StepIndex s) {
    const Lifetime& l = life[size_t(t)];
    return l.persistent || (l.first <= s && s <= l.last);
  };
  // Least bytes a recompute of t before step b must make as temporaries; -1 when no recompute
  // can regenerate t (bound.h: no producer that can run again).
  auto temporaries = [&](TensorId t, StepIndex b) -> int64_t {
    const Lifetime& l = life[size_t(t)];
    const Tensor& tensor = g.tensor(t);
    if (l.persistent || tensor.kind == TensorKind::input || tensor.kind == TensorKind::label)
      return -1;
    const Step& p = g.step(l.first);
    if (p.phase != Phase::forward || p.op == "Dropout") return -1;
    std::vector<TensorId> touched = p.inputs;
    touched.insert(touched.end(), p.outputs.begin(), p.outputs.end());
    std::sort(touched.begin(), touched.end());
    touched.erase(std::unique(touched.begin(), touched.end()), touched.end());
    int64_t bytes = 0;
    for (TensorId y : touched) {
      if (y == t || live_at(y, b)) continue;
      if (!movable.has(g.tensor(y).kind)) return -1;  // no recompute may make it
      bytes += g.tensor(y).bytes;
    }
    return bytes;
  };
  for (StepIndex b = 1; b < n; ++b) {
    const Step& step = g.step(b);
    int64_t arriving = 0;  // bytes that cannot be regenerated at b and may be off at b-1
    std::vector<TensorId> used = step.inputs;
    used.insert(used.end(), step.outputs.begin(), step.outputs.end());
    std::sort(used.begin(), used.end());
    used.erase(std::unique(used.begin(), used.end()), used.end());
    for (TensorId x : used) {
      int64_t bytes = g.tensor(x).bytes;
      const Lifetime& l = life[size_t(x)];
      // Not resident at b-1 only if off there: x is live at b-1, unused there, and a gap
      // covers b-1 (a non-persistent tensor before its first use is in unavoidable(b-1)).
      if (bytes == 0 || used_at(x, b - 1) || !(l.persistent || l.first < b)) continue;
      if (!movable.has(g.tensor(x).kind)) continue;  // resident throughout: never arrives
      if (!l.persistent && l.uses.front() >= b) continue;
      int64_t made = temporaries(x, b);
      if (made >= 0 && unavoidable[size_t(b)] + made <= budget) continue;  // may be regenerated
      arriving += bytes;
      if (unavoidable[size_t(b - 1)] + bytes <= budget) continue;  // may be resident at b-1
      forced[size_t(b)] += mech.to_device.time_us(bytes);
    }
    // Together: at most the room at b-1 of them is resident there; the rest arrives.
    int64_t room = std::max<int64_t>(0, budget - unavoidable[size_t(b - 1)]);
    if (arriving > room)
      forced[size_t(b)] = std::max(forced[size_t(b)], double(arriving - room) /
                                                          (mech.to_device.bandwidth_gbps * 1e3));
  }
  // Forced departures: x used at b-1, live at b and unused there, that nothing can regenerate,
  // with unavoidable(b) + bytes(x) > budget.
  std::vector<double> departing(size_t(n), 0);
  std::vector<TensorId> used;
  for (StepIndex b = 1; b < n; ++b) {
    const Step& step = g.step(b - 1);
    used.assign(step.inputs.begin(), step.inputs.end());
    used.insert(used.end(), step.outputs.begin(), step.outputs.end());
    std::sort(used.begin(), used.end());
    used.erase(std::unique(used.begin(), used.end()), used.end());
    int64_t leaving = 0;  // bytes that cannot be regenerated and cannot all stay at b
    for (TensorId x : used) {
      int64_t bytes = g.tensor(x).bytes;
      if (bytes == 0 || !movable.has(g.tensor(x).kind) || used_at(x, b) || !live_at(x, b)) continue;
      if (temporaries(x, b) >= 0) continue;  // a producer that may run again: maybe regenerated
      leaving += bytes;
      if (unavoidable[size_t(b)] + bytes <= budget) continue;  // may stay resident at b
      departing[size_t(b)] += mech.to_host.time_us(bytes);
    }
    // Together: at most the room at b of them stays resident; the rest leaves.
    int64_t room = std::max<int64_t>(0, budget - unavoidable[size_t(b)]);
    if (leaving > room)
      departing[size_t(b)] = std::max(departing[size_t(b)], double(leaving - room) /
                                                                (mech.to_host.bandwidth_gbps * 1e3));
  }
  for (size_t s = 0; s < forced.size(); ++s) forced[s] = std::max(forced[s], departing[s]);
  return forced;
}

}  // namespace

StepTimeBound lower_bound(const TrainingGraph& g, const std::vector<Lifetime>& life,
                          const std::vector<int64_t>& live, const std::vector<double>& compute_us,
                          int64_t budget, const Mechanism& mech, MovableKinds movable) {
  StepTimeBound b;
  size_t n = std::min(live.size(), compute_us.size());
  std::vector<double> before(n + 1, 0);
  for (size_t s = 0; s < n; ++s) before[s + 1] = before[s] + compute_us[s];
  b.compute_us = before[n];
  b.bound_us = b.compute_us;
  // Within the budget at every step nothing is over it, and nothing is forced (unavoidable
  // bytes never exceed the live ones): the bound is the compute.
  if (std::all_of(live.begin(), live.begin() + std::ptrdiff_t(n), [&](int64_t v) { return v <= budget; }))
    return b;
  std::vector<double> forced = forced_arrival_us(g, life, budget, mech, movable);
  std::vector<double> forced_before(n + 1, 0);  // F over steps [0, s]
  for (size_t s = 0; s < n; ++s) forced_before[s + 1] = forced_before[s] + forced[s];
  b.forced_stall_us = forced_before[n];
  b.bound_us = b.compute_us + b.forced_stall_us;

  std::vector<size_t> over;
  for (size_t s = 0; s < n; ++s)
    if (live[s] > budget) over.push_back(s);
  std::sort(over.begin(), over.end(), [&](size_t x, size_t y) {
    return live[x] != live[y] ? live[x] > live[y] : x < y;
  });
  if (over.size() > 16) over.resize(16);
  // And the steps around a forced arrival b (b-1 and b), where the budget is tightest.
  for (size_t s = 0; s < n; ++s) {
    bool near = forced[s] > 0 || (s + 1 < n && forced[s + 1] > 0);
    if (near && live[s] > budget && std::find(over.begin(), over.end(), s) == over.end())
      over.push_back(s);
  }

  for (size_t s : over) {
    double e = double(live[s] - budget);
    if (e <= 0) continue;
    double c_before = before[s] + forced_before[s + 1];
    double c_after = before[n] - before[s + 1] + forced_before[n] - forced_before[s + 1];
    RecomputeCost rc(g, life, StepIndex(s), compute_us, movable);
    auto time = [&](double moved) {
      double start = std::max(c_before, moved / (mech.to_host.bandwidth_gbps * 1e3));
      return start + compute_us[s] +
             std::max(c_after + rc(e - moved), moved / (mech.to_device.bandwidth_gbps * 1e3));
    };
    // At least e - capacity bytes must be moved, at most what may move; on the rest time() is
    // finite and convex. (lo <= hi whenever the budget is feasible: gaps.h.)
    double lo = std::max(0.0, e - rc.capacity()), hi = std::max(lo, std::min(e, rc.total()));
    for (int i = 0; i < 200; ++i) {
      double m1 = lo + (hi - lo) / 3, m2 = hi - (hi - lo) / 3;
      if (time(m1) <= time(m2)) hi = m2;
      else lo = m1;
    }
    double t = std::min(time(lo), time(hi));
    if (t > b.bound_us) {
      b.bound_us = t;
      b.critical_step = StepIndex(s);
      b.must_move_bytes = int64_t(e);
    }
  }
  return b;
}

}  // namespace autovm
