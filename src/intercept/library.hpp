// The library: the one owner of liblithos.so's objects (docs/interposer.md,
// "Who owns what"). It is made once, at the first hook, API call or
// dlsym answer that needs any of them, on whichever thread that is, and is
// never destroyed: hooks run during and after the process's exit (the
// deferred worker, other threads, atexit handlers of the application), so
// nothing it owns may go away under them.
//
// Build order (the members' order):
//   1. the driver table (RealDriver: the real function of every hook and
//      the DriverTable of lithos's own calls);
//   2. the daemon link (DaemonLink: one DaemonClient per GPU, made at its
//      first launch), idle until configured;
//   3. the launch paths, idle until configured: the atomizer, deferred
//      launches, graph replay;
//   4. the runtime (the masks: process and stream sets, GPU views, the
//      descriptor hook, graph records, kernel information), made at its
//      first need since it reads the environment; making it configures the
//      daemon link and the launch paths, in one place (make_runtime).
// Were it destroyed, members would go in the reverse order.
//
// Entry points (the hooks, the C API, dlsym) reach the members from here;
// the hooks keep each member's address in one function-local static, so a
// hook pays one guard check and one load, as with the per-class singletons
// this replaced. RealDriver::instance() (behind driver()) and
// DeferredLaunches::instance() (its fork and exit handlers) are accessors to
// the members for the code that has no owner's reference; the daemon link's
// fork handler reaches it through get().

#pragma once

#include <atomic>

#include "intercept/atomizer.hpp"
#include "intercept/daemon_link.hpp"
#include "intercept/deferred.hpp"
#include "intercept/graph_replay.hpp"
#include "intercept/real_driver.hpp"
#include "intercept/runtime.hpp"

namespace lithos::intercept {

class Library {
 public:
  // The library, made on first use (thread-safe), never destroyed.
  static Library& get() noexcept;

  RealDriver& real_driver() noexcept { return driver_; }
  DaemonLink& daemon_link() noexcept { return link_; }
  Atomizer& atomizer() noexcept { return atomizer_; }
  DeferredLaunches& deferred() noexcept { return deferred_; }
  GraphReplay& graph_replay() noexcept { return replay_; }
  // The runtime, made (and the daemon link and launch paths configured) at
  // the first call; thread-safe.
  Runtime& runtime() noexcept;
  // The runtime if some call made it, else null (never makes it).
  Runtime* runtime_if_made() const noexcept { return runtime_.load(std::memory_order_acquire); }

  Library(const Library&) = delete;
  Library& operator=(const Library&) = delete;

 private:
  Library() = default;
  ~Library() = default;
  Runtime* make_runtime() noexcept;

  // 1. The driver.
  RealDriver driver_;
  // 2. The daemon link (configured by make_runtime).
  DaemonLink link_;
  // 3. The launch paths (configured by make_runtime).
  Atomizer atomizer_;
  DeferredLaunches deferred_;
  GraphReplay replay_{atomizer_};
  // 4. The runtime, in this storage once made.
  alignas(Runtime) unsigned char runtime_storage_[sizeof(Runtime)];
  std::atomic<Runtime*> runtime_{nullptr};
};

}  // namespace lithos::intercept
