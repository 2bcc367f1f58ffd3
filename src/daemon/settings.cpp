// The table of lithosd's settings (settings.hpp) and what is driven from it
// without the TOML parser: text values (environment, flags), JSON values
// and the Markdown reference.
#include "daemon/settings.hpp"

#include <sys/un.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "daemon/config.hpp"
#include "ipc/socket.hpp"
#include "sched/policies/catalog.hpp"
#include "sched/policies/settings_table.hpp"

namespace lithos::daemon {

namespace detail {

std::string json_number(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[40];
  if (v == std::trunc(v) && std::fabs(v) < 1e15) {  // integers as integers ("20", not "2e+01")
    std::snprintf(buf, sizeof buf, "%.0f", v);
    return buf;
  }
  for (int prec = 1; prec <= 17; ++prec) {
    std::snprintf(buf, sizeof buf, "%.*g", prec, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  return buf;
}

std::string policy_names() {
  std::string names;
  for (const sched::PolicyInfo& p : sched::policy_catalog()) names += (names.empty() ? "" : ", ") + p.name;
  return names;
}

bool policy_known(std::string_view name) {
  for (const sched::PolicyInfo& p : sched::policy_catalog()) {
    if (p.name == name) return true;
  }
  return false;
}

bool socket_path_fits(const std::string& p) {
  return !p.empty() && ipc::with_gpu(p, std::string(ipc::kGpuUuidChars, 'x')).size() < sizeof(sockaddr_un{}.sun_path);
}

std::string socket_path_rule() {
  return "must be a non-empty path of at most " + std::to_string(sizeof(sockaddr_un{}.sun_path) - 1) +
         " bytes (each %g counted as a GPU's UUID, " + std::to_string(ipc::kGpuUuidChars) + ")";
}

}  // namespace detail

namespace {

using detail::json_number;

std::string quoted(std::string_view s) { return "'" + std::string(s) + "'"; }

// Accessors of one DaemonConfig member.
template <class T>
void bind(Setting& s, T DaemonConfig::*member) {
  if constexpr (std::is_same_v<T, bool>) {
    s.get = [member](const DaemonConfig& c) { return std::string(c.*member ? "true" : "false"); };
    s.set = [member](DaemonConfig& c, std::string_view v) { c.*member = parse_switch(v).value_or(false); };
  } else if constexpr (std::is_same_v<T, std::string>) {
    s.get = [member](const DaemonConfig& c) { return c.*member; };
    s.set = [member](DaemonConfig& c, std::string_view v) { c.*member = std::string(v); };
  } else {
    s.get = [member](const DaemonConfig& c) { return json_number(static_cast<double>(c.*member)); };
    s.set = [member](DaemonConfig& c, std::string_view v) {
      c.*member = static_cast<T>(std::strtod(std::string(v).c_str(), nullptr));
    };
  }
}

struct Row {
  std::string_view key;
  SettingType type;
  std::string_view unit;
  double lo, hi;
  std::string_view env, flag, sim_key;
  std::string_view help;
};

template <class T>
Setting make(const Row& r, T DaemonConfig::*member) {
  Setting s;
  s.key = r.key;
  s.type = r.type;
  s.unit = r.unit;
  s.lo = r.lo;
  s.hi = r.hi;
  s.env = r.env;
  s.flag = r.flag;
  s.sim_key = r.sim_key;
  s.help = r.help;
  bind(s, member);
  return s;
}

// An Engine or policy setting: its type, unit and help are its row of the
// scheduler settings table (sched::scheduler_settings(), declared once there
// for the simulator and lithosd alike); lithosd's row adds only its key, the
// range lithosd accepts (inside the row's), its variable and flag, and the
// DaemonConfig field it is kept in.
struct EngineRow {
  std::string_view key;
  double lo, hi;
  std::string_view env, flag, sim_key;
};

SettingType setting_type(sched::SchedSettingType t) {
  switch (t) {
    case sched::SchedSettingType::kInteger: return SettingType::kInteger;
    case sched::SchedSettingType::kBool: return SettingType::kBool;
    case sched::SchedSettingType::kNumber: break;
  }
  return SettingType::kNumber;
}

template <class T>
Setting engine_setting(const EngineRow& r, T DaemonConfig::*member) {
  const sched::SchedSetting* row = sched::find_scheduler_setting(r.sim_key);
  // Every sim_key below is a row of that table (SettingsTable tests); a
  // missing one would leave type, unit and help empty, never crash.
  return make({r.key, row != nullptr ? setting_type(row->type) : SettingType::kNumber,
               row != nullptr ? row->unit : std::string_view(), r.lo, r.hi, r.env, r.flag, r.sim_key,
               row != nullptr ? row->help : std::string_view()},
              member);
}

std::vector<Setting> build() {
  using T = SettingType;
  std::vector<Setting> v;
  {
    Setting s = make({"socket", T::kString, "", 0, 0, "LITHOSD_SOCKET", "--socket", "",
                      "The Unix socket clients connect to; %g stands for the GPU's UUID, so that one setting gives "
                      "every GPU of a node its own daemon"},
                     &DaemonConfig::socket);
    s.default_text =
        "$LITHOS_DAEMON_SOCKET when set, /run/lithos/lithosd.sock for root, else "
        "$XDG_RUNTIME_DIR/lithos/lithosd.sock, else /tmp/lithos-UID/lithosd.sock";
    s.check = [](std::string_view x) {
      return detail::socket_path_fits(std::string(x)) ? std::string() : "'socket' " + detail::socket_path_rule();
    };
    v.push_back(std::move(s));
  }
  {
    Setting s = make({"policy", T::kString, "", 0, 0, "LITHOSD_POLICY", "--policy", "",
                      "The scheduling policy (`lithos sim --list` shows them)"},
                     &DaemonConfig::policy);
    s.check = [](std::string_view x) {
      return detail::policy_known(x) ? std::string()
                                     : "unknown policy " + quoted(x) + " (valid: " + detail::policy_names() + ")";
    };
    v.push_back(std::move(s));
  }
  {
    Setting s;
    s.key = "mps";
    s.type = T::kString;
    s.env = "LITHOSD_MPS";
    s.flag = "--mps";
    s.help =
        "CUDA MPS: auto (attach to a running MPS control daemon, else start one), start (start one, fail if it "
        "cannot), attach (require a running one) or off";
    s.check = [](std::string_view x) {
      return parse_mps_mode(x) ? std::string() : "mps " + quoted(x) + " is not one of auto, start, attach, off";
    };
    s.get = [](const DaemonConfig& c) { return std::string(mps_mode_name(c.mps)); };
    s.set = [](DaemonConfig& c, std::string_view x) { c.mps = parse_mps_mode(x).value_or(MpsMode::kAuto); };
    v.push_back(std::move(s));
  }
  v.push_back(engine_setting({"atom_us", kMinAtomUs, kMaxAtomUs, "LITHOSD_ATOM_US", "--atom-us", "atom_target_us"},
                             &DaemonConfig::atom_us));
  v.push_back(engine_setting(
      {"throttle_us", kMinThrottleUs, kMaxThrottleUs, "LITHOSD_THROTTLE_US", "--throttle-us", "throttle_us"},
      &DaemonConfig::throttle_us));
  v.push_back(engine_setting({"throttle_unborrowed_us", kMinThrottleUs, kMaxThrottleUs,
                              "LITHOSD_THROTTLE_UNBORROWED_US", "--throttle-unborrowed-us", "throttle_unborrowed_us"},
                             &DaemonConfig::throttle_unborrowed_us));
  v.push_back(engine_setting(
      {"max_stolen_atoms", 0, kMaxStolenAtoms, "LITHOSD_MAX_STOLEN_ATOMS", "--max-stolen-atoms", "max_stolen_atoms"},
      &DaemonConfig::max_stolen_atoms));
  v.push_back(engine_setting({"pause_slowdown", kMinPauseSlowdown, kMaxPauseSlowdown, "LITHOSD_PAUSE_SLOWDOWN",
                              "--pause-slowdown", "pause_slowdown"},
                             &DaemonConfig::pause_slowdown));
  v.push_back(
      engine_setting({"idle_grace_us", 0, kMaxIdleGraceUs, "LITHOSD_IDLE_GRACE_US", "--idle-grace-us", "idle_grace_us"},
                     &DaemonConfig::idle_grace_us));
  v.push_back(
      engine_setting({"burst_gap_us", 0, kMaxIdleGraceUs, "LITHOSD_BURST_GAP_US", "--burst-gap-us", "burst_gap_us"},
                     &DaemonConfig::burst_gap_us));
  v.push_back(make({"hp_poll_us", T::kNumber, "us", 0, kMaxHpPollUs, "LITHOSD_HP_POLL_US", "", "",
                    "While only high-priority work is in flight (no best-effort tenant has work or had any in the "
                    "last 2 ms), the daemon's loop sleeps this long between turns instead of spinning; 0: it spins"},
                   &DaemonConfig::hp_poll_us));
  v.push_back(engine_setting({"share_unowned", 0, 0, "LITHOSD_SHARE_UNOWNED", "--share-unowned", "share_unowned"},
                             &DaemonConfig::share_unowned));
  v.push_back(
      engine_setting({"hp_holds_unowned", 0, 0, "LITHOSD_HP_HOLDS_UNOWNED", "--hp-holds-unowned", "hp_holds_unowned"},
                     &DaemonConfig::hp_holds_unowned));
  v.push_back(
      engine_setting({"rightsize", 0, 0, "LITHOSD_RIGHTSIZE", "--rightsize", "rightsize"}, &DaemonConfig::rightsize));
  v.push_back(engine_setting(
      {"rightsize_slip", 1, kMaxRightsizeSlip, "LITHOSD_RIGHTSIZE_SLIP", "--rightsize-slip", "rightsize_slip"},
      &DaemonConfig::rightsize_slip));
  v.push_back(
      engine_setting({"rightsize_probe_after", 0, 1e6, "LITHOSD_RIGHTSIZE_PROBE_AFTER", "", "rightsize_probe_after"},
                     &DaemonConfig::rightsize_probe_after));
  v.push_back(
      engine_setting({"rightsize_probe_every", 1, 1e6, "LITHOSD_RIGHTSIZE_PROBE_EVERY", "", "rightsize_probe_every"},
                     &DaemonConfig::rightsize_probe_every));
  v.push_back(
      engine_setting({"rightsize_probe_budget", 0, 1, "LITHOSD_RIGHTSIZE_PROBE_BUDGET", "", "rightsize_probe_budget"},
                     &DaemonConfig::rightsize_probe_budget));
  v.push_back(
      make({"best_effort_runs_free", T::kBool, "", 0, 0, "LITHOSD_BEST_EFFORT_RUNS_FREE", "--best-effort-runs-free", "",
            "Lithos policy: true: best-effort launches go out without waiting for grants while no "
            "high-priority tenant has a stream open; false: they always wait"},
           &DaemonConfig::best_effort_runs_free));
  v.push_back(make({"stream_priorities", T::kBool, "", 0, 0, "LITHOSD_STREAM_PRIORITIES", "--stream-priorities", "",
                    "true: clients set the engine's hardware priority on their streams (high-priority tenants at "
                    "the greatest stream priority, best-effort atoms at the least); false: streams keep the "
                    "applications' own"},
                   &DaemonConfig::stream_priorities));
  v.push_back(make({"mps_multiuser", T::kBool, "", 0, 0, "LITHOSD_MPS_MULTIUSER", "--mps-multiuser", "",
                    "true: an MPS control daemon lithosd starts runs in multi-user mode (-M), so that clients of "
                    "several user ids share its server at once; false: MPS serves one user id at a time"},
                   &DaemonConfig::mps_multiuser));
  v.push_back(make({"status_shows_all", T::kBool, "", 0, 0, "", "", "",
                    "true: `lithos status` shows every client's pid, uid and program to every user; false: a user "
                    "other than root and the daemon's own sees those of its own clients only"},
                   &DaemonConfig::status_shows_all));
  {
    Setting s = make({"device", T::kString, "", 0, 0, "LITHOSD_DEVICE", "--device", "",
                      "The CUDA devices served: an ordinal, a list (0,1) or all. With several, one process serves "
                      "each of them, with an Engine, a socket and a state folder per GPU (the socket path must then "
                      "hold %g; a state_dir without %g gets a folder per GPU under it) and one MPS control daemon "
                      "for them all"},
                     &DaemonConfig::device);
    s.check = [](std::string_view x) {
      std::vector<int> devices;
      bool all = false;
      const Status st = parse_devices(x, &devices, &all);
      return st.is_ok() ? std::string() : "'device' " + quoted(x) + ": " + st.message();
    };
    v.push_back(std::move(s));
  }
  v.push_back(make({"max_clients", T::kInteger, "", 1, kMaxMaxClients, "", "", "",
                    "Registered clients at most (a file descriptor each)"},
                   &DaemonConfig::max_clients));
  v.push_back(make({"max_clients_per_uid", T::kInteger, "", 1, kMaxMaxClients, "", "", "",
                    "Registered clients of one uid, root included"},
                   &DaemonConfig::max_clients_per_uid));
  v.push_back(make({"max_connecting_per_uid", T::kInteger, "", 1, kMaxConnectingPerUid, "", "", "",
                    "Connections of one uid waiting for their Hello"},
                   &DaemonConfig::max_connecting_per_uid));
  v.push_back(make({"max_pending_launches", T::kInteger, "", kMinClientBound, kMaxClientBound, "", "", "",
                    "Best-effort launches one client may have waiting for their grants; a client over it is not "
                    "read until under"},
                   &DaemonConfig::max_pending_launches));
  v.push_back(make({"max_inflight", T::kInteger, "", kMinInflightBound, kMaxClientBound, "", "", "",
                    "Atoms one client may have in flight (granted, or high-priority launches reported and not seen "
                    "to end)"},
                   &DaemonConfig::max_inflight));
  v.push_back(make({"max_queued_grants", T::kInteger, "", kMinClientBound, kMaxClientBound, "", "", "",
                    "Grants one client may leave waiting beyond its full grant ring; at twice this it is dropped"},
                   &DaemonConfig::max_queued_grants));
  v.push_back(make({"max_events_per_s", T::kInteger, "per s", kMinEventsPerS, kMaxEventsPerS, "", "", "",
                    "Engine events (submits, atoms granted, completions) one client may cause per second"},
                   &DaemonConfig::max_events_per_s));
  v.push_back(make({"client_timeout_ms", T::kNumber, "ms", kMinClientTimeoutMs, kMaxClientTimeoutMs, "", "", "",
                    "A client holding work whose heartbeat has not moved this long is dropped as stopped; 0: off"},
                   &DaemonConfig::client_timeout_ms));
  v.back().zero_is_off = true;
  v.push_back(make({"progress_timeout_ms", T::kNumber, "ms", kMinClientTimeoutMs, kMaxClientTimeoutMs, "", "", "",
                    "A client holding work that has neither completed an atom nor taken a grant this long is "
                    "dropped; 0: off"},
                   &DaemonConfig::progress_timeout_ms));
  v.back().zero_is_off = true;
  v.push_back(make({"fault_exit_grace_ms", T::kNumber, "ms", 0, kMaxFaultGraceMs, "", "", "",
                    "After a fatal GPU fault, how long an affected MPS client process may take to exit on its own "
                    "before lithosd sends it SIGTERM"},
                   &DaemonConfig::fault_exit_grace_ms));
  v.push_back(make({"fault_term_grace_ms", T::kNumber, "ms", 0, kMaxFaultGraceMs, "", "", "",
                    "How long after that SIGTERM before SIGKILL"},
                   &DaemonConfig::fault_term_grace_ms));
  v.push_back(make({"fault_ends_processes", T::kBool, "", 0, 0, "", "", "",
                    "false: lithosd signals no process after a fault; the GPU then takes no new MPS client until "
                    "every affected process has exited by itself"},
                   &DaemonConfig::fault_ends_processes));
  {
    Setting s;
    s.key = "power";
    s.type = T::kString;
    s.env = "LITHOSD_POWER";
    s.flag = "--power";
    s.help =
        "Power management (docs/efficiency.md, \"Power\"): off; dry-run (read clocks, power and energy through NVML, "
        "choose one SM clock for the work in flight and report it, never set anything); on (also lock the GPU's "
        "clocks to the choice; needs root, else reported once and run as dry-run; reset at exit and, through a "
        "guardian process, when lithosd dies)";
    s.check = [](std::string_view x) {
      return parse_power_mode(x) ? std::string() : "power " + quoted(x) + " is not one of off, dry-run, on";
    };
    s.get = [](const DaemonConfig& c) { return std::string(power_mode_name(c.power)); };
    s.set = [](DaemonConfig& c, std::string_view x) { c.power = parse_power_mode(x).value_or(PowerMode::kOff); };
    v.push_back(std::move(s));
  }
  v.push_back(make({"power_slowdown", T::kNumber, "", kMinPowerSlowdown, kMaxPowerSlowdown, "LITHOSD_POWER_SLOWDOWN",
                    "--power-slowdown", "",
                    "The slowdown k the clock choice tolerates: f = f_max / (1 + k/S), S the runtime-weighted "
                    "sensitivity of the work in flight"},
                   &DaemonConfig::power_slowdown));
  v.push_back(make({"power_idle_w", T::kNumber, "W", 0, kMaxPowerIdleW, "LITHOSD_POWER_IDLE_W", "", "",
                    "The energy model's idle power P_idle: power at clock f is modelled as P_idle + (P_measured - "
                    "P_idle) * (f / f_run)^power_exponent"},
                   &DaemonConfig::power_idle_w));
  v.push_back(
      make({"power_exponent", T::kNumber, "", kMinPowerExponent, kMaxPowerExponent, "LITHOSD_POWER_EXPONENT", "", "",
            "The energy model's exponent a (dynamic power ~ f V^2 with V roughly linear in f near the top "
            "of the V-f curve: about 3; 2.5 leaves room for its flat part)"},
           &DaemonConfig::power_exponent));
  {
    Setting s = make({"state_dir", T::kString, "", 0, 0, "LITHOSD_STATE_DIR", "--state-dir", "",
                      "Where the daemon keeps its state: predictor.cache, what the latency predictor learnt, loaded "
                      "at start and written every 30 s and at exit (%g: the GPU's UUID). Made when missing; it and "
                      "the folders above it must belong to root or this user and not be writable by others"},
                     &DaemonConfig::state_dir);
    s.default_text = "/var/lib/lithos for root, else $XDG_STATE_HOME/lithos, else $HOME/.local/state/lithos";
    s.check = [](std::string_view x) {
      return x.empty() ? std::string("'state_dir' is empty (omit it for the default)") : std::string();
    };
    v.push_back(std::move(s));
  }
  v.push_back(make({"trace", T::kString, "", 0, 0, "LITHOSD_TRACE", "--trace", "",
                    "Write every scheduling event (launches, decisions, completions) to this file, one JSON object "
                    "per line (%g: the GPU's UUID); empty: none. A new file replaces an old one, never through a "
                    "link, in a folder that belongs to root or this user and no other user can write"},
                   &DaemonConfig::trace));
  v.push_back(make({"default_tenant", T::kString, "", 0, 0, "", "", "",
                    "The tenant of a process that names none and matches no rule; it must be declared"},
                   &DaemonConfig::default_tenant));
  // What a trace's header carries, and what traces written before a
  // setting existed ran with.
  const std::pair<std::string_view, std::string_view> traced[] = {
      {"policy", ""},
      {"atom_us", ""},
      {"throttle_us", ""},
      {"throttle_unborrowed_us", "0"},  // every atom held to throttle_us
      {"max_stolen_atoms", "2"},
      {"pause_slowdown", "1.15"},  // nothing paused automatically then
      {"idle_grace_us", "20"},
      {"burst_gap_us", "0"},               // no burst grace then
      {"best_effort_runs_free", "false"},  // never free then
      {"share_unowned", "true"},
      {"hp_holds_unowned", "true"},  // always held then
      {"rightsize", "false"},        // none then
      {"rightsize_slip", "1.1"},
      {"rightsize_probe_after", "4"},
      {"rightsize_probe_every", "32"},
      {"rightsize_probe_budget", "0.01"},
      {"socket", ""},
      {"default_tenant", ""},
  };
  for (const auto& [key, absent] : traced) {
    for (Setting& s : v) {
      if (s.key != key) continue;
      s.traced = true;
      s.trace_absent = absent;
    }
  }
  return v;
}

}  // namespace

const std::vector<Setting>& settings() {
  static const std::vector<Setting> table = build();
  return table;
}

const Setting* find_setting(std::string_view key) {
  for (const Setting& s : settings()) {
    if (s.key == key) return &s;
  }
  return nullptr;
}

std::string setting_rule(const Setting& s) {
  switch (s.type) {
    case SettingType::kBool: return "true or false";
    case SettingType::kString: return "text";
    case SettingType::kNumber:
    case SettingType::kInteger: {
      std::string r = (s.type == SettingType::kInteger ? "an integer in [" : "a number in [") + json_number(s.lo) +
                      ", " + json_number(s.hi) + "]";
      return s.zero_is_off ? "0 (off) or " + r : r;
    }
  }
  return "";
}

Status set_setting(DaemonConfig& c, const Setting& s, std::string_view text, std::string_view origin) {
  const std::string value(text);
  const auto bad = [&](const std::string& what) {
    return Status::invalid_argument(std::string(origin) + ": " + quoted(value) + " " + what);
  };
  switch (s.type) {
    case SettingType::kBool:
      if (!parse_switch(value)) return bad("is not true or false");
      s.set(c, *parse_switch(value) ? "true" : "false");
      return Status::ok();
    case SettingType::kString:
      if (s.check) {
        if (std::string why = s.check(value); !why.empty()) {
          return Status::invalid_argument(std::string(origin) + ": " + why);
        }
      }
      s.set(c, value);
      return Status::ok();
    case SettingType::kNumber:
    case SettingType::kInteger: {
      char* end = nullptr;
      errno = 0;
      const double d = std::strtod(value.c_str(), &end);
      bool ok = !value.empty() && end != value.c_str() && *end == '\0' && errno == 0 && std::isfinite(d);
      if (ok && s.type == SettingType::kInteger) {
        ok = d == std::trunc(d) && value.find_first_of(".eE") == std::string::npos && value[0] != '-';
      }
      if (ok) ok = (d >= s.lo && d <= s.hi) || (s.zero_is_off && d == 0);
      if (!ok) return bad("is not " + setting_rule(s));
      s.set(c, json_number(d));
      return Status::ok();
    }
  }
  return Status::internal("unknown setting type");
}

std::string setting_json(const DaemonConfig& c, const Setting& s) {
  const std::string v = s.get(c);
  return s.type == SettingType::kString ? detail::json_string(v) : v;
}

std::vector<std::string_view> setting_env_vars() {
  std::vector<std::string_view> out;
  for (const Setting& s : settings()) {
    if (!s.env.empty()) out.push_back(s.env);
  }
  return out;
}

std::string config_reference_markdown() {
  const DaemonConfig def = default_config();
  std::string md =
      "# Configuration reference\n\n"
      "Generated from the settings table (src/daemon/settings.cpp) by `lithos daemon --config-reference`; a "
      "test keeps this file equal to its output.\n\n"
      "lithosd reads its settings from the `[daemon]` table of its configuration file (`--config`, default "
      "/etc/lithos/lithosd.toml), then from `LITHOSD_*` environment variables, then from flags of `lithos "
      "daemon`: flags > environment > file > defaults. An unset or empty variable changes nothing. Tenants "
      "(`[[tenant]]`) are described in docs/daemon.md. The simulator's `[scheduler]` table "
      "(docs/scenarios.md) sets the same Engine and policy settings under the key in the `[scheduler]` column; "
      "all its keys are listed in the last section.\n\n"
      "| key | type | unit | default | range | environment | flag | `[scheduler]` | meaning |\n"
      "|---|---|---|---|---|---|---|---|---|\n";
  const auto code = [](std::string_view x) { return x.empty() ? std::string("-") : "`" + std::string(x) + "`"; };
  for (const Setting& s : settings()) {
    const char* type = s.type == SettingType::kBool      ? "bool"
                       : s.type == SettingType::kString  ? "string"
                       : s.type == SettingType::kInteger ? "integer"
                                                         : "number";
    std::string def_text = s.default_text.empty() ? code(setting_json(def, s)) : std::string(s.default_text);
    std::string range = s.type == SettingType::kNumber || s.type == SettingType::kInteger
                            ? (s.zero_is_off ? "0 or " : "") + json_number(s.lo) + " to " + json_number(s.hi)
                            : "-";
    md += "| `" + std::string(s.key) + "` | " + type + " | " + (s.unit.empty() ? "-" : std::string(s.unit)) + " | " +
          def_text + " | " + range + " | " + code(s.env) + " | " + code(s.flag) + " | " + code(s.sim_key) + " | " +
          std::string(s.help) + " |\n";
  }
  md += scheduler_reference_markdown();
  return md;
}

std::string scheduler_reference_markdown() {
  std::string md =
      "\n## The simulator's `[scheduler]` table\n\n"
      "Generated from the Engine's and the policies' settings table (src/sched/policies/settings_table.cpp), from "
      "which `lithos sim` reads a scenario's `[scheduler]` table (docs/scenarios.md); a key left out keeps the "
      "default below (the Engine's and the policies' own). lithosd sets those of them its own key names (above).\n\n"
      "| key | type | unit | default | range | sets | lithosd | meaning |\n"
      "|---|---|---|---|---|---|---|---|\n";
  sched::EngineConfig engine;
  sched::PolicySettings policies;
  bool immediate = false;
  const sched::SchedulerTarget def{&engine, &policies, &immediate};
  for (const sched::SchedSetting& s : sched::scheduler_settings()) {
    const bool is_bool = s.type == sched::SchedSettingType::kBool;
    const char* type = is_bool ? "bool" : s.type == sched::SchedSettingType::kInteger ? "integer" : "number";
    const double v = s.get(def);
    const std::string def_text = is_bool ? (v != 0 ? "true" : "false") : json_number(v);
    const std::string range = is_bool ? "-"
                                      : std::string(s.lo_open ? "(" : "[") + json_number(s.lo) + ", " +
                                            json_number(s.hi) + (s.hi_open ? ")" : "]");
    std::string daemon_key = "-";
    for (const Setting& d : settings()) {
      if (d.sim_key == s.key) daemon_key = "`" + std::string(d.key) + "`";
    }
    md += "| `" + std::string(s.key) + "` | " + type + " | " + (s.unit.empty() ? "-" : std::string(s.unit)) + " | `" +
          def_text + "` | " + range + " | `" + std::string(s.field) + "` | " + daemon_key + " | " +
          std::string(s.help) + " |\n";
  }
  return md;
}

}  // namespace lithos::daemon
