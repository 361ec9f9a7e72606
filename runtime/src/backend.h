// Contract: what the executor asks of the memory underneath it. The executor owns the residency
// bookkeeping (when a tensor is resident, docs/execution-model.md); a backend only moves bytes.
// Calls come in the executor's order for each tensor: evict_issue, then evict_complete; prefetch_issue,
// then prefetch_complete; discard alone. `stream` is the trainer's compute stream (CUDA backends
// record and wait on events against it; the host backend ignores it). Failures throw rt::Error.
#pragma once

#include <memory>

#include "plan.h"

namespace autovm::rt {

class Backend {
 public:
  virtual ~Backend() = default;
  // Where the tensor lies; nullptr when the backend has no memory (accounting only).
  virtual void* pointer(const Tensor& t) = 0;
  virtual bool has_memory() const = 0;
  // Copy the tensor's bytes to host memory (issued after its last use before the eviction).
  virtual void evict_issue(const Tensor& t, void* stream) = 0;
  // The copy is complete: release the tensor's memory.
  virtual void evict_complete(const Tensor& t, void* stream) = 0;
  // The tensor's memory is back; start copying its bytes from host memory.
  virtual void prefetch_issue(const Tensor& t, void* stream) = 0;
  // The bytes must be in place before the step that waits on this starts.
  virtual void prefetch_complete(const Tensor& t, void* stream) = 0;
  // Drop the tensor's memory without a copy.
  virtual void discard(const Tensor& t, void* stream) = 0;
};

struct HostBackendOptions {
  int64_t arena_cap_bytes = int64_t{1} << 30;  // a larger arena runs in accounting-only mode
};

// The arena in host memory: evict copies to a per-tensor shadow buffer and poisons the arena
// range with kPoison; prefetch copies back; discard poisons.
std::unique_ptr<Backend> make_host_backend(const Plan& plan, const HostBackendOptions& options);

inline constexpr unsigned char kPoison = 0xA5;

}  // namespace autovm::rt
