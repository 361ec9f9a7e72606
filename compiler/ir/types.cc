#include "ir/types.h"

namespace autovm {

std::string_view name(DType t) {
  switch (t) {
    case DType::undefined: return "undefined";
    case DType::f32: return "float32";
    case DType::f16: return "float16";
    case DType::bf16: return "bfloat16";
    case DType::f64: return "float64";
    case DType::i64: return "int64";
    case DType::i32: return "int32";
    case DType::i16: return "int16";
    case DType::i8: return "int8";
    case DType::u8: return "uint8";
    case DType::boolean: return "bool";
  }
  return "undefined";
}

std::string_view name(TensorKind k) {
  switch (k) {
    case TensorKind::input: return "input";
    case TensorKind::label: return "label";
    case TensorKind::parameter: return "parameter";
    case TensorKind::buffer: return "buffer";
    case TensorKind::gradient: return "gradient";
    case TensorKind::optimizer_state: return "optimizer_state";
    case TensorKind::activation: return "activation";
    case TensorKind::activation_grad: return "activation_grad";
    case TensorKind::workspace: return "workspace";
  }
  return "activation";
}

std::string_view name(Phase p) {
  switch (p) {
    case Phase::forward: return "forward";
    case Phase::loss: return "loss";
    case Phase::backward: return "backward";
    case Phase::optimizer: return "optimizer";
  }
  return "forward";
}

int64_t element_size(DType t) {
  switch (t) {
    case DType::f64: case DType::i64: return 8;
    case DType::f32: case DType::i32: return 4;
    case DType::f16: case DType::bf16: case DType::i16: return 2;
    case DType::i8: case DType::u8: case DType::boolean: return 1;
    case DType::undefined: return 0;
  }
  return 0;
}

bool is_floating(DType t) {
  return t == DType::f32 || t == DType::f16 || t == DType::bf16 || t == DType::f64;
}

bool persists_across_steps(TensorKind k) {
  return k == TensorKind::parameter || k == TensorKind::buffer || k == TensorKind::optimizer_state;
}

int64_t element_count(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

}  // namespace autovm
