// Fuzz target for what the daemon reads from a client's channel: the submit
// ring's indices and the messages themselves. Run by tests/cubin/fuzz_main.cpp
// (bounded time in CI, ASan + UBSan in the sanitizer build).
//
// Every input is used three ways:
//  1. as a stream of raw 64-byte SubmitMsg (the last one zero-padded): the
//     seeds (fuzz_ipc_seeds.cpp) are valid streams, so that mutations land
//     next to the rules' boundaries;
//  2. as the seed of a generator of long streams of nearly valid messages
//     (values at and around every limit, seq just above/at/below the last);
//  3. as head/tail values and slot contents written into a real Channel's
//     submit ring, popped the way the daemon does (and pushed, for the
//     producer's side of the checks), the popped messages validated in turn.
// SubmitValidator's verdict is compared with an independent model of the
// rules (below): a message accepted that breaks a rule, or refused that
// keeps them all, aborts, as does a ring that pops past inconsistent indices.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <utility>

#include "ipc/channel.hpp"
#include "ipc/protocol.hpp"
#include "ipc/validate.hpp"

namespace {

using namespace lithos::ipc;

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "fuzz_ipc: %s\n", what.c_str());
  std::abort();
}

std::string describe(const SubmitMsg& m) {
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "type=%u flags=0x%x stream=%u seq=%llu grid=%ux%ux%u block=%ux%ux%u cluster=%ux%ux%u unit=%u smem=%u",
                static_cast<unsigned>(m.type), static_cast<unsigned>(m.flags), m.stream,
                static_cast<unsigned long long>(m.seq), m.grid[0], m.grid[1], m.grid[2], m.block[0], m.block[1],
                m.block[2], static_cast<unsigned>(m.cluster[0]), static_cast<unsigned>(m.cluster[1]),
                static_cast<unsigned>(m.cluster[2]), m.unit, m.smem);
  return buf;
}

// The rules of validate.hpp, written again without looking at how
// validate.cpp computes them: products in double (exact up to 2^53, and
// rounding is monotone, so a comparison with 2^40 or 1024 is exact), state
// in plain arrays.
class Model {
 public:
  bool accepts(const SubmitMsg& m) {
    const unsigned type = static_cast<unsigned>(m.type);
    if (type < 1 || type > 6 || bye_ || m.stream >= kMaxStreams || (m.flags & ~0x3fU) != 0) return false;
    const std::uint32_t s = m.stream;
    switch (type) {
      case 1:
        if (open_[s]) return false;
        open_[s] = true;
        last_[s] = 0;
        return true;
      case 2:
        if (!open_[s]) return false;
        open_[s] = false;
        return true;
      case 4: return open_[s];
      case 5: bye_ = true; return true;
      case 6: {
        // A sample: no flags, a launch already reported, 1 ns .. 10 s.
        const std::uint64_t ns =
            m.grid[0] + m.grid[1] * 4294967296.0 <= 1e10 ? (std::uint64_t{m.grid[1]} << 32) | m.grid[0] : 0;
        return open_[s] && m.flags == 0 && m.seq >= 1 && m.seq <= last_[s] && ns >= 1;
      }
      default: break;
    }
    if (!open_[s] || m.seq <= last_[s]) return false;
    // Timed (0x20): only a running launch (0x8), never a graph (0x2).
    if ((m.flags & 0x20U) != 0 && ((m.flags & 0x8U) == 0 || (m.flags & 0x2U) != 0)) return false;
    if ((m.flags & 0x10U) != 0) {
      // Pinned (graphs only): grid[0..2] and block[0] hold the TPC set,
      // which must not be empty; the shape is checked as 1x1x1.
      if ((m.flags & 0x2U) == 0 || (m.grid[0] | m.grid[1] | m.grid[2] | m.block[0]) == 0) return false;
      SubmitMsg one = m;
      for (int i = 0; i < 3; ++i) one.grid[i] = one.block[i] = 1;
      if (!shape_ok(one)) return false;
    } else if (!shape_ok(m)) {
      return false;
    }
    last_[s] = m.seq;
    return true;
  }

  static bool shape_ok(const SubmitMsg& m) {
    double grid = 1, block = 1, cluster = 1;
    for (int i = 0; i < 3; ++i) {
      if (m.grid[i] < 1 || m.block[i] < 1 || m.cluster[i] < 1) return false;
      if (m.grid[i] % m.cluster[i] != 0) return false;
      grid *= m.grid[i];
      block *= m.block[i];
      cluster *= m.cluster[i];
    }
    // A running report's `unit` is the TPC count it used (0 to kMaxTpcs).
    const bool unit_ok = (m.flags & kSubmitRunning) != 0 ? m.unit <= kMaxTpcs : m.unit >= 1 && m.unit <= grid;
    return grid <= 1099511627776.0 && block <= 1024 && cluster <= 16 && unit_ok && m.smem <= 228 * 1024;
  }

  bool open(std::uint32_t s) const { return s < kMaxStreams && open_[s]; }
  std::uint64_t last(std::uint32_t s) const { return s < kMaxStreams ? last_[s] : 0; }

