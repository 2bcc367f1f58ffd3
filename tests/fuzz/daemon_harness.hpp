// What the lithosd fuzz targets (fuzz_hello.cpp, fuzz_daemon.cpp) share: a
// real Daemon in this process, listening in a private temporary folder and
// stepped on a clock the target drives (Daemon::step(now)), clients that
// talk to it over real connections (ipc::connect_socket, send_packet,
// recv_packet) and channels (ipc::Channel::attach of the descriptor the
// Welcome brings), and the checks every target makes (the status JSON is
// valid JSON and valid UTF-8, no descriptor outlives an input).
//
// A failed check prints what broke and aborts, which both drivers (libFuzzer
// and tests/fuzz/fuzz_main.cpp) report as a crash with the input saved.
#pragma once

#include <dirent.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "daemon/config.hpp"
#include "daemon/daemon.hpp"
#include "ipc/channel.hpp"
#include "ipc/protocol.hpp"
#include "ipc/socket.hpp"

namespace lithos::fuzz {

[[noreturn]] inline void fail(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
inline void fail(const char* fmt, ...) {
  std::va_list ap;
  va_start(ap, fmt);
  std::fputs("fuzz: ", stderr);
  std::vfprintf(stderr, fmt, ap);
  std::fputc('\n', stderr);
  va_end(ap);
  std::abort();
}

// Open descriptors of this process (a leak check around each input).
inline int count_fds() {
  DIR* d = ::opendir("/proc/self/fd");
  if (d == nullptr) fail("cannot list /proc/self/fd");
  int n = 0;
  while (const dirent* e = ::readdir(d)) {
    if (e->d_name[0] != '.') ++n;
  }
  ::closedir(d);
  return n - 1;  // the listing's own descriptor
}

// Well-formed UTF-8 (RFC 3629: no overlong forms, no surrogates, at most
// U+10FFFF), checked here independently of the JSON parser.
inline bool valid_utf8(std::string_view s) {
  std::size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      ++i;
      continue;
    }
    std::size_t n = 0;
    std::uint32_t cp = 0, min = 0;
    if ((c & 0xe0) == 0xc0) {
      n = 1, cp = c & 0x1fU, min = 0x80;
    } else if ((c & 0xf0) == 0xe0) {
      n = 2, cp = c & 0x0fU, min = 0x800;
    } else if ((c & 0xf8) == 0xf0) {
      n = 3, cp = c & 0x07U, min = 0x10000;
    } else {
      return false;
    }
    if (s.size() - i <= n) return false;
    for (std::size_t k = 1; k <= n; ++k) {
      const auto cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xc0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3fU);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
    i += n + 1;
  }
  return true;
}

// The status JSON (from Daemon::status_json or a kStatus Hello): valid
// UTF-8, parses, and has the schema's top-level fields.
inline nlohmann::json check_status_json(const std::string& text, const char* where) {
  if (!valid_utf8(text)) fail("%s: the status JSON is not valid UTF-8: %s", where, text.c_str());
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const std::exception& e) {
    fail("%s: the status JSON does not parse (%s): %s", where, e.what(), text.c_str());
  }
  if (!j.is_object() || j.value("schema", "") != "lithos.status/1" || !j.contains("tenants") ||
      !j["tenants"].is_array() || !j.contains("clients") || !j["clients"].is_array() || !j.contains("counters"))
    fail("%s: the status JSON lacks its schema's fields: %s", where, text.c_str());
  return j;
}

inline ipc::Hello make_hello(ipc::HelloKind kind, std::string_view tenant, std::string_view program) {
  ipc::Hello h;
  h.kind = kind;
  h.pid = static_cast<std::int32_t>(::getpid());
  std::memcpy(h.tenant, tenant.data(), std::min(tenant.size(), sizeof h.tenant - 1));
  std::memcpy(h.program, program.data(), std::min(program.size(), sizeof h.program - 1));
  return h;
}

// A Daemon in a private folder, on a clock that only step() advances.
class DaemonUnderTest {
 public:
  // `config_toml`: a configuration file's text; "@SOCKET@" in it is
  // replaced by the socket's path.
  explicit DaemonUnderTest(std::string config_toml) {
    char tmpl[] = "/tmp/lithos-fuzz-XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) fail("mkdtemp failed");
    dir_ = tmpl;
    socket_ = dir_ + "/lithosd.sock";
    for (std::size_t at; (at = config_toml.find("@SOCKET@")) != std::string::npos;) config_toml.replace(at, 8, socket_);
    auto cfg = daemon::parse_config(config_toml, "fuzz.toml");
    if (!cfg) fail("the fuzz configuration does not parse: %s", cfg.status().to_string().c_str());
    if (Status s = daemon::validate(*cfg, sched::DeviceShape::h100_sxm().tpcs); !s.is_ok())
      fail("the fuzz configuration is not valid: %s", s.to_string().c_str());
    config_ = *cfg;
    daemon::DaemonOptions o;
    o.config = *cfg;
    o.device = device();
    o.gpu_uuid = "GPU-00000000-1111-2222-3333-444444444444";
    auto d = daemon::Daemon::create(std::move(o));
    if (!d) fail("Daemon::create: %s", d.status().to_string().c_str());
    daemon_ = std::move(d).value();
    now_ = daemon::Daemon::now_ns();
  }
  ~DaemonUnderTest() {
    daemon_.reset();
    ::unlink(socket_.c_str());
    ::unlink((socket_ + ".lock").c_str());
    ::rmdir(dir_.c_str());
  }
  DaemonUnderTest(const DaemonUnderTest&) = delete;
  DaemonUnderTest& operator=(const DaemonUnderTest&) = delete;

