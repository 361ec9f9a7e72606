// Contract: everything a plan holds, in memory, before the emitter writes it as JSON
// (schemas/plan.schema.json). Built by the driver's pipeline of passes; read by the emitter.
#pragma once

#include <string>
#include <vector>

#include "analysis/arena.h"
#include "analysis/timeline.h"
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
  int64_t budget_bytes = 0;
  int64_t batch = 0;  // 0: the model's own batch dimension when fixed, else 1
  training::Optimizer optimizer = training::Optimizer::sgd;
  int64_t conv_workspace_limit = int64_t(256) << 20;
  int64_t alignment = 256;
};

enum class ActionKind { prefetch, evict, discard, recompute, advise };
enum class ActionWhen { before, after };

// A memory operation the runtime issues around a step (swap planning fills these in).
struct Action {
  StepIndex step = 0;
  ActionWhen when = ActionWhen::before;
  ActionKind kind = ActionKind::prefetch;
  TensorId tensor = kNoTensor;
  std::string mechanism;   // "prefetch", "staged", ... ("" for recompute and advise)
  std::string advice;      // for advise: "read_mostly", "preferred_location_host", ...
  int64_t bytes = 0;
  double issue_us = 0;     // predicted time the action is issued, from the step's start
  double ready_us = 0;     // predicted time it completes
};

struct Plan {
  ModelIdentity model;
  PlanOptions options;
  training::TrainingStep training;
  std::vector<Lifetime> lifetimes;
  MemoryTimeline timeline;
  ArenaLayout arena;
  std::vector<Action> actions;
};

}  // namespace autovm
