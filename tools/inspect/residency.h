// Contract: what a plan keeps on the GPU, worked out from its steps and actions alone, by the
// rules of docs/execution-model.md (the plan's own lifetimes and statistics are not trusted:
// the verifier compares them with these). Every subcommand draws on it.
//
//   step:        0    1    2    3    4    5    6
//   a            def  use                 use            lifetime [0, 5]
//   evict a           after_step 1 ---> ready_before_step 3   (resident through 2)
//   prefetch a                  after_step 3 ---> ready_before_step 5
//   resident     ###  ###  ###  ...  ###  ###            off interval [3, 3]
//
// Going off:   evict off from ready_before_step, discard off from after_step + 1.
// Coming back: prefetch resident from after_step + 1, recompute from ready_before_step.
// Each going-off action pairs with the next coming-back action of its tensor (in order of the
// step where they take effect) into an off interval [from, through], inclusive; one left open
// runs to the end of the lifetime. A persistent tensor with an evict whose ready_before_step
// is n is kept on the host between training steps: it starts the step off, from step 0.
// Pairing problems (a prefetch with no evict before it, an evict of a tensor already off, an
// interval outside the lifetime) are reported as issues of rules 4 and 6.
// A recompute whose ready_before_step lies after the last step of a non-persistent tensor's
// lifetime is a chain temporary: the tensor is there in the moment before that one step (and
// counts there), outside the off intervals and the pairing.
// A read_remote (step ready_before_step reads the tensor's host copy over the link) and an
// advise change no residency and do not pair: a tensor read remotely at s stays off at s and
// counts nothing there. Whether s lies in an off interval an evict opened is the verifier's
// check (rule 1). A persistent tensor whose uses after an evict are all remote reads is evicted
// after its last use on the GPU: it is kept on the host, as above.
//
// Each step s has two moments (execution-model.md, "The moment before a step"): s itself, with
// the tensors resident at s, and the moment before it, where its recompute chains run: those
// tensors less what s allocates as it starts (its outputs whose lifetime begins at s and that it
// does not read, its workspace less the trainer's reserve), plus its chain temporaries.
#pragma once

#include <string>
#include <vector>

#include "plan.h"

namespace inspect {

// One thing wrong with a plan. rule: 1-7 of docs/execution-model.md; 0 for structure.
struct Issue {
  int rule = 0;
  StepIndex step = -1;    // -1: none (or the start of the step); n: the end of the step
  TensorId tensor = -1;   // -1: none
  std::string message;
};

// The ids and steps every analysis indexes with: tensor and step ids equal to their positions,
// step inputs / outputs / workspaces, action tensors and steps in range (a read_remote's
// ready_before_step names a step: [0, n-1]), at least one step.
// analyze() needs none of these to fail.
std::vector<Issue> check_indices(const Plan& plan);

struct OffInterval {
  StepIndex from = 0;     // first step off the GPU
  StepIndex through = 0;  // last step off the GPU
  int64_t off_action = -1;  // index into plan.actions; -1: off since before the step
  int64_t on_action = -1;   // -1: stays off to the end of its lifetime
};

struct Analysis {
  std::vector<Lifetime> lifetimes;            // [tensor], recomputed from the steps
  std::vector<std::vector<OffInterval>> off;  // [tensor], in order
  std::vector<Issue> pairing_issues;          // rules 4 and 6
  std::vector<std::vector<StepIndex>> temporaries;  // [tensor] steps it is a chain temporary at
  // [tensor] the steps that read it remotely (its read_remote actions' ready_before_step),
  // sorted, each once; as the plan says, valid or not.
  std::vector<std::vector<StepIndex>> remote_reads;
  // [step] bytes the step reads remotely: each tensor read remotely there once, by its tensor
  // bytes. Not part of the resident bytes.
  std::vector<int64_t> remote_read_bytes;
  std::vector<BytesByKind> live;              // [step] bytes of the live tensors (no actions)
  // [step] bytes on the GPU under the actions, in the larger of the step's two moments: the
  // step's own, with the temporaries beyond what the step allocates counted as activations.
  std::vector<BytesByKind> resident;
  std::vector<int64_t> live_total, resident_total;
  std::vector<int64_t> step_total;    // [step] bytes in the step's own moment
  std::vector<int64_t> before_total;  // [step] bytes in the moment before the step
  int64_t live_peak = 0, resident_peak = 0;
  StepIndex live_peak_step = 0, resident_peak_step = 0;  // first step at the peak

  bool resident_at(TensorId t, StepIndex s) const;
  // True when a read_remote action says step s reads t remotely.
  bool read_remotely(TensorId t, StepIndex s) const;
  // The off interval containing step s, or nullptr.
  const OffInterval* off_at(TensorId t, StepIndex s) const;
};

// Requires check_indices(plan) to be empty.
Analysis analyze(const Plan& plan);
// check_indices, then analyze; throws Failure(invalid_plan) naming the first index problem.
Analysis analyze_checked(const Plan& plan);

// "evict issued after step 3, ready before step 5"; "recompute of step 2 before step 7";
// "remote read at step 89".
std::string describe(const Action& a, StepIndex step_count);
// "step 12 (Conv backward, node conv1)", "the start of the step", "the end of the step".
std::string step_label(const Plan& plan, StepIndex s);

}  // namespace inspect
