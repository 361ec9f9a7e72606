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

// nlohmann's DOM builder, remembering the last object key it saw for the error message.
class KeyTrackingSax : public nlohmann::detail::json_sax_dom_parser<nlohmann::json> {
 public:
  KeyTrackingSax(nlohmann::json& doc, const std::string& what, const std::string& path)
      : nlohmann::detail::json_sax_dom_parser<nlohmann::json>(doc, true), what_(what), path_(path) {}
  bool key(std::string& k) {
    last_key_ = k;
    return nlohmann::detail::json_sax_dom_parser<nlohmann::json>::key(k);
  }
  template <class Exception>
  bool parse_error(std::size_t position, const std::string&, const Exception& e) {
    throw Error(ErrorKind::usage,
                fmt::format("{} '{}' is not valid JSON at byte {}{}: {}", what_, path_, position,
                            last_key_.empty() ? "" : fmt::format(" (after field \"{}\")", last_key_),
                            e.what()));
  }

 private:
  const std::string& what_;
  const std::string& path_;
  std::string last_key_;
};

}  // namespace

nlohmann::json parse_json(const std::string& text, const std::string& what, const std::string& path) {
  nlohmann::json doc;
  KeyTrackingSax sax(doc, what, path);
  nlohmann::json::sax_parse(text, &sax);
  return doc;
}

nlohmann::json read_json_file(const std::string& what, const std::string& path) {
  return parse_json(read_regular_file(what, path, ErrorKind::usage), what, path);
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
