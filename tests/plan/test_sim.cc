// Device profiles, the cost model, the simulator and the baseline policies on hand-built
// training graphs, with expected times worked out by hand in the comments; then seeded random
// CNN chains whose baseline plans are checked by a residency checker written here (it shares
// no code with baselines.cc).
//
// Units of the test profile: 1 GB/s moves 1000 B per microsecond; 1 TFLOP/s is 1e6 flop/us.
#include <doctest/doctest.h>

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>

#include "analysis/lifetimes.h"
#include "../swap/verify_plan.h"
#include "plan/baselines.h"
#include "plan/cost_model.h"
#include "plan/device_profile.h"
#include "plan/profile_search.h"
#include "plan/simulator.h"
#include "util/error.h"

using namespace autovm;
using nlohmann::json;

namespace {

// Round numbers: transfers of the mechanisms at 1 GB/s with no fixed cost; demand paging
// 1 GB/s + 5 us per tensor; driver eviction 2 GB/s + 5 us per tensor.
const char* kTestProfile = R"({
  "schema_version": 1, "name": "test", "description": "round numbers", "sources": ["by hand"],
  "memory_bytes": 1000000, "f32_tflops": 1, "f16_tflops": 2, "bf16_tflops": 4,
  "memory_bandwidth_gbps": 1, "step_overhead_us": 0.5,
  "mechanisms": [
    {"name": "half", "description": "one direction at a time", "duplex": false,
     "to_device": {"bandwidth_gbps": 1, "fixed_us": 0}, "to_host": {"bandwidth_gbps": 1, "fixed_us": 0}},
    {"name": "full", "description": "both directions at once", "duplex": true,
     "to_device": {"bandwidth_gbps": 1, "fixed_us": 0}, "to_host": {"bandwidth_gbps": 1, "fixed_us": 0}}],
  "default_mechanism": "half",
  "demand_paging": {"bandwidth_gbps": 1, "fixed_us": 5},
  "driver_eviction": {"bandwidth_gbps": 2, "fixed_us": 5},
  "discard_gbps": 10
})";

DeviceProfile test_profile() { return parse_device_profile(kTestProfile, "test"); }

Step& step(TrainingGraph& g, std::string op, Phase phase, std::vector<TensorId> in,
           std::vector<TensorId> out, TensorId ws = kNoTensor) {
  Step s;
  s.id = g.step_count();
  s.op = std::move(op);
  s.phase = phase;
  s.node = "n" + std::to_string(s.id);
  s.inputs = std::move(in);
  s.outputs = std::move(out);
  s.workspace = ws;
  g.steps.push_back(s);
  return g.steps.back();
}

Step& fwd(TrainingGraph& g, std::vector<TensorId> in, std::vector<TensorId> out, TensorId ws = kNoTensor) {
  return step(g, "Op", Phase::forward, std::move(in), std::move(out), ws);
}

TensorId bytes_tensor(TrainingGraph& g, const std::string& name, TensorKind kind, int64_t bytes) {
  return g.add_tensor(name, kind, DType::u8, {bytes});
}

Action act(ActionKind kind, TensorId t, int64_t bytes, StepIndex after, StepIndex ready,
           const std::string& mechanism = "") {
  Action a;
  a.kind = kind;
  a.tensor = t;
  a.bytes = bytes;
  a.after_step = after;
  a.ready_before_step = ready;
  a.mechanism = mechanism;
  return a;
}

