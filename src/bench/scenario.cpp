// Parsing and validation of benchmark scenario files (docs/benchmarks.md).
// Nothing here throws: toml++ errors become Status values with the file,
// line and column.
#include "bench/scenario.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>

#include "toml/reader.hpp"

namespace lithos::bench {

const char* role_name(Role r) { return r == Role::kHighPriority ? "hp" : "be"; }

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::kService: return "service";
    case Kind::kClosed: return "closed";
    case Kind::kTraining: return "training";
  }
  return "?";
}

double BenchScenario::measured_span_s() const {
  return static_cast<double>(phases.size()) * (warmup_s + reps * window_s);
}

const BenchTenant* BenchScenario::tenant(std::string_view n) const {
  for (const auto& t : tenants) {
    if (t.name == n) return &t;
  }
  return nullptr;
}

namespace {

constexpr double kMaxSeconds = 3600.0;
constexpr int kMaxReps = 100;
constexpr std::size_t kMaxTenants = 16;
constexpr std::size_t kMaxPhases = 64;

// Where a node is: "file:line:column".
std::string where(std::string_view source, const toml::node& n) { return tomlio::position(source, n); }
std::string where(std::string_view source, const toml::table& t) {
  return where(source, static_cast<const toml::node&>(t));
}

bool is_name(std::string_view s) {
  return !s.empty() && s.size() <= 64 && std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_' ||
           c == '.';
  });
}

// A table's keys must all be known; the error lists the valid ones.
Status check_keys(std::string_view source, const toml::table& t, std::string_view what,
                  std::initializer_list<std::string_view> known) {
  const toml::key* k = tomlio::first_unknown_key(t, known);
  if (k == nullptr) return Status::ok();
  return Status::invalid_argument(where(source, *t.get(k->str())) + ": unknown key '" + std::string(k->str()) +
                                  "' in " + std::string(what) + " (valid: " + tomlio::key_list(known) + ")");
}

// TOML values -> JSON (parameters are handed to the tenant process as JSON).
nlohmann::json to_json(const toml::node& n) {
  if (const auto* t = n.as_table()) {
    nlohmann::json j = nlohmann::json::object();
    for (const auto& [k, v] : *t) j[std::string(k.str())] = to_json(v);
    return j;
  }
  if (const auto* a = n.as_array()) {
    nlohmann::json j = nlohmann::json::array();
    for (const auto& v : *a) j.push_back(to_json(v));
    return j;
  }
  if (const auto* s = n.as_string()) return s->get();
  if (const auto* i = n.as_integer()) return i->get();
  if (const auto* f = n.as_floating_point()) return f->get();
  if (const auto* b = n.as_boolean()) return b->get();
  return nullptr;  // dates and times: not used by any workload
}

struct Reader {
  std::string_view source;

  Result<std::string> string(const toml::table& t, std::string_view key, std::string_view what, bool required,
                             std::string fallback = {}) const {
    const toml::node* n = t.get(key);
    if (n == nullptr) {
      if (required)
        return Status::invalid_argument(where(source, t) + ": " + std::string(what) + " needs '" + std::string(key) +
                                        "'");
      return fallback;
    }
    if (!n->is_string()) {
      return Status::invalid_argument(where(source, *n) + ": '" + std::string(key) + "' must be a string");
    }
    return n->as_string()->get();
  }

  // A number in [lo, hi] (integers accepted where a float is asked for).
  Result<double> number(const toml::table& t, std::string_view key, double lo, double hi, double fallback,
                        bool integer = false) const {
    const toml::node* n = t.get(key);
    if (n == nullptr) return fallback;
    const std::optional<double> read = tomlio::number(*n, integer);
    if (!read) {
      return Status::invalid_argument(where(source, *n) + ": '" + std::string(key) + "' must be " +
                                      (integer ? "an integer" : "a number"));
    }
    const double v = *read;
    if (!std::isfinite(v) || v < lo || v > hi) {
      char buf[160];
      std::snprintf(buf, sizeof buf, ": '%.*s' = %g is out of range [%g, %g]", static_cast<int>(key.size()), key.data(),
                    v, lo, hi);
      return Status::invalid_argument(where(source, *n) + buf);
    }
    return v;
  }
};

