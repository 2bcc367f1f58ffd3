#include "sim/simulation.hpp"

#include <algorithm>
#include <deque>
#include <functional>

#include "common/rng.hpp"
#include "sched/engine_log.hpp"
#include "sched/occupancy.hpp"
#include "sim/gpu_model.hpp"

namespace lithos::sim {

namespace {

using sched::AtomDispatch;
using sched::Engine;

// FNV-1a: kernel ids from function names, stable across runs and machines.
std::uint64_t kernel_id_of(const std::string& name) {
  std::uint64_t h = 0xcbf29ce484222325ULL;
  for (char c : name) {
    h ^= static_cast<std::uint8_t>(c);
    h *= 0x100000001b3ULL;
  }
  return h;
}

// The truth about one launch, known to the GPU model and not to the engine.
struct TrueKernel {
  std::uint32_t kernel_class = 0;
  Duration block_time{};
  Duration serial{};
  int blocks_per_tpc = 1;
};

struct Request {
  Time arrival{};
  Time start{};
  sched::LaunchId first_launch = 0;
  std::uint32_t remaining = 0;
  std::vector<TrueKernel> kernels;
};

struct TenantRun {
  std::size_t index = 0;  // into scenario.tenants
  const TenantConfig* config = nullptr;
  sched::TenantId tenant = 0;
  sched::QueueId queue = 0;
  Rng arrivals{1};
  Rng durations{1};
  bool open_loop = false;
  double rate_rps = 0.0;
  Time next_arrival = kTimeNever;  // open loop
  Time next_start = kTimeNever;    // closed loop
  std::deque<Time> backlog;        // open loop: arrived, not started
  std::optional<Request> current;
  std::uint64_t requests_started = 0;
  std::uint64_t finished_in_window = 0;
  std::vector<double> place_scale;  // per place in `request`: fixed size factor (spread)
  double slowdown = 1.0;            // on every kernel's duration: TenantConfig::mps_slowdown, or 1
  TenantResult result;
};

class Simulation {
 public:
  Simulation(const Scenario& scenario, const RunOptions& options, std::unique_ptr<sched::Policy> policy)
      : sc_(scenario),
        opt_(options),
        engine_(engine_config(scenario), std::move(policy)),
        log_(engine_, options.record != nullptr),
        gpu_(scenario.gpu, 0),
        end_(time_at(Duration(static_cast<std::int64_t>(scenario.duration_s * 1e9)))),
        warm_(time_at(Duration(static_cast<std::int64_t>(scenario.warmup_s * 1e9)))) {
    ids_.reserve(sc_.kernels.size());
    for (const KernelClass& k : sc_.kernels) ids_.push_back(kernel_id_of(k.function.empty() ? k.name : k.function));
    gpu_.set_window(warm_, end_);
  }

