// Pieces the swap planner's tests share: a duplex 1 B/us link, a transfer action of 60 B on
// it, forward steps, and small graphs of activations built from a list (graph_of).
#pragma once

#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "ir/graph.h"
#include "plan/device_profile.h"
#include "plan/plan.h"

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

}  // namespace autovm::test
