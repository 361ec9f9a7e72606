// Contract: the training step as the planner sees it. A TrainingGraph is a list of tensors and
// a list of steps in execution order (forward, loss, backward, optimizer). Step i runs at time
// i; tensor and step ids are their indices. Every tensor that a step reads is in `inputs`, every
// tensor it writes in `outputs`; an in-place update (optimizer, batch norm running statistics)
// lists the tensor in both. The execution model that says when memory is allocated and freed is
// written down in docs/execution-model.md.
#pragma once

#include <string>
#include <vector>

#include "ir/types.h"

namespace autovm {

struct Tensor {
  TensorId id = kNoTensor;
  std::string name;
  TensorKind kind = TensorKind::activation;
  DType dtype = DType::f32;
  Shape shape;
  int64_t bytes = 0;
  // Names of model values that are views of this tensor (Reshape, Flatten, Squeeze, Unsqueeze,
  // Identity, inference Dropout): they share its storage and have no tensor of their own.
  std::vector<std::string> aliases;
};

struct Step {
  StepIndex id = 0;
  std::string op;    // ONNX op type for forward steps, "<Op>Grad", loss and optimizer op names
  Phase phase = Phase::forward;
  std::string node;  // the model node this step comes from ("" for loss and optimizer)
  std::vector<TensorId> inputs;
  std::vector<TensorId> outputs;
  TensorId workspace = kNoTensor;  // scratch tensor live during this step only
  double flops = 0;                // estimated floating-point operations
  int64_t bytes_touched = 0;       // bytes read and written (inputs + outputs + workspace)
  int64_t reserve_bytes = 0;       // of the workspace: the trainer's memory (--reserve)
  double measured_us = -1;         // >= 0: its time measured on the trainer's GPU, which the
                                   // cost model takes over the roofline (plan/cost_model.h)
};

struct TrainingGraph {
  std::vector<Tensor> tensors;
  std::vector<Step> steps;

  TensorId add_tensor(std::string name, TensorKind kind, DType dtype, Shape shape);
  const Tensor& tensor(TensorId id) const { return tensors[static_cast<size_t>(id)]; }
  const Step& step(StepIndex s) const { return steps[static_cast<size_t>(s)]; }
  StepIndex step_count() const { return static_cast<StepIndex>(steps.size()); }
};

}  // namespace autovm
