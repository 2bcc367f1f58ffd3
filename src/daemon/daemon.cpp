#include "daemon/daemon.hpp"

#include <poll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <nlohmann/json.hpp>
#include <system_error>

#include "daemon/predictor_cache.hpp"
#include "ipc/safe_file.hpp"
#include "ipc/socket.hpp"
#include "sched/policy.hpp"

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

// A connection whose Hello has not arrived yet.
struct Daemon::Pending {
  int sock = -1;
  std::uint64_t since_ns = 0;
};

std::uint64_t Daemon::now_ns() {
  timespec t{};
  clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<std::uint64_t>(t.tv_sec) * 1'000'000'000ULL + static_cast<std::uint64_t>(t.tv_nsec);
}

lithos::Time Daemon::to_time(std::uint64_t ns) { return lithos::Time(lithos::Duration(static_cast<std::int64_t>(ns))); }

Daemon::Daemon(DaemonOptions options) : options_(std::move(options)) {}

Daemon::~Daemon() {
  if (cache_.writer.joinable()) cache_.writer.join();
  for (auto& p : pending_) ::close(p->sock);
  for (auto& c : clients_) {
    if (c->sock >= 0) ::close(c->sock);
  }
  if (listen_fd_ >= 0) ::close(listen_fd_);
}

Result<std::unique_ptr<sched::Engine>> make_engine(const DaemonConfig& config, const sched::DeviceShape& device) {
  LITHOS_RETURN_IF_ERROR(validate(config, device.tpcs));
  std::string err;
  auto policy = sched::make_policy(config.policy, &err);
  if (policy == nullptr) return Status::invalid_argument(err);
  sched::EngineConfig ec;
  ec.device = device;
  ec.atoms.target = lithos::Duration(static_cast<std::int64_t>(config.atom_us * 1e3));
  ec.throttle = lithos::Duration(static_cast<std::int64_t>(config.throttle_us * 1e3));
  ec.throttle_unborrowed = lithos::Duration(static_cast<std::int64_t>(config.throttle_unborrowed_us * 1e3));
  ec.policy.runs_free = config.best_effort_runs_free;
  ec.policy.share_unowned = config.share_unowned;
  ec.policy.hp_holds_unowned = config.hp_holds_unowned;
  ec.policy.max_stolen_atoms = config.max_stolen_atoms;
  ec.policy.pause_slowdown = config.pause_slowdown;
  ec.policy.idle_grace = lithos::us(config.idle_grace_us);
  ec.policy.burst_gap = lithos::us(config.burst_gap_us);
  auto engine = std::make_unique<sched::Engine>(ec, std::move(policy));
  for (const TenantConfig& t : config.tenants) {
    auto id = engine->add_tenant(t.spec());
    if (!id) return Status::invalid_argument("tenant '" + t.name + "': " + id.status().message());
  }
  return engine;
}

