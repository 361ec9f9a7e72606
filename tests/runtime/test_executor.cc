// The executor on the hand-written plans in plans/ (tests/inspect/meson.build draws their
// training step: x, w, a, b, conv/workspace, g over 5 steps). Residency is checked after every
// step_begin and step_end against tables worked out by hand from docs/execution-model.md, one
// letter per tensor in id order (x w a b ws g):
//   R resident  E evicting  H on host  P prefetching  D discarded  - outside its lifetime
#include <autovm/autovm.hpp>

#include <cstring>
#include <numeric>
#include <vector>

#include "helpers.h"

namespace {

using rt_test::letter;

std::string residency(autovm::Runtime& rt, int32_t tensors) {
  std::string out;
  for (int32_t t = 0; t < tensors; ++t) out += letter(rt.residency(t));
  return out;
}

autovm_runtime_options options(int strict = 0, int64_t budget = 0) {
  autovm_runtime_options o;
  REQUIRE(autovm_runtime_options_init(&o) == AUTOVM_OK);
  o.strict = strict;
  o.budget_bytes = budget;
  return o;
}

// Runs one training step, checking residency after each begin and end, and the resident bytes
// during each step.
void run_checked(autovm::Runtime& rt, const std::vector<std::string>& after_begin,
                 const std::vector<std::string>& after_end, const std::vector<int64_t>& resident) {
  for (int64_t s = 0; s < static_cast<int64_t>(after_begin.size()); ++s) {
    CAPTURE(s);
    rt.step_begin(s);
    CHECK(residency(rt, 6) == after_begin[static_cast<size_t>(s)]);
    CHECK(rt.stats().resident_bytes == resident[static_cast<size_t>(s)]);
    rt.step_end(s);
    CHECK(residency(rt, 6) == after_end[static_cast<size_t>(s)]);
  }
}

uint64_t checksum(const unsigned char* p, size_t n) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

bool all_poison(const unsigned char* p, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (p[i] != 0xA5) return false;
  return true;
}

void fill(unsigned char* p, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; ++i) p[i] = static_cast<unsigned char>((i * 131 + seed) & 0xFF);
}

}  // namespace

TEST_CASE("evict and prefetch: residency follows the execution model's table") {
  // evict a after step 1 (ready before 2): resident through 1, off from 2.
  // prefetch a after step 2 (ready before 3): resident from 3.
  autovm::Plan plan = autovm::Plan::load(rt_test::plan_path("evict.json"));
  autovm::Runtime rt(plan);
  CHECK(residency(rt, 6) == "-R----");  // before the first step: the persistent w only
  //                  x w a b ws g
  run_checked(rt, {"RRR---", "RRRRR-", "RRHR-R", "RRR--R", "-R---R"},
                  {"RRR---", "RRER--", "RRP--R", "-R---R", "-R----"},
                  {4096, 5632, 4096, 5120, 2048});
  autovm_stats s = rt.stats();
  CHECK(s.peak_resident_bytes == 5632);  // the budget, met exactly
  CHECK(s.bytes_to_host == 2048);
  CHECK(s.bytes_to_device == 2048);
  CHECK(s.evictions == 1);
  CHECK(s.prefetches == 1);
  CHECK(s.discards == 0);
  CHECK(s.violations == 0);
  CHECK(s.training_steps == 1);
  CHECK(s.resident_bytes == 1024);
  CHECK(s.accounting_only == 0);
  CHECK(s.host_us > 0);  // ten boundary calls, timed
  CHECK(s.host_wait_us == 0);  // the host backend never waits for a device
  CHECK(s.paging_us == 0);

  SUBCASE("a second training step starts again at 0 and repeats the first") {
    run_checked(rt, {"RRR---", "RRRRR-", "RRHR-R", "RRR--R", "-R---R"},
                    {"RRR---", "RRER--", "RRP--R", "-R---R", "-R----"},
                    {4096, 5632, 4096, 5120, 2048});
    CHECK(rt.stats().bytes_to_host == 4096);
    CHECK(rt.stats().training_steps == 2);
  }
  SUBCASE("a reset zeroes the host time") {
    rt.reset_stats();
    CHECK(rt.stats().host_us == 0);
  }
}

