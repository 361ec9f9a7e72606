// Remote reads (docs/execution-model.md, "Remote reads") on the host backend and in the loader.
// plans/remote.json is evict.json with a's prefetch replaced by a remote read: a (2048 B, steps
// 0-3) is evicted after step 1 (off from 2) and step 3 (MulGrad: x, a, g -> g), its last use,
// reads it where its evicted copy lies. Residency letters as in test_executor.cc (x w a b ws g).
// The host backend copies a's host copy into its range for step 3 and poisons it again at
// step_end(3); the runtime's counters leave a out at step 3; a malformed remote read is
// AUTOVM_ERR_PLAN naming the action.
#include <autovm/autovm.hpp>

#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "data_check.h"
#include "helpers.h"
#include "plan.h"
#include "residency_layout.h"

namespace {

using nlohmann::json;
using rt_test::letter;

std::string residency(autovm::Runtime& rt) {
  std::string out;
  for (int32_t t = 0; t < 6; ++t) out += letter(rt.residency(t));
  return out;
}

autovm_runtime_options options(autovm_layout layout = AUTOVM_LAYOUT_AUTO, int strict = 1) {
  autovm_runtime_options o;
  REQUIRE(autovm_runtime_options_init(&o) == AUTOVM_OK);
  o.strict = strict;
  o.layout = layout;
  return o;
}

bool all_poison(const unsigned char* p, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (p[i] != 0xA5) return false;
  return true;
}

std::vector<unsigned char> filled(size_t n, unsigned seed) {
  std::vector<unsigned char> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<unsigned char>((i * 131 + seed) & 0xFF);
  return v;
}

// Whether [p, p + n) and [q, q + m) share a byte.
bool overlap(const void* p, int64_t n, const void* q, int64_t m) {
  const auto a = reinterpret_cast<uintptr_t>(p), b = reinterpret_cast<uintptr_t>(q);
  return a < b + static_cast<uintptr_t>(m) && b < a + static_cast<uintptr_t>(n);
}

}  // namespace

TEST_CASE("a remote read: the step reads the evicted bytes, the tensor stays off the count") {
  autovm::Plan plan = autovm::Plan::load(rt_test::plan_path("remote.json"));
  const autovm_action_info info = plan.action(1);
  CHECK(info.kind == AUTOVM_ACTION_READ_REMOTE);
  CHECK(info.after_step == 2);
  CHECK(info.ready_before_step == 3);
  const int32_t a = plan.tensor_id("a");
  for (autovm_layout layout : {AUTOVM_LAYOUT_PLAN, AUTOVM_LAYOUT_PACKED}) {
    CAPTURE(layout);
    autovm_runtime_options o = options(layout);
    autovm::Runtime rt(plan, &o);
    auto* ap = static_cast<unsigned char*>(rt.pointer(a));
    REQUIRE(ap != nullptr);
    //                                   x w a b ws g
    const std::vector<std::string> after_begin = {"RRR---", "RRRRR-", "RRHR-R", "RRH--R", "-R---R"};
    const std::vector<std::string> after_end = {"RRR---", "RRER--", "RRH--R", "-R---R", "-R----"};
    // evict.json's figures, less a at step 3: it is read there, not resident.
    const std::vector<int64_t> resident = {4096, 5632, 4096, 3072, 2048};
    for (int training_step = 0; training_step < 2; ++training_step) {
      CAPTURE(training_step);
      const std::vector<unsigned char> bytes = filled(2048, 17u + unsigned(training_step));
      for (int64_t s = 0; s < 5; ++s) {
        CAPTURE(s);
        rt.step_begin(s);
        CHECK(residency(rt) == after_begin[static_cast<size_t>(s)]);
        CHECK(rt.stats().resident_bytes == resident[static_cast<size_t>(s)]);
        if (s == 0) std::memcpy(ap, bytes.data(), bytes.size());  // step 0 writes a
        if (s == 2) {
          CHECK(all_poison(ap, 2048));  // off the device
          CHECK(autovm_touch(rt.get(), 2, a) == AUTOVM_ERR_NOT_RESIDENT);  // not read remotely here
        }
        if (s == 3) {
          CHECK(rt.pointer(a) == ap);  // at its own place
          CHECK(std::memcmp(ap, bytes.data(), bytes.size()) == 0);  // the evicted bytes
          rt.touch(3, a);  // strict: a remote read is no violation
          // Its range is its own at step 3: no tensor on the device there shares it.
          for (int32_t t : {0, 1, 5})
            CHECK_FALSE(overlap(ap, 2048, rt.pointer(t), plan.tensor(t).bytes));
        }
        rt.step_end(s);
        CHECK(residency(rt) == after_end[static_cast<size_t>(s)]);
        if (s == 3) CHECK(all_poison(ap, 2048));  // back to poison at the next boundary
      }
    }
    const autovm_stats st = rt.stats();
    CHECK(st.violations == 2);  // the touches at step 2
    CHECK(st.peak_resident_bytes == 5632);
    CHECK(st.remote_reads == 2);
    CHECK(st.remote_read_bytes == 2 * 2048);
    CHECK(st.bytes_to_host == 2 * 2048);
    CHECK(st.bytes_to_device == 0);  // never brought back
    CHECK(st.prefetches == 0);
  }
}

