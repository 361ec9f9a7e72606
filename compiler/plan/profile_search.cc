// The search path of shipped device profiles (profile_search.h).
#include "plan/profile_search.h"

#include <cstdlib>
#include <filesystem>
#include <system_error>

namespace autovm {

namespace fs = std::filesystem;

// Where profiles are installed relative to the executable's folder: Meson's default bindir and
// datadir (bin/, share/) side by side under the prefix.
constexpr const char* kInstalledFromBin = "../share/autovm/profiles";

std::string running_executable() {
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  return ec ? std::string() : exe.string();
}

std::vector<ProfileFolder> profile_search_path(const char* env_path,
                                               const std::string& executable) {
  std::vector<ProfileFolder> folders;
  if (env_path != nullptr) {
    std::string list = env_path;
    size_t start = 0;
    while (start <= list.size()) {
      size_t end = list.find(':', start);
      if (end == std::string::npos) end = list.size();
      if (end > start) folders.push_back({list.substr(start, end - start), "$AUTOVM_PROFILE_PATH"});
      start = end + 1;
    }
  }
  if (!executable.empty()) {
    fs::path folder = (fs::path(executable).parent_path() / kInstalledFromBin).lexically_normal();
    folders.push_back({folder.string(), "beside " + executable});
  }
  return folders;
}

std::vector<ProfileFolder> profile_search_path() {
  return profile_search_path(std::getenv("AUTOVM_PROFILE_PATH"), running_executable());
}

}  // namespace autovm
