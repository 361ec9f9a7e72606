// The lower bound (plan/bound.h, docs/lower-bound.md) on small graphs worked out by hand.
#include <doctest/doctest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "analysis/lifetimes.h"
#include "analysis/timeline.h"
#include "plan/bound.h"
#include "plan/residency.h"
#include "plan/simulator.h"
#include "plan/swap_planner.h"
#include "swap_test_util.h"

using namespace autovm;
using namespace autovm::test;

namespace {

// The planner's plans, with recomputation and without, take at least `bound_us`.
void check_plans_at_or_above(const TrainingGraph& g, const std::vector<Lifetime>& life,
                             const std::vector<double>& c, int64_t budget, double bound_us) {
  for (bool recompute : {true, false}) {
    CAPTURE(recompute);
    SwapOptions o;
    o.budget_bytes = budget;
    o.allow_recompute = recompute;
    auto actions = plan_swaps(g, life, c, slow_link(), o);
    CHECK(verifier_accepts(g, life, actions, budget));
    CHECK(simulate(g, actions, c, slow_link(), DeviceProfile{}).step_time_us >= bound_us - 1e-6);
  }
}
// A plan built by hand: checks that it stays within `budget` at every step, and returns its
// simulated step time on the slow link.
double by_hand_time(const TrainingGraph& g, const std::vector<Lifetime>& life,
                    const std::vector<Action>& actions, const std::vector<double>& c,
                    int64_t budget) {
  auto resident = resident_bytes(g, life, actions);
  CHECK(*std::max_element(resident.begin(), resident.end()) <= budget);
  CHECK(verifier_accepts(g, life, actions, budget));
  return simulate(g, actions, c, slow_link(), DeviceProfile{}).step_time_us;
}
// The terms both window cases share at step 6 (worked out in each): nothing forced, 30 us of
// window stall, y's 50 B moved and 61 B of x made again for 6.1 us. Returns bound(6)'s terms.
StepBoundTerms window_case_at6(const StepTimeBound& b) {
  CHECK(b.forced_stall_us == 0);
  CHECK(b.window_stall_us == doctest::Approx(30));
  auto at6 = std::find_if(b.steps.begin(), b.steps.end(),
                          [](const StepBoundTerms& t) { return t.step == 6; });
  REQUIRE(at6 != b.steps.end());
  CHECK(at6->moved_bytes == doctest::Approx(50).epsilon(1e-2));
  CHECK(at6->recompute_us == doctest::Approx(6.1).epsilon(1e-2));  // 61 B of x
  return *at6;
}
// The graph of the two cases on recomputes beside a window (docs/lower-bound.md): y (50 B) made by a
// dropout, x (100 B) by a Conv that reads y when `x_reads_y`, read again by the last step with
// y; fillers u, v, w, r, z (1 B); b (100), q (160), m (120) and k (`k_bytes`).
//   0: y = Dropout()  1: x = Conv() or Conv(y)  2: b = B()  3: u = U()  4: v = V(u)  5: w = W(v)
//   6: q = Q(w)       7: r = R(q)    8: m = M(r)    9: k = K(r)   10: z = Z(x, y)
TrainingGraph window_graph(int64_t k_bytes, bool x_reads_y) {
  TrainingGraph g;
  for (auto [name, bytes] :
       {std::pair<const char*, int64_t>{"y", 50}, {"x", 100}, {"b", 100}, {"u", 1}, {"v", 1},
        {"w", 1}, {"q", 160}, {"r", 1}, {"m", 120}, {"k", k_bytes}, {"z", 1}})
    g.add_tensor(name, TensorKind::activation, DType::u8, {bytes});
  add_step(g, "Dropout", {}, {0});
  add_step(g, "Conv", x_reads_y ? std::vector<TensorId>{0} : std::vector<TensorId>{}, {1});
  add_step(g, "B", {}, {2});
  add_step(g, "U", {}, {3});
  add_step(g, "V", {3}, {4});
  add_step(g, "W", {4}, {5});
  add_step(g, "Q", {5}, {6});
  add_step(g, "R", {6}, {7});
  add_step(g, "M", {7}, {8});
  add_step(g, "K", {7}, {9});
  add_step(g, "Z", {1, 0}, {10});
  return g;
}

}  // namespace

