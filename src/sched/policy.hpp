// The policy interface: a table of hooks in the spirit of the Linux
// scheduler's sched_class. The Engine (engine.hpp) owns all state and the
// mechanism (queues, in-flight accounting, timers, throttle, atom carving,
// predictor); a Policy only decides. Every hook is called by the Engine on
// the thread that drives it (the simulator's event loop, or the runtime's
// dispatcher under its lock): hooks are never called concurrently and must
// not call back into the Engine.
//
// Policies are ordered by nothing: exactly one is active per Engine. Failure
// rules are stated per hook; the general rule (from sched_ext) is that a
// policy that cannot decide must make the Engine fall back to the behaviour
// of plain hardware sharing, never stall work forever.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.hpp"
#include "common/time.hpp"
#include "sched/tpc_set.hpp"
#include "sched/types.hpp"

namespace lithos::sched {

struct EngineState;
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
  // Hardware preemption: the GPU can stop a running kernel at a time-slice
  // boundary (compute preemption) and resume it later. Modelled by cutting
  // launches into pieces of about PolicyConfig::timeslice that, unlike atoms,
  // cost nothing extra (AtomDispatch::split stays false).
  bool preempts_at_timeslice = false;
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
  // state.tenants. Sets TenantState::owned for every tenant (quotas, static
  // partitions). Failure: return a non-ok Status (e.g. quotas exceed the
  // device); the Engine removes the new tenant again and returns the Status
  // to the caller, so the previous assignment stays in force.
  virtual Status on_tenants_changed(EngineState& state) = 0;

  // Called by Engine::dispatch before it walks the queues, every time it runs.
  // For time-driven policy state (e.g. time slices). Cannot fail.
  virtual void on_tick(const EngineState& state, Time now) {
    (void)state;
    (void)now;
  }

  // Service order: Engine::dispatch visits queues with pending work by
  // ascending rank, then by the submit time of their head launch.
  virtual int rank(const EngineState& state, TenantId tenant) const;

  // Called by Engine::dispatch for the head launch of `queue` when the
  // throttle (if any) lets it send another atom. Returns where the next atom
  // may run, or Placement::wait(). Cannot fail: a policy that cannot decide
  // returns every TPC of the device (plain sharing).
  virtual Placement place(const EngineState& state, const QueueState& queue, const PendingLaunch& head, Time now) = 0;

  // Where a launch that never waits for a decision may run now: the
  // runtime launches it at once and reports it after (lithosd's
  // high-priority tenants; Engine::submit_running), so the set is published
  // ahead, whenever it changes. Reads state only. Default: the TPCs the
  // tenant owns, else every TPC of the device. `lasting`: for a launch whose
  // set outlives the moment (a CUDA graph's descriptors keep it for every
  // later replay), so it must not depend on what others run now.
  virtual TpcSet immediate_set(const EngineState& state, TenantId tenant, Time now, bool lasting) const;
  // The hardware priority those launches go with (the runtime sets it on
  // the launch's stream before it launches: stream priorities reach across
  // MPS clients). Reads state only. Default: kNormal, the application's own
  // stream priorities, as the baselines run.
  virtual HwPriority immediate_priority(const EngineState& state, TenantId tenant) const;

  // Whether a best-effort tenant's launches need no decision now, because
  // nothing they could delay exists: the Engine's throttle does not hold its
  // queues, and lithosd lets its launches go out at once on immediate_set,
  // reported after (Engine::submit_running), as a high-priority tenant's.
  // Reads state only. Default: never (every launch waits for dispatch).
  virtual bool runs_free(const EngineState& state, TenantId tenant) const;

  // Called after the Engine recorded a dispatched atom / a finished atom.
  virtual void on_dispatch(const EngineState& state, const InflightAtom& atom, Time now) {
    (void)state;
    (void)atom;
    (void)now;
  }
  virtual void on_finish(const EngineState& state, const InflightAtom& atom, Time now) {
    (void)state;
    (void)atom;
    (void)now;
  }
  // Called by Engine::atom_finished before on_finish: the hardware ran the
  // atom from `start` to `end` (an atom released unrun, by close_queue,
  // gets on_finish only).
  virtual void on_ran(const EngineState& state, const InflightAtom& atom, Time start, Time end) {
    (void)state;
    (void)atom;
    (void)start;
    (void)end;
  }

  // How a high-priority tenant's BestEffortPause stands, for status
  // output; nullopt where the policy has none for it.
  virtual std::optional<PauseReport> pause_report(const EngineState& state, TenantId tenant, Time now) const {
    (void)state;
    (void)tenant;
    (void)now;
    return std::nullopt;
  }
};

