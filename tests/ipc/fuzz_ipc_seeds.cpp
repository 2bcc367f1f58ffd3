// Writes the seeds of fuzz_ipc: streams of raw SubmitMsg that a well-behaved
// client could send, so that the fuzzer's mutations (a flipped bit, a field
// set to a boundary value, a duplicated or dropped message) land next to the
// validator's rules rather than far from all of them.
//
//   fuzz_ipc_seeds DIR   -> DIR/{basic,clusters,streams}.bin
#include <cstdio>
#include <string>
#include <vector>

#include "ipc/protocol.hpp"

namespace {

using namespace lithos::ipc;

SubmitMsg control(SubmitType t, std::uint32_t stream) {
  SubmitMsg m;
  m.type = t;
  m.stream = stream;
  return m;
}

SubmitMsg launch(std::uint32_t stream, std::uint64_t seq, std::uint32_t gx, std::uint32_t bx) {
  SubmitMsg m;
  m.type = SubmitType::kLaunch;
  m.stream = stream;
  m.seq = seq;
  m.kernel = 0x1234567800000000ULL + seq;
  m.grid[0] = gx;
  m.block[0] = bx;
  m.regs = 32;
  return m;
}

bool write(const std::string& path, const std::vector<SubmitMsg>& msgs) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return false;
  const bool ok = std::fwrite(msgs.data(), sizeof(SubmitMsg), msgs.size(), f) == msgs.size();
  return std::fclose(f) == 0 && ok;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];

  // One stream: open, launches of every flag, a sync, close, goodbye.
  std::vector<SubmitMsg> basic{control(SubmitType::kStreamOpen, 0)};
  std::uint64_t seq = 0;
  static constexpr std::uint16_t kFlags[] = {0, 1, 2, 4, 8, 5};
  for (const std::uint16_t flags : kFlags) {
    SubmitMsg m = launch(0, ++seq, 132 * (1U + flags), 256);
    m.flags = flags;
    m.unit = 4;
    m.smem = 48 * 1024;
    basic.push_back(m);
  }
  {
    SubmitMsg m = launch(0, ++seq, 1, 1);  // a be graph pinned to TPCs 0-65
    m.flags = kSubmitGraph | kSubmitWhole;
    set_pinned_tpcs(m, ~0ULL, 0x3);
    basic.push_back(m);
  }
  basic.push_back(control(SubmitType::kSync, 0));
  basic.push_back(launch(0, ++seq, 1, 1024));
  basic.push_back(control(SubmitType::kStreamClose, 0));
  basic.push_back(control(SubmitType::kGoodbye, 0));

  // Cluster launches at the limits: 16 blocks, 3-D grids, unit = clusters.
  std::vector<SubmitMsg> clusters{control(SubmitType::kStreamOpen, 1)};
  seq = 0;
  static constexpr std::uint8_t kClusterX[] = {1, 2, 4, 8, 16};
  for (const std::uint8_t cx : kClusterX) {
    SubmitMsg m = launch(1, ++seq, 64U * cx, 128);
    m.grid[1] = 4;
    m.block[1] = 8;
    m.cluster[0] = cx;
    m.unit = cx;
    m.smem = 228 * 1024;
    clusters.push_back(m);
  }
  SubmitMsg big = launch(1, ++seq, 1U << 20, 32);
  big.grid[1] = 1U << 20;  // 2^40 blocks exactly
  big.block[1] = 32;       // 1024 threads exactly
  clusters.push_back(big);

  // Several streams interleaved, with gaps in seq and a reopened slot.
  std::vector<SubmitMsg> streams;
  for (std::uint32_t s : {0U, 1U, 255U}) streams.push_back(control(SubmitType::kStreamOpen, s));
  for (std::uint64_t i = 1; i <= 8; ++i) {
    for (std::uint32_t s : {0U, 1U, 255U}) streams.push_back(launch(s, i * 3 + s % 2, 8, 64));
  }
  streams.push_back(control(SubmitType::kStreamClose, 1));
  streams.push_back(control(SubmitType::kStreamOpen, 1));
  streams.push_back(launch(1, 1, 2, 2));

  if (!write(dir + "/basic.bin", basic) || !write(dir + "/clusters.bin", clusters) ||
      !write(dir + "/streams.bin", streams)) {
    std::perror("fuzz_ipc_seeds");
    return 1;
  }
  return 0;
}