TEST_CASE("the lower bound, worked by hand") {
  std::vector<double> c = {10, 10, 10, 10, 10};
  SUBCASE("a cannot be regenerated (dropout): the excess must cross the link") {
    TrainingGraph g = five_steps("Dropout");
    auto life = compute_lifetimes(g);
    auto tl = compute_timeline(g, life);
    // Forced arrival at step 4: a is not used at 3, unavoidable(3) = c + d = 150 and
    // 150 + 100 > 200, so a is off at 3; nothing can regenerate it, so it arrives by a prefetch
    // issued when step 3 ends, and step 4 waits for it: F(4) = 100 us.
    // Forced departure at step 2, the mirror image: a is used at 1, unavoidable(2) = b + c =
    // 200, so a leaves by an eviction issued when step 1 ends, and step 2 waits for it:
    // D(2) = 100 us. C + F(4) + D(2) = 50 + 200 = 250 us.
    // E(2) = 300 - 200 = 100 B: start(2) >= max(20 + D(2), 100 us) = 120;
    //   end >= start + 10 + max(20 + F(4), 100) = 120 + 10 + 120 = 250.
    // E(3) = 50 B: max(30 + 100, 50) + 10 + max(10 + 100, 50) = 250. Bound: 250 us, that of
    // the best plan (evict a after 1, ready 120; prefetch it after 3, ready 240; step 4 to 250).
    // (Before forced departures the bound was 230 us.)
    auto b = lower_bound(g, life, tl.total, c, 200, slow_link());
    CHECK(b.forced_stall_us == doctest::Approx(200));
    CHECK(b.bound_us == doctest::Approx(250).epsilon(1e-6));
    CHECK(b.critical_step == -1);  // C + forced stalls: no step's bound is larger
    CHECK(b.set_by == BoundTerm::windows);
    CHECK(b.compute_us == doctest::Approx(50));
    auto p = plan(g, 200, false);
    CHECK(simulate(g, p, c, slow_link(), DeviceProfile{}).step_time_us >= b.bound_us);
  }
  SUBCASE("a can be regenerated by re-running step 0 (10 us for its 100 B)") {
    TrainingGraph g = five_steps("Conv");
    auto life = compute_lifetimes(g);
    auto tl = compute_timeline(g, life);
    // No forced stall: re-running step 0 before step 4 makes a there, unavoidable(4) = 200 with
    // a counted (step 4 uses it) and nothing else to hold (step 0 has no inputs).
    // Step 2, moving M bytes and regenerating 100 - M at 0.1 us/B. The moved bytes of a leave
    // after its last use before step 2 (step 1, release): start(2) >= max(C_<2, C_<=1 + M) =
    // 20 + M; they are back before its next use (step 4, deadline): M + C_>=4 = M + 10 after
    // step 2 ends:
    //   f(M) = 20 + M + 10 + max(20 + 0.1 (100 - M), M + 10), least at M = 0: 60 us.
    // Step 3 (E = 50): max(30, 20 + M) + 10 + max(10 + 0.1 (50 - M), M + 10): least where the
    // last two meet, M = 50/11, 40 + 10 + 50/11 = 54.5 us.
    // Bound: 60 us at step 2, that of the best plan (discard a, recompute it before step 4).
    // (Without release times and deadlines it was 58 us, with M = 20 leaving by step 2 while
    // compute ran since step 0.)
    auto b = lower_bound(g, life, tl.total, c, 200, slow_link());
    CHECK(b.forced_stall_us == 0);
    CHECK(b.bound_us == doctest::Approx(60).epsilon(1e-6));
    CHECK(b.critical_step == 2);
    CHECK(simulate(g, plan(g, 200, true), c, slow_link(), DeviceProfile{}).step_time_us ==
          doctest::Approx(60));
    // Explained (autovm-plan --explain-bound): the same bound, set by bound(2), and its terms at
    // M = 0: Dep(0) = C_<2 = 20, Rc(100) = 10, Arr(0) = C_>=4 = 10; a (100 B) is off-able and
    // regenerable. Steps 2 and 3 are the over-budget ones, both worked out.
    CHECK(b.steps.empty());  // only when asked
    auto x = lower_bound(g, life, tl.total, c, 200, slow_link(), MovableKinds{}, true, {}, true);
    CHECK(x.bound_us == doctest::Approx(b.bound_us));
    CHECK(x.set_by == BoundTerm::step);
    REQUIRE(x.steps.size() == 2);
    const StepBoundTerms& t = x.steps[0];
    CHECK(t.step == 2);
    CHECK(t.excess_bytes == 100);
    CHECK(t.off_able_bytes == 100);
    CHECK(t.regenerable_bytes == 100);
    CHECK(t.moved_bytes == doctest::Approx(0).epsilon(1e-3));
    CHECK(t.departure_us == doctest::Approx(20));
    CHECK(t.recompute_us == doctest::Approx(10));
    CHECK(t.arrival_us == doctest::Approx(10));
    CHECK(t.bound_us == doctest::Approx(60).epsilon(1e-6));
    CHECK(x.steps[1].step == 3);
    CHECK(x.steps[1].moved_bytes == doctest::Approx(50.0 / 11).epsilon(0.1));  // within 0.5 B
    CHECK(x.steps[1].bound_us == doctest::Approx(50 + 50.0 / 11).epsilon(1e-3));
  }
  SUBCASE("the same without recomputation: a must be moved, as if made by a dropout") {
    TrainingGraph g = five_steps("Conv");
    auto life = compute_lifetimes(g);
    auto tl = compute_timeline(g, life);
    // Nothing is regenerable: a's departure at step 2 and arrival at step 4 are forced (100 us
    // each, as in the dropout case above): 50 + 200 = 250 us. Allowed to recompute: 60 us.
    auto b = lower_bound(g, life, tl.total, c, 200, slow_link(), MovableKinds{}, false);
    CHECK(b.forced_stall_us == doctest::Approx(200));
    CHECK(b.bound_us == doctest::Approx(250).epsilon(1e-6));
    auto moved = plan(g, 200, false);
    CHECK(simulate(g, moved, c, slow_link(), DeviceProfile{}).step_time_us >= b.bound_us);
  }
  SUBCASE("within the budget the bound is the compute") {
    TrainingGraph g = five_steps("Conv");
    auto life = compute_lifetimes(g);
    auto b = lower_bound(g, life, compute_timeline(g, life).total, c, 300, slow_link());
    CHECK(b.bound_us == doctest::Approx(50));
    CHECK(b.critical_step == -1);
  }
}

