// Contract: ONNX Einsum equations, as the planner supports them: two operands, each a term of
// letter labels (a-z, A-Z; spaces ignored), in explicit form ("ij,jk->ik") or implicit form
// ("ij,jk": the output is every label that occurs once, in alphabetical order). Refused as
// ErrorKind::unsupported: an ellipsis, a label repeated within one term (a diagonal), a number
// of operands other than two. Refused as ErrorKind::invalid_model: a malformed equation, an
// output label repeated or absent from the inputs, a term whose length is not its operand's
// rank, and a label whose extents differ between operands (no broadcasting without ellipsis).
// Messages name the equation; callers prefix the node.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "model/model.h"

namespace autovm::model {

struct EinsumEquation {
  std::vector<std::string> inputs;  // one term per operand, spaces removed
  std::string output;
};

EinsumEquation parse_einsum(std::string_view equation);

// Each label's extent, from the operands' shapes (one per term, in order).
std::map<char, int64_t> einsum_extents(const EinsumEquation& e, const std::vector<const Shape*>& shapes);

// The output's shape: the output term's extents.
Shape einsum_output_shape(const EinsumEquation& e, const std::map<char, int64_t>& extents);

// Multiply-adds of the contraction, counted as 2 FLOPs each: 2 x the product of every label's
// extent (each combination of labels is one product and one sum).
double einsum_flops(const std::map<char, int64_t>& extents);

}  // namespace autovm::model
