#include "daemon/xid_watch.hpp"

#include <dlfcn.h>
#include <time.h>

#include <system_error>
#include <utility>

namespace lithos::daemon {

namespace {

// The few NVML declarations used here (nvml.h's, by value).
using nvmlReturn_t = int;
using nvmlDevice_t = void*;
using nvmlEventSet_t = void*;
struct nvmlEventData_t {
  nvmlDevice_t device;
  unsigned long long eventType;
  unsigned long long eventData;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
};
constexpr unsigned long long kXidCriticalError = 0x8;  // nvmlEventTypeXidCriticalError
constexpr nvmlReturn_t kSuccess = 0;
constexpr nvmlReturn_t kTimeout = 10;  // NVML_ERROR_TIMEOUT

template <class F>
bool load(void* lib, const char* sym, F& out) {
  out = reinterpret_cast<F>(::dlsym(lib, sym));
  return out != nullptr;
}

}  // namespace

struct XidWatcher::Api {
  void* lib = nullptr;
  nvmlReturn_t (*init)() = nullptr;
  nvmlReturn_t (*shutdown)() = nullptr;
  nvmlReturn_t (*by_index)(unsigned, nvmlDevice_t*) = nullptr;
  nvmlReturn_t (*by_uuid)(const char*, nvmlDevice_t*) = nullptr;
  nvmlReturn_t (*set_create)(nvmlEventSet_t*) = nullptr;
  nvmlReturn_t (*register_events)(nvmlDevice_t, unsigned long long, nvmlEventSet_t) = nullptr;
  nvmlReturn_t (*wait)(nvmlEventSet_t, nvmlEventData_t*, unsigned) = nullptr;
  nvmlReturn_t (*set_free)(nvmlEventSet_t) = nullptr;
  const char* (*error_string)(nvmlReturn_t) = nullptr;
  nvmlEventSet_t set = nullptr;
  bool initialised = false;

  std::string text(nvmlReturn_t r) const {
    const char* s = error_string != nullptr ? error_string(r) : nullptr;
    return s != nullptr ? std::string(s) : "NVML error " + std::to_string(r);
  }
  ~Api() {
    if (set != nullptr && set_free != nullptr) set_free(set);
    if (initialised && shutdown != nullptr) shutdown();
    if (lib != nullptr) ::dlclose(lib);
  }
};

std::unique_ptr<XidWatcher> XidWatcher::start(const std::string& library, const std::string& uuid, std::string* why) {
  auto api = std::make_unique<Api>();
  const std::string path = library.empty() ? "libnvidia-ml.so.1" : library;
  api->lib = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (api->lib == nullptr) {
    const char* e = ::dlerror();
    *why = "cannot load " + path + (e != nullptr ? std::string(": ") + e : std::string());
    return nullptr;
  }
  if (!load(api->lib, "nvmlInit_v2", api->init) || !load(api->lib, "nvmlShutdown", api->shutdown) ||
      !load(api->lib, "nvmlDeviceGetHandleByIndex_v2", api->by_index) ||
      !load(api->lib, "nvmlDeviceGetHandleByUUID", api->by_uuid) ||
      !load(api->lib, "nvmlEventSetCreate", api->set_create) ||
      !load(api->lib, "nvmlDeviceRegisterEvents", api->register_events) ||
      !load(api->lib, "nvmlEventSetWait_v2", api->wait) || !load(api->lib, "nvmlEventSetFree", api->set_free)) {
    *why = path + " lacks the event functions";
    return nullptr;
  }
  (void)load(api->lib, "nvmlErrorString", api->error_string);
  if (nvmlReturn_t r = api->init(); r != kSuccess) {
    *why = "nvmlInit: " + api->text(r);
    return nullptr;
  }
  api->initialised = true;
  nvmlDevice_t dev = nullptr;
  if (nvmlReturn_t r = uuid.empty() ? api->by_index(0, &dev) : api->by_uuid(uuid.c_str(), &dev); r != kSuccess) {
    *why = "no NVML device " + (uuid.empty() ? std::string("0") : uuid) + ": " + api->text(r);
    return nullptr;
  }
  if (nvmlReturn_t r = api->set_create(&api->set); r != kSuccess) {
    *why = "nvmlEventSetCreate: " + api->text(r);
    return nullptr;
  }
  if (nvmlReturn_t r = api->register_events(dev, kXidCriticalError, api->set); r != kSuccess) {
    *why = "nvmlDeviceRegisterEvents (critical Xid events): " + api->text(r);
    return nullptr;
  }
  std::unique_ptr<XidWatcher> w(new XidWatcher());
  w->api_ = std::move(api);
  try {
    w->thread_ = std::thread([p = w.get()] { p->run(); });
  } catch (const std::system_error& e) {
    *why = std::string("no thread: ") + e.what();
    return nullptr;
  }
  return w;
}

XidWatcher::~XidWatcher() {
  stop_.store(true, std::memory_order_relaxed);
  if (thread_.joinable()) thread_.join();
}

void XidWatcher::run() {
  while (!stop_.load(std::memory_order_relaxed)) {
    nvmlEventData_t data{};
    const nvmlReturn_t r = api_->wait(api_->set, &data, 100);
    if (r == kSuccess) {
      if ((data.eventType & kXidCriticalError) == 0) continue;
      events_.fetch_add(1, std::memory_order_relaxed);
      const std::lock_guard lock(mu_);
      if (queue_.size() < 4096) queue_.push_back(data.eventData);
    } else if (r != kTimeout) {
      // An error other than "nothing came": do not spin on it.
      const timespec nap{0, 100'000'000};
      (void)::nanosleep(&nap, nullptr);
    }
  }
}

std::vector<std::uint64_t> XidWatcher::take() {
  const std::lock_guard lock(mu_);
  return std::exchange(queue_, {});
}

}  // namespace lithos::daemon
