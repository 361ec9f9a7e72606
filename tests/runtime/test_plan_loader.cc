// The plan loader: valid plans load with the right numbers; every malformed plan is
// AUTOVM_ERR_PLAN with a message naming the field and index, never a crash.
#include <autovm/autovm.hpp>
#include <sys/stat.h>
#include <unistd.h>

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "helpers.h"

using nlohmann::json;
using rt_test::load_text;
using rt_test::plan_json;

TEST_CASE("a valid plan loads with its tensors, steps and actions") {
  autovm::Plan plan = autovm::Plan::load(rt_test::plan_path("evict.json"));
  CHECK(plan.tensor_count() == 6);
  CHECK(plan.step_count() == 5);
  CHECK(plan.action_count() == 2);
  CHECK(plan.arena_bytes() == 6144);
  CHECK(plan.budget_bytes() == 5632);
  const int32_t a = plan.tensor_id("a");
  CHECK(a == 2);
  autovm_tensor_info info = plan.tensor(a);
  CHECK(std::string(info.name) == "a");
  CHECK(info.kind == AUTOVM_TENSOR_ACTIVATION);
  CHECK(info.bytes == 2048);
  CHECK(info.offset == 2048);
  CHECK(info.first_step == 0);
  CHECK(info.last_step == 3);
  CHECK(info.persistent == 0);
  CHECK(plan.tensor(plan.tensor_id("w")).persistent == 1);
  autovm_step_info step = plan.step(3);
  CHECK(std::string(step.op) == "MulGrad");
  REQUIRE(step.input_count == 3);
  CHECK(step.inputs[2] == 5);
  CHECK(step.workspace == -1);
  CHECK(plan.step(1).workspace == 4);
  autovm_action_info action = plan.action(1);
  CHECK(action.kind == AUTOVM_ACTION_PREFETCH);
  CHECK(action.after_step == 2);
  CHECK(action.ready_before_step == 3);
  CHECK_THROWS_AS(plan.tensor_id("nope"), autovm::RuntimeError);
}

TEST_CASE("aliases find their tensor") {
  json j = plan_json("evict.json");
  j["tensors"][2]["aliases"] = {"a_flat", "a_view"};
  autovm::Plan plan = autovm::Plan::from_memory(j.dump());
  CHECK(plan.tensor_id("a_view") == 2);
}

TEST_CASE("a missing file is AUTOVM_ERR_IO naming the path") {
  autovm_plan* plan = nullptr;
  CHECK(autovm_plan_load("/nonexistent/plan.json", &plan) == AUTOVM_ERR_IO);
  CHECK(plan == nullptr);
  CHECK(std::string(autovm_last_error()).find("/nonexistent/plan.json") != std::string::npos);
}

TEST_CASE("a directory or a FIFO is AUTOVM_ERR_IO naming the path, without waiting") {
  char tmpl[] = "/tmp/autovm_plan_dir_XXXXXX";
  REQUIRE(mkdtemp(tmpl) != nullptr);
  const std::string dir = tmpl, fifo = dir + "/plan.json";
  REQUIRE(mkfifo(fifo.c_str(), 0600) == 0);
  for (const std::string& path : {dir, fifo}) {
    CAPTURE(path);
    autovm_plan* plan = nullptr;
    CHECK(autovm_plan_load(path.c_str(), &plan) == AUTOVM_ERR_IO);
    CHECK(plan == nullptr);
    const std::string message = autovm_last_error();
    CHECK(message.find("cannot read plan '" + path + "'") != std::string::npos);
    CHECK(message.find(path == dir ? "it is a directory" : "not a regular file") != std::string::npos);
  }
  ::unlink(fifo.c_str());
  ::rmdir(dir.c_str());
}

TEST_CASE("numbers out of range are AUTOVM_ERR_PLAN naming the field") {
  // The mutations of evict.json that once crashed autovm-inspect (tests/runtime/fuzz_corpus).
  const std::pair<std::string, std::vector<std::string>> cases[] = {
      {"bytes_1e999.json", {"not valid JSON at byte", "(after field \"bytes\")", "1e999"}},
      {"bytes_int64_min.json", {"tensors[2].bytes: -9223372036854775808 is out of range"}},
      {"bytes_int64_max.json", {"tensors[2].offset", "lies beyond the arena"}},
  };
  for (const auto& c : cases) {
    const std::string path = rt_test::plan_path("../fuzz_corpus/" + c.first);
    CAPTURE(path);
    autovm_plan* plan = nullptr;
    CHECK(autovm_plan_load(path.c_str(), &plan) == AUTOVM_ERR_PLAN);
    const std::string message = autovm_last_error();
    CAPTURE(message);
    for (const std::string& part : c.second) CHECK(message.find(part) != std::string::npos);
  }
}

