// Contract: the human summary of a plan that autovm-plan prints to stderr.
#pragma once

#include <string>

#include "plan/plan.h"

namespace autovm {

std::string plan_summary(const Plan& plan);

}  // namespace autovm
