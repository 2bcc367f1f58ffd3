// lithosd's loop for one GPU (docs/daemon.md, "The daemon's loop"): its
// connections, the hot path from submit rings to the Engine and back as
// grants, the bounds on hostile clients, fatal GPU faults and the status.
// (Over 600 lines: these share the loop's state, which no other object may
// touch; each is a section below.)
#include "daemon/daemon.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <nlohmann/json.hpp>
#include <system_error>

#include "daemon/predictor_cache.hpp"
#include "daemon/settings.hpp"
#include "ipc/cuda_faults.hpp"
#include "ipc/safe_file.hpp"
#include "ipc/socket.hpp"
#include "sched/occupancy.hpp"
#include "sched/policies/catalog.hpp"
#include "sched/policies/settings_table.hpp"

namespace lithos::daemon {

namespace {

// CPU seconds the calling thread has used (user + system): the loop's, since
// run() and status_json() run on it. One lithosd serving several GPUs runs a
// loop thread per GPU, and each reports its own.
double cpu_seconds() {
  timespec t{};
  if (::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t) != 0) return 0;
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) / 1e9;
}

// The same in nanoseconds (a system call: ~0.5 us).
std::uint64_t cpu_ns() {
  timespec t{};
  if (::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t) != 0) return 0;
  return static_cast<std::uint64_t>(t.tv_sec) * 1'000'000'000ULL + static_cast<std::uint64_t>(t.tv_nsec);
}

// The engine's hardware priority as the client applies it to a stream
// (`on`: DaemonConfig::stream_priorities).
ipc::StreamPriority stream_priority(sched::HwPriority p, bool on) {
  if (!on) return ipc::StreamPriority::kKeep;
  switch (p) {
    case sched::HwPriority::kHigh: return ipc::StreamPriority::kHighest;
    case sched::HwPriority::kLow: return ipc::StreamPriority::kLowest;
    case sched::HwPriority::kNormal: break;
  }
  return ipc::StreamPriority::kKeep;
}

std::string text_of(const char* field, std::size_t cap) {
  std::size_t n = 0;
  while (n < cap && field[n] != '\0') ++n;
  return std::string(field, n);
}

template <std::size_t N>
void copy_text(char (&dst)[N], const std::string& src) {
  const std::size_t n = std::min(src.size(), N - 1);
  std::memcpy(dst, src.data(), n);
  dst[n] = '\0';
}

}  // namespace

// A connection whose Hello has not arrived yet (its peer, from SO_PEERCRED
// when it was taken; uid -1 when unknown).
struct Daemon::Pending {
  int sock = -1;
  std::uint64_t since_ns = 0;
  int pid = 0;
  unsigned uid = static_cast<unsigned>(-1);
};

const char* drop_reason_name(DropReason r) {
  switch (r) {
    case DropReason::kMalformed: return "malformed";
    case DropReason::kFlood: return "flood";
    case DropReason::kNoProgress: return "no_progress";
    case DropReason::kStopped: return "stopped";
    case DropReason::kGrantsNotTaken: return "grants_not_taken";
    case DropReason::kFull: return "full";
    case DropReason::kUidClients: return "uid_clients";
    case DropReason::kUidConnecting: return "uid_connecting";
    case DropReason::kDescriptors: return "descriptors";
    case DropReason::kHelloTimeout: return "hello_timeout";
    case DropReason::kBadHello: return "bad_hello";
    case DropReason::kTenant: return "tenant";
    case DropReason::kChannel: return "channel";
  }
  return "?";
}

std::string fit_descriptors(std::uint64_t clients, int daemons) {
  rlimit r{};
  if (::getrlimit(RLIMIT_NOFILE, &r) != 0) return "cannot read RLIMIT_NOFILE: " + std::string(std::strerror(errno));
  if (r.rlim_cur != RLIM_INFINITY && (r.rlim_max == RLIM_INFINITY || r.rlim_cur < r.rlim_max)) {
    rlimit up = r;
    up.rlim_cur = r.rlim_max;
    if (::setrlimit(RLIMIT_NOFILE, &up) == 0) r = up;
  }
  const std::uint64_t own =
      static_cast<std::uint64_t>(std::max(daemons, 1)) * (Daemon::kMaxConnecting + Daemon::kOwnDescriptors);
  const std::uint64_t need = clients + own;
  if (r.rlim_cur == RLIM_INFINITY || r.rlim_cur >= need) return "";
  return "max_clients (" + std::to_string(clients) + (daemons > 1 ? " over " + std::to_string(daemons) + " GPUs" : "") +
         ") needs about " + std::to_string(need) + " file descriptors (one per client, " +
         std::to_string(Daemon::kMaxConnecting) + " for connections waiting for their Hello and " +
         std::to_string(Daemon::kOwnDescriptors) + " of its own per GPU), but RLIMIT_NOFILE allows " +
         std::to_string(r.rlim_cur) + ": connections past that are refused (\"out of file descriptors\"). Raise " +
         "LimitNOFILE= (systemd) or ulimit -n to at least " + std::to_string(need) + ", or lower max_clients";
}

std::uint64_t Daemon::now_ns() {
  timespec t{};
  clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<std::uint64_t>(t.tv_sec) * 1'000'000'000ULL + static_cast<std::uint64_t>(t.tv_nsec);
}

lithos::Time Daemon::to_time(std::uint64_t ns) { return lithos::Time(lithos::Duration(static_cast<std::int64_t>(ns))); }

Daemon::Daemon(DaemonOptions options) : options_(std::move(options)) {
  // The test hook for right-sizing (daemon.hpp): "X:T" pairs, the rest ignored.
  const char* spec = std::getenv("LITHOS_TEST_RIGHT_SIZE");  // NOLINT(concurrency-mt-unsafe): nothing sets it
  std::string rest = spec != nullptr ? spec : "";
  while (!rest.empty()) {
    const std::size_t comma = rest.find(',');
    const std::string one = rest.substr(0, comma);
    rest = comma == std::string::npos ? "" : rest.substr(comma + 1);
    const std::size_t colon = one.find(':');
    if (colon == std::string::npos) continue;
    std::uint32_t x = 0, t = 0;
    const char* end = one.data() + one.size();
    const auto rx = std::from_chars(one.data(), one.data() + colon, x);
    const auto rt = std::from_chars(one.data() + colon + 1, end, t);
    if (rx.ec == std::errc() && rx.ptr == one.data() + colon && rt.ec == std::errc() && rt.ptr == end && x > 0 &&
        t > 0 && t <= ipc::kMaxTpcs)
      test_right_sizes_.emplace_back(x, t);
  }
}

Daemon::~Daemon() {
  if (cache_.writer.joinable()) cache_.writer.join();
  if (mps_query_.thread.joinable()) mps_query_.thread.join();
  if (spare_fd_ >= 0) ::close(spare_fd_);
  for (auto& p : pending_) ::close(p->sock);
  for (auto& c : clients_) {
    if (c->sock >= 0) ::close(c->sock);
  }
  if (listen_fd_ >= 0) ::close(listen_fd_);
}

Result<std::unique_ptr<sched::Engine>> make_engine(const DaemonConfig& config, const sched::DeviceShape& device) {
  LITHOS_RETURN_IF_ERROR(validate(config, device.tpcs));
  sched::PolicySettings ps;
  sched::EngineConfig ec;
  bool immediate = false;  // how the simulator drives the Engine; lithosd's launches do so themselves
  sched::SchedulerTarget target{&ec, &ps, &immediate};
  // A setting that is an Engine or policy setting reaches the Engine through
  // its row of the scheduler settings table, as the simulator's does.
  for (const Setting& s : settings()) {
    if (s.sim_key.empty()) continue;
    const sched::SchedSetting* row = sched::find_scheduler_setting(s.sim_key);
    if (row == nullptr) return Status::internal("setting '" + std::string(s.key) + "' names no scheduler setting");
    const std::string v = s.get(config);
    row->set(target, s.type == SettingType::kBool ? (v == "true" ? 1.0 : 0.0) : std::strtod(v.c_str(), nullptr));
  }
  ps.lithos.runs_free = config.best_effort_runs_free;
  std::string err;
  auto policy = sched::make_policy(config.policy, ps, &err);
  if (policy == nullptr) return Status::invalid_argument(err);
  ec.device = device;
  auto engine = std::make_unique<sched::Engine>(ec, std::move(policy));
  for (const TenantConfig& t : config.tenants) {
    auto id = engine->add_tenant(t.spec());
    if (!id) return Status::invalid_argument("tenant '" + t.name + "': " + id.status().message());
  }
  return engine;
}

Result<sched::ReplayResult> replay_trace(const Trace& trace) {
  DaemonConfig c = trace.header.config;
  c.tenants.clear();
  for (const sched::EngineEvent& e : trace.events) {
    if (e.kind != sched::EngineEvent::Kind::kAddTenant || !e.ok) continue;
    TenantConfig t;
    t.name = e.spec.name;
    t.priority = e.spec.priority;
    t.quota = e.spec.quota;
    t.slo = e.spec.slo;
    t.pauses_best_effort = e.spec.pauses_best_effort;
    t.rightsize = e.spec.rightsize;
    t.rightsize_slip = e.spec.rightsize_slip;
    c.tenants.push_back(t);
  }
  auto engine = make_engine(c, trace.header.device);
  if (!engine) return Status::invalid_argument("the trace's configuration: " + engine.status().message());
  if (Status s = (*engine)->load_predictions(trace.header.predictions); !s.is_ok())
    return Status::invalid_argument("the trace's predictor cache: " + s.message());
  return sched::replay(trace.events, **engine, sched::ReplayTenants::kCheck);
}

