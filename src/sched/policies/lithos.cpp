#include "sched/policies/lithos.hpp"

#include <algorithm>

#include "sched/occupancy.hpp"

namespace lithos::sched {

std::string_view LithosPolicy::name() const {
  switch (variant_) {
    case Variant::kFull: return "lithos";
    case Variant::kNoAtoms: return "lithos-no-atoms";
    case Variant::kRightsize: return "lithos-rightsize";
  }
  return "lithos";
}

PolicyTraits LithosPolicy::traits() const {
  return PolicyTraits{
      .throttle = true,
      .throttle_borrowed_only = true,
      .atomize = variant_ != Variant::kNoAtoms,
      .rightsize = variant_ == Variant::kRightsize || config_.rightsize,
      .can_rightsize = true,
  };
}

Status LithosPolicy::on_tenants_changed(const PolicyView& view, std::span<TpcSet> owned) {
  const int device = view.device().tpcs;
  int next = 0;
  for (const TenantState& t : view.tenants()) {
    if (!t.is_high()) {
      if (t.spec.quota != 0) {
        return Status::invalid_argument("best-effort tenant '" + t.spec.name + "' has quota " +
                                        std::to_string(t.spec.quota) +
                                        ": best-effort tenants own no TPCs, they borrow idle ones");
      }
      owned[static_cast<std::size_t>(t.id)] = TpcSet{};
      continue;
    }
    if (next + t.spec.quota > device) {
      return Status::invalid_argument("quotas add up to more than the device's " + std::to_string(device) +
                                      " TPCs (adding tenant '" + t.spec.name + "')");
    }
    owned[static_cast<std::size_t>(t.id)] = TpcSet::range(next, next + t.spec.quota);
    next += t.spec.quota;
  }
  gaps_.resize(view.tenants().size());
  guards_.resize(view.tenants().size());
  for (const TenantState& t : view.tenants()) {
    Guard& g = guards_[static_cast<std::size_t>(t.id)];
    if (g.hold == Duration{0}) g.hold = config_.pause_hold;
  }
  if (!quiet_) quiet_.emplace(view.predictor_config());
  return Status::ok();
}

// A high-priority tenant's work arrives: the gap since it drained joins its
// last kGapSamples, and its burst grace follows them (LithosConfig::burst_gap).
Duration LithosPolicy::on_arrival(const PolicyView& view, TenantId tenant, Time now) {
  const TenantState& t = view.tenant(tenant);
  Gaps& g = gaps_[static_cast<std::size_t>(tenant)];
  const Duration grace = std::max(view.idle_grace(), g.burst_grace);
  if (t.has_work() || !t.is_high() || config_.burst_gap <= Duration{0}) return grace;
  const Duration gap = now - t.idle_since;
  if (t.idle_since.time_since_epoch() < Duration{0} || gap < Duration{0}) return grace;  // never drained yet
  constexpr std::size_t kN = Gaps::kGapSamples;
  g.gaps[static_cast<std::size_t>(g.count % kN)] = gap;
  ++g.count;
  if (g.count < kN / 2) return grace;
  const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(g.count, kN));
  std::size_t short_gaps = 0;
  Duration longest_short{0};
  for (std::size_t i = 0; i < n; ++i) {
    if (g.gaps[i] > config_.burst_gap) continue;
    ++short_gaps;
    longest_short = std::max(longest_short, g.gaps[i]);
  }
  g.burst_grace = 2 * short_gaps > n ? longest_short : Duration{0};
  return std::max(view.idle_grace(), g.burst_grace);
}

Duration LithosPolicy::burst_grace(TenantId tenant) const {
  const auto i = static_cast<std::size_t>(tenant);
  return i < gaps_.size() ? gaps_[i].burst_grace : Duration{0};
}

LithosPolicy::Hold LithosPolicy::holds(const TenantState& tenant, Time now) const {
  switch (tenant.spec.pauses_best_effort) {
    case BestEffortPause::kNever: return Hold::kNone;
    case BestEffortPause::kAlways: return Hold::kWhileActive;
    case BestEffortPause::kAuto: {
      const Guard& g = guards_[static_cast<std::size_t>(tenant.id)];
      if (g.phase == Guard::Phase::kSharing || now >= g.until) return Hold::kNone;
      return g.phase == Guard::Phase::kProbing ? Hold::kAll : Hold::kWhileActive;
    }
  }
  return Hold::kNone;
}

void LithosPolicy::enter(Guard& g, Guard::Phase phase, Time until) {
  g.phase = phase;
  g.until = until;
  g.covered = g.uncovered = g.quiet = 0;
  g.ran_ns = g.quiet_ns = g.busy_ns = 0.0;
  g.window_start = kTimeNever;
  if (phase == Guard::Phase::kProbing) ++g.probes;
  if (phase == Guard::Phase::kPaused) ++g.pauses;
}

