// autovm-inspect timeline: resident memory over the steps, drawn in the terminal.
//
//   8.00 KB ┤┄┄┄┄┄┄┄┄┄▆█┄┄┄┄┄┄  peak without the plan 8.00 KB
//           │      ▂▄████▆
//   4.00 KB ┤──────████████───  budget 4.00 KB
//           │  ▄▆██████████▄
//       0 B └┬──────┬──────┬──
//            forward loss  backward
//
// Steps are bucketed into the columns; a column shows the most resident bytes of its steps.
// Under the axis, 'r' marks the columns with steps that read tensors remotely (read_remote:
// bytes read over the link, which the bars do not count), '!' those over the budget.
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>

#include "commands.h"
#include "common.h"
#include "residency.h"

namespace inspect {
namespace {

struct Glyphs {
  std::array<const char*, 9> bar;  // 0/8 .. 8/8 of a cell filled
  const char *budget, *peak, *axis, *tick_y, *corner, *axis_x, *tick_x;
};

constexpr Glyphs kUnicode = {{" ", "▁", "▂", "▃", "▄", "▅", "▆", "▇", "█"},
                             "─", "┄", "│", "┤", "└", "─", "┬"};
constexpr Glyphs kAscii = {{" ", ".", ".", ".", ".", ".", ".", ".", "#"},
                           "-", "=", "|", "+", "+", "-", "+"};

constexpr int kLabelWidth = 10;

}  // namespace

int run_timeline(const Options& o) { return timeline(read_plan(o.plans.at(0)), o); }

int timeline(const Plan& p, const Options& o) {
  Analysis a = analyze_checked(p);
  const Glyphs& g = o.ascii ? kAscii : kUnicode;
  const StepIndex n = p.step_count();
  // Column c shows steps [c * n / cols, (c + 1) * n / cols), at least one (several columns show
  // one step when n < cols), and the most resident bytes among them.
  const StepIndex cols = o.width;
  const int rows = o.height;
  std::vector<int64_t> value(static_cast<size_t>(cols), 0);
  std::vector<bool> remote(static_cast<size_t>(cols), false);  // a step of it reads remotely
  std::vector<StepIndex> column_of(static_cast<size_t>(n));  // the leftmost column showing a step
  for (StepIndex c = cols - 1; c >= 0; --c) {
    StepIndex first = c * n / cols, end = std::max((c + 1) * n / cols, first + 1);
    for (StepIndex s = first; s < end; ++s) {
      value[static_cast<size_t>(c)] = std::max(value[static_cast<size_t>(c)], a.resident_total[static_cast<size_t>(s)]);
      if (a.remote_read_bytes[static_cast<size_t>(s)] > 0) remote[static_cast<size_t>(c)] = true;
      column_of[static_cast<size_t>(s)] = c;
    }
  }

  int64_t top = std::max<int64_t>({a.resident_peak, p.peak_bytes, 1});
  if (p.budget_limited()) top = std::max(top, p.budget_bytes);
  const double unit = static_cast<double>(top) / rows;
  auto row_of = [&](int64_t bytes) {
    return std::min(rows - 1, static_cast<int>(std::floor(static_cast<double>(bytes) / unit)));
  };
  const int budget_row = p.budget_limited() ? row_of(p.budget_bytes) : -1;
  const int peak_row = row_of(p.peak_bytes);

  fmt::print("{}: resident peak {} at step {}; budget {}; peak without the plan {}\n", p.path,
             format_bytes(a.resident_peak), a.resident_peak_step,
             p.budget_limited() ? format_bytes(p.budget_bytes) : "none", format_bytes(p.peak_bytes));
  fmt::print("{} steps, {}; full height {}\n", n,
             n <= cols ? fmt::format("{:.1f} columns per step", static_cast<double>(cols) / static_cast<double>(n))
                       : fmt::format("{:.1f} steps per column (the most of them)", static_cast<double>(n) / static_cast<double>(cols)),
             format_bytes(top));

  for (int r = rows - 1; r >= 0; --r) {
    std::string label, note;
    if (r == budget_row) {
      label = format_bytes(p.budget_bytes);
      note = "budget " + label;
    }
    if (r == peak_row) {
      if (label.empty()) label = format_bytes(p.peak_bytes);
      note += (note.empty() ? "" : ", ") + ("peak without the plan " + format_bytes(p.peak_bytes));
    }
    if (r == rows - 1 && label.empty()) label = format_bytes(top);
    std::string line = fmt::format("{:>{}} {}", label, kLabelWidth - 1, label.empty() ? g.axis : g.tick_y);
    const char* rule = r == budget_row ? g.budget : (r == peak_row ? g.peak : " ");
    for (StepIndex c = 0; c < cols; ++c) {
      double fill = (static_cast<double>(value[static_cast<size_t>(c)]) - r * unit) / unit;
      auto eighths = static_cast<size_t>(std::clamp(std::lround(fill * 8), 0L, 8L));
      line += eighths == 0 ? rule : g.bar[eighths];
    }
    if (!note.empty()) line += "  " + note;
    fmt::print("{}\n", line);
  }

  // The x-axis: a tick where a phase starts, the phase names under it, then over-budget marks.
  std::vector<std::pair<StepIndex, Phase>> starts;
  for (const Step& s : p.steps)
    if (s.id == 0 || s.phase != p.steps[static_cast<size_t>(s.id - 1)].phase)
      starts.emplace_back(column_of[static_cast<size_t>(s.id)], s.phase);
  std::string axis = fmt::format("{:>{}} {}", "0 B", kLabelWidth - 1, g.corner);
  std::string names(static_cast<size_t>(cols), ' ');
  for (StepIndex c = 0; c < cols; ++c) {
    bool tick = std::any_of(starts.begin(), starts.end(), [&](const auto& st) { return st.first == c; });
    axis += tick ? g.tick_x : g.axis_x;
  }
  for (size_t i = 0; i < starts.size(); ++i) {
    StepIndex end = i + 1 < starts.size() ? starts[i + 1].first : cols;
    std::string_view phase = name(starts[i].second);
    auto room = static_cast<size_t>(std::max<StepIndex>(end - starts[i].first - 1, 1));
    std::string text = phase.size() <= room ? std::string(phase)
                                            : std::string(1, static_cast<char>(std::toupper(phase[0])));
    auto at = static_cast<size_t>(starts[i].first);
    names.replace(at, std::min(text.size(), names.size() - at), text.substr(0, names.size() - at));
  }
  fmt::print("{}\n{:>{}}{}\n", axis, "", kLabelWidth + 1, names);
  if (p.budget_limited() && a.resident_peak > p.budget_bytes) {
    std::string marks(static_cast<size_t>(cols), ' ');
    for (StepIndex c = 0; c < cols; ++c)
      if (value[static_cast<size_t>(c)] > p.budget_bytes) marks[static_cast<size_t>(c)] = '!';
    fmt::print("{:>{}}{}  ! over the budget\n", "", kLabelWidth + 1, marks);
  }
  if (std::find(remote.begin(), remote.end(), true) != remote.end()) {
    std::string marks(static_cast<size_t>(cols), ' ');
    int64_t total = 0;
    StepIndex steps = 0;
    for (StepIndex c = 0; c < cols; ++c)
      if (remote[static_cast<size_t>(c)]) marks[static_cast<size_t>(c)] = 'r';
    for (int64_t b : a.remote_read_bytes) {
      total += b;
      steps += b > 0;
    }
    fmt::print("{:>{}}{}  r read remotely ({} at {} step{}, not in the bars)\n", "", kLabelWidth + 1,
               marks, format_bytes(total), steps, steps == 1 ? "" : "s");
  }
  std::string numbers(static_cast<size_t>(cols), ' ');
  numbers[0] = '0';
  std::string last = std::to_string(n - 1);
  if (last.size() + 2 <= numbers.size()) numbers.replace(numbers.size() - last.size(), last.size(), last);
  fmt::print("{:>{}}  {}\n", "step", kLabelWidth - 1, numbers);
  fmt::print("{} resident   {} budget   {} peak without the plan   (F/L/B/O: phase initials)\n",
             g.bar[8], g.budget, g.peak);
  return 0;
}

}  // namespace inspect
