// Lifetimes, memory timeline and arena layout on hand-built training graphs, with the expected
// results worked out by hand; then seeded random graphs checked against brute force.
#include <doctest/doctest.h>

#include <algorithm>
#include <random>

#include <fmt/format.h>

#include "analysis/arena.h"
#include "analysis/lifetimes.h"
#include "analysis/timeline.h"

using namespace autovm;

namespace {

Step step(TrainingGraph& g, std::vector<TensorId> in, std::vector<TensorId> out,
          TensorId ws = kNoTensor) {
  Step s;
  s.id = g.step_count();
  s.op = "Op" + std::to_string(s.id);
  s.inputs = std::move(in);
  s.outputs = std::move(out);
  s.workspace = ws;
  g.steps.push_back(s);
  return s;
}

// x: input 1000 B, w: parameter 256 B, a: 2048 B, b: 512 B, c: 1024 B, ws: workspace 4096 B.
//   step 0: a = A(x, w)       step 1: b = B(a) [ws]
//   step 2: c = C(b)          step 3: D(a, c)
TrainingGraph four_steps() {
  TrainingGraph g;
  g.add_tensor("x", TensorKind::input, DType::u8, {1000});
  g.add_tensor("w", TensorKind::parameter, DType::u8, {256});
  g.add_tensor("a", TensorKind::activation, DType::u8, {2048});
  g.add_tensor("b", TensorKind::activation, DType::u8, {512});
  g.add_tensor("c", TensorKind::activation, DType::u8, {1024});
  g.add_tensor("ws", TensorKind::workspace, DType::u8, {4096});
  step(g, {0, 1}, {2});
  step(g, {2}, {3}, 5);
  step(g, {3}, {4});
  step(g, {2, 4}, {});
  return g;
}

}  // namespace

TEST_CASE("lifetimes of a four-step graph, written by hand") {
  TrainingGraph g = four_steps();
  auto life = compute_lifetimes(g);
  // Expected: x [0,0]; w [0,3] persistent; a [0,3] uses 0,1,3; b [1,2]; c [2,3]; ws [1,1].
  CHECK(life[0].first == 0); CHECK(life[0].last == 0);
  CHECK(life[1].first == 0); CHECK(life[1].last == 3); CHECK(life[1].persistent);
  CHECK(life[2].first == 0); CHECK(life[2].last == 3);
  CHECK(life[2].uses == std::vector<StepIndex>{0, 1, 3});
  CHECK(life[3].first == 1); CHECK(life[3].last == 2);
  CHECK(life[4].first == 2); CHECK(life[4].last == 3);
  CHECK(life[5].first == 1); CHECK(life[5].last == 1);
  CHECK_FALSE(life[2].persistent);
}

TEST_CASE("memory timeline and peak of a four-step graph") {
  TrainingGraph g = four_steps();
  auto tl = compute_timeline(g, compute_lifetimes(g));
  // step 0: x + w + a = 3304; step 1: w + a + b + ws = 6912; step 2: w + a + b + c = 3840;
  // step 3: w + a + c = 3328.
  CHECK(tl.total == std::vector<int64_t>{3304, 6912, 3840, 3328});
  CHECK(tl.peak_bytes == 6912);
  CHECK(tl.peak_step == 1);
  CHECK(tl.peak_by_kind[size_t(TensorKind::workspace)] == 4096);
  CHECK(tl.peak_by_kind[size_t(TensorKind::activation)] == 2560);
  CHECK(tl.peak_by_kind[size_t(TensorKind::parameter)] == 256);
  CHECK(tl.peak_tensors == std::vector<TensorId>{5, 2, 3, 1});  // by size, largest first
}

