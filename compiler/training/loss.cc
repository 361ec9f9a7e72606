// Pass: the loss. Softmax cross-entropy of the logits against integer labels: one step that
// reads logits and labels and writes the scalar loss and the log-probabilities, which the
// loss's gradient (first step of backward) keeps.
#include "training/passes.h"

namespace autovm::training {

void append_loss(const model::Model&, TrainingStep& ts) {
  TrainingGraph& g = ts.graph;
  const DType dtype = g.tensor(ts.logits).dtype;
  int64_t batch = ts.logits_shape[0];
  ts.label = g.add_tensor("label", TensorKind::label, DType::i64, Shape{batch});
  ts.loss = g.add_tensor("loss", TensorKind::activation, DType::f32, Shape{});
  TensorId log_prob = g.add_tensor("loss/log_prob", TensorKind::activation, dtype, ts.logits_shape);
  double flops = 5.0 * static_cast<double>(element_count(ts.logits_shape));
  add_step(g, "SoftmaxCrossEntropyLoss", Phase::loss, "", {ts.logits, ts.label},
           {ts.loss, log_prob}, flops);
}

}  // namespace autovm::training
