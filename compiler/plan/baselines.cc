// Baseline policies as action lists (baselines.h), and resident bytes under actions
// (docs/execution-model.md, "Residency").
#include "plan/baselines.h"

#include "plan/gaps.h"

#include <algorithm>
#include <cassert>
#include <cmath>

namespace autovm {

namespace {

// The first backward step (n when there is none): uses before it are forward uses (forward and
// loss phases), uses from it on are backward uses.
StepIndex first_backward_step(const TrainingGraph& g) {
  for (const Step& s : g.steps)
    if (s.phase == Phase::backward || s.phase == Phase::optimizer) return s.id;
  return g.step_count();
}

// A tensor's last forward use and first backward use (-1 when it has none).
struct ForwardBackwardGap {
  StepIndex last_forward = -1;
  StepIndex first_backward = -1;
};

ForwardBackwardGap gap_of(const Lifetime& l, StepIndex backward) {
  ForwardBackwardGap gap;
  for (StepIndex u : l.uses) {
    if (u < backward) gap.last_forward = u;
    else if (gap.first_backward < 0) gap.first_backward = u;
  }
  return gap;
}

Action make(ActionKind kind, const TrainingGraph& g, TensorId t, StepIndex after, StepIndex ready,
            const std::string& mechanism = "") {
  Action a;
  a.kind = kind;
  a.tensor = t;
  a.bytes = g.tensor(t).bytes;
  a.after_step = after;
  a.ready_before_step = ready;
  a.mechanism = mechanism;
  return a;
}

// Evict `t` after its last forward use f (off from f + 1) and prefetch it after step p so that
// it is resident again at its first backward use u. Needs f + 1 <= p <= u - 1.
void swap_out_and_in(std::vector<Action>& actions, const TrainingGraph& g, TensorId t, ForwardBackwardGap gap,
                     StepIndex p, const std::string& mechanism) {
  assert(gap.last_forward + 1 <= p && p <= gap.first_backward - 1);
  actions.push_back(make(ActionKind::evict, g, t, gap.last_forward, gap.last_forward + 1, mechanism));
  actions.push_back(make(ActionKind::prefetch, g, t, p, gap.first_backward, mechanism));
}

// Worth swapping: used in forward and in backward, with at least one step in between.
bool has_gap(ForwardBackwardGap gap) {
  return gap.last_forward >= 0 && gap.first_backward >= gap.last_forward + 2;
}

bool swappable_kind(TensorKind k) { return k == TensorKind::activation || k == TensorKind::input; }

BaselinePlan finish(std::string policy, std::vector<Action> actions, const TrainingGraph& g,
                    const std::vector<Lifetime>& life) {
  // Issue order: by the step they follow, then as generated (deterministic).
  std::stable_sort(actions.begin(), actions.end(),
                   [](const Action& a, const Action& b) { return a.after_step < b.after_step; });
  BaselinePlan plan{std::move(policy), std::move(actions), 0};
  for (int64_t b : resident_bytes(g, life, plan.actions))
    plan.resident_peak_bytes = std::max(plan.resident_peak_bytes, b);
  return plan;
}

}  // namespace

BaselinePlan baseline_vdnn(const TrainingGraph& g, const std::vector<Lifetime>& life,
                           const std::string& mechanism) {
  StepIndex backward = first_backward_step(g);
  std::vector<StepIndex> conv_grads;  // in order
  for (const Step& s : g.steps)
    if (s.op == "ConvGrad") conv_grads.push_back(s.id);

  std::vector<Action> actions;
  std::vector<char> done(g.tensors.size(), 0);
  for (const Step& s : g.steps) {
    if (s.phase != Phase::forward || s.op != "Conv" || s.inputs.empty()) continue;
    TensorId x = s.inputs[0];
    if (done[static_cast<size_t>(x)] || !swappable_kind(g.tensor(x).kind)) continue;
    done[static_cast<size_t>(x)] = 1;
    ForwardBackwardGap gap = gap_of(life[static_cast<size_t>(x)], backward);
    if (!has_gap(gap)) continue;
    // Issue the prefetch when the step before the previous convolution's gradient finishes:
    // the last ConvGrad before the first backward use (or, with none, at the start of backward).
    auto it = std::lower_bound(conv_grads.begin(), conv_grads.end(), gap.first_backward);
    StepIndex p = it == conv_grads.begin() ? backward - 1 : *(it - 1) - 1;
    p = std::clamp(p, gap.last_forward + 1, gap.first_backward - 1);
    swap_out_and_in(actions, g, x, gap, p, mechanism);
  }
  return finish("vdnn", std::move(actions), g, life);
}

BaselinePlan baseline_save_on_cpu(const TrainingGraph& g, const std::vector<Lifetime>& life,
                                  const std::string& mechanism) {
  StepIndex backward = first_backward_step(g);
  std::vector<Action> actions;
  for (const Tensor& t : g.tensors) {
    if (!swappable_kind(t.kind)) continue;
    ForwardBackwardGap gap = gap_of(life[static_cast<size_t>(t.id)], backward);
    if (!has_gap(gap)) continue;
    swap_out_and_in(actions, g, t.id, gap, gap.first_backward - 1, mechanism);
  }
  return finish("save_on_cpu", std::move(actions), g, life);
}

BaselinePlan baseline_checkpoint(const TrainingGraph& g, const std::vector<Lifetime>& life) {
  StepIndex backward = first_backward_step(g);
  std::vector<StepIndex> forward;
  for (const Step& s : g.steps)
    if (s.phase == Phase::forward) forward.push_back(s.id);
  const size_t m = forward.size();
  const size_t segments = std::max<size_t>(1, static_cast<size_t>(std::llround(std::sqrt(double(m)))));

  std::vector<size_t> discarded(g.tensors.size(), 0);  // 1 + the segment that discards it
  std::vector<Action> actions;
  auto candidate = [&](TensorId t) {
    return g.tensor(t).kind == TensorKind::activation &&
           gap_of(life[static_cast<size_t>(t)], backward).first_backward >= 0;
  };
  for (size_t j = 0; j < segments; ++j) {
    // Segment j: forward steps [begin, end); the outputs of its last step are kept.
    size_t begin = j * m / segments, end = (j + 1) * m / segments;
    if (end - begin < 2) continue;
    // All of the segment is recomputed before the first backward use of any candidate.
    StepIndex ready = -1;
    for (size_t k = begin; k + 1 < end; ++k)
      for (TensorId t : g.step(forward[k]).outputs)
        if (candidate(t)) {
          StepIndex u = gap_of(life[static_cast<size_t>(t)], backward).first_backward;
          ready = ready < 0 ? u : std::min(ready, u);
        }
    if (ready < 0) continue;
    for (size_t k = begin; k + 1 < end; ++k) {
      const Step& s = g.step(forward[k]);
      // Recomputing s at `ready` needs each input there: persistent, regenerated earlier in
      // this segment, or kept and alive at `ready`.
      bool inputs_ready = std::all_of(s.inputs.begin(), s.inputs.end(), [&](TensorId x) {
        const Lifetime& l = life[static_cast<size_t>(x)];
        if (l.persistent) return true;
        if (discarded[static_cast<size_t>(x)]) return discarded[static_cast<size_t>(x)] == j + 1;
        return l.first <= ready && ready <= l.last;
      });
      if (!inputs_ready) continue;
      for (TensorId t : s.outputs) {
        if (!candidate(t) || discarded[static_cast<size_t>(t)]) continue;
        StepIndex f = gap_of(life[static_cast<size_t>(t)], backward).last_forward;
        if (f + 2 > ready) continue;  // no step to free it for
        discarded[static_cast<size_t>(t)] = j + 1;
        actions.push_back(make(ActionKind::discard, g, t, f, f + 1));
        Action r = make(ActionKind::recompute, g, t, ready - 1, ready);
        r.source_step = s.id;
        actions.push_back(r);
      }
    }
  }
  return finish("checkpoint", std::move(actions), g, life);
}

bool step_time_calibrated(const std::string& policy, StepTimeSource source) {
  if (source.low_precision && !source.measured_steps) return false;
  return policy == "no_swap" || policy == "checkpoint";
}

}  // namespace autovm
