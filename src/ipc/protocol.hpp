// The wire between lithosd and its clients (liblithos.so in every
// application process, and `lithos status`).
//
// Two paths:
//  - Registration and control: a Unix SOCK_SEQPACKET socket. A client sends
//    Hello; the daemon checks the peer's credentials (SO_PEERCRED) against
//    the tenant it asks for and answers Welcome with the file descriptor of
//    the client's shared-memory channel (SCM_RIGHTS). The socket stays open
//    for the life of the client: its end (EOF) is how the daemon learns that
//    a client died, and how a client learns that the daemon did.
//  - The hot path: the channel, one memfd per client mapped by both sides,
//    holding two single-producer single-consumer rings of fixed-size
//    messages (submit: client -> daemon; grant: daemon -> client) and a page
//    of completion slots. The GPU itself writes the completion slots
//    (cuStreamWriteValue64 enqueued after the work, into the page mapped for
//    the device with cuMemHostRegister), so the daemon sees work end within
//    microseconds of the GPU reaching it, for a CUDA graph as for a kernel.
//
// Everything a client writes is untrusted: the daemon validates every
// message (SubmitValidator::check, validate.hpp) and every ring index
// (SpscRing::pop reports inconsistent ones through `corrupt`) and drops the
// client on the first malformed one. Layouts are fixed-size, trivially
// copyable, little-endian, and versioned by kVersion.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace lithos::ipc {

inline constexpr std::uint32_t kMagic = 0x4c495448;  // "LITH"
// 4: Welcome::gpu; 5: Welcome::slot_map; 6: ChannelHeader's client-written
// line (client_beat_ns, client_fault); 7: ChannelLayout::sizes (right-sizing
// table), kSubmitSized
inline constexpr std::uint32_t kVersion = 7;
inline constexpr std::uint32_t kMaxStreams = 256;  // completion slots per client
inline constexpr std::uint32_t kRingSlots = 1024;  // messages per ring (power of two)
inline constexpr std::size_t kNameBytes = 64;
inline constexpr std::size_t kGpuBytes = 48;        // "GPU-" and a UUID (40 characters), NUL-terminated
inline constexpr std::size_t kSlotMapBytes = 4096;  // a slot map's text (an H100's: ~1.5 KiB), NUL-terminated

// ---- registration (socket) --------------------------------------------------

enum class HelloKind : std::uint32_t {
  kClient = 1,  // an application process: wants a tenant and a channel
  kStatus = 2,  // `lithos status`: wants the daemon's status as JSON text
};

// Hello::flags of a client: what its CUDA context is, as the driver says
// (CU_DEVICE_ATTRIBUTE_MPS_ENABLED). A client that could not ask sends 0.
constexpr std::uint32_t kHelloMpsKnown = 1u << 0;   // the client asked the driver
constexpr std::uint32_t kHelloMpsClient = 1u << 1;  // its contexts are MPS clients
constexpr std::uint32_t kHelloFlags = kHelloMpsKnown | kHelloMpsClient;

struct Hello {
  std::uint32_t magic = kMagic;
  std::uint32_t version = kVersion;
  HelloKind kind = HelloKind::kClient;
  std::int32_t pid = 0;           // informational: SO_PEERCRED is what counts
  char tenant[kNameBytes] = {};   // tenant asked for ("" = by the config's match rules, else the default class)
  char program[kNameBytes] = {};  // the executable's short name (match rules, status)
  std::uint32_t flags = 0;        // kHello*
  std::uint32_t reserved = 0;
};

enum class WelcomeStatus : std::uint32_t {
  kOk = 0,
  kRefused = 1,   // this uid/gid may not claim that tenant (message says why)
  kNoTenant = 2,  // no such tenant and no default class
  kBadHello = 3,  // wrong magic or version
  kFull = 4,      // too many clients
};

enum class TenantClass : std::uint32_t { kHigh = 0, kBestEffort = 1 };

// The stream priority a launch goes with (sched::HwPriority, as the engine
// decided it): the client sets it on the launch's stream before launching.
enum class StreamPriority : std::uint32_t {
  kKeep = 0,     // the application's own (sched::HwPriority::kNormal)
  kHighest = 1,  // the context's greatest stream priority
  kLowest = 2,   // its least (the default of every stream)
};

