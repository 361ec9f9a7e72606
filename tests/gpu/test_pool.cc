// The gpu suite: libautovm's memory pools (autovm.h, "Memory pools") on a real device, for both
// kinds of memory. Sizes from 0 B to 4 GiB hold their bytes (checksums on the GPU); a block freed
// on one stream while kernels on it are still queued is reused by another stream only after
// them (no stale bytes); VMM memory goes back to the device on a trim; a pool refuses what its
// capacity or the device cannot hold; a vmm pool keeps small allocations in chunks of their
// own, and a limit below the capacity gives unused chunks back and refuses beyond it; chunks
// given back at the limit for an allocation count once, so they are unused again once it is
// freed; at the limit an allocation waits for the free that makes room, not for other
// streams' work; at the limit an allocation has a runtime's paging finish its copies out and page them
// out rather than fail; PyTorch's hooks allocate, free and throw on exhaustion.
// Exits 77 (skipped) without a CUDA device.
#define DOCTEST_CONFIG_IMPLEMENT
#include <autovm/autovm.h>
#include <cuda_runtime_api.h>
#include <doctest/doctest.h>

#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "device_pool.h"
#include "gpu_main.h"
#include "kernels.h"
#include "trainer_paging.h"

namespace {

using autovm::replay::checksum;
using autovm::replay::fill_pattern;
using autovm::replay::pattern_checksum;

constexpr int64_t kMiB = int64_t{1} << 20;
constexpr int64_t kGiB = int64_t{1} << 30;

const char* name(autovm_pool_memory m) { return m == AUTOVM_POOL_VMM ? "vmm" : "managed"; }

autovm_pool* make_pool(autovm_pool_memory memory, int64_t capacity) {
  autovm_pool_options o;
  REQUIRE(autovm_pool_options_init(&o) == AUTOVM_OK);
  o.memory = memory;
  o.capacity_bytes = capacity;
  autovm_pool* pool = nullptr;
  const autovm_status s = autovm_pool_create(&o, &pool);
  INFO(autovm_last_error());
  REQUIRE(s == AUTOVM_OK);
  return pool;
}

autovm_pool_stats stats_of(autovm_pool* pool) {
  autovm_pool_stats s{};
  REQUIRE(autovm_pool_stats_get(pool, &s) == AUTOVM_OK);
  return s;
}

// The checksum of [p, p + bytes) on `stream`, waited for.
unsigned long long sum_of(const void* p, int64_t bytes, cudaStream_t stream) {
  unsigned long long* sum = nullptr;
  REQUIRE(cudaMalloc(reinterpret_cast<void**>(&sum), sizeof *sum) == cudaSuccess);
  REQUIRE(cudaMemsetAsync(sum, 0, sizeof *sum, stream) == cudaSuccess);
  REQUIRE(checksum(p, bytes, sum, stream) == cudaSuccess);
  unsigned long long host = 0;
  REQUIRE(cudaMemcpyAsync(&host, sum, sizeof host, cudaMemcpyDeviceToHost, stream) ==
          cudaSuccess);
  REQUIRE(cudaStreamSynchronize(stream) == cudaSuccess);
  REQUIRE(cudaFree(sum) == cudaSuccess);
  return host;
}

void* alloc(autovm_pool* pool, int64_t bytes, cudaStream_t stream) {
  void* p = nullptr;
  const autovm_status s = autovm_pool_alloc(pool, bytes, stream, &p);
  INFO(autovm_last_error());
  REQUIRE(s == AUTOVM_OK);
  return p;
}

}  // namespace

