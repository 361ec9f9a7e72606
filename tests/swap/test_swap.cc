// The swap planner, the feasibility check and the lower bound on a five-step graph whose
// expected plans are worked out by hand.
#include <doctest/doctest.h>

#include "analysis/lifetimes.h"
#include "analysis/timeline.h"
#include "plan/baselines.h"
#include "plan/bound.h"
#include "plan/gaps.h"
#include "plan/simulator.h"
#include "plan/swap_planner.h"
#include "util/error.h"

using namespace autovm;

namespace {

// Appends a step of `op` reading `in` and writing `out` (forward phase, no workspace).
void add_step(TrainingGraph& g, const char* op, std::vector<TensorId> in,
              std::vector<TensorId> out) {
  Step s;
  s.id = g.step_count();
  s.op = op;
  s.inputs = std::move(in);
  s.outputs = std::move(out);
  g.steps.push_back(s);
}

// a (100 B), b (100), c (100), d (50), e (50); all activations.
//   step 0: a = A()        step 1: b = B(a)       step 2: c = C(b)
//   step 3: d = D(c)       step 4: e = E(a, d)
// Live bytes: 100, 200, 300, 250, 200. Only a has a gap: used at 1 and 4, off possible at 2-3.
TrainingGraph five_steps(const char* producer_of_a) {
  TrainingGraph g;
  for (auto [name, bytes] : {std::pair{"a", 100}, {"b", 100}, {"c", 100}, {"d", 50}, {"e", 50}})
    g.add_tensor(name, TensorKind::activation, DType::u8, {bytes});
  auto step = [&](const char* op, std::vector<TensorId> in, std::vector<TensorId> out) {
    add_step(g, op, std::move(in), std::move(out));
  };
  step(producer_of_a, {}, {0});
  step("B", {0}, {1});
  step("C", {1}, {2});
  step("D", {2}, {3});
  step("E", {0, 3}, {4});
  return g;
}

Mechanism slow_link() {
  Mechanism m;
  m.name = "staged";
  m.to_host = {0.001, 0};    // 1 byte per microsecond
  m.to_device = {0.001, 0};
  return m;
}


std::vector<Action> plan(const TrainingGraph& g, int64_t budget, bool recompute,
                         std::vector<double> times = {10, 10, 10, 10, 10}) {
  auto life = compute_lifetimes(g);
  SwapOptions o;
  o.budget_bytes = budget;
  o.allow_recompute = recompute;
  return plan_swaps(g, life, times, slow_link(), o);
}

}  // namespace

TEST_CASE("budget 200: a is off over steps 2-3, the only over-budget steps") {
  TrainingGraph g = five_steps("Dropout");  // random: a can only be moved
  auto actions = plan(g, 200, true);
  REQUIRE(actions.size() == 2);
  // Evict after its use at step 1, freed before step 2; back after step 3 for its use at 4.
  CHECK(actions[0].kind == ActionKind::evict);
  CHECK(actions[0].tensor == 0);
  CHECK(actions[0].after_step == 1);
  CHECK(actions[0].ready_before_step == 2);
  CHECK(actions[0].mechanism == "staged");
  CHECK(actions[1].kind == ActionKind::prefetch);
  CHECK(actions[1].after_step == 3);
  CHECK(actions[1].ready_before_step == 4);
  CHECK(actions[1].bytes == 100);
}

TEST_CASE("budget 250: only step 2 is over; the prefetch may start right after it") {
  TrainingGraph g = five_steps("Dropout");
  auto actions = plan(g, 250, true);
  REQUIRE(actions.size() == 2);
  CHECK(actions[0].ready_before_step == 2);
  CHECK(actions[1].after_step == 2);  // resident again at step 3: 100 + 100 + 50 = 250
}

TEST_CASE("no swap when the peak fits") {
  TrainingGraph g = five_steps("Conv");
  CHECK(plan(g, 300, true).empty());
}

TEST_CASE("a cheap producer is recomputed instead of moved when the link is slower") {
  TrainingGraph g = five_steps("Relu");  // step 0 takes 10 us; moving 100 B takes 200 us
  auto actions = plan(g, 200, true);
  REQUIRE(actions.size() == 2);
  CHECK(actions[0].kind == ActionKind::discard);
  CHECK(actions[0].after_step == 1);
  CHECK(actions[0].ready_before_step == 2);
  CHECK(actions[1].kind == ActionKind::recompute);
  CHECK(actions[1].source_step == 0);
  CHECK(actions[1].after_step == 3);
  CHECK(actions[1].ready_before_step == 4);
  SUBCASE("but not when recomputing costs more than the link") {
    auto moved = plan(g, 200, true, {500, 10, 10, 10, 10});
    REQUIRE(moved.size() == 2);
    CHECK(moved[0].kind == ActionKind::evict);
  }
  SUBCASE("nor with --no-recompute") {
    auto moved = plan(g, 200, false);
    CHECK(moved[0].kind == ActionKind::evict);
  }
  SUBCASE("a convolution too: a chain of one step") {
    auto conv = plan(five_steps("Conv"), 200, true);
    REQUIRE(conv.size() == 2);
    CHECK(conv[1].kind == ActionKind::recompute);
    CHECK(conv[1].source_step == 0);
  }
}

