// The gpu suite: libautovm's CUDA backend on a real device. Data written before an eviction must
// read back intact after the prefetch, for every mechanism and for demand paging, checked by
// checksum on the GPU, including tensors that share 2 MiB blocks with their neighbours and a
// neighbour written while the tensor is away. Exits 77 (skipped) without a CUDA device.
#define DOCTEST_CONFIG_IMPLEMENT
#include <autovm/autovm.h>
#include <cuda_runtime_api.h>
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "gpu_harness.h"
#include "gpu_main.h"
#include "kernels.h"

namespace {

using autovm::gpu_test::Gpu;
using autovm::gpu_test::load;
using autovm::gpu_test::PlanJson;

using nlohmann::json;
using autovm::replay::checksum;
using autovm::replay::fill_pattern;
using autovm::replay::pattern_checksum;

// Four tensors packed back to back at 256-byte alignment, so that a, b and c share 2 MiB blocks:
//   a (5 MiB + 1234 B): evicted after step 0, prefetched after step 2 (ready before 3)
//   b (3 MiB):          stays resident; rewritten at step 1 while its neighbours are away
//   c (300 KiB):        evicted and prefetched like a (smaller than a block)
//   d (2 MiB + 8 KiB):  discarded after step 0, recomputed before step 3 (from step 0)
// Steps 0..4; step 3 checks everything; the lifetimes span the step.
const int64_t kBytes[4] = {(5 << 20) + 1234, 3 << 20, 300 << 10, (2 << 20) + (8 << 10)};

std::string make_plan(int64_t arena_override = 0) {
  int64_t offset = 0;
  std::vector<int64_t> offsets;
  for (int64_t b : kBytes) {
    offsets.push_back(offset);
    offset += (b + 255) / 256 * 256;
  }
  PlanJson p("tests/gpu/test_gpu.cc", offset, "staged", arena_override > 0 ? arena_override : offset);
  const char* names[4] = {"a", "b", "c", "d"};
  for (int i = 0; i < 4; ++i) p.tensor(i, names[i], "activation", kBytes[i], offsets[i], 0, 4);
  p.steps(std::vector<std::vector<int>>(5), std::vector<std::vector<int>>(5));
  auto action = [&](const char* kind, int t, int after, int ready) -> json& {
    return p.action(kind, t, kBytes[t], after, ready);
  };
  action("evict", 0, 0, 2);
  action("evict", 2, 0, 2);
  action("discard", 3, 0, 1);
  action("prefetch", 0, 2, 3);
  action("prefetch", 2, 2, 3);
  action("recompute", 3, 2, 3)["source_step"] = 0;
  return p.dump();
}

// Checks, on the GPU, that tensor t of the first n lies at ptr[t] with the pattern of seeds[t]
// (kBytes[t] long); names[t] names it in a failure.
void check_patterns(Gpu& gpu, char* const* ptr, const uint32_t* seeds, int n, const char* names) {
  REQUIRE(cudaMemsetAsync(gpu.sums, 0, static_cast<size_t>(n) * sizeof(unsigned long long),
                          gpu.stream) == cudaSuccess);
  for (int t = 0; t < n; ++t)
    REQUIRE(checksum(ptr[t], kBytes[t], gpu.sums + t, gpu.stream) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(gpu.stream) == cudaSuccess);
  for (int t = 0; t < n; ++t) {
    INFO("tensor " << names[t]);
    CHECK(gpu.sums[t] == pattern_checksum(seeds[t], kBytes[t]));
  }
}

autovm_runtime_options cuda_options(autovm_mechanism mechanism,
                                    autovm_mode mode = AUTOVM_MODE_PLAN) {
  autovm_runtime_options o;
  autovm_runtime_options_init(&o);
  o.backend = AUTOVM_BACKEND_CUDA;
  o.mechanism = mechanism;
  o.mode = mode;
  return o;
}

// Runs `rounds` training steps under `mechanism` and `mode` and checks every tensor at step 3.
// With `bind_a`, tensor a lies in the test's own managed range instead of the arena.
void run(autovm_mechanism mechanism, autovm_mode mode, int rounds, bool bind_a = false) {
  Gpu gpu;
  autovm_plan* plan = load(make_plan());
  autovm_runtime_options o = cuda_options(mechanism, mode);
  o.strict = 1;
  autovm_runtime* rt = nullptr;
  REQUIRE_MESSAGE(autovm_runtime_create(plan, &o, &rt) == AUTOVM_OK, autovm_last_error());
  void* own = nullptr;
  if (bind_a) {
    REQUIRE(cudaMallocManaged(&own, static_cast<size_t>(kBytes[0])) == cudaSuccess);
    REQUIRE_MESSAGE(autovm_tensor_bind(rt, 0, own, kBytes[0]) == AUTOVM_OK, autovm_last_error());
  }
  void* ptr[4];
  for (int t = 0; t < 4; ++t) REQUIRE(autovm_tensor_pointer(rt, t, &ptr[t]) == AUTOVM_OK);
  if (bind_a) CHECK(ptr[0] == own);
  for (int round = 0; round < rounds; ++round) {
    const uint32_t seed = 1000u * static_cast<uint32_t>(round + 1);
    for (int s = 0; s < 5; ++s) {
      REQUIRE_MESSAGE(autovm_step_begin(rt, s, gpu.stream) == AUTOVM_OK, autovm_last_error());
      if (s == 0)
        for (int t = 0; t < 4; ++t)
          REQUIRE(fill_pattern(ptr[t], kBytes[t], seed + t, gpu.stream) == cudaSuccess);
      if (s == 1) {  // b's neighbours a and c are away; d is discarded
        REQUIRE(autovm_touch(rt, 1, 1) == AUTOVM_OK);
        REQUIRE(fill_pattern(ptr[1], kBytes[1], seed + 100, gpu.stream) == cudaSuccess);
      }
      if (s == 3) {
        for (int t = 0; t < 4; ++t) REQUIRE(autovm_touch(rt, 3, t) == AUTOVM_OK);
        // d was recomputed: the trainer runs its source step (0) again, writing d.
        REQUIRE(fill_pattern(ptr[3], kBytes[3], seed + 3, gpu.stream) == cudaSuccess);
        REQUIRE(cudaMemsetAsync(gpu.sums, 0, 4 * sizeof(unsigned long long), gpu.stream) ==
                cudaSuccess);
        for (int t = 0; t < 4; ++t)
          REQUIRE(checksum(ptr[t], kBytes[t], gpu.sums + t, gpu.stream) == cudaSuccess);
        REQUIRE(cudaStreamSynchronize(gpu.stream) == cudaSuccess);
        const uint32_t seeds[4] = {seed, seed + 100, seed + 2, seed + 3};
        for (int t = 0; t < 4; ++t) {
          INFO("round " << round << ", tensor " << "abcd"[t]);
          CHECK(gpu.sums[t] == pattern_checksum(seeds[t], kBytes[t]));
        }
      }
      REQUIRE_MESSAGE(autovm_step_end(rt, s, gpu.stream) == AUTOVM_OK, autovm_last_error());
    }
  }
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  autovm_stats st;
  REQUIRE(autovm_runtime_stats(rt, &st) == AUTOVM_OK);
  CHECK(st.violations == 0);
  CHECK(st.training_steps == rounds);
  if (mode != AUTOVM_MODE_RESIDENT) {
    CHECK(st.bytes_to_host == rounds * (kBytes[0] + kBytes[2]));
    CHECK(st.discards == rounds);
    CHECK(st.recomputes == rounds);
  }
  if (mode == AUTOVM_MODE_PLAN) {
    CHECK(st.bytes_to_device == rounds * (kBytes[0] + kBytes[2]));
    // The compute stream waited before step 2 (the evictions complete) and step 3 (the
    // prefetches and the recompute's memory): one timed wait each.
    CHECK(st.measured_waits == 2 * rounds);
  }
  if (mode == AUTOVM_MODE_DEMAND_PAGING) CHECK(st.measured_waits == rounds);  // evictions only
  autovm_runtime_free(rt);
  autovm_plan_free(plan);
  if (own) cudaFree(own);
}

}  // namespace

