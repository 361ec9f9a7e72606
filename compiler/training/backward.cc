// Pass: the backward steps. Starts from the loss's gradients and walks the forward steps in
// reverse; each step with a gradient to propagate becomes "<Op>Grad", which reads the gradients
// of its outputs and the forward tensors its rule needs, and writes a gradient for each input
// that requires one. A second gradient for the same tensor is added in place ("GradSum").
#include <algorithm>
#include <string>

#include "training/passes.h"

namespace autovm::training {

std::vector<TensorId> append_backward(const model::Model& m, const ForwardPass& fp,
                                      const std::vector<LossTerm>& loss, TrainingStep& ts) {
  TrainingGraph& g = ts.graph;
  std::vector<TensorId> grad_of(g.tensors.size(), kNoTensor);
  auto grad = [&](TensorId t) -> TensorId& {
    if (grad_of.size() < g.tensors.size()) grad_of.resize(g.tensors.size(), kNoTensor);
    return grad_of[static_cast<size_t>(t)];
  };

  // The loss's gradients, one per term: cross-entropy's d loss / d scores = softmax(scores) -
  // onehot(label), scaled by 1/count, from the saved log-probabilities; mean squared error's
  // 2 (output - target) / count; an external loss's, handed in by the training script.
  for (const LossTerm& term : loss) {
    const Tensor out = g.tensor(term.output);  // a copy: add_tensor may reallocate
    TensorId d_out = g.add_tensor("grad/" + out.name, TensorKind::activation_grad, out.dtype, out.shape);
    const double elements = static_cast<double>(element_count(out.shape));
    switch (ts.loss_kind) {
      case Loss::cross_entropy:
        add_step(g, "SoftmaxCrossEntropyLossGrad", Phase::backward, term.node, {term.log_prob, term.target},
                 {d_out}, 3.0 * elements);
        break;
      case Loss::mse:
        add_step(g, "MeanSquaredErrorLossGrad", Phase::backward, term.node, {term.output, term.target},
                 {d_out}, 3.0 * elements);
        break;
      case Loss::external:
        add_step(g, "ExternalLossGrad", Phase::backward, term.node, {term.output}, {d_out}, 4.0 * elements);
        break;
    }
    grad(term.output) = d_out;
  }

  for (auto rec = fp.records.rbegin(); rec != fp.records.rend(); ++rec) {
    const GradientRule& rule = *rec->rule;
    if (rule.op_class != OpClass::compute) continue;
    std::vector<TensorId> inputs;
    auto use = [&](TensorId t) {
      if (t != kNoTensor && std::find(inputs.begin(), inputs.end(), t) == inputs.end())
        inputs.push_back(t);
    };
    for (TensorId out : rec->outputs)
      if (grad(out) != kNoTensor) use(grad(out));
    if (inputs.empty()) continue;  // nothing flows back through this step

    // Inputs that receive a gradient, and the forward tensors their rule needs.
    bool all = rule.differentiable.empty() && rule.data_inputs < 0;
    std::vector<TensorId> targets;
    for (size_t i = 0; i < rec->inputs.size(); ++i) {
      TensorId t = rec->inputs[i];
      if (t == kNoTensor || !fp.requires_grad[static_cast<size_t>(t)]) continue;
      auto it = std::find(rule.differentiable.begin(), rule.differentiable.end(), int(i));
      if (!all && it == rule.differentiable.end()) continue;
      targets.push_back(t);
      if (all) continue;
      bool second = !rule.needs_with_second_output.empty() && rec->outputs.size() > 1 &&
                    rec->outputs[1] != kNoTensor;
      const auto& needs = second ? rule.needs_with_second_output : rule.needs;
      for (const Ref& r : needs[static_cast<size_t>(it - rule.differentiable.begin())]) {
        const auto& side = r.output ? rec->outputs : rec->inputs;
        if (r.index < static_cast<int>(side.size())) use(side[static_cast<size_t>(r.index)]);
      }
    }
    if (targets.empty()) continue;

    const model::Node& node = m.nodes[static_cast<size_t>(rec->node)];
    std::vector<TensorId> partials;
    for (TensorId t : targets) {
      const Tensor& target = g.tensor(t);
      std::string name = "grad/" + target.name;
      if (grad(t) != kNoTensor) name += "/" + node.name;
      for (TensorId p : partials)
        if (g.tensor(p).name == name) name += "/" + std::to_string(partials.size());
      TensorKind kind = target.kind == TensorKind::parameter ? TensorKind::gradient
                                                             : TensorKind::activation_grad;
      // The shape is copied before add_tensor runs, which may reallocate `target` away.
      partials.push_back(g.add_tensor(std::move(name), kind, target.dtype, Shape(target.shape)));
    }
    TensorId workspace = kNoTensor;
    if (rec->backward_workspace_bytes > 0)
      workspace = g.add_tensor(node.name + "/grad_workspace", TensorKind::workspace, DType::u8,
                               Shape{rec->backward_workspace_bytes});
    if (workspace != kNoTensor && rec->estimated_workspace_bytes >= 0)
      ts.measured_workspaces.push_back({workspace, rec->estimated_workspace_bytes, rec->workspace_entry, true});
    double flops = rule.backward_flops_factor * g.step(rec->step).flops;
    // A measured convolution: to the weight alone when its input needs no gradient.
    const bool to_input = !rec->inputs.empty() &&
                          std::find(targets.begin(), targets.end(), rec->inputs[0]) != targets.end();
    const double measured_us = !to_input && rec->backward_weight_us >= 0 ? rec->backward_weight_us
                                                                         : rec->backward_us;
    add_step(g, std::string(rule.op) + "Grad", Phase::backward, node.name, std::move(inputs),
             partials, flops, workspace)
        .measured_us = measured_us;
    for (size_t k = 0; k < targets.size(); ++k) {
      TensorId& acc = grad(targets[k]);
      if (acc == kNoTensor) {
        acc = partials[k];
        continue;
      }
      add_step(g, "GradSum", Phase::backward, node.name, {acc, partials[k]}, {acc},
               static_cast<double>(element_count(g.tensor(acc).shape)));
    }
  }
  grad_of.resize(g.tensors.size(), kNoTensor);
  return grad_of;
}

}  // namespace autovm::training
