// Contract: reads the bytes an ONNX tensor keeps in an external file, confined to the model's
// folder. `location` must be a relative path without "..", and the file it names, with every
// symlink resolved (realpath), must lie inside realpath(model_folder): a symlink that stays
// inside is followed, one that leads out is refused. The file must be a regular file: a FIFO,
// a device or a directory is refused without blocking (it is opened with O_NONBLOCK and checked
// with fstat before any read; the last component is opened with O_NOFOLLOW, so a symlink put
// there after the check is refused too). It must hold `bytes` bytes from `offset`, which is
// checked against its size before anything is allocated.
//
// Every failure throws Error(invalid_model) with a message that names the tensor (`what`,
// e.g. "initializer 'shape'") and the path, and never quotes the file's contents.
#pragma once

#include <cstdint>
#include <string>

namespace autovm::model {

std::string read_external_bytes(const std::string& model_folder, const std::string& location,
                                int64_t offset, int64_t bytes, const std::string& what);

}  // namespace autovm::model
