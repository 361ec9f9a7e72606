// The arena packed by residency (runtime/src/residency_layout.h) on plans/packed.json, worked by
// hand: two 4 KiB tensors, an activation A off the device at step 2 and a parameter B the plan
// keeps on the host except at step 2, share one range. Steps (inputs -> outputs):
//   0: x -> A    1: A -> y    2: B, y -> c    3: A, c -> z
// Actions: evict A after 1 (ready before 2), prefetch B after 1 (before 2), prefetch A after 2
// (before 3), evict B after 2 (before 3). On the device (inclusive): x [0,0]; A [0,1], [3,3];
// y [1,2]; B [-1,-1] (before the training step), [2,2]; c [2,3]; z [3,3]. The plan's layout
// (by lifetime) needs 10 KiB.
#include <autovm/autovm.hpp>

#include "data_check.h"
#include "helpers.h"
#include "executor.h"
#include "residency_layout.h"

using autovm::rt::StepRange;

namespace {

autovm::rt::Plan packed_plan() {
  return autovm::rt::load_plan(rt_test::read_text(rt_test::plan_path("packed.json")), "packed.json");
}

}  // namespace

TEST_CASE("occupancy follows the executor's resident set, by hand") {
  const auto on = autovm::rt::occupancy(packed_plan());
  REQUIRE(on.size() == 6);
  CHECK(on[0] == std::vector<StepRange>{{0, 0}});
  CHECK(on[1] == std::vector<StepRange>{{0, 1}, {3, 3}});
  CHECK(on[2] == std::vector<StepRange>{{1, 2}});
  CHECK(on[3] == std::vector<StepRange>{{-1, -1}, {2, 2}});
  CHECK(on[4] == std::vector<StepRange>{{2, 3}});
  CHECK(on[5] == std::vector<StepRange>{{3, 3}});
}

TEST_CASE("packing: A and B share a range, the arena needs 6 KiB, prefetches wait for the "
          "eviction they follow") {
  const auto plan = packed_plan();
  const auto layout = autovm::rt::pack_by_residency(plan);
  // Largest first, ties by id: A at 0; B at 0 (no step in common with A); x after A; y beside
  // x's range (no step in common with x); c above y; z where x and y were.
  CHECK(layout.offset == std::vector<int64_t>{4096, 0, 4096, 0, 5120, 4096});
  CHECK(layout.arena_bytes == 6144);
  // The most on the device at one step (2: y, B, c; 3: A, c, z): this packing has no holes.
  CHECK(layout.peak_bytes == 6144);
  REQUIRE(layout.prefetch_waits.size() == 4);
  CHECK(layout.prefetch_waits[0].empty());                           // evict A
  CHECK(layout.prefetch_waits[1] == std::vector<int32_t>{1});        // B follows A out
  CHECK(layout.prefetch_waits[2] == std::vector<int32_t>{3});        // A follows B out
  CHECK(layout.prefetch_waits[3].empty());
}

TEST_CASE("the planner's layout needs no waits") {
  const auto plan = packed_plan();
  std::vector<int64_t> offsets;
  for (const auto& t : plan.tensors) offsets.push_back(t.offset);
  // A layout that cannot beat the plan's keeps it: a plan with no actions.
  auto resident = plan;
  resident.actions.clear();
  for (auto& t : resident.tensors) t.starts_on_host = false;
  const auto kept = autovm::rt::pack_by_residency(resident);
  CHECK(kept.arena_bytes == plan.arena_bytes);
  CHECK(kept.offset == offsets);
  for (const auto& w : kept.prefetch_waits) CHECK(w.empty());
}

TEST_CASE("a runtime on the packed arena keeps every tensor's bytes over two training steps") {
  autovm::Plan plan = autovm::Plan::load(rt_test::plan_path("packed.json"));
  for (autovm_layout layout : {AUTOVM_LAYOUT_AUTO, AUTOVM_LAYOUT_PACKED, AUTOVM_LAYOUT_PLAN}) {
    CAPTURE(layout);
    autovm_runtime_options o;
    REQUIRE(autovm_runtime_options_init(&o) == AUTOVM_OK);
    o.strict = 1;
    o.layout = layout;
    autovm::Runtime rt(plan, &o);
    CHECK(rt.stats().memory_bytes == (layout == AUTOVM_LAYOUT_PLAN ? 10240 : 6144));
    rt_test::DataCheck data(plan, rt);
    for (int step = 0; step < 2; ++step) CHECK(data.run_training_step() > 0);
    CHECK(rt.stats().violations == 0);
  }
}

