// `lithos daemon` (lithosd, in the foreground) and `lithos status`.
//
//   lithos daemon [--config F] [--socket P] [--policy NAME] [--mps MODE] [--atom-us T]
//                 [--state-dir D] [--trace F] [--device N] [--no-gpu] [--print-config]
//   lithos status [--socket P] [--json | --prometheus] [--out F] [--every S]
//
// `lithos daemon` merges its settings (precedence: flags > environment
// (LITHOSD_*) > the config file > defaults) and hands them to
// daemon::serve_node (src/daemon/node.hpp), which serves the GPUs and runs
// until SIGINT/SIGTERM; --replay and --scenario-from-trace work on a trace
// instead. (Over 600 lines: a flag with its help for every daemon setting,
// and `lithos status`'s tables.)
#include <fmt/format.h>
#include <unistd.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "cli/commands.hpp"
#include "daemon/config.hpp"
#include "daemon/daemon.hpp"
#include "daemon/metrics.hpp"
#include "daemon/node.hpp"
#include "daemon/settings.hpp"
#include "daemon/trace_scenario.hpp"
#include "ipc/protocol.hpp"
#include "ipc/safe_file.hpp"
#include "ipc/socket.hpp"

namespace lithos::cli {

namespace {

constexpr int kBadInput = 2;
constexpr int kFailure = 1;

struct DaemonArgs {
  std::string config;
  // The flags of the settings table (daemon/settings.hpp), by key, as given
  // on the command line (absent: not given).
  std::map<std::string, std::string, std::less<>> settings;
  bool no_gpu = false;
  std::string slot_map;  // the GPU's shape from this file instead of the calibration cache
  bool print_config = false;
  bool config_reference = false;
  std::string replay;
  std::string to_scenario;   // --scenario-from-trace TRACE
  std::string scenario_out;  // --scenario-out DIR
};

std::atomic<bool> g_stop{false};
void on_signal(int) { g_stop.store(true); }

// A trace file, parsed; nullopt after saying why.
std::optional<daemon::Trace> read_trace(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    std::fprintf(stderr, "lithos daemon: cannot read %s\n", path.c_str());
    return std::nullopt;
  }
  std::stringstream text;
  text << f.rdbuf();
  auto trace = daemon::parse_trace_file(text.str(), path);
  if (!trace) {
    std::fprintf(stderr, "lithos daemon: %s\n", trace.status().message().c_str());
    return std::nullopt;
  }
  return std::move(trace).value();
}

// `lithos daemon --scenario-from-trace TRACE --scenario-out DIR`: a `lithos
// sim` scenario that replays what the trace's tenants launched
// (daemon::trace_to_scenario), written as DIR/scenario.toml and a JSON-lines
// trace per tenant.
int run_to_scenario(const std::string& path, const std::string& dir) {
  const auto trace = read_trace(path);
  if (!trace) return kBadInput;
  const std::string name = std::filesystem::path(path).stem().string();
  auto sc = daemon::trace_to_scenario(*trace, name.empty() ? "trace" : name, path);
  if (!sc) {
    std::fprintf(stderr, "lithos daemon: %s: %s\n", path.c_str(), sc.status().message().c_str());
    return kBadInput;
  }
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  auto write = [&](const std::string& file, const std::string& text) {
    std::ofstream o(dir + "/" + file, std::ios::trunc);
    o << text;
    return static_cast<bool>(o);
  };
  bool ok = write("scenario.toml", sc->toml);
  for (const auto& [file, text] : sc->traces) ok = write(file, text) && ok;
  if (!ok) {
    std::fprintf(stderr, "lithos daemon: cannot write into %s\n", dir.c_str());
    return kFailure;
  }
  std::printf(
      "%s: %zu tenants, %zu requests, %zu launches (%zu left out: unfinished) -> %s/scenario.toml\n"
      "run it: lithos sim --scenario %s/scenario.toml\n",
      path.c_str(), sc->tenants, sc->requests, sc->launches, sc->dropped_launches, dir.c_str(), dir.c_str());
  return 0;
}

// `lithos daemon --replay TRACE`: the trace's decisions, reproduced by the
// Engine built from its own header and tenants (daemon::replay_trace).
int run_replay(const std::string& path) {
  const auto trace = read_trace(path);
  if (!trace) return kBadInput;
  auto r = daemon::replay_trace(*trace);
  if (!r) {
    std::fprintf(stderr, "lithos daemon: %s: %s\n", path.c_str(), r.status().message().c_str());
    return kBadInput;
  }
  std::printf("%s: %zu events, %zu dispatches, %zu atoms replayed (policy %s, %d TPCs): %s\n", path.c_str(), r->events,
              r->dispatches, r->atoms, trace->header.config.policy.c_str(), trace->header.device.tpcs,
              r->same ? "the same decisions" : ("differs at " + r->difference).c_str());
  return r->same ? 0 : 1;
}

int run_daemon(const DaemonArgs& a) {
  if (a.config_reference) {
    std::fputs(daemon::config_reference_markdown().c_str(), stdout);
    return 0;
  }
  if (!a.to_scenario.empty()) return run_to_scenario(a.to_scenario, a.scenario_out.empty() ? "." : a.scenario_out);
  if (!a.replay.empty()) return run_replay(a.replay);
  // Config: defaults < file < environment < flags.
  daemon::DaemonConfig cfg = daemon::default_config();
  std::string path = a.config;
  const bool explicit_path = !path.empty();
  if (path.empty() && ::access("/etc/lithos/lithosd.toml", R_OK) == 0) path = "/etc/lithos/lithosd.toml";
  if (!path.empty()) {
    auto loaded = daemon::load_config(path);
    if (!loaded) {
      if (explicit_path || loaded.status().code() != StatusCode::kNotFound) {
        std::fprintf(stderr, "lithos daemon: %s\n", loaded.status().message().c_str());
        return kBadInput;
      }
    } else {
      cfg = std::move(loaded).value();
    }
  }
  if (Status s = daemon::apply_env(cfg, [](const char* n) { return std::getenv(n); }); !s.is_ok()) {
    std::fprintf(stderr, "lithos daemon: %s\n", s.message().c_str());
    return kBadInput;
  }
  for (const daemon::Setting& s : daemon::settings()) {
    const auto given = a.settings.find(s.key);
    if (s.flag.empty() || given == a.settings.end() || given->second.empty()) continue;
    if (Status st = daemon::set_setting(cfg, s, given->second, s.flag); !st.is_ok()) {
      std::fprintf(stderr, "lithos daemon: %s\n", st.message().c_str());
      return kBadInput;
    }
  }

  daemon::NodeOptions node;
  node.config = std::move(cfg);
  node.no_gpu = a.no_gpu;
  node.slot_map = a.slot_map;
  node.print_config = a.print_config;
  return daemon::serve_node(std::move(node));
}

// ---- lithos status --------------------------------------------------------

struct StatusArgs {
  std::string socket;
  bool json = false;
  bool prometheus = false;
  std::string out;   // "" = stdout
  double every = 0;  // seconds between rounds; 0 = one round
};

}  // namespace

