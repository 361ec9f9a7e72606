#include "plan.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

namespace autovm::rt {

const char* name(autovm_action_kind kind) {
  switch (kind) {
    case AUTOVM_ACTION_EVICT: return "evict";
    case AUTOVM_ACTION_PREFETCH: return "prefetch";
    case AUTOVM_ACTION_DISCARD: return "discard";
    case AUTOVM_ACTION_RECOMPUTE: return "recompute";
    case AUTOVM_ACTION_ADVISE: return "advise";
    case AUTOVM_ACTION_READ_REMOTE: return "read_remote";
  }
  return "?";
}

namespace {

using json = nlohmann::json;
constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

template <typename... Parts>
std::string cat(const Parts&... parts) {
  std::ostringstream out;
  (out << ... << parts);
  return out.str();
}

std::string at(const std::string& array, size_t i) { return cat(array, "[", i, "]"); }

// Field access that names the field in every failure.
class Reader {
 public:
  explicit Reader(const std::string& source) : source_(source) {}

  [[noreturn]] void fail(const std::string& where, const std::string& what) const {
    throw Error(AUTOVM_ERR_PLAN, cat("plan '", source_, "': ", where, ": ", what,
                                     "; write the plan again with autovm-plan "
                                     "(schemas/plan.schema.json, docs/execution-model.md)"));
  }

  const json& field(const json& object, const std::string& where, const char* key) const {
    if (!object.is_object()) fail(where, "is not an object");
    auto it = object.find(key);
    if (it == object.end()) fail(where.empty() ? key : where + "." + key, "is missing");
    return *it;
  }
  static std::string path(const std::string& where, const char* key) {
    return where.empty() ? std::string(key) : where + "." + key;
  }

  int64_t integer(const json& value, const std::string& where, int64_t min, int64_t max) const {
    if (!value.is_number_integer()) fail(where, cat("is ", value.type_name(), ", not an integer"));
    int64_t v = 0;
    if (value.is_number_unsigned()) {
      auto u = value.get<uint64_t>();
      if (u > static_cast<uint64_t>(kMax)) fail(where, cat(u, " is out of range"));
      v = static_cast<int64_t>(u);
    } else {
      v = value.get<int64_t>();
    }
    if (v < min || v > max) fail(where, cat(v, " is out of range [", min, ", ", max, "]"));
    return v;
  }
  int64_t integer(const json& object, const std::string& where, const char* key, int64_t min,
                  int64_t max) const {
    return integer(field(object, where, key), path(where, key), min, max);
  }
  std::string string(const json& object, const std::string& where, const char* key) const {
    const json& v = field(object, where, key);
    if (!v.is_string()) fail(path(where, key), cat("is ", v.type_name(), ", not a string"));
    return v.get<std::string>();
  }
  bool boolean(const json& object, const std::string& where, const char* key) const {
    const json& v = field(object, where, key);
    if (!v.is_boolean()) fail(path(where, key), cat("is ", v.type_name(), ", not a boolean"));
    return v.get<bool>();
  }
  const json& array(const json& object, const std::string& where, const char* key) const {
    const json& v = field(object, where, key);
    if (!v.is_array()) fail(path(where, key), cat("is ", v.type_name(), ", not an array"));
    return v;
  }

