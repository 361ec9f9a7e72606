// autovm-plan: the ahead-of-time compiler's command line. See usage() for the contract.
#include <fmt/format.h>
#include <malloc.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "analysis/pytorch_memory.h"
#include "model/supported_ops.h"
#include "driver/pipeline.h"
#include "driver/summary.h"
#include "emit/plan_json.h"
#include "util/atomic_file.h"
#include "util/error.h"
#include "util/parallel.h"
#include "util/pass_timer.h"
#include "util/size.h"

namespace {

constexpr const char* kUsage = R"(usage: autovm-plan MODEL [--budget SIZE|min] [--batch N] [--optimizer sgd|momentum|adam]
                   [--device NAME|FILE] [--mechanism NAME] [-o PLAN] [--quiet] ...

Plans the training step of a CNN exported to ONNX: builds forward, loss (softmax
cross-entropy unless --loss says otherwise), backward and optimizer, computes every tensor's lifetime, the memory
timeline and its peak, and lays every tensor out in one arena. When the peak exceeds the
budget it plans which tensors to evict to host memory and when to prefetch them back (or
recompute them), predicts the step time on the device, and compares it with the lower
bound and with baseline policies. Writes the plan as JSON (schemas/plan.schema.json) to
PLAN, or to standard output; prints a summary to standard error.

options:
  --budget SIZE|min     GPU memory the step may use (default: no limit). SIZE is a
                        number with a unit: B, KB, MB, GB, TB (powers of 10) or KiB,
                        MiB, GiB, TiB (powers of 2), e.g. 8GB, 7.5GiB. 'min' plans for
                        the smallest budget any plan can meet. A budget below a step's
                        working set is met by reading some of that step's inputs where
                        they lie in host memory, over the link, when the mechanism can
                        (docs/execution-model.md, "Remote reads").
  --device NAME|FILE    device profile: a shipped name (h200-pcie, rtx3070-8gb,
                        rtx3060-12gb, v100-16gb-pcie, a100-40gb-pcie) or a JSON file
                        (default: h200-pcie)
  --mechanism NAME      transfer mechanism of the profile (default: the profile's own)
  --step-times FILE     measured step times in microseconds that replace the cost model's
                        (JSON: {"step_us": [...]}, one per step, or {"by_node":
                        {"<node>/<op>": us}} for the steps named), e.g. from the PyTorch
                        adapter's profile run
  --reserve FILE        memory the trainer holds beyond the graph's tensors at each step
                        (JSON: {"step_bytes": [...]} or {"by_node": {...}}, e.g. from the
                        PyTorch adapter's memory trace), planned as part of each step's
                        workspace
  --conv-workspaces FILE
                        convolution workspaces measured on the trainer's GPU, planned in
                        place of the estimate for the convolutions they match (JSON:
                        {"convolutions": [...]}, as autovm.conv_workspaces writes it);
                        the entries' measured times, where present, replace the cost
                        model's for those convolutions' steps
  --workspaces-as-measured
                        plan measured workspaces at their size, never cut to the budget:
                        for a trainer whose allocator cannot make cuDNN fall back to an
                        algorithm with less (autovm.allocator's pool)
  --no-recompute        move tensors only; never plan recomputation
  --no-remote-reads     every step keeps its whole working set resident: for a trainer
                        that cannot let a kernel read host memory (the budget, and
                        --budget min, then stay at or above the largest working set)
  --recompute-ops OPS   recompute chains run only these ONNX ops (comma-separated, e.g.
                        'BatchNormalization,Relu,MaxPool' for a trainer that can replay
                        cheap ops but not convolutions); the lower bound allows the same
                        (default: every forward op but Dropout)
  --movable KINDS       only tensors of these kinds (comma-separated, as the plan names
                        them: input, label, parameter, buffer, gradient, optimizer_state,
                        activation, activation_grad, workspace) may be evicted, discarded
                        or recomputed; the others stay resident throughout, and --budget
                        min counts them (default: every kind). E.g. 'activation' for a
                        trainer that moves saved activations only
  --movable-at-last-use KINDS
                        tensors of these kinds (not in --movable) may leave the GPU only
                        to be read remotely by the step that reads them last: a trainer
                        that reaches them only then (the PyTorch adapter's activation
                        gradients); never prefetched, discarded or recomputed
  --batch N             batch size; overrides the input's first dimension, symbolic or
                        fixed (default: the model's own, when fixed)
  --optimizer NAME      sgd (default), momentum or adam
  --loss cross-entropy|mse|external
                        the loss, one term per floating-point output of rank 2 or
                        more (a segmentation model's out and aux): cross-entropy
                        (default) over axis 1 against int64 labels, class logits
                        [N, C] with labels [N] or per pixel/voxel [N, C, H, W] with
                        [N, H, W]; mse against a float target of each output's shape;
                        external: the script computes the loss outside the plan
                        (Dice, focal...) and backward starts from the outputs'
                        gradients, the loss's memory reserved as a workspace of the
                        outputs' size (--reserve "/ExternalLoss" adds to it).
                        Written to the plan's options as "loss" unless cross-entropy
  --autocast bf16|fp16  plan training under torch.autocast: convolutions and linear
                        layers in bf16 or fp16 (their weights' cast copies kept for
                        backward), softmax, layer/group norm and the loss in fp32,
                        other ops in their inputs' widest dtype; parameters, gradients
                        and optimizer state fp32; with fp16, GradScaler's unscale and
                        inf check over every gradient. Written to the plan's options
                        as "autocast" (default: none, fp32 training)
  -o, --output PLAN     write the plan here (atomically: a temporary file beside it,
                        then a rename; the file keeps its permissions, and a read-only
                        one is refused) instead of standard output ('-')
  --workspace-limit SIZE
                        most scratch memory assumed for one convolution (default 256MiB)
  --memory-model autovm|pytorch
                        pytorch: also predict the peak that plain PyTorch reaches for
                        this step (torch.cuda.max_memory_allocated: autograd's saved
                        tensors, the caching allocator, cuDNN), say whether it fits the
                        budget, and write it to the plan as "pytorch_memory"
  --data-parallel       data-parallel training (PyTorch DistributedDataParallel, one
                        plan per rank): add DDP's gradient buckets (flat tensors the size
                        of all parameter gradients, held the whole step) as persistent
                        tensors; written to the plan's options as "data_parallel"
  --bucket-mb MB        DDP's bucket_cap_mb with --data-parallel (default 25, MiB; the
                        first bucket holds 1 MiB)
  --pool-indices        max pooling keeps the int64 positions of its maxima for backward
                        (an activation twice its fp32 output's size) and its backward
                        reads them and its input, not its output, as PyTorch's autograd
                        does; the PyTorch adapter moves them like any saved tensor
                        (default: backward reads the pooling's output, as ONNX has it)
  --explain-bound       the summary also shows how the lower bound is made: the term that
                        sets it and bound(s) at the steps where it is worked out
                        (compiler/plan/bound.h); with --quiet, only that
  --quiet               no summary on standard error
  -h, --help            this text
  --version             the version

exit codes:
  0  the plan was written
  1  internal error (a bug: please report it)
  2  bad usage: unknown option, unparsable size, batch 0
  3  the model file is missing or unreadable
  4  the file is not a valid ONNX model (not ONNX, truncated, inconsistent shapes)
  5  the model uses ops AutoVM does not support (all of them are named)
  6  no plan fits the budget: a step needs more than it on its own (the message names
     the step, its tensors and the smallest budget that works)
  7  the plan could not be written (the folder is missing or not writable, PLAN is
     read-only or a directory)

environment:
  AUTOVM_PROFILE_PATH=DIR[:DIR...]
                        folders of device profiles (NAME.json) searched by --device NAME
                        before the installed ones (../share/autovm/profiles from the
                        folder of this program)
  AUTOVM_THREADS=N      threads for planning's independent trials, 1 to 64 (default: the
                        machine's hardware threads, at most 8); the plan is the same byte
                        for byte whatever their number
  AUTOVM_TIMINGS=1      print each pass's time (and plan_under_budget's parts) to standard
                        error
)";

struct Args {
  std::string model;
  std::string output;
  autovm::PlanOptions options;
  bool quiet = false;
  bool pytorch_memory = false;  // --memory-model pytorch
  bool bucket_given = false;
  bool recompute_ops_given = false;
  bool movable_given = false;  // --movable
};

[[noreturn]] void usage_error(const std::string& message) {
  throw autovm::Error(autovm::ErrorKind::usage,
                      message + "\n(run 'autovm-plan --help' for the options)");
}

// --recompute-ops: comma-separated ONNX op types that AutoVM supports, sorted and unique.
// The items of a comma-separated option value, in order (empty items included).
std::vector<std::string> split_commas(const std::string& text) {
  std::vector<std::string> items;
  size_t begin = 0;
  for (;;) {
    size_t end = text.find(',', begin);
    items.push_back(text.substr(begin, end == std::string::npos ? std::string::npos : end - begin));
    if (end == std::string::npos) return items;
    begin = end + 1;
  }
}

autovm::RecomputeOps parse_recompute_ops(const std::string& text) {
  autovm::RecomputeOps ops;
  for (const std::string& item : split_commas(text)) {
    if (item == "Dropout")
      usage_error("--recompute-ops: Dropout cannot be recomputed (it is random: running it "
                  "again gives another mask)");
    if (!autovm::model::is_supported_op(item)) {
      std::string names;
      for (std::string_view n : autovm::model::supported_op_names())
        names += fmt::format("{}{}", names.empty() ? "" : ", ", n);
      usage_error(fmt::format("--recompute-ops: '{}' is not an ONNX op AutoVM supports: use {}",
                              item, names));
    }
    ops.ops.push_back(item);
  }
  std::sort(ops.ops.begin(), ops.ops.end());
  ops.ops.erase(std::unique(ops.ops.begin(), ops.ops.end()), ops.ops.end());
  return ops;
}

// --movable, --movable-at-last-use: comma-separated tensor kind names, as the plan JSON writes
// them; the bits of the kinds named.
uint32_t parse_kinds(const std::string& flag, const std::string& text) {
  autovm::MovableKinds kinds;
  kinds.bits = 0;
  std::string names;
  for (int k = 0; k < autovm::kTensorKindCount; ++k)
    names += fmt::format("{}{}", k ? ", " : "", autovm::name(autovm::TensorKind(k)));
  for (const std::string& item : split_commas(text)) {
    bool known = false;
    for (int k = 0; k < autovm::kTensorKindCount && !known; ++k)
      if (item == autovm::name(autovm::TensorKind(k))) {
        kinds.add(autovm::TensorKind(k));
        known = true;
      }
    if (!known)
      usage_error(fmt::format("{}: unknown tensor kind '{}': use {}", flag, item, names));
  }
  return kinds.bits;
}

int64_t parse_count(const std::string& flag, const std::string& text) {
  char* end = nullptr;
  errno = 0;
  long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno != 0)
    usage_error(fmt::format("{} takes a whole number, not '{}'", flag, text));
  if (v < 1) usage_error(fmt::format("{} must be at least 1, not {}", flag, text));
  return v;
}

Args parse_args(int argc, char** argv, bool& done) {
  Args a;
  a.options.budget_bytes = std::numeric_limits<int64_t>::max();
  std::vector<std::string> args(argv + 1, argv + argc);
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= args.size()) usage_error(fmt::format("{} needs a value", arg));
      return args[++i];
    };
    if (arg == "-h" || arg == "--help") {
      std::fputs(kUsage, stdout);
      done = true;
      return a;
    } else if (arg == "--version") {
      std::puts("autovm-plan " AUTOVM_VERSION);
      done = true;
      return a;
    } else if (arg == "--budget") {
      std::string v = value();
      if (v == "min") a.options.minimum_budget = true;
      else a.options.budget_bytes = autovm::parse_size(v);
    } else if (arg == "--device") {
      a.options.device = value();
    } else if (arg == "--mechanism") {
      a.options.mechanism = value();
    } else if (arg == "--step-times") {
      a.options.step_times_file = value();
    } else if (arg == "--reserve") {
      a.options.reserve_file = value();
    } else if (arg == "--no-recompute") {
      a.options.allow_recompute = false;
    } else if (arg == "--no-remote-reads") {
      a.options.remote_reads = false;
    } else if (arg == "--recompute-ops") {
      a.options.recompute_ops = parse_recompute_ops(value());
      a.recompute_ops_given = true;
    } else if (arg == "--movable") {
      a.options.movable.bits = parse_kinds(arg, value());
      a.movable_given = true;
    } else if (arg == "--movable-at-last-use") {
      a.options.movable.last_use_bits = parse_kinds(arg, value());
    } else if (arg == "--batch") {
      a.options.batch = parse_count(arg, value());
    } else if (arg == "--optimizer") {
      std::string v = value();
      auto o = autovm::training::parse_optimizer(v);
      if (!o) usage_error(fmt::format("unknown optimizer '{}': use sgd, momentum or adam", v));
      a.options.optimizer = *o;
    } else if (arg == "--loss") {
      std::string v = value();
      auto l = autovm::training::parse_loss(v);
      if (!l) usage_error(fmt::format("unknown loss '{}': use cross-entropy, mse or external", v));
      a.options.loss = *l;
    } else if (arg == "--autocast") {
      std::string v = value();
      auto ac = autovm::training::parse_autocast(v);
      if (!ac) usage_error(fmt::format("unknown autocast dtype '{}': use bf16, fp16 or none", v));
      a.options.autocast = *ac;
    } else if (arg == "-o" || arg == "--output") {
      a.output = value();
      if (a.output.empty())
        usage_error(fmt::format("{} needs a file name, not ''; leave it out (or write '-') for "
                                "standard output", arg));
    } else if (arg == "--conv-workspaces") {
      a.options.conv_workspaces_file = value();
    } else if (arg == "--workspaces-as-measured") {
      a.options.workspaces_as_measured = true;
    } else if (arg == "--workspace-limit") {
      a.options.conv_workspace_limit = autovm::parse_size(value(), true);
    } else if (arg == "--memory-model") {
      std::string v = value();
      if (v != "autovm" && v != "pytorch")
        usage_error(fmt::format("unknown memory model '{}': use autovm or pytorch", v));
      a.pytorch_memory = v == "pytorch";
    } else if (arg == "--data-parallel") {
      a.options.data_parallel.enabled = true;
    } else if (arg == "--bucket-mb") {
      std::string v = value();
      char* end = nullptr;
      double mb = std::strtod(v.c_str(), &end);
      if (v.empty() || *end != '\0' || !(mb > 0) || mb > 1e9)
        usage_error(fmt::format("--bucket-mb takes a positive number of MiB, not '{}'", v));
      a.options.data_parallel.bucket_cap_bytes = static_cast<int64_t>(mb * 1024 * 1024);
      a.bucket_given = true;
    } else if (arg == "--pool-indices") {
      a.options.pool_indices = true;
    } else if (arg == "--explain-bound") {
      a.options.explain_bound = true;
    } else if (arg == "--quiet") {
      a.quiet = true;
    } else if (!arg.empty() && arg[0] == '-' && arg != "-") {
      usage_error(fmt::format("unknown option '{}'", arg));
    } else if (a.model.empty()) {
      a.model = arg;
    } else {
      usage_error(fmt::format("one model at a time: got '{}' and '{}'", a.model, arg));
    }
  }
  if (a.model.empty()) usage_error("no model given: autovm-plan MODEL.onnx [--budget SIZE]");
  if (a.bucket_given && !a.options.data_parallel.enabled) usage_error("--bucket-mb needs --data-parallel");
  if (a.recompute_ops_given && !a.options.allow_recompute)
    usage_error("--recompute-ops and --no-recompute contradict each other: give one");
  if (const uint32_t both = a.options.movable.bits & a.options.movable.last_use_bits) {
    std::string kinds;
    for (int k = 0; k < autovm::kTensorKindCount; ++k)
      if ((both >> k) & 1) kinds += fmt::format("{}{}", kinds.empty() ? "" : ", ", autovm::name(autovm::TensorKind(k)));
    usage_error(fmt::format("--movable-at-last-use: {} {} fully movable already ({}): give "
                            "--movable the kinds that move freely, without these",
                            kinds, kinds.find(',') == std::string::npos ? "is" : "are",
                            a.movable_given ? "in --movable" : "every kind is, without --movable"));
  }
  const char* threads = std::getenv("AUTOVM_THREADS");  // empty: as if unset
  if (threads && *threads && !autovm::thread_count_from(threads))
    usage_error(fmt::format("AUTOVM_THREADS is '{}': set it to a whole number from 1 to 64, or "
                            "unset it", threads));
  return a;
}

