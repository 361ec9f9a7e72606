// Contract: SHA-256 (FIPS 180-4) of a byte range, as 64 lowercase hex digits. Used for the
// model's identity in a plan. Computed by OpenSSL's libcrypto, which picks the CPU's SHA
// extensions where there are any.
#pragma once

#include <cstddef>
#include <string>

namespace autovm {

std::string sha256_hex(const void* data, size_t size);

}  // namespace autovm