TEST_CASE("the lower bound: moved bytes leave after their last use and are back by their next") {
  // One queue per direction at 1 B/us (slow_link), no fixed costs; budget 104 B.
  SUBCASE("release: a can only start leaving after step 1, not during step 0") {
    // a (100 B, a dropout's: never regenerated), b, c (2), d (102), e, f (2):
    //   step 0: a = Dropout()   step 1: b = B(a)   step 2: c = C(b)   step 3: d = D(c)
    //   step 4: e = E(d)        step 5: f = F(a, e)
    // Live: 100, 102, 104, 204, 204, 104; unavoidable: 100, 102, 4, 104, 104, 104. Steps 3 and 4
    // are 100 B over, and a alone is off-able there: a is off over steps 3-4 and moved.
    // Compute 100, 10, 10, 10, 10, 10 us: C = 150.
    // Forced: a arrives at step 5 (unavoidable(4) + a = 204 > 104): F(5) = 100 us. It need not
    // leave at step 2 (unavoidable(2) + a = 104 fits): no forced departure. C + F = 250 us.
    // bound(3), M = E = 100: a's evict starts after step 1 ends (its last use before 3), so
    //   start(3) >= max(C_<3, C_<=1 + 100) = max(120, 210) = 210,
    //   then c_3 = 10, then max(C_>3 + F_>3, 100 + C_>=5) = max(120, 110) = 120: 340 us.
    // bound(4): max(130, 210) + 10 + max(10 + 100, 100 + 10) = 330. Bound: 340 us, the best
    // plan's (evict a after step 1, 110-210 us; step 3 at 210-220, step 4 to 230; prefetch a
    // after step 4, 230-330; step 5 to 340). Without release times it was C + F = 250 us.
    TrainingGraph g = graph_of({100, 2, 2, 102, 2, 2},
                               {{"Dropout", {}, {0}}, {"B", {0}, {1}}, {"C", {1}, {2}},
                                {"D", {2}, {3}}, {"E", {3}, {4}}, {"F", {0, 4}, {5}}});
    std::vector<double> c = {100, 10, 10, 10, 10, 10};
    auto life = compute_lifetimes(g);
    auto b = lower_bound(g, life, compute_timeline(g, life).total, c, 104, slow_link());
    CHECK(b.forced_stall_us == doctest::Approx(100));
    CHECK(b.bound_us == doctest::Approx(340).epsilon(1e-6));
    CHECK(b.critical_step == 3);
    CHECK(simulate(g, plan(g, 104, true, c), c, slow_link(), DeviceProfile{}).step_time_us >=
          b.bound_us);
  }
  SUBCASE("deadline: a must be back before step 5, not by the end of step 6") {
    // The mirror image. a (100 B, a dropout's), b (2), c (102), d, e, f, g (2):
    //   step 0: a = Dropout()   step 1: b = B()      step 2: c = C(b)   step 3: d = D(c)
    //   step 4: e = E(d)        step 5: f = F(a, e)  step 6: g = G(f)
    // Live: 100, 102, 204, 204, 104, 104, 4; unavoidable: 100, 2, 104, 104, 4, 104, 4. Steps 2
    // and 3 are 100 B over; a, off-able there alone, is moved. Compute 10, 100, 10, 10, 10,
    // 10, 100 us: C = 250.
    // Forced: none (a may be resident at step 1 and at step 4: 102 and 104 B). C = 250 us.
    // bound(3), M = 100: start(3) >= max(C_<3, C_<=0 + 100) = 120; c_3 = 10; a's prefetch is
    // issued after step 3 ends and done before step 5 starts, followed by C_>=5 = 110:
    //   max(C_>3, 100 + 110) = 210: 340 us.
    // bound(2): max(110, 110) + 10 + max(130, 210) = 330 from the moves alone. Windows: a
    // cannot be resident at steps 2 and 3 (104 + 100 > 104), so it returns in (3, 5], 100 us
    // past step 4's 10: at least 90 us of stalls after step 3, which bound(2) now adds to the
    // compute after it: max(130 + 90, 210) = 220, bound(2) = 340 too, found first. Bound: 340
    // us, the best plan's (evict a after step 0, 10-110 us, hidden by step 1; steps 2, 3 at
    // 110-130; prefetch after step 3, 130-230; step 5 at 230-240, step 6 to 340). Without
    // deadlines it was C = 250 us.
    TrainingGraph g = graph_of({100, 2, 102, 2, 2, 2, 2},
                               {{"Dropout", {}, {0}}, {"B", {}, {1}}, {"C", {1}, {2}},
                                {"D", {2}, {3}}, {"E", {3}, {4}}, {"F", {0, 4}, {5}},
                                {"G", {5}, {6}}});
    std::vector<double> c = {10, 100, 10, 10, 10, 10, 100};
    auto life = compute_lifetimes(g);
    auto b = lower_bound(g, life, compute_timeline(g, life).total, c, 104, slow_link());
    CHECK(b.forced_stall_us == 0);
    CHECK(b.bound_us == doctest::Approx(340).epsilon(1e-6));
    CHECK(b.critical_step == 2);
    CHECK(simulate(g, plan(g, 104, true, c), c, slow_link(), DeviceProfile{}).step_time_us >=
          b.bound_us);
  }
}

TEST_CASE("the lower bound: a cover of the excess with whole tensors") {
  // One queue per direction at 1 B/us (slow_link), no fixed costs; budget 214 B; every step
  // 10 us (C = 70). a, b (100 B each) and c (10 B) are dropouts' (never regenerated):
  //   step 0: a = Dropout()   step 1: b = Dropout()   step 2: c = Dropout()
  //   step 3: d = D(c, a, b)  step 4: e = E(d)        step 5: f = F(e)
  //   step 6: g = G(c, a, b, f)
  // d, f, g 2 B, e 30 B. Live: 100, 200, 210, 212, 242, 242, 214; unavoidable at 4 and 5: 32.
  // Steps 4 and 5 are 28 B over; a, b, c are off-able there (released at 3, due at 6).
  // Forced: each of a, b, c fits beside the unavoidable bytes at 4 and at 5, but together
  // 210 B leave at 4 and arrive at 6 where 182 B of room is left: D(4) = F(6) = 28 us.
  // Whole tensors: c alone (10 B) cannot cover 28 B, so a or b is off over steps 4-5. At s = 4
  // its eviction runs after step 3 and before step 4, with no compute between: at least 100 us
  // there, of which the forced 28 are counted already (+72); its prefetch runs after step 4
  // and before step 6, past step 5's 10 us: at least 90 us there, against the forced 28
  // (+62): 70 + 56 + 72 + 62 = 260 us. Tighter, as the moved bytes are whole tensors no
  // recompute can make (docs/lower-bound.md, "Moved bytes that no recompute can replace"): the 28 B are at
  // least a or b, 100 B, leaving after step 3 (start(4) >= 40 + 100 = 140) and, off at 4 and
  // 5 alike, back after step 5 before step 6 (100 us, then step 6): the pair (4, 5) gives
  // 140 + 10 + 10 + 110 = 270 us. The best plan: evict a after step 3 (40-140 us), steps 4-5
  // (140-160), prefetch a after step 5 (160-260), step 6 to 270 us (a prefetch issued after
  // step 4 would make a resident at 5, over the budget). The planner's is that one.
  TrainingGraph g = graph_of({100, 100, 10, 2, 30, 2, 2},
                             {{"Dropout", {}, {0}}, {"Dropout", {}, {1}}, {"Dropout", {}, {2}},
                              {"D", {2, 0, 1}, {3}}, {"E", {3}, {4}}, {"F", {4}, {5}},
                              {"G", {2, 0, 1, 5}, {6}}});
  std::vector<double> c(7, 10);
  auto life = compute_lifetimes(g);
  auto tl = compute_timeline(g, life);
  REQUIRE(tl.total == std::vector<int64_t>{100, 200, 210, 212, 242, 242, 214});
  auto b = lower_bound(g, life, tl.total, c, 214, slow_link());
  CHECK(b.forced_stall_us == doctest::Approx(56));
  CHECK(b.bound_us == doctest::Approx(270).epsilon(1e-6));
  CHECK(b.set_by == BoundTerm::pair);
  CHECK(b.critical_step == 4);
  CHECK(b.pair_end == 5);
  CHECK(b.must_move_bytes == 28);
  CHECK(simulate(g, plan(g, 214, true, c), c, slow_link(), DeviceProfile{}).step_time_us >=
        b.bound_us);
  CHECK(simulate(g, plan(g, 214, true, c), c, slow_link(), DeviceProfile{}).step_time_us ==
        doctest::Approx(270));
  // Without recomputation the same: nothing here could be regenerated anyway.
  CHECK(lower_bound(g, life, tl.total, c, 214, slow_link(), MovableKinds{}, false).bound_us ==
        doctest::Approx(270).epsilon(1e-6));
}

