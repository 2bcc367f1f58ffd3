// The daemon link (docs/interposer.md, "Who owns what"): the process's
// DaemonClients (client.hpp), one per GPU (CUdevice) it launches on, each
// registered with the lithosd of its GPU (the socket's %g names it), made on
// first use and never destroyed (hooks run at exit), and the settings they
// all take. The library (library.hpp) owns the one DaemonLink and configures
// it as it makes the runtime; the runtime and the hooks hold a reference.
//
// Thread-safety: every function but configure may be called from any thread.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <functional>
#include <mutex>
#include <string>

#include "intercept/client.hpp"
#include "intercept/config.hpp"
#include "intercept/stream.hpp"
#include "ipc/socket.hpp"

namespace lithos::intercept {

class DaemonLink {
 public:
  // Devices past this get a client that wants no daemon (its launches run
  // as if none were configured).
  static constexpr int kMaxDevices = 64;

  DaemonLink() noexcept = default;
  DaemonLink(const DaemonLink&) = delete;
  DaemonLink& operator=(const DaemonLink&) = delete;

  // Once, by the library as it makes the runtime, before any client is
  // made: the settings every GPU's client takes, and where maps go (the
  // link never calls up into the masks). Connects nothing; registers the
  // fork child's handler when a daemon is wanted.
  void configure(const Config& c, DaemonClient::MapSink map_sink) noexcept;
  // Whether a daemon is configured at all.
  bool wanted_any() const noexcept { return settings_.wanted; }

  // The client of the GPU of the calling thread's current context: every
  // launch hook, which runs in the launch's context (the deferred-launch
  // worker makes each launch in the context it was queued from). One
  // relaxed load while the process sees one GPU; otherwise one
  // cuCtxGetDevice.
  DaemonClient& current() noexcept;
  // The client that opened a slot for `stream`: a synchronisation, a
  // capture or a destruction may name a stream of another GPU than the
  // current context's. current() for a default stream or one no client knows.
  DaemonClient& of_stream(Stream stream) noexcept;
  // Every hooked driver call's result, from the hooks: a sticky one
  // (ipc::is_sticky_cuda_error) is reported by the client of the calling
  // thread's GPU (DaemonClient::report_fault).
  void note_result(int code) noexcept;
  // The "daemon" member of lithos_stats_json: the state and counters of the
  // client made first (the GPU of the process's first launch), and when
  // the process launched on several GPUs, every client's in "gpus" (each
  // with its "device"); "" when no daemon is configured. `process_members`
  // gives the process-wide members the top-level object ends with (the
  // runtime's: deferred launches, graph replay), as `,"name":value...`.
  std::string stats_json_all(const std::function<std::string()>& process_members);

 private:
  // The settings every GPU's client takes (configure).
  struct Settings {
    bool wanted = false;
    std::string socket, tenant;
    bool fallback_set = false;
    double grant_timeout_ms = 500;
    bool hw_priority = true;
    bool submit_ahead = false;
    uid_t daemon_uid = ipc::kNoUid;
    double register_wait_ms = 5;
    std::uint32_t sample_first = 8, sample_every = 64, sample_per_s = 200, sample_max_ms = 1000;
    DaemonClient::MapSink map_sink = nullptr;
  };

  // The client of CUdevice `dev`, made on first use.
  DaemonClient& of_device(int dev) noexcept;
  // Calls f(client) for every client made so far, in device order.
  template <class F>
  void each(F&& f);
  // In a forked child: every client runs as if no daemon were configured.
  void after_fork_child() noexcept;

  Settings settings_;
  std::atomic<DaemonClient*> clients_[kMaxDevices] = {};
  std::mutex clients_mu_;
  std::atomic<int> first_device_{-1};  // the device of the client made first
  std::atomic<int> devices_{0};        // GPUs this process sees (0: not known yet)
  // The client of a device past kMaxDevices (wants no daemon), made in this
  // storage at its first need.
  alignas(DaemonClient) unsigned char inert_storage_[sizeof(DaemonClient)];
};

}  // namespace lithos::intercept