 private:
  const std::string& source_;
};

autovm_tensor_kind tensor_kind(const Reader& r, const std::string& where, const std::string& s) {
  static const std::pair<const char*, autovm_tensor_kind> kinds[] = {
      {"input", AUTOVM_TENSOR_INPUT},         {"label", AUTOVM_TENSOR_LABEL},
      {"parameter", AUTOVM_TENSOR_PARAMETER}, {"buffer", AUTOVM_TENSOR_BUFFER},
      {"gradient", AUTOVM_TENSOR_GRADIENT},   {"optimizer_state", AUTOVM_TENSOR_OPTIMIZER_STATE},
      {"activation", AUTOVM_TENSOR_ACTIVATION}, {"activation_grad", AUTOVM_TENSOR_ACTIVATION_GRAD},
      {"workspace", AUTOVM_TENSOR_WORKSPACE}};
  for (const auto& [n, k] : kinds)
    if (s == n) return k;
  r.fail(where, cat("unknown tensor kind '", s, "'"));
}

autovm_action_kind action_kind(const Reader& r, const std::string& where, const std::string& s) {
  for (auto k : {AUTOVM_ACTION_EVICT, AUTOVM_ACTION_PREFETCH, AUTOVM_ACTION_DISCARD,
                 AUTOVM_ACTION_RECOMPUTE, AUTOVM_ACTION_ADVISE, AUTOVM_ACTION_READ_REMOTE})
    if (s == name(k)) return k;
  r.fail(where, cat("unknown action kind '", s,
                    "' (evict, prefetch, discard, recompute, advise, read_remote)"));
}

void read_tensors(const Reader& r, const json& root, Plan& p) {
  const json& tensors = r.array(root, "", "tensors");
  p.tensors.reserve(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const json& t = tensors[i];
    const std::string where = at("tensors", i);
    Tensor out;
    out.id = static_cast<TensorId>(
        r.integer(t, where, "id", 0, std::numeric_limits<int32_t>::max()));
    if (static_cast<size_t>(out.id) != i) r.fail(where + ".id", cat(out.id, " is not its position ", i));
    out.name = r.string(t, where, "name");
    out.kind = tensor_kind(r, where + ".kind", r.string(t, where, "kind"));
    out.dtype = r.string(t, where, "dtype");
    out.bytes = r.integer(t, where, "bytes", 0, kMax);
    out.offset = r.integer(t, where, "offset", 0, kMax);
    if (out.bytes > p.arena_bytes || out.offset > p.arena_bytes - out.bytes)
      r.fail(where + ".offset", cat("[", out.offset, ", ", out.offset, " + ", out.bytes,
                                    ") lies beyond the arena (statistics.arena_bytes ",
                                    p.arena_bytes, ")"));
    if (!p.by_name.emplace(out.name, out.id).second)
      r.fail(where + ".name", cat("'", out.name, "' is also the name of tensor ", p.by_name[out.name]));
    p.tensors.push_back(std::move(out));
  }
  // Aliases after all names, so that an alias never shadows a tensor's own name.
  for (size_t i = 0; i < tensors.size(); ++i) {
    auto it = tensors[i].find("aliases");
    if (it == tensors[i].end()) continue;
    const std::string where = at("tensors", i) + ".aliases";
    if (!it->is_array()) r.fail(where, "is not an array");
    for (size_t k = 0; k < it->size(); ++k) {
      const json& a = (*it)[k];
      if (!a.is_string()) r.fail(at(where, k), "is not a string");
      auto [pos, fresh] = p.by_name.emplace(a.get<std::string>(), static_cast<TensorId>(i));
      if (!fresh && pos->second != static_cast<TensorId>(i))
        r.fail(at(where, k), cat("'", a.get<std::string>(), "' already names tensor ", pos->second));
    }
  }
}

void read_steps(const Reader& r, const json& root, Plan& p) {
  const json& steps = r.array(root, "", "steps");
  if (steps.empty()) r.fail("steps", "is empty: a plan has at least one step");
  const auto tensor_count = static_cast<int64_t>(p.tensors.size());
  p.steps.reserve(steps.size());
  for (size_t i = 0; i < steps.size(); ++i) {
    const json& s = steps[i];
    const std::string where = at("steps", i);
    Step out;
    out.id = r.integer(s, where, "id", 0, kMax);
    if (static_cast<size_t>(out.id) != i)
      r.fail(where + ".id", cat(out.id, " is not its position ", i, ": steps must be sorted"));
    out.op = r.string(s, where, "op");
    out.phase = r.string(s, where, "phase");
    out.node = r.string(s, where, "node");
    for (const char* key : {"inputs", "outputs"}) {
      const json& ids = r.array(s, where, key);
      auto& into = key[0] == 'i' ? out.inputs : out.outputs;
      for (size_t k = 0; k < ids.size(); ++k)
        into.push_back(static_cast<TensorId>(
            r.integer(ids[k], at(Reader::path(where, key), k), 0, tensor_count - 1)));
    }
    const json& ws = r.field(s, where, "workspace");
    if (!ws.is_null())
      out.workspace = static_cast<TensorId>(r.integer(ws, where + ".workspace", 0, tensor_count - 1));
    // Optional: the trainer's memory within the workspace (autovm-plan --reserve).
    if (auto b = s.find("reserve_bytes"); b != s.end())
      out.reserve_bytes = r.integer(s, where, "reserve_bytes", 0, kMax);
    // Optional: the planner's predicted compute time, which autovm-replay runs for.
    if (auto c = s.find("compute_us"); c != s.end()) {
      if (!c->is_number() || !(c->get<double>() >= 0.0) || c->get<double>() > 1e12)
        r.fail(where + ".compute_us", "is not a number of microseconds in [0, 1e12]");
      out.compute_us = c->get<double>();
    }
    p.steps.push_back(std::move(out));
  }
}

void read_lifetimes(const Reader& r, const json& root, Plan& p) {
  const json& lifetimes = r.array(root, "", "lifetimes");
  if (lifetimes.size() != p.tensors.size())
    r.fail("lifetimes", cat("has ", lifetimes.size(), " entries for ", p.tensors.size(), " tensors"));
  const StepIndex n = p.step_count();
  for (size_t i = 0; i < lifetimes.size(); ++i) {
    const json& l = lifetimes[i];
    const std::string where = at("lifetimes", i);
    if (r.integer(l, where, "tensor", 0, kMax) != static_cast<int64_t>(i))
      r.fail(where + ".tensor", cat("is not ", i, ": lifetimes are in tensor order"));
    Tensor& t = p.tensors[i];
    t.first = r.integer(l, where, "first", 0, n - 1);
    t.last = r.integer(l, where, "last", t.first, n - 1);
    t.persistent = r.boolean(l, where, "persistent");
    if (t.persistent && (t.first != 0 || t.last != n - 1))
      r.fail(where, cat("tensor '", t.name, "' is persistent but lives [", t.first, ", ", t.last,
                        "], not the whole step [0, ", n - 1, "]"));
  }
}

bool has(const std::vector<TensorId>& ids, TensorId id) {
  return std::find(ids.begin(), ids.end(), id) != ids.end();
}

// A read_remote (docs/execution-model.md, "Remote reads"): step s = ready_before_step =
// after_step + 1 reads the tensor, and only reads it. That it is off there by an evict is
// check_sequences'; that no recompute before s reads it, check_remote_reads'.
void check_remote_read(const Reader& r, const json& a, const std::string& where,
                       const std::string& what, const Action& out, const Plan& p) {
  const StepIndex n = p.step_count();
  if (out.ready_before_step != out.after_step + 1 || out.ready_before_step >= n)
    r.fail(what, cat("ready_before_step ", out.ready_before_step,
                     " must be after_step + 1 and a step (< ", n,
                     "): the step that reads the tensor remotely"));
  const Tensor& t = p.tensors[static_cast<size_t>(out.tensor)];
  const Step& s = p.steps[static_cast<size_t>(out.ready_before_step)];
  const std::string step = cat("step ", s.id, " (", s.op, s.node.empty() ? "" : " " + s.node, ")");
  if (!has(s.inputs, t.id))
    r.fail(what, cat(step, " does not read '", t.name,
                     "': a remote read is of an input of its step"));
  if (has(s.outputs, t.id) || s.workspace == t.id)
    r.fail(what, cat(step, " writes '", t.name, "' (", s.workspace == t.id ? "its workspace" : "an output",
                     "): a step reads remotely only what it does not write"));
  if (auto m = a.find("mechanism"); m != a.end()) {
    static const char* const remote[] = {"mapped", "staged", "prefetch"};
    if (!m->is_string() ||
        std::find(std::begin(remote), std::end(remote), m->get<std::string>()) == std::end(remote))
      r.fail(where + ".mechanism",
             cat(m->is_string() ? "'" + m->get<std::string>() + "'" : std::string(m->type_name()),
                 " cannot read remotely (mapped, staged or prefetch: a mechanism whose device "
                 "profile has a remote_read rate)"));
  }
}

// No recompute before step s reads a tensor s reads remotely (execution model, "Remote reads"):
// the chain runs on the device before s, from resident inputs. One remote read per tensor and
// step.
void check_remote_reads(const Reader& r, const Plan& p) {
  std::map<std::pair<StepIndex, TensorId>, size_t> remote;
  for (size_t i = 0; i < p.actions.size(); ++i) {
    const Action& a = p.actions[i];
    if (a.kind != AUTOVM_ACTION_READ_REMOTE) continue;
    auto [it, fresh] = remote.emplace(std::make_pair(a.ready_before_step, a.tensor), i);
    if (!fresh)
      r.fail(cat(at("actions", i), " (read_remote of '", p.tensors[static_cast<size_t>(a.tensor)].name,
                 "')"),
             cat("repeats ", at("actions", it->second), ": one remote read per tensor and step"));
  }
  for (size_t i = 0; i < p.actions.size(); ++i) {
    const Action& a = p.actions[i];
    if (a.kind != AUTOVM_ACTION_RECOMPUTE) continue;
    for (TensorId x : p.steps[static_cast<size_t>(a.source_step)].inputs) {
      auto it = remote.find({a.ready_before_step, x});
      if (it == remote.end()) continue;
      r.fail(cat(at("actions", it->second), " (read_remote of '",
                 p.tensors[static_cast<size_t>(x)].name, "')"),
             cat("the recompute ", at("actions", i), " before step ", a.ready_before_step,
                 " runs step ", a.source_step, ", which reads the tensor: it must be resident "
                 "there, not read remotely"));
    }
  }
}

void read_actions(const Reader& r, const json& root, Plan& p) {
  const json& actions = r.array(root, "", "actions");
  const StepIndex n = p.step_count();
  p.actions.reserve(actions.size());
  for (size_t i = 0; i < actions.size(); ++i) {
    const json& a = actions[i];
    const std::string where = at("actions", i);
    Action out;
    out.kind = action_kind(r, where + ".kind", r.string(a, where, "kind"));
    out.tensor = static_cast<TensorId>(
        r.integer(a, where, "tensor", 0, static_cast<int64_t>(p.tensors.size()) - 1));
    const Tensor& t = p.tensors[static_cast<size_t>(out.tensor)];
    out.bytes = r.integer(a, where, "bytes", 0, kMax);
    out.after_step = r.integer(a, where, "after_step", -1, n - 1);
    out.ready_before_step = r.integer(a, where, "ready_before_step", 0, n);
    const std::string what = cat(where, " (", name(out.kind), " of '", t.name, "')");
    if (out.kind != AUTOVM_ACTION_ADVISE && out.bytes != t.bytes)
      r.fail(what, cat("bytes ", out.bytes, " differ from the tensor's ", t.bytes));
    switch (out.kind) {
      case AUTOVM_ACTION_EVICT:
      case AUTOVM_ACTION_PREFETCH:
        if (out.ready_before_step <= out.after_step)
          r.fail(what, cat("ready_before_step ", out.ready_before_step,
                           " is not after after_step ", out.after_step));
        break;
      case AUTOVM_ACTION_DISCARD:
        if (out.ready_before_step != out.after_step + 1)
          r.fail(what, cat("ready_before_step ", out.ready_before_step, " is not after_step + 1"));
        break;
      case AUTOVM_ACTION_RECOMPUTE:
        if (out.ready_before_step != out.after_step + 1 || out.ready_before_step >= n)
          r.fail(what, cat("ready_before_step ", out.ready_before_step,
                           " must be after_step + 1 and a step (< ", n, ")"));
        out.source_step = r.integer(a, where, "source_step", 0, out.ready_before_step - 1);
        break;
      case AUTOVM_ACTION_ADVISE: {
        out.advice = r.string(a, where, "advice");
        static const char* const advice[] = {"read_mostly", "preferred_location_device",
                                             "preferred_location_host", "accessed_by_device"};
        if (std::find(std::begin(advice), std::end(advice), out.advice) == std::end(advice))
          r.fail(where + ".advice", cat("unknown advice '", out.advice, "'"));
        break;
      }
      case AUTOVM_ACTION_READ_REMOTE:
        check_remote_read(r, a, where, what, out, p);
        break;
    }
    // Lifetime: a tensor goes off while it exists and comes back within its lifetime; a remote
    // read lies in an off interval, so within the lifetime too.
    if (out.kind == AUTOVM_ACTION_READ_REMOTE) {
      if (out.ready_before_step < t.first || out.ready_before_step > t.last)
        r.fail(what, cat("reads the tensor at step ", out.ready_before_step,
                         ", outside its lifetime [", t.first, ", ", t.last, "]"));
    } else if (out.kind == AUTOVM_ACTION_EVICT || out.kind == AUTOVM_ACTION_DISCARD) {
      if (out.after_step < t.first || out.after_step > t.last)
        r.fail(what, cat("after_step ", out.after_step, " lies outside the lifetime [", t.first,
                         ", ", t.last, "]"));
    } else if (out.kind != AUTOVM_ACTION_ADVISE) {
      StepIndex from = out.kind == AUTOVM_ACTION_PREFETCH ? out.after_step + 1 : out.ready_before_step;
      // A recompute after a non-persistent tensor's lifetime is a chain temporary (execution
      // model, "Recompute chains and temporaries"): resident at that one step.
      const bool temporary = out.kind == AUTOVM_ACTION_RECOMPUTE && !t.persistent && from > t.last;
      if (!temporary && (from < t.first || from > t.last))
        r.fail(what, cat("brings the tensor back at step ", from, ", outside its lifetime [",
                         t.first, ", ", t.last, "]"));
    }
    p.actions.push_back(std::move(out));
  }
}

// Where an action completes on the timeline of issue_point (plan.h).
int64_t complete_point(const Action& a, StepIndex n) {
  switch (a.kind) {
    case AUTOVM_ACTION_EVICT:
    case AUTOVM_ACTION_PREFETCH:
      return a.ready_before_step == n ? 4 * (n - 1) + 3 : 4 * a.ready_before_step;
    default: return issue_point(a);
  }
}

// Follows each tensor's actions through the executor's state machine, in the order the runtime
// will meet them, so that the executor never meets a transition it cannot make.
void check_sequences(const Reader& r, Plan& p) {
  const StepIndex n = p.step_count();
  std::vector<std::vector<size_t>> by_tensor(p.tensors.size());
  for (size_t i = 0; i < p.actions.size(); ++i) {
    const Action& a = p.actions[i];
    const Tensor& t = p.tensors[static_cast<size_t>(a.tensor)];
    const bool temporary = is_chain_temporary(a, t);
    if (a.kind != AUTOVM_ACTION_ADVISE && !temporary)  // a temporary has no state to follow
      by_tensor[static_cast<size_t>(a.tensor)].push_back(i);
  }
  enum class State { on, host, discarded };
  for (size_t t = 0; t < by_tensor.size(); ++t) {
    auto& list = by_tensor[t];
    if (list.empty()) continue;
    std::stable_sort(list.begin(), list.end(), [&](size_t a, size_t b) {
      return issue_point(p.actions[a]) < issue_point(p.actions[b]);
    });
    Tensor& tensor = p.tensors[t];
    const autovm_action_kind first = p.actions[list.front()].kind;
    tensor.starts_on_host = tensor.persistent && (first == AUTOVM_ACTION_PREFETCH ||
                                                  first == AUTOVM_ACTION_READ_REMOTE);
    const State initial = tensor.starts_on_host ? State::host : State::on;
    State state = initial;
    bool evicted = false;  // the plan evicts it somewhere: a remote read has a copy to read
    for (size_t i : list) evicted = evicted || p.actions[i].kind == AUTOVM_ACTION_EVICT;
    for (size_t k = 0; k < list.size(); ++k) {
      const Action& a = p.actions[list[k]];
      const std::string what = cat(at("actions", list[k]), " (", name(a.kind), " of '", tensor.name,
                                   "', after_step ", a.after_step, ")");
      const bool remote = a.kind == AUTOVM_ACTION_READ_REMOTE;
      if (k > 0) {
        const Action& before = p.actions[list[k - 1]];
        if (issue_point(a) < complete_point(before, n)) {
          if (remote)
            r.fail(what, cat("reads the tensor remotely at step ", a.ready_before_step, ", but ",
                             at("actions", list[k - 1]), " (", name(before.kind),
                             ") completes only before step ", before.ready_before_step,
                             ": a remote read needs the tensor off there, its host copy complete"));
          r.fail(what, cat("is issued before ", at("actions", list[k - 1]), " (", name(before.kind),
                           ", ready_before_step ", before.ready_before_step, ") completes"));
        }
      }
      State need = State::on, next = State::on;
      switch (a.kind) {
        case AUTOVM_ACTION_EVICT: need = State::on; next = State::host; break;
        case AUTOVM_ACTION_DISCARD: need = State::on; next = State::discarded; break;
        case AUTOVM_ACTION_PREFETCH: need = State::host; next = State::on; break;
        case AUTOVM_ACTION_RECOMPUTE: need = State::discarded; next = State::on; break;
        case AUTOVM_ACTION_READ_REMOTE: need = State::host; next = State::host; break;
        case AUTOVM_ACTION_ADVISE: break;
      }
      static const char* const names[] = {"resident", "on the host (evicted)", "discarded"};
      if (remote && (state != need || !evicted))
        r.fail(what, cat("reads the tensor remotely at step ", a.ready_before_step,
                         " where the plan has it ",
                         state == State::discarded ? "discarded"
                         : !evicted                ? "never evicted"
                                                   : names[static_cast<int>(state)],
                         ": a remote read is of a tensor an evict has put on the host (a "
                         "discarded tensor has no copy to read; a resident one needs none)"));
      if (state != need)
        r.fail(what, cat("finds the tensor ", names[static_cast<int>(state)], ", not ",
                         names[static_cast<int>(need)], " (a prefetch follows an evict, a "
                         "recompute follows a discard)"));
      state = next;
    }
    if (tensor.persistent && state != initial)
      r.fail(cat("tensor '", tensor.name, "'"),
             cat("is persistent but ends the training step ",
                 state == State::on ? "resident" : "off the GPU", " while it starts it ",
                 initial == State::on ? "resident" : "on the host",
                 ": the next training step would not find it where the plan says"));
  }
}

// Chain temporaries get room after the arena, packed per step (256-byte aligned); the room is
// the largest step's total. A tensor named twice before one step shares its place.
void place_temporaries(Plan& p) {
  std::vector<int64_t> used(static_cast<size_t>(p.step_count()) + 1, 0);
  std::map<std::pair<StepIndex, TensorId>, int64_t> placed;
  for (Action& a : p.actions) {
    const Tensor& t = p.tensors[static_cast<size_t>(a.tensor)];
    if (!is_chain_temporary(a, t))
      continue;
    auto [it, fresh] = placed.emplace(std::make_pair(a.ready_before_step, a.tensor), 0);
    if (fresh) {
      int64_t& top = used[static_cast<size_t>(a.ready_before_step)];
      it->second = top;
      top += (t.bytes + 255) / 256 * 256;
      p.temporary_bytes = std::max(p.temporary_bytes, top);
    }
    a.temporary_offset = it->second;
  }
}

// nlohmann's DOM builder, remembering the last object key it saw, so that a syntax error or a
// number out of range (1e999) names its byte offset and the field it belongs to.
class KeyTrackingSax : public nlohmann::detail::json_sax_dom_parser<json> {
 public:
  KeyTrackingSax(json& doc, const Reader& r) : nlohmann::detail::json_sax_dom_parser<json>(doc, true), r_(r) {}
  bool key(std::string& k) {
    last_key_ = k;
    return nlohmann::detail::json_sax_dom_parser<json>::key(k);
  }
  template <class Exception>
  bool parse_error(std::size_t position, const std::string&, const Exception& e) {
    r_.fail("the file", cat("is not valid JSON at byte ", position,
                            last_key_.empty() ? std::string() : cat(" (after field \"", last_key_, "\")"),
                            " (", e.what(), ")"));
    return false;  // not reached: fail throws
  }