TEST_CASE("discard and recompute: residency follows the execution model's table") {
  // discard a after step 1: off from 2; recompute a (step 0 again) before step 3: resident from 3.
  autovm::Plan plan = autovm::Plan::load(rt_test::plan_path("recompute.json"));
  autovm::Runtime rt(plan);
  run_checked(rt, {"RRR---", "RRRRR-", "RRDR-R", "RRR--R", "-R---R"},
                  {"RRR---", "RRDR--", "RRD--R", "-R---R", "-R----"},
                  {4096, 5632, 4096, 5120, 2048});
  autovm_stats s = rt.stats();
  CHECK(s.discards == 1);
  CHECK(s.recomputes == 1);
  CHECK(s.bytes_to_host == 0);
  CHECK(s.bytes_to_device == 0);
  CHECK(s.violations == 0);
}

TEST_CASE("a chain temporary lies after the arena for its one step") {
  // chain.json: discard a after step 1; before step 3 recompute a (step 0) and b (step 1, after
  // b's lifetime [1, 2]: a temporary). The arena is 6144 bytes; b's room starts there. (The
  // plan's layout; test_residency_layout.cc packs this plan's temporaries into the arena.)
  autovm::Plan plan = autovm::Plan::load(rt_test::plan_path("chain.json"));
  autovm_runtime_options o;
  REQUIRE(autovm_runtime_options_init(&o) == AUTOVM_OK);
  o.layout = AUTOVM_LAYOUT_PLAN;
  autovm::Runtime rt(plan, &o);
  auto* base = static_cast<unsigned char*>(rt.pointer(1));  // w, at offset 0
  REQUIRE(base != nullptr);
  CHECK(rt.pointer(3) == base + 4096);  // b in its lifetime: its arena offset
  //                  x w a b ws g
  run_checked(rt, {"RRR---", "RRRRR-", "RRDR-R", "RRRR-R", "-R---R"},
                  {"RRR---", "RRDR--", "RRD--R", "-R---R", "-R----"},
                  {4096, 5632, 4096, 6144, 2048});
  SUBCASE("at step 3 b is resident after the arena, and the bytes there are real memory") {
    for (int64_t s = 0; s < 3; ++s) {
      rt.step_begin(s);
      rt.step_end(s);
    }
    rt.step_begin(3);
    CHECK(rt.residency(3) == AUTOVM_RESIDENCY_RESIDENT);
    auto* b = static_cast<unsigned char*>(rt.pointer(3));
    CHECK(b == base + 6144);
    std::memset(b, 7, 1024);  // ASan and the host arena's size would catch a short allocation
    rt.touch(3, 3);
    rt.step_end(3);
    CHECK(rt.residency(3) == AUTOVM_RESIDENCY_UNALLOCATED);
    CHECK(rt.pointer(3) == base + 4096);
    rt.step_begin(4);
    rt.step_end(4);
  }
  CHECK(rt.stats().violations == 0);
}

TEST_CASE("the budget holds in both moments of a step: before it, with its chain temporaries") {
  // chain.json: before step 3, x, w, a, g and the temporary b are resident (6144 bytes); step 3
  // itself (MulGrad, updating g in place) holds 5120. chain_moment.json: the same, but MulGrad
  // writes a new gradient g2 (1024 bytes), which is not there in the moment before the step:
  // 6144 before it, 6144 during it (x, w, a, g, g2), never the 7168 of all of them at once.
  for (const char* file : {"chain.json", "chain_moment.json"}) {
    CAPTURE(file);
    autovm::Plan plan = autovm::Plan::load(rt_test::plan_path(file));
    for (int64_t budget : {int64_t(6144), int64_t(6143)}) {
      CAPTURE(budget);
      autovm_runtime_options o = options(0, budget);
      autovm::Runtime rt(plan, &o);
      for (int64_t s = 0; s < 5; ++s) {
        rt.step_begin(s);
        rt.step_end(s);
      }
      CHECK(rt.stats().peak_resident_bytes == 6144);
      CHECK(rt.stats().violations == (budget == 6144 ? 0 : 1));
    }
  }
  SUBCASE("strict: the message names the step and the bytes of its larger moment") {
    autovm::Plan plan = autovm::Plan::load(rt_test::plan_path("chain_moment.json"));
    autovm_runtime_options o = options(1, 6143);
    autovm::Runtime rt(plan, &o);
    for (int64_t s = 0; s < 3; ++s) {
      rt.step_begin(s);
      rt.step_end(s);
    }
    CHECK(autovm_step_begin(rt.get(), 3, nullptr) == AUTOVM_ERR_OUT_OF_MEMORY);
    const std::string error = autovm_last_error();
    CHECK(error.find("step 3") != std::string::npos);
    CHECK(error.find("6144") != std::string::npos);
  }
}

