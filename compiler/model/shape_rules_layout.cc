// Shape rules of the ops that move data without computing on it (contract in shape_rules.h):
// Flatten, Reshape, Transpose, Concat, Split, Slice, Gather, ScatterND, Shape, Unsqueeze,
// Squeeze, Pad, Resize and Upsample. Most also evaluate, so that shape arithmetic folds.
#include <algorithm>
#include <cmath>
#include <unordered_map>

#include "model/shape_rules.h"

namespace autovm::model::shape_rules {
namespace {

void infer_flatten(Ctx& c) {
  const Shape& x = c.shape(0);
  const int64_t rank = c.rank(0);
  int64_t axis = c.node().attr_i("axis", 1);
  if (axis < -rank || axis > rank) fail("axis " + num(axis) + " is out of range for input " + str(x));
  if (axis < 0) axis += rank;
  c.set(0, c.dtype(0), {product(x.begin(), x.begin() + axis), product(x.begin() + axis, x.end())});
}

void infer_reshape(Ctx& c) {
  const Shape& x = c.shape(0);
  const std::vector<int64_t> target =
      c.opset() < 5 ? c.node().attr_ints("shape") : c.need_ints(1, "target shape");
  const bool allowzero = c.opset() >= 14 && c.node().attr_i("allowzero", 0) != 0;
  Shape out;
  int64_t infer_at = -1, known = 1;
  for (size_t i = 0; i < target.size(); ++i) {
    int64_t t = target[i];
    if (t == 0 && !allowzero) {
      if (i >= x.size()) fail("target shape " + str(target) + " copies dim " + num(int64_t(i)) + " (0), which the input " + str(x) + " lacks");
      t = x[i];
    } else if (t == -1) {
      if (infer_at >= 0) fail("target shape " + str(target) + " has more than one -1");
      infer_at = int64_t(i);
      out.push_back(1);
      continue;
    } else if (t < -1) {
      fail("target shape " + str(target) + " has a negative dim");
    }
    known = mul(known, t);
    out.push_back(t);
  }
  const int64_t count = element_count(x);
  if (infer_at >= 0) {
    if (known == 0 || count % known != 0) {
      fail("cannot reshape " + str(x) + " (" + num(count) + " elements) into " + str(target));
    }
    out[infer_at] = count / known;
  } else if (known != count) {
    fail("cannot reshape " + str(x) + " (" + num(count) + " elements) into " + str(target) + " (" + num(known) + " elements)");
  }
  c.set(0, c.dtype(0), out);
}

void infer_transpose(Ctx& c) {
  const Shape& x = c.shape(0);
  std::vector<int64_t> perm = c.node().attr_ints("perm");
  if (perm.empty()) {
    for (size_t j = x.size(); j-- > 0;) perm.push_back(int64_t(j));
  }
  std::vector<bool> seen(x.size(), false);
  Shape out;
  for (int64_t p : perm) {
    if (perm.size() != x.size() || p < 0 || p >= int64_t(x.size()) || seen[p]) {
      fail("perm " + str(perm) + " is not a permutation of the axes of input " + str(x));
    }
    seen[p] = true;
    out.push_back(x[p]);
  }
  c.set(0, c.dtype(0), out);
}

// Transposes known values (swin's pads are computed through a transposed [2, 2] table).
bool eval_transpose(Ctx& c) {
  const ConstValue& x = *c.value(0);
  const Shape& out_shape = c.out(0).shape;
  std::vector<int64_t> perm = c.node().attr_ints("perm");
  if (perm.empty())
    for (size_t j = x.shape.size(); j-- > 0;) perm.push_back(int64_t(j));
  // in_stride[j]: x's stride along the input axis that output axis j reads.
  std::vector<int64_t> stride(x.shape.size(), 1), in_stride(x.shape.size());
  for (size_t j = x.shape.size(); j-- > 1;) stride[j - 1] = stride[j] * x.shape[j];
  for (size_t j = 0; j < perm.size(); ++j) in_stride[j] = stride[size_t(perm[j])];
  ConstValue out = c.blank(0);
  std::vector<int64_t> coord(out_shape.size(), 0);
  for (int64_t e = 0; e < x.size(); ++e) {
    int64_t at = 0;
    for (size_t j = 0; j < coord.size(); ++j) at += coord[j] * in_stride[j];
    put(out, x, at);
    for (size_t j = coord.size(); j-- > 0;) {
      if (++coord[j] < out_shape[j]) break;
      coord[j] = 0;
    }
  }
  c.set_value(0, std::move(out));
  return true;
}

int64_t concat_axis(const Ctx& c) {
  if (!c.node().attr("axis")) fail("Concat needs an 'axis' attribute");
  return norm_axis(c.node().attr_i("axis", 0), c.rank(0));
}

void infer_concat(Ctx& c) {
  if (c.num_inputs() == 0) fail("Concat needs at least one input");
  const int64_t axis = concat_axis(c);
  Shape out = c.shape(0);
  for (size_t i = 1; i < c.num_inputs(); ++i) {
    const Shape& s = c.shape(i);
    bool ok = s.size() == out.size();
    for (size_t j = 0; ok && j < s.size(); ++j) ok = int64_t(j) == axis || s[j] == out[j];
    if (!ok) fail("input " + num(int64_t(i)) + " has shape " + str(s) + ", which does not match " + str(c.shape(0)) + " except along axis " + num(axis));
    out[axis] = add(out[axis], s[axis]);
  }
  c.set(0, c.dtype(0), out);
}

bool eval_concat(Ctx& c) {
  const int64_t axis = concat_axis(c);
  ConstValue out = c.blank(0);
  const int64_t outer = product(out.shape.begin(), out.shape.begin() + axis);
  const int64_t inner = product(out.shape.begin() + axis + 1, out.shape.end());
  for (int64_t o = 0; o < outer; ++o) {
    for (size_t i = 0; i < c.num_inputs(); ++i) {
      const ConstValue& v = *c.value(i);
      const int64_t chunk = v.shape[axis] * inner;
      for (int64_t e = 0; e < chunk; ++e) put(out, v, o * chunk + e);
    }
  }
  c.set_value(0, std::move(out));
  return true;
}

void infer_split(Ctx& c) {
  const Shape& x = c.shape(0);
  const int64_t axis = norm_axis(c.node().attr_i("axis", 0), c.rank(0)), dim = x[axis];
  const int64_t n = int64_t(c.num_outputs());
  if (n == 0) fail("Split has no outputs");
  std::vector<int64_t> sizes;
  if (c.opset() >= 13 && c.has_input(1)) {
    sizes = c.need_ints(1, "split sizes");
  } else if (c.opset() < 13 && c.node().attr("split")) {
    sizes = c.node().attr_ints("split");
  } else if (c.opset() >= 18 && c.node().attr("num_outputs")) {
    if (c.node().attr_i("num_outputs", 0) != n) {
      fail("num_outputs is " + num(c.node().attr_i("num_outputs", 0)) + " but the node has " + num(n) + " outputs");
    }
    const int64_t chunk = dim / n + (dim % n != 0);  // the last chunk may be smaller
    sizes.assign(size_t(n), chunk);
    sizes.back() = dim - chunk * (n - 1);
    if (sizes.back() < 0) fail("cannot split axis " + num(axis) + " of " + str(x) + " into " + num(n) + " chunks");
  } else {
    if (dim % n != 0) fail("axis " + num(axis) + " of " + str(x) + " does not split evenly into " + num(n) + " outputs");
    sizes.assign(size_t(n), dim / n);
  }
  if (int64_t(sizes.size()) != n) fail("split sizes " + str(sizes) + " do not match the " + num(n) + " outputs");
  int64_t total = 0;
  for (int64_t s : sizes) {
    if (s < 0) fail("split sizes " + str(sizes) + " must be non-negative");
    total = add(total, s);
  }
  if (total != dim) fail("split sizes " + str(sizes) + " sum to " + num(total) + " but axis " + num(axis) + " of " + str(x) + " is " + num(dim));
  for (int64_t k = 0; k < n; ++k) {
    Shape s = x;
    s[axis] = sizes[k];
    c.set(size_t(k), c.dtype(0), s);
  }
}

struct SliceDim {
  int64_t start = 0, step = 1, len = 0;
};

// The effective start, step and length of a Slice along every axis of its input.
std::vector<SliceDim> slice_plan(const Ctx& c) {
  const Shape& x = c.shape(0);
  const int64_t rank = c.rank(0);
  std::vector<int64_t> starts, ends, axes, steps;
  if (c.opset() < 10) {
    starts = c.node().attr_ints("starts");
    ends = c.node().attr_ints("ends");
    axes = c.node().attr_ints("axes");
  } else {
    starts = c.need_ints(1, "starts");
    ends = c.need_ints(2, "ends");
    if (c.has_input(3)) axes = c.need_ints(3, "axes");
    if (c.has_input(4)) steps = c.need_ints(4, "steps");
  }
  if (axes.empty()) {
    for (size_t i = 0; i < starts.size(); ++i) axes.push_back(int64_t(i));
  }
  if (steps.empty()) steps.assign(starts.size(), 1);
  if (ends.size() != starts.size() || axes.size() != starts.size() || steps.size() != starts.size()) {
    fail("starts " + str(starts) + ", ends " + str(ends) + ", axes " + str(axes) + " and steps " + str(steps) + " differ in length");
  }
  std::vector<SliceDim> plan(static_cast<size_t>(rank));
  for (size_t j = 0; j < plan.size(); ++j) plan[j].len = x[j];
  std::vector<bool> seen(size_t(rank), false);
  for (size_t i = 0; i < starts.size(); ++i) {
    const int64_t axis = norm_axis(axes[i], rank), d = x[axis], step = steps[i];
    if (seen[axis]) fail("axes " + str(axes) + " repeat axis " + num(axes[i]));
    seen[axis] = true;
    if (step == 0) fail("steps " + str(steps) + " contain 0");
    int64_t s = starts[i] < 0 ? starts[i] + d : starts[i];
    int64_t e = ends[i] < 0 ? ends[i] + d : ends[i];
    int64_t len = 0;
    if (step > 0) {
      s = std::clamp<int64_t>(s, 0, d);
      e = std::clamp<int64_t>(e, 0, d);
      len = e > s ? (e - s - 1) / step + 1 : 0;
    } else if (d > 0) {
      s = std::clamp<int64_t>(s, 0, d - 1);
      e = std::clamp<int64_t>(e, -1, d - 1);
      const uint64_t magnitude = uint64_t(0) - uint64_t(step);  // safe for INT64_MIN
      len = s > e ? int64_t(uint64_t(s - e - 1) / magnitude) + 1 : 0;
    }
    plan[axis] = {s, step, len};
  }
  return plan;
}

void infer_slice(Ctx& c) {
  Shape out;
  for (const SliceDim& d : slice_plan(c)) out.push_back(d.len);
  c.set(0, c.dtype(0), out);
}

bool eval_slice(Ctx& c) {
  const ConstValue& x = *c.value(0);
  const std::vector<SliceDim> plan = slice_plan(c);
  const size_t rank = plan.size();
  std::vector<int64_t> stride(rank, 1);
  for (size_t j = rank; j-- > 1;) stride[j - 1] = stride[j] * x.shape[j];
  ConstValue out = c.blank(0);
  const int64_t count = element_count(out.shape);
  std::vector<int64_t> coord(rank, 0);
  for (int64_t e = 0; e < count; ++e) {
    int64_t src = 0;
    for (size_t j = 0; j < rank; ++j) src += (plan[j].start + coord[j] * plan[j].step) * stride[j];
    put(out, x, src);
    for (size_t j = rank; j-- > 0;) {
      if (++coord[j] < plan[j].len) break;
      coord[j] = 0;
    }
  }
  c.set_value(0, std::move(out));
  return true;
}

void infer_gather(Ctx& c) {
  const Shape &x = c.shape(0), &idx = c.shape(1);
  if (x.empty()) fail("data must have rank 1 or more");
  if (is_floating(c.dtype(1))) fail("indices must be integers");
  const int64_t axis = norm_axis(c.node().attr_i("axis", 0), c.rank(0));
  Shape out(x.begin(), x.begin() + axis);
  out.insert(out.end(), idx.begin(), idx.end());
  out.insert(out.end(), x.begin() + axis + 1, x.end());
  c.set(0, c.dtype(0), out);
}

bool eval_gather(Ctx& c) {
  const ConstValue &x = *c.value(0), &idx = *c.value(1);
  const int64_t axis = norm_axis(c.node().attr_i("axis", 0), c.rank(0)), d = x.shape[axis];
  const int64_t outer = product(x.shape.begin(), x.shape.begin() + axis);
  const int64_t inner = product(x.shape.begin() + axis + 1, x.shape.end());
  ConstValue out = c.blank(0);
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t k = 0; k < idx.size(); ++k) {
      int64_t i = idx.ints[k];
      if (i < -d || i >= d) fail("index " + num(i) + " is out of range for axis " + num(axis) + " of size " + num(d));
      if (i < 0) i += d;
      for (int64_t e = 0; e < inner; ++e) put(out, x, (o * d + i) * inner + e);
    }
  }
  c.set_value(0, std::move(out));
  return true;
}

