#include "plan/swap_planner.h"

#include <algorithm>
#include <limits>

#include "plan/baselines.h"
#include "plan/gaps.h"
#include "util/error.h"
#include "util/size.h"

#include <fmt/format.h>

namespace autovm {
namespace {

// Steps [lo, hi] inclusive where a chosen gap keeps its tensor off; for a wrap gap the tensor
// is off over [lo, n-1] and [0, hi].
struct Choice {
  Gap gap;
  StepIndex lo = 0;
  StepIndex hi = 0;
  bool recompute = false;
  StepIndex source = -1;
};

struct Timing {
  std::vector<double> start, end;  // nominal, without stalls
};

Timing nominal_timing(const std::vector<double>& compute_us) {
  Timing t;
  double now = 0;
  for (double c : compute_us) {
    t.start.push_back(now);
    now += c;
    t.end.push_back(now);
  }
  return t;
}

class Selector {
 public:
  Selector(const TrainingGraph& g, const std::vector<Lifetime>& life,
           const std::vector<double>& compute_us, const Mechanism& mech, const SwapOptions& o,
           const std::vector<Action>& base)
      : g_(g), life_(life), compute_(compute_us), mech_(mech), opts_(o),
        n_(g.step_count()), timing_(nominal_timing(compute_us)) {
    std::vector<int64_t> resident = resident_bytes(g, life, base);
    excess_.resize(resident.size());
    for (size_t s = 0; s < resident.size(); ++s) excess_[s] = resident[s] - o.budget_bytes;
    off_.resize(g.tensors.size());
    pinned_.resize(g.tensors.size());
    std::vector<bool> in_base(g.tensors.size(), false);
    for (const Action& a : base) {
      in_base[size_t(a.tensor)] = true;
      if (a.kind == ActionKind::recompute)
        for (TensorId in : g.step(a.source_step).inputs) pinned_[size_t(in)].push_back(a.ready_before_step);
    }
    for (const Gap& gp : find_gaps(g, life))
      if (!in_base[size_t(gp.tensor)]) gaps_.push_back(gp);
    taken_.assign(gaps_.size(), false);
  }

  // False when some over-budget step has no gap left to relieve it (pinned inputs of
  // recomputations can leave none): this strategy cannot meet the budget.
  bool run(std::vector<Choice>& chosen) {
    for (;;) {
      auto worst = std::max_element(excess_.begin(), excess_.end());
      if (worst == excess_.end() || *worst <= 0) break;
      auto s = static_cast<StepIndex>(worst - excess_.begin());
      refresh_over();
      int best = pick(s);
      if (best < 0) {
        stuck_step_ = s;
        return false;
      }
      Choice c = make_choice(static_cast<size_t>(best), s);
      apply(c);
      chosen.push_back(c);
    }
    return true;
  }

  StepIndex stuck_step() const { return stuck_step_; }

 private:
  // Relief window of a gap: the over-budget steps it covers, as [lo, hi]. Uses next_over_ /
  // prev_over_, refreshed once per choice, so that it costs O(1).
  void window(const Gap& gp, StepIndex& lo, StepIndex& hi) const {
    lo = gp.after + 1 < n_ ? next_over_[size_t(gp.after + 1)] : n_;
    hi = gp.before >= 1 ? prev_over_[size_t(gp.before - 1)] : -1;
    if (!gp.wrap) {  // the gap covers an over-budget step, so lo <= hi inside it
      lo = std::min(lo, gp.before - 1);
      hi = std::max(hi, lo);
    }
  }

  void refresh_over() {
    next_over_.assign(size_t(n_) + 1, n_);
    prev_over_.assign(size_t(n_), -1);
    for (StepIndex s = n_ - 1; s >= 0; --s)
      next_over_[size_t(s)] = excess_[size_t(s)] > 0 ? s : next_over_[size_t(s) + 1];
    for (StepIndex s = 0; s < n_; ++s)
      prev_over_[size_t(s)] = excess_[size_t(s)] > 0 ? s : (s > 0 ? prev_over_[size_t(s) - 1] : -1);
  }

