// The Engine: the mechanism half of the scheduling core.
//
// Given events (a tenant registers, a launch is submitted to a queue, an atom
// finished on the hardware, the host synchronised a queue) it returns
// decisions (this atom of that launch goes to the hardware now, on these
// TPCs, at this hardware priority). The runtime and the simulator drive the
// same Engine; neither has a copy of the policy logic.
//
// Flow of one launch:
//   submit()  -> PendingLaunch at the tail of its queue; atom plan made
//   dispatch()-> for the queue's head, if the throttle allows: Policy::place,
//                the atom's blocks carved, AtomDispatch emitted
//   atom_finished() -> predictor/right-sizer learn, TPC holdings released,
//                Completion says whether the launch is now done
//
// Not thread-safe: one owner serialises all calls.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <tuple>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "common/ring_queue.hpp"
#include "common/status.hpp"
#include "common/time.hpp"
#include "sched/atom_plan.hpp"
#include "sched/launch_fit.hpp"
#include "sched/policy.hpp"
#include "sched/predictor.hpp"
#include "sched/rightsize.hpp"
#include "sched/tpc_set.hpp"
#include "sched/types.hpp"

namespace lithos::sched {

struct EngineConfig {
  DeviceShape device = DeviceShape::h100_sxm();
  Duration throttle = us(100);  // outstanding predicted work per queue (throttling policies)
  // The bound for a best-effort atom on TPCs nobody can claim back, under
  // policies whose throttle holds only borrowed work
  // (PolicyTraits::throttle_borrowed_only); below `throttle` (the default,
  // 0) it is `throttle`.
  Duration throttle_unborrowed{0};
  // A tenant counts as active this long after its work drained
  // (EngineState::active): it may be back within microseconds. A policy
  // may lengthen it per tenant (Policy::on_arrival).
  Duration idle_grace = us(20);
  AtomConfig atoms;
  PredictorConfig predictor;
  RightSizeConfig rightsize;
  // Whether atom_finished's times of launches reported running
  // (submit_running) are each launch's own (the simulator), so that
  // right-sizing learns from them; false in lithosd, where a burst of them
  // shares one completion marker (observe_kernel brings their own times).
  bool running_times_exact = false;
};

// A high-priority tenant's right-sizing table: per kernel and grid, the TPC
// count its client launches with (the first `tpcs` of its published
// allocation, lowest numbers first). Entries are only added (at most
// kMaxEntries) and changed, never removed; `generation` counts changes.
struct SizeTable {
  static constexpr std::size_t kMaxEntries = 4096;
  struct Entry {
    SizeKey key;
    int tpcs = 0;  // 0: its whole allocation
    SizeSource source = SizeSource::kFull;
  };
  std::vector<Entry> entries;
  std::uint64_t generation = 0;
  const Entry* find(const SizeKey& key) const;
  std::unordered_map<SizeKey, std::size_t, SizeKeyHash> index;
};

// Handle of an atom in flight; valid from its AtomDispatch until atom_finished.
using AtomId = std::uint32_t;

// One atom handed to the hardware.
struct AtomDispatch {
  AtomId atom = 0;
  LaunchId launch = 0;
  QueueId queue = 0;
  TenantId tenant = 0;
  BlockRange blocks;        // linear block range of this atom
  std::uint32_t index = 0;  // 0-based atom number within its launch
  bool last = false;        // the launch's final atom
  bool split = false;       // the launch runs as more than one atom
  TpcSet tpcs;              // where it may run
  HwPriority priority = HwPriority::kNormal;
  std::optional<Duration> predicted;  // predicted duration on `tpcs`
};

struct Completion {
  LaunchId launch = 0;
  QueueId queue = 0;
  TenantId tenant = 0;
  bool launch_done = false;  // this was the launch's last atom
};

struct PendingLaunch {
  LaunchId id = 0;
  LaunchDesc desc;
  Time submitted{};
  PredictionKey key;
  int blocks_per_tpc = 1;
  AtomPlan plan;
  std::optional<Duration> predicted_full;  // on the whole device, at submit
  std::uint64_t next_block = 0;            // first block not yet dispatched
  std::uint32_t atoms_dispatched = 0;
  int need = 1;      // TPCs it can use: occupancy bound (or right-sized count)
  SizeKey size_key;  // right-sizing's key (kernel and grid)
  SizeSource size_source = SizeSource::kFull;
  int size_full = 0;  // right-sized: what it could use otherwise (0: not right-sized)
  LaunchNeeds safe;   // what a set needs not to hang it (clusters, cooperative grid)