Result<sched::ReplayResult> replay_trace(const Trace& trace) {
  DaemonConfig c;
  c.policy = trace.header.policy;
  c.atom_us = trace.header.atom_us;
  c.throttle_us = trace.header.throttle_us;
  c.throttle_unborrowed_us = trace.header.throttle_unborrowed_us;
  c.max_stolen_atoms = trace.header.max_stolen_atoms;
  c.pause_slowdown = trace.header.pause_slowdown;
  c.idle_grace_us = trace.header.idle_grace_us;
  c.burst_gap_us = trace.header.burst_gap_us;
  c.best_effort_runs_free = trace.header.best_effort_runs_free;
  c.share_unowned = trace.header.share_unowned;
  c.hp_holds_unowned = trace.header.hp_holds_unowned;
  c.socket = trace.header.socket;
  c.default_tenant = trace.header.default_tenant;
  for (const sched::EngineEvent& e : trace.events) {
    if (e.kind != sched::EngineEvent::Kind::kAddTenant || !e.ok) continue;
    TenantConfig t;
    t.name = e.spec.name;
    t.priority = e.spec.priority;
    t.quota = e.spec.quota;
    t.slo = e.spec.slo;
    t.pauses_best_effort = e.spec.pauses_best_effort;
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
  while (!stop.load(std::memory_order_relaxed)) {
    const std::uint64_t now = now_ns();
    if (last_turn != 0) note_spin_gap(now - last_turn);
    last_turn = now;
    const bool busy = step(now);
    counters_.max_step_ns = std::max(counters_.max_step_ns, now_ns() - now);
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
    std::vector<pollfd> fds;
    fds.push_back({listen_fd_, POLLIN, 0});
    for (auto& p : pending_) fds.push_back({p->sock, POLLIN, 0});
    for (auto& c : clients_) fds.push_back({c->sock, POLLIN, 0});
    // Clients submit through shared memory, which no poll() sees: sleep
    // briefly so that a best-effort launch waits at most about this long
    // after an idle period.
    if (::poll(fds.data(), fds.size(), 1) > 0) last_socket_check_ns_ = 0;  // a socket to serve: at the next turn
    set_idle(false);
  }
  shutdown_clients();
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
  bool any = false;
  // New connections and closed sockets are looked for once a millisecond
  // (or at once when the idle poll() saw them): accept4() on a listening
  // socket costs a socket allocation even when nothing waits, too much for
  // every turn of the loop.
  const bool sockets = now - last_socket_check_ns_ > 1'000'000;
  if (sockets) any |= accept_connections(now);
  any |= serve_pending(now);
  if (sockets || any) {
    last_socket_check_ns_ = now;
    any |= check_sockets(now);
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
    any |= poll_completions(c, now);
    if (!drain_submits(c, now)) {
      drop_client(i, now, true, "malformed message");
      --i;
      any = true;
    }
  }
  any |= dispatch(now);
  publish_allocations();
  for (auto& c : clients_) {
    while (!c->overflow.empty() && c->channel.layout().grant.push(c->overflow.front())) c->overflow.pop_front();
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
  bool any = false;
  while (true) {
    auto fd = ipc::accept_client(listen_fd_);
    if (!fd) break;
    any = true;
    if (static_cast<int>(clients_.size() + pending_.size()) >= options_.max_clients) {
      ipc::Welcome w;
      w.status = ipc::WelcomeStatus::kFull;
      copy_text(w.message, "lithosd serves " + std::to_string(options_.max_clients) + " clients at most");
      (void)ipc::send_packet(fd.value(), &w, sizeof w);
      ::close(fd.value());
      ++counters_.clients_refused;
      continue;
    }
    auto p = std::make_unique<Pending>();
    p->sock = fd.value();
    p->since_ns = now;
    pending_.push_back(std::move(p));
  }
  return any;
}

bool Daemon::serve_pending(std::uint64_t now) {
  bool any = false;
  for (std::size_t i = 0; i < pending_.size();) {
    Pending& p = *pending_[i];
    ipc::Hello hello;
    int passed = -1;
    auto got = ipc::recv_packet(p.sock, &hello, sizeof hello, &passed, 0);
    if (passed >= 0) ::close(passed);  // clients never send descriptors
    if (!got && now - p.since_ns < options_.hello_timeout_ns) {
      ++i;
      continue;  // nothing yet
    }
    any = true;
    const int sock = p.sock;
    pending_.erase(pending_.begin() + static_cast<std::ptrdiff_t>(i));
    if (!got || got.value() != sizeof hello) {
      ::close(sock);  // closed, timed out, or not a Hello
      ++counters_.clients_refused;
      continue;
    }
    welcome(sock, hello, now);
  }
  return any;
}

void Daemon::welcome(int sock, const ipc::Hello& hello_in, std::uint64_t now) {
  ipc::Hello hello = hello_in;
  ipc::Welcome w;
  w.daemon_epoch = epoch_;
  auto refuse = [&](ipc::WelcomeStatus st, const std::string& why) {
    w.status = st;
    copy_text(w.message, why);
    (void)ipc::send_packet(sock, &w, sizeof w);
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
    ::close(sock);
    ++counters_.clients_refused;
    return;
  }
  ++counters_.clients_accepted;
  const Client& added = *c;
  clients_.push_back(std::move(c));
  // Said once per client outside MPS: when it comes beside MPS clients, or
  // when the first MPS client comes beside it.
  const bool first_inside =
      added.mps == 1 && std::count_if(clients_.begin(), clients_.end(), [](const auto& x) { return x->mps == 1; }) == 1;
  if (added.mps == 0 || first_inside) {
    for (const std::string& line :
         mps_warnings(added.mps == 0 ? std::optional<std::uint32_t>(added.id) : std::nullopt)) {
      std::fprintf(stderr, "lithosd: %s\n", line.c_str());
    }
  }
}

std::vector<std::string> Daemon::mps_warnings(std::optional<std::uint32_t> only, std::optional<uid_t> viewer) const {
  std::size_t inside = 0;
  for (const auto& c : clients_) inside += c->mps == 1 ? 1U : 0U;
  std::vector<std::string> out;
  if (inside == 0) return out;
  const sched::EngineState& st = engine_->state();
  for (const auto& c : clients_) {
    if (c->mps != 0 || (only && c->id != *only)) continue;
    const std::string who = shows_in_full(*c, viewer) ? "pid " + std::to_string(c->pid) + ", uid " +
                                                            std::to_string(c->uid) + ", " + c->program
                                                      : std::string("another user's");
    out.push_back("client " + std::to_string(c->id) + " (" + who + ", tenant " + st.tenants[c->tenant].spec.name +
                  ") runs outside MPS beside " + std::to_string(inside) +
                  " MPS client(s): its kernels time-slice with theirs and no TPC mask keeps them apart (MPS "
                  "serves one user id at a time: docs/daemon.md, \"Failure handling\")");
  }
  return out;
}

bool Daemon::check_sockets(std::uint64_t now) {
  bool any = false;
  for (std::size_t i = 0; i < clients_.size(); ++i) {
    pollfd p{clients_[i]->sock, POLLIN, 0};
    if (::poll(&p, 1, 0) <= 0) continue;
    char buf[64];
    const ssize_t n = ::recv(clients_[i]->sock, buf, sizeof buf, MSG_DONTWAIT);
    if (n > 0) counters_.doorbells += static_cast<std::uint64_t>(n);  // a client woke the idle loop
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR) || (p.revents & (POLLHUP | POLLERR)) != 0) {
      drop_client(i, now, false, "its socket closed");
      --i;
      any = true;
    }
  }
  return any;
}

