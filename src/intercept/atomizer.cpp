// Why this file is long (~700 lines): the atomizer's runtime half in one place
// (module rewriting at load, planning a launch's atoms, timing them, the report);
// the cubin work itself is in src/cubin.

#include "intercept/atomizer.hpp"

#include "intercept/cuda_abi.hpp"  // cuda.h in ABI mode

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>

#include "intercept/launch_copy.hpp"
#include "intercept/log.hpp"
#include "intercept/real_driver.hpp"

namespace lithos::intercept {
namespace {

std::uint64_t now_ns() {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
          .count());
}

bool read_whole_file(const char* path, std::vector<std::uint8_t>* out) {
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  struct stat st {};
  if (::fstat(fd, &st) != 0 || st.st_size <= 0 || st.st_size > (1ll << 30)) {
    ::close(fd);
    return false;
  }
  out->resize(static_cast<std::size_t>(st.st_size) + 1);  // + NUL: PTX files are text
  std::size_t got = 0;
  while (got < static_cast<std::size_t>(st.st_size)) {
    const ssize_t n = ::read(fd, out->data() + got, static_cast<std::size_t>(st.st_size) - got);
    if (n <= 0) {
      if (n < 0 && errno == EINTR) continue;
      ::close(fd);
      return false;
    }
    got += static_cast<std::size_t>(n);
  }
  ::close(fd);
  (*out)[got] = 0;
  return true;
}

std::string json_escape(const std::string& s) {
  std::string o;
  o.reserve(s.size());
  for (const char c : s) {
    if (c == '"' || c == '\\') {
      o += '\\';
      o += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
      o += buf;
    } else {
      o += c;
    }
  }
  return o;
}

}  // namespace

// ---- BoundsParams -----------------------------------------------------------

bool BoundsParams::build(const cubin::KernelPatch& p, void** kernel_params, void** extra) {
  offset_ = p.bounds_offset;
  params_ = nullptr;
  extra_ = nullptr;
  if (kernel_params != nullptr || extra == nullptr) {
    ptrs_.assign(p.param_count + 1, nullptr);
    for (std::uint32_t i = 0; i < p.param_count; ++i) ptrs_[i] = kernel_params != nullptr ? kernel_params[i] : nullptr;
    ptrs_[p.param_count] = bounds_;
    params_ = ptrs_.data();
    return true;
  }
  // `extra`: CU_LAUNCH_PARAM_BUFFER_POINTER / _SIZE pairs ended by _END.
  const void* buffer = nullptr;
  const std::size_t* size = nullptr;
  if (!extra_param_buffer(extra, &buffer, &size)) return false;  // leave the launch alone
  buf_size_ = p.bounds_offset + 8;
  buf_.assign(buf_size_, 0);
  std::memcpy(buf_.data(), buffer, std::min<std::size_t>(*size, p.bounds_offset));
  make_extra_list(extra_list_, buf_.data(), &buf_size_);
  extra_ = extra_list_;
  set(bounds_[0], bounds_[1]);
  return true;
}

void BoundsParams::set(std::uint32_t lo, std::uint32_t hi) {
  bounds_[0] = lo;
  bounds_[1] = hi;
  if (extra_ != nullptr) std::memcpy(buf_.data() + offset_, bounds_, sizeof bounds_);
}

// ---- Atomizer ---------------------------------------------------------------

void Atomizer::configure(const Config& c) noexcept {
  config_ = c;
  atom_config_.enabled = true;
  atom_config_.target = us(c.atom_us);
  atom_config_.per_atom_cost = us(c.atom_cost_us);
  active_.store(c.atomize, std::memory_order_relaxed);
  if (c.atomize) {
    LITHOS_LOG(LogLevel::kInfo, "atomizer on: atoms of %.0f us (per-atom cost %.0f us)%s", c.atom_us, c.atom_cost_us,
               c.atoms_forced != 0 ? ", fixed atom count (LITHOS_ATOMS)" : "");
  }
}

void Atomizer::set_rule(std::uint32_t forced, double atom_us) noexcept {
  // Plain fields read without a lock by launches: a launch racing this call
  // sees the old or the new rule (both valid).
  config_.atoms_forced = forced;
  if (atom_us > 0) {
    config_.atom_us = atom_us;
    atom_config_.target = us(atom_us);
  }
}