TEST_CASE("a remote read under the data check, on both layouts, and in accounting-only mode") {
  autovm::Plan plan = autovm::Plan::load(rt_test::plan_path("remote.json"));
  for (autovm_layout layout : {AUTOVM_LAYOUT_PLAN, AUTOVM_LAYOUT_PACKED}) {
    CAPTURE(layout);
    autovm_runtime_options o = options(layout);
    autovm::Runtime rt(plan, &o);
    rt_test::DataCheck data(plan, rt);
    for (int step = 0; step < 3; ++step) CHECK(data.run_training_step() > 0);
    CHECK(rt.stats().violations == 0);
  }
  autovm_runtime_options o = options();
  o.host_arena_cap_bytes = 1;  // no memory: residency and counts only
  autovm::Runtime rt(plan, &o);
  for (int64_t s = 0; s < 5; ++s) {
    rt.step_begin(s);
    if (s == 3) rt.touch(3, plan.tensor_id("a"));
    rt.step_end(s);
  }
  CHECK(rt.stats().remote_reads == 1);
  CHECK(rt.stats().violations == 0);
}

TEST_CASE("the packed layout keeps a tensor's range its own at the step that reads it remotely") {
  const autovm::rt::Plan plan =
      autovm::rt::load_plan(rt_test::read_text(rt_test::plan_path("remote.json")), "remote.json");
  // a: on the device over [0, 1] (evicted, ready before 2), and at 3 where it is read.
  CHECK(autovm::rt::occupancy(plan)[2] == std::vector<autovm::rt::StepRange>{{0, 1}, {3, 3}});
  // A backend that reads it elsewhere (the mapped mechanism) leaves the range free at 3.
  CHECK(autovm::rt::occupancy(plan, false)[2] == std::vector<autovm::rt::StepRange>{{0, 1}});
  CHECK(autovm::rt::last_remote_reads(plan)[2] == 3);
  CHECK(autovm::rt::last_remote_reads(plan)[0] == -1);
}

TEST_CASE("a persistent tensor kept on the host, read remotely before it is brought back") {
  // persistent.json's w: instead of its prefetch before step 0, step 0 (Mul: x, w -> a) reads
  // it remotely; a prefetch after step 2 brings it back for the optimizer's step 4 (which
  // writes it); the evict after step 4 keeps it on the host between training steps.
  json j = rt_test::plan_json("persistent.json");
  j["actions"][0] = {{"kind", "read_remote"}, {"tensor", 1}, {"bytes", 1024}, {"after_step", -1},
                     {"ready_before_step", 0}, {"mechanism", "mapped"}};
  j["actions"].push_back({{"kind", "prefetch"}, {"tensor", 1}, {"bytes", 1024}, {"after_step", 2},
                          {"ready_before_step", 4}});
  autovm::Plan plan = autovm::Plan::from_memory(j.dump());
  autovm_runtime_options o = options();
  autovm::Runtime rt(plan, &o);
  const int32_t w = plan.tensor_id("w");
  auto* wp = static_cast<unsigned char*>(rt.pointer(w));
  REQUIRE(wp != nullptr);
  std::vector<unsigned char> value = filled(1024, 3);
  std::memcpy(wp, value.data(), value.size());  // the trainer's initial value
  for (int training_step = 0; training_step < 3; ++training_step) {
    CAPTURE(training_step);
    for (int64_t s = 0; s < 5; ++s) {
      CAPTURE(s);
      rt.step_begin(s);
      if (s == 0) {
        CHECK(rt.residency(w) == AUTOVM_RESIDENCY_ON_HOST);
        CHECK(std::memcmp(wp, value.data(), value.size()) == 0);
        rt.touch(0, w);
      }
      if (s == 1) CHECK(all_poison(wp, 1024));
      if (s == 4) {
        CHECK(std::memcmp(wp, value.data(), value.size()) == 0);  // brought back
        value = filled(1024, 50u + unsigned(training_step));       // the optimizer's update
        std::memcpy(wp, value.data(), value.size());
      }
      rt.step_end(s);
    }
  }
  const autovm_stats st = rt.stats();
  CHECK(st.violations == 0);
  CHECK(st.initial_offload_bytes == 1024);
  CHECK(st.remote_reads == 3);
}

