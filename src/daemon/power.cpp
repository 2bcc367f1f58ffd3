#include "daemon/power.hpp"

#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>
#include <utility>

#include "ipc/safe_file.hpp"

extern char** environ;  // NOLINT(readability-redundant-declaration): posix_spawn's

namespace lithos::daemon {

namespace {

// The few NVML declarations used here (nvml.h's, by value).
using nvmlReturn_t = int;
using nvmlDevice_t = void*;
constexpr nvmlReturn_t kSuccess = 0;
constexpr int kClockSm = 1;  // NVML_CLOCK_SM
constexpr unsigned kMaxClocks = 512;

template <class F>
bool load(void* lib, const char* sym, F& out) {
  out = reinterpret_cast<F>(::dlsym(lib, sym));
  return out != nullptr;
}

std::uint64_t mono_ns() {
  timespec t{};
  ::clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<std::uint64_t>(t.tv_sec) * 1'000'000'000ULL + static_cast<std::uint64_t>(t.tv_nsec);
}

// A GPU UUID as NVML writes it: "GPU-" and hex digits and dashes.
bool plausible_uuid(std::string_view u) {
  if (u.size() < 5 || u.size() > 80 || u.substr(0, 4) != "GPU-") return false;
  return std::all_of(u.begin() + 4, u.end(), [](char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F') || c == '-';
  });
}

}  // namespace

struct Nvml::Api {
  void* lib = nullptr;
  nvmlReturn_t (*init)() = nullptr;
  nvmlReturn_t (*shutdown)() = nullptr;
  nvmlReturn_t (*by_index)(unsigned, nvmlDevice_t*) = nullptr;
  nvmlReturn_t (*by_uuid)(const char*, nvmlDevice_t*) = nullptr;
  nvmlReturn_t (*mem_clocks)(nvmlDevice_t, unsigned*, unsigned*) = nullptr;
  nvmlReturn_t (*gfx_clocks)(nvmlDevice_t, unsigned, unsigned*, unsigned*) = nullptr;
  nvmlReturn_t (*clock_info)(nvmlDevice_t, int, unsigned*) = nullptr;
  nvmlReturn_t (*power_usage)(nvmlDevice_t, unsigned*) = nullptr;
  nvmlReturn_t (*energy)(nvmlDevice_t, unsigned long long*) = nullptr;
  nvmlReturn_t (*set_locked)(nvmlDevice_t, unsigned, unsigned) = nullptr;
  nvmlReturn_t (*reset_locked)(nvmlDevice_t) = nullptr;
  const char* (*error_string)(nvmlReturn_t) = nullptr;
  nvmlDevice_t dev = nullptr;
  bool initialised = false;

  ~Api() {
    if (initialised && shutdown != nullptr) shutdown();
    if (lib != nullptr) ::dlclose(lib);
  }
};

std::unique_ptr<Nvml> Nvml::open(const std::string& library, const std::string& uuid, std::string* why) {
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
      !load(api->lib, "nvmlDeviceGetSupportedMemoryClocks", api->mem_clocks) ||
      !load(api->lib, "nvmlDeviceGetSupportedGraphicsClocks", api->gfx_clocks) ||
      !load(api->lib, "nvmlDeviceGetClockInfo", api->clock_info) ||
      !load(api->lib, "nvmlDeviceGetPowerUsage", api->power_usage) ||
      !load(api->lib, "nvmlDeviceGetTotalEnergyConsumption", api->energy) ||
      !load(api->lib, "nvmlDeviceSetGpuLockedClocks", api->set_locked) ||
      !load(api->lib, "nvmlDeviceResetGpuLockedClocks", api->reset_locked)) {
    *why = path + " lacks the clock, power or energy functions";
    return nullptr;
  }
  (void)load(api->lib, "nvmlErrorString", api->error_string);
  std::unique_ptr<Nvml> n(new Nvml());
  n->api_ = std::move(api);
  if (nvmlReturn_t r = n->api_->init(); r != kSuccess) {
    *why = "nvmlInit: " + n->text(r);
    return nullptr;
  }
  n->api_->initialised = true;
  if (nvmlReturn_t r =
          uuid.empty() ? n->api_->by_index(0, &n->api_->dev) : n->api_->by_uuid(uuid.c_str(), &n->api_->dev);
      r != kSuccess) {
    *why = "no NVML device " + (uuid.empty() ? std::string("0") : uuid) + ": " + n->text(r);
    return nullptr;
  }
  return n;
}