struct Welcome {
  std::uint32_t magic = kMagic;
  std::uint32_t version = kVersion;
  WelcomeStatus status = WelcomeStatus::kOk;
  std::uint32_t client_id = 0;
  std::uint32_t tenant_id = 0;
  TenantClass tenant_class = TenantClass::kBestEffort;
  std::uint32_t quota = 0;                                    // TPCs guaranteed (high class)
  std::uint32_t channel_bytes = 0;                            // size of the channel the passed fd maps
  std::uint64_t daemon_epoch = 0;                             // changes when the daemon restarts
  StreamPriority immediate_priority = StreamPriority::kKeep;  // of launches made at once (hp, running free)
  std::uint32_t reserved = 0;
  char tenant[kNameBytes] = {};  // the tenant granted
  char message[128] = {};        // why, when refused
  // The GPU the daemon schedules, as cuDeviceGetUuid names it
  // ("GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"; "" when the daemon does not
  // know it: started without a GPU). A client sends only launches on this
  // GPU through the daemon; launches on any other run as if no daemon were
  // there, and a process that cannot see this GPU does not register.
  char gpu[kGpuBytes] = {};
  // That GPU's slot map, in the calibration cache's text format
  // (gpu::slot_map_serialize; "" when the daemon has none, or it would not
  // fit). A client with no map of this GPU of its own (no LITHOS_SLOT_MAP,
  // nothing in its cache: another user, a container) masks its launches
  // there with this one.
  char slot_map[kSlotMapBytes] = {};
};

// ---- the channel (shared memory) --------------------------------------------

// Client -> daemon.
enum class SubmitType : std::uint16_t {
  kStreamOpen = 1,   // stream slot `stream` is in use (flags: kHighPriorityStream)
  kStreamClose = 2,  // stream slot `stream` is free again
  kLaunch = 3,       // a launch (hp: already on the GPU; be: waits for grants)
  kSync = 4,         // the host synchronised `stream`: launch ordinals restart
  kGoodbye = 5,      // the client leaves (its socket closes next)
};

enum SubmitFlags : std::uint16_t {
  kSubmitCooperative = 1U << 0,  // grid-synchronising: one atom, resident at once
  kSubmitGraph = 1U << 1,        // a CUDA graph launch (kernel = graph identity; grid/block unused)
  kSubmitWhole = 1U << 2,        // cannot be split into atoms (not rewritten by the atomizer)
  kSubmitRunning = 1U << 3,      // already on the GPU (hp): account, do not grant
  kSubmitPinned = 1U << 4,       // with kSubmitGraph: grid/block carry the TPCs its kernels run on (pinned_tpcs)
  // With kSubmitRunning (not a graph): the launch ran on the first `unit`
  // TPCs of the published allocation, lowest numbers first (its entry in
  // ChannelLayout::sizes), not on all of it. `unit` is then that count, in
  // [1, 128]; a launch reported running is never split, so it carries no
  // atom unit.
  kSubmitSized = 1U << 5,
};

struct SubmitMsg {  // 64 bytes
  SubmitType type = SubmitType::kLaunch;
  std::uint16_t flags = 0;
  std::uint32_t stream = 0;  // the client's stream slot, < kMaxStreams
  std::uint64_t seq = 0;     // per-stream launch number, from 1, strictly increasing
  std::uint64_t kernel = 0;  // kernel identity (a hash of module and name; or of a graph)
  std::uint32_t grid[3] = {1, 1, 1};
  std::uint32_t block[3] = {1, 1, 1};
  std::uint32_t smem = 0;  // static + dynamic shared memory per block, bytes
  std::uint8_t regs = 0;   // registers per thread (0 = unknown; a thread has at most 255)
  std::uint8_t cluster[3] = {1, 1, 1};
  std::uint32_t unit = 1;    // atom boundaries must be multiples of this many blocks (clusters)
  std::uint32_t marker = 0;  // kSubmitRunning: the completion-slot value written after it (0: none)
};
static_assert(sizeof(SubmitMsg) == 64);

// A graph launch's pinned TPC set (kSubmitPinned): the graph's descriptors
// were built with it, so it runs there whatever it is granted. The two
// logical TPC words ride in grid[0..2] and block[0], unused by graphs.
inline void set_pinned_tpcs(SubmitMsg& m, std::uint64_t w0, std::uint64_t w1) {
  m.flags = static_cast<std::uint16_t>(m.flags | kSubmitPinned);
  m.grid[0] = static_cast<std::uint32_t>(w0);
  m.grid[1] = static_cast<std::uint32_t>(w0 >> 32);
  m.grid[2] = static_cast<std::uint32_t>(w1);
  m.block[0] = static_cast<std::uint32_t>(w1 >> 32);
}
inline void pinned_tpcs(const SubmitMsg& m, std::uint64_t* w0, std::uint64_t* w1) {
  *w0 = std::uint64_t{m.grid[0]} | (std::uint64_t{m.grid[1]} << 32);
  *w1 = std::uint64_t{m.grid[2]} | (std::uint64_t{m.block[0]} << 32);
}

