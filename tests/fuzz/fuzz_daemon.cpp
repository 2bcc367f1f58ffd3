// Fuzz target: sequences of ACCEPTED messages into a real lithosd and its
// Engine, with the invariants the daemon and the lithos policy promise
// checked after every turn of the daemon's loop.
//
// Each input makes a fresh Daemon (daemon_harness.hpp) whose settings come
// from its first four bytes (quotas of two high-priority tenants, their
// pauses_best_effort, share_unowned, hp_holds_unowned, runs-free, the stolen
// atom bound, idle grace, burst gap, atom size), then is read as actions of
// up to 6 clients, each behaving as liblithos.so does:
//   connect (a Hello for one of the tenants; Welcome, channel), open and close
//   stream slots, launches of valid shapes (validate_launch_shape's rules;
//   clusters, cooperative, whole, CUDA graphs, pinned graphs) - reported
//   running with or without a marker by high-priority clients and by
//   best-effort ones while their channel says they run free, sent for grants
//   otherwise - syncs, the tracker's markers, doorbells, goodbye, a
//   disconnect without one; the GPU running each stream's work in order and
//   writing its completion markers; clients popping their grants and
//   launching those atoms; stale markers of a reused slot; the clock
//   advancing from microseconds to seconds; floods of more launches than a
//   ring holds; now and then one malformed message (its client must be
//   dropped, and only it). Opcodes: Run::action; LITHOS_FUZZ_TRACE=1 prints
//   an input's actions and messages.
// Messages are valid by construction, so the daemon must accept every one
// it pops: its `submits` counter must equal what the clients sent and it
// popped, `clients_dropped` the malformed ones.
//
// After every turn:
//  - every grant that arrived is one the client can use: a launch it sent
//    on an open stream, blocks in order without gaps up to the last (flagged
//    kGrantLast), whole-cluster and unit boundaries, one atom for
//    cooperative and indivisible launches, a non-empty set inside the GPU
//    that can hold one cluster, a marker above the launch's seq and above
//    every earlier marker of the stream;
//  - quotas (src/sched/policies/lithos.hpp): a best-effort atom granted at
//    this turn holds no TPC of a high-priority tenant active at this turn
//    (high-priority clients here report running launches only, so no
//    owner has queued work whose surplus may be lent). The one documented
//    exception is the safe-mask rule: a cluster or cooperative launch may be
//    widened into an owner's TPCs (never to the whole GPU while an owner is
//    active), and a pinned graph waits instead. A tenant with
//    pauses_best_effort = true that is active, or an "auto" one that is
//    probing (or paused and active), lets no best-effort atom start;
//  - high-priority clients' published allocations hold their own quota and
//    no other high-priority tenant's;
//  - bounded state: the Engine's open queues are the clients' open streams;
//    its pending launches per tenant at most those sent and not fully
//    granted; atoms in flight = running reports + grants - completions -
//    reclaimed; a full submit ring is drained by 256 a turn; the daemon's
//    queue of grants waiting for room in a client's ring (the status's
//    grants less the ring's) is empty unless the ring is full, and holds no
//    more than the tenant's atoms in flight;
//  - completions: a tenant whose clients' work all ran, markers landed,
//    has nothing in flight or pending two turns later;
//  - the status JSON parses, is valid UTF-8 and agrees with the Engine.
// At the end every client disconnects: nothing may stay pending or in
// flight, and no descriptor outlives the input.
#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "daemon_harness.hpp"
#include "sched/launch_fit.hpp"

namespace {

using namespace lithos;
using lithos::fuzz::DaemonUnderTest;
using lithos::fuzz::fail;

constexpr int kMaxClients = 6;
constexpr int kMaxActions = 4000;
const char* const kTenants[] = {"svc", "svc2", "train", ""};  // "": the default tenant

// The input, read a byte at a time; 0 once it is used up.
class Reader {
 public:
  Reader(const std::uint8_t* d, std::size_t n) : d_(d), n_(n) {}
  bool more() const { return at_ < n_; }
  std::uint8_t u8() { return at_ < n_ ? d_[at_++] : 0; }

