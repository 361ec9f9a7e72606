// Contract: a plan as autovm-inspect reads it: small structs of its own, filled from the JSON
// that autovm-plan writes (schemas/plan.schema.json). Nothing here comes from compiler/: the
// verifier must share no code with the planner.
//
// read_plan() checks the file's shape only: JSON, schema_version 1, execution model autovm-1,
// every field present with the right type and a known enum value (kinds, phases, dtypes).
// Whether the contents make sense (ids in range, lifetimes, residency) is for residency.h and
// the verifier. Optional fields (the swap planner's predictions) are std::nullopt when absent
// or null. Every byte count (bytes, offsets, reserves, peaks, the arena) lies in
// [0, kMaxPlanBytes], and the tensors' bytes and the actions' bytes each sum to at most
// kMaxPlanBytes, so that sums of a few such totals never overflow int64_t; the reader refuses a
// plan with a larger one, naming the field.
#pragma once

#include <nlohmann/json.hpp>

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace inspect {

using TensorId = int64_t;
using StepIndex = int64_t;  // time: an index into the steps; intervals are inclusive at both ends

// 2^50 bytes (1 PiB): more than any device or host holds.
inline constexpr int64_t kMaxPlanBytes = int64_t(1) << 50;

enum class TensorKind { input, label, parameter, buffer, gradient, optimizer_state, activation,
                        activation_grad, workspace };
inline constexpr int kTensorKindCount = 9;
using BytesByKind = std::array<int64_t, kTensorKindCount>;

enum class Phase { forward, loss, backward, optimizer };
inline constexpr int kPhaseCount = 4;

// In the order of the execution model's table. read_remote and advise change no residency.
enum class ActionKind { evict, prefetch, discard, recompute, read_remote, advise };
inline constexpr int kActionKindCount = 6;

std::string_view name(TensorKind);
std::string_view name(Phase);
std::string_view name(ActionKind);
// Parameters, buffers and optimizer state live across training steps.
bool persistent(TensorKind);

struct Tensor {
  TensorId id = 0;
  std::string name;
  TensorKind kind = TensorKind::activation;
  std::string dtype;
  int64_t element_bytes = 0;  // of dtype
  std::vector<int64_t> shape;
  int64_t bytes = 0;
  int64_t offset = 0;
};

struct Step {
  StepIndex id = 0;
  std::string op;
  Phase phase = Phase::forward;
  std::string node;
  std::vector<TensorId> inputs;
  std::vector<TensorId> outputs;
  TensorId workspace = -1;  // -1: none
  int64_t reserve_bytes = 0;  // of the workspace: the trainer's memory (steps[].reserve_bytes)
  // Predicted by the swap planner (all or none, in microseconds from the start of the step).
  std::optional<double> compute_us, start_us, end_us, stall_us;

  std::string label() const;  // "12 (Conv backward, node conv1)"
};

struct Lifetime {
  TensorId tensor = 0;
  StepIndex first = 0;
  StepIndex last = 0;
  bool persistent = false;
  std::vector<StepIndex> uses;
};

struct Action {
  ActionKind kind = ActionKind::evict;
  TensorId tensor = 0;
  int64_t bytes = 0;
  StepIndex after_step = -1;       // issued when this step finishes; -1: at the start
  StepIndex ready_before_step = 0;  // complete before this step starts; n: by the end;
                                    // read_remote: the step that reads the tensor remotely
  StepIndex source_step = -1;       // recompute only
  std::string mechanism;
  std::string advice;
  std::optional<double> issue_us, ready_us;
};

struct Prediction {
  std::string policy;
  std::optional<double> step_time_us, compute_us, stall_us, recompute_us;
  std::optional<int64_t> bytes_to_host, bytes_to_device;
  std::optional<double> no_swap_step_time_us, bound_us;
  std::optional<int64_t> resident_peak_bytes;
};

struct Baseline {
  std::string policy;
  bool fits = false;
  std::optional<double> step_time_us;
  std::optional<int64_t> bytes_to_host, bytes_to_device, resident_peak_bytes;
  bool calibrated = false;  // step_time_us's model was measured to within 1.5x; absent: false
};

struct Plan {
  std::string path;  // where it was read from
  std::string generator;
  std::string model_file;
  std::string model_sha256;
  int64_t batch = 0;
  int64_t budget_bytes = 0;  // INT64_MAX: no limit
  std::string optimizer;
  std::optional<std::string> device, mechanism;
  // options.movable (autovm-plan --movable): the only kinds actions may evict, discard or
  // recompute; absent: every kind.
  std::optional<std::vector<TensorKind>> movable;
  // options.movable_at_last_use (autovm-plan --movable-at-last-use): kinds whose tensors may
  // leave only by an evict that a read_remote of the tensor at a later step follows; empty:
  // none.
  std::vector<TensorKind> movable_at_last_use;
  // options.recompute_ops (autovm-plan --recompute-ops): the only ops a recompute action may
  // run again; absent: any.
  std::optional<std::vector<std::string>> recompute_ops;
  // options.conv_workspaces_measured and conv_workspaces_cut (autovm-plan --conv-workspaces):
  // convolutions whose workspaces were measured, and the workspaces cut to fit the budget
  // (forward and backward counted apart); absent: the estimate.
  std::optional<int64_t> conv_workspaces_measured;
  int64_t conv_workspaces_cut = 0;
  // Every field of "model" and "options" as "key" -> its JSON text, sorted by key (for diff).
  std::vector<std::pair<std::string, std::string>> model_fields, option_fields;

  std::vector<Tensor> tensors;
  std::vector<Step> steps;
  std::vector<Lifetime> lifetimes;
  std::vector<Action> actions;

  int64_t peak_bytes = 0;  // statistics.peak_bytes: live bytes without the plan's actions
  StepIndex peak_step = 0;
  int64_t arena_bytes = 0;
  std::optional<Prediction> prediction;
  std::vector<Baseline> baselines;

  StepIndex step_count() const { return static_cast<StepIndex>(steps.size()); }
  bool budget_limited() const;
  // True when every step carries start_us and end_us.
  bool has_step_times() const;
};

// Throws Failure(unreadable_plan) when the file cannot be read (or is not a regular file),
// Failure(invalid_plan) naming the field when it is not a plan.
Plan read_plan(const std::string& path);
// The same for a plan's text; `path` names it in messages.
Plan parse_plan(std::string_view text, const std::string& path);

}  // namespace inspect
