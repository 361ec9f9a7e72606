// autovm-replay: runs a plan's training step on the GPU with synthetic kernels, under each
// runtime mode and mechanism, and prints measured step times beside the plan's predictions;
// `--bench` measures the runtime's transfer mechanisms alone. Usage: autovm-replay --help.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "autovm/autovm.h"
#include "backend.h"
#include "kernels.h"
#include "plan.h"
#include "um_counters.h"

namespace {

using autovm::replay::Span;
using nlohmann::json;

constexpr int kExitUsage = 2, kExitPlan = 3, kExitCuda = 4, kExitNoGpu = 5;

const char* const kUsage = R"(usage: autovm-replay PLAN [options]    replay a plan's training step on the GPU
       autovm-replay --bench [options]   measure the transfer mechanisms alone

Replay runs every step of the plan as a synthetic kernel that reads the step's inputs and writes
its outputs in the runtime's arena, then holds the GPU for the step's predicted compute time;
an input the plan reads remotely (read_remote) is read where the runtime has it for that step,
from host memory. Each mode runs --warmup training steps, then --steps measured ones; the median
is printed with the stall, bytes moved and read remotely, CUPTI's unified-memory counters and
the plan's predictions.

options:
  --modes LIST       comma-separated, from: resident (no actions, no budget), demand (the plan's
                     evictions through the driver, no prefetches: pages fault back), prefetch,
                     staged, mapped (AutoVM with that mechanism). Default: all five.
  --steps N          measured training steps per mode (default 5)
  --warmup N         training steps before measuring (default 2)
  --device N         CUDA device (default 0)
  --free-margin GIB  device memory to leave free beyond the arena (default 1)
  --json FILE        also write the results as JSON
  --verbose          print each training step's time as it completes (synchronises)
  --sizes LIST       --bench: transfer sizes in bytes with K/M/G suffixes
                     (default 64K,256K,1M,4M,16M,64M,256M,1G,4G)
  --mechanisms LIST  --bench: from prefetch, staged, staged-noadvice (staged without
                     the arena's AccessedBy advice), mapped (default: all but staged-noadvice)
  --repeat N         --bench: repetitions per size, median printed (default 5)
  -h, --help         this text

exit codes: 0 done, 2 usage, 3 the plan cannot be read, 4 a CUDA or runtime error,
            5 no CUDA device
)";

struct Options {
  std::string plan;
  bool bench = false;
  std::vector<std::string> modes = {"resident", "demand", "prefetch", "staged", "mapped"};
  int steps = 5, warmup = 2, device = 0, repeat = 5;
  double free_margin_gib = 1.0;
  bool verbose = false;
  std::string json_out;
  std::vector<int64_t> sizes;
  std::vector<std::string> mechanisms = {"prefetch", "staged", "mapped"};
};

[[noreturn]] void die(int code, const std::string& message) {
  std::fprintf(stderr, "autovm-replay: %s\n", message.c_str());
  std::exit(code);
}

std::vector<std::string> split(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

int64_t parse_size(const std::string& text) {
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  int64_t unit = 1;
  if (end != nullptr && *end != '\0') {
    switch (*end) {
      case 'K': case 'k': unit = int64_t{1} << 10; break;
      case 'M': case 'm': unit = int64_t{1} << 20; break;
      case 'G': case 'g': unit = int64_t{1} << 30; break;
      default: die(kExitUsage, "size '" + text + "' is not a number with K, M or G");
    }
    if (end[1] != '\0' && std::strcmp(end + 1, "iB") != 0 && std::strcmp(end + 1, "B") != 0)
      die(kExitUsage, "size '" + text + "' is not a number with K, M or G");
  }
  if (!(value > 0)) die(kExitUsage, "size '" + text + "' must be positive");
  return static_cast<int64_t>(value * static_cast<double>(unit));
}

int parse_int(const std::string& text, const char* flag, int least) {
  char* end = nullptr;
  const long v = std::strtol(text.c_str(), &end, 10);
  if (end == text.c_str() || *end != '\0' || v < least || v > 1000000)
    die(kExitUsage, std::string(flag) + " takes an integer >= " + std::to_string(least) +
                        ", not '" + text + "'");
  return static_cast<int>(v);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) die(kExitUsage, a + " needs a value (see --help)");
      return argv[++i];
    };
    if (a == "-h" || a == "--help") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    } else if (a == "--verbose") {
      o.verbose = true;
    } else if (a == "--bench") {
      o.bench = true;
    } else if (a == "--modes") {
      o.modes = split(value());
      for (const auto& m : o.modes)
        if (m != "resident" && m != "demand" && m != "prefetch" && m != "staged" && m != "mapped")
          die(kExitUsage, "unknown mode '" + m + "' (resident, demand, prefetch, staged, mapped)");
    } else if (a == "--mechanisms") {
      o.mechanisms = split(value());
      for (const auto& m : o.mechanisms)
        if (m != "prefetch" && m != "staged" && m != "staged-noadvice" && m != "mapped")
          die(kExitUsage, "unknown mechanism '" + m + "' (prefetch, staged, mapped)");
    } else if (a == "--steps") {
      o.steps = parse_int(value(), "--steps", 1);
    } else if (a == "--warmup") {
      o.warmup = parse_int(value(), "--warmup", 0);
    } else if (a == "--device") {
      o.device = parse_int(value(), "--device", 0);
    } else if (a == "--repeat") {
      o.repeat = parse_int(value(), "--repeat", 1);
    } else if (a == "--free-margin") {
      o.free_margin_gib = std::strtod(value().c_str(), nullptr);
    } else if (a == "--json") {
      o.json_out = value();
    } else if (a == "--sizes") {
      for (const auto& s : split(value())) o.sizes.push_back(parse_size(s));
    } else if (!a.empty() && a[0] == '-') {
      die(kExitUsage, "unknown option '" + a + "' (see --help)");
    } else if (o.plan.empty()) {
      o.plan = a;
    } else {
      die(kExitUsage, "more than one plan given ('" + o.plan + "', '" + a + "')");
    }
  }
  if (!o.bench && o.plan.empty()) die(kExitUsage, "no plan given (see --help)");
  if (o.sizes.empty())
    for (int64_t s = int64_t{64} << 10; s <= int64_t{4} << 30; s *= 4) o.sizes.push_back(s);
  return o;
}