TEST_CASE("trainer memory: a remote read of a bound tensor leaves its bytes alone; unbound, it "
          "is read where its bytes stayed") {
  autovm::Plan plan = autovm::Plan::load(rt_test::plan_path("remote.json"));
  const int32_t a = plan.tensor_id("a");
  for (bool bind : {true, false}) {
    CAPTURE(bind);
    autovm_runtime_options o = options(AUTOVM_LAYOUT_AUTO, 0);
    o.memory = AUTOVM_MEMORY_TRAINER;
    autovm::Runtime rt(plan, &o);
    std::vector<unsigned char> mine = filled(2048, 9);
    // Unbound, a's evict is skipped: its bytes stayed, and it counts until its lifetime ends.
    const std::vector<int64_t> resident =
        bind ? std::vector<int64_t>{4096, 5632, 4096, 3072, 2048}
             : std::vector<int64_t>{4096, 5632, 6144, 5120, 2048};
    for (int64_t s = 0; s < 5; ++s) {
      CAPTURE(s);
      rt.step_begin(s);
      if (s == 0 && bind) rt.bind(a, mine.data(), 2048);
      CHECK(rt.stats().resident_bytes == resident[static_cast<size_t>(s)]);
      if (s == 3) {
        rt.touch(3, a);
        CHECK(rt.pointer(a) == (bind ? mine.data() : nullptr));
      }
      rt.step_end(s);
    }
    CHECK(mine == filled(2048, 9));  // the host backend never writes the trainer's bytes
    const autovm_stats st = rt.stats();
    CHECK(st.remote_reads == 1);
    CHECK(st.unbound_actions == (bind ? 0 : 1));  // the evict; a remote read moves nothing
    CHECK(st.violations == (bind ? 0 : 1));        // unbound: step 2 over the budget
  }
}

TEST_CASE("resident mode ignores remote reads; the C API names the new kind") {
  autovm::Plan plan = autovm::Plan::load(rt_test::plan_path("remote.json"));
  autovm_runtime_options o = options();
  o.mode = AUTOVM_MODE_RESIDENT;
  autovm::Runtime rt(plan, &o);
  for (int64_t s = 0; s < 5; ++s) {
    rt.step_begin(s);
    if (s == 3) {  // no actions: a stays resident
      CHECK(rt.residency(plan.tensor_id("a")) == AUTOVM_RESIDENCY_RESIDENT);
      rt.touch(3, plan.tensor_id("a"));
    }
    rt.step_end(s);
  }
  CHECK(rt.stats().remote_reads == 0);
  CHECK(AUTOVM_ACTION_READ_REMOTE == 5);  // after the kinds that were there: their numbers stay
}

// Each case: an edit of remote.json, and words the message must contain.
struct Malformed {
  const char* what;
  std::function<void(json&)> edit;
  std::vector<std::string> message;
};