TEST_CASE("prefetch mechanism: evicted bytes come back intact") {
  run(AUTOVM_MECHANISM_PREFETCH, AUTOVM_MODE_PLAN, 3);
}
TEST_CASE("staged mechanism: evicted bytes come back intact, neighbours untouched by discards") {
  run(AUTOVM_MECHANISM_STAGED, AUTOVM_MODE_PLAN, 3);
}
TEST_CASE("mapped mechanism: evicted bytes come back intact") {
  run(AUTOVM_MECHANISM_MAPPED, AUTOVM_MODE_PLAN, 3);
}
TEST_CASE("demand paging: evicted pages fault back intact") {
  run(AUTOVM_MECHANISM_PLAN, AUTOVM_MODE_DEMAND_PAGING, 2);
}
TEST_CASE("a tensor bound to the trainer's own managed memory is moved there, every mechanism") {
  run(AUTOVM_MECHANISM_STAGED, AUTOVM_MODE_PLAN, 2, true);
  run(AUTOVM_MECHANISM_PREFETCH, AUTOVM_MODE_PLAN, 2, true);
  run(AUTOVM_MECHANISM_MAPPED, AUTOVM_MODE_PLAN, 2, true);
}

// The trainer's memory (AUTOVM_MEMORY_TRAINER): no arena. One managed range holds a, b and c
// back to back, as a pool sub-allocates them (sharing 2 MiB blocks); the trainer binds a and b
// during step 0 of each training step (a at another address each time), leaves c and d
// unbound: their actions are skipped and their bytes stay where they are.
int last_prefetch(const void* p, int64_t bytes) {
  int where = -2;
  REQUIRE(cudaMemRangeGetAttribute(&where, sizeof where, cudaMemRangeAttributeLastPrefetchLocation,
                                   p, static_cast<size_t>(bytes)) == cudaSuccess);
  return where;
}

