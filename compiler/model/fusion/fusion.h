// Contract: kernel fusion. fuse_kernels(model) rewrites the decomposed forms that PyTorch's
// TorchScript exporter writes for some of its single kernels back into that one kernel, so that
// the training step plans what PyTorch runs: one output, and exactly the tensors that kernel's
// autograd node saves for backward (derivatives.yaml), not every intermediate of the
// decomposition. Patterns (x the input; every intermediate read by the pattern alone, none a
// graph output):
//   Silu       Mul(x, Sigmoid(x))                                       saves x
//   Gelu       Mul(Mul(x, Add(Erf(Div(x, sqrt 2)), 1)), 0.5)            saves x
//   HardSwish  Mul(x, HardSigmoid(x; alpha 1/6, beta 1/2))              saves x
//   Mish       Mul(x, Tanh(Softplus(x)))                                saves x
//   Linear     Add(MatMul(x, Transpose(W)), b), x of rank 2 or more, W [M, K]: the planner's own
//              op (x, W, b) -> [..., M], torch's linear on an input of rank 3 or more   saves x, W
//   LayerNormalization  d = Sub(x, ReduceMean(x)); Add(Mul(Div(d, Sqrt(Add(ReduceMean(Pow(d, 2)),
//              eps))), scale), bias), both means over the same trailing axes  saves x, mean, rstd
//   ScaledDotProductAttention  MatMul(Dropout?(Softmax(MatMul(q, Transpose(k0)))), v), with
//              optional scalar Mul or Div on q, on Transpose(k0) and on the scores, the softmax
//              over the last axis: the planner's own op (q, k, v; scale, dropout) ->
//              [..., Lq, dv], torch's scaled_dot_product_attention, k0's Transpose rewritten
//              to give k
//                                                    saves q, k, v, the output and a logsumexp
// Operands of Mul and Add match in either order. A near miss (an intermediate with a reader
// outside the pattern, another constant, other axes) stays as it is. The fused node takes the
// name, position and output value of the pattern's last node; the other nodes are removed.
//
// Runs after infer_shapes (it reads shapes and the values of constants) and before
// build_training_step. A model with none of the patterns is left unchanged.
#pragma once

#include <map>
#include <string>

#include "model/model.h"

namespace autovm::model {

// The fused op names and how many of each were made.
using FusionCounts = std::map<std::string, int>;

FusionCounts fuse_kernels(Model& model);

}  // namespace autovm::model