Result<BenchTenant> parse_tenant(const Reader& rd, const toml::table& t) {
  LITHOS_RETURN_IF_ERROR(check_keys(
      rd.source, t, "[[tenant]]",
      {"name", "role", "kind", "workload", "params", "load", "thread_pct", "partition", "pauses_best_effort"}));
  BenchTenant out;
  auto name = rd.string(t, "name", "[[tenant]]", true);
  if (!name) return name.status();
  if (!is_name(*name)) {
    return Status::invalid_argument(where(rd.source, t) + ": tenant name '" + *name +
                                    "' must be 1-64 letters, digits, '-', '_' or '.'");
  }
  out.name = *name;
  const std::string ctx = "tenant '" + out.name + "'";
  auto role = rd.string(t, "role", ctx, true);
  if (!role) return role.status();
  if (*role == "hp") {
    out.role = Role::kHighPriority;
  } else if (*role == "be") {
    out.role = Role::kBestEffort;
  } else {
    return Status::invalid_argument(where(rd.source, *t.get("role")) + ": " + ctx + ": role '" + *role +
                                    "' is not one of hp, be");
  }
  auto kind = rd.string(t, "kind", ctx, true);
  if (!kind) return kind.status();
  if (*kind == "service") {
    out.kind = Kind::kService;
  } else if (*kind == "closed") {
    out.kind = Kind::kClosed;
  } else if (*kind == "training") {
    out.kind = Kind::kTraining;
  } else {
    return Status::invalid_argument(where(rd.source, *t.get("kind")) + ": " + ctx + ": kind '" + *kind +
                                    "' is not one of service, closed, training");
  }
  auto workload = rd.string(t, "workload", ctx, true);
  if (!workload) return workload.status();
  if (!is_name(*workload)) {
    return Status::invalid_argument(where(rd.source, *t.get("workload")) + ": " + ctx + ": bad workload name");
  }
  out.workload = *workload;
  if (const toml::node* p = t.get("params")) {
    if (!p->is_table()) return Status::invalid_argument(where(rd.source, *p) + ": " + ctx + ": params must be a table");
    out.params = to_json(*p);
  }
  auto load = rd.number(t, "load", 0.0, 10.0, 0.0);
  if (!load) return load.status();
  out.load = *load;
  if (out.kind == Kind::kService && !(out.load > 0.0)) {
    return Status::invalid_argument(where(rd.source, t) + ": " + ctx +
                                    ": a service needs 'load' > 0 (fraction of its alone capacity, e.g. 0.5)");
  }
  if (out.kind != Kind::kService && t.get("load") != nullptr) {
    return Status::invalid_argument(where(rd.source, *t.get("load")) + ": " + ctx +
                                    ": 'load' applies only to kind = \"service\"");
  }
  auto pct = rd.number(t, "thread_pct", 1, 100, 100, true);
  if (!pct) return pct.status();
  out.thread_pct = static_cast<int>(*pct);
  auto part = rd.number(t, "partition", 0.0, 1.0, 0.0);
  if (!part) return part.status();
  out.partition = *part;
  // Unset: "auto" for an hp tenant, as in lithosd's configuration.
  if (out.role == Role::kHighPriority) out.pauses_best_effort = sched::BestEffortPause::kAuto;
  if (const toml::node* p = t.get("pauses_best_effort")) {
    const auto mode = sched::best_effort_pause_of(p->value_exact<bool>(), p->value_exact<std::string_view>());
    if (!mode) {
      return Status::invalid_argument(where(rd.source, *p) + ": " + ctx + ": 'pauses_best_effort' " +
                                      sched::kBestEffortPauseRule);
    }
    out.pauses_best_effort = *mode;
    if (out.pauses_best_effort != sched::BestEffortPause::kNever && out.role != Role::kHighPriority) {
      return Status::invalid_argument(where(rd.source, *p) + ": " + ctx +
                                      ": 'pauses_best_effort' is for an hp tenant (mode lithos)");
    }
  }
  return out;
}

