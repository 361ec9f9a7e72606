#include "ir/graph.h"

namespace autovm {

TensorId TrainingGraph::add_tensor(std::string name, TensorKind kind, DType dtype, Shape shape) {
  Tensor t;
  t.id = static_cast<TensorId>(tensors.size());
  t.name = std::move(name);
  t.kind = kind;
  t.dtype = dtype;
  t.bytes = element_count(shape) * element_size(dtype);
  t.shape = std::move(shape);
  tensors.push_back(std::move(t));
  return tensors.back().id;
}

}  // namespace autovm
