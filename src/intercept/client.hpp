// liblithos.so as a client of lithosd (docs/daemon.md): registration over the
// daemon's socket, then the shared-memory channel for every launch.
//
//  - High priority (the tenant's class, told by the daemon): launches never
//    wait. Each goes out on the tenant's current allocation (published by the
//    daemon in the channel) and is reported after it was made. A completion
//    marker (cuStreamWriteValue64 of the launch's number into the stream's
//    completion slot, which the daemon reads) follows every CUDA-graph launch
//    and, coalesced, eager launches: a launch writes a marker when the
//    stream's previous marker has been reached and is at least 50 us old;
//    otherwise the stream is "dirty" and the tracker thread writes one once
//    the stream has been quiet for 50 us. Markers cost ~2 us of host time
//    each, launches far less.
//  - Best effort: a launch is submitted and its atoms wait for grants (TPC set
//    + block range); each atom is launched as granted and followed by the
//    grant's marker. Waiting for a grant is the throttle. While the daemon
//    says the tenant runs free (no high-priority tenant has work to
//    protect, sched::Policy::runs_free), launches go out at once on the
//    published allocation and are reported, as high-priority ones.
//  - Registration never holds the application up: the first launch starts
//    the client's thread (one per client), which registers in that launch's
//    context and, later, registers again after the daemon went away (at
//    most once a second). The first launch waits up to
//    LITHOS_REGISTER_WAIT_MS (5 ms) for that first attempt, so that under a
//    healthy daemon a process is scheduled from its first launch; no other
//    launch ever waits for a registration. Until registered, a process runs
//    as without a daemon (pass-through, or its configured TPC set).
//  - The client trusts only its daemon: before it sends anything, the
//    process listening on the socket must run as root, as this user or as
//    LITHOS_DAEMON_UID, in a folder that belongs to one of them and that no
//    one else may write to (ipc::check_daemon); the channel must be a
//    memfd sealed against resizing (ipc::Channel::attach). A daemon that
//    fails either is said once on stderr and never asked again.
//  - Failure never harms the host: no daemon at start -> pass-through (said
//    once); the daemon gone (socket closed, heartbeat stale, or its clean
//    shutdown flag) -> high-priority launches keep their last allocation,
//    best-effort ones run on the fallback set the daemon gave (never the
//    whole GPU), and the client registers again when the daemon is back. A
//    daemon that stops answering costs at most one grant wait
//    (LITHOS_GRANT_TIMEOUT_MS) per outage: the launches waiting then give
//    up together and later ones do not wait. No wait is unbounded. A forked
//    child never touches its parent's channel.
//  - While registered, the client's thread refreshes the channel's
//    client_beat_ns at least about once a millisecond.
//
// Thread-safety: every public function may be called from any application
// thread. The submit ring has one producer at a time (a spin lock); grants
// are demultiplexed per stream slot under a mutex.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "gpu/slot_map.hpp"
#include "intercept/config.hpp"
#include "intercept/launch_info.hpp"
#include "intercept/stream.hpp"
#include "intercept/thread_frame.hpp"
#include "ipc/protocol.hpp"
#include "sched/tpc_set.hpp"

struct CUstream_st;
struct CUevent_st;
struct CUctx_st;

namespace lithos::intercept {

class DaemonClient {
 public:
  // One client per GPU (CUdevice) the process launches on, made and owned
  // by the daemon link (daemon_link.hpp: DaemonLink::current(),
  // of_stream()), never destroyed (hooks run at exit).
  //
  // Where a client hands the slot map lithosd sent at registration
  // (ipc::Welcome::slot_map, already checked to be its GPU's): the masks'
  // owner, which keeps it where the process has no map of that GPU.
  using MapSink = void (*)(int device, gpu::SlotMap map) noexcept;

  bool wanted() const noexcept { return wanted_; }
  // True when the channel is usable now. The first call starts the client's
  // thread, which registers (and registers again after the daemon went
  // away), and waits up to LITHOS_REGISTER_WAIT_MS for its first attempt;
  // no other call waits. Needs an initialised driver (called from launch
  // hooks, in a thread whose current context is on this client's GPU).
  bool ready() noexcept;
  bool connected() const noexcept { return state_.load(std::memory_order_acquire) == State::kConnected; }
  bool high() const noexcept { return high_.load(std::memory_order_acquire); }
  // Whether this process registered and was told its class (even if the
  // daemon is gone now): decides the fallback behaviour.
  bool registered_once() const noexcept { return registered_once_.load(std::memory_order_acquire); }

