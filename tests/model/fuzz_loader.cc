// libFuzzer target: any bytes must either load, pass the op check and infer, or fail with
// autovm::Error. Any other exception, a crash or a sanitizer report is a bug.
// Built alone with clang, from the repository root:
//   clang++ -std=c++20 -g -O1 -fsanitize=fuzzer,address,undefined -DONNX_ML=1 -DONNX_NAMESPACE=onnx \
//     -Icompiler compiler/model/{loader,external_data,shape_inference,supported_ops}.cc \
//     compiler/util/{sha256,size,read_file}.cc compiler/ir/{graph,types}.cc tests/model/fuzz_loader.cc \
//     -lonnx -lonnx_proto -lprotobuf -lcrypto -lfmt -lpthread -o fuzz_loader
//   mkdir -p corpus && cp tests/model/fuzz_corpus/* corpus/ && ./fuzz_loader -max_len=16384 corpus
#include <cstddef>
#include <cstdint>

#include "model/model.h"
#include "model/shape_inference.h"
#include "util/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    autovm::model::Model m = autovm::model::load_model_from_bytes(data, size, "fuzz.onnx", "fuzz_data");
    autovm::model::check_supported_ops(m);
    autovm::model::infer_shapes(m, 2);
  } catch (const autovm::Error&) {
    // Rejected cleanly.
  }
  return 0;
}
