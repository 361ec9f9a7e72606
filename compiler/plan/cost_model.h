// Contract: the predicted compute time of every step, in microseconds.
//
// Roofline: time = max(flops / rate(dtype), bytes_touched / memory bandwidth) + step overhead,
// with the rate of the step's widest floating-point dtype from the profile. Measured times from
// a trainer's profile run replace the prediction step by step: load_step_times reads a JSON file
// {"step_us": [t0, t1, ...]} (one per step) or {"by_node": {"<node>/<op>": us, ...}} and
// overrides the matching steps.
#pragma once

#include <string>
#include <vector>

#include "ir/graph.h"
#include "plan/device_profile.h"

namespace autovm {

std::vector<double> predict_step_times(const TrainingGraph& graph, const DeviceProfile& device);

// Overrides entries of `times` from a measured file; throws Error(usage) naming the file and
// the problem (unreadable, not JSON, wrong length, negative time).
void apply_measured_step_times(const std::string& path, const TrainingGraph& graph,
                               std::vector<double>& times);

}  // namespace autovm
