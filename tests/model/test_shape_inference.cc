// Shape inference per op (hand-computed shapes), opset differences, the batch override, static
// evaluation of shape subgraphs, and inconsistent-shape errors.
#include <time.h>

#include <cmath>

#include "onnx_builder.h"

using namespace autovm;
using namespace autovm::test;

namespace {

// A model with one input x of `dims`, one node `op` reading x (plus `extra` inputs), output y.
struct OneOp {
  OnnxBuilder b;
  onnx::NodeProto* n;
  OneOp(int64_t opset, const std::string& op, const std::vector<int64_t>& dims,
        const std::vector<std::string>& extra = {}, const std::vector<std::string>& outputs = {"y"})
      : b(opset) {
    b.input("x", dims);
    std::vector<std::string> inputs{"x"};
    inputs.insert(inputs.end(), extra.begin(), extra.end());
    n = &b.node(op, inputs, outputs, "n");
    for (const auto& o : outputs) {
      if (!o.empty()) b.output(o);
    }
  }
  Shape y(int64_t batch = 2) const { return shape_of(b.infer(batch), "y"); }
  std::string error(int64_t batch = 2) const {
    auto [kind, message] = error_of([&] { b.infer(batch); });
    CHECK(kind == ErrorKind::invalid_model);
    return message;
  }
};

}  // namespace

TEST_CASE("Conv: pads, strides, dilations, group, auto_pad") {
  SUBCASE("plain 3x3, pad 1, stride 2") {
    OneOp t(17, "Conv", {-1, 3, 224, 224}, {"w", "bias"});
    t.b.weight("w", {64, 3, 7, 7});
    t.b.weight("bias", {64});
    attr_ints(*t.n, "pads", {3, 3, 3, 3});
    attr_ints(*t.n, "strides", {2, 2});
    CHECK(t.y(8) == Shape{8, 64, 112, 112});
  }
  SUBCASE("asymmetric pads and dilation") {
    OneOp t(17, "Conv", {1, 4, 10, 11}, {"w"});
    t.b.weight("w", {6, 4, 3, 2});
    attr_ints(*t.n, "pads", {0, 1, 2, 0});  // h: 10+0+2=12, w: 11+1+0=12
    attr_ints(*t.n, "dilations", {2, 3});   // windows 5 and 4
    CHECK(t.y(1) == Shape{1, 6, 8, 9});
  }
  SUBCASE("depthwise group") {
    OneOp t(17, "Conv", {1, 32, 15, 15}, {"w"});
    t.b.weight("w", {32, 1, 3, 3});
    attr_i(*t.n, "group", 32);
    attr_ints(*t.n, "strides", {2, 2});
    CHECK(t.y(1) == Shape{1, 32, 7, 7});
  }
  SUBCASE("SAME_UPPER and VALID") {
    OneOp same(17, "Conv", {1, 3, 15, 16}, {"w"});
    same.b.weight("w", {8, 3, 3, 3});
    attr_s(*same.n, "auto_pad", "SAME_UPPER");
    attr_ints(*same.n, "strides", {2, 2});
    CHECK(same.y(1) == Shape{1, 8, 8, 8});
    OneOp valid(17, "Conv", {1, 3, 15, 16}, {"w"});
    valid.b.weight("w", {8, 3, 3, 3});
    attr_s(*valid.n, "auto_pad", "VALID");
    attr_ints(*valid.n, "strides", {2, 2});
    CHECK(valid.y(1) == Shape{1, 8, 7, 7});
  }
  SUBCASE("1-D conv") {
    OneOp t(17, "Conv", {2, 5, 100}, {"w"});
    t.b.weight("w", {7, 5, 5});
    CHECK(t.y() == Shape{2, 7, 96});
  }
  SUBCASE("channel mismatch") {
    OnnxBuilder b;
    b.input("x", {1, 64, 56, 56});
    b.weight("w", {64, 128, 3, 3});
    b.node("Conv", {"x", "w"}, {"y"}, "/layer1/Conv");
    b.output("y");
    auto [kind, message] = error_of([&] { b.infer(1); });
    CHECK(kind == ErrorKind::invalid_model);
    CHECK(message == "node '/layer1/Conv' (Conv): input has 64 channels but the weight expects 128 x group 1 "
                     "(input [1, 64, 56, 56], weight [64, 128, 3, 3])");
  }
  SUBCASE("bias mismatch") {
    OneOp t(17, "Conv", {1, 3, 8, 8}, {"w", "bias"});
    t.b.weight("w", {4, 3, 3, 3});
    t.b.weight("bias", {5});
    CHECK(t.error() == "node 'n' (Conv): bias has shape [5] but the weight [4, 3, 3, 3] has 4 output channels");
  }
  SUBCASE("kernel larger than input") {
    OneOp t(17, "Conv", {1, 3, 2, 2}, {"w"});
    t.b.weight("w", {4, 3, 3, 3});
    CHECK(t.error().find("the window (3) is larger than the padded input (2)") != std::string::npos);
  }
}