Nvml::~Nvml() = default;

std::string Nvml::text(int r) const {
  const char* s = api_->error_string != nullptr ? api_->error_string(r) : nullptr;
  return s != nullptr ? std::string(s) : "NVML error " + std::to_string(r);
}

std::vector<int> Nvml::supported_mhz(std::string* why) const {
  unsigned mem[kMaxClocks];
  unsigned n = kMaxClocks;
  if (nvmlReturn_t r = api_->mem_clocks(api_->dev, &n, mem); r != kSuccess || n == 0) {
    *why = "nvmlDeviceGetSupportedMemoryClocks: " + (r != kSuccess ? text(r) : std::string("none"));
    return {};
  }
  const unsigned top = *std::max_element(mem, mem + std::min(n, kMaxClocks));
  unsigned gfx[kMaxClocks];
  unsigned m = kMaxClocks;
  if (nvmlReturn_t r = api_->gfx_clocks(api_->dev, top, &m, gfx); r != kSuccess || m == 0) {
    *why = "nvmlDeviceGetSupportedGraphicsClocks: " + (r != kSuccess ? text(r) : std::string("none"));
    return {};
  }
  std::vector<int> out;
  for (unsigned i = 0; i < std::min(m, kMaxClocks); ++i) {
    if (gfx[i] > 0 && gfx[i] < 100000) out.push_back(static_cast<int>(gfx[i]));
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  if (out.empty()) *why = "NVML lists no plausible SM clock";
  return out;
}

std::optional<int> Nvml::sm_clock_mhz() const {
  unsigned v = 0;
  if (api_->clock_info(api_->dev, kClockSm, &v) != kSuccess || v == 0 || v >= 100000) return std::nullopt;
  return static_cast<int>(v);
}

std::optional<double> Nvml::power_w() const {
  unsigned mw = 0;
  if (api_->power_usage(api_->dev, &mw) != kSuccess) return std::nullopt;
  return static_cast<double>(mw) / 1e3;
}

std::optional<double> Nvml::energy_j() const {
  unsigned long long mj = 0;
  if (api_->energy(api_->dev, &mj) != kSuccess) return std::nullopt;
  return static_cast<double>(mj) / 1e3;
}

int Nvml::set_locked(int lo_mhz, int hi_mhz) const {
  return api_->set_locked(api_->dev, static_cast<unsigned>(lo_mhz), static_cast<unsigned>(hi_mhz));
}

int Nvml::reset_locked() const { return api_->reset_locked(api_->dev); }

// ---------------------------------------------------------------------------

Power::Power(const PowerOptions& o) : opt_(o), mode_(o.mode), gov_(o.config) {}

std::unique_ptr<Power> Power::start(const PowerOptions& o, std::string* why) {
  if (o.mode == PowerMode::kOff) {
    *why = "off";
    return nullptr;
  }
  auto nvml = Nvml::open(o.library, o.uuid, why);
  if (nvml == nullptr) return nullptr;
  const std::vector<int> clocks = nvml->supported_mhz(why);
  if (clocks.empty()) return nullptr;
  PowerOptions opt = o;
  opt.config.dvfs.supported_mhz = clocks;
  opt.config.dvfs.f_max_mhz = clocks.back();
  std::unique_ptr<Power> p(new Power(opt));
  p->nvml_ = std::move(nvml);
  p->lowest_mhz_ = clocks.front();
  p->clock_mhz_ = p->nvml_->sm_clock_mhz().value_or(0);
  p->energy_j_ = p->nvml_->energy_j();
  p->last_energy_ns_ = mono_ns();
  if (p->mode_ == PowerMode::kOn) {
    if (opt.guardian_exe.empty()) {
      std::fprintf(stderr,
                   "lithosd: power: no guardian process; a clock lithosd sets is reset at a clean exit and by "
                   "`lithos power-reset` only\n");
    } else {
      int fds[2];
      if (::pipe2(fds, O_CLOEXEC) != 0) {
        std::fprintf(stderr, "lithosd: power: no guardian (pipe: %s)\n", std::strerror(errno));
      } else {
        posix_spawn_file_actions_t fa;
        posix_spawn_file_actions_init(&fa);
        posix_spawn_file_actions_adddup2(&fa, fds[0], 0);
        std::vector<std::string> args = {opt.guardian_exe, "power-reset", "--guard", "--gpu", opt.uuid};
        if (!opt.library.empty()) args.insert(args.end(), {"--nvml", opt.library});
        std::vector<char*> argv;
        for (std::string& a : args) argv.push_back(a.data());
        argv.push_back(nullptr);
        // Started with SIGINT, SIGTERM and SIGHUP blocked (it ignores them
        // first thing): a stop signal for the daemon's group cannot end it
        // before it guards.
        posix_spawnattr_t attr;
        posix_spawnattr_init(&attr);
        sigset_t stop;
        sigemptyset(&stop);
        for (const int sig : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&stop, sig);
        posix_spawnattr_setsigmask(&attr, &stop);
        posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK);
        pid_t pid = -1;
        const int rc = ::posix_spawn(&pid, opt.guardian_exe.c_str(), &fa, &attr, argv.data(), environ);
        posix_spawnattr_destroy(&attr);
        posix_spawn_file_actions_destroy(&fa);
        ::close(fds[0]);
        if (rc != 0) {
          ::close(fds[1]);
          std::fprintf(stderr, "lithosd: power: no guardian (%s: %s)\n", opt.guardian_exe.c_str(), std::strerror(rc));
        } else {
          p->guardian_fd_ = fds[1];
          p->guardian_pid_ = pid;
        }
      }
    }
  }
  std::fprintf(stderr, "lithosd: power %s on GPU %s: SM clocks %d..%d MHz (%zu), tolerated slowdown %.3g\n",
               power_mode_name(p->mode_), opt.uuid.empty() ? "0" : opt.uuid.c_str(), clocks.front(), clocks.back(),
               clocks.size(), opt.config.dvfs.tolerated_slowdown);
  return p;
}