TEST_CASE("trainer memory: bound managed ranges are evicted and prefetched, bytes intact") {
  for (autovm_mode mode : {AUTOVM_MODE_PLAN, AUTOVM_MODE_DEMAND_PAGING}) {
    CAPTURE(mode);
    Gpu gpu;
    autovm_plan* plan = load(make_plan());
    autovm_runtime_options o = cuda_options(AUTOVM_MECHANISM_PLAN, mode);
    o.memory = AUTOVM_MEMORY_TRAINER;
    autovm_runtime* rt = nullptr;
    REQUIRE_MESSAGE(autovm_runtime_create(plan, &o, &rt) == AUTOVM_OK, autovm_last_error());
    const int64_t shift = 3 << 20;  // a's second address
    const int64_t range = kBytes[0] + kBytes[1] + kBytes[2] + shift + 4096;
    char* base = nullptr;
    REQUIRE(cudaMallocManaged(reinterpret_cast<void**>(&base), static_cast<size_t>(range)) ==
            cudaSuccess);
    cudaMemLocation dev{};
    dev.type = cudaMemLocationTypeDevice;
    dev.id = 0;
    REQUIRE(cudaMemPrefetchAsync(base, static_cast<size_t>(range), dev, 0, gpu.stream) ==
            cudaSuccess);
    void* none = reinterpret_cast<void*>(1);
    REQUIRE(autovm_tensor_pointer(rt, 2, &none) == AUTOVM_OK);
    CHECK(none == nullptr);  // no arena
    for (int round = 0; round < 2; ++round) {
      CAPTURE(round);
      char* ptr[3];
      ptr[0] = base + 1024 + (round == 1 ? shift : 0);
      ptr[1] = ptr[0] + kBytes[0];
      ptr[2] = ptr[1] + kBytes[1];
      const uint32_t seed = 500u * static_cast<uint32_t>(round + 1);
      const uint32_t seeds[3] = {seed, seed + 1, seed + 2};
      for (int s = 0; s < 5; ++s) {
        REQUIRE_MESSAGE(autovm_step_begin(rt, s, gpu.stream) == AUTOVM_OK, autovm_last_error());
        if (s == 0) {
          for (int t = 0; t < 2; ++t)
            REQUIRE_MESSAGE(autovm_tensor_bind(rt, t, ptr[t], kBytes[t]) == AUTOVM_OK,
                            autovm_last_error());
          for (int t = 0; t < 3; ++t)
            REQUIRE(fill_pattern(ptr[t], kBytes[t], seeds[t], gpu.stream) == cudaSuccess);
        }
        if (s == 2) {  // the runtime's eviction of a is complete before step 2
          REQUIRE(cudaStreamSynchronize(gpu.stream) == cudaSuccess);
          CHECK(last_prefetch(ptr[0], kBytes[0]) == cudaCpuDeviceId);
          CHECK(last_prefetch(ptr[2] + (128 << 10), 4096) != cudaCpuDeviceId);  // c stayed
        }
        if (s == 3) {
          REQUIRE(cudaStreamSynchronize(gpu.stream) == cudaSuccess);
          if (mode == AUTOVM_MODE_PLAN) CHECK(last_prefetch(ptr[0], kBytes[0]) == 0);
          check_patterns(gpu, ptr, seeds, 3, "abc");
        }
        REQUIRE_MESSAGE(autovm_step_end(rt, s, gpu.stream) == AUTOVM_OK, autovm_last_error());
      }
      void* after = nullptr;
      REQUIRE(autovm_tensor_pointer(rt, 0, &after) == AUTOVM_OK);
      CHECK(after == nullptr);  // the binding ended with a's lifetime
    }
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    autovm_stats st;
    REQUIRE(autovm_runtime_stats(rt, &st) == AUTOVM_OK);
    CHECK(st.memory_bytes == 0);
    CHECK(st.evictions == 4);  // a and c, twice: the plan's count
    // c's evict and prefetch (its evict only, under demand paging) and d's discard, per round.
    CHECK(st.unbound_actions == (mode == AUTOVM_MODE_PLAN ? 6 : 4));
    autovm_runtime_free(rt);
    autovm_plan_free(plan);
    cudaFree(base);
  }
}

