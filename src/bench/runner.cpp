#include "bench/runner.hpp"

#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <exception>
#include <filesystem>
#include <fstream>
#include <memory>
#include <thread>
#include <vector>

#include "bench/mps.hpp"
#include "bench/process.hpp"

namespace lithos::bench {

using nlohmann::json;

std::string run_id(const ModeInfo& mode, const std::optional<std::string>& alone_tenant) {
  if (mode.per_tenant && alone_tenant) return std::string(mode.name) + "-" + *alone_tenant;
  return std::string(mode.name);
}

json tenant_config(const BenchScenario& sc, const BenchTenant& t, const json& calib, bool calibrate, int device) {
  json phases = json::array();
  for (const auto& p : sc.phases) {
    json params = json::object();
    if (p.params.contains(t.name)) params = p.params.at(t.name);
    phases.push_back({{"name", p.name}, {"params", params}});
  }
  json rate = nullptr;
  if (t.kind == Kind::kService && !calibrate && calib.contains("capacity_rps") && calib["capacity_rps"].is_number()) {
    rate = t.load * calib["capacity_rps"].get<double>();
  }
  return {{"name", t.name},
          {"role", role_name(t.role)},
          {"kind", kind_name(t.kind)},
          {"workload", t.workload},
          {"params", t.params},
          {"load", t.load},
          {"rate_rps", rate},
          {"calib", calib.is_object() ? calib : json::object()},
          {"calibrate", calibrate},
          {"phases", phases},
          {"warmup_s", sc.warmup_s},
          {"window_s", sc.window_s},
          {"reps", sc.reps},
          {"drain_s", sc.drain_s},
          {"seed", sc.seed},
          {"device", device}};
}

namespace {

std::string iso_now() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string hostname() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "?";
  return buf;
}

// The last lines of a log, for error messages.
std::string log_tail(const std::string& path, std::size_t max_lines) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);) {
    lines.push_back(l);
    if (lines.size() > max_lines) lines.erase(lines.begin());
  }
  std::string s;
  for (const auto& l : lines) s += "\n    " + l;
  return s;
}

// j[key] when j is an object holding it, else `fallback`.
json field(const json& j, const char* key, json fallback) {
  return j.is_object() && j.contains(key) ? j[key] : std::move(fallback);
}

struct Tenant {
  const BenchTenant* spec = nullptr;
  TenantSetup setup;
  std::string log;
  std::vector<std::string> argv;
  EnvList env;
  std::unique_ptr<Child> child;
  json config;
  bool ready = false;
  json ready_event;
  bool done = false;
  json result;
  std::string error;
  int bad_lines = 0;
};

// One measurement window on the common clock.
struct Window {
  std::size_t phase = 0;
  int rep = 0;
  double start = 0.0;
  double end = 0.0;
  std::optional<double> e0;
  std::optional<double> e1;
  double busy_sum = 0.0;
  int busy_n = 0;
};

class ModeRun {
 public:
  ModeRun(const BenchScenario& sc, const ModeInfo& mode, std::optional<std::string> alone,
          const std::map<std::string, json>& calib, const RunnerOptions& opt, Nvml* nvml)
      : sc_(sc), mode_(mode), alone_(std::move(alone)), calib_(calib), opt_(opt), nvml_(nvml) {}

