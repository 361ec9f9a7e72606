// Shape inference of the ops of dense-prediction and modern CNNs, with hand-computed shapes:
// transposed, 3-D, dilated and grouped convolution; 3-D pooling and batch norm; instance and
// group norm; Resize and Upsample in each mode; the activations; Sum, Max, Min, ReduceSum,
// ReduceMax; the dynamo exporter's dropout (RandomUniformLike, Less).
#include "onnx_builder.h"

using namespace autovm;
using namespace autovm::test;

namespace {

// One node `op` reading x (and `extra`), output y.
struct Op {
  OnnxBuilder b;
  onnx::NodeProto* n;
  Op(int64_t opset, const std::string& op, const std::vector<int64_t>& dims, const std::vector<std::string>& extra = {})
      : b(opset) {
    b.input("x", dims);
    std::vector<std::string> inputs{"x"};
    inputs.insert(inputs.end(), extra.begin(), extra.end());
    n = &b.node(op, inputs, {"y"}, "n");
    b.output("y");
  }
  Shape y(int64_t batch) const { return shape_of(b.infer(batch), "y"); }
  DType dtype(int64_t batch) const {
    model::Model m = b.infer(batch);
    return m.values[m.find("y")].dtype;
  }
  std::string error(int64_t batch) const {
    auto [kind, message] = error_of([&] { b.infer(batch); });
    CHECK(kind == ErrorKind::invalid_model);
    return message;
  }
};

// A float tensor constant `name` (Resize's scales).
void float_constant(OnnxBuilder& b, const std::string& name, const std::vector<float>& values) {
  auto& c = b.node("Constant", {}, {name}, name + "_const");
  attr_float_tensor(c, "value", values, {int64_t(values.size())});
}

}  // namespace

TEST_CASE("ConvTranspose: strides, pads, output_padding, dilations, groups, 3-D, output_shape") {
  SUBCASE("2-D, stride 2, pads 1, output_padding 1: 2 * (5 - 1) + 1 + 3 - 2 = 10") {
    Op t(17, "ConvTranspose", {-1, 8, 5, 5}, {"w", "bias"});
    t.b.weight("w", {8, 4, 3, 3});
    t.b.weight("bias", {4});
    attr_ints(*t.n, "strides", {2, 2});
    attr_ints(*t.n, "pads", {1, 1, 1, 1});
    attr_ints(*t.n, "output_padding", {1, 1});
    CHECK(t.y(3) == Shape{3, 4, 10, 10});
  }
  SUBCASE("U-Net's up-convolution, kernel 2 stride 2, doubles each axis") {
    Op t(17, "ConvTranspose", {1, 64, 7, 9}, {"w"});
    t.b.weight("w", {64, 32, 2, 2});
    attr_ints(*t.n, "strides", {2, 2});
    CHECK(t.y(1) == Shape{1, 32, 14, 18});
  }
  SUBCASE("3-D with group 2: Cout = 3 x 2") {
    Op t(17, "ConvTranspose", {2, 4, 3, 4, 5}, {"w"});
    t.b.weight("w", {4, 3, 2, 2, 2});
    attr_i(*t.n, "group", 2);
    attr_ints(*t.n, "strides", {2, 2, 2});
    CHECK(t.y(2) == Shape{2, 6, 6, 8, 10});
  }
  SUBCASE("dilation 2: (4 - 1) + (3 - 1) * 2 + 1 = 8") {
    Op t(17, "ConvTranspose", {1, 2, 4, 4}, {"w"});
    t.b.weight("w", {2, 3, 3, 3});
    attr_ints(*t.n, "dilations", {2, 2});
    CHECK(t.y(1) == Shape{1, 3, 8, 8});
  }
  SUBCASE("output_shape and SAME_UPPER") {
    Op t(17, "ConvTranspose", {1, 2, 5, 5}, {"w"});
    t.b.weight("w", {2, 3, 3, 3});
    attr_ints(*t.n, "strides", {2, 2});
    attr_ints(*t.n, "output_shape", {11, 10});
    CHECK(t.y(1) == Shape{1, 3, 11, 10});
    Op same(17, "ConvTranspose", {1, 2, 5, 6}, {"w"});
    same.b.weight("w", {2, 3, 3, 3});
    attr_ints(*same.n, "strides", {2, 2});
    attr_s(*same.n, "auto_pad", "SAME_UPPER");
    CHECK(same.y(1) == Shape{1, 3, 10, 12});
  }
  SUBCASE("errors") {
    Op channels(17, "ConvTranspose", {1, 8, 5, 5}, {"w"});
    channels.b.weight("w", {4, 8, 3, 3});
    CHECK(channels.error(1) == "node 'n' (ConvTranspose): input has 8 channels but the weight [4, 8, 3, 3] expects 4 "
                               "(ConvTranspose weights are [Cin, Cout / group, k...])");
    Op padding(17, "ConvTranspose", {1, 2, 5, 5}, {"w"});
    padding.b.weight("w", {2, 3, 3, 3});
    attr_ints(*padding.n, "strides", {2, 2});
    attr_ints(*padding.n, "output_padding", {2, 0});
    CHECK(padding.error(1).find("output_padding [2, 0] must be non-negative and smaller") != std::string::npos);
    Op bias(17, "ConvTranspose", {1, 2, 5, 5}, {"w", "bias"});
    bias.b.weight("w", {2, 3, 3, 3});
    bias.b.weight("bias", {2});
    CHECK(bias.error(1) == "node 'n' (ConvTranspose): bias has shape [2] but the output has 3 channels");
  }
}