TEST_CASE("arena offsets of a four-step graph, worked by hand") {
  TrainingGraph g = four_steps();
  auto layout = layout_arena(g, compute_lifetimes(g), 256);
  // step 0 places a@0 (2048), x@2048 (1000 -> 1024), w@3072; end 3328.
  // step 1 frees x -> free [2048, 3072); ws (4096) fits nowhere -> @3328, end 7424;
  //        b (512) best fit -> @2048.
  // step 2 frees ws -> free [3328, 7424) and [2560, 3072); c (1024) -> @3328.
  CHECK(layout.offset == std::vector<int64_t>{2048, 3072, 0, 2048, 3328, 3328});
  CHECK(layout.size == 7424);
}

TEST_CASE("a freed block is reused by best fit, and a top block grows") {
  // t0 (512) [0,0], t1 (256) [0,2], t2 (1024) [1,1]: t2 does not fit in t0's hole; the hole
  // does not end at the top (t1 is above), so t2 goes at the end.
  TrainingGraph g;
  g.add_tensor("t0", TensorKind::activation, DType::u8, {512});
  g.add_tensor("t1", TensorKind::activation, DType::u8, {256});
  g.add_tensor("t2", TensorKind::activation, DType::u8, {1024});
  g.add_tensor("t3", TensorKind::activation, DType::u8, {1280});
  step(g, {}, {0, 1});
  step(g, {}, {2});
  step(g, {1}, {3});
  auto layout = layout_arena(g, compute_lifetimes(g), 256);
  // step 0: t0@0, t1@512; end 768. step 1: free [0,512); t2 -> @768, end 1792.
  // step 2: free t2 -> [768,1792); t3 (1280): no block fits; the top block [768,1792) grows
  // to hold it: t3@768, end 2048.
  CHECK(layout.offset == std::vector<int64_t>{0, 512, 768, 768});
  CHECK(layout.size == 2048);
}

TEST_CASE("seeded random graphs: timeline matches brute force, arena never overlaps") {
  for (uint32_t seed = 1; seed <= 50; ++seed) {
    CAPTURE(seed);
    std::mt19937 rng(seed);
    TrainingGraph g;
    int tensors = 5 + int(rng() % 60);
    for (int i = 0; i < tensors; ++i) {
      auto kind = static_cast<TensorKind>(rng() % kTensorKindCount);
      g.add_tensor(fmt::format("t{}", i), kind, DType::u8, {int64_t(1 + rng() % 5000)});
    }
    int steps = 3 + int(rng() % 40);
    for (int s = 0; s < steps; ++s) {
      std::vector<TensorId> in, out;
      for (int k = 0; k < 3; ++k) in.push_back(TensorId(rng() % tensors));
      out.push_back(TensorId(rng() % tensors));
      std::sort(in.begin(), in.end());
      in.erase(std::unique(in.begin(), in.end()), in.end());
      step(g, in, out);
    }
    auto life = compute_lifetimes(g);
    auto tl = compute_timeline(g, life);
    for (int s = 0; s < steps; ++s) {
      int64_t live = 0;
      for (const auto& t : g.tensors)
        if (life[size_t(t.id)].first <= s && s <= life[size_t(t.id)].last) live += t.bytes;
      CHECK(tl.total[size_t(s)] == live);
    }
    for (int64_t alignment : {1, 256}) {
      auto layout = layout_arena(g, life, alignment);
      CHECK(layout.size >= tl.peak_bytes);
      for (const auto& a : g.tensors) {
        CHECK(layout.offset[size_t(a.id)] % alignment == 0);
        CHECK(layout.offset[size_t(a.id)] + a.bytes <= layout.size);
        for (const auto& b : g.tensors) {
          if (a.id >= b.id) continue;
          const auto &la = life[size_t(a.id)], &lb = life[size_t(b.id)];
          bool time = la.first <= lb.last && lb.first <= la.last;
          int64_t oa = layout.offset[size_t(a.id)], ob = layout.offset[size_t(b.id)];
          bool space = oa < ob + b.bytes && ob < oa + a.bytes;
          CHECK_FALSE((time && space));
        }
      }
    }
  }
}