  json run() {
    id_ = run_id(mode_, alone_);
    record_ = {{"schema", "lithos.bench.run/1"},
               {"scenario", sc_.name},
               {"scenario_sha", sc_.sha},
               {"mode", mode_.name},
               {"run", id_},
               {"alone_of", alone_ ? json(*alone_) : json(nullptr)},
               {"started_at", iso_now()},
               {"commit", opt_.commit},
               {"command", opt_.command},
               {"host", hostname()},
               {"device", json::object()},
               {"status", "failed"}};
    if (nvml_ != nullptr) {
      const DeviceIdentity d = nvml_->identity();
      record_["device"] = {{"name", d.name}, {"uuid", d.uuid}, {"driver", d.driver}};
    }
    std::string err;
    try {
      err = execute();
    } catch (const std::exception& e) {
      err = std::string("internal error: ") + e.what();
    }
    teardown();
    if (err.empty()) {
      for (const auto& t : tenants_) {
        if (!t.done) err = "tenant " + t.spec->name + " gave no result";
      }
    }
    try {
      record_["tenants"] = tenant_records();
      record_["gpu"] = gpu_record();
    } catch (const std::exception& e) {
      if (err.empty()) err = std::string("internal error while recording: ") + e.what();
    }
    if (err.empty()) {
      record_["status"] = "ok";
    } else {
      record_["error"] = err;
    }
    record_["finished_at"] = iso_now();
    return record_;
  }

 private:
  void say(const std::string& line) const {
    if (opt_.progress) opt_.progress("[" + id_ + "] " + line);
  }
  bool interrupted() const { return opt_.interrupted != nullptr && opt_.interrupted->load(); }

