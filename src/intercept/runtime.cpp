// Why this file is long (~1.2k lines): Runtime still holds the process set
// and the choice of each launch's mask, the GPU views, the descriptor
// callback, the C API's work and the exit report (runtime.hpp);
// docs/interposer.md.

#include "intercept/cuda_abi.hpp"  // first: cuda.h in ABI mode

#include "intercept/runtime.hpp"

#include "intercept/atomizer.hpp"
#include "intercept/client.hpp"
#include "intercept/daemon_link.hpp"
#include "intercept/deferred.hpp"
#include "intercept/graph_replay.hpp"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <stdexcept>

#include "gpu/descriptor_hook.hpp"
#include "gpu/driver.hpp"
#include "gpu/green_context.hpp"
#include "intercept/log.hpp"
#include "intercept/real_driver.hpp"

extern "C" char* program_invocation_short_name;  // glibc

namespace lithos::intercept {

// ---------------------------------------------------------------------------
// Creation and configuration

Runtime::Runtime(RealDriver& driver, DaemonLink& link, Atomizer& atomizer, DeferredLaunches& deferred,
                 GraphReplay& replay)
    : real_(driver), link_(link), atomizer_(atomizer), deferred_(deferred), replay_(replay) {
  try {
    config_ = config_from_env([](const char* name) -> const char* { return std::getenv(name); });
  } catch (...) {
    config_ = Config{};
    config_.problems.push_back("could not read the LITHOS_* environment (out of memory); using defaults");
  }
  log_set_level(config_.log_level);
  // The library (library.cpp) configures the daemon link and the launch
  // paths with config_ once this returns.
}

namespace {
// The kernel nodes of the graph this thread is instantiating, from
// begin_graph to end_graph_instantiate (kept with the exec there).
thread_local GraphNodeKeys t_graph_nodes;

std::atomic<bool>& disabled_flag() noexcept {
  static std::atomic<bool> flag{[] {
    try {
      return disabled_from_env([](const char* name) { return std::getenv(name); });
    } catch (...) {
      return false;
    }
  }()};
  return flag;
}
}  // namespace

bool lithos_disabled() noexcept { return disabled_flag().load(std::memory_order_relaxed); }
void lithos_set_disabled(bool disabled) noexcept { disabled_flag().store(disabled, std::memory_order_relaxed); }

void Runtime::engage() noexcept {
  try {
    const std::lock_guard<std::mutex> lock(mu_);
    engage_locked();
  } catch (...) {
    counters_.bump(counters_.internal_errors);
    LITHOS_LOG_ONCE(LogLevel::kError, "internal error while reading the configuration; running unmasked");
  }
}

void Runtime::engage_locked() {
  if (engaged_) return;
  engaged_ = true;
  for (const std::string& p : config_.problems) LITHOS_LOG(LogLevel::kError, "ignoring %s", p.c_str());

  if (!config_.slot_map_path.empty()) {
    auto loaded = gpu::slot_map_load(config_.slot_map_path);
    if (loaded) {
      use_map_locked(std::move(loaded).value(), config_.slot_map_path);
    } else {
      LITHOS_LOG(LogLevel::kError, "cannot use the slot map %s: %s", config_.slot_map_path.c_str(),
                 loaded.status().message().c_str());
    }
  }
  apply_request_locked();
}

void Runtime::use_map_locked(gpu::SlotMap map, const std::string& path) {
  map_ = std::move(map);
  map_path_ = path;
  topology_ = map_->topology;
  live_ = map_->live_set();
  LITHOS_LOG(LogLevel::kInfo, "slot map %s: %s %s, %d live TPCs, %s", path.c_str(), map_->gpu_name.c_str(),
             map_->gpu_uuid.c_str(), map_->live_tpcs(),
             topology_.known() ? (std::to_string(topology_.count()) + " GPCs").c_str()
                               : "GPCs unknown (cluster launches run on the whole GPU; run `lithos calibrate`)");
}

void Runtime::apply_request_locked() {
  if (config_.request == MaskRequest::kNone) return;
  if (config_.backend == BackendChoice::kOff) {
    LITHOS_LOG(LogLevel::kWarn, "LITHOS_BACKEND=off: %s is not applied", config_.describe_request().c_str());
    return;
  }
  if (config_.backend == BackendChoice::kGreen) return;  // the green backend needs no slot map
  if (!map_) {
    process_skip_.store(SkipReason::kNoSlotMap, std::memory_order_release);
    LITHOS_LOG(LogLevel::kError,
               "%s was asked for but no slot map is loaded (LITHOS_SLOT_MAP%s): running on the whole GPU. "
               "Run `lithos calibrate`, or start the program with `lithos run`",
               config_.describe_request().c_str(), config_.slot_map_path.empty() ? " is unset" : " is unusable");
    return;
  }
  auto req = request_on(*map_, true);
  if (!req) {
    process_skip_.store(SkipReason::kRequestRefused, std::memory_order_release);
    LITHOS_LOG(LogLevel::kError, "refusing %s: %s; running on the whole GPU", config_.describe_request().c_str(),
               req.status().message().c_str());
    return;
  }
  publish_process_mask_locked(&req->first, req->second);
}

Result<std::pair<gpu::SlotMask, sched::TpcSet>> Runtime::request_on(const gpu::SlotMap& map, bool warn) const {
  sched::TpcSet wanted = config_.tpc_set;
  if (config_.request == MaskRequest::kFirstN) {
    const sched::TpcSet live = map.live_set();
    if (warn && config_.first_n > live.count()) {
      LITHOS_LOG(LogLevel::kWarn, "LITHOS_TPCS=%d but this GPU has %d live TPCs: using all of them", config_.first_n,
                 live.count());
    }
    wanted = live.take_lowest(config_.first_n);
  }
  auto mask = gpu::mask_for(map, wanted);
  if (!mask) return mask.status();
  return std::make_pair(mask.value(), wanted);
}

void Runtime::publish_process_mask_locked(const gpu::SlotMask* slots, const sched::TpcSet& tpcs) {
  if (slots == nullptr) {
    process_mask_.store(nullptr, std::memory_order_release);
    process_skip_.store(SkipReason::kNotRequested, std::memory_order_release);
    process_mask_text_ = "whole GPU";
    return;
  }
  auto entry = std::make_unique<MaskEntry>();
  entry->slots = *slots;
  entry->tpcs = tpcs;
  entry->whole = map_ && tpcs == map_->live_set();
  const MaskEntry* raw = entry.get();
  process_mask_text_ = "TPCs " + tpcs.to_string() + " (" + std::to_string(tpcs.count()) +
                       (map_ ? " of " + std::to_string(map_->live_tpcs()) + " live" : std::string()) + ")" +
                       (entry->whole ? ", every live TPC: no mask written" : "");
  mask_entries_.push_back(std::move(entry));  // kept: a launch may still read an older entry
  process_mask_.store(raw, std::memory_order_release);
}

// ---------------------------------------------------------------------------
// Attaching to the driver (first launch)

void Runtime::attach_slow() noexcept {
  InternalScope internal;
  try {
    const std::lock_guard<std::mutex> lock(mu_);
    if (attached_.load(std::memory_order_acquire)) return;
    engage_locked();
    const DriverTable& drv = driver();
    attached_driver_ = &drv;
    follow_first_gpu_locked();
    if (map_) {
      auto view = std::make_unique<GpuView>(*map_);
      primary_view_.store(view.get(), std::memory_order_release);
      view_store_.push_back(std::move(view));
    }

    MaskingBackend* b = backend_.load(std::memory_order_acquire);
    if (config_.backend == BackendChoice::kOff) {
      b = &off_;
    } else if (b == &pending_ && config_.backend == BackendChoice::kGreen) {
      // Forced green, but no primary context was retained through lithos
      // before this launch (a cuCtxCreate program): nothing confines it.
      b = &none_;
      LITHOS_LOG(LogLevel::kError,
                 "LITHOS_BACKEND=green: this program's context was not created through "
                 "cuDevicePrimaryCtxRetain, so the green-context partition cannot apply; running unmasked");
    } else if (b == &pending_) {
      // The callback is subscribed only once a mask must be written
      // (descriptor_backend.hpp): not for no set, nor for a set of every
      // live TPC.
      const MaskEntry* process = process_mask_.load(std::memory_order_acquire);
      // Under lithosd every launch may get a set: the callback is needed.
      const bool wanted = (process != nullptr && !process->whole) || stream_sets_.any() || link_.wanted_any();
      if (wanted) {
        b = install_callback_locked();
      } else {
        b = DescriptorBackend::available(drv) ? static_cast<MaskingBackend*>(&descriptor_) : &none_;
      }
    }

    // Which devices the slot map describes.
    if (map_ && !map_->gpu_uuid.empty()) {
      int count = 0;
      if (drv.cuDeviceGetCount != nullptr && drv.cuDeviceGetCount(&count) == CUDA_SUCCESS && count == 1 &&
          drv.cuDeviceGetUuid != nullptr) {
        CUuuid u{};
        const bool match = drv.cuDeviceGetUuid(&u, 0) == CUDA_SUCCESS && gpu::uuid_text(u.bytes) == map_->gpu_uuid;
        device_check_.store(match ? DeviceCheck::kAll : DeviceCheck::kNone, std::memory_order_release);
        if (!match) {
          LITHOS_LOG(LogLevel::kError,
                     "the slot map is for %s but this process sees %s: masks disabled (run `lithos calibrate`)",
                     map_->gpu_uuid.c_str(), gpu::uuid_text(u.bytes).c_str());
        }
      } else {
        device_check_.store(DeviceCheck::kPerLaunch, std::memory_order_release);
      }
    }
    // A map lithosd told a client before this first launch: its GPU is looked up per launch.
    if (adopted_) device_check_.store(DeviceCheck::kPerLaunch, std::memory_order_release);
    backend_.store(b, std::memory_order_release);
    LITHOS_LOG(LogLevel::kInfo, "engaged: backend %s; process mask: %s", b->name(), process_mask_text_.c_str());
  } catch (...) {
    backend_.store(&none_, std::memory_order_release);
    counters_.bump(counters_.internal_errors);
    LITHOS_LOG_ONCE(LogLevel::kError, "internal error while attaching to the driver; launches run unmasked");
  }
  attached_.store(true, std::memory_order_release);
}

MaskingBackend* Runtime::install_callback_locked() {
  return descriptor_.subscribe(driver()) ? static_cast<MaskingBackend*>(&descriptor_) : &none_;
}

bool Runtime::ensure_callback() noexcept {
  const MaskingBackend* now = backend_.load(std::memory_order_acquire);
  if (now->writes_masks()) return true;
  if (now != &descriptor_ && now != &pending_) return false;
  // Under mu_: an attach in progress finishes first (and then either saw the
  // stored mask and installed the callback, or left the backend idle).
  InternalScope internal;
  try {
    const std::lock_guard<std::mutex> lock(mu_);
    if (backend_.load(std::memory_order_acquire) == &descriptor_) {
      backend_.store(install_callback_locked(), std::memory_order_release);
    }
  } catch (...) {
    counters_.bump(counters_.internal_errors);
    return false;
  }
  const MaskingBackend* b = backend_.load(std::memory_order_acquire);
  return b->writes_masks() || b == &pending_;  // pending: attach installs it
}

Unmasked Runtime::unmasked() const noexcept {
  Unmasked u;
  const MaskEntry* e = process_mask_.load(std::memory_order_acquire);
  u.idle_reason = e != nullptr && e->whole ? SkipReason::kWholeLiveSet : process_skip_.load(std::memory_order_acquire);
  u.anything_asked = config_.request != MaskRequest::kNone || stream_sets_.any() || e != nullptr;
  return u;
}

// A process is confined and scheduled on the GPU of its first launch (the
// daemon client registers with that GPU's lithosd when its socket names
// %g). The configured map is one GPU's (`lithos run --device`, 0 unless
// told); when the first launch is on another, that GPU's map is taken from
// the calibration cache: the configured map's folder, then the default one.
// Before any launch, so no launch has read the old map.
void Runtime::follow_first_gpu_locked() {
  const DriverTable* d = attached_driver_;
  if (!map_ || map_->gpu_uuid.empty() || d == nullptr || d->cuCtxGetDevice == nullptr || d->cuDeviceGetUuid == nullptr)
    return;
  CUdevice dev = 0;
  CUuuid u{};
  if (d->cuCtxGetDevice(&dev) != CUDA_SUCCESS || d->cuDeviceGetUuid(&u, dev) != CUDA_SUCCESS) {
    return;
  }
  const std::string uuid = gpu::uuid_text(u.bytes);
  if (uuid == map_->gpu_uuid) return;
  std::string looked;
  if (auto cached = cached_map_locked(uuid, &looked)) {
    // Stream sets given before (lithos.h) are made again on the new map;
    // one it cannot hold keeps the old map, whose GPU's launches then
    // follow it with their own view (view_here).
    StreamSets::Map remade;
    {
      const sched::TpcSet live = cached->first.live_set();
      for (const auto& [key, e] : stream_sets_.snapshot()) {
        auto mask = gpu::mask_for(cached->first, e.tpcs);
        if (!mask) {
          LITHOS_LOG(LogLevel::kWarn,
                     "the first launch is on device %d (%s), whose slot map cannot hold a stream set made before "
                     "(TPCs %s: %s): the configured map of %s stays",
                     static_cast<int>(dev), uuid.c_str(), e.tpcs.to_string().c_str(), mask.status().message().c_str(),
                     map_->gpu_uuid.c_str());
          return;
        }
        remade[key] = MaskEntry{mask.value(), e.tpcs, e.tpcs == live};
      }
    }
    LITHOS_LOG(LogLevel::kInfo, "the first launch is on device %d (%s): its slot map replaces %s's",
               static_cast<int>(dev), uuid.c_str(), map_->gpu_uuid.c_str());
    use_map_locked(std::move(cached->first), cached->second);
    if (!remade.empty()) stream_sets_.replace_existing(remade);
    if (!process_set_by_api_.load(std::memory_order_acquire)) {
      apply_request_locked();
    } else if (const MaskEntry* e = process_mask_.load(std::memory_order_acquire)) {
      // The C API's process set, made again on the new map.
      const sched::TpcSet tpcs = e->tpcs;
      if (auto mask = gpu::mask_for(*map_, tpcs)) {
        publish_process_mask_locked(&mask.value(), tpcs);
      } else {
        LITHOS_LOG(LogLevel::kError, "the process set TPCs %s does not fit device %d's slot map (%s): whole GPU",
                   tpcs.to_string().c_str(), static_cast<int>(dev), mask.status().message().c_str());
        publish_process_mask_locked(nullptr, {});
      }
    }
    return;
  }
  LITHOS_LOG(LogLevel::kWarn,
             "the first launch is on device %d (%s), which has no calibrated slot map (looked in %s): masks apply "
             "on %s only; run `lithos calibrate --device %d`",
             static_cast<int>(dev), uuid.c_str(), looked.c_str(), map_->gpu_uuid.c_str(), static_cast<int>(dev));
}

std::optional<std::pair<gpu::SlotMap, std::string>> Runtime::cached_map_locked(const std::string& uuid,
                                                                               std::string* looked) {
  std::vector<std::string> dirs;
  if (const auto slash = config_.slot_map_path.rfind('/'); slash != std::string::npos)
    dirs.push_back(config_.slot_map_path.substr(0, slash == 0 ? 1 : slash));
  dirs.push_back(gpu::default_cache_dir());
  for (const std::string& dir : dirs) {
    std::string path = gpu::slot_map_cache_path(dir, uuid, map_->driver_version);
    auto loaded = gpu::slot_map_load(path);
    if (loaded && loaded.value().gpu_uuid == uuid) return std::make_pair(std::move(loaded).value(), std::move(path));
  }
  *looked = dirs.back();
  return std::nullopt;
}

// The daemon's sets are a GPU's own TPC numbers: a launch on a GPU other
// than the configured map's is masked with that GPU's map, loaded once.
const GpuView* Runtime::view_here() noexcept {
  switch (device_check_.load(std::memory_order_acquire)) {
    case DeviceCheck::kAll: return primary_view_.load(std::memory_order_acquire);
    case DeviceCheck::kNone: return nullptr;  // one GPU, not the map's
    case DeviceCheck::kPerLaunch: break;
  }
  CUdevice dev = 0;
  const DriverTable* drv = attached_driver_;
  if (drv == nullptr || drv->cuCtxGetDevice == nullptr || drv->cuCtxGetDevice(&dev) != CUDA_SUCCESS || dev < 0 ||
      dev >= static_cast<int>(views_.size())) {
    return nullptr;
  }
  const auto d = static_cast<std::size_t>(dev);
  if (const GpuView* v = views_[d].load(std::memory_order_acquire)) return v;
  if (no_view_[d].load(std::memory_order_acquire)) return nullptr;
  return load_view(dev);
}

const GpuView* Runtime::load_view(int dev) noexcept {
  InternalScope internal;
  const auto d = static_cast<std::size_t>(dev);
  try {
    const std::lock_guard<std::mutex> lock(mu_);
    if (const GpuView* v = views_[d].load(std::memory_order_acquire)) return v;
    if (no_view_[d].load(std::memory_order_acquire)) return nullptr;
    CUuuid u{};
    const GpuView* v = nullptr;
    const DriverTable* drv = attached_driver_;
    if (map_ && drv != nullptr && drv->cuDeviceGetUuid != nullptr && drv->cuDeviceGetUuid(&u, dev) == CUDA_SUCCESS) {
      const std::string uuid = gpu::uuid_text(u.bytes);
      std::string looked;
      if (uuid == map_->gpu_uuid) {
        v = primary_view_.load(std::memory_order_acquire);
      } else if (auto cached = cached_map_locked(uuid, &looked)) {
        v = make_view_locked(dev, std::move(cached->first), cached->second);
      } else if (link_.wanted_any() || config_.request != MaskRequest::kNone) {
        LITHOS_LOG(LogLevel::kWarn,
                   "device %d (%s) has no calibrated slot map (looked in %s): no mask can be made there (lithosd's "
                   "sets, %s), its launches run on the whole GPU; run `lithos calibrate --device %d`",
                   dev, uuid.c_str(), looked.c_str(), config_.describe_request().c_str(), dev);
      }
    }
    if (v != nullptr) {
      views_[d].store(v, std::memory_order_release);
    } else {
      no_view_[d].store(true, std::memory_order_release);
    }
    return v;
  } catch (...) {
    counters_.bump(counters_.internal_errors);
    return nullptr;
  }
}

const GpuView* Runtime::make_view_locked(int dev, gpu::SlotMap map, const std::string& from) {
  auto view = std::make_unique<GpuView>(std::move(map));
  LITHOS_LOG(LogLevel::kInfo, "device %d (%s): slot map %s", dev, view->map.gpu_uuid.c_str(), from.c_str());
  // The process-wide set asked for applies on every GPU, each with its own map.
  if (config_.request != MaskRequest::kNone && config_.backend != BackendChoice::kOff &&
      config_.backend != BackendChoice::kGreen) {
    if (auto req = request_on(view->map, false)) {
      view->requested = true;
      view->request_slots = req->first;
      view->request_tpcs = req->second;
      view->request_whole = req->second == view->live;
      LITHOS_LOG(LogLevel::kInfo, "device %d: %s is TPCs %s there", dev, config_.describe_request().c_str(),
                 req->second.to_string().c_str());
    } else {
      LITHOS_LOG(LogLevel::kError, "device %d: refusing %s: %s; it runs on the whole GPU", dev,
                 config_.describe_request().c_str(), req.status().message().c_str());
    }
  }
  const GpuView* v = view.get();
  view_store_.push_back(std::move(view));
  return v;
}

// A GPU this process has no map of gets lithosd's: a launch there finds it
// in views_ (view_here). Where the process has no configured map at all,
// every launch looks its GPU up (kPerLaunch), since there is no primary view.
void Runtime::adopt_daemon_map(int dev, gpu::SlotMap map) noexcept {
  if (dev < 0 || dev >= static_cast<int>(views_.size())) return;
  InternalScope internal;
  try {
    const std::lock_guard<std::mutex> lock(mu_);
    engage_locked();  // the configured map first: registration may come before the first launch's attach
    const auto d = static_cast<std::size_t>(dev);
    if (views_[d].load(std::memory_order_acquire) != nullptr) return;  // its own map, or adopted before
    if (map_ && map_->gpu_uuid == map.gpu_uuid) return;  // the configured map's GPU: the primary view serves it
    const std::string uuid = map.gpu_uuid;
    views_[d].store(make_view_locked(dev, std::move(map), "from lithosd"), std::memory_order_release);
    adopted_ = true;
    device_check_.store(DeviceCheck::kPerLaunch, std::memory_order_release);
    LITHOS_LOG(LogLevel::kInfo, "device %d (%s): no slot map of its own; masking with lithosd's", dev, uuid.c_str());
  } catch (...) {
    counters_.bump(counters_.internal_errors);
  }
}

// ---------------------------------------------------------------------------
// The launch path

std::optional<Runtime::Choice> Runtime::choose(Stream stream, const Grant* grant, SkipReason* why,
                                               bool lasting) noexcept {
  const MaskingBackend* b = backend_.load(std::memory_order_acquire);
  if (!b->writes_masks()) {
    // No mask to write: none asked for, the request failed, the set is
    // every live TPC, or the backend confines otherwise (green) or not at all.
    *why = b->why_unmasked(unmasked());
    return std::nullopt;
  }
  // The launch's GPU: the configured map's (primary), or another one.
  const GpuView* primary = primary_view_.load(std::memory_order_acquire);
  const GpuView* here = view_here();
  // A granted launch (daemon client): exactly the granted set, on the slot
  // map of the launch's GPU (the grant came from that GPU's daemon).
  if (grant != nullptr && here != nullptr) {
    if (grant->tpcs.empty() || grant->tpcs == here->live) {
      *why = SkipReason::kWholeLiveSet;
      return std::nullopt;
    }
    return Choice{slots_for(*here, grant->tpcs & here->live), grant->tpcs & here->live, here};
  }
  // A high-priority tenant of lithosd: its current allocation on the
  // launch's GPU (the last one published if the daemon went away), the
  // lasting one for a graph.
  if (DaemonClient& dc = link_.current(); here != nullptr && dc.registered_once() && dc.high()) {
    sched::TpcSet a;
    if (dc.allocation(&a, lasting)) {
      a &= here->live;
      if (a.empty() || a == here->live) {
        *why = SkipReason::kWholeLiveSet;
        return std::nullopt;
      }
      return Choice{slots_for(*here, a), a, here};
    }
  }
  MaskEntry entry;
  bool found = false;
  if (stream_sets_.any()) {
    try {
      if (auto e = stream_sets_.find(stream.handle_key())) {
        entry = *e;
        found = true;
      }
    } catch (...) {
      *why = SkipReason::kInternalError;
      return std::nullopt;
    }
  }
  if (!found && here != nullptr && here != primary && here->requested &&
      !process_set_by_api_.load(std::memory_order_acquire)) {
    // Another GPU: the set asked for, made on that GPU's own map (load_view).
    if (here->request_whole) {
      *why = SkipReason::kWholeLiveSet;
      return std::nullopt;
    }
    return Choice{here->request_slots, here->request_tpcs, here};
  }
  if (!found) {
    const MaskEntry* e = process_mask_.load(std::memory_order_acquire);
    if (e == nullptr) {
      *why = process_skip_.load(std::memory_order_acquire);
      return std::nullopt;
    }
    entry = *e;
  }
  if (entry.whole) {
    *why = SkipReason::kWholeLiveSet;
    return std::nullopt;
  }
  if (here == nullptr) {
    *why = SkipReason::kOtherDevice;  // a GPU with no slot map
    return std::nullopt;
  }
  if (here == primary) return Choice{entry.slots, entry.tpcs, primary};
  // A set given through the C API (process or stream), on another GPU: the
  // same logical TPCs, made with that GPU's own map.
  const sched::TpcSet there = entry.tpcs & here->live;
  if (there.empty() || there == here->live) {
    *why = there.empty() ? SkipReason::kOtherDevice : SkipReason::kWholeLiveSet;
    return std::nullopt;
  }
  return Choice{slots_for(*here, there), there, here};
}

void Runtime::begin_launch(HookId id, Stream stream, const LaunchInfo& launch, const Grant* grant) {
  attach();
  if (config_.fault_launch) throw std::runtime_error("injected fault (LITHOS_TEST_FAULT=launch)");
  if (launch.cooperative) counters_.bump(counters_.cooperative_launches);
  ThreadFrame& f = t_frame;
  f.kind = CallKind::kLaunch;
  f.descriptors = 0;
  f.needs = {};
  f.view = nullptr;
  f.narrowed = 0;
  SkipReason why = SkipReason::kNotRequested;
  auto choice = choose(stream, grant, &why);
  if (grant == nullptr) right_size_launch(launch, &choice);
  f.has_mask = choice.has_value();
  if (choice) {
    f.mask = choice->slots;
    f.tpcs = choice->tpcs;
    f.view = choice->view;
    f.needs = launch_needs(launch, f.tpcs, f.view);
  } else if (!backend_.load(std::memory_order_relaxed)->routes_launches()) {  // routed: confined there
    counters_.skip(why);
  }
  if (log_enabled(LogLevel::kDebug)) {
    const std::string name = kernels_.name(launch.function);
    LITHOS_LOG(LogLevel::kDebug, "%s %s stream %p: %s%s", hook_info(id).name, name.empty() ? "?" : name.c_str(),
               static_cast<void*>(stream.raw()), choice ? "masked" : skip_reason_name(why),
               f.needs.any() ? (" (cluster " + std::to_string(f.needs.cluster_sms) + " SMs, resident " +
                                std::to_string(f.needs.resident_sms) + " SMs)")
                                   .c_str()
                             : "");
  }
  before_immediate_launch(stream, grant != nullptr && grant->runs_free, launch.function);
}

sched::LaunchNeeds Runtime::launch_needs(const LaunchInfo& launch, const sched::TpcSet& tpcs,
                                         const GpuView* v) noexcept {
  if (launch.multi_device) return launch.merged;
  sched::LaunchNeeds n;
  try {
    // Any cluster fits a set with a whole GPC of 8 TPCs (16 SMs, the largest
    // cluster Hopper allows), so the compile-time shape is looked up only
    // for sets without one.
    if (launch.cluster_attr) {
      n = sched::cluster_needs(launch.cluster);
    } else if (v == nullptr || sched::max_cluster_sms(v->topology, tpcs) < 16) {
      n = sched::cluster_needs(kernels_.static_cluster(launch.function));
    }
    if (launch.cooperative) {
      n |= sched::cooperative_needs(launch.grid.count(),
                                    kernels_.blocks_per_sm(launch.function, launch.block.count(), launch.smem));
    }
  } catch (...) {
    counters_.bump(counters_.internal_errors);
    n.resident_sms = sched::LaunchNeeds::kAllSms;  // cannot tell: only the whole GPU is safe
  }
  return n;
}

gpu::SlotMask Runtime::slots_for(const GpuView& v, const sched::TpcSet& tpcs) noexcept {
  thread_local sched::TpcSet t_last;
  thread_local gpu::SlotMask t_slots = gpu::SlotMask::all();
  thread_local const void* t_view = nullptr;
  if (tpcs == t_last && t_view == &v) return t_slots;
  gpu::SlotMask m = gpu::SlotMask::all();
  for (int s = 0; s < gpu::kMaxSlots; ++s) {
    const int t = v.map.tpc_of_slot[static_cast<std::size_t>(s)];
    if (t >= 0 && tpcs.test(t)) m.set_disabled(s, false);
  }
  t_last = tpcs;
  t_slots = m;
  t_view = &v;
  return m;
}

// Whether this thread's launch goes out at once and is reported to lithosd
// (a high-priority tenant, or best effort running free) while the client of
// the launch's GPU is connected.
static bool made_at_once(DaemonClient& dc, bool runs_free) noexcept {
  return dc.wanted() && (dc.high() || runs_free) && dc.connected();
}

void Runtime::before_immediate_launch(Stream stream, bool runs_free, const void* timed_key) noexcept {
  DaemonClient& dc = link_.current();
  if (made_at_once(dc, runs_free)) dc.before_immediate(stream, timed_key);
}

void Runtime::after_launch(Stream stream, const LaunchInfo& launch, bool graph, bool runs_free) noexcept {
  DaemonClient& dc = link_.current();
  if (made_at_once(dc, runs_free)) {
    const LaunchIdentity id = kernels_.identity(launch.function, !graph);
    dc.report_running(stream, launch, id.kernel, graph, id.statics, graph ? 0 : t_frame.narrowed);
  }
}

bool Runtime::right_size_base(bool lasting, sched::TpcSet* base, const GpuView** view) noexcept {
  DaemonClient& dc = link_.current();
  if (!dc.high() || !dc.connected()) return false;
  const GpuView* here = view_here();
  sched::TpcSet a;
  if (here == nullptr || !dc.allocation(&a, lasting)) return false;
  a &= here->live;
  if (a.empty()) return false;
  *base = a;
  *view = here;
  return true;
}

// The rule: the t lowest-numbered TPCs of the allocation, if the launch's
// needs (cluster, cooperative residency) are met there as they are; else
// the allocation, as without a right size (the rule never widens a
// narrowed set: widening would give TPCs the daemon did not count).
void Runtime::right_size_launch(const LaunchInfo& launch, std::optional<Choice>* choice) noexcept {
  DaemonClient& dc = link_.current();
  if (!dc.high() || !dc.connected() || launch.multi_device) return;
  const std::uint32_t t = dc.right_size(kernels_.identity(launch.function, true).kernel, launch.grid);
  if (t == 0) return;
  sched::TpcSet base;
  const GpuView* v = nullptr;
  if (!right_size_base(false, &base, &v) || static_cast<int>(t) >= base.count()) return;
  const sched::TpcSet narrowed = base.take_lowest(static_cast<int>(t));
  const sched::LaunchNeeds needs = launch_needs(launch, narrowed, v);
  if (needs.any() && sched::fit_tpcs(v->topology, needs, narrowed, v->live).action != sched::FitAction::kAsIs) return;
  *choice = Choice{slots_for(*v, narrowed), narrowed, v};
  t_frame.narrowed = t;
  counters_.bump(counters_.rightsized_launches);
}

void Runtime::right_size_graph(const std::vector<GraphNodeKey>& nodes) noexcept {
  ThreadFrame& f = t_frame;
  f.node_sizes = 0;
  DaemonClient& dc = link_.current();
  if (nodes.empty() || !dc.high() || !dc.connected()) return;
  // More kernel nodes than fit: a descriptor could match a node not kept,
  // so none is narrowed (the lasting set, as without right sizes).
  if (nodes.size() > kMaxNodeSizes) return;
  sched::TpcSet base;
  const GpuView* v = nullptr;
  if (!right_size_base(true, &base, &v)) return;
  bool any = false;
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    const std::uint32_t t = dc.right_size(nodes[i].kernel, nodes[i].grid);
    t_node_sizes[i] = {std::max(1U, nodes[i].grid.x), t};
    any = any || t != 0;
  }
  if (!any) return;
  f.node_sizes = static_cast<std::uint32_t>(nodes.size());
  f.node_base = base;
  f.node_view = v;
}

