// The autocast op lists (autocast.h).
#include "training/autocast.h"

#include <array>

#include "training/cost.h"

namespace autovm::training {

std::string_view name(Autocast a) {
  switch (a) {
    case Autocast::none: return "none";
    case Autocast::bf16: return "bf16";
    case Autocast::fp16: return "fp16";
  }
  return "none";
}

std::optional<Autocast> parse_autocast(std::string_view s) {
  if (s == "none") return Autocast::none;
  if (s == "bf16") return Autocast::bf16;
  if (s == "fp16") return Autocast::fp16;
  return std::nullopt;
}

DType low_dtype(Autocast a) {
  return a == Autocast::bf16 ? DType::bf16 : a == Autocast::fp16 ? DType::f16 : DType::f32;
}

AutocastList autocast_list(std::string_view op) {
  constexpr std::array<std::string_view, 8> fp32 = {"Exp",        "GroupNormalization", "LayerNormalization",
                                                    "Pow",        "ReduceProd",         "ReduceSum",
                                                    "Softmax",    "Softplus"};
  if (is_matrix_product(op) && !op.ends_with("Grad")) return AutocastList::lower;
  for (std::string_view o : fp32)
    if (o == op) return AutocastList::fp32;
  if (op == "ReduceL2") return AutocastList::fp32_dtype;
  if (op == "Concat") return AutocastList::promote;
  return AutocastList::other;
}

}  // namespace autovm::training
