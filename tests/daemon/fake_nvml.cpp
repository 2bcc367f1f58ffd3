// A fake libnvidia-ml.so.1 for CPU tests: one GPU ("GPU-fake-nvml" is not
// checked: any UUID is found) that reports a critical Xid event when asked.
//
//   FAKE_NVML_XID_FILE=PATH  nvmlEventSetWait reports one Xid event once PATH
//                            exists (a fatal fault's: the fake driver's
//                            FAKE_CUDA_FAULT_FILE may be the same file);
//                            again after it was removed and made anew
//   FAKE_NVML_XID=N          that event's Xid (default 31: an MMU fault)
//   FAKE_NVML_FAIL=init|register  that call fails (NVML_ERROR_UNKNOWN 999,
//                            NVML_ERROR_NOT_SUPPORTED 3)
//
// Only what lithosd's XidWatcher calls is here.
#include <sys/stat.h>
#include <time.h>

#include <cstdlib>
#include <cstring>

namespace {

struct EventData {
  void* device;
  unsigned long long eventType;
  unsigned long long eventData;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
};

int g_device = 0;  // its address is the device handle
int g_set = 0;     // and the event set's
bool g_registered = false;
bool g_reported = false;  // the current file was reported

bool fails(const char* what) {
  const char* v = std::getenv("FAKE_NVML_FAIL");
  return v != nullptr && std::strcmp(v, what) == 0;
}

void nap_ms(unsigned ms) {
  const timespec t{static_cast<time_t>(ms / 1000), static_cast<long>(ms % 1000) * 1'000'000L};
  nanosleep(&t, nullptr);
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) int nvmlInit_v2() { return fails("init") ? 999 : 0; }
__attribute__((visibility("default"))) int nvmlShutdown() { return 0; }
__attribute__((visibility("default"))) const char* nvmlErrorString(int r) {
  return r == 3 ? "Not Supported" : r == 10 ? "Timeout" : "Unknown Error";
}
__attribute__((visibility("default"))) int nvmlDeviceGetHandleByIndex_v2(unsigned index, void** dev) {
  if (index != 0) return 2;  // NVML_ERROR_INVALID_ARGUMENT
  *dev = &g_device;
  return 0;
}
__attribute__((visibility("default"))) int nvmlDeviceGetHandleByUUID(const char* uuid, void** dev) {
  if (uuid == nullptr) return 2;
  *dev = &g_device;
  return 0;
}
__attribute__((visibility("default"))) int nvmlEventSetCreate(void** set) {
  *set = &g_set;
  return 0;
}
__attribute__((visibility("default"))) int nvmlDeviceRegisterEvents(void* dev, unsigned long long types, void* set) {
  if (fails("register")) return 3;
  if (dev != &g_device || set != &g_set || (types & 0x8) == 0) return 2;
  g_registered = true;
  return 0;
}
__attribute__((visibility("default"))) int nvmlEventSetWait_v2(void* set, EventData* data, unsigned timeout_ms) {
  if (set != &g_set || !g_registered || data == nullptr) return 2;
  const char* path = std::getenv("FAKE_NVML_XID_FILE");
  for (unsigned waited = 0;; waited += 5) {
    struct stat st {};
    const bool there = path != nullptr && ::stat(path, &st) == 0;
    if (!there) g_reported = false;
    if (there && !g_reported) {
      g_reported = true;
      unsigned long long xid = 31;
      if (const char* x = std::getenv("FAKE_NVML_XID")) xid = std::strtoull(x, nullptr, 10);
      data->device = &g_device;
      data->eventType = 0x8;
      data->eventData = xid;
      return 0;
    }
    if (waited >= timeout_ms) return 10;  // NVML_ERROR_TIMEOUT
    nap_ms(5);
  }
}
__attribute__((visibility("default"))) int nvmlEventSetFree(void* set) { return set == &g_set ? 0 : 2; }

}  // extern "C"