  // A driver call of this process on this client's GPU returned `code`, a
  // sticky error (ipc::is_sticky_cuda_error; 0: lithosd said the GPU
  // faulted): the process's CUDA context there is lost. Said once on
  // stderr, told to lithosd through the channel (ChannelHeader::
  // client_fault), and from then on nothing of this process is scheduled
  // on this GPU: launches go out as they are (the driver fails them), no
  // grant is waited for, no registration is tried again.
  void report_fault(std::uint32_t code) noexcept;
  std::uint32_t fault() const noexcept { return fault_.load(std::memory_order_acquire); }

  // High priority: the tenant's allocation now (false: none published);
  // `lasting`: the one for a launch whose set lasts, a CUDA graph's
  // (ipc::ChannelHeader::alloc).
  bool allocation(sched::TpcSet* out, bool lasting = false) const noexcept;
  // Best effort: true while the daemon lets this tenant run free
  // (ipc::kChannelRunsFree): its launches go out at once on *out, the
  // allocation, and are reported as a high-priority tenant's are.
  bool runs_free(sched::TpcSet* out) const noexcept;
  // Before a launch that goes out at once (high priority, or best effort
  // running free) on `stream`: sets the stream priority the engine decided
  // for such launches (ipc::Welcome::immediate_priority), once per stream
  // (LITHOS_HW_PRIORITY=0: never). Grants carry their own (next_grant sets
  // it). Streams being captured are left alone.
  // `timed_key` (high priority, eager launches; null for graphs): the
  // launched function. A sample of them is timed one by one (docs/efficiency.md,
  // "hp kernels timed one by one"): the first `first` launches of each function, then
  // one in `every`, at most `per_s` a second; a picked launch gets a timing
  // event recorded here, just before it, and one after it in
  // report_running. The client's thread polls them (cuEventQuery, never a
  // wait) and sends the daemon each launch's run time (ipc::SubmitType::
  // kSample). A stream being captured is never timed.
  void before_immediate(Stream stream, const void* timed_key = nullptr) noexcept;
  // Reports a launch already made on `stream` (graph: a CUDA-graph launch),
  // and writes or schedules its completion marker.
  // `statics`: the kernel's (KernelInfo::identity; unused for a graph).
  // `tpcs`: how many TPCs of the allocation it used (0: all of it).
  void report_running(Stream stream, const LaunchInfo& li, std::uint64_t kernel, bool graph,
                      const KernelStatics& statics, std::uint32_t tpcs = 0) noexcept;
  // The TPC count lithosd published for `kernel` (SubmitMsg::kernel) at
  // `grid` in this client's right-size table (ipc::SizeTable), 0: none (or
  // not connected). Lock-free; for the launches made at once.
  std::uint32_t right_size(std::uint64_t kernel, const sched::Dim3& grid) const noexcept;

  // Best effort.
  struct Ticket {
    std::uint32_t slot = 0;
    std::uint64_t seq = 0;
    std::uint32_t generation = 0;
  };
  // Submits a launch; nullopt when the daemon cannot take it (the caller
  // runs it on the fallback set).
  // `pinned` (graphs): the TPCs its kernels run on whatever the grant
  // (Runtime::graph_pinned); the daemon grants it a set that holds them.
  // `id`: the launched function's (KernelInfo::identity; its statics are unused
  // for a graph).
  std::optional<Ticket> submit(Stream stream, const LaunchInfo& li, const LaunchIdentity& id, std::uint32_t unit,
                               bool whole, bool graph, const sched::TpcSet* pinned = nullptr) noexcept;
  // Submitting ahead (LITHOS_SUBMIT_AHEAD=1): a deferred launch is submitted
  // when it is queued, so that the daemon holds several of a process's
  // launches at once and their grants are ready when the worker reaches
  // them. The worker makes the launch inside an AheadScope holding that
  // ticket: the launch's submit() takes it instead of submitting again, if
  // it names the same stream and kernel; a ticket no submit takes is
  // abandoned (its grants are dropped by the stream's next wait; its atoms'
  // accounting ends at the stream's next marker).
  bool submit_ahead() const noexcept { return submit_ahead_; }
  void count_ahead() noexcept { ahead_.fetch_add(1, std::memory_order_relaxed); }
  struct Ahead {
    Ticket ticket;
    std::uint64_t kernel = 0;
    const DaemonClient* client = nullptr;  // the GPU's client it was submitted to
  };
  class AheadScope {
   public:
    explicit AheadScope(const std::optional<Ahead>& a) noexcept;
    ~AheadScope();
    AheadScope(const AheadScope&) = delete;
    AheadScope& operator=(const AheadScope&) = delete;
  };
  // Waits for the next grant of `t`'s launch. False when the daemon is gone
  // (or the wait outlasted every bound): run what is left on fallback().
  bool next_grant(const Ticket& t, ipc::GrantMsg* out) noexcept;
  // After an atom was launched on `stream`: its marker.
  void atom_launched(const Ticket& t, Stream stream, std::uint64_t marker) noexcept;
  sched::TpcSet fallback() const noexcept;