// Page faults are the main cost of planning a large model: tens of microseconds each on a
// virtual machine, and a chain of 100,000 convolutions touches most of a gigabyte. So the
// process keeps its memory in one heap that is never trimmed (memory one pass frees is reused by
// the next instead of being returned and faulted in again), and advises the heap's first
// gigabyte for transparent huge pages: one fault per 2 MiB instead of one per 4 KiB. Only
// address space is reserved; pages are touched as allocations use them.
struct Heap {
  uintptr_t begin = 0, end = 0;  // reserved, advised for huge pages, not yet touched
};

Heap tune_heap() {
  constexpr int kPad = 1 << 30;
  constexpr uintptr_t kHugePage = uintptr_t(2) << 20;
  mallopt(M_MMAP_MAX, 0);              // large blocks from the heap too, reused once freed
  mallopt(M_TRIM_THRESHOLD, INT_MAX);  // never hand freed memory back before exit
  mallopt(M_TOP_PAD, kPad);            // grow the heap a gigabyte at a time
  auto begin = reinterpret_cast<uintptr_t>(sbrk(0));
  void* volatile first = std::malloc(kHugePage);  // grows the heap by the pad (volatile: kept)
  std::free(first);
  auto end = reinterpret_cast<uintptr_t>(sbrk(0));
  begin = (begin + kHugePage - 1) / kHugePage * kHugePage;
  if (end <= begin) return {};
  madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
  return {begin, end};
}

