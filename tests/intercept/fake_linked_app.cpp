// A program linked against the (fake) driver the ordinary way (-lcuda), for
// the `lithos run` tests: its cu* calls bind to liblithos.so's hooks when the
// library is preloaded.
//   fake_linked_app launch <exit-code> [expected-word0-hex]
//       7 launches (5 cuLaunchKernel, 2 cuLaunchKernel_ptsz); with a word,
//       checks the mask of each descriptor (exit 99 if wrong); exits with
//       <exit-code>.
//   fake_linked_app bypass <exit-code>
//       3 launches through the driver's own function pointers, around any
//       hook (what an interposition failure looks like).
//   fake_linked_app init <exit-code>
//       cuInit only: a process that loads the driver and launches nothing
//       (torch.compile's worker processes).
//   fake_linked_app fork <exit-code>
//       7 launches, then a forked child that exits normally (its exit
//       handlers run); exit 98 if the child left the atom report
//       ($LITHOS_ATOM_REPORT, removed before the fork) or its statistics
//       file ($LITHOS_STATS_FILE with its pid for %p), else 3 more launches.
#include "intercept/cuda_abi.hpp"  // declares cuLaunchKernel_ptsz too

#include <dlfcn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

extern "C" const std::uint8_t* fake_last_qmd();
extern "C" void* fake_address_of(const char* name);

int main(int argc, char** argv) {
  if (argc < 3) return 64;
  const int code = std::atoi(argv[2]);
  if (cuInit(0) != CUDA_SUCCESS) return 65;
  if (std::strcmp(argv[1], "launch") == 0) {
    for (int i = 0; i < 7; ++i) {
      const CUresult r = i < 5 ? cuLaunchKernel(nullptr, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr)
                               : cuLaunchKernel_ptsz(nullptr, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr);
      if (r != CUDA_SUCCESS) return 66;
      if (argc > 3) {
        std::uint32_t w0 = 0;
        std::memcpy(&w0, fake_last_qmd() + 304, 4);
        if (w0 != static_cast<std::uint32_t>(std::strtoul(argv[3], nullptr, 16))) {
          std::fprintf(stderr, "fake_linked_app: descriptor word 0 is %08x, expected %s\n", w0, argv[3]);
          return 99;
        }
      }
    }
    return code;
  }
  if (std::strcmp(argv[1], "init") == 0) return code;
  if (std::strcmp(argv[1], "fork") == 0) {
    const auto launch = [](int n) {
      for (int i = 0; i < n; ++i)
        if (cuLaunchKernel(nullptr, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr) != CUDA_SUCCESS) return false;
      return true;
    };
    if (!launch(7)) return 66;
    const char* report = std::getenv("LITHOS_ATOM_REPORT");
    if (report != nullptr) std::remove(report);
    std::fflush(nullptr);
    const pid_t child = ::fork();
    if (child < 0) return 67;
    if (child == 0) std::exit(0);  // exit handlers and destructors run
    int status = 0;
    if (::waitpid(child, &status, 0) != child || !WIFEXITED(status) || WEXITSTATUS(status) != 0) return 68;
    std::string stats = std::getenv("LITHOS_STATS_FILE") != nullptr ? std::getenv("LITHOS_STATS_FILE") : "";
    if (const auto at = stats.find("%p"); at != std::string::npos) stats.replace(at, 2, std::to_string(child));
    const bool child_report = report != nullptr && ::access(report, F_OK) == 0;
    const bool child_stats = !stats.empty() && ::access(stats.c_str(), F_OK) == 0;
    if (child_report || child_stats) {
      std::fprintf(stderr, "fake_linked_app: the forked child wrote %s\n", child_report ? report : stats.c_str());
      return 98;
    }
    return launch(3) ? code : 66;
  }
  if (std::strcmp(argv[1], "bypass") == 0) {
    using LaunchFn = CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                  CUstream, void**, void**);
    auto fn = reinterpret_cast<LaunchFn>(fake_address_of("cuLaunchKernel"));
    for (int i = 0; i < 3; ++i) fn(nullptr, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr);
    return code;
  }
  return 64;
}