int Atomizer::device_sm() noexcept {
  int sm = sm_.load(std::memory_order_relaxed);
  if (sm >= 0) return sm;
  const DriverTable& d = driver();
  CUdevice dev = 0;
  int major = 0, minor = 0;
  bool have = false;
  if (d.cuCtxGetDevice != nullptr && d.cuCtxGetDevice(&dev) == CUDA_SUCCESS) have = true;
  if (!have && d.cuDeviceGet != nullptr && d.cuDeviceGet(&dev, 0) == CUDA_SUCCESS) have = true;
  if (have && d.cuDeviceGetAttribute != nullptr &&
      d.cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev) == CUDA_SUCCESS &&
      d.cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev) == CUDA_SUCCESS) {
    sm = major * 10 + minor;
    sm_.store(sm, std::memory_order_relaxed);
    return sm;
  }
  return 0;  // unknown (not cached: a later load may know)
}

int Atomizer::device_sm_count() noexcept {
  int n = sm_count_.load(std::memory_order_relaxed);
  if (n >= 0) return n;
  const DriverTable& d = driver();
  CUdevice dev = 0;
  if (d.cuCtxGetDevice != nullptr && d.cuDeviceGetAttribute != nullptr && d.cuCtxGetDevice(&dev) == CUDA_SUCCESS &&
      d.cuDeviceGetAttribute(&n, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev) == CUDA_SUCCESS && n >= 0) {
    sm_count_.store(n, std::memory_order_relaxed);
    return n;
  }
  return 0;  // unknown (not cached)
}

std::uint64_t Atomizer::wave_blocks(KernelCounters& c, const void* handle, const std::uint32_t block[3],
                                    std::uint32_t smem) noexcept {
  const DriverTable& d = driver();
  if (handle == nullptr || d.cuOccupancyMaxActiveBlocksPerMultiprocessor == nullptr) return 0;
  const std::uint64_t threads = std::uint64_t{block[0]} * block[1] * block[2];
  if (threads == 0 || threads > 1024) return 0;
  const std::uint64_t key = threads << 32 | smem;
  try {
    {
      const std::lock_guard lock(c.mu);
      const auto it = c.occupancy.find(key);
      if (it != c.occupancy.end()) return it->second;
    }
    auto* f = static_cast<CUfunction>(const_cast<void*>(handle));
    CUmodule mod = nullptr;
    // A CUkernel (cuLibrary*) handle: its function in the current context.
    if (d.cuFuncGetModule != nullptr && d.cuFuncGetModule(&mod, f) != CUDA_SUCCESS &&
        d.cuKernelGetFunction != nullptr) {
      CUfunction g = nullptr;
      if (d.cuKernelGetFunction(&g, reinterpret_cast<CUkernel>(f)) == CUDA_SUCCESS) f = g;
    }
    int per_sm = 0;
    std::uint64_t wave = 0;
    if (d.cuOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, f, static_cast<int>(threads), smem) == CUDA_SUCCESS &&
        per_sm > 0)
      wave = static_cast<std::uint64_t>(per_sm) * static_cast<std::uint64_t>(device_sm_count());
    const std::lock_guard lock(c.mu);
    c.occupancy.emplace(key, wave);
    return wave;
  } catch (...) {
    return 0;
  }
}

Atomizer::Prepared Atomizer::prepare(const void* image) noexcept {
  Prepared p;
  p.image = image;
  if (image == nullptr) return p;
  try {
    images_seen.fetch_add(1, std::memory_order_relaxed);
    const std::uint64_t t0 = now_ns();
    const int sm = device_sm();
    std::string ptx;
    auto r = cubin::atomize_image(image, sm, &ptx);
    if (!r && !ptx.empty()) {
      // The driver would JIT this PTX: do it here, then rewrite the cubin.
      const DriverTable& d = driver();
      CUlinkState link = nullptr;
      if (d.cuLinkCreate != nullptr && d.cuLinkCreate(0, nullptr, nullptr, &link) == CUDA_SUCCESS) {
        void* out = nullptr;
        std::size_t out_size = 0;
        if (d.cuLinkAddData(link, CU_JIT_INPUT_PTX, ptx.data(), ptx.size() + 1, "lithos-jit", 0, nullptr, nullptr) ==
                CUDA_SUCCESS &&
            d.cuLinkComplete(link, &out, &out_size) == CUDA_SUCCESS && out != nullptr) {
          images_jit.fetch_add(1, std::memory_order_relaxed);
          auto c = cubin::atomize_cubin(cubin::ByteView(static_cast<const std::uint8_t*>(out), out_size));
          if (c) {
            cubin::AtomizedImage img;
            img.cubin = std::move(*c);
            img.source = cubin::ImageSource::kPtx;
            r = std::move(img);
          } else {
            r = c.status();
          }
        }
        d.cuLinkDestroy(link);
      }
    }
    load_ns.fetch_add(now_ns() - t0, std::memory_order_relaxed);
    if (!r) {
      p.reason = r.status().message();
      LITHOS_LOG(LogLevel::kInfo, "atomizer: image %p not rewritten: %s", image, p.reason.c_str());
      const std::lock_guard lock(reasons_mu_);
      ++not_rewritten_[p.reason.substr(0, 120)];
      return p;
    }
    auto rec = std::make_shared<ImageRecord>();
    rec->atomized = std::move(*r);
    for (const auto& k : rec->atomized.cubin.kernels) {
      rec->by_name[k.name] = &k;
      (k.patched() ? kernels_patched : kernels_unpatched).fetch_add(1, std::memory_order_relaxed);
      counters_for(k.name, k.status);
    }
    p.image = rec->atomized.cubin.image.data();
    p.record = std::move(rec);
    images_rewritten.fetch_add(1, std::memory_order_relaxed);
  } catch (...) {
    p.image = image;
    p.record.reset();
    p.reason = "internal error";
  }
  return p;
}