Power::~Power() {
  if (locked_) reset();
  if (guardian_fd_ >= 0) {
    ::close(guardian_fd_);  // end of input: the guardian exits (nothing locked)
    // Reaped when it is gone within a second; otherwise left to init.
    for (int i = 0; i < 100 && guardian_pid_ > 0; ++i) {
      if (::waitpid(guardian_pid_, nullptr, WNOHANG) != 0) break;
      const timespec nap{0, 10'000'000};
      (void)::nanosleep(&nap, nullptr);
    }
  }
}

void Power::tell_guardian(char c) {
  if (guardian_fd_ < 0) return;
  if (::write(guardian_fd_, &c, 1) != 1) {
    std::fprintf(stderr, "lithosd: power: the guardian is gone (%s)\n", std::strerror(errno));
    ::close(guardian_fd_);
    guardian_fd_ = -1;
  }
}

void Power::mark(bool locked) {
  if (opt_.state_dir.empty()) return;
  auto dir = ipc::SafeDir::open(opt_.state_dir, /*create=*/true);
  if (!dir) return;
  if (locked) {
    const Status s = dir->write_file(
        kClocksLockedFile, (opt_.uuid.empty() ? std::string("0") : opt_.uuid) + " " + std::to_string(::getpid()) + "\n",
        0600,
        /*sync=*/true);
    if (!s.is_ok()) std::fprintf(stderr, "lithosd: power: %s\n", s.message().c_str());
  } else {
    (void)::unlinkat(dir->fd(), kClocksLockedFile, 0);
  }
}

void Power::completed(const sched::InflightAtom& a, Time start, Time end) { gov_.completed(a, start, end, clock_mhz_); }

void Power::apply(int mhz) {
  if (mode_ != PowerMode::kOn) return;
  if (mhz >= gov_.f_max_mhz()) {
    if (locked_) reset();
    return;
  }
  tell_guardian('L');
  if (!locked_) mark(true);
  const int r = nvml_->set_locked(lowest_mhz_, mhz);
  if (r == kSuccess) {
    locked_ = true;
    locked_mhz_ = mhz;
    ++sets_;
    return;
  }
  ++set_errors_;
  if (!locked_) {
    tell_guardian('U');
    mark(false);
  }
  if (r == Nvml::kNoPermission || r == Nvml::kNotSupported) {
    why_dry_run_ = "nvmlDeviceSetGpuLockedClocks: " + nvml_->text(r);
    std::fprintf(stderr,
                 "lithosd: power = \"on\" cannot lock GPU %s's clocks (%s); going on in dry-run. Locked clocks need "
                 "root (CAP_SYS_ADMIN) and a GPU that supports them; power = \"dry-run\" says this up front\n",
                 opt_.uuid.empty() ? "0" : opt_.uuid.c_str(), why_dry_run_.c_str());
    mode_ = PowerMode::kDryRun;
  }
}

