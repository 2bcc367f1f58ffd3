// NVML's critical Xid events of one GPU (docs/daemon.md, "GPU faults"): a
// thread of its own waits for them (nvmlEventSetWait, 100 ms at a time) and
// queues each event's Xid for the daemon's loop, which takes them without
// waiting. libnvidia-ml.so.1 is loaded with dlopen (no link dependency, no
// nvml.h); nothing is set on the GPU.
//
// On the H100 an illegal memory access arrives as Xid 31 within a
// millisecond of the fault (scripts/faults/fault-probe.sh). Where NVML or
// its events are not there (no driver, a container without the NVML
// library, a GPU that does not report events) start() says why and lithosd
// goes on without it: faults are still reported by the clients.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace lithos::daemon {

class XidWatcher {
 public:
  // Watches the GPU whose UUID is `uuid` ("GPU-..."; "" = NVML's device 0)
  // through the NVML library `library` ("" = libnvidia-ml.so.1).
  // nullptr, with the reason in *why, when it cannot.
  static std::unique_ptr<XidWatcher> start(const std::string& library, const std::string& uuid, std::string* why);
  ~XidWatcher();
  XidWatcher(const XidWatcher&) = delete;
  XidWatcher& operator=(const XidWatcher&) = delete;

  // The Xids that arrived since the last call, oldest first.
  std::vector<std::uint64_t> take();
  // Events seen so far.
  std::uint64_t events() const { return events_.load(std::memory_order_relaxed); }

 private:
  XidWatcher() = default;
  void run();
  struct Api;
  std::unique_ptr<Api> api_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<std::uint64_t> events_{0};
  std::mutex mu_;
  std::vector<std::uint64_t> queue_;  // guarded by mu_
};

}  // namespace lithos::daemon