TEST_CASE("sizes from 0 B to 4 GiB hold their bytes, and each address finds its allocation") {
  for (autovm_pool_memory memory : {AUTOVM_POOL_MANAGED, AUTOVM_POOL_VMM}) {
    CAPTURE(name(memory));
    autovm_pool* pool = make_pool(memory, 6 * kGiB);
    cudaStream_t stream = nullptr;
    REQUIRE(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) == cudaSuccess);
    const std::vector<int64_t> sizes = {0,        1,           511,         512,
                                        513,      2 * kMiB - 1, 2 * kMiB,   2 * kMiB + 1,
                                        64 * kMiB + 3, kGiB,   4 * kGiB};
    std::vector<void*> blocks;
    int64_t total = 0;
    for (size_t i = 0; i < sizes.size(); ++i) {
      CAPTURE(sizes[i]);
      void* p = alloc(pool, sizes[i], stream);
      blocks.push_back(p);
      total += sizes[i];
      if (sizes[i] == 0) {
        CHECK(p == nullptr);
        continue;
      }
      REQUIRE(p != nullptr);
      CHECK(reinterpret_cast<uintptr_t>(p) % 512 == 0);
      REQUIRE(fill_pattern(p, sizes[i], static_cast<uint32_t>(i + 1), stream) == cudaSuccess);
    }
    // Every block still holds its own pattern once all are written (no overlap): in full up
    // to 64 MiB; above that the head, and a tail rewritten with another seed.
    for (size_t i = 0; i < sizes.size(); ++i) {
      CAPTURE(sizes[i]);
      if (sizes[i] == 0) continue;
      auto* p = static_cast<char*>(blocks[i]);
      const auto seed = static_cast<uint32_t>(i + 1);
      if (sizes[i] <= 65 * kMiB) {
        CHECK(sum_of(p, sizes[i], stream) == pattern_checksum(seed, sizes[i]));
      } else {
        CHECK(sum_of(p, 64 * kMiB, stream) == pattern_checksum(seed, 64 * kMiB));
        char* tail = p + sizes[i] - 64 * kMiB;
        REQUIRE(fill_pattern(tail, 64 * kMiB, seed + 100, stream) == cudaSuccess);
        CHECK(sum_of(tail, 64 * kMiB, stream) == pattern_checksum(seed + 100, 64 * kMiB));
      }
      void* base = nullptr;
      int64_t bytes = 0;
      REQUIRE(autovm_pool_find(pool, p + sizes[i] - 1, &base, &bytes) == AUTOVM_OK);
      CHECK(base == p);
      CHECK(bytes == sizes[i]);
    }
    void* base = reinterpret_cast<void*>(1);
    int64_t bytes = 1;
    REQUIRE(autovm_pool_find(pool, &total, &base, &bytes) == AUTOVM_OK);  // a host address
    CHECK(base == nullptr);
    CHECK(bytes == 0);

    autovm_pool_stats s = stats_of(pool);
    CHECK(s.allocated_bytes == total);
    CHECK(s.peak_allocated_bytes == total);
    CHECK(s.allocations == static_cast<int64_t>(sizes.size()) - 1);
    CHECK(s.alloc_calls == static_cast<int64_t>(sizes.size()));
    CHECK(s.resident_bytes >= total);
    CHECK(s.resident_bytes <= s.capacity_bytes);
    CHECK(s.capacity_bytes == 6 * kGiB);
    for (void* p : blocks) REQUIRE(autovm_pool_dealloc(pool, p, stream) == AUTOVM_OK);
    s = stats_of(pool);
    CHECK(s.allocated_bytes == 0);
    CHECK(s.allocations == 0);
    CHECK(s.peak_allocated_bytes == total);
    REQUIRE(autovm_pool_reset_peaks(pool) == AUTOVM_OK);
    CHECK(stats_of(pool).peak_allocated_bytes == 0);
    REQUIRE(cudaStreamDestroy(stream) == cudaSuccess);
    autovm_pool_free(pool);
  }
}

