// A plan the planner writes for ResNet-18 (batch 8) under half its peak, executed for two
// training steps on the host backend in accounting-only mode, strict, touching every step's
// inputs, outputs and workspace: no violation, the bytes moved are the plan's prediction, and
// the resident peak stays within the budget; and at its least budget with small workspaces,
// where the plan reads some inputs remotely, every byte a step reads is checked (data_check.h).
// AUTOVM_PLAN_EXE and AUTOVM_TEST_MODEL come from meson (tests/runtime/meson.build).
#include <autovm/autovm.hpp>

#include <filesystem>
#include <fstream>
#include <unistd.h>

#include "data_check.h"
#include "helpers.h"

namespace fs = std::filesystem;

namespace {

std::string env(const char* name) {
  const char* v = std::getenv(name);
  REQUIRE_MESSAGE(v != nullptr, name << " is not set (meson test sets it)");
  return v;
}

std::string quote(const std::string& s) { return "'" + s + "'"; }

nlohmann::json plan_model(const std::string& budget, const fs::path& out,
                          const std::string& extra = "") {
  std::string command = quote(env("AUTOVM_PLAN_EXE")) + " " + quote(env("AUTOVM_TEST_MODEL")) +
                        " --batch 8 --quiet -o " + quote(out.string()) + extra;
  if (!budget.empty()) command += " --budget " + budget;
  INFO(command);
  REQUIRE(std::system(command.c_str()) == 0);
  return nlohmann::json::parse(rt_test::read_text(out.string()));
}

// Two training steps of `plan` on a strict host arena laid out by `layout`, every byte a step
// reads checked (rt_test::DataCheck); the runtime's statistics after them.
autovm_stats two_checked_steps(const autovm::Plan& plan, autovm_layout layout) {
  autovm_runtime_options o;
  REQUIRE(autovm_runtime_options_init(&o) == AUTOVM_OK);
  o.strict = 1;
  o.layout = layout;
  o.host_arena_cap_bytes = int64_t{4} << 30;
  autovm::Runtime rt(plan, &o);
  REQUIRE(rt.stats().accounting_only == 0);
  rt_test::DataCheck data(plan, rt);
  for (int step = 0; step < 2; ++step) CHECK(data.run_training_step() > 0);
  return rt.stats();
}

}  // namespace

TEST_CASE("resnet18 under half its peak runs with no violation and the predicted traffic") {
  const fs::path dir = fs::temp_directory_path() / ("autovm_rt_" + std::to_string(getpid()));
  fs::create_directories(dir);
  const nlohmann::json unlimited = plan_model("", dir / "unlimited.json");
  const int64_t peak = unlimited["statistics"]["peak_bytes"].get<int64_t>();
  const int64_t budget = peak / 2;
  const nlohmann::json planned = plan_model(std::to_string(budget) + "B", dir / "plan.json");
  const nlohmann::json& prediction = planned["statistics"]["prediction"];
  const int64_t to_host = prediction["bytes_to_host"].get<int64_t>();
  const int64_t to_device = prediction["bytes_to_device"].get<int64_t>();
  REQUIRE(to_host > 0);  // the budget makes it swap

  autovm::Plan plan = autovm::Plan::load((dir / "plan.json").string());
  CHECK(plan.budget_bytes() == budget);
  autovm_runtime_options o;
  REQUIRE(autovm_runtime_options_init(&o) == AUTOVM_OK);
  o.strict = 1;
  o.host_arena_cap_bytes = 1;  // accounting only
  autovm::Runtime rt(plan, &o);
  REQUIRE(rt.stats().accounting_only == 1);
  const int64_t n = plan.step_count();
  for (int training_step = 1; training_step <= 2; ++training_step) {
    CAPTURE(training_step);
    for (int64_t s = 0; s < n; ++s) {
      CAPTURE(s);
      rt.step_begin(s);  // strict: throws over the budget
      const autovm_step_info info = plan.step(s);
      for (size_t i = 0; i < info.input_count; ++i) rt.touch(s, info.inputs[i]);
      for (size_t i = 0; i < info.output_count; ++i) rt.touch(s, info.outputs[i]);
      if (info.workspace >= 0) rt.touch(s, info.workspace);
      rt.step_end(s);
    }
    const autovm_stats st = rt.stats();
    CHECK(st.violations == 0);
    CHECK(st.bytes_to_host == training_step * to_host);
    CHECK(st.bytes_to_device == training_step * to_device);
    CHECK(st.peak_resident_bytes <= budget);
    CHECK(st.peak_resident_bytes == prediction["resident_peak_bytes"].get<int64_t>());
    CHECK(st.training_steps == training_step);
  }
  fs::remove_all(dir);
}

