// Contract: HostTimer adds the host's wall time of its scope, in microseconds, to a sum it is
// given (autovm_stats' host times), however the scope is left. Not thread-safe: the caller
// guards the sum.
#pragma once

#include <chrono>

namespace autovm::rt {

class HostTimer {
 public:
  explicit HostTimer(double& sum_us) : sum_us_(sum_us), start_(std::chrono::steady_clock::now()) {}
  ~HostTimer() {
    sum_us_ += std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start_)
                   .count();
  }
  HostTimer(const HostTimer&) = delete;
  HostTimer& operator=(const HostTimer&) = delete;

 private:
  double& sum_us_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace autovm::rt
