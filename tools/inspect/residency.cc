#include "residency.h"

#include <fmt/format.h>

#include <algorithm>
#include <optional>

#include "common.h"

namespace inspect {

std::vector<Issue> check_indices(const Plan& p) {
  std::vector<Issue> issues;
  auto add = [&](StepIndex step, TensorId tensor, std::string message) {
    issues.push_back(Issue{0, step, tensor, std::move(message)});
  };
  const auto tensor_count = static_cast<TensorId>(p.tensors.size());
  const StepIndex n = p.step_count();
  if (n == 0) add(-1, -1, "the plan has no steps");
  for (size_t i = 0; i < p.tensors.size(); ++i)
    if (p.tensors[i].id != static_cast<TensorId>(i))
      add(-1, -1, fmt::format("tensors[{}] has id {}; tensor ids must equal their positions", i,
                              p.tensors[i].id));
  for (size_t i = 0; i < p.steps.size(); ++i) {
    const Step& s = p.steps[i];
    if (s.id != static_cast<StepIndex>(i)) {
      add(-1, -1, fmt::format("steps[{}] has id {}; steps must be sorted, ids equal to their "
                              "positions", i, s.id));
      continue;
    }
    auto check = [&](TensorId t, const char* role) {
      if (t < 0 || t >= tensor_count)
        add(s.id, -1, fmt::format("{} tensor id {} is out of range [0, {})", role, t, tensor_count));
    };
    for (TensorId t : s.inputs) check(t, "input");
    for (TensorId t : s.outputs) check(t, "output");
    if (s.workspace != -1) check(s.workspace, "workspace");
  }
  for (size_t i = 0; i < p.actions.size(); ++i) {
    const Action& a = p.actions[i];
    auto bad = [&](const std::string& what) {
      add(-1, -1, fmt::format("actions[{}] ({}): {}", i, name(a.kind), what));
    };
    if (a.tensor < 0 || a.tensor >= tensor_count)
      bad(fmt::format("tensor id {} is out of range [0, {})", a.tensor, tensor_count));
    if (a.after_step < -1 || a.after_step >= n)
      bad(fmt::format("after_step {} is out of range [-1, {}]", a.after_step, n - 1));
    if (a.ready_before_step < 0 || a.ready_before_step > n)
      bad(fmt::format("ready_before_step {} is out of range [0, {}]", a.ready_before_step, n));
    if (a.kind == ActionKind::recompute && (a.source_step < 0 || a.source_step >= n))
      bad(fmt::format("source_step {} is out of range [0, {}]", a.source_step, n - 1));
    if (a.kind == ActionKind::read_remote && a.ready_before_step == n)
      bad(fmt::format("ready_before_step {} is out of range [0, {}]: it is the step that reads "
                      "the tensor remotely", a.ready_before_step, n - 1));
  }
  return issues;
}

namespace {

std::vector<Lifetime> compute_lifetimes(const Plan& p) {
  std::vector<Lifetime> life(p.tensors.size());
  std::vector<bool> seen(p.tensors.size(), false);
  for (size_t i = 0; i < life.size(); ++i) life[i].tensor = static_cast<TensorId>(i);
  auto touch = [&](TensorId t, StepIndex s) {
    auto i = static_cast<size_t>(t);
    Lifetime& l = life[i];
    if (!seen[i]) {
      seen[i] = true;
      l.first = s;
    }
    if (l.uses.empty() || l.uses.back() != s) l.uses.push_back(s);
    l.last = s;
  };
  for (const Step& s : p.steps) {
    for (TensorId t : s.inputs) touch(t, s.id);
    for (TensorId t : s.outputs) touch(t, s.id);
    if (s.workspace != -1) touch(s.workspace, s.id);
  }
  for (const Tensor& t : p.tensors) {
    Lifetime& l = life[static_cast<size_t>(t.id)];
    if (persistent(t.kind)) {
      l.first = 0;
      l.last = p.step_count() - 1;
      l.persistent = true;
    } else if (t.kind == TensorKind::input || t.kind == TensorKind::label) {
      l.first = 0;
    }
  }
  return life;
}

bool goes_off(ActionKind k) { return k == ActionKind::evict || k == ActionKind::discard; }
// read_remote and advise: no residency of their own, no part of the pairing.
bool changes_residency(ActionKind k) { return k != ActionKind::read_remote && k != ActionKind::advise; }

// The step from which an action changes residency (see the header).
StepIndex effect_step(const Action& a) {
  switch (a.kind) {
    case ActionKind::evict: return a.ready_before_step;
    case ActionKind::discard: return a.after_step + 1;
    case ActionKind::prefetch: return a.after_step + 1;
    case ActionKind::recompute: return a.ready_before_step;
    case ActionKind::read_remote:
    case ActionKind::advise: break;
  }
  return a.after_step + 1;
}

// Walks one tensor's actions in order and pairs them into off intervals.
void pair_actions(const Plan& p, TensorId t, const std::vector<int64_t>& actions, Analysis& out) {
  const Lifetime& life = out.lifetimes[static_cast<size_t>(t)];
  const Tensor& tensor = p.tensors[static_cast<size_t>(t)];
  const StepIndex n = p.step_count();
  auto issue = [&](int rule, StepIndex step, std::string message) {
    out.pairing_issues.push_back(Issue{rule, step, t, std::move(message)});
  };
  auto what = [&](int64_t i) { return describe(p.actions[static_cast<size_t>(i)], n); };

  // A persistent tensor evicted after its last use on the GPU (every use after the evict reads
  // it remotely, if any does) stays on the host until the next training step, so it starts
  // this one off the GPU (execution model, rule 4).
  bool kept_on_host = false;
  if (persistent(tensor.kind) && !life.uses.empty())
    for (int64_t i : actions) {
      const Action& a = p.actions[static_cast<size_t>(i)];
      if (a.kind != ActionKind::evict) continue;
      auto later = std::upper_bound(life.uses.begin(), life.uses.end(), a.after_step);
      if (std::all_of(later, life.uses.end(), [&](StepIndex u) { return out.read_remotely(t, u); }))
        kept_on_host = true;
    }
  std::optional<OffInterval> open;  // the tensor is off the GPU since open->from
  if (kept_on_host) open = OffInterval{0, 0, -1, -1};

  std::vector<OffInterval>& intervals = out.off[static_cast<size_t>(t)];
  auto close = [&](OffInterval iv) {
    if (iv.from > iv.through) return;
    if (iv.from < life.first || iv.through > life.last) {
      issue(6, iv.from < life.first ? iv.from : iv.through,
            fmt::format("off interval [{}, {}] ({}{}) lies outside its lifetime [{}, {}]", iv.from,
                        iv.through, iv.off_action < 0 ? "kept on the host" : what(iv.off_action),
                        iv.on_action < 0 ? "" : ", " + what(iv.on_action), life.first, life.last));
    }
    intervals.push_back(iv);
  };
  for (int64_t i : actions) {
    const Action& a = p.actions[static_cast<size_t>(i)];
    const StepIndex at = effect_step(a);
    if (goes_off(a.kind)) {
      if (at > life.last) continue;  // takes effect after the lifetime: changes nothing here
      if (open) {
        issue(6, at, fmt::format("{} while it is already off the GPU (since step {}): off "
                                 "intervals overlap", what(i), open->from));
        continue;
      }
      open = OffInterval{at, 0, i, -1};
      continue;
    }
    if (!open) {
      issue(4, at, fmt::format("{} with no {} before it", what(i),
                               a.kind == ActionKind::prefetch ? "evict" : "discard"));
      continue;
    }
    OffInterval iv = *open;
    open.reset();
    iv.through = at - 1;
    iv.on_action = i;
    const ActionKind before = iv.off_action < 0 ? ActionKind::evict
                                                : p.actions[static_cast<size_t>(iv.off_action)].kind;
    const ActionKind needed = a.kind == ActionKind::prefetch ? ActionKind::evict : ActionKind::discard;
    if (before != needed) {
      issue(4, at, fmt::format("{} follows {}, not {}", what(i),
                               iv.off_action < 0 ? "the start of the step" : what(iv.off_action),
                               a.kind == ActionKind::prefetch ? "an evict" : "a discard"));
    } else if (iv.off_action >= 0 && iv.from > iv.through) {
      issue(4, at, fmt::format("{} does not follow {}: it takes effect before the tensor is off",
                               what(i), what(iv.off_action)));
    }
    close(iv);
  }
  if (open) {
    open->through = life.last;
    close(*open);
  }
}

void add_interval(std::vector<BytesByKind>& delta, StepIndex first, StepIndex last, size_t kind,
                  int64_t bytes) {
  delta[static_cast<size_t>(first)][kind] += bytes;
  delta[static_cast<size_t>(last) + 1][kind] -= bytes;
}

void accumulate(const std::vector<BytesByKind>& delta, std::vector<BytesByKind>& by_kind,
                std::vector<int64_t>& total, int64_t& peak, StepIndex& peak_step) {
  const size_t n = delta.size() - 1;
  by_kind.assign(n, BytesByKind{});
  total.assign(n, 0);
  BytesByKind running{};
  peak = 0;
  peak_step = 0;
  for (size_t s = 0; s < n; ++s) {
    for (size_t k = 0; k < running.size(); ++k) {
      running[k] += delta[s][k];
      total[s] += running[k];
    }
    by_kind[s] = running;
    if (total[s] > peak) {
      peak = total[s];
      peak_step = static_cast<StepIndex>(s);
    }
  }
}

}  // namespace

Analysis analyze(const Plan& p) {
  Analysis out;
  out.lifetimes = compute_lifetimes(p);
  out.off.resize(p.tensors.size());

  out.temporaries.resize(p.tensors.size());
  out.remote_reads.resize(p.tensors.size());
  out.remote_read_bytes.assign(static_cast<size_t>(p.step_count()), 0);
  std::vector<std::vector<int64_t>> by_tensor(p.tensors.size());
  for (size_t i = 0; i < p.actions.size(); ++i) {
    const Action& a = p.actions[i];
    if (a.kind == ActionKind::read_remote)
      out.remote_reads[static_cast<size_t>(a.tensor)].push_back(a.ready_before_step);
    if (!changes_residency(a.kind)) continue;
    const Lifetime& l = out.lifetimes[static_cast<size_t>(a.tensor)];
    if (a.kind == ActionKind::recompute && !l.persistent && a.ready_before_step > l.last &&
        a.ready_before_step < p.step_count()) {
      out.temporaries[static_cast<size_t>(a.tensor)].push_back(a.ready_before_step);
      continue;
    }
    by_tensor[static_cast<size_t>(a.tensor)].push_back(static_cast<int64_t>(i));
  }
  for (auto* per_tensor : {&out.temporaries, &out.remote_reads})
    for (auto& steps : *per_tensor) {
      std::sort(steps.begin(), steps.end());
      steps.erase(std::unique(steps.begin(), steps.end()), steps.end());
    }
  for (const Tensor& t : p.tensors)
    for (StepIndex s : out.remote_reads[static_cast<size_t>(t.id)])
      out.remote_read_bytes[static_cast<size_t>(s)] += t.bytes;
  for (size_t t = 0; t < by_tensor.size(); ++t) {
    // In order of effect; at the same step a tensor goes off before it comes back.
    std::sort(by_tensor[t].begin(), by_tensor[t].end(), [&](int64_t a, int64_t b) {
      const Action& x = p.actions[static_cast<size_t>(a)];
      const Action& y = p.actions[static_cast<size_t>(b)];
      StepIndex ex = effect_step(x), ey = effect_step(y);
      if (ex != ey) return ex < ey;
      if (goes_off(x.kind) != goes_off(y.kind)) return goes_off(x.kind);
      return a < b;
    });
    pair_actions(p, static_cast<TensorId>(t), by_tensor[t], out);
  }

  const auto n = static_cast<size_t>(p.step_count());
  std::vector<BytesByKind> live(n + 1, BytesByKind{}), resident(n + 1, BytesByKind{});
  for (const Tensor& t : p.tensors) {
    const Lifetime& l = out.lifetimes[static_cast<size_t>(t.id)];
    const auto kind = static_cast<size_t>(t.kind);
    add_interval(live, l.first, l.last, kind, t.bytes);
    add_interval(resident, l.first, l.last, kind, t.bytes);
    for (const OffInterval& iv : out.off[static_cast<size_t>(t.id)]) {
      StepIndex from = std::max(iv.from, l.first), through = std::min(iv.through, l.last);
      if (from <= through) add_interval(resident, from, through, kind, -t.bytes);
    }
  }
  // The moment before each step: its temporaries in, what it allocates as it starts not yet.
  std::vector<int64_t> temporary(n, 0), allocated(n, 0);
  for (const Tensor& t : p.tensors)
    for (StepIndex at : out.temporaries[static_cast<size_t>(t.id)])
      temporary[static_cast<size_t>(at)] += t.bytes;
  for (const Step& st : p.steps) {
    int64_t& bytes = allocated[static_cast<size_t>(st.id)];
    std::vector<TensorId> outs = st.outputs;
    std::sort(outs.begin(), outs.end());
    outs.erase(std::unique(outs.begin(), outs.end()), outs.end());
    for (TensorId o : outs) {
      const Lifetime& l = out.lifetimes[static_cast<size_t>(o)];
      bool read = std::find(st.inputs.begin(), st.inputs.end(), o) != st.inputs.end();
      if (!l.persistent && l.first == st.id && !read) bytes += p.tensors[static_cast<size_t>(o)].bytes;
    }
    if (st.workspace >= 0)
      bytes += std::max<int64_t>(0, p.tensors[static_cast<size_t>(st.workspace)].bytes - st.reserve_bytes);
  }
  // Each step's own moment first; then the temporaries beyond what it allocates, as activations.
  int64_t step_peak = 0;
  StepIndex step_peak_at = 0;
  accumulate(resident, out.resident, out.step_total, step_peak, step_peak_at);
  out.before_total.resize(n);
  const auto activation = static_cast<size_t>(TensorKind::activation);
  for (size_t s = 0; s < n; ++s) {
    out.before_total[s] = out.step_total[s] - allocated[s] + temporary[s];
    if (out.before_total[s] > out.step_total[s])
      add_interval(resident, StepIndex(s), StepIndex(s), activation, out.before_total[s] - out.step_total[s]);
  }
  accumulate(live, out.live, out.live_total, out.live_peak, out.live_peak_step);
  accumulate(resident, out.resident, out.resident_total, out.resident_peak, out.resident_peak_step);
  return out;
}

Analysis analyze_checked(const Plan& p) {
  std::vector<Issue> issues = check_indices(p);
  if (!issues.empty()) {
    throw Failure(Exit::invalid_plan,
                  fmt::format("plan '{}' is inconsistent: {}{}; 'autovm-inspect verify' lists "
                              "every problem", p.path, issues.front().message,
                              issues.size() > 1 ? fmt::format(" (and {} more)", issues.size() - 1) : ""));
  }
  return analyze(p);
}

const OffInterval* Analysis::off_at(TensorId t, StepIndex s) const {
  for (const OffInterval& iv : off[static_cast<size_t>(t)])
    if (iv.from <= s && s <= iv.through) return &iv;
  return nullptr;
}

bool Analysis::read_remotely(TensorId t, StepIndex s) const {
  const std::vector<StepIndex>& steps = remote_reads[static_cast<size_t>(t)];
  return std::binary_search(steps.begin(), steps.end(), s);
}

bool Analysis::resident_at(TensorId t, StepIndex s) const {
  const Lifetime& l = lifetimes[static_cast<size_t>(t)];
  const std::vector<StepIndex>& temp = temporaries[static_cast<size_t>(t)];
  if (std::binary_search(temp.begin(), temp.end(), s)) return true;
  return l.first <= s && s <= l.last && off_at(t, s) == nullptr;
}

std::string describe(const Action& a, StepIndex n) {
  auto after = [&] {
    return a.after_step < 0 ? std::string("at the start") : fmt::format("after step {}", a.after_step);
  };
  auto ready = [&] {
    return a.ready_before_step >= n ? std::string("by the end")
                                    : fmt::format("before step {}", a.ready_before_step);
  };
  switch (a.kind) {
    case ActionKind::evict:
    case ActionKind::prefetch:
      return fmt::format("{} issued {}, ready {}", name(a.kind), after(), ready());
    case ActionKind::discard: return fmt::format("discard {}", after());
    case ActionKind::recompute:
      return fmt::format("recompute of step {} {}", a.source_step, ready());
    case ActionKind::read_remote: return fmt::format("remote read at step {}", a.ready_before_step);
    case ActionKind::advise: return fmt::format("advise {} {}", a.advice, after());
  }
  return std::string(name(a.kind));
}

std::string step_label(const Plan& p, StepIndex s) {
  if (s < 0) return "the start of the step";
  if (s >= p.step_count()) return "the end of the step";
  return "step " + p.steps[static_cast<size_t>(s)].label();
}

}  // namespace inspect
