// What a policy may read of the Engine: a const view over EngineState that
// exposes only what the policies in policies/ use (the device, the tenants,
// their in-flight atoms and the Engine's queries over them). It hands out no
// container, predictor or right-sizer to change, and nothing mutable at all:
// the one thing a policy writes into the Engine goes through its explicit
// argument (Policy::on_tenants_changed's `owned`) or a hook's return value.
//
// The Engine builds one per hook call (a pointer: free to copy); it is valid
// for that call only.
#pragma once

#include <cstddef>
#include <span>

#include "common/time.hpp"
#include "sched/engine.hpp"
#include "sched/tpc_set.hpp"
#include "sched/types.hpp"

namespace lithos::sched {

class PolicyView {
 public:
  explicit PolicyView(const EngineState& state) : state_(&state) {}

  // The device (EngineConfig::device) and every TPC of it.
  const DeviceShape& device() const { return state_->config.device; }
  const TpcSet& device_tpcs() const { return state_->device_tpcs; }
  // EngineConfig::idle_grace: how long a tenant counts as active after its
  // work drained unless the policy answers otherwise (Policy::on_arrival).
  Duration idle_grace() const { return state_->config.idle_grace; }
  // The predictor's settings (EngineConfig::predictor), for a policy that
  // keeps a model of its own.
  const PredictorConfig& predictor_config() const { return state_->config.predictor; }

  // Every tenant, by TenantId; `tenant(t)` requires t < tenants().size().
  std::span<const TenantState> tenants() const { return state_->tenants; }
  const TenantState& tenant(TenantId t) const { return state_->tenants[static_cast<std::size_t>(t)]; }
  // An atom in flight, by an id from TenantState::inflight.
  const InflightAtom& atom(AtomId id) const { return state_->atoms[id]; }

  // The Engine's queries (EngineState has their contracts).
  TenantId owner_of(int tpc) const { return state_->owner_of(tpc); }
  const TpcSet& owned_by_anyone() const { return state_->owned_by_anyone(); }
  bool active(TenantId t, Time now) const { return state_->active(t, now); }
  Duration grace(const TenantState& ts) const { return state_->grace(ts); }
  Time predicted_end(const InflightAtom& a) const { return state_->predicted_end(a); }
  TpcSet pick(const TpcSet& from, int n, TenantId t) const { return state_->pick(from, n, t); }
  TpcSet held(TenantId t) const { return state_->held(t); }
  bool beside_best_effort(const InflightAtom& a) const { return state_->beside_best_effort(a); }

 private:
  const EngineState* state_;
};

}  // namespace lithos::sched
