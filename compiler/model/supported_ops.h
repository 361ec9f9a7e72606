// Contract: the ONNX ops (default domain) AutoVM plans for: it infers their shapes, and the
// training graph has gradient rules for those that run. The last group are helpers exporters
// emit in shape-computing subgraphs; shape inference normally folds them away.
#pragma once

#include <span>
#include <string_view>

namespace autovm::model {

// Sorted by name.
std::span<const std::string_view> supported_op_names();

bool is_supported_op(std::string_view op);

}  // namespace autovm::model
