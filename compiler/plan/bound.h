// Contract: a lower bound on the training step's time under a budget, which no plan in the
// execution model (docs/execution-model.md) beats: moving tensors, recomputing single steps or
// whole chains (checkpointing), in any mix.
//
// Derivation. c_k is step k's compute time, C = sum c_k, C_<s and C_>s the sums before and
// after s. At step s, E(s) = live(s) - budget bytes must be off the GPU. Each is either moved
// or regenerated:
//   - moved bytes M were evicted before s started and are prefetched after s finished, so
//       start(s) >= max(C_<s, M / bw_to_host),   end >= start(s) + c_s + M / bw_to_device;
//   - the other E - M bytes are regenerated after s by re-running their producers, and any
//     producer input that died before s, recursively (a chain). The compute this adds is at
//     least Rc(E - M): a fractional knapsack over the tensors off-able at s, each costed at
//     the sum over its chain's steps of c_q / (number of those tensors whose chain holds q),
//     so that shared steps are never counted twice. Tensors nothing can regenerate (inputs,
//     persistent state) have infinite cost.
//   bound(s) = min over M in [0, E] of
//       max(C_<s, M/bw_to_host) + c_s + max(C_>s + Rc(E - M), M/bw_to_device)
// The function is convex in M, so a ternary search finds the minimum.
//
// Forced arrivals. unavoidable(s) (plan/gaps.h) is resident at s under every plan. A tensor x
// used at step b, not used at b-1, live at b-1 and covered there by a gap (so not counted in
// unavoidable(b-1)) with unavoidable(b-1) + bytes(x) > budget cannot be resident at b-1. It is
// resident at b, so it becomes resident exactly at b, in one of two ways (execution-model.md):
//   - a prefetch with after_step = b-1 (an earlier one would make x resident at b-1) and
//     ready_before_step = b: issued when b-1 finishes, and step b waits for it;
//   - a recompute before b: its source step p (x's producer) runs with its inputs resident at
//     b, and its inputs and outputs whose lifetime has ended by b are temporaries at b. Those
//     are not in unavoidable(b) (not live at b), so the recompute needs
//     unavoidable(b) + T(x, b) <= budget, T(x, b) the bytes of p's inputs and other outputs not
//     live at b; impossible too when x cannot be regenerated at all (as above).
// When neither recompute is possible, x is forced: every such x at b is a prefetch issued at
// the end of b-1 that b waits for, all on the one to-device queue, so the compute stream stalls
// before b at least F(b) = sum of to_device.time_us(bytes(x)) over them.
//
// Forced departures, the mirror image. A tensor x used at step b-1, live at b and not used
// there, with unavoidable(b) + bytes(x) > budget, cannot be resident at b: it is resident at
// b-1 and off at b, so an off interval of x starts exactly at b. One that starts with a
// `discard` ends with a `recompute` (rule 4; x is used again, and a discard drops its data),
// impossible when x cannot be regenerated at all (as above: persistent, an input or label, or
// made by a step that is not a forward one, or by a dropout). Then the off interval starts
// with an `evict` whose ready_before_step is b, issued when a step >= b-1 finishes (rule 3: no
// use in [after_step + 1, ready_before_step - 1], and x is used at b-1), and step b waits for
// it: every such x at b is on the one to-host queue, so the compute stream stalls before b at
// least D(b) = sum of to_host.time_us(bytes(x)) over them.
//
// Together. Several tensors may each fit at b-1 (arrivals) or b (departures) but not all at
// once. Let X be the tensors that pass the tests above except the budget one: for arrivals,
// used at b, not at b-1, live and covered by a gap at b-1, that no recompute can make at b; for
// departures, used at b-1, live at b and unused there, that nothing can regenerate. Whatever a
// plan keeps resident at b-1 (arrivals) or b (departures) beside the unavoidable bytes fits in
// the room R = budget - unavoidable there, so at least bytes(X) - R of them cross the link in
// that window by the same argument, one queue per direction: F(b) >= (bytes(X) - R) /
// to_device bandwidth, D(b) >= (bytes(X) - R) / to_host bandwidth (fixed costs left out).
// Each of F(b), D(b) is the larger of its two estimates. Arrivals and departures at one step
// may run on two queues at once (duplex), so the stall before b is at least
// G(b) = max(F(b), D(b)) (written F(b) below, as the forced stall).
//
// Stalls, step compute and recompute are disjoint stretches of the compute stream, so the step
// takes at least C + sum_b F(b), and in bound(s) the stalls before s add to C_<s, the stalls
// after s to C_>s:
//   bound(s) = min over M of  max(C_<s + F_<=s, M/bw_to_host) + c_s
//                           + max(C_>s + F_>s + Rc(E - M), M/bw_to_device).
// The bound is the largest of C + sum_b F(b) and bound(s) over the steps with the most excess
// (the top 16) and the over-budget steps b-1 and b of each forced arrival b. Fixed costs per
// transfer and link sharing between directions only make plans slower.
//
// Kinds that may not move (gaps.h, MovableKinds). Such a tensor is resident over its whole
// lifetime under every plan, and no recompute may make it (not even as a temporary). So at s
// it is neither moved nor regenerated: the knapsack leaves it out, M is at most the bytes of
// the movable tensors off-able at s, a chain that would need such a temporary has infinite
// cost, and unavoidable() counts it, so it is never a forced arrival. Each of these only
// removes plans the option forbids; the bound stays below every plan it allows.
#pragma once

#include <vector>

#include "analysis/lifetimes.h"
#include "plan/device_profile.h"
#include "plan/gaps.h"

namespace autovm {

struct StepTimeBound {
  double bound_us = 0;
  double compute_us = 0;          // C
  double forced_stall_us = 0;     // sum over steps b of max(F(b), D(b)): forced arrivals and departures
  StepIndex critical_step = -1;   // the s that sets the bound (-1: compute alone)
  int64_t must_move_bytes = 0;    // E(s) at that step, moved or regenerated
};

StepTimeBound lower_bound(const TrainingGraph& graph, const std::vector<Lifetime>& life,
                          const std::vector<int64_t>& live_bytes,
                          const std::vector<double>& compute_us, int64_t budget_bytes,
                          const Mechanism& mechanism, MovableKinds movable = {});

}  // namespace autovm
