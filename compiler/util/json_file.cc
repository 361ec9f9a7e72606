// Reading JSON files the user names (json_file.h).
#include "util/json_file.h"

#include <fmt/format.h>

#include <map>

#include "util/error.h"
#include "util/read_file.h"

namespace autovm {

namespace {

[[noreturn]] void bad(const std::string& what, const std::string& path, const std::string& fault) {
  throw Error(ErrorKind::usage, fmt::format("{} '{}': {}", what, path, fault));
}

}  // namespace

nlohmann::json read_json_file(const std::string& what, const std::string& path) {
  const std::string text = read_regular_file(what, path, ErrorKind::usage);
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {  // a syntax error, or a number like 1e999
    bad(what, path, fmt::format("is not valid JSON ({})", e.what()));
  }
}

std::vector<StepValue> read_step_values(const std::string& what, const std::string& path,
                                        const std::string& list_key, const std::string& unit,
                                        const std::vector<std::string>& step_keys) {
  nlohmann::json doc = read_json_file(what, path);
  if (!doc.is_object() || doc.contains(list_key) == doc.contains("by_node"))
    bad(what, path, fmt::format("must be an object with exactly one of \"{}\" (a list, one entry "
                                "per step) or \"by_node\" (an object {{\"<node>/<op>\": value}})",
                                list_key));
  std::vector<StepValue> values(step_keys.size());
  if (doc.contains(list_key)) {
    const auto& list = doc[list_key];
    if (!list.is_array()) bad(what, path, fmt::format("\"{}\" must be a list of numbers", list_key));
    if (list.size() != step_keys.size())
      bad(what, path, fmt::format("\"{}\" has {} {} but the training step has {} steps (was it "
                                  "measured for another model, batch or optimizer?)",
                                  list_key, list.size(), unit, step_keys.size()));
    for (size_t i = 0; i < list.size(); ++i)
      values[i] = {true, fmt::format("{}[{}]", list_key, i), list[i]};
    return values;
  }
  const auto& by_node = doc["by_node"];
  if (!by_node.is_object())
    bad(what, path, "\"by_node\" must be an object {\"<node>/<op>\": value}");
  std::map<std::string, std::vector<size_t>> steps_of;  // every step with that key
  for (size_t i = 0; i < step_keys.size(); ++i) steps_of[step_keys[i]].push_back(i);
  for (const auto& [key, value] : by_node.items()) {
    auto it = steps_of.find(key);
    if (it == steps_of.end())
      bad(what, path, fmt::format("\"by_node\" key '{}' matches no step of the training step "
                                  "(keys are '<node>/<op>', e.g. '{}')",
                                  key, step_keys.empty() ? "" : step_keys[0]));
    for (size_t i : it->second) values[i] = {true, fmt::format("by_node['{}']", key), value};
  }
  return values;
}

}  // namespace autovm
