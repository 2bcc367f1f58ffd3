// lithosd's status answer in the Prometheus text format (daemon/metrics.hpp).
#include "daemon/metrics.hpp"

#include <gtest/gtest.h>

#include <cctype>
#include <map>
#include <set>
#include <sstream>
#include <string>

namespace lithos::daemon {
namespace {

const char* kStatus = R"({
  "schema": "lithos.status/1", "pid": 42, "uptime_s": 12.5, "cpu_s": 3.25,
  "device": {"uuid": "GPU-00112233-4455-6677-8899-aabbccddeeff", "name": "NVIDIA H100 80GB HBM3", "tpcs": 66, "gpcs": 8},
  "tenants": [
    {"name": "svc", "class": "high", "quota": 40, "active": true, "clients": 2, "pending_launches": 0,
     "inflight_atoms": 3, "stolen_inflight": 0, "held": "0-39", "allocation": "0-65", "runs_free": false,
     "slo_ms": 25, "pauses_best_effort": "auto",
     "pause": {"phase": "paused", "pauses": 3, "probes": 1, "verdicts": 9, "slowdown": 1.5, "until_ms": 800}},
    {"name": "tr\"ain\\x", "class": "best-effort", "quota": 0, "active": false, "clients": 1,
     "pending_launches": 7, "inflight_atoms": 5, "stolen_inflight": 4, "held": "", "allocation": "40-65",
     "runs_free": false}
  ],
  "clients": [{"id": 1, "mps": true}, {"id": 2, "mps": true}, {"id": 3, "mps": false}, {"id": 4, "mps": null}],
  "counters": {"clients_accepted": 3, "grants": 1000, "completions": 990, "max_spin_gap_us": 250.0,
               "max_step_us": 12.0},
  "engine": {"launches": 800, "atoms": 1000, "stolen_atoms": 120},
  "predictor": {"high": {"observations": 50, "miss_share": 0.25, "mean_abs_error_us": 30.0, "p99_abs_error_us": 90.0},
                "best-effort": {"observations": 900, "miss_share": 0.05, "mean_abs_error_us": 10.0,
                                "p99_abs_error_us": 40.0},
                "entries": 77}
})";

bool metric_name(const std::string& n) {
  if (n.empty() || std::isdigit(static_cast<unsigned char>(n[0]))) return false;
  for (const char c : n) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != ':') return false;
  }
  return true;
}

// name{labels} -> value, for every sample line; fails the test on a line
// that is neither a sample nor a HELP/TYPE comment, or on a family whose
// HELP or TYPE is missing or repeated. (No std::regex: GCC 12 warns inside
// it under the sanitizer build.)
std::map<std::string, double> samples(const std::string& text) {
  std::map<std::string, double> out;
  std::map<std::string, int> help, type;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("# HELP ", 0) == 0 || line.rfind("# TYPE ", 0) == 0) {
      const bool is_help = line[2] == 'H';
      const std::size_t sp = line.find(' ', 7);
      if (sp == std::string::npos) {
        ADD_FAILURE() << "a comment without text: '" << line << "'";
        continue;
      }
      const std::string name = line.substr(7, sp - 7), rest = line.substr(sp + 1);
      EXPECT_TRUE(metric_name(name)) << line;
      EXPECT_FALSE(rest.empty()) << line;
      ++(is_help ? help : type)[name];
      if (!is_help) {
        EXPECT_TRUE(rest == "gauge" || rest == "counter") << line;
      }
      continue;
    }
    const std::size_t sp = line.rfind(' ');
    if (sp == std::string::npos) {
      ADD_FAILURE() << "not a sample or a comment: '" << line << "'";
      continue;
    }
    const std::string series = line.substr(0, sp), value = line.substr(sp + 1);
    const std::size_t brace = series.find('{');
    const std::string name = series.substr(0, brace);
    EXPECT_TRUE(metric_name(name)) << line;
    if (brace != std::string::npos) {
      EXPECT_EQ(series.back(), '}') << line;
    }
    EXPECT_EQ(help[name], 1) << "no HELP before " << line;
    EXPECT_EQ(type[name], 1) << "no TYPE before " << line;
    std::size_t used = 0;
    out[series] = std::stod(value, &used);
    EXPECT_EQ(used, value.size()) << line;
  }
  for (const auto& [name, n] : help) EXPECT_EQ(n, 1) << name;
  return out;
}

