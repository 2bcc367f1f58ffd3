// Channel: creation and attachment checks, and the shared memory between two
// real processes (fork): the submit ring carries every message once and in
// order, and the allocation seqlock never shows half a write.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "ipc/channel.hpp"

namespace lithos::ipc {
namespace {

// Runs `body` in a child process; the child's exit code is what body returns
// (gtest assertions are not available there). Returns the child's pid.
template <class F>
pid_t spawn(F body) {
  const pid_t pid = ::fork();
  if (pid == 0) ::_exit(body());
  return pid;
}

int wait_exit_code(pid_t pid) {
  int status = 0;
  if (::waitpid(pid, &status, 0) != pid) return -1;
  if (!WIFEXITED(status)) return 1000 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  return WEXITSTATUS(status);
}

// A memfd of `bytes` with `seals` added (-1 on failure).
int sized_memfd(std::size_t bytes, int seals) {
  const int fd = ::memfd_create("t", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return -1;
  if (::ftruncate(fd, static_cast<off_t>(bytes)) != 0 || (seals != 0 && ::fcntl(fd, F_ADD_SEALS, seals) != 0)) {
    ::close(fd);
    return -1;
  }
  return fd;
}

TEST(IpcChannel, CreateFillsHeader) {
  auto ch = Channel::create(7, 3, 0x1122334455667788ULL);
  ASSERT_TRUE(ch.is_ok()) << ch.status().to_string();
  EXPECT_TRUE(ch->valid());
  EXPECT_GE(ch->fd(), 0);
  EXPECT_EQ(ch->bytes() % 4096, 0U);
  EXPECT_GE(ch->bytes(), sizeof(ChannelLayout));
  const ChannelHeader& h = ch->layout().header;
  EXPECT_EQ(h.magic, kMagic);
  EXPECT_EQ(h.version, kVersion);
  EXPECT_EQ(h.bytes, ch->bytes());
  EXPECT_EQ(h.client_id, 7U);
  EXPECT_EQ(h.tenant_id, 3U);
  EXPECT_EQ(h.daemon_epoch, 0x1122334455667788ULL);
  EXPECT_EQ(ch->layout().submit.head.load(), 0U);
  EXPECT_EQ(ch->layout().grant.tail.load(), 0U);
  // Close-on-exec: applications exec children, who must not inherit it.
  EXPECT_NE(::fcntl(ch->fd(), F_GETFD) & FD_CLOEXEC, 0);
}

TEST(IpcChannel, CompletionPageIsItsOwnPage) {
  auto ch = Channel::create(1, 1, 1);
  ASSERT_TRUE(ch.is_ok());
  auto* base = reinterpret_cast<unsigned char*>(&ch->layout());
  auto* page = static_cast<unsigned char*>(ch->completion_page());
  EXPECT_EQ(page, reinterpret_cast<unsigned char*>(ch->layout().completed));
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(page) % 4096, 0U);
  EXPECT_EQ(Channel::completion_page_bytes(), 4096U);
  // The page ends within the mapping, and nothing else of the layout is on it.
  EXPECT_LE(static_cast<std::size_t>(page - base) + Channel::completion_page_bytes(), ch->bytes());
  EXPECT_GE(static_cast<std::size_t>(page - base), sizeof(ChannelHeader) + sizeof(ch->layout().submit));
}

TEST(IpcChannel, SizeIsSealed) {
  auto ch = Channel::create(1, 1, 1);
  ASSERT_TRUE(ch.is_ok());
  // A client holding the descriptor cannot shrink the file under the
  // daemon's mapping, nor grow it.
  EXPECT_NE(::ftruncate(ch->fd(), 4096), 0);
  EXPECT_NE(::ftruncate(ch->fd(), static_cast<off_t>(ch->bytes() * 2)), 0);
}

TEST(IpcChannel, AttachSeesTheSameMemory) {
  auto daemon = Channel::create(9, 2, 42);
  ASSERT_TRUE(daemon.is_ok());
  auto client = Channel::attach(::fcntl(daemon->fd(), F_DUPFD_CLOEXEC, 0));
  ASSERT_TRUE(client.is_ok()) << client.status().to_string();
  EXPECT_EQ(client->layout().header.client_id, 9U);
  EXPECT_EQ(client->layout().header.daemon_epoch, 42U);
  EXPECT_NE(&client->layout(), &daemon->layout());  // its own mapping
  daemon->layout().completed[5].store(1234);
  EXPECT_EQ(client->layout().completed[5].load(), 1234U);
  const std::uint64_t fb[2] = {0xf0, 0x0f};
  daemon->publish_fallback(fb);
  std::uint64_t got[2] = {};
  client->read_fallback(got);
  EXPECT_EQ(got[0], 0xf0U);
  EXPECT_EQ(got[1], 0x0fU);
  const std::uint64_t alloc[2] = {0xabc, 0xdef};
  daemon->publish_allocation(alloc);
  ASSERT_TRUE(client->read_allocation(got));
  EXPECT_EQ(got[0], 0xabcU);
  EXPECT_EQ(got[1], 0xdefU);
  ASSERT_TRUE(client->read_allocation(got, /*lasting=*/true));  // the one-set form: the same for both
  EXPECT_EQ(got[0], 0xabcU);
  EXPECT_EQ(got[1], 0xdefU);
  const std::uint64_t now_set[2] = {0x1, 0x2}, lasting[2] = {0x3, 0x4};
  daemon->publish_allocation(now_set, lasting);
  ASSERT_TRUE(client->read_allocation(got));
  EXPECT_EQ(got[0], 0x1U);
  EXPECT_EQ(got[1], 0x2U);
  ASSERT_TRUE(client->read_allocation(got, /*lasting=*/true));
  EXPECT_EQ(got[0], 0x3U);
  EXPECT_EQ(got[1], 0x4U);
  EXPECT_EQ(client->layout().header.alloc_seq.load() % 2, 0U);
}

TEST(IpcChannel, AttachRejectsWrongFiles) {
  // Not a descriptor.
  auto r = Channel::attach(-1);
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  // A pipe is not a shared-memory file.
  int p[2];
  ASSERT_EQ(::pipe2(p, O_CLOEXEC), 0);
  ::close(p[1]);
  r = Channel::attach(p[0]);
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("not a shared-memory file"), std::string::npos) << r.status().message();
  // A memfd whose sender could still shrink it (SIGBUS under the mapping):
  // no seals, or some of them only.
  for (const int seals : {0, F_SEAL_SHRINK | F_SEAL_GROW, F_SEAL_SHRINK | F_SEAL_SEAL}) {
    const int fd = sized_memfd(Channel::kBytes, seals);
    ASSERT_GE(fd, 0);
    r = Channel::attach(fd);
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << seals;
    EXPECT_NE(r.status().message().find("not sealed"), std::string::npos) << r.status().message();
  }
  // Not a memfd (a file that cannot be sealed).
  std::FILE* tmp = std::tmpfile();
  ASSERT_NE(tmp, nullptr);
  r = Channel::attach(::fcntl(::fileno(tmp), F_DUPFD_CLOEXEC, 0));
  std::fclose(tmp);
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("not a sealable memfd"), std::string::npos) << r.status().message();
  // Wrong size.
  int fd = sized_memfd(4096, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL);
  ASSERT_GE(fd, 0);
  r = Channel::attach(fd);
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("size 4096"), std::string::npos) << r.status().message();
  // Right size, zeros: no magic.
  fd = sized_memfd(Channel::kBytes, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL);
  ASSERT_GE(fd, 0);
  r = Channel::attach(fd);
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("magic 0x00000000"), std::string::npos) << r.status().message();
  // Another version.
  auto ch = Channel::create(1, 1, 1);
  ASSERT_TRUE(ch.is_ok());
  ch->layout().header.version = kVersion + 1;
  r = Channel::attach(::fcntl(ch->fd(), F_DUPFD_CLOEXEC, 0));
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("version " + std::to_string(kVersion + 1)), std::string::npos);
  // A header that disagrees about the size.
  ch->layout().header.version = kVersion;
  ch->layout().header.bytes = 4096;
  r = Channel::attach(::fcntl(ch->fd(), F_DUPFD_CLOEXEC, 0));
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("4096"), std::string::npos);
}

