#include "sim/report.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <optional>

namespace lithos::sim {

namespace {

using nlohmann::json;

json opt(const std::optional<double>& v) { return v ? json(*v) : json(nullptr); }

json predictor_json(const sched::PredictorStats& p) {
  return json{{"observations", p.observations},
              {"predicted", p.predicted},
              {"miss_share", p.miss_share},
              {"mean_abs_error_us", p.mean_abs_error_us},
              {"p99_abs_error_us", p.p99_abs_error_us}};
}

json rightsize_json(const sched::RightSizeStats& r) {
  return json{{"executions", r.executions},
              {"by_occupancy", r.by_occupancy},
              {"by_model", r.by_model},
              {"probes", r.probes},
              {"probe_cost_us", r.probe_cost_ns / 1e3},
              {"busy_us", r.busy_ns / 1e3},
              {"saved_tpc_us", r.saved_tpc_ns / 1e3},
              {"saved_share", r.saved_share()},
              {"measured", r.measured},
              {"slowdown", r.measured > 0 ? json(r.slowdown()) : json(nullptr)}};
}

json tenant_json(const TenantSummary& t) {
  json j{{"name", t.name},
         {"class", sched::priority_class_name(t.priority)},
         {"unit", t.unit},
         {"open_loop", t.open_loop},
         {"offered_rps", t.open_loop ? json(t.rate_rps) : json(nullptr)},
         {"completed", t.completed},
         {"unfinished", t.unfinished},
         {"p50_ms", t.p50_ms},
         {"p99_ms", t.p99_ms},
         {"p999_ms", t.p999_ms},
         {"mean_ms", t.mean_ms},
         {"throughput", t.throughput},
         {"p50_norm", opt(t.p50_norm)},
         {"p99_norm", opt(t.p99_norm)},
         {"p999_norm", opt(t.p999_norm)},
         {"throughput_norm", opt(t.throughput_norm)},
         {"slo_ms", opt(t.slo_ms)},
         {"slo_attainment", opt(t.slo_attainment)},
         {"goodput", opt(t.goodput)}};
  // Only where a policy right-sizes the tenant: other runs' JSON stays as it was.
  if (t.rightsize) j["rightsize"] = rightsize_json(*t.rightsize);
  return j;
}

// A table whose first column holds labels and the others numbers.
class Table {
 public:
  explicit Table(std::vector<std::string> header) : header_(std::move(header)) {}
  void section(const std::string& title) { rows_.push_back({title}); }
  void row(const std::string& label, std::vector<std::string> cells) {
    std::vector<std::string> r;
    r.reserve(cells.size() + 1);
    r.push_back("  " + label);
    for (std::string& c : cells) r.push_back(std::move(c));
    rows_.push_back(std::move(r));
  }
  std::string str() const {
    std::vector<std::size_t> w(header_.size(), 0);
    auto fit = [&](const std::vector<std::string>& r, bool is_section) {
      if (is_section) return;
      for (std::size_t i = 0; i < r.size() && i < w.size(); ++i) w[i] = std::max(w[i], r[i].size());
    };
    fit(header_, false);
    for (const auto& r : rows_) fit(r, r.size() == 1);
    std::string out;
    auto line = [&](const std::vector<std::string>& r) {
      std::string s;
      for (std::size_t i = 0; i < r.size(); ++i) {
        if (i == 0) {
          s += fmt::format("{:<{}}", r[i], w[0]);
        } else {
          s += fmt::format("  {:>{}}", r[i], w[i]);
        }
      }
      while (!s.empty() && s.back() == ' ') s.pop_back();
      out += s + "\n";
    };
    line(header_);
    for (const auto& r : rows_) line(r);
    return out;
  }

