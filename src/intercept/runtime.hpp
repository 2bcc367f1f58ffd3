// The interposer's state and the work its hooks do around the real driver
// calls: choosing the mask of each launch, the launch-descriptor callback that
// writes it, the C API and the statistics report at exit. It owns the masking
// backends (masking_backend.hpp), the C API's stream sets (stream_sets.hpp),
// the graph-exec records (graph_records.hpp) and the kernel information
// (kernel_info.hpp).
//
// Threading: hooks run on any application thread. The launch path reads
// atomics and this thread's frame only; per-stream masks sit behind a
// shared_mutex taken only once some stream has a mask; graph records and
// kernel names behind plain mutexes (graph calls and handle lookups are rare).
// The descriptor callback runs on the launching thread inside the driver
// (under its locks): it reads this thread's frame and atomics, never locks,
// never allocates, never calls the driver.
//
// Failure rule: nothing here may stop the host. Public functions are
// noexcept; whatever can throw inside is caught, counted as an internal error
// and logged once, and the launch goes on unmasked.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "gpu/qmd.hpp"
#include "gpu/slot_map.hpp"
#include "intercept/config.hpp"
#include "intercept/descriptor_backend.hpp"
#include "intercept/graph_records.hpp"
#include "intercept/green_backend.hpp"
#include "intercept/hook_table.hpp"
#include "intercept/kernel_info.hpp"
#include "intercept/launch_info.hpp"
#include "intercept/stats.hpp"
#include "intercept/stream.hpp"
#include "intercept/stream_sets.hpp"
#include "intercept/thread_frame.hpp"
#include "sched/launch_fit.hpp"
#include "sched/topology.hpp"
#include "sched/tpc_set.hpp"
#include "sched/types.hpp"

// The driver's opaque handle types (cuda.h typedefs pointers to these).
struct CUstream_st;
struct CUgraphExec_st;
struct CUctx_st;

namespace lithos::intercept {
struct DriverTable;
class Atomizer;
class DaemonLink;
class DeferredLaunches;
class GraphReplay;
class RealDriver;
}  // namespace lithos::intercept

namespace lithos::intercept {

// Whether lithos is switched off: LITHOS_DISABLE (config.hpp,
// disabled_from_env) at start, or lithos_set_enabled() later. Checked by
// every hook first; a relaxed atomic load.
bool lithos_disabled() noexcept;
void lithos_set_disabled(bool disabled) noexcept;

// C API result codes (lithos.h mirrors them).
inline constexpr int kApiOk = 0;
inline constexpr int kApiInvalid = -1;      // null argument, empty set, or no live TPC in it
inline constexpr int kApiNoSlotMap = -2;    // no slot map loaded (LITHOS_SLOT_MAP)
inline constexpr int kApiUnsupported = -3;  // the backend in use cannot do this (green, off)
inline constexpr int kApiInternal = -4;     // lithos failed inside; nothing changed

// One GPU's slot map and what the masks of launches on it need of it
// (Runtime::view_here): its topology and its live TPCs.
struct GpuView {
  explicit GpuView(gpu::SlotMap m) : map(std::move(m)), topology(map.topology), live(map.live_set()) {}
  gpu::SlotMap map;
  sched::Topology topology;  // map's
  sched::TpcSet live;        // map's live TPCs
  // On a GPU other than the configured map's: the process-wide set asked
  // for (LITHOS_TPCS / LITHOS_TPC_SET) made on this GPU's own map
  // (`requested`: there is one; `request_whole`: it is every live TPC).
  bool requested = false;
  bool request_whole = false;
  gpu::SlotMask request_slots{};
  sched::TpcSet request_tpcs;
};

class Runtime {
 public:
  // Made and owned by the library (library.hpp: Library::runtime(), at
  // first use), never destroyed (hooks can run during exit).

  const Config& config() const noexcept { return config_; }
  Counters& counters() noexcept { return counters_; }

