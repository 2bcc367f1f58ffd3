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
//   (off by default). The Engine also splits launches into atoms per the
//   atom plan.
#pragma once

#include <array>
#include <optional>
#include <span>
#include <vector>

#include "sched/policy.hpp"
#include "sched/policy_view.hpp"

namespace lithos::sched {

// The lithos policy's settings.
struct LithosConfig {
  // In-flight atoms on borrowed TPCs, per tenant. The throttle already
  // bounds the predicted work in flight (so how long an owner's return can
  // wait); this count bounds it where atoms are short or mispredicted.
  std::uint32_t max_stolen_atoms = 16;
  Duration steal_lookahead = us(100);  // a TPC freeing within this counts as free
  // A high-priority tenant most of whose recent idle gaps (from its work
  // draining to its next launch; the last 32) are at most burst_gap is an
  // eager one, whose kernels leave the GPU idle between them inside a
  // request: it stays active after it drains for the longest of those short
  // gaps (so at most burst_gap), where that is longer than
  // EngineConfig::idle_grace. Otherwise each of those gaps lends its TPCs,
  // and its next kernel waits for the atoms that borrowed them. Its gaps
  // between requests, longer, stay lent after idle_grace. 0: off.
  Duration burst_gap{0};
  bool lend_surplus = true;  // lend an active owner's TPCs beyond its peak demand
  // Right-sizing (rightsize.hpp) for every tenant that does not set its own
  // (TenantSpec::rightsize); the lithos-rightsize policy has it on.
  bool rightsize = false;
  bool runs_free = true;  // best effort runs free while no high-priority tenant has a queue
  // Where launches that never wait (immediate_set; lithosd's high-priority
  // tenants) may run besides their own quota. true: every TPC no one owns,
  // also under another tenant's atom (the two share those SMs); false: only
  // unowned TPCs free of other tenants' atoms (past steal_lookahead), as
  // place() picks them for a queued launch, so that an atom and a service
  // never share an SM.
  bool share_unowned = true;
  // Whether a high-priority launch running on TPCs no quota holds keeps new
  // best-effort atoms off them until its predicted end (true), or only
  // shares them (false: best-effort atoms are placed on them as if it were
  // not there, so a best-effort tenant keeps the TPCs no one owns while a
  // service spills onto them).
  bool hp_holds_unowned = true;
  // Tenants with BestEffortPause::kAuto: best effort pauses while the
  // tenant's work beside best-effort atoms takes more than this many times
  // as long as the same work without them. Verdicts come from windows of at
  // least pause_samples such runs and pause_work of predicted work; a pause
  // lasts pause_hold, twice as long after each verdict that confirms it, up
  // to pause_hold_max, and a pause is tried again only if the last one made
  // the tenant's runs pause_gain times faster (else none for
  // pause_hold_max); a probe (the work without best effort beside it, when
  // the tenant's recent work has no such measurement; at most one per
  // pause_hold) lasts until pause_samples runs or pause_probe. Short
  // windows: every run of a trial beside best effort that slows the service
  // is a slow request, and a P99 has room for few.
  double pause_slowdown = 1.15;
  // No pause for a tenant whose work covered more than this share of the
  // verdict's window: best effort would get no time at all.
  double pause_busy_max = 0.9;
  // A pause is tried again only if the last one made the tenant's runs this
  // many times faster on average.
  double pause_gain = 1.05;
  std::uint32_t pause_samples = 8;
  Duration pause_work = ms(5);
  Duration pause_hold = ms(250);
  Duration pause_hold_max = ms(80000);
  Duration pause_probe = ms(200);
};

class LithosPolicy final : public Policy {
 public:
  enum class Variant { kFull, kNoAtoms, kRightsize };
  LithosPolicy(Variant variant, const LithosConfig& config) : variant_(variant), config_(config) {}

  const LithosConfig& config() const { return config_; }
  std::string_view name() const override;
  PolicyTraits traits() const override;
  Status on_tenants_changed(const PolicyView& view, std::span<TpcSet> owned) override;
  // An eager high-priority tenant's burst grace (LithosConfig::burst_gap).
  Duration on_arrival(const PolicyView& view, TenantId tenant, Time now) override;
  Placement place(const PolicyView& view, const QueueState& queue, const PendingLaunch& head, Time now) override;
  // Its own TPCs and every TPC that no other high-priority tenant owns,
  // whether that owner is active or not: a launch made at once may be a
  // CUDA graph whose mask is fixed for every later replay, so only a set
  // that never reaches into another owner's quota keeps quotas guarantees.
  // (Best-effort work still borrows idle quotas, atom by atom, in place().)
  // With LithosConfig::share_unowned off, of the TPCs no one owns only
  // those no other tenant's atom holds now, except for a `lasting` set.
  // A best-effort tenant running free: the whole device.
  TpcSet immediate_set(const PolicyView& view, TenantId tenant, Time now, bool lasting) const override;
  // High for high-priority tenants (their launches never wait, so hardware
  // priority is what puts their blocks ahead of best-effort blocks queued
  // at the same time), low for best effort running free.
  HwPriority immediate_priority(const PolicyView& view, TenantId tenant) const override;
  bool runs_free(const PolicyView& view, TenantId tenant) const override;
  // Measures tenants with BestEffortPause::kAuto (see Guard).
  void on_ran(const PolicyView& view, const InflightAtom& atom, Time start, Time end) override;
  std::optional<PauseReport> pause_report(const PolicyView& view, TenantId tenant, Time now) const override;
  // The burst grace `tenant` has now (0: none, or not an eager tenant).
  Duration burst_grace(TenantId tenant) const;

 private:
  // TPCs that tenant `t` may borrow at `now` (not its own): unowned or owned
  // by an inactive tenant, not under another tenant's in-flight atom that
  // runs past now + steal_lookahead. Also returns the earliest time at which
  // a TPC excluded only by time would become eligible.
  TpcSet borrowable(const PolicyView& view, TenantId t, Time now, Time* next_change) const;

  // A high-priority tenant's last kGapSamples idle gaps (idle_since to its
  // next arrival; a ring, `count` recorded in all) and the grace it gets
  // from them as an eager tenant: the longest short gap.
  struct Gaps {
    static constexpr std::size_t kGapSamples = 32;
    std::array<Duration, kGapSamples> gaps{};
    std::uint64_t count = 0;
    Duration burst_grace{0};
  };

  // BestEffortPause::kAuto for one high-priority tenant. Its runs (atoms
  // reported by atom_finished) with no best-effort atom beside them teach
  // `quiet_` what its work takes alone; those with one are compared with
  // that, in windows (LithosConfig::pause_*). A window's verdict above
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
  LithosConfig config_;
  std::vector<Gaps> gaps_;                 // by TenantId
  std::vector<Guard> guards_;              // by TenantId
  std::optional<LatencyPredictor> quiet_;  // high-priority runs with no best effort beside them
};

}  // namespace lithos::sched
