// lithosd's configuration: a TOML file (docs/daemon.md, packaging/lithosd.toml),
// environment overrides, and which tenant a connecting process gets.
//
// Precedence: flags > environment (LITHOSD_*) > the file > defaults. The CLI
// builds the result in that order: default_config() or load_config(), then
// apply_env(), then its flags, then validate() against the GPU it serves.
//
// Nothing here throws. Errors in a file name the file, line and column.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.hpp"
#include "common/time.hpp"
#include "sched/engine.hpp"
#include "sched/policies/catalog.hpp"
#include "sched/tpc_set.hpp"
#include "sched/types.hpp"

namespace lithos::daemon {

// How lithosd deals with CUDA MPS.
enum class MpsMode {
  kAuto,    // attach to a running MPS control daemon, else start one
  kStart,   // start one (fail if that fails)
  kAttach,  // require a running one
  kOff,     // clients share the GPU without MPS
};
const char* mps_mode_name(MpsMode m);  // "auto", "start", "attach", "off"
std::optional<MpsMode> parse_mps_mode(std::string_view s);
// Power management (power.hpp): off, dry-run (decide and report, never
// set) or on (set locked clocks).
enum class PowerMode : unsigned char { kOff, kDryRun, kOn };
const char* power_mode_name(PowerMode m);  // "off", "dry-run", "on"
std::optional<PowerMode> parse_power_mode(std::string_view s);
// "true"/"1"/"yes"/"on" or "false"/"0"/"no"/"off" (a variable or a flag's value).
std::optional<bool> parse_switch(std::string_view s);
// The CUDA devices one lithosd serves: "N", "N,M,..." or "all" (*all set,
// *out left empty). Errors name what is wrong (not a number, a repeat).
Status parse_devices(std::string_view text, std::vector<int>* out, bool* all);

inline constexpr double kMinAtomUs = 50;
inline constexpr double kMaxAtomUs = 100000;
// The outstanding-work throttle: predicted work one queue may have in flight.
inline constexpr double kMinThrottleUs = 10;
inline constexpr double kMaxThrottleUs = 100000;
inline constexpr double kMaxHpPollUs = 1000;            // [daemon] hp_poll_us
inline constexpr std::uint32_t kMaxStolenAtoms = 1024;  // [daemon] max_stolen_atoms
inline constexpr double kMinPauseSlowdown = 1.0;        // [daemon] pause_slowdown
inline constexpr double kMaxPauseSlowdown = 100.0;
inline constexpr double kMaxIdleGraceUs = 100000;   // [daemon] idle_grace_us, burst_gap_us
inline constexpr double kMinPowerSlowdown = 0.001;  // [daemon] power_slowdown
inline constexpr double kMaxPowerSlowdown = 1.0;
inline constexpr double kMaxPowerIdleW = 2000;    // [daemon] power_idle_w
inline constexpr double kMinPowerExponent = 1.0;  // [daemon] power_exponent
inline constexpr double kMaxPowerExponent = 4.0;
inline constexpr double kMaxRightsizeSlip = 1000.0;  // [daemon] and [[tenant]] rightsize_slip
// [daemon] bounds on what clients may make the daemon hold (docs/daemon.md,
// "Hostile clients"): the ranges their keys accept.
inline constexpr int kMaxMaxClients = 65536;        // max_clients, max_clients_per_uid
inline constexpr int kMaxConnectingPerUid = 4096;   // max_connecting_per_uid
inline constexpr double kMinClientBound = 16;       // max_pending_launches, max_queued_grants
inline constexpr double kMinInflightBound = 64;     // max_inflight
inline constexpr double kMaxClientBound = 4194304;  // 2^22, each of the three
inline constexpr double kMinEventsPerS = 1000;      // max_events_per_s
inline constexpr double kMaxEventsPerS = 1e9;
inline constexpr double kMinClientTimeoutMs = 100;  // client_timeout_ms, progress_timeout_ms (or 0: off)
inline constexpr double kMaxClientTimeoutMs = 3600000;
inline constexpr double kMaxFaultGraceMs = 600000;  // fault_exit_grace_ms, fault_term_grace_ms
// A tenant's clients together: this many times one client's bounds.
inline constexpr std::uint32_t kTenantBoundFactor = 4;
// Tenant names travel in ipc::Hello/Welcome (64 bytes with the terminating NUL).
inline constexpr std::size_t kMaxTenantName = 63;
// The tenant every undeclared process lands in, unless the file says otherwise.
inline constexpr const char* kDefaultTenantName = "default";

struct TenantConfig {
  std::string name;
  sched::PriorityClass priority = sched::PriorityClass::kBestEffort;
  int quota = 0;  // TPCs guaranteed (high only; 0 for best-effort)
  std::optional<Duration> slo;
  // Who may claim it: any of these uids, or a process whose gid or one of
  // whose supplementary gids is listed. Both empty: anyone.
  std::vector<uid_t> uids;
  std::vector<gid_t> gids;
  // Executable short names (globs with * and ?) bound here when the process
  // names no tenant.
  std::vector<std::string> match;
  // Where its clients run when the daemon is gone; unset: the daemon decides
  // (its quota's TPCs for high priority, the TPCs no quota holds otherwise).
  std::optional<sched::TpcSet> fallback;
  // High only (lithos policy): whether best-effort atoms wait while it has
  // work on the GPU (sched::BestEffortPause; true, false or "auto", the
  // default for a high-priority tenant of a configuration file).
  sched::BestEffortPause pauses_best_effort = sched::BestEffortPause::kNever;
  // Whether its processes run as MPS clients (where MPS runs). false: `lithos
  // run --tenant` starts them outside MPS, so that a fatal fault of theirs
  // stays their own instead of reaching every MPS client of the GPU, at the
  // cost of time-slicing with the MPS clients (docs/daemon.md, "GPU faults").
  bool mps = true;
  // Right-sizing of its kernels (lithos policy): unset, the [daemon]
  // rightsize and rightsize_slip (sched::TenantSpec).
  std::optional<bool> rightsize;
  std::optional<double> rightsize_slip;
  // "file:line:column" of its [[tenant]] table, for messages; empty for the
  // implicit default tenant and tenants built in code.
  std::string where;