  bool recomputable(const Gap& gp, StepIndex& source) const {
    if (!opts_.allow_recompute || gp.wrap) return false;
    const Lifetime& l = life_[size_t(gp.tensor)];
    source = l.first;
    const Step& p = g_.step(source);
    if (p.outputs.size() != 1 || p.outputs[0] != gp.tensor || !cheap_to_recompute(p)) return false;
    for (TensorId in : p.inputs) {
      const Lifetime& li = life_[size_t(in)];
      if (li.first > gp.before || li.last < gp.before) return false;
      if (is_off(in, gp.before)) return false;
    }
    for (StepIndex pin : pinned_[size_t(gp.tensor)])
      if (gp.after < pin && pin < gp.before) return false;  // another recompute needs it there
    double link = mech_.to_host.time_us(g_.tensor(gp.tensor).bytes) +
                  mech_.to_device.time_us(g_.tensor(gp.tensor).bytes);
    return compute_[size_t(source)] < link;
  }

  bool is_off(TensorId t, StepIndex s) const {
    for (const Choice& c : off_[size_t(t)]) {
      if (!c.gap.wrap && c.lo <= s && s <= c.hi) return true;
      if (c.gap.wrap && (s >= c.lo || s <= c.hi)) return true;
    }
    return false;
  }

  // Narrows [lo, hi] around s so that it holds no step where a recomputation needs the
  // tensor resident; false when s itself is such a step (or, for a wrap gap, any is inside).
  bool avoid_pins(const Gap& gp, StepIndex s, StepIndex& lo, StepIndex& hi) const {
    for (StepIndex p : pinned_[size_t(gp.tensor)]) {
      if (gp.wrap) {
        if (p >= lo || p <= hi) return false;
        continue;
      }
      if (p == s) return false;
      if (p < s && p >= lo) lo = p + 1;
      if (p > s && p <= hi) hi = p - 1;
    }
    return true;
  }

  // Seconds of slack the gap's transfers have in the nominal timing (negative: a stall).
  double slack(const Gap& gp, StepIndex lo, StepIndex hi) const {
    int64_t bytes = g_.tensor(gp.tensor).bytes;
    double out = mech_.to_host.time_us(bytes), in = mech_.to_device.time_us(bytes);
    double total = timing_.end.empty() ? 0 : timing_.end.back();
    double evict_by = gp.wrap && lo >= n_ ? total : timing_.start[size_t(lo)];
    double fetch_from = gp.wrap && hi < 0 ? 0 : timing_.end[size_t(hi)];
    double evict_slack = evict_by - timing_.end[size_t(gp.after)] - out;
    double fetch_slack = timing_.start[size_t(gp.before)] - fetch_from - in;
    return std::min(evict_slack, fetch_slack);
  }

  int pick(StepIndex s) const {
    int best = -1;
    bool best_hidden = false, best_clears = false;
    double best_slack = -std::numeric_limits<double>::infinity();
    int64_t best_bytes = 0;
    int64_t need = excess_[size_t(s)];
    for (size_t i = 0; i < gaps_.size(); ++i) {
      const Gap& gp = gaps_[i];
      if (taken_[i] || !gp.covers(s)) continue;
      StepIndex lo, hi, source;
      window(gp, lo, hi);
      if (!avoid_pins(gp, s, lo, hi)) continue;
      int64_t bytes = g_.tensor(gp.tensor).bytes;
      bool hidden = recomputable(gp, source) || slack(gp, lo, hi) >= 0;
      double sl = hidden ? 0 : slack(gp, lo, hi);
      bool clears = bytes >= need;
      bool better;
      if (best < 0) better = true;
      else if (hidden != best_hidden) better = hidden;
      else if (!hidden) better = sl > best_slack || (sl == best_slack && bytes > best_bytes);
      else if (clears != best_clears) better = clears;
      else if (clears) better = bytes < best_bytes;  // the least overshoot
      else better = bytes > best_bytes;              // the most progress
      if (better) {
        best = static_cast<int>(i);
        best_hidden = hidden;
        best_clears = clears;
        best_slack = sl;
        best_bytes = bytes;
      }
    }
    return best;
  }