Result<std::unique_ptr<Daemon>> Daemon::create(DaemonOptions options) {
  std::unique_ptr<Daemon> d(new Daemon(std::move(options)));
  const DaemonConfig& cfg = d->options_.config;
  auto engine = make_engine(cfg, d->options_.device);
  if (!engine) return engine.status();
  d->engine_ = std::move(engine).value();
  {
    FaultSettings fs;
    fs.exit_grace_ns = static_cast<std::uint64_t>(cfg.fault_exit_grace_ms * 1e6);
    fs.term_grace_ns = static_cast<std::uint64_t>(cfg.fault_term_grace_ms * 1e6);
    fs.end_processes = cfg.fault_ends_processes;
    // A shared ProcessControl given by the caller (tests) is used through a
    // forwarding owner; otherwise the system's.
    struct Shared final : ProcessControl {
      std::shared_ptr<ProcessControl> p;
      std::optional<std::uint64_t> start_time(int pid) override { return p->start_time(pid); }
      int signal(int pid, int sig) override { return p->signal(pid, sig); }
    };
    std::unique_ptr<ProcessControl> pc;
    if (d->options_.processes) {
      auto sh = std::make_unique<Shared>();
      sh->p = d->options_.processes;
      pc = std::move(sh);
    } else {
      pc = ProcessControl::system();
    }
    d->faults_ = std::make_unique<FaultMonitor>(fs, std::move(pc));
    d->xid_state_ = "off";
    if (d->options_.xid_events) {
      std::string why;
      d->xid_ = XidWatcher::start(d->options_.nvml_library, d->options_.gpu_uuid, &why);
      d->xid_state_ = d->xid_ != nullptr ? "on" : why;
      if (d->xid_ == nullptr) {
        std::fprintf(stderr, "lithosd: NVML's Xid events are not read (%s); GPU faults are still reported by clients\n",
                     why.c_str());
      }
    }
  }
  d->power_state_ = "off";
  if (cfg.power != PowerMode::kOff) {
    PowerOptions po;
    po.mode = cfg.power;
    po.library = d->options_.nvml_library;
    po.uuid = d->options_.gpu_uuid;
    po.config.dvfs.tolerated_slowdown = cfg.power_slowdown;
    po.config.energy.idle_w = cfg.power_idle_w;
    po.config.energy.exponent = cfg.power_exponent;
    po.guardian_exe = d->options_.power_guardian_exe;
    po.state_dir = cfg.state_dir;
    std::string why;
    d->power_ = Power::start(po, &why);
    d->power_state_ = d->power_ != nullptr ? std::string(power_mode_name(cfg.power)) : why;
    if (d->power_ == nullptr) {
      std::fprintf(stderr, "lithosd: power = \"%s\" does not run (%s); clocks are left alone\n",
                   power_mode_name(cfg.power), why.c_str());
    }
  }
  d->log_ = std::make_unique<sched::EngineLog>(*d->engine_, !cfg.trace.empty());
  // What an earlier daemon's predictor learnt; a bad or foreign cache is
  // reported and the daemon starts cold (and overwrites it later).
  std::string predictions;
  if (!cfg.state_dir.empty()) {
    // The state folder, made when missing: refused (the daemon does not
    // start) when another user could change it or a link planted by one
    // leads to it (ipc/safe_file.hpp). One that cannot be made is said, and
    // the cache's writes say it again.
    if (auto dir = ipc::SafeDir::open(cfg.state_dir, /*create=*/true); !dir) {
      if (dir.status().code() == StatusCode::kFailedPrecondition)
        return Status::failed_precondition("state_dir: " + dir.status().message());
      std::fprintf(stderr, "lithosd: state_dir: %s\n", dir.status().message().c_str());
    }
    d->cache_.path = predictor_cache_path(cfg.state_dir);
    auto text = read_predictor_cache(d->cache_.path, d->options_.device);
    Status s = text.is_ok() ? d->engine_->load_predictions(*text) : text.status();
    if (s.is_ok()) {
      predictions = std::move(text).value();
      d->cache_.loaded = d->engine_->state().predictor.entries();
      std::fprintf(stderr, "lithosd: predictor cache %s: %zu entries loaded\n", d->cache_.path.c_str(),
                   d->cache_.loaded);
    } else if (s.code() != StatusCode::kNotFound) {
      d->cache_.error = s.message();
      std::fprintf(stderr, "lithosd: predictor cache: %s; starting cold\n", s.message().c_str());
    }
  }
  if (!cfg.trace.empty()) {
    LITHOS_RETURN_IF_ERROR(d->trace_.open(cfg.trace, config_json(cfg), d->options_.device, predictions));
    // The tenants make_engine() added, as the trace's first events.
    for (const sched::TenantState& t : d->engine_->state().tenants) {
      sched::EngineEvent e;
      e.kind = sched::EngineEvent::Kind::kAddTenant;
      e.spec = t.spec;
      e.result = t.id;
      d->trace_.write({e});
    }
  }
  auto fd = ipc::listen_socket(cfg.socket, 0666);
  if (!fd) return fd.status();
  d->listen_fd_ = fd.value();
  d->spare_fd_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  d->loads_.resize(d->engine_->state().tenants.size());
  d->started_ns_ = now_ns();
  // Distinct per start: clients compare it to notice a restarted daemon.
  d->epoch_ = d->started_ns_ ^ (static_cast<std::uint64_t>(::getpid()) << 40);
  return d;
}

Status Daemon::run(const std::atomic<bool>& stop) {
  // Short sleeps (hp_poll_us) as asked, not rounded up by the default 50 us
  // of timer slack.
  (void)::prctl(PR_SET_TIMERSLACK, 1000UL, 0UL, 0UL, 0UL);
  std::uint64_t last_turn = 0;  // 0: the last turn slept
  // A turn's wall time includes the time its thread did not run (a loaded
  // machine); its CPU time is read after a turn of over 10 ms, against a
  // mark taken every 16 turns (the call costs ~0.5 us): an upper bound of
  // the turn's own work, short turns before it included.
  std::uint64_t cpu_mark = cpu_ns();
  unsigned since_mark = 0;
  while (!stop.load(std::memory_order_relaxed)) {
    if (++since_mark >= 16) {
      cpu_mark = cpu_ns();
      since_mark = 0;
    }
    const std::uint64_t now = now_ns();
    if (last_turn != 0) note_spin_gap(now - last_turn);
    last_turn = now;
    const bool busy = step(now);
    const std::uint64_t took = now_ns() - now;
    counters_.max_step_ns = std::max(counters_.max_step_ns, took);
    if (took > 10'000'000) {
      const std::uint64_t cpu = cpu_ns();
      const std::uint64_t own = cpu - std::min(cpu, cpu_mark);
      cpu_mark = cpu;
      since_mark = 0;
      counters_.max_step_cpu_ns = std::max(counters_.max_step_cpu_ns, own);
      if (own > 100'000'000) ++counters_.steps_over_100ms;
    }
    if (busy) continue;
    // Best-effort work in flight or waiting: spin (grants within
    // microseconds). Only high-priority work: spin, or short sleeps when
    // hp_poll_us asks (no one waits for a grant). Otherwise sleep, up to
    // 1 ms, woken early by the sockets.
    if (now - last_be_work_ns_ < options_.spin_ns) continue;
    if (now - last_event_ns_ < options_.spin_ns) {
      if (const std::uint64_t ns = hp_nap_ns(now); ns > 0) {
        const timespec nap{0, static_cast<long>(ns)};
        (void)::nanosleep(&nap, nullptr);
        last_turn = 0;
      }
      continue;
    }
    last_turn = 0;
    trace_.flush();  // idle: what was traced reaches the file
    save_cache(now, false);
    // Clients ring through their sockets while this is set; a message pushed
    // before they could see it is looked for once more here.
    if (!set_idle(true)) {
      set_idle(false);
      continue;
    }
    // A listening socket that rests (out of descriptors) and a client whose
    // doorbells are muted are not waited on for input (poll() still reports
    // a client's hang-up).
    std::vector<pollfd> fds;
    fds.push_back({now < accept_paused_until_ ? -1 : listen_fd_, POLLIN, 0});
    for (auto& p : pending_) fds.push_back({p->sock, POLLIN, 0});
    for (auto& c : clients_) fds.push_back({c->sock, static_cast<short>(now < c->muted_until ? 0 : POLLIN), 0});
    // Clients submit through shared memory, which no poll() sees: sleep
    // briefly so that a best-effort launch waits at most about this long
    // after an idle period.
    if (::poll(fds.data(), fds.size(), 1) > 0) last_socket_check_ns_ = 0;  // a socket to serve: at the next turn
    set_idle(false);
  }
  shutdown_clients();
  flush_drop_log(now_ns(), true);
  trace_.close();
  save_cache(now_ns(), true);
  const double up = static_cast<double>(now_ns() - started_ns_) / 1e9, cpu = cpu_seconds();
  std::fprintf(
      stderr,
      "lithosd: CPU %.2f s over %.1f s (%.1f%% of one core), %llu grants, %llu completions; longest gap "
      "between spinning turns %.0f us (%llu over 1 ms; longest turn %.0f us), deepest submit ring %llu\n",
      cpu, up, up > 0 ? 100.0 * cpu / up : 0.0, static_cast<unsigned long long>(counters_.grants),
      static_cast<unsigned long long>(counters_.completions), static_cast<double>(counters_.max_spin_gap_ns) / 1e3,
      static_cast<unsigned long long>(counters_.spin_gaps_over_1ms), static_cast<double>(counters_.max_step_ns) / 1e3,
      static_cast<unsigned long long>(counters_.max_submit_depth));
  return Status::ok();
}

// While only high-priority work is in flight: how long the loop may sleep
// before its next turn. hp_poll_us at most (0: it spins), and it wakes
// kWakeBeforeEndNs before the predicted end of the first atom in flight on
// any stream, then spins until it is seen: a CUDA graph of milliseconds costs
// no CPU, and its end is still seen within microseconds (the predictor's own
// samples and the per-TPC timers depend on it). An atom past its predicted
// end keeps the loop spinning until it completes.
std::uint64_t Daemon::hp_nap_ns(std::uint64_t now) const {
  auto nap = static_cast<std::uint64_t>(options_.config.hp_poll_us * 1e3);  // at most 1 ms (kMaxHpPollUs)
  if (nap == 0) return 0;
  const sched::EngineState& st = engine_->state();
  for (const auto& c : clients_) {
    if (c->inflight == 0) continue;
    for (const Stream& s : c->streams) {
      if (!s.open || s.inflight.empty()) continue;
      const auto end = st.predicted_end(st.atoms[s.inflight.front().atom]).time_since_epoch().count();
      const auto wake = static_cast<std::uint64_t>(std::max<std::int64_t>(end, 0));
      if (wake <= now + kWakeBeforeEndNs) return 0;
      nap = std::min(nap, wake - kWakeBeforeEndNs - now);
    }
  }
  return nap;
}

// Sets (or clears) ipc::kChannelDaemonIdle on every client's channel.
// Setting: false when a submit ring already holds a message (pushed before
// its client could see the flag): then the loop must not sleep.
bool Daemon::set_idle(bool idle) {
  bool quiet = true;
  for (auto& c : clients_) {
    ipc::ChannelLayout& l = c->channel.layout();
    if (idle) {
      l.header.flags.fetch_or(ipc::kChannelDaemonIdle, std::memory_order_seq_cst);
      quiet = quiet && l.submit.size() == 0;
    } else {
      l.header.flags.fetch_and(~static_cast<std::uint32_t>(ipc::kChannelDaemonIdle), std::memory_order_relaxed);
    }
  }
  return quiet;
}

void Daemon::note_spin_gap(std::uint64_t gap_ns) {
  counters_.max_spin_gap_ns = std::max(counters_.max_spin_gap_ns, gap_ns);
  if (gap_ns > 1'000'000) ++counters_.spin_gaps_over_1ms;
}

void Daemon::account_cache_write(const Status& s) {
  if (s.is_ok()) {
    ++cache_.saves;
    cache_.error.clear();
  } else if (cache_.error != s.message()) {
    cache_.error = s.message();
    std::fprintf(stderr, "lithosd: predictor cache: %s (the daemon goes on)\n", s.message().c_str());
  }
}

void Daemon::collect_cache_write(bool wait) {
  if (!cache_.writer.joinable()) return;
  if (!wait) {
    const std::lock_guard lock(cache_.mu);
    if (!cache_.done) return;
  }
  cache_.writer.join();
  account_cache_write(cache_.result);
}

void Daemon::save_cache(std::uint64_t now, bool force) {
  if (cache_.path.empty()) return;
  collect_cache_write(force);
  if (cache_.writer.joinable()) return;  // the last write is still going on
  if (!force && now - cache_.saved_ns < kCacheEveryNs) return;
  const sched::LatencyPredictor& p = engine_->state().predictor;
  const std::uint64_t obs =
      p.stats(sched::PriorityClass::kHigh).observations + p.stats(sched::PriorityClass::kBestEffort).observations;
  if (obs == cache_.saved_obs) return;
  auto text = std::make_shared<const std::string>(engine_->save_predictions());
  cache_.saved_ns = now;
  cache_.saved_obs = obs;
  if (!force) {
    // fsync() of a file can take tens of milliseconds: not in the loop,
    // whose clients' submit rings fill meanwhile.
    cache_.done = false;
    try {
      cache_.writer = std::thread([this, text] {
        const Status s = write_predictor_cache(cache_.path, options_.device, *text);
        const std::lock_guard lock(cache_.mu);
        cache_.result = s;
        cache_.done = true;
      });
      return;
    } catch (const std::system_error&) {  // no thread: written here
    }
  }
  account_cache_write(write_predictor_cache(cache_.path, options_.device, *text));
}

