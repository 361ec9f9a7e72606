// Contract (internal to training/): the passes that build_training_step runs in order, and the
// record of forward steps they hand each other. Each pass lives in its own file.
#pragma once

#include <string>
#include <vector>

#include "training/gradient_rules.h"
#include "training/training_step.h"

namespace autovm::training {

// What the backward pass needs to know about one forward step.
struct ForwardRecord {
  StepIndex step = 0;
  const GradientRule* rule = nullptr;
  int node = -1;                     // index into model.nodes
  std::vector<TensorId> inputs;      // by input number; kNoTensor where not a tensor
  std::vector<TensorId> outputs;     // by the rule's output layout (see gradient_rules.h)
  int64_t workspace_bytes = 0;          // of the forward step
  int64_t backward_workspace_bytes = 0; // of its backward step (the estimate's: the same)
  int64_t estimated_workspace_bytes = -1;  // >= 0: the two above were measured; the estimate
  int workspace_entry = -1;                // then: the measured entry (ConvWorkspace::entry)
  double backward_us = -1;                 // measured (ConvWorkspace): to input and weight
  double backward_weight_us = -1;          // to the weight alone
};

struct ForwardPass {
  std::vector<ForwardRecord> records;
  std::vector<bool> requires_grad;   // by TensorId
};

// One loss term: the output it scores, its target, and what its gradient step reads.
struct LossTerm {
  TensorId output = kNoTensor;
  TensorId target = kNoTensor;    // labels or target; kNoTensor for an external loss
  TensorId log_prob = kNoTensor;  // cross-entropy's saved log-probabilities
  std::string node;               // the loss steps' node: "" for the first term, else the output's name
};

ForwardPass append_forward(const model::Model& m, const TrainingOptions& o, TrainingStep& ts);
std::vector<LossTerm> append_loss(const model::Model& m, const TrainingOptions& o, TrainingStep& ts);
// Returns the gradient tensor of each parameter (kNoTensor when it gets none), by TensorId.
std::vector<TensorId> append_backward(const model::Model& m, const ForwardPass& fp,
                                      const std::vector<LossTerm>& loss, TrainingStep& ts);
void append_optimizer(const std::vector<TensorId>& gradient_of, const TrainingOptions& o,
                      TrainingStep& ts);
// DDP's gradient buckets (DataParallelOptions in training_step.h), after the optimizer.
void append_gradient_buckets(const std::vector<TensorId>& gradient_of, const DataParallelOptions& o,
                             TrainingStep& ts);
void detect_inference_export(const model::Model& m, TrainingStep& ts);

// Adds a step, filling id and bytes_touched from its tensors.
Step& add_step(TrainingGraph& g, std::string op, Phase phase, std::string node,
               std::vector<TensorId> inputs, std::vector<TensorId> outputs, double flops,
               TensorId workspace = kNoTensor);

}  // namespace autovm::training