 private:
  std::vector<std::string> header_;
  std::vector<std::vector<std::string>> rows_;
};

std::string num(double v) {
  if (v >= 100) return fmt::format("{:.0f}", v);
  if (v >= 10) return fmt::format("{:.1f}", v);
  return fmt::format("{:.2f}", v);
}
std::string ratio(const std::optional<double>& v) { return v ? fmt::format("{:.2f}x", *v) : "-"; }
std::string pct(const std::optional<double>& v) { return v ? fmt::format("{:.1f}%", *v * 100) : "-"; }

}  // namespace

std::string format_table(const Comparison& cmp) {
  std::vector<std::string> header{"", "alone"};
  for (const auto& p : cmp.policies) header.push_back(p.policy);
  Table t(header);
  auto each = [&](auto&& f) {
    std::vector<std::string> cells;
    for (const auto& p : cmp.policies) cells.push_back(f(p));
    return cells;
  };
  for (std::size_t i = 0; i < cmp.alone.size(); ++i) {
    const TenantSummary& a = cmp.alone[i];
    const bool high = a.priority == sched::PriorityClass::kHigh;
    std::string title = a.name + " (" + sched::priority_class_name(a.priority);
    if (a.open_loop) title += fmt::format(", Poisson {:.1f} {}/s offered", a.rate_rps, a.unit);
    title += a.open_loop ? ")" : ", closed loop)";
    t.section(title);
    auto cell = [&](auto&& get) {
      std::vector<std::string> c{get(a)};
      for (const auto& p : cmp.policies) c.push_back(get(p.tenants[i]));
      return c;
    };
    if (high || a.open_loop) {
      t.row("P50 ms", cell([](const TenantSummary& s) { return num(s.p50_ms); }));
      t.row("P99 ms", cell([](const TenantSummary& s) { return num(s.p99_ms); }));
      std::vector<std::string> norm{"1.00x"};
      for (const auto& p : cmp.policies) norm.push_back(ratio(p.tenants[i].p99_norm));
      t.row("P99 / alone", norm);
      if (a.slo_ms) {
        t.row(fmt::format("SLO {} ms met", num(*a.slo_ms)),
              cell([](const TenantSummary& s) { return pct(s.slo_attainment); }));
        t.row(fmt::format("goodput {}/s", a.unit),
              cell([](const TenantSummary& s) { return s.goodput ? num(*s.goodput) : "-"; }));
      }
    }
    t.row(fmt::format("throughput {}/s", a.unit), cell([](const TenantSummary& s) { return num(s.throughput); }));
    std::vector<std::string> tn{"1.00x"};
    for (const auto& p : cmp.policies) tn.push_back(ratio(p.tenants[i].throughput_norm));
    t.row("throughput / alone", tn);
    bool any_unfinished = false;
    for (const auto& p : cmp.policies) any_unfinished |= p.tenants[i].unfinished > 0;
    if (any_unfinished) {
      t.row("unfinished at end", cell([](const TenantSummary& s) { return std::to_string(s.unfinished); }));
    }
    bool any_sized = false;
    for (const auto& p : cmp.policies) any_sized |= p.tenants[i].rightsize.has_value();
    if (any_sized) {
      // Right-sizing, where a policy does it (sched::RightSizeStats).
      using RS = sched::RightSizeStats;
      auto rs = [&](auto&& get) {
        return cell([&](const TenantSummary& s) { return s.rightsize ? get(*s.rightsize) : std::string("-"); });
      };
      t.row("TPC-time saved", rs([](const RS& r) { return fmt::format("{:.1f}%", r.saved_share() * 100); }));
      t.row("right-sized slowdown",
            rs([](const RS& r) { return r.measured > 0 ? fmt::format("{:.3f}x", r.slowdown()) : std::string("-"); }));
      t.row("sized by occupancy / model", rs([](const RS& r) {
              const double n = static_cast<double>(std::max<std::uint64_t>(r.executions, 1));
              return fmt::format("{:.0f}% / {:.0f}%", 100.0 * static_cast<double>(r.by_occupancy) / n,
                                 100.0 * static_cast<double>(r.by_model) / n);
            }));
      t.row("probes (cost us)",
            rs([](const RS& r) { return fmt::format("{} ({})", r.probes, num(r.probe_cost_ns / 1e3)); }));
    }
  }
  t.section("GPU");
  std::vector<std::string> util{"-"};
  for (const auto& c : each([](const PolicySummary& p) { return fmt::format("{:.1f}%", p.tpc_utilization * 100); })) {
    util.push_back(c);
  }
  t.row("TPC utilisation", util);
  // The online predictor's accuracy (every policy runs it; only lithos acts on it).
  auto pred_row = [&](const std::string& label, auto&& get) {
    std::vector<std::string> cells{"-"};
    for (const auto& p : cmp.policies) cells.push_back(get(p));
    t.row(label, cells);
  };
  pred_row("HP predictions off >50us", [](const PolicySummary& p) {
    return p.predictor_high.predicted > 0 ? fmt::format("{:.2f}%", p.predictor_high.miss_share * 100) : "-";
  });
  pred_row("HP prediction P99 error us", [](const PolicySummary& p) {
    return p.predictor_high.predicted > 0 ? num(p.predictor_high.p99_abs_error_us) : "-";
  });
  pred_row("BE predictions off >50us", [](const PolicySummary& p) {
    return p.predictor_best_effort.predicted > 0 ? fmt::format("{:.2f}%", p.predictor_best_effort.miss_share * 100)
                                                 : "-";
  });

  std::string out = fmt::format("lithos sim: scenario {} ({}), seed {}, {:g} s simulated, first {:g} s excluded\n",
                                cmp.scenario, cmp.source, cmp.seed, cmp.duration_s, cmp.warmup_s);
  if (!cmp.description.empty()) out += cmp.description + "\n";
  out += "\n" + t.str();
  out += fmt::format(
      "\nAlone: each tenant by itself on the whole GPU (same arrivals and kernels). SLO: slo_ms, or {:g} x alone "
      "P99 for high-priority tenants.\nThese are results of the scheduling policies on a model of the GPU, not "
      "hardware measurements (docs/simulator.md).\n",
      cmp.slo_factor);
  return out;
}

json to_json(const Comparison& cmp) {
  json j;
  j["schema"] = kSimJsonSchema;
  j["scenario"] = json{{"name", cmp.scenario},         {"description", cmp.description},
                       {"source", cmp.source},         {"seed", cmp.seed},
                       {"duration_s", cmp.duration_s}, {"warmup_s", cmp.warmup_s},
                       {"slo_factor", cmp.slo_factor}};
  j["alone"] = json::array();
  for (const auto& t : cmp.alone) j["alone"].push_back(tenant_json(t));
  j["policies"] = json::array();
  for (const auto& p : cmp.policies) {
    json pj{{"policy", p.policy}, {"description", p.description}, {"tpc_utilization", p.tpc_utilization}};
    pj["tenants"] = json::array();
    for (const auto& t : p.tenants) pj["tenants"].push_back(tenant_json(t));
    pj["predictor"] =
        json{{"high", predictor_json(p.predictor_high)}, {"best_effort", predictor_json(p.predictor_best_effort)}};
    pj["counters"] = json{{"launches", p.counters.launches},
                          {"atoms", p.counters.atoms},
                          {"split_launches", p.counters.split_launches},
                          {"stolen_atoms", p.counters.stolen_atoms},
                          {"throttled", p.counters.throttled},
                          {"gpu_events", p.gpu_events}};
    pj["checks"] = json{{"time_violations", p.time_violations}, {"conservation_violations", p.conservation_violations}};
    j["policies"].push_back(std::move(pj));
  }
  return j;
}

}  // namespace lithos::sim