  // An H100's shape with eight GPCs of eight TPCs and two TPCs of their own
  // (cluster launches then get widened within a GPC rather than the GPU).
  static sched::DeviceShape device() {
    sched::DeviceShape dev = sched::DeviceShape::h100_sxm();
    auto topo = sched::Topology::parse("0-7;8-15;16-23;24-31;32-39;40-47;48-55;56-63;64;65", dev.tpcs);
    if (!topo) fail("topology: %s", topo.status().to_string().c_str());
    dev.topology = *topo;
    return dev;
  }

  daemon::Daemon& daemon() { return *daemon_; }
  const daemon::Daemon& daemon() const { return *daemon_; }
  const daemon::DaemonConfig& config() const { return config_; }
  const std::string& socket() const { return socket_; }
  std::uint64_t now() const { return now_; }

  // One turn of the daemon's loop `dt_ns` after the last, then on_turn.
  bool step(std::uint64_t dt_ns) {
    now_ += dt_ns;
    const bool any = daemon_->step(now_);
    if (on_turn) on_turn();
    return any;
  }
  // Called after every turn (a target's checks).
  std::function<void()> on_turn;
  // A turn late enough for the daemon to look at its sockets (it does once
  // a millisecond): new connections, Hellos, closed clients.
  bool socket_turn() { return step(1'100'000); }

  // A blocking connection to the daemon (it accepts at its next socket turn).
  int connect() {
    auto fd = ipc::connect_socket(socket_, 1000);
    if (!fd) fail("connect_socket: %s", fd.status().to_string().c_str());
    return *fd;
  }

  // What came back on `sock` within `turns` socket turns: a packet (and the
  // descriptor that came with it), or the daemon's close. With `patient`,
  // one more turn after the Hello timeout (DaemonOptions::hello_timeout_ns)
  // is allowed. Fails when nothing came: every connection is answered or
  // closed.
  struct Answer {
    bool closed = false;
    std::vector<std::uint8_t> bytes;
    int fd = -1;
  };
  Answer await_answer(int sock, int turns = 4, bool patient = false) {
    std::vector<std::uint8_t>& buf = buf_;
    for (int t = 0; t < turns + (patient ? 1 : 0); ++t) {
      if (t < turns) {
        socket_turn();
      } else {
        step(daemon::DaemonOptions{}.hello_timeout_ns);
      }
      int passed = -1;
      auto got = ipc::recv_packet(sock, buf.data(), buf.size(), &passed, 0);
      if (got.is_ok()) {
        Answer a;
        a.closed = *got == 0;
        a.bytes.assign(buf.begin(), buf.begin() + static_cast<std::ptrdiff_t>(*got));
        a.fd = passed;
        return a;
      }
      if (passed >= 0) ::close(passed);
      if (got.status().code() != StatusCode::kUnavailable) fail("recv_packet: %s", got.status().to_string().c_str());
    }
    fail("the daemon neither answered nor closed a connection within %d turns%s", turns,
         patient ? " and the Hello timeout" : "");
  }

  // The status through the socket, as `lithos status --json` asks for it.
  std::string status_over_socket() {
    const int sock = connect();
    const ipc::Hello h = make_hello(ipc::HelloKind::kStatus, "", "lithos");
    if (Status s = ipc::send_packet(sock, &h, sizeof h); !s.is_ok()) fail("send_packet: %s", s.to_string().c_str());
    Answer a = await_answer(sock);
    ::close(sock);
    if (a.fd >= 0) fail("a status answer came with a descriptor");
    if (a.closed) fail("the daemon closed a status request without an answer");
    return std::string(a.bytes.begin(), a.bytes.end());
  }

 private:
  std::string dir_, socket_;
  daemon::DaemonConfig config_;
  std::unique_ptr<daemon::Daemon> daemon_;
  std::uint64_t now_ = 0;
  std::vector<std::uint8_t> buf_ = std::vector<std::uint8_t>(1 << 20);  // what recv_packet reads into
};

}  // namespace lithos::fuzz
