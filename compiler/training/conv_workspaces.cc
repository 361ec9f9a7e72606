// Measured convolution workspaces (conv_workspaces.h).
#include "training/conv_workspaces.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "util/error.h"
#include "util/json_file.h"

namespace autovm::training {
namespace {

[[noreturn]] void bad(const std::string& path, const std::string& what) {
  throw Error(ErrorKind::usage, fmt::format("convolution workspaces '{}': {}", path, what));
}

// A whole number in [lo, 2^50]: shapes, strides and byte counts alike.
int64_t whole(const std::string& path, const std::string& where, const nlohmann::json& v, int64_t lo) {
  constexpr int64_t kMax = int64_t(1) << 50;
  const bool ok = v.is_number_integer() && !v.is_number_float() &&
                  (v.is_number_unsigned() ? v.get<uint64_t>() <= uint64_t(kMax)
                                          : v.get<int64_t>() >= lo && v.get<int64_t>() <= kMax);
  if (!ok) bad(path, fmt::format("{} must be a whole number from {} to 2^50, not {}", where, lo, v.dump()));
  return v.get<int64_t>();
}

// An optional time in microseconds, in [0, 1e12]; -1 when the entry has none.
double time_us(const std::string& path, const std::string& where, const nlohmann::json& e,
               const char* field) {
  if (!e.contains(field)) return -1;
  const nlohmann::json& v = e[field];
  if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() < 0 ||
      v.get<double>() > 1e12)
    bad(path, fmt::format("{}.{} must be a number of microseconds from 0 to 1e12, not {}", where,
                          field, v.dump()));
  return v.get<double>();
}

Shape list(const std::string& path, const std::string& where, const nlohmann::json& e,
           const char* field, int64_t lo) {
  if (!e.contains(field) || !e[field].is_array())
    bad(path, fmt::format("{} needs \"{}\", a list of whole numbers", where, field));
  Shape out;
  for (size_t i = 0; i < e[field].size(); ++i)
    out.push_back(whole(path, fmt::format("{}.{}[{}]", where, field, i), e[field][i], lo));
  return out;
}

std::optional<DType> dtype_named(const std::string& s) {
  for (DType t : {DType::f32, DType::f16, DType::bf16})
    if (name(t) == s) return t;
  return std::nullopt;
}

const Shape* known_shape(const model::Model& m, int v) {
  if (v < 0 || v >= static_cast<int>(m.values.size())) return nullptr;
  const auto& val = m.values[static_cast<size_t>(v)];
  return val.shape_known ? &val.shape : nullptr;
}

Shape or_ones(Shape s, size_t axes, int64_t fill) {
  if (s.empty()) s.assign(axes, fill);
  return s;
}

}  // namespace

std::string ConvWorkspaceTable::key(const std::string& op, DType compute, const Shape& input,
                                    const Shape& weight, const Shape& output, const Shape& strides,
                                    const Shape& pads, const Shape& dilations, int64_t group) {
  return fmt::format("{} {} in[{}] w[{}] out[{}] s[{}] p[{}] d[{}] g{}", op, name(compute),
                     fmt::join(input, ","), fmt::join(weight, ","), fmt::join(output, ","),
                     fmt::join(strides, ","), fmt::join(pads, ","), fmt::join(dilations, ","), group);
}

ConvWorkspaceTable ConvWorkspaceTable::load(const std::string& path) {
  const nlohmann::json doc = read_json_file("convolution workspaces", path);
  if (!doc.is_object() || !doc.contains("convolutions") || !doc["convolutions"].is_array())
    bad(path, "expected {\"convolutions\": [...]} (python/autovm/conv_workspaces.py writes it)");
  ConvWorkspaceTable t;
  const auto& list_ = doc["convolutions"];
  for (size_t i = 0; i < list_.size(); ++i) {
    const auto& e = list_[i];
    const std::string where = fmt::format("convolutions[{}]", i);
    if (!e.is_object()) bad(path, where + " must be an object");
    const std::string op = e.value("op", "");
    if (op != "Conv" && op != "ConvTranspose")
      bad(path, fmt::format("{}.op must be \"Conv\" or \"ConvTranspose\", not {}", where,
                            e.contains("op") ? e["op"].dump() : "missing"));
    const auto dt = dtype_named(e.value("dtype", ""));
    if (!dt)
      bad(path, fmt::format("{}.dtype must be \"float32\", \"float16\" or \"bfloat16\", not {}", where,
                            e.contains("dtype") ? e["dtype"].dump() : "missing"));
    Shape input = list(path, where, e, "input", 1), weight = list(path, where, e, "weight", 1),
          output = list(path, where, e, "output", 1);
    if (input.size() < 3 || weight.size() != input.size() || output.size() != input.size())
      bad(path, fmt::format("{}: input, weight and output must have the same rank, at least 3 "
                            "([N, C, spatial...]), not {}, {} and {}",
                            where, input.size(), weight.size(), output.size()));
    const size_t axes = input.size() - 2;
    Shape strides = list(path, where, e, "strides", 1), pads = list(path, where, e, "pads", 0),
          dilations = list(path, where, e, "dilations", 1);
    if (strides.size() != axes || pads.size() != axes || dilations.size() != axes)
      bad(path, fmt::format("{}: strides, pads and dilations need one entry per spatial axis ({})",
                            where, axes));
    if (!e.contains("group")) bad(path, where + " needs \"group\"");
    const int64_t group = whole(path, where + ".group", e["group"], 1);
    ConvWorkspace w;
    w.entry = static_cast<int>(i);
    for (const char* f : {"forward_bytes", "backward_bytes"})
      if (!e.contains(f)) bad(path, fmt::format("{} needs \"{}\"", where, f));
    w.forward_bytes = whole(path, where + ".forward_bytes", e["forward_bytes"], 0);
    w.backward_bytes = whole(path, where + ".backward_bytes", e["backward_bytes"], 0);
    w.forward_us = time_us(path, where, e, "forward_us");
    w.backward_us = time_us(path, where, e, "backward_us");
    w.backward_weight_us = time_us(path, where, e, "backward_weight_us");
    t.by_key_[key(op, *dt, input, weight, output, strides, pads, dilations, group)] = w;
  }
  return t;
}

std::optional<ConvWorkspace> ConvWorkspaceTable::find(const model::Model& m, const model::Node& n,
                                                      DType compute) const {
  if (by_key_.empty() || n.inputs.size() < 2 || n.outputs.empty()) return std::nullopt;
  const Shape* x = known_shape(m, n.inputs[0]);
  const Shape* w = known_shape(m, n.inputs[1]);
  const Shape* y = known_shape(m, n.outputs[0]);
  if (!x || !w || !y || x->size() < 3) return std::nullopt;
  const std::string auto_pad = n.attr_s("auto_pad", "NOTSET");
  if (!auto_pad.empty() && auto_pad != "NOTSET") return std::nullopt;  // padding the exporter left to the runtime: no entry states it
  const size_t axes = x->size() - 2;
  Shape pads = n.attr_ints("pads");
  pads = pads.empty() ? Shape(axes, 0) : Shape(pads.begin(), pads.begin() + std::min(pads.size(), axes));
  const auto it = by_key_.find(key(n.op, compute, *x, *w, *y, or_ones(n.attr_ints("strides"), axes, 1),
                                   pads, or_ones(n.attr_ints("dilations"), axes, 1), n.attr_i("group", 1)));
  if (it == by_key_.end()) return std::nullopt;
  return it->second;
}

}  // namespace autovm::training