// Daemon -> client.
enum class GrantType : std::uint16_t {
  kGrant = 1,    // run blocks [lo, hi) of launch `seq` on `tpcs`, then write `marker`
  kRelease = 2,  // the daemon no longer tracks launch `seq` (dropped): run what is left on the fallback set
};

enum GrantFlags : std::uint16_t {
  kGrantLast = 1U << 0,          // the launch's final atom
  kGrantWholeGpu = 1U << 1,      // no mask: every TPC (tpcs is the device's)
  kGrantLowPriority = 1U << 2,   // run at the lowest stream priority (StreamPriority::kLowest)
  kGrantHighPriority = 1U << 3,  // run at the highest (kHighest); neither: the application's own
};

struct GrantMsg {  // 64 bytes
  GrantType type = GrantType::kGrant;
  std::uint16_t flags = 0;
  std::uint32_t stream = 0;
  std::uint64_t seq = 0;           // the launch granted
  std::uint64_t lo = 0;            // first block (linear block index)
  std::uint64_t hi = 0;            // one past the last block
  std::uint64_t tpcs[2] = {0, 0};  // logical TPC words (sched::TpcSet::word)
  std::uint64_t marker = 0;        // the value to write into the stream's completion slot after this atom
  std::uint32_t index = 0;         // atom number within the launch
  std::uint32_t reserved = 0;
};
static_assert(sizeof(GrantMsg) == 64);

// A lock-free single-producer single-consumer ring in shared memory. `head`
// counts messages pushed, `tail` messages popped; both only grow. The
// consumer must not trust the producer's `head` (nor the producer the
// consumer's `tail`): check() validates them before use.
template <class T, std::uint32_t N>
struct SpscRing {
  static_assert((N & (N - 1)) == 0, "N must be a power of two");
  alignas(64) std::atomic<std::uint64_t> head{0};
  alignas(64) std::atomic<std::uint64_t> tail{0};
  alignas(64) T slots[N];

  // Producer side. False when full.
  bool push(const T& m) noexcept {
    std::uint64_t t = tail.load(std::memory_order_acquire);
    return push(m, &t);
  }
  // The same with the consumer's `tail` as last read, kept by the producer
  // in its own memory (start it at 0): `tail` is read again only when the
  // ring looks full, so a push does not pull the line the consumer writes at
  // every pop. A consumer that moves `tail` past `head` is noticed only then.
  bool push(const T& m, std::uint64_t* seen_tail) noexcept {
    const std::uint64_t h = head.load(std::memory_order_relaxed);
    if (h - *seen_tail >= N) {
      *seen_tail = tail.load(std::memory_order_acquire);
      if (h - *seen_tail >= N) return false;
    }
    slots[h & (N - 1)] = m;
    head.store(h + 1, std::memory_order_release);
    return true;
  }
  // Consumer side. False when empty or when the indices are inconsistent
  // (then *corrupt is set, if given: the peer is not to be trusted).
  bool pop(T* out, bool* corrupt = nullptr) noexcept {
    const std::uint64_t t = tail.load(std::memory_order_relaxed);
    const std::uint64_t h = head.load(std::memory_order_acquire);
    if (h == t) return false;
    if (h < t || h - t > N) {
      if (corrupt != nullptr) *corrupt = true;
      return false;
    }
    *out = slots[t & (N - 1)];
    tail.store(t + 1, std::memory_order_release);
    return true;
  }
  std::uint64_t size() const noexcept {
    const std::uint64_t h = head.load(std::memory_order_acquire);
    const std::uint64_t t = tail.load(std::memory_order_acquire);
    return h >= t ? h - t : 0;
  }
};

enum ChannelFlags : std::uint32_t {
  kChannelHighPriority = 1U << 0,  // the tenant is high priority: launches go out at once
  kChannelDaemonGone = 1U << 1,    // set by the daemon when it shuts down cleanly
  // A best-effort tenant that runs free (sched::Policy::runs_free): its
  // launches go out at once on the published allocation and are reported
  // after, as a high-priority tenant's. Set after the allocation is
  // published, cleared before it changes back.
  kChannelRunsFree = 1U << 2,
  // Set by the daemon while it sleeps in poll() (nothing in flight, nothing
  // to do for 2 ms), which sees sockets but not the rings: a client that
  // pushes a message then clears the flag and writes one byte to its socket,
  // so that the daemon wakes at once rather than at the end of its poll (up
  // to 1 ms). A doorbell missed in a race costs that millisecond, no more.
  kChannelDaemonIdle = 1U << 3,
  // Set by the daemon on the channel of a client whose work a fatal GPU
  // fault destroyed (its own, or under MPS another client's): the daemon
  // schedules nothing more of it; its launches go out as they are (the
  // driver fails them) and it never registers again.
  kChannelFaulted = 1U << 4,
};

