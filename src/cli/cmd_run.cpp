// `lithos run`: start an unmodified program with liblithos.so engaged.
//
//   lithos run [--tpcs N | --tpc-set LIST] [--stats] [--stats-file F] -- CMD ARGS...
//
// It finds liblithos.so (../lib/liblithos.so beside this binary, or
// $LITHOS_LIBRARY), makes sure a slot map exists for the GPU when a TPC set is
// asked for (loading it from the calibration cache, calibrating once if
// there is none), puts the library first in LD_PRELOAD, sets the LITHOS_*
// variables the library reads (docs/interposer.md), and execs the program:
// the exit status is the program's own.
//
// Without a usable NVIDIA driver or GPU it says so in one line on stderr and
// execs the program untouched (no LD_PRELOAD, no LITHOS_* added): it runs, or
// fails, exactly as it would without lithos.
#include <dirent.h>
#include <limits.h>
#include <pwd.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>
#include <CLI/CLI.hpp>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/commands.hpp"
#include "gpu/cuda_probe.hpp"
#include "gpu/driver.hpp"
#include "gpu/slot_map.hpp"
#include "ipc/socket.hpp"
#include "sched/tpc_set.hpp"

namespace lithos::cli {

namespace {

struct RunArgs {
  int tpcs = 0;
  std::string tpc_set;
  bool stats = false;
  std::string stats_file;
  std::string slot_map;
  std::string log;
  std::string backend = "auto";
  int device = 0;
  bool atomize = false;
  double atom_us = 0;  // 0: the library's default
  std::string atom_report;
  std::string tenant;      // lithosd: the tenant to claim
  std::string daemon;      // lithosd: its socket
  std::string daemon_uid;  // lithosd: the uid it runs as, trusted besides root and this user (name or number)
  bool print_env = false;  // print the environment instead of running a program
  std::string mps;         // "auto" (the tenant's setting), "on", "off" ("" = auto)
  std::vector<std::string> command;
};

constexpr int kBadInput = 2;
constexpr int kFailure = 1;

// A folder of this user's with nothing in it: CUDA_MPS_PIPE_DIRECTORY there
// keeps a process out of MPS (its driver finds no MPS control pipe and runs
// it as a plain context). Private (0700) and checked, so that no one else
// can put a control pipe of theirs there. kFailedPrecondition saying why.
Result<std::string> no_mps_folder() {
  // NOLINTNEXTLINE(concurrency-mt-unsafe): lithos run has one thread
  const char* xdg = std::getenv("XDG_RUNTIME_DIR");
  const uid_t me = ::geteuid();
  const std::string dir =
      xdg != nullptr && *xdg == '/' ? std::string(xdg) + "/lithos-no-mps" : "/tmp/lithos-no-mps-" + std::to_string(me);
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST)
    return Status::unavailable("cannot make " + dir + ": " + std::strerror(errno));
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0) return Status::unavailable(dir + ": " + std::strerror(errno));
  if (!S_ISDIR(st.st_mode) || st.st_uid != me || (st.st_mode & 077) != 0) {
    return Status::failed_precondition(dir +
                                       " is not a folder of yours that only you may use (remove it; lithos run "
                                       "makes it anew)");
  }
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return Status::unavailable(dir + ": " + std::strerror(errno));
  bool empty = true;
  while (const dirent* e = ::readdir(d)) {  // NOLINT(concurrency-mt-unsafe)
    if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) empty = false;
  }
  ::closedir(d);
  if (!empty) return Status::failed_precondition(dir + " is not empty (remove it; lithos run makes it anew)");
  return dir;
}

// Whether the lithosd at `socket` runs `tenant` outside MPS (its status's
// tenants[].mps is false); nullopt when it does not answer within a short
// bound or does not know the tenant: the process is left as it is.
std::optional<bool> tenant_outside_mps(const std::string& socket, const std::string& tenant) {
  const std::vector<std::string> sockets = ipc::sockets_for_every_gpu(socket);
  if (sockets.empty()) return std::nullopt;
  auto text = fetch_status(sockets.front(), 100);
  if (!text) return std::nullopt;
  const nlohmann::json j = nlohmann::json::parse(*text, nullptr, false);
  if (!j.is_object() || !j.contains("tenants") || !j["tenants"].is_array()) return std::nullopt;
  for (const auto& t : j["tenants"]) {
    if (t.is_object() && t.value("name", std::string()) == tenant && t.contains("mps") && t["mps"].is_boolean())
      return !t["mps"].get<bool>();
  }
  return std::nullopt;
}

