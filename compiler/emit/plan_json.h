// Contract: the one place that knows the plan file's format. plan_to_json writes a Plan as the
// versioned JSON schedule described by schemas/plan.schema.json (kPlanSchemaVersion). The same
// Plan always gives the same bytes. One tensor, step, lifetime or action per line, so plans
// diff well.
#pragma once

#include <functional>
#include <string>
#include <string_view>

#include "plan/plan.h"

namespace autovm {

inline constexpr int kPlanSchemaVersion = 1;

std::string plan_to_json(const Plan& plan);
// The same text, handed to `sink` in pieces (about a megabyte each), in order.
void write_plan_json(const Plan& plan, const std::function<void(std::string_view)>& sink);

// Statistics both the JSON and the human summary report.
struct PlanStatistics {
  int64_t parameter_count = 0;  // elements
  BytesByKind bytes_by_kind{};  // sum of every tensor's bytes, by kind
  int64_t steps_by_phase[4] = {0, 0, 0, 0};
  double total_flops = 0;
};
PlanStatistics compute_statistics(const Plan& plan);

}  // namespace autovm
