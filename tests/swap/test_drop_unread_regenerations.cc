// drop_unread_regenerations (plan/passes/drop_unread_regenerations.h) on chain_graph.
#include <doctest/doctest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "analysis/lifetimes.h"
#include "plan/passes/drop_unread_regenerations.h"
#include "plan/residency.h"
#include "swap_test_util.h"
#include "verify_plan.h"

using namespace autovm;
using namespace autovm::test;

TEST_CASE("drop_unread_regenerations: a regeneration that nothing reads goes, with its temporary") {
  // chain_graph: z (made at step 2) is next used at step 5. A plan that discards it after step
  // 2, regenerates it (Conv then Relu, y a temporary) before step 3, which does not use it,
  // discards it again after step 3 and regenerates it before step 5: the first regeneration
  // only costs compute. Dropped with the discard after it and y's recompute before step 3, it
  // leaves the plan budget 350 gives (discard after 2, chain before 5), resident bytes no higher.
  TrainingGraph g = chain_graph();
  auto life = compute_lifetimes(g);
  auto rc = [](TensorId t, StepIndex before, StepIndex source, int64_t bytes) {
    return Action::recompute(t, bytes, source, before);
  };
  auto discard = [](TensorId t, StepIndex after, int64_t bytes) { return Action::discard(t, bytes, after); };
  std::vector<Action> actions = {discard(2, 2, 100), rc(1, 3, 1, 100), rc(2, 3, 2, 100),
                                 discard(2, 3, 100), rc(1, 5, 1, 100), rc(2, 5, 2, 100)};
  const std::vector<int64_t> before = resident_bytes(g, life, actions);
  CHECK(drop_unread_regenerations(g, life, actions) == 1);
  CHECK(verifier_accepts(g, life, actions, 350));
  REQUIRE(actions.size() == 3);
  CHECK(actions[0].kind == ActionKind::discard);
  CHECK(actions[0].after_step == 2);
  CHECK(actions[1].tensor == 1);
  CHECK(actions[1].ready_before_step == 5);
  CHECK(actions[2].tensor == 2);
  CHECK(actions[2].ready_before_step == 5);
  const std::vector<int64_t> after = resident_bytes(g, life, actions);
  for (size_t s = 0; s < after.size(); ++s) CHECK(after[s] <= before[s]);
  CHECK(after[3] == 300);  // x and p (step 3 allocates p: the moment before it held x, y, z)
  SUBCASE("a regeneration before a step that uses the tensor stays") {
    CHECK(drop_unread_regenerations(g, life, actions) == 0);
    CHECK(actions.size() == 3);
  }
}
