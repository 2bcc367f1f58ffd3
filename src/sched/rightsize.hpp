// Hardware right-sizing (LithOS section "hardware right-sizing"): give each
// kernel the fewest TPCs that keep its latency within a slip k of what it
// would take on its full allocation.
//
// The occupancy bound (occupancy.hpp) caps what a kernel can use at all.
// Below it, latency is modelled as l(t) = m / t + b and fitted by least
// squares on x = 1/t from observed executions; the choice is the smallest t
// with l(t) <= k * l(t_max). Taking the occupancy bound alone as the answer
// was measured to hurt (+121% P99 in a public reproduction); the fit is what
// works.
//
// Choice (RightSizer::choose), per execution of a kernel on an allocation
// of `full` TPCs: the occupancy bound first (a kernel whose blocks fill
// fewer TPCs than `full` gets that many: no modelled slowdown), then the fit
// once trusted (R^2 >= min_r2): the fewest TPCs within the tenant's slip of
// the fit's latency at the occupancy bound. Each choice records which of
// the two decided it.
//
// Probe schedule (left open by the paper; ours): a key is probed, at
// probe_fraction of what it can use, only after probe_after executions on
// what it can use, at most once per probe_every executions of the key, and
// only while the tenant's probes' predicted extra time stays within
// probe_budget of its busy time. The fit learns from every execution whose
// own duration is known.
#pragma once

#include <cstdint>
#include <optional>
#include <unordered_map>
#include <vector>

#include "common/time.hpp"
#include "sched/predictor.hpp"
#include "sched/types.hpp"

namespace lithos::sched {

struct LatencyFit {
  double m_ns = 0.0;  // work term: latency on one TPC minus b
  double b_ns = 0.0;  // part that does not shrink with more TPCs
  double r2 = 0.0;    // coefficient of determination of the fit
  std::uint64_t samples = 0;
  Duration at(int tpcs) const;
};

// Running least-squares sums for l = m * (1/t) + b.
class FitAccumulator {
 public:
  void add(int tpcs, Duration latency);
  // nullopt until samples at two or more distinct TPC counts exist. m and b
  // are clamped at 0 (a negative work term is noise).
  std::optional<LatencyFit> fit() const;
  std::uint64_t samples() const { return n_; }
  // Distinct TPC counts seen, capped at 2: 0, 1, or 2 for "two or more",
  // which is all a fit needs to know.
  int distinct_tpcs() const;

 private:
  std::uint64_t n_ = 0;
  double sx_ = 0, sy_ = 0, sxx_ = 0, sxy_ = 0, syy_ = 0;
  int first_t_ = 0;
  bool varied_ = false;
};

// Smallest t in [min_tpcs, max_tpcs] with fit.at(t) <= slip * fit.at(max_tpcs).
int smallest_tpcs_within_slip(const LatencyFit& fit, double slip, int max_tpcs, int min_tpcs = 1);

struct RightSizeConfig {
  double slip = 1.1;               // tolerated latency ratio (the paper's k); TenantSpec::rightsize_slip overrides
  double probe_fraction = 0.25;    // a probe runs on this share of what the kernel can use
  double min_r2 = 0.8;             // below this the fit is not trusted: no model choice
  std::uint32_t probe_after = 4;   // executions on what a key can use before its first probe
  std::uint32_t probe_every = 32;  // at most one probe per key per this many executions
  double probe_budget = 0.01;      // probes' predicted extra time, at most this share of the tenant's busy time
};

// What right-sizing is keyed by: what a client knows at launch without cost
// (the kernel and its grid; not the launch's ordinal).
struct SizeKey {
  KernelId kernel = 0;
  Dim3 grid;
  friend bool operator==(const SizeKey&, const SizeKey&) = default;
};
struct SizeKeyHash {
  std::size_t operator()(const SizeKey& k) const noexcept;
};

// What decided an execution's TPC count.
enum class SizeSource : std::uint8_t {
  kFull,       // not right-sized: what it can use of its allocation
  kOccupancy,  // the occupancy bound, below the allocation
  kModel,      // the trusted fit, below the occupancy bound
  kProbe,      // a probe (reduced count to learn the fit)
};
const char* size_source_name(SizeSource s);

struct SizeChoice {
  int tpcs = 1;
  SizeSource source = SizeSource::kFull;
  Duration probe_cost{0};  // a probe: its predicted extra time
};

// Per tenant, what right-sizing did.
struct RightSizeStats {
  std::uint64_t executions = 0;    // choices made
  std::uint64_t by_occupancy = 0;  // of them, decided by the occupancy bound
  std::uint64_t by_model = 0;      // of them, decided by the fit
  std::uint64_t probes = 0;        // of them, probes
  double probe_cost_ns = 0.0;      // the probes' predicted extra time
  double busy_ns = 0.0;            // the measured time of its executions
  // Sum over right-sized executions (occupancy or model) that ended of
  // (full - chosen) x duration: TPC-time left to others.
  double saved_tpc_ns = 0.0;
  double allocated_tpc_ns = 0.0;  // every accounted execution's allocation x duration
  // Right-sized executions with a reference: their measured time, and the
  // reference's (the fit at the occupancy bound, else the key's mean there).
  std::uint64_t measured = 0;
  double measured_ns = 0.0;
  double reference_ns = 0.0;
  // measured_ns / reference_ns (0 with none measured).
  double slowdown() const { return reference_ns > 0.0 ? measured_ns / reference_ns : 0.0; }
  double saved_share() const { return allocated_tpc_ns > 0.0 ? saved_tpc_ns / allocated_tpc_ns : 0.0; }
};

class RightSizer {
 public:
  explicit RightSizer(RightSizeConfig config = {});
  // The TPC count for this execution of `key` by `tenant`, on an allocation
  // of `full` TPCs of which its blocks can use `occupancy`, with the
  // tenant's `slip`: always in [1, max(full, 1)]. Counts the execution and,
  // when it is one, the probe and its predicted extra time.
  SizeChoice choose(TenantId tenant, const SizeKey& key, int full, int occupancy, double slip);
  // An execution of `key` ran `ran` on `tpcs` TPCs of which its blocks used
  // `used`, after a choice from `source` on an allocation of `full`.
  // `account`: its time and TPC-time saved count to `tenant`; `timed`: the
  // duration is the kernel's own (not a share of a burst), so the fit
  // learns from it and it is measured against the reference.
  void observe(TenantId tenant, const SizeKey& key, int full, int tpcs, int used, SizeSource source, Duration ran,
               bool account, bool timed);
  std::optional<LatencyFit> fit(const SizeKey& key) const;
  // A tenant's counts (zeros for one never seen).
  const RightSizeStats& stats(TenantId tenant) const;
  const RightSizeConfig& config() const { return config_; }

 private:
  struct KeyState {
    FitAccumulator acc;
    std::uint64_t seen = 0;        // choices made for it
    std::uint64_t last_probe = 0;  // `seen` at its last probe (0: never)
    std::uint64_t top_n = 0;       // timed executions on what it can use
    double top_ns = 0.0;           // their summed duration
    int top = 0;                   // the occupancy-capped allocation of the latest choice
  };
  RightSizeStats& stats_of(TenantId tenant);
  std::optional<LatencyFit> trusted(const KeyState& k) const;

  RightSizeConfig config_;
  std::unordered_map<SizeKey, KeyState, SizeKeyHash> keys_;
  std::vector<RightSizeStats> stats_;  // by TenantId
};

}  // namespace lithos::sched
