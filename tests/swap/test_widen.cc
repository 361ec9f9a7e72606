// widen (plan/passes/widen.h) on five_steps, with plans built by hand.
#include <doctest/doctest.h>

#include <vector>

#include "analysis/lifetimes.h"
#include "plan/passes/widen.h"
#include "plan/residency.h"
#include "swap_test_util.h"
#include "verify_plan.h"

using namespace autovm;
using namespace autovm::test;

// five_steps: a (100 B) is used at steps 1 and 4; live bytes 100, 200, 300, 250, 200.
// a moved over [2, 3] leaves 100, 200, 200, 150, 200.

TEST_CASE("widen: a prefetch is issued as early as the budget allows") {
  TrainingGraph g = five_steps("Dropout");
  auto life = compute_lifetimes(g);
  std::vector<Action> actions = {act(ActionKind::evict, 0, 100, 1, 2),
                                 act(ActionKind::prefetch, 0, 100, 3, 4)};
  SUBCASE("budget 250: step 3 has room for a (150 + 100), step 2 has not (200 + 100)") {
    widen(g, life, 250, {10, 10, 10, 10, 10}, actions);
    REQUIRE(actions.size() == 2);
    CHECK(actions[0].ready_before_step == 2);  // the eviction: still off from step 2
    CHECK(actions[1].after_step == 2);         // the prefetch: resident from step 3
    CHECK(resident_bytes(g, life, actions) == std::vector<int64_t>{100, 200, 200, 250, 200});
    CHECK(verifier_accepts(g, life, actions, 250));
  }
  SUBCASE("budget 200: no room anywhere, the pair is left as it is") {
    widen(g, life, 200, {10, 10, 10, 10, 10}, actions);
    REQUIRE(actions.size() == 2);
    CHECK(actions[0].ready_before_step == 2);
    CHECK(actions[1].after_step == 3);
    CHECK(verifier_accepts(g, life, actions, 200));
  }
  SUBCASE("budget 300: a fits at every step, the pair is dropped") {
    widen(g, life, 300, {10, 10, 10, 10, 10}, actions);
    CHECK(actions.empty());
  }
}

TEST_CASE("widen: a recompute pair the budget does not need is dropped") {
  // a discarded after step 1 and made again before step 4 (step 0 again): at budget 300 a fits
  // over [2, 3], so the pair only costs compute.
  TrainingGraph g = five_steps("Relu");
  auto life = compute_lifetimes(g);
  std::vector<Action> actions = {Action::discard(0, 100, 1), Action::recompute(0, 100, 0, 4)};
  SUBCASE("budget 300: dropped") {
    widen(g, life, 300, {10, 10, 10, 10, 10}, actions);
    CHECK(actions.empty());
  }
  SUBCASE("budget 250: step 2 has no room, kept") {
    widen(g, life, 250, {10, 10, 10, 10, 10}, actions);
    CHECK(actions.size() == 2);
    CHECK(verifier_accepts(g, life, actions, 250));
  }
}