TEST_CASE("a block freed while kernels on its stream are queued holds no stale bytes later") {
  // 16 MiB of capacity: the second allocation can only be the first one's bytes (managed), or
  // fresh addresses mapped once the first one's chunks went (vmm, another stream). Stream A holds for 300 ms, then writes seed 1 into the block;
  // the host frees it at once; stream B (or A) takes it and writes seed 2. The last write
  // must be B's: the final bytes are seed 2.
  for (autovm_pool_memory memory : {AUTOVM_POOL_MANAGED, AUTOVM_POOL_VMM}) {
    for (bool same_stream : {false, true}) {
      CAPTURE(name(memory));
      CAPTURE(same_stream);
      autovm_pool* pool = make_pool(memory, 16 * kMiB);
      cudaStream_t a = nullptr, b = nullptr;
      REQUIRE(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking) == cudaSuccess);
      REQUIRE(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking) == cudaSuccess);
      cudaStream_t second = same_stream ? a : b;
      const int64_t bytes = 16 * kMiB;
      void* first = alloc(pool, bytes, a);
      REQUIRE(autovm::replay::run_step(nullptr, 0, nullptr, 0, 300e3, a) == cudaSuccess);
      REQUIRE(fill_pattern(first, bytes, 1, a) == cudaSuccess);
      REQUIRE(autovm_pool_dealloc(pool, first, a) == AUTOVM_OK);
      CHECK(cudaStreamQuery(a) == cudaErrorNotReady);  // A's kernels are still queued
      void* reused = alloc(pool, bytes, second);
      // managed, or the same stream: the first block itself; vmm on another stream: fresh
      // addresses, mapped once the device has passed the free and the first block's pages went.
      if (memory == AUTOVM_POOL_MANAGED || same_stream) CHECK(reused == first);
      REQUIRE(fill_pattern(reused, bytes, 2, second) == cudaSuccess);
      REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
      CHECK(sum_of(reused, bytes, second) == pattern_checksum(2, bytes));
      const autovm_pool_stats s = stats_of(pool);
      if (memory == AUTOVM_POOL_MANAGED) CHECK(s.cross_stream_waits == (same_stream ? 0 : 1));
      REQUIRE(autovm_pool_dealloc(pool, reused, second) == AUTOVM_OK);
      REQUIRE(cudaStreamDestroy(a) == cudaSuccess);
      REQUIRE(cudaStreamDestroy(b) == cudaSuccess);
      autovm_pool_free(pool);
    }
  }
}

TEST_CASE("reuse across streams: a block freed on A serves B after A's work, then A again") {
  autovm_pool* pool = make_pool(AUTOVM_POOL_MANAGED, 64 * kMiB);
  cudaStream_t a = nullptr, b = nullptr;
  REQUIRE(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking) == cudaSuccess);
  REQUIRE(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking) == cudaSuccess);
  // Fill the range with four 16 MiB blocks on A, free them all on A (queued behind a hold),
  // then B asks for 32 MiB: only A's freed bytes (merged) can hold it.
  std::vector<void*> blocks;
  for (int i = 0; i < 4; ++i) blocks.push_back(alloc(pool, 16 * kMiB, a));
  REQUIRE(autovm::replay::run_step(nullptr, 0, nullptr, 0, 200e3, a) == cudaSuccess);
  for (int i = 0; i < 4; ++i) {
    REQUIRE(fill_pattern(blocks[i], 16 * kMiB, 10 + i, a) == cudaSuccess);
    REQUIRE(autovm_pool_dealloc(pool, blocks[i], a) == AUTOVM_OK);
  }
  void* big = alloc(pool, 32 * kMiB, b);
  REQUIRE(big != nullptr);
  REQUIRE(fill_pattern(big, 32 * kMiB, 42, b) == cudaSuccess);
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  CHECK(sum_of(big, 32 * kMiB, b) == pattern_checksum(42, 32 * kMiB));
  CHECK(stats_of(pool).cross_stream_waits == 1);
  REQUIRE(autovm_pool_dealloc(pool, big, b) == AUTOVM_OK);
  // After a trim every free block is any stream's: no more waits.
  REQUIRE(autovm_pool_trim(pool) == AUTOVM_OK);
  void* again = alloc(pool, 8 * kMiB, a);
  CHECK(stats_of(pool).cross_stream_waits == 1);
  REQUIRE(autovm_pool_dealloc(pool, again, a) == AUTOVM_OK);
  REQUIRE(cudaStreamDestroy(a) == cudaSuccess);
  REQUIRE(cudaStreamDestroy(b) == cudaSuccess);
  autovm_pool_free(pool);
}

