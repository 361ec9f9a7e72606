// Fuzz target: any bytes through autovm-inspect's plan reader, then, for a plan that reads,
// the verifier, summary, timeline and diff (of the plan with itself), as the subcommands run
// them. Every failure must be an inspect::Failure; any other exception, a crash or a sanitizer
// report is a bug. Their output goes to /dev/null.
// libFuzzer: a clang build makes tests/inspect/fuzz_inspect (the commands are in
// runtime/README.md, "Tests"; BENCHMARKS.md, "Robustness", records the runs).
// Otherwise tests/fuzz_replay.cc runs it over the seeds in fuzz_corpus/.
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

#include "commands.h"
#include "common.h"
#include "plan.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static FILE* quiet = std::freopen("/dev/null", "w", stdout);
  (void)quiet;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    inspect::Plan plan = inspect::parse_plan(text, "fuzz.json");
    inspect::Options options;
    options.width = 10;
    options.height = 4;
    inspect::verify(plan, options);
    options.json = true;
    inspect::verify(plan, options);
    for (auto show : {inspect::summary, inspect::timeline}) {
      try {
        show(plan, options);
      } catch (const inspect::Failure&) {
        // Refused cleanly (a plan whose ids are out of range).
      }
    }
    inspect::diff(plan, plan, options);
  } catch (const inspect::Failure&) {
    // Rejected cleanly.
  }
  return 0;
}
