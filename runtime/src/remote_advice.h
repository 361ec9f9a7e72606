// Contract: memory advice for remote reads of managed memory (docs/execution-model.md, "Remote
// reads"). advise(p, bytes) makes a range whose pages an evict has migrated to the host prefer
// the host and stay mapped for the device (cudaMemAdviseSetPreferredLocation host,
// cudaMemAdviseSetAccessedBy device), so kernels read it there over the link instead of
// faulting it back (../shared/facts/h200.md: 42 GB/s on the H200); it remembers the range's
// preferred location before, and restore() gives that back. AccessedBy stays: it keeps the
// device's mapping, harmless for a range the plan moves explicitly. Advice is not
// stream-ordered, and changes how faults are served, never a byte. One slot per tensor;
// included by CUDA translation units only; failures throw rt::Error naming the call.
#pragma once

#include <cuda_runtime_api.h>

#include <string>
#include <vector>

#include "cuda_driver.h"

namespace autovm::rt {

class RemoteAdvice {
 public:
  RemoteAdvice(size_t tensors, int device) : slots_(tensors), device_(device) {}

  void advise(size_t tensor, void* p, int64_t bytes, const std::string& name) {
    Slot& s = slots_[tensor];
    const auto n = static_cast<size_t>(bytes);
    if (!s.advised) {
      cudaMemLocationType type = cudaMemLocationTypeInvalid;
      int id = 0;
      check(cudaMemRangeGetAttribute(&type, sizeof type, cudaMemRangeAttributePreferredLocationType,
                                     p, n),
            "cudaMemRangeGetAttribute(PreferredLocationType) of '" + name + "'");
      check(cudaMemRangeGetAttribute(&id, sizeof id, cudaMemRangeAttributePreferredLocationId, p, n),
            "cudaMemRangeGetAttribute(PreferredLocationId) of '" + name + "'");
      s.before = cudaMemLocation{};
      s.before.type = type;
      s.before.id = id;
    }
    check(cudaMemAdvise(p, n, cudaMemAdviseSetPreferredLocation, host_location()),
          "cudaMemAdvise(SetPreferredLocation host) of '" + name + "'");
    check(cudaMemAdvise(p, n, cudaMemAdviseSetAccessedBy, device_location(device_)),
          "cudaMemAdvise(SetAccessedBy device) of '" + name + "'");
    s.advised = true;
  }

  // Nothing when the range was not advised since the last restore.
  void restore(size_t tensor, void* p, int64_t bytes, const std::string& name) {
    Slot& s = slots_[tensor];
    if (!s.advised) return;
    s.advised = false;
    const auto n = static_cast<size_t>(bytes);
    if (s.before.type == cudaMemLocationTypeInvalid) {
      check(cudaMemAdvise(p, n, cudaMemAdviseUnsetPreferredLocation, host_location()),
            "cudaMemAdvise(UnsetPreferredLocation) of '" + name + "'");
    } else {
      check(cudaMemAdvise(p, n, cudaMemAdviseSetPreferredLocation, s.before),
            "cudaMemAdvise(SetPreferredLocation) of '" + name + "'");
    }
  }

 private:
  struct Slot {
    bool advised = false;
    cudaMemLocation before{};  // type cudaMemLocationTypeInvalid: none (or mixed)
  };
  std::vector<Slot> slots_;
  int device_;
};

}  // namespace autovm::rt
