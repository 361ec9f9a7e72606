#include "plan/bound.h"

#include "plan/gaps.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>

namespace autovm {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

bool used_at(const Lifetime& l, StepIndex s) {
  return std::binary_search(l.uses.begin(), l.uses.end(), s);
}

bool live_at(const Lifetime& l, StepIndex s) {
  return l.persistent || (l.first <= s && s <= l.last);
}

// The smallest value over a range of steps in O(1), after O(n log n) (a sparse table).
class RangeMin {
 public:
  explicit RangeMin(const std::vector<int64_t>& v) : min_{v} {
    for (size_t w = 1; 2 * w <= v.size(); w *= 2) {
      const std::vector<int64_t>& lo = min_.back();
      std::vector<int64_t> next(v.size() - 2 * w + 1);
      for (size_t i = 0; i < next.size(); ++i) next[i] = std::min(lo[i], lo[i + w]);
      min_.push_back(std::move(next));
    }
  }

  // Over [lo, hi], lo <= hi.
  int64_t operator()(StepIndex lo, StepIndex hi) const {
    size_t k = size_t(std::bit_width(uint64_t(hi - lo + 1)) - 1);
    return std::min(min_[k][size_t(lo)], min_[k][size_t(hi) + 1 - (size_t(1) << k)]);
  }

  // The last step in [lo, hi] whose value is at most `limit`; lo - 1 when none is.
  StepIndex last_at_most(StepIndex lo, StepIndex hi, int64_t limit) const {
    if (lo > hi || (*this)(lo, hi) > limit) return lo - 1;
    while (lo < hi) {  // some step in [lo, hi] is at most the limit
      StepIndex mid = lo + (hi - lo + 1) / 2;
      if ((*this)(mid, hi) <= limit) lo = mid;
      else hi = mid - 1;
    }
    return lo;
  }

 private:
  std::vector<std::vector<int64_t>> min_;  // min_[k][i]: over [i, i + 2^k)
};

// A forced window (bound.h): a transfer of `tensor` on one queue that runs after step `lo`
// ends and is complete before step `hi` starts.
struct Window {
  StepIndex lo = 0, hi = 0;
  double us = 0;
  bool to_device = false;
  TensorId tensor = -1;
};

// Recomputation (bound.h), worked out once for each piece of each gap of each tensor: a run of
// steps of the gap over which no input of the tensor's producer dies. Over a piece the chain is
// taken as it is at the piece's first step p: an input dead by p is dead at every later step,
// so it has at most the steps of the chain at a later step of the piece and needs at most its
// inputs resident, and a recompute fits at least as often: a relaxation, which keeps the bound
// below every plan.
class Regeneration {
 public:
  Regeneration(const TrainingGraph& g, const std::vector<Lifetime>& life,
               const std::vector<int64_t>& unavoidable, int64_t budget, MovableKinds movable,
               bool allow_recompute, const RecomputeOps& ops)
      : g_(g), life_(life), unavoidable_(unavoidable), before_(before_step(g, life, unavoidable)),
        range_min_(unavoidable), before_min_(before_), budget_(budget), movable_(movable),
        ops_(ops), pieces_(g.tensors.size()) {
    if (!allow_recompute) return;
    for (const Tensor& t : g.tensors) {
      const Lifetime& l = life[size_t(t.id)];
      if (t.bytes > 0 && !l.uses.empty() && movable.has(t.kind) && has_producer(t.id))
        add_pieces(t.id);
    }
  }

  // The chain that regenerates x, off at s (live, unused at s, past its first use), before its
  // next use; nullptr when no recompute can (none fits at any step after s up to that use).
  const std::vector<StepIndex>* chain_at(TensorId x, StepIndex s) const {
    const Piece* piece = piece_at(x, s);
    return piece && piece->last_fit > s ? &piece->chain : nullptr;
  }

  // Whether x, regenerable at s (chain_at), may be made again while the transfer of a forced
  // window that starts at s or later is in flight (bound.h, Recomputes beside the windows).
  bool may_overlap(TensorId x, StepIndex s) const {
    const Piece* piece = piece_at(x, s);
    return piece && piece->overlap_from >= s;
  }

