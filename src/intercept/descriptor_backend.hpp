// The descriptor backend (masking_backend.hpp): the driver's launch-
// descriptor callback (gpu/descriptor_hook.hpp) writes each launch's mask.
// Subscribed only once some mask must be written: the driver takes one
// subscriber, which CUPTI tools (torch.profiler, Nsight) need otherwise, and
// the callback costs ~0.2 us per launch (docs/interposer.md). Until then it
// is idle and writes nothing.
#pragma once

#include <cstdint>

#include "intercept/masking_backend.hpp"

namespace lithos::intercept {

struct DriverTable;

class DescriptorBackend final : public MaskingBackend {
 public:
  // `callback(user, qmd)` is what the driver calls for every descriptor
  // built once subscribe() succeeded.
  using Callback = void (*)(void* user, std::uint8_t* qmd);
  DescriptorBackend(Callback callback, void* user) noexcept : MaskingBackend(false), callback_(callback), user_(user) {}

  const char* name() const noexcept override {
    return writes_masks() ? "descriptor" : "descriptor (idle: no mask asked for)";
  }
  SkipReason why_unmasked(const Unmasked& u) const noexcept override { return u.idle_reason; }
  bool takes_sets() const noexcept override { return true; }

  // Whether the driver has the descriptor hook's table (nothing subscribed).
  static bool available(const DriverTable& drv) noexcept;
  // Subscribes the callback (once; true after). False, logged, when the
  // driver refuses: launches then run unmasked. Throws only out of memory.
  bool subscribe(const DriverTable& drv);

 private:
  Callback callback_;
  void* user_;
};

}  // namespace lithos::intercept
