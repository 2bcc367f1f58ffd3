// lithosd's core: one loop that hosts the scheduling Engine (the same object
// code the simulator drives) and serves every client process of one GPU
// (docs/daemon.md).
//
//   clients --Hello--> socket --Welcome + channel fd--> clients
//   channel.submit  --> validate --> Engine::submit (best effort: waits for grants)
//                                    Engine::submit_running (high priority: already on the GPU)
//   channel.completed (written by the GPU) --> Engine::atom_finished
//   Engine::dispatch --> channel.grant (TPC set + block range + marker of each atom)
//   allocations --> channel.header.alloc (high priority: where its launches go now)
//
// Rules kept here (the hot-path rules of docs/architecture.md):
//  - a high-priority launch never waits for the daemon: it is reported after
//    it was launched and only accounted;
//  - a best-effort atom waits for its grant (that wait is the throttle);
//  - completion comes from the GPU (completion slots), never from a timer;
//  - a client that sends anything malformed, or whose socket closes, is
//    dropped and everything it held is given back at once (its queues are
//    closed in the Engine); other clients never notice;
//  - what a client can make the daemon hold is bounded (DaemonConfig's
//    max_* keys): a client over a bound is not read until it is under
//    again, one that stops (its heartbeat stands still) or makes no progress
//    while it holds work is dropped, doorbells and connections are rate- and
//    count-limited (docs/daemon.md, "Hostile clients").
//
// Threading: one thread calls step()/run(); nothing else touches a Daemon
// except status_json() through the same thread (status requests are served
// inside step()).
#pragma once

#include <sys/types.h>

#include <array>
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

#include "common/status.hpp"
#include "daemon/busy_share.hpp"
#include "daemon/config.hpp"
#include "daemon/fault.hpp"
#include "daemon/power.hpp"
#include "daemon/trace.hpp"
#include "daemon/xid_watch.hpp"
#include "ipc/channel.hpp"
#include "ipc/protocol.hpp"
#include "ipc/validate.hpp"
#include "sched/engine.hpp"
#include "sched/engine_log.hpp"
#include "sched/types.hpp"

