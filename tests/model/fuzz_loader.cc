// libFuzzer target: any bytes must either load, pass the op check and infer, or fail with
// autovm::Error. Any other exception, a crash or a sanitizer report is a bug.
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
