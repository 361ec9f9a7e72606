// The C boundary of memory pools and PyTorch's allocator hooks (autovm.h), and the thread's
// last error that every entry point of the library reports through.
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <string>

#include "autovm/autovm.h"
#include "c_boundary.h"
#include "device_pool.h"

using autovm::rt::DevicePool;
using autovm::rt::DevicePoolOptions;
using autovm::rt::Error;
using autovm::rt::guard;

struct autovm_pool {
  std::unique_ptr<DevicePool> pool;
};

namespace autovm::rt {

namespace {
thread_local std::string g_last_error;
}  // namespace

void set_last_error(const char* message) noexcept {
  try {
    g_last_error = message;
  } catch (...) {
    g_last_error.clear();  // no memory for the message: an empty one
  }
}

const char* last_error() noexcept { return g_last_error.c_str(); }

#ifndef AUTOVM_WITH_CUDA
std::unique_ptr<DevicePool> make_device_pool(const DevicePoolOptions&) {
  throw Error(AUTOVM_ERR_BACKEND,
              "autovm_pool_create: this libautovm was built without CUDA (meson option "
              "-Dcuda=enabled and a CUDA toolkit at -Dtoolkit_root build it)");
}
#endif

}  // namespace autovm::rt

namespace {

template <typename T>
void need(const T* p, const char* function, const char* argument) {
  if (p == nullptr)
    throw Error(AUTOVM_ERR_INVALID_ARGUMENT,
                std::string(function) + ": " + argument + " is NULL");
}

// Runs a pool's method, its errors prefixed with the entry point's name.
template <typename F>
void named(const char* function, F&& body) {
  try {
    body();
  } catch (const Error& e) {
    throw Error(e.status(), std::string(function) + ": " + e.what());
  }
}

DevicePool& pool_of(const autovm_pool* p, const char* function) {
  need(p, function, "pool");
  return *p->pool;
}

autovm_pool_options default_options() {
  autovm_pool_options o{};
  o.memory = AUTOVM_POOL_MANAGED;
  return o;
}

DevicePoolOptions checked(const autovm_pool_options& o, const char* function) {
  int memory = 0;
  std::memcpy(&memory, &o.memory, sizeof memory);  // a C caller's value may be out of range
  if (memory != AUTOVM_POOL_MANAGED && memory != AUTOVM_POOL_VMM)
    throw Error(AUTOVM_ERR_INVALID_ARGUMENT,
                std::string(function) + ": memory " + std::to_string(memory) +
                    " is neither AUTOVM_POOL_MANAGED (0) nor AUTOVM_POOL_VMM (1)");
  auto non_negative = [&](int64_t value, const char* name) {
    if (value < 0)
      throw Error(AUTOVM_ERR_INVALID_ARGUMENT, std::string(function) + ": " + name +
                                                   " must be >= 0 (0: the default), not " +
                                                   std::to_string(value));
  };
  non_negative(o.capacity_bytes, "capacity_bytes");
  non_negative(o.free_margin_bytes, "free_margin_bytes");
  non_negative(o.chunk_bytes, "chunk_bytes");
  DevicePoolOptions d;
  d.memory = static_cast<autovm_pool_memory>(memory);
  d.device = o.device;
  d.capacity_bytes = o.capacity_bytes;
  d.chunk_bytes = o.chunk_bytes;
  if (d.chunk_bytes > 0 && d.memory != AUTOVM_POOL_VMM)
    throw Error(AUTOVM_ERR_INVALID_ARGUMENT,
                std::string(function) + ": chunk_bytes is for vmm pools only");
  if (o.free_margin_bytes > 0) d.free_margin_bytes = o.free_margin_bytes;
  d.allow_oversubscribe = o.allow_oversubscribe != 0;
  if (d.allow_oversubscribe && d.memory != AUTOVM_POOL_MANAGED)
    throw Error(AUTOVM_ERR_INVALID_ARGUMENT,
                std::string(function) + ": allow_oversubscribe is for managed memory only");
  return d;
}

// The options of the torch pool from the environment (autovm.h, "PyTorch's allocator hooks").
autovm_pool_options options_from_environment() {
  autovm_pool_options o = default_options();
  if (const char* memory = std::getenv("AUTOVM_POOL_MEMORY")) {
    const std::string m = memory;
    if (m == "vmm") {
      o.memory = AUTOVM_POOL_VMM;
    } else if (m != "managed" && !m.empty()) {
      throw Error(AUTOVM_ERR_INVALID_ARGUMENT,
                  "AUTOVM_POOL_MEMORY is '" + m + "': use managed or vmm");
    }
  }
  if (const char* capacity = std::getenv("AUTOVM_POOL_CAPACITY")) {
    char* end = nullptr;
    const long long bytes = std::strtoll(capacity, &end, 10);
    if (end == capacity || *end != '\0' || bytes < 0)
      throw Error(AUTOVM_ERR_INVALID_ARGUMENT, std::string("AUTOVM_POOL_CAPACITY is '") +
                                                   capacity + "': give a number of bytes");
    o.capacity_bytes = bytes;
  }
  if (const char* chunk = std::getenv("AUTOVM_POOL_CHUNK")) {
    char* end = nullptr;
    const long long bytes = std::strtoll(chunk, &end, 10);
    if (end == chunk || *end != '\0' || bytes < 0)
      throw Error(AUTOVM_ERR_INVALID_ARGUMENT, std::string("AUTOVM_POOL_CHUNK is '") + chunk +
                                                   "': give a number of bytes");
    o.chunk_bytes = bytes;
  }
  if (const char* over = std::getenv("AUTOVM_POOL_ALLOW_OVERSUBSCRIBE"))
    o.allow_oversubscribe = std::string(over) == "1";
  return o;
}

// The torch pool: configured options, created on first use; a failed creation stays failed.
struct TorchPool {
  std::mutex mutex;
  bool configured = false;
  autovm_pool_options options{};
  autovm_pool* pool = nullptr;
  std::string failure;  // why the creation failed
};

TorchPool& torch_pool() {
  static TorchPool* p = new TorchPool;  // never destroyed: frees may come during exit
  return *p;
}

autovm_pool* torch_pool_or_throw() {
  TorchPool& t = torch_pool();
  std::lock_guard<std::mutex> lock(t.mutex);
  if (t.pool) return t.pool;
  if (!t.failure.empty())
    throw Error(AUTOVM_ERR_STATE, "the torch pool could not be created: " + t.failure);
  try {
    const autovm_pool_options o = t.configured ? t.options : options_from_environment();
    auto pool = autovm::rt::make_device_pool(checked(o, "autovm_torch_pool"));
    t.pool = new autovm_pool{std::move(pool)};
  } catch (const std::exception& e) {
    t.failure = e.what();
    throw;
  }
  return t.pool;
}

}  // namespace

