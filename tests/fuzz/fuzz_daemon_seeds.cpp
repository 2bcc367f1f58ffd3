// Writes the seed inputs of fuzz_hello and fuzz_daemon into OUT/fuzz_hello
// and OUT/fuzz_daemon (run at build time, so that the seeds follow the
// protocol's layout as it changes):
//
//   fuzz_daemon_seeds OUT
//
// fuzz_hello: Hellos for each tenant of its configuration, by name, by
// match rule and by default, refused and unknown tenants, a status request,
// a bad magic number. fuzz_daemon: action sequences in the format
// fuzz_daemon.cpp reads (four settings bytes, then an opcode byte per
// action, its client in bits 4-6, and the action's operands).
#include <sys/stat.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "ipc/protocol.hpp"

namespace {

using Bytes = std::vector<std::uint8_t>;

bool write_file(const std::string& path, const void* data, std::size_t n) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return false;
  const bool ok = std::fwrite(data, 1, n, f) == n;
  return std::fclose(f) == 0 && ok;
}

lithos::ipc::Hello hello(lithos::ipc::HelloKind kind, const char* tenant, const char* program) {
  lithos::ipc::Hello h;
  h.kind = kind;
  h.pid = 1234;
  std::strncpy(h.tenant, tenant, sizeof h.tenant - 1);
  std::strncpy(h.program, program, sizeof h.program - 1);
  return h;
}

// fuzz_daemon's opcodes (fuzz_daemon.cpp, Run::action).
enum Op : std::uint8_t {
  kConnect = 0,
  kOpen = 1,
  kClose = 2,
  kLaunch = 3,
  kSync = 4,
  kGpu = 5,
  kPop = 6,
  kTime = 7,
  kGoodbye = 8,
  kCrash = 9,
  kTracker = 10,
  kDoorbell = 11,
  kBurst = 12,
  kStale = 13,
};

class Script {
 public:
  explicit Script(std::initializer_list<std::uint8_t> settings) : b_(settings) {}
  Script& op(Op o, int client, std::initializer_list<std::uint8_t> args = {}) {
    b_.push_back(static_cast<std::uint8_t>(o | (client << 4)));
    b_.insert(b_.end(), args);
    return *this;
  }
  // A launch: grid, block, cluster and flag bytes (fuzz_daemon.cpp, shape()).
  Script& launch(int client, std::uint8_t stream, std::uint8_t g, std::uint8_t bl, std::uint8_t cl, std::uint8_t fl) {
    return op(kLaunch, client, {stream, g, bl, cl, fl});
  }
  const Bytes& bytes() const { return b_; }

