#include "driver/pipeline.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cassert>
#include <cmath>
#include <future>
#include <limits>
#include <optional>

#include "analysis/arena.h"
#include "analysis/lifetimes.h"
#include "analysis/step_reserve.h"
#include "analysis/timeline.h"
#include "model/fusion/fusion.h"
#include "model/model.h"
#include "model/shape_inference.h"
#include "plan/action_order.h"
#include "plan/baselines.h"
#include "plan/bound.h"
#include "plan/cost_model.h"
#include "plan/device_profile.h"
#include "plan/gaps.h"
#include "plan/remote_reads.h"
#include "plan/search.h"
#include "plan/simulator.h"
#include "plan/workspace_fit.h"
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
                   int64_t budget, StepTimeSource source = {}) {
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
  p.calibrated = policy == "autovm" || step_time_calibrated(policy, source);
  return p;
}

// check_budget_feasible (plan/gaps.h) for a plan without remote reads, its message saying
// how remote reads would go below that budget.
void check_working_sets_fit(const TrainingGraph& g, const std::vector<Lifetime>& life, int64_t budget,
                            const PlanOptions& options, const DeviceProfile& device,
                            const Mechanism& mech) {
  try {
    check_budget_feasible(g, life, budget, options.movable);
  } catch (const Error& e) {
    std::vector<std::string> readers;
    for (const Mechanism& m : device.mechanisms)
      if (m.reads_remotely()) readers.push_back(m.name);
    std::string hint;
    if (!options.remote_reads)
      hint = "; remote reads are off (--no-remote-reads), so every step keeps its whole working "
             "set resident";
    else if (!readers.empty())
      hint = fmt::format("; mechanism '{}' cannot read host memory remotely: with --mechanism "
                         "{}, steps may read some inputs from host memory below it",
                         mech.name, fmt::join(readers, "|"));
    throw Error(e.kind(), e.what() + hint);
  }
}

// Swap planning under the budget (plan/search.h), its prediction, the bound and the
// baselines.
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
  // Steps may read remotely where their working set exceeds the budget (plan/remote_reads.h),
  // when the mechanism can and the options allow it.
  const bool remote = plan.options.remote_reads && mech.reads_remotely();
  if (plan.options.minimum_budget)
    plan.options.budget_bytes =
        max_of(remote ? remote_floor_bytes(g, plan.lifetimes, plan.options.movable)
                      : unavoidable_bytes(g, plan.lifetimes, plan.options.movable));
  int64_t budget = plan.options.budget_bytes;
  bool swaps = plan.timeline.peak_bytes > budget;
  if (!remote && swaps) check_working_sets_fit(g, plan.lifetimes, budget, plan.options, device, mech);
  const RemoteReadChoice remote_reads =
      remote && swaps ? choose_remote_reads(g, plan.lifetimes, budget, plan.options.movable, mech)
                      : RemoteReadChoice{};
  // What the search, the simulator and the bound plan with: the lifetimes with the remote
  // reads' uses out, and each step's time with its remote reads in.
  const std::vector<Lifetime>& life = remote_reads.empty() ? plan.lifetimes : remote_reads.planning_life;
  std::vector<double> step_us = plan.compute_us;
  if (!remote_reads.empty())
    for (size_t s = 0; s < step_us.size(); ++s) {
      step_us[s] += remote_reads.extra_us[s];
      plan.remote_read_us += remote_reads.extra_us[s];
    }
  SimResult sim;
  // The bound depends on none of the choices below: when there are any to make, it is worked
  // out on another thread beside them (the gap-split gate and the prediction wait for it).
  auto work_out_bound = [&] {
    return lower_bound(g, life, plan.timeline.total, step_us, budget, mech,
                       plan.options.movable.relaxed(), plan.options.allow_recompute,
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
    const SearchProblem problem{.graph = g,
                                .life = life,
                                .compute_us = step_us,
                                .mechanism = mech,
                                .device = device,
                                .budget_bytes = budget,
                                .allow_recompute = plan.options.allow_recompute,
                                .recompute_ops = plan.options.recompute_ops,
                                .movable = plan.options.movable};
    SearchResult found = search_plan(problem, [&] { return bound_now().bound_us; }, timer);
    plan.actions = std::move(found.actions);
    sim = std::move(found.sim);
  } else {
    sim = simulate(g, plan.actions, plan.compute_us, mech, device);
  }
  for (size_t i = 0; i < plan.actions.size(); ++i) {
    plan.actions[i].issue_us = sim.issue_us[i];
    plan.actions[i].ready_us = sim.ready_us[i];
  }
  if (!remote_reads.empty()) {  // their time is in their steps' (step_us): the sim holds it
    for (Action& a : remote_read_actions(g, remote_reads, mech)) {
      a.issue_us = sim.start_us[size_t(a.ready_before_step)];
      a.ready_us = sim.end_us[size_t(a.ready_before_step)];
      plan.actions.push_back(std::move(a));
    }
    sort_actions(plan.actions);
    assert(remote_reads_off(g, plan.lifetimes, plan.actions));
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
  const StepTimeSource source{plan.options.autocast != training::Autocast::none,
                              !plan.options.step_times_file.empty()};
  plan.baselines.push_back(predict("no_swap", resident, plan.timeline.peak_bytes, budget, source));
  plan.baselines.push_back(predict(
      "demand_paging",
      simulate_demand_paging(g, plan.lifetimes, plan.compute_us, budget, device),
      std::min(plan.timeline.peak_bytes, budget), budget, source));
  for (const BaselinePlan& b : {baseline_vdnn(g, plan.lifetimes, mech.name),
                                baseline_save_on_cpu(g, plan.lifetimes, mech.name),
                                baseline_checkpoint(g, plan.lifetimes)})
    plan.baselines.push_back(predict(b.policy, simulate(g, b.actions, plan.compute_us, mech, device),
                                     b.resident_peak_bytes, budget, source));
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
  model::fuse_kernels(m);
  timer.done("fuse_kernels");

  Plan plan;
  plan.options = options;
  plan.options.batch = batch;
  training::TrainingOptions topts;
  topts.optimizer = options.optimizer;
  topts.conv_workspace_limit = options.conv_workspace_limit;
  if (!options.conv_workspaces_file.empty())
    topts.conv_workspaces = training::ConvWorkspaceTable::load(options.conv_workspaces_file);
  topts.data_parallel = options.data_parallel;
  topts.pool_indices = options.pool_indices;
  topts.loss = options.loss;
  topts.autocast = options.autocast;
  plan.training = training::build_training_step(m, topts);
  timer.done("build_training_step");
  if (!options.reserve_file.empty()) {
    apply_step_reserve(options.reserve_file, plan.training.graph);
    timer.done("apply_step_reserve");
  }
  plan.lifetimes = compute_lifetimes(plan.training.graph);
  timer.done("compute_lifetimes");
  if (!options.minimum_budget && !options.workspaces_as_measured && options.budget_bytes > 0 &&
      options.budget_bytes < std::numeric_limits<int64_t>::max())
    fit_measured_workspaces(plan.training, plan.lifetimes, options.budget_bytes, options.movable);
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