 private:
  const std::uint8_t* d_;
  std::size_t n_;
  std::size_t at_ = 0;
};

// Totals over a run of the fuzzer, printed at exit: how many messages the
// daemon accepted, and how many clients it dropped (malformed on purpose).
struct Stats {
  std::uint64_t inputs = 0, clients = 0, launches = 0, accepted = 0, dropped = 0, grants = 0, quiet = 0, overflow = 0;
};
Stats& stats() {
  static Stats s;
  static const bool printed = [] {
    std::atexit([] {
      const Stats& t = stats();
      std::fprintf(stderr,
                   "fuzz_daemon: %llu inputs, %llu clients, %llu launches; %llu messages accepted, %llu clients "
                   "dropped (each for one malformed message); %llu grants checked; %llu quiet checks; at most %llu "
                   "grants waited for room\n",
                   static_cast<unsigned long long>(t.inputs), static_cast<unsigned long long>(t.clients),
                   static_cast<unsigned long long>(t.launches), static_cast<unsigned long long>(t.accepted),
                   static_cast<unsigned long long>(t.dropped), static_cast<unsigned long long>(t.grants),
                   static_cast<unsigned long long>(t.quiet), static_cast<unsigned long long>(t.overflow));
    });
    return true;
  }();
  (void)printed;
  return s;
}

struct Settings {
  int quota[2] = {0, 0};
  int pause[2] = {0, 0};  // 0 false, 1 true, 2 "auto"
  bool share_unowned = true, hp_holds_unowned = true, runs_free = true, stream_priorities = false;
  int max_stolen = 16;
  int idle_grace_us = 20, burst_gap_us = 0, atom_us = 500;
};

Settings read_settings(Reader& in) {
  Settings s;
  const std::uint8_t b0 = in.u8(), b1 = in.u8(), b2 = in.u8(), b3 = in.u8();
  s.share_unowned = (b0 & 1) == 0;
  s.hp_holds_unowned = (b0 & 2) == 0;
  s.runs_free = (b0 & 4) == 0;
  s.stream_priorities = (b0 & 8) != 0;
  static constexpr int kStolen[] = {16, 1, 2, 0};
  s.max_stolen = kStolen[(b0 >> 4) & 3];
  static constexpr int kGrace[] = {20, 0, 200, 2000};
  s.idle_grace_us = kGrace[(b0 >> 6) & 3];
  s.quota[0] = b1 % 41;
  s.quota[1] = b2 % (67 - s.quota[0]);
  // A high-priority tenant without a quota needs TPCs no quota holds
  // (validate() refuses the configuration otherwise; found here).
  if ((s.quota[0] == 0 || s.quota[1] == 0) && s.quota[0] + s.quota[1] == 66) --s.quota[s.quota[0] == 0 ? 1 : 0];
  s.pause[0] = b3 % 3;
  s.pause[1] = (b3 / 3) % 3;
  s.burst_gap_us = (b3 / 9) % 2 != 0 ? 500 : 0;
  s.atom_us = (b3 / 18) % 2 != 0 ? 100 : 500;
  return s;
}

std::string config_text(const Settings& s) {
  auto b = [](bool v) { return v ? std::string("true") : std::string("false"); };
  static const char* const kPause[] = {"false", "true", "\"auto\""};
  std::string t = "[daemon]\nsocket = \"@SOCKET@\"\nmps = \"off\"\n";
  t += "atom_us = " + std::to_string(s.atom_us) + "\n";
  t += "share_unowned = " + b(s.share_unowned) + "\n";
  t += "hp_holds_unowned = " + b(s.hp_holds_unowned) + "\n";
  t += "best_effort_runs_free = " + b(s.runs_free) + "\n";
  t += "stream_priorities = " + b(s.stream_priorities) + "\n";
  t += "max_stolen_atoms = " + std::to_string(s.max_stolen) + "\n";
  t += "idle_grace_us = " + std::to_string(s.idle_grace_us) + "\n";
  t += "burst_gap_us = " + std::to_string(s.burst_gap_us) + "\n";
  // The drops that follow the clock (a client that stopped, or made no
  // progress for 30 s) are off: this harness moves time in jumps, its
  // clients beat no heartbeat, and the model counts only malformed drops
  // (tests/daemon/hostile_test.cpp covers those two).
  t += "client_timeout_ms = 0\nprogress_timeout_ms = 0\n";
  for (int i = 0; i < 2; ++i) {
    t += std::string("[[tenant]]\nname = \"") + (i == 0 ? "svc" : "svc2") +
         "\"\npriority = \"high\"\nquota = " + std::to_string(s.quota[i]) +
         "\npauses_best_effort = " + kPause[s.pause[i]] + "\n";
  }
  t += "[[tenant]]\nname = \"train\"\npriority = \"best-effort\"\n";
  t += "[[tenant]]\nname = \"default\"\npriority = \"best-effort\"\n";
  return t;
}

// A launch sent for grants, until its last grant arrived.
struct Launch {
  std::uint64_t total = 0;  // blocks (1 for a graph: the Engine grants it whole)
  std::uint64_t next_lo = 0;
  std::uint32_t next_index = 0;
  std::uint32_t unit = 1;
  std::uint32_t cluster_ctas = 1;
  bool cooperative = false, indivisible = false, pinned = false;
};

struct GpuWork {
  std::uint64_t key = 0;  // the value written into the completion slot after it
  bool writes = false;    // whether a marker follows it
};

struct StreamModel {
  bool open = false;
  bool retired = false;  // closed with grants possibly still on their way: never reused
  std::uint64_t seq = 0;
  std::uint64_t last_marker = 0;
  std::map<std::uint64_t, Launch> pending;  // by seq
  std::uint64_t issued = 0;                 // the highest key of work put on the GPU
  bool stale = false;                       // its slot's value was set back: completions may go unseen
};

struct ClientModel {
  int sock = -1;
  ipc::Channel channel;
  std::uint32_t id = 0;
  sched::TenantId tenant = 0;  // index into the configuration's tenants
  bool high = false;
  std::array<StreamModel, ipc::kMaxStreams> streams{};
  std::map<std::uint32_t, std::deque<GpuWork>> gpu;  // per stream slot, in order
  struct Arrived {
    ipc::GrantMsg grant;
    bool stale = false;  // its stream was closed since: the client drops it
  };
  std::deque<Arrived> arrived;    // in the grant ring, checked, not yet popped
  std::uint64_t grants_seen = 0;  // ring index up to which grants were checked
  bool ring_was_full = false;     // at the end of the last turn: later grants may come from overflow
  std::uint64_t sent = 0;         // messages pushed
  std::size_t open_streams = 0;   // streams open
  std::size_t waiting = 0;        // launches on open streams that wait for grants

  ipc::ChannelLayout& layout() { return channel.layout(); }
};

class Run {
 public:
  Run(const Settings& s, Reader& in) : s_(s), in_(in), w_(config_text(s)) {
    device_ = DaemonUnderTest::device();
    // The lithos policy gives high-priority tenants contiguous quotas in
    // file order.
    quota_[0] = sched::TpcSet::range(0, s.quota[0]);
    quota_[1] = sched::TpcSet::range(s.quota[0], s.quota[0] + s.quota[1]);
    w_.on_turn = [this] {
      after_turn();
      check_quiet();
    };
    t0_ = w_.now();
  }

