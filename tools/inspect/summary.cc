// autovm-inspect summary: the plan on one screen.
#include <fmt/format.h>

#include <algorithm>
#include <array>

#include "commands.h"
#include "common.h"
#include "residency.h"

namespace inspect {
namespace {

constexpr size_t kLargest = 10;

std::string plural(int64_t n, const char* one, const char* many) {
  return fmt::format("{} {}", n, n == 1 ? one : many);
}

std::string ratio(double value, std::optional<double> against, const char* what) {
  if (!against || *against <= 0) return fmt::format("{} not predicted", what);
  return fmt::format("{:.2f}x {} ({})", value / *against, what, format_us(*against));
}

std::string off_text(const Plan& p, const OffInterval& iv) {
  auto kind = [&](int64_t i) { return std::string(name(p.actions[static_cast<size_t>(i)].kind)); };
  return fmt::format("[{}, {}] {}/{}", iv.from, iv.through,
                     iv.off_action < 0 ? "host" : kind(iv.off_action),
                     iv.on_action < 0 ? "end" : kind(iv.on_action));
}

// Remote reads: bytes the steps read from host memory over the link, at no resident cost.
void print_remote_reads(const Analysis& a) {
  int64_t total = 0, most = 0;
  StepIndex steps = 0, most_at = 0;
  for (size_t s = 0; s < a.remote_read_bytes.size(); ++s) {
    const int64_t b = a.remote_read_bytes[s];
    total += b;
    steps += b > 0;
    if (b > most) {
      most = b;
      most_at = static_cast<StepIndex>(s);
    }
  }
  if (steps == 0) return;
  std::string where = steps == 1 ? fmt::format("step {}", most_at)
                                 : fmt::format("{} steps (the most, {}, at step {})", steps,
                                               format_bytes(most), most_at);
  fmt::print("{:<10} {} read over the link at {}; not resident there\n", "remote",
             format_bytes(total), where);
}

void print_time(const Plan& p) {
  if (!p.prediction || !p.prediction->step_time_us) {
    fmt::print("{:<10} not predicted (the plan has no statistics.prediction)\n", "time");
    return;
  }
  const Prediction& pr = *p.prediction;
  double t = *pr.step_time_us;
  fmt::print("{:<10} predicted step {} ({}): {}, {}\n", "time", format_us(t), pr.policy,
             ratio(t, pr.no_swap_step_time_us, "no swap"), ratio(t, pr.bound_us, "the bound"));
  fmt::print("{:<10} compute {}, stall {}, recompute {}\n", "", format_us(pr.compute_us.value_or(0)),
             format_us(pr.stall_us.value_or(0)), format_us(pr.recompute_us.value_or(0)));
}

void print_baselines(const Plan& p) {
  if (p.baselines.empty()) return;
  auto bytes = [](std::optional<int64_t> b) { return b ? format_bytes(*b) : std::string("-"); };
  fmt::print("baselines  {:<14} {:<5} {:>10} {:>10} {:>10} {:>14}\n", "policy", "fits", "step",
             "to host", "to device", "resident peak");
  for (const Baseline& b : p.baselines)
    fmt::print("           {:<14} {:<5} {:>10} {:>10} {:>10} {:>14}\n", b.policy,
               b.fits ? "yes" : "no",
               b.step_time_us && b.calibrated ? format_us(*b.step_time_us) : "-",
               bytes(b.bytes_to_host), bytes(b.bytes_to_device), bytes(b.resident_peak_bytes));
  fmt::print("{:<10} step: only for policies whose model was measured to within 1.5x "
             "(docs/baselines.md)\n", "");
}

void print_largest(const Plan& p, const Analysis& a) {
  std::vector<TensorId> swapped;
  for (const Tensor& t : p.tensors)
    if (!a.off[static_cast<size_t>(t.id)].empty()) swapped.push_back(t.id);
  std::sort(swapped.begin(), swapped.end(), [&](TensorId x, TensorId y) {
    int64_t bx = p.tensors[static_cast<size_t>(x)].bytes, by = p.tensors[static_cast<size_t>(y)].bytes;
    return bx != by ? bx > by : x < y;
  });
  if (swapped.empty()) {
    fmt::print("no tensor leaves the GPU\n");
    return;
  }
  size_t shown = std::min(kLargest, swapped.size());
  fmt::print("largest tensors off the GPU ({} of {}; off intervals [first, last] off/on action)\n",
             shown, swapped.size());
  fmt::print("  {:>10}  {:<15}  {:<30}  {}\n", "bytes", "kind", "tensor", "off");
  for (size_t i = 0; i < shown; ++i) {
    const Tensor& t = p.tensors[static_cast<size_t>(swapped[i])];
    std::vector<std::string> off;
    for (const OffInterval& iv : a.off[static_cast<size_t>(t.id)]) off.push_back(off_text(p, iv));
    const std::vector<StepIndex>& remote = a.remote_reads[static_cast<size_t>(t.id)];
    fmt::print("  {:>10}  {:<15}  {:<30}  {}{}\n", format_bytes(t.bytes), name(t.kind), t.name,
               join(off, ", "), remote.empty() ? "" : "; read remotely at " + join(remote, ", "));
  }
}

}  // namespace

int run_summary(const Options& o) { return summary(read_plan(o.plans.at(0)), o); }

int summary(const Plan& p, const Options&) {
  Analysis a = analyze_checked(p);

  std::array<int64_t, kPhaseCount> phases{};
  for (const Step& s : p.steps) ++phases[static_cast<size_t>(s.phase)];
  std::array<int64_t, kActionKindCount> actions{};
  int64_t to_host = 0, to_device = 0;
  for (const Action& x : p.actions) {
    ++actions[static_cast<size_t>(x.kind)];
    if (x.kind == ActionKind::evict) to_host += x.bytes;
    if (x.kind == ActionKind::prefetch) to_device += x.bytes;
  }

  fmt::print("{:<10} {} ({}, autovm-1)\n", "plan", p.path, p.generator);
  fmt::print("{:<10} {} (sha256 {:.12}), batch {}, optimizer {}\n", "model", p.model_file,
             p.model_sha256, p.batch, p.optimizer);
  if (p.device || p.mechanism)
    fmt::print("{:<10} {}, mechanism {}\n", "device", p.device.value_or("-"), p.mechanism.value_or("-"));
  fmt::print("{:<10} {} (forward {}, loss {}, backward {}, optimizer {}); {} tensors\n", "steps",
             p.steps.size(), phases[0], phases[1], phases[2], phases[3], p.tensors.size());
  if (p.conv_workspaces_measured)
    fmt::print("{:<10} {} convolutions' workspaces measured, {} cut to fit the budget\n", "workspace",
               *p.conv_workspaces_measured, p.conv_workspaces_cut);
  if (p.budget_limited())
    fmt::print("{:<10} {} ({} B)\n", "budget", format_bytes(p.budget_bytes), p.budget_bytes);
  else
    fmt::print("{:<10} none\n", "budget");
  fmt::print("{:<10} {} without the plan (statistics.peak_bytes, step {})\n", "peak",
             format_bytes(p.peak_bytes), p.peak_step);
  std::string share = p.budget_limited() && p.budget_bytes > 0
      ? fmt::format(", {:.1f}% of the budget", 100.0 * static_cast<double>(a.resident_peak) /
                                                   static_cast<double>(p.budget_bytes))
      : "";
  fmt::print("{:<10} {} resident with it (step {}, from the actions){}\n", "", format_bytes(a.resident_peak),
             a.resident_peak_step, share);
  fmt::print("{:<10} {} to host ({}), {} to device ({})\n", "moved", format_bytes(to_host),
             plural(actions[static_cast<size_t>(ActionKind::evict)], "evict", "evicts"),
             format_bytes(to_device),
             plural(actions[static_cast<size_t>(ActionKind::prefetch)], "prefetch", "prefetches"));
  print_remote_reads(a);
  print_time(p);
  std::vector<std::string> kinds;
  for (int k = 0; k < kActionKindCount; ++k)
    kinds.push_back(fmt::format("{} {}", name(static_cast<ActionKind>(k)), actions[static_cast<size_t>(k)]));
  fmt::print("{:<10} {}\n", "actions", join(kinds, ", "));
  print_baselines(p);
  print_largest(p, a);
  return 0;
}

}  // namespace inspect
