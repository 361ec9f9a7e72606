// autovm-inspect verify: the independent verifier. Checks the plan's structure and rules 1-7 of
// docs/execution-model.md from the steps and actions alone, sharing no code with the planner.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <cstdio>
#include <limits>
#include <map>
#include <set>

#include "commands.h"
#include "common.h"
#include "residency.h"

namespace inspect {
namespace {

constexpr int kRuleCount = 8;  // 0 (structure) and 1-7
constexpr std::array<const char*, kRuleCount> kRuleNames = {
    "structure",
    "resident at every use",
    "within the budget",
    "no transfer during a use",
    "prefetch after evict, recompute after discard",
    "recompute inputs resident",
    "off intervals within the lifetime, disjoint",
    "arena offsets disjoint in time and space",
};
constexpr size_t kPrinted = 20;

class Verifier {
 public:
  Verifier(const Plan& plan, int64_t budget) : p_(plan), budget_(budget) {}

  std::vector<Issue> run() {
    issues_ = check_indices(p_);
    if (!issues_.empty()) return std::move(issues_);
    a_ = analyze(p_);
    analysed_ = true;
    check_lifetimes();
    check_tensors();
    check_actions();
    check_statistics();
    check_uses();          // rule 1
    check_budget();        // rule 2
    check_transfers();     // rule 3
    check_recomputes();    // rule 5
    check_arena();         // rule 7
    issues_.insert(issues_.end(), a_.pairing_issues.begin(), a_.pairing_issues.end());  // 4, 6
    std::stable_sort(issues_.begin(), issues_.end(), [](const Issue& x, const Issue& y) {
      return x.rule != y.rule ? x.rule < y.rule : x.step < y.step;
    });
    return std::move(issues_);
  }

  // The analysis, or nullptr when the ids were out of range and nothing could be analysed.
  const Analysis* analysis() const { return analysed_ ? &a_ : nullptr; }

 private:
  void add(int rule, StepIndex step, TensorId tensor, std::string message) {
    issues_.push_back(Issue{rule, step, tensor, std::move(message)});
  }
  const Tensor& tensor(TensorId t) const { return p_.tensors[static_cast<size_t>(t)]; }
  std::string what(const Action& a) const { return describe(a, p_.step_count()); }

  // The plan's lifetimes against the ones the steps give.
  void check_lifetimes() {
    if (p_.lifetimes.size() != p_.tensors.size()) {
      add(0, -1, -1, fmt::format("the plan has {} lifetimes for {} tensors",
                                 p_.lifetimes.size(), p_.tensors.size()));
      return;
    }
    for (size_t i = 0; i < p_.lifetimes.size(); ++i) {
      const Lifetime& got = p_.lifetimes[i];
      const Lifetime& want = a_.lifetimes[i];
      if (got.tensor != static_cast<TensorId>(i)) {
        add(0, -1, -1, fmt::format("lifetimes[{}] is for tensor {}; lifetimes must be in tensor "
                                   "order", i, got.tensor));
        continue;
      }
      if (got.first != want.first || got.last != want.last)
        add(0, want.first, got.tensor,
            fmt::format("lifetime is [{}, {}] in the plan, but the steps make it [{}, {}]",
                        got.first, got.last, want.first, want.last));
      else if (got.uses != want.uses)
        add(0, want.first, got.tensor,
            fmt::format("uses are [{}] in the plan, but the steps use it at [{}]",
                        join(got.uses, ", "), join(want.uses, ", ")));
      if (got.persistent != want.persistent)
        add(0, -1, got.tensor, fmt::format("persistent is {} in the plan, but a {} is {}",
                                           got.persistent, name(tensor(got.tensor).kind),
                                           want.persistent ? "persistent" : "not persistent"));
    }
  }

  void check_tensors() {
    for (const Tensor& t : p_.tensors) {
      int64_t bytes = t.element_bytes;
      bool valid_shape = true;
      for (int64_t d : t.shape) valid_shape &= d >= 0 && !__builtin_mul_overflow(bytes, d, &bytes);
      if (!valid_shape)
        add(0, -1, t.id, fmt::format("shape [{}] has a negative or huge dimension", join(t.shape, ", ")));
      else if (t.bytes != bytes)
        add(0, -1, t.id, fmt::format("bytes is {}, but shape [{}] of {} makes {}", t.bytes,
                                     join(t.shape, ", "), t.dtype, bytes));
      if (t.bytes < 0 || t.offset < 0 || t.offset > p_.arena_bytes - t.bytes)
        add(0, -1, t.id, fmt::format("{} bytes at offset {} do not lie in the arena of {} bytes",
                                     t.bytes, t.offset, p_.arena_bytes));
    }
  }

