// Contract: for_each_index(n, threads, fn) calls fn(i) once for every i in [0, n), on up to
// `threads` threads (the calling one among them), and returns when every call has returned. fn
// must be safe to call at once for different i and should write only to its own i's results:
// then what the caller sees does not depend on the thread count or on timing. If calls throw,
// the exception of the lowest such i is rethrown, after every call has ended.
//
// When no more threads can be started (a process limit), the work runs on those there are.
//
// planning_threads() is how many threads the planner's independent trials use: AUTOVM_THREADS
// when it holds a whole number from 1 to 64 (thread_count_from; the driver rejects any other
// value but the empty one, which counts as unset), else the machine's hardware threads, 1 to 8.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <exception>
#include <future>
#include <system_error>
#include <thread>
#include <vector>

namespace autovm {

// The thread count `text` holds (a whole number from 1 to 64), or 0 when it holds none.
inline size_t thread_count_from(const char* text) {
  size_t n = 0;
  for (const char* c = text; *c != '\0'; ++c) {
    if (*c < '0' || *c > '9' || n > 64) return 0;
    n = n * 10 + size_t(*c - '0');
  }
  return n >= 1 && n <= 64 ? n : 0;
}

// std::async(std::launch::async, fn), or a deferred call of fn (run by get()) when no thread
// can be started.
template <typename Fn>
auto async_or_deferred(Fn&& fn) {
  try {
    return std::async(std::launch::async, fn);
  } catch (const std::system_error&) {
    return std::async(std::launch::deferred, fn);
  }
}

inline size_t planning_threads() {
  if (const char* text = std::getenv("AUTOVM_THREADS"))
    if (size_t n = thread_count_from(text)) return n;
  return std::clamp<size_t>(std::thread::hardware_concurrency(), 1, 8);
}

template <typename Fn>
void for_each_index(size_t n, size_t threads, Fn&& fn) {
  std::vector<std::exception_ptr> errors(n);
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i; (i = next.fetch_add(1)) < n;) {
      try {
        fn(i);
      } catch (...) {
        errors[i] = std::current_exception();
      }
    }
  };
  threads = std::max<size_t>(1, std::min(threads, n));
  std::vector<std::future<void>> others;
  for (size_t w = 1; w < threads; ++w) {
    try {
      others.push_back(std::async(std::launch::async, work));
    } catch (const std::system_error&) {
      break;  // no thread to be had (a process limit): the threads there are do the rest
    }
  }
  work();
  for (auto& f : others) f.get();
  for (const std::exception_ptr& e : errors)
    if (e) std::rethrow_exception(e);
}

}  // namespace autovm
