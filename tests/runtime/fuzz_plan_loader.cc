// Fuzz target: any bytes through autovm_plan_load_from_memory. A plan that loads is then run for
// two training steps on the host backend (memory for arenas up to 1 MiB, accounting only above),
// touching every step's tensors, so that the executor's asserts check what the loader accepted.
// libFuzzer: clang++ -fsanitize=fuzzer,address (runtime/README.md); otherwise fuzz_replay.cc
// runs it over the seeds in fuzz_corpus/.
#include <autovm/autovm.h>

#include <cstdint>
#include <cstdlib>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  autovm_plan* plan = nullptr;
  if (autovm_plan_load_from_memory(data, size, &plan) != AUTOVM_OK) {
    if (autovm_last_error()[0] == '\0') std::abort();  // every failure has a message
    return 0;
  }
  autovm_runtime_options options;
  autovm_runtime_options_init(&options);
  options.host_arena_cap_bytes = 1 << 20;
  autovm_runtime* rt = nullptr;
  if (autovm_runtime_create(plan, &options, &rt) == AUTOVM_OK) {
    int64_t steps = 0;
    autovm_plan_step_count(plan, &steps);
    for (int training_step = 0; training_step < 2; ++training_step) {
      for (int64_t s = 0; s < steps; ++s) {
        if (autovm_step_begin(rt, s, nullptr) != AUTOVM_OK) std::abort();
        autovm_step_info info;
        if (autovm_plan_step_info(plan, s, &info) != AUTOVM_OK) std::abort();
        for (size_t i = 0; i < info.input_count; ++i) autovm_touch(rt, s, info.inputs[i]);
        for (size_t i = 0; i < info.output_count; ++i) autovm_touch(rt, s, info.outputs[i]);
        if (info.workspace >= 0) autovm_touch(rt, s, info.workspace);
        if (autovm_step_end(rt, s, nullptr) != AUTOVM_OK) std::abort();
      }
    }
    autovm_stats stats;
    if (autovm_runtime_stats(rt, &stats) != AUTOVM_OK || stats.resident_bytes < 0) std::abort();
    autovm_runtime_free(rt);
  }
  autovm_plan_free(plan);
  return 0;
}
