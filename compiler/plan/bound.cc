#include "plan/bound.h"

#include <algorithm>

namespace autovm {

StepTimeBound lower_bound(const std::vector<int64_t>& live, const std::vector<int64_t>& recomputable,
                          const std::vector<double>& compute_us, int64_t budget,
                          const Mechanism& mech) {
  StepTimeBound b;
  for (double c : compute_us) b.compute_us += c;
  b.bound_us = b.compute_us;
  double before = 0;
  for (size_t s = 0; s < live.size() && s < compute_us.size(); ++s) {
    int64_t e = live[s] - budget - (s < recomputable.size() ? recomputable[s] : 0);
    double after = b.compute_us - before - compute_us[s];
    if (e > 0) {
      double out = static_cast<double>(e) / (mech.to_host.bandwidth_gbps * 1e3);
      double in = static_cast<double>(e) / (mech.to_device.bandwidth_gbps * 1e3);
      double t = std::max(before, out) + compute_us[s] + std::max(after, in);
      if (t > b.bound_us) {
        b.bound_us = t;
        b.critical_step = static_cast<StepIndex>(s);
        b.must_move_bytes = e;
      }
    }
    before += compute_us[s];
  }
  return b;
}

}  // namespace autovm
