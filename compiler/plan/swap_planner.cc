// The greedy selection and plan_swaps (swap_planner.h).
#include "plan/swap_planner.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

#include "plan/action_order.h"
#include "plan/gaps.h"
#include "plan/passes/widen.h"
#include "plan/residency.h"
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
  std::vector<TensorId> temporaries;  // recompute: chain temporaries new at hi + 1
};

// A recompute chain (docs/execution-model.md, "Recompute chains"): the forward steps that run
// again just before step `at` to regenerate a tensor, in dependency (step) order. Their inputs
// and outputs that are live at `at` stay resident there (pins); those whose lifetime has ended
// are regenerated as temporaries, resident at `at` only.
struct Chain : RecomputeChain {
  std::vector<TensorId> pins;
  double cost_us = 0;  // compute of the steps not already run at `at`
};

// Link time left in each step's compute window, for transfers to hide behind (one per
// direction; one shared when the mechanism is not duplex). Range sums by a Fenwick tree; a
// reservation fills the window from its front (evictions) or its back (prefetches).
class LinkLoad {
 public:
  explicit LinkLoad(const std::vector<double>& compute_us)
      : free_(compute_us), tree_(compute_us.size() + 1, 0) {
    for (size_t i = 0; i < free_.size(); ++i) add(i, free_[i]);
  }

  // Link time free over steps [lo, hi] inclusive.
  double available(StepIndex lo, StepIndex hi) const {
    lo = std::max<StepIndex>(lo, 0);
    hi = std::min<StepIndex>(hi, StepIndex(free_.size()) - 1);
    if (lo > hi) return 0;
    return prefix(size_t(hi) + 1) - prefix(size_t(lo));
  }

  void reserve(StepIndex lo, StepIndex hi, double us, bool from_front) {
    lo = std::max<StepIndex>(lo, 0);
    hi = std::min<StepIndex>(hi, StepIndex(free_.size()) - 1);
    for (StepIndex k = 0; k <= hi - lo && us > 0; ++k) {
      size_t s = size_t(from_front ? lo + k : hi - k);
      double take = std::min(us, free_[s]);
      if (take <= 0) continue;
      free_[s] -= take;
      add(s, -take);
      us -= take;
    }
  }

 private:
  void add(size_t i, double v) {
    for (++i; i < tree_.size(); i += i & (~i + 1)) tree_[i] += v;
  }
  double prefix(size_t i) const {  // sum of free_[0, i)
    double sum = 0;
    for (; i > 0; i -= i & (~i + 1)) sum += tree_[i];
    return sum;
  }
  std::vector<double> free_;
  std::vector<double> tree_;
};

// The greedy selection (swap_planner.h): while some step is over the budget, take one more
// gap's tensor off there, the cheapest per byte. Its options are the planner's hot loop (a
// ResNet-152 plan at its least budget weighs millions): only the open gaps that cover the step
// are visited (bitsets), and the parts of an option that cannot make it the best so far are not
// worked out (option); neither changes the choice.
class Selector {
 public:
  Selector(const TrainingGraph& g, const std::vector<Lifetime>& life,
           const std::vector<double>& compute_us, const Mechanism& mech, const SwapOptions& o,
           const SelectionHints& hints, const std::vector<Action>& base)
      : g_(g), life_(life), compute_(compute_us), mech_(mech), opts_(o), hints_(hints),
        n_(g.step_count()), to_host_(compute_us),
        to_device_(compute_us), unavoidable_(unavoidable_bytes(g, life, o.movable)),
        floor_(unavoidable_), allocated_(step_allocations(g, life)),
        temporary_bytes_at_(size_t(n_), 0) {
    std::vector<int64_t> resident = resident_bytes(g, life, base);
    excess_.resize(resident.size());
    for (size_t s = 0; s < resident.size(); ++s) excess_[s] = resident[s] - o.budget_bytes;
    off_.resize(g.tensors.size());
    pinned_.resize(g.tensors.size());
    in_base_.assign(g.tensors.size(), false);
    for (const Action& a : base) {
      in_base_[size_t(a.tensor)] = true;
      if (is_chain_temporary(a, life))
        temporary_bytes_at_[size_t(a.ready_before_step)] += g.tensor(a.tensor).bytes;
      if (a.kind == ActionKind::recompute)
        for (TensorId in : g.step(a.source_step).inputs) {
          if (!pinned_at(in, a.ready_before_step) && g.tensor(in).bytes > 0)
            floor_[size_t(a.ready_before_step)] += g.tensor(in).bytes;
          pinned_[size_t(in)].push_back(a.ready_before_step);
        }
    }
    for (const Gap& gp : find_gaps(g, life, o.movable)) {
      if (in_base_[size_t(gp.tensor)]) continue;
      gaps_.push_back(gp);
      bool last = false, move_only = false;
      for (const SelectionHints::Ban& b : hints.last_resort)
        if (b.matches(gp)) (b.move_only ? move_only : last) = true;
      last_resort_.push_back(last);
      move_only_.push_back(move_only);
    }
    const size_t words = (gaps_.size() + 63) / 64;
    for (std::vector<uint64_t>& open : open_) open.assign(words, 0);
    for (size_t i = 0; i < gaps_.size(); ++i)
      open_[last_resort_[i] ? 1 : 0][i / 64] |= uint64_t(1) << (i % 64);
    covering_.resize(size_t(n_));
    for (const Gap& gp : gaps_) {
      bytes_.push_back(g.tensor(gp.tensor).bytes);
      out_us_.push_back(mech.to_host.time_us(bytes_.back()));
      in_us_.push_back(gp.tail ? 0.0 : mech.to_device.time_us(bytes_.back()));
      producer_.push_back(life[size_t(gp.tensor)].first);
    }
    temporaries_at_.resize(size_t(n_));
    ran_at_.resize(size_t(n_));
  }