void Daemon::drop_client(std::size_t index, std::uint64_t now, bool malformed, const std::string& why) {
  Client& c = *clients_[index];
  (void)why;
  if (!malformed) {
    // What it said and what the GPU finished before it went: its last
    // reports, and completion markers that landed (an exiting client's last
    // atoms are done, not reclaimed). The rest is reclaimed below.
    if (drain_submits(c, now)) poll_completions(c, now);
  }
  for (Stream& s : c.streams) {
    if (!s.open) continue;
    const auto released = log_->close_queue(s.queue, to_time(now));
    counters_.reclaimed_atoms += released.size();
  }
  // Forget its pending launches' grant targets.
  for (auto it = targets_.begin(); it != targets_.end();) {
    it = it->second.client == c.id ? targets_.erase(it) : std::next(it);
  }
  if (c.sock >= 0) ::close(c.sock);
  if (malformed) {
    ++counters_.clients_dropped;
  } else {
    ++counters_.clients_gone;
  }
  clients_.erase(clients_.begin() + static_cast<std::ptrdiff_t>(index));
  dirty_ = true;
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

bool Daemon::drain_submits(Client& c, std::uint64_t now) {
  ipc::SubmitMsg m;
  bool corrupt = false;
  counters_.max_submit_depth = std::max(counters_.max_submit_depth, c.channel.layout().submit.size());
  // A bounded batch per loop keeps one chatty client from starving others.
  for (int n = 0; n < 256 && c.channel.layout().submit.pop(&m, &corrupt); ++n) {
    if (Status s = handle_submit(c, m, now); !s.is_ok()) return false;
  }
  return !corrupt;
}

Status Daemon::handle_submit(Client& c, const ipc::SubmitMsg& m, std::uint64_t now) {
  LITHOS_RETURN_IF_ERROR(c.validator.check(m));
  ++counters_.submits;
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
    case ipc::SubmitType::kStreamClose:
      counters_.reclaimed_atoms += log_->close_queue(s.queue, to_time(now)).size();
      s = Stream{};
      return Status::ok();
    case ipc::SubmitType::kSync: log_->sync(s.queue); return Status::ok();
    case ipc::SubmitType::kGoodbye: return Status::ok();  // the socket's end follows
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
    auto a =
        log_->submit_running(s.queue, d, allocation_of(c.tenant, (m.flags & ipc::kSubmitGraph) != 0), to_time(now));
    if (!a) return a.status();
    s.inflight.push_back({m.seq, a->atom, now});
    ++counters_.running_launches;
    return Status::ok();
  }
  auto id = log_->submit(s.queue, d, to_time(now));
  if (!id) return id.status();
  targets_[id.value()] = Target{c.id, m.stream, m.seq};
  return Status::ok();
}

