// Why does the `staged` mechanism's way back collapse? (BENCHMARKS.md, "Transfer mechanisms":
// bringing a managed tensor back straight after its discard runs at 1-2.5 GB/s at 1 GiB.) Each
// variant below first does what a staged eviction does (copy the managed buffer to a pinned
// host buffer, then cudaMemDiscardBatchAsync), synchronises, and then brings the bytes back
// one way, timing each phase with events on one stream; median of 5 rounds.
//   resident      no discard: copy into managed pages already on the device (the reference)
//   dp+copy       cudaMemDiscardAndPrefetchBatchAsync to the device, then the copy (staged today)
//   pf+copy       cudaMemPrefetchAsync to the device, then the copy
//   copy          the copy alone: the copy engine meets discarded pages
//   dp+copy pref  dp+copy with cudaMemAdviseSetPreferredLocation(device) on the buffer
//   dp+copy acc   dp+copy with cudaMemAdviseSetAccessedBy(device) on the buffer
//   dp+touch+copy dp, then a kernel writes one word per 4 KiB page, then the copy
// It never asks for more managed memory than the card has free.
//
// build: nvcc -O2 -std=c++17 -gencode arch=compute_90,code=sm_90 tools/bench/staged_in.cu -o staged_in
// run:   ./staged_in [MiB ...]   (default 64 256 1024)
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#define CHECK(x)                                                                              \
  do {                                                                                        \
    cudaError_t e = (x);                                                                      \
    if (e != cudaSuccess) {                                                                   \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e)); \
      std::exit(1);                                                                           \
    }                                                                                         \
  } while (0)

__global__ void touch_pages(char* p, size_t bytes) {
  size_t page = (blockIdx.x * size_t(blockDim.x) + threadIdx.x) * 4096;
  if (page < bytes) p[page] = 1;
}

struct Phases { double prepare_ms, copy_ms; };

int main(int argc, char** argv) {
  std::vector<size_t> mibs;
  for (int i = 1; i < argc; ++i) mibs.push_back(std::strtoull(argv[i], nullptr, 10));
  if (mibs.empty()) mibs = {64, 256, 1024};
  int dev = 0;
  CHECK(cudaSetDevice(dev));
  cudaMemLocation gpu{};
  gpu.type = cudaMemLocationTypeDevice;
  gpu.id = dev;
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaEvent_t e0, e1, e2;
  CHECK(cudaEventCreate(&e0));
  CHECK(cudaEventCreate(&e1));
  CHECK(cudaEventCreate(&e2));
  const char* names[] = {"resident", "dp+copy", "pf+copy", "copy", "dp+copy pref", "dp+copy acc",
                         "dp+touch+copy"};
  std::printf("%-8s %-14s %12s %12s %12s %14s\n", "MiB", "variant", "prepare ms", "copy ms",
              "total ms", "GB/s (total)");
  for (size_t mib : mibs) {
    const size_t bytes = mib << 20;
    size_t free = 0, total = 0;
    CHECK(cudaMemGetInfo(&free, &total));
    if (bytes * 2 + (size_t(2) << 30) > free) {
      std::printf("%zu MiB: skipped (only %zu MiB free)\n", mib, free >> 20);
      continue;
    }
    char* host = nullptr;
    CHECK(cudaHostAlloc(reinterpret_cast<void**>(&host), bytes, cudaHostAllocPortable));
    for (int variant = 0; variant < 7; ++variant) {
      char* m = nullptr;
      CHECK(cudaMallocManaged(reinterpret_cast<void**>(&m), bytes));
      if (variant == 4) CHECK(cudaMemAdvise(m, bytes, cudaMemAdviseSetPreferredLocation, gpu));
      if (variant == 5) CHECK(cudaMemAdvise(m, bytes, cudaMemAdviseSetAccessedBy, gpu));
      CHECK(cudaMemPrefetchAsync(m, bytes, gpu, 0, s));
      CHECK(cudaMemsetAsync(m, 7, bytes, s));
      CHECK(cudaStreamSynchronize(s));
      std::vector<Phases> rounds;
      for (int r = 0; r < 6; ++r) {
        // The staged eviction: out through the copy engine, then the pages dropped.
        CHECK(cudaMemcpyAsync(host, m, bytes, cudaMemcpyDefault, s));
        void* p = m;
        size_t size = bytes;
        if (variant != 0) CHECK(cudaMemDiscardBatchAsync(&p, &size, 1, 0, s));
        CHECK(cudaStreamSynchronize(s));
        CHECK(cudaEventRecord(e0, s));
        size_t index = 0;
        cudaMemLocation where = gpu;
        switch (variant) {
          case 1: case 4: case 5: case 6:
            CHECK(cudaMemDiscardAndPrefetchBatchAsync(&p, &size, 1, &where, &index, 1, 0, s));
            break;
          case 2: CHECK(cudaMemPrefetchAsync(m, bytes, gpu, 0, s)); break;
          default: break;
        }
        if (variant == 6)
          touch_pages<<<unsigned((bytes / 4096 + 255) / 256), 256, 0, s>>>(m, bytes);
        CHECK(cudaEventRecord(e1, s));
        CHECK(cudaMemcpyAsync(m, host, bytes, cudaMemcpyDefault, s));
        CHECK(cudaEventRecord(e2, s));
        CHECK(cudaStreamSynchronize(s));
        float a = 0, b = 0;
        CHECK(cudaEventElapsedTime(&a, e0, e1));
        CHECK(cudaEventElapsedTime(&b, e1, e2));
        if (r > 0) rounds.push_back({a, b});  // the first round warms up
      }
      std::sort(rounds.begin(), rounds.end(), [](const Phases& x, const Phases& y) {
        return x.prepare_ms + x.copy_ms < y.prepare_ms + y.copy_ms;
      });
      const Phases med = rounds[rounds.size() / 2];
      const double ms = med.prepare_ms + med.copy_ms;
      std::printf("%-8zu %-14s %12.3f %12.3f %12.3f %14.2f\n", mib, names[variant],
                  med.prepare_ms, med.copy_ms, ms, bytes / (ms * 1e-3) / 1e9);
      CHECK(cudaFree(m));
    }
    CHECK(cudaFreeHost(host));
  }
  return 0;
}