  void go() {
    for (int n = 0; n < kMaxActions && in_.more(); ++n) action();
    check_status();
    while (!clients_.empty()) disconnect(clients_.size() - 1, false);
    finish();
  }

 private:
  const sched::EngineState& state() { return w_.daemon().engine().state(); }
  Time now_t() const { return Time(Duration(static_cast<std::int64_t>(w_.now()))); }

  // ---- actions ---------------------------------------------------------------

  void action() {
    const std::uint8_t op = in_.u8();
    if (trace()) {
      static const char* const kNames[] = {"connect", "open",  "close",     "launch", "sync",    "gpu",
                                           "pop",     "time",  "goodbye",   "crash",  "tracker", "doorbell",
                                           "burst",   "stale", "malformed", "flood"};
      std::fprintf(stderr, "[%llu us] %s client %zu\n", static_cast<unsigned long long>((w_.now() - t0_) / 1000),
                   kNames[op & 15U], clients_.empty() ? 0 : ((op >> 4) & 7U) % clients_.size());
    }
    ClientModel* c = clients_.empty() ? nullptr : clients_[((op >> 4) & 7U) % clients_.size()].get();
    switch (op & 15U) {
      case 0: connect(in_.u8()); break;
      case 1:
        if (c) open_stream(*c, in_.u8());
        break;
      case 2:
        if (c) close_stream(*c, in_.u8());
        break;
      case 3:
        if (c) launch(*c, in_.u8(), 1);
        break;
      case 4:
        if (c) sync(*c, in_.u8());
        break;
      case 5:
        if (c) gpu_runs(*c, in_.u8(), 1 + in_.u8() % 4);
        break;
      case 6:
        if (c) pop_grants(*c, in_.u8());
        break;
      case 7: {
        static constexpr std::uint64_t kDt[] = {1'000,      5'000,       20'000,        50'000,
                                                100'000,    400'000,     1'000'000,     2'500'000,
                                                10'000'000, 100'000'000, 1'000'000'000, 3'000'000'000};
        turn(kDt[in_.u8() % std::size(kDt)]);
        return;
      }
      case 8:
        if (c) disconnect(index_of(c), true);
        break;
      case 9:
        if (c) disconnect(index_of(c), false);
        break;
      case 10:
        if (c) tracker_marker(*c, in_.u8());
        break;
      case 11:
        if (c) (void)::send(c->sock, "x", 1, MSG_DONTWAIT | MSG_NOSIGNAL);
        break;
      case 12:
        if (c) launch(*c, in_.u8(), 1 + in_.u8() % 48);
        break;
      case 13:
        if (c) stale_marker(*c, in_.u8(), in_.u8());
        break;
      case 14:
        if (c && (in_.u8() & 31U) == 0) malformed(index_of(c));  // one malformed op in 32
        break;
      case 15:
        // Now and then a flood: more launches than a ring holds, so that
        // grants wait in the daemon's queue for room.
        if (const std::uint8_t f = in_.u8(); c && (f & 3U) == 0) launch(*c, in_.u8(), 300 + 4 * f);
        break;
      default: break;
    }
    if ((op & 0x80U) == 0) turn(3'000);
  }

  std::size_t index_of(const ClientModel* c) const {
    for (std::size_t i = 0; i < clients_.size(); ++i) {
      if (clients_[i].get() == c) return i;
    }
    fail("no such client");
  }

  void connect(std::uint8_t which) {
    if (clients_.size() >= kMaxClients) return;
    const int t = which % 4;
    const int sock = w_.connect();
    const ipc::Hello h = fuzz::make_hello(ipc::HelloKind::kClient, kTenants[t], "fuzz_app");
    if (Status st = ipc::send_packet(sock, &h, sizeof h); !st.is_ok()) fail("send Hello: %s", st.to_string().c_str());
    joining_ = true;
    DaemonUnderTest::Answer a = w_.await_answer(sock);
    joining_ = false;
    ipc::Welcome wel;
    if (a.closed || a.bytes.size() != sizeof wel) fail("no Welcome for tenant '%s'", kTenants[t]);
    std::memcpy(&wel, a.bytes.data(), sizeof wel);
    if (wel.status != ipc::WelcomeStatus::kOk) fail("tenant '%s' refused: %s", kTenants[t], wel.message);
    auto ch = ipc::Channel::attach(a.fd);
    if (!ch) fail("attach: %s", ch.status().to_string().c_str());
    auto c = std::make_unique<ClientModel>();
    c->sock = sock;
    c->channel = std::move(ch).value();
    c->id = wel.client_id;
    c->tenant = wel.tenant_id;
    c->high = wel.tenant_class == ipc::TenantClass::kHigh;
    if (c->tenant != static_cast<sched::TenantId>(t)) fail("tenant '%s' got tenant %u", kTenants[t], c->tenant);
    clients_.push_back(std::move(c));
    after_turn();
    ++stats().clients;
  }

  // Pushes one message, waiting (turns of the daemon) while the ring is full.
  void push(ClientModel& c, const ipc::SubmitMsg& m) {
    if (trace()) {
      std::fprintf(stderr,
                   "  client %u: type %u flags 0x%x stream %u seq %llu grid %ux%ux%u block %ux%ux%u cluster %ux%ux%u "
                   "unit %u smem %u marker %u\n",
                   c.id, static_cast<unsigned>(m.type), static_cast<unsigned>(m.flags), m.stream,
                   static_cast<unsigned long long>(m.seq), m.grid[0], m.grid[1], m.grid[2], m.block[0], m.block[1],
                   m.block[2], static_cast<unsigned>(m.cluster[0]), static_cast<unsigned>(m.cluster[1]),
                   static_cast<unsigned>(m.cluster[2]), m.unit, m.smem, m.marker);
    }
    for (int tries = 0; !c.layout().submit.push(m); ++tries) {
      if (tries == 2) fail("the daemon does not drain a full submit ring");
      turn(1'000);
    }
    ++c.sent;
    ++pushes_;
  }

  // A stream slot: mostly the first eight (so that they are reused), now and
  // then one far up.
  static std::uint32_t slot_of(std::uint8_t b) { return (b & 0x80U) != 0 ? 200U + b % 56U : b % 8U; }

  void open_stream(ClientModel& c, std::uint8_t b) {
    const std::uint32_t s = slot_of(b);
    StreamModel& st = c.streams[s];
    if (st.open || st.retired) return;
    ipc::SubmitMsg m;
    m.type = ipc::SubmitType::kStreamOpen;
    m.stream = s;
    push(c, m);
    st = StreamModel{};
    st.open = true;
    ++c.open_streams;
    // As the client does: numbering goes on from what the slot's completion
    // value says (a reused slot keeps it).
    st.seq = c.layout().completed[s].load();
    st.last_marker = st.seq;
  }

  void close_stream(ClientModel& c, std::uint8_t b) {
    const std::uint32_t s = slot_of(b);
    StreamModel& st = c.streams[s];
    if (!st.open) return;
    ipc::SubmitMsg m;
    m.type = ipc::SubmitType::kStreamClose;
    m.stream = s;
    push(c, m);
    st.open = false;
    --c.open_streams;
    c.waiting -= st.pending.size();
    // Grants of its launches may still be in the ring or the daemon's
    // overflow queue: such a slot is not reused (a later launch could have
    // the same seq).
    st.retired = !st.pending.empty() || c.ring_was_full;
    st.pending.clear();
    for (auto& a : c.arrived) a.stale = a.stale || a.grant.stream == s;
  }

  void sync(ClientModel& c, std::uint8_t b) {
    const std::uint32_t s = slot_of(b);
    if (!c.streams[s].open) return;
    ipc::SubmitMsg m;
    m.type = ipc::SubmitType::kSync;
    m.stream = s;
    push(c, m);
  }

  // One launch shape from four bytes; valid by validate_launch_shape's rules.
  ipc::SubmitMsg shape(std::uint8_t g, std::uint8_t bl, std::uint8_t cl, std::uint8_t fl, std::uint8_t p0,
                       std::uint8_t p1) {
    ipc::SubmitMsg m;
    m.type = ipc::SubmitType::kLaunch;
    static constexpr std::uint8_t kClusterX[] = {1, 1, 1, 1, 2, 4, 8, 16};
    m.cluster[0] = kClusterX[cl & 7U];
    m.cluster[1] = (cl & 8U) != 0 && m.cluster[0] <= 8 ? 2 : 1;
    m.cluster[2] = 1;
    static constexpr std::uint32_t kGridX[] = {1,  2,   3,   4,   7,    8,    16,    33,
                                               66, 132, 264, 528, 1000, 4096, 65536, 1U << 20};
    m.grid[0] = kGridX[g & 15U] * m.cluster[0];
    m.grid[1] = ((g >> 4) & 3U) == 3 ? 2U * m.cluster[1] : m.cluster[1];
    m.grid[2] = (g & 0x40U) != 0 ? 3 : 1;
    static constexpr std::uint32_t kThreads[] = {1, 32, 64, 128, 256, 512, 1024, 96};
    m.block[0] = kThreads[bl & 7U];
    static constexpr std::uint8_t kRegs[] = {0, 32, 64, 255};
    m.regs = kRegs[(bl >> 3) & 3U];
    static constexpr std::uint32_t kSmem[] = {0,          1024,       16 * 1024,  48 * 1024,
                                              100 * 1024, 164 * 1024, 227 * 1024, 228 * 1024};
    m.smem = kSmem[(bl >> 5) & 7U];
    const std::uint64_t blocks = std::uint64_t{m.grid[0]} * m.grid[1] * m.grid[2];
    switch ((fl >> 5) & 3U) {
      case 0: m.unit = 1; break;
      case 1: m.unit = std::uint32_t{m.cluster[0]} * m.cluster[1]; break;
      case 2: m.unit = static_cast<std::uint32_t>(blocks); break;
      default: m.unit = blocks % 2 == 0 ? 2 : 1; break;
    }
    m.kernel = 0x1000 + (g ^ bl) % 6;
    if ((fl & 1U) != 0) m.flags |= ipc::kSubmitCooperative;
    if ((fl & 2U) != 0) m.flags |= ipc::kSubmitWhole;
    if ((fl & 4U) != 0) {
      m.flags |= ipc::kSubmitGraph;
      m.kernel = 0x9000 + (g & 3U);
      if ((fl & 8U) != 0 && m.cluster[0] * m.cluster[1] == 1) {
        // Pinned: the TPCs its descriptors were built with, never empty.
        const int lo = p0 % 66, n = 1 + p1 % 66;
        const sched::TpcSet set = sched::TpcSet::range(lo, std::min(66, lo + n));
        ipc::set_pinned_tpcs(m, set.word(0), set.word(1));
        m.unit = 1;  // its shape counts as one block
        m.block[1] = m.block[2] = 1;
      }
    }
    return m;
  }

  void launch(ClientModel& c, std::uint8_t b, int count) {
    const std::uint32_t s = slot_of(b);
    StreamModel& st = c.streams[s];
    if (!st.open) return;
    const std::uint8_t g = in_.u8(), bl = in_.u8(), cl = in_.u8(), fl = in_.u8();
    std::uint8_t p0 = 0, p1 = 0;
    if ((fl & 12U) == 12U) p0 = in_.u8(), p1 = in_.u8();
    for (int i = 0; i < count; ++i) {
      ipc::SubmitMsg m = shape(g, bl, cl, fl, p0, p1);
      m.stream = s;
      m.seq = ++st.seq;
      const bool running = c.high || (c.layout().header.flags.load() & ipc::kChannelRunsFree) != 0;
      if (running) {
        // Launched at once; a marker after it now and then (the client
        // writes one after a quiet stream's first launch).
        m.flags |= ipc::kSubmitRunning;
        // The TPCs it ran on (0: its allocation; above the allocation's size too).
        ipc::set_running_tpcs(m, m.unit % (ipc::kMaxTpcs + 1));
        const bool marker = (fl & 0x80U) != 0 && i == count - 1;
        if (marker) m.marker = static_cast<std::uint32_t>(m.seq);
        c.gpu[s].push_back({m.seq, marker});
        st.issued = std::max(st.issued, m.seq);
      } else {
        Launch l;
        const bool graph = (m.flags & ipc::kSubmitGraph) != 0;
        l.total = graph ? 1 : std::uint64_t{m.grid[0]} * m.grid[1] * m.grid[2];
        l.unit = graph ? 1 : m.unit;
        l.cluster_ctas = std::uint32_t{m.cluster[0]} * m.cluster[1] * m.cluster[2];
        l.cooperative = (m.flags & ipc::kSubmitCooperative) != 0;
        l.indivisible = (m.flags & (ipc::kSubmitWhole | ipc::kSubmitGraph)) != 0;
        l.pinned = (m.flags & ipc::kSubmitPinned) != 0;
        st.pending[m.seq] = l;
        ++c.waiting;
      }
      push(c, m);
      ++stats().launches;
    }
  }

  // The GPU runs the next `n` pieces of work of a stream; those followed by
  // a marker write it.
  void gpu_runs(ClientModel& c, std::uint8_t b, int n) {
    const std::uint32_t s = slot_of(b);
    auto& q = c.gpu[s];
    for (int i = 0; i < n && !q.empty(); ++i) {
      if (q.front().writes) c.layout().completed[s].store(q.front().key, std::memory_order_release);
      q.pop_front();
    }
  }

  // The client's tracker marks a stream whose launches were reported
  // without a marker: the stream's current seq, after its work.
  void tracker_marker(ClientModel& c, std::uint8_t b) {
    const std::uint32_t s = slot_of(b);
    if (!c.streams[s].open) return;
    c.gpu[s].push_back({c.streams[s].seq, true});
    c.streams[s].issued = std::max(c.streams[s].issued, c.streams[s].seq);
  }

  // A slot's value going back (old work of a reused slot writing its
  // marker late); the daemon must go by the highest value it saw.
  void stale_marker(ClientModel& c, std::uint8_t b, std::uint8_t back) {
    const std::uint32_t s = slot_of(b);
    const std::uint64_t v = c.layout().completed[s].load();
    c.layout().completed[s].store(v > back ? v - back : 0);
    c.streams[s].stale = true;
  }

  void pop_grants(ClientModel& c, std::uint8_t n) {
    const int limit = n == 0 ? 1 << 20 : n;
    ipc::GrantMsg g;
    for (int i = 0; i < limit && c.layout().grant.pop(&g); ++i) {
      if (c.arrived.empty()) fail("popped a grant that was never seen in the ring");
      const ClientModel::Arrived a = c.arrived.front();
      c.arrived.pop_front();
      if (std::memcmp(&g, &a.grant, sizeof g) != 0) fail("a grant changed in the ring");
      if (a.stale) continue;
      // The client launches the atom, then its marker.
      c.gpu[g.stream].push_back({g.marker, true});
      c.streams[g.stream].issued = std::max(c.streams[g.stream].issued, g.marker);
      StreamModel& st = c.streams[g.stream];
      st.seq = std::max(st.seq, g.marker);
    }
  }

  // The client leaves: a goodbye or not, then its socket closes. The
  // daemon must drop it at its next socket turn, after reading what it
  // said last.
  void disconnect(std::size_t i, bool goodbye) {
    if (goodbye) {
      ipc::SubmitMsg m;
      m.type = ipc::SubmitType::kGoodbye;
      push(*clients_[i], m);
    }
    leave(i, false);
    ::close(leaving_->sock);
    for (int t = 0; t < 4 && still_there(); ++t) turn(1'100'000);
    if (still_there()) fail("a client that closed its socket was not dropped");
    left();
  }

  // One malformed message: a launch on a stream that is not open, or seq 0.
  void malformed(std::size_t i) {
    ClientModel& c = *clients_[i];
    ipc::SubmitMsg m;
    m.type = ipc::SubmitType::kLaunch;
    m.stream = 255;
    m.seq = c.streams[255].open ? 0 : 1;
    push(c, m);
    leave(i, true);
    for (int t = 0; t < 8 && still_there(); ++t) turn(1'000);
    if (still_there()) fail("a malformed message did not drop its client");
    ::close(leaving_->sock);
    left();
  }

  void leave(std::size_t i, bool malformed) {
    leaving_ = std::move(clients_[i]);
    clients_.erase(clients_.begin() + static_cast<std::ptrdiff_t>(i));
    leaving_malformed_ = malformed;
    const daemon::DaemonCounters& k = w_.daemon().counters();
    gone_before_ = k.clients_gone + k.clients_dropped;
  }
  bool still_there() const {
    const daemon::DaemonCounters& k = w_.daemon().counters();
    return leaving_ && k.clients_gone + k.clients_dropped == gone_before_;
  }
  // Messages of the leaving client the daemon read and accepted.
  std::uint64_t leaving_accepted() const {
    if (!leaving_) return 0;
    const std::uint64_t popped = leaving_->channel.layout().submit.tail.load();
    // The bad message was read (and refused) once its client was dropped.
    return leaving_malformed_ && !still_there() ? popped - 1 : popped;
  }
  void left() {
    if (leaving_malformed_) ++malformed_;
    accepted_gone_ += leaving_accepted();
    leaving_.reset();
    after_turn();
  }

  // ---- a turn of the daemon and the checks after it -------------------------

  // One turn (after_turn runs inside, as after every turn the harness takes).
  void turn(std::uint64_t dt) {
    std::vector<std::uint64_t> depth;
    for (auto& c : clients_) depth.push_back(c->layout().submit.size());
    w_.step(dt);
    for (std::size_t i = 0; i < clients_.size(); ++i) {
      const std::uint64_t after = clients_[i]->layout().submit.size();
      if (after > (depth[i] > 256 ? depth[i] - 256 : 0)) fail("a turn read fewer than 256 waiting messages");
    }
  }

  void after_turn() {
    const sched::EngineState& st = state();
    const Time now = now_t();
    // Which high-priority tenants hold best effort back or own TPCs now.
    sched::TpcSet active_owned;
    bool be_held = false;
    for (int t = 0; t < 2; ++t) {
      const sched::TenantState& ts = st.tenants[static_cast<std::size_t>(t)];
      if (ts.pending_launches != 0) fail("high-priority tenant %d has queued launches (it only reports)", t);
      const bool active = st.active(ts.id, now);
      if (active) active_owned |= ts.owned;
      if (ts.owned != quota_[t]) fail("tenant %d owns %s", t, ts.owned.to_string().c_str());
      if (s_.pause[t] == 1 && active) be_held = true;
      if (s_.pause[t] == 2) {
        const auto r = w_.daemon().engine().pause_report(ts.id, now);
        if (r && (r->phase == "probing" || (r->phase == "paused" && active))) be_held = true;
      }
    }
    for (auto& c : clients_) check_grants(*c, active_owned, be_held);
    for (auto& c : clients_) check_allocation(*c);
    check_state();
  }

  void check_grants(ClientModel& c, const sched::TpcSet& active_owned, bool be_held) {
    auto& ring = c.layout().grant;
    const std::uint64_t head = ring.head.load(std::memory_order_acquire);
    const std::uint64_t tail = ring.tail.load();
    if (head < tail || head - tail > ipc::kRingSlots)
      fail("grant ring indices broken: head %llu tail %llu", static_cast<unsigned long long>(head),
           static_cast<unsigned long long>(tail));
    // Grants that arrived after a full ring may have waited in the daemon's
    // overflow queue: dispatched at an earlier turn.
    const bool this_turn = !c.ring_was_full;
    for (std::uint64_t k = c.grants_seen; k < head; ++k) {
      const ipc::GrantMsg g = ring.slots[k & (ipc::kRingSlots - 1)];
      check_grant(c, g, this_turn, active_owned, be_held);
    }
    c.grants_seen = head;
    c.ring_was_full = head - tail == ipc::kRingSlots;
  }

  void check_grant(ClientModel& c, const ipc::GrantMsg& g, bool this_turn, const sched::TpcSet& active_owned,
                   bool be_held) {
    if (g.type != ipc::GrantType::kGrant) fail("grant type %u", static_cast<unsigned>(g.type));
    if (g.stream >= ipc::kMaxStreams) fail("grant for stream %u", g.stream);
    StreamModel& st = c.streams[g.stream];
    if (!st.open) {  // closed since (the grant waited in the overflow queue): the client drops it
      c.arrived.push_back({g, true});
      return;
    }
    if (c.high) fail("a high-priority client got a grant (it never asks for one)");
    const auto it = st.pending.find(g.seq);
    if (it == st.pending.end())
      fail("client %u got a grant for seq %llu on stream %u, which waits for none", c.id,
           static_cast<unsigned long long>(g.seq), g.stream);
    Launch& l = it->second;
    const sched::TpcSet tpcs = sched::TpcSet::from_words(g.tpcs[0], g.tpcs[1]);
    const sched::TpcSet& dev = state().device_tpcs;
    if (tpcs.empty() || !dev.contains(tpcs)) fail("grant set %s is empty or outside the GPU", tpcs.to_string().c_str());
    if (((g.flags & ipc::kGrantWholeGpu) != 0) != (tpcs == dev)) fail("kGrantWholeGpu disagrees with the set");
    if (g.lo != l.next_lo || g.hi <= g.lo || g.hi > l.total || g.index != l.next_index)
      fail("grant [%llu, %llu) #%u of a %llu-block launch, expected to start at %llu #%u",
           static_cast<unsigned long long>(g.lo), static_cast<unsigned long long>(g.hi), g.index,
           static_cast<unsigned long long>(l.total), static_cast<unsigned long long>(l.next_lo), l.next_index);
    if (((g.flags & ipc::kGrantLast) != 0) != (g.hi == l.total)) fail("kGrantLast disagrees with the blocks");
    if ((l.cooperative || l.indivisible) && (g.lo != 0 || g.hi != l.total)) fail("an indivisible launch was split");
    if (g.hi != l.total && (g.hi % l.unit != 0 || g.hi % l.cluster_ctas != 0))
      fail("an atom ends at block %llu, inside a unit of %u or a cluster of %u", static_cast<unsigned long long>(g.hi),
           l.unit, l.cluster_ctas);
    if (g.marker <= g.seq || g.marker <= st.last_marker)
      fail("grant marker %llu not past seq or the last marker", static_cast<unsigned long long>(g.marker));
    // The safe-mask rule: a cluster fits in one GPC of the set.
    const sched::DeviceShape dev_shape = DaemonUnderTest::device();
    if (l.cluster_ctas > 1 && tpcs != dev &&
        static_cast<std::uint32_t>(dev_shape.topology.max_in_one_gpc(tpcs) * dev_shape.sms_per_tpc) < l.cluster_ctas)
      fail("a cluster of %u CTAs got %s, which no GPC holds one of", l.cluster_ctas, tpcs.to_string().c_str());
    if (this_turn) {
      if (be_held) fail("a best-effort atom started while a high-priority tenant pauses best effort");
      const bool needs = l.cluster_ctas > 1 || l.cooperative;
      if (!needs && tpcs.intersects(active_owned))
        fail("best-effort grant %s takes TPCs %s of an active high-priority quota (%s)", tpcs.to_string().c_str(),
             (tpcs & active_owned).to_string().c_str(), active_owned.to_string().c_str());
      if (needs && !active_owned.empty() && tpcs == dev)
        fail("a best-effort launch got the whole GPU while a high-priority tenant is active");
    }
    st.last_marker = g.marker;
    l.next_lo = g.hi;
    ++l.next_index;
    if (g.hi == l.total) {
      st.pending.erase(it);
      --c.waiting;
    }
    c.arrived.push_back({g, false});
    ++stats().grants;
  }

  void check_allocation(ClientModel& c) {
    if (!c.high) return;
    std::uint64_t w[2];
    if (!c.channel.read_allocation(w)) fail("the allocation's seqlock never settles");
    const sched::TpcSet alloc = sched::TpcSet::from_words(w[0], w[1]);
    const sched::TpcSet own = quota_[c.tenant], other = quota_[1 - c.tenant];
    if (alloc.empty()) fail("tenant %u's clients are told to run nowhere", c.tenant);
    if (!alloc.contains(own) || alloc.intersects(other))
      fail("tenant %u's allocation %s (its quota %s, the other's %s)", c.tenant, alloc.to_string().c_str(),
           own.to_string().c_str(), other.to_string().c_str());
  }

  void check_state() {
    const sched::EngineState& st = state();
    const daemon::DaemonCounters& k = w_.daemon().counters();
    // Every valid message read was accepted; only malformed ones drop.
    std::uint64_t accepted = accepted_gone_ + leaving_accepted();
    for (auto& c : clients_) accepted += c->layout().submit.tail.load();
    if (k.submits != accepted)
      fail("the daemon accepted %llu of %llu valid messages", static_cast<unsigned long long>(k.submits),
           static_cast<unsigned long long>(accepted));
    const bool dropping = leaving_malformed_ && leaving_ && !still_there();
    if (k.clients_dropped != malformed_ + (dropping ? 1 : 0)) fail("a client was dropped that sent nothing malformed");
    // Open queues are open streams; pending launches at most those sent and
    // not fully granted (once the daemon has read every message: the model
    // counts a stream open or closed when the client says so).
    std::vector<const ClientModel*> here;
    bool all_read = true;
    for (auto& c : clients_) here.push_back(c.get());
    if (still_there()) here.push_back(leaving_.get());
    for (const ClientModel* c : here) all_read = all_read && c->channel.layout().submit.size() == 0;
    std::size_t open_queues = 0, open_streams = 0;
    for (const sched::QueueState& q : st.queues) open_queues += q.closed ? 0U : 1U;
    for (const ClientModel* c : here) open_streams += c->open_streams;
    if (all_read && open_queues != open_streams)
      fail("%zu queues open for %zu open streams", open_queues, open_streams);
    std::uint64_t inflight = 0;
    for (const sched::TenantState& ts : st.tenants) {
      std::uint64_t waiting = 0;
      for (const ClientModel* c : here) waiting += c->tenant == ts.id ? c->waiting : 0U;
      if (all_read && ts.pending_launches > waiting)
        fail("tenant %u has %u pending launches, its clients wait for %llu", ts.id, ts.pending_launches,
             static_cast<unsigned long long>(waiting));
      inflight += ts.inflight_atoms;
    }
    if (inflight + k.completions + k.reclaimed_atoms != k.running_launches + k.grants)
      fail("atoms in flight %llu != running %llu + grants %llu - completions %llu - reclaimed %llu",
           static_cast<unsigned long long>(inflight), static_cast<unsigned long long>(k.running_launches),
           static_cast<unsigned long long>(k.grants), static_cast<unsigned long long>(k.completions),
           static_cast<unsigned long long>(k.reclaimed_atoms));
    // The status agrees (built and parsed at every 64th turn and before the
    // clients leave at the end: it costs more than a turn).
    if (++turns_ % 64 == 0) check_status();
  }

  // Nothing left to do: a tenant all of whose clients have every message
  // read, every grant popped and launched, no launch waiting, and every
  // piece of work on the GPU followed by a marker that landed, at two turns
  // in a row with nothing sent between, has nothing in flight: the daemon
  // saw every completion (not if a slot's value was set back).
  void check_quiet() {
    std::vector<bool> quiet(state().tenants.size(), true);
    for (auto& c : clients_) {
      bool q = c->arrived.empty() && !c->ring_was_full && c->waiting == 0 && c->layout().submit.size() == 0;
      for (std::uint32_t s = 0; q && s < ipc::kMaxStreams; ++s) {
        const StreamModel& st = c->streams[s];
        if (!st.open) continue;
        const auto g = c->gpu.find(s);
        q = !st.stale && (g == c->gpu.end() || g->second.empty()) && st.issued <= c->layout().completed[s].load();
      }
      if (!q) quiet[c->tenant] = false;
    }
    if (leaving_) quiet[leaving_->tenant] = false;
    const bool nothing_sent = pushes_ == pushes_at_last_turn_;
    for (std::size_t t = 0; t < quiet.size(); ++t) {
      const sched::TenantState& ts = state().tenants[t];
      if (!quiet[t] || quiet_last_turn_.size() <= t || !quiet_last_turn_[t] || !nothing_sent) continue;
      ++stats().quiet;
      if (ts.inflight_atoms != 0 || ts.pending_launches != 0)
        fail("tenant %zu has %u atoms in flight and %u launches pending, though its clients' work all completed", t,
             ts.inflight_atoms, ts.pending_launches);
    }
    quiet_last_turn_ = quiet;
    pushes_at_last_turn_ = pushes_;
  }

  void check_status() {
    const sched::EngineState& st = state();
    const bool leaving_here = still_there();
    const nlohmann::json j = fuzz::check_status_json(w_.daemon().status_json(w_.now()), "status_json");
    const std::size_t listed = j["clients"].size(), known = clients_.size() + (leaving_here ? 1 : 0);
    if (listed != known && !(joining_ && listed == known + 1))
      fail("the status lists %zu clients, %zu are connected", listed, known);
    // The daemon's per-client queue of grants waiting for room in the ring:
    // what it dispatched to the client (the status's "grants") less what
    // reached the ring. Empty unless the ring is full; never more than its
    // tenant's atoms in flight.
    for (const auto& jc : j["clients"]) {
      for (auto& c : clients_) {
        if (c->id != jc.value("id", 0U)) continue;
        const std::uint64_t dispatched = jc.value("grants", std::uint64_t{0});
        const std::uint64_t head = c->layout().grant.head.load();
        if (dispatched < head)
          fail("client %u has %llu grants in its ring of %llu dispatched", c->id, static_cast<unsigned long long>(head),
               static_cast<unsigned long long>(dispatched));
        const std::uint64_t waiting = dispatched - head;
        if (waiting > 0 && !c->ring_was_full)  // as the last turn left it (the client may have popped since)
          fail("%llu grants wait for room in client %u's ring, which has room",
               static_cast<unsigned long long>(waiting), c->id);
        if (waiting > st.tenants[c->tenant].inflight_atoms)
          fail("%llu grants wait for client %u, more than its tenant's %u atoms in flight",
               static_cast<unsigned long long>(waiting), c->id, st.tenants[c->tenant].inflight_atoms);
        stats().overflow = std::max<std::uint64_t>(stats().overflow, waiting);
      }
    }
    for (const auto& t : j["tenants"]) {
      const std::string name = t.value("name", "");
      for (const sched::TenantState& ts : st.tenants) {
        if (ts.spec.name == name && t.value("pending_launches", 0U) != ts.pending_launches)
          fail("the status says tenant %s has %u pending launches", name.c_str(), t.value("pending_launches", 0U));
      }
    }
  }

  void finish() {
    const daemon::DaemonCounters& k = w_.daemon().counters();
    stats().accepted += k.submits;
    stats().dropped += k.clients_dropped;
    const sched::EngineState& st = state();
    for (const sched::TenantState& ts : st.tenants) {
      if (ts.has_work()) fail("tenant %u has work after every client left", ts.id);
    }
    for (const sched::QueueState& q : st.queues) {
      if (!q.closed) fail("a queue is open after every client left");
    }
  }

  // LITHOS_FUZZ_TRACE=1: every action and what the daemon said, on stderr
  // (for reading a reproducer).
  static bool trace() {
    static const bool on = std::getenv("LITHOS_FUZZ_TRACE") != nullptr;
    return on;
  }

  Settings s_;
  Reader& in_;
  DaemonUnderTest w_;
  sched::TpcSet quota_[2];
  sched::DeviceShape device_;
  std::vector<std::unique_ptr<ClientModel>> clients_;
  std::unique_ptr<ClientModel> leaving_;  // its socket closed or its message malformed; until the daemon drops it
  bool leaving_malformed_ = false;
  std::uint64_t gone_before_ = 0;
  bool joining_ = false;  // a Hello is on its way: the daemon may list one client more
  std::uint64_t turns_ = 0;
  std::uint64_t t0_ = 0;
  std::uint64_t pushes_ = 0, pushes_at_last_turn_ = 0;
  std::vector<bool> quiet_last_turn_;
  std::uint64_t accepted_gone_ = 0;
  std::uint64_t malformed_ = 0;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const int fds_before = fuzz::count_fds();
  {
    Reader in(data, size);
    const Settings s = read_settings(in);
    Run run(s, in);
    run.go();
    ++stats().inputs;
  }
  if (fuzz::count_fds() != fds_before) fail("descriptor leak: %d before, %d after", fds_before, fuzz::count_fds());
  return 0;
}