TEST_CASE("MaxPool, AveragePool, GlobalAveragePool") {
  SUBCASE("MaxPool with Indices") {
    OneOp t(17, "MaxPool", {1, 64, 112, 112}, {}, {"y", "idx"});
    attr_ints(*t.n, "kernel_shape", {3, 3});
    attr_ints(*t.n, "pads", {1, 1, 1, 1});
    attr_ints(*t.n, "strides", {2, 2});
    model::Model m = t.b.infer(4);
    CHECK(shape_of(m, "y") == Shape{4, 64, 56, 56});
    CHECK(shape_of(m, "idx") == Shape{4, 64, 56, 56});
    CHECK(m.values[m.find("idx")].dtype == DType::i64);
  }
  SUBCASE("ceil_mode rounds up, but not into a window starting in the padding") {
    OneOp t(17, "MaxPool", {1, 1, 6, 5});
    attr_ints(*t.n, "kernel_shape", {2, 2});
    attr_ints(*t.n, "strides", {2, 2});
    attr_i(*t.n, "ceil_mode", 1);
    CHECK(t.y(1) == Shape{1, 1, 3, 3});  // 6 -> 3 (exact), 5 -> ceil(1.5)+1 = 3
    OneOp p(17, "MaxPool", {1, 1, 5, 5});
    attr_ints(*p.n, "kernel_shape", {3, 3});
    attr_ints(*p.n, "strides", {2, 2});
    attr_ints(*p.n, "pads", {1, 1, 1, 1});
    attr_i(*p.n, "ceil_mode", 1);
    CHECK(p.y(1) == Shape{1, 1, 3, 3});  // (7-3)/2+1 = 3 exactly
    OneOp q(17, "MaxPool", {1, 1, 6, 6});
    attr_ints(*q.n, "kernel_shape", {2, 2});
    attr_ints(*q.n, "strides", {2, 2});
    attr_ints(*q.n, "pads", {1, 1, 1, 1});
    attr_i(*q.n, "ceil_mode", 1);
    CHECK(q.y(1) == Shape{1, 1, 4, 4});  // floor (8-2)/2+1 = 4; no extra window
    OneOp r(17, "MaxPool", {1, 1, 7, 7});
    attr_ints(*r.n, "kernel_shape", {2, 2});
    attr_ints(*r.n, "strides", {2, 2});
    attr_ints(*r.n, "pads", {0, 0, 1, 1});
    attr_i(*r.n, "ceil_mode", 1);
    // floor (8-2)/2+1 = 4; no remainder, so no ceil
    CHECK(r.y(1) == Shape{1, 1, 4, 4});
    OneOp s(17, "MaxPool", {1, 1, 4, 4});
    attr_ints(*s.n, "kernel_shape", {1, 1});
    attr_ints(*s.n, "strides", {3, 3});
    attr_ints(*s.n, "pads", {0, 0, 1, 1});
    attr_i(*s.n, "ceil_mode", 1);
    // padded 5: floor (5-1)/3+1 = 2, ceil 3; the third window starts at 6 >= 4: dropped
    CHECK(s.y(1) == Shape{1, 1, 2, 2});
  }
  SUBCASE("AveragePool") {
    OneOp t(17, "AveragePool", {2, 8, 17, 17});
    attr_ints(*t.n, "kernel_shape", {3, 3});
    attr_ints(*t.n, "strides", {2, 2});
    CHECK(t.y() == Shape{2, 8, 8, 8});
  }
  SUBCASE("GlobalAveragePool") {
    OneOp t(17, "GlobalAveragePool", {-1, 512, 7, 7});
    CHECK(t.y(3) == Shape{3, 512, 1, 1});
  }
  SUBCASE("kernel_shape of the wrong rank") {
    OneOp t(17, "MaxPool", {1, 1, 6, 6});
    attr_ints(*t.n, "kernel_shape", {2});
    CHECK(t.error().find("kernel_shape [2] needs one entry per spatial axis") != std::string::npos);
  }
}

TEST_CASE("BatchNormalization with 1, 3 and 5 outputs") {
  auto bn = [](int64_t opset, const std::vector<std::string>& outputs) {
    auto t = std::make_unique<OneOp>(opset, "BatchNormalization", std::vector<int64_t>{-1, 16, 5, 5},
                                     std::vector<std::string>{"s", "b", "m", "v"}, outputs);
    for (const char* p : {"s", "b", "m", "v"}) t->b.weight(p, {16});
    return t;
  };
  model::Model one = bn(15, {"y"})->b.infer(2);
  CHECK(shape_of(one, "y") == Shape{2, 16, 5, 5});
  auto training = bn(15, {"y", "rm", "rv"});
  attr_i(*training->n, "training_mode", 1);
  model::Model three = training->b.infer(2);
  CHECK(shape_of(three, "rm") == Shape{16});
  CHECK(shape_of(three, "rv") == Shape{16});
  model::Model five = bn(9, {"y", "m1", "v1", "sm", "sv"})->b.infer(2);
  CHECK(shape_of(five, "sv") == Shape{16});
  CHECK(bn(15, {"y", "a", "b2", "c", "d"})->error().find("has 5 outputs; opset 15 allows at most 3") !=
        std::string::npos);
  auto wrong = std::make_unique<OneOp>(15, "BatchNormalization", std::vector<int64_t>{1, 16, 5, 5},
                                       std::vector<std::string>{"s", "b", "m", "v"});
  for (const char* p : {"s", "b", "m"}) wrong->b.weight(p, {16});
  wrong->b.weight("v", {8});
  CHECK(wrong->error() == "node 'n' (BatchNormalization): var has shape [8] but the input [2, 16, 5, 5] has 16 channels");
}

TEST_CASE("ReduceMean: axes attribute before opset 18, input from 18") {
  OneOp old(13, "ReduceMean", {2, 3, 4, 5});
  attr_ints(*old.n, "axes", {-1, -2});
  CHECK(old.y() == Shape{2, 3, 1, 1});
  OneOp dropped(13, "ReduceMean", {2, 3, 4, 5});
  attr_ints(*dropped.n, "axes", {1});
  attr_i(*dropped.n, "keepdims", 0);
  CHECK(dropped.y() == Shape{2, 4, 5});
  OneOp all(13, "ReduceMean", {2, 3, 4, 5});
  CHECK(all.y() == Shape{1, 1, 1, 1});
  OneOp v18(18, "ReduceMean", {2, 3, 4, 5}, {"axes"});
  v18.b.ints("axes", {2, 3});
  attr_i(*v18.n, "keepdims", 0);
  CHECK(v18.y() == Shape{2, 3});
  OneOp noop(18, "ReduceMean", {2, 3, 4, 5});
  attr_i(*noop.n, "noop_with_empty_axes", 1);
  CHECK(noop.y() == Shape{2, 3, 4, 5});
  OneOp bad(13, "ReduceMean", {2, 3});
  attr_ints(*bad.n, "axes", {2});
  CHECK(bad.error() == "node 'n' (ReduceMean): axis 2 is out of range for rank 2");
}