TEST_CASE("the lower bound: a pair of steps, departures before one and arrivals after the other") {
  // One queue per direction at 1 B/us (slow_link), no fixed costs, no recomputation; budget
  // 60 B. a1, a2 20 B, p 40 B, q1-q3 10 B each, r 60 B, all dropouts' (never regenerated):
  //   step 0: a1, q1, q2, q3 = Dropout()   step 1: a2 = Dropout()   step 2: p = Dropout()
  //   step 3: Q(p)   step 4: U(a2)   step 5: V(a1)   step 6: r = Dropout()   step 7: W()
  //   step 8: X(q1, q2, q3)
  // Steps 0-6 take 10 us, 7 and 8 1 us (C = 72). Live: 50, 70, 110, 110, 70, 50, 90, 30, 30:
  // over the budget at 1 (10 B), 2 and 3 (50 B), 4 (10 B) and 6 (30 B).
  // Forced: a1 and q (50 B) leave at 1 together, where 40 B of room is left: D(1) = 10 us.
  // Nothing else is forced (C + F = 82). Single steps: bound(2), M = 50 (a1 and q, released at
  // 0, leave first): start(2) >= max(C_<2 + F = 30, C_0 + 50 = 60) = 60, then 10, then
  // max(C_>2 = 42, q due at 8 and a1 at 5: 1 + 50 = 51): 121 (141 with the windows below: a1
  // due at 5 is followed by steps 5-8 and at least 29 us of stalls, 20 + 22 + 29 = 71).
  // Pair (2, 6): start(2) >= 60 as above; from the end of step 2 to the start of step 6, steps
  // 3-5 (30 us) and the moved bytes due by 6 (a1 at 5, after q's 30 B due at 8: 20 B, then
  // step 5: 30 us): 30; step 6: 10; after it q (30 B, off at 6: r fills the budget) comes back
  // before step 8, then step 8: max(C_>6 = 2, 30 + 1) = 31. 60 + 10 + 30 + 10 + 31 = 141 us.
  // Windows after a step (docs/lower-bound.md, "Windows" in bound(s)): each q_i cannot be resident at step
  // 6 (60 + 10 > 60), so all three return in (6, 8], 30 us past step 7's 1: at least 29 us of
  // stalls after step 6. Pair (2, 3): start(2) >= 60, steps 2 and 3 (20 us), then at step 3
  // (E = 50, no recompute: 50 B moved, at best q and a1, the latest due) a1 is back before
  // step 5 (20 us), steps 5-8 take 22 us and the stalls after step 6 at least 29: Tail(3) =
  // max(C_>3 + 29 = 61, 20 + 22 + 29 = 71) = 71. Bound 60 + 10 + 0 + 10 + 71 = 151 us, the
  // best plan's: q and a1 leave after step 0, steps 2-3 at 60-80, a1 back after 3 by 100,
  // step 5 100-110, step 6 to 120, q back after 6 by 150, step 8 to 151 us.
  TrainingGraph g = graph_of({20, 20, 40, 10, 10, 10, 60},
                             {{"Dropout", {}, {0, 3, 4, 5}}, {"Dropout", {}, {1}},
                              {"Dropout", {}, {2}}, {"Q", {2}, {}}, {"U", {1}, {}},
                              {"V", {0}, {}}, {"Dropout", {}, {6}}, {"W", {}, {}},
                              {"X", {3, 4, 5}, {}}});
  std::vector<double> c = {10, 10, 10, 10, 10, 10, 10, 1, 1};
  auto life = compute_lifetimes(g);
  auto tl = compute_timeline(g, life);
  REQUIRE(tl.total == std::vector<int64_t>{50, 70, 110, 110, 70, 50, 90, 30, 30});
  auto b = lower_bound(g, life, tl.total, c, 60, slow_link(), MovableKinds{}, false);
  CHECK(b.forced_stall_us == doctest::Approx(10));
  CHECK(b.bound_us == doctest::Approx(151).epsilon(1e-6));
  CHECK(b.critical_step == 2);
  CHECK(b.must_move_bytes == 50);
  CHECK(simulate(g, plan(g, 60, false, c), c, slow_link(), DeviceProfile{}).step_time_us >=
        b.bound_us);
}

