// A discrete-event model of the GPU's hardware side: streams, the block
// scheduler and TPCs. It knows nothing of policies; it runs the atoms the
// scheduling core dispatches, as the hardware would.
//
// Model (each rule is a simplification, chosen to keep what matters for
// sharing and tail latency):
// - Each stream runs its atoms in order. An atom becomes ready at
//   max(dispatch + launch_latency, predecessor's end + stream_gap), plus
//   per_atom_cost when its launch was split (the extra launch and
//   early-exiting blocks).
// - A ready atom issues its blocks in groups: whenever TPCs in its allowed
//   set are free, it takes up to ceil(remaining / blocks_per_tpc) of them and
//   runs that many blocks for one block time. A TPC holds blocks of one atom
//   at a time (no co-residence of different kernels on one SM).
// - Ready atoms are served by hardware priority (unless the config says the
//   GPU honours none), then in the order they became ready: an earlier kernel keeps getting TPCs before a later one of
//   equal priority
//   (head-of-line blocking), a higher-priority one takes TPCs as they free
//   up. A running block is never preempted.
// - After its last block, an atom spends its serial time (the b of
//   l = m/t + b) holding no TPC; then it is complete and its stream moves on.
// So a kernel of B blocks alone on t TPCs takes about
//   ceil(B / (t * blocks_per_tpc)) * block_time + serial,
// i.e. m/t + b with wave quantisation.
// - Memory: a kernel may use a share m of the device's memory bandwidth
//   alone (HwAtom::mem_share), where it fills F TPCs (its blocks over
//   blocks_per_tpc, at most all). Running on t TPCs it asks for
//   m * min(1, 2t / F): in full on half its own footprint or more
//   (memory-bound kernels saturate the bandwidth well before every SM), in
//   proportion below. While the kernels running ask for D > 1 in all, each with m > 0
//   progresses at 1 / ((1 - m) + m * D) of its speed (its memory-bound part
//   stretched by D, the rest not), re-rated whenever a block group starts
//   or ends. TPC masks do not divide bandwidth: two memory-bound kernels on
//   disjoint TPCs still slow each other. With every m = 0 (the default)
//   nothing changes.
#pragma once

#include <cstdint>
#include <queue>
#include <vector>

#include "common/ring_queue.hpp"
#include "common/time.hpp"
#include "sched/engine.hpp"
#include "sched/tpc_set.hpp"
#include "sched/types.hpp"
#include "sim/scenario.hpp"

namespace lithos::sim {

// One atom as the hardware runs it.
struct HwAtom {
  sched::AtomId atom = 0;
  std::uint32_t stream = 0;
  sched::TpcSet allowed;
  sched::HwPriority priority = sched::HwPriority::kNormal;
  std::uint64_t blocks = 0;
  int blocks_per_tpc = 1;
  Duration block_time{};   // one block (one wave on its TPCs)
  Duration serial{};       // tail that holds no TPC
  bool split = false;      // pays per_atom_cost
  double mem_share = 0.0;  // of the device's memory bandwidth, alone on every TPC
};

struct HwCompletion {
  sched::AtomId atom = 0;
  Time start{};  // first block issued
  Time end{};    // serial tail done
};

class GpuModel {
 public:
  GpuModel(const GpuModelConfig& config, std::uint32_t streams);

  // An atom handed to the hardware at `now` (`now` must not be earlier than
  // the model's time).
  void submit(const HwAtom& atom, Time now);
  // Time of the next internal event, kTimeNever when idle.
  Time next_event_time() const;
  // Processes internal events in time order up to `limit`, stopping early
  // after the first time stamp at which atoms completed (appended to
  // `done`), so that the caller can react then. Returns the model's time:
  // that time stamp, or `limit` when nothing completed.
  Time advance(Time limit, std::vector<HwCompletion>& done);

  // Busy TPC-time inside [window_start, window_end), in TPC-nanoseconds.
  void set_window(Time start, Time end) {
    window_start_ = start;
    window_end_ = end;
  }
  double busy_tpc_ns() const { return busy_tpc_ns_; }

  // Invariant checks, for tests: after every scheduling round, no ready atom
  // with blocks left had a free TPC in its allowed set; no event ran earlier
  // than the one before it.
  std::uint64_t conservation_violations() const { return conservation_violations_; }
  std::uint64_t time_violations() const { return time_violations_; }
  std::uint64_t events() const { return events_; }
  sched::TpcSet free_tpcs() const { return free_; }

 private:
  enum class Kind : std::uint8_t { kStreamReady, kGroupDone, kTailDone };
  struct Event {
    Time at;
    std::uint64_t seq;
    Kind kind;
    std::uint32_t id;           // stream for kStreamReady/kTailDone, group for kGroupDone
    std::uint32_t version = 0;  // kGroupDone: the group's version it was armed for
    bool operator>(const Event& o) const { return at != o.at ? at > o.at : seq > o.seq; }
  };
  struct AtomRun {
    HwAtom hw;
    Time dispatched{};
    Time start{};
    std::uint64_t remaining = 0;
    std::uint32_t groups = 0;
    std::uint64_t order = 0;  // when it became ready, for FIFO among equals
    bool started = false;
  };
  struct Stream {
    RingQueue<AtomRun> atoms;  // front is the one running or next to run
    bool head_ready = false;
    bool started_any = false;
    Time last_end{};
  };
  struct Group {
    std::uint32_t stream = 0;
    sched::TpcSet tpcs;
    // Memory (m > 0 only): work left at full speed, in ns, as of `since`;
    // the speed since then; the end first accounted busy; the version of
    // its armed completion (a re-rated group's earlier one is stale).
    double mem_share = 0.0;
    double left_ns = 0.0;
    double rate = 1.0;
    Time since{};
    Time planned_end{};
    std::uint32_t version = 0;
    bool running = false;
  };

  void push(Time at, Kind kind, std::uint32_t id, std::uint32_t version = 0);
  void arm_head(std::uint32_t stream, Time now);
  void schedule(Time now);
  void insert_ready(std::uint32_t stream);
  void account_busy(Time start, Time end, int tpcs);
  // Memory: the demand of the groups running, then each memory group's
  // speed; re-arms the completions of those whose speed changed.
  void rerate(Time now);

  GpuModelConfig config_;
  std::vector<Stream> streams_;
  std::vector<std::uint32_t> ready_;  // streams whose head has blocks left to issue
  std::vector<Group> groups_;
  std::vector<std::uint32_t> free_groups_;
  std::vector<std::uint32_t> mem_groups_;  // running groups with mem_share > 0
  std::priority_queue<Event, std::vector<Event>, std::greater<>> events_q_;
  sched::TpcSet free_;
  Time now_{};
  std::uint64_t seq_ = 0;
  std::uint64_t order_ = 0;
  Time window_start_{};
  Time window_end_ = kTimeNever;
  double busy_tpc_ns_ = 0.0;
  std::uint64_t conservation_violations_ = 0;
  std::uint64_t time_violations_ = 0;
  std::uint64_t events_ = 0;
};

}  // namespace lithos::sim