bool Daemon::step(std::uint64_t now) {
  ++counters_.loops;
  turn_ns_ = now;
  bool any = false;
  // Engine events and doorbells are counted per window.
  if (now - event_window_ns_ >= kEventWindowNs) {
    event_window_ns_ = now;
    for (auto& c : clients_) c->events = c->bells = c->bell_msgs = 0;
    for (TenantLoad& l : loads_) l.events = 0;
  }
  // New connections, Hellos, closed sockets, stopped clients are looked
  // for once a millisecond (or at once when the idle poll() saw a socket):
  // accept4() on a listening socket costs a socket allocation even when
  // nothing waits, too much for every turn of the loop, and so would a
  // system call per connection.
  const bool sockets = now - last_socket_check_ns_ > 1'000'000;
  if (sockets) {
    last_socket_check_ns_ = now;
    any |= accept_connections(now);
    any |= serve_pending(now);
    any |= check_sockets(now);
    any |= check_clients(now);
    any |= check_faults(now);
    flush_drop_log(now, false);
  }
  // The heartbeat shares its cache line with the allocation a high-priority
  // client reads at every launch: written once a millisecond (clients allow
  // it grant_timeout_ms), not at every turn of the loop, so that it does not
  // pull that line away from them.
  const bool beat = now - last_heartbeat_ns_ >= kHeartbeatNs;
  if (beat) last_heartbeat_ns_ = now;
  for (std::size_t i = 0; i < clients_.size(); ++i) {
    Client& c = *clients_[i];
    if (beat) c.channel.layout().header.heartbeat_ns.store(now, std::memory_order_relaxed);
    if (c.inflight > 0) any |= poll_completions(c, now);
    if (!drain_submits(c, now)) {
      drop_client(i, now, DropReason::kMalformed, c.doomed_why);
      --i;
      any = true;
    }
  }
  any |= dispatch(now);
  // Clients whose grants overflowed this turn.
  for (std::size_t i = 0; i < clients_.size(); ++i) {
    if (!clients_[i]->doomed) continue;
    drop_client(i, now, clients_[i]->doomed, clients_[i]->doomed_why);
    --i;
    any = true;
  }
  publish_allocations();
  for (auto& c : clients_) {
    while (!c->overflow.empty() && c->channel.layout().grant.push(c->overflow.front())) {
      c->overflow.pop_front();
      --loads_[c->tenant].queued_grants;
    }
  }
  if (power_ != nullptr) {
    if (const auto d = power_->tick(now, engine_->state()); d && trace_.is_open()) {
      trace_.write_record(
          power_trace_line(now, *d, power_mode_name(power_->mode()), power_->sm_clock_mhz(), power_->power_w()));
    }
  }
  if (log_->recording() && !log_->events().empty()) {
    trace_.write(log_->events());
    log_->clear_events();
  }
  // Keep spinning while best-effort work is in flight or waiting, and
  // polling while anything is.
  bool inflight = false, be_work = false;
  for (const auto& t : engine_->state().tenants) {
    inflight = inflight || t.has_work();
    be_work = be_work || (!t.is_high() && t.has_work());
  }
  if (any || inflight) last_event_ns_ = now;
  if (be_work) last_be_work_ns_ = now;
  if (any) ++counters_.busy_loops;
  return any;
}

// ---------------------------------------------------------------------------
// Connections

bool Daemon::accept_connections(std::uint64_t now) {
  if (now < accept_paused_until_) return false;
  bool any = false;
  for (int n = 0; n < kAcceptsPerTurn; ++n) {
    int err = 0;
    auto fd = ipc::accept_client(listen_fd_, &err);
    if (!fd) {
      if (err == EMFILE || err == ENFILE) {
        // accept() fails so before it looks at the backlog: only a
        // connection found there counts, and the next is tried.
        if (!refuse_without_descriptors(now)) break;
        any = true;
        continue;
      }
      if (err != EAGAIN) {
        // ENOBUFS, ENOMEM and the like: rest a moment rather than spin on a
        // listening socket that stays readable.
        accept_paused_until_ = now + 10'000'000;
        note_drop(DropReason::kDescriptors, 0, static_cast<unsigned>(-1), {}, {}, fd.status().message());
        ++counters_.clients_refused;
      }
      break;
    }
    any = true;
    auto p = std::make_unique<Pending>();
    p->sock = fd.value();
    p->since_ns = now;
    if (auto cred = ipc::peer_credentials(p->sock)) {
      p->pid = cred->pid;
      p->uid = cred->uid;
    }
    if (pending_.size() >= kMaxConnecting) {
      refuse_connection(p->sock, DropReason::kFull,
                        "lithosd has " + std::to_string(kMaxConnecting) +
                            " connections waiting for their Hello; try again in a moment",
                        p->pid, p->uid);
      continue;
    }
    int& mine = connecting_by_uid_[p->uid];
    if (mine >= options_.config.max_connecting_per_uid) {
      refuse_connection(p->sock, DropReason::kUidConnecting,
                        "uid " + std::to_string(p->uid) + " has " + std::to_string(mine) +
                            " connections waiting for their Hello (max_connecting_per_uid)",
                        p->pid, p->uid);
      continue;
    }
    ++mine;
    pending_.push_back(std::move(p));
  }
  return any;
}

// accept() found no descriptor left: close the spare one, take the
// connection with it, tell it why, close it, and take the spare again; with
// no spare (another thread of this process took the slot), let the
// listening socket rest 10 ms instead of spinning on it.
bool Daemon::refuse_without_descriptors(std::uint64_t now) {
  int err = 0;
  if (spare_fd_ >= 0) {
    ::close(spare_fd_);
    spare_fd_ = -1;
    auto fd = ipc::accept_client(listen_fd_, &err);
    if (fd) {
      int pid = 0;
      unsigned uid = static_cast<unsigned>(-1);
      if (auto cred = ipc::peer_credentials(fd.value())) {
        pid = cred->pid;
        uid = cred->uid;
      }
      ++counters_.accept_errors;
      refuse_connection(fd.value(), DropReason::kDescriptors,
                        "lithosd is out of file descriptors (" + std::to_string(clients_.size()) +
                            " clients); its RLIMIT_NOFILE is too low for max_clients",
                        pid, uid);
    }
    spare_fd_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (fd) return true;
    if (err == EAGAIN) return false;  // nobody waits
  }
  ++counters_.accept_errors;
  accept_paused_until_ = now + 10'000'000;
  note_drop(DropReason::kDescriptors, 0, static_cast<unsigned>(-1), {}, {},
            "accept: out of file descriptors and no spare one; not accepting for 10 ms");
  ++counters_.clients_refused;
  return false;
}

void Daemon::refuse_connection(int sock, DropReason r, const std::string& why, int pid, unsigned uid,
                               const std::string& program, const std::string& tenant) {
  ipc::Welcome w;
  w.status = r == DropReason::kBadHello ? ipc::WelcomeStatus::kBadHello : ipc::WelcomeStatus::kFull;
  w.daemon_epoch = epoch_;
  copy_text(w.message, why);
  (void)ipc::send_packet(sock, &w, sizeof w);
  ::close(sock);
  ++counters_.clients_refused;
  note_drop(r, pid, uid, program, tenant, why);
}

bool Daemon::serve_pending(std::uint64_t now) {
  if (pending_.empty()) return false;
  // One poll() for every connection waiting: which have something to read.
  std::vector<pollfd> fds;
  fds.reserve(pending_.size());
  for (const auto& p : pending_) fds.push_back({p->sock, POLLIN, 0});
  if (::poll(fds.data(), fds.size(), 0) < 0) return false;
  // Those to serve now (a Hello, or its end, is there; or it is late) leave
  // the list first.
  std::vector<std::pair<std::unique_ptr<Pending>, bool>> ready;  // (connection, readable)
  int readable_ones = 0;
  std::size_t kept = 0;
  for (std::size_t i = 0; i < pending_.size(); ++i) {
    const bool readable = fds[i].revents != 0;
    const bool late = now - pending_[i]->since_ns >= options_.hello_timeout_ns;
    if (!late && (!readable || readable_ones >= kHellosPerTurn)) {
      pending_[kept++] = std::move(pending_[i]);
      continue;
    }
    readable_ones += readable ? 1 : 0;
    ready.emplace_back(std::move(pending_[i]), readable);
  }
  pending_.resize(kept);
  for (auto& [p, readable] : ready) {
    if (auto it = connecting_by_uid_.find(p->uid); it != connecting_by_uid_.end() && --it->second <= 0)
      connecting_by_uid_.erase(it);
    if (!readable) {
      refuse_connection(p->sock, DropReason::kHelloTimeout,
                        "no Hello within " + std::to_string(options_.hello_timeout_ns / 1'000'000) + " ms", p->pid,
                        p->uid);
      continue;
    }
    ipc::Hello hello;
    int passed = -1;
    auto got = ipc::recv_packet(p->sock, &hello, sizeof hello, &passed, 0);
    if (passed >= 0) ::close(passed);  // clients never send descriptors
    if (!got || got.value() != sizeof hello) {
      // Closed, or not a Hello.
      refuse_connection(p->sock, DropReason::kBadHello,
                        !got               ? got.status().message()
                        : got.value() == 0 ? std::string("closed before its Hello")
                                           : "a packet of " + std::to_string(got.value()) + " bytes, not a Hello",
                        p->pid, p->uid);
      continue;
    }
    if (hello.kind == ipc::HelloKind::kClient) {
      // Registrations are bounded in all and per uid; `lithos status` is not.
      const auto it = clients_by_uid_.find(p->uid);
      const int mine = it != clients_by_uid_.end() ? it->second : 0;
      ipc::Hello named = hello;
      (void)ipc::validate_hello(named);
      const std::string program = text_of(named.program, sizeof named.program);
      const std::string tenant = text_of(named.tenant, sizeof named.tenant);
      if (clients_.size() >= static_cast<std::size_t>(options_.config.max_clients)) {
        refuse_connection(
            p->sock, DropReason::kFull,
            "lithosd serves " + std::to_string(options_.config.max_clients) + " clients at most (max_clients)", p->pid,
            p->uid, program, tenant);
        continue;
      }
      if (mine >= options_.config.max_clients_per_uid) {
        refuse_connection(p->sock, DropReason::kUidClients,
                          "uid " + std::to_string(p->uid) + " has " + std::to_string(mine) +
                              " clients registered (max_clients_per_uid)",
                          p->pid, p->uid, program, tenant);
        continue;
      }
    }
    welcome(p->sock, hello, now);
  }
  return !ready.empty();
}

