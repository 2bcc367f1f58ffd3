// lithosd's configuration (config.hpp, docs/daemon.md). Nothing here throws:
// toml++ errors become Status values with the file, line and column, and
// anything else that escapes the parser becomes kInternal. (Over 600
// lines: tenants, their admission rules and every check of a file a
// hostile user may have written.)
#include "daemon/config.hpp"

#include <grp.h>
#include <pwd.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <fstream>
#include <sstream>
#include <type_traits>

#include "daemon/settings.hpp"
#include "ipc/socket.hpp"
#include "sched/policies/catalog.hpp"

#include "toml/reader.hpp"

namespace lithos::daemon {

namespace {

constexpr std::size_t kMaxTenants = 256;
constexpr double kMaxSloMs = 3'600'000;      // one hour
constexpr std::int64_t kMaxId = 0xfffffffe;  // uid_t/gid_t; (uid_t)-1 means "no id"

// ---- small helpers ----------------------------------------------------------

std::string where(std::string_view source, const toml::source_region& s) { return tomlio::position(source, s); }
std::string where(std::string_view source, const toml::node& n) { return tomlio::position(source, n); }

std::string quoted(std::string_view s) { return "'" + std::string(s) + "'"; }
using detail::json_number;
using detail::json_string;
using detail::policy_known;
using detail::policy_names;
using detail::socket_path_fits;
using detail::socket_path_rule;

bool is_tenant_name(std::string_view s) {
  return !s.empty() && s.size() <= kMaxTenantName && std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_' ||
           c == '.';
  });
}
constexpr const char* kTenantNameRule = "must be 1-63 letters, digits, '-', '_' or '.'";

