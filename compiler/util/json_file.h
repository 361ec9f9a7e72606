// Contract: reading JSON files the user names (measured step times, a reserve): the document,
// or Error(usage) that names what the file is for, its path and the fault.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace autovm {

// `what` names the file's role in messages, e.g. "measured step times" gives
// "measured step times 'FILE': cannot be read; check the path".
nlohmann::json read_json_file(const std::string& what, const std::string& path);

// Parses JSON text; a syntax error or a number out of range (1e999) throws Error(usage)
// "WHAT 'PATH' is not valid JSON at byte N (after field "KEY"): ...", naming the last object
// key read before the fault.
nlohmann::json parse_json(const std::string& text, const std::string& what, const std::string& path);

// A file that gives a value per step: {"<list_key>": [v0, v1, ...]}, one entry per step, or
// {"by_node": {"<node>/<op>": v, ...}}, a key setting every step with that key; exactly one
// of the two. `step_keys` are the steps' "<node>/<op>", in step order; `unit` names the
// entries in messages ("times": "has 2 times but the training step has 3 steps"). Returns,
// per step, where its value stands in the file ("step_us[3]", "by_node['n/Conv']") and the
// value (`named` false for a step the file does not name); the caller checks the values.
struct StepValue {
  bool named = false;
  std::string where;
  nlohmann::json value;
};
std::vector<StepValue> read_step_values(const std::string& what, const std::string& path,
                                        const std::string& list_key, const std::string& unit,
                                        const std::vector<std::string>& step_keys);

}  // namespace autovm
