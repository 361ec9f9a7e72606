// Contract: what the gpu suite's tests of the runtime share (test_gpu.cc, test_remote.cc): a
// non-blocking stream with managed checksum slots that kernels add into, a hand-built plan
// document (PlanJson: uint8 tensors, "Test" forward steps) and a plan loaded from JSON text.
// Failures are doctest REQUIREs naming the runtime's error.
#pragma once

#include <autovm/autovm.h>
#include <cuda_runtime_api.h>
#include <doctest/doctest.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

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

// A plan document built part by part; dump() is its JSON text.
struct PlanJson {
  nlohmann::json doc;
  PlanJson(const char* generator, int64_t budget_bytes, const char* mechanism, int64_t arena_bytes) {
    doc["schema_version"] = 1;
    doc["generator"] = generator;
    doc["execution_model"] = "autovm-1";
    doc["options"] = {{"budget_bytes", budget_bytes}, {"mechanism", mechanism}};
    doc["statistics"] = {{"arena_bytes", arena_bytes}};
  }
  // A uint8 tensor of `bytes` at `offset`, live over steps [first, last].
  void tensor(int id, const char* name, const char* kind, int64_t bytes, int64_t offset, int first,
              int last, bool persistent = false) {
    doc["tensors"].push_back({{"id", id}, {"name", name}, {"kind", kind}, {"dtype", "uint8"},
                              {"bytes", bytes}, {"offset", offset}});
    doc["lifetimes"].push_back({{"tensor", id}, {"first", first}, {"last", last},
                                {"persistent", persistent}});
  }
  // Steps 0 .. n-1, step s reading ins[s] and writing outs[s].
  void steps(const std::vector<std::vector<int>>& ins, const std::vector<std::vector<int>>& outs) {
    for (size_t s = 0; s < ins.size(); ++s)
      doc["steps"].push_back({{"id", s}, {"op", "Test"}, {"phase", "forward"}, {"node", ""},
                              {"inputs", ins[s]}, {"outputs", outs[s]}, {"workspace", nullptr}});
  }
  // The action, appended; the caller may add fields (a recompute's source_step).
  nlohmann::json& action(const char* kind, int tensor, int64_t bytes, int after, int ready) {
    doc["actions"].push_back({{"kind", kind}, {"tensor", tensor}, {"bytes", bytes},
                              {"after_step", after}, {"ready_before_step", ready}});
    return doc["actions"].back();
  }
  std::string dump() const { return doc.dump(); }
};

inline autovm_plan* load(const std::string& text) {
  autovm_plan* plan = nullptr;
  REQUIRE_MESSAGE(autovm_plan_load_from_memory(text.data(), text.size(), &plan) == AUTOVM_OK,
                  autovm_last_error());
  return plan;
}

}  // namespace autovm::gpu_test