namespace lithos::daemon {

struct DaemonOptions {
  DaemonConfig config;
  sched::DeviceShape device = sched::DeviceShape::h100_sxm();  // TPC count and GPCs (from the slot map)
  // The GPU served, as cuDeviceGetUuid names it (from the slot map; "" when
  // not known): told to every client (ipc::Welcome::gpu), which then leaves
  // its launches on other GPUs alone.
  std::string gpu_uuid;
  // Its slot map's text (gpu::slot_map_serialize; "" when not known): told
  // to every client (ipc::Welcome::slot_map) that has none of its own.
  std::string slot_map_text;
  // How long the loop spins (no sleep) after the last event before it
  // backs off to sleeping: a be client waiting for a grant is answered
  // within microseconds while work is in flight.
  std::uint64_t spin_ns = 2'000'000;
  // A client whose Hello has not arrived this long after it connected is dropped.
  std::uint64_t hello_timeout_ns = 2'000'000'000;
  // Fatal GPU faults (fault.hpp): the processes of this machine (a fake in
  // tests; null: the system's), NVML's critical Xid events of gpu_uuid
  // (xid_events; nvml_library "" = libnvidia-ml.so.1), and, when MPS runs,
  // the pids of its clients (MPS control's get_client_list; null: none
  // asked), called on a thread of its own.
  std::shared_ptr<ProcessControl> processes;
  bool xid_events = false;
  std::string nvml_library;
  std::function<std::vector<int>()> mps_client_pids;
  // Power management (config.power; power.hpp) reads gpu_uuid through
  // nvml_library; with power = "on" the guardian that resets the clocks if
  // lithosd dies is this program (`lithos`); "": none.
  std::string power_guardian_exe;
};

// The Engine lithosd runs for `config` on `device`: the configured policy,
// atom target and throttle, and the configured tenants in file order (ids 0,
// 1, ...). Errors: validate()'s, and tenants the policy refuses. Tests replay
// simulator logs through it (tests/daemon/replay_test.cpp).
Result<std::unique_ptr<sched::Engine>> make_engine(const DaemonConfig& config, const sched::DeviceShape& device);

// Replays a lithosd trace through the Engine make_engine() builds from the
// trace's header (policy, atom target, throttle, device) and its tenants:
// the daemon's decisions come out again, or the first difference is named.
Result<sched::ReplayResult> replay_trace(const Trace& trace);

// Why the daemon dropped a registered client, or refused a connection
// (docs/daemon.md, "Hostile clients"). Each is counted (`lithos status
// --json`: counters.drop_reasons) and logged with the client's pid, uid,
// program and tenant, at most kDropLogLines lines per kDropLogWindowNs and
// a summary line for the rest.
enum class DropReason : std::uint8_t {
  kMalformed,       // a message broke the protocol (ipc::SubmitValidator)
  kFlood,           // over a bound, and no progress for progress_timeout_ms
  kNoProgress,      // work in flight, none completed and no grant taken for progress_timeout_ms
  kStopped,         // its heartbeat stood still for client_timeout_ms while it held work
  kGrantsNotTaken,  // 2 x max_queued_grants grants waiting beyond its full grant ring
  kFull,            // refused: max_clients registered, or too many connections waiting
  kUidClients,      // refused: its uid has max_clients_per_uid registered
  kUidConnecting,   // refused: its uid has max_connecting_per_uid connections waiting for their Hello
  kDescriptors,     // refused: the daemon is out of file descriptors (EMFILE, ENFILE)
  kHelloTimeout,    // no Hello within hello_timeout_ns
  kBadHello,        // closed before, or sent something that is not a valid Hello
  kTenant,          // its tenant is unknown or not allowed to it
  kChannel,         // its channel could not be made or sent
};
inline constexpr std::size_t kDropReasons = static_cast<std::size_t>(DropReason::kChannel) + 1;
const char* drop_reason_name(DropReason r);  // "malformed", "flood", ... (the JSON's keys)

// Raises this process's soft RLIMIT_NOFILE to its hard limit, and says
// whether `clients` clients (max_clients of every daemon this process runs,
// `daemons` of them) fit: a registered client costs the daemon one
// descriptor, a connection waiting for its Hello one more (at most
// Daemon::kMaxConnecting per daemon), and each daemon keeps a few of its
// own. Returns "" when they fit, else one line that says what to change.
std::string fit_descriptors(std::uint64_t clients, int daemons);

// Counters for `lithos status` and the tests.
struct DaemonCounters {
  std::uint64_t faulted_clients = 0;  // clients whose work a fatal GPU fault destroyed (fault.hpp)
  std::uint64_t clients_accepted = 0;
  std::uint64_t clients_refused = 0;       // connections refused (every refusal reason)
  std::uint64_t clients_dropped = 0;       // registered clients the daemon dropped (every drop reason)
  std::uint64_t clients_gone = 0;          // socket closed (exit, crash, SIGKILL)
  std::uint64_t drops[kDropReasons] = {};  // drops and refusals by DropReason
  // Times a client went over one of its bounds with messages waiting (and
  // was no longer read until under again), and the most any one client
  // held: best-effort launches waiting, atoms in flight, grants queued
  // beyond its ring.
  std::uint64_t throttles = 0;
  std::uint64_t max_client_pending = 0;
  std::uint64_t max_client_inflight = 0;
  std::uint64_t max_client_queued_grants = 0;
  std::uint64_t doorbell_mutes = 0;  // times a client rang far more than it submitted (its socket then unread a while)
  std::uint64_t accept_errors = 0;   // accept() out of descriptors (EMFILE, ENFILE)
  // Turns of the loop whose own work took over 100 ms of CPU time, and the
  // longest such CPU time seen (both only for turns of over 10 ms of wall
  // time; an upper bound: see Daemon::run).
  std::uint64_t steps_over_100ms = 0;
  std::uint64_t max_step_cpu_ns = 0;
  std::uint64_t submits = 0;
  std::uint64_t running_launches = 0;  // high priority, accounted
  std::uint64_t grants = 0;
  std::uint64_t completions = 0;
  // Completions seen several at once under one marker value (hp bursts),
  // whose busy time was shared by their predictions (busy_share.hpp).
  std::uint64_t shared_completions = 0;
  // Timed hp launches (ipc::SubmitType::kSample): samples learnt; samples
  // that named no timed launch it still remembers (dropped); malformed
  // samples (their client dropped, as for any malformed message).
  std::uint64_t hp_samples = 0;
  std::uint64_t hp_samples_unmatched = 0;
  std::uint64_t hp_samples_rejected = 0;
  std::uint64_t sizes_unpublished = 0;  // right-sizing entries a client's table had no room for
  std::uint64_t reclaimed_atoms = 0;    // released because their client died
  std::uint64_t status_requests = 0;
  std::uint64_t loops = 0;
  std::uint64_t busy_loops = 0;  // loops that handled something
  // Stalls: the longest time between two turns of the loop while it spun
  // (no sleep between them), and how many such gaps exceeded 1 ms; the
  // deepest a client's submit ring was found (kRingSlots: full, its client
  // spilled or waited).
  std::uint64_t max_spin_gap_ns = 0;
  std::uint64_t max_step_ns = 0;  // the longest turn's own work (a gap far above it: the thread was not running)
  std::uint64_t spin_gaps_over_1ms = 0;
  std::uint64_t max_submit_depth = 0;
  std::uint64_t doorbells = 0;  // bytes clients wrote to wake the sleeping loop (ipc::kChannelDaemonIdle)
  // Right-sizing of hp launches: sizes published into clients' right-size
  // tables (ipc::SizeTable), sizes a full table refused, and hp reports
  // that ran on fewer TPCs than their allocation.
  std::uint64_t right_sizes_published = 0;
  std::uint64_t right_sizes_refused = 0;
  std::uint64_t narrowed_reports = 0;
};

class Daemon {
 public:
  // Listens on options.config.socket and sets up the Engine with the
  // configured policy and tenants. Errors: the socket (another daemon,
  // permissions), an unknown policy, tenants the policy refuses.
  static Result<std::unique_ptr<Daemon>> create(DaemonOptions options);
  ~Daemon();
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;

