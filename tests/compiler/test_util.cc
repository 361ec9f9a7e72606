// util/parallel.h: every index runs once, on any thread count, and the lowest failing index's
// exception is the one rethrown, after every call has ended.
#include <doctest/doctest.h>

#include <atomic>
#include <stdexcept>
#include <string>
#include <vector>

#include "util/parallel.h"

using namespace autovm;

TEST_CASE("for_each_index calls every index once, whatever the thread count") {
  for (size_t threads : {size_t(1), size_t(2), size_t(3), size_t(8)}) {
    std::vector<std::atomic<int>> calls(1000);
    for_each_index(calls.size(), threads, [&](size_t i) { calls[i].fetch_add(1); });
    for (size_t i = 0; i < calls.size(); ++i) REQUIRE(calls[i].load() == 1);
  }
  int none = 0;
  for_each_index(0, 4, [&](size_t) { ++none; });
  CHECK(none == 0);
}

TEST_CASE("for_each_index rethrows the lowest failing index's exception, after all ran") {
  for (size_t threads : {size_t(1), size_t(4)}) {
    std::vector<std::atomic<int>> calls(50);
    std::string caught;
    try {
      for_each_index(calls.size(), threads, [&](size_t i) {
        calls[i].fetch_add(1);
        if (i == 7 || i == 31 || i == 49) throw std::runtime_error("index " + std::to_string(i));
      });
    } catch (const std::runtime_error& e) {
      caught = e.what();
    }
    CHECK(caught == "index 7");
    for (size_t i = 0; i < calls.size(); ++i) CHECK(calls[i].load() == 1);
  }
}

TEST_CASE("planning_threads is 1 to 8") {
  CHECK(planning_threads() >= 1);
  CHECK(planning_threads() <= 8);
}
