// Time in lithos: nanoseconds, as std::chrono types so that durations and
// points in time cannot be mixed up. The core never reads a clock itself;
// callers (runtime, simulator) pass `now` in.
#pragma once

#include <chrono>
#include <cstdint>

namespace lithos {

using Duration = std::chrono::nanoseconds;

// The clock the scheduler's time points refer to. The runtime maps it onto
// CLOCK_MONOTONIC, the simulator onto simulated time starting at zero.
struct SchedClock {
  using rep = std::int64_t;
  using period = std::nano;
  using duration = Duration;
  using time_point = std::chrono::time_point<SchedClock, Duration>;
  static constexpr bool is_steady = true;
};
using Time = SchedClock::time_point;

constexpr Duration us(double v) { return Duration(static_cast<std::int64_t>(v * 1e3)); }
constexpr Duration ms(double v) { return Duration(static_cast<std::int64_t>(v * 1e6)); }
constexpr double to_us(Duration d) { return static_cast<double>(d.count()) / 1e3; }
constexpr double to_ms(Duration d) { return static_cast<double>(d.count()) / 1e6; }
constexpr double to_s(Duration d) { return static_cast<double>(d.count()) / 1e9; }
constexpr Time time_at(Duration since_start) { return Time(since_start); }
constexpr Duration since_start(Time t) { return t.time_since_epoch(); }

inline constexpr Time kTimeNever = Time(Duration(INT64_MAX));

}  // namespace lithos
