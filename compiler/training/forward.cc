// Pass: the forward steps. Maps model values to tensors (graph inputs, parameters, buffers,
// activations), turns views into aliases, and adds one step per running node.
#include <fmt/format.h>

#include <algorithm>

#include "training/autocast.h"
#include "training/cost.h"
#include "training/passes.h"
#include "util/error.h"

namespace autovm::training {
namespace {

bool dropout_is_training(const model::Model& m, const model::Node& n) {
  double ratio = n.attr_f("ratio", 0.5);
  if (n.inputs.size() > 1 && n.inputs[1] >= 0) {
    const auto& v = m.values[static_cast<size_t>(n.inputs[1])];
    if (v.value && !v.value->floats.empty()) ratio = v.value->floats[0];
  }
  if (ratio <= 0) return false;
  if (m.opset < 12) return true;  // before opset 12 a Dropout node only exists to be applied
  if (n.inputs.size() > 2 && n.inputs[2] >= 0) {
    const auto& v = m.values[static_cast<size_t>(n.inputs[2])];
    if (v.value && !v.value->ints.empty()) return v.value->ints[0] != 0;
  }
  return false;
}

}  // namespace

ForwardPass append_forward(const model::Model& m, const TrainingOptions& o, TrainingStep& ts) {
  TrainingGraph& g = ts.graph;
  ForwardPass fp;
  std::vector<TensorId> tensor_of(m.values.size(), kNoTensor);
  auto add = [&](std::string name, TensorKind kind, DType dtype, Shape shape, bool grad) {
    TensorId id = g.add_tensor(std::move(name), kind, dtype, std::move(shape));
    fp.requires_grad.push_back(grad);
    return id;
  };

  std::vector<bool> running_stat(m.values.size(), false);
  for (const auto& n : m.nodes)
    if (!n.folded && n.op == "BatchNormalization")
      for (size_t i = 3; i < n.inputs.size() && i < 5; ++i)
        if (n.inputs[i] >= 0) running_stat[static_cast<size_t>(n.inputs[i])] = true;

  for (int v : m.inputs) {
    const auto& val = m.values[static_cast<size_t>(v)];
    tensor_of[static_cast<size_t>(v)] = add(val.name, TensorKind::input, val.dtype, val.shape, false);
  }
  // Initializers and folded constants become tensors when a running node first reads them.
  auto tensor_for = [&](int v) -> TensorId {
    if (v < 0) return kNoTensor;
    auto& t = tensor_of[static_cast<size_t>(v)];
    if (t != kNoTensor) return t;
    const auto& val = m.values[static_cast<size_t>(v)];
    bool trainable = val.source == model::ValueSource::initializer && is_floating(val.dtype) &&
                     !running_stat[static_cast<size_t>(v)] && !val.shape.empty();
    t = add(val.name, trainable ? TensorKind::parameter : TensorKind::buffer, val.dtype, val.shape,
            trainable);
    return t;
  };
  // Under autocast, the dtype of the running node's floating-point outputs (undefined: as the
  // model has them).
  DType autocast_out = DType::undefined;
  auto new_output = [&](int v, bool grad) {
    const auto& val = m.values[static_cast<size_t>(v)];
    const DType dtype = autocast_out != DType::undefined && is_floating(val.dtype) ? autocast_out : val.dtype;
    TensorId t = add(val.name, TensorKind::activation, dtype, val.shape, grad && is_floating(val.dtype));
    tensor_of[static_cast<size_t>(v)] = t;
    return t;
  };

  // Autocast (autocast.h): casts the node's floating-point data inputs to the dtype its list
  // runs in, each cast a "Cast" step of its own (a forward record, so that its backward casts
  // the gradient back), parameters' copies made once and shared; returns the outputs' dtype.
  std::vector<TensorId> copy_of;  // by parameter: its low-precision copy, once made
  auto apply_autocast = [&](Autocast mode, size_t ni, std::vector<TensorId>& inputs, size_t data) {
    const model::Node& n = m.nodes[ni];
    const DType low = low_dtype(mode);
    // PyTorch's type promotion: a zero-dim operand (a constant scale) does not widen a tensor
    // with dims (bf16 q * 0.125 stays bf16); among operands of one kind the widest wins.
    DType widest = DType::undefined;
    for (bool zero_dim : {false, true}) {
      for (size_t i = 0; i < data && widest == DType::undefined; ++i) {
        if (inputs[i] == kNoTensor || !is_floating(g.tensor(inputs[i]).dtype)) continue;
        if (g.tensor(inputs[i]).shape.empty() != zero_dim) continue;
        for (size_t j = i; j < data; ++j) {
          if (inputs[j] == kNoTensor || !is_floating(g.tensor(inputs[j]).dtype) ||
              g.tensor(inputs[j]).shape.empty() != zero_dim)
            continue;
          DType d = g.tensor(inputs[j]).dtype;
          if (widest == DType::undefined || d == DType::f32 || d == DType::f64) widest = d == DType::f64 ? DType::f32 : d;
        }
      }
    }
    const AutocastList list = autocast_list(n.op);
    if (list == AutocastList::other) {
      if (n.op == "BatchNormalization" || n.op == "InstanceNormalization")
        return inputs[0] == kNoTensor ? DType::undefined : g.tensor(inputs[0]).dtype;
      return widest;
    }
    if (list == AutocastList::fp32_dtype) return widest == DType::undefined ? widest : DType::f32;
    const DType target = list == AutocastList::lower ? low : list == AutocastList::fp32 ? DType::f32 : widest;
    for (size_t i = 0; i < data; ++i) {
      TensorId t = inputs[i];
      if (t == kNoTensor || !is_floating(g.tensor(t).dtype) || g.tensor(t).dtype == target) continue;
      const bool cache = g.tensor(t).kind == TensorKind::parameter && target == low;
      if (cache && size_t(t) < copy_of.size() && copy_of[size_t(t)] != kNoTensor) {
        inputs[i] = copy_of[size_t(t)];
        continue;
      }
      const Tensor src = g.tensor(t);  // a copy: add may reallocate
      std::string copy_name = fmt::format("{}/autocast_{}", cache ? src.name : n.name + "/" + src.name,
                                          target == DType::f32 ? "fp32" : name(mode));
      TensorId copy = add(std::move(copy_name), TensorKind::activation, target, src.shape,
                          fp.requires_grad[static_cast<size_t>(t)]);
      ForwardRecord cast;
      cast.rule = find_gradient_rule("Cast");
      cast.node = static_cast<int>(ni);
      cast.inputs = {t};
      cast.outputs = {copy};
      cast.step = add_step(g, "Cast", Phase::forward, n.name, {t}, {copy}, 0).id;
      fp.records.push_back(std::move(cast));
      if (cache) {
        if (copy_of.size() <= size_t(t)) copy_of.resize(size_t(t) + 1, kNoTensor);
        copy_of[size_t(t)] = copy;
      }
      inputs[i] = copy;
    }
    return target;
  };

  for (size_t ni = 0; ni < m.nodes.size(); ++ni) {
    const model::Node& n = m.nodes[ni];
    if (n.folded) continue;
    const GradientRule* rule = find_gradient_rule(n.op);
    if (!rule)
      throw Error(ErrorKind::unsupported,
                  fmt::format("node '{}' ({}) must run during training but AutoVM has no gradient "
                              "rule for {}; it can only be evaluated when its inputs are constants",
                              n.name, n.op, n.op));
    bool is_view = rule->op_class == OpClass::view ||
                   (n.op == "Dropout" && !dropout_is_training(m, n));
    if (is_view) {
      TensorId src = tensor_for(n.inputs.empty() ? -1 : n.inputs[0]);
      if (src == kNoTensor || n.outputs.empty() || n.outputs[0] < 0)
        throw Error(ErrorKind::invalid_model,
                    fmt::format("node '{}' ({}) has no input or output", n.name, n.op));
      tensor_of[static_cast<size_t>(n.outputs[0])] = src;
      g.tensors[static_cast<size_t>(src)].aliases.push_back(m.values[static_cast<size_t>(n.outputs[0])].name);
      continue;
    }

    ForwardRecord rec;
    rec.rule = rule;
    rec.node = static_cast<int>(ni);
    size_t data = rule->data_inputs < 0 ? n.inputs.size()
                                        : std::min(n.inputs.size(), size_t(rule->data_inputs));
    rec.inputs.assign(n.inputs.size(), kNoTensor);
    bool any_grad = false;
    for (size_t i = 0; i < data; ++i) rec.inputs[i] = tensor_for(n.inputs[i]);
    autocast_out = DType::undefined;
    if (o.autocast != Autocast::none && rule->op_class == OpClass::compute && n.op != "Cast")
      autocast_out = apply_autocast(o.autocast, ni, rec.inputs, data);
    if (rule->op_class == OpClass::compute) {
      bool all = rule->differentiable.empty() && rule->data_inputs < 0;  // Concat
      for (size_t i = 0; i < data; ++i) {
        bool diff = all || std::find(rule->differentiable.begin(), rule->differentiable.end(),
                                     int(i)) != rule->differentiable.end();
        if (diff && rec.inputs[i] != kNoTensor && fp.requires_grad[static_cast<size_t>(rec.inputs[i])])
          any_grad = true;
      }
    }

    if (n.op == "ScatterND" && any_grad) {
      const std::string reduction = n.attr_s("reduction", "none");
      if (reduction != "none" && reduction != "add")
        throw Error(ErrorKind::unsupported,
                    fmt::format("node '{}' (ScatterND) scatters with reduction '{}' into a tensor "
                                "that needs a gradient; AutoVM differentiates ScatterND with "
                                "reduction none or add only",
                                n.name, reduction));
    }

    std::vector<TensorId> step_outputs;
    if (n.op == "BatchNormalization") {
      if (n.outputs.empty() || n.outputs[0] < 0 || data < 5)
        throw Error(ErrorKind::invalid_model,
                    fmt::format("node '{}' (BatchNormalization) needs 5 inputs and an output", n.name));
      TensorId y = new_output(n.outputs[0], any_grad);
      const Shape channels = g.tensor(rec.inputs[1]).shape;
      TensorId mean = add(n.name + "/saved_mean", TensorKind::activation, DType::f32, channels, false);
      TensorId inv_std = add(n.name + "/saved_inv_std", TensorKind::activation, DType::f32, channels, false);
      // ONNX outputs 1, 2 are the updated running statistics (in place); 3, 4 the saved ones.
      for (size_t j = 1; j < n.outputs.size() && j < 5; ++j) {
        if (n.outputs[j] < 0) continue;
        TensorId same = j == 1 ? rec.inputs[3] : j == 2 ? rec.inputs[4] : j == 3 ? mean : inv_std;
        tensor_of[static_cast<size_t>(n.outputs[j])] = same;
        g.tensors[static_cast<size_t>(same)].aliases.push_back(m.values[static_cast<size_t>(n.outputs[j])].name);
      }
      rec.outputs = {y, mean, inv_std};
      step_outputs = {y, mean, inv_std, rec.inputs[3], rec.inputs[4]};
    } else if (n.op == "LayerNormalization") {
      TensorId y = new_output(n.outputs[0], any_grad);
      Shape stats = g.tensor(y).shape;
      int64_t rank = int64_t(stats.size());
      int64_t axis = n.attr_i("axis", -1);
      if (axis < 0) axis += rank;
      for (int64_t i = std::max<int64_t>(axis, 0); i < rank; ++i) stats[size_t(i)] = 1;
      auto saved = [&](size_t k, const char* suffix) {
        return k < n.outputs.size() && n.outputs[k] >= 0
                   ? new_output(n.outputs[k], false)
                   : add(n.name + suffix, TensorKind::activation, DType::f32, stats, false);
      };
      rec.outputs = {y, saved(1, "/saved_mean"), saved(2, "/saved_inv_std")};
      step_outputs = rec.outputs;
    } else if (n.op == "ScaledDotProductAttention") {
      // The kernels' logsumexp, one f32 per query row (the memory-efficient kernel pads the
      // rows to a multiple of 32, at most 31 more floats a row).
      TensorId y = new_output(n.outputs[0], any_grad);
      Shape rows = g.tensor(y).shape;
      rows.pop_back();
      rec.outputs = {y, add(n.name + "/logsumexp", TensorKind::activation, DType::f32, rows, false)};
      step_outputs = rec.outputs;
    } else if (n.op == "InstanceNormalization" || n.op == "GroupNormalization") {
      // Saved statistics: one per (sample, channel), or per (sample, group).
      TensorId y = new_output(n.outputs[0], any_grad);
      const Shape& x = g.tensor(y).shape;
      const Shape stats{x[0], n.op == "GroupNormalization" ? n.attr_i("num_groups", 1) : x[1]};
      rec.outputs = {y, add(n.name + "/saved_mean", TensorKind::activation, DType::f32, stats, false),
                     add(n.name + "/saved_inv_std", TensorKind::activation, DType::f32, stats, false)};
      step_outputs = rec.outputs;
    } else if (n.op == "Dropout" ||
               (n.op == "MaxPool" && o.pool_indices && !n.outputs.empty() && n.outputs[0] >= 0)) {
      // [Y, a second output of Y's shape that backward reads]: dropout's mask, or max
      // pooling's indices; the model's own when it has one.
      bool pool = n.op == "MaxPool";
      TensorId y = new_output(n.outputs[0], any_grad);
      TensorId second = n.outputs.size() > 1 && n.outputs[1] >= 0
                            ? new_output(n.outputs[1], false)
                            : add(n.name + (pool ? "/indices" : "/mask"), TensorKind::activation,
                                  pool ? DType::i64 : DType::boolean, Shape(g.tensor(y).shape),
                                  false);
      rec.outputs = {y, second};
      step_outputs = rec.outputs;
    } else {
      for (int v : n.outputs) {
        if (v < 0) continue;
        if (!m.values[static_cast<size_t>(v)].shape_known)
          throw Error(ErrorKind::invalid_model,
                      fmt::format("node '{}' ({}): the shape of output '{}' is unknown", n.name,
                                  n.op, m.values[static_cast<size_t>(v)].name));
        rec.outputs.push_back(new_output(v, any_grad));
      }
      step_outputs = rec.outputs;
    }

    std::vector<TensorId> step_inputs;
    for (TensorId t : rec.inputs)
      if (t != kNoTensor && std::find(step_inputs.begin(), step_inputs.end(), t) == step_inputs.end())
        step_inputs.push_back(t);
    TensorId workspace = kNoTensor;
    double forward_us = -1;
    if (n.op == "Conv" || n.op == "ConvTranspose") {
      const DType compute = autocast_out != DType::undefined
                                ? autocast_out
                                : m.values[static_cast<size_t>(n.inputs[0])].dtype;
      int64_t estimate = conv_workspace_bytes(m, n, o.conv_workspace_limit);
      // The estimate is in the model's dtype (f32); a capped one stays at the cap.
      if (autocast_out != DType::undefined && estimate < o.conv_workspace_limit)
        estimate = estimate / element_size(DType::f32) * element_size(autocast_out);
      rec.workspace_bytes = rec.backward_workspace_bytes = estimate;
      if (auto measured = o.conv_workspaces.find(m, n, compute)) {
        rec.workspace_bytes = measured->forward_bytes;
        rec.backward_workspace_bytes = measured->backward_bytes;
        rec.estimated_workspace_bytes = estimate;
        rec.workspace_entry = measured->entry;
        rec.backward_us = measured->backward_us;
        rec.backward_weight_us = measured->backward_weight_us;
        forward_us = measured->forward_us;
        ++ts.conv_workspaces_measured;
      }
      if (rec.workspace_bytes > 0) {
        workspace = add(n.name + "/workspace", TensorKind::workspace, DType::u8,
                        Shape{rec.workspace_bytes}, false);
        if (rec.estimated_workspace_bytes >= 0)
          ts.measured_workspaces.push_back({workspace, rec.estimated_workspace_bytes, rec.workspace_entry, false});
      }
    }
    Step& step = add_step(g, n.op, Phase::forward, n.name, std::move(step_inputs),
                          std::move(step_outputs), forward_flops(m, n), workspace);
    step.measured_us = forward_us;
    rec.step = step.id;
    fp.records.push_back(std::move(rec));
  }

  if (m.outputs.empty())
    throw Error(ErrorKind::invalid_model, "the model has no graph output; AutoVM needs one to train");
  // The loss reads every floating-point output the model computes (a segmentation model's out
  // and aux); integer outputs (MaxPool indices, argmax) carry no loss.
  for (int v : m.outputs) {
    const auto& out = m.values[static_cast<size_t>(v)];
    TensorId t = tensor_of[static_cast<size_t>(v)];
    if (!out.shape_known || !is_floating(out.dtype)) continue;
    if (t == kNoTensor || g.tensor(t).kind != TensorKind::activation || out.shape.size() < 2)
      continue;
    if (std::find(ts.outputs.begin(), ts.outputs.end(), t) != ts.outputs.end()) continue;
    ts.outputs.push_back(t);
    ts.output_shapes.push_back(out.shape);
  }
  const auto& first = m.values[static_cast<size_t>(m.outputs[0])];
  if (ts.outputs.empty() || ts.outputs[0] != tensor_of[static_cast<size_t>(m.outputs[0])])
    throw Error(ErrorKind::invalid_model,
                fmt::format("the model's first output '{}' is not a floating-point tensor of shape "
                            "[batch, ...] (rank 2 or more) computed by the model; AutoVM trains "
                            "the model from its outputs: export the model so that its first output "
                            "is the logits (classification), the per-pixel scores (segmentation) "
                            "or the prediction a loss reads",
                            first.name));
  ts.logits = ts.outputs[0];
  ts.logits_shape = ts.output_shapes[0];
  return fp;
}

}  // namespace autovm::training
