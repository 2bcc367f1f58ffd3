// The policy in lithosd and in the simulator is the same object code, with
// the same settings: a simulator run's log of Engine calls (EngineLog), replayed
// through the Engine lithosd builds from an equivalent configuration
// (daemon::make_engine), gives the same decisions, atom for atom. And the
// check can fail: a daemon configured differently decides differently.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "daemon/config.hpp"
#include "daemon/daemon.hpp"
#include "daemon/settings.hpp"
#include "daemon/trace.hpp"
#include "sched/engine_log.hpp"
#include "sim/scenario.hpp"
#include "sim/simulation.hpp"

namespace lithos::daemon {
namespace {

struct Logged {
  sim::Scenario scenario;
  std::vector<sched::EngineEvent> events;
};

// A short run of a built-in scenario under `policy`, logged (with
// `max_stolen_atoms` and `hp_holds_unowned` when given; with the latter,
// high-priority quotas of 40 TPCs, so that there are TPCs no one owns for
// their launches to spill onto: the built-in scenarios' quotas cover the
// GPU).
Logged simulate(const std::string& name, const std::string& policy, std::optional<std::uint32_t> max_stolen = {},
                std::optional<bool> hp_holds_unowned = {}, bool immediate_launches = false) {
  Logged out;
  auto sc = sim::load_scenario(name);
  EXPECT_TRUE(sc.is_ok()) << sc.status().message();
  out.scenario = std::move(sc).value();
  if (max_stolen) out.scenario.policies.lithos.max_stolen_atoms = *max_stolen;
  out.scenario.immediate_launches = immediate_launches;
  if (hp_holds_unowned) {
    out.scenario.policies.lithos.hp_holds_unowned = *hp_holds_unowned;
    for (sim::TenantConfig& t : out.scenario.tenants) {
      if (t.priority == sched::PriorityClass::kHigh) t.quota = 40;
    }
  }
  // The engine's cost of one more atom, which sets the floor of an atom's
  // length: lithosd uses the Engine's default (20 us), the simulator its
  // GPU model's (15 us) unless told. The same setting on both sides.
  out.scenario.engine.atoms.per_atom_cost = sched::AtomConfig{}.per_atom_cost;
  out.scenario.duration_s = 0.6;
  out.scenario.warmup_s = 0.1;
  sim::RunOptions opt;
  opt.policy = policy;
  opt.rate_rps.resize(out.scenario.tenants.size());
  for (std::size_t i = 0; i < out.scenario.tenants.size(); ++i) {
    if (out.scenario.tenants[i].load) opt.rate_rps[i] = 300.0;
  }
  opt.record = &out.events;
  auto run = sim::run_simulation(out.scenario, opt);
  EXPECT_TRUE(run.is_ok()) << run.status().message();
  return out;
}

// What an operator would write in lithosd.toml for the scenario's tenants
// and settings; the implicit default tenant comes last.
DaemonConfig config_for(const sim::Scenario& sc, const std::string& policy) {
  DaemonConfig c;
  c.socket = "/tmp/unused.sock";
  c.policy = policy;
  c.atom_us = static_cast<double>(sc.engine.atoms.target.count()) / 1e3;
  c.throttle_us = static_cast<double>(sc.engine.throttle.count()) / 1e3;
  c.max_stolen_atoms = sc.policies.lithos.max_stolen_atoms;
  c.pause_slowdown = sc.policies.lithos.pause_slowdown;
  c.idle_grace_us = to_us(sc.engine.idle_grace);
  c.burst_gap_us = to_us(sc.policies.lithos.burst_gap);
  c.share_unowned = sc.policies.lithos.share_unowned;
  c.hp_holds_unowned = sc.policies.lithos.hp_holds_unowned;
  for (const sim::TenantConfig& t : sc.tenants) {
    TenantConfig tc;
    tc.name = t.name;
    tc.priority = t.priority;
    tc.quota = t.quota;
    tc.pauses_best_effort = t.pauses_best_effort;
    c.tenants.push_back(tc);
  }
  TenantConfig def;
  def.name = kDefaultTenantName;
  c.tenants.push_back(def);
  return c;
}

TEST(DaemonReplay, SimulatorDecisionsReplayThroughTheDaemonsEngine) {
  for (const std::string name : {"hybrid-stacking", "inference-stacking", "head-of-line"}) {
    for (const std::string policy : {"lithos", "lithos-no-atoms", "mps-priority", "time-slicing"}) {
      SCOPED_TRACE(name + " / " + policy);
      Logged log = simulate(name, policy);
      ASSERT_GT(log.events.size(), 1000U);
      auto engine = make_engine(config_for(log.scenario, policy), sched::DeviceShape::h100_sxm());
      ASSERT_TRUE(engine.is_ok()) << engine.status().message();
      const sched::ReplayResult r = sched::replay(log.events, **engine, sched::ReplayTenants::kCheck);
      EXPECT_TRUE(r.same) << r.difference;
      EXPECT_EQ(r.events, log.events.size());
      EXPECT_GT(r.atoms, 500U);
    }
  }
}

// The simulator driving the Engine as lithosd does (the service's launches
// accounted as running on the policy's immediate_set): the daemon's engine
// replays those runs to the same decisions too, with either hp_holds_unowned.
TEST(DaemonReplay, LithosdStyleLaunchesReplayThroughTheDaemonsEngine) {
  for (const bool holds : {true, false}) {
    SCOPED_TRACE(holds ? "hp_holds_unowned = true" : "hp_holds_unowned = false");
    Logged log = simulate("hybrid-stacking", "lithos", {}, holds, true);
    std::size_t running = 0;
    for (const auto& e : log.events) running += e.kind == sched::EngineEvent::Kind::kSubmitRunning ? 1 : 0;
    EXPECT_GT(running, 100U);
    auto engine = make_engine(config_for(log.scenario, "lithos"), sched::DeviceShape::h100_sxm());
    ASSERT_TRUE(engine.is_ok()) << engine.status().message();
    const sched::ReplayResult r = sched::replay(log.events, **engine, sched::ReplayTenants::kCheck);
    EXPECT_TRUE(r.same) << r.difference;
    EXPECT_GT(r.atoms, 500U);
  }
}

TEST(DaemonReplay, ADifferentlyConfiguredDaemonDecidesDifferently) {
  const Logged log = simulate("hybrid-stacking", "lithos");
  const DaemonConfig base = config_for(log.scenario, "lithos");

  DaemonConfig wider = base;
  wider.throttle_us = base.throttle_us * 4;
  auto e1 = make_engine(wider, sched::DeviceShape::h100_sxm());
  ASSERT_TRUE(e1.is_ok());
  const sched::ReplayResult r1 = sched::replay(log.events, **e1, sched::ReplayTenants::kCheck);
  EXPECT_FALSE(r1.same);
  EXPECT_NE(r1.difference.find("dispatch"), std::string::npos) << r1.difference;

  DaemonConfig other_quota = base;
  for (TenantConfig& t : other_quota.tenants) {
    if (t.priority == sched::PriorityClass::kHigh) t.quota -= 2;
  }
  auto e2 = make_engine(other_quota, sched::DeviceShape::h100_sxm());
  ASSERT_TRUE(e2.is_ok());
  const sched::ReplayResult r2 = sched::replay(log.events, **e2, sched::ReplayTenants::kCheck);
  EXPECT_FALSE(r2.same);
  EXPECT_EQ(r2.first_difference, 0U) << r2.difference;  // the first tenant already differs

  DaemonConfig fewer_stolen = base;
  fewer_stolen.max_stolen_atoms = 1;
  auto e4 = make_engine(fewer_stolen, sched::DeviceShape::h100_sxm());
  ASSERT_TRUE(e4.is_ok());
  const sched::ReplayResult r4 = sched::replay(log.events, **e4, sched::ReplayTenants::kCheck);
  EXPECT_FALSE(r4.same);
  EXPECT_NE(r4.difference.find("dispatch"), std::string::npos) << r4.difference;

  // (With TPCs no one owns: the scenario's service owns all 66.)
  const Logged spilling = simulate("head-of-line", "lithos", {}, true);
  DaemonConfig not_holding = config_for(spilling.scenario, "lithos");
  ASSERT_TRUE(not_holding.hp_holds_unowned);
  not_holding.hp_holds_unowned = false;
  auto e5 = make_engine(not_holding, sched::DeviceShape::h100_sxm());
  ASSERT_TRUE(e5.is_ok());
  const sched::ReplayResult r5 = sched::replay(spilling.events, **e5, sched::ReplayTenants::kCheck);
  EXPECT_FALSE(r5.same);
  EXPECT_NE(r5.difference.find("dispatch"), std::string::npos) << r5.difference;

  // The bar of the automatic pause reaches the daemon's engine.
  DaemonConfig eager_pause = base;
  eager_pause.pause_slowdown = 2.5;
  auto e6 = make_engine(eager_pause, sched::DeviceShape::h100_sxm());
  ASSERT_TRUE(e6.is_ok());
  EXPECT_EQ(dynamic_cast<const sched::LithosPolicy&>((*e6)->policy()).config().pause_slowdown, 2.5);

  auto e3 = make_engine(base, sched::DeviceShape::h100_sxm());
  ASSERT_TRUE(e3.is_ok());
  EXPECT_TRUE(sched::replay(log.events, **e3, sched::ReplayTenants::kCheck).same);
}

// The trace's text form keeps everything replay needs: a simulator log
// written as trace lines and read back replays the same. (One borrowed atom
// per tenant, not the default: the header must carry the setting.)
TEST(DaemonTrace, TextRoundTripKeepsEveryDecision) {
  const Logged log = simulate("inference-stacking", "lithos", 1U);
  // A daemon's trace logs all its tenants; this log has the scenario's, so
  // the header names one of them as the default tenant.
  DaemonConfig cfg = config_for(log.scenario, "lithos");
  cfg.tenants.pop_back();
  cfg.default_tenant = cfg.tenants.back().name;
  std::string text = std::string("{\"schema\":\"") + kTraceSchema + "\",\"config\":" + config_json(cfg) +
                     ",\"device\":{\"name\":\"H100\",\"tpcs\":66,"
                     "\"topology\":\"" +
                     sched::DeviceShape::h100_sxm().topology.to_string() + "\"}}\n";
  for (const auto& e : log.events) text += trace_line(e) + "\n";
  auto t = parse_trace_file(text, "sim.jsonl");
  ASSERT_TRUE(t.is_ok()) << t.status().message();
  ASSERT_EQ(t->events.size(), log.events.size());
  EXPECT_EQ(t->header.device.topology.to_string(), sched::DeviceShape::h100_sxm().topology.to_string());
  EXPECT_EQ(t->header.config.max_stolen_atoms, 1U);
  EXPECT_EQ(t->header.config.pause_slowdown, cfg.pause_slowdown);
  // A setting other than the default is carried too.
  DaemonConfig eager = cfg;
  eager.pause_slowdown = 2.5;
  auto eager_trace =
      parse_trace_file(std::string("{\"schema\":\"") + kTraceSchema + "\",\"config\":" + config_json(eager) +
                           ",\"device\":{\"name\":\"H100\",\"tpcs\":66,\"topology\":\"" +
                           sched::DeviceShape::h100_sxm().topology.to_string() + "\"}}\n",
                       "eager.jsonl");
  ASSERT_TRUE(eager_trace.is_ok()) << eager_trace.status().message();
  EXPECT_EQ(eager_trace->header.config.pause_slowdown, 2.5);
  auto r = replay_trace(*t);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_TRUE(r->same) << r->difference;
  EXPECT_GT(r->atoms, 500U);
}

// The same with hp_holds_unowned off: the header carries it, and the replay
// decides as the simulator did only with it.
TEST(DaemonTrace, TheHeaderCarriesHpHoldsUnowned) {
  const Logged log = simulate("head-of-line", "lithos", {}, false);
  DaemonConfig cfg = config_for(log.scenario, "lithos");
  ASSERT_FALSE(cfg.hp_holds_unowned);
  cfg.tenants.pop_back();
  cfg.default_tenant = cfg.tenants.back().name;
  std::string text = std::string("{\"schema\":\"") + kTraceSchema + "\",\"config\":" + config_json(cfg) +
                     ",\"device\":{\"name\":\"H100\",\"tpcs\":66,\"topology\":\"" +
                     sched::DeviceShape::h100_sxm().topology.to_string() + "\"}}\n";
  for (const auto& e : log.events) text += trace_line(e) + "\n";
  auto t = parse_trace_file(text, "sim.jsonl");
  ASSERT_TRUE(t.is_ok()) << t.status().message();
  EXPECT_FALSE(t->header.config.hp_holds_unowned);
  EXPECT_TRUE(t->header.config.share_unowned);
  auto r = replay_trace(*t);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_TRUE(r->same) << r->difference;
  t->header.config.hp_holds_unowned = true;
  auto held = replay_trace(*t);
  ASSERT_TRUE(held.is_ok()) << held.status().message();
  EXPECT_FALSE(held->same) << "the setting changes head-of-line's decisions";
}

// Every setting of the table with a [scheduler] key sets the same Engine or
// policy setting in the simulator as in lithosd's Engine.
TEST(DaemonReplay, SchedulerKeysOfTheSettingsTableSetTheSameEngine) {
  const auto engine_text = [](const sched::Engine& e) {
    const sched::EngineConfig& c = e.state().config;
    const auto& l = dynamic_cast<const sched::LithosPolicy&>(e.policy()).config();
    return std::to_string(c.throttle.count()) + " " + std::to_string(c.throttle_unborrowed.count()) + " " +
           std::to_string(c.atoms.target.count()) + " " + std::to_string(c.idle_grace.count()) + " " +
           std::to_string(l.max_stolen_atoms) + " " + std::to_string(l.pause_slowdown) + " " +
           std::to_string(l.burst_gap.count()) + " " + std::to_string(l.share_unowned) + " " +
           std::to_string(l.hp_holds_unowned) + " " + std::to_string(l.rightsize) + " " +
           std::to_string(c.rightsize.slip) + " " + std::to_string(c.rightsize.probe_after) + " " +
           std::to_string(c.rightsize.probe_every) + " " + std::to_string(c.rightsize.probe_budget);
  };
  int rows = 0;
  for (const Setting& s : settings()) {
    if (s.sim_key.empty()) continue;
    ++rows;
    SCOPED_TRACE(std::string(s.key));
    DaemonConfig d = default_config();
    d.socket = "/tmp/unused.sock";
    std::string v;
    if (s.type == SettingType::kBool) {
      v = s.get(d) == "true" ? "false" : "true";
    } else {
      v = detail::json_number(s.lo > 0 ? s.lo * 3 : std::min(7.0, s.hi / 2));
    }
    ASSERT_TRUE(set_setting(d, s, v, "test").is_ok());
    auto daemon_engine = make_engine(d, sched::DeviceShape::h100_sxm());
    ASSERT_TRUE(daemon_engine.is_ok()) << daemon_engine.status().message();
    DaemonConfig plain = default_config();
    plain.socket = d.socket;
    auto plain_engine = make_engine(plain, sched::DeviceShape::h100_sxm());
    ASSERT_TRUE(plain_engine.is_ok());
    // The simulator's defaults are its own (atoms' cost, GPU model): compare
    // the change the key makes, from lithosd's defaults on both sides.
    std::string text = "[scenario]\nname = \"k\"\n\n[scheduler]\n";
    for (const Setting& o : settings()) {
      if (!o.sim_key.empty()) text += std::string(o.sim_key) + " = " + (o.key == s.key ? v : o.get(plain)) + "\n";
    }
    text +=
        "\n[[kernel]]\nname = \"k\"\nduration_us = 10\nblocks = 66\n\n[[tenant]]\nname = \"t\"\n"
        "class = \"best-effort\"\narrival = \"closed\"\nrequest = \"k\"\n";
    auto sc = sim::parse_scenario(text, "t.toml", ".");
    ASSERT_TRUE(sc.is_ok()) << sc.status().message() << "\n" << text;
    std::string err;
    sched::EngineConfig ec = sc->engine;
    ec.device = sched::DeviceShape::h100_sxm();
    const sched::Engine sim_engine(ec, sched::make_policy("lithos", sc->policies, &err));
    EXPECT_EQ(engine_text(sim_engine), engine_text(**daemon_engine));
    EXPECT_NE(engine_text(**daemon_engine), engine_text(**plain_engine)) << "the setting changes nothing";
  }
  EXPECT_GT(rows, 5);
}

TEST(DaemonTrace, MalformedTracesAreErrorsNamingTheLine) {
  const std::string header = std::string("{\"schema\":\"") + kTraceSchema +
                             "\",\"config\":{\"policy\":\"lithos\",\"atom_us\":500,\"throttle_us\":100,"
                             "\"socket\":\"/tmp/s\",\"default_tenant\":\"default\"},"
                             "\"device\":{\"name\":\"x\",\"tpcs\":66,\"topology\":\"\"}}\n";
  ASSERT_TRUE(parse_trace_file(header, "t").is_ok());
  const std::pair<std::string, std::string> bad[] = {
      {"", "t: empty trace"},
      {"{\"schema\":\"other\"}\n", "t:1: not a lithosd trace"},
      {header + "\n{\"e\":\"sync\"}\n", "t:3: missing 'queue'"},
      {header + "not json\n", "t:2: not a JSON object"},
      {header + "{\"e\":\"teleport\"}\n", "t:2: unknown event 'teleport'"},
      {"{\"schema\":\"" + std::string(kTraceSchema) +
           "\",\"config\":{\"policy\":\"lithos\",\"atom_us\":500,\"throttle_us\":100,\"max_stolen_atoms\":-1,"
           "\"socket\":\"/tmp/s\",\"default_tenant\":\"default\"},"
           "\"device\":{\"name\":\"x\",\"tpcs\":66,\"topology\":\"\"}}\n",
       "'max_stolen_atoms' must be a non-negative integer"},
      {header + "{\"e\":\"sync\",\"queue\":\"one\"}\n", "t:2: 'queue' must be an integer"},
      {header + "{\"e\":\"dispatch\",\"t\":5,\"atoms\":[{\"atom\":1}]}\n", "t:2: missing 'launch'"},
      {header + "{\"e\":\"atom_finished\",\"atom\":1,\"start\":2}\n", "t:2: missing 't'"},
  };
  for (const auto& [text, want] : bad) {
    auto t = parse_trace_file(text, "t");
    ASSERT_FALSE(t.is_ok()) << text;
    EXPECT_NE(t.status().message().find(want), std::string::npos) << t.status().message();
  }
}

}  // namespace
}  // namespace lithos::daemon