// ScatterND: data [r dims], indices [..., k] (k <= r), updates = indices' leading dims + data's
// dims from k on; the output is data with the indexed slices replaced (reduction none) or
// combined with the updates (add, mul, max, min).
void infer_scatter_nd(Ctx& c) {
  const Shape &x = c.shape(0), &idx = c.shape(1), &up = c.shape(2);
  if (is_floating(c.dtype(1))) fail("indices must be integers");
  if (idx.empty() || idx.back() < 1 || idx.back() > int64_t(x.size()))
    fail("indices " + str(idx) + " must end in a dim from 1 to data's rank " + num(int64_t(x.size())));
  Shape want(idx.begin(), idx.end() - 1);
  want.insert(want.end(), x.begin() + idx.back(), x.end());
  if (up != want) fail("updates have shape " + str(up) + "; data " + str(x) + " and indices " + str(idx) + " need " + str(want));
  const std::string r = c.node().attr_s("reduction", "none");
  if (r != "none" && r != "add" && r != "mul" && r != "max" && r != "min")
    fail("reduction " + quote(r) + " is not none, add, mul, max or min");
  c.set(0, c.dtype(0), x);
}

bool eval_scatter_nd(Ctx& c) {
  const ConstValue &x = *c.value(0), &idx = *c.value(1), &up = *c.value(2);
  const int64_t k = idx.shape.back(), tuples = idx.size() / k;
  const int64_t slice = product(x.shape.begin() + k, x.shape.end());
  const std::string r = c.node().attr_s("reduction", "none");
  const bool floats = is_floating(x.dtype);
  std::vector<double> f = x.floats;
  std::vector<int64_t> n = x.ints;
  for (int64_t t = 0; t < tuples; ++t) {
    int64_t at = 0;  // flat offset of the indexed slice
    for (int64_t j = 0; j < k; ++j) {
      const int64_t d = x.shape[size_t(j)];
      int64_t i = idx.ints[size_t(t * k + j)];
      if (i < -d || i >= d) fail("index " + num(i) + " is out of range for axis " + num(j) + " of size " + num(d));
      at = at * d + (i < 0 ? i + d : i);
    }
    at *= slice;
    for (int64_t e = 0; e < slice; ++e) {
      const int64_t o = at + e, u = t * slice + e;
      if (floats) {
        const double v = get_f(up, u);
        double& dst = f[size_t(o)];
        dst = r == "add" ? dst + v : r == "mul" ? dst * v : r == "max" ? std::max(dst, v) : r == "min" ? std::min(dst, v) : v;
      } else {
        const int64_t v = get_i(up, u);
        int64_t& dst = n[size_t(o)];
        dst = r == "add" ? add(dst, v) : r == "mul" ? mul(dst, v) : r == "max" ? std::max(dst, v) : r == "min" ? std::min(dst, v) : v;
      }
    }
  }
  ConstValue out = c.blank(0);
  out.floats = std::move(f);
  out.ints = std::move(n);
  c.set_value(0, std::move(out));
  return true;
}