  std::uint64_t remaining_blocks() const { return plan.total_blocks - next_block; }
  // How many TPCs the rest of it can use at all: its occupancy bound, or
  // every TPC for a launch whose kernels are not described
  // (LaunchDesc::whole_device).
  int usable_tpcs(const DeviceShape& dev) const;
};

struct QueueState {
  QueueId id = 0;
  TenantId tenant = 0;
  bool closed = false;               // close_queue(): free for add_queue to reuse
  RingQueue<PendingLaunch> pending;  // not fully dispatched, in submit order
  std::uint32_t ordinal = 0;         // launches since the last sync()
  std::uint32_t inflight_atoms = 0;
  Time tail_end{};  // predicted end of its last in-flight atom
  // Its atoms run in order, so one that ends early or late moves every atom
  // behind it by as much. Kept here rather than in each atom (a queue of
  // immediate launches may have thousands in flight, and a completion must
  // not cost one step per atom): `shift` is the sum of those errors since the
  // queue last ran dry, `floor` its last completion, before which nothing in
  // it ends (EngineState::predicted_end).
  Duration shift{0};
  Time floor{};
};

struct TenantState {
  TenantId id = 0;
  TenantSpec spec;
  TpcSet owned;                  // guaranteed TPCs (set by the policy)
  std::vector<AtomId> inflight;  // its atoms in flight (EngineState::atoms)
  std::vector<QueueId> queues;
  std::uint32_t pending_launches = 0;
  std::uint32_t inflight_atoms = 0;
  std::uint32_t stolen_inflight = 0;  // in-flight atoms that hold borrowed TPCs
  Time idle_since{};                  // when it last ran out of work
  // How long it stays active after its work drained: EngineConfig::
  // idle_grace, or what the policy answered at its last arrival
  // (Policy::on_arrival).
  Duration grace{0};
  // need_count[n]: pending launches whose need is n TPCs; max_need: the
  // largest n with need_count[n] > 0 (0 when nothing is pending).
  std::vector<std::uint32_t> need_count = std::vector<std::uint32_t>(kMaxTpcs + 1, 0);
  int max_need = 0;

  bool has_work() const { return pending_launches > 0 || inflight_atoms > 0; }
  bool is_high() const { return spec.priority == PriorityClass::kHigh; }
  // Largest TPC count any pending launch can use: what an active owner
  // needs of its TPCs in the near future (0 with nothing pending).
  int demand() const { return max_need; }
};

struct InflightAtom {
  bool live = false;
  LaunchId launch = 0;
  QueueId queue = 0;
  TenantId tenant = 0;
  PredictionKey key;
  std::uint64_t blocks = 0;
  int blocks_per_tpc = 1;
  TpcSet tpcs;
  TpcSet stolen;
  bool last = false;
  bool whole = false;    // the launch's only atom
  bool running = false;  // reported running (submit_running)
  // Right-sized launches (size_full > 0): key, what decided, and the TPC
  // count it could have used otherwise.
  SizeKey size_key;
  SizeSource size_source = SizeSource::kFull;
  int size_full = 0;
  Time dispatched{};
  Duration predicted{};           // its predicted run time when dispatched; 0: none
  Time end_base{};                // predicted end minus its queue's shift (EngineState::predicted_end)
  std::uint32_t tenant_slot = 0;  // its index in TenantState::inflight
  // What ran beside it (EngineState::beside_best_effort): whether a
  // best-effort atom was in flight when it was dispatched, and how many
  // best-effort atoms had been dispatched by then.
  bool best_effort_then = false;
  std::uint64_t best_effort_dispatches_then = 0;
};

// Everything the Engine knows. Policies read part of it through a PolicyView
// (policy_view.hpp); the one thing they decide into it, TenantState::owned
// and TenantState::grace, the Engine stores from their answers
// (Policy::on_tenants_changed, on_arrival).
struct EngineState {
  // Clamps config.device.tpcs to 1..kMaxTpcs; predictor and right-sizer
  // take their settings from `config`.
  explicit EngineState(EngineConfig c);