TEST(IpcChannel, AttachTakesOwnershipOnFailure) {
  const int fd = ::memfd_create("t", MFD_CLOEXEC);
  ASSERT_GE(fd, 0);
  EXPECT_FALSE(Channel::attach(fd).is_ok());
  EXPECT_EQ(::fcntl(fd, F_GETFD), -1);  // closed by attach
}

TEST(IpcChannel, MoveOnly) {
  auto made = Channel::create(1, 1, 1);
  ASSERT_TRUE(made.is_ok());
  Channel a = std::move(made).value();
  const int fd = a.fd();
  ChannelLayout* l = &a.layout();
  Channel b(std::move(a));
  EXPECT_FALSE(a.valid());  // NOLINT(bugprone-use-after-move): moved-from state is specified
  EXPECT_EQ(a.fd(), -1);    // NOLINT(bugprone-use-after-move)
  EXPECT_EQ(b.fd(), fd);
  EXPECT_EQ(&b.layout(), l);
  Channel c;
  EXPECT_FALSE(c.valid());
  EXPECT_EQ(c.bytes(), 0U);
  c = std::move(b);
  EXPECT_EQ(c.fd(), fd);
  { Channel d = std::move(c); }
  EXPECT_EQ(::fcntl(fd, F_GETFD), -1);  // the last owner closed it
}

