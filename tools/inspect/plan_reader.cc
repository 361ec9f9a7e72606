// Reads a plan's JSON into the structs of plan.h, naming the field in every error.
#include <fmt/format.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>

#include "common.h"
#include "plan.h"

namespace inspect {

using nlohmann::json;

std::string_view name(TensorKind k) {
  switch (k) {
    case TensorKind::input: return "input";
    case TensorKind::label: return "label";
    case TensorKind::parameter: return "parameter";
    case TensorKind::buffer: return "buffer";
    case TensorKind::gradient: return "gradient";
    case TensorKind::optimizer_state: return "optimizer_state";
    case TensorKind::activation: return "activation";
    case TensorKind::activation_grad: return "activation_grad";
    case TensorKind::workspace: return "workspace";
  }
  return "activation";
}

std::string_view name(Phase p) {
  switch (p) {
    case Phase::forward: return "forward";
    case Phase::loss: return "loss";
    case Phase::backward: return "backward";
    case Phase::optimizer: return "optimizer";
  }
  return "forward";
}

std::string_view name(ActionKind k) {
  switch (k) {
    case ActionKind::evict: return "evict";
    case ActionKind::prefetch: return "prefetch";
    case ActionKind::discard: return "discard";
    case ActionKind::recompute: return "recompute";
    case ActionKind::read_remote: return "read_remote";
    case ActionKind::advise: return "advise";
  }
  return "evict";
}

bool persistent(TensorKind k) {
  return k == TensorKind::parameter || k == TensorKind::buffer || k == TensorKind::optimizer_state;
}

std::string Step::label() const {
  if (node.empty()) return fmt::format("{} ({} {})", id, op, name(phase));
  return fmt::format("{} ({} {}, node {})", id, op, name(phase), node);
}

bool Plan::budget_limited() const { return budget_bytes < std::numeric_limits<int64_t>::max(); }

bool Plan::has_step_times() const {
  if (steps.empty()) return false;
  for (const Step& s : steps)
    if (!s.start_us || !s.end_us) return false;
  return true;
}

namespace {

struct DTypeInfo {
  std::string_view name;
  int64_t bytes;
};
constexpr DTypeInfo kDTypes[] = {{"float32", 4}, {"float16", 2}, {"bfloat16", 2}, {"float64", 8},
                                 {"int64", 8},   {"int32", 4},   {"int16", 2},    {"int8", 1},
                                 {"uint8", 1},   {"bool", 1}};

// A JSON value and the path that names it in error messages ("tensors[3].bytes").
class Field {
 public:
  Field(const json& value, std::string path) : v_(value), path_(std::move(path)) {}

  [[noreturn]] void fail(const std::string& what) const {
    throw Failure(Exit::invalid_plan, fmt::format("{}: {}", path_, what));
  }