void infer_shape(Ctx& c) {
  const int64_t rank = c.rank(0);
  auto clamp_end = [rank](int64_t v) { return std::clamp<int64_t>(v < 0 ? v + rank : v, 0, rank); };
  const int64_t start = clamp_end(c.node().attr_i("start", 0)), end = clamp_end(c.node().attr_i("end", rank));
  c.set(0, DType::i64, {std::max<int64_t>(end - start, 0)});
}

bool eval_shape(Ctx& c) {
  const int64_t rank = c.rank(0);
  auto clamp_end = [rank](int64_t v) { return std::clamp<int64_t>(v < 0 ? v + rank : v, 0, rank); };
  const int64_t start = clamp_end(c.node().attr_i("start", 0)), end = clamp_end(c.node().attr_i("end", rank));
  ConstValue out = c.blank(0);
  for (int64_t j = start; j < end; ++j) out.ints.push_back(c.shape(0)[j]);
  c.set_value(0, std::move(out));
  return true;
}

void infer_unsqueeze(Ctx& c) {
  const Shape& x = c.shape(0);
  const std::vector<int64_t> axes = c.opset() >= 13 ? c.need_ints(1, "axes") : c.node().attr_ints("axes");
  if (axes.empty()) fail("Unsqueeze needs axes");
  const int64_t rank = add(c.rank(0), int64_t(axes.size()));
  std::vector<bool> inserted(size_t(rank), false);
  for (int64_t a : axes) {
    int64_t ax = norm_axis(a, rank);
    if (inserted[ax]) fail("axes " + str(axes) + " repeat axis " + num(a));
    inserted[ax] = true;
  }
  Shape out;
  size_t next = 0;
  for (int64_t j = 0; j < rank; ++j) out.push_back(inserted[j] ? 1 : x[next++]);
  c.set(0, c.dtype(0), out);
}

