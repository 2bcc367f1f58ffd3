// lithosd's configuration: the shipped example parses (and is the one the
// documentation shows), every error names the file and line, the
// environment overrides the file, tenants resolve in the documented order,
// and the JSON form carries what the file said.
#include "daemon/config.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

namespace lithos::daemon {
namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Users and groups of a machine that has the example's names.
IdResolver fake_ids() {
  IdResolver r;
  r.user = [](const std::string& n) -> Result<uid_t> {
    if (n == "alice") return uid_t{1000};
    if (n == "bob") return uid_t{1002};
    return Status::not_found("unknown user '" + n + "'");
  };
  r.group = [](const std::string& n) -> Result<gid_t> {
    if (n == "ml") return gid_t{1005};
    return Status::not_found("unknown group '" + n + "'");
  };
  return r;
}

Result<DaemonConfig> parse(const std::string& text) { return parse_config(text, "f.toml", fake_ids()); }

// The error of parsing `text` ("(parsed)" when it parses).
std::string parse_error(const std::string& text) {
  auto r = parse(text);
  return r ? std::string("(parsed)") : r.status().message();
}

// The error of validating `text` for a 66-TPC GPU.
std::string validate_error(const std::string& text) {
  auto r = parse(text);
  if (!r) return "(parse) " + r.status().message();
  Status s = validate(*r, 66);
  return s.is_ok() ? std::string("(valid)") : s.message();
}

std::size_t index_of(const DaemonConfig& c, const std::string& name) {
  for (std::size_t i = 0; i < c.tenants.size(); ++i) {
    if (c.tenants[i].name == name) return i;
  }
  ADD_FAILURE() << "no tenant " << name;
  return 0;
}

// ---- the example ------------------------------------------------------------

TEST(DaemonConfig, ShippedExampleParsesAndValidates) {
  auto c = parse_config(read_file(LITHOS_EXAMPLE_CONFIG), "lithosd.toml", fake_ids());
  ASSERT_TRUE(c) << c.status().message();
  EXPECT_EQ(c->source, "lithosd.toml");
  EXPECT_EQ(c->socket, "/run/lithos/lithosd.sock");
  EXPECT_EQ(c->policy, "lithos");
  EXPECT_EQ(c->mps, MpsMode::kAuto);
  EXPECT_DOUBLE_EQ(c->atom_us, 500);
  EXPECT_EQ(c->state_dir, "/var/lib/lithos");
  EXPECT_EQ(c->trace, "");
  EXPECT_EQ(c->default_tenant, "default");
  EXPECT_FALSE(c->stream_priorities);
  ASSERT_EQ(c->tenants.size(), 3u);  // svc, train, and the implicit default

  const TenantConfig& svc = c->tenants[0];
  EXPECT_EQ(svc.name, "svc");
  EXPECT_EQ(svc.priority, sched::PriorityClass::kHigh);
  EXPECT_EQ(svc.quota, 44);
  ASSERT_TRUE(svc.slo.has_value());
  EXPECT_EQ(*svc.slo, ms(25));
  EXPECT_EQ(svc.uids, (std::vector<uid_t>{1000, 1001}));
  EXPECT_EQ(svc.gids, (std::vector<gid_t>{1005}));
  EXPECT_EQ(svc.match, (std::vector<std::string>{"triton_server", "serve*"}));
  ASSERT_TRUE(svc.fallback.has_value());
  EXPECT_EQ(*svc.fallback, sched::TpcSet::range(0, 44));
  EXPECT_EQ(svc.where, "lithosd.toml:23:1");
  EXPECT_EQ(svc.pauses_best_effort, sched::BestEffortPause::kAuto);
  EXPECT_DOUBLE_EQ(c->pause_slowdown, 1.15);
  EXPECT_EQ(c->max_clients, 1024);
  EXPECT_EQ(c->max_clients_per_uid, 256);

  const sched::TenantSpec spec = svc.spec();
  EXPECT_EQ(spec.name, "svc");
  EXPECT_EQ(spec.priority, sched::PriorityClass::kHigh);
  EXPECT_EQ(spec.quota, 44);
  EXPECT_EQ(spec.slo, ms(25));
  EXPECT_FALSE(spec.static_tpcs.has_value());

  const TenantConfig& train = c->tenants[1];
  EXPECT_EQ(train.name, "train");
  EXPECT_EQ(train.priority, sched::PriorityClass::kBestEffort);
  EXPECT_EQ(train.quota, 0);
  EXPECT_FALSE(train.slo.has_value());
  EXPECT_TRUE(train.anyone());
  EXPECT_FALSE(train.fallback.has_value());

  const TenantConfig& def = c->tenants[2];
  EXPECT_EQ(def.name, "default");
  EXPECT_EQ(def.priority, sched::PriorityClass::kBestEffort);
  EXPECT_EQ(def.quota, 0);
  EXPECT_TRUE(def.anyone());
  EXPECT_TRUE(def.where.empty());

  EXPECT_TRUE(validate(*c, 66).is_ok());
  EXPECT_FALSE(validate(*c, 40).is_ok());  // quota 44 and fallback 0-43 do not fit
}

// A tenant's right-sizing: rightsize and rightsize_slip reach its spec;
// a slip below 1 or a rightsize that is not a bool is refused.
TEST(DaemonConfig, TenantRightSizing) {
  auto c = parse(R"([daemon]
rightsize_slip = 1.05
[[tenant]]
name = "svc"
priority = "high"
rightsize = true
rightsize_slip = 1.2
[[tenant]]
name = "train"
)");
  ASSERT_TRUE(c) << c.status().message();
  EXPECT_DOUBLE_EQ(c->rightsize_slip, 1.05);
  EXPECT_FALSE(c->rightsize);
  const sched::TenantSpec svc = c->tenants[0].spec();
  EXPECT_EQ(svc.rightsize, std::optional<bool>(true));
  EXPECT_EQ(svc.rightsize_slip, std::optional<double>(1.2));
  const sched::TenantSpec train = c->tenants[1].spec();
  EXPECT_FALSE(train.rightsize.has_value());
  EXPECT_FALSE(train.rightsize_slip.has_value());
  auto low = parse("[[tenant]]\nname = \"svc\"\nrightsize_slip = 0.5\n");
  ASSERT_FALSE(low);
  EXPECT_NE(low.status().message().find("rightsize_slip"), std::string::npos) << low.status().message();
  auto text = parse("[[tenant]]\nname = \"svc\"\nrightsize = \"yes\"\n");
  ASSERT_FALSE(text);
  EXPECT_NE(text.status().message().find("'rightsize' must be true or false"), std::string::npos);
}

TEST(DaemonConfig, DocumentationShowsTheShippedExample) {
  const std::string doc = read_file(LITHOS_DAEMON_DOC);
  ASSERT_FALSE(doc.empty());
  EXPECT_NE(doc.find("## How it works\n"), std::string::npos);
  EXPECT_NE(doc.find("## Failure handling\n"), std::string::npos);
  const auto config = doc.find("## Configuration");
  ASSERT_NE(config, std::string::npos);
  const auto begin = doc.find("```toml\n", config);
  ASSERT_NE(begin, std::string::npos);
  const auto body = begin + 8;
  const auto end = doc.find("```", body);
  ASSERT_NE(end, std::string::npos);
  EXPECT_EQ(doc.substr(body, end - body), read_file(LITHOS_EXAMPLE_CONFIG))
      << "docs/daemon.md and packaging/lithosd.toml differ";
  EXPECT_NE(doc.find("## Running under systemd"), std::string::npos);
}

TEST(DaemonConfig, DefaultsWithoutAFile) {
  const DaemonConfig d = default_config();
  EXPECT_EQ(d.source, "defaults");
  EXPECT_FALSE(d.socket.empty());
  EXPECT_FALSE(d.state_dir.empty());
  EXPECT_EQ(d.policy, "lithos");
  EXPECT_EQ(d.mps, MpsMode::kAuto);
  EXPECT_DOUBLE_EQ(d.atom_us, 500);
  EXPECT_EQ(d.trace, "");
  ASSERT_EQ(d.tenants.size(), 1u);
  EXPECT_EQ(d.tenants[0].name, "default");
  EXPECT_EQ(d.tenants[0].priority, sched::PriorityClass::kBestEffort);
  EXPECT_TRUE(validate(d, 66).is_ok());

  // An empty file is the defaults, and so is a file with an empty [daemon].
  for (const char* text : {"", "[daemon]\n"}) {
    auto c = parse(text);
    ASSERT_TRUE(c) << c.status().message();
    EXPECT_EQ(c->socket, d.socket);
    EXPECT_EQ(c->state_dir, d.state_dir);
    ASSERT_EQ(c->tenants.size(), 1u);
    EXPECT_EQ(c->tenants[0].name, "default");
  }
}

TEST(DaemonConfig, DefaultPathsFollowTheRules) {
  const std::string sock = default_socket_path();
  const std::string state = default_state_dir();
  if (const char* v = std::getenv("LITHOS_DAEMON_SOCKET"); v != nullptr && *v != '\0') {
    EXPECT_EQ(sock, v);
  } else if (::geteuid() == 0) {
    EXPECT_EQ(sock, "/run/lithos/lithosd.sock");
  } else {
    EXPECT_NE(sock.find("lithosd.sock"), std::string::npos);
  }
  if (::geteuid() == 0) {
    EXPECT_EQ(state, "/var/lib/lithos");
  } else {
    EXPECT_NE(state.find("lithos"), std::string::npos);
  }
}

TEST(DaemonConfig, DeclaredDefaultTenantReplacesTheImplicitOne) {
  auto c = parse(R"(
[[tenant]]
name = "default"
users = [7]
fallback_tpcs = "60-65"
)");
  ASSERT_TRUE(c) << c.status().message();
  ASSERT_EQ(c->tenants.size(), 1u);
  EXPECT_EQ(c->tenants[0].uids, (std::vector<uid_t>{7}));

  // default_tenant may name another tenant; the implicit "default" still exists.
  auto d = parse(R"(
[daemon]
default_tenant = "batch"
[[tenant]]
name = "batch"
)");
  ASSERT_TRUE(d) << d.status().message();
  EXPECT_EQ(d->default_tenant, "batch");
  ASSERT_EQ(d->tenants.size(), 2u);
  EXPECT_EQ(d->tenants[1].name, "default");
}

TEST(DaemonConfig, UserAndGroupNamesResolveOnThisSystem) {
  // Every system has root (uid 0, gid 0).
  auto c = parse_config(R"(
[[tenant]]
name = "ops"
users = ["root", "1234", 99]
groups = ["root", 5]
)",
                        "sys.toml");
  ASSERT_TRUE(c) << c.status().message();
  EXPECT_EQ(c->tenants[0].uids, (std::vector<uid_t>{0, 1234, 99}));
  EXPECT_EQ(c->tenants[0].gids, (std::vector<gid_t>{0, 5}));
  const std::string user_error =
      parse_config("[[tenant]]\nname = \"x\"\nusers = [\"no-such-user-lithos\"]\n", "sys.toml").status().message();
  EXPECT_NE(user_error.find("sys.toml:3:10:"), std::string::npos) << user_error;
  EXPECT_NE(user_error.find("unknown user 'no-such-user-lithos'"), std::string::npos) << user_error;
  const std::string group_error =
      parse_config("[[tenant]]\nname = \"x\"\ngroups = [\"no-such-group-lithos\"]\n", "sys.toml").status().message();
  EXPECT_NE(group_error.find("sys.toml:3:11:"), std::string::npos) << group_error;
  EXPECT_NE(group_error.find("unknown group 'no-such-group-lithos'"), std::string::npos) << group_error;
}