  Status setup() {
    const Rng root(opt_.seed);
    for (std::size_t i = 0; i < sc_.tenants.size(); ++i) {
      if (!opt_.only.empty() && std::find(opt_.only.begin(), opt_.only.end(), i) == opt_.only.end()) continue;
      const TenantConfig& tc = sc_.tenants[i];
      sched::TenantSpec spec;
      spec.name = tc.name;
      spec.priority = tc.priority;
      spec.quota = tc.quota;
      spec.static_tpcs = tc.static_tpcs;
      spec.pauses_best_effort = tc.pauses_best_effort;
      spec.rightsize = tc.rightsize;
      spec.rightsize_slip = tc.rightsize_slip;
      if (tc.slo_ms) spec.slo = Duration(static_cast<std::int64_t>(*tc.slo_ms * 1e6));
      auto tid = log_.add_tenant(spec);
      if (!tid) return tid.status();
      auto qid = log_.add_queue(*tid);
      if (!qid) return qid.status();
      TenantRun t;
      t.index = i;
      t.config = &tc;
      t.tenant = *tid;
      t.queue = *qid;
      t.arrivals = root.fork(3 * i + 1);
      t.durations = root.fork(3 * i + 2);
      Rng places = root.fork(3 * i + 3);
      for (std::uint32_t cls : tc.request) {
        t.place_scale.push_back(places.lognormal_mean_cv(1.0, sc_.kernels[cls].spread));
      }
      // Time slicing (the policy whose contexts the GPU preempts) runs plain
      // processes, not MPS clients.
      if (opt_.mps_clients && !engine_.policy().traits().preempts_at_timeslice) t.slowdown = tc.mps_slowdown;
      const bool forced_closed = i < opt_.force_closed.size() && opt_.force_closed[i];
      t.open_loop = tc.arrival == Arrival::kPoisson && !forced_closed;
      if (t.open_loop) {
        if (tc.rate_rps) {
          t.rate_rps = *tc.rate_rps;
        } else if (i < opt_.rate_rps.size() && opt_.rate_rps[i]) {
          t.rate_rps = *opt_.rate_rps[i];
        } else {
          return Status::invalid_argument("tenant '" + tc.name + "' gives a load but no rate was resolved");
        }
        if (!(t.rate_rps > 0.0)) return Status::invalid_argument("tenant '" + tc.name + "' has no positive rate");
        t.next_arrival = next_poisson(t, Time{});
      } else {
        t.next_start = Time{};
      }
      t.result.name = tc.name;
      t.result.priority = tc.priority;
      t.result.unit = tc.unit;
      t.result.open_loop = t.open_loop;
      t.result.rate_rps = t.open_loop ? t.rate_rps : 0.0;
      tenants_.push_back(std::move(t));
    }
    by_tenant_id_.assign(tenants_.size(), 0);
    for (std::size_t k = 0; k < tenants_.size(); ++k) by_tenant_id_[tenants_[k].tenant] = k;
    return Status::ok();
  }

  RunResult run() {
    Time now{};
    bool dirty = true;
    while (true) {
      // The next event outside the GPU: an arrival, a closed-loop start, or
      // a wake-up the engine asked for.
      Time external = end_;
      for (const TenantRun& t : tenants_) external = std::min({external, t.next_arrival, t.next_start});
      const Time wake = engine_.next_wakeup();
      if (wake > now) external = std::min(external, wake);
      // The GPU runs on by itself until an atom completes or `external`.
      completions_.clear();
      const Time reached = gpu_.advance(external, completions_);
      if (reached < now) ++time_violations_;
      now = reached;
      if (completions_.empty() && now >= end_) break;
      if (wake <= now) dirty = true;

      for (const HwCompletion& c : completions_) {
        const sched::Completion done = log_.atom_finished(c.atom, c.start, c.end);
        dirty = true;
        if (done.launch_done) on_launch_done(tenants_[by_tenant_id_[done.tenant]], now);
      }
      for (TenantRun& t : tenants_) dirty |= host_events(t, now);

      if (dirty) {
        dispatches_.clear();
        log_.dispatch(now, dispatches_);
        for (const AtomDispatch& d : dispatches_) gpu_.submit(to_hw(d), now);
        dirty = false;
      }
    }
    return collect();
  }

  static sched::EngineConfig engine_config(const Scenario& sc) {
    sched::EngineConfig c = sc.engine;
    c.device.tpcs = sc.gpu.tpcs;
    c.running_times_exact = true;  // the model's completions are each launch's own
    return c;
  }

  Time next_poisson(TenantRun& t, Time from) {
    const double gap_s = t.arrivals.exponential(1.0 / t.rate_rps);
    return from + Duration(static_cast<std::int64_t>(gap_s * 1e9));
  }

  // Arrivals and closed-loop starts due at `now`; true if launches were submitted.
  bool host_events(TenantRun& t, Time now) {
    bool submitted = false;
    while (t.open_loop && t.next_arrival <= now) {
      t.backlog.push_back(t.next_arrival);
      t.next_arrival = next_poisson(t, t.next_arrival);
    }
    if (!t.open_loop && t.next_start <= now && !t.current) {
      t.next_start = kTimeNever;
      start_request(t, now, now);
      submitted = true;
    }
    if (t.open_loop && !t.current && !t.backlog.empty()) {
      const Time arrival = t.backlog.front();
      t.backlog.pop_front();
      start_request(t, arrival, now);
      submitted = true;
    }
    return submitted;
  }

