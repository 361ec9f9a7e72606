// Contract: write a whole file atomically. The content goes to a temporary file in the target's
// folder, is flushed with fsync, then renamed over the target, so readers see either the old
// file or the whole new one.
//
// - The temporary file is created by mkstemp (O_CREAT|O_EXCL: a file or symlink already at its
//   name is never opened or followed) and named ".NAME.autovm-tmp.PID.XXXXXX" beside NAME.
// - The new file keeps the target's permission bits where the target exists; a new target gets
//   0666 less the umask. A target that is a symlink is replaced by the file (the link's own
//   target is left alone).
// - A target the user cannot write, or one with no write permission bit at all (mode 0444,
//   which root could otherwise replace), is refused, as is an empty path or a directory.
// - A target that is a device or pipe (/dev/null, /dev/stdout, a FIFO) is written directly
//   instead: renaming over it would destroy it.
// - The temporary file is removed on every exit this process controls: an error, a writer
//   destroyed before commit(), and SIGINT, SIGTERM or SIGHUP while it is open (when those
//   signals have their default action, the writer removes the file and then dies of the signal
//   as before). A process killed by SIGKILL leaves it behind; the next writer of the same
//   target removes such leftovers whose PID no longer runs.
// Failures throw Error(output) naming the path and the system's reason (autovm-plan's exit 7).
#pragma once

#include <string>
#include <string_view>

namespace autovm {

void write_file_atomically(const std::string& path, std::string_view content);

// The same in pieces: write() appends to the temporary file, commit() flushes and renames it
// over the target; a writer destroyed before commit() removes its temporary file.
class AtomicFileWriter {
 public:
  explicit AtomicFileWriter(std::string path);
  ~AtomicFileWriter();
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;
  void write(std::string_view piece);
  void commit();

  // The prefix of the temporary files of `path` (".NAME.autovm-tmp."), for tests.
  static std::string temporary_prefix(const std::string& path);

 private:
  [[noreturn]] void fail(const std::string& what);
  void abandon();  // closes and removes the temporary file
  std::string path_;
  std::string tmp_;  // empty when the target is a device or pipe, written directly
  int fd_ = -1;
  int slot_ = -1;    // the signal handler's record of tmp_ (-1: none)
};

}  // namespace autovm
