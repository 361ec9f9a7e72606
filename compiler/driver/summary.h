// Contract: the human summary of a plan that autovm-plan prints to stderr.
#pragma once

#include <string>

#include "plan/plan.h"

namespace autovm {

std::string plan_summary(const Plan& plan);

// How the lower bound is made (autovm-plan --explain-bound; plan.bound_terms must be set): the
// term that sets it, C, the forced stalls and the windows term, and bound(s) with its terms at
// each step where it is worked out (compiler/plan/bound.h), the highest first.
std::string bound_explanation(const Plan& plan);

}  // namespace autovm