// Policy settings; policies read them from EngineState::config.policy.
struct PolicyConfig {
  Duration timeslice = ms(2);        // time-slicing: length of one slice
  Duration context_switch = us(25);  // time-slicing: cost of a switch
  // lithos: in-flight atoms on borrowed TPCs, per tenant. The throttle
  // already bounds the predicted work in flight (so how long an owner's
  // return can wait); this count bounds it where atoms are short or
  // mispredicted. 16 (2 until 2026-11-26): with 2, a trainer's short
  // kernels (graph nodes, 10-40 us) past the second ran on the TPCs no
  // one owns only, even with every owner idle (docs/daemon.md).
  std::uint32_t max_stolen_atoms = 16;
  Duration steal_lookahead = us(100);  // lithos: a TPC freeing within this counts as free
  Duration idle_grace = us(20);        // lithos: an owner stays active this long after its work drained
  // lithos: a high-priority tenant most of whose recent idle gaps (from its
  // work draining to its next launch; the last 32) are at most burst_gap
  // is an eager one, whose kernels leave the GPU idle between them inside a
  // request: it stays active after it drains for the longest of those short
  // gaps (so at most burst_gap), where that is longer than idle_grace.
  // Otherwise each of those gaps lends its TPCs, and its next kernel waits
  // for the atoms that borrowed them. Its gaps between requests, longer,
  // stay lent after idle_grace. 0 (the default): off. Measured on the H100
  // (docs/results/2026-11-27-h100-f85230d-eager-gaps): on an eager GRU
  // service beside ViT training no change beyond the runs' spread at 150 or
  // 300 us, and on module-example training 0.574x -> 0.451x with the
  // service unchanged, so it stays off.
  Duration burst_gap{0};
  bool lend_surplus = true;  // lithos: lend an active owner's TPCs beyond its peak demand
  bool runs_free = true;     // lithos: best effort runs free while no high-priority tenant has a queue
  // lithos: where launches that never wait (immediate_set; lithosd's
  // high-priority tenants) may run besides their own quota. true: every TPC
  // no one owns, also under another tenant's atom (the two share those
  // SMs); false: only unowned TPCs free of other tenants' atoms (past
  // steal_lookahead), as place() picks them for a queued launch, so that an
  // atom and a service never share an SM.
  bool share_unowned = true;
  // lithos: whether a high-priority launch running on TPCs no quota holds
  // keeps new best-effort atoms off them until its predicted end (true), or
  // only shares them (false: best-effort atoms are placed on them as if it
  // were not there, so a best-effort tenant keeps the TPCs no one owns
  // while a service spills onto them).
  bool hp_holds_unowned = true;
  // lithos, tenants with BestEffortPause::kAuto: best effort pauses while
  // the tenant's work beside best-effort atoms takes more than this many
  // times as long as the same work without them. Verdicts come from windows
  // of at least pause_samples such runs and pause_work of predicted work; a
  // pause lasts pause_hold, twice as long after each verdict that confirms
  // it, up to pause_hold_max, and a pause is tried again only if the last
  // one made the tenant's runs pause_gain times faster (else none for
  // pause_hold_max); a probe (the work without best effort beside
  // it, when the tenant's recent work has no such measurement; at most one
  // per pause_hold) lasts until pause_samples runs or pause_probe.
  // Short windows: every run of a trial beside best effort that slows the
  // service is a slow request, and a P99 has room for few. 1.15x: on the
  // H100, module-example's verdicts were 1.26-1.59x (its P99 3.9x alone
  // when not paused), hybrid-stacking's 1.05-1.15x
  // (docs/results/2026-11-26-h100-7d0f83e-auto-pause).
  double pause_slowdown = 1.15;
  // No pause for a tenant whose work covered more than this share of the
  // verdict's window: best effort would get no time at all.
  double pause_busy_max = 0.9;
  // A pause is tried again only if the last one made the tenant's runs this
  // many times faster on average (its tail gains more: on the H100,
  // module-example's runs were 1.15x faster paused and its P99 2-3x).
  double pause_gain = 1.05;
  std::uint32_t pause_samples = 8;
  Duration pause_work = ms(5);
  Duration pause_hold = ms(250);
  Duration pause_hold_max = ms(80000);
  Duration pause_probe = ms(200);
};

struct PolicyInfo {
  std::string name;
  std::string description;
  bool in_all = true;  // part of `--policy all` (ablations are not)
};

// Every built-in policy, in the order reports list them.
std::vector<PolicyInfo> policy_catalog();
// nullptr with a message listing valid names in *error when `name` is unknown.
std::unique_ptr<Policy> make_policy(std::string_view name, std::string* error);

}  // namespace lithos::sched
