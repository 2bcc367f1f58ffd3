// Engine and policy rules, checked through the Engine's real interface.
//
// Most tests drive an Engine with a tiny fake hardware: every dispatched atom
// "runs" for a duration drawn from a seeded generator, starting when its
// queue's previous atom ends; the test checks the scheduling rules after
// every dispatch.
#include "sched/engine.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <queue>

#include "common/rng.hpp"
#include "sched/occupancy.hpp"
#include "sched/policies/catalog.hpp"
#include "sched/policy_view.hpp"

namespace lithos::sched {
namespace {

LaunchDesc kernel(KernelId id, std::uint32_t blocks, std::uint32_t threads = 256, std::uint32_t regs = 32) {
  LaunchDesc l;
  l.kernel = id;
  l.grid = Dim3{blocks, 1, 1};
  l.block = Dim3{threads, 1, 1};
  l.regs_per_thread = regs;
  return l;
}

TenantSpec high(const std::string& name, int quota) {
  TenantSpec t;
  t.name = name;
  t.priority = PriorityClass::kHigh;
  t.quota = quota;
  return t;
}
TenantSpec best_effort(const std::string& name) {
  TenantSpec t;
  t.name = name;
  t.priority = PriorityClass::kBestEffort;
  return t;
}

// The Engine's settings and the policies' settings, as one.
struct TestConfig : EngineConfig {
  PolicySettings policy;
};

std::unique_ptr<Engine> make_engine(const std::string& policy, TestConfig cfg = {}) {
  std::string err;
  auto p = make_policy(policy, cfg.policy, &err);
  EXPECT_NE(p, nullptr) << err;
  return std::make_unique<Engine>(static_cast<const EngineConfig&>(cfg), std::move(p));
}

const LithosPolicy& lithos_policy(const Engine& e) { return dynamic_cast<const LithosPolicy&>(e.policy()); }

// A fake GPU: atoms of a queue run back to back; each lasts its true duration.
class FakeHardware {
 public:
  explicit FakeHardware(Engine& e) : engine_(e) {}

  // Dispatches at `now`, returns what was dispatched.
  std::vector<AtomDispatch> dispatch(Time now, Duration atom_time) {
    std::vector<AtomDispatch> out;
    engine_.dispatch(now, out);
    for (const AtomDispatch& d : out) {
      Time& tail = stream_end_[d.queue];
      const Time start = std::max(tail, now);
      const Time end = start + atom_time;
      tail = end;
      pending_.push({end, start, d.atom});
    }
    return out;
  }
  // Finishes every atom due by `now`; returns the number finished.
  int finish_until(Time now, std::vector<Completion>* done = nullptr) {
    int n = 0;
    while (!pending_.empty() && pending_.top().end <= now) {
      const Item it = pending_.top();
      pending_.pop();
      Completion c = engine_.atom_finished(it.atom, it.start, it.end);
      if (done != nullptr) done->push_back(c);
      ++n;
    }
    return n;
  }
  Time next_end() const { return pending_.empty() ? kTimeNever : pending_.top().end; }
  bool idle() const { return pending_.empty(); }