  // Serves until `stop` becomes true (checked every loop iteration); spins
  // while work is in flight, sleeps up to 1 ms when idle.
  Status run(const std::atomic<bool>& stop);
  // One loop iteration at monotonic time `now_ns`; true when it handled
  // anything (a message, a completion, a grant, a connection).
  bool step(std::uint64_t now_ns);

  // The status `lithos status --json` prints (schema lithos.status/1), as
  // `viewer` (the asker's uid) may see it: root, this daemon's own uid and,
  // with [daemon] status_shows_all, everyone see every client in full;
  // another uid sees its own clients in full and other users' without pid,
  // uid and program (null; "view": "own"). No viewer: everything.
  std::string status_json(std::uint64_t now_ns, std::optional<uid_t> viewer = std::nullopt) const;
  const DaemonCounters& counters() const { return counters_; }
  const sched::Engine& engine() const { return *engine_; }
  std::uint64_t epoch() const { return epoch_; }
  const std::string& socket_path() const { return options_.config.socket; }
  // Marks every channel "daemon gone" (a clean shutdown: clients fall back at once).
  void shutdown_clients();

  // Right-sizing of a high-priority tenant's launches (docs/efficiency.md,
  // "Right-sizing"): `tpcs` (>= 1) for `kernel` (SubmitMsg::kernel) at
  // `grid`, written into the right-size table of every client of `tenant`
  // and of those that register later. A client's launch of that kernel at
  // that grid then goes out on that many TPCs of its allocation and its
  // report says so. False when refused (tpcs 0, an unknown tenant, or a
  // full table: at most ipc::kSizeTableSlots sizes per tenant).
  bool publish_right_size(sched::TenantId tenant, std::uint64_t kernel, const std::uint32_t grid[3],
                          std::uint32_t tpcs);
  // Forgets every size of `tenant` (its launches go back to the allocation).
  void clear_right_sizes(sched::TenantId tenant);