Status parse_phases(const Reader& rd, const toml::table& root, BenchScenario& sc) {
  const toml::node* n = root.get("phase");
  if (n == nullptr) {
    sc.phases.push_back({"main", std::nullopt, nlohmann::json::object()});
    return Status::ok();
  }
  const auto* arr = n->as_array();
  if (arr == nullptr || arr->empty() || !arr->is_array_of_tables()) {
    return Status::invalid_argument(where(rd.source, *n) + ": 'phase' must be an array of tables ([[phase]])");
  }
  if (arr->size() > kMaxPhases) return Status::invalid_argument(where(rd.source, *n) + ": too many phases");
  std::set<std::string> names;
  for (const auto& e : *arr) {
    const toml::table& t = *e.as_table();
    LITHOS_RETURN_IF_ERROR(check_keys(rd.source, t, "[[phase]]", {"name", "x", "params"}));
    BenchPhase ph;
    auto name = rd.string(t, "name", "[[phase]]", true);
    if (!name) return name.status();
    if (name->empty() || name->size() > 64 || !names.insert(*name).second) {
      return Status::invalid_argument(where(rd.source, t) + ": phase name '" + *name + "' is empty or repeated");
    }
    ph.name = *name;
    if (t.get("x") != nullptr) {
      auto x = rd.number(t, "x", -1e12, 1e12, 0.0);
      if (!x) return x.status();
      ph.x = *x;
    }
    if (const toml::node* p = t.get("params")) {
      const auto* pt = p->as_table();
      if (pt == nullptr) return Status::invalid_argument(where(rd.source, *p) + ": phase params must be a table");
      for (const auto& [k, v] : *pt) {
        if (sc.tenant(k.str()) == nullptr) {
          return Status::invalid_argument(where(rd.source, v) + ": phase '" + ph.name + "' sets params of '" +
                                          std::string(k.str()) + "', which is no tenant of this scenario");
        }
        if (!v.is_table()) {
          return Status::invalid_argument(where(rd.source, v) + ": phase params of '" + std::string(k.str()) +
                                          "' must be a table");
        }
      }
      ph.params = to_json(*p);
    }
    sc.phases.push_back(std::move(ph));
  }
  return Status::ok();
}

Result<BenchScenario> parse(std::string_view text, std::string_view source) {
  auto parsed = tomlio::parse(text, source);
  if (!parsed) return parsed.status();
  const toml::table& root = *parsed;
  const Reader rd{source};
  LITHOS_RETURN_IF_ERROR(check_keys(source, root, "the scenario",
                                    {"name", "description", "seed", "warmup_s", "window_s", "reps", "drain_s",
                                     "slo_factors", "modes", "phase_axis", "tenant", "phase"}));
  BenchScenario sc;
  sc.source = std::string(source);
  auto name = rd.string(root, "name", "the scenario", true);
  if (!name) return name.status();
  if (!is_name(*name)) return Status::invalid_argument(std::string(source) + ": bad scenario name '" + *name + "'");
  sc.name = *name;
  auto desc = rd.string(root, "description", "the scenario", false);
  if (!desc) return desc.status();
  sc.description = *desc;
  auto seed = rd.number(root, "seed", 0, 1e15, 1, true);
  if (!seed) return seed.status();
  sc.seed = static_cast<std::uint64_t>(*seed);
  auto warm = rd.number(root, "warmup_s", 0.0, kMaxSeconds, sc.warmup_s);
  auto win = rd.number(root, "window_s", 0.05, kMaxSeconds, sc.window_s);
  auto reps = rd.number(root, "reps", 1, kMaxReps, sc.reps, true);
  auto drain = rd.number(root, "drain_s", 0.0, kMaxSeconds, sc.drain_s);
  for (const auto* r : {&warm, &win, &reps, &drain}) {
    if (!*r) return r->status();
  }
  sc.warmup_s = *warm;
  sc.window_s = *win;
  sc.reps = static_cast<int>(*reps);
  sc.drain_s = *drain;
  if (const toml::node* n = root.get("slo_factors")) {
    const auto* a = n->as_array();
    if (a == nullptr || a->empty()) {
      return Status::invalid_argument(where(source, *n) + ": slo_factors must be a non-empty array of numbers > 1");
    }
    sc.slo_factors.clear();
    for (const auto& v : *a) {
      const auto d = v.value<double>();
      if (!d || !(*d >= 1.0 && *d <= 1000.0)) {
        return Status::invalid_argument(where(source, v) + ": an SLO factor must be a number in [1, 1000]");
      }
      sc.slo_factors.push_back(*d);
    }
  }
  if (const toml::node* n = root.get("modes")) {
    const auto* a = n->as_array();
    if (a == nullptr) return Status::invalid_argument(where(source, *n) + ": modes must be an array of names");
    for (const auto& v : *a) {
      const auto s = v.value<std::string>();
      if (!s) return Status::invalid_argument(where(source, v) + ": a mode must be a string");
      sc.modes.push_back(*s);  // checked against the catalogue by the caller (modes.hpp)
    }
  }
  if (root.get("phase_axis") != nullptr) {
    auto axis = rd.string(root, "phase_axis", "the scenario", true);
    if (!axis) return axis.status();
    sc.phase_axis = *axis;
  }
  const toml::node* tn = root.get("tenant");
  if (tn == nullptr || !tn->is_array_of_tables() || tn->as_array()->empty()) {
    return Status::invalid_argument(std::string(source) + ": a scenario needs at least one [[tenant]] table");
  }
  if (tn->as_array()->size() > kMaxTenants) {
    return Status::invalid_argument(where(source, *tn) + ": at most 16 tenants");
  }
  double partition_sum = 0.0;
  for (const auto& e : *tn->as_array()) {
    auto t = parse_tenant(rd, *e.as_table());
    if (!t) return t.status();
    if (sc.tenant(t->name) != nullptr) {
      return Status::invalid_argument(where(source, e) + ": tenant '" + t->name + "' is defined twice");
    }
    partition_sum += t->partition;
    sc.tenants.push_back(std::move(*t));
  }
  if (partition_sum > 1.0 + 1e-9) {
    return Status::invalid_argument(std::string(source) + ": the tenants' 'partition' shares add up to more than 1");
  }
  LITHOS_RETURN_IF_ERROR(parse_phases(rd, root, sc));
  if (sc.phases.size() > 1 &&
      std::any_of(sc.phases.begin(), sc.phases.end(), [](const BenchPhase& p) { return !p.x.has_value(); }) &&
      sc.phase_axis.has_value()) {
    return Status::invalid_argument(std::string(source) + ": phase_axis is set, so every [[phase]] needs an 'x'");
  }
  // FNV-1a over the text: which file a run came from.
  std::uint64_t h = 1469598103934665603ull;
  for (char ch : text) h = (h ^ static_cast<unsigned char>(ch)) * 1099511628211ull;
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  sc.sha = hex;
  return sc;
}

}  // namespace

