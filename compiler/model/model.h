// Contract: the model front end's view of an ONNX graph, independent of protobuf.
//
// load_model() parses an ONNX file with ONNX's generated protobuf classes, validates what the
// planner relies on (graph present, every input of a node defined before use or sortable into
// topological order, known data types, non-negative dims) and converts it to `Model`. It never
// runs ONNX's checker (Debian's ONNX 1.12 rejects IR > 8 and opset > 17) and never copies
// floating-point weight bytes: it keeps each initializer's dtype and dims, and the values of
// small integer tensors only (shape arithmetic needs them), reading external data files for
// those when needed.
//
// infer_shapes() (shape_inference.h) then fills every Value's shape for a chosen batch size and
// evaluates shape-computing subgraphs statically, marking those nodes `folded`.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "ir/types.h"

namespace autovm::model {

// A tensor whose values are known at planning time (constants, shape arithmetic results).
// Integer and boolean values live in `ints`, floating-point values in `floats`.
struct ConstValue {
  DType dtype = DType::undefined;
  Shape shape;
  std::vector<int64_t> ints;
  std::vector<double> floats;
  int64_t size() const { return element_count(shape); }
};

struct Attribute {
  enum class Kind { i, f, s, ints, floats, tensor, other };
  Kind kind = Kind::other;
  int64_t i = 0;
  double f = 0;
  std::string s;
  std::vector<int64_t> ints;
  std::vector<double> floats;
  std::optional<ConstValue> tensor;  // for Constant / ConstantOfShape value attributes (small only)
  Shape tensor_shape;                // dims of a tensor attribute, even when its values are not kept
  DType tensor_dtype = DType::undefined;
};

// A node's attributes by name. Nodes with the same attributes (a chain of identical
// convolutions) share one copy, which is therefore never changed in place: to set a node's
// attributes, build a Map and assign it.
class Attributes {
 public:
  using Map = std::map<std::string, Attribute>;
  Attributes() = default;
  Attributes(Map map)  // implicit: node.attrs = map
      : map_(map.empty() ? nullptr : std::make_shared<const Map>(std::move(map))) {}
  const Attribute* find(const std::string& key) const {
    if (!map_) return nullptr;
    auto it = map_->find(key);
    return it == map_->end() ? nullptr : &it->second;
  }
  size_t size() const { return map_ ? map_->size() : 0; }

 private:
  std::shared_ptr<const Map> map_;  // null when there are none
};

enum class ValueSource { graph_input, initializer, node_output };

struct Value {
  std::string name;
  DType dtype = DType::undefined;
  Shape shape;               // valid when shape_known
  bool shape_known = false;
  // As declared in the file, -1 for a symbolic or missing dimension (graph inputs/outputs only).
  Shape declared_shape;
  bool shape_declared = false;  // the file declares a shape (possibly rank 0) for this value
  ValueSource source = ValueSource::node_output;
  bool has_data = false;              // initializer bytes are in the file or an external file
  std::optional<ConstValue> value;    // statically known values (small integer tensors, folds)
  int producer = -1;                  // index of the node that outputs it, -1 if none
};

struct Node {
  std::string op;       // ONNX op_type
  std::string domain;   // "" for the default ONNX domain
  std::string name;     // node name from the file; "<op>_<index>" if the file has none
  std::vector<int> inputs;   // value indices; -1 for an omitted optional input
  std::vector<int> outputs;  // value indices; -1 for an omitted optional output
  Attributes attrs;
  bool folded = false;  // evaluated statically by shape inference; does not run in training

  const Attribute* attr(const std::string& key) const { return attrs.find(key); }
  int64_t attr_i(const std::string& key, int64_t fallback) const;
  double attr_f(const std::string& key, double fallback) const;
  std::vector<int64_t> attr_ints(const std::string& key) const;  // empty when absent
  std::string attr_s(const std::string& key, const std::string& fallback) const;
};

struct Model {
  std::string path;          // as given on the command line
  std::string sha256;        // hex digest of the file's bytes
  int64_t file_bytes = 0;
  int64_t ir_version = 0;
  int64_t opset = 0;         // version of the default domain ("" or "ai.onnx")
  std::string producer;      // producer_name + " " + producer_version
  std::string graph_name;
  std::vector<Value> values;
  std::vector<Node> nodes;   // in topological order (load_model sorts them)
  std::vector<int> inputs;   // graph inputs that are not initializers
  std::vector<int> outputs;  // graph outputs
  std::unordered_map<std::string, int> value_index;  // name -> index into values

  int find(const std::string& value_name) const {
    auto it = value_index.find(value_name);
    return it == value_index.end() ? -1 : it->second;
  }
};

// The most elements a tensor may have: its bytes must fit in int64_t.
inline constexpr int64_t kMaxElements = INT64_MAX / 8;

// Product of `shape`'s dims, or -1 when a dim is negative or the product of the non-zero dims
// exceeds kMaxElements.
int64_t checked_element_count(const Shape& shape);

// ONNX TensorProto data type -> DType; undefined for types AutoVM does not handle.
DType dtype_from_onnx(int32_t onnx_type);

struct LoadOptions {
  // Integer initializers up to this many elements have their values read (shape arithmetic).
  int64_t max_const_elements = 1 << 16;
};

// Throws Error(unreadable) when the file cannot be opened, Error(invalid_model) when it is not a
// well-formed ONNX model (the message says what is wrong and where).
Model load_model(const std::string& path, const LoadOptions& options = {});

// Same, from bytes already in memory (the fuzz target and tests use it); `base_dir` is where
// external data files are looked up.
Model load_model_from_bytes(const void* data, size_t size, const std::string& name,
                            const std::string& base_dir, const LoadOptions& options = {});

// The ops the planner supports (it can infer shapes for them and they have gradient rules).
// Throws Error(unsupported) naming every unsupported op type and one node of each.
void check_supported_ops(const Model&);

}  // namespace autovm::model