struct ChannelHeader {
  std::uint32_t magic = kMagic;
  std::uint32_t version = kVersion;
  std::uint32_t bytes = 0;  // size of the whole channel
  std::uint32_t client_id = 0;
  std::uint32_t tenant_id = 0;
  std::atomic<std::uint32_t> flags{0};
  std::uint64_t daemon_epoch = 0;
  std::atomic<std::uint64_t> heartbeat_ns{0};  // daemon's monotonic clock, refreshed while it runs
  // The tenant's current allocation (high class: where its launches go),
  // under a seqlock: odd `alloc_seq` = being written. Words 0-1: where a
  // launch goes now; words 2-3: where a launch whose set lasts goes (a CUDA
  // graph, whose descriptors keep the set of the launch that built them for
  // every later replay): a set that does not depend on what other tenants
  // run at that moment (sched::Policy::immediate_set).
  std::atomic<std::uint64_t> alloc_seq{0};
  std::atomic<std::uint64_t> alloc[4] = {0, 0, 0, 0};
  // Where this client runs if the daemon goes away (best effort: its quota
  // or the TPCs no quota holds; never the whole GPU).
  std::atomic<std::uint64_t> fallback[2] = {0, 0};
  // Per stream slot: the last launch seq the client submitted (hp: launched).
  std::atomic<std::uint64_t> launched[kMaxStreams] = {};

  // ---- written by the client (untrusted), on a cache line of its own so
  // that its writes do not pull the allocation's line away from it.
  // Its CLOCK_MONOTONIC time, refreshed by its tracker thread at least once
  // a millisecond or so while the process runs (0: not yet). A client whose
  // beat goes stale while it holds atoms has stopped (SIGSTOP, a debugger,
  // a hung process): the daemon reclaims them after a bound.
  alignas(64) std::atomic<std::uint64_t> client_beat_ns{0};
  // The first sticky (context-destroying) CUresult the client's process
  // saw on this GPU, and when (CLOCK_MONOTONIC); 0: none. Set once.
  std::atomic<std::uint32_t> client_fault{0};
  std::uint32_t client_reserved = 0;
  std::atomic<std::uint64_t> client_fault_ns{0};
};

// The right-sizing table (sched::SizeTable): per kernel and grid, how many
// TPCs of its published allocation (the first ones, lowest numbers first) a
// high-priority client launches it on. Written only by the daemon; read
// lock-free by the client. A key lives in the first slot it was given
// within kSizeWindow slots of its home (size_slot_home) and stays there: a
// slot, once used, is rewritten for the same key only, never emptied, so a
// reader stops at the first empty slot. Each slot has its own seqlock
// (`seq`: 0 empty, odd being written, even and non-zero stable).
inline constexpr std::uint32_t kSizeSlots = 512;  // power of two
inline constexpr std::uint32_t kSizeWindow = 8;

struct SizeSlot {  // 32 bytes
  std::atomic<std::uint64_t> seq{0};
  std::atomic<std::uint64_t> kernel{0};
  std::atomic<std::uint64_t> grid_xy{0};      // grid x | y << 32
  std::atomic<std::uint64_t> grid_z_tpcs{0};  // grid z | tpcs << 32 (tpcs 0: the whole allocation)
};
static_assert(sizeof(SizeSlot) == 32);

// One entry as a reader sees it.
struct SizeEntry {
  std::uint64_t kernel = 0;
  std::uint32_t grid[3] = {1, 1, 1};
  std::uint32_t tpcs = 0;
};

inline std::uint32_t size_slot_home(std::uint64_t kernel, const std::uint32_t grid[3]) {
  std::uint64_t h = kernel ^ 0x9e3779b97f4a7c15ULL;
  for (int i = 0; i < 3; ++i) {
    h ^= grid[i];
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
  }
  return static_cast<std::uint32_t>(h) & (kSizeSlots - 1);
}

// Layout of one channel (offsets from the start of the mapping). The
// completion page starts on its own 4 KiB page so that the client can
// register exactly it with cuMemHostRegister.
struct ChannelLayout {
  ChannelHeader header;
  SpscRing<SubmitMsg, kRingSlots> submit;
  SpscRing<GrantMsg, kRingSlots> grant;
  alignas(64) SizeSlot sizes[kSizeSlots];                           // written by the daemon only
  alignas(4096) std::atomic<std::uint64_t> completed[kMaxStreams];  // written by the GPU
};

}  // namespace lithos::ipc
