// A client of lithosd that speaks the raw protocol (src/ipc), to attack the
// daemon the ways docs/daemon.md "Hostile clients" lists, and a well-behaved
// best-effort client to measure what the attacks cost others (the
// "victim": it acts as its own GPU, writing each atom's completion marker
// itself). Used by tests/daemon/hostile_test.cpp and
// scripts/daemon/hostile_bench.py.
//
//   hostile_client SOCKET MODE [key=value ...]
//
// Keys: tenant=NAME (default ""), program=NAME ("latin1": the bytes of
// "été" in Latin-1, E9 74 E9), seconds=S (how long it attacks or holds,
// default 2), count=N, streams=N (default 1), uid=N (root only: become that
// uid first), beat=1 (refresh ChannelHeader::client_beat_ns every
// millisecond from a thread of its own), launches=N, pause_us=N, blocks=N,
// go=PATH (the victim: once registered it prints {"registered":true} and
// waits, up to 60 s, until PATH exists before its first launch).
//
// Modes (each prints JSON lines on stdout; a connection the daemon closes
// under it prints {"closed_after_s":T}):
//   hello         registers (with `program`), prints {"welcome":STATUS,"message":...}, holds `seconds`
//   submit-flood  registers, opens `streams` streams and pushes best-effort launches into its submit
//                 ring as fast as it takes them for `seconds`; never takes a grant. {"pushed":N}
//   running-flood the same with high-priority reports (kSubmitRunning) and no completion markers
//   doorbell      registers and writes one-byte packets to its socket nonstop for `seconds`, then
//                 exits. {"rang":BYTES}
//   silent        opens `count` connections and says nothing; after 300 ms prints how many were
//                 refused and with which messages, then holds `seconds`
//   many          registers `count` clients (tenant `tenant`) and prints their Welcome statuses, holds
//   hold          registers, submits `count` launches on one stream, takes every grant and never
//                 writes a completion marker; prints {"granted":N} once it has them, then holds
//   victim        registers, then `launches` launches one after another, `pause_us` apart: submits,
//                 waits for each grant (ringing the doorbell as liblithos does), writes its marker
//                 at once; prints {"victim":{...,"wait_us":{"p50":..,"p99":..,"max":..}}} and
//                 {"wait_samples_us":[...]} (every wait)
// Exit status 0; 2 for bad arguments; 3 when something it needs fails; 4
// when the victim was dropped or a grant never came.
#include <errno.h>
#include <grp.h>
#include <poll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "ipc/channel.hpp"
#include "ipc/protocol.hpp"
#include "ipc/socket.hpp"

namespace {

using namespace lithos;

std::uint64_t now_ns() {
  timespec t{};
  clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<std::uint64_t>(t.tv_sec) * 1'000'000'000ULL + static_cast<std::uint64_t>(t.tv_nsec);
}

void nap_us(std::uint64_t us) {
  const timespec t{static_cast<time_t>(us / 1'000'000), static_cast<long>((us % 1'000'000) * 1000)};
  (void)::nanosleep(&t, nullptr);
}

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "hostile_client: %s\n", what.c_str());
  std::exit(3);
}

// A JSON string literal of bytes that may not be text.
std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += ch;
    } else if (c < 0x20 || c >= 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += ch;
    }
  }
  return out + "\"";
}

struct Args {
  std::string socket, mode, tenant, program = "hostile", go;
  double seconds = 2;
  long count = 1, streams = 1, launches = 100, pause_us = 1000, blocks = 64;
  long uid = -1;
  bool beat = false;
};

// A registered client: its socket and its channel.
struct Registered {
  int sock = -1;
  ipc::Welcome welcome;
  ipc::Channel channel;
};

std::string text(const char* field, std::size_t cap) { return std::string(field, strnlen(field, cap)); }

