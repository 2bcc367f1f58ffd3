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
//   FAKE_NVML_FAIL=perm      setting and resetting locked clocks fail with
//                            NVML_ERROR_NO_PERMISSION (4), as for a user
//                            other than root
//
// Clocks, power and energy (lithosd's power management): memory clocks 2619
// and 1593 MHz; SM clocks 1980 down to 345 in 15 MHz steps at 2619 (fewer
// at 1593). The current SM clock is the number in FAKE_NVML_CLOCK_FILE
// (read at each call; 1980 without it), capped by a lock of this process.
// Power is FAKE_NVML_POWER_MW (350000 without it); the energy counter grows
// by that power from the process's first call. Each Set/ResetGpuLockedClocks
// that succeeds is appended to FAKE_NVML_CLOCKS_LOG as "set LO HI" or
// "reset", with the pid ("pid N set 345 1890").
//
// Only what lithosd's XidWatcher and Power call is here.
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
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

unsigned g_lock_hi = 0;  // 0: no lock of this process

double mono_ms() {
  timespec t{};
  clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<double>(t.tv_sec) * 1e3 + static_cast<double>(t.tv_nsec) / 1e6;
}

unsigned env_unsigned(const char* name, unsigned otherwise) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? static_cast<unsigned>(std::strtoul(v, nullptr, 10)) : otherwise;
}

void log_clock(const char* what) {
  const char* path = std::getenv("FAKE_NVML_CLOCKS_LOG");
  if (path == nullptr) return;
  if (FILE* f = std::fopen(path, "a")) {
    std::fprintf(f, "pid %d %s\n", static_cast<int>(getpid()), what);
    std::fclose(f);
  }
}

// Fills `out` (room for *count) with `n` clocks from `top` down in `step` steps.
int fill(unsigned top, unsigned step, unsigned n, unsigned* count, unsigned* out) {
  if (count == nullptr) return 2;
  if (*count < n || out == nullptr) {
    *count = n;
    return 7;  // NVML_ERROR_INSUFFICIENT_SIZE
  }
  for (unsigned i = 0; i < n; ++i) out[i] = top - step * i;
  *count = n;
  return 0;
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
  return r == 3 ? "Not Supported" : r == 4 ? "Insufficient Permissions" : r == 10 ? "Timeout" : "Unknown Error";
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

__attribute__((visibility("default"))) int nvmlDeviceGetSupportedMemoryClocks(void* dev, unsigned* count,
                                                                              unsigned* clocks) {
  if (dev != &g_device) return 2;
  return fill(2619, 1026, 2, count, clocks);
}
__attribute__((visibility("default"))) int nvmlDeviceGetSupportedGraphicsClocks(void* dev, unsigned mem,
                                                                                unsigned* count, unsigned* clocks) {
  if (dev != &g_device) return 2;
  if (mem == 2619) return fill(1980, 15, 110, count, clocks);  // 1980 .. 345
  if (mem == 1593) return fill(1980, 90, 10, count, clocks);
  return 2;
}
__attribute__((visibility("default"))) int nvmlDeviceGetClockInfo(void* dev, int type, unsigned* mhz) {
  if (dev != &g_device || type != 1 || mhz == nullptr) return 2;  // NVML_CLOCK_SM only
  unsigned f = 1980;
  if (const char* path = std::getenv("FAKE_NVML_CLOCK_FILE")) {
    if (FILE* in = std::fopen(path, "r")) {
      unsigned v = 0;
      if (std::fscanf(in, "%u", &v) == 1 && v > 0) f = v;
      std::fclose(in);
    }
  }
  *mhz = g_lock_hi != 0 && g_lock_hi < f ? g_lock_hi : f;
  return 0;
}
__attribute__((visibility("default"))) int nvmlDeviceGetPowerUsage(void* dev, unsigned* mw) {
  if (dev != &g_device || mw == nullptr) return 2;
  *mw = env_unsigned("FAKE_NVML_POWER_MW", 350000);
  return 0;
}
__attribute__((visibility("default"))) int nvmlDeviceGetTotalEnergyConsumption(void* dev, unsigned long long* mj) {
  static const double start = mono_ms();
  if (dev != &g_device || mj == nullptr) return 2;
  const double watts = static_cast<double>(env_unsigned("FAKE_NVML_POWER_MW", 350000)) / 1e3;
  *mj = 1'000'000ULL + static_cast<unsigned long long>((mono_ms() - start) * watts);  // ms * W = mJ
  return 0;
}
__attribute__((visibility("default"))) int nvmlDeviceSetGpuLockedClocks(void* dev, unsigned lo, unsigned hi) {
  if (dev != &g_device) return 2;
  if (fails("perm")) return 4;
  if (lo > hi || hi > 1980 || lo < 345) return 2;
  g_lock_hi = hi;
  char what[64];
  std::snprintf(what, sizeof what, "set %u %u", lo, hi);
  log_clock(what);
  return 0;
}
__attribute__((visibility("default"))) int nvmlDeviceResetGpuLockedClocks(void* dev) {
  if (dev != &g_device) return 2;
  if (fails("perm")) return 4;
  g_lock_hi = 0;
  log_clock("reset");
  return 0;
}

}  // extern "C"