  static std::uint64_t now_ns();
  // Connections waiting for their Hello, all uids together.
  static constexpr std::size_t kMaxConnecting = 256;
  // Descriptors a daemon keeps besides its clients' (listening socket,
  // spare, trace, predictor cache, lock, standard streams, slack).
  static constexpr std::size_t kOwnDescriptors = 32;

 private:
  struct Pending;  // a connection whose Hello has not arrived
  struct Stream {
    std::deque<sched::LaunchId> launches;  // be: submitted, not fully granted (targets_), in order
    bool open = false;
    bool high = false;
    sched::QueueId queue = 0;
    std::uint64_t next_marker = 0;  // be: markers the daemon hands out
    std::uint64_t completed = 0;    // highest completion-slot value seen
    std::uint64_t last_end_ns = 0;  // when its last atom was seen ending
    struct InFlight {
      std::uint64_t key;  // be: the grant's marker; hp: the launch's seq
      sched::AtomId atom;
      std::uint64_t since_ns;
      // hp: the TPCs of its allocation it ran on (its report's
      // ipc::running_tpcs, at most the allocation's size; 0 for be atoms).
      std::uint32_t tpcs = 0;
    };
    std::deque<InFlight> inflight;  // in stream order
    // Its latest hp launches reported with kSubmitTimed (at most
    // kTimedPerStream, oldest first), each waiting for its kSample: what
    // the Engine learns the sample as.
    struct Timed {
      std::uint64_t seq;
      std::uint64_t kernel;
      sched::PredictionKey key;
      std::uint64_t blocks;
      int blocks_per_tpc;
      int tpcs;
    };
    std::deque<Timed> timed;
  };
  static constexpr std::size_t kTimedPerStream = 64;
  struct Client {
    std::uint32_t id = 0;
    int sock = -1;
    ipc::Channel channel;
    ipc::SubmitValidator validator;
    sched::TenantId tenant = 0;
    bool high = false;
    int pid = 0;
    unsigned uid = 0;
    std::string program;
    int mps = -1;  // its contexts are MPS clients: 1, not: 0, not known: -1 (ipc::kHelloMps*)
    std::uint64_t since_ns = 0;
    // By stream slot, grown as slots open (an idle client holds none).
    std::vector<Stream> streams;
    std::deque<ipc::GrantMsg> overflow;  // grants waiting for room in the ring
    // What it holds (DaemonConfig's bounds): be launches not fully granted,
    // entries of its streams' `inflight`, and the streams that have some
    // (a bit each), so that a turn visits only those.
    std::uint32_t pending = 0;
    std::uint32_t inflight = 0;
    std::uint64_t busy_streams[ipc::kMaxStreams / 64] = {};
    std::uint64_t events = 0;           // Engine events this window (kEventWindowNs)
    std::uint64_t throttled_since = 0;  // over a bound with messages waiting since (0: read normally)
    // Progress and heartbeat (checked once a millisecond): since when it
    // holds work, when something last completed or a grant was taken, the
    // grant ring's tail and the heartbeat as last seen, and when the
    // heartbeat last moved.
    std::uint64_t holds_since = 0;
    std::uint64_t progress_ns = 0;
    std::uint64_t grant_tail = 0;
    std::uint64_t beat = 0;
    std::uint64_t beat_moved_ns = 0;
    // Doorbells: bytes rung and messages taken this window, and until when
    // its socket is not read for input (hang-ups are still seen).
    std::uint64_t bells = 0;
    std::uint64_t bell_msgs = 0;
    std::uint64_t muted_until = 0;
    std::optional<DropReason> doomed;  // to be dropped at the end of this turn (why)
    std::string doomed_why;
    std::uint64_t alloc_words[4] = {~0ULL, ~0ULL, ~0ULL, ~0ULL};  // last published allocations (now, lasting)
    bool runs_free = false;                                       // kChannelRunsFree as last published
    // Its right-sizing table (high priority, right-sized tenant): where each
    // key went, the Engine table's generation last published, and each
    // entry's TPC count as published (by SizeTable entry; -1: not yet), in
    // `sizes` below (its channel's ipc::SizeTable).
    std::uint64_t sizes_generation = 0;
    std::vector<int> sizes_published;
    std::uint64_t grants = 0, launches = 0;
    // A fatal GPU fault: its client_fault was read; its work was lost (the
    // FaultMonitor says it is affected): nothing more of it is scheduled,
    // its messages are read and dropped, kChannelFaulted tells it so.
    bool fault_read = false;
    bool faulted = false;
    ipc::SizeTableWriter sizes;  // its channel's right-size table (publish_sizes, publish_right_size)
  };
  struct Target {  // where a be launch's grants go
    std::uint32_t client;
    std::uint32_t stream;
    std::uint64_t seq;
  };