void Power::reset() {
  const int r = nvml_->reset_locked();
  if (r != kSuccess) {
    ++set_errors_;
    std::fprintf(stderr, "lithosd: power: nvmlDeviceResetGpuLockedClocks: %s\n", nvml_->text(r).c_str());
    return;
  }
  ++resets_;
  locked_ = false;
  locked_mhz_ = 0;
  tell_guardian('U');
  mark(false);
}

std::optional<sched::PowerDecision> Power::tick(std::uint64_t now_ns, const sched::EngineState& state) {
  if (now_ns - last_sample_ns_ < 10'000'000) return std::nullopt;
  last_sample_ns_ = now_ns;
  if (const auto c = nvml_->sm_clock_mhz()) clock_mhz_ = *c;
  const Time now = Time(Duration(static_cast<Duration::rep>(now_ns)));
  if (!gov_.due(now)) return std::nullopt;
  // Energy over the interval, under the previous decision.
  const std::optional<double> e = nvml_->energy_j();
  if (const auto p = nvml_->power_w()) power_w_ = *p;
  if (e && energy_j_ && *e >= *energy_j_ && now_ns > last_energy_ns_) {
    gov_.account(static_cast<double>(now_ns - last_energy_ns_) / 1e9, *e - *energy_j_, clock_mhz_);
  }
  energy_j_ = e;
  last_energy_ns_ = now_ns;
  const sched::PowerDecision d = gov_.decide(now, state);
  if (d.changed) {
    apply(d.chosen_mhz);
    if (now_ns - last_log_ns_ >= 1'000'000'000ULL) {
      last_log_ns_ = now_ns;
      std::fprintf(stderr, "lithosd: power %s: %s %d MHz (S %.3f over %zu kernels; SM clock %d MHz, %.0f W)\n",
                   power_mode_name(mode_), mode_ == PowerMode::kOn ? "clock cap" : "would set", d.chosen_mhz,
                   d.sensitivity, d.kernels, clock_mhz_, power_w_);
    }
  }
  return d;
}

std::string Power::status_json() const {
  const sched::PowerDecision& d = gov_.last();
  nlohmann::json j;
  j["mode"] = power_mode_name(mode_);
  j["configured"] = power_mode_name(opt_.mode);
  if (!why_dry_run_.empty()) j["dry_run_because"] = why_dry_run_;
  j["chosen_mhz"] = d.chosen_mhz;
  j["sets_clocks"] = mode_ == PowerMode::kOn;
  j["locked"] = locked_;
  j["locked_mhz"] = locked_mhz_;
  j["f_max_mhz"] = gov_.f_max_mhz();
  j["sm_clock_mhz"] = clock_mhz_;
  j["sensitivity"] = d.sensitivity;
  j["unseen_kernel"] = d.unseen_kernel;
  j["decisions"] = gov_.decisions();
  j["changes"] = gov_.changes();
  j["sets"] = sets_;
  j["resets"] = resets_;
  j["set_errors"] = set_errors_;
  j["kernels_learned"] = gov_.policy().kernels_learned();
  j["kernels_seen"] = gov_.policy().kernels_seen();
  j["power_w"] = power_w_;
  j["energy_j"] = gov_.measured_j();
  j["modelled_energy_j"] = gov_.modelled_j();
  j["modelled_saving_j"] = gov_.saving_j();
  j["guardian"] = guardian_fd_ >= 0;
  j["model"] = {{"idle_w", gov_.config().energy.idle_w},
                {"exponent", gov_.config().energy.exponent},
                {"tolerated_slowdown", gov_.config().dvfs.tolerated_slowdown}};
  return j.dump();
}

// ---------------------------------------------------------------------------

