// The roofline cost model and measured overrides (cost_model.h).
#include "plan/cost_model.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "util/error.h"
#include "util/json_file.h"

namespace autovm {

namespace {

// The rate of the step's widest floating-point dtype among its inputs and outputs (f64 and
// steps with no floating-point tensor use the f32 rate).
double step_tflops(const TrainingGraph& g, const Step& s, const DeviceProfile& d) {
  bool f32 = false, bf16 = false, f16 = false;
  auto see = [&](TensorId t) {
    DType dt = g.tensor(t).dtype;
    f32 |= dt == DType::f32 || dt == DType::f64;
    bf16 |= dt == DType::bf16;
    f16 |= dt == DType::f16;
  };
  for (TensorId t : s.inputs) see(t);
  for (TensorId t : s.outputs) see(t);
  if (f32 || !(bf16 || f16)) return d.f32_tflops;
  return bf16 ? d.bf16_tflops : d.f16_tflops;
}

[[noreturn]] void bad(const std::string& path, const std::string& what) {
  throw Error(ErrorKind::usage, fmt::format("measured step times '{}': {}", path, what));
}

// A step time: a number of microseconds in [0, 1e12] (11 days), so that a step's times sum to
// a finite total.
double time_value(const std::string& path, const std::string& where, const nlohmann::json& v) {
  if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() < 0 || v.get<double>() > 1e12)
    bad(path, fmt::format("{} must be a non-negative number of microseconds, at most 1e12, not {}",
                          where, v.dump()));
  return v.get<double>();
}

}  // namespace

std::vector<double> predict_step_times(const TrainingGraph& graph, const DeviceProfile& device) {
  std::vector<double> times;
  times.reserve(graph.steps.size());
  for (const Step& s : graph.steps) {
    if (s.measured_us >= 0) {  // the kernels' own time, launch included
      times.push_back(s.measured_us);
      continue;
    }
    double compute = s.flops / (step_tflops(graph, s, device) * 1e6);  // TFLOP/s -> flop per us
    double memory = static_cast<double>(s.bytes_touched) / (device.memory_bandwidth_gbps * 1e3);
    times.push_back(std::max(compute, memory) + device.step_overhead_us);
  }
  return times;
}

void apply_measured_step_times(const std::string& path, const TrainingGraph& graph,
                               std::vector<double>& times) {
  std::vector<std::string> keys;
  for (const Step& s : graph.steps) keys.push_back(s.node + "/" + s.op);
  auto values = read_step_values("measured step times", path, "step_us", "times", keys);
  times.resize(graph.steps.size(), 0.0);
  for (size_t i = 0; i < values.size(); ++i)
    if (values[i].named) times[i] = time_value(path, values[i].where, values[i].value);
}

}  // namespace autovm