TEST_CASE("an infeasible budget names the step, its tensors and the smallest budget") {
  TrainingGraph g = five_steps("Conv");
  auto life = compute_lifetimes(g);
  // Unavoidable: step 2 uses b and c (200 B); nothing else is over that.
  CHECK(unavoidable_bytes(g, life) == std::vector<int64_t>{100, 200, 200, 150, 200});
  try {
    plan(g, 150, true);
    FAIL("expected an infeasible-budget error");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::infeasible);
    std::string m = e.what();
    CHECK(m.find("step 1") != std::string::npos);  // the first step needing 200 B
    CHECK(m.find("200 B") != std::string::npos);
    CHECK(m.find("a (100 B)") != std::string::npos);
  }
}

TEST_CASE("the lower bound, worked by hand") {
  std::vector<double> c = {10, 10, 10, 10, 10};
  SUBCASE("a cannot be regenerated (dropout): the excess must cross the link") {
    TrainingGraph g = five_steps("Dropout");
    auto life = compute_lifetimes(g);
    auto tl = compute_timeline(g, life);
    // Forced arrival at step 4: a is not used at 3, unavoidable(3) = c + d = 150 and
    // 150 + 100 > 200, so a is off at 3; nothing can regenerate it, so it arrives by a prefetch
    // issued when step 3 ends, and step 4 waits for it: F(4) = 100 us.
    // E(2) = 300 - 200 = 100 B: start(2) >= max(20, 100 us);
    //   end >= start + 10 + max(20 + F(4), 100) = 100 + 10 + 120 = 230.
    // E(3) = 50 B: max(30, 50) + 10 + max(10 + 100, 50) = 170. C + F = 150. Bound: 230 us at
    // step 2. (The best plan: evict a after 1 (ready 120), prefetch it after 3 (ready 240): 250.)
    auto b = lower_bound(g, life, tl.total, c, 200, slow_link());
    CHECK(b.forced_stall_us == doctest::Approx(100));
    CHECK(b.bound_us == doctest::Approx(230).epsilon(1e-6));
    CHECK(b.critical_step == 2);
    CHECK(b.must_move_bytes == 100);
    CHECK(b.compute_us == doctest::Approx(50));
    auto p = plan(g, 200, false);
    CHECK(simulate(g, p, c, slow_link(), DeviceProfile{}).step_time_us >= b.bound_us);
  }
  SUBCASE("a can be regenerated by re-running step 0 (10 us for its 100 B)") {
    TrainingGraph g = five_steps("Conv");
    auto life = compute_lifetimes(g);
    auto tl = compute_timeline(g, life);
    // Step 2, moving M bytes and regenerating 100 - M at 0.1 us/B:
    //   f(M) = max(20, M) + 10 + max(20 + 0.1 (100 - M), M), least at M = 20: 58 us.
    // Step 3 (E = 50): least at M = 150/11: 40 + 13.64 = 53.6 us. Bound: 58 us at step 2.
    // No forced arrival: re-running step 0 before step 4 makes no temporary.
    auto b = lower_bound(g, life, tl.total, c, 200, slow_link());
    CHECK(b.forced_stall_us == 0);
    CHECK(b.bound_us == doctest::Approx(58).epsilon(1e-3));
    CHECK(b.critical_step == 2);
  }
  SUBCASE("within the budget the bound is the compute") {
    TrainingGraph g = five_steps("Conv");
    auto life = compute_lifetimes(g);
    auto b = lower_bound(g, life, compute_timeline(g, life).total, c, 300, slow_link());
    CHECK(b.bound_us == doctest::Approx(50));
    CHECK(b.critical_step == -1);
  }
}

TEST_CASE("gaps, including a persistent tensor's wrap-around gap") {
  TrainingGraph g = five_steps("Conv");
  g.add_tensor("w", TensorKind::parameter, DType::u8, {10});
  g.steps[2].inputs.push_back(5);
  auto gaps = find_gaps(g, compute_lifetimes(g));
  REQUIRE(gaps.size() == 2);
  CHECK(gaps[0].tensor == 0);
  CHECK(gaps[0].after == 1);
  CHECK(gaps[0].before == 4);
  CHECK(gaps[1].tensor == 5);
  CHECK(gaps[1].wrap);
  CHECK(gaps[1].covers(0));
  CHECK(gaps[1].covers(4));
  CHECK_FALSE(gaps[1].covers(2));
}

