#include "driver/summary.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <set>

#include "emit/plan_json.h"
#include "plan/bound.h"
#include "util/size.h"

namespace autovm {
namespace {

std::string shape_text(const Shape& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

std::string ms(double us) { return fmt::format("{:.1f} ms", us / 1e3); }
std::string gb(double bytes) { return fmt::format("{:.2f} GB", bytes / 1e9); }

}  // namespace

std::string bound_explanation(const Plan& plan) {
  const StepTimeBound& b = *plan.bound_terms;
  const TrainingGraph& g = plan.training.graph;
  auto step_name = [&](StepIndex s) {
    return fmt::format("{} ({} {})", s, g.step(s).node.empty() ? g.step(s).op : g.step(s).node,
                       name(g.step(s).phase));
  };
  std::string out = fmt::format(
      "lower bound {} (compiler/plan/bound.h): compute C {}, forced stalls {}, C + the windows "
      "term {}\n",
      ms(b.bound_us), ms(b.compute_us), ms(b.forced_stall_us),
      ms(b.compute_us + b.window_stall_us));
  switch (b.set_by) {
    case BoundTerm::pair:
      out += fmt::format("  set by the {} of steps", b.sequence.size() > 2 ? "sequence" : "pair");
      for (size_t i = 0; i < b.sequence.size(); ++i)
        out += fmt::format("{}{}", i == 0 ? " " : i + 1 == b.sequence.size() ? " and " : ", ",
                           step_name(b.sequence[i]));
      out += "\n";
      break;
    case BoundTerm::step:
    case BoundTerm::whole_tensor:
      out += fmt::format("  set by {} at step {}\n",
                         b.set_by == BoundTerm::step ? "bound(s)" : "the whole-tensor term",
                         step_name(b.critical_step));
      break;
    case BoundTerm::windows: out += "  set by C + the windows term\n"; break;
    case BoundTerm::compute: out += "  set by C alone\n"; break;
  }
  if (b.steps.empty()) return out;
  std::vector<StepBoundTerms> by = b.steps;
  std::stable_sort(by.begin(), by.end(), [](const StepBoundTerms& x, const StepBoundTerms& y) {
    return x.bound_us > y.bound_us;
  });
  // The highest kShown, and the step with the most excess after them when it is not among them.
  constexpr size_t kShown = 12;
  auto most = std::max_element(by.begin(), by.end(), [](const auto& x, const auto& y) {
    return x.excess_bytes < y.excess_bytes;
  });
  size_t shown = std::min(by.size(), kShown);
  if (size_t(most - by.begin()) >= kShown) {
    std::rotate(by.begin() + kShown, most, most + 1);
    shown = kShown + 1;
  }
  out += fmt::format(
      "  bound(s) at {} of the {} steps where it is worked out, the highest first (and the step\n"
      "  with the most excess E); M is the moved bytes that give the least, Dep(M) the earliest\n"
      "  start of s, Rc(E - M) the least recompute of the rest, apart the part of it that cannot\n"
      "  run beside the transfers of the forced windows after s, Arr(M) the arrivals after s:\n",
      shown, by.size());
  out += fmt::format("  {:>6} {:>10} {:>10} {:>11} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>12}\n",
                     "step", "excess E", "off-able", "regenerable", "moved M", "Dep(M)",
                     "Rc(E-M)", "apart", "Arr(M)", "bound(s)", "whole tensor");
  for (size_t i = 0; i < shown; ++i) {
    const StepBoundTerms& t = by[i];
    out += fmt::format("  {:>6} {:>10} {:>10} {:>11} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>12}\n",
                       t.step, gb(t.excess_bytes), gb(t.off_able_bytes), gb(t.regenerable_bytes),
                       gb(t.moved_bytes), ms(t.departure_us), ms(t.recompute_us),
                       ms(t.recompute_apart_us), ms(t.arrival_us), ms(t.bound_us),
                       ms(t.whole_tensor_us));
  }
  return out;
}

std::string plan_summary(const Plan& plan) {
  const TrainingGraph& g = plan.training.graph;
  const MemoryTimeline& tl = plan.timeline;
  const PlanStatistics stats = compute_statistics(plan);
  std::string out;
  auto line = [&](std::string_view label, const std::string& text) {
    out += fmt::format("  {:<11}{}\n", label, text);
  };
  const ModelIdentity& m = plan.model;
  out += fmt::format("autovm-plan: {} (sha256 {}, IR {}, opset {}, {})\n", m.file,
                     m.sha256.substr(0, 12), m.ir_version, m.opset,
                     m.producer.empty() ? "unknown producer" : m.producer);
  // What the loss scores: classes for cross-entropy (per pixel too), else the loss's name.
  std::string scored = plan.options.loss == training::Loss::cross_entropy
                           ? fmt::format("{} classes", m.classes)
                           : fmt::format("loss {}", training::name(plan.options.loss));
  if (plan.training.outputs.size() > 1) scored += fmt::format(" ({} outputs)", plan.training.outputs.size());
  if (plan.options.autocast != training::Autocast::none)
    scored += fmt::format(", autocast {}", training::name(plan.options.autocast));
  line("input", fmt::format("{} {} {}, {}, optimizer {}", m.input_name, name(m.input_dtype),
                            shape_text(m.input_shape), scored, training::name(plan.options.optimizer)));
  line("parameters", fmt::format("{} elements, {}", stats.parameter_count,
                                 format_bytes(stats.bytes_by_kind[size_t(TensorKind::parameter)])));
  line("steps", fmt::format("{}: {} forward, {} loss, {} backward, {} optimizer; {:.3g} GFLOP",
                            g.step_count(), stats.steps_by_phase[0], stats.steps_by_phase[1],
                            stats.steps_by_phase[2], stats.steps_by_phase[3],
                            stats.total_flops / 1e9));
  std::string where = "";
  if (tl.peak_step < g.step_count()) {
    const Step& s = g.step(tl.peak_step);
    where = fmt::format(" at step {} ({} {}{})", s.id, name(s.phase), s.op,
                        s.node.empty() ? "" : " " + s.node);
  }
  line("peak", format_bytes(tl.peak_bytes) + where);
  std::string kinds;
  for (int k = 0; k < kTensorKindCount; ++k) {
    int64_t b = tl.peak_by_kind[static_cast<size_t>(k)];
    if (b > 0) kinds += fmt::format("{}{} {}", kinds.empty() ? "" : ", ", name(TensorKind(k)), format_bytes_short(b));
  }
  line("", kinds);
  out += "  largest tensors live at the peak:\n";
  for (size_t i = 0; i < tl.peak_tensors.size() && i < 5; ++i) {
    const Tensor& t = g.tensor(tl.peak_tensors[i]);
    out += fmt::format("    {:>10}  {:<16} {}\n", format_bytes_short(t.bytes), name(t.kind), t.name);
  }
  double ratio = tl.peak_bytes > 0 ? double(plan.arena.size) / double(tl.peak_bytes) : 1.0;
  line("arena", fmt::format("{}, {:.3f}x the peak of live bytes (the bound no layout beats)",
                            format_bytes(plan.arena.size), ratio));
  int64_t budget = plan.options.budget_bytes;
  bool limited = budget < std::numeric_limits<int64_t>::max();
  if (!limited)
    line("budget", "none (--budget SIZE plans swapping for a smaller GPU)");
  else if (tl.peak_bytes <= budget)
    line("budget", fmt::format("{}: fits without swapping, {} to spare", format_bytes(budget),
                               format_bytes_short(budget - tl.peak_bytes)));
  else
    line("budget", fmt::format("{}: the peak is {} over it; swap plan below", format_bytes(budget),
                               format_bytes_short(tl.peak_bytes - budget)));
  if (plan.pytorch_memory) {
    const PytorchMemoryEstimate& pt = *plan.pytorch_memory;
    line("pytorch", fmt::format("PyTorch peak (predicted): {} in {} at {}", format_bytes(pt.peak_bytes),
                                pt.peak_phase, pt.peak_at));
    line("", fmt::format("torch.cuda.max_memory_allocated of plain PyTorch; {} held, {} saved by "
                         "autograd, {} parameter gradients",
                         format_bytes_short(pt.persistent_bytes + pt.batch_bytes),
                         format_bytes_short(pt.saved_bytes), format_bytes_short(pt.gradient_bytes)));
    if (limited)
      line("", pt.peak_bytes <= budget
                   ? fmt::format("plain PyTorch fits the budget, {} to spare (allocated; the caching "
                                 "allocator reserves more)",
                                 format_bytes_short(budget - pt.peak_bytes))
                   : fmt::format("plain PyTorch does not fit the budget: {} over",
                                 format_bytes_short(pt.peak_bytes - budget)));
  }
  if (!plan.compute_us.empty()) {
    const Prediction& p = plan.prediction;
    line("device", fmt::format("{}, mechanism {}", plan.device, plan.mechanism));
    if (!plan.actions.empty()) {
      int counts[6] = {0, 0, 0, 0, 0, 0};
      int64_t remote_bytes = 0;
      std::set<StepIndex> remote_steps;
      for (const Action& a : plan.actions) {
        counts[static_cast<int>(a.kind)]++;
        if (a.kind != ActionKind::read_remote) continue;
        remote_bytes += a.bytes;
        remote_steps.insert(a.ready_before_step);
      }
      line("actions", fmt::format("{} evict, {} prefetch, {} discard, {} recompute; resident "
                                  "peak {}",
                                  counts[1], counts[0], counts[2], counts[3],
                                  format_bytes_short(p.resident_peak_bytes)));
      line("moved", fmt::format("{} to host, {} to device", format_bytes_short(p.bytes_to_host),
                                format_bytes_short(p.bytes_to_device)));
      if (counts[static_cast<int>(ActionKind::read_remote)] > 0)
        line("remote", fmt::format("{} read over the link by {} steps whose working set exceeds "
                                   "the budget ({} of their compute; docs/execution-model.md, "
                                   "\"Remote reads\")",
                                   format_bytes_short(remote_bytes), remote_steps.size(),
                                   ms(plan.remote_read_us)));
    }
    line("step time", fmt::format("{} predicted (compute {}, stall {}, recompute {})",
                                  ms(p.step_time_us), ms(p.compute_us), ms(p.stall_us),
                                  ms(p.recompute_us)));
    line("", fmt::format("{:.2f}x no-swap ({}), {:.2f}x the lower bound ({})",
                         p.step_time_us / plan.no_swap_step_time_us, ms(plan.no_swap_step_time_us),
                         p.step_time_us / plan.bound_us, ms(plan.bound_us)));
    int cut = 0;
    int64_t cut_bytes = 0, cut_measured_bytes = 0;
    for (const auto& mw : plan.training.measured_workspaces) {
      if (!mw.cut) continue;
      ++cut;
      cut_bytes += plan.training.graph.tensor(mw.tensor).bytes;
      cut_measured_bytes += mw.measured_bytes;
    }
    if (cut > 0) {
      line("", fmt::format("{} convolution workspace(s) cut to fit the budget ({} of {} measured):",
                           cut, format_bytes_short(cut_bytes),
                           format_bytes_short(cut_measured_bytes)));
      line("", "cuDNN runs slower algorithms there, which this time does not count "
               "(docs/conv-workspaces.md)");
    }
    if (plan.options.autocast != training::Autocast::none && plan.options.step_times_file.empty())
    {
      line("", fmt::format("under autocast {} the cost model is not calibrated to 1.5x "
                           "(docs/baselines.md);", training::name(plan.options.autocast)));
      line("", "--step-times replaces it with measured step times");
    }
    // A baseline's step time only where its model was checked against measurement (baselines.h).
    for (const Prediction& b : plan.baselines)
      line("baseline",
           !b.fits        ? fmt::format("{:<14} does not fit (resident peak {})", b.policy,
                                        format_bytes_short(b.resident_peak_bytes))
           : b.calibrated ? fmt::format("{:<14} {} ({:.2f}x autovm)", b.policy,
                                        ms(b.step_time_us), b.step_time_us / p.step_time_us)
                          : fmt::format("{:<14} fits (resident peak {}); its step time is not "
                                        "modelled to 1.5x (docs/baselines.md)",
                                        b.policy, format_bytes_short(b.resident_peak_bytes)));
  }
  if (plan.training.looks_like_inference_export) line("note", plan.training.inference_hint);
  return out;
}

}  // namespace autovm
