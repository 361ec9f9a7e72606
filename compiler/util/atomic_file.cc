#include "util/atomic_file.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "util/error.h"

namespace autovm {

namespace {

// A device or pipe (/dev/null, /dev/stdout, a FIFO) cannot be replaced by renaming a file over
// it, which would destroy it: it is written directly.
bool is_special_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode);
}

}  // namespace

AtomicFileWriter::AtomicFileWriter(std::string path) : path_(std::move(path)) {
  if (is_special_file(path_)) {
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd_ < 0) fail("cannot open it");
    return;
  }
  tmp_ = path_ + ".tmp" + std::to_string(::getpid());
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) fail("cannot create a temporary file beside it");
}

AtomicFileWriter::~AtomicFileWriter() {
  if (fd_ >= 0) {
    ::close(fd_);
    if (!tmp_.empty()) ::unlink(tmp_.c_str());
  }
}

void AtomicFileWriter::fail(const std::string& what) {
  int saved = errno;
  if (fd_ >= 0) {
    ::close(fd_);
    if (!tmp_.empty()) ::unlink(tmp_.c_str());
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
  if (tmp_.empty()) {  // a device or pipe, written directly
    int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) fail("write failed");
    return;
  }
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