bool all_digits(std::string_view s) {
  return !s.empty() && s.size() <= 10 && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

std::string tenant_names(const DaemonConfig& c) {
  std::string list;
  for (const TenantConfig& t : c.tenants) list += (list.empty() ? "" : ", ") + t.name;
  return list;
}

std::string ids_text(const char* what, const std::vector<unsigned>& ids) {
  std::string s = what;
  for (std::size_t i = 0; i < ids.size(); ++i) s += (i == 0 ? " " : ",") + std::to_string(ids[i]);
  return s;
}

// Who a tenant admits, for refusals: "users 1001,1002; groups 1005".
std::string admits(const TenantConfig& t) {
  std::vector<unsigned> u(t.uids.begin(), t.uids.end());
  std::vector<unsigned> g(t.gids.begin(), t.gids.end());
  if (u.empty()) return ids_text("groups", g);
  if (g.empty()) return ids_text("users", u);
  return ids_text("users", u) + "; " + ids_text("groups", g);
}

// ---- the system's user and group databases ----------------------------------

// getpwnam_r/getgrnam_r with a buffer that grows until the entry fits.
template <class Entry, class Id, class Fn>
Result<Id> lookup_id(const std::string& name, const char* what, int size_hint, Fn fn, Id Entry::*field) {
  const long hint = ::sysconf(size_hint);
  std::size_t size = hint > 0 ? static_cast<std::size_t>(hint) : 16384;
  for (int attempt = 0; attempt < 8; ++attempt, size *= 2) {
    std::vector<char> buf(size);
    Entry entry{};
    Entry* found = nullptr;
    const int rc = fn(name.c_str(), &entry, buf.data(), buf.size(), &found);
    if (rc == ERANGE) continue;
    if (rc != 0 && rc != ENOENT && rc != ESRCH) {
      return Status::unavailable("cannot look up " + std::string(what) + " " + quoted(name) + ": " + std::strerror(rc));
    }
    if (found == nullptr) return Status::not_found("unknown " + std::string(what) + " " + quoted(name));
    return entry.*field;
  }
  return Status::unavailable("cannot look up " + std::string(what) + " " + quoted(name) + ": entry too large");
}

// ---- parsing ----------------------------------------------------------------

struct Parser {
  std::string_view source;
  const IdResolver& ids;

  Status error(const toml::node& n, const std::string& message) const {
    return Status::invalid_argument(where(source, n) + ": " + message);
  }

  // A table's keys must all be known; the error lists the valid ones.
  Status check_keys(const toml::table& t, std::string_view what, std::initializer_list<std::string_view> known) const {
    const toml::key* k = tomlio::first_unknown_key(t, known);
    if (k == nullptr) return Status::ok();
    return Status::invalid_argument(where(source, k->source()) + ": unknown key " + quoted(k->str()) + " in " +
                                    std::string(what) + " (valid: " + tomlio::key_list(known) + ")");
  }

  // The string at `key`, or nullopt when absent.
  Result<std::optional<std::string>> string(const toml::table& t, std::string_view key) const {
    const toml::node* n = t.get(key);
    if (n == nullptr) return std::optional<std::string>();
    if (!n->is_string()) return error(*n, quoted(key) + " must be a string");
    return std::optional<std::string>(n->as_string()->get());
  }

  // A number in [lo, hi] at `key` (integers accepted), or nullopt when absent.
  Result<std::optional<double>> number(const toml::table& t, std::string_view key, double lo, double hi,
                                       bool integer) const {
    const toml::node* n = t.get(key);
    if (n == nullptr) return std::optional<double>();
    const std::optional<double> read = tomlio::number(*n, integer);
    if (!read) return error(*n, quoted(key) + " must be " + (integer ? "an integer" : "a number"));
    const double v = *read;
    if (!std::isfinite(v) || v < lo || v > hi) {
      return error(*n, quoted(key) + " = " + json_number(v) + " is out of range [" + json_number(lo) + ", " +
                           json_number(hi) + "]");
    }
    return std::optional<double>(v);
  }

  // An array of strings at `key` (absent: empty).
  Status strings(const toml::table& t, std::string_view key, std::vector<std::string>& out) const {
    const toml::node* n = t.get(key);
    if (n == nullptr) return Status::ok();
    const auto* a = n->as_array();
    if (a == nullptr) return error(*n, quoted(key) + " must be an array of strings");
    for (const auto& e : *a) {
      const auto* s = e.as_string();
      if (s == nullptr || s->get().empty())
        return error(e, "an element of " + quoted(key) + " must be a non-empty string");
      out.push_back(s->get());
    }
    return Status::ok();
  }

  // users = ["alice", 1001] / groups = ["ml", 1005]: names resolved now, numbers taken as ids.
  template <class Id>
  Status ids_of(const toml::table& t, std::string_view key, const char* what,
                const std::function<Result<Id>(const std::string&)>& resolve, const std::string& ctx,
                std::vector<Id>& out) const {
    const toml::node* n = t.get(key);
    if (n == nullptr) return Status::ok();
    const auto* a = n->as_array();
    if (a == nullptr) return error(*n, ctx + ": " + quoted(key) + " must be an array of " + what + " names or ids");
    for (const auto& e : *a) {
      std::int64_t id = -1;
      if (const auto* i = e.as_integer()) {
        id = i->get();
        if (id < 0 || id > kMaxId) return error(e, ctx + ": " + std::to_string(id) + " is not a valid " + what + " id");
      } else if (const auto* s = e.as_string()) {
        const std::string& name = s->get();
        if (all_digits(name)) {
          id = std::strtoll(name.c_str(), nullptr, 10);
          if (id > kMaxId) return error(e, ctx + ": " + name + " is not a valid " + what + " id");
        } else {
          if (name.empty()) return error(e, ctx + ": an empty " + std::string(what) + " name");
          auto r = resolve(name);
          if (!r) return error(e, ctx + ": " + quoted(key) + ": " + r.status().message());
          id = static_cast<std::int64_t>(*r);
        }
      } else {
        return error(e, ctx + ": an element of " + quoted(key) + " must be a " + what + " name or id");
      }
      const Id v = static_cast<Id>(id);
      if (std::find(out.begin(), out.end(), v) == out.end()) out.push_back(v);
    }
    return Status::ok();
  }

  Result<TenantConfig> tenant(const toml::table& t) const {
    LITHOS_RETURN_IF_ERROR(check_keys(t, "[[tenant]]",
                                      {"name", "priority", "quota", "slo_ms", "users", "groups", "match",
                                       "fallback_tpcs", "pauses_best_effort", "mps", "rightsize", "rightsize_slip"}));
    TenantConfig out;
    out.where = where(source, t);
    auto name = string(t, "name");
    if (!name) return name.status();
    if (!name->has_value()) return Status::invalid_argument(out.where + ": [[tenant]] needs 'name'");
    if (!is_tenant_name(**name)) {
      return error(*t.get("name"), "tenant name " + quoted(**name) + " " + kTenantNameRule);
    }
    out.name = **name;
    const std::string ctx = "tenant " + quoted(out.name);

    auto prio = string(t, "priority");
    if (!prio) return prio.status();
    if (!prio->has_value() || **prio == "best-effort") {
      out.priority = sched::PriorityClass::kBestEffort;
    } else if (**prio == "high") {
      out.priority = sched::PriorityClass::kHigh;
    } else {
      return error(*t.get("priority"), ctx + ": priority " + quoted(**prio) + " is not one of high, best-effort");
    }

    auto quota = number(t, "quota", 0, sched::kMaxTpcs, true);
    if (!quota) return quota.status();
    out.quota = static_cast<int>(quota->value_or(0));
    if (out.priority == sched::PriorityClass::kBestEffort && out.quota != 0) {
      return error(*t.get("quota"), ctx + ": a best-effort tenant must have quota 0 (it has " +
                                        std::to_string(out.quota) + "); only high-priority tenants hold TPCs");
    }

    auto slo = number(t, "slo_ms", 0, kMaxSloMs, false);
    if (!slo) return slo.status();
    if (slo->has_value()) {
      if (!(**slo > 0)) return error(*t.get("slo_ms"), ctx + ": 'slo_ms' must be > 0");
      out.slo = ms(**slo);
    }

    LITHOS_RETURN_IF_ERROR(ids_of<uid_t>(t, "users", "user", ids.user, ctx, out.uids));
    LITHOS_RETURN_IF_ERROR(ids_of<gid_t>(t, "groups", "group", ids.group, ctx, out.gids));
    LITHOS_RETURN_IF_ERROR(strings(t, "match", out.match));

    if (const toml::node* n = t.get("fallback_tpcs")) {
      const auto* s = n->as_string();
      if (s == nullptr) return error(*n, ctx + ": 'fallback_tpcs' must be a string such as \"0-43\"");
      auto set = sched::TpcSet::parse(s->get());
      if (!set) {
        return error(*n, ctx + ": fallback_tpcs " + quoted(s->get()) + ": " + set.status().message() +
                             " (expected TPC ids and ranges, e.g. \"0-43\" or \"0-7,16-23\")");
      }
      if (set->empty()) return error(*n, ctx + ": fallback_tpcs is empty (omit it to let the daemon decide)");
      out.fallback = *set;
    }
    // Unset: "auto" for a high-priority tenant (docs/daemon.md, "Pausing
    // best-effort work").
    if (out.priority == sched::PriorityClass::kHigh) out.pauses_best_effort = sched::BestEffortPause::kAuto;
    if (const toml::node* n = t.get("pauses_best_effort")) {
      const auto mode = sched::best_effort_pause_of(n->value_exact<bool>(), n->value_exact<std::string_view>());
      if (!mode) return error(*n, ctx + ": 'pauses_best_effort' " + sched::kBestEffortPauseRule);
      out.pauses_best_effort = *mode;
      if (out.pauses_best_effort != sched::BestEffortPause::kNever && out.priority != sched::PriorityClass::kHigh) {
        return error(*n, ctx + ": only a high-priority tenant pauses best-effort work");
      }
    }
    if (const toml::node* n = t.get("mps")) {
      if (!n->is_boolean()) return error(*n, ctx + ": 'mps' must be true or false");
      out.mps = n->as_boolean()->get();
    }
    if (const toml::node* n = t.get("rightsize")) {
      if (!n->is_boolean()) return error(*n, ctx + ": 'rightsize' must be true or false");
      out.rightsize = n->as_boolean()->get();
    }
    auto slip = number(t, "rightsize_slip", 1.0, kMaxRightsizeSlip, false);
    if (!slip) return slip.status();
    out.rightsize_slip = *slip;
    return out;
  }

  // One setting of the table (settings.hpp) from its [daemon] key.
  Status setting(const toml::table& d, const Setting& s, DaemonConfig& c) const {
    const toml::node* n = d.get(s.key);
    if (n == nullptr) return Status::ok();
    const std::string key(s.key);
    switch (s.type) {
      case SettingType::kBool:
        if (!n->is_boolean()) return error(*n, quoted(key) + " must be true or false");
        s.set(c, n->as_boolean()->get() ? "true" : "false");
        return Status::ok();
      case SettingType::kNumber:
      case SettingType::kInteger: {
        auto v = number(d, key, s.zero_is_off ? 0 : s.lo, s.hi, s.type == SettingType::kInteger);
        if (!v) return v.status();
        if (s.zero_is_off && **v != 0 && **v < s.lo) {
          return error(*n,
                       quoted(key) + " must be 0 (off) or at least " + json_number(s.lo) + " " + std::string(s.unit));
        }
        s.set(c, json_number(**v));
        return Status::ok();
      }
      case SettingType::kString: {
        std::string text;
        if (n->is_string()) {
          text = n->as_string()->get();
        } else if (s.key == "device" && n->is_integer()) {  // device = 0
          text = std::to_string(n->as_integer()->get());
        } else if (s.key == "device") {
          return error(*n, "'device' must be a device ordinal (0), a list (\"0,1\") or \"all\"");
        } else {
          return error(*n, quoted(key) + " must be a string");
        }
        if (s.check) {
          if (std::string why = s.check(text); !why.empty()) return error(*n, why);
        }
        s.set(c, text);
        return Status::ok();
      }
    }
    return Status::ok();
  }

  Status daemon_table(const toml::table& d, DaemonConfig& c) const {
    const toml::key* bad = nullptr;  // the first unknown key in file order
    for (const auto& [k, v] : d) {
      if (find_setting(k.str()) == nullptr && (bad == nullptr || k.source().begin < bad->source().begin)) bad = &k;
    }
    if (bad != nullptr) {
      std::string list;
      for (const Setting& s : settings()) list += (list.empty() ? "" : ", ") + std::string(s.key);
      return Status::invalid_argument(where(source, bad->source()) + ": unknown key " + quoted(bad->str()) +
                                      " in [daemon] (valid: " + list + ")");
    }
    for (const Setting& s : settings()) LITHOS_RETURN_IF_ERROR(setting(d, s, c));
    return Status::ok();
  }

  Result<DaemonConfig> parse(std::string_view text) const {
    auto parsed = tomlio::parse(text, source);
    if (!parsed) return parsed.status();
    const toml::table& root = *parsed;
    LITHOS_RETURN_IF_ERROR(check_keys(root, "the configuration", {"daemon", "tenant"}));
    DaemonConfig c = default_config();
    c.tenants.clear();
    c.source = std::string(source);
    if (const toml::node* n = root.get("daemon")) {
      const auto* d = n->as_table();
      if (d == nullptr) return error(*n, "'daemon' must be a table ([daemon])");
      LITHOS_RETURN_IF_ERROR(daemon_table(*d, c));
    }
    if (const toml::node* n = root.get("tenant")) {
      const auto* a = n->as_array();
      if (a == nullptr || !a->is_array_of_tables()) {
        return error(*n, "'tenant' must be an array of tables ([[tenant]])");
      }
      if (a->size() > kMaxTenants) return error(*n, "at most " + std::to_string(kMaxTenants) + " tenants");
      for (const auto& e : *a) {
        auto t = tenant(*e.as_table());
        if (!t) return t.status();
        if (const TenantConfig* prev = c.tenant(t->name)) {
          return error(e, "tenant " + quoted(t->name) + " is declared twice (first at " + prev->where + ")");
        }
        c.tenants.push_back(std::move(*t));
      }
    }
    if (c.tenant(kDefaultTenantName) == nullptr) {
      TenantConfig def;
      def.name = kDefaultTenantName;
      c.tenants.push_back(std::move(def));
    }
    if (c.tenant(c.default_tenant) == nullptr) {
      const toml::node* n = root.at_path("daemon.default_tenant").node();
      const std::string at = n != nullptr ? where(source, *n) : std::string(source);
      return Status::invalid_argument(at + ": default_tenant " + quoted(c.default_tenant) +
                                      " is not a declared tenant (tenants: " + tenant_names(c) + ")");
    }
    return c;
  }
};

// ---- JSON -------------------------------------------------------------------

// Length of the valid UTF-8 sequence at s[i], or 0 when it is not one.
std::size_t utf8_length(std::string_view s, std::size_t i) {
  const auto b = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned c = b(i);
  std::size_t n = 0;
  unsigned lo = 0x80, hi = 0xbf;  // range of the second byte
  if (c >= 0xc2 && c <= 0xdf) {
    n = 2;
  } else if (c >= 0xe0 && c <= 0xef) {
    n = 3;
    if (c == 0xe0) lo = 0xa0;
    if (c == 0xed) hi = 0x9f;  // no surrogates
  } else if (c >= 0xf0 && c <= 0xf4) {
    n = 4;
    if (c == 0xf0) lo = 0x90;
    if (c == 0xf4) hi = 0x8f;
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  if (b(i + 1) < lo || b(i + 1) > hi) return 0;
  for (std::size_t k = 2; k < n; ++k) {
    if (b(i + k) < 0x80 || b(i + k) > 0xbf) return 0;
  }
  return n;
}

template <class Id>
std::string json_ids(const std::vector<Id>& ids) {
  std::string out = "[";
  for (std::size_t i = 0; i < ids.size(); ++i) out += (i == 0 ? "" : ",") + std::to_string(ids[i]);
  return out + "]";
}

}  // namespace

// ---- public -----------------------------------------------------------------

namespace detail {

// A JSON string literal; bytes that are not UTF-8 become U+FFFD.
std::string json_string(std::string_view s) {
  std::string out = "\"";
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x80) {
      const std::size_t n = utf8_length(s, i);
      if (n == 0) {
        out += "\\ufffd";
        ++i;
      } else {
        out.append(s.substr(i, n));
        i += n;
      }
      continue;
    }
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
    ++i;
  }
  return out + "\"";
}

}  // namespace detail

