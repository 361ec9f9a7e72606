// Contract: with AUTOVM_TIMINGS set in the environment, PassTimer::done(pass) writes to stderr
// the wall time since the previous call (or construction), the calling thread's CPU time over
// the same stretch (robust to other load on the machine, unlike wall time), the process's peak
// resident set and its page faults. Without it, done() does nothing. For profiling only.
#pragma once

#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>

namespace autovm {

class PassTimer {
 public:
  PassTimer() : on_(std::getenv("AUTOVM_TIMINGS") != nullptr), last_(now()), last_cpu_(thread_cpu()) {}
  void done(const char* pass) {
    if (!on_) return;
    double t = now(), cpu = thread_cpu();
    rusage u {};
    getrusage(RUSAGE_SELF, &u);
    std::fprintf(stderr, "autovm-plan: %-22s %8.1f ms  (thread CPU %7.1f ms, peak RSS %ld MB, %ld page faults)\n",
                 pass, (t - last_) * 1e3, (cpu - last_cpu_) * 1e3, u.ru_maxrss >> 10, u.ru_minflt + u.ru_majflt);
    last_ = t;
    last_cpu_ = cpu;
  }

 private:
  static double now() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  }
  static double thread_cpu() {
    rusage r {};
    getrusage(RUSAGE_THREAD, &r);
    return double(r.ru_utime.tv_sec + r.ru_stime.tv_sec) + 1e-6 * double(r.ru_utime.tv_usec + r.ru_stime.tv_usec);
  }
  bool on_;
  double last_;
  double last_cpu_;
};

}  // namespace autovm