// The child attaches to the inherited descriptor and pushes 200000 launches
// with increasing seq; the parent pops them: every one arrives, once, in
// order, intact.
TEST(IpcChannel, SubmitRingAcrossProcesses) {
  auto ch = Channel::create(1, 1, 1);
  ASSERT_TRUE(ch.is_ok());
  constexpr std::uint64_t kCount = 200000;
  const int fd = ch->fd();
  const pid_t child = spawn([fd] {
    auto mine = Channel::attach(fd);  // the child's copy of the descriptor
    if (!mine.is_ok()) return 2;
    auto& ring = mine->layout().submit;
    for (std::uint64_t seq = 1; seq <= kCount;) {
      SubmitMsg m;
      m.seq = seq;
      m.kernel = seq * 0x9e3779b97f4a7c15ULL;
      m.grid[0] = static_cast<std::uint32_t>(seq);
      if (ring.push(m)) {
        ++seq;
      } else {
        ::sched_yield();
      }
    }
    return 0;
  });
  ASSERT_GT(child, 0);
  auto& ring = ch->layout().submit;
  std::uint64_t want = 1;
  bool corrupt = false;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (want <= kCount && std::chrono::steady_clock::now() < deadline) {
    SubmitMsg m;
    if (!ring.pop(&m, &corrupt)) {
      ASSERT_FALSE(corrupt);
      ::sched_yield();
      continue;
    }
    ASSERT_EQ(m.seq, want);
    ASSERT_EQ(m.kernel, want * 0x9e3779b97f4a7c15ULL);
    ASSERT_EQ(m.grid[0], static_cast<std::uint32_t>(want));
    ++want;
  }
  EXPECT_EQ(want, kCount + 1);
  EXPECT_EQ(wait_exit_code(child), 0);
  SubmitMsg extra;
  EXPECT_FALSE(ring.pop(&extra, &corrupt));  // no duplicate after the last
  EXPECT_FALSE(corrupt);
}