TEST(DaemonConfig, LoadConfigReadsFilesAndReportsMissingOnes) {
  auto missing = load_config("/nonexistent/lithosd.toml");
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);

  char path[] = "/tmp/lithos-config-test-XXXXXX";
  const int fd = ::mkstemp(path);
  ASSERT_GE(fd, 0);
  const std::string text = "[daemon]\npolicy = \"mps\"\nqouta = 1\n";
  ASSERT_EQ(::write(fd, text.data(), text.size()), static_cast<ssize_t>(text.size()));
  ::close(fd);
  auto bad = load_config(path);
  ::unlink(path);
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.status().message().rfind(std::string(path) + ":3:1: unknown key 'qouta' in [daemon]", 0), 0u)
      << bad.status().message();
}

// ---- errors -----------------------------------------------------------------

struct ErrorCase {
  const char* what;
  std::string text;
  const char* at;       // "f.toml:line:" the message must start with
  const char* message;  // and a phrase it must contain
};

TEST(DaemonConfig, ParseErrorsNameFileAndLine) {
  const ErrorCase cases[] = {
      {"toml syntax", "[daemon]\npolicy = \n", "f.toml:2:", ""},
      {"unknown top-level key", "[deamon]\n", "f.toml:1:", "unknown key 'deamon' in the configuration"},
      {"unknown daemon key", "[daemon]\nsocket = \"/tmp/s\"\natom = 5\n",
       "f.toml:3:1:", "unknown key 'atom' in [daemon] (valid: socket, policy, mps"},
      {"unknown tenant key", "[[tenant]]\nname = \"a\"\nqouta = 4\n",
       "f.toml:3:1:", "unknown key 'qouta' in [[tenant]]"},
      {"daemon not a table", "daemon = 3\n", "f.toml:1:", "'daemon' must be a table"},
      {"tenant not an array of tables", "tenant = \"x\"\n", "f.toml:1:", "array of tables"},
      {"unknown policy", "[daemon]\n\npolicy = \"fifo\"\n",
       "f.toml:3:10:", "unknown policy 'fifo' (valid: time-slicing, mps"},
      {"policy not a string", "[daemon]\npolicy = 1\n", "f.toml:2:", "'policy' must be a string"},
      {"bad mps", "[daemon]\nmps = \"sometimes\"\n", "f.toml:2:", "not one of auto, start, attach, off"},
      {"device named twice", "[daemon]\ndevice = \"0,1,0\"\n",
       "f.toml:2:", "'device' '0,1,0': device 0 is named twice"},
      {"device not a list", "[daemon]\ndevice = \"gpu0\"\n", "f.toml:2:", "a list (0,1,3) or all"},
      {"device not a string", "[daemon]\ndevice = true\n", "f.toml:2:", "'device' must be a device ordinal"},
      {"atom_us too small", "[daemon]\natom_us = 10\n", "f.toml:2:", "'atom_us' = 10 is out of range [50, 100000]"},
      {"atom_us not a number", "[daemon]\natom_us = \"fast\"\n", "f.toml:2:", "'atom_us' must be a number"},
      {"throttle_us too small", "[daemon]\nthrottle_us = 5\n",
       "f.toml:2:", "'throttle_us' = 5 is out of range [10, 100000]"},
      {"throttle_unborrowed_us too large", "[daemon]\nthrottle_unborrowed_us = 1e6\n",
       "f.toml:2:", "'throttle_unborrowed_us' = 1000000 is out of range [10, 100000]"},
      {"pause_slowdown below 1", "[daemon]\npause_slowdown = 0.5\n",
       "f.toml:2:", "'pause_slowdown' = 0.5 is out of range [1, 100]"},
      {"idle_grace_us negative", "[daemon]\nidle_grace_us = -5\n",
       "f.toml:2:", "'idle_grace_us' = -5 is out of range [0, 100000]"},
      {"max_stolen_atoms too large", "[daemon]\nmax_stolen_atoms = 2000\n",
       "f.toml:2:", "'max_stolen_atoms' = 2000 is out of range [0, 1024]"},
      {"max_stolen_atoms not an integer", "[daemon]\nmax_stolen_atoms = 1.5\n",
       "f.toml:2:", "'max_stolen_atoms' must be an integer"},
      {"best_effort_runs_free not a boolean", "[daemon]\nbest_effort_runs_free = \"yes\"\n",
       "f.toml:2:", "'best_effort_runs_free' must be true or false"},
      {"share_unowned not a boolean", "[daemon]\nshare_unowned = 1\n",
       "f.toml:2:", "'share_unowned' must be true or false"},
      {"hp_holds_unowned not a boolean", "[daemon]\nhp_holds_unowned = \"no\"\n",
       "f.toml:2:", "'hp_holds_unowned' must be true or false"},
      {"stream_priorities not a boolean", "[daemon]\nstream_priorities = 1\n",
       "f.toml:2:", "'stream_priorities' must be true or false"},
      {"mps_multiuser not a boolean", "[daemon]\nmps_multiuser = \"yes\"\n",
       "f.toml:2:", "'mps_multiuser' must be true or false"},
      {"status_shows_all not a boolean", "[daemon]\nstatus_shows_all = 1\n",
       "f.toml:2:", "'status_shows_all' must be true or false"},
      {"max_clients zero", "[daemon]\nmax_clients = 0\n", "f.toml:2:", "'max_clients' = 0 is out of range [1, 65536]"},
      {"max_clients_per_uid not an integer", "[daemon]\nmax_clients_per_uid = 2.5\n",
       "f.toml:2:", "'max_clients_per_uid' must be an integer"},
      {"max_connecting_per_uid too large", "[daemon]\nmax_connecting_per_uid = 5000\n",
       "f.toml:2:", "'max_connecting_per_uid' = 5000 is out of range [1, 4096]"},
      {"max_pending_launches too small", "[daemon]\nmax_pending_launches = 8\n",
       "f.toml:2:", "'max_pending_launches' = 8 is out of range [16, 4194304]"},
      {"max_inflight too small", "[daemon]\nmax_inflight = 10\n",
       "f.toml:2:", "'max_inflight' = 10 is out of range [64, 4194304]"},
      {"max_queued_grants too large", "[daemon]\nmax_queued_grants = 5000000\n",
       "f.toml:2:", "'max_queued_grants' = 5000000 is out of range [16, 4194304]"},
      {"max_events_per_s too small", "[daemon]\nmax_events_per_s = 10\n",
       "f.toml:2:", "'max_events_per_s' = 10 is out of range [1000, 1000000000]"},
      {"client_timeout_ms below its floor", "[daemon]\nclient_timeout_ms = 50\n",
       "f.toml:2:", "'client_timeout_ms' must be 0 (off) or at least 100 ms"},
      {"progress_timeout_ms negative", "[daemon]\nprogress_timeout_ms = -1\n",
       "f.toml:2:", "'progress_timeout_ms' = -1 is out of range [0, 3600000]"},
      {"socket too long", "[daemon]\nsocket = \"/" + std::string(200, 's') + "\"\n", "f.toml:2:", "at most 107 bytes"},
      {"empty state_dir", "[daemon]\nstate_dir = \"\"\n", "f.toml:2:", "'state_dir' is empty"},
      {"default_tenant naming nothing", "[daemon]\ndefault_tenant = \"nobody\"\n[[tenant]]\nname = \"a\"\n",
       "f.toml:2:18:", "default_tenant 'nobody' is not a declared tenant (tenants: a, default)"},
      {"tenant without name", "[[tenant]]\npriority = \"high\"\n", "f.toml:1:", "[[tenant]] needs 'name'"},
      {"bad tenant name", "[[tenant]]\nname = \"a b\"\n", "f.toml:2:", "tenant name 'a b' must be 1-63 letters"},
      {"long tenant name", "[[tenant]]\nname = \"" + std::string(64, 'n') + "\"\n", "f.toml:2:", "must be 1-63"},
      {"bad priority", "[[tenant]]\nname = \"a\"\npriority = \"urgent\"\n",
       "f.toml:3:12:", "tenant 'a': priority 'urgent' is not one of high, best-effort"},
      {"best-effort with quota", "[[tenant]]\nname = \"a\"\npriority = \"best-effort\"\nquota = 4\n",
       "f.toml:4:9:", "tenant 'a': a best-effort tenant must have quota 0 (it has 4)"},
      {"best-effort by default with quota", "[[tenant]]\nname = \"a\"\nquota = 4\n",
       "f.toml:3:", "best-effort tenant must have quota 0"},
      {"negative quota", "[[tenant]]\nname = \"a\"\npriority = \"high\"\nquota = -1\n",
       "f.toml:4:", "'quota' = -1 is out of range [0, 128]"},
      {"fractional quota", "[[tenant]]\nname = \"a\"\npriority = \"high\"\nquota = 1.5\n",
       "f.toml:4:", "'quota' must be an integer"},
      {"zero slo", "[[tenant]]\nname = \"a\"\nslo_ms = 0\n", "f.toml:3:", "'slo_ms' must be > 0"},
      {"duplicate names", "[[tenant]]\nname = \"a\"\n\n[[tenant]]\nname = \"a\"\n",
       "f.toml:4:1:", "tenant 'a' is declared twice (first at f.toml:1:1)"},
      {"unknown user name", "[[tenant]]\nname = \"a\"\nusers = [\"alice\", \"mallory\"]\n",
       "f.toml:3:19:", "tenant 'a': 'users': unknown user 'mallory'"},
      {"unknown group name", "[[tenant]]\nname = \"a\"\ngroups = [\"ml\", \"ops\"]\n",
       "f.toml:3:17:", "unknown group 'ops'"},
      {"negative uid", "[[tenant]]\nname = \"a\"\nusers = [-1]\n", "f.toml:3:", "-1 is not a valid user id"},
      {"uid of wrong type", "[[tenant]]\nname = \"a\"\nusers = [true]\n", "f.toml:3:", "must be a user name or id"},
      {"users not an array", "[[tenant]]\nname = \"a\"\nusers = \"alice\"\n", "f.toml:3:", "'users' must be an array"},
      {"match not strings", "[[tenant]]\nname = \"a\"\nmatch = [1]\n", "f.toml:3:", "must be a non-empty string"},
      {"bad fallback set", "[[tenant]]\nname = \"a\"\nfallback_tpcs = \"0-x\"\n",
       "f.toml:3:17:", "tenant 'a': fallback_tpcs '0-x'"},
      {"backwards fallback set", "[[tenant]]\nname = \"a\"\nfallback_tpcs = \"9-3\"\n", "f.toml:3:", "backwards"},
      {"fallback beyond 128", "[[tenant]]\nname = \"a\"\nfallback_tpcs = \"200\"\n", "f.toml:3:", "fallback_tpcs"},
      {"empty fallback set", "[[tenant]]\nname = \"a\"\nfallback_tpcs = \"\"\n", "f.toml:3:", "fallback_tpcs is empty"},
      {"fallback not a string", "[[tenant]]\nname = \"a\"\nfallback_tpcs = 4\n",
       "f.toml:3:", "'fallback_tpcs' must be a string"},
  };
  for (const ErrorCase& e : cases) {
    const std::string m = parse_error(e.text);
    EXPECT_EQ(m.rfind(e.at, 0), 0u) << e.what << ": " << m;
    EXPECT_NE(m.find(e.message), std::string::npos) << e.what << ": " << m;
  }
}

