#include "gpu/topology_probe.hpp"

#include <time.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <numeric>

namespace lithos::gpu {

namespace {

// Cluster sizes the hardware can schedule at all (16 needs the non-portable
// attribute; 8 is the portable limit).
constexpr int kMaxClusterSize = 16;
constexpr int kMaxPortableClusterSize = 8;
constexpr std::uint32_t kNotWritten = 0xFFFFFFFFU;

// lithos_cluster_smid(u32* sms, u32* clusters, s64 spin, u32 vary): every
// thread spins (spin cycles; with vary, 1-8 times that, from a multiplicative
// hash of the cluster index, so that clusters end at different times), then
// thread 0 of each block writes %smid and %clusterid.x at index %ctaid.x.
// The launch is 1-D, so %clusterid.x = %ctaid.x / cluster size; the host
// checks that, which proves the launch really ran as clusters. PTX ISA 7.8
// (the first with %clusterid) for sm_90; JIT-compiled at load time.
constexpr char kClusterPtx[] = R"PTX(
.version 7.8
.target sm_90
.address_size 64

.visible .entry lithos_cluster_smid(
    .param .u64 lithos_cluster_smid_sms,
    .param .u64 lithos_cluster_smid_clusters,
    .param .u64 lithos_cluster_smid_spin,
    .param .u32 lithos_cluster_smid_vary
)
{
    .reg .pred %p<4>;
    .reg .b32 %r<10>;
    .reg .b64 %rd<16>;

    ld.param.u64 %rd1, [lithos_cluster_smid_sms];
    ld.param.u64 %rd2, [lithos_cluster_smid_clusters];
    ld.param.u64 %rd3, [lithos_cluster_smid_spin];
    ld.param.u32 %r1, [lithos_cluster_smid_vary];
    mov.u32 %r2, %clusterid.x;
    mul.lo.u32 %r3, %r2, -1640531535;
    shr.u32 %r4, %r3, 29;
    setp.eq.u32 %p1, %r1, 0;
    selp.u32 %r5, 0, %r4, %p1;
    cvt.u64.u32 %rd4, %r5;
    mul.lo.s64 %rd5, %rd4, %rd3;
    add.s64 %rd6, %rd5, %rd3;
    mov.u64 %rd7, %clock64;
$L_spin:
    mov.u64 %rd8, %clock64;
    sub.s64 %rd9, %rd8, %rd7;
    setp.lt.s64 %p2, %rd9, %rd6;
    @%p2 bra $L_spin;
    mov.u32 %r6, %tid.x;
    setp.ne.u32 %p3, %r6, 0;
    @%p3 bra $L_done;
    mov.u32 %r7, %smid;
    mov.u32 %r8, %ctaid.x;
    cvta.to.global.u64 %rd10, %rd1;
    cvta.to.global.u64 %rd11, %rd2;
    mul.wide.u32 %rd12, %r8, 4;
    add.s64 %rd13, %rd10, %rd12;
    add.s64 %rd14, %rd11, %rd12;
    st.global.u32 [%rd13], %r7;
    st.global.u32 [%rd14], %r2;
$L_done:
    ret;
}
)PTX";
constexpr char kClusterEntry[] = "lithos_cluster_smid";
constexpr unsigned kThreads = 128;

std::string join_ints(const std::vector<int>& v) {
  std::string out;
  for (int x : v) out += (out.empty() ? "" : ",") + std::to_string(x);
  return out;
}

struct UnionFind {
  std::vector<int> parent;
  explicit UnionFind(int n) : parent(static_cast<std::size_t>(n)) { std::iota(parent.begin(), parent.end(), 0); }
  int find(int x) {
    while (parent[static_cast<std::size_t>(x)] != x) {
      auto& p = parent[static_cast<std::size_t>(x)];
      p = parent[static_cast<std::size_t>(p)];
      x = p;
    }
    return x;
  }
  void join(int a, int b) {
    a = find(a);
    b = find(b);
    if (a != b) parent[static_cast<std::size_t>(std::max(a, b))] = std::min(a, b);
  }
};

// One cluster answer must be what the hardware guarantees: exactly
// `cluster_size` CTAs, each on its own SM (one block per SM), SMs that exist.
Status check_cluster(const std::vector<int>& sms, int index, int cluster_size, int clusters, int sm_count) {
  const std::string which = "topology: cluster " + std::to_string(index) + " of a launch of " +
                            std::to_string(clusters) + " clusters of " + std::to_string(cluster_size) + " CTAs";
  if (static_cast<int>(sms.size()) != cluster_size) {
    return Status::failed_precondition(which + " reported " + std::to_string(sms.size()) + " CTAs (SMs " +
                                       join_ints(sms) + "), expected " + std::to_string(cluster_size));
  }
  std::vector<int> sorted = sms;
  std::sort(sorted.begin(), sorted.end());
  for (std::size_t i = 0; i < sorted.size(); ++i) {
    if (sorted[i] < 0 || sorted[i] >= sm_count) {
      return Status::failed_precondition(which + " ran on SM " + std::to_string(sorted[i]) + ", outside 0-" +
                                         std::to_string(sm_count - 1) + " (virtual SM ids, MPS?)");
    }
    if (i > 0 && sorted[i] == sorted[i - 1]) {
      return Status::failed_precondition(which + " ran two CTAs on SM " + std::to_string(sorted[i]) +
                                         "; a cluster's CTAs run on distinct SMs at one block per SM");
    }
  }
  return Status::ok();
}

std::string sizes_text(const sched::Topology& t) {
  std::string out;
  for (int g = 0; g < t.count(); ++g) out += (g == 0 ? "" : ",") + std::to_string(t.gpc(g).count());
  return out;
}

}  // namespace

