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
//    closed in the Engine); other clients never notice.
//
// Threading: one thread calls step()/run(); nothing else touches a Daemon
// except status_json() through the same thread (status requests are served
// inside step()).
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

#include "common/status.hpp"
#include "daemon/busy_share.hpp"
#include "daemon/config.hpp"
#include "daemon/trace.hpp"
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
  int max_clients = 512;
  // How long the loop spins (no sleep) after the last event before it
  // backs off to sleeping: a be client waiting for a grant is answered
  // within microseconds while work is in flight.
  std::uint64_t spin_ns = 2'000'000;
  // A client whose Hello has not arrived this long after it connected is dropped.
  std::uint64_t hello_timeout_ns = 2'000'000'000;
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

// Counters for `lithos status` and the tests.
struct DaemonCounters {
  std::uint64_t clients_accepted = 0;
  std::uint64_t clients_refused = 0;
  std::uint64_t clients_dropped = 0;  // malformed messages
  std::uint64_t clients_gone = 0;     // socket closed (exit, crash, SIGKILL)
  std::uint64_t submits = 0;
  std::uint64_t running_launches = 0;  // high priority, accounted
  std::uint64_t grants = 0;
  std::uint64_t completions = 0;
  // Completions seen several at once under one marker value (hp bursts),
  // whose busy time was shared by their predictions (busy_share.hpp).
  std::uint64_t shared_completions = 0;
  std::uint64_t reclaimed_atoms = 0;  // released because their client died
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

  static std::uint64_t now_ns();

 private:
  struct Pending;  // a connection whose Hello has not arrived
  struct Stream {
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
    };
    std::deque<InFlight> inflight;  // in stream order
  };
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
    std::vector<Stream> streams = std::vector<Stream>(ipc::kMaxStreams);
    std::deque<ipc::GrantMsg> overflow;                           // grants waiting for room in the ring
    std::uint64_t alloc_words[4] = {~0ULL, ~0ULL, ~0ULL, ~0ULL};  // last published allocations (now, lasting)
    bool runs_free = false;                                       // kChannelRunsFree as last published
    std::uint64_t grants = 0, launches = 0;
  };
  struct Target {  // where a be launch's grants go
    std::uint32_t client;
    std::uint32_t stream;
    std::uint64_t seq;
  };

  explicit Daemon(DaemonOptions options);
  bool accept_connections(std::uint64_t now);
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
  bool drain_submits(Client& c, std::uint64_t now);
  Status handle_submit(Client& c, const ipc::SubmitMsg& m, std::uint64_t now);
  bool poll_completions(Client& c, std::uint64_t now);
  bool dispatch(std::uint64_t now);
  void deliver(Client& c, const ipc::GrantMsg& g);
  void publish_allocations();
  bool check_sockets(std::uint64_t now);
  void drop_client(std::size_t index, std::uint64_t now, bool malformed, const std::string& why);
  Client* find_client(std::uint32_t id);
  // High priority, and best effort while it runs free: where its launches
  // go now (the policy's immediate_set); otherwise best effort: its
  // fallback set.
  sched::TpcSet allocation_of(sched::TenantId t, bool lasting = false) const;
  void publish_allocation(Client& c);
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
};

}  // namespace lithos::daemon
