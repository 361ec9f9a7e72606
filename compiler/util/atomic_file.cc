#include "util/atomic_file.h"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>

#include "util/error.h"

namespace autovm {

namespace {

// ---- Removing temporary files when a signal ends the process ----
// Open writers record their temporary file's name in a slot; the handler unlinks every recorded
// name (unlink is async-signal-safe), restores the signal's previous action and raises it again.
constexpr int kSlots = 8;
constexpr int kSignals[] = {SIGINT, SIGTERM, SIGHUP};
char g_names[kSlots][PATH_MAX];
std::atomic<bool> g_used[kSlots];
std::mutex g_install_mutex;
int g_open_writers = 0;
struct sigaction g_previous[sizeof kSignals / sizeof kSignals[0]];
bool g_installed[sizeof kSignals / sizeof kSignals[0]];

void remove_on_signal(int sig) {
  for (int i = 0; i < kSlots; ++i)
    if (g_used[i].load()) ::unlink(g_names[i]);
  for (size_t k = 0; k < sizeof kSignals / sizeof kSignals[0]; ++k)
    if (kSignals[k] == sig) ::sigaction(sig, &g_previous[k], nullptr);
  ::raise(sig);
}

// Installs the handler for each signal whose action is the default (a program that handles
// them itself keeps its own handler) while the first writer is open.
void track_writer(bool opening) {
  std::lock_guard<std::mutex> lock(g_install_mutex);
  if (opening && g_open_writers++ == 0) {
    for (size_t k = 0; k < sizeof kSignals / sizeof kSignals[0]; ++k) {
      struct sigaction current {};
      g_installed[k] = false;
      if (::sigaction(kSignals[k], nullptr, &current) != 0 || current.sa_handler != SIG_DFL) continue;
      struct sigaction handler {};
      handler.sa_handler = remove_on_signal;
      sigemptyset(&handler.sa_mask);
      g_installed[k] = ::sigaction(kSignals[k], &handler, &g_previous[k]) == 0;
    }
  } else if (!opening && --g_open_writers == 0) {
    for (size_t k = 0; k < sizeof kSignals / sizeof kSignals[0]; ++k)
      if (g_installed[k]) ::sigaction(kSignals[k], &g_previous[k], nullptr);
  }
}

int claim_slot(const std::string& name) {
  if (name.size() >= PATH_MAX) return -1;
  for (int i = 0; i < kSlots; ++i) {
    bool expected = false;
    if (g_used[i].load() || !g_used[i].compare_exchange_strong(expected, true)) continue;
    // The slot is marked used before its name is complete; a signal in between unlinks a stale
    // or partial name, which names no file of ours.
    std::memcpy(g_names[i], name.c_str(), name.size() + 1);
    return i;
  }
  return -1;
}

void release_slot(int slot) {
  if (slot >= 0) g_used[slot].store(false);
}

// ---- The target ----

std::string folder_of(const std::string& path) {
  std::string dir = std::filesystem::path(path).parent_path().string();
  return dir.empty() ? "." : dir;
}

// A device or pipe (/dev/null, /dev/stdout, a FIFO) cannot be replaced by renaming a file over
// it, which would destroy it: it is written directly.
bool is_special(const struct stat& st) { return !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode); }

// Removes temporary files of this target left by writers that no longer run (killed by
// SIGKILL): ".NAME.autovm-tmp.PID.XXXXXX" whose PID is not a process.
void remove_leftovers(const std::string& path) {
  const std::string prefix = AtomicFileWriter::temporary_prefix(path);
  const std::string dir = folder_of(path);
  DIR* d = ::opendir(dir.c_str());
  if (!d) return;
  const std::string base = std::filesystem::path(prefix).filename().string();
  while (const dirent* e = ::readdir(d)) {
    std::string name = e->d_name;
    if (name.compare(0, base.size(), base) != 0) continue;
    char* end = nullptr;
    long pid = std::strtol(name.c_str() + base.size(), &end, 10);
    if (pid <= 0 || *end != '.' || std::strlen(end) != 7) continue;  // ".XXXXXX"
    if (::kill(pid_t(pid), 0) == 0 || errno != ESRCH) continue;     // still running (or unknown)
    std::string file = dir + "/" + name;
    struct stat st {};
    if (::lstat(file.c_str(), &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == ::geteuid())
      ::unlink(file.c_str());
  }
  ::closedir(d);
}

}  // namespace

std::string AtomicFileWriter::temporary_prefix(const std::string& path) {
  std::string name = ".";  // appended, not "." + ...: GCC 12 warns falsely (-Wrestrict) on that
  name += std::filesystem::path(path).filename().string();
  name += ".autovm-tmp.";
  return (std::filesystem::path(folder_of(path)) / name).string();
}

AtomicFileWriter::AtomicFileWriter(std::string path) : path_(std::move(path)) {
  if (path_.empty()) {
    throw Error(ErrorKind::output, "cannot write the plan: the output path is empty; name a file "
                                   "(or leave -o out to write to standard output)");
  }
  auto refuse = [&](const std::string& why) {
    throw Error(ErrorKind::output, fmt::format("cannot write '{}': {}", path_, why));
  };
  struct stat st {};
  const bool exists = ::stat(path_.c_str(), &st) == 0;
  if (exists && is_special(st)) {
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd_ < 0) fail("cannot open it");
    return;
  }
  if (exists && S_ISDIR(st.st_mode)) refuse("it is a directory; name a file");
  struct stat link {};
  const bool is_link = ::lstat(path_.c_str(), &link) == 0 && S_ISLNK(link.st_mode);
  mode_t mode = 0;
  if (exists && !is_link) {
    if ((st.st_mode & 0222) == 0 || ::access(path_.c_str(), W_OK) != 0) {
      refuse(fmt::format("it is read-only (mode {:04o}); make it writable (chmod u+w) or write "
                         "elsewhere", st.st_mode & 07777));
    }
    mode = st.st_mode & 07777;
  } else {
    const mode_t mask = ::umask(0);
    ::umask(mask);
    mode = 0666 & ~mask;
  }
  remove_leftovers(path_);
  std::string name = temporary_prefix(path_) + std::to_string(::getpid()) + ".XXXXXX";
  track_writer(true);
  fd_ = ::mkostemp(name.data(), O_CLOEXEC);
  if (fd_ < 0) {
    track_writer(false);
    fail("cannot create a temporary file beside it");
  }
  tmp_ = name;
  slot_ = claim_slot(tmp_);
  if (::fchmod(fd_, mode) != 0) fail("cannot set the temporary file's mode");
}

