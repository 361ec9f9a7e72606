// Contract: everything a plan holds, in memory, before the emitter writes it as JSON
// (schemas/plan.schema.json). Built by the driver's pipeline of passes; read by the emitter.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "analysis/arena.h"
#include "analysis/pytorch_memory.h"
#include "analysis/timeline.h"
#include "plan/movable_kinds.h"
#include "plan/recompute_ops.h"
#include "training/training_step.h"

namespace autovm {

struct ModelIdentity {
  std::string file;     // the model file's name, without its folder
  std::string sha256;
  int64_t file_bytes = 0;
  int64_t ir_version = 0;
  int64_t opset = 0;
  std::string producer;
  std::string input_name;
  Shape input_shape;    // with the batch applied
  DType input_dtype = DType::f32;
  int64_t batch = 0;
  int64_t classes = 0;
};

struct PlanOptions {
  std::string device = "h200-pcie";  // profile name or file
  std::string mechanism;             // "" : the profile's default
  std::string step_times_file;       // measured step times overriding the cost model
  std::string reserve_file;          // --reserve: memory the trainer holds beyond the graph
  std::string conv_workspaces_file;  // --conv-workspaces: measured convolution workspaces
  bool workspaces_as_measured = false;  // --workspaces-as-measured: never cut to the budget
  bool allow_recompute = true;
  RecomputeOps recompute_ops;        // --recompute-ops: ops a recompute chain may run (default all)
  MovableKinds movable;              // --movable: kinds the plan may take off the GPU (default all)
  bool minimum_budget = false;       // --budget min: plan for the smallest feasible budget
  bool remote_reads = true;          // --no-remote-reads: every step's working set resident
  int64_t budget_bytes = 0;
  int64_t batch = 0;  // 0: the model's own batch dimension when fixed, else 1
  training::Optimizer optimizer = training::Optimizer::sgd;
  int64_t conv_workspace_limit = int64_t(256) << 20;
  training::DataParallelOptions data_parallel;  // --data-parallel, --bucket-mb
  bool pool_indices = false;  // --pool-indices: max pooling keeps int64 indices (PyTorch)
  training::Loss loss = training::Loss::cross_entropy;  // --loss
  training::Autocast autocast = training::Autocast::none;  // --autocast
  bool explain_bound = false;  // --explain-bound: keep the bound's terms (Plan::bound_terms)
  int64_t alignment = 256;
};

struct StepTimeBound;  // plan/bound.h

enum class ActionKind { prefetch, evict, discard, recompute, advise, read_remote };

// A memory operation the runtime issues between steps; docs/execution-model.md says exactly
// what each kind does to residency.
struct Action {
  ActionKind kind = ActionKind::prefetch;
  TensorId tensor = kNoTensor;
  int64_t bytes = 0;
  StepIndex after_step = -1;        // issued when this step finishes (-1: at the start)
  StepIndex ready_before_step = 0;  // complete before this step starts (n: by the end)
  StepIndex source_step = -1;       // recompute: the step that is run again
  std::string mechanism;            // transfer mechanism of evict / prefetch ("" otherwise)
  std::string advice;               // advise: "read_mostly", "preferred_location_host", ...
  double issue_us = 0;              // predicted, from the start of the training step
  double ready_us = 0;

  // Named construction, one per kind (the residency each gives: docs/execution-model.md).
  static Action evict(TensorId t, int64_t bytes, StepIndex after, StepIndex ready,
                      std::string mechanism) {
    return of(ActionKind::evict, t, bytes, after, ready, std::move(mechanism));
  }
  static Action prefetch(TensorId t, int64_t bytes, StepIndex after, StepIndex ready,
                         std::string mechanism) {
    return of(ActionKind::prefetch, t, bytes, after, ready, std::move(mechanism));
  }
  // Off from after + 1.
  static Action discard(TensorId t, int64_t bytes, StepIndex after) {
    return of(ActionKind::discard, t, bytes, after, after + 1, "");
  }
  // Step `step` reads the tensor where its evicted copy lies in host memory (remote_reads.h).
  static Action read_remote(TensorId t, int64_t bytes, StepIndex step, std::string mechanism) {
    return of(ActionKind::read_remote, t, bytes, step - 1, step, std::move(mechanism));
  }
  // Runs step `source` again just before step `before`.
  static Action recompute(TensorId t, int64_t bytes, StepIndex source, StepIndex before) {
    Action a = of(ActionKind::recompute, t, bytes, before - 1, before, "");
    a.source_step = source;
    return a;
  }

 private:
  static Action of(ActionKind kind, TensorId t, int64_t bytes, StepIndex after,
                         StepIndex ready, std::string mechanism) {
    Action a;
    a.kind = kind;
    a.tensor = t;
    a.bytes = bytes;
    a.after_step = after;
    a.ready_before_step = ready;
    a.mechanism = std::move(mechanism);
    return a;
  }
};

// A policy's predicted step under the budget (autovm's plan, or a baseline).
struct Prediction {
  std::string policy;
  bool fits = true;                 // its resident peak stays within the budget
  double step_time_us = 0;
  double compute_us = 0;
  double stall_us = 0;
  double recompute_us = 0;
  int64_t bytes_to_host = 0;
  int64_t bytes_to_device = 0;
  int64_t resident_peak_bytes = 0;
  bool calibrated = true;           // baselines: step_time_us's model was checked against
                                    // measurement (baselines.h, step_time_calibrated)
};

struct Plan {
  ModelIdentity model;
  PlanOptions options;
  training::TrainingStep training;
  std::vector<Lifetime> lifetimes;
  MemoryTimeline timeline;
  ArenaLayout arena;
  std::vector<Action> actions;

  // Swap planning and prediction (filled when a device profile is used).
  std::string device;
  std::string mechanism;
  std::vector<double> compute_us;      // by step, predicted or measured
  std::vector<double> start_us;        // by step, under the plan
  std::vector<double> end_us;
  std::vector<double> stall_us;
  double remote_read_us = 0;           // what the read_remote actions add to their steps
  Prediction prediction;               // autovm's plan
  double no_swap_step_time_us = 0;
  double bound_us = 0;
  StepIndex bound_critical_step = -1;
  int64_t bound_must_move_bytes = 0;
  std::shared_ptr<const StepTimeBound> bound_terms;  // with --explain-bound: how it is made
  std::vector<Prediction> baselines;

  // What plain PyTorch would allocate (autovm-plan --memory-model pytorch); absent otherwise.
  std::optional<PytorchMemoryEstimate> pytorch_memory;
};

}  // namespace autovm
