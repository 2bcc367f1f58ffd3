// Atom plans: how a kernel's grid is split into atoms, contiguous ranges of
// thread blocks launched separately so that the TPCs a kernel may use can
// change in the middle of it (LithOS "kernel atomizer").
//
// The count follows the design: predicted duration / atom duration (rounded
// up, so that no atom is longer than the atom duration), where
// the atom duration is the target (250-500 us) floored by per-atom cost /
// tolerated overhead, so that splitting never costs more than the tolerated
// share. Not split: kernels with no prediction, kernels that fit in one
// atom, cooperative (grid-synchronising) kernels, and cluster launches whose
// clusters cannot be kept whole by a contiguous range of blocks.
//
// Block ranges are over the linear block index
//   x + grid.x * (y + grid.y * z);
// for cluster launches every atom boundary is a multiple of `unit`, chosen so
// that each atom holds whole clusters (see plan_atoms).
#pragma once

#include <cstdint>
#include <optional>

#include "common/time.hpp"
#include "sched/types.hpp"

namespace lithos::sched {

struct AtomConfig {
  bool enabled = true;
  Duration target = us(400);         // desired duration of one atom
  Duration per_atom_cost = us(20);   // extra time one more atom costs
  double tolerated_overhead = 0.08;  // share of kernel time atoms may add
  std::uint32_t max_atoms = 1024;    // never more atoms than this per launch

  // max(target, per_atom_cost / tolerated_overhead).
  Duration atom_duration() const;
};

enum class AtomReason : std::uint8_t {
  kSplit,               // split into count > 1 atoms
  kDisabled,            // atomization is off
  kUnpredicted,         // no duration prediction yet: run whole
  kTiny,                // predicted duration < 2 atoms
  kCooperative,         // grid-synchronising kernels are never split
  kClusterIndivisible,  // no axis along which clusters stay whole
  kSingleUnit,          // the grid has only one splittable unit
  kSingleWave,          // the grid fits in one wave: atoms would run one after another, no faster each
  kIndivisible,         // the launch cannot carry atom bounds (LaunchDesc::indivisible)
  kUnneeded,            // nothing to protect: the scheduler lets the tenant run free
};
inline constexpr int kAtomReasonCount = 10;
const char* atom_reason_name(AtomReason r);

struct BlockRange {
  std::uint64_t lo = 0;  // first linear block
  std::uint64_t hi = 0;  // one past the last
  std::uint64_t size() const { return hi - lo; }
  friend bool operator==(const BlockRange&, const BlockRange&) = default;
};

struct AtomPlan {
  std::uint32_t count = 1;         // atoms, at the allocation the prediction was made for
  std::uint64_t total_blocks = 0;  // grid.count()
  std::uint64_t unit = 1;          // atom boundaries are multiples of this many blocks
  std::uint64_t atom_units = 0;    // units per atom (whole waves; the last atom is shorter); 0: near-equal atoms
  Duration atom_duration{};        // config.atom_duration() (0 when not split)
  AtomReason reason = AtomReason::kUnpredicted;

  bool split() const { return count > 1; }
  // Range of atom i (0 <= i < count): atom_units units each (the last one
  // what is left), or, with atom_units 0, count near-equal ranges of whole
  // units, the earlier ones one unit larger when they do not divide evenly.
  BlockRange atom(std::uint32_t i) const;
};

// Plans atoms for one launch given its predicted duration on the allocation
// it is expected to get (nullopt: no prediction).
//
// With launch.wave_blocks known (blocks resident on the whole GPU at once),
// atoms are whole waves: a partial wave lasts as long as a full one, so an
// atom of 3.6 waves takes as long as one of 4. The wave time is predicted /
// waves; an atom holds the most waves that fit in the atom duration (at
// least one); a grid of less than two waves is not split (kSingleWave):
// its atoms would each last a full block time.
AtomPlan plan_atoms(const AtomConfig& config, const LaunchDesc& launch, std::optional<Duration> predicted);

// The split unit of a launch (1 for non-cluster launches), or 0 when a
// cluster launch cannot be split into contiguous ranges of whole clusters.
// Rule: split along z in slabs of cluster.z when grid.z > cluster.z; else,
// when grid.z == 1 and grid.y > cluster.y, along y in slabs of cluster.y;
// else, when grid.y == grid.z == 1, along x in runs of cluster.x. A grid that
// is not a whole number of clusters along every axis has no whole clusters
// to keep (the driver rejects such a launch): 0.
std::uint64_t atom_unit(const LaunchDesc& launch);

}  // namespace lithos::sched
