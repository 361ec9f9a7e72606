// Contract: a lower bound on the training step's time under a budget, which no plan in the
// execution model (docs/execution-model.md) beats: moving tensors, recomputing single steps or
// whole chains (checkpointing), in any mix; only moving when allow_recompute is false.
//
// Notation. c_k is step k's compute time, C = sum c_k, C_<s, C_<=s, C_>s, C_>=s its sums over
// the steps before s, up to s, and so on. At step s, E(s) = live(s) - budget bytes must be off
// the GPU. They come from the off-able tensors: live at s, of a movable kind, unused at s and
// covered there by a gap (gaps.h), live(s) - unavoidable(s) bytes in all. Over its off interval
// that holds s, each off tensor x is either
//   - moved: an `evict` starts the interval and a `prefetch` ends it (rule 4). By rule 3 the
//     evict is issued when a step >= r(x) ends, r(x) (x's release) its last use before s, and
//     is complete before s starts; the prefetch is issued when a step >= s ends and is
//     complete before step d(x) (x's deadline), its next use after s, starts. A persistent
//     tensor kept on the host between training steps (rule 4) need not leave before s when s
//     comes before its first use (no release), nor come back after s when s comes after its
//     last use (no deadline);
//   - or regenerated: a `discard` starts the interval and a `recompute` due before a step t in
//     [s+1, d(x)] ends it.
//
// Recompute feasibility. Making x before step t re-runs its chain: its producer and, for each
// input whose lifetime has ended, that input's chain (inputs dead by s are dead at t > s). No
// chain exists for a tensor whose producer cannot run again (persistent, an input or label,
// made by a step that is not a forward one, by a dropout, or by an op that recompute_ops leaves
// out: plan/recompute_ops.h), nor through a dead input of a kind that may not move. Rule 5
// makes every input of every step of the chain resident at t: as a temporary, or live, and
// then not in unavoidable(t) unless t uses it; and x is resident from t. The chain runs in the
// moment before t (docs/execution-model.md), which holds unavoidable(t) less what t allocates
// as it starts (step_allocations, gaps.h): before(t). So the recompute needs
//     before(t) + bytes(x) (unless t uses x) + the movable inputs t does not use <= budget
// (in that moment) and unavoidable(t) + bytes(x) (unless t uses x) <= budget (at t, where x
// stays; the live inputs stay too, left out here, which only lets more recomputes pass),
// and t <= last(y) for each input y that dies after s and cannot be a temporary. x is
// regenerable at s when some t in [s+1, d(x)] passes: only then may a `discard` take it off at s.
// (Worked out once per piece of a gap, a run of steps where no input of x's producer dies, with
// the chain as at the piece's first step: no longer and needing no more than at any later step
// of the piece, so that only more recomputes pass.)
//
// bound(s). Let M bytes be moved and E - M regenerated. The evicts of the moved bytes run on the
// one to-host queue, those released at j or later after step j ends; the prefetches on the one
// to-device queue after s ends, those due by j before j starts. So
//   start(s) >= Dep(M) = max(C_<s + F_<=s, max over releases j of
//                              C_<=j + F_<=j + (moved bytes released at j or later) / bw_to_host)
//   end - end(s) >= max(C_>s + F_>s + Rc(E - M), Arr(M)),
//   Arr(M) = max over deadlines j of (moved bytes due by j) / bw_to_device + C_>=j + F_>j,
// and Rc(E - M) is the least compute that regenerates E - M bytes: a fractional knapsack over
// the regenerable off-able tensors, each costed at the sum over its chain's steps of c_q /
// (number of those tensors whose chain holds q), so that shared steps are never counted twice;
// infinite beyond them. (F is the forced stall, below.) A plan picks its tensors once; the
// bound picks them for each term on its own, at best: for Dep the M bytes without or with the
// earliest release, for Arr the M without or with the latest deadline, for Rc the cheapest.
// That only lowers it:
//   bound(s) = min over M in [max(0, E - regenerable), min(E, off-able)] of
//       Dep(M) + c_s + max(C_>s + F_>s + Rc(E - M), Arr(M)).
// Each part is convex in M (maxima of convex functions; Rc(E - M) convex as the knapsack fills
// the cheapest bytes first), so a ternary search finds the minimum.
//
// Moved bytes that no recompute can replace. Let N be the off-able tensors at s that are not
// regenerable at s (Recompute feasibility, above) and K = max(0, E - regenerable). A plan
// takes at least E bytes off at s, at most `regenerable` of them outside N, so at least K in
// N; and those are moved, not regenerated: a `discard` there would need a `recompute`
// in [s+1, d(x)]. So the plan's evicts before s hold at least K bytes of N, and its prefetches
// after s too. Dep and Arr grow with the set they are worked out on, so
//   Dep(M) >= Dep_N(K) and Arr(M) >= Arr_N(K)
// for every M, Dep_N and Arr_N being Dep and Arr over the tensors of N alone (their K bytes
// picked at best, as above). They move whole, so K rises to K', the least total of whole
// tensors of N that reaches K (over every subset when N holds at most 12 tensors; else K
// rounded up to a multiple of the greatest common divisor of their sizes), and M >= K' too.
// bound(s) uses max(Dep(M), Dep_N(K')) and max(Arr(M), Arr_N(K')) for M in [K', ...], still
// convex in M. It matters where N's tensors are released later, or due earlier, than the
// regenerable ones: ResNet-50 b256 at 4.245 GB with PyTorch's memory, at step 66 (layer2.2's
// Add), where K = 1.12 GB of the 2.47 GB that no chain can make (three tensors of 822 MB), so
// K' = 1.64 GB (2026-12-01: 139.6 ms -> 145.9 with K -> 155.4 with K'). The pairs and
// Tail(s) use the same curves and range.
//
// Forced arrivals. unavoidable(s) (plan/gaps.h) is resident at s under every plan. A tensor x
// used at step b, not used at b-1, live at b-1 and covered there by a gap (so not counted in
// unavoidable(b-1)) with unavoidable(b-1) + bytes(x) > budget cannot be resident at b-1. It is
// resident at b, so it becomes resident exactly at b, in one of two ways (execution-model.md):
//   - a prefetch with after_step = b-1 (an earlier one would make x resident at b-1) and
//     ready_before_step = b: issued when b-1 finishes, and step b waits for it;
//   - a recompute before b, which needs the test above to pass at t = b.
// When no recompute can, x is forced: every such x at b is a prefetch issued at the end of b-1
// that b waits for, all on the one to-device queue, so the compute stream stalls before b at
// least F(b) = sum of to_device.time_us(bytes(x)) over them.
//
// Forced departures, the mirror image. A tensor x used at step b-1, live at b and not used
// there, with unavoidable(b) + bytes(x) > budget, cannot be resident at b: it is resident at
// b-1 and off at b, so an off interval of x starts exactly at b. One that starts with a
// `discard` ends with a `recompute` before x's next use (rule 4; x is used again, and a discard
// drops its data), impossible when x is not regenerable at s = b (above). Then the off
// interval starts with an `evict` whose ready_before_step is b, issued when a step >= b-1
// finishes (rule 3: no use in [after_step + 1, ready_before_step - 1], and x is used at b-1),
// and step b waits for it: every such x at b is on the one to-host queue, so the compute stream
// stalls before b at least D(b) = sum of to_host.time_us(bytes(x)) over them.
//
// Together. Several tensors may each fit at b-1 (arrivals) or b (departures) but not all at
// once. Let X be the tensors that pass the tests above except the budget one: for arrivals,
// used at b, not at b-1, live and covered by a gap at b-1, that no recompute can make at b; for
// departures, used at b-1, live at b and unused there, that no recompute can make again. Whatever
// a plan keeps resident at b-1 (arrivals) or b (departures) beside the unavoidable bytes fits in
// the room R = budget - unavoidable there, so at least bytes(X) - R of them cross the link in
// that window by the same argument, one queue per direction: F(b) >= (bytes(X) - R) /
// to_device bandwidth, D(b) >= (bytes(X) - R) / to_host bandwidth (fixed costs left out).
// Each of F(b), D(b) is the larger of its two estimates. Arrivals and departures at one step
// may run on two queues at once (duplex), so the stall before b is at least
// G(b) = max(F(b), D(b)) (written F(b) elsewhere, as the forced stall).
//
// Whole tensors. bound(s) lets M be any number of bytes; a plan takes whole tensors off. Sort
// the off-able tensors at s that no recompute can make (cost infinite) by size, and add them
// to the regenerable bytes from the smallest up: the first whose addition covers E(s) sets a
// size b*. The regenerable bytes and every tensor smaller than b* leave less than E(s), so
// every plan moves, over an off interval holding s, some tensor x of b* bytes or more: its
// evict runs after its release r(x) ends and is complete before s starts, its prefetch after
// s ends and complete before its deadline d(x) starts (none without a release or deadline, as
// above). The time between the end of r(x) and the start of s is the compute of steps
// r(x)+1..s-1 plus what the compute stream spends there beyond it (stalls, recomputes), so that
// extra is at least to_host.time_us(bytes(x)) - C over r(x)+1..s-1, and at least the forced
// stalls before steps r(x)+1..s; likewise after s with the to-device time, C over
// s+1..d(x)-1 and the forced stalls before steps s+1..d(x). The two windows and the forced
// stalls outside them are disjoint, so the step takes at least
//   C + F outside the windows + max(F in (r, s], departure) + max(F in (s, d], arrival),
// the least of it over such x. Worked out at every over-budget step while (steps over the
// budget) x (tensors) stays under 2e7, at the candidate steps (below) otherwise.
//
// Pairs and sequences. bound(s) sees one step; a step's time can be held by several. Take steps
// s1 < s2 and M bytes moved at s1 (the rest of E(s1) regenerated). As in bound(s1), start(s1)
// >= Dep(M). Between the end of s1 and the start of s2 the compute stream runs steps
// s1+1..s2-1, the stalls before s1+1..s2, and the recomputes of the regenerated tensors due by
// s2 (each runs before a step in [s1+1, d(x)]); the moved tensors due by s2 arrive there too,
// on the one to-device queue after s1 ends. So
//   start(s2) - end(s1) >= max(C and F over (s1, s2) + Rc_<=s2(E - M), Arr_<=s2(M)),
// Rc_<=s2 the knapsack above with the tensors due after s2 free, Arr_<=s2 the arrival term
// with the deadlines after s2 left out and each counted to the start of s2. Any lower bound S1
// on start(s1) holds beside Dep(M), so
//   start(s2) >= S(s1 -> s2) = the least over M of
//       max(S1, Dep(M)) + c_s1 + max(C and F over (s1, s2) + Rc_<=s2(E - M), Arr_<=s2(M)),
// convex in M as above. At s2 itself, with its own M' moved (other transfers, later in time),
// start(s2) >= Dep(M') too, and bound(s2)'s part after s2 holds, so the step takes at least
//   the least over M' of max(S(s1 -> s2), Dep(M')) + c_s2 + (bound(s2)'s part after s2)(M').
// (Before, c_s2 + Tail(s2) followed S(s1 -> s2): Tail(s2) could pick M' with no cost to move
// them out before s2.) A sequence s1 < s2 < s3 < ... carries S from one to the next: S(s2) is the
// largest S(s1 -> s2) over the steps s1 before it, each with its own S(s1). It counts a step's
// departures before s1 and the arrivals it forces after s2 at once: VGG-19 at batch 256 and its
// least budget must move most of its forward activations out before backward starts and bring
// its first block's back after step 88 (2026-11-30: 304.3 -> 310.0 ms; 311.1 with the windows
// in bound(s) below). Worked out where the whole-tensor term is at every over-budget step
// (graph small enough). The ends s2: the 4 candidate steps whose Tail(s2), worked out with the
// forced stalls alone, most exceeds C_>s2 + F_>s2, and the 4 whose Tail(s2) most exceeds C_>s2
// + W_>s2 (the second four alone missed VGG-19's pair above: 308.7 ms), each with every
// candidate step s1 before it; and the steps where the 32 forced windows with the most extra
// time (Windows, below) begin and end, and between each two of those the step of highest
// bound(s). Those and the 16 other steps of highest bound(s) start sequences to every end. ResNet-
// 50 b256 at 4.245 GB with PyTorch's memory (2026-12-01): the pair (66, 170) gave 160.1 ms
// against bound(66)'s 158.8; with Dep(M') at 170, 163.4; the sequence 66, 170, 329, 340,
// 351 (the departures before layer2.2, the recomputes of layers 2-4 in the backward, the
// prefetches of two 822 MB layer1 outputs each between two of its steps, the rest after),
// 164.8. --explain-bound names the steps of the pair or sequence that sets the bound.
//
// Windows. The forced arrivals and departures above look one step ahead; a tensor can be forced
// off over a longer stretch. Take a gap (a, b) of x (uses a < b; for a persistent tensor also
// its wrap-around gap within the training step, from its last use to the end and from the start
// to its first use) and the steps s of it where x cannot be resident (unavoidable(s) + bytes(x)
// > budget) and is not regenerable at s (above). At each such s x is off under every plan, by a
// move. Let s' and s'' be the first and the last of them. The off interval holding s' starts
// with an evict issued when a step >= a ends and complete before s' starts (rule 3; resident
// through ready_before_step - 1), so its to-host copy runs within (a, s'] (after step a ends,
// before step s' starts); the one holding s'' ends with a prefetch issued when a step >= s''
// ends (off through after_step) and complete before b starts: its to-device copy runs within
// (s'', b]. (No departure window when x has no use before the gap in this training step, no
// arrival window when it has none after.) For a stretch (A, B] of boundaries (the stalls and
// recomputes before steps A+1..B), every window inside it, lo >= A and hi <= B, runs between the
// end of step A and the start of step B, one queue per direction; that span is the compute of
// steps A+1..B-1 plus the stretch's extra time (stalls, recomputes), so the extra is at least
// the larger over the two queues of (the time of its windows - that compute), and at least the
// forced stalls F in it. Disjoint stretches have disjoint extra time, so the step takes at least
// C + the most over sets of disjoint stretches of the sum of their extras (a dynamic program
// over the steps; a stretch need only start where a window does, or be one boundary, which
// gives sum_b F(b)). Worked out while steps x (window starts + windows) stays under 5e7.
//
// Windows in bound(s). The same dynamic program over the stretches within the boundaries
// before steps 1..k, W_<=k, and, run on the steps backwards, over those within the boundaries
// after step k, W_>k, bounds the extra time (stalls, recomputes) before and after a step: the
// span before step j ends is at least C_<=j + W_<=j, the span after step j starts at least
// C_>=j + W_>j. Each is at least the forced stalls there, and stands in for them in Dep (the
// compute before s and before each release j) and in Arr (the compute after each deadline j).
// After s, the stalls F_>s and the recomputes Rc(E - M) are disjoint, but the windows' extra
// may be those same recomputes, so the part after s is at least C_>s + max(F_>s + Rc(E - M),
// W_>s), and more (below):
//   bound(s) = min over M of Dep(M) + c_s
//              + max(C_>s + max(F_>s + Rc(E - M), W_>s + Rc_apart(E - M)), Arr(M)),
// and Tail(s) likewise. Each inequality is about one span of the compute stream, so the
// transfers that the windows and M count may be the same ones. Still convex in M. (Pairs count
// the stretch between s1 and s2 with F alone: a range of the program is not kept.)
//
// Recomputes beside the windows. A recompute shortens a stretch's stall only while a transfer
// of the stretch's windows is in flight. Take a stretch i of W_>s: its windows' transfers T_i
// on one queue within its span, the compute C_i of its interior steps, its stalls and
// recomputes. While the queue carries T_i the compute stream computes, stalls, or recomputes
// beside a transfer, so T_i <= C_i + stalls_i + (recomputes beside them), and stalls_i +
// recomputes_i >= T_i - C_i + (its recomputes not beside them); with its forced stalls, which
// are stalls proper, stalls_i + recomputes_i >= F_i + recomputes_i too. Over the stretches and
// the boundaries outside them, the extra after s is at least W_>s + the recomputes after s that
// are not beside a transfer of a window (lo, hi] with lo >= s. One beside such a transfer runs
// before a step t in [lo + 1, hi - 1]: a transfer awaited at t is complete before t's
// recomputes run (a step waits, then recomputes: docs/execution-model.md), and none of the
// window is in flight once hi starts. There y, the window's tensor, is resident (a prefetch
// counts from its after_step + 1, an evict until its ready_before_step - 1), so the chain's
// test above passes at t with y's bytes added. And the chain does not read y: a recompute
// before t that reads y is a use of y at t (rule 3), so y's prefetch is complete before it
// runs, and y's eviction is issued after t. (Only at t: a plan may evict x again after t, or
// y after its prefetch.) A tensor for which
// some window passes the test (worked out once per piece of a gap, with its chain there) may
// be made beside a transfer; Rc_apart is the knapsack Rc with those free, and the others'
// recompute adds to W_>s. Chain steps are shared as in Rc: a re-run of a step is beside a
// transfer or not as a whole, and each tensor that Rc_apart costs has its whole chain before
// one step t, not beside one. ResNet-50 b256 at 4.245 GB with PyTorch's memory: the windows
// after step 66 are the prefetches of two 822 MB layer1 block outputs in its backward (steps
// 330-346); layer2's tensors regenerated at step 66 are due before them, and some larger ones
// of layer1 and the stem do not fit beside them. So Rc_apart was 3.4 ms of Rc's 10.3 at step 66
// (2026-12-01: 155.4 -> 158.8 ms); 3.7 ms since chains that read a window's tensor are kept
// apart from its transfer (--explain-bound, column `apart`; bound(66) 159.0 ms).
//
// Stalls, step compute and recompute are disjoint stretches of the compute stream, so the step
// takes at least C + sum_b F(b) (and C + the windows term); in bound(s) the stalls up to j (or
// s) add to the compute before them, those after to the compute after. The bound is the largest
// of C + sum_b F(b), C + the windows term and bound(s) over a choice of over-budget steps (any
// choice keeps it a bound): every one, where the whole-tensor term is worked out at every one
// (Whole tensors, above); otherwise, and for the pairs, the candidate steps: the 16 with the
// most excess; the 16 whose excess takes longest to move past the compute and stalls before
// them, and the 16 likewise after them; the 16 where the bytes that must move (the excess
// beyond the regenerable ones) take longest to move both ways; and the steps b-1 and b around
// each forced stall before b. Fixed costs per transfer and link sharing between directions
// only make plans slower.
//
// Kinds that may not move (gaps.h, MovableKinds). Such a tensor is resident over its whole
// lifetime under every plan, and no recompute may make it (not even as a temporary). So at s
// it is neither moved nor regenerated: it is not off-able, a chain that would need such a
// temporary does not exist, and unavoidable() counts it, so it is never a forced arrival or
// departure. Without recomputation (allow_recompute false, autovm-plan --no-recompute) no
// chain exists at all: every off tensor is moved (M = E), and every forced arrival or departure
// is a transfer. With recompute_ops (autovm-plan --recompute-ops) no chain holds a step whose op
// it leaves out. Each of these only removes plans the options forbid; the bound stays below
// every plan they allow.
#pragma once

