// autovm-inspect trace: the plan as Chrome trace event JSON (Perfetto, chrome://tracing).
//
// pid 1; lanes (tid): 1 compute, 2 copy to device (prefetch), 3 copy to host (evict),
// 4 recompute, 5 remote read (read_remote: the step reads the tensor's host copy over the link,
// while it runs; its compute slice has args.remote_read_bytes). "X" complete events. A
// predicted transfer is drawn from when its copy stream
// (one per direction, in issue order) is free to its ready_us. Events that still overlap in one
// lane go to extra lanes
// (tid lane*1000 + k, named "copy to host (2)"...) so every lane nests. A "C" counter track
// "resident bytes" holds the bytes on the GPU by tensor kind at each step's start.
//
// Time: the steps' start_us / end_us and the actions' issue_us / ready_us when the plan has
// them (predicted); else every step takes kUnitUs and a transfer spans the steps between its
// after_step and ready_before_step (at least kMinimumUs), a remote read its step.
// otherData.timing says which.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>

#include "commands.h"
#include "common.h"
#include "residency.h"

namespace inspect {
namespace {

using nlohmann::json;

constexpr double kUnitUs = 100;    // an assumed step
constexpr double kMinimumUs = 10;  // an assumed transfer due before the next step
constexpr int kCompute = 1, kToDevice = 2, kToHost = 3, kRecompute = 4, kRemoteRead = 5,
              kLaneCount = 5;
constexpr std::array<const char*, kLaneCount + 1> kLaneNames = {
    "", "compute", "copy to device", "copy to host", "recompute", "remote read"};

// When each step starts and ends.
struct Clock {
  bool predicted = false;
  std::vector<double> start, end;
  double total = 0;  // the end of the training step: its last step, or a transfer due by then

