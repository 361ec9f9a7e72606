// Contract: byte sizes as people write them on a command line, and back.
// parse_size accepts an integer or decimal number followed by an optional unit:
//   B; KB, MB, GB, TB (powers of 10); KiB, MiB, GiB, TiB (powers of 2). Units are
//   case-insensitive except that "iB" marks a binary unit ("8gb" = 8e9, "8GiB" = 8*2^30).
// A bare number is bytes. Throws Error(usage) naming the text when it cannot be parsed, is
// negative, zero when zero is not allowed, or overflows int64.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace autovm {

int64_t parse_size(std::string_view text, bool allow_zero = false);

// "12.3 GB (12345678901 B)": decimal unit with three significant digits and the exact bytes.
std::string format_bytes(int64_t bytes);
// "12.3 GB" only.
std::string format_bytes_short(int64_t bytes);

}  // namespace autovm
