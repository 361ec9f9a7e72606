// Contract: estimates of the work of one forward op, from shapes alone.
//   forward_flops: floating-point operations of the op (multiply-add counts 2). Data movement
//     ops (Concat, Slice, Transpose, ...) count 0: their cost is in bytes touched.
//   conv_workspace_bytes: the scratch memory a convolution (forward or backward) is assumed to
//     take. cuDNN picks an algorithm at run time, so this is an estimate, documented in
//     docs/execution-model.md: the bytes of the im2col matrix of the whole batch
//     (N * Ho * Wo * Cin/group * kh * kw elements; for ConvTranspose, whose weight is
//     [Cin, Cout/group, k...], N * Hi * Wi * Cout/group * kh * kw), capped at `limit`, and zero for 1x1
//     convolutions with stride 1 and no padding, which run as a plain matrix product.
//   is_matrix_product: whether an op (a forward op type, or its "<Op>Grad") runs as a tiled
//     matrix product (convolutions, Gemm, MatMul, Einsum, fused linear layers and attention):
//     its kernels read each operand tile many times. autocast runs exactly these in low
//     precision.
#pragma once

#include <cstdint>
#include <string_view>

#include "model/model.h"

namespace autovm::training {

double forward_flops(const model::Model& m, const model::Node& node);
int64_t conv_workspace_bytes(const model::Model& m, const model::Node& conv, int64_t limit);
bool is_matrix_product(std::string_view op);

}  // namespace autovm::training