TEST_CASE("Gemm and MatMul") {
  OneOp gemm(17, "Gemm", {-1, 512}, {"w", "c"});
  gemm.b.weight("w", {1000, 512});
  gemm.b.weight("c", {1000});
  attr_i(*gemm.n, "transB", 1);
  CHECK(gemm.y(32) == Shape{32, 1000});
  OneOp ta(17, "Gemm", {7, 3}, {"w"});
  ta.b.weight("w", {7, 5});
  attr_i(*ta.n, "transA", 1);
  CHECK(ta.y(7) == Shape{3, 5});  // x is [7, 3] with batch 7
  OneOp bad(17, "Gemm", {-1, 512}, {"w"});
  bad.b.weight("w", {1000, 512});
  CHECK(bad.error() == "node 'n' (Gemm): A [2, 512] and B [1000, 512] disagree on the inner dimension: 512 vs 1000");

  OneOp mm(17, "MatMul", {-1, 1, 4, 5}, {"w"});
  mm.b.weight("w", {3, 5, 6});
  CHECK(mm.y(2) == Shape{2, 3, 4, 6});
  OneOp vec(17, "MatMul", {-1, 5}, {"w"});
  vec.b.weight("w", {5});
  CHECK(vec.y(4) == Shape{4});
  OneOp lvec(17, "MatMul", {5}, {"w"});
  lvec.b.weight("w", {2, 5, 3});
  CHECK(lvec.y(5) == Shape{2, 3});
  OneOp mismatch(17, "MatMul", {2, 4, 5}, {"w"});
  mismatch.b.weight("w", {4, 6});
  CHECK(mismatch.error() == "node 'n' (MatMul): inner dimensions differ: [2, 4, 5] x [4, 6]");
}

TEST_CASE("Flatten, Reshape, Transpose") {
  OneOp flat(17, "Flatten", {-1, 512, 1, 1});
  CHECK(flat.y(3) == Shape{3, 512});
  OneOp flat0(17, "Flatten", {2, 3, 4});
  attr_i(*flat0.n, "axis", 0);
  CHECK(flat0.y() == Shape{1, 24});
  OneOp flatneg(17, "Flatten", {2, 3, 4});
  attr_i(*flatneg.n, "axis", -1);
  CHECK(flatneg.y() == Shape{6, 4});

  OneOp r(17, "Reshape", {-1, 3, 4, 5}, {"s"});
  r.b.ints("s", {0, -1, 5});
  CHECK(r.y(2) == Shape{2, 12, 5});
  OneOp zero(17, "Reshape", {-1, 0, 3}, {"s"});
  zero.b.ints("s", {0, 3, 5});
  attr_i(*zero.n, "allowzero", 1);  // 0 is a size, not a copy of the input's dim
  CHECK(zero.y(2) == Shape{0, 3, 5});
  OneOp keep(14, "Reshape", {2, 3}, {"s"});
  keep.b.ints("s", {0, 3});  // allowzero absent: 0 copies dim 0
  CHECK(keep.y() == Shape{2, 3});
  OneOp mismatch(17, "Reshape", {-1, 3, 4}, {"s"});
  mismatch.b.ints("s", {5, 5});
  CHECK(mismatch.error() == "node 'n' (Reshape): cannot reshape [2, 3, 4] (24 elements) into [5, 5] (25 elements)");
  OneOp noinfer(17, "Reshape", {-1, 3, 4}, {"s"});
  noinfer.b.ints("s", {5, -1});
  CHECK(noinfer.error() == "node 'n' (Reshape): cannot reshape [2, 3, 4] (24 elements) into [5, -1]");
  OneOp unknown(17, "Reshape", {2, 3}, {"s"});
  unknown.b.input("s", {2}, TensorProto::INT64);
  CHECK(unknown.error().find("its target shape (input 's') is not known ahead of time") != std::string::npos);

  OneOp tr(17, "Transpose", {2, 3, 4, 5});
  attr_ints(*tr.n, "perm", {0, 2, 3, 1});
  CHECK(tr.y() == Shape{2, 4, 5, 3});
  OneOp rev(17, "Transpose", {2, 3, 4});
  CHECK(rev.y() == Shape{4, 3, 2});
  OneOp badperm(17, "Transpose", {2, 3, 4});
  attr_ints(*badperm.n, "perm", {0, 0, 1});
  CHECK(badperm.error().find("perm [0, 0, 1] is not a permutation") != std::string::npos);
}

TEST_CASE("Concat and Split") {
  OneOp cat(17, "Concat", {-1, 16, 8, 8}, {"w"});
  cat.b.weight("w", {2, 48, 8, 8});
  attr_i(*cat.n, "axis", 1);
  CHECK(cat.y() == Shape{2, 64, 8, 8});
  OneOp bad(17, "Concat", {-1, 16, 8, 8}, {"w"});
  bad.b.weight("w", {2, 48, 4, 8});
  attr_i(*bad.n, "axis", 1);
  CHECK(bad.error() == "node 'n' (Concat): input 1 has shape [2, 48, 4, 8], which does not match [2, 16, 8, 8] "
                       "except along axis 1");

  OneOp even(11, "Split", {2, 6, 4}, {}, {"a", "b", "c"});
  attr_i(*even.n, "axis", 1);
  model::Model m = even.b.infer(2);
  CHECK(shape_of(m, "c") == Shape{2, 2, 4});
  OneOp attr(11, "Split", {2, 6, 4}, {}, {"a", "b"});
  attr_ints(*attr.n, "split", {1, 3});
  attr_i(*attr.n, "axis", 2);
  m = attr.b.infer(2);
  CHECK(shape_of(m, "a") == Shape{2, 6, 1});
  CHECK(shape_of(m, "b") == Shape{2, 6, 3});
  OneOp input(13, "Split", {2, 6, 4}, {"sizes"}, {"a", "b"});
  input.b.ints("sizes", {4, 2});
  attr_i(*input.n, "axis", -2);
  m = input.b.infer(2);
  CHECK(shape_of(m, "a") == Shape{2, 4, 4});
  CHECK(shape_of(m, "b") == Shape{2, 2, 4});
  OneOp chunks(18, "Split", {2, 7}, {}, {"a", "b", "c"});
  attr_i(*chunks.n, "axis", 1);
  attr_i(*chunks.n, "num_outputs", 3);
  m = chunks.b.infer(2);
  CHECK(shape_of(m, "a") == Shape{2, 3});
  CHECK(shape_of(m, "b") == Shape{2, 3});
  CHECK(shape_of(m, "c") == Shape{2, 1});
  OneOp sum(13, "Split", {2, 6}, {"sizes"}, {"a", "b"});
  sum.b.ints("sizes", {4, 3});
  attr_i(*sum.n, "axis", 1);
  CHECK(sum.error() == "node 'n' (Split): split sizes [4, 3] sum to 7 but axis 1 of [2, 6] is 6");
}

