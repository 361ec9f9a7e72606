// autovm-inspect diff: what changed from plan A to plan B. Tensors are matched by name, so two
// plans of the same model compare action by action.
#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <map>

#include "commands.h"
#include "common.h"
#include "residency.h"

namespace inspect {
namespace {

// A weight to sort by: a * b, or INT64_MAX when that overflows (both are non-negative).
int64_t saturating_mul(int64_t a, int64_t b) {
  int64_t product = 0;
  return __builtin_mul_overflow(a, b, &product) ? std::numeric_limits<int64_t>::max() : product;
}

struct Side {
  const Plan& plan;
  Analysis analysis;
  std::map<std::string, TensorId> by_name;
  std::map<std::string, std::vector<std::string>> actions;  // tensor name -> sorted signatures
  int64_t to_host = 0, to_device = 0, read_remotely = 0;

  explicit Side(const Plan& p) : plan(p), analysis(analyze_checked(plan)) {
    for (const Tensor& t : plan.tensors) by_name.emplace(t.name, t.id);
    for (const Action& a : plan.actions) {
      actions[plan.tensors[static_cast<size_t>(a.tensor)].name].push_back(signature(a));
      if (a.kind == ActionKind::evict) to_host += a.bytes;
      if (a.kind == ActionKind::prefetch) to_device += a.bytes;
    }
    for (int64_t b : analysis.remote_read_bytes) read_remotely += b;
    for (auto& [tensor, list] : actions) std::sort(list.begin(), list.end());
  }

  // "evict 3->5" (after_step -> ready_before_step), "recompute 2@7", "advise read_mostly 3->4",
  // "read_remote 6->7" (read at step 7).
  static std::string signature(const Action& a) {
    if (a.kind == ActionKind::recompute)
      return fmt::format("recompute {}@{}", a.source_step, a.ready_before_step);
    if (a.kind == ActionKind::advise)
      return fmt::format("advise {} {}->{}", a.advice, a.after_step, a.ready_before_step);
    return fmt::format("{} {}->{}", name(a.kind), a.after_step, a.ready_before_step);
  }

