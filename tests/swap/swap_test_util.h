// Pieces the swap planner's tests share: a duplex 1 B/us link and a slow one-queue link,
// transfer actions, forward steps, small graphs of activations built from a list (graph_of),
// and the hand-worked graphs several test files use (five_steps, chain_graph, eleven_steps).
#pragma once

#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "ir/graph.h"
#include "plan/device_profile.h"
#include "plan/plan.h"
#include "plan/simulator.h"
#include "analysis/lifetimes.h"
#include "plan/swap_planner.h"
#include "verify_plan.h"

namespace autovm::test {

inline Mechanism duplex_link() {  // 1 byte per microsecond each way, both at once
  Mechanism m;
  m.name = "mapped";
  m.to_host = {0.001, 0};
  m.to_device = {0.001, 0};
  m.duplex = true;
  return m;
}

inline Action transfer(ActionKind kind, TensorId t, StepIndex after, StepIndex ready) {
  Action a;
  a.kind = kind;
  a.tensor = t;
  a.bytes = 60;
  a.after_step = after;
  a.ready_before_step = ready;
  a.mechanism = "mapped";
  return a;
}

// Appends a forward step of `op` reading `in` and writing `out` (no workspace).
inline void add_step(TrainingGraph& g, const char* op, std::vector<TensorId> in,
                     std::vector<TensorId> out) {
  Step st;
  st.id = g.step_count();
  st.op = op;
  st.phase = Phase::forward;
  st.inputs = std::move(in);
  st.outputs = std::move(out);
  g.steps.push_back(st);
}

// Appends a forward step of op "Op" reading `in` and writing `out`.
inline void add_op_step(TrainingGraph& g, std::vector<TensorId> in, std::vector<TensorId> out) {
  add_step(g, "Op", std::move(in), std::move(out));
}

// Activations a, b, c, ... of the given bytes (u8), then steps (op, inputs, outputs by index).
using StepSpec = std::tuple<const char*, std::vector<TensorId>, std::vector<TensorId>>;
inline TrainingGraph graph_of(const std::vector<int64_t>& bytes, const std::vector<StepSpec>& steps) {
  TrainingGraph g;
  for (size_t i = 0; i < bytes.size(); ++i)
    g.add_tensor(std::string(1, char('a' + i)), TensorKind::activation, DType::u8, {bytes[i]});
  for (const auto& [op, in, out] : steps) add_step(g, op, in, out);
  return g;
}

inline Mechanism slow_link() {
  Mechanism m;
  m.name = "staged";
  m.to_host = {0.001, 0};    // 1 byte per microsecond
  m.to_device = {0.001, 0};
  return m;
}

// An action of a plan built by hand; transfers on the slow link's mechanism.
inline Action act(ActionKind kind, TensorId t, int64_t bytes, StepIndex after, StepIndex ready,
           StepIndex source = -1) {
  bool moves = kind == ActionKind::evict || kind == ActionKind::prefetch;
  Action a;
  a.kind = kind;
  a.tensor = t;
  a.bytes = bytes;
  a.after_step = after;
  a.ready_before_step = ready;
  a.source_step = source;
  a.mechanism = moves ? "staged" : "";
  return a;
}

// a (100 B), b (100), c (100), d (50), e (50); all activations.
//   step 0: a = A()        step 1: b = B(a)       step 2: c = C(b)
//   step 3: d = D(c)       step 4: e = E(a, d)
// Live bytes: 100, 200, 300, 250, 200. Only a has a gap: used at 1 and 4, off possible at 2-3.
inline TrainingGraph five_steps(const char* producer_of_a) {
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

// A recompute chain. x (input, 100 B), y (100), z (100), p (200), q (50), e (10):
//   step 0: x = X()    (an input: nothing can regenerate it)
//   step 1: y = Conv(x)      y dies after step 2
//   step 2: z = Relu(y)      z is used again at step 5
//   step 3: p = P()   step 4: q = Q(p)   step 5: e = E(x, z, q)
// Live bytes: 100, 200, 300, 400, 450, 260. Gaps: x [2, 4], z [3, 4].
// At budget 350 steps 3 and 4 are over (by 50 and 100). Moving x or z over the slow link costs
// 100 us each way with at most 10 us of compute to hide behind; regenerating z costs 20 us: run
// Conv again (x is resident at step 5) to make y, a temporary in the moment before step 5 only,
// then Relu. That moment holds x, z, q and y: 350 bytes, exactly the budget; step 5 itself
// holds x, z, q and e (which it allocates as it starts): 260.
// (e_bytes: e's size, 10 unless a case says otherwise.)
inline TrainingGraph chain_graph(int64_t e_bytes = 10) {
  TrainingGraph g;
  g.add_tensor("x", TensorKind::input, DType::u8, {100});
  for (auto [name, bytes] :
       {std::pair<const char*, int64_t>{"y", 100}, {"z", 100}, {"p", 200}, {"q", 50}, {"e", e_bytes}})
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

// y and x (60 B each) and nine 0-byte links between the steps:
//   s0: y = A()     s1: l1 = B(y)     s2-s4: l2..l4, each from the one before
//   s5: x = X(l4)   s6-s7: l6, l7     s8: l8 = H(l7, y)     s9: l9     s10: J(l9, x)
// y is used at 0, 1 and 8; x at 5 and 10. Budget 100: the two never fit together.
inline TrainingGraph eleven_steps() {
  TrainingGraph g;
  TensorId y = g.add_tensor("y", TensorKind::activation, DType::u8, {60});
  TensorId x = g.add_tensor("x", TensorKind::activation, DType::u8, {60});
  std::vector<TensorId> link(11, kNoTensor);
  for (int s = 1; s <= 10; ++s)
    link[size_t(s)] = g.add_tensor("l" + std::to_string(s), TensorKind::activation, DType::u8, {0});
  auto step = [&](std::vector<TensorId> in, std::vector<TensorId> out) {
    add_op_step(g, std::move(in), std::move(out));
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

// eleven_steps, its lifetimes and 100 us a step, on the duplex link.
struct ElevenSteps {
  TrainingGraph g = eleven_steps();
  std::vector<Lifetime> life = compute_lifetimes(g);
  std::vector<double> c = std::vector<double>(11, 100);
  double simulated(const std::vector<Action>& actions) const {
    return simulate(g, actions, c, duplex_link(), DeviceProfile{}).step_time_us;
  }
};

// plan_swaps on the slow link; the plan also passes the independent verifier.
inline std::vector<Action> plan(const TrainingGraph& g, int64_t budget, bool recompute,
                         std::vector<double> times = {10, 10, 10, 10, 10}) {
  auto life = compute_lifetimes(g);
  SwapOptions o;
  o.budget_bytes = budget;
  o.allow_recompute = recompute;
  std::vector<Action> actions = plan_swaps(g, life, times, slow_link(), o);
  CHECK(verifier_accepts(g, life, actions, budget));
  return actions;
}

}  // namespace autovm::test
