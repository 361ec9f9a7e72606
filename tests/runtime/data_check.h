// Drives a runtime through training steps like a trainer whose every step reads its inputs and
// writes its outputs: each tensor holds a pattern of its own id, written when its producer runs
// (or a recompute brings it back, or, for the batch and persistent tensors, before first use)
// and checked in full whenever a step reads it. At every step, in both of its moments
// (docs/execution-model.md, "The moment before a step"), the ranges of all tensors on the device
// (resident, or with a copy in flight) must be disjoint: before the step, where its chain
// temporaries are but not what it allocates as it starts (its outputs whose lifetime begins
// there and that it does not read, its workspace), and at the step, where the temporaries are
// gone. A tensor the step reads remotely (read_remote: off the device, its host copy put back in
// its range by the host backend) is read like any input and occupies its range at both moments
// of that step too. An independent check of any arena layout, planner's or packed. Needs a
// runtime with real memory on the host backend.
#pragma once

#include <autovm/autovm.hpp>
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace rt_test {

inline std::vector<unsigned char> pattern(int32_t id, int64_t bytes) {
  std::vector<unsigned char> out(static_cast<size_t>(bytes));
  uint64_t word = (static_cast<uint64_t>(id) + 1) * 0x9E3779B97F4A7C15ull;
  for (size_t i = 0; i < out.size(); ++i) {
    if (i % 8 == 0) word = word * 6364136223846793005ull + 1442695040888963407ull;
    out[i] = static_cast<unsigned char>(word >> (8 * (i % 8)));
  }
  return out;
}

class DataCheck {
 public:
  DataCheck(const autovm::Plan& plan, autovm::Runtime& rt) : plan_(plan), rt_(rt) {
    const int32_t n = plan.tensor_count();
    produced_by_.assign(static_cast<size_t>(n), -1);
    for (int64_t s = 0; s < plan.step_count(); ++s) {
      const autovm_step_info info = plan.step(s);
      for (size_t i = 0; i < info.output_count; ++i)
        if (produced_by_[static_cast<size_t>(info.outputs[i])] < 0)
          produced_by_[static_cast<size_t>(info.outputs[i])] = s;
    }
    for (int32_t t = 0; t < n; ++t)
      if (plan.tensor(t).persistent) write(t);  // the trainer's initial values
  }

  // One training step; returns the number of bytes checked.
  int64_t run_training_step() {
    int64_t checked = 0;
    std::vector<bool> fed(static_cast<size_t>(plan_.tensor_count()), false);
    for (int64_t s = 0; s < plan_.step_count(); ++s) {
      CAPTURE(s);
      rt_.step_begin(s);
      check_disjoint(s, true);
      check_disjoint(s, false);
      for (int64_t a = 0; a < plan_.action_count(); ++a) {  // the trainer's recomputes
        const autovm_action_info act = plan_.action(a);
        if (act.kind == AUTOVM_ACTION_RECOMPUTE && act.ready_before_step == s) write(act.tensor);
      }
      const autovm_step_info info = plan_.step(s);
      for (size_t i = 0; i < info.input_count; ++i) {
        const int32_t t = info.inputs[i];
        const autovm_tensor_info ti = plan_.tensor(t);
        if (!ti.persistent && produced_by_[static_cast<size_t>(t)] < 0 && !fed[static_cast<size_t>(t)]) {
          write(t);  // the batch: the trainer fills it before its first use
          fed[static_cast<size_t>(t)] = true;
        }
        checked += check(t, s);
      }
      for (size_t i = 0; i < info.output_count; ++i) write(info.outputs[i]);
      if (info.workspace >= 0) write(info.workspace);
      rt_.step_end(s);
    }
    return checked;
  }

 private:
  void write(int32_t t) {
    void* p = rt_.pointer(t);
    REQUIRE(p != nullptr);
    const auto bytes = pattern(t, plan_.tensor(t).bytes);
    std::memcpy(p, bytes.data(), bytes.size());
  }

  int64_t check(int32_t t, int64_t s) {
    const auto expected = pattern(t, plan_.tensor(t).bytes);
    const void* p = rt_.pointer(t);
    REQUIRE(p != nullptr);
    const bool intact = std::memcmp(p, expected.data(), expected.size()) == 0;
    CHECK_MESSAGE(intact, "tensor " << t << " ('" << plan_.tensor(t).name
                                    << "') does not hold its bytes at step " << s);
    return static_cast<int64_t>(expected.size());
  }

  // Whether step s allocates t as it starts (not there in the moment before it).
  bool allocated_by(int32_t t, int64_t s) const {
    const autovm_tensor_info ti = plan_.tensor(t);
    if (ti.persistent || ti.first_step != s) return false;
    const autovm_step_info info = plan_.step(s);
    if (info.workspace == t) return true;
    for (size_t i = 0; i < info.input_count; ++i)
      if (info.inputs[i] == t) return false;
    for (size_t i = 0; i < info.output_count; ++i)
      if (info.outputs[i] == t) return true;
    return false;
  }

  // Whether t is a chain temporary before step s (there in the moment before it only).
  bool temporary_at(int32_t t, int64_t s) const {
    const autovm_tensor_info ti = plan_.tensor(t);
    return !ti.persistent && ti.last_step < s;
  }

  void check_disjoint(int64_t s, bool before) {
    struct Range {
      uintptr_t begin, end;
      int32_t tensor;
    };
    std::vector<Range> on;
    std::vector<bool> remote(static_cast<size_t>(plan_.tensor_count()), false);
    for (int64_t a = 0; a < plan_.action_count(); ++a) {
      const autovm_action_info act = plan_.action(a);
      if (act.kind == AUTOVM_ACTION_READ_REMOTE && act.ready_before_step == s)
        remote[static_cast<size_t>(act.tensor)] = true;
    }
    for (int32_t t = 0; t < plan_.tensor_count(); ++t) {
      const autovm_residency r = rt_.residency(t);
      if (r != AUTOVM_RESIDENCY_RESIDENT && r != AUTOVM_RESIDENCY_EVICTING &&
          r != AUTOVM_RESIDENCY_PREFETCHING && !(r == AUTOVM_RESIDENCY_ON_HOST && remote[static_cast<size_t>(t)]))
        continue;
      const int64_t bytes = plan_.tensor(t).bytes;
      if (bytes == 0 || (before ? allocated_by(t, s) : temporary_at(t, s))) continue;
      const auto begin = reinterpret_cast<uintptr_t>(rt_.pointer(t));
      on.push_back({begin, begin + static_cast<uintptr_t>(bytes), t});
    }
    std::sort(on.begin(), on.end(), [](const Range& a, const Range& b) { return a.begin < b.begin; });
    for (size_t i = 1; i < on.size(); ++i)
      CHECK_MESSAGE(on[i].begin >= on[i - 1].end,
                    (before ? "before step " : "at step ") << s << " tensors " << on[i - 1].tensor << " and " << on[i].tensor
                               << " are both on the device and share bytes");
  }

  const autovm::Plan& plan_;
  autovm::Runtime& rt_;
  std::vector<int64_t> produced_by_;  // [tensor] its first producing step; -1: none
};

}  // namespace rt_test