  explicit Daemon(DaemonOptions options);
  bool accept_connections(std::uint64_t now);
  // True when it refused a connection that was waiting.
  bool refuse_without_descriptors(std::uint64_t now);
  // Refuses a connection before or at its Hello (a kFull Welcome saying
  // why), closes it and accounts it.
  void refuse_connection(int sock, DropReason r, const std::string& why, int pid, unsigned uid,
                         const std::string& program = {}, const std::string& tenant = {});
  // Accounts a refusal welcome() made (its Welcome status says why).
  void note_refused(int sock, const ipc::Hello& hello, ipc::WelcomeStatus st, const std::string& why);
  bool serve_pending(std::uint64_t now);
  void welcome(int sock, const ipc::Hello& hello, std::uint64_t now);
  // Clients outside MPS while others are MPS clients: they time-slice with
  // them, and no TPC mask isolates them. One line each (client `only`'s
  // alone, if given), empty when none.
  // Other users' clients are named without pid, uid and program for a
  // `viewer` that may not see them (status_json).
  std::vector<std::string> mps_warnings(std::optional<std::uint32_t> only = std::nullopt,
                                        std::optional<uid_t> viewer = std::nullopt) const;
  bool shows_everything_to(std::optional<uid_t> viewer) const;
  bool shows_in_full(const Client& c, std::optional<uid_t> viewer) const;
  // Takes up to a batch of its messages, not beyond its bounds. False when
  // one was malformed (why: c.doomed_why).
  bool drain_submits(Client& c, std::uint64_t now);
  Status handle_submit(Client& c, const ipc::SubmitMsg& m, std::uint64_t now);
  bool poll_completions(Client& c, std::uint64_t now);
  bool poll_stream(Client& c, std::uint32_t stream, std::uint64_t now);
  bool dispatch(std::uint64_t now);
  void deliver(Client& c, const ipc::GrantMsg& g);
  void publish_allocations();
  // A right-sized high-priority client's table entries that changed.
  void publish_sizes(Client& c);
  bool check_sockets(std::uint64_t now);
  // Drops the clients that stopped, make no progress, or were doomed this
  // turn; true when it dropped any.
  bool check_clients(std::uint64_t now);
  // `reason` empty: its socket closed (it left); else the daemon drops it.
  void drop_client(std::size_t index, std::uint64_t now, std::optional<DropReason> reason, const std::string& why);
  // Counts a drop or refusal and logs it, rate-limited.
  void note_drop(DropReason r, int pid, unsigned uid, const std::string& program, const std::string& tenant,
                 const std::string& why);
  void flush_drop_log(std::uint64_t now, bool force);
  // Which of its bounds a client is over (nullptr: none): its own, or its
  // share of its tenant's.
  const char* over_bound(const Client& c) const;
  void add_pending(Client& c, std::int64_t delta);
  void add_inflight(Client& c, Stream& s, std::uint32_t stream, std::int64_t delta);
  void add_events(Client& c, std::uint64_t n);
  void note_overflow(Client& c);
  Client* find_client(std::uint32_t id);
  // High priority, and best effort while it runs free: where its launches
  // go now (the policy's immediate_set); otherwise best effort: its
  // fallback set.
  sched::TpcSet allocation_of(sched::TenantId t, bool lasting = false) const;
  void publish_allocation(Client& c);
  void publish_allocation(Client& c, const std::array<std::uint64_t, 4>& words);  // (now, lasting)
  std::vector<std::optional<std::array<std::uint64_t, 4>>> alloc_cache_;          // scratch for publish_allocations
  sched::TpcSet fallback_of(sched::TenantId t) const;
  static lithos::Time to_time(std::uint64_t ns);

