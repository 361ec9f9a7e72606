// Device profiles: JSON files checked field by field against schemas/device-profile.schema.json
// (by hand: every field named in errors as a path, e.g. 'mechanisms[1].to_host.bandwidth_gbps').
#include "plan/device_profile.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "plan/profile_search.h"
#include "util/error.h"
#include "util/json_file.h"
#include "util/read_file.h"

namespace autovm {

namespace {

using nlohmann::json;

constexpr int kSchemaVersion = 1;

std::string join(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out.empty() ? "(none)" : out;
}

// Reads one JSON object, naming every field by its path in errors.
class Reader {
 public:
  Reader(const std::string& origin, const json& object, std::string path)
      : origin_(origin), object_(object), path_(std::move(path)) {
    if (!object_.is_object()) fail(path_.empty() ? "the profile" : path_, "must be a JSON object");
  }

  // Every key of the object must be one of `known`.
  void only(std::initializer_list<const char*> known) const {
    for (const auto& item : object_.items()) {
      const std::string& key = item.key();  // a structured binding: clang 14 cannot capture one
      bool ok = std::any_of(known.begin(), known.end(), [&](const char* k) { return key == k; });
      if (!ok) fail(field(key), "is not a field of a device profile (check its spelling)");
    }
  }

  bool has(const char* key) const { return object_.contains(key); }

  const json& get(const char* key) const {
    auto it = object_.find(key);
    if (it == object_.end()) fail(field(key), "is missing");
    return *it;
  }

  std::string string(const char* key, bool allow_empty = false) const {
    const json& v = get(key);
    if (!v.is_string()) fail(field(key), "must be a string");
    std::string s = v.get<std::string>();
    if (s.empty() && !allow_empty) fail(field(key), "must not be empty");
    return s;
  }

  // A finite number, > 0 when `positive`, else >= 0, and at most 1e9 (GB/s, TFLOPS, us): a
  // bound that keeps the cost model's sums and quotients finite.
  double number(const char* key, bool positive) const {
    const json& v = get(key);
    if (!v.is_number()) fail(field(key), "must be a number");
    double d = v.get<double>();
    if (!std::isfinite(d) || (positive ? d <= 0 : d < 0) || d > 1e9)
      fail(field(key), fmt::format("must be {} number, at most 1e9, not {}",
                                   positive ? "a positive" : "a non-negative", v.dump()));
    return d;
  }

  // Bytes: a whole number in [1, 2^50] (1 PiB, more than any device holds).
  int64_t whole(const char* key) const {
    const json& v = get(key);
    constexpr int64_t kMaxBytes = int64_t(1) << 50;
    const bool in_range =
        v.is_number_unsigned() ? v.get<uint64_t>() >= 1 && v.get<uint64_t>() <= uint64_t(kMaxBytes)
                               : v.is_number_integer() && v.get<int64_t>() >= 1 && v.get<int64_t>() <= kMaxBytes;
    if (!in_range)
      fail(field(key),
           fmt::format("must be a positive whole number of bytes, at most 2^50, not {}", v.dump()));
    return v.get<int64_t>();
  }

  bool boolean(const char* key) const {
    const json& v = get(key);
    if (!v.is_boolean()) fail(field(key), "must be true or false");
    return v.get<bool>();
  }

  Transfer transfer(const char* key) const {
    Reader r(origin_, get(key), field(key));
    r.only({"bandwidth_gbps", "fixed_us"});
    return Transfer{r.number("bandwidth_gbps", true), r.number("fixed_us", false)};
  }

  std::string field(const std::string& key) const { return path_.empty() ? key : path_ + "." + key; }

  [[noreturn]] void fail(const std::string& field, const std::string& what) const {
    throw Error(ErrorKind::usage, fmt::format("device profile '{}': '{}' {}", origin_, field, what));
  }

 private:
  const std::string& origin_;
  const json& object_;
  std::string path_;
};

std::string read_text(const std::string& path) {
  return read_regular_file("cannot read device profile", path, ErrorKind::usage);
}

}  // namespace

const Mechanism& DeviceProfile::mechanism(std::string_view wanted) const {
  for (const Mechanism& m : mechanisms)
    if (m.name == wanted) return m;
  std::vector<std::string> names;
  for (const Mechanism& m : mechanisms) names.push_back(m.name);
  throw Error(ErrorKind::usage, fmt::format("device profile '{}' has no mechanism '{}'; it has: {}",
                                            name, wanted, join(names)));
}

std::vector<std::string> shipped_profiles() {
  std::set<std::string> names;
  for (const ProfileFolder& folder : profile_search_path()) {
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator(folder.path, ec))
      if (entry.path().extension() == ".json") names.insert(entry.path().stem().string());
  }
  return std::vector<std::string>(names.begin(), names.end());
}

