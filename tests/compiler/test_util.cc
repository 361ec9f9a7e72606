// util/parallel.h: every index runs once, on any thread count, and the lowest failing index's
// exception is the one rethrown, after every call has ended.
#include <doctest/doctest.h>

#include <atomic>
#include <cstdlib>
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

TEST_CASE("thread_count_from reads a whole number from 1 to 64, else 0") {
  CHECK(thread_count_from("1") == 1);
  CHECK(thread_count_from("8") == 8);
  CHECK(thread_count_from("64") == 64);
  CHECK(thread_count_from("007") == 7);
  CHECK(thread_count_from("0") == 0);
  CHECK(thread_count_from("65") == 0);
  CHECK(thread_count_from("100000000000000000000000") == 0);
  CHECK(thread_count_from("") == 0);
  CHECK(thread_count_from("-1") == 0);
  CHECK(thread_count_from("2 ") == 0);
  CHECK(thread_count_from("x") == 0);
}

TEST_CASE("planning_threads follows AUTOVM_THREADS, else 1 to 8") {
  const char* saved = std::getenv("AUTOVM_THREADS");
  std::string kept = saved ? saved : "";
  unsetenv("AUTOVM_THREADS");
  CHECK(planning_threads() >= 1);
  CHECK(planning_threads() <= 8);
  setenv("AUTOVM_THREADS", "13", 1);
  CHECK(planning_threads() == 13);
  setenv("AUTOVM_THREADS", "zero", 1);
  CHECK(planning_threads() <= 8);
  if (saved) setenv("AUTOVM_THREADS", kept.c_str(), 1);
  else unsetenv("AUTOVM_THREADS");
}

TEST_CASE("async_or_deferred returns fn's value through get()") {
  int runs = 0;
  auto f = async_or_deferred([&] { ++runs; return 42; });
  CHECK(f.get() == 42);
  CHECK(runs == 1);
}
