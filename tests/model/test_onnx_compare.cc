// Our shapes against ONNX 1.12's own shape inference, on multi-op graphs of opset <= 17 (the
// versions ONNX 1.12 knows).
#include <onnx/shape_inference/implementation.h>

#include "onnx_builder.h"

using namespace autovm;
using namespace autovm::test;

namespace {

// Fixes dim 0 of every graph input to `batch`, runs both inferences and compares the shape of
// every node output. Every node output must get a shape from ONNX too.
void compare_with_onnx(const OnnxBuilder& b, int64_t batch) {
  onnx::ModelProto proto = b.proto;
  for (auto& in : *proto.mutable_graph()->mutable_input()) {
    auto* shape = in.mutable_type()->mutable_tensor_type()->mutable_shape();
    if (shape->dim_size() > 0) shape->mutable_dim(0)->set_dim_value(batch);
  }
  onnx::shape_inference::InferShapes(proto);
  std::map<std::string, Shape> theirs;
  auto collect = [&](const onnx::ValueInfoProto& v) {
    const auto& tt = v.type().tensor_type();
    if (!tt.has_shape()) return;
    Shape s;
    for (const auto& d : tt.shape().dim()) s.push_back(d.has_dim_value() ? d.dim_value() : -1);
    theirs[v.name()] = s;
  };
  for (const auto& v : proto.graph().value_info()) collect(v);
  for (const auto& v : proto.graph().output()) collect(v);

  model::Model m = b.infer(batch);
  int compared = 0;
  for (const auto& n : m.nodes) {
    for (int o : n.outputs) {
      const std::string& name = m.values[o].name;
      REQUIRE_MESSAGE(theirs.count(name), "ONNX inferred no shape for " << name);
      CHECK_MESSAGE(shape_of(m, name) == theirs[name], name);
      ++compared;
    }
  }
  CHECK(compared >= int(m.nodes.size()));
}

}  // namespace

TEST_CASE("ONNX agrees: Conv + BatchNormalization + Relu + MaxPool + Flatten + Gemm") {
  OnnxBuilder b(13);
  b.input("x", {-1, 3, 32, 30});
  b.weight("w1", {16, 3, 5, 5});
  b.weight("b1", {16});
  auto& conv = b.node("Conv", {"x", "w1", "b1"}, {"c1"});
  attr_ints(conv, "pads", {2, 1, 2, 1});
  attr_ints(conv, "strides", {2, 1});
  for (const char* p : {"s", "bb", "m", "v"}) b.weight(p, {16});
  b.node("BatchNormalization", {"c1", "s", "bb", "m", "v"}, {"bn"});
  b.node("Relu", {"bn"}, {"r"});
  auto& pool = b.node("MaxPool", {"r"}, {"p"});
  attr_ints(pool, "kernel_shape", {3, 3});
  attr_ints(pool, "strides", {2, 2});
  attr_ints(pool, "pads", {1, 1, 1, 1});
  b.weight("w2", {32, 16, 3, 3});
  auto& dw = b.node("Conv", {"p", "w2"}, {"c2"});
  attr_ints(dw, "dilations", {2, 2});
  attr_s(dw, "auto_pad", "SAME_UPPER");
  b.node("GlobalAveragePool", {"c2"}, {"g"});
  b.node("Flatten", {"g"}, {"f"});
  b.weight("fc", {10, 32});
  attr_i(b.node("Gemm", {"f", "fc"}, {"y"}), "transB", 1);
  b.output("y");
  compare_with_onnx(b, 4);
}

TEST_CASE("ONNX agrees: Concat of branches, AveragePool, Pad") {
  OnnxBuilder b(13);
  b.input("x", {-1, 8, 17, 17});
  b.weight("w1", {4, 8, 1, 1});
  b.weight("w3", {6, 8, 3, 3});
  b.node("Conv", {"x", "w1"}, {"a"});
  attr_ints(b.node("Conv", {"x", "w3"}, {"c"}), "pads", {1, 1, 1, 1});
  attr_i(b.node("Concat", {"a", "c", "x"}, {"cat"}), "axis", 1);
  b.ints("pads", {0, 0, 1, 2, 0, 0, 0, 1});
  b.node("Pad", {"cat", "pads"}, {"padded"});
  auto& avg = b.node("AveragePool", {"padded"}, {"avg"});
  attr_ints(avg, "kernel_shape", {3, 2});
  attr_ints(avg, "strides", {2, 2});
  attr_i(avg, "ceil_mode", 1);
  b.output("avg");
  compare_with_onnx(b, 2);
}

TEST_CASE("ONNX agrees: Slice, Split, Squeeze, Unsqueeze, ReduceMean") {
  OnnxBuilder b(13);
  b.input("x", {-1, 12, 10});
  b.ints("st", {1, -1});
  b.ints("en", {11, INT64_MIN});
  b.ints("ax", {1, 2});
  b.ints("sp", {3, -3});
  b.node("Slice", {"x", "st", "en", "ax", "sp"}, {"s"});  // [N, 4, 4]
  b.ints("sizes", {1, 3});
  attr_i(b.node("Split", {"s", "sizes"}, {"s1", "s3"}), "axis", 1);
  b.ints("ax1", {1});
  b.node("Squeeze", {"s1", "ax1"}, {"sq"});
  b.ints("ax0", {0, -1});
  b.node("Unsqueeze", {"sq", "ax0"}, {"un"});
  auto& mean = b.node("ReduceMean", {"s3"}, {"mean"});
  attr_ints(mean, "axes", {-1});
  attr_i(mean, "keepdims", 0);
  b.output("un");
  b.output("mean");
  compare_with_onnx(b, 3);
}

TEST_CASE("ONNX agrees: attention-like Transpose, MatMul, Softmax, Reshape, Gather") {
  OnnxBuilder b(17);
  b.input("x", {-1, 16, 64});
  b.weight("wq", {64, 64});
  b.node("MatMul", {"x", "wq"}, {"q"});
  b.ints("heads", {0, 16, 4, 16});
  b.node("Reshape", {"q", "heads"}, {"qh"});
  attr_ints(b.node("Transpose", {"qh"}, {"qt"}), "perm", {0, 2, 1, 3});
  attr_ints(b.node("Transpose", {"qh"}, {"kt"}), "perm", {0, 2, 3, 1});
  b.node("MatMul", {"qt", "kt"}, {"scores"});
  attr_i(b.node("Softmax", {"scores"}, {"attn"}), "axis", -1);
  b.node("MatMul", {"attn", "qt"}, {"ctx"});
  b.ints("first", {0}, {});
  attr_i(b.node("Gather", {"ctx", "first"}, {"head0"}), "axis", 1);
  b.weight("bias", {16});
  b.node("Add", {"head0", "bias"}, {"y"});
  b.output("y");
  compare_with_onnx(b, 2);
}