// lithosd's status answer (commands.hpp).
Result<std::string> fetch_status(const std::string& socket, int timeout_ms) {
  auto fd = ipc::connect_socket(socket, std::min(timeout_ms, 1000));
  if (!fd) return Status::unavailable("no lithosd at " + socket + ": " + fd.status().message());
  ipc::Hello hello;
  hello.kind = ipc::HelloKind::kStatus;
  hello.pid = static_cast<std::int32_t>(::getpid());
  std::string buf(1 << 20, '\0');
  int passed = -1;
  Status st = ipc::send_packet(fd.value(), &hello, sizeof hello);
  Result<std::size_t> got =
      st.is_ok() ? ipc::recv_packet(fd.value(), buf.data(), buf.size(), &passed, timeout_ms) : Result<std::size_t>(st);
  ::close(fd.value());
  if (passed >= 0) ::close(passed);
  if (!got || got.value() == 0) {
    return Status::unavailable("lithosd at " + socket +
                               " did not answer: " + (got ? "connection closed" : got.status().message()));
  }
  buf.resize(got.value());
  return buf;
}

namespace {

// The fault line(s) of `lithos status`: an open episode, else the last one.
void print_fault(std::FILE* f, const nlohmann::json& j) {
  const nlohmann::json& fault = j.contains("fault") ? j["fault"] : nlohmann::json();
  if (!fault.is_object()) return;
  const bool open = fault.value("state", std::string("ok")) != "ok";
  const nlohmann::json& ep = open ? fault["current"] : fault["last"];
  if (!ep.is_object()) return;
  const auto who = [](const nlohmann::json& list) {
    std::string out;
    for (const auto& p : list) {
      out += (out.empty() ? "" : ", ") + p.value("tenant", std::string("?"));
      if (p.contains("pid") && p["pid"].is_number()) out += " (pid " + std::to_string(p["pid"].get<long>()) + ")";
    }
    return out.empty() ? std::string("none") : out;
  };
  std::size_t left = 0;
  for (const auto& a : ep.value("affected", nlohmann::json::array())) left += a.value("gone", true) ? 0U : 1U;
  std::fprintf(f, "\nfault%s: %s%s, %.1f s ago; reported by %s; in flight: %s", open ? "" : " (last)",
               ep["error_name"].is_string() ? ep["error_name"].get<std::string>().c_str() : "no client report",
               ep["xid"].is_number() ? (", Xid " + std::to_string(ep["xid"].get<long>())).c_str() : "",
               ep.value("age_s", 0.0), who(ep.value("reported_by", nlohmann::json::array())).c_str(),
               who(ep.value("in_flight", nlohmann::json::array())).c_str());
  if (open) {
    std::fprintf(f, "; %s, %zu affected process(es) still there\n", fault.value("state", std::string()).c_str(), left);
  } else {
    std::fprintf(f, "; %s after %.0f ms\n", ep.value("outcome", std::string()).c_str(),
                 ep.value("closed_after_ms", 0.0));
  }
}

// The power line of `lithos status` (docs/efficiency.md, "Power").
void print_power(std::FILE* f, const nlohmann::json& j) {
  const nlohmann::json& p = j.contains("power") ? j["power"] : nlohmann::json();
  if (!p.is_object()) return;
  const std::string mode = p.value("mode", std::string("off"));
  if (mode == "off") {
    std::fprintf(
        f, "power: off%s\n",
        p.contains("state") && p["state"] != "off" ? (" (" + p.value("state", std::string()) + ")").c_str() : "");
    return;
  }
  std::fprintf(f,
               "power: %s%s; clock %s %d MHz (SM clock %d MHz), S %.3f, %llu changes, %zu of %zu kernels learnt; "
               "%.0f W, %.0f J measured, %.0f J saved by the model\n",
               mode.c_str(),
               p.contains("dry_run_because") ? (" (" + p.value("dry_run_because", std::string()) + ")").c_str() : "",
               mode == "on" ? "set" : "would set", p.value("chosen_mhz", 0), p.value("sm_clock_mhz", 0),
               p.value("sensitivity", 0.0), p.value("changes", 0ULL), p.value("kernels_learned", std::size_t{0}),
               p.value("kernels_seen", std::size_t{0}), p.value("power_w", 0.0), p.value("energy_j", 0.0),
               p.value("modelled_saving_j", 0.0));
}

void print_human(std::FILE* f, const nlohmann::json& j) {
  const double up = j.value("uptime_s", 0.0), cpu = j.value("cpu_s", 0.0);
  const nlohmann::json& dev = j["device"];
  const std::string uuid = dev.contains("uuid") && dev["uuid"].is_string() ? dev["uuid"].get<std::string>() + ", " : "";
  std::fprintf(
      f, "lithosd pid %d on %s, policy %s, up %.0f s (CPU %.1f s, %.1f%% of one core); device %s%d TPCs, %d GPCs\n",
      j.value("pid", 0), j.value("socket", std::string()).c_str(), j.value("policy", std::string()).c_str(), up, cpu,
      up > 0 ? 100.0 * cpu / up : 0.0, uuid.c_str(), dev.value("tpcs", 0), dev.value("gpcs", 0));
  if (j.contains("settings") && j["settings"].is_object() && !j["settings"].empty()) {
    std::string line;
    for (const auto& [key, value] : j["settings"].items())
      line += (line.empty() ? "" : ", ") + key + " " + value.dump();
    std::fprintf(f, "settings: %s\n", line.c_str());
  }
  std::fprintf(f, "\n%-16s %-12s %5s %7s %6s %8s %8s %-14s %s\n", "tenant", "class", "quota", "clients", "active",
               "pending", "inflight", "holds", "allocation");
  for (const auto& t : j["tenants"]) {
    std::fprintf(f, "%-16s %-12s %5d %7d %6s %8d %8d %-14s %s\n", t.value("name", std::string()).c_str(),
                 t.value("class", std::string()).c_str(), t.value("quota", 0), t.value("clients", 0),
                 t.value("active", false) ? "yes" : "no", t.value("pending_launches", 0), t.value("inflight_atoms", 0),
                 t.value("held", std::string()).c_str(),
                 (t.value("allocation", std::string()) + (t.value("runs_free", false) ? " (runs free)" : "")).c_str());
  }
  for (const auto& t : j["tenants"]) {
    if (!t.contains("pause") || !t["pause"].is_object()) continue;
    const nlohmann::json& p = t["pause"];
    const bool automatic = t.value("pauses_best_effort", nlohmann::json()).is_string();
    std::string line = t.value("name", std::string()) + " pauses best effort " +
                       (automatic ? "(auto): " + p.value("phase", std::string()) : std::string("whenever it works"));
    if (p.contains("until_ms")) line += fmt::format(" for {:.1f} s more", p.value("until_ms", 0.0) / 1e3);
    if (automatic) {
      if (p.contains("slowdown")) {
        line +=
            fmt::format("; beside best effort its work last took {:.2f}x as long as without", p.value("slowdown", 0.0));
      }
      if (p.contains("busy"))
        line += fmt::format(", its runs covering {:.0f}% of the time", 100.0 * p.value("busy", 0.0));
      if (p.contains("gain")) {
        line += fmt::format("; the last pause made them {:.2f}x faster", p.value("gain", 0.0));
      }
      line += fmt::format(" ({} verdicts, {} pauses, {} probes)", p.value("verdicts", 0ULL), p.value("pauses", 0ULL),
                          p.value("probes", 0ULL));
    }
    std::fprintf(f, "%s\n", line.c_str());
  }
  for (const auto& t : j["tenants"]) {
    if (!t.contains("rightsize") || !t["rightsize"].is_object()) continue;
    const nlohmann::json& r = t["rightsize"];
    const double n = std::max(1.0, r.value("executions", 0.0));
    std::string line = fmt::format(
        "{} right-sized (slip {:.2f}): {:.1f}% of its TPC-time saved ({:.3f} TPC-s), slowdown {}; decided by "
        "occupancy {:.0f}%, model {:.0f}%; {} probes ({:.1f} us predicted extra)",
        t.value("name", std::string()), r.value("slip", 0.0), 100.0 * r.value("saved_share", 0.0),
        r.value("saved_tpc_us", 0.0) / 1e6,
        r.contains("slowdown") ? fmt::format("{:.3f}x", r.value("slowdown", 0.0)) : std::string("not measured"),
        100.0 * r.value("by_occupancy", 0.0) / n, 100.0 * r.value("by_model", 0.0) / n, r.value("probes", 0ULL),
        r.value("probe_cost_us", 0.0));
    std::fprintf(f, "%s\n", line.c_str());
  }
  std::fprintf(f, "\n%-6s %-8s %-16s %-16s %4s %7s %10s %10s\n", "client", "pid", "program", "tenant", "MPS", "streams",
               "launches", "grants");
  // "-" where the daemon leaves a field out (null: another user's client).
  const auto cell = [](const nlohmann::json& c, const char* key) {
    if (!c.contains(key) || c[key].is_null()) return std::string("-");
    return c[key].is_string() ? c[key].get<std::string>() : c[key].dump();
  };
  for (const auto& c : j["clients"]) {
    const nlohmann::json mps = c.value("mps", nlohmann::json());
    std::fprintf(f, "%-6u %-8s %-16s %-16s %4s %7d %10llu %10llu\n", c.value("id", 0U), cell(c, "pid").c_str(),
                 cell(c, "program").c_str(), c.value("tenant", std::string()).c_str(),
                 mps.is_boolean() ? (mps.get<bool>() ? "yes" : "no") : "-", c.value("streams", 0),
                 static_cast<unsigned long long>(c.value("launches", 0ULL)),
                 static_cast<unsigned long long>(c.value("grants", 0ULL)));
  }
  if (j.value("view", std::string("all")) == "own") {
    std::fprintf(f,
                 "(other users' clients without pid and program: root sees them; docs/daemon.md, \"Observing it\")\n");
  }
  if (j.contains("warnings") && j["warnings"].is_array()) {
    for (const auto& w : j["warnings"]) {
      if (w.is_string()) std::fprintf(f, "warning: %s\n", w.get<std::string>().c_str());
    }
  }
  print_fault(f, j);
  print_power(f, j);
  const auto& k = j["counters"];
  std::fprintf(f,
               "\ngrants %llu (%.0f/s), completions %llu (%llu seen several under one marker), hp launches accounted "
               "%llu; clients: %llu accepted, %llu refused, %llu gone, %llu dropped; atoms reclaimed %llu\n",
               static_cast<unsigned long long>(k.value("grants", 0ULL)), k.value("grants_per_s", 0.0),
               static_cast<unsigned long long>(k.value("completions", 0ULL)),
               static_cast<unsigned long long>(k.value("shared_completions", 0ULL)),
               static_cast<unsigned long long>(k.value("running_launches", 0ULL)),
               static_cast<unsigned long long>(k.value("clients_accepted", 0ULL)),
               static_cast<unsigned long long>(k.value("clients_refused", 0ULL)),
               static_cast<unsigned long long>(k.value("clients_gone", 0ULL)),
               static_cast<unsigned long long>(k.value("clients_dropped", 0ULL)),
               static_cast<unsigned long long>(k.value("reclaimed_atoms", 0ULL)));
  std::fprintf(
      f,
      "loop: longest gap between spinning turns %.0f us (%llu over 1 ms), longest turn %.0f us, deepest submit "
      "ring %llu, doorbells %llu\n",
      k.value("max_spin_gap_us", 0.0), static_cast<unsigned long long>(k.value("spin_gaps_over_1ms", 0ULL)),
      k.value("max_step_us", 0.0), static_cast<unsigned long long>(k.value("max_submit_depth", 0ULL)),
      static_cast<unsigned long long>(k.value("doorbells", 0ULL)));
  {
    // Why clients were dropped or refused, and those held back now.
    std::string line;
    const nlohmann::json reasons = k.value("drop_reasons", nlohmann::json::object());
    for (const auto& [reason, n] : reasons.items()) {
      if (n.is_number() && n.get<double>() > 0) line += (line.empty() ? "" : ", ") + reason + " " + n.dump();
    }
    const auto throttled = k.value("throttled_clients", 0ULL);
    if (!line.empty() || throttled > 0 || k.value("doorbell_mutes", 0ULL) > 0) {
      std::fprintf(f,
                   "limits: dropped or refused by reason: %s; %llu clients throttled now (%llu times in all), "
                   "doorbells muted %llu times\n",
                   line.empty() ? "none" : line.c_str(), static_cast<unsigned long long>(throttled),
                   static_cast<unsigned long long>(k.value("throttles", 0ULL)),
                   static_cast<unsigned long long>(k.value("doorbell_mutes", 0ULL)));
    }
  }
  for (const char* cls : {"high", "best-effort"}) {
    const auto& p = j["predictor"][cls];
    std::fprintf(
        f, "predictor (%s): %llu observations, %.1f%% off by more than 50 us, mean |error| %.1f us, P99 %.1f us\n", cls,
        static_cast<unsigned long long>(p.value("observations", 0ULL)), 100.0 * p.value("miss_share", 0.0),
        p.value("mean_abs_error_us", 0.0), p.value("p99_abs_error_us", 0.0));
  }
  if (const auto& ht = j["predictor"].value("high_timed", nlohmann::json::object()); ht.value("samples", 0ULL) > 0) {
    std::fprintf(f,
                 "predictor (high, timed launches): %llu samples (mean %.1f us), %.1f%% off by more than 50 us, "
                 "mean |error| %.1f us, P99 %.1f us; %llu samples named no timed launch\n",
                 static_cast<unsigned long long>(ht.value("samples", 0ULL)), ht.value("mean_sample_us", 0.0),
                 100.0 * ht.value("miss_share", 0.0), ht.value("mean_abs_error_us", 0.0),
                 ht.value("p99_abs_error_us", 0.0),
                 static_cast<unsigned long long>(k.value("hp_samples_unmatched", 0ULL)));
  }
  const auto& pc = j["predictor"].value("cache", nlohmann::json::object());
  if (!pc.value("path", std::string()).empty()) {
    const std::string err = pc.value("error", std::string());
    std::fprintf(f, "predictor: %llu entries; cache %s: %llu loaded at start, written %llu times%s%s\n",
                 static_cast<unsigned long long>(j["predictor"].value("entries", 0ULL)),
                 pc.value("path", std::string()).c_str(),
                 static_cast<unsigned long long>(pc.value("loaded_entries", 0ULL)),
                 static_cast<unsigned long long>(pc.value("saves", 0ULL)), err.empty() ? "" : "; ", err.c_str());
  }
}

// One round on `f`: the answer in the asked format. Without one (no daemon,
// a bad answer) the reason goes to `why` and, for --prometheus, lithos_up 0
// to `f`, so that a collector reading the output learns that the daemon is
// down. Returns the round's exit status.
int write_status(std::FILE* f, const StatusArgs& a, const Result<std::string>& answer, Status* why) {
  *why = answer.status();
  if (answer && a.json) {
    std::fprintf(f, "%s\n", answer->c_str());
    return 0;
  }
  if (answer && a.prometheus) {
    const auto text = daemon::prometheus_text(*answer);
    if (text) {
      std::fputs(text->c_str(), f);
      return 0;
    }
    *why = text.status();
  }
  if (answer && !a.prometheus) {
    const nlohmann::json j = nlohmann::json::parse(*answer, nullptr, false);
    if (!j.is_discarded()) {
      print_human(f, j);
      return 0;
    }
    *why = Status::internal("the answer is not JSON");
  }
  if (a.prometheus) std::fputs(daemon::prometheus_down().c_str(), f);
  return kFailure;
}

// Runs `write` into memory, then writes that to a temporary file beside
// `path` and renames it over `path`, so that a reader (node_exporter's
// textfile collector, a script) never sees half of one round. The temporary
// file has an unpredictable name and is made with O_EXCL | O_NOFOLLOW, and a
// link at `path` is refused, not followed (ipc/safe_file.hpp): this may run as
// root, in a folder of the collector's user, whoever owns it. Returns what
// `write` returned.
Result<int> write_file_atomically(const std::string& path, const std::function<int(std::FILE*)>& write) {
  char* buf = nullptr;
  std::size_t len = 0;
  std::FILE* f = ::open_memstream(&buf, &len);
  if (f == nullptr) return Status::unavailable("cannot write " + path + ": " + std::strerror(errno));
  const int rc = write(f);
  const bool written = std::ferror(f) == 0;
  const bool closed = std::fclose(f) == 0;
  const std::string text = buf != nullptr ? std::string(buf, len) : std::string();
  std::free(buf);  // NOLINT(cppcoreguidelines-no-malloc): open_memstream's buffer
  if (!written || !closed) return Status::unavailable("cannot write " + path + ": out of memory");
  if (Status s = ipc::write_file_safely(path, text, 0644, /*create_folders=*/false, /*sync=*/false,
                                        ipc::FolderCheck::kAnyOwner);
      !s.is_ok()) {
    return Status(s.code(), "cannot write " + path + ": " + s.message());
  }
  return rc;
}

// One round: the status of every daemon `sockets` names, one after the
// other (tables apart; JSON one object per line). The exit status is the
// worst; `why` the first problem.
int write_statuses(std::FILE* f, const StatusArgs& a, const std::string& pattern,
                   const std::vector<std::string>& sockets, Status* why) {
  if (sockets.empty()) {
    return write_status(f, a, Status::unavailable("no lithosd socket matches " + pattern), why);
  }
  int rc = 0;
  for (std::size_t i = 0; i < sockets.size(); ++i) {
    if (i > 0 && !a.json) std::fputs("\n", f);
    Status w;
    rc = std::max(rc, write_status(f, a, fetch_status(sockets[i], 3000), &w));
    if (why->is_ok()) *why = w;
  }
  return rc;
}

int run_status(const StatusArgs& a) {
  const std::string socket = a.socket.empty() ? ipc::default_socket_path() : a.socket;
  if (a.every > 0) catch_stop_signals(on_signal);
  std::string said;  // the last problem said on stderr: a daemon down for hours is said once, not every round
  for (bool first = true;; first = false) {
    // `socket`, or with "%g" in it every socket of that form that exists now
    // (one lithosd per GPU); none: the round reports the pattern unanswered.
    const std::vector<std::string> sockets = ipc::sockets_for_every_gpu(socket);
    if (a.prometheus && sockets.size() > 1) {
      // One text file per daemon: its metrics carry no GPU label of their own.
      std::fprintf(stderr, "lithos status: %zu lithosd sockets match %s; --prometheus takes one (--socket PATH)\n",
                   sockets.size(), socket.c_str());
      return kBadInput;
    }
    int rc = 0;
    Status why;
    if (a.out.empty()) {
      if (a.every > 0 && !a.json && !first) std::fputs("\n", stdout);  // rounds of tables, apart
      rc = write_statuses(stdout, a, socket, sockets, &why);
      std::fflush(stdout);
    } else {
      const auto w =
          write_file_atomically(a.out, [&](std::FILE* f) { return write_statuses(f, a, socket, sockets, &why); });
      if (!w) {
        std::fprintf(stderr, "lithos status: %s\n", w.status().message().c_str());
        return kFailure;
      }
      rc = *w;
    }
    if (why.message() != said) {
      if (!why.is_ok()) std::fprintf(stderr, "lithos status: %s\n", why.message().c_str());
      if (why.is_ok() && !said.empty())
        std::fprintf(stderr, "lithos status: lithosd at %s answers again\n", socket.c_str());
      said = why.message();
    }
    if (a.every <= 0) return rc;
    // Until the next round, or SIGINT / SIGTERM (then exit 0: a service told to stop).
    using Clock = std::chrono::steady_clock;
    const Clock::time_point next =
        Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(a.every));
    while (!g_stop.load() && Clock::now() < next) {
      std::this_thread::sleep_for(std::min<Clock::duration>(std::chrono::milliseconds(50), next - Clock::now()));
    }
    if (g_stop.load()) return 0;
  }
}

}  // namespace