 private:
  const Reader& r_;
  std::string last_key_;
};

}  // namespace

std::vector<StepIndex> last_remote_reads(const Plan& p) {
  std::vector<StepIndex> read(p.tensors.size(), -1), fetched(p.tensors.size(), -1);
  for (const Action& a : p.actions) {
    if (a.kind != AUTOVM_ACTION_PREFETCH && a.kind != AUTOVM_ACTION_READ_REMOTE) continue;
    StepIndex& at = (a.kind == AUTOVM_ACTION_PREFETCH ? fetched : read)[static_cast<size_t>(a.tensor)];
    at = std::max(at, a.kind == AUTOVM_ACTION_PREFETCH ? a.after_step + 1 : a.ready_before_step);
  }
  for (const Tensor& t : p.tensors) {
    const auto i = static_cast<size_t>(t.id);
    if (t.persistent || fetched[i] > read[i]) read[i] = -1;
  }
  return read;
}

Plan load_plan(std::string_view text, std::string source) {
  Plan p;
  p.source = std::move(source);
  Reader r(p.source);
  json root;
  KeyTrackingSax sax(root, r);
  json::sax_parse(text.begin(), text.end(), &sax);
  if (!root.is_object()) r.fail("the file", cat("is a JSON ", root.type_name(), ", not an object"));
  const int64_t version = r.integer(root, "", "schema_version", std::numeric_limits<int64_t>::min(), kMax);
  if (version != 1)
    r.fail("schema_version", cat(version, " is not 1, the only version this runtime reads"));
  const std::string model = r.string(root, "", "execution_model");
  if (model != "autovm-1") r.fail("execution_model", cat("'", model, "' is not 'autovm-1'"));
  const json& options = r.field(root, "", "options");
  p.budget_bytes = r.integer(options, "options", "budget_bytes", 1, kMax);
  if (auto m = options.find("mechanism"); m != options.end() && m->is_string())
    p.mechanism = m->get<std::string>();
  p.arena_bytes = r.integer(r.field(root, "", "statistics"), "statistics", "arena_bytes", 0, kMax);
  read_tensors(r, root, p);
  read_steps(r, root, p);
  read_lifetimes(r, root, p);
  read_actions(r, root, p);
  check_remote_reads(r, p);
  check_sequences(r, p);
  place_temporaries(p);
  return p;
}

Plan load_plan_file(const std::string& path) {
  auto io_error = [&](const std::string& why) {
    return Error(AUTOVM_ERR_IO, "cannot read plan '" + path + "': " + why);
  };
  // O_NONBLOCK: opening a FIFO must not wait for a writer; fstat then refuses all but a file.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) throw io_error(std::string(std::strerror(errno)) + "; check the path and permissions");
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) throw io_error(std::strerror(errno));
  if (S_ISDIR(st.st_mode)) throw io_error("it is a directory; name the plan's JSON file");
  if (!S_ISREG(st.st_mode)) throw io_error("not a regular file (a FIFO or a device); name the plan's JSON file");
  std::string text;
  char buffer[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw io_error(std::strerror(errno));
    if (n == 0) break;
    text.append(buffer, size_t(n));
  }
  return load_plan(text, path);
}

}  // namespace autovm::rt