  EngineConfig config;
  TpcSet device_tpcs;  // {0, ..., device.tpcs - 1}
  std::vector<TenantState> tenants;
  std::vector<QueueState> queues;
  std::vector<InflightAtom> atoms;  // slots, indexed by AtomId
  std::vector<AtomId> free_atoms;
  LatencyPredictor predictor;
  RightSizer rightsizer;
  std::vector<SizeTable> size_tables;  // by TenantId: high-priority right-sized tenants' tables

  // Owner of a TPC (kNoTenant if no quota covers it).
  TenantId owner_of(int tpc) const { return owner_[static_cast<std::size_t>(tpc)]; }
  // Every TPC some tenant's quota covers.
  const TpcSet& owned_by_anyone() const { return owned_any_; }
  // Whether tenant `t` counts as active at `now`: work pending or in flight,
  // or drained less than its grace ago.
  bool active(TenantId t, Time now) const;
  // How long `ts` stays active after its work drained (TenantState::grace).
  Duration grace(const TenantState& ts) const { return ts.grace; }
  // When an in-flight atom is predicted to end: as dispatched, moved by the
  // errors of the atoms that ended before it in its queue, never before the
  // queue's last completion.
  Time predicted_end(const InflightAtom& a) const {
    const QueueState& q = queues[static_cast<std::size_t>(a.queue)];
    return std::max(q.floor, a.end_base + q.shift);
  }
  // Predicted duration of `blocks` blocks of `launch` on `tpcs` TPCs.
  std::optional<Duration> predict(const PendingLaunch& launch, std::uint64_t blocks, int tpcs) const;
  // `n` TPCs of `from`, preferring those no other tenant than `t` holds, then
  // the lowest numbers (owners fill their sets from the bottom, lenders lend
  // from the top).
  TpcSet pick(const TpcSet& from, int n, TenantId t) const;
  // TPCs under at least one in-flight atom of tenant `t`.
  TpcSet held(TenantId t) const;
  // TPCs held by in-flight atoms of tenants other than `t`.
  TpcSet held_by_others(TenantId t) const;
  // Whether a best-effort atom was in flight at some time between atom
  // `a`'s dispatch and now: one was then, or one has been dispatched since.
  bool beside_best_effort(const InflightAtom& a) const {
    return a.best_effort_then || best_effort_dispatches != a.best_effort_dispatches_then;
  }
  std::uint32_t best_effort_inflight = 0;    // best-effort atoms in flight
  std::uint64_t best_effort_dispatches = 0;  // best-effort atoms dispatched so far

  std::vector<TenantId> owner_;  // per TPC; maintained by Engine from TenantState::owned
  TpcSet owned_any_;             // the union of every tenant's `owned`; maintained with owner_
};

class Engine {
 public:
  Engine(EngineConfig config, std::unique_ptr<Policy> policy);

  const Policy& policy() const { return *policy_; }
  const EngineState& state() const { return state_; }

  // Registers a tenant. Errors: invalid spec, or the policy rejects the new
  // assignment (e.g. quotas exceed the device); the tenant is then not added.
  Result<TenantId> add_tenant(const TenantSpec& spec);
  Result<QueueId> add_queue(TenantId tenant);

