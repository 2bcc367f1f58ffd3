#include "ipc/validate.hpp"

#include <cstdio>
#include <string>

namespace lithos::ipc {

namespace {

std::string hex(std::uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

Status bad(const std::string& field, const std::string& value, const std::string& rule) {
  return Status::invalid_argument(field + " = " + value + ": " + rule);
}
Status bad(const std::string& field, std::uint64_t value, const std::string& rule) {
  return bad(field, std::to_string(value), rule);
}

// Length of the well-formed UTF-8 sequence at s[i] (s[i] >= 0x80), or 0.
std::size_t utf8_sequence(const unsigned char* s, std::size_t n, std::size_t i) {
  const unsigned c = s[i];
  std::size_t len = 0;
  unsigned lo = 0x80, hi = 0xbf;  // the second byte's range
  if (c >= 0xc2 && c <= 0xdf) {
    len = 2;
  } else if (c >= 0xe0 && c <= 0xef) {
    len = 3;
    if (c == 0xe0) lo = 0xa0;  // not overlong
    if (c == 0xed) hi = 0x9f;  // not a surrogate
  } else if (c >= 0xf0 && c <= 0xf4) {
    len = 4;
    if (c == 0xf0) lo = 0x90;  // not overlong
    if (c == 0xf4) hi = 0x8f;  // not above U+10FFFF
  } else {
    return 0;
  }
  if (len > n - i || s[i + 1] < lo || s[i + 1] > hi) return 0;
  for (std::size_t k = 2; k < len; ++k) {
    if (s[i + k] < 0x80 || s[i + k] > 0xbf) return 0;
  }
  return len;
}

// A fixed-size name: force its terminator, refuse control characters
// before it, and make the rest valid UTF-8.
Status check_name(const char* field, char (&name)[kNameBytes]) {
  name[kNameBytes - 1] = '\0';
  std::size_t n = 0;
  for (; n < kNameBytes && name[n] != '\0'; ++n) {
    const auto c = static_cast<unsigned char>(name[n]);
    if (c < 0x20 || c == 0x7f)
      return Status::invalid_argument(std::string(field) + " holds control character " + hex(c) + " at byte " +
                                      std::to_string(n));
  }
  (void)replace_invalid_utf8(name, n);
  return Status::ok();
}

const char* type_name(SubmitType t) {
  switch (t) {
    case SubmitType::kStreamOpen: return "stream-open";
    case SubmitType::kStreamClose: return "stream-close";
    case SubmitType::kLaunch: return "launch";
    case SubmitType::kSync: return "sync";
    case SubmitType::kGoodbye: return "goodbye";
  }
  return "?";
}

}  // namespace

std::size_t replace_invalid_utf8(char* text, std::size_t n) {
  auto* s = reinterpret_cast<unsigned char*>(text);
  std::size_t replaced = 0;
  for (std::size_t i = 0; i < n;) {
    if (s[i] < 0x80) {
      ++i;
      continue;
    }
    const std::size_t len = utf8_sequence(s, n, i);
    if (len == 0) {
      s[i++] = '?';
      ++replaced;
    } else {
      i += len;
    }
  }
  return replaced;
}

std::string valid_utf8(std::string_view s) {
  std::string out(s);
  (void)replace_invalid_utf8(out.data(), out.size());
  return out;
}

Status validate_hello(Hello& h) {
  if (h.magic != kMagic) return bad("hello.magic", hex(h.magic), "expected " + hex(kMagic));
  if (h.version != kVersion) return bad("hello.version", h.version, "this daemon speaks " + std::to_string(kVersion));
  if (h.kind != HelloKind::kClient && h.kind != HelloKind::kStatus)
    return bad("hello.kind", static_cast<std::uint32_t>(h.kind), "unknown kind");
  LITHOS_RETURN_IF_ERROR(check_name("hello.tenant", h.tenant));
  LITHOS_RETURN_IF_ERROR(check_name("hello.program", h.program));
  // Flags a later client may send are ignored; "MPS client" counts only
  // when the client says it asked.
  h.flags &= kHelloFlags;
  if ((h.flags & kHelloMpsKnown) == 0) h.flags = 0;
  return Status::ok();
}

Status validate_launch_shape(const SubmitMsg& m) {
  static const char* const kGrid[3] = {"submit.grid[0]", "submit.grid[1]", "submit.grid[2]"};
  static const char* const kBlock[3] = {"submit.block[0]", "submit.block[1]", "submit.block[2]"};
  static const char* const kCluster[3] = {"submit.cluster[0]", "submit.cluster[1]", "submit.cluster[2]"};
  // Products are built one factor at a time, each step checked against the
  // limit before the next multiplication, so that nothing overflows 64 bits.
  std::uint64_t blocks = 1;
  for (int i = 0; i < 3; ++i) {
    if (m.grid[i] == 0) return bad(kGrid[i], 0, "must be >= 1");
    if (blocks > kMaxGridBlocks / m.grid[i])
      return bad(kGrid[i], m.grid[i],
                 "grid of " + std::to_string(m.grid[0]) + "x" + std::to_string(m.grid[1]) + "x" +
                     std::to_string(m.grid[2]) + " exceeds 2^40 blocks");
    blocks *= m.grid[i];
  }
  std::uint64_t threads = 1;
  for (int i = 0; i < 3; ++i) {
    if (m.block[i] == 0) return bad(kBlock[i], 0, "must be >= 1");
    if (threads > kMaxBlockThreads / m.block[i])
      return bad(kBlock[i], m.block[i],
                 "block of " + std::to_string(m.block[0]) + "x" + std::to_string(m.block[1]) + "x" +
                     std::to_string(m.block[2]) + " exceeds 1024 threads");
    threads *= m.block[i];
  }
  std::uint64_t cluster = 1;
  for (int i = 0; i < 3; ++i) {
    if (m.cluster[i] == 0) return bad(kCluster[i], 0, "must be >= 1");
    cluster *= m.cluster[i];  // at most 255^3: no overflow
    if (m.grid[i] % m.cluster[i] != 0)
      return bad(kGrid[i], m.grid[i],
                 "not a multiple of submit.cluster[" + std::to_string(i) + "] = " + std::to_string(m.cluster[i]));
  }
  if (cluster > kMaxClusterBlocks)
    return bad("submit.cluster",
               std::to_string(m.cluster[0]) + "x" + std::to_string(m.cluster[1]) + "x" + std::to_string(m.cluster[2]),
               "exceeds 16 blocks");
  if (m.unit == 0) return bad("submit.unit", 0, "must be >= 1");
  if (m.unit > blocks) return bad("submit.unit", m.unit, "exceeds the grid's " + std::to_string(blocks) + " blocks");
  if (m.smem > kMaxSharedBytes)
    return bad("submit.smem", m.smem, "exceeds " + std::to_string(kMaxSharedBytes) + " bytes per block");
  return Status::ok();
}

Status SubmitValidator::check(const SubmitMsg& m) {
  const auto type = static_cast<std::uint16_t>(m.type);
  if (type < static_cast<std::uint16_t>(SubmitType::kStreamOpen) ||
      type > static_cast<std::uint16_t>(SubmitType::kGoodbye))
    return bad("submit.type", type, "unknown type");
  if (goodbye_) return bad("submit.type", type_name(m.type), "the client already said goodbye");
  if (m.stream >= kMaxStreams) return bad("submit.stream", m.stream, "must be < " + std::to_string(kMaxStreams));
  const auto unknown_flags = static_cast<std::uint16_t>(m.flags & ~kKnownSubmitFlags);
  if (unknown_flags != 0) return bad("submit.flags", hex(m.flags), "unknown bits " + hex(unknown_flags));
  const std::uint32_t s = m.stream;
  switch (m.type) {
    case SubmitType::kStreamOpen:
      if (open_[s]) return bad("submit.stream", s, "stream-open on a stream already open");
      open_[s] = true;
      last_seq_[s] = 0;
      return Status::ok();
    case SubmitType::kStreamClose:
      if (!open_[s]) return bad("submit.stream", s, "stream-close on a stream not open");
      open_[s] = false;
      return Status::ok();
    case SubmitType::kSync:
      if (!open_[s]) return bad("submit.stream", s, "sync on a stream not open");
      return Status::ok();
    case SubmitType::kGoodbye: goodbye_ = true; return Status::ok();
    case SubmitType::kLaunch: break;
  }
  if (!open_[s]) return bad("submit.stream", s, "launch on a stream not open");
  if (m.seq <= last_seq_[s])
    return bad("submit.seq", m.seq,
               "must be greater than the stream's last launch seq " + std::to_string(last_seq_[s]));
  if ((m.flags & kSubmitSized) != 0 && ((m.flags & kSubmitRunning) == 0 || (m.flags & kSubmitGraph) != 0))
    return bad("submit.flags", hex(m.flags), "sized is for a kernel reported running");
  if ((m.flags & kSubmitPinned) != 0) {
    // grid/block carry the pinned set (set_pinned_tpcs): the shape is 1x1x1.
    if ((m.flags & kSubmitGraph) == 0) return bad("submit.flags", hex(m.flags), "pinned without graph");
    std::uint64_t w0 = 0, w1 = 0;
    pinned_tpcs(m, &w0, &w1);
    if ((w0 | w1) == 0) return bad("submit.grid", "0", "a pinned graph with no TPCs");
    SubmitMsg shape = m;
    for (int i = 0; i < 3; ++i) shape.grid[i] = shape.block[i] = 1;
    LITHOS_RETURN_IF_ERROR(validate_launch_shape(shape));
  } else if ((m.flags & kSubmitSized) != 0) {
    // `unit` carries the TPC count it ran on (a launch reported running is
    // one atom).
    if (m.unit < 1 || m.unit > kMaxSizedTpcs)
      return bad("submit.unit", m.unit,
                 "a sized launch's TPC count must be in [1, " + std::to_string(kMaxSizedTpcs) + "]");
    SubmitMsg shape = m;
    shape.unit = 1;
    LITHOS_RETURN_IF_ERROR(validate_launch_shape(shape));
  } else {
    LITHOS_RETURN_IF_ERROR(validate_launch_shape(m));
  }
  last_seq_[s] = m.seq;
  return Status::ok();
}

}  // namespace lithos::ipc