  // ---- hook work (hooks.cpp) ----
  // Before a kernel launch on `stream`: decide the mask, put it in this
  // thread's frame with what the launch needs of it (safe_mask() applies
  // that when the descriptor is built). Throws only under
  // LITHOS_TEST_FAULT=launch.
  // `grant`: what lithosd granted this best-effort launch (null: nothing).
  void begin_launch(HookId id, Stream stream, const LaunchInfo& launch, const Grant* grant);
  // What a launch needs of a TPC set not to hang: its cluster (given, or the
  // kernel's compile-time shape) and, for a cooperative launch, its grid at
  // the kernel's occupancy. Asks the driver (cached per function).
  // `tpcs`: the set it is about to get (a set with a whole 8-TPC GPC holds
  // any cluster, so the compile-time shape need not be looked up).
  // `v`: the slot map of the GPU the set is on (null: assume no GPC whole).
  sched::LaunchNeeds launch_needs(const LaunchInfo& launch, const sched::TpcSet& tpcs, const GpuView* v) noexcept;
  // The rule every descriptor mask obeys (sched::fit_tpcs): widens *mask,
  // which enables `tpcs`, until a launch with `needs` cannot hang on it.
  // False when only the whole GPU is safe: no mask may be written then.
  // Counts what it did. Never allocates or locks (descriptor callback).
  // `v`: the slot map of the GPU the mask is for (null: nothing to widen with).
  bool safe_mask(const GpuView* v, const sched::TpcSet& tpcs, const sched::LaunchNeeds& needs,
                 gpu::SlotMask* mask) noexcept;
  // After it: counts a launch whose descriptor never showed.
  void end_launch() noexcept;

  // Graph instantiate / upload / launch. `exec` is null for instantiate.
  struct GraphCall {
    bool known = false;  // the exec has a record
    bool built = false;  // its descriptors were built before this call
    bool had_mask = false;
    gpu::SlotMask mask{};
    GraphNodeKeys nodes;  // the exec's kernel nodes, kept at instantiate (null: none)
  };
  // `graph` (instantiate only): the CUgraph being instantiated, whose kernel
  // nodes' needs are merged (cooperative nodes cannot be told apart in the
  // descriptor callback) and kept with the exec for its launches.
  // `grant`: what lithosd granted this best-effort graph launch (null: nothing).
  GraphCall begin_graph(CUgraphExec_st* exec, Stream stream, const Grant* grant, void* graph = nullptr) noexcept;
  void end_graph_instantiate(bool ok, CUgraphExec_st* exec) noexcept;
  // The TPCs a CUDA graph exec's kernels run on when its launch descriptors
  // are built already (they keep that mask for every later launch, whatever
  // a later grant says): the set chosen then, widened as the descriptors
  // were (sched::fit_tpcs), or every live TPC for descriptors built without
  // a mask. nullopt: not built yet (its next launch builds them with the set
  // current then), unknown, or no descriptor masks in this process.
  std::optional<sched::TpcSet> graph_pinned(CUgraphExec_st* exec) noexcept;
  void end_graph_launch(bool ok, CUgraphExec_st* exec, const GraphCall& call) noexcept;
  void forget_graph_exec(CUgraphExec_st* exec) noexcept;

  void forget_stream(Stream stream) noexcept;
  // What lithos knows of the kernels launched (kernel_info.hpp).
  KernelInfo& kernels() noexcept { return kernels_; }

  // cuDevicePrimaryCtxRetain succeeded with *ctx for `ordinal`: under the
  // green-context backend, replaces *ctx by the partition's context.
  void after_primary_ctx_retain(CUctx_st** ctx, int ordinal) noexcept;

  // Under a backend that routes launches (masking().routes_launches(): the
  // green-context one), the route of work for `stream` on the launch's
  // device; an empty route otherwise, or when anything fails (the launch
  // then goes to the caller's stream). `launch` (null for graphs): a launch
  // the partition could hang (sched::fit_tpcs) is not routed, so it runs on
  // the whole GPU.
  GreenBackend::Route route(Stream stream, const LaunchInfo* launch = nullptr) noexcept;