  // Enqueues a launch; it reaches the hardware through dispatch().
  Result<LaunchId> submit(QueueId queue, const LaunchDesc& launch, Time now);
  // Records a launch that is already on the hardware on `tpcs` (a
  // high-priority launch never waits for a decision, nor does a best-effort
  // one while runs_free(), docs/daemon.md): it is
  // accounted as one whole atom from `now`, so that policies see its tenant
  // active and its TPCs held until atom_finished() reports its end. Errors:
  // an unknown or closed queue, an empty grid or block, an empty set.
  Result<AtomDispatch> submit_running(QueueId queue, const LaunchDesc& launch, const TpcSet& tpcs, Time now);
  // Drops a queue whose owner is gone (a process died, a stream was
  // destroyed): its pending launches are discarded and its atoms in flight
  // released as if they had ended at `now` (nothing is learned from them).
  // The queue id may be reused by a later add_queue. Returns the atoms
  // released (their ids are invalid afterwards).
  std::vector<AtomId> close_queue(QueueId queue, Time now);
  // The host synchronised with `queue`: launch ordinals restart at zero.
  void sync(QueueId queue);

  // Where tenant `t`'s launches that never wait for a decision go now
  // (Policy::immediate_set); the empty set for an unknown tenant.
  // `lasting`: for a launch whose set outlives the moment (a CUDA graph).
  TpcSet immediate_set(TenantId t, Time now, bool lasting = false) const;
  // The hardware priority of those launches (Policy::immediate_priority);
  // kNormal for an unknown tenant.
  HwPriority immediate_priority(TenantId t) const;
  // Whether best-effort tenant `t`'s launches need no decision now
  // (Policy::runs_free): lithosd then lets them go out at once on
  // immediate_set, and the throttle does not hold its queues. False for an
  // unknown tenant.
  bool runs_free(TenantId t) const;
  // How high-priority tenant `t`'s BestEffortPause stands, for status
  // output (Policy::pause_report); nullopt for an unknown tenant or where
  // the policy has none for it.
  std::optional<PauseReport> pause_report(TenantId t, Time now) const;

  // Whether tenant `t`'s kernels are right-sized (PolicyTraits::rightsize,
  // TenantSpec::rightsize); false for an unknown tenant.
  bool rightsized(TenantId t) const;
  // A right-sized high-priority tenant's table (nullptr otherwise): what
  // its client applies at launch. submit_running updates it.
  const SizeTable* size_table(TenantId t) const;
  // One high-priority kernel's own duration `ran` on `tpcs` TPCs (the
  // first `tpcs` of its allocation): right-sizing learns from it. Ignored
  // for an unknown or not right-sized tenant.
  void observe_kernel(TenantId t, const LaunchDesc& launch, int tpcs, Duration ran);
  // What right-sizing did for tenant `t` (zeros when nothing).
  const RightSizeStats& rightsize_stats(TenantId t) const { return state_.rightsizer.stats(t); }

  // The online predictor's model as text (LatencyPredictor::save), and
  // loading such text into it (a cache from an earlier run). Errors name
  // the line; a failed load changes nothing.
  std::string save_predictions() const { return state_.predictor.save(); }
  Status load_predictions(std::string_view text) { return state_.predictor.load(text); }

  // Emits every atom that may go to the hardware now into `out` (appended).
  void dispatch(Time now, std::vector<AtomDispatch>& out);
  // The hardware ran atom `id` from `start` to `end`.
  Completion atom_finished(AtomId id, Time start, Time end);