  sched::TenantSpec spec() const;
  bool anyone() const { return uids.empty() && gids.empty(); }
};

struct DaemonConfig {
  std::string socket;  // default: see default_socket_path()
  std::string policy = "lithos";
  MpsMode mps = MpsMode::kAuto;
  double atom_us = 500;
  double throttle_us = 100;  // sched::EngineConfig::throttle
  // sched::EngineConfig::throttle_unborrowed: the bound for a best-effort
  // atom on TPCs no one can claim back (lithos policy); 0 (the default) or
  // anything below throttle_us: throttle_us.
  double throttle_unborrowed_us = 0;
  // sched::LithosConfig::max_stolen_atoms (lithos policy): the atoms one
  // tenant may have in flight on borrowed TPCs, its default the policy's.
  // Beyond one, the next atom may already be queued on the GPU when an
  // owner comes back, and the owner's first kernel can wait for it as well
  // as for the atom running; the throttle bounds that work in predicted
  // time (docs/daemon.md). 1 bounds the wait by one atom, at the cost of a
  // gap between a borrower's atoms. 0: no borrowing of owned TPCs at all.
  std::uint32_t max_stolen_atoms = sched::LithosConfig{}.max_stolen_atoms;
  // sched::LithosConfig::pause_slowdown (lithos policy): how much slower a
  // high-priority tenant's work beside best-effort atoms must be than
  // without them before its pauses_best_effort = "auto" pauses best effort.
  double pause_slowdown = sched::LithosConfig{}.pause_slowdown;
  // sched::EngineConfig::idle_grace, in microseconds: how
  // long a high-priority tenant's TPCs stay its own after its work on the
  // GPU drained, before best-effort atoms may borrow them. An eager service
  // whose kernels leave the GPU idle between them for longer than this
  // lends its TPCs in every gap, and each next kernel waits for the atoms
  // that borrowed them.
  double idle_grace_us = to_us(sched::EngineConfig{}.idle_grace);
  // sched::LithosConfig::burst_gap (lithos policy), in microseconds: a
  // high-priority tenant most of whose recent idle gaps are at most this
  // long (an eager service) stays active through them. 0: off.
  double burst_gap_us = to_us(sched::LithosConfig{}.burst_gap);
  // While only high-priority work is in flight (no best-effort tenant has
  // work or had any in the last 2 ms, so no one waits for a grant) the
  // daemon's loop sleeps this long between turns instead of spinning; 0:
  // it spins.
  double hp_poll_us = 50;
  // sched::LithosConfig::share_unowned (lithos policy): a high-priority
  // tenant's launches, which never wait, may use every TPC no quota holds,
  // also those under a best-effort atom (true), or only those no other
  // tenant's atom holds when they go out (false). Its CUDA graphs get the
  // first set either way: their descriptors keep it for every replay.
  bool share_unowned = true;
  // Right-sizing (lithos policy; sched::LithosConfig::rightsize,
  // sched::RightSizeConfig), for tenants that do not set their own.
  bool rightsize = false;
  double rightsize_slip = sched::RightSizeConfig{}.slip;
  std::uint32_t rightsize_probe_after = sched::RightSizeConfig{}.probe_after;
  std::uint32_t rightsize_probe_every = sched::RightSizeConfig{}.probe_every;
  double rightsize_probe_budget = sched::RightSizeConfig{}.probe_budget;
  // sched::LithosConfig::hp_holds_unowned (lithos policy): a high-priority
  // launch on TPCs no quota holds keeps new best-effort atoms off them until
  // it ends (true), or best-effort atoms are placed there beside it (false).
  bool hp_holds_unowned = true;
  // sched::LithosConfig::runs_free: best-effort tenants launch without grants
  // while no high-priority tenant has a stream open.
  bool best_effort_runs_free = true;
  // Clients set the hardware priority the engine decides on their streams
  // (docs/daemon.md, "Hardware priority"); off: streams keep the
  // applications' own priorities.
  bool stream_priorities = false;
  // When lithosd starts MPS itself: in multi-user mode (-M), so that clients
  // of several user ids share its server at once. Without it MPS serves one
  // uid at a time and a second uid's job waits until the first's are done.
  bool mps_multiuser = true;
  // `lithos status` shows every client's pid, uid and program to every
  // user. Off: a user other than root and the daemon's own sees those of
  // its own clients only (Daemon::status_json).
  bool status_shows_all = false;
  // The CUDA devices served: "0", a list ("0,1") or "all"; with several,
  // one process runs an Engine, a socket and a state folder per GPU
  // (docs/daemon.md, "Nodes with several GPUs").
  std::string device = "0";
  // Bounds on what clients may make the daemon hold (docs/daemon.md,
  // "Hostile clients"). Registered clients at most, and of one uid; of one
  // uid, connections that have not said Hello yet.
  int max_clients = 1024;
  int max_clients_per_uid = 256;
  int max_connecting_per_uid = 32;
  // Per client: best-effort launches waiting for their grants, atoms in
  // flight (granted, or hp launches reported and not yet seen to end),
  // grants waiting beyond its full grant ring, and Engine events (the
  // trace's lines) per second. A tenant's clients together hold at most
  // kTenantBoundFactor times as much. A client over a bound is not read
  // until it is under again.
  std::uint32_t max_pending_launches = 4096;
  std::uint32_t max_inflight = 16384;
  std::uint32_t max_queued_grants = 1024;
  double max_events_per_s = 1'000'000;
  // A client whose heartbeat (ipc::ChannelHeader::client_beat_ns) has not
  // moved for this long while it holds atoms or grants is dropped (it has
  // stopped); one holding work in flight that has neither completed any nor
  // taken a grant for progress_timeout_ms is dropped too. 0: off.
  double client_timeout_ms = 2000;
  double progress_timeout_ms = 30000;
  // A fatal GPU fault (docs/daemon.md, "GPU faults"): affected MPS client
  // processes get fault_exit_grace_ms to exit on their own, then SIGTERM,
  // then after fault_term_grace_ms SIGKILL (fault_ends_processes; false:
  // lithosd waits for them as long as it takes, the GPU out of service for
  // new MPS clients meanwhile).
  double fault_exit_grace_ms = 2000;
  double fault_term_grace_ms = 2000;
  bool fault_ends_processes = true;
  // Power management (docs/efficiency.md, "Power"): the mode, the slowdown
  // the clock choice tolerates (sched::DvfsConfig::tolerated_slowdown) and
  // the energy model's idle power and exponent (sched::EnergyModelConfig).
  PowerMode power = PowerMode::kOff;
  double power_slowdown = 0.05;
  double power_idle_w = 70.0;
  double power_exponent = 2.5;
  std::string state_dir;  // default: see default_state_dir()
  std::string trace;      // "" = no trace
  std::string default_tenant = kDefaultTenantName;
  std::vector<TenantConfig> tenants;
  std::string source;  // where it came from, for status: a file path, or "defaults"