TEST_CASE("a tensor bound to the trainer's own memory is moved there, not in the arena") {
  // evict.json: a is evicted after step 1 and prefetched back before step 3.
  autovm::Plan plan = autovm::Plan::load(rt_test::plan_path("evict.json"));
  autovm::Runtime rt(plan);
  const int32_t a = plan.tensor_id("a");
  auto* arena_a = static_cast<unsigned char*>(rt.pointer(a));
  std::vector<unsigned char> mine(2048);
  CHECK_THROWS_AS(rt.bind(a, mine.data(), 1000), autovm::RuntimeError);  // not a's size
  rt.bind(a, mine.data(), 2048);
  CHECK(rt.pointer(a) == mine.data());
  fill(arena_a, 2048, 5);
  const uint64_t arena_sum = checksum(arena_a, 2048);
  for (int64_t s = 0; s < 5; ++s) {
    rt.step_begin(s);
    if (s == 0) fill(mine.data(), 2048, 11);
    if (s == 2) {
      CHECK(all_poison(mine.data(), 2048));  // evicted: the bound range is poisoned
      CHECK_THROWS_AS(rt.bind(a, nullptr, 0), autovm::RuntimeError);  // evicted
    }
    if (s == 3) {
      std::vector<unsigned char> expect(2048);
      fill(expect.data(), 2048, 11);
      CHECK(checksum(mine.data(), 2048) == checksum(expect.data(), 2048));  // brought back
    }
    rt.step_end(s);
    if (s == 1) {  // between steps, but a is being evicted
      autovm_status st = autovm_tensor_bind(rt.get(), a, nullptr, 0);
      CHECK(st == AUTOVM_ERR_STATE);
      CHECK(std::string(autovm_last_error()).find("being evicted") != std::string::npos);
    }
  }
  CHECK(checksum(arena_a, 2048) == arena_sum);  // the arena range was never touched
  rt.bind(a, nullptr, 0);
  CHECK(rt.pointer(a) == arena_a);
}

TEST_CASE("a persistent tensor kept on the host between training steps") {
  // w: prefetch after step -1 (ready before 0), evict after step 4 (ready by the end).
  autovm::Plan plan = autovm::Plan::load(rt_test::plan_path("persistent.json"));
  autovm::Runtime rt(plan);
  const int32_t w = plan.tensor_id("w");
  auto* wp = static_cast<unsigned char*>(rt.pointer(w));
  REQUIRE(wp != nullptr);
  fill(wp, 1024, 7);  // the trainer initialises the parameter before the first step
  const uint64_t sum = checksum(wp, 1024);
  for (int training_step = 0; training_step < 3; ++training_step) {
    CAPTURE(training_step);
    run_checked(rt, {"RRR---", "RRRRR-", "RRHR-R", "RRR--R", "-R---R"},
                    {"RRR---", "RRER--", "RRP--R", "-R---R", "-H----"},
                    {4096, 5632, 4096, 5120, 2048});
    CHECK(all_poison(wp, 1024));  // off the GPU between training steps
    fill(wp, 1024, 99);           // a stray write while it is off does not survive
  }
  rt.step_begin(0);
  CHECK(checksum(wp, 1024) == sum);
  autovm_stats s = rt.stats();
  CHECK(s.initial_offload_bytes == 1024);         // once, at the first step
  CHECK(s.bytes_to_host == 3 * (2048 + 1024));    // the plan's evicts, per training step
  CHECK(s.bytes_to_device == 3 * (2048 + 1024) + 1024);
  CHECK(s.advises == 3);
}

