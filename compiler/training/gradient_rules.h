// Contract: the table of gradient rules, one entry per supported op. It is the single place
// that says, for each op of the forward graph:
//   - which of its inputs are tensors of the training step (`data_inputs`; the rest are
//     compile-time values such as Reshape's shape or Clip's bounds),
//   - whether it is a view (shares its input's storage, no step of its own),
//   - which inputs receive gradients, and which forward tensors the backward step needs
//     (and so keeps alive until it runs): `saves`.
//
// A forward step's tensor layout is the ONNX node's, with two additions the training step
// needs: BatchNormalization gets outputs [Y, saved_mean, saved_inv_std] and takes its running
// statistics as in-place inputs/outputs; LayerNormalization gets [Y, saved_mean, saved_inv_std],
// and so do InstanceNormalization (statistics [N, C]) and GroupNormalization ([N, groups]);
// ScaledDotProductAttention gets [Y, logsumexp] (f32, Y's leading dims: [..., Lq]);
// Dropout (training) gets outputs [Y, mask]; MaxPool gets [Y, Indices] with
// TrainingOptions::pool_indices.
// Refs below index that layout.
#pragma once

#include <string_view>
#include <vector>

namespace autovm::training {

// A forward tensor of a step: its input or output number `index`.
struct Ref {
  bool output = false;
  int index = 0;
  bool operator==(const Ref&) const = default;
};

enum class OpClass {
  compute,            // a step of the training step, differentiable
  view,               // shares storage with input 0; no step, no gradient step of its own
  non_differentiable, // a step whose outputs carry no gradient (e.g. Shape of a runtime value)
};

struct GradientRule {
  std::string_view op;
  OpClass op_class = OpClass::compute;
  int data_inputs = -1;               // leading inputs that are tensors; -1 for all
  // Input numbers that receive a gradient; with data_inputs -1, empty means every input (and
  // then no forward tensor is needed: Concat, Sum).
  std::vector<int> differentiable;
  // needs[k]: forward tensors needed to compute the gradient of input differentiable[k].
  std::vector<std::vector<Ref>> needs;
  double backward_flops_factor = 1;   // backward FLOPs as a multiple of forward FLOPs
  // needs, for a step that has its optional second output (MaxPool's Indices); empty: the same.
  std::vector<std::vector<Ref>> needs_with_second_output = {};
};

// The rule for an ONNX op type, or nullptr when there is none.
const GradientRule* find_gradient_rule(std::string_view op);
// Every rule, sorted by op name.
const std::vector<GradientRule>& gradient_rules();

}  // namespace autovm::training