// A descriptor of a graph matches the kernel nodes of its grid width; with
// several, the largest right size wins, and a node without one (or no node
// at all) leaves the descriptor on the lasting set.
bool Runtime::node_set(const std::uint8_t* qmd, gpu::QmdVersion v, const sched::LaunchNeeds& needs,
                       sched::TpcSet* out) noexcept {
  const ThreadFrame& f = t_frame;
  const auto width = gpu::qmd_grid_width(qmd, v);
  std::uint32_t t = 0;
  bool matched = false;
  bool keep = false;
  if (width) {
    for (std::uint32_t i = 0; i < f.node_sizes && i < kMaxNodeSizes; ++i) {
      if (t_node_sizes[i].grid_x != *width) continue;
      matched = true;
      if (t_node_sizes[i].tpcs == 0) keep = true;
      t = std::max(t, t_node_sizes[i].tpcs);
    }
  }
  counters_.bump(matched ? counters_.graph_nodes_matched : counters_.graph_nodes_unmatched);
  if (!matched || keep || t == 0 || f.node_view == nullptr || static_cast<int>(t) >= f.node_base.count()) return false;
  const sched::TpcSet narrowed = f.node_base.take_lowest(static_cast<int>(t));
  if (needs.any() &&
      sched::fit_tpcs(f.node_view->topology, needs, narrowed, f.node_view->live).action != sched::FitAction::kAsIs)
    return false;
  *out = narrowed;
  counters_.bump(counters_.graph_nodes_rightsized);
  return true;
}