TEST_CASE("Slice: attributes before opset 10, inputs after") {
  OneOp old(9, "Slice", {-1, 10, 10});
  attr_ints(*old.n, "starts", {1, -3});
  attr_ints(*old.n, "ends", {1000, -1});
  attr_ints(*old.n, "axes", {1, 2});
  CHECK(old.y() == Shape{2, 9, 2});
  OneOp inputs(13, "Slice", {-1, 10, 10}, {"st", "en", "ax", "sp"});
  inputs.b.ints("st", {-1, 0});
  inputs.b.ints("en", {INT64_MIN, 10});
  inputs.b.ints("ax", {1, -1});
  inputs.b.ints("sp", {-2, 3});
  CHECK(inputs.y() == Shape{2, 5, 4});  // 9,7,5,3,1 and 0,3,6,9
  OneOp noaxes(13, "Slice", {4, 4}, {"st", "en"});
  noaxes.b.ints("st", {1});
  noaxes.b.ints("en", {3});
  CHECK(noaxes.y(4) == Shape{2, 4});
  OneOp empty(13, "Slice", {4, 4}, {"st", "en"});
  empty.b.ints("st", {3});
  empty.b.ints("en", {1});
  CHECK(empty.y(4) == Shape{0, 4});
}

TEST_CASE("Squeeze and Unsqueeze: axes attribute before opset 13, input from 13") {
  OneOp sq11(11, "Squeeze", {2, 1, 3, 1});
  attr_ints(*sq11.n, "axes", {-1});
  CHECK(sq11.y() == Shape{2, 1, 3});
  OneOp sqall(13, "Squeeze", {2, 1, 3, 1});
  CHECK(sqall.y() == Shape{2, 3});
  OneOp sq13(13, "Squeeze", {2, 1, 3, 1}, {"axes"});
  sq13.b.ints("axes", {1});
  CHECK(sq13.y() == Shape{2, 3, 1});
  OneOp sqbad(13, "Squeeze", {2, 1, 3, 1}, {"axes"});
  sqbad.b.ints("axes", {2});
  CHECK(sqbad.error() == "node 'n' (Squeeze): cannot squeeze axis 2 of size 3 (input [2, 1, 3, 1])");

  OneOp un11(11, "Unsqueeze", {2, 3});
  attr_ints(*un11.n, "axes", {0, 3});
  CHECK(un11.y() == Shape{1, 2, 3, 1});
  OneOp un13(13, "Unsqueeze", {2, 3}, {"axes"});
  un13.b.ints("axes", {-1, 1});
  CHECK(un13.y() == Shape{2, 1, 3, 1});
}

TEST_CASE("Pad: pads attribute before opset 11, inputs after (axes from 18)") {
  OneOp old(2, "Pad", {1, 3, 4, 4});
  attr_ints(*old.n, "pads", {0, 0, 1, 2, 0, 0, 3, 4});
  CHECK(old.y(1) == Shape{1, 3, 8, 10});
  OneOp v13(13, "Pad", {1, 3, 4, 4}, {"pads"});
  v13.b.ints("pads", {0, 0, 1, 1, 0, 0, 1, -1});
  CHECK(v13.y(1) == Shape{1, 3, 6, 4});
  OneOp v18(18, "Pad", {1, 3, 4, 4}, {"pads", "", "axes"});
  v18.b.ints("pads", {2, 0, 2, 5});
  v18.b.ints("axes", {-2, -1});
  CHECK(v18.y(1) == Shape{1, 3, 8, 9});
  OneOp wrong(13, "Pad", {1, 3, 4, 4}, {"pads"});
  wrong.b.ints("pads", {1, 1});
  CHECK(wrong.error() == "node 'n' (Pad): pads [1, 1] has 2 values; input [2, 3, 4, 4] needs 8");
}