void cuda_check(cudaError_t e, const std::string& what) {
  if (e != cudaSuccess)
    die(kExitCuda, what + " failed: " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")");
}

void api_check(autovm_status s, const std::string& what) {
  if (s != AUTOVM_OK) die(s == AUTOVM_ERR_PLAN || s == AUTOVM_ERR_IO ? kExitPlan : kExitCuda,
                          what + ": " + autovm_last_error());
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

void require_gpu(int device) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0)
    die(kExitNoGpu, std::string("no CUDA device (") + cudaGetErrorString(e) + ")");
  if (device >= count) die(kExitUsage, "--device " + std::to_string(device) + ": only " +
                                           std::to_string(count) + " devices");
  cuda_check(cudaSetDevice(device), "cudaSetDevice");
}

// ---- replay ---------------------------------------------------------------------------------

struct Predictions {
  double autovm_us = 0, no_swap_us = 0, demand_us = 0, bound_us = 0;
  std::string mechanism;
};

Predictions read_predictions(const std::string& path) {
  std::ifstream in(path);
  Predictions p;
  json plan;
  try {
    plan = json::parse(in);
  } catch (const json::exception& e) {
    die(kExitPlan, "cannot parse '" + path + "' as JSON: " + e.what());
  }
  p.mechanism = plan["options"].value("mechanism", "");
  const json& stats = plan["statistics"];
  if (stats.contains("prediction")) {
    const json& pr = stats["prediction"];
    p.autovm_us = pr.value("step_time_us", 0.0);
    p.no_swap_us = pr.value("no_swap_step_time_us", 0.0);
    p.bound_us = pr.value("bound_us", 0.0);
  }
  if (stats.contains("baselines"))
    for (const json& b : stats["baselines"])
      if (b.value("policy", "") == "demand_paging" && b.value("fits", false))
        p.demand_us = b.value("step_time_us", 0.0);
  return p;
}