TEST_CASE("a packed arena where the backend cannot keep evicted bytes is refused") {
  autovm::Plan plan = autovm::Plan::load(rt_test::plan_path("packed.json"));
  autovm_runtime_options o;
  REQUIRE(autovm_runtime_options_init(&o) == AUTOVM_OK);
  o.layout = AUTOVM_LAYOUT_PACKED;
  o.mode = AUTOVM_MODE_RESIDENT;
  autovm_runtime* rt = nullptr;
  CHECK(autovm_runtime_create(plan.get(), &o, &rt) == AUTOVM_ERR_INVALID_ARGUMENT);
  CHECK(std::string(autovm_last_error()).find("packed arena") != std::string::npos);
  o.mode = AUTOVM_MODE_PLAN;
  o.layout = static_cast<autovm_layout>(7);
  CHECK(autovm_runtime_create(plan.get(), &o, &rt) == AUTOVM_ERR_INVALID_ARGUMENT);
  CHECK(std::string(autovm_last_error()).find("unknown layout 7") != std::string::npos);
}

TEST_CASE("a chain temporary is packed into the arena over its one step") {
  // chain.json (test_executor.cc): b, lifetime [1, 2], is recomputed before step 3 as a
  // temporary. Packed, it lies inside the arena, apart from everything on the device at step 3.
  autovm::Plan plan = autovm::Plan::load(rt_test::plan_path("chain.json"));
  autovm_runtime_options o;
  REQUIRE(autovm_runtime_options_init(&o) == AUTOVM_OK);
  o.strict = 1;
  o.layout = AUTOVM_LAYOUT_PACKED;
  autovm::Runtime rt(plan, &o);
  CHECK(rt.stats().memory_bytes < plan.arena_bytes() + 1024);  // no room after the arena
  rt_test::DataCheck data(plan, rt);  // checks that b's range is disjoint at step 3
  for (int step = 0; step < 2; ++step) CHECK(data.run_training_step() > 0);
  CHECK(rt.stats().violations == 0);
}

TEST_CASE("a chain temporary shares bytes with what its step allocates as it starts") {
  // chain_moment.json (test_executor.cc): the temporary b is there in the moment before step 3
  // only, g2 (1024 bytes, written by step 3) at step 3 only: they may share a range, so the
  // packed arena needs the peak of either moment, 6144 bytes, not the 7168 of both at once.
  autovm::Plan plan = autovm::Plan::load(rt_test::plan_path("chain_moment.json"));
  autovm_runtime_options o;
  REQUIRE(autovm_runtime_options_init(&o) == AUTOVM_OK);
  o.strict = 1;
  o.budget_bytes = 6144;
  o.layout = AUTOVM_LAYOUT_PACKED;
  autovm::Runtime rt(plan, &o);
  CHECK(rt.stats().memory_bytes == 6144);
  rt_test::DataCheck data(plan, rt);  // each moment's ranges disjoint, every read intact
  for (int step = 0; step < 2; ++step) CHECK(data.run_training_step() > 0);
  CHECK(rt.stats().violations == 0);
}

namespace {

// Records the order of the backend's copies; no memory.
class Recorder final : public autovm::rt::Backend {
 public:
  explicit Recorder(std::vector<std::string>& log) : log_(log) {}
  void* at(int64_t) override { return nullptr; }
  bool has_memory() const override { return false; }
  void evict_issue(const autovm::rt::Tensor& t, void*) override { log_.push_back("evict " + t.name); }
  void evict_complete(const autovm::rt::Tensor&, void*) override {}
  void prefetch_issue(const autovm::rt::Tensor& t, const autovm::rt::Action& a, void*) override {
    std::string line = "prefetch " + t.name + " after";
    for (int32_t w : a.wait_evicted) line += " " + std::to_string(w);
    log_.push_back(line);
  }
  void prefetch_complete(const autovm::rt::Tensor&, void*) override {}
  void discard(const autovm::rt::Tensor& t, void*) override { log_.push_back("discard " + t.name); }

 private:
  std::vector<std::string>& log_;
};

}  // namespace

TEST_CASE("an eviction a prefetch waits for is issued before it, whatever the plan's order") {
  // packed.json lists "prefetch A after 2" before "evict B after 2"; packed, A's copy must wait
  // for B's, so B's eviction goes first (its event must exist when A's copy is queued).
  const auto plan = packed_plan();
  auto packed = std::make_shared<const autovm::rt::Plan>(
      autovm::rt::with_layout(plan, autovm::rt::pack_by_residency(plan)));
  std::vector<std::string> log;
  autovm::rt::Executor executor(packed, std::make_unique<Recorder>(log), plan.budget_bytes, true);
  for (int64_t s = 0; s < 4; ++s) {
    executor.step_begin(s, nullptr);
    executor.step_end(s, nullptr);
  }
  // Before step 0, B (kept on the host) is moved there.
  CHECK(log == std::vector<std::string>{"evict B", "evict A", "prefetch B after 1", "evict B",
                                        "prefetch A after 3"});
}