// Connects and says Hello; the Welcome and, when accepted, the channel.
Registered hello(const Args& a, ipc::HelloKind kind = ipc::HelloKind::kClient) {
  Registered r;
  auto fd = ipc::connect_socket(a.socket, 5000);
  if (!fd) fail("connect: " + fd.status().message());
  r.sock = fd.value();
  ipc::Hello h;
  h.kind = kind;
  h.pid = static_cast<std::int32_t>(::getpid());
  std::strncpy(h.tenant, a.tenant.c_str(), sizeof h.tenant - 1);
  const std::string program = a.program == "latin1" ? std::string("\xe9t\xe9") : a.program;
  std::strncpy(h.program, program.c_str(), sizeof h.program - 1);
  if (!ipc::send_packet(r.sock, &h, sizeof h).is_ok()) fail("send Hello");
  int chfd = -1;
  auto got = ipc::recv_packet(r.sock, &r.welcome, sizeof r.welcome, &chfd, 5000);
  if (!got || got.value() != sizeof r.welcome) fail("no Welcome");
  if (chfd >= 0) {
    auto ch = ipc::Channel::attach(chfd);
    if (!ch) fail("attach: " + ch.status().message());
    r.channel = std::move(ch).value();
  }
  return r;
}

// Whether the daemon closed the connection.
bool closed(int sock) {
  pollfd p{sock, POLLIN, 0};
  if (::poll(&p, 1, 0) <= 0) return false;
  if ((p.revents & (POLLHUP | POLLERR)) != 0) return true;
  char c = 0;
  return ::recv(sock, &c, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

// Refreshes the channel's client heartbeat every millisecond while it runs.
class Beat {
 public:
  explicit Beat(ipc::ChannelLayout* l) : l_(l) {
    thread_ = std::thread([this] {
      while (!stop_.load()) {
        l_->header.client_beat_ns.store(now_ns(), std::memory_order_release);
        nap_us(1000);
      }
    });
  }
  ~Beat() {
    stop_.store(true);
    thread_.join();
  }
  Beat(const Beat&) = delete;
  Beat& operator=(const Beat&) = delete;

 private:
  ipc::ChannelLayout* l_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// Holds the connection until `deadline`, saying when the daemon closes it.
void hold_until(int sock, std::uint64_t start, std::uint64_t deadline) {
  while (now_ns() < deadline) {
    if (closed(sock)) {
      std::printf("{\"closed_after_s\":%.3f}\n", static_cast<double>(now_ns() - start) / 1e9);
      std::fflush(stdout);
      return;
    }
    nap_us(2000);
  }
}

ipc::SubmitMsg launch_msg(std::uint32_t stream, std::uint64_t seq, long blocks) {
  ipc::SubmitMsg m;
  m.type = ipc::SubmitType::kLaunch;
  m.flags = ipc::kSubmitWhole;
  m.stream = stream;
  m.seq = seq;
  m.kernel = 0x600d + stream;
  m.grid[0] = static_cast<std::uint32_t>(blocks);
  m.block[0] = 256;
  return m;
}

void open_streams(ipc::ChannelLayout& l, long streams) {
  for (long s = 0; s < streams; ++s) {
    ipc::SubmitMsg m;
    m.type = ipc::SubmitType::kStreamOpen;
    m.stream = static_cast<std::uint32_t>(s);
    while (!l.submit.push(m)) nap_us(100);
  }
}

int flood(const Args& a, bool running) {
  Registered r = hello(a);
  if (r.welcome.status != ipc::WelcomeStatus::kOk)
    fail("refused: " + text(r.welcome.message, sizeof r.welcome.message));
  ipc::ChannelLayout& l = r.channel.layout();
  const long streams = std::clamp<long>(a.streams, 1, ipc::kMaxStreams);
  open_streams(l, streams);
  std::vector<std::uint64_t> seq(static_cast<std::size_t>(streams), 0);
  const std::uint64_t start = now_ns();
  const auto end = start + static_cast<std::uint64_t>(a.seconds * 1e9);
  std::uint64_t pushed = 0, full = 0;
  bool gone = false;
  for (long s = 0; now_ns() < end; s = (s + 1) % streams) {
    ipc::SubmitMsg m = launch_msg(static_cast<std::uint32_t>(s), seq[static_cast<std::size_t>(s)] + 1, a.blocks);
    if (running) m.flags = ipc::kSubmitRunning;  // reported as running, and never marked
    if (l.submit.push(m)) {
      ++seq[static_cast<std::size_t>(s)];
      ++pushed;
      continue;
    }
    ++full;
    if ((full & 63) == 0 && closed(r.sock)) {
      gone = true;
      break;
    }
    nap_us(20);
  }
  std::printf("{\"pushed\":%llu,\"ring_full\":%llu}\n", static_cast<unsigned long long>(pushed),
              static_cast<unsigned long long>(full));
  if (gone) std::printf("{\"closed_after_s\":%.3f}\n", static_cast<double>(now_ns() - start) / 1e9);
  std::fflush(stdout);
  if (!gone) hold_until(r.sock, start, now_ns() + 30'000'000'000ULL);
  return 0;
}

int doorbell(const Args& a) {
  Registered r = hello(a);
  if (r.welcome.status != ipc::WelcomeStatus::kOk)
    fail("refused: " + text(r.welcome.message, sizeof r.welcome.message));
  const std::uint64_t start = now_ns();
  const auto end = start + static_cast<std::uint64_t>(a.seconds * 1e9);
  std::uint64_t rang = 0, full = 0;
  const char byte = 1;
  while (now_ns() < end) {
    const ssize_t n = ::send(r.sock, &byte, 1, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n == 1) {
      ++rang;
    } else if (errno == EAGAIN || errno == EWOULDBLOCK || errno == ENOBUFS) {
      ++full;
      nap_us(20);
    } else {
      std::printf("{\"closed_after_s\":%.3f}\n", static_cast<double>(now_ns() - start) / 1e9);
      break;
    }
  }
  std::printf("{\"rang\":%llu,\"socket_full\":%llu}\n", static_cast<unsigned long long>(rang),
              static_cast<unsigned long long>(full));
  std::fflush(stdout);
  return 0;  // exits while it rings: its hang-up must be seen
}

// `count` connections that never say Hello: which were refused, and why.
int silent(const Args& a) {
  std::vector<int> socks;
  long failed = 0;
  for (long i = 0; i < a.count; ++i) {
    auto fd = ipc::connect_socket(a.socket, 2000);
    if (!fd) {
      ++failed;
      continue;
    }
    socks.push_back(fd.value());
  }
  nap_us(300'000);
  long refused = 0;
  std::map<std::string, long> messages;
  for (const int s : socks) {
    ipc::Welcome w;
    auto got = ipc::recv_packet(s, &w, sizeof w, nullptr, 0);
    if (!got || got.value() != sizeof w) continue;
    ++refused;
    ++messages[std::to_string(static_cast<int>(w.status)) + ": " + text(w.message, sizeof w.message)];
  }
  std::string by;
  for (const auto& [m, n] : messages) by += (by.empty() ? "" : ",") + quoted(m) + ":" + std::to_string(n);
  std::printf("{\"connected\":%zu,\"connect_failed\":%ld,\"refused\":%ld,\"messages\":{%s}}\n", socks.size(), failed,
              refused, by.c_str());
  std::fflush(stdout);
  nap_us(static_cast<std::uint64_t>(a.seconds * 1e6));
  for (const int s : socks) ::close(s);
  return 0;
}

int many(const Args& a) {
  std::vector<Registered> held;
  std::map<std::string, long> statuses;
  for (long i = 0; i < a.count; ++i) {
    Registered r = hello(a);
    const std::string key = r.welcome.status == ipc::WelcomeStatus::kOk
                                ? std::string("ok")
                                : std::to_string(static_cast<int>(r.welcome.status)) + ": " +
                                      text(r.welcome.message, sizeof r.welcome.message);
    ++statuses[key];
    if (r.welcome.status == ipc::WelcomeStatus::kOk) {
      held.push_back(std::move(r));
    } else {
      ::close(r.sock);
    }
  }
  std::string by;
  for (const auto& [m, n] : statuses) by += (by.empty() ? "" : ",") + quoted(m) + ":" + std::to_string(n);
  std::printf("{\"registered\":%zu,\"welcomes\":{%s}}\n", held.size(), by.c_str());
  std::fflush(stdout);
  nap_us(static_cast<std::uint64_t>(a.seconds * 1e6));
  for (Registered& r : held) ::close(r.sock);
  return 0;
}

int hello_mode(const Args& a) {
  Registered r = hello(a);
  std::printf("{\"welcome\":%d,\"message\":%s}\n", static_cast<int>(r.welcome.status),
              quoted(text(r.welcome.message, sizeof r.welcome.message)).c_str());
  std::fflush(stdout);
  const std::uint64_t start = now_ns();
  hold_until(r.sock, start, start + static_cast<std::uint64_t>(a.seconds * 1e9));
  return 0;
}

// Takes its grants and never writes a marker: the atoms stay in flight.
int hold(const Args& a) {
  Registered r = hello(a);
  if (r.welcome.status != ipc::WelcomeStatus::kOk)
    fail("refused: " + text(r.welcome.message, sizeof r.welcome.message));
  ipc::ChannelLayout& l = r.channel.layout();
  std::unique_ptr<Beat> beat;
  if (a.beat) beat = std::make_unique<Beat>(&l);
  open_streams(l, 1);
  for (long i = 1; i <= a.count; ++i) {
    while (!l.submit.push(launch_msg(0, static_cast<std::uint64_t>(i), a.blocks))) nap_us(100);
  }
  const std::uint64_t start = now_ns();
  const std::uint64_t end = start + static_cast<std::uint64_t>(a.seconds * 1e9);
  long granted = 0;
  bool said = false;
  while (now_ns() < end) {
    ipc::GrantMsg g;
    while (l.grant.pop(&g)) granted += (g.flags & ipc::kGrantLast) != 0 ? 1 : 0;
    if (!said && granted >= a.count) {
      std::printf("{\"granted\":%ld}\n", granted);
      std::fflush(stdout);
      said = true;
    }
    if (closed(r.sock)) {
      std::printf("{\"granted\":%ld}\n{\"closed_after_s\":%.3f}\n", granted,
                  static_cast<double>(now_ns() - start) / 1e9);
      std::fflush(stdout);
      return 0;
    }
    nap_us(500);
  }
  if (!said) std::printf("{\"granted\":%ld}\n", granted);
  return 0;
}

double quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const auto i = static_cast<std::size_t>(q * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

// A well-behaved best-effort client that measures its grant waits: from
// when it is ready for a grant (its launch submitted, or its previous atom
// ended) to the grant's arrival.
int victim(const Args& a) {
  Registered r = hello(a);
  if (r.welcome.status != ipc::WelcomeStatus::kOk)
    fail("refused: " + text(r.welcome.message, sizeof r.welcome.message));
  ipc::ChannelLayout& l = r.channel.layout();
  const Beat beat(&l);
  open_streams(l, 1);
  if (!a.go.empty()) {
    std::printf("{\"registered\":true}\n");
    std::fflush(stdout);
    for (const std::uint64_t until = now_ns() + 60'000'000'000ULL; ::access(a.go.c_str(), F_OK) != 0;) {
      if (now_ns() > until) fail("no " + a.go + " within 60 s");
      nap_us(1000);
    }
  }
  const std::uint64_t t0 = now_ns();
  std::vector<double> waits;
  std::uint64_t seq = 0, grants = 0, bells = 0;
  bool dropped = false, lost = false;
  for (long i = 0; i < a.launches && !dropped && !lost; ++i) {
    ipc::SubmitMsg m = launch_msg(0, ++seq, a.blocks);
    while (!l.submit.push(m)) nap_us(10);
    // The doorbell, as liblithos rings it: only while the daemon sleeps.
    if ((l.header.flags.load(std::memory_order_relaxed) & ipc::kChannelDaemonIdle) != 0 &&
        (l.header.flags.fetch_and(~static_cast<std::uint32_t>(ipc::kChannelDaemonIdle)) & ipc::kChannelDaemonIdle) !=
            0) {
      const char byte = 1;
      if (::send(r.sock, &byte, 1, MSG_DONTWAIT | MSG_NOSIGNAL) == 1) ++bells;
    }
    bool last = false;
    while (!last) {
      const std::uint64_t ready = now_ns();
      ipc::GrantMsg g;
      std::uint64_t spins = 0;
      bool got = false;
      while (!(got = l.grant.pop(&g))) {
        if (++spins > 2000) nap_us(spins < 20000 ? 2 : 20);
        if ((spins & 1023) == 0 && closed(r.sock)) {
          dropped = true;
          break;
        }
        if (now_ns() - ready > 5'000'000'000ULL) {
          lost = true;
          break;
        }
      }
      if (!got) break;
      waits.push_back(static_cast<double>(now_ns() - ready) / 1e3);
      ++grants;
      // Its own GPU: the atom ends at once.
      seq = std::max(seq, g.marker);
      l.completed[0].store(g.marker, std::memory_order_release);
      last = (g.flags & ipc::kGrantLast) != 0;
    }
    if (a.pause_us > 0) nap_us(static_cast<std::uint64_t>(a.pause_us));
  }
  double mean = 0;
  for (const double w : waits) mean += w;
  mean = waits.empty() ? 0 : mean / static_cast<double>(waits.size());
  std::printf(
      "{\"victim\":{\"launches\":%ld,\"grants\":%llu,\"doorbells\":%llu,\"dropped\":%s,\"lost\":%s,\"seconds\":%.3f,"
      "\"wait_us\":{\"mean\":%.1f,\"p50\":%.1f,\"p99\":%.1f,\"max\":%.1f}}}\n",
      a.launches, static_cast<unsigned long long>(grants), static_cast<unsigned long long>(bells),
      dropped ? "true" : "false", lost ? "true" : "false", static_cast<double>(now_ns() - t0) / 1e9, mean,
      quantile(waits, 0.5), quantile(waits, 0.99), quantile(waits, 1.0));
  // Every wait, for a caller that pools several runs.
  std::string all;
  for (const double w : waits) all += (all.empty() ? "" : ",") + std::to_string(static_cast<long>(w * 10) / 10.0);
  std::printf("{\"wait_samples_us\":[%s]}\n", all.c_str());
  std::fflush(stdout);
  ::close(r.sock);
  return dropped || lost ? 4 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: hostile_client SOCKET MODE [key=value ...]\n");
    return 2;
  }
  Args a;
  a.socket = argv[1];
  a.mode = argv[2];
  for (int i = 3; i < argc; ++i) {
    const std::string kv = argv[i];
    const auto eq = kv.find('=');
    if (eq == std::string::npos) {
      std::fprintf(stderr, "hostile_client: '%s' is not key=value\n", kv.c_str());
      return 2;
    }
    const std::string k = kv.substr(0, eq), v = kv.substr(eq + 1);
    char* end = nullptr;
    const double num = std::strtod(v.c_str(), &end);
    const bool is_num = end != v.c_str() && *end == '\0';
    if (k == "tenant") {
      a.tenant = v;
    } else if (k == "program") {
      a.program = v;
    } else if (k == "go") {
      a.go = v;
    } else if (k == "beat") {
      a.beat = v == "1";
    } else if (!is_num) {
      std::fprintf(stderr, "hostile_client: %s wants a number\n", k.c_str());
      return 2;
    } else if (k == "seconds") {
      a.seconds = num;
    } else if (k == "count") {
      a.count = static_cast<long>(num);
    } else if (k == "streams") {
      a.streams = static_cast<long>(num);
    } else if (k == "uid") {
      a.uid = static_cast<long>(num);
    } else if (k == "launches") {
      a.launches = static_cast<long>(num);
    } else if (k == "pause_us") {
      a.pause_us = static_cast<long>(num);
    } else if (k == "blocks") {
      a.blocks = std::max(1L, static_cast<long>(num));
    } else {
      std::fprintf(stderr, "hostile_client: unknown key %s\n", k.c_str());
      return 2;
    }
  }
  if (a.uid >= 0) {
    // Another user (the test runs as root): groups first, then the gid and uid.
    const auto id = static_cast<uid_t>(a.uid);
    if (::setgroups(0, nullptr) != 0 || ::setgid(id) != 0 || ::setuid(id) != 0)
      fail("cannot become uid " + std::to_string(a.uid));
  }
  if (a.mode == "hello") return hello_mode(a);
  if (a.mode == "submit-flood") return flood(a, false);
  if (a.mode == "running-flood") return flood(a, true);
  if (a.mode == "doorbell") return doorbell(a);
  if (a.mode == "silent") return silent(a);
  if (a.mode == "many") return many(a);
  if (a.mode == "hold") return hold(a);
  if (a.mode == "victim") return victim(a);
  std::fprintf(stderr, "hostile_client: unknown mode %s\n", a.mode.c_str());
  return 2;
}