struct ModeResult {
  std::string mode;
  double median_ms = 0, min_ms = 0, max_ms = 0;
  double stall_ms = 0;  // per training step
  int64_t late = 0, violations = 0;
  double to_host_gb = 0, to_device_gb = 0;  // per training step, issued by the runtime
  double remote_gb = 0;                     // per training step, read remotely by the steps
  autovm::replay::UmCounts um;              // per training step, CUPTI
  bool um_available = false;
  double host_us_per_call = 0;           // measured steps: includes waiting on a full launch queue
  double host_us_per_call_unloaded = 0;  // one extra step, the GPU idle at every call
  int64_t peak_resident = 0;
  int64_t memory_bytes = 0;  // the runtime's arena as laid out, temporaries included
  int64_t device_bytes = 0;  // device memory the runtime took (cudaMemGetInfo before and after)
  std::vector<double> stall_by_step_us;  // per training step
};

ModeResult replay_mode(const autovm_plan* plan, const std::string& mode, const Options& o) {
  autovm_runtime_options ro;
  autovm_runtime_options_init(&ro);
  ro.backend = AUTOVM_BACKEND_CUDA;
  ro.device = o.device;
  ro.free_margin_bytes = static_cast<int64_t>(o.free_margin_gib * (1 << 30));
  if (mode == "resident") {
    ro.mode = AUTOVM_MODE_RESIDENT;
    ro.mechanism = AUTOVM_MECHANISM_MAPPED;  // plain device memory
  } else if (mode == "demand") {
    ro.mode = AUTOVM_MODE_DEMAND_PAGING;
    ro.mechanism = AUTOVM_MECHANISM_PREFETCH;
  } else {
    ro.mechanism = mode == "prefetch" ? AUTOVM_MECHANISM_PREFETCH
                   : mode == "staged" ? AUTOVM_MECHANISM_STAGED
                                      : AUTOVM_MECHANISM_MAPPED;
  }
  autovm_runtime* rt = nullptr;
  size_t free_before = 0, free_after = 0, device_total = 0;
  cuda_check(cudaMemGetInfo(&free_before, &device_total), "cudaMemGetInfo");
  api_check(autovm_runtime_create(plan, &ro, &rt), "autovm_runtime_create (" + mode + ")");
  cuda_check(cudaMemGetInfo(&free_after, &device_total), "cudaMemGetInfo");

  int32_t tensor_count = 0;
  int64_t step_count = 0, action_count = 0;
  autovm_plan_tensor_count(plan, &tensor_count);
  autovm_plan_step_count(plan, &step_count);
  autovm_plan_action_count(plan, &action_count);
  std::vector<int64_t> tensor_bytes(static_cast<size_t>(tensor_count));
  for (int32_t t = 0; t < tensor_count; ++t) {
    autovm_tensor_info info;
    autovm_plan_tensor_info(plan, t, &info);
    tensor_bytes[static_cast<size_t>(t)] = info.bytes;
  }
  // What each step reads and writes, by tensor id: pointers are asked for at every launch, since
  // a chain temporary lies outside the arena while it exists, and a tensor read remotely on the
  // mapped mechanism's arena where its host copy is mapped (autovm_tensor_pointer).
  struct StepWork {
    std::vector<int32_t> in, out;
    double hold_us = 0;
  };
  std::vector<StepWork> work(static_cast<size_t>(step_count));
  for (int64_t s = 0; s < step_count; ++s) {
    autovm_step_info info;
    autovm_plan_step_info(plan, s, &info);
    StepWork& w = work[static_cast<size_t>(s)];
    w.in.assign(info.inputs, info.inputs + info.input_count);
    w.out.assign(info.outputs, info.outputs + info.output_count);
    if (info.workspace >= 0) w.out.push_back(info.workspace);
    w.hold_us = info.compute_us;
  }
  // Recomputations due before each step: the source step again, writing the recomputed tensor.
  std::vector<std::vector<StepWork>> recompute(static_cast<size_t>(step_count));
  if (mode != "resident")
    for (int64_t i = 0; i < action_count; ++i) {
      autovm_action_info a;
      autovm_plan_action_info(plan, i, &a);
      if (a.kind != AUTOVM_ACTION_RECOMPUTE || a.ready_before_step >= step_count) continue;
      StepWork w = work[static_cast<size_t>(a.source_step)];
      w.out = {a.tensor};
      recompute[static_cast<size_t>(a.ready_before_step)].push_back(std::move(w));
    }
  std::vector<Span> in_spans, out_spans;
  auto launch = [&](const StepWork& w, cudaStream_t stream, const char* what) {
    auto spans = [&](const std::vector<int32_t>& ids, std::vector<Span>& into) {
      into.clear();
      for (int32_t id : ids) {
        Span sp{nullptr, tensor_bytes[static_cast<size_t>(id)]};
        api_check(autovm_tensor_pointer(rt, id, &sp.ptr), "autovm_tensor_pointer");
        into.push_back(sp);
      }
    };
    spans(w.in, in_spans);
    spans(w.out, out_spans);
    cuda_check(autovm::replay::run_step(in_spans.data(), static_cast<int>(in_spans.size()),
                                        out_spans.data(), static_cast<int>(out_spans.size()),
                                        w.hold_us, stream),
               what);
  };

  cudaStream_t stream = nullptr;
  cuda_check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  const int total = o.warmup + o.steps;
  std::vector<cudaEvent_t> begin(static_cast<size_t>(total)), end(static_cast<size_t>(total));
  for (int i = 0; i < total; ++i) {
    cuda_check(cudaEventCreate(&begin[static_cast<size_t>(i)]), "cudaEventCreate");
    cuda_check(cudaEventCreate(&end[static_cast<size_t>(i)]), "cudaEventCreate");
  }
  autovm::replay::UmCounters um;
  double host_seconds = 0;
  int64_t host_calls = 0;
  for (int it = 0; it < total; ++it) {
    if (it == o.warmup) {
      cuda_check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
      api_check(autovm_runtime_stats_reset(rt), "autovm_runtime_stats_reset");
      um.start();
      host_seconds = 0;
      host_calls = 0;
    }
    cuda_check(cudaEventRecord(begin[static_cast<size_t>(it)], stream), "cudaEventRecord");
    for (int64_t s = 0; s < step_count; ++s) {
      auto t0 = std::chrono::steady_clock::now();
      api_check(autovm_step_begin(rt, s, stream), "autovm_step_begin");
      host_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      for (const StepWork& w : recompute[static_cast<size_t>(s)])
        launch(w, stream, "recompute kernel");
      launch(work[static_cast<size_t>(s)], stream, "step kernel");
      t0 = std::chrono::steady_clock::now();
      api_check(autovm_step_end(rt, s, stream), "autovm_step_end");
      host_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      host_calls += 2;
    }
    cuda_check(cudaEventRecord(end[static_cast<size_t>(it)], stream), "cudaEventRecord");
    if (o.verbose) {
      float m = 0;
      cuda_check(cudaEventSynchronize(end[static_cast<size_t>(it)]), "cudaEventSynchronize");
      cuda_check(cudaEventElapsedTime(&m, begin[static_cast<size_t>(it)],
                                      end[static_cast<size_t>(it)]),
                 "cudaEventElapsedTime");
      std::fprintf(stderr, "  %s: training step %d: %.1f ms\n", mode.c_str(), it, m);
    }
  }
  cuda_check(cudaDeviceSynchronize(), "cudaDeviceSynchronize after the replay");
  ModeResult r;
  r.mode = mode;
  r.um_available = um.available();
  r.um = um.stop();
  autovm_stats st;
  api_check(autovm_runtime_stats(rt, &st), "autovm_runtime_stats");
  for (int64_t s = 0; s < step_count; ++s) {
    double us = 0;
    api_check(autovm_step_stall_us(rt, s, &us), "autovm_step_stall_us");
    r.stall_by_step_us.push_back(us / o.steps);
  }
  // The runtime's own host cost: one more training step with the device idle at every call
  // (kernels are left out: only the runtime's calls and the copies they enqueue).
  {
    double seconds = 0;
    int64_t calls = 0;
    for (int64_t s = 0; s < step_count; ++s) {
      cuda_check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
      auto t0 = std::chrono::steady_clock::now();
      api_check(autovm_step_begin(rt, s, stream), "autovm_step_begin");
      seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      cuda_check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
      t0 = std::chrono::steady_clock::now();
      api_check(autovm_step_end(rt, s, stream), "autovm_step_end");
      seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      calls += 2;
    }
    cuda_check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    r.host_us_per_call_unloaded = 1e6 * seconds / static_cast<double>(calls);
  }
  std::vector<double> ms;
  for (int it = o.warmup; it < total; ++it) {
    float m = 0;
    cuda_check(cudaEventElapsedTime(&m, begin[static_cast<size_t>(it)], end[static_cast<size_t>(it)]),
               "cudaEventElapsedTime");
    ms.push_back(m);
  }
  r.median_ms = median(ms);
  r.min_ms = *std::min_element(ms.begin(), ms.end());
  r.max_ms = *std::max_element(ms.begin(), ms.end());
  const double n = o.steps;
  r.stall_ms = st.stall_us / 1000.0 / n;
  r.late = st.late_prefetches;
  r.violations = st.violations;
  r.to_host_gb = static_cast<double>(st.bytes_to_host) / 1e9 / n;
  r.to_device_gb = static_cast<double>(st.bytes_to_device) / 1e9 / n;
  r.remote_gb = static_cast<double>(st.remote_read_bytes) / 1e9 / n;
  r.um.bytes_to_device = static_cast<uint64_t>(static_cast<double>(r.um.bytes_to_device) / n);
  r.um.bytes_to_host = static_cast<uint64_t>(static_cast<double>(r.um.bytes_to_host) / n);
  r.um.gpu_page_faults = static_cast<uint64_t>(static_cast<double>(r.um.gpu_page_faults) / n);
  r.host_us_per_call = host_calls ? 1e6 * host_seconds / static_cast<double>(host_calls) : 0;
  r.peak_resident = st.peak_resident_bytes;
  r.memory_bytes = st.memory_bytes;
  r.device_bytes = static_cast<int64_t>(free_before) - static_cast<int64_t>(free_after);
  for (int i = 0; i < total; ++i) {
    cudaEventDestroy(begin[static_cast<size_t>(i)]);
    cudaEventDestroy(end[static_cast<size_t>(i)]);
  }
  cudaStreamDestroy(stream);
  autovm_runtime_free(rt);
  return r;
}

