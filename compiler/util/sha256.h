// Contract: SHA-256 (FIPS 180-4) of a byte range, as 64 lowercase hex digits. Used for the
// model's identity in a plan. On x86-64 CPUs with the SHA extensions the blocks are compressed
// with them (about 20x faster: a large model's digest is a noticeable part of planning);
// elsewhere, or when asked for, by portable code. Both give the same digest.
#pragma once

#include <cstddef>
#include <string>

namespace autovm {

enum class Sha256Impl { best, portable };

std::string sha256_hex(const void* data, size_t size, Sha256Impl impl = Sha256Impl::best);

// Whether sha256_hex's `best` uses the CPU's SHA extensions on this machine.
bool sha256_uses_cpu_extensions();

}  // namespace autovm
