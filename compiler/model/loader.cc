// The ONNX loader: protobuf bytes -> validated, topologically sorted `Model` (contract in model.h).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <google/protobuf/arena.h>
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <filesystem>
#include <functional>
#include <future>
#include <queue>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

#include "model/external_data.h"
#include "model/model.h"
#include "util/error.h"
#include "util/parallel.h"
#include "util/sha256.h"

namespace autovm::model {

int64_t checked_element_count(const Shape& shape) {
  int64_t count = 1, nonzero = 1;  // nonzero bounds every partial product, even past a 0 dim
  for (int64_t d : shape) {
    if (d < 0 || nonzero > kMaxElements / std::max<int64_t>(d, 1)) return -1;
    nonzero *= std::max<int64_t>(d, 1);
    count = d == 0 ? 0 : count * d;
  }
  return count;
}

DType dtype_from_onnx(int32_t t) {
  using T = onnx::TensorProto;
  switch (t) {
    case T::FLOAT: return DType::f32;
    case T::FLOAT16: return DType::f16;
    case T::BFLOAT16: return DType::bf16;
    case T::DOUBLE: return DType::f64;
    case T::INT64: return DType::i64;
    case T::INT32: return DType::i32;
    case T::INT16: return DType::i16;
    case T::INT8: return DType::i8;
    case T::UINT8: return DType::u8;
    case T::BOOL: return DType::boolean;
    default: return DType::undefined;
  }
}

int64_t Node::attr_i(const std::string& key, int64_t fallback) const {
  const Attribute* a = attr(key);
  return a && a->kind == Attribute::Kind::i ? a->i : fallback;
}

double Node::attr_f(const std::string& key, double fallback) const {
  const Attribute* a = attr(key);
  return a && a->kind == Attribute::Kind::f ? a->f : fallback;
}

std::vector<int64_t> Node::attr_ints(const std::string& key) const {
  const Attribute* a = attr(key);
  return a && a->kind == Attribute::Kind::ints ? a->ints : std::vector<int64_t>{};
}

std::string Node::attr_s(const std::string& key, const std::string& fallback) const {
  const Attribute* a = attr(key);
  return a && a->kind == Attribute::Kind::s ? a->s : fallback;
}

namespace {

[[noreturn]] void invalid(const std::string& message) {
  throw Error(ErrorKind::invalid_model, message);
}

std::string quote(std::string_view s) {
  std::string out = "'";
  out.append(s).push_back('\'');
  return out;
}

std::string shape_str(const Shape& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

// `what()` describes the tensor for error messages (built only on error).
template <typename What>
DType known_dtype(int32_t t, What what) {
  DType d = dtype_from_onnx(t);
  if (d == DType::undefined) {
    invalid(what() + " has data type " + std::to_string(t) +
            ", which AutoVM does not handle (supported: float32/16, bfloat16, float64, int64/32/16/8, "
            "uint8, bool)");
  }
  return d;
}

// Dims of a tensor, each checked non-negative and their product bounded.
template <typename What>
Shape tensor_dims(const onnx::TensorProto& t, What what) {
  Shape dims(t.dims().begin(), t.dims().end());
  if (checked_element_count(dims) < 0) {
    invalid(what() + " has dims " + shape_str(dims) + ": dims must be non-negative and the element "
            "count must fit in 64 bits");
  }
  return dims;
}

float half_to_float(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  uint32_t bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000 | (mant << 13);  // inf / nan
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (mant << 13);
  } else if (mant == 0) {
    bits = sign;
  } else {  // subnormal: normalise
    exp = 113;
    while (!(mant & 0x400)) { mant <<= 1; --exp; }
    bits = sign | (exp << 23) | ((mant & 0x3ff) << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Appends the little-endian element of dtype `t` at `p` to `out`.
void decode_element(const unsigned char* p, DType t, ConstValue& out) {
  auto le = [p](int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; --i) v = (v << 8) | p[i];
    return v;
  };
  switch (t) {
    case DType::i64: out.ints.push_back(int64_t(le(8))); break;
    case DType::i32: out.ints.push_back(int32_t(uint32_t(le(4)))); break;
    case DType::i16: out.ints.push_back(int16_t(uint16_t(le(2)))); break;
    case DType::i8: out.ints.push_back(int8_t(p[0])); break;
    case DType::u8: out.ints.push_back(p[0]); break;
    case DType::boolean: out.ints.push_back(p[0] != 0); break;
    case DType::f64: { uint64_t b = le(8); double d; std::memcpy(&d, &b, 8); out.floats.push_back(d); break; }
    case DType::f32: { uint32_t b = uint32_t(le(4)); float f; std::memcpy(&f, &b, 4); out.floats.push_back(f); break; }
    case DType::f16: out.floats.push_back(half_to_float(uint16_t(le(2)))); break;
    case DType::bf16: {
      uint32_t b = uint32_t(le(2)) << 16;
      float f;
      std::memcpy(&f, &b, 4);
      out.floats.push_back(f);
      break;
    }
    case DType::undefined: break;
  }
}

std::string external_entry(const onnx::TensorProto& t, const std::string& key) {
  for (const auto& e : t.external_data()) {
    if (e.key() == key) return e.value();
  }
  return "";
}

bool is_external(const onnx::TensorProto& t) {
  return t.data_location() == onnx::TensorProto::EXTERNAL;
}

int64_t parse_offset(const std::string& s, const std::string& what) {
  if (s.empty()) return -1;
  int64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9' || v > (int64_t{1} << 56)) invalid(what + " has a bad external offset/length '" + s + "'");
    v = v * 10 + (c - '0');
  }
  return v;
}

// Reads `bytes` bytes of tensor `t`'s external data (relative to base_dir; external_data.h).
std::string read_external(const onnx::TensorProto& t, int64_t bytes, const std::string& base_dir,
                          const std::string& what) {
  int64_t offset = parse_offset(external_entry(t, "offset"), what);
  int64_t length = parse_offset(external_entry(t, "length"), what);
  if (length >= 0 && length != bytes) {
    invalid(what + " has external length " + std::to_string(length) + " but needs " +
            std::to_string(bytes) + " bytes");
  }
  return read_external_bytes(base_dir, external_entry(t, "location"), offset, bytes, what);
}

// Reads the values of tensor `t` (dtype, dims already checked). Returns nullopt when the tensor
// carries no data (stripped weights) or keeps floats in an external file (never read); throws
// when the data is there but malformed.
std::optional<ConstValue> read_values(const onnx::TensorProto& t, DType dtype, const Shape& dims,
                                      const std::string& base_dir, const std::string& what) {
  ConstValue v;
  v.dtype = dtype;
  v.shape = dims;
  const int64_t count = checked_element_count(dims);
  const int64_t esize = element_size(dtype);
  auto from_bytes = [&](const std::string& bytes) {
    if (int64_t(bytes.size()) != count * esize) {
      invalid(what + " has " + std::to_string(bytes.size()) + " bytes of data but dims " +
              shape_str(dims) + " of " + std::string(name(dtype)) + " need " +
              std::to_string(count * esize));
    }
    auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
    for (int64_t i = 0; i < count; ++i) decode_element(p + i * esize, dtype, v);
  };
  auto from_typed = [&](const auto& field, auto convert) {
    if (field.size() != count) {
      invalid(what + " has " + std::to_string(field.size()) + " values but dims " + shape_str(dims) +
              " need " + std::to_string(count));
    }
    for (auto x : field) convert(x);
  };
  if (count == 0) return v;
  if (is_external(t)) {
    if (is_floating(dtype)) return std::nullopt;  // float bytes are never needed, nor read
    from_bytes(read_external(t, count * esize, base_dir, what));
  } else if (t.has_raw_data()) {
    from_bytes(t.raw_data());
  } else if (dtype == DType::i64 && t.int64_data_size() > 0) {
    from_typed(t.int64_data(), [&](int64_t x) { v.ints.push_back(x); });
  } else if (dtype == DType::f32 && t.float_data_size() > 0) {
    from_typed(t.float_data(), [&](float x) { v.floats.push_back(x); });
  } else if (dtype == DType::f64 && t.double_data_size() > 0) {
    from_typed(t.double_data(), [&](double x) { v.floats.push_back(x); });
  } else if (t.int32_data_size() > 0 && dtype != DType::i64 && dtype != DType::f32 && dtype != DType::f64) {
    // int32_data holds int32/16/8, uint8, bool, and the bits of float16/bfloat16.
    from_typed(t.int32_data(), [&](int32_t x) {
      unsigned char b[4];
      for (int k = 0; k < 4; ++k) b[k] = uint32_t(x) >> (8 * k) & 0xff;
      if (dtype == DType::i32) v.ints.push_back(x);
      else if (dtype == DType::i16) v.ints.push_back(int16_t(x));
      else if (dtype == DType::i8) v.ints.push_back(int8_t(x));
      else decode_element(b, dtype, v);
    });
  } else {
    return std::nullopt;
  }
  return v;
}

bool has_data(const onnx::TensorProto& t, int64_t count) {
  if (is_external(t)) return !external_entry(t, "location").empty();
  return count == 0 || t.has_raw_data() || t.float_data_size() > 0 || t.int32_data_size() > 0 ||
         t.int64_data_size() > 0 || t.double_data_size() > 0 || t.uint64_data_size() > 0;
}

// Declared dtype and shape of a graph input or output.
void read_type(const onnx::ValueInfoProto& info, bool require_type, Value& v) {
  const std::string what = "graph " + std::string(require_type ? "input " : "output ") + quote(info.name());
  if (!info.has_type()) {
    if (require_type) invalid(what + " has no type; AutoVM needs its element type and shape");
    return;
  }
  if (!info.type().has_tensor_type()) invalid(what + " is not a tensor; AutoVM handles tensor inputs and outputs only");
  const auto& tt = info.type().tensor_type();
  if (require_type || tt.elem_type() != 0) v.dtype = known_dtype(tt.elem_type(), [&] { return what; });
  if (!tt.has_shape()) return;
  v.shape_declared = true;
  for (const auto& d : tt.shape().dim()) {
    if (d.has_dim_value() && d.dim_value() < 0) {
      invalid(what + " declares a negative dimension " + std::to_string(d.dim_value()));
    }
    v.declared_shape.push_back(d.has_dim_value() ? d.dim_value() : -1);
  }
}

class Converter {
 public:
  Converter(const onnx::ModelProto& proto, const std::string& name, const std::string& base_dir,
            const LoadOptions& options)
      : proto_(proto), g_(proto.graph()), name_(name), base_dir_(base_dir), options_(options) {}

  Model run() {
    if (!proto_.has_graph()) invalid(quote(name_) + " has no graph; it is not a usable ONNX model");
    if (g_.node_size() == 0) invalid(quote(name_) + " has a graph with no nodes");
    read_header();
    size_t value_count = size_t(g_.input_size() + g_.initializer_size());
    for (const auto& n : g_.node()) value_count += size_t(n.output_size());
    m_.values.reserve(value_count);
    m_.nodes.reserve(size_t(g_.node_size()));
    m_.value_index.reserve(value_count);
    add_inputs_and_initializers();
    add_node_outputs();
    resolve_inputs();
    const std::vector<int> order = sort_nodes();
    for (int file_index : order) add_node(file_index);
    for (const auto& out : g_.output()) {
      int v = lookup(out.name());
      if (v < 0) invalid("graph output " + quote(out.name()) + " is not produced by any node, initializer or input");
      read_type(out, false, m_.values[v]);
      m_.outputs.push_back(v);
    }
    return std::move(m_);
  }

 private:
  void read_header() {
    m_.ir_version = proto_.ir_version();
    m_.producer = proto_.producer_name();
    if (!proto_.producer_version().empty()) m_.producer += " " + proto_.producer_version();
    m_.graph_name = g_.name();
    bool found = false;
    for (const auto& op : proto_.opset_import()) {
      if (op.domain().empty() || op.domain() == "ai.onnx") {
        m_.opset = op.version();
        found = true;
      }
    }
    if (!found) invalid(quote(name_) + " imports no opset for the default ONNX domain");
    if (m_.opset < 1) invalid(quote(name_) + " imports opset " + std::to_string(m_.opset) + " of the ONNX domain");
  }

  int lookup(const std::string& name) const { return m_.find(name); }

  std::string node_name(int file_index) const {
    const auto& n = g_.node(file_index);
    return n.name().empty() ? n.op_type() + "_" + std::to_string(file_index) : n.name();
  }

  // Until the nodes are sorted, a node output's `producer` is its node's index in the file.
  std::string describe(int v) const {
    const Value& val = m_.values[v];
    if (val.source == ValueSource::graph_input) return "a graph input";
    if (val.source == ValueSource::initializer) return "an initializer";
    return "an output of node " + quote(node_name(val.producer));
  }

  // `what()` describes the new value for error messages (built only on error).
  template <typename What>
  int add_value(const std::string& name, ValueSource source, What what) {
    if (name.empty()) invalid(what() + " has no name");
    int v = int(m_.values.size());
    auto [it, inserted] = m_.value_index.emplace(name, v);
    if (!inserted) invalid("value " + quote(name) + " is defined twice: as " + describe(it->second) + " and as " + what());
    m_.values.push_back(Value{});
    m_.values.back().name = name;
    m_.values.back().source = source;
    return v;
  }

  void add_inputs_and_initializers() {
    // Graph inputs that are also initializers (keep_initializers_as_inputs exports) are skipped.
    std::unordered_set<std::string_view> input_names, initialized_inputs;
    for (const auto& in : g_.input()) input_names.insert(in.name());
    for (const auto& t : g_.initializer())
      if (input_names.count(t.name())) initialized_inputs.insert(t.name());
    for (const auto& in : g_.input()) {
      if (initialized_inputs.count(in.name())) continue;
      int v = add_value(in.name(), ValueSource::graph_input, [&] { return "graph input " + quote(in.name()); });
      read_type(in, true, m_.values[v]);
      m_.inputs.push_back(v);
    }
    initializers_begin_ = int(m_.values.size());
    for (const auto& t : g_.initializer()) {
      auto what = [&] { return "initializer " + quote(t.name()); };
      int v = add_value(t.name(), ValueSource::initializer, what);
      Value& val = m_.values[v];
      val.dtype = known_dtype(t.data_type(), what);
      val.shape = tensor_dims(t, what);
      val.shape_known = true;
      int64_t count = checked_element_count(val.shape);
      val.has_data = has_data(t, count);
      if (!is_floating(val.dtype) && count <= options_.max_const_elements) {
        val.value = read_values(t, val.dtype, val.shape, base_dir_, what());
      }
    }
    initializers_end_ = int(m_.values.size());
  }

  // Node output values, in file order (the node order is not known yet), flattened like the
  // inputs: node i's outputs are outputs_[output_begin_[i] .. output_begin_[i + 1]).
  void add_node_outputs() {
    output_begin_.reserve(size_t(g_.node_size()) + 1);
    for (int i = 0; i < g_.node_size(); ++i) {
      output_begin_.push_back(outputs_.size());
      for (const auto& out : g_.node(i).output()) {
        int v = -1;
        if (!out.empty()) {
          v = add_value(out, ValueSource::node_output, [&] { return "an output of node " + quote(node_name(i)); });
          m_.values[v].producer = i;
        }
        outputs_.push_back(v);
      }
    }
    output_begin_.push_back(outputs_.size());
  }

  // Every node input as a value index (-1 when omitted), flattened: node i's inputs are
  // inputs_[input_begin_[i] .. input_begin_[i + 1]).
  // Exporters mostly write a node's inputs as outputs of the node just before it and as the
  // initializers next in file order: those are tried first, one string comparison each, before
  // the name index, whose hash lookups miss the cache on large models. The result is the same
  // (value names are unique).
  void resolve_inputs() {
    input_begin_.reserve(size_t(g_.node_size()) + 1);
    int next_initializer = initializers_begin_;
    auto nearby = [&](int i, const std::string& name) {
      if (next_initializer < initializers_end_ && m_.values[size_t(next_initializer)].name == name)
        return next_initializer++;
      if (i > 0)
        for (size_t k = output_begin_[size_t(i - 1)]; k < output_begin_[size_t(i)]; ++k)
          if (outputs_[k] >= 0 && m_.values[size_t(outputs_[k])].name == name) return outputs_[k];
      return -1;
    };
    for (int i = 0; i < g_.node_size(); ++i) {
      input_begin_.push_back(inputs_.size());
      for (const auto& in : g_.node(i).input()) {
        int v = -1;
        if (!in.empty()) {
          v = nearby(i, in);
          if (v < 0) v = lookup(in);
        }
        if (!in.empty() && v < 0) {
          invalid("node " + quote(node_name(i)) + " (" + g_.node(i).op_type() + ") uses " + quote(in) +
                  ", which no node, initializer or graph input defines");
        }
        inputs_.push_back(v);
      }
    }
    input_begin_.push_back(inputs_.size());
  }

  // File index of the node producing value v, or -1 for inputs, initializers and omitted values.
  int producer_file_index(int v) const {
    return v >= 0 && m_.values[v].source == ValueSource::node_output ? m_.values[v].producer : -1;
  }

  // Kahn's algorithm; among ready nodes the earliest in the file goes first.
  std::vector<int> sort_nodes() {
    const int n = g_.node_size();
    std::vector<int> pending(n, 0);
    std::vector<size_t> consumer_begin(size_t(n) + 1, 0);  // consumers of node p, flattened
    for (int i = 0; i < n; ++i) {
      for (size_t k = input_begin_[i]; k < input_begin_[i + 1]; ++k) {
        int p = producer_file_index(inputs_[k]);
        if (p >= 0) {
          ++pending[i];
          ++consumer_begin[size_t(p) + 1];
        }
      }
    }
    for (int p = 0; p < n; ++p) consumer_begin[p + 1] += consumer_begin[p];
    std::vector<int> consumers(consumer_begin[n]);
    std::vector<size_t> fill(consumer_begin.begin(), consumer_begin.end() - 1);
    for (int i = 0; i < n; ++i) {
      for (size_t k = input_begin_[i]; k < input_begin_[i + 1]; ++k) {
        int p = producer_file_index(inputs_[k]);
        if (p >= 0) consumers[fill[p]++] = i;
      }
    }
    std::priority_queue<int, std::vector<int>, std::greater<int>> ready;
    for (int i = 0; i < n; ++i) {
      if (pending[i] == 0) ready.push(i);
    }
    std::vector<int> order;
    order.reserve(n);
    while (!ready.empty()) {
      int i = ready.top();
      ready.pop();
      order.push_back(i);
      for (size_t k = consumer_begin[i]; k < consumer_begin[i + 1]; ++k) {
        if (--pending[consumers[k]] == 0) ready.push(consumers[k]);
      }
    }
    if (int(order.size()) != n) report_cycle(pending);
    return order;
  }

  // Every unsorted node waits on another unsorted node; walking those waits must revisit a node.
  [[noreturn]] void report_cycle(const std::vector<int>& pending) {
    int start = 0;
    while (pending[start] == 0) ++start;
    std::vector<int> seen_at(pending.size(), -1), path;
    int cur = start;
    while (seen_at[cur] < 0) {
      seen_at[cur] = int(path.size());
      path.push_back(cur);
      for (size_t k = input_begin_[cur]; k < input_begin_[cur + 1]; ++k) {
        int p = producer_file_index(inputs_[k]);
        if (p >= 0 && pending[p] > 0) {
          cur = p;
          break;
        }
      }
    }
    std::string cycle;
    for (size_t k = size_t(seen_at[cur]); k < path.size(); ++k) {
      cycle += quote(node_name(path[k])) + " (" + g_.node(path[k]).op_type() + ") <- ";
    }
    invalid("the graph has a cycle: " + cycle + quote(node_name(cur)) +
            " (each node uses an output of the next); ONNX graphs must be acyclic");
  }

  void add_node(int file_index) {
    const auto& p = g_.node(file_index);
    const int self = int(m_.nodes.size());
    Node& node = m_.nodes.emplace_back();
    node.op = p.op_type();
    node.domain = p.domain() == "ai.onnx" ? "" : p.domain();
    node.name = node_name(file_index);
    node.inputs.assign(inputs_.begin() + input_begin_[file_index], inputs_.begin() + input_begin_[file_index + 1]);
    node.outputs.assign(outputs_.begin() + output_begin_[file_index], outputs_.begin() + output_begin_[file_index + 1]);
    for (int v : node.outputs)
      if (v >= 0) m_.values[v].producer = self;
    node.attrs = convert_attributes(p, node.name);
  }

  // Plain attributes: ints, floats and strings (and lists of them), their type declared.
  static bool plain(const onnx::NodeProto& p) {
    using A = onnx::AttributeProto;
    for (const auto& a : p.attribute()) {
      int t = a.type();
      if (t != A::INT && t != A::FLOAT && t != A::STRING && t != A::INTS && t != A::FLOATS) return false;
    }
    return true;
  }

  // Whether two nodes' plain attributes convert to the same map: the same names, types and
  // values in the same order (floats compared bit for bit).
  static bool same_plain_attributes(const onnx::NodeProto& x, const onnx::NodeProto& y) {
    using A = onnx::AttributeProto;
    if (x.attribute_size() != y.attribute_size()) return false;
    auto bits = [](float f) { uint32_t b; std::memcpy(&b, &f, 4); return b; };
    for (int k = 0; k < x.attribute_size(); ++k) {
      const A& a = x.attribute(k);
      const A& b = y.attribute(k);
      if (a.type() != b.type() || a.name() != b.name()) return false;
      switch (a.type()) {
        case A::INT: if (a.i() != b.i()) return false; break;
        case A::FLOAT: if (bits(a.f()) != bits(b.f())) return false; break;
        case A::STRING: if (a.s() != b.s()) return false; break;
        case A::INTS:
          if (!std::equal(a.ints().begin(), a.ints().end(), b.ints().begin(), b.ints().end())) return false;
          break;
        case A::FLOATS:
          if (!std::equal(a.floats().begin(), a.floats().end(), b.floats().begin(), b.floats().end(),
                          [&](float u, float v) { return bits(u) == bits(v); }))
            return false;
          break;
        default: return false;
      }
    }
    return true;
  }

  // A node's attributes; the last node of the same op type with the same plain attributes
  // shares its copy (100,000 identical convolutions keep one).
  Attributes convert_attributes(const onnx::NodeProto& p, const std::string& node_name) {
    const bool shareable = plain(p);
    LastAttributes* last = nullptr;
    if (shareable) {
      last = &last_attributes_[p.op_type()];
      if (last->node && same_plain_attributes(*last->node, p)) return last->attrs;
    }
    Attributes::Map map;
    for (const auto& a : p.attribute()) map.insert_or_assign(a.name(), convert_attribute(a, node_name));
    if (p.op_type() == "Constant") add_constant_tensor(map);
    Attributes attrs(std::move(map));
    if (shareable) *last = {&p, attrs};
    return attrs;
  }

  Attribute convert_attribute(const onnx::AttributeProto& a, const std::string& node_name) {
    using A = onnx::AttributeProto;
    Attribute out;
    int type = a.type();
    if (type == A::UNDEFINED) {  // very old files omit the type; infer it from the field that is set
      type = a.has_t() ? A::TENSOR : a.ints_size() ? A::INTS : a.floats_size() ? A::FLOATS
           : a.has_s() ? A::STRING : a.has_f() ? A::FLOAT : a.has_i() ? A::INT : A::UNDEFINED;
    }
    switch (type) {
      case A::INT: out.kind = Attribute::Kind::i; out.i = a.i(); break;
      case A::FLOAT: out.kind = Attribute::Kind::f; out.f = a.f(); break;
      case A::STRING: out.kind = Attribute::Kind::s; out.s = a.s(); break;
      case A::INTS: out.kind = Attribute::Kind::ints; out.ints.assign(a.ints().begin(), a.ints().end()); break;
      case A::FLOATS: out.kind = Attribute::Kind::floats; out.floats.assign(a.floats().begin(), a.floats().end()); break;
      case A::TENSOR: {
        out.kind = Attribute::Kind::tensor;
        const std::string what = "attribute " + quote(a.name()) + " of node " + quote(node_name);
        out.tensor_dtype = known_dtype(a.t().data_type(), [&] { return what; });
        out.tensor_shape = tensor_dims(a.t(), [&] { return what; });
        if (checked_element_count(out.tensor_shape) <= options_.max_const_elements) {
          out.tensor = read_values(a.t(), out.tensor_dtype, out.tensor_shape, base_dir_, what);
        }
        break;
      }
      default: break;  // graphs, strings lists, sparse tensors: kept as Kind::other
    }
    return out;
  }

  // Constant's value_int(s) / value_float(s) forms become tensors too, so readers see one form.
  static void add_constant_tensor(Attributes::Map& attrs) {
    for (auto& [key, a] : attrs) {
      ConstValue v;
      if (key == "value_int" && a.kind == Attribute::Kind::i) {
        v = {DType::i64, {}, {a.i}, {}};
      } else if (key == "value_ints" && a.kind == Attribute::Kind::ints) {
        v = {DType::i64, {int64_t(a.ints.size())}, a.ints, {}};
      } else if (key == "value_float" && a.kind == Attribute::Kind::f) {
        v = {DType::f32, {}, {}, {a.f}};
      } else if (key == "value_floats" && a.kind == Attribute::Kind::floats) {
        v = {DType::f32, {int64_t(a.floats.size())}, {}, a.floats};
      } else {
        continue;
      }
      a.tensor_dtype = v.dtype;
      a.tensor_shape = v.shape;
      a.tensor = std::move(v);
    }
  }

  const onnx::ModelProto& proto_;
  const onnx::GraphProto& g_;
  const std::string& name_;
  const std::string& base_dir_;
  const LoadOptions& options_;
  Model m_;
  std::vector<int> inputs_;           // see resolve_inputs()
  std::vector<size_t> input_begin_;
  std::vector<int> outputs_;          // see add_node_outputs()
  int initializers_begin_ = 0, initializers_end_ = 0;  // initializers' values: [begin, end)
  std::vector<size_t> output_begin_;
  struct LastAttributes {
    const onnx::NodeProto* node = nullptr;
    Attributes attrs;
  };
  std::unordered_map<std::string, LastAttributes> last_attributes_;  // by op type
};

void check_parsable_size(uint64_t size, const std::string& name) {
  if (size > uint64_t(INT_MAX)) {
    invalid(quote(name) + " is " + std::to_string(size) + " bytes; protobuf cannot parse ONNX files "
            "over 2 GB: save the weights as external data");
  }
}

}  // namespace

Model load_model_from_bytes(const void* data, size_t size, const std::string& name,
                            const std::string& base_dir, const LoadOptions& options) {
  check_parsable_size(size, name);
  // A large file's digest is computed on another core while this one parses (a small one's is
  // quicker than starting a thread, and is computed by get() below).
  auto hash = [data, size] { return sha256_hex(data, size); };
  auto digest = size >= (size_t(4) << 20) ? async_or_deferred(hash) : std::async(std::launch::deferred, hash);
  // One allocation pool for the parsed message, freed at once: much faster than a message tree
  // of its own allocations. Its blocks stay below malloc's mmap threshold, so the memory freed
  // here is reused by the passes that follow instead of being returned and faulted in again.
  google::protobuf::ArenaOptions arena_options;
  arena_options.start_block_size = 64 << 10;
  arena_options.max_block_size = 64 << 10;
  google::protobuf::Arena arena(arena_options);
  auto& proto = *google::protobuf::Arena::CreateMessage<onnx::ModelProto>(&arena);
  if (!proto.ParseFromArray(data, int(size))) {
    invalid(quote(name) + " is not an ONNX model or is truncated: protobuf parsing failed; "
            "re-export it or check that the download completed");
  }
  Model m = Converter(proto, name, base_dir, options).run();
  m.path = name;
  m.file_bytes = int64_t(size);
  m.sha256 = digest.get();
  return m;
}

Model load_model(const std::string& path, const LoadOptions& options) {
  auto unreadable = [&](int err) {
    return Error(ErrorKind::unreadable, "cannot read model " + quote(path) + ": " + std::strerror(err) + "; check the path");
  };
  struct File {
    int fd;
    ~File() { if (fd >= 0) ::close(fd); }
  } file{::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC)};  // a FIFO must not block
  if (file.fd < 0) throw unreadable(errno);
  struct stat st {};
  if (::fstat(file.fd, &st) != 0) throw unreadable(errno);
  if (S_ISDIR(st.st_mode)) throw unreadable(EISDIR);
  if (!S_ISREG(st.st_mode)) {
    throw Error(ErrorKind::unreadable, "cannot read model " + quote(path) +
                                           ": not a regular file (a FIFO or a device); name the .onnx file");
  }
  check_parsable_size(uint64_t(st.st_size), path);
  std::string bytes(size_t(st.st_size), '\0');
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::read(file.fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw unreadable(n < 0 ? errno : EIO);
    done += size_t(n);
  }
  std::string dir = std::filesystem::path(path).parent_path().string();
  return load_model_from_bytes(bytes.data(), bytes.size(), path, dir.empty() ? "." : dir, options);
}

}  // namespace autovm::model