TEST_CASE("Clip, Dropout, Softmax, LRN and other elementwise ops") {
  OneOp clip6(6, "Clip", {-1, 8});
  attr_f(*clip6.n, "min", 0.0f);
  attr_f(*clip6.n, "max", 6.0f);
  CHECK(clip6.y(5) == Shape{5, 8});
  OneOp clip13(13, "Clip", {-1, 8}, {"lo", "hi"});
  clip13.b.weight("lo", {});
  clip13.b.weight("hi", {});
  CHECK(clip13.y(5) == Shape{5, 8});
  OneOp clipmax(13, "Clip", {-1, 8}, {"", "hi"});
  clipmax.b.weight("hi", {});
  CHECK(clipmax.y(5) == Shape{5, 8});

  OneOp drop(12, "Dropout", {-1, 10}, {"ratio", "train"}, {"y", "mask"});
  drop.b.weight("ratio", {});
  drop.b.weight("train", {}, TensorProto::BOOL);
  model::Model m = drop.b.infer(3);
  CHECK(shape_of(m, "y") == Shape{3, 10});
  CHECK(shape_of(m, "mask") == Shape{3, 10});
  CHECK(m.values[m.find("mask")].dtype == DType::boolean);
  OneOp drop7(7, "Dropout", {-1, 10});
  attr_f(*drop7.n, "ratio", 0.5f);
  CHECK(drop7.y(3) == Shape{3, 10});

  OneOp sm(13, "Softmax", {2, 5});
  CHECK(sm.y() == Shape{2, 5});
  OneOp smbad(11, "Softmax", {5});  // default axis 1 before opset 13
  CHECK(smbad.error() == "node 'n' (Softmax): axis 1 is out of range for rank 1");
  OneOp lrn(17, "LRN", {2, 96, 55, 55});
  attr_i(*lrn.n, "size", 5);
  CHECK(lrn.y() == Shape{2, 96, 55, 55});

  for (const char* op : {"Relu", "Sigmoid", "HardSigmoid", "HardSwish", "Sqrt", "Erf", "Neg", "Identity"}) {
    OneOp t(17, op, {-1, 4, 2});
    CHECK_MESSAGE((t.y(6) == Shape{6, 4, 2}), op);
  }
  for (const char* op : {"Add", "Sub", "Mul", "Div", "Pow"}) {
    OneOp t(17, op, {-1, 4, 1}, {"w"});
    t.b.weight("w", {4, 5});
    CHECK_MESSAGE((t.y(6) == Shape{6, 4, 5}), op);
  }
  OneOp nb(17, "Add", {-1, 4}, {"w"});
  nb.b.weight("w", {3});
  CHECK(nb.error() == "node 'n' (Add): shapes [2, 4] and [3] do not broadcast");
  OneOp cast(17, "Cast", {-1, 4});
  attr_i(*cast.n, "to", TensorProto::FLOAT16);
  m = cast.b.infer(2);
  CHECK(m.values[m.find("y")].dtype == DType::f16);
}

TEST_CASE("Gather, Expand, Equal, Where, Not, Range, ConstantOfShape") {
  OneOp g(17, "Gather", {-1, 5, 6}, {"i"});
  g.b.ints("i", {0, 1, 2, 3}, {2, 2});
  attr_i(*g.n, "axis", 1);
  CHECK(g.y() == Shape{2, 2, 2, 6});
  OneOp scalar(17, "Gather", {-1, 5, 6}, {"i"});
  scalar.b.ints("i", {4}, {});
  attr_i(*scalar.n, "axis", -1);
  CHECK(scalar.y() == Shape{2, 5});

  OneOp ex(17, "Expand", {-1, 1, 4}, {"s"});
  ex.b.ints("s", {3, 1});
  CHECK(ex.y(2) == Shape{2, 3, 4});

  OneOp eq(17, "Equal", {-1, 1}, {"w"});
  eq.b.weight("w", {5});
  model::Model m = eq.b.infer(2);
  CHECK(shape_of(m, "y") == Shape{2, 5});
  CHECK(m.values[m.find("y")].dtype == DType::boolean);

  OnnxBuilder b;
  b.input("c", {-1, 1}, TensorProto::BOOL);
  b.weight("x", {4});
  b.weight("z", {1});
  b.node("Where", {"c", "x", "z"}, {"y"});
  b.node("Not", {"c"}, {"nc"});
  b.output("y");
  m = b.infer(3);
  CHECK(shape_of(m, "y") == Shape{3, 4});
  CHECK(m.values[m.find("y")].dtype == DType::f32);
  CHECK(shape_of(m, "nc") == Shape{3, 1});

  OnnxBuilder r;
  r.input("x", {-1});
  r.ints("start", {10}, {});
  r.ints("limit", {-3}, {});
  r.ints("delta", {-4}, {});
  r.node("Range", {"start", "limit", "delta"}, {"y"});
  r.node("ConstantOfShape", {"y_shape"}, {"zeros"});
  r.ints("y_shape", {2, 3});
  r.output("y");
  m = r.infer(1);
  CHECK(shape_of(m, "y") == Shape{4});
  CHECK(m.values[m.find("y")].value->ints == std::vector<int64_t>{10, 6, 2, -2});
  CHECK(shape_of(m, "zeros") == Shape{2, 3});
  CHECK(m.values[m.find("zeros")].value->floats == std::vector<double>(6, 0.0));

  OnnxBuilder wide;  // start + i * delta fits in int64 although i * delta does not
  wide.input("x", {-1});
  wide.ints("start", {INT64_MIN}, {});
  wide.ints("limit", {INT64_MAX}, {});
  wide.ints("delta", {int64_t{1} << 62}, {});
  wide.node("Range", {"start", "limit", "delta"}, {"y"});
  m = wide.infer(1);
  CHECK(m.values[m.find("y")].value->ints ==
        std::vector<int64_t>{INT64_MIN, INT64_MIN / 2, 0, int64_t{1} << 62});
}

TEST_CASE("batch override: symbolic, fixed and missing dim 0") {
  OnnxBuilder b;
  b.input("sym", {-1, 3});
  b.input("fixed", {1, 3});
  b.input("labels", {7}, TensorProto::INT64);
  onnx::ValueInfoProto* missing = b.graph()->add_input();
  missing->set_name("missing");
  auto* tt = missing->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(TensorProto::FLOAT);
  tt->mutable_shape()->add_dim();  // neither value nor param
  tt->mutable_shape()->add_dim()->set_dim_value(3);
  b.node("Add", {"sym", "fixed"}, {"a"});
  b.node("Add", {"a", "missing"}, {"y"});
  b.output("y");
  model::Model m = b.infer(16);
  CHECK(shape_of(m, "sym") == Shape{16, 3});
  CHECK(shape_of(m, "fixed") == Shape{16, 3});
  CHECK(shape_of(m, "missing") == Shape{16, 3});
  CHECK(shape_of(m, "labels") == Shape{16});
  CHECK(shape_of(m, "y") == Shape{16, 3});
  model::infer_shapes(m, 4);  // inferring again with another batch starts afresh
  CHECK(shape_of(m, "y") == Shape{4, 3});

  auto [kind, message] = error_of([&] { model::infer_shapes(m, 0); });
  CHECK(kind == ErrorKind::usage);
  CHECK(message == "the batch size must be at least 1, got 0");
}

