// The supported-op list and check_supported_ops (contracts in supported_ops.h and model.h).
#include "model/supported_ops.h"

#include <algorithm>
#include <array>
#include <map>
#include <string>

#include "model/model.h"
#include "util/error.h"

namespace autovm::model {
namespace {

constexpr std::array<std::string_view, 74> kSupported = {
    "Add", "AveragePool", "BatchNormalization", "Cast", "Clip", "Concat", "Constant",
    "ConstantOfShape", "Conv", "ConvTranspose", "Div", "Dropout", "Einsum", "Elu", "Equal", "Erf", "Exp", "Expand",
    "Flatten", "Gather", "Gelu", "Gemm", "GlobalAveragePool", "GlobalMaxPool", "Greater",
    "GreaterOrEqual", "GroupNormalization", "HardSigmoid", "HardSwish", "Identity",
    "InstanceNormalization", "LRN", "LayerNormalization", "LeakyRelu", "Less", "LessOrEqual",
    "MatMul", "Max", "MaxPool", "Min", "Mish", "Mod", "Mul", "Neg", "Not", "Pad", "Pow",
    "RandomUniformLike", "Range", "ReduceL2", "ReduceMax", "ReduceMean", "ReduceProd", "ReduceSum", "Relu",
    "Reshape", "Resize", "ScatterND", "Selu", "Shape", "Sigmoid", "Slice", "Softmax", "Softplus", "Split",
    "Sqrt", "Squeeze", "Sub", "Sum", "Tanh", "Transpose", "Unsqueeze", "Upsample", "Where",
};
static_assert(std::is_sorted(kSupported.begin(), kSupported.end()));

}  // namespace

std::span<const std::string_view> supported_op_names() { return kSupported; }

bool is_supported_op(std::string_view op) {
  return std::binary_search(kSupported.begin(), kSupported.end(), op);
}

void check_supported_ops(const Model& model) {
  std::map<std::string, std::string> unsupported;  // op (with its domain if any) -> first node
  for (const Node& n : model.nodes) {
    if (n.domain.empty() && is_supported_op(n.op)) continue;
    std::string op = n.domain.empty() ? n.op : n.domain + "." + n.op;
    unsupported.emplace(op, n.name);
  }
  if (unsupported.empty()) return;
  std::string message = "unsupported ops: ";
  for (auto it = unsupported.begin(); it != unsupported.end(); ++it) {
    message += (it == unsupported.begin() ? "" : ", ") + it->first + " (node '" + it->second + "')";
  }
  message += "; AutoVM supports: ";
  for (size_t i = 0; i < kSupported.size(); ++i) message += (i ? ", " : "") + std::string(kSupported[i]);
  throw Error(ErrorKind::unsupported, message);
}

}  // namespace autovm::model