  // One launch of tenant `tenant`'s kernel `key` timed on the GPU on its
  // own (a high-priority launch its client sampled, docs/daemon.md):
  // `blocks` blocks, `blocks_per_tpc` resident per TPC, on `tpcs` TPCs (as
  // atom_finished counts them), for `ran`. The predictor and the right-sizer
  // learn it; from then on a high-priority completion of that key that
  // only shared a burst's busy time teaches them nothing. Unknown tenants
  // are ignored.
  void observe_hp_sample(TenantId tenant, const PredictionKey& key, std::uint64_t blocks, int blocks_per_tpc, int tpcs,
                         Duration ran);
  // The predictor's error over those samples alone (predicted before each
  // was learnt), and their mean duration.
  struct HpSampleStats {
    PredictorStats errors;
    double mean_sample_us = 0.0;
  };
  HpSampleStats hp_sample_stats() const;

  // When dispatch() should run again even if no event arrives (kTimeNever:
  // only after the next event). Valid after a dispatch() call.
  Time next_wakeup() const { return next_wakeup_; }

  struct Counters {
    std::uint64_t launches = 0;
    std::uint64_t atoms = 0;
    std::uint64_t split_launches = 0;
    std::uint64_t stolen_atoms = 0;
    std::uint64_t throttled = 0;  // dispatch visits held back by the throttle
    std::uint64_t widened = 0;    // placements widened by the safe-mask rule (fit_tpcs)
    std::uint64_t deferred = 0;   // best-effort launches held until the whole GPU was free of hp work
  };
  const Counters& counters() const { return counters_; }

 private:
  bool throttled(const QueueState& q, Time now, Duration bound) const;
  // Applies the safe-mask rule (fit_tpcs) to a placement for the head of
  // `q`: widens it, or returns false when a best-effort launch must wait for
  // the whole GPU (an active high-priority tenant holds part of it).
  bool make_safe(const QueueState& q, const PendingLaunch& head, Placement& placement, Time now);
  // `queued`: head is q.pending.front() (popped when its last atom goes out);
  // false for submit_running's launch, which never sat in the queue.
  AtomDispatch carve(QueueState& q, PendingLaunch& head, const Placement& placement, Time now, bool queued = true);
  PendingLaunch make_pending(QueueState& q, const LaunchDesc& launch, Time now);
  void release_atom(AtomId id, Time end);
  double slip_of(const TenantState& t) const;
  // Records an hp execution for tenant `t`'s table and updates its entry.
  void size_running(TenantState& t, PendingLaunch& p, int used, Time now);
  // Right-sizing learns one timed run of `key` on `tpcs` TPCs (`used` of
  // them usable): observe_kernel and observe_hp_sample.
  void learn_size(TenantId t, const SizeKey& key, int tpcs, int used, Duration ran);
  // Asks the policy who owns which TPCs now (Policy::on_tenants_changed)
  // and stores the answer; on failure nothing changes.
  Status assign_owners();
  void refresh_owners();
  // What the policy's hooks read of state_ (policy_view.hpp).
  PolicyView view() const;

  EngineState state_;
  std::unique_ptr<Policy> policy_;
  PolicyTraits traits_;
  AtomConfig preemption_atoms_;  // how preemption pieces are planned
  LaunchId next_launch_ = 1;
  Time next_wakeup_ = kTimeNever;
  Counters counters_;
  std::vector<QueueId> order_;  // scratch for dispatch()
  // Keys (ordinals clamped as the predictor's) with timed samples
  // (observe_hp_sample), and the error over those samples.
  PredictionKey clamp_key(const PredictionKey& k) const;
  std::unordered_set<PredictionKey, PredictionKeyHash> sampled_keys_;
  // The right-sizing key (kernel, grid) of a right-sized hp tenant's last
  // running launch of each predictor key (tenant, kernel, ordinal), so that
  // a timed sample of it (named by its predictor key) teaches the fit too.
  std::map<std::tuple<TenantId, KernelId, std::uint32_t>, SizeKey> sample_size_keys_;
  std::uint64_t sample_predicted_ = 0, sample_misses_ = 0, samples_ = 0;
  double sample_abs_error_ns_ = 0.0, sample_sum_ns_ = 0.0;
  LogHistogram sample_abs_error_hist_;
};

}  // namespace lithos::sched