TEST_CASE("data written before an eviction reads back intact after the prefetch") {
  autovm::Plan plan = autovm::Plan::load(rt_test::plan_path("evict.json"));
  autovm::Runtime rt(plan);
  const int32_t a = plan.tensor_id("a");
  auto* ap = static_cast<unsigned char*>(rt.pointer(a));
  REQUIRE(ap != nullptr);
  for (unsigned training_step = 0; training_step < 2; ++training_step) {
    rt.step_begin(0);
    fill(ap, 2048, training_step);  // step 0 writes a
    const uint64_t sum = checksum(ap, 2048);
    rt.step_end(0);
    rt.step_begin(1);
    rt.step_end(1);  // evict issued
    rt.step_begin(2);
    CHECK(all_poison(ap, 2048));  // off the GPU: its pages are gone
    rt.step_end(2);  // prefetch issued
    rt.step_begin(3);
    CHECK(checksum(ap, 2048) == sum);
    rt.step_end(3);
    rt.step_begin(4);
    rt.step_end(4);
  }
}

TEST_CASE("a discarded tensor's bytes are poisoned") {
  autovm::Plan plan = autovm::Plan::load(rt_test::plan_path("recompute.json"));
  autovm::Runtime rt(plan);
  auto* ap = static_cast<unsigned char*>(rt.pointer(plan.tensor_id("a")));
  REQUIRE(ap != nullptr);
  rt.step_begin(0);
  std::memset(ap, 0x11, 2048);
  rt.step_end(0);
  rt.step_begin(1);
  rt.step_end(1);  // discard
  CHECK(all_poison(ap, 2048));
  rt.step_begin(2);
  rt.step_end(2);
  rt.step_begin(3);  // recompute: resident again; the trainer regenerates the bytes
  CHECK(rt.residency(plan.tensor_id("a")) == AUTOVM_RESIDENCY_RESIDENT);
  CHECK(all_poison(ap, 2048));
}

TEST_CASE("touching a non-resident tensor") {
  autovm::Plan plan = autovm::Plan::load(rt_test::plan_path("evict.json"));
  const int32_t a = plan.tensor_id("a");

  SUBCASE("strict: AUTOVM_ERR_NOT_RESIDENT naming the tensor and the step") {
    autovm_runtime_options o = options(1);
    autovm::Runtime rt(plan, &o);
    for (int64_t s = 0; s < 2; ++s) {
      rt.step_begin(s);
      rt.touch(s, a);  // resident
      rt.step_end(s);
    }
    rt.step_begin(2);
    CHECK(autovm_touch(rt.get(), 2, a) == AUTOVM_ERR_NOT_RESIDENT);
    const std::string error = autovm_last_error();
    CAPTURE(error);
    CHECK(error.find("'a'") != std::string::npos);
    CHECK(error.find("step 2") != std::string::npos);
    CHECK(error.find("on the host") != std::string::npos);
    CHECK_THROWS_AS(rt.touch(2, a), autovm::RuntimeError);
    CHECK(rt.stats().violations == 2);
    rt.step_end(2);
    rt.step_begin(3);  // b's lifetime is [1, 2]
    rt.touch(3, a);
    CHECK(autovm_touch(rt.get(), 3, plan.tensor_id("b")) == AUTOVM_ERR_NOT_RESIDENT);
    CHECK(std::string(autovm_last_error()).find("outside its lifetime") != std::string::npos);
  }
  SUBCASE("not strict: counted, AUTOVM_OK") {
    autovm::Runtime rt(plan);
    for (int64_t s = 0; s < 2; ++s) {
      rt.step_begin(s);
      rt.step_end(s);
    }
    rt.step_begin(2);
    CHECK(autovm_touch(rt.get(), 2, a) == AUTOVM_OK);
    CHECK(rt.stats().violations == 1);
  }
  SUBCASE("a use while a copy is in flight (rule 3) is a violation") {
    nlohmann::json j = rt_test::plan_json("evict.json");
    j["actions"][0]["after_step"] = 0;  // the evict runs from after step 0 to before step 2
    autovm::Plan early = autovm::Plan::from_memory(j.dump());
    autovm_runtime_options o = options(1);
    autovm::Runtime rt(early, &o);
    rt.step_begin(0);
    rt.step_end(0);
    rt.step_begin(1);
    CHECK(rt.residency(a) == AUTOVM_RESIDENCY_EVICTING);
    CHECK(autovm_touch(rt.get(), 1, a) == AUTOVM_ERR_NOT_RESIDENT);
    CHECK(std::string(autovm_last_error()).find("being evicted") != std::string::npos);
    rt.step_end(1);
    // between steps no step is running: touching is out of order
    CHECK(autovm_touch(rt.get(), 1, a) == AUTOVM_ERR_STATE);
  }
}