namespace {

// A recompute chain. x (input, 100 B), y (100), z (100), p (200), q (50), e (10):
//   step 0: x = X()    (an input: nothing can regenerate it)
//   step 1: y = Conv(x)      y dies after step 2
//   step 2: z = Relu(y)      z is used again at step 5
//   step 3: p = P()   step 4: q = Q(p)   step 5: e = E(x, z, q)
// Live bytes: 100, 200, 300, 400, 450, 260. Gaps: x [2, 4], z [3, 4].
// At budget 360 steps 3 and 4 are over (by 40 and 90). Moving x or z over the slow link costs
// 100 us each way with at most 10 us of compute to hide behind; regenerating z costs 20 us: run
// Conv again (x is resident at step 5) to make y, a temporary at step 5 only, then Relu. Step 5
// then holds x, z, q, e and y: 360 bytes, exactly the budget.
TrainingGraph chain_graph() {
  TrainingGraph g;
  g.add_tensor("x", TensorKind::input, DType::u8, {100});
  for (auto [name, bytes] : {std::pair{"y", 100}, {"z", 100}, {"p", 200}, {"q", 50}, {"e", 10}})
    g.add_tensor(name, TensorKind::activation, DType::u8, {bytes});
  auto step = [&](const char* op, std::vector<TensorId> in, std::vector<TensorId> out) {
    add_step(g, op, std::move(in), std::move(out));
  };
  step("X", {}, {0});
  step("Conv", {0}, {1});
  step("Relu", {1}, {2});
  step("P", {}, {3});
  step("Q", {3}, {4});
  step("E", {0, 2, 4}, {5});
  return g;
}

}  // namespace

TEST_CASE("budget 360: z is regenerated by a chain, Conv then Relu, with y a temporary") {
  TrainingGraph g = chain_graph();
  auto life = compute_lifetimes(g);
  auto actions = plan(g, 360, true, {10, 10, 10, 10, 10, 10});
  REQUIRE(actions.size() == 3);
  CHECK(actions[0].kind == ActionKind::discard);
  CHECK(actions[0].tensor == 2);
  CHECK(actions[0].after_step == 2);
  // The chain, in dependency order, both before step 5.
  CHECK(actions[1].kind == ActionKind::recompute);
  CHECK(actions[1].tensor == 1);  // y, after its lifetime [1, 2]: a temporary
  CHECK(actions[1].source_step == 1);
  CHECK(actions[1].ready_before_step == 5);
  CHECK(actions[2].kind == ActionKind::recompute);
  CHECK(actions[2].tensor == 2);
  CHECK(actions[2].source_step == 2);
  CHECK(actions[2].ready_before_step == 5);
  // The temporary counts at step 5 only.
  auto resident = resident_bytes(g, life, actions);
  CHECK(resident == std::vector<int64_t>{100, 200, 300, 300, 350, 360});
}

TEST_CASE("budget 359: the chain's temporary would not fit at step 5, so x is moved instead") {
  TrainingGraph g = chain_graph();
  auto actions = plan(g, 359, true, {10, 10, 10, 10, 10, 10});
  for (const Action& a : actions) {
    CHECK(a.kind != ActionKind::recompute);
    CHECK(a.kind != ActionKind::discard);
  }
  REQUIRE(!actions.empty());
}

TEST_CASE("a chain whose pinned input would not fit where it runs is not offered") {
  // x (input, 100 B), y (100), z (100), p (200), q (50), e (10), f (10):
  //   step 0: x = X()   step 1: y = Conv(x)   step 2: z = Relu(y)   step 3: p = P()
  //   step 4: q = Q(p)  step 5: e = E(z, q)   step 6: f = F(x, e)
  // Live bytes: 100, 200, 300, 400, 450, 260, 120; at budget 300 steps 3 and 4 are over (by 100
  // and 150). Regenerating z before step 5 runs Conv(x) there: y is a temporary (100) and x, live
  // but unused at step 5, must be resident there (a pin): z + q + e + y + x = 360 > 300. So the
  // chain is not offered, and both x and z are moved (x off at 2-4 leaves step 5 at 160 + 100).
  TrainingGraph g;
  g.add_tensor("x", TensorKind::input, DType::u8, {100});
  for (auto [name, bytes] :
       {std::pair{"y", 100}, {"z", 100}, {"p", 200}, {"q", 50}, {"e", 10}, {"f", 10}})
    g.add_tensor(name, TensorKind::activation, DType::u8, {bytes});
  auto step = [&](const char* op, std::vector<TensorId> in, std::vector<TensorId> out) {
    add_step(g, op, std::move(in), std::move(out));
  };
  step("X", {}, {0});
  step("Conv", {0}, {1});
  step("Relu", {1}, {2});
  step("P", {}, {3});
  step("Q", {3}, {4});
  step("E", {2, 4}, {5});
  step("F", {0, 5}, {6});
  auto life = compute_lifetimes(g);
  std::vector<Action> actions;
  REQUIRE_NOTHROW(actions = plan(g, 300, true, {10, 10, 10, 10, 10, 10, 10}));
  for (const Action& a : actions) CHECK(a.kind != ActionKind::recompute);
  for (int64_t r : resident_bytes(g, life, actions)) CHECK(r <= 300);
}
