// The C boundary of plans and runtimes: every entry point runs its body through guard()
// (c_boundary.h), so nothing throws past here.
#include <cstring>
#include <new>
#include <string>
#include <type_traits>

#include "autovm/autovm.h"
#include "backend.h"
#include "c_boundary.h"
#include "device_pool.h"
#include "residency_layout.h"
#include "executor.h"
#include "plan.h"

using autovm::rt::Error;
using autovm::rt::guard;

struct autovm_plan {
  std::shared_ptr<const autovm::rt::Plan> plan;
};

struct autovm_runtime {
  std::shared_ptr<const autovm::rt::Plan> plan;
  std::unique_ptr<autovm::rt::Executor> executor;
};

namespace {

template <typename T>
void need(const T* p, const char* function, const char* argument) {
  if (p == nullptr)
    throw Error(AUTOVM_ERR_INVALID_ARGUMENT,
                std::string(function) + ": " + argument + " is NULL");
}

const autovm::rt::Plan& plan_of(const autovm_plan* p, const char* function) {
  need(p, function, "plan");
  return *p->plan;
}

autovm::rt::Executor& executor_of(const autovm_runtime* rt, const char* function) {
  need(rt, function, "runtime");
  return *rt->executor;
}

void check_tensor(const autovm::rt::Plan& p, int32_t id, const char* function) {
  if (id < 0 || static_cast<size_t>(id) >= p.tensors.size())
    throw Error(AUTOVM_ERR_INVALID_ARGUMENT,
                std::string(function) + ": tensor id " + std::to_string(id) +
                    " is out of range [0, " + std::to_string(p.tensors.size()) + ")");
}

void check_step(const autovm::rt::Plan& p, int64_t step, const char* function) {
  if (step < 0 || step >= p.step_count())
    throw Error(AUTOVM_ERR_INVALID_ARGUMENT,
                std::string(function) + ": step " + std::to_string(step) +
                    " is out of range [0, " + std::to_string(p.step_count()) + ")");
}

autovm_runtime_options default_options() {
  autovm_runtime_options o{};
  o.backend = AUTOVM_BACKEND_HOST;
  o.mechanism = AUTOVM_MECHANISM_PLAN;
  o.mode = AUTOVM_MODE_PLAN;
  o.device = 0;
  o.free_margin_bytes = 0;
  o.allow_oversubscribe = 0;
  o.memory = AUTOVM_MEMORY_RUNTIME;
  return o;
}

// Enumerations from a C caller are read as integers: a value outside the enumeration, loaded
// as the enum type, is undefined in C++.
template <typename E>
std::underlying_type_t<E> int_of(const E& value) {
  std::underlying_type_t<E> i;
  std::memcpy(&i, &value, sizeof i);
  return i;
}

int kind_of(const autovm_backend& b) { return static_cast<int>(int_of(b)); }

bool trainer_memory(const autovm_memory& m) {
  const auto i = int_of(m);
  if (i != AUTOVM_MEMORY_RUNTIME && i != AUTOVM_MEMORY_TRAINER)
    throw Error(AUTOVM_ERR_INVALID_ARGUMENT,
                "autovm_runtime_create: unknown memory " + std::to_string(i) +
                    " (AUTOVM_MEMORY_RUNTIME or AUTOVM_MEMORY_TRAINER)");
  return i == AUTOVM_MEMORY_TRAINER;
}

autovm_mode checked_mode(const autovm_mode& m) {
  const auto i = int_of(m);
  if (i < AUTOVM_MODE_PLAN || i > AUTOVM_MODE_RESIDENT)
    throw Error(AUTOVM_ERR_INVALID_ARGUMENT,
                "autovm_runtime_create: unknown mode " + std::to_string(i));
  return static_cast<autovm_mode>(i);
}

// The plan's mechanism by name; staged for names the CUDA backend has no mechanism for
// (pinned_copy and the like: the copy engine through pinned buffers is what staged does).
autovm_mechanism resolve_mechanism(const autovm_mechanism& asked, const autovm::rt::Plan& p) {
  const auto i = int_of(asked);
  if (i < AUTOVM_MECHANISM_PLAN || i > AUTOVM_MECHANISM_MAPPED)
    throw Error(AUTOVM_ERR_INVALID_ARGUMENT,
                "autovm_runtime_create: unknown mechanism " + std::to_string(i));
  if (i != AUTOVM_MECHANISM_PLAN) return static_cast<autovm_mechanism>(i);
  if (p.mechanism == "prefetch") return AUTOVM_MECHANISM_PREFETCH;
  if (p.mechanism == "mapped") return AUTOVM_MECHANISM_MAPPED;
  return AUTOVM_MECHANISM_STAGED;
}

std::unique_ptr<autovm::rt::Backend> make_cuda(const autovm::rt::Plan& p,
                                               const autovm_runtime_options& o) {
#ifdef AUTOVM_WITH_CUDA
  if (o.free_margin_bytes < 0)
    throw Error(AUTOVM_ERR_INVALID_ARGUMENT,
                "autovm_runtime_create: free_margin_bytes must be >= 0 (0: 1 GiB)");
  autovm::rt::CudaBackendOptions cuda;
  cuda.mechanism = resolve_mechanism(o.mechanism, p);
  cuda.mode = checked_mode(o.mode);
  cuda.device = o.device;
  if (o.free_margin_bytes > 0) cuda.free_margin_bytes = o.free_margin_bytes;
  cuda.allow_oversubscribe = o.allow_oversubscribe != 0;
  cuda.trainer_memory = trainer_memory(o.memory);
  // The trainer's memory moves by migration unless the mapped mechanism is asked for
  // (autovm.h, AUTOVM_MEMORY_TRAINER); mapped pages it on a vmm pool.
  if (cuda.trainer_memory && int_of(o.mechanism) == AUTOVM_MECHANISM_PLAN)
    cuda.mechanism = AUTOVM_MECHANISM_PREFETCH;
  if (cuda.trainer_memory && cuda.mechanism == AUTOVM_MECHANISM_MAPPED)
    cuda.pool = o.pool != nullptr ? &autovm::rt::device_pool_of(o.pool)
                                  : &autovm::rt::torch_device_pool();
  return autovm::rt::make_cuda_backend(p, cuda);
#else
  (void)p;
  (void)o;
  throw Error(AUTOVM_ERR_BACKEND,
              "autovm_runtime_create: this libautovm was built without CUDA (meson option "
              "-Dcuda=enabled and a CUDA toolkit at -Dtoolkit_root build it); use "
              "AUTOVM_BACKEND_HOST");
#endif
}

}  // namespace