void LithosPolicy::on_ran(const PolicyView& view, const InflightAtom& atom, Time start, Time end) {
  const TenantState& t = view.tenant(atom.tenant);
  if (!t.is_high() || t.spec.pauses_best_effort != BestEffortPause::kAuto || !quiet_) return;
  const LithosConfig& cfg = config_;
  Guard& g = guards_[static_cast<std::size_t>(t.id)];
  if (g.phase != Guard::Phase::kSharing && end >= g.until) enter(g, Guard::Phase::kSharing, kTimeNever);

  const Duration ran = std::max(Duration{0}, end - start);
  if (g.phase == Guard::Phase::kSharing) {  // how busy it keeps the GPU: the union of its runs
    if (g.window_start == kTimeNever) g.window_start = start;
    g.busy_ns += static_cast<double>(std::max(Duration{0}, end - std::max(start, g.busy_until)).count());
    g.busy_until = std::max(g.busy_until, end);
  }
  const int used =
      std::max(1, std::min(atom.tpcs.count(), occupancy_tpc_bound(view.device(), atom.blocks, atom.blocks_per_tpc)));
  if (g.phase == Guard::Phase::kPaused) {  // what a pause gives it: every run, best effort beside or not
    if (const auto alone = quiet_->predict(atom.key, atom.blocks, atom.blocks_per_tpc, used);
        alone && alone->count() > 0) {
      ++g.paused_runs;
      g.paused_ran_ns += static_cast<double>(ran.count());
      g.paused_quiet_ns += static_cast<double>(alone->count());
    }
  }
  if (!view.beside_best_effort(atom)) {
    quiet_->observe(atom.key, atom.blocks, atom.blocks_per_tpc, used, ran, PriorityClass::kHigh);
    if (g.phase == Guard::Phase::kProbing && ++g.quiet >= cfg.pause_samples) {
      enter(g, Guard::Phase::kSharing, kTimeNever);
    }
    return;
  }
  // Beside best effort. While paused or probing, only atoms that were on
  // the GPU already run beside it: no window is kept then.
  if (g.phase != Guard::Phase::kSharing) return;
  const std::optional<Duration> alone = quiet_->predict(atom.key, atom.blocks, atom.blocks_per_tpc, used);
  if (!alone || alone->count() <= 0) {
    // At most one probe per pause_hold: a service too rare to show its
    // work inside one probe does not hold best effort back over and over.
    if (++g.uncovered >= cfg.pause_samples && g.uncovered > g.covered && end >= g.next_probe) {
      enter(g, Guard::Phase::kProbing, end + cfg.pause_probe);
      g.next_probe = end + cfg.pause_hold;
    }
    return;
  }
  ++g.covered;
  g.ran_ns += static_cast<double>(ran.count());
  g.quiet_ns += static_cast<double>(alone->count());
  if (g.covered < cfg.pause_samples || g.quiet_ns < static_cast<double>(cfg.pause_work.count())) return;
  g.slowdown = g.ran_ns / g.quiet_ns;
  g.busy = end > g.window_start ? std::min(1.0, g.busy_ns / static_cast<double>((end - g.window_start).count())) : 1.0;
  g.recent[g.verdicts % g.recent.size()] = g.slowdown;
  ++g.verdicts;
  // What the last pause gave: its runs' slowdown against the same quiet
  // model. A pause that left the tenant about as slow (best-effort atoms
  // already on the GPU when its work starts, which no pause holds back)
  // only costs best effort: none again for pause_hold_max.
  const bool measured = g.paused_runs >= cfg.pause_samples && g.paused_quiet_ns > 0.0;
  if (measured) {
    g.paused_slowdown = g.paused_ran_ns / g.paused_quiet_ns;
    g.gain = g.slowdown / g.paused_slowdown;
    g.paused_runs = 0;
    g.paused_ran_ns = g.paused_quiet_ns = 0.0;
  }
  const bool helps = !measured || g.gain > cfg.pause_gain;
  if (measured && !helps) g.no_pause_until = end + cfg.pause_hold_max;
  // A tenant that keeps the GPU busy nearly all the time (a closed loop, a
  // batch job given high priority) leaves best effort no time between its
  // work: pausing for it would stop best effort altogether.
  if (g.slowdown > cfg.pause_slowdown && g.busy <= cfg.pause_busy_max && helps && end >= g.no_pause_until) {
    enter(g, Guard::Phase::kPaused, end + g.hold);
    g.hold = std::min(g.hold + g.hold, cfg.pause_hold_max);
  } else {
    g.hold = cfg.pause_hold;
    enter(g, Guard::Phase::kSharing, kTimeNever);
  }
}