  // For each piece with a chain, the latest start lo of a forced window (lo, hi] of a tensor y
  // whose transfer a recompute of the piece's tensor may run beside: before a step t in
  // [lo + 1, hi - 1] (a transfer awaited at t is complete before t's recomputes run, and none
  // of the window is in flight once hi starts) where the recompute fits with y resident beside
  // the chain's needs; never when the chain reads y (it waits for y's prefetch, and runs before
  // y's eviction). `windows` by lo, the latest first. Past `max_work`
  // window checks the rest are taken as able to (only more recomputes are left free).
  void mark_overlaps(const std::vector<Window>& windows, double max_work) {
    double work = 0;
    for (size_t x = 0; x < pieces_.size(); ++x) {
      for (Piece& piece : pieces_[x]) {
        if (piece.last_fit <= piece.from) continue;  // no recompute at all
        if (work > max_work) {
          piece.overlap_from = g_.step_count();
          continue;
        }
        Needs needs = needs_of(TensorId(x), piece.chain, piece.from);
        const std::vector<StepIndex>& uses = life_[size_t(x)].uses;  // a gap holds the piece
        StepIndex next_use = *std::upper_bound(uses.begin(), uses.end(), piece.from);
        for (const Window& w : windows) {
          StepIndex lo = std::max(w.lo + 1, piece.from + 1);
          StepIndex hi = std::min(w.hi - 1, piece.last_fit);
          // A chain that reads y waits for y's prefetch, and runs before y's eviction.
          if (w.tensor == TensorId(x) || lo > hi ||
              std::binary_search(needs.inputs.begin(), needs.inputs.end(), w.tensor))
            continue;
          ++work;
          if (last_fit(TensorId(x), next_use, needs, lo, hi, g_.tensor(w.tensor).bytes) >= lo) {
            piece.overlap_from = w.lo;
            break;
          }
        }
      }
    }
  }

  // Bytes off-able at each step that no recompute can regenerate (by chain_at), and the
  // persistent ones; by a difference array over the gaps.
  std::vector<int64_t> never_regenerated() const {
    const StepIndex n = g_.step_count();
    std::vector<int64_t> delta(size_t(n) + 1, 0);
    auto add = [&](StepIndex from, StepIndex to, int64_t bytes) {
      if (from > to) return;
      delta[size_t(from)] += bytes;
      delta[size_t(to) + 1] -= bytes;
    };
    for (const Tensor& t : g_.tensors) {
      const Lifetime& l = life_[size_t(t.id)];
      if (t.bytes == 0 || l.uses.empty() || !movable_.has(t.kind)) continue;
      if (l.persistent) {  // off-able at every step it does not use
        add(0, n - 1, t.bytes);
        for (StepIndex u : l.uses) add(u, u, -t.bytes);
        continue;
      }
      const std::vector<Piece>& pieces = pieces_[size_t(t.id)];
      for (size_t k = 1; k < l.uses.size(); ++k) {  // each gap (a, b)
        StepIndex a = l.uses[k - 1], b = l.uses[k];
        auto p = std::lower_bound(pieces.begin(), pieces.end(), a + 1,
                                  [](const Piece& x, StepIndex v) { return x.from < v; });
        if (p == pieces.end() || p->from != a + 1) add(a + 1, b - 1, t.bytes);  // no chain
        for (; p != pieces.end() && p->from < b; ++p) {
          auto next = std::next(p);
          StepIndex to = next != pieces.end() && next->from < b ? next->from - 1 : b - 1;
          add(std::max(p->from, p->last_fit), to, t.bytes);  // regenerable while s < last_fit
        }
      }
    }
    std::vector<int64_t> out(delta.size() - 1);
    int64_t run = 0;
    for (size_t s = 0; s < out.size(); ++s) out[s] = run += delta[s];
    return out;
  }

 private:
  struct Piece {
    StepIndex from = 0;      // first step of the piece
    StepIndex last_fit = 0;  // last step t (<= next use) before which one fits; `from` if none
    StepIndex overlap_from = -1;  // may_overlap at steps up to this one; -1: at none
    std::vector<StepIndex> chain;
  };