TEST_CASE("graph inputs need declared shapes with fixed non-batch dims") {
  OnnxBuilder none;
  none.input("x", {}, TensorProto::FLOAT, false);
  none.node("Relu", {"x"}, {"y"});
  auto [kind, message] = error_of([&] { none.infer(2); });
  CHECK(kind == ErrorKind::invalid_model);
  CHECK(message.find("graph input 'x' has no declared shape; AutoVM needs one") == 0);

  OnnxBuilder scalar;  // a declared rank-0 input is fine
  scalar.input("x", {});
  scalar.node("Relu", {"x"}, {"y"});
  CHECK(shape_of(scalar.infer(2), "y") == Shape{});

  OnnxBuilder sym;
  sym.input("x", {-1, 3, -1, -1});
  sym.node("Relu", {"x"}, {"y"});
  auto [kind2, message2] = error_of([&] { sym.infer(2); });
  CHECK(kind2 == ErrorKind::invalid_model);
  CHECK(message2 == "graph input 'x' has shape [?, 3, ?, ?]: dim 2 has no fixed size; only the batch dim (0) "
                    "may be symbolic, so re-export with fixed sizes");
}

TEST_CASE("dynamo-style shape chain folds: Shape -> Gather -> Unsqueeze -> Concat -> Reshape") {
  OnnxBuilder b(18, 10);
  b.input("x", {-1, 8, 4, 4});
  b.node("Shape", {"x"}, {"shape"}, "node_Shape_0");
  b.ints("zero", {0}, {});
  b.node("Gather", {"shape", "zero"}, {"batch"}, "node_Gather_1");
  b.ints("axes0", {0});
  b.node("Unsqueeze", {"batch", "axes0"}, {"batch1"}, "node_Unsqueeze_2");
  attr_int_tensor(b.node("Constant", {}, {"minus1"}, "node_Constant_3"), "value", {-1}, {1});
  attr_i(b.node("Concat", {"batch1", "minus1"}, {"target"}, "node_Concat_4"), "axis", 0);
  b.node("Reshape", {"x", "target"}, {"flat"}, "node_Reshape_5");
  b.weight("w", {10, 128});
  attr_i(b.node("Gemm", {"flat", "w"}, {"y"}, "node_Gemm_6"), "transB", 1);
  b.output("y");
  model::Model m = b.infer(32);
  CHECK(m.ir_version == 10);
  CHECK(shape_of(m, "flat") == Shape{32, 128});
  CHECK(shape_of(m, "y") == Shape{32, 10});
  CHECK(m.values[m.find("shape")].value->ints == std::vector<int64_t>{32, 8, 4, 4});
  CHECK(m.values[m.find("batch")].value->ints == std::vector<int64_t>{32});
  CHECK(m.values[m.find("batch")].value->shape == Shape{});
  CHECK(m.values[m.find("target")].value->ints == std::vector<int64_t>{32, -1});
  for (const char* n : {"node_Shape_0", "node_Gather_1", "node_Unsqueeze_2", "node_Constant_3", "node_Concat_4"}) {
    CHECK_MESSAGE(node_named(m, n).folded, n);
  }
  CHECK_FALSE(node_named(m, "node_Reshape_5").folded);
  CHECK_FALSE(node_named(m, "node_Gemm_6").folded);
}

TEST_CASE("TorchScript-style view(x.size(0), -1) at opset 11 folds too") {
  OnnxBuilder b(11);
  b.input("x", {-1, 2, 3});
  b.node("Shape", {"x"}, {"s"});
  attr_int_tensor(b.node("Constant", {}, {"idx"}), "value", {0}, {});
  attr_i(b.node("Gather", {"s", "idx"}, {"n"}), "axis", 0);
  attr_ints(b.node("Unsqueeze", {"n"}, {"n1"}), "axes", {0});
  attr_int_tensor(b.node("Constant", {}, {"m1"}), "value", {-1}, {1});
  attr_i(b.node("Concat", {"n1", "m1"}, {"t"}), "axis", 0);
  b.node("Reshape", {"x", "t"}, {"y"}, "view");
  b.output("y");
  model::Model m = b.infer(5);
  CHECK(shape_of(m, "y") == Shape{5, 6});
  int folded = 0;
  for (const auto& n : m.nodes) folded += n.folded;
  CHECK(folded == 6);
}

TEST_CASE("static evaluation: arithmetic, Cast, Slice, Where, Expand, ReduceProd") {
  OnnxBuilder b(17);
  b.input("x", {-1, 6, 4});
  b.node("Shape", {"x"}, {"s"});
  b.ints("st", {1});
  b.ints("en", {3});
  b.node("Slice", {"s", "st", "en"}, {"hw"});                      // [6, 4]
  b.node("ReduceProd", {"hw"}, {"area"});                          // [24] (keepdims)
  b.ints("two", {2}, {});
  b.node("Div", {"area", "two"}, {"half"});                        // [12]
  b.node("Mul", {"half", "two"}, {"again"});                       // [24]
  b.node("Sub", {"again", "two"}, {"less"});                       // [22]
  attr_i(b.node("Cast", {"less"}, {"f"}), "to", TensorProto::FLOAT);
  b.node("Sqrt", {"f"}, {"root"});
  b.node("Equal", {"hw", "two"}, {"is2"});                          // [0, 0]
  b.node("Where", {"is2", "two", "hw"}, {"sel"});                   // [6, 4]
  b.node("Expand", {"two", "hw"}, {"grid"});                        // 6x4 of 2
  b.node("Neg", {"two"}, {"neg"});
  b.node("Pow", {"two", "two"}, {"four"});
  b.node("Add", {"four", "neg"}, {"sum"});
  b.node("Identity", {"sel"}, {"y"});
  b.output("y");
  model::Model m = b.infer(3);
  auto ints = [&](const char* name) {
    REQUIRE_MESSAGE(m.values[m.find(name)].value.has_value(), name);
    return m.values[m.find(name)].value->ints;
  };
  CHECK(ints("hw") == std::vector<int64_t>{6, 4});
  CHECK(ints("area") == std::vector<int64_t>{24});
  CHECK(shape_of(m, "area") == Shape{1});
  CHECK(ints("half") == std::vector<int64_t>{12});
  CHECK(ints("again") == std::vector<int64_t>{24});
  CHECK(ints("less") == std::vector<int64_t>{22});
  CHECK(m.values[m.find("root")].value->floats[0] == doctest::Approx(std::sqrt(22.0)));
  CHECK(ints("is2") == std::vector<int64_t>{0, 0});
  CHECK(ints("sel") == std::vector<int64_t>{6, 4});
  CHECK(ints("grid") == std::vector<int64_t>(24, 2));
  CHECK(shape_of(m, "grid") == Shape{6, 4});
  CHECK(ints("neg") == std::vector<int64_t>{-2});
  CHECK(ints("sum") == std::vector<int64_t>{2});
  for (const auto& n : m.nodes) CHECK_MESSAGE(n.folded, n.name);
}