  void start_request(TenantRun& t, Time arrival, Time now) {
    const TenantConfig& tc = *t.config;
    Request r;
    r.arrival = arrival;
    r.start = now;
    std::vector<sched::LaunchDesc> launches;
    // Requests draw their kernels' durations in order from the tenant's own
    // stream: identical under every policy.
    auto add = [&](std::uint32_t cls, double mean_us, double cv) {
      const KernelClass& k = sc_.kernels[cls];
      const double dur_us = t.durations.lognormal_mean_cv(mean_us, cv) * t.slowdown;
      const double serial_us = std::min(k.serial_us, dur_us * 0.5);
      sched::LaunchDesc l;
      l.kernel = ids_[cls];
      l.grid = k.grid;
      l.block = k.block;
      l.regs_per_thread = k.regs;
      l.smem_per_block = k.smem;
      l.cluster = k.cluster;
      l.cooperative = k.cooperative;
      TrueKernel tk;
      tk.kernel_class = cls;
      tk.blocks_per_tpc = sched::blocks_per_tpc(engine_.state().config.device, l);
      const auto w = static_cast<double>(sched::waves(k.grid.count(), tk.blocks_per_tpc, sc_.gpu.tpcs));
      tk.block_time = Duration(static_cast<std::int64_t>((dur_us - serial_us) * 1e3 / w));
      tk.serial = Duration(static_cast<std::int64_t>(serial_us * 1e3));
      launches.push_back(l);
      r.kernels.push_back(tk);
    };
    const std::size_t n = tc.trace_requests.empty()
                              ? tc.request.size()
                              : tc.trace_requests[t.requests_started % tc.trace_requests.size()].size();
    r.kernels.reserve(n);
    launches.reserve(n);
    if (!tc.trace_requests.empty()) {
      const auto& tr = tc.trace_requests[t.requests_started % tc.trace_requests.size()];
      for (const TraceKernel& k : tr) add(k.kernel_class, k.duration_us, tc.trace_cv);
    } else {
      for (std::size_t i = 0; i < tc.request.size(); ++i) {
        const KernelClass& k = sc_.kernels[tc.request[i]];
        add(tc.request[i], k.duration_us * t.place_scale[i], k.cv);
      }
    }
    ++t.requests_started;
    r.remaining = static_cast<std::uint32_t>(r.kernels.size());
    t.current = std::move(r);
    // As lithosd: launches that never wait are on the GPU at once (the host
    // runs ahead of them), on the set the policy publishes for them now.
    const bool immediate =
        sc_.immediate_launches && (engine_.state().tenants[t.tenant].is_high() || engine_.runs_free(t.tenant));
    for (std::size_t i = 0; i < launches.size(); ++i) {
      if (immediate) {
        // A right-sized tenant's client launches on the first TPCs of the
        // set, as many as its table says (SizeTable).
        sched::TpcSet set = engine_.immediate_set(t.tenant, now);
        if (const sched::SizeTable* table = engine_.size_table(t.tenant)) {
          const sched::SizeTable::Entry* e = table->find({launches[i].kernel, launches[i].grid});
          if (e != nullptr && e->tpcs > 0 && e->tpcs < set.count()) set = set.take_lowest(e->tpcs);
        }
        auto d = log_.submit_running(t.queue, launches[i], set, now);
        if (!d) return;  // cannot happen for validated scenarios
        if (i == 0) t.current->first_launch = d->launch;
        gpu_.submit(to_hw(*d), now);
      } else {
        auto id = log_.submit(t.queue, launches[i], now);
        if (!id) return;  // cannot happen for validated scenarios
        if (i == 0) t.current->first_launch = *id;
      }
    }
  }