namespace autovm::rt {
DevicePool& torch_device_pool() { return *torch_pool_or_throw()->pool; }
DevicePool& device_pool_of(autovm_pool* p) { return *p->pool; }
}  // namespace autovm::rt

// Each entry point names itself in `self`: inside the guard's lambda __func__ is "operator()".
extern "C" {

autovm_status autovm_pool_options_init(autovm_pool_options* options) {
  const char* const self = __func__;
  return guard([&] {
    need(options, self, "options");
    *options = default_options();
  });
}

autovm_status autovm_pool_create(const autovm_pool_options* options, autovm_pool** out) {
  const char* const self = __func__;
  return guard([&] {
    need(out, self, "out");
    const autovm_pool_options o = options ? *options : default_options();
    auto pool = autovm::rt::make_device_pool(checked(o, self));
    *out = new autovm_pool{std::move(pool)};
  });
}

void autovm_pool_free(autovm_pool* pool) { delete pool; }

autovm_status autovm_pool_alloc(autovm_pool* pool, int64_t bytes, void* stream, void** out) {
  const char* const self = __func__;
  return guard([&] {
    auto& p = pool_of(pool, self);
    need(out, self, "out");
    named(self, [&] { *out = p.allocate(bytes, p.device(), stream); });
  });
}

autovm_status autovm_pool_dealloc(autovm_pool* pool, void* ptr, void* stream) {
  const char* const self = __func__;
  return guard([&] {
    auto& p = pool_of(pool, self);
    named(self, [&] { p.deallocate(ptr, stream); });
  });
}

autovm_status autovm_pool_find(const autovm_pool* pool, const void* address, void** base,
                               int64_t* bytes) {
  const char* const self = __func__;
  return guard([&] {
    auto& p = pool_of(pool, self);
    need(base, self, "base");
    need(bytes, self, "bytes");
    const auto found = p.find(address);
    *base = found ? reinterpret_cast<void*>(found->address) : nullptr;
    *bytes = found ? static_cast<int64_t>(found->requested) : 0;
  });
}

autovm_status autovm_pool_stats_get(const autovm_pool* pool, autovm_pool_stats* out) {
  const char* const self = __func__;
  return guard([&] {
    auto& p = pool_of(pool, self);
    need(out, self, "out");
    *out = p.stats();
  });
}

autovm_status autovm_pool_reset_peaks(autovm_pool* pool) {
  const char* const self = __func__;
  return guard([&] { pool_of(pool, self).reset_peaks(); });
}

autovm_status autovm_pool_trim(autovm_pool* pool) {
  const char* const self = __func__;
  return guard([&] {
    auto& p = pool_of(pool, self);
    named(self, [&] { p.trim(); });
  });
}

autovm_status autovm_pool_set_limit(autovm_pool* pool, int64_t bytes) {
  const char* const self = __func__;
  return guard([&] {
    auto& p = pool_of(pool, self);
    named(self, [&] { p.set_limit(bytes); });
  });
}

autovm_status autovm_torch_configure(const autovm_pool_options* options) {
  const char* const self = __func__;
  return guard([&] {
    need(options, self, "options");
    checked(*options, self);
    TorchPool& t = torch_pool();
    std::lock_guard<std::mutex> lock(t.mutex);
    if (t.pool || !t.failure.empty())
      throw Error(AUTOVM_ERR_STATE,
                  "autovm_torch_configure: the torch pool exists already (configure it before "
                  "PyTorch's first CUDA allocation)");
    t.options = *options;
    t.configured = true;
  });
}

autovm_status autovm_torch_pool(autovm_pool** out) {
  const char* const self = __func__;
  return guard([&] {
    need(out, self, "out");
    *out = torch_pool_or_throw();
  });
}

void* autovm_torch_alloc(size_t size, int device, void* stream) {
  void* p = nullptr;
  const autovm_status status = guard([&] {
    auto& pool = *torch_pool_or_throw()->pool;
    named("autovm_torch_alloc", [&] { p = pool.allocate(static_cast<int64_t>(size), device, stream); });
  });
  if (status != AUTOVM_OK)
    throw std::runtime_error(autovm::rt::last_error());
  return p;
}

void* autovm_torch_segment_alloc(size_t size, int device, void* stream) {
  void* p = nullptr;
  guard([&] {
    auto& pool = *torch_pool_or_throw()->pool;
    named("autovm_torch_segment_alloc",
          [&] { p = pool.allocate(static_cast<int64_t>(size), device, stream); });
  });
  return p;
}

autovm_status autovm_torch_try_alloc(size_t size, int device, void* stream, void** out) {
  const char* const self = __func__;
  return guard([&] {
    need(out, self, "out");
    auto& pool = *torch_pool_or_throw()->pool;
    named(self, [&] { *out = pool.allocate(static_cast<int64_t>(size), device, stream); });
  });
}

void autovm_torch_free(void* ptr, size_t, int, void* stream) {
  guard([&] {
    auto& pool = *torch_pool_or_throw()->pool;
    named("autovm_torch_free", [&] { pool.deallocate(ptr, stream); });
  });
}

}  // extern "C"