// Faulting a page in (the kernel zeroes it) is most of the cost of fresh memory, and the passes
// of a large model fill the heap from its start. So, for a large model file, a second thread
// faults in the part of the heap the planner will use (about 30 bytes per byte of model: the
// 0.84 GB a chain of 100,000 convolutions takes), ahead of the thread that plans, which then
// finds its pages ready. MADV_POPULATE_WRITE only faults pages in, never changes their contents,
// so it is safe beside allocations in use; the thread touches no other state and may still run
// at exit. Small models (under 4 MiB) plan in milliseconds and are left alone.
void prefault(const Heap& heap, const std::string& model_path) {
  constexpr off_t kLargeModel = off_t(4) << 20;
  static constexpr uintptr_t kPerModelByte = 30, kChunk = uintptr_t(16) << 20;
  struct stat st {};
  if (heap.end <= heap.begin || ::stat(model_path.c_str(), &st) != 0 || st.st_size < kLargeModel) return;
  uintptr_t end = std::min(heap.end, heap.begin + uintptr_t(st.st_size) * kPerModelByte);
  std::thread([begin = heap.begin, end] {
    for (uintptr_t p = begin; p < end; p += kChunk)
      if (madvise(reinterpret_cast<void*>(p), std::min(kChunk, end - p), MADV_POPULATE_WRITE) != 0) return;
  }).detach();
}

