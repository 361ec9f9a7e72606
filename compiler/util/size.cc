#include "util/size.h"

#include <fmt/format.h>

#include <cctype>
#include <cmath>
#include <string>

#include "util/error.h"

namespace autovm {

int64_t parse_size(std::string_view text, bool allow_zero) {
  auto fail = [&](const char* why) -> int64_t {
    throw Error(ErrorKind::usage,
                fmt::format("cannot read size '{}': {}; write a number with an optional unit, "
                            "e.g. 8GB, 7.5GiB, 512MiB or 1000000B",
                            text, why));
  };
  size_t i = 0;
  while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
  size_t start = i;
  bool seen_digit = false, seen_dot = false;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) {
    if (text[i] == '.') {
      if (seen_dot) return fail("more than one decimal point");
      seen_dot = true;
    } else {
      seen_digit = true;
    }
    ++i;
  }
  if (!seen_digit) {
    if (i < text.size() && text[i] == '-') return fail("sizes cannot be negative");
    return fail("no number");
  }
  std::string number(text.substr(start, i - start));
  while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
  std::string unit;
  for (; i < text.size(); ++i) {
    if (std::isspace(static_cast<unsigned char>(text[i]))) break;
    unit += text[i];
  }
  while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
  if (i != text.size()) return fail("unexpected text after the unit");
  std::string lower;
  for (char c : unit) lower += char(std::tolower(static_cast<unsigned char>(c)));
  double multiplier = 0;
  if (lower.empty() || lower == "b") multiplier = 1;
  else if (lower == "kb") multiplier = 1e3;
  else if (lower == "mb") multiplier = 1e6;
  else if (lower == "gb") multiplier = 1e9;
  else if (lower == "tb") multiplier = 1e12;
  else if (lower == "kib") multiplier = 1024.0;
  else if (lower == "mib") multiplier = 1024.0 * 1024;
  else if (lower == "gib") multiplier = 1024.0 * 1024 * 1024;
  else if (lower == "tib") multiplier = 1024.0 * 1024 * 1024 * 1024;
  else return fail("unknown unit (use B, KB, MB, GB, TB, KiB, MiB, GiB or TiB)");
  long double value = std::stold(number) * multiplier;
  if (value >= 9.2e18L) return fail("too large");
  auto bytes = static_cast<int64_t>(std::llround(static_cast<double>(value)));
  if (bytes == 0 && !allow_zero) return fail("must be more than zero bytes");
  return bytes;
}

std::string format_bytes_short(int64_t bytes) {
  double b = static_cast<double>(bytes);
  if (bytes < 1000) return fmt::format("{} B", bytes);
  const char* units[] = {"KB", "MB", "GB", "TB", "PB"};
  int u = -1;
  while (b >= 1000 && u < 4) {
    b /= 1000;
    ++u;
  }
  return fmt::format("{:.{}f} {}", b, b < 10 ? 2 : (b < 100 ? 1 : 0), units[u]);
}

std::string format_bytes(int64_t bytes) {
  if (bytes < 1000) return fmt::format("{} B", bytes);
  return fmt::format("{} ({} B)", format_bytes_short(bytes), bytes);
}

}  // namespace autovm
