// Contract: shape inference for the supported ops, for a chosen batch size.
//
// infer_shapes(model, batch) sets the batch dimension (dim 0) of every graph input to `batch`
// (whatever it was declared as: symbolic, fixed or missing), then visits nodes in topological
// order and sets every output's dtype and shape. Nodes whose inputs all have known values and
// whose op can be evaluated (Shape, Gather, Unsqueeze, Squeeze, Concat, Slice, Cast, Constant,
// ConstantOfShape, Reshape, Identity, integer Add/Sub/Mul/Div, Range, Equal, Where, Expand...)
// are evaluated: their outputs get `value` and the node is marked `folded`, so shape-computing
// subgraphs vanish from the training step. Constant nodes are always folded; a folded float
// constant that a running node uses becomes a buffer of the training step.
//
// Throws Error(invalid_model) naming the node, its op and the offending shapes when a shape is
// inconsistent (e.g. Conv channels mismatch, Reshape element counts differ), and
// Error(usage) when batch < 1.
#pragma once

#include <cstdint>
#include <string_view>

#include "model/model.h"

namespace autovm::model {

void infer_shapes(Model& model, int64_t batch);

// Whether infer_shapes has a rule for `op` (of the default ONNX domain).
bool has_shape_rule(std::string_view op);

}  // namespace autovm::model