TEST_CASE("Conv, pooling and batch norm in 3-D; dilated and grouped convolutions") {
  SUBCASE("3-D conv, pads 1, strides 1, 2, 2") {
    Op t(17, "Conv", {-1, 3, 16, 32, 32}, {"w"});
    t.b.weight("w", {8, 3, 3, 3, 3});
    attr_ints(*t.n, "pads", {1, 1, 1, 1, 1, 1});
    attr_ints(*t.n, "strides", {1, 2, 2});
    CHECK(t.y(2) == Shape{2, 8, 16, 16, 16});
  }
  SUBCASE("dilated grouped conv keeps 20: 20 + 6 - ((3 - 1) * 3 + 1) + 1") {
    Op t(17, "Conv", {1, 8, 20, 20}, {"w"});
    t.b.weight("w", {16, 2, 3, 3});
    attr_i(*t.n, "group", 4);
    attr_ints(*t.n, "dilations", {3, 3});
    attr_ints(*t.n, "pads", {3, 3, 3, 3});
    CHECK(t.y(1) == Shape{1, 16, 20, 20});
  }
  SUBCASE("3-D max and average pooling") {
    Op max(17, "MaxPool", {1, 4, 8, 8, 8});
    attr_ints(*max.n, "kernel_shape", {2, 2, 2});
    attr_ints(*max.n, "strides", {2, 2, 2});
    CHECK(max.y(1) == Shape{1, 4, 4, 4, 4});
    Op avg(17, "AveragePool", {1, 4, 5, 6, 7});
    attr_ints(*avg.n, "kernel_shape", {3, 3, 3});
    attr_ints(*avg.n, "pads", {1, 1, 1, 1, 1, 1});
    attr_ints(*avg.n, "strides", {2, 2, 2});
    CHECK(avg.y(1) == Shape{1, 4, 3, 3, 4});
  }
  SUBCASE("3-D batch norm and global max pooling") {
    Op bn(17, "BatchNormalization", {2, 4, 3, 3, 3}, {"s", "b", "m", "v"});
    for (const char* p : {"s", "b", "m", "v"}) bn.b.weight(p, {4});
    CHECK(bn.y(2) == Shape{2, 4, 3, 3, 3});
    Op gmp(17, "GlobalMaxPool", {2, 4, 3, 5, 7});
    CHECK(gmp.y(2) == Shape{2, 4, 1, 1, 1});
  }
}

