// Contract: which steps read which tensors remotely (docs/execution-model.md, "Remote reads"),
// and what that does to the problem the search solves.
//
// A step whose working set exceeds the budget cannot run with every operand resident. With a
// mechanism that can read remotely (Mechanism::remote_read), it may instead read some of its
// inputs where their evicted copies lie in host memory. The planner allows that only here:
//
//   eligible    an input x of step s that s is the last reader of (s = x's last use), with
//               an earlier use (something can evict it before s), of a movable kind, not
//               persistent, not written by s and not s's workspace, where s is no matrix
//               product (training::is_matrix_product: its kernels read an operand's tiles
//               many times, so a remote operand would cross the link many times, not once as
//               the cost below counts; docs/planner.md, "Remote reads"). Reading x remotely
//               at its last use replaces its prefetch: x is evicted once and never comes
//               back.
//   chosen      at each step s whose unavoidable bytes (plan/gaps.h) exceed the budget by
//               e > 0, the eligible inputs of least total bytes that cover e (ties: fewer
//               tensors, then the lower tensor ids); a step with more than 12 eligible inputs
//               takes the largest first and drops those not needed, which covers e but may
//               hold more bytes. Either way no chosen tensor can be left out of the set
//               without falling short of e, so each is off at s in every plan that meets the
//               budget.
//   cost        the step takes Mechanism::remote_read.time_us(bytes) longer per tensor read,
//               which is fixed by the choice: it is added to the step's compute time
//               (extra_us) for the search, the simulator and the bound alike.
//
// The search plans with `planning_life`: the lifetimes with each chosen step taken out of its
// tensor's uses, so that the tensor has a tail gap there (gaps.h) that only an eviction
// covers. The plan's own lifetimes stay the true ones; remote_read_actions gives the plan's
// read_remote actions.
#pragma once

#include <cstdint>
#include <vector>

#include "analysis/lifetimes.h"
#include "plan/device_profile.h"
#include "plan/movable_kinds.h"
#include "plan/plan.h"

namespace autovm {

struct RemoteRead {
  TensorId tensor = kNoTensor;
  StepIndex step = 0;  // the step that reads it remotely: its last use
};

struct RemoteReadChoice {
  std::vector<RemoteRead> reads;        // by step, then tensor id
  std::vector<Lifetime> planning_life;  // the lifetimes the search plans with (empty: no reads)
  std::vector<double> extra_us;         // [step] the time its remote reads add
  bool empty() const { return reads.empty(); }
};

// [step] the least that step must hold resident when it may read every eligible input
// remotely: its unavoidable bytes less those inputs. Its maximum is the least budget any plan
// can meet with remote reads (`--budget min`).
std::vector<int64_t> remote_floor_bytes(const TrainingGraph& graph,
                                        const std::vector<Lifetime>& life, MovableKinds movable);

// The remote reads a plan under `budget_bytes` needs (none when every step's working set
// fits). Throws Error(infeasible) naming the step when even reading every eligible input
// remotely leaves a step over the budget, with the least budget that works.
RemoteReadChoice choose_remote_reads(const TrainingGraph& graph, const std::vector<Lifetime>& life,
                                     int64_t budget_bytes, MovableKinds movable,
                                     const Mechanism& mechanism);

// One read_remote action per chosen read, in the order of `choice.reads`.
std::vector<Action> remote_read_actions(const TrainingGraph& graph, const RemoteReadChoice& choice,
                                        const Mechanism& mechanism);

// Whether every read_remote action's tensor is off at its step under `actions`, by the
// plan's own lifetimes (plan/residency.h): what "chosen" above promises of any plan that meets
// the budget.
bool remote_reads_off(const TrainingGraph& graph, const std::vector<Lifetime>& life,
                      const std::vector<Action>& actions);

}  // namespace autovm