// Where liblithos.so is: $LITHOS_LIBRARY, else ../lib/liblithos.so relative
// to this executable (the build tree and an install share that layout).
std::optional<std::string> find_library() {
  if (const char* env = std::getenv("LITHOS_LIBRARY"); env != nullptr && *env != '\0') {
    if (::access(env, R_OK) == 0) return std::string(env);
    std::fprintf(stderr, "lithos run: LITHOS_LIBRARY=%s: %s\n", env, std::strerror(errno));
    return std::nullopt;
  }
  const std::optional<std::string> self = executable_path();
  if (!self) {
    std::fprintf(stderr, "lithos run: cannot read /proc/self/exe: %s (set LITHOS_LIBRARY)\n", std::strerror(errno));
    return std::nullopt;
  }
  std::string dir(*self);
  dir.resize(dir.rfind('/') == std::string::npos ? 0 : dir.rfind('/'));
  const std::string candidate = dir + "/../lib/liblithos.so";
  char resolved[PATH_MAX];
  if (::realpath(candidate.c_str(), resolved) == nullptr || ::access(resolved, R_OK) != 0) {
    std::fprintf(stderr, "lithos run: cannot find liblithos.so at %s (build it, or set LITHOS_LIBRARY)\n",
                 candidate.c_str());
    return std::nullopt;
  }
  return std::string(resolved);
}

// Replaces this process by the program; returns only on failure (126/127,
// the shells' codes for "cannot execute" / "not found").
int exec_program(const std::vector<std::string>& command) {
  std::vector<char*> argv;
  argv.reserve(command.size() + 1);
  for (const std::string& a : command) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::fflush(nullptr);
  ::execvp(argv[0], argv.data());
  const int err = errno;
  std::fprintf(stderr, "lithos run: cannot run '%s': %s\n", argv[0], std::strerror(err));
  return err == ENOENT ? 127 : 126;
}

void set_env(const char* name, const std::string& value) { ::setenv(name, value.c_str(), 1); }

// The program, untouched, because lithos cannot work here (--print-env:
// there is no environment to print, exit 1).
int run_without_lithos(const RunArgs& a, const std::string& why) {
  if (a.print_env) {
    std::fprintf(stderr, "lithos run --print-env: %s: lithos cannot work on this machine\n", why.c_str());
    return kFailure;
  }
  std::fprintf(stderr, "lithos: %s; running %s without lithos\n", why.c_str(), a.command[0].c_str());
  return exec_program(a.command);
}