TEST_CASE("a node whose output is omitted is not evaluated (found by fuzzing)") {
  OnnxBuilder b;
  b.input("x", {-1, 3});
  b.ints("v", {1, 2, 3});
  b.node("Add", {"v", "v"}, {""}, "no_output");
  b.node("Relu", {"x"}, {"y"});
  b.output("y");
  model::Model m = b.infer(2);
  CHECK_FALSE(node_named(m, "no_output").folded);
  CHECK(shape_of(m, "y") == Shape{2, 3});
}

TEST_CASE("Constant nodes are always folded, even when too large to keep values") {
  OnnxBuilder b;
  b.input("x", {-1, 300, 300});
  auto& big = b.node("Constant", {}, {"k"}, "big");
  attr_float_tensor(big, "value", std::vector<float>(90000, 1.0f), {300, 300});
  b.node("Add", {"x", "k"}, {"y"});
  b.output("y");
  model::Model m = b.infer(2);
  CHECK(shape_of(m, "k") == Shape{300, 300});
  CHECK(node_named(m, "big").folded);
  CHECK_FALSE(m.values[m.find("k")].value.has_value());
  CHECK(shape_of(m, "y") == Shape{2, 300, 300});
  CHECK_FALSE(m.nodes.back().folded);
}

TEST_CASE("Shape with start and end (opset 15)") {
  OneOp t(15, "Shape", {-1, 3, 5, 7});
  attr_i(*t.n, "start", 1);
  attr_i(*t.n, "end", -1);
  model::Model m = t.b.infer(2);
  CHECK(shape_of(m, "y") == Shape{2});
  CHECK(m.values[m.find("y")].value->ints == std::vector<int64_t>{3, 5});
}

TEST_CASE("unsupported ops and extra outputs are errors in inference") {
  OneOp t(17, "Acos", {2, 3});
  auto [kind, message] = error_of([&] { t.b.infer(2); });
  CHECK(kind == ErrorKind::unsupported);
  CHECK(message == "node 'n' (Acos): AutoVM has no shape rule for this op");
  OneOp extra(17, "Relu", {2, 3}, {}, {"y", "z"});
  CHECK(extra.error() == "node 'n' (Relu): has 2 outputs, more than this op produces");
}

// CPU time of load + infer. The first run in a process also pays for page faults on fresh
// memory, which cost ~20 us each on the development VMs, so the check uses a second run.
double load_and_infer_seconds(const std::string& bytes, const Shape& expected_last) {
  timespec t0, t1;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t0);
  model::Model m = model::load_model_from_bytes(bytes.data(), bytes.size(), "chain.onnx", ".");
  model::infer_shapes(m, 4);
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t1);
  CHECK(m.values[m.outputs[0]].shape == expected_last);
  return double(t1.tv_sec - t0.tv_sec) + 1e-9 * double(t1.tv_nsec - t0.tv_nsec);
}

std::string conv_chain(int n) {
  OnnxBuilder b;
  b.input("x", {-1, 8, 16, 16});
  b.weight("w", {8, 8, 3, 3});
  std::string prev = "x";
  for (int i = 0; i < n; ++i) {
    std::string out = "/layers/layers." + std::to_string(i) + "/conv/Conv_output_0";
    auto& conv = b.node("Conv", {prev, "w"}, {out}, "/layers/layers." + std::to_string(i) + "/conv/Conv");
    attr_ints(conv, "pads", {1, 1, 1, 1});
    attr_ints(conv, "kernel_shape", {3, 3});
    prev = out;
  }
  b.output(prev);
  return b.bytes();
}

TEST_CASE("performance: 1,000 and 100,000-conv chains load and infer quickly") {
  const std::string small = conv_chain(1000), large = conv_chain(100000);
  double small_cold = load_and_infer_seconds(small, {4, 8, 16, 16});
  double small_warm = load_and_infer_seconds(small, {4, 8, 16, 16});
  double large_cold = load_and_infer_seconds(large, {4, 8, 16, 16});
  double large_warm = load_and_infer_seconds(large, {4, 8, 16, 16});
  MESSAGE("CPU seconds, load + infer: 1,000 convs " << small_cold << " cold, " << small_warm << " warm; 100,000 convs "
          << large_cold << " cold, " << large_warm << " warm");
  // Measured on an idle machine: ~2 ms and ~0.35 s. The bounds leave room for loaded CI machines
  // and meson's MALLOC_PERTURB_, and still catch anything quadratic.
  CHECK(small_warm < 0.02);
  CHECK(large_warm < 2.0);
}

