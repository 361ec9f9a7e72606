#include "util/atomic_file.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "util/error.h"

namespace autovm {

AtomicFileWriter::AtomicFileWriter(std::string path)
    : path_(std::move(path)), tmp_(path_ + ".tmp" + std::to_string(::getpid())) {
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) fail("cannot create a temporary file beside it");
}

AtomicFileWriter::~AtomicFileWriter() {
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink(tmp_.c_str());
  }
}

void AtomicFileWriter::fail(const std::string& what) {
  int saved = errno;
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink(tmp_.c_str());
    fd_ = -1;
  }
  throw Error(ErrorKind::output, fmt::format("cannot write '{}': {}: {}; check that the folder "
                                             "exists and is writable",
                                             path_, what, std::strerror(saved)));
}

void AtomicFileWriter::write(std::string_view piece) {
  size_t done = 0;
  while (done < piece.size()) {
    ssize_t n = ::write(fd_, piece.data() + done, piece.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail("write failed");
    }
    done += static_cast<size_t>(n);
  }
}

void AtomicFileWriter::commit() {
  if (::fsync(fd_) != 0) fail("flush failed");
  int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0 || ::rename(tmp_.c_str(), path_.c_str()) != 0) {
    int saved = errno;
    ::unlink(tmp_.c_str());
    errno = saved;
    throw Error(ErrorKind::output, fmt::format("cannot write '{}': rename failed: {}", path_,
                                               std::strerror(saved)));
  }
}

void write_file_atomically(const std::string& path, std::string_view content) {
  AtomicFileWriter w(path);
  w.write(content);
  w.commit();
}

}  // namespace autovm
