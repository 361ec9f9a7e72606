#include "util/sha256.h"

#include <openssl/evp.h>

#include <stdexcept>

namespace autovm {

std::string sha256_hex(const void* data, size_t size) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  // EVP_Digest fails only when libcrypto cannot allocate its context: an internal error.
  if (EVP_Digest(data, size, digest, &length, EVP_sha256(), nullptr) != 1 || length != 32)
    throw std::runtime_error("SHA-256: libcrypto's EVP_Digest failed");
  static const char* hex = "0123456789abcdef";
  std::string out(64, '0');
  for (unsigned i = 0; i < 32; ++i) {
    out[2 * i] = hex[digest[i] >> 4];
    out[2 * i + 1] = hex[digest[i] & 0xf];
  }
  return out;
}

}  // namespace autovm
