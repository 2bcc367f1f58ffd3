#include "sched/atom_plan.hpp"

#include <algorithm>
#include <cassert>
#include <cmath>

namespace lithos::sched {

// The floor is rounded up so that per_atom_cost / atom_duration never exceeds
// tolerated_overhead. A non-positive tolerated overhead tolerates no atom
// cost at all, so atoms are unbounded (never split). The result is at least
// 1 ns so that a configuration with zero target and zero cost cannot make
// plan_atoms divide by zero.
Duration AtomConfig::atom_duration() const {
  if (!(tolerated_overhead > 0.0)) return Duration::max();
  const double floor_ns = std::ceil(static_cast<double>(per_atom_cost.count()) / tolerated_overhead);
  if (floor_ns >= static_cast<double>(Duration::max().count())) return Duration::max();
  return std::max({target, Duration(static_cast<Duration::rep>(floor_ns)), Duration(1)});
}

const char* atom_reason_name(AtomReason r) {
  switch (r) {
    case AtomReason::kSplit: return "split";
    case AtomReason::kDisabled: return "disabled";
    case AtomReason::kUnpredicted: return "unpredicted";
    case AtomReason::kTiny: return "tiny";
    case AtomReason::kCooperative: return "cooperative";
    case AtomReason::kClusterIndivisible: return "cluster-indivisible";
    case AtomReason::kSingleUnit: return "single-unit";
    case AtomReason::kSingleWave: return "single-wave";
    case AtomReason::kIndivisible: return "indivisible";
    case AtomReason::kUnneeded: return "unneeded";
  }
  return "?";
}

// Units are dealt out as count near-equal runs: the first (units % count)
// atoms get one unit more. Requires count >= 1, unit >= 1 and unit dividing
// total_blocks, which every plan from plan_atoms satisfies.
BlockRange AtomPlan::atom(std::uint32_t i) const {
  assert(count >= 1 && unit >= 1 && i < count);
  const std::uint64_t units = total_blocks / unit;
  if (atom_units > 0) {
    const std::uint64_t first = std::min<std::uint64_t>(std::uint64_t{i} * atom_units, units);
    return {first * unit, std::min(first + atom_units, units) * unit};
  }
  const std::uint64_t base = units / count;
  const std::uint64_t extra = units % count;
  const std::uint64_t first = i * base + std::min<std::uint64_t>(i, extra);
  const std::uint64_t size = base + (i < extra ? 1U : 0U);
  return {first * unit, (first + size) * unit};
}

std::uint64_t atom_unit(const LaunchDesc& launch) {
  if (!launch.is_cluster()) return 1;
  const Dim3& g = launch.grid;
  const Dim3& c = launch.cluster;  // every dimension >= 1: is_cluster() means count() > 1
  if (g.x % c.x != 0 || g.y % c.y != 0 || g.z % c.z != 0) return 0;
  // A z-slab holds every x and y of its planes, hence whole clusters.
  if (g.z > c.z) return std::uint64_t{g.x} * g.y * c.z;
  // With one plane, a y-slab holds every x of its rows.
  if (g.z == 1 && g.y > c.y) return std::uint64_t{g.x} * c.y;
  // With one row, a run of cluster.x blocks is one cluster.
  if (g.y == 1 && g.z == 1) return c.x;
  // Clusters span several rows or planes and share them with other clusters:
  // every contiguous range but the whole grid cuts some cluster.
  return 0;
}

// Reasons are checked structural ones first (they hold for every launch of
// this shape, whatever its prediction), then the prediction-based ones.
// A max_atoms below 2 allows no split and counts as disabled.
AtomPlan plan_atoms(const AtomConfig& config, const LaunchDesc& launch, std::optional<Duration> predicted) {
  AtomPlan plan;
  plan.total_blocks = launch.grid.count();
  const std::uint64_t unit = atom_unit(launch);
  // An indivisible grid is one unit: the whole grid (1 for an empty grid).
  plan.unit = unit == 0 ? std::max<std::uint64_t>(plan.total_blocks, 1) : unit;
  const std::uint64_t units = plan.total_blocks / plan.unit;

  auto whole = [&plan](AtomReason reason) {
    plan.reason = reason;
    return plan;
  };
  if (!config.enabled || config.max_atoms < 2) return whole(AtomReason::kDisabled);
  if (launch.cooperative) return whole(AtomReason::kCooperative);
  if (launch.indivisible) return whole(AtomReason::kIndivisible);
  if (unit == 0) return whole(AtomReason::kClusterIndivisible);
  if (units < 2) return whole(AtomReason::kSingleUnit);
  if (!predicted.has_value()) return whole(AtomReason::kUnpredicted);

  const Duration atom = config.atom_duration();
  // ceil(predicted / atom): no atom is longer than the atom duration, so
  // the wait an atom boundary bounds is at most one atom. A launch that fits
  // in one atom (or a non-positive prediction) runs whole.
  if (predicted->count() <= atom.count()) return whole(AtomReason::kTiny);
  if (launch.wave_blocks > 0) {
    const std::uint64_t wave_units = std::max<std::uint64_t>(1, launch.wave_blocks / plan.unit);
    const std::uint64_t waves = (units + wave_units - 1) / wave_units;
    if (waves < 2) return whole(AtomReason::kSingleWave);
    const std::int64_t per_wave = std::max<std::int64_t>(1, predicted->count() / static_cast<std::int64_t>(waves));
    // Whole waves in one atom (at least one: a wave longer than the atom
    // duration cannot be cut shorter).
    std::uint64_t per_atom = static_cast<std::uint64_t>(std::max<std::int64_t>(1, atom.count() / per_wave));
    if (per_atom >= waves) return whole(AtomReason::kTiny);  // rounding: the grid fits in one atom after all
    if ((waves + per_atom - 1) / per_atom > config.max_atoms) {
      per_atom = (waves + config.max_atoms - 1) / config.max_atoms;
    }
    plan.atom_units = per_atom * wave_units;
    plan.count = static_cast<std::uint32_t>((units + plan.atom_units - 1) / plan.atom_units);
    if (plan.count < 2) {
      plan.count = 1;
      plan.atom_units = 0;
      return whole(AtomReason::kTiny);
    }
    plan.atom_duration = atom;
    plan.reason = AtomReason::kSplit;
    return plan;
  }
  const std::int64_t fitting = predicted->count() / atom.count() + (predicted->count() % atom.count() != 0 ? 1 : 0);

  plan.count = static_cast<std::uint32_t>(
      std::min({static_cast<std::uint64_t>(fitting), std::uint64_t{config.max_atoms}, units}));
  plan.atom_duration = atom;
  plan.reason = AtomReason::kSplit;
  return plan;
}

}  // namespace lithos::sched