std::string error_of(const std::function<void()>& f, ErrorKind expected = ErrorKind::usage) {
  try {
    f();
  } catch (const Error& e) {
    CHECK(e.kind() == expected);
    return e.what();
  }
  FAIL("no error thrown");
  return "";
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// A file in a fresh temporary folder, removed with it.
struct TempDir {
  std::filesystem::path path;
  TempDir() {
    static int count = 0;
    path = std::filesystem::temp_directory_path() /
           ("autovm-test-sim-" + std::to_string(getpid()) + "-" + std::to_string(count++));
    std::filesystem::create_directories(path);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  std::string write(const std::string& name, const std::string& text) const {
    std::ofstream(path / name) << text;
    return (path / name).string();
  }
};

// ---- An independent residency checker (brute force over steps; execution-model.md) --------

struct Residency {
  std::vector<std::vector<char>> on;  // [tensor][step]
  std::vector<int64_t> bytes;         // [step]
};

bool uses_at(const TrainingGraph& g, TensorId t, StepIndex s) {
  const Step& st = g.step(s);
  return std::count(st.inputs.begin(), st.inputs.end(), t) > 0 ||
         std::count(st.outputs.begin(), st.outputs.end(), t) > 0 || st.workspace == t;
}

// Checks rules 1, 3, 4, 5 and 6 of the execution model and returns the residency it implies.
Residency check_plan(const TrainingGraph& g, const std::vector<Lifetime>& life,
                     const std::vector<Action>& actions) {
  const StepIndex n = g.step_count();
  Residency r;
  r.on.assign(g.tensors.size(), std::vector<char>(static_cast<size_t>(n), 0));
  r.bytes.assign(static_cast<size_t>(n), 0);
  for (const Tensor& t : g.tensors) {
    const Lifetime& l = life[static_cast<size_t>(t.id)];
    std::vector<const Action*> mine;
    for (const Action& a : actions)
      if (a.tensor == t.id) mine.push_back(&a);
    // Rule 4's exception: a persistent tensor prefetched with no earlier evict starts on the host.
    bool starts_off = false;
    for (const Action* a : mine) {
      if (a->kind != ActionKind::prefetch) continue;
      bool evicted_before = std::any_of(mine.begin(), mine.end(), [&](const Action* e) {
        return e->kind == ActionKind::evict && e->after_step < a->after_step;
      });
      if (!evicted_before) {
        INFO("tensor " << t.name << ": prefetch without an earlier evict");
        CHECK(l.persistent);
        bool kept_on_host = std::any_of(mine.begin(), mine.end(), [&](const Action* e) {
          return e->kind == ActionKind::evict && e->ready_before_step == n;
        });
        CHECK(kept_on_host);
        starts_off = true;
      }
    }
    for (const Action* a : mine) {
      INFO("tensor " << t.name << " action after " << a->after_step << " ready " << a->ready_before_step);
      if (a->kind == ActionKind::evict || a->kind == ActionKind::prefetch) {
        for (StepIndex s = a->after_step + 1; s < a->ready_before_step; ++s)
          CHECK_FALSE(uses_at(g, t.id, s));  // rule 3
        CHECK(a->ready_before_step > a->after_step);
      }
      if (a->kind == ActionKind::discard) CHECK(a->ready_before_step == a->after_step + 1);
      if (a->kind == ActionKind::recompute) {
        CHECK(a->after_step == a->ready_before_step - 1);
        bool discarded_before = std::any_of(mine.begin(), mine.end(), [&](const Action* d) {
          return d->kind == ActionKind::discard && d->after_step < a->after_step;
        });
        CHECK(discarded_before);  // rule 4
      }
      // Rule 6: every change of residency happens within the lifetime (or at its end).
      StepIndex at = (a->kind == ActionKind::evict || a->kind == ActionKind::recompute)
                         ? a->ready_before_step : a->after_step + 1;
      if (!(starts_off && a->kind == ActionKind::prefetch)) {
        CHECK(at >= l.first);
        CHECK(at <= l.last + 1);
      }
    }
    bool on = !starts_off;
    for (StepIndex s = 0; s < n; ++s) {
      for (const Action* a : mine) {
        if ((a->kind == ActionKind::evict && a->ready_before_step == s) ||
            (a->kind == ActionKind::discard && a->after_step + 1 == s))
          on = false;
      }
      for (const Action* a : mine) {
        if ((a->kind == ActionKind::prefetch && a->after_step + 1 == s) ||
            (a->kind == ActionKind::recompute && a->ready_before_step == s))
          on = true;
      }
      bool live = l.first <= s && s <= l.last;
      r.on[static_cast<size_t>(t.id)][static_cast<size_t>(s)] = on && live;
      if (on && live) r.bytes[static_cast<size_t>(s)] += t.bytes;
    }
  }
  for (StepIndex s = 0; s < n; ++s) {  // rule 1
    const Step& st = g.step(s);
    auto resident = [&](TensorId t) {
      INFO("step " << s << " uses " << g.tensor(t).name);
      CHECK(r.on[static_cast<size_t>(t)][static_cast<size_t>(s)]);
    };
    for (TensorId t : st.inputs) resident(t);
    for (TensorId t : st.outputs) resident(t);
    if (st.workspace != kNoTensor) resident(st.workspace);
  }
  for (const Action& a : actions) {  // rule 5
    if (a.kind != ActionKind::recompute) continue;
    for (TensorId x : g.step(a.source_step).inputs) {
      INFO("recompute of " << g.tensor(a.tensor).name << " needs " << g.tensor(x).name);
      CHECK(r.on[static_cast<size_t>(x)][static_cast<size_t>(a.ready_before_step)]);
    }
  }
  return r;
}

// ---- A CNN chain: forward layers 'c' (Conv), 'r' (Relu), 'p' (MaxPool); a loss; backward
// steps with the uses of compiler/training/gradient_rules.cc; one SGD step per weight. ----

TrainingGraph cnn_chain(const std::string& layers, std::mt19937& rng) {
  std::uniform_int_distribution<int64_t> size(1, 64);
  TrainingGraph g;
  auto act_bytes = [&]() { return size(rng) * 1000; };
  TensorId x = bytes_tensor(g, "x", TensorKind::input, act_bytes());
  TensorId label = bytes_tensor(g, "label", TensorKind::label, 64);
  std::vector<TensorId> in, out, weight;
  TensorId cur = x;
  for (size_t i = 0; i < layers.size(); ++i) {
    std::string id = std::to_string(i);
    TensorId y = bytes_tensor(g, "y" + id, TensorKind::activation, act_bytes());
    TensorId w = kNoTensor;
    if (layers[i] == 'c') {
      w = bytes_tensor(g, "w" + id, TensorKind::parameter, size(rng) * 10);
      TensorId ws = rng() % 2 ? bytes_tensor(g, "ws" + id, TensorKind::workspace, act_bytes()) : kNoTensor;
      step(g, "Conv", Phase::forward, {cur, w}, {y}, ws);
    } else {
      step(g, layers[i] == 'r' ? "Relu" : "MaxPool", Phase::forward, {cur}, {y});
    }
    in.push_back(cur);
    out.push_back(y);
    weight.push_back(w);
    cur = y;
  }
  TensorId gy = bytes_tensor(g, "g_logits", TensorKind::activation_grad, g.tensor(cur).bytes);
  step(g, "Loss", Phase::loss, {cur, label}, {gy});
  std::vector<TensorId> grads;
  for (size_t i = layers.size(); i-- > 0;) {
    std::string id = std::to_string(i);
    TensorId gx = i == 0 ? kNoTensor
                         : bytes_tensor(g, "g_y" + std::to_string(i - 1), TensorKind::activation_grad,
                                        g.tensor(in[i]).bytes);
    std::vector<TensorId> outs;
    if (gx != kNoTensor) outs.push_back(gx);
    if (layers[i] == 'c') {
      TensorId gw = bytes_tensor(g, "g_w" + id, TensorKind::gradient, g.tensor(weight[i]).bytes);
      outs.push_back(gw);
      grads.push_back(gw);
      step(g, "ConvGrad", Phase::backward, {in[i], weight[i], gy}, outs);
    } else if (layers[i] == 'r') {
      step(g, "ReluGrad", Phase::backward, {out[i], gy}, outs);
    } else {
      step(g, "MaxPoolGrad", Phase::backward, {in[i], out[i], gy}, outs);
    }
    gy = gx;
  }
  size_t k = 0;
  for (size_t i = layers.size(); i-- > 0;)
    if (layers[i] == 'c') step(g, "SGD", Phase::optimizer, {weight[i], grads[k++]}, {weight[i]});
  return g;
}

// Conv -> Relu -> Conv, then loss, backward and SGD; every activation 1000 B, weights 100 B.
//   step 0: y0 = Conv(x, w0)    step 3: g_y2 = Loss(y2)            step 6: g_w0 = ConvGrad(x, w0, g_y0)
//   step 1: y1 = Relu(y0)       step 4: g_y1, g_w2 = ConvGrad(y1, w2, g_y2)   step 7, 8: SGD
//   step 2: y2 = Conv(y1, w2)   step 5: g_y0 = ReluGrad(y1, g_y1)
TrainingGraph conv_relu_conv() {
  TrainingGraph g;
  TensorId x = bytes_tensor(g, "x", TensorKind::input, 1000);
  TensorId w0 = bytes_tensor(g, "w0", TensorKind::parameter, 100);
  TensorId w2 = bytes_tensor(g, "w2", TensorKind::parameter, 100);
  TensorId y0 = bytes_tensor(g, "y0", TensorKind::activation, 1000);
  TensorId y1 = bytes_tensor(g, "y1", TensorKind::activation, 1000);
  TensorId y2 = bytes_tensor(g, "y2", TensorKind::activation, 1000);
  TensorId gy2 = bytes_tensor(g, "g_y2", TensorKind::activation_grad, 1000);
  TensorId gy1 = bytes_tensor(g, "g_y1", TensorKind::activation_grad, 1000);
  TensorId gy0 = bytes_tensor(g, "g_y0", TensorKind::activation_grad, 1000);
  TensorId gw0 = bytes_tensor(g, "g_w0", TensorKind::gradient, 100);
  TensorId gw2 = bytes_tensor(g, "g_w2", TensorKind::gradient, 100);
  step(g, "Conv", Phase::forward, {x, w0}, {y0});
  step(g, "Relu", Phase::forward, {y0}, {y1});
  step(g, "Conv", Phase::forward, {y1, w2}, {y2});
  step(g, "Loss", Phase::loss, {y2}, {gy2});
  step(g, "ConvGrad", Phase::backward, {y1, w2, gy2}, {gy1, gw2});
  step(g, "ReluGrad", Phase::backward, {y1, gy1}, {gy0});
  step(g, "ConvGrad", Phase::backward, {x, w0, gy0}, {gw0});
  step(g, "SGD", Phase::optimizer, {w2, gw2}, {w2});
  step(g, "SGD", Phase::optimizer, {w0, gw0}, {w0});
  return g;
}

}  // namespace

// ---- Device profiles ------------------------------------------------------------------------

TEST_CASE("the test profile parses field by field") {
  DeviceProfile p = test_profile();
  CHECK(p.name == "test");
  CHECK(p.f16_tflops == 2);
  CHECK(p.mechanisms.size() == 2);
  CHECK(p.mechanism("full").duplex);
  CHECK_FALSE(p.mechanism("half").duplex);
  CHECK(p.demand_paging.time_us(1000) == doctest::Approx(6));     // 5 + 1000 B / 1000 B/us
  CHECK(p.driver_eviction.time_us(1000) == doctest::Approx(5.5));  // 5 + 1000 B / 2000 B/us
  std::string e = error_of([&] { p.mechanism("teleport"); });
  CHECK(contains(e, "'teleport'"));
  CHECK(contains(e, "half, full"));
}

TEST_CASE("profile errors name the file and the field") {
  auto with = [](const std::function<void(json&)>& edit) {
    json j = json::parse(kTestProfile);
    edit(j);
    return error_of([&] { parse_device_profile(j.dump(), "my.json"); });
  };
  SUBCASE("missing field") {
    std::string e = with([](json& j) { j.erase("discard_gbps"); });
    CHECK(contains(e, "'my.json'"));
    CHECK(contains(e, "'discard_gbps' is missing"));
  }
  SUBCASE("negative bandwidth") {
    std::string e = with([](json& j) { j["mechanisms"][1]["to_host"]["bandwidth_gbps"] = -3; });
    CHECK(contains(e, "'mechanisms[1].to_host.bandwidth_gbps'"));
    CHECK(contains(e, "positive"));
    CHECK(contains(e, "-3"));
  }
  SUBCASE("zero compute rate") {
    CHECK(contains(with([](json& j) { j["f32_tflops"] = 0; }), "'f32_tflops' must be a positive"));
  }
  SUBCASE("wrong type") {
    CHECK(contains(with([](json& j) { j["mechanisms"][0]["duplex"] = "yes"; }),
                   "'mechanisms[0].duplex' must be true or false"));
    CHECK(contains(with([](json& j) { j["memory_bytes"] = 8.5e9; }), "'memory_bytes' must be a positive whole"));
  }
  SUBCASE("unknown field") {
    CHECK(contains(with([](json& j) { j["demand_paging"]["bandwith_gbps"] = 1; }),
                   "'demand_paging.bandwith_gbps' is not a field"));
  }
  SUBCASE("default mechanism not among the mechanisms") {
    std::string e = with([](json& j) { j["default_mechanism"] = "warp"; });
    CHECK(contains(e, "'default_mechanism' is 'warp'"));
    CHECK(contains(e, "full, half"));
  }
  SUBCASE("repeated mechanism") {
    CHECK(contains(with([](json& j) { j["mechanisms"][1]["name"] = "half"; }), "repeats 'half'"));
  }
  SUBCASE("schema version") {
    CHECK(contains(with([](json& j) { j["schema_version"] = 2; }), "'schema_version' must be 1"));
  }
  SUBCASE("not JSON") {
    CHECK(contains(error_of([] { parse_device_profile("{\"name\": ", "bad.json"); }), "not valid JSON"));
  }
}

TEST_CASE("an unknown device lists the shipped profiles; an unreadable path is named") {
  std::string e = error_of([] { load_device_profile("gtx-9000"); });
  CHECK(contains(e, "unknown device 'gtx-9000'"));
  CHECK(contains(e, "h200-pcie"));
  CHECK(contains(e, "rtx3070-8gb"));
  // Where it looked: the test's $AUTOVM_PROFILE_PATH (tests/plan/meson.build), then beside the
  // test binary.
  for (const ProfileFolder& f : profile_search_path()) {
    CAPTURE(f.path);
    CHECK(contains(e, f.path + " (" + f.origin + ")"));
  }
  CHECK(contains(e, "($AUTOVM_PROFILE_PATH)"));
  CHECK(contains(e, "(beside "));
  std::string missing = error_of([] { load_device_profile("/nonexistent/x.json"); });
  CHECK(contains(missing, "cannot read device profile '/nonexistent/x.json'"));
}

TEST_CASE("every shipped profile loads, with its default mechanism") {
  std::vector<std::string> names = shipped_profiles();
  for (const char* expected : {"a100-40gb-pcie", "h200-pcie", "rtx3060-12gb", "rtx3070-8gb", "v100-16gb-pcie"})
    CHECK(std::find(names.begin(), names.end(), expected) != names.end());
  CHECK(std::is_sorted(names.begin(), names.end()));
  for (const std::string& name : names) {
    CAPTURE(name);
    DeviceProfile p = load_device_profile(name);
    CHECK(p.name == name);
    CHECK_FALSE(p.sources.empty());
    CHECK(p.mechanism(p.default_mechanism).name == p.default_mechanism);
  }
  DeviceProfile h200 = load_device_profile(kDefaultDevice);
  CHECK(h200.default_mechanism == "mapped");  // chosen by measurement (BENCHMARKS.md)
  CHECK_FALSE(h200.mechanism("staged").duplex);
  CHECK(h200.mechanism("pinned_copy").duplex);
  // A path works too.
  std::string first_folder = profile_search_path().front().path;
  CHECK(load_device_profile(first_folder + "/h200-pcie.json").name == "h200-pcie");
}

TEST_CASE("the profile search path: $AUTOVM_PROFILE_PATH's folders, then the installed ones") {
  std::vector<ProfileFolder> folders = profile_search_path("/a::/b:", "/opt/x/bin/autovm-plan");
  REQUIRE(folders.size() == 3);
  CHECK(folders[0].path == "/a");
  CHECK(folders[0].origin == "$AUTOVM_PROFILE_PATH");
  CHECK(folders[1].path == "/b");
  CHECK(folders[2].path == "/opt/x/share/autovm/profiles");
  CHECK(folders[2].origin == "beside /opt/x/bin/autovm-plan");
  CHECK(profile_search_path("", "/usr/bin/autovm-plan").size() == 1);
  CHECK(profile_search_path(nullptr, "").empty());
  CHECK(running_executable().ends_with("/test_plan_sim"));
}

TEST_CASE("AUTOVM_PROFILE_PATH: the first folder with NAME.json wins; names are the union") {
  TempDir first, second;
  first.write("test.json", kTestProfile);
  json other = json::parse(kTestProfile);
  other["description"] = "the second folder's";
  second.write("test.json", other.dump());
  other["name"] = "other";
  second.write("other.json", other.dump());

  const char* was = std::getenv("AUTOVM_PROFILE_PATH");
  std::string before = was ? was : "";
  setenv("AUTOVM_PROFILE_PATH", (first.path.string() + ":" + second.path.string()).c_str(), 1);
  // The test binary has no profiles installed beside it: only the two folders count.
  CHECK(shipped_profiles() == std::vector<std::string>{"other", "test"});
  CHECK(load_device_profile("test").description == "round numbers");
  CHECK(load_device_profile("other").description == "the second folder's");
  std::string e = error_of([] { load_device_profile("h200-pcie"); });
  CHECK(contains(e, "the shipped profiles are: other, test"));
  CHECK(contains(e, first.path.string() + " ($AUTOVM_PROFILE_PATH)"));
  CHECK(contains(e, second.path.string() + " ($AUTOVM_PROFILE_PATH)"));
  if (was) setenv("AUTOVM_PROFILE_PATH", before.c_str(), 1);
  else unsetenv("AUTOVM_PROFILE_PATH");
}

// ---- Cost model -------------------------------------------------------------------------------

TEST_CASE("roofline step times, by hand") {
  TrainingGraph g;
  TensorId a = g.add_tensor("a", TensorKind::activation, DType::f32, {250});   // 1000 B
  TensorId h = g.add_tensor("h", TensorKind::activation, DType::f16, {500});   // 1000 B
  TensorId b = g.add_tensor("b", TensorKind::activation, DType::bf16, {500});  // 1000 B
  fwd(g, {a}, {a}).flops = 5e6;   // compute 5e6 / 1e6 = 5 us > memory 1 us  -> 5.5
  fwd(g, {a}, {a}).flops = 1e5;   // compute 0.1 us < memory 3000 B -> 3 us  -> 3.5
  g.steps.back().bytes_touched = 3000;
  fwd(g, {h}, {h}).flops = 4e6;   // f16 at 2 TFLOP/s: 2 us                 -> 2.5
  fwd(g, {b}, {b}).flops = 4e6;   // bf16 at 4 TFLOP/s: 1 us                 -> 1.5
  fwd(g, {h, a}, {a}).flops = 4e6;  // widest dtype f32: 4 us                 -> 4.5
  fwd(g, {a}, {a}).bytes_touched = 2000;  // no flops: bandwidth-bound 2 us   -> 2.5
  for (size_t i = 0; i < 5; ++i)
    if (i != 1) g.steps[i].bytes_touched = 1000;
  auto t = predict_step_times(g, test_profile());
  REQUIRE(t.size() == 6);
  CHECK(t[0] == doctest::Approx(5.5));
  CHECK(t[1] == doctest::Approx(3.5));
  CHECK(t[2] == doctest::Approx(2.5));
  CHECK(t[3] == doctest::Approx(1.5));
  CHECK(t[4] == doctest::Approx(4.5));
  CHECK(t[5] == doctest::Approx(2.5));
}

TEST_CASE("a step measured on the GPU takes its measured time, overhead included") {
  TrainingGraph g;
  TensorId a = g.add_tensor("a", TensorKind::activation, DType::f32, {250});  // 1000 B
  fwd(g, {a}, {a}).flops = 5e6;            // roofline 5 us + 0.5        -> 5.5
  fwd(g, {a}, {a}).flops = 5e6;            // measured: 42 us            -> 42
  g.steps.back().measured_us = 42;
  fwd(g, {a}, {a}).measured_us = 0;        // measured as nothing        -> 0
  for (Step& s : g.steps) s.bytes_touched = 1000;
  auto t = predict_step_times(g, test_profile());
  REQUIRE(t.size() == 3);
  CHECK(t[0] == doctest::Approx(5.5));
  CHECK(t[1] == doctest::Approx(42));
  CHECK(t[2] == doctest::Approx(0));
}

TEST_CASE("measured step times override the prediction") {
  TrainingGraph g;
  TensorId a = bytes_tensor(g, "a", TensorKind::activation, 10);
  fwd(g, {}, {a});                                             // node n0, op Op
  step(g, "SGD", Phase::optimizer, {a}, {a}).node = "";        // key "/SGD"
  step(g, "SGD", Phase::optimizer, {a}, {a}).node = "";
  TempDir dir;
  std::vector<double> t{1, 2, 3};
  apply_measured_step_times(dir.write("all.json", R"({"step_us": [7, 8.5, 9]})"), g, t);
  CHECK(t == std::vector<double>{7, 8.5, 9});
  apply_measured_step_times(dir.write("some.json", R"({"by_node": {"/SGD": 4}})"), g, t);
  CHECK(t == std::vector<double>{7, 4, 4});

  auto fails = [&](const std::string& text) {
    std::string path = dir.write("bad.json", text);
    std::string e = error_of([&] { apply_measured_step_times(path, g, t); });
    CHECK(contains(e, path));
    return e;
  };
  CHECK(contains(fails(R"({"step_us": [1, 2]})"), "has 2 times but the training step has 3"));
  CHECK(contains(fails(R"({"step_us": [1, -2, 3]})"), "step_us[1] must be a non-negative"));
  CHECK(contains(fails(R"({"by_node": {"n7/Conv": 1}})"), "'n7/Conv' matches no step"));
  CHECK(contains(fails("[1, 2"), "not valid JSON"));
  CHECK(contains(fails(R"({"times": []})"), "exactly one of"));
  CHECK(contains(error_of([&] { apply_measured_step_times(dir.path / "none.json", g, t); }),
                 "cannot be read"));
}

// ---- Simulator ---------------------------------------------------------------------------------

// Three steps of 10 us; parameter w (used by step 2 only) is kept on the host between training
// steps: prefetched after step 0 (ready before step 2), evicted after step 2 (by the end, n = 3).
TEST_CASE("a prefetch hidden behind a step, and one that is late") {
  TrainingGraph g;
  TensorId a = bytes_tensor(g, "a", TensorKind::activation, 100);
  TensorId b = bytes_tensor(g, "b", TensorKind::activation, 100);
  fwd(g, {}, {a});
  fwd(g, {a}, {b});
  TensorId w = kNoTensor;
  DeviceProfile d = test_profile();
  std::vector<double> compute{10, 10, 10};

  SUBCASE("hidden") {
    w = bytes_tensor(g, "w", TensorKind::parameter, 1000);
    fwd(g, {b, w}, {});
    std::vector<Action> actions{act(ActionKind::prefetch, w, 1000, 0, 2, "half"),
                                act(ActionKind::evict, w, 1000, 2, 3, "half")};
    check_plan(g, compute_lifetimes(g), actions);
    // prefetch: issued at 10, 1000 B at 1000 B/us -> ready at 11 <= 20: step 2 starts at 20.
    // evict: issued at 30, ready at 31: the training step ends at 31 (1 us of tail stall).
    SimResult r = simulate(g, actions, compute, d.mechanism("half"), d);
    CHECK(r.stall_before_us == std::vector<double>{0, 0, 0});
    CHECK(r.start_us[2] == doctest::Approx(20));
    CHECK(r.ready_us[0] == doctest::Approx(11));
    CHECK(r.issue_us[1] == doctest::Approx(30));
    CHECK(r.step_time_us == doctest::Approx(31));
    CHECK(r.stall_us == doctest::Approx(1));
    CHECK(r.late_actions == 1);  // the evict, waited for at the end
    CHECK(r.bytes_to_device == 1000);
    CHECK(r.bytes_to_host == 1000);
  }
  SUBCASE("late") {
    w = bytes_tensor(g, "w", TensorKind::parameter, 15000);
    fwd(g, {b, w}, {});
    std::vector<Action> actions{act(ActionKind::prefetch, w, 15000, 0, 2, "half"),
                                act(ActionKind::evict, w, 15000, 2, 3, "half")};
    check_plan(g, compute_lifetimes(g), actions);
    // prefetch: issued at 10, 15 us -> ready at 25; step 1 ends at 20: stall 5 before step 2,
    // which runs 25..35. evict: 35..50: the step ends at 50. Stall 5 + 15 = 20.
    SimResult r = simulate(g, actions, compute, d.mechanism("half"), d);
    CHECK(r.stall_before_us[2] == doctest::Approx(5));
    CHECK(r.start_us[2] == doctest::Approx(25));
    CHECK(r.end_us[2] == doctest::Approx(35));
    CHECK(r.step_time_us == doctest::Approx(50));
    CHECK(r.stall_us == doctest::Approx(20));
    CHECK(r.compute_us == doctest::Approx(30));
    CHECK(r.late_actions == 2);
  }
}

// Four steps of 10 us. x (8000 B) is written by step 0 and read by step 3: evicted after step 0
// (ready before step 2) and prefetched after step 2 (ready before step 3). w (8000 B, used by
// step 2) is kept on the host: prefetched after step 0 (ready before 2), evicted after step 2.
TEST_CASE("transfers in both directions: duplex overlaps them, non-duplex queues them") {
  TrainingGraph g;
  TensorId x = bytes_tensor(g, "x", TensorKind::activation, 8000);
  TensorId w = bytes_tensor(g, "w", TensorKind::parameter, 8000);
  TensorId y = bytes_tensor(g, "y", TensorKind::activation, 10);
  fwd(g, {}, {x});
  fwd(g, {}, {y});
  fwd(g, {y, w}, {});
  fwd(g, {x}, {});
  std::vector<Action> actions{act(ActionKind::evict, x, 8000, 0, 2), act(ActionKind::prefetch, w, 8000, 0, 2),
                              act(ActionKind::prefetch, x, 8000, 2, 3), act(ActionKind::evict, w, 8000, 2, 4)};
  auto life = compute_lifetimes(g);
  Residency res = check_plan(g, life, actions);
  // x off at step 2; w off at step 0 only: 8000 | 16010 | 8010 | 16000.
  CHECK(res.bytes == std::vector<int64_t>{8000, 16010, 8010, 16000});
  CHECK(resident_bytes(g, life, actions) == res.bytes);

  DeviceProfile d = test_profile();
  std::vector<double> compute{10, 10, 10, 10};
  SUBCASE("duplex") {
    // After 0 (t = 10): evict x 10..18 and prefetch w 10..18 at once; step 2 at 20, no stall.
    // After 2 (t = 30): prefetch x 30..38, evict w 30..38; step 3 waits: 38..48. Stall 8.
    SimResult r = simulate(g, actions, compute, d.mechanism("full"), d);
    CHECK(r.stall_before_us == std::vector<double>{0, 0, 0, 8});
    CHECK(r.step_time_us == doctest::Approx(48));
    CHECK(r.stall_us == doctest::Approx(8));
  }
  SUBCASE("non-duplex") {
    // After 0: evict x 10..18, then prefetch w 18..26; step 2 waits 6: 26..36.
    // After 2 (t = 36): prefetch x 36..44, then evict w 44..52; step 3 waits 8: 44..54; the
    // evict (due by the end) is done at 52 < 54. Stall 6 + 8 = 14.
    SimResult r = simulate(g, actions, compute, d.mechanism("half"), d);
    CHECK(r.stall_before_us == std::vector<double>{0, 0, 6, 8});
    CHECK(r.ready_us[3] == doctest::Approx(52));
    CHECK(r.step_time_us == doctest::Approx(54));
    CHECK(r.stall_us == doctest::Approx(14));
    CHECK(r.step_time_us == doctest::Approx(r.compute_us + r.stall_us));
  }
}

// Steps of 10, 20, 30, 40 us. a and a2 are written by step 0 (from w), read by step 1 and by
// step 3; both are discarded after step 1 and recomputed before step 3 (source step 0).
TEST_CASE("a recompute adds its source step's time, once for several outputs") {
  TrainingGraph g;
  TensorId w = bytes_tensor(g, "w", TensorKind::parameter, 100);
  TensorId a = bytes_tensor(g, "a", TensorKind::activation, 1000);
  TensorId a2 = bytes_tensor(g, "a2", TensorKind::activation, 500);
  TensorId b = bytes_tensor(g, "b", TensorKind::activation, 100);
  TensorId c = bytes_tensor(g, "c", TensorKind::activation, 100);
  fwd(g, {w}, {a, a2});
  fwd(g, {a, a2}, {b});
  fwd(g, {b}, {c});
  fwd(g, {a, a2, c}, {});
  auto recompute = [&](TensorId t, int64_t bytes) {
    Action r = act(ActionKind::recompute, t, bytes, 2, 3);
    r.source_step = 0;
    return r;
  };
  std::vector<Action> actions{act(ActionKind::discard, a, 1000, 1, 2), act(ActionKind::discard, a2, 500, 1, 2),
                              recompute(a, 1000), recompute(a2, 500)};
  auto life = compute_lifetimes(g);
  Residency res = check_plan(g, life, actions);
  // Live: 1600 | 1700 | 1800 | 1700; a and a2 are off at step 2: 300.
  CHECK(res.bytes == std::vector<int64_t>{1600, 1700, 300, 1700});
  CHECK(resident_bytes(g, life, actions) == res.bytes);

  DeviceProfile d = test_profile();
  // 0..10, 10..30, 30..60; the recompute runs step 0 again 60..70; step 3 70..110.
  SimResult r = simulate(g, actions, {10, 20, 30, 40}, d.mechanism("half"), d);
  CHECK(r.start_us[3] == doctest::Approx(70));
  CHECK(r.step_time_us == doctest::Approx(110));
  CHECK(r.recompute_us == doctest::Approx(10));
  CHECK(r.compute_us == doctest::Approx(110));
  CHECK(r.stall_us == doctest::Approx(0));
  CHECK(r.issue_us[2] == doctest::Approx(60));
  CHECK(r.ready_us[3] == doctest::Approx(70));
  // Discards (1000 B at 10 GB/s = 0.1 us after t = 30) delay nothing.
  CHECK(r.ready_us[0] == doctest::Approx(30.1));
  CHECK(r.ready_us[1] == doctest::Approx(30.15));
}

// Steps of 10 us. a (1000 B) is written by step 0 and read by step 2; step 1 needs a workspace
// of 1500 B. Budget 2000 B.
TEST_CASE("demand paging: a budget that forces one fault") {
  TrainingGraph g;
  TensorId a = bytes_tensor(g, "a", TensorKind::activation, 1000);
  TensorId ws = bytes_tensor(g, "ws", TensorKind::workspace, 1500);
  fwd(g, {}, {a});
  fwd(g, {}, {}, ws);
  fwd(g, {a}, {});
  auto life = compute_lifetimes(g);
  DeviceProfile d = test_profile();
  std::vector<double> compute{10, 10, 10};

  // Step 0: a appears (1000). Step 1: ws needs 1500; 2500 > 2000: the driver evicts a
  // (5 + 1000 / 2000 = 5.5 us). Step 2: a faults in (5 + 1000 / 1000 = 6 us).
  // 0..10 | stall 5.5, 15.5..25.5 | stall 6, 31.5..41.5.
  SimResult r = simulate_demand_paging(g, life, compute, 2000, d);
  CHECK(r.faults == 1);
  CHECK(r.bytes_to_device == 1000);
  CHECK(r.bytes_to_host == 1000);
  CHECK(r.stall_before_us[1] == doctest::Approx(5.5));
  CHECK(r.stall_before_us[2] == doctest::Approx(6));
  CHECK(r.step_time_us == doctest::Approx(41.5));
  CHECK(r.compute_us == doctest::Approx(30));
  CHECK(r.stall_us == doctest::Approx(11.5));

  // With 2500 B everything fits: no fault, no stall.
  SimResult fits = simulate_demand_paging(g, life, compute, 2500, d);
  CHECK(fits.faults == 0);
  CHECK(fits.step_time_us == doctest::Approx(30));
}

TEST_CASE("demand paging reports the steady state: parameters stay where the last step left them") {
  TrainingGraph g;
  TensorId w = bytes_tensor(g, "w", TensorKind::parameter, 1000);
  TensorId a = bytes_tensor(g, "a", TensorKind::activation, 1000);
  fwd(g, {w}, {a});
  fwd(g, {a, w}, {w});
  auto life = compute_lifetimes(g);
  DeviceProfile d = test_profile();
  // The warm-up pass faults w in once; in the reported pass it is already resident.
  SimResult r = simulate_demand_paging(g, life, {10, 10}, 1 << 20, d);
  CHECK(r.faults == 0);
  CHECK(r.step_time_us == doctest::Approx(20));
}

// x (1000 B) and a (1500 B) with a budget of 2000 B: step 0 alone does not fit.
TEST_CASE("demand paging when one step exceeds the budget: thrashing, but it ends") {
  TrainingGraph g;
  TensorId x = bytes_tensor(g, "x", TensorKind::input, 1000);
  TensorId a = bytes_tensor(g, "a", TensorKind::activation, 1500);
  fwd(g, {x}, {a});
  fwd(g, {a, x}, {});
  auto life = compute_lifetimes(g);
  DeviceProfile d = test_profile();
  // Step 0: x and a appear (2500 > 2000), then x, least recently used, is evicted: 5.5 us.
  // Step 1: x faults in (6 us), 2500 > 2000 again: a is evicted (5 + 1500 / 2000 = 5.75 us).
  // 5.5 + 10 + 11.75 + 10 = 37.25.
  SimResult r = simulate_demand_paging(g, life, {10, 10}, 2000, d);
  CHECK(r.stall_before_us[0] == doctest::Approx(5.5));
  CHECK(r.stall_before_us[1] == doctest::Approx(11.75));
  CHECK(r.step_time_us == doctest::Approx(37.25));
  CHECK(r.faults == 1);
  CHECK(r.bytes_to_host == 2500);
  // A budget of 1 B: nothing stays. Step 0 evicts x and a (5.5 + 5.75); step 1 faults both
  // in (6 + 6.5) and evicts both again (5.75 + 5.5): 11.25 + 10 + 23.75 + 10 = 55.
  SimResult tiny = simulate_demand_paging(g, life, {10, 10}, 1, d);
  CHECK(tiny.faults == 2);
  CHECK(tiny.step_time_us == doctest::Approx(55));
}

// ---- Baselines --------------------------------------------------------------------------------

TEST_CASE("vdnn and save_on_cpu on conv-relu-conv, by hand") {
  TrainingGraph g = conv_relu_conv();
  auto life = compute_lifetimes(g);
  const TensorId x = 0, y1 = 4;
  // vdnn: the inputs of both convolutions (x, used at 0 and 6; y1, used at 1, 2, 4, 5) are
  // evicted after their last forward use, ready before the next step. x's prefetch is issued
  // when the step before the previous ConvGrad (step 4) finishes: after 3. y1 has no earlier
  // ConvGrad: issued when the forward and loss are done, after 3.
  BaselinePlan v = baseline_vdnn(g, life, "half");
  REQUIRE(v.actions.size() == 4);
  auto is = [](const Action& a, ActionKind k, TensorId t, StepIndex after, StepIndex ready) {
    return a.kind == k && a.tensor == t && a.after_step == after && a.ready_before_step == ready &&
           a.mechanism == "half" && a.bytes == 1000;
  };
  CHECK(is(v.actions[0], ActionKind::evict, x, 0, 1));
  CHECK(is(v.actions[1], ActionKind::evict, y1, 2, 3));
  CHECK(is(v.actions[2], ActionKind::prefetch, x, 3, 6));
  CHECK(is(v.actions[3], ActionKind::prefetch, y1, 3, 4));
  Residency res = check_plan(g, life, v.actions);
  CHECK(resident_bytes(g, life, v.actions) == res.bytes);
  CHECK(test::verifier_accepts(g, life, v.actions, *std::max_element(res.bytes.begin(), res.bytes.end())));
  // Live bytes (weights and their gradients 100 B each): 2200 | 3200 | 3200 | 4200 | 4300 |
  // 4300 | 2400 | 400 | 300. x is off at steps 1..3 and y1 at step 3: peak 4300 at step 4.
  CHECK(res.bytes == std::vector<int64_t>{2200, 2200, 2200, 2200, 4300, 4300, 2400, 400, 300});
  CHECK(v.resident_peak_bytes == 4300);

  // Simulated with 10 us steps on the non-duplex mechanism (1 us per transfer):
  // 0..10, evict x 10..11: step 1 11..21, step 2 21..31, evict y1 31..32: step 3 32..42;
  // after 3: prefetch x 42..43, then y1 43..44: step 4 44..54, 5 54..64, 6 (x ready) 64..74,
  // 7 74..84, 8 84..94. Stall 1 + 1 + 2 = 4.
  DeviceProfile d = test_profile();
  SimResult r = simulate(g, v.actions, std::vector<double>(9, 10.0), d.mechanism("half"), d);
  CHECK(r.stall_before_us == std::vector<double>{0, 1, 0, 1, 2, 0, 0, 0, 0});
  CHECK(r.step_time_us == doctest::Approx(94));

  // save_on_cpu fetches each when backward needs it: x after 5 (ready before 6).
  BaselinePlan s = baseline_save_on_cpu(g, life, "half");
  REQUIRE(s.actions.size() == 4);
  CHECK(is(s.actions[0], ActionKind::evict, x, 0, 1));
  CHECK(is(s.actions[1], ActionKind::evict, y1, 2, 3));
  CHECK(is(s.actions[2], ActionKind::prefetch, y1, 3, 4));
  CHECK(is(s.actions[3], ActionKind::prefetch, x, 5, 6));
  Residency sres = check_plan(g, life, s.actions);
  CHECK(resident_bytes(g, life, s.actions) == sres.bytes);
  CHECK(test::verifier_accepts(g, life, s.actions, *std::max_element(sres.bytes.begin(), sres.bytes.end())));
  // x is also off at steps 4 and 5.
  CHECK(sres.bytes == std::vector<int64_t>{2200, 2200, 2200, 2200, 3300, 3300, 2400, 400, 300});
  CHECK(s.resident_peak_bytes == 3300);
}

// A chain of four Relus (each ReluGrad reads its forward output), every tensor 100 B:
//   0: t1 = Relu(x)  1: t2 = Relu(t1)  2: t3 = Relu(t2)  3: t4 = Relu(t3)  4: g4 = Loss(t4)
//   5: g3 = ReluGrad(t4, g4)  6: g2 = ReluGrad(t3, g3)  7: g1 = ReluGrad(t2, g2)  8: ReluGrad(t1, g1)
TEST_CASE("checkpoint: two segments of a Relu chain, by hand") {
  TrainingGraph g;
  TensorId x = bytes_tensor(g, "x", TensorKind::input, 100);
  std::vector<TensorId> t{x}, gr;
  for (int i = 1; i <= 4; ++i) t.push_back(bytes_tensor(g, std::string("t") += std::to_string(i), TensorKind::activation, 100));
  for (int i = 0; i <= 4; ++i) gr.push_back(bytes_tensor(g, std::string("g") += std::to_string(i), TensorKind::activation_grad, 100));
  for (int i = 1; i <= 4; ++i) step(g, "Relu", Phase::forward, {t[i - 1]}, {t[i]});
  step(g, "Loss", Phase::loss, {t[4]}, {gr[4]});
  for (int i = 4; i >= 1; --i) step(g, "ReluGrad", Phase::backward, {t[i], gr[i]}, {gr[i - 1]});
  auto life = compute_lifetimes(g);
  // sqrt(4) = 2 segments: steps {0, 1} and {2, 3}; t2 and t4 are kept at the boundaries.
  // Segment 0 would recompute t1 from x, but x is dead after step 0: t1 stays.
  // Segment 1: t3 (last forward use 3, first backward use 6) is discarded after 3 and
  // recomputed from t2 (alive until 7) before step 6.
  BaselinePlan c = baseline_checkpoint(g, life);
  REQUIRE(c.actions.size() == 2);
  CHECK(c.actions[0].kind == ActionKind::discard);
  CHECK(c.actions[0].tensor == t[3]);
  CHECK(c.actions[0].after_step == 3);
  CHECK(c.actions[0].ready_before_step == 4);
  CHECK(c.actions[1].kind == ActionKind::recompute);
  CHECK(c.actions[1].tensor == t[3]);
  CHECK(c.actions[1].source_step == 2);
  CHECK(c.actions[1].after_step == 5);
  CHECK(c.actions[1].ready_before_step == 6);
  Residency res = check_plan(g, life, c.actions);
  // Live: 200 200 300 400 500 600 500 400 300; t3 is off at steps 4 and 5.
  CHECK(res.bytes == std::vector<int64_t>{200, 200, 300, 400, 400, 500, 500, 400, 300});
  CHECK(resident_bytes(g, life, c.actions) == res.bytes);
  CHECK(test::verifier_accepts(g, life, c.actions, *std::max_element(res.bytes.begin(), res.bytes.end())));
  CHECK(c.resident_peak_bytes == 500);
}

TEST_CASE("seeded random CNN chains: every baseline keeps used tensors resident") {
  const char kinds[] = {'c', 'r', 'p'};
  for (unsigned seed = 1; seed <= 40; ++seed) {
    CAPTURE(seed);
    std::mt19937 rng(seed);
    std::string layers = "c";
    for (int i = 0, n = 2 + int(rng() % 30); i < n; ++i) layers += kinds[rng() % 3];
    CAPTURE(layers);
    TrainingGraph g = cnn_chain(layers, rng);
    auto life = compute_lifetimes(g);
    DeviceProfile d = test_profile();
    std::vector<double> compute(g.steps.size());
    for (double& c : compute) c = double(rng() % 50);
    for (const BaselinePlan& p : {baseline_vdnn(g, life, "half"), baseline_save_on_cpu(g, life, "full"),
                                  baseline_checkpoint(g, life)}) {
      CAPTURE(p.policy);
      Residency res = check_plan(g, life, p.actions);
      std::vector<int64_t> bytes = resident_bytes(g, life, p.actions);
      CHECK(bytes == res.bytes);
      CHECK(test::verifier_accepts(g, life, p.actions, *std::max_element(res.bytes.begin(), res.bytes.end())));
      CHECK(p.resident_peak_bytes == *std::max_element(res.bytes.begin(), res.bytes.end()));
      for (const Action& a : p.actions) {
        bool transfer = a.kind == ActionKind::evict || a.kind == ActionKind::prefetch;
        CHECK(a.mechanism == (transfer ? (p.policy == "save_on_cpu" ? "full" : "half") : ""));
        CHECK(a.bytes == g.tensor(a.tensor).bytes);
      }
      // The accounting identity of the simulator.
      for (const char* m : {"half", "full"}) {
        SimResult r = simulate(g, p.actions, compute, d.mechanism(m), d);
        CHECK(r.step_time_us == doctest::Approx(r.compute_us + r.stall_us));
        CHECK(r.step_time_us >= r.end_us.back());
      }
    }
    // With no actions, resident bytes are the live bytes.
    Residency none = check_plan(g, life, {});
    CHECK(resident_bytes(g, life, {}) == none.bytes);
    // Demand paging ends for any budget and never reports less than the compute time.
    for (int64_t budget : {int64_t(1), int64_t(50000), int64_t(1) << 40}) {
      SimResult r = simulate_demand_paging(g, life, compute, budget, d);
      CHECK(r.step_time_us == doctest::Approx(r.compute_us + r.stall_us));
    }
  }
}