// "LITHOSD_SOCKET, LITHOSD_POLICY, ...": every variable of the settings table.
std::string env_list() {
  std::string out;
  for (std::string_view v : daemon::setting_env_vars()) out += (out.empty() ? "" : ", ") + std::string(v);
  return out;
}

// One option per flag of the settings table, its help the table's with the
// default and the range, checked as the table says (set_setting checks again).
void add_setting_flags(CLI::App& sub, DaemonArgs& args) {
  const daemon::DaemonConfig def = daemon::default_config();
  for (const daemon::Setting& s : daemon::settings()) {
    if (s.flag.empty()) continue;
    std::string help(s.help);
    const std::string unit = s.unit.empty() ? "" : " " + std::string(s.unit);
    const std::string value = s.get(def);
    help += " (default: " + (!s.default_text.empty() ? std::string(s.default_text)
                             : value.empty()         ? std::string("none")
                                                     : value + unit);
    if (s.type == daemon::SettingType::kNumber || s.type == daemon::SettingType::kInteger) {
      help += "; " + daemon::setting_rule(s);
    }
    help += ")";
    CLI::Option* o = sub.add_option(std::string(s.flag), args.settings[std::string(s.key)], help);
    switch (s.type) {
      case daemon::SettingType::kNumber: o->check(CLI::Range(s.lo, s.hi)); break;
      case daemon::SettingType::kInteger: o->check(CLI::Range(s.lo, s.hi) & CLI::TypeValidator<std::int64_t>()); break;
      case daemon::SettingType::kBool:
        o->check(CLI::IsMember({"true", "false", "1", "0", "yes", "no", "on", "off"}));
        break;
      case daemon::SettingType::kString:
        if (s.key == "mps") o->check(CLI::IsMember({"auto", "start", "attach", "off"}));
        break;
    }
  }
}

