#include <cstring>
#include <new>
#include <string>
#include <vector>

#include "backend.h"

namespace autovm::rt {
namespace {

constexpr std::align_val_t kArenaAlignment{4096};

struct ArenaDeleter {
  void operator()(unsigned char* p) const { ::operator delete[](p, kArenaAlignment); }
};

class HostBackend final : public Backend {
 public:
  HostBackend(const Plan& plan, const HostBackendOptions& options)
      : shadow_(plan.tensors.size()), trainer_memory_(options.trainer_memory) {
    if (trainer_memory_) return;  // the trainer's ranges only
    if (plan.memory_bytes() > options.arena_cap_bytes) return;  // accounting only
    const auto bytes = static_cast<size_t>(plan.memory_bytes() > 0 ? plan.memory_bytes() : 1);
    try {
      arena_.reset(static_cast<unsigned char*>(::operator new[](bytes, kArenaAlignment)));
    } catch (const std::bad_alloc&) {
      throw Error(AUTOVM_ERR_OUT_OF_MEMORY,
                  "cannot allocate the host arena of " + std::to_string(plan.memory_bytes()) +
                      " bytes; lower host_arena_cap_bytes to run in accounting-only mode");
    }
    std::memset(arena_.get(), 0, bytes);
  }

  void* at(int64_t offset) override { return arena_ ? arena_.get() + offset : nullptr; }
  bool has_memory() const override { return trainer_memory_ || arena_ != nullptr; }

  // The trainer's ranges are left as they are, as the CUDA backend's migration leaves their
  // bytes: the trainer may have freed and reused a range before the plan's count ends.
  void evict_issue(const Tensor& t, void*) override {
    if (trainer_memory_) return;
    const void* from = pointer(t);
    if (!from) return;
    std::vector<unsigned char>& shadow = shadow_[static_cast<size_t>(t.id)];
    shadow.resize(static_cast<size_t>(t.bytes));  // std::bad_alloc: reported as out of memory
    std::memcpy(shadow.data(), from, shadow.size());
  }
  void evict_complete(const Tensor& t, void*) override { poison(t); }
  void prefetch_issue(const Tensor&, const Action&, void*) override {}
  void prefetch_complete(const Tensor& t, void*) override { copy_back(t, "prefetch"); }
  void discard(const Tensor& t, void*) override { poison(t); }

  // The shadow's bytes in the range for step s; the range goes back to poison at step_end(s).
  void remote_read_prepare(const Tensor& t, StepIndex, void*) override {
    if (copy_back(t, "remote read")) remote_.push_back(&t);
  }
  void step_enqueued(StepIndex, void*) override {
    for (const Tensor* t : remote_) poison(*t);
    remote_.clear();
  }

 private:
  // The evicted copy back in t's range (arena memory only); whether it was copied. `what` names
  // the action in the error when there is no copy (the plan checked: an evict comes first).
  bool copy_back(const Tensor& t, const char* what) {
    if (trainer_memory_) return false;
    void* to = pointer(t);
    if (!to) return false;
    const std::vector<unsigned char>& shadow = shadow_[static_cast<size_t>(t.id)];
    if (shadow.size() != static_cast<size_t>(t.bytes))
      throw Error(AUTOVM_ERR_BACKEND, std::string(what) + " of '" + t.name + "' finds no evicted copy");
    std::memcpy(to, shadow.data(), shadow.size());
    return true;
  }
  void poison(const Tensor& t) {
    if (trainer_memory_) return;
    if (void* p = pointer(t)) std::memset(p, kPoison, static_cast<size_t>(t.bytes));
  }

  std::unique_ptr<unsigned char[], ArenaDeleter> arena_;
  std::vector<std::vector<unsigned char>> shadow_;  // [tensor] its bytes while evicted
  std::vector<const Tensor*> remote_;  // read remotely by the step running: poisoned after it
  bool trainer_memory_;
};

}  // namespace

std::unique_ptr<Backend> make_host_backend(const Plan& plan, const HostBackendOptions& options) {
  return std::make_unique<HostBackend>(plan, options);
}

}  // namespace autovm::rt