  Field at(std::string_view key) const {
    object();
    auto it = v_.find(key);
    if (it == v_.end()) {
      throw Failure(Exit::invalid_plan, fmt::format("missing field {}", child(key)));
    }
    return Field(*it, child(key));
  }
  // Required, but may be null (nullopt).
  std::optional<Field> at_nullable(std::string_view key) const {
    Field f = at(key);
    if (f.v_.is_null()) return std::nullopt;
    return f;
  }
  // Absent or null: nullopt.
  std::optional<Field> find(std::string_view key) const {
    object();
    auto it = v_.find(key);
    if (it == v_.end() || it->is_null()) return std::nullopt;
    return Field(*it, child(key));
  }
  std::vector<Field> items() const {
    if (!v_.is_array()) fail(fmt::format("expected an array, found {}", v_.type_name()));
    std::vector<Field> out;
    out.reserve(v_.size());
    for (size_t i = 0; i < v_.size(); ++i) out.emplace_back(v_[i], fmt::format("{}[{}]", path_, i));
    return out;
  }
  int64_t integer() const {
    if (v_.is_number_unsigned() && v_.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max()))
      fail("integer out of range");
    if (v_.is_number_integer()) return v_.get<int64_t>();
    if (v_.is_number_float()) {  // 5.0 is an integer in JSON Schema
      double d = v_.get<double>();
      if (std::floor(d) == d && std::fabs(d) < 9.2e18) return static_cast<int64_t>(d);
    }
    fail(fmt::format("expected an integer, found {}", v_.dump()));
  }
  // A byte count: an integer in [0, kMaxPlanBytes].
  int64_t byte_count() const {
    int64_t b = integer();
    if (b < 0 || b > kMaxPlanBytes)
      fail(fmt::format("{} is out of range: a byte count lies in [0, 2^50]", b));
    return b;
  }
  double number() const {
    if (!v_.is_number()) fail(fmt::format("expected a number, found {}", v_.type_name()));
    return v_.get<double>();
  }
  std::string string() const {
    if (!v_.is_string()) fail(fmt::format("expected a string, found {}", v_.type_name()));
    return v_.get<std::string>();
  }
  bool boolean() const {
    if (!v_.is_boolean()) fail(fmt::format("expected true or false, found {}", v_.type_name()));
    return v_.get<bool>();
  }
  std::vector<int64_t> integers() const {
    std::vector<int64_t> out;
    for (const Field& f : items()) out.push_back(f.integer());
    return out;
  }
  template <typename Enum, size_t N>
  Enum one_of(const std::array<std::string_view, N>& names) const {
    std::string s = string();
    for (size_t i = 0; i < N; ++i)
      if (names[i] == s) return static_cast<Enum>(i);
    fail(fmt::format("unknown value '{}'; expected one of {}", s, join(names, ", ")));
  }
  // Every member as "key" -> its JSON text (nlohmann's objects are sorted by key).
  std::vector<std::pair<std::string, std::string>> members() const {
    object();
    std::vector<std::pair<std::string, std::string>> out;
    for (auto it = v_.begin(); it != v_.end(); ++it) out.emplace_back(it.key(), it->dump());
    return out;
  }

 private:
  void object() const {
    if (!v_.is_object()) fail(fmt::format("expected an object, found {}", v_.type_name()));
  }
  std::string child(std::string_view key) const {
    return path_.empty() ? std::string(key) : fmt::format("{}.{}", path_, key);
  }

