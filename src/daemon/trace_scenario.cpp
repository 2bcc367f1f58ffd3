#include "daemon/trace_scenario.hpp"

#include <algorithm>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <unordered_map>

#include "daemon/settings.hpp"
#include "sched/engine_log.hpp"
#include "sched/occupancy.hpp"

namespace lithos::daemon {

namespace {

using nlohmann::json;
using Kind = sched::EngineEvent::Kind;

struct Launch {
  sched::LaunchDesc desc;
  double whole_us = 0;  // measured, scaled to the whole GPU
  int finished = 0;     // atoms seen to end
  bool graph = false;
};
struct Request {
  std::vector<sched::LaunchId> launches;
  lithos::Time first{};
};
struct Stream {
  sched::TenantId tenant = 0;
  Request open;
};

bool is_graph(const sched::LaunchDesc& d) { return d.indivisible && d.grid.count() == 1 && d.block.count() == 1; }

std::string hex(std::uint64_t v) {
  std::ostringstream s;
  s << std::hex << v;
  return s.str();
}

std::string toml_string(const std::string& s) { return json(s).dump(); }

}  // namespace

Result<TraceScenario> trace_to_scenario(const Trace& trace, const std::string& name, const std::string& source) {
  const sched::DeviceShape& dev = trace.header.device;
  std::map<sched::TenantId, sched::TenantSpec> tenants;
  std::unordered_map<sched::QueueId, Stream> streams;
  std::unordered_map<sched::LaunchId, Launch> launches;
  // In-flight atoms (ids are reused once an atom ended): launch, blocks, TPCs.
  struct Atom {
    sched::LaunchId launch;
    std::uint64_t blocks;
    int tpcs;
  };
  std::unordered_map<sched::AtomId, Atom> atoms;
  std::map<sched::TenantId, std::vector<Request>> done;
  std::optional<lithos::Time> t0, t1;
  TraceScenario out;

  auto close_request = [&](Stream& s) {
    if (!s.open.launches.empty()) done[s.tenant].push_back(std::move(s.open));
    s.open = Request{};
  };
  auto seen = [&](lithos::Time t) {
    if (!t0 || t < *t0) t0 = t;
    if (!t1 || t > *t1) t1 = t;
  };
  auto add_launch = [&](sched::QueueId q, sched::LaunchId id, const sched::LaunchDesc& d, lithos::Time now) {
    const auto it = streams.find(q);
    if (it == streams.end()) return;
    Launch l;
    l.desc = d;
    l.graph = is_graph(d);
    launches[id] = l;
    if (it->second.open.launches.empty()) it->second.open.first = now;
    it->second.open.launches.push_back(id);
    seen(now);
  };
  auto add_atom = [&](const sched::AtomDispatch& a) {
    atoms[a.atom] = Atom{a.launch, a.blocks.hi - a.blocks.lo, std::max(1, a.tpcs.count())};
  };

  for (const sched::EngineEvent& e : trace.events) {
    switch (e.kind) {
      case Kind::kAddTenant:
        if (e.ok) tenants[static_cast<sched::TenantId>(e.result)] = e.spec;
        break;
      case Kind::kAddQueue:
        if (e.ok) streams[static_cast<sched::QueueId>(e.result)] = Stream{static_cast<sched::TenantId>(e.id), {}};
        break;
      case Kind::kSubmit:
        if (e.ok) add_launch(e.id, static_cast<sched::LaunchId>(e.result), e.launch, e.now);
        break;
      case Kind::kSubmitRunning:
        if (e.ok && !e.decided.empty()) {
          add_launch(e.id, e.decided.front().launch, e.launch, e.now);
          add_atom(e.decided.front());
        }
        break;
      case Kind::kDispatch:
        for (const auto& a : e.decided) add_atom(a);
        break;
      case Kind::kAtomFinished: {
        const auto a = atoms.find(e.id);
        if (a == atoms.end()) break;
        const auto l = launches.find(a->second.launch);
        if (l != launches.end() && e.now >= e.start) {
          double us = static_cast<double>((e.now - e.start).count()) / 1e3;
          if (!l->second.graph) {
            const int per_tpc = std::max(1, sched::blocks_per_tpc(dev, l->second.desc));
            const auto on_set = sched::waves(a->second.blocks, per_tpc, a->second.tpcs);
            const auto whole = sched::waves(a->second.blocks, per_tpc, dev.tpcs);
            if (on_set > 0) us *= static_cast<double>(whole) / static_cast<double>(on_set);
          }
          l->second.whole_us += us;
          ++l->second.finished;
        }
        seen(e.now);
        atoms.erase(a);
        break;
      }
      case Kind::kSync:
        if (const auto s = streams.find(e.id); s != streams.end()) close_request(s->second);
        break;
      case Kind::kCloseQueue:
        if (const auto s = streams.find(e.id); s != streams.end()) {
          out.dropped_launches += s->second.open.launches.size();  // unfinished: no sync closed it
          streams.erase(s);
        }
        break;
      case Kind::kHpSample: break;  // the predictor's learning, not a launch
    }
  }
  for (auto& [q, s] : streams) out.dropped_launches += s.open.launches.size();

  const double span_s = t0 && t1 ? std::max(1e-3, static_cast<double>((*t1 - *t0).count()) / 1e9) : 1.0;
  std::ostringstream toml;
  toml << "# Made by `lithos daemon --scenario-from-trace` from " << source << " (docs/daemon.md, \"Trace\").\n"
       << "[scenario]\nname = " << toml_string(name)
       << "\ndescription = " << toml_string("recorded by lithosd: " + source)
       << "\nduration_s = " << std::max(1.0, span_s) << "\nwarmup_s = " << std::max(1.0, span_s) / 10
       << "\n\n[gpu]\ntpcs = " << dev.tpcs << "\n\n[scheduler]\n";
  // Every setting the simulator's [scheduler] table takes too, as lithosd ran.
  for (const Setting& s : settings()) {
    if (s.sim_key.empty()) continue;
    toml << s.sim_key << " = " << s.get(trace.header.config) << "\n";
  }
  // As lithosd ran: its high-priority launches went out at once.
  toml << "immediate_launches = true\n";
  for (const auto& [tid, spec] : tenants) {
    std::string lines;
    std::size_t reqs = 0;
    for (const Request& r : done[tid]) {
      std::string these;
      for (const sched::LaunchId id : r.launches) {
        const Launch& l = launches[id];
        if (l.finished == 0) {
          ++out.dropped_launches;
          continue;
        }
        // A launch seen to end in the poll that saw it start measured 0:
        // kMinUs stands for "shorter than the daemon can tell".
        constexpr double kMinUs = 0.5;
        json j = {{"request", reqs}, {"duration_us", std::max(kMinUs, l.whole_us)}};
        if (l.graph) {
          j["kernel"] = "g" + hex(l.desc.kernel);
          j["blocks"] = dev.tpcs * dev.sms_per_tpc;
          j["threads"] = 1024;
        } else {
          j["kernel"] = "k" + hex(l.desc.kernel);
          j["grid"] = {l.desc.grid.x, l.desc.grid.y, l.desc.grid.z};
          j["block"] = {l.desc.block.x, l.desc.block.y, l.desc.block.z};
          j["regs"] = l.desc.regs_per_thread;
          j["smem"] = l.desc.smem_per_block;
          if (l.desc.cluster.count() > 1) j["cluster"] = {l.desc.cluster.x, l.desc.cluster.y, l.desc.cluster.z};
          if (l.desc.cooperative) j["cooperative"] = true;
        }
        these += j.dump() + "\n";
        ++out.launches;
      }
      if (these.empty()) continue;
      lines += these;
      ++reqs;
    }
    if (reqs == 0) continue;
    const std::string file = name + "-" + spec.name + ".jsonl";
    const bool high = spec.priority == sched::PriorityClass::kHigh;
    toml << "\n[[tenant]]\nname = " << toml_string(spec.name) << "\nclass = \"" << (high ? "high" : "best-effort")
         << "\"\n";
    if (high && spec.quota > 0) toml << "quota = " << spec.quota << "\n";
    if (high) {
      toml << "arrival = \"poisson\"\nrate_rps = " << static_cast<double>(reqs) / span_s << "\n";
    } else {
      toml << "arrival = \"closed\"\nunit = \"it\"\n";
    }
    toml << "trace = " << toml_string(file) << "\n";
    out.traces.emplace_back(file, std::move(lines));
    out.requests += reqs;
    ++out.tenants;
  }
  if (out.tenants == 0) {
    return Status::invalid_argument(
        "no complete request in the trace: a request is what a stream launched between two synchronisations "
        "(cuStreamSynchronize, cuCtxSynchronize)");
  }
  out.toml = toml.str();
  return out;
}

}  // namespace lithos::daemon