 private:
  Bytes b_;
};

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT\n", argv[0]);
    return 2;
  }
  const std::string out = argv[1];
  for (const std::string& d : {out, out + "/fuzz_hello", out + "/fuzz_daemon"}) ::mkdir(d.c_str(), 0755);
  bool ok = true;

  using lithos::ipc::HelloKind;
  struct Named {
    const char* name;
    lithos::ipc::Hello h;
  };
  std::vector<Named> hellos = {
      {"client-svc", hello(HelloKind::kClient, "svc", "server")},
      {"client-train", hello(HelloKind::kClient, "train", "python3")},
      {"client-default", hello(HelloKind::kClient, "", "a.out")},
      {"client-match-serve", hello(HelloKind::kClient, "", "serve_model")},
      {"client-match-py", hello(HelloKind::kClient, "", "train.py")},
      {"client-refused", hello(HelloKind::kClient, "batch", "batch")},
      {"client-unknown", hello(HelloKind::kClient, "nobody", "x")},
      {"client-mps", hello(HelloKind::kClient, "svc-group", "infer1")},
      {"status", hello(HelloKind::kStatus, "", "lithos")},
      {"bad-magic", hello(HelloKind::kClient, "svc", "server")},
  };
  hellos[7].h.flags = lithos::ipc::kHelloMpsKnown | lithos::ipc::kHelloMpsClient;
  hellos[9].h.magic = 0x4c495449;
  for (const Named& n : hellos) {
    ok = write_file(out + "/fuzz_hello/" + n.name + ".bin", &n.h, sizeof n.h) && ok;
  }

  std::vector<std::pair<const char*, Script>> scripts;
  {  // One best-effort client alone: it runs free, then is granted.
    Script s({0x04, 20, 10, 0});
    s.op(kConnect, 0, {2}).op(kOpen, 0, {0}).op(kOpen, 0, {1});
    for (int i = 0; i < 6; ++i) {
      s.launch(0, 0, static_cast<std::uint8_t>(9 + i), 0x04, 0, 0).launch(0, 1, 12, 0x05, 0, 0x20);
      s.op(kPop, 0, {0}).op(kGpu, 0, {0, 4}).op(kGpu, 0, {1, 4}).op(kTime, 0, {3});
    }
    s.op(kSync, 0, {0}).op(kClose, 0, {1}).op(kGoodbye, 0);
    scripts.emplace_back("be-alone", s);
  }
  {  // A service (hp, reports running launches) beside a trainer (be, grants).
    Script s({0x00, 30, 0, 0});
    s.op(kConnect, 0, {0}).op(kConnect, 0, {2}).op(kOpen, 0, {0}).op(kOpen, 1, {0});
    for (int i = 0; i < 8; ++i) {
      s.launch(0, 0, 9, 0x04, 0, 0x80).launch(1, 0, 13, 0x05, 0, 0).op(kPop, 1, {0});
      s.op(kTime, 0, {2}).op(kGpu, 0, {0, 2}).op(kGpu, 1, {0, 3}).op(kTracker, 0, {0}).op(kGpu, 0, {0, 1});
    }
    s.op(kCrash, 1).op(kGoodbye, 0);
    scripts.emplace_back("hp-and-be", s);
  }
  {  // Two services with quotas, pausing best effort (true, auto), two trainers.
    Script s({0x00, 20, 20, 7});
    s.op(kConnect, 0, {0}).op(kConnect, 0, {1}).op(kConnect, 0, {2}).op(kConnect, 0, {3});
    for (int c = 0; c < 4; ++c) s.op(kOpen, c, {0});
    for (int i = 0; i < 10; ++i) {
      s.launch(0, 0, 8, 0x04, 0, 0x80).launch(1, 0, 7, 0x03, 0, 0x80);
      s.launch(2, 0, 14, 0x06, 0, 0).launch(3, 0, 11, 0x04, 0, 0x20);
      s.op(kPop, 2, {0}).op(kPop, 3, {0}).op(kTime, 0, {static_cast<std::uint8_t>(i % 6)});
      for (int c = 0; c < 4; ++c) s.op(kGpu, c, {0, 2});
    }
    scripts.emplace_back("two-services", s);
  }
  {  // Cluster and cooperative launches of a trainer beside a service.
    Script s({0x00, 16, 8, 0});
    s.op(kConnect, 0, {0}).op(kConnect, 0, {2}).op(kOpen, 0, {0}).op(kOpen, 1, {0});
    for (int i = 0; i < 6; ++i) {
      s.launch(0, 0, 9, 0x04, 0, 0x80);
      s.launch(1, 0, 10, 0x04, static_cast<std::uint8_t>(4 + i % 4), 0x20);  // clusters of 2..16
      s.launch(1, 0, 4, 0x05, 0, 0x01);                                      // cooperative
      s.op(kPop, 1, {0}).op(kTime, 0, {1}).op(kGpu, 0, {0, 1}).op(kGpu, 1, {0, 4});
    }
    scripts.emplace_back("clusters", s);
  }
  {  // CUDA graphs: whole, and pinned to TPCs 10-29.
    Script s({0x00, 24, 0, 0});
    s.op(kConnect, 0, {0}).op(kConnect, 0, {3}).op(kOpen, 0, {0}).op(kOpen, 1, {0});
    for (int i = 0; i < 6; ++i) {
      s.launch(0, 0, 0, 0x04, 0, 0x84);
      s.launch(1, 0, 0, 0x04, 0, 0x04);
      s.op(kLaunch, 1, {0, 0, 0x04, 0, 0x0c, 10, 19});
      s.op(kPop, 1, {0}).op(kTime, 0, {2}).op(kGpu, 0, {0, 1}).op(kGpu, 1, {0, 2});
    }
    scripts.emplace_back("graphs", s);
  }
  {  // Clients come and go, streams open and close, slots are reused.
    Script s({0x00, 10, 10, 2});
    for (int r = 0; r < 4; ++r) {
      s.op(kConnect, 0, {static_cast<std::uint8_t>(r)}).op(kConnect, 0, {2});
      s.op(kOpen, 0, {0}).op(kOpen, 1, {0}).op(kOpen, 1, {0x85});
      s.op(kBurst, 1, {0, 40, 12, 0x04, 0, 0}).op(kBurst, 0, {0, 20, 3, 0x04, 0, 0x80});
      s.op(kDoorbell, 1).op(kPop, 1, {7}).op(kGpu, 1, {0, 3}).op(kStale, 1, {0, 2});
      s.op(kClose, 1, {0}).op(kOpen, 1, {0}).op(kSync, 0, {0}).op(kTime, 0, {8});
      s.op(kCrash, 1).op(kGoodbye, 0);
    }
    scripts.emplace_back("churn", s);
  }
  for (const auto& [name, script] : scripts) {
    ok = write_file(out + "/fuzz_daemon/" + name + ".bin", script.bytes().data(), script.bytes().size()) && ok;
  }
  if (!ok) std::fprintf(stderr, "fuzz_daemon_seeds: cannot write into %s\n", out.c_str());
  return ok ? 0 : 1;
}
