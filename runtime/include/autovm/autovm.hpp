// C++ wrapper over autovm.h: RAII Plan and Runtime that throw autovm::RuntimeError (carrying the
// status and autovm_last_error()'s message) wherever the C API returns a status other than OK.
// Header-only; links against libautovm.
#pragma once

#include <autovm/autovm.h>

#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>

namespace autovm {

class RuntimeError : public std::runtime_error {
 public:
  RuntimeError(autovm_status status, const std::string& message)
      : std::runtime_error(message), status_(status) {}
  autovm_status status() const { return status_; }

 private:
  autovm_status status_;
};

inline void check(autovm_status status) {
  if (status != AUTOVM_OK) throw RuntimeError(status, autovm_last_error());
}

class Plan {
 public:
  static Plan load(const std::string& path) {
    autovm_plan* p = nullptr;
    check(autovm_plan_load(path.c_str(), &p));
    return Plan(p);
  }
  static Plan from_memory(std::string_view json) {
    autovm_plan* p = nullptr;
    check(autovm_plan_load_from_memory(json.data(), json.size(), &p));
    return Plan(p);
  }

  int32_t tensor_count() const { return get(&autovm_plan_tensor_count, int32_t{}); }
  int64_t step_count() const { return get(&autovm_plan_step_count, int64_t{}); }
  int64_t action_count() const { return get(&autovm_plan_action_count, int64_t{}); }
  int64_t arena_bytes() const { return get(&autovm_plan_arena_bytes, int64_t{}); }
  int64_t budget_bytes() const { return get(&autovm_plan_budget_bytes, int64_t{}); }
  int32_t tensor_id(const std::string& name) const {
    int32_t id = -1;
    check(autovm_plan_tensor_by_name(plan_.get(), name.c_str(), &id));
    return id;
  }
  autovm_tensor_info tensor(int32_t id) const {
    autovm_tensor_info info{};
    check(autovm_plan_tensor_info(plan_.get(), id, &info));
    return info;
  }
  autovm_step_info step(int64_t step) const {
    autovm_step_info info{};
    check(autovm_plan_step_info(plan_.get(), step, &info));
    return info;
  }
  autovm_action_info action(int64_t index) const {
    autovm_action_info info{};
    check(autovm_plan_action_info(plan_.get(), index, &info));
    return info;
  }
  const autovm_plan* get() const { return plan_.get(); }

 private:
  struct Free {
    void operator()(autovm_plan* p) const { autovm_plan_free(p); }
  };
  explicit Plan(autovm_plan* p) : plan_(p) {}
  template <typename T>
  T get(autovm_status (*query)(const autovm_plan*, T*), T value) const {
    check(query(plan_.get(), &value));
    return value;
  }
  std::unique_ptr<autovm_plan, Free> plan_;
};

class Runtime {
 public:
  // options: nullptr for the defaults (autovm_runtime_options_init).
  explicit Runtime(const Plan& plan, const autovm_runtime_options* options = nullptr) {
    autovm_runtime* rt = nullptr;
    check(autovm_runtime_create(plan.get(), options, &rt));
    rt_.reset(rt);
  }

  void step_begin(int64_t step, void* stream = nullptr) {
    check(autovm_step_begin(rt_.get(), step, stream));
  }
  void step_end(int64_t step, void* stream = nullptr) {
    check(autovm_step_end(rt_.get(), step, stream));
  }
  void touch(int64_t step, int32_t id) { check(autovm_touch(rt_.get(), step, id)); }
  void* pointer(int32_t id) {
    void* p = nullptr;
    check(autovm_tensor_pointer(rt_.get(), id, &p));
    return p;
  }
  // The trainer's own memory for tensor id (nullptr: back to the arena); autovm_tensor_bind.
  void bind(int32_t id, void* ptr, int64_t bytes) {
    check(autovm_tensor_bind(rt_.get(), id, ptr, bytes));
  }
  void reset_stats() { check(autovm_runtime_stats_reset(rt_.get())); }
  autovm_residency residency(int32_t id) const {
    autovm_residency r = AUTOVM_RESIDENCY_UNALLOCATED;
    check(autovm_tensor_residency(rt_.get(), id, &r));
    return r;
  }
  autovm_stats stats() const {
    autovm_stats s{};
    check(autovm_runtime_stats(rt_.get(), &s));
    return s;
  }
  autovm_runtime* get() { return rt_.get(); }

 private:
  struct Free {
    void operator()(autovm_runtime* rt) const { autovm_runtime_free(rt); }
  };
  std::unique_ptr<autovm_runtime, Free> rt_;
};

}  // namespace autovm