TEST_CASE("trainer memory: staged is refused, and mapped needs a vmm pool") {
  autovm_plan* plan = load(make_plan());
  autovm_runtime_options o = cuda_options(AUTOVM_MECHANISM_STAGED);
  o.memory = AUTOVM_MEMORY_TRAINER;
  autovm_runtime* rt = nullptr;
  CHECK(autovm_runtime_create(plan, &o, &rt) == AUTOVM_ERR_INVALID_ARGUMENT);
  CHECK(std::string(autovm_last_error()).find("migration") != std::string::npos);
  CHECK(rt == nullptr);
  autovm_pool_options po;
  autovm_pool_options_init(&po);
  po.memory = AUTOVM_POOL_MANAGED;
  po.capacity_bytes = 64 << 20;
  autovm_pool* pool = nullptr;
  REQUIRE_MESSAGE(autovm_pool_create(&po, &pool) == AUTOVM_OK, autovm_last_error());
  o = cuda_options(AUTOVM_MECHANISM_MAPPED);
  o.memory = AUTOVM_MEMORY_TRAINER;
  o.pool = pool;
  CHECK(autovm_runtime_create(plan, &o, &rt) == AUTOVM_ERR_INVALID_ARGUMENT);
  CHECK(std::string(autovm_last_error()).find("vmm pool") != std::string::npos);
  CHECK(rt == nullptr);
  autovm_pool_free(pool);
  autovm_plan_free(plan);
}