int run(RunArgs a) {
  if (a.print_env && !a.command.empty()) {
    std::fprintf(stderr, "lithos run: --print-env runs no program; drop '%s...' (or drop --print-env)\n",
                 a.command[0].c_str());
    return kBadInput;
  }
  if (a.command.empty() && !a.print_env) {
    std::fprintf(stderr,
                 "lithos run: no program given (lithos run [options] -- PROGRAM ARGS...; the command is "
                 "required)\n");
    return kBadInput;
  }
  // Flags first; LITHOS_TPCS / LITHOS_TPC_SET from the environment stand in
  // for missing flags (and are checked the same way).
  if (a.tpcs == 0 && a.tpc_set.empty()) {
    const char* env_n = std::getenv("LITHOS_TPCS");
    const char* env_set = std::getenv("LITHOS_TPC_SET");
    if (env_n != nullptr && *env_n != '\0' && env_set != nullptr && *env_set != '\0') {
      std::fprintf(stderr,
                   "lithos run: LITHOS_TPCS and LITHOS_TPC_SET are both set in the environment; "
                   "unset one (or pass --tpcs / --tpc-set)\n");
      return kBadInput;
    }
    if (env_n != nullptr && *env_n != '\0') {
      char* end = nullptr;
      const long v = std::strtol(env_n, &end, 10);
      if (end == env_n || *end != '\0' || v < 1 || v > sched::kMaxTpcs) {
        std::fprintf(stderr, "lithos run: LITHOS_TPCS=%s is not a TPC count between 1 and %d\n", env_n,
                     sched::kMaxTpcs);
        return kBadInput;
      }
      a.tpcs = static_cast<int>(v);
    } else if (env_set != nullptr && *env_set != '\0') {
      a.tpc_set = env_set;
    }
  }
  std::optional<sched::TpcSet> set;
  if (!a.tpc_set.empty()) {
    auto parsed = sched::TpcSet::parse(a.tpc_set);
    if (!parsed) {
      std::fprintf(stderr, "lithos run: --tpc-set '%s': %s (expected logical TPCs like 0-7,12)\n", a.tpc_set.c_str(),
                   parsed.status().message().c_str());
      return kBadInput;
    }
    if (parsed->empty()) {
      std::fprintf(stderr, "lithos run: --tpc-set '%s' is empty\n", a.tpc_set.c_str());
      return kBadInput;
    }
    set = *parsed;
  }
  // Under lithosd the daemon gives the sets: the slot map is needed.
  const bool daemon = !a.tenant.empty() || !a.daemon.empty();
  if (daemon && (a.tpcs > 0 || set)) {
    std::fprintf(stderr,
                 "lithos run: --tenant/--daemon and --tpcs/--tpc-set exclude each other: lithosd decides "
                 "the TPCs of a tenant's launches\n");
    return kBadInput;
  }
  // The daemon's uid by number, for LITHOS_DAEMON_UID ("" : none given).
  std::string daemon_uid;
  if (!a.daemon_uid.empty()) {
    if (!daemon) {
      std::fprintf(stderr, "lithos run: --daemon-uid goes with --tenant or --daemon\n");
      return kBadInput;
    }
    if (a.daemon_uid.find_first_not_of("0123456789") == std::string::npos && a.daemon_uid.size() <= 10 &&
        std::stoull(a.daemon_uid) < UINT32_MAX) {
      daemon_uid = std::to_string(std::stoull(a.daemon_uid));
    } else {
      passwd pw{};
      passwd* found = nullptr;
      std::vector<char> buf(16384);
      if (::getpwnam_r(a.daemon_uid.c_str(), &pw, buf.data(), buf.size(), &found) != 0 || found == nullptr) {
        std::fprintf(stderr, "lithos run: --daemon-uid %s: no such user (give a user name or a numeric uid)\n",
                     a.daemon_uid.c_str());
        return kBadInput;
      }
      daemon_uid = std::to_string(found->pw_uid);
    }
  }
  const bool masks = a.tpcs > 0 || set.has_value() || daemon;
  const auto library = find_library();
  if (!library) return kFailure;

  // A slot map is needed for masks through the descriptor hook.
  std::string slot_map_path = a.slot_map;
  if (slot_map_path.empty()) {
    if (const char* env = std::getenv("LITHOS_SLOT_MAP"); env != nullptr) slot_map_path = env;
  }
  std::optional<gpu::SlotMap> map;
  const bool needs_map = masks && a.backend != "green" && a.backend != "off";
  if (needs_map && !slot_map_path.empty()) {
    auto loaded = gpu::slot_map_load(slot_map_path);
    if (!loaded) {
      std::fprintf(stderr, "lithos run: slot map %s: %s\n", slot_map_path.c_str(), loaded.status().message().c_str());
      return kBadInput;
    }
    map = std::move(loaded).value();
    auto api = gpu::load_driver_api();
    if (!api) return run_without_lithos(a, api.status().message());
  } else if (needs_map) {
    // The calibration cache, or a calibration now (in a forked child under a
    // watchdog: this process never initialises CUDA before the exec).
    gpu::CalibrateRunOptions opt;
    opt.device = a.device;
    opt.other_devices = true;  // a process may make its first launch on any GPU it sees
    auto r = gpu::calibrate_device(opt);
    if (!r) {
      // No driver or no GPU: the program runs without lithos. (Checked
      // after the calibration child, so this process initialises CUDA only
      // now.)
      auto api = gpu::load_driver_api();
      if (!api) return run_without_lithos(a, api.status().message());
      if (a.backend == "auto" && r.status().code() == StatusCode::kUnavailable &&
          r.status().message().find("watchdog") == std::string::npos) {
        std::fprintf(stderr, "lithos: no slot map (%s); using the green-context backend\n",
                     r.status().message().c_str());
        a.backend = "green";
      } else if (daemon) {
        // A job sent to lithosd still runs: without a map its launches
        // cannot be confined, so it runs as without lithos (as it does when
        // no daemon answers), and says why.
        return run_without_lithos(
            a, "no slot map for this GPU (" + r.status().to_string() + "), so lithosd cannot place its launches");
      } else {
        std::fprintf(stderr,
                     "lithos run: cannot get this GPU's slot map: %s\n"
                     "lithos run: run `lithos calibrate` to see the details\n",
                     r.status().to_string().c_str());
        return kFailure;
      }
    }
    if (r && !r->from_cache) {
      std::fprintf(stderr, "lithos: calibrated the slot map of %s in %.1f s (%d live TPCs), cached at %s\n",
                   r->map.gpu_name.c_str(), r->seconds, r->map.live_tpcs(), r->cache_path.c_str());
    }
    // Said only when something was new or failed (the cached case is quiet).
    if (r && (r->others.find("calibrated") != std::string::npos || r->others.find("failed") != std::string::npos ||
              r->others.find("not tried") != std::string::npos)) {
      std::fprintf(stderr, "lithos: slot maps of the other GPUs (by device): %s\n", r->others.c_str());
    }
    if (r) slot_map_path = r->cache_path;
    if (r && !r->save_error.empty()) {
      slot_map_path = "/tmp/lithos-slot-map-" + std::to_string(::getuid()) + ".txt";
      if (auto st = gpu::slot_map_save(slot_map_path, r->map); !st.is_ok()) {
        std::fprintf(stderr, "lithos run: cannot save the slot map (%s; %s)\n", r->save_error.c_str(),
                     st.message().c_str());
        return kFailure;
      }
    }
    if (r) map = r->map;
  } else {
    auto api = gpu::load_driver_api();
    if (!api) return run_without_lithos(a, api.status().message());
    // No mask asked for: hand the library the cached map anyway when there
    // is one, so that the in-process API (lithos.h) can set stream masks.
    if (slot_map_path.empty() && a.backend != "off") {
      if (auto info = gpu::device_info(*api, a.device)) {
        const std::string cached = gpu::slot_map_cache_path(gpu::default_cache_dir(), info->uuid, info->driver_version);
        if (::access(cached.c_str(), R_OK) == 0) slot_map_path = cached;
      }
    }
  }

  // The TPC set against this GPU's live TPCs: refused before any launch.
  if (map) {
    const int live = map->live_tpcs();
    if (a.tpcs > live) {
      std::fprintf(stderr, "lithos run: --tpcs %d: this GPU (%s) has %d live TPCs; give 1-%d\n", a.tpcs,
                   map->gpu_name.c_str(), live, live);
      return kBadInput;
    }
    if (set) {
      if (auto m = gpu::mask_for(*map, *set); !m) {
        std::fprintf(stderr, "lithos run: --tpc-set %s: %s\n", a.tpc_set.c_str(), m.status().message().c_str());
        return kBadInput;
      }
    }
  }

  // The environment the library reads (docs/interposer.md). The slot map by
  // its absolute path: the program (or a job given --print-env's lines) may
  // run in another folder.
  if (!slot_map_path.empty()) {
    char resolved[PATH_MAX];
    if (::realpath(slot_map_path.c_str(), resolved) != nullptr) slot_map_path = resolved;
  }
  std::vector<std::pair<const char*, std::string>> env{{"LD_PRELOAD", *library}};
  if (a.tpcs > 0) env.emplace_back("LITHOS_TPCS", std::to_string(a.tpcs));
  if (set) env.emplace_back("LITHOS_TPC_SET", set->to_string());
  if (!slot_map_path.empty()) env.emplace_back("LITHOS_SLOT_MAP", slot_map_path);
  if (a.stats) env.emplace_back("LITHOS_STATS", "1");
  if (!a.stats_file.empty()) env.emplace_back("LITHOS_STATS_FILE", a.stats_file);
  if (!a.log.empty()) env.emplace_back("LITHOS_LOG", a.log);
  if (a.backend != "auto") env.emplace_back("LITHOS_BACKEND", a.backend);
  if (a.atomize) env.emplace_back("LITHOS_ATOMIZE", "1");
  if (a.atom_us > 0) env.emplace_back("LITHOS_ATOM_US", std::to_string(a.atom_us));
  if (!a.atom_report.empty()) env.emplace_back("LITHOS_ATOM_REPORT", a.atom_report);
  if (daemon) {
    const char* sock = std::getenv("LITHOS_DAEMON");
    env.emplace_back("LITHOS_DAEMON", !a.daemon.empty()                  ? a.daemon
                                      : sock != nullptr && *sock != '\0' ? std::string(sock)
                                                                         : ipc::default_socket_path());
    if (!a.tenant.empty()) env.emplace_back("LITHOS_TENANT", a.tenant);
    const char* uid = std::getenv("LITHOS_DAEMON_UID");
    if (!daemon_uid.empty()) {
      env.emplace_back("LITHOS_DAEMON_UID", daemon_uid);
    } else if (uid != nullptr && *uid != '\0') {
      env.emplace_back("LITHOS_DAEMON_UID", uid);  // as given (liblithos.so checks it), so that --print-env shows it
    }
    // Outside MPS when its tenant runs there (mps = false: its faults stay
    // its own; docs/daemon.md, "GPU faults") or when asked (--mps off).
    bool outside = a.mps == "off";
    if (a.mps.empty() || a.mps == "auto") {
      std::string socket_path;
      for (const auto& [name, value] : env)
        if (std::strcmp(name, "LITHOS_DAEMON") == 0) socket_path = value;
      if (!a.tenant.empty()) outside = tenant_outside_mps(socket_path, a.tenant).value_or(false);
    }
    if (outside) {
      auto dir = no_mps_folder();
      if (!dir) {
        std::fprintf(stderr, "lithos run: cannot keep the program out of MPS: %s\n", dir.status().message().c_str());
        return kFailure;
      }
      env.emplace_back("CUDA_MPS_PIPE_DIRECTORY", *dir);
    }
  }
  if (a.print_env) {
    // For a job that cannot be started through `lithos run` (a container's
    // entrypoint, a Kubernetes pod): the same variables, to set there.
    for (const auto& [name, value] : env) std::printf("%s=%s\n", name, value.c_str());
    return 0;
  }
  const char* old_preload = std::getenv("LD_PRELOAD");
  ::unsetenv("LITHOS_TPCS");
  ::unsetenv("LITHOS_TPC_SET");
  for (const auto& [name, value] : env) {
    const bool preload = std::strcmp(name, "LD_PRELOAD") == 0 && old_preload != nullptr && *old_preload != '\0';
    set_env(name, preload ? value + ":" + old_preload : value);
  }
  return exec_program(a.command);
}

}  // namespace