  Choice make_choice(size_t i, StepIndex s) {
    taken_[i] = true;
    Choice c;
    c.gap = gaps_[i];
    StepIndex source = -1;
    if (recomputable(c.gap, source)) {
      c.recompute = true;
      c.source = source;
      c.lo = c.gap.after + 1;  // dropping costs no time: off over the whole gap
      c.hi = c.gap.before - 1;
      for (TensorId in : g_.step(source).inputs) pinned_[size_t(in)].push_back(c.gap.before);
    } else {
      window(c.gap, c.lo, c.hi);
      avoid_pins(c.gap, s, c.lo, c.hi);
    }
    return c;
  }

  void apply(const Choice& c) {
    int64_t bytes = g_.tensor(c.gap.tensor).bytes;
    if (!c.gap.wrap) {
      for (StepIndex s = c.lo; s <= c.hi; ++s) excess_[size_t(s)] -= bytes;
    } else {
      for (StepIndex s = c.lo; s < n_; ++s) excess_[size_t(s)] -= bytes;
      for (StepIndex s = 0; s <= c.hi; ++s) excess_[size_t(s)] -= bytes;
    }
    off_[size_t(c.gap.tensor)].push_back(c);
  }

  const TrainingGraph& g_;
  const std::vector<Lifetime>& life_;
  const std::vector<double>& compute_;
  const Mechanism& mech_;
  const SwapOptions& opts_;
  StepIndex n_;
  Timing timing_;
  std::vector<int64_t> excess_;
  std::vector<Gap> gaps_;
  std::vector<bool> taken_;
  std::vector<std::vector<Choice>> off_;       // chosen windows by tensor
  std::vector<std::vector<StepIndex>> pinned_;  // steps where a recompute needs the tensor
  std::vector<StepIndex> next_over_;  // first over-budget step >= s (n if none)
  std::vector<StepIndex> prev_over_;  // last over-budget step <= s (-1 if none)
  StepIndex stuck_step_ = -1;
};

std::vector<Action> to_actions(const TrainingGraph& g, const std::vector<Choice>& chosen,
                               const Mechanism& mech) {
  std::vector<Action> actions;
  StepIndex n = g.step_count();
  for (const Choice& c : chosen) {
    int64_t bytes = g.tensor(c.gap.tensor).bytes;
    if (c.recompute) {
      actions.push_back({ActionKind::discard, c.gap.tensor, bytes, c.gap.after, c.gap.after + 1, -1, "", "", 0, 0});
      actions.push_back({ActionKind::recompute, c.gap.tensor, bytes, c.gap.before - 1, c.gap.before, c.source, "", "", 0, 0});
      continue;
    }
    // A wrap gap's window is lo = n when nothing at the end of the step is over budget, and
    // hi = -1 when nothing at the start is.
    StepIndex evict_ready = std::min(c.lo, n);
    StepIndex fetch_after = c.hi;
    actions.push_back({ActionKind::evict, c.gap.tensor, bytes, c.gap.after, evict_ready, -1, mech.name, "", 0, 0});
    actions.push_back({ActionKind::prefetch, c.gap.tensor, bytes, fetch_after, c.gap.before, -1, mech.name, "", 0, 0});
  }
  return actions;
}

// A discard/recompute pair the budget does not need (the tensor fits over its whole off
// interval) only costs compute: drop it, the costliest first.
void drop_unneeded_recomputes(const TrainingGraph& g, int64_t budget,
                              const std::vector<double>& compute_us, std::vector<int64_t>& resident,
                              std::vector<Action>& actions) {
  std::vector<std::pair<size_t, size_t>> pairs;  // (discard, recompute)
  for (size_t r = 0; r < actions.size(); ++r) {
    if (actions[r].kind != ActionKind::recompute) continue;
    for (size_t d = 0; d < actions.size(); ++d)
      if (actions[d].kind == ActionKind::discard && actions[d].tensor == actions[r].tensor &&
          actions[d].after_step < actions[r].ready_before_step)
        pairs.push_back({d, r});
  }
  std::sort(pairs.begin(), pairs.end(), [&](auto a, auto b) {
    double ca = compute_us[size_t(actions[a.second].source_step)];
    double cb = compute_us[size_t(actions[b.second].source_step)];
    return ca != cb ? ca > cb : a.second < b.second;
  });
  std::vector<bool> drop(actions.size(), false);
  for (auto [d, r] : pairs) {
    // A recompute that regenerates inputs of another recompute must stay with it.
    bool feeds_other = false;
    for (auto [d2, r2] : pairs) {
      if (r2 == r || drop[r2]) continue;
      const auto& ins = g.step(actions[r2].source_step).inputs;
      feeds_other |= std::find(ins.begin(), ins.end(), actions[r].tensor) != ins.end();
    }
    if (feeds_other) continue;
    StepIndex lo = actions[d].after_step + 1, hi = actions[r].ready_before_step - 1;
    int64_t bytes = actions[d].bytes;
    bool fits = true;
    for (StepIndex s = lo; s <= hi && fits; ++s) fits = resident[size_t(s)] + bytes <= budget;
    if (!fits) continue;
    for (StepIndex s = lo; s <= hi; ++s) resident[size_t(s)] += bytes;
    drop[d] = drop[r] = true;
  }
  std::vector<Action> kept;
  for (size_t i = 0; i < actions.size(); ++i)
    if (!drop[i]) kept.push_back(actions[i]);
  actions.swap(kept);
}

// Pass 2: give transfers the most time the budget allows.
void widen(const TrainingGraph& g, const std::vector<Lifetime>& life, int64_t budget,
           const std::vector<double>& compute_us, std::vector<Action>& actions) {
  std::vector<int64_t> resident = resident_bytes(g, life, actions);
  drop_unneeded_recomputes(g, budget, compute_us, resident, actions);
  // Pair each non-wrap evict with its prefetch (they were emitted next to each other).
  std::vector<size_t> order;
  for (size_t i = 0; i + 1 < actions.size(); ++i)
    if (actions[i].kind == ActionKind::evict && actions[i + 1].kind == ActionKind::prefetch &&
        actions[i].after_step < actions[i + 1].ready_before_step &&
        actions[i].ready_before_step <= actions[i + 1].after_step)
      order.push_back(i);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return actions[a + 1].ready_before_step != actions[b + 1].ready_before_step
               ? actions[a + 1].ready_before_step < actions[b + 1].ready_before_step
               : a < b;
  });
  std::vector<bool> drop(actions.size(), false);
  for (size_t i : order) {
    Action& evict = actions[i];
    Action& fetch = actions[i + 1];
    int64_t bytes = evict.bytes;
    StepIndex lo = evict.ready_before_step;  // off over [lo, hi]
    StepIndex hi = fetch.after_step;
    while (hi >= lo && resident[size_t(hi)] + bytes <= budget) resident[size_t(hi--)] += bytes;
    while (lo <= hi && resident[size_t(lo)] + bytes <= budget) resident[size_t(lo++)] += bytes;
    if (lo > hi) {
      drop[i] = drop[i + 1] = true;  // never off any more: no transfer needed
      continue;
    }
    evict.ready_before_step = lo;
    fetch.after_step = hi;
  }
  std::vector<Action> kept;
  for (size_t i = 0; i < actions.size(); ++i)
    if (!drop[i]) kept.push_back(actions[i]);
  actions.swap(kept);
}

}  // namespace

