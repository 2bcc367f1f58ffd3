// The policies users pick today, behind the same hook table as LithOS so
// that results come side by side. They model what the hardware and driver
// do; none of them throttles or splits kernels.
#pragma once

#include "sched/policy.hpp"
#include "sched/policy_view.hpp"

namespace lithos::sched {

// MPS: every kernel of every tenant may use every TPC as soon as it is
// launched; the hardware serves kernels in arrival order. With client
// priority, best-effort tenants' atoms go at low hardware priority, so the
// block scheduler serves high-priority kernels first at block boundaries.
class MpsPolicy final : public Policy {
 public:
  explicit MpsPolicy(bool client_priority) : client_priority_(client_priority) {}
  std::string_view name() const override { return client_priority_ ? "mps-priority" : "mps"; }
  PolicyTraits traits() const override { return {}; }
  Status on_tenants_changed(const PolicyView& view, std::span<TpcSet> owned) override;
  int rank(const PolicyView& view, TenantId tenant) const override;
  Placement place(const PolicyView& view, const QueueState& queue, const PendingLaunch& head, Time now) override;
  HwPriority immediate_priority(const PolicyView& view, TenantId tenant) const override;

 private:
  bool client_priority_;
};

// The time-slicing policy's settings.
struct TimeSlicingConfig {
  Duration timeslice = ms(2);        // length of one slice
  Duration context_switch = us(25);  // cost of a switch
};

// Time slicing (the default without MPS): the GPU runs one tenant's work at a
// time. When other tenants wait, the current one gets `timeslice`; then no
// new piece of it starts, its running piece finishes (kernels are cut into
// slice-long pieces: preemption at about the slice boundary), and after
// `context_switch` the next tenant with work, round robin, owns the whole GPU.
class TimeSlicingPolicy final : public Policy {
 public:
  explicit TimeSlicingPolicy(const TimeSlicingConfig& config)
      : slice_(config.timeslice), switch_cost_(config.context_switch) {}
  std::string_view name() const override { return "time-slicing"; }
  // Throttled: work a tenant queued stays in its (software) channel while
  // another tenant's slice runs, as the driver's channels keep it; only about
  // one throttle window of it is committed to the hardware. A kernel longer
  // than a slice is preempted at the slice boundary (compute preemption),
  // modelled as slice-long pieces.
  PolicyTraits traits() const override {
    return {.throttle = true,
            .atomize = false,
            .rightsize = false,
            .preempts_at_timeslice = true,
            .preemption_slice = slice_};
  }
  Status on_tenants_changed(const PolicyView& view, std::span<TpcSet> owned) override;
  int rank(const PolicyView& view, TenantId tenant) const override;
  void on_tick(const PolicyView& view, Time now) override;
  Placement place(const PolicyView& view, const QueueState& queue, const PendingLaunch& head, Time now) override;

  TenantId active() const { return active_; }

 private:
  TenantId next_with_pending(const PolicyView& view) const;
  void switch_to(TenantId t, Time now, bool pay_switch);

  TenantId active_ = kNoTenant;
  Duration slice_;
  Duration switch_cost_;
  Time ready_at_{};
  Time slice_end_{};
  bool draining_ = false;
};

// Static partitions: every tenant owns a fixed set of TPCs and runs only
// there, whether or not the others use theirs. High-priority tenants get
// `static_tpcs` or their quota; best-effort tenants get `static_tpcs` or an
// equal share of what is left.
class StaticPartitionPolicy final : public Policy {
 public:
  std::string_view name() const override { return "static-partition"; }
  PolicyTraits traits() const override { return {}; }
  Status on_tenants_changed(const PolicyView& view, std::span<TpcSet> owned) override;
  Placement place(const PolicyView& view, const QueueState& queue, const PendingLaunch& head, Time now) override;
};

}  // namespace lithos::sched
