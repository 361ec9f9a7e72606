#include "util/read_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace autovm {

std::string read_regular_file(const std::string& what, const std::string& path, ErrorKind kind) {
  auto fail = [&](const std::string& why) { return Error(kind, what + " '" + path + "': " + why); };
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) throw fail(std::string("cannot be read: ") + std::strerror(errno) + "; check the path");
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) throw fail(std::string("cannot be read: ") + std::strerror(errno));
  if (S_ISDIR(st.st_mode)) throw fail("it is a directory; name a file");
  if (!S_ISREG(st.st_mode)) throw fail("it is not a regular file (a FIFO or a device); name a file");
  std::string text;
  char buffer[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw fail(std::string("cannot be read: ") + std::strerror(errno));
    if (n == 0) return text;
    text.append(buffer, size_t(n));
  }
}

}  // namespace autovm
