// Contract: what every subcommand of autovm-inspect shares: the failure type whose category is
// the documented exit code, byte formatting and parsing, and atomic output files.
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

namespace inspect {

// Exit codes (autovm-inspect --help lists them).
enum class Exit {
  ok = 0,
  verification_failed = 1,
  usage = 2,
  unreadable_plan = 3,
  invalid_plan = 4,
  output = 5,  // an output file could not be written
};

// A failure caused by the command line, a plan or an output file; main() prints the message
// and exits with the code.
class Failure : public std::runtime_error {
 public:
  Failure(Exit code, const std::string& message) : std::runtime_error(message), code_(code) {}
  Exit code() const { return code_; }

 private:
  Exit code_;
};

// "512 B", "1.50 KB", "12.3 MB", "8.00 GB": powers of 10, three significant digits.
std::string format_bytes(int64_t bytes);
// "1.23 ms", "456 us", "2.50 s".
std::string format_us(double us);
// A size with an optional unit: B, KB, MB, GB, TB (powers of 10), KiB, MiB, GiB, TiB (powers
// of 2), e.g. "8GB", "7.5GiB", "1000000". Throws Failure(usage) naming the text.
int64_t parse_size(std::string_view text);
// The items formatted with "{}", separated by `separator` (fmt::join, which GCC 12 warns
// about falsely, inside fmt).
template <typename Range>
std::string join(const Range& items, std::string_view separator) {
  std::string out;
  bool first = true;
  for (const auto& item : items) {
    if (!first) out += separator;
    first = false;
    out += fmt::format("{}", item);
  }
  return out;
}
// Writes a temporary file beside `path` (created by mkstemp as ".NAME.autovm-tmp.XXXXXX", so
// nothing already at its name is followed), then renames it over `path`. The file keeps the
// permission bits of the one it replaces; a read-only target (no write bit, or not writable by
// the user) or a directory is refused. Throws Failure(output).
void write_file_atomically(const std::string& path, std::string_view content);

}  // namespace inspect