TEST_CASE("the lower bound: a sequence of three steps carries the earliest start") {
  // One queue per direction at 1 B/us (slow_link), no recomputation; budget 216 B.
  //   step 0: b = B()   step 1: c, d = C()   step 2: a, e = A()   step 3: D(a, d)
  //   step 4: E(c, e)   step 5: F(a, b, c)
  // a 70 B, b 20, c 40, d 50, e 90; steps of 11, 2, 3, 9, 19 and 16 us (C = 60). Live: 20, 110,
  // 270, 270, 220, 130: over the budget at 2 and 3 (54 B) and 4 (4 B).
  // Forced (docs/lower-bound.md, Together): c and d leave at 2 (90 B, 56 B of room beside a and e): D(2) =
  // 34; c and e arrive at 4 (130 B, room 96): F(4) = 34; a and b at 5 (90 B, room 86): F(5) = 4.
  // C + F = 132. Whole tensors of N (nothing can be made again) cover the excess: 60 B (b and
  // c, or b and 40 B of d or e) at 2 and 3, 20 B at 4.
  //   bound(2): Dep(60) = C_<=0 + 60 = 71 (b and c leave after step 0), c_2 = 3, then the
  //     compute and stalls after it, 44 + 38 = 82: 156.
  //   bound(3): Dep = 71, c_3 = 9, Arr(60) = 40 B due by 4 + C_>=4 + F(5) = 79: 159.
  //   bound(4): Dep(20) = C_<4 + F = 25 + 68 = 93, c_4 = 19, Arr(20) = 20 + 16: 148.
  //   The pair (3, 4): start(3) >= 71; between 3 and 4 the 40 B due by 4 arrive (40 us, more
  //     than F(4)): start(4) >= 71 + 9 + 40 = 120, then 19 and Arr(20) = 36: 175.
  //   The sequence 2, 3, 4: start(2) >= 71, and nothing due by 3 comes back before it, so
  //     start(3) >= 71 + 3 = 74; then start(4) >= 74 + 9 + 40 = 123: 123 + 19 + 36 = 178 us.
  // The best plan attains it: b and c evicted after steps 0 and 1 (11-31, 31-71 us), steps 2-3
  // to 83, c back after step 3 (83-123), step 4 to 142, b back after it (142-162), step 5 to
  // 178 us. The planner finds that plan.
  TrainingGraph g = graph_of({70, 20, 40, 50, 90},
                             {{"B", {}, {1}}, {"C", {}, {2, 3}}, {"A", {}, {0, 4}},
                              {"D", {0, 3}, {}}, {"E", {2, 4}, {}}, {"F", {0, 1, 2}, {}}});
  std::vector<double> c = {11, 2, 3, 9, 19, 16};
  auto life = compute_lifetimes(g);
  auto tl = compute_timeline(g, life);
  REQUIRE(tl.total == std::vector<int64_t>{20, 110, 270, 270, 220, 130});
  auto b = lower_bound(g, life, tl.total, c, 216, slow_link(), MovableKinds{}, false, {}, true);
  CHECK(b.forced_stall_us == doctest::Approx(72));
  std::vector<double> single;
  for (const StepBoundTerms& t : b.steps) single.push_back(t.bound_us);
  CHECK(single == std::vector<double>{156, 159, 148});
  CHECK(b.bound_us == doctest::Approx(178).epsilon(1e-6));
  CHECK(b.set_by == BoundTerm::pair);
  CHECK(b.sequence == std::vector<StepIndex>{2, 3, 4});
  CHECK(b.critical_step == 3);
  CHECK(b.pair_end == 4);
  std::vector<Action> by_hand = {act(ActionKind::evict, 1, 20, 0, 2),
                                 act(ActionKind::evict, 2, 40, 1, 2),
                                 act(ActionKind::prefetch, 2, 40, 3, 4),
                                 act(ActionKind::prefetch, 1, 20, 4, 5)};
  CHECK(by_hand_time(g, life, by_hand, c, 216) == doctest::Approx(178));
  CHECK(simulate(g, plan(g, 216, false, c), c, slow_link(), DeviceProfile{}).step_time_us ==
        doctest::Approx(178));
}

TEST_CASE("the lower bound: a pair's second step waits for what it moves itself to leave") {
  // One queue per direction at 1 B/us (slow_link), with recomputation; budget 176 B.
  //   step 0: b = Conv()   step 1: B1(b)   step 2: c = Dropout(b)   step 3: a, d = Conv()
  //   step 4: E(b, c, d)   step 5: F(a, d)
  // a 50 B, b 80, c 80, d 10; steps of 8, 13, 17, 16, 17 and 8 us (C = 79). Live: 80, 80, 160,
  // 220, 220, 60: 44 B over at 3 and 4. Nothing is forced.
  //   At 3, b and c are off-able (released at 2, due at 4); b can be made again before step 4
  //   by step 0 (8 us for 80 B), c cannot. At 4, a is off-able (released at 3, due at 5) and
  //   can be made again before step 5 by step 3 (16 us for 50 B).
  //   The pair (3, 4), M bytes moved at 3: start(3) >= Dep(M) = 38 + M, then step 3 (16),
  //   then before step 4 the larger of M arriving and 0.1 us a byte of b made again for the
  //   rest: 38 + M + 16 + max(M, 4.4 - 0.1 M), least at M = 0: start(4) >= 58.4.
  //   At 4, with M' bytes of a moved: they leave after step 3 ends, so start(4) >= 54 + M' as
  //   well; step 4 (17); then the larger of 8 + 0.32 us a byte of a made again for the rest and
  //   M' + 8 arriving. max(58.4, 54 + M') + 17 + 8 + 0.32 (44 - M') is least at M' = 4.4:
  //   96.07 us. (Without the departure of M' at step 4, the tail's best M' = 10.67 gives 58.4 +
  //   17 + 18.67 = 94.07.)
  // The planner's plan: b discarded and made again before step 4, a before step 5: 103 us.
  TrainingGraph g = graph_of({50, 80, 80, 10},
                             {{"Conv", {}, {1}}, {"B1", {1}, {}}, {"Dropout", {1}, {2}},
                              {"Conv", {}, {0, 3}}, {"E", {1, 2, 3}, {}}, {"F", {0, 3}, {}}});
  std::vector<double> c = {8, 13, 17, 16, 17, 8};
  auto life = compute_lifetimes(g);
  auto tl = compute_timeline(g, life);
  REQUIRE(tl.total == std::vector<int64_t>{80, 80, 160, 220, 220, 60});
  auto b = lower_bound(g, life, tl.total, c, 176, slow_link(), MovableKinds{}, true, {}, true);
  CHECK(b.forced_stall_us == 0);
  REQUIRE(b.steps.size() == 2);
  CHECK(b.steps[0].bound_us == doctest::Approx(83.4).epsilon(1e-3));   // at 3, M = 0
  CHECK(b.steps[1].bound_us == doctest::Approx(93.08).epsilon(1e-3));  // at 4, M = 0
  // The least over M is found to within half a byte: here 0.5 B is up to 0.3 us.
  CHECK(b.bound_us >= 96.07 - 1e-6);
  CHECK(b.bound_us <= 96.07 + 0.3);
  CHECK(b.set_by == BoundTerm::pair);
  CHECK(b.critical_step == 3);
  CHECK(b.pair_end == 4);
  check_plans_at_or_above(g, life, c, 176, b.bound_us);
  CHECK(simulate(g, plan(g, 176, true, c), c, slow_link(), DeviceProfile{}).step_time_us ==
        doctest::Approx(103));
}

