// The LithOS policy (lithos-design.md, "TPC scheduler"), with the stealing
// rules this project chose where the paper leaves them open:
//
// - Quotas are guarantees: each high-priority tenant owns `quota` TPCs
//   (contiguous, in registration order). Best-effort tenants own none.
// - An owner's atoms may always use all of its own TPCs, at high hardware
//   priority; it takes its TPCs back from borrowers simply by starting there:
//   no new atom of a borrower starts on them while the owner is active, and a
//   borrower's running atom is waited out (atoms keep that wait short).
// - Borrowing: a tenant that needs more than it owns may use TPCs that are
//   unowned or owned by an inactive tenant (no work pending or in flight, and
//   idle longer than idle_grace), and - beyond the paper - the surplus of an
//   active owner: TPCs beyond what its pending work can use at all
//   (occupancy bound or right-sized count) and not under its atoms. A TPC
//   under another tenant's atom predicted to run past the steal lookahead is
//   not taken (per-TPC timers). Atoms on borrowed TPCs run at low hardware
//   priority, and each tenant has at most max_stolen_atoms of them in flight.
// - Each atom gets no more TPCs than its blocks can use.
// - The Engine throttles each queue to ~100 us of predicted work in flight
//   before an atom on borrowed TPCs, so that a borrowed TPC starts its work
//   soon after it was lent (and is given back soon after its owner wakes);
//   a best-effort atom on no one's TPCs may queue behind up to
//   EngineConfig::throttle_unborrowed of work when that is set longer
//   (off by default: on the H100 it fed a trainer with no service, 0.89x
//   at 1 ms, 1.01x at 10 ms vs 0.85x, but beside a service it did not
//   help). The Engine also splits launches into atoms per the atom plan.
#pragma once

#include <optional>
#include <vector>

#include "sched/engine.hpp"
#include "sched/policy.hpp"

namespace lithos::sched {

class LithosPolicy final : public Policy {
 public:
  enum class Variant { kFull, kNoAtoms, kRightsize };
  explicit LithosPolicy(Variant variant) : variant_(variant) {}

  std::string_view name() const override;
  PolicyTraits traits() const override;
  Status on_tenants_changed(EngineState& state) override;
  Placement place(const EngineState& state, const QueueState& queue, const PendingLaunch& head, Time now) override;
  // Its own TPCs and every TPC that no other high-priority tenant owns,
  // whether that owner is active or not: a launch made at once may be a
  // CUDA graph whose mask is fixed for every later replay, so only a set
  // that never reaches into another owner's quota keeps quotas guarantees.
  // (Best-effort work still borrows idle quotas, atom by atom, in place().)
  // With PolicyConfig::share_unowned off, of the TPCs no one owns only
  // those no other tenant's atom holds now, except for a `lasting` set.
  // A best-effort tenant running free: the whole device.
  TpcSet immediate_set(const EngineState& state, TenantId tenant, Time now, bool lasting) const override;
  // High for high-priority tenants (their launches never wait, so hardware
  // priority is what puts their blocks ahead of best-effort blocks queued
  // at the same time), low for best effort running free.
  HwPriority immediate_priority(const EngineState& state, TenantId tenant) const override;
  bool runs_free(const EngineState& state, TenantId tenant) const override;
  // Measures tenants with BestEffortPause::kAuto (see Guard).
  void on_ran(const EngineState& state, const InflightAtom& atom, Time start, Time end) override;
  std::optional<PauseReport> pause_report(const EngineState& state, TenantId tenant, Time now) const override;

 private:
  // BestEffortPause::kAuto for one high-priority tenant. Its runs (atoms
  // reported by atom_finished) with no best-effort atom beside them teach
  // `quiet_` what its work takes alone; those with one are compared with
  // that, in windows (PolicyConfig::pause_*). A window's verdict above
  // pause_slowdown pauses best effort for a hold (unless the tenant's runs
  // covered more than pause_busy_max of the window, or the last pause did
  // not make its runs pause_gain times faster); when the hold ends, best
  // effort runs beside the tenant again until the next verdict (a trial as
  // short as one window). Runs that quiet_ cannot predict (new work, or a
  // tenant that never ran without best effort beside it) start a probe:
  // every best-effort atom held, whether the tenant is active or not, until
  // enough runs with none beside them were seen (or pause_probe passed).
  struct Guard {
    enum class Phase : std::uint8_t { kSharing, kProbing, kPaused };
    Phase phase = Phase::kSharing;
    Time until{};  // end of a probe or pause
    Duration hold{0};
    std::uint32_t covered = 0, uncovered = 0, quiet = 0;  // runs, this window or probe
    double ran_ns = 0.0, quiet_ns = 0.0;                  // of the covered runs
    double slowdown = 0.0;
    Time window_start = kTimeNever;  // its first run this window
    Time next_probe{};               // no probe before this
    Time no_pause_until{};           // no pause before this (the last one did not help)
    std::uint32_t paused_runs = 0;   // runs during the last pause, with a quiet prediction
    double paused_ran_ns = 0.0, paused_quiet_ns = 0.0;
    double paused_slowdown = 0.0;  // of the last pause's runs
    double gain = 0.0;             // slowdown sharing over slowdown paused, at the verdict after a pause
    Time busy_until{};             // the latest end of its runs
    double busy_ns = 0.0;          // the union of its runs this window
    double busy = 0.0;             // share of the last window its runs covered
    std::array<double, PauseReport::kRecent> recent{};  // the latest verdicts, a ring
    std::uint64_t pauses = 0, probes = 0, verdicts = 0;
  };
  // What `tenant`'s BestEffortPause holds back at `now`: nothing; every
  // best-effort atom while the tenant is active (or in its idle grace);
  // every best-effort atom (a probe: so that none is on the GPU when its
  // next work starts, whose run is then measured without best effort).
  enum class Hold : std::uint8_t { kNone, kWhileActive, kAll };
  Hold holds(const TenantState& tenant, Time now) const;
  void enter(Guard& g, Guard::Phase phase, Time until);

  Variant variant_;
  std::vector<Guard> guards_;              // by TenantId
  std::optional<LatencyPredictor> quiet_;  // high-priority runs with no best effort beside them
};

}  // namespace lithos::sched
