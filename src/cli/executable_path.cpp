// Where the running `lithos` binary is (commands.hpp).
#include <limits.h>
#include <unistd.h>

#include "cli/commands.hpp"

namespace lithos::cli {

std::optional<std::string> executable_path() {
  char buf[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return std::nullopt;  // errno says why
  buf[n] = '\0';
  return std::string(buf);
}

}  // namespace lithos::cli