int run(int argc, char** argv, const Heap& heap) {
  bool done = false;
  Args a = parse_args(argc, argv, done);
  if (done) return 0;
  prefault(heap, a.model);
  // The plan lives until the process exits: tearing down its many small allocations would
  // only cost time.
  // The model is not freed either (make_plan_keeping_model).
  auto& model = *new autovm::model::Model;
  autovm::Plan& plan = *new autovm::Plan(autovm::make_plan_keeping_model(a.model, a.options, model));
  if (a.pytorch_memory) {
    autovm::PytorchMemoryOptions pm;
    pm.conv_workspace_of_graph = !a.options.conv_workspaces_file.empty();
    plan.pytorch_memory = autovm::predict_pytorch_memory(plan.training.graph, pm);
  }
  if (!a.quiet) std::fputs(autovm::plan_summary(plan).c_str(), stderr);
  if (plan.bound_terms) std::fputs(autovm::bound_explanation(plan).c_str(), stderr);
  autovm::PassTimer timer;
  if (a.output == "-" || a.output.empty()) {  // empty: -o not given (parse_args refuses -o '')
    autovm::write_plan_json(plan, [](std::string_view piece) {
      if (std::fwrite(piece.data(), 1, piece.size(), stdout) != piece.size())
        throw autovm::Error(autovm::ErrorKind::output, "cannot write the plan to standard output");
    });
    if (std::fflush(stdout) != 0)
      throw autovm::Error(autovm::ErrorKind::output, "cannot write the plan to standard output");
  } else {
    autovm::AtomicFileWriter out(a.output);
    autovm::write_plan_json(plan, [&](std::string_view piece) { out.write(piece); });
    out.commit();
  }
  timer.done("write_plan_json");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Heap heap = tune_heap();
  try {
    return run(argc, argv, heap);
  } catch (const autovm::Error& e) {
    std::fprintf(stderr, "autovm-plan: error: %s\n", e.what());
    return e.exit_code();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "autovm-plan: internal error: %s\n", e.what());
    return 1;
  }
}
