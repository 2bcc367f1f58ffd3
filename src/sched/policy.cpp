#include "sched/policy.hpp"

#include "sched/engine.hpp"

namespace lithos::sched {

int Policy::rank(const EngineState& state, TenantId tenant) const {
  return state.tenants[static_cast<std::size_t>(tenant)].is_high() ? 0 : 1;
}

TpcSet Policy::immediate_set(const EngineState& state, TenantId tenant, Time now, bool lasting) const {
  (void)now;
  (void)lasting;
  const TpcSet& owned = state.tenants[static_cast<std::size_t>(tenant)].owned;
  return owned.empty() ? state.device_tpcs : owned;
}

HwPriority Policy::immediate_priority(const EngineState& state, TenantId tenant) const {
  (void)state;
  (void)tenant;
  return HwPriority::kNormal;
}

Duration Policy::on_arrival(const EngineState& state, TenantId tenant, Time now) {
  (void)tenant;
  (void)now;
  return state.config.idle_grace;
}

bool Policy::runs_free(const EngineState& state, TenantId tenant) const {
  (void)state;
  (void)tenant;
  return false;
}

}  // namespace lithos::sched