TEST(DaemonConfig, ValidationErrorsNameTheTenantsFileAndLine) {
  // One quota larger than the device.
  std::string m = validate_error("[[tenant]]\nname = \"big\"\npriority = \"high\"\nquota = 70\n");
  EXPECT_EQ(m.rfind("f.toml:1:1: tenant 'big': quota 70 is more than the device's 66 TPCs", 0), 0u) << m;
  // Quotas that add up to more than the device: the tenant that crosses it.
  m = validate_error(R"([[tenant]]
name = "a"
priority = "high"
quota = 40

[[tenant]]
name = "b"
priority = "high"
quota = 30
)");
  EXPECT_EQ(m.rfind("f.toml:6:1: tenant 'b': the quotas of the high-priority tenants add up to 70", 0), 0u) << m;
  EXPECT_NE(m.find("more than the device's 66 TPCs"), std::string::npos) << m;
  // Exactly the device is fine.
  EXPECT_EQ(validate_error("[[tenant]]\nname = \"a\"\npriority = \"high\"\nquota = 66\n"), "(valid)");
  // But then a high-priority tenant without a quota has no TPC to run on.
  m = validate_error(
      "[[tenant]]\nname = \"a\"\npriority = \"high\"\nquota = 66\n[[tenant]]\nname = \"z\"\npriority = \"high\"\n");
  EXPECT_EQ(m.rfind("f.toml:5:1: tenant 'z': a high-priority tenant with quota 0 runs on the TPCs no quota holds", 0),
            0u)
      << m;
  // A fallback set outside the device.
  m = validate_error("[[tenant]]\nname = \"a\"\nfallback_tpcs = \"60-69\"\n");
  EXPECT_EQ(m.rfind("f.toml:1:1: tenant 'a': fallback_tpcs 60-69 is not inside the device's TPCs 0-65", 0), 0u) << m;

  // What the environment, flags or code may have changed since parsing.
  DaemonConfig c = default_config();
  c.policy = "fifo";
  EXPECT_NE(validate(c, 66).message().find("unknown policy 'fifo'"), std::string::npos);
  c = default_config();
  c.atom_us = 20;
  EXPECT_NE(validate(c, 66).message().find("atom_us = 20 is out of range"), std::string::npos)
      << validate(c, 66).message();
  c = default_config();
  c.default_tenant = "ghost";
  EXPECT_NE(validate(c, 66).message().find("default_tenant 'ghost' is not a declared tenant"), std::string::npos);
  c = default_config();
  c.tenants.push_back(c.tenants[0]);
  EXPECT_NE(validate(c, 66).message().find("tenant 'default' is declared twice"), std::string::npos);
  c = default_config();
  c.tenants[0].quota = 3;
  EXPECT_NE(validate(c, 66).message().find("best-effort tenant must have quota 0"), std::string::npos);
  c = default_config();
  c.socket = "";
  EXPECT_FALSE(validate(c, 66).is_ok());
  EXPECT_FALSE(validate(default_config(), 0).is_ok());
  EXPECT_FALSE(validate(default_config(), 129).is_ok());
}

