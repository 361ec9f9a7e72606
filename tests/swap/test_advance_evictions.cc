// advance_evictions (plan/passes/advance_evictions.h) on an eleven-step graph whose plan
// before and after is worked out by hand.
#include <doctest/doctest.h>

#include "analysis/lifetimes.h"
#include "plan/baselines.h"
#include "plan/simulator.h"
#include "plan/passes/advance_evictions.h"
#include "plan/residency.h"
#include "swap_test_util.h"
#include "verify_plan.h"

using namespace autovm;
using autovm::test::duplex_link;
using autovm::test::transfer;
using autovm::test::verifier_accepts;

namespace {

using Case = test::ElevenSteps;  // the graph, worked out in swap_test_util.h

}  // namespace

TEST_CASE("advance_evictions: an eviction issued late while its queue stood idle goes earlier") {
  // 100 us a step, 60 us a transfer. As given: y leaves after step 4 (500-560 us), due before
  // step 5, which waits 60 us; x leaves after step 5 (660-720), due before 7; y comes back
  // after step 6 (760-820), due before 8; x after step 8 (960-1020), due before 10: 1160 us.
  // y's last use before its eviction is step 1 and nothing is on the to-host queue before it:
  // issued after step 1 (200-260 us), step 5 no longer waits: 1100 us. x's eviction, after
  // y's on the same queue, may not go before its last use, step 5: it stays.
  const Case k;
  std::vector<Action> actions = {
      transfer(ActionKind::evict, 0, 4, 5), transfer(ActionKind::evict, 1, 5, 7),
      transfer(ActionKind::prefetch, 0, 6, 8), transfer(ActionKind::prefetch, 1, 8, 10)};
  for (int64_t r : resident_bytes(k.g, k.life, actions)) CHECK(r <= 100);
  CHECK(verifier_accepts(k.g, k.life, actions, 100));
  CHECK(k.simulated(actions) == doctest::Approx(1160));
  const std::vector<int64_t> resident = resident_bytes(k.g, k.life, actions);
  CHECK(advance_evictions(k.g, k.life, k.c, duplex_link(), DeviceProfile{}, actions, 20) ==
        doctest::Approx(1100));
  CHECK(k.simulated(actions) == doctest::Approx(1100));
  CHECK(resident_bytes(k.g, k.life, actions) == resident);  // residency is unchanged
  CHECK(verifier_accepts(k.g, k.life, actions, 100));
  REQUIRE(actions.size() == 4);
  for (const Action& a : actions) {
    CAPTURE(a.tensor);
    if (a.kind == ActionKind::evict) CHECK(a.after_step == (a.tensor == 0 ? 1 : 5));
  }
  // Already as early as it may be: nothing changes.
  std::vector<Action> again = actions;
  CHECK(advance_evictions(k.g, k.life, k.c, duplex_link(), DeviceProfile{}, again, 20) ==
        doctest::Approx(1100));
  REQUIRE(again.size() == actions.size());
  for (size_t i = 0; i < again.size(); ++i) {
    CHECK(again[i].tensor == actions[i].tensor);
    CHECK(again[i].after_step == actions[i].after_step);
    CHECK(again[i].ready_before_step == actions[i].ready_before_step);
  }
}