DeviceProfile load_device_profile(const std::string& name_or_path) {
  bool is_path = name_or_path.find('/') != std::string::npos ||
                 (name_or_path.size() >= 5 && name_or_path.ends_with(".json"));
  if (is_path) return parse_device_profile(read_text(name_or_path), name_or_path);

  std::vector<ProfileFolder> folders = profile_search_path();
  auto found = std::find_if(folders.begin(), folders.end(), [&](const ProfileFolder& f) {
    return std::filesystem::is_regular_file(f.path + "/" + name_or_path + ".json");
  });
  if (found == folders.end()) {
    std::string looked;
    for (const ProfileFolder& f : folders) looked += fmt::format("\n  {} ({})", f.path, f.origin);
    throw Error(ErrorKind::usage,
                fmt::format("unknown device '{}'; the shipped profiles are: {}; looked for "
                            "{}.json in:{}\nGive the path of a profile JSON file, or list folders "
                            "of profiles in AUTOVM_PROFILE_PATH (colon-separated)",
                            name_or_path, join(shipped_profiles()), name_or_path,
                            looked.empty() ? " (no folder: set AUTOVM_PROFILE_PATH)" : looked));
  }
  std::string path = found->path + "/" + name_or_path + ".json";
  DeviceProfile p = parse_device_profile(read_text(path), path);
  if (p.name != name_or_path)
    throw Error(ErrorKind::usage, fmt::format("device profile '{}': 'name' is '{}' but the file is "
                                              "named for '{}'", path, p.name, name_or_path));
  return p;
}

DeviceProfile parse_device_profile(const std::string& json_text, const std::string& origin) {
  json doc = parse_json(json_text, "device profile", origin);
  Reader r(origin, doc, "");
  r.only({"$schema", "schema_version", "name", "description", "sources", "memory_bytes",
          "f32_tflops", "f16_tflops", "bf16_tflops", "memory_bandwidth_gbps", "step_overhead_us",
          "mechanisms", "default_mechanism", "demand_paging", "driver_eviction", "discard_gbps"});

  const json& version = r.get("schema_version");
  if (!version.is_number_integer() || version.get<int64_t>() != kSchemaVersion)
    r.fail("schema_version", fmt::format("must be {}, not {}", kSchemaVersion, version.dump()));

  DeviceProfile p;
  p.name = r.string("name");
  p.description = r.string("description");
  const json& sources = r.get("sources");
  if (!sources.is_array() || sources.empty())
    r.fail("sources", "must be a non-empty list of strings (where the figures come from)");
  for (size_t i = 0; i < sources.size(); ++i) {
    if (!sources[i].is_string() || sources[i].get<std::string>().empty())
      r.fail(fmt::format("sources[{}]", i), "must be a non-empty string");
    p.sources.push_back(sources[i].get<std::string>());
  }
  p.memory_bytes = r.whole("memory_bytes");
  p.f32_tflops = r.number("f32_tflops", true);
  p.f16_tflops = r.number("f16_tflops", true);
  p.bf16_tflops = r.number("bf16_tflops", true);
  p.memory_bandwidth_gbps = r.number("memory_bandwidth_gbps", true);
  p.step_overhead_us = r.number("step_overhead_us", false);

  const json& mechanisms = r.get("mechanisms");
  if (!mechanisms.is_array() || mechanisms.empty())
    r.fail("mechanisms", "must be a non-empty list of mechanisms");
  std::set<std::string> seen;
  for (size_t i = 0; i < mechanisms.size(); ++i) {
    std::string path = fmt::format("mechanisms[{}]", i);
    Reader m(origin, mechanisms[i], path);
    m.only({"name", "description", "to_device", "to_host", "duplex", "remote_read"});
    Mechanism mech;
    mech.name = m.string("name");
    if (!seen.insert(mech.name).second) r.fail(path + ".name", "repeats '" + mech.name + "'");
    mech.description = m.string("description", true);
    mech.to_device = m.transfer("to_device");
    mech.to_host = m.transfer("to_host");
    mech.duplex = m.boolean("duplex");
    if (m.has("remote_read")) mech.remote_read = m.transfer("remote_read");
    p.mechanisms.push_back(std::move(mech));
  }
  p.default_mechanism = r.string("default_mechanism");
  if (!seen.contains(p.default_mechanism)) {
    std::vector<std::string> names(seen.begin(), seen.end());
    r.fail("default_mechanism",
           fmt::format("is '{}', which is not among the mechanisms: {}", p.default_mechanism, join(names)));
  }
  p.demand_paging = r.transfer("demand_paging");
  p.driver_eviction = r.transfer("driver_eviction");
  p.discard_gbps = r.number("discard_gbps", true);
  return p;
}

}  // namespace autovm