CommandRunner add_run_command(CLI::App& app) {
  auto args = std::make_shared<RunArgs>();
  CLI::App* sub = app.add_subcommand(
      "run",
      "Run an unmodified CUDA program with lithos engaged: every kernel launch it makes (driver API, CUDA "
      "runtime, PyTorch, Triton, cuBLAS/cuDNN, CUDA graphs) is seen by liblithos.so and, with --tpcs or "
      "--tpc-set, confined to those TPCs. The exit status is the program's own. Without an NVIDIA driver or GPU "
      "the program runs as if lithos were not there.");
  sub->footer(
      "Usage: lithos run [--tpcs N | --tpc-set LIST] [--stats] [--stats-file F] -- PROGRAM ARGS...\n"
      "\n"
      "Examples:\n"
      "  lithos run --tpcs 8 --stats -- python3 infer.py      confine to the first 8 live TPCs, print coverage\n"
      "  lithos run --tpc-set 0-7,16-23 -- ./app --batch 4    confine to these logical TPCs\n"
      "  lithos run --stats -- ./app                          whole GPU; just count launches\n"
      "  lithos run --tenant svc -- python3 serve.py          under lithosd, as its tenant svc\n"
      "  lithos run --tenant svc --print-env                  the variables to give a job started otherwise\n"
      "\n"
      "A TPC is a pair of SMs: logical TPC t = SMs 2t and 2t+1 as %smid numbers them (0-65 on an H100 SXM).\n"
      "The first run with a TPC set on a GPU calibrates its slot map (a few seconds, `lithos calibrate`) and\n"
      "caches it per GPU UUID and driver version.\n"
      "\n"
      "Environment (set for the program; docs/interposer.md has them all): LD_PRELOAD (liblithos.so first),\n"
      "LITHOS_TPCS, LITHOS_TPC_SET, LITHOS_SLOT_MAP, LITHOS_STATS, LITHOS_STATS_FILE, LITHOS_LOG,\n"
      "LITHOS_BACKEND, LITHOS_ATOMIZE, LITHOS_ATOM_US, LITHOS_ATOM_REPORT, LITHOS_DAEMON, LITHOS_TENANT,\n"
      "LITHOS_DAEMON_UID. LITHOS_LIBRARY overrides where liblithos.so is found. Use `--` before the program\n"
      "when its arguments start with '-'.");
  auto* n = sub->add_option("--tpcs", args->tpcs, "Confine every launch to the first N live logical TPCs")
                ->check(CLI::Range(1, sched::kMaxTpcs));
  auto* s = sub->add_option("--tpc-set", args->tpc_set, "Confine every launch to these logical TPCs (e.g. 0-7,12)");
  n->excludes(s);
  s->excludes(n);
  sub->add_flag("--stats", args->stats,
                "Print coverage statistics to stderr when the program exits (launches seen per API path, masks "
                "applied or not and why)");
  sub->add_option("--stats-file", args->stats_file,
                  "Also append the statistics as one JSON line per process to this file (%p = pid)");
  sub->add_option("--slot-map", args->slot_map, "Use this slot map file instead of the calibration cache");
  sub->add_option("--log", args->log, "liblithos.so log level (default warn)")
      ->check(CLI::IsMember({"off", "error", "warn", "info", "debug"}));
  sub->add_option("--backend", args->backend,
                  "How launches are confined: auto (launch-descriptor hook, else green contexts), descriptor, "
                  "green, or off (observe only)")
      ->check(CLI::IsMember({"auto", "descriptor", "green", "off"}));
  sub->add_flag("--atomize", args->atomize,
                "Kernel atomizer (docs/atomizer.md): rewrite the program's sm_90 kernels when they load and run "
                "long launches as atoms of about --atom-us, so that other work waits at most about one atom");
  sub->add_option("--atom-us", args->atom_us, "Atom duration target in microseconds (default 500)")
      ->check(CLI::Range(1.0, 1e7));
  sub->add_option("--atom-report", args->atom_report,
                  "Write the atomizer's per-kernel report (JSON) to this file at exit (%p = pid)");
  sub->add_option("--tenant", args->tenant,
                  "Register with lithosd as this tenant (docs/daemon.md): the daemon decides every launch. Without "
                  "a daemon the program runs as without lithos, and says so once");
  sub->add_option("--daemon", args->daemon,
                  "lithosd's socket (default $LITHOS_DAEMON, else the default path of docs/daemon.md); implies "
                  "registering, as the tenant the daemon's match rules give");
  sub->add_option("--daemon-uid", args->daemon_uid,
                  "The user (name or uid) lithosd runs as when that is neither root nor you: the program trusts a "
                  "daemon only when the process listening on the socket runs as root, as you, or as this user "
                  "(LITHOS_DAEMON_UID; default $LITHOS_DAEMON_UID)");
  sub->add_option("--device", args->device,
                  "CUDA device whose slot map checks --tpcs/--tpc-set (default 0). The maps of every GPU the "
                  "program sees are cached too: a process is confined and scheduled on the GPU of its first launch")
      ->check(CLI::NonNegativeNumber);
  sub->add_flag("--print-env", args->print_env,
                "Run no program: print the environment lithos run would give it (NAME=VALUE lines: liblithos.so "
                "in LD_PRELOAD, the LITHOS_* variables) after the same checks, for a job started some other way "
                "(a container's entrypoint, a Kubernetes pod); put LD_PRELOAD's value before any of the job's own");
  sub->add_option("--mps", args->mps,
                  "With --tenant/--daemon: auto (default) runs the program outside MPS when lithosd says its tenant "
                  "does (mps = false: a fatal GPU fault of it then stays its own, docs/daemon.md \"GPU faults\"); "
                  "off runs it outside MPS (CUDA_MPS_PIPE_DIRECTORY set to an empty folder of yours); on leaves it "
                  "as it is")
      ->check(CLI::IsMember({"auto", "on", "off"}));
  sub->add_option("command", args->command, "The program and its arguments (required unless --print-env)");
  return [args] { return run(*args); };
}

}  // namespace lithos::cli