bool Runtime::safe_mask(const GpuView* v, const sched::TpcSet& tpcs, const sched::LaunchNeeds& needs,
                        gpu::SlotMask* mask) noexcept {
  if (!needs.any()) return true;
  if (v == nullptr) return false;  // cannot tell what is safe: only the whole GPU
  if (needs.cluster_sms > 1) counters_.bump(counters_.cluster_descriptors);
  const sched::Fit fit = sched::fit_tpcs(v->topology, needs, tpcs, v->live);
  switch (fit.action) {
    case sched::FitAction::kAsIs: return true;
    case sched::FitAction::kWhole: counters_.bump(counters_.whole_by_rule); return false;
    case sched::FitAction::kWidened: break;
  }
  counters_.bump(fit.reason == sched::FitReason::kCooperative ? counters_.widened_cooperative
                                                              : counters_.widened_cluster);
  // The widened set's slots (every TPC of it is live, so each has a slot).
  *mask = slots_for(*v, fit.tpcs);
  return true;
}

void Runtime::end_launch() noexcept {
  const ThreadFrame& f = t_frame;
  if (f.kind == CallKind::kLaunch && f.descriptors == 0 && backend_.load(std::memory_order_relaxed)->writes_masks()) {
    counters_.bump(counters_.launches_without_descriptor);
  }
}

