// Remote reads at the steps whose working set exceeds the budget (remote_reads.h).
#include "plan/remote_reads.h"

#include <fmt/format.h>

#include <algorithm>

#include "plan/gaps.h"
#include "plan/residency.h"
#include "training/cost.h"
#include "util/error.h"
#include "util/size.h"

namespace autovm {
namespace {

// Subsets of at most this many eligible inputs are searched whole for the least bytes; larger
// sets (no CNN step has that many inputs) take the largest first, then drop what is not needed.
constexpr size_t kExactInputs = 12;

// The eligible inputs of step s (remote_reads.h), by tensor id.
std::vector<TensorId> eligible_inputs(const TrainingGraph& g, const std::vector<Lifetime>& life,
                                      const Step& s, MovableKinds movable) {
  std::vector<TensorId> out;
  if (training::is_matrix_product(s.op)) return out;
  for (TensorId x : s.inputs) {
    const Tensor& t = g.tensor(x);
    const Lifetime& l = life[size_t(x)];
    if (t.bytes == 0 || !movable.reads_remotely(t.kind) || l.persistent || l.uses.size() < 2 ||
        l.uses.back() != s.id || x == s.workspace)
      continue;
    if (std::find(s.outputs.begin(), s.outputs.end(), x) != s.outputs.end()) continue;
    out.push_back(x);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

int64_t bytes_of(const TrainingGraph& g, const std::vector<TensorId>& xs) {
  int64_t sum = 0;
  for (TensorId x : xs) sum += g.tensor(x).bytes;
  return sum;
}

// The eligible inputs of least total bytes that cover `need` (remote_reads.h, "chosen"); every
// one of them is needed: without any one the rest fall short. Requires the whole set to cover.
std::vector<TensorId> least_cover(const TrainingGraph& g, const std::vector<TensorId>& xs,
                                  int64_t need) {
  if (xs.size() <= kExactInputs) {
    uint32_t best = 0;
    int64_t best_bytes = -1;
    for (uint32_t mask = 1; mask < (uint32_t(1) << xs.size()); ++mask) {
      int64_t bytes = 0;
      for (size_t i = 0; i < xs.size(); ++i)
        if (mask >> i & 1) bytes += g.tensor(xs[i]).bytes;
      if (bytes < need) continue;
      // The least bytes, then the fewest tensors, then the lowest ids (lowest bits first).
      const int count = __builtin_popcount(mask), best_count = __builtin_popcount(best);
      const bool lower_ids = (mask >> __builtin_ctz(mask ^ best)) & 1;  // at the first difference
      const bool better = best_bytes < 0 || bytes < best_bytes ||
                          (bytes == best_bytes &&
                           (count < best_count || (count == best_count && lower_ids)));
      if (better) {
        best = mask;
        best_bytes = bytes;
      }
    }
    std::vector<TensorId> out;
    for (size_t i = 0; i < xs.size(); ++i)
      if (best >> i & 1) out.push_back(xs[i]);
    return out;
  }
  std::vector<TensorId> by_size = xs;
  std::stable_sort(by_size.begin(), by_size.end(), [&](TensorId a, TensorId b) {
    return g.tensor(a).bytes > g.tensor(b).bytes;
  });
  std::vector<TensorId> out;
  int64_t bytes = 0;
  for (TensorId x : by_size) {
    if (bytes >= need) break;
    out.push_back(x);
    bytes += g.tensor(x).bytes;
  }
  for (size_t i = out.size(); i-- > 0;) {  // the smallest first: drop what is not needed
    const int64_t without = bytes - g.tensor(out[i]).bytes;
    if (without >= need) {
      bytes = without;
      out.erase(out.begin() + std::ptrdiff_t(i));
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string step_name(const Step& s) {
  return fmt::format("step {} ({} {}{})", s.id, name(s.phase), s.op, s.node.empty() ? "" : " " + s.node);
}

}  // namespace

std::vector<int64_t> remote_floor_bytes(const TrainingGraph& g, const std::vector<Lifetime>& life,
                                        MovableKinds movable) {
  std::vector<int64_t> floor = unavoidable_bytes(g, life, movable);
  for (const Step& s : g.steps)
    floor[size_t(s.id)] -= bytes_of(g, eligible_inputs(g, life, s, movable));
  return floor;
}

RemoteReadChoice choose_remote_reads(const TrainingGraph& g, const std::vector<Lifetime>& life,
                                     int64_t budget, MovableKinds movable, const Mechanism& mech) {
  RemoteReadChoice choice;
  const std::vector<int64_t> need = unavoidable_bytes(g, life, movable);
  for (const Step& s : g.steps) {
    const int64_t excess = need[size_t(s.id)] - budget;
    if (excess <= 0) continue;
    const std::vector<TensorId> xs = eligible_inputs(g, life, s, movable);
    if (bytes_of(g, xs) < excess) {
      const std::vector<int64_t> floor = remote_floor_bytes(g, life, movable);
      throw Error(ErrorKind::infeasible,
                  fmt::format("the budget {} is too small: {} needs {} resident at once even "
                              "reading {} of its inputs remotely (it must hold what it writes, "
                              "its workspace and the inputs a later step reads again{}). The "
                              "smallest budget that works is {} (--budget min finds it); or "
                              "lower --batch{}",
                              format_bytes(budget), step_name(s),
                              format_bytes(need[size_t(s.id)] - bytes_of(g, xs)),
                              format_bytes(bytes_of(g, xs)),
                              training::is_matrix_product(s.op)
                                  ? "; a matrix product reads none of its operands remotely"
                                  : "",
                              format_bytes(*std::max_element(floor.begin(), floor.end())),
                              movable.all() ? "" : ", or let more kinds move (--movable)"));
    }
    for (TensorId x : least_cover(g, xs, excess)) choice.reads.push_back({x, s.id});
  }
  if (choice.reads.empty()) return choice;
  choice.planning_life = life;
  choice.extra_us.assign(size_t(g.step_count()), 0);
  for (const RemoteRead& r : choice.reads) {
    std::vector<StepIndex>& uses = choice.planning_life[size_t(r.tensor)].uses;
    uses.pop_back();  // r.step is its last use
    choice.extra_us[size_t(r.step)] += mech.remote_read.time_us(g.tensor(r.tensor).bytes);
  }
  return choice;
}

std::vector<Action> remote_read_actions(const TrainingGraph& g, const RemoteReadChoice& choice,
                                        const Mechanism& mech) {
  std::vector<Action> out;
  for (const RemoteRead& r : choice.reads)
    out.push_back(Action::read_remote(r.tensor, g.tensor(r.tensor).bytes, r.step, mech.name));
  return out;
}

bool remote_reads_off(const TrainingGraph& g, const std::vector<Lifetime>& life,
                      const std::vector<Action>& actions) {
  const TensorResidency residency(g, life, actions);
  for (const Action& a : actions)
    if (a.kind == ActionKind::read_remote && residency.on(a.tensor, a.ready_before_step)) return false;
  return true;
}

}  // namespace autovm
