#include "intercept/config.hpp"

#include <charconv>
#include <cstdlib>
#include <cstring>

namespace lithos::intercept {

namespace {

bool truthy(const char* v) {
  return v != nullptr && (std::strcmp(v, "1") == 0 || std::strcmp(v, "true") == 0 || std::strcmp(v, "yes") == 0 ||
                          std::strcmp(v, "on") == 0);
}

bool falsy_or_empty(const char* v) {
  return v == nullptr || *v == '\0' || std::strcmp(v, "0") == 0 || std::strcmp(v, "false") == 0 ||
         std::strcmp(v, "no") == 0 || std::strcmp(v, "off") == 0;
}

}  // namespace

const char* backend_choice_name(BackendChoice b) {
  switch (b) {
    case BackendChoice::kAuto: return "auto";
    case BackendChoice::kDescriptor: return "descriptor";
    case BackendChoice::kGreen: return "green";
    case BackendChoice::kOff: return "off";
  }
  return "auto";
}

std::string Config::describe_request() const {
  switch (request) {
    case MaskRequest::kFirstN: return "the first " + std::to_string(first_n) + " live TPCs";
    case MaskRequest::kSet: return "TPCs " + tpc_set.to_string();
    case MaskRequest::kNone: break;
  }
  return "the whole GPU";
}

Config config_from_env(const EnvLookup& lookup) {
  Config c;
  auto get = [&](const char* name) -> const char* {
    const char* v = lookup ? lookup(name) : nullptr;
    return v != nullptr && *v != '\0' ? v : nullptr;
  };
  auto problem = [&](const char* name, const char* value, const std::string& why) {
    c.problems.push_back(std::string(name) + "='" + value + "': " + why);
  };

  if (const char* v = get("LITHOS_LOG")) {
    const std::string s = v;
    if (s == "off" || s == "none" || s == "0")
      c.log_level = LogLevel::kOff;
    else if (s == "error")
      c.log_level = LogLevel::kError;
    else if (s == "warn" || s == "warning")
      c.log_level = LogLevel::kWarn;
    else if (s == "info")
      c.log_level = LogLevel::kInfo;
    else if (s == "debug")
      c.log_level = LogLevel::kDebug;
    else
      problem("LITHOS_LOG", v, "expected off, error, warn, info or debug");
  }

  const char* tpcs = get("LITHOS_TPCS");
  const char* set = get("LITHOS_TPC_SET");
  if (tpcs != nullptr && set != nullptr) {
    c.problems.push_back("LITHOS_TPCS and LITHOS_TPC_SET are both set: give one; running on the whole GPU");
  } else if (tpcs != nullptr) {
    int n = 0;
    const char* end = tpcs + std::strlen(tpcs);
    const auto [ptr, ec] = std::from_chars(tpcs, end, n);
    if (ec != std::errc() || ptr != end) {
      problem("LITHOS_TPCS", tpcs, "not a whole number");
    } else if (n < 1 || n > sched::kMaxTpcs) {
      problem("LITHOS_TPCS", tpcs, "must be between 1 and " + std::to_string(sched::kMaxTpcs));
    } else {
      c.request = MaskRequest::kFirstN;
      c.first_n = n;
    }
  } else if (set != nullptr) {
    auto parsed = sched::TpcSet::parse(set);
    if (!parsed) {
      problem("LITHOS_TPC_SET", set, parsed.status().message());
    } else if (parsed->empty()) {
      problem("LITHOS_TPC_SET", set, "the set is empty");
    } else {
      c.request = MaskRequest::kSet;
      c.tpc_set = *parsed;
    }
  }

  if (const char* v = get("LITHOS_SLOT_MAP")) c.slot_map_path = v;

  if (const char* v = get("LITHOS_STATS")) {
    if (truthy(v))
      c.stats = true;
    else if (!falsy_or_empty(v))
      problem("LITHOS_STATS", v, "expected 1 or 0");
  }
  if (const char* v = get("LITHOS_STATS_FILE")) c.stats_file = v;

  if (const char* v = get("LITHOS_BACKEND")) {
    const std::string s = v;
    if (s == "auto")
      c.backend = BackendChoice::kAuto;
    else if (s == "descriptor")
      c.backend = BackendChoice::kDescriptor;
    else if (s == "green")
      c.backend = BackendChoice::kGreen;
    else if (s == "off")
      c.backend = BackendChoice::kOff;
    else
      problem("LITHOS_BACKEND", v, "expected auto, descriptor, green or off");
  }

  auto flag = [&](const char* name, bool* out) {
    if (const char* v = get(name)) {
      if (truthy(v))
        *out = true;
      else if (!falsy_or_empty(v))
        problem(name, v, "expected 1 or 0");
    }
  };
  // A switch that is on by default: 1 or 0 (empty: the default).
  auto on_off = [&](const char* name, bool* out) {
    if (const char* v = get(name)) {
      if (*v == '\0')
        ;  // unset: the default
      else if (truthy(v))
        *out = true;
      else if (falsy_or_empty(v))
        *out = false;
      else
        problem(name, v, "expected 1 or 0");
    }
  };
  // A number of the whole string; false when it is not one.
  auto number = [](const char* v, double* out) {
    char* end = nullptr;
    *out = std::strtod(v, &end);
    return end != v && *end == '\0';
  };
  auto micros = [&](const char* name, double lo, double hi, double* out) {
    if (const char* v = get(name)) {
      double d = 0;
      if (!number(v, &d) || !(d >= lo && d <= hi))
        problem(name, v,
                "expected microseconds between " + std::to_string(static_cast<int>(lo)) + " and " +
                    std::to_string(static_cast<int>(hi)));
      else
        *out = d;
    }
  };
  auto whole = [&](const char* name, unsigned lo, unsigned hi, const char* expected, std::uint32_t* out) {
    if (const char* v = get(name)) {
      unsigned n = 0;
      const char* end = v + std::strlen(v);
      const auto [ptr, ec] = std::from_chars(v, end, n);
      if (ec != std::errc() || ptr != end || n < lo || n > hi)
        problem(name, v, expected);
      else
        *out = n;
    }
  };
  flag("LITHOS_ATOMIZE", &c.atomize);
  flag("LITHOS_ATOM_TIME", &c.atom_time_all);
  micros("LITHOS_ATOM_US", 1, 1e7, &c.atom_us);
  micros("LITHOS_ATOM_COST_US", 0, 1e6, &c.atom_cost_us);
  whole("LITHOS_ATOMS", 1, 4096, "expected a whole number of atoms between 1 and 4096", &c.atoms_forced);
  if (const char* v = get("LITHOS_ATOM_REPORT")) c.atom_report = v;
  // The activity board's and the atom pacer's variables: their rules were
  // a second scheduling policy beside lithosd's Engine, and are gone.
  for (const char* name : {"LITHOS_ROLE", "LITHOS_BOARD", "LITHOS_HP_HOLD_US", "LITHOS_STEAL_ATOM"}) {
    if (const char* v = get(name)) {
      problem(name, v,
              "the activity board was removed: lithosd decides every launch (lithos daemon; lithos run --tenant NAME)");
    }
  }
  if (const char* v = get("LITHOS_ATOM_INFLIGHT")) {
    problem("LITHOS_ATOM_INFLIGHT", v,
            "the atom pacer was removed: atoms wait for lithosd's grants (lithos daemon; lithos run --tenant NAME), "
            "and without a daemon they are issued at once");
  }
  if (const char* v = get("LITHOS_DAEMON")) c.daemon_socket = std::strcmp(v, "off") == 0 ? "" : v;
  if (const char* v = get("LITHOS_TENANT")) {
    if (std::strlen(v) >= 64)
      problem("LITHOS_TENANT", v, "a tenant name has at most 63 characters");
    else
      c.tenant = v;
  }
  if (const char* v = get("LITHOS_GRANT_TIMEOUT_MS")) {
    double d = 0;
    if (!number(v, &d) || !(d >= 1.0 && d <= 600000.0))
      problem("LITHOS_GRANT_TIMEOUT_MS", v, "expected milliseconds between 1 and 600000");
    else
      c.grant_timeout_ms = d;
  }
  if (const char* v = get("LITHOS_DAEMON_UID")) {
    std::uint32_t uid = 0;
    const char* end = v + std::strlen(v);
    const auto [ptr, ec] = std::from_chars(v, end, uid);
    if (ec != std::errc() || ptr != end || uid == UINT32_MAX)
      problem("LITHOS_DAEMON_UID", v, "expected a numeric user id");
    else
      c.daemon_uid = uid;
  }
  if (const char* v = get("LITHOS_REGISTER_WAIT_MS")) {
    double d = 0;
    if (!number(v, &d) || !(d >= 0.0 && d <= 600000.0))
      problem("LITHOS_REGISTER_WAIT_MS", v, "expected milliseconds between 0 and 600000");
    else
      c.register_wait_ms = d;
  }
  on_off("LITHOS_DEFER_LAUNCHES", &c.defer_launches);
  on_off("LITHOS_HW_PRIORITY", &c.hw_priority);
  on_off("LITHOS_GRAPH_REPLAY", &c.graph_replay);
  on_off("LITHOS_SUBMIT_AHEAD", &c.submit_ahead);
  whole("LITHOS_DEFER_DEPTH", 1, 65536, "expected a whole number of launches between 1 and 65536", &c.defer_depth);
  whole("LITHOS_HP_SAMPLE_FIRST", 0, 1000000, "expected a whole number of launches between 0 and 1000000",
        &c.hp_sample_first);
  whole("LITHOS_HP_SAMPLE_EVERY", 0, 1000000, "expected a whole number of launches between 0 and 1000000",
        &c.hp_sample_every);
  whole("LITHOS_HP_SAMPLE_PER_S", 0, 100000, "expected a whole number of samples a second between 0 and 100000",
        &c.hp_sample_per_s);
  whole("LITHOS_HP_SAMPLE_MAX_MS", 1, 10000, "expected milliseconds between 1 and 10000", &c.hp_sample_max_ms);

  if (const char* v = get("LITHOS_TEST_FAULT")) {
    if (std::strcmp(v, "launch") == 0)
      c.fault_launch = true;
    else
      problem("LITHOS_TEST_FAULT", v, "expected launch");
  }
  return c;
}

bool disabled_from_env(const EnvLookup& lookup) {
  const char* v = lookup("LITHOS_DISABLE");
  return v != nullptr && truthy(v);
}

std::string expand_stats_path(const std::string& pattern, int pid) {
  std::string out;
  for (std::size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] == '%' && i + 1 < pattern.size() && pattern[i + 1] == 'p') {
      out += std::to_string(pid);
      ++i;
    } else {
      out += pattern[i];
    }
  }
  return out;
}

}  // namespace lithos::intercept