TEST_CASE("the lower bound: whole tensors of equal size are each a candidate") {
  // 1 B/us each way, no fixed costs, budget 152 B; steps 10 us each but step 6, 100 us
  // (C = 170). a, b, c 50 B each (dropouts': never regenerated); d, f, g, h 2 B; e 80 B:
  //   step 0: a = Dropout()  step 1: b = Dropout()  step 2: c = Dropout()  step 3: d = D(a, b, c)
  //   step 4: e = E(d)       step 5: f = F(c)       step 6: g = G(b, f)    step 7: h = H(a, g)
  // Live: 50, 100, 150, 152, 232, 152, 104, 54: only step 4 is over, by 80 B; a, b, c are
  // off-able there, all released at 3, due at 7, 6 and 5.
  // Forced: a, b, c leave at 4 together, 150 B against 70 B of room: D(4) = 80 us (C + F = 250).
  // Whole tensors: no one 50 B tensor covers 80 B, so a cover moves one of a, b, c. Sorted by
  // size, a comes first and does not complete a cover alone; it is a candidate all the same
  // (only b and c would give 290 and 300). a: its eviction (50 us) is within the forced 80 us
  // before step 4; its prefetch has steps 5-6 (110 us) before step 7: +0, so 250.
  // bound(4), fractional: the 80 B leave after step 3: start(4) >= 40 + 80 = 120; c_4 = 10;
  // then the latest-due bytes, a's 50 (due at 7) and 30 of b's (due at 6): max(C_>4 = 120,
  // 30 + C_>=6 = 140, 80 + C_>=7 = 90) = 140: 270 us. But the 80 B are whole tensors that no
  // recompute can make (docs/lower-bound.md, "Moved bytes that no recompute can replace"): two of a, b, c,
  // 100 B, at best a and b: start(4) >= 40 + 100 = 140, c_4 = 10, then max(C_>4 = 120, b's
  // 50 B due at 6 + C_>=6 = 50 + 110 = 160, all 100 B due by 7 + C_>=7 = 110) = 160: 310 us,
  // the bound, and the planner's plan (a and b: 100 us before step 4, b back by step 6 past
  // 10 us, a by step 7).
  TrainingGraph g = graph_of({50, 50, 50, 2, 80, 2, 2, 2},
                             {{"Dropout", {}, {0}}, {"Dropout", {}, {1}}, {"Dropout", {}, {2}},
                              {"D", {0, 1, 2}, {3}}, {"E", {3}, {4}}, {"F", {2}, {5}},
                              {"G", {1, 5}, {6}}, {"H", {0, 6}, {7}}});
  std::vector<double> c = {10, 10, 10, 10, 10, 10, 100, 10};
  auto life = compute_lifetimes(g);
  auto tl = compute_timeline(g, life);
  REQUIRE(tl.total == std::vector<int64_t>{50, 100, 150, 152, 232, 152, 104, 54});
  auto b = lower_bound(g, life, tl.total, c, 152, slow_link());
  CHECK(b.forced_stall_us == doctest::Approx(80));
  CHECK(b.bound_us == doctest::Approx(310).epsilon(1e-6));
  CHECK(b.set_by == BoundTerm::step);
  CHECK(b.critical_step == 4);
  CHECK(simulate(g, plan(g, 152, true, c), c, slow_link(), DeviceProfile{}).step_time_us ==
        doctest::Approx(310));
}

TEST_CASE("the lower bound: the bytes no recompute can make leave after their own releases") {
  // a (100 B) made by a Conv with no inputs (a recompute can make it again); b1..b5 (24 B
  // each) by dropouts (none can); g (1 B) read at 7 and 8; c (159 B) made at 7 and read by
  // nothing after; k, f (1 B).
  //   0: a = Conv()  1: b1 = Dropout(a)  2: b2 = Dropout(b1)  ...  5: b5 = Dropout(b4)
  //   6: g = G(b5)   7: c = C(g)         8: k = K(g)          9: f = F(a, b1..b5, k)
  // Live: 100, 124, 148, 172, 196, 220, 221, then 380 at step 7, then 222, 222. Budget 230:
  // only step 7 is over, E = 150; unavoidable(7) = g + c = 160. Off-able there: a and b1..b5,
  // 220 B, each fitting beside unavoidable(7) on its own (no forced window, no forced stall).
  // Regenerable: a alone (its Conv again before step 9, or 8), so K = E - 100 = 50 B of the
  // b's must be moved, whole: three of them, 72 B. Each is evicted after its release (bi's last
  // use before 7 is step i + 1) and back before step 9.
  // Slow link, 1 B/us both ways; every step 10 us, C = 100. bound(7), over M in [72, 150]:
  //   Dep(M) = max(C_<7 = 70, C_<=1 + M) (a, released at 1, leaves first) = max(70, 20 + M);
  //   Dep_N(72) = max(70, C_<=2 + 72, C_<=3 + 48, C_<=4 + 24) = 102 (b1, b2, b3);
  //   Arr(M) = M + C_>=9 = M + 10; Arr_N(72) = 82; Rc(150 - M) = 0.1 us/B (a's Conv, 10 us
  //   for 100 B) x (150 - M); c_7 = 10, C_>7 = 20.
  //   With neither: max(70, 20 + M) + 10 + max(20 + Rc, M + 10), least at M = 50: 140.
  //   Now: max(102, 20 + M) + 10 + max(20 + Rc, max(82, M + 10)), least at M = 72: 194.
  // Near what a plan takes: a discarded and made again before step 9 (10 us); b1, b2, b3
  // evicted one after another from the end of step 2 (30 us) to 102 us, when step 7 starts;
  // back from its end (112) to 184, while step 8 runs; step 9 ends at 194 if a's recompute
  // runs beside that wait.
  // The whole-tensor term is 114 (some bi of 24 B moves: b1, 24 B before step 7 with 50 us of
  // compute since its release, and after it with 10: 100 + 0 + 14), C + windows 100: the bound
  // is 194 us, set by bound(7).
  TrainingGraph g;
  g.add_tensor("a", TensorKind::activation, DType::u8, {100});
  for (int i = 1; i <= 5; ++i)
    g.add_tensor("b" + std::to_string(i), TensorKind::activation, DType::u8, {24});
  for (auto [name, bytes] : {std::pair<const char*, int64_t>{"g", 1}, {"c", 159}, {"k", 1}, {"f", 1}})
    g.add_tensor(name, TensorKind::activation, DType::u8, {bytes});
  add_step(g, "Conv", {}, {0});
  for (TensorId i = 1; i <= 5; ++i) add_step(g, "Dropout", {i - 1}, {i});
  add_step(g, "G", {5}, {6});
  add_step(g, "C", {6}, {7});
  add_step(g, "K", {6}, {8});
  add_step(g, "F", {0, 1, 2, 3, 4, 5, 8}, {9});
  auto life = compute_lifetimes(g);
  auto tl = compute_timeline(g, life);
  REQUIRE(tl.total == std::vector<int64_t>{100, 124, 148, 172, 196, 220, 221, 380, 222, 222});
  std::vector<double> c(10, 10);
  auto x = lower_bound(g, life, tl.total, c, 230, slow_link(), MovableKinds{}, true, {}, true);
  CHECK(x.forced_stall_us == 0);
  CHECK(x.bound_us == doctest::Approx(194).epsilon(1e-3));
  CHECK(x.set_by == BoundTerm::step);
  CHECK(x.critical_step == 7);
  REQUIRE(x.steps.size() == 1);
  const StepBoundTerms& t = x.steps[0];
  CHECK(t.excess_bytes == 150);
  CHECK(t.off_able_bytes == 220);
  CHECK(t.regenerable_bytes == 100);
  CHECK(t.moved_bytes == doctest::Approx(72).epsilon(1e-2));
  CHECK(t.departure_us == doctest::Approx(102).epsilon(1e-3));
  CHECK(t.arrival_us == doctest::Approx(82).epsilon(1e-3));
  CHECK(t.recompute_us == doctest::Approx(7.8).epsilon(1e-2));
  CHECK(t.whole_tensor_us == doctest::Approx(114).epsilon(1e-3));
  // Every plan of the planner is at or above it.
  check_plans_at_or_above(g, life, c, 230, x.bound_us);
  // The plan above, built by hand, takes 204 us, the planner's too: a's recompute runs after
  // step 9's wait for the b's (as the runtime runs a step's recomputes after its waits), which
  // the bound does not assume.
  std::vector<Action> by_hand = {act(ActionKind::discard, 0, 100, 1, 2),
                                 act(ActionKind::evict, 1, 24, 2, 7),
                                 act(ActionKind::evict, 2, 24, 3, 7),
                                 act(ActionKind::evict, 3, 24, 4, 7),
                                 act(ActionKind::prefetch, 1, 24, 7, 9),
                                 act(ActionKind::prefetch, 2, 24, 7, 9),
                                 act(ActionKind::prefetch, 3, 24, 7, 9),
                                 act(ActionKind::recompute, 0, 100, 8, 9, 0)};
  auto resident = resident_bytes(g, life, by_hand);
  CHECK(*std::max_element(resident.begin(), resident.end()) <= 230);
  auto sim = simulate(g, by_hand, c, slow_link(), DeviceProfile{});
  CHECK(sim.start_us[7] == doctest::Approx(102));  // the third eviction done
  CHECK(sim.step_time_us == doctest::Approx(204));
}

