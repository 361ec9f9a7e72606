#include "common.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>

namespace inspect {

std::string format_bytes(int64_t bytes) {
  // The magnitude as unsigned: -INT64_MIN does not fit in int64_t.
  const uint64_t magnitude = bytes < 0 ? 0 - static_cast<uint64_t>(bytes) : static_cast<uint64_t>(bytes);
  const char* sign = bytes < 0 ? "-" : "";
  if (magnitude < 1000) return fmt::format("{}{} B", sign, magnitude);
  const char* units[] = {"KB", "MB", "GB", "TB", "PB", "EB"};
  double b = static_cast<double>(magnitude);
  int u = -1;
  while (b >= 999.5 && u < 5) {
    b /= 1000;
    ++u;
  }
  return fmt::format("{}{:.{}f} {}", sign, b, b < 9.995 ? 2 : (b < 99.95 ? 1 : 0), units[u]);
}

std::string format_us(double us) {
  double a = std::fabs(us);
  if (a < 1000) return fmt::format("{:.0f} us", us);
  if (a < 1e6) return fmt::format("{:.{}f} ms", us / 1e3, a < 1e4 ? 2 : 1);
  return fmt::format("{:.2f} s", us / 1e6);
}

int64_t parse_size(std::string_view text) {
  auto fail = [&](const char* why) -> int64_t {
    throw Failure(Exit::usage, fmt::format("cannot read size '{}': {}; write a number with an "
                                           "optional unit, e.g. 8GB, 7.5GiB or 1000000",
                                           text, why));
  };
  size_t i = 0;
  bool digit = false, dot = false;
  for (; i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.'); ++i) {
    if (text[i] == '.') {
      if (dot) return fail("more than one decimal point");
      dot = true;
    } else {
      digit = true;
    }
  }
  if (!digit) return fail("no number");
  std::string unit;
  for (char c : text.substr(i))
    if (c != ' ') unit += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  double multiplier = 0;
  if (unit.empty() || unit == "b") multiplier = 1;
  else if (unit == "kb") multiplier = 1e3;
  else if (unit == "mb") multiplier = 1e6;
  else if (unit == "gb") multiplier = 1e9;
  else if (unit == "tb") multiplier = 1e12;
  else if (unit == "kib") multiplier = 1024.0;
  else if (unit == "mib") multiplier = 1024.0 * 1024;
  else if (unit == "gib") multiplier = 1024.0 * 1024 * 1024;
  else if (unit == "tib") multiplier = 1024.0 * 1024 * 1024 * 1024;
  else return fail("unknown unit (use B, KB, MB, GB, TB, KiB, MiB, GiB or TiB)");
  double value = std::stod(std::string(text.substr(0, i))) * multiplier;
  if (value >= 9.2e18) return fail("too large");
  return static_cast<int64_t>(std::llround(value));
}

void write_file_atomically(const std::string& path, std::string_view content) {
  auto fail = [&](const char* what) {
    throw Failure(Exit::output, fmt::format("cannot write '{}': {}: {}; check that the folder "
                                            "exists and is writable",
                                            path, what, std::strerror(errno)));
  };
  auto refuse = [&](const std::string& why) {
    throw Failure(Exit::output, fmt::format("cannot write '{}': {}", path, why));
  };
  struct stat st {}, link {};
  const bool exists = ::stat(path.c_str(), &st) == 0;
  const bool is_link = ::lstat(path.c_str(), &link) == 0 && S_ISLNK(link.st_mode);
  if (exists && S_ISDIR(st.st_mode)) refuse("it is a directory; name a file");
  mode_t mode = 0;
  if (exists && !is_link) {
    if ((st.st_mode & 0222) == 0 || ::access(path.c_str(), W_OK) != 0)
      refuse(fmt::format("it is read-only (mode {:04o}); make it writable or write elsewhere",
                         st.st_mode & 07777));
    mode = st.st_mode & 07777;
  } else {
    const mode_t mask = ::umask(0);
    ::umask(mask);
    mode = 0666 & ~mask;
  }
  // mkstemp creates the file with O_EXCL: nothing already at the name is opened or followed.
  const std::filesystem::path target(path);
  const std::filesystem::path folder = target.has_parent_path() ? target.parent_path() : ".";
  std::string name = ".";  // appended, not "." + ...: GCC 12 warns falsely (-Wrestrict) on that
  name += target.filename().string();
  name += ".autovm-tmp.XXXXXX";
  std::string tmp = (folder / name).string();
  int fd = ::mkostemp(tmp.data(), O_CLOEXEC);
  if (fd < 0) fail("cannot create a temporary file beside it");
  auto abandon = [&](const char* what) {
    int saved = errno;
    ::close(fd);
    ::unlink(tmp.c_str());
    errno = saved;
    fail(what);
  };
  if (::fchmod(fd, mode) != 0) abandon("cannot set the temporary file's mode");
  size_t done = 0;
  while (done < content.size()) {
    ssize_t n = ::write(fd, content.data() + done, content.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      abandon("write failed");
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) abandon("flush failed");
  if (::close(fd) != 0 || ::rename(tmp.c_str(), path.c_str()) != 0) {
    int saved = errno;
    ::unlink(tmp.c_str());
    errno = saved;
    fail("rename failed");
  }
}

}  // namespace inspect