TEST_CASE("InstanceNormalization and GroupNormalization") {
  Op in(17, "InstanceNormalization", {-1, 6, 5, 5}, {"s", "b"});
  in.b.weight("s", {6});
  in.b.weight("b", {6});
  CHECK(in.y(2) == Shape{2, 6, 5, 5});
  Op bad(17, "InstanceNormalization", {1, 6, 5, 5}, {"s", "b"});
  bad.b.weight("s", {5});
  bad.b.weight("b", {6});
  CHECK(bad.error(1) == "node 'n' (InstanceNormalization): scale has shape [5] but the input [1, 6, 5, 5] has 6 channels");

  SUBCASE("opset 18: scale per group; opset 21: per channel") {
    Op g(18, "GroupNormalization", {2, 6, 4, 4, 4}, {"s", "b"});
    g.b.weight("s", {3});
    g.b.weight("b", {3});
    attr_i(*g.n, "num_groups", 3);
    CHECK(g.y(2) == Shape{2, 6, 4, 4, 4});
    Op c(18, "GroupNormalization", {2, 6, 4, 4}, {"s", "b"});
    c.b.weight("s", {6});
    c.b.weight("b", {6});
    attr_i(*c.n, "num_groups", 3);
    CHECK(c.y(2) == Shape{2, 6, 4, 4});
  }
  SUBCASE("groups must divide the channels") {
    Op g(18, "GroupNormalization", {2, 6, 4, 4}, {"s", "b"});
    g.b.weight("s", {4});
    g.b.weight("b", {4});
    attr_i(*g.n, "num_groups", 4);
    CHECK(g.error(2) == "node 'n' (GroupNormalization): num_groups 4 does not divide the 6 channels of [2, 6, 4, 4]");
  }
  SUBCASE("the pattern older exporters write: Reshape, InstanceNormalization, Reshape, Mul, Add") {
    OnnxBuilder b(11);
    b.input("x", {-1, 6, 4, 4});
    b.ints("grouped", {0, 3, -1});
    b.ints("back", {2, 6, 4, 4});
    b.weight("ones", {3});
    b.weight("zeros", {3});
    b.weight("gamma", {6, 1, 1});
    b.weight("beta", {6, 1, 1});
    b.node("Reshape", {"x", "grouped"}, {"r"});
    b.node("InstanceNormalization", {"r", "ones", "zeros"}, {"n"});
    b.node("Reshape", {"n", "back"}, {"u"});
    b.node("Mul", {"u", "gamma"}, {"s"});
    b.node("Add", {"s", "beta"}, {"y"});
    b.output("y");
    model::Model m = b.infer(2);
    CHECK(shape_of(m, "r") == Shape{2, 3, 32});
    CHECK(shape_of(m, "n") == Shape{2, 3, 32});
    CHECK(shape_of(m, "y") == Shape{2, 6, 4, 4});
  }
}

TEST_CASE("Resize and Upsample in each mode torch exports") {
  SUBCASE("Resize (opset 13) nearest and bilinear by scales: floor(5 x 2), floor(7 x 1.5)") {
    for (const char* mode : {"nearest", "linear", "cubic"}) {
      CAPTURE(mode);
      Op t(13, "Resize", {1, 3, 5, 7}, {"", "scales"});
      float_constant(t.b, "scales", {1, 1, 2, 1.5});
      attr_s(*t.n, "mode", mode);
      CHECK(t.y(4) == Shape{4, 3, 10, 10});
    }
  }
  SUBCASE("Resize trilinear, 3-D") {
    Op t(13, "Resize", {1, 2, 4, 5, 6}, {"", "scales"});
    float_constant(t.b, "scales", {1, 1, 2, 2, 2});
    attr_s(*t.n, "mode", "linear");
    CHECK(t.y(2) == Shape{2, 2, 8, 10, 12});
  }
  SUBCASE("Resize by sizes (F.interpolate(size=...)), the batch from the input") {
    OnnxBuilder b(13);
    b.input("x", {-1, 3, 5, 7});
    b.ints("hw", {9, 11});
    b.node("Shape", {"x"}, {"s"});
    b.node("Slice", {"s", "zero", "two"}, {"nc"});
    b.ints("zero", {0});
    b.ints("two", {2});
    auto& cat = b.node("Concat", {"nc", "hw"}, {"sizes"});
    attr_i(cat, "axis", 0);
    auto& r = b.node("Resize", {"x", "", "", "sizes"}, {"y"}, "n");
    attr_s(r, "mode", "linear");
    b.output("y");
    CHECK(shape_of(b.infer(4), "y") == Shape{4, 3, 9, 11});
  }
  SUBCASE("Resize (opset 10) and Upsample (opset 9) take scales as input 1; Upsample 7 an attribute") {
    Op r10(10, "Resize", {1, 3, 5, 5}, {"scales"});
    float_constant(r10.b, "scales", {1, 1, 2, 2});
    CHECK(r10.y(1) == Shape{1, 3, 10, 10});
    Op u9(9, "Upsample", {1, 3, 5, 5}, {"scales"});
    float_constant(u9.b, "scales", {1, 1, 3, 3});
    attr_s(*u9.n, "mode", "linear");
    CHECK(u9.y(1) == Shape{1, 3, 15, 15});
    Op u7(7, "Upsample", {1, 3, 5, 5});
    attr_floats(*u7.n, "scales", {1, 1, 2, 2});
    CHECK(u7.y(1) == Shape{1, 3, 10, 10});
  }
  SUBCASE("an unknown mode is an error") {
    Op t(13, "Resize", {1, 3, 5, 7}, {"", "scales"});
    float_constant(t.b, "scales", {1, 1, 2, 2});
    attr_s(*t.n, "mode", "area");
    CHECK(t.error(1) == "node 'n' (Resize): mode 'area' is not nearest, linear or cubic");
  }
}