CommandRunner add_daemon_command(CLI::App& app) {
  auto args = std::make_shared<DaemonArgs>();
  CLI::App* sub = app.add_subcommand(
      "daemon",
      "Run lithosd in the foreground: the one scheduler of this GPU. Processes started with `lithos run "
      "--tenant NAME` register with it; it decides every launch of every process with the configured policy "
      "(default lithos: quotas, stealing, atoms, the throttle) and serves `lithos status`.");
  sub->footer(
      "Configuration: --config FILE (TOML, docs/daemon.md; default /etc/lithos/lithosd.toml when it exists).\n"
      "Precedence: flags > environment > file > defaults. Environment: " +
      env_list() +
      ". Every setting: lithos daemon --config-reference (docs/config.md). Stops on SIGINT or SIGTERM; an MPS "
      "daemon it\n"
      "started is stopped with it. Under systemd: packaging/lithosd.service.\n"
      "\n"
      "Examples:\n"
      "  lithos daemon --config svc.toml                  serve with the tenants of svc.toml\n"
      "  lithos run --tenant svc -- python3 serve.py      a client of tenant svc\n"
      "  lithos status                                     what the daemon does now\n"
      "  lithos daemon --config svc.toml --trace t.jsonl  record every scheduling event\n"
      "  lithos daemon --replay t.jsonl                   check the recorded decisions replay the same\n"
      "  lithos daemon --scenario-from-trace t.jsonl --scenario-out sc   a simulator scenario from the run");
  sub->add_option("--config", args->config, "Configuration file (TOML)");
  add_setting_flags(*sub, *args);
  sub->add_flag("--no-gpu", args->no_gpu, "Do not read the GPU: assume an H100 SXM (tests, CPU-only machines)");
  sub->add_option("--slot-map", args->slot_map,
                  "Take the GPU's TPCs and GPCs from this slot-map file (as `lithos calibrate` writes) instead of "
                  "the calibration cache; implies --no-gpu")
      ->check(CLI::ExistingFile);
  sub->add_flag("--print-config", args->print_config, "Print the merged configuration as JSON and exit");
  sub->add_flag("--config-reference", args->config_reference,
                "Print the reference of every setting (docs/config.md) as Markdown and exit");
  sub->add_option("--scenario-from-trace", args->to_scenario,
                  "Turn a trace written with --trace into a `lithos sim` scenario that replays what its tenants "
                  "launched, with the measured durations (requests end at stream synchronisations); written to "
                  "--scenario-out")
      ->check(CLI::ExistingFile);
  sub->add_option("--scenario-out", args->scenario_out,
                  "Folder for --scenario-from-trace: scenario.toml and one JSON-lines trace per tenant (default .)");
  sub->add_option("--replay", args->replay,
                  "Replay a trace written with --trace through the Engine its header describes and check that it "
                  "decides the same; exit 0 if so, 1 if not")
      ->check(CLI::ExistingFile);
  return [args] { return run_daemon(*args); };
}