  std::vector<std::string> off_intervals(TensorId t) const {
    std::vector<std::string> out;
    for (const OffInterval& iv : analysis.off[static_cast<size_t>(t)])
      out.push_back(fmt::format("[{}, {}]", iv.from, iv.through));
    return out;
  }
};

std::string change(int64_t a, int64_t b) {
  if (a == b) return "=";
  std::string d = fmt::format("{}{}", b > a ? "+" : "", format_bytes(b - a));
  if (a == 0) return d;
  return fmt::format("{} ({:+.1f}%)", d, 100.0 * static_cast<double>(b - a) / static_cast<double>(a));
}

// Prints a line without the spaces an empty last column leaves.
void line(std::string text) {
  text.erase(text.find_last_not_of(' ') + 1);
  fmt::print("{}\n", text);
}

// The first column fits the longest label, "read_remote actions".
void row(const std::string& what, const std::string& a, const std::string& b, const std::string& delta) {
  line(fmt::format("  {:<19} {:>14} {:>14}   {}", what, a, b, delta));
}

// The fields of model or options that differ, as "key A -> B".
std::vector<std::string> field_changes(const std::vector<std::pair<std::string, std::string>>& a,
                                       const std::vector<std::pair<std::string, std::string>>& b) {
  std::map<std::string, std::pair<std::string, std::string>> both;
  for (const auto& [k, v] : a) both[k].first = v;
  for (const auto& [k, v] : b) both[k].second = v;
  std::vector<std::string> out;
  for (const auto& [k, v] : both)
    if (v.first != v.second)
      out.push_back(fmt::format("{} {} -> {}", k, v.first.empty() ? "(absent)" : v.first,
                                v.second.empty() ? "(absent)" : v.second));
  return out;
}

// Elements of x not in y (both sorted), as a multiset difference.
std::vector<std::string> minus(const std::vector<std::string>& x, const std::vector<std::string>& y) {
  std::vector<std::string> out;
  std::set_difference(x.begin(), x.end(), y.begin(), y.end(), std::back_inserter(out));
  return out;
}

}  // namespace

int run_diff(const Options& o) { return diff(read_plan(o.plans.at(0)), read_plan(o.plans.at(1)), o); }

int diff(const Plan& plan_a, const Plan& plan_b, const Options& o) {
  const Side a(plan_a), b(plan_b);
  const Plan& pa = a.plan;
  const Plan& pb = b.plan;
  const auto top = static_cast<size_t>(o.top);
  fmt::print("A {} ({})\nB {} ({})\n", pa.path, pa.generator, pb.path, pb.generator);

  auto model = field_changes(pa.model_fields, pb.model_fields);
  if (model.empty()) fmt::print("model: same ({}, sha256 {:.12})\n", pa.model_file, pa.model_sha256);
  else fmt::print("model: {}\n", join(model, "; "));
  auto options = field_changes(pa.option_fields, pb.option_fields);
  fmt::print("options: {}\n", options.empty() ? std::string("same") : join(options, "; "));

  fmt::print("\n");
  row("", "A", "B", "change");
  auto budget = [](const Plan& p) { return p.budget_limited() ? format_bytes(p.budget_bytes) : "none"; };
  row("budget", budget(pa), budget(pb),
      pa.budget_limited() && pb.budget_limited() ? change(pa.budget_bytes, pb.budget_bytes) : "");
  row("peak (no plan)", format_bytes(pa.peak_bytes), format_bytes(pb.peak_bytes), change(pa.peak_bytes, pb.peak_bytes));
  row("resident peak", format_bytes(a.analysis.resident_peak), format_bytes(b.analysis.resident_peak),
      change(a.analysis.resident_peak, b.analysis.resident_peak));
  auto time = [](const Plan& p) -> std::optional<double> {
    return p.prediction ? p.prediction->step_time_us : std::nullopt;
  };
  auto ta = time(pa), tb = time(pb);
  row("step time", ta ? format_us(*ta) : "-", tb ? format_us(*tb) : "-",
      ta && tb && *ta > 0 ? fmt::format("{:.3f}x", *tb / *ta) : "");
  row("to host", format_bytes(a.to_host), format_bytes(b.to_host), change(a.to_host, b.to_host));
  row("to device", format_bytes(a.to_device), format_bytes(b.to_device), change(a.to_device, b.to_device));
  row("read remotely", format_bytes(a.read_remotely), format_bytes(b.read_remotely),
      change(a.read_remotely, b.read_remotely));
  for (int k = 0; k < kActionKindCount; ++k) {
    auto count = [&](const Plan& p) {
      return std::count_if(p.actions.begin(), p.actions.end(),
                           [&](const Action& x) { return x.kind == static_cast<ActionKind>(k); });
    };
    int64_t ca = count(pa), cb = count(pb);
    row(fmt::format("{} actions", name(static_cast<ActionKind>(k))), std::to_string(ca),
        std::to_string(cb), ca == cb ? "=" : fmt::format("{:+}", cb - ca));
  }

  // Tensors only in one plan; then actions and residency of the tensors in both.
  size_t only_a = 0, only_b = 0;
  for (const auto& [n, id] : a.by_name) only_a += b.by_name.count(n) == 0;
  for (const auto& [n, id] : b.by_name) only_b += a.by_name.count(n) == 0;
  if (only_a + only_b > 0)
    fmt::print("\ntensors only in A: {}, only in B: {} (matched by name)\n", only_a, only_b);

  struct Changed {
    std::string name;
    int64_t weight;  // bytes of the changes
    std::string a, b;
  };
  std::vector<Changed> actions, residency;
  static const std::vector<std::string> kNone;
  auto list_of = [](const Side& s, const std::string& n) -> const std::vector<std::string>& {
    auto it = s.actions.find(n);
    return it == s.actions.end() ? kNone : it->second;
  };
  for (const auto& [n, ida] : a.by_name) {
    auto it = b.by_name.find(n);
    if (it == b.by_name.end()) continue;
    const int64_t bytes = pa.tensors[static_cast<size_t>(ida)].bytes;
    auto removed = minus(list_of(a, n), list_of(b, n)), added = minus(list_of(b, n), list_of(a, n));
    if (!added.empty() || !removed.empty())
      actions.push_back({n, saturating_mul(bytes, static_cast<int64_t>(added.size() + removed.size())),
                         join(added, ", "), join(removed, ", ")});
    auto off_a = a.off_intervals(ida), off_b = b.off_intervals(it->second);
    if (off_a != off_b)
      residency.push_back({n, bytes, off_a.empty() ? "resident" : join(off_a, " "),
                           off_b.empty() ? "resident" : join(off_b, " ")});
  }
  auto heaviest = [](const Changed& x, const Changed& y) {
    return x.weight != y.weight ? x.weight > y.weight : x.name < y.name;
  };
  std::sort(actions.begin(), actions.end(), heaviest);
  std::sort(residency.begin(), residency.end(), heaviest);

  fmt::print("\nactions changed on {} tensor{}", actions.size(), actions.size() == 1 ? "" : "s");
  if (!actions.empty()) {
    fmt::print(" (top {} by bytes; after_step->ready_before_step, recompute source@step)\n",
               std::min(top, actions.size()));
    fmt::print("  {:<30} {:<30} {}\n", "tensor", "added in B", "removed from A");
    for (size_t i = 0; i < actions.size() && i < top; ++i)
      line(fmt::format("  {:<30} {:<30} {}", actions[i].name, actions[i].a, actions[i].b));
  } else {
    fmt::print("\n");
  }
  fmt::print("\nresidency changed on {} tensor{}", residency.size(), residency.size() == 1 ? "" : "s");
  if (!residency.empty()) {
    fmt::print(" (top {} by bytes; off intervals)\n", std::min(top, residency.size()));
    fmt::print("  {:<30} {:>10}  {:<24} {}\n", "tensor", "bytes", "A", "B");
    for (size_t i = 0; i < residency.size() && i < top; ++i)
      fmt::print("  {:<30} {:>10}  {:<24} {}\n", residency[i].name, format_bytes(residency[i].weight),
                 residency[i].a, residency[i].b);
  } else {
    fmt::print("\n");
  }
  return 0;
}

}  // namespace inspect
