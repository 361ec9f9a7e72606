// Seeded random CNNs (convolutions, batch norm, pooling, residual additions, a classifier)
// planned end to end at 75 %, 50 % and 30 % of their peak and at the smallest feasible budget;
// every plan is written as JSON and checked by autovm-inspect's verifier, which shares no code
// with the planner. The verifier's path comes from $AUTOVM_INSPECT (set by meson).
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <random>

#include "driver/pipeline.h"
#include "emit/plan_json.h"
#include "plan/device_profile.h"
#include "plan/gap_split.h"
#include "model_builder.h"
#include "util/atomic_file.h"
#include "util/error.h"

#include <unistd.h>

using namespace autovm;
using autovm::test::ModelBuilder;
using autovm::test::int_attr;
using autovm::test::ints_attr;

namespace {

model::Model random_cnn(uint32_t seed) {
  std::mt19937 rng(seed);
  ModelBuilder b;
  int64_t n = 2 + rng() % 6, c = 3, h = 8 << (rng() % 3);
  b.input("x", {n, c, h, h});
  std::string cur = "x";
  int blocks = 3 + int(rng() % 10);
  for (int k = 0; k < blocks; ++k) {
    std::string id = std::to_string(k);
    int64_t out = 4 << (rng() % 4);
    std::string block_in = cur;
    int64_t in_c = c;
    b.param("w" + id, {out, c, 3, 3});
    b.node("Conv", "conv" + id, {cur, "w" + id}, {{"conv" + id, {n, out, h, h}}},
           {{"pads", ints_attr({1, 1, 1, 1})}, {"kernel_shape", ints_attr({3, 3})}});
    cur = "conv" + id;
    c = out;
    if (rng() % 2) {
      for (const char* p : {"scale", "bias", "mean", "var"}) b.param(std::string(p) + id, {c});
      b.node("BatchNormalization", "bn" + id,
             {cur, "scale" + id, "bias" + id, "mean" + id, "var" + id},
             {{"bn" + id, {n, c, h, h}}, {"bn_mean" + id, {c}}, {"bn_var" + id, {c}}},
             {{"training_mode", int_attr(1)}});
      cur = "bn" + id;
    }
    if (in_c == c && block_in != "x" && rng() % 2) {
      b.node("Add", "add" + id, {cur, block_in}, {{"add" + id, {n, c, h, h}}});
      cur = "add" + id;
    }
    b.node("Relu", "relu" + id, {cur}, {{"relu" + id, {n, c, h, h}}});
    cur = "relu" + id;
    if (h >= 4 && rng() % 3 == 0) {
      h /= 2;
      b.node("MaxPool", "pool" + id, {cur}, {{"pool" + id, {n, c, h, h}}},
             {{"kernel_shape", ints_attr({2, 2})}, {"strides", ints_attr({2, 2})}});
      cur = "pool" + id;
    }
  }
  b.node("GlobalAveragePool", "gap", {cur}, {{"gap", {n, c, 1, 1}}});
  b.node("Flatten", "flatten", {"gap"}, {{"flat", {n, c}}});
  b.param("fc_w", {10, c}).param("fc_b", {10});
  b.node("Gemm", "fc", {"flat", "fc_w", "fc_b"}, {{"logits", {n, 10}}}, {{"transB", int_attr(1)}});
  b.output("logits");
  b.m.path = "random" + std::to_string(seed) + ".onnx";
  return b.m;
}

}  // namespace

