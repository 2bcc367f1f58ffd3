// The interposer's configuration: read once from the environment when the
// library first needs it, then never changed (the process-wide mask can be
// changed later only through the C API in lithos.h, by the scheduler).
//
// Environment (docs/interposer.md has the full table):
//   LITHOS_TPCS=N          confine every launch to the first N live logical TPCs
//   LITHOS_TPC_SET=LIST    ... or to this set of logical TPCs ("0-7,12")
//   LITHOS_SLOT_MAP=FILE   the calibrated slot map (`lithos run` sets it)
//   LITHOS_STATS=1         print coverage statistics to stderr at exit
//   LITHOS_STATS_FILE=F    also write them as one JSON line to F ("%p" = pid)
//   LITHOS_LOG=LEVEL       off | error | warn (default) | info | debug
//   LITHOS_BACKEND=B       auto (default) | descriptor | green | off
//   LITHOS_TEST_FAULT=WHAT tests only: make an internal step fail ("launch")
//   LITHOS_ATOMIZE=1       kernel atomizer: rewrite sm_90 kernels at load and
//                          run long ones as atoms (docs/atomizer.md)
//   LITHOS_ATOM_US=T       atom duration target in microseconds (default 500)
//   LITHOS_ATOM_COST_US=C  measured cost of one more atom (default 20)
//   LITHOS_ATOMS=N         tests: split every splittable launch into N atoms
//   LITHOS_ATOM_TIME=1     time every launch of a rewritten kernel (coverage)
//   LITHOS_ATOM_REPORT=F   write the atomizer's per-kernel report (JSON) to F
//   LITHOS_DAEMON=SOCKET   register with lithosd at this socket (client.hpp):
//                          the daemon decides every launch; unset: no daemon
//   LITHOS_TENANT=NAME     the tenant to claim from lithosd (default: the
//                          daemon's match rules, then its default tenant)
//   LITHOS_GRANT_TIMEOUT_MS=T  a be launch gives up waiting for a grant from a
//                          daemon that stopped answering after T ms (default 500)
//   LITHOS_DAEMON_UID=UID  a uid the client trusts as lithosd besides root and
//                          its own (the operator's daemon user; client.hpp)
//   LITHOS_REGISTER_WAIT_MS=T  the process's first launch waits up to T ms
//                          for the registration it starts (default 5; 0:
//                          none); until registered, launches run as without
//                          a daemon
//   LITHOS_DEFER_LAUNCHES=0|1  best effort under lithosd: queue launches and
//                          return at once, a worker thread makes them as
//                          granted (deferred.hpp; default 1)
//   LITHOS_DEFER_DEPTH=N   launches queued at most before the application
//                          waits (default 1024)
//   LITHOS_SUBMIT_AHEAD=0|1 best effort under lithosd with deferred launches:
//                          submit each launch to the daemon when it is
//                          queued, not when the worker reaches it (client.hpp;
//                          default 0)
//   LITHOS_GRAPH_REPLAY=0|1 best effort under lithosd: replay CUDA graphs
//                          node by node, each kernel a granted launch
//                          (graph_replay.hpp; default 1)
//   LITHOS_HP_SAMPLE_FIRST=K, LITHOS_HP_SAMPLE_EVERY=N, LITHOS_HP_SAMPLE_PER_S=R,
//   LITHOS_HP_SAMPLE_MAX_MS=T  high priority under lithosd: time the first K
//                          launches of each function one by one (default 8),
//                          then one in N (default 64; 0: none), at most R a
//                          second (default 200; 0: timing off); a launch
//                          that took over T ms is no sample (default 1000)
//   LITHOS_HW_PRIORITY=0|1 under lithosd: set the stream priority the engine
//                          decided on each launch's stream before launching
//                          (client.hpp; default 1)
// A malformed value is reported (problems) and ignored: the library then runs
// as if that variable were unset, it never stops the host program. So are the
// variables of the activity board and the atom pacer (LITHOS_ROLE,
// LITHOS_BOARD, LITHOS_HP_HOLD_US, LITHOS_STEAL_ATOM, LITHOS_ATOM_INFLIGHT):
// their decisions were a second scheduling policy in the interposer, and
// lithosd's Engine makes them now (docs/daemon.md).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "intercept/log.hpp"
#include "sched/tpc_set.hpp"