  // The piece of x's gaps that holds s, or the last before it; nullptr when none is.
  const Piece* piece_at(TensorId x, StepIndex s) const {
    const std::vector<Piece>& pieces = pieces_[size_t(x)];
    auto after = std::upper_bound(pieces.begin(), pieces.end(), s,
                                  [](StepIndex v, const Piece& p) { return v < p.from; });
    return after == pieces.begin() ? nullptr : &*std::prev(after);
  }

  // Inputs of a chain's steps, resident where it runs: there as temporaries, or live, and then
  // not in unavoidable() unless used there. `until`: the last step where all of them can be.
  struct Needs {
    std::vector<TensorId> inputs;
    int64_t bytes = 0;
    StepIndex until = std::numeric_limits<StepIndex>::max();
  };

  // A step that may run again (recompute_ops.h) makes t, which is not persistent, an input or
  // a label.
  bool has_producer(TensorId t) const {
    const Lifetime& l = life_[size_t(t)];
    const Tensor& tensor = g_.tensor(t);
    if (l.persistent || tensor.kind == TensorKind::input || tensor.kind == TensorKind::label)
      return false;
    return may_rerun(g_.step(l.first), ops_);
  }

  // The pieces of x's gaps: each gap (a, b) is cut where an input of x's producer dies.
  void add_pieces(TensorId x) {
    const Lifetime& l = life_[size_t(x)];
    std::vector<StepIndex> deaths;
    for (TensorId in : g_.step(l.first).inputs)
      if (!life_[size_t(in)].persistent) deaths.push_back(life_[size_t(in)].last + 1);
    std::sort(deaths.begin(), deaths.end());
    for (size_t k = 1; k < l.uses.size(); ++k) {
      StepIndex a = l.uses[k - 1], b = l.uses[k];
      if (b == a + 1) continue;
      std::vector<StepIndex> starts = {a + 1};
      for (StepIndex d : deaths)
        if (starts.back() < d && d < b) starts.push_back(d);
      for (StepIndex p : starts) {
        Piece piece;
        piece.from = piece.last_fit = p;
        if (chain(x, p, piece.chain))
          piece.last_fit = last_fit(x, b, needs_of(x, piece.chain, p), p + 1, b);
        else
          piece.chain.clear();
        pieces_[size_t(x)].push_back(std::move(piece));
      }
    }
  }

  // The steps that re-run to make t at a step after `after`: t's producer and, for each of its
  // inputs whose lifetime ends by `after`, that input's chain. False when some tensor on the
  // way cannot be made again.
  bool chain(TensorId t, StepIndex after, std::vector<StepIndex>& steps) const {
    if (!has_producer(t)) return false;
    const Step& p = g_.step(life_[size_t(t)].first);
    if (std::find(steps.begin(), steps.end(), p.id) != steps.end()) return true;
    steps.push_back(p.id);
    for (TensorId in : p.inputs) {
      const Lifetime& li = life_[size_t(in)];
      if (li.persistent || li.last > after) continue;  // still there after `after`
      if (!movable_.has(g_.tensor(in).kind)) return false;  // no recompute may make it
      if (steps.size() > 64) continue;  // a longer chain costs at least these steps
      if (!chain(in, after, steps)) return false;
    }
    return true;
  }

  Needs needs_of(TensorId x, const std::vector<StepIndex>& steps, StepIndex after) const {
    Needs n;
    for (StepIndex q : steps)
      for (TensorId in : g_.step(q).inputs) n.inputs.push_back(in);
    std::sort(n.inputs.begin(), n.inputs.end());
    n.inputs.erase(std::unique(n.inputs.begin(), n.inputs.end()), n.inputs.end());
    std::erase_if(n.inputs, [&](TensorId y) { return y == x || g_.tensor(y).bytes == 0; });
    for (TensorId y : n.inputs) {
      const Lifetime& ly = life_[size_t(y)];
      bool movable = movable_.has(g_.tensor(y).kind);
      // One that dies after `after` and cannot be a temporary must be live where the chain runs.
      if (!ly.persistent && ly.last > after && (!movable || !has_producer(y)))
        n.until = std::min(n.until, ly.last);
      if (movable) n.bytes += g_.tensor(y).bytes;  // the others count in unavoidable() when live
    }
    return n;
  }