  const json& v_;
  std::string path_;
};

constexpr std::array<std::string_view, kTensorKindCount> kKindNames = {
    "input", "label", "parameter", "buffer", "gradient", "optimizer_state", "activation",
    "activation_grad", "workspace"};
constexpr std::array<std::string_view, kPhaseCount> kPhaseNames = {"forward", "loss", "backward",
                                                                    "optimizer"};
constexpr std::array<std::string_view, kActionKindCount> kActionNames = {
    "evict", "prefetch", "discard", "recompute", "read_remote", "advise"};

std::optional<double> optional_number(const Field& f, std::string_view key) {
  auto v = f.find(key);
  return v ? std::optional<double>(v->number()) : std::nullopt;
}
std::optional<int64_t> optional_byte_count(const Field& f, std::string_view key) {
  auto v = f.find(key);
  return v ? std::optional<int64_t>(v->byte_count()) : std::nullopt;
}

Tensor read_tensor(const Field& f) {
  Tensor t;
  t.id = f.at("id").integer();
  t.name = f.at("name").string();
  t.kind = f.at("kind").one_of<TensorKind>(kKindNames);
  Field dtype = f.at("dtype");
  t.dtype = dtype.string();
  for (const DTypeInfo& d : kDTypes)
    if (d.name == t.dtype) t.element_bytes = d.bytes;
  if (t.element_bytes == 0) {
    std::vector<std::string_view> names;
    for (const DTypeInfo& d : kDTypes) names.push_back(d.name);
    dtype.fail(fmt::format("unknown dtype '{}'; expected one of {}", t.dtype, join(names, ", ")));
  }
  t.shape = f.at("shape").integers();
  t.bytes = f.at("bytes").byte_count();
  t.offset = f.at("offset").byte_count();
  return t;
}

Step read_step(const Field& f) {
  Step s;
  s.id = f.at("id").integer();
  s.op = f.at("op").string();
  s.phase = f.at("phase").one_of<Phase>(kPhaseNames);
  s.node = f.at("node").string();
  s.inputs = f.at("inputs").integers();
  s.outputs = f.at("outputs").integers();
  if (auto w = f.at_nullable("workspace")) s.workspace = w->integer();
  s.reserve_bytes = optional_byte_count(f, "reserve_bytes").value_or(0);
  s.compute_us = optional_number(f, "compute_us");
  s.start_us = optional_number(f, "start_us");
  s.end_us = optional_number(f, "end_us");
  s.stall_us = optional_number(f, "stall_us");
  return s;
}

Lifetime read_lifetime(const Field& f) {
  Lifetime l;
  l.tensor = f.at("tensor").integer();
  l.first = f.at("first").integer();
  l.last = f.at("last").integer();
  l.persistent = f.at("persistent").boolean();
  l.uses = f.at("uses").integers();
  return l;
}

Action read_action(const Field& f) {
  Action a;
  a.kind = f.at("kind").one_of<ActionKind>(kActionNames);
  a.tensor = f.at("tensor").integer();
  a.bytes = f.at("bytes").byte_count();
  a.after_step = f.at("after_step").integer();
  a.ready_before_step = f.at("ready_before_step").integer();
  if (a.kind == ActionKind::recompute) a.source_step = f.at("source_step").integer();
  if (auto m = f.find("mechanism")) a.mechanism = m->string();
  if (a.kind == ActionKind::advise) a.advice = f.at("advice").string();
  a.issue_us = optional_number(f, "issue_us");
  a.ready_us = optional_number(f, "ready_us");
  return a;
}

Prediction read_prediction(const Field& f) {
  Prediction p;
  p.policy = f.at("policy").string();
  p.step_time_us = optional_number(f, "step_time_us");
  p.compute_us = optional_number(f, "compute_us");
  p.stall_us = optional_number(f, "stall_us");
  p.recompute_us = optional_number(f, "recompute_us");
  p.bytes_to_host = optional_byte_count(f, "bytes_to_host");
  p.bytes_to_device = optional_byte_count(f, "bytes_to_device");
  p.no_swap_step_time_us = optional_number(f, "no_swap_step_time_us");
  p.bound_us = optional_number(f, "bound_us");
  p.resident_peak_bytes = optional_byte_count(f, "resident_peak_bytes");
  return p;
}

Baseline read_baseline(const Field& f) {
  Baseline b;
  b.policy = f.at("policy").string();
  b.fits = f.at("fits").boolean();
  b.step_time_us = optional_number(f, "step_time_us");
  b.bytes_to_host = optional_byte_count(f, "bytes_to_host");
  b.bytes_to_device = optional_byte_count(f, "bytes_to_device");
  b.resident_peak_bytes = optional_byte_count(f, "resident_peak_bytes");
  if (auto c = f.find("calibrated")) b.calibrated = c->boolean();
  return b;
}

Plan parse(const json& doc, const std::string& path) {
  Field root(doc, "");
  Plan p;
  p.path = path;
  Field version = root.at("schema_version");
  if (version.integer() != 1) {
    version.fail(fmt::format("is {}, this autovm-inspect reads version 1; use the autovm-inspect "
                             "that came with the planner that wrote the plan",
                             version.integer()));
  }
  Field model_name = root.at("execution_model");
  if (model_name.string() != "autovm-1")
    model_name.fail(fmt::format("'{}' is not 'autovm-1', the execution model this tool checks",
                                model_name.string()));
  p.generator = root.at("generator").string();

  Field model = root.at("model");
  p.model_file = model.at("file").string();
  p.model_sha256 = model.at("sha256").string();
  p.batch = model.at("batch").integer();
  p.model_fields = model.members();

  Field options = root.at("options");
  Field budget = options.at("budget_bytes");  // INT64_MAX: no limit
  p.budget_bytes = budget.integer();
  if (p.budget_bytes < 0) budget.fail(fmt::format("{} is negative", p.budget_bytes));
  p.optimizer = options.at("optimizer").string();
  if (auto d = options.find("device")) p.device = d->string();
  if (auto m = options.find("mechanism")) p.mechanism = m->string();
  if (auto m = options.find("movable")) {
    p.movable.emplace();
    for (const Field& f : m->items()) p.movable->push_back(f.one_of<TensorKind>(kKindNames));
  }
  if (auto m = options.find("movable_at_last_use"))
    for (const Field& f : m->items())
      p.movable_at_last_use.push_back(f.one_of<TensorKind>(kKindNames));
  if (auto r = options.find("recompute_ops")) {
    p.recompute_ops.emplace();
    for (const Field& f : r->items()) p.recompute_ops->push_back(f.string());
  }
  if (auto m = options.find("conv_workspaces_measured")) p.conv_workspaces_measured = m->integer();
  if (auto c = options.find("conv_workspaces_cut")) p.conv_workspaces_cut = static_cast<int64_t>(c->items().size());
  p.option_fields = options.members();

  // Each byte count is at most 2^50, so these sums cannot overflow before they are checked.
  Field tensors = root.at("tensors");
  int64_t tensor_bytes = 0;
  for (const Field& f : tensors.items()) {
    p.tensors.push_back(read_tensor(f));
    tensor_bytes += p.tensors.back().bytes;
    if (tensor_bytes > kMaxPlanBytes)
      f.fail("the tensors' bytes sum to more than 2^50 up to here; no device holds that much");
  }
  for (const Field& f : root.at("steps").items()) p.steps.push_back(read_step(f));
  for (const Field& f : root.at("lifetimes").items()) p.lifetimes.push_back(read_lifetime(f));
  int64_t action_bytes = 0;
  for (const Field& f : root.at("actions").items()) {
    p.actions.push_back(read_action(f));
    action_bytes += p.actions.back().bytes;
    if (action_bytes > kMaxPlanBytes)
      f.fail("the actions move more than 2^50 bytes in all up to here; no step moves that much");
  }

  Field stats = root.at("statistics");
  p.peak_bytes = stats.at("peak_bytes").byte_count();
  p.peak_step = stats.at("peak_step").integer();
  p.arena_bytes = stats.at("arena_bytes").byte_count();
  if (auto pred = stats.find("prediction")) p.prediction = read_prediction(*pred);
  if (auto base = stats.find("baselines"))
    for (const Field& f : base->items()) p.baselines.push_back(read_baseline(f));
  return p;
}

}  // namespace