// The child publishes (x, ~x) as fast as it can; the parent reads. A torn
// read would show words that are not each other's complement.
TEST(IpcChannel, AllocationSeqlockNeverTorn) {
  auto ch = Channel::create(1, 1, 1);
  ASSERT_TRUE(ch.is_ok());
  const std::uint64_t first[2] = {0, ~std::uint64_t{0}};
  ch->publish_allocation(first);
  // The child runs until the parent's stop flag (completed[0]) is set.
  const int fd = ch->fd();
  const pid_t child = spawn([fd] {
    auto mine = Channel::attach(fd);
    if (!mine.is_ok()) return 2;
    for (std::uint64_t x = 1; mine->layout().completed[0].load(std::memory_order_acquire) == 0; ++x) {
      const std::uint64_t w[2] = {x, ~x};
      mine->publish_allocation(w);
    }
    return 0;
  });
  ASSERT_GT(child, 0);
  // Reads for 1.5 s, and on until the writer has been seen to move
  // kChanges times: on a loaded machine the two processes may seldom run at
  // once, so how many values a second shows is not asserted. The deadline
  // only matters when the writer never runs.
  constexpr std::uint64_t kChanges = 100;
  std::uint64_t reads = 0, stable = 0, last = 0, changes = 0;
  const auto start = std::chrono::steady_clock::now();
  const auto min_end = start + std::chrono::milliseconds(1500);
  const auto deadline = start + std::chrono::seconds(60);
  for (auto now = start; now < deadline && (now < min_end || changes < kChanges);
       now = std::chrono::steady_clock::now()) {
    std::uint64_t w[2];
    ++reads;
    if (!ch->read_allocation(w)) continue;
    ++stable;
    ASSERT_EQ(w[1], ~w[0]) << "torn read after " << stable << " stable reads";
    if (w[0] != last) ++changes;
    last = w[0];
  }
  ch->layout().completed[0].store(1, std::memory_order_release);
  EXPECT_EQ(wait_exit_code(child), 0);
  EXPECT_GT(stable, 0U);
  EXPECT_GE(changes, kChanges);  // the reader read while the writer wrote
  std::printf("seqlock: %llu reads, %llu stable, %llu distinct values seen\n", static_cast<unsigned long long>(reads),
              static_cast<unsigned long long>(stable), static_cast<unsigned long long>(changes));
}

// A sequence left odd (a peer scribbling on it, or a writer that died
// half-way) makes readers give up rather than spin; the next publish
// recovers.
TEST(IpcChannel, AllocationOddSequence) {
  auto ch = Channel::create(1, 1, 1);
  ASSERT_TRUE(ch.is_ok());
  ch->layout().header.alloc_seq.store(5);
  std::uint64_t w[2];
  EXPECT_FALSE(ch->read_allocation(w));
  const std::uint64_t a[2] = {3, 4};
  ch->publish_allocation(a);
  EXPECT_EQ(ch->layout().header.alloc_seq.load() % 2, 0U);
  EXPECT_GT(ch->layout().header.alloc_seq.load(), 5U);
  ASSERT_TRUE(ch->read_allocation(w));
  EXPECT_EQ(w[0], 3U);
  EXPECT_EQ(w[1], 4U);
}

// The right-sizing table: what the daemon puts, the client reads by kernel
// and grid; a changed count replaces the entry in place; a key not put
// reads 0 (the whole allocation).
TEST(IpcSizeTable, WriterAndReader) {
  auto ch = Channel::create(1, 1, 1);
  ASSERT_TRUE(ch.is_ok());
  SizeTableWriter w;
  const std::uint32_t g[3] = {20, 1, 1};
  const std::uint32_t other[3] = {20, 2, 1};
  EXPECT_EQ(ch->read_size(7, g), 0U);
  ASSERT_TRUE(w.put(*ch, SizeEntry{7, {20, 1, 1}, 2}));
  EXPECT_EQ(ch->read_size(7, g), 2U);
  EXPECT_EQ(ch->read_size(7, other), 0U);  // another grid: another key
  EXPECT_EQ(ch->read_size(8, g), 0U);
  ASSERT_TRUE(w.put(*ch, SizeEntry{7, {20, 1, 1}, 5}));
  EXPECT_EQ(ch->read_size(7, g), 5U);
  EXPECT_EQ(w.used(), 1U);
  // The client's view through its own mapping of the same memfd.
  auto mine = Channel::attach(::dup(ch->fd()));
  ASSERT_TRUE(mine.is_ok());
  EXPECT_EQ(mine->read_size(7, g), 5U);
  // A slot left odd (a writer stopped half-way, or a scribbling peer): no
  // entry, never a half-written one.
  const std::uint32_t home = size_slot_home(7, g);
  ch->layout().sizes[home].seq.fetch_add(1);
  EXPECT_EQ(ch->read_size(7, g), 0U);
  ASSERT_TRUE(w.put(*ch, SizeEntry{7, {20, 1, 1}, 6}));  // the next write recovers
  EXPECT_EQ(ch->read_size(7, g), 6U);
}