void Runtime::on_descriptor(std::uint8_t* qmd) noexcept {
  if (lithos_disabled()) return;  // switched off: the callback may still be subscribed
  ThreadFrame& f = t_frame;
  gpu::SlotMask mask{};
  sched::TpcSet tpcs;
  sched::LaunchNeeds needs;
  const GpuView* view = nullptr;
  bool apply = false;
  switch (f.kind) {
    case CallKind::kLaunch:
      counters_.bump(counters_.descriptors_in_launch);
      ++f.descriptors;
      apply = f.has_mask;
      mask = f.mask;
      tpcs = f.tpcs;
      needs = f.needs;
      view = f.view;
      break;
    case CallKind::kGraph:
      counters_.bump(counters_.descriptors_in_graph);
      ++f.descriptors;
      apply = f.has_mask;
      mask = f.mask;
      tpcs = f.tpcs;
      needs = f.needs;
      view = f.view;
      break;
    case CallKind::kNone: {
      counters_.bump(counters_.descriptors_outside);
      if (f.internal) return;
      // Not inside a hooked call (driver-internal kernels, a descriptor
      // built later or on another path): the process mask still applies
      // when it is known to describe this device.
      const MaskEntry* e = process_mask_.load(std::memory_order_acquire);
      if (e != nullptr && !e->whole && device_check_.load(std::memory_order_relaxed) == DeviceCheck::kAll) {
        apply = true;
        mask = e->slots;
        tpcs = e->tpcs;
        view = primary_view_.load(std::memory_order_acquire);
      }
      break;
    }
  }
  const bool by_node = f.kind == CallKind::kGraph && f.node_sizes > 0;
  if (!apply && !by_node) return;
  const gpu::QmdVersion v = gpu::qmd_detect(qmd);
  qmd_version_.store(static_cast<int>(v), std::memory_order_relaxed);
  if (v == gpu::QmdVersion::kUnknown) {
    counters_.skip(SkipReason::kUnknownQmd);
    LITHOS_LOG_ONCE(LogLevel::kError,
                    "unknown launch-descriptor layout (version bytes 0x%02x/0x%02x): masks refused, launches run on "
                    "the whole GPU",
                    qmd[72], qmd[58]);
    return;
  }
  if (!gpu::qmd_mask_tested_on_hardware(v)) {
    LITHOS_LOG_ONCE(LogLevel::kWarn,
                    "launch-descriptor layout %s: the mask is written from public facts and is "
                    "untested on hardware",
                    gpu::qmd_version_name(v));
  }
  // The rule (sched::fit_tpcs) for what this descriptor's launch needs: the
  // hook's knowledge, and the cluster shape the descriptor itself carries
  // (the only source for graph nodes and launches outside a hook).
  if (gpu::qmd_cluster_tested_on_hardware(v)) {
    gpu::QmdCluster c;
    if (gpu::qmd_cluster_dims(qmd, v, &c) && c.count() > 1) needs |= sched::cluster_needs({c.x, c.y, c.z});
  }
  if (by_node) {
    // A high-priority graph's kernel node with a right size of its own.
    if (sched::TpcSet narrowed; node_set(qmd, v, needs, &narrowed)) {
      apply = true;
      tpcs = narrowed;
      view = f.node_view;
      mask = slots_for(*view, narrowed);
    }
    if (!apply) return;
  }
  if (!safe_mask(view, tpcs, needs, &mask)) return;  // only the whole GPU is safe: leave the descriptor unmasked
  try {
    const Status st = gpu::qmd_write_mask(qmd, v, mask);
    if (st.is_ok()) {
      counters_.bump(counters_.masks_applied);
    } else {
      counters_.skip(SkipReason::kWriteFailed);
      LITHOS_LOG_ONCE(LogLevel::kError, "a mask was refused by the %s layout: %s", gpu::qmd_version_name(v),
                      st.message().c_str());
    }
  } catch (...) {
    counters_.bump(counters_.internal_errors);
  }
}

