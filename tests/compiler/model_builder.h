// Test helper: builds a model::Model by hand, with shapes already known, so that the training
// and analysis passes can be tested without the ONNX loader. Values are referred to by name.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "model/model.h"

namespace autovm::test {

struct ModelBuilder {
  model::Model m;

  ModelBuilder() { m.opset = 17; m.ir_version = 8; }

  int value(const std::string& name, Shape shape, DType dtype, model::ValueSource src) {
    model::Value v;
    v.name = name;
    v.shape = shape;
    v.declared_shape = shape;
    v.shape_known = true;
    v.dtype = dtype;
    v.source = src;
    v.has_data = src == model::ValueSource::initializer;
    int id = static_cast<int>(m.values.size());
    m.values.push_back(std::move(v));
    m.value_index[name] = id;
    return id;
  }
  ModelBuilder& input(const std::string& name, Shape shape) {
    m.inputs.push_back(value(name, std::move(shape), DType::f32, model::ValueSource::graph_input));
    return *this;
  }
  ModelBuilder& param(const std::string& name, Shape shape) {
    value(name, std::move(shape), DType::f32, model::ValueSource::initializer);
    return *this;
  }
  // A known constant (e.g. a float scalar or an int64 shape) as an initializer.
  ModelBuilder& constant(const std::string& name, DType dtype, Shape shape,
                         std::vector<int64_t> ints, std::vector<double> floats = {}) {
    int id = value(name, shape, dtype, model::ValueSource::initializer);
    model::ConstValue c;
    c.dtype = dtype;
    c.shape = std::move(shape);
    c.ints = std::move(ints);
    c.floats = std::move(floats);
    m.values[static_cast<size_t>(id)].value = std::move(c);
    return *this;
  }
  // A node; outputs are (name, shape) pairs of float32 values unless `dtype` says otherwise.
  ModelBuilder& node(const std::string& op, const std::string& name,
                     const std::vector<std::string>& inputs,
                     const std::vector<std::pair<std::string, Shape>>& outputs,
                     std::map<std::string, model::Attribute> attrs = {}, DType dtype = DType::f32) {
    model::Node n;
    n.op = op;
    n.name = name;
    n.attrs = std::move(attrs);
    for (const auto& i : inputs) n.inputs.push_back(i.empty() ? -1 : m.find(i));
    int index = static_cast<int>(m.nodes.size());
    for (const auto& [o, shape] : outputs) {
      int id = value(o, shape, dtype, model::ValueSource::node_output);
      m.values[static_cast<size_t>(id)].producer = index;
      n.outputs.push_back(id);
    }
    m.nodes.push_back(std::move(n));
    return *this;
  }
  ModelBuilder& output(const std::string& name) {
    m.outputs.push_back(m.find(name));
    return *this;
  }
};

inline model::Attribute ints_attr(std::vector<int64_t> v) {
  model::Attribute a;
  a.kind = model::Attribute::Kind::ints;
  a.ints = std::move(v);
  return a;
}
inline model::Attribute int_attr(int64_t v) {
  model::Attribute a;
  a.kind = model::Attribute::Kind::i;
  a.i = v;
  return a;
}

}  // namespace autovm::test