TEST_CASE("Mod and ScatterND: shapes and static evaluation (swin's shifted-window mask)") {
  OnnxBuilder b(17);
  b.input("x", {-1, 4});
  b.ints("a", {7, -7, 7, -7});
  b.ints("m", {3, 3, -3, -3});
  b.node("Mod", {"a", "m"}, {"py"});                              // the divisor's sign
  attr_i(b.node("Mod", {"a", "m"}, {"c"}), "fmod", 1);             // the dividend's sign
  b.ints("zeros", std::vector<int64_t>(9, 0), {3, 3});
  b.ints("rows", {0, 2}, {2, 1});
  b.ints("ups", {1, 2, 3, 4, 5, 6}, {2, 3});
  b.node("ScatterND", {"zeros", "rows", "ups"}, {"s"});           // rows 0 and 2 replaced
  b.ints("centre", {1, 1}, {1, 2});
  b.ints("nine", {9}, {1});
  attr_s(b.node("ScatterND", {"s", "centre", "nine"}, {"s2"}), "reduction", "add");
  b.weight("u", {1, 4});
  b.ints("first", {0}, {1, 1});
  b.node("ScatterND", {"x", "first", "u"}, {"y"});                // runs: [N, 4]
  attr_i(b.node("Mod", {"x", "x"}, {"fm"}), "fmod", 1);
  b.output("y");
  b.output("fm");
  model::Model m = b.infer(2);
  auto ints = [&](const char* name) {
    REQUIRE_MESSAGE(m.values[m.find(name)].value.has_value(), name);
    return m.values[m.find(name)].value->ints;
  };
  CHECK(ints("py") == std::vector<int64_t>{1, 2, -2, -1});
  CHECK(ints("c") == std::vector<int64_t>{1, -1, 1, -1});
  CHECK(ints("s") == std::vector<int64_t>{1, 2, 3, 0, 0, 0, 4, 5, 6});
  CHECK(ints("s2") == std::vector<int64_t>{1, 2, 3, 0, 9, 0, 4, 5, 6});
  CHECK(shape_of(m, "s2") == Shape{3, 3});
  CHECK(shape_of(m, "y") == Shape{2, 4});
  CHECK(shape_of(m, "fm") == Shape{2, 4});
  CHECK_FALSE(m.nodes[m.values[m.find("y")].producer].folded);

  SUBCASE("updates that do not match indices and data") {
    OneOp o(17, "ScatterND", {-1, 4}, {"first", "u3"});
    o.b.ints("first", {0}, {1, 1});
    o.b.weight("u3", {1, 3});
    CHECK(o.error().find("updates have shape [1, 3]; data [2, 4] and indices [1, 1] need [1, 4]") !=
          std::string::npos);
  }
  SUBCASE("floating-point Mod without fmod 1") {
    OneOp o(17, "Mod", {-1, 4}, {"x"});
    CHECK(o.error().find("floating-point Mod needs fmod=1") != std::string::npos);
  }
}

TEST_CASE("Einsum, ReduceL2 and Exp: shapes; equations AutoVM does not plan are refused") {
  OnnxBuilder b(17);
  b.input("x", {-1, 3, 4, 5});
  b.weight("v", {2, 3, 4, 6});
  b.weight("w", {5, 7});
  attr_s(b.node("Einsum", {"x", "x"}, {"scores"}), "equation", "B H I D, B H J D -> B H I J");
  attr_s(b.node("Einsum", {"scores", "v"}, {"mixed"}), "equation", "bhij,bhjd->bhid");
  attr_s(b.node("Einsum", {"x", "w"}, {"implicit"}), "equation", "bhid,de");  // -> behi (alphabetical)
  attr_ints(b.node("ReduceL2", {"x"}, {"norm"}), "axes", {-1});
  b.node("Exp", {"x"}, {"e"});
  for (const char* o : {"mixed", "implicit", "norm", "e"}) b.output(o);
  model::Model m = b.infer(2);
  CHECK(shape_of(m, "scores") == Shape{2, 3, 4, 4});
  CHECK(shape_of(m, "mixed") == Shape{2, 3, 4, 6});
  CHECK(shape_of(m, "implicit") == Shape{2, 7, 3, 4});
  CHECK(shape_of(m, "norm") == Shape{2, 3, 4, 1});
  CHECK(shape_of(m, "e") == Shape{2, 3, 4, 5});

  auto einsum_error = [](const std::string& equation, const std::vector<int64_t>& dims) {
    OneOp o(17, "Einsum", dims, {"x"});
    attr_s(*o.n, "equation", equation);
    return error_of([&] { o.b.infer(2); });
  };
  SUBCASE("an ellipsis") {
    auto [kind, message] = einsum_error("...ij,...jk->...ik", {-1, 4, 4});
    CHECK(kind == ErrorKind::unsupported);
    CHECK(message.find("node 'n' (Einsum): equation '...ij,...jk->...ik' uses an ellipsis") != std::string::npos);
  }
  SUBCASE("a diagonal") {
    auto [kind, message] = einsum_error("bii,bij->bj", {-1, 4, 4});
    CHECK(kind == ErrorKind::unsupported);
    CHECK(message.find("repeats label 'i' within one operand") != std::string::npos);
  }
  SUBCASE("three operands") {
    OneOp o(17, "Einsum", {-1, 4}, {"x", "x"});
    attr_s(*o.n, "equation", "bi,bi,bi->b");
    auto [kind, message] = error_of([&] { o.b.infer(2); });
    CHECK(kind == ErrorKind::unsupported);
    CHECK(message.find("has 3 operands; AutoVM plans Einsum of two") != std::string::npos);
  }
  SUBCASE("a label with two extents") {
    auto [kind, message] = einsum_error("bij,bji->bi", {-1, 4, 5});
    CHECK(kind == ErrorKind::invalid_model);
    CHECK(message.find("equation 'bij,bji->bi' gives label 'j' extents 5 and 4") != std::string::npos);
  }
  SUBCASE("an output label no operand has, a term of the wrong rank") {
    auto [kind, message] = einsum_error("bi,bi->bk", {-1, 4});
    CHECK(kind == ErrorKind::invalid_model);
    CHECK(message.find("has output label 'k', which no operand has") != std::string::npos);
    auto [kind2, message2] = einsum_error("bij,bij->bi", {-1, 4});
    CHECK(kind2 == ErrorKind::invalid_model);
    CHECK(message2.find("names 3 axes for operand 0, which has rank 2") != std::string::npos);
  }
}