  // Unavoidable bytes in the moment before each step (docs/execution-model.md): those of the
  // step less what it allocates as it starts (step_allocations, gaps.h).
  static std::vector<int64_t> before_step(const TrainingGraph& g, const std::vector<Lifetime>& life,
                                          const std::vector<int64_t>& unavoidable) {
    std::vector<int64_t> out = step_allocations(g, life);
    for (size_t t = 0; t < out.size(); ++t) out[t] = unavoidable[t] - out[t];
    return out;
  }

  // The last step t in [lo, hi] (hi <= u, x's next use) before which a recompute fits, lo - 1
  // when none: in the moment before t, where the chain runs, before(t) + x (unless used at t)
  // + the chain's movable inputs not used at t <= budget; and at t, where x stays,
  // unavoidable(t) + x (unless used at t) <= budget.
  StepIndex last_fit(TensorId x, StepIndex u, const Needs& n, StepIndex lo, StepIndex hi,
                     int64_t also_resident = 0) const {
    hi = std::min(hi, n.until);
    if (lo > hi) return lo - 1;
    const int64_t x_bytes = g_.tensor(x).bytes + also_resident;
    auto fits = [&](StepIndex t) {
      int64_t need = (used_at(life_[size_t(x)], t) ? 0 : g_.tensor(x).bytes) + also_resident;
      if (unavoidable_[size_t(t)] + need > budget_) return false;
      for (TensorId y : n.inputs)
        if (movable_.has(g_.tensor(y).kind) && !used_at(life_[size_t(y)], t))
          need += g_.tensor(y).bytes;
      return before_[size_t(t)] + need <= budget_;
    };
    if (hi == u && fits(u)) return u;
    // Off the uses of the inputs (and before u) the need is the most it can be; at their uses,
    // less. The last step there that passes both tests: each test's last step, in turn, until
    // they agree.
    StepIndex last = std::min(hi, u - 1);
    for (StepIndex prev = last + 1; last >= lo && last != prev;) {
      prev = last;
      last = before_min_.last_at_most(lo, last, budget_ - x_bytes - n.bytes);
      last = range_min_.last_at_most(lo, last, budget_ - x_bytes);
    }
    last = std::max(last, lo - 1);
    for (TensorId y : n.inputs) {
      const auto& uses = life_[size_t(y)].uses;
      for (auto it = std::upper_bound(uses.begin(), uses.end(), last);
           it != uses.end() && *it <= hi; ++it)
        if (fits(*it)) last = *it;
    }
    return last;
  }