  void check_actions() {
    static const std::set<std::string> kAdvice = {"read_mostly", "preferred_location_device",
                                                  "preferred_location_host", "accessed_by_device"};
    // (tensor, step reading it) -> the first read_remote that says so
    std::map<std::pair<TensorId, StepIndex>, const Action*> remote_read_at;
    for (const Action& a : p_.actions)
      if (a.kind == ActionKind::read_remote) remote_read_at.emplace(std::pair{a.tensor, a.ready_before_step}, &a);
    auto at_last_use_only = [&](TensorKind k) {
      return std::find(p_.movable_at_last_use.begin(), p_.movable_at_last_use.end(), k) !=
             p_.movable_at_last_use.end();
    };
    for (const Action& a : p_.actions) {
      const Tensor& t = tensor(a.tensor);
      auto bad = [&](const std::string& why) { add(0, a.after_step + 1, a.tensor, what(a) + ": " + why); };
      if (a.kind != ActionKind::advise && a.bytes != t.bytes)
        bad(fmt::format("{} {} bytes of a {}-byte tensor",
                        a.kind == ActionKind::read_remote ? "reads" : "moves", a.bytes, t.bytes));
      const bool last_use_kind = at_last_use_only(t.kind);
      if (last_use_kind && a.kind != ActionKind::evict && a.kind != ActionKind::read_remote &&
          a.kind != ActionKind::advise)
        bad(fmt::format("a tensor of kind {} leaves only to be read remotely "
                        "(options.movable_at_last_use): an evict and a read_remote, nothing else",
                        name(t.kind)));
      if (last_use_kind && a.kind == ActionKind::evict &&
          (a.ready_before_step != a.after_step + 1 ||
           !remote_read_at.count({a.tensor, a.ready_before_step})))
        bad(fmt::format("a tensor of kind {} leaves only to be read remotely by the next step "
                        "(options.movable_at_last_use), and step {} does not read '{}' remotely",
                        name(t.kind), a.after_step + 1, t.name));
      if (a.kind != ActionKind::advise && p_.movable && !last_use_kind &&
          std::find(p_.movable->begin(), p_.movable->end(), t.kind) == p_.movable->end()) {
        std::vector<std::string_view> allowed;
        for (TensorKind k : *p_.movable) allowed.push_back(name(k));
        bad(fmt::format("a tensor of kind {} may not leave the GPU: options.movable allows only [{}]",
                        name(t.kind), join(allowed, ", ")));
      }
      switch (a.kind) {
        case ActionKind::evict:
        case ActionKind::prefetch:
          if (a.ready_before_step <= a.after_step)
            bad("ready_before_step must come after after_step");
          break;
        case ActionKind::discard:
          if (a.ready_before_step != a.after_step + 1)
            bad(fmt::format("a discard has ready_before_step = after_step + 1, not {}",
                            a.ready_before_step));
          break;
        case ActionKind::recompute: {
          if (a.after_step != a.ready_before_step - 1)
            bad(fmt::format("a recompute has after_step = ready_before_step - 1, not {}", a.after_step));
          const Step& src = p_.steps[static_cast<size_t>(a.source_step)];
          if (std::find(src.outputs.begin(), src.outputs.end(), a.tensor) == src.outputs.end())
            bad(fmt::format("step {} does not write '{}'", src.label(), t.name));
          if (p_.recompute_ops &&
              std::find(p_.recompute_ops->begin(), p_.recompute_ops->end(), src.op) ==
                  p_.recompute_ops->end())
            bad(fmt::format("step {} runs {}, which options.recompute_ops does not allow ([{}])",
                            src.label(), src.op, join(*p_.recompute_ops, ", ")));
          break;
        }
        case ActionKind::read_remote:
          if (a.after_step != a.ready_before_step - 1)
            bad(fmt::format("a read_remote has after_step = ready_before_step - 1, not {}", a.after_step));
          if (remote_read_at.at({a.tensor, a.ready_before_step}) != &a)
            bad(fmt::format("a second read_remote of '{}' at step {}: one says it", t.name,
                            a.ready_before_step));
          break;
        case ActionKind::advise:
          if (!kAdvice.count(a.advice))
            bad(fmt::format("unknown advice '{}'; expected read_mostly, preferred_location_device, "
                            "preferred_location_host or accessed_by_device", a.advice));
          break;
      }
    }
  }

