#include "sched/engine.hpp"

#include <algorithm>
#include <cmath>

#include "sched/occupancy.hpp"
#include "sched/policy_view.hpp"

namespace lithos::sched {

namespace {

std::size_t idx(int tpc) { return static_cast<std::size_t>(tpc); }
std::size_t idx(TenantId t) { return static_cast<std::size_t>(t); }

}  // namespace

// ---------------------------------------------------------------------------
// TenantState / EngineState

bool EngineState::active(TenantId t, Time now) const {
  const TenantState& ts = tenants[idx(t)];
  return ts.has_work() || now < ts.idle_since + grace(ts);
}

TpcSet EngineState::held(TenantId t) const {
  TpcSet out;
  for (AtomId a : tenants[idx(t)].inflight) out |= atoms[a].tpcs;
  return out;
}

TpcSet EngineState::held_by_others(TenantId t) const {
  TpcSet out;
  for (const TenantState& o : tenants) {
    if (o.id != t) out |= held(o.id);
  }
  return out;
}

std::optional<Duration> EngineState::predict(const PendingLaunch& launch, std::uint64_t blocks, int tpcs) const {
  if (launch.desc.duration_hint) {
    const auto full = static_cast<double>(waves(launch.plan.total_blocks, launch.blocks_per_tpc, config.device.tpcs));
    const auto here = static_cast<double>(waves(blocks, launch.blocks_per_tpc, tpcs));
    return Duration(static_cast<std::int64_t>(static_cast<double>(launch.desc.duration_hint->count()) * here / full));
  }
  return predictor.predict(launch.key, blocks, launch.blocks_per_tpc, tpcs);
}

TpcSet EngineState::pick(const TpcSet& from, int n, TenantId t) const {
  if (n >= from.count()) return from;
  const TpcSet others = held_by_others(t);
  TpcSet out = (from - others).take_lowest(n);
  const int missing = n - out.count();
  if (missing > 0) out |= (from & others).take_lowest(missing);
  return out;
}

// ---------------------------------------------------------------------------
// Engine

EngineState::EngineState(EngineConfig c)
    : config(std::move(c)), predictor(config.predictor), rightsizer(config.rightsize), owner_(kMaxTpcs, kNoTenant) {
  config.device.tpcs = std::clamp(config.device.tpcs, 1, kMaxTpcs);
  device_tpcs = TpcSet::first(config.device.tpcs);
}

PolicyView Engine::view() const { return PolicyView(state_); }

Engine::Engine(EngineConfig config, std::unique_ptr<Policy> policy)
    : state_(std::move(config)), policy_(std::move(policy)), traits_(policy_->traits()) {
  preemption_atoms_.target = traits_.preemption_slice;
  preemption_atoms_.per_atom_cost = Duration{0};
  preemption_atoms_.tolerated_overhead = 1.0;
}

Result<TenantId> Engine::add_tenant(const TenantSpec& spec) {
  if (spec.name.empty()) return Status::invalid_argument("a tenant needs a name");
  for (const TenantState& t : state_.tenants) {
    if (t.spec.name == spec.name) return Status::invalid_argument("tenant '" + spec.name + "' exists already");
  }
  if (spec.quota < 0 || spec.quota > state_.config.device.tpcs) {
    return Status::out_of_range("tenant '" + spec.name + "': quota " + std::to_string(spec.quota) + " outside 0-" +
                                std::to_string(state_.config.device.tpcs));
  }
  TenantState t;
  t.id = static_cast<TenantId>(state_.tenants.size());
  t.spec = spec;
  // Idle since long ago: a tenant that never had work is not "just drained".
  t.idle_since = Time(Duration(INT64_MIN / 2));
  t.grace = state_.config.idle_grace;
  state_.tenants.push_back(std::move(t));
  Status s = assign_owners();
  if (!s.is_ok()) {
    state_.tenants.pop_back();
    // Restore the previous assignment (cannot fail: it was accepted before).
    if (!state_.tenants.empty()) (void)assign_owners();
    return s;
  }
  return state_.tenants.back().id;
}

Status Engine::assign_owners() {
  std::vector<TpcSet> owned;
  owned.reserve(state_.tenants.size());
  for (const TenantState& t : state_.tenants) owned.push_back(t.owned);
  LITHOS_RETURN_IF_ERROR(policy_->on_tenants_changed(view(), owned));
  for (TenantState& t : state_.tenants) t.owned = owned[idx(t.id)];
  refresh_owners();
  return Status::ok();
}

void Engine::refresh_owners() {
  std::fill(state_.owner_.begin(), state_.owner_.end(), kNoTenant);
  state_.owned_any_ = {};
  for (const TenantState& t : state_.tenants) {
    t.owned.for_each([&](int p) { state_.owner_[idx(p)] = t.id; });
    state_.owned_any_ |= t.owned;
  }
}

Result<QueueId> Engine::add_queue(TenantId tenant) {
  if (tenant >= state_.tenants.size()) return Status::not_found("no tenant " + std::to_string(tenant));
  for (QueueState& old : state_.queues) {
    if (!old.closed) continue;
    const QueueId id = old.id;
    old = QueueState{};
    old.id = id;
    old.tenant = tenant;
    state_.tenants[idx(tenant)].queues.push_back(id);
    return id;
  }
  QueueState q;
  q.id = static_cast<QueueId>(state_.queues.size());
  q.tenant = tenant;
  state_.queues.push_back(std::move(q));
  state_.tenants[idx(tenant)].queues.push_back(state_.queues.back().id);
  return state_.queues.back().id;
}

int PendingLaunch::usable_tpcs(const DeviceShape& dev) const {
  return desc.whole_device ? dev.tpcs : occupancy_tpc_bound(dev, remaining_blocks(), blocks_per_tpc);
}

PendingLaunch Engine::make_pending(QueueState& q, const LaunchDesc& launch, Time now) {
  const DeviceShape& dev = state_.config.device;
  PendingLaunch p;
  p.id = next_launch_++;
  p.desc = launch;
  p.submitted = now;
  p.key = PredictionKey{launch.kernel, q.ordinal++};
  p.size_key = SizeKey{launch.kernel, launch.grid};
  p.blocks_per_tpc = blocks_per_tpc(dev, launch);
  p.plan.total_blocks = launch.grid.count();
  p.predicted_full = state_.predict(p, p.plan.total_blocks, dev.tpcs);
  return p;
}

Result<LaunchId> Engine::submit(QueueId queue, const LaunchDesc& launch, Time now) {
  if (queue >= state_.queues.size() || state_.queues[queue].closed) {
    return Status::not_found("no queue " + std::to_string(queue));
  }
  if (launch.grid.count() == 0 || launch.block.count() == 0) {
    return Status::invalid_argument("launch with an empty grid or block");
  }
  QueueState& q = state_.queues[queue];
  TenantState& t = state_.tenants[idx(q.tenant)];
  const DeviceShape& dev = state_.config.device;

  PendingLaunch p = make_pending(q, launch, now);
  if (traits_.atomize) {
    p.plan = plan_atoms(state_.config.atoms, launch, p.predicted_full);
  } else if (traits_.preempts_at_timeslice) {
    p.plan = plan_atoms(preemption_atoms_, launch, p.predicted_full);
  } else {
    p.plan = AtomPlan{.count = 1,
                      .total_blocks = launch.grid.count(),
                      .unit = 1,
                      .atom_duration = Duration{},
                      .reason = AtomReason::kDisabled};
  }
  p.need = p.usable_tpcs(dev);
  p.safe = needs_of(launch, blocks_per_sm(dev, launch));
  if (!p.plan.split() && !launch.whole_device && launch.pinned.empty() && rightsized(t.id)) {
    // What it could use otherwise is its occupancy bound (an atom never
    // gets more): only the fit can size it below that.
    const SizeChoice c = state_.rightsizer.choose(t.id, p.size_key, p.need, p.need, slip_of(t));
    p.size_full = p.need;
    p.size_source = c.source;
    p.need = c.tpcs;
  }
  t.grace = policy_->on_arrival(view(), t.id, now);
  ++t.need_count[static_cast<std::size_t>(p.need)];
  t.max_need = std::max(t.max_need, p.need);
  ++t.pending_launches;
  ++counters_.launches;
  if (p.plan.split()) ++counters_.split_launches;
  const LaunchId id = p.id;
  q.pending.push_back(p);
  return id;
}

Result<AtomDispatch> Engine::submit_running(QueueId queue, const LaunchDesc& launch, const TpcSet& tpcs, Time now) {
  if (queue >= state_.queues.size() || state_.queues[queue].closed) {
    return Status::not_found("no queue " + std::to_string(queue));
  }
  if (launch.grid.count() == 0 || launch.block.count() == 0) {
    return Status::invalid_argument("launch with an empty grid or block");
  }
  if (tpcs.empty()) return Status::invalid_argument("a launch on no TPC");
  QueueState& q = state_.queues[queue];
  TenantState& t = state_.tenants[idx(q.tenant)];
  PendingLaunch p = make_pending(q, launch, now);
  p.plan = AtomPlan{.count = 1,
                    .total_blocks = launch.grid.count(),
                    .unit = 1,
                    .atom_duration = Duration{},
                    .reason = AtomReason::kDisabled};
  p.need = occupancy_tpc_bound(state_.config.device, p.plan.total_blocks, p.blocks_per_tpc);
  if (t.is_high() && !launch.whole_device && launch.pinned.empty() && rightsized(t.id)) {
    size_running(t, p, tpcs.count(), now);
    const PredictionKey k = clamp_key(p.key);
    sample_size_keys_[{t.id, k.kernel, k.ordinal}] = p.size_key;
  }
  t.grace = policy_->on_arrival(view(), t.id, now);
  ++t.need_count[static_cast<std::size_t>(p.need)];
  t.max_need = std::max(t.max_need, p.need);
  ++t.pending_launches;
  ++counters_.launches;
  Placement placement;
  placement.tpcs = tpcs;
  placement.priority = policy_->immediate_priority(view(), q.tenant);
  return carve(q, p, placement, now, /*queued=*/false);
}

const SizeTable::Entry* SizeTable::find(const SizeKey& key) const {
  const auto it = index.find(key);
  return it == index.end() ? nullptr : &entries[it->second];
}

bool Engine::rightsized(TenantId t) const {
  if (static_cast<std::size_t>(t) >= state_.tenants.size() || !traits_.can_rightsize) return false;
  return state_.tenants[idx(t)].spec.rightsize.value_or(traits_.rightsize);
}

double Engine::slip_of(const TenantState& t) const {
  return t.spec.rightsize_slip.value_or(state_.config.rightsize.slip);
}

const SizeTable* Engine::size_table(TenantId t) const {
  if (!rightsized(t) || !state_.tenants[idx(t)].is_high()) return nullptr;
  static const SizeTable kEmpty;
  return static_cast<std::size_t>(t) < state_.size_tables.size() ? &state_.size_tables[idx(t)] : &kEmpty;
}

// The launch ran on `used` TPCs of an allocation of `full` (the tenant's
// immediate set now): what decided that is its table entry, if the entry
// says `used`. Then the key's next choice goes into the table, for the
// launches after it (a probe stays there until the key's next report).
void Engine::size_running(TenantState& t, PendingLaunch& p, int used, Time now) {
  const int full = std::max(immediate_set(t.id, now).count(), used);
  if (state_.size_tables.size() <= idx(t.id)) state_.size_tables.resize(idx(t.id) + 1);
  SizeTable& table = state_.size_tables[idx(t.id)];
  const SizeTable::Entry* e = table.find(p.size_key);
  p.size_full = full;
  p.size_source = e != nullptr && e->tpcs == used && used < full ? e->source : SizeSource::kFull;
  const SizeChoice c = state_.rightsizer.choose(t.id, p.size_key, full, p.need, slip_of(t));
  const int tpcs = c.tpcs >= full ? 0 : c.tpcs;
  if (e == nullptr) {
    if (tpcs == 0 || table.entries.size() >= SizeTable::kMaxEntries) return;
    table.index.emplace(p.size_key, table.entries.size());
    table.entries.push_back({p.size_key, tpcs, c.source});
    ++table.generation;
    return;
  }
  SizeTable::Entry& w = table.entries[table.index.at(p.size_key)];
  if (w.tpcs == tpcs && w.source == c.source) return;
  w.tpcs = tpcs;
  w.source = c.source;
  ++table.generation;
}

void Engine::observe_kernel(TenantId t, const LaunchDesc& launch, int tpcs, Duration ran) {
  if (!rightsized(t) || launch.grid.count() == 0 || launch.block.count() == 0) return;
  const DeviceShape& dev = state_.config.device;
  const SizeKey key{launch.kernel, launch.grid};
  const int used =
      std::min(std::max(tpcs, 1), occupancy_tpc_bound(dev, launch.grid.count(), blocks_per_tpc(dev, launch)));
  learn_size(t, key, tpcs, used, ran);
}

void Engine::learn_size(TenantId t, const SizeKey& key, int tpcs, int used, Duration ran) {
  const SizeTable* table = size_table(t);
  const SizeTable::Entry* e = table != nullptr ? table->find(key) : nullptr;
  const SizeSource source = e != nullptr && e->tpcs == tpcs ? e->source : SizeSource::kFull;
  state_.rightsizer.observe(t, key, state_.config.device.tpcs, tpcs, used, source, ran, /*account=*/false,
                            /*timed=*/true);
}

std::vector<AtomId> Engine::close_queue(QueueId queue, Time now) {
  std::vector<AtomId> released;
  if (queue >= state_.queues.size() || state_.queues[queue].closed) return released;
  QueueState& q = state_.queues[queue];
  TenantState& t = state_.tenants[idx(q.tenant)];
  while (!q.pending.empty()) {
    const PendingLaunch& p = q.pending.front();
    if (--t.need_count[static_cast<std::size_t>(p.need)] == 0 && p.need == t.max_need) {
      while (t.max_need > 0 && t.need_count[static_cast<std::size_t>(t.max_need)] == 0) --t.max_need;
    }
    --t.pending_launches;
    q.pending.pop_front();
  }
  for (std::size_t i = t.inflight.size(); i-- > 0;) {
    const AtomId a = t.inflight[i];
    if (state_.atoms[a].queue != queue) continue;
    released.push_back(a);
    release_atom(a, now);
  }
  std::erase(t.queues, queue);
  q.closed = true;
  q.inflight_atoms = 0;
  if (!t.has_work()) t.idle_since = now;
  return released;
}

void Engine::sync(QueueId queue) {
  if (queue < state_.queues.size()) state_.queues[queue].ordinal = 0;
}

TpcSet Engine::immediate_set(TenantId t, Time now, bool lasting) const {
  if (static_cast<std::size_t>(t) >= state_.tenants.size()) return TpcSet{};
  return policy_->immediate_set(view(), t, now, lasting) & state_.device_tpcs;
}

HwPriority Engine::immediate_priority(TenantId t) const {
  if (static_cast<std::size_t>(t) >= state_.tenants.size()) return HwPriority::kNormal;
  return policy_->immediate_priority(view(), t);
}

bool Engine::runs_free(TenantId t) const {
  if (static_cast<std::size_t>(t) >= state_.tenants.size()) return false;
  return policy_->runs_free(view(), t);
}

std::optional<PauseReport> Engine::pause_report(TenantId t, Time now) const {
  if (static_cast<std::size_t>(t) >= state_.tenants.size()) return std::nullopt;
  return policy_->pause_report(view(), t, now);
}

bool Engine::throttled(const QueueState& q, Time now, Duration bound) const {
  if (!traits_.throttle || q.inflight_atoms == 0) return false;
  if (policy_->runs_free(view(), q.tenant)) return false;
  return q.tail_end - now > bound;
}

void Engine::dispatch(Time now, std::vector<AtomDispatch>& out) {
  next_wakeup_ = kTimeNever;
  policy_->on_tick(view(), now);

  order_.clear();
  for (const QueueState& q : state_.queues) {
    if (!q.closed && !q.pending.empty()) order_.push_back(q.id);
  }
  // Insertion sort: a handful of queues, and no allocation on this path.
  auto before = [&](QueueId a, QueueId b) {
    const QueueState& qa = state_.queues[a];
    const QueueState& qb = state_.queues[b];
    const int ra = policy_->rank(view(), qa.tenant);
    const int rb = policy_->rank(view(), qb.tenant);
    if (ra != rb) return ra < rb;
    const Time sa = qa.pending.front().submitted;
    const Time sb = qb.pending.front().submitted;
    return sa != sb ? sa < sb : a < b;
  };
  for (std::size_t i = 1; i < order_.size(); ++i) {
    const QueueId q = order_[i];
    std::size_t j = i;
    for (; j > 0 && before(q, order_[j - 1]); --j) order_[j] = order_[j - 1];
    order_[j] = q;
  }

  const Duration throttle = state_.config.throttle;
  for (QueueId qid : order_) {
    QueueState& q = state_.queues[qid];
    // A best-effort queue's work on TPCs no one can claim back is held to the
    // longer bound, its borrowed work to `throttle` (below).
    const Duration bound = traits_.throttle_borrowed_only && !state_.tenants[idx(q.tenant)].is_high()
                               ? std::max(throttle, state_.config.throttle_unborrowed)
                               : throttle;
    while (!q.pending.empty()) {
      if (throttled(q, now, bound)) {
        ++counters_.throttled;
        next_wakeup_ = std::min(next_wakeup_, q.tail_end - bound);
        break;
      }
      Placement placement = policy_->place(view(), q, q.pending.front(), now);
      if (placement.waiting()) {
        next_wakeup_ = std::min(next_wakeup_, placement.retry_at);
        break;
      }
      if (!make_safe(q, q.pending.front(), placement, now)) break;  // deferred: retried at the next event
      if (bound != throttle && !placement.stolen.empty() && throttled(q, now, throttle)) {
        // On borrowed TPCs: it must start soon after they were lent.
        ++counters_.throttled;
        next_wakeup_ = std::min(next_wakeup_, q.tail_end - throttle);
        break;
      }
      out.push_back(carve(q, q.pending.front(), placement, now));
    }
  }
  if (next_wakeup_ <= now) next_wakeup_ = kTimeNever;  // nothing will change by itself
}

bool Engine::make_safe(const QueueState& q, const PendingLaunch& head, Placement& placement, Time now) {
  if (!head.safe.any()) return true;
  const Fit fit = fit_tpcs(state_.config.device.topology, head.safe, placement.tpcs, state_.device_tpcs,
                           state_.config.device.sms_per_tpc);
  if (fit.action == FitAction::kAsIs || fit.tpcs == placement.tpcs) return true;
  const TenantState& t = state_.tenants[idx(q.tenant)];
  const TpcSet added = fit.tpcs - placement.tpcs;
  // A best-effort launch waits, rather than run over an active
  // high-priority tenant, when only the whole GPU is safe, or when TPCs it
  // runs on anyway (pinned: a graph built earlier) are owned by one.
  const TpcSet pinned_added = head.safe.pinned & added;
  if (!t.is_high() && (fit.action == FitAction::kWhole || !pinned_added.empty())) {
    bool wait = false;
    for (const TenantState& o : state_.tenants) {
      if (o.id == t.id || !o.is_high() || !state_.active(o.id, now)) continue;
      if (fit.action != FitAction::kWhole && (o.owned & pinned_added).empty()) continue;
      wait = true;
      // Drained but within its grace: it turns inactive by itself.
      if (!o.has_work()) next_wakeup_ = std::min(next_wakeup_, o.idle_since + state_.grace(o));
    }
    if (wait) {
      ++counters_.deferred;
      return false;
    }
  }
  ++counters_.widened;
  placement.stolen |= added - t.owned;
  placement.tpcs = fit.tpcs;
  return true;
}

AtomDispatch Engine::carve(QueueState& q, PendingLaunch& head, const Placement& placement, Time now, bool queued) {
  const EngineConfig& cfg = state_.config;
  TenantState& t = state_.tenants[idx(q.tenant)];
  const int ntpcs = std::max(1, placement.tpcs.count());

  std::uint64_t blocks = head.remaining_blocks();
  if (head.plan.split()) {
    // Size this atom to the TPCs it actually got: whole waves whose
    // predicted time is close to the target, and never under the floor of
    // per-atom cost / tolerated overhead.
    const AtomConfig& ac = traits_.atomize ? cfg.atoms : preemption_atoms_;
    const std::uint64_t wave_blocks =
        static_cast<std::uint64_t>(ntpcs) * static_cast<std::uint64_t>(head.blocks_per_tpc);
    const auto wave_time = state_.predict(head, wave_blocks, ntpcs);
    if (wave_time && wave_time->count() > 0) {
      const double w = static_cast<double>(wave_time->count());
      const double floor_ns = static_cast<double>(ac.per_atom_cost.count()) / ac.tolerated_overhead;
      const double target_ns = static_cast<double>(ac.atom_duration().count());
      const double n_waves = std::max({1.0, std::ceil(floor_ns / w), std::round(target_ns / w)});
      std::uint64_t want = static_cast<std::uint64_t>(n_waves) * wave_blocks;
      const std::uint64_t unit = std::max<std::uint64_t>(head.plan.unit, 1);
      want = std::max(unit, (want + unit - 1) / unit * unit);
      // The rest of the launch rides along with this atom only if it adds
      // no wave: an atom never runs longer than its whole waves, which is
      // what an owner taking its TPCs back may have to wait for.
      const auto waves_of = [&](std::uint64_t b) { return (b + wave_blocks - 1) / wave_blocks; };
      if (blocks > want && waves_of(blocks) > waves_of(want)) blocks = want;
    }
  }

  AtomDispatch d;
  d.launch = head.id;
  d.queue = q.id;
  d.tenant = q.tenant;
  d.blocks = BlockRange{head.next_block, head.next_block + blocks};
  d.index = head.atoms_dispatched++;
  d.split = traits_.atomize && head.plan.split();  // preemption pieces cost nothing
  d.tpcs = placement.tpcs;
  d.priority = placement.priority;
  d.predicted = state_.predict(head, blocks, ntpcs);
  head.next_block += blocks;
  d.last = head.next_block >= head.plan.total_blocks;

  AtomId id = 0;
  if (!state_.free_atoms.empty()) {
    id = state_.free_atoms.back();
    state_.free_atoms.pop_back();
  } else {
    id = static_cast<AtomId>(state_.atoms.size());
    state_.atoms.emplace_back();
  }
  d.atom = id;
  InflightAtom& a = state_.atoms[id];
  a.live = true;
  a.launch = head.id;
  a.queue = q.id;
  a.tenant = q.tenant;
  a.key = head.key;
  a.blocks = blocks;
  a.blocks_per_tpc = head.blocks_per_tpc;
  a.tpcs = placement.tpcs;
  a.stolen = placement.stolen & placement.tpcs;
  a.last = d.last;
  a.whole = d.index == 0 && d.last;
  a.running = !queued;
  a.size_key = head.size_key;
  a.size_source = head.size_source;
  a.size_full = head.size_full;
  a.dispatched = now;
  a.predicted = d.predicted.value_or(Duration{0});
  const Duration guess = d.predicted.value_or(cfg.throttle);
  q.tail_end = std::max(now, q.tail_end) + guess;
  a.end_base = q.tail_end - q.shift;
  ++q.inflight_atoms;
  ++t.inflight_atoms;
  if (!a.stolen.empty()) {
    ++t.stolen_inflight;
    ++counters_.stolen_atoms;
  }
  a.tenant_slot = static_cast<std::uint32_t>(t.inflight.size());
  t.inflight.push_back(id);
  ++counters_.atoms;
  a.best_effort_then = state_.best_effort_inflight > 0;
  a.best_effort_dispatches_then = state_.best_effort_dispatches;
  if (!t.is_high()) {
    ++state_.best_effort_inflight;
    ++state_.best_effort_dispatches;
  }

  if (d.last) {
    if (--t.need_count[static_cast<std::size_t>(head.need)] == 0 && head.need == t.max_need) {
      while (t.max_need > 0 && t.need_count[static_cast<std::size_t>(t.max_need)] == 0) --t.max_need;
    }
    --t.pending_launches;
    if (queued) q.pending.pop_front();
  }
  policy_->on_dispatch(view(), a, now);
  return d;
}

Completion Engine::atom_finished(AtomId id, Time start, Time end) {
  Completion c;
  if (id >= state_.atoms.size() || !state_.atoms[id].live) return c;  // unknown: ignore
  InflightAtom& a = state_.atoms[id];
  TenantState& t = state_.tenants[idx(a.tenant)];
  const DeviceShape& dev = state_.config.device;

  const Duration ran = std::max(Duration{0}, end - start);
  const int used = std::min(a.tpcs.count(), occupancy_tpc_bound(dev, a.blocks, a.blocks_per_tpc));
  // An hp completion shares its burst's busy time (docs/daemon.md): where
  // the key has timed samples (observe_hp_sample), those alone teach.
  if (!t.is_high() || sampled_keys_.empty() || !sampled_keys_.contains(clamp_key(a.key))) {
    state_.predictor.observe(a.key, a.blocks, a.blocks_per_tpc, std::max(used, 1), ran, t.spec.priority);
  }
  // The right-sizing fit models whole kernels: atoms of split launches are
  // not samples of it. Every execution is accounted; a running (hp) one
  // teaches the fit only where its time is its own.
  if (a.whole && a.size_full > 0) {
    const bool timed = !a.running || state_.config.running_times_exact;
    state_.rightsizer.observe(a.tenant, a.size_key, a.size_full, a.tpcs.count(), used, a.size_source, ran,
                              /*account=*/true, timed);
  }
  policy_->on_ran(view(), a, start, end);

  c.launch = a.launch;
  c.queue = a.queue;
  c.tenant = a.tenant;
  c.launch_done = a.last;
  release_atom(id, end);
  return c;
}

PredictionKey Engine::clamp_key(const PredictionKey& k) const {
  const std::uint32_t most = state_.config.predictor.max_ordinal;
  return k.ordinal <= most ? k : PredictionKey{k.kernel, most + 1};
}

void Engine::observe_hp_sample(TenantId tenant, const PredictionKey& key, std::uint64_t blocks, int blocks_per_tpc,
                               int tpcs, Duration ran) {
  if (tenant >= state_.tenants.size() || blocks == 0) return;
  const TenantState& t = state_.tenants[idx(tenant)];
  const int used = std::max(tpcs, 1);
  const int per_tpc = std::max(blocks_per_tpc, 1);
  ran = std::max(Duration{0}, ran);
  if (t.is_high()) {
    ++samples_;
    sample_sum_ns_ += static_cast<double>(ran.count());
    if (const auto p = state_.predictor.predict(key, blocks, per_tpc, used)) {
      const std::int64_t diff = (ran - *p).count();
      const double abs_error = static_cast<double>(diff < 0 ? -diff : diff);
      ++sample_predicted_;
      if (abs_error > static_cast<double>(state_.config.predictor.miss_threshold.count())) ++sample_misses_;
      sample_abs_error_ns_ += abs_error;
      sample_abs_error_hist_.add(abs_error);
    }
    sampled_keys_.insert(clamp_key(key));
  }
  state_.predictor.observe(key, blocks, per_tpc, used, ran, t.spec.priority);
  // Right-sizing learns it as the kernel's own time on the TPCs it used.
  const PredictionKey k = clamp_key(key);
  if (const auto it = sample_size_keys_.find({tenant, k.kernel, k.ordinal});
      it != sample_size_keys_.end() && rightsized(tenant)) {
    learn_size(tenant, it->second, tpcs, used, ran);
  }
}

Engine::HpSampleStats Engine::hp_sample_stats() const {
  HpSampleStats s;
  s.errors.observations = samples_;
  s.errors.predicted = sample_predicted_;
  s.errors.misses = sample_misses_;
  if (sample_predicted_ > 0) {
    const double n = static_cast<double>(sample_predicted_);
    s.errors.miss_share = static_cast<double>(sample_misses_) / n;
    s.errors.mean_abs_error_us = sample_abs_error_ns_ / n / 1e3;
    s.errors.p99_abs_error_us = sample_abs_error_hist_.quantile(99.0) / 1e3;
  }
  if (samples_ > 0) s.mean_sample_us = sample_sum_ns_ / static_cast<double>(samples_) / 1e3;
  return s;
}

void Engine::release_atom(AtomId id, Time end) {
  InflightAtom& a = state_.atoms[id];
  QueueState& q = state_.queues[a.queue];
  TenantState& t = state_.tenants[idx(a.tenant)];
  // Swap-remove from the tenant's in-flight list.
  const AtomId moved = t.inflight.back();
  t.inflight[a.tenant_slot] = moved;
  state_.atoms[moved].tenant_slot = a.tenant_slot;
  t.inflight.pop_back();
  if (q.inflight_atoms > 0) --q.inflight_atoms;
  if (q.inflight_atoms == 0) {
    q.tail_end = end;
    q.shift = Duration{0};
    q.floor = end;
  } else {
    // A queue's atoms run in order: the ones behind this atom start as much
    // earlier (or later) as it ended against its prediction. Without this
    // the throttle keeps counting work that is already done, and on a real
    // GPU the queue drains to nothing before the next atom is granted. One
    // step for all of them (QueueState::shift): a loop over the in-flight
    // atoms at every completion made lithosd stall for up to 100 ms behind
    // an hp tenant with thousands of launches in flight.
    const Duration shift = end - state_.predicted_end(a);
    q.tail_end = std::max(end, q.tail_end + shift);
    q.shift += shift;
    q.floor = std::max(q.floor, end);
  }
  --t.inflight_atoms;
  if (!t.is_high() && state_.best_effort_inflight > 0) --state_.best_effort_inflight;
  if (!a.stolen.empty() && t.stolen_inflight > 0) --t.stolen_inflight;
  if (!t.has_work()) t.idle_since = end;
  policy_->on_finish(view(), a, end);
  a.live = false;
  state_.free_atoms.push_back(id);
}

}  // namespace lithos::sched