  // The descriptor callback (registered with gpu::install_descriptor_callback).
  void on_descriptor(std::uint8_t* qmd) noexcept;
  // What the driver calls: on_descriptor of `user` (the Runtime).
  static void descriptor_entry(void* user, std::uint8_t* qmd) { static_cast<Runtime*>(user)->on_descriptor(qmd); }

  void internal_error(HookId id, const char* what) noexcept;

  // ---- C API (capi.cpp); return kApi* codes ----
  int set_stream_tpcs(CUstream_st* stream, const sched::TpcSet& tpcs) noexcept;
  int clear_stream_tpcs(CUstream_st* stream) noexcept;
  int set_process_tpcs(const sched::TpcSet* tpcs) noexcept;  // null: whole GPU
  int live_tpcs(sched::TpcSet* out) noexcept;

  // ---- lithosd (client.cpp) ----
  // The slot map lithosd told the client of CUdevice `dev` at registration
  // (ipc::Welcome::slot_map), already checked to be that GPU's: it masks
  // the launches there when this process has no map of that GPU of its own
  // (no LITHOS_SLOT_MAP for it, none in the calibration cache).
  void adopt_daemon_map(int dev, gpu::SlotMap map) noexcept;

  // ---- reporting ----
  StatsHeader stats_header() noexcept;
  // Prints / writes the statistics if LITHOS_STATS / LITHOS_STATS_FILE ask,
  // and the atomizer's report if LITHOS_ATOM_REPORT does. A child forked
  // after the process called the driver writes neither (note_forked).
  void report_at_exit() noexcept;
  // The masking backend in force (masking_backend.hpp).
  const MaskingBackend& masking() const noexcept { return *backend_.load(std::memory_order_acquire); }

 private:
  // What it uses of its owner, the library: the driver, the atomizer, and
  // the statistics of deferred launches and graph replay (the exit report).
  Runtime(RealDriver& driver, DaemonLink& link, Atomizer& atomizer, DeferredLaunches& deferred, GraphReplay& replay);
  friend class Library;  // the one owner (library.hpp)

  // Once: logs config problems, loads the slot map, computes the process
  // mask. Called with mu_ held.
  void engage_locked();
  void use_map_locked(gpu::SlotMap map, const std::string& path);
  void apply_request_locked();         // the process-wide set asked for, on map_
  int no_slot_map_for_api() noexcept;  // kApiNoSlotMap for the C API, said once
  // The set asked for (config_.request) on `map` and its mask; the reason
  // when the map refuses it. `warn`: say when LITHOS_TPCS asks more than it has.
  Result<std::pair<gpu::SlotMask, sched::TpcSet>> request_on(const gpu::SlotMap& map, bool warn) const;
  void follow_first_gpu_locked();  // map_ of the first launch's GPU
  void engage() noexcept;
  // Once, on the first launch-like hook (the driver is initialised then):
  // installs the descriptor callback, checks the device, logs the backend.
  void attach() noexcept {
    if (!attached_.load(std::memory_order_acquire)) attach_slow();
  }
  void attach_slow() noexcept;
  // Subscribes the descriptor callback (mu_ held): the descriptor backend,
  // or none when the driver refuses (descriptor_backend.hpp says when).
  MaskingBackend* install_callback_locked();
  // What choose() tells the backend when a launch gets no mask.
  Unmasked unmasked() const noexcept;
  // After the C API stored a mask: installs the callback if the backend was
  // idle. Returns false when no backend can apply the mask.
  bool ensure_callback() noexcept;