  void check_statistics() {
    if (p_.peak_bytes != a_.live_peak)
      add(0, a_.live_peak_step, -1,
          fmt::format("statistics.peak_bytes is {}, but the lifetimes give a peak of {} live bytes",
                      p_.peak_bytes, a_.live_peak));
    if (p_.prediction && p_.prediction->resident_peak_bytes &&
        *p_.prediction->resident_peak_bytes != a_.resident_peak)
      add(0, a_.resident_peak_step, -1,
          fmt::format("statistics.prediction.resident_peak_bytes is {}, but the actions give a "
                      "resident peak of {}", *p_.prediction->resident_peak_bytes, a_.resident_peak));
  }

  // Rule 1: every tensor a step reads, writes or uses as workspace is resident at that step,
  // except where the step reads it remotely: there it is off, by an evict (its host copy), and
  // the step only reads it. Each read_remote that does not hold is one issue, which also covers
  // the use it was meant to excuse.
  void check_uses() {
    // (input, step) -> the first recompute that reads it just before that step.
    std::map<std::pair<TensorId, StepIndex>, size_t> read_by_recompute;
    for (size_t j = 0; j < p_.actions.size(); ++j) {
      const Action& r = p_.actions[j];
      if (r.kind == ActionKind::recompute)
        for (TensorId in : p_.steps[static_cast<size_t>(r.source_step)].inputs)
          read_by_recompute.emplace(std::pair{in, r.ready_before_step}, j);
    }
    std::set<std::pair<TensorId, StepIndex>> excused;  // read remotely, valid or reported
    for (size_t i = 0; i < p_.actions.size(); ++i) {
      const Action& a = p_.actions[i];
      if (a.kind != ActionKind::read_remote || !excused.insert({a.tensor, a.ready_before_step}).second)
        continue;  // a second one at the same step is a structure issue
      std::string why = remote_read_problem(a, read_by_recompute);
      if (!why.empty())
        add(1, a.ready_before_step, a.tensor,
            fmt::format("actions[{}] (remote read of '{}' at step {}): {}", i,
                        tensor(a.tensor).name, a.ready_before_step, why));
    }
    std::vector<TensorId> used;
    for (const Step& s : p_.steps) {
      used.assign(s.inputs.begin(), s.inputs.end());
      used.insert(used.end(), s.outputs.begin(), s.outputs.end());
      if (s.workspace != -1) used.push_back(s.workspace);
      std::sort(used.begin(), used.end());
      used.erase(std::unique(used.begin(), used.end()), used.end());
      for (TensorId t : used) {
        const OffInterval* iv = a_.off_at(t, s.id);
        if (!iv || excused.count({t, s.id})) continue;
        add(1, s.id, t, fmt::format("used while off the GPU (off [{}, {}]: {}{})", iv->from,
                                    iv->through, off_cause(*iv),
                                    iv->on_action < 0 ? ", never brought back" : ""));
      }
    }
  }

  // Why a read_remote does not hold (execution model, "Remote reads"), or "" when it does.
  std::string remote_read_problem(
      const Action& a, const std::map<std::pair<TensorId, StepIndex>, size_t>& read_by_recompute) const {
    const StepIndex s = a.ready_before_step;
    const Step& step = p_.steps[static_cast<size_t>(s)];
    auto has = [&](const std::vector<TensorId>& list) {
      return std::find(list.begin(), list.end(), a.tensor) != list.end();
    };
    if (!has(step.inputs)) return fmt::format("step {} does not read it", s);
    if (has(step.outputs)) return fmt::format("step {} writes it; a remote read only reads", s);
    if (step.workspace == a.tensor) return fmt::format("it is the workspace of step {}", s);
    auto r = read_by_recompute.find({a.tensor, s});
    if (r != read_by_recompute.end()) {
      const Action& rc = p_.actions[r->second];
      return fmt::format("the recompute of '{}' from step {} (actions[{}]) reads it just before "
                         "step {}, and a recompute does not read remotely", tensor(rc.tensor).name,
                         rc.source_step, r->second, s);
    }
    // Step s reads the tensor, so s lies in its lifetime: not off there means resident.
    const OffInterval* iv = a_.off_at(a.tensor, s);
    if (!iv)
      return fmt::format("it is resident at step {}; a remote read is of a tensor an evict took "
                         "off the GPU", s);
    if (iv->off_action >= 0 && p_.actions[static_cast<size_t>(iv->off_action)].kind != ActionKind::evict)
      return fmt::format("it is off at step {} by a discard (off [{}, {}]: {}), which keeps no "
                         "host copy to read", s, iv->from, iv->through, off_cause(*iv));
    return "";
  }