TEST_CASE("the lower bound: bound(s) at every over-budget step of a small graph") {
  // a (100 B) made at step 0, read at step 1 and by the last step 99; between them a chain of
  // 10 B fillers f1..f98 (f1 = F(a), fk = F(f(k-1))) and e (1 B) = E(a, f98) at step 99.
  // Live: 100, 110, then a + f(k-1) + fk = 120 at each of steps 2..98, and 111 at step 99. With
  // the budget at 115, steps 2..98 are over it: 97 steps, more than the candidate steps of
  // docs/lower-bound.md (4 lists of 16, and the steps around forced stalls) can hold. The graph is small
  // (97 steps x 100 tensors), so bound(s) is worked out at every one of them: each appears once
  // in the explanation, in step order, and none is above the bound.
  TrainingGraph g;
  g.add_tensor("a", TensorKind::activation, DType::u8, {100});
  for (int k = 1; k <= 98; ++k)
    g.add_tensor("f" + std::to_string(k), TensorKind::activation, DType::u8, {10});
  g.add_tensor("e", TensorKind::activation, DType::u8, {1});
  add_step(g, "A", {}, {0});
  for (TensorId k = 1; k <= 98; ++k) add_step(g, "F", {k - 1}, {k});
  add_step(g, "E", {0, 98}, {99});
  auto life = compute_lifetimes(g);
  auto tl = compute_timeline(g, life);
  std::vector<double> c(100, 10);
  auto x = lower_bound(g, life, tl.total, c, 115, slow_link(), MovableKinds{}, true, {}, true);
  REQUIRE(x.steps.size() == 97);
  double most = 0;
  for (size_t i = 0; i < x.steps.size(); ++i) {
    CHECK(x.steps[i].step == StepIndex(i) + 2);
    CHECK(x.steps[i].excess_bytes == 5);
    most = std::max(most, x.steps[i].bound_us);
  }
  CHECK(x.bound_us >= most);
  CHECK(x.bound_us >= 1000);  // at least the compute, 100 steps of 10 us
  // The same bound without the explanation.
  CHECK(lower_bound(g, life, tl.total, c, 115, slow_link()).bound_us == doctest::Approx(x.bound_us));
}

