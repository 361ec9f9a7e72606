// Contract: the predicted compute time of every step, in microseconds.
//
// Roofline: time = max(flops / rate(dtype), bytes_touched / memory bandwidth) + step overhead,
// with the rate of the step's widest floating-point dtype from the profile; a step whose time was
// measured on the trainer's GPU (Step::measured_us: a convolution timed with its workspace,
// training/conv_workspaces.h) takes that time instead. Measured times from
// a trainer's profile run replace the prediction step by step: apply_measured_step_times reads a
// JSON file {"step_us": [t0, ...]} (one per step) or {"by_node": {"<node>/<op>": us, ...}} (exactly
// one of the two) and overrides the matching steps. A by_node key sets every step with that
// node and op (loss and optimizer steps have node "", so "/SGD" sets every SGD step); a key
// that matches no step is an error. The widest dtype: f32 (or f64, at the f32 rate), else bf16,
// else f16; a step with no floating-point tensor uses the f32 rate.
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
