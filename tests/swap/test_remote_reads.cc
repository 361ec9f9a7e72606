// Remote reads (plan/remote_reads.h) on small graphs whose choices are worked out by hand; every
// plan also passes the independent verifier (verify_plan.h).
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "analysis/lifetimes.h"
#include "plan/gaps.h"
#include "plan/remote_reads.h"
#include "plan/residency.h"
#include "plan/simulator.h"
#include "plan/swap_planner.h"
#include "swap_test_util.h"
#include "util/error.h"
#include "verify_plan.h"

using namespace autovm;
using namespace autovm::test;

namespace {

Mechanism remote_link() {  // the slow link, and kernels read host memory at 0.5 B/us
  Mechanism m = slow_link();
  m.remote_read = {0.0005, 0};
  return m;
}

// a, b, c, d: 100 B activations.
//   step 0: a = A()     step 1: b = B(a)     step 2: c = C(a, b)     step 3: d = D(c)
// Working sets: 100, 200, 300, 200. Eligible (read for the last time, used before): a and b at
// step 2, c at step 3; not a at step 1 (step 2 reads it again). Floors with every eligible
// input read remotely: 100, 200, 100, 100.
TrainingGraph two_last_readers() {
  return graph_of({100, 100, 100, 100},
                  {{"A", {}, {0}}, {"B", {0}, {1}}, {"C", {0, 1}, {2}}, {"D", {2}, {3}}});
}

std::vector<Action> with_reads(const TrainingGraph& g, const RemoteReadChoice& choice,
                               std::vector<Action> actions, const Mechanism& m) {
  for (Action& a : remote_read_actions(g, choice, m)) actions.push_back(a);
  return actions;
}

}  // namespace

TEST_CASE("the floor with remote reads: each step less the inputs it reads last") {
  TrainingGraph g = two_last_readers();
  auto life = compute_lifetimes(g);
  CHECK(remote_floor_bytes(g, life, {}) == std::vector<int64_t>{100, 200, 100, 100});
}

TEST_CASE("budget 250: step 2 reads a remotely; a leaves after step 1 and never comes back") {
  TrainingGraph g = two_last_readers();
  auto life = compute_lifetimes(g);
  const Mechanism m = remote_link();
  RemoteReadChoice choice = choose_remote_reads(g, life, 250, {}, m);
  // Excess 50 at step 2: a or b alone covers it (100 B each); the lower id wins the tie.
  REQUIRE(choice.reads.size() == 1);
  CHECK(choice.reads[0].tensor == 0);
  CHECK(choice.reads[0].step == 2);
  CHECK(choice.planning_life[0].uses == std::vector<StepIndex>{0, 1});  // step 2 taken out
  CHECK(choice.planning_life[0].last == 2);                             // the lifetime is not
  CHECK(choice.extra_us == std::vector<double>{0, 0, 200, 0});          // 100 B at 0.5 B/us

  SwapOptions o;
  o.budget_bytes = 250;
  std::vector<Action> planned = plan_swaps(g, choice.planning_life, {10, 10, 10, 10}, m, o);
  // a's tail gap: evicted after its last use before step 2, ready before step 2; no prefetch.
  REQUIRE(planned.size() == 1);
  CHECK(planned[0].kind == ActionKind::evict);
  CHECK(planned[0].tensor == 0);
  CHECK(planned[0].after_step == 1);
  CHECK(planned[0].ready_before_step == 2);
  std::vector<Action> plan = with_reads(g, choice, planned, m);
  REQUIRE(plan.size() == 2);
  CHECK(plan[1].kind == ActionKind::read_remote);
  CHECK(plan[1].after_step == 1);
  CHECK(plan[1].ready_before_step == 2);
  CHECK(remote_reads_off(g, life, plan));
  // By the true lifetimes: step 2 holds b and c only.
  CHECK(resident_bytes(g, life, plan) == std::vector<int64_t>{100, 200, 200, 200});
  CHECK(verifier_accepts(g, life, plan, 250));

  // The step's time holds the read (210 us). The eviction, issued when step 1 ends at 20 us,
  // takes 100 us on the slow link: step 2 waits for it until 120 us, then ends at 330.
  std::vector<double> times = {10, 10, 10 + choice.extra_us[2], 10};
  SimResult sim = simulate(g, plan, times, m, DeviceProfile{});
  CHECK(sim.stall_us == doctest::Approx(100));
  CHECK(sim.step_time_us == doctest::Approx(340));
}