TEST_CASE("a step over the budget") {
  autovm::Plan plan = autovm::Plan::load(rt_test::plan_path("evict.json"));
  SUBCASE("strict: AUTOVM_ERR_OUT_OF_MEMORY at the step, which has begun") {
    autovm_runtime_options o = options(1, 5000);
    autovm::Runtime rt(plan, &o);
    rt.step_begin(0);
    rt.step_end(0);
    CHECK(autovm_step_begin(rt.get(), 1, nullptr) == AUTOVM_ERR_OUT_OF_MEMORY);
    const std::string error = autovm_last_error();
    CHECK(error.find("step 1") != std::string::npos);
    CHECK(error.find("5632") != std::string::npos);
    CHECK(error.find("5000") != std::string::npos);
    CHECK(autovm_step_end(rt.get(), 1, nullptr) == AUTOVM_OK);
    CHECK(rt.stats().violations == 1);
  }
  SUBCASE("not strict: counted") {
    autovm_runtime_options o = options(0, 5000);
    autovm::Runtime rt(plan, &o);
    for (int64_t s = 0; s < 5; ++s) {
      rt.step_begin(s);
      rt.step_end(s);
    }
    CHECK(rt.stats().violations == 2);  // steps 1 (5632 bytes) and 3 (5120)
  }
}

TEST_CASE("steps out of order are AUTOVM_ERR_STATE with a message") {
  autovm::Plan plan = autovm::Plan::load(rt_test::plan_path("evict.json"));
  autovm::Runtime rt(plan);
  autovm_runtime* r = rt.get();
  CHECK(autovm_step_begin(r, 1, nullptr) == AUTOVM_ERR_STATE);
  CHECK(std::string(autovm_last_error()).find("the next step is 0") != std::string::npos);
  CHECK(autovm_step_end(r, 0, nullptr) == AUTOVM_ERR_STATE);
  CHECK(std::string(autovm_last_error()).find("no step is running") != std::string::npos);
  CHECK(autovm_step_begin(r, 0, nullptr) == AUTOVM_OK);
  CHECK(autovm_step_begin(r, 0, nullptr) == AUTOVM_ERR_STATE);
  CHECK(std::string(autovm_last_error()).find("step 0 is running") != std::string::npos);
  CHECK(autovm_step_begin(r, 1, nullptr) == AUTOVM_ERR_STATE);
  CHECK(autovm_step_end(r, 1, nullptr) == AUTOVM_ERR_STATE);
  CHECK(autovm_touch(r, 1, 0) == AUTOVM_ERR_STATE);
  CHECK(autovm_step_end(r, 0, nullptr) == AUTOVM_OK);
  CHECK(autovm_step_begin(r, 2, nullptr) == AUTOVM_ERR_STATE);
  CHECK(autovm_step_begin(r, 5, nullptr) == AUTOVM_ERR_INVALID_ARGUMENT);  // no step 5
  CHECK(autovm_step_begin(r, -1, nullptr) == AUTOVM_ERR_INVALID_ARGUMENT);
  for (int64_t s = 1; s < 5; ++s) {
    REQUIRE(autovm_step_begin(r, s, nullptr) == AUTOVM_OK);
    REQUIRE(autovm_step_end(r, s, nullptr) == AUTOVM_OK);
  }
  CHECK(autovm_step_begin(r, 5, nullptr) == AUTOVM_ERR_INVALID_ARGUMENT);
  CHECK(autovm_step_begin(r, 0, nullptr) == AUTOVM_OK);  // the next training step
  CHECK(rt.stats().training_steps == 1);
}