bool Daemon::poll_completions(Client& c, std::uint64_t now) {
  bool any = false;
  for (std::uint32_t i = 0; i < ipc::kMaxStreams; ++i) {
    Stream& s = c.streams[i];
    if (!s.open || s.inflight.empty()) continue;
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
    if (covered_.empty()) continue;
    share_busy_interval(s.last_end_ns, now, covered_);
    for (const CoveredLaunch& piece : covered_) {
      log_->atom_finished(s.inflight.front().atom, to_time(piece.start_ns), to_time(piece.end_ns));
      s.inflight.pop_front();
    }
    s.last_end_ns = now;
    counters_.completions += covered_.size();
    if (covered_.size() > 1) counters_.shared_completions += covered_.size();
    any = true;
  }
  if (any) dirty_ = true;
  return any;
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
    deliver(*c, g);
    ++c->grants;
    ++counters_.grants;
    if (d.last) targets_.erase(it);
  }
  return !out_.empty();
}

void Daemon::deliver(Client& c, const ipc::GrantMsg& g) {
  if (!c.overflow.empty() || !c.channel.layout().grant.push(g)) c.overflow.push_back(g);
}

// The policy's immediate_set (under lithos: everything but the quotas of
// other high-priority tenants; a single service gets the whole GPU)
// for launches that do not wait; a waiting best-effort tenant's fallback.
sched::TpcSet Daemon::allocation_of(sched::TenantId t, bool lasting) const {
  if (!engine_->state().tenants[t].is_high() && !engine_->runs_free(t)) return fallback_of(t);
  return engine_->immediate_set(t, to_time(now_ns()), lasting);
}

// A client's two sets (now, and for a graph whose set lasts), written when
// either changed.
void Daemon::publish_allocation(Client& c) {
  const sched::TpcSet now_set = allocation_of(c.tenant);
  const sched::TpcSet lasting = allocation_of(c.tenant, /*lasting=*/true);
  const std::uint64_t words[4] = {now_set.word(0), now_set.word(1), lasting.word(0), lasting.word(1)};
  if (std::equal(std::begin(words), std::end(words), std::begin(c.alloc_words))) return;
  c.channel.publish_allocation(words, words + 2);
  std::copy(std::begin(words), std::end(words), std::begin(c.alloc_words));
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
  for (auto& c : clients_) {
    const bool free = !c->high && engine_->runs_free(c->tenant);
    ipc::ChannelHeader& h = c->channel.layout().header;
    if (!free && c->runs_free) {
      h.flags.fetch_and(~static_cast<std::uint32_t>(ipc::kChannelRunsFree), std::memory_order_acq_rel);
      c->runs_free = false;
    }
    publish_allocation(*c);
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
    if (tc.pauses_best_effort == sched::BestEffortPause::kAlways) o["pauses_best_effort"] = true;
    if (tc.pauses_best_effort == sched::BestEffortPause::kAuto) o["pauses_best_effort"] = "auto";
    if (auto p = engine_->policy().pause_report(st, ts.id, t)) {
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
                       {"since_s", static_cast<double>(now - c->since_ns) / 1e9}});
  }
  j["clients"] = clients;
  j["warnings"] = mps_warnings(std::nullopt, viewer);
  const double up = std::max(1e-9, static_cast<double>(now - started_ns_) / 1e9);
  j["counters"] = {{"clients_accepted", counters_.clients_accepted},
                   {"clients_refused", counters_.clients_refused},
                   {"clients_dropped", counters_.clients_dropped},
                   {"clients_gone", counters_.clients_gone},
                   {"submits", counters_.submits},
                   {"running_launches", counters_.running_launches},
                   {"grants", counters_.grants},
                   {"grants_per_s", static_cast<double>(counters_.grants) / up},
                   {"completions", counters_.completions},
                   {"shared_completions", counters_.shared_completions},
                   {"reclaimed_atoms", counters_.reclaimed_atoms},
                   {"loops", counters_.loops},
                   {"busy_loops", counters_.busy_loops},
                   {"max_spin_gap_us", static_cast<double>(counters_.max_spin_gap_ns) / 1e3},
                   {"spin_gaps_over_1ms", counters_.spin_gaps_over_1ms},
                   {"max_step_us", static_cast<double>(counters_.max_step_ns) / 1e3},
                   {"max_submit_depth", counters_.max_submit_depth},
                   {"doorbells", counters_.doorbells}};
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
  pred["entries"] = st.predictor.entries();
  pred["cache"] = {
      {"path", cache_.path}, {"loaded_entries", cache_.loaded}, {"saves", cache_.saves}, {"error", cache_.error}};
  j["predictor"] = pred;
  return j.dump();
}

}  // namespace lithos::daemon