  DaemonOptions options_;
  std::unique_ptr<sched::Engine> engine_;
  std::unique_ptr<sched::EngineLog> log_;  // every call into engine_; recorded when tracing
  TraceWriter trace_;
  std::uint64_t epoch_ = 0;
  int listen_fd_ = -1;
  std::vector<std::unique_ptr<Pending>> pending_;
  std::vector<std::unique_ptr<Client>> clients_;
  // Per uid: connections waiting for their Hello, and registered clients.
  std::unordered_map<unsigned, int> connecting_by_uid_, clients_by_uid_;
  // Per tenant (index = TenantId): its clients and what they hold together.
  struct TenantLoad {
    std::uint32_t clients = 0;
    std::uint64_t pending = 0, inflight = 0, queued_grants = 0, events = 0;
  };
  std::vector<TenantLoad> loads_;
  std::uint64_t event_window_ns_ = 0;  // when the current window of Engine events and doorbells began
  static constexpr std::uint64_t kEventWindowNs = 100'000'000;
  // A descriptor kept open to be closed when accept() runs out of them: the
  // connection can then be taken and told why before it is closed.
  int spare_fd_ = -1;
  std::uint64_t accept_paused_until_ = 0;  // out of descriptors and no spare: the listening socket rests
  // The drop log's window: lines written, and what was not written by reason.
  std::uint64_t drop_log_window_ns_ = 0;
  int drop_log_lines_ = 0;
  std::uint64_t drop_log_suppressed_[kDropReasons] = {};
  static constexpr int kDropLogLines = 20;
  static constexpr std::uint64_t kDropLogWindowNs = 10'000'000'000ULL;
  // Hellos served per turn (a registration costs a channel: ~0.1 ms), and
  // connections taken per turn.
  static constexpr int kHellosPerTurn = 32;
  static constexpr int kAcceptsPerTurn = 64;
  // Clients dropped per turn at most (each releases its channel and
  // queues): the rest of a crowd that leaves at once go at the next turns.
  static constexpr int kDropsPerTurn = 32;
  // Doorbells: a client that rings more than the messages it had taken
  // plus kBellSlack within a window is not read for kBellMuteNs.
  static constexpr std::uint64_t kBellSlack = 16;
  static constexpr std::uint64_t kBellMuteNs = 100'000'000;
  static constexpr int kBellReadsPerCheck = 64;
  std::uint32_t next_client_ = 1;
  std::unordered_map<sched::LaunchId, Target> targets_;
  std::vector<sched::AtomDispatch> out_;  // scratch for dispatch
  std::vector<CoveredLaunch> covered_;    // scratch for poll_completions
  bool dirty_ = true;                     // something changed since the last dispatch
  std::uint64_t last_event_ns_ = 0;
  std::uint64_t last_be_work_ns_ = 0;  // when a best-effort tenant last had work
  std::uint64_t last_socket_check_ns_ = 0;
  std::uint64_t last_heartbeat_ns_ = 0;
  static constexpr std::uint64_t kHeartbeatNs = 1'000'000;
  std::uint64_t started_ns_ = 0;
  DaemonCounters counters_;
  // The predictor's cache (predictor_cache.hpp): "" when no state_dir.
  struct Cache {
    std::string path;
    std::size_t loaded = 0;       // entries loaded at start
    std::uint64_t saves = 0;      // times written
    std::uint64_t saved_ns = 0;   // when last written (or loaded)
    std::uint64_t saved_obs = 0;  // predictor observations when last written
    std::string error;            // the last load or write error ("" = none)
    // The file is written (fsync included) by a thread of its own, off the
    // loop that answers clients: `writer`, its outcome under `mu`.
    std::thread writer;
    std::mutex mu;
    bool done = false;
    Status result = Status::ok();
  } cache_;
  // Writes the cache when `force` (at once, in this thread: at exit) or when
  // the predictor learnt something and the last write is older than
  // kCacheEveryNs (in the background).
  void save_cache(std::uint64_t now, bool force);
  // Accounts the background write once it has finished (joins it); with
  // `wait`, waits for it.
  void collect_cache_write(bool wait);
  void note_spin_gap(std::uint64_t gap_ns);
  bool set_idle(bool idle);
  std::uint64_t hp_nap_ns(std::uint64_t now) const;
  static constexpr std::uint64_t kWakeBeforeEndNs = 20'000;
  void account_cache_write(const Status& s);
  static constexpr std::uint64_t kCacheEveryNs = 30'000'000'000ULL;