// The mapped mechanism on a vmm pool's allocations (AUTOVM_MEMORY_TRAINER). Three rounds of the
// plan, a and b bound, c not:
//   0  as planned: a's whole chunks are unmapped while it is away, and its bytes come back;
//   1  a is read early, at step 2 (before its prefetch): autovm_tensor_require brings it back;
//   2  the trainer frees a while it is away and allocates x of its size (at its address, if the
//      pool gives it): the prefetch must not write into x.
TEST_CASE("trainer memory on a vmm pool: an evicted tensor's pages go, its bytes come back") {
  Gpu gpu;
  autovm_pool_options po;
  autovm_pool_options_init(&po);
  po.memory = AUTOVM_POOL_VMM;
  po.capacity_bytes = 256 << 20;
  autovm_pool* pool = nullptr;
  REQUIRE_MESSAGE(autovm_pool_create(&po, &pool) == AUTOVM_OK, autovm_last_error());
  autovm_plan* plan = load(make_plan());
  autovm_runtime_options o = cuda_options(AUTOVM_MECHANISM_MAPPED);
  o.memory = AUTOVM_MEMORY_TRAINER;
  o.pool = pool;
  autovm_runtime* rt = nullptr;
  REQUIRE_MESSAGE(autovm_runtime_create(plan, &o, &rt) == AUTOVM_OK, autovm_last_error());
  auto pool_stats = [&] {
    autovm_pool_stats st;
    REQUIRE(autovm_pool_stats_get(pool, &st) == AUTOVM_OK);
    return st;
  };
  for (int round = 0; round < 3; ++round) {
    CAPTURE(round);
    char* ptr[3];
    for (int t = 0; t < 3; ++t)
      REQUIRE(autovm_pool_alloc(pool, kBytes[t], gpu.stream, reinterpret_cast<void**>(&ptr[t])) ==
              AUTOVM_OK);
    const uint32_t seed = 700u * static_cast<uint32_t>(round + 1);
    uint32_t seeds[3] = {seed, seed + 1, seed + 2};
    const autovm_pool_stats before = pool_stats();
    int64_t paged_before = before.paged_out_bytes;
    for (int s = 0; s < 5; ++s) {
      REQUIRE_MESSAGE(autovm_step_begin(rt, s, gpu.stream) == AUTOVM_OK, autovm_last_error());
      if (s == 0) {
        for (int t = 0; t < 2; ++t)
          REQUIRE_MESSAGE(autovm_tensor_bind(rt, t, ptr[t], kBytes[t]) == AUTOVM_OK,
                          autovm_last_error());
        for (int t = 0; t < 3; ++t)
          REQUIRE(fill_pattern(ptr[t], kBytes[t], seeds[t], gpu.stream) == cudaSuccess);
      }
      if (s == 1) REQUIRE(cudaDeviceSynchronize() == cudaSuccess);  // a's copy out has landed
      if (s == 2) {  // a was paged out at the boundary after step 1
        const autovm_pool_stats st = pool_stats();
        CHECK(st.paged_out_bytes - paged_before >= (2 << 20));
        // Its pages are off the device: neither held nor in use, though a still lives.
        CHECK(before.in_use_bytes - st.in_use_bytes == st.paged_out_bytes - paged_before);
        CHECK(st.in_use_bytes <= st.resident_bytes);
        if (round == 1) {
          REQUIRE_MESSAGE(autovm_tensor_require(rt, 0, gpu.stream) == AUTOVM_OK,
                          autovm_last_error());
          check_patterns(gpu, ptr, seeds, 1, "a");
        }
        if (round == 2) {
          REQUIRE(autovm_pool_dealloc(pool, ptr[0], gpu.stream) == AUTOVM_OK);
          REQUIRE(autovm_pool_alloc(pool, kBytes[0], gpu.stream,
                                    reinterpret_cast<void**>(&ptr[0])) == AUTOVM_OK);
          seeds[0] = seed + 50;  // x
          REQUIRE(fill_pattern(ptr[0], kBytes[0], seeds[0], gpu.stream) == cudaSuccess);
        }
      }
      if (s == 3) check_patterns(gpu, ptr, seeds, 3, round == 2 ? "xbc" : "abc");
      REQUIRE_MESSAGE(autovm_step_end(rt, s, gpu.stream) == AUTOVM_OK, autovm_last_error());
    }
    for (int t = 0; t < 3; ++t) REQUIRE(autovm_pool_dealloc(pool, ptr[t], gpu.stream) == AUTOVM_OK);
  }
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  autovm_stats st;
  REQUIRE(autovm_runtime_stats(rt, &st) == AUTOVM_OK);
  CHECK(st.late_requires == 1);
  CHECK(st.stale_prefetches == 1);
  CHECK(st.bytes_to_host == 3 * (kBytes[0] + kBytes[2]));  // the plan's count: c's skipped
  const autovm_pool_stats ps = pool_stats();
  CHECK(ps.paged_in_bytes > 0);
  autovm_runtime_free(rt);
  autovm_plan_free(plan);
  autovm_pool_free(pool);
}

