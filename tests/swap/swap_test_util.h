// Pieces the simulator-judged planner passes' tests share: a duplex 1 B/us link, a transfer
// action of 60 B on it, and forward steps of op "Op".
#pragma once

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

// Appends a forward step of op "Op" reading `in` and writing `out`.
inline void add_op_step(TrainingGraph& g, std::vector<TensorId> in, std::vector<TensorId> out) {
  Step st;
  st.id = g.step_count();
  st.op = "Op";
  st.phase = Phase::forward;
  st.inputs = std::move(in);
  st.outputs = std::move(out);
  g.steps.push_back(st);
}

}  // namespace autovm::test
