// Power management of one GPU (docs/efficiency.md, "Power"): the governor of
// src/sched/power.hpp fed from the daemon's loop, and its actuator, NVML's
// locked clocks. libnvidia-ml.so.1 is loaded with dlopen (no link
// dependency, no nvml.h), as for the Xid events (xid_watch.hpp).
//
// Setting `power`:
//   off      nothing is read or set (the default);
//   dry-run  clocks, power and energy are read, the governor decides, and
//            the clock it would set is logged (at most one line a second)
//            and exported (status, metrics, trace); nothing is ever set;
//   on       the same, and the cap is set: nvmlDeviceSetGpuLockedClocks(
//            lowest supported, chosen), or ResetGpuLockedClocks when the
//            choice is f_max again. A permission or not-supported error is
//            reported once and the GPU goes on in dry-run.
//
// Only a clock lithosd set is reset: at a clean exit (Power's destructor),
// by the guardian when lithosd dies any other way (a `lithos power-reset
// --guard` process started with the first lock, holding a pipe whose end
// means lithosd is gone: it resets if the last word was "locked"), and by
// `lithos power-reset` (systemd's ExecStopPost) where a marker file
// (state_dir/clocks-locked, the GPU's UUID) says lithosd left a lock.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/time.hpp"
#include "daemon/config.hpp"
#include "sched/engine.hpp"
#include "sched/power.hpp"

namespace lithos::daemon {

inline constexpr const char* kClocksLockedFile = "clocks-locked";

// NVML's clocks, power and energy of one GPU.
class Nvml {
 public:
  // The GPU whose UUID is `uuid` ("" = NVML's device 0) through `library`
  // ("" = libnvidia-ml.so.1); nullptr with the reason in *why.
  static std::unique_ptr<Nvml> open(const std::string& library, const std::string& uuid, std::string* why);
  ~Nvml();
  Nvml(const Nvml&) = delete;
  Nvml& operator=(const Nvml&) = delete;

  // The supported SM (graphics) clocks at the highest memory clock,
  // ascending; empty with *why when NVML cannot say.
  std::vector<int> supported_mhz(std::string* why) const;
  std::optional<int> sm_clock_mhz() const;
  std::optional<double> power_w() const;
  std::optional<double> energy_j() const;  // since the driver loaded
  // NVML's return code (0: success) and its text.
  int set_locked(int lo_mhz, int hi_mhz) const;
  int reset_locked() const;
  std::string text(int r) const;

  static constexpr int kNoPermission = 4;  // NVML_ERROR_NO_PERMISSION
  static constexpr int kNotSupported = 3;  // NVML_ERROR_NOT_SUPPORTED

 private:
  Nvml() = default;
  struct Api;
  std::unique_ptr<Api> api_;
};

struct PowerOptions {
  PowerMode mode = PowerMode::kOff;
  std::string library;  // "" = libnvidia-ml.so.1
  std::string uuid;     // "" = NVML's device 0
  sched::PowerConfig config;
  // The program to run as the guardian (`lithos`); "": none (the clocks
  // are then reset at a clean exit only, which start() says).
  std::string guardian_exe;
  std::string state_dir;  // where the marker file goes; "": none
};

class Power {
 public:
  // nullptr, with the reason in *why, when the mode is off or NVML cannot
  // serve the GPU (lithosd goes on without power management).
  static std::unique_ptr<Power> start(const PowerOptions& o, std::string* why);
  ~Power();  // resets a clock it set
  Power(const Power&) = delete;
  Power& operator=(const Power&) = delete;

  // Atom `a` (still in the Engine's state) ran from `start` to `end`.
  void completed(const sched::InflightAtom& a, Time start, Time end);
  // Samples the clock every 10 ms, and power and energy and decides every
  // decide_interval; sets or would set. The decision, when one was taken.
  std::optional<sched::PowerDecision> tick(std::uint64_t now_ns, const sched::EngineState& state);
  int sm_clock_mhz() const { return clock_mhz_; }
  double power_w() const { return power_w_; }
  // For `lithos status`: mode, chosen clock, S, changes, power, energy, saving.
  std::string status_json() const;
  PowerMode mode() const { return mode_; }
  const sched::PowerGovernor& governor() const { return gov_; }

 private:
  explicit Power(const PowerOptions& o);
  void apply(int mhz);
  void reset();
  void tell_guardian(char c);
  void mark(bool locked);

  PowerOptions opt_;
  PowerMode mode_ = PowerMode::kOff;
  std::string why_dry_run_;  // why "on" went on in dry-run
  std::unique_ptr<Nvml> nvml_;
  sched::PowerGovernor gov_;
  int lowest_mhz_ = 0;
  int clock_mhz_ = 0;  // last sampled SM clock
  double power_w_ = 0.0;
  std::optional<double> energy_j_;  // last counter reading
  std::uint64_t last_sample_ns_ = 0, last_energy_ns_ = 0, last_log_ns_ = 0;
  bool locked_ = false;  // a lock of ours is in place
  int locked_mhz_ = 0;
  std::uint64_t sets_ = 0, resets_ = 0, set_errors_ = 0;
  int guardian_fd_ = -1;
  pid_t guardian_pid_ = -1;
};

// `lithos power-reset`: resets the locked clocks of every GPU named by a
// marker file in `state_dir` or a folder right under it, removing each.
// Returns the exit status; messages on stderr.
int power_reset_markers(const std::string& state_dir, const std::string& library);
// `lithos power-reset --guard`: waits for end of input on descriptor 0
// (lithosd gone); resets `uuid`'s locked clocks if the last byte read was
// 'L'. Ignores SIGINT, SIGTERM and SIGHUP.
int power_guard(const std::string& uuid, const std::string& library);

}  // namespace lithos::daemon
