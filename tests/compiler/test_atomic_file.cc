// The atomic writer (util/atomic_file.h): modes, read-only targets, symlinks, leftovers, and a
// writer killed in the middle of its work.
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "util/atomic_file.h"
#include "util/error.h"

using namespace autovm;
namespace fs = std::filesystem;

namespace {

struct TempDir {
  fs::path path;
  TempDir() {
    char tmpl[] = "/tmp/autovm_atomic_XXXXXX";
    REQUIRE(mkdtemp(tmpl) != nullptr);
    path = tmpl;
  }
  ~TempDir() { fs::remove_all(path); }
};

std::string read(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void write(const fs::path& p, const std::string& text) { std::ofstream(p, std::ios::binary) << text; }

mode_t mode_of(const fs::path& p) {
  struct stat st {};
  REQUIRE(::lstat(p.c_str(), &st) == 0);
  return st.st_mode & 07777;
}

// The files in `dir` other than `keep`, by name.
std::vector<std::string> others(const fs::path& dir, const std::vector<std::string>& keep) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) {
    std::string n = e.path().filename().string();
    if (std::find(keep.begin(), keep.end(), n) == keep.end()) names.push_back(n);
  }
  return names;
}

std::string error_message(const std::string& path) {
  try {
    write_file_atomically(path, "new");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::output);
    return e.what();
  }
  FAIL("no error");
  return "";
}

// A pid that is no process: a child's, after it was reaped.
pid_t dead_pid() {
  pid_t pid = ::fork();
  if (pid == 0) ::_exit(0);
  ::waitpid(pid, nullptr, 0);
  return pid;
}

}  // namespace

TEST_CASE("atomic file: replaces the content and keeps the target's mode") {
  TempDir dir;
  const fs::path out = dir.path / "plan.json";
  write(out, "old");
  ::chmod(out.c_str(), 0640);
  write_file_atomically(out.string(), "new content");
  CHECK(read(out) == "new content");
  CHECK(mode_of(out) == 0640);
  CHECK(others(dir.path, {"plan.json"}).empty());
}

TEST_CASE("atomic file: a new file gets 0666 less the umask") {
  TempDir dir;
  const mode_t mask = ::umask(027);
  write_file_atomically((dir.path / "new.json").string(), "x");
  ::umask(mask);
  CHECK(mode_of(dir.path / "new.json") == 0640);
}

TEST_CASE("atomic file: a read-only target, a directory and an empty path are refused") {
  TempDir dir;
  const fs::path out = dir.path / "plan.json";
  write(out, "old");
  ::chmod(out.c_str(), 0444);
  std::string message = error_message(out.string());
  CHECK(message.find("read-only (mode 0444)") != std::string::npos);
  CHECK(read(out) == "old");
  CHECK(mode_of(out) == 0444);
  CHECK(others(dir.path, {"plan.json"}).empty());
  CHECK(error_message(dir.path.string()).find("is a directory") != std::string::npos);
  CHECK(error_message("").find("the output path is empty") != std::string::npos);
}

TEST_CASE("atomic file: symlinks planted at the old temporary name or at the output") {
  TempDir dir;
  const fs::path victim = dir.path / "victim";
  write(victim, "precious");
  const fs::path out = dir.path / "plan.json";
  write(out, "old");
  // The name the writer once used; the writer must neither write through it nor end up as it.
  fs::create_symlink(victim, out.string() + ".tmp" + std::to_string(::getpid()));
  write_file_atomically(out.string(), "new");
  CHECK(read(victim) == "precious");
  CHECK(read(out) == "new");
  CHECK_FALSE(fs::is_symlink(out));

  SUBCASE("an output that is a symlink is replaced by the file; its target is left alone") {
    fs::remove(out);
    fs::create_symlink(victim, out);
    write_file_atomically(out.string(), "plan");
    CHECK_FALSE(fs::is_symlink(out));
    CHECK(read(out) == "plan");
    CHECK(read(victim) == "precious");
  }
}

TEST_CASE("atomic file: a writer destroyed before commit leaves the old file and no temporary") {
  TempDir dir;
  const fs::path out = dir.path / "plan.json";
  write(out, "old");
  {
    AtomicFileWriter w(out.string());
    w.write("half of a plan");
    CHECK(others(dir.path, {"plan.json"}).size() == 1);  // its temporary file
  }
  CHECK(read(out) == "old");
  CHECK(others(dir.path, {"plan.json"}).empty());
}

TEST_CASE("atomic file: leftovers of a writer that no longer runs are removed by the next") {
  TempDir dir;
  const fs::path out = dir.path / "plan.json";
  const std::string prefix = AtomicFileWriter::temporary_prefix(out.string());
  CHECK(prefix == (dir.path / ".plan.json.autovm-tmp.").string());
  const std::string dead = prefix + std::to_string(dead_pid()) + ".abcdef";
  const std::string alive = prefix + "1.abcdef";  // pid 1 runs: its file is left alone
  const std::string other = (dir.path / ".other.json.autovm-tmp.").string() + std::to_string(dead_pid()) + ".abcdef";
  for (const std::string& f : {dead, alive, other}) write(f, "leftover");
  write_file_atomically(out.string(), "new");
  CHECK_FALSE(fs::exists(dead));
  CHECK(fs::exists(alive));
  CHECK(fs::exists(other));
}

TEST_CASE("atomic file: a writer killed midway leaves the old output intact") {
  TempDir dir;
  const fs::path out = dir.path / "plan.json";
  write(out, "old");
  // The child starts a writer, writes part of a plan, says so through the pipe, and waits to
  // be killed.
  auto start_child = [&]() -> pid_t {
    int ready[2];
    REQUIRE(::pipe(ready) == 0);
    pid_t pid = ::fork();
    if (pid == 0) {
      ::close(ready[0]);
      ::signal(SIGINT, SIG_DFL);  // as in a shell's foreground job, whatever the test runner set
      ::signal(SIGTERM, SIG_DFL);
      AtomicFileWriter w(out.string());
      w.write(std::string(1 << 20, 'x'));
      char c = 1;
      if (::write(ready[1], &c, 1) != 1) ::_exit(3);
      for (;;) ::pause();
    }
    ::close(ready[1]);
    char c = 0;
    REQUIRE(::read(ready[0], &c, 1) == 1);
    ::close(ready[0]);
    return pid;
  };
  auto kill_child = [](pid_t pid, int sig) {
    REQUIRE(::kill(pid, sig) == 0);
    int status = 0;
    REQUIRE(::waitpid(pid, &status, 0) == pid);
    CHECK(WIFSIGNALED(status));
    CHECK(WTERMSIG(status) == sig);
  };

  SUBCASE("SIGTERM and SIGINT: the temporary file is removed, then the process dies of the signal") {
    for (int sig : {SIGTERM, SIGINT}) {
      CAPTURE(sig);
      kill_child(start_child(), sig);
      CHECK(read(out) == "old");
      CHECK(others(dir.path, {"plan.json"}).empty());
    }
  }
  SUBCASE("SIGKILL: the temporary file stays until the next writer of the output removes it") {
    kill_child(start_child(), SIGKILL);
    CHECK(read(out) == "old");
    CHECK(others(dir.path, {"plan.json"}).size() == 1);
    write_file_atomically(out.string(), "new");
    CHECK(read(out) == "new");
    CHECK(others(dir.path, {"plan.json"}).empty());
  }
}
