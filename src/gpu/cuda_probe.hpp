// The real SmProbe: the %smid kernel launched with the slot mask written into
// its launch descriptor by the descriptor callback; and the watchdog that
// runs a whole calibration (slot map, then topology) in a forked child, so
// that a launch that never finishes is reported instead of hanging
// `lithos calibrate`.
#pragma once

#include <memory>
#include <string>

#include "common/status.hpp"
#include "gpu/calibrate.hpp"
#include "gpu/driver.hpp"
#include "gpu/slot_map.hpp"
#include "gpu/smid_kernel.hpp"
#include "gpu/topology_probe.hpp"
#include "sched/tpc_set.hpp"

namespace lithos::gpu {

class CudaProbe final : public SmProbe {
 public:
  // Retains the primary context of device `ordinal`, makes it current on the
  // calling thread, loads the kernel and installs the descriptor callback.
  // kUnavailable when the descriptor hook is missing or the QMD layout is
  // unknown (checked with one unmasked launch). `api` must outlive the probe.
  // One probe per process at a time (the callback state is global).
  static Result<std::unique_ptr<CudaProbe>> create(const DriverApi& api, int ordinal, const SmidLaunch& launch);
  ~CudaProbe() override;

  ProbeInfo info() const override { return info_; }
  Result<std::set<int>> sms_seen(const SlotMask& mask) override;

  QmdVersion qmd_version() const { return version_; }
  std::uint32_t params_size() const { return params_size_; }

 private:
  CudaProbe() = default;
  const DriverApi* api_ = nullptr;
  CUdevice device_ = 0;
  CUcontext ctx_ = nullptr;
  CUstream stream_ = nullptr;
  std::unique_ptr<SmidKernel> kernel_;
  SmidLaunch launch_;
  ProbeInfo info_;
  QmdVersion version_ = QmdVersion::kUnknown;
  std::uint32_t params_size_ = 0;
};

struct CalibrateRunOptions {
  int device = 0;
  std::string cache_dir;  // "" = default_cache_dir()
  bool force = false;     // ignore the cache, recalibrate and overwrite it
  bool save = true;       // write the cache after a calibration
  int timeout_s = 30;     // the child is killed after this (whole run)
  SmidLaunch launch{};    // per-launch settings (timeout_s = per-launch watchdog)
  CalibrateOptions calibrate{};
  // Measure the topology (which TPCs share a GPC) after the slot map, in the
  // same child, with unmasked cluster launches (gpu/topology_probe.hpp).
  bool measure_topology = true;
  TopologyOptions topology{};
  // Also load or calibrate, in the same child and cache, every other device
  // the process sees (a program may make its first launch on any of them:
  // liblithos then takes that GPU's map from the cache). Stops once half of
  // timeout_s is spent; each device's outcome goes to `others`.
  bool other_devices = false;
};

struct CalibrateRunResult {
  SlotMap map;
  bool from_cache = false;
  std::string cache_path;
  std::string qmd_version;  // "V04_00" ("" when loaded from the cache)
  bool qmd_tested = false;
  std::uint32_t params_size = 0;  // size field of the callback's params (88 on driver 580); 0 from cache
  CalibrateStats stats;           // zero when loaded from the cache
  double seconds = 0;             // wall time, fork to result
  std::string note;               // e.g. why a cached map was not used
  std::string save_error;         // set when the cache could not be written
  // Why map.topology is unknown after a calibration ("" when it was measured,
  // or the map came from the cache). A topology failure never fails the
  // calibration: the map is used and cached without a topology.
  std::string topology_error;
  TopologyStats topology_stats;  // zero when loaded from the cache
  // With other_devices: one entry per other device, "N cached",
  // "N calibrated", "N failed: why" or "N not tried (time)", '; ' between.
  std::string others;
  int device_count = 0;  // the devices the calibration child saw (cuDeviceGetCount)
};

// In an MPS client %smid is a virtual SM id (it proves counts, not
// identities: docs/gpu.md, "Calibration under MPS"), so work that maps mask slots to SMs must
// make its context outside MPS. Made first in such a child, before the
// driver is initialised: points CUDA_MPS_PIPE_DIRECTORY at an empty folder
// of its own, where the driver finds no MPS control daemon and makes a plain
// context (which, in the default compute mode, shares the GPU with a running
// MPS server). The folder is removed with the object.
class OutsideMps {
 public:
  OutsideMps();
  ~OutsideMps();
  OutsideMps(const OutsideMps&) = delete;
  OutsideMps& operator=(const OutsideMps&) = delete;
  // `s`, said with what to do when the context itself was refused: a GPU in
  // exclusive-process compute mode refuses a plain context while an MPS
  // server holds it.
  Status explain(const Status& s) const;

 private:
  std::string dir_;
};

// Loads the cached map for the device or calibrates it, in a forked child
// (the parent never initialises CUDA, so it may call this again). A cached
// map without a topology (format 1, or a failed measurement) on a device with
// thread-block clusters is recalibrated when measure_topology is set. Errors:
// kUnavailable (no driver / GPU / hook), kInternal or kFailedPrecondition
// from calibration, kUnavailable "watchdog" when the child did not finish.
// Must not be called from a process that has already initialised CUDA
// (fork after cuInit is unsupported): such processes run `lithos calibrate`.
// The child calibrates outside MPS (OutsideMps).
Result<CalibrateRunResult> calibrate_device(const CalibrateRunOptions& options);

// The same steps in the calling process, without fork (used by the child;
// exposed for debugging tools). A hung launch leaves the process unusable.
Result<CalibrateRunResult> calibrate_device_in_process(const CalibrateRunOptions& options);

// Launches the %smid kernel with mask_for(map, tpcs) written by the
// descriptor callback and reports the SMs it ran on (in the calling process:
// run it under run_in_child()). Refuses (before any launch) a set mask_for()
// refuses. `api` must outlive the call.
Result<ConfinementCheck> check_mask_confinement(const DriverApi& api, int ordinal, const SlotMap& map,
                                                const sched::TpcSet& tpcs, const SmidLaunch& launch);

}  // namespace lithos::gpu
