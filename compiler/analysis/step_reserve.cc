// Per-step reserved memory from a file (step_reserve.h).
#include "analysis/step_reserve.h"

#include <fmt/format.h>

#include <map>
#include <nlohmann/json.hpp>
#include <vector>

#include "util/error.h"
#include "util/json_file.h"

namespace autovm {

namespace {

[[noreturn]] void bad(const std::string& path, const std::string& what) {
  throw Error(ErrorKind::usage, fmt::format("reserve file '{}': {}", path, what));
}

int64_t bytes_value(const std::string& path, const std::string& where, const nlohmann::json& v) {
  if (!v.is_number_integer() || v.get<int64_t>() < 0)
    bad(path, fmt::format("{} must be a non-negative whole number of bytes, not {}", where, v.dump()));
  return v.get<int64_t>();
}

}  // namespace

int64_t apply_step_reserve(const std::string& path, TrainingGraph& g) {
  nlohmann::json doc = read_json_file("reserve file", path);
  if (!doc.is_object() || doc.contains("step_bytes") == doc.contains("by_node"))
    bad(path, "must be an object with exactly one of \"step_bytes\" (a list, bytes per step) or "
              "\"by_node\" (an object {\"<node>/<op>\": bytes})");

  std::vector<int64_t> reserve(g.steps.size(), 0);
  if (doc.contains("step_bytes")) {
    const auto& list = doc["step_bytes"];
    if (!list.is_array()) bad(path, "\"step_bytes\" must be a list of numbers");
    if (list.size() != g.steps.size())
      bad(path, fmt::format("\"step_bytes\" has {} entries but the training step has {} steps "
                            "(was it measured for another model, batch or optimizer?)",
                            list.size(), g.steps.size()));
    for (size_t i = 0; i < list.size(); ++i)
      reserve[i] = bytes_value(path, fmt::format("step_bytes[{}]", i), list[i]);
  } else {
    const auto& by_node = doc["by_node"];
    if (!by_node.is_object()) bad(path, "\"by_node\" must be an object {\"<node>/<op>\": bytes}");
    std::map<std::string, std::vector<size_t>> steps_of;
    for (const Step& s : g.steps) steps_of[s.node + "/" + s.op].push_back(static_cast<size_t>(s.id));
    for (const auto& [key, value] : by_node.items()) {
      auto it = steps_of.find(key);
      if (it == steps_of.end())
        bad(path, fmt::format("\"by_node\" key '{}' matches no step of the training step "
                              "(keys are '<node>/<op>', e.g. '{}')",
                              key, g.steps.empty() ? "" : g.steps[0].node + "/" + g.steps[0].op));
      int64_t b = bytes_value(path, fmt::format("by_node['{}']", key), value);
      for (size_t i : it->second) reserve[i] = b;
    }
  }

  int64_t total = 0;
  for (size_t i = 0; i < reserve.size(); ++i) {
    if (reserve[i] == 0) continue;
    Step& s = g.steps[i];
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
