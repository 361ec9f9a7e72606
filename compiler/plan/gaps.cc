#include "plan/gaps.h"

#include <fmt/format.h>

#include <algorithm>

#include "util/error.h"
#include "util/size.h"

namespace autovm {

std::vector<Gap> find_gaps(const TrainingGraph& g, const std::vector<Lifetime>& life,
                           MovableKinds movable) {
  std::vector<Gap> gaps;
  for (const Tensor& t : g.tensors) {
    const Lifetime& l = life[static_cast<size_t>(t.id)];
    if (t.bytes == 0 || l.uses.empty() || !movable.reads_remotely(t.kind)) continue;
    if (!movable.has(t.kind)) {  // at its last use only: the last step of the tail a remote
      if (!l.persistent && l.uses.back() < l.last)  // read leaves (its lifetime's end)
        gaps.push_back({t.id, l.last - 1, l.last + 1, false, true});
      continue;
    }
    for (size_t k = 1; k < l.uses.size(); ++k)
      if (l.uses[k] > l.uses[k - 1] + 1) gaps.push_back({t.id, l.uses[k - 1], l.uses[k], false});
    if (!l.persistent && l.uses.back() < l.last)
      gaps.push_back({t.id, l.uses.back(), l.last + 1, false, true});
    if (l.persistent) {
      StepIndex first = l.uses.front(), last = l.uses.back();
      bool room = first > 0 || last < g.step_count() - 1;
      if (room) gaps.push_back({t.id, last, first, true});
    }
  }
  return gaps;
}

StepIndex resident_until(const Lifetime& l, TensorKind kind, MovableKinds movable) {
  const bool tail = movable.at_last_use_only(kind) && !l.uses.empty() && l.uses.back() < l.last;
  return tail ? l.last - 1 : l.last;  // off at the step that reads it remotely alone
}

std::vector<int64_t> unavoidable_bytes(const TrainingGraph& g, const std::vector<Lifetime>& life,
                                       MovableKinds movable) {
  size_t n = static_cast<size_t>(g.step_count());
  std::vector<int64_t> delta(n + 1, 0);
  auto add = [&](StepIndex from, StepIndex to, int64_t bytes) {  // [from, to] inclusive
    if (from > to) return;
    delta[static_cast<size_t>(from)] += bytes;
    delta[static_cast<size_t>(to) + 1] -= bytes;
  };
  for (const Tensor& t : g.tensors) {
    const Lifetime& l = life[static_cast<size_t>(t.id)];
    if (t.bytes == 0) continue;
    if (!movable.has(t.kind)) {  // resident over its whole lifetime, or but for its tail gap
      if (l.persistent) add(0, static_cast<StepIndex>(n) - 1, t.bytes);
      else add(l.first, resident_until(l, t.kind, movable), t.bytes);
      continue;
    }
    if (l.uses.empty()) {
      add(l.first, l.last, t.bytes);
      continue;
    }
    for (StepIndex s : l.uses) add(s, s, t.bytes);
    // Before its first use a non-persistent tensor cannot be off (nothing evicted it); a
    // persistent one is covered there, and after its last use, by its wrap-around gap.
    if (!l.persistent) add(l.first, l.uses.front() - 1, t.bytes);
  }
  std::vector<int64_t> out(n);
  int64_t run = 0;
  for (size_t s = 0; s < n; ++s) out[s] = run += delta[s];
  return out;
}

void check_budget_feasible(const TrainingGraph& g, const std::vector<Lifetime>& life,
                           int64_t budget, MovableKinds movable) {
  std::vector<int64_t> need = unavoidable_bytes(g, life, movable);
  auto worst = std::max_element(need.begin(), need.end());
  if (worst == need.end() || *worst <= budget) return;
  auto s = static_cast<StepIndex>(worst - need.begin());
  const Step& step = g.step(s);
  std::vector<TensorId> used = step.inputs;
  used.insert(used.end(), step.outputs.begin(), step.outputs.end());
  if (step.workspace != kNoTensor) used.push_back(step.workspace);
  std::sort(used.begin(), used.end());
  used.erase(std::unique(used.begin(), used.end()), used.end());
  auto by_size = [&](TensorId a, TensorId b) {
    return g.tensor(a).bytes != g.tensor(b).bytes ? g.tensor(a).bytes > g.tensor(b).bytes : a < b;
  };
  std::sort(used.begin(), used.end(), by_size);
  if (!movable.all()) {  // then the live tensors of kinds that may not move
    std::vector<TensorId> fixed;
    for (const Tensor& t : g.tensors) {
      const Lifetime& l = life[static_cast<size_t>(t.id)];
      bool live = l.persistent || (l.first <= s && s <= l.last);
      if (t.bytes > 0 && live && !movable.has(t.kind) &&
          !std::binary_search(l.uses.begin(), l.uses.end(), s))
        fixed.push_back(t.id);
    }
    std::sort(fixed.begin(), fixed.end(), by_size);
    used.insert(used.end(), fixed.begin(), fixed.end());
  }
  std::string list;
  for (size_t i = 0; i < used.size() && i < 6; ++i)
    list += fmt::format("{}{} ({})", i ? ", " : "", g.tensor(used[i]).name,
                        format_bytes_short(g.tensor(used[i]).bytes));
  if (used.size() > 6) list += fmt::format(" and {} more", used.size() - 6);
  throw Error(ErrorKind::infeasible,
              fmt::format("the budget {} is too small: step {} ({} {}{}) needs {} resident at "
                          "once: {}. The smallest budget that works is {} (--budget min finds "
                          "it); or lower --batch{}",
                          format_bytes(budget), s, name(step.phase), step.op,
                          step.node.empty() ? "" : " " + step.node, format_bytes(*worst), list,
                          format_bytes(*worst),
                          movable.all() ? "" : ", or let more kinds move (--movable)"));
}

}  // namespace autovm