TEST_CASE("the least bytes that cover the excess, whichever inputs they are") {
  // a 60, b 50, c 45, d 10: step 3 reads a, b and c for the last time and writes d.
  TrainingGraph g = graph_of({60, 50, 45, 10}, {{"A", {}, {0}},
                                                 {"B", {}, {1}},
                                                 {"C", {}, {2}},
                                                 {"D", {0, 1, 2}, {3}}});
  auto life = compute_lifetimes(g);
  auto chosen = [&](int64_t budget) {
    std::vector<TensorId> ids;
    for (const RemoteRead& r : choose_remote_reads(g, life, budget, {}, remote_link()).reads) {
      CHECK(r.step == 3);
      ids.push_back(r.tensor);
    }
    return ids;
  };
  // Step 3 holds 165 B. Excess 75 (budget 90): b + c = 95 is the least of the pairs that cover
  // it (a + c 105, a + b 110); no one tensor does.
  CHECK(chosen(90) == std::vector<TensorId>{1, 2});
  // Excess 100 (budget 65): b + c = 95 falls short; a + c = 105.
  CHECK(chosen(65) == std::vector<TensorId>{0, 2});
  // Excess 40 (budget 125): c alone (45), the least that covers it.
  CHECK(chosen(125) == std::vector<TensorId>{2});
  // Nothing over: no reads.
  CHECK(choose_remote_reads(g, life, 165, {}, remote_link()).empty());
}

TEST_CASE("a step with more inputs than are searched whole: the largest first, then what is "
          "not needed dropped") {
  // Thirteen inputs of 10, 20, ..., 130 B that step 13 reads for the last time, writing 5 B.
  // It holds 915 B; at budget 665 the excess is 250. The largest first: 130 + 120 = 250 covers
  // it, and neither may go. At budget 695 (excess 220): 130 + 120 = 250; dropping either falls
  // short, so both stay (the least cover, 130 + 90, is not searched for this many inputs). At
  // budget 800 (excess 115): 130 alone.
  std::vector<int64_t> bytes;
  std::vector<StepSpec> steps;
  std::vector<TensorId> inputs;
  for (TensorId t = 0; t < 13; ++t) {
    bytes.push_back(10 * (t + 1));
    steps.push_back({"P", {}, {t}});
    inputs.push_back(t);
  }
  bytes.push_back(5);
  steps.push_back({"R", inputs, {13}});
  TrainingGraph g = graph_of(bytes, steps);
  auto life = compute_lifetimes(g);
  auto chosen = [&](int64_t budget) {
    std::vector<TensorId> ids;
    for (const RemoteRead& r : choose_remote_reads(g, life, budget, {}, remote_link()).reads)
      ids.push_back(r.tensor);
    return ids;
  };
  CHECK(remote_floor_bytes(g, life, {})[13] == 5);
  CHECK(chosen(665) == std::vector<TensorId>{11, 12});
  CHECK(chosen(695) == std::vector<TensorId>{11, 12});
  CHECK(chosen(800) == std::vector<TensorId>{12});
}

TEST_CASE("what a step may not read remotely") {
  // p: a parameter (persistent); a is read again after step 2; step 2 updates b in place.
  TrainingGraph g;
  g.add_tensor("p", TensorKind::parameter, DType::u8, {100});
  g.add_tensor("a", TensorKind::activation, DType::u8, {100});
  g.add_tensor("b", TensorKind::activation, DType::u8, {100});
  add_step(g, "A", {0}, {1});
  add_step(g, "B", {1}, {2});
  add_step(g, "C", {0, 1, 2}, {2});
  add_step(g, "D", {1}, {});
  auto life = compute_lifetimes(g);
  // Nothing at step 2 is eligible, so its floor is its whole working set.
  CHECK(remote_floor_bytes(g, life, {})[2] == 300);
  SUBCASE("a budget below it is refused, naming the step and the least budget") {
    try {
      choose_remote_reads(g, life, 250, {}, remote_link());
      FAIL("no error");
    } catch (const Error& e) {
      CHECK(e.kind() == ErrorKind::infeasible);
      const std::string what = e.what();
      CHECK(what.find("step 2") != std::string::npos);
      CHECK(what.find("The smallest budget that works is 300 B") != std::string::npos);
    }
  }
  SUBCASE("kinds that may not move are never read remotely") {
    TrainingGraph h = two_last_readers();
    auto hl = compute_lifetimes(h);
    MovableKinds only_gradients;
    only_gradients.bits = uint32_t(1) << unsigned(TensorKind::gradient);
    CHECK(remote_floor_bytes(h, hl, only_gradients)[2] == 300);
  }
  SUBCASE("a matrix product reads none of its operands remotely, forward or backward") {
    // two_last_readers with step 2 a convolution (then its backward), step 3 a ReLU: a and b,
    // read last by step 2, stay resident there; c, read last by the ReLU, may be read remotely.
    for (const char* op : {"Conv", "ConvGrad", "Gemm", "MatMulGrad"}) {
      CAPTURE(op);
      TrainingGraph h = graph_of({100, 100, 100, 100},
                                 {{"A", {}, {0}}, {"B", {0}, {1}}, {op, {0, 1}, {2}}, {"Relu", {2}, {3}}});
      auto hl = compute_lifetimes(h);
      CHECK(remote_floor_bytes(h, hl, {}) == std::vector<int64_t>{100, 200, 300, 100});
      try {
        choose_remote_reads(h, hl, 250, {}, remote_link());
        FAIL("no error");
      } catch (const Error& e) {
        CHECK(e.kind() == ErrorKind::infeasible);
        CHECK(std::string(e.what()).find("a matrix product reads none of its operands remotely") !=
              std::string::npos);
      }
    }
  }
}