  explicit Clock(const Plan& p) : predicted(p.has_step_times()) {
    for (const Step& s : p.steps) {
      start.push_back(predicted ? *s.start_us : kUnitUs * static_cast<double>(s.id));
      end.push_back(predicted ? *s.end_us : kUnitUs * static_cast<double>(s.id + 1));
    }
    total = end.back();
    if (predicted && p.prediction && p.prediction->step_time_us)
      total = std::max(total, *p.prediction->step_time_us);
  }
  // The start of step s; s == n: the end of the training step.
  double edge(StepIndex s) const {
    return s >= static_cast<StepIndex>(start.size()) ? total : start[static_cast<size_t>(s)];
  }
};

struct Slice {
  int lane = 0;
  double begin = 0, end = 0;
  json event;  // name, cat, args
};

// Nominal span of a transfer or a recomputation.
std::pair<double, double> span(const Plan& p, const Clock& clock, const Action& a) {
  if (clock.predicted && a.issue_us && a.ready_us && *a.ready_us >= *a.issue_us)
    return {*a.issue_us, *a.ready_us};
  if (a.kind == ActionKind::recompute) {
    const Step& src = p.steps[static_cast<size_t>(a.source_step)];
    double d = clock.predicted ? src.compute_us.value_or(*src.end_us - *src.start_us) : kUnitUs / 4;
    double at = clock.edge(a.ready_before_step);
    return {std::max(0.0, at - d), at};
  }
  if (a.kind == ActionKind::read_remote) {  // during its step (check_indices: a step, not n)
    const auto s = static_cast<size_t>(a.ready_before_step);
    return {clock.start[s], clock.end[s]};
  }
  double begin = clock.edge(a.after_step + 1);
  return {begin, std::max(clock.edge(a.ready_before_step), begin + kMinimumUs)};
}

}  // namespace

int run_trace(const Options& o) {
  Plan p = read_plan(o.plans.at(0));
  Analysis a = analyze_checked(p);
  Clock clock(p);

  std::vector<Slice> slices;
  for (const Step& s : p.steps) {
    const auto i = static_cast<size_t>(s.id);
    json args = {{"step", s.id}, {"node", s.node}, {"phase", name(s.phase)},
                 {"resident_bytes", a.resident_total[i]}};
    if (s.compute_us) args["compute_us"] = *s.compute_us;
    if (a.remote_read_bytes[i] > 0) args["remote_read_bytes"] = a.remote_read_bytes[i];
    slices.push_back({kCompute, clock.start[i], clock.end[i],
                      {{"name", s.op}, {"cat", name(s.phase)}, {"args", std::move(args)}}});
    if (clock.predicted && s.stall_us && *s.stall_us > 0)
      slices.push_back({kCompute, clock.start[i] - *s.stall_us, clock.start[i],
                        {{"name", "stall"}, {"cat", "stall"}, {"args", {{"before_step", s.id}}}}});
  }
  for (const Action& x : p.actions) {
    int lane = 0;
    switch (x.kind) {
      case ActionKind::prefetch: lane = kToDevice; break;
      case ActionKind::evict: lane = kToHost; break;
      case ActionKind::recompute: lane = kRecompute; break;
      case ActionKind::read_remote: lane = kRemoteRead; break;
      case ActionKind::discard:
      case ActionKind::advise: break;  // instantaneous: no slice
    }
    if (lane == 0) continue;
    const Tensor& t = p.tensors[static_cast<size_t>(x.tensor)];
    json args = {{"tensor", t.name}, {"kind", name(t.kind)}, {"bytes", x.bytes},
                 {"after_step", x.after_step}, {"ready_before_step", x.ready_before_step}};
    if (x.kind == ActionKind::recompute) args["source_step"] = x.source_step;
    if (!x.mechanism.empty()) args["mechanism"] = x.mechanism;
    auto [begin, end] = span(p, clock, x);
    slices.push_back({lane, begin, end,
                      {{"name", t.name}, {"cat", name(x.kind)}, {"args", std::move(args)}}});
  }

  // Into lanes that nest: each slice goes to the first sub-lane of its lane that is free.
  std::stable_sort(slices.begin(), slices.end(), [](const Slice& x, const Slice& y) {
    return x.lane != y.lane ? x.lane < y.lane : x.begin < y.begin;
  });
  std::array<std::vector<double>, kLaneCount + 1> free_from;  // [lane][sub-lane]: busy until
  std::array<double, kLaneCount + 1> stream_free{};           // [lane]: its copy stream is free
  json events = json::array();
  for (Slice& s : slices) {
    if (clock.predicted && (s.lane == kToDevice || s.lane == kToHost)) {
      // A copy stream runs its transfers in issue order: draw each from when the stream is free.
      const auto lane = static_cast<size_t>(s.lane);
      double start = std::max(s.begin, stream_free[lane]);
      if (start <= s.end) {
        s.event["args"]["queued_us"] = start - s.begin;
        s.begin = start;
      }
      stream_free[lane] = std::max(stream_free[lane], s.end);
    }
    std::vector<double>& subs = free_from[static_cast<size_t>(s.lane)];
    size_t k = 0;
    while (k < subs.size() && subs[k] > s.begin) ++k;
    if (k == subs.size()) subs.push_back(0);
    s.end = std::max(s.end, s.begin);
    subs[k] = s.end;
    json e = std::move(s.event);
    e["ph"] = "X";
    e["pid"] = 1;
    e["tid"] = k == 0 ? s.lane : s.lane * 1000 + static_cast<int>(k);
    e["ts"] = s.begin;
    e["dur"] = s.end - s.begin;
    events.push_back(std::move(e));
  }

  std::string timing = clock.predicted
      ? "predicted: the plan's per-step start_us/end_us and the actions' issue_us/ready_us; a "
        "transfer is drawn from when its copy stream is free (args.queued_us after its issue) to "
        "its ready_us"
      : fmt::format("assumed: the plan has no per-step start_us/end_us, so every step takes {:.0f} us, "
                    "a transfer spans the steps from after_step + 1 to ready_before_step - 1 (at least "
                    "{:.0f} us), a recomputation the last {:.0f} us before its step, a remote read its "
                    "step", kUnitUs, kMinimumUs,
                    kUnitUs / 4);
  json meta = json::array();
  meta.push_back({{"ph", "M"}, {"pid", 1}, {"name", "process_name"},
                  {"args", {{"name", fmt::format("autovm plan {} ({} timing)", p.model_file,
                                                 clock.predicted ? "predicted" : "assumed")}}}});
  for (int lane = 1; lane <= kLaneCount; ++lane) {
    size_t subs = std::max<size_t>(1, free_from[static_cast<size_t>(lane)].size());
    for (size_t k = 0; k < subs; ++k) {
      int tid = k == 0 ? lane : lane * 1000 + static_cast<int>(k);
      std::string label = k == 0 ? kLaneNames[static_cast<size_t>(lane)]
                                 : fmt::format("{} ({})", kLaneNames[static_cast<size_t>(lane)], k + 1);
      meta.push_back({{"ph", "M"}, {"pid", 1}, {"tid", tid}, {"name", "thread_name"},
                      {"args", {{"name", label}}}});
      meta.push_back({{"ph", "M"}, {"pid", 1}, {"tid", tid}, {"name", "thread_sort_index"},
                      {"args", {{"sort_index", lane * 1000 + static_cast<int>(k)}}}});
    }
  }

  // Counter tracks: resident bytes by kind at each step's start, and the budget.
  BytesByKind ever{};
  for (const BytesByKind& b : a.resident)
    for (size_t k = 0; k < b.size(); ++k) ever[k] = std::max(ever[k], b[k]);
  auto counter = [&](double ts, const BytesByKind& b) {
    json args = json::object();
    for (size_t k = 0; k < b.size(); ++k)
      if (ever[k] > 0) args[std::string(name(static_cast<TensorKind>(k)))] = b[k];
    return json{{"ph", "C"}, {"pid", 1}, {"name", "resident bytes"}, {"ts", ts}, {"args", args}};
  };
  for (size_t s = 0; s < a.resident.size(); ++s) events.push_back(counter(clock.start[s], a.resident[s]));
  events.push_back(counter(clock.total, BytesByKind{}));
  if (p.budget_limited())
    for (double ts : {clock.start.front(), clock.total})
      events.push_back({{"ph", "C"}, {"pid", 1}, {"name", "budget"}, {"ts", ts},
                        {"args", {{"bytes", p.budget_bytes}}}});

  for (json& e : events) meta.push_back(std::move(e));
  json trace = {{"traceEvents", std::move(meta)},
                {"displayTimeUnit", "ms"},
                {"otherData", {{"plan", p.path},
                               {"model", p.model_file},
                               {"generator", p.generator},
                               {"timing", timing},
                               {"budget_bytes", p.budget_limited() ? json(p.budget_bytes) : json(nullptr)},
                               {"peak_bytes_without_plan", p.peak_bytes},
                               {"resident_peak_bytes", a.resident_peak}}}};
  write_file_atomically(o.output, trace.dump() + "\n");
  fmt::print("{}: {} events ({} timing) written to {}\n", p.path, trace["traceEvents"].size(),
             clock.predicted ? "predicted" : "assumed", o.output);
  return 0;
}

}  // namespace inspect
