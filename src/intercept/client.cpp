// Why this file is long (~1.1k lines): it is the whole of one GPU's client of
// the daemon link in one place (registration, the channel's rings, markers,
// the tracker thread, the statistics of the link), which client.hpp
// describes; daemon_link.cpp keeps the clients, one per GPU.

#include "intercept/cuda_abi.hpp"  // first: cuda.h in ABI mode

#include "intercept/client.hpp"

#include <linux/futex.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "gpu/slot_map.hpp"
#include "intercept/log.hpp"
#include "intercept/real_driver.hpp"
#include "ipc/channel.hpp"
#include "ipc/cuda_faults.hpp"
#include "ipc/socket.hpp"

extern "C" char* program_invocation_short_name;  // glibc

namespace lithos::intercept {

namespace {

// a = max(a, v), atomically (markers, sequences and maxima only grow).
void raise_to(std::atomic<std::uint64_t>& a, std::uint64_t v) noexcept {
  std::uint64_t cur = a.load(std::memory_order_acquire);
  while (cur < v && !a.compare_exchange_weak(cur, v, std::memory_order_acq_rel)) {
  }
}

// The last stream this thread looked up, for launches in a row on one stream
// (and its client: default streams have one key on every GPU).
thread_local const void* t_client = nullptr;
thread_local std::uintptr_t t_key = ~std::uintptr_t{0};
thread_local std::uint32_t t_slot = 0;
thread_local std::uint32_t t_generation = ~0U;
// This thread woke the sleeping daemon with its last submit (ring_if_idle).
thread_local bool t_rang = false;
// The timed launch this thread is making (DaemonClient::before_immediate):
// its start event is recorded, its end is recorded by the report.
struct ThreadSample {
  const void* client = nullptr;  // null: none
  std::uint32_t pair = 0;
  std::uint32_t slot = 0;
};
thread_local ThreadSample t_sample;

const char* priority_name(ipc::StreamPriority p) {
  switch (p) {
    case ipc::StreamPriority::kHighest: return "highest";
    case ipc::StreamPriority::kLowest: return "lowest";
    case ipc::StreamPriority::kKeep: break;
  }
  return "application's own";
}

void cpu_relax() { __builtin_ia32_pause(); }

void nap_ns(long ns) {
  const timespec t{0, ns};
  nanosleep(&t, nullptr);
}

// Sleeps up to `ns` unless *word != expected, or until futex_wake.
void futex_nap(std::atomic<std::uint32_t>* word, std::uint32_t expected, long ns) {
  const timespec t{0, ns};
  ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(word), FUTEX_WAIT_PRIVATE, expected, &t, nullptr, 0);
}

void futex_wake(std::atomic<std::uint32_t>* word, int waiters = 1) {
  ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(word), FUTEX_WAKE_PRIVATE, waiters, nullptr, nullptr, 0);
}

// Sleeps up to `ns` (any length) unless *word != expected, or until futex_wake.
void futex_wait_ns(std::atomic<std::uint32_t>* word, std::uint32_t expected, std::uint64_t ns) {
  const timespec t{static_cast<time_t>(ns / 1'000'000'000ULL), static_cast<long>(ns % 1'000'000'000ULL)};
  ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(word), FUTEX_WAIT_PRIVATE, expected, &t, nullptr, 0);
}

}  // namespace

struct DaemonClient::ChannelHolder {
  ipc::Channel channel;
};

DaemonClient::DaemonClient(int device) noexcept : device_(device) {}

bool DaemonClient::has_slot(Stream stream) noexcept {
  // (A forked child takes no lock its parent's threads may have held.)
  if (const State s = state_.load(std::memory_order_acquire); s == State::kIdle || s == State::kForked) return false;
  try {
    const std::lock_guard<std::mutex> lock(slots_mu_);
    return slot_of_.count(stream.key()) != 0;
  } catch (...) {
    return false;
  }
}

std::uint64_t DaemonClient::now_ns() noexcept {
  timespec t{};
  clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<std::uint64_t>(t.tv_sec) * 1'000'000'000ULL + static_cast<std::uint64_t>(t.tv_nsec);
}

bool DaemonClient::ready() noexcept {
  State s = state_.load(std::memory_order_acquire);
  if (s == State::kConnected) {
    if (alive()) return true;
    disconnect(State::kGone);
    s = State::kGone;
  }
  if (!wanted_ || s == State::kForked || s == State::kOtherGpu || s == State::kFaulted) return false;
  if (!tracker_started_.load(std::memory_order_acquire)) start();
  if (connected()) return true;
  launches_unregistered_.fetch_add(1, std::memory_order_relaxed);
  return false;
}

void DaemonClient::start() noexcept {
  if (tracker_started_.exchange(true, std::memory_order_acq_rel)) return;  // another launch started it
  // The thread registers in this launch's context: mapping the completion
  // page for the GPU (cuMemHostRegister) and the GPU's UUID need one.
  const DriverTable& d = driver();
  if (CUcontext ctx = nullptr; d.cuCtxGetCurrent != nullptr && d.cuCtxGetCurrent(&ctx) == CUDA_SUCCESS)
    ctx_.store(ctx, std::memory_order_release);
  first_launch_ns_.store(now_ns(), std::memory_order_relaxed);
  tracker_running_.store(true, std::memory_order_release);
  try {
    tracker_ = std::thread([this] { tracker(); });
    tracker_.detach();
  } catch (...) {
    tracker_running_.store(false, std::memory_order_release);
    state_.store(State::kFailed, std::memory_order_release);
    LITHOS_LOG(LogLevel::kWarn, "lithosd: cannot start the client's thread; running %s",
               fallback_set_ ? "on the configured TPC set" : "pass-through");
    return;
  }
  // The first launch waits a short bound for the registration it started,
  // so that a process under a healthy daemon is scheduled from its first
  // launch; one under a daemon that does not answer goes on without it.
  // From before the thread was made: on a busy machine the new thread may
  // run (and register) before this one returns from making it.
  if (register_wait_ns_ == 0) return;
  const std::uint64_t t0 = first_launch_ns_.load(std::memory_order_relaxed);
  const std::uint64_t deadline = t0 + register_wait_ns_;
  register_waits_.fetch_add(1, std::memory_order_relaxed);
  while (attempts_done_.load(std::memory_order_acquire) == 0) {
    const std::uint64_t now = now_ns();
    if (now >= deadline) {
      register_wait_timeouts_.fetch_add(1, std::memory_order_relaxed);
      break;
    }
    futex_wait_ns(&attempts_done_, 0, deadline - now);
  }
  first_wait_ns_.store(now_ns() - t0, std::memory_order_relaxed);
}

