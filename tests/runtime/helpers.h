// Shared by the runtime tests: the hand-written plans in plans/ (AUTOVM_TEST_PLANS), and their
// text mutated by JSON edits for the malformed-plan cases.
#pragma once

#include <autovm/autovm.h>
#include <doctest/doctest.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>

namespace rt_test {

// One letter per residency state, for residency strings written by hand in the tests:
// - unallocated, R resident, E evicting, H on host, P prefetching, D discarded.
inline char letter(autovm_residency r) {
  switch (r) {
    case AUTOVM_RESIDENCY_UNALLOCATED: return '-';
    case AUTOVM_RESIDENCY_RESIDENT: return 'R';
    case AUTOVM_RESIDENCY_EVICTING: return 'E';
    case AUTOVM_RESIDENCY_ON_HOST: return 'H';
    case AUTOVM_RESIDENCY_PREFETCHING: return 'P';
    case AUTOVM_RESIDENCY_DISCARDED: return 'D';
  }
  return '?';
}

inline std::string plans_dir() {
  const char* dir = std::getenv("AUTOVM_TEST_PLANS");
  REQUIRE_MESSAGE(dir != nullptr, "AUTOVM_TEST_PLANS is not set (meson test sets it)");
  return dir;
}

inline std::string plan_path(const std::string& name) { return plans_dir() + "/" + name; }

inline std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE_MESSAGE(in.good(), "cannot read " << path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

inline nlohmann::json plan_json(const std::string& name) {
  return nlohmann::json::parse(read_text(plan_path(name)));
}

// Loads JSON text; returns the status and leaves the message in `error`.
inline autovm_status load_text(const std::string& text, std::string& error,
                               autovm_plan** out = nullptr) {
  autovm_plan* plan = nullptr;
  autovm_status s = autovm_plan_load_from_memory(text.data(), text.size(), &plan);
  error = s == AUTOVM_OK ? "" : autovm_last_error();
  if (out != nullptr) {
    *out = plan;
  } else {
    autovm_plan_free(plan);
  }
  return s;
}

}  // namespace rt_test
