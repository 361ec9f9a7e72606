// The executor with the trainer's memory (AUTOVM_MEMORY_TRAINER) on the host backend and the
// hand-written plans in plans/: no arena; the plan's actions reach the backend only for ranges
// the trainer bound (the host backend leaves their bytes as they are, as migration does), the
// others are skipped and counted, and bindings of non-persistent tensors end with their
// lifetime. Residency letters as in test_executor.cc (x w a b ws g).
#include <autovm/autovm.hpp>

#include <cstring>
#include <string>
#include <vector>

#include "helpers.h"

namespace {

using rt_test::letter;

std::string residency(autovm::Runtime& rt) {
  std::string out;
  for (int32_t t = 0; t < 6; ++t) out += letter(rt.residency(t));
  return out;
}

autovm_runtime_options trainer_options() {
  autovm_runtime_options o;
  REQUIRE(autovm_runtime_options_init(&o) == AUTOVM_OK);
  o.memory = AUTOVM_MEMORY_TRAINER;
  return o;
}

void fill(std::vector<unsigned char>& v, unsigned seed) {
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<unsigned char>((i * 131 + seed) & 0xFF);
}

std::vector<unsigned char> filled(size_t n, unsigned seed) {
  std::vector<unsigned char> v(n);
  fill(v, seed);
  return v;
}

}  // namespace

TEST_CASE("trainer memory: no arena, and a tensor bound during its first step is moved") {
  // evict.json: a (2048 B, steps 0-3) evicted after step 1, prefetched after step 2.
  autovm::Plan plan = autovm::Plan::load(rt_test::plan_path("evict.json"));
  autovm_runtime_options o = trainer_options();
  autovm::Runtime rt(plan, &o);
  const int32_t a = plan.tensor_id("a");
  for (int32_t t = 0; t < 6; ++t) CHECK(rt.pointer(t) == nullptr);  // nothing is bound
  CHECK(rt.stats().memory_bytes == 0);
  std::vector<unsigned char> mine(2048);
  rt.step_begin(0);
  rt.bind(a, mine.data(), 2048);  // the step that makes a is running
  fill(mine, 3);
  rt.step_end(0);
  rt.step_begin(1);
  rt.step_end(1);
  rt.step_begin(2);
  CHECK(residency(rt) == "RRHR-R");
  CHECK(rt.stats().resident_bytes == 4096);  // a's move was made: off the count
  rt.step_end(2);
  rt.step_begin(3);
  CHECK(mine == filled(2048, 3));  // the host backend never writes the trainer's bytes
  rt.step_end(3);
  rt.step_begin(4);
  rt.step_end(4);
  autovm_stats s = rt.stats();
  CHECK(s.evictions == 1);
  CHECK(s.prefetches == 1);
  CHECK(s.unbound_actions == 0);
  CHECK(s.peak_resident_bytes == 5632);
  CHECK(rt.pointer(a) == nullptr);  // its lifetime ended: the binding with it
}

TEST_CASE("trainer memory: actions on a tensor not bound are skipped, its bytes counted") {
  autovm::Plan plan = autovm::Plan::load(rt_test::plan_path("evict.json"));
  autovm_runtime_options o = trainer_options();
  autovm::Runtime rt(plan, &o);
  const int32_t a = plan.tensor_id("a");
  std::vector<int64_t> resident;
  std::vector<unsigned char> late(2048);
  for (int64_t s = 0; s < 5; ++s) {
    rt.step_begin(s);
    resident.push_back(rt.stats().resident_bytes);
    if (s == 2) {
      CHECK(residency(rt) == "RRHR-R");  // the plan's count: a is off
      rt.bind(a, late.data(), 2048);     // allowed: its bytes never moved
      fill(late, 9);
    }
    rt.step_end(s);
  }
  // a stays counted through steps 2 (evicted by the plan) and 3: 2048 bytes more at step 2.
  CHECK(resident == std::vector<int64_t>{4096, 5632, 6144, 5120, 2048});
  CHECK(late == filled(2048, 9));  // the prefetch after the skipped evict was skipped too
  autovm_stats s = rt.stats();
  CHECK(s.unbound_actions == 2);   // the evict and the prefetch
  CHECK(s.unbound_bytes == 4096);
  CHECK(s.peak_resident_bytes == 6144);
  CHECK(s.violations == 1);        // step 2 over the budget of 5632
  CHECK(s.evictions == 1);         // the plan's counts are the plan's
  CHECK(s.bytes_to_host == 2048);
}