TEST_CASE("a trim gives a vmm pool's physical pages back to the device") {
  autovm_pool* pool = make_pool(AUTOVM_POOL_VMM, 4 * kGiB);
  cudaStream_t stream = nullptr;
  REQUIRE(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) == cudaSuccess);
  void* keep = alloc(pool, 3 * kMiB, stream);  // two chunks that stay mapped
  void* big = alloc(pool, 2 * kGiB, stream);
  REQUIRE(fill_pattern(big, 2 * kGiB, 5, stream) == cudaSuccess);
  REQUIRE(fill_pattern(keep, 3 * kMiB, 6, stream) == cudaSuccess);
  REQUIRE(autovm_pool_dealloc(pool, big, stream) == AUTOVM_OK);
  autovm_pool_stats s = stats_of(pool);
  CHECK(s.resident_bytes >= 2 * kGiB + 3 * kMiB);  // freed, still mapped
  size_t free_before = 0, free_after = 0, total = 0;
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  REQUIRE(cudaMemGetInfo(&free_before, &total) == cudaSuccess);
  REQUIRE(autovm_pool_trim(pool) == AUTOVM_OK);
  REQUIRE(cudaMemGetInfo(&free_after, &total) == cudaSuccess);
  s = stats_of(pool);
  CHECK(s.resident_bytes < 8 * kMiB);  // what `keep` touches
  CHECK(s.released_bytes >= 2 * kGiB);
  CHECK(static_cast<int64_t>(free_after) - static_cast<int64_t>(free_before) >= 2 * kGiB - 64 * kMiB);
  CHECK(sum_of(keep, 3 * kMiB, stream) == pattern_checksum(6, 3 * kMiB));  // survived the trim
  void* again = alloc(pool, 2 * kGiB, stream);  // mapped afresh
  REQUIRE(fill_pattern(again, 2 * kGiB, 7, stream) == cudaSuccess);
  CHECK(sum_of(again, 64 * kMiB, stream) == pattern_checksum(7, 64 * kMiB));
  REQUIRE(autovm_pool_dealloc(pool, again, stream) == AUTOVM_OK);
  REQUIRE(autovm_pool_dealloc(pool, keep, stream) == AUTOVM_OK);
  REQUIRE(cudaStreamDestroy(stream) == cudaSuccess);
  autovm_pool_free(pool);
}

TEST_CASE("the capacity and the device's free memory bound a pool") {
  // More than any device has: refused before anything is allocated, for both kinds.
  for (autovm_pool_memory memory : {AUTOVM_POOL_MANAGED, AUTOVM_POOL_VMM}) {
    CAPTURE(name(memory));
    autovm_pool_options o;
    REQUIRE(autovm_pool_options_init(&o) == AUTOVM_OK);
    o.memory = memory;
    o.capacity_bytes = int64_t{1} << 50;
    autovm_pool* pool = nullptr;
    CHECK(autovm_pool_create(&o, &pool) == AUTOVM_ERR_OUT_OF_MEMORY);
    CHECK(std::string(autovm_last_error()).find("does not fit") != std::string::npos);
    CHECK(pool == nullptr);
  }
  // A full pool refuses with its figures and keeps working.
  for (autovm_pool_memory memory : {AUTOVM_POOL_MANAGED, AUTOVM_POOL_VMM}) {
    CAPTURE(name(memory));
    autovm_pool* pool = make_pool(memory, 64 * kMiB);
    void* a = alloc(pool, 24 * kMiB, nullptr);
    CHECK(stats_of(pool).resident_bytes == 24 * kMiB);  // only the chunks allocations reached
    void* p = nullptr;
    CHECK(autovm_pool_alloc(pool, 100 * kMiB, nullptr, &p) == AUTOVM_ERR_OUT_OF_MEMORY);
    const std::string message = autovm_last_error();
    CHECK(message.find("autovm_pool_alloc: out of memory") == 0);
    CHECK(message.find("capacity of 0.06 GiB (67108864 B)") != std::string::npos);
    const autovm_pool_stats s = stats_of(pool);
    CHECK(s.failed_allocations == 1);
    CHECK(s.last_failed_bytes == 100 * kMiB);
    CHECK(s.resident_bytes <= 64 * kMiB);
    void* b = alloc(pool, 8 * kMiB, nullptr);
    CHECK(b != nullptr);
    REQUIRE(autovm_pool_dealloc(pool, a, nullptr) == AUTOVM_OK);
    REQUIRE(autovm_pool_dealloc(pool, b, nullptr) == AUTOVM_OK);
    CHECK(autovm_pool_dealloc(pool, b, nullptr) == AUTOVM_ERR_INVALID_ARGUMENT);  // twice
    autovm_pool_free(pool);
  }
}

