// Contract: the synthetic kernels autovm-replay and the gpu tests run. Device code lives in
// kernels.cu (nvcc); these launchers are plain host functions, callable from g++-built code.
// Every launcher enqueues on `stream` and returns the launch's status; none synchronises.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace autovm::replay {

struct Span {
  void* ptr;
  int64_t bytes;
};

inline constexpr int kMaxSpans = 48;  // per launch; run_step splits longer lists

// One planned step: reads every byte of `inputs`, writes every byte of `outputs` (a value that
// depends on what was read, so no read is optimised away), then holds the stream until at least
// `hold_us` have passed since the step's first kernel started (its predicted compute time).
cudaError_t run_step(const Span* inputs, int input_count, const Span* outputs, int output_count,
                     double hold_us, cudaStream_t stream);

// Deterministic test data: byte i of the pattern for `seed`.
uint8_t pattern_byte(uint32_t seed, int64_t i);
cudaError_t fill_pattern(void* p, int64_t bytes, uint32_t seed, cudaStream_t stream);
// Adds sum_i byte(i) * (1 + i % 251) over [p, p + bytes) to *device_sum (a device or managed
// unsigned long long).
cudaError_t checksum(const void* p, int64_t bytes, unsigned long long* device_sum,
                     cudaStream_t stream);
// The same sum for the pattern, computed on the host.
unsigned long long pattern_checksum(uint32_t seed, int64_t bytes);

}  // namespace autovm::replay