  HwAtom to_hw(const AtomDispatch& d) {
    TenantRun& t = tenants_[by_tenant_id_[d.tenant]];
    const TrueKernel& k = t.current->kernels[d.launch - t.current->first_launch];
    HwAtom h;
    h.atom = d.atom;
    h.stream = d.queue;
    h.allowed = d.tpcs;
    h.priority = d.priority;
    h.blocks = d.blocks.size();
    h.blocks_per_tpc = k.blocks_per_tpc;
    h.block_time = k.block_time;
    h.serial = k.serial;
    h.split = d.split;
    h.mem_share = sc_.kernels[k.kernel_class].mem_share;
    return h;
  }

  void on_launch_done(TenantRun& t, Time now) {
    Request& r = *t.current;
    if (--r.remaining > 0) return;
    const Time counted_from = t.open_loop ? r.arrival : r.start;
    if (counted_from >= warm_) {
      t.result.latencies_ms.push_back(to_ms(now - counted_from));
      ++t.result.completed;
    }
    if (now >= warm_) ++t.finished_in_window;
    log_.sync(t.queue);  // the host waited for the request
    t.current.reset();
    if (!t.open_loop) t.next_start = now + Duration(static_cast<std::int64_t>(t.config->think_us * 1e3));
  }

  RunResult collect() {
    RunResult out;
    out.policy = std::string(engine_.policy().name());
    const double window_s = to_s(end_ - warm_);
    for (TenantRun& t : tenants_) {
      TenantResult& res = t.result;
      // Requests that started in the window and are not done: counted with
      // the time they have waited so far.
      auto unfinished = [&](Time from) {
        if (from >= warm_) {
          res.unfinished_ms.push_back(to_ms(end_ - from));
          ++res.unfinished;
        }
      };
      // A closed loop always has one request in progress: not a backlog.
      if (t.current && t.open_loop) unfinished(t.current->arrival);
      for (Time a : t.backlog) unfinished(a);
      std::sort(res.latencies_ms.begin(), res.latencies_ms.end());
      std::sort(res.unfinished_ms.begin(), res.unfinished_ms.end());
      res.throughput = static_cast<double>(t.finished_in_window) / window_s;
      if (engine_.rightsized(t.tenant)) res.rightsize = engine_.rightsize_stats(t.tenant);
      out.tenants.push_back(std::move(res));
    }
    out.tpc_utilization =
        gpu_.busy_tpc_ns() / (static_cast<double>(sc_.gpu.tpcs) * static_cast<double>((end_ - warm_).count()));
    out.predictor_high = engine_.state().predictor.stats(sched::PriorityClass::kHigh);
    out.predictor_best_effort = engine_.state().predictor.stats(sched::PriorityClass::kBestEffort);
    out.counters = engine_.counters();
    out.gpu_events = gpu_.events();
    if (opt_.record != nullptr) *opt_.record = log_.take_events();
    out.time_violations = time_violations_ + gpu_.time_violations();
    out.conservation_violations = gpu_.conservation_violations();
    return out;
  }

  const Scenario& sc_;
  const RunOptions& opt_;
  Engine engine_;
  sched::EngineLog log_;  // every call to engine_ goes through it (recorded for RunOptions::record)
  GpuModel gpu_;
  Time end_;
  Time warm_;
  std::vector<std::uint64_t> ids_;
  std::vector<TenantRun> tenants_;
  std::vector<std::size_t> by_tenant_id_;
  std::vector<HwCompletion> completions_;
  std::vector<AtomDispatch> dispatches_;
  std::uint64_t time_violations_ = 0;
};

}  // namespace

Result<RunResult> run_simulation(const Scenario& scenario, const RunOptions& options) {
  std::string error;
  auto policy = sched::make_policy(options.policy, scenario.policies, &error);
  if (!policy) return Status::invalid_argument(error);
  Simulation sim(scenario, options, std::move(policy));
  LITHOS_RETURN_IF_ERROR(sim.setup());
  return sim.run();
}

}  // namespace lithos::sim