TEST_CASE("no remote reads where every working set fits the budget") {
  // five_steps at budget 200: steps 2 and 3 are over, but only by tensors they do not use (a);
  // every working set fits (step 4's a, d and e: 200), so a moves by the usual pair.
  TrainingGraph g = five_steps("Dropout");
  auto life = compute_lifetimes(g);
  CHECK(choose_remote_reads(g, life, 200, {}, remote_link()).empty());
}

TEST_CASE("a kind movable at its last use only: off at the step that reads it remotely alone") {
  // a (an activation gradient here), b, c: 100 B; d: 200 B.
  //   step 0: a = A()     step 1: b = B(a)     step 2: c = C(b)     step 3: d = D(a, c)
  // Fully movable, a could be off over step 2 (its gap between steps 1 and 3). At its last use
  // only, it is resident there, and may be off at step 3 alone, read remotely.
  TrainingGraph g = graph_of({100, 100, 100, 200},
                             {{"A", {}, {0}}, {"B", {0}, {1}}, {"C", {1}, {2}}, {"D", {0, 2}, {3}}});
  g.tensors[0].kind = TensorKind::activation_grad;
  auto life = compute_lifetimes(g);
  MovableKinds last_use;
  last_use.bits = MovableKinds::kAll & ~(uint32_t(1) << unsigned(TensorKind::activation_grad));
  last_use.add_at_last_use(TensorKind::activation_grad);
  CHECK(last_use.at_last_use_only(TensorKind::activation_grad));
  CHECK(last_use.reads_remotely(TensorKind::activation_grad));
  CHECK(last_use.relaxed().all());

  CHECK(find_gaps(g, life, {}).size() == 1);  // a over step 2
  CHECK(find_gaps(g, life, last_use).empty());
  CHECK(unavoidable_bytes(g, life, {}) == std::vector<int64_t>{100, 200, 200, 400});
  CHECK(unavoidable_bytes(g, life, last_use) == std::vector<int64_t>{100, 200, 300, 400});
  // Step 2 may read b remotely, step 3 a and c (each read last there); a stays at step 2.
  CHECK(remote_floor_bytes(g, life, last_use) == std::vector<int64_t>{100, 200, 200, 200});
  CHECK(remote_floor_bytes(g, life, {}) == std::vector<int64_t>{100, 200, 100, 200});

  const Mechanism m = remote_link();
  RemoteReadChoice choice = choose_remote_reads(g, life, 300, last_use, m);
  REQUIRE(choice.reads.size() == 1);  // the 100 B over at step 3: a or c; the lower id
  CHECK(choice.reads[0].tensor == 0);
  CHECK(choice.reads[0].step == 3);
  const std::vector<Gap> gaps = find_gaps(g, choice.planning_life, last_use);
  REQUIRE(gaps.size() == 1);
  CHECK(gaps[0].tensor == 0);
  CHECK(gaps[0].tail);
  CHECK(gaps[0].after == 2);  // off at step 3 only
  CHECK(gaps[0].before == 4);
  CHECK(unavoidable_bytes(g, choice.planning_life, last_use) ==
        std::vector<int64_t>{100, 200, 300, 300});

  SwapOptions o;
  o.budget_bytes = 300;
  o.movable = last_use;
  std::vector<Action> planned = plan_swaps(g, choice.planning_life, {10, 10, 10, 10}, m, o);
  REQUIRE(planned.size() == 1);  // evicted after step 2, ready before step 3: no earlier
  CHECK(planned[0].kind == ActionKind::evict);
  CHECK(planned[0].tensor == 0);
  CHECK(planned[0].after_step == 2);
  CHECK(planned[0].ready_before_step == 3);
  std::vector<Action> plan = with_reads(g, choice, planned, m);
  CHECK(remote_reads_off(g, life, plan));
  CHECK(resident_bytes(g, life, plan) == std::vector<int64_t>{100, 200, 300, 300});
  CHECK(verifier_accepts(g, life, plan, 300));
  SUBCASE("at 250 B step 2 reads b remotely, step 3 a and c; below the floor of 200, none") {
    RemoteReadChoice tight = choose_remote_reads(g, life, 250, last_use, m);
    REQUIRE(tight.reads.size() == 3);
    CHECK(tight.reads[0].tensor == 1);
    CHECK(tight.reads[0].step == 2);
    CHECK(tight.reads[1].tensor == 0);
    CHECK(tight.reads[2].tensor == 2);
    o.budget_bytes = 250;
    std::vector<Action> moved = plan_swaps(g, tight.planning_life, {10, 10, 10, 10}, m, o);
    for (const Action& a : moved)
      if (a.tensor == 0) {  // a leaves after step 2 whatever else moves
        CHECK(a.kind == ActionKind::evict);
        CHECK(a.after_step == 2);
      }
    std::vector<Action> all = with_reads(g, tight, moved, m);
    CHECK(remote_reads_off(g, life, all));
    CHECK(verifier_accepts(g, life, all, 250));
    CHECK_THROWS_AS(choose_remote_reads(g, life, 199, last_use, m), Error);
  }
}
