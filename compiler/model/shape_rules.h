// Contract (internal to model/): what every shape rule is written with. A rule reads its node
// through Ctx (checked access to inputs, their shapes and known values; outputs set with `set`
// and `set_value`) and reports a problem by calling fail(), which infer_shapes turns into an
// Error(invalid_model) naming the node. The rules live by family, each file with its table:
// shape_inference.cc (elementwise, convolution and pooling, normalization, reductions, matrix
// products, constants), shape_rules_layout.cc and shape_rules_dense.cc; find_rule
// (shape_inference.cc) looks an op up in each.
#pragma once

#include <algorithm>
#include <cassert>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "model/model.h"

namespace autovm::model::shape_rules {

struct Failure {
  std::string message;
};

[[noreturn]] inline void fail(std::string message) { throw Failure{std::move(message)}; }

inline std::string quote(std::string_view s) {
  std::string out = "'";
  out.append(s).push_back('\'');
  return out;
}

// "[1, 3, 224, 224]"; with `unknown`, negative dims (symbolic ones) print as "?".
inline std::string str(const Shape& s, bool unknown = false) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + (unknown && s[i] < 0 ? "?" : std::to_string(s[i]));
  return out + "]";
}

inline std::string num(int64_t x) { return std::to_string(x); }

inline int64_t add(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r)) fail("dimension arithmetic overflows: " + num(a) + " + " + num(b));
  return r;
}

inline int64_t mul(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r)) fail("dimension arithmetic overflows: " + num(a) + " x " + num(b));
  return r;
}

inline int64_t product(Shape::const_iterator first, Shape::const_iterator last) {
  int64_t p = 1;
  for (; first != last; ++first) p = mul(p, *first);
  return p;
}

// Normalises a possibly negative axis into [0, rank).
inline int64_t norm_axis(int64_t a, int64_t rank) {
  if (a < -rank || a >= rank) fail("axis " + num(a) + " is out of range for rank " + num(rank));
  return a < 0 ? a + rank : a;
}

// Element access across storage kinds (ints for integer/bool dtypes, floats for floating ones).
inline double get_f(const ConstValue& v, int64_t i) { return is_floating(v.dtype) ? v.floats[i] : double(v.ints[i]); }

inline int64_t to_int(double x) {
  if (!(x >= -9.2e18 && x <= 9.2e18)) fail("value " + std::to_string(x) + " does not fit in an integer");
  return int64_t(x);
}

inline int64_t get_i(const ConstValue& v, int64_t i) { return is_floating(v.dtype) ? to_int(v.floats[i]) : v.ints[i]; }

inline void put(ConstValue& dst, const ConstValue& src, int64_t i) {
  if (is_floating(dst.dtype)) dst.floats.push_back(get_f(src, i));
  else dst.ints.push_back(get_i(src, i));
}

inline void put_number(ConstValue& dst, double x) {
  if (is_floating(dst.dtype)) dst.floats.push_back(x);
  else dst.ints.push_back(to_int(x));
}

// Numpy broadcasting of several shapes.
inline Shape broadcast(const std::vector<const Shape*>& shapes) {
  size_t rank = 0;
  for (const Shape* s : shapes) rank = std::max(rank, s->size());
  Shape out(rank, 1);
  for (const Shape* s : shapes) {
    for (size_t j = 0; j < s->size(); ++j) {
      int64_t d = (*s)[j], &o = out[rank - s->size() + j];
      if (d == o || d == 1) continue;
      if (o != 1) {
        std::string all;
        for (const Shape* t : shapes) all += (all.empty() ? "" : " and ") + str(*t);
        fail("shapes " + all + " do not broadcast");
      }
      o = d;
    }
  }
  return out;
}

// Calls f(offsets) for every element of `out` in order, where offsets[k] is the flat index of
// the matching element of input k under numpy broadcasting.
inline void for_each_broadcast(const Shape& out, const std::vector<const Shape*>& ins,
                        const std::function<void(const std::vector<int64_t>&)>& f) {
  const size_t rank = out.size(), n = ins.size();
  std::vector<std::vector<int64_t>> strides(n, std::vector<int64_t>(rank, 0));
  for (size_t k = 0; k < n; ++k) {
    int64_t running = 1;
    const Shape& s = *ins[k];
    for (size_t j = 0; j < s.size(); ++j) {
      size_t sj = s.size() - 1 - j, oj = rank - 1 - j;
      strides[k][oj] = s[sj] == 1 ? 0 : running;
      running *= s[sj];
    }
  }
  const int64_t count = element_count(out);
  std::vector<int64_t> coord(rank, 0), offset(n, 0);
  for (int64_t e = 0; e < count; ++e) {
    f(offset);
    for (size_t j = rank; j-- > 0;) {
      for (size_t k = 0; k < n; ++k) offset[k] += strides[k][j];
      if (++coord[j] < out[j]) break;
      for (size_t k = 0; k < n; ++k) offset[k] -= strides[k][j] * out[j];
      coord[j] = 0;
    }
  }
}