// Keys sharing a home fill its window (kSizeWindow slots); one more is
// refused and counted, reads 0, and leaves every other entry as it was.
TEST(IpcSizeTable, FullWindow) {
  auto ch = Channel::create(1, 1, 1);
  ASSERT_TRUE(ch.is_ok());
  SizeTableWriter w;
  // Kernels whose key has home 0 (found by search: the hash is fixed).
  std::vector<std::uint64_t> same_home;
  const std::uint32_t g[3] = {1, 1, 1};
  for (std::uint64_t k = 1; same_home.size() < kSizeWindow + 1; ++k) {
    if (size_slot_home(k, g) == 0) same_home.push_back(k);
  }
  for (std::uint32_t i = 0; i < kSizeWindow; ++i) {
    ASSERT_TRUE(w.put(*ch, SizeEntry{same_home[i], {1, 1, 1}, i + 1})) << i;
  }
  EXPECT_FALSE(w.put(*ch, SizeEntry{same_home[kSizeWindow], {1, 1, 1}, 3}));
  EXPECT_EQ(w.full(), 1U);
  EXPECT_EQ(ch->read_size(same_home[kSizeWindow], g), 0U);
  for (std::uint32_t i = 0; i < kSizeWindow; ++i) EXPECT_EQ(ch->read_size(same_home[i], g), i + 1) << i;
  // Other homes still have room, and a known key can still be changed.
  const std::uint32_t g2[3] = {3, 1, 1};
  std::uint64_t elsewhere = 1;
  while (size_slot_home(elsewhere, g2) < kSizeWindow) ++elsewhere;
  EXPECT_TRUE(w.put(*ch, SizeEntry{elsewhere, {3, 1, 1}, 9}));
  EXPECT_EQ(ch->read_size(elsewhere, g2), 9U);
  EXPECT_TRUE(w.put(*ch, SizeEntry{same_home[0], {1, 1, 1}, 40}));
  EXPECT_EQ(ch->read_size(same_home[0], g), 40U);
}

// One slot rewritten without pause by another process, every field from
// one counter: a reader never sees fields of two writes.
TEST(IpcSizeTable, SlotSeqlockNeverTorn) {
  auto ch = Channel::create(1, 1, 1);
  ASSERT_TRUE(ch.is_ok());
  write_size_slot(ch->layout().sizes[3], SizeEntry{0, {0, ~0U, 0x5555U}, 0});
  const int fd = ch->fd();
  const pid_t child = spawn([fd] {
    auto mine = Channel::attach(fd);
    if (!mine.is_ok()) return 2;
    for (std::uint32_t x = 1; mine->layout().completed[0].load(std::memory_order_acquire) == 0; ++x) {
      write_size_slot(mine->layout().sizes[3], SizeEntry{x, {x, ~x, x ^ 0x5555U}, x * 3U});
    }
    return 0;
  });
  ASSERT_GT(child, 0);
  constexpr std::uint64_t kChanges = 100;
  std::uint64_t stable = 0, changes = 0, last = 0;
  const auto start = std::chrono::steady_clock::now();
  const auto min_end = start + std::chrono::milliseconds(1500);
  const auto deadline = start + std::chrono::seconds(60);
  for (auto now = start; now < deadline && (now < min_end || changes < kChanges);
       now = std::chrono::steady_clock::now()) {
    SizeEntry e;
    if (!read_size_slot(ch->layout().sizes[3], &e)) continue;
    ++stable;
    const auto x = static_cast<std::uint32_t>(e.kernel);
    if (e.grid[0] != x || e.grid[1] != ~x || e.grid[2] != (x ^ 0x5555U) || e.tpcs != x * 3U) {
      ADD_FAILURE() << "torn after " << stable << " stable reads: kernel " << x << ", grid " << e.grid[0] << " "
                    << e.grid[1] << " " << e.grid[2] << ", tpcs " << e.tpcs;
      break;
    }
    if (e.kernel != last) ++changes;
    last = e.kernel;
  }
  ch->layout().completed[0].store(1, std::memory_order_release);  // the writer stops in any case
  EXPECT_EQ(wait_exit_code(child), 0);
  EXPECT_GE(changes, kChanges);
}

}  // namespace
}  // namespace lithos::ipc