TEST_CASE("a vmm pool packs small allocations apart, and a limit holds its device memory") {
  autovm_pool* pool = make_pool(AUTOVM_POOL_VMM, kGiB);  // chunks of 2 MiB
  std::vector<void*> large, small;
  for (int i = 0; i < 64; ++i) {  // activations among parameters, as a training step makes them
    large.push_back(alloc(pool, 4 * kMiB, nullptr));
    small.push_back(alloc(pool, 64 * 1024, nullptr));
  }
  autovm_pool_stats s = stats_of(pool);
  CHECK(s.small_chunk_bytes == 4 * kMiB);  // 64 x 64 KiB in two chunks, not one each
  CHECK(s.unused_chunk_bytes == 0);
  CHECK(s.resident_bytes == 64 * 4 * kMiB + 4 * kMiB);
  CHECK(s.in_use_bytes == s.resident_bytes);
  CHECK(s.limit_bytes == kGiB);
  for (void* p : large) REQUIRE(autovm_pool_dealloc(pool, p, nullptr) == AUTOVM_OK);
  s = stats_of(pool);
  CHECK(s.unused_chunk_bytes == 64 * 4 * kMiB);  // freed, still mapped
  CHECK(s.resident_bytes == s.unused_chunk_bytes + s.small_chunk_bytes);
  CHECK(s.in_use_bytes == 4 * kMiB);
  CHECK(s.peak_in_use_bytes == 64 * 4 * kMiB + 4 * kMiB);

  REQUIRE(autovm_pool_set_limit(pool, 64 * kMiB) == AUTOVM_OK);  // unused chunks go at once
  s = stats_of(pool);
  CHECK(s.limit_bytes == 64 * kMiB);
  CHECK(s.resident_bytes == 4 * kMiB);
  void* p = nullptr;
  CHECK(autovm_pool_alloc(pool, 100 * kMiB, nullptr, &p) == AUTOVM_ERR_OUT_OF_MEMORY);
  CHECK(std::string(autovm_last_error()).find("a limit of 0.06 GiB") != std::string::npos);
  CHECK(std::string(autovm_last_error()).find("in chunks of allocations under") !=
        std::string::npos);
  void* fits = alloc(pool, 32 * kMiB, nullptr);
  REQUIRE(fill_pattern(fits, 32 * kMiB, 3, nullptr) == cudaSuccess);
  CHECK(sum_of(fits, 32 * kMiB, nullptr) == pattern_checksum(3, 32 * kMiB));
  REQUIRE(autovm_pool_dealloc(pool, fits, nullptr) == AUTOVM_OK);
  REQUIRE(autovm_pool_set_limit(pool, 0) == AUTOVM_OK);  // the capacity again
  CHECK(stats_of(pool).limit_bytes == kGiB);
  void* big = alloc(pool, 100 * kMiB, nullptr);
  REQUIRE(autovm_pool_dealloc(pool, big, nullptr) == AUTOVM_OK);
  CHECK(autovm_pool_set_limit(pool, 2 * kGiB) == AUTOVM_ERR_INVALID_ARGUMENT);  // > capacity
  CHECK(autovm_pool_set_limit(pool, -1) == AUTOVM_ERR_INVALID_ARGUMENT);
  for (void* q : small) REQUIRE(autovm_pool_dealloc(pool, q, nullptr) == AUTOVM_OK);
  CHECK(stats_of(pool).small_chunk_bytes == 0);
  autovm_pool_free(pool);

  autovm_pool* managed = make_pool(AUTOVM_POOL_MANAGED, 64 * kMiB);
  CHECK(autovm_pool_set_limit(managed, 32 * kMiB) == AUTOVM_ERR_INVALID_ARGUMENT);
  CHECK(std::string(autovm_last_error()).find("managed pool") != std::string::npos);
  autovm_pool_free(managed);
}

