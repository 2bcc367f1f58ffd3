// lithos: command-line entry point. See `lithos --help`.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <exception>
#include <map>
#include <string>

#include "build_commit.hpp"
#include "cli/commands.hpp"

int main(int argc, char** argv) {
  CLI::App app{
      "lithos: an operating-system layer for GPUs that decides, for every kernel launch, which TPCs it may "
      "use, so a latency-critical service and best-effort work share one GPU.",
      "lithos"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("lithos ") + LITHOS_VERSION + " (" + LITHOS_BUILD_COMMIT + ")");

  std::map<const CLI::App*, lithos::cli::CommandRunner> runners;
  auto add = [&](lithos::cli::CommandRunner (*adder)(CLI::App&)) {
    const std::size_t before = app.get_subcommands({}).size();
    lithos::cli::CommandRunner runner = adder(app);
    const auto subs = app.get_subcommands({});
    if (subs.size() > before) runners[subs.back()] = std::move(runner);
  };
  add(&lithos::cli::add_sim_command);
  add(&lithos::cli::add_bench_command);
  add(&lithos::cli::add_atomize_command);
#ifdef LITHOS_HAVE_GPU
  add(&lithos::cli::add_run_command);
  add(&lithos::cli::add_calibrate_command);
  add(&lithos::cli::add_daemon_command);
  add(&lithos::cli::add_status_command);
  add(&lithos::cli::add_power_reset_command);
#endif

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? 0 : 2;
  }
  try {
    for (const auto& [sub, runner] : runners) {
      if (sub->parsed()) return runner();
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "lithos: %s\n", e.what());
    return 1;
  }
  return 2;
}
