// Fuzz target: a Hello of arbitrary bytes into a real lithosd, from the
// connection to the Welcome, the channel and the status JSON.
//
// One Daemon (daemon_harness.hpp) serves every input, with tenants of both
// classes, uid and gid admission, match rules and a default tenant. Each
// input is sent as one packet on a new connection; the daemon is stepped
// until it answered (or closed: anything but a Hello's exact size). Then:
//  - a Welcome must be well formed, agree with the configuration and with an
//    own model of which tenant the process gets (asked by name, else the
//    first match rule it may claim, else the default), bring a channel
//    descriptor exactly when it admits, and the channel must map and name
//    the client and its tenant;
//  - a kStatus Hello (sent while the admitted client is still connected, so
//    that its program name is in it) and Daemon::status_json must be valid
//    UTF-8 and parse, and list the client;
//  - closing the connection drops the client within a few turns, the
//    counters say so, and no descriptor outlives the input.
// The daemon's clock moves only by Daemon::step(now) (deterministic).
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "daemon_harness.hpp"

namespace {

using namespace lithos;
using lithos::fuzz::DaemonUnderTest;
using lithos::fuzz::fail;

std::string config_text() {
  const std::string uid = std::to_string(::geteuid()), gid = std::to_string(::getegid());
  return R"([daemon]
socket = "@SOCKET@"
mps = "off"
default_tenant = "default"

[[tenant]]
name = "svc"
priority = "high"
quota = 20
users = [)" +
         uid +
         R"(]
match = ["serve*", "triton_server"]
pauses_best_effort = "auto"

[[tenant]]
name = "svc-other"
priority = "high"
quota = 10
users = [4242]
match = ["infer?", "python*"]

[[tenant]]
name = "svc-group"
priority = "high"
quota = 8
groups = [)" +
         gid +
         R"(, 4343]
match = ["*.py"]
pauses_best_effort = true
fallback_tpcs = "20-27"

[[tenant]]
name = "train"
priority = "best-effort"
match = ["train*", "python?"]

[[tenant]]
name = "batch"
priority = "best-effort"
users = [4242]
groups = [4343]
match = ["batch"]

[[tenant]]
name = "default"
priority = "best-effort"
)";
}

DaemonUnderTest& world() {
  static DaemonUnderTest* w = new DaemonUnderTest(config_text());
  return *w;
}

// * and ? globs, written again for the model.
bool glob(std::string_view p, std::string_view t) {
  if (p.empty()) return t.empty();
  if (p[0] == '*') {
    for (std::size_t i = 0; i <= t.size(); ++i) {
      if (glob(p.substr(1), t.substr(i))) return true;
    }
    return false;
  }
  return !t.empty() && (p[0] == '?' || p[0] == t[0]) && glob(p.substr(1), t.substr(1));
}

// SO_PEERCRED reports the effective ids (supplementary groups do not count).
bool may_claim(const daemon::TenantConfig& t) {
  if (t.uids.empty() && t.gids.empty()) return true;
  return std::find(t.uids.begin(), t.uids.end(), ::geteuid()) != t.uids.end() ||
         std::find(t.gids.begin(), t.gids.end(), ::getegid()) != t.gids.end();
}

std::string text_of(const char* field, std::size_t cap) { return std::string(field, strnlen(field, cap)); }

// The model of which Welcome a valid client Hello gets.
struct Expect {
  ipc::WelcomeStatus status = ipc::WelcomeStatus::kOk;
  std::size_t tenant = 0;
};
Expect expect(const daemon::DaemonConfig& c, const std::string& asked, const std::string& program) {
  const auto& ts = c.tenants;
  if (!asked.empty()) {
    for (std::size_t i = 0; i < ts.size(); ++i) {
      if (ts[i].name == asked) return {may_claim(ts[i]) ? ipc::WelcomeStatus::kOk : ipc::WelcomeStatus::kRefused, i};
    }
    return {ipc::WelcomeStatus::kNoTenant, 0};
  }
  for (std::size_t i = 0; i < ts.size() && !program.empty(); ++i) {
    if (!may_claim(ts[i])) continue;
    for (const std::string& m : ts[i].match) {
      if (glob(m, program)) return {ipc::WelcomeStatus::kOk, i};
    }
  }
  for (std::size_t i = 0; i < ts.size(); ++i) {
    if (ts[i].name == c.default_tenant)
      return {may_claim(ts[i]) ? ipc::WelcomeStatus::kOk : ipc::WelcomeStatus::kRefused, i};
  }
  return {ipc::WelcomeStatus::kNoTenant, 0};
}