Atomizer::Prepared Atomizer::prepare_file(const char* path) noexcept {
  Prepared p;
  try {
    auto bytes = std::make_shared<std::vector<std::uint8_t>>();
    if (path == nullptr || !read_whole_file(path, bytes.get())) {
      p.reason = "cannot read the file";
      return p;
    }
    p = prepare(bytes->data());
  } catch (...) {
    p = Prepared{};
  }
  return p;
}

void Atomizer::loaded(void* handle, const Prepared& p) noexcept {
  if (handle == nullptr || !p.record) return;
  try {
    const std::unique_lock lock(mu_);
    images_[handle] = p.record;
    keep_.push_back(p.record);
  } catch (...) {
  }
}

void Atomizer::load_refused(const Prepared& p, int result) noexcept {
  images_refused.fetch_add(1, std::memory_order_relaxed);
  LITHOS_LOG(LogLevel::kWarn, "the driver refused a rewritten image (CUresult %d, %zu kernels): loaded the original",
             result, p.record ? p.record->atomized.cubin.kernels.size() : std::size_t{0});
}

void Atomizer::unloaded(void* handle) noexcept {
  try {
    const std::unique_lock lock(mu_);
    images_.erase(handle);
    // Function handles of the unloaded image keep their (kept-alive) entry:
    // the driver never reuses them for another kernel while lithos runs.
  } catch (...) {
  }
}

KernelCounters* Atomizer::counters_for(const std::string& name, cubin::PatchStatus s) {
  const std::lock_guard lock(counters_mu_);
  auto& slot = counters_[name];
  if (!slot) {
    slot = std::make_unique<KernelCounters>();
    slot->name = name;
    std::uint64_t h = 1469598103934665603ULL;  // FNV-1a, once per kernel rather than per launch
    for (const char ch : name) {
      h ^= static_cast<unsigned char>(ch);
      h *= 1099511628211ULL;
    }
    slot->name_hash = h;
    slot->status = s;
  }
  return slot.get();
}

FunctionEntry Atomizer::entry_for(const std::shared_ptr<ImageRecord>& rec, const char* name) {
  FunctionEntry e;
  if (!rec || name == nullptr) return e;
  const auto it = rec->by_name.find(name);
  if (it == rec->by_name.end()) return e;
  e.patch = it->second;
  e.image = rec;
  e.counters = counters_for(it->second->name, it->second->status);
  return e;
}

void Atomizer::note_function(void* function, void* owner, const char* name) noexcept {
  if (function == nullptr) return;
  try {
    std::shared_ptr<ImageRecord> rec;
    {
      const std::shared_lock lock(mu_);
      const auto it = images_.find(owner);
      if (it != images_.end()) rec = it->second;
    }
    FunctionEntry e = entry_for(rec, name);
    const std::unique_lock lock(mu_);
    functions_[function] = std::move(e);
    table_epoch_.fetch_add(1, std::memory_order_acq_rel);
  } catch (...) {
  }
}

void Atomizer::note_function_of_kernel(void* function, void* kernel) noexcept {
  if (function == nullptr) return;
  try {
    const std::unique_lock lock(mu_);
    const auto it = functions_.find(kernel);
    if (it != functions_.end()) {
      functions_[function] = it->second;
      table_epoch_.fetch_add(1, std::memory_order_acq_rel);
    }
  } catch (...) {
  }
}