const char* power_mode_name(PowerMode m) {
  switch (m) {
    case PowerMode::kOff: return "off";
    case PowerMode::kDryRun: return "dry-run";
    case PowerMode::kOn: return "on";
  }
  return "off";
}

std::optional<PowerMode> parse_power_mode(std::string_view s) {
  for (const PowerMode m : {PowerMode::kOff, PowerMode::kDryRun, PowerMode::kOn}) {
    if (s == power_mode_name(m)) return m;
  }
  return std::nullopt;
}

const char* mps_mode_name(MpsMode m) {
  switch (m) {
    case MpsMode::kAuto: return "auto";
    case MpsMode::kStart: return "start";
    case MpsMode::kAttach: return "attach";
    case MpsMode::kOff: return "off";
  }
  return "?";
}

std::optional<MpsMode> parse_mps_mode(std::string_view s) {
  for (MpsMode m : {MpsMode::kAuto, MpsMode::kStart, MpsMode::kAttach, MpsMode::kOff}) {
    if (s == mps_mode_name(m)) return m;
  }
  return std::nullopt;
}

std::optional<bool> parse_switch(std::string_view s) {
  if (s == "true" || s == "1" || s == "yes" || s == "on") return true;
  if (s == "false" || s == "0" || s == "no" || s == "off") return false;
  return std::nullopt;
}