namespace lithos::intercept {

enum class MaskRequest { kNone, kFirstN, kSet };
enum class BackendChoice { kAuto, kDescriptor, kGreen, kOff };

const char* backend_choice_name(BackendChoice b);

struct Config {
  MaskRequest request = MaskRequest::kNone;
  int first_n = 0;            // kFirstN: how many live TPCs
  sched::TpcSet tpc_set;      // kSet: the logical TPCs
  std::string slot_map_path;  // "" = none
  bool stats = false;         // print statistics at exit
  std::string stats_file;     // "" = none
  LogLevel log_level = LogLevel::kWarn;
  BackendChoice backend = BackendChoice::kAuto;
  bool fault_launch = false;  // LITHOS_TEST_FAULT=launch
  // Kernel atomizer (docs/atomizer.md).
  bool atomize = false;            // LITHOS_ATOMIZE
  double atom_us = 500.0;          // LITHOS_ATOM_US
  double atom_cost_us = 20.0;      // LITHOS_ATOM_COST_US
  std::uint32_t atoms_forced = 0;  // LITHOS_ATOMS (0: from predictions)
  bool atom_time_all = false;      // LITHOS_ATOM_TIME
  std::string atom_report;         // LITHOS_ATOM_REPORT ("" = none; "%p" = pid)
  // lithosd (client.hpp).
  std::string daemon_socket;              // LITHOS_DAEMON ("" = no daemon)
  std::string tenant;                     // LITHOS_TENANT
  double grant_timeout_ms = 500;          // LITHOS_GRANT_TIMEOUT_MS
  std::int64_t daemon_uid = -1;           // LITHOS_DAEMON_UID (-1: none)
  double register_wait_ms = 5;            // LITHOS_REGISTER_WAIT_MS
  bool defer_launches = true;             // LITHOS_DEFER_LAUNCHES
  std::uint32_t defer_depth = 1024;       // LITHOS_DEFER_DEPTH
  bool hw_priority = true;                // LITHOS_HW_PRIORITY
  bool graph_replay = true;               // LITHOS_GRAPH_REPLAY
  bool submit_ahead = false;              // LITHOS_SUBMIT_AHEAD
  std::uint32_t hp_sample_first = 8;      // LITHOS_HP_SAMPLE_FIRST
  std::uint32_t hp_sample_every = 64;     // LITHOS_HP_SAMPLE_EVERY
  std::uint32_t hp_sample_per_s = 200;    // LITHOS_HP_SAMPLE_PER_S
  std::uint32_t hp_sample_max_ms = 1000;  // LITHOS_HP_SAMPLE_MAX_MS
  // One line per ignored, malformed variable ("LITHOS_TPCS='x': ...").
  std::vector<std::string> problems;

  // "the first 8 live TPCs", "TPCs 0-7,12", "the whole GPU".
  std::string describe_request() const;
};

// Looks a variable up; returns null when unset.
using EnvLookup = std::function<const char*(const char*)>;

// Parses the LITHOS_* variables. Pure: tests pass their own lookup.
Config config_from_env(const EnvLookup& lookup);

// LITHOS_DISABLE=1: the operator's kill switch. Every hook only forwards to
// the driver, and cuGetProcAddress / dlsym hand out the driver's own
// functions, so lithos does nothing in the process but be loaded. Read once
// at load time, not through Config, because it must hold before anything else
// runs. Pure: tests pass their own lookup.
bool disabled_from_env(const EnvLookup& lookup);

// Expands "%p" in a statistics file name to `pid`.
std::string expand_stats_path(const std::string& pattern, int pid);

}  // namespace lithos::intercept