void Daemon::welcome(int sock, const ipc::Hello& hello_in, std::uint64_t now) {
  ipc::Hello hello = hello_in;
  ipc::Welcome w;
  w.daemon_epoch = epoch_;
  auto refuse = [&](ipc::WelcomeStatus st, const std::string& why) {
    w.status = st;
    copy_text(w.message, why);
    (void)ipc::send_packet(sock, &w, sizeof w);
    note_refused(sock, hello, st, why);
    ::close(sock);
    ++counters_.clients_refused;
  };
  if (Status s = ipc::validate_hello(hello); !s.is_ok()) return refuse(ipc::WelcomeStatus::kBadHello, s.message());
  if (hello.kind == ipc::HelloKind::kStatus) {
    ++counters_.status_requests;
    // What the asker sees depends on who it is (status_json); a peer whose
    // uid cannot be read sees no one's clients in full.
    auto asker = ipc::peer_credentials(sock);
    const std::string js = status_json(now, asker ? asker->uid : static_cast<uid_t>(-1));
    (void)ipc::send_packet(sock, js.data(), js.size());
    ::close(sock);
    return;
  }
  auto cred = ipc::peer_credentials(sock);
  if (!cred)
    return refuse(ipc::WelcomeStatus::kRefused, "cannot read the peer's credentials: " + cred.status().message());
  // Its supplementary groups as the kernel saw them when it connected
  // (SO_PEERGROUPS); where the kernel cannot tell them, none, and a refusal
  // says so.
  auto groups = ipc::peer_groups(sock);
  auto res = resolve_tenant(options_.config, text_of(hello.tenant, sizeof hello.tenant),
                            text_of(hello.program, sizeof hello.program), cred->uid, cred->gid,
                            groups ? *groups : std::vector<gid_t>{});
  if (!res) {
    const bool unknown = res.status().code() == StatusCode::kNotFound;
    std::string why = res.status().message();
    if (!groups && !unknown) {
      std::fprintf(stderr, "lithosd: pid %d: %s (%s)\n", static_cast<int>(cred->pid), why.c_str(),
                   groups.status().message().c_str());
      why = "supplementary groups unknown (SO_PEERGROUPS): " + why;
    }
    return refuse(unknown ? ipc::WelcomeStatus::kNoTenant : ipc::WelcomeStatus::kRefused, why);
  }
  const auto tenant = static_cast<sched::TenantId>(res->index);
  const TenantConfig& tc = options_.config.tenants[res->index];
  auto channel = ipc::Channel::create(next_client_, tenant, epoch_);
  if (!channel) return refuse(ipc::WelcomeStatus::kFull, "cannot create the channel: " + channel.status().message());
  auto c = std::make_unique<Client>();
  c->id = next_client_++;
  c->sock = sock;
  c->channel = std::move(channel).value();
  c->tenant = tenant;
  c->high = tc.priority == sched::PriorityClass::kHigh;
  c->pid = cred->pid;
  c->uid = cred->uid;
  c->program = text_of(hello.program, sizeof hello.program);
  if ((hello.flags & ipc::kHelloMpsKnown) != 0) c->mps = (hello.flags & ipc::kHelloMpsClient) != 0 ? 1 : 0;
  c->since_ns = now;
  ipc::ChannelHeader& h = c->channel.layout().header;
  if (c->high) h.flags.fetch_or(ipc::kChannelHighPriority, std::memory_order_relaxed);
  const sched::TpcSet fb = fallback_of(tenant);
  h.fallback[0].store(fb.word(0), std::memory_order_relaxed);
  h.fallback[1].store(fb.word(1), std::memory_order_relaxed);
  publish_allocation(*c);
  c->sizes = ipc::SizeTableWriter(&c->channel.layout().sizes);
  if (tenant < right_sizes_.size()) {
    for (const RightSize& r : right_sizes_[tenant]) c->sizes.publish(r.kernel, r.grid, r.tpcs);
  }

  w.status = ipc::WelcomeStatus::kOk;
  w.client_id = c->id;
  w.tenant_id = tenant;
  w.tenant_class = c->high ? ipc::TenantClass::kHigh : ipc::TenantClass::kBestEffort;
  w.quota = static_cast<std::uint32_t>(tc.quota);
  w.immediate_priority = stream_priority(engine_->immediate_priority(tenant), options_.config.stream_priorities);
  w.channel_bytes = static_cast<std::uint32_t>(c->channel.bytes());
  copy_text(w.tenant, tc.name);
  copy_text(w.gpu, options_.gpu_uuid);
  if (options_.slot_map_text.size() < sizeof w.slot_map) copy_text(w.slot_map, options_.slot_map_text);
  copy_text(w.message, res->by_rule ? "matched by program name" : res->by_default ? "default tenant" : "as asked");
  if (Status s = ipc::send_packet(sock, &w, sizeof w, c->channel.fd()); !s.is_ok()) {
    note_refused(sock, hello, ipc::WelcomeStatus::kFull, "its Welcome could not be sent: " + s.message());
    ::close(sock);
    ++counters_.clients_refused;
    return;
  }
  ++counters_.clients_accepted;
  c->channel.close_fd();  // the client has its own now; the mapping stays
  c->beat_moved_ns = c->progress_ns = now;
  ++clients_by_uid_[c->uid];
  ++loads_[c->tenant].clients;
  const Client& added = *c;
  clients_.push_back(std::move(c));
  // Said once per client outside MPS: when it comes beside MPS clients, or
  // when the first MPS client comes beside it.
  // And once for an MPS client of a tenant that runs outside MPS.
  const bool first_inside =
      added.mps == 1 && std::count_if(clients_.begin(), clients_.end(), [](const auto& x) { return x->mps == 1; }) == 1;
  const bool misplaced = added.mps == 1 && !options_.config.tenants[added.tenant].mps;
  if (added.mps == 0 || first_inside || misplaced) {
    for (const std::string& line : mps_warnings(first_inside ? std::nullopt : std::optional<std::uint32_t>(added.id))) {
      std::fprintf(stderr, "lithosd: %s\n", line.c_str());
    }
  }
}

std::vector<std::string> Daemon::mps_warnings(std::optional<std::uint32_t> only, std::optional<uid_t> viewer) const {
  std::size_t inside = 0;
  for (const auto& c : clients_) inside += c->mps == 1 ? 1U : 0U;
  std::vector<std::string> out;
  const sched::EngineState& st = engine_->state();
  for (const auto& c : clients_) {
    if (only && c->id != *only) continue;
    const std::string who = shows_in_full(*c, viewer) ? "pid " + std::to_string(c->pid) + ", uid " +
                                                            std::to_string(c->uid) + ", " + c->program
                                                      : std::string("another user's");
    const std::string& tenant = st.tenants[c->tenant].spec.name;
    const bool chosen = !options_.config.tenants[c->tenant].mps;  // its tenant runs outside MPS on purpose
    if (c->mps == 1 && chosen) {
      out.push_back("client " + std::to_string(c->id) + " (" + who + ", tenant " + tenant +
                    ") is an MPS client, but its tenant runs outside MPS (mps = false): a fatal fault of it reaches "
                    "every MPS client of the GPU. Start it with `lithos run --tenant " +
                    tenant + "` (docs/daemon.md, \"GPU faults\")");
      continue;
    }
    if (c->mps != 0 || inside == 0) continue;
    out.push_back("client " + std::to_string(c->id) + " (" + who + ", tenant " + tenant + ") runs outside MPS beside " +
                  std::to_string(inside) +
                  " MPS client(s): its kernels time-slice with theirs and no TPC mask keeps "
                  "them apart" +
                  (chosen ? std::string(" (its tenant's choice, mps = false: its faults stay its own)")
                          : std::string(" (MPS serves one user id at a time: docs/daemon.md, \"Failure handling\")")));
  }
  return out;
}

bool Daemon::check_sockets(std::uint64_t now) {
  if (clients_.empty()) return false;
  // One poll() for every client's socket. A muted one (it rang far more
  // than it submitted) is not read, but its hang-up is still seen.
  std::vector<pollfd> fds;
  fds.reserve(clients_.size());
  for (const auto& c : clients_) fds.push_back({c->sock, static_cast<short>(now < c->muted_until ? 0 : POLLIN), 0});
  if (::poll(fds.data(), fds.size(), 0) <= 0) return false;
  bool any = false;
  std::vector<std::uint32_t> gone;
  for (std::size_t i = 0; i < clients_.size(); ++i) {
    Client& c = *clients_[i];
    const short rev = fds[i].revents;
    if (rev == 0) continue;
    bool closed = (rev & (POLLHUP | POLLERR | POLLNVAL)) != 0;
    // Doorbells (a client woke the idle loop): read what is there, a bounded
    // number of packets.
    for (int n = 0; !closed && (rev & POLLIN) != 0 && n < kBellReadsPerCheck; ++n) {
      char buf[64];
      const ssize_t got = ::recv(c.sock, buf, sizeof buf, MSG_DONTWAIT);
      if (got > 0) {
        counters_.doorbells += static_cast<std::uint64_t>(got);
        c.bells += static_cast<std::uint64_t>(got);
        continue;
      }
      closed = got == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
      break;
    }
    // A client rings once per launch it submits while the daemon sleeps, at
    // most: one that rings far more is not read for a while (it would keep
    // the idle loop awake, a core's worth).
    if (!closed && c.bells > c.bell_msgs + kBellSlack && now >= c.muted_until) {
      c.muted_until = now + kBellMuteNs;
      ++counters_.doorbell_mutes;
    }
    if (closed) gone.push_back(c.id);
  }
  // The rest of a crowd that left at once are seen again at the next check.
  if (gone.size() > static_cast<std::size_t>(kDropsPerTurn)) gone.resize(kDropsPerTurn);
  for (const std::uint32_t id : gone) {
    for (std::size_t i = 0; i < clients_.size(); ++i) {
      if (clients_[i]->id != id) continue;
      drop_client(i, now, std::nullopt, "its socket closed");
      any = true;
      break;
    }
  }
  return any;
}

// Once a millisecond: a client that holds work (atoms in flight, grants not
// taken) and whose heartbeat stood still for client_timeout_ms has stopped
// (SIGSTOP, a debugger, a hung process); one whose work made no progress
// (nothing completed, no grant taken) for progress_timeout_ms does not do
// what it was granted. Either is dropped and its work given back; the
// client registers again when it runs on.
bool Daemon::check_clients(std::uint64_t now) {
  const auto ms = [](double v) { return static_cast<std::uint64_t>(v * 1e6); };
  const std::uint64_t stale_ns = ms(options_.config.client_timeout_ms);
  const std::uint64_t stuck_ns = ms(options_.config.progress_timeout_ms);
  bool any = false;
  int dropped = 0;
  for (std::size_t i = 0; i < clients_.size() && dropped < kDropsPerTurn; ++i) {
    Client& c = *clients_[i];
    ipc::ChannelLayout& l = c.channel.layout();
    // Both are written by the client: only whether they moved counts, and
    // for the grant ring's tail only forward, up to what was pushed (a tail
    // that goes back and forth is not progress).
    const std::uint64_t tail = l.grant.tail.load(std::memory_order_acquire);
    const std::uint64_t beat = l.header.client_beat_ns.load(std::memory_order_acquire);
    if (tail > c.grant_tail && tail <= l.grant.head.load(std::memory_order_relaxed)) {
      c.grant_tail = tail;
      c.progress_ns = now;
    }
    if (beat != c.beat) {
      c.beat = beat;
      c.beat_moved_ns = now;
    }
    const std::uint64_t untaken = l.grant.size() + c.overflow.size();
    const bool holds = c.inflight > 0 || untaken > 0;
    if (!holds) {
      c.holds_since = 0;
      c.progress_ns = now;
      continue;
    }
    if (c.holds_since == 0) c.holds_since = now;
    std::optional<DropReason> why;
    std::string text;
    const auto held = [&] {
      return std::to_string(c.inflight) + " atoms in flight, " + std::to_string(untaken) + " grants not taken";
    };
    // A client that never beat (0) is judged by its progress alone.
    const std::uint64_t still = now - std::max(c.beat_moved_ns, c.holds_since);
    if (stale_ns > 0 && c.beat != 0 && still > stale_ns) {
      why = DropReason::kStopped;
      text = "its heartbeat stood still for " + std::to_string(still / 1'000'000) + " ms with " + held();
    } else if (stuck_ns > 0 && now - c.progress_ns > stuck_ns) {
      const char* over = over_bound(c);
      why = over != nullptr ? DropReason::kFlood : DropReason::kNoProgress;
      text = std::string(over != nullptr ? "over its " + std::string(over) + " bound, and " : "") +
             "nothing completed and no grant taken for " + std::to_string((now - c.progress_ns) / 1'000'000) +
             " ms with " + held();
    }
    if (!why) continue;
    drop_client(i, now, why, text);
    --i;
    ++dropped;
    any = true;
  }
  return any;
}