int replay(const Options& o) {
  require_gpu(o.device);
  autovm_plan* plan = nullptr;
  api_check(autovm_plan_load(o.plan.c_str(), &plan), "cannot load the plan");
  const Predictions pred = read_predictions(o.plan);
  int64_t arena = 0, budget = 0, steps = 0;
  autovm_plan_arena_bytes(plan, &arena);
  autovm_plan_budget_bytes(plan, &budget);
  autovm_plan_step_count(plan, &steps);
  cudaDeviceProp prop{};
  cuda_check(cudaGetDeviceProperties(&prop, o.device), "cudaGetDeviceProperties");
  std::printf("autovm-replay: %s on %s (device %d)\n", o.plan.c_str(), prop.name, o.device);
  int64_t actions = 0, remote = 0, remote_bytes = 0;
  autovm_plan_action_count(plan, &actions);
  for (int64_t i = 0; i < actions; ++i) {
    autovm_action_info a;
    autovm_plan_action_info(plan, i, &a);
    if (a.kind != AUTOVM_ACTION_READ_REMOTE) continue;
    ++remote;
    remote_bytes += a.bytes;
  }
  std::printf("  %lld steps, arena %.2f GB, budget %.2f GB, plan made for mechanism '%s'\n",
              static_cast<long long>(steps), arena / 1e9, budget / 1e9, pred.mechanism.c_str());
  if (remote > 0)
    std::printf("  %lld remote reads of %.2f GB a training step (read_remote: from host memory; "
                "demand paging faults them back instead)\n",
                static_cast<long long>(remote), remote_bytes / 1e9);
  std::printf("  %d warm-up + %d measured training steps per mode; times are medians\n\n",
              o.warmup, o.steps);
  std::vector<ModeResult> results;
  for (const std::string& mode : o.modes) {
    results.push_back(replay_mode(plan, mode, o));
    const ModeResult& r = results.back();
    std::fprintf(stderr, "  %s done: %.1f ms\n", mode.c_str(), r.median_ms);
  }
  std::printf("%-9s %10s %9s %9s %6s %9s %9s %9s %9s %9s %8s %9s %9s %9s %9s %9s\n", "mode",
              "step ms", "min", "max", "late", "stall ms", "out GB", "in GB", "remote GB",
              "UM in GB", "faults", "host us", "idle us", "peak GB", "arena GB", "device GB");
  for (const ModeResult& r : results)
    std::printf("%-9s %10.1f %9.1f %9.1f %6lld %9.1f %9.2f %9.2f %9.2f %9.2f %8llu %9.1f %9.1f "
                "%9.2f %9.2f %9.2f\n",
                r.mode.c_str(), r.median_ms, r.min_ms, r.max_ms, static_cast<long long>(r.late),
                r.stall_ms, r.to_host_gb, r.to_device_gb, r.remote_gb, r.um.bytes_to_device / 1e9,
                static_cast<unsigned long long>(r.um.gpu_page_faults), r.host_us_per_call,
                r.host_us_per_call_unloaded, r.peak_resident / 1e9, r.memory_bytes / 1e9,
                r.device_bytes / 1e9);
  std::printf("(late: waits that held the compute stream > 5 us, per mode in total; stall, out, "
              "in, remote (bytes the steps read from host memory: read_remote), UM in (CUPTI's "
              "bytes migrated to the device), faults (GPU page-fault groups): "
              "per training step; host us: mean time in step_begin/step_end while replaying, "
              "including waits on a full launch queue; idle us: the same with the GPU idle; peak: "
              "the executor's resident bytes; arena: the runtime's arena as laid out (mapped: "
              "packed by residency); device: device memory the runtime took, by cudaMemGetInfo)\n");
  std::printf("\nplan's predictions: no swap %.1f ms, AutoVM (%s) %.1f ms, demand paging %.1f ms, "
              "lower bound %.1f ms\n",
              pred.no_swap_us / 1e3, pred.mechanism.c_str(), pred.autovm_us / 1e3,
              pred.demand_us / 1e3, pred.bound_us / 1e3);
  const ModeResult* demand = nullptr;
  const ModeResult* best = nullptr;
  for (const ModeResult& r : results) {
    if (r.mode == "demand") demand = &r;
    if (r.mode != "demand" && r.mode != "resident" && (!best || r.median_ms < best->median_ms))
      best = &r;
    if (r.mode == pred.mechanism && pred.autovm_us > 0)
      std::printf("measured / predicted (%s): %.3f\n", r.mode.c_str(),
                  r.median_ms * 1e3 / pred.autovm_us);
    if (r.mode == "resident" && pred.no_swap_us > 0)
      std::printf("measured / predicted (resident vs no swap): %.3f\n",
                  r.median_ms * 1e3 / pred.no_swap_us);
    if (r.mode == "demand" && pred.demand_us > 0)
      std::printf("measured / predicted (demand paging): %.3f\n",
                  r.median_ms * 1e3 / pred.demand_us);
    if (r.violations > 0)
      std::printf("WARNING: %s: %lld uses of non-resident tensors or steps over the budget\n",
                  r.mode.c_str(), static_cast<long long>(r.violations));
  }
  if (best) {
    if (demand)
      std::printf("best AutoVM mechanism: %s, %.2fx faster than demand paging\n",
                  best->mode.c_str(), demand->median_ms / best->median_ms);
    if (pred.bound_us > 0)
      std::printf("best AutoVM / lower bound: %.3f\n", best->median_ms * 1e3 / pred.bound_us);
  }
  if (!results.empty() && !results.front().um_available) {
    autovm::replay::UmCounters probe;
    probe.start();
    std::printf("CUPTI unified-memory counters unavailable: %s\n", probe.why_not().c_str());
  }
  if (!o.json_out.empty()) {
    json out;
    out["plan"] = o.plan;
    out["device"] = prop.name;
    out["warmup"] = o.warmup;
    out["steps"] = o.steps;
    out["predictions"] = {{"autovm_us", pred.autovm_us}, {"no_swap_us", pred.no_swap_us},
                          {"demand_paging_us", pred.demand_us}, {"bound_us", pred.bound_us},
                          {"mechanism", pred.mechanism}};
    for (const ModeResult& r : results)
      out["modes"].push_back({{"mode", r.mode}, {"median_ms", r.median_ms}, {"min_ms", r.min_ms},
                              {"max_ms", r.max_ms}, {"stall_ms", r.stall_ms}, {"late", r.late},
                              {"violations", r.violations}, {"to_host_gb", r.to_host_gb},
                              {"to_device_gb", r.to_device_gb}, {"remote_gb", r.remote_gb},
                              {"um_bytes_to_device", r.um.bytes_to_device},
                              {"um_bytes_to_host", r.um.bytes_to_host},
                              {"gpu_page_faults", r.um.gpu_page_faults},
                              {"host_us_per_call", r.host_us_per_call},
                              {"host_us_per_call_idle", r.host_us_per_call_unloaded},
                              {"stall_by_step_us", r.stall_by_step_us},
                              {"peak_resident_bytes", r.peak_resident},
                              {"memory_bytes", r.memory_bytes},
                              {"device_bytes", r.device_bytes}});
    std::ofstream(o.json_out) << out.dump(1) << "\n";
  }
  autovm_plan_free(plan);
  return 0;
}