// The node being inferred, with checked access to its inputs and outputs.
class Ctx {
 public:
  Ctx(Model& m, Node& n) : m_(m), n_(n) {}

  const Node& node() const { return n_; }
  int64_t opset() const { return m_.opset; }

  size_t num_inputs() const { return n_.inputs.size(); }
  bool has_input(size_t i) const { return i < n_.inputs.size() && n_.inputs[i] >= 0; }
  const Value& in(size_t i) const {
    if (!has_input(i)) fail("required input " + num(int64_t(i)) + " is missing");
    return m_.values[n_.inputs[i]];
  }
  const Shape& shape(size_t i) const { return in(i).shape; }
  int64_t rank(size_t i) const { return int64_t(shape(i).size()); }
  DType dtype(size_t i) const { return in(i).dtype; }
  const ConstValue* value(size_t i) const { return has_input(i) && in(i).value ? &*in(i).value : nullptr; }

  // Input i's values, which must be known ahead of time (a target shape, axes, pads...).
  const ConstValue& need_value(size_t i, const std::string& what) const {
    const ConstValue* v = value(i);
    if (!v) {
      fail("its " + what + " (input " + quote(in(i).name) + ") is not known ahead of time; AutoVM "
           "needs it to be a constant or computable from shapes");
    }
    return *v;
  }
  std::vector<int64_t> need_ints(size_t i, const std::string& what) const {
    const ConstValue& v = need_value(i, what);
    if (is_floating(v.dtype)) fail("its " + what + " (input " + quote(in(i).name) + ") must be integers");
    return v.ints;
  }

  size_t num_outputs() const { return n_.outputs.size(); }
  bool has_output(size_t k) const { return k < n_.outputs.size() && n_.outputs[k] >= 0; }
  const Value& out(size_t k) const { return m_.values[n_.outputs[k]]; }

  void set(size_t k, DType dtype, Shape shape) {
    if (checked_element_count(shape) < 0) {
      fail("output " + num(int64_t(k)) + " would have shape " + str(shape) + ", which is negative or too large");
    }
    if (!has_output(k)) return;
    Value& v = m_.values[n_.outputs[k]];
    v.dtype = dtype;
    v.shape = std::move(shape);
    v.shape_known = true;
  }

  // An empty value with output k's dtype and shape, for eval to fill.
  ConstValue blank(size_t k) const {
    ConstValue v;
    if (has_output(k)) {
      v.dtype = out(k).dtype;
      v.shape = out(k).shape;
    }
    return v;
  }
  void set_value(size_t k, ConstValue v) {
    if (!has_output(k)) return;
    assert(int64_t(is_floating(v.dtype) ? v.floats.size() : v.ints.size()) == element_count(v.shape));
    m_.values[n_.outputs[k]].value = std::move(v);
  }

 private:
  Model& m_;
  Node& n_;
};

// Copies input 0's values unchanged into output 0's shape (Identity, Reshape, Flatten, ...).
inline bool eval_copy(Ctx& c) {
  ConstValue out = c.blank(0);
  const ConstValue& x = *c.value(0);
  for (int64_t i = 0; i < x.size(); ++i) put(out, x, i);
  c.set_value(0, std::move(out));
  return true;
}

struct Rule {
  void (*infer)(Ctx&);
  bool (*eval)(Ctx&) = nullptr;  // computes output values from known input values; false if it cannot
};

// The rules of shape_rules_layout.cc (reshaping, slicing, joining, gathering, scattering, padding,
// resizing, Shape); nullptr for any other op.
const Rule* find_layout_rule(std::string_view op);

// The rules of shape_rules_dense.cc (transposed convolution, instance and group normalization,
// variadic elementwise ops, random generators); nullptr for any other op.
const Rule* find_dense_rule(std::string_view op);

}  // namespace autovm::model::shape_rules