// ---------------------------------------------------------------------------
// Fatal GPU faults

std::vector<FaultParty> Daemon::fault_parties() const {
  std::vector<FaultParty> out;
  out.reserve(clients_.size());
  for (const auto& c : clients_) {
    FaultParty p;
    p.client = c->id;
    p.pid = c->pid;
    p.uid = c->uid;
    p.program = c->program;
    p.tenant = engine_->state().tenants[c->tenant].spec.name;
    p.mps = c->mps == 1;
    p.inflight = c->inflight;
    p.waiting = c->pending;
    out.push_back(std::move(p));
  }
  return out;
}

void Daemon::log_fault(const std::vector<std::string>& lines) const {
  for (const std::string& l : lines) std::fprintf(stderr, "lithosd: %s\n", l.c_str());
}

void Daemon::apply_faults(std::uint64_t now) {
  for (auto& cp : clients_) {
    Client& c = *cp;
    if (c.faulted || !faults_->affected(c.id)) continue;
    c.faulted = true;
    ++counters_.faulted_clients;
    // What it had on the GPU is gone with its context: released at once,
    // and it is scheduled no more.
    TenantLoad& load = loads_[c.tenant];
    for (Stream& st : c.streams) {
      if (!st.open) continue;
      counters_.reclaimed_atoms += log_->close_queue(st.queue, to_time(now)).size();
      for (const sched::LaunchId id : st.launches) targets_.erase(id);
      st = Stream{};
    }
    std::fill(std::begin(c.busy_streams), std::end(c.busy_streams), 0);
    load.pending -= std::min<std::uint64_t>(load.pending, c.pending);
    load.inflight -= std::min<std::uint64_t>(load.inflight, c.inflight);
    load.queued_grants -= std::min<std::uint64_t>(load.queued_grants, c.overflow.size());
    c.pending = c.inflight = 0;
    c.overflow.clear();
    c.channel.layout().header.flags.fetch_or(ipc::kChannelFaulted, std::memory_order_acq_rel);
    dirty_ = true;
  }
}

bool Daemon::check_faults(std::uint64_t now) {
  bool any = false;
  if (xid_ != nullptr) {
    for (const std::uint64_t xid : xid_->take()) {
      log_fault(faults_->xid(now, xid, fault_parties()));
      any = true;
    }
  }
  for (auto& cp : clients_) {
    Client& c = *cp;
    if (c.fault_read) continue;
    const std::uint32_t code = c.channel.layout().header.client_fault.load(std::memory_order_acquire);
    if (code == 0) continue;
    c.fault_read = true;
    any = true;
    if (!ipc::is_sticky_cuda_error(code)) {
      // Written by the client: only a result that loses a context counts
      // (said once per client).
      log_fault({"client " + std::to_string(c.id) + " (pid " + std::to_string(c.pid) + ") reported a fault with " +
                 ipc::cuda_error_name(code) + ", which loses no context: ignored"});
      continue;
    }
    FaultParty me;
    for (FaultParty& p : fault_parties()) {
      if (p.client == c.id) me = p;
    }
    log_fault(faults_->client_fault(now, me, code, fault_parties()));
  }
  // MPS's own list of its clients, once per GPU fault: processes lithosd
  // does not serve hold the MPS server too.
  if (faults_->gpu_faulted() && options_.mps_client_pids && mps_asked_episode_ != faults_->episodes() &&
      !mps_query_.thread.joinable()) {
    mps_asked_episode_ = faults_->episodes();
    mps_query_.done = false;
    try {
      mps_query_.thread = std::thread([this] {
        std::vector<int> pids;
        try {
          pids = options_.mps_client_pids();
        } catch (...) {
        }
        const std::lock_guard lock(mps_query_.mu);
        mps_query_.pids = std::move(pids);
        mps_query_.done = true;
      });
    } catch (const std::system_error&) {
    }
  }
  if (mps_query_.thread.joinable()) {
    bool done = false;
    {
      const std::lock_guard lock(mps_query_.mu);
      done = mps_query_.done;
    }
    if (done) {
      mps_query_.thread.join();
      faults_->add_mps_processes(mps_query_.pids);
    }
  }
  if (faults_->open()) {
    apply_faults(now);
    const auto lines = faults_->tick(now);
    any |= !lines.empty();
    log_fault(lines);
  }
  return any;
}

void Daemon::drop_client(std::size_t index, std::uint64_t now, std::optional<DropReason> reason,
                         const std::string& why) {
  Client& c = *clients_[index];
  if (!reason) {
    // What it said and what the GPU finished before it went: its last
    // reports (as far as its bounds allow), and completion markers that
    // landed (an exiting client's last atoms are done, not reclaimed). The
    // rest is reclaimed below.
    (void)drain_submits(c, now);
  }
  // Markers that landed count as completions, not as reclaimed atoms.
  if (c.inflight > 0) poll_completions(c, now);
  TenantLoad& load = loads_[c.tenant];
  for (Stream& s : c.streams) {
    if (!s.open) continue;
    const auto released = log_->close_queue(s.queue, to_time(now));
    counters_.reclaimed_atoms += released.size();
    for (const sched::LaunchId id : s.launches) targets_.erase(id);
  }
  load.pending -= std::min<std::uint64_t>(load.pending, c.pending);
  load.inflight -= std::min<std::uint64_t>(load.inflight, c.inflight);
  load.queued_grants -= std::min<std::uint64_t>(load.queued_grants, c.overflow.size());
  load.events -= std::min(load.events, c.events);
  if (load.clients > 0) --load.clients;
  if (auto it = clients_by_uid_.find(c.uid); it != clients_by_uid_.end() && --it->second <= 0)
    clients_by_uid_.erase(it);
  if (c.sock >= 0) ::close(c.sock);
  if (reason) {
    ++counters_.clients_dropped;
    note_drop(*reason, c.pid, c.uid, c.program, engine_->state().tenants[c.tenant].spec.name,
              "client " + std::to_string(c.id) + ": " + why);
  } else {
    ++counters_.clients_gone;
  }
  clients_.erase(clients_.begin() + static_cast<std::ptrdiff_t>(index));
  dirty_ = true;
}

void Daemon::note_refused(int sock, const ipc::Hello& hello, ipc::WelcomeStatus st, const std::string& why) {
  int pid = 0;
  unsigned uid = static_cast<unsigned>(-1);
  if (auto cred = ipc::peer_credentials(sock)) {
    pid = cred->pid;
    uid = cred->uid;
  }
  const DropReason r = st == ipc::WelcomeStatus::kBadHello ? DropReason::kBadHello
                       : st == ipc::WelcomeStatus::kFull   ? DropReason::kChannel
                                                           : DropReason::kTenant;
  // The names as the Hello carried them, made fit for a log line.
  ipc::Hello h = hello;
  h.tenant[sizeof h.tenant - 1] = h.program[sizeof h.program - 1] = '\0';
  const std::string program = ipc::valid_utf8(text_of(h.program, sizeof h.program));
  const std::string tenant = ipc::valid_utf8(text_of(h.tenant, sizeof h.tenant));
  note_drop(r, pid, uid, program, tenant, why);
}

void Daemon::note_drop(DropReason r, int pid, unsigned uid, const std::string& program, const std::string& tenant,
                       const std::string& why) {
  const auto k = static_cast<std::size_t>(r);
  ++counters_.drops[k];
  const std::uint64_t now = now_ns();
  flush_drop_log(now, false);
  if (drop_log_lines_ >= kDropLogLines) {
    ++drop_log_suppressed_[k];
    return;
  }
  ++drop_log_lines_;
  const bool refused = r >= DropReason::kFull;
  std::string who = "pid " + std::to_string(pid) + ", uid " +
                    (uid == static_cast<unsigned>(-1) ? std::string("?") : std::to_string(uid));
  // Control characters cannot be in them (validate_hello); bytes that are
  // not UTF-8 are replaced again here for what did not pass it.
  if (!program.empty()) who += ", program " + ipc::valid_utf8(program);
  if (!tenant.empty()) who += ", tenant " + ipc::valid_utf8(tenant);
  std::fprintf(stderr, "lithosd: %s (%s): %s: %s\n", refused ? "refused a connection" : "dropped a client", who.c_str(),
               drop_reason_name(r), ipc::valid_utf8(why).c_str());
}

// At the end of each window of the drop log: one line for what it did not
// write (`force`: now, at exit).
void Daemon::flush_drop_log(std::uint64_t now, bool force) {
  if (!force && now - drop_log_window_ns_ < kDropLogWindowNs) return;
  std::uint64_t total = 0;
  std::string by;
  for (std::size_t k = 0; k < kDropReasons; ++k) {
    if (drop_log_suppressed_[k] == 0) continue;
    total += drop_log_suppressed_[k];
    by += std::string(by.empty() ? "" : ", ") + drop_reason_name(static_cast<DropReason>(k)) + " " +
          std::to_string(drop_log_suppressed_[k]);
    drop_log_suppressed_[k] = 0;
  }
  if (total > 0) {
    std::fprintf(stderr,
                 "lithosd: %llu more dropped clients and refused connections in the last %.0f s, not "
                 "logged one by one: %s (lithos status --json: counters.drop_reasons)\n",
                 static_cast<unsigned long long>(total), static_cast<double>(now - drop_log_window_ns_) / 1e9,
                 by.c_str());
  }
  drop_log_window_ns_ = now;
  drop_log_lines_ = 0;
}

Daemon::Client* Daemon::find_client(std::uint32_t id) {
  for (auto& c : clients_) {
    if (c->id == id) return c.get();
  }
  return nullptr;
}

void Daemon::shutdown_clients() {
  for (auto& c : clients_) c->channel.layout().header.flags.fetch_or(ipc::kChannelDaemonGone);
}

// ---------------------------------------------------------------------------
// The hot path

// ---------------------------------------------------------------------------
// Bounds

// kTenantBoundFactor times a client's bound for the tenant's clients
// together; while a tenant is over, those of its clients above their share
// (the tenant's bound over its clients) count as over too, so that one
// client cannot use up what the others may hold.
const char* Daemon::over_bound(const Client& c) const {
  const DaemonConfig& cfg = options_.config;
  const auto events_cap = static_cast<std::uint64_t>(cfg.max_events_per_s * static_cast<double>(kEventWindowNs) / 1e9);
  if (c.pending >= cfg.max_pending_launches) return "max_pending_launches";
  if (c.inflight >= cfg.max_inflight) return "max_inflight";
  if (c.overflow.size() >= cfg.max_queued_grants) return "max_queued_grants";
  if (c.events >= events_cap) return "max_events_per_s";
  const TenantLoad& t = loads_[c.tenant];
  const std::uint64_t n = std::max<std::uint64_t>(t.clients, 1);
  const auto over = [&](std::uint64_t total, std::uint64_t mine, std::uint64_t bound) {
    const std::uint64_t all = bound * kTenantBoundFactor;
    return total >= all && mine >= all / n;
  };
  if (over(t.pending, c.pending, cfg.max_pending_launches)) return "tenant's max_pending_launches";
  if (over(t.inflight, c.inflight, cfg.max_inflight)) return "tenant's max_inflight";
  if (over(t.queued_grants, c.overflow.size(), cfg.max_queued_grants)) return "tenant's max_queued_grants";
  if (over(t.events, c.events, events_cap)) return "tenant's max_events_per_s";
  return nullptr;
}

