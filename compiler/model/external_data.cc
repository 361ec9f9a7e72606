#include "model/external_data.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>

#include "util/error.h"

namespace autovm::model {
namespace {

std::string quote(const std::string& s) { return "'" + s + "'"; }

// realpath(3), or "" with errno set.
std::string real_path(const std::string& path) {
  std::unique_ptr<char, decltype(&std::free)> resolved(::realpath(path.c_str(), nullptr), &std::free);
  return resolved ? std::string(resolved.get()) : std::string();
}

struct Fd {
  int fd;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

std::string read_external_bytes(const std::string& model_folder, const std::string& location,
                                int64_t offset, int64_t bytes, const std::string& what) {
  auto refuse = [&](const std::string& why) -> Error {
    return Error(ErrorKind::invalid_model, what + " keeps its data in external file " + quote(location) +
                                               ", " + why);
  };
  const std::filesystem::path rel(location);
  bool escapes = location.empty() || rel.is_absolute() || location.find('\0') != std::string::npos;
  for (const auto& part : rel) escapes = escapes || part == "..";
  if (escapes) {
    throw Error(ErrorKind::invalid_model, what + " has external data location " + quote(location) +
                                              "; it must be a relative path inside the model's folder");
  }
  const std::string folder = real_path(model_folder);
  if (folder.empty())
    throw refuse("but the model's folder " + quote(model_folder) + " cannot be resolved: " +
                 std::strerror(errno));
  const std::string joined = (std::filesystem::path(model_folder) / rel).string();
  const std::string file = real_path(joined);
  if (file.empty())
    throw refuse("which cannot be read: " + std::string(std::strerror(errno)) +
                 "; keep the data file next to the model");
  const std::string prefix = folder == "/" ? folder : folder + "/";
  if (file.compare(0, prefix.size(), prefix) != 0) {
    throw refuse("which resolves to " + quote(file) + ", outside the model's folder " + quote(folder) +
                 " (through a symlink); copy the data into the folder");
  }
  Fd in{::open(file.c_str(), O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC)};
  if (in.fd < 0) throw refuse("which cannot be opened: " + std::string(std::strerror(errno)));
  struct stat st {};
  if (::fstat(in.fd, &st) != 0) throw refuse("which cannot be read: " + std::string(std::strerror(errno)));
  if (!S_ISREG(st.st_mode)) {
    const char* type = S_ISDIR(st.st_mode) ? "a directory" : S_ISFIFO(st.st_mode) ? "a FIFO" : "a device or socket";
    throw refuse(std::string("which is ") + type + ", not a regular file");
  }
  const int64_t start = offset < 0 ? 0 : offset;
  if (bytes < 0 || start > st.st_size || bytes > st.st_size - start) {
    throw refuse("which is too short: it has " + std::to_string(st.st_size) + " bytes, and " +
                 std::to_string(bytes) + " are needed from offset " + std::to_string(start));
  }
  std::string data(size_t(bytes), '\0');
  int64_t done = 0;
  while (done < bytes) {
    ssize_t n = ::pread(in.fd, data.data() + done, size_t(bytes - done), start + done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += n;
  }
  if (done != bytes)
    throw refuse("which is too short: reading " + std::to_string(bytes) + " bytes from offset " +
                 std::to_string(start) + " stopped after " + std::to_string(done));
  return data;
}

}  // namespace autovm::model