// Each entry point names itself in `self`: inside the guard's lambda __func__ is "operator()".
extern "C" {

int autovm_version(void) { return AUTOVM_API_VERSION; }

const char* autovm_last_error(void) { return autovm::rt::last_error(); }

autovm_status autovm_plan_load(const char* path, autovm_plan** out) {
  const char* const self = __func__;
  return guard([&] {
    need(path, self, "path");
    need(out, self, "out");
    auto plan = std::make_shared<const autovm::rt::Plan>(autovm::rt::load_plan_file(path));
    *out = new autovm_plan{std::move(plan)};
  });
}

autovm_status autovm_plan_load_from_memory(const void* data, size_t size, autovm_plan** out) {
  const char* const self = __func__;
  return guard([&] {
    if (size > 0) need(data, self, "data");
    need(out, self, "out");
    std::string_view text(static_cast<const char*>(data), size);
    auto plan = std::make_shared<const autovm::rt::Plan>(autovm::rt::load_plan(text, "<memory>"));
    *out = new autovm_plan{std::move(plan)};
  });
}

void autovm_plan_free(autovm_plan* plan) { delete plan; }

autovm_status autovm_plan_tensor_count(const autovm_plan* plan, int32_t* out) {
  const char* const self = __func__;
  return guard([&] {
    const auto& p = plan_of(plan, self);
    need(out, self, "out");
    *out = static_cast<int32_t>(p.tensors.size());
  });
}

autovm_status autovm_plan_step_count(const autovm_plan* plan, int64_t* out) {
  const char* const self = __func__;
  return guard([&] {
    const auto& p = plan_of(plan, self);
    need(out, self, "out");
    *out = p.step_count();
  });
}

autovm_status autovm_plan_action_count(const autovm_plan* plan, int64_t* out) {
  const char* const self = __func__;
  return guard([&] {
    const auto& p = plan_of(plan, self);
    need(out, self, "out");
    *out = static_cast<int64_t>(p.actions.size());
  });
}

autovm_status autovm_plan_arena_bytes(const autovm_plan* plan, int64_t* out) {
  const char* const self = __func__;
  return guard([&] {
    const auto& p = plan_of(plan, self);
    need(out, self, "out");
    *out = p.arena_bytes;
  });
}

autovm_status autovm_plan_budget_bytes(const autovm_plan* plan, int64_t* out) {
  const char* const self = __func__;
  return guard([&] {
    const auto& p = plan_of(plan, self);
    need(out, self, "out");
    *out = p.budget_bytes;
  });
}

autovm_status autovm_plan_tensor_by_name(const autovm_plan* plan, const char* name, int32_t* id) {
  const char* const self = __func__;
  return guard([&] {
    const auto& p = plan_of(plan, self);
    need(name, self, "name");
    need(id, self, "id");
    auto it = p.by_name.find(name);
    if (it == p.by_name.end())
      throw Error(AUTOVM_ERR_INVALID_ARGUMENT,
                  std::string("no tensor named '") + name + "' in plan '" + p.source +
                      "' (names and aliases are the model's value names)");
    *id = it->second;
  });
}

autovm_status autovm_plan_tensor_info(const autovm_plan* plan, int32_t id, autovm_tensor_info* out) {
  const char* const self = __func__;
  return guard([&] {
    const auto& p = plan_of(plan, self);
    need(out, self, "out");
    check_tensor(p, id, self);
    const auto& t = p.tensors[static_cast<size_t>(id)];
    *out = autovm_tensor_info{t.id,    t.name.c_str(), t.kind, t.dtype.c_str(),         t.bytes,
                              t.offset, t.first,       t.last, t.persistent ? 1 : 0};
  });
}

autovm_status autovm_plan_step_info(const autovm_plan* plan, int64_t step, autovm_step_info* out) {
  const char* const self = __func__;
  return guard([&] {
    const auto& p = plan_of(plan, self);
    need(out, self, "out");
    check_step(p, step, self);
    const auto& s = p.steps[static_cast<size_t>(step)];
    *out = autovm_step_info{s.id,           s.op.c_str(),      s.phase.c_str(),
                            s.node.c_str(), s.inputs.data(),   s.inputs.size(),
                            s.outputs.data(), s.outputs.size(), s.workspace, s.compute_us};
  });
}

autovm_status autovm_plan_action_info(const autovm_plan* plan, int64_t index,
                                      autovm_action_info* out) {
  const char* const self = __func__;
  return guard([&] {
    const auto& p = plan_of(plan, self);
    need(out, self, "out");
    if (index < 0 || static_cast<size_t>(index) >= p.actions.size())
      throw Error(AUTOVM_ERR_INVALID_ARGUMENT,
                  std::string(self) + ": action " + std::to_string(index) +
                      " is out of range [0, " + std::to_string(p.actions.size()) + ")");
    const auto& a = p.actions[static_cast<size_t>(index)];
    *out = autovm_action_info{a.kind,        a.tensor,      a.bytes, a.after_step,
                              a.ready_before_step, a.source_step, a.advice.c_str()};
  });
}

autovm_status autovm_runtime_options_init(autovm_runtime_options* options) {
  const char* const self = __func__;
  return guard([&] {
    need(options, self, "options");
    *options = default_options();
  });
}

autovm_status autovm_runtime_create(const autovm_plan* plan, const autovm_runtime_options* options,
                                    autovm_runtime** out) {
  const char* const self = __func__;
  return guard([&] {
    const auto& p = plan_of(plan, self);
    need(out, self, "out");
    autovm_runtime_options o = default_options();
    if (options != nullptr) o = *options;
    if (o.budget_bytes < 0 || o.host_arena_cap_bytes < 0)
      throw Error(AUTOVM_ERR_INVALID_ARGUMENT,
                  std::string(self) + ": budget_bytes and host_arena_cap_bytes must be >= 0 "
                                          "(0: the default)");
    const autovm_mode mode = checked_mode(o.mode);
    if (kind_of(o.backend) == AUTOVM_BACKEND_HOST && mode == AUTOVM_MODE_DEMAND_PAGING)
      throw Error(AUTOVM_ERR_INVALID_ARGUMENT,
                  std::string(self) + ": demand paging needs the CUDA backend (pages fault "
                                          "back only in managed memory)");
    const int kind = kind_of(o.backend);
    if (kind != AUTOVM_BACKEND_HOST && kind != AUTOVM_BACKEND_CUDA)
      throw Error(AUTOVM_ERR_INVALID_ARGUMENT,
                  std::string(self) + ": unknown backend " + std::to_string(kind));
    // The arena packed by residency where evicted bytes wait in the backend's own host buffers.
    const auto layout = int_of(o.layout);
    if (layout < AUTOVM_LAYOUT_AUTO || layout > AUTOVM_LAYOUT_PACKED)
      throw Error(AUTOVM_ERR_INVALID_ARGUMENT,
                  std::string(self) + ": unknown layout " + std::to_string(layout));
    const bool trainer = trainer_memory(o.memory);
    if (trainer && layout == AUTOVM_LAYOUT_PACKED)
      throw Error(AUTOVM_ERR_INVALID_ARGUMENT,
                  std::string(self) + ": layout PACKED needs the runtime's arena; with "
                                          "AUTOVM_MEMORY_TRAINER use AUTOVM_LAYOUT_AUTO or PLAN");
    const bool can_pack =
        mode == AUTOVM_MODE_PLAN && !trainer &&
        (kind == AUTOVM_BACKEND_HOST || resolve_mechanism(o.mechanism, p) == AUTOVM_MECHANISM_MAPPED);
    if (layout == AUTOVM_LAYOUT_PACKED && !can_pack)
      throw Error(AUTOVM_ERR_INVALID_ARGUMENT,
                  std::string(self) + ": a packed arena needs mode PLAN and the host backend "
                                          "or the mapped mechanism (managed memory keeps an "
                                          "evicted tensor's bytes in its range)");
    std::shared_ptr<const autovm::rt::Plan> laid_out = plan->plan;
    // A remote read keeps its tensor's range at its step on the host backend (the host copy is
    // put back there); the mapped mechanism reads it where its host copy is mapped instead.
    const bool remote_in_place = kind == AUTOVM_BACKEND_HOST;
    if (can_pack && layout != AUTOVM_LAYOUT_PLAN)
      laid_out = std::make_shared<const autovm::rt::Plan>(autovm::rt::with_layout(
          p, autovm::rt::pack_by_residency(p, 256, remote_in_place)));
    std::unique_ptr<autovm::rt::Backend> backend;
    if (kind == AUTOVM_BACKEND_HOST) {
      autovm::rt::HostBackendOptions host;
      if (o.host_arena_cap_bytes > 0) host.arena_cap_bytes = o.host_arena_cap_bytes;
      host.trainer_memory = trainer;
      backend = autovm::rt::make_host_backend(*laid_out, host);
    } else {
      backend = make_cuda(*laid_out, o);
    }
    const int64_t budget = o.budget_bytes > 0 ? o.budget_bytes : p.budget_bytes;
    auto rt = std::make_unique<autovm_runtime>();
    rt->plan = laid_out;
    rt->executor = std::make_unique<autovm::rt::Executor>(laid_out, std::move(backend), budget,
                                                          o.strict != 0, mode, trainer);
    *out = rt.release();
  });
}

void autovm_runtime_free(autovm_runtime* rt) { delete rt; }

autovm_status autovm_step_begin(autovm_runtime* rt, int64_t step, void* stream) {
  const char* const self = __func__;
  return guard([&] {
    auto& e = executor_of(rt, self);
    check_step(e.plan(), step, self);
    e.step_begin(step, stream);
  });
}

autovm_status autovm_step_end(autovm_runtime* rt, int64_t step, void* stream) {
  const char* const self = __func__;
  return guard([&] {
    auto& e = executor_of(rt, self);
    check_step(e.plan(), step, self);
    e.step_end(step, stream);
  });
}

autovm_status autovm_tensor_pointer(autovm_runtime* rt, int32_t id, void** ptr) {
  const char* const self = __func__;
  return guard([&] {
    auto& e = executor_of(rt, self);
    need(ptr, self, "ptr");
    check_tensor(e.plan(), id, self);
    *ptr = e.pointer(id);
  });
}

autovm_status autovm_tensor_bind(autovm_runtime* rt, int32_t id, void* ptr, int64_t bytes) {
  const char* const self = __func__;
  return guard([&] {
    auto& e = executor_of(rt, self);
    check_tensor(e.plan(), id, self);
    e.bind(id, ptr, bytes);
  });
}

autovm_status autovm_tensor_residency(const autovm_runtime* rt, int32_t id, autovm_residency* out) {
  const char* const self = __func__;
  return guard([&] {
    auto& e = executor_of(rt, self);
    need(out, self, "out");
    check_tensor(e.plan(), id, self);
    *out = e.residency(id);
  });
}

autovm_status autovm_tensor_require(autovm_runtime* rt, int32_t id, void* stream) {
  const char* const self = __func__;
  return guard([&] {
    auto& e = executor_of(rt, self);
    check_tensor(e.plan(), id, self);
    e.require(id, stream);
  });
}

autovm_status autovm_runtime_restore(autovm_runtime* rt, void* stream) {
  const char* const self = __func__;
  return guard([&] { executor_of(rt, self).restore(stream); });
}

autovm_status autovm_touch(autovm_runtime* rt, int64_t step, int32_t id) {
  const char* const self = __func__;
  return guard([&] {
    auto& e = executor_of(rt, self);
    check_tensor(e.plan(), id, self);
    e.touch(step, id);
  });
}

autovm_status autovm_runtime_stats(const autovm_runtime* rt, autovm_stats* out) {
  const char* const self = __func__;
  return guard([&] {
    auto& e = executor_of(rt, self);
    need(out, self, "out");
    *out = e.stats();
  });
}

autovm_status autovm_runtime_stats_reset(autovm_runtime* rt) {
  const char* const self = __func__;
  return guard([&] { executor_of(rt, self).reset_stats(); });
}

autovm_status autovm_step_stall_us(const autovm_runtime* rt, int64_t step, double* out) {
  const char* const self = __func__;
  return guard([&] {
    auto& e = executor_of(rt, self);
    need(out, self, "out");
    check_step(e.plan(), step, self);
    *out = e.step_stall_us(step);
  });
}

int autovm_cuda_built(void) {
#ifdef AUTOVM_WITH_CUDA
  return 1;
#else
  return 0;
#endif
}

}  // extern "C"
