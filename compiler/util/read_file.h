// Contract: reads a whole file the user names. Only a regular file is read: the file is opened
// with O_NONBLOCK (so a FIFO cannot make the open wait for ever) and checked with fstat before
// any read; a directory, FIFO or device is refused. Throws Error(kind) whose message starts
// with `what` and the quoted path and says why ("measured step times 'x.json': it is a
// directory; name a file").
#pragma once

#include <string>

#include "util/error.h"

namespace autovm {

std::string read_regular_file(const std::string& what, const std::string& path, ErrorKind kind);

}  // namespace autovm