TEST_CASE("malformed remote reads are AUTOVM_ERR_PLAN naming the action") {
  auto remote = [](int tensor, int bytes, int after, int ready) {
    return json{{"kind", "read_remote"}, {"tensor", tensor}, {"bytes", bytes},
                {"after_step", after}, {"ready_before_step", ready}, {"mechanism", "mapped"}};
  };
  const std::vector<Malformed> cases = {
      {"ready_before_step not after_step + 1",
       [](json& j) { j["actions"][1]["after_step"] = 1; },
       {"actions[1] (read_remote of 'a')", "ready_before_step 3 must be after_step + 1"}},
      {"ready_before_step the end, not a step",
       [](json& j) {
         j["actions"][1]["after_step"] = 4;
         j["actions"][1]["ready_before_step"] = 5;
       },
       {"actions[1] (read_remote of 'a')", "a step (< 5)"}},
      {"the step does not read it", [](json& j) {
         j["actions"][1]["after_step"] = 1;
         j["actions"][1]["ready_before_step"] = 2;
       },
       {"actions[1] (read_remote of 'a')", "step 2 (SoftmaxCrossEntropy)", "does not read 'a'"}},
      {"the step writes it", [&](json& j) {
         j["actions"].push_back({{"kind", "evict"}, {"tensor", 5}, {"bytes", 1024},
                                 {"after_step", 2}, {"ready_before_step", 3}});
         j["actions"].push_back(remote(5, 1024, 2, 3));
       },
       {"actions[3] (read_remote of 'g')", "step 3 (MulGrad mul0) writes 'g' (an output)"}},
      {"the step's workspace", [&](json& j) {
         j["steps"][1]["inputs"].push_back(4);
         j["actions"].push_back(remote(4, 512, 0, 1));
       },
       {"actions[2] (read_remote of 'conv/workspace')", "(its workspace)"}},
      {"bytes differ", [](json& j) { j["actions"][1]["bytes"] = 100; },
       {"actions[1] (read_remote of 'a')", "bytes 100 differ"}},
      {"outside the lifetime", [&](json& j) {
         j["steps"][3]["inputs"].push_back(3);
         j["actions"].push_back(remote(3, 1024, 2, 3));
       },
       {"actions[2] (read_remote of 'b')", "outside its lifetime [1, 2]"}},
      {"a tensor never evicted", [&](json& j) { j["actions"].push_back(remote(0, 1024, 2, 3)); },
       {"actions[2] (read_remote of 'x', after_step 2)", "never evicted"}},
      {"a discarded tensor", [](json& j) {
         j["actions"][0]["kind"] = "discard";
       },
       {"actions[1] (read_remote of 'a', after_step 2)", "has it discarded", "no copy to read"}},
      {"resident again: prefetched before the step", [](json& j) {
         j["actions"].push_back({{"kind", "prefetch"}, {"tensor", 2}, {"bytes", 2048},
                                 {"after_step", 2}, {"ready_before_step", 3}});
       },
       {"actions[1] (read_remote of 'a', after_step 2)", "has it resident"}},
      {"its evict not complete at the step", [](json& j) {
         j["actions"][0]["ready_before_step"] = 4;
       },
       {"actions[1] (read_remote of 'a', after_step 2)", "completes only before step 4",
        "its host copy complete"}},
      {"a recompute before the step reads it", [](json& j) {
         j["actions"].push_back({{"kind", "recompute"}, {"tensor", 3}, {"bytes", 1024},
                                 {"after_step", 2}, {"ready_before_step", 3},
                                 {"source_step", 1}});
       },
       {"actions[1] (read_remote of 'a')", "the recompute actions[2] before step 3 runs step 1"}},
      {"twice at one step", [](json& j) { j["actions"].push_back(j["actions"][1]); },
       {"actions[2] (read_remote of 'a')", "repeats actions[1]"}},
      {"a mechanism that cannot read remotely",
       [](json& j) { j["actions"][1]["mechanism"] = "pinned_copy"; },
       {"actions[1].mechanism", "'pinned_copy' cannot read remotely"}},
  };
  for (const Malformed& c : cases) {
    CAPTURE(c.what);
    json j = rt_test::plan_json("remote.json");
    c.edit(j);
    std::string error;
    CHECK(rt_test::load_text(j.dump(), error) == AUTOVM_ERR_PLAN);
    CAPTURE(error);
    for (const std::string& words : c.message) CHECK(error.find(words) != std::string::npos);
    CHECK(error.find("autovm-plan") != std::string::npos);  // says what to do
  }
  // The unknown-kind message lists the new kind.
  json j = rt_test::plan_json("remote.json");
  j["actions"][1]["kind"] = "remote";
  std::string error;
  CHECK(rt_test::load_text(j.dump(), error) == AUTOVM_ERR_PLAN);
  CHECK(error.find("read_remote") != std::string::npos);
}
