#include "plan/swap_planner.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>

#include "plan/baselines.h"
#include "plan/gaps.h"
#include "plan/residency.h"
#include "plan/simulator.h"
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
           const std::vector<Action>& base)
      : g_(g), life_(life), compute_(compute_us), mech_(mech), opts_(o),
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
      for (const SwapOptions::Ban& b : o.last_resort)
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
      in_us_.push_back(mech.to_device.time_us(bytes_.back()));
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
    if (opts_.temporaries_beside_step) return more;
    const int64_t now = temporary_bytes_at_[size_t(at)], room = allocated_[size_t(at)];
    return moment_before_excess(now + more, room) - moment_before_excess(now, room);
  }

  // Whether y already counts in floor_[at]: used there, of a kind that may not move and live
  // there, or pinned there by an earlier chain.
  bool pinned_at(TensorId y, StepIndex at) const {
    const Lifetime& l = life_[size_t(y)];
    if (!opts_.movable.has(g_.tensor(y).kind) && (l.persistent || (l.first <= at && at <= l.last)))
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
    if (opts_.allow_recompute && !gp.wrap && o.cost_us > 0 && !move_only_[i]) {
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
        .reserve(w.fetch_lo, w.fetch_hi, mech_.to_device.time_us(bytes), false);
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
  std::vector<bool> last_resort_;  // SwapOptions::last_resort
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
      actions.push_back({ActionKind::discard, c.gap.tensor, bytes, c.gap.after, c.gap.after + 1, -1, "", "", 0, 0});
      StepIndex at = c.hi + 1;
      for (TensorId x : c.temporaries)
        actions.push_back({ActionKind::recompute, x, g.tensor(x).bytes, at - 1, at, life[size_t(x)].first, "", "", 0, 0});
      actions.push_back({ActionKind::recompute, c.gap.tensor, bytes, at - 1, at, c.source, "", "", 0, 0});
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
// interval) only costs compute: drop it, the costliest first. Pairs whose chain made
// temporaries, or that regenerate an input of another recompute, stay.
void drop_unneeded_recomputes(const TrainingGraph& g, const std::vector<Lifetime>& life,
                              int64_t budget, const std::vector<double>& compute_us,
                              std::vector<int64_t>& resident, std::vector<Action>& actions) {
  std::vector<std::vector<size_t>> discards(g.tensors.size());  // by tensor
  std::vector<std::vector<size_t>> consumers(g.tensors.size());  // recomputes reading it
  std::set<std::pair<TensorId, StepIndex>> temporaries;
  for (size_t i = 0; i < actions.size(); ++i) {
    const Action& a = actions[i];
    if (a.kind == ActionKind::discard) discards[size_t(a.tensor)].push_back(i);
    if (a.kind != ActionKind::recompute) continue;
    for (TensorId in : g.step(a.source_step).inputs) consumers[size_t(in)].push_back(i);
    if (is_chain_temporary(a, life)) temporaries.insert({a.tensor, a.ready_before_step});
  }
  std::vector<std::pair<size_t, size_t>> pairs;  // (discard, recompute)
  for (size_t r = 0; r < actions.size(); ++r) {
    const Action& a = actions[r];
    if (a.kind != ActionKind::recompute || is_chain_temporary(a, life)) continue;
    bool chained = false;
    for (TensorId in : g.step(a.source_step).inputs)
      chained |= temporaries.count({in, a.ready_before_step}) > 0;
    if (chained) continue;
    size_t best = actions.size();  // the last discard before it
    for (size_t d : discards[size_t(a.tensor)])
      if (actions[d].after_step < a.ready_before_step &&
          (best == actions.size() || actions[d].after_step > actions[best].after_step))
        best = d;
    if (best < actions.size()) pairs.push_back({best, r});
  }
  std::sort(pairs.begin(), pairs.end(), [&](auto a, auto b) {
    double ca = compute_us[size_t(actions[a.second].source_step)];
    double cb = compute_us[size_t(actions[b.second].source_step)];
    return ca != cb ? ca > cb : a.second < b.second;
  });
  std::vector<bool> drop(actions.size(), false);
  for (auto [d, r] : pairs) {
    bool feeds_other = false;
    for (size_t r2 : consumers[size_t(actions[r].tensor)]) feeds_other |= r2 != r && !drop[r2];
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
  drop_unneeded_recomputes(g, life, budget, compute_us, resident, actions);
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

// Pass 3: actions sorted by issue step, then deadline, then (recomputes) source step, so that
// a chain runs in dependency order, then tensor.
// Actions the comparator cannot tell apart are the same action: the order is a function of
// the set, and one already in order (most are, after a pass's small change) is left as it is.
void sort_actions(std::vector<Action>& actions) {
  auto before = [](const Action& a, const Action& b) {
    if (a.after_step != b.after_step) return a.after_step < b.after_step;
    if (a.ready_before_step != b.ready_before_step) return a.ready_before_step < b.ready_before_step;
    // Recomputes before one step run in dependency order: forward steps in step order.
    StepIndex sa = a.kind == ActionKind::recompute ? a.source_step : -1;
    StepIndex sb = b.kind == ActionKind::recompute ? b.source_step : -1;
    if (sa != sb) return sa < sb;
    if (a.tensor != b.tensor) return a.tensor < b.tensor;
    return a.kind < b.kind;
  };
  if (!std::is_sorted(actions.begin(), actions.end(), before))
    std::sort(actions.begin(), actions.end(), before);
}

// (tensor, step) for each step where a recompute reads the tensor (rule 3), sorted, once each.
std::vector<std::pair<TensorId, StepIndex>> recompute_reads(const TrainingGraph& g,
                                                            const std::vector<Action>& actions) {
  std::vector<std::pair<TensorId, StepIndex>> reads;
  for (const Action& a : actions)
    if (a.kind == ActionKind::recompute)
      for (TensorId in : g.step(a.source_step).inputs) reads.emplace_back(in, a.ready_before_step);
  std::sort(reads.begin(), reads.end());
  reads.erase(std::unique(reads.begin(), reads.end()), reads.end());
  return reads;
}

}  // namespace

void keep_transfers_off_recompute_reads(const TrainingGraph& g, std::vector<Action>& actions) {
  const std::vector<std::pair<TensorId, StepIndex>> reads = recompute_reads(g, actions);
  for (Action& a : actions) {
    if (a.kind != ActionKind::evict && a.kind != ActionKind::prefetch) continue;
    // The reads of a.tensor in [after_step + 1, ready_before_step - 1]: [first, last).
    auto first = std::lower_bound(reads.begin(), reads.end(), std::make_pair(a.tensor, a.after_step + 1));
    auto last = std::lower_bound(first, reads.end(), std::make_pair(a.tensor, a.ready_before_step));
    if (first == last) continue;
    if (a.kind == ActionKind::prefetch)
      a.ready_before_step = first->second;
    else
      a.after_step = std::prev(last)->second;
  }
  sort_actions(actions);
}

namespace {

// Sorts `trial` and simulates it (one of `left` simulations); when it is faster than `sim`,
// it replaces `actions` and its simulation `sim`. Returns whether it did.
bool keep_if_faster(const TrainingGraph& g, const std::vector<double>& compute_us,
                    const Mechanism& mech, const DeviceProfile& device, std::vector<Action>& trial,
                    std::vector<Action>& actions, SimResult& sim, int& left) {
  keep_transfers_off_recompute_reads(g, trial);
  SimResult r = simulate(g, trial, compute_us, mech, device);
  --left;
  if (r.step_time_us >= sim.step_time_us) return false;
  actions.swap(trial);
  sim = std::move(r);
  return true;
}

bool is_transfer(const Action& a) { return a.kind == ActionKind::evict || a.kind == ActionKind::prefetch; }

// The latest after_step prefetch `j` may be given: before its deadline, and before every step
// it now keeps its tensor resident for where a recompute reads that tensor (rule 5 of
// docs/execution-model.md: a recompute's inputs are resident where it runs).
StepIndex latest_issue(const TrainingGraph& g, const std::vector<Action>& actions, size_t j) {
  const Action& p = actions[j];
  StepIndex limit = p.ready_before_step - 1;
  for (const Action& b : actions) {
    if (b.kind != ActionKind::recompute || b.ready_before_step <= p.after_step ||
        b.ready_before_step > limit)
      continue;
    const Step& s = g.step(b.source_step);
    if (std::find(s.inputs.begin(), s.inputs.end(), p.tensor) != s.inputs.end())
      limit = b.ready_before_step - 1;
  }
  return limit;
}

// The transfer each stalled step waited for last (its stall, its index in `actions`), worst
// stall first.
std::vector<std::pair<double, size_t>> stalled_transfers(const TrainingGraph& g,
                                                         const std::vector<Action>& actions,
                                                         const SimResult& sim) {
  const StepIndex n = g.step_count();
  std::vector<size_t> last(size_t(n) + 1, actions.size());
  for (size_t i = 0; i < actions.size(); ++i) {
    const Action& a = actions[i];
    if (!is_transfer(a)) continue;
    size_t& l = last[size_t(a.ready_before_step)];
    if (l == actions.size() || sim.ready_us[i] > sim.ready_us[l]) l = i;
  }
  std::vector<std::pair<double, size_t>> late;
  for (StepIndex st = 0; st < n; ++st)
    if (sim.stall_before_us[size_t(st)] > 0 && last[size_t(st)] < actions.size())
      late.emplace_back(sim.stall_before_us[size_t(st)], last[size_t(st)]);
  std::sort(late.begin(), late.end(), [](const auto& x, const auto& y) { return x.first > y.first; });
  return late;
}

}  // namespace

double delay_transfers(const TrainingGraph& g, const std::vector<double>& compute_us,
                       const Mechanism& mech, const DeviceProfile& device,
                       std::vector<Action>& actions, int max_simulations) {
  keep_transfers_off_recompute_reads(g, actions);
  SimResult sim = simulate(g, actions, compute_us, mech, device);
  int left = max_simulations - 1;
  // Whether two transfers share a copy queue (one per direction; one in all when not duplex).
  auto same_queue = [&](const Action& a, const Action& b) { return !mech.duplex || a.kind == b.kind; };
  std::set<std::pair<size_t, StepIndex>> tried;  // (action index, after_step) per round
  while (left > 0) {
    const std::vector<std::pair<double, size_t>> late = stalled_transfers(g, actions, sim);
    // Moves: a transfer on the same queue, issued no later and still busy when the late one
    // was issued, with a later deadline, issued instead when the late one is (or just before
    // its own deadline), so that the late one goes first.
    bool improved = false;
    for (const auto& [stall, l] : late) {
      const Action& lt = actions[l];
      for (size_t j = 0; j < actions.size() && left > 0 && !improved; ++j) {
        const Action& a = actions[j];
        if (j == l || !is_transfer(a) || !same_queue(a, lt) || a.after_step > lt.after_step ||
            sim.ready_us[j] <= sim.issue_us[l] || a.ready_before_step <= lt.ready_before_step)
          continue;
        StepIndex to = std::min(lt.after_step, a.kind == ActionKind::prefetch
                                                   ? latest_issue(g, actions, j)
                                                   : a.ready_before_step - 1);
        if (to <= a.after_step || !tried.insert({j, to}).second) continue;
        std::vector<Action> trial = actions;
        trial[j].after_step = to;
        improved = keep_if_faster(g, compute_us, mech, device, trial, actions, sim, left);
      }
      if (improved || left <= 0) break;
    }
    if (!improved) break;
    tried.clear();
  }
  return sim.step_time_us;
}


double postpone_for_evictions(const TrainingGraph& g, const std::vector<Lifetime>& life,
                              const std::vector<double>& compute_us, const Mechanism& mech,
                              const DeviceProfile& device, int64_t budget_bytes,
                              std::vector<Action>& actions, int max_simulations) {
  keep_transfers_off_recompute_reads(g, actions);
  SimResult sim = simulate(g, actions, compute_us, mech, device);
  int left = max_simulations - 1;
  const StepIndex n = g.step_count();
  const std::vector<int64_t> allocated = step_allocations(g, life);  // for resident_bytes
  // The latest deadline evict `e` may have: before its tensor's next prefetch is issued (that
  // prefetch's after_step, so that it stays off a step at least) and never past a use (rule 3).
  auto deadline_limit = [&](size_t e) {
    const Action& ev = actions[e];
    StepIndex limit = n;
    for (const Action& a : actions)
      if (a.tensor == ev.tensor && a.kind == ActionKind::prefetch && a.after_step >= ev.ready_before_step)
        limit = std::min(limit, a.after_step);
    for (StepIndex u : life[size_t(ev.tensor)].uses)
      if (u > ev.after_step) limit = std::min(limit, u);
    return limit;
  };
  bool improved = true;
  while (improved && left > 0) {
    improved = false;
    for (const auto& [stall, l] : stalled_transfers(g, actions, sim)) {
      if (actions[l].kind != ActionKind::evict) continue;
      const StepIndex st = actions[l].ready_before_step;
      const StepIndex limit = deadline_limit(l);
      if (limit <= st) continue;
      for (size_t j = 0; j < actions.size() && left > 0 && !improved; ++j) {
        if (actions[j].kind != ActionKind::prefetch || actions[j].tensor == actions[l].tensor) continue;
        const StepIndex issue = actions[j].after_step, due = actions[j].ready_before_step;
        if (issue + 1 > st || issue + 1 >= due) continue;  // not resident at st, or cannot move
        // Issue it later (its tensor is then resident from later on: never against a rule, up
        // to a recompute that reads it), by at least enough to be off at st, then by doubling.
        const StepIndex latest = latest_issue(g, actions, j);
        for (StepIndex d = st - issue; issue + d <= latest && left > 0 && !improved; d *= 2) {
          std::vector<Action> trial = actions;
          trial[j].after_step = issue + d;
          std::vector<int64_t> resident = resident_bytes(g, life, trial, allocated);
          --left;  // as costly as a simulation: counted alike
          Action& ev = trial[l];
          while (ev.ready_before_step < limit &&
                 resident[size_t(ev.ready_before_step)] + ev.bytes <= budget_bytes)
            resident[size_t(ev.ready_before_step++)] += ev.bytes;
          if (ev.ready_before_step == st) break;  // no room at st, nor with a later issue
          if (left <= 0) break;
          improved = keep_if_faster(g, compute_us, mech, device, trial, actions, sim, left);
        }
      }
      if (improved || left <= 0) break;
    }
  }
  return sim.step_time_us;
}

namespace {

// A recompute chain at step `at` under the current actions (regenerate_moved).
struct MovedRegeneration : RecomputeChain {
  std::vector<size_t> fetches;  // prefetches brought forward to be ready at `at`
  std::vector<size_t> relocated;  // recomputes brought forward to `at` (their chain with them)
};

class Regenerator {
 public:
  Regenerator(const TrainingGraph& g, const std::vector<Lifetime>& life, MovableKinds movable,
              const RecomputeOps& ops, const std::vector<Action>& actions)
      : g_(g), life_(life), movable_(movable), ops_(ops), actions_(actions),
        res_(g, life, actions) {}

  const TensorResidency& residency() const { return res_; }

  bool chain(TensorId x, MovedRegeneration& r) const { return builder_.add_producer(x, r); }

 private:
  // The chain rules (residency.h, ChainBuilder): a live tensor resident at r.at is read
  // there; an input that is off is brought back by its prefetch or by a recompute brought
  // forward; a live output that is off would be rewritten while it is off: no chain.
  friend class ChainBuilder<Regenerator, MovedRegeneration>;
  bool live(TensorId y, bool produce, MovedRegeneration& r) const {
    if (res_.on(y, r.at)) return true;
    if (!produce) return false;
    return bring_back(y, r) || recompute_earlier(y, r);
  }
  bool earlier_temporary(TensorId y, StepIndex at) const { return res_.temporary_at(y, at); }

  // y is discarded and off at r.at, regenerated by a recompute due at a later step: that
  // recompute is brought forward to r.at, with y's producer (and its dead inputs) in the chain.
  bool recompute_earlier(TensorId y, MovedRegeneration& r) const {
    size_t rec = actions_.size();
    StepIndex off_from = -1;
    for (size_t i : res_.of(y)) {
      const Action& a = actions_[i];
      if (a.kind == ActionKind::recompute && a.ready_before_step > r.at &&
          (rec == actions_.size() || a.ready_before_step < actions_[rec].ready_before_step))
        rec = i;
    }
    if (rec == actions_.size()) return false;
    const StepIndex until = actions_[rec].ready_before_step;
    for (size_t i : res_.of(y)) {
      const Action& a = actions_[i];
      StepIndex off = a.kind == ActionKind::discard ? a.after_step + 1
                    : a.kind == ActionKind::evict ? a.ready_before_step : -1;
      if (off >= 0 && off <= until) off_from = std::max(off_from, off);
      if (a.kind == ActionKind::prefetch && a.after_step + 1 <= until && a.after_step + 1 > r.at - 1)
        return false;
    }
    if (off_from < 0 || off_from > r.at - 1) return false;
    for (size_t i : res_.of(y))  // the off interval starts with a discard
      if (actions_[i].kind == ActionKind::evict && actions_[i].ready_before_step == off_from) return false;
    if (std::find(r.relocated.begin(), r.relocated.end(), rec) == r.relocated.end()) r.relocated.push_back(rec);
    return builder_.add_producer(y, r);
  }

  // y is moved and off at r.at: its prefetch that ends that off interval, issued no later than
  // r.at - 1 and due at r.at, when the off interval keeps a step.
  bool bring_back(TensorId y, MovedRegeneration& r) const {
    size_t fetch = actions_.size();
    StepIndex off_from = -1;  // the evict's deadline before it (-1: none, kept on the host)
    for (size_t i : res_.of(y)) {
      const Action& a = actions_[i];
      if (a.kind == ActionKind::prefetch && a.after_step >= r.at &&
          (fetch == actions_.size() || a.after_step < actions_[fetch].after_step))
        fetch = i;
    }
    if (fetch == actions_.size()) return false;
    const StepIndex fetch_after = actions_[fetch].after_step;
    for (size_t i : res_.of(y)) {
      const Action& a = actions_[i];
      if (a.kind == ActionKind::evict && a.ready_before_step <= fetch_after + 1)
        off_from = std::max(off_from, a.ready_before_step);
    }
    if (off_from < 0 && !life_[size_t(y)].persistent) return false;
    if (off_from > r.at - 1) return false;  // not off at r.at by this evict, or never off after
    for (size_t i : res_.of(y)) {  // off at r.at by this pair alone
      const Action& a = actions_[i];
      StepIndex at = a.kind == ActionKind::discard ? a.after_step + 1
                   : a.kind == ActionKind::recompute ? a.ready_before_step : -1;
      if (at >= 0 && at >= off_from && at <= fetch_after + 1) return false;
    }
    if (std::find(r.fetches.begin(), r.fetches.end(), fetch) == r.fetches.end()) r.fetches.push_back(fetch);
    return true;
  }

  const TrainingGraph& g_;
  const std::vector<Lifetime>& life_;
  MovableKinds movable_;
  RecomputeOps ops_;
  const std::vector<Action>& actions_;
  TensorResidency res_;
  ChainBuilder<Regenerator, MovedRegeneration> builder_{g_, life_, ops_, movable_, *this};
};

// The evict/prefetch pair of `i` (a transfer of a non-persistent tensor): {evict, prefetch}, or
// {n, n} when it has none.
std::pair<size_t, size_t> moved_pair(const std::vector<Action>& actions, const TensorResidency& res, size_t i) {
  const size_t none = actions.size();
  const Action& a = actions[i];
  size_t other = none;
  for (size_t j : res.of(a.tensor)) {
    const Action& b = actions[j];
    if (a.kind == ActionKind::evict) {
      if (b.kind == ActionKind::prefetch && b.after_step + 1 >= a.ready_before_step &&
          (other == none || b.after_step < actions[other].after_step))
        other = j;
    } else if (b.kind == ActionKind::evict && b.ready_before_step <= a.after_step + 1 &&
               (other == none || b.ready_before_step > actions[other].ready_before_step)) {
      other = j;
    }
  }
  if (other == none) return {none, none};
  return a.kind == ActionKind::evict ? std::make_pair(i, other) : std::make_pair(other, i);
}

// Drops chain temporaries due at the given steps that no other recompute there reads any more
// (after a recompute was brought forward out of their chain).
void prune_temporaries(const TrainingGraph& g, const std::vector<Lifetime>& life,
                       const std::set<StepIndex>& steps, std::vector<Action>& actions) {
  for (bool dropped = true; dropped;) {
    dropped = false;
    for (size_t i = 0; i < actions.size() && !dropped; ++i) {
      const Action& a = actions[i];
      if (!is_chain_temporary(a, life) || !steps.count(a.ready_before_step)) continue;
      bool read = false;
      for (const Action& b : actions)
        if (b.kind == ActionKind::recompute && b.ready_before_step == a.ready_before_step) {
          const Step& s = g.step(b.source_step);
          read |= std::find(s.inputs.begin(), s.inputs.end(), a.tensor) != s.inputs.end();
        }
      if (read) continue;
      actions.erase(actions.begin() + std::ptrdiff_t(i));
      dropped = true;
    }
  }
}

}  // namespace

double advance_evictions(const TrainingGraph& g, const std::vector<Lifetime>& life,
                         const std::vector<double>& compute_us, const Mechanism& mech,
                         const DeviceProfile& device, std::vector<Action>& actions,
                         int max_simulations) {
  keep_transfers_off_recompute_reads(g, actions);
  SimResult sim = simulate(g, actions, compute_us, mech, device);
  int left = max_simulations - 1;
  auto same_queue = [&](const Action& a, const Action& b) { return !mech.duplex || a.kind == b.kind; };
  // Recompute reads do not change with after_steps: worked out once.
  const std::vector<std::pair<TensorId, StepIndex>> reads = recompute_reads(g, actions);
  // The earliest after_step eviction `e` may have (rule 3): its tensor's last use, read by a
  // recompute or arrival before its deadline, and its first step.
  auto earliest = [&](size_t e) {
    const Action& ev = actions[e];
    const Lifetime& l = life[size_t(ev.tensor)];
    StepIndex floor = l.first;
    for (StepIndex u : l.uses)
      if (u < ev.ready_before_step) floor = std::max(floor, u);
    auto read = std::lower_bound(reads.begin(), reads.end(),
                                 std::make_pair(ev.tensor, ev.ready_before_step));
    if (read != reads.begin() && std::prev(read)->first == ev.tensor)  // its last read before
      floor = std::max(floor, std::prev(read)->second);
    for (const Action& a : actions)
      if (a.tensor == ev.tensor && a.ready_before_step < ev.ready_before_step &&
          (a.kind == ActionKind::prefetch || a.kind == ActionKind::recompute))
        floor = std::max(floor, a.ready_before_step);
    return floor;
  };
  std::set<std::pair<TensorId, StepIndex>> tried;  // (tensor, ready_before_step) of evictions
  bool improved = true;
  while (improved && left > 0) {
    improved = false;
    // The transfers in the order the queues run them.
    std::vector<size_t> order;
    for (size_t i = 0; i < actions.size(); ++i)
      if (is_transfer(actions[i])) order.push_back(i);
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return sim.issue_us[a] < sim.issue_us[b]; });
    for (size_t k = 0; k < order.size() && left > 0 && !improved; ++k) {
      const size_t e = order[k];
      const Action& ev = actions[e];
      if (ev.kind != ActionKind::evict || !tried.insert({ev.tensor, ev.ready_before_step}).second)
        continue;
      StepIndex to = earliest(e);  // and no earlier than the transfer before it on its queue
      for (size_t j = k; j-- > 0;)
        if (same_queue(actions[order[j]], ev)) {
          to = std::max(to, actions[order[j]].after_step);
          break;
        }
      if (to >= ev.after_step) continue;
      std::vector<Action> trial = actions;
      trial[e].after_step = to;
      improved = keep_if_faster(g, compute_us, mech, device, trial, actions, sim, left);
    }
    if (improved) tried.clear();
  }
  return sim.step_time_us;
}

int drop_unread_regenerations(const TrainingGraph& g, const std::vector<Lifetime>& life,
                              std::vector<Action>& actions) {
  auto reads = [&](const Action& b, TensorId x) {
    if (b.kind != ActionKind::recompute) return false;
    const Step& s = g.step(b.source_step);
    return std::find(s.inputs.begin(), s.inputs.end(), x) != s.inputs.end();
  };
  int dropped = 0;
  for (size_t i = 0; i < actions.size(); ++i) {
    const Action& r = actions[i];
    if (r.kind != ActionKind::recompute || is_chain_temporary(r, life)) continue;
    const TensorId x = r.tensor;
    const StepIndex t = r.ready_before_step;
    const Lifetime& l = life[size_t(x)];
    if (std::binary_search(l.uses.begin(), l.uses.end(), t)) continue;
    // x's next discard at or after t, with no other action of x before it.
    size_t discard = actions.size();
    bool clear = true;
    for (size_t j = 0; j < actions.size(); ++j) {
      const Action& d = actions[j];
      if (j == i || d.tensor != x || d.kind == ActionKind::advise) continue;
      if (d.kind == ActionKind::discard && d.after_step >= t) {
        if (discard == actions.size() || d.after_step < actions[discard].after_step) discard = j;
      }
    }
    if (discard == actions.size()) continue;
    const StepIndex last = actions[discard].after_step;  // x off from last + 1
    for (size_t j = 0; j < actions.size() && clear; ++j) {
      const Action& b = actions[j];
      if (j == i || j == discard) continue;
      if (b.tensor == x && b.kind != ActionKind::advise) {  // another action of x in between
        const bool off = b.kind == ActionKind::evict || b.kind == ActionKind::discard;
        const StepIndex at = b.kind == ActionKind::discard || b.kind == ActionKind::prefetch
                                 ? b.after_step + 1 : b.ready_before_step;  // where it acts
        if (off ? (at > t && at <= last) : (at >= t && at <= last + 1)) clear = false;
      }
      if (reads(b, x) && b.ready_before_step >= t && b.ready_before_step <= last + 1) clear = false;
    }
    for (StepIndex u : l.uses) clear &= !(u >= t && u <= last);
    if (!clear) continue;
    const size_t hi = std::max(i, discard), lo = std::min(i, discard);
    actions.erase(actions.begin() + std::ptrdiff_t(hi));
    actions.erase(actions.begin() + std::ptrdiff_t(lo));
    prune_temporaries(g, life, {t}, actions);
    ++dropped;
    i = size_t(-1);  // again from the start: the indices moved
  }
  return dropped;
}

double regenerate_moved(const TrainingGraph& g, const std::vector<Lifetime>& life,
                        const std::vector<double>& compute_us, const Mechanism& mech,
                        const DeviceProfile& device, int64_t budget_bytes, MovableKinds movable,
                        const RecomputeOps& recompute_ops, std::vector<Action>& actions,
                        int max_simulations, StepIndex earlier_steps) {
  keep_transfers_off_recompute_reads(g, actions);
  SimResult sim = simulate(g, actions, compute_us, mech, device);
  int left = max_simulations - 1;
  const std::vector<int64_t> allocated = step_allocations(g, life);  // for resident_bytes
  auto same_queue = [&](const Action& a, const Action& b) { return !mech.duplex || a.kind == b.kind; };
  std::set<std::pair<TensorId, StepIndex>> tried;  // (tensor, prefetch deadline) that failed
  bool improved = true;
  while (improved && left > 0) {
    improved = false;
    Regenerator regen(g, life, movable, recompute_ops, actions);
    const TensorResidency& res = regen.residency();
    const std::vector<std::pair<TensorId, StepIndex>> reads = recompute_reads(g, actions);
    for (const auto& [stall, l] : stalled_transfers(g, actions, sim)) {
      // The late transfer, then those that held it up on its queue, the largest first.
      std::vector<size_t> suspects = {l};
      std::vector<size_t> busy;
      for (size_t j = 0; j < actions.size(); ++j)
        if (j != l && is_transfer(actions[j]) && same_queue(actions[j], actions[l]) &&
            actions[j].after_step <= actions[l].after_step && sim.ready_us[j] > sim.issue_us[l])
          busy.push_back(j);
      std::stable_sort(busy.begin(), busy.end(), [&](size_t a, size_t b) { return actions[a].bytes > actions[b].bytes; });
      suspects.insert(suspects.end(), busy.begin(), busy.end());
      for (size_t i : suspects) {
        if (left <= 0 || improved) break;
        const TensorId x = actions[i].tensor;
        const Lifetime& lx = life[size_t(x)];
        if (lx.persistent || !movable.has(g.tensor(x).kind)) continue;
        auto [e, f] = moved_pair(actions, res, i);
        if (e == actions.size()) continue;
        // The last use before the evict: the discard follows it.
        StepIndex u = -1;
        for (StepIndex s : lx.uses)
          if (s <= actions[e].after_step) u = s;
        // The chain runs before the prefetch's deadline, or before an earlier step where
        // another recompute reads the tensor.
        StepIndex t = actions[f].ready_before_step;
        auto read = std::upper_bound(reads.begin(), reads.end(), std::make_pair(x, u));
        if (read != reads.end() && read->first == x && read->second < t) t = read->second;
        if (t >= g.step_count() || !tried.insert({x, t}).second) continue;
        if (u < 0 || u + 2 > t) continue;
        bool clear = true;  // no other action of x inside [u, t]
        for (size_t j : res.of(x))
          if (j != e && j != f && actions[j].ready_before_step > u && actions[j].after_step < t) clear = false;
        if (!clear) continue;
        // The chain before t, or, where it does not fit there, before one of the
        // `earlier_steps` steps before t (x then resident from there): the first that fits.
        bool counted = false;  // the trials' resident bytes count as one simulation
        for (StepIndex at = t; at >= std::max(u + 2, t - earlier_steps) && left > 0; --at) {
          MovedRegeneration r;
          r.at = at;
          if (!regen.chain(x, r)) continue;
          if (!counted) --left;
          counted = true;
          std::vector<Action> trial;
          for (size_t j = 0; j < actions.size(); ++j)
            if (j != e && j != f) trial.push_back(actions[j]);
          for (size_t j : r.fetches) {
            Action a = actions[j];
            // Replaced in place: the pair's two actions were left out before it.
            size_t k = j - (j > e ? 1 : 0) - (j > f ? 1 : 0);
            a.after_step = std::min(a.after_step, at - 1);
            a.ready_before_step = at;
            trial[k] = a;
          }
          std::set<StepIndex> left_behind;  // steps whose chains lost a recompute
          for (size_t j : r.relocated) {
            size_t k = j - (j > e ? 1 : 0) - (j > f ? 1 : 0);
            left_behind.insert(trial[k].ready_before_step);
            trial[k].after_step = at - 1;
            trial[k].ready_before_step = at;
          }
          if (!left_behind.empty()) prune_temporaries(g, life, left_behind, trial);
          trial.push_back({ActionKind::discard, x, g.tensor(x).bytes, u, u + 1, -1, "", "", 0, 0});
          for (TensorId y : r.temporaries)
            trial.push_back({ActionKind::recompute, y, g.tensor(y).bytes, at - 1, at, life[size_t(y)].first, "", "", 0, 0});
          trial.push_back({ActionKind::recompute, x, g.tensor(x).bytes, at - 1, at, lx.first, "", "", 0, 0});
          std::vector<int64_t> resident = resident_bytes(g, life, trial, allocated);
          if (std::any_of(resident.begin(), resident.end(), [&](int64_t b) { return b > budget_bytes; })) continue;
          if (left > 0) improved = keep_if_faster(g, compute_us, mech, device, trial, actions, sim, left);
          break;
        }
      }
      if (improved || left <= 0) break;
    }
  }
  return sim.step_time_us;
}

std::vector<Action> plan_swaps(const TrainingGraph& g, const std::vector<Lifetime>& life,
                               const std::vector<double>& compute_us, const Mechanism& mech,
                               const SwapOptions& o, std::vector<Action> base) {
  check_budget_feasible(g, life, o.budget_bytes, o.movable);
  Selector selector(g, life, compute_us, mech, o, base);
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