  // The mask (and its set) wanted for work on `stream`, or why there is none.
  struct Choice {
    gpu::SlotMask slots;
    sched::TpcSet tpcs;
    const GpuView* view = nullptr;  // the GPU's slot map the mask is made with
  };
  // `lasting`: the set stays with what the launch builds (a CUDA graph's
  // descriptors), so a high-priority tenant of lithosd gets its lasting set.
  // `grant`: exactly that set (a best-effort launch lithosd granted).
  std::optional<Choice> choose(Stream stream, const Grant* grant, SkipReason* why, bool lasting = false) noexcept;
  // The merged needs of a graph's kernel nodes (child graphs included);
  // `keys` (not null): each kernel node's identity and grid too.
  sched::LaunchNeeds graph_needs(void* graph, std::vector<GraphNodeKey>* keys = nullptr) noexcept;
  // Right-sizing (docs/efficiency.md, "Right-sizing"). The set a high-priority
  // tenant's launches are narrowed from: its allocation (`lasting`: the
  // lasting set) on the launch's GPU, every live TPC when that is the whole
  // GPU; false when this is no such tenant or nothing is published.
  bool right_size_base(bool lasting, sched::TpcSet* base, const GpuView** view) noexcept;
  // An eager launch of such a tenant: a right size of t TPCs in lithosd's
  // table narrows *choice to the t lowest TPCs of the allocation, when the
  // launch cannot hang there (sched::fit_tpcs keeps it as is); sets
  // ThreadFrame::narrowed for its report.
  void right_size_launch(const LaunchInfo& launch, std::optional<Choice>* choice) noexcept;
  // A graph of such a tenant about to build its descriptors: each kernel
  // node's right size into t_node_sizes, for on_descriptor.
  void right_size_graph(const std::vector<GraphNodeKey>& nodes) noexcept;
  // In on_descriptor, for a graph descriptor (ThreadFrame::node_sizes): the
  // narrowed set of the node it matches by grid width; false: none.
  bool node_set(const std::uint8_t* qmd, gpu::QmdVersion v, const sched::LaunchNeeds& needs,
                sched::TpcSet* out) noexcept;
  // The descriptor mask enabling exactly `tpcs` (every TPC live) on `v`'s
  // GPU, cached per thread for the last set asked.
  static gpu::SlotMask slots_for(const GpuView& v, const sched::TpcSet& tpcs) noexcept;
  // The slot map of the GPU of the calling thread's current context, for
  // the sets lithosd decides (grants, a high-priority tenant's allocation):
  // the configured map's GPU (the first launch's), or another GPU's map
  // from the calibration cache, loaded at its first launch (load_view).
  // Null when that GPU has none: its launches are not masked.
  const GpuView* view_here() noexcept;
  const GpuView* load_view(int dev) noexcept;
  // A view of GPU `dev` from `map`, with the process-wide set asked for made
  // on it; kept in view_store_.
  const GpuView* make_view_locked(int dev, gpu::SlotMap map, const std::string& from);
  // A calibrated slot map of GPU `uuid` from the cache (the configured
  // map's folder, then the default one); `looked` names the last folder.
  std::optional<std::pair<gpu::SlotMap, std::string>> cached_map_locked(const std::string& uuid, std::string* looked);

 public:
  // The daemon client's hooks into the launch path (client.hpp): a launch
  // made on `stream` is reported to lithosd when this process is a
  // high-priority tenant. `graph`: a CUDA-graph launch (function = exec).
  // `runs_free`: a best-effort launch made at once (Grant::runs_free).
  void after_launch(Stream stream, const LaunchInfo& launch, bool graph, bool runs_free) noexcept;
  // Before such a launch (high priority, or best effort running free): the
  // stream priority the engine decided for it (DaemonClient::before_immediate).
  // begin_launch calls it with the launched function (`timed_key`: a
  // sample of those launches is timed one by one); the graph-launch hook
  // calls it itself, with none.
  void before_immediate_launch(Stream stream, bool runs_free, const void* timed_key = nullptr) noexcept;