// ---- environment ------------------------------------------------------------

TEST(DaemonConfig, EnvironmentOverridesTheFile) {
  auto c = parse(R"(
[daemon]
socket = "/tmp/file.sock"
policy = "mps"
mps = "off"
atom_us = 800
throttle_us = 300
throttle_unborrowed_us = 2000
max_stolen_atoms = 1
pause_slowdown = 1.5
idle_grace_us = 300
burst_gap_us = 150
share_unowned = false
hp_holds_unowned = false
best_effort_runs_free = false
stream_priorities = true
mps_multiuser = false
status_shows_all = true
state_dir = "/tmp/file-state"
trace = "/tmp/file-trace.jsonl"
device = "all"
)");
  ASSERT_TRUE(c) << c.status().message();
  EXPECT_EQ(c->device, "all");
  EXPECT_EQ(default_config().device, "0");
  EXPECT_DOUBLE_EQ(c->throttle_us, 300);
  EXPECT_DOUBLE_EQ(c->throttle_unborrowed_us, 2000);
  EXPECT_DOUBLE_EQ(default_config().throttle_unborrowed_us, 0);  // the same as throttle_us
  EXPECT_EQ(c->max_stolen_atoms, 1U);
  EXPECT_EQ(default_config().max_stolen_atoms, sched::LithosConfig{}.max_stolen_atoms);
  EXPECT_EQ(default_config().max_stolen_atoms, 16U);
  EXPECT_DOUBLE_EQ(c->pause_slowdown, 1.5);
  EXPECT_DOUBLE_EQ(default_config().pause_slowdown, sched::LithosConfig{}.pause_slowdown);
  EXPECT_DOUBLE_EQ(c->idle_grace_us, 300);
  EXPECT_DOUBLE_EQ(default_config().idle_grace_us, 20);
  EXPECT_DOUBLE_EQ(c->burst_gap_us, 150);
  EXPECT_DOUBLE_EQ(default_config().burst_gap_us, 0);
  EXPECT_FALSE(c->share_unowned);
  EXPECT_TRUE(default_config().share_unowned);
  EXPECT_FALSE(c->hp_holds_unowned);
  EXPECT_TRUE(default_config().hp_holds_unowned);
  EXPECT_FALSE(c->best_effort_runs_free);
  EXPECT_TRUE(default_config().best_effort_runs_free);
  EXPECT_TRUE(c->stream_priorities);
  EXPECT_FALSE(default_config().stream_priorities);
  EXPECT_FALSE(c->mps_multiuser);
  EXPECT_TRUE(default_config().mps_multiuser);
  EXPECT_TRUE(c->status_shows_all);
  EXPECT_FALSE(default_config().status_shows_all);
  EXPECT_EQ(nlohmann::json::parse(config_json(*c))["status_shows_all"], true);
  EXPECT_EQ(nlohmann::json::parse(config_json(default_config()))["status_shows_all"], false);
  std::map<std::string, std::string> env{
      {"LITHOSD_SOCKET", "/tmp/env.sock"},
      {"LITHOSD_POLICY", "static-partition"},
      {"LITHOSD_MPS", "attach"},
      {"LITHOSD_ATOM_US", "250.5"},
      {"LITHOSD_STATE_DIR", "/tmp/env-state"},
      {"LITHOSD_DEVICE", "0,2"},
      {"LITHOSD_TRACE", "/tmp/env.jsonl"},
      {"LITHOSD_THROTTLE_US", "1000"},
      {"LITHOSD_THROTTLE_UNBORROWED_US", "5000"},
      {"LITHOSD_MAX_STOLEN_ATOMS", "0"},
      {"LITHOSD_PAUSE_SLOWDOWN", "3"},
      {"LITHOSD_IDLE_GRACE_US", "150"},
      {"LITHOSD_BURST_GAP_US", "300"},
      {"LITHOSD_BEST_EFFORT_RUNS_FREE", "on"},
      {"LITHOSD_STREAM_PRIORITIES", "off"},
      {"LITHOSD_MPS_MULTIUSER", "on"},
      {"LITHOSD_SHARE_UNOWNED", "yes"},
      {"LITHOSD_HP_HOLDS_UNOWNED", "true"},
  };
  const auto getenv_fn = [&](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  };
  DaemonConfig all = *c;
  ASSERT_TRUE(apply_env(all, getenv_fn).is_ok());
  EXPECT_EQ(all.socket, "/tmp/env.sock");
  EXPECT_EQ(all.policy, "static-partition");
  EXPECT_EQ(all.mps, MpsMode::kAttach);
  EXPECT_DOUBLE_EQ(all.atom_us, 250.5);
  EXPECT_DOUBLE_EQ(all.throttle_us, 1000);
  EXPECT_DOUBLE_EQ(all.throttle_unborrowed_us, 5000);
  EXPECT_EQ(all.max_stolen_atoms, 0U);
  EXPECT_DOUBLE_EQ(all.pause_slowdown, 3);
  EXPECT_DOUBLE_EQ(all.idle_grace_us, 150);
  EXPECT_DOUBLE_EQ(all.burst_gap_us, 300);
  EXPECT_TRUE(all.share_unowned);
  EXPECT_TRUE(all.hp_holds_unowned);
  EXPECT_TRUE(all.best_effort_runs_free);
  EXPECT_FALSE(all.stream_priorities);
  EXPECT_TRUE(all.mps_multiuser);
  EXPECT_EQ(all.state_dir, "/tmp/env-state");
  EXPECT_EQ(all.device, "0,2");
  EXPECT_EQ(all.trace, "/tmp/env.jsonl");
  EXPECT_EQ(all.source, "f.toml");

  // Unset or empty variables leave the file's values.
  env = {{"LITHOSD_POLICY", ""}, {"LITHOSD_TRACE", ""}, {"LITHOSD_MPS", "start"}};
  DaemonConfig some = *c;
  ASSERT_TRUE(apply_env(some, getenv_fn).is_ok());
  EXPECT_EQ(some.socket, "/tmp/file.sock");
  EXPECT_EQ(some.policy, "mps");
  EXPECT_EQ(some.mps, MpsMode::kStart);
  EXPECT_DOUBLE_EQ(some.atom_us, 800);
  EXPECT_FALSE(some.hp_holds_unowned);
  EXPECT_EQ(some.trace, "/tmp/file-trace.jsonl");

  // Bad values are errors that name the variable.
  const std::pair<const char*, std::string> bad[] = {
      {"LITHOSD_POLICY", "fifo"},         {"LITHOSD_MPS", "maybe"},
      {"LITHOSD_ATOM_US", "fast"},        {"LITHOSD_ATOM_US", "10"},
      {"LITHOSD_ATOM_US", "5e9"},         {"LITHOSD_ATOM_US", "100x"},
      {"LITHOSD_ATOM_US", "nan"},         {"LITHOSD_SOCKET", std::string(300, 's')},
      {"LITHOSD_THROTTLE_US", "1"},       {"LITHOSD_BEST_EFFORT_RUNS_FREE", "sometimes"},
      {"LITHOSD_MAX_STOLEN_ATOMS", "-1"}, {"LITHOSD_MAX_STOLEN_ATOMS", "2000"},
      {"LITHOSD_MAX_STOLEN_ATOMS", "1x"}, {"LITHOSD_SHARE_UNOWNED", "2"},
      {"LITHOSD_HP_HOLDS_UNOWNED", "2"},  {"LITHOSD_HP_HOLDS_UNOWNED", "maybe"},
      {"LITHOSD_DEVICE", "1,1"},          {"LITHOSD_DEVICE", "-1"},
      {"LITHOSD_DEVICE", "every"},        {"LITHOSD_DEVICE", "0,"},
      {"LITHOSD_PAUSE_SLOWDOWN", "0.9"},  {"LITHOSD_PAUSE_SLOWDOWN", "lots"},
      {"LITHOSD_MPS_MULTIUSER", "2"},     {"LITHOSD_IDLE_GRACE_US", "-1"},
      {"LITHOSD_IDLE_GRACE_US", "1e9"},   {"LITHOSD_BURST_GAP_US", "-3"},
  };
  for (const auto& [name, value] : bad) {
    const std::string& v = value;
    env = {{name, v}};
    DaemonConfig x = *c;
    Status s = apply_env(x, getenv_fn);
    ASSERT_FALSE(s.is_ok()) << name << "=" << v;
    EXPECT_EQ(s.message().rfind(name, 0), 0u) << s.message();
    EXPECT_EQ(x.policy, "mps");
    EXPECT_DOUBLE_EQ(x.atom_us, 800);
  }
  // The text names the bad value.
  env = {{"LITHOSD_HP_HOLDS_UNOWNED", "maybe"}};
  DaemonConfig x = *c;
  const Status s = apply_env(x, getenv_fn);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.message().find("LITHOSD_HP_HOLDS_UNOWNED: "), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("maybe"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("is not true or false"), std::string::npos) << s.message();
  EXPECT_FALSE(x.hp_holds_unowned);
}

