// Contract: the subcommands of autovm-inspect. main() parses the command line into Options and
// calls one of the run_* functions, which read the plans it names; each returns the exit code
// (common.h) or throws Failure. The functions that take a Plan do the same work on a plan
// already read (the fuzz target calls them) and print to standard output.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "plan.h"

namespace inspect {

struct Options {
  std::vector<std::string> plans;  // the PLAN arguments, in order
  std::string output;              // -o FILE
  std::optional<int64_t> budget;   // verify --budget SIZE
  int width = 100;                 // timeline columns
  int height = 16;                 // timeline rows
  int top = 10;                    // diff: tensors listed
  bool ascii = false;              // timeline: ASCII instead of unicode blocks
  bool json = false;               // verify: machine-readable result
};

int run_summary(const Options&);
int run_timeline(const Options&);
int run_verify(const Options&);
int run_trace(const Options&);
int run_svg(const Options&);
int run_diff(const Options&);

int summary(const Plan&, const Options&);
int timeline(const Plan&, const Options&);
int verify(const Plan&, const Options&);
int diff(const Plan& a, const Plan& b, const Options&);

}  // namespace inspect