void Daemon::add_pending(Client& c, std::int64_t delta) {
  c.pending = static_cast<std::uint32_t>(static_cast<std::int64_t>(c.pending) + delta);
  TenantLoad& t = loads_[c.tenant];
  t.pending = static_cast<std::uint64_t>(static_cast<std::int64_t>(t.pending) + delta);
  counters_.max_client_pending = std::max<std::uint64_t>(counters_.max_client_pending, c.pending);
}

void Daemon::add_inflight(Client& c, Stream& s, std::uint32_t stream, std::int64_t delta) {
  c.inflight = static_cast<std::uint32_t>(static_cast<std::int64_t>(c.inflight) + delta);
  TenantLoad& t = loads_[c.tenant];
  t.inflight = static_cast<std::uint64_t>(static_cast<std::int64_t>(t.inflight) + delta);
  counters_.max_client_inflight = std::max<std::uint64_t>(counters_.max_client_inflight, c.inflight);
  const std::uint64_t bit = std::uint64_t{1} << (stream % 64);
  if (s.inflight.empty()) {
    c.busy_streams[stream / 64] &= ~bit;
  } else {
    c.busy_streams[stream / 64] |= bit;
  }
}

void Daemon::add_events(Client& c, std::uint64_t n) {
  c.events += n;
  loads_[c.tenant].events += n;
}

// A grant went into its overflow queue: the queue is bounded, and a client
// that leaves twice the bound untaken beyond a full ring is not reading them.
void Daemon::note_overflow(Client& c) {
  ++loads_[c.tenant].queued_grants;
  counters_.max_client_queued_grants = std::max<std::uint64_t>(counters_.max_client_queued_grants, c.overflow.size());
  if (!c.doomed && c.overflow.size() >= 2 * static_cast<std::uint64_t>(options_.config.max_queued_grants)) {
    c.doomed = DropReason::kGrantsNotTaken;
    c.doomed_why = std::to_string(c.overflow.size()) + " grants waiting beyond its full grant ring (twice " +
                   "max_queued_grants): it does not read them";
  }
}

bool Daemon::drain_submits(Client& c, std::uint64_t now) {
  ipc::SubmitMsg m;
  bool corrupt = false;
  ipc::SpscRing<ipc::SubmitMsg, ipc::kRingSlots>& ring = c.channel.layout().submit;
  if (c.faulted) {
    // Its work is lost: what it still says is read and dropped (it stops
    // once it sees kChannelFaulted).
    for (int n = 0; n < 256 && ring.pop(&m, &corrupt); ++n) {
    }
    return true;
  }
  counters_.max_submit_depth = std::max(counters_.max_submit_depth, ring.size());
  // A bounded batch per loop keeps one chatty client from starving others;
  // a client over one of its bounds is not read (its ring fills, and its
  // library waits or keeps its reports) until it is under again.
  for (int n = 0; n < 256; ++n) {
    if (over_bound(c) != nullptr) {
      if (ring.size() > 0 && c.throttled_since == 0) {
        c.throttled_since = now;
        ++counters_.throttles;
      }
      return true;
    }
    if (!ring.pop(&m, &corrupt)) break;
    ++c.bell_msgs;
    if (Status s = handle_submit(c, m, now); !s.is_ok()) {
      c.doomed_why = s.message();
      return false;
    }
  }
  c.throttled_since = 0;
  if (corrupt) c.doomed_why = "its submit ring's indices are inconsistent";
  return !corrupt;
}

Status Daemon::handle_submit(Client& c, const ipc::SubmitMsg& m, std::uint64_t now) {
  if (Status st = c.validator.check(m); !st.is_ok()) {
    if (m.type == ipc::SubmitType::kSample) ++counters_.hp_samples_rejected;
    return st;
  }
  ++counters_.submits;
  add_events(c, 1);
  if (m.stream >= c.streams.size()) c.streams.resize(m.stream + 1);  // validated: < kMaxStreams
  Stream& s = c.streams[m.stream];
  dirty_ = true;
  switch (m.type) {
    case ipc::SubmitType::kStreamOpen: {
      auto q = log_->add_queue(c.tenant);
      if (!q) return q.status();
      s = Stream{};
      s.open = true;
      s.high = c.high;
      s.queue = q.value();
      s.completed = c.channel.layout().completed[m.stream].load(std::memory_order_acquire);
      s.next_marker = s.completed;
      return Status::ok();
    }
    case ipc::SubmitType::kStreamClose: {
      counters_.reclaimed_atoms += log_->close_queue(s.queue, to_time(now)).size();
      for (const sched::LaunchId id : s.launches) targets_.erase(id);
      add_pending(c, -static_cast<std::int64_t>(s.launches.size()));
      const auto held = static_cast<std::int64_t>(s.inflight.size());
      s = Stream{};
      add_inflight(c, s, m.stream, -held);
      return Status::ok();
    }
    case ipc::SubmitType::kSync: log_->sync(s.queue); return Status::ok();
    case ipc::SubmitType::kGoodbye: return Status::ok();  // the socket's end follows
    case ipc::SubmitType::kSample: {
      // Validated (an open stream, a reported seq, a duration in bounds);
      // whether that launch was timed, and of that kernel, is ours to know.
      const auto it =
          std::find_if(s.timed.begin(), s.timed.end(), [&](const Stream::Timed& t) { return t.seq == m.seq; });
      if (it == s.timed.end() || it->kernel != m.kernel) {
        ++counters_.hp_samples_unmatched;
        return Status::ok();
      }
      log_->observe_hp_sample(c.tenant, it->key, it->blocks, it->blocks_per_tpc, it->tpcs,
                              std::chrono::nanoseconds(static_cast<std::int64_t>(ipc::sample_ns(m))));
      s.timed.erase(it);
      ++counters_.hp_samples;
      return Status::ok();
    }
    case ipc::SubmitType::kLaunch: break;
  }
  sched::LaunchDesc d;
  d.kernel = m.kernel;
  d.grid = {m.grid[0], m.grid[1], m.grid[2]};
  d.block = {m.block[0], m.block[1], m.block[2]};
  d.regs_per_thread = m.regs != 0 ? m.regs : 32;
  d.smem_per_block = m.smem;
  d.cluster = {m.cluster[0], m.cluster[1], m.cluster[2]};
  d.cooperative = (m.flags & ipc::kSubmitCooperative) != 0;
  d.indivisible = (m.flags & (ipc::kSubmitWhole | ipc::kSubmitGraph)) != 0;
  if ((m.flags & ipc::kSubmitGraph) != 0) {
    // A whole CUDA graph: its kernels' shapes are not sent.
    d.grid = d.block = {1, 1, 1};
    if ((m.flags & ipc::kSubmitPinned) != 0) {  // its descriptors carry a set already (validated)
      std::uint64_t w0 = 0, w1 = 0;
      ipc::pinned_tpcs(m, &w0, &w1);
      d.pinned = sched::TpcSet::from_words(w0, w1) & engine_->state().device_tpcs;
      if (d.pinned.empty()) d.pinned = engine_->state().device_tpcs;  // none of ours: it runs everywhere we know of
    } else {
      // Its descriptors are not built yet: the set of this grant stays in
      // them for every later replay.
      d.whole_device = true;
    }
  }
  ++c.launches;
  // One increasing sequence per stream (see DaemonClient::atom_launched):
  // grant markers are numbered past every launch's seq.
  s.next_marker = std::max(s.next_marker, m.seq);
  if ((m.flags & ipc::kSubmitRunning) != 0) {
    // Already on the GPU: account it on the tenant's allocation.
    // A graph ran on the lasting set (its descriptors keep it).
    const sched::TpcSet alloc = allocation_of(c.tenant, (m.flags & ipc::kSubmitGraph) != 0);
    // The TPCs it says it ran on (validated: at most ipc::kMaxTpcs): a
    // right-sized launch, on that many of its allocation, lowest numbers
    // first (its entry in the channel's right-size table), so the rest stays
    // free for others. The allocation may have changed since the client read
    // it, so a count above its size now is taken as all of it.
    const auto size = static_cast<std::uint32_t>(alloc.count());
    std::uint32_t used = ipc::running_tpcs(m);
    if (used == 0 || used > size) used = size;
    sched::TpcSet on = alloc;
    if (used < size) {
      ++counters_.narrowed_reports;
      on = alloc.take_lowest(static_cast<int>(used));
    }
    auto a = log_->submit_running(s.queue, d, on, to_time(now));
    if (!a) return a.status();
    if ((m.flags & ipc::kSubmitTimed) != 0) {  // validated: not a graph
      // What its sample will be learnt as: its key, and the TPCs it could
      // use of those it ran on (as Engine::atom_finished counts them).
      const sched::InflightAtom& at = engine_->state().atoms[a->atom];
      const int usable = std::min(
          at.tpcs.count(), sched::occupancy_tpc_bound(engine_->state().config.device, at.blocks, at.blocks_per_tpc));
      if (s.timed.size() >= kTimedPerStream) s.timed.pop_front();
      s.timed.push_back({m.seq, m.kernel, at.key, at.blocks, at.blocks_per_tpc, std::max(usable, 1)});
    }
    s.inflight.push_back({m.seq, a->atom, now, used});
    add_inflight(c, s, m.stream, 1);
    ++counters_.running_launches;
    // fed by the Engine's hp right-size choices: publish_right_size(tenant,
    // kernel, grid, tpcs) once the Engine has chosen a size for a kernel; for
    // now only the test hook (LITHOS_TEST_RIGHT_SIZE) publishes here.
    if (!test_right_sizes_.empty() && (m.flags & ipc::kSubmitGraph) == 0) {
      for (const auto& [x, t] : test_right_sizes_)
        if (m.grid[0] == x) publish_right_size(c.tenant, m.kernel, m.grid, t);
    }
    return Status::ok();
  }
  auto id = log_->submit(s.queue, d, to_time(now));
  if (!id) return id.status();
  targets_[id.value()] = Target{c.id, m.stream, m.seq};
  s.launches.push_back(id.value());
  add_pending(c, 1);
  return Status::ok();
}

bool Daemon::publish_right_size(sched::TenantId tenant, std::uint64_t kernel, const std::uint32_t grid[3],
                                std::uint32_t tpcs) {
  if (tpcs == 0 || tenant >= options_.config.tenants.size()) return false;
  if (right_sizes_.size() <= tenant) right_sizes_.resize(options_.config.tenants.size());
  std::vector<RightSize>& sizes = right_sizes_[tenant];
  auto it = std::find_if(sizes.begin(), sizes.end(), [&](const RightSize& r) {
    return r.kernel == kernel && r.grid[0] == grid[0] && r.grid[1] == grid[1] && r.grid[2] == grid[2];
  });
  if (it != sizes.end() && it->tpcs == tpcs) return true;  // nothing new
  if (it == sizes.end()) {
    if (sizes.size() >= ipc::kSizeTableSlots) {
      ++counters_.right_sizes_refused;
      return false;
    }
    sizes.push_back({kernel, {grid[0], grid[1], grid[2]}, tpcs});
  } else {
    it->tpcs = tpcs;
  }
  for (auto& c : clients_) {
    if (c->tenant != tenant) continue;
    if (c->sizes.publish(kernel, grid, tpcs) == ipc::SizeTableWriter::Result::kFull) ++counters_.right_sizes_refused;
  }
  ++counters_.right_sizes_published;
  return true;
}