TEST(Metrics, StatusBecomesPrometheusText) {
  const auto text = prometheus_text(kStatus);
  ASSERT_TRUE(text.is_ok()) << text.status().message();
  const auto s = samples(*text);
  EXPECT_EQ(s.at("lithos_up"), 1);
  EXPECT_EQ(s.at("lithos_cpu_seconds_total"), 3.25);
  EXPECT_EQ(s.at("lithos_device_tpcs"), 66);
  EXPECT_EQ(
      s.at("lithos_device_info{uuid=\"GPU-00112233-4455-6677-8899-aabbccddeeff\",name=\"NVIDIA H100 80GB HBM3\"}"), 1);
  const std::string svc = "{tenant=\"svc\",class=\"high\"}";
  EXPECT_EQ(s.at("lithos_tenant_quota_tpcs" + svc), 40);
  EXPECT_EQ(s.at("lithos_tenant_active" + svc), 1);
  EXPECT_EQ(s.at("lithos_tenant_held_tpcs" + svc), 40);
  EXPECT_EQ(s.at("lithos_tenant_allocation_tpcs" + svc), 66);
  EXPECT_DOUBLE_EQ(s.at("lithos_tenant_slo_seconds" + svc), 0.025);
  // A tenant name with a quote and a backslash is escaped in its label.
  const std::string be = "{tenant=\"tr\\\"ain\\\\x\",class=\"best-effort\"}";
  EXPECT_EQ(s.at("lithos_tenant_pending_launches" + be), 7);
  EXPECT_EQ(s.at("lithos_tenant_stolen_inflight_atoms" + be), 4);
  EXPECT_EQ(s.at("lithos_tenant_held_tpcs" + be), 0);
  EXPECT_EQ(s.count("lithos_tenant_slo_seconds" + be), 0U) << "no SLO configured: no sample";
  EXPECT_EQ(s.at("lithos_tenant_pausing_best_effort" + svc), 1);
  EXPECT_DOUBLE_EQ(s.at("lithos_tenant_pause_slowdown" + svc), 1.5);
  EXPECT_EQ(s.at("lithos_tenant_pauses_total" + svc), 3);
  EXPECT_EQ(s.count("lithos_tenant_pausing_best_effort" + be), 0U) << "a tenant that pauses nothing: no sample";
  EXPECT_EQ(s.at("lithos_grants_total"), 1000);
  EXPECT_EQ(s.at("lithos_clients{mps=\"yes\"}"), 2);
  EXPECT_EQ(s.at("lithos_clients{mps=\"no\"}"), 1);  // the one that could not tell counts in neither
  EXPECT_EQ(s.at("lithos_clients_refused_total"), 0) << "absent counters read 0";
  EXPECT_DOUBLE_EQ(s.at("lithos_max_spin_gap_seconds"), 250e-6);
  EXPECT_EQ(s.at("lithos_engine_stolen_atoms_total"), 120);
  EXPECT_DOUBLE_EQ(s.at("lithos_predictor_mean_abs_error_seconds{class=\"best-effort\"}"), 10e-6);
  EXPECT_EQ(s.at("lithos_predictor_miss_ratio{class=\"high\"}"), 0.25);
  EXPECT_EQ(s.at("lithos_predictor_entries"), 77);
}

// The answer another user gets (Daemon::status_json, "view": "own"): other
// users' clients without pid, uid and program. The metrics, which name no
// client, are the same.
TEST(Metrics, AnAnswerWithHiddenClientsGivesTheSameMetrics) {
  std::string hidden = kStatus;
  const std::string all =
      R"("clients": [{"id": 1, "mps": true}, {"id": 2, "mps": true}, {"id": 3, "mps": false}, {"id": 4, "mps": null}],)";
  const auto at = hidden.find(all);
  ASSERT_NE(at, std::string::npos);
  hidden.replace(at, all.size(),
                 R"("view": "own", "clients": [{"id": 1, "pid": null, "uid": null, "program": null, "mps": true},
                    {"id": 2, "pid": 7, "uid": 1000, "program": "mine", "mps": true},
                    {"id": 3, "pid": null, "uid": null, "program": null, "mps": false},
                    {"id": 4, "pid": null, "uid": null, "program": null, "mps": null}],)");
  const auto a = prometheus_text(kStatus);
  const auto b = prometheus_text(hidden);
  ASSERT_TRUE(a.is_ok()) << a.status().to_string();
  ASSERT_TRUE(b.is_ok()) << b.status().to_string();
  EXPECT_EQ(samples(*b), samples(*a));
}

TEST(Metrics, AnythingButAStatusAnswerIsAnError) {
  for (const char* bad : {"", "not json", "[1, 2]", "{\"schema\": \"lithos.bench/1\"}", "{}"}) {
    const auto text = prometheus_text(bad);
    EXPECT_FALSE(text.is_ok()) << bad;
  }
  // A status of a daemon that says little still gives every family it can.
  const auto bare = prometheus_text(R"({"schema": "lithos.status/1"})");
  ASSERT_TRUE(bare.is_ok());
  const auto s = samples(*bare);
  EXPECT_EQ(s.at("lithos_up"), 1);
  EXPECT_EQ(s.at("lithos_grants_total"), 0);
  EXPECT_EQ(s.count("lithos_tenant_quota_tpcs"), 0U);
  // No daemon: only lithos_up, at 0.
  const auto down = samples(prometheus_down());
  EXPECT_EQ(down.size(), 1U);
  EXPECT_EQ(down.at("lithos_up"), 0);
}

}  // namespace
}  // namespace lithos::daemon