void Runtime::internal_error(HookId id, const char* what) noexcept {
  counters_.bump(counters_.internal_errors);
  counters_.skip(SkipReason::kInternalError);
  auto& logged = hook_error_logged_[static_cast<std::size_t>(hook_index(id))];
  if (!logged.exchange(true, std::memory_order_relaxed)) {
    LITHOS_LOG(LogLevel::kError, "internal error in the %s hook (%s): the call went to the driver unchanged",
               hook_info(id).name, what);
  }
}

// ---------------------------------------------------------------------------
// Graphs

Runtime::GraphCall Runtime::begin_graph(CUgraphExec_st* exec, Stream stream, const Grant* grant, void* graph) noexcept {
  GraphCall call;
  attach();
  ThreadFrame& f = t_frame;
  f.kind = CallKind::kGraph;
  f.descriptors = 0;
  f.has_mask = false;
  f.needs = {};
  f.node_sizes = 0;
  t_graph_nodes.reset();
  if (!backend_.load(std::memory_order_acquire)->writes_masks()) return call;
  // A tenant of lithosd registers before its first graph is built, as it
  // does before its first kernel launch: a graph instantiated first would
  // otherwise be built without the tenant's set and keep that for every
  // replay (a service's graph on the whole GPU, other quotas included).
  if (DaemonClient& dc = link_.current(); dc.wanted() && !dc.registered_once()) dc.ready();
  SkipReason why = SkipReason::kNotRequested;
  const auto choice = choose(stream, grant, &why, /*lasting=*/true);
  f.view = nullptr;
  if (choice) {
    f.has_mask = true;
    f.mask = choice->slots;
    f.tpcs = choice->tpcs;
    f.view = choice->view;
  }
  if (graph != nullptr) {
    // Kept with the exec by end_graph_instantiate; a tenant of lithosd keeps
    // its kernel nodes too, for their right sizes.
    if (link_.current().wanted()) {
      try {
        auto keys = std::make_shared<std::vector<GraphNodeKey>>();
        f.needs = graph_needs(graph, keys.get());
        t_graph_nodes = std::move(keys);
      } catch (...) {
        counters_.bump(counters_.internal_errors);
        f.needs.resident_sms = sched::LaunchNeeds::kAllSms;
      }
    } else {
      f.needs = graph_needs(graph);
    }
    if (t_graph_nodes) right_size_graph(*t_graph_nodes);
  }
  if (exec != nullptr) {
    try {
      if (const auto r = graphs_.find(exec)) {
        call.known = true;
        call.built = r->built;
        call.had_mask = r->has_mask;
        call.mask = r->mask;
        call.nodes = r->nodes;
        f.needs = r->needs;
        if (!r->built && r->nodes) right_size_graph(*r->nodes);  // this call builds its descriptors
      }
    } catch (...) {
      counters_.bump(counters_.internal_errors);
    }
  }
  return call;
}