void Atomizer::note_module_of_library(void* module, void* library) noexcept {
  try {
    const std::unique_lock lock(mu_);
    const auto it = images_.find(library);
    if (it != images_.end()) images_[module] = it->second;
  } catch (...) {
  }
}

const FunctionEntry* Atomizer::lookup(const void* handle) noexcept {
  if (handle == nullptr) return nullptr;
  try {
    {
      const std::shared_lock lock(mu_);
      const auto it = functions_.find(handle);
      if (it != functions_.end()) return it->second.patch != nullptr ? &it->second : nullptr;
    }
    // A handle obtained without a hooked call (cuModuleEnumerateFunctions,
    // cuLibraryEnumerateKernels...): ask the driver which image it is from.
    const DriverTable& d = driver();
    std::shared_ptr<ImageRecord> rec;
    const char* name = nullptr;
    CUmodule mod = nullptr;
    CUlibrary lib = nullptr;
    auto* f = static_cast<CUfunction>(const_cast<void*>(handle));
    if (d.cuFuncGetModule != nullptr && d.cuFuncGetModule(&mod, f) == CUDA_SUCCESS && d.cuFuncGetName != nullptr &&
        d.cuFuncGetName(&name, f) == CUDA_SUCCESS) {
      const std::shared_lock lock(mu_);
      const auto it = images_.find(mod);
      if (it != images_.end()) rec = it->second;
    } else if (d.cuKernelGetLibrary != nullptr &&
               d.cuKernelGetLibrary(&lib, reinterpret_cast<CUkernel>(f)) == CUDA_SUCCESS &&
               d.cuKernelGetName != nullptr &&
               d.cuKernelGetName(&name, reinterpret_cast<CUkernel>(f)) == CUDA_SUCCESS) {
      const std::shared_lock lock(mu_);
      const auto it = images_.find(lib);
      if (it != images_.end()) rec = it->second;
    }
    FunctionEntry e = entry_for(rec, name);
    if (e.patch == nullptr) unknown_launches.fetch_add(1, std::memory_order_relaxed);
    const std::unique_lock lock(mu_);
    auto [it, inserted] = functions_.emplace(handle, std::move(e));
    return it->second.patch != nullptr ? &it->second : nullptr;
  } catch (...) {
    return nullptr;
  }
}

std::string Atomizer::driver_name(const void* handle) noexcept {
  const DriverTable& d = driver();
  const char* name = nullptr;
  auto* f = static_cast<CUfunction>(const_cast<void*>(handle));
  CUmodule mod = nullptr;
  // cuFuncGetModule tells a CUfunction from a CUkernel (it fails on the latter).
  if (d.cuFuncGetModule != nullptr && d.cuFuncGetModule(&mod, f) == CUDA_SUCCESS) {
    if (d.cuFuncGetName != nullptr && d.cuFuncGetName(&name, f) == CUDA_SUCCESS && name != nullptr) return name;
  } else if (d.cuKernelGetName != nullptr && d.cuKernelGetName(&name, reinterpret_cast<CUkernel>(f)) == CUDA_SUCCESS &&
             name != nullptr) {
    return name;
  }
  return {};
}