namespace {

// nlohmann's DOM builder, remembering the last object key it saw, so that a syntax error or a
// number out of range (1e999) is reported with its byte offset and the key it belongs to.
class KeyTrackingSax : public nlohmann::detail::json_sax_dom_parser<json> {
 public:
  KeyTrackingSax(json& doc, const std::string& path)
      : nlohmann::detail::json_sax_dom_parser<json>(doc, true), path_(path) {}
  bool key(std::string& k) {
    last_key_ = k;
    return nlohmann::detail::json_sax_dom_parser<json>::key(k);
  }
  template <class Exception>
  bool parse_error(std::size_t position, const std::string&, const Exception& e) {
    throw Failure(Exit::invalid_plan,
                  fmt::format("plan '{}' is not JSON: at byte {}{}: {}", path_, position,
                              last_key_.empty() ? "" : fmt::format(" (after field \"{}\")", last_key_),
                              e.what()));
  }

 private:
  const std::string& path_;
  std::string last_key_;
};

}  // namespace

Plan parse_plan(std::string_view text, const std::string& path) {
  json doc;
  KeyTrackingSax sax(doc, path);
  json::sax_parse(text, &sax);
  try {
    return parse(doc, path);
  } catch (const Failure& e) {
    throw Failure(e.code(), fmt::format("plan '{}' is not a valid plan: {}", path, e.what()));
  }
}

Plan read_plan(const std::string& path) {
  auto unreadable = [&](const std::string& why) {
    return Failure(Exit::unreadable_plan, fmt::format("cannot read plan '{}': {}", path, why));
  };
  // Without O_NONBLOCK, opening a FIFO waits for a writer; fstat then refuses anything but a
  // regular file.
  int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) throw unreadable(std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int saved = errno;
    ::close(fd);
    throw unreadable(std::strerror(saved));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw unreadable(S_ISDIR(st.st_mode) ? "it is a directory; name a plan file"
                                         : "not a regular file (a FIFO or a device); name a plan file");
  }
  std::string text;
  char buffer[1 << 16];
  for (;;) {
    ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int saved = errno;
      ::close(fd);
      throw unreadable(std::strerror(saved));
    }
    if (n == 0) break;
    text.append(buffer, static_cast<size_t>(n));
  }
  ::close(fd);
  return parse_plan(text, path);
}

}  // namespace inspect
