// The lower bound (bound.h, docs/lower-bound.md): the terms worked out at each step and their
// largest.
#include "plan/bound.h"

#include "plan/bound_parts.h"
#include "plan/gaps.h"
#include "plan/residency.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>

namespace autovm {
namespace {

using namespace bound_parts;

// Sums of compute and of forced stalls before and after a step, and the least extra time
// (stalls and recomputes) before and after it by the windows term.
struct Prefix {
  std::vector<double> compute;  // compute[s]: C over steps [0, s)
  std::vector<double> stall;    // stall[s]: F over the boundaries before steps [0, s)
  // windows_to[k]: the windows term over the stretches within the boundaries before steps
  // 1..k; windows_from[k]: over those within the boundaries before steps k+1..n-1. Empty when
  // not worked out (too large), and then the forced stalls stand in.
  std::vector<double> windows_to, windows_from;
  double compute_to(StepIndex s) const { return compute[size_t(s)]; }  // [0, s)
  double compute_from(StepIndex s) const { return compute.back() - compute[size_t(s)]; }  // [s, n)
  double stall_to(StepIndex s) const { return stall[size_t(s)]; }
  double stall_from(StepIndex s) const { return stall.back() - stall[size_t(s)]; }
  // The least extra time in the boundaries before steps [0, s) and before steps [s, n): the
  // windows term over the stretches there, at least the forced stalls. Stalls and recomputes
  // only, so disjoint from step compute; but not from the recomputes a knapsack Rc counts.
  double extra_to(StepIndex s) const {
    double w = windows_to.empty() || s < 1 ? 0 : windows_to[size_t(s) - 1];
    return std::max(stall_to(s), w);
  }
  double extra_from(StepIndex s) const {
    double w = windows_from.empty() ? 0 : windows_from[size_t(std::max<StepIndex>(s, 1)) - 1];
    return std::max(stall_from(s), w);
  }
};

// The pieces of bound(s) (docs/lower-bound.md) at one step s: the departure curve Dep(M), the arrival
// curve Arr(M) (to the end of the step, or to the start of a later step s2 for pair bounds),
// the least recompute Rc, and the range of M.
struct StepTerms {
  LinkCurve departure, arrival;
  RecomputeCost rc;
  RecomputeCost rc_apart;  // the same with the tensors that may_overlap free
  double lo = 0, hi = 0;  // M in [lo, hi]
};

// The least total of whole tensors of `sizes` that reaches `need` bytes (a plan moves whole
// tensors): over every subset's total when there are at most kExactCover of them (2^k totals,
// each made from one before it); otherwise `need` rounded up to a multiple of their greatest
// common divisor, which every subset's total is.
double least_whole_cover(const std::vector<int64_t>& sizes, double need) {
  constexpr size_t kExactCover = 12;
  if (need <= 0) return 0;
  if (sizes.size() <= kExactCover) {
    std::vector<double> totals = {0};
    totals.reserve(size_t(1) << sizes.size());
    for (int64_t b : sizes)
      for (size_t i = 0, m = totals.size(); i < m; ++i) totals.push_back(totals[i] + double(b));
    double best = kInf;
    for (double t : totals)
      if (t >= need) best = std::min(best, t);
    return std::isinf(best) ? need : best;  // none reaches it: the budget is infeasible
  }
  int64_t g = 0;
  for (int64_t b : sizes) g = std::gcd(g, b);
  return g > 0 ? std::ceil(need / double(g)) * double(g) : need;
}

// Departures before s; arrivals after s due before `until` (n: the end of the step) counted to
// the start of `until`; recomputes of the tensors due before `until` costed, the others free.
StepTerms step_terms(StepIndex s, double e, const std::vector<OffAble>& items, const Prefix& sum,
                     const Mechanism& mech, StepIndex until) {
  const StepIndex n = StepIndex(sum.compute.size()) - 1;
  double total = 0, capacity = 0;
  std::vector<OffAble> costed, apart;
  for (const OffAble& it : items) {
    total += double(it.bytes);
    if (!std::isinf(it.cost)) capacity += double(it.bytes);
    costed.push_back(it);
    if (it.deadline > until && !std::isinf(it.cost)) costed.back().cost = 0;
    apart.push_back(costed.back());
    if (it.may_overlap) apart.back().cost = 0;
  }
  StepTerms t{LinkCurve(mech.to_host.bandwidth_gbps), LinkCurve(mech.to_device.bandwidth_gbps),
              RecomputeCost(std::move(costed)), RecomputeCost(std::move(apart))};
  // Departures: the M bytes that left earliest; those after release j leave after step j ends.
  // Arrivals: the M bytes due latest; those due by j arrive before step j starts, and steps
  // j..until-1 and the stalls before j+1..until follow (to the end of the step: the windows
  // term after j, at least those stalls). Over the items `of` picks.
  auto after_j = [&](StepIndex j) {
    double compute = sum.compute_to(std::min(until, n)) - sum.compute_to(j);
    double stalls = until >= n ? sum.extra_from(j + 1) : sum.stall_to(until + 1) - sum.stall_to(j + 1);
    return compute + stalls;
  };
  // Bytes by release (index release + 1: -1 is free to leave) and by deadline (n: never back),
  // then each in step order: a bucket per step instead of a sort (step_terms runs at every
  // over-budget step; off_able_at is O(n) there already).
  std::vector<double> released(size_t(n) + 1), due(size_t(n) + 1);
  std::vector<char> any_released(size_t(n) + 1), any_due(size_t(n) + 1);
  auto link_curves = [&](auto of, LinkCurve& departure, LinkCurve& arrival) {
    std::fill(released.begin(), released.end(), 0.0);
    std::fill(due.begin(), due.end(), 0.0);
    std::fill(any_released.begin(), any_released.end(), 0);
    std::fill(any_due.begin(), any_due.end(), 0);
    for (const OffAble& it : items) {
      if (!of(it)) continue;
      released[size_t(it.release + 1)] += double(it.bytes);
      any_released[size_t(it.release + 1)] = 1;
      due[size_t(it.deadline)] += double(it.bytes);
      any_due[size_t(it.deadline)] = 1;
    }
    departure.add(sum.compute_to(s) + sum.extra_to(s + 1), kInf);
    double earlier = 0;  // bytes released before j (or free to leave)
    for (StepIndex j = -1; j < n; ++j) {
      if (!any_released[size_t(j + 1)]) continue;
      if (j >= 0) departure.add(sum.compute_to(j + 1) + sum.extra_to(j + 1), earlier);
      earlier += released[size_t(j + 1)];
    }
    double later = 0;  // bytes due after j (or never back within the window)
    for (StepIndex j = n; j >= 0; --j) {
      if (!any_due[size_t(j)]) continue;
      if (j < n && j <= until) arrival.add(after_j(j), later);
      later += due[size_t(j)];
    }
    departure.done();
    arrival.done();
  };
  link_curves([](const OffAble&) { return true; }, t.departure, t.arrival);
  // At least e - capacity bytes must be moved, at most what may move. (lo <= hi whenever the
  // budget is feasible: gaps.h.)
  t.lo = std::max(0.0, e - capacity);
  t.hi = std::max(t.lo, std::min(e, total));
  // Those e - capacity bytes are of the tensors no recompute can make (docs/lower-bound.md, Moved bytes
  // that no recompute can replace): whatever else moves, they leave and come back, whole.
  if (t.lo > 0) {
    std::vector<int64_t> never;
    for (const OffAble& it : items)
      if (std::isinf(it.cost)) never.push_back(it.bytes);
    t.lo = std::max(t.lo, least_whole_cover(never, t.lo));
    t.hi = std::max(t.hi, t.lo);
    LinkCurve departure(mech.to_host.bandwidth_gbps), arrival(mech.to_device.bandwidth_gbps);
    link_curves([](const OffAble& it) { return std::isinf(it.cost); }, departure, arrival);
    t.departure.raise_to(departure(t.lo));
    t.arrival.raise_to(arrival(t.lo));
  }
  return t;
}

// The least of a function convex on [lo, hi], by ternary search, and where it is.
template <typename F>
std::pair<double, double> convex_argmin(double lo, double hi, F f) {
  for (int i = 0; i < 100 && hi - lo > 0.5; ++i) {
    double m1 = lo + (hi - lo) / 3, m2 = hi - (hi - lo) / 3;
    if (f(m1) <= f(m2)) hi = m2;
    else lo = m1;
  }
  double at_lo = f(lo), at_hi = f(hi);
  return at_lo <= at_hi ? std::pair{at_lo, lo} : std::pair{at_hi, hi};
}

template <typename F>
double convex_min(double lo, double hi, F f) {
  return convex_argmin(lo, hi, f).first;
}

// bound(s)'s part after s (docs/lower-bound.md) with M moved at s: the larger of
// C_>s + max(F_>s + Rc(E - M), W_>s + Rc_apart(E - M)) and Arr(M).
double after_step(StepIndex s, double e, const StepTerms& t, const Prefix& sum, double moved) {
  double stalls = sum.stall_from(s + 1), windows = sum.extra_from(s + 1);
  return std::max(sum.compute_from(s + 1) +
                      std::max(stalls + t.rc(e - moved), windows + t.rc_apart(e - moved)),
                  t.arrival(moved));
}

// bound(s) (docs/lower-bound.md): the least over M of Dep(M) + c_s + after_step(M), with the M that
// attains it and the terms there. Each part is convex in M.
StepBoundTerms step_bound(StepIndex s, double e, const StepTerms& t,
                          const std::vector<double>& compute_us, const Prefix& sum) {
  auto [least, m] = convex_argmin(t.lo, t.hi, [&](double moved) {
    return t.departure(moved) + compute_us[size_t(s)] + after_step(s, e, t, sum, moved);
  });
  StepBoundTerms r;
  r.step = s;
  r.excess_bytes = e;
  r.moved_bytes = m;
  r.departure_us = t.departure(m);
  r.recompute_us = t.rc(e - m);
  r.recompute_apart_us = t.rc_apart(e - m);
  r.arrival_us = t.arrival(m);
  r.bound_us = least;
  return r;
}

// The time from the end of step s to the end of the training step, at least (bound(s)'s part
// after s): the least over M of after_step(M).
double tail_bound(StepIndex s, double e, const StepTerms& t, const Prefix& sum) {
  return convex_min(t.lo, t.hi, [&](double moved) { return after_step(s, e, t, sum, moved); });
}

// Pairs (docs/lower-bound.md): the earliest step s2 > s1 can start, `terms` those of s1 with arrivals and
// recomputes up to s2, `s1_start` a lower bound on s1's start found before (0: none): the
// least over M (moved at s1) of max(s1_start, Dep(M)) + c_s1 + max(C and F over (s1, s2) +
// Rc(E - M), Arr to s2 (M)).
double pair_start(StepIndex s1, double e1, const StepTerms& terms, double s1_start, StepIndex s2,
                  const std::vector<double>& compute_us, const Prefix& sum) {
  double between = sum.compute_to(s2) - sum.compute_to(s1 + 1) + sum.stall_to(s2 + 1) -
                   sum.stall_to(s1 + 1);
  return convex_min(terms.lo, terms.hi, [&](double moved) {
    return std::max(s1_start, terms.departure(moved)) + compute_us[size_t(s1)] +
           std::max(between + terms.rc(e1 - moved), terms.arrival(moved));
  });
}

// bound(s) with s's start at least `start` as well (a pair's s2): the least over M of
// max(start, Dep(M)) + c_s + after_step(M).
double step_bound_from(StepIndex s, double e, const StepTerms& t, double start,
                       const std::vector<double>& compute_us, const Prefix& sum) {
  return convex_min(t.lo, t.hi, [&](double moved) {
    return std::max(start, t.departure(moved)) + compute_us[size_t(s)] +
           after_step(s, e, t, sum, moved);
  });
}

// Whole tensors (docs/lower-bound.md): the least, over the tensors x some cover of the excess at s must
// move, of the step time with x's departure window (release, s] and arrival window (s, deadline]
// each at least x's transfer past the compute in it, and at least the forced stalls in it.
// Returns the compute alone when no tensor is forced (the regenerable bytes and the small
// tensors can cover the excess).
double whole_tensor_bound(StepIndex s, double e, const std::vector<OffAble>& items,
                          const Prefix& sum, const Mechanism& mech) {
  const StepIndex n = StepIndex(sum.compute.size()) - 1;
  double regenerable = 0;
  std::vector<const OffAble*> moved;  // cannot be regenerated: a cover moves them
  for (const OffAble& it : items) {
    if (std::isinf(it.cost)) moved.push_back(&it);
    else regenerable += double(it.bytes);
  }
  std::stable_sort(moved.begin(), moved.end(),
                   [](const OffAble* a, const OffAble* b) { return a->bytes < b->bytes; });
  double covered = regenerable;
  size_t first = moved.size();  // every cover moves a tensor at least as large as this one
  for (size_t i = 0; i < moved.size(); ++i) {
    covered += double(moved[i]->bytes);
    if (covered >= e) {
      first = i;
      break;
    }
  }
  double all = sum.compute_to(n) + sum.stall_to(n);
  if (regenerable >= e || first == moved.size()) return all;
  // Stalls before steps (a, b]: the boundaries in front of steps a+1..b.
  auto stalls = [&](StepIndex a, StepIndex b) { return sum.stall_to(b + 1) - sum.stall_to(a + 1); };
  auto computed = [&](StepIndex a, StepIndex b) {  // steps [a, b]
    return b < a ? 0.0 : sum.compute_to(b + 1) - sum.compute_to(a);
  };
  // Every tensor as large as moved[first] may be the one, those of equal size before it too.
  const int64_t least = moved[first]->bytes;
  double best = kInf;
  for (const OffAble* candidate : moved) {
    if (candidate->bytes < least) continue;
    const OffAble& x = *candidate;
    double t = all;
    if (x.release >= 0) {  // evicted after step `release`, complete before s
      double window = stalls(x.release, s);
      double need = mech.to_host.time_us(x.bytes) - computed(x.release + 1, s - 1);
      t += std::max(0.0, need - window);
    }
    if (x.deadline < n) {  // prefetched after step s, complete before `deadline`
      double window = stalls(s, x.deadline);
      double need = mech.to_device.time_us(x.bytes) - computed(s + 1, x.deadline - 1);
      t += std::max(0.0, need - window);
    }
    best = std::min(best, t);
  }
  return best;
}

// Windows (docs/lower-bound.md): the most, over sets of disjoint stretches (A, B] of boundaries (the
// stalls and recomputes before steps A+1..B), of the sum of each stretch's least extra time:
// the larger of its forced stalls and, per queue, the time of the windows inside it less the
// compute of steps A+1..B-1. A stretch need only start where a window starts (a start in
// between adds compute and drops no window) or be a single boundary. Returns it over the
// boundaries before steps 1..k for every k (so the last is over them all); empty when the work
// (steps x window starts) is over `max_work`: not worked out.
std::vector<double> window_extra_us(const std::vector<Window>& windows, const Prefix& sum,
                                    double max_work) {
  const StepIndex n = StepIndex(sum.compute.size()) - 1;
  std::vector<std::vector<const Window*>> starting(static_cast<size_t>(n));
  std::vector<StepIndex> starts;
  for (const Window& w : windows) {
    starting[size_t(w.lo)].push_back(&w);
    starts.push_back(w.lo);
  }
  std::sort(starts.begin(), starts.end());
  starts.erase(std::unique(starts.begin(), starts.end()), starts.end());
  if (double(n) * double(starts.size() + windows.size()) > max_work) return {};
  std::vector<double> best(size_t(n), 0);  // best[k]: over the boundaries before steps 1..k
  for (StepIndex b = 1; b < n; ++b) {
    double f_b = sum.stall_to(b + 1) - sum.stall_to(b);
    best[size_t(b)] = best[size_t(b) - 1] + f_b;
    double to_device = 0, to_host = 0;
    auto a_it = std::lower_bound(starts.begin(), starts.end(), b);
    while (a_it != starts.begin()) {
      StepIndex a = *--a_it;
      for (const Window* w : starting[size_t(a)])
        if (w->hi <= b) (w->to_device ? to_device : to_host) += w->us;
      double interior = sum.compute_to(b) - sum.compute_to(a + 1);
      double stalls = sum.stall_to(b + 1) - sum.stall_to(a + 1);
      double extra = std::max(stalls, std::max(to_device, to_host) - interior);
      best[size_t(b)] = std::max(best[size_t(b)], best[size_t(a)] + extra);
    }
  }
  return best;
}

// The windows term over the boundaries after each step (Prefix::windows_from): window_extra_us
// on the training step run backwards, step k as step n-1-k, so that the boundary before step b
// (after step b-1) is the one before step n-b, and a window (lo, hi) is (n-1-hi, n-1-lo).
std::vector<double> window_extra_after_us(const std::vector<Window>& windows, const Prefix& sum,
                                          double max_work) {
  const size_t n = sum.compute.size() - 1;
  std::vector<Window> mirrored;
  for (const Window& w : windows)
    mirrored.push_back({StepIndex(n) - 1 - w.hi, StepIndex(n) - 1 - w.lo, w.us, w.to_device});
  Prefix back;
  back.compute.assign(n + 1, 0);
  back.stall.assign(n + 1, 0);
  for (size_t k = 0; k < n; ++k) {
    back.compute[k + 1] = back.compute[k] + (sum.compute[n - k] - sum.compute[n - k - 1]);
    double f = k == 0 ? 0 : sum.stall[n - k + 1] - sum.stall[n - k];  // boundary before n-k
    back.stall[k + 1] = back.stall[k] + f;
  }
  std::vector<double> best = window_extra_us(mirrored, back, max_work);
  // best[k] covers the mirrored boundaries before steps 1..k, the boundaries before the
  // original steps n-k..n-1: windows_from[j] (before steps j+1..n-1) is best[n-1-j].
  std::reverse(best.begin(), best.end());
  return best;
}

// The over-budget steps whose bound(s) is worked out (docs/lower-bound.md): the kTopSteps with the most
// excess; the kTopSteps whose excess takes longest to move past the compute and stalls before
// them, and likewise after them; the kTopSteps where the bytes that must move (the excess beyond
// the regenerable ones; `never`: the off-able bytes no recompute can make) take longest both
// ways; and the steps b-1 and b around each forced stall before b. Sorted, no repeats.
std::vector<StepIndex> candidate_steps(const std::vector<int64_t>& live, int64_t budget,
                                       const std::vector<int64_t>& unavoidable,
                                       const std::vector<int64_t>& never,
                                       const std::vector<double>& forced, const Prefix& sum,
                                       const Mechanism& mech) {
  constexpr size_t kTopSteps = 16;
  const StepIndex n = StepIndex(forced.size());
  std::vector<StepIndex> over;
  for (StepIndex s = 0; s < n; ++s)
    if (live[size_t(s)] > budget) over.push_back(s);
  std::vector<StepIndex> picked;
  auto top = [&](auto score) {
    std::vector<StepIndex> by = over;
    std::stable_sort(by.begin(), by.end(),
                     [&](StepIndex x, StepIndex y) { return score(x) > score(y); });
    by.resize(std::min(kTopSteps, by.size()));
    picked.insert(picked.end(), by.begin(), by.end());
  };
  auto excess = [&](StepIndex s) { return double(live[size_t(s)] - budget); };
  // The off-able bytes are live(s) - unavoidable(s).
  auto moved = [&](StepIndex s) {
    int64_t may_regenerate = live[size_t(s)] - unavoidable[size_t(s)] - never[size_t(s)];
    return std::max(0.0, excess(s) - double(may_regenerate));
  };
  double to_host = mech.to_host.bandwidth_gbps * 1e3;  // bytes per us
  double to_device = mech.to_device.bandwidth_gbps * 1e3;
  auto before = [&](StepIndex s) { return sum.compute_to(s) + sum.stall_to(s + 1); };
  auto after = [&](StepIndex s) { return sum.compute_from(s + 1) + sum.stall_from(s + 1); };
  top(excess);
  top([&](StepIndex s) { return excess(s) / to_host - before(s); });
  top([&](StepIndex s) { return excess(s) / to_device - after(s); });
  top([&](StepIndex s) {
    return std::max(before(s), moved(s) / to_host) + std::max(after(s), moved(s) / to_device);
  });
  for (StepIndex s : over)
    if (forced[size_t(s)] > 0 || (s + 1 < n && forced[size_t(s) + 1] > 0)) picked.push_back(s);
  std::sort(picked.begin(), picked.end());
  picked.erase(std::unique(picked.begin(), picked.end()), picked.end());
  return picked;
}

}  // namespace

StepTimeBound lower_bound(const TrainingGraph& g, const std::vector<Lifetime>& life,
                          const std::vector<int64_t>& live, const std::vector<double>& compute_us,
                          int64_t budget, const Mechanism& mech, MovableKinds movable,
                          bool allow_recompute, const RecomputeOps& recompute_ops,
                          bool explain) {
  StepTimeBound b;
  size_t n = std::min(live.size(), compute_us.size());
  Prefix sum;
  sum.compute.assign(n + 1, 0);
  for (size_t s = 0; s < n; ++s) sum.compute[s + 1] = sum.compute[s] + compute_us[s];
  b.compute_us = sum.compute[n];
  b.bound_us = b.compute_us;
  // Within the budget at every step nothing is over it, and nothing is forced (unavoidable
  // bytes never exceed the live ones): the bound is the compute.
  if (std::all_of(live.begin(), live.begin() + std::ptrdiff_t(n),
                  [&](int64_t v) { return v <= budget; }))
    return b;
  std::vector<int64_t> unavoidable = unavoidable_bytes(g, life, movable);
  RecomputePieces regeneration(g, life, unavoidable, budget, movable, allow_recompute,
                            recompute_ops);
  std::vector<double> forced =
      forced_stall_us(g, life, unavoidable, budget, mech, regeneration, movable);
  sum.stall.assign(n + 1, 0);
  for (size_t s = 0; s < n; ++s) sum.stall[s + 1] = sum.stall[s] + forced[s];
  b.forced_stall_us = sum.stall[n];
  b.bound_us = b.compute_us + b.forced_stall_us;
  b.set_by = BoundTerm::windows;
  constexpr double kWindowWork = 5e7;
  std::vector<Window> windows =
      forced_windows(g, life, unavoidable, budget, mech, regeneration, movable);
  sum.windows_to = window_extra_us(windows, sum, kWindowWork);
  if (!sum.windows_to.empty())
    sum.windows_from = window_extra_after_us(windows, sum, kWindowWork);
  constexpr double kOverlapWork = 2e6;
  std::sort(windows.begin(), windows.end(),
            [](const Window& a, const Window& b) { return a.lo > b.lo; });
  regeneration.mark_overlaps(windows, kOverlapWork);
  b.window_stall_us = std::max(b.forced_stall_us, sum.extra_to(StepIndex(n)));

  std::vector<StepIndex> steps = candidate_steps(
      live, budget, unavoidable, regeneration.never_regenerated(), forced, sum, mech);
  // Every over-budget step for the whole-tensor term where that stays cheap (off_able_at
  // looks at every tensor), the candidate steps otherwise.
  std::vector<StepIndex> over;
  for (StepIndex s = 0; s < StepIndex(n); ++s)
    if (live[size_t(s)] > budget) over.push_back(s);
  constexpr double kWholeTensorWork = 2e7;
  bool every = double(over.size()) * double(g.tensors.size()) <= kWholeTensorWork;
  std::vector<bool> candidate(n, false);
  for (StepIndex s : steps) candidate[size_t(s)] = true;
  // Where the whole-tensor term is worked out at every over-budget step, so is bound(s): any
  // choice of steps keeps it a bound, and the candidates can miss the step that sets it
  // (ResNet-50 at batch 256 with PyTorch's memory at 4.245 GB: step 66, not a candidate). The
  // pairs and sequences below start at the candidates and the highest of the others.
  std::vector<bool> single = candidate;
  if (every)
    for (StepIndex s : over) single[size_t(s)] = true;
  auto keep = [&](double t, StepIndex s, double e, BoundTerm term, StepIndex s2 = -1) {
    if (t > b.bound_us) {
      b.bound_us = t;
      b.set_by = term;
      b.critical_step = s;
      b.pair_end = s2;
      b.must_move_bytes = int64_t(e);
      b.sequence.clear();
    }
  };
  std::vector<double> bound_at(n, -1);  // bound(s) where worked out
  std::vector<double> tail(n, 0);    // tail_bound at the candidate steps
  std::vector<double> tail_f(n, 0);  // the same with the forced stalls alone (no windows)
  Prefix stalls_only = sum;
  stalls_only.windows_to.clear();
  stalls_only.windows_from.clear();
  for (StepIndex s : every ? over : steps) {
    double e = double(live[size_t(s)] - budget);
    auto items = off_able_at(g, life, s, compute_us, regeneration, movable);
    double t = whole_tensor_bound(s, e, items, sum, mech);
    BoundTerm term = BoundTerm::whole_tensor;
    if (single[size_t(s)]) {
      StepTerms terms = step_terms(s, e, items, sum, mech, StepIndex(n));
      StepBoundTerms at_s = step_bound(s, e, terms, compute_us, sum);
      at_s.whole_tensor_us = t;
      bound_at[size_t(s)] = at_s.bound_us;
      if (at_s.bound_us > t) {
        t = at_s.bound_us;
        term = BoundTerm::step;
      }
      if (explain) {
        for (const OffAble& it : items) {
          at_s.off_able_bytes += double(it.bytes);
          if (!std::isinf(it.cost)) at_s.regenerable_bytes += double(it.bytes);
        }
        b.steps.push_back(at_s);
      }
      if (!candidate[size_t(s)]) {
        keep(t, s, e, term);
        continue;
      }
      tail[size_t(s)] = tail_bound(s, e, terms, sum);
      if (every)  // only the pairs use it
        tail_f[size_t(s)] = tail_bound(
            s, e, step_terms(s, e, items, stalls_only, mech, StepIndex(n)), stalls_only);
    }
    keep(t, s, e, term);
  }
  // Pairs and sequences (docs/lower-bound.md), where that stays cheap: the kPairEnds candidate steps s2 whose
  // tail most exceeds the compute and forced stalls after them (the tail without the windows
  // term), and the kPairEnds whose tail most exceeds the compute and the windows term after
  // them, each with every candidate step s1 before it; the steps where the kSequenceWindows
  // forced windows of most extra time begin and end, and between each two of those the one of
  // highest bound(s). Those and the kPairStarts other steps of highest bound(s) start sequences
  // to every end.
  constexpr size_t kPairEnds = 4, kPairStarts = 16, kSequenceWindows = 32;
  std::vector<std::pair<bool, StepIndex>> ends;  // (reached from every start, step)
  auto add_end = [&](StepIndex s, bool from_every_start) {
    if (s >= 0 && s < StepIndex(n) && live[size_t(s)] > budget &&
        std::none_of(ends.begin(), ends.end(), [&](const auto& x) { return x.second == s; }))
      ends.emplace_back(from_every_start, s);
  };
  auto add_ends = [&](auto extra_of) {
    std::vector<std::pair<double, StepIndex>> by;
    for (StepIndex s : steps)
      if (double extra = extra_of(s); extra > 0) by.emplace_back(-extra, s);
    std::sort(by.begin(), by.end());
    if (by.size() > kPairEnds) by.resize(kPairEnds);
    for (auto [extra, s] : by) add_end(s, true);
  };
  add_ends([&](StepIndex s) {
    return tail_f[size_t(s)] - sum.compute_from(s + 1) - sum.stall_from(s + 1);
  });
  add_ends([&](StepIndex s) {
    return tail[size_t(s)] - sum.compute_from(s + 1) - sum.extra_from(s + 1);
  });
  if (every && !ends.empty()) {
    // Sequences also pass where the forced windows (the kSequenceWindows of most extra time)
    // begin and end, and between each two such steps at the one of highest bound(s).
    std::vector<std::pair<double, const Window*>> by_extra;
    for (const Window& w : windows)
      by_extra.emplace_back(-(w.us - (sum.compute_to(w.hi) - sum.compute_to(w.lo + 1))), &w);
    std::sort(by_extra.begin(), by_extra.end());
    if (by_extra.size() > kSequenceWindows) by_extra.resize(kSequenceWindows);
    std::vector<StepIndex> marks = {0, StepIndex(n)};
    for (auto [minus_extra, w] : by_extra) {
      marks.push_back(w->lo);
      marks.push_back(w->hi);
    }
    std::sort(marks.begin(), marks.end());
    marks.erase(std::unique(marks.begin(), marks.end()), marks.end());
    for (size_t i = 0; i + 1 < marks.size(); ++i) {
      add_end(marks[i], false);
      auto from = bound_at.begin() + marks[i], to = bound_at.begin() + marks[i + 1];
      auto top = std::max_element(from, to);
      if (top != to && *top > 0) add_end(StepIndex(top - bound_at.begin()), false);
    }
    std::sort(ends.begin(), ends.end(),
              [](const auto& x, const auto& y) { return x.second < y.second; });
    const StepIndex last = ends.back().second;
    // The earliest start found for each end: at first the compute and the least extra time
    // before it (as in Dep); then the best pair into it, from `via`.
    std::vector<double> end_excess, earliest;
    std::vector<StepIndex> via(ends.size(), -1);
    std::vector<StepTerms> end_terms;
    for (auto [extra, s2] : ends) {
      earliest.push_back(sum.compute_to(s2) + sum.extra_to(s2 + 1));
      end_excess.push_back(double(live[size_t(s2)] - budget));
      end_terms.push_back(step_terms(s2, end_excess.back(),
                                     off_able_at(g, life, s2, compute_us, regeneration, movable),
                                     sum, mech, StepIndex(n)));
    }
    // Every candidate step starts pairs; the ends and the kPairStarts other steps of highest
    // bound(s) start sequences.
    std::vector<std::pair<double, StepIndex>> highest;
    for (StepIndex s : over)
      if (!candidate[size_t(s)]) highest.emplace_back(-bound_at[size_t(s)], s);
    std::sort(highest.begin(), highest.end());
    if (highest.size() > kPairStarts) highest.resize(kPairStarts);
    std::vector<StepIndex> starts = steps, sequence_starts;
    for (auto [minus_bound, s] : highest) sequence_starts.push_back(s);
    for (auto [extra, s] : ends) sequence_starts.push_back(s);
    std::sort(sequence_starts.begin(), sequence_starts.end());
    starts.insert(starts.end(), sequence_starts.begin(), sequence_starts.end());
    std::sort(starts.begin(), starts.end());
    starts.erase(std::unique(starts.begin(), starts.end()), starts.end());
    // In step order, so that an end's earliest start is complete before it starts a pair.
    for (StepIndex s1 : starts) {
      if (s1 >= last) break;
      double e1 = double(live[size_t(s1)] - budget);
      auto items = off_able_at(g, life, s1, compute_us, regeneration, movable);
      auto as_end =
          std::find_if(ends.begin(), ends.end(), [&](const auto& x) { return x.second == s1; });
      double s1_start = as_end == ends.end() ? 0 : earliest[size_t(as_end - ends.begin())];
      bool sequence_start = std::binary_search(sequence_starts.begin(), sequence_starts.end(), s1);
      for (size_t k = 0; k < ends.size(); ++k) {
        StepIndex s2 = ends[k].second;
        if (s2 <= s1) continue;
        // A candidate step starts pairs to the ends chosen for pairs alone (cost).
        if (!sequence_start && !ends[k].first) continue;
        StepTerms terms = step_terms(s1, e1, items, sum, mech, s2);
        double start = pair_start(s1, e1, terms, s1_start, s2, compute_us, sum);
        if (start > earliest[k]) {
          earliest[k] = start;
          via[k] = s1;
        }
      }
    }
    for (size_t k = 0; k < ends.size(); ++k) {
      if (via[k] < 0) continue;
      double t = step_bound_from(ends[k].second, end_excess[k], end_terms[k], earliest[k],
                                 compute_us, sum);
      if (t <= b.bound_us) continue;
      keep(t, via[k], double(live[size_t(via[k])] - budget), BoundTerm::pair, ends[k].second);
      // The sequence back from this end: each step's earliest start came from the one before.
      b.sequence = {ends[k].second};
      for (size_t at = k; via[at] >= 0;) {
        b.sequence.insert(b.sequence.begin(), via[at]);
        auto prev = std::find_if(ends.begin(), ends.end(),
                                 [&](const auto& x) { return x.second == via[at]; });
        if (prev == ends.end()) break;
        at = size_t(prev - ends.begin());
      }
    }
  }
  // Last: a tie keeps the step that set it.
  keep(b.compute_us + b.window_stall_us, -1, 0, BoundTerm::windows);
  return b;
}

}  // namespace autovm