TEST_CASE("activations keep their input's shape") {
  for (const char* op : {"LeakyRelu", "Elu", "Selu", "Tanh", "Softplus", "Mish"}) {
    CAPTURE(op);
    Op t(17, op, {-1, 3, 4, 5});
    CHECK(t.y(2) == Shape{2, 3, 4, 5});
  }
  Op gelu(20, "Gelu", {-1, 7});
  attr_s(*gelu.n, "approximate", "tanh");
  CHECK(gelu.y(3) == Shape{3, 7});
}

TEST_CASE("Sum, Max and Min broadcast every input") {
  Op sum(17, "Sum", {2, 3, 4}, {"a", "c"});
  sum.b.weight("a", {3, 1});
  sum.b.weight("c", {4});
  CHECK(sum.y(2) == Shape{2, 3, 4});
  Op max(17, "Max", {2, 3, 4}, {"a"});
  max.b.weight("a", {1, 3, 1});
  CHECK(max.y(2) == Shape{2, 3, 4});
  Op min(17, "Min", {2, 3}, {"a"});
  min.b.weight("a", {4});
  CHECK(min.error(2) == "node 'n' (Min): shapes [2, 3] and [4] do not broadcast");
  Op many(17, "Max", {2, 3}, {"x", "x", "x", "x", "x", "x", "x", "x"});
  CHECK(many.error(2) == "node 'n' (Max): has 9 inputs; AutoVM plans Max of at most 8");
}

TEST_CASE("ReduceSum takes axes as an input from opset 13, ReduceMax from 18") {
  Op sum13(13, "ReduceSum", {2, 3, 4}, {"axes"});
  sum13.b.ints("axes", {1});
  attr_i(*sum13.n, "keepdims", 0);
  CHECK(sum13.y(2) == Shape{2, 4});
  Op sum11(11, "ReduceSum", {2, 3, 4});
  attr_ints(*sum11.n, "axes", {-1});
  CHECK(sum11.y(2) == Shape{2, 3, 1});
  Op max13(13, "ReduceMax", {2, 3, 4});
  attr_ints(*max13.n, "axes", {2, 1});
  CHECK(max13.y(2) == Shape{2, 1, 1});
  Op max18(18, "ReduceMax", {2, 3, 4}, {"axes"});
  max18.b.ints("axes", {0});
  attr_i(*max18.n, "keepdims", 0);
  CHECK(max18.y(2) == Shape{3, 4});

  SUBCASE("ReduceSum of known integers is evaluated: the sums of [[1, 2, 3], [4, 5, 6]] over axis 0") {
    OnnxBuilder b(13);
    b.input("x", {-1, 2});
    b.ints("v", {1, 2, 3, 4, 5, 6}, {2, 3});
    b.ints("axes", {0});
    auto& r = b.node("ReduceSum", {"v", "axes"}, {"s"}, "r");
    attr_i(r, "keepdims", 0);
    b.output("s");
    model::Model m = b.infer(1);
    CHECK(m.values[m.find("s")].value->ints == std::vector<int64_t>{5, 7, 9});
  }
}

TEST_CASE("the dynamo exporter's dropout: RandomUniformLike, Less") {
  OnnxBuilder b(18);
  b.input("x", {-1, 16});
  b.node("RandomUniformLike", {"x"}, {"r"}, "rand");
  b.weight("keep", {});
  b.node("Less", {"r", "keep"}, {"mask"}, "less");
  b.output("mask");
  model::Model m = b.infer(4);
  CHECK(shape_of(m, "r") == Shape{4, 16});
  CHECK(m.values[m.find("r")].dtype == DType::f32);
  CHECK(shape_of(m, "mask") == Shape{4, 16});
  CHECK(m.values[m.find("mask")].dtype == DType::boolean);

  SUBCASE("ONNX's Dropout function body: GreaterOrEqual, LessOrEqual") {
    OnnxBuilder f(18);
    f.input("x", {-1, 3, 5});
    f.node("RandomUniformLike", {"x"}, {"r"});
    f.weight("ratio", {});
    f.node("GreaterOrEqual", {"r", "ratio"}, {"keep"});
    f.node("LessOrEqual", {"r", "ratio"}, {"drop"});
    f.output("keep").output("drop");
    model::Model g = f.infer(2);
    CHECK(shape_of(g, "keep") == Shape{2, 3, 5});
    CHECK(g.values[g.find("drop")].dtype == DType::boolean);
  }
}