sched::TenantSpec TenantConfig::spec() const {
  sched::TenantSpec s;
  s.name = name;
  s.priority = priority;
  s.quota = quota;
  s.slo = slo;
  s.pauses_best_effort = pauses_best_effort;
  s.rightsize = rightsize;
  s.rightsize_slip = rightsize_slip;
  return s;
}

const TenantConfig* DaemonConfig::tenant(std::string_view n) const {
  for (const TenantConfig& t : tenants) {
    if (t.name == n) return &t;
  }
  return nullptr;
}

IdResolver IdResolver::system() {
  IdResolver r;
  r.user = [](const std::string& name) {
    return lookup_id<::passwd, uid_t>(name, "user", _SC_GETPW_R_SIZE_MAX, ::getpwnam_r, &::passwd::pw_uid);
  };
  r.group = [](const std::string& name) {
    return lookup_id<::group, gid_t>(name, "group", _SC_GETGR_R_SIZE_MAX, ::getgrnam_r, &::group::gr_gid);
  };
  return r;
}

Result<DaemonConfig> parse_config(std::string_view toml_text, std::string_view source_name, const IdResolver& ids) {
  try {
    return Parser{source_name, ids}.parse(toml_text);
  } catch (const std::exception& e) {
    return Status::internal(std::string(source_name) + ": " + e.what());
  }
}

