// Reading a JSON file (json_file.h).
#include "util/json_file.h"

#include <fmt/format.h>

#include <fstream>
#include <sstream>

#include "util/error.h"

namespace autovm {

nlohmann::json read_json_file(const std::string& what, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw Error(ErrorKind::usage, fmt::format("{} '{}': cannot be read; check the path", what, path));
  std::ostringstream text;
  text << in.rdbuf();
  nlohmann::json doc = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded())
    throw Error(ErrorKind::usage, fmt::format("{} '{}': is not valid JSON", what, path));
  return doc;
}

}  // namespace autovm
