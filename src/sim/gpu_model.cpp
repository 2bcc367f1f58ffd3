#include "sim/gpu_model.hpp"

#include <algorithm>
#include <cmath>

namespace lithos::sim {

GpuModel::GpuModel(const GpuModelConfig& config, std::uint32_t streams)
    : config_(config), streams_(streams), free_(sched::TpcSet::first(config.tpcs)) {}

void GpuModel::push(Time at, Kind kind, std::uint32_t id, std::uint32_t version) {
  events_q_.push(Event{at, seq_++, kind, id, version});
}

void GpuModel::submit(const HwAtom& atom, Time now) {
  if (atom.stream >= streams_.size()) streams_.resize(atom.stream + 1);
  Stream& s = streams_[atom.stream];
  AtomRun run;
  run.hw = atom;
  run.dispatched = now;
  run.remaining = atom.blocks;
  s.atoms.push_back(run);
  if (s.atoms.size() == 1) arm_head(atom.stream, now);
}

// The head atom of `stream` becomes ready once it is launched and its
// predecessor is done.
void GpuModel::arm_head(std::uint32_t stream, Time now) {
  Stream& s = streams_[stream];
  if (s.atoms.empty()) return;
  const AtomRun& head = s.atoms.front();
  const Time after_previous = s.started_any ? s.last_end + us(config_.stream_gap_us) : Time{};
  Time ready = std::max({head.dispatched + us(config_.launch_latency_us), after_previous, now});
  if (head.hw.split) ready += us(config_.per_atom_cost_us);
  push(ready, Kind::kStreamReady, stream);
}

Time GpuModel::next_event_time() const { return events_q_.empty() ? kTimeNever : events_q_.top().at; }

void GpuModel::account_busy(Time start, Time end, int tpcs) {
  const Time a = std::max(start, window_start_);
  const Time b = std::min(end, window_end_);
  if (b > a) busy_tpc_ns_ += static_cast<double>((b - a).count()) * tpcs;
}

Time GpuModel::advance(Time limit, std::vector<HwCompletion>& done) {
  while (!events_q_.empty() && events_q_.top().at <= limit) {
    const Event e = events_q_.top();
    events_q_.pop();
    if (e.at < now_) ++time_violations_;
    now_ = e.at;
    ++events_;
    switch (e.kind) {
      case Kind::kStreamReady: {
        Stream& s = streams_[e.id];
        if (s.atoms.empty() || s.head_ready) break;
        s.head_ready = true;
        // The work distributor serves grids in the order they became ready.
        s.atoms.front().order = order_++;
        if (s.atoms.front().remaining > 0) {
          insert_ready(e.id);
        } else {
          push(now_ + s.atoms.front().hw.serial, Kind::kTailDone, e.id);  // empty atom
        }
        break;
      }
      case Kind::kGroupDone: {
        Group& g = groups_[e.id];
        if (!g.running || e.version != g.version) break;  // re-rated since: a later event ends it
        g.running = false;
        free_ |= g.tpcs;
        if (g.mem_share > 0.0) {
          if (now_ > g.planned_end) account_busy(g.planned_end, now_, g.tpcs.count());  // the stretch
          if (auto it = std::find(mem_groups_.begin(), mem_groups_.end(), e.id); it != mem_groups_.end()) {
            mem_groups_.erase(it);
          }
          rerate(now_);
        }
        Stream& s = streams_[g.stream];
        AtomRun& a = s.atoms.front();
        --a.groups;
        if (a.remaining == 0 && a.groups == 0) push(now_ + a.hw.serial, Kind::kTailDone, g.stream);
        free_groups_.push_back(e.id);
        break;
      }
      case Kind::kTailDone: {
        Stream& s = streams_[e.id];
        const AtomRun& a = s.atoms.front();
        done.push_back(HwCompletion{a.hw.atom, a.started ? a.start : now_, now_});
        s.atoms.pop_front();
        s.head_ready = false;
        s.last_end = now_;
        s.started_any = true;
        arm_head(e.id, now_);
        break;
      }
    }
    // Several events may share a time stamp: schedule once they are all in.
    if (events_q_.empty() || events_q_.top().at != now_) {
      schedule(now_);
      if (!done.empty()) return now_;
    }
  }
  if (limit > now_ && limit != kTimeNever) now_ = limit;
  return now_;
}

// ready_ stays sorted by (hardware priority, order it became ready); by the
// order alone when the GPU honours no priorities (GpuModelConfig::priorities).
void GpuModel::insert_ready(std::uint32_t stream) {
  const AtomRun& x = streams_[stream].atoms.front();
  auto before = [&](std::uint32_t other) {
    const AtomRun& y = streams_[other].atoms.front();
    return config_.priorities && x.hw.priority != y.hw.priority ? x.hw.priority < y.hw.priority : x.order < y.order;
  };
  auto it = std::find_if(ready_.begin(), ready_.end(), before);
  ready_.insert(it, stream);
}

void GpuModel::schedule(Time now) {
  if (ready_.empty() || free_.empty()) return;
  bool mem_started = false;
  std::size_t keep = 0;
  for (std::size_t i = 0; i < ready_.size(); ++i) {
    const std::uint32_t sid = ready_[i];
    AtomRun& a = streams_[sid].atoms.front();
    const sched::TpcSet avail = free_ & a.hw.allowed;
    if (!avail.empty() && a.remaining > 0) {
      const auto per = static_cast<std::uint64_t>(std::max(a.hw.blocks_per_tpc, 1));
      const auto want = static_cast<int>(std::min<std::uint64_t>((a.remaining + per - 1) / per, 128));
      const sched::TpcSet take = avail.take_lowest(want);
      const std::uint64_t blocks = std::min(a.remaining, per * static_cast<std::uint64_t>(take.count()));
      a.remaining -= blocks;
      ++a.groups;
      if (!a.started) {
        a.started = true;
        a.start = now;
      }
      free_ -= take;
      std::uint32_t gid = 0;
      if (!free_groups_.empty()) {
        gid = free_groups_.back();
        free_groups_.pop_back();
      } else {
        gid = static_cast<std::uint32_t>(groups_.size());
        groups_.emplace_back();
      }
      Group& g = groups_[gid];
      const std::uint32_t version = g.version + 1;  // earlier events of this slot are stale
      g = Group{};
      g.stream = sid;
      g.tpcs = take;
      g.version = version;
      g.running = true;
      g.planned_end = now + a.hw.block_time;
      if (a.hw.mem_share > 0.0) {
        g.mem_share = a.hw.mem_share;
        g.left_ns = static_cast<double>(a.hw.block_time.count());
        g.since = now;
        mem_groups_.push_back(gid);
        mem_started = true;
      }
      push(now + a.hw.block_time, Kind::kGroupDone, gid, version);
      account_busy(now, now + a.hw.block_time, take.count());
    }
    if (a.remaining > 0) ready_[keep++] = sid;
  }
  ready_.resize(keep);
  if (mem_started) rerate(now);
  for (std::uint32_t sid : ready_) {
    if ((free_ & streams_[sid].atoms.front().hw.allowed).intersects(free_)) ++conservation_violations_;
  }
}

void GpuModel::rerate(Time now) {
  // Demand per running kernel (a stream runs one at a time): its share m,
  // in full on half the TPCs it would fill alone or more, in proportion
  // below.
  struct Use {
    std::uint32_t stream;
    double share;
    int tpcs;
  };
  std::vector<Use> uses;
  for (std::uint32_t gid : mem_groups_) {
    const Group& g = groups_[gid];
    auto it = std::find_if(uses.begin(), uses.end(), [&](const Use& u) { return u.stream == g.stream; });
    if (it == uses.end()) {
      uses.push_back(Use{g.stream, g.mem_share, g.tpcs.count()});
    } else {
      it->tpcs += g.tpcs.count();
    }
  }
  double demand = 0.0;
  for (const Use& u : uses) {
    const HwAtom& hw = streams_[u.stream].atoms.front().hw;
    const auto per = static_cast<std::uint64_t>(std::max(hw.blocks_per_tpc, 1));
    const double footprint = static_cast<double>(
        std::min<std::uint64_t>(static_cast<std::uint64_t>(std::max(config_.tpcs, 1)), (hw.blocks + per - 1) / per));
    demand += u.share * std::min(1.0, 2.0 * u.tpcs / std::max(footprint, 1.0));
  }
  for (std::uint32_t gid : mem_groups_) {
    Group& g = groups_[gid];
    const double rate = demand > 1.0 ? 1.0 / ((1.0 - g.mem_share) + g.mem_share * demand) : 1.0;
    if (rate == g.rate) continue;
    g.left_ns = std::max(0.0, g.left_ns - static_cast<double>((now - g.since).count()) * g.rate);
    g.since = now;
    g.rate = rate;
    ++g.version;
    push(now + Duration(static_cast<std::int64_t>(std::ceil(g.left_ns / rate))), Kind::kGroupDone, gid, g.version);
  }
}

}  // namespace lithos::sim