  const TrainingGraph& g_;
  const std::vector<Lifetime>& life_;
  const std::vector<int64_t>& unavoidable_;
  std::vector<int64_t> before_;  // unavoidable bytes in the moment before each step
  RangeMin range_min_;  // of unavoidable_
  RangeMin before_min_;  // of before_
  int64_t budget_;
  MovableKinds movable_;
  RecomputeOps ops_;
  std::vector<std::vector<Piece>> pieces_;  // by tensor, in step order
};

// Each tensor off-able at step s (bound.h): bytes, the step after which it may start leaving
// (its last use before s; -1 when it need not leave before s), the step before which it must
// be back (its next use after s; n when it need not come back after s), and the compute that
// regenerates it (infinite when nothing can).
struct OffAble {
  int64_t bytes = 0;
  StepIndex release = -1;
  StepIndex deadline = 0;
  double cost = kInf;
  bool may_overlap = false;  // may be made again while a forced window's transfer runs
};

std::vector<OffAble> off_able_at(const TrainingGraph& g, const std::vector<Lifetime>& life,
                                 StepIndex s, const std::vector<double>& compute_us,
                                 const Regeneration& regeneration, MovableKinds movable) {
  std::vector<OffAble> items;
  std::vector<const std::vector<StepIndex>*> chains;  // null: not regenerable
  std::vector<int> users(size_t(g.step_count()), 0);  // off-able tensors whose chain holds a step
  for (const Tensor& t : g.tensors) {
    const Lifetime& l = life[size_t(t.id)];
    // Off-able: live, movable, unused at s and covered by a gap there (gaps.h), so that the
    // off-able bytes are live(s) - unavoidable(s).
    if (t.bytes == 0 || !movable.has(t.kind) || !live_at(l, s) || l.uses.empty() || used_at(l, s))
      continue;
    if (!l.persistent && l.uses.front() > s) continue;  // before its first use: unavoidable
    OffAble item;
    item.bytes = t.bytes;
    auto next = std::upper_bound(l.uses.begin(), l.uses.end(), s);
    item.release = next == l.uses.begin() ? -1 : *std::prev(next);
    item.deadline = next == l.uses.end() ? g.step_count() : *next;
    const std::vector<StepIndex>* chain = regeneration.chain_at(t.id, s);
    if (chain) {
      item.cost = 0;
      item.may_overlap = regeneration.may_overlap(t.id, s);
      for (StepIndex q : *chain) users[size_t(q)]++;
    }
    items.push_back(item);
    chains.push_back(chain);
  }
  for (size_t i = 0; i < items.size(); ++i)
    if (chains[i])
      for (StepIndex q : *chains[i]) items[i].cost += compute_us[size_t(q)] / users[size_t(q)];
  return items;
}

// Least compute that regenerates `bytes` of the off-able tensors (a fractional knapsack, the
// cheapest per byte first), infinite when it cannot.
class RecomputeCost {
 public:
  explicit RecomputeCost(std::vector<OffAble> items) {
    std::erase_if(items, [](const OffAble& it) { return std::isinf(it.cost); });
    std::sort(items.begin(), items.end(), [](const OffAble& a, const OffAble& b) {
      return a.cost * double(b.bytes) < b.cost * double(a.bytes);
    });
    bytes_.push_back(0);
    time_.push_back(0);
    for (const OffAble& it : items) {
      bytes_.push_back(bytes_.back() + double(it.bytes));
      time_.push_back(time_.back() + it.cost);
      rate_.push_back(it.cost / double(it.bytes));
    }
  }

  double operator()(double bytes) const {
    if (bytes <= 0) return 0;
    if (bytes > bytes_.back()) return kInf;
    // The item that `bytes` ends in: all before it whole, a share of it.
    auto end = std::lower_bound(bytes_.begin() + 1, bytes_.end(), bytes);
    size_t k = size_t(end - bytes_.begin()) - 1;
    return time_[k] + (bytes - bytes_[k]) * rate_[k];
  }

 private:
  std::vector<double> bytes_, time_;  // prefix sums over the items in order
  std::vector<double> rate_;          // each item's compute per byte
};

// Least time a link needs to carry `bytes` of the off-able tensors within their windows
// (bound.h): the largest over terms k of fixed_k + max(0, bytes - free_k) / bandwidth.
class LinkCurve {
 public:
  LinkCurve(double bandwidth_gbps) : per_byte_(1 / (bandwidth_gbps * 1e3)) {}
  void add(double fixed_us, double free_bytes) { terms_.push_back({fixed_us, free_bytes}); }

  // Terms by free bytes: those at most `bytes` grow with it, the others are their fixed part.
  void done() {
    std::sort(terms_.begin(), terms_.end(),
              [](const Term& a, const Term& b) { return a.free_bytes < b.free_bytes; });
    for (const Term& k : terms_)
      growing_.push_back(std::max(growing_.empty() ? -kInf : growing_.back(),
                                  k.fixed_us - k.free_bytes * per_byte_));
    fixed_after_.assign(terms_.size() + 1, 0);
    for (size_t k = terms_.size(); k-- > 0;)
      fixed_after_[k] = std::max(fixed_after_[k + 1], terms_[k].fixed_us);
  }

