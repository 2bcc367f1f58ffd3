#include "sched/policy.hpp"

#include "sched/policy_view.hpp"

namespace lithos::sched {

int Policy::rank(const PolicyView& view, TenantId tenant) const { return view.tenant(tenant).is_high() ? 0 : 1; }

TpcSet Policy::immediate_set(const PolicyView& view, TenantId tenant, Time now, bool lasting) const {
  (void)now;
  (void)lasting;
  const TpcSet& owned = view.tenant(tenant).owned;
  return owned.empty() ? view.device_tpcs() : owned;
}

HwPriority Policy::immediate_priority(const PolicyView& view, TenantId tenant) const {
  (void)view;
  (void)tenant;
  return HwPriority::kNormal;
}

Duration Policy::on_arrival(const PolicyView& view, TenantId tenant, Time now) {
  (void)tenant;
  (void)now;
  return view.idle_grace();
}

bool Policy::runs_free(const PolicyView& view, TenantId tenant) const {
  (void)view;
  (void)tenant;
  return false;
}

}  // namespace lithos::sched