sched::LaunchNeeds Runtime::graph_needs(void* graph, std::vector<GraphNodeKey>* keys) noexcept {
  const DriverTable& drv = driver();
  const auto get_nodes = drv.cuGraphGetNodes;
  const auto node_type = drv.cuGraphNodeGetType;
  const auto kernel_params = drv.cuGraphKernelNodeGetParams;
  const auto kernel_attr = drv.cuGraphKernelNodeGetAttribute;
  const auto child = drv.cuGraphChildGraphNodeGetGraph;
  sched::LaunchNeeds needs;
  if (get_nodes == nullptr || node_type == nullptr || kernel_params == nullptr) {
    needs.resident_sms = sched::LaunchNeeds::kAllSms;  // cannot look inside: whole GPU
    return needs;
  }
  InternalScope internal;
  try {
    std::vector<CUgraph> todo{static_cast<CUgraph>(graph)};
    std::size_t visited = 0;
    while (!todo.empty() && visited < 64) {
      CUgraph g = todo.back();
      todo.pop_back();
      ++visited;
      size_t n = 0;
      if (get_nodes(g, nullptr, &n) != CUDA_SUCCESS || n > (1U << 20)) continue;
      std::vector<CUgraphNode> nodes(n);
      if (n > 0 && get_nodes(g, nodes.data(), &n) != CUDA_SUCCESS) continue;
      for (std::size_t i = 0; i < n; ++i) {
        CUgraphNodeType type{};
        if (node_type(nodes[i], &type) != CUDA_SUCCESS) continue;
        if (type == CU_GRAPH_NODE_TYPE_GRAPH) {
          CUgraph sub = nullptr;
          if (child != nullptr && child(nodes[i], &sub) == CUDA_SUCCESS && sub != nullptr) todo.push_back(sub);
          continue;
        }
        if (type != CU_GRAPH_NODE_TYPE_KERNEL) continue;
        CUDA_KERNEL_NODE_PARAMS p{};
        if (kernel_params(nodes[i], &p) != CUDA_SUCCESS) continue;
        const void* fn = p.func != nullptr ? static_cast<const void*>(p.func) : static_cast<const void*>(p.kern);
        LaunchInfo info;
        info.function = fn;
        info.grid = {p.gridDimX, p.gridDimY, p.gridDimZ};
        info.block = {p.blockDimX, p.blockDimY, p.blockDimZ};
        info.smem = p.sharedMemBytes;
        if (kernel_attr != nullptr) {
          CUkernelNodeAttrValue v{};
          if (kernel_attr(nodes[i], CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION, &v) == CUDA_SUCCESS &&
              v.clusterDim.x * v.clusterDim.y * v.clusterDim.z > 1) {
            info.cluster = {v.clusterDim.x, v.clusterDim.y, v.clusterDim.z};
            info.cluster_attr = true;
          }
          v = {};
          if (kernel_attr(nodes[i], CU_LAUNCH_ATTRIBUTE_COOPERATIVE, &v) == CUDA_SUCCESS && v.cooperative != 0) {
            info.cooperative = true;
            counters_.bump(counters_.cooperative_launches);
          }
        }
        sched::LaunchNeeds n1 =
            info.cluster_attr ? sched::cluster_needs(info.cluster) : sched::cluster_needs(kernels_.static_cluster(fn));
        if (info.cooperative) {
          n1 |= sched::cooperative_needs(info.grid.count(), kernels_.blocks_per_sm(fn, info.block.count(), info.smem));
        }
        needs |= n1;
        if (keys != nullptr) keys->push_back({kernels_.id_of(fn), info.grid});
      }
    }
  } catch (...) {
    counters_.bump(counters_.internal_errors);
    needs.resident_sms = sched::LaunchNeeds::kAllSms;
  }
  return needs;
}

