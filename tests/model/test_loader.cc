// The ONNX loader: conversion, validation, initializers, external data, errors, supported ops.
#include <stdlib.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>

#include "model/supported_ops.h"
#include "onnx_builder.h"
#include "util/sha256.h"

using namespace autovm;
using namespace autovm::test;
using model::ValueSource;

namespace {

// A fresh directory under /tmp, removed when the test ends.
struct TempDir {
  std::filesystem::path path;
  TempDir() {
    char tmpl[] = "/tmp/autovm_test_XXXXXX";
    REQUIRE(mkdtemp(tmpl) != nullptr);
    path = tmpl;
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  std::string write(const std::string& name, const std::string& bytes) const {
    std::ofstream(path / name, std::ios::binary) << bytes;
    return (path / name).string();
  }
};

OnnxBuilder small_model() {
  OnnxBuilder b;
  b.input("x", {-1, 3, 8, 8});
  b.weight("w", {4, 3, 3, 3});
  b.node("Conv", {"x", "w"}, {"c"}, "conv");
  b.node("Relu", {"c"}, {"y"});
  b.output("y");
  return b;
}

void set_external(TensorProto& t, const std::string& location, int64_t offset, int64_t length) {
  t.set_data_location(TensorProto::EXTERNAL);
  auto add = [&](const std::string& k, const std::string& v) {
    auto* e = t.add_external_data();
    e->set_key(k);
    e->set_value(v);
  };
  add("location", location);
  if (offset >= 0) add("offset", std::to_string(offset));
  if (length >= 0) add("length", std::to_string(length));
}

std::string le64(const std::vector<int64_t>& values) {
  std::string raw;
  for (int64_t v : values) {
    for (int b = 0; b < 8; ++b) raw += char(uint64_t(v) >> (8 * b) & 0xff);
  }
  return raw;
}

}  // namespace

TEST_CASE("loader: converts metadata, values and nodes") {
  OnnxBuilder b = small_model();
  std::string bytes = b.bytes();
  model::Model m = model::load_model_from_bytes(bytes.data(), bytes.size(), "m.onnx", ".");
  CHECK(m.path == "m.onnx");
  CHECK(m.ir_version == 8);
  CHECK(m.opset == 17);
  CHECK(m.producer == "test 1.0");
  CHECK(m.graph_name == "g");
  CHECK(m.file_bytes == int64_t(bytes.size()));
  CHECK(m.sha256 == sha256_hex(bytes.data(), bytes.size()));
  REQUIRE(m.inputs.size() == 1);
  CHECK(m.values[m.inputs[0]].name == "x");
  CHECK(m.values[m.inputs[0]].declared_shape == Shape{-1, 3, 8, 8});
  CHECK(m.values[m.inputs[0]].shape_declared);
  CHECK(m.values[m.inputs[0]].dtype == DType::f32);
  const auto& w = m.values[m.find("w")];
  CHECK(w.source == ValueSource::initializer);
  CHECK(w.shape == Shape{4, 3, 3, 3});
  CHECK(w.shape_known);
  CHECK_FALSE(w.has_data);
  CHECK_FALSE(w.value.has_value());
  REQUIRE(m.nodes.size() == 2);
  CHECK(m.nodes[0].name == "conv");
  CHECK(m.nodes[1].name == "Relu_1");
  CHECK(m.nodes[0].inputs == std::vector<int>{m.find("x"), m.find("w")});
  CHECK(m.values[m.find("c")].producer == 0);
  CHECK(m.values[m.find("y")].source == ValueSource::node_output);
  CHECK(m.outputs == std::vector<int>{m.find("y")});
  CHECK(m.value_index.size() == m.values.size());
}

TEST_CASE("loader: sorts nodes topologically, ties in file order") {
  OnnxBuilder b;
  b.input("x", {2, 3});
  b.node("Relu", {"b"}, {"c"}, "third");   // needs b
  b.node("Relu", {"x"}, {"a"}, "first");   // ready
  b.node("Relu", {"a"}, {"b"}, "second");  // needs a
  b.node("Relu", {"x"}, {"d"}, "ready2");  // ready, after 'first' in the file
  b.output("c");
  model::Model m = b.load();
  std::vector<std::string> names;
  for (const auto& n : m.nodes) names.push_back(n.name);
  CHECK(names == std::vector<std::string>{"first", "second", "third", "ready2"});
  for (size_t i = 0; i < m.nodes.size(); ++i) {
    for (int o : m.nodes[i].outputs) CHECK(m.values[o].producer == int(i));
  }
}

TEST_CASE("loader: initializers listed as graph inputs are initializers") {
  OnnxBuilder b = small_model();
  OnnxBuilder::value_info(b.graph()->add_input(), "w", {4, 3, 3, 3}, TensorProto::FLOAT, true);
  model::Model m = b.load();
  REQUIRE(m.inputs.size() == 1);
  CHECK(m.values[m.inputs[0]].name == "x");
  CHECK(m.values[m.find("w")].source == ValueSource::initializer);
}

TEST_CASE("loader: reads small integer initializers, never floats") {
  OnnxBuilder b = small_model();
  b.ints("raw", {1, -2, 300});
  TensorProto& i64 = b.weight("i64", {2}, TensorProto::INT64);
  i64.add_int64_data(7);
  i64.add_int64_data(-8);
  TensorProto& i32 = b.weight("i32", {2}, TensorProto::INT32);
  i32.add_int32_data(-5);
  i32.add_int32_data(6);
  TensorProto& raw32 = b.weight("raw32", {1}, TensorProto::INT32);
  raw32.set_raw_data(std::string("\xfe\xff\xff\xff", 4));  // -2
  TensorProto& flags = b.weight("flags", {3}, TensorProto::BOOL);
  flags.set_raw_data(std::string("\x01\x00\x02", 3));
  TensorProto& f = b.weight("f", {2}, TensorProto::FLOAT);
  f.add_float_data(1.5f);
  f.add_float_data(2.5f);
  b.ints("big", std::vector<int64_t>(10, 1));
  model::LoadOptions options;
  options.max_const_elements = 5;
  model::Model m = b.load(options);
  auto ints = [&](const std::string& name) {
    const auto& v = m.values[m.find(name)];
    REQUIRE(v.value.has_value());
    return v.value->ints;
  };
  CHECK(ints("raw") == std::vector<int64_t>{1, -2, 300});
  CHECK(ints("i64") == std::vector<int64_t>{7, -8});
  CHECK(ints("i32") == std::vector<int64_t>{-5, 6});
  CHECK(ints("raw32") == std::vector<int64_t>{-2});
  CHECK(ints("flags") == std::vector<int64_t>{1, 0, 1});
  CHECK(m.values[m.find("raw")].value->shape == Shape{3});
  CHECK(m.values[m.find("raw")].has_data);
  CHECK(m.values[m.find("f")].has_data);
  CHECK_FALSE(m.values[m.find("f")].value.has_value());
  CHECK_FALSE(m.values[m.find("big")].value.has_value());  // over max_const_elements
  CHECK(m.values[m.find("big")].dtype == DType::i64);
}

TEST_CASE("loader: Constant attributes become tensors") {
  OnnxBuilder b = small_model();
  attr_ints(b.node("Constant", {}, {"k1"}), "value_ints", {2, 3});
  attr_i(b.node("Constant", {}, {"k2"}), "value_int", 9);
  attr_f(b.node("Constant", {}, {"k3"}), "value_float", 0.5f);
  attr_float_tensor(b.node("Constant", {}, {"k4"}), "value", {1.0f, 2.0f}, {2, 1});
  model::Model m = b.load();
  auto tensor = [&](const std::string& out, const std::string& key) {
    const auto& n = m.nodes[m.values[m.find(out)].producer];
    REQUIRE(n.attr(key));
    REQUIRE(n.attr(key)->tensor.has_value());
    return *n.attr(key)->tensor;
  };
  CHECK(tensor("k1", "value_ints").ints == std::vector<int64_t>{2, 3});
  CHECK(tensor("k1", "value_ints").shape == Shape{2});
  CHECK(tensor("k2", "value_int").ints == std::vector<int64_t>{9});
  CHECK(tensor("k2", "value_int").shape == Shape{});
  CHECK(tensor("k3", "value_float").floats == std::vector<double>{0.5});
  CHECK(tensor("k4", "value").floats == std::vector<double>{1.0, 2.0});
  CHECK(tensor("k4", "value").shape == Shape{2, 1});
  CHECK(tensor("k4", "value").dtype == DType::f32);
}

TEST_CASE("loader: node attribute accessors") {
  OnnxBuilder b = small_model();
  auto& n = b.graph()->mutable_node(0)[0];
  attr_i(n, "group", 1);
  attr_ints(n, "pads", {1, 1, 1, 1});
  attr_s(n, "auto_pad", "NOTSET");
  attr_f(n, "alpha", 0.25f);
  model::Model m = b.load();
  const auto& conv = m.nodes[0];
  CHECK(conv.attr_i("group", 7) == 1);
  CHECK(conv.attr_i("missing", 7) == 7);
  CHECK(conv.attr_i("pads", 7) == 7);  // wrong kind: the fallback
  CHECK(conv.attr_ints("pads") == std::vector<int64_t>{1, 1, 1, 1});
  CHECK(conv.attr_ints("group").empty());
  CHECK(conv.attr_s("auto_pad", "") == "NOTSET");
  CHECK(conv.attr_f("alpha", 0) == 0.25);
  CHECK(conv.attr_f("beta", 2.0) == 2.0);
}

TEST_CASE("loader: external data") {
  TempDir dir;
  OnnxBuilder b = small_model();
  set_external(b.graph()->mutable_initializer(0)[0], "missing_weights.bin", 0, 4 * 27 * 4);
  b.node("Reshape", {"y", "shape"}, {"z"});
  TensorProto& shape = b.weight("shape", {2}, TensorProto::INT64);
  dir.write("ints.bin", "padding!" + le64({2, -1}));
  set_external(shape, "ints.bin", 8, 16);
  b.output("z");
  std::string path = dir.write("model.onnx", b.bytes());

  SUBCASE("floats are never read, so a missing float data file is fine") {
    model::Model m = model::load_model(path);
    const auto& w = m.values[m.find("w")];
    CHECK(w.has_data);
    CHECK_FALSE(w.value.has_value());
    CHECK(w.shape == Shape{4, 3, 3, 3});
    REQUIRE(m.values[m.find("shape")].value.has_value());
    CHECK(m.values[m.find("shape")].value->ints == std::vector<int64_t>{2, -1});
    model::infer_shapes(m, 2);
    CHECK(shape_of(m, "z") == Shape{2, 144});
  }
  SUBCASE("a missing data file for a small integer tensor is an error naming the file") {
    std::filesystem::remove(dir.path / "ints.bin");
    auto [kind, message] = error_of([&] { model::load_model(path); });
    CHECK(kind == ErrorKind::invalid_model);
    CHECK(message.find("initializer 'shape'") != std::string::npos);
    CHECK(message.find("ints.bin") != std::string::npos);
  }
  SUBCASE("locations may not leave the model's folder") {
    set_external(b.graph()->mutable_initializer(1)[0], "../ints.bin", 8, 16);
    b.graph()->mutable_initializer(1)[0].mutable_external_data()->DeleteSubrange(0, 3);
    auto [kind, message] = error_of([&] { model::load_model(dir.write("model2.onnx", b.bytes())); });
    CHECK(kind == ErrorKind::invalid_model);
    CHECK(message.find("'../ints.bin'") != std::string::npos);
  }
  SUBCASE("a short data file is an error") {
    dir.write("ints.bin", le64({2}));
    auto [kind, message] = error_of([&] { model::load_model(path); });
    CHECK(kind == ErrorKind::invalid_model);
    CHECK(message.find("too short") != std::string::npos);
  }
}

TEST_CASE("loader: external data stays inside the model's folder, in regular files") {
  TempDir dir, outside;
  std::filesystem::create_directory(dir.path / "m");
  // The bytes a symlink out would expose: "root:x:0:0:root:" read as two int64s.
  const std::string secret = outside.write("passwd", "root:x:0:0:root:");
  const std::string leaked = "3475222254926655346";
  OnnxBuilder b = small_model();
  b.node("Reshape", {"y", "shape"}, {"z"});
  b.weight("shape", {2}, TensorProto::INT64);
  b.output("z");
  dir.write("m/ints.bin", le64({2, -1}));
  auto load_with = [&](const std::string& location) {
    TensorProto& t = b.graph()->mutable_initializer(1)[0];
    t.mutable_external_data()->Clear();
    t.clear_raw_data();
    set_external(t, location, 0, 16);
    return model::load_model(dir.write("m/model.onnx", b.bytes()));
  };
  auto refused = [&](const std::string& location) {
    auto [kind, message] = error_of([&] { load_with(location); });
    CHECK(kind == ErrorKind::invalid_model);
    CHECK(message.find("initializer 'shape'") != std::string::npos);
    CHECK(message.find("'" + location + "'") != std::string::npos);
    CHECK(message.find(leaked) == std::string::npos);
    return message;
  };

  SUBCASE("a symlink that leads out is refused, and its target's bytes are never shown") {
    std::filesystem::create_symlink(secret, dir.path / "m/link.bin");
    std::string message = refused("link.bin");
    CHECK(message.find("outside the model's folder") != std::string::npos);
  }
  SUBCASE("a symlink that stays inside is followed") {
    std::filesystem::create_symlink("ints.bin", dir.path / "m/link.bin");
    model::Model m = load_with("link.bin");
    REQUIRE(m.values[m.find("shape")].value.has_value());
    CHECK(m.values[m.find("shape")].value->ints == std::vector<int64_t>{2, -1});
  }
  SUBCASE("a symlinked folder that leads out is refused") {
    std::filesystem::create_directory_symlink(outside.path, dir.path / "m/sub");
    CHECK(refused("sub/passwd").find("outside the model's folder") != std::string::npos);
  }
  SUBCASE("'..' is refused, also through a symlinked folder") {
    std::filesystem::create_directory(dir.path / "m/inner");
    std::filesystem::create_directory_symlink(dir.path / "m/inner", dir.path / "m/sub");
    CHECK(refused("sub/../ints.bin").find("relative path inside the model's folder") != std::string::npos);
  }
  SUBCASE("a FIFO is refused without waiting for a writer") {
    REQUIRE(mkfifo((dir.path / "m/fifo.bin").c_str(), 0600) == 0);
    CHECK(refused("fifo.bin").find("a FIFO, not a regular file") != std::string::npos);
  }
  SUBCASE("a directory is refused") {
    std::filesystem::create_directory(dir.path / "m/data.bin");
    CHECK(refused("data.bin").find("a directory, not a regular file") != std::string::npos);
  }
  SUBCASE("a file shorter than offset + length is refused before anything is read") {
    dir.write("m/ints.bin", le64({2}));
    CHECK(refused("ints.bin").find("too short: it has 8 bytes, and 16 are needed from offset 0") !=
          std::string::npos);
  }
}

TEST_CASE("loader: a model that is a FIFO is refused without waiting for a writer") {
  TempDir dir;
  const std::string fifo = (dir.path / "model.onnx").string();
  REQUIRE(mkfifo(fifo.c_str(), 0600) == 0);
  auto [kind, message] = error_of([&] { model::load_model(fifo); });
  CHECK(kind == ErrorKind::unreadable);
  CHECK(message.find("not a regular file") != std::string::npos);
}

TEST_CASE("loader: file errors") {
  TempDir dir;
  auto [kind, message] = error_of([&] { model::load_model((dir.path / "nope.onnx").string()); });
  CHECK(kind == ErrorKind::unreadable);
  CHECK(message == "cannot read model '" + (dir.path / "nope.onnx").string() +
                       "': No such file or directory; check the path");
  auto [kind2, message2] = error_of([&] { model::load_model(dir.path.string()); });
  CHECK(kind2 == ErrorKind::unreadable);
  CHECK(message2.find("Is a directory") != std::string::npos);
}

TEST_CASE("loader: malformed bytes") {
  auto load = [](const std::string& bytes) {
    return error_of([&] { model::load_model_from_bytes(bytes.data(), bytes.size(), "m.onnx", "."); });
  };
  SUBCASE("not ONNX") {
    auto [kind, message] = load("this is certainly not a protobuf \xff\xff\xff\xff");
    CHECK(kind == ErrorKind::invalid_model);
    CHECK(message.find("'m.onnx' is not an ONNX model or is truncated: protobuf parsing failed") == 0);
  }
  SUBCASE("truncated") {
    std::string bytes = small_model().bytes();
    auto [kind, message] = load(bytes.substr(0, bytes.size() - 7));
    CHECK(kind == ErrorKind::invalid_model);
    CHECK(message.find("protobuf parsing failed") != std::string::npos);
  }
  SUBCASE("empty: no graph") {
    auto [kind, message] = load("");
    CHECK(kind == ErrorKind::invalid_model);
    CHECK(message.find("has no graph") != std::string::npos);
  }
  SUBCASE("no nodes") {
    OnnxBuilder b;
    b.input("x", {1});
    auto [kind, message] = load(b.bytes());
    CHECK(kind == ErrorKind::invalid_model);
    CHECK(message.find("no nodes") != std::string::npos);
  }
  SUBCASE("no default opset") {
    OnnxBuilder b = small_model();
    b.proto.mutable_opset_import(0)->set_domain("com.example");
    auto [kind, message] = load(b.bytes());
    CHECK(kind == ErrorKind::invalid_model);
    CHECK(message.find("opset") != std::string::npos);
  }
}

TEST_CASE("loader: graph structure errors") {
  SUBCASE("cycle") {
    OnnxBuilder b;
    b.input("x", {1});
    b.node("Add", {"x", "c"}, {"a"}, "n_a");
    b.node("Relu", {"a"}, {"b"}, "n_b");
    b.node("Relu", {"b"}, {"c"}, "n_c");
    b.output("c");
    auto [kind, message] = error_of([&] { b.load(); });
    CHECK(kind == ErrorKind::invalid_model);
    CHECK(message == "the graph has a cycle: 'n_a' (Add) <- 'n_c' (Relu) <- 'n_b' (Relu) <- 'n_a' (each node "
                     "uses an output of the next); ONNX graphs must be acyclic");
  }
  SUBCASE("undefined input") {
    OnnxBuilder b;
    b.input("x", {1});
    b.node("Add", {"x", "ghost"}, {"a"}, "adder");
    b.output("a");
    auto [kind, message] = error_of([&] { b.load(); });
    CHECK(kind == ErrorKind::invalid_model);
    CHECK(message == "node 'adder' (Add) uses 'ghost', which no node, initializer or graph input defines");
  }
  SUBCASE("value defined twice") {
    OnnxBuilder b;
    b.input("x", {1});
    b.node("Relu", {"x"}, {"a"}, "one");
    b.node("Relu", {"x"}, {"a"}, "two");
    b.output("a");
    auto [kind, message] = error_of([&] { b.load(); });
    CHECK(kind == ErrorKind::invalid_model);
    CHECK(message == "value 'a' is defined twice: as an output of node 'one' and as an output of node 'two'");
  }
  SUBCASE("node output shadows an input") {
    OnnxBuilder b;
    b.input("x", {1});
    b.node("Relu", {"x"}, {"x"}, "one");
    auto [kind, message] = error_of([&] { b.load(); });
    CHECK(message == "value 'x' is defined twice: as a graph input and as an output of node 'one'");
  }
  SUBCASE("undefined graph output") {
    OnnxBuilder b;
    b.input("x", {1});
    b.node("Relu", {"x"}, {"a"});
    b.output("nothing");
    auto [kind, message] = error_of([&] { b.load(); });
    CHECK(message.find("graph output 'nothing'") != std::string::npos);
  }
  SUBCASE("unknown data type names the tensor") {
    OnnxBuilder b = small_model();
    b.weight("names", {2}, TensorProto::STRING);
    auto [kind, message] = error_of([&] { b.load(); });
    CHECK(kind == ErrorKind::invalid_model);
    CHECK(message.find("initializer 'names' has data type 8") == 0);
  }
  SUBCASE("unknown input type") {
    OnnxBuilder b;
    b.input("x", {1}, TensorProto::UINT32);
    b.node("Relu", {"x"}, {"a"});
    auto [kind, message] = error_of([&] { b.load(); });
    CHECK(message.find("graph input 'x' has data type 12") == 0);
  }
  SUBCASE("negative dims") {
    OnnxBuilder b = small_model();
    b.weight("bad", {2, -3});
    auto [kind, message] = error_of([&] { b.load(); });
    CHECK(kind == ErrorKind::invalid_model);
    CHECK(message.find("initializer 'bad' has dims [2, -3]") == 0);
  }
  SUBCASE("dims whose element count overflows") {
    OnnxBuilder b = small_model();
    b.weight("huge", {int64_t{1} << 40, int64_t{1} << 40});
    auto [kind, message] = error_of([&] { b.load(); });
    CHECK(message.find("initializer 'huge'") == 0);
  }
  SUBCASE("raw data of the wrong size") {
    OnnxBuilder b = small_model();
    b.ints("short", {1, 2}).add_dims(3);  // dims [2, 3] but 2 values
    auto [kind, message] = error_of([&] { b.load(); });
    CHECK(message == "initializer 'short' has 16 bytes of data but dims [2, 3] of int64 need 48");
  }
}

TEST_CASE("check_supported_ops lists every unsupported op once, sorted, with one node") {
  OnnxBuilder b;
  b.input("x", {1, 4});
  b.node("Acos", {"x"}, {"a"}, "t1");
  b.node("Acos", {"a"}, {"b"}, "t2");
  b.node("Abs", {"b"}, {"c"}, "abs");
  b.node("Relu", {"c"}, {"d"}, "relu");
  b.node("FusedConv", {"d"}, {"e"}, "fused").set_domain("com.microsoft");
  b.output("e");
  model::Model m = b.load();
  auto [kind, message] = error_of([&] { model::check_supported_ops(m); });
  CHECK(kind == ErrorKind::unsupported);
  CHECK(message.find("unsupported ops: Abs (node 'abs'), Acos (node 't1'), com.microsoft.FusedConv (node 'fused'); "
                     "AutoVM supports: Add, AveragePool, ") == 0);
  CHECK(message.find("Relu,") != std::string::npos);

  model::check_supported_ops(small_model().load());  // all supported: no throw
}

TEST_CASE("supported ops: sorted, each with a shape rule") {
  auto names = model::supported_op_names();
  CHECK(std::is_sorted(names.begin(), names.end()));
  for (std::string_view op : {"Conv", "BatchNormalization", "Relu", "Clip", "HardSigmoid", "HardSwish", "Sigmoid",
                              "Add", "Sub", "Mul", "Div", "Pow", "Sqrt", "Erf", "MaxPool", "AveragePool",
                              "GlobalAveragePool", "ReduceMean", "Gemm", "MatMul", "Flatten", "Reshape", "Transpose",
                              "Concat", "Split", "Slice", "Gather", "Shape", "Unsqueeze", "Squeeze", "Cast",
                              "Constant", "ConstantOfShape", "Expand", "Identity", "Dropout", "Pad", "Softmax", "LRN",
                              "Range", "Equal", "Where", "Not", "ConvTranspose", "InstanceNormalization",
                              "GroupNormalization", "LeakyRelu", "Elu", "Selu", "Tanh", "Softplus", "Mish",
                              "Gelu", "Sum", "Max", "Min", "ReduceSum", "ReduceMax", "GlobalMaxPool",
                              "RandomUniformLike", "Less", "Greater"}) {
    CHECK_MESSAGE(model::is_supported_op(op), op);
  }
  CHECK_FALSE(model::is_supported_op("Acos"));
  for (std::string_view op : names) CHECK_MESSAGE(model::has_shape_rule(op), op);
}

TEST_CASE("sha256: FIPS 180-4 test vectors") {
  // Digests from FIPS 180-4's examples (csrc.nist.gov, SHA256.pdf / SHA2_Additional.pdf).
  const std::string million_a(1000000, 'a');
  const std::pair<std::string, std::string> cases[] = {
      {"", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
      {"abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
      {"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
       "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"},
      {million_a, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"},
  };
  for (const auto& c : cases) {  // no structured binding: CAPTURE's lambda cannot take one in clang 14
    const std::string& text = c.first;
    CAPTURE(text.size());
    CHECK(sha256_hex(text.data(), text.size()) == c.second);
  }
}