TEST_CASE("at the limit, chunks given back for an allocation are counted once, and freed with it") {
  autovm_pool* pool = make_pool(AUTOVM_POOL_VMM, kGiB);  // chunks of 2 MiB
  REQUIRE(autovm_pool_set_limit(pool, 64 * kMiB) == AUTOVM_OK);
  void* a = alloc(pool, 32 * kMiB, nullptr);
  void* keep = alloc(pool, 2 * kMiB, nullptr);  // after a: b cannot take a's addresses
  REQUIRE(autovm_pool_dealloc(pool, a, nullptr) == AUTOVM_OK);
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);  // the device has passed a's free
  // 32 MiB unused, 2 MiB in use and 48 MiB asked is past the limit: a's settled chunks are
  // unmapped, and their memory maps b (a spare each) with 16 MiB more from the device.
  void* b = alloc(pool, 48 * kMiB, nullptr);
  autovm_pool_stats s = stats_of(pool);
  CHECK(s.released_bytes == 0);
  CHECK(s.in_use_bytes == 50 * kMiB);
  CHECK(s.resident_bytes == 50 * kMiB);
  REQUIRE(autovm_pool_dealloc(pool, b, nullptr) == AUTOVM_OK);
  s = stats_of(pool);
  CHECK(s.in_use_bytes == 2 * kMiB);  // b's chunks have no user left
  CHECK(s.unused_chunk_bytes == 48 * kMiB);
  // So the same allocation fits again, as often as it is made.
  for (int i = 0; i < 4; ++i) {
    void* again = alloc(pool, 48 * kMiB, nullptr);
    REQUIRE(autovm_pool_dealloc(pool, again, nullptr) == AUTOVM_OK);
  }
  REQUIRE(autovm_pool_dealloc(pool, keep, nullptr) == AUTOVM_OK);
  s = stats_of(pool);
  CHECK(s.in_use_bytes == 0);
  CHECK(s.failed_allocations == 0);
  autovm_pool_free(pool);
}

TEST_CASE("at the limit an allocation waits for the free that makes room, not for other streams") {
  // Stream A holds for 200 ms, then the host frees x there; stream B holds for 3 s. y needs
  // x's chunks under the limit: the host waits for A to pass the free, not for B's work (a
  // device synchronisation would wait for both).
  autovm_pool* pool = make_pool(AUTOVM_POOL_VMM, kGiB);  // chunks of 2 MiB
  REQUIRE(autovm_pool_set_limit(pool, 64 * kMiB) == AUTOVM_OK);
  cudaStream_t a = nullptr, b = nullptr;
  REQUIRE(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking) == cudaSuccess);
  REQUIRE(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking) == cudaSuccess);
  void* x = alloc(pool, 32 * kMiB, a);
  void* keep = alloc(pool, 2 * kMiB, a);  // after x: y cannot take x's addresses
  REQUIRE(autovm::replay::run_step(nullptr, 0, nullptr, 0, 200e3, a) == cudaSuccess);
  REQUIRE(autovm_pool_dealloc(pool, x, a) == AUTOVM_OK);
  REQUIRE(autovm::replay::run_step(nullptr, 0, nullptr, 0, 3e6, b) == cudaSuccess);
  const auto start = std::chrono::steady_clock::now();
  void* y = alloc(pool, 48 * kMiB, a);
  const double waited_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  CAPTURE(waited_ms);
  CHECK(waited_ms < 1500);
  CHECK(cudaStreamQuery(b) == cudaErrorNotReady);  // B's work is still queued
  autovm_pool_stats s = stats_of(pool);
  CHECK(s.pressure_waits >= 1);
  CHECK(s.pressure_wait_us > 0);
  CHECK(s.resident_bytes <= 64 * kMiB);
  REQUIRE(fill_pattern(y, 48 * kMiB, 3, a) == cudaSuccess);
  CHECK(sum_of(y, 48 * kMiB, a) == pattern_checksum(3, 48 * kMiB));
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  REQUIRE(autovm_pool_dealloc(pool, y, a) == AUTOVM_OK);
  REQUIRE(autovm_pool_dealloc(pool, keep, a) == AUTOVM_OK);
  REQUIRE(cudaStreamDestroy(a) == cudaSuccess);
  REQUIRE(cudaStreamDestroy(b) == cudaSuccess);
  autovm_pool_free(pool);
}