std::optional<PauseReport> LithosPolicy::pause_report(const PolicyView& view, TenantId tenant, Time now) const {
  if (static_cast<std::size_t>(tenant) >= view.tenants().size()) return std::nullopt;
  const TenantState& t = view.tenant(tenant);
  if (!t.is_high() || t.spec.pauses_best_effort == BestEffortPause::kNever) return std::nullopt;
  PauseReport r;
  r.mode = t.spec.pauses_best_effort;
  if (r.mode == BestEffortPause::kAlways) {
    r.phase = "paused";
    return r;
  }
  const Guard& g = guards_[static_cast<std::size_t>(tenant)];
  const bool live = g.phase != Guard::Phase::kSharing && now < g.until;
  r.phase = !live ? "sharing" : g.phase == Guard::Phase::kPaused ? "paused" : "probing";
  r.until = live ? g.until : kTimeNever;
  r.slowdown = g.slowdown;
  r.busy = g.busy;
  r.paused_slowdown = g.paused_slowdown;
  r.gain = g.gain;
  r.recent_count = static_cast<std::size_t>(std::min<std::uint64_t>(g.verdicts, g.recent.size()));
  for (std::size_t i = 0; i < r.recent_count; ++i) {
    r.recent[i] = g.recent[(g.verdicts - r.recent_count + i) % g.recent.size()];
  }
  r.pauses = g.pauses;
  r.probes = g.probes;
  r.verdicts = g.verdicts;
  return r;
}

Placement LithosPolicy::place(const PolicyView& view, const QueueState& queue, const PendingLaunch& head, Time now) {
  const TenantState& t = view.tenant(queue.tenant);
  const DeviceShape& dev = view.device();

  // A service that pauses best-effort work: none starts while it is active
  // (it has work: its completion decides again; or it has just drained and
  // may be back: look again when the grace ends; an automatic pause also
  // ends by itself).
  if (!t.is_high()) {
    for (const TenantState& o : view.tenants()) {
      if (!o.is_high()) continue;
      const Hold hold = holds(o, now);
      if (hold == Hold::kNone) continue;
      if (hold == Hold::kAll) return Placement::wait(guards_[static_cast<std::size_t>(o.id)].until);
      if (!view.active(o.id, now)) continue;
      Time retry = o.has_work() ? kTimeNever : o.idle_since + view.grace(o);
      if (o.spec.pauses_best_effort == BestEffortPause::kAuto) {
        retry = std::min(retry, guards_[static_cast<std::size_t>(o.id)].until);
      }
      return Placement::wait(retry);
    }
  }

  // How many TPCs the rest of this launch can use at all.
  int need = head.usable_tpcs(dev);
  if (head.atoms_dispatched == 0) need = std::min(need, head.need);  // need: the right-sized count, if any

  // A set that lasts: a best-effort CUDA graph launched whole keeps the set
  // its launch descriptors are built with for every later replay, and they
  // are built at this grant (LaunchDesc::whole_device, nothing pinned yet).
  // Borrowed TPCs would stay in it after their owner is back: every later
  // replay would then wait for that owner to be idle, and hold its quota
  // for the whole replay once started (a service at 755x alone beside whole
  // ResNet-50 batch replays). So it gets the TPCs it may keep, its own and
  // those no quota holds, all of them, and borrows only where there are none.
  const TpcSet keep = !t.is_high() && head.desc.whole_device && head.desc.pinned.empty()
                          ? t.owned | (view.device_tpcs() - view.owned_by_anyone())
                          : TpcSet{};

  // Own TPCs first, all of them if the kernel can use them.
  TpcSet chosen = view.pick(t.owned, need, t.id);
  Time retry = kTimeNever;
  TpcSet stolen;
  if (chosen.count() < need) {
    const TpcSet borrow = borrowable(view, t.id, now, &retry);
    TpcSet unowned;
    borrow.for_each([&](int p) {
      if (view.owner_of(p) == kNoTenant) unowned.set(p);
    });
    chosen |= view.pick(unowned, need - chosen.count(), t.id);
    if (chosen.count() < need && keep.empty() && t.stolen_inflight < config_.max_stolen_atoms) {
      stolen = view.pick(borrow - unowned, need - chosen.count(), t.id);
      chosen |= stolen;
    }
  }
  if (chosen.empty()) return Placement::wait(retry);

  Placement p;
  // Once any of it is free, the lasting set whole: what another tenant's
  // atom holds now is free again within an atom, and the graph runs there
  // for every later replay anyway.
  p.tpcs = keep.empty() ? chosen : keep;
  p.stolen = stolen;
  p.priority = t.is_high() && stolen.empty() ? HwPriority::kHigh : HwPriority::kLow;
  return p;
}