  void forget_stream(Stream stream) noexcept;
  // Held around the application's cuStreamBeginCapture on `stream`: the
  // tracker looks whether a stream is being captured and writes its marker
  // under the same lock, so that a capture never begins between the two
  // (the marker would be taken into the graph). Holds nothing when the
  // stream has no slot.
  std::unique_lock<std::mutex> hold_markers(Stream stream) noexcept;
  // The host synchronises `stream` (`every`: all streams, cuCtxSynchronize).
  // Before the call: where each stream the daemon knows stands. After it
  // succeeded: synced() marks those launches done in the completion page
  // (the host knows they finished; no marker needed) and tells the daemon,
  // which restarts the streams' launch ordinals (the predictor's key:
  // kernel + ordinal since the last synchronisation).
  struct SyncPoint {
    std::uint32_t slot = 0;
    std::uint64_t seq = 0;  // launches submitted on it before the synchronisation
    std::uint32_t generation = 0;
  };
  std::vector<SyncPoint> sync_points(Stream stream, bool every) noexcept;
  void synced(const std::vector<SyncPoint>& points) noexcept;

  struct Stats {
    std::uint64_t reported = 0, markers = 0, tracker_markers = 0, tracker_wakes = 0, submits = 0, grants = 0;
    std::uint64_t grant_wait_ns = 0, grant_wait_max_ns = 0, fallbacks = 0, reconnects = 0, dropped_reports = 0;
    std::uint64_t syncs = 0;                                  // kSync messages sent
    std::uint64_t spilled = 0;                                // reports queued in the client while the ring was full
    std::uint64_t doorbells = 0;                              // sleeping daemon woken through the socket
    std::uint64_t priorities_set = 0, priority_failures = 0;  // stream priorities set (apply_priority)
    std::uint64_t ahead = 0, ahead_taken = 0;                 // submitted ahead; taken by their launch
    std::uint64_t outages = 0;                                // times the daemon was found gone after registering
    std::uint64_t launches_unregistered = 0;                  // launches (ready()) made while not registered
    std::uint64_t attempts = 0, failed_attempts = 0;          // registrations tried, and those that failed
    std::uint64_t register_waits = 0, register_wait_timeouts = 0;  // first-launch waits, and those that ran out
    // Timed hp launches (before_immediate): picked and timed; samples sent;
    // picked but over the per-second cap; not timed because the stream was
    // being captured, no timing event was free (or the pool is of another
    // context), an event call failed, the launch was not reported (failed,
    // or its report dropped), it ran longer than the bound (or its events
    // never completed within it), or its stream or channel was gone by then.
    std::uint64_t timed = 0, samples_sent = 0, samples_capped = 0, samples_captured = 0, samples_no_event = 0;
    std::uint64_t samples_failed = 0, samples_unreported = 0, samples_too_long = 0, samples_stale = 0;
  };
  Stats stats() const noexcept;

