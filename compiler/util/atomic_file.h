// Contract: write a whole file atomically. The content goes to a temporary file in the same
// folder, is flushed with fsync, then renamed over the target, so readers see either the old
// file or the whole new one. Throws Error(output) naming the path and the system's reason.
#pragma once

#include <string>
#include <string_view>

namespace autovm {

void write_file_atomically(const std::string& path, std::string_view content);

}  // namespace autovm
