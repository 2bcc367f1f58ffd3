// Checks on what clients send. The daemon never trusts a client: a Hello
// comes from any local process, and a client can write anything into its
// channel at any time. Every rule broken is reported as kInvalidArgument
// with a message naming the field and its value; the daemon drops the
// client on the first one.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.hpp"
#include "ipc/protocol.hpp"

namespace lithos::ipc {

// Limits a launch must respect (H100 / sm_90; the CUDA limits are tighter
// per dimension, these bound what the daemon's arithmetic must handle).
inline constexpr std::uint64_t kMaxGridBlocks = std::uint64_t{1} << 40;
inline constexpr std::uint64_t kMaxBlockThreads = 1024;
inline constexpr std::uint64_t kMaxClusterBlocks = 16;
inline constexpr std::uint32_t kMaxSharedBytes = 228 * 1024;
inline constexpr std::uint16_t kKnownSubmitFlags =
    kSubmitCooperative | kSubmitGraph | kSubmitWhole | kSubmitRunning | kSubmitPinned | kSubmitSized;
inline constexpr std::uint32_t kMaxSizedTpcs = 128;  // kSubmitSized: a TPC count (sched::kMaxTpcs)

// Magic, version and a known kind. Forces NUL termination of `tenant` and
// `program` (their last byte), rejects names holding control characters
// (ASCII < 0x20 and 0x7f), and replaces every byte that is not part of a
// well-formed UTF-8 sequence with '?' (an executable named in Latin-1, "\xe9t\xe9",
// becomes "?t?"): both names end up in logs, in `lithos status` and its
// JSON, which must stay valid UTF-8.
Status validate_hello(Hello& h);

// Replaces, in place, every byte of text[0, n) that is not part of a
// well-formed UTF-8 sequence (RFC 3629: no overlong forms, no surrogates,
// nothing above U+10FFFF) with '?'. Returns how many bytes it replaced.
std::size_t replace_invalid_utf8(char* text, std::size_t n);
// A copy of `s` with the same replacements.
std::string valid_utf8(std::string_view s);

// The rules for one client's stream of SubmitMsg, with the per-stream state
// they need (whether the slot is open, its last launch seq):
//  - a known type; stream < kMaxStreams; only known flag bits;
//  - kStreamOpen on a closed slot; kStreamClose and kSync on an open one;
//  - kLaunch on an open slot, seq strictly above the slot's last (numbering
//    starts afresh at each kStreamOpen: the client numbers per stream);
//    grid dims >= 1, product <= 2^40; block dims >= 1, product <= 1024;
//    cluster dims >= 1, product <= 16, each grid dim a multiple of the
//    cluster's; 1 <= unit <= grid blocks; smem <= 228 KiB;
//  - nothing after kGoodbye.
// A rejected message changes no state.
class SubmitValidator {
 public:
  Status check(const SubmitMsg& m);

  bool is_open(std::uint32_t stream) const { return stream < kMaxStreams && open_[stream]; }
  std::uint64_t last_seq(std::uint32_t stream) const { return stream < kMaxStreams ? last_seq_[stream] : 0; }
  bool said_goodbye() const { return goodbye_; }

 private:
  std::array<bool, kMaxStreams> open_{};
  std::array<std::uint64_t, kMaxStreams> last_seq_{};
  bool goodbye_ = false;
};

// The launch-shape rules alone (grid, block, cluster, unit, smem), as
// SubmitValidator applies them to kLaunch.
Status validate_launch_shape(const SubmitMsg& m);

}  // namespace lithos::ipc