CommandRunner add_status_command(CLI::App& app) {
  auto args = std::make_shared<StatusArgs>();
  CLI::App* sub = app.add_subcommand(
      "status", "What lithosd does now: tenants, allocations, in-flight work, clients, grants/s, predictor error.");
  sub->add_option("--socket", args->socket,
                  "lithosd's socket (default: see docs/daemon.md); with %g, every daemon whose socket has that form "
                  "(one per GPU), one after the other");
  CLI::Option* as_json = sub->add_flag("--json", args->json, "One JSON object (schema lithos.status/1) on stdout");
  sub->add_flag("--prometheus", args->prometheus,
                "The same numbers in the Prometheus text format (for node_exporter's textfile collector; "
                "docs/daemon.md, \"Metrics\"); with no daemon: lithos_up 0 and exit 1")
      ->excludes(as_json);
  sub->add_option("--out", args->out,
                  "Write to this file instead of stdout, atomically (a temporary file beside it, renamed over it "
                  "when complete): a reader never sees half of it");
  sub->add_option("--every", args->every,
                  "Repeat every this many seconds until SIGINT or SIGTERM (then exit 0), rewriting --out each "
                  "time; a round without a daemon is reported (--prometheus: lithos_up 0) and the next one tried")
      ->check(CLI::Range(0.1, 86400.0));
  sub->footer(
      "Examples:\n"
      "  lithos status                                   tenants, allocations, clients, counters\n"
      "  lithos status --json                            the same as one JSON object\n"
      "  lithos status --prometheus --every 15 \\\n"
      "      --out /var/lib/prometheus/node-exporter/lithos.prom   for node_exporter's textfile collector\n"
      "                                                  (packaging/lithos-metrics.service)\n"
      "Exit status: 0; 1 when no daemon answered (one round) or --out cannot be written; 2 for bad options.");
  return [args] { return run_status(*args); };
}