TEST_CASE("a NULL argument is AUTOVM_ERR_INVALID_ARGUMENT naming the function and the argument") {
  autovm_plan* plan = nullptr;
  int64_t count = 0;
  autovm_step_info step;
  const std::pair<std::function<autovm_status()>, std::string> cases[] = {
      {[&] { return autovm_plan_load(nullptr, &plan); }, "autovm_plan_load: path is NULL"},
      {[&] { return autovm_plan_load("x.json", nullptr); }, "autovm_plan_load: out is NULL"},
      {[&] { return autovm_plan_load_from_memory("{}", 2, nullptr); }, "autovm_plan_load_from_memory: out is NULL"},
      {[&] { return autovm_plan_step_count(nullptr, &count); }, "autovm_plan_step_count: plan is NULL"},
      {[&] { return autovm_plan_step_info(nullptr, 0, &step); }, "autovm_plan_step_info: plan is NULL"},
      {[&] { return autovm_step_begin(nullptr, 0, nullptr); }, "autovm_step_begin: runtime is NULL"},
      {[&] { return autovm_runtime_stats(nullptr, nullptr); }, "autovm_runtime_stats: runtime is NULL"},
  };
  for (const auto& c : cases) {  // no structured binding: CAPTURE's lambda cannot take one in clang 14
    const std::string& message = c.second;
    CAPTURE(message);
    CHECK(c.first() == AUTOVM_ERR_INVALID_ARGUMENT);
    CHECK(std::string(autovm_last_error()) == message);
  }
}

TEST_CASE("a NULL pool or plan is AUTOVM_ERR_INVALID_ARGUMENT naming the function") {
  autovm_plan* plan = nullptr;
  CHECK(autovm_plan_load(nullptr, &plan) == AUTOVM_ERR_INVALID_ARGUMENT);
  CHECK(std::string(autovm_last_error()) == "autovm_plan_load: path is NULL");
  int32_t count = 0;
  CHECK(autovm_plan_tensor_count(nullptr, &count) == AUTOVM_ERR_INVALID_ARGUMENT);
  CHECK(std::string(autovm_last_error()) == "autovm_plan_tensor_count: plan is NULL");
  void* base = nullptr;
  int64_t bytes = 0;
  CHECK(autovm_pool_find(nullptr, &count, &base, &bytes) == AUTOVM_ERR_INVALID_ARGUMENT);
  CHECK(std::string(autovm_last_error()) == "autovm_pool_find: pool is NULL");
}

// Each case: an edit of evict.json, and words the message must contain.
struct Malformed {
  const char* what;
  std::function<void(json&)> edit;
  std::vector<std::string> message;
};