Result<DaemonConfig> parse_config(std::string_view toml_text, std::string_view source_name) {
  return parse_config(toml_text, source_name, IdResolver::system());
}

Result<DaemonConfig> load_config(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const int err = errno;
    if (::access(path.c_str(), F_OK) != 0) return Status::not_found("no configuration file " + path);
    return Status::unavailable("cannot read " + path + ": " + std::strerror(err));
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return Status::unavailable("cannot read " + path);
  return parse_config(ss.str(), path);
}

// The clients' rule (ipc/socket.hpp), so that daemon and clients agree.
std::string default_socket_path() { return ipc::default_socket_path(); }

std::string default_state_dir() {
  const uid_t uid = ::geteuid();
  if (uid == 0) return "/var/lib/lithos";
  if (const char* x = std::getenv("XDG_STATE_HOME"); x != nullptr && x[0] == '/') return std::string(x) + "/lithos";
  if (const char* h = std::getenv("HOME"); h != nullptr && h[0] == '/') return std::string(h) + "/.local/state/lithos";
  return "/tmp/lithos-" + std::to_string(uid) + "/state";
}

DaemonConfig default_config() {
  DaemonConfig c;
  c.socket = default_socket_path();
  c.state_dir = default_state_dir();
  TenantConfig def;
  def.name = kDefaultTenantName;
  c.tenants.push_back(std::move(def));
  c.source = "defaults";
  return c;
}

Status apply_env(DaemonConfig& c, const std::function<const char*(const char*)>& getenv_fn) {
  for (const Setting& s : settings()) {
    if (s.env.empty()) continue;
    const char* v = getenv_fn(std::string(s.env).c_str());
    if (v == nullptr || *v == '\0') continue;
    LITHOS_RETURN_IF_ERROR(set_setting(c, s, v, s.env));
  }
  return Status::ok();
}