TEST_CASE("at the limit an allocation pages out a runtime's finished copies instead of failing") {
  namespace rt = autovm::rt;
  rt::DevicePoolOptions o;
  o.memory = AUTOVM_POOL_VMM;
  REQUIRE(cudaGetDevice(&o.device) == cudaSuccess);
  o.capacity_bytes = kGiB;
  auto pool = rt::make_device_pool(o);  // chunks of 2 MiB
  pool->set_limit(64 * kMiB);
  cudaStream_t copies = nullptr;
  REQUIRE(cudaStreamCreateWithFlags(&copies, cudaStreamNonBlocking) == cudaSuccess);
  cudaEvent_t copied = nullptr;
  REQUIRE(cudaEventCreateWithFlags(&copied, cudaEventDisableTiming) == cudaSuccess);
  void* host = nullptr;
  REQUIRE(cudaMallocHost(&host, 32 * kMiB) == cudaSuccess);
  {
    rt::TrainerPaging paging(*pool, 1);
    rt::Tensor t;
    t.name = "a";
    t.bytes = 32 * kMiB;
    void* a = pool->allocate(t.bytes, o.device, nullptr);
    REQUIRE(fill_pattern(a, t.bytes, 7, nullptr) == cudaSuccess);
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    paging.bind(t, a);
    // An eviction as the backend issues it: the copy out is queued, its page-out pending.
    REQUIRE(cudaMemcpyAsync(host, a, t.bytes, cudaMemcpyDeviceToHost, copies) == cudaSuccess);
    REQUIRE(cudaEventRecord(copied, copies) == cudaSuccess);
    paging.evicting(t, copied);
    // 32 MiB held and 48 MiB asked is past the limit of 64 MiB: the pool reclaims.
    void* b = pool->allocate(48 * kMiB, o.device, nullptr);
    CHECK(b != nullptr);
    autovm_pool_stats s = pool->stats();
    CHECK(s.paged_out_bytes == 32 * kMiB);
    CHECK(s.resident_bytes == 48 * kMiB);
    CHECK(s.failed_allocations == 0);
    // Nothing left to reclaim: past the limit is out of memory, with the pool's figures.
    CHECK_THROWS_AS(pool->allocate(48 * kMiB, o.device, nullptr), rt::Error);
    CHECK(pool->stats().failed_allocations == 1);
    pool->deallocate(b, nullptr);
    // The tensor comes back with its bytes: mapped again, copied in.
    REQUIRE(paging.bring_back(t) == rt::TrainerPaging::Back::kCopy);
    REQUIRE(cudaMemcpy(a, host, t.bytes, cudaMemcpyHostToDevice) == cudaSuccess);
    CHECK(sum_of(a, t.bytes, nullptr) == pattern_checksum(7, t.bytes));
    pool->deallocate(a, nullptr);
  }
  // The paging's reclaimer went with it: an allocation past the limit fails at once.
  CHECK_THROWS_AS(pool->allocate(100 * kMiB, o.device, nullptr), rt::Error);
  REQUIRE(cudaFreeHost(host) == cudaSuccess);
  REQUIRE(cudaEventDestroy(copied) == cudaSuccess);
  REQUIRE(cudaStreamDestroy(copies) == cudaSuccess);
}

