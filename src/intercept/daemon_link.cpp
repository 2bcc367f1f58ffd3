#include "intercept/cuda_abi.hpp"  // first: cuda.h in ABI mode

#include "intercept/daemon_link.hpp"

#include <pthread.h>
#include <unistd.h>

#include <new>

#include "intercept/library.hpp"
#include "intercept/real_driver.hpp"
#include "ipc/cuda_faults.hpp"

namespace lithos::intercept {

template <class F>
void DaemonLink::each(F&& f) {
  for (auto& slot : clients_)
    if (DaemonClient* c = slot.load(std::memory_order_acquire)) f(*c);
}

void DaemonLink::configure(const Config& c, DaemonClient::MapSink map_sink) noexcept {
  try {
    Settings& s = settings_;
    s.map_sink = map_sink;
    s.wanted = !c.daemon_socket.empty();
    s.socket = c.daemon_socket;
    s.tenant = c.tenant;
    s.fallback_set = c.request != MaskRequest::kNone;
    s.grant_timeout_ms = c.grant_timeout_ms;
    s.hw_priority = c.hw_priority;
    s.submit_ahead = c.submit_ahead;
    s.daemon_uid = c.daemon_uid >= 0 ? static_cast<uid_t>(c.daemon_uid) : ipc::kNoUid;
    s.register_wait_ms = c.register_wait_ms;
    s.sample_first = c.hp_sample_first;
    s.sample_every = c.hp_sample_every;
    s.sample_per_s = c.hp_sample_per_s;
    s.sample_max_ms = c.hp_sample_max_ms;
    if (s.wanted) {
      // A forked child shares the parent's channel mappings but must never
      // use them (one producer per ring): it runs as if no daemon were
      // configured. The parent's client thread is not in the child, and
      // none is started there (tracker_started_ stays set). A plain C
      // callback: it reaches the link through the library.
      static std::once_flag once;
      std::call_once(once,
                     [] { pthread_atfork(nullptr, nullptr, [] { Library::get().daemon_link().after_fork_child(); }); });
    }
  } catch (...) {
    settings_.wanted = false;
  }
}

void DaemonLink::after_fork_child() noexcept {
  each([](DaemonClient& me) {
    me.state_.store(DaemonClient::State::kForked, std::memory_order_release);
    me.tracker_running_.store(false, std::memory_order_release);
    if (me.sock_ >= 0) ::close(me.sock_);
    me.sock_ = -1;
  });
}

DaemonClient& DaemonLink::of_device(int dev) noexcept {
  static DaemonClient* const inert = new (inert_storage_) DaemonClient(-1);  // wants no daemon
  if (dev < 0 || dev >= kMaxDevices) return *inert;
  if (DaemonClient* c = clients_[dev].load(std::memory_order_acquire)) return *c;
  try {
    const std::lock_guard<std::mutex> lock(clients_mu_);
    if (DaemonClient* c = clients_[dev].load(std::memory_order_acquire)) return *c;
    auto* c = new (std::nothrow) DaemonClient(dev);
    if (c == nullptr) return *inert;
    const Settings& s = settings_;
    c->wanted_ = s.wanted;
    c->socket_ = s.socket;
    c->tenant_ = s.tenant;
    c->fallback_set_ = s.fallback_set;
    c->grant_timeout_ms_ = s.grant_timeout_ms;
    c->hw_priority_ = s.hw_priority;
    c->submit_ahead_ = s.submit_ahead;
    c->daemon_uid_ = s.daemon_uid;
    c->register_wait_ns_ = static_cast<std::uint64_t>(s.register_wait_ms * 1e6);
    c->sample_first_ = s.sample_first;
    c->sample_every_ = s.sample_every;
    c->sample_per_s_ = s.sample_per_s;
    c->sample_max_ns_ = std::uint64_t{s.sample_max_ms} * 1'000'000ULL;
    c->map_sink_ = s.map_sink;
    int none = -1;
    first_device_.compare_exchange_strong(none, dev);
    clients_[dev].store(c, std::memory_order_release);
    return *c;
  } catch (...) {
    return *inert;
  }
}

DaemonClient& DaemonLink::current() noexcept {
  int n = devices_.load(std::memory_order_relaxed);
  if (n == 1) return of_device(0);
  const DriverTable& d = driver();
  if (n == 0) {
    if (d.cuDeviceGetCount == nullptr || d.cuDeviceGetCount(&n) != CUDA_SUCCESS || n <= 0) return of_device(0);
    devices_.store(n, std::memory_order_relaxed);
    if (n == 1) return of_device(0);
  }
  CUdevice dev = 0;
  if (d.cuCtxGetDevice == nullptr || d.cuCtxGetDevice(&dev) != CUDA_SUCCESS) dev = 0;  // no context: its launch fails
  return of_device(dev);
}

DaemonClient& DaemonLink::of_stream(Stream stream) noexcept {
  if (stream.raw() == nullptr || devices_.load(std::memory_order_relaxed) <= 1) return current();
  DaemonClient* found = nullptr;
  each([&](DaemonClient& c) {
    if (found == nullptr && c.has_slot(stream)) found = &c;
  });
  return found != nullptr ? *found : current();
}

void DaemonLink::note_result(int code) noexcept {
  if (code == CUDA_SUCCESS || !ipc::is_sticky_cuda_error(static_cast<std::uint32_t>(code)) || !settings_.wanted) return;
  current().report_fault(static_cast<std::uint32_t>(code));
}

std::string DaemonLink::stats_json_all(const std::function<std::string()>& process_members) {
  if (!settings_.wanted) return {};
  const int first = first_device_.load(std::memory_order_acquire);
  std::string all;
  int n = 0;
  each([&](DaemonClient& c) { all += (n++ == 0 ? "" : ",") + c.stats_json(nullptr); });
  std::string out = of_device(first >= 0 ? first : 0).stats_json(&process_members);
  if (n > 1 && !out.empty()) out.insert(out.size() - 1, ",\"gpus\":[" + all + "]");
  return out;
}

}  // namespace lithos::intercept
