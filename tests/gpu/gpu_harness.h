// Contract: what the gpu suite's tests of the runtime share (test_gpu.cc, test_remote.cc): a
// non-blocking stream with managed checksum slots that kernels add into, and a plan loaded from
// JSON text. Failures are doctest REQUIREs naming the runtime's error.
#pragma once

#include <autovm/autovm.h>
#include <cuda_runtime_api.h>
#include <doctest/doctest.h>

#include <cstdint>
#include <string>

#include "kernels.h"

namespace autovm::gpu_test {

struct Gpu {
  static constexpr int kSlots = 8;
  cudaStream_t stream = nullptr;
  unsigned long long* sums = nullptr;  // managed: kSlots of them, one per tensor checked at once
  Gpu() {
    REQUIRE(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) == cudaSuccess);
    REQUIRE(cudaMallocManaged(reinterpret_cast<void**>(&sums), kSlots * sizeof(unsigned long long)) ==
            cudaSuccess);
  }
  ~Gpu() {
    cudaFree(sums);
    cudaStreamDestroy(stream);
  }
  Gpu(const Gpu&) = delete;
  Gpu& operator=(const Gpu&) = delete;
  // The checksum of [p, p + bytes) by a kernel on the stream, waited for (slot 0).
  unsigned long long sum(const void* p, int64_t bytes) {
    REQUIRE(cudaMemsetAsync(sums, 0, sizeof *sums, stream) == cudaSuccess);
    REQUIRE(autovm::replay::checksum(p, bytes, sums, stream) == cudaSuccess);
    REQUIRE(cudaStreamSynchronize(stream) == cudaSuccess);
    return sums[0];
  }
};

inline autovm_plan* load(const std::string& text) {
  autovm_plan* plan = nullptr;
  REQUIRE_MESSAGE(autovm_plan_load_from_memory(text.data(), text.size(), &plan) == AUTOVM_OK,
                  autovm_last_error());
  return plan;
}

}  // namespace autovm::gpu_test