Result<BenchScenario> parse_bench_scenario(std::string_view toml_text, std::string_view source) {
  try {
    return parse(toml_text, source);
  } catch (const std::exception& e) {
    return Status::internal(std::string(source) + ": " + e.what());
  }
}

namespace {

// The `module` workload's params.path (a Python file of the user's,
// docs/bench-protocol.md section 1.4), in the tenant's params and in every
// phase's override: relative to the scenario file's folder, made absolute
// (the tenant runs at the repository root). Every phase must end up with a
// file that exists: that is checked here, before any mode starts.
Status resolve_module_paths(BenchScenario& sc, const std::filesystem::path& folder) {
  for (BenchTenant& t : sc.tenants) {
    if (t.workload != "module") continue;
    const std::string ctx = sc.source + ": tenant '" + t.name + "' (workload \"module\")";
    auto resolve = [&](nlohmann::json& params) -> Status {
      if (!params.is_object() || !params.contains("path")) return Status::ok();
      nlohmann::json& v = params["path"];
      if (!v.is_string() || v.get<std::string>().empty()) {
        return Status::invalid_argument(ctx + ": params.path must be a non-empty string");
      }
      std::filesystem::path p = v.get<std::string>();
      if (p.is_relative()) p = folder / p;
      std::error_code ec;
      const std::filesystem::path abs = std::filesystem::absolute(p, ec).lexically_normal();
      if (ec || !std::filesystem::is_regular_file(abs, ec)) {
        return Status::invalid_argument(ctx + ": params.path: no such file: " + (ec ? p : abs).string());
      }
      v = abs.string();
      return Status::ok();
    };
    LITHOS_RETURN_IF_ERROR(resolve(t.params));
    const bool base_has = t.params.contains("path");
    for (BenchPhase& ph : sc.phases) {
      const bool phase_has = ph.params.contains(t.name) && ph.params.at(t.name).contains("path");
      if (phase_has) LITHOS_RETURN_IF_ERROR(resolve(ph.params[t.name]));
      if (!base_has && !phase_has) {
        return Status::invalid_argument(ctx + ": needs params.path, a Python file that defines build(kind, args, " +
                                        "device)" +
                                        (sc.phases.size() > 1 ? " (phase '" + ph.name + "' has none)" : ""));
      }
    }
  }
  return Status::ok();
}

}  // namespace

Result<BenchScenario> load_bench_scenario_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::not_found("cannot read " + path);
  std::ostringstream ss;
  ss << in.rdbuf();
  auto sc = parse_bench_scenario(ss.str(), path);
  if (!sc) return sc;
  std::filesystem::path folder = std::filesystem::path(path).parent_path();
  if (folder.empty()) folder = ".";
  LITHOS_RETURN_IF_ERROR(resolve_module_paths(*sc, folder));
  return sc;
}

}  // namespace lithos::bench