 private:
  bool open_[kMaxStreams] = {};
  std::uint64_t last_[kMaxStreams] = {};
  bool bye_ = false;
};

// One validator and its model, fed the same messages.
struct Checked {
  SubmitValidator v;
  Model model;
  std::uint64_t accepted = 0;

  void feed(const SubmitMsg& m) {
    const lithos::Status s = v.check(m);
    const bool want = model.accepts(m);
    if (s.is_ok() && !want) fail("accepted a message breaking the rules: " + describe(m));
    if (!s.is_ok() && want) fail("refused a valid message (" + s.message() + "): " + describe(m));
    if (!s.is_ok() && (s.code() != lithos::StatusCode::kInvalidArgument || s.message().rfind("submit.", 0) != 0))
      fail("rejection does not name the field: " + s.to_string());
    if (s.is_ok()) ++accepted;
  }
};

// Reads the input as little-endian values, cycling when it runs out.
class Bytes {
 public:
  Bytes(const std::uint8_t* d, std::size_t n) : d_(d), n_(n) {}
  std::uint8_t u8() { return n_ == 0 ? 0 : d_[at_++ % n_]; }
  std::uint64_t u64() {
    std::uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v |= static_cast<std::uint64_t>(u8()) << (8 * i);
    return v;
  }

 private:
  const std::uint8_t* d_;
  std::size_t n_;
  std::size_t at_ = 0;
};

// 1. The input as raw messages.
void fuzz_raw_stream(const std::uint8_t* data, std::size_t size) {
  Checked c;
  for (std::size_t off = 0; off < size; off += sizeof(SubmitMsg)) {
    unsigned char bytes[sizeof(SubmitMsg)] = {};  // zero-padded
    std::memcpy(bytes, data + off, std::min(sizeof bytes, size - off));
    SubmitMsg m;
    std::memcpy(&m, bytes, sizeof m);
    c.feed(m);
  }
}

// 2. Long generated streams of nearly valid messages.
template <class T, std::size_t N>
T pick(std::mt19937_64& rng, const T (&values)[N]) {
  return values[rng() % N];
}

void fuzz_generated(const std::uint8_t* data, std::size_t size) {
  std::uint64_t h = 1469598103934665603ULL;  // FNV-1a of the input
  for (std::size_t i = 0; i < size; ++i) h = (h ^ data[i]) * 1099511628211ULL;
  std::mt19937_64 rng(h);
  static constexpr std::uint32_t kGrid[] = {0,  1,   2,    3,     4,        7,          8,
                                            16, 132, 1024, 65535, 1U << 20, 0x7fffffff, 0xffffffff};
  static constexpr std::uint32_t kBlock[] = {0, 1, 2, 3, 32, 64, 128, 256, 512, 1024, 1025, 0xffffffff};
  static constexpr std::uint8_t kCluster[] = {0, 1, 1, 1, 2, 3, 4, 8, 16, 17, 255};
  static constexpr std::uint32_t kSmem[] = {0, 1024, 48 * 1024, 228 * 1024, 228 * 1024 + 1, 0xffffffff};
  static constexpr std::uint16_t kFlags[] = {0, 0, 1, 2, 4, 8, 15, 16, 18, 31, 32, 0x8000, 0xffff};
  static constexpr std::uint32_t kStream[] = {0, 0, 1, 1, 2, 3, 255, 256, 0xffffffff};
  Checked c;
  const int n = 256 + static_cast<int>(rng() % 4096);
  for (int i = 0; i < n; ++i) {
    SubmitMsg m;
    const unsigned t = static_cast<unsigned>(rng() % 16);
    // Mostly launches; every other type, and unknown ones, now and then.
    m.type = static_cast<SubmitType>(t < 9 ? 3 : t < 11 ? 1 : t < 12 ? 2 : t < 13 ? 4 : t < 14 ? 5 : t < 15 ? 0 : 6);
    if (rng() % 512 == 0) m.type = static_cast<SubmitType>(rng());
    m.stream = pick(rng, kStream);
    if (rng() % 64 == 0) m.stream = static_cast<std::uint32_t>(rng());
    if (rng() % 4 == 0) m.flags = pick(rng, kFlags);
    const std::uint64_t last = c.model.last(m.stream);
    switch (rng() % 8) {
      case 0: m.seq = last; break;
      case 1: m.seq = last - 1; break;  // wraps to 2^64-1 at 0: valid then
      case 2: m.seq = rng(); break;
      case 3: m.seq = last + 1 + rng() % 1000; break;
      default: m.seq = last + 1; break;
    }
    for (int d = 0; d < 3; ++d) {
      m.cluster[d] = rng() % 3 == 0 ? pick(rng, kCluster) : 1;
      m.grid[d] = d == 0 || rng() % 2 == 0 ? pick(rng, kGrid) : 1;
      // Mostly a multiple of the cluster's dim, as a real launch is.
      if (rng() % 4 != 0 && m.cluster[d] != 0)
        m.grid[d] = static_cast<std::uint32_t>(m.cluster[d]) * (1 + static_cast<std::uint32_t>(rng() % 64));
      m.block[d] = d == 0 || rng() % 3 == 0 ? pick(rng, kBlock) : 1;
    }
    const double blocks = static_cast<double>(m.grid[0]) * m.grid[1] * m.grid[2];
    switch (rng() % 6) {
      case 0: m.unit = 0; break;
      case 1: m.unit = blocks < 4e9 ? static_cast<std::uint32_t>(blocks) : 0xffffffff; break;
      case 2: m.unit = blocks < 4e9 ? static_cast<std::uint32_t>(blocks) + 1 : 0xffffffff; break;
      case 3: m.unit = static_cast<std::uint32_t>(rng()); break;
      default: m.unit = 1; break;
    }
    m.smem = pick(rng, kSmem);
    m.regs = static_cast<std::uint8_t>(rng());
    c.feed(m);
  }
}