TEST_CASE("binding memory the mechanism cannot move is refused") {
  autovm_plan* plan = load(make_plan());
  autovm_runtime_options o = cuda_options(AUTOVM_MECHANISM_STAGED);
  autovm_runtime* rt = nullptr;
  REQUIRE(autovm_runtime_create(plan, &o, &rt) == AUTOVM_OK);
  void* device = nullptr;
  REQUIRE(cudaMalloc(&device, static_cast<size_t>(kBytes[0])) == cudaSuccess);
  CHECK(autovm_tensor_bind(rt, 0, device, kBytes[0]) == AUTOVM_ERR_INVALID_ARGUMENT);
  CHECK(std::string(autovm_last_error()).find("managed memory") != std::string::npos);
  cudaFree(device);
  autovm_runtime_free(rt);
  autovm_plan_free(plan);
}

TEST_CASE("resident mode: no actions") { run(AUTOVM_MECHANISM_STAGED, AUTOVM_MODE_RESIDENT, 1); }

TEST_CASE("an arena larger than the free device memory is refused before anything is allocated") {
  size_t free = 0, total = 0;
  REQUIRE(cudaMemGetInfo(&free, &total) == cudaSuccess);
  // Larger than the whole device: checked against free memory, never allocated.
  autovm_plan* plan = load(make_plan(static_cast<int64_t>(total) * 2));
  for (autovm_mechanism m : {AUTOVM_MECHANISM_STAGED, AUTOVM_MECHANISM_MAPPED}) {
    autovm_runtime_options o = cuda_options(m);
    o.layout = AUTOVM_LAYOUT_PLAN;  // packing would shrink this made-up arena
    autovm_runtime* rt = nullptr;
    CHECK(autovm_runtime_create(plan, &o, &rt) == AUTOVM_ERR_OUT_OF_MEMORY);
    CHECK(std::string(autovm_last_error()).find("does not fit") != std::string::npos);
    CHECK(rt == nullptr);
  }
  autovm_plan_free(plan);
}

// tests/runtime/plans/packed.json at scale: two 256 MiB tensors take turns in one range of a
// mapped arena packed by residency (runtime/src/residency_layout.h). Steps: 0: x -> A;
// 1: A -> y; 2: B, y -> c; 3: A, c -> z. A is evicted after step 1 while B, a parameter kept on
// the host, comes in after step 1 into the same range: B's copy must wait for A's to finish
// (and A's, after step 2, for B's eviction), or the bytes of one overwrite the other's.
std::string make_packed_plan(int64_t big, int64_t small) {
  PlanJson p("tests/gpu/test_gpu.cc", big + 2 * small, "mapped", 2 * big + 2 * small);
  // The plan's layout, by lifetime: B, A, then x/y/z and c.
  const int64_t offsets[6] = {2 * big, big, 2 * big, 0, 2 * big + small, 2 * big};
  const int64_t bytes[6] = {small, big, small, big, small, small};
  const char* names[6] = {"x", "A", "y", "B", "c", "z"};
  const int first[6] = {0, 0, 1, 0, 2, 3}, last[6] = {0, 3, 2, 3, 3, 3};
  for (int i = 0; i < 6; ++i)
    p.tensor(i, names[i], i == 3 ? "parameter" : "activation", bytes[i], offsets[i], first[i],
             last[i], i == 3);
  p.steps({{0}, {1}, {3, 2}, {1, 4}}, {{1}, {2}, {4}, {5}});
  auto action = [&](const char* kind, int t, int after, int ready) {
    p.action(kind, t, bytes[t], after, ready);
  };
  action("evict", 1, 1, 2);
  action("prefetch", 3, 1, 2);
  action("prefetch", 1, 2, 3);
  action("evict", 3, 2, 3);
  return p.dump();
}

