#include "um_counters.h"

#ifdef AUTOVM_WITH_CUPTI
#include <cupti.h>

#include <cstdlib>
#include <mutex>
#endif

namespace autovm::replay {

#ifdef AUTOVM_WITH_CUPTI
namespace {

std::mutex g_mutex;
UmCounts g_counts;

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *size = 8 << 20;
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, *size));
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  CUpti_Activity* record = nullptr;
  std::lock_guard<std::mutex> lock(g_mutex);
  while (cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
    if (record->kind != CUPTI_ACTIVITY_KIND_UNIFIED_MEMORY_COUNTER) continue;
    const auto* um = reinterpret_cast<const CUpti_ActivityUnifiedMemoryCounter3*>(record);
    switch (um->counterKind) {
      case CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_BYTES_TRANSFER_HTOD:
        g_counts.bytes_to_device += um->value;
        break;
      case CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_BYTES_TRANSFER_DTOH:
        g_counts.bytes_to_host += um->value;
        break;
      case CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_GPU_PAGE_FAULT:
        g_counts.gpu_page_faults += um->value;
        break;
      default: break;
    }
  }
  std::free(buffer);
}

bool ok(CUptiResult r, const char* what, std::string& why) {
  if (r == CUPTI_SUCCESS) return true;
  const char* text = nullptr;
  cuptiGetResultString(r, &text);
  why = std::string(what) + ": " + (text ? text : "unknown CUPTI error");
  return false;
}

}  // namespace

bool UmCounters::start() {
  static bool registered = false;
  if (!registered) {
    if (!ok(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed),
            "cuptiActivityRegisterCallbacks", why_not_))
      return available_ = false;
    CUpti_ActivityUnifiedMemoryCounterConfig config[3] = {};
    const CUpti_ActivityUnifiedMemoryCounterKind kinds[3] = {
        CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_BYTES_TRANSFER_HTOD,
        CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_BYTES_TRANSFER_DTOH,
        CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_KIND_GPU_PAGE_FAULT};
    for (int i = 0; i < 3; ++i) {
      config[i].scope = CUPTI_ACTIVITY_UNIFIED_MEMORY_COUNTER_SCOPE_PROCESS_SINGLE_DEVICE;
      config[i].kind = kinds[i];
      config[i].deviceId = 0;
      config[i].enable = 1;
    }
    if (!ok(cuptiActivityConfigureUnifiedMemoryCounter(config, 3),
            "cuptiActivityConfigureUnifiedMemoryCounter", why_not_))
      return available_ = false;
    registered = true;
  }
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    g_counts = UmCounts{};
  }
  available_ = ok(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_UNIFIED_MEMORY_COUNTER),
                  "cuptiActivityEnable(UNIFIED_MEMORY_COUNTER)", why_not_);
  return available_;
}

UmCounts UmCounters::stop() {
  if (!available_) return {};
  cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  cuptiActivityDisable(CUPTI_ACTIVITY_KIND_UNIFIED_MEMORY_COUNTER);
  cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_counts;
}

#else

bool UmCounters::start() {
  why_not_ = "built without CUPTI";
  return available_ = false;
}
UmCounts UmCounters::stop() { return {}; }

#endif

}  // namespace autovm::replay