  // Fatal GPU faults (fault.hpp, docs/daemon.md "GPU faults"): every client's
  // client_fault and NVML's Xid events are read once a millisecond; a client
  // the fault affected is scheduled no more. Returns whether anything moved.
  bool check_faults(std::uint64_t now);
  // Every registered client as the FaultMonitor sees it.
  std::vector<FaultParty> fault_parties() const;
  // Clients the FaultMonitor now says are affected: their queues closed,
  // their atoms released, kChannelFaulted set.
  void apply_faults(std::uint64_t now);
  void log_fault(const std::vector<std::string>& lines) const;
  std::unique_ptr<FaultMonitor> faults_;
  std::unique_ptr<XidWatcher> xid_;
  std::string xid_state_;  // "on", or why NVML's events are not read
  std::unique_ptr<Power> power_;
  std::string power_state_;  // "off", or why power management does not run
  // MPS control's client list, asked once per GPU fault on a thread of its own.
  struct MpsQuery {
    std::thread thread;
    std::mutex mu;
    bool done = false;
    std::vector<int> pids;
  } mps_query_;
  std::uint64_t mps_asked_episode_ = 0;  // the episode it was asked for (FaultMonitor::episodes)
  std::uint64_t turn_ns_ = 0;            // `now` of the turn in progress (step), for allocation_of

  // Right sizes by tenant (publish_right_size), for the clients that
  // register later.
  struct RightSize {
    std::uint64_t kernel = 0;
    std::uint32_t grid[3] = {1, 1, 1};
    std::uint32_t tpcs = 0;
  };
  std::vector<std::vector<RightSize>> right_sizes_;
  // The test hook LITHOS_TEST_RIGHT_SIZE="X:T[,X:T...]": a high-priority
  // launch reported with grid width X has its kernel published at T TPCs,
  // standing in for the Engine's choices. Empty: off.
  std::vector<std::pair<std::uint32_t, std::uint32_t>> test_right_sizes_;
};

}  // namespace lithos::daemon