 private:
  friend class DaemonLink;  // makes the clients, gives them their settings, marks them forked
  // kOtherGpu: the daemon at this GPU's socket serves another GPU (a socket
  // without %g whose daemon schedules a GPU other than this client's, or
  // one this process does not see): never registered, never tried again;
  // launches on this GPU run as if no daemon were configured.
  // kRefused: the daemon failed a trust check (ipc::check_daemon, its
  // channel): never registered, never tried again.
  // kFaulted: this process's context on this GPU is lost (a sticky error,
  // or lithosd said so: ipc::kChannelFaulted): nothing more is scheduled,
  // never registered again.
  enum class State : std::uint8_t { kIdle, kConnected, kGone, kFailed, kForked, kOtherGpu, kRefused, kFaulted };
  // Whether the daemon's GPU (`uuid`, from its welcome) is this client's
  // (true when the daemon names none, or the driver cannot tell); `why`
  // says what this client's GPU is otherwise.
  bool serves_my_gpu(const std::string& uuid, std::string* why) noexcept;
  // The UUID of this client's GPU; false when the driver cannot say.
  bool my_gpu(std::string* uuid) const noexcept;
  // Whether this client opened a slot for `stream` (DaemonLink::of_stream).
  bool has_slot(Stream stream) noexcept;
  // At registration: the daemon's slot map of this client's GPU (Welcome::slot_map) to the runtime.
  void adopt_daemon_map(ipc::Welcome& w) noexcept;
  // This client's state and counters as one JSON object
  // (DaemonLink::stats_json_all). `process_members`: the process-wide
  // members, which the top-level object has and each `gpus` entry leaves
  // out (null).
  std::string stats_json(const std::function<std::string()>* process_members) const;
  struct Slot {
    std::atomic<bool> open{false};
    std::atomic<std::uint32_t> opened{0};  // times the slot was opened (a timed launch's sample names its stream)
    Stream stream;
    std::atomic<std::uint64_t> seq{0};          // launches submitted on it
    std::atomic<std::uint64_t> last_marker{0};  // value of the last marker written (the largest)
    std::mutex marking;                         // held while a marker is enqueued (write_marker)
    std::atomic<bool> dirty{false};             // launches after the last marker
    std::atomic<std::uint64_t> last_launch_ns{0};
    std::atomic<std::uint64_t> last_marker_ns{0};                           // when the last marker was enqueued
    std::atomic<ipc::StreamPriority> priority{ipc::StreamPriority::kKeep};  // last set on it by us
  };
  // A launch writes its own marker only after its stream was quiet this
  // long; the tracker marks a burst once its last marker is this old, and
  // closes it once the stream has been quiet this long (a marker costs
  // ~1.7 us of host time on the H100).
  static constexpr std::uint64_t kMarkerGapNs = 50'000;
  // The tracker looks every kTrackerNapNs while a stream is dirty or had a
  // launch in the last kTrackerBusyNs; otherwise it naps up to
  // kTrackerIdleNapNs (an idle client woke ~900 times a second instead of
  // ~5200 on the CPU machine), and the launch that makes a stream dirty
  // wakes it (wake_tracker).
  static constexpr long kTrackerNapNs = 100'000;
  static constexpr std::uint64_t kTrackerBusyNs = 1'000'000;
  static constexpr long kTrackerIdleNapNs = 1'000'000;
  explicit DaemonClient(int device) noexcept;
  // At the first ready(): starts the client's thread and waits up to
  // register_wait_ns_ for its first registration attempt.
  void start() noexcept;
  // In the client's thread while not connected: one registration attempt,
  // unless the last began less than a second ago (then naps until then).
  void register_paced() noexcept;
  bool connect_locked() noexcept;
  void disconnect(State why) noexcept;
  bool alive() noexcept;
  // The slot of a stream, opening it (kStreamOpen) on first use; -1 when none is free.
  int slot_of(Stream stream) noexcept;
  // Hello::flags: whether this process's contexts are MPS clients.
  static std::uint32_t mps_flags() noexcept;
  // Pushes `m` to the submit ring; `count` (reported_, submits_), if given,
  // grows by one when it went in. Only push writes them. A full ring waits
  // up to 1 ms for the daemon, then gives up; with `spill` (reports of
  // launches already made, which must never wait) a full ring queues `m`
  // in the client instead (spill_, up to kSpillMax), sent ahead of anything
  // later once the daemon reads again.
  // `bell`: a launch that will wait for its grant; it wakes a daemon asleep
  // in poll() (ring_if_idle).
  bool push(const ipc::SubmitMsg& m, std::atomic<std::uint64_t>* count = nullptr, bool spill = false,
            bool bell = false) noexcept;
  // Moves spilled messages into ring `l` while it has room; true when none
  // is left. Holds submit_lock_.
  bool flush_spill_locked(ipc::ChannelLayout* l) noexcept;
  // After a push of a launch that waits for its grant: wakes a daemon that
  // sleeps in poll() (ipc::kChannelDaemonIdle).
  void ring_if_idle(ipc::ChannelLayout* l) noexcept;
  // The same, taking the lock, when anything is spilled (the tracker).
  void flush_spill() noexcept;
  static constexpr std::size_t kSpillMax = 1 << 16;
  // Sets stream priority `p` on slot `slot`'s stream unless it has it
  // already (kKeep: nothing). Called in the launching thread, before the launch.
  void apply_priority(std::uint32_t slot, ipc::StreamPriority p) noexcept;
  // `now`: the time it is (now_ns), 0 to take it.
  // `unless_captured` (the tracker): writes nothing, and returns false, when
  // the stream is being captured (looked at under the slot's marking lock,
  // which hold_markers takes around a capture's beginning). True otherwise.
  bool write_marker(Stream stream, std::uint32_t slot, std::uint64_t value, std::uint64_t now = 0,
                    bool unless_captured = false) noexcept;
  void tracker() noexcept;
  // After a launch made a stream dirty: wakes the tracker if it is in its
  // long nap (one futex call per burst of launches; a wake missed in a race
  // with the tracker falling asleep costs at most that nap).
  void wake_tracker() noexcept;
  static std::uint64_t now_ns() noexcept;

