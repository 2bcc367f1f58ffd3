#include "gpu/cuda_probe.hpp"

#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <charconv>
#include <chrono>
#include <cstdio>

#include "gpu/watchdog.hpp"

namespace lithos::gpu {

namespace {

// State shared with the descriptor callback. The mask is written only while
// `armed` is false, by the thread that launches; the callback runs on that
// same thread inside cuLaunchKernel.
struct HookState {
  std::atomic<bool> armed{false};
  SlotMask mask;
  std::atomic<std::uint64_t> fired{0};
  std::atomic<std::uint64_t> applied{0};
  std::atomic<std::uint64_t> refused{0};
  std::atomic<std::uint8_t> version{static_cast<std::uint8_t>(QmdVersion::kUnknown)};
  std::atomic<std::uint8_t> byte58{0};
  std::atomic<std::uint8_t> byte72{0};
};
HookState g_hook;

void on_qmd(void* user, std::uint8_t* qmd) {
  auto* st = static_cast<HookState*>(user);
  st->fired.fetch_add(1, std::memory_order_relaxed);
  const QmdVersion v = qmd_detect(qmd);
  st->version.store(static_cast<std::uint8_t>(v), std::memory_order_relaxed);
  st->byte58.store(qmd[58], std::memory_order_relaxed);
  st->byte72.store(qmd[72], std::memory_order_relaxed);
  if (!st->armed.load(std::memory_order_acquire)) return;
  if (qmd_write_mask(qmd, v, st->mask).is_ok()) {
    st->applied.fetch_add(1, std::memory_order_relaxed);
  } else {
    st->refused.fetch_add(1, std::memory_order_relaxed);
  }
}

std::string hex2(unsigned v) {
  static constexpr char kHex[] = "0123456789abcdef";
  return std::string("0x") + kHex[(v >> 4) & 0xFU] + kHex[v & 0xFU];
}

// Runs one launch of `kernel` on `stream` with `mask` armed for it; checks
// that the callback applied the mask exactly once.
Result<std::set<int>> masked_run(SmidKernel& kernel, CUstream stream, const SmidLaunch& launch, const SlotMask& mask) {
  const std::uint64_t applied = g_hook.applied.load();
  const std::uint64_t refused = g_hook.refused.load();
  auto seen = kernel.run(stream, launch, [&](bool on) {
    if (on) g_hook.mask = mask;
    g_hook.armed.store(on, std::memory_order_release);
  });
  if (!seen) return seen;
  const std::uint64_t a = g_hook.applied.load() - applied;
  const std::uint64_t r = g_hook.refused.load() - refused;
  if (a != 1) {
    return Status::unavailable("the launch-descriptor callback applied the mask " + std::to_string(a) +
                               " times (refused " + std::to_string(r) + ", QMD layout " +
                               qmd_version_name(static_cast<QmdVersion>(g_hook.version.load())) +
                               "): launches are not being masked");
  }
  return seen;
}

// Retains the primary context, makes it current, creates a stream.
struct Context {
  CUdevice device = 0;
  CUcontext ctx = nullptr;
  CUstream stream = nullptr;
};
Result<Context> open_context(const DriverApi& api, int ordinal) {
  Context c;
  if (CUresult r = api.cuDeviceGet(&c.device, ordinal); r != CUDA_SUCCESS) return api.check(r, "cuDeviceGet");
  if (CUresult r = api.cuDevicePrimaryCtxRetain(&c.ctx, c.device); r != CUDA_SUCCESS) {
    return api.check(r, "cuDevicePrimaryCtxRetain");
  }
  if (CUresult r = api.cuCtxSetCurrent(c.ctx); r != CUDA_SUCCESS) return api.check(r, "cuCtxSetCurrent");
  if (CUresult r = api.cuStreamCreate(&c.stream, CU_STREAM_NON_BLOCKING); r != CUDA_SUCCESS) {
    return api.check(r, "cuStreamCreate");
  }
  return c;
}

Status install_hook(const DriverApi& api) {
  const GetExportTableFn get_table = api.export_table_fn();
  if (get_table == nullptr) return Status::unavailable("the driver has no cuGetExportTable");
  return install_descriptor_callback(get_table, &on_qmd, &g_hook);
}

// --- the child -> parent encoding of CalibrateRunResult -------------------

std::string encode_run(const CalibrateRunResult& r) {
  std::string out;
  out += "from_cache " + std::to_string(r.from_cache ? 1 : 0) + "\n";
  out += "cache_path " + r.cache_path + "\n";
  out += "qmd_version " + r.qmd_version + "\n";
  out += "qmd_tested " + std::to_string(r.qmd_tested ? 1 : 0) + "\n";
  out += "params_size " + std::to_string(r.params_size) + "\n";
  out += "launches " + std::to_string(r.stats.launches) + "\n";
  out += "bootstrap " + std::to_string(r.stats.bootstrap_masks) + "\n";
  out += "retried " + std::to_string(r.stats.retried) + "\n";
  char secs[64];
  std::snprintf(secs, sizeof secs, "%.6f", r.stats.seconds);
  out += std::string("calib_seconds ") + secs + "\n";
  std::string note = r.note, save_error = r.save_error;
  for (char& c : note) c = c == '\n' ? ' ' : c;
  for (char& c : save_error) c = c == '\n' ? ' ' : c;
  out += "note " + note + "\n";
  out += "save_error " + save_error + "\n";
  std::string topology_error = r.topology_error;
  for (char& c : topology_error) c = c == '\n' ? ' ' : c;
  out += "topology_error " + topology_error + "\n";
  std::string others = r.others;
  for (char& c : others) c = c == '\n' ? ' ' : c;
  out += "others " + others + "\n";
  out += "device_count " + std::to_string(r.device_count) + "\n";
  out += "topology_launches " + std::to_string(r.topology_stats.launches) + "\n";
  std::snprintf(secs, sizeof secs, "%.6f", r.topology_stats.seconds);
  out += std::string("topology_seconds ") + secs + "\n";
  std::string fits;
  for (const auto& [c, n] : r.topology_stats.max_active_clusters) {
    fits += (fits.empty() ? "" : ",") + std::to_string(c) + ":" + std::to_string(n);
  }
  out += "topology_max_active_clusters " + fits + "\n";
  out += "map\n";
  out += slot_map_serialize(r.map);
  return out;
}

Result<CalibrateRunResult> decode_run(std::string_view text) {
  CalibrateRunResult r;
  while (!text.empty()) {
    const std::size_t nl = text.find('\n');
    const std::string_view line = text.substr(0, nl);
    text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
    if (line == "map") {
      auto map = slot_map_parse(text);
      if (!map) return map.status().with_context("calibration child");
      r.map = std::move(*map);
      return r;
    }
    const std::size_t sp = line.find(' ');
    const std::string_view key = line.substr(0, sp);
    const std::string value(sp == std::string_view::npos ? std::string_view{} : line.substr(sp + 1));
    auto num = [&](int& out) { std::from_chars(value.data(), value.data() + value.size(), out); };
    if (key == "from_cache")
      r.from_cache = value == "1";
    else if (key == "cache_path")
      r.cache_path = value;
    else if (key == "others")
      r.others = value;
    else if (key == "device_count")
      num(r.device_count);
    else if (key == "qmd_version")
      r.qmd_version = value;
    else if (key == "qmd_tested")
      r.qmd_tested = value == "1";
    else if (key == "params_size") {
      int v = 0;
      num(v);
      r.params_size = static_cast<std::uint32_t>(v);
    } else if (key == "launches")
      num(r.stats.launches);
    else if (key == "bootstrap")
      num(r.stats.bootstrap_masks);
    else if (key == "retried")
      num(r.stats.retried);
    else if (key == "calib_seconds")
      r.stats.seconds = std::strtod(value.c_str(), nullptr);
    else if (key == "note")
      r.note = value;
    else if (key == "save_error")
      r.save_error = value;
    else if (key == "topology_error")
      r.topology_error = value;
    else if (key == "topology_launches")
      num(r.topology_stats.launches);
    else if (key == "topology_seconds")
      r.topology_stats.seconds = std::strtod(value.c_str(), nullptr);
    else if (key == "topology_max_active_clusters") {
      // "2:66,4:30,8:15,16:7"
      std::string_view rest = value;
      while (!rest.empty()) {
        const std::size_t comma = rest.find(',');
        const std::string_view item = rest.substr(0, comma);
        const std::size_t colon = item.find(':');
        int c = 0, n = 0;
        if (colon != std::string_view::npos) {
          std::from_chars(item.data(), item.data() + colon, c);
          std::from_chars(item.data() + colon + 1, item.data() + item.size(), n);
          r.topology_stats.max_active_clusters[c] = n;
        }
        rest.remove_prefix(comma == std::string_view::npos ? rest.size() : comma + 1);
      }
    }
  }
  return Status::internal("calibration child: answer without a slot map");
}

// Measures the topology into out.map (or records why not). False when a
// cluster launch hung: the context is wedged and the caller must not tear
// anything down (the probe is leaked on purpose; the process is about to
// end).
bool measure_topology(const DriverApi& api, const CalibrateRunOptions& options, CalibrateRunResult& out) {
  auto probe = CudaClusterProbe::create(api, options.device, options.launch.timeout_s);
  if (!probe) {
    out.topology_error = probe.status().to_string();
    return true;
  }
  auto topology = discover_topology(**probe, out.map, options.topology, &out.topology_stats);
  if (topology) {
    out.map.topology = *topology;
  } else {
    out.topology_error = topology.status().to_string();
  }
  if ((*probe)->hung()) {
    (void)probe->release();
    return false;
  }
  return true;
}

}  // namespace

Result<std::unique_ptr<CudaProbe>> CudaProbe::create(const DriverApi& api, int ordinal, const SmidLaunch& launch) {
  auto info = device_info(api, ordinal);
  if (!info) return info.status();
  std::unique_ptr<CudaProbe> p(new CudaProbe());
  p->api_ = &api;
  p->launch_ = launch;
  auto ctx = open_context(api, ordinal);
  if (!ctx) return ctx.status();
  p->device_ = ctx->device;
  p->ctx_ = ctx->ctx;
  p->stream_ = ctx->stream;
  auto kernel = SmidKernel::load(api, info->sm_count);
  if (!kernel) return kernel.status();
  p->kernel_ = std::make_unique<SmidKernel>(std::move(*kernel));
  LITHOS_RETURN_IF_ERROR(install_hook(api));

  // One unmasked launch: does the hook fire, and which QMD layout is it?
  const std::uint64_t fired = g_hook.fired.load();
  auto seen = p->kernel_->run(p->stream_, launch);
  if (!seen) return seen.status().with_context("unmasked %smid launch");
  if (g_hook.fired.load() == fired) {
    return Status::unavailable(
        "the launch-descriptor callback never fired on this driver: per-launch TPC masks are unavailable "
        "(use the green-context backend)");
  }
  p->params_size_ = descriptor_hook_stats().last_params_size;
  p->version_ = static_cast<QmdVersion>(g_hook.version.load());
  if (p->version_ == QmdVersion::kUnknown) {
    return Status::unavailable("unknown launch-descriptor layout (byte 72 = " + hex2(g_hook.byte72.load()) +
                               ", byte 58 = " + hex2(g_hook.byte58.load()) + "): lithos will not write masks into it");
  }
  p->info_.gpu_uuid = info->uuid;
  p->info_.gpu_name = info->name;
  p->info_.driver_version = info->driver_version;
  p->info_.sm_count = info->sm_count;
  p->info_.mask_slots = qmd_mask_slots(p->version_);
  return p;
}

CudaProbe::~CudaProbe() {
  if (api_ == nullptr) return;
  const GetExportTableFn get_table = api_->export_table_fn();
  if (get_table != nullptr) (void)remove_descriptor_callback(get_table, &on_qmd, &g_hook);
  if (kernel_ != nullptr && kernel_->hung()) return;  // wedged context: leave it to process exit
  kernel_.reset();
  if (stream_ != nullptr) api_->cuStreamDestroy(stream_);
  if (ctx_ != nullptr) api_->cuDevicePrimaryCtxRelease(device_);
}

Result<std::set<int>> CudaProbe::sms_seen(const SlotMask& mask) {
  if (kernel_ == nullptr) return Status::failed_precondition("CudaProbe: not initialised");
  return masked_run(*kernel_, stream_, launch_, mask);
}

Result<CalibrateRunResult> calibrate_device_in_process(const CalibrateRunOptions& options) {
  auto api = load_driver_api();
  if (!api) return api.status();
  auto info = device_info(*api, options.device);
  if (!info) return info.status();
  CalibrateRunResult out;
  const std::string dir = options.cache_dir.empty() ? default_cache_dir() : options.cache_dir;
  out.cache_path = slot_map_cache_path(dir, info->uuid, info->driver_version);
  if (!options.force) {
    auto cached = slot_map_load_cached(out.cache_path);  // never a map someone else put there
    const bool same = cached && cached->gpu_uuid == info->uuid && cached->driver_version == info->driver_version &&
                      cached->sm_count == info->sm_count;
    // Thread-block clusters exist from sm_90 on; without them the topology
    // cannot be measured, so a map without one is as good as it gets.
    const bool wants_topology = options.measure_topology && info->cc_major >= 9;
    if (same && (cached->topology.known() || !wants_topology)) {
      out.map = std::move(*cached);
      out.from_cache = true;
      return out;
    }
    if (same) {
      out.note = "cached map at " + out.cache_path +
                 " has no topology (format 1, or its measurement failed); recalibrated to measure the GPCs";
    } else if (cached) {
      out.note = "cached map at " + out.cache_path + " is for another GPU/driver; recalibrated";
    } else if (cached.status().code() != StatusCode::kNotFound) {
      out.note = "cached map unusable (" + cached.status().message() + "); recalibrated";
    }
  }
  auto probe = CudaProbe::create(*api, options.device, options.launch);
  if (!probe) return probe.status();
  out.qmd_version = qmd_version_name((*probe)->qmd_version());
  out.qmd_tested = qmd_mask_tested_on_hardware((*probe)->qmd_version());
  out.params_size = (*probe)->params_size();
  auto map = calibrate(**probe, options.calibrate, &out.stats);
  if (!map) return map.status();
  out.map = std::move(*map);
  if (options.measure_topology && !measure_topology(*api, options, out)) {
    // A cluster launch hung: the context is wedged, so the slot-map probe is
    // leaked too (its teardown could block). The map itself is sound.
    (void)probe->release();
  }
  if (options.save) {
    if (Status s = slot_map_save(out.cache_path, out.map); !s.is_ok()) out.save_error = s.message();
  }
  return out;
}

namespace {

// The other devices' maps into the same cache (CalibrateRunOptions::
// other_devices), in the calibration child.
std::string calibrate_other_devices(const CalibrateRunOptions& options, int count,
                                    std::chrono::steady_clock::time_point start) {
  std::string out;
  for (int d = 0; d < count; ++d) {
    if (d == options.device) continue;
    if (!out.empty()) out += "; ";
    const double spent = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (spent > options.timeout_s / 2.0) {
      out += std::to_string(d) + " not tried (time)";
      continue;
    }
    CalibrateRunOptions one = options;
    one.device = d;
    one.other_devices = false;
    auto r = calibrate_device_in_process(one);
    if (!r) {
      out += std::to_string(d) + " failed: " + r.status().message();
    } else if (!r->save_error.empty()) {
      out += std::to_string(d) + " failed: " + r->save_error;
    } else {
      out += std::to_string(d) + (r->from_cache ? " cached" : " calibrated");
    }
  }
  return out;
}

}  // namespace

OutsideMps::OutsideMps() {
  std::string tmpl = "/tmp/lithos-no-mps-XXXXXX";
  if (::mkdtemp(tmpl.data()) == nullptr) return;  // the driver then finds what the environment names
  dir_ = tmpl;
  ::setenv("CUDA_MPS_PIPE_DIRECTORY", dir_.c_str(), 1);
}

OutsideMps::~OutsideMps() {
  if (!dir_.empty()) ::rmdir(dir_.c_str());
}

Status OutsideMps::explain(const Status& s) const {
  const std::string& m = s.message();
  if (m.find("cuDevicePrimaryCtxRetain") == std::string::npos && m.find("cuCtxCreate") == std::string::npos) return s;
  return Status(s.code(), m + " (the slot map is measured in a CUDA context outside MPS, where SM ids are real; "
                              "a GPU in exclusive-process compute mode refuses one while an MPS server runs: run "
                              "`lithos calibrate` once with MPS stopped, or in the default compute mode; the map is "
                              "cached per GPU and driver)");
}

Result<CalibrateRunResult> calibrate_device(const CalibrateRunOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  std::fflush(nullptr);
  auto wire = run_in_child(
      [&]() -> Result<std::string> {
        const OutsideMps outside;
        auto r = calibrate_device_in_process(options);
        if (!r) return outside.explain(r.status());
        if (auto api = load_driver_api(); api && api->cuDeviceGetCount(&r->device_count) != CUDA_SUCCESS)
          r->device_count = 0;
        if (options.other_devices) r->others = calibrate_other_devices(options, r->device_count, start);
        return encode_run(*r);
      },
      options.timeout_s, "calibration");
  if (!wire) return wire.status();
  auto r = decode_run(*wire);
  if (!r) return r.status();
  r->seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return r;
}

Result<ConfinementCheck> check_mask_confinement(const DriverApi& api, int ordinal, const SlotMap& map,
                                                const sched::TpcSet& tpcs, const SmidLaunch& launch) {
  ConfinementCheck check;
  check.backend = "descriptor-hook";
  check.tpcs = tpcs.to_string();
  auto mask = mask_for(map, tpcs);  // refuses sets without live TPCs before any launch
  if (!mask) return mask.status();
  tpcs.for_each([&](int t) {
    check.expected.insert(2 * t);
    check.expected.insert(2 * t + 1);
  });
  auto ctx = open_context(api, ordinal);
  if (!ctx) return ctx.status();
  auto kernel = SmidKernel::load(api, map.sm_count);
  if (!kernel) return kernel.status();
  LITHOS_RETURN_IF_ERROR(install_hook(api));
  auto seen = masked_run(*kernel, ctx->stream, launch, *mask);
  if (!seen) return seen.status();
  check.seen = std::move(*seen);
  return check;
}

}  // namespace lithos::gpu
