// The gpu suite: remote reads (docs/execution-model.md, "Remote reads") on a real device. A
// kernel at the step that reads a tensor remotely must find its bytes at the address the runtime
// gives for that step, read from host memory, for every mechanism on the runtime's arena
// (managed: prefetch, staged; mapped), under demand paging (pages fault back instead), and for
// the trainer's memory on a vmm pool, where the tensor is read at its own address: its paged-out
// chunks map the runtime's host memory, its edge chunks stay. Sizes are tens of MiB. Exits 77
// (skipped) without a CUDA device.
#define DOCTEST_CONFIG_IMPLEMENT
#include <autovm/autovm.h>
#include <cuda_runtime_api.h>
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "gpu_harness.h"
#include "gpu_main.h"
#include "kernels.h"

namespace {

using autovm::gpu_test::Gpu;
using autovm::gpu_test::load;
using autovm::gpu_test::PlanJson;

using autovm::replay::checksum;
using autovm::replay::fill_pattern;
using autovm::replay::pattern_checksum;

constexpr int64_t kMiB = int64_t{1} << 20;

// Five tensors, four steps (inputs -> outputs):
//   0: -> a, b, c, d     1: a, b ->     2: c, d -> e     3: b, d, e ->
// a (5 MiB + 1234 B, lifetime [0, 1]) is evicted after step 0 and read remotely by step 1, its
// last use; c (300 KiB, less than a 2 MiB block) likewise by step 2; d (8 MiB) is read remotely
// by step 2, then prefetched for step 3; b (3 MiB) stays resident beside them (a, b, c share
// 2 MiB blocks); e (4 MiB, [2, 3]) lies where a was (the plan's layout), after a's last read.
const int64_t kBytes[5] = {5 * kMiB + 1234, 3 * kMiB, 300 << 10, 8 * kMiB, 4 * kMiB};

std::string arena_plan() {
  int64_t offset = 0;
  std::vector<int64_t> offsets;
  for (int t = 0; t < 4; ++t) {
    offsets.push_back(offset);
    offset += (kBytes[t] + 255) / 256 * 256;
  }
  offsets.push_back(0);  // e, where a was
  PlanJson p("tests/gpu/test_remote.cc", offset, "staged", offset);
  const char* names[5] = {"a", "b", "c", "d", "e"};
  const int first[5] = {0, 0, 0, 0, 2}, last[5] = {1, 3, 2, 3, 3};
  for (int t = 0; t < 5; ++t) p.tensor(t, names[t], "activation", kBytes[t], offsets[t], first[t], last[t]);
  p.steps({{}, {0, 1}, {2, 3}, {1, 3, 4}}, {{0, 1, 2, 3}, {}, {4}, {}});
  auto action = [&](const char* kind, int t, int after, int ready) {
    p.action(kind, t, kBytes[t], after, ready);
  };
  action("evict", 0, 0, 1);
  action("evict", 2, 0, 1);
  action("evict", 3, 0, 1);
  action("read_remote", 0, 0, 1);
  action("read_remote", 2, 1, 2);
  action("read_remote", 3, 1, 2);
  action("prefetch", 3, 2, 3);
  return p.dump();
}

// What checksum() gives over the bytes [from, from + bytes) of the pattern of `seed`.
unsigned long long checksum_from(uint32_t seed, int64_t from, int64_t bytes) {
  unsigned long long sum = 0;
  for (int64_t i = 0; i < bytes; ++i)
    sum += static_cast<unsigned long long>(autovm::replay::pattern_byte(seed, from + i)) *
           (1 + i % 251);
  return sum;
}

int last_prefetch(const void* p, int64_t bytes) {
  int where = -2;
  REQUIRE(cudaMemRangeGetAttribute(&where, sizeof where, cudaMemRangeAttributeLastPrefetchLocation,
                                   p, static_cast<size_t>(bytes)) == cudaSuccess);
  return where;
}

cudaMemLocationType preferred_type(const void* p, int64_t bytes) {
  cudaMemLocationType type = cudaMemLocationTypeInvalid;
  REQUIRE(cudaMemRangeGetAttribute(&type, sizeof type, cudaMemRangeAttributePreferredLocationType,
                                   p, static_cast<size_t>(bytes)) == cudaSuccess);
  return type;
}

// Three training steps of arena_plan() under `mechanism` and `mode`; every tensor a step reads
// is checked by a kernel at that step, at the pointer the runtime gives after step_begin.
void run_arena(autovm_mechanism mechanism, autovm_mode mode) {
  Gpu gpu;
  autovm_plan* plan = load(arena_plan());
  autovm_runtime_options o;
  autovm_runtime_options_init(&o);
  o.backend = AUTOVM_BACKEND_CUDA;
  o.mechanism = mechanism;
  o.mode = mode;
  o.strict = 1;
  autovm_runtime* rt = nullptr;
  REQUIRE_MESSAGE(autovm_runtime_create(plan, &o, &rt) == AUTOVM_OK, autovm_last_error());
  const bool managed = mechanism != AUTOVM_MECHANISM_MAPPED;
  void* own[5];  // each tensor's place in the arena
  for (int t = 0; t < 5; ++t) REQUIRE(autovm_tensor_pointer(rt, t, &own[t]) == AUTOVM_OK);
  auto pointer = [&](int t) {
    void* p = nullptr;
    REQUIRE(autovm_tensor_pointer(rt, t, &p) == AUTOVM_OK);
    return p;
  };
  const int rounds = 3;
  for (int round = 0; round < rounds; ++round) {
    CAPTURE(round);
    const uint32_t seed = 1000u * static_cast<uint32_t>(round + 1);
    auto expect = [&](int t) { return pattern_checksum(seed + static_cast<uint32_t>(t), kBytes[t]); };
    for (int s = 0; s < 4; ++s) {
      CAPTURE(s);
      REQUIRE_MESSAGE(autovm_step_begin(rt, s, gpu.stream) == AUTOVM_OK, autovm_last_error());
      autovm_stats st;
      REQUIRE(autovm_runtime_stats(rt, &st) == AUTOVM_OK);
      if (s == 0)
        for (int t = 0; t < 4; ++t)
          REQUIRE(fill_pattern(pointer(t), kBytes[t], seed + static_cast<uint32_t>(t), gpu.stream) ==
                  cudaSuccess);
      if (s == 1) {
        REQUIRE(autovm_touch(rt, 1, 0) == AUTOVM_OK);  // read remotely: no violation
        // a, c and d are off (a read here from host memory): b alone counts.
        CHECK(st.resident_bytes == kBytes[1]);
        void* a = pointer(0);
        if (mode == AUTOVM_MODE_PLAN) {
          CHECK((a == own[0]) == managed);  // mapped: where its host copy is mapped
          if (managed) {
            REQUIRE(cudaStreamSynchronize(gpu.stream) == cudaSuccess);
            CHECK(last_prefetch(a, kBytes[0]) == cudaCpuDeviceId);  // its pages on the host
            CHECK(preferred_type(a, kBytes[0]) == cudaMemLocationTypeHost);
          }
        }
        INFO("a at step 1");
        CHECK(gpu.sum(a, kBytes[0]) == expect(0));
        CHECK(gpu.sum(pointer(1), kBytes[1]) == expect(1));
      }
      if (s == 2) {
        for (int t : {2, 3}) {
          INFO("tensor " << "abcde"[t] << " at step 2");
          REQUIRE(autovm_touch(rt, 2, t) == AUTOVM_OK);
          CHECK(gpu.sum(pointer(t), kBytes[t]) == expect(t));
        }
        REQUIRE(fill_pattern(pointer(4), kBytes[4], seed + 4, gpu.stream) == cudaSuccess);
      }
      if (s == 3) {
        for (int t : {1, 3, 4}) {
          INFO("tensor " << "abcde"[t] << " at step 3");
          REQUIRE(autovm_touch(rt, 3, t) == AUTOVM_OK);
          CHECK(pointer(t) == own[t]);  // d is back in its range
          CHECK(gpu.sum(pointer(t), kBytes[t]) == expect(t));
        }
        if (managed && mode == AUTOVM_MODE_PLAN) {
          // After a's last remote read its range went back to the device, advice undone.
          CHECK(preferred_type(own[0], kBytes[0]) != cudaMemLocationTypeHost);
          CHECK(last_prefetch(own[0], kBytes[0]) == 0);
        }
      }
      REQUIRE_MESSAGE(autovm_step_end(rt, s, gpu.stream) == AUTOVM_OK, autovm_last_error());
    }
  }
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  autovm_stats st;
  REQUIRE(autovm_runtime_stats(rt, &st) == AUTOVM_OK);
  CHECK(st.violations == 0);
  CHECK(st.remote_reads == 3 * rounds);
  CHECK(st.remote_read_bytes == rounds * (kBytes[0] + kBytes[2] + kBytes[3]));
  CHECK(st.bytes_to_host == rounds * (kBytes[0] + kBytes[2] + kBytes[3]));
  CHECK(st.bytes_to_device == rounds * kBytes[3]);  // d's prefetch only
  autovm_runtime_free(rt);
  autovm_plan_free(plan);
}

}  // namespace