TEST_CASE("threads allocating and freeing at once on their own streams") {
  autovm_pool* pool = make_pool(AUTOVM_POOL_MANAGED, kGiB);
  // The streams outlive every thread: a block freed on one may serve another thread later.
  std::vector<cudaStream_t> streams(4, nullptr);
  for (auto& s : streams)
    REQUIRE(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess);
  std::vector<std::thread> threads;
  std::vector<int> failures(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      cudaStream_t s = streams[static_cast<size_t>(t)];
      std::vector<void*> live;
      for (int i = 0; i < 2000; ++i) {
        void* p = nullptr;
        const int64_t bytes = ((i * 7919 + t * 104729) % 4096) * 1024;
        if (autovm_pool_alloc(pool, bytes, s, &p) != AUTOVM_OK) ++failures[t];
        if (p) live.push_back(p);
        if (live.size() > 16) {
          if (autovm_pool_dealloc(pool, live.front(), s) != AUTOVM_OK) ++failures[t];
          live.erase(live.begin());
        }
      }
      for (void* p : live)
        if (autovm_pool_dealloc(pool, p, s) != AUTOVM_OK) ++failures[t];
    });
  }
  for (auto& th : threads) th.join();
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  for (auto& s : streams) REQUIRE(cudaStreamDestroy(s) == cudaSuccess);
  for (int f : failures) CHECK(f == 0);
  const autovm_pool_stats s = stats_of(pool);
  CHECK(s.allocations == 0);
  CHECK(s.allocated_bytes == 0);
  CHECK(s.alloc_calls == 8000);
  autovm_pool_free(pool);
}

TEST_CASE("PyTorch's hooks: the torch pool as configured, and out of memory as an exception") {
  autovm_pool_options o;
  REQUIRE(autovm_pool_options_init(&o) == AUTOVM_OK);
  o.memory = AUTOVM_POOL_VMM;
  o.capacity_bytes = 256 * kMiB;
  REQUIRE(autovm_torch_configure(&o) == AUTOVM_OK);
  void* p = autovm_torch_alloc(10 * kMiB, 0, nullptr);
  REQUIRE(p != nullptr);
  CHECK(autovm_torch_alloc(0, 0, nullptr) == nullptr);
  REQUIRE(fill_pattern(p, 10 * kMiB, 3, nullptr) == cudaSuccess);
  CHECK(sum_of(p, 10 * kMiB, nullptr) == pattern_checksum(3, 10 * kMiB));
  autovm_pool* pool = nullptr;
  REQUIRE(autovm_torch_pool(&pool) == AUTOVM_OK);
  CHECK(stats_of(pool).allocated_bytes == 10 * kMiB);
  CHECK(autovm_torch_configure(&o) == AUTOVM_ERR_STATE);  // too late
  bool threw = false;
  try {
    autovm_torch_alloc(512 * kMiB, 0, nullptr);
  } catch (const std::runtime_error& e) {
    threw = true;
    CHECK(std::string(e.what()).find("autovm_torch_alloc: out of memory") == 0);
  }
  CHECK(threw);
  CHECK(autovm_torch_segment_alloc(512 * kMiB, 0, nullptr) == nullptr);
  // The C API form the allocator shim calls (python/autovm/torch_oom.cpp): a refusal is
  // AUTOVM_ERR_OUT_OF_MEMORY, another device another error, and neither writes *out.
  void* q = reinterpret_cast<void*>(1);
  CHECK(autovm_torch_try_alloc(512 * kMiB, 0, nullptr, &q) == AUTOVM_ERR_OUT_OF_MEMORY);
  CHECK(q == reinterpret_cast<void*>(1));
  CHECK(std::string(autovm_last_error()).find("out of memory") != std::string::npos);
  CHECK(autovm_torch_try_alloc(kMiB, 1, nullptr, &q) == AUTOVM_ERR_INVALID_ARGUMENT);
  CHECK(autovm_torch_try_alloc(kMiB, 0, nullptr, nullptr) == AUTOVM_ERR_INVALID_ARGUMENT);
  REQUIRE(autovm_torch_try_alloc(kMiB, 0, nullptr, &q) == AUTOVM_OK);
  CHECK(q != nullptr);
  CHECK(stats_of(pool).allocated_bytes == 11 * kMiB);
  autovm_torch_free(q, kMiB, 0, nullptr);
  autovm_torch_free(p, 10 * kMiB, 0, nullptr);
  CHECK(stats_of(pool).allocated_bytes == 0);
}

int main(int argc, char** argv) { return autovm::gpu_test::run_or_skip(argc, argv); }