// ---- tenant resolution ------------------------------------------------------

constexpr const char* kTenants = R"(
[[tenant]]
name = "svc"
priority = "high"
quota = 44
users = [1001]
groups = [1005]
match = ["triton_server", "serve*"]

[[tenant]]
name = "train"
match = ["train-?", "serve_batch"]

[[tenant]]
name = "open-hp"
priority = "high"
quota = 8
)";

TEST(DaemonConfig, ResolvesAnExplicitNameForAnAllowedProcess) {
  auto c = parse(kTenants);
  ASSERT_TRUE(c) << c.status().message();
  auto r = resolve_tenant(*c, "svc", "python3", 1001, 100, {});
  ASSERT_TRUE(r) << r.status().message();
  EXPECT_EQ(r->index, index_of(*c, "svc"));
  EXPECT_FALSE(r->by_rule);
  EXPECT_FALSE(r->by_default);
  // Allowed through the primary group, or a supplementary one.
  EXPECT_TRUE(resolve_tenant(*c, "svc", "python3", 2000, 1005, {}));
  EXPECT_TRUE(resolve_tenant(*c, "svc", "python3", 2000, 100, {27, 1005}));
  // ...but not through supplementary groups it is not listed by.
  EXPECT_FALSE(resolve_tenant(*c, "svc", "python3", 2000, 100, {27, 1006}));
  // A tenant without users or groups admits anyone.
  auto open = resolve_tenant(*c, "open-hp", "", 4242, 4242, {});
  ASSERT_TRUE(open);
  EXPECT_EQ(open->index, index_of(*c, "open-hp"));
}