TEST_CASE("remote reads on a managed arena, prefetch mechanism: the step reads the host pages") {
  run_arena(AUTOVM_MECHANISM_PREFETCH, AUTOVM_MODE_PLAN);
}
TEST_CASE("remote reads on a managed arena, staged mechanism (evicted by migration)") {
  run_arena(AUTOVM_MECHANISM_STAGED, AUTOVM_MODE_PLAN);
}
TEST_CASE("remote reads on the mapped arena: read where the host copy is mapped") {
  run_arena(AUTOVM_MECHANISM_MAPPED, AUTOVM_MODE_PLAN);
}
TEST_CASE("remote reads under demand paging: the pages fault back, the bytes are right") {
  run_arena(AUTOVM_MECHANISM_PREFETCH, AUTOVM_MODE_DEMAND_PAGING);
}

// The trainer's memory on a vmm pool (mapped mechanism). Tensors (steps as above, less e):
//   a  a whole allocation of 8 MiB + 1000 B (5 chunks of 2 MiB), written at step 0, evicted
//      after it, read remotely at step 1, its last use: all its chunks go and map host memory;
//   w  7 MiB at 1 MiB + 256 B into a 12 MiB allocation whose other bytes hold a pattern of their
//      own: chunks 1-3 lie wholly inside w and map host memory for step 2; the edge chunks 0
//      and 4 stay on the device with w's bytes and its neighbours'; w is prefetched for step 3.
// Rounds: 0 as planned, and the trainer frees a right after step 1 and allocates x of its size,
// which must get device memory and hold its own bytes; 1: a's allocation outlives its lifetime,
// its bytes still readable where they are, and stays until the next round's eviction of the
// new a has the runtime give that host memory back (a's old bytes then on the device); 2: as 0.
std::string trainer_plan(int64_t a_bytes, int64_t w_bytes) {
  PlanJson p("tests/gpu/test_remote.cc", a_bytes + w_bytes, "mapped", a_bytes + w_bytes);
  const int64_t bytes[2] = {a_bytes, w_bytes};
  p.tensor(0, "a", "activation", a_bytes, 0, 0, 1);
  p.tensor(1, "w", "activation", w_bytes, a_bytes, 0, 3);
  p.steps({{}, {0}, {1}, {1}}, {{0, 1}, {}, {}, {}});
  auto action = [&](const char* kind, int t, int after, int ready) {
    p.action(kind, t, bytes[t], after, ready);
  };
  action("evict", 0, 0, 1);
  action("evict", 1, 0, 1);
  action("read_remote", 0, 0, 1);
  action("read_remote", 1, 1, 2);
  action("prefetch", 1, 2, 3);
  return p.dump();
}

