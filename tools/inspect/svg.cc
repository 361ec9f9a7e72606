// autovm-inspect svg: a picture of the memory timeline.
//
//   title
//   ┌──────────────────────────────────────┐
//   │ - - - - peak without the plan - - - -│   stacked areas: resident bytes by tensor kind
//   │────────────── budget ───────────────│   (a column shows the step with the most bytes)
//   │     ▁▃▅███████▅▃▁                    │
//   └──────────────────────────────────────┘
//   to host    ▮  ▮▮  ▮                         evicts: from after_step + 1 to ready_before_step
//   to device              ▮ ▮▮  ▮              prefetches
//   remote read                 ▮ ▮             read_remote: over the step that reads remotely
//   step axis, phases, legend
//
// Self-contained (no scripts, fonts or links) and deterministic.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "commands.h"
#include "common.h"
#include "residency.h"

namespace inspect {
namespace {

constexpr double kWidth = 1000, kLeft = 90, kRight = 970;
constexpr double kTop = 60, kBottom = 360;                  // the memory chart
constexpr double kRowHeight = 16, kHostRow = 372, kDeviceRow = 392, kRemoteRow = 412;  // the transfer rows
constexpr double kRowsEnd = kRemoteRow + kRowHeight;
constexpr double kAxis = 440, kLegend = 470, kHeight = 530;
constexpr const char* kBudgetStyle = "stroke=\"#d62728\" stroke-width=\"1.5\"";
constexpr const char* kPeakStyle = "stroke=\"#555555\" stroke-width=\"1.5\" stroke-dasharray=\"6 4\"";
constexpr std::array<const char*, kTensorKindCount> kColors = {
    "#4e79a7", "#a0cbe8", "#f28e2b", "#ffbe7d", "#59a14f", "#8cd17d", "#e15759", "#ff9d9a", "#79706e"};

std::string escape(std::string_view s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

// 1, 2 or 5 times a power of ten, about range / 5.
double nice_step(double range) {
  double raw = range / 5, power = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0})
    if (m * power >= raw) return m * power;
  return 10 * power;
}

}  // namespace

