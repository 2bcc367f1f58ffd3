// A log of every call that changes an Engine, with what it decided, and a
// replay of such a log through another Engine.
//
// The simulator and lithosd drive the same Engine object code. A log taken
// in one (EngineLog wraps the Engine it drives) replayed through an Engine
// built the other's way must give the same decisions, atom for atom: that is
// how tests check that the daemon runs the simulator's policy, settings
// included (tests/daemon/replay_test.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/status.hpp"
#include "common/time.hpp"
#include "sched/engine.hpp"
#include "sched/tpc_set.hpp"
#include "sched/types.hpp"

namespace lithos::sched {

struct EngineEvent {
  enum class Kind : std::uint8_t {
    kAddTenant,      // spec -> tenant `id`
    kAddQueue,       // tenant `id` -> a queue (decided[0].queue unused; see `result`)
    kSubmit,         // queue `id`, launch, now
    kSubmitRunning,  // queue `id`, launch, tpcs, now; decided: its one atom
    kDispatch,       // now; decided: the atoms emitted, in order
    kAtomFinished,   // atom `id`, start, now (= its end)
    kSync,           // queue `id`
    kCloseQueue,     // queue `id`, now
    kHpSample,       // tenant `id`, sample (Engine::observe_hp_sample)
  };
  Kind kind = Kind::kDispatch;
  Time now{};
  Time start{};
  std::uint32_t id = 0;
  std::uint64_t result = 0;  // kAddTenant/kAddQueue/kSubmit: the id returned (0 on error, with ok = false)
  bool ok = true;            // the call succeeded
  TenantSpec spec;
  LaunchDesc launch;
  TpcSet tpcs;
  std::vector<AtomDispatch> decided;
  struct Sample {  // kHpSample's arguments
    PredictionKey key;
    std::uint64_t blocks = 0;
    int blocks_per_tpc = 1;
    int tpcs = 1;
    Duration ran{0};
  } sample;
};

const char* engine_event_name(EngineEvent::Kind k);

// Forwards each call to `engine` and, while recording, appends it to the log.
class EngineLog {
 public:
  explicit EngineLog(Engine& engine, bool recording = true) : engine_(engine), recording_(recording) {}

  Result<TenantId> add_tenant(const TenantSpec& spec);
  Result<QueueId> add_queue(TenantId tenant);
  Result<LaunchId> submit(QueueId queue, const LaunchDesc& launch, Time now);
  Result<AtomDispatch> submit_running(QueueId queue, const LaunchDesc& launch, const TpcSet& tpcs, Time now);
  std::vector<AtomId> close_queue(QueueId queue, Time now);
  void sync(QueueId queue);
  void dispatch(Time now, std::vector<AtomDispatch>& out);
  Completion atom_finished(AtomId id, Time start, Time end);
  void observe_hp_sample(TenantId tenant, const PredictionKey& key, std::uint64_t blocks, int blocks_per_tpc, int tpcs,
                         Duration ran);

  Engine& engine() { return engine_; }
  bool recording() const { return recording_; }
  const std::vector<EngineEvent>& events() const { return events_; }
  std::vector<EngineEvent> take_events() { return std::move(events_); }
  // Forgets what was recorded (a writer took it), keeping the capacity.
  void clear_events() { events_.clear(); }

 private:
  Engine& engine_;
  bool recording_;
  std::vector<EngineEvent> events_;
};

struct ReplayResult {
  std::size_t events = 0;      // events replayed
  std::size_t dispatches = 0;  // kDispatch events compared
  std::size_t atoms = 0;       // atoms compared (dispatched and running)
  bool same = true;
  std::size_t first_difference = 0;  // index of the first event that differed
  std::string difference;            // what differed, for a test's message
};

// How replay() treats the log's kAddTenant events.
enum class ReplayTenants : std::uint8_t {
  kAdd,    // add them to `engine` (an Engine with no tenants yet)
  kCheck,  // `engine` already has its tenants (e.g. from lithosd's config):
           // each logged tenant must exist with the same id, name, class,
           // quota and static set
};

// Drives `engine` through `events` and compares every decision with the
// logged one. Stops at the first difference.
ReplayResult replay(const std::vector<EngineEvent>& events, Engine& engine, ReplayTenants tenants);

}  // namespace lithos::sched
