#include "sched/policies/baselines.hpp"

#include <algorithm>

namespace lithos::sched {

// ---------------------------------------------------------------------------
// MPS

Status MpsPolicy::on_tenants_changed(const PolicyView& view, std::span<TpcSet> owned) {
  (void)view;
  for (TpcSet& o : owned) o = TpcSet{};
  return Status::ok();
}

// Arrival order across all tenants: no class goes first in software; the
// hardware priority (client priority) is the only difference.
int MpsPolicy::rank(const PolicyView& view, TenantId tenant) const {
  (void)view;
  (void)tenant;
  return 0;
}

Placement MpsPolicy::place(const PolicyView& view, const QueueState& queue, const PendingLaunch& head, Time now) {
  (void)head;
  (void)now;
  Placement p;
  p.tpcs = view.device_tpcs();
  p.priority = immediate_priority(view, queue.tenant);
  return p;
}

HwPriority MpsPolicy::immediate_priority(const PolicyView& view, TenantId tenant) const {
  return client_priority_ && !view.tenant(tenant).is_high() ? HwPriority::kLow : HwPriority::kNormal;
}

// ---------------------------------------------------------------------------
// Time slicing

Status TimeSlicingPolicy::on_tenants_changed(const PolicyView& view, std::span<TpcSet> owned) {
  (void)view;
  for (TpcSet& o : owned) o = TpcSet{};
  return Status::ok();
}

int TimeSlicingPolicy::rank(const PolicyView& view, TenantId tenant) const {
  (void)view;
  return tenant == active_ ? 0 : 1;
}

TenantId TimeSlicingPolicy::next_with_pending(const PolicyView& view) const {
  const auto n = static_cast<TenantId>(view.tenants().size());
  if (n == 0) return kNoTenant;
  const TenantId start = active_ == kNoTenant ? 0 : (active_ + 1) % n;
  for (TenantId i = 0; i < n; ++i) {
    const TenantId t = (start + i) % n;
    if (t != active_ && view.tenant(t).pending_launches > 0) return t;
  }
  return kNoTenant;
}

void TimeSlicingPolicy::switch_to(TenantId t, Time now, bool pay_switch) {
  active_ = t;
  draining_ = false;
  ready_at_ = pay_switch ? now + switch_cost_ : now;
  slice_end_ = ready_at_ + slice_;
}

void TimeSlicingPolicy::on_tick(const PolicyView& view, Time now) {
  if (active_ == kNoTenant) {
    const TenantId t = next_with_pending(view);
    if (t != kNoTenant) switch_to(t, now, false);
    return;
  }
  const TenantState& cur = view.tenant(active_);
  const TenantId other = next_with_pending(view);
  if (!cur.has_work()) {
    // The current tenant has nothing left: hand over at once (no drain).
    if (other != kNoTenant) switch_to(other, now, true);
    return;
  }
  if (other == kNoTenant) {
    // Nobody waits: the slice is extended, as the hardware does.
    draining_ = false;
    if (slice_end_ <= now) slice_end_ = now + slice_;
    return;
  }
  if (now >= slice_end_) draining_ = true;
  if (draining_ && cur.inflight_atoms == 0) switch_to(other, now, true);
}

Placement TimeSlicingPolicy::place(const PolicyView& view, const QueueState& queue, const PendingLaunch& head,
                                   Time now) {
  (void)head;
  if (queue.tenant != active_) return Placement::wait(draining_ ? kTimeNever : slice_end_);
  if (draining_) return Placement::wait(kTimeNever);  // resumes when its atoms finish
  if (now < ready_at_) return Placement::wait(ready_at_);
  Placement p;
  p.tpcs = view.device_tpcs();
  return p;
}

// ---------------------------------------------------------------------------
// Static partitions

Status StaticPartitionPolicy::on_tenants_changed(const PolicyView& view, std::span<TpcSet> owned) {
  const int device = view.device().tpcs;
  int fixed = 0;
  int sharers = 0;
  for (const TenantState& t : view.tenants()) {
    if (t.spec.static_tpcs) {
      fixed += *t.spec.static_tpcs;
    } else if (t.is_high()) {
      fixed += t.spec.quota;
    } else {
      ++sharers;
    }
  }
  if (fixed > device) {
    return Status::invalid_argument("static partitions add up to " + std::to_string(fixed) +
                                    " TPCs but the device has " + std::to_string(device));
  }
  const int share = sharers > 0 ? (device - fixed) / sharers : 0;
  int next = 0;
  for (const TenantState& t : view.tenants()) {
    int n = 0;
    if (t.spec.static_tpcs) {
      n = *t.spec.static_tpcs;
    } else if (t.is_high()) {
      n = t.spec.quota;
    } else {
      n = share;
    }
    if (n < 1) {
      return Status::invalid_argument("static partition: tenant '" + t.spec.name +
                                      "' would get no TPC; give it static_tpcs or leave TPCs outside the quotas");
    }
    owned[static_cast<std::size_t>(t.id)] = TpcSet::range(next, next + n);
    next += n;
  }
  return Status::ok();
}

Placement StaticPartitionPolicy::place(const PolicyView& view, const QueueState& queue, const PendingLaunch& head,
                                       Time now) {
  (void)head;
  (void)now;
  Placement p;
  p.tpcs = view.tenant(queue.tenant).owned;
  return p;
}

}  // namespace lithos::sched
