// Logging inside liblithos.so: one line per message on stderr, written with
// a single write(2) so that lines of several threads do not interleave.
// Never allocates, never throws, never takes a lock: safe in the descriptor
// callback (which runs under driver locks) and at process exit.
//
// Level from LITHOS_LOG (config.hpp): off, error, warn (default), info, debug.
#pragma once

#include <atomic>

namespace lithos::intercept {

enum class LogLevel : int { kOff = 0, kError = 1, kWarn = 2, kInfo = 3, kDebug = 4 };

void log_set_level(LogLevel level) noexcept;
LogLevel log_level() noexcept;
inline bool log_enabled(LogLevel level) noexcept {
  return static_cast<int>(level) <= static_cast<int>(log_level()) && level != LogLevel::kOff;
}

// "lithos[<pid>]: <level>: <message>\n" on stderr (truncated at 1 KiB).
void log_write(LogLevel level, const char* format, ...) noexcept __attribute__((format(printf, 2, 3)));

// Writes `text` to stderr as is (for the statistics block).
void log_raw(const char* text, unsigned long length) noexcept;

}  // namespace lithos::intercept

#define LITHOS_LOG(level, ...)                                                                       \
  do {                                                                                               \
    if (::lithos::intercept::log_enabled(level)) ::lithos::intercept::log_write(level, __VA_ARGS__); \
  } while (0)

// Logs the first time this line is reached in the process, then never again.
#define LITHOS_LOG_ONCE(level, ...)                                       \
  do {                                                                    \
    static std::atomic<bool> lithos_logged_once_{false};                  \
    if (!lithos_logged_once_.load(std::memory_order_relaxed) &&           \
        !lithos_logged_once_.exchange(true, std::memory_order_relaxed)) { \
      LITHOS_LOG(level, __VA_ARGS__);                                     \
    }                                                                     \
  } while (0)