Atomizer::Launch Atomizer::plan(const FunctionEntry& e, const std::uint32_t grid[3], const std::uint32_t cluster[3],
                                bool cooperative, Stream stream, const WaveQuery& wave, bool whole) noexcept {
  Launch l;
  sched::LaunchDesc desc;
  desc.grid = {grid[0], grid[1], grid[2]};
  desc.cluster = {std::max(1u, cluster[0]), std::max(1u, cluster[1]), std::max(1u, cluster[2])};
  desc.cooperative = cooperative || e.patch->cooperative;
  const std::uint64_t blocks = desc.grid.count();
  KernelCounters& c = *e.counters;
  // Whole-wave atoms need the blocks one wave holds (not for cluster launches,
  // whose residency is per cluster, nor with a fixed count).
  if (!whole && !desc.cooperative && !desc.is_cluster() && config_.atoms_forced == 0 && wave.handle != nullptr)
    desc.wave_blocks = wave_blocks(c, wave.handle, wave.block, wave.smem);
  c.launches.fetch_add(1, std::memory_order_relaxed);

  bool sample = config_.atom_time_all;
  std::optional<Duration> predicted;
  try {
    const std::lock_guard lock(c.mu);
    const std::uint64_t n = c.seen[blocks]++;
    if (n < 2 || n % 32 == 0) sample = true;
    const auto it = c.ewma_ns.find(blocks);
    if (it != c.ewma_ns.end()) predicted = Duration(static_cast<std::int64_t>(it->second));
  } catch (...) {
  }
  if (blocks >= 0xffffffffull || whole) {
    l.plan = sched::AtomPlan{};
    l.plan.count = 1;
    l.plan.total_blocks = blocks;
    l.plan.reason = whole ? sched::AtomReason::kUnneeded : sched::AtomReason::kSingleUnit;
  } else if (config_.atoms_forced != 0) {
    // Fixed count (tests): a prediction long enough for exactly N atoms.
    sched::AtomConfig cfg = atom_config_;
    cfg.per_atom_cost = Duration(0);
    l.plan = sched::plan_atoms(cfg, desc, cfg.atom_duration() * config_.atoms_forced);
  } else {
    l.plan = sched::plan_atoms(atom_config_, desc, predicted);
  }
  if (l.plan.split()) {
    c.split_launches.fetch_add(1, std::memory_order_relaxed);
  } else {
    c.whole_reason[static_cast<int>(l.plan.reason) % sched::kAtomReasonCount].fetch_add(1, std::memory_order_relaxed);
  }

  const DriverTable& d = driver();
  if (sample && d.cuEventRecord != nullptr && d.cuStreamIsCapturing != nullptr) {
    // No timing under stream capture: nothing runs then.
    CUstreamCaptureStatus cap = CU_STREAM_CAPTURE_STATUS_NONE;
    const CUstream s = stream.plain_handle();
    if (d.cuStreamIsCapturing(s, &cap) == CUDA_SUCCESS && cap == CU_STREAM_CAPTURE_STATUS_NONE) {
      l.stream = s;
      void* ev = take_event();
      if (ev != nullptr && d.cuEventRecord(static_cast<CUevent>(ev), s) == CUDA_SUCCESS) {
        l.timed = true;
        l.start = ev;
      } else if (ev != nullptr) {
        give_event(ev);
      }
    }
  }
  return l;
}

void* Atomizer::take_event() noexcept {
  try {
    const std::lock_guard lock(timing_mu_);
    if (!free_events_.empty()) {
      void* ev = free_events_.back();
      free_events_.pop_back();
      return ev;
    }
  } catch (...) {
  }
  const DriverTable& d = driver();
  CUevent x = nullptr;
  if (d.cuEventCreate == nullptr || d.cuEventCreate(&x, CU_EVENT_DEFAULT) != CUDA_SUCCESS) return nullptr;
  return x;
}

void Atomizer::give_event(void* ev) noexcept {
  if (ev == nullptr) return;
  try {
    const std::lock_guard lock(timing_mu_);
    free_events_.push_back(ev);
  } catch (...) {
    // Lost to the pool (out of memory): the event leaks, nothing else.
  }
}

void Atomizer::finish(const FunctionEntry& e, Launch& l, bool ok) noexcept {
  if (!l.timed) return;
  const DriverTable& d = driver();
  try {
    void* end = take_event();
    if (!ok || end == nullptr ||
        d.cuEventRecord(static_cast<CUevent>(end), static_cast<CUstream>(l.stream)) != CUDA_SUCCESS) {
      give_event(l.start);
      give_event(end);
      return;
    }
    {
      const std::lock_guard lock(timing_mu_);
      pending_.push_back({l.start, end, e.counters, l.plan.total_blocks, l.plan.split()});
    }
    poll_timings(false);
  } catch (...) {
  }
}

void Atomizer::atoms_issued(const FunctionEntry& e, std::uint32_t n) noexcept {
  if (e.counters != nullptr) e.counters->atoms.fetch_add(n, std::memory_order_relaxed);
}

