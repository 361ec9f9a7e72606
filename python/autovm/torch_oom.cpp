// Contract: libautovm's pool as PyTorch's CUDA allocator (CUDAPluggableAllocator's alloc and
// free functions), with each refusal of the pool raised as PyTorch's own c10::OutOfMemoryError.
//
// Why: PyTorch's callers that can do with less memory catch exactly that type. cuDNN's
// convolutions try their next algorithm, with a smaller workspace, only when the workspace's
// allocation raises it (aten/src/ATen/native/cudnn/Conv_v8.cpp, try_configs), and Python sees
// torch.OutOfMemoryError. libautovm cannot throw it: its type and layout belong to the libc10
// that the trainer's torch carries, so this file is compiled against that torch, on the trainer's
// machine (autovm/torch_oom.py builds and caches it).
//
// autovm_oom_bind(try_alloc, free, last_error) names libautovm's autovm_torch_try_alloc,
// autovm_torch_free and autovm_last_error (runtime/include/autovm/autovm.h); it is called once,
// before PyTorch's first allocation. autovm_oom_alloc then returns the pool's address (NULL for
// 0 bytes); when the pool refuses the request (AUTOVM_ERR_OUT_OF_MEMORY) it throws
// c10::OutOfMemoryError, and on any other failure c10::Error, each with libautovm's message.
// autovm_oom_free never throws. Before autovm_oom_bind, autovm_oom_alloc throws c10::Error and
// autovm_oom_free does nothing.
#include <c10/util/Exception.h>

#include <atomic>
#include <cstddef>

namespace {

// autovm_status values (autovm.h): this file is built against torch, not against libautovm.
constexpr int kOk = 0;
constexpr int kOutOfMemory = 5;

using TryAllocFn = int (*)(size_t size, int device, void* stream, void** out);
using FreeFn = void (*)(void* ptr, size_t size, int device, void* stream);
using LastErrorFn = const char* (*)();

std::atomic<TryAllocFn> pool_try_alloc{nullptr};
std::atomic<FreeFn> pool_free{nullptr};
std::atomic<LastErrorFn> pool_last_error{nullptr};

const char* why() {
  LastErrorFn last_error = pool_last_error.load();
  const char* message = last_error != nullptr ? last_error() : nullptr;
  return message != nullptr && *message != '\0' ? message : "libautovm gave no message";
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) void autovm_oom_bind(void* try_alloc, void* free,
                                                            void* last_error) {
  pool_try_alloc.store(reinterpret_cast<TryAllocFn>(try_alloc));
  pool_free.store(reinterpret_cast<FreeFn>(free));
  pool_last_error.store(reinterpret_cast<LastErrorFn>(last_error));
}

__attribute__((visibility("default"))) void* autovm_oom_alloc(size_t size, int device,
                                                              void* stream) {
  TryAllocFn try_alloc = pool_try_alloc.load();
  TORCH_CHECK(try_alloc != nullptr,
              "autovm: the allocator shim was installed before autovm_oom_bind named the pool");
  void* p = nullptr;
  const int status = try_alloc(size, device, stream, &p);
  TORCH_CHECK_WITH(OutOfMemoryError, status != kOutOfMemory, "CUDA out of memory. ", why());
  TORCH_CHECK(status == kOk, "autovm: libautovm's pool failed (status ", status, "): ", why());
  return p;
}

__attribute__((visibility("default"))) void autovm_oom_free(void* ptr, size_t size, int device,
                                                            void* stream) {
  FreeFn free = pool_free.load();
  if (free != nullptr) free(ptr, size, device, stream);
}

}  // extern "C"
