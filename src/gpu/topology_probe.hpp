// Which TPCs share a GPC (the topology, sched/topology.hpp), measured from
// thread-block clusters launched with no TPC mask.
//
// A cluster's CTAs are co-scheduled inside one GPC, each on its own SM
// (measured on the H100, docs/gpu.md "Topology (GPCs)"). So every launch of
// many clusters tells which SMs share a GPC: each kernel block records
// %smid and its cluster index, and SMs seen in one cluster are joined
// (union-find). After launches of several cluster sizes, spins and grid
// sizes the components are the GPCs, or rather the cluster domains: the H100
// has eight GPCs of 4-9 TPCs plus four TPCs that never share a cluster with
// any other TPC and are kept as one-TPC domains.
//
// Joining only SMs seen in one cluster never merges two GPCs (the hardware
// never spreads a cluster over two); too few launches could leave a GPC
// split. The cross-check catches that: cuOccupancyMaxActiveClusters at one
// block per SM must equal the sum over the GPCs found of
// floor(SMs of the GPC / cluster size), for every size the driver accepts.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "common/status.hpp"
#include "gpu/calibrate.hpp"
#include "gpu/driver.hpp"
#include "gpu/slot_map.hpp"
#include "sched/topology.hpp"

namespace lithos::gpu {

// Launches clusters without a TPC mask and reports where their CTAs ran.
// Implementations: CudaClusterProbe (below) on the GPU, fakes in tests.
class ClusterProbe {
 public:
  virtual ~ClusterProbe() = default;
  virtual ProbeInfo info() const = 0;  // sm_count is what discover_topology reads
  // One unmasked launch of `clusters` clusters of `cluster_size` CTAs (one
  // CTA per SM), each CTA spinning `spin_cycles` clock cycles (with
  // `vary_spin`, 1-8 times that, from a hash of its cluster index, so that
  // clusters finish at different times and later ones land elsewhere).
  // result[i] holds the SM ids of the CTAs of cluster i. An error means the
  // launch could not be made or did not finish; discovery stops there.
  virtual Result<std::vector<std::vector<int>>> clusters_seen(int cluster_size, int clusters, std::int64_t spin_cycles,
                                                              bool vary_spin) = 0;
  // How many clusters of `cluster_size` CTAs the whole GPU holds at once
  // with one block per SM (cuOccupancyMaxActiveClusters); 0 when the driver
  // does not accept that size.
  virtual Result<int> max_active_clusters(int cluster_size) = 0;
};

struct TopologyOptions {
  std::vector<int> cluster_sizes = {2, 4, 8, 16};  // 16 is a non-portable size
  int repetitions = 12;                            // rounds over cluster_sizes
  std::int64_t spin_cycles = 20000;                // spin of round 0 ...
  std::int64_t spin_step = 5000;                   // ... plus this per round
  int max_blocks = 1024;                           // CTAs per launch at most
};

struct TopologyStats {
  int launches = 0;    // cluster launches made
  double seconds = 0;  // wall time of discover_topology()
  // The driver's max active clusters at one block per SM, per cluster size.
  std::map<int, int> max_active_clusters;
};

// Measures the GPCs of the GPU behind `probe`, whose slot map is `map`.
// Round r launches, for every size c the driver accepts, (1 + r % 3) times
// its max active clusters (at most max_blocks CTAs) spinning spin_cycles +
// r * spin_step cycles, varied per cluster on odd rounds. GPCs come ordered by
// their lowest slot. Errors: the probe's own (with context); kUnavailable
// when the driver fits no cluster of the smallest size; kInvalidArgument for
// options outside 2-16 CTAs; kFailedPrecondition for a map of another SM
// count, a cluster answer of the wrong size or with an SM seen twice or
// outside 0..sm_count-1, a GPC holding half a TPC or a TPC no slot of `map`
// controls, a live TPC never seen, or a cross-check mismatch (the message
// gives both numbers). `stats` (optional) receives counts, also on errors.
Result<sched::Topology> discover_topology(ClusterProbe& probe, const SlotMap& map, const TopologyOptions& options,
                                          TopologyStats* stats = nullptr);

// sum over the GPCs of floor(sms_per_tpc x TPCs / cluster_size): the clusters
// a GPU with this topology holds at once at one block per SM.
int clusters_that_fit(const sched::Topology& topology, int cluster_size, int sms_per_tpc = 2);

// Whether the live TPCs of every group of `group_size` consecutive slots
// (slot_groups()) that holds any are exactly one GPC of map.topology, and
// every GPC is one group. False for an unknown topology (and, on the H100,
// because slots 72-89 hold four one-TPC GPCs in two groups).
bool groups_are_gpcs(const SlotMap& map, int group_size);

// The real ClusterProbe: a PTX kernel (JIT-loaded with cuModuleLoadData)
// launched with cuLaunchKernelEx and CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION,
// never with a TPC mask, and with the largest dynamic shared memory a block
// may use, so that one block fits per SM. Launches are never waited on
// blindly: the stream is polled until `launch_timeout_s`.
class CudaClusterProbe final : public ClusterProbe {
 public:
  // Retains the primary context of device `ordinal`, makes it current on the
  // calling thread and loads the kernel. kUnavailable for devices without
  // thread-block clusters (compute capability below 9.0: "no thread-block
  // clusters before sm_90"), drivers lacking the entry points, or when one
  // block per SM cannot be forced. `api` must outlive the probe.
  static Result<std::unique_ptr<CudaClusterProbe>> create(const DriverApi& api, int ordinal,
                                                          double launch_timeout_s = 2.0);
  ~CudaClusterProbe() override;
  CudaClusterProbe(const CudaClusterProbe&) = delete;
  CudaClusterProbe& operator=(const CudaClusterProbe&) = delete;

  ProbeInfo info() const override { return info_; }
  Result<std::vector<std::vector<int>>> clusters_seen(int cluster_size, int clusters, std::int64_t spin_cycles,
                                                      bool vary_spin) override;
  Result<int> max_active_clusters(int cluster_size) override;

  int dynamic_smem_bytes() const { return smem_; }
  // A launch did not finish: nothing may be launched or copied afterwards,
  // and the destructor leaves the context to process exit.
  bool hung() const { return hung_; }

 private:
  CudaClusterProbe() = default;
  Status ensure_buffers(int blocks);

  const DriverApi* api_ = nullptr;
  CUdevice device_ = 0;
  CUcontext ctx_ = nullptr;
  CUstream stream_ = nullptr;
  CUmodule module_ = nullptr;
  CUfunction function_ = nullptr;
  CUdeviceptr sms_ = 0;        // u32 per block: %smid
  CUdeviceptr clusters_ = 0;   // u32 per block: %clusterid.x
  int capacity_ = 0;           // blocks the two buffers hold
  int smem_ = 0;               // dynamic shared memory per block
  bool non_portable_ = false;  // sizes above 8 allowed
  double timeout_s_ = 2.0;
  bool hung_ = false;
  ProbeInfo info_;
};

}  // namespace lithos::gpu
