// postpone_for_evictions (plan/passes/postpone_for_evictions.h) on an eleven-step graph whose
// plan before and after is worked out by hand.
#include <doctest/doctest.h>

#include "analysis/lifetimes.h"
#include "plan/baselines.h"
#include "plan/simulator.h"
#include "plan/passes/postpone_for_evictions.h"
#include "plan/residency.h"
#include "swap_test_util.h"
#include "verify_plan.h"

using namespace autovm;
using autovm::test::duplex_link;
using autovm::test::transfer;
using autovm::test::verifier_accepts;

namespace {

// The eleven-step graph; run() applies the pass to `actions` with the budget of 100 B and at
// most 20 simulations.
struct Case : test::ElevenSteps {
  double run(std::vector<Action>& actions) const {
    return postpone_for_evictions(g, life, c, duplex_link(), DeviceProfile{}, 100, actions, 20);
  }
};

}  // namespace

TEST_CASE("postpone_for_evictions: a prefetch issued early gives up the room an eviction needs") {
  // 100 us a step. As given: y goes out after step 1 (20-80 us, due before step 5 at 500 us)
  // and comes back early, after step 5 (600-660 us, resident from step 6); so x, made at step
  // 5, must be off from step 6: its eviction runs 600-660 us and step 6 waits 60 us for it.
  // x comes back after step 8 (900+60 -> 960-1020 us), before step 10 (1060 us). 1160 us.
  // Postponed: y's prefetch issued after step 6 instead (resident from 7, in 760 us, well
  // before step 8 at 800), x may stay at step 6 (60 B of 100), not at 7 (y is back): its
  // eviction is due before step 7, runs 600-660 during step 6: no stall, 1100 us.
  const Case k;
  std::vector<Action> actions = {
      transfer(ActionKind::evict, 0, 1, 5), transfer(ActionKind::prefetch, 0, 5, 8),
      transfer(ActionKind::evict, 1, 5, 6), transfer(ActionKind::prefetch, 1, 8, 10)};
  for (int64_t r : resident_bytes(k.g, k.life, actions)) CHECK(r <= 100);
  CHECK(verifier_accepts(k.g, k.life, actions, 100));
  SimResult before = simulate(k.g, actions, k.c, duplex_link(), DeviceProfile{});
  CHECK(before.step_time_us == doctest::Approx(1160));
  CHECK(before.stall_before_us[6] == doctest::Approx(60));

  CHECK(k.run(actions) == doctest::Approx(1100));
  REQUIRE(actions.size() == 4);
  auto find = [&](ActionKind kind, TensorId tensor) {
    for (const Action& a : actions)
      if (a.kind == kind && a.tensor == tensor) return a;
    FAIL("missing action");
    return Action{};
  };
  CHECK(find(ActionKind::prefetch, 0).after_step == 6);
  CHECK(find(ActionKind::prefetch, 0).ready_before_step == 8);
  CHECK(find(ActionKind::evict, 1).after_step == 5);
  CHECK(find(ActionKind::evict, 1).ready_before_step == 7);
  CHECK(find(ActionKind::evict, 0).ready_before_step == 5);    // unchanged
  CHECK(find(ActionKind::prefetch, 1).after_step == 8);        // unchanged
  for (int64_t r : resident_bytes(k.g, k.life, actions)) CHECK(r <= 100);
  CHECK(verifier_accepts(k.g, k.life, actions, 100));
  CHECK(k.simulated(actions) == doctest::Approx(1100));
}

TEST_CASE("postpone_for_evictions: a step that waits for a prefetch is left alone") {
  // The same graph with y's prefetch issued as late as it can be (after step 7, at 800 us, in
  // 800-860) and x's eviction due before step 8: step 8 waits 60 us for y, an arrival no
  // eviction's deadline can help: 1160 us, and the actions stay as they are (given in the
  // pass's order: by issue step, then deadline).
  const Case k;
  std::vector<Action> actions = {
      transfer(ActionKind::evict, 0, 1, 5), transfer(ActionKind::evict, 1, 5, 8),
      transfer(ActionKind::prefetch, 0, 7, 8), transfer(ActionKind::prefetch, 1, 8, 10)};
  const std::vector<Action> given = actions;
  CHECK(k.run(actions) == doctest::Approx(1160));
  REQUIRE(actions.size() == given.size());
  for (size_t i = 0; i < given.size(); ++i) {
    CHECK(actions[i].kind == given[i].kind);
    CHECK(actions[i].tensor == given[i].tensor);
    CHECK(actions[i].after_step == given[i].after_step);
    CHECK(actions[i].ready_before_step == given[i].ready_before_step);
  }
}