void Daemon::clear_right_sizes(sched::TenantId tenant) {
  if (tenant < right_sizes_.size()) right_sizes_[tenant].clear();
  for (auto& c : clients_) {
    if (c->tenant == tenant) c->sizes.clear();
  }
}

bool Daemon::poll_completions(Client& c, std::uint64_t now) {
  bool any = false;
  // Only the streams with something in flight (a bit each).
  for (std::uint32_t w = 0; w < ipc::kMaxStreams / 64; ++w) {
    for (std::uint64_t bits = c.busy_streams[w]; bits != 0; bits &= bits - 1) {
      const std::uint32_t i = w * 64 + static_cast<std::uint32_t>(__builtin_ctzll(bits));
      if (poll_stream(c, i, now)) any = true;
    }
  }
  if (any) {
    dirty_ = true;
    c.progress_ns = now;
  }
  return any;
}

bool Daemon::poll_stream(Client& c, std::uint32_t i, std::uint64_t now) {
  Stream& s = c.streams[i];
  if (!s.open || s.inflight.empty()) return false;
  // Never backwards (a stale marker): the highest value seen counts. A
  // marker may also land before its launch's report (the client writes it
  // first), so reports are matched against it when they arrive too.
  const std::uint64_t v = c.channel.layout().completed[i].load(std::memory_order_acquire);
  s.completed = std::max(s.completed, v);
  // The launches this value covers ran, one after another, from when the
  // stream was free for the first until now: each gets its predicted share
  // of that time (busy_share.hpp), not the first all of it.
  covered_.clear();
  for (const Stream::InFlight& f : s.inflight) {
    if (f.key > s.completed) break;
    const sched::InflightAtom& a = engine_->state().atoms[f.atom];
    covered_.push_back({.since_ns = f.since_ns, .predicted_ns = static_cast<double>(a.predicted.count())});
  }
  if (covered_.empty()) return false;
  share_busy_interval(s.last_end_ns, now, covered_);
  for (const CoveredLaunch& piece : covered_) {
    if (power_ != nullptr) {
      power_->completed(engine_->state().atoms[s.inflight.front().atom], to_time(piece.start_ns),
                        to_time(piece.end_ns));
    }
    log_->atom_finished(s.inflight.front().atom, to_time(piece.start_ns), to_time(piece.end_ns));
    s.inflight.pop_front();
  }
  add_inflight(c, s, i, -static_cast<std::int64_t>(covered_.size()));
  add_events(c, covered_.size());
  s.last_end_ns = now;
  counters_.completions += covered_.size();
  if (covered_.size() > 1) counters_.shared_completions += covered_.size();
  return true;
}

bool Daemon::dispatch(std::uint64_t now) {
  const lithos::Time t = to_time(now);
  if (!dirty_ && t < engine_->next_wakeup()) return false;
  dirty_ = false;
  out_.clear();
  log_->dispatch(t, out_);
  for (const sched::AtomDispatch& d : out_) {
    const auto it = targets_.find(d.launch);
    if (it == targets_.end()) continue;  // its client is gone
    Client* c = find_client(it->second.client);
    if (c == nullptr) continue;
    Stream& s = c->streams[it->second.stream];
    ipc::GrantMsg g;
    g.type = ipc::GrantType::kGrant;
    g.stream = it->second.stream;
    g.seq = it->second.seq;
    g.lo = d.blocks.lo;
    g.hi = d.blocks.hi;
    g.tpcs[0] = d.tpcs.word(0);
    g.tpcs[1] = d.tpcs.word(1);
    g.marker = ++s.next_marker;
    g.index = d.index;
    if (d.last) g.flags |= ipc::kGrantLast;
    if (d.tpcs == engine_->state().device_tpcs) g.flags |= ipc::kGrantWholeGpu;
    switch (stream_priority(d.priority, options_.config.stream_priorities)) {
      case ipc::StreamPriority::kHighest: g.flags |= ipc::kGrantHighPriority; break;
      case ipc::StreamPriority::kLowest: g.flags |= ipc::kGrantLowPriority; break;
      case ipc::StreamPriority::kKeep: break;
    }
    s.inflight.push_back({g.marker, d.atom, now});
    add_inflight(*c, s, it->second.stream, 1);
    add_events(*c, 1);
    deliver(*c, g);
    ++c->grants;
    ++counters_.grants;
    if (d.last) {
      // Launches finish being granted in their stream's order.
      auto l = !s.launches.empty() && s.launches.front() == d.launch
                   ? s.launches.begin()
                   : std::find(s.launches.begin(), s.launches.end(), d.launch);
      if (l != s.launches.end()) {
        s.launches.erase(l);
        add_pending(*c, -1);
      }
      targets_.erase(it);
    }
  }
  return !out_.empty();
}

void Daemon::deliver(Client& c, const ipc::GrantMsg& g) {
  if (c.doomed) return;  // dropped at the end of this turn
  if (c.overflow.empty() && c.channel.layout().grant.push(g)) return;
  c.overflow.push_back(g);
  note_overflow(c);
}

// The policy's immediate_set (under lithos: everything but the quotas of
// other high-priority tenants; a single service gets the whole GPU)
// for launches that do not wait; a waiting best-effort tenant's fallback.
sched::TpcSet Daemon::allocation_of(sched::TenantId t, bool lasting) const {
  if (!engine_->state().tenants[t].is_high() && !engine_->runs_free(t)) return fallback_of(t);
  // The time of this turn (step's `now`: tests and fuzzers drive it), the
  // clock only outside a turn.
  return engine_->immediate_set(t, to_time(turn_ns_ != 0 ? turn_ns_ : now_ns()), lasting);
}

// A client's two sets (now, and for a graph whose set lasts), written when
// either changed.
void Daemon::publish_allocation(Client& c) {
  const sched::TpcSet now_set = allocation_of(c.tenant);
  const sched::TpcSet lasting = allocation_of(c.tenant, /*lasting=*/true);
  const std::array<std::uint64_t, 4> words = {now_set.word(0), now_set.word(1), lasting.word(0), lasting.word(1)};
  publish_allocation(c, words);
}

void Daemon::publish_allocation(Client& c, const std::array<std::uint64_t, 4>& words) {
  if (std::equal(words.begin(), words.end(), std::begin(c.alloc_words))) return;
  c.channel.publish_allocation(words.data(), words.data() + 2);
  std::copy(std::begin(words), std::end(words), std::begin(c.alloc_words));
}

void Daemon::publish_sizes(Client& c) {
  const sched::SizeTable* table = engine_->size_table(c.tenant);
  if (table == nullptr || table->generation == c.sizes_generation) return;
  c.sizes_published.resize(table->entries.size(), -1);
  for (std::size_t i = 0; i < table->entries.size(); ++i) {
    const sched::SizeTable::Entry& e = table->entries[i];
    if (c.sizes_published[i] == e.tpcs) continue;
    const std::uint32_t grid[3] = {e.key.grid.x, e.key.grid.y, e.key.grid.z};
    // tpcs 0 (back to the whole allocation) is published as the allocation's
    // size would be: the client's lookup then narrows nothing. A key the
    // full table has no room for stays unpublished: its launches take the
    // whole allocation (and it is tried again at the next change).
    const auto tpcs = static_cast<std::uint32_t>(e.tpcs > 0 ? e.tpcs : sched::kMaxTpcs);
    if (c.sizes.publish(e.key.kernel, grid, tpcs) <= ipc::SizeTableWriter::Result::kUpdated) {
      c.sizes_published[i] = e.tpcs;
    } else {
      ++counters_.sizes_unpublished;
    }
  }
  c.sizes_generation = table->generation;
}

// Where a client runs without the daemon: its configured fallback, else its
// quota (high), else what no quota holds (best effort); never empty.
sched::TpcSet Daemon::fallback_of(sched::TenantId t) const {
  const sched::EngineState& st = engine_->state();
  const TenantConfig& tc = options_.config.tenants[t];
  if (tc.fallback) return *tc.fallback & st.device_tpcs;
  const sched::TenantState& me = st.tenants[t];
  if (me.is_high() && !me.owned.empty()) return me.owned;
  const sched::TpcSet free = st.device_tpcs - st.owned_by_anyone();
  return free.empty() ? st.device_tpcs : free;
}

// Every client's allocation, and whether a best-effort one runs free: the
// flag is set only after its allocation is out, and cleared before the
// allocation goes back to the fallback set, so a client that sees it always
// reads an allocation meant for launches that do not wait.
void Daemon::publish_allocations() {
  // Each tenant's sets once, whatever its number of clients.
  alloc_cache_.assign(engine_->state().tenants.size(), std::nullopt);
  for (auto& c : clients_) {
    const bool free = !c->high && engine_->runs_free(c->tenant);
    ipc::ChannelHeader& h = c->channel.layout().header;
    if (!free && c->runs_free) {
      h.flags.fetch_and(~static_cast<std::uint32_t>(ipc::kChannelRunsFree), std::memory_order_acq_rel);
      c->runs_free = false;
    }
    std::optional<std::array<std::uint64_t, 4>>& words = alloc_cache_[c->tenant];
    if (!words) {
      const sched::TpcSet now_set = allocation_of(c->tenant);
      const sched::TpcSet lasting = allocation_of(c->tenant, /*lasting=*/true);
      words = std::array<std::uint64_t, 4>{now_set.word(0), now_set.word(1), lasting.word(0), lasting.word(1)};
    }
    publish_allocation(*c, *words);
    if (c->high) publish_sizes(*c);
    if (free && !c->runs_free) {
      h.flags.fetch_or(ipc::kChannelRunsFree, std::memory_order_acq_rel);
      c->runs_free = true;
    }
  }
}

// ---------------------------------------------------------------------------
// Status

bool Daemon::shows_everything_to(std::optional<uid_t> viewer) const {
  return !viewer || *viewer == 0 || *viewer == ::geteuid() || options_.config.status_shows_all;
}

bool Daemon::shows_in_full(const Client& c, std::optional<uid_t> viewer) const {
  return shows_everything_to(viewer) || c.uid == *viewer;
}

