// The independent check of a hand-built planner test: the plan (graph, lifetimes, actions,
// budget) written as plan JSON (emit/plan_json.h) and run through autovm-inspect's verifier,
// which shares no code with the planner (tools/inspect/). Tests that use it get the binary from
// the AUTOVM_INSPECT environment variable (tests/swap/meson.build sets it).
#pragma once

#include <doctest/doctest.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

#include "analysis/arena.h"
#include "analysis/timeline.h"
#include "emit/plan_json.h"
#include "plan/plan.h"
#include "util/atomic_file.h"

namespace autovm::test {

// Runs `autovm-inspect verify` on the plan; true when it passes. On failure the verifier's
// report is in the test's output (INFO).
inline bool verifier_accepts(const TrainingGraph& g, const std::vector<Lifetime>& life,
                             const std::vector<Action>& actions, int64_t budget_bytes) {
  const char* inspect = std::getenv("AUTOVM_INSPECT");
  REQUIRE_MESSAGE(inspect != nullptr, "set AUTOVM_INSPECT to the autovm-inspect binary");
  Plan plan;
  plan.training.graph = g;
  plan.training.logits_shape = {1, 1};
  plan.lifetimes = life;
  plan.timeline = compute_timeline(g, life);
  plan.arena = layout_arena(g, life, 256);
  plan.options.budget_bytes = budget_bytes;
  plan.device = "test";
  plan.mechanism = "test";
  for (const Action& a : actions)
    if (!a.mechanism.empty()) plan.mechanism = a.mechanism;
  plan.actions = actions;
  static std::atomic<int> count{0};
  const auto dir = std::filesystem::temp_directory_path();
  const std::string file =
      (dir / ("autovm-verify-" + std::to_string(::getpid()) + "-" + std::to_string(count++) + ".json")).string();
  write_file_atomically(file, plan_to_json(plan));
  const std::string log = file + ".log";
  const std::string cmd = std::string(inspect) + " verify " + file + " > " + log + " 2>&1";
  const int rc = std::system(cmd.c_str());
  std::ifstream in(log);
  std::stringstream report;
  report << in.rdbuf();
  INFO("autovm-inspect verify: " << report.str());
  CHECK(rc == 0);
  std::filesystem::remove(file);
  std::filesystem::remove(log);
  return rc == 0;
}

}  // namespace autovm::test
