#include "training/training_step.h"

#include <fmt/format.h>

#include "training/passes.h"

namespace autovm::training {

Step& add_step(TrainingGraph& g, std::string op, Phase phase, std::string node,
               std::vector<TensorId> inputs, std::vector<TensorId> outputs, double flops,
               TensorId workspace) {
  Step s;
  s.id = g.step_count();
  s.op = std::move(op);
  s.phase = phase;
  s.node = std::move(node);
  s.inputs = std::move(inputs);
  s.outputs = std::move(outputs);
  s.workspace = workspace;
  s.flops = flops;
  for (TensorId t : s.inputs) s.bytes_touched += g.tensor(t).bytes;
  for (TensorId t : s.outputs) s.bytes_touched += g.tensor(t).bytes;
  if (workspace != kNoTensor) s.bytes_touched += g.tensor(workspace).bytes;
  g.steps.push_back(std::move(s));
  return g.steps.back();
}

void detect_inference_export(const model::Model& m, TrainingStep& ts) {
  int bn = 0, bn_inference = 0, dropout = 0, conv = 0, conv_bias = 0;
  for (const auto& n : m.nodes) {
    if (n.folded) continue;
    if (n.op == "BatchNormalization") {
      ++bn;
      int outputs = 0;
      for (int v : n.outputs) outputs += v >= 0;
      if (outputs == 1 && n.attr_i("training_mode", 0) == 0) ++bn_inference;
    } else if (n.op == "Dropout") {
      ++dropout;
    } else if (n.op == "Conv") {
      ++conv;
      conv_bias += n.inputs.size() > 2 && n.inputs[2] >= 0;
    }
  }
  std::string why;
  if (bn_inference > 0)
    why = fmt::format("{} of its {} BatchNormalization nodes are in inference form", bn_inference, bn);
  else if (bn == 0 && dropout == 0 && conv > 0 && conv_bias == conv)
    why = fmt::format("it has no BatchNormalization and no Dropout, and all {} convolutions have "
                      "a bias (batch norm may have been folded into them)", conv);
  if (why.empty()) return;
  ts.looks_like_inference_export = true;
  ts.inference_hint = fmt::format(
      "the model looks like an inference export: {}. The plan covers the graph as written; to "
      "plan real training, export with torch.onnx.export(model.train(), x, f, "
      "training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)",
      why);
}

// Reserves the graph's vectors for the most tensors and steps the passes can add, so that they
// are allocated once (a chain of 100,000 convolutions has a million tensors). Every model value
// becomes at most one tensor; a forward node adds at most three more (saved statistics, a
// workspace) and one step; its backward step at most a gradient per input and a workspace, and
// a GradSum per input; the loss adds up to five tensors and two steps per output; the optimizer
// one step and up to two state tensors per initializer.
void reserve_graph(const model::Model& m, const TrainingOptions& o, TrainingGraph& g) {
  size_t nodes = 0, inputs = 0, initializers = 0;
  for (const auto& n : m.nodes) {
    if (n.folded) continue;
    ++nodes;
    inputs += n.inputs.size();
  }
  for (const auto& v : m.values) initializers += v.source == model::ValueSource::initializer;
  size_t state = o.optimizer == Optimizer::adam ? 2 : o.optimizer == Optimizer::momentum ? 1 : 0;
  size_t buckets = o.data_parallel.enabled ? initializers : 0;
  const size_t outputs = m.outputs.size();
  g.tensors.reserve(m.values.size() + 3 * nodes + 5 * outputs + inputs + nodes + state * initializers + buckets);
  g.steps.reserve(nodes + 2 * outputs + nodes + inputs + initializers);
}

TrainingStep build_training_step(const model::Model& m, const TrainingOptions& o) {
  TrainingStep ts;
  reserve_graph(m, o, ts.graph);
  ForwardPass fp = append_forward(m, o, ts);
  std::vector<LossTerm> loss = append_loss(m, o, ts);
  std::vector<TensorId> gradient_of = append_backward(m, fp, loss, ts);
  append_optimizer(gradient_of, o, ts);
  if (o.data_parallel.enabled) append_gradient_buckets(gradient_of, o.data_parallel, ts);
  detect_inference_export(m, ts);
  return ts;
}

}  // namespace autovm::training
