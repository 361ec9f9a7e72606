// Test helper: builds ONNX ModelProtos in memory, serialises them and loads them with
// load_model_from_bytes, so that the loader and shape inference see real protobuf bytes.
#pragma once

#include <onnx/onnx_pb.h>

#include <doctest/doctest.h>

#include <cstring>
#include <string>
#include <vector>

#include "model/model.h"
#include "model/shape_inference.h"
#include "util/error.h"

namespace autovm::test {

using onnx::TensorProto;

class OnnxBuilder {
 public:
  explicit OnnxBuilder(int64_t opset = 17, int64_t ir_version = 8) {
    proto.set_ir_version(ir_version);
    proto.set_producer_name("test");
    proto.set_producer_version("1.0");
    auto* op = proto.add_opset_import();
    op->set_domain("");
    op->set_version(opset);
    graph()->set_name("g");
  }

  onnx::GraphProto* graph() { return proto.mutable_graph(); }

  // A graph input; a negative dim is symbolic ("N"). With declare_shape false, no shape at all.
  OnnxBuilder& input(const std::string& name, const std::vector<int64_t>& dims,
                     int elem = TensorProto::FLOAT, bool declare_shape = true) {
    value_info(graph()->add_input(), name, dims, elem, declare_shape);
    return *this;
  }
  OnnxBuilder& output(const std::string& name) {
    graph()->add_output()->set_name(name);
    return *this;
  }
  // An initializer with dims and no data (stripped weights).
  TensorProto& weight(const std::string& name, const std::vector<int64_t>& dims,
                      int elem = TensorProto::FLOAT) {
    TensorProto* t = graph()->add_initializer();
    t->set_name(name);
    t->set_data_type(elem);
    for (int64_t d : dims) t->add_dims(d);
    return *t;
  }
  // An int64 initializer with values in raw_data; dims default to [values.size()].
  TensorProto& ints(const std::string& name, const std::vector<int64_t>& values,
                    std::vector<int64_t> dims = {-1}) {
    if (dims == std::vector<int64_t>{-1}) dims = {int64_t(values.size())};
    TensorProto& t = weight(name, dims, TensorProto::INT64);
    std::string raw(values.size() * 8, '\0');
    for (size_t i = 0; i < values.size(); ++i) {
      for (int b = 0; b < 8; ++b) raw[i * 8 + b] = char(uint64_t(values[i]) >> (8 * b) & 0xff);
    }
    t.set_raw_data(raw);
    return t;
  }
  // A node; an empty name lets the loader name it "<op>_<index>".
  onnx::NodeProto& node(const std::string& op, const std::vector<std::string>& inputs,
                        const std::vector<std::string>& outputs, const std::string& name = "") {
    onnx::NodeProto* n = graph()->add_node();
    n->set_op_type(op);
    n->set_name(name);
    for (const auto& i : inputs) n->add_input(i);
    for (const auto& o : outputs) n->add_output(o);
    return *n;
  }

  std::string bytes() const { return proto.SerializeAsString(); }
  model::Model load(const model::LoadOptions& options = {}) const {
    std::string b = bytes();
    return model::load_model_from_bytes(b.data(), b.size(), "test.onnx", ".", options);
  }
  model::Model infer(int64_t batch) const {
    model::Model m = load();
    model::infer_shapes(m, batch);
    return m;
  }

  static void value_info(onnx::ValueInfoProto* v, const std::string& name, const std::vector<int64_t>& dims,
                         int elem, bool declare_shape) {
    v->set_name(name);
    auto* tt = v->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(elem);
    if (!declare_shape) return;
    auto* shape = tt->mutable_shape();
    for (int64_t d : dims) {
      auto* dim = shape->add_dim();
      if (d >= 0) dim->set_dim_value(d);
      else dim->set_dim_param("N");
    }
  }

  onnx::ModelProto proto;
};

inline void attr_i(onnx::NodeProto& n, const std::string& name, int64_t v) {
  auto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INT);
  a->set_i(v);
}
inline void attr_f(onnx::NodeProto& n, const std::string& name, float v) {
  auto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::FLOAT);
  a->set_f(v);
}
inline void attr_s(onnx::NodeProto& n, const std::string& name, const std::string& v) {
  auto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::STRING);
  a->set_s(v);
}
inline void attr_ints(onnx::NodeProto& n, const std::string& name, const std::vector<int64_t>& v) {
  auto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INTS);
  for (int64_t x : v) a->add_ints(x);
}
inline void attr_floats(onnx::NodeProto& n, const std::string& name, const std::vector<float>& v) {
  auto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::FLOATS);
  for (float x : v) a->add_floats(x);
}
// A tensor attribute (Constant's / ConstantOfShape's value) of int64 values.
inline TensorProto& attr_int_tensor(onnx::NodeProto& n, const std::string& name, const std::vector<int64_t>& values,
                                    const std::vector<int64_t>& dims) {
  auto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::TENSOR);
  TensorProto* t = a->mutable_t();
  t->set_data_type(TensorProto::INT64);
  for (int64_t d : dims) t->add_dims(d);
  for (int64_t v : values) t->add_int64_data(v);
  return *t;
}
inline TensorProto& attr_float_tensor(onnx::NodeProto& n, const std::string& name, const std::vector<float>& values,
                                      const std::vector<int64_t>& dims) {
  auto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::TENSOR);
  TensorProto* t = a->mutable_t();
  t->set_data_type(TensorProto::FLOAT);
  for (int64_t d : dims) t->add_dims(d);
  for (float v : values) t->add_float_data(v);
  return *t;
}

// The inferred shape of value `name`; fails the test when it is unknown.
inline Shape shape_of(const model::Model& m, const std::string& name) {
  int v = m.find(name);
  REQUIRE_MESSAGE(v >= 0, "no value named " << name);
  REQUIRE_MESSAGE(m.values[v].shape_known, "shape of " << name << " unknown");
  return m.values[v].shape;
}

inline const model::Node& node_named(const model::Model& m, const std::string& name) {
  for (const auto& n : m.nodes) {
    if (n.name == name) return n;
  }
  FAIL("no node named " << name);
  return m.nodes.front();
}

// The message of the autovm::Error `f` throws, and its kind; fails if it throws nothing.
template <typename F>
std::pair<ErrorKind, std::string> error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return {e.kind(), e.what()};
  }
  FAIL("expected an autovm::Error");
  return {};
}

}  // namespace autovm::test