void Atomizer::poll_timings(bool wait) noexcept {
  const DriverTable& d = driver();
  if (d.cuEventQuery == nullptr || d.cuEventElapsedTime == nullptr) return;
  try {
    const RelaxedCaptureMode relaxed;
    const std::lock_guard lock(timing_mu_);
    auto keep = pending_.begin();
    for (auto it = pending_.begin(); it != pending_.end(); ++it) {
      CUresult q = d.cuEventQuery(static_cast<CUevent>(it->end));
      if (q == CUDA_ERROR_NOT_READY && wait && d.cuEventSynchronize != nullptr)
        q = d.cuEventSynchronize(static_cast<CUevent>(it->end));
      if (q == CUDA_ERROR_NOT_READY) {
        *keep++ = *it;
        continue;
      }
      float ms = 0;
      if (q == CUDA_SUCCESS &&
          d.cuEventElapsedTime(&ms, static_cast<CUevent>(it->start), static_cast<CUevent>(it->end)) == CUDA_SUCCESS) {
        const double ns = static_cast<double>(ms) * 1e6;
        KernelCounters& c = *it->counters;
        c.timed.fetch_add(1, std::memory_order_relaxed);
        c.timed_ns.fetch_add(static_cast<std::uint64_t>(ns), std::memory_order_relaxed);
        if (!it->split && ns > static_cast<double>(std::chrono::nanoseconds(atom_config_.atom_duration()).count())) {
          c.long_whole.fetch_add(1, std::memory_order_relaxed);
          c.long_whole_ns.fetch_add(static_cast<std::uint64_t>(ns), std::memory_order_relaxed);
        }
        const std::lock_guard clock(c.mu);
        auto [slot, fresh] = c.ewma_ns.emplace(it->blocks, ns);
        if (!fresh) slot->second = 0.75 * slot->second + 0.25 * ns;
      }
      free_events_.push_back(it->start);
      free_events_.push_back(it->end);
    }
    pending_.erase(keep, pending_.end());
  } catch (...) {
  }
}

void Atomizer::unsupported_path(const char* what) noexcept {
  if (unsupported_paths.fetch_add(1, std::memory_order_relaxed) == 0)
    LITHOS_LOG(LogLevel::kWarn, "atomizer: %s cannot carry the atom bounds; launched unmodified", what);
}

std::string Atomizer::report_json() noexcept {
  try {
    std::string o = "{\"schema\":\"lithos.atomizer/1\"";
    auto num = [&](const char* k, std::uint64_t v) { o += ",\"" + std::string(k) + "\":" + std::to_string(v); };
    num("images_seen", images_seen.load());
    num("images_rewritten", images_rewritten.load());
    num("images_refused_by_driver", images_refused.load());
    num("images_jit", images_jit.load());
    num("kernels_patched", kernels_patched.load());
    num("kernels_unpatched", kernels_unpatched.load());
    num("load_ns", load_ns.load());
    num("unknown_launches", unknown_launches.load());
    num("unsupported_paths", unsupported_paths.load());
    o += ",\"not_rewritten\":{";
    {
      const std::lock_guard lock(reasons_mu_);
      bool f0 = true;
      for (const auto& [why, n] : not_rewritten_) {
        if (!f0) o += ',';
        f0 = false;
        o += "\"" + json_escape(why) + "\":" + std::to_string(n);
      }
    }
    o += "}";
    o += ",\"kernels\":[";
    bool first = true;
    const std::lock_guard lock(counters_mu_);
    for (const auto& [name, c] : counters_) {
      if (c->launches.load() == 0) continue;
      if (!first) o += ',';
      first = false;
      o += "{\"name\":\"" + json_escape(name) + "\",\"status\":\"" + cubin::patch_status_name(c->status) + "\"";
      num("launches", c->launches.load());
      num("split_launches", c->split_launches.load());
      num("atoms", c->atoms.load());
      num("timed", c->timed.load());
      num("timed_ns", c->timed_ns.load());
      num("long_whole", c->long_whole.load());
      num("long_whole_ns", c->long_whole_ns.load());
      o += ",\"whole\":{";
      bool f2 = true;
      for (int r = 0; r < sched::kAtomReasonCount; ++r) {
        const std::uint64_t v = c->whole_reason[r].load();
        if (v == 0) continue;
        if (!f2) o += ',';
        f2 = false;
        o += "\"" + std::string(sched::atom_reason_name(static_cast<sched::AtomReason>(r))) + "\":" + std::to_string(v);
      }
      o += "}}";
    }
    o += "]}\n";
    return o;
  } catch (...) {
    return "{}\n";
  }
}

int Atomizer::report(const char* path, bool wait) noexcept {
  poll_timings(wait);
  std::string p = path != nullptr ? std::string(path) : config_.atom_report;
  if (p.empty()) return -1;
  p = expand_stats_path(p, static_cast<int>(::getpid()));
  const std::string json = report_json();
  const int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return -1;
  const ssize_t w = ::write(fd, json.data(), json.size());
  ::close(fd);
  return w == static_cast<ssize_t>(json.size()) ? 0 : -1;
}

}  // namespace lithos::intercept
