// Read-only NVML access for the benchmarks: device identity, the total
// energy counter and utilisation. libnvidia-ml.so.1 is loaded with dlopen
// (no link dependency, no nvml.h needed); nothing is ever set.
#pragma once

#include <memory>
#include <optional>
#include <string>

namespace lithos::bench {

struct DeviceIdentity {
  std::string name;
  std::string uuid;
  std::string driver;
};

class Nvml {
 public:
  // nullptr (with the reason in *why) when NVML or the device is missing.
  static std::unique_ptr<Nvml> open(int index, std::string* why);
  ~Nvml();
  Nvml(const Nvml&) = delete;
  Nvml& operator=(const Nvml&) = delete;

  DeviceIdentity identity() const;
  // Joules since the driver loaded (nvmlDeviceGetTotalEnergyConsumption).
  std::optional<double> energy_j() const;
  // Share of the last sample period in which a kernel ran, 0..1.
  std::optional<double> busy() const;

 private:
  Nvml() = default;
  struct Api;
  std::unique_ptr<Api> api_;
  void* device_ = nullptr;
};

}  // namespace lithos::bench
