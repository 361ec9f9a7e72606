// Host<->device copy bandwidth by memory kind, one direction and both at once, on the GPU:
// plain device memory (cudaMalloc), CUDA virtual memory management (cuMemCreate + cuMemMap:
// the `mapped` mechanism's memory), and managed memory resident on the GPU (cudaMallocManaged +
// prefetch), each copied to and from pinned host buffers with cudaMemcpyAsync on two streams.
// It never asks for more managed memory than the card has free.
//
// build: nvcc -O2 -gencode arch=compute_90,code=sm_90 tools/bench/mechanisms.cu -lcuda -o mechanisms
// run:   ./mechanisms [MiB per buffer, default 2048]
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CHECK(x)                                                                       \
  do {                                                                                 \
    cudaError_t e = (x);                                                               \
    if (e != cudaSuccess) {                                                            \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e)); \
      std::exit(1);                                                                    \
    }                                                                                  \
  } while (0)
#define CHECK_CU(x)                                                                    \
  do {                                                                                 \
    CUresult r = (x);                                                                  \
    if (r != CUDA_SUCCESS) {                                                           \
      const char* s = nullptr;                                                         \
      cuGetErrorString(r, &s);                                                         \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, s ? s : "?");   \
      std::exit(1);                                                                    \
    }                                                                                  \
  } while (0)

struct Result { double in_gbps, out_gbps, both_gbps; };

// Median of 5 timings of: copy host->dev (a), dev->host (b), and both at once.
Result measure(void* dev_in, void* dev_out, void* host_in, void* host_out, size_t bytes) {
  cudaStream_t s1, s2;
  CHECK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
  CHECK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  auto time_ms = [&](bool in, bool out) {
    std::vector<float> t;
    for (int rep = 0; rep < 6; ++rep) {
      CHECK(cudaDeviceSynchronize());
      CHECK(cudaEventRecord(a, s1));
      CHECK(cudaStreamWaitEvent(s2, a, 0));
      if (in) CHECK(cudaMemcpyAsync(dev_in, host_in, bytes, cudaMemcpyHostToDevice, s1));
      if (out) CHECK(cudaMemcpyAsync(host_out, dev_out, bytes, cudaMemcpyDeviceToHost, s2));
      cudaEvent_t done2;
      CHECK(cudaEventCreate(&done2));
      CHECK(cudaEventRecord(done2, s2));
      CHECK(cudaStreamWaitEvent(s1, done2, 0));
      CHECK(cudaEventRecord(b, s1));
      CHECK(cudaEventSynchronize(b));
      float ms = 0;
      CHECK(cudaEventElapsedTime(&ms, a, b));
      CHECK(cudaEventDestroy(done2));
      if (rep > 0) t.push_back(ms);  // the first is a warm-up
    }
    std::sort(t.begin(), t.end());
    return double(t[t.size() / 2]);
  };
  double gb = double(bytes) / 1e9;
  Result r;
  r.in_gbps = gb / (time_ms(true, false) / 1e3);
  r.out_gbps = gb / (time_ms(false, true) / 1e3);
  r.both_gbps = 2 * gb / (time_ms(true, true) / 1e3);
  CHECK(cudaStreamDestroy(s1));
  CHECK(cudaStreamDestroy(s2));
  return r;
}