std::string Daemon::status_json(std::uint64_t now, std::optional<uid_t> viewer) const {
  using nlohmann::json;
  const sched::EngineState& st = engine_->state();
  json j;
  j["schema"] = "lithos.status/1";
  // "all": every client in full; "own": the asker's own clients in full,
  // other users' without pid, uid and program (null).
  j["view"] = shows_everything_to(viewer) ? "all" : "own";
  j["pid"] = ::getpid();
  j["epoch"] = epoch_;
  j["socket"] = options_.config.socket;
  j["config"] = options_.config.source;
  j["policy"] = options_.config.policy;
  {
    // The scheduling settings it runs with, as --print-config names them.
    const json cfg = json::parse(config_json(options_.config));
    json settings = json::object();
    for (const char* key : {"atom_us", "throttle_us", "throttle_unborrowed_us", "max_stolen_atoms", "pause_slowdown",
                            "idle_grace_us", "burst_gap_us", "hp_poll_us", "share_unowned", "hp_holds_unowned",
                            "best_effort_runs_free", "stream_priorities"}) {
      if (cfg.contains(key)) settings[key] = cfg[key];
    }
    j["settings"] = settings;
    // The bounds on what clients may make it hold ("Hostile clients").
    json limits = json::object();
    for (const char* key :
         {"max_clients", "max_clients_per_uid", "max_connecting_per_uid", "max_pending_launches", "max_inflight",
          "max_queued_grants", "max_events_per_s", "client_timeout_ms", "progress_timeout_ms"}) {
      if (cfg.contains(key)) limits[key] = cfg[key];
    }
    j["limits"] = limits;
  }
  j["uptime_s"] = static_cast<double>(now - started_ns_) / 1e9;
  j["cpu_s"] = cpu_seconds();  // the loop thread's CPU time since it started (it spins while work is in flight)
  j["trace"] =
      options_.config.trace.empty()
          ? nlohmann::json(nullptr)
          : nlohmann::json{{"path", options_.config.trace}, {"open", trace_.is_open()}, {"lines", trace_.lines()}};
  j["device"] = {{"uuid", options_.gpu_uuid.empty() ? json(nullptr) : json(options_.gpu_uuid)},
                 {"name", st.config.device.name},
                 {"tpcs", st.config.device.tpcs},
                 {"gpcs", st.config.device.topology.count()},
                 {"topology", st.config.device.topology.to_string()}};
  const lithos::Time t = to_time(now);
  json tenants = json::array();
  for (const sched::TenantState& ts : st.tenants) {
    const TenantConfig& tc = options_.config.tenants[ts.id];
    int clients = 0;
    for (const auto& c : clients_) clients += c->tenant == ts.id ? 1 : 0;
    json o = {{"name", ts.spec.name},
              {"class", sched::priority_class_name(ts.spec.priority)},
              {"quota", ts.spec.quota},
              {"owned", ts.owned.to_string()},
              {"active", st.active(ts.id, t)},
              {"clients", clients},
              {"pending_launches", ts.pending_launches},
              {"inflight_atoms", ts.inflight_atoms},
              {"stolen_inflight", ts.stolen_inflight},
              {"held", st.held(ts.id).to_string()},
              {"allocation", allocation_of(ts.id).to_string()},
              {"runs_free", engine_->runs_free(ts.id)},
              {"fallback", fallback_of(ts.id).to_string()}};
    if (tc.slo) o["slo_ms"] = static_cast<double>(tc.slo->count()) / 1e6;
    o["mps"] = tc.mps;  // false: `lithos run --tenant` starts its processes outside MPS ("GPU faults")
    if (tc.pauses_best_effort == sched::BestEffortPause::kAlways) o["pauses_best_effort"] = true;
    if (tc.pauses_best_effort == sched::BestEffortPause::kAuto) o["pauses_best_effort"] = "auto";
    if (auto p = engine_->pause_report(ts.id, t)) {
      json pj = {
          {"phase", std::string(p->phase)}, {"pauses", p->pauses}, {"probes", p->probes}, {"verdicts", p->verdicts}};
      if (p->verdicts > 0) {
        pj["slowdown"] = p->slowdown;
        pj["busy"] = p->busy;
        if (p->gain > 0.0) {
          pj["paused_slowdown"] = p->paused_slowdown;
          pj["gain"] = p->gain;
        }
      }
      if (p->recent_count > 0) {
        pj["recent_slowdowns"] =
            std::vector<double>(p->recent.begin(), p->recent.begin() + static_cast<std::ptrdiff_t>(p->recent_count));
      }
      if (p->until != kTimeNever) pj["until_ms"] = std::max(0.0, to_ms(p->until - t));
      o["pause"] = pj;
    }
    if (engine_->rightsized(ts.id)) {
      // What right-sizing did for it (sched::RightSizeStats): TPC-time
      // left to others, the slowdown measured where a kernel's own time is
      // known, and what decided the counts.
      const sched::RightSizeStats& r = engine_->rightsize_stats(ts.id);
      json rj = {{"slip", ts.spec.rightsize_slip.value_or(st.config.rightsize.slip)},
                 {"executions", r.executions},
                 {"by_occupancy", r.by_occupancy},
                 {"by_model", r.by_model},
                 {"probes", r.probes},
                 {"probe_cost_us", r.probe_cost_ns / 1e3},
                 {"busy_us", r.busy_ns / 1e3},
                 {"saved_tpc_us", r.saved_tpc_ns / 1e3},
                 {"saved_share", r.saved_share()},
                 {"measured", r.measured}};
      if (r.measured > 0) rj["slowdown"] = r.slowdown();
      if (const sched::SizeTable* table = engine_->size_table(ts.id)) rj["table_entries"] = table->entries.size();
      o["rightsize"] = rj;
    }
    tenants.push_back(o);
  }
  j["tenants"] = tenants;
  json clients = json::array();
  for (const auto& c : clients_) {
    int streams = 0;
    for (const Stream& s : c->streams) streams += s.open ? 1 : 0;
    const bool full = shows_in_full(*c, viewer);
    clients.push_back({{"id", c->id},
                       {"pid", full ? json(c->pid) : json(nullptr)},
                       {"uid", full ? json(c->uid) : json(nullptr)},
                       {"program", full ? json(c->program) : json(nullptr)},
                       {"mps", c->mps < 0 ? json(nullptr) : json(c->mps == 1)},
                       {"tenant", st.tenants[c->tenant].spec.name},
                       {"streams", streams},
                       {"launches", c->launches},
                       {"grants", c->grants},
                       {"pending_launches", c->pending},
                       {"inflight", c->inflight},
                       {"queued_grants", c->overflow.size()},
                       {"throttled", c->throttled_since != 0},
                       {"faulted", c->faulted},
                       {"since_s", static_cast<double>(now - c->since_ns) / 1e9}});
  }
  j["clients"] = clients;
  {
    // Fatal GPU faults: what was named. For a viewer who may not see other
    // users' clients, their pids and programs are left out here too.
    json f = json::parse(faults_->status_json(now), nullptr, false);
    if (!f.is_discarded() && !shows_everything_to(viewer)) {
      const auto scrub = [&](json& ep) {
        if (!ep.is_object()) return;
        for (const char* list : {"reported_by", "in_flight"}) {
          for (json& p : ep[list]) {
            if (p.value("uid", 0U) == *viewer) continue;
            p["pid"] = p["uid"] = p["program"] = nullptr;
          }
        }
        for (json& a : ep["affected"]) {
          bool own = false;
          for (const auto& c : clients_) own = own || (c->pid == a.value("pid", -1) && c->uid == *viewer);
          if (!own) a["pid"] = a["who"] = nullptr;
        }
      };
      scrub(f["current"]);
      scrub(f["last"]);
    }
    if (!f.is_discarded()) {
      f["xid_events_source"] = xid_state_;
      f["faulted_clients"] = counters_.faulted_clients;
      j["fault"] = f;
    }
  }
  {
    json p = power_ != nullptr ? json::parse(power_->status_json(), nullptr, false)
                               : json{{"mode", "off"}, {"configured", power_mode_name(options_.config.power)}};
    if (power_ == nullptr) p["state"] = power_state_;
    j["power"] = p;
  }
  j["warnings"] = mps_warnings(std::nullopt, viewer);
  const double up = std::max(1e-9, static_cast<double>(now - started_ns_) / 1e9);
  j["counters"] = {{"clients_accepted", counters_.clients_accepted},
                   {"clients_refused", counters_.clients_refused},
                   {"clients_dropped", counters_.clients_dropped},
                   {"clients_gone", counters_.clients_gone},
                   {"submits", counters_.submits},
                   {"running_launches", counters_.running_launches},
                   {"narrowed_reports", counters_.narrowed_reports},
                   {"right_sizes_published", counters_.right_sizes_published},
                   {"right_sizes_refused", counters_.right_sizes_refused},
                   {"grants", counters_.grants},
                   {"grants_per_s", static_cast<double>(counters_.grants) / up},
                   {"completions", counters_.completions},
                   {"shared_completions", counters_.shared_completions},
                   {"hp_samples", counters_.hp_samples},
                   {"hp_samples_unmatched", counters_.hp_samples_unmatched},
                   {"hp_samples_rejected", counters_.hp_samples_rejected},
                   {"sizes_unpublished", counters_.sizes_unpublished},
                   {"reclaimed_atoms", counters_.reclaimed_atoms},
                   {"loops", counters_.loops},
                   {"busy_loops", counters_.busy_loops},
                   {"max_spin_gap_us", static_cast<double>(counters_.max_spin_gap_ns) / 1e3},
                   {"spin_gaps_over_1ms", counters_.spin_gaps_over_1ms},
                   {"max_step_us", static_cast<double>(counters_.max_step_ns) / 1e3},
                   {"max_submit_depth", counters_.max_submit_depth},
                   {"doorbells", counters_.doorbells},
                   {"doorbell_mutes", counters_.doorbell_mutes},
                   {"steps_over_100ms", counters_.steps_over_100ms},
                   {"max_step_cpu_us", static_cast<double>(counters_.max_step_cpu_ns) / 1e3},
                   {"throttles", counters_.throttles},
                   {"throttled_clients", std::count_if(clients_.begin(), clients_.end(),
                                                       [](const auto& c) { return c->throttled_since != 0; })},
                   {"max_client_pending_launches", counters_.max_client_pending},
                   {"max_client_inflight", counters_.max_client_inflight},
                   {"max_client_queued_grants", counters_.max_client_queued_grants},
                   {"connecting", pending_.size()},
                   {"accept_errors", counters_.accept_errors}};
  {
    json reasons = json::object();
    for (std::size_t k = 0; k < kDropReasons; ++k)
      reasons[drop_reason_name(static_cast<DropReason>(k))] = counters_.drops[k];
    j["counters"]["drop_reasons"] = reasons;
  }
  const sched::Engine::Counters& ec = engine_->counters();
  j["engine"] = {{"launches", ec.launches},         {"atoms", ec.atoms},         {"split_launches", ec.split_launches},
                 {"stolen_atoms", ec.stolen_atoms}, {"throttled", ec.throttled}, {"widened", ec.widened},
                 {"deferred", ec.deferred}};
  json pred;
  for (const auto cls : {sched::PriorityClass::kHigh, sched::PriorityClass::kBestEffort}) {
    const sched::PredictorStats ps = st.predictor.stats(cls);
    pred[sched::priority_class_name(cls)] = {{"observations", ps.observations},
                                             {"predicted", ps.predicted},
                                             {"miss_share", ps.miss_share},
                                             {"mean_abs_error_us", ps.mean_abs_error_us},
                                             {"p99_abs_error_us", ps.p99_abs_error_us}};
  }
  {
    // The hp predictions checked against timed launches alone (exact, not
    // a burst's shared busy time).
    const sched::Engine::HpSampleStats hs = engine_->hp_sample_stats();
    pred["high_timed"] = {{"samples", hs.errors.observations},
                          {"predicted", hs.errors.predicted},
                          {"miss_share", hs.errors.miss_share},
                          {"mean_abs_error_us", hs.errors.mean_abs_error_us},
                          {"p99_abs_error_us", hs.errors.p99_abs_error_us},
                          {"mean_sample_us", hs.mean_sample_us}};
  }
  pred["entries"] = st.predictor.entries();
  pred["cache"] = {
      {"path", cache_.path}, {"loaded_entries", cache_.loaded}, {"saves", cache_.saves}, {"error", cache_.error}};
  j["predictor"] = pred;
  // Never throws on a string that is not UTF-8 (validate_hello makes the
  // clients' valid; this is the second line of defence).
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace lithos::daemon