  std::string execute() {
    const std::string log_dir = opt_.out_dir + "/logs/" + id_;
    std::error_code ec;
    std::filesystem::create_directories(log_dir, ec);
    if (ec) return "cannot create " + log_dir + ": " + ec.message();
    // Remove the logs of an earlier run of this mode: they would mislead.
    for (const auto& e : std::filesystem::directory_iterator(log_dir, ec)) std::filesystem::remove_all(e.path(), ec);

    auto plan = plan_mode(sc_, mode_, opt_.total_tpcs);
    if (!plan) return plan.status().message();
    for (std::size_t i = 0; i < sc_.tenants.size(); ++i) {
      if (alone_ && sc_.tenants[i].name != *alone_) continue;
      Tenant t;
      t.spec = &sc_.tenants[i];
      t.setup = (*plan)[i];
      tenants_.push_back(std::move(t));
    }
    if (tenants_.empty()) return "no tenant named '" + alone_.value_or("") + "'";

    const std::string script = opt_.repo_root + "/scripts/bench/tenant.py";
    if (::access(script.c_str(), R_OK) != 0) return "cannot find " + script;
    for (Tenant& t : tenants_) {
      const bool calibrate = mode_.name == "alone";
      const auto it = calib_.find(t.spec->name);
      t.config = tenant_config(sc_, *t.spec, it != calib_.end() ? it->second : json::object(), calibrate, opt_.device);
      if (t.setup.tpc_set || t.setup.atomize || !t.setup.daemon_tenant.empty()) {
        t.argv = {opt_.lithos_exe, "run"};
        if (!t.setup.daemon_tenant.empty()) {
          t.argv.insert(t.argv.end(), {"--tenant", t.setup.daemon_tenant, "--daemon", log_dir + "/lithosd.sock"});
        }
        // --tpc-set's value stays at argv[5]: the slot groups replace it below.
        if (t.setup.tpc_set) {
          t.argv.insert(t.argv.end(), {"--device", std::to_string(opt_.device), "--tpc-set", *t.setup.tpc_set});
        }
        if (t.setup.atomize) {
          t.argv.insert(t.argv.end(), {"--atomize", "--atom-report", log_dir + "/" + t.spec->name + "-atoms.json"});
        }
        t.argv.emplace_back("--");
      }
      t.argv.push_back(opt_.python);
      t.argv.push_back(script);
      t.log = log_dir + "/" + t.spec->name + ".log";
    }
    const bool any_set =
        std::any_of(tenants_.begin(), tenants_.end(), [](const Tenant& t) { return t.setup.tpc_set.has_value(); });
    if (any_set) {
      // The slot map is measured once here, with nothing else on the GPU,
      // so that the tenants' `lithos run` only loads it from the cache.
      say("lithos calibrate (slot map for the TPC sets)");
      std::string cal_json;
      auto rc = run_command({opt_.lithos_exe, "calibrate", "--json", "--device", std::to_string(opt_.device)}, {}, "",
                            120.0, log_dir + "/calibrate.log", &cal_json);
      if (!rc) return rc.status().message();
      if (*rc != 0) {
        return "lithos calibrate failed (exit " + std::to_string(*rc) + "); see " + log_dir + "/calibrate.log" +
               log_tail(log_dir + "/calibrate.log", 5);
      }
      // Whole slot groups (GPCs) per tenant: see partition_sets_by_group.
      const json cal = json::parse(cal_json, nullptr, false);
      std::vector<std::vector<int>> groups;
      if (cal.is_object() && cal.contains("groups") && cal["groups"].is_array()) {
        for (const json& g : cal["groups"]) {
          if (g.is_object() && g.contains("tpcs") && g["tpcs"].is_array())
            groups.push_back(g["tpcs"].get<std::vector<int>>());
        }
      }
      if (groups.empty()) return "lithos calibrate --json gave no slot groups; see " + log_dir + "/calibrate.log";
      auto sets = partition_sets_by_group(sc_, groups);
      if (!sets) return sets.status().message();
      for (Tenant& t : tenants_) {
        if (!t.setup.tpc_set) continue;
        const auto idx = static_cast<std::size_t>(t.spec - sc_.tenants.data());
        t.setup.tpc_set = (*sets)[idx];
        t.argv[5] = *t.setup.tpc_set;
        say("tenant " + t.spec->name + ": TPCs " + *t.setup.tpc_set);
      }
      record_["slot_groups"] = groups;
    }
    if (mode_.daemon) {
      // lithosd first, with the GPU to itself while it reads (or measures) the
      // slot map; MPS (started below) is the runner's, not the daemon's.
      if (std::string e = start_daemon(log_dir); !e.empty()) return e;
    }
    if (mode_.mps) {
      say("starting a private MPS daemon");
      auto d = MpsDaemon::start(opt_.mps_control, log_dir + "/mps-control.log");
      if (!d) return d.status().message();
      mps_ = std::move(*d);
    }

    if (!mps_) {
      // A mode without MPS runs plain processes even where an MPS control
      // daemon already runs (CUDA_MPS_PIPE_DIRECTORY, or /tmp/nvidia-mps):
      // an empty pipe folder of the run's own, where the driver finds none.
      // Otherwise "alone" and time slicing would silently be MPS clients.
      char tmpl[] = "/tmp/lithos-no-mps-XXXXXX";
      if (::mkdtemp(tmpl) != nullptr) no_mps_dir_ = tmpl;
    }
    for (Tenant& t : tenants_) {
      t.env = t.setup.env;
      if (mps_) {
        for (auto& kv : mps_->client_env()) t.env.push_back(kv);
      } else if (!no_mps_dir_.empty()) {
        t.env.emplace_back("CUDA_MPS_PIPE_DIRECTORY", no_mps_dir_);
      }
      t.env.emplace_back("PYTHONUNBUFFERED", "1");
      auto c = Child::spawn(t.argv, t.env, opt_.repo_root, t.log);
      if (!c) return "tenant " + t.spec->name + ": " + c.status().message();
      t.child = std::move(*c);
      t.child->write_line(t.config.dump());
    }
    say("started " + std::to_string(tenants_.size()) + " tenant(s); waiting for them to build and warm up");

    // Ready: every tenant built its model and calibrated.
    const double ready_deadline = mono_now() + opt_.ready_timeout_s;
    const double t_ready0 = mono_now();
    while (!std::all_of(tenants_.begin(), tenants_.end(), [](const Tenant& t) { return t.ready; })) {
      if (interrupted()) return "interrupted";
      if (mono_now() > ready_deadline) return "tenants not ready after " + std::to_string(opt_.ready_timeout_s) + " s";
      if (auto e = pump(0.05); !e.empty()) return e;
    }
    say("ready after " + fmt_s(mono_now() - t_ready0));

    // Start: a common instant a little ahead, so every tenant is waiting.
    start_ = wall_now() + 1.0;
    for (Tenant& t : tenants_) {
      if (!t.child->write_line(json{{"start", start_}}.dump())) return "tenant " + t.spec->name + " is gone";
    }
    const double phase_len = sc_.warmup_s + sc_.reps * sc_.window_s;
    for (std::size_t p = 0; p < sc_.phases.size(); ++p) {
      for (int r = 0; r < sc_.reps; ++r) {
        Window w;
        w.phase = p;
        w.rep = r;
        w.start = start_ + static_cast<double>(p) * phase_len + sc_.warmup_s + r * sc_.window_s;
        w.end = w.start + sc_.window_s;
        windows_.push_back(w);
      }
    }
    const double end = start_ + sc_.measured_span_s() + sc_.drain_s;
    const double result_deadline = end + opt_.result_grace_s;
    std::size_t next_edge = 0;  // windows_[next_edge/2], start (even) or end (odd)
    double next_busy = start_;
    while (!std::all_of(tenants_.begin(), tenants_.end(), [](const Tenant& t) { return t.done; })) {
      if (interrupted()) return "interrupted";
      const double now = wall_now();
      if (now > result_deadline) return "no result from every tenant " + fmt_s(opt_.result_grace_s) + " after the end";
      // Energy at each window edge, utilisation every 100 ms.
      while (next_edge < 2 * windows_.size()) {
        Window& w = windows_[next_edge / 2];
        const double edge = next_edge % 2 == 0 ? w.start : w.end;
        if (now < edge) break;
        const auto e = nvml_ != nullptr ? nvml_->energy_j() : std::nullopt;
        if (next_edge % 2 == 0) {
          w.e0 = e;
          say("phase " + sc_.phases[w.phase].name + ", rep " + std::to_string(w.rep + 1) + "/" +
              std::to_string(sc_.reps));
        } else {
          w.e1 = e;
        }
        ++next_edge;
      }
      if (nvml_ != nullptr && now >= next_busy) {
        next_busy = now + 0.1;
        if (const auto b = nvml_->busy()) {
          for (Window& w : windows_) {
            if (now >= w.start && now < w.end) {
              w.busy_sum += *b;
              ++w.busy_n;
            }
          }
        }
      }
      double wait = std::min(0.02, std::max(0.0, next_busy - wall_now()));
      if (next_edge < 2 * windows_.size()) {
        const Window& w = windows_[next_edge / 2];
        wait = std::min(wait, std::max(0.0, (next_edge % 2 == 0 ? w.start : w.end) - wall_now()));
      }
      if (auto e = pump(wait); !e.empty()) return e;
    }
    return {};
  }