  // False when some over-budget step has no gap left to relieve it (pinned inputs of
  // recomputations can leave none): this strategy cannot meet the budget.
  bool run(std::vector<Choice>& chosen) {
    for (;;) {
      auto worst = std::max_element(excess_.begin(), excess_.end());
      if (worst == excess_.end() || *worst <= 0) break;
      auto s = static_cast<StepIndex>(worst - excess_.begin());
      if (opts_.order == SelectOrder::earliest)
        for (s = 0; excess_[size_t(s)] <= 0;) ++s;
      else if (opts_.order == SelectOrder::latest)
        for (s = n_ - 1; excess_[size_t(s)] <= 0;) --s;
      if (over_changed_) refresh_over();
      Option best = pick(s, best_chain_);
      if (best.gap < 0) {
        stuck_step_ = s;
        return false;
      }
      Choice c = make_choice(best, best_chain_);
      apply(c);
      chosen.push_back(c);
    }
    return true;
  }

  StepIndex stuck_step() const { return stuck_step_; }

 private:
  // The best way to take one gap's tensor off at the worst step.
  // (Its chain, when it recomputes, is held beside it: see pick.)
  struct Option {
    int gap = -1;
    bool recompute = false;
    StepIndex lo = 0, hi = 0;  // transfer: the off window
    double cost_us = 0;        // recompute: its chain's compute; transfer: the stall estimate
    int64_t bytes = 0;
  };

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
    over_changed_ = false;
    next_over_.assign(size_t(n_) + 1, n_);
    prev_over_.assign(size_t(n_), -1);
    for (StepIndex s = n_ - 1; s >= 0; --s)
      next_over_[size_t(s)] = excess_[size_t(s)] > 0 ? s : next_over_[size_t(s) + 1];
    for (StepIndex s = 0; s < n_; ++s)
      prev_over_[size_t(s)] = excess_[size_t(s)] > 0 ? s : (s > 0 ? prev_over_[size_t(s) - 1] : -1);
  }

  // Where a recompute of the gap's tensor runs: before its next use, or before the first step
  // inside the gap where another chain needs it resident. -1: never before s.
  StepIndex recompute_at(const Gap& gp, StepIndex s) const {
    StepIndex at = gp.before;
    for (StepIndex pin : pinned_[size_t(gp.tensor)])
      if (gp.after < pin && pin < at) at = pin;
    return at > s ? at : -1;
  }

  // The chain rules (residency.h, ChainBuilder): a live tensor stays resident where the
  // chain runs (a pin), unless a base action or an earlier choice has it off there.
  friend class ChainBuilder<Selector, Chain>;
  bool live(TensorId y, bool, Chain& c) const {
    if (in_base_[size_t(y)] || is_off(y, c.at)) return false;
    c.pins.push_back(y);
    return true;
  }
  bool earlier_temporary(TensorId y, StepIndex at) const { return temporaries_at_[size_t(at)].count(y) > 0; }

  // The chain that regenerates the gap's tensor before step `at`, if one can run there.
  bool chain(const Gap& gp, StepIndex at, Chain& c) const {
    c.at = at;
    c.steps.clear();
    c.temporaries.clear();
    c.pins.clear();
    c.cost_us = 0;
    c.temporary_bytes = 0;
    // The checks below that fail whatever the chain holds (its extra bytes are never
    // negative), made first: most options fail them near the least budget.
    int64_t bytes = g_.tensor(gp.tensor).bytes;
    if (floor_[size_t(at)] > opts_.budget_bytes) return false;
    for (StepIndex s = at; s < gp.before; ++s)
      if (floor_[size_t(s)] + bytes > opts_.budget_bytes) return false;
    if (!builder_.add_producer(gp.tensor, c)) return false;
    std::sort(c.steps.begin(), c.steps.end());
    const std::set<StepIndex>& ran = ran_at_[size_t(at)];
    for (StepIndex q : c.steps)
      if (!ran.count(q)) c.cost_us += compute_[size_t(q)];
    // The temporaries (as far as they exceed what `at` allocates: resident_bytes), the pins
    // that step `at` does not use itself and the regenerated tensor (resident from `at` to its
    // next use) must fit beside what those steps need anyway.
    int64_t extra = temporaries_beyond(at, c.temporary_bytes);
    for (TensorId y : c.pins)
      if (!pinned_at(y, at)) extra += g_.tensor(y).bytes;
    if (floor_[size_t(at)] + extra > opts_.budget_bytes) return false;
    for (StepIndex s = at; s < gp.before; ++s)
      if (floor_[size_t(s)] + (s == at ? extra : 0) + bytes > opts_.budget_bytes) return false;
    return true;
  }

  // What `more` bytes of chain temporaries before step `at` add to its resident bytes: the
  // moment before `at` holds them and not what `at` allocates (resident_bytes, baselines.h).
  int64_t temporaries_beyond(StepIndex at, int64_t more) const {
    if (hints_.temporaries_beside_step) return more;
    const int64_t now = temporary_bytes_at_[size_t(at)], room = allocated_[size_t(at)];
    return moment_before_excess(now + more, room) - moment_before_excess(now, room);
  }

  // Whether y already counts in floor_[at]: used there, of a kind that may not move and live
  // there, or pinned there by an earlier chain.
  bool pinned_at(TensorId y, StepIndex at) const {
    const Lifetime& l = life_[size_t(y)];
    const TensorKind kind = g_.tensor(y).kind;
    if (!opts_.movable.has(kind) &&  // as unavoidable_bytes counts it (plan/gaps.h)
        (l.persistent || (l.first <= at && at <= resident_until(l, kind, opts_.movable))))
      return true;
    const auto& uses = l.uses;
    if (std::binary_search(uses.begin(), uses.end(), at)) return true;
    const auto& p = pinned_[size_t(y)];
    return std::find(p.begin(), p.end(), at) != p.end();
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

  // The compute windows a transfer of the gap hides behind: evict over [after + 1, lo - 1],
  // prefetch over [hi + 1, before - 1] (a wrap gap's windows run round the step's end).
  struct Windows {
    StepIndex evict_lo, evict_hi, fetch_lo, fetch_hi;
  };
  Windows windows(const Gap& gp, StepIndex lo, StepIndex hi) const {
    return {gp.after + 1, std::min(lo, n_) - 1, std::max<StepIndex>(hi, -1) + 1, gp.before - 1};
  }

  // Microseconds the gap's transfers would stall the compute stream, with the link time that
  // earlier choices already use (0: hidden).
  double stall(size_t i, StepIndex lo, StepIndex hi) const {
    const Gap& gp = gaps_[i];
    Windows w = windows(gp, lo, hi);
    const LinkLoad& in_load = mech_.duplex ? to_device_ : to_host_;
    double out = out_us_[i], in = in_us_[i];
    return std::max(0.0, out - to_host_.available(w.evict_lo, w.evict_hi)) +
           std::max(0.0, in - in_load.available(w.fetch_lo, w.fetch_hi));
  }

  // Less than or equal to the compute of the chain that regenerates the gap's tensor at `at`,
  // if one can: its first step, the tensor's producer, unless that already runs there.
  double chain_cost_floor(size_t i, StepIndex at) const {
    return ran_at_[size_t(at)].count(producer_[i]) ? 0 : compute_[size_t(producer_[i])];
  }

  // Whether a cost of at least `floor_us`, clearing `cleared` bytes of excess, is surely above
  // `beat_per` per byte as pick works it out (a division): the product is compared with a
  // margin far wider than the rounding of either, so that this never says yes wrongly.
  static bool surely_above(double floor_us, double cleared, double beat_per) {
    return floor_us > beat_per * cleared * (1 + 1e-9);
  }

  // The option for gap i at step s; when it recomputes, its chain is left in `c` (a scratch
  // chain whose vectors are reused, as pick evaluates thousands of options per choice). A chain
  // whose cost floor per byte of s's excess cleared is surely above `beat_per` cannot make the
  // option pick's best (pick): it is not built, and the option moves the tensor.
  Option option(size_t i, StepIndex s, Chain& c, double beat_per) const {
    const Gap& gp = gaps_[i];
    Option o;
    o.gap = int(i);
    o.bytes = bytes_[i];
    const double cleared = double(std::min(o.bytes, excess_[size_t(s)]));
    // Moving costs at least its link weight's share (the stall is never negative). When that
    // alone is above beat_per, its window and stall are not worked out: the cost counts as
    // infinite, which only a chain at or below beat_per replaces, as it would the true cost.
    double link_floor = opts_.link_weight * (out_us_[i] + in_us_[i]);
    o.cost_us = std::numeric_limits<double>::infinity();
    if (!surely_above(link_floor, cleared, beat_per)) {
      window(gp, o.lo, o.hi);
      if (avoid_pins(gp, s, o.lo, o.hi)) o.cost_us = stall(i, o.lo, o.hi) + link_floor;
    }
    if (opts_.allow_recompute && !gp.wrap && !gp.tail && o.cost_us > 0 && !move_only_[i]) {
      StepIndex at = recompute_at(gp, s);
      if (at > gp.after + 1 && !surely_above(chain_cost_floor(i, at), cleared, beat_per) &&
          chain(gp, at, c) && c.cost_us < o.cost_us) {
        o.recompute = true;
        o.cost_us = c.cost_us;
      }
    }
    if (std::isinf(o.cost_us)) o.gap = -1;
    return o;
  }

  // The best option among the gaps that are not a last resort; among those when none is left.
  // When it recomputes, its chain is left in `chain`.
  Option pick(StepIndex s, Chain& chain) const {
    Option best = pick(s, false, chain);
    return best.gap >= 0 ? best : pick(s, true, chain);
  }

  const std::vector<uint64_t>& covering_at(StepIndex s) const {
    std::vector<uint64_t>& bits = covering_[size_t(s)];
    if (bits.empty()) {
      bits.assign(open_[0].size(), 0);
      for (size_t i = 0; i < gaps_.size(); ++i)
        if (gaps_[i].covers(s)) bits[i / 64] |= uint64_t(1) << (i % 64);
    }
    return bits;
  }

  // Free (hidden) options first: the smallest that clears s's excess, else the largest. Then
  // the least cost per byte of s's excess cleared, the larger on a tie.
  Option pick(StepIndex s, bool last_resort, Chain& best_chain) const {
    Option best;
    int64_t need = excess_[size_t(s)];
    // What an option must not exceed, per byte cleared, to be picked over the best so far.
    double beat_per = std::numeric_limits<double>::infinity();
    // The gaps not taken, of this class, that cover s, in index order (as ties keep the first).
    const std::vector<uint64_t>& open = open_[last_resort ? 1 : 0];
    const std::vector<uint64_t>& covering = covering_at(s);
    for (size_t w = 0; w < open.size(); ++w)
      for (uint64_t bits = open[w] & covering[w]; bits != 0; bits &= bits - 1) {
        const size_t i = w * 64 + size_t(__builtin_ctzll(bits));
        Option o = option(i, s, scratch_, beat_per);
        if (o.gap < 0) continue;
        bool better;
        if (best.gap < 0) {
          better = true;
        } else if ((o.cost_us == 0) != (best.cost_us == 0)) {
          better = o.cost_us == 0;
        } else if (o.cost_us == 0) {
          bool clears = o.bytes >= need, best_clears = best.bytes >= need;
          if (clears != best_clears) better = clears;
          else if (clears) better = o.bytes < best.bytes;  // the least overshoot
          else better = o.bytes > best.bytes;              // the most progress
        } else {
          double per = o.cost_us / double(std::min(o.bytes, need));
          double best_per = best.cost_us / double(std::min(best.bytes, need));
          better = per < best_per || (per == best_per && o.bytes > best.bytes);
        }
        if (better) {
          best = o;
          beat_per = best.cost_us == 0 ? 0 : best.cost_us / double(std::min(best.bytes, need));
          if (o.recompute) std::swap(best_chain, scratch_);
        }
      }
    return best;
  }

  Choice make_choice(const Option& o, const Chain& ch) {
    const size_t taken = size_t(o.gap);
    open_[last_resort_[taken] ? 1 : 0][taken / 64] &= ~(uint64_t(1) << (taken % 64));
    Choice c;
    c.gap = gaps_[size_t(o.gap)];
    if (o.recompute) {
      c.recompute = true;
      c.source = life_[size_t(c.gap.tensor)].first;
      c.lo = c.gap.after + 1;  // dropping costs no time: off until the chain runs
      c.hi = ch.at - 1;
      c.temporaries = ch.temporaries;
      for (TensorId y : ch.pins) {
        if (pinned_at(y, ch.at)) continue;
        floor_[size_t(ch.at)] += g_.tensor(y).bytes;
        pinned_[size_t(y)].push_back(ch.at);
      }
      const int64_t beyond = temporaries_beyond(ch.at, ch.temporary_bytes);
      temporary_bytes_at_[size_t(ch.at)] += ch.temporary_bytes;
      floor_[size_t(ch.at)] += beyond;
      for (StepIndex k = ch.at; k < c.gap.before; ++k)
        floor_[size_t(k)] += g_.tensor(c.gap.tensor).bytes;
      for (TensorId y : ch.temporaries) temporaries_at_[size_t(ch.at)].insert(y);
      for (StepIndex q : ch.steps) ran_at_[size_t(ch.at)].insert(q);
      change_excess(ch.at, beyond);
      return c;
    }
    c.lo = o.lo;
    c.hi = o.hi;
    int64_t bytes = g_.tensor(c.gap.tensor).bytes;
    Windows w = windows(c.gap, c.lo, c.hi);
    to_host_.reserve(w.evict_lo, w.evict_hi, mech_.to_host.time_us(bytes), true);
    (mech_.duplex ? to_device_ : to_host_)
        .reserve(w.fetch_lo, w.fetch_hi, in_us_[taken], false);
    return c;
  }

  void apply(const Choice& c) {
    int64_t bytes = g_.tensor(c.gap.tensor).bytes;
    if (!c.gap.wrap) {
      for (StepIndex s = c.lo; s <= c.hi; ++s) change_excess(s, -bytes);
    } else {
      for (StepIndex s = c.lo; s < n_; ++s) change_excess(s, -bytes);
      for (StepIndex s = 0; s <= c.hi; ++s) change_excess(s, -bytes);
    }
    off_[size_t(c.gap.tensor)].push_back(c);
  }

  // Adds `delta` bytes to step s's excess, noting whether s went over or under the budget.
  void change_excess(StepIndex s, int64_t delta) {
    int64_t& e = excess_[size_t(s)];
    bool was_over = e > 0;
    e += delta;
    if (was_over != (e > 0)) over_changed_ = true;
  }

  const TrainingGraph& g_;
  const std::vector<Lifetime>& life_;
  const std::vector<double>& compute_;
  const Mechanism& mech_;
  const SwapOptions& opts_;
  const SelectionHints& hints_;
  StepIndex n_;
  LinkLoad to_host_, to_device_;  // to_host_ is the shared queue when not duplex
  std::vector<int64_t> unavoidable_;
  // What must be resident at each step whatever is chosen next: unavoidable bytes, chain pins
  // and temporaries, and regenerated tensors resident from their chain to their next use.
  std::vector<int64_t> floor_;
  std::vector<int64_t> allocated_;            // step_allocations (gaps.h)
  std::vector<int64_t> temporary_bytes_at_;   // chain temporaries before each step
  std::vector<int64_t> excess_;
  std::vector<Gap> gaps_;
  // Bit i of open_[k]: gap i is not taken yet and is a last resort (k = 1) or not (k = 0).
  std::vector<uint64_t> open_[2];
  // Bit i of covering_[s]: gap i covers step s; made when s is first picked at.
  mutable std::vector<std::vector<uint64_t>> covering_;
  // Of each gap, read by every option: its tensor's bytes, eviction and prefetch on the link,
  // and the step that makes it.
  std::vector<int64_t> bytes_;
  std::vector<double> out_us_, in_us_;
  std::vector<StepIndex> producer_;
  std::vector<bool> last_resort_;  // SelectionHints::last_resort
  std::vector<bool> move_only_;
  std::vector<bool> in_base_;
  std::vector<std::vector<Choice>> off_;       // chosen windows by tensor
  std::vector<std::vector<StepIndex>> pinned_;  // steps where a recompute needs the tensor
  std::vector<std::set<TensorId>> temporaries_at_;  // chain temporaries by step
  std::vector<std::set<StepIndex>> ran_at_;         // chain steps run before a step
  std::vector<StepIndex> next_over_;  // first over-budget step >= s (n if none)
  std::vector<StepIndex> prev_over_;  // last over-budget step <= s (-1 if none)
  bool over_changed_ = true;          // whether a step went over or under since they were made
  StepIndex stuck_step_ = -1;
  ChainBuilder<Selector, Chain> builder_{g_, life_, opts_.recompute_ops, opts_.movable, *this};
  mutable Chain scratch_;  // pick's chain under evaluation
  Chain best_chain_;       // the picked option's chain, when it recomputes
};

