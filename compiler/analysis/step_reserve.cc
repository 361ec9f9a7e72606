// Per-step reserved memory from a file (step_reserve.h).
#include "analysis/step_reserve.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <vector>

#include "util/error.h"
#include "util/json_file.h"

namespace autovm {

namespace {

[[noreturn]] void bad(const std::string& path, const std::string& what) {
  throw Error(ErrorKind::usage, fmt::format("reserve file '{}': {}", path, what));
}

// A reserve: a whole number of bytes in [0, 2^50] (1 PiB, more than any device holds), so that
// adding the steps' reserves to their workspaces, and summing them, cannot overflow.
int64_t bytes_value(const std::string& path, const std::string& where, const nlohmann::json& v) {
  constexpr int64_t kMaxBytes = int64_t(1) << 50;
  const bool in_range = v.is_number_unsigned() ? v.get<uint64_t>() <= uint64_t(kMaxBytes)
                        : v.is_number_integer() && v.get<int64_t>() >= 0 && v.get<int64_t>() <= kMaxBytes;
  if (!in_range)
    bad(path, fmt::format("{} must be a non-negative whole number of bytes, at most 2^50, not {}",
                          where, v.dump()));
  return v.get<int64_t>();
}

}  // namespace

int64_t apply_step_reserve(const std::string& path, TrainingGraph& g) {
  std::vector<std::string> keys;
  for (const Step& s : g.steps) keys.push_back(s.node + "/" + s.op);
  auto values = read_step_values("reserve file", path, "step_bytes", "entries", keys);
  std::vector<int64_t> reserve(g.steps.size(), 0);
  for (size_t i = 0; i < values.size(); ++i)
    if (values[i].named) reserve[i] = bytes_value(path, values[i].where, values[i].value);

  int64_t total = 0;
  for (size_t i = 0; i < reserve.size(); ++i) {
    if (reserve[i] == 0) continue;
    Step& s = g.steps[i];
    s.reserve_bytes = reserve[i];
    if (s.workspace == kNoTensor) {
      // Named by the step: optimizer steps share their node and op.
      s.workspace = g.add_tensor(fmt::format("{}/{}/reserve_step{}", s.node, s.op, s.id),
                                 TensorKind::workspace, DType::u8, Shape{reserve[i]});
    } else {
      // Workspace tensors belong to one step each (training/forward.cc, backward.cc).
      Tensor& w = g.tensors[static_cast<size_t>(s.workspace)];
      w.bytes += reserve[i];
      w.shape = Shape{w.bytes};
    }
    total += reserve[i];
  }
  return total;
}

}  // namespace autovm