  const int device_;
  bool wanted_ = false;
  std::string socket_, tenant_;
  uid_t daemon_uid_ = static_cast<uid_t>(-1);   // trusted as lithosd besides root and this user (ipc::check_daemon)
  std::uint64_t register_wait_ns_ = 5'000'000;  // the first launch's wait for registration (start())
  bool fallback_set_ = false;   // a TPC set was configured (config().request): said when the daemon is not there
  MapSink map_sink_ = nullptr;  // where the daemon's slot map goes (adopt_daemon_map)
  mutable std::mutex gpu_mu_;
  std::string gpu_;  // the daemon's GPU UUID, from the welcome ("" : not named); guarded by gpu_mu_
  // The context current when it registered: the tracker writes its
  // markers in it (a legacy default stream names no context of its own).
  std::atomic<CUctx_st*> ctx_{nullptr};
  double grant_timeout_ms_ = 500;
  bool hw_priority_ = true;
  bool submit_ahead_ = false;
  std::atomic<std::uint64_t> ahead_{0}, ahead_taken_{0};
  std::atomic<ipc::StreamPriority> immediate_priority_{ipc::StreamPriority::kKeep};
  std::atomic<State> state_{State::kIdle};
  std::atomic<std::uint32_t> fault_{0};  // report_fault's code (kFaultByDaemon: lithosd's word)
  static constexpr std::uint32_t kFaultByDaemon = ~0U;
  std::atomic<bool> high_{false};
  std::atomic<bool> registered_once_{false};
  std::mutex connect_mu_;
  std::uint64_t last_attempt_ns_ = 0;       // the client's thread's own
  std::atomic<std::uint64_t> attempts_{0};  // registration attempts begun (written by the client's thread)
  std::atomic<std::uint64_t> failed_attempts_{0};
  // Attempts ended: the futex word the first launch waits on (start()).
  std::atomic<std::uint32_t> attempts_done_{0};
  std::atomic<std::uint64_t> register_waits_{0}, register_wait_timeouts_{0};
  std::atomic<std::uint64_t> first_launch_ns_{0};      // when start() ran
  std::atomic<std::uint64_t> first_wait_ns_{0};        // how long the first launch waited
  std::atomic<std::uint64_t> registered_after_ns_{0};  // first launch -> first registration (0: never)
  std::atomic<std::uint64_t> outages_{0}, launches_unregistered_{0};
  std::atomic<int> sock_{-1};  // written by the client's thread (and a forked child's handler)
  struct ChannelHolder;
  // Every channel ever attached, kept mapped for the life of the process: a
  // thread may still write a marker into an old one after a reconnect.
  std::vector<std::unique_ptr<ChannelHolder>> channels_;  // guarded by connect_mu_
  ipc::ChannelLayout* layout_ = nullptr;                  // the mapping (valid while connected)
  std::uint64_t dev_base_ = 0;                            // device address of the completion page
  std::atomic<std::uint32_t> generation_{0};
  std::uint64_t fallback_[2] = {0, 0};
  std::atomic<std::uint64_t> last_alive_check_ns_{0};

  std::atomic_flag submit_lock_ = ATOMIC_FLAG_INIT;
  // The submit ring's consumer index as last read (ipc::SpscRing::push), for
  // the ring of that channel; guarded by submit_lock_.
  const ipc::ChannelLayout* submit_seen_layout_ = nullptr;
  std::uint64_t submit_seen_tail_ = 0;
  std::deque<ipc::SubmitMsg> spill_;        // guarded by submit_lock_
  std::atomic<std::size_t> spill_size_{0};  // spill_.size(), read without the lock
  std::atomic<std::uint64_t> spilled_{0};   // messages that went through spill_
  std::atomic<std::uint64_t> doorbells_{0};
  std::mutex slots_mu_;
  std::unordered_map<std::uintptr_t, std::uint32_t> slot_of_;
  Slot slots_[ipc::kMaxStreams];
  std::mutex grant_mu_;
  std::deque<ipc::GrantMsg> queued_[ipc::kMaxStreams];  // grants popped from the ring, per slot