TEST_CASE("trainer memory on a vmm pool: a paged-out tensor is read remotely at its own address") {
  const int64_t a_bytes = 8 * kMiB + 1000, w_bytes = 7 * kMiB, w_at = kMiB + 256,
                big = 12 * kMiB;
  Gpu gpu;
  autovm_pool_options po;
  autovm_pool_options_init(&po);
  po.memory = AUTOVM_POOL_VMM;
  po.capacity_bytes = 256 * kMiB;
  autovm_pool* pool = nullptr;
  REQUIRE_MESSAGE(autovm_pool_create(&po, &pool) == AUTOVM_OK, autovm_last_error());
  autovm_plan* plan = load(trainer_plan(a_bytes, w_bytes));
  autovm_runtime_options o;
  autovm_runtime_options_init(&o);
  o.backend = AUTOVM_BACKEND_CUDA;
  o.mechanism = AUTOVM_MECHANISM_MAPPED;
  o.memory = AUTOVM_MEMORY_TRAINER;
  o.pool = pool;
  o.strict = 1;
  autovm_runtime* rt = nullptr;
  REQUIRE_MESSAGE(autovm_runtime_create(plan, &o, &rt) == AUTOVM_OK, autovm_last_error());
  auto pool_stats = [&] {
    autovm_pool_stats st;
    REQUIRE(autovm_pool_stats_get(pool, &st) == AUTOVM_OK);
    return st;
  };
  auto alloc = [&](int64_t bytes) {
    void* p = nullptr;
    REQUIRE_MESSAGE(autovm_pool_alloc(pool, bytes, gpu.stream, &p) == AUTOVM_OK, autovm_last_error());
    return static_cast<char*>(p);
  };
  char* kept = nullptr;  // round 1's a, outliving its lifetime
  uint32_t kept_seed = 0;
  for (int round = 0; round < 3; ++round) {
    CAPTURE(round);
    const uint32_t seed = 700u * static_cast<uint32_t>(round + 1);
    char* a = alloc(a_bytes);
    char* whole = alloc(big);
    char* w = whole + w_at;
    REQUIRE(fill_pattern(whole, big, seed + 9, gpu.stream) == cudaSuccess);  // w's neighbours
    const int64_t paged_before = pool_stats().paged_out_bytes;
    autovm_pool_stats before{};
    for (int s = 0; s < 4; ++s) {
      CAPTURE(s);
      REQUIRE_MESSAGE(autovm_step_begin(rt, s, gpu.stream) == AUTOVM_OK, autovm_last_error());
      if (s == 0) {
        REQUIRE_MESSAGE(autovm_tensor_bind(rt, 0, a, a_bytes) == AUTOVM_OK, autovm_last_error());
        REQUIRE_MESSAGE(autovm_tensor_bind(rt, 1, w, w_bytes) == AUTOVM_OK, autovm_last_error());
        REQUIRE(fill_pattern(a, a_bytes, seed, gpu.stream) == cudaSuccess);
        REQUIRE(fill_pattern(w, w_bytes, seed + 1, gpu.stream) == cudaSuccess);
        REQUIRE(cudaStreamSynchronize(gpu.stream) == cudaSuccess);
        before = pool_stats();
      }
      if (s == 1) {
        REQUIRE(autovm_touch(rt, 1, 0) == AUTOVM_OK);
        const autovm_pool_stats ps = pool_stats();
        // a's 5 chunks and w's 3 went, and hold no device memory while they map host memory
        // (round 2: round 1's a got its 5 back, when its host memory was taken back).
        CHECK(ps.paged_out_bytes - paged_before == 8 * 2 * kMiB);
        CHECK(before.in_use_bytes - ps.in_use_bytes == (round == 2 ? 3 : 8) * 2 * kMiB);
        REQUIRE(autovm_tensor_require(rt, 0, gpu.stream) == AUTOVM_OK);  // readable: no copy back
        INFO("a at step 1, at its own address");
        CHECK(gpu.sum(a, a_bytes) == pattern_checksum(seed, a_bytes));
      }
      if (s == 2) {
        REQUIRE(autovm_touch(rt, 2, 1) == AUTOVM_OK);
        INFO("w at step 2, at its own address");
        CHECK(gpu.sum(w, w_bytes) == pattern_checksum(seed + 1, w_bytes));
        if (round == 1) {  // a's binding ended with its lifetime; its allocation lives
          INFO("a after its lifetime, still where the trainer has it");
          CHECK(gpu.sum(kept, a_bytes) == pattern_checksum(seed, a_bytes));
        }
      }
      if (s == 3) {
        REQUIRE(autovm_touch(rt, 3, 1) == AUTOVM_OK);
        INFO("w at step 3, brought back");
        CHECK(gpu.sum(w, w_bytes) == pattern_checksum(seed + 1, w_bytes));
        // Its neighbours in the edge chunks and beyond were never touched.
        CHECK(gpu.sum(whole, w_at) == pattern_checksum(seed + 9, w_at));
        const int64_t tail = w_at + w_bytes;
        CHECK(gpu.sum(whole + tail, big - tail) == checksum_from(seed + 9, tail, big - tail));
      }
      REQUIRE_MESSAGE(autovm_step_end(rt, s, gpu.stream) == AUTOVM_OK, autovm_last_error());
      if (s == 1 && round != 1) {
        // The trainer frees a after its last use and allocates x of its size: x must have
        // device memory of its own, not the host memory a was read from.
        REQUIRE(autovm_pool_dealloc(pool, a, gpu.stream) == AUTOVM_OK);
        char* x = alloc(a_bytes);
        REQUIRE(fill_pattern(x, a_bytes, seed + 50, gpu.stream) == cudaSuccess);
        INFO("x, allocated after a was freed");
        CHECK(gpu.sum(x, a_bytes) == pattern_checksum(seed + 50, a_bytes));
        a = x;  // freed with the others
      }
      if (s == 1 && round == 1) {
        kept = a;
        kept_seed = seed;
        a = nullptr;
      }
    }
    if (round == 2 && kept) {
      // The new a's eviction took the host memory back from round 1's a: its bytes came back
      // to device memory of its own (copied on the runtime's stream: wait for it).
      REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
      INFO("round 1's a after the runtime took its host memory back");
      CHECK(gpu.sum(kept, a_bytes) == pattern_checksum(kept_seed, a_bytes));
      REQUIRE(autovm_pool_dealloc(pool, kept, gpu.stream) == AUTOVM_OK);
      kept = nullptr;
    }
    if (a) REQUIRE(autovm_pool_dealloc(pool, a, gpu.stream) == AUTOVM_OK);
    REQUIRE(autovm_pool_dealloc(pool, whole, gpu.stream) == AUTOVM_OK);
  }
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  autovm_stats st;
  REQUIRE(autovm_runtime_stats(rt, &st) == AUTOVM_OK);
  CHECK(st.violations == 0);
  CHECK(st.remote_reads == 2 * 3);
  CHECK(st.late_requires == 0);  // a was readable where it was
  CHECK(st.stale_prefetches == 0);
  autovm_runtime_free(rt);
  autovm_plan_free(plan);
  autovm_pool_free(pool);
}

int main(int argc, char** argv) { return autovm::gpu_test::run_or_skip(argc, argv); }