TEST_CASE("the lower bound: a recompute that cannot run beside a window's transfer adds to it") {
  // y (50 B) made by a dropout (no recompute can make it again), x (100 B) by a Conv with no
  // inputs (one can); both read again by the last step. Fillers u, v, w, r, z (1 B); b (100),
  // q (160), m (120) and k (`k_bytes`) read by nothing later, or by the next step.
  //   0: y = Dropout()  1: x = Conv()  2: b = B()     3: u = U()     4: v = V(u)  5: w = W(v)
  //   6: q = Q(w)       7: r = R(q)    8: m = M(r)    9: k = K(r)   10: z = Z(x, y)
  // Live (k = 120 B): 50, 150, 250, 151, 152, 152, 311, 311, 271, 271, 151. Budget 200.
  // Unavoidable: 161 at steps 6 and 7 (w or r, and q), 121 at 8 (r, m) and 9 (r, k). So y
  // cannot be resident at 6 or 7 (211 B) and no recompute makes it: a forced window for its
  // prefetch, (7, 10], 50 us on the slow link (1 B/us) past 20 us of compute (steps 8 and 9),
  // 30 us of extra time; its eviction's window (0, 6] holds 50 us of compute, none. C = 110
  // (11 steps of 10 us), so C + the windows term = 140.
  // bound(6): E = 111 B, off-able y and x, x regenerable (Conv again, 10 us for 100 B). K =
  // 111 - 100 = 11 B of y, so y (50 B) moves: M in [50, 111]. Dep(M) = max(C_<6 = 60, C_<=0
  // + M) = 60 at M = 50; Arr(50) = 50 + C_>=10 = 60; Rc(111 - 50) = 6.1; C_>6 = 40; W_>6 = 30.
  //   Before: Dep + c_6 + max(C_>6 + max(Rc, W_>6), Arr) = 60 + 10 + max(40 + 30, 60) = 140.
  //   Now x's recompute cannot run while y's prefetch is in flight: that is before step 8 or
  //   9 (y's window), with x resident from there until step 10, and x does not fit beside
  //   unavoidable(8) or (9) (221 B). So it adds to the windows term: 60 + 10 + 40 + 30 + 6.1 =
  //   146.1 us (docs/lower-bound.md, Recomputes beside the windows). bound(7) and the pairs give the same.
  // With k of 1 B, x fits at step 9 (r, k and x: 102 B, and y beside them, 152): its
  // recompute before step 9 may run while y's prefetch (issued when step 7 ends) is in flight,
  // and the bound stays 140. A plan takes that: y evicted after step 0 and back from the end of
  // step 7 (80 us to 130, beside x's recompute and step 9), x discarded and made again before
  // step 9: 140 us. With k of 120 B, x must wait for step 10, after y's arrival: 150.
  auto build = [](int64_t k_bytes) { return window_graph(k_bytes, false); };
  std::vector<double> c(11, 10);
  for (int64_t k_bytes : {120, 1}) {
    CAPTURE(k_bytes);
    TrainingGraph g = build(k_bytes);
    auto life = compute_lifetimes(g);
    auto tl = compute_timeline(g, life);
    if (k_bytes == 120)
      REQUIRE(tl.total == std::vector<int64_t>{50, 150, 250, 151, 152, 152, 311, 311, 271, 271, 151});
    auto x = lower_bound(g, life, tl.total, c, 200, slow_link(), MovableKinds{}, true, {}, true);
    const StepBoundTerms at6 = window_case_at6(x);
    CHECK(at6.departure_us == doctest::Approx(60));
    CHECK(at6.recompute_apart_us == doctest::Approx(k_bytes == 120 ? 6.1 : 0).epsilon(1e-2));
    if (k_bytes == 120) {
      CHECK(at6.bound_us == doctest::Approx(146.1).epsilon(1e-3));
      CHECK(x.bound_us == doctest::Approx(146.1).epsilon(1e-3));
    } else {
      CHECK(at6.bound_us == doctest::Approx(140).epsilon(1e-3));
      CHECK(x.bound_us == doctest::Approx(140).epsilon(1e-3));
    }
    check_plans_at_or_above(g, life, c, 200, x.bound_us);
  }
  // The plan above for k of 1 B, built by hand: 140 us, the bound.
  TrainingGraph g = build(1);
  auto life = compute_lifetimes(g);
  std::vector<Action> by_hand = {act(ActionKind::evict, 0, 50, 0, 6),
                                 act(ActionKind::discard, 1, 100, 1, 2),
                                 act(ActionKind::prefetch, 0, 50, 7, 10),
                                 act(ActionKind::recompute, 1, 100, 8, 9, 1)};
  CHECK(by_hand_time(g, life, by_hand, c, 200) == doctest::Approx(140));
}

TEST_CASE("the lower bound: a recompute that reads a window's tensor never runs beside its transfer") {
  // The graph of the case above with k of 1 B, but x's Conv reads y, and step 2 takes 20 us
  // (C = 120), so that y's eviction, now after step 1, still has 50 us of compute (steps 2-5)
  // for its 50 us: no extra time there. y's prefetch window is (7, 10] as before: 50 us past
  // 20 us of compute, 30 us of extra; C + the windows term = 150.
  //   0: y = Dropout()  1: x = Conv(y)  2: b = B()  ...  9: k = K(r)  10: z = Z(x, y)
  // x is regenerable at 6 with y resident (at step 9: r, k, x and y, 152 B). Its recompute
  // reads y, so it runs after y's prefetch is complete (execution-model.md, rule 3: step t
  // waits for it, then recomputes): never while y's transfer is in flight, although it fits
  // beside it. bound(6): M = 50 (y), Dep = max(C_<6 = 70, C_<=1 + 50 = 70) = 70, c_6 = 10,
  // C_>6 = 40, Rc(61 B of x) = 6.1 us, all apart: 70 + 10 + 40 + max(6.1, 30 + 6.1) =
  // 156.1 us (150 when the recompute was taken as able to run beside y's prefetch).
  // The best plan: y evicted after step 1 (20-70 us, beside steps 2-5), x discarded; y back
  // from the end of step 7 (90-140 us; not sooner, 161 B being unavoidable at 7), x made
  // again before step 10 once y is there (140-150), step 10 to 160 us.
  TrainingGraph g = window_graph(1, true);
  std::vector<double> c(11, 10);
  c[2] = 20;
  auto life = compute_lifetimes(g);
  auto tl = compute_timeline(g, life);
  REQUIRE(tl.total == std::vector<int64_t>{50, 150, 250, 151, 152, 152, 311, 311, 271, 152, 151});
  auto x = lower_bound(g, life, tl.total, c, 200, slow_link(), MovableKinds{}, true, {}, true);
  const StepBoundTerms at6 = window_case_at6(x);
  CHECK(at6.departure_us == doctest::Approx(70));
  CHECK(at6.recompute_apart_us == doctest::Approx(6.1).epsilon(1e-2));
  CHECK(at6.bound_us == doctest::Approx(156.1).epsilon(1e-3));
  CHECK(x.bound_us == doctest::Approx(156.1).epsilon(1e-3));
  check_plans_at_or_above(g, life, c, 200, x.bound_us);
  std::vector<Action> by_hand = {act(ActionKind::evict, 0, 50, 1, 6),
                                 act(ActionKind::discard, 1, 100, 1, 2),
                                 act(ActionKind::prefetch, 0, 50, 7, 10),
                                 act(ActionKind::recompute, 1, 100, 9, 10, 1)};
  CHECK(by_hand_time(g, life, by_hand, c, 200) == doctest::Approx(160));
}
