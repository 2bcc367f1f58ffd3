#include "sched/predictor.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <utility>
#include <vector>

#include "common/rng.hpp"
#include "sched/occupancy.hpp"

namespace lithos::sched {
namespace {

constexpr PriorityClass kHp = PriorityClass::kHigh;
constexpr PriorityClass kBe = PriorityClass::kBestEffort;

// 1056 blocks at 16 per TPC fill 66 TPCs exactly once: one wave.
constexpr std::uint64_t kBlocks = 1056;
constexpr int kPerTpc = 16;

TEST(Predictor, UnseenKernelHasNoPrediction) {
  LatencyPredictor p;
  EXPECT_FALSE(p.predict({7, 0}, kBlocks, kPerTpc, 66).has_value());
  EXPECT_EQ(p.entries(), 0U);
  p.observe({7, 0}, kBlocks, kPerTpc, 66, us(100), kHp);
  EXPECT_TRUE(p.predict({7, 0}, kBlocks, kPerTpc, 66).has_value());
  EXPECT_FALSE(p.predict({8, 0}, kBlocks, kPerTpc, 66).has_value());
}

TEST(Predictor, FollowsTheEwma) {
  LatencyPredictor p;  // alpha = 0.25
  const PredictionKey k{1, 0};
  p.observe(k, kBlocks, kPerTpc, 66, us(100), kHp);
  EXPECT_EQ(p.predict(k, kBlocks, kPerTpc, 66), us(100));  // first sample sets the mean
  p.observe(k, kBlocks, kPerTpc, 66, us(200), kHp);
  EXPECT_EQ(p.predict(k, kBlocks, kPerTpc, 66), us(125));  // 100 + 0.25 * (200 - 100)
  p.observe(k, kBlocks, kPerTpc, 66, us(50), kHp);
  EXPECT_EQ(p.predict(k, kBlocks, kPerTpc, 66), Duration(106250));  // 125 + 0.25 * (50 - 125) = 106.25 us

  LatencyPredictor fast(PredictorConfig{.ewma_alpha = 0.5});
  fast.observe(k, kBlocks, kPerTpc, 66, us(100), kHp);
  fast.observe(k, kBlocks, kPerTpc, 66, us(300), kHp);
  EXPECT_EQ(fast.predict(k, kBlocks, kPerTpc, 66), us(200));  // 100 + 0.5 * 200
}

TEST(Predictor, ScalesByWaves) {
  LatencyPredictor p;
  const PredictionKey k{1, 0};
  // 1 wave on 66 TPCs took 300 us: wave time 300 us.
  p.observe(k, kBlocks, kPerTpc, 66, us(300), kHp);
  // 1056 blocks on 33 TPCs: 528 per wave -> 2 waves -> 600 us.
  EXPECT_EQ(p.predict(k, kBlocks, kPerTpc, 33), us(600));
  // 1057 blocks on 66 TPCs: one block spills into a second wave -> 600 us.
  EXPECT_EQ(p.predict(k, kBlocks + 1, kPerTpc, 66), us(600));
  // A smaller range still takes one wave.
  EXPECT_EQ(p.predict(k, 100, kPerTpc, 66), us(300));
  // One TPC: ceil(1056 / 16) = 66 waves -> 19.8 ms.
  EXPECT_EQ(p.predict(k, kBlocks, kPerTpc, 1), us(19800));
  // 4 per TPC on 66 TPCs: 264 per wave -> 4 waves -> 1.2 ms.
  EXPECT_EQ(p.predict(k, kBlocks, 4, 66), us(1200));
  // Observing 2 waves (33 TPCs) in 500 us is a wave time of 250 us:
  // 300 + 0.25 * (250 - 300) = 287.5 us per wave.
  p.observe(k, kBlocks, kPerTpc, 33, us(500), kHp);
  EXPECT_EQ(p.predict(k, kBlocks, kPerTpc, 66), Duration(287500));
  EXPECT_EQ(p.predict(k, kBlocks, kPerTpc, 22), Duration(862500));  // 3 waves
}

TEST(Predictor, OrdinalsAreDistinctAndFallBackToTheKernel) {
  LatencyPredictor p;
  p.observe({5, 0}, kBlocks, kPerTpc, 66, us(100), kHp);
  p.observe({5, 1}, kBlocks, kPerTpc, 66, us(300), kHp);
  EXPECT_EQ(p.entries(), 2U);
  EXPECT_EQ(p.predict({5, 0}, kBlocks, kPerTpc, 66), us(100));
  EXPECT_EQ(p.predict({5, 1}, kBlocks, kPerTpc, 66), us(300));
  // Ordinal 7 was never seen: the kernel's entry over all ordinals,
  // 100 + 0.25 * (300 - 100) = 150 us, scaled like any other.
  EXPECT_EQ(p.predict({5, 7}, kBlocks, kPerTpc, 66), us(150));
  EXPECT_EQ(p.predict({5, 7}, kBlocks, kPerTpc, 33), us(300));
  EXPECT_FALSE(p.predict({6, 0}, kBlocks, kPerTpc, 66).has_value());
  // Once ordinal 7 is observed it has its own entry.
  p.observe({5, 7}, kBlocks, kPerTpc, 66, us(40), kHp);
  EXPECT_EQ(p.predict({5, 7}, kBlocks, kPerTpc, 66), us(40));
  EXPECT_EQ(p.predict({5, 0}, kBlocks, kPerTpc, 66), us(100));
  EXPECT_EQ(p.entries(), 3U);
}

TEST(Predictor, OrdinalsAboveTheMaximumShareOneKey) {
  LatencyPredictor p(PredictorConfig{.max_ordinal = 10});
  p.observe({5, 10}, kBlocks, kPerTpc, 66, us(1000), kHp);
  p.observe({5, 11}, kBlocks, kPerTpc, 66, us(100), kHp);
  p.observe({5, 4'000'000'000U}, kBlocks, kPerTpc, 66, us(200), kHp);
  EXPECT_EQ(p.entries(), 2U);  // ordinal 10, and everything above it
  EXPECT_EQ(p.predict({5, 10}, kBlocks, kPerTpc, 66), us(1000));
  // 11 and 4e9 share a key: 100 + 0.25 * (200 - 100) = 125 us.
  EXPECT_EQ(p.predict({5, 12}, kBlocks, kPerTpc, 66), us(125));
  EXPECT_EQ(p.predict({5, UINT32_MAX}, kBlocks, kPerTpc, 66), us(125));

  // With the largest max_ordinal nothing is shared.
  LatencyPredictor all(PredictorConfig{.max_ordinal = UINT32_MAX});
  all.observe({5, UINT32_MAX - 1}, kBlocks, kPerTpc, 66, us(10), kHp);
  all.observe({5, UINT32_MAX}, kBlocks, kPerTpc, 66, us(20), kHp);
  EXPECT_EQ(all.entries(), 2U);
  EXPECT_EQ(all.predict({5, UINT32_MAX - 1}, kBlocks, kPerTpc, 66), us(10));
  EXPECT_EQ(all.predict({5, UINT32_MAX}, kBlocks, kPerTpc, 66), us(20));
}

TEST(Predictor, ErrorStatisticsByHand) {
  LatencyPredictor p;
  const PredictionKey k{1, 0};
  p.observe(k, kBlocks, kPerTpc, 66, us(100), kHp);  // no prediction yet
  p.observe(k, kBlocks, kPerTpc, 66, us(130), kHp);  // predicted 100: error 30 us
  // Mean now 100 + 0.25 * 30 = 107.5 us.
  p.observe(k, kBlocks, kPerTpc, 66, us(200), kHp);  // predicted 107.5: error 92.5 us, a miss
  const PredictorStats s = p.stats(kHp);
  EXPECT_EQ(s.observations, 3U);
  EXPECT_EQ(s.predicted, 2U);
  EXPECT_EQ(s.misses, 1U);
  EXPECT_DOUBLE_EQ(s.miss_share, 0.5);
  EXPECT_DOUBLE_EQ(s.mean_abs_error_us, 61.25);  // (30 + 92.5) / 2
  // Rank ceil(0.99 * 2) = 2 is the largest error; the histogram reports at
  // most its maximum, 92.5 us exactly.
  EXPECT_DOUBLE_EQ(s.p99_abs_error_us, 92.5);

  // Best-effort saw nothing.
  const PredictorStats be = p.stats(kBe);
  EXPECT_EQ(be.observations, 0U);
  EXPECT_EQ(be.predicted, 0U);
  EXPECT_DOUBLE_EQ(be.miss_share, 0.0);
  EXPECT_DOUBLE_EQ(be.p99_abs_error_us, 0.0);
}

TEST(Predictor, MissMeansStrictlyMoreThanTheThreshold) {
  LatencyPredictor p;  // threshold 50 us
  const PredictionKey k{1, 0};
  p.observe(k, kBlocks, kPerTpc, 66, us(100), kBe);
  p.observe(k, kBlocks, kPerTpc, 66, us(150), kBe);  // predicted 100: error exactly 50 us
  EXPECT_EQ(p.stats(kBe).misses, 0U);
  // Mean 112.5 us; 162.501 us is 50.001 us off.
  p.observe(k, kBlocks, kPerTpc, 66, Duration(162501), kBe);
  EXPECT_EQ(p.stats(kBe).misses, 1U);
  EXPECT_EQ(p.stats(kBe).predicted, 2U);
  EXPECT_EQ(p.stats(kHp).observations, 0U);  // classes are kept apart
}

// Replays a random sequence of launches over several kernels and ordinals,
// keeping an independent copy of the model (the same EWMA arithmetic) and
// the error samples per class, and compares everything the predictor says.
TEST(Predictor, RandomSequenceMatchesIndependentModelAndStatistics) {
  struct Mean {
    double wave_ns = 0.0;
    bool seen = false;
  };
  auto update = [](Mean& m, double sample) {
    m.wave_ns = m.seen ? m.wave_ns + 0.25 * (sample - m.wave_ns) : sample;
    m.seen = true;
  };
  std::map<std::pair<KernelId, std::uint32_t>, Mean> by_key;
  std::map<KernelId, Mean> by_kernel;
  std::vector<double> errors_ns[2];
  std::uint64_t observations[2] = {0, 0};

  LatencyPredictor p;
  Rng rng(42);
  for (int i = 0; i < 20000; ++i) {
    const PredictionKey key{rng.below(6), static_cast<std::uint32_t>(rng.below(5))};
    const std::uint64_t blocks = 1 + rng.below(5000);
    const int per_tpc = 1 + static_cast<int>(rng.below(32));
    const int tpcs = 1 + static_cast<int>(rng.below(66));
    const PriorityClass cls = rng.below(2) == 0 ? kHp : kBe;
    const double wave_count = static_cast<double>(waves(blocks, per_tpc, tpcs));
    // Each kernel has a true wave time; samples scatter around it.
    const double true_wave_ns = 20e3 * static_cast<double>(key.kernel + 1) * (1.0 + 0.1 * key.ordinal);
    const Duration actual(static_cast<Duration::rep>(rng.lognormal_mean_cv(true_wave_ns * wave_count, 0.3)));

    const Mean* model = nullptr;
    if (auto it = by_key.find({key.kernel, key.ordinal}); it != by_key.end()) {
      model = &it->second;
    } else if (auto kt = by_kernel.find(key.kernel); kt != by_kernel.end()) {
      model = &kt->second;
    }
    const std::optional<Duration> predicted = p.predict(key, blocks, per_tpc, tpcs);
    ASSERT_EQ(predicted.has_value(), model != nullptr) << "step " << i;
    const std::size_t c = cls == kHp ? 0 : 1;
    ++observations[c];
    if (model != nullptr) {
      const Duration expected(static_cast<Duration::rep>(std::llround(model->wave_ns * wave_count)));
      ASSERT_EQ(*predicted, expected) << "step " << i;
      errors_ns[c].push_back(std::abs(static_cast<double>((actual - *predicted).count())));
    }
    p.observe(key, blocks, per_tpc, tpcs, actual, cls);
    const double sample = static_cast<double>(actual.count()) / wave_count;
    update(by_key[{key.kernel, key.ordinal}], sample);
    update(by_kernel[key.kernel], sample);
  }
  EXPECT_EQ(p.entries(), by_key.size());
  // Only each kernel's very first observation had no prediction.
  EXPECT_EQ(p.stats(kHp).observations + p.stats(kBe).observations - p.stats(kHp).predicted - p.stats(kBe).predicted,
            by_kernel.size());

  for (const PriorityClass cls : {kHp, kBe}) {
    const std::size_t c = cls == kHp ? 0 : 1;
    std::vector<double>& e = errors_ns[c];
    std::sort(e.begin(), e.end());
    const auto misses =
        static_cast<std::uint64_t>(std::count_if(e.begin(), e.end(), [](double v) { return v > 50e3; }));
    double sum = 0.0;
    for (double v : e) sum += v;
    // The histogram's P99 is the nearest-rank value, reported as the upper
    // edge of its bucket: within a factor 1 + 1/64 above it.
    const double nearest_rank = e[static_cast<std::size_t>(std::ceil(0.99 * static_cast<double>(e.size()))) - 1];

    const PredictorStats s = p.stats(cls);
    EXPECT_EQ(s.observations, observations[c]);
    EXPECT_EQ(s.predicted, e.size());
    EXPECT_EQ(s.misses, misses);
    EXPECT_DOUBLE_EQ(s.miss_share, static_cast<double>(misses) / static_cast<double>(e.size()));
    EXPECT_NEAR(s.mean_abs_error_us, sum / static_cast<double>(e.size()) / 1e3, 1e-9);
    EXPECT_GE(s.p99_abs_error_us * 1e3, nearest_rank * (1 - 1e-12));
    EXPECT_LE(s.p99_abs_error_us * 1e3, nearest_rank * (1 + 1.0 / 64));
    // The sample is noisy enough that misses happen but are not the rule.
    EXPECT_GT(s.miss_share, 0.0);
    EXPECT_LT(s.miss_share, 1.0);
  }
}

// The cache file's text: a predictor loaded from another's save() predicts
// exactly as that one does, for seen keys, kernel fallbacks and unseen ones.
TEST(Predictor, SaveAndLoadGiveTheSamePredictions) {
  LatencyPredictor a;
  Rng rng(11);
  auto pick = [&](std::uint64_t n) { return rng.next() % n; };
  for (int i = 0; i < 500; ++i) {
    const PredictionKey k{0xfeedface00000000ULL + pick(10), static_cast<std::uint32_t>(pick(31))};
    a.observe(k, 1 + pick(5000), kPerTpc, static_cast<int>(1 + pick(66)), us(static_cast<double>(1 + pick(900))), kBe);
  }
  const std::string text = a.save();
  LatencyPredictor b;
  ASSERT_TRUE(b.load(text).is_ok());
  EXPECT_EQ(b.entries(), a.entries());
  EXPECT_EQ(b.save(), text) << "loading and saving again changes nothing";
  for (std::uint64_t kernel = 0xfeedface00000000ULL; kernel < 0xfeedface00000000ULL + 12; ++kernel) {
    for (std::uint32_t ord = 0; ord < 40; ++ord) {
      for (int tpcs : {1, 13, 66}) {
        EXPECT_EQ(b.predict({kernel, ord}, 3000, kPerTpc, tpcs), a.predict({kernel, ord}, 3000, kPerTpc, tpcs))
            << std::hex << kernel << std::dec << " ordinal " << ord << " on " << tpcs;
      }
    }
  }
  EXPECT_EQ(b.stats(kBe).observations, 0U) << "error statistics are not part of the cache";
}

TEST(Predictor, LoadRejectsBadTextAndChangesNothing) {
  LatencyPredictor p;
  p.observe({1, 0}, kBlocks, kPerTpc, 66, us(100), kHp);
  const std::string before = p.save();
  const std::pair<std::string, std::string> bad[] = {
      {"k 1 0 1p+4\n", "line 1: expected 'k KERNEL ORDINAL WAVE_NS SAMPLES'"},
      {"# a comment\n\nK 2 1p+4 3 extra\n", "line 3: trailing characters"},
      {"K 2 inf 3\n", "line 1: "},
      {"K 2 1p+4 0\n", "line 1: wave time must be finite"},
      {"k 2 99999 1p+4 1\n", "line 1: ordinal beyond"},
      {"x 2 3\n", "line 1: unknown entry kind"},
      {"K 5 1p+4 2\nk 2 0 -1 1\n", "line 2: wave time must be finite"},
  };
  for (const auto& [text, why] : bad) {
    const Status s = p.load(text);
    ASSERT_FALSE(s.is_ok()) << text;
    EXPECT_NE(s.message().find(why), std::string::npos) << s.message();
    EXPECT_EQ(p.save(), before) << "a failed load leaves the model as it was";
  }
  // Entries replace those of the same key and leave the others.
  ASSERT_TRUE(p.load("# cache\nk 1 0 1p+10 7\nK 9 1p+5 2\n").is_ok());
  EXPECT_EQ(p.predict({1, 0}, kBlocks, kPerTpc, 66), Duration(1024));
  EXPECT_EQ(p.predict({9, 3}, kBlocks, kPerTpc, 66), Duration(32));
  EXPECT_TRUE(p.load("").is_ok());
}

}  // namespace
}  // namespace lithos::sched
