// A stream as a hook received it. A null handle means the legacy default
// stream, or, in an entry point of the per-thread-default-stream ABI
// (`_ptsz`, hook_list.def), the calling thread's default stream: a Stream
// carries the handle with that bit, and is the one place that says what the
// pair means (an explicit handle for the driver, a key for lithos's maps).
#pragma once

#include <cstdint>

#include "intercept/thread_frame.hpp"

struct CUstream_st;

namespace lithos::intercept {

class Stream {
 public:
  // cuda.h's CU_STREAM_LEGACY ((CUstream)0x1) and CU_STREAM_PER_THREAD ((CUstream)0x2).
  static constexpr std::uintptr_t kLegacy = 0x1;
  static constexpr std::uintptr_t kPerThread = 0x2;

  constexpr Stream() noexcept = default;
  constexpr Stream(CUstream_st* raw, bool ptsz) noexcept : raw_(raw), ptsz_(ptsz) {}

  // As the application passed it (null: a default stream).
  CUstream_st* raw() const noexcept { return raw_; }
  // Whether it came through a `_ptsz` entry point.
  bool ptsz() const noexcept { return ptsz_; }
  // Null under `_ptsz`: this thread's default stream, another in each thread.
  bool null_per_thread() const noexcept { return ptsz_ && raw_ == nullptr; }
  // An explicit handle, right in any entry point: the legacy or the
  // per-thread default stream's for a null one.
  CUstream_st* handle() const noexcept {
    if (raw_ != nullptr) return raw_;
    return reinterpret_cast<CUstream_st*>(ptsz_ ? kPerThread : kLegacy);
  }
  // The handle for an entry point without `_ptsz`, as passed but for a null
  // `_ptsz` stream (CU_STREAM_PER_THREAD); a null legacy stream stays null.
  CUstream_st* plain_handle() const noexcept {
    return null_per_thread() ? reinterpret_cast<CUstream_st*>(kPerThread) : raw_;
  }
  // The handle as a key (the C API's stream sets, green routes): one key
  // for the per-thread default stream of every thread.
  std::uintptr_t handle_key() const noexcept { return reinterpret_cast<std::uintptr_t>(handle()); }
  // A key that tells apart the streams of a map shared by threads (the
  // daemon link's stream slots): a null `_ptsz` stream's includes the
  // thread; a null legacy one's is 0.
  std::uintptr_t key() const noexcept {
    if (raw_ != nullptr) return reinterpret_cast<std::uintptr_t>(raw_);
    return ptsz_ ? reinterpret_cast<std::uintptr_t>(&t_stream_thread_tag) | 1U : 0;
  }

 private:
  CUstream_st* raw_ = nullptr;
  bool ptsz_ = false;
};

}  // namespace lithos::intercept