int run_svg(const Options& o) {
  Plan p = read_plan(o.plans.at(0));
  Analysis a = analyze_checked(p);
  const StepIndex n = p.step_count();
  const double plot = kRight - kLeft;
  auto x_of = [&](StepIndex s) { return kLeft + plot * static_cast<double>(s) / static_cast<double>(n); };

  int64_t top_bytes = std::max<int64_t>({a.resident_peak, p.peak_bytes, 1});
  if (p.budget_limited()) top_bytes = std::max(top_bytes, p.budget_bytes);
  const double top = static_cast<double>(top_bytes) * 1.08;
  auto y_of = [&](double bytes) { return kBottom - (kBottom - kTop) * bytes / top; };

  std::string svg = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0:.0f}\" height=\"{1:.0f}\" "
      "viewBox=\"0 0 {0:.0f} {1:.0f}\" font-family=\"sans-serif\" font-size=\"11\">\n"
      "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n",
      kWidth, kHeight);
  svg += fmt::format("<text x=\"{:.0f}\" y=\"24\" font-size=\"15\">{}: resident memory by tensor kind</text>\n",
                     kLeft, escape(p.model_file));
  svg += fmt::format("<text x=\"{:.0f}\" y=\"44\">budget {}, resident peak {} (step {}), peak without the "
                     "plan {}; {} steps, {} actions</text>\n", kLeft,
                     p.budget_limited() ? format_bytes(p.budget_bytes) : "none",
                     format_bytes(a.resident_peak), a.resident_peak_step, format_bytes(p.peak_bytes), n,
                     p.actions.size());

  // Phases: a thin line and a name where each starts.
  svg += "<g id=\"phases\" stroke=\"#cccccc\">\n";
  std::vector<std::pair<StepIndex, Phase>> starts;
  for (const Step& s : p.steps)
    if (s.id == 0 || s.phase != p.steps[static_cast<size_t>(s.id - 1)].phase) starts.emplace_back(s.id, s.phase);
  for (size_t i = 0; i < starts.size(); ++i) {
    double x = x_of(starts[i].first);
    double room = x_of(i + 1 < starts.size() ? starts[i + 1].first : n) - x;
    std::string_view label = name(starts[i].second);
    if (static_cast<double>(label.size()) * 6.5 > room) label = label.substr(0, 1);
    svg += fmt::format("<line x1=\"{0:.1f}\" y1=\"{1:.0f}\" x2=\"{0:.1f}\" y2=\"{2:.0f}\"/>"
                       "<text x=\"{3:.1f}\" y=\"{4:.0f}\" stroke=\"none\" fill=\"#777777\">{5}</text>\n",
                       x, kTop, kRowsEnd, x + 2, kTop + 11, label);
  }
  svg += "</g>\n";

  // Stacked areas, one column per pixel at most: each column shows its step with the most bytes.
  const StepIndex cols = std::min<StepIndex>(n, static_cast<StepIndex>(plot));
  std::vector<StepIndex> pick(static_cast<size_t>(cols));
  for (StepIndex c = 0; c < cols; ++c) {
    StepIndex best = c * n / cols;
    for (StepIndex s = best; s < (c + 1) * n / cols; ++s)
      if (a.resident_total[static_cast<size_t>(s)] > a.resident_total[static_cast<size_t>(best)]) best = s;
    pick[static_cast<size_t>(c)] = best;
  }
  auto col_x = [&](StepIndex c) { return kLeft + plot * static_cast<double>(c) / static_cast<double>(cols); };
  BytesByKind ever{};
  for (const BytesByKind& b : a.resident)
    for (size_t k = 0; k < b.size(); ++k) ever[k] = std::max(ever[k], b[k]);
  std::vector<double> below(static_cast<size_t>(cols), 0), above(static_cast<size_t>(cols), 0);
  svg += "<g id=\"resident\" stroke=\"none\">\n";
  for (size_t k = 0; k < kTensorKindCount; ++k) {
    if (ever[k] == 0) continue;
    std::string path;
    for (StepIndex c = 0; c < cols; ++c) {
      auto i = static_cast<size_t>(c);
      above[i] = below[i] + static_cast<double>(a.resident[static_cast<size_t>(pick[i])][k]);
      path += fmt::format("{}{:.1f},{:.1f} L{:.1f},{:.1f} ", c == 0 ? "M" : "L", col_x(c), y_of(above[i]),
                          col_x(c + 1), y_of(above[i]));
    }
    for (StepIndex c = cols - 1; c >= 0; --c)
      path += fmt::format("L{:.1f},{:.1f} L{:.1f},{:.1f} ", col_x(c + 1), y_of(below[static_cast<size_t>(c)]),
                          col_x(c), y_of(below[static_cast<size_t>(c)]));
    svg += fmt::format("<path d=\"{}Z\" fill=\"{}\"><title>{}</title></path>\n", path, kColors[k],
                       name(static_cast<TensorKind>(k)));
    below = above;
  }
  svg += "</g>\n";

  // Axes, bytes ticks, the budget and the peak without the plan.
  svg += fmt::format("<g id=\"axes\" stroke=\"#333333\"><line x1=\"{0:.0f}\" y1=\"{1:.0f}\" x2=\"{0:.0f}\" "
                     "y2=\"{2:.0f}\"/><line x1=\"{0:.0f}\" y1=\"{2:.0f}\" x2=\"{3:.0f}\" y2=\"{2:.0f}\"/>\n",
                     kLeft, kTop, kBottom, kRight);
  const double tick = nice_step(top);
  for (double v = 0; v <= top; v += tick)
    svg += fmt::format("<line x1=\"{0:.0f}\" y1=\"{1:.1f}\" x2=\"{2:.0f}\" y2=\"{1:.1f}\"/>"
                       "<text x=\"{3:.0f}\" y=\"{4:.1f}\" stroke=\"none\" text-anchor=\"end\">{5}</text>\n",
                       kLeft - 4, y_of(v), kLeft, kLeft - 6, y_of(v) + 4,
                       format_bytes(static_cast<int64_t>(std::llround(v))));
  const double step_tick = std::max(1.0, nice_step(static_cast<double>(n)));
  for (double s = 0; s <= static_cast<double>(n); s += step_tick)
    svg += fmt::format("<line x1=\"{0:.1f}\" y1=\"{1:.0f}\" x2=\"{0:.1f}\" y2=\"{2:.0f}\"/>"
                       "<text x=\"{0:.1f}\" y=\"{3:.0f}\" stroke=\"none\" text-anchor=\"middle\">{4:.0f}</text>\n",
                       x_of(static_cast<StepIndex>(s)), kRowsEnd, kRowsEnd + 4,
                       kAxis, s);
  svg += fmt::format("<text x=\"{:.0f}\" y=\"{:.0f}\" stroke=\"none\" text-anchor=\"middle\">step</text>\n",
                     (kLeft + kRight) / 2, kAxis + 14);
  svg += fmt::format("<text transform=\"translate(16 {:.0f}) rotate(-90)\" stroke=\"none\" "
                     "text-anchor=\"middle\">resident bytes</text>\n</g>\n", (kTop + kBottom) / 2);
  // The budget and the peak without the plan: lines across the chart, named in the legend.
  const std::string peak_label = "peak without the plan " + format_bytes(p.peak_bytes);
  const std::string budget_label = "budget " + format_bytes(p.budget_bytes);
  auto level = [&](const char* id, int64_t bytes, const char* style, const std::string& label) {
    return fmt::format("<line id=\"{0}\" x1=\"{1:.0f}\" y1=\"{2:.1f}\" x2=\"{3:.0f}\" y2=\"{2:.1f}\" {4}>"
                       "<title>{5}</title></line>\n",
                       id, kLeft, y_of(static_cast<double>(bytes)), kRight, style, label);
  };
  svg += level("peak-without-plan", p.peak_bytes, kPeakStyle, peak_label);
  if (p.budget_limited()) svg += level("budget", p.budget_bytes, kBudgetStyle, budget_label);

  // Transfers, one row per direction, from after_step + 1 to ready_before_step.
  for (auto [kind, row, color, label] : {std::tuple{ActionKind::evict, kHostRow, "#1f77b4", "to host"},
                                         std::tuple{ActionKind::prefetch, kDeviceRow, "#2ca02c", "to device"}}) {
    svg += fmt::format("<g id=\"{}\"><text x=\"{:.0f}\" y=\"{:.0f}\" text-anchor=\"end\">{}</text>\n",
                       kind == ActionKind::evict ? "to-host" : "to-device", kLeft - 6, row + 12, label);
    for (const Action& x : p.actions) {
      if (x.kind != kind) continue;
      // A transfer due before the very next step is a thin bar on the boundary between them.
      double x0 = x_of(x.after_step + 1), x1 = x_of(x.ready_before_step);
      if (x1 - x0 < 3) {
        x0 -= 1.5;
        x1 = x0 + 3;
      }
      svg += fmt::format("<rect x=\"{:.1f}\" y=\"{:.0f}\" width=\"{:.1f}\" height=\"{:.0f}\" fill=\"{}\" "
                         "fill-opacity=\"0.6\"><title>{} {}</title></rect>\n",
                         x0, row, x1 - x0, kRowHeight, color,
                         escape(p.tensors[static_cast<size_t>(x.tensor)].name), format_bytes(x.bytes));
    }
    svg += "</g>\n";
  }
  // Remote reads: over the step that reads the tensor's host copy (no copy of its own).
  svg += fmt::format("<g id=\"remote-read\"><text x=\"{:.0f}\" y=\"{:.0f}\" text-anchor=\"end\">remote read</text>\n",
                     kLeft - 6, kRemoteRow + 12);
  for (const Action& x : p.actions) {
    if (x.kind != ActionKind::read_remote) continue;
    double x0 = x_of(x.ready_before_step), x1 = std::max(x_of(x.ready_before_step + 1), x0 + 3);
    svg += fmt::format("<rect x=\"{:.1f}\" y=\"{:.0f}\" width=\"{:.1f}\" height=\"{:.0f}\" fill=\"#9467bd\" "
                       "fill-opacity=\"0.6\"><title>{} {} at step {}</title></rect>\n",
                       x0, kRemoteRow, x1 - x0, kRowHeight,
                       escape(p.tensors[static_cast<size_t>(x.tensor)].name), format_bytes(x.bytes),
                       x.ready_before_step);
  }
  svg += "</g>\n";

  // Legend.
  svg += "<g id=\"legend\">\n";
  double lx = kLeft;
  for (size_t k = 0; k < kTensorKindCount; ++k) {
    if (ever[k] == 0) continue;
    std::string_view label = name(static_cast<TensorKind>(k));
    svg += fmt::format("<rect x=\"{0:.0f}\" y=\"{1:.0f}\" width=\"12\" height=\"12\" fill=\"{2}\"/>"
                       "<text x=\"{3:.0f}\" y=\"{4:.0f}\">{5}</text>\n", lx, kLegend, kColors[k],
                       lx + 16, kLegend + 10, label);
    lx += 16 + 7.0 * static_cast<double>(label.size()) + 14;
  }
  lx = kLeft;
  for (auto [style, label] : {std::pair{kBudgetStyle, budget_label}, std::pair{kPeakStyle, peak_label}}) {
    if (style == kBudgetStyle && !p.budget_limited()) continue;
    svg += fmt::format("<line x1=\"{0:.0f}\" y1=\"{1:.0f}\" x2=\"{2:.0f}\" y2=\"{1:.0f}\" {3}/>"
                       "<text x=\"{4:.0f}\" y=\"{5:.0f}\">{6}</text>\n",
                       lx, kLegend + 30, lx + 20, style, lx + 26, kLegend + 34, label);
    lx += 26 + 7.0 * static_cast<double>(label.size()) + 14;
  }
  svg += "</g>\n</svg>\n";

  write_file_atomically(o.output, svg);
  fmt::print("{}: memory timeline of {} steps written to {}\n", p.path, n, o.output);
  return 0;
}

}  // namespace inspect