TEST(DaemonConfig, RefusesAnExplicitNameForAnotherUid) {
  auto c = parse(kTenants);
  ASSERT_TRUE(c);
  auto r = resolve_tenant(*c, "svc", "triton_server", 1002, 1002, {27});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(r.status().message().find("uid 1002"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("tenant 'svc'"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("users 1001; groups 1005"), std::string::npos) << r.status().message();
  EXPECT_LT(r.status().message().size(), 128u);  // fits ipc::Welcome::message

  auto unknown = resolve_tenant(*c, "nope", "triton_server", 1001, 1005, {});
  ASSERT_FALSE(unknown);
  EXPECT_EQ(unknown.status().code(), StatusCode::kNotFound);
  EXPECT_NE(unknown.status().message().find("no tenant 'nope'"), std::string::npos);
}

TEST(DaemonConfig, MatchRulesBindProcessesThatNameNoTenant) {
  auto c = parse(kTenants);
  ASSERT_TRUE(c);
  // An allowed process whose executable matches a rule.
  for (const char* program : {"triton_server", "serve", "serve_llm"}) {
    auto r = resolve_tenant(*c, "", program, 1001, 1001, {});
    ASSERT_TRUE(r) << program;
    EXPECT_EQ(r->index, index_of(*c, "svc")) << program;
    EXPECT_TRUE(r->by_rule);
    EXPECT_FALSE(r->by_default);
  }
  // '?' is one character; the first matching tenant in file order wins.
  auto t = resolve_tenant(*c, "", "train-7", 3000, 3000, {});
  ASSERT_TRUE(t);
  EXPECT_EQ(t->index, index_of(*c, "train"));
  EXPECT_TRUE(t->by_rule);
  auto both = resolve_tenant(*c, "", "serve_batch", 1001, 1001, {});
  ASSERT_TRUE(both);
  EXPECT_EQ(both->index, index_of(*c, "svc"));
  // A rule whose tenant the process may not claim is skipped.
  auto skipped = resolve_tenant(*c, "", "serve_batch", 3000, 3000, {});
  ASSERT_TRUE(skipped);
  EXPECT_EQ(skipped->index, index_of(*c, "train"));
  auto fell = resolve_tenant(*c, "", "serve_llm", 3000, 3000, {});
  ASSERT_TRUE(fell);
  EXPECT_EQ(fell->index, index_of(*c, "default"));
  EXPECT_TRUE(fell->by_default);
  // An explicit name wins over a matching rule.
  auto named = resolve_tenant(*c, "train", "triton_server", 1001, 1001, {});
  ASSERT_TRUE(named);
  EXPECT_EQ(named->index, index_of(*c, "train"));
  EXPECT_FALSE(named->by_rule);
}

TEST(DaemonConfig, UndeclaredProcessesGetTheDefaultTenant) {
  auto c = parse(kTenants);
  ASSERT_TRUE(c);
  for (const char* program : {"python3", "", "train-77", "triton"}) {
    auto r = resolve_tenant(*c, "", program, 5000, 5000, {});
    ASSERT_TRUE(r) << program;
    EXPECT_EQ(r->index, index_of(*c, "default")) << program;
    EXPECT_TRUE(r->by_default);
    EXPECT_FALSE(r->by_rule);
  }
  // A configured default tenant.
  auto d = parse(std::string("[daemon]\ndefault_tenant = \"train\"\n") + kTenants);
  ASSERT_TRUE(d) << d.status().message();
  auto r = resolve_tenant(*d, "", "python3", 5000, 5000, {});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->index, index_of(*d, "train"));
  EXPECT_TRUE(r->by_default);
  // A default tenant with users: others are refused, not moved elsewhere.
  auto e = parse("[[tenant]]\nname = \"default\"\nusers = [7]\n");
  ASSERT_TRUE(e);
  EXPECT_TRUE(resolve_tenant(*e, "", "x", 7, 7, {}));
  auto refused = resolve_tenant(*e, "", "x", 8, 8, {});
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.status().message().find("uid 8"), std::string::npos);
  EXPECT_NE(refused.status().message().find("default tenant 'default'"), std::string::npos);
  // No default tenant at all (only possible for a config built in code).
  DaemonConfig none;
  none.default_tenant = "gone";
  auto nothing = resolve_tenant(none, "", "x", 1, 1, {});
  ASSERT_FALSE(nothing);
  EXPECT_EQ(nothing.status().code(), StatusCode::kNotFound);
}

