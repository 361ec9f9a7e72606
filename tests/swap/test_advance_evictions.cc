// advance_evictions (plan/passes/advance_evictions.h) on an eleven-step graph whose plan
// before and after is worked out by hand.
#include <doctest/doctest.h>

#include "analysis/lifetimes.h"
#include "plan/baselines.h"
#include "plan/simulator.h"
#include "plan/passes/advance_evictions.h"
#include "plan/passes/postpone_for_evictions.h"
#include "plan/residency.h"
#include "swap_test_util.h"
#include "verify_plan.h"

using namespace autovm;
using autovm::test::duplex_link;
using autovm::test::transfer;
using autovm::test::verifier_accepts;

namespace {

// y and x (60 B each) and nine 0-byte links between the steps:
//   s0: y = A()     s1: l1 = B(y)     s2-s4: l2..l4, each from the one before
//   s5: x = X(l4)   s6-s7: l6, l7     s8: l8 = H(l7, y)     s9: l9     s10: J(l9, x)
// y is used at 0, 1 and 8; x at 5 and 10. Budget 100: the two never fit together.
TrainingGraph eleven_steps() {
  TrainingGraph g;
  TensorId y = g.add_tensor("y", TensorKind::activation, DType::u8, {60});
  TensorId x = g.add_tensor("x", TensorKind::activation, DType::u8, {60});
  std::vector<TensorId> link(11, kNoTensor);
  for (int s = 1; s <= 10; ++s) link[size_t(s)] = g.add_tensor("l" + std::to_string(s), TensorKind::activation, DType::u8, {0});
  auto step = [&](std::vector<TensorId> in, std::vector<TensorId> out) {
    test::add_op_step(g, std::move(in), std::move(out));
  };
  step({}, {y});
  step({y}, {link[1]});
  for (int s = 2; s <= 4; ++s) step({link[size_t(s - 1)]}, {link[size_t(s)]});
  step({link[4]}, {x, link[5]});
  for (int s = 6; s <= 7; ++s) step({link[size_t(s - 1)]}, {link[size_t(s)]});
  step({link[7], y}, {link[8]});
  step({link[8]}, {link[9]});
  step({link[9], x}, {link[10]});
  return g;
}

// The eleven-step graph, its lifetimes and 100 us a step; run() applies the pass to `actions`
// with the budget of 100 B and at most 20 simulations.
struct Case {
  TrainingGraph g = eleven_steps();
  std::vector<Lifetime> life = compute_lifetimes(g);
  std::vector<double> c = std::vector<double>(11, 100);
  double run(std::vector<Action>& actions) const {
    return postpone_for_evictions(g, life, c, duplex_link(), DeviceProfile{}, 100, actions, 20);
  }
  double simulated(const std::vector<Action>& actions) const {
    return simulate(g, actions, c, duplex_link(), DeviceProfile{}).step_time_us;
  }
};

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