std::vector<Action> plan_swaps(const TrainingGraph& g, const std::vector<Lifetime>& life,
                               const std::vector<double>& compute_us, const Mechanism& mech,
                               const SwapOptions& o, std::vector<Action> base) {
  check_budget_feasible(g, life, o.budget_bytes);
  Selector selector(g, life, compute_us, mech, o, base);
  std::vector<Choice> chosen;
  if (!selector.run(chosen))
    throw Error(ErrorKind::infeasible,
                fmt::format("no plan found for the budget {}: step {} stays over it with every "
                            "tensor that could leave already off; raise --budget",
                            format_bytes(o.budget_bytes), selector.stuck_step()));
  std::vector<Action> actions = to_actions(g, chosen, mech);
  actions.insert(actions.begin(), base.begin(), base.end());
  widen(g, life, o.budget_bytes, compute_us, actions);
  std::sort(actions.begin(), actions.end(), [](const Action& a, const Action& b) {
    if (a.after_step != b.after_step) return a.after_step < b.after_step;
    if (a.ready_before_step != b.ready_before_step) return a.ready_before_step < b.ready_before_step;
    if (a.tensor != b.tensor) return a.tensor < b.tensor;
    return a.kind < b.kind;
  });
  return actions;
}

}  // namespace autovm