TEST(DaemonConfig, GlobMatching) {
  EXPECT_TRUE(glob_match("serve*", "serve"));
  EXPECT_TRUE(glob_match("serve*", "serve_llm"));
  EXPECT_FALSE(glob_match("serve*", "reserve"));
  EXPECT_TRUE(glob_match("*serve", "reserve"));
  EXPECT_TRUE(glob_match("*", ""));
  EXPECT_TRUE(glob_match("*", "anything"));
  EXPECT_TRUE(glob_match("a*b*c", "aXXbYYbZc"));
  EXPECT_FALSE(glob_match("a*b*c", "aXXbYYbZ"));
  EXPECT_TRUE(glob_match("py?hon3", "python3"));
  EXPECT_FALSE(glob_match("py?hon3", "pyhon3"));
  EXPECT_FALSE(glob_match("?", ""));
  EXPECT_TRUE(glob_match("**x", "x"));
  EXPECT_FALSE(glob_match("abc", "abcd"));
  EXPECT_FALSE(glob_match("", "a"));
  EXPECT_TRUE(glob_match("", ""));
  EXPECT_TRUE(glob_match("[x]", "[x]"));  // brackets are plain characters
}

// A service may pause best-effort work while it runs (pauses_best_effort):
// true, false or "auto"; read, handed to the Engine's spec, shown in the
// JSON; refused for a best-effort tenant and for any other value.
TEST(DaemonConfig, AServiceMayPauseBestEffortWork) {
  using sched::BestEffortPause;
  auto c = parse(
      "[[tenant]]\nname = \"svc\"\npriority = \"high\"\nquota = 10\npauses_best_effort = true\n"
      "[[tenant]]\nname = \"svc2\"\npriority = \"high\"\nquota = 10\npauses_best_effort = \"auto\"\n"
      "[[tenant]]\nname = \"train\"\n");
  ASSERT_TRUE(c) << c.status().message();
  ASSERT_NE(c->tenant("svc"), nullptr);
  EXPECT_EQ(c->tenant("svc")->pauses_best_effort, BestEffortPause::kAlways);
  EXPECT_EQ(c->tenant("svc")->spec().pauses_best_effort, BestEffortPause::kAlways);
  EXPECT_EQ(c->tenant("svc2")->spec().pauses_best_effort, BestEffortPause::kAuto);
  EXPECT_EQ(c->tenant("train")->spec().pauses_best_effort, BestEffortPause::kNever);
  // Unset: "auto" for a high-priority tenant, false for a best-effort one.
  auto d = parse("[[tenant]]\nname = \"svc\"\npriority = \"high\"\nquota = 10\n[[tenant]]\nname = \"train\"\n");
  ASSERT_TRUE(d) << d.status().message();
  EXPECT_EQ(d->tenant("svc")->spec().pauses_best_effort, BestEffortPause::kAuto);
  EXPECT_EQ(d->tenant("train")->spec().pauses_best_effort, BestEffortPause::kNever);
  const auto j = nlohmann::json::parse(config_json(*c));
  EXPECT_EQ(j["tenants"][0]["pauses_best_effort"], true);
  EXPECT_EQ(j["tenants"][1]["pauses_best_effort"], "auto");
  EXPECT_EQ(j["tenants"][2]["pauses_best_effort"], false);
  EXPECT_NE(parse_error("[[tenant]]\nname = \"train\"\npauses_best_effort = true\n")
                .find("f.toml:3:22: tenant 'train': only a high-priority tenant pauses best-effort work"),
            std::string::npos)
      << parse_error("[[tenant]]\nname = \"train\"\npauses_best_effort = true\n");
  EXPECT_NE(parse_error("[[tenant]]\nname = \"train\"\npauses_best_effort = \"auto\"\n")
                .find("only a high-priority tenant pauses best-effort work"),
            std::string::npos);
  for (const char* bad : {"\"yes\"", "1", "\"Auto\""}) {
    const std::string text =
        std::string("[[tenant]]\nname = \"s\"\npriority = \"high\"\npauses_best_effort = ") + bad + "\n";
    EXPECT_NE(parse_error(text).find("'pauses_best_effort' must be true, false or \"auto\""), std::string::npos)
        << bad << ": " << parse_error(text);
  }
}

// ---- JSON -------------------------------------------------------------------