// 3. The submit ring of a real channel, with indices from the input.
void fuzz_ring(const std::uint8_t* data, std::size_t size) {
  static Channel ch = [] {
    auto made = Channel::create(1, 1, 1);
    if (!made.is_ok()) fail("Channel::create: " + made.status().to_string());
    return std::move(made).value();
  }();
  auto& ring = ch.layout().submit;
  // Every input starts from the same ring, so that a failure replays from it alone.
  std::memset(static_cast<void*>(ring.slots), 0, sizeof ring.slots);
  Bytes in(data, size);
  Checked c;
  for (int round = 0; round < 4; ++round) {
    // The peer's view of the indices: raw 64-bit values, or a tail with a
    // head near it (empty, full, one past full, behind).
    const std::uint64_t tail = in.u64();
    const std::uint64_t head =
        in.u8() % 2 == 0 ? in.u64() : tail + static_cast<std::uint64_t>(in.u8() % 8) + kRingSlots - 4;
    ring.tail.store(tail);
    ring.head.store(head);
    // Slot contents from the input (what a client may scribble there).
    for (int i = 0; i < 4; ++i) {
      auto* raw = reinterpret_cast<unsigned char*>(&ring.slots[in.u64() % kRingSlots]);
      for (std::size_t b = 0; b < sizeof(SubmitMsg); ++b) raw[b] = in.u8();
    }
    const bool consistent = head >= tail && head - tail <= kRingSlots;
    const std::uint64_t available = consistent ? head - tail : 0;
    std::uint64_t popped = 0;
    bool corrupt = false;
    SubmitMsg m;
    // At most N + 2 pops: a ring that pops more is broken, not slow.
    for (std::uint64_t i = 0; i < kRingSlots + 2 && ring.pop(&m, &corrupt); ++i) {
      const SubmitMsg& slot = ring.slots[(tail + popped) & (kRingSlots - 1)];
      if (std::memcmp(&m, &slot, sizeof m) != 0) fail("popped a message other than the slot's");
      ++popped;
      c.feed(m);
    }
    if (popped != available)
      fail("popped " + std::to_string(popped) + " of " + std::to_string(available) + " messages (head " +
           std::to_string(head) + ", tail " + std::to_string(tail) + ")");
    if (corrupt != !consistent)
      fail("corrupt flag " + std::to_string(corrupt) + " for head " + std::to_string(head) + ", tail " +
           std::to_string(tail));
    if (ring.tail.load() != tail + popped) fail("tail moved by other than the messages popped");

    // The producer's side with the same kind of indices: never more than N
    // in flight, and a push lands in slot head & (N - 1).
    const std::uint64_t t2 = in.u64();
    const std::uint64_t h2 =
        in.u8() % 2 == 0 ? in.u64() : t2 + static_cast<std::uint64_t>(in.u8() % 8) + kRingSlots - 4;
    ring.tail.store(t2);
    ring.head.store(h2);
    SubmitMsg p;
    p.seq = in.u64();
    const bool pushed = ring.push(p);
    if (pushed != (h2 - t2 < kRingSlots)) fail("push ignored the ring's capacity");
    if (pushed && (ring.head.load() != h2 + 1 || ring.slots[h2 & (kRingSlots - 1)].seq != p.seq))
      fail("push wrote elsewhere than head");
  }
  ring.head.store(0);
  ring.tail.store(0);
}

// Hello: whatever arrives, names come out terminated, and an accepted one
// has no control characters.
void fuzz_hello(const std::uint8_t* data, std::size_t size) {
  Hello h;
  if (size > 0) std::memcpy(&h, data, std::min(sizeof h, size));
  if (!validate_hello(h).is_ok()) return;  // refused before or after the names: never used
  if (h.tenant[kNameBytes - 1] != '\0' || h.program[kNameBytes - 1] != '\0') fail("a name is not terminated");
  for (const char* name : {h.tenant, h.program}) {
    for (std::size_t i = 0; name[i] != '\0'; ++i) {
      const auto ch = static_cast<unsigned char>(name[i]);
      if (ch < 0x20 || ch == 0x7f) fail("accepted a name with a control character");
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  fuzz_raw_stream(data, size);
  fuzz_generated(data, size);
  fuzz_ring(data, size);
  fuzz_hello(data, size);
  return 0;
}