  // Timing hp launches one by one (before_immediate). Settings from the
  // environment (Config::hp_sample_*); per_s == 0: off.
  std::uint32_t sample_first_ = 8, sample_every_ = 64, sample_per_s_ = 200;
  std::uint64_t sample_max_ns_ = 1'000'000'000;
  // Launches per function so far, in a fixed table indexed by a hash of the
  // function (functions that share an entry share its count: fewer samples,
  // never more than the per-second cap).
  static constexpr std::size_t kSampleKeys = 1024;
  std::atomic<std::uintptr_t> sample_keys_[kSampleKeys] = {};
  std::atomic<std::uint32_t> sample_counts_[kSampleKeys] = {};
  // A pool of kSamplePairs timing-event pairs, made once in the context the
  // client registered in (make_sample_pool), and the samples in flight.
  static constexpr std::uint32_t kSamplePairs = 32;
  struct SamplePair {
    CUevent_st* start = nullptr;
    CUevent_st* end = nullptr;
  };
  struct PendingSample {
    std::uint32_t pair = 0;
    std::uint32_t slot = 0;
    std::uint32_t opened = 0;  // the slot's Slot::opened when reported
    const ipc::ChannelLayout* layout = nullptr;
    std::uint64_t seq = 0;
    std::uint64_t kernel = 0;
    std::uint64_t since_ns = 0;
  };
  std::mutex sample_mu_;  // guards what follows
  bool sample_pool_made_ = false;
  CUctx_st* sample_ctx_ = nullptr;
  SamplePair sample_pairs_[kSamplePairs];
  std::vector<std::uint32_t> free_pairs_;
  std::vector<PendingSample> pending_samples_;
  std::uint64_t sample_window_s_ = 0;
  std::uint32_t sample_window_n_ = 0;
  std::atomic<std::size_t> pending_samples_n_{0};  // pending_samples_.size(), read without the lock
  std::atomic<std::uint64_t> timed_{0}, samples_sent_{0}, samples_capped_{0}, samples_captured_{0},
      samples_no_event_{0}, samples_failed_{0}, samples_unreported_{0}, samples_too_long_{0}, samples_stale_{0};
  // In the client's thread at registration: the pool, once.
  void make_sample_pool() noexcept;
  // In the launching thread: whether this launch of `key` is to be timed
  // (counts and the per-second cap), then its start event.
  void start_sample(Stream stream, const void* key) noexcept;
  void free_pair(std::uint32_t pair) noexcept;
  // In the client's thread: sends the samples whose events completed;
  // true while some are still pending.
  bool poll_samples() noexcept;

  // The client's thread (tracker()): started at the first launch.
  std::thread tracker_;
  std::atomic<bool> tracker_started_{false};
  std::atomic<bool> tracker_running_{false};
  std::atomic<std::uint32_t> tracker_idle_{0};   // 1 while the tracker is in its long nap (a futex word)
  std::atomic<std::uint64_t> tracker_wakes_{0};  // times a launch woke it

  // Grant waits (submit or previous atom -> grant in hand), by upper edge in
  // microseconds (kWaitEdgesUs; the last bucket is everything above).
  static constexpr double kWaitEdgesUs[] = {1,  2,  3,  4,   5,   6,   8,   10,  12,   15,   20,   25,    30,
                                            40, 50, 75, 100, 150, 200, 300, 500, 1000, 2000, 5000, 10000, 1e300};
  static constexpr std::size_t kWaitBuckets = sizeof(kWaitEdgesUs) / sizeof(kWaitEdgesUs[0]);
  std::atomic<std::uint64_t> wait_hist_[kWaitBuckets] = {};
  // The upper edge of the bucket holding quantile q of the waits (0 when none).
  double wait_quantile_us(double q) const noexcept;

  mutable std::atomic<std::uint64_t> reported_{0}, markers_{0}, tracker_markers_{0}, submits_{0}, grants_n_{0},
      grant_wait_ns_{0}, grant_wait_max_ns_{0}, fallbacks_{0}, reconnects_{0}, dropped_reports_{0}, syncs_{0},
      priorities_set_{0}, priority_failures_{0};
};

}  // namespace lithos::intercept
