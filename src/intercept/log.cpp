#include "intercept/log.hpp"

#include <unistd.h>

#include <cstdarg>
#include <cstdio>

namespace lithos::intercept {

namespace {

std::atomic<int> g_level{static_cast<int>(LogLevel::kWarn)};

const char* level_name(LogLevel level) {
  switch (level) {
    case LogLevel::kError: return "error";
    case LogLevel::kWarn: return "warning";
    case LogLevel::kInfo: return "info";
    case LogLevel::kDebug: return "debug";
    case LogLevel::kOff: break;
  }
  return "";
}

void write_all(const char* p, std::size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(STDERR_FILENO, p, n);
    if (w <= 0) return;  // nowhere to report a failing stderr
    p += w;
    n -= static_cast<std::size_t>(w);
  }
}

}  // namespace

void log_set_level(LogLevel level) noexcept { g_level.store(static_cast<int>(level), std::memory_order_relaxed); }

LogLevel log_level() noexcept { return static_cast<LogLevel>(g_level.load(std::memory_order_relaxed)); }

void log_write(LogLevel level, const char* format, ...) noexcept {
  char line[1024];
  int n = std::snprintf(line, sizeof line, "lithos[%d]: %s: ", static_cast<int>(::getpid()), level_name(level));
  if (n < 0) return;
  std::size_t used = static_cast<std::size_t>(n) < sizeof line ? static_cast<std::size_t>(n) : sizeof line - 1;
  va_list ap;
  va_start(ap, format);
  const int m = std::vsnprintf(line + used, sizeof line - used, format, ap);
  va_end(ap);
  if (m > 0)
    used += static_cast<std::size_t>(m) < sizeof line - used ? static_cast<std::size_t>(m) : sizeof line - used - 1;
  if (used >= sizeof line - 1) used = sizeof line - 2;
  line[used++] = '\n';
  write_all(line, used);
}

void log_raw(const char* text, unsigned long length) noexcept { write_all(text, length); }

}  // namespace lithos::intercept
