// autovm-plan --reserve (analysis/step_reserve.h) on a hand-built three-step graph: the
// reserve joins each step's workspace, so the memory timeline counts it at that step only.
#include <doctest/doctest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "analysis/lifetimes.h"
#include "analysis/step_reserve.h"
#include "analysis/timeline.h"
#include "util/error.h"

using namespace autovm;

namespace {

// step 0: a (100 B) -> b (200 B), with a 50 B workspace; step 1: b -> c (300 B);
// step 2: c -> d (10 B). Live bytes without a reserve: 350, 500, 310.
TrainingGraph three_steps() {
  TrainingGraph g;
  TensorId a = g.add_tensor("a", TensorKind::input, DType::u8, {100});
  TensorId b = g.add_tensor("b", TensorKind::activation, DType::u8, {200});
  TensorId c = g.add_tensor("c", TensorKind::activation, DType::u8, {300});
  TensorId d = g.add_tensor("d", TensorKind::activation, DType::u8, {10});
  TensorId ws = g.add_tensor("s0/workspace", TensorKind::workspace, DType::u8, {50});
  auto add = [&](std::string node, TensorId in, TensorId out, TensorId w) {
    Step s;
    s.id = g.step_count();
    s.op = "Relu";
    s.node = std::move(node);
    s.inputs = {in};
    s.outputs = {out};
    s.workspace = w;
    g.steps.push_back(s);
  };
  add("s0", a, b, ws);
  add("s1", b, c, kNoTensor);
  add("s2", c, d, kNoTensor);
  return g;
}

std::string write_file(const std::string& text) {
  auto path = std::filesystem::temp_directory_path() /
              ("autovm-reserve-" + std::to_string(::getpid()) + ".json");
  std::ofstream(path) << text;
  return path.string();
}

std::vector<int64_t> live_bytes(const TrainingGraph& g) {
  return compute_timeline(g, compute_lifetimes(g)).total;
}

}  // namespace

TEST_CASE("a reserve per step joins the step's workspace and counts at that step only") {
  TrainingGraph g = three_steps();
  REQUIRE(live_bytes(g) == std::vector<int64_t>{350, 500, 310});
  std::string path = write_file(R"({"step_bytes": [25, 0, 1000]})");
  CHECK(apply_step_reserve(path, g) == 1025);
  // Step 0 had a workspace: it grows from 50 to 75 B. Step 2 had none: a new one of 1000 B.
  CHECK(g.tensor(4).bytes == 75);
  CHECK(g.tensor(4).shape == Shape{75});
  CHECK(g.step(1).workspace == kNoTensor);
  REQUIRE(g.step(2).workspace == 5);
  CHECK(g.tensor(5).name == "s2/Relu/reserve_step2");
  CHECK(g.tensor(5).kind == TensorKind::workspace);
  CHECK(g.tensor(5).bytes == 1000);
  CHECK(live_bytes(g) == std::vector<int64_t>{375, 500, 1310});
  // Each step records its part (steps[].reserve_bytes in the plan).
  CHECK(g.step(0).reserve_bytes == 25);
  CHECK(g.step(1).reserve_bytes == 0);
  CHECK(g.step(2).reserve_bytes == 1000);
  std::filesystem::remove(path);
}

TEST_CASE("a reserve by node names the steps it is for") {
  TrainingGraph g = three_steps();
  std::string path = write_file(R"({"by_node": {"s1/Relu": 40}})");
  CHECK(apply_step_reserve(path, g) == 40);
  CHECK(live_bytes(g) == std::vector<int64_t>{350, 540, 310});
  std::filesystem::remove(path);
}

TEST_CASE("a bad reserve file is a usage error that names the file and the fault") {
  auto fails_with = [](const std::string& text, const std::string& part) {
    TrainingGraph g = three_steps();
    std::string path = write_file(text);
    try {
      apply_step_reserve(path, g);
      FAIL("accepted: " << text);
    } catch (const Error& e) {
      CHECK(e.kind() == ErrorKind::usage);
      CHECK_MESSAGE(std::string(e.what()).find(part) != std::string::npos, e.what());
      CHECK(std::string(e.what()).find(path) != std::string::npos);
    }
    std::filesystem::remove(path);
  };
  fails_with(R"({"step_bytes": [1, 2]})", "has 2 entries but the training step has 3 steps");
  fails_with(R"({"step_bytes": [1, -2, 3]})", "step_bytes[1] must be a non-negative whole number");
  fails_with(R"({"step_bytes": [1, 2.5, 3]})", "step_bytes[1] must be a non-negative whole number");
  fails_with(R"({"by_node": {"s9/Relu": 1}})", "matches no step");
  fails_with(R"({"by_node": {"s1/Relu": null}})", "by_node['s1/Relu'] must be a non-negative");
  fails_with(R"({"step_bytes": [0, 0, 0], "by_node": {}})", "exactly one of");
  fails_with("not json", "is not valid JSON");
  // Numbers out of range: too large for a double, and a reserve no device holds.
  fails_with(R"({"step_bytes": [1, 1e999, 3]})", "is not valid JSON at byte 24 (after field \"step_bytes\")");
  fails_with(R"({"step_bytes": [1, 9223372036854775807, 3]})",
             "step_bytes[1] must be a non-negative whole number of bytes, at most 2^50");
  fails_with(R"({"step_bytes": [1, -9223372036854775808, 3]})", "step_bytes[1] must be a non-negative");
  TrainingGraph g = three_steps();
  // A directory is refused, not read as an empty file.
  try {
    apply_step_reserve(std::filesystem::temp_directory_path().string(), g);
    FAIL("a directory was accepted");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("it is a directory") != std::string::npos);
  }
  CHECK_THROWS_AS(apply_step_reserve("/nonexistent/reserve.json", g), Error);
}