 private:
  // Sets the process mask (null: whole GPU). Called with mu_ held.
  void publish_process_mask_locked(const gpu::SlotMask* slots, const sched::TpcSet& tpcs);

  RealDriver& real_;
  DaemonLink& link_;
  Atomizer& atomizer_;
  DeferredLaunches& deferred_;
  GraphReplay& replay_;
  Config config_;
  Counters counters_;
  KernelInfo kernels_{counters_, atomizer_};
  // In a child forked after the parent called the driver: the counters and
  // the atomizer's state are the parent's copy (and CUDA cannot be used in
  // such a child), so its exit reports nothing; the parent reports its own.
  std::atomic<bool> inherited_{false};
  void note_forked() noexcept;

  std::mutex mu_;  // engage/attach/process-mask publication
  bool engaged_ = false;
  std::atomic<bool> attached_{false};
  // The masking backends (masking_backend.hpp), one of them in force:
  // pending until the first launch (or a primary-context retain) decides.
  DescriptorBackend descriptor_{&Runtime::descriptor_entry, this};
  GreenBackend green_{counters_};
  UnmaskedBackend pending_{UnmaskedBackend::Why::kPending};
  UnmaskedBackend none_{UnmaskedBackend::Why::kNone};
  UnmaskedBackend off_{UnmaskedBackend::Why::kOff};
  std::atomic<MaskingBackend*> backend_{&pending_};

  std::optional<gpu::SlotMap> map_;
  std::string map_path_;  // the file map_ came from (guarded by mu_)
  // From map_ (set in engage_locked, and again at the first launch when it
  // is on another GPU: before any launch reads them).
  sched::Topology topology_;
  sched::TpcSet live_;
  // GPU views (view_here): the configured map's (primary_view_, set at
  // attach) and any other GPU's, by CUdevice; kept for the life of the
  // process (a launch may hold one).
  std::atomic<const GpuView*> primary_view_{nullptr};
  std::array<std::atomic<const GpuView*>, 64> views_{};  // null: not looked up yet
  std::array<std::atomic<bool>, 64> no_view_{};          // looked up: none
  std::vector<std::unique_ptr<GpuView>> view_store_;     // guarded by mu_
  bool adopted_ = false;                                 // a view from lithosd's map (adopt_daemon_map); guarded by mu_
  // The process-wide mask: an immutable entry swapped atomically; replaced
  // entries are kept (never freed) because a launch may still read them.
  // `whole` (stream_sets.hpp): no mask written, no callback needed, so
  // "lithos on the whole GPU" costs only the hook.
  std::atomic<const MaskEntry*> process_mask_{nullptr};
  std::vector<std::unique_ptr<MaskEntry>> mask_entries_;  // guarded by mu_
  std::atomic<SkipReason> process_skip_{SkipReason::kNotRequested};
  // lithos_set_process_tpcs was called: its set replaces the one asked for
  // (LITHOS_TPCS / LITHOS_TPC_SET) on every GPU, not only the primary's.
  std::atomic<bool> process_set_by_api_{false};
  std::string process_mask_text_ = "whole GPU";  // guarded by mu_

  StreamSets stream_sets_;  // the C API's per-stream sets

  // Which devices the slot map describes: all launches (single matching
  // device), none, or checked per launch (several devices).
  enum class DeviceCheck : std::uint8_t { kAll, kNone, kPerLaunch };
  std::atomic<DeviceCheck> device_check_{DeviceCheck::kAll};
  // The driver's table as the first launch found it (attach): null before,
  // so that nothing here asks the driver before a launch does.
  const DriverTable* attached_driver_ = nullptr;

  std::atomic<int> qmd_version_{0};  // last gpu::QmdVersion seen

  GraphExecRecords graphs_;  // what each CUDA graph exec was built with

  std::array<std::atomic<bool>, kHookCount> hook_error_logged_{};
};

}  // namespace lithos::intercept
