#include "intercept/cuda_abi.hpp"  // first: cuda.h in ABI mode

#include "intercept/green_backend.hpp"

#include <optional>

#include "gpu/driver.hpp"
#include "gpu/green_context.hpp"
#include "intercept/log.hpp"
#include "intercept/real_driver.hpp"
#include "intercept/thread_frame.hpp"

namespace lithos::intercept {

// src/gpu's driver API (lithos's own calls of the partition) and one
// partition per device ordinal, kept for the life of the process.
struct GreenBackend::State {
  std::optional<gpu::DriverApi> api;
  std::unordered_map<int, std::unique_ptr<gpu::GreenPartition>> partitions;
  std::unordered_map<int, std::unique_ptr<gpu::GreenTpcCatalog>> catalogs;
  std::unordered_map<int, std::unique_ptr<Device>> devices;  // published in devices_
};

GreenBackend::GreenBackend(Counters& counters) noexcept : MaskingBackend(true), counters_(counters) {}
GreenBackend::~GreenBackend() = default;

bool GreenBackend::usable() {
  if (!state_) state_ = std::make_unique<State>();
  if (!state_->api) {
    auto api = gpu::load_driver_api();
    if (!api) {
      LITHOS_LOG(LogLevel::kError, "green-context backend unavailable: %s", api.status().message().c_str());
      return false;
    }
    state_->api = std::move(api).value();
  }
  if (!state_->api->has_green_contexts()) {
    LITHOS_LOG(LogLevel::kError,
               "green-context backend unavailable: the driver lacks green contexts; "
               "running unmasked");
    return false;
  }
  return true;
}

CUctx_st* GreenBackend::partition(CUctx_st* ctx, int ordinal, const Config& config, std::string* text) {
  if (!state_ || !state_->api) return nullptr;
  auto found = state_->partitions.find(ordinal);
  if (found == state_->partitions.end()) {
    const gpu::DriverApi& api = *state_->api;
    CUcontext previous = nullptr;
    api.cuCtxGetCurrent(&previous);
    api.cuCtxSetCurrent(ctx);
    auto catalog = gpu::GreenTpcCatalog::build(api, ordinal);
    std::unique_ptr<gpu::GreenPartition> partition;
    if (catalog) {
      state_->catalogs[ordinal] = std::make_unique<gpu::GreenTpcCatalog>(std::move(catalog).value());
      const gpu::GreenTpcCatalog& cat = *state_->catalogs[ordinal];
      const sched::TpcSet wanted =
          config.request == MaskRequest::kFirstN ? cat.tpcs().take_lowest(config.first_n) : config.tpc_set;
      auto made = gpu::GreenPartition::create(cat, wanted);
      if (made) {
        partition = std::move(made).value();
        auto device = std::make_unique<Device>();
        device->partition = partition.get();
        device->tpcs = wanted;
        device->live = cat.tpcs();
        state_->devices[ordinal] = std::move(device);
        *text = "TPCs " + wanted.to_string() + " (" + std::to_string(wanted.count()) + " of " +
                std::to_string(cat.tpcs().count()) + ", green context)";
      } else {
        LITHOS_LOG(LogLevel::kError, "green-context partition refused: %s; running unmasked",
                   made.status().message().c_str());
      }
    } else {
      LITHOS_LOG(LogLevel::kError, "green-context catalogue failed: %s; running unmasked",
                 catalog.status().message().c_str());
    }
    api.cuCtxSetCurrent(previous);
    found = state_->partitions.emplace(ordinal, std::move(partition)).first;
    if (found->second) {
      LITHOS_LOG(LogLevel::kInfo, "backend green-context: device %d confined to %s", ordinal, text->c_str());
    }
  }
  if (!found->second) return nullptr;
  if (ordinal >= 0 && ordinal < static_cast<int>(devices_.size())) {
    devices_[static_cast<std::size_t>(ordinal)].store(state_->devices[ordinal].get(), std::memory_order_release);
  }
  return found->second->context();
}

GreenBackend::Route::Route(Route&& o) noexcept
    : owner_(o.owner_), user_(o.user_), target_(o.target_), out_event_(o.out_event_) {
  o.target_ = nullptr;
  o.owner_ = nullptr;
}

GreenBackend::Route::~Route() {
  if (target_ == nullptr || owner_ == nullptr) return;
  const DriverTable& drv = driver();
  const auto out = static_cast<CUevent>(out_event_);
  if (drv.cuEventRecord(out, target_) != CUDA_SUCCESS || drv.cuStreamWaitEvent(user_, out, 0) != CUDA_SUCCESS) {
    LITHOS_LOG_ONCE(LogLevel::kError, "green-context route: cannot order the caller's stream after the partition's");
  }
  owner_->routes_mu_.unlock();
}

GreenBackend::Route GreenBackend::route(Stream stream, int dev, const Device& d) noexcept {
  Route route;
  const DriverTable& drv = driver();
  auto* partition = static_cast<gpu::GreenPartition*>(d.partition);
  if (partition == nullptr || drv.cuEventRecord == nullptr || drv.cuStreamWaitEvent == nullptr ||
      drv.cuEventCreate == nullptr) {
    return route;
  }
  // The caller's stream as an explicit handle (a null stream means the
  // legacy or the per-thread default stream, by the entry point).
  CUstream_st* user = stream.handle();
  try {
    routes_mu_.lock();
  } catch (...) {
    return route;
  }
  bool ok = false;
  Streams gs;
  try {
    InternalScope internal;
    // A default stream is one handle on every device: its route is the device's.
    auto key = reinterpret_cast<std::uintptr_t>(user);
    if (stream.raw() == nullptr) key |= static_cast<std::uintptr_t>(dev) << 56;
    auto it = routes_.find(key);
    if (it == routes_.end()) {
      auto made = partition->create_stream(CU_STREAM_NON_BLOCKING, 0);
      CUevent in = nullptr;
      CUevent out = nullptr;
      if (made && drv.cuEventCreate(&in, CU_EVENT_DISABLE_TIMING) == CUDA_SUCCESS &&
          drv.cuEventCreate(&out, CU_EVENT_DISABLE_TIMING) == CUDA_SUCCESS) {
        it = routes_.emplace(key, Streams{made.value(), in, out}).first;
      }
    }
    if (it != routes_.end()) {
      gs = it->second;
      const auto in = static_cast<CUevent>(gs.in);
      ok = drv.cuEventRecord(in, user) == CUDA_SUCCESS && drv.cuStreamWaitEvent(gs.stream, in, 0) == CUDA_SUCCESS;
    }
  } catch (...) {
    ok = false;
  }
  if (!ok) {
    routes_mu_.unlock();
    counters_.skip(SkipReason::kNoBackend);
    LITHOS_LOG_ONCE(LogLevel::kError, "green-context route unavailable for a stream; that launch runs unconfined");
    return route;
  }
  counters_.bump(counters_.green_routed);
  route.owner_ = this;
  route.user_ = user;
  route.target_ = gs.stream;
  route.out_event_ = gs.out;
  return route;
}

void GreenBackend::forget_stream(Stream stream) noexcept {
  if (stream.raw() == nullptr) return;
  try {
    const std::lock_guard<std::mutex> lock(routes_mu_);
    const auto it = routes_.find(stream.handle_key());
    if (it != routes_.end()) {
      // Pending work on the partition's stream completes first (driver rule).
      const DriverTable& drv = driver();
      if (drv.cuStreamDestroy != nullptr) drv.cuStreamDestroy(it->second.stream);
      if (drv.cuEventDestroy != nullptr) {
        drv.cuEventDestroy(static_cast<CUevent>(it->second.in));
        drv.cuEventDestroy(static_cast<CUevent>(it->second.out));
      }
      routes_.erase(it);
    }
  } catch (...) {
    counters_.bump(counters_.internal_errors);
  }
}

}  // namespace lithos::intercept