  double operator()(double bytes) const {
    size_t k = size_t(std::upper_bound(terms_.begin(), terms_.end(), bytes,
                                       [](double b, const Term& t) { return b < t.free_bytes; }) -
                      terms_.begin());  // terms [0, k) have free_bytes <= bytes
    double t = std::max(floor_us_, fixed_after_[k]);
    if (k > 0) t = std::max(t, growing_[k - 1] + bytes * per_byte_);
    return t;
  }

  // From now on the curve is at least `us` for any number of bytes (still convex).
  void raise_to(double us) { floor_us_ = std::max(floor_us_, us); }

 private:
  struct Term {
    double fixed_us, free_bytes;
  };
  double per_byte_;
  std::vector<Term> terms_;
  std::vector<double> growing_;      // prefix max of fixed - free * per_byte
  std::vector<double> fixed_after_;  // suffix max of fixed
  double floor_us_ = -kInf;
};

// The forced stall before each step b (bound.h): max(F(b), D(b)), F(b) the to-device time of
// the tensors that can only arrive at b by a prefetch issued when step b-1 finishes, D(b) the
// to-host time of those that can only leave at b by an eviction issued then.
std::vector<double> forced_stall_us(const TrainingGraph& g, const std::vector<Lifetime>& life,
                                    const std::vector<int64_t>& unavoidable, int64_t budget,
                                    const Mechanism& mech, const Regeneration& regeneration,
                                    MovableKinds movable) {
  const StepIndex n = g.step_count();
  std::vector<double> forced(size_t(n), 0);
  std::vector<TensorId> used;
  auto uses_of = [&](const Step& step) {
    used.assign(step.inputs.begin(), step.inputs.end());
    used.insert(used.end(), step.outputs.begin(), step.outputs.end());
    std::sort(used.begin(), used.end());
    used.erase(std::unique(used.begin(), used.end()), used.end());
  };
  for (StepIndex b = 1; b < n; ++b) {
    uses_of(g.step(b));
    int64_t arriving = 0;  // bytes that cannot be regenerated at b and may be off at b-1
    double f = 0;
    for (TensorId x : used) {
      int64_t bytes = g.tensor(x).bytes;
      const Lifetime& l = life[size_t(x)];
      // Not resident at b-1 only if off there: x is live at b-1, unused there, and a gap
      // covers b-1 (a non-persistent tensor before its first use is in unavoidable(b-1)).
      if (bytes == 0 || used_at(l, b - 1) || !(l.persistent || l.first < b)) continue;
      if (!movable.has(g.tensor(x).kind)) continue;  // resident throughout: never arrives
      if (!l.persistent && l.uses.front() >= b) continue;
      if (regeneration.chain_at(x, b - 1)) continue;  // a recompute can make it before b
      arriving += bytes;
      if (unavoidable[size_t(b - 1)] + bytes <= budget) continue;  // may be resident at b-1
      f += mech.to_device.time_us(bytes);
    }
    // Together: at most the room at b-1 of them is resident there; the rest arrives.
    int64_t room = std::max<int64_t>(0, budget - unavoidable[size_t(b - 1)]);
    if (arriving > room)
      f = std::max(f, double(arriving - room) / (mech.to_device.bandwidth_gbps * 1e3));
    // Forced departures: x used at b-1, live at b and unused there, that no recompute can make
    // again before its next use, with unavoidable(b) + bytes(x) > budget.
    uses_of(g.step(b - 1));
    int64_t leaving = 0;  // bytes that cannot be regenerated and cannot all stay at b
    double d = 0;
    for (TensorId x : used) {
      int64_t bytes = g.tensor(x).bytes;
      const Lifetime& l = life[size_t(x)];
      if (bytes == 0 || !movable.has(g.tensor(x).kind) || used_at(l, b) || !live_at(l, b)) continue;
      if (regeneration.chain_at(x, b)) continue;  // may be discarded at b and regenerated
      leaving += bytes;
      if (unavoidable[size_t(b)] + bytes <= budget) continue;  // may stay resident at b
      d += mech.to_host.time_us(bytes);
    }
    // Together: at most the room at b of them stays resident; the rest leaves.
    room = std::max<int64_t>(0, budget - unavoidable[size_t(b)]);
    if (leaving > room)
      d = std::max(d, double(leaving - room) / (mech.to_host.bandwidth_gbps * 1e3));
    forced[size_t(b)] = std::max(f, d);
  }
  return forced;
}

// The forced windows of every gap (bound.h): x cannot be resident at a step s of the gap
// (unavoidable(s) + bytes(x) > budget) and no recompute can make it again from s; its eviction
// runs in (use before the gap, first such s], its prefetch in (last such s, use after the gap].
std::vector<Window> forced_windows(const TrainingGraph& g, const std::vector<Lifetime>& life,
                                   const std::vector<int64_t>& unavoidable, int64_t budget,
                                   const Mechanism& mech, const Regeneration& regeneration,
                                   MovableKinds movable) {
  const StepIndex n = g.step_count();
  std::vector<Window> windows;
  for (const Tensor& t : g.tensors) {
    const Lifetime& l = life[size_t(t.id)];
    if (t.bytes == 0 || l.uses.empty() || !movable.has(t.kind)) continue;
    auto forced_off = [&](StepIndex s) {
      return unavoidable[size_t(s)] + t.bytes > budget && !regeneration.chain_at(t.id, s);
    };
    double out_us = mech.to_host.time_us(t.bytes), in_us = mech.to_device.time_us(t.bytes);
    // Steps (from, to) of a gap; `leaves`: used at `from`; `returns`: used at `to`.
    auto gap = [&](StepIndex from, StepIndex to, bool leaves, bool returns) {
      StepIndex first = -1, last = -1;
      for (StepIndex s = from + 1; s < to; ++s)
        if (forced_off(s)) {
          if (first < 0) first = s;
          last = s;
        }
      if (first < 0) return;
      if (leaves) windows.push_back({from, first, out_us, false, t.id});
      if (returns) windows.push_back({last, to, in_us, true, t.id});
    };
    for (size_t k = 1; k < l.uses.size(); ++k) gap(l.uses[k - 1], l.uses[k], true, true);
    if (l.persistent) {  // the wrap-around gap, within this training step
      gap(l.uses.back(), n, true, false);
      gap(-1, l.uses.front(), false, true);
    }
  }
  return windows;
}

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

// The pieces of bound(s) (bound.h) at one step s: the departure curve Dep(M), the arrival
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
  // Those e - capacity bytes are of the tensors no recompute can make (bound.h, Moved bytes
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

// bound(s)'s part after s (bound.h) with M moved at s: the larger of
// C_>s + max(F_>s + Rc(E - M), W_>s + Rc_apart(E - M)) and Arr(M).
double after_step(StepIndex s, double e, const StepTerms& t, const Prefix& sum, double moved) {
  double stalls = sum.stall_from(s + 1), windows = sum.extra_from(s + 1);
  return std::max(sum.compute_from(s + 1) +
                      std::max(stalls + t.rc(e - moved), windows + t.rc_apart(e - moved)),
                  t.arrival(moved));
}

// bound(s) (bound.h): the least over M of Dep(M) + c_s + after_step(M), with the M that
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

// Pairs (bound.h): the earliest step s2 > s1 can start, `terms` those of s1 with arrivals and
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

// Whole tensors (bound.h): the least, over the tensors x some cover of the excess at s must
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

// Windows (bound.h): the most, over sets of disjoint stretches (A, B] of boundaries (the
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

// The over-budget steps whose bound(s) is worked out (bound.h): the kTopSteps with the most
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
  Regeneration regeneration(g, life, unavoidable, budget, movable, allow_recompute,
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
  // (ResNet-50 b256 at 4.245 GB with PyTorch's memory: 137.2 ms at the candidates alone, 155.4
  // at every step, set at step 66, 2026-12-01, before Rc_apart). The pairs and sequences below
  // start at the candidates and the highest of the others.
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
  // Pairs and sequences (bound.h), where that stays cheap: the kPairEnds candidate steps s2 whose
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
