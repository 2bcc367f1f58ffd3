// The bench's report: per-tenant statistics against the alone runs, the
// markdown and JSON of every table (docs/bench-protocol.md), and the
// simulator's prediction beside the measurement. (Over 600 lines: one
// function per table of the report; they share the statistics above them.)
#include "bench/report.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>

#include "bench/modes.hpp"
#include "bench/stats.hpp"

namespace lithos::bench {

using nlohmann::json;

namespace {

constexpr std::size_t kCdfPoints = 200;

std::optional<double> num(const json& j, const char* key) {
  if (!j.is_object() || !j.contains(key) || !j[key].is_number()) return std::nullopt;
  return j[key].get<double>();
}

// The alone reference of one tenant in one phase: medians over reps.
struct Ref {
  std::optional<double> p50, p99, p999, throughput;
};

const json* find_tenant(const json& run, const std::string& name) {
  if (!run.contains("tenants") || !run["tenants"].is_array()) return nullptr;
  for (const json& t : run["tenants"]) {
    if (t.is_object() && t.value("name", "") == name) return &t;
  }
  return nullptr;
}

const json* find_phase(const json& tenant_or_gpu, const std::string& phase) {
  if (!tenant_or_gpu.contains("phases") || !tenant_or_gpu["phases"].is_array()) return nullptr;
  for (const json& p : tenant_or_gpu["phases"]) {
    if (p.is_object() && p.value("name", "") == phase) return &p;
  }
  return nullptr;
}

// Rep stats of a tenant's phase; an error names what is wrong.
Result<std::vector<RepStats>> phase_reps(const json& phase) {
  if (!phase.contains("reps") || !phase["reps"].is_array() || phase["reps"].empty()) {
    return Status::invalid_argument("no reps");
  }
  std::vector<RepStats> out;
  for (const json& r : phase["reps"]) {
    auto s = rep_stats(r);
    if (!s) return s.status();
    out.push_back(std::move(*s));
  }
  return out;
}

double med(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

Ref make_ref(const std::vector<RepStats>& reps) {
  std::vector<double> a, b, c, d;
  for (const auto& r : reps) {
    if (r.values_ms.empty()) continue;
    a.push_back(r.p50_ms);
    b.push_back(r.p99_ms);
    c.push_back(r.p999_ms);
  }
  for (const auto& r : reps) d.push_back(r.throughput);
  Ref ref;
  if (!a.empty()) {
    ref.p50 = med(a);
    ref.p99 = med(b);
    ref.p999 = med(c);
  }
  if (!d.empty()) ref.throughput = med(d);
  return ref;
}

std::optional<double> ratio(double v, const std::optional<double>& ref) {
  if (!ref || !(*ref > 0.0)) return std::nullopt;
  return v / *ref;
}

json spread_of(const std::vector<std::optional<double>>& v) {
  std::vector<double> xs;
  for (const auto& x : v) {
    if (x) xs.push_back(*x);
  }
  return spread(xs);
}

std::string num_text(double v);  // below, with the other text helpers

class Builder {
 public:
  Builder(const BenchScenario& sc, std::vector<std::string>& warnings) : sc_(sc), warnings_(warnings) {}

  json build(const std::vector<json>& runs) {
    std::map<std::string, const json*> by_id;
    for (const json& r : runs) {
      if (r.is_object() && r.contains("run") && r["run"].is_string()) by_id[r["run"].get<std::string>()] = &r;
    }
    // Alone references first: everything else is normalised to them.
    for (const auto& t : sc_.tenants) {
      const auto it = by_id.find("alone-" + t.name);
      if (it == by_id.end() || it->second->value("status", "") != "ok") continue;
      const json* tr = find_tenant(*it->second, t.name);
      if (tr == nullptr) continue;
      for (const auto& p : sc_.phases) {
        const json* ph = find_phase(*tr, p.name);
        if (ph == nullptr) continue;
        auto reps = phase_reps(*ph);
        if (!reps) continue;
        refs_[{t.name, p.name}] = make_ref(*reps);
        warn_if_unsteady(*reps, "alone-" + t.name, p.name);
      }
    }
    json modes = json::array();
    // The per-tenant modes (alone, mps-alone), each one entry with every
    // tenant from its own run, in catalogue order before the others.
    std::vector<std::string> per_tenant_prefixes;
    for (const auto& m : mode_catalog()) {
      if (!m.per_tenant) continue;
      const std::string prefix = std::string(m.name) + "-";
      per_tenant_prefixes.push_back(prefix);
      std::vector<const json*> own_runs;
      for (const auto& t : sc_.tenants) {
        const auto it = by_id.find(prefix + t.name);
        if (it != by_id.end()) own_runs.push_back(it->second);
      }
      if (!own_runs.empty()) modes.push_back(per_tenant_mode(own_runs, std::string(m.name)));
    }
    const auto per_tenant_run = [&](const std::string& id) {
      return std::any_of(per_tenant_prefixes.begin(), per_tenant_prefixes.end(),
                         [&](const std::string& p) { return id.rfind(p, 0) == 0; });
    };
    std::vector<std::string> order;
    for (const auto& m : mode_catalog()) {
      if (!m.per_tenant) order.emplace_back(m.name);
    }
    for (const auto& [id, r] : by_id) {
      if (!per_tenant_run(id) && std::find(order.begin(), order.end(), id) == order.end()) order.push_back(id);
    }
    for (const auto& id : order) {
      const auto it = by_id.find(id);
      if (it != by_id.end()) modes.push_back(shared_mode(*it->second));
    }
    json tenants = json::array();
    for (const auto& t : sc_.tenants) {
      tenants.push_back({{"name", t.name},
                         {"role", role_name(t.role)},
                         {"kind", kind_name(t.kind)},
                         {"workload", t.workload},
                         {"params", t.params},
                         {"load", t.load},
                         {"thread_pct", t.thread_pct},
                         {"partition", t.partition}});
    }
    json phases = json::array();
    for (const auto& p : sc_.phases) phases.push_back({{"name", p.name}, {"x", p.x ? json(*p.x) : json(nullptr)}});
    return {{"schema", "lithos.bench/1"},
            {"scenario",
             {{"name", sc_.name},
              {"description", sc_.description},
              {"source", sc_.source},
              {"sha", sc_.sha},
              {"slo_factors", sc_.slo_factors},
              {"warmup_s", sc_.warmup_s},
              {"window_s", sc_.window_s},
              {"reps", sc_.reps},
              {"tenants", tenants},
              {"phases", phases},
              {"phase_axis", sc_.phase_axis ? json(*sc_.phase_axis) : json(nullptr)}}},
            {"modes", modes}};
  }

 private:
  static json mode_header(const json& run, const std::string& name) {
    const ModeInfo* m = find_mode(name);
    json h = {{"mode", name},
              {"label", m != nullptr ? std::string(m->label) : name},
              {"status", run.value("status", "failed")},
              {"commit", run.value("commit", "")},
              {"device", run.value("device", json::object())},
              {"started_at", run.value("started_at", "")},
              {"command", run.value("command", "")}};
    if (run.contains("error")) h["error"] = run["error"];
    return h;
  }

  // An alone reference whose P99 differs by more than kUnsteadyAlone times
  // between its repetitions normalises everything to noise: said once per
  // tenant and phase (the 454 ms eager service of
  // docs/results/2026-11-26-h100-daemon-fb156b1-completions spanned 20x).
  static constexpr double kUnsteadyAlone = 2.0;
  void warn_if_unsteady(const std::vector<RepStats>& reps, const std::string& run, const std::string& phase) {
    std::optional<double> lo, hi;
    for (const RepStats& r : reps) {
      if (r.values_ms.empty()) continue;
      lo = std::min(lo.value_or(r.p99_ms), r.p99_ms);
      hi = std::max(hi.value_or(r.p99_ms), r.p99_ms);
    }
    if (!lo || !hi || *lo <= 0.0 || *hi <= kUnsteadyAlone * *lo) return;
    warnings_.push_back(run + ", phase " + phase + ": the alone P99 ranges " + num_text(*lo) + "-" + num_text(*hi) +
                        " ms over its repetitions (more than " + num_text(kUnsteadyAlone) +
                        "x apart): ratios to it are noisy; run alone again (--modes alone) or with more --reps");
  }

  // A per-tenant mode (alone, mps-alone): one entry whose tenants come from
  // their own runs.
  json per_tenant_mode(const std::vector<const json*>& runs, const std::string& name) {
    json mode = mode_header(*runs.front(), name);
    bool any_ok = false;
    json errors = json::array();
    for (const json* r : runs) {
      if (r->value("status", "") == "ok") {
        any_ok = true;
      } else {
        errors.push_back(r->value("run", "?") + ": " + r->value("error", "failed"));
      }
    }
    mode["status"] = any_ok ? "ok" : "failed";
    if (!errors.empty()) mode["error"] = errors;
    json phases = json::array();
    for (const auto& p : sc_.phases) {
      json tenants = json::array();
      for (const json* r : runs) {
        if (r->value("status", "") != "ok") continue;
        const std::string who = r->value("alone_of", json("")).is_string() ? r->value("alone_of", "") : "";
        auto entries = phase_entries(*r, p.name, who);
        for (auto& e : entries) {
          // What the tenant alone measured: its calibration, its rate and
          // the GPU's power and busy share while it ran by itself.
          if (const json* tr = find_tenant(*r, who)) {
            e["calib"] = tr->value("calib", json::object());
            e["rate_rps"] = tr->value("rate_rps", json(nullptr));
          }
          e["gpu"] = gpu_spreads(*r, p.name);
          tenants.push_back(std::move(e));
        }
      }
      phases.push_back({{"name", p.name}, {"gpu", nullptr}, {"tenants", tenants}});
    }
    mode["phases"] = phases;
    return mode;
  }

  static json gpu_spreads(const json& run, const std::string& phase) {
    const json* gp = run.contains("gpu") ? find_phase(run["gpu"], phase) : nullptr;
    if (gp == nullptr) return json::object();
    std::vector<std::optional<double>> e, w, b;
    for (const json& r : gp->value("reps", json::array())) {
      e.push_back(num(r, "energy_j"));
      w.push_back(num(r, "power_w"));
      b.push_back(num(r, "busy"));
    }
    return {{"energy_j", spread_of(e)}, {"power_w", spread_of(w)}, {"busy", spread_of(b)}};
  }

  json shared_mode(const json& run) {
    json mode = mode_header(run, run.value("mode", "?"));
    if (mode["status"] != "ok") {
      mode["phases"] = json::array();
      return mode;
    }
    json phases = json::array();
    for (const auto& p : sc_.phases) {
      const json gpu = gpu_spreads(run, p.name);
      phases.push_back({{"name", p.name}, {"gpu", gpu}, {"tenants", phase_entries(run, p.name, "")}});
    }
    mode["phases"] = phases;
    return mode;
  }

  // Entries of every tenant of `run` in phase `phase` (only `only` if set).
  json phase_entries(const json& run, const std::string& phase, const std::string& only) {
    struct Row {
      const BenchTenant* spec;
      std::vector<RepStats> reps;
      Ref ref;
    };
    std::vector<Row> rows;
    for (const auto& t : sc_.tenants) {
      if (!only.empty() && t.name != only) continue;
      const json* tr = find_tenant(run, t.name);
      if (tr == nullptr) continue;
      const json* ph = find_phase(*tr, phase);
      if (ph == nullptr) continue;
      auto reps = phase_reps(*ph);
      if (!reps) {
        warnings_.push_back(run.value("run", "?") + ": tenant " + t.name + ", phase " + phase + ": " +
                            reps.status().message());
        continue;
      }
      const auto ref = refs_.find({t.name, phase});
      rows.push_back({&t, std::move(*reps), ref != refs_.end() ? ref->second : Ref{}});
    }
    // The window energies, per rep, for the energy split.
    std::vector<std::optional<double>> energy;
    if (const json* gp = run.contains("gpu") ? find_phase(run["gpu"], phase) : nullptr) {
      for (const json& r : gp->value("reps", json::array())) energy.push_back(num(r, "energy_j"));
    }
    json out = json::array();
    for (const Row& row : rows) {
      std::vector<std::optional<double>> p50, p99, p999, thr, n50, n99, n999, nthr, epu;
      std::vector<double> all;
      std::size_t unfinished = 0;
      std::size_t samples = 0;
      for (std::size_t r = 0; r < row.reps.size(); ++r) {
        const RepStats& s = row.reps[r];
        if (!s.values_ms.empty()) {
          p50.push_back(s.p50_ms);
          p99.push_back(s.p99_ms);
          p999.push_back(s.p999_ms);
          n50.push_back(ratio(s.p50_ms, row.ref.p50));
          n99.push_back(ratio(s.p99_ms, row.ref.p99));
          n999.push_back(ratio(s.p999_ms, row.ref.p999));
        }
        thr.push_back(s.throughput);
        nthr.push_back(ratio(s.throughput, row.ref.throughput));
        all.insert(all.end(), s.values_ms.begin(), s.values_ms.end());
        unfinished += s.unfinished;
        samples += s.finished + s.unfinished;
        // Energy: the window's, split over the tenants by normalised throughput.
        if (r < energy.size() && energy[r]) {
          std::vector<std::optional<double>> xs;
          for (const Row& other : rows) {
            xs.push_back(r < other.reps.size() ? ratio(other.reps[r].throughput, other.ref.throughput) : std::nullopt);
          }
          const std::size_t me = static_cast<std::size_t>(&row - rows.data());
          epu.push_back(rows.size() == 1
                            ? (s.completed > 0 ? std::optional<double>(*energy[r] / static_cast<double>(s.completed))
                                               : std::nullopt)
                            : energy_per_unit(*energy[r], xs, me, s.completed));
        }
      }
      std::sort(all.begin(), all.end());
      json slo = json::array();
      if (row.spec->role == Role::kHighPriority && row.ref.p99) {
        for (double k : sc_.slo_factors) {
          const double slo_ms = k * *row.ref.p99;
          std::vector<std::optional<double>> att, gp;
          for (const RepStats& s : row.reps) {
            att.push_back(slo_attainment(s, slo_ms));
            gp.push_back(goodput(s, slo_ms));
          }
          slo.push_back({{"k", k}, {"slo_ms", slo_ms}, {"attainment", spread_of(att)}, {"goodput", spread_of(gp)}});
        }
      }
      out.push_back({{"name", row.spec->name},
                     {"p50_ms", spread_of(p50)},
                     {"p99_ms", spread_of(p99)},
                     {"p999_ms", spread_of(p999)},
                     {"throughput", spread_of(thr)},
                     {"norm",
                      {{"p50", spread_of(n50)},
                       {"p99", spread_of(n99)},
                       {"p999", spread_of(n999)},
                       {"throughput", spread_of(nthr)}}},
                     {"slo", slo},
                     {"energy_per_unit_j", spread_of(epu)},
                     {"unfinished", unfinished},
                     {"samples", samples},
                     {"cdf_ms", cdf_points(all, kCdfPoints)}});
    }
    return out;
  }

  const BenchScenario& sc_;
  std::vector<std::string>& warnings_;
  std::map<std::pair<std::string, std::string>, Ref> refs_;
};

// ---------------------------------------------------------------- text

std::string fixed(int digits, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

// "12.3" with a precision that suits the magnitude.
std::string num_text(double v) {
  const double a = std::fabs(v);
  if (a >= 100.0) return fixed(0, v);
  if (a >= 10.0) return fixed(1, v);
  if (a >= 1.0) return fixed(2, v);
  return fixed(3, v);
}

std::string med_text(const json& s, const char* suffix = "") {
  const auto m = spread_median(s);
  return m ? num_text(*m) + suffix : "-";
}

// "1.05x (1.02-1.09)": median and the range over reps.
std::string ratio_text(const json& s) {
  const auto m = spread_median(s);
  if (!m) return "-";
  std::string t = num_text(*m) + "x";
  if (s.value("n", 0) > 1) t += " (" + num_text(s["min"].get<double>()) + "-" + num_text(s["max"].get<double>()) + ")";
  return t;
}

std::string pct_text(const json& s) {
  const auto m = spread_median(s);
  return m ? fixed(1, 100.0 * *m) + "%" : "-";
}

const json* entry(const json& phase, const std::string& tenant) {
  if (!phase.contains("tenants") || !phase["tenants"].is_array()) return nullptr;
  for (const json& t : phase["tenants"]) {
    if (t.value("name", "") == tenant) return &t;
  }
  return nullptr;
}

struct Table {
  std::vector<std::string> head;
  std::vector<std::vector<std::string>> rows;

  std::string markdown() const {
    std::string s = "|";
    for (const auto& h : head) s += " " + h + " |";
    s += "\n|";
    for (std::size_t i = 0; i < head.size(); ++i) s += i == 0 ? "---|" : "---:|";
    s += "\n";
    for (const auto& r : rows) {
      s += "|";
      for (const auto& c : r) s += " " + c + " |";
      s += "\n";
    }
    return s;
  }

  std::string text() const {
    std::vector<std::size_t> w(head.size(), 0);
    for (std::size_t i = 0; i < head.size(); ++i) w[i] = head[i].size();
    for (const auto& r : rows) {
      for (std::size_t i = 0; i < r.size() && i < w.size(); ++i) w[i] = std::max(w[i], r[i].size());
    }
    auto line = [&](const std::vector<std::string>& cells) {
      std::string s;
      for (std::size_t i = 0; i < cells.size(); ++i) {
        const std::string pad(w[i] - cells[i].size(), ' ');
        s += i == 0 ? cells[i] + pad : "  " + pad + cells[i];
      }
      return s + "\n";
    };
    std::string s = line(head);
    std::size_t total = 0;
    for (auto x : w) total += x + 2;
    s += std::string(total - 2, '-') + "\n";
    for (const auto& r : rows) s += line(r);
    return s;
  }
};

std::vector<json> tenants_of(const json& results) {
  std::vector<json> out;
  for (const json& t : results["scenario"].value("tenants", json::array())) out.push_back(t);
  return out;
}

// The main table of one phase: a row per mode.
Table phase_table(const json& results, std::size_t phase_index, bool wide) {
  Table t;
  t.head.push_back("mode");
  const auto tenants = tenants_of(results);
  const auto factors = results["scenario"].value("slo_factors", json::array());
  for (const json& tn : tenants) {
    const std::string n = tn.value("name", "?");
    if (tn.value("role", "") == "hp") {
      if (wide) t.head.push_back(n + " P50 ms");
      t.head.push_back(n + " P99 ms");
      t.head.push_back(n + " P99 vs alone");
      if (wide) t.head.push_back(n + " P99.9 vs alone");
      for (const json& k : factors) {
        t.head.push_back(n + " SLO " + num_text(k.get<double>()) + "x");
        if (wide) t.head.push_back(n + " goodput/s @" + num_text(k.get<double>()) + "x");
      }
    } else {
      t.head.push_back(n + " /s");
      t.head.push_back(n + " vs alone");
    }
  }
  if (wide) {
    t.head.push_back("power W");
    t.head.push_back("GPU busy");
  }
  for (const json& m : results.value("modes", json::array())) {
    std::vector<std::string> row{m.value("label", m.value("mode", "?"))};
    if (m.value("status", "") != "ok" || m["phases"].size() <= phase_index) {
      row.push_back("failed: " + (m.contains("error") ? m["error"].dump() : std::string("?")));
      row.resize(t.head.size(), "");
      t.rows.push_back(row);
      continue;
    }
    const json& ph = m["phases"][phase_index];
    for (const json& tn : tenants) {
      const json* e = entry(ph, tn.value("name", ""));
      const bool hp = tn.value("role", "") == "hp";
      if (e == nullptr) {
        const std::size_t cols = hp ? (wide ? 4 : 2) + factors.size() * (wide ? 2 : 1) : 2;
        for (std::size_t i = 0; i < cols; ++i) row.emplace_back("-");
        continue;
      }
      if (hp) {
        if (wide) row.push_back(med_text((*e)["p50_ms"]));
        row.push_back(med_text((*e)["p99_ms"]));
        row.push_back(ratio_text((*e)["norm"]["p99"]));
        if (wide) row.push_back(ratio_text((*e)["norm"]["p999"]));
        const json& slo = (*e)["slo"];
        for (std::size_t k = 0; k < factors.size(); ++k) {
          row.push_back(k < slo.size() ? pct_text(slo[k]["attainment"]) : "-");
          if (wide) row.push_back(k < slo.size() ? med_text(slo[k]["goodput"]) : "-");
        }
      } else {
        row.push_back(med_text((*e)["throughput"]));
        row.push_back(ratio_text((*e)["norm"]["throughput"]));
      }
    }
    if (wide) {
      row.push_back(ph["gpu"].is_object() ? med_text(ph["gpu"].value("power_w", json(nullptr))) : "-");
      row.push_back(ph["gpu"].is_object() ? pct_text(ph["gpu"].value("busy", json(nullptr))) : "-");
    }
    t.rows.push_back(row);
  }
  return t;
}

// Multi-phase scenarios: one hp tenant's normalised P99 per mode and phase.
Table pivot_table(const json& results, const std::string& tenant) {
  Table t;
  t.head.push_back("mode");
  const json& phases = results["scenario"]["phases"];
  for (const json& p : phases) t.head.push_back(p.value("name", "?"));
  for (const json& m : results.value("modes", json::array())) {
    std::vector<std::string> row{m.value("label", m.value("mode", "?"))};
    for (std::size_t i = 0; i < phases.size(); ++i) {
      const json* e = m.value("status", "") == "ok" && m["phases"].size() > i ? entry(m["phases"][i], tenant) : nullptr;
      row.push_back(e == nullptr ? "-" : ratio_text((*e)["norm"]["p99"]));
    }
    t.rows.push_back(row);
  }
  return t;
}

}  // namespace

std::vector<json> load_runs(const std::string& out_dir, const BenchScenario& sc, std::vector<std::string>& warnings) {
  std::vector<json> runs;
  std::error_code ec;
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(out_dir + "/runs", ec)) {
    if (e.path().extension() == ".json") files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  for (const auto& f : files) {
    std::ifstream in(f);
    json j = json::parse(in, nullptr, false);
    if (j.is_discarded() || !j.is_object() || j.value("schema", "") != "lithos.bench.run/1") {
      warnings.push_back(f.string() + ": not a lithos.bench.run/1 record; skipped");
      continue;
    }
    if (j.value("scenario", "") != sc.name) {
      warnings.push_back(f.string() + ": a run of scenario '" + j.value("scenario", "?") + "'; skipped");
      continue;
    }
    if (j.value("scenario_sha", "") != sc.sha) {
      warnings.push_back(f.string() + ": recorded with a different version of " + sc.source +
                         " (file hash differs); merged all the same: check it is comparable");
    }
    runs.push_back(std::move(j));
  }
  // Runs on different devices do not compare.
  std::string uuid;
  for (const json& r : runs) {
    const std::string u = r.value("device", json::object()).value("uuid", "");
    if (u.empty()) continue;
    if (uuid.empty()) uuid = u;
    if (u != uuid) {
      warnings.push_back("the runs in " + out_dir + " come from different GPUs (" + uuid + ", " + u + ")");
      break;
    }
  }
  return runs;
}

Status save_run(const std::string& out_dir, const json& run) {
  const std::string dir = out_dir + "/runs";
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Status::unavailable("cannot create " + dir + ": " + ec.message());
  const std::string path = dir + "/" + run.value("run", "unknown") + ".json";
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << run.dump(1) << "\n";
    if (!out) return Status::unavailable("cannot write " + tmp);
  }
  std::filesystem::rename(tmp, path, ec);
  if (ec) return Status::unavailable("cannot rename " + tmp + ": " + ec.message());
  return Status::ok();
}

json build_results(const BenchScenario& sc, const std::vector<json>& runs, std::vector<std::string>& warnings) {
  try {
    Builder b(sc, warnings);
    return b.build(runs);
  } catch (const std::exception& e) {
    warnings.push_back(std::string("internal error while building the results: ") + e.what());
    return {{"schema", "lithos.bench/1"}, {"scenario", {{"name", sc.name}}}, {"modes", json::array()}};
  }
}

// The simulator's prediction beside the measurement (results["simulator"],
// added by `lithos bench` when the scenario has a model in the simulator):
// one row per mode and tenant, ratios to alone, and the model's error.
Table simulator_table(const json& results) {
  Table t;
  t.head = {"mode", "tenant", "P99 vs alone: sim", "hw", "sim/hw", "throughput vs alone: sim", "hw", "sim/hw"};
  const json& s = results["simulator"];
  for (const json& r : s.value("rows", json::array())) {
    auto v = [&](const char* metric, const char* which) -> std::optional<double> {
      const json& m = r.value(metric, json::object());
      if (!m.contains(which) || !m[which].is_number()) return std::nullopt;
      return m[which].get<double>();
    };
    auto cell = [](std::optional<double> x) { return x ? num_text(*x) + "x" : std::string("-"); };
    auto ratio = [](std::optional<double> a, std::optional<double> b) {
      return a && b && *b > 0 ? num_text(*a / *b) : std::string("-");
    };
    const auto ps = v("p99_norm", "sim"), ph = v("p99_norm", "hw");
    const auto ts = v("throughput_norm", "sim"), th = v("throughput_norm", "hw");
    t.rows.push_back({r.value("mode", "?"), r.value("tenant", "?"), cell(ps), cell(ph), ratio(ps, ph), cell(ts),
                      cell(th), ratio(ts, th)});
  }
  return t;
}

std::string markdown_report(const json& results) {
  std::ostringstream md;
  const json& sc = results["scenario"];
  md << "# lithos bench: " << sc.value("name", "?") << "\n\n";
  if (!sc.value("description", "").empty()) md << sc.value("description", "") << "\n\n";
  md << "Windows: " << num_text(sc.value("warmup_s", 0.0)) << " s warm-up, then " << sc.value("reps", 0) << " x "
     << num_text(sc.value("window_s", 0.0))
     << " s per phase; values are medians over the repetitions, (min-max) in brackets.\n\n";
  md << "## Runs\n\n";
  Table runs;
  runs.head = {"mode", "status", "started", "commit", "device", "command"};
  for (const json& m : results.value("modes", json::array())) {
    const json dev = m.value("device", json::object());
    const std::string cmd = m.value("command", "");
    runs.rows.push_back({m.value("label", "?"), m.value("status", "?"), m.value("started_at", ""),
                         m.value("commit", ""), dev.value("name", "") + " " + dev.value("uuid", ""),
                         cmd.empty() ? "-" : "`" + cmd + "`"});
  }
  md << runs.markdown() << "\n";
  if (const json w = results.value("warnings", json::array()); w.is_array() && !w.empty()) {
    md << "## Warnings\n\n";
    for (const json& line : w) md << "- " << (line.is_string() ? line.get<std::string>() : line.dump()) << "\n";
    md << "\n";
  }
  // Tenants and their alone figures.
  md << "## Tenants\n\n";
  Table tt;
  tt.head = {"tenant", "role", "kind", "workload", "params", "load", "thread %", "partition"};
  for (const json& t : tenants_of(results)) {
    tt.rows.push_back({t.value("name", ""), t.value("role", ""), t.value("kind", ""), t.value("workload", ""),
                       t.value("params", json::object()).dump(), num_text(t.value("load", 0.0)),
                       std::to_string(t.value("thread_pct", 100)), num_text(t.value("partition", 0.0))});
  }
  md << tt.markdown() << "\n";
  const json& phases = sc.value("phases", json::array());
  // Each tenant alone: the reference, and evidence that the sizes keep the
  // GPU busy (NVML utilisation while the tenant ran by itself).
  for (const json& m : results.value("modes", json::array())) {
    if (m.value("mode", "") != "alone" || m.value("status", "") != "ok") continue;
    Table at;
    at.head = {"tenant", "phase",   "rate req/s", "capacity req/s", "GPU ms/unit", "P50 ms",
               "P99 ms", "units/s", "GPU busy",   "power W",        "J/unit"};
    for (std::size_t i = 0; i < m["phases"].size(); ++i) {
      for (const json& e : m["phases"][i].value("tenants", json::array())) {
        const json calib = e.value("calib", json::object());
        const json gpu = e.value("gpu", json::object());
        auto opt_num = [](const json& j, const char* k) {
          return j.contains(k) && j[k].is_number() ? num_text(j[k].get<double>()) : std::string("-");
        };
        at.rows.push_back({e.value("name", ""), m["phases"][i].value("name", ""), opt_num(e, "rate_rps"),
                           opt_num(calib, "capacity_rps"), opt_num(calib, "gpu_ms"), med_text(e["p50_ms"]),
                           med_text(e["p99_ms"]), med_text(e["throughput"]), pct_text(gpu.value("busy", json(nullptr))),
                           med_text(gpu.value("power_w", json(nullptr))), med_text(e["energy_per_unit_j"])});
      }
    }
    md << "## Each tenant alone\n\n" << at.markdown() << "\n";
  }
  if (phases.size() > 1) {
    for (const json& t : tenants_of(results)) {
      if (t.value("role", "") != "hp") continue;
      md << "## " << t.value("name", "") << ": P99 over alone, per phase";
      if (sc.contains("phase_axis") && sc["phase_axis"].is_string())
        md << " (" << sc["phase_axis"].get<std::string>() << ")";
      md << "\n\n" << pivot_table(results, t.value("name", "")).markdown() << "\n";
    }
  }
  for (std::size_t i = 0; i < phases.size(); ++i) {
    md << "## Phase " << phases[i].value("name", "?") << "\n\n" << phase_table(results, i, true).markdown() << "\n";
    // Energy per unit of work.
    Table et;
    et.head = {"mode"};
    for (const json& t : tenants_of(results)) et.head.push_back(t.value("name", "") + " J/unit");
    for (const json& m : results.value("modes", json::array())) {
      if (m.value("status", "") != "ok" || m["phases"].size() <= i) continue;
      std::vector<std::string> row{m.value("label", "?")};
      for (const json& t : tenants_of(results)) {
        const json* e = entry(m["phases"][i], t.value("name", ""));
        row.push_back(e == nullptr ? "-" : med_text((*e)["energy_per_unit_j"]));
      }
      et.rows.push_back(row);
    }
    md << "Energy per request or step (J; the window's GPU energy split by normalised throughput):\n\n"
       << et.markdown() << "\n";
  }
  if (results.contains("simulator") && results["simulator"].is_object()) {
    const json& s = results["simulator"];
    md << "## The simulator's prediction\n\n`lithos sim` of the model `" << s.value("scenario", "?") << "` (seed "
       << s.value("seed", 0) << "; " << s.value("note", "") << "), each mode under its policy, "
       << "beside the measurement (phase 1, medians); sim/hw is the model's error as a ratio.\n\n";
    if (s.contains("mps_slowdown") && s["mps_slowdown"].is_object() && !s["mps_slowdown"].empty()) {
      md << "Each tenant's cost of being an MPS client, from its mps-alone run, as the model's `mps_slowdown`:";
      const char* sep = " ";
      for (const auto& [name, v] : s["mps_slowdown"].items()) {
        if (!v.is_number()) continue;
        md << sep << name << " " << fixed(3, v.get<double>()) << "x";
        sep = ", ";
      }
      md << ".\n\n";
    }
    md << simulator_table(results).markdown() << "\n";
  }
  md << "Definitions: docs/bench-protocol.md (section 2.2). SLO = k x the tenant's alone P99; attainment counts "
        "unfinished requests as misses; 'vs alone' = the repetition's value over the alone median.\n";
  return md.str();
}

std::string summary_table(const json& results) {
  std::string s;
  const json& phases = results["scenario"].value("phases", json::array());
  if (phases.size() > 1) {
    for (const json& t : tenants_of(results)) {
      if (t.value("role", "") != "hp") continue;
      s += t.value("name", "") + ": P99 vs alone per phase\n" + pivot_table(results, t.value("name", "")).text() + "\n";
    }
    return s;
  }
  s = phase_table(results, 0, false).text();
  if (results.contains("simulator") && results["simulator"].is_object()) {
    s += "\nsimulator (" + results["simulator"].value("scenario", "?") + ") vs hardware, ratios to alone:\n" +
         simulator_table(results).text();
  }
  return s;
}

}  // namespace lithos::bench