// `lithos power-reset`: the locked clocks lithosd left (power = "on") reset
// (docs/efficiency.md, "Power"); `--guard` is the guardian lithosd starts.
CommandRunner add_power_reset_command(CLI::App& app) {
  struct Args {
    std::string state_dir;
    std::string gpu;
    std::string nvml;
    bool guard = false;
  };
  auto args = std::make_shared<Args>();
  CLI::App* sub = app.add_subcommand(
      "power-reset",
      "Reset the GPU clocks lithosd locked (power = \"on\") and did not reset itself: every GPU named by a "
      "clocks-locked file in the state folder or a folder right under it (systemd's ExecStopPost runs it).");
  sub->add_option("--state-dir", args->state_dir, "lithosd's state_dir (default: the daemon's default)");
  sub->add_option("--nvml", args->nvml, "The NVML library (default: $LITHOS_NVML_LIBRARY, else libnvidia-ml.so.1)");
  // The guardian lithosd starts: waits for lithosd's end on its input.
  sub->add_flag("--guard", args->guard)->group("");
  sub->add_option("--gpu", args->gpu)->group("");
  return [args] {
    std::string nvml = args->nvml;
    // NOLINTNEXTLINE(concurrency-mt-unsafe): no threads yet
    if (const char* e = std::getenv("LITHOS_NVML_LIBRARY"); nvml.empty() && e != nullptr) nvml = e;
    if (args->guard) return daemon::power_guard(args->gpu, nvml);
    return daemon::power_reset_markers(args->state_dir.empty() ? daemon::default_state_dir() : args->state_dir, nvml);
  };
}

}  // namespace lithos::cli
