#include "intercept/cuda_abi.hpp"  // first: cuda.h in ABI mode

#include "intercept/library.hpp"

#include <pthread.h>

#include <new>

namespace lithos::intercept {

Library& Library::get() noexcept {
  // Static storage, never destroyed (see library.hpp); the one global.
  alignas(Library) static unsigned char storage[sizeof(Library)];
  static Library* const self = new (storage) Library();
  return *self;
}

Runtime& Library::runtime() noexcept {
  static Runtime* const rt = make_runtime();
  return *rt;
}

Runtime* Library::make_runtime() noexcept {
  auto* rt = new (runtime_storage_) Runtime(driver_, link_, atomizer_, deferred_, replay_);  // reads the environment
  const Config& config = rt->config();
  atomizer_.configure(config);
  link_.configure(config,
                  [](int dev, gpu::SlotMap map) noexcept { get().runtime().adopt_daemon_map(dev, std::move(map)); });
  const bool daemon = !config.daemon_socket.empty();
  deferred_.configure(config.defer_launches && daemon, config.defer_depth);
  replay_.configure(config.graph_replay && daemon);
  runtime_.store(rt, std::memory_order_release);
  pthread_atfork(nullptr, nullptr, [] {
    if (Runtime* r = get().runtime_if_made()) r->note_forked();
  });
  return rt;
}

// ---- The accessors of the library's members ---------------------------------

RealDriver& RealDriver::instance() noexcept {
  static RealDriver* const self = &Library::get().real_driver();
  return *self;
}

DeferredLaunches& DeferredLaunches::instance() noexcept {
  static DeferredLaunches* const self = &Library::get().deferred();
  return *self;
}

}  // namespace lithos::intercept