AtomicFileWriter::~AtomicFileWriter() { abandon(); }

void AtomicFileWriter::abandon() {
  if (fd_ >= 0) {
    ::close(fd_);
    fd_ = -1;
    if (!tmp_.empty()) ::unlink(tmp_.c_str());
  }
  if (!tmp_.empty()) {
    release_slot(slot_);
    slot_ = -1;
    tmp_.clear();
    track_writer(false);
  }
}

void AtomicFileWriter::fail(const std::string& what) {
  int saved = errno;
  abandon();
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
  if (::close(fd_) != 0) {
    fd_ = -1;
    ::unlink(tmp_.c_str());
    fail("write failed");
  }
  fd_ = -1;
  if (::rename(tmp_.c_str(), path_.c_str()) != 0) {
    int saved = errno;
    ::unlink(tmp_.c_str());
    errno = saved;
    fail("rename failed");
  }
  // The rename is durable once the folder is flushed too (a failure here loses nothing).
  int dir = ::open(folder_of(path_).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir >= 0) {
    ::fsync(dir);
    ::close(dir);
  }
  release_slot(slot_);
  slot_ = -1;
  tmp_.clear();
  track_writer(false);
}

void write_file_atomically(const std::string& path, std::string_view content) {
  AtomicFileWriter w(path);
  w.write(content);
  w.commit();
}

}  // namespace autovm