std::vector<Action> to_actions(const TrainingGraph& g, const std::vector<Lifetime>& life,
                               const std::vector<Choice>& chosen, const Mechanism& mech) {
  std::vector<Action> actions;
  StepIndex n = g.step_count();
  for (const Choice& c : chosen) {
    int64_t bytes = g.tensor(c.gap.tensor).bytes;
    if (c.recompute) {
      actions.push_back(Action::discard(c.gap.tensor, bytes, c.gap.after));
      StepIndex at = c.hi + 1;
      for (TensorId x : c.temporaries)
        actions.push_back(Action::recompute(x, g.tensor(x).bytes, life[size_t(x)].first, at));
      actions.push_back(Action::recompute(c.gap.tensor, bytes, c.source, at));
      continue;
    }
    // A wrap gap's window is lo = n when nothing at the end of the step is over budget, and
    // hi = -1 when nothing at the start is.
    StepIndex evict_ready = std::min(c.lo, n);
    StepIndex fetch_after = c.hi;
    actions.push_back(Action::evict(c.gap.tensor, bytes, c.gap.after, evict_ready, mech.name));
    if (!c.gap.tail)  // a tail is read remotely after it, never brought back (gaps.h)
      actions.push_back(Action::prefetch(c.gap.tensor, bytes, fetch_after, c.gap.before, mech.name));
  }
  return actions;
}

}  // namespace

std::vector<Action> plan_swaps(const TrainingGraph& g, const std::vector<Lifetime>& life,
                               const std::vector<double>& compute_us, const Mechanism& mech,
                               const SwapOptions& o, std::vector<Action> base,
                               const SelectionHints& hints) {
  check_budget_feasible(g, life, o.budget_bytes, o.movable);
  Selector selector(g, life, compute_us, mech, o, hints, base);
  std::vector<Choice> chosen;
  if (!selector.run(chosen))
    throw Error(ErrorKind::infeasible,
                fmt::format("no plan found for the budget {}: step {} stays over it with every "
                            "tensor that could leave already off; raise --budget",
                            format_bytes(o.budget_bytes), selector.stuck_step()));
  std::vector<Action> actions = to_actions(g, life, chosen, mech);
  actions.insert(actions.begin(), base.begin(), base.end());
  widen(g, life, o.budget_bytes, compute_us, actions);
  keep_transfers_off_recompute_reads(g, actions);
  return actions;
}

}  // namespace autovm