  std::string off_cause(const OffInterval& iv) const {
    if (iv.off_action < 0) return "kept on the host between training steps";
    std::string s = what(p_.actions[static_cast<size_t>(iv.off_action)]);
    if (iv.on_action >= 0) s += ", " + what(p_.actions[static_cast<size_t>(iv.on_action)]);
    return s;
  }

  // Rule 2: one issue per run of steps over the budget, at the run's highest step.
  void check_budget() {
    const StepIndex n = p_.step_count();
    size_t runs = 0;
    for (StepIndex s = 0; s < n; ++s) {
      if (a_.resident_total[static_cast<size_t>(s)] <= budget_) continue;
      StepIndex first = s, top = s;
      for (; s + 1 < n && a_.resident_total[static_cast<size_t>(s + 1)] > budget_; ++s)
        if (a_.resident_total[static_cast<size_t>(s + 1)] > a_.resident_total[static_cast<size_t>(top)])
          top = s + 1;
      int64_t bytes = a_.resident_total[static_cast<size_t>(top)];
      std::string span = first == s ? fmt::format("step {}", first) : fmt::format("steps {}-{}", first, s);
      // The larger moment at the top step: the step's own, or the one before it.
      const bool before = a_.before_total[static_cast<size_t>(top)] > a_.step_total[static_cast<size_t>(top)];
      std::string moment =
          before ? fmt::format("in the moment before step {} (its recompute chains' temporaries)", top)
                 : fmt::format("at step {}", top);
      // Naming the largest resident tensor scans every tensor: only for the runs printed.
      TensorId largest = ++runs <= kPrinted ? largest_resident(top) : -1;
      add(2, top, largest,
          fmt::format("resident bytes exceed the budget at {}: {} resident {} against {} "
                      "({} over){}", span, format_bytes(bytes), moment, format_bytes(budget_),
                      format_bytes(bytes - budget_),
                      largest < 0 ? "" : "; the tensor named is the largest resident there"));
    }
  }

  TensorId largest_resident(StepIndex s) const {
    TensorId best = -1;
    for (const Tensor& t : p_.tensors)
      if (a_.resident_at(t.id, s) && (best < 0 || t.bytes > tensor(best).bytes)) best = t.id;
    return best;
  }

  // Rule 3: no use of a tensor while it is being copied, in [after_step + 1, ready_before_step - 1].
  // A recompute before step t reads its source step's inputs at t: a use too.
  void check_transfers() {
    std::map<TensorId, std::set<StepIndex>> read_by_recompute;
    for (const Action& a : p_.actions)
      if (a.kind == ActionKind::recompute)
        for (TensorId in : p_.steps[static_cast<size_t>(a.source_step)].inputs)
          read_by_recompute[in].insert(a.ready_before_step);
    for (const Action& a : p_.actions) {
      if (a.kind != ActionKind::evict && a.kind != ActionKind::prefetch) continue;
      const std::vector<StepIndex>& uses = a_.lifetimes[static_cast<size_t>(a.tensor)].uses;
      auto it = std::lower_bound(uses.begin(), uses.end(), a.after_step + 1);
      if (it != uses.end() && *it <= a.ready_before_step - 1) {
        add(3, *it, a.tensor,
            fmt::format("{} is in flight during a use (no use may fall in [{}, {}])", what(a),
                        a.after_step + 1, a.ready_before_step - 1));
        continue;
      }
      auto reads = read_by_recompute.find(a.tensor);
      if (reads == read_by_recompute.end()) continue;
      auto r = reads->second.lower_bound(a.after_step + 1);
      if (r != reads->second.end() && *r <= a.ready_before_step - 1)
        add(3, *r, a.tensor,
            fmt::format("{} is in flight where a recompute before {} reads it (no use may fall "
                        "in [{}, {}])", what(a), step_label(p_, *r), a.after_step + 1,
                        a.ready_before_step - 1));
    }
  }

