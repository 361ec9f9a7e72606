// Pass: the loss, one term per output the forward pass collected (TrainingStep::outputs), of
// the kind TrainingOptions::loss says (training_step.h). Cross-entropy: one step that reads the
// scores and labels and writes the scalar loss and the log-probabilities, which the loss's
// gradient (in backward) keeps. Mean squared error: one step reading output and target. An
// external loss: one step reading every output, its memory a workspace.
#include <fmt/format.h>

#include "training/passes.h"
#include "util/error.h"

namespace autovm::training {
namespace {

std::string shape_text(const Shape& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

}  // namespace

std::string_view name(Loss l) {
  switch (l) {
    case Loss::cross_entropy: return "cross-entropy";
    case Loss::mse: return "mse";
    case Loss::external: return "external";
  }
  return "cross-entropy";
}

std::optional<Loss> parse_loss(std::string_view s) {
  if (s == "cross-entropy") return Loss::cross_entropy;
  if (s == "mse") return Loss::mse;
  if (s == "external") return Loss::external;
  return std::nullopt;
}

std::vector<LossTerm> append_loss(const model::Model&, const TrainingOptions& o, TrainingStep& ts) {
  TrainingGraph& g = ts.graph;
  ts.loss_kind = o.loss;
  std::vector<LossTerm> terms;
  for (size_t k = 0; k < ts.outputs.size(); ++k) {
    LossTerm term;
    term.output = ts.outputs[k];
    term.node = k == 0 ? "" : g.tensor(term.output).name;
    terms.push_back(std::move(term));
  }
  // Tensors of term k > 0 are named "<name>.<k>".
  auto named = [](const char* base, size_t k) { return k == 0 ? std::string(base) : fmt::format("{}.{}", base, k); };

  if (o.loss == Loss::external) {
    int64_t reserve = 0;
    for (TensorId t : ts.outputs) reserve += g.tensor(t).bytes;
    ts.loss = g.add_tensor("loss", TensorKind::activation, DType::f32, Shape{});
    TensorId workspace = g.add_tensor("loss/external", TensorKind::workspace, DType::u8, Shape{reserve});
    double flops = 0;
    for (const Shape& s : ts.output_shapes) flops += 4.0 * static_cast<double>(element_count(s));
    add_step(g, "ExternalLoss", Phase::loss, "", ts.outputs, {ts.loss}, flops, workspace);
    return terms;
  }

  for (size_t k = 0; k < terms.size(); ++k) {
    LossTerm& term = terms[k];
    const Shape& shape = ts.output_shapes[k];
    // Under autocast the losses run in float32 (autocast's fp32 list).
    const DType dtype = o.autocast != Autocast::none ? DType::f32 : g.tensor(term.output).dtype;
    const double elements = static_cast<double>(element_count(shape));
    auto new_loss = [&] {
      TensorId loss = g.add_tensor(named("loss", k), TensorKind::activation, DType::f32, Shape{});
      if (k == 0) ts.loss = loss;
      return loss;
    };
    if (o.loss == Loss::mse) {
      term.target = g.add_tensor(named("label", k), TensorKind::label, dtype, shape);
      TensorId loss = new_loss();
      add_step(g, "MeanSquaredErrorLoss", Phase::loss, term.node, {term.output, term.target}, {loss},
               3.0 * elements);
    } else {
      // Labels: the output's shape without its class axis (1), shared by every output.
      Shape labels = shape;
      labels.erase(labels.begin() + 1);
      if (k == 0) {
        ts.label = g.add_tensor("label", TensorKind::label, DType::i64, labels);
      } else if (g.tensor(ts.label).shape != labels) {
        throw Error(ErrorKind::invalid_model,
                    fmt::format("output '{}' has shape {} but the first output's labels have shape {}; "
                                "cross-entropy scores every output against the same labels",
                                g.tensor(term.output).name, shape_text(shape),
                                shape_text(g.tensor(ts.label).shape)));
      }
      term.target = ts.label;
      TensorId loss = new_loss();
      term.log_prob = g.add_tensor(k == 0 ? "loss/log_prob" : term.node + "/loss/log_prob",
                                   TensorKind::activation, dtype, shape);
      add_step(g, "SoftmaxCrossEntropyLoss", Phase::loss, term.node, {term.output, term.target},
               {loss, term.log_prob}, 5.0 * elements);
    }
  }
  if (o.loss == Loss::mse) ts.label = terms.empty() ? kNoTensor : terms[0].target;
  return terms;
}

}  // namespace autovm::training