int clusters_that_fit(const sched::Topology& topology, int cluster_size, int sms_per_tpc) {
  if (cluster_size < 1) return 0;
  int n = 0;
  for (int g = 0; g < topology.count(); ++g) n += sms_per_tpc * topology.gpc(g).count() / cluster_size;
  return n;
}

bool groups_are_gpcs(const SlotMap& map, int group_size) {
  const sched::Topology& t = map.topology;
  if (!t.known() || t.tpcs() != map.live_set()) return false;
  int groups = 0;
  for (const SlotGroup& g : slot_groups(map, group_size)) {
    if (g.live == 0) continue;
    ++groups;
    sched::TpcSet set;
    for (int tpc : g.tpcs) set.set(tpc);
    const int gpc = t.gpc_of(g.tpcs.front());
    if (gpc < 0 || t.gpc(gpc) != set) return false;
  }
  // Each group is a distinct GPC; as many groups as GPCs makes it one to one.
  return groups == t.count();
}

Result<sched::Topology> discover_topology(ClusterProbe& probe, const SlotMap& map, const TopologyOptions& options,
                                          TopologyStats* stats) {
  const auto start = std::chrono::steady_clock::now();
  TopologyStats local;
  TopologyStats& st = stats != nullptr ? *stats : local;
  st = TopologyStats{};
  auto finish = [&] { st.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  auto fail = [&](Status s) -> Result<sched::Topology> {
    finish();
    return s;
  };

  const int sms = probe.info().sm_count;
  if (sms < 2 || sms % 2 != 0 || sms > 2 * sched::kMaxTpcs) {
    return fail(Status::failed_precondition("topology: a device with " + std::to_string(sms) +
                                            " SMs is not made of whole TPCs of 2 SMs"));
  }
  if (map.sm_count != sms) {
    return fail(Status::failed_precondition("topology: the slot map is for " + std::to_string(map.sm_count) +
                                            " SMs, the device has " + std::to_string(sms) + " (recalibrate)"));
  }
  if (options.cluster_sizes.empty() || options.repetitions < 1 || options.max_blocks < 2) {
    return fail(Status::invalid_argument("topology: no cluster sizes, repetitions or blocks to launch"));
  }
  for (int c : options.cluster_sizes) {
    if (c < 2 || c > kMaxClusterSize) {
      return fail(Status::invalid_argument("topology: cluster size " + std::to_string(c) + " is outside 2-" +
                                           std::to_string(kMaxClusterSize)));
    }
    auto n = probe.max_active_clusters(c);
    if (!n) return fail(n.status().with_context("topology: max active clusters of " + std::to_string(c)));
    st.max_active_clusters[c] = std::max(*n, 0);
  }
  const int smallest = *std::min_element(options.cluster_sizes.begin(), options.cluster_sizes.end());
  if (st.max_active_clusters[smallest] == 0) {
    return fail(Status::unavailable("topology: the driver fits no cluster of " + std::to_string(smallest) +
                                    " CTAs at one block per SM"));
  }

  UnionFind uf(sms);
  std::vector<bool> seen(static_cast<std::size_t>(sms), false);
  for (int rep = 0; rep < options.repetitions; ++rep) {
    for (int c : options.cluster_sizes) {
      const int fit = st.max_active_clusters[c];
      if (fit <= 0) continue;  // a size the driver refuses (16 without the non-portable attribute)
      // 1-3 times what fits at once: later waves land where earlier clusters
      // ended, so the pairs seen vary.
      const int clusters = std::min(options.max_blocks / c, fit * (1 + rep % 3));
      if (clusters < 1) continue;
      auto answer = probe.clusters_seen(c, clusters, options.spin_cycles + options.spin_step * rep, rep % 2 == 1);
      if (!answer) {
        return fail(answer.status().with_context("topology: launch of " + std::to_string(clusters) + " clusters of " +
                                                 std::to_string(c) + " CTAs"));
      }
      ++st.launches;
      if (static_cast<int>(answer->size()) != clusters) {
        return fail(Status::failed_precondition("topology: a launch of " + std::to_string(clusters) +
                                                " clusters answered for " + std::to_string(answer->size())));
      }
      for (int i = 0; i < clusters; ++i) {
        const std::vector<int>& cl = (*answer)[static_cast<std::size_t>(i)];
        if (Status s = check_cluster(cl, i, c, clusters, sms); !s.is_ok()) return fail(s);
        for (int sm : cl) {
          seen[static_cast<std::size_t>(sm)] = true;
          uf.join(sm, cl.front());
        }
      }
    }
  }

  // Every component must be whole TPCs the slot map controls, and every live
  // TPC must be in one.
  const sched::TpcSet live = map.live_set();
  std::vector<int> never;
  for (int t = 0; t < sms / 2; ++t) {
    const int a = 2 * t, b = 2 * t + 1;
    const bool ran = seen[static_cast<std::size_t>(a)] || seen[static_cast<std::size_t>(b)];
    if (!live.test(t)) {
      if (ran) {
        return fail(Status::failed_precondition(
            "topology: SMs of TPC " + std::to_string(t) +
            " ran cluster CTAs but no slot of the slot map controls that TPC (a stale map? recalibrate with --force)"));
      }
      continue;
    }
    if (!seen[static_cast<std::size_t>(a)]) never.push_back(a);
    if (!seen[static_cast<std::size_t>(b)]) never.push_back(b);
    if (seen[static_cast<std::size_t>(a)] && seen[static_cast<std::size_t>(b)] && uf.find(a) != uf.find(b)) {
      return fail(Status::failed_precondition("topology: TPC " + std::to_string(t) + " is split: SMs " +
                                              std::to_string(a) + " and " + std::to_string(b) +
                                              " never met in one cluster domain (half a TPC per GPC)"));
    }
  }
  if (!never.empty()) {
    return fail(Status::failed_precondition("topology: SMs " + join_ints(never) + " of live TPCs never ran a CTA of " +
                                            std::to_string(st.launches) +
                                            " cluster launches, so their GPC is unknown"));
  }

  // Components as TPC sets, ordered by their lowest slot.
  std::array<int, sched::kMaxTpcs> slot_of{};
  slot_of.fill(kMaxSlots);
  for (int s = 0; s < kMaxSlots; ++s) {
    const int t = map.tpc_of_slot[static_cast<std::size_t>(s)];
    if (t >= 0 && t < sched::kMaxTpcs)
      slot_of[static_cast<std::size_t>(t)] = std::min(slot_of[static_cast<std::size_t>(t)], s);
  }
  struct Component {
    int root = 0;
    int lowest_slot = kMaxSlots;
    sched::TpcSet tpcs;
  };
  std::vector<Component> comps;
  live.for_each([&](int t) {
    if (2 * t + 1 >= sms) return;
    const int root = uf.find(2 * t);
    auto it = std::find_if(comps.begin(), comps.end(), [&](const Component& c) { return c.root == root; });
    if (it == comps.end()) {
      comps.push_back(Component{root, kMaxSlots, {}});
      it = comps.end() - 1;
    }
    it->tpcs.set(t);
    it->lowest_slot = std::min(it->lowest_slot, slot_of[static_cast<std::size_t>(t)]);
  });
  if (static_cast<int>(comps.size()) > sched::kMaxGpcs) {
    return fail(Status::failed_precondition("topology: " + std::to_string(comps.size()) +
                                            " cluster domains found, more than the " + std::to_string(sched::kMaxGpcs) +
                                            " a topology holds"));
  }
  std::sort(comps.begin(), comps.end(),
            [](const Component& a, const Component& b) { return a.lowest_slot < b.lowest_slot; });
  std::vector<sched::TpcSet> gpcs;
  for (const Component& c : comps) gpcs.push_back(c.tpcs);
  auto topology = sched::Topology::from_gpcs(gpcs.data(), static_cast<int>(gpcs.size()));
  if (!topology) return fail(topology.status().with_context("topology"));

  // The cross-check: a GPC left split (some of its TPCs never shared a
  // cluster) packs fewer clusters than the driver counts.
  std::string mismatches;
  for (const auto& [c, driver] : st.max_active_clusters) {
    if (driver <= 0) continue;
    const int computed = clusters_that_fit(*topology, c);
    if (computed != driver) {
      mismatches += std::string(mismatches.empty() ? "" : "; ") + "clusters of " + std::to_string(c) +
                    ": the GPCs found hold " + std::to_string(computed) + " at once, the driver says " +
                    std::to_string(driver);
    }
  }
  if (!mismatches.empty()) {
    return fail(Status::failed_precondition("topology: cross-check failed after " + std::to_string(st.launches) +
                                            " cluster launches (" + mismatches + "); the " +
                                            std::to_string(topology->count()) + " GPCs found (TPCs " +
                                            sizes_text(*topology) + ") are not the GPU's: " + topology->to_string()));
  }
  finish();
  return topology;
}

// --- CudaClusterProbe ------------------------------------------------------

Result<std::unique_ptr<CudaClusterProbe>> CudaClusterProbe::create(const DriverApi& api, int ordinal,
                                                                   double launch_timeout_s) {
  auto info = device_info(api, ordinal);
  if (!info) return info.status();
  if (info->cc_major < 9) {
    return Status::unavailable("no thread-block clusters before sm_90 (device " + std::to_string(ordinal) +
                               " has compute capability " + std::to_string(info->cc_major) + "." +
                               std::to_string(info->cc_minor) + "): the topology stays unknown");
  }
  if (!api.has_clusters()) {
    return Status::unavailable(
        "the CUDA driver lacks cuLaunchKernelEx, cuFuncSetAttribute or cuOccupancyMaxActiveClusters");
  }
  std::unique_ptr<CudaClusterProbe> p(new CudaClusterProbe());
  if (CUresult r = api.cuDeviceGet(&p->device_, ordinal); r != CUDA_SUCCESS) return api.check(r, "cuDeviceGet");
  int cluster_launch = 0, per_sm = 0, optin = 0, reserved = 0;
  if (api.cuDeviceGetAttribute(&cluster_launch, CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH, p->device_) == CUDA_SUCCESS &&
      cluster_launch == 0) {
    return Status::unavailable("device " + std::to_string(ordinal) + " does not support thread-block cluster launches");
  }
  if (CUresult r =
          api.cuDeviceGetAttribute(&per_sm, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR, p->device_);
      r != CUDA_SUCCESS) {
    return api.check(r, "cuDeviceGetAttribute(MAX_SHARED_MEMORY_PER_MULTIPROCESSOR)");
  }
  if (CUresult r = api.cuDeviceGetAttribute(&optin, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, p->device_);
      r != CUDA_SUCCESS) {
    return api.check(r, "cuDeviceGetAttribute(MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)");
  }
  (void)api.cuDeviceGetAttribute(&reserved, CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK, p->device_);
  // The largest dynamic shared memory a block may ask for: two such blocks
  // (each with the driver's reserved share) must not fit on one SM, or the
  // cross-check's "one block per SM" would not hold.
  if (optin <= 0 || 2 * (static_cast<long long>(optin) + reserved) <= per_sm) {
    return Status::unavailable("cannot force one block per SM: a block may use " + std::to_string(optin) +
                               " bytes of shared memory, an SM has " + std::to_string(per_sm));
  }
  p->smem_ = optin;

  p->api_ = &api;
  p->timeout_s_ = launch_timeout_s > 0 ? launch_timeout_s : 2.0;
  if (CUresult r = api.cuDevicePrimaryCtxRetain(&p->ctx_, p->device_); r != CUDA_SUCCESS) {
    p->ctx_ = nullptr;
    return api.check(r, "cuDevicePrimaryCtxRetain");
  }
  if (CUresult r = api.cuCtxSetCurrent(p->ctx_); r != CUDA_SUCCESS) return api.check(r, "cuCtxSetCurrent");
  if (CUresult r = api.cuStreamCreate(&p->stream_, CU_STREAM_NON_BLOCKING); r != CUDA_SUCCESS) {
    p->stream_ = nullptr;
    return api.check(r, "cuStreamCreate");
  }
  if (CUresult r = api.cuModuleLoadData(&p->module_, kClusterPtx); r != CUDA_SUCCESS) {
    p->module_ = nullptr;
    return api.check(r, "cuModuleLoadData(cluster kernel PTX)");
  }
  if (CUresult r = api.cuModuleGetFunction(&p->function_, p->module_, kClusterEntry); r != CUDA_SUCCESS) {
    return api.check(r, "cuModuleGetFunction(lithos_cluster_smid)");
  }
  if (CUresult r = api.cuFuncSetAttribute(p->function_, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, p->smem_);
      r != CUDA_SUCCESS) {
    return api.check(r, "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)");
  }
  // Without it clusters stop at 8 CTAs; sizes above then count as refused.
  p->non_portable_ =
      api.cuFuncSetAttribute(p->function_, CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1) == CUDA_SUCCESS;
  p->info_.gpu_uuid = info->uuid;
  p->info_.gpu_name = info->name;
  p->info_.driver_version = info->driver_version;
  p->info_.sm_count = info->sm_count;
  return p;
}

CudaClusterProbe::~CudaClusterProbe() {
  // After a hung launch the context is wedged: leave everything to process exit.
  if (api_ == nullptr || hung_) return;
  if (sms_ != 0) api_->cuMemFree(sms_);
  if (clusters_ != 0) api_->cuMemFree(clusters_);
  if (module_ != nullptr) api_->cuModuleUnload(module_);
  if (stream_ != nullptr) api_->cuStreamDestroy(stream_);
  if (ctx_ != nullptr) api_->cuDevicePrimaryCtxRelease(device_);
}

Status CudaClusterProbe::ensure_buffers(int blocks) {
  if (blocks <= capacity_) return Status::ok();
  const DriverApi& api = *api_;
  if (sms_ != 0) api.cuMemFree(sms_);
  if (clusters_ != 0) api.cuMemFree(clusters_);
  sms_ = clusters_ = 0;
  capacity_ = 0;
  const std::size_t bytes = static_cast<std::size_t>(blocks) * sizeof(std::uint32_t);
  if (CUresult r = api.cuMemAlloc(&sms_, bytes); r != CUDA_SUCCESS) {
    sms_ = 0;
    return api.check(r, "cuMemAlloc(cluster probe SM ids)");
  }
  if (CUresult r = api.cuMemAlloc(&clusters_, bytes); r != CUDA_SUCCESS) {
    clusters_ = 0;
    return api.check(r, "cuMemAlloc(cluster probe cluster ids)");
  }
  capacity_ = blocks;
  return Status::ok();
}

Result<int> CudaClusterProbe::max_active_clusters(int cluster_size) {
  if (api_ == nullptr || function_ == nullptr) return Status::failed_precondition("cluster probe not loaded");
  if (cluster_size < 1 || cluster_size > kMaxClusterSize) {
    return Status::invalid_argument("cluster size " + std::to_string(cluster_size) + " is outside 1-" +
                                    std::to_string(kMaxClusterSize));
  }
  if (cluster_size > kMaxPortableClusterSize && !non_portable_) return 0;
  CUlaunchAttribute attr{};
  attr.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
  attr.value.clusterDim.x = static_cast<unsigned>(cluster_size);
  attr.value.clusterDim.y = 1;
  attr.value.clusterDim.z = 1;
  CUlaunchConfig cfg{};
  cfg.gridDimX = static_cast<unsigned>(cluster_size * std::max(info_.sm_count, 1));
  cfg.gridDimY = cfg.gridDimZ = 1;
  cfg.blockDimX = kThreads;
  cfg.blockDimY = cfg.blockDimZ = 1;
  cfg.sharedMemBytes = static_cast<unsigned>(smem_);
  cfg.hStream = stream_;
  cfg.attrs = &attr;
  cfg.numAttrs = 1;
  int n = 0;
  const CUresult r = api_->cuOccupancyMaxActiveClusters(&n, function_, &cfg);
  if (r == CUDA_ERROR_INVALID_CLUSTER_SIZE) return 0;
  if (r != CUDA_SUCCESS) {
    return api_->check(r, ("cuOccupancyMaxActiveClusters(" + std::to_string(cluster_size) + ")").c_str());
  }
  return n;
}

Result<std::vector<std::vector<int>>> CudaClusterProbe::clusters_seen(int cluster_size, int clusters,
                                                                      std::int64_t spin_cycles, bool vary_spin) {
  if (hung_) return Status::failed_precondition("an earlier cluster launch never finished; the context is unusable");
  if (api_ == nullptr || function_ == nullptr) return Status::failed_precondition("cluster probe not loaded");
  if (cluster_size < 1 || cluster_size > kMaxClusterSize || clusters < 1 || clusters > (1 << 20) / cluster_size) {
    return Status::invalid_argument("cluster launch of " + std::to_string(clusters) + " clusters of " +
                                    std::to_string(cluster_size) + " CTAs is out of range");
  }
  const DriverApi& api = *api_;
  const int blocks = clusters * cluster_size;
  LITHOS_RETURN_IF_ERROR(ensure_buffers(blocks));
  for (CUdeviceptr buf : {sms_, clusters_}) {
    if (CUresult r = api.cuMemsetD32Async(buf, kNotWritten, static_cast<std::size_t>(blocks), stream_);
        r != CUDA_SUCCESS) {
      return api.check(r, "cuMemsetD32Async(cluster probe)");
    }
  }
  CUlaunchAttribute attr{};
  attr.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
  attr.value.clusterDim.x = static_cast<unsigned>(cluster_size);
  attr.value.clusterDim.y = 1;
  attr.value.clusterDim.z = 1;
  CUlaunchConfig cfg{};
  cfg.gridDimX = static_cast<unsigned>(blocks);
  cfg.gridDimY = cfg.gridDimZ = 1;
  cfg.blockDimX = kThreads;
  cfg.blockDimY = cfg.blockDimZ = 1;
  cfg.sharedMemBytes = static_cast<unsigned>(smem_);
  cfg.hStream = stream_;
  cfg.attrs = &attr;
  cfg.numAttrs = 1;
  CUdeviceptr sms = sms_, ids = clusters_;
  long long spin = spin_cycles;
  unsigned vary = vary_spin ? 1U : 0U;
  void* args[] = {&sms, &ids, &spin, &vary};
  if (CUresult r = api.cuLaunchKernelEx(&cfg, function_, args, nullptr); r != CUDA_SUCCESS) {
    return api.check(
        r, ("cuLaunchKernelEx(cluster kernel, " + std::to_string(cluster_size) + " CTAs per cluster)").c_str());
  }

  // Never wait blindly: unmasked launches should always finish, but a launch
  // that does not must be reported, not waited on.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s_);
  while (true) {
    const CUresult q = api.cuStreamQuery(stream_);
    if (q == CUDA_SUCCESS) break;
    if (q != CUDA_ERROR_NOT_READY) return api.check(q, "cluster kernel");
    if (std::chrono::steady_clock::now() > deadline) {
      hung_ = true;
      return Status::unavailable("the cluster launch did not finish within " + std::to_string(timeout_s_) +
                                 " s; the context is unusable");
    }
    const timespec pause{0, 20000};  // 20 us
    nanosleep(&pause, nullptr);
  }
  std::vector<std::uint32_t> sm_of(static_cast<std::size_t>(blocks)), cluster_of(static_cast<std::size_t>(blocks));
  const std::size_t bytes = static_cast<std::size_t>(blocks) * sizeof(std::uint32_t);
  if (CUresult r = api.cuMemcpyDtoH(sm_of.data(), sms_, bytes); r != CUDA_SUCCESS) {
    return api.check(r, "cuMemcpyDtoH(cluster probe SM ids)");
  }
  if (CUresult r = api.cuMemcpyDtoH(cluster_of.data(), clusters_, bytes); r != CUDA_SUCCESS) {
    return api.check(r, "cuMemcpyDtoH(cluster probe cluster ids)");
  }
  std::vector<std::vector<int>> out(static_cast<std::size_t>(clusters));
  for (int k = 0; k < blocks; ++k) {
    const std::uint32_t id = cluster_of[static_cast<std::size_t>(k)];
    if (id == kNotWritten) continue;  // a block that never wrote leaves its cluster short
    const auto expected = static_cast<std::uint32_t>(k / cluster_size);
    if (id != expected) {
      return Status::failed_precondition("block " + std::to_string(k) + " reported cluster " + std::to_string(id) +
                                         ", expected " + std::to_string(expected) +
                                         ": the launch did not run as clusters of " + std::to_string(cluster_size) +
                                         " CTAs");
    }
    const std::uint32_t sm = sm_of[static_cast<std::size_t>(k)];
    out[id].push_back(sm == kNotWritten ? -1 : static_cast<int>(sm));
  }
  return out;
}

}  // namespace lithos::gpu
