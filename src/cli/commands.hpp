// Subcommands of the `lithos` program. Each lives in its own cmd_*.cpp and
// registers itself on the top-level CLI11 app; main.cpp only wires them up.
//
// Contract for every command: parse errors and bad input print one clear
// message on stderr (naming what was wrong and what is valid) and exit with
// status 2; failures while running exit 1; success 0. `--json` output goes to
// stdout and nothing else is printed there.
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "common/status.hpp"

namespace CLI {
class App;
}

namespace lithos::cli {

// The function a subcommand runs once CLI11 has parsed its options; its
// return value is the process exit status.
using CommandRunner = std::function<int()>;

// The path of the running binary (/proc/self/exe), or nullopt with errno
// set. liblithos.so and the repository's scripts are found relative to it.
std::optional<std::string> executable_path();

// Calls `handler` on SIGINT and SIGTERM (a sleep or a blocking wait then
// returns early) and ignores SIGPIPE: for the commands that run until told
// to stop (lithos daemon, lithos status --every, lithos bench).
void catch_stop_signals(void (*handler)(int));

// lithosd's status answer at `socket` (its JSON text, schema lithos.status/1),
// waiting up to `timeout_ms` for it, or why there is none (cmd_daemon.cpp;
// `lithos run` asks it whether a tenant runs outside MPS).
Result<std::string> fetch_status(const std::string& socket, int timeout_ms);

// Each adds a subcommand to `app` and returns the runner to call when that
// subcommand was selected.
CommandRunner add_sim_command(CLI::App& app);
CommandRunner add_calibrate_command(CLI::App& app);
CommandRunner add_run_command(CLI::App& app);
CommandRunner add_bench_command(CLI::App& app);
CommandRunner add_atomize_command(CLI::App& app);
CommandRunner add_daemon_command(CLI::App& app);
CommandRunner add_status_command(CLI::App& app);
CommandRunner add_power_reset_command(CLI::App& app);

}  // namespace lithos::cli