  // Rule 5: the inputs of a recompute's source step are resident at its ready_before_step, and
  // an input recomputed before the same step (a chain) is recomputed by an earlier action.
  void check_recomputes() {
    std::map<std::pair<TensorId, StepIndex>, size_t> first_made;  // (tensor, step) -> action
    for (size_t i = 0; i < p_.actions.size(); ++i) {
      const Action& a = p_.actions[i];
      if (a.kind == ActionKind::recompute) first_made.emplace(std::pair{a.tensor, a.ready_before_step}, i);
    }
    for (size_t i = 0; i < p_.actions.size(); ++i) {
      const Action& a = p_.actions[i];
      if (a.kind != ActionKind::recompute) continue;
      const Step& src = p_.steps[static_cast<size_t>(a.source_step)];
      for (TensorId in : src.inputs) {
        if (!a_.resident_at(in, a.ready_before_step)) {
          add(5, a.ready_before_step, a.tensor,
              fmt::format("{} needs input '{}', which is not resident at {}", what(a),
                          tensor(in).name, step_label(p_, a.ready_before_step)));
          continue;
        }
        auto made = first_made.find({in, a.ready_before_step});
        if (made != first_made.end() && made->second > i)
          add(5, a.ready_before_step, a.tensor,
              fmt::format("{} needs input '{}', which actions[{}] recomputes before the same "
                          "step but is listed after it (a chain runs in the order listed)",
                          what(a), tensor(in).name, made->second));
      }
    }
  }

  // Rule 7, by a sweep over time: the tensors live at a step are kept ordered by offset; a new
  // one can only overlap its neighbours when the ones already there are disjoint. A tensor found
  // overlapping is reported and left out, so the set stays disjoint. O(n log n).
  void check_arena() {
    struct Event {
      StepIndex step;
      bool insert;  // removals (at last + 1) come first at a step
      TensorId tensor;
    };
    std::vector<Event> events;
    for (const Tensor& t : p_.tensors) {
      // Empty tensors take no space; ones outside the arena are reported by check_tensors().
      if (t.bytes <= 0 || t.offset < 0 || t.offset > p_.arena_bytes - t.bytes) continue;
      const Lifetime& l = a_.lifetimes[static_cast<size_t>(t.id)];
      events.push_back({l.first, true, t.id});
      events.push_back({l.last + 1, false, t.id});
    }
    std::sort(events.begin(), events.end(), [](const Event& x, const Event& y) {
      if (x.step != y.step) return x.step < y.step;
      if (x.insert != y.insert) return !x.insert;
      return x.tensor < y.tensor;
    });
    std::set<std::pair<int64_t, TensorId>> live;  // (offset, tensor)
    std::vector<bool> placed(p_.tensors.size(), false);
    for (const Event& e : events) {
      const Tensor& t = tensor(e.tensor);
      if (!e.insert) {
        if (placed[static_cast<size_t>(t.id)]) live.erase({t.offset, t.id});
        continue;
      }
      auto next = live.lower_bound({t.offset, -1});
      TensorId clash = -1;
      if (next != live.end() && next->first < t.offset + t.bytes) clash = next->second;
      if (next != live.begin()) {
        const Tensor& prev = tensor(std::prev(next)->second);
        if (prev.offset + prev.bytes > t.offset) clash = prev.id;
      }
      if (clash < 0) {
        live.insert({t.offset, t.id});
        placed[static_cast<size_t>(t.id)] = true;
        continue;
      }
      const Tensor& o = tensor(clash);
      const Lifetime& lo = a_.lifetimes[static_cast<size_t>(o.id)];
      const Lifetime& lt = a_.lifetimes[static_cast<size_t>(t.id)];
      add(7, e.step, t.id,
          fmt::format("[{}, {}) overlaps '{}' [{}, {}) while both are live (lifetimes [{}, {}] "
                      "and [{}, {}])", t.offset, t.offset + t.bytes, o.name, o.offset,
                      o.offset + o.bytes, lt.first, lt.last, lo.first, lo.last));
    }
  }