TEST_CASE("resnet18 under half its peak on an arena packed by residency: bytes intact, arena "
          "near the budget") {
  const fs::path dir = fs::temp_directory_path() / ("autovm_rt_packed_" + std::to_string(getpid()));
  fs::create_directories(dir);
  const nlohmann::json unlimited = plan_model("", dir / "unlimited.json");
  const int64_t budget = unlimited["statistics"]["peak_bytes"].get<int64_t>() / 2;
  plan_model(std::to_string(budget) + "B", dir / "plan.json");
  autovm::Plan plan = autovm::Plan::load((dir / "plan.json").string());
  int64_t sizes[2] = {0, 0};
  for (autovm_layout layout : {AUTOVM_LAYOUT_PLAN, AUTOVM_LAYOUT_PACKED}) {
    CAPTURE(layout);
    const autovm_stats st = two_checked_steps(plan, layout);
    CHECK(st.violations == 0);
    CHECK(st.peak_resident_bytes <= budget);
    sizes[layout == AUTOVM_LAYOUT_PACKED] = st.memory_bytes;
  }
  MESSAGE("ResNet-18 batch 8, budget " << budget << " B: the plan's arena " << sizes[0]
                                       << " B, packed " << sizes[1] << " B");
  CHECK(sizes[0] >= plan.arena_bytes());  // and the chain temporaries' room
  CHECK(sizes[1] < sizes[0]);
  // Fragmentation: packed ranges of tensors with several stretches on the device leave holes
  // (this plan's packing is about 1.5x the budget).
  CHECK(static_cast<double>(sizes[1]) <= 1.6 * static_cast<double>(budget));
  fs::remove_all(dir);
}

TEST_CASE("resnet18 at the least budget reads some inputs remotely: bytes intact, within the "
          "budget, on both layouts") {
  // With small convolution workspaces the least budget is set by steps whose inputs do not all
  // fit: the planner reads some of them remotely there (docs/execution-model.md, "Remote reads").
  const fs::path dir = fs::temp_directory_path() / ("autovm_rt_remote_" + std::to_string(getpid()));
  fs::create_directories(dir);
  const nlohmann::json planned = plan_model("min", dir / "plan.json", " --workspace-limit 1MB");
  int64_t remote = 0;
  for (const auto& a : planned["actions"]) remote += a["kind"] == "read_remote";
  MESSAGE("ResNet-18 batch 8 at the least budget: " << remote << " remote reads");
  REQUIRE_MESSAGE(remote > 0, "the planner made no remote reads: this case would check none");
  autovm::Plan plan = autovm::Plan::load((dir / "plan.json").string());
  for (autovm_layout layout : {AUTOVM_LAYOUT_PLAN, AUTOVM_LAYOUT_PACKED}) {
    CAPTURE(layout);
    const autovm_stats st = two_checked_steps(plan, layout);
    CHECK(st.violations == 0);
    CHECK(st.peak_resident_bytes <= plan.budget_bytes());
    CHECK(st.remote_reads == 2 * remote);
  }
  fs::remove_all(dir);
}
