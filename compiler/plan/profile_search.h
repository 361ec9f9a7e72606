// Contract: the folders where shipped device profiles are found by name, in the order they are
// searched:
//   1. each folder of $AUTOVM_PROFILE_PATH, a colon-separated list (empty entries are skipped);
//   2. the profiles installed with the running program: ../share/autovm/profiles from the folder
//      that holds the executable (/proc/self/exe, symbolic links resolved), so
//      PREFIX/bin/autovm-plan reads PREFIX/share/autovm/profiles wherever PREFIX was installed
//      or moved to.
// Nothing is found through the tree the program was built in. The build tree mirrors the
// installed layout instead: build/compiler/driver/autovm-plan finds the copy Meson keeps in
// build/compiler/share/autovm/profiles (compiler/meson.build).
// A folder that does not exist is kept in the list, so that messages can say where they looked.
#pragma once

#include <string>
#include <vector>

namespace autovm {

struct ProfileFolder {
  std::string path;    // a folder of NAME.json profiles
  std::string origin;  // why it is searched, for messages: "$AUTOVM_PROFILE_PATH" or "beside EXE"
};

// The folders to search, in order (see above). `env_path`: the value of $AUTOVM_PROFILE_PATH,
// `executable`: the running program's path; both as the process has them by default.
std::vector<ProfileFolder> profile_search_path();
std::vector<ProfileFolder> profile_search_path(const char* env_path, const std::string& executable);

// The running program's path (/proc/self/exe), or "" when it cannot be read.
std::string running_executable();

}  // namespace autovm
