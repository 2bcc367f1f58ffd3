// SIGINT / SIGTERM for the long-running commands (commands.hpp).
#include <signal.h>

#include "cli/commands.hpp"

namespace lithos::cli {

void catch_stop_signals(void (*handler)(int)) {
  struct sigaction sa {};
  sa.sa_handler = handler;  // no SA_RESTART: a sleep or a wait returns early
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);
  ::signal(SIGPIPE, SIG_IGN);
}

}  // namespace lithos::cli
