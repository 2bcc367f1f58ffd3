// The policy interface: a table of hooks in the spirit of the Linux
// scheduler's sched_class. The Engine (engine.hpp) owns all state and the
// mechanism (queues, in-flight accounting, timers, throttle, atom carving,
// predictor); a Policy only decides. Hooks read the Engine through a
// PolicyView (policy_view.hpp): const, and only what policies use. Every
// hook is called by the Engine on the thread that drives it (the
// simulator's event loop, or lithosd's loop): hooks are never called
// concurrently and must not call back into the Engine.
//
// Policies are ordered by nothing: exactly one is active per Engine. Failure
// rules are stated per hook; the general rule (from sched_ext) is that a
// policy that cannot decide must make the Engine fall back to the behaviour
// of plain hardware sharing, never stall work forever.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

#include "common/status.hpp"
#include "common/time.hpp"
#include "sched/tpc_set.hpp"
#include "sched/types.hpp"

namespace lithos::sched {

class PolicyView;
struct QueueState;
struct PendingLaunch;
struct InflightAtom;

// What the Engine does for a policy, declared once.
struct PolicyTraits {
  bool throttle = false;  // apply the per-queue outstanding-work throttle
  // The throttle holds a best-effort queue's atoms on borrowed TPCs only
  // (Placement::stolen): one on TPCs no one may claim back (no one's) may
  // queue behind up to EngineConfig::throttle_unborrowed of work.
  bool throttle_borrowed_only = false;
  bool atomize = false;    // split launches into atoms per the atom plan
  bool rightsize = false;  // size launches with the right-sizer (need < occupancy bound)
  // Whether a tenant may turn right-sizing on or off for itself
  // (TenantSpec::rightsize); `rightsize` is then the default.
  bool can_rightsize = false;
  // Hardware preemption: the GPU can stop a running kernel at a time-slice
  // boundary (compute preemption) and resume it later. Modelled by cutting
  // launches into pieces of about `preemption_slice` that, unlike atoms,
  // cost nothing extra (AtomDispatch::split stays false).
  bool preempts_at_timeslice = false;
  Duration preemption_slice = ms(2);
};

// A placement decision for the next atom of a queue's head launch.
struct Placement {
  // TPCs the atom may use; empty means "not now". The Engine uses the set
  // as given: shrinking it to what the kernel can use is the policy's call
  // (baselines leave that to the hardware).
  TpcSet tpcs;
  HwPriority priority = HwPriority::kNormal;
  // When waiting: the earliest time at which the answer may change without
  // any other event (an atom finishing, a launch arriving). kTimeNever when
  // only an event can change it.
  Time retry_at = kTimeNever;
  // Set by policies that lend TPCs: the subset of `tpcs` owned by another
  // tenant (bounded by the Engine's stolen-atom accounting).
  TpcSet stolen;

  bool waiting() const { return tpcs.empty(); }
  static Placement wait(Time retry) {
    Placement p;
    p.retry_at = retry;
    return p;
  }
};

// A high-priority tenant's BestEffortPause as the policy applies it now.
struct PauseReport {
  BestEffortPause mode = BestEffortPause::kNever;
  // "sharing" (best effort runs beside it), "paused" (best effort waits
  // while it is active), "probing" (paused for a moment, to measure its
  // work without best effort beside it).
  std::string_view phase = "sharing";
  // kAuto: its work's duration beside best-effort atoms over the same work
  // without them, at the last verdict (0 before the first).
  double slowdown = 0.0;
  // The share of the last verdict's window its work kept the GPU busy.
  double busy = 0.0;
  // The slowdown of its runs during the last pause, and the slowdown
  // sharing over it at the verdict after (0 before the first pause).
  double paused_slowdown = 0.0;
  double gain = 0.0;
  // The slowdowns of the latest verdicts, oldest first (up to kRecent).
  static constexpr std::size_t kRecent = 8;
  std::array<double, kRecent> recent{};
  std::size_t recent_count = 0;
  Time until = kTimeNever;     // end of a pause or probe
  std::uint64_t pauses = 0;    // times a verdict paused best effort
  std::uint64_t probes = 0;    // measurements without best effort
  std::uint64_t verdicts = 0;  // slowdowns measured
};

class Policy {
 public:
  virtual ~Policy() = default;