TEST_CASE("random CNNs: every plan passes the independent verifier") {
  const char* inspect = std::getenv("AUTOVM_INSPECT");
  REQUIRE_MESSAGE(inspect != nullptr, "set AUTOVM_INSPECT to the autovm-inspect binary");
  auto dir = std::filesystem::temp_directory_path() / ("autovm-random-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  int plans = 0, with_actions = 0;
  // AUTOVM_RANDOM_SEEDS=N checks N graphs instead of 40 (a longer stress run by hand).
  const char* seeds_env = std::getenv("AUTOVM_RANDOM_SEEDS");
  const uint32_t seeds = seeds_env ? uint32_t(std::max(1, std::atoi(seeds_env))) : 40;
  for (uint32_t seed = 1; seed <= seeds; ++seed) {
    CAPTURE(seed);
    model::Model m = random_cnn(seed);
    PlanOptions o;
    o.batch = m.values[0].shape[0];
    o.budget_bytes = int64_t(1) << 60;
    Plan base = make_plan(m, o, true);
    int64_t peak = base.timeline.peak_bytes;
    PlanOptions omin = o;
    omin.minimum_budget = true;
    int64_t smallest = make_plan(m, omin, true).options.budget_bytes;
    CHECK(smallest <= peak);
    for (double fraction : {0.75, 0.5, 0.3, 0.0}) {
      CAPTURE(fraction);
      PlanOptions ob = o;
      // Below `smallest` no plan exists (a step alone needs more): plan at least for it.
      ob.budget_bytes = std::max(smallest, static_cast<int64_t>(double(peak) * fraction));
      ob.minimum_budget = fraction == 0.0;
      ob.allow_recompute = seed % 2 == 0;
      // Every fourth graph recomputes cheap ops only (--recompute-ops); the verifier checks
      // the plan's recomputes against options.recompute_ops.
      if (seed % 4 == 2) ob.recompute_ops.ops = {"BatchNormalization", "MaxPool", "Relu"};
      Plan p = make_plan(m, ob, true);
      for (const Action& a : p.actions)
        if (a.kind == ActionKind::recompute) CHECK(ob.recompute_ops.allows(p.training.graph.step(a.source_step).op));
      CHECK(p.prediction.resident_peak_bytes <= p.options.budget_bytes);
      CHECK(p.prediction.step_time_us >= p.bound_us * 0.999);
      // The bound holds for any valid plan the options allow, not only the planner's: the
      // baselines that fit (checkpointing recomputes convolutions, which --no-recompute and
      // these recompute_ops forbid).
      for (const Prediction& other : p.baselines) {
        if (!other.fits || other.policy == "demand_paging") continue;
        if ((!ob.allow_recompute || !ob.recompute_ops.all()) && other.policy == "checkpoint") continue;
        CAPTURE(other.policy);
        CHECK(other.step_time_us >= p.bound_us * 0.999);
      }
      auto file = dir / ("plan" + std::to_string(seed) + "_" + std::to_string(int(fraction * 100)) + ".json");
      write_file_atomically(file.string(), plan_to_json(p));
      std::string cmd = std::string(inspect) + " verify " + file.string() + " > " + file.string() + ".log 2>&1";
      int rc = std::system(cmd.c_str());
      INFO("verifier log: " << file.string() << ".log");
      CHECK(rc == 0);
      ++plans;
      with_actions += !p.actions.empty();
    }
  }
  CHECK(plans == int(4 * seeds));
  CHECK(with_actions >= int(5 * seeds / 2));
  if (!std::getenv("AUTOVM_KEEP_PLANS")) std::filesystem::remove_all(dir);
}

TEST_CASE("gap-split search: the same plans on one thread as on two, sampled or not") {
  DeviceProfile device = load_device_profile("h200-pcie");
  const Mechanism& mech = device.mechanism(device.default_mechanism);
  int searched[2] = {0, 0};  // by sampling
  for (uint32_t seed = 1; seed <= 16; ++seed) {
    CAPTURE(seed);
    model::Model m = random_cnn(seed);
    PlanOptions o;
    o.batch = m.values[0].shape[0];
    o.budget_bytes = int64_t(1) << 60;
    o.optimizer = training::Optimizer::momentum;
    Plan base = make_plan(m, o, true);
    o.budget_bytes = base.timeline.peak_bytes / 2;
    PlanOptions omin = o;
    omin.minimum_budget = true;
    o.budget_bytes = std::max(o.budget_bytes, make_plan(m, omin, true).options.budget_bytes);
    Plan p = make_plan(m, o, true);
    SwapOptions so;
    so.budget_bytes = o.budget_bytes;
    SplitSearch one, two;
    one.threads = 1;
    two.threads = 2;
    // Odd seeds sample the steps (two at first, then halving around the fastest), as on
    // large graphs; even seeds try every step.
    one.coarse = two.coarse = seed % 2 ? 2 : 0;
    const TrainingGraph& g = p.training.graph;
    auto a = search_gap_splits(g, p.lifetimes, p.compute_us, mech, device, so, {}, one);
    auto b = search_gap_splits(g, p.lifetimes, p.compute_us, mech, device, so, {}, two);
    REQUIRE(a.size() == b.size());
    searched[seed % 2] += !a.empty();
    for (size_t k = 0; k < a.size(); ++k) {
      CAPTURE(k);
      REQUIRE(a[k].splits.size() == k + 1);
      REQUIRE(b[k].splits.size() == k + 1);
      for (size_t i = 0; i <= k; ++i) {
        CHECK(a[k].splits[i].tensor == b[k].splits[i].tensor);
        CHECK(a[k].splits[i].at == b[k].splits[i].at);
      }
      if (k > 0) CHECK(a[k].step_time_us < a[k - 1].step_time_us);  // each level beat the last
      CHECK(a[k].step_time_us == b[k].step_time_us);
      REQUIRE(a[k].actions.size() == b[k].actions.size());
      for (size_t i = 0; i < a[k].actions.size(); ++i) {
        const Action &x = a[k].actions[i], &y = b[k].actions[i];
        CHECK((x.kind == y.kind && x.tensor == y.tensor && x.after_step == y.after_step &&
               x.ready_before_step == y.ready_before_step && x.source_step == y.source_step));
      }
    }
  }
  CHECK(searched[0] > 0);  // some graph had a split to search, each way
  CHECK(searched[1] > 0);
}