TEST(DaemonConfig, JsonCarriesTheConfiguration) {
  auto c = parse_config(read_file(LITHOS_EXAMPLE_CONFIG), "/etc/lithos/lithosd.toml", fake_ids());
  ASSERT_TRUE(c) << c.status().message();
  c->atom_us = 312.25;
  c->mps = MpsMode::kOff;
  const auto j = nlohmann::json::parse(config_json(*c));
  EXPECT_EQ(j["schema"], "lithos.daemon-config/1");
  EXPECT_EQ(j["source"], "/etc/lithos/lithosd.toml");
  EXPECT_EQ(j["socket"], c->socket);
  EXPECT_EQ(j["policy"], "lithos");
  EXPECT_EQ(j["mps"], "off");
  EXPECT_DOUBLE_EQ(j["atom_us"].get<double>(), 312.25);
  EXPECT_EQ(j["state_dir"], "/var/lib/lithos");
  EXPECT_EQ(j["device"], "0");
  EXPECT_EQ(j["trace"], "");
  EXPECT_EQ(j["default_tenant"], "default");
  EXPECT_EQ(j["share_unowned"], true);
  EXPECT_EQ(j["hp_holds_unowned"], true);  // the example leaves the default
  c->hp_holds_unowned = false;
  EXPECT_EQ(nlohmann::json::parse(config_json(*c))["hp_holds_unowned"], false);
  ASSERT_EQ(j["tenants"].size(), 3u);
  const auto& svc = j["tenants"][0];
  EXPECT_EQ(svc["name"], "svc");
  EXPECT_EQ(svc["priority"], "high");
  EXPECT_EQ(svc["quota"], 44);
  EXPECT_DOUBLE_EQ(svc["slo_ms"].get<double>(), 25.0);
  EXPECT_EQ(svc["users"], nlohmann::json({1000, 1001}));
  EXPECT_EQ(svc["groups"], nlohmann::json({1005}));
  EXPECT_EQ(svc["match"], nlohmann::json({"triton_server", "serve*"}));
  EXPECT_EQ(svc["fallback_tpcs"], "0-43");
  const auto& train = j["tenants"][1];
  EXPECT_EQ(train["priority"], "best-effort");
  EXPECT_EQ(train["quota"], 0);
  EXPECT_TRUE(train["slo_ms"].is_null());
  EXPECT_TRUE(train["fallback_tpcs"].is_null());
  EXPECT_TRUE(train["users"].empty());

  // Round trip of the tenants through the file syntax.
  for (std::size_t i = 0; i < c->tenants.size(); ++i) {
    const auto& t = j["tenants"][i];
    EXPECT_EQ(t["name"].get<std::string>(), c->tenants[i].name);
    if (!t["fallback_tpcs"].is_null()) {
      auto set = sched::TpcSet::parse(t["fallback_tpcs"].get<std::string>());
      ASSERT_TRUE(set);
      EXPECT_EQ(*set, *c->tenants[i].fallback);
    }
  }
}

// The bounds on what clients may make the daemon hold: their defaults, a
// file that sets them, their JSON, and validate()'s ranges.
TEST(DaemonConfig, ClientBoundsParseAndValidate) {
  const DaemonConfig d = default_config();
  EXPECT_EQ(d.max_clients, 1024);
  EXPECT_EQ(d.max_clients_per_uid, 256);
  EXPECT_EQ(d.max_connecting_per_uid, 32);
  EXPECT_EQ(d.max_pending_launches, 4096u);
  EXPECT_EQ(d.max_inflight, 16384u);
  EXPECT_EQ(d.max_queued_grants, 1024u);
  EXPECT_DOUBLE_EQ(d.max_events_per_s, 1e6);
  EXPECT_DOUBLE_EQ(d.client_timeout_ms, 2000);
  EXPECT_DOUBLE_EQ(d.progress_timeout_ms, 30000);
  auto c = parse(
      "[daemon]\nmax_clients = 100\nmax_clients_per_uid = 10\nmax_connecting_per_uid = 4\n"
      "max_pending_launches = 128\nmax_inflight = 512\nmax_queued_grants = 32\nmax_events_per_s = 50000\n"
      "client_timeout_ms = 0\nprogress_timeout_ms = 250.5\n");
  ASSERT_TRUE(c) << c.status().message();
  EXPECT_EQ(c->max_clients, 100);
  EXPECT_EQ(c->max_clients_per_uid, 10);
  EXPECT_EQ(c->max_connecting_per_uid, 4);
  EXPECT_EQ(c->max_pending_launches, 128u);
  EXPECT_EQ(c->max_inflight, 512u);
  EXPECT_EQ(c->max_queued_grants, 32u);
  EXPECT_DOUBLE_EQ(c->max_events_per_s, 50000);
  EXPECT_DOUBLE_EQ(c->client_timeout_ms, 0);  // off
  EXPECT_DOUBLE_EQ(c->progress_timeout_ms, 250.5);
  EXPECT_TRUE(validate(*c, 66).is_ok());
  const auto j = nlohmann::json::parse(config_json(*c));
  EXPECT_EQ(j["max_clients"], 100);
  EXPECT_EQ(j["max_clients_per_uid"], 10);
  EXPECT_EQ(j["max_connecting_per_uid"], 4);
  EXPECT_EQ(j["max_pending_launches"], 128);
  EXPECT_EQ(j["max_inflight"], 512);
  EXPECT_EQ(j["max_queued_grants"], 32);
  EXPECT_EQ(j["max_events_per_s"], 50000);
  EXPECT_EQ(j["client_timeout_ms"], 0);
  EXPECT_DOUBLE_EQ(j["progress_timeout_ms"].get<double>(), 250.5);
  // validate() checks what code (or a later refactor's flags) may set.
  DaemonConfig bad = d;
  bad.max_clients = 0;
  EXPECT_NE(validate(bad, 66).message().find("max_clients = 0 is out of range"), std::string::npos);
  bad = d;
  bad.max_inflight = 1;
  EXPECT_NE(validate(bad, 66).message().find("max_inflight = 1 is out of range"), std::string::npos);
  bad = d;
  bad.client_timeout_ms = 20;
  EXPECT_NE(validate(bad, 66).message().find("client_timeout_ms = 20 is out of range [100, 3600000]"),
            std::string::npos);
  bad.client_timeout_ms = 0;
  EXPECT_TRUE(validate(bad, 66).is_ok());
}

TEST(DaemonConfig, JsonEscapesStrings) {
  DaemonConfig c = default_config();
  c.trace = "a\"b\\c\nd\te\x01f/\xc3\xa9\xe2\x82\xac";  // quote, backslash, controls, é, €
  c.state_dir = std::string("bad\xff\xc3") + "end";     // not UTF-8
  c.source = "</script>";
  const std::string text = config_json(c);
  EXPECT_EQ(text.find('\n'), std::string::npos);
  const auto j = nlohmann::json::parse(text);
  EXPECT_EQ(j["trace"], c.trace);
  EXPECT_EQ(j["state_dir"],
            "bad\xef\xbf\xbd\xef\xbf\xbd"
            "end");
  EXPECT_EQ(j["source"], "</script>");
  EXPECT_EQ(j["tenants"][0]["name"], "default");
}

TEST(DaemonConfig, MpsModeNames) {
  for (MpsMode m : {MpsMode::kAuto, MpsMode::kStart, MpsMode::kAttach, MpsMode::kOff}) {
    auto back = parse_mps_mode(mps_mode_name(m));
    ASSERT_TRUE(back.has_value());
    EXPECT_EQ(*back, m);
  }
  EXPECT_FALSE(parse_mps_mode("Auto").has_value());
}

}  // namespace
}  // namespace lithos::daemon