  static std::string fmt_s(double s) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.1f s", s);
    return buf;
  }

  // Reads every tenant's output for up to `timeout_s`; returns an error text
  // when a tenant failed.
  std::string pump(double timeout_s) {
    std::vector<pollfd> fds;
    for (const Tenant& t : tenants_) {
      if (!t.child->stdout_closed()) fds.push_back({t.child->stdout_fd(), POLLIN, 0});
    }
    if (fds.empty()) {
      ::usleep(static_cast<useconds_t>(timeout_s * 1e6));
    } else {
      ::poll(fds.data(), fds.size(), static_cast<int>(std::ceil(timeout_s * 1000.0)));
    }
    for (Tenant& t : tenants_) {
      std::vector<std::string> lines;
      const bool open = t.child->read_available(lines);
      for (const std::string& line : lines) {
        if (auto e = handle_line(t, line); !e.empty()) return e;
      }
      if (!open && !t.done) {
        const int st = t.child->wait_or_kill(5.0);
        return "tenant " + t.spec->name + " exited (status " + std::to_string(st) + ") " +
               (t.ready ? "before its result" : "before it was ready") + "; see " + t.log + log_tail(t.log, 8);
      }
    }
    return {};
  }

  std::string handle_line(Tenant& t, const std::string& line) {
    json ev = json::parse(line, nullptr, false);
    if (ev.is_discarded() || !ev.is_object() || !ev.contains("event")) {
      ++t.bad_lines;  // not protocol: ignored, counted in the record
      return {};
    }
    const std::string what = ev["event"].is_string() ? ev["event"].get<std::string>() : "";
    if (what == "ready") {
      t.ready = true;
      t.ready_event = std::move(ev);
    } else if (what == "result") {
      t.done = true;
      t.result = std::move(ev);
    } else if (what == "error") {
      t.error = ev.value("message", std::string("?"));
      return "tenant " + t.spec->name + " failed: " + t.error + " (log " + t.log + ")";
    }
    return {};
  }

  // Writes the daemon's config (the scenario's tenants), starts `lithos
  // daemon` and waits until it answers `lithos status`. "" on success.
  std::string start_daemon(const std::string& log_dir) {
    const std::string cfg = log_dir + "/lithosd.toml";
    daemon_socket_ = log_dir + "/lithosd.sock";
    {
      std::ofstream f(cfg);
      f << "# Written by lithos bench (mode " << mode_.name << ") for scenario " << sc_.name << "\n";
      f << "[daemon]\nsocket = \"" << daemon_socket_ << "\"\nmps = \"off\"\n";
      if (opt_.daemon_atom_us > 0) f << "atom_us = " << opt_.daemon_atom_us << "\n";
      f << mode_.daemon_toml;
      for (const std::string& line : opt_.daemon_set) f << line << "\n";
      for (const Tenant& t : tenants_) {
        if (t.setup.daemon_tenant.empty()) continue;
        const bool hp = t.spec->role == Role::kHighPriority;
        f << "\n[[tenant]]\nname = \"" << t.setup.daemon_tenant << "\"\npriority = \"" << (hp ? "high" : "best-effort")
          << "\"\n";
        if (hp) f << "quota = " << t.setup.quota << "\n";
        if (hp) f << "pauses_best_effort = " << best_effort_pause_literal(t.spec->pauses_best_effort) << "\n";
      }
      f << "\n[[tenant]]\nname = \"default\"\npriority = \"best-effort\"\n";
      if (!f) return "cannot write " + cfg;
    }
    say("starting lithosd (" + cfg + ")");
    auto d = Child::spawn({opt_.lithos_exe, "daemon", "--config", cfg, "--device", std::to_string(opt_.device)}, {},
                          opt_.repo_root, log_dir + "/lithosd.log");
    if (!d) return "lithosd: " + d.status().message();
    daemon_ = std::move(*d);
    const double deadline = mono_now() + 180.0;
    while (mono_now() < deadline) {
      if (interrupted()) return "interrupted";
      if (auto rc = daemon_->poll_exit()) {
        return "lithosd exited with " + std::to_string(*rc) + "; see " + log_dir + "/lithosd.log" +
               log_tail(log_dir + "/lithosd.log", 5);
      }
      std::string out;
      auto rc = run_command({opt_.lithos_exe, "status", "--json", "--socket", daemon_socket_}, {}, "", 5.0, "/dev/null",
                            &out);
      if (rc && *rc == 0) {
        say("lithosd is up");
        return "";
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return "lithosd did not answer within 180 s; see " + log_dir + "/lithosd.log";
  }

  void teardown() {
    for (Tenant& t : tenants_) {
      if (!t.child) continue;
      t.child->close_stdin();  // EOF: a tenant still waiting for its start exits
    }
    for (Tenant& t : tenants_) {
      if (t.child) t.child->wait_or_kill(t.done ? 20.0 : 5.0);
    }
    if (daemon_) {
      // What the daemon saw (grants, completions, predictor error), then stop it.
      std::string out;
      auto rc = run_command({opt_.lithos_exe, "status", "--json", "--socket", daemon_socket_}, {}, "", 5.0, "/dev/null",
                            &out);
      const json st = rc && *rc == 0 ? json::parse(out, nullptr, false) : json(nullptr);
      record_["lithosd"] = st.is_discarded() ? json(nullptr) : st;
      daemon_->kill_group(SIGTERM);
      if (daemon_->wait_or_kill(10.0) != 0) record_["warnings"].push_back("lithosd did not stop cleanly");
      daemon_.reset();
    }
    if (mps_) {
      say("stopping the MPS daemon");
      if (Status s = mps_->stop(); !s.is_ok()) {
        record_["warnings"].push_back(s.message());
        say("warning: " + s.message());
      }
      mps_.reset();
    }
    if (!no_mps_dir_.empty()) {
      ::rmdir(no_mps_dir_.c_str());
      no_mps_dir_.clear();
    }
  }

  json tenant_records() const {
    json arr = json::array();
    for (const Tenant& t : tenants_) {
      json env = json::object();
      for (const auto& [k, v] : t.setup.env) env[k] = v;
      json rec = {{"name", t.spec->name},
                  {"argv", t.argv},
                  {"env", env},
                  {"tpc_set", t.setup.tpc_set ? json(*t.setup.tpc_set) : json(nullptr)},
                  {"atomize", t.setup.atomize},
                  {"rate_rps", field(t.config, "rate_rps", json(nullptr))},
                  {"calib", field(t.ready_event, "calib", json::object())},
                  {"info", field(t.ready_event, "info", json::object())},
                  {"phases", field(t.result, "phases", json::array())},
                  {"log", t.log}};
      if (t.bad_lines > 0) rec["non_protocol_lines"] = t.bad_lines;
      if (!t.error.empty()) rec["error"] = t.error;
      // A service in its alone run picks its rate from the capacity it
      // measured: record that rate too.
      if (rec["rate_rps"].is_null() && t.spec->kind == Kind::kService && rec["calib"].contains("capacity_rps") &&
          rec["calib"]["capacity_rps"].is_number()) {
        rec["rate_rps"] = t.spec->load * rec["calib"]["capacity_rps"].get<double>();
      }
      arr.push_back(std::move(rec));
    }
    return arr;
  }

  json gpu_record() const {
    json phases = json::array();
    for (std::size_t p = 0; p < sc_.phases.size(); ++p) {
      json reps = json::array();
      for (const Window& w : windows_) {
        if (w.phase != p) continue;
        json r = {{"energy_j", nullptr}, {"power_w", nullptr}, {"busy", nullptr}};
        if (w.e0 && w.e1 && *w.e1 >= *w.e0) {
          r["energy_j"] = *w.e1 - *w.e0;
          r["power_w"] = (*w.e1 - *w.e0) / sc_.window_s;
        }
        if (w.busy_n > 0) r["busy"] = w.busy_sum / w.busy_n;
        reps.push_back(r);
      }
      phases.push_back({{"name", sc_.phases[p].name}, {"reps", reps}});
    }
    return {{"phases", phases}};
  }

  const BenchScenario& sc_;
  const ModeInfo& mode_;
  std::optional<std::string> alone_;
  const std::map<std::string, json>& calib_;
  const RunnerOptions& opt_;
  Nvml* nvml_;
  std::string id_;
  json record_;
  std::vector<Tenant> tenants_;
  std::unique_ptr<MpsDaemon> mps_;
  std::string no_mps_dir_;         // modes without MPS: the tenants' empty MPS pipe folder
  std::unique_ptr<Child> daemon_;  // lithosd (mode "lithos")
  std::string daemon_socket_;
  std::vector<Window> windows_;
  double start_ = 0.0;
};

}  // namespace

json run_mode(const BenchScenario& sc, const ModeInfo& mode, const std::optional<std::string>& alone_tenant,
              const std::map<std::string, json>& calib, const RunnerOptions& opt, Nvml* nvml) {
  ModeRun run(sc, mode, alone_tenant, calib, opt, nvml);
  return run.run();
}

}  // namespace lithos::bench
