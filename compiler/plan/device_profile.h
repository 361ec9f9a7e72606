// Contract: a device profile: what a GPU and its link to the host can do, as the cost model
// and the simulator need it. Profiles are JSON files (schemas/device-profile.schema.json);
// shipped ones live in profiles/, are installed to share/autovm/profiles and are found by name
// (plan/profile_search.h). Bandwidths are in GB/s (10^9 bytes per second); fixed costs in
// microseconds per operation.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace autovm {

struct Transfer {
  double bandwidth_gbps = 0;  // sustained bandwidth of one large transfer
  double fixed_us = 0;        // fixed cost of one transfer (launch, page-table work)
  double time_us(int64_t bytes) const {
    return fixed_us + static_cast<double>(bytes) / (bandwidth_gbps * 1e3);
  }
};

// A way to move memory between the GPU and the host.
struct Mechanism {
  std::string name;        // "prefetch", "staged", "pinned_copy", "mapped"
  std::string description;
  Transfer to_device;
  Transfer to_host;
  bool duplex = false;     // both directions at once at full bandwidth; if false, they share the link one at a time
  // Kernels reading a tensor where it lies in host memory, mapped into the GPU's address
  // space (docs/execution-model.md, "Remote reads"); absent (bandwidth 0) when the mechanism
  // cannot give an evicted tensor a device address that reads its host copy.
  Transfer remote_read;
  bool reads_remotely() const { return remote_read.bandwidth_gbps > 0; }
};

struct DeviceProfile {
  std::string name;
  std::string description;
  std::vector<std::string> sources;  // where the figures come from
  int64_t memory_bytes = 0;
  double f32_tflops = 0;             // dense fp32 rate reachable by convolutions
  double f16_tflops = 0;
  double bf16_tflops = 0;
  double memory_bandwidth_gbps = 0;
  double step_overhead_us = 0;       // launch overhead of one step
  std::vector<Mechanism> mechanisms;
  std::string default_mechanism;
  Transfer demand_paging;            // the driver faulting pages in on first touch
  Transfer driver_eviction;          // the driver evicting pages under memory pressure
  double discard_gbps = 0;           // rate of dropping pages without copying

  // Throws Error(usage) naming the mechanism and the ones the profile has.
  const Mechanism& mechanism(std::string_view name) const;
};

// Names of the shipped profiles, sorted: those of every folder of profile_search_path().
std::vector<std::string> shipped_profiles();
// `name_or_path`: a shipped profile's name, or a path to a JSON file (contains '/' or ends in
// .json). A name is NAME.json in the first folder of profile_search_path() that has it.
// Throws Error(usage) for an unknown name (listing the shipped ones and the folders searched)
// and for a file that is unreadable or does not match the schema (naming the field). Unknown
// fields are errors; a shipped profile's "name" must be its file name.
DeviceProfile load_device_profile(const std::string& name_or_path);
DeviceProfile parse_device_profile(const std::string& json_text, const std::string& origin);

inline constexpr const char* kDefaultDevice = "h200-pcie";

}  // namespace autovm