void infer_squeeze(Ctx& c) {
  const Shape& x = c.shape(0);
  std::vector<int64_t> axes;
  if (c.opset() >= 13) {
    if (c.has_input(1)) axes = c.need_ints(1, "axes");
  } else {
    axes = c.node().attr_ints("axes");
  }
  std::vector<bool> removed(x.size(), axes.empty());
  for (int64_t a : axes) {
    int64_t ax = norm_axis(a, c.rank(0));
    if (x[ax] != 1) fail("cannot squeeze axis " + num(a) + " of size " + num(x[ax]) + " (input " + str(x) + ")");
    removed[ax] = true;
  }
  Shape out;
  for (size_t j = 0; j < x.size(); ++j) {
    if (!removed[j] || x[j] != 1) out.push_back(x[j]);
  }
  c.set(0, c.dtype(0), out);
}

void infer_pad(Ctx& c) {
  const Shape& x = c.shape(0);
  const std::vector<int64_t> pads = c.opset() < 11 ? c.node().attr_ints(c.opset() < 2 ? "paddings" : "pads")
                                                   : c.need_ints(1, "pads");
  std::vector<int64_t> axes;
  if (c.opset() >= 18 && c.has_input(3)) {
    for (int64_t a : c.need_ints(3, "axes")) axes.push_back(norm_axis(a, c.rank(0)));
  } else {
    for (size_t j = 0; j < x.size(); ++j) axes.push_back(int64_t(j));
  }
  if (pads.size() != 2 * axes.size()) {
    fail("pads " + str(pads) + " has " + num(int64_t(pads.size())) + " values; input " + str(x) + " needs " + num(2 * int64_t(axes.size())));
  }
  const std::string mode = c.node().attr_s("mode", "constant");
  if (mode != "constant" && mode != "reflect" && mode != "edge" && mode != "wrap") fail("unknown pad mode " + quote(mode));
  Shape out = x;
  for (size_t i = 0; i < axes.size(); ++i) {
    int64_t& d = out[axes[i]];
    d = add(add(d, pads[i]), pads[i + axes.size()]);
    if (d < 0) fail("pads " + str(pads) + " make axis " + num(axes[i]) + " of input " + str(x) + " negative");
  }
  c.set(0, c.dtype(0), out);
}