// ---- the mechanism microbenchmark ----------------------------------------------------------

// Two tensors of `bytes` each, both evicted by the plan (so both get pinned host buffers).
autovm::rt::Plan bench_plan(int64_t bytes) {
  using namespace autovm::rt;
  Plan p;
  p.source = "<bench>";
  const int64_t block = int64_t{2} << 20;
  const int64_t stride = (bytes + block - 1) / block * block;
  p.arena_bytes = 2 * stride;
  p.budget_bytes = p.arena_bytes;
  for (int i = 0; i < 2; ++i) {
    Tensor t;
    t.id = i;
    t.name = i == 0 ? "a" : "b";
    t.bytes = bytes;
    t.offset = i * stride;
    t.first = 0;
    t.last = 2;
    p.tensors.push_back(t);
    Action a;
    a.kind = AUTOVM_ACTION_EVICT;
    a.tensor = i;
    a.bytes = bytes;
    a.after_step = 0;
    a.ready_before_step = 1;
    p.actions.push_back(a);
  }
  p.steps.resize(3);
  return p;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

int bench(const Options& o) {
  require_gpu(o.device);
  cudaDeviceProp prop{};
  cuda_check(cudaGetDeviceProperties(&prop, o.device), "cudaGetDeviceProperties");
  std::printf("autovm-replay --bench on %s (device %d): the runtime's own transfer paths, "
              "median of %d; GB/s = 1e9 B/s\n",
              prop.name, o.device, o.repeat);
  std::printf("(each figure is a host-timed call plus cudaDeviceSynchronize: sizes under 1 MiB "
              "are dominated by that fixed cost)\n\n");
  std::printf("%-9s %10s %12s %12s %14s\n", "mechanism", "size", "to device", "to host",
              "both, total");
  json rows = json::array();
  for (const std::string& mech : o.mechanisms) {
    for (int64_t bytes : o.sizes) {
      autovm::rt::Plan plan = bench_plan(bytes);
      autovm::rt::CudaBackendOptions co;
      co.mechanism = mech == "prefetch"                                ? AUTOVM_MECHANISM_PREFETCH
                     : mech == "staged" || mech == "staged-noadvice" ? AUTOVM_MECHANISM_STAGED
                                                                     : AUTOVM_MECHANISM_MAPPED;
      co.advise_accessed_by = mech != "staged-noadvice";
      co.device = o.device;
      co.free_margin_bytes = static_cast<int64_t>(o.free_margin_gib * (1 << 30));
      std::unique_ptr<autovm::rt::Backend> b;
      try {
        b = autovm::rt::make_cuda_backend(plan, co);
      } catch (const autovm::rt::Error& e) {
        die(kExitCuda, e.what());
      }
      const auto& a = plan.tensors[0];
      const auto& bt = plan.tensors[1];
      const autovm::rt::Action prefetch;  // no earlier occupant to wait for
      std::vector<double> in, out, both;
      try {
        for (int r = 0; r < o.repeat + 1; ++r) {  // the first round warms up
          b->step_enqueued(0, nullptr);
          auto t0 = std::chrono::steady_clock::now();
          b->evict_issue(a, nullptr);
          cuda_check(cudaDeviceSynchronize(), "sync");
          const double t_out = seconds_since(t0);
          t0 = std::chrono::steady_clock::now();
          b->prefetch_issue(a, prefetch, nullptr);
          cuda_check(cudaDeviceSynchronize(), "sync");
          const double t_in = seconds_since(t0);
          b->step_enqueued(0, nullptr);
          b->evict_issue(bt, nullptr);  // b on the host; then a out while b comes in
          cuda_check(cudaDeviceSynchronize(), "sync");
          b->step_enqueued(0, nullptr);
          t0 = std::chrono::steady_clock::now();
          b->evict_issue(a, nullptr);
          b->prefetch_issue(bt, prefetch, nullptr);
          cuda_check(cudaDeviceSynchronize(), "sync");
          const double t_both = seconds_since(t0);
          b->prefetch_issue(a, prefetch, nullptr);
          cuda_check(cudaDeviceSynchronize(), "sync");
          if (r == 0) continue;
          out.push_back(bytes / t_out / 1e9);
          in.push_back(bytes / t_in / 1e9);
          both.push_back(2.0 * bytes / t_both / 1e9);
        }
      } catch (const autovm::rt::Error& e) {
        die(kExitCuda, e.what());
      }
      char size[32];
      if (bytes >= (int64_t{1} << 30)) std::snprintf(size, sizeof size, "%lld GiB", static_cast<long long>(bytes >> 30));
      else if (bytes >= (1 << 20)) std::snprintf(size, sizeof size, "%lld MiB", static_cast<long long>(bytes >> 20));
      else std::snprintf(size, sizeof size, "%lld KiB", static_cast<long long>(bytes >> 10));
      std::printf("%-9s %10s %9.2f GB/s %7.2f GB/s %9.2f GB/s\n", mech.c_str(), size, median(in),
                  median(out), median(both));
      std::fflush(stdout);
      rows.push_back({{"mechanism", mech}, {"bytes", bytes}, {"to_device_gbps", median(in)},
                      {"to_host_gbps", median(out)}, {"both_total_gbps", median(both)}});
    }
  }
  if (!o.json_out.empty()) std::ofstream(o.json_out) << json{{"device", prop.name}, {"rows", rows}}.dump(1) << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  return o.bench ? bench(o) : replay(o);
}
