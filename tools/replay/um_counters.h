// Contract: CUPTI's unified-memory counters for one measured region: bytes the driver migrated
// each way and GPU page faults. start() before the region, stop() after it (flushes CUPTI's
// buffers; synchronises). Where CUPTI is missing or refuses, available() is false and the
// counts stay zero; never fatal: the counters are extra evidence, not the measurement.
#pragma once

#include <cstdint>
#include <string>

namespace autovm::replay {

struct UmCounts {
  uint64_t bytes_to_device = 0;  // migrated host -> device by the driver
  uint64_t bytes_to_host = 0;    // migrated device -> host by the driver
  uint64_t gpu_page_faults = 0;  // fault groups reported by CUPTI
};

class UmCounters {
 public:
  // Records arrive for activity after start(); start() again begins a new region.
  bool start();
  UmCounts stop();
  bool available() const { return available_; }
  const std::string& why_not() const { return why_not_; }

 private:
  bool available_ = false;
  std::string why_not_;
};

}  // namespace autovm::replay