 private:
  struct Item {
    Time end;
    Time start;
    AtomId atom;
    bool operator>(const Item& o) const { return end > o.end; }
  };
  Engine& engine_;
  std::map<QueueId, Time> stream_end_;
  std::priority_queue<Item, std::vector<Item>, std::greater<>> pending_;
};

// What policies read (PolicyView) is the Engine's state: owners, holdings,
// in-flight atoms and activity as the Engine keeps them.
TEST(Engine, PolicyViewShowsWhatTheEngineKeeps) {
  TestConfig cfg;
  auto e = make_engine("lithos", cfg);
  const TenantId a = *e->add_tenant(high("a", 20));
  TenantSpec paused = high("b", 10);
  paused.pauses_best_effort = BestEffortPause::kAlways;
  const TenantId b = *e->add_tenant(paused);
  const TenantId be = *e->add_tenant(best_effort("be"));
  const QueueId q = *e->add_queue(be);
  LaunchDesc k = kernel(1, 1000);
  k.duration_hint = us(30);
  ASSERT_TRUE(e->submit(q, k, Time{}).is_ok());
  std::vector<AtomDispatch> out;
  e->dispatch(Time{}, out);
  ASSERT_EQ(out.size(), 1U);

  const PolicyView v(e->state());
  EXPECT_EQ(v.device().tpcs, 66);
  EXPECT_EQ(v.device_tpcs(), TpcSet::range(0, 66));
  EXPECT_EQ(v.idle_grace(), cfg.idle_grace);
  ASSERT_EQ(v.tenants().size(), 3U);
  EXPECT_EQ(v.tenant(b).spec.name, "b");
  EXPECT_EQ(v.tenant(a).owned, TpcSet::range(0, 20));
  EXPECT_EQ(v.tenant(b).owned, TpcSet::range(20, 30));
  EXPECT_EQ(v.owner_of(5), a);
  EXPECT_EQ(v.owner_of(25), b);
  EXPECT_EQ(v.owner_of(40), kNoTenant);
  EXPECT_EQ(v.owned_by_anyone(), TpcSet::range(0, 30));
  EXPECT_TRUE(v.active(be, Time{}));
  EXPECT_FALSE(v.active(a, Time{}));
  ASSERT_EQ(v.tenant(be).inflight.size(), 1U);
  const InflightAtom& atom = v.atom(v.tenant(be).inflight[0]);
  EXPECT_EQ(atom.tenant, be);
  EXPECT_EQ(atom.tpcs, out[0].tpcs);
  EXPECT_EQ(v.held(be), out[0].tpcs);
  EXPECT_TRUE(v.held(a).empty());
  EXPECT_EQ(v.predicted_end(atom), e->state().predicted_end(atom));
  EXPECT_EQ(v.beside_best_effort(atom), e->state().beside_best_effort(atom));
  EXPECT_EQ(v.pick(TpcSet::range(0, 66), 3, a), e->state().pick(TpcSet::range(0, 66), 3, a));

  // The Engine asks the policy for status output through the same view.
  ASSERT_TRUE(e->pause_report(b, Time{}).has_value());
  EXPECT_EQ(e->pause_report(b, Time{})->phase, "paused");
  EXPECT_FALSE(e->pause_report(a, Time{}).has_value()) << "it does not pause best effort";
  EXPECT_FALSE(e->pause_report(TenantId{9}, Time{}).has_value());
}

TEST(Engine, RejectsBadTenants) {
  auto e = make_engine("lithos");
  EXPECT_FALSE(e->add_tenant(TenantSpec{}).is_ok());  // no name
  ASSERT_TRUE(e->add_tenant(high("a", 50)).is_ok());
  EXPECT_EQ(e->add_tenant(high("a", 1)).status().code(), StatusCode::kInvalidArgument);  // duplicate
  EXPECT_EQ(e->add_tenant(high("b", 67)).status().code(), StatusCode::kOutOfRange);
  // 50 + 20 > 66: the lithos policy refuses, and the tenant is not added.
  auto over = e->add_tenant(high("c", 20));
  ASSERT_FALSE(over.is_ok());
  EXPECT_NE(over.status().message().find("quotas"), std::string::npos);
  EXPECT_EQ(e->state().tenants.size(), 1U);
  EXPECT_EQ(e->state().tenants[0].owned, TpcSet::range(0, 50));
  auto be = best_effort("be");
  be.quota = 3;
  EXPECT_FALSE(e->add_tenant(be).is_ok());  // best-effort tenants own nothing
  EXPECT_TRUE(e->add_tenant(best_effort("be")).is_ok());
}

TEST(Engine, SubmitErrors) {
  auto e = make_engine("mps");
  EXPECT_EQ(e->submit(0, kernel(1, 10), Time{}).status().code(), StatusCode::kNotFound);
  auto t = e->add_tenant(best_effort("x"));
  auto q = e->add_queue(*t);
  LaunchDesc empty = kernel(1, 10);
  empty.grid = Dim3{0, 1, 1};
  EXPECT_EQ(e->submit(*q, empty, Time{}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(e->add_queue(7).status().code(), StatusCode::kNotFound);
}

TEST(Engine, MpsDispatchesEverythingAtOnceOnEveryTpc) {
  auto e = make_engine("mps");
  auto a = e->add_tenant(high("a", 10));
  auto b = e->add_tenant(best_effort("b"));
  const QueueId qa = *e->add_queue(*a);
  const QueueId qb = *e->add_queue(*b);
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(e->submit(qa, kernel(1, 100), Time{}).is_ok());
    ASSERT_TRUE(e->submit(qb, kernel(2, 100000), Time{}).is_ok());
  }
  std::vector<AtomDispatch> out;
  e->dispatch(Time{}, out);
  ASSERT_EQ(out.size(), 10U);
  for (const auto& d : out) {
    EXPECT_EQ(d.tpcs, TpcSet::first(66));
    EXPECT_EQ(d.priority, HwPriority::kNormal);
    EXPECT_FALSE(d.split);
    EXPECT_TRUE(d.last);
  }
  // In arrival order: submission order interleaves the two queues' heads.
  EXPECT_EQ(e->next_wakeup(), kTimeNever);
}

TEST(Engine, MpsClientPriorityLowersBestEffort) {
  auto e = make_engine("mps-priority");
  const QueueId qa = *e->add_queue(*e->add_tenant(high("a", 0)));
  const QueueId qb = *e->add_queue(*e->add_tenant(best_effort("b")));
  ASSERT_TRUE(e->submit(qa, kernel(1, 10), Time{}).is_ok());
  ASSERT_TRUE(e->submit(qb, kernel(2, 10), Time{}).is_ok());
  std::vector<AtomDispatch> out;
  e->dispatch(Time{}, out);
  ASSERT_EQ(out.size(), 2U);
  for (const auto& d : out) {
    EXPECT_EQ(d.priority, d.queue == qa ? HwPriority::kNormal : HwPriority::kLow);
  }
}

TEST(Engine, StaticPartitionsAreFixedAndDisjoint) {
  auto e = make_engine("static-partition");
  TenantSpec a = high("a", 40);
  TenantSpec b = high("b", 10);
  b.static_tpcs = 14;
  const QueueId qa = *e->add_queue(*e->add_tenant(a));
  const QueueId qb = *e->add_queue(*e->add_tenant(b));
  const QueueId qc = *e->add_queue(*e->add_tenant(best_effort("c")));
  const QueueId qd = *e->add_queue(*e->add_tenant(best_effort("d")));
  for (QueueId q : {qa, qb, qc, qd}) ASSERT_TRUE(e->submit(q, kernel(q, 5000), Time{}).is_ok());
  std::vector<AtomDispatch> out;
  e->dispatch(Time{}, out);
  ASSERT_EQ(out.size(), 4U);
  std::map<QueueId, TpcSet> got;
  for (const auto& d : out) got[d.queue] = d.tpcs;
  EXPECT_EQ(got[qa], TpcSet::range(0, 40));
  EXPECT_EQ(got[qb], TpcSet::range(40, 54));
  EXPECT_EQ(got[qc], TpcSet::range(54, 60));  // (66 - 54) / 2 each
  EXPECT_EQ(got[qd], TpcSet::range(60, 66));
}

TEST(Engine, StaticPartitionRefusesTenantWithoutTpcs) {
  auto e = make_engine("static-partition");
  ASSERT_TRUE(e->add_tenant(high("a", 66)).is_ok());
  auto be = e->add_tenant(best_effort("b"));
  ASSERT_FALSE(be.is_ok());
  EXPECT_NE(be.status().message().find("'b'"), std::string::npos);
}

TEST(Engine, TimeSlicingRunsOneTenantAtATime) {
  TestConfig cfg;
  cfg.policy.time_slicing.timeslice = ms(2);
  cfg.policy.time_slicing.context_switch = us(25);
  auto e = make_engine("time-slicing", cfg);
  const QueueId qa = *e->add_queue(*e->add_tenant(high("a", 0)));
  const QueueId qb = *e->add_queue(*e->add_tenant(best_effort("b")));
  for (int i = 0; i < 50; ++i) {
    ASSERT_TRUE(e->submit(qa, kernel(1, 100), Time{}).is_ok());
    ASSERT_TRUE(e->submit(qb, kernel(2, 100), Time{}).is_ok());
  }
  FakeHardware hw(*e);
  Time now{};
  std::map<QueueId, int> inflight;
  QueueId last_owner = 99;
  int switches = 0;
  auto all_done = [&] {
    return hw.idle() && e->state().tenants[0].pending_launches == 0 && e->state().tenants[1].pending_launches == 0;
  };
  for (int step = 0; step < 10000 && !all_done(); ++step) {
    std::vector<Completion> done;
    hw.finish_until(now, &done);
    for (const auto& c : done) --inflight[c.queue];
    for (const auto& d : hw.dispatch(now, us(300))) {
      ++inflight[d.queue];
      if (d.queue != last_owner) {
        ++switches;
        last_owner = d.queue;
      }
    }
    // Never both tenants in flight.
    ASSERT_FALSE(inflight[qa] > 0 && inflight[qb] > 0) << "at " << now.time_since_epoch().count();
    now = std::min(hw.next_end(), e->next_wakeup());
    if (now == kTimeNever) break;
  }
  EXPECT_TRUE(all_done()) << "work left but nothing scheduled to run";
  // 50 x 300 us per tenant with 2 ms slices: many switches, not two.
  EXPECT_GT(switches, 10);
}

// Runs a random workload under `policy` and checks the LithOS rules after
// every dispatch.
struct RuleCheck {
  int quota_violations = 0;     // a new atom of X on TPCs an active owner keeps
  int double_assignment = 0;    // a new atom on a TPC another tenant holds, beyond the lookahead
  int throttle_violations = 0;  // a queue's in-flight work beyond throttle + one atom
  int stolen_bound_violations = 0;
  std::uint64_t atoms = 0;
  std::uint64_t stolen = 0;
};

RuleCheck run_rules(const std::string& policy, std::uint64_t seed) {
  TestConfig cfg;
  auto e = make_engine(policy, cfg);
  const TenantId a = *e->add_tenant(high("a", 40));
  const TenantId b = *e->add_tenant(high("b", 16));
  const TenantId c = *e->add_tenant(best_effort("c"));
  const TenantId d = *e->add_tenant(best_effort("d"));
  std::vector<QueueId> queues;
  for (TenantId t : {a, b, c, d}) queues.push_back(*e->add_queue(t));
  queues.push_back(*e->add_queue(c));  // a tenant with two streams

  Rng rng(seed);
  FakeHardware hw(*e);
  RuleCheck rc;
  Time now{};
  const EngineState& st = e->state();
  for (int step = 0; step < 4000; ++step) {
    hw.finish_until(now);
    // Random arrivals: bursts of launches of random sizes.
    if (rng.uniform() < 0.3) {
      const QueueId q = queues[rng.below(queues.size())];
      const int n = 1 + static_cast<int>(rng.below(6));
      for (int i = 0; i < n; ++i) {
        const auto blocks = static_cast<std::uint32_t>(1 + rng.below(3000));
        (void)e->submit(q, kernel(static_cast<KernelId>(q) * 100 + static_cast<KernelId>(i), blocks), now);
      }
    }
    // Snapshot of what each active owner keeps before this dispatch.
    std::vector<TpcSet> kept(st.tenants.size());
    for (const TenantState& t : st.tenants) {
      if (t.owned.empty()) continue;
      if (t.pending_launches > 0) {
        kept[t.id] = (st.held(t.id) | t.owned.take_lowest(t.demand())) & t.owned;
      } else if (st.active(t.id, now)) {
        kept[t.id] = t.owned;
      }
    }
    std::vector<TpcSet> held_before(st.tenants.size());
    // Per tenant: TPCs under one of its atoms predicted to run past the lookahead.
    std::vector<TpcSet> long_busy(st.tenants.size());
    for (const TenantState& t : st.tenants) {
      held_before[t.id] = st.held(t.id);
      for (AtomId id : t.inflight) {
        if (st.predicted_end(st.atoms[id]) > now + cfg.policy.lithos.steal_lookahead) {
          long_busy[t.id] |= st.atoms[id].tpcs;
        }
      }
    }
    std::map<QueueId, std::pair<std::uint32_t, Time>> queue_before;  // in flight, predicted tail
    for (const QueueState& q : st.queues) queue_before[q.id] = {q.inflight_atoms, q.tail_end};

    const Duration atom_time = us(50 + static_cast<double>(rng.below(400)));
    for (const AtomDispatch& dsp : hw.dispatch(now, atom_time)) {
      ++rc.atoms;
      // The throttle: a queue with work in flight gets another atom only
      // while its predicted outstanding work is within the window; a
      // best-effort atom on no one's TPCs within the longer window.
      auto& [inflight, tail] = queue_before[dsp.queue];
      const bool be_unborrowed =
          policy == "lithos" && !st.tenants[dsp.tenant].is_high() && st.atoms[dsp.atom].stolen.empty();
      const Duration window = be_unborrowed ? std::max(cfg.throttle, cfg.throttle_unborrowed) : cfg.throttle;
      if (inflight > 0 && tail - now > window) ++rc.throttle_violations;
      ++inflight;
      tail = std::max(tail, now) + dsp.predicted.value_or(cfg.throttle);
      for (const TenantState& o : st.tenants) {
        if (o.id == dsp.tenant) continue;
        if (dsp.tpcs.intersects(kept[o.id])) ++rc.quota_violations;
        (dsp.tpcs & held_before[o.id]).for_each([&](int p) {
          const bool reclaim = st.owner_of(p) == dsp.tenant;
          const bool soon = !long_busy[o.id].test(p);
          if (!reclaim && !soon) ++rc.double_assignment;
        });
      }
    }
    for (const TenantState& t : st.tenants) {
      if (t.stolen_inflight > cfg.policy.lithos.max_stolen_atoms) ++rc.stolen_bound_violations;
    }
    rc.stolen = e->counters().stolen_atoms;
    const Time next = std::min({hw.next_end(), e->next_wakeup(), now + us(20 + static_cast<double>(rng.below(200)))});
    now = std::max(now + Duration(1), next);
  }
  return rc;
}

TEST(LithosRules, QuotasHeldNoDoubleAssignmentThrottleAndStealBound) {
  std::uint64_t stolen = 0;
  for (std::uint64_t seed : {1ULL, 2ULL, 3ULL, 4ULL, 5ULL}) {
    const RuleCheck rc = run_rules("lithos", seed);
    EXPECT_EQ(rc.quota_violations, 0) << "seed " << seed;
    EXPECT_EQ(rc.double_assignment, 0) << "seed " << seed;
    EXPECT_EQ(rc.throttle_violations, 0) << "seed " << seed;
    EXPECT_EQ(rc.stolen_bound_violations, 0) << "seed " << seed;
    EXPECT_GT(rc.atoms, 500U);
    stolen += rc.stolen;
  }
  EXPECT_GT(stolen, 50U) << "the workload must exercise stealing";
}

TEST(LithosRules, TheCheckCatchesMpsSharing) {
  // The same checks flag MPS, which shares every TPC: proof that they can fail.
  const RuleCheck rc = run_rules("mps", 1);
  EXPECT_GT(rc.quota_violations + rc.double_assignment, 0);
}

TEST(LithosRules, StealingGivesTpcsBackWhenTheOwnerWakes) {
  TestConfig cfg;
  cfg.idle_grace = us(20);
  auto e = make_engine("lithos", cfg);
  const TenantId hp = *e->add_tenant(high("hp", 66));
  const TenantId be = *e->add_tenant(best_effort("be"));
  const QueueId qh = *e->add_queue(hp);
  const QueueId qb = *e->add_queue(be);
  // The owner is idle (never had work): best-effort borrows the whole GPU.
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(e->submit(qb, kernel(7, 100000), Time{}).is_ok());
  FakeHardware hw(*e);
  auto first = hw.dispatch(Time{}, us(400));
  ASSERT_FALSE(first.empty());
  EXPECT_EQ(first[0].tpcs.count(), 66);
  EXPECT_EQ(first[0].priority, HwPriority::kLow);
  EXPECT_LE(e->state().tenants[be].stolen_inflight, cfg.policy.lithos.max_stolen_atoms);

  // The owner wakes at 100 us.
  const Time wake = time_at(us(100));
  ASSERT_TRUE(e->submit(qh, kernel(9, 5000), wake).is_ok());
  auto after = hw.dispatch(wake, us(400));
  bool owner_dispatched = false;
  for (const auto& d : after) {
    if (d.tenant == hp) {
      owner_dispatched = true;
      EXPECT_EQ(d.tpcs.count(), 66);  // its whole quota, at once
      EXPECT_EQ(d.priority, HwPriority::kHigh);
    } else {
      ADD_FAILURE() << "best-effort atom started on the owner's TPCs after it woke";
    }
  }
  EXPECT_TRUE(owner_dispatched);
  // Until the owner drains (and its grace passes), no new best-effort atom.
  Time now = wake;
  for (int i = 0; i < 50 && e->state().tenants[hp].has_work(); ++i) {
    hw.finish_until(now);
    for (const auto& d : hw.dispatch(now, us(400))) EXPECT_NE(d.tenant, be) << "at " << to_us(since_start(now));
    now = std::min(hw.next_end(), e->next_wakeup());
  }
  EXPECT_FALSE(e->state().tenants[hp].has_work());
  // After the grace period the best-effort tenant borrows again.
  const Time later = e->state().tenants[hp].idle_since + us(25);
  hw.finish_until(later);
  auto again = hw.dispatch(later, us(400));
  ASSERT_FALSE(again.empty());
  EXPECT_EQ(again[0].tenant, be);
}

// An eager service: inside a request its kernels leave the GPU idle for
// 60 us between them (launched one by one), and requests come 3 ms apart.
// Once the engine has seen its gaps (median under burst_gap), it stays
// active through the short ones: no best-effort atom borrows its TPCs in a
// 60 us gap, while the trainer still borrows them between requests. With
// the burst grace off, every short gap past idle_grace lends them.
TEST(LithosRules, AnEagerServiceKeepsItsTpcsThroughItsShortGaps) {
  for (const bool burst : {true, false}) {
    SCOPED_TRACE(burst ? "burst grace on (150 us)" : "burst grace off (the default)");
    TestConfig cfg;
    cfg.policy.lithos.burst_gap = burst ? us(150) : Duration{0};
    auto e = make_engine("lithos", cfg);
    const TenantId hp = *e->add_tenant(high("hp", 66));
    const TenantId be = *e->add_tenant(best_effort("be"));
    const QueueId qh = *e->add_queue(hp);
    const QueueId qb = *e->add_queue(be);
    Time t{};
    int in_short_gaps = 0;
    int in_long_gaps = 0;
    // Best effort tries at `t`; its atoms (if any) run 10 us.
    auto try_be = [&](int* count) {
      if (e->state().tenants[be].pending_launches == 0) {
        ASSERT_TRUE(e->submit(qb, kernel(7, 100000), t).is_ok());
      }
      std::vector<AtomDispatch> out;
      e->dispatch(t, out);
      for (const AtomDispatch& d : out) {
        if (d.tenant != be) continue;
        if (!(d.tpcs & e->state().tenants[hp].owned).empty()) ++*count;
        (void)e->atom_finished(d.atom, t, t + us(10));
      }
    };
    for (int req = 0; req < 20; ++req) {
      const bool warm = req >= 4;  // 16 gaps seen
      for (int k = 0; k < 5; ++k) {
        auto run = e->submit_running(qh, kernel(1, 100), e->immediate_set(hp, t), t);
        ASSERT_TRUE(run.is_ok());
        t += us(20);
        (void)e->atom_finished(run->atom, t - us(20), t);
        if (k == 4) break;
        t += us(40);  // past idle_grace (20 us), inside the 60 us gap
        int n = 0;
        try_be(&n);
        if (warm) in_short_gaps += n;
        t += us(20);
      }
      t += ms(1);  // the gap between requests: past any burst grace (at most burst_gap)
      int n = 0;
      try_be(&n);
      if (warm) in_long_gaps += n;
      t += ms(2);
    }
    if (burst) {
      EXPECT_EQ(in_short_gaps, 0);
      EXPECT_GT(lithos_policy(*e).burst_grace(hp), cfg.idle_grace);
      EXPECT_LE(lithos_policy(*e).burst_grace(hp), cfg.policy.lithos.burst_gap);
    } else {
      EXPECT_GT(in_short_gaps, 30);
    }
    EXPECT_GT(in_long_gaps, 10) << "the trainer borrows between requests";
  }
}

// A service whose requests are far apart keeps the plain idle_grace.
TEST(LithosRules, ASparseServiceGetsNoBurstGrace) {
  TestConfig cfg;
  cfg.policy.lithos.burst_gap = us(150);
  auto e = make_engine("lithos", cfg);
  const TenantId hp = *e->add_tenant(high("hp", 40));
  const QueueId qh = *e->add_queue(hp);
  Time t{};
  for (int req = 0; req < 40; ++req) {
    auto run = e->submit_running(qh, kernel(1, 100), e->immediate_set(hp, t), t);
    ASSERT_TRUE(run.is_ok());
    t += us(100);
    (void)e->atom_finished(run->atom, t - us(100), t);
    t += us(req % 2 == 0 ? 400 : 2000);
  }
  EXPECT_EQ(lithos_policy(*e).burst_grace(hp), Duration{0});
  EXPECT_EQ(e->state().grace(e->state().tenants[hp]), e->state().config.idle_grace);
}

TEST(LithosRules, ActiveOwnerLendsOnlyBeyondItsDemand) {
  auto e = make_engine("lithos");
  const TenantId hp = *e->add_tenant(high("hp", 66));
  const TenantId be = *e->add_tenant(best_effort("be"));
  const QueueId qh = *e->add_queue(hp);
  const QueueId qb = *e->add_queue(be);
  // 256 threads x 32 regs -> 8 blocks/SM -> 16 per TPC: 160 blocks need 10 TPCs.
  for (int i = 0; i < 30; ++i) ASSERT_TRUE(e->submit(qh, kernel(1, 160), Time{}).is_ok());
  ASSERT_TRUE(e->submit(qb, kernel(2, 100000), Time{}).is_ok());
  std::vector<AtomDispatch> out;
  e->dispatch(Time{}, out);
  TpcSet hp_tpcs, be_tpcs;
  for (const auto& d : out) (d.tenant == hp ? hp_tpcs : be_tpcs) |= d.tpcs;
  EXPECT_EQ(hp_tpcs, TpcSet::range(0, 10));
  EXPECT_EQ(be_tpcs, TpcSet::range(10, 66));  // the surplus, lent
  // A bigger kernel queued by the owner shrinks what may be lent.
  ASSERT_TRUE(e->submit(qh, kernel(3, 16 * 60), Time{}).is_ok());
  EXPECT_EQ(e->state().tenants[hp].demand(), 60);
}

// Atoms aimed at 400 us, at 20 us an atom and 8% tolerated: a floor of 250 us.
TestConfig atoms_400us() {
  TestConfig cfg;
  cfg.atoms.target = us(400);
  cfg.atoms.per_atom_cost = us(20);
  cfg.atoms.tolerated_overhead = 0.08;
  return cfg;
}

TEST(LithosRules, AtomsRespectTheFloorAndCoverTheGrid) {
  auto e = make_engine("lithos", atoms_400us());
  const QueueId q = *e->add_queue(*e->add_tenant(best_effort("be")));
  // Teach the predictor: 26400 blocks at 16/TPC = 25 waves on 66 TPCs; 10 ms.
  LaunchDesc big = kernel(42, 26400);
  FakeHardware hw(*e);
  ASSERT_TRUE(e->submit(q, big, Time{}).is_ok());
  auto first = hw.dispatch(Time{}, ms(10));
  ASSERT_EQ(first.size(), 1U);
  EXPECT_FALSE(first[0].split);  // never seen: runs whole
  hw.finish_until(time_at(ms(20)));
  e->sync(q);

  ASSERT_TRUE(e->submit(q, big, time_at(ms(20))).is_ok());
  std::uint64_t covered = 0;
  std::uint64_t expect_lo = 0;
  Time now = time_at(ms(20));
  int atoms = 0;
  for (int i = 0; i < 1000 && covered < 26400; ++i) {
    hw.finish_until(now);
    for (const auto& d : hw.dispatch(now, us(400))) {
      EXPECT_TRUE(d.split);
      EXPECT_EQ(d.blocks.lo, expect_lo);
      expect_lo = d.blocks.hi;
      covered += d.blocks.size();
      ++atoms;
      ASSERT_TRUE(d.predicted.has_value());
      if (!d.last) {
        EXPECT_GE(*d.predicted, us(250)) << "atom " << d.index;
      }
      EXPECT_LE(*d.predicted, us(800)) << "atom " << d.index;
    }
    now = std::min(hw.next_end(), e->next_wakeup());
  }
  EXPECT_EQ(covered, 26400U);
  EXPECT_GE(atoms, 12);  // 10 ms / ~400 us
  EXPECT_LE(atoms, 40);
}

// An owner taking its TPCs back waits for the borrower's atom in flight, so
// an atom runs no more waves than its target gives: the rest of a launch
// rides along with the atom before it only if it adds no wave.
TEST(LithosRules, TheRestOfALaunchRidesAlongOnlyIfItAddsNoWave) {
  auto e = make_engine("lithos", atoms_400us());
  const QueueId q = *e->add_queue(*e->add_tenant(best_effort("be")));
  FakeHardware hw(*e);
  // Teach the predictor: 10 waves of 66 TPCs x 16 blocks in 1 ms (100 us a
  // wave), so an atom is 4 waves (4224 blocks).
  ASSERT_TRUE(e->submit(q, kernel(42, 10560), Time{}).is_ok());
  ASSERT_EQ(hw.dispatch(Time{}, ms(1)).size(), 1U);
  hw.finish_until(time_at(ms(2)));
  e->sync(q);

  // 5 waves and 100 blocks: one atom of 4 waves, then the rest (2 waves),
  // where the old rule sent 6 waves at once (the rest was under half an atom).
  ASSERT_TRUE(e->submit(q, kernel(42, 5380), time_at(ms(2))).is_ok());
  std::vector<AtomDispatch> got;
  Time now = time_at(ms(2));
  for (int i = 0; i < 100 && (got.empty() || !got.back().last); ++i) {
    hw.finish_until(now);
    for (const auto& d : hw.dispatch(now, us(400))) got.push_back(d);
    now = std::min(hw.next_end(), e->next_wakeup());
  }
  ASSERT_EQ(got.size(), 2U);
  EXPECT_EQ(got[0].blocks.size(), 4224U);
  EXPECT_EQ(got[1].blocks.size(), 5380U - 4224U);
  for (const auto& d : got) {
    ASSERT_TRUE(d.predicted.has_value());
    EXPECT_LE(*d.predicted, us(400)) << "atom " << d.index;
  }
}

TEST(LithosRules, CooperativeKernelsAreNeverSplit) {
  auto e = make_engine("lithos");
  const QueueId q = *e->add_queue(*e->add_tenant(best_effort("be")));
  LaunchDesc coop = kernel(5, 26400);
  coop.cooperative = true;
  coop.duration_hint = ms(10);
  ASSERT_TRUE(e->submit(q, coop, Time{}).is_ok());
  std::vector<AtomDispatch> out;
  e->dispatch(Time{}, out);
  ASSERT_EQ(out.size(), 1U);
  EXPECT_FALSE(out[0].split);
  EXPECT_EQ(out[0].blocks.size(), 26400U);
}

// The safe-mask rule (launch_fit.hpp) inside the Engine: a placement that
// could hang a cluster launch is widened inside one GPC of the H100.
TEST(SafeMasks, ClusterPlacementsAreWidenedInsideOneGpc) {
  auto e = make_engine("static-partition");
  TenantSpec a = high("a", 54);
  const QueueId qa = *e->add_queue(*e->add_tenant(a));
  const QueueId qc = *e->add_queue(*e->add_tenant(best_effort("c")));  // TPCs 54-65: one per GPC 2-7, 62-65
  (void)qa;
  LaunchDesc k = kernel(7, 64, 128);
  k.cluster = Dim3{8, 1, 1};  // 8 SMs = 4 TPCs of one GPC; GPCs 6 and 7 hold 2 of the set each
  ASSERT_TRUE(e->submit(qc, k, Time{}).is_ok());
  std::vector<AtomDispatch> out;
  e->dispatch(Time{}, out);
  ASSERT_EQ(out.size(), 1U);
  const Topology& t = e->state().config.device.topology;
  EXPECT_GE(t.max_in_one_gpc(out[0].tpcs), 4);
  EXPECT_TRUE(out[0].tpcs.contains(TpcSet::range(54, 66)));
  EXPECT_EQ(out[0].tpcs.count(), 14);  // GPC 6 (58, 60 in the set) gets its lowest two: 6 and 14
  EXPECT_TRUE(out[0].tpcs.test(6));
  EXPECT_TRUE(out[0].tpcs.test(14));
  EXPECT_EQ(e->counters().widened, 1U);
}

// The lithos policy with a service (quota 40) running one 1 ms atom of one
// TPC's worth (the rest stays borrowable), and a best-effort tenant.
struct ServiceRunning {
  std::unique_ptr<Engine> e = make_engine("lithos");
  QueueId hp = *e->add_queue(*e->add_tenant(high("svc", 40)));
  QueueId be = *e->add_queue(*e->add_tenant(best_effort("be")));
  AtomId hp_atom = 0;
  ServiceRunning() {
    LaunchDesc svc = kernel(1, 16);
    svc.duration_hint = ms(1);
    EXPECT_TRUE(e->submit(hp, svc, Time{}).is_ok());
    std::vector<AtomDispatch> out;
    e->dispatch(Time{}, out);
    EXPECT_EQ(out.size(), 1U);
    if (!out.empty()) hp_atom = out[0].atom;
  }
  // Submits best-effort `launch` at 10 us: it must wait (one deferral); the
  // service's atom ends at 1 ms, nothing goes within its idle grace, and at
  // the next wakeup the launch is dispatched, which is returned.
  AtomDispatch dispatched_once_idle(const LaunchDesc& launch) {
    EXPECT_TRUE(e->submit(be, launch, Time{us(10)}).is_ok());
    std::vector<AtomDispatch> out;
    e->dispatch(Time{us(10)}, out);
    EXPECT_TRUE(out.empty()) << "deferred while the service is active";
    EXPECT_EQ(e->counters().deferred, 1U);
    e->atom_finished(hp_atom, Time{}, Time{ms(1)});
    e->dispatch(Time{ms(1)}, out);  // drained, but within its idle grace
    EXPECT_TRUE(out.empty());
    EXPECT_NE(e->next_wakeup(), kTimeNever);
    e->dispatch(e->next_wakeup(), out);
    EXPECT_EQ(out.size(), 1U);
    return out.empty() ? AtomDispatch{} : out[0];
  }
};

TEST(SafeMasks, BestEffortCooperativeLaunchesNeedingEverySmWaitForHighPriorityToIdle) {
  ServiceRunning s;
  // 8 blocks per SM x 132 SMs: the grid needs every SM at once.
  LaunchDesc coop = kernel(2, 8 * 132);
  coop.cooperative = true;
  coop.duration_hint = us(200);
  const AtomDispatch d = s.dispatched_once_idle(coop);
  EXPECT_EQ(d.tpcs, TpcSet::range(0, 66));
  EXPECT_EQ(d.blocks.size(), 8U * 132U);
}

// A best-effort CUDA graph whose descriptors were built earlier runs on that
// set whatever it is granted (LaunchDesc::pinned): it is granted a set that
// holds it, and waits while an active high-priority tenant owns part of it;
// pinned to TPCs nobody active owns, it goes at once.
TEST(SafeMasks, BestEffortPinnedLaunchesWaitForTheOwnersOfTheirTpcs) {
  ServiceRunning s;
  Engine* e = s.e.get();
  const QueueId be = s.be;
  std::vector<AtomDispatch> out;
  const TpcSet owned = e->state().tenants[0].owned;
  ASSERT_EQ(owned.count(), 40);

  // Pinned to unowned TPCs only: granted at once, on a set holding them.
  LaunchDesc free_graph = kernel(2, 1);
  free_graph.indivisible = true;
  free_graph.pinned = TpcSet::range(0, 66) - owned;
  free_graph.duration_hint = us(100);
  ASSERT_TRUE(e->submit(be, free_graph, Time{us(5)}).is_ok());
  out.clear();
  e->dispatch(Time{us(5)}, out);
  ASSERT_EQ(out.size(), 1U);
  EXPECT_TRUE(out[0].tpcs.contains(free_graph.pinned));
  EXPECT_TRUE((out[0].tpcs & owned).empty());
  e->atom_finished(out[0].atom, Time{us(5)}, Time{us(10)});

  // Pinned to one TPC of the service's quota: waits while the service is active.
  LaunchDesc graph = kernel(3, 1);
  graph.indivisible = true;
  graph.pinned = (TpcSet::range(0, 66) - owned) | owned.take_lowest(1);
  graph.duration_hint = us(100);
  EXPECT_TRUE(s.dispatched_once_idle(graph).tpcs.contains(graph.pinned));
}

// A launch whose kernels are not described (a CUDA graph launched whole
// before its descriptors exist: they keep the set of its grant for every
// replay) may use every TPC: beside a service it gets every TPC the service
// does not own, where its one-block grid alone would get one.
TEST(LithosRules, WholeDeviceLaunchesAreNotSizedByTheirGrid) {
  for (const bool whole : {false, true}) {
    SCOPED_TRACE(whole ? "whole device" : "one block");
    ServiceRunning s;
    LaunchDesc graph = kernel(7, 1);
    graph.indivisible = true;
    graph.whole_device = whole;
    graph.duration_hint = us(100);
    ASSERT_TRUE(s.e->submit(s.be, graph, Time{us(5)}).is_ok());
    std::vector<AtomDispatch> out;
    s.e->dispatch(Time{us(5)}, out);
    ASSERT_EQ(out.size(), 1U);
    const TpcSet owned = s.e->state().tenants[0].owned;
    EXPECT_TRUE((out[0].tpcs & owned).empty());
    EXPECT_EQ(out[0].tpcs.count(), whole ? 66 - owned.count() : 1) << out[0].tpcs.to_string();
  }
}

// A best-effort graph launched whole before its descriptors exist keeps the
// set of this grant for every later replay: it is never granted a borrowed
// TPC, which it would keep when the owner is back. With the service idle, it
// gets the TPCs no quota holds, not the service's too (before: all 66, and
// every later replay waited for the service to be idle and then held its
// quota); a graph pinned already, or a plain launch, still borrows; where
// quotas hold every TPC there is nothing to keep, and it borrows as before.
TEST(LithosRules, AWholeGraphsLastingSetIsNeverBorrowed) {
  for (const int quota : {40, 66}) {
    auto e = make_engine("lithos");
    const QueueId hp = *e->add_queue(*e->add_tenant(high("svc", quota)));
    const QueueId be = *e->add_queue(*e->add_tenant(best_effort("be")));
    (void)hp;
    const TpcSet owned = e->state().tenants[0].owned;
    ASSERT_EQ(owned.count(), quota);
    std::vector<AtomDispatch> out;
    Time now{ms(1)};
    auto granted = [&](const LaunchDesc& d) {
      EXPECT_TRUE(e->submit(be, d, now).is_ok());
      out.clear();
      e->dispatch(now, out);
      EXPECT_EQ(out.size(), 1U);
      if (out.empty()) return TpcSet{};
      e->atom_finished(out[0].atom, now, now + us(100));
      now = now + ms(1);
      return out[0].tpcs;
    };
    LaunchDesc graph = kernel(7, 1);
    graph.indivisible = true;
    graph.whole_device = true;
    graph.duration_hint = us(100);
    if (quota == 40) {
      EXPECT_EQ(granted(graph), TpcSet::range(0, 66) - owned) << "unbuilt: only what it may keep";
    } else {
      EXPECT_EQ(granted(graph), TpcSet::range(0, 66)) << "every TPC owned: borrowed, as before";
    }
    LaunchDesc built = graph;
    built.pinned = TpcSet::range(0, 66);
    EXPECT_EQ(granted(built), TpcSet::range(0, 66)) << "pinned already: the set it runs on";
    LaunchDesc plain = kernel(8, 2000);
    plain.duration_hint = us(100);
    EXPECT_TRUE(granted(plain).contains(owned.take_lowest(1))) << "a plain launch still borrows";
  }
}

// The daemon's two entry points beside submit: launches already on the GPU
// (high priority never waits) and queues whose process died.
TEST(Daemon, RunningLaunchesHoldTheirTpcsUntilTheyFinish) {
  auto e = make_engine("lithos");
  const QueueId hp = *e->add_queue(*e->add_tenant(high("svc", 40)));
  const QueueId be = *e->add_queue(*e->add_tenant(best_effort("train")));
  LaunchDesc g = kernel(1, 1000);
  g.duration_hint = ms(3);  // a CUDA graph: milliseconds of work
  auto running = e->submit_running(hp, g, TpcSet::range(0, 66), Time{});
  ASSERT_TRUE(running.is_ok());
  EXPECT_EQ(running->tpcs, TpcSet::range(0, 66));
  EXPECT_TRUE(e->state().active(0, Time{us(500)}));
  LaunchDesc t = kernel(2, 20000);
  t.duration_hint = ms(5);
  ASSERT_TRUE(e->submit(be, t, Time{us(10)}).is_ok());
  std::vector<AtomDispatch> out;
  e->dispatch(Time{us(10)}, out);
  EXPECT_TRUE(out.empty()) << "every TPC is under the service's graph, and its quota is its own";
  e->atom_finished(running->atom, Time{}, Time{ms(3)});
  e->dispatch(Time{ms(3) + us(50)}, out);
  ASSERT_FALSE(out.empty());
  EXPECT_EQ(out[0].queue, be);
  EXPECT_FALSE(e->submit_running(hp, g, TpcSet{}, Time{}).is_ok());
}

TEST(Daemon, ClosedQueuesGiveBackEverything) {
  auto e = make_engine("lithos");
  const TenantId bt = *e->add_tenant(best_effort("train"));
  const QueueId be = *e->add_queue(bt);
  LaunchDesc t = kernel(2, 20000);
  t.duration_hint = ms(5);
  ASSERT_TRUE(e->submit(be, t, Time{}).is_ok());
  ASSERT_TRUE(e->submit(be, t, Time{}).is_ok());
  std::vector<AtomDispatch> out;
  e->dispatch(Time{}, out);
  ASSERT_FALSE(out.empty());
  EXPECT_TRUE(e->state().tenants[bt].has_work());
  const auto released = e->close_queue(be, Time{us(100)});
  EXPECT_EQ(released.size(), out.size());
  EXPECT_FALSE(e->state().tenants[bt].has_work());
  EXPECT_EQ(e->state().tenants[bt].max_need, 0);
  EXPECT_TRUE(e->state().held(bt).empty());
  EXPECT_FALSE(e->submit(be, t, Time{}).is_ok()) << "a closed queue takes no work";
  // A late completion of a released atom is ignored; the id is reused.
  e->atom_finished(released[0], Time{}, Time{us(200)});
  const QueueId again = *e->add_queue(bt);
  EXPECT_EQ(again, be);
  ASSERT_TRUE(e->submit(again, t, Time{us(300)}).is_ok());
}

TEST(LithosRules, ThrottleKeepsAboutOneWindowInFlight) {
  TestConfig cfg;
  cfg.throttle = us(100);
  auto e = make_engine("lithos", cfg);
  const QueueId q = *e->add_queue(*e->add_tenant(high("hp", 66)));
  LaunchDesc k = kernel(1, 1000);
  k.duration_hint = us(30);
  for (int i = 0; i < 100; ++i) ASSERT_TRUE(e->submit(q, k, Time{}).is_ok());
  std::vector<AtomDispatch> out;
  e->dispatch(Time{}, out);
  // 30 us each: dispatch stops once more than 100 us is in flight: 4 atoms.
  EXPECT_EQ(out.size(), 4U);
  EXPECT_EQ(e->counters().throttled, 1U);
  EXPECT_EQ(e->next_wakeup(), time_at(us(20)));  // 120 us of work - 100 us window
  // MPS has no throttle: everything goes at once.
  auto m = make_engine("mps");
  const QueueId qm = *m->add_queue(*m->add_tenant(high("hp", 0)));
  for (int i = 0; i < 100; ++i) ASSERT_TRUE(m->submit(qm, k, Time{}).is_ok());
  out.clear();
  m->dispatch(Time{}, out);
  EXPECT_EQ(out.size(), 100U);
}

TEST(LithosRules, ThrottleFollowsAtomsThatEndEarlyOrLate) {
  TestConfig cfg;
  cfg.throttle = us(100);
  auto e = make_engine("lithos", cfg);
  const QueueId q = *e->add_queue(*e->add_tenant(high("hp", 66)));
  LaunchDesc k = kernel(1, 1000);
  k.duration_hint = us(30);
  for (int i = 0; i < 100; ++i) ASSERT_TRUE(e->submit(q, k, Time{}).is_ok());
  std::vector<AtomDispatch> out;
  e->dispatch(Time{}, out);
  ASSERT_EQ(out.size(), 4U);  // 120 us predicted in flight
  // The first ends at 5 us, 25 us early: the three behind it move up, 95 us
  // of work is left, and one more atom fits the window.
  e->atom_finished(out[0].atom, Time{}, time_at(us(5)));
  std::vector<AtomDispatch> more;
  e->dispatch(time_at(us(5)), more);
  EXPECT_EQ(more.size(), 1U);
  EXPECT_EQ(e->state().queues[q].tail_end, time_at(us(125)));
  // The second was due at 35 us and ends at 100 us: the three behind it
  // move back by 65 us: 90 us of work is left, and one more atom fits.
  e->atom_finished(out[1].atom, Time{}, time_at(us(100)));
  EXPECT_EQ(e->state().queues[q].tail_end, time_at(us(190)));
  more.clear();
  e->dispatch(time_at(us(100)), more);
  EXPECT_EQ(more.size(), 1U);
  EXPECT_EQ(e->state().queues[q].tail_end, time_at(us(220)));
}

// The atoms behind one that ends early or late move by its error, and none
// is predicted to end before the queue's last completion; immediate launches
// (lithosd's hp tenants) may have tens of thousands in flight in one queue,
// and each completion moves them all in one step.
TEST(LithosRules, AtomsBehindACompletionMoveByItsError) {
  auto e = make_engine("lithos");
  const QueueId q = *e->add_queue(*e->add_tenant(high("hp", 66)));
  LaunchDesc k = kernel(1, 1000);
  k.duration_hint = us(10);
  const TpcSet all = e->state().device_tpcs;
  constexpr int kInFlight = 100000;
  std::vector<AtomId> atoms;
  for (int i = 0; i < kInFlight; ++i) {
    auto d = e->submit_running(q, k, all, Time{});
    ASSERT_TRUE(d.is_ok());
    atoms.push_back(d->atom);
  }
  const EngineState& st = e->state();
  auto end_of = [&](int i) { return st.predicted_end(st.atoms[atoms[static_cast<std::size_t>(i)]]); };
  EXPECT_EQ(end_of(0), time_at(us(10)));
  EXPECT_EQ(end_of(kInFlight - 1), time_at(us(10.0 * kInFlight)));
  // The first ends 5 us early: everything behind it moves up by 5 us.
  e->atom_finished(atoms[0], Time{}, time_at(us(5)));
  EXPECT_EQ(end_of(1), time_at(us(15)));
  EXPECT_EQ(st.queues[q].tail_end, time_at(us(10.0 * kInFlight - 5)));
  // The second ends 100 us late: the rest move back by 100 us.
  e->atom_finished(atoms[1], Time{}, time_at(us(115)));
  EXPECT_EQ(end_of(2), time_at(us(125)));
  // The third ends 5 us early, at 120 us: the fourth is due at 130 us.
  e->atom_finished(atoms[2], Time{}, time_at(us(120)));
  EXPECT_EQ(end_of(3), time_at(us(130)));
  // Every other one ends at once, at 200 us: those behind are never
  // predicted to end before 200 us, and the queue's tail follows.
  for (int i = 3; i < kInFlight / 2; ++i)
    e->atom_finished(atoms[static_cast<std::size_t>(i)], Time{}, time_at(us(200)));
  EXPECT_GE(end_of(kInFlight / 2), time_at(us(200)));
  EXPECT_EQ(end_of(kInFlight - 1), st.queues[q].tail_end);
  for (int i = kInFlight / 2; i < kInFlight; ++i)
    e->atom_finished(atoms[static_cast<std::size_t>(i)], Time{}, time_at(us(300)));
  EXPECT_EQ(st.queues[q].inflight_atoms, 0U);
  EXPECT_EQ(st.queues[q].tail_end, time_at(us(300)));
  EXPECT_FALSE(st.tenants[0].has_work());
}

// Launches made at once (lithosd's hp tenants, and be tenants running
// free) go where the policy says: under lithos, everything but another
// high-priority tenant's quota, active or not (a graph's mask outlives the
// moment it was built in).
TEST(LithosRules, ImmediateSetLeavesOtherOwnersQuotasAlone) {
  auto e = make_engine("lithos");
  const TenantId a = *e->add_tenant(high("a", 40));
  const TenantId b = *e->add_tenant(high("b", 16));
  const TenantId c = *e->add_tenant(best_effort("c"));
  const QueueId qb = *e->add_queue(b);
  const TpcSet all = TpcSet::range(0, 66);
  EXPECT_EQ(e->immediate_set(a, Time{}), all - TpcSet::range(40, 56));  // b idle: still its quota
  EXPECT_EQ(e->immediate_set(b, Time{}), all - TpcSet::range(0, 40));
  ASSERT_TRUE(e->submit(qb, kernel(1, 1000), Time{}).is_ok());
  EXPECT_EQ(e->immediate_set(a, Time{}), all - TpcSet::range(40, 56));
  EXPECT_EQ(e->immediate_set(b, Time{}), all - TpcSet::range(0, 40));  // its own quota included
  EXPECT_EQ(e->immediate_set(c, Time{}), TpcSet::range(56, 66));
  auto f = make_engine("lithos");
  (void)*f->add_tenant(high("a", 40));
  const TenantId free = *f->add_tenant(best_effort("c"));
  EXPECT_EQ(f->immediate_set(free, Time{}), all) << "running free: no service has a queue";
  EXPECT_TRUE(e->immediate_set(TenantId{9}, Time{}).empty());
  // Other policies: a static partition's own set; MPS the whole device.
  auto sp = make_engine("static-partition");
  const TenantId sa = *sp->add_tenant(high("a", 40));
  (void)*sp->add_tenant(best_effort("c"));
  EXPECT_EQ(sp->immediate_set(sa, Time{}), TpcSet::range(0, 40));
  auto m = make_engine("mps");
  EXPECT_EQ(m->immediate_set(*m->add_tenant(high("a", 40)), Time{}), all);
}

// With share_unowned off, a high-priority tenant's launches made at once go
// to its quota and to the unowned TPCs no best-effort atom holds (as place()
// picks them), and a graph's lasting set still reaches every unowned TPC.
TEST(LithosRules, ImmediateSetSkipsUnownedTpcsUnderAtomsWhenNotShared) {
  TestConfig cfg;
  cfg.policy.lithos.share_unowned = false;
  auto e = make_engine("lithos", cfg);
  const TenantId a = *e->add_tenant(high("a", 40));
  const TenantId c = *e->add_tenant(best_effort("c"));
  (void)*e->add_queue(a);  // a service is there: c does not run free
  const QueueId qc = *e->add_queue(c);
  const TpcSet all = TpcSet::range(0, 66);
  EXPECT_EQ(e->immediate_set(a, Time{}), all) << "nothing runs: every unowned TPC is free";
  LaunchDesc k = kernel(1, 1000);
  k.duration_hint = ms(1);
  ASSERT_TRUE(e->submit(qc, k, Time{}).is_ok());
  std::vector<AtomDispatch> out;
  e->dispatch(Time{}, out);
  ASSERT_EQ(out.size(), 1U);
  EXPECT_EQ(out[0].tpcs & TpcSet::range(40, 66), TpcSet::range(40, 66)) << "c runs on every unowned TPC";
  EXPECT_EQ(e->immediate_set(a, Time{}), TpcSet::range(0, 40)) << "c's atom holds the unowned TPCs";
  EXPECT_EQ(e->immediate_set(a, Time{}, /*lasting=*/true), all) << "a graph's set must not depend on the moment";
  EXPECT_EQ(e->immediate_set(a, time_at(us(950))), all) << "it ends within the steal lookahead: free";
  (void)e->atom_finished(out[0].atom, Time{}, time_at(us(500)));
  EXPECT_EQ(e->immediate_set(a, time_at(us(500))), all);

  // Shared (the default): the unowned TPCs under c's atom as well.
  auto s = make_engine("lithos");
  const TenantId sa = *s->add_tenant(high("a", 40));
  const TenantId sc = *s->add_tenant(best_effort("c"));
  (void)*s->add_queue(sa);
  ASSERT_TRUE(s->submit(*s->add_queue(sc), k, Time{}).is_ok());
  out.clear();
  s->dispatch(Time{}, out);
  ASSERT_EQ(out.size(), 1U);
  EXPECT_EQ(s->immediate_set(sa, Time{}), all);
}

// A service's launch made at once on its quota and the TPCs no one owns
// (share_unowned, the default) keeps best-effort atoms off all of them until
// it is within the steal lookahead of its end (hp_holds_unowned, the
// default). With hp_holds_unowned off, only its quota counts as busy for a
// best-effort borrower: a best-effort launch goes out at once on the unowned
// TPCs under the service's launch, and never on the service's quota.
TEST(LithosRules, AServicesLaunchKeepsBestEffortOffUnownedTpcsOnlyIfItHoldsThem) {
  for (const bool holds : {true, false}) {
    SCOPED_TRACE(holds ? "hp_holds_unowned = true" : "hp_holds_unowned = false");
    TestConfig cfg;
    cfg.policy.lithos.hp_holds_unowned = holds;
    auto e = make_engine("lithos", cfg);
    const TenantId a = *e->add_tenant(high("a", 40));
    const TenantId c = *e->add_tenant(best_effort("c"));
    const QueueId qa = *e->add_queue(a);
    const QueueId qc = *e->add_queue(c);
    const TpcSet quota = TpcSet::range(0, 40);
    const TpcSet unowned = TpcSet::range(40, 66);
    ASSERT_EQ(e->state().tenants[a].owned, quota);
    // The service launches at once on the whole GPU (its quota and the
    // unowned TPCs, as its immediate set says), for 1 ms.
    const TpcSet whole = e->immediate_set(a, Time{});
    ASSERT_EQ(whole, quota | unowned);
    LaunchDesc hp = kernel(1, 1000);
    hp.duration_hint = ms(1);
    auto running = e->submit_running(qa, hp, whole, Time{});
    ASSERT_TRUE(running.is_ok());
    // A best-effort launch that could use every TPC arrives while it runs.
    LaunchDesc be = kernel(2, 20000);
    be.duration_hint = us(500);
    ASSERT_TRUE(e->submit(qc, be, time_at(us(100))).is_ok());
    std::vector<AtomDispatch> out;
    e->dispatch(time_at(us(100)), out);
    if (holds) {
      EXPECT_TRUE(out.empty()) << "the service's launch holds every TPC it runs on, unowned ones included";
      EXPECT_EQ(e->next_wakeup(), time_at(ms(1)) - cfg.policy.lithos.steal_lookahead)
          << "the Engine looks again when the launch is within the lookahead of its end";
      out.clear();
      e->dispatch(time_at(ms(1)) - cfg.policy.lithos.steal_lookahead, out);
      ASSERT_FALSE(out.empty()) << "within the lookahead: the unowned TPCs count as free";
      EXPECT_EQ(out[0].tpcs & quota, TpcSet{}) << "a is active: its quota is not lent";
    } else {
      ASSERT_FALSE(out.empty()) << "the unowned TPCs under the service's launch are placed on at once";
      EXPECT_EQ(out[0].queue, qc);
      EXPECT_EQ(out[0].tpcs, unowned) << out[0].tpcs.to_string();
      for (const AtomDispatch& d : out) {
        EXPECT_EQ(d.tpcs & quota, TpcSet{}) << "never on the service's quota: " << d.tpcs.to_string();
      }
    }
  }
}

// A service that pauses best-effort work (TenantSpec::pauses_best_effort):
// while its launch runs, and for the idle grace after its end, no
// best-effort atom starts, not even on the TPCs no one owns; then the queued
// one goes. A service without it leaves the unowned TPCs to the trainer.
TEST(LithosRules, AServiceThatPausesBestEffortKeepsEveryAtomBackWhileItWorks) {
  for (const bool pauses : {true, false}) {
    SCOPED_TRACE(pauses ? "pauses_best_effort" : "default");
    TestConfig cfg;
    cfg.policy.lithos.hp_holds_unowned = false;  // else its launch on the unowned TPCs holds them anyway
    auto e = make_engine("lithos", cfg);
    TenantSpec svc = high("a", 40);
    svc.pauses_best_effort = pauses ? BestEffortPause::kAlways : BestEffortPause::kNever;
    const TenantId a = *e->add_tenant(svc);
    const TenantId c = *e->add_tenant(best_effort("c"));
    const QueueId qa = *e->add_queue(a);
    const QueueId qc = *e->add_queue(c);
    LaunchDesc hp = kernel(1, 100);
    hp.duration_hint = us(300);
    auto running = e->submit_running(qa, hp, e->immediate_set(a, Time{}), Time{});
    ASSERT_TRUE(running.is_ok());
    LaunchDesc be = kernel(2, 20000);
    be.duration_hint = us(500);
    ASSERT_TRUE(e->submit(qc, be, time_at(us(10))).is_ok());
    std::vector<AtomDispatch> out;
    e->dispatch(time_at(us(10)), out);
    if (!pauses) {
      ASSERT_FALSE(out.empty()) << "the unowned TPCs are the trainer's";
      EXPECT_EQ(out[0].tpcs & TpcSet::range(0, 40), TpcSet{});
      continue;
    }
    EXPECT_TRUE(out.empty()) << "nothing starts while the service works";
    (void)e->atom_finished(running->atom, Time{}, time_at(us(300)));
    out.clear();
    e->dispatch(time_at(us(300)), out);
    EXPECT_TRUE(out.empty()) << "nor within the idle grace after its end";
    const Time grace_end = time_at(us(300)) + cfg.idle_grace;
    EXPECT_LE(e->next_wakeup(), grace_end) << "the Engine looks again when the grace ends";
    out.clear();
    e->dispatch(grace_end, out);
    ASSERT_FALSE(out.empty()) << "after the grace the trainer's atom goes";
    EXPECT_EQ(out[0].queue, qc);
    EXPECT_EQ(e->state().tenants[c].spec.pauses_best_effort, BestEffortPause::kNever);
  }
}

// BestEffortPause::kAuto, driven as lithosd drives it: a service launches
// one kernel per request (reported running, never waiting) and idles 200 us
// between requests; a trainer always has work queued. A service kernel
// takes 100 us with no best-effort atom beside it and `slowdown` times that
// with one (memory interference, which no TPC mask divides).
struct AutoPauseRun {
  std::vector<PauseReport> reports;  // after each request
  std::uint64_t be_atoms = 0, be_atoms_during_requests = 0;
};
// `carry`: the trainer's atoms started between requests are still on the
// GPU when the next request starts (long atoms), so a pause, which only
// holds back new ones, leaves the service as slow.
AutoPauseRun run_auto_pause(double slowdown, int requests, const TestConfig& cfg, double gap_us = 200.0,
                            bool carry = false) {
  AutoPauseRun r;
  auto e = make_engine("lithos", cfg);
  TenantSpec svc = high("svc", 40);
  svc.pauses_best_effort = BestEffortPause::kAuto;
  const TenantId a = *e->add_tenant(svc);
  const TenantId c = *e->add_tenant(best_effort("train"));
  const QueueId qa = *e->add_queue(a);
  const QueueId qc = *e->add_queue(c);
  std::vector<AtomDispatch> be;  // the trainer's atoms in flight
  Time t{};
  auto feed = [&] {  // the trainer's queue never runs dry
    if (e->state().tenants[c].pending_launches == 0) {
      LaunchDesc l = kernel(2, 20000);
      l.duration_hint = us(50);
      EXPECT_TRUE(e->submit(qc, l, t).is_ok());
    }
  };
  auto dispatch = [&](bool during) {
    std::vector<AtomDispatch> out;
    e->dispatch(t, out);
    for (const AtomDispatch& d : out) {
      if (d.tenant != c) continue;
      be.push_back(d);
      ++r.be_atoms;
      if (during) ++r.be_atoms_during_requests;
    }
  };
  auto finish_be = [&] {
    for (const AtomDispatch& d : be) (void)e->atom_finished(d.atom, t - us(1), t);
    be.clear();
  };
  for (int i = 0; i < requests; ++i) {
    feed();
    const bool beside_at_start = !be.empty();
    auto running = e->submit_running(qa, kernel(1, 100), e->immediate_set(a, t), t);
    EXPECT_TRUE(running.is_ok());
    dispatch(/*during=*/true);  // what the trainer may start while the service works
    const bool beside = beside_at_start || !be.empty();
    const Time start = t;
    t += beside ? us(100.0 * slowdown) : us(100);
    finish_be();
    (void)e->atom_finished(running->atom, start, t);
    r.reports.push_back(*e->pause_report(a, t));
    // Between requests: the trainer runs, its atoms done before the next.
    t += cfg.idle_grace + us(1);
    feed();
    dispatch(/*during=*/false);
    t += us(gap_us - 1.0) - cfg.idle_grace;
    if (!carry) finish_be();
  }
  return r;
}

TestConfig auto_pause_config() {
  TestConfig cfg;
  cfg.policy.lithos.hp_holds_unowned = false;
  cfg.policy.lithos.pause_samples = 8;
  cfg.policy.lithos.pause_work = us(500);
  cfg.policy.lithos.pause_hold = ms(5);
  cfg.policy.lithos.pause_hold_max = ms(20);
  cfg.policy.lithos.pause_probe = ms(50);
  return cfg;
}

// A service slowed 3x beside best-effort atoms: a probe learns its work
// alone, the first verdict measures 3x and pauses best effort, each trial
// after a hold confirms it and the hold doubles (up to its bound); the
// trainer still runs between requests.
TEST(LithosRules, AnAutomaticPauseFollowsTheMeasuredSlowdown) {
  const TestConfig cfg = auto_pause_config();
  const AutoPauseRun r = run_auto_pause(3.0, 600, cfg);
  const PauseReport& last = r.reports.back();
  EXPECT_EQ(last.mode, BestEffortPause::kAuto);
  EXPECT_GE(last.probes, 1U) << "the service never ran without best effort: it was probed";
  EXPECT_GE(last.verdicts, 3U);
  EXPECT_GE(last.pauses, 3U);
  EXPECT_NEAR(last.slowdown, 3.0, 0.01);
  ASSERT_EQ(last.recent_count, std::min<std::size_t>(last.verdicts, PauseReport::kRecent));
  for (std::size_t i = 0; i < last.recent_count; ++i) EXPECT_NEAR(last.recent[i], 3.0, 0.01) << i;
  // The first request that was paused, and how long each pause held.
  std::vector<std::size_t> paused_from;
  for (std::size_t i = 0; i < r.reports.size(); ++i) {
    if (r.reports[i].phase == "paused" && (i == 0 || r.reports[i - 1].phase != "paused")) paused_from.push_back(i);
  }
  ASSERT_GE(paused_from.size(), 4U);
  // Requests are about 300 us apart while paused (100 us + 200 us idle):
  // holds of 5, 10, 20, 20 ms span about 17, 33, 67, 67 requests.
  const auto span = [&](std::size_t k) {
    std::size_t n = 0;
    for (std::size_t i = paused_from[k]; i < r.reports.size() && r.reports[i].phase == "paused"; ++i) ++n;
    return n;
  };
  EXPECT_NEAR(static_cast<double>(span(0)), 17.0, 2.0);
  EXPECT_NEAR(static_cast<double>(span(1)), 33.0, 2.0);
  EXPECT_NEAR(static_cast<double>(span(2)), 67.0, 2.0);
  EXPECT_NEAR(static_cast<double>(span(3)), 67.0, 2.0) << "the hold stops at pause_hold_max";
  std::size_t paused = 0;
  for (const PauseReport& p : r.reports) paused += p.phase != "sharing" ? 1U : 0U;
  EXPECT_GT(paused, r.reports.size() * 8U / 10U) << "paused for most of the run";
  EXPECT_GT(r.be_atoms - r.be_atoms_during_requests, 500U) << "the trainer keeps running between requests";
}

// A service that best effort does not slow: one probe, then verdicts of
// 1.0x, and best effort runs beside it for the rest of the run.
TEST(LithosRules, AnAutomaticPauseLeavesAnUnaffectedServiceSharing) {
  const TestConfig cfg = auto_pause_config();
  const AutoPauseRun r = run_auto_pause(1.0, 600, cfg);
  const PauseReport& last = r.reports.back();
  EXPECT_EQ(last.phase, "sharing");
  EXPECT_EQ(last.probes, 1U);
  EXPECT_EQ(last.pauses, 0U);
  EXPECT_GE(last.verdicts, 10U);
  EXPECT_NEAR(last.slowdown, 1.0, 0.01);
  EXPECT_GT(r.be_atoms_during_requests, 500U) << "the trainer runs beside the service";
  // Just under the threshold is no pause either; just over is.
  EXPECT_EQ(run_auto_pause(1.1, 300, cfg).reports.back().pauses, 0U);
  EXPECT_GE(run_auto_pause(1.2, 300, cfg).reports.back().pauses, 1U);
}

// A pause that does not make the service faster (what slows it is the
// best-effort atoms already on the GPU when its work starts, which a pause
// does not hold back) is measured as such at the verdict after it: no pause
// again for pause_hold_max, and the trainer runs beside the service.
TEST(LithosRules, AnAutomaticPauseThatDoesNotHelpIsNotRepeated) {
  TestConfig cfg = auto_pause_config();
  cfg.policy.lithos.pause_hold_max = ms(1000);  // longer than the run: one experiment
  const AutoPauseRun r = run_auto_pause(3.0, 400, cfg, 200.0, /*carry=*/true);
  const PauseReport& last = r.reports.back();
  EXPECT_EQ(last.pauses, 1U) << "the first pause is the experiment";
  // With pause_hold_max shorter than the run, the experiment is repeated
  // once per pause_hold_max (120 ms of requests, 20 ms: about 6).
  const AutoPauseRun again = run_auto_pause(3.0, 400, auto_pause_config(), 200.0, /*carry=*/true);
  EXPECT_GE(again.reports.back().pauses, 3U);
  EXPECT_LE(again.reports.back().pauses, 8U);
  EXPECT_GE(last.probes, 1U);
  EXPECT_NEAR(last.slowdown, 3.0, 0.01);
  EXPECT_NEAR(last.paused_slowdown, 3.0, 0.01);
  EXPECT_NEAR(last.gain, 1.0, 0.01);
  EXPECT_EQ(last.phase, "sharing");
  // The pause that helps (the atoms end before each request) is measured so.
  const AutoPauseRun helped = run_auto_pause(3.0, 400, cfg);
  EXPECT_NEAR(helped.reports.back().paused_slowdown, 1.0, 0.01);
  EXPECT_NEAR(helped.reports.back().gain, 3.0, 0.01);
}

// A tenant that keeps the GPU busy nearly all the time (25 us between its
// runs) is slowed 3x, but pausing for it would leave best effort no time:
// verdicts, no pause, and the trainer runs beside it.
TEST(LithosRules, AnAutomaticPauseNeverStopsBestEffortForABusyTenant) {
  const TestConfig cfg = auto_pause_config();
  const AutoPauseRun r = run_auto_pause(3.0, 300, cfg, /*gap_us=*/25.0);
  const PauseReport& last = r.reports.back();
  EXPECT_GE(last.verdicts, 5U);
  EXPECT_EQ(last.pauses, 0U);
  EXPECT_NEAR(last.slowdown, 3.0, 0.01);
  EXPECT_GT(last.busy, cfg.policy.lithos.pause_busy_max);
  EXPECT_GT(r.be_atoms_during_requests, 200U);
  // The same tenant with room between its runs is paused.
  const AutoPauseRun spaced = run_auto_pause(3.0, 300, cfg);
  EXPECT_GE(spaced.reports.back().pauses, 1U);
  EXPECT_LT(spaced.reports.back().busy, cfg.policy.lithos.pause_busy_max);
}

// hp_holds_unowned applies to best-effort borrowers only: with it off, a
// second service still does not borrow the unowned TPCs under the first
// one's launch; it runs on its own quota.
TEST(LithosRules, NotHoldingUnownedTpcsLeavesHighPriorityBorrowersAlone) {
  TestConfig cfg;
  cfg.policy.lithos.hp_holds_unowned = false;
  auto e = make_engine("lithos", cfg);
  const TenantId a = *e->add_tenant(high("a", 40));
  const TenantId b = *e->add_tenant(high("b", 10));
  const QueueId qa = *e->add_queue(a);
  const QueueId qb = *e->add_queue(b);
  const TpcSet b_quota = TpcSet::range(40, 50);
  ASSERT_EQ(e->state().tenants[b].owned, b_quota);
  // a launches at once on its quota and the unowned TPCs, for 1 ms.
  const TpcSet a_set = e->immediate_set(a, Time{});
  ASSERT_EQ(a_set, TpcSet::range(0, 66) - b_quota);
  LaunchDesc hp = kernel(1, 1000);
  hp.duration_hint = ms(1);
  ASSERT_TRUE(e->submit_running(qa, hp, a_set, Time{}).is_ok());
  LaunchDesc wide = kernel(2, 20000);
  wide.duration_hint = us(500);
  ASSERT_TRUE(e->submit(qb, wide, time_at(us(100))).is_ok());
  std::vector<AtomDispatch> out;
  e->dispatch(time_at(us(100)), out);
  ASSERT_EQ(out.size(), 1U);
  EXPECT_EQ(out[0].queue, qb);
  EXPECT_EQ(out[0].tpcs, b_quota) << "the unowned TPCs under a's launch stay a's: " << out[0].tpcs.to_string();
}

// An hp launch that runs past its predicted end still holds its TPCs: no
// best-effort atom is placed on them until it is seen ending, or until it
// is overdue by as long again as it was predicted to run (a marker that
// never lands must not hold them for ever). Before, an overdue launch's
// TPCs counted as free at once.
TEST(LithosRules, AnOverdueLaunchKeepsItsTpcsForAsLongAgain) {
  auto e = make_engine("lithos");
  const TenantId a = *e->add_tenant(high("a", 40));
  const TenantId c = *e->add_tenant(best_effort("c"));
  const QueueId qa = *e->add_queue(a);
  const QueueId qc = *e->add_queue(c);
  LaunchDesc hp = kernel(1, 1000);
  hp.duration_hint = ms(1);
  auto running = e->submit_running(qa, hp, TpcSet::range(0, 66), Time{});
  ASSERT_TRUE(running.is_ok());
  LaunchDesc be = kernel(2, 100);
  be.duration_hint = us(50);
  ASSERT_TRUE(e->submit(qc, be, Time{}).is_ok());
  std::vector<AtomDispatch> out;
  e->dispatch(time_at(us(500)), out);
  EXPECT_TRUE(out.empty()) << "the hp launch runs until 1 ms";
  e->dispatch(time_at(us(1500)), out);
  EXPECT_TRUE(out.empty()) << "overdue by 0.5 ms: still running";
  EXPECT_LE(e->next_wakeup(), time_at(ms(2))) << "the Engine looks again when it counts as gone";
  e->dispatch(time_at(us(2100)), out);
  ASSERT_EQ(out.size(), 1U) << "overdue by more than its own 1 ms: counted as gone";
  EXPECT_EQ(out[0].tpcs & TpcSet::range(0, 40), TpcSet{}) << "a is active: its quota is not lent";
  // Seen ending, its TPCs are free at once.
  (void)e->atom_finished(running->atom, Time{}, time_at(us(2200)));
  (void)e->atom_finished(out[0].atom, time_at(us(2100)), time_at(us(2200)));
  auto again = e->submit_running(qa, hp, TpcSet::range(0, 66), time_at(us(2200)));
  ASSERT_TRUE(again.is_ok());
  (void)e->atom_finished(again->atom, time_at(us(2200)), time_at(us(2300)));
  ASSERT_TRUE(e->submit(qc, be, time_at(us(2300))).is_ok());
  out.clear();
  e->dispatch(time_at(us(2300)), out);
  EXPECT_EQ(out.size(), 1U);
}

// The throttle holds a best-effort queue's borrowed work to `throttle` and
// its work on no one's TPCs to `throttle_unborrowed`: the atoms that could
// delay an owner start soon after their grant, the others keep the queue
// from running dry between grants (measured on the H100: one 100 us window
// for all cost a trainer 15% with the GPU to itself).
TEST(LithosRules, BestEffortWorkOnNoOnesTpcsQueuesDeeperThanBorrowedWork) {
  TestConfig cfg;
  cfg.throttle = us(100);
  cfg.throttle_unborrowed = us(1000);
  cfg.policy.lithos.max_stolen_atoms = 2;
  auto e = make_engine("lithos", cfg);
  const TenantId hp = *e->add_tenant(high("hp", 40));
  const TenantId be = *e->add_tenant(best_effort("be"));
  (void)*e->add_queue(hp);  // a service is there (idle): no running free
  const QueueId q = *e->add_queue(be);
  const TpcSet hp_owned = e->state().tenants[hp].owned;
  ASSERT_EQ(hp_owned.count(), 40);
  // Kernels that want the whole GPU (30 us on it; three waves, 90 us, on 26
  // TPCs), once the service has been idle past its grace: two atoms borrow
  // its TPCs (max_stolen_atoms), the rest run on the 26 no one owns, until
  // more than 1 ms of work is in flight: 2 x 30 + 11 x 90 us.
  LaunchDesc k = kernel(1, 1000);
  k.duration_hint = us(30);
  for (int i = 0; i < 100; ++i) ASSERT_TRUE(e->submit(q, k, Time{}).is_ok());
  const Time t0 = time_at(us(100));
  std::vector<AtomDispatch> out;
  e->dispatch(t0, out);
  ASSERT_EQ(out.size(), 13U);
  EXPECT_TRUE(out[0].tpcs.intersects(hp_owned));
  EXPECT_TRUE(out[1].tpcs.intersects(hp_owned));
  for (std::size_t i = 2; i < out.size(); ++i) EXPECT_EQ(out[i].tpcs, TpcSet::range(0, 66) - hp_owned) << i;
  EXPECT_EQ(e->next_wakeup(), t0 + us(1050 - 1000));
  // Atoms end as predicted. All but two done: 180 us in flight. The next
  // atom would borrow again (the stolen ones are done), so it waits until
  // the queue is within the 100 us window rather than go out narrow.
  Time end = t0;
  auto finish = [&](const AtomDispatch& d) {
    const Time start = end;
    end = end + d.predicted.value_or(Duration{});
    e->atom_finished(d.atom, start, end);
  };
  for (std::size_t i = 0; i + 2 < out.size(); ++i) finish(out[i]);
  std::vector<AtomDispatch> more;
  e->dispatch(end, more);
  EXPECT_TRUE(more.empty());
  EXPECT_EQ(e->next_wakeup(), end + us(180 - 100));
  finish(out[out.size() - 2]);  // 90 us left: within the window
  e->dispatch(end, more);
  ASSERT_FALSE(more.empty());
  EXPECT_TRUE(more[0].tpcs.intersects(hp_owned));
  // With the same window for everything (the default before), the queue
  // stops at 100 us.
  TestConfig one = cfg;
  one.throttle_unborrowed = us(100);
  auto o = make_engine("lithos", one);
  (void)*o->add_tenant(high("hp", 40));
  const QueueId oq = *o->add_queue(*o->add_tenant(best_effort("be")));
  (void)*o->add_queue(TenantId{0});
  for (int i = 0; i < 100; ++i) ASSERT_TRUE(o->submit(oq, k, Time{}).is_ok());
  out.clear();
  o->dispatch(t0, out);
  EXPECT_EQ(out.size(), 3U);  // 30 + 30 + 90 us
}

// Short kernels borrowing an idle owner's TPCs: the throttle bounds how
// much is in flight, and the default count of borrowed atoms (16) does not
// cut in before it. With the old default of 2, the atoms past the second
// ran on the 26 TPCs no one owns though every owner was idle (measured on
// the H100: hybrid-stacking training 0.41x with 2, 0.45x with 16).
TEST(LithosRules, ShortBorrowedAtomsAreBoundByTheThrottleNotTheirCount) {
  for (const std::uint32_t stolen : {16U, 2U}) {
    TestConfig cfg;
    cfg.throttle = us(100);
    if (stolen != 16) cfg.policy.lithos.max_stolen_atoms = stolen;
    ASSERT_EQ(cfg.policy.lithos.max_stolen_atoms, stolen);
    auto e = make_engine("lithos", cfg);
    const TenantId hp = *e->add_tenant(high("hp", 40));
    const QueueId q = *e->add_queue(*e->add_tenant(best_effort("be")));
    (void)*e->add_queue(hp);  // a service is there (idle): no running free
    const TpcSet hp_owned = e->state().tenants[hp].owned;
    LaunchDesc k = kernel(1, 1000);  // one wave on 63 TPCs (16 blocks a TPC)
    k.duration_hint = us(10);        // 10 us on the whole GPU, three waves (30 us) on 26 TPCs
    const TpcSet unowned = TpcSet::range(0, 66) - hp_owned;
    const auto wide = [&](const TpcSet& s) { return s.count() == 63 && s.contains(unowned); };
    for (int i = 0; i < 100; ++i) ASSERT_TRUE(e->submit(q, k, Time{}).is_ok());
    std::vector<AtomDispatch> out;
    e->dispatch(time_at(us(100)), out);
    if (stolen == 16) {
      // Atoms go out while at most 100 us is in flight: 11 x 10 us, every
      // one wide (the 26 TPCs no one owns and 37 borrowed).
      ASSERT_EQ(out.size(), 11U);
      for (const AtomDispatch& d : out) EXPECT_TRUE(wide(d.tpcs)) << d.tpcs.count();
      EXPECT_EQ(e->state().tenants[1].stolen_inflight, 11U);
    } else {
      // 2 x 10 us wide, then 3 x 30 us narrow (110 us in flight).
      ASSERT_EQ(out.size(), 5U);
      for (std::size_t i = 0; i < out.size(); ++i) {
        if (i < 2)
          EXPECT_TRUE(wide(out[i].tpcs)) << i;
        else
          EXPECT_EQ(out[i].tpcs, unowned) << i;
      }
    }
  }
}

// A best-effort tenant runs free (no throttle; lithosd: no grants) exactly
// while no high-priority tenant has a queue open; never under the baselines,
// nor with LithosConfig::runs_free off.
TEST(LithosRules, BestEffortRunsFreeOnlyWhileNoServiceHasAQueue) {
  TestConfig cfg;
  cfg.throttle = us(100);
  cfg.throttle_unborrowed = us(100);  // its atoms run on no one's TPCs: one window for all
  auto e = make_engine("lithos", cfg);
  const TenantId hp = *e->add_tenant(high("hp", 20));
  const TenantId be = *e->add_tenant(best_effort("be"));
  const QueueId q = *e->add_queue(be);
  EXPECT_TRUE(e->runs_free(be)) << "a declared service without a queue protects nothing";
  EXPECT_FALSE(e->runs_free(hp));
  EXPECT_FALSE(e->runs_free(TenantId{9}));
  LaunchDesc k = kernel(1, 1000);
  k.duration_hint = us(30);
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(e->submit(q, k, Time{}).is_ok());
  std::vector<AtomDispatch> out;
  e->dispatch(Time{}, out);
  EXPECT_EQ(out.size(), 10U) << "not throttled while running free";
  EXPECT_EQ(e->counters().throttled, 0U);
  // A launch made at once while free is accounted at low priority.
  auto running = e->submit_running(q, k, e->immediate_set(be, Time{}), Time{});
  ASSERT_TRUE(running.is_ok());
  EXPECT_EQ(running->priority, HwPriority::kLow);
  EXPECT_EQ(running->tpcs, TpcSet::range(0, 66));

  const QueueId hq = *e->add_queue(hp);
  EXPECT_FALSE(e->runs_free(be));
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(e->submit(q, k, Time{}).is_ok());
  out.clear();
  e->dispatch(Time{}, out);
  EXPECT_TRUE(out.empty()) << "330 us in flight: the throttle holds the queue again";
  EXPECT_EQ(e->counters().throttled, 1U);
  (void)e->close_queue(hq, Time{});
  EXPECT_TRUE(e->runs_free(be));

  TestConfig off = cfg;
  off.policy.lithos.runs_free = false;
  auto o = make_engine("lithos", off);
  (void)*o->add_tenant(high("hp", 20));
  EXPECT_FALSE(o->runs_free(*o->add_tenant(best_effort("be"))));
  auto m = make_engine("mps");
  EXPECT_FALSE(m->runs_free(*m->add_tenant(best_effort("be"))));
}

TEST(LithosRules, OrdinalRestartsAfterSync) {
  auto e = make_engine("lithos");
  const QueueId q = *e->add_queue(*e->add_tenant(high("hp", 66)));
  ASSERT_TRUE(e->submit(q, kernel(1, 10), Time{}).is_ok());
  ASSERT_TRUE(e->submit(q, kernel(1, 10), Time{}).is_ok());
  EXPECT_EQ(e->state().queues[q].ordinal, 2U);
  e->sync(q);
  EXPECT_EQ(e->state().queues[q].ordinal, 0U);
}

// A high-priority launch timed on its own (Engine::observe_hp_sample)
// teaches the predictor its exact time, and from then on the completions of
// that key that only shared a burst's busy time teach it nothing; the error
// over the timed samples is counted apart.
TEST(Engine, TimedHighPrioritySamplesAloneTeachTheirKey) {
  auto e = make_engine("lithos");
  const TenantId hp = *e->add_tenant(high("hp", 66));
  const QueueId q = *e->add_queue(hp);
  Time t{};
  auto run = e->submit_running(q, kernel(1, 100), e->immediate_set(hp, t), t);
  ASSERT_TRUE(run.is_ok());
  const InflightAtom a = e->state().atoms[run->atom];
  const int used = std::min(a.tpcs.count(), occupancy_tpc_bound(e->state().config.device, a.blocks, a.blocks_per_tpc));
  // The burst's share says 60 us; the launch's own time was 40 us.
  (void)e->atom_finished(run->atom, t, t + us(60));
  e->observe_hp_sample(hp, a.key, a.blocks, a.blocks_per_tpc, used, us(40));
  Engine::HpSampleStats s = e->hp_sample_stats();
  EXPECT_EQ(s.errors.observations, 1U);
  EXPECT_EQ(s.errors.predicted, 1U);  // predicted 60 us from the shared completion: off by 20
  EXPECT_EQ(s.errors.misses, 0U);
  EXPECT_NEAR(s.mean_sample_us, 40.0, 1e-9);
  const auto before = e->state().predictor.predict(a.key, a.blocks, a.blocks_per_tpc, used);
  ASSERT_TRUE(before.has_value());
  // Another shared completion of the same key (a sync restarts ordinals):
  // not learnt.
  e->sync(q);
  t += ms(1);
  run = e->submit_running(q, kernel(1, 100), e->immediate_set(hp, t), t);
  ASSERT_TRUE(run.is_ok());
  ASSERT_EQ(e->state().atoms[run->atom].key, a.key);
  (void)e->atom_finished(run->atom, t, t + us(900));
  EXPECT_EQ(e->state().predictor.predict(a.key, a.blocks, a.blocks_per_tpc, used), before);
  // A second timed sample, 200 us: a miss of the timed statistics.
  e->observe_hp_sample(hp, a.key, a.blocks, a.blocks_per_tpc, used, us(200));
  s = e->hp_sample_stats();
  EXPECT_EQ(s.errors.observations, 2U);
  EXPECT_EQ(s.errors.misses, 1U);
  EXPECT_DOUBLE_EQ(s.errors.miss_share, 0.5);
  // An unknown tenant's sample is ignored.
  e->observe_hp_sample(99, a.key, a.blocks, a.blocks_per_tpc, used, us(42));
  EXPECT_EQ(e->hp_sample_stats().errors.observations, 2U);
}

// Right-sizing of high-priority launches (SizeTable): the Engine's table
// says how many TPCs a kernel of that grid needs, the launch reported on
// that many holds only them, and a best-effort atom takes the rest.
TEST(RightSizing, HighPriorityTableAndHolding) {
  TestConfig cfg;
  cfg.policy.lithos.rightsize = true;
  auto e = make_engine("lithos", cfg);
  const TenantId hp = *e->add_tenant(high("svc", 0));
  const TenantId be = *e->add_tenant(best_effort("train"));
  const QueueId qh = *e->add_queue(hp);
  const QueueId qb = *e->add_queue(be);
  ASSERT_TRUE(e->rightsized(hp));
  ASSERT_NE(e->size_table(hp), nullptr);
  EXPECT_EQ(e->size_table(be), nullptr);  // best effort is sized at dispatch, not by a table
  EXPECT_TRUE(e->size_table(hp)->entries.empty());
  // 20 blocks of 256 threads: 8 per SM, 16 per TPC -> 2 TPCs of the 66.
  const LaunchDesc small = kernel(9, 20);
  const int bound = occupancy_tpc_bound(e->state().config.device, 20, blocks_per_tpc(e->state().config.device, small));
  ASSERT_EQ(bound, 2);
  const TpcSet all = e->immediate_set(hp, Time{});
  ASSERT_EQ(all.count(), 66);
  // The first report ran on the whole allocation: the entry appears.
  auto first = e->submit_running(qh, small, all, Time{});
  ASSERT_TRUE(first.is_ok());
  const SizeTable::Entry* entry = e->size_table(hp)->find({9, small.grid});
  ASSERT_NE(entry, nullptr);
  EXPECT_EQ(entry->tpcs, 2);
  EXPECT_EQ(entry->source, SizeSource::kOccupancy);
  EXPECT_GE(e->size_table(hp)->generation, 1U);
  // It runs 1 ms: past the steal lookahead, so its TPCs count as busy.
  (void)e->atom_finished(first->atom, Time{}, Time{} + us(1000));
  // A kernel that fills the GPU gets no entry (the whole allocation).
  auto big = e->submit_running(qh, kernel(10, 100000), all, Time{} + us(1000));
  ASSERT_TRUE(big.is_ok());
  EXPECT_EQ(e->size_table(hp)->find({10, Dim3{100000, 1, 1}}), nullptr);
  (void)e->atom_finished(big->atom, Time{} + us(1000), Time{} + us(1010));
  // The client applies it: the launch holds the first 2 TPCs only.
  const Time t = Time{} + us(1100);
  auto sized = e->submit_running(qh, small, all.take_lowest(entry->tpcs), t);
  ASSERT_TRUE(sized.is_ok());
  EXPECT_EQ(e->state().held(hp), TpcSet::range(0, 2));
  // A best-effort launch that wants the whole GPU gets the other 64.
  ASSERT_TRUE(e->submit(qb, kernel(11, 100000), t).is_ok());
  std::vector<AtomDispatch> out;
  e->dispatch(t, out);
  ASSERT_FALSE(out.empty());
  EXPECT_EQ(out[0].tpcs.count(), 64);
  EXPECT_TRUE((out[0].tpcs & TpcSet::range(0, 2)).empty());
  // Its end counts as a right-sized execution: (66 - 2) x 1 ms saved.
  (void)e->atom_finished(sized->atom, t, t + us(1000));
  const RightSizeStats& st = e->rightsize_stats(hp);
  EXPECT_DOUBLE_EQ(st.saved_tpc_ns, 64.0 * 1e6);
  EXPECT_GE(st.by_occupancy, 2U);
  // Without the setting nothing of this happens.
  auto plain = make_engine("lithos");
  const TenantId p = *plain->add_tenant(high("svc", 0));
  EXPECT_FALSE(plain->rightsized(p));
  EXPECT_EQ(plain->size_table(p), nullptr);
  // A tenant may turn it on for itself, and set its own slip.
  TenantSpec own = high("own", 0);
  own.rightsize = true;
  own.rightsize_slip = 1.5;
  EXPECT_TRUE(plain->rightsized(*plain->add_tenant(own)));
}

// One hp kernel's own duration (observe_kernel) feeds the fit, keyed by
// kernel and grid: probes go into the table, then the model's count.
TEST(RightSizing, HighPriorityKernelsFeedTheFit) {
  TestConfig cfg;
  cfg.policy.lithos.rightsize = true;
  cfg.rightsize.probe_after = 2;
  cfg.rightsize.probe_every = 1;
  cfg.rightsize.probe_budget = 1.0;
  auto e = make_engine("lithos", cfg);
  const TenantId hp = *e->add_tenant(high("svc", 0));
  const QueueId qh = *e->add_queue(hp);
  const LaunchDesc k = kernel(21, 100000);  // fills the GPU
  const TpcSet all = e->immediate_set(hp, Time{});
  auto latency = [](int t) { return Duration(static_cast<Duration::rep>(2640000.0 / t + 30000.0)); };
  Time now{};
  bool probed = false, modelled = false;
  for (int i = 0; i < 12; ++i) {
    const SizeTable::Entry* en = e->size_table(hp)->find({21, k.grid});
    const int n = en != nullptr && en->tpcs > 0 ? en->tpcs : 66;
    if (en != nullptr && en->source == SizeSource::kProbe) probed = true;
    if (en != nullptr && en->source == SizeSource::kModel) {
      modelled = true;
      EXPECT_EQ(en->tpcs, 57);  // as RightSizer.ProbeThenModelDecides
    }
    auto r = e->submit_running(qh, k, all.take_lowest(n), now);
    ASSERT_TRUE(r.is_ok());
    (void)e->atom_finished(r->atom, now, now + latency(n));
    e->observe_kernel(hp, k, n, latency(n));
    now = now + latency(n);
  }
  EXPECT_TRUE(probed);
  EXPECT_TRUE(modelled);
  ASSERT_TRUE(e->state().rightsizer.fit({21, k.grid}).has_value());
  EXPECT_GT(e->rightsize_stats(hp).by_model, 0U);
  EXPECT_GT(e->rightsize_stats(hp).measured, 0U);
}

}  // namespace
}  // namespace lithos::sched
