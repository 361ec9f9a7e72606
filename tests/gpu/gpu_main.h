// Contract: the gpu suite's main: doctest runs the file's cases when a CUDA device is there;
// without one the suite is skipped (exit 77, as Meson reads it). The including file defines
// DOCTEST_CONFIG_IMPLEMENT and calls run_or_skip from its main.
#pragma once

#include <cuda_runtime_api.h>
#include <doctest/doctest.h>

#include <cstdio>

namespace autovm::gpu_test {

inline int run_or_skip(int argc, char** argv) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::printf("no CUDA device: the gpu suite is skipped\n");
    return 77;
  }
  doctest::Context context(argc, argv);
  return context.run();
}

}  // namespace autovm::gpu_test
