// Links libautovm.so alone (no internals) and runs one training step of the plan named on the
// command line through the C++ wrapper: the exported symbols and the header are enough.
#include <autovm/autovm.hpp>

#include <cstdio>

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: test_shared PLAN\n");
    return 2;
  }
  try {
    if (autovm_version() != AUTOVM_API_VERSION) throw std::runtime_error("version mismatch");
    autovm::Plan plan = autovm::Plan::load(argv[1]);
    autovm_runtime_options options;
    autovm::check(autovm_runtime_options_init(&options));
    options.strict = 1;
    autovm::Runtime rt(plan, &options);
    for (int64_t s = 0; s < plan.step_count(); ++s) {
      rt.step_begin(s);
      const autovm_step_info step = plan.step(s);
      for (size_t i = 0; i < step.input_count; ++i) rt.touch(s, step.inputs[i]);
      rt.step_end(s);
    }
    const autovm_stats st = rt.stats();
    std::printf("ok: %lld bytes to host, peak %lld resident\n",
                static_cast<long long>(st.bytes_to_host),
                static_cast<long long>(st.peak_resident_bytes));
    return st.violations == 0 && st.training_steps == 1 ? 0 : 1;
  } catch (const autovm::RuntimeError& e) {
    std::fprintf(stderr, "error %d: %s\n", static_cast<int>(e.status()), e.what());
    return 1;
  }
}
