#include "bench/nvml.hpp"

#include <dlfcn.h>

namespace lithos::bench {

// The few NVML entry points used, with their C signatures (NVML's ABI is
// stable; return 0 is NVML_SUCCESS).
struct Nvml::Api {
  void* lib = nullptr;
  int (*init)() = nullptr;
  int (*shutdown)() = nullptr;
  int (*handle_by_index)(unsigned, void**) = nullptr;
  int (*name)(void*, char*, unsigned) = nullptr;
  int (*uuid)(void*, char*, unsigned) = nullptr;
  int (*driver)(char*, unsigned) = nullptr;
  int (*energy)(void*, unsigned long long*) = nullptr;
  struct Utilization {
    unsigned gpu;
    unsigned memory;
  };
  int (*utilization)(void*, Utilization*) = nullptr;
};

namespace {
template <class F>
bool bind(void* lib, const char* sym, F& out) {
  out = reinterpret_cast<F>(::dlsym(lib, sym));
  return out != nullptr;
}
}  // namespace

std::unique_ptr<Nvml> Nvml::open(int index, std::string* why) {
  auto api = std::make_unique<Api>();
  api->lib = ::dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (api->lib == nullptr) {
    if (why != nullptr) *why = "no NVML (libnvidia-ml.so.1 not found): energy and utilisation are not recorded";
    return nullptr;
  }
  const bool ok = bind(api->lib, "nvmlInit_v2", api->init) && bind(api->lib, "nvmlShutdown", api->shutdown) &&
                  bind(api->lib, "nvmlDeviceGetHandleByIndex_v2", api->handle_by_index) &&
                  bind(api->lib, "nvmlDeviceGetName", api->name) && bind(api->lib, "nvmlDeviceGetUUID", api->uuid) &&
                  bind(api->lib, "nvmlSystemGetDriverVersion", api->driver) &&
                  bind(api->lib, "nvmlDeviceGetTotalEnergyConsumption", api->energy) &&
                  bind(api->lib, "nvmlDeviceGetUtilizationRates", api->utilization);
  if (!ok || api->init() != 0) {
    if (why != nullptr) *why = "NVML present but unusable (symbols or nvmlInit failed)";
    ::dlclose(api->lib);
    return nullptr;
  }
  void* dev = nullptr;
  if (api->handle_by_index(static_cast<unsigned>(index), &dev) != 0) {
    if (why != nullptr) *why = "NVML has no device " + std::to_string(index);
    api->shutdown();
    ::dlclose(api->lib);
    return nullptr;
  }
  std::unique_ptr<Nvml> n(new Nvml());
  n->api_ = std::move(api);
  n->device_ = dev;
  return n;
}

Nvml::~Nvml() {
  if (api_ && api_->lib != nullptr) {
    api_->shutdown();
    ::dlclose(api_->lib);
  }
}

DeviceIdentity Nvml::identity() const {
  DeviceIdentity id;
  char buf[256] = {};
  if (api_->name(device_, buf, sizeof buf) == 0) id.name = buf;
  buf[0] = '\0';
  if (api_->uuid(device_, buf, sizeof buf) == 0) id.uuid = buf;
  buf[0] = '\0';
  if (api_->driver(buf, sizeof buf) == 0) id.driver = buf;
  return id;
}

std::optional<double> Nvml::energy_j() const {
  unsigned long long mj = 0;
  if (api_->energy(device_, &mj) != 0) return std::nullopt;
  return static_cast<double>(mj) / 1000.0;
}

std::optional<double> Nvml::busy() const {
  Api::Utilization u{};
  if (api_->utilization(device_, &u) != 0) return std::nullopt;
  return static_cast<double>(u.gpu) / 100.0;
}

}  // namespace lithos::bench