TEST_CASE("malformed plans are AUTOVM_ERR_PLAN with a message naming the field") {
  const std::vector<Malformed> cases = {
      {"wrong schema_version", [](json& j) { j["schema_version"] = 2; },
       {"schema_version", "2 is not 1"}},
      {"schema_version a string", [](json& j) { j["schema_version"] = "1"; },
       {"schema_version", "not an integer"}},
      {"no schema_version", [](json& j) { j.erase("schema_version"); },
       {"schema_version", "missing"}},
      {"another execution model", [](json& j) { j["execution_model"] = "autovm-2"; },
       {"execution_model"}},
      {"budget 0", [](json& j) { j["options"]["budget_bytes"] = 0; },
       {"options.budget_bytes", "out of range"}},
      {"input id out of range", [](json& j) { j["steps"][2]["inputs"][0] = 9; },
       {"steps[2].inputs[0]", "9 is out of range"}},
      {"workspace id out of range", [](json& j) { j["steps"][1]["workspace"] = -1; },
       {"steps[1].workspace"}},
      {"action tensor out of range", [](json& j) { j["actions"][0]["tensor"] = 6; },
       {"actions[0].tensor"}},
      {"offset beyond the arena", [](json& j) { j["tensors"][3]["offset"] = 6000; },
       {"tensors[3].offset", "beyond the arena", "6144"}},
      {"offset + bytes overflows", [](json& j) {
         j["tensors"][3]["offset"] = 9223372036854775000LL;
       },
       {"tensors[3].offset", "beyond the arena"}},
      {"negative bytes", [](json& j) { j["tensors"][5]["bytes"] = -1; },
       {"tensors[5].bytes", "-1 is out of range"}},
      {"fractional bytes", [](json& j) { j["tensors"][5]["bytes"] = 1.5; },
       {"tensors[5].bytes", "not an integer"}},
      {"huge unsigned bytes", [](json& j) { j["tensors"][5]["bytes"] = 18446744073709551615ULL; },
       {"tensors[5].bytes", "out of range"}},
      {"tensor id not its position", [](json& j) { j["tensors"][1]["id"] = 0; },
       {"tensors[1].id"}},
      {"duplicate names", [](json& j) { j["tensors"][1]["name"] = "x"; },
       {"tensors[1].name", "'x'"}},
      {"unknown tensor kind", [](json& j) { j["tensors"][0]["kind"] = "weights"; },
       {"tensors[0].kind", "weights"}},
      {"steps out of order", [](json& j) { std::swap(j["steps"][1], j["steps"][2]); },
       {"steps[1].id", "sorted"}},
      {"no steps", [](json& j) {
         j["steps"] = json::array();
       },
       {"steps", "empty"}},
      {"tensors not an array", [](json& j) { j["tensors"] = json::object(); },
       {"tensors", "not an array"}},
      {"lifetime past the last step", [](json& j) { j["lifetimes"][3]["last"] = 5; },
       {"lifetimes[3].last"}},
      {"lifetimes missing one", [](json& j) { j["lifetimes"].erase(5); },
       {"lifetimes", "5 entries for 6 tensors"}},
      {"unknown action kind", [](json& j) { j["actions"][0]["kind"] = "swap"; },
       {"actions[0].kind", "swap"}},
      {"action bytes differ", [](json& j) { j["actions"][0]["bytes"] = 100; },
       {"actions[0]", "bytes 100", "2048"}},
      {"evict ready before issued", [](json& j) { j["actions"][0]["ready_before_step"] = 1; },
       {"actions[0]", "ready_before_step 1"}},
      {"ready_before_step past the end", [](json& j) { j["actions"][0]["ready_before_step"] = 6; },
       {"actions[0].ready_before_step", "out of range"}},
      {"prefetch without an evict", [](json& j) { j["actions"].erase(0); },
       {"actions[0]", "prefetch of 'a'", "on the host"}},
      {"prefetch before the evict completes", [](json& j) {
         j["actions"][0]["after_step"] = 0;
         j["actions"][0]["ready_before_step"] = 3;
         j["actions"][1]["after_step"] = 1;
       },
       {"actions[1]", "before actions[0]", "completes"}},
      {"evict twice", [](json& j) {
         j["actions"][1] = j["actions"][0];
         j["actions"][1]["after_step"] = 2;
         j["actions"][1]["ready_before_step"] = 3;
       },
       {"actions[1]", "evict of 'a'"}},
      {"evict before the tensor exists", [](json& j) {
         j["actions"][0]["tensor"] = 5;
         j["actions"][0]["bytes"] = 1024;
       },
       {"actions[0]", "outside the lifetime"}},
      {"discard with a late ready_before_step", [](json& j) {
         j["actions"][0]["kind"] = "discard";
         j["actions"][0]["ready_before_step"] = 3;
       },
       {"actions[0]", "after_step + 1"}},
      {"recompute without a source step", [](json& j) {
         j["actions"][0]["kind"] = "discard";
         j["actions"][1]["kind"] = "recompute";
       },
       {"actions[1].source_step", "missing"}},
      {"advise without advice", [](json& j) {
         j["actions"].push_back({{"kind", "advise"}, {"tensor", 1}, {"bytes", 0},
                                 {"after_step", 0}, {"ready_before_step", 1}});
       },
       {"actions[2].advice", "missing"}},
      {"persistent tensor left on the host", [](json& j) {
         j["actions"].push_back({{"kind", "evict"}, {"tensor", 1}, {"bytes", 1024},
                                 {"after_step", 4}, {"ready_before_step", 5}});
       },
       {"'w'", "persistent", "ends the training step off the GPU"}},
  };
  for (const Malformed& c : cases) {
    CAPTURE(c.what);
    json j = plan_json("evict.json");
    c.edit(j);
    std::string error;
    CHECK(load_text(j.dump(), error) == AUTOVM_ERR_PLAN);
    CAPTURE(error);
    for (const std::string& words : c.message) CHECK(error.find(words) != std::string::npos);
    CHECK(error.find("autovm-plan") != std::string::npos);  // says what to do
  }
}

TEST_CASE("truncated or non-JSON text is AUTOVM_ERR_PLAN, at every length") {
  const std::string text = rt_test::read_text(rt_test::plan_path("evict.json"));
  std::string error;
  CHECK(load_text(text.substr(0, text.size() / 2), error) == AUTOVM_ERR_PLAN);
  CHECK(error.find("not valid JSON") != std::string::npos);
  CHECK(load_text("", error) == AUTOVM_ERR_PLAN);
  CHECK(load_text("[1, 2]", error) == AUTOVM_ERR_PLAN);
  CHECK(error.find("not an object") != std::string::npos);
  CHECK(load_text(std::string(100000, '['), error) == AUTOVM_ERR_PLAN);
  for (size_t n = 0; n < text.size(); n += 37) {
    CAPTURE(n);
    CHECK(load_text(text.substr(0, n), error) == AUTOVM_ERR_PLAN);
    CHECK(!error.empty());
  }
  CHECK(load_text(text, error) == AUTOVM_OK);
}