TEST_CASE("trainer memory: rebound each training step, only the new range moves") {
  autovm::Plan plan = autovm::Plan::load(rt_test::plan_path("evict.json"));
  autovm_runtime_options o = trainer_options();
  autovm::Runtime rt(plan, &o);
  const int32_t a = plan.tensor_id("a");
  std::vector<unsigned char> first(2048), second(2048);
  for (int training_step = 0; training_step < 2; ++training_step) {
    CAPTURE(training_step);
    std::vector<unsigned char>& mine = training_step == 0 ? first : second;
    rt.bind(a, mine.data(), 2048);  // before its lifetime starts
    fill(mine, 20 + training_step);
    for (int64_t s = 0; s < 5; ++s) {
      rt.step_begin(s);
      if (s == 2) CHECK(rt.pointer(a) == mine.data());
      rt.step_end(s);
    }
    CHECK(rt.pointer(a) == nullptr);
  }
  CHECK(rt.stats().unbound_actions == 0);
  CHECK(rt.stats().evictions == 2);
  // Not bound again: the binding ended with a's lifetime, so its moves are skipped.
  for (int64_t s = 0; s < 5; ++s) {
    rt.step_begin(s);
    rt.step_end(s);
  }
  CHECK(rt.stats().unbound_actions == 2);
}

TEST_CASE("trainer memory: a persistent tensor stays bound across training steps") {
  // persistent.json: w (1024 B) starts on the host (offloaded at the first step_begin(0)),
  // prefetched after step -1, evicted after step 4.
  autovm::Plan plan = autovm::Plan::load(rt_test::plan_path("persistent.json"));
  autovm_runtime_options o = trainer_options();
  autovm::Runtime rt(plan, &o);
  const int32_t w = plan.tensor_id("w");
  std::vector<unsigned char> wm(1024);
  auto run = [&](int64_t bind_at) {
    for (int64_t s = 0; s < 5; ++s) {
      rt.step_begin(s);
      if (s == bind_at) {
        rt.bind(w, wm.data(), 1024);
        fill(wm, 5);
      }
      rt.step_end(s);
    }
  };
  run(2);  // bound late, as optimizer state appears: the offload and the prefetch were skipped
  // (and a, never bound here: its evict and prefetch)
  CHECK(rt.stats().unbound_actions == 4);
  CHECK(rt.stats().unbound_bytes == 1024 + 1024 + 2048 + 2048);
  CHECK(rt.residency(w) == AUTOVM_RESIDENCY_ON_HOST);  // the evict after step 4 was made
  CHECK(rt.stats().resident_bytes == 0);
  rt.step_begin(0);  // prefetched back before step 0
  CHECK(wm == filled(1024, 5));
  CHECK(rt.pointer(w) == wm.data());
  CHECK(rt.stats().unbound_actions == 4);  // w's prefetch was made
}

TEST_CASE("trainer memory: binding a tensor the runtime moved off is refused") {
  autovm::Plan plan = autovm::Plan::load(rt_test::plan_path("evict.json"));
  autovm_runtime_options o = trainer_options();
  autovm::Runtime rt(plan, &o);
  const int32_t a = plan.tensor_id("a");
  std::vector<unsigned char> mine(2048), other(2048);
  rt.bind(a, mine.data(), 2048);
  for (int64_t s = 0; s < 2; ++s) {
    rt.step_begin(s);
    rt.step_end(s);
  }
  rt.step_begin(2);
  CHECK(autovm_tensor_bind(rt.get(), a, other.data(), 2048) == AUTOVM_ERR_STATE);
  const std::string error = autovm_last_error();
  CHECK(error.find("autovm_tensor_bind") != std::string::npos);
  CHECK(error.find("'a'") != std::string::npos);
  CHECK(error.find("on the host") != std::string::npos);
}

TEST_CASE("trainer memory: options it cannot run with are refused with a message") {
  autovm::Plan plan = autovm::Plan::load(rt_test::plan_path("evict.json"));
  autovm_runtime* rt = nullptr;
  SUBCASE("a packed layout needs the runtime's arena") {
    autovm_runtime_options o = trainer_options();
    o.layout = AUTOVM_LAYOUT_PACKED;
    CHECK(autovm_runtime_create(plan.get(), &o, &rt) == AUTOVM_ERR_INVALID_ARGUMENT);
    const std::string error = autovm_last_error();
    CHECK(error.find("autovm_runtime_create") != std::string::npos);
    CHECK(error.find("PACKED") != std::string::npos);
  }
  SUBCASE("an unknown memory") {
    autovm_runtime_options o = trainer_options();
    const int seven = 7;
    std::memcpy(&o.memory, &seven, sizeof seven);
    CHECK(autovm_runtime_create(plan.get(), &o, &rt) == AUTOVM_ERR_INVALID_ARGUMENT);
    CHECK(std::string(autovm_last_error()).find("unknown memory 7") != std::string::npos);
  }
  CHECK(rt == nullptr);
}