TEST_CASE("mapped, packed by residency: two tensors taking turns in one range keep their bytes") {
  const int64_t big = int64_t{256} << 20, small = int64_t{1} << 20;
  Gpu gpu;
  autovm_plan* plan = load(make_packed_plan(big, small));
  autovm_runtime_options o = cuda_options(AUTOVM_MECHANISM_MAPPED);
  o.strict = 1;
  o.layout = AUTOVM_LAYOUT_PACKED;
  autovm_runtime* rt = nullptr;
  REQUIRE_MESSAGE(autovm_runtime_create(plan, &o, &rt) == AUTOVM_OK, autovm_last_error());
  void* a = nullptr;
  void* b = nullptr;
  REQUIRE(autovm_tensor_pointer(rt, 1, &a) == AUTOVM_OK);
  REQUIRE(autovm_tensor_pointer(rt, 3, &b) == AUTOVM_OK);
  CHECK(a == b);  // one range
  autovm_stats st;
  REQUIRE(autovm_runtime_stats(rt, &st) == AUTOVM_OK);
  CHECK(st.memory_bytes < big + 4 * small);  // the plan's layout needs 2 * big + 2 * small
  // The trainer's initial value of B, written before the first step (B is resident until then).
  REQUIRE(fill_pattern(b, big, 77, gpu.stream) == cudaSuccess);
  for (int round = 0; round < 3; ++round) {
    const uint32_t seed = 1000u * static_cast<uint32_t>(round + 1);
    for (int s = 0; s < 4; ++s) {
      REQUIRE_MESSAGE(autovm_step_begin(rt, s, gpu.stream) == AUTOVM_OK, autovm_last_error());
      REQUIRE(cudaMemsetAsync(gpu.sums, 0, 4 * sizeof(unsigned long long), gpu.stream) == cudaSuccess);
      if (s == 0) REQUIRE(fill_pattern(a, big, seed, gpu.stream) == cudaSuccess);
      if (s == 2) {
        REQUIRE(autovm_touch(rt, 2, 3) == AUTOVM_OK);
        REQUIRE(checksum(b, big, gpu.sums, gpu.stream) == cudaSuccess);
        REQUIRE(cudaStreamSynchronize(gpu.stream) == cudaSuccess);
        INFO("round " << round << ": B at step 2");
        CHECK(gpu.sums[0] == pattern_checksum(77, big));
      }
      if (s == 3) {
        REQUIRE(autovm_touch(rt, 3, 1) == AUTOVM_OK);
        REQUIRE(checksum(a, big, gpu.sums, gpu.stream) == cudaSuccess);
        REQUIRE(cudaStreamSynchronize(gpu.stream) == cudaSuccess);
        INFO("round " << round << ": A at step 3");
        CHECK(gpu.sums[0] == pattern_checksum(seed, big));
      }
      REQUIRE_MESSAGE(autovm_step_end(rt, s, gpu.stream) == AUTOVM_OK, autovm_last_error());
    }
  }
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  REQUIRE(autovm_runtime_stats(rt, &st) == AUTOVM_OK);
  CHECK(st.violations == 0);
  CHECK(st.bytes_to_host == 3 * 2 * big);
  autovm_runtime_free(rt);
  autovm_plan_free(plan);
}

TEST_CASE("demand paging with the mapped mechanism is refused") {
  autovm_plan* plan = load(make_plan());
  autovm_runtime_options o = cuda_options(AUTOVM_MECHANISM_MAPPED, AUTOVM_MODE_DEMAND_PAGING);
  autovm_runtime* rt = nullptr;
  CHECK(autovm_runtime_create(plan, &o, &rt) == AUTOVM_ERR_INVALID_ARGUMENT);
  autovm_plan_free(plan);
}

int main(int argc, char** argv) { return autovm::gpu_test::run_or_skip(argc, argv); }