Status parse_devices(std::string_view text, std::vector<int>* out, bool* all) {
  *all = text == "all";
  if (*all) return Status::ok();
  std::size_t at = 0;
  while (at <= text.size()) {
    const std::size_t comma = std::min(text.find(',', at), text.size());
    const std::string_view item = text.substr(at, comma - at);
    int v = -1;
    const auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
    if (item.empty() || ec != std::errc() || end != item.data() + item.size() || v < 0) {
      return Status::invalid_argument("give a device ordinal (0), a list (0,1,3) or all");
    }
    if (std::find(out->begin(), out->end(), v) != out->end()) {
      return Status::invalid_argument("device " + std::string(item) + " is named twice");
    }
    out->push_back(v);
    at = comma + 1;
  }
  return Status::ok();
}

Status validate(const DaemonConfig& c, int device_tpcs) {
  if (device_tpcs < 1 || device_tpcs > sched::kMaxTpcs) {
    return Status::invalid_argument("a device of " + std::to_string(device_tpcs) + " TPCs is not supported (1-" +
                                    std::to_string(sched::kMaxTpcs) + ")");
  }
  if (!socket_path_fits(c.socket))
    return Status::invalid_argument("socket " + quoted(c.socket) + " " + socket_path_rule());
  if (!policy_known(c.policy)) {
    return Status::invalid_argument("unknown policy " + quoted(c.policy) + " (valid: " + policy_names() + ")");
  }
  auto in_range = [](const char* name, double v, double lo, double hi) {
    if (std::isfinite(v) && v >= lo && v <= hi) return Status::ok();
    return Status::invalid_argument(std::string(name) + " = " + json_number(v) + " is out of range [" +
                                    json_number(lo) + ", " + json_number(hi) + "]");
  };
  LITHOS_RETURN_IF_ERROR(in_range("atom_us", c.atom_us, kMinAtomUs, kMaxAtomUs));
  LITHOS_RETURN_IF_ERROR(in_range("power_slowdown", c.power_slowdown, kMinPowerSlowdown, kMaxPowerSlowdown));
  LITHOS_RETURN_IF_ERROR(in_range("power_idle_w", c.power_idle_w, 0, kMaxPowerIdleW));
  LITHOS_RETURN_IF_ERROR(in_range("power_exponent", c.power_exponent, kMinPowerExponent, kMaxPowerExponent));
  LITHOS_RETURN_IF_ERROR(in_range("throttle_us", c.throttle_us, kMinThrottleUs, kMaxThrottleUs));
  // 0, the default: the same as throttle_us.
  if (c.throttle_unborrowed_us != 0)
    LITHOS_RETURN_IF_ERROR(
        in_range("throttle_unborrowed_us", c.throttle_unborrowed_us, kMinThrottleUs, kMaxThrottleUs));
  if (c.max_stolen_atoms > kMaxStolenAtoms) {
    return Status::invalid_argument("max_stolen_atoms = " + std::to_string(c.max_stolen_atoms) +
                                    " is out of range [0, " + std::to_string(kMaxStolenAtoms) + "]");
  }
  LITHOS_RETURN_IF_ERROR(in_range("pause_slowdown", c.pause_slowdown, kMinPauseSlowdown, kMaxPauseSlowdown));
  LITHOS_RETURN_IF_ERROR(in_range("burst_gap_us", c.burst_gap_us, 0, kMaxIdleGraceUs));
  LITHOS_RETURN_IF_ERROR(in_range("rightsize_slip", c.rightsize_slip, 1, kMaxRightsizeSlip));
  LITHOS_RETURN_IF_ERROR(in_range("rightsize_probe_after", c.rightsize_probe_after, 0, 1e6));
  LITHOS_RETURN_IF_ERROR(in_range("rightsize_probe_every", c.rightsize_probe_every, 1, 1e6));
  LITHOS_RETURN_IF_ERROR(in_range("rightsize_probe_budget", c.rightsize_probe_budget, 0, 1));
  LITHOS_RETURN_IF_ERROR(in_range("idle_grace_us", c.idle_grace_us, 0, kMaxIdleGraceUs));
  LITHOS_RETURN_IF_ERROR(in_range("max_clients", c.max_clients, 1, kMaxMaxClients));
  LITHOS_RETURN_IF_ERROR(in_range("max_clients_per_uid", c.max_clients_per_uid, 1, kMaxMaxClients));
  LITHOS_RETURN_IF_ERROR(in_range("max_connecting_per_uid", c.max_connecting_per_uid, 1, kMaxConnectingPerUid));
  LITHOS_RETURN_IF_ERROR(in_range("max_pending_launches", c.max_pending_launches, kMinClientBound, kMaxClientBound));
  LITHOS_RETURN_IF_ERROR(in_range("max_inflight", c.max_inflight, kMinInflightBound, kMaxClientBound));
  LITHOS_RETURN_IF_ERROR(in_range("max_queued_grants", c.max_queued_grants, kMinClientBound, kMaxClientBound));
  LITHOS_RETURN_IF_ERROR(in_range("max_events_per_s", c.max_events_per_s, kMinEventsPerS, kMaxEventsPerS));
  for (const auto& [name, v] :
       {std::pair{"client_timeout_ms", c.client_timeout_ms}, std::pair{"progress_timeout_ms", c.progress_timeout_ms}}) {
    if (v != 0) LITHOS_RETURN_IF_ERROR(in_range(name, v, kMinClientTimeoutMs, kMaxClientTimeoutMs));
  }
  LITHOS_RETURN_IF_ERROR(in_range("fault_exit_grace_ms", c.fault_exit_grace_ms, 0, kMaxFaultGraceMs));
  LITHOS_RETURN_IF_ERROR(in_range("fault_term_grace_ms", c.fault_term_grace_ms, 0, kMaxFaultGraceMs));
  if (c.tenants.empty()) return Status::invalid_argument("no tenants");
  if (c.tenants.size() > kMaxTenants) {
    return Status::invalid_argument("at most " + std::to_string(kMaxTenants) + " tenants");
  }
  const sched::TpcSet device = sched::TpcSet::first(device_tpcs);
  int quotas = 0;
  for (std::size_t i = 0; i < c.tenants.size(); ++i) {
    const TenantConfig& t = c.tenants[i];
    const std::string ctx = (t.where.empty() ? "" : t.where + ": ") + "tenant " + quoted(t.name);
    if (!is_tenant_name(t.name)) return Status::invalid_argument(ctx + ": the name " + kTenantNameRule);
    for (std::size_t j = 0; j < i; ++j) {
      if (c.tenants[j].name == t.name) return Status::invalid_argument(ctx + " is declared twice");
    }
    if (t.priority == sched::PriorityClass::kBestEffort && t.quota != 0) {
      return Status::invalid_argument(ctx + ": a best-effort tenant must have quota 0 (it has " +
                                      std::to_string(t.quota) + ")");
    }
    if (t.quota < 0 || t.quota > device_tpcs) {
      return Status::invalid_argument(ctx + ": quota " + std::to_string(t.quota) + " is more than the device's " +
                                      std::to_string(device_tpcs) + " TPCs");
    }
    if (t.priority == sched::PriorityClass::kHigh) {
      quotas += t.quota;
      if (quotas > device_tpcs) {
        return Status::invalid_argument(ctx + ": the quotas of the high-priority tenants add up to " +
                                        std::to_string(quotas) + " (with this one's " + std::to_string(t.quota) +
                                        "), more than the device's " + std::to_string(device_tpcs) + " TPCs");
      }
    }
    if (t.slo && t.slo->count() <= 0) return Status::invalid_argument(ctx + ": the SLO must be positive");
    if (t.fallback) {
      if (t.fallback->empty()) return Status::invalid_argument(ctx + ": fallback_tpcs is empty");
      if (!device.contains(*t.fallback)) {
        return Status::invalid_argument(ctx + ": fallback_tpcs " + t.fallback->to_string() +
                                        " is not inside the device's TPCs " + device.to_string());
      }
    }
    for (const std::string& m : t.match) {
      if (m.empty()) return Status::invalid_argument(ctx + ": an empty match pattern");
    }
  }
  // A high-priority tenant without a quota runs on the TPCs no quota holds:
  // there must be some (found by fuzzing: its clients were published an
  // empty allocation and dropped at their first launch).
  if (quotas >= device_tpcs) {
    for (const TenantConfig& t : c.tenants) {
      if (t.priority != sched::PriorityClass::kHigh || t.quota != 0) continue;
      return Status::invalid_argument((t.where.empty() ? "" : t.where + ": ") + "tenant " + quoted(t.name) +
                                      ": a high-priority tenant with quota 0 runs on the TPCs no quota holds, and the "
                                      "quotas of the others hold all " +
                                      std::to_string(device_tpcs) + ": give it a quota, or lower theirs");
    }
  }
  if (c.tenant(c.default_tenant) == nullptr) {
    return Status::invalid_argument("default_tenant " + quoted(c.default_tenant) +
                                    " is not a declared tenant (tenants: " + tenant_names(c) + ")");
  }
  return Status::ok();
}