namespace {

// Whether `pid` is a running lithos (its program's short name).
bool still_lithos(pid_t pid) {
  if (::kill(pid, 0) != 0 && errno == ESRCH) return false;
  char buf[64] = {};
  const int fd = ::open(("/proc/" + std::to_string(pid) + "/comm").c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const ssize_t n = ::read(fd, buf, sizeof buf - 1);
  ::close(fd);
  return n > 0 && std::string_view(buf, static_cast<std::size_t>(n)).substr(0, 6) == "lithos";
}

int reset_gpu(const std::string& uuid, const std::string& library, const char* who) {
  std::string why;
  auto n = Nvml::open(library, uuid == "0" ? std::string() : uuid, &why);
  if (n == nullptr) {
    std::fprintf(stderr, "%s: cannot reset GPU %s's clocks: %s\n", who, uuid.c_str(), why.c_str());
    return 1;
  }
  if (const int r = n->reset_locked(); r != kSuccess) {
    std::fprintf(stderr, "%s: nvmlDeviceResetGpuLockedClocks on GPU %s: %s\n", who, uuid.c_str(), n->text(r).c_str());
    return 1;
  }
  std::fprintf(stderr, "%s: GPU %s's locked clocks, left by lithosd, reset\n", who, uuid.c_str());
  return 0;
}

}  // namespace

int power_guard(const std::string& uuid, const std::string& library) {
  (void)::signal(SIGINT, SIG_IGN);
  (void)::signal(SIGTERM, SIG_IGN);
  (void)::signal(SIGHUP, SIG_IGN);
  sigset_t stop;
  sigemptyset(&stop);
  for (const int sig : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&stop, sig);
  (void)::sigprocmask(SIG_UNBLOCK, &stop, nullptr);  // ignored now (lithosd starts it with them blocked)
  bool locked = false;
  for (;;) {
    pollfd p{0, POLLIN, 0};
    const int n = ::poll(&p, 1, 1000);  // woken by input or its end; the bound only paces the loop
    if (n < 0 && errno == EINTR) continue;
    if (n == 0) continue;
    char buf[64];
    const ssize_t got = n > 0 ? ::read(0, buf, sizeof buf) : -1;
    if (got < 0 && errno == EINTR) continue;
    if (got > 0) {
      for (ssize_t i = 0; i < got; ++i) {
        if (buf[i] == 'L') locked = true;
        if (buf[i] == 'U') locked = false;
      }
      continue;
    }
    break;  // end of input (or an error): lithosd is gone
  }
  return locked ? reset_gpu(uuid.empty() ? "0" : uuid, library, "lithos power-reset --guard") : 0;
}

int power_reset_markers(const std::string& state_dir, const std::string& library) {
  std::vector<std::string> dirs = {state_dir};
  if (DIR* d = ::opendir(state_dir.c_str())) {
    while (const dirent* e = ::readdir(d)) {
      if (e->d_type == DT_DIR && std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0)
        dirs.push_back(state_dir + "/" + e->d_name);
    }
    ::closedir(d);
  }
  int rc = 0;
  for (const std::string& dir : dirs) {
    // Only a file of root or this user, in a folder no one else can change,
    // never through a link (ipc/safe_file.hpp).
    auto text = ipc::read_file_safely(dir + "/" + kClocksLockedFile, 256);
    if (!text) continue;
    // "UUID PID": the GPU, and the lithosd that locked it.
    std::string uuid = *text;
    while (!uuid.empty() && (uuid.back() == '\n' || uuid.back() == ' ')) uuid.pop_back();
    long pid = 0;
    if (const std::size_t sp = uuid.find(' '); sp != std::string::npos) {
      pid = std::strtol(uuid.c_str() + sp + 1, nullptr, 10);
      uuid.resize(sp);
    }
    if (pid > 0 && still_lithos(static_cast<pid_t>(pid))) {
      std::fprintf(stderr, "lithos power-reset: GPU %s's clocks belong to lithosd %ld, which still runs; left alone\n",
                   uuid.c_str(), pid);
      continue;
    }
    if (uuid != "0" && !plausible_uuid(uuid)) {
      std::fprintf(stderr, "lithos power-reset: %s/%s does not hold a GPU UUID; left alone\n", dir.c_str(),
                   kClocksLockedFile);
      rc = 1;
      continue;
    }
    if (reset_gpu(uuid, library, "lithos power-reset") != 0) {
      rc = 1;
      continue;
    }
    (void)::unlink((dir + "/" + kClocksLockedFile).c_str());
  }
  return rc;
}

}  // namespace lithos::daemon