#include <vector>

#include "analysis/lifetimes.h"
#include "plan/device_profile.h"
#include "plan/gaps.h"
#include "plan/recompute_ops.h"

namespace autovm {

// bound(s) at one step s and its terms at the M that attains it (autovm-plan --explain-bound).
struct StepBoundTerms {
  StepIndex step = -1;
  double excess_bytes = 0;       // E(s)
  double off_able_bytes = 0;     // live(s) - unavoidable(s)
  double regenerable_bytes = 0;  // the off-able bytes some recompute can make again
  double moved_bytes = 0;        // M
  double departure_us = 0;       // Dep(M): the earliest step s can start
  double recompute_us = 0;       // Rc(E - M)
  double recompute_apart_us = 0; // Rc_apart(E - M): the part that adds to the windows term
  double arrival_us = 0;         // Arr(M): from the end of s
  double bound_us = 0;           // bound(s)
  double whole_tensor_us = 0;    // the whole-tensor term at s (bound.h, Whole tensors)
};

// The term that sets the bound: C alone (nothing over the budget), C + the windows term (at
// least the forced stalls), bound(s) at one step, the whole-tensor term at one step, or a pair.
enum class BoundTerm { compute, windows, step, whole_tensor, pair };

struct StepTimeBound {
  double bound_us = 0;
  double compute_us = 0;          // C
  double forced_stall_us = 0;     // sum over steps b of max(F(b), D(b)): forced arrivals and departures
  double window_stall_us = 0;     // the windows term's stalls (>= forced_stall_us): bound.h, Windows
  StepIndex critical_step = -1;   // the s that sets the bound (-1: C + the windows term)
  StepIndex pair_end = -1;        // s2 when the pair (critical_step, s2) sets it; else -1
  // When a pair or a sequence sets it: its steps in order (critical_step, pair_end the last two).
  std::vector<StepIndex> sequence;
  BoundTerm set_by = BoundTerm::compute;
  int64_t must_move_bytes = 0;    // E(s) at that step, moved or regenerated
  // With `explain`: bound(s) at every candidate step, in step order.
  std::vector<StepBoundTerms> steps;
};

StepTimeBound lower_bound(const TrainingGraph& graph, const std::vector<Lifetime>& life,
                          const std::vector<int64_t>& live_bytes,
                          const std::vector<double>& compute_us, int64_t budget_bytes,
                          const Mechanism& mechanism, MovableKinds movable = {},
                          bool allow_recompute = true, const RecomputeOps& recompute_ops = {},
                          bool explain = false);

}  // namespace autovm