void Runtime::end_graph_instantiate(bool ok, CUgraphExec_st* exec) noexcept {
  if (!ok || exec == nullptr || !backend_.load(std::memory_order_acquire)->writes_masks()) return;
  const ThreadFrame& f = t_frame;
  try {
    graphs_.put(exec, {f.descriptors > 0, f.has_mask, f.mask, f.needs, f.tpcs, f.view, std::move(t_graph_nodes)});
  } catch (...) {
    counters_.bump(counters_.internal_errors);
  }
}

void Runtime::end_graph_launch(bool ok, CUgraphExec_st* exec, const GraphCall& call) noexcept {
  if (exec == nullptr || !backend_.load(std::memory_order_acquire)->writes_masks()) return;
  const ThreadFrame& f = t_frame;
  if (f.descriptors > 0) {
    try {
      graphs_.put(exec, {true, f.has_mask, f.mask, f.needs, f.tpcs, f.view, call.nodes});
    } catch (...) {
      counters_.bump(counters_.internal_errors);
    }
    return;
  }
  if (ok && call.known && call.built && (call.had_mask != f.has_mask || (f.has_mask && !(call.mask == f.mask)))) {
    counters_.bump(counters_.graph_stale);
    LITHOS_LOG_ONCE(LogLevel::kWarn,
                    "a CUDA graph was launched with a mask other than the one its launch descriptors were built "
                    "with; it runs with the old one (counted as graph_stale; see docs/interposer.md, "
                    "\"CUDA graphs\")");
  }
}

std::optional<sched::TpcSet> Runtime::graph_pinned(CUgraphExec_st* exec) noexcept {
  if (exec == nullptr || !backend_.load(std::memory_order_acquire)->writes_masks()) return std::nullopt;
  try {
    const auto found = graphs_.find(exec);
    if (!found || !found->built) return std::nullopt;
    const GraphExecRecords::Record& r = *found;
    // Built unmasked: every TPC of the GPU it runs on.
    const GpuView* v = r.has_mask ? r.view : view_here();
    if (v == nullptr) return std::nullopt;
    if (!r.has_mask) return v->live;
    return sched::fit_tpcs(v->topology, r.needs, r.tpcs, v->live).tpcs;
  } catch (...) {
    counters_.bump(counters_.internal_errors);
    return std::nullopt;
  }
}

void Runtime::forget_graph_exec(CUgraphExec_st* exec) noexcept {
  if (exec == nullptr) return;
  try {
    graphs_.forget(exec);
  } catch (...) {
    counters_.bump(counters_.internal_errors);
  }
}

// ---------------------------------------------------------------------------
// Streams and kernel names

void Runtime::forget_stream(Stream stream) noexcept {
  link_.of_stream(stream).forget_stream(stream);
  backend_.load(std::memory_order_acquire)->forget_stream(stream);
  if (stream.raw() == nullptr || !stream_sets_.any()) return;
  try {
    stream_sets_.erase(stream.handle_key());
  } catch (...) {
    counters_.bump(counters_.internal_errors);
  }
}

// ---------------------------------------------------------------------------
// Green-context backend

void Runtime::after_primary_ctx_retain(CUctx_st** ctx, int ordinal) noexcept {
  if (ctx == nullptr || *ctx == nullptr || config_.request == MaskRequest::kNone) return;
  if (config_.backend != BackendChoice::kGreen && config_.backend != BackendChoice::kAuto) return;
  const MaskingBackend* now = backend_.load(std::memory_order_acquire);
  if (now != &pending_ && now != &green_) return;
  InternalScope internal;
  try {
    const std::lock_guard<std::mutex> lock(mu_);
    engage_locked();
    if (backend_.load(std::memory_order_acquire) == &pending_) {
      // Under auto, prefer the descriptor hook: only its absence selects
      // green (attach() installs the callback at the first launch).
      if (config_.backend == BackendChoice::kAuto && DescriptorBackend::available(driver())) return;
      if (!green_.usable()) {
        backend_.store(&none_, std::memory_order_release);
        return;
      }
    } else if (backend_.load(std::memory_order_acquire) != &green_) {
      return;
    }
    CUctx_st* partition = green_.partition(*ctx, ordinal, config_, &process_mask_text_);
    if (partition == nullptr) {
      if (backend_.load(std::memory_order_acquire) == &pending_) backend_.store(&none_, std::memory_order_release);
      return;
    }
    *ctx = partition;
    backend_.store(&green_, std::memory_order_release);
  } catch (...) {
    counters_.bump(counters_.internal_errors);
    LITHOS_LOG_ONCE(LogLevel::kError, "internal error in the green-context backend; running unmasked");
  }
}

GreenBackend::Route Runtime::route(Stream stream, const LaunchInfo* launch) noexcept {
  if (!backend_.load(std::memory_order_acquire)->routes_launches()) return {};
  // The partition of the launch's device (its context's): a stream of
  // another device's partition could not take the launch.
  const auto get_device = driver().cuCtxGetDevice;
  CUdevice dev = 0;
  if (get_device == nullptr || get_device(&dev) != CUDA_SUCCESS || dev < 0 || dev >= GreenBackend::kMaxDevices) {
    return {};
  }
  const GreenBackend::Device* gd = green_.device(dev);
  if (gd == nullptr) {
    counters_.bump(counters_.green_unrouted);
    LITHOS_LOG_ONCE(LogLevel::kWarn,
                    "green-context backend: a launch on CUDA device %d, which has no partition (its primary context "
                    "was not retained through lithos); it runs unconfined",
                    static_cast<int>(dev));
    return {};
  }
  if (launch != nullptr) {
    // The rule, for the partition's fixed set: a launch it could hang stays
    // on the caller's stream, which runs on every SM.
    const GpuView* v = view_here();
    const sched::LaunchNeeds needs = launch_needs(*launch, gd->tpcs, v);
    if (needs.any() && sched::fit_tpcs(v != nullptr ? v->topology : topology_, needs, gd->tpcs, gd->live).action !=
                           sched::FitAction::kAsIs) {
      counters_.bump(counters_.green_unrouted);
      return {};
    }
  }
  return green_.route(stream, dev, *gd);
}

// ---------------------------------------------------------------------------
// C API