  // Short stable name, used on the command line and in JSON ("lithos", "mps").
  // Its one-line description lives in policy_catalog().
  virtual std::string_view name() const = 0;
  virtual PolicyTraits traits() const = 0;

  // Called by Engine::add_tenant after the new tenant was appended to
  // view.tenants(). Writes the TPCs every tenant owns (quotas, static
  // partitions) into `owned` (one entry per tenant, by TenantId; it comes
  // holding each tenant's TenantState::owned, the new one's empty), which
  // the Engine then stores: the one place a policy changes Engine state.
  // Failure: return a non-ok Status (e.g. quotas exceed the device); the
  // Engine removes the new tenant again, discards `owned` and returns the
  // Status to the caller, so the previous assignment stays in force.
  virtual Status on_tenants_changed(const PolicyView& view, std::span<TpcSet> owned) = 0;

  // Called by Engine::submit and Engine::submit_running when work of
  // `tenant` arrives, before the Engine counts it (TenantState::has_work()
  // still tells whether it had work before). Returns how long the tenant
  // counts as active after its work next drains (TenantState::grace,
  // EngineState::active). Default: EngineConfig::idle_grace.
  virtual Duration on_arrival(const PolicyView& view, TenantId tenant, Time now);

  // Called by Engine::dispatch before it walks the queues, every time it runs.
  // For time-driven policy state (e.g. time slices). Cannot fail.
  virtual void on_tick(const PolicyView& view, Time now) {
    (void)view;
    (void)now;
  }

  // Service order: Engine::dispatch visits queues with pending work by
  // ascending rank, then by the submit time of their head launch.
  virtual int rank(const PolicyView& view, TenantId tenant) const;

  // Called by Engine::dispatch for the head launch of `queue` when the
  // throttle (if any) lets it send another atom. Returns where the next atom
  // may run, or Placement::wait(). Cannot fail: a policy that cannot decide
  // returns every TPC of the device (plain sharing).
  virtual Placement place(const PolicyView& view, const QueueState& queue, const PendingLaunch& head, Time now) = 0;

  // Where a launch that never waits for a decision may run now: the
  // runtime launches it at once and reports it after (lithosd's
  // high-priority tenants; Engine::submit_running), so the set is published
  // ahead, whenever it changes. Reads the view only. Default: the TPCs the
  // tenant owns, else every TPC of the device. `lasting`: for a launch whose
  // set outlives the moment (a CUDA graph's descriptors keep it for every
  // later replay), so it must not depend on what others run now.
  virtual TpcSet immediate_set(const PolicyView& view, TenantId tenant, Time now, bool lasting) const;
  // The hardware priority those launches go with (the runtime sets it on
  // the launch's stream before it launches: stream priorities reach across
  // MPS clients). Reads the view only. Default: kNormal, the application's own
  // stream priorities, as the baselines run.
  virtual HwPriority immediate_priority(const PolicyView& view, TenantId tenant) const;

  // Whether a best-effort tenant's launches need no decision now, because
  // nothing they could delay exists: the Engine's throttle does not hold its
  // queues, and lithosd lets its launches go out at once on immediate_set,
  // reported after (Engine::submit_running), as a high-priority tenant's.
  // Reads the view only. Default: never (every launch waits for dispatch).
  virtual bool runs_free(const PolicyView& view, TenantId tenant) const;

  // Called after the Engine recorded a dispatched atom / a finished atom.
  virtual void on_dispatch(const PolicyView& view, const InflightAtom& atom, Time now) {
    (void)view;
    (void)atom;
    (void)now;
  }
  virtual void on_finish(const PolicyView& view, const InflightAtom& atom, Time now) {
    (void)view;
    (void)atom;
    (void)now;
  }
  // Called by Engine::atom_finished before on_finish: the hardware ran the
  // atom from `start` to `end` (an atom released unrun, by close_queue,
  // gets on_finish only).
  virtual void on_ran(const PolicyView& view, const InflightAtom& atom, Time start, Time end) {
    (void)view;
    (void)atom;
    (void)start;
    (void)end;
  }

  // How a high-priority tenant's BestEffortPause stands, for status
  // output; nullopt where the policy has none for it.
  virtual std::optional<PauseReport> pause_report(const PolicyView& view, TenantId tenant, Time now) const {
    (void)view;
    (void)tenant;
    (void)now;
    return std::nullopt;
  }
};

}  // namespace lithos::sched