// Upsample (opset 7-9) and Resize (10+): out[i] = floor(x[i] * scales[i]), or `sizes`.
void infer_resize(Ctx& c) {
  const Shape& x = c.shape(0);
  const Node& n = c.node();
  const std::string mode = n.attr_s("mode", "nearest");
  if (mode != "nearest" && mode != "linear" && mode != "bilinear" && mode != "cubic") {
    fail("mode " + quote(mode) + " is not nearest, linear or cubic");
  }
  std::vector<double> scales;
  if (n.op == "Upsample" && c.opset() < 9) {
    scales = n.attr(std::string("scales")) ? n.attr(std::string("scales"))->floats : std::vector<double>{};
  } else {
    size_t scales_input = n.op == "Upsample" || c.opset() < 11 ? 1 : 2;
    if (n.op == "Resize" && c.opset() >= 11 && c.has_input(3)) {
      std::vector<int64_t> sizes = c.need_ints(3, "sizes");
      if (sizes.size() != x.size()) fail("sizes " + str(sizes) + " do not match input " + str(x));
      c.set(0, c.dtype(0), Shape(sizes.begin(), sizes.end()));
      return;
    }
    const ConstValue& v = c.need_value(scales_input, "scales");
    scales = v.floats;
    if (scales.empty()) for (int64_t i : v.ints) scales.push_back(double(i));
  }
  if (scales.size() != x.size()) fail("scales have " + num(int64_t(scales.size())) + " values; input " + str(x) + " needs one per axis");
  Shape out = x;
  for (size_t i = 0; i < x.size(); ++i) {
    if (!(scales[i] > 0) || scales[i] > 1e6) fail("scale " + std::to_string(scales[i]) + " is not a positive factor");
    out[i] = int64_t(std::floor(double(x[i]) * scales[i]));
  }
  c.set(0, c.dtype(0), out);
}

}  // namespace

const Rule* find_layout_rule(std::string_view op) {
  static const std::unordered_map<std::string_view, Rule> rules = {
      {"Concat", {infer_concat, eval_concat}},
      {"Flatten", {infer_flatten, eval_copy}},
      {"Gather", {infer_gather, eval_gather}},
      {"Pad", {infer_pad}},
      {"Reshape", {infer_reshape, eval_copy}},
      {"Resize", {infer_resize}},
      {"ScatterND", {infer_scatter_nd, eval_scatter_nd}},
      {"Shape", {infer_shape, eval_shape}},
      {"Slice", {infer_slice, eval_slice}},
      {"Split", {infer_split}},
      {"Squeeze", {infer_squeeze, eval_copy}},
      {"Transpose", {infer_transpose, eval_transpose}},
      {"Unsqueeze", {infer_unsqueeze, eval_copy}},
      {"Upsample", {infer_resize}},
  };
  auto it = rules.find(op);
  return it == rules.end() ? nullptr : &it->second;
}

}  // namespace autovm::model::shape_rules