TEST_CASE("accounting-only mode: no memory, residency still checked") {
  autovm::Plan plan = autovm::Plan::load(rt_test::plan_path("evict.json"));
  autovm_runtime_options o = options(1);
  o.host_arena_cap_bytes = 4096;  // the arena is 6144 bytes
  autovm::Runtime rt(plan, &o);
  CHECK(rt.pointer(0) == nullptr);
  CHECK(rt.stats().accounting_only == 1);
  run_checked(rt, {"RRR---", "RRRRR-", "RRHR-R", "RRR--R", "-R---R"},
                  {"RRR---", "RRER--", "RRP--R", "-R---R", "-R----"},
                  {4096, 5632, 4096, 5120, 2048});
  CHECK(rt.stats().bytes_to_host == 2048);
}

TEST_CASE("the C API never throws: NULL and out-of-range arguments") {
  CHECK(autovm_version() == AUTOVM_API_VERSION);
  autovm_plan* plan = nullptr;
  autovm_runtime* rt = nullptr;
  int32_t i32 = 0;
  int64_t i64 = 0;
  void* ptr = nullptr;
  autovm_tensor_info ti;
  autovm_step_info si;
  autovm_action_info ai;
  autovm_stats st;
  autovm_residency res;
  autovm_runtime_options opt;
  CHECK(autovm_plan_load(nullptr, &plan) == AUTOVM_ERR_INVALID_ARGUMENT);
  CHECK(std::string(autovm_last_error()).find("path is NULL") != std::string::npos);
  CHECK(autovm_plan_load("x", nullptr) == AUTOVM_ERR_INVALID_ARGUMENT);
  CHECK(autovm_plan_load_from_memory(nullptr, 10, &plan) == AUTOVM_ERR_INVALID_ARGUMENT);
  CHECK(autovm_plan_load_from_memory(nullptr, 0, &plan) == AUTOVM_ERR_PLAN);
  CHECK(autovm_plan_load_from_memory("{}", 2, nullptr) == AUTOVM_ERR_INVALID_ARGUMENT);
  CHECK(autovm_plan_tensor_count(nullptr, &i32) == AUTOVM_ERR_INVALID_ARGUMENT);
  CHECK(autovm_plan_step_count(nullptr, &i64) == AUTOVM_ERR_INVALID_ARGUMENT);
  CHECK(autovm_plan_action_count(nullptr, &i64) == AUTOVM_ERR_INVALID_ARGUMENT);
  CHECK(autovm_plan_arena_bytes(nullptr, &i64) == AUTOVM_ERR_INVALID_ARGUMENT);
  CHECK(autovm_plan_budget_bytes(nullptr, &i64) == AUTOVM_ERR_INVALID_ARGUMENT);
  CHECK(autovm_plan_tensor_by_name(nullptr, "a", &i32) == AUTOVM_ERR_INVALID_ARGUMENT);
  CHECK(autovm_plan_tensor_info(nullptr, 0, &ti) == AUTOVM_ERR_INVALID_ARGUMENT);
  CHECK(autovm_plan_step_info(nullptr, 0, &si) == AUTOVM_ERR_INVALID_ARGUMENT);
  CHECK(autovm_plan_action_info(nullptr, 0, &ai) == AUTOVM_ERR_INVALID_ARGUMENT);
  CHECK(autovm_runtime_options_init(nullptr) == AUTOVM_ERR_INVALID_ARGUMENT);
  CHECK(autovm_runtime_create(nullptr, nullptr, &rt) == AUTOVM_ERR_INVALID_ARGUMENT);
  CHECK(autovm_step_begin(nullptr, 0, nullptr) == AUTOVM_ERR_INVALID_ARGUMENT);
  CHECK(autovm_step_end(nullptr, 0, nullptr) == AUTOVM_ERR_INVALID_ARGUMENT);
  CHECK(autovm_tensor_pointer(nullptr, 0, &ptr) == AUTOVM_ERR_INVALID_ARGUMENT);
  CHECK(autovm_tensor_residency(nullptr, 0, &res) == AUTOVM_ERR_INVALID_ARGUMENT);
  CHECK(autovm_touch(nullptr, 0, 0) == AUTOVM_ERR_INVALID_ARGUMENT);
  CHECK(autovm_runtime_stats(nullptr, &st) == AUTOVM_ERR_INVALID_ARGUMENT);
  autovm_plan_free(nullptr);
  autovm_runtime_free(nullptr);

  REQUIRE(autovm_plan_load(rt_test::plan_path("evict.json").c_str(), &plan) == AUTOVM_OK);
  CHECK(autovm_plan_tensor_count(plan, nullptr) == AUTOVM_ERR_INVALID_ARGUMENT);
  CHECK(autovm_plan_tensor_by_name(plan, nullptr, &i32) == AUTOVM_ERR_INVALID_ARGUMENT);
  CHECK(autovm_plan_tensor_by_name(plan, "a", nullptr) == AUTOVM_ERR_INVALID_ARGUMENT);
  CHECK(autovm_plan_tensor_by_name(plan, "zz", &i32) == AUTOVM_ERR_INVALID_ARGUMENT);
  CHECK(std::string(autovm_last_error()).find("'zz'") != std::string::npos);
  CHECK(autovm_plan_tensor_info(plan, 6, &ti) == AUTOVM_ERR_INVALID_ARGUMENT);
  CHECK(autovm_plan_tensor_info(plan, -1, &ti) == AUTOVM_ERR_INVALID_ARGUMENT);
  CHECK(autovm_plan_step_info(plan, 5, &si) == AUTOVM_ERR_INVALID_ARGUMENT);
  CHECK(autovm_plan_action_info(plan, 2, &ai) == AUTOVM_ERR_INVALID_ARGUMENT);
  CHECK(autovm_runtime_create(plan, nullptr, nullptr) == AUTOVM_ERR_INVALID_ARGUMENT);
  REQUIRE(autovm_runtime_options_init(&opt) == AUTOVM_OK);
  if (!autovm_cuda_built()) {
    opt.backend = AUTOVM_BACKEND_CUDA;
    CHECK(autovm_runtime_create(plan, &opt, &rt) == AUTOVM_ERR_BACKEND);
    CHECK(std::string(autovm_last_error()).find("AUTOVM_BACKEND_HOST") != std::string::npos);
  }
  opt.backend = static_cast<autovm_backend>(3);  // no such backend
  CHECK(autovm_runtime_create(plan, &opt, &rt) == AUTOVM_ERR_INVALID_ARGUMENT);
  opt.backend = AUTOVM_BACKEND_HOST;
  opt.mode = AUTOVM_MODE_DEMAND_PAGING;  // pages fault back only on a device
  CHECK(autovm_runtime_create(plan, &opt, &rt) == AUTOVM_ERR_INVALID_ARGUMENT);
  CHECK(std::string(autovm_last_error()).find("CUDA backend") != std::string::npos);
  opt.mode = static_cast<autovm_mode>(9);  // no such mode
  CHECK(autovm_runtime_create(plan, &opt, &rt) == AUTOVM_ERR_INVALID_ARGUMENT);
  opt.mode = AUTOVM_MODE_PLAN;
  opt.budget_bytes = -1;
  CHECK(autovm_runtime_create(plan, &opt, &rt) == AUTOVM_ERR_INVALID_ARGUMENT);
  CHECK(rt == nullptr);

  REQUIRE(autovm_runtime_create(plan, nullptr, &rt) == AUTOVM_OK);
  autovm_plan_free(plan);  // the runtime keeps what it needs
  CHECK(autovm_tensor_pointer(rt, 0, nullptr) == AUTOVM_ERR_INVALID_ARGUMENT);
  CHECK(autovm_tensor_pointer(rt, 99, &ptr) == AUTOVM_ERR_INVALID_ARGUMENT);
  CHECK(autovm_tensor_residency(rt, 0, nullptr) == AUTOVM_ERR_INVALID_ARGUMENT);
  CHECK(autovm_touch(rt, 0, 99) == AUTOVM_ERR_INVALID_ARGUMENT);
  CHECK(autovm_runtime_stats(rt, nullptr) == AUTOVM_ERR_INVALID_ARGUMENT);
  CHECK(autovm_step_begin(rt, 0, nullptr) == AUTOVM_OK);
  CHECK(autovm_touch(rt, 0, 0) == AUTOVM_OK);
  autovm_runtime_free(rt);
}
