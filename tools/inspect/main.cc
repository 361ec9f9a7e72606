// autovm-inspect: shows, checks and draws the plans autovm-plan writes. See kUsage.
#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <string_view>
#include <vector>

#include "commands.h"
#include "common.h"

namespace {

using inspect::Exit;
using inspect::Failure;
using inspect::Options;

constexpr const char* kUsage = R"(usage: autovm-inspect [summary] PLAN
       autovm-inspect timeline PLAN [--width N] [--height N] [--ascii]
       autovm-inspect verify PLAN [--budget SIZE] [--json]
       autovm-inspect trace PLAN -o FILE
       autovm-inspect svg PLAN -o FILE
       autovm-inspect diff A B [--top N]

Reads a plan that autovm-plan wrote (schemas/plan.schema.json) and shows, checks or draws it.
Residency is worked out from the plan's steps and actions (evict, prefetch, discard,
recompute, read_remote, advise) by the rules of docs/execution-model.md, with no code shared
with the planner.

subcommands:
  summary   (the default) model, budget, peak without the plan and resident peak with it,
            bytes moved each way and read remotely, predicted step time against no swapping
            and against the bound, the largest swapped tensors, actions by kind
  timeline  resident memory over the steps, drawn in the terminal, with the budget and the
            peak without the plan; a column shows the most of the steps it covers; marks
            the steps that read tensors remotely
  verify    checks the plan's structure and rules 1-7 of the execution model; lists each
            violation with its rule, step and tensor
  trace     Chrome trace event JSON for Perfetto or chrome://tracing: compute, copies to
            device and to host, recomputation, remote reads, resident bytes by kind
  svg       an SVG picture: resident bytes by kind, budget, peak without the plan, transfers,
            remote reads
  diff      compares two plans: options, peaks, step time, bytes moved, actions, residency

options:
  --width N      timeline: columns of the plot (default 100)
  --height N     timeline: rows of the plot (default 16)
  --ascii        timeline: ASCII characters instead of unicode block characters
  --budget SIZE  verify: check against this budget instead of the plan's own; SIZE is a
                 number with an optional unit: B, KB, MB, GB, TB or KiB, MiB, GiB, TiB
  --json         verify: print the result as JSON
  -o FILE        trace, svg: write here (atomically: a temporary file, then a rename; the
                 file keeps its permissions)
  --top N        diff: how many tensors to list (default 10)
  -h, --help     this text
  --version      the version

exit codes:
  0  done (verify: the plan is valid)
  1  verify: the plan breaks a rule (every violation is counted, the first 20 listed)
  2  bad usage: unknown subcommand or option, a missing or malformed value
  3  a plan file is missing or unreadable, or is a directory, FIFO or device
  4  a plan is not a valid plan: not JSON, another schema_version or execution model, a
     field missing, of the wrong type or out of range (a byte count outside [0, 2^50]; the
     message names it); subcommands other than verify also refuse a plan whose ids are
     out of range
  5  an output file could not be written (or is read-only, or a directory)
)";

[[noreturn]] void usage_error(const std::string& message) {
  throw Failure(Exit::usage, message + "\n(run 'autovm-inspect --help' for the usage)");
}

int parse_int(const std::string& flag, const std::string& text, int lo, int hi) {
  char* end = nullptr;
  errno = 0;
  long v = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno != 0 || v < lo || v > hi)
    usage_error(fmt::format("{} takes a whole number from {} to {}, not '{}'", flag, lo, hi, text));
  return static_cast<int>(v);
}

struct Subcommand {
  std::string_view name;
  int (*run)(const Options&);
  size_t plans;                 // PLAN arguments it takes
  std::vector<std::string_view> flags;
};

const std::vector<Subcommand>& subcommands() {
  static const std::vector<Subcommand> list = {
      {"summary", inspect::run_summary, 1, {}},
      {"timeline", inspect::run_timeline, 1, {"--width", "--height", "--ascii"}},
      {"verify", inspect::run_verify, 1, {"--budget", "--json"}},
      {"trace", inspect::run_trace, 1, {"-o"}},
      {"svg", inspect::run_svg, 1, {"-o"}},
      {"diff", inspect::run_diff, 2, {"--top"}},
  };
  return list;
}

int run(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  for (const std::string& a : args) {
    if (a == "-h" || a == "--help") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    if (a == "--version") {
      std::puts("autovm-inspect " AUTOVM_VERSION);
      return 0;
    }
  }
  if (args.empty()) usage_error("no plan given: autovm-inspect [summary] PLAN");
  const Subcommand* cmd = &subcommands().front();
  size_t i = 0;
  for (const Subcommand& c : subcommands())
    if (args[0] == c.name) {
      cmd = &c;
      i = 1;
    }
  Options o;
  for (; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg.size() > 1 && arg[0] == '-') {
      if (std::find(cmd->flags.begin(), cmd->flags.end(), arg) == cmd->flags.end())
        usage_error(fmt::format("'{}' takes no option '{}'", cmd->name, arg));
      auto value = [&]() -> std::string {
        if (i + 1 >= args.size()) usage_error(fmt::format("{} needs a value", arg));
        return args[++i];
      };
      if (arg == "--width") o.width = parse_int(arg, value(), 10, 2000);
      else if (arg == "--height") o.height = parse_int(arg, value(), 4, 200);
      else if (arg == "--ascii") o.ascii = true;
      else if (arg == "--budget") o.budget = inspect::parse_size(value());
      else if (arg == "--json") o.json = true;
      else if (arg == "-o") o.output = value();
      else if (arg == "--top") o.top = parse_int(arg, value(), 1, 100000);
    } else {
      o.plans.push_back(arg);
    }
  }
  if (o.plans.size() != cmd->plans)
    usage_error(fmt::format("'{}' takes {} plan{}, got {}", cmd->name, cmd->plans,
                            cmd->plans == 1 ? "" : "s", o.plans.size()));
  if (std::find(cmd->flags.begin(), cmd->flags.end(), "-o") != cmd->flags.end() && o.output.empty())
    usage_error(fmt::format("'{}' needs -o FILE", cmd->name));
  return cmd->run(o);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const Failure& e) {
    std::fprintf(stderr, "autovm-inspect: error: %s\n", e.what());
    return static_cast<int>(e.code());
  }
}
