// Contract: the stall the compute stream spends waiting for transfers, measured with events only
// (runtime/README.md, "the stall per step"). wait() makes the compute stream wait for an event;
// the first wait before a step records an event before it, and close(step) one after that step's
// waits: the pair times them as one. harvest() reads the pairs whose events have completed,
// oldest first, into BackendStats (with `all`, waiting for the rest). Included by CUDA
// translation units only; failures throw rt::Error naming the call.
#pragma once

#include <cuda_runtime_api.h>

#include <deque>
#include <vector>

#include "backend.h"
#include "cuda_driver.h"

namespace autovm::rt {

class StallTimer {
 public:
  StallTimer() = default;
  ~StallTimer() {
    for (Wait& w : pending_) {
      cudaEventDestroy(w.before);
      cudaEventDestroy(w.after);
    }
    for (cudaEvent_t e : spare_) cudaEventDestroy(e);
  }
  StallTimer(const StallTimer&) = delete;
  StallTimer& operator=(const StallTimer&) = delete;

  // `stream` waits for `event` (nullptr: nothing to wait for).
  void wait(cudaEvent_t event, cudaStream_t stream) {
    if (!event) return;
    if (!open_) {
      before_ = take();
      check(cudaEventRecord(before_, stream), "cudaEventRecord (before waits)");
      open_ = true;
    }
    check(cudaStreamWaitEvent(stream, event, 0), "cudaStreamWaitEvent");
  }

  // The waits before step `step` are all made.
  void close(StepIndex step, cudaStream_t stream) {
    if (!open_) return;
    cudaEvent_t after = take();
    check(cudaEventRecord(after, stream), "cudaEventRecord (after waits)");
    pending_.push_back(Wait{step, before_, after});
    open_ = false;
  }

  void harvest(BackendStats& stats, bool all) {
    while (!pending_.empty()) {
      Wait& w = pending_.front();
      if (all) {
        check(cudaEventSynchronize(w.after), "cudaEventSynchronize");
      } else {
        const cudaError_t s = cudaEventQuery(w.after);
        if (s == cudaErrorNotReady) return;
        check(s, "cudaEventQuery");
      }
      float ms = 0;
      check(cudaEventElapsedTime(&ms, w.before, w.after), "cudaEventElapsedTime");
      const double us = 1000.0 * ms;
      stats.by_step_us[static_cast<size_t>(w.step)] += us;
      stats.total_us += us;
      ++stats.measured;
      if (us > kLateUs) ++stats.late;
      spare_.push_back(w.before);
      spare_.push_back(w.after);
      pending_.pop_front();
    }
  }

 private:
  struct Wait {
    StepIndex step;
    cudaEvent_t before, after;
  };

  cudaEvent_t take() {
    if (!spare_.empty()) {
      cudaEvent_t e = spare_.back();
      spare_.pop_back();
      return e;
    }
    cudaEvent_t e = nullptr;
    check(cudaEventCreate(&e), "cudaEventCreate");
    return e;
  }

  bool open_ = false;
  cudaEvent_t before_ = nullptr;
  std::deque<Wait> pending_;
  std::vector<cudaEvent_t> spare_;
};

}  // namespace autovm::rt