TpcSet LithosPolicy::borrowable(const PolicyView& view, TenantId t, Time now, Time* next_change) const {
  TpcSet cand = view.device_tpcs() - view.tenant(t).owned;
  for (const TenantState& o : view.tenants()) {
    if (o.id == t || o.owned.empty()) continue;
    if (!o.has_work()) {
      const Time grace_end = o.idle_since + view.grace(o);
      if (now >= grace_end) continue;  // inactive: everything it owns may be lent
      if (next_change != nullptr) *next_change = std::min(*next_change, grace_end);
      cand -= o.owned;  // just drained: it may be back within microseconds
      continue;
    }
    if (!config_.lend_surplus || o.pending_launches == 0) {
      // Active, and nothing says how much it will want next: keep it all.
      cand -= o.owned;
      continue;
    }
    // Active with work queued: it keeps what its atoms hold plus as many of
    // its lowest TPCs as that work can use; the rest of its quota may be lent.
    cand -= (view.held(o.id) | o.owned.take_lowest(o.demand())) & o.owned;
  }
  // Not under another tenant's in-flight atom that runs past the lookahead
  // (the per-TPC timers: an atom's TPCs are busy until its predicted end),
  // nor under one already past its predicted end: it is still running (its
  // end has not been seen), so it counts as busy for as long again as it
  // was predicted to run, and only then as gone (a marker that never lands
  // must not hold TPCs for ever). Counting an overdue atom as ending at once
  // lent the TPCs under an hp launch that ran longer than predicted, to
  // atoms that then slowed it further.
  // An end that is seen is a completion, which makes the Engine decide again.
  const bool spill_holds = config_.hp_holds_unowned || view.tenant(t).is_high();
  for (const TenantState& o : view.tenants()) {
    if (o.id == t) continue;
    // A service's launch on TPCs no quota holds keeps a best-effort borrower
    // off them only if hp_holds_unowned (its quota is kept off above).
    const bool whole = spill_holds || !o.is_high();
    for (AtomId id : o.inflight) {
      const InflightAtom& a = view.atom(id);
      const TpcSet busy = whole ? a.tpcs : a.tpcs & o.owned;
      if (!busy.intersects(cand)) continue;
      const Time end = view.predicted_end(a);
      Time busy_until = end - config_.steal_lookahead;
      if (end <= now) busy_until = end + std::max(Duration{0}, end - a.dispatched);  // overdue
      if (now >= busy_until) continue;
      cand -= busy;
      if (next_change != nullptr) *next_change = std::min(*next_change, busy_until);
    }
  }
  return cand;
}

HwPriority LithosPolicy::immediate_priority(const PolicyView& view, TenantId tenant) const {
  return view.tenant(tenant).is_high() ? HwPriority::kHigh : HwPriority::kLow;
}

TpcSet LithosPolicy::immediate_set(const PolicyView& view, TenantId tenant, Time now, bool lasting) const {
  const TenantState& me = view.tenant(tenant);
  TpcSet out = view.device_tpcs();
  if (runs_free(view, tenant)) return out;  // no service to protect: the whole GPU
  for (const TenantState& o : view.tenants()) {
    if (o.id != me.id && o.is_high()) out -= o.owned;
  }
  if (!config_.share_unowned && !lasting && !me.owned.empty()) {
    // Its quota, and of the TPCs no one owns those place() would pick for
    // it now: not under another tenant's atom that runs on past the
    // lookahead. (An empty quota keeps every unowned TPC: the set must not
    // be empty, and a tenant with no quota has nothing else to run on.)
    const TpcSet unowned = out - me.owned;
    out = me.owned | (unowned & borrowable(view, tenant, now, nullptr));
  }
  return out.empty() ? me.owned : out;
}

// A best-effort tenant runs free while no high-priority tenant has a queue
// open (no service process has launched yet, or every one has gone): the
// throttle and the grants exist to hand TPCs back to an owner quickly, and
// there is none to hand them to. The first queue a high-priority tenant
// opens ends it; what ran free before is accounted in flight and holds the
// tenant's next atoms behind the throttle until it drains.
bool LithosPolicy::runs_free(const PolicyView& view, TenantId tenant) const {
  if (!config_.runs_free || view.tenant(tenant).is_high()) return false;
  for (const TenantState& o : view.tenants()) {
    if (o.is_high() && !o.queues.empty()) return false;
  }
  return true;
}

}  // namespace lithos::sched