bool glob_match(std::string_view pattern, std::string_view text) {
  std::size_t p = 0, t = 0;
  std::size_t star = std::string_view::npos, mark = 0;  // last '*' seen, and where its run would end
  while (t < text.size()) {
    if (p < pattern.size() && (pattern[p] == '?' || pattern[p] == text[t])) {
      ++p;
      ++t;
    } else if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      mark = t;
    } else if (star != std::string_view::npos) {
      p = star + 1;
      t = ++mark;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

bool may_claim(const TenantConfig& t, uid_t uid, gid_t gid, const std::vector<gid_t>& supplementary) {
  if (t.anyone()) return true;
  if (std::find(t.uids.begin(), t.uids.end(), uid) != t.uids.end()) return true;
  if (std::find(t.gids.begin(), t.gids.end(), gid) != t.gids.end()) return true;
  return std::any_of(supplementary.begin(), supplementary.end(),
                     [&](gid_t g) { return std::find(t.gids.begin(), t.gids.end(), g) != t.gids.end(); });
}

Result<Resolution> resolve_tenant(const DaemonConfig& c, std::string_view requested, std::string_view program,
                                  uid_t uid, gid_t gid, const std::vector<gid_t>& supplementary) {
  const auto refused = [&](const TenantConfig& t, const char* which) {
    return Status::failed_precondition("uid " + std::to_string(uid) + " (gid " + std::to_string(gid) +
                                       ") may not claim " + which + "tenant " + quoted(t.name) + "; it admits " +
                                       admits(t));
  };
  if (!requested.empty()) {
    for (std::size_t i = 0; i < c.tenants.size(); ++i) {
      const TenantConfig& t = c.tenants[i];
      if (t.name != requested) continue;
      if (!may_claim(t, uid, gid, supplementary)) return refused(t, "");
      return Resolution{i, false, false};
    }
    return Status::not_found("no tenant " + quoted(requested) + " (tenants: " + tenant_names(c) + ")");
  }
  if (!program.empty()) {
    for (std::size_t i = 0; i < c.tenants.size(); ++i) {
      const TenantConfig& t = c.tenants[i];
      const bool matches =
          std::any_of(t.match.begin(), t.match.end(), [&](const std::string& m) { return glob_match(m, program); });
      if (matches && may_claim(t, uid, gid, supplementary)) return Resolution{i, true, false};
    }
  }
  for (std::size_t i = 0; i < c.tenants.size(); ++i) {
    const TenantConfig& t = c.tenants[i];
    if (t.name != c.default_tenant) continue;
    if (!may_claim(t, uid, gid, supplementary)) return refused(t, "the default ");
    return Resolution{i, false, true};
  }
  return Status::not_found("the process names no tenant, no match rule binds " + quoted(program) +
                           ", and the default tenant " + quoted(c.default_tenant) + " does not exist");
}

std::string config_json(const DaemonConfig& c) {
  std::string j = "{\"schema\":\"lithos.daemon-config/1\"";
  j += ",\"source\":" + json_string(c.source);
  for (const Setting& s : settings()) j += ",\"" + std::string(s.key) + "\":" + setting_json(c, s);
  j += ",\"tenants\":[";
  for (std::size_t i = 0; i < c.tenants.size(); ++i) {
    const TenantConfig& t = c.tenants[i];
    j += i == 0 ? "{" : ",{";
    j += "\"name\":" + json_string(t.name);
    j += ",\"priority\":" + json_string(sched::priority_class_name(t.priority));
    j += ",\"quota\":" + std::to_string(t.quota);
    j += ",\"slo_ms\":" + (t.slo ? json_number(to_ms(*t.slo)) : std::string("null"));
    j += ",\"users\":" + json_ids(t.uids);
    j += ",\"groups\":" + json_ids(t.gids);
    j += ",\"match\":[";
    for (std::size_t k = 0; k < t.match.size(); ++k) j += (k == 0 ? "" : ",") + json_string(t.match[k]);
    j += "]";
    j += ",\"fallback_tpcs\":" + (t.fallback ? json_string(t.fallback->to_string()) : std::string("null"));
    j += std::string(",\"pauses_best_effort\":") + best_effort_pause_literal(t.pauses_best_effort);
    j += std::string(",\"mps\":") + (t.mps ? "true" : "false");
    j += std::string(",\"rightsize\":") + (t.rightsize ? (*t.rightsize ? "true" : "false") : "null");
    j += ",\"rightsize_slip\":" + (t.rightsize_slip ? json_number(*t.rightsize_slip) : std::string("null"));
    j += "}";
  }
  j += "]}";
  return j;
}

}  // namespace lithos::daemon
