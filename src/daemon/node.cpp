// Serving a node (node.hpp): the GPUs `lithos daemon` is told to serve, each
// with its slot map and its own Daemon on a thread, one MPS control
// daemon for them all, and the stop on SIGINT / SIGTERM.
#include "daemon/node.hpp"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "bench/mps.hpp"
#include "bench/process.hpp"
#include "daemon/daemon.hpp"
#include "gpu/cuda_probe.hpp"
#include "gpu/slot_map.hpp"
#include "ipc/protocol.hpp"
#include "ipc/safe_file.hpp"
#include "ipc/socket.hpp"

namespace lithos::daemon {

namespace {

constexpr int kBadInput = 2;
constexpr int kFailure = 1;

std::atomic<bool> g_stop{false};
void on_signal(int) { g_stop.store(true); }

// SIGINT and SIGTERM stop the loops (no SA_RESTART: a sleep or a wait
// returns early); SIGPIPE is ignored.
void catch_stop_signals() {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);
  ::signal(SIGPIPE, SIG_IGN);
}

// A start-up step that may wait on the driver or on MPS (a calibration
// child, nvidia-cuda-mps-control): when it has taken kSlowStepS, lithosd
// says what it is waiting for, and again every kSlowStepRepeatS, so that a
// daemon that has not come up yet is not silent about why.
class SlowStep {
 public:
  static constexpr double kSlowStepS = 3.0;
  static constexpr double kSlowStepRepeatS = 15.0;
  explicit SlowStep(std::string what) : what_(std::move(what)), start_(std::chrono::steady_clock::now()) {
    try {
      thread_ = std::thread([this] { watch(); });
    } catch (...) {  // no thread: the step runs without the notice
    }
  }
  ~SlowStep() {
    {
      const std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }
  SlowStep(const SlowStep&) = delete;
  SlowStep& operator=(const SlowStep&) = delete;

 private:
  void watch() {
    std::unique_lock<std::mutex> lock(mu_);
    double wait = kSlowStepS;
    while (!cv_.wait_for(lock, std::chrono::duration<double>(wait), [this] { return done_; })) {
      const double spent = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
      std::fprintf(stderr, "lithosd: still %s after %.0f s\n", what_.c_str(), spent);
      wait = kSlowStepRepeatS;
    }
  }
  std::string what_;
  std::chrono::steady_clock::time_point start_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;
};

// The folders an MPS control daemon started now would use for its pipes and
// its log (CUDA_MPS_PIPE_DIRECTORY and CUDA_MPS_LOG_DIRECTORY, else NVIDIA's
// defaults): started by root, it takes whatever is there, so one that is a
// link or belongs to another user (made in /tmp before MPS ran) is refused.
// A missing one is made by nvidia-cuda-mps-control itself.
Status check_mps_folders() {
  const std::pair<const char*, const char*> folders[] = {{"CUDA_MPS_PIPE_DIRECTORY", "/tmp/nvidia-mps"},
                                                         {"CUDA_MPS_LOG_DIRECTORY", "/var/log/nvidia-mps"}};
  for (const auto& [var, fallback] : folders) {
    const char* set = std::getenv(var);  // NOLINT(concurrency-mt-unsafe): before any thread
    std::string dir = set != nullptr && *set != '\0' ? set : fallback;
    while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
    std::string parent, name;
    if (!ipc::split_file_path(dir, &parent, &name).is_ok()) continue;
    // Its parent as named (/var/log may be a group's); the folder itself
    // without following a link.
    auto in = ipc::SafeDir::open(parent, /*create=*/false, ipc::FolderCheck::kAnyOwner);
    if (!in) continue;  // nothing there: MPS says what it misses
    if (Status s = in->check_subfolder(name); s.code() == StatusCode::kFailedPrecondition) {
      return Status::failed_precondition("MPS's folder (" + std::string(var) + "): " + s.message() + ", or set " + var +
                                         " to a folder of root's");
    }
  }
  return Status::ok();
}

// MPS as configured; returns whether this daemon started it (and must stop it).
// `multiuser`: start it in multi-user mode (-M); where the control program
// has no such mode, it is started without, and lithosd says so
// (`*multiuser_on`: whether it runs in it).
Result<bool> prepare_mps(MpsMode mode, bool multiuser, bool* multiuser_on) {
  *multiuser_on = false;
  if (mode == MpsMode::kOff) return false;
  const std::string control = "nvidia-cuda-mps-control";
  const SlowStep slow(mode == MpsMode::kAttach ? "asking nvidia-cuda-mps-control for a running MPS"
                                               : "starting MPS (nvidia-cuda-mps-control -d)");
  std::string out;
  auto answers = bench::run_command({control}, {}, "get_server_list\n", 5.0, "/dev/null", &out);
  const bool running = answers && *answers == 0;
  if (running) return false;
  if (mode == MpsMode::kAttach) {
    return Status::unavailable(
        "no MPS control daemon answers (" +
        std::string(answers ? "it exited with " + std::to_string(*answers) : answers.status().message()) +
        "); start one, or run with --mps start or --mps off");
  }
  if (Status s = check_mps_folders(); !s.is_ok()) {
    if (mode == MpsMode::kAuto) {
      std::fprintf(stderr, "lithosd: MPS not started: %s; clients will share the GPU without it\n",
                   s.message().c_str());
      return false;
    }
    return Status::failed_precondition("cannot start MPS: " + s.message());
  }
  auto rc = bench::run_command(
      multiuser ? std::vector<std::string>{control, "-d", "-M"} : std::vector<std::string>{control, "-d"}, {}, "", 30.0,
      "/dev/null");
  if (multiuser && (!rc || *rc != 0)) {
    std::fprintf(stderr,
                 "lithosd: MPS did not start in multi-user mode (-M: %s); starting it without: clients of a second "
                 "user id wait until the first's are done\n",
                 rc ? ("exit " + std::to_string(*rc)).c_str() : rc.status().message().c_str());
    rc = bench::run_command({control, "-d"}, {}, "", 30.0, "/dev/null");
  } else if (multiuser) {
    *multiuser_on = true;
  }
  if (!rc || *rc != 0) {
    if (mode == MpsMode::kAuto) {
      std::fprintf(stderr, "lithosd: cannot start MPS (%s); clients will share the GPU without it\n",
                   rc ? ("exit " + std::to_string(*rc)).c_str() : rc.status().message().c_str());
      return false;
    }
    return Status::unavailable("cannot start MPS: " + (rc ? "exit " + std::to_string(*rc) : rc.status().message()));
  }
  return true;
}

// Quits the MPS control daemon this daemon started, and waits (up to 15 s)
// until no MPS process is left: `quit` returns at once, and the server and
// the control daemon exit after it, so a supervisor that restarts lithosd
// at once would otherwise meet the old MPS on its way out. (Measured on two
// H100s: still running 1 s after quit.)
void quit_mps() {
  (void)bench::run_command({"nvidia-cuda-mps-control"}, {}, "quit\n", 30.0, "/dev/null");
  for (int i = 0; i < 150 && !bench::mps_process_ids("").empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  if (const auto left = bench::mps_process_ids(""); !left.empty()) {
    std::fprintf(stderr, "lithosd: %zu MPS process(es) still running 15 s after quit\n", left.size());
  }
}

// The pids of MPS's clients, as its control daemon lists them
// (get_server_list, then get_client_list of each server); none when it does
// not answer within 5 s. Called on a thread of lithosd's after a GPU fault.
std::vector<int> mps_client_pids() {
  const auto ask = [](const std::string& line) {
    std::string out;
    auto rc = bench::run_command({"nvidia-cuda-mps-control"}, {}, line + "\n", 5.0, "/dev/null", &out);
    std::vector<int> pids;
    if (!rc || *rc != 0) return pids;
    std::istringstream words(out);
    for (std::string w; words >> w;) {
      if (w.find_first_not_of("0123456789") != std::string::npos || w.size() > 9) continue;
      pids.push_back(std::stoi(w));
    }
    return pids;
  };
  std::vector<int> clients;
  for (const int server : ask("get_server_list")) {
    for (const int c : ask("get_client_list " + std::to_string(server))) clients.push_back(c);
  }
  return clients;
}

// The slot map lithosd tells its clients (ipc::Welcome::slot_map), or ""
// when its text would not fit there (said once).
std::string map_for_clients(const gpu::SlotMap& map) {
  std::string text = gpu::slot_map_serialize(map);
  if (text.size() < ipc::kSlotMapBytes) return text;
  std::fprintf(stderr,
               "lithos daemon: the slot map of %s takes %zu bytes, more than a client's welcome holds (%zu): clients "
               "without a map of their own run unmasked\n",
               map.gpu_uuid.c_str(), text.size(), ipc::kSlotMapBytes - 1);
  return {};
}

// The shape and UUID of GPU `device` into `opt`: from --slot-map, the
// calibration cache (or a calibration now), or assumed to be an H100 SXM when
// neither works and the GPU need not be known. With `device_count`, the
// calibration child also fills the cache with every other device's map and
// counts the devices (this process must not initialise CUDA itself before
// the calibrations' forks). Returns an exit status (0: go on).
int read_gpu(const NodeOptions& node, int device, bool must_know, DaemonOptions* opt, int* device_count = nullptr) {
  opt->device = sched::DeviceShape::h100_sxm();
  if (!node.slot_map.empty()) {
    auto m = gpu::slot_map_load(node.slot_map);
    if (!m) {
      std::fprintf(stderr, "lithos daemon: %s\n", m.status().message().c_str());
      return kBadInput;
    }
    const sched::TpcSet live = m->live_set();
    opt->device.tpcs = live.count();
    opt->device.topology = m->topology;
    opt->device.name = m->gpu_name;
    opt->gpu_uuid = m->gpu_uuid;
    opt->slot_map_text = map_for_clients(*m);
    return 0;
  }
  if (node.no_gpu) return 0;
  gpu::CalibrateRunOptions copt;
  copt.device = device;
  copt.other_devices = device_count != nullptr;
  const SlowStep slow("reading the slot map of GPU " + std::to_string(device) +
                      (copt.other_devices ? " and the GPUs beside it" : "") + " (a calibration child, stopped after " +
                      std::to_string(copt.timeout_s) + " s)");
  auto r = gpu::calibrate_device(copt);
  if (r && device_count != nullptr) *device_count = r->device_count;
  if (!r) {
    if (must_know) {
      std::fprintf(stderr, "lithos daemon: no slot map for GPU %d: %s\n", device, r.status().message().c_str());
      return kFailure;
    }
    std::fprintf(stderr, "lithos daemon: no slot map for GPU %d (%s); assuming an H100 SXM (66 TPCs)\n", device,
                 r.status().message().c_str());
    return 0;
  }
  const sched::TpcSet live = r->map.live_set();
  if (live != sched::TpcSet::first(live.count())) {
    std::fprintf(stderr, "lithos daemon: GPU %d: live TPCs %s are not 0-%d; not supported\n", device,
                 live.to_string().c_str(), live.count() - 1);
    return kFailure;
  }
  opt->device.tpcs = live.count();
  opt->device.topology = r->map.topology;
  opt->device.name = r->map.gpu_name;
  opt->gpu_uuid = r->map.gpu_uuid;
  opt->slot_map_text = map_for_clients(r->map);
  return 0;
}

// The GPUs `node.config.device` names into `opts`, each with its TPCs, GPCs
// and UUID, and the configuration with "%g" put in (`several`: more than one
// GPU, or all). Returns an exit status (0: go on).
int plan_gpus(NodeOptions& node, std::vector<DaemonOptions>* out, bool* several_out) {
  DaemonConfig& cfg = node.config;
  // The GPUs served: one (--device N, the default 0), a list, or all.
  std::vector<int> devices;
  bool all = false;
  if (Status s = parse_devices(cfg.device, &devices, &all); !s.is_ok()) {
    std::fprintf(stderr, "lithos daemon: --device %s: %s\n", cfg.device.c_str(), s.message().c_str());
    return kBadInput;
  }
  const bool several = all || devices.size() > 1;
  if (several) {
    if (node.no_gpu || !node.slot_map.empty()) {
      std::fprintf(stderr,
                   "lithos daemon: device %s serves several GPUs, each with its own slot map from the "
                   "calibration cache: leave out --no-gpu and --slot-map\n",
                   cfg.device.c_str());
      return kBadInput;
    }
    if (!ipc::names_gpu(cfg.socket)) {
      std::fprintf(stderr,
                   "lithos daemon: device %s serves several GPUs, one socket each: the socket path must hold %%g "
                   "(the GPU's UUID), e.g. /run/lithos/lithosd-%%g.sock; it is %s\n",
                   cfg.device.c_str(), cfg.socket.c_str());
      return kBadInput;
    }
    if (!cfg.trace.empty() && !ipc::names_gpu(cfg.trace)) {
      std::fprintf(stderr, "lithos daemon: device %s serves several GPUs: the trace path must hold %%g; it is %s\n",
                   cfg.device.c_str(), cfg.trace.c_str());
      return kBadInput;
    }
    // Each GPU's predictor cache apart: a folder per GPU under state_dir.
    if (!ipc::names_gpu(cfg.state_dir)) cfg.state_dir += "/%g";
  }
  if (all) devices = {0};  // the rest once the first calibration child has counted them

  // Each GPU: its TPCs, GPCs and UUID, and the configuration with "%g" put in.
  std::vector<DaemonOptions>& opts = *out;
  for (std::size_t i = 0; i < devices.size(); ++i) {
    const int device = devices[i];
    DaemonOptions opt;
    int count = 0;
    if (const int rc = read_gpu(node, device, several, &opt, all && i == 0 ? &count : nullptr); rc != 0) return rc;
    if (all && i == 0) {
      if (count <= 0) {
        std::fprintf(stderr, "lithos daemon: device all: the driver shows no device\n");
        return kFailure;
      }
      for (int d = 1; d < count; ++d) devices.push_back(d);
    }
    opt.config = cfg;
    for (std::string* named : {&opt.config.socket, &opt.config.state_dir, &opt.config.trace}) {
      if (!ipc::names_gpu(*named)) continue;
      if (opt.gpu_uuid.empty()) {
        std::fprintf(stderr,
                     "lithos daemon: %s names the GPU (%%g), but which GPU is not known (no slot map that names it; "
                     "give --slot-map, or leave out --no-gpu)\n",
                     named->c_str());
        return kBadInput;
      }
      *named = ipc::with_gpu(*named, opt.gpu_uuid);
    }
    if (Status s = validate(opt.config, opt.device.tpcs); !s.is_ok()) {
      std::fprintf(stderr, "lithos daemon: %s%s\n", several ? ("GPU " + std::to_string(device) + ": ").c_str() : "",
                   s.message().c_str());
      return kBadInput;
    }
    opts.push_back(std::move(opt));
  }
  *several_out = several;
  return 0;
}

// One loop thread per GPU until a stop signal. A loop that fails stops them
// all (exit 1: a supervisor restarts the whole daemon; clients reconnect).
// Each daemon is closed and its socket removed; returns whether every loop
// ended well.
bool run_loops(std::vector<std::unique_ptr<Daemon>>& served, const std::vector<DaemonOptions>& opts, bool several) {
  std::vector<Status> results(served.size());
  {
    std::vector<std::thread> loops;
    for (std::size_t i = 1; i < served.size(); ++i) {
      loops.emplace_back([&, i] {
        results[i] = served[i]->run(g_stop);
        g_stop.store(true);
      });
    }
    results[0] = served[0]->run(g_stop);
    g_stop.store(true);
    for (std::thread& t : loops) t.join();
  }
  bool ok = true;
  for (std::size_t i = 0; i < served.size(); ++i) {
    const std::string sock = served[i]->socket_path();
    if (!results[i].is_ok()) {
      ok = false;
      std::fprintf(stderr, "lithosd: %s: %s\n", sock.c_str(), results[i].message().c_str());
    }
    std::fprintf(stderr, "lithosd: stopping%s%s (%llu clients served, %llu grants)\n", several ? " " : "",
                 several ? opts[i].gpu_uuid.c_str() : "",
                 static_cast<unsigned long long>(served[i]->counters().clients_accepted),
                 static_cast<unsigned long long>(served[i]->counters().grants));
    served[i].reset();
    ::unlink(sock.c_str());
  }
  return ok;
}

}  // namespace

int serve_node(NodeOptions node) {
  std::vector<DaemonOptions> opts;
  bool several = false;
  if (const int rc = plan_gpus(node, &opts, &several); rc != 0) return rc;
  const DaemonConfig& cfg = node.config;
  if (node.print_config) {
    for (const DaemonOptions& opt : opts) std::printf("%s\n", config_json(opt.config).c_str());
    return 0;
  }
  // One MPS control daemon for the node, whichever GPUs are served.
  bool mps_multiuser = false;
  auto mps = prepare_mps(cfg.mps, cfg.mps_multiuser, &mps_multiuser);
  if (!mps) {
    std::fprintf(stderr, "lithos daemon: %s\n", mps.status().message().c_str());
    return kFailure;
  }
  {
    // A client costs a descriptor: the soft limit goes up to the hard one,
    // and a max_clients that still does not fit is said now, not when
    // clients are refused.
    std::uint64_t clients = 0;
    for (const DaemonOptions& opt : opts) clients += static_cast<std::uint64_t>(opt.config.max_clients);
    if (const std::string fit = fit_descriptors(clients, static_cast<int>(opts.size())); !fit.empty())
      std::fprintf(stderr, "lithosd: warning: %s\n", fit.c_str());
  }
  // Fatal GPU faults ("GPU faults"): NVML's critical Xid events of each GPU
  // whose UUID is known (LITHOS_NVML_LIBRARY names another NVML library: the
  // tests' fake), and, where MPS runs, its own list of its clients.
  // NOLINTNEXTLINE(concurrency-mt-unsafe): read before any thread starts
  const char* nvml = std::getenv("LITHOS_NVML_LIBRARY");
  // The guardian of locked clocks (power = "on") is this program.
  std::string self_exe;
  {
    char buf[4096];
    const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
    if (n > 0) self_exe.assign(buf, static_cast<std::size_t>(n));
  }
  for (DaemonOptions& opt : opts) {
    opt.nvml_library = nvml != nullptr ? nvml : "";
    opt.xid_events = !opt.gpu_uuid.empty() || !opt.nvml_library.empty();
    opt.power_guardian_exe = self_exe;
    if (cfg.mps != MpsMode::kOff) opt.mps_client_pids = mps_client_pids;
  }
  std::vector<std::unique_ptr<Daemon>> served;
  for (const DaemonOptions& opt : opts) {
    auto d = Daemon::create(opt);
    if (!d) {
      std::fprintf(stderr, "lithos daemon: %s\n", d.status().message().c_str());
      for (auto& up : served) {
        const std::string sock = up->socket_path();
        up.reset();
        ::unlink(sock.c_str());
      }
      if (*mps) quit_mps();
      return kFailure;
    }
    served.push_back(std::move(d).value());
  }
  catch_stop_signals();
  for (std::size_t i = 0; i < opts.size(); ++i) {
    const DaemonOptions& opt = opts[i];
    std::fprintf(stderr, "lithosd: serving %s%s%s (%d TPCs, %d GPCs) on %s, policy %s, %zu tenants%s\n",
                 opt.device.name.c_str(), opt.gpu_uuid.empty() ? "" : " ", opt.gpu_uuid.c_str(), opt.device.tpcs,
                 opt.device.topology.count(), opt.config.socket.c_str(), cfg.policy.c_str(), cfg.tenants.size(),
                 *mps && i == 0 ? (mps_multiuser ? ", MPS started (multi-user)" : ", MPS started") : "");
  }
  const bool ok = run_loops(served, opts, several);
  if (*mps) quit_mps();
  return ok ? 0 : kFailure;
}

}  // namespace lithos::daemon
