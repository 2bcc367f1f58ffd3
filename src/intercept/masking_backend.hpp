// The masking backends: how the TPC set chosen for a launch is applied.
//
// Runtime holds one backend in force (an atomic pointer to one of the
// objects it owns) and asks it; nothing else branches on which it is:
//   - DescriptorBackend (descriptor_backend.hpp): the driver's launch-
//     descriptor callback writes each launch's mask: per launch, per stream,
//     and graphs keep the mask their descriptors were built with. Idle (no
//     subscriber) until some mask must be written.
//   - GreenBackend (green_backend.hpp): one green-context partition per
//     device, made at its primary-context retain; launches are routed to the
//     partition's streams. One static set per process.
//   - UnmaskedBackend (below): no launch yet, no mechanism, or observe only.
//
// The launch path reads the two flags it needs inline (an atomic load and a
// constant: no virtual call where a mask is written); the rest is virtual.
#pragma once

#include <atomic>

#include "intercept/stats.hpp"
#include "intercept/stream.hpp"

namespace lithos::intercept {

// What the runtime knows of the sets asked for, when a launch gets no mask.
struct Unmasked {
  SkipReason idle_reason = SkipReason::kNotRequested;  // why no mask is written while the hook is idle
  bool anything_asked = false;                         // some set was asked for (config, API, a stream)
};

class MaskingBackend {
 public:
  MaskingBackend(const MaskingBackend&) = delete;
  MaskingBackend& operator=(const MaskingBackend&) = delete;
  virtual ~MaskingBackend() = default;

  // Its name in the report, the log and lithos_backend().
  virtual const char* name() const noexcept = 0;
  // At a launch: whether the descriptor callback writes launch masks now
  // (and so whether graph execs get records of theirs).
  bool writes_masks() const noexcept { return writes_masks_.load(std::memory_order_acquire); }
  // At a launch: whether launches are sent to the backend's own streams
  // (Runtime::route); such a backend confines by itself, so a launch
  // without a descriptor mask is not counted as skipped.
  bool routes_launches() const noexcept { return routes_; }
  // At a launch that gets no mask: why (counted unless routes_launches()).
  virtual SkipReason why_unmasked(const Unmasked& u) const noexcept = 0;
  // The C API: whether per-stream and process sets can be applied (or,
  // still undecided, may be once the first launch attaches).
  virtual bool takes_sets() const noexcept = 0;
  // A stream is destroyed (its handle may be reused).
  virtual void forget_stream(Stream /*stream*/) noexcept {}

 protected:
  explicit MaskingBackend(bool routes) noexcept : routes_(routes) {}
  std::atomic<bool> writes_masks_{false};

 private:
  const bool routes_;
};

// No backend applies masks: before the first launch decides (`pending`,
// which still takes the C API's sets), none available, or switched off.
class UnmaskedBackend final : public MaskingBackend {
 public:
  enum class Why : unsigned char { kPending, kNone, kOff };
  explicit UnmaskedBackend(Why why) noexcept : MaskingBackend(false), why_(why) {}
  const char* name() const noexcept override {
    switch (why_) {
      case Why::kPending: return "pending (no launch yet)";
      case Why::kNone: return "none (unmasked)";
      case Why::kOff: return "off (observe only)";
    }
    return "?";
  }
  SkipReason why_unmasked(const Unmasked& u) const noexcept override {
    if (why_ == Why::kOff) return SkipReason::kNotRequested;
    if (why_ == Why::kNone && !u.anything_asked) return SkipReason::kNotRequested;
    return SkipReason::kNoBackend;
  }
  bool takes_sets() const noexcept override { return why_ == Why::kPending; }

 private:
  const Why why_;
};

}  // namespace lithos::intercept
