// Deterministic random numbers. The standard library's distributions differ
// between implementations, so simulator results would not be reproducible
// across machines with them; these are defined here, bit for bit.
#pragma once

#include <cmath>
#include <cstdint>

namespace lithos {

// SplitMix64: used to seed and to derive independent streams.
constexpr std::uint64_t splitmix64(std::uint64_t& state) {
  std::uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

// xoshiro256** (Blackman and Vigna), seeded through SplitMix64.
class Rng {
 public:
  explicit Rng(std::uint64_t seed = 1) {
    std::uint64_t s = seed;
    for (auto& w : s_) w = splitmix64(s);
  }
  // A generator whose stream is independent of this one's, keyed by `id`.
  Rng fork(std::uint64_t id) const {
    std::uint64_t s = s_[0] ^ (id * 0xD1B54A32D192ED03ULL) ^ 0x2545F4914F6CDD1DULL;
    return Rng(splitmix64(s));
  }

  std::uint64_t next() {
    const std::uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const std::uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }
  // Uniform in [0, 1), 53 bits.
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  // Uniform in (0, 1]: safe for log().
  double uniform_open0() { return 1.0 - uniform(); }
  // Uniform integer in [0, n), n > 0, by rejection (no modulo bias).
  std::uint64_t below(std::uint64_t n) {
    const std::uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    std::uint64_t x = next();
    while (x >= limit) x = next();
    return x % n;
  }
  double exponential(double mean) { return -mean * std::log(uniform_open0()); }
  // Standard normal by Box-Muller (one of the pair is dropped: simpler, and
  // determinism matters more here than speed).
  double normal() {
    const double u1 = uniform_open0();
    const double u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }
  // Log-normal with the given mean and coefficient of variation (stddev/mean).
  double lognormal_mean_cv(double mean, double cv) {
    if (cv <= 0.0) return mean;
    const double sigma2 = std::log1p(cv * cv);
    const double mu = std::log(mean) - 0.5 * sigma2;
    return std::exp(mu + std::sqrt(sigma2) * normal());
  }

 private:
  static constexpr std::uint64_t rotl(std::uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  std::uint64_t s_[4]{};
};

}  // namespace lithos
