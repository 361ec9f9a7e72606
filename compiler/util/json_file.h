// Contract: reading a JSON file the user names (measured step times, a reserve): the document,
// or Error(usage) that names what the file is for, its path and the fault.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace autovm {

// `what` names the file's role in messages, e.g. "measured step times" gives
// "measured step times 'FILE': cannot be read; check the path".
nlohmann::json read_json_file(const std::string& what, const std::string& path);

}  // namespace autovm
