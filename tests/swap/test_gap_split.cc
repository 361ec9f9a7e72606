// gap_splits and split_at (plan/gap_split.h) on a five-step graph worked out by hand.
#include <doctest/doctest.h>

#include "analysis/lifetimes.h"
#include "plan/gap_split.h"
#include "plan/gaps.h"
#include "swap_test_util.h"

using namespace autovm;

namespace {

// x (input, 5 B), a (activation, 40 B), b (activation, 10 B), gb (10 B), ga (40 B) gradients:
//   forward   s0: a = F(x)    s1: b = G(a)
//   backward  s2: gb = H(b)   s3: ga = K(gb)   s4: L(ga, a)
// a's gap (1, 4) runs from a forward use to a backward one over steps 2 and 3; b's (1, 2) holds
// no step. A split of a needs a and its producer's input x: 45 B beside unavoidable(t), which is
// b + gb = 20 B at step 2 and gb + ga = 50 B at step 3.
struct Case {
  Case() {
    TensorId x = g.add_tensor("x", TensorKind::input, DType::u8, {5});
    a = g.add_tensor("a", TensorKind::activation, DType::u8, {40});
    TensorId b = g.add_tensor("b", TensorKind::activation, DType::u8, {10});
    TensorId gb = g.add_tensor("gb", TensorKind::activation_grad, DType::u8, {10});
    TensorId ga = g.add_tensor("ga", TensorKind::activation_grad, DType::u8, {40});
    TensorId out = g.add_tensor("out", TensorKind::activation_grad, DType::u8, {0});
    test::add_op_step(g, {x}, {a});
    test::add_op_step(g, {a}, {b});
    test::add_op_step(g, {b}, {gb});
    test::add_op_step(g, {gb}, {ga});
    test::add_op_step(g, {ga, a}, {out});
    for (StepIndex s = 2; s < 5; ++s) g.steps[size_t(s)].phase = Phase::backward;
    life = compute_lifetimes(g);
    unavoidable = unavoidable_bytes(g, life);
  }
  std::vector<GapSplit> splits(int64_t budget, size_t tensors = 4) const {
    return gap_splits(g, life, unavoidable, budget, MovableKinds{}, RecomputeOps{}, tensors);
  }
  TrainingGraph g;
  TensorId a = kNoTensor;
  std::vector<Lifetime> life;
  std::vector<int64_t> unavoidable;
};

std::vector<std::pair<TensorId, StepIndex>> pairs(const std::vector<GapSplit>& s) {
  std::vector<std::pair<TensorId, StepIndex>> out;
  for (const GapSplit& x : s) out.emplace_back(x.tensor, x.at);
  return out;
}

}  // namespace

TEST_CASE("gap splits: backward steps inside a forward-to-backward gap where the chain fits") {
  Case c;
  REQUIRE(c.unavoidable[2] == 20);
  REQUIRE(c.unavoidable[3] == 50);
  using P = std::vector<std::pair<TensorId, StepIndex>>;
  CHECK(pairs(c.splits(100)) == P{{c.a, 2}, {c.a, 3}});  // 65 and 95 B
  CHECK(pairs(c.splits(94)) == P{{c.a, 2}});             // 95 B does not fit at step 3
  CHECK(pairs(c.splits(64)).empty());                    // nor 65 B at step 2
  CHECK(pairs(c.splits(100, 0)).empty());                // no tensor
}

TEST_CASE("split_at adds the step to the tensor's uses, in order, once") {
  Case c;
  REQUIRE(c.life[size_t(c.a)].uses == std::vector<StepIndex>{0, 1, 4});
  std::vector<Lifetime> split = split_at(c.life, {c.a, 3});
  CHECK(split[size_t(c.a)].uses == std::vector<StepIndex>{0, 1, 3, 4});
  CHECK(split[size_t(c.a)].first == 0);
  CHECK(split[size_t(c.a)].last == 4);
  CHECK(split_at(split, {c.a, 3})[size_t(c.a)].uses == std::vector<StepIndex>{0, 1, 3, 4});
  CHECK(c.life[size_t(c.a)].uses == std::vector<StepIndex>{0, 1, 4});  // a copy
}
