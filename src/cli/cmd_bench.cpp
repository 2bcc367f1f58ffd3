// `lithos bench`: real tenants on the GPU under every sharing mode, in one
// command (src/bench; docs/benchmarks.md, docs/bench-protocol.md). (Over
// 600 lines: its options, the modes' start-up checks and the progress lines.)
//
//   lithos bench SCENARIO [--modes a,b,...] [--out DIR] [--reps N] ...
//   lithos bench SCENARIO --report-only --out DIR
//   lithos bench --list
//
// Each mode's record is saved as soon as it ends (OUT/runs/<run>.json), so
// an interrupted or over-budget invocation loses nothing and a later one
// with other --modes merges into the same report.
#include <signal.h>
#include <unistd.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "bench/modes.hpp"
#include "bench/nvml.hpp"
#include "bench/process.hpp"
#include "bench/report.hpp"
#include "bench/runner.hpp"
#include "bench/scenario.hpp"
#include "bench/stats.hpp"
#include "build_commit.hpp"
#include "cli/commands.hpp"
#include "sim/compare.hpp"
#include "sim/scenario.hpp"

namespace lithos::cli {

namespace {

using nlohmann::json;
namespace fs = std::filesystem;

constexpr int kBadInput = 2;
constexpr int kFailure = 1;
constexpr double kStartupGuessS = 40.0;  // per run: python, torch, model build, warm-up (measured: 15-40 s)

std::atomic<bool> g_interrupted{false};

extern "C" void on_signal(int) { g_interrupted.store(true); }

struct BenchArgs {
  std::string scenario;
  std::string modes;
  std::string out;
  int reps = 0;
  double window_s = 0;
  double warmup_s = 0;
  std::string python = "python3";
  std::string sim;  // the simulator's model for the report: "" = the built-in twin, "none" = no prediction
  std::string mps_control = "nvidia-cuda-mps-control";
  int device = 0;
  int tpcs = 66;
  double ready_timeout_s = 300;
  double budget_min = 0;
  std::string commit;
  std::vector<std::string> daemon_set;  // --daemon-set KEY=VALUE, as given
  bool report_only = false;
  bool list = false;
  bool json = false;
  bool no_plots = false;
  bool quiet = false;
};

// The invocation, for the report: what reproduces these runs.
std::string command_line(const BenchArgs& a) {
  std::string c = "lithos bench " + a.scenario;
  if (!a.modes.empty()) c += " --modes " + a.modes;
  c += " --out " + a.out;
  if (a.reps > 0) c += " --reps " + std::to_string(a.reps);
  if (a.window_s > 0) c += " --window " + std::to_string(a.window_s);
  if (a.warmup_s > 0) c += " --warmup " + std::to_string(a.warmup_s);
  for (const std::string& d : a.daemon_set) c += " --daemon-set " + d;
  return c;
}

// --daemon-set KEY=VALUE as a line of lithosd's [daemon] table ("KEY =
// VALUE"), or "" with *why set: the key is a word of lower-case letters,
// digits and '_' and the value one line (lithosd checks the rest, and a
// run whose lithosd refuses it fails with lithosd's message).
std::string daemon_set_line(const std::string& arg, std::string* why) {
  const auto eq = arg.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == arg.size()) {
    *why = "--daemon-set '" + arg + "': give KEY=VALUE (a [daemon] setting of docs/config.md, e.g. throttle_us=200)";
    return {};
  }
  const std::string key = arg.substr(0, eq), value = arg.substr(eq + 1);
  for (const char ch : key) {
    if (!((ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '_')) {
      *why = "--daemon-set '" + arg + "': '" + key + "' is not a setting's key (lower-case letters, digits, _)";
      return {};
    }
  }
  if (value.find_first_of("\n\r") != std::string::npos) {
    *why = "--daemon-set '" + key + "': the value must be one line";
    return {};
  }
  return key + " = " + value;
}

std::string self_exe() { return executable_path().value_or("lithos"); }

// The repository root: scripts/bench/ and scenarios/bench/ live there.
std::string repo_root() {
  if (const char* env = std::getenv("LITHOS_BENCH_ROOT"); env != nullptr && *env != '\0') return env;
  std::error_code ec;
  const fs::path exe(self_exe());
  const fs::path up = fs::weakly_canonical(exe.parent_path() / ".." / ".." / "..", ec);
  if (!ec && fs::exists(up / "scripts" / "bench" / "tenant.py")) return up.string();
#ifdef LITHOS_SOURCE_DIR
  return LITHOS_SOURCE_DIR;
#else
  return fs::current_path().string();
#endif
}

std::vector<std::string> builtin_names(const std::string& root) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(root + "/scenarios/bench", ec)) {
    if (e.path().extension() == ".toml") names.push_back(e.path().stem().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

// The commit recorded with results: the one this binary was built from
// (embedded at build time), unless $LITHOS_COMMIT or --commit says otherwise.
std::string build_commit() {
  if (const char* env = std::getenv("LITHOS_COMMIT"); env != nullptr && *env != '\0') return env;
  return LITHOS_BUILD_COMMIT;
}

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');) {
    while (!item.empty() && item.front() == ' ') item.erase(item.begin());
    while (!item.empty() && item.back() == ' ') item.pop_back();
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

int list(const std::string& root) {
  std::printf("scenarios (%s/scenarios/bench):\n", root.c_str());
  for (const auto& n : builtin_names(root)) {
    auto sc = bench::load_bench_scenario_file(root + "/scenarios/bench/" + n + ".toml");
    std::printf("  %-22s %s\n", n.c_str(), sc ? sc->description.c_str() : sc.status().message().c_str());
  }
  std::printf("modes:\n");
  for (const auto& m : bench::mode_catalog()) {
    std::printf("  %-22s %.*s\n", std::string(m.name).c_str(), static_cast<int>(m.description.size()),
                m.description.data());
  }
  return 0;
}

void progress(const BenchArgs& a, double t0, const std::string& line) {
  if (a.quiet) return;
  std::fprintf(stderr, "[%6.1fs] %s\n", bench::mono_now() - t0, line.c_str());
}

// The simulator's model of a shipped bench scenario: the same kinds of
// service and training job at the same load, with modelled kernels ("" =
// none). hybrid-stacking's service is BERT-large at batch 8 (the sim's
// "heavy" variant); head-of-line-steal's spin kernels are synthetic, so its
// model (of the first phase, the one the prediction is compared with) has
// them exactly; inference-stacking's services differ (BERT-base, not Llama
// decode), so it has none; module-example's is memory-stacking, the same
// shape (a weight-streaming MLP service beside memory-heavy MLP training,
// memory bandwidth modelled), its kernel times not calibrated to the pair.
// Only the shipped file itself: a copy with
// another load or workload is not what the model describes.
std::string sim_model_of(const bench::BenchScenario& sc) {
  const fs::path src(sc.source);
  const bool shipped = src.filename() == sc.name + ".toml" && src.parent_path().filename() == "bench" &&
                       src.parent_path().parent_path().filename() == "scenarios";
  if (!shipped) return "";
  if (sc.name == "hybrid-stacking") return "hybrid-stacking-heavy";
  if (sc.name == "head-of-line-steal") return "head-of-line-steal-5ms";
  if (sc.name == "module-example") return "memory-stacking";
  return "";
}

// The simulator policy that models a sharing mode ("" = none).
std::string policy_of_mode(const std::string& mode) {
  for (const char* p : {"time-slicing", "mps", "mps-priority", "static-partition", "lithos"}) {
    if (mode == p) return mode;
  }
  return "";
}

// What being an MPS client costs each bench tenant, from its mps-alone run
// against its alone run (phase 1, medians), as the simulator's
// TenantConfig::mps_slowdown: for a service, its GPU busy share at the same
// offered rate over the one alone (how much longer each request keeps the
// GPU, free of the queueing a latency ratio adds); for a closed loop, the
// inverse of its throughput ratio. In [1, 10]; a tenant without those
// numbers (no mps-alone run, no NVML) is left out.
std::map<std::string, double> mps_slowdowns(const json& results) {
  const auto phase_tenants = [&](const char* mode) -> const json* {
    if (!results.contains("modes") || !results["modes"].is_array()) return nullptr;
    for (const json& m : results["modes"]) {  // (not value(): a copy, gone before the pointer is used)
      if (m.value("mode", "") == mode && m.value("status", "") == "ok" && m.contains("phases") &&
          m["phases"].is_array() && !m["phases"].empty() && m["phases"][0].contains("tenants"))
        return &m["phases"][0]["tenants"];
    }
    return nullptr;
  };
  // The median of t[a][b] (bench::spread_median), nullopt where absent.
  const auto median = [](const json& t, const char* a, const char* b) -> std::optional<double> {
    if (!t.contains(a) || !t[a].is_object() || !t[a].contains(b)) return std::nullopt;
    return bench::spread_median(t[a][b]);
  };
  std::map<std::string, double> out;
  const json* alone = phase_tenants("alone");
  const json* mps = phase_tenants("mps-alone");
  if (alone == nullptr || mps == nullptr) return out;
  if (!results.contains("scenario") || !results["scenario"].contains("tenants")) return out;
  for (const json& t : results["scenario"]["tenants"]) {
    const std::string name = t.value("name", "");
    const auto find = [&](const json& ts) -> const json* {
      for (const json& x : ts)
        if (x.is_object() && x.value("name", "") == name) return &x;
      return nullptr;
    };
    const json* a = find(*alone);
    const json* m = find(*mps);
    if (a == nullptr || m == nullptr) continue;
    std::optional<double> f;
    if (t.value("kind", "") == "service") {
      const auto busy_a = median(*a, "gpu", "busy");
      const auto busy_m = median(*m, "gpu", "busy");
      if (busy_a && busy_m && *busy_a > 0.0) f = *busy_m / *busy_a;
    } else if (const auto thr = median(*m, "norm", "throughput"); thr && *thr > 0.0) {
      f = 1.0 / *thr;
    }
    if (f) out[name] = std::clamp(*f, 1.0, 10.0);
  }
  return out;
}

// results["simulator"]: the simulator's ratios to alone for every measured
// mode that has a policy, beside the measured ones (phase 1, medians).
// Tenants are paired by class, in order: the k-th hp tenant of the bench
// with the k-th high-priority tenant of the model, likewise best effort.
// The lithos mode is lithosd, so its prediction drives the Engine as lithosd
// does (the model's immediate_launches), with each high-priority tenant's
// quota that of its bench twin (its partition share), as lithosd's is, on a
// GPU that honours no stream priorities (lithosd's default sets none).
// Where the bench ran mps-alone, each model tenant pays its bench twin's
// measured cost of being an MPS client (mps_slowdowns).
Status add_sim_prediction(json& results, const std::string& model, std::uint64_t seed) {
  auto sc = sim::load_scenario(model);
  if (!sc) return sc.status();
  std::vector<std::string> policies;
  for (const json& m : results.value("modes", json::array())) {
    const std::string p = policy_of_mode(m.value("mode", ""));
    if (m.value("status", "") == "ok" && !p.empty() && std::find(policies.begin(), policies.end(), p) == policies.end())
      policies.push_back(p);
  }
  if (policies.empty()) return Status::ok();
  // (bench tenant name, index of the model's tenant), and the model as lithosd runs it
  std::vector<std::pair<std::string, std::size_t>> pairs;
  sim::Scenario lithosd = *sc;
  lithosd.immediate_launches = true;
  // lithosd's default (stream_priorities = false) sets no stream priority:
  // on the GPU the service's kernels and the best-effort atoms are served
  // alike, in the order they became ready.
  lithosd.gpu.priorities = false;
  for (const bool hp : {true, false}) {
    std::vector<std::size_t> model_idx;
    for (std::size_t i = 0; i < sc->tenants.size(); ++i) {
      if ((sc->tenants[i].priority == sched::PriorityClass::kHigh) == hp) model_idx.push_back(i);
    }
    std::size_t k = 0;
    for (const json& t : results["scenario"].value("tenants", json::array())) {
      if ((t.value("role", "") == "hp") != hp || k >= model_idx.size()) continue;
      const double share = t.value("partition", 0.0);
      if (hp && share > 0.0) {
        lithosd.tenants[model_idx[k]].quota = bench::quota_of_partition(share, lithosd.gpu.tpcs);
      }
      pairs.emplace_back(t.value("name", ""), model_idx[k++]);
    }
  }
  const std::map<std::string, double> slowdowns = mps_slowdowns(results);
  json slowdown_json = json::object();
  for (const auto& [name, idx] : pairs) {
    const auto it = slowdowns.find(name);
    if (it == slowdowns.end()) continue;
    sc->tenants[idx].mps_slowdown = it->second;
    lithosd.tenants[idx].mps_slowdown = it->second;
    slowdown_json[name] = it->second;
  }
  std::vector<std::string> queued = policies;
  std::erase(queued, "lithos");
  sim::Comparison cmp;
  if (!queued.empty()) {
    auto c = sim::compare_policies(*sc, queued, seed);
    if (!c) return c.status();
    cmp = std::move(c).value();
  }
  if (queued.size() != policies.size()) {
    auto c = sim::compare_policies(lithosd, {"lithos"}, seed);
    if (!c) return c.status();
    cmp.policies.push_back(std::move(c->policies.front()));
  }
  json rows = json::array();
  for (const json& m : results.value("modes", json::array())) {
    const std::string p = policy_of_mode(m.value("mode", ""));
    if (m.value("status", "") != "ok" || p.empty() || m.value("phases", json::array()).empty()) continue;
    const auto ps = std::find_if(cmp.policies.begin(), cmp.policies.end(),
                                 [&](const sim::PolicySummary& s) { return s.policy == p; });
    if (ps == cmp.policies.end()) continue;
    for (const auto& [name, idx] : pairs) {
      const json* hw = nullptr;  // into `results` (value() would copy)
      const json& phase = m["phases"][0];
      if (phase.contains("tenants") && phase["tenants"].is_array()) {
        for (const json& t : phase["tenants"]) {
          if (t.is_object() && t.value("name", "") == name && t.contains("norm") && t["norm"].is_object()) hw = &t;
        }
      }
      const sim::TenantSummary& st = ps->tenants[idx];
      json r = {{"mode", m.value("mode", "")}, {"policy", p}, {"tenant", name}, {"model_tenant", st.name}};
      auto put = [&](const char* key, const char* hw_key, const std::optional<double>& sim_value) {
        json v = json::object();
        if (sim_value) v["sim"] = *sim_value;
        if (hw != nullptr && (*hw)["norm"].contains(hw_key) && (*hw)["norm"][hw_key].contains("median") &&
            (*hw)["norm"][hw_key]["median"].is_number())
          v["hw"] = (*hw)["norm"][hw_key]["median"];
        r[key] = v;
      };
      put("p99_norm", "p99", st.p99_norm);
      put("throughput_norm", "throughput", st.throughput_norm);
      rows.push_back(r);
    }
  }
  results["simulator"] = {
      {"scenario", model},
      {"seed", seed},
      {"note",
       "a model of this scenario's workloads, not the same programs; lithos as lithosd "
       "drives it (immediate high-priority launches, quotas from the partitions)" +
           std::string(slowdown_json.empty() ? ""
                                             : "; each tenant's cost of being an MPS client from its "
                                               "mps-alone run (mps_slowdown)")},
      {"rows", rows}};
  if (!slowdown_json.empty()) results["simulator"]["mps_slowdown"] = slowdown_json;
  return Status::ok();
}

// Writes results.json, report.md and the plots; prints the summary.
int write_report(const BenchArgs& a, const bench::BenchScenario& sc, const std::string& root, double t0,
                 bool any_failed) {
  std::vector<std::string> warnings;
  const auto runs = bench::load_runs(a.out, sc, warnings);
  json results = bench::build_results(sc, runs, warnings);
  if (const std::string model = a.sim.empty() ? sim_model_of(sc) : (a.sim == "none" ? "" : a.sim); !model.empty()) {
    if (Status s = add_sim_prediction(results, model, sc.seed); !s.is_ok())
      warnings.push_back("no simulator prediction (" + model + "): " + s.message());
  }
  for (const auto& w : warnings) std::fprintf(stderr, "lithos bench: warning: %s\n", w.c_str());
  results["warnings"] = warnings;  // kept with the numbers they qualify (report.md lists them too)
  {
    std::ofstream out(a.out + "/results.json", std::ios::trunc);
    out << results.dump(1) << "\n";
    std::ofstream md(a.out + "/report.md", std::ios::trunc);
    md << bench::markdown_report(results);
    if (!out || !md) {
      std::fprintf(stderr, "lithos bench: cannot write the report into %s\n", a.out.c_str());
      return kFailure;
    }
  }
  if (!a.no_plots) {
    progress(a, t0, "plots (scripts/bench/plots.py)");
    auto rc = bench::run_command({a.python, root + "/scripts/bench/plots.py", a.out + "/results.json", "--out", a.out},
                                 {}, "", 120.0, a.out + "/logs/plots.log");
    if (!rc || *rc != 0) {
      std::fprintf(stderr, "lithos bench: warning: no plots (%s); see %s/logs/plots.log\n",
                   rc ? ("plots.py exited " + std::to_string(*rc)).c_str() : rc.status().message().c_str(),
                   a.out.c_str());
    }
  }
  if (a.json) {
    std::printf("%s\n", results.dump(1).c_str());
  } else {
    std::printf("\n%s (%s): %s\n\n%s\nreport: %s/report.md  results: %s/results.json\n", sc.name.c_str(),
                sc.description.c_str(), "medians over repetitions, (min-max)", bench::summary_table(results).c_str(),
                a.out.c_str(), a.out.c_str());
  }
  return any_failed ? kFailure : 0;
}

int run(BenchArgs a) {
  const double t0 = bench::mono_now();
  const std::string root = repo_root();
  if (a.list) return list(root);
  if (a.scenario.empty()) {
    std::fprintf(stderr, "lithos bench: no scenario given (one of: %s, or a .toml path)\n",
                 join(builtin_names(root)).c_str());
    return kBadInput;
  }
  std::string path = a.scenario;
  std::error_code ec;
  if (!fs::exists(path, ec)) {
    path = root + "/scenarios/bench/" + a.scenario + ".toml";
    if (!fs::exists(path, ec)) {
      std::fprintf(stderr, "lithos bench: no scenario '%s' (built-in: %s; or give a path to a .toml file)\n",
                   a.scenario.c_str(), join(builtin_names(root)).c_str());
      return kBadInput;
    }
  }
  auto parsed = bench::load_bench_scenario_file(path);
  if (!parsed) {
    std::fprintf(stderr, "lithos bench: %s\n", parsed.status().message().c_str());
    return kBadInput;
  }
  bench::BenchScenario sc = std::move(*parsed);
  // Overrides change what is measured: they become part of the identity
  // under which runs merge.
  if (a.reps > 0) sc.reps = a.reps, sc.sha += "+reps" + std::to_string(a.reps);
  if (a.window_s > 0) sc.window_s = a.window_s, sc.sha += "+window" + std::to_string(a.window_s);
  if (a.warmup_s > 0) sc.warmup_s = a.warmup_s, sc.sha += "+warmup" + std::to_string(a.warmup_s);
  for (const auto& m : sc.modes) {
    if (bench::find_mode(m) == nullptr) {
      std::fprintf(stderr, "lithos bench: %s: unknown mode '%s' (valid: %s)\n", path.c_str(), m.c_str(),
                   bench::mode_names().c_str());
      return kBadInput;
    }
  }
  if (a.out.empty()) a.out = "bench-out/" + sc.name;
  fs::create_directories(a.out + "/logs", ec);
  if (ec) {
    std::fprintf(stderr, "lithos bench: cannot create %s: %s\n", a.out.c_str(), ec.message().c_str());
    return kFailure;
  }
  if (a.report_only) return write_report(a, sc, root, t0, false);

  std::vector<std::string> modes = a.modes.empty() || a.modes == "all"
                                       ? (sc.modes.empty() ? bench::default_modes() : sc.modes)
                                       : split_list(a.modes);
  if (modes.empty()) {
    std::fprintf(stderr, "lithos bench: --modes is empty (valid: %s)\n", bench::mode_names().c_str());
    return kBadInput;
  }
  for (const std::string& d : a.daemon_set) {
    std::string why;
    if (daemon_set_line(d, &why).empty()) {
      std::fprintf(stderr, "lithos bench: %s\n", why.c_str());
      return kBadInput;
    }
  }
  for (const auto& m : modes) {
    if (bench::find_mode(m) == nullptr) {
      std::fprintf(stderr, "lithos bench: unknown mode '%s' (valid: %s)\n", m.c_str(), bench::mode_names().c_str());
      return kBadInput;
    }
    if (auto plan = bench::plan_mode(sc, *bench::find_mode(m), a.tpcs); !plan) {
      std::fprintf(stderr, "lithos bench: %s\n", plan.status().message().c_str());
      return kBadInput;
    }
  }

  // Calibration from earlier alone runs in OUT; tenants without one are run
  // alone first (their capacity sets the service rates of every mode).
  std::vector<std::string> warnings;
  std::map<std::string, json> calib;
  const bool alone_requested = std::find(modes.begin(), modes.end(), "alone") != modes.end();
  if (!alone_requested) {
    for (const json& r : bench::load_runs(a.out, sc, warnings)) {
      if (r.value("mode", "") != "alone" || r.value("status", "") != "ok") continue;
      for (const json& t : r.value("tenants", json::array())) calib[t.value("name", "")] = t.value("calib", json());
    }
  }
  struct Planned {
    const bench::ModeInfo* mode;
    std::optional<std::string> alone_tenant;
  };
  std::vector<Planned> plan;
  for (const auto& t : sc.tenants) {
    if (alone_requested || calib.count(t.name) == 0) {
      if (!alone_requested) {
        progress(a, t0, "no alone run of " + t.name + " in " + a.out + ": running it first");
      }
      plan.push_back({bench::find_mode("alone"), t.name});
    }
  }
  for (const auto& m : modes) {
    const bench::ModeInfo* mode = bench::find_mode(m);
    if (m == "alone") continue;  // planned above, first
    if (!mode->per_tenant) {
      plan.push_back({mode, std::nullopt});
      continue;
    }
    for (const auto& t : sc.tenants) plan.push_back({mode, t.name});
  }
  const double per_run_s = kStartupGuessS + sc.measured_span_s() + sc.drain_s + 3.0;
  progress(a, t0,
           sc.name + ": " + std::to_string(plan.size()) + " run(s), about " +
               std::to_string(static_cast<int>(static_cast<double>(plan.size()) * per_run_s / 60.0 + 0.99)) +
               " min; output " + a.out);

  std::string why;
  std::unique_ptr<bench::Nvml> nvml = bench::Nvml::open(a.device, &why);
  if (!nvml) progress(a, t0, "warning: " + why);

  bench::RunnerOptions opt;
  opt.repo_root = root;
  opt.python = a.python;
  opt.lithos_exe = self_exe();
  opt.mps_control = a.mps_control;
  opt.out_dir = fs::absolute(a.out).string();
  opt.device = a.device;
  opt.total_tpcs = a.tpcs;
  opt.ready_timeout_s = a.ready_timeout_s;
  opt.commit = a.commit.empty() ? build_commit() : a.commit;
  opt.command = command_line(a);
  for (const std::string& d : a.daemon_set) opt.daemon_set.push_back(daemon_set_line(d, &why));
  opt.interrupted = &g_interrupted;
  opt.progress = [&a, t0](const std::string& l) { progress(a, t0, l); };

  catch_stop_signals(on_signal);

  bool any_failed = false;
  std::vector<std::string> not_run;
  for (const Planned& p : plan) {
    const std::string id = bench::run_id(*p.mode, p.alone_tenant);
    if (g_interrupted.load()) {
      not_run.push_back(id);
      continue;
    }
    if (a.budget_min > 0 && (bench::mono_now() - t0 + per_run_s) > a.budget_min * 60.0) {
      not_run.push_back(id);
      continue;
    }
    json rec = bench::run_mode(sc, *p.mode, p.alone_tenant, calib, opt, nvml.get());
    if (Status s = bench::save_run(a.out, rec); !s.is_ok()) {
      std::fprintf(stderr, "lithos bench: %s\n", s.message().c_str());
      any_failed = true;
    }
    if (rec.value("status", "") != "ok") {
      any_failed = true;
      progress(a, t0, "[" + id + "] FAILED: " + rec.value("error", std::string("?")));
    } else {
      progress(a, t0, "[" + id + "] done");
      if (p.mode->name == "alone") {
        for (const json& t : rec.value("tenants", json::array())) calib[t.value("name", "")] = t.value("calib", json());
      }
    }
  }
  if (!not_run.empty()) {
    std::string list = join(not_run);
    std::fprintf(stderr, "lithos bench: not run (%s): %s; run them later with --modes and the same --out to merge\n",
                 g_interrupted.load() ? "interrupted" : "over --budget-min", list.c_str());
    any_failed = true;
  }
  const int rc = write_report(a, sc, root, t0, any_failed);
  return g_interrupted.load() ? 130 : rc;
}

}  // namespace

CommandRunner add_bench_command(CLI::App& app) {
  auto args = std::make_shared<BenchArgs>();
  auto* sub = app.add_subcommand(
      "bench",
      "Run real tenants on the GPU under each sharing mode (alone, time slicing, MPS and its knobs, static "
      "partitions, lithos) and report latency, SLO attainment, throughput and energy side by side");
  sub->footer(
      "Examples:\n"
      "  lithos bench --list\n"
      "  lithos bench hybrid-stacking                       # every mode of the scenario\n"
      "  lithos bench hybrid-stacking --modes mps,mps-priority --out bench-out/hybrid   # merges with earlier runs\n"
      "  lithos bench hybrid-stacking --modes mps-alone,lithos --out bench-out/hybrid   # what MPS alone costs "
      "each tenant, beside lithos\n"
      "  lithos bench solo-service --modes lithos-alone,rightsize-alone   # right-sizing alone: slowdown, TPC-time "
      "saved\n"
      "  lithos bench hybrid-stacking --report-only --out bench-out/hybrid\n"
      "Output: OUT/runs/<mode>.json (kept as each mode ends), OUT/results.json, OUT/report.md, OUT/*.png.\n"
      "The harness starts and stops its own MPS daemon (private directories) and never changes clocks, power\n"
      "limits or the compute mode. Formats: docs/bench-protocol.md; results: docs/benchmarks.md.");
  sub->add_option("scenario", args->scenario, "Scenario name (scenarios/bench/NAME.toml) or path to a .toml file");
  sub->add_option("--modes,-m", args->modes,
                  "Comma-separated modes to run (default: the scenario's list, else every mode but those run only "
                  "when named (alone, mps-alone, lithos-rightsize, lithos-alone, rightsize-alone); alone runs are "
                  "added when OUT has none; alone and mps-alone run each tenant by "
                  "itself). Valid: " +
                      bench::mode_names());
  sub->add_option("--out,-o", args->out, "Output folder (default bench-out/SCENARIO); runs in it are merged");
  sub->add_option("--reps", args->reps, "Override the scenario's repetitions per phase")->check(CLI::Range(1, 100));
  sub->add_option("--window", args->window_s, "Override the measurement window, seconds")
      ->check(CLI::Range(0.05, 3600.0));
  sub->add_option("--warmup", args->warmup_s, "Override the warm-up per phase, seconds")
      ->check(CLI::Range(0.01, 3600.0));
  sub->add_option("--python", args->python, "Python with PyTorch for the tenants")->default_val("python3");
  sub->add_option("--mps-control", args->mps_control, "The MPS control program")
      ->default_val("nvidia-cuda-mps-control");
  sub->add_option("--device", args->device, "CUDA/NVML device index")->check(CLI::NonNegativeNumber);
  sub->add_option("--total-tpcs", args->tpcs, "TPCs of the GPU, for partition shares (H100 SXM: 66)")
      ->check(CLI::Range(1, 128))
      ->default_val(66);
  sub->add_option("--ready-timeout", args->ready_timeout_s, "Seconds a tenant may take to build and warm up")
      ->check(CLI::PositiveNumber);
  sub->add_option("--budget-min", args->budget_min,
                  "Skip (and list) the runs that would end past this many minutes; 0 = no limit")
      ->check(CLI::NonNegativeNumber);
  sub->add_option("--daemon-set", args->daemon_set,
                  "KEY=VALUE: a [daemon] setting (docs/config.md) for lithosd in the daemon modes (lithos, "
                  "lithos-rightsize, lithos-alone, rightsize-alone); repeat for several, e.g. --daemon-set "
                  "throttle_us=200 --daemon-set 'power=\"dry-run\"'")
      ->type_name("KEY=VALUE");
  sub->add_option(
      "--commit", args->commit,
      "Commit recorded with the results (default $LITHOS_COMMIT, else the commit this lithos was built from)");
  sub->add_option(
      "--sim", args->sim,
      "The simulator's model whose prediction the report shows beside the measurement: a `lithos sim` "
      "scenario (name or .toml); default: the shipped twin of the scenario (hybrid-stacking -> "
      "hybrid-stacking-heavy, head-of-line-steal -> head-of-line-steal-5ms, module-example -> memory-stacking), "
      "none for others; 'none' "
      "for no prediction");
  sub->add_flag("--report-only", args->report_only, "Rebuild results.json, report.md and the plots from OUT/runs");
  sub->add_flag("--list", args->list, "List scenarios and modes, then exit");
  sub->add_flag("--json", args->json, "Print results.json (schema lithos.bench/1) instead of the table");
  sub->add_flag("--no-plots", args->no_plots, "Do not run scripts/bench/plots.py");
  sub->add_flag("--quiet,-q", args->quiet, "No progress lines on stderr");
  return [args]() { return run(*args); };
}

}  // namespace lithos::cli