  const Plan& p_;
  int64_t budget_;
  Analysis a_;
  bool analysed_ = false;
  std::vector<Issue> issues_;
};

std::string rule_label(int rule) { return rule == 0 ? "structure" : fmt::format("rule {}", rule); }

std::string issue_line(const Plan& p, const Issue& i) {
  std::string where;
  if (i.step >= 0 || i.rule != 0) where += ", " + step_label(p, i.step);
  if (i.tensor >= 0) {
    const Tensor& t = p.tensors[static_cast<size_t>(i.tensor)];
    where += fmt::format(", tensor '{}' ({}, {})", t.name, name(t.kind), format_bytes(t.bytes));
  }
  std::string rule = i.rule == 0 ? rule_label(0)
                                 : fmt::format("{} ({})", rule_label(i.rule), kRuleNames[static_cast<size_t>(i.rule)]);
  return fmt::format("{}{}: {}", rule, where, i.message);
}

std::array<int64_t, kRuleCount> count_by_rule(const std::vector<Issue>& issues) {
  std::array<int64_t, kRuleCount> counts{};
  for (const Issue& i : issues) ++counts[static_cast<size_t>(i.rule)];
  return counts;
}

void print_text(const Plan& p, const std::vector<Issue>& issues, const Analysis* a, int64_t budget,
                bool budget_given) {
  std::string budget_text = budget == std::numeric_limits<int64_t>::max()
                                ? "no budget"
                                : fmt::format("budget {}{}", format_bytes(budget),
                                              budget_given ? " (--budget)" : "");
  if (issues.empty()) {
    fmt::print("{}: valid (structure and rules 1-7 of autovm-1): {} tensors, {} steps, {} actions; "
               "resident peak {} at step {}, {}\n", p.path, p.tensors.size(), p.steps.size(),
               p.actions.size(), format_bytes(a->resident_peak), a->resident_peak_step, budget_text);
    return;
  }
  fmt::print("{}: INVALID: {} violation{} ({})\n", p.path, issues.size(), issues.size() == 1 ? "" : "s",
             budget_text);
  for (size_t i = 0; i < issues.size() && i < kPrinted; ++i)
    fmt::print("  {}\n", issue_line(p, issues[i]));
  if (issues.size() > kPrinted) fmt::print("  ... and {} more\n", issues.size() - kPrinted);
  std::vector<std::string> counts;
  auto by_rule = count_by_rule(issues);
  for (int r = 0; r < kRuleCount; ++r)
    if (by_rule[static_cast<size_t>(r)] > 0)
      counts.push_back(fmt::format("{}: {}", rule_label(r), by_rule[static_cast<size_t>(r)]));
  fmt::print("by rule: {}\n", join(counts, ", "));
}

void print_json(const Plan& p, const std::vector<Issue>& issues, const Analysis* a, int64_t budget) {
  using nlohmann::json;
  json out = json::object();
  out["plan"] = p.path;
  out["valid"] = issues.empty();
  out["budget_bytes"] = budget;
  out["resident_peak_bytes"] = a ? json(a->resident_peak) : json(nullptr);
  out["resident_peak_step"] = a ? json(a->resident_peak_step) : json(nullptr);
  out["violation_count"] = issues.size();
  json by_rule = json::object();
  auto counts = count_by_rule(issues);
  for (int r = 0; r < kRuleCount; ++r)
    by_rule[r == 0 ? "structure" : std::to_string(r)] = counts[static_cast<size_t>(r)];
  out["violations_by_rule"] = by_rule;
  json list = json::array();
  for (const Issue& i : issues) {
    json v = {{"rule", i.rule},
              {"rule_name", kRuleNames[static_cast<size_t>(i.rule)]},
              {"step", i.step >= 0 && i.step < p.step_count() ? json(i.step) : json(nullptr)},
              {"tensor", i.tensor >= 0 ? json(i.tensor) : json(nullptr)},
              {"tensor_name", i.tensor >= 0 ? json(p.tensors[static_cast<size_t>(i.tensor)].name)
                                            : json(nullptr)},
              {"message", i.message}};
    list.push_back(std::move(v));
  }
  out["violations"] = std::move(list);
  fmt::print("{}\n", out.dump(2));
}

}  // namespace

int run_verify(const Options& o) { return verify(read_plan(o.plans.at(0)), o); }

int verify(const Plan& p, const Options& o) {
  int64_t budget = o.budget.value_or(p.budget_bytes);
  Verifier v(p, budget);
  std::vector<Issue> issues = v.run();
  const Analysis* a = v.analysis();
  if (o.json) print_json(p, issues, a, budget);
  else print_text(p, issues, a, budget, o.budget.has_value());
  return issues.empty() ? static_cast<int>(Exit::ok) : static_cast<int>(Exit::verification_failed);
}

}  // namespace inspect
