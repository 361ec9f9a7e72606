// Contract: write a whole file atomically. The content goes to a temporary file in the same
// folder, is flushed with fsync, then renamed over the target, so readers see either the old
// file or the whole new one. A target that is a device or pipe (/dev/null, a FIFO) is written
// directly instead: renaming over it would destroy it. Throws Error(output) naming the path and
// the system's reason.
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

 private:
  [[noreturn]] void fail(const std::string& what);
  std::string path_;
  std::string tmp_;  // empty when the target is a device or pipe, written directly
  int fd_ = -1;
};

}  // namespace autovm
