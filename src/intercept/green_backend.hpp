// The green-context backend (masking_backend.hpp): the fallback where the
// descriptor hook is missing, or when LITHOS_BACKEND=green. One partition
// (gpu::GreenPartition) per device ordinal, made at that device's first
// cuDevicePrimaryCtxRetain with the process-wide set asked for, whose context
// replaces the primary one. A launch is sent to a stream of its device's
// partition (launches on the context's own streams were measured to run on
// every SM), ordered with the caller's stream by two events:
//   record(in, S); wait(G, in); <launch on G>; record(out, G); wait(S, out).
// One lock is held from route to the end of the launch, so the events of
// concurrent launches never mix (green mode serialises launches).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "intercept/config.hpp"
#include "intercept/masking_backend.hpp"
#include "sched/tpc_set.hpp"

struct CUstream_st;
struct CUctx_st;

namespace lithos::intercept {

class GreenBackend final : public MaskingBackend {
 public:
  static constexpr int kMaxDevices = 64;  // ordinals beyond are not routed
  explicit GreenBackend(Counters& counters) noexcept;
  ~GreenBackend() override;

  const char* name() const noexcept override { return "green-context"; }
  SkipReason why_unmasked(const Unmasked& /*u*/) const noexcept override { return SkipReason::kNotRequested; }
  bool takes_sets() const noexcept override { return false; }
  // Its route's stream and events go with it.
  void forget_stream(Stream stream) noexcept override;

  // At the first primary-context retain: whether green contexts can be made
  // (src/gpu's driver API loads, the driver has them); logged when not.
  // Throws only out of memory. The runtime serialises the calls.
  bool usable();
  // A device's partition: its TPCs, and the catalogue's.
  struct Device {
    void* partition = nullptr;  // gpu::GreenPartition
    sched::TpcSet tpcs;
    sched::TpcSet live;
  };
  // The context of device `ordinal`'s partition, made at the first call for
  // it inside `ctx` with the set `config` asks for (`text` then describes
  // it); null when it cannot be made (logged once per device). After
  // usable(); serialised by the runtime. Throws only out of memory.
  CUctx_st* partition(CUctx_st* ctx, int ordinal, const Config& config, std::string* text);
  // The partition of CUdevice `dev` (null: none).
  const Device* device(int dev) const noexcept {
    if (dev < 0 || dev >= kMaxDevices) return nullptr;
    return devices_[static_cast<std::size_t>(dev)].load(std::memory_order_acquire);
  }

  // A launch's route: holds the lock until the launch went out, then orders
  // the caller's stream after the partition's.
  class Route {
   public:
    Route() = default;
    Route(Route&& o) noexcept;
    Route& operator=(Route&&) = delete;
    ~Route();
    explicit operator bool() const { return target_ != nullptr; }
    CUstream_st* target() const { return target_; }

   private:
    friend class GreenBackend;
    GreenBackend* owner_ = nullptr;
    CUstream_st* user_ = nullptr;    // the caller's stream (explicit handle)
    CUstream_st* target_ = nullptr;  // the partition's stream
    void* out_event_ = nullptr;
  };
  // Work for `stream` on CUdevice `dev`, whose partition is `d`, sent to the
  // partition: an empty route when anything fails (the launch then goes to
  // the caller's stream, counted).
  Route route(Stream stream, int dev, const Device& d) noexcept;

 private:
  struct State;
  std::unique_ptr<State> state_;  // serialised by the runtime
  Counters& counters_;
  // By ordinal; each published once, complete (kept in state_).
  std::array<std::atomic<const Device*>, kMaxDevices> devices_{};
  struct Streams {
    CUstream_st* stream = nullptr;
    void* in = nullptr;   // CUevent
    void* out = nullptr;  // CUevent
  };
  std::mutex routes_mu_;  // held for the whole of a routed launch
  std::unordered_map<std::uintptr_t, Streams> routes_;
};

}  // namespace lithos::intercept