void DaemonClient::register_paced() noexcept {
  const std::uint64_t now = now_ns();
  if (attempts_.load(std::memory_order_relaxed) != 0 && now - last_attempt_ns_ < 1'000'000'000ULL) {
    nap_ns(static_cast<long>(1'000'000'000ULL - (now - last_attempt_ns_)));
    return;
  }
  last_attempt_ns_ = now;
  try {
    const std::lock_guard<std::mutex> lock(connect_mu_);
    if (!connect_locked()) failed_attempts_.fetch_add(1, std::memory_order_relaxed);
  } catch (...) {
    failed_attempts_.fetch_add(1, std::memory_order_relaxed);
  }
  attempts_done_.fetch_add(1, std::memory_order_acq_rel);
  futex_wake(&attempts_done_, INT32_MAX);
}

bool DaemonClient::connect_locked() noexcept {
  const bool first = attempts_.fetch_add(1, std::memory_order_relaxed) == 0;
  const bool was = registered_once_.load();
  // The last connection (shut down when the daemon was found gone).
  if (sock_ >= 0) ::close(sock_);
  sock_ = -1;
  // The daemon of this client's GPU where the socket names it (%g).
  std::string path = socket_;
  std::string gpu_of_thread;
  const bool by_gpu = ipc::names_gpu(socket_);
  if (by_gpu && my_gpu(&gpu_of_thread)) path = ipc::with_gpu(socket_, gpu_of_thread);
  auto fail = [&](const std::string& why) {
    if (sock_ >= 0) ::close(sock_);
    sock_ = -1;
    state_.store(was ? State::kGone : State::kFailed, std::memory_order_release);
    if (first) {
      LITHOS_LOG(LogLevel::kWarn, "lithosd at %s: %s; running %s until it answers", path.c_str(), why.c_str(),
                 fallback_set_ ? "on the configured TPC set" : "pass-through");
    }
    return false;
  };
  // A daemon this process cannot trust: said once, and never asked again
  // (the process runs as without a daemon). `what`: what to do about it.
  auto refuse = [&](const std::string& why, const char* what) {
    if (sock_ >= 0) ::close(sock_);
    sock_ = -1;
    state_.store(State::kRefused, std::memory_order_release);
    LITHOS_LOG(LogLevel::kError, "lithosd at %s is not trusted: %s; launches run %s from now on. %s", path.c_str(),
               why.c_str(), fallback_set_ ? "on the configured TPC set" : "pass-through", what);
    return false;
  };
  if (by_gpu && gpu_of_thread.empty()) return fail("the socket names the GPU (%g), and this client's GPU is not known");
  auto fd = ipc::connect_socket(path, 200);
  if (!fd) return fail(fd.status().message());
  sock_ = fd.value();
  // Before the Hello, which names this process, its tenant and its program.
  if (Status st = ipc::check_daemon(sock_, path, daemon_uid_); !st.is_ok()) {
    return refuse(st.message() + " (nothing was sent to it)",
                  "If your lithosd runs as that user, name it with `lithos run --daemon-uid UID` "
                  "(LITHOS_DAEMON_UID); otherwise remove what another user made there and start lithosd again, or "
                  "give a socket in a folder of your own (`lithos run --daemon PATH`, LITHOS_DAEMON)");
  }
  ipc::Hello hello;
  hello.pid = static_cast<std::int32_t>(::getpid());
  std::strncpy(hello.tenant, tenant_.c_str(), sizeof hello.tenant - 1);
  if (program_invocation_short_name != nullptr)
    std::strncpy(hello.program, program_invocation_short_name, sizeof hello.program - 1);
  hello.flags = mps_flags();
  if (Status st = ipc::send_packet(sock_, &hello, sizeof hello); !st.is_ok()) return fail(st.message());
  ipc::Welcome w;
  int chfd = -1;
  auto got = ipc::recv_packet(sock_, &w, sizeof w, &chfd, 2000);
  if (!got || got.value() != sizeof w) {
    if (chfd >= 0) ::close(chfd);
    return fail(got ? "the daemon closed the connection" : got.status().message());
  }
  if (w.magic != ipc::kMagic || w.version != ipc::kVersion) {
    if (chfd >= 0) ::close(chfd);
    return fail("the daemon speaks another protocol version");
  }
  if (w.status != ipc::WelcomeStatus::kOk || chfd < 0) {
    if (chfd >= 0) ::close(chfd);
    w.message[sizeof w.message - 1] = '\0';
    return fail(std::string("refused: ") + w.message);
  }
  w.gpu[sizeof w.gpu - 1] = '\0';
  if (std::string mine; !serves_my_gpu(w.gpu, &mine)) {
    // Another GPU's daemon: nothing this client launches is its to schedule.
    ::close(chfd);
    ::close(sock_);
    sock_ = -1;
    state_.store(State::kOtherGpu, std::memory_order_release);
    LITHOS_LOG(LogLevel::kWarn, "lithosd at %s schedules %s, not CUDA device %d (%s); launches there run %s",
               path.c_str(), w.gpu, device_, mine.c_str(), fallback_set_ ? "on the configured TPC set" : "unscheduled");
    return false;
  }
  // Checked before it is mapped: a file its sender could shrink would
  // raise SIGBUS in this process.
  auto ch = ipc::Channel::attach(chfd);
  if (!ch) {
    return refuse("the channel it sent cannot be mapped safely: " + ch.status().message(),
                  "Run a lithosd of the same lithos build as this liblithos.so");
  }
  adopt_daemon_map(w);
  auto holder = std::make_unique<ChannelHolder>();
  holder->channel = std::move(ch).value();
  ipc::ChannelLayout* layout = &holder->channel.layout();
  // The completion page, mapped for the device: the GPU writes markers there.
  const DriverTable& d = driver();
  CUdeviceptr dev = 0;
  {
    InternalScope internal;
    // Registering host memory is a call a stream capture forbids: a process
    // whose first launch is made while capturing (a graph captured first)
    // would see its capture invalidated, and lithos could not register.
    const RelaxedCaptureMode relaxed;
    // Portable: markers are also written from streams of the process's other
    // contexts on this GPU (a driver-API library's cuCtxCreate beside
    // PyTorch's primary context), not only the one current here.
    void* page = holder->channel.completion_page();
    if (d.cuMemHostRegister == nullptr || d.cuMemHostGetDevicePointer == nullptr || d.cuStreamWriteValue64 == nullptr ||
        d.cuMemHostRegister(page, sizeof(layout->completed),
                            CU_MEMHOSTREGISTER_DEVICEMAP | CU_MEMHOSTREGISTER_PORTABLE) != CUDA_SUCCESS ||
        d.cuMemHostGetDevicePointer(&dev, page, 0) != CUDA_SUCCESS) {
      return fail("cannot map the completion page for the GPU (cuMemHostRegister)");
    }
  }
  // New epoch: every stream must be opened again.
  {
    const std::lock_guard<std::mutex> lock(slots_mu_);
    slot_of_.clear();
    for (Slot& s : slots_) {
      s.open.store(false);
      s.seq.store(0);
      s.last_marker.store(0);
      s.dirty.store(false);
      s.priority.store(ipc::StreamPriority::kKeep);
    }
  }
  {
    const std::lock_guard<std::mutex> lock(grant_mu_);
    for (auto& q : queued_) q.clear();
  }
  layout_ = layout;
  dev_base_ = dev;
  layout->header.client_beat_ns.store(now_ns(), std::memory_order_release);
  fallback_[0] = layout->header.fallback[0].load();
  fallback_[1] = layout->header.fallback[1].load();
  high_.store(w.tenant_class == ipc::TenantClass::kHigh, std::memory_order_release);
  immediate_priority_.store(w.immediate_priority, std::memory_order_release);
  channels_.push_back(std::move(holder));
  generation_.fetch_add(1, std::memory_order_acq_rel);
  registered_once_.store(true, std::memory_order_release);
  if (w.tenant_class == ipc::TenantClass::kHigh) make_sample_pool();
  state_.store(State::kConnected, std::memory_order_release);
  if (was) reconnects_.fetch_add(1, std::memory_order_relaxed);
  if (!was) registered_after_ns_.store(now_ns() - first_launch_ns_.load(std::memory_order_relaxed));
  w.tenant[sizeof w.tenant - 1] = '\0';
  LITHOS_LOG(LogLevel::kInfo, "lithosd %s: client %u of tenant %s (%s, quota %u)", was ? "again" : "registered",
             w.client_id, w.tenant, high() ? "high priority" : "best effort", w.quota);
  return true;
}

// The daemon's slot map of this client's GPU, for a process with none of its
// own (the sink, Runtime::adopt_daemon_map, keeps the process's where it has one).
void DaemonClient::adopt_daemon_map(ipc::Welcome& w) noexcept {
  w.slot_map[sizeof w.slot_map - 1] = '\0';
  if (w.slot_map[0] == '\0') return;
  try {
    auto map = gpu::slot_map_parse(std::string_view(w.slot_map));
    if (!map || map->gpu_uuid != w.gpu) {
      LITHOS_LOG(LogLevel::kWarn, "lithosd's slot map of %s is not usable (%s); not adopted", w.gpu,
                 map ? "another GPU's" : map.status().message().c_str());
      return;
    }
    if (const MapSink sink = map_sink_; sink != nullptr) sink(device_, std::move(map).value());
  } catch (...) {
    // Out of memory parsing it: the process's own map (or none) stays.
  }
}

void DaemonClient::disconnect(State why) noexcept {
  State expected = State::kConnected;
  if (!state_.compare_exchange_strong(expected, why)) return;
  generation_.fetch_add(1, std::memory_order_acq_rel);
  outages_.fetch_add(1, std::memory_order_relaxed);
  // A stopped daemon sees this client leave as soon as it runs again (and
  // reclaims what it held): the channel is given up. The descriptor stays
  // open until the next registration, so that its number is not reused
  // while a launch may still ring it (ring_if_idle).
  if (const int fd = sock_; fd >= 0) ::shutdown(fd, SHUT_RDWR);
  LITHOS_LOG(LogLevel::kWarn, "lithosd went away: %s; reconnecting when it is back",
             high() ? "high-priority launches keep their last allocation"
                    : "best-effort launches run on the fallback set meanwhile");
}

bool DaemonClient::alive() noexcept {
  const std::uint64_t now = now_ns();
  if (now - last_alive_check_ns_.load(std::memory_order_relaxed) < 2'000'000ULL) return true;
  last_alive_check_ns_.store(now, std::memory_order_relaxed);
  ipc::ChannelLayout* l = layout_;
  if (l == nullptr) return false;
  const std::uint32_t flags = l->header.flags.load(std::memory_order_acquire);
  if ((flags & ipc::kChannelFaulted) != 0) {
    report_fault(0);
    return false;
  }
  if ((flags & ipc::kChannelDaemonGone) != 0) return false;
  const std::uint64_t beat = l->header.heartbeat_ns.load(std::memory_order_acquire);
  if (beat != 0 && now > beat && now - beat > static_cast<std::uint64_t>(grant_timeout_ms_ * 1e6)) return false;
  const int fd = sock_.load(std::memory_order_relaxed);
  pollfd p{fd, POLLIN, 0};
  if (fd >= 0 && ::poll(&p, 1, 0) > 0) {
    char c = 0;
    const ssize_t n = ::recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n == 0 || (p.revents & (POLLHUP | POLLERR)) != 0) return false;
  }
  return true;
}

int DaemonClient::slot_of(Stream stream) noexcept {
  const std::uintptr_t key = stream.key();
  const std::uint32_t gen = generation_.load(std::memory_order_acquire);
  if (key == t_key && gen == t_generation && t_client == this) return static_cast<int>(t_slot);
  try {
    const std::lock_guard<std::mutex> lock(slots_mu_);
    auto it = slot_of_.find(key);
    if (it == slot_of_.end()) {
      std::uint32_t free = ipc::kMaxStreams;
      for (std::uint32_t i = 0; i < ipc::kMaxStreams; ++i) {
        if (!slots_[i].open.load()) {
          free = i;
          break;
        }
      }
      if (free == ipc::kMaxStreams) return -1;
      Slot& s = slots_[free];
      s.stream = stream;
      s.priority.store(ipc::StreamPriority::kKeep);
      s.seq.store(0);
      s.dirty.store(false);
      // The slot's completion value survives from an earlier stream: markers
      // continue from it so that they only grow.
      const std::uint64_t done = layout_->completed[free].load(std::memory_order_acquire);
      s.last_marker.store(done);
      s.seq.store(done);
      ipc::SubmitMsg m;
      m.type = ipc::SubmitType::kStreamOpen;
      m.stream = free;
      if (!push(m, nullptr, /*spill=*/true)) return -1;
      s.opened.fetch_add(1, std::memory_order_relaxed);
      s.open.store(true);
      it = slot_of_.emplace(key, free).first;
    }
    t_client = this;
    t_key = key;
    t_slot = it->second;
    t_generation = gen;
    return static_cast<int>(it->second);
  } catch (...) {
    return -1;
  }
}

bool DaemonClient::flush_spill_locked(ipc::ChannelLayout* l) noexcept {
  while (!spill_.empty() && l->submit.push(spill_.front(), &submit_seen_tail_)) spill_.pop_front();
  spill_size_.store(spill_.size(), std::memory_order_relaxed);
  return spill_.empty();
}

// The daemon sleeps in poll() after 2 ms without work and does not see the
// ring: wake it through the socket (ipc::kChannelDaemonIdle). Only for a
// launch that waits for its grant: the kernel may run the woken daemon on
// this thread's CPU, which an application thread going on with its work (an
// hp launch, a report) would hold for up to a scheduler tick, longer than
// the 1 ms poll. The byte is written once per sleep, after the submit lock is
// let go (a system call); the thread then naps while it waits (next_grant).
void DaemonClient::ring_if_idle(ipc::ChannelLayout* l) noexcept {
  if ((l->header.flags.load(std::memory_order_relaxed) & ipc::kChannelDaemonIdle) == 0) return;
  if ((l->header.flags.fetch_and(~static_cast<std::uint32_t>(ipc::kChannelDaemonIdle), std::memory_order_acq_rel) &
       ipc::kChannelDaemonIdle) == 0)
    return;  // another push rang
  const char bell = 'd';
  const int fd = sock_;
  if (fd >= 0) (void)::send(fd, &bell, 1, MSG_DONTWAIT | MSG_NOSIGNAL);
  doorbells_.fetch_add(1, std::memory_order_relaxed);
  t_rang = true;
}

void DaemonClient::flush_spill() noexcept {
  if (spill_size_.load(std::memory_order_relaxed) == 0) return;
  ipc::ChannelLayout* l = layout_;
  if (l == nullptr) return;
  while (submit_lock_.test_and_set(std::memory_order_acquire)) cpu_relax();
  if (submit_seen_layout_ == l) (void)flush_spill_locked(l);
  submit_lock_.clear(std::memory_order_release);
}

bool DaemonClient::push(const ipc::SubmitMsg& m, std::atomic<std::uint64_t>* count, bool spill, bool bell) noexcept {
  ipc::ChannelLayout* l = layout_;
  if (l == nullptr) return false;
  // A full ring means the daemon is not reading: wait up to 1 ms, then give
  // up; or, with `spill`, queue the message here at once.
  std::uint64_t start = 0;
  while (true) {
    while (submit_lock_.test_and_set(std::memory_order_acquire)) cpu_relax();
    if (submit_seen_layout_ != l) {
      // Another channel (a restarted daemon): what was spilled for the
      // last one is of no use to this one.
      submit_seen_layout_ = l;
      submit_seen_tail_ = 0;
      spill_.clear();
      spill_size_.store(0, std::memory_order_relaxed);
    }
    // Nothing overtakes a spilled message.
    bool ok = (spill_size_.load(std::memory_order_relaxed) == 0 || flush_spill_locked(l)) &&
              l->submit.push(m, &submit_seen_tail_);
    if (!ok && spill && spill_.size() < kSpillMax) {
      try {
        spill_.push_back(m);
        spill_size_.store(spill_.size(), std::memory_order_relaxed);
        spilled_.fetch_add(1, std::memory_order_relaxed);
        ok = true;
      } catch (...) {  // out of memory: dropped, as with a full spill
      }
    }
    // Counted under the lock without a locked instruction: one right after
    // the ring's stores would wait for them to reach the daemon's core.
    if (ok && count != nullptr) count->store(count->load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    submit_lock_.clear(std::memory_order_release);
    if (ok) {
      if (bell) ring_if_idle(l);
      return true;
    }
    if (spill) return false;
    const std::uint64_t now = now_ns();
    if (start == 0) start = now;
    if (now - start > 1'000'000ULL) return false;
    cpu_relax();
  }
}

bool DaemonClient::write_marker(Stream stream, std::uint32_t slot, std::uint64_t value, std::uint64_t now,
                                bool unless_captured) noexcept {
  const DriverTable& d = driver();
  if (d.cuStreamWriteValue64 == nullptr || dev_base_ == 0) return true;
  InternalScope internal;
  const CUdeviceptr addr = dev_base_ + static_cast<CUdeviceptr>(slot) * sizeof(std::uint64_t);
  Slot& s = slots_[slot];
  // The launching thread and the tracker both mark a stream: values go onto
  // it in increasing order, so that the completion page never goes back (a
  // smaller value enqueued after a larger one would hide the larger one's
  // launches from the daemon until the next marker). A value at or below
  // one already enqueued is covered by it: nothing to write.
  const std::lock_guard lock(s.marking);
  if (value <= s.last_marker.load(std::memory_order_relaxed)) return true;
  if (CUstreamCaptureStatus cs = CU_STREAM_CAPTURE_STATUS_NONE;
      unless_captured && d.cuStreamIsCapturing != nullptr &&
      d.cuStreamIsCapturing(stream.handle(), &cs) == CUDA_SUCCESS && cs != CU_STREAM_CAPTURE_STATUS_NONE) {
    return false;
  }
  if (const CUresult r = d.cuStreamWriteValue64(stream.handle(), addr, value, 0); r == CUDA_SUCCESS) {
    s.last_marker.store(value, std::memory_order_release);
    s.last_marker_ns.store(now != 0 ? now : now_ns(), std::memory_order_relaxed);
    markers_.fetch_add(1, std::memory_order_relaxed);
  } else if (ipc::is_sticky_cuda_error(static_cast<std::uint32_t>(r))) {
    report_fault(static_cast<std::uint32_t>(r));
  }
  return true;
}

void DaemonClient::report_fault(std::uint32_t code) noexcept {
  if (!wanted_) return;
  // lithosd first (what it names and when): the first sticky result this
  // process saw, also when lithosd said so before.
  if (ipc::ChannelLayout* l = layout_;
      l != nullptr && code != 0 && l->header.client_fault.load(std::memory_order_relaxed) == 0) {
    l->header.client_fault_ns.store(now_ns(), std::memory_order_relaxed);
    std::uint32_t zero = 0;
    l->header.client_fault.compare_exchange_strong(zero, code, std::memory_order_release);
  }
  std::uint32_t none = 0;
  if (!fault_.compare_exchange_strong(none, code != 0 ? code : kFaultByDaemon, std::memory_order_acq_rel)) return;
  State s = state_.load(std::memory_order_acquire);
  while (s != State::kForked && !state_.compare_exchange_weak(s, State::kFaulted, std::memory_order_acq_rel)) {
  }
  generation_.fetch_add(1, std::memory_order_acq_rel);  // a launch waiting for its grant stops waiting
  try {
    const std::string what = code != 0 ? ipc::cuda_error_name(code) : std::string("lithosd says the GPU faulted");
    LITHOS_LOG(LogLevel::kError,
               "%s: this process's CUDA context on device %d is lost (a fatal GPU fault; under MPS one process's "
               "fault reaches every MPS client of the GPU). lithos schedules nothing more of it there; the process "
               "must exit and be started again (the MPS server takes no new client until every affected process "
               "has exited)",
               what.c_str(), device_);
  } catch (...) {
  }
}

std::unique_lock<std::mutex> DaemonClient::hold_markers(Stream stream) noexcept {
  // (A forked child takes no lock its parent's threads may have held.)
  if (const State s = state_.load(std::memory_order_acquire); s == State::kIdle || s == State::kForked) return {};
  try {
    std::uint32_t slot = 0;
    {
      const std::lock_guard<std::mutex> lock(slots_mu_);
      const auto it = slot_of_.find(stream.key());
      if (it == slot_of_.end()) return {};
      slot = it->second;
    }
    return std::unique_lock<std::mutex>(slots_[slot].marking);
  } catch (...) {
    return {};
  }
}

bool DaemonClient::allocation(sched::TpcSet* out, bool lasting) const noexcept {
  const ipc::ChannelLayout* l = layout_;
  if (l == nullptr || out == nullptr) return false;
  const std::size_t w = lasting ? 2 : 0;
  for (int tries = 0; tries < 64; ++tries) {
    const std::uint64_t s1 = l->header.alloc_seq.load(std::memory_order_acquire);
    if ((s1 & 1U) != 0) {
      cpu_relax();
      continue;
    }
    const std::uint64_t a = l->header.alloc[w].load(std::memory_order_acquire);
    const std::uint64_t b = l->header.alloc[w + 1].load(std::memory_order_acquire);
    if (l->header.alloc_seq.load(std::memory_order_acquire) == s1) {
      *out = sched::TpcSet::from_words(a, b);
      return !out->empty();
    }
  }
  return false;
}

bool DaemonClient::runs_free(sched::TpcSet* out) const noexcept {
  if (!connected() || high()) return false;
  const ipc::ChannelLayout* l = layout_;
  if (l == nullptr || (l->header.flags.load(std::memory_order_acquire) & ipc::kChannelRunsFree) == 0) return false;
  return allocation(out);
}

void DaemonClient::before_immediate(Stream stream, const void* timed_key) noexcept {
  if (timed_key != nullptr && sample_per_s_ != 0 && high() && connected()) start_sample(stream, timed_key);
  const ipc::StreamPriority p = immediate_priority_.load(std::memory_order_acquire);
  if (!hw_priority_ || p == ipc::StreamPriority::kKeep || !connected()) return;
  const int slot = slot_of(stream);
  if (slot >= 0) apply_priority(static_cast<std::uint32_t>(slot), p);
}

void DaemonClient::make_sample_pool() noexcept {
  if (sample_per_s_ == 0) return;
  const DriverTable& d = driver();
  if (d.cuEventCreate == nullptr || d.cuEventRecord == nullptr || d.cuEventQuery == nullptr ||
      d.cuEventElapsedTime == nullptr || d.cuCtxGetCurrent == nullptr)
    return;
  try {
    const std::lock_guard<std::mutex> lock(sample_mu_);
    if (sample_pool_made_) return;
    sample_pool_made_ = true;  // once, whatever comes of it
    InternalScope internal;
    const RelaxedCaptureMode relaxed;  // the application may be capturing
    CUcontext ctx = nullptr;
    if (d.cuCtxGetCurrent(&ctx) != CUDA_SUCCESS || ctx == nullptr) return;
    sample_ctx_ = ctx;
    free_pairs_.reserve(kSamplePairs);
    pending_samples_.reserve(kSamplePairs);
    for (std::uint32_t i = 0; i < kSamplePairs; ++i) {
      SamplePair& p = sample_pairs_[i];
      CUevent a = nullptr, b = nullptr;
      // Default flags: timing on (CU_EVENT_DISABLE_TIMING would refuse
      // cuEventElapsedTime), no blocking sync (never waited on).
      if (d.cuEventCreate(&a, CU_EVENT_DEFAULT) != CUDA_SUCCESS) break;
      if (d.cuEventCreate(&b, CU_EVENT_DEFAULT) != CUDA_SUCCESS) {
        if (d.cuEventDestroy != nullptr) (void)d.cuEventDestroy(a);
        break;
      }
      p.start = a;
      p.end = b;
      free_pairs_.push_back(i);
    }
  } catch (...) {
  }
}

void DaemonClient::free_pair(std::uint32_t pair) noexcept {
  try {
    const std::lock_guard<std::mutex> lock(sample_mu_);
    free_pairs_.push_back(pair);  // reserved for every pair: never allocates
  } catch (...) {
  }
}

void DaemonClient::start_sample(Stream stream, const void* key) noexcept {
  if (t_sample.client != nullptr) {
    // The last launch this thread timed was not reported (it failed): its
    // events are of no use.
    auto* owner = static_cast<DaemonClient*>(const_cast<void*>(t_sample.client));
    owner->samples_unreported_.fetch_add(1, std::memory_order_relaxed);
    owner->free_pair(t_sample.pair);
    t_sample.client = nullptr;
  }
  // Which launch of its function this is.
  const auto k = reinterpret_cast<std::uintptr_t>(key);
  std::uint64_t h = k * 0x9E3779B97F4A7C15ULL;
  h ^= h >> 29;
  const std::size_t i = static_cast<std::size_t>(h) & (kSampleKeys - 1);
  if (std::uintptr_t cur = sample_keys_[i].load(std::memory_order_relaxed); cur != k) {
    // A new function takes a free entry; one taken by another function is shared.
    if (cur == 0) (void)sample_keys_[i].compare_exchange_strong(cur, k, std::memory_order_relaxed);
  }
  const std::uint32_t n = sample_counts_[i].fetch_add(1, std::memory_order_relaxed) + 1;
  const bool picked = n <= sample_first_ || (sample_every_ != 0 && (n - sample_first_) % sample_every_ == 0);
  if (!picked) return;
  // Nothing is timed while any capture is in progress (its events would
  // have to be polled during it: see poll_samples).
  if (stream_captures().load(std::memory_order_acquire) > 0) {
    samples_captured_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  const DriverTable& d = driver();
  std::uint32_t pair = 0;
  {
    const std::uint64_t sec = now_ns() / 1'000'000'000ULL;
    const std::lock_guard<std::mutex> lock(sample_mu_);
    if (sec != sample_window_s_) {
      sample_window_s_ = sec;
      sample_window_n_ = 0;
    }
    if (sample_window_n_ >= sample_per_s_) {
      samples_capped_.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    if (free_pairs_.empty()) {
      samples_no_event_.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    ++sample_window_n_;
    pair = free_pairs_.back();
    free_pairs_.pop_back();
  }
  InternalScope internal;
  // The pool's events belong to the context the client registered in.
  if (CUcontext ctx = nullptr; d.cuCtxGetCurrent(&ctx) != CUDA_SUCCESS || ctx != sample_ctx_) {
    samples_no_event_.fetch_add(1, std::memory_order_relaxed);
    free_pair(pair);
    return;
  }
  const int slot = slot_of(stream);
  if (slot < 0) {
    samples_unreported_.fetch_add(1, std::memory_order_relaxed);
    free_pair(pair);
    return;
  }
  Slot& s = slots_[slot];
  CUresult r = CUDA_SUCCESS;
  {
    // Never into a stream being captured (the event would become a node of
    // its graph): looked at under the lock a capture's beginning takes.
    const std::lock_guard<std::mutex> lock(s.marking);
    CUstreamCaptureStatus cs = CU_STREAM_CAPTURE_STATUS_NONE;
    if (d.cuStreamIsCapturing == nullptr || d.cuStreamIsCapturing(stream.handle(), &cs) != CUDA_SUCCESS ||
        cs != CU_STREAM_CAPTURE_STATUS_NONE) {
      samples_captured_.fetch_add(1, std::memory_order_relaxed);
      free_pair(pair);
      return;
    }
    r = d.cuEventRecord(sample_pairs_[pair].start, stream.handle());
  }
  if (r != CUDA_SUCCESS) {
    samples_failed_.fetch_add(1, std::memory_order_relaxed);
    free_pair(pair);
    return;
  }
  t_sample = {this, pair, static_cast<std::uint32_t>(slot)};
}

void DaemonClient::apply_priority(std::uint32_t slot, ipc::StreamPriority p) noexcept {
  if (!hw_priority_ || p == ipc::StreamPriority::kKeep || slot >= ipc::kMaxStreams) return;
  Slot& s = slots_[slot];
  if (s.priority.load(std::memory_order_acquire) == p) return;
  const DriverTable& d = driver();
  const CUstream h = s.stream.handle();
  InternalScope internal;
  if (d.cuStreamIsCapturing != nullptr) {
    // Never touch a stream that is being captured (the call could end the
    // capture); its launches do not run now. The next launch tries again.
    CUstreamCaptureStatus cs = CU_STREAM_CAPTURE_STATUS_NONE;
    if (d.cuStreamIsCapturing(h, &cs) != CUDA_SUCCESS || cs != CU_STREAM_CAPTURE_STATUS_NONE) return;
  }
  int least = 0, greatest = 0;
  CUresult r = CUDA_ERROR_NOT_SUPPORTED;
  if (d.cuStreamSetAttribute != nullptr && d.cuCtxGetStreamPriorityRange != nullptr) {
    r = d.cuCtxGetStreamPriorityRange(&least, &greatest);
    if (r == CUDA_SUCCESS) {
      CUstreamAttrValue v{};
      v.priority = p == ipc::StreamPriority::kHighest ? greatest : least;
      r = d.cuStreamSetAttribute(h, CU_STREAM_ATTRIBUTE_PRIORITY, &v);
    }
  }
  // Once per stream either way: a stream that refuses is not asked again.
  s.priority.store(p, std::memory_order_release);
  if (r == CUDA_SUCCESS) {
    priorities_set_.fetch_add(1, std::memory_order_relaxed);
  } else {
    priority_failures_.fetch_add(1, std::memory_order_relaxed);
    LITHOS_LOG_ONCE(LogLevel::kWarn, "a stream priority could not be set (CUresult %d); launches keep the stream's own",
                    static_cast<int>(r));
  }
}

namespace {
// A kernel launch's shape in a submit: grid, block, the cluster (the
// launch's attribute, else the kernel's compile-time shape), and what the
// daemon's occupancy bound needs besides (registers per thread, static plus
// dynamic shared memory per block).
void describe(ipc::SubmitMsg& m, const LaunchInfo& li, const KernelStatics& k) noexcept {
  m.grid[0] = std::max(1U, li.grid.x), m.grid[1] = std::max(1U, li.grid.y), m.grid[2] = std::max(1U, li.grid.z);
  m.block[0] = std::max(1U, li.block.x), m.block[1] = std::max(1U, li.block.y), m.block[2] = std::max(1U, li.block.z);
  m.regs = static_cast<std::uint8_t>(std::min<std::uint32_t>(k.regs, 255));
  m.smem = li.smem + k.smem;
  const sched::Dim3 c = li.cluster_attr ? li.cluster : k.cluster;
  if (c.count() > 1 && c.count() <= 16) {
    m.cluster[0] = static_cast<std::uint8_t>(c.x);
    m.cluster[1] = static_cast<std::uint8_t>(c.y);
    m.cluster[2] = static_cast<std::uint8_t>(c.z);
  }
}
}  // namespace

std::uint32_t DaemonClient::right_size(std::uint64_t kernel, const sched::Dim3& grid) const noexcept {
  const ipc::ChannelLayout* l = layout_;
  if (l == nullptr || !connected()) return 0;
  const std::uint32_t g[3] = {std::max(1U, grid.x), std::max(1U, grid.y), std::max(1U, grid.z)};
  return ipc::size_lookup(l->sizes, kernel, g);
}

void DaemonClient::report_running(Stream stream, const LaunchInfo& li, std::uint64_t kernel, bool graph,
                                  const KernelStatics& statics, std::uint32_t tpcs) noexcept {
  // This thread's timed launch, if it is this one (before_immediate): given
  // back unless the report below takes it.
  struct Taken {
    DaemonClient* me = nullptr;
    std::uint32_t pair = 0, slot = 0;
    ~Taken() {
      if (me == nullptr) return;
      me->samples_unreported_.fetch_add(1, std::memory_order_relaxed);
      me->free_pair(pair);
    }
  } taken;
  if (t_sample.client == this && !graph) {
    taken.me = this;
    taken.pair = t_sample.pair;
    taken.slot = t_sample.slot;
    t_sample.client = nullptr;
  }
  if (!connected()) return;
  const DriverTable& d = driver();
  // A captured launch is recorded, not run: not reported. Asked of the
  // driver only while some capture is in progress (stream_captures).
  if (d.cuStreamIsCapturing != nullptr && stream_captures().load(std::memory_order_acquire) > 0) {
    CUstreamCaptureStatus cs = CU_STREAM_CAPTURE_STATUS_NONE;
    InternalScope internal;
    if (d.cuStreamIsCapturing(stream.handle(), &cs) == CUDA_SUCCESS && cs != CU_STREAM_CAPTURE_STATUS_NONE) return;
  }
  const int slot = slot_of(stream);
  if (slot < 0) {
    dropped_reports_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  Slot& s = slots_[slot];
  ipc::SubmitMsg m;
  m.type = ipc::SubmitType::kLaunch;
  m.flags = ipc::kSubmitRunning | (graph ? ipc::kSubmitGraph : 0) | (li.cooperative ? ipc::kSubmitCooperative : 0);
  m.stream = static_cast<std::uint32_t>(slot);
  // seq_cst with the dirty flag below and the tracker's exchange: a tracker
  // that clears the flag then reads this launch's seq or leaves the flag set.
  m.seq = s.seq.fetch_add(1, std::memory_order_seq_cst) + 1;
  m.kernel = kernel;
  if (!graph) describe(m, li, statics);
  ipc::set_running_tpcs(m, std::min(tpcs, ipc::kMaxTpcs));
  // A marker here for the first launch after the stream was quiet for
  // kMarkerGapNs (its last marker landed and is as old): a lone launch or
  // graph is closed at once. A launch in a burst leaves the stream dirty:
  // the tracker, not this thread, marks it mid-burst and once it goes quiet
  // (a marker costs ~1.7 us of host time on the H100). Per-thread default
  // streams always get theirs here: the tracker cannot name another
  // thread's per-thread stream.
  const std::uint64_t now = now_ns();
  const std::uint64_t done = layout_->completed[slot].load(std::memory_order_acquire);
  if (stream.null_per_thread() || (done >= s.last_marker.load(std::memory_order_acquire) &&
                                   now - s.last_marker_ns.load(std::memory_order_relaxed) >= kMarkerGapNs &&
                                   now - s.last_launch_ns.load(std::memory_order_relaxed) >= kMarkerGapNs)) {
    m.marker = static_cast<std::uint32_t>(m.seq);
    write_marker(stream, static_cast<std::uint32_t>(slot), m.seq, now);
    s.dirty.store(false, std::memory_order_release);
  } else {
    s.dirty.store(true, std::memory_order_seq_cst);
    if (tracker_idle_.load(std::memory_order_relaxed) != 0) wake_tracker();
  }
  s.last_launch_ns.store(now, std::memory_order_relaxed);
  bool timed = false;
  if (taken.me != nullptr && taken.slot == static_cast<std::uint32_t>(slot)) {
    InternalScope internal;
    const std::lock_guard<std::mutex> lock(s.marking);  // as in start_sample: never into a capture
    CUstreamCaptureStatus cs = CU_STREAM_CAPTURE_STATUS_NONE;
    if (d.cuStreamIsCapturing(stream.handle(), &cs) != CUDA_SUCCESS || cs != CU_STREAM_CAPTURE_STATUS_NONE) {
      samples_captured_.fetch_add(1, std::memory_order_relaxed);
      free_pair(taken.pair);
      taken.me = nullptr;
    } else if (d.cuEventRecord(sample_pairs_[taken.pair].end, stream.handle()) != CUDA_SUCCESS) {
      samples_failed_.fetch_add(1, std::memory_order_relaxed);
      free_pair(taken.pair);
      taken.me = nullptr;
    } else {
      timed = true;
      m.flags = static_cast<std::uint16_t>(m.flags | ipc::kSubmitTimed);
    }
  }
  if (!push(m, &reported_, /*spill=*/true)) {
    dropped_reports_.fetch_add(1, std::memory_order_relaxed);
    return;  // taken (if timed) is given back
  }
  if (timed) {
    try {
      const std::lock_guard<std::mutex> lock(sample_mu_);
      pending_samples_.push_back({taken.pair, static_cast<std::uint32_t>(slot),
                                  s.opened.load(std::memory_order_relaxed), layout_, m.seq, kernel, now});
      pending_samples_n_.store(pending_samples_.size(), std::memory_order_release);
      taken.me = nullptr;
      timed_.fetch_add(1, std::memory_order_relaxed);
    } catch (...) {
    }
    if (tracker_idle_.load(std::memory_order_relaxed) != 0) wake_tracker();
  }
}

bool DaemonClient::poll_samples() noexcept {
  if (pending_samples_n_.load(std::memory_order_acquire) == 0) return false;
  // cuEventQuery is an unsafe call during a capture in global mode: made
  // from this thread while another captures, it would invalidate that
  // capture (PyTorch captures in global mode). Not polled while a capture
  // is in progress, and this thread's own mode is relaxed for the calls.
  if (stream_captures().load(std::memory_order_acquire) > 0) return false;
  const DriverTable& d = driver();
  InternalScope internal;
  const RelaxedCaptureMode relaxed;
  std::vector<PendingSample> done;  // completed (or to drop), with their durations in since_ns
  std::vector<std::uint32_t> freed;
  try {
    const std::lock_guard<std::mutex> lock(sample_mu_);
    const std::uint64_t now = now_ns();
    std::size_t keep = 0;
    for (std::size_t i = 0; i < pending_samples_.size(); ++i) {
      PendingSample p = pending_samples_[i];
      const SamplePair& ev = sample_pairs_[p.pair];
      const CUresult q = d.cuEventQuery(ev.end);
      if (q == CUDA_ERROR_NOT_READY) {
        if (now - p.since_ns <= sample_max_ns_) {
          pending_samples_[keep++] = p;
          continue;
        }
        samples_too_long_.fetch_add(1, std::memory_order_relaxed);  // never waited for
        freed.push_back(p.pair);
        continue;
      }
      float ms = 0;
      if (q != CUDA_SUCCESS || d.cuEventElapsedTime(&ms, ev.start, ev.end) != CUDA_SUCCESS || !(ms >= 0)) {
        if (ipc::is_sticky_cuda_error(static_cast<std::uint32_t>(q))) report_fault(static_cast<std::uint32_t>(q));
        samples_failed_.fetch_add(1, std::memory_order_relaxed);
        freed.push_back(p.pair);
        continue;
      }
      const double ns = static_cast<double>(ms) * 1e6;
      freed.push_back(p.pair);
      if (ns > static_cast<double>(sample_max_ns_)) {
        samples_too_long_.fetch_add(1, std::memory_order_relaxed);
        continue;
      }
      p.since_ns = std::max<std::uint64_t>(1, static_cast<std::uint64_t>(ns));
      done.push_back(p);
    }
    pending_samples_.resize(keep);
    pending_samples_n_.store(keep, std::memory_order_release);
    for (const std::uint32_t f : freed) free_pairs_.push_back(f);
  } catch (...) {
    return true;
  }
  // Sent while the stream is still the one the launch was reported on (a
  // sample of a closed or reopened stream would name another launch), under
  // the lock that its closing and reopening take.
  try {
    const std::lock_guard<std::mutex> lock(slots_mu_);
    for (const PendingSample& p : done) {
      const Slot& s = slots_[p.slot];
      if (layout_ != p.layout || !s.open.load(std::memory_order_acquire) ||
          s.opened.load(std::memory_order_relaxed) != p.opened) {
        samples_stale_.fetch_add(1, std::memory_order_relaxed);
        continue;
      }
      ipc::SubmitMsg m;
      m.type = ipc::SubmitType::kSample;
      m.stream = p.slot;
      m.seq = p.seq;
      m.kernel = p.kernel;
      ipc::set_sample_ns(m, std::min<std::uint64_t>(p.since_ns, ipc::kMaxSampleNs));
      if (push(m, &samples_sent_, /*spill=*/true)) continue;
      samples_stale_.fetch_add(1, std::memory_order_relaxed);
    }
  } catch (...) {
  }
  return pending_samples_n_.load(std::memory_order_acquire) != 0;
}

namespace {
// The ticket of the launch this thread is making, submitted when it was
// queued (DaemonClient::AheadScope).
thread_local std::optional<DaemonClient::Ahead> t_ahead;
}  // namespace

DaemonClient::AheadScope::AheadScope(const std::optional<Ahead>& a) noexcept { t_ahead = a; }
DaemonClient::AheadScope::~AheadScope() { t_ahead.reset(); }

std::optional<DaemonClient::Ticket> DaemonClient::submit(Stream stream, const LaunchInfo& li, const LaunchIdentity& id,
                                                         std::uint32_t unit, bool whole, bool graph,
                                                         const sched::TpcSet* pinned) noexcept {
  if (!connected()) return std::nullopt;
  const std::uint64_t kernel = id.kernel;
  const int slot = slot_of(stream);
  if (slot < 0) return std::nullopt;
  if (t_ahead) {
    // Submitted when it was queued: the same launch takes that ticket.
    const Ahead a = *t_ahead;
    t_ahead.reset();
    if (a.client == this && a.ticket.slot == static_cast<std::uint32_t>(slot) && a.kernel == kernel && !graph &&
        a.ticket.generation == generation_.load(std::memory_order_acquire)) {
      ahead_taken_.fetch_add(1, std::memory_order_relaxed);
      return a.ticket;
    }
  }
  Slot& s = slots_[slot];
  ipc::SubmitMsg m;
  m.type = ipc::SubmitType::kLaunch;
  m.flags = static_cast<std::uint16_t>((whole ? ipc::kSubmitWhole : 0) | (graph ? ipc::kSubmitGraph : 0) |
                                       (li.cooperative ? ipc::kSubmitCooperative : 0));
  m.stream = static_cast<std::uint32_t>(slot);
  m.seq = s.seq.fetch_add(1, std::memory_order_acq_rel) + 1;
  m.kernel = kernel;
  if (!graph) {
    describe(m, li, id.statics);
    m.unit = std::max(1U, unit);
  } else if (pinned != nullptr && !pinned->empty()) {
    ipc::set_pinned_tpcs(m, pinned->word(0), pinned->word(1));
  }
  if (!push(m, &submits_, /*spill=*/false, /*bell=*/true)) return std::nullopt;
  return Ticket{static_cast<std::uint32_t>(slot), m.seq, generation_.load(std::memory_order_acquire)};
}

bool DaemonClient::next_grant(const Ticket& t, ipc::GrantMsg* out) noexcept {
  const std::uint64_t start = now_ns();
  std::uint64_t spins = 0;
  // Having just woken the daemon, nap rather than spin for a while: the
  // kernel often runs the woken daemon on this thread's CPU, where a
  // spinning waiter keeps it from running for a scheduler tick (measured
  // over the fake driver: ~1.7 ms per grant, against ~0.15 ms napping).
  int naps = std::exchange(t_rang, false) ? 50 : 0;
  while (true) {
    if (generation_.load(std::memory_order_acquire) != t.generation || !connected()) break;
    bool got = false;
    {
      const std::lock_guard<std::mutex> lock(grant_mu_);
      ipc::GrantMsg g;
      bool corrupt = false;
      while (layout_->grant.pop(&g, &corrupt)) {
        if (g.stream < ipc::kMaxStreams) queued_[g.stream].push_back(g);
      }
      std::deque<ipc::GrantMsg>& q = queued_[t.slot];
      while (!q.empty() && q.front().seq < t.seq) q.pop_front();  // an abandoned launch's grants
      if (!q.empty() && q.front().seq == t.seq) {
        *out = q.front();
        q.pop_front();
        const std::uint64_t waited = now_ns() - start;
        grants_n_.fetch_add(1, std::memory_order_relaxed);
        grant_wait_ns_.fetch_add(waited, std::memory_order_relaxed);
        const double us = static_cast<double>(waited) / 1e3;
        std::size_t b = 0;
        while (b + 1 < kWaitBuckets && us > kWaitEdgesUs[b]) ++b;
        wait_hist_[b].fetch_add(1, std::memory_order_relaxed);
        raise_to(grant_wait_max_ns_, waited);
        got = true;
      }
    }
    if (got) {
      if (out->type != ipc::GrantType::kGrant) return false;
      // The grant's stream priority, outside the lock (a driver call).
      apply_priority(t.slot, (out->flags & ipc::kGrantHighPriority) != 0  ? ipc::StreamPriority::kHighest
                             : (out->flags & ipc::kGrantLowPriority) != 0 ? ipc::StreamPriority::kLowest
                                                                          : ipc::StreamPriority::kKeep);
      return true;
    }
    if (!alive()) {
      disconnect(State::kGone);
      break;
    }
    // Spin first (grants come within microseconds), then nap.
    if (naps > 0) {
      --naps;
      nap_ns(10'000);
    } else if (++spins < 2000) {
      cpu_relax();
    } else {
      nap_ns(spins < 20000 ? 2000 : 50000);
    }
    if (now_ns() - start > 600'000'000'000ULL) break;  // ten minutes: something is deeply wrong
  }
  fallbacks_.fetch_add(1, std::memory_order_relaxed);
  return false;
}

void DaemonClient::atom_launched(const Ticket& t, Stream stream, std::uint64_t marker) noexcept {
  if (generation_.load(std::memory_order_acquire) != t.generation) return;
  write_marker(stream, t.slot, marker);
  // One increasing sequence per stream for launches and markers alike: the
  // daemon numbers its grants' markers past every launch's seq, and the
  // stream's next launch (granted, or reported running while the tenant runs
  // free) continues past this marker. Without it a stream that changes modes
  // could report a launch under a value an earlier marker already covers,
  // and the daemon would take it for finished.
  raise_to(slots_[t.slot].seq, marker);
}

sched::TpcSet DaemonClient::fallback() const noexcept { return sched::TpcSet::from_words(fallback_[0], fallback_[1]); }

void DaemonClient::forget_stream(Stream stream) noexcept {
  if (!connected()) return;
  try {
    const std::lock_guard<std::mutex> lock(slots_mu_);
    const auto it = slot_of_.find(stream.key());
    if (it == slot_of_.end()) return;
    ipc::SubmitMsg m;
    m.type = ipc::SubmitType::kStreamClose;
    m.stream = it->second;
    (void)push(m, nullptr, /*spill=*/true);
    slots_[it->second].open.store(false);
    slot_of_.erase(it);
    t_key = ~std::uintptr_t{0};
  } catch (...) {
  }
}

std::vector<DaemonClient::SyncPoint> DaemonClient::sync_points(Stream stream, bool every) noexcept {
  std::vector<SyncPoint> out;
  if (!connected()) return out;
  try {
    const std::lock_guard<std::mutex> lock(slots_mu_);
    auto take = [&](std::uint32_t slot) {
      out.push_back({slot, slots_[slot].seq.load(std::memory_order_acquire), generation_.load()});
    };
    if (every) {
      for (const auto& [key, slot] : slot_of_) take(slot);
    } else if (const auto it = slot_of_.find(stream.key()); it != slot_of_.end()) {
      take(it->second);
    }
  } catch (...) {
    out.clear();
  }
  return out;
}

void DaemonClient::synced(const std::vector<SyncPoint>& points) noexcept {
  if (points.empty() || !connected()) return;
  ipc::ChannelLayout* l = layout_;
  for (const SyncPoint& p : points) {
    if (p.generation != generation_.load(std::memory_order_acquire) || l == nullptr) return;  // another channel now
    Slot& s = slots_[p.slot];
    // Everything launched on the stream before the synchronisation began
    // has finished: mark it done, as a marker would (never backwards: the
    // GPU may have written a later one meanwhile).
    raise_to(l->completed[p.slot], p.seq);
    raise_to(s.last_marker, p.seq);
    if (s.seq.load(std::memory_order_acquire) == p.seq) s.dirty.store(false, std::memory_order_release);
    ipc::SubmitMsg m;
    m.type = ipc::SubmitType::kSync;
    m.stream = p.slot;
    if (push(m, nullptr, /*spill=*/true)) syncs_.fetch_add(1, std::memory_order_relaxed);
  }
}

void DaemonClient::wake_tracker() noexcept {
  if (tracker_idle_.exchange(0, std::memory_order_acq_rel) == 0) return;  // another launch woke it
  futex_wake(&tracker_idle_);
  tracker_wakes_.fetch_add(1, std::memory_order_relaxed);
}

// The client's thread: registers (and registers again after the daemon
// went away, at most once a second) while the client is not connected;
// while it is, beats (ChannelHeader::client_beat_ns), writes the markers of
// dirty streams (launches reported running: high priority, or best effort
// running free) once they are quiet, and notices a daemon that went away
// while nothing launched.
void DaemonClient::tracker() noexcept {
  thread_frame().internal = true;
  // Registration needs the launch's context (start()); markers on a legacy
  // default stream go to the current context's: this client's GPU
  // (streams of their own name their context).
  if (const DriverTable& d = driver(); d.cuCtxSetCurrent != nullptr) {
    if (CUcontext ctx = ctx_.load(std::memory_order_acquire); ctx != nullptr) (void)d.cuCtxSetCurrent(ctx);
  }
  bool busy = true;  // a stream dirty or launched on lately: look again soon
  while (tracker_running_.load(std::memory_order_acquire)) {
    if (const State s = state_.load(std::memory_order_acquire); s != State::kConnected) {
      // Never again: another GPU's daemon, a daemon not trusted (a forked
      // child has no such thread).
      if (s == State::kOtherGpu || s == State::kRefused || s == State::kForked || s == State::kFaulted) break;
      register_paced();
      busy = true;
      continue;
    }
    if (busy) {
      nap_ns(kTrackerNapNs);
    } else {
      tracker_idle_.store(1, std::memory_order_seq_cst);
      futex_nap(&tracker_idle_, 1, kTrackerIdleNapNs);
      tracker_idle_.store(0, std::memory_order_relaxed);
    }
    busy = false;
    if (state_.load(std::memory_order_acquire) != State::kConnected) continue;
    if (!alive()) {
      disconnect(State::kGone);
      continue;
    }
    // This process runs: the daemon reclaims the atoms of a client whose
    // beat goes stale (stopped, hung).
    layout_->header.client_beat_ns.store(now_ns(), std::memory_order_release);
    // Reports spilled while the ring was full go in as it empties, also
    // when the application launches no more.
    if (spill_size_.load(std::memory_order_relaxed) != 0) {
      flush_spill();
      busy = true;
    }
    if (poll_samples()) busy = true;
    const std::uint64_t now = now_ns();
    for (std::uint32_t i = 0; i < ipc::kMaxStreams; ++i) {
      Slot& s = slots_[i];
      if (!s.open.load(std::memory_order_acquire)) continue;
      if (now - s.last_launch_ns.load(std::memory_order_relaxed) < kTrackerBusyNs) busy = true;
      // A per-thread default stream is marked by its own launches (above).
      if (!s.dirty.load(std::memory_order_acquire) || s.stream.null_per_thread()) continue;
      busy = true;
      // Quiet for kMarkerGapNs, or a burst whose last marker is as old.
      if (now - s.last_launch_ns.load(std::memory_order_relaxed) < kMarkerGapNs &&
          now - s.last_marker_ns.load(std::memory_order_relaxed) < kMarkerGapNs)
        continue;
      if (layout_->completed[i].load(std::memory_order_acquire) < s.last_marker.load(std::memory_order_acquire))
        continue;  // the last marker is still on its way
      if (!s.dirty.exchange(false, std::memory_order_seq_cst)) continue;
      // Not into a stream being captured (the marker would become a node of
      // its graph): looked at under the lock a capture's beginning takes.
      if (!write_marker(s.stream, i, s.seq.load(std::memory_order_seq_cst), 0, /*unless_captured=*/true)) {
        s.dirty.store(true, std::memory_order_seq_cst);  // marked once the capture has ended
        continue;
      }
      tracker_markers_.fetch_add(1, std::memory_order_relaxed);
    }
  }
  tracker_running_.store(false, std::memory_order_release);
}

namespace {
// The UUID text of device `dev` (gpu::uuid_text); false when the driver cannot say.
bool uuid_of(const DriverTable& d, CUdevice dev, std::string* uuid) {
  CUuuid u{};
  if (d.cuDeviceGetUuid == nullptr || d.cuDeviceGetUuid(&u, dev) != CUDA_SUCCESS) return false;
  *uuid = gpu::uuid_text(u.bytes);
  return true;
}
}  // namespace

// Whether this process's contexts are MPS clients, as the driver says
// (CU_DEVICE_ATTRIBUTE_MPS_ENABLED, 133 in CUDA 12+): a process that the
// node's MPS does not serve (another uid's server, no access to its pipe)
// runs outside it, time-sliced with the MPS clients, and lithosd says so.
std::uint32_t DaemonClient::mps_flags() noexcept {
  constexpr int kMpsEnabled = 133;
  try {
    const DriverTable& d = driver();
    if (d.cuDeviceGetAttribute == nullptr) return 0;
    CUdevice dev = 0;
    if (d.cuCtxGetDevice == nullptr || d.cuCtxGetDevice(&dev) != CUDA_SUCCESS) {
      if (d.cuDeviceGet == nullptr || d.cuDeviceGet(&dev, 0) != CUDA_SUCCESS) return 0;
    }
    int on = 0;
    if (d.cuDeviceGetAttribute(&on, static_cast<CUdevice_attribute>(kMpsEnabled), dev) != CUDA_SUCCESS) return 0;
    return ipc::kHelloMpsKnown | (on != 0 ? ipc::kHelloMpsClient : 0U);
  } catch (...) {
    return 0;
  }
}

bool DaemonClient::my_gpu(std::string* uuid) const noexcept {
  try {
    return device_ >= 0 && uuid_of(driver(), device_, uuid);
  } catch (...) {
    return false;
  }
}

bool DaemonClient::serves_my_gpu(const std::string& uuid, std::string* why) noexcept {
  try {
    {
      const std::lock_guard<std::mutex> lock(gpu_mu_);
      gpu_ = uuid;
    }
    std::string mine;
    if (uuid.empty() || !my_gpu(&mine)) return true;  // cannot tell: as before, its launches go to the daemon
    if (mine == uuid) return true;
    *why = mine;
    return false;
  } catch (...) {
    return true;
  }
}

DaemonClient::Stats DaemonClient::stats() const noexcept {
  Stats s;
  s.reported = reported_.load();
  s.markers = markers_.load();
  s.tracker_markers = tracker_markers_.load();
  s.tracker_wakes = tracker_wakes_.load();
  s.submits = submits_.load();
  s.grants = grants_n_.load();
  s.grant_wait_ns = grant_wait_ns_.load();
  s.grant_wait_max_ns = grant_wait_max_ns_.load();
  s.fallbacks = fallbacks_.load();
  s.reconnects = reconnects_.load();
  s.dropped_reports = dropped_reports_.load();
  s.spilled = spilled_.load();
  s.doorbells = doorbells_.load();
  s.syncs = syncs_.load();
  s.priorities_set = priorities_set_.load();
  s.priority_failures = priority_failures_.load();
  s.ahead = ahead_.load();
  s.ahead_taken = ahead_taken_.load();
  s.outages = outages_.load();
  s.launches_unregistered = launches_unregistered_.load();
  s.attempts = attempts_.load();
  s.failed_attempts = failed_attempts_.load();
  s.register_waits = register_waits_.load();
  s.register_wait_timeouts = register_wait_timeouts_.load();
  s.timed = timed_.load();
  s.samples_sent = samples_sent_.load();
  s.samples_capped = samples_capped_.load();
  s.samples_captured = samples_captured_.load();
  s.samples_no_event = samples_no_event_.load();
  s.samples_failed = samples_failed_.load();
  s.samples_unreported = samples_unreported_.load();
  s.samples_too_long = samples_too_long_.load();
  s.samples_stale = samples_stale_.load();
  return s;
}

double DaemonClient::wait_quantile_us(double q) const noexcept {
  std::uint64_t total = 0;
  for (const auto& h : wait_hist_) total += h.load(std::memory_order_relaxed);
  if (total == 0) return 0;
  const auto rank = static_cast<std::uint64_t>(q * static_cast<double>(total - 1));
  std::uint64_t seen = 0;
  for (std::size_t b = 0; b < kWaitBuckets; ++b) {
    seen += wait_hist_[b].load(std::memory_order_relaxed);
    if (seen > rank)
      return b + 1 < kWaitBuckets ? kWaitEdgesUs[b] : static_cast<double>(grant_wait_max_ns_.load()) / 1e3;
  }
  return static_cast<double>(grant_wait_max_ns_.load()) / 1e3;
}

std::string DaemonClient::stats_json(const std::function<std::string()>* process_members) const {
  if (!wanted_) return {};
  const char* state = "idle";
  switch (state_.load(std::memory_order_acquire)) {
    case State::kIdle: state = tracker_started_.load() ? "registering" : "idle"; break;
    case State::kConnected: state = "connected"; break;
    case State::kGone: state = "gone"; break;
    case State::kFailed: state = "unreachable"; break;
    case State::kForked: state = "forked"; break;
    case State::kOtherGpu: state = "other_gpu"; break;
    case State::kRefused: state = "refused"; break;
    case State::kFaulted: state = "faulted"; break;
  }
  const Stats s = stats();
  auto num = [](std::uint64_t v) { return std::to_string(v); };
  std::string out = "{\"state\":\"" + std::string(state) + "\"";
  out += ",\"submit_ahead\":{\"enabled\":" + std::string(submit_ahead_ ? "true" : "false") +
         ",\"submitted\":" + num(s.ahead) + ",\"taken\":" + num(s.ahead_taken) + "}";
  out += ",\"registered\":" + std::string(registered_once() ? "true" : "false");
  if (const std::uint32_t f = fault_.load(std::memory_order_acquire); f != 0)
    out += ",\"fault\":" + (f == kFaultByDaemon ? std::string("\"lithosd\"") : "\"" + ipc::cuda_error_name(f) + "\"");
  {
    const std::lock_guard<std::mutex> lock(gpu_mu_);
    out += ",\"gpu\":" + (gpu_.empty() ? std::string("null") : "\"" + gpu_ + "\"");
  }
  // Of this client's GPU: all, or none where the daemon at its socket schedules another.
  out += ",\"device\":" + std::to_string(device_) + ",\"launches_scheduled\":\"" +
         (state_.load(std::memory_order_acquire) == State::kOtherGpu ? "none" : "all") + "\"";
  out += ",\"class\":\"" + std::string(!registered_once() ? "" : high() ? "high" : "best-effort") + "\"";
  out +=
      ",\"reported\":" + num(s.reported) + ",\"markers\":" + num(s.markers) +
      ",\"tracker_markers\":" + num(s.tracker_markers) + ",\"tracker_wakes\":" + num(s.tracker_wakes) +
      ",\"submits\":" + num(s.submits) + ",\"grants\":" + num(s.grants) + ",\"grant_wait_mean_us\":" +
      std::to_string(s.grants != 0 ? static_cast<double>(s.grant_wait_ns) / 1e3 / static_cast<double>(s.grants) : 0.0) +
      ",\"grant_wait_max_us\":" + std::to_string(static_cast<double>(s.grant_wait_max_ns) / 1e3) +
      ",\"grant_wait_p50_us_at_most\":" + std::to_string(wait_quantile_us(0.5)) +
      ",\"grant_wait_p99_us_at_most\":" + std::to_string(wait_quantile_us(0.99)) +
      ",\"fallbacks\":" + num(s.fallbacks) + ",\"reconnects\":" + num(s.reconnects) + ",\"outages\":" + num(s.outages) +
      ",\"launches_unregistered\":" + num(s.launches_unregistered) + ",\"dropped_reports\":" + num(s.dropped_reports) +
      ",\"spilled\":" + num(s.spilled) + ",\"doorbells\":" + num(s.doorbells) + ",\"syncs\":" + num(s.syncs) +
      ",\"stream_priority\":{\"immediate\":\"" + priority_name(immediate_priority_.load()) +
      "\",\"enabled\":" + (hw_priority_ ? "true" : "false") + ",\"set\":" + num(s.priorities_set) +
      ",\"failed\":" + num(s.priority_failures) + "}";
  out += ",\"timing\":{\"first\":" + num(sample_first_) + ",\"every\":" + num(sample_every_) +
         ",\"per_s\":" + num(sample_per_s_) + ",\"timed\":" + num(s.timed) + ",\"sent\":" + num(s.samples_sent) +
         ",\"capped\":" + num(s.samples_capped) + ",\"captured\":" + num(s.samples_captured) +
         ",\"no_event\":" + num(s.samples_no_event) + ",\"failed\":" + num(s.samples_failed) +
         ",\"unreported\":" + num(s.samples_unreported) + ",\"too_long\":" + num(s.samples_too_long) +
         ",\"stale\":" + num(s.samples_stale) + "}";
  {
    const std::uint64_t after = registered_after_ns_.load();
    out += ",\"registration\":{\"wait_ms\":" + std::to_string(static_cast<double>(register_wait_ns_) / 1e6) +
           ",\"first_launch_waits\":" + num(s.register_waits) +
           ",\"first_launch_wait_timeouts\":" + num(s.register_wait_timeouts) +
           ",\"first_launch_waited_us\":" + std::to_string(static_cast<double>(first_wait_ns_.load()) / 1e3) +
           ",\"registered_after_us\":" +
           (after != 0 ? std::to_string(static_cast<double>(after) / 1e3) : std::string("null")) +
           ",\"attempts\":" + num(s.attempts) + ",\"failed_attempts\":" + num(s.failed_attempts) + "}";
  }
  if (process_members != nullptr) out += (*process_members)();
  return out + "}";
}

}  // namespace lithos::intercept
