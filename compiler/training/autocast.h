// Contract: what torch.autocast (CUDA) does to each op of the forward pass, for
// autovm-plan --autocast bf16|fp16. Autocast sorts ops into lists (torch/csrc/autograd/
// autocast_mode.cpp, "CUDA Ops that can autocast to float16" and "to float32"):
//   lower    runs in the low dtype; every floating-point input is cast to it first. Parameters'
//            cast copies are cached for the rest of the forward pass (autocast's weight cache)
//            and are what autograd saves: Conv, ConvTranspose, Gemm (linear), MatMul, Einsum,
//            ScaledDotProductAttention.
//   fp32     runs in float32; low-precision inputs are cast up first: Softmax, LayerNormalization,
//            GroupNormalization, Pow, Softplus, ReduceSum, ReduceProd, Exp, and the losses.
//   fp32_dtype  runs in float32 by a dtype argument autocast appends (fp32_append_dtype): no
//            cast copy, the op reads its low-precision input and writes float32: ReduceL2
//            (norm), whose backward saves that input.
//   promote  runs in the widest of its inputs' dtypes, inputs cast to it: Concat (cat).
//   other    no autocast: PyTorch's type promotion gives the output the widest floating-point
//            dtype of its inputs (fp16 activation + fp32 parameter: fp32), except that batch and
//            instance norm keep their input's dtype (fp32 affine parameters are allowed).
// Parameters, their gradients (cast up from the low-precision ones by the cast's backward) and
// optimizer state stay float32.
#pragma once

#include <optional>
#include <string_view>

#include "ir/types.h"

namespace autovm::training {

enum class Autocast { none, bf16, fp16 };
std::string_view name(Autocast);  // "none", "bf16", "fp16"
std::optional<Autocast> parse_autocast(std::string_view);
DType low_dtype(Autocast);        // bf16 or f16; f32 for none

enum class AutocastList { lower, fp32, fp32_dtype, promote, other };
AutocastList autocast_list(std::string_view onnx_op);

}  // namespace autovm::training