int main(int argc, char** argv) {
  size_t mib = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 2048;
  size_t bytes = mib << 20;
  CHECK(cudaSetDevice(0));
  CHECK_CU(cuInit(0));
  size_t free_b = 0, total_b = 0;
  CHECK(cudaMemGetInfo(&free_b, &total_b));
  if (4 * bytes + (size_t(4) << 30) > free_b) {
    std::fprintf(stderr, "not enough free GPU memory for 4 x %zu MiB\n", mib);
    return 1;
  }
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  void *host_in, *host_out;
  CHECK(cudaMallocHost(&host_in, bytes));
  CHECK(cudaMallocHost(&host_out, bytes));
  std::fill((char*)host_in, (char*)host_in + bytes, 1);
  std::printf("device %s, %zu MiB per transfer, pinned host buffers, cudaMemcpyAsync\n\n", prop.name, mib);
  std::printf("| device memory | to device GB/s | to host GB/s | both at once, total GB/s |\n|---|---|---|---|\n");

  {  // plain device memory
    void *d1, *d2;
    CHECK(cudaMalloc(&d1, bytes));
    CHECK(cudaMalloc(&d2, bytes));
    Result r = measure(d1, d2, host_in, host_out, bytes);
    std::printf("| cudaMalloc | %.1f | %.1f | %.1f |\n", r.in_gbps, r.out_gbps, r.both_gbps);
    CHECK(cudaFree(d1));
    CHECK(cudaFree(d2));
  }
  float remap_ms = 0;
  {  // virtual memory management: the `mapped` mechanism's memory
    CUmemAllocationProp p = {};
    p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p.location.id = 0;
    size_t gran = 0;
    CHECK_CU(cuMemGetAllocationGranularity(&gran, &p, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
    size_t size = (bytes + gran - 1) / gran * gran;
    CUdeviceptr va;
    CHECK_CU(cuMemAddressReserve(&va, 2 * size, 0, 0, 0));
    CUmemGenericAllocationHandle h[2];
    for (int i = 0; i < 2; ++i) {
      CHECK_CU(cuMemCreate(&h[i], size, &p, 0));
      CHECK_CU(cuMemMap(va + i * size, size, 0, h[i], 0));
    }
    CUmemAccessDesc acc = {};
    acc.location = p.location;
    acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    CHECK_CU(cuMemSetAccess(va, 2 * size, &acc, 1));
    Result r = measure((void*)va, (void*)(va + size), host_in, host_out, bytes);
    std::printf("| cuMemCreate + cuMemMap (mapped) | %.1f | %.1f | %.1f |\n", r.in_gbps, r.out_gbps, r.both_gbps);
    // Evicting under `mapped` is unmapping and releasing the physical pages: time it.
    cudaEvent_t a, b;
    CHECK(cudaEventCreate(&a));
    CHECK(cudaEventCreate(&b));
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaEventRecord(a, 0));
    CHECK_CU(cuMemUnmap(va + size, size));
    CHECK_CU(cuMemRelease(h[1]));
    CHECK_CU(cuMemCreate(&h[1], size, &p, 0));
    CHECK_CU(cuMemMap(va + size, size, 0, h[1], 0));
    CHECK_CU(cuMemSetAccess(va + size, size, &acc, 1));
    CHECK(cudaEventRecord(b, 0));
    CHECK(cudaEventSynchronize(b));
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, a, b));
    remap_ms = ms;
    for (int i = 0; i < 2; ++i) {
      CHECK_CU(cuMemUnmap(va + i * size, size));
      CHECK_CU(cuMemRelease(h[i]));
    }
    CHECK_CU(cuMemAddressFree(va, 2 * size));
  }
  {  // managed memory resident on the GPU (well under the free memory: checked above)
    void *m1, *m2;
    CHECK(cudaMallocManaged(&m1, bytes));
    CHECK(cudaMallocManaged(&m2, bytes));
    cudaMemLocation loc = {};
    loc.type = cudaMemLocationTypeDevice;
    loc.id = 0;
    CHECK(cudaMemPrefetchAsync(m1, bytes, loc, 0, 0));
    CHECK(cudaMemPrefetchAsync(m2, bytes, loc, 0, 0));
    CHECK(cudaDeviceSynchronize());
    Result r = measure(m1, m2, host_in, host_out, bytes);
    std::printf("| cudaMallocManaged, on the GPU | %.1f | %.1f | %.1f |\n", r.in_gbps, r.out_gbps, r.both_gbps);
    CHECK(cudaFree(m1));
    CHECK(cudaFree(m2));
  }
  std::printf("\nmapped: unmap + release + create + map + set access of %zu MiB: %.3f ms\n", mib, remap_ms);
  CHECK(cudaFreeHost(host_in));
  CHECK(cudaFreeHost(host_out));
  return 0;
}
