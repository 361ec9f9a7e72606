#include "driver/pipeline.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <future>
#include <limits>
#include <optional>

#include "analysis/arena.h"
#include "analysis/lifetimes.h"
#include "analysis/step_reserve.h"
#include "analysis/timeline.h"
#include "model/model.h"
#include "model/shape_inference.h"
#include "plan/ban_search.h"
#include "plan/baselines.h"
#include "plan/bound.h"
#include "plan/cost_model.h"
#include "plan/device_profile.h"
#include "plan/gap_split.h"
#include "plan/gaps.h"
#include "plan/action_order.h"
#include "plan/passes/advance_evictions.h"
#include "plan/passes/delay_transfers.h"
#include "plan/passes/drop_unread_regenerations.h"
#include "plan/passes/postpone_for_evictions.h"
#include "plan/passes/regenerate_moved.h"
#include "plan/simulator.h"
#include "plan/swap_planner.h"
#include "util/error.h"
#include "util/parallel.h"
#include "util/pass_timer.h"

namespace autovm {
namespace {

// Graphs with at least this many tensors lay out their arena on a second thread (pipeline).
constexpr size_t kLayoutBesideTensors = 20000;

int64_t max_of(const std::vector<int64_t>& v) {
  int64_t m = 0;
  for (int64_t x : v) m = std::max(m, x);
  return m;
}

Prediction predict(const std::string& policy, const SimResult& sim, int64_t resident_peak,
                   int64_t budget) {
  Prediction p;
  p.policy = policy;
  p.fits = resident_peak <= budget;
  p.step_time_us = sim.step_time_us;
  p.compute_us = sim.compute_us;
  p.stall_us = sim.stall_us;
  p.recompute_us = sim.recompute_us;
  p.bytes_to_host = sim.bytes_to_host;
  p.bytes_to_device = sim.bytes_to_device;
  p.resident_peak_bytes = resident_peak;
  return p;
}

// Swap planning under the budget, its prediction, the bound and the baselines.
void plan_under_budget(Plan& plan) {
  const TrainingGraph& g = plan.training.graph;
  PassTimer timer;  // its parts, with AUTOVM_TIMINGS
  DeviceProfile device = load_device_profile(plan.options.device);
  const Mechanism& mech = device.mechanism(
      plan.options.mechanism.empty() ? device.default_mechanism : plan.options.mechanism);
  plan.device = device.name;
  plan.mechanism = mech.name;
  plan.compute_us = predict_step_times(g, device);
  if (!plan.options.step_times_file.empty())
    apply_measured_step_times(plan.options.step_times_file, g, plan.compute_us);
  if (plan.options.minimum_budget)
    plan.options.budget_bytes = max_of(unavoidable_bytes(g, plan.lifetimes, plan.options.movable));
  int64_t budget = plan.options.budget_bytes;
  bool swaps = plan.timeline.peak_bytes > budget;
  SimResult sim;
  // The bound depends on none of the choices below: when there are any to make, it is worked
  // out on another thread beside them (the gap-split gate and the prediction wait for it).
  auto work_out_bound = [&] {
    return lower_bound(g, plan.lifetimes, plan.timeline.total, plan.compute_us, budget, mech,
                       plan.options.movable, plan.options.allow_recompute,
                       plan.options.recompute_ops, plan.options.explain_bound);
  };
  std::future<StepTimeBound> bound_future = swaps ? async_or_deferred(work_out_bound)
                                                  : std::async(std::launch::deferred, work_out_bound);
  std::optional<StepTimeBound> bound;
  auto bound_now = [&]() -> const StepTimeBound& {
    if (!bound) bound = bound_future.get();
    return *bound;
  };
  if (swaps) {
    // Strategies, judged by the simulator: moving tensors; moving with single-step
    // recomputation; and that on top of segment recomputation (checkpointing), which wins where
    // the link is slow against the compute. Ties keep the earlier one.
    SwapOptions so;
    so.budget_bytes = budget;
    so.allow_recompute = plan.options.allow_recompute;
    so.recompute_ops = plan.options.recompute_ops;
    so.movable = plan.options.movable;
    // delay_transfers (swap_planner.h) on the kTop fastest candidates, for graphs of up to
    // kDelaySteps steps, with at most kDelayWork simulated steps and actions per candidate:
    // ResNet-152 at --budget min takes about 0.1 s more (2026-11-30).
    constexpr StepIndex kDelaySteps = 4000;
    constexpr int kDelaySimulations = 400;
    constexpr int64_t kDelayWork = 200000;  // simulated steps and actions per candidate
    // The strategies to try, in order (planned below on planning_threads() threads).
    std::vector<SwapStrategy> strategies;
    std::vector<Action> checkpoint;
    // Each plan with recomputation is tried twice: chain temporaries counted in the moment
    // before their step, as the execution model has it, and on top of the step
    // (SwapOptions::temporaries_beside_step), which no model wins with everywhere.
    auto attempt = [&](const std::vector<Action>& base, bool recompute) {
      SwapOptions with = so;
      with.allow_recompute = recompute;
      strategies.push_back({with, base});
      if (!recompute) return;
      with.temporaries_beside_step = true;
      strategies.push_back({with, base});
    };
    // Moving tensors alone always finds a plan for a feasible budget; recomputation pins inputs
    // where it runs, which can leave a step with nothing left to move.
    attempt({}, false);
    bool with_checkpoint = false;
    if (plan.options.allow_recompute) {
      attempt({}, true);
      // Checkpointing's segments, as base actions, only where the options allow every one.
      checkpoint = baseline_checkpoint(g, plan.lifetimes).actions;
      with_checkpoint = std::all_of(checkpoint.begin(), checkpoint.end(), [&](const Action& a) {
        return so.movable.has(g.tensor(a.tensor).kind) &&
               (a.kind != ActionKind::recompute || may_rerun(g.step(a.source_step), so.recompute_ops));
      });
      if (with_checkpoint) attempt(checkpoint, true);
    }
    // Other selection strategies (swap_planner.h) for small step counts, where each plan takes
    // well under a millisecond: the greedy selection is myopic, and which order and link weight
    // do best differs by model and budget (on h200-pcie: the earliest step first for VGG-19 at
    // batch 64 and 75 %, the latest first at 50 %, no link weight at batch 128, the latest first
    // with no link weight at batch 256). On larger graphs (ResNet-50 and up, 500+ steps) they
    // cost 20-100 ms each and won nothing in the swap table (2026-11-30).
    constexpr StepIndex kStrategySteps = 400;
    constexpr int kBanPlans = 200;
    if (g.step_count() <= kStrategySteps) {
      const std::pair<SelectOrder, double> orders[] = {
          {SelectOrder::most_over, 0.0}, {SelectOrder::earliest, 0.1},
          {SelectOrder::earliest, 0.0},  {SelectOrder::latest, 0.1},
          {SelectOrder::latest, 0.0}};
      for (auto [order, weight] : orders) {
        so.order = order;
        so.link_weight = weight;
        attempt({}, plan.options.allow_recompute);
        if (with_checkpoint) attempt(checkpoint, true);
      }
    }
    // Each strategy's plan, or the infeasible error that stopped it (pinned inputs can leave a
    // step nothing to move); the candidates keep the strategies' order.
    std::vector<std::vector<Action>> plans(strategies.size());
    std::vector<std::optional<Error>> infeasible(strategies.size());
    for_each_index(strategies.size(), planning_threads(), [&](size_t i) {
      try {
        plans[i] = plan_swaps(g, plan.lifetimes, plan.compute_us, mech, strategies[i].options,
                              strategies[i].base);
      } catch (const Error& e) {
        if (e.kind() != ErrorKind::infeasible) throw;
        infeasible[i] = e;
      }
    });
    std::vector<std::vector<Action>> candidates;
    std::vector<SwapStrategy> strategy_of;  // of each candidate, for the ban search below
    std::optional<Error> failure;
    for (size_t i = 0; i < strategies.size(); ++i) {
      if (infeasible[i]) {
        if (!failure) failure = infeasible[i];
        continue;
      }
      candidates.push_back(std::move(plans[i]));
      strategy_of.push_back(std::move(strategies[i]));
    }
    if (candidates.empty()) throw *failure;
    timer.done("  swap candidates");
    // The ban search (plan/ban_search.h) on the same small graphs: at most kBanPlans plans,
    // 0.03-0.1 s more for VGG-19 on the shared 2-core machine (2026-11-30).
    if (g.step_count() <= kStrategySteps) {
      ban_search(g, plan.lifetimes, plan.compute_us, mech, device, candidates, strategy_of, kBanPlans);
      timer.done("  ban search");
    }
    // The lifetimes each candidate was planned with: the true ones, or a gap split's.
    std::vector<const std::vector<Lifetime>*> life_of(candidates.size(), &plan.lifetimes);
    double fastest = std::numeric_limits<double>::infinity();  // simulated, when it was
    if (g.step_count() <= kDelaySteps && candidates.size() > 1) {
      std::vector<std::pair<double, size_t>> times;
      for (size_t i = 0; i < candidates.size(); ++i)
        times.emplace_back(simulate(g, candidates[i], plan.compute_us, mech, device).step_time_us, i);
      std::stable_sort(times.begin(), times.end(),
                       [](const auto& x, const auto& y) { return x.first < y.first; });
      // The passes below reorder the candidates: the fourth fastest before them was the
      // fastest after them for MobileNet-v2 b128 at 75 % on rtx3070-8gb (213.0 ms against
      // 219.5 with two kept, 2026-12-01).
      constexpr size_t kTop = 4;
      std::vector<std::vector<Action>> top;
      for (size_t k = 0; k < kTop && k < times.size(); ++k) top.push_back(std::move(candidates[times[k].second]));
      candidates.swap(top);
      life_of.resize(candidates.size());
      fastest = times.front().first;
    }
    // Gap splits (plan/gap_split.h): the plan each level of the search kept joins the
    // candidates with the lifetimes it was planned with (the passes below use them). On graphs
    // of up to kStrategySteps steps every feasible step of the six largest activations, three
    // levels (VGG-19 b256 --budget min: 0.14 -> 0.24 s on the 2-core machine, 2026-11-30). On
    // larger ones, where a plan takes tens of milliseconds, up to kDelaySteps steps and only
    // when the fastest candidate is more than kSplitGate times the bound: about kSplitCoarse
    // steps of the largest activation, one level (DenseNet-121 b128 30 %: 0.18 -> 0.6-0.8 s);
    // and on graphs of up to kWideSplitSteps steps also about kSplitCoarse steps of each of the
    // kWideSplitTensors largest, kWideSplitLevels levels. The narrow search's plans stay
    // candidates beside the wide one's, so that no plan is slower than without it: the
    // landscape is not smooth, and a wider level can keep a split the passes do less with.
    // (ResNet-50 b256 at 4.245 GB with PyTorch's memory, h200-pcie: 218.3 -> 206.4 ms, planning
    // 0.08-0.15 -> 0.90-1.12 s on the 2-core machine; 20 or 30 tensors, or 6 levels, found
    // nothing faster, and 20 tensors over 4 levels of 4 steps 204.0 ms in 1.6 s, 2026-12-01.)
    constexpr size_t kSplitCoarse = 6;
    constexpr double kSplitGate = 1.10;
    constexpr StepIndex kWideSplitSteps = 600;
    constexpr size_t kWideSplitTensors = 12;
    constexpr size_t kWideSplitLevels = 3;
    std::vector<SplitPlan> split_plans;
    bool split = plan.options.allow_recompute && g.step_count() <= kStrategySteps;
    if (plan.options.allow_recompute && !split && g.step_count() <= kDelaySteps) {
      if (std::isinf(fastest))  // one candidate: not simulated above
        fastest = simulate(g, candidates.front(), plan.compute_us, mech, device).step_time_us;
      split = fastest > kSplitGate * bound_now().bound_us;
    }
    if (split) {
      SwapOptions with;
      with.budget_bytes = budget;
      with.movable = so.movable;
      with.recompute_ops = so.recompute_ops;
      std::vector<SplitSearch> searches(1);
      if (g.step_count() > kStrategySteps) {
        searches[0].max_tensors = 1;
        searches[0].coarse = kSplitCoarse;
        searches[0].levels = 1;
        if (g.step_count() <= kWideSplitSteps) {
          SplitSearch wide;
          wide.max_tensors = kWideSplitTensors;
          wide.coarse = kSplitCoarse;
          wide.levels = kWideSplitLevels;
          searches.push_back(wide);
        }
      }
      // Both ways of counting chain temporaries (SwapOptions::temporaries_beside_step): in this
      // session's trials on h200-pcie (2026-12-01) the stricter one split VGG-19 better at its
      // least budgets, the model's own at batch 64 and 50 %.
      for (bool beside : {false, true}) {
        with.temporaries_beside_step = beside;
        const size_t first = split_plans.size();  // this way of counting's plans start here
        for (const SplitSearch& search : searches)
          for (SplitPlan& sp : search_gap_splits(g, plan.lifetimes, plan.compute_us, mech, device, with, search))
            if (std::none_of(split_plans.begin() + std::ptrdiff_t(first), split_plans.end(),
                             [&](const SplitPlan& kept) { return kept.splits == sp.splits; }))
              split_plans.push_back(std::move(sp));
      }
      for (SplitPlan& sp : split_plans) {
        candidates.push_back(std::move(sp.actions));
        life_of.push_back(&sp.life);
      }
      timer.done("  gap splits");
    }
    // A split plan's regeneration at its split step may be read by nothing (swap_planner.h):
    // dropped before the passes, so that they may use the room, and the candidate judged on
    // the true lifetimes from there (the plan is valid under them: only a split use is gone).
    for (size_t i = 0; i < candidates.size(); ++i)
      if (life_of[i] != &plan.lifetimes && drop_unread_regenerations(g, plan.lifetimes, candidates[i]) > 0)
        life_of[i] = &plan.lifetimes;
    // The passes below, on each candidate at once (each changes its own candidate only).
    if (g.step_count() <= kDelaySteps)
      for_each_index(candidates.size(), planning_threads(), [&](size_t i) {
        std::vector<Action>& c = candidates[i];
        const std::vector<Lifetime>& life = *life_of[i];
        // Each simulation costs about steps + actions: bound the pass's work.
        int64_t size = g.step_count() + int64_t(c.size());
        int sims = int(std::min<int64_t>(kDelaySimulations, kDelayWork / std::max<int64_t>(size, 1)));
        delay_transfers(g, plan.compute_us, mech, device, c, sims);
        double t = postpone_for_evictions(g, life, plan.compute_us, mech, device, budget, c, sims);
        // regenerate_moved (swap_planner.h), then the two passes again on what it changed;
        // then once more with chains at up to kEarlierSteps steps before a prefetch's deadline,
        // kept when faster (run on its own from the start, it made DenseNet-121 b128 at 30 % and
        // ResNet-152 b128 at 8 GB on rtx3070-8gb slower: it spends the simulations elsewhere).
        constexpr StepIndex kEarlierSteps = 12;
        if (plan.options.allow_recompute) {
          auto regenerate = [&](std::vector<Action>& a, StepIndex earlier) {
            return regenerate_moved(g, life, plan.compute_us, mech, device, budget,
                                    plan.options.movable, plan.options.recompute_ops, a, sims,
                                    earlier);
          };
          auto settle = [&](std::vector<Action>& a) {
            delay_transfers(g, plan.compute_us, mech, device, a, sims);
            return postpone_for_evictions(g, life, plan.compute_us, mech, device, budget, a, sims);
          };
          if (regenerate(c, 0) < t) t = settle(c);
          std::vector<Action> earlier = c;
          if (regenerate(earlier, kEarlierSteps) < t && settle(earlier) < t) c = std::move(earlier);
        }
        // Last, evictions issued as early as their queue's order allows (swap_planner.h):
        // delay_transfers and postpone_for_evictions leave some later than they need.
        advance_evictions(g, life, plan.compute_us, mech, device, c, sims);
      });
    timer.done("  passes");
    double best = 0;
    for (auto& c : candidates) {
      keep_transfers_off_recompute_reads(g, c);  // already so, unless a pass left it
      SimResult r = simulate(g, c, plan.compute_us, mech, device);
      if (plan.actions.empty() || r.step_time_us < best) {
        best = r.step_time_us;
        plan.actions = std::move(c);
        sim = std::move(r);
      }
    }
  } else {
    sim = simulate(g, plan.actions, plan.compute_us, mech, device);
  }
  for (size_t i = 0; i < plan.actions.size(); ++i) {
    plan.actions[i].issue_us = sim.issue_us[i];
    plan.actions[i].ready_us = sim.ready_us[i];
  }
  plan.start_us = sim.start_us;
  plan.end_us = sim.end_us;
  plan.stall_us = sim.stall_before_us;
  plan.prediction = predict("autovm", sim, max_of(resident_bytes(g, plan.lifetimes, plan.actions)), budget);
  SimResult resident = simulate(g, {}, plan.compute_us, mech, device);
  plan.no_swap_step_time_us = resident.step_time_us;
  const StepTimeBound& lower = bound_now();
  plan.bound_us = lower.bound_us;
  plan.bound_critical_step = lower.critical_step;
  plan.bound_must_move_bytes = lower.must_move_bytes;
  if (plan.options.explain_bound) plan.bound_terms = std::make_shared<StepTimeBound>(lower);
  timer.done("  prediction and bound");
  if (!swaps) return;
  plan.baselines.push_back(predict("no_swap", resident, plan.timeline.peak_bytes, budget));
  plan.baselines.push_back(predict(
      "demand_paging",
      simulate_demand_paging(g, plan.lifetimes, plan.compute_us, budget, device),
      std::min(plan.timeline.peak_bytes, budget), budget));
  for (const BaselinePlan& b : {baseline_vdnn(g, plan.lifetimes, mech.name),
                                baseline_save_on_cpu(g, plan.lifetimes, mech.name),
                                baseline_checkpoint(g, plan.lifetimes)})
    plan.baselines.push_back(predict(b.policy, simulate(g, b.actions, plan.compute_us, mech, device),
                                     b.resident_peak_bytes, budget));
  timer.done("  baselines");
}

}  // namespace

namespace {
Plan plan_model(model::Model& m, const PlanOptions& options, bool shapes_known);
}  // namespace

Plan make_plan(const std::string& model_path, const PlanOptions& options) {
  model::Model m;
  return make_plan_keeping_model(model_path, options, m);
}

Plan make_plan_keeping_model(const std::string& model_path, const PlanOptions& options,
                             model::Model& model) {
  PassTimer timer;
  model = model::load_model(model_path);
  timer.done("load_model");
  return plan_model(model, options, false);
}

Plan make_plan(model::Model m, const PlanOptions& options, bool shapes_known) {
  return plan_model(m, options, shapes_known);
}

namespace {

Plan plan_model(model::Model& m, const PlanOptions& options, bool shapes_known) {
  const std::string& model_path = m.path;
  PassTimer timer;
  model::check_supported_ops(m);
  if (m.inputs.empty())
    throw Error(ErrorKind::invalid_model,
                fmt::format("'{}' has no graph input that is not an initializer", model_path));
  const model::Value& input = m.values[static_cast<size_t>(m.inputs[0])];
  int64_t batch = options.batch;
  if (batch == 0) {
    if (input.declared_shape.empty() || input.declared_shape[0] <= 0)
      throw Error(ErrorKind::usage,
                  fmt::format("the batch dimension of input '{}' is symbolic; choose one with "
                              "--batch N",
                              input.name));
    batch = input.declared_shape[0];
  }
  if (!shapes_known) model::infer_shapes(m, batch);
  timer.done("infer_shapes");

  Plan plan;
  plan.options = options;
  plan.options.batch = batch;
  training::TrainingOptions topts;
  topts.optimizer = options.optimizer;
  topts.conv_workspace_limit = options.conv_workspace_limit;
  topts.data_parallel = options.data_parallel;
  topts.pool_indices = options.pool_indices;
  plan.training = training::build_training_step(m, topts);
  timer.done("build_training_step");
  if (!options.reserve_file.empty()) {
    apply_step_reserve(options.reserve_file, plan.training.graph);
    timer.done("apply_step_reserve");
  }
  plan.lifetimes = compute_lifetimes(plan.training.graph);
  timer.done("compute_lifetimes");
  // The arena's layout depends on the lifetimes only, and nothing until the plan is written
  // reads it: on a large graph it is computed on a second core beside the timeline and the swap
  // planning (same result: the layout is a pure function of its inputs).
  const bool large = plan.training.graph.tensors.size() >= kLayoutBesideTensors;
  auto lay_out = [&plan, alignment = options.alignment] {
    return layout_arena(plan.training.graph, plan.lifetimes, alignment);
  };
  std::future<ArenaLayout> arena = large ? async_or_deferred(lay_out)
                                         : std::async(std::launch::deferred, lay_out);
  plan.timeline = compute_timeline(plan.training.graph, plan.lifetimes);
  timer.done("compute_timeline");
  plan_under_budget(plan);
  timer.done("plan_under_budget");
  plan.arena = arena.get();
  timer.done("layout_arena (waited)");

  ModelIdentity& id = plan.model;
  auto slash = model_path.find_last_of('/');
  id.file = slash == std::string::npos ? model_path : model_path.substr(slash + 1);
  id.sha256 = m.sha256;
  id.file_bytes = m.file_bytes;
  id.ir_version = m.ir_version;
  id.opset = m.opset;
  id.producer = m.producer;
  const model::Value& in = m.values[static_cast<size_t>(m.inputs[0])];
  id.input_name = in.name;
  id.input_shape = in.shape;
  id.input_dtype = in.dtype;
  id.batch = batch;
  id.classes = plan.training.logits_shape[1];
  return plan;
}

}  // namespace

}  // namespace autovm
