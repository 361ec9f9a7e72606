// Contract: the pipeline of passes from a model file to a Plan, in the order data flows:
//   load_model -> check_supported_ops -> infer_shapes -> fuse_kernels -> build_training_step
//   -> compute_lifetimes -> compute_timeline -> plan_under_budget -> layout_arena
// plan_under_budget is the swap planning: step times from the device profile (or measured),
// the budget (--budget min: the largest unavoidable bytes), and, when the peak exceeds it, the
// plan search (plan/search.h, docs/planner.md) beside the lower bound (plan/bound.h); then the
// plan's prediction by the simulator and the baselines'. Each pass throws autovm::Error on bad
// input (Error(infeasible) when no plan meets the budget); the pipeline adds nothing but the
// order.
#pragma once

#include <string>

#include "model/model.h"
#include "plan/plan.h"

namespace autovm {

// options.batch == 0 means "the model's own batch dimension"; Error(usage) if it is symbolic.
Plan make_plan(const std::string& model_path, const PlanOptions& options);

// The same from a model already loaded. Shapes are inferred here for the batch, unless
// `shapes_known` (tests that build models by hand with every shape set).
Plan make_plan(model::Model model, const PlanOptions& options, bool shapes_known = false);

// The same, the model loaded into `model` and left there for the caller: autovm-plan never frees
// it (a 100,000-node model takes a tenth of a second to tear down, just before the process
// exits).
Plan make_plan_keeping_model(const std::string& model_path, const PlanOptions& options,
                             model::Model& model);

}  // namespace autovm