  const TenantConfig* tenant(std::string_view name) const;
};

// Looks up user and group names; the default one asks the system
// (getpwnam_r/getgrnam_r). Tests pass their own.
struct IdResolver {
  std::function<Result<uid_t>(const std::string&)> user;
  std::function<Result<gid_t>(const std::string&)> group;
  static IdResolver system();
};

// Parses a configuration file's text; `source_name` prefixes every error
// ("file:line:column: ..."). Checks everything that does not depend on the
// GPU (validate() does the rest). User and group names are resolved now: an
// unknown name is an error naming it.
Result<DaemonConfig> parse_config(std::string_view toml_text, std::string_view source_name);
Result<DaemonConfig> parse_config(std::string_view toml_text, std::string_view source_name, const IdResolver& ids);

// Reads and parses `path`; kNotFound when the file does not exist.
Result<DaemonConfig> load_config(const std::string& path);

// No file: the defaults and the implicit default tenant.
DaemonConfig default_config();

// The default socket, by the rule clients use (ipc::default_socket_path):
// $LITHOS_DAEMON_SOCKET when set, /run/lithos/lithosd.sock for root, else
// $XDG_RUNTIME_DIR/lithos/lithosd.sock, else /tmp/lithos-<uid>/lithosd.sock.
std::string default_socket_path();
// The default state directory: /var/lib/lithos for root, else
// $XDG_STATE_HOME/lithos, else $HOME/.local/state/lithos.
std::string default_state_dir();

// Overrides from the LITHOSD_* variable of every setting that has one
// (settings.hpp; an unset or empty variable changes nothing). `getenv_fn` is
// std::getenv outside tests. Errors name the variable.
Status apply_env(DaemonConfig& c, const std::function<const char*(const char*)>& getenv_fn);

// Everything that must hold before the daemon serves a GPU of `device_tpcs`
// TPCs: the policy is known, atom_us in range, tenant names valid and unique,
// best-effort quotas 0, the quotas of high tenants add up to at most
// device_tpcs, fallback sets non-empty and inside the device, default_tenant
// declared.
Status validate(const DaemonConfig& c, int device_tpcs);

// Which tenant a connecting process gets:
//  1. `requested` non-empty: that tenant, if the process may claim it
//     (kNotFound: no such tenant; kFailedPrecondition: this uid/gid may not);
//  2. else the first tenant (in file order) with a match rule for `program`
//     that the process may claim;
//  3. else the default tenant, if the process may claim it.
struct Resolution {
  std::size_t index = 0;  // into DaemonConfig::tenants
  bool by_rule = false;
  bool by_default = false;
};
Result<Resolution> resolve_tenant(const DaemonConfig& c, std::string_view requested, std::string_view program,
                                  uid_t uid, gid_t gid, const std::vector<gid_t>& supplementary);

// Whether `t` admits a process with these credentials.
bool may_claim(const TenantConfig& t, uid_t uid, gid_t gid, const std::vector<gid_t>& supplementary);
// Glob with * (any run, also empty) and ? (one character); nothing else is special.
bool glob_match(std::string_view pattern, std::string_view text);

// The configuration as one JSON object (schema lithos.daemon-config/1), for
// `lithos status --json` and `lithos daemon --print-config`.
std::string config_json(const DaemonConfig& c);

}  // namespace lithos::daemon
