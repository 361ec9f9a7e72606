// Contract: the pieces the lower bound (bound.h, docs/lower-bound.md) is made of, for bound.cc
// and bound_parts.cc only: where each tensor can be regenerated (RecomputePieces), the off-able
// tensors at a step, the least recompute and link time for a number of bytes, and the forced
// stalls and windows.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>
#include <vector>

#include "analysis/lifetimes.h"
#include "plan/device_profile.h"
#include "plan/gaps.h"
#include "plan/recompute_ops.h"
#include "plan/residency.h"

namespace autovm::bound_parts {

inline constexpr double kInf = std::numeric_limits<double>::infinity();

inline bool used_at(const Lifetime& l, StepIndex s) {
  return std::binary_search(l.uses.begin(), l.uses.end(), s);
}

inline bool live_at(const Lifetime& l, StepIndex s) {
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

// A forced window (docs/lower-bound.md): a transfer of `tensor` on one queue that runs after step `lo`
// ends and is complete before step `hi` starts.
struct Window {
  StepIndex lo = 0, hi = 0;
  double us = 0;
  bool to_device = false;
  TensorId tensor = -1;
};

// Recomputation (docs/lower-bound.md), worked out once for each piece of each gap of each tensor: a run of
// steps of the gap over which no input of the tensor's producer dies. Over a piece the chain is
// taken as it is at the piece's first step p: an input dead by p is dead at every later step,
// so it has at most the steps of the chain at a later step of the piece and needs at most its
// inputs resident, and a recompute fits at least as often: a relaxation, which keeps the bound
// below every plan.
class RecomputePieces {
 public:
  RecomputePieces(const TrainingGraph& g, const std::vector<Lifetime>& life,
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
  // window that starts at s or later is in flight (docs/lower-bound.md, Recomputes beside the windows).
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

// Each tensor off-able at step s (docs/lower-bound.md): bytes, the step after which it may start leaving
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
                                 const RecomputePieces& regeneration, MovableKinds movable);

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
// (docs/lower-bound.md): the largest over terms k of fixed_k + max(0, bytes - free_k) / bandwidth.
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

// The forced stall before each step b (docs/lower-bound.md): max(F(b), D(b)), F(b) the to-device time of
// the tensors that can only arrive at b by a prefetch issued when step b-1 finishes, D(b) the
// to-host time of those that can only leave at b by an eviction issued then.
std::vector<double> forced_stall_us(const TrainingGraph& g, const std::vector<Lifetime>& life,
                                    const std::vector<int64_t>& unavoidable, int64_t budget,
                                    const Mechanism& mech, const RecomputePieces& regeneration,
                                    MovableKinds movable);

// The forced windows of every gap (docs/lower-bound.md): x cannot be resident at a step s of the gap
// (unavoidable(s) + bytes(x) > budget) and no recompute can make it again from s; its eviction
// runs in (use before the gap, first such s], its prefetch in (last such s, use after the gap].
std::vector<Window> forced_windows(const TrainingGraph& g, const std::vector<Lifetime>& life,
                                   const std::vector<int64_t>& unavoidable, int64_t budget,
                                   const Mechanism& mech, const RecomputePieces& regeneration,
                                   MovableKinds movable);

}  // namespace autovm::bound_parts