// A program that asks for sets with no slot map gets LITHOS_ENOSLOTMAP, and
// its user the way to one, once.
int Runtime::no_slot_map_for_api() noexcept {
  LITHOS_LOG_ONCE(LogLevel::kError,
                  "lithos.h: no slot map is loaded, so TPC sets are refused (LITHOS_ENOSLOTMAP): calibrate this GPU "
                  "once (`lithos calibrate`), or start the program with `lithos run --tpcs N` or --slot-map FILE");
  return kApiNoSlotMap;
}

int Runtime::set_stream_tpcs(CUstream_st* stream, const sched::TpcSet& tpcs) noexcept {
  engage();
  if (tpcs.empty()) return kApiInvalid;
  if (!backend_.load(std::memory_order_acquire)->takes_sets() || config_.backend == BackendChoice::kOff ||
      config_.backend == BackendChoice::kGreen) {
    return kApiUnsupported;
  }
  try {
    bool whole = false;
    {
      const std::lock_guard<std::mutex> map_lock(mu_);  // the first launch may replace the map
      if (!map_) return no_slot_map_for_api();
      auto mask = gpu::mask_for(*map_, tpcs);
      if (!mask) {
        LITHOS_LOG(LogLevel::kWarn, "stream mask refused: %s", mask.status().message().c_str());
        return kApiInvalid;
      }
      whole = tpcs == map_->live_set();
      stream_sets_.set(Stream(stream, false).handle_key(), MaskEntry{mask.value(), tpcs, whole});
    }
    if (whole) return kApiOk;  // nothing to write: no callback needed
    return ensure_callback() ? kApiOk : kApiUnsupported;
  } catch (...) {
    counters_.bump(counters_.internal_errors);
    return kApiInternal;
  }
}

int Runtime::clear_stream_tpcs(CUstream_st* stream) noexcept {
  try {
    stream_sets_.erase(Stream(stream, false).handle_key());
    return kApiOk;
  } catch (...) {
    counters_.bump(counters_.internal_errors);
    return kApiInternal;
  }
}

int Runtime::set_process_tpcs(const sched::TpcSet* tpcs) noexcept {
  engage();
  try {
    const std::lock_guard<std::mutex> lock(mu_);
    if (tpcs == nullptr) {
      publish_process_mask_locked(nullptr, {});
      process_set_by_api_.store(true, std::memory_order_release);
      return kApiOk;
    }
    if (tpcs->empty()) return kApiInvalid;
    if (!backend_.load(std::memory_order_acquire)->takes_sets() || config_.backend == BackendChoice::kOff ||
        config_.backend == BackendChoice::kGreen) {
      return kApiUnsupported;
    }
    if (!map_) return no_slot_map_for_api();
    auto mask = gpu::mask_for(*map_, *tpcs);
    if (!mask) {
      LITHOS_LOG(LogLevel::kWarn, "process mask refused: %s", mask.status().message().c_str());
      return kApiInvalid;
    }
    publish_process_mask_locked(&mask.value(), *tpcs);
    process_set_by_api_.store(true, std::memory_order_release);
    if (*tpcs == map_->live_set()) return kApiOk;  // nothing to write: no callback needed
  } catch (...) {
    counters_.bump(counters_.internal_errors);
    return kApiInternal;
  }
  return ensure_callback() ? kApiOk : kApiUnsupported;
}

int Runtime::live_tpcs(sched::TpcSet* out) noexcept {
  engage();
  if (out == nullptr) return kApiInvalid;
  try {
    const std::lock_guard<std::mutex> lock(mu_);  // the first launch may replace the map
    if (!map_) return no_slot_map_for_api();
    *out = map_->live_set();
    return out->count();
  } catch (...) {
    return kApiInternal;
  }
}

// ---------------------------------------------------------------------------
// Reporting

StatsHeader Runtime::stats_header() noexcept {
  StatsHeader h;
  try {
    h.pid = static_cast<int>(::getpid());
    h.program = program_invocation_short_name != nullptr ? program_invocation_short_name : "?";
    h.backend = backend_.load(std::memory_order_acquire)->name();
    const int v = qmd_version_.load(std::memory_order_relaxed);
    if (v != 0) h.qmd_version = gpu::qmd_version_name(static_cast<gpu::QmdVersion>(v));
    h.slot_map = config_.slot_map_path;
    if (mu_.try_lock()) {
      h.process_mask = process_mask_text_;
      if (!map_path_.empty()) h.slot_map = map_path_;  // the map in use (the first launch's GPU's)
      mu_.unlock();
    } else {
      h.process_mask = "?";
    }
    h.driver_used = real_.driver_in_process();
    h.daemon_json = link_.stats_json_all(
        [this] { return ",\"deferred\":" + deferred_.stats_json() + ",\"graph_replay\":" + replay_.stats_json(); });
  } catch (...) {
    h.backend = "?";
  }
  return h;
}

void Runtime::note_forked() noexcept {
  // Runs in the child, single-threaded. Any hooked call counts: after the
  // driver's initialisation a child cannot use CUDA itself, so whatever it
  // would report is the parent's.
  inherited_.store(counters_.snapshot().touched(), std::memory_order_relaxed);
}

void Runtime::report_at_exit() noexcept {
  // Once: lithos_report_now() may have written it before the exit.
  static std::atomic<bool> reported{false};
  if (reported.exchange(true)) return;
  // A forked child's counters and atomizer state are its parent's copy
  // (Python's os.fork() then sys.exit(), a daemonising library): writing
  // them would replace the parent's report, or print its numbers twice.
  if (inherited_.load(std::memory_order_relaxed)) return;
  const StatsSnapshot s = counters_.snapshot();
  // The atomizer's report needs no driver call here (timings already read).
  // A process that launched no kernel and loaded no module writes none: it
  // would replace, with an empty report, that of the program it runs beside
  // or under (a shell around the job, torch.compile's worker processes).
  if (!config_.atom_report.empty() && !lithos_disabled()) {
    const bool worked = s.kernel_launches() + s.graph_launches() != 0 || atomizer_.images_seen.load() != 0;
    if (worked) atomizer_.report(nullptr, false);
  }
  if (!config_.stats && config_.stats_file.empty()) return;
  if (lithos_disabled()) {
    if (config_.stats) {
      static const char kLine[] = "lithos: disabled by LITHOS_DISABLE: every call went straight to the driver\n";
      log_raw(kLine, sizeof kLine - 1);
    }
    return;
  }
  try {
    const StatsHeader h = stats_header();
    // A process that never touched CUDA (a shell under `lithos run`) stays silent.
    if (!h.driver_used && !s.touched()) return;
    if (config_.stats) {
      const std::string text = stats_text(h, s);
      log_raw(text.data(), text.size());
    }
    if (!config_.stats_file.empty()) {
      const std::string path = expand_stats_path(config_.stats_file, h.pid);
      const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
      if (fd < 0) {
        LITHOS_LOG(LogLevel::kError, "cannot write the statistics to %s: %s", path.c_str(), std::strerror(errno));
        return;
      }
      const std::string json = stats_json(h, s);
      const ssize_t w = ::write(fd, json.data(), json.size());
      if (w != static_cast<ssize_t>(json.size())) {
        LITHOS_LOG(LogLevel::kError, "short write of the statistics to %s", path.c_str());
      }
      ::close(fd);
    }
  } catch (...) {
    // Exit path: nothing more to do.
  }
}

}  // namespace lithos::intercept
