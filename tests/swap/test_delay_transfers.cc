// delay_transfers (plan/passes/delay_transfers.h) on a five-step graph worked out by hand.
#include <doctest/doctest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "analysis/lifetimes.h"
#include "plan/passes/delay_transfers.h"
#include "plan/simulator.h"
#include "swap_test_util.h"
#include "verify_plan.h"

using namespace autovm;
using namespace autovm::test;

TEST_CASE("delay_transfers: an eviction due late goes after one a step waits for") {
  // five_steps, 10 us a step, the slow link (1 B/us, one queue). Evict a (100 B) after step 0,
  // due before step 4, and 20 B of b after step 1, due before step 2 (the simulator times the
  // bytes the action names).
  //   As given: a is copied 10-110 us, b waits behind it, 110-130; step 2 waits until 130,
  //   steps 2 and 3 end at 150, step 4 (a was out by 110) ends at 160.
  //   a issued after step 1 instead: both issued at 20 us, b first (the earlier deadline),
  //   20-40; step 2 at 40-50, step 3 to 60; a 40-140; step 4 waits until 140: 150 us.
  //   (a issued after step 3, its latest: step 4 would wait until 160: 170 us, worse.)
  TrainingGraph g = five_steps("Conv");
  std::vector<double> c = {10, 10, 10, 10, 10};
  std::vector<Action> actions = {
      Action::evict(0, 100, 0, 4, "staged"),
      Action::evict(1, 20, 1, 2, "staged"),
  };
  CHECK(simulate(g, actions, c, slow_link(), DeviceProfile{}).step_time_us == doctest::Approx(160));
  double t = delay_transfers(g, c, slow_link(), DeviceProfile{}, actions, 50);
  CHECK(t == doctest::Approx(150));
  REQUIRE(actions.size() == 2);
  CHECK(actions[0].tensor == 1);  // sorted: both after step 1, b due first
  CHECK(actions[1].tensor == 0);
  CHECK(actions[1].after_step == 1);
  CHECK(actions[1].ready_before_step == 4);
  CHECK(simulate(g, actions, c, slow_link(), DeviceProfile{}).step_time_us == doctest::Approx(150));
}
