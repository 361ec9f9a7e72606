#include "driver/pipeline.h"

#include <fmt/format.h>

#include "analysis/arena.h"
#include "analysis/lifetimes.h"
#include "analysis/timeline.h"
#include "model/model.h"
#include "model/shape_inference.h"
#include "util/error.h"

namespace autovm {

Plan make_plan(const std::string& model_path, const PlanOptions& options) {
  model::Model m = model::load_model(model_path);
  model::check_supported_ops(m);
  if (m.inputs.empty())
    throw Error(ErrorKind::invalid_model,
                fmt::format("'{}' has no graph input that is not an initializer", model_path));
  const model::Value& input = m.values[static_cast<size_t>(m.inputs[0])];
  int64_t batch = options.batch;
  if (batch == 0) {
    if (input.declared_shape.empty() || input.declared_shape[0] <= 0)
      throw Error(ErrorKind::usage,
                  fmt::format("the batch dimension of input '{}' is symbolic; choose one with "
                              "--batch N",
                              input.name));
    batch = input.declared_shape[0];
  }
  model::infer_shapes(m, batch);

  Plan plan;
  plan.options = options;
  plan.options.batch = batch;
  training::TrainingOptions topts;
  topts.optimizer = options.optimizer;
  topts.conv_workspace_limit = options.conv_workspace_limit;
  plan.training = training::build_training_step(m, topts);
  plan.lifetimes = compute_lifetimes(plan.training.graph);
  plan.timeline = compute_timeline(plan.training.graph, plan.lifetimes);
  plan.arena = layout_arena(plan.training.graph, plan.lifetimes, options.alignment);

  ModelIdentity& id = plan.model;
  auto slash = model_path.find_last_of('/');
  id.file = slash == std::string::npos ? model_path : model_path.substr(slash + 1);
  id.sha256 = m.sha256;
  id.file_bytes = m.file_bytes;
  id.ir_version = m.ir_version;
  id.opset = m.opset;
  id.producer = m.producer;
  const model::Value& in = m.values[static_cast<size_t>(m.inputs[0])];
  id.input_name = in.name;
  id.input_shape = in.shape;
  id.input_dtype = in.dtype;
  id.batch = batch;
  id.classes = plan.training.logits_shape[1];
  return plan;
}

}  // namespace autovm
