// keep_transfers_off_recompute_reads (plan/action_order.h) on a five-step graph.
#include <doctest/doctest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "plan/action_order.h"
#include "plan/simulator.h"
#include "swap_test_util.h"

using namespace autovm;
using namespace autovm::test;

TEST_CASE("transfers keep clear of the steps where a recompute reads their tensor") {
  // five_steps: 0 makes a; 1: b = B(a); 2: c = C(b); 3: d = D(c); 4: e = E(a, d). A recompute
  // of b (step 1 again) before step 3 reads a there: a use of a at 3 (rule 3).
  TrainingGraph g = five_steps("Conv");
  Action rerun_b;
  rerun_b.kind = ActionKind::recompute;
  rerun_b.tensor = 1;
  rerun_b.bytes = 100;
  rerun_b.source_step = 1;
  rerun_b.after_step = 2;
  rerun_b.ready_before_step = 3;
  auto transfer = [](ActionKind kind, StepIndex after, StepIndex ready) {
    Action a;
    a.kind = kind;
    a.tensor = 0;
    a.bytes = 100;
    a.after_step = after;
    a.ready_before_step = ready;
    return a;
  };
  auto find = [](const std::vector<Action>& actions, ActionKind kind) {
    return *std::find_if(actions.begin(), actions.end(),
                         [&](const Action& a) { return a.kind == kind; });
  };
  // The transfers beside the recompute of b, after the pass.
  auto kept_off = [&](std::vector<Action> transfers) {
    transfers.push_back(rerun_b);
    keep_transfers_off_recompute_reads(g, transfers);
    return transfers;
  };
  SUBCASE("a prefetch in flight there is due before it; the step waits for it") {
    std::vector<Action> actions = kept_off({transfer(ActionKind::prefetch, 1, 4)});
    const Action p = find(actions, ActionKind::prefetch);
    CHECK(p.after_step == 1);
    CHECK(p.ready_before_step == 3);
    // 100 B at 1 B/us, issued when step 1 ends (20 us): ready at 120. Step 3 waits for it
    // (90 us after step 2 ends at 30), then the recompute (10 us), then step 3.
    SimResult r = simulate(g, actions, {10, 10, 10, 10, 10}, slow_link(), DeviceProfile{});
    CHECK(r.stall_before_us[3] == doctest::Approx(90));
    CHECK(r.start_us[3] == doctest::Approx(130));
  }
  SUBCASE("an eviction in flight there is issued after it") {
    const Action e = find(kept_off({transfer(ActionKind::evict, 1, 4)}), ActionKind::evict);
    CHECK(e.after_step == 3);
    CHECK(e.ready_before_step == 4);
  }
  SUBCASE("transfers whose copies miss the read are left alone") {
    std::vector<Action> actions =
        kept_off({transfer(ActionKind::prefetch, 3, 4), transfer(ActionKind::evict, 1, 3)});
    CHECK(find(actions, ActionKind::prefetch).after_step == 3);
    CHECK(find(actions, ActionKind::prefetch).ready_before_step == 4);
    CHECK(find(actions, ActionKind::evict).after_step == 1);
    CHECK(find(actions, ActionKind::evict).ready_before_step == 3);
  }
}
