#include "sched/engine_log.hpp"

#include <utility>

namespace lithos::sched {

const char* engine_event_name(EngineEvent::Kind k) {
  switch (k) {
    case EngineEvent::Kind::kAddTenant: return "add_tenant";
    case EngineEvent::Kind::kAddQueue: return "add_queue";
    case EngineEvent::Kind::kSubmit: return "submit";
    case EngineEvent::Kind::kSubmitRunning: return "submit_running";
    case EngineEvent::Kind::kDispatch: return "dispatch";
    case EngineEvent::Kind::kAtomFinished: return "atom_finished";
    case EngineEvent::Kind::kSync: return "sync";
    case EngineEvent::Kind::kCloseQueue: return "close_queue";
    case EngineEvent::Kind::kHpSample: return "hp_sample";
  }
  return "?";
}

Result<TenantId> EngineLog::add_tenant(const TenantSpec& spec) {
  auto r = engine_.add_tenant(spec);
  if (recording_) {
    EngineEvent e;
    e.kind = EngineEvent::Kind::kAddTenant;
    e.spec = spec;
    e.ok = r.is_ok();
    e.result = r ? *r : 0;
    events_.push_back(std::move(e));
  }
  return r;
}

Result<QueueId> EngineLog::add_queue(TenantId tenant) {
  auto r = engine_.add_queue(tenant);
  if (recording_) {
    EngineEvent e;
    e.kind = EngineEvent::Kind::kAddQueue;
    e.id = tenant;
    e.ok = r.is_ok();
    e.result = r ? *r : 0;
    events_.push_back(std::move(e));
  }
  return r;
}

Result<LaunchId> EngineLog::submit(QueueId queue, const LaunchDesc& launch, Time now) {
  auto r = engine_.submit(queue, launch, now);
  if (recording_) {
    EngineEvent e;
    e.kind = EngineEvent::Kind::kSubmit;
    e.id = queue;
    e.launch = launch;
    e.now = now;
    e.ok = r.is_ok();
    e.result = r ? *r : 0;
    events_.push_back(std::move(e));
  }
  return r;
}

Result<AtomDispatch> EngineLog::submit_running(QueueId queue, const LaunchDesc& launch, const TpcSet& tpcs, Time now) {
  auto r = engine_.submit_running(queue, launch, tpcs, now);
  if (recording_) {
    EngineEvent e;
    e.kind = EngineEvent::Kind::kSubmitRunning;
    e.id = queue;
    e.launch = launch;
    e.tpcs = tpcs;
    e.now = now;
    e.ok = r.is_ok();
    if (r) e.decided.push_back(*r);
    events_.push_back(std::move(e));
  }
  return r;
}

std::vector<AtomId> EngineLog::close_queue(QueueId queue, Time now) {
  if (recording_) {
    EngineEvent e;
    e.kind = EngineEvent::Kind::kCloseQueue;
    e.id = queue;
    e.now = now;
    events_.push_back(std::move(e));
  }
  return engine_.close_queue(queue, now);
}

void EngineLog::observe_hp_sample(TenantId tenant, const PredictionKey& key, std::uint64_t blocks, int blocks_per_tpc,
                                  int tpcs, Duration ran) {
  if (recording_) {
    EngineEvent e;
    e.kind = EngineEvent::Kind::kHpSample;
    e.id = tenant;
    e.sample = {key, blocks, blocks_per_tpc, tpcs, ran};
    events_.push_back(std::move(e));
  }
  engine_.observe_hp_sample(tenant, key, blocks, blocks_per_tpc, tpcs, ran);
}

void EngineLog::sync(QueueId queue) {
  if (recording_) {
    EngineEvent e;
    e.kind = EngineEvent::Kind::kSync;
    e.id = queue;
    events_.push_back(std::move(e));
  }
  engine_.sync(queue);
}

void EngineLog::dispatch(Time now, std::vector<AtomDispatch>& out) {
  const std::size_t before = out.size();
  engine_.dispatch(now, out);
  if (recording_) {
    EngineEvent e;
    e.kind = EngineEvent::Kind::kDispatch;
    e.now = now;
    e.decided.assign(out.begin() + static_cast<std::ptrdiff_t>(before), out.end());
    events_.push_back(std::move(e));
  }
}

Completion EngineLog::atom_finished(AtomId id, Time start, Time end) {
  if (recording_) {
    EngineEvent e;
    e.kind = EngineEvent::Kind::kAtomFinished;
    e.id = id;
    e.start = start;
    e.now = end;
    events_.push_back(std::move(e));
  }
  return engine_.atom_finished(id, start, end);
}

namespace {

std::string describe(const AtomDispatch& d) {
  std::string s = "atom " + std::to_string(d.atom) + " launch " + std::to_string(d.launch) + " queue " +
                  std::to_string(d.queue) + " tenant " + std::to_string(d.tenant) + " blocks [" +
                  std::to_string(d.blocks.lo) + "," + std::to_string(d.blocks.hi) + ") #" + std::to_string(d.index) +
                  (d.last ? " last" : "") + (d.split ? " split" : "") + " tpcs " + d.tpcs.to_string() + " prio " +
                  std::to_string(static_cast<int>(d.priority)) + " predicted ";
  s += d.predicted ? std::to_string(d.predicted->count()) + " ns" : "none";
  return s;
}

bool same_atom(const AtomDispatch& a, const AtomDispatch& b) {
  return a.atom == b.atom && a.launch == b.launch && a.queue == b.queue && a.tenant == b.tenant &&
         a.blocks == b.blocks && a.index == b.index && a.last == b.last && a.split == b.split && a.tpcs == b.tpcs &&
         a.priority == b.priority && a.predicted == b.predicted;
}

// Empty when the decisions agree, else what differs.
std::string compare(const std::vector<AtomDispatch>& logged, const std::vector<AtomDispatch>& got) {
  for (std::size_t i = 0; i < logged.size() || i < got.size(); ++i) {
    if (i >= got.size()) return "logged " + describe(logged[i]) + ", replay decided nothing more";
    if (i >= logged.size()) return "replay decided " + describe(got[i]) + ", log has nothing more";
    if (!same_atom(logged[i], got[i])) return "logged " + describe(logged[i]) + ", replay " + describe(got[i]);
  }
  return "";
}

std::string check_tenant(const Engine& engine, const EngineEvent& e) {
  const auto& tenants = engine.state().tenants;
  if (e.result >= tenants.size()) return "tenant " + std::to_string(e.result) + " ('" + e.spec.name + "') is missing";
  const TenantSpec& have = tenants[e.result].spec;
  // A static set matters to the static-partition policy alone.
  const bool static_matters = engine.policy().name() == "static-partition";
  if (have.name == e.spec.name && have.priority == e.spec.priority && have.quota == e.spec.quota &&
      have.pauses_best_effort == e.spec.pauses_best_effort &&
      (!static_matters || have.static_tpcs == e.spec.static_tpcs)) {
    return "";
  }
  auto show = [](const TenantSpec& t) {
    return "'" + t.name + "' " + (t.priority == PriorityClass::kHigh ? "high" : "best-effort") + " quota " +
           std::to_string(t.quota) + " static " + (t.static_tpcs ? std::to_string(*t.static_tpcs) : "-") +
           (t.pauses_best_effort != BestEffortPause::kNever
                ? std::string(" pauses best-effort: ") + best_effort_pause_name(t.pauses_best_effort)
                : std::string());
  };
  return "tenant " + std::to_string(e.result) + ": logged " + show(e.spec) + ", engine has " + show(have);
}

}  // namespace

ReplayResult replay(const std::vector<EngineEvent>& events, Engine& engine, ReplayTenants tenants) {
  ReplayResult r;
  std::vector<AtomDispatch> out;
  for (std::size_t i = 0; i < events.size(); ++i) {
    const EngineEvent& e = events[i];
    std::string diff;
    switch (e.kind) {
      case EngineEvent::Kind::kAddTenant:
        if (tenants == ReplayTenants::kCheck) {
          if (e.ok) diff = check_tenant(engine, e);
        } else {
          auto got = engine.add_tenant(e.spec);
          if (got.is_ok() != e.ok || (got && *got != e.result)) diff = "add_tenant '" + e.spec.name + "' differs";
        }
        break;
      case EngineEvent::Kind::kAddQueue: {
        auto got = engine.add_queue(e.id);
        if (got.is_ok() != e.ok || (got && *got != e.result)) diff = "add_queue differs";
        break;
      }
      case EngineEvent::Kind::kSubmit: {
        auto got = engine.submit(e.id, e.launch, e.now);
        if (got.is_ok() != e.ok || (got && *got != e.result)) {
          diff = "submit: logged launch " + std::to_string(e.result) + ", replay " +
                 (got ? std::to_string(*got) : got.status().message());
        }
        break;
      }
      case EngineEvent::Kind::kSubmitRunning: {
        auto got = engine.submit_running(e.id, e.launch, e.tpcs, e.now);
        out.clear();
        if (got) out.push_back(*got);
        if (got.is_ok() != e.ok) {
          diff = "submit_running: success differs";
        } else {
          diff = compare(e.decided, out);
          r.atoms += out.size();
        }
        break;
      }
      case EngineEvent::Kind::kDispatch:
        out.clear();
        engine.dispatch(e.now, out);
        diff = compare(e.decided, out);
        ++r.dispatches;
        r.atoms += out.size();
        break;
      case EngineEvent::Kind::kAtomFinished: (void)engine.atom_finished(e.id, e.start, e.now); break;
      case EngineEvent::Kind::kSync: engine.sync(e.id); break;
      case EngineEvent::Kind::kCloseQueue: (void)engine.close_queue(e.id, e.now); break;
      case EngineEvent::Kind::kHpSample:
        engine.observe_hp_sample(e.id, e.sample.key, e.sample.blocks, e.sample.blocks_per_tpc, e.sample.tpcs,
                                 e.sample.ran);
        break;
    }
    ++r.events;
    if (!diff.empty()) {
      r.same = false;
      r.first_difference = i;
      r.difference = "event " + std::to_string(i) + " (" + engine_event_name(e.kind) + "): " + diff;
      return r;
    }
  }
  return r;
}

}  // namespace lithos::sched
