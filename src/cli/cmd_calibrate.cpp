// `lithos calibrate`: load or measure this GPU's slot map (physical mask slot
// -> logical TPC) and its topology (which TPCs share a GPC), print them, and
// optionally check that launches confined to a TPC set run on exactly its
// SMs (descriptor hook and green contexts).
//
// Every GPU step runs in a forked child under a watchdog (gpu/watchdog.hpp):
// a launch that never finishes is reported, and this process never
// initialises CUDA. The JSON schema is documented in docs/gpu.md.
#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "cli/commands.hpp"
#include "gpu/calibrate.hpp"
#include "gpu/cuda_probe.hpp"
#include "gpu/green_context.hpp"
#include "gpu/topology_probe.hpp"
#include "gpu/watchdog.hpp"
#include "sched/tpc_set.hpp"

namespace lithos::cli {

namespace {

using nlohmann::json;

constexpr int kGroupSize = 9;  // slots per group on the H100 (one GPC each, it seems)

struct CalibrateArgs {
  bool json = false;
  bool force = false;
  std::string cache_dir;
  int device = 0;
  double timeout_s = 60;
  std::vector<std::string> mask_checks;
  std::vector<std::string> green_checks;
  // Diagnostics (defaults suit the H100).
  gpu::SmidLaunch launch{};
  int retries = 2;
  bool no_verify = false;
};

json sms_json(const std::set<int>& s) { return json(std::vector<int>(s.begin(), s.end())); }

std::set<int> minus(const std::set<int>& a, const std::set<int>& b) {
  std::set<int> out;
  for (int x : a) {
    if (b.count(x) == 0) out.insert(x);
  }
  return out;
}

json check_json(const gpu::ConfinementCheck& c) {
  return {{"backend", c.backend},
          {"tpcs", c.tpcs},
          {"expected_sms", c.expected.size()},
          {"seen_sms", c.seen.size()},
          {"exact", c.exact()},
          {"unexpected", sms_json(minus(c.seen, c.expected))},
          {"missing", sms_json(minus(c.expected, c.seen))},
          {"setup_ms", c.setup_ms}};
}

json refused_json(const std::string& backend, const std::string& tpcs, const Status& s) {
  return {{"backend", backend}, {"tpcs", tpcs}, {"refused", true}, {"error", s.to_string()}};
}

// Descriptor-hook checks: one child for all sets.
Result<json> run_mask_checks(const CalibrateArgs& a, const gpu::SlotMap& map) {
  json out = json::array();
  std::vector<sched::TpcSet> sets;
  std::vector<std::string> texts;
  for (const std::string& text : a.mask_checks) {
    auto set = sched::TpcSet::parse(text);
    if (!set) return set.status().with_context("--mask-check " + text);
    // Refused sets are refused here, before any launch.
    if (auto m = gpu::mask_for(map, *set); !m) {
      out.push_back(refused_json("descriptor-hook", text, m.status()));
      continue;
    }
    sets.push_back(*set);
    texts.push_back(text);
  }
  if (sets.empty()) return out;
  std::fflush(nullptr);
  auto wire = gpu::run_in_child(
      [&]() -> Result<std::string> {
        const gpu::OutsideMps outside;  // SM ids are real only outside MPS
        auto api = gpu::load_driver_api();
        if (!api) return api.status();
        json results = json::array();
        for (const sched::TpcSet& set : sets) {
          auto c = gpu::check_mask_confinement(*api, a.device, map, set, a.launch);
          if (!c) return outside.explain(c.status()).with_context("mask check " + set.to_string());
          results.push_back(check_json(*c));
        }
        return results.dump();
      },
      a.timeout_s, "descriptor-hook confinement check");
  if (!wire) return wire.status();
  for (auto& r : json::parse(*wire)) out.push_back(r);
  return out;
}

// Green-context checks: one child builds the catalog and runs every set.
Result<json> run_green_checks(const CalibrateArgs& a) {
  std::vector<sched::TpcSet> sets;
  for (const std::string& text : a.green_checks) {
    auto set = sched::TpcSet::parse(text);
    if (!set) return set.status().with_context("--green-check " + text);
    sets.push_back(*set);
  }
  std::fflush(nullptr);
  auto wire = gpu::run_in_child(
      [&]() -> Result<std::string> {
        const gpu::OutsideMps outside;  // SM ids are real only outside MPS
        auto api = gpu::load_driver_api();
        if (!api) return api.status();
        auto cat = gpu::GreenTpcCatalog::build(*api, a.device, a.launch);
        if (!cat) return outside.explain(cat.status());
        json results = json::array();
        for (const sched::TpcSet& set : sets) {
          auto c = gpu::check_green_confinement(*cat, set, a.launch);
          if (!c) {
            results.push_back(refused_json("green-context", set.to_string(), c.status()));
            continue;
          }
          results.push_back(check_json(*c));
        }
        json groups = json::array();
        for (int g = 0; g < cat->group_count(); ++g) {
          groups.push_back({{"group", g}, {"tpc", cat->tpc_of_group(g)}});
        }
        return json{{"catalog_ms", cat->build_ms()},
                    {"groups", cat->group_count()},
                    {"group_tpcs", groups},
                    {"checks", results}}
            .dump();
      },
      a.timeout_s, "green-context confinement check");
  if (!wire) return wire.status();
  return json::parse(*wire);
}

// The GPCs with their TPCs and slots, or why they are unknown.
json topology_json(const gpu::CalibrateRunResult& r) {
  const gpu::SlotMap& m = r.map;
  if (!m.topology.known()) {
    return {{"error", !r.topology_error.empty() ? r.topology_error
                                                : std::string(r.from_cache ? "the cached map has no topology"
                                                                           : "the topology was not measured")}};
  }
  json gpcs = json::array();
  for (int g = 0; g < m.topology.count(); ++g) {
    const sched::TpcSet& set = m.topology.gpc(g);
    std::vector<int> slots;
    set.for_each([&](int t) {
      if (auto s = m.slot_of_tpc(t)) slots.push_back(*s);
    });
    std::sort(slots.begin(), slots.end());
    gpcs.push_back({{"tpcs", set.to_string()}, {"slots", slots}, {"sms", 2 * set.count()}});
  }
  json fits = json::object();
  for (const auto& [c, n] : r.topology_stats.max_active_clusters) fits[std::to_string(c)] = n;
  return {{"gpcs", gpcs},
          {"groups_are_gpcs", gpu::groups_are_gpcs(m, kGroupSize)},
          {"max_active_clusters", fits},
          {"launches", r.topology_stats.launches},
          {"seconds", r.topology_stats.seconds}};
}

json map_json(const gpu::CalibrateRunResult& r, const CalibrateArgs& a) {
  const gpu::SlotMap& m = r.map;
  json slots = json::array();
  json dead = json::array();
  for (int s = 0; s < m.slot_count; ++s) {
    const int t = m.tpc_of_slot[static_cast<std::size_t>(s)];
    if (t >= 0) {
      slots.push_back({{"slot", s}, {"tpc", t}, {"sms", {2 * t, 2 * t + 1}}});
    } else {
      dead.push_back(s);
    }
  }
  json groups = json::array();
  for (const gpu::SlotGroup& g : gpu::slot_groups(m, kGroupSize)) {
    groups.push_back({{"first_slot", g.first_slot},
                      {"slots", std::min(kGroupSize, m.slot_count - g.first_slot)},
                      {"live", g.live},
                      {"tpcs", g.tpcs}});
  }
  return {{"schema", "lithos.calibrate/1"},
          {"device", a.device},
          {"gpu_uuid", m.gpu_uuid},
          {"gpu_name", m.gpu_name},
          {"driver_version", m.driver_version},
          {"sm_count", m.sm_count},
          {"slot_count", m.slot_count},
          {"source", r.from_cache ? "cache" : "calibrated"},
          {"cache_path", r.cache_path},
          {"cache_saved", !r.from_cache && r.save_error.empty()},
          {"cache_error", r.save_error.empty() ? json(nullptr) : json(r.save_error)},
          {"note", r.note.empty() ? json(nullptr) : json(r.note)},
          {"qmd_version", r.qmd_version.empty() ? json(nullptr) : json(r.qmd_version)},
          {"qmd_tested_on_hardware", r.qmd_version.empty() ? json(nullptr) : json(r.qmd_tested)},
          {"descriptor_params_size", r.params_size == 0 ? json(nullptr) : json(r.params_size)},
          {"stats",
           {{"launches", r.stats.launches},
            {"bootstrap_masks", r.stats.bootstrap_masks},
            {"retried", r.stats.retried},
            {"calibrate_seconds", r.stats.seconds},
            {"total_seconds", r.seconds}}},
          {"live_tpcs", m.live_tpcs()},
          {"live_tpc_set", m.live_set().to_string()},
          {"slots", slots},
          {"dead_slots", dead},
          {"group_size", kGroupSize},
          {"groups", groups},
          {"topology", topology_json(r)}};
}

std::string ranges(const std::vector<int>& v) {
  sched::TpcSet s;
  for (int x : v) s.set(x);
  return s.to_string();
}

void print_table(const json& j) {
  fmt::print("GPU {}: {} ({}), driver {}, {} SMs\n", j["device"].get<int>(), j["gpu_name"].get<std::string>(),
             j["gpu_uuid"].get<std::string>(), j["driver_version"].get<std::string>(), j["sm_count"].get<int>());
  const auto& st = j["stats"];
  if (j["source"] == "cache") {
    fmt::print("slot map: loaded from cache {} in {:.2f} s\n", j["cache_path"].get<std::string>(),
               st["total_seconds"].get<double>());
  } else {
    fmt::print(
        "slot map: calibrated in {:.2f} s ({:.2f} s probing; {} launches, {} bootstrap, {} retried), QMD {} ({})\n",
        st["total_seconds"].get<double>(), st["calibrate_seconds"].get<double>(), st["launches"].get<int>(),
        st["bootstrap_masks"].get<int>(), st["retried"].get<int>(), j["qmd_version"].get<std::string>(),
        j["qmd_tested_on_hardware"].get<bool>() ? "mask tested on hardware" : "mask UNTESTED on hardware");
    fmt::print("          cache {} {}\n", j["cache_path"].get<std::string>(),
               j["cache_saved"].get<bool>() ? "(saved)" : "(NOT saved: " + j["cache_error"].get<std::string>() + ")");
  }
  if (!j["note"].is_null()) fmt::print("note: {}\n", j["note"].get<std::string>());
  std::vector<int> dead = j["dead_slots"].get<std::vector<int>>();
  fmt::print("live TPCs: {} ({}) in slots 0-{}; dead slots: {}\n", j["live_tpcs"].get<int>(),
             j["live_tpc_set"].get<std::string>(), j["slot_count"].get<int>() - 1,
             dead.empty() ? std::string("none") : ranges(dead));
  fmt::print("\nslot -> TPC (SMs)\n");
  int col = 0;
  for (const auto& s : j["slots"]) {
    const int t = s["tpc"].get<int>();
    fmt::print("  {:>3} -> {:>2} ({:>3},{:>3})", s["slot"].get<int>(), t, 2 * t, 2 * t + 1);
    if (++col % 4 == 0) fmt::print("\n");
  }
  if (col % 4 != 0) fmt::print("\n");
  fmt::print("\ngroups of {} slots\n", j["group_size"].get<int>());
  fmt::print("  {:>5}  {:>7}  {:>4}  {}\n", "group", "slots", "live", "TPCs (slot order)");
  int g = 0;
  for (const auto& grp : j["groups"]) {
    const int first = grp["first_slot"].get<int>();
    std::string tpcs;
    for (const auto& t : grp["tpcs"]) tpcs += (tpcs.empty() ? "" : ",") + std::to_string(t.get<int>());
    fmt::print("  {:>5}  {:>3}-{:<3}  {:>4}  {}\n", g++, first, first + grp["slots"].get<int>() - 1,
               grp["live"].get<int>(), tpcs.empty() ? "-" : tpcs);
  }
}

// Why the slot groups are not exactly the GPCs, in words.
std::string group_mismatches(const json& j) {
  const json& gpcs = j["topology"]["gpcs"];
  std::vector<int> gpc_of_slot(static_cast<std::size_t>(gpu::kMaxSlots), -1);
  for (std::size_t g = 0; g < gpcs.size(); ++g) {
    for (const auto& s : gpcs[g]["slots"]) gpc_of_slot[s.get<std::size_t>()] = static_cast<int>(g);
  }
  std::string out;
  auto add = [&](const std::string& what) { out += (out.empty() ? "" : "; ") + what; };
  std::set<int> spanning;
  int g = 0;
  for (const auto& grp : j["groups"]) {
    const int first = grp["first_slot"].get<int>();
    std::set<int> in;
    for (int s = first; s < first + grp["slots"].get<int>(); ++s) {
      if (gpc_of_slot[static_cast<std::size_t>(s)] >= 0) in.insert(gpc_of_slot[static_cast<std::size_t>(s)]);
    }
    if (in.size() > 1) add(fmt::format("group {} holds {} GPCs", g, in.size()));
    if (in.size() == 1 &&
        gpcs[static_cast<std::size_t>(*in.begin())]["slots"].size() != grp["live"].get<std::size_t>()) {
      spanning.insert(*in.begin());
    }
    ++g;
  }
  for (int gpc : spanning) add(fmt::format("GPC {} spans several groups", gpc));
  return out.empty() ? std::string("some live TPCs are in no GPC") : out;
}

void print_topology(const json& j) {
  const json& t = j["topology"];
  if (t.contains("error")) {
    fmt::print("\nGPCs: unknown ({})\n", t["error"].get<std::string>());
    return;
  }
  const json& gpcs = t["gpcs"];
  if (j["source"] == "cache") {
    fmt::print("\nGPCs (thread-block cluster domains): {}, from the cache\n", gpcs.size());
  } else {
    fmt::print("\nGPCs (thread-block cluster domains): {}, measured with {} cluster launches in {:.2f} s\n",
               gpcs.size(), t["launches"].get<int>(), t["seconds"].get<double>());
  }
  fmt::print("  {:>4}  {:>4}  {:>4}  {:<10}  {}\n", "gpc", "tpcs", "sms", "slots", "TPCs");
  int g = 0;
  for (const auto& gpc : gpcs) {
    const std::vector<int> slots = gpc["slots"].get<std::vector<int>>();
    fmt::print("  {:>4}  {:>4}  {:>4}  {:<10}  {}\n", g++, slots.size(), gpc["sms"].get<int>(), ranges(slots),
               gpc["tpcs"].get<std::string>());
  }
  if (t["groups_are_gpcs"].get<bool>()) {
    fmt::print("slot groups of {} are the GPCs: yes\n", j["group_size"].get<int>());
  } else {
    fmt::print("slot groups of {} are the GPCs: no ({})\n", j["group_size"].get<int>(), group_mismatches(j));
  }
  if (!t["max_active_clusters"].empty()) {
    std::vector<std::pair<int, int>> fits;
    for (const auto& [c, n] : t["max_active_clusters"].items()) fits.emplace_back(std::stoi(c), n.get<int>());
    std::sort(fits.begin(), fits.end());
    std::string text;
    for (const auto& [c, n] : fits) text += fmt::format("{}{}: {}", text.empty() ? "" : ", ", c, n);
    fmt::print("max active clusters at one block per SM (driver): {}; the GPCs' sums agree\n", text);
  }
}

void print_checks(const json& checks) {
  if (checks.empty()) return;
  fmt::print("\nconfinement checks\n");
  fmt::print("  {:<16} {:<14} {:>8} {:>5} {:>6} {:>9}\n", "backend", "tpcs", "expected", "seen", "exact", "setup_ms");
  for (const auto& c : checks) {
    if (c.contains("refused")) {
      fmt::print("  {:<16} {:<14} refused: {}\n", c["backend"].get<std::string>(), c["tpcs"].get<std::string>(),
                 c["error"].get<std::string>());
      continue;
    }
    fmt::print("  {:<16} {:<14} {:>8} {:>5} {:>6} {:>9.3f}\n", c["backend"].get<std::string>(),
               c["tpcs"].get<std::string>(), c["expected_sms"].get<int>(), c["seen_sms"].get<int>(),
               c["exact"].get<bool>() ? "yes" : "NO", c["setup_ms"].get<double>());
  }
}

int run_calibrate(const CalibrateArgs& a) {
  gpu::CalibrateRunOptions opt;
  opt.device = a.device;
  opt.cache_dir = a.cache_dir;
  opt.force = a.force;
  opt.timeout_s = static_cast<int>(a.timeout_s);
  opt.launch = a.launch;
  opt.calibrate.retries = a.retries;
  opt.calibrate.verify_positive = !a.no_verify;
  auto r = gpu::calibrate_device(opt);
  if (!r) {
    std::fprintf(stderr, "lithos calibrate: %s\n", r.status().to_string().c_str());
    return 1;
  }
  json j = map_json(*r, a);
  json checks = json::array();
  bool all_exact = true;
  if (!a.mask_checks.empty()) {
    auto mc = run_mask_checks(a, r->map);
    if (!mc) {
      std::fprintf(stderr, "lithos calibrate: %s\n", mc.status().to_string().c_str());
      return mc.status().code() == StatusCode::kInvalidArgument || mc.status().code() == StatusCode::kOutOfRange ? 2
                                                                                                                 : 1;
    }
    for (auto& c : *mc) checks.push_back(c);
  }
  if (!a.green_checks.empty()) {
    auto gc = run_green_checks(a);
    if (!gc) {
      std::fprintf(stderr, "lithos calibrate: green contexts: %s\n", gc.status().to_string().c_str());
      j["green"] = {{"error", gc.status().to_string()}};
      all_exact = false;
    } else {
      j["green"] = {
          {"catalog_ms", (*gc)["catalog_ms"]}, {"groups", (*gc)["groups"]}, {"group_tpcs", (*gc)["group_tpcs"]}};
      for (auto& c : (*gc)["checks"]) checks.push_back(c);
    }
  }
  for (const auto& c : checks) {
    if (!c.contains("refused") && !c["exact"].get<bool>()) all_exact = false;
  }
  j["checks"] = checks;
  if (a.json) {
    fmt::print("{}\n", j.dump(2));
  } else {
    print_table(j);
    print_topology(j);
    print_checks(checks);
    if (j.contains("green") && j["green"].contains("catalog_ms")) {
      fmt::print("green contexts: {} one-TPC groups identified in {:.1f} ms\n", j["green"]["groups"].get<int>(),
                 j["green"]["catalog_ms"].get<double>());
    }
  }
  return all_exact ? 0 : 1;
}

}  // namespace

CommandRunner add_calibrate_command(CLI::App& app) {
  auto args = std::make_shared<CalibrateArgs>();
  CLI::App* sub = app.add_subcommand(
      "calibrate",
      "Load or measure this GPU's slot map (launch-descriptor mask slot -> logical TPC), cached per GPU UUID and "
      "driver version, and which TPCs share a GPC (from unmasked thread-block cluster launches); print live TPCs, "
      "the slot -> SM map, the slot groups and the GPCs. Hang-free: no launch ever enables only unproven slots, and "
      "every launch runs under a watchdog.");
  sub->add_flag("--json", args->json, "Print JSON (schema lithos.calibrate/1, see docs/gpu.md) instead of a table");
  sub->add_flag("--force", args->force, "Recalibrate even when a cached map exists, and overwrite it");
  sub->add_option("--cache-dir", args->cache_dir,
                  "Cache directory (default: $LITHOS_CACHE_DIR, $XDG_CACHE_HOME/lithos, ~/.cache/lithos)");
  sub->add_option("--device", args->device, "CUDA device ordinal")->check(CLI::NonNegativeNumber);
  sub->add_option("--timeout", args->timeout_s, "Watchdog: seconds each GPU step may take before it is killed")
      ->check(CLI::Range(1.0, 600.0));
  sub->add_option("--mask-check", args->mask_checks,
                  "After calibrating, launch confined to this TPC set (e.g. 0-7) through the descriptor hook and "
                  "compare the SMs used (repeatable)");
  sub->add_option("--green-check", args->green_checks,
                  "Same through a green context holding this TPC set (repeatable)");
  sub->add_option("--retries", args->retries, "Diagnostics: re-measurements of an inconsistent answer")
      ->check(CLI::Range(0, 20));
  sub->add_flag("--no-verify", args->no_verify,
                "Diagnostics: skip the positive pass (each slot beside a proven-live reference slot)");
  sub->add_option("--spin-cycles", args->launch.spin_cycles, "Diagnostics: clock cycles each probe block spins")
      ->check(CLI::Range(0LL, 1000000000LL));
  sub->add_option("--blocks", args->launch.blocks, "Diagnostics: blocks per probe launch (0 = 16 per SM)")
      ->check(CLI::Range(0, 1 << 20));
  sub->add_option("--launch-timeout", args->launch.timeout_s,
                  "Diagnostics: seconds one probe launch may take before it counts as hung")
      ->check(CLI::Range(0.01, 60.0));
  return [args] { return run_calibrate(*args); };
}

}  // namespace lithos::cli