void check_terminated(const char* field, std::size_t cap, const char* what) {
  if (strnlen(field, cap) == cap) fail("Welcome::%s is not NUL-terminated", what);
}

// Drops the admitted client by closing its end; the daemon must notice.
void wait_gone(DaemonUnderTest& w, std::uint64_t gone_before) {
  for (int t = 0; t < 4; ++t) {
    w.socket_turn();
    if (w.daemon().counters().clients_gone == gone_before + 1) return;
  }
  fail("a client whose socket closed was not dropped within 4 turns");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  DaemonUnderTest& w = world();
  const int fds_before = fuzz::count_fds();
  const daemon::DaemonCounters c0 = w.daemon().counters();

  int sock = w.connect();
  bool sent = false;
  if (size > 0) sent = ipc::send_packet(sock, data, std::min<std::size_t>(size, 1 << 16)).is_ok();
  if (!sent) {  // a connection that goes without a Hello
    ::close(sock);
    w.socket_turn();
    w.socket_turn();
    if (w.daemon().counters().clients_refused != c0.clients_refused + 1)
      fail("a connection closed before its Hello was not counted as refused");
    if (fuzz::count_fds() != fds_before) fail("descriptor leak: %d before, %d after", fds_before, fuzz::count_fds());
    return 0;
  }

  ipc::Hello hello;
  // A packet that is not a Hello's size is refused at once (a kBadHello
  // Welcome saying why, or the connection closed).
  DaemonUnderTest::Answer a = w.await_answer(sock, 4);
  const bool whole = size == sizeof hello;
  if (whole) std::memcpy(&hello, data, sizeof hello);
  ipc::Hello checked = hello;
  const bool valid = whole && ipc::validate_hello(checked).is_ok();

  std::unique_ptr<ipc::Channel> channel;
  std::uint32_t client_id = 0;
  std::string tenant_name;
  if (!whole) {
    if (a.fd >= 0) fail("a %zu-byte packet (not a Hello's %zu) got a descriptor", size, sizeof hello);
    if (!a.closed) {
      ipc::Welcome wel;
      if (a.bytes.size() != sizeof wel) fail("the answer to a %zu-byte packet is not a Welcome", size);
      std::memcpy(&wel, a.bytes.data(), sizeof wel);
      if (wel.status != ipc::WelcomeStatus::kBadHello)
        fail("a %zu-byte packet (not a Hello's %zu) was answered with status %u", size, sizeof hello,
             static_cast<unsigned>(wel.status));
      check_terminated(wel.message, sizeof wel.message, "message");
    }
  } else if (valid && hello.kind == ipc::HelloKind::kStatus) {
    if (a.closed) fail("a status request was closed without an answer");
    if (a.fd >= 0) fail("a status answer came with a descriptor");
    fuzz::check_status_json(std::string(a.bytes.begin(), a.bytes.end()), "status Hello");
  } else {
    if (a.closed) fail("a Hello of the right size was closed without a Welcome");
    if (a.bytes.size() != sizeof(ipc::Welcome))
      fail("the answer to a Hello is %zu bytes, not a Welcome", a.bytes.size());
    ipc::Welcome wel;
    std::memcpy(&wel, a.bytes.data(), sizeof wel);
    if (wel.magic != ipc::kMagic || wel.version != ipc::kVersion) fail("a Welcome without magic or version");
    check_terminated(wel.message, sizeof wel.message, "message");
    check_terminated(wel.tenant, sizeof wel.tenant, "tenant");
    check_terminated(wel.gpu, sizeof wel.gpu, "gpu");
    check_terminated(wel.slot_map, sizeof wel.slot_map, "slot_map");
    if (wel.daemon_epoch != w.daemon().epoch()) fail("Welcome::daemon_epoch is not the daemon's");
    Expect want;
    if (!valid) {
      want.status = ipc::WelcomeStatus::kBadHello;
    } else {
      want = expect(w.config(), text_of(checked.tenant, sizeof checked.tenant),
                    text_of(checked.program, sizeof checked.program));
    }
    if (wel.status != want.status)
      fail("Welcome status %u, expected %u (message: %s)", static_cast<unsigned>(wel.status),
           static_cast<unsigned>(want.status), wel.message);
    if (wel.status != ipc::WelcomeStatus::kOk) {
      if (a.fd >= 0) fail("a refusal came with a descriptor");
    } else {
      if (a.fd < 0) fail("a Welcome came without its channel");
      const daemon::TenantConfig& tc = w.config().tenants[want.tenant];
      if (wel.tenant_id != want.tenant || text_of(wel.tenant, sizeof wel.tenant) != tc.name)
        fail("Welcome gives tenant %u '%s', expected %zu '%s'", wel.tenant_id, wel.tenant, want.tenant,
             tc.name.c_str());
      const bool high = tc.priority == sched::PriorityClass::kHigh;
      if ((wel.tenant_class == ipc::TenantClass::kHigh) != high || wel.quota != static_cast<std::uint32_t>(tc.quota))
        fail("Welcome's class or quota differ from tenant '%s'", tc.name.c_str());
      auto ch = ipc::Channel::attach(a.fd);  // takes the descriptor
      if (!ch) fail("the Welcome's channel does not map: %s", ch.status().to_string().c_str());
      const ipc::ChannelHeader& h = ch->layout().header;
      if (h.client_id != wel.client_id || h.tenant_id != wel.tenant_id || h.daemon_epoch != wel.daemon_epoch ||
          wel.channel_bytes != ch->bytes())
        fail("the channel's header does not match the Welcome");
      if (((h.flags.load() & ipc::kChannelHighPriority) != 0) != high) fail("the channel's class flag is wrong");
      std::uint64_t fb[2];
      ch->read_fallback(fb);
      if ((fb[0] | fb[1]) == 0) fail("an empty fallback set");
      channel = std::make_unique<ipc::Channel>(std::move(ch).value());
      client_id = wel.client_id;
      tenant_name = tc.name;
    }
  }

  // The status, through the socket and directly, while the client (if
  // admitted) is connected.
  const nlohmann::json js = fuzz::check_status_json(w.status_over_socket(), "status request");
  fuzz::check_status_json(w.daemon().status_json(w.now()), "status_json");
  const std::size_t listed = js["clients"].size();
  if (listed != (channel ? 1U : 0U)) fail("the status lists %zu clients, expected %d", listed, channel ? 1 : 0);
  if (channel) {
    const nlohmann::json& c = js["clients"][0];
    if (c.value("id", 0U) != client_id || c.value("tenant", "") != tenant_name)
      fail("the status lists the client as %s", c.dump().c_str());
  }

  const daemon::DaemonCounters& c1 = w.daemon().counters();
  if (channel) {
    if (c1.clients_accepted != c0.clients_accepted + 1) fail("an admitted client was not counted");
    ::close(sock);
    channel.reset();
    wait_gone(w, c0.clients_gone);
  } else {
    ::close(sock);
    const std::uint64_t statuses = valid && hello.kind == ipc::HelloKind::kStatus ? 2 : 1;
    if (c1.status_requests != c0.status_requests + statuses) fail("status requests miscounted");
    if (statuses == 1 && c1.clients_refused != c0.clients_refused + 1) fail("a refusal was not counted");
  }
  if (fuzz::count_fds() != fds_before) fail("descriptor leak: %d before, %d after", fds_before, fuzz::count_fds());
  return 0;
}
