#include "ipc/channel.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <new>
#include <string>
#include <type_traits>

namespace lithos::ipc {

// Both processes operate on the same atomics: they must be real lock-free
// instructions, not a lock inside one process's libatomic.
static_assert(std::atomic<std::uint64_t>::is_always_lock_free);
static_assert(std::atomic<std::uint32_t>::is_always_lock_free);
static_assert(std::is_trivially_copyable_v<SubmitMsg> && std::is_trivially_copyable_v<GrantMsg>);
// The completion slots are the last member, aligned to a page, and fit in
// it: the page holds nothing else (see Channel::kCompletionPageBytes).
static_assert(alignof(ChannelLayout) == Channel::kCompletionPageBytes);
static_assert(sizeof(ChannelLayout::completed) <= Channel::kCompletionPageBytes);
static_assert(Channel::kBytes == sizeof(ChannelLayout));
static_assert(Channel::kBytes <= UINT32_MAX, "ChannelHeader::bytes is 32 bits");

namespace {

// strerror_r, not strerror: liblithos.so calls this from the application's
// threads. (GNU strerror_r returns the text, in `buf` or a static string.)
std::string errno_text(const char* what, int err) {
  char buf[128];
  return std::string(what) + ": " + ::strerror_r(err, buf, sizeof buf);
}

std::string hex(std::uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

// How often a reader retries an odd or changing seqlock before giving up. The
// writer's critical section is three stores; a reader that loses this many
// times in a row is facing a writer that stopped half-way (or a peer that
// writes the sequence itself).
constexpr int kSeqlockTries = 1000;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

}  // namespace

Channel::~Channel() { reset(); }

Channel::Channel(Channel&& other) noexcept : fd_(other.fd_), layout_(other.layout_) {
  other.fd_ = -1;
  other.layout_ = nullptr;
}

Channel& Channel::operator=(Channel&& other) noexcept {
  if (this != &other) {
    reset();
    fd_ = other.fd_;
    layout_ = other.layout_;
    other.fd_ = -1;
    other.layout_ = nullptr;
  }
  return *this;
}

void Channel::reset() {
  if (layout_ != nullptr) ::munmap(layout_, kBytes);
  if (fd_ >= 0) ::close(fd_);
  layout_ = nullptr;
  fd_ = -1;
}

void Channel::close_fd() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

Result<Channel> Channel::create(std::uint32_t client_id, std::uint32_t tenant_id, std::uint64_t epoch) {
  const int fd = ::memfd_create("lithos-channel", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return Status::unavailable(errno_text("memfd_create", errno));
  // From here `ch` owns the descriptor (and later the mapping): every early
  // return releases them.
  Channel ch(fd, nullptr);
  if (::ftruncate(fd, static_cast<off_t>(kBytes)) != 0) return Status::unavailable(errno_text("ftruncate", errno));
  // The size is final: a client must not be able to shrink the file under
  // the daemon's mapping (SIGBUS) nor grow it. F_SEAL_SEAL keeps it so.
  if (::fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0)
    return Status::unavailable(errno_text("fcntl(F_ADD_SEALS)", errno));
  void* p = ::mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return Status::unavailable(errno_text("mmap", errno));
  // A fresh memfd reads as zeros; constructing the layout in place starts
  // the lifetime of its atomics and writes the defaults (magic, version).
  ch.layout_ = new (p) ChannelLayout();
  ChannelHeader& h = ch.layout_->header;
  h.bytes = static_cast<std::uint32_t>(kBytes);
  h.client_id = client_id;
  h.tenant_id = tenant_id;
  h.daemon_epoch = epoch;
  // Publishes the plain header fields before the descriptor leaves this
  // process (the socket send is a barrier too; this says so in the code).
  std::atomic_thread_fence(std::memory_order_release);
  return ch;
}

Result<Channel> Channel::attach(int fd) {
  if (fd < 0) return Status::invalid_argument("channel: no file descriptor");
  Channel ch(fd, nullptr);  // owns fd from here, on failure too
  struct stat st {};
  if (::fstat(fd, &st) != 0) return Status::unavailable(errno_text("channel: fstat", errno));
  if (!S_ISREG(st.st_mode)) return Status::invalid_argument("channel: the descriptor is not a shared-memory file");
  // Its size must be final before it is mapped: a file its sender could
  // still shrink would raise SIGBUS in this process at the next access to
  // the mapping. Looked at before the size, which the seals then keep.
  const int seals = ::fcntl(fd, F_GET_SEALS);
  if (seals < 0) {
    if (errno == EINVAL) return Status::invalid_argument("channel: the descriptor is not a sealable memfd");
    return Status::unavailable(errno_text("channel: fcntl(F_GET_SEALS)", errno));
  }
  constexpr int kNeeded = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;
  if ((seals & kNeeded) != kNeeded)
    return Status::invalid_argument("channel: the memfd is not sealed as a channel must be (seals " +
                                    hex(static_cast<std::uint32_t>(seals)) +
                                    ", not F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL): a file its sender could "
                                    "shrink would raise SIGBUS under the mapping");
  if (::fstat(fd, &st) != 0) return Status::unavailable(errno_text("channel: fstat", errno));
  if (st.st_size < 0 || static_cast<std::uint64_t>(st.st_size) != kBytes)
    return Status::invalid_argument("channel: size " + std::to_string(st.st_size) + " bytes, expected " +
                                    std::to_string(kBytes) + " (another lithos version?)");
  void* p = ::mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return Status::unavailable(errno_text("channel: mmap", errno));
  // The layout was constructed by the daemon; this process only looks at it.
  ch.layout_ = std::launder(static_cast<ChannelLayout*>(p));
  std::atomic_thread_fence(std::memory_order_acquire);
  const ChannelHeader& h = ch.layout_->header;
  if (h.magic != kMagic)
    return Status::invalid_argument("channel: magic " + hex(h.magic) + ", expected " + hex(kMagic) +
                                    " (not a lithos channel)");
  if (h.version != kVersion)
    return Status::invalid_argument("channel: version " + std::to_string(h.version) + ", this library speaks " +
                                    std::to_string(kVersion));
  if (h.bytes != kBytes)
    return Status::invalid_argument("channel: header says " + std::to_string(h.bytes) + " bytes, expected " +
                                    std::to_string(kBytes));
  return ch;
}

// Seqlock writer (one writer: the daemon). The sequence is odd while the
// words change. The fence orders the odd store before the word stores for a
// reader that sees a new word; the final release store orders the words
// before the even value.
void Channel::publish_allocation(const std::uint64_t words[2]) { publish_allocation(words, words); }

void Channel::publish_allocation(const std::uint64_t now[2], const std::uint64_t lasting[2]) {
  ChannelHeader& h = layout_->header;
  // `| 1`: should the peer have left the sequence odd, this still ends even
  // and past every value a reader saw before.
  const std::uint64_t odd = h.alloc_seq.load(std::memory_order_relaxed) | 1U;
  h.alloc_seq.store(odd, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  h.alloc[0].store(now[0], std::memory_order_relaxed);
  h.alloc[1].store(now[1], std::memory_order_relaxed);
  h.alloc[2].store(lasting[0], std::memory_order_relaxed);
  h.alloc[3].store(lasting[1], std::memory_order_relaxed);
  h.alloc_seq.store(odd + 1, std::memory_order_release);
}

// Seqlock reader: an even sequence, the words, then the same sequence again
// means no write overlapped the two loads.
bool Channel::read_allocation(std::uint64_t out[2], bool lasting) const {
  const ChannelHeader& h = layout_->header;
  const std::size_t w = lasting ? 2 : 0;
  for (int i = 0; i < kSeqlockTries; ++i) {
    const std::uint64_t s1 = h.alloc_seq.load(std::memory_order_acquire);
    if ((s1 & 1U) == 0) {
      const std::uint64_t a = h.alloc[w].load(std::memory_order_relaxed);
      const std::uint64_t b = h.alloc[w + 1].load(std::memory_order_relaxed);
      // Orders the word loads before the second sequence load.
      std::atomic_thread_fence(std::memory_order_acquire);
      if (h.alloc_seq.load(std::memory_order_relaxed) == s1) {
        out[0] = a;
        out[1] = b;
        return true;
      }
    }
    cpu_relax();
  }
  return false;
}

void Channel::publish_fallback(const std::uint64_t words[2]) {
  layout_->header.fallback[0].store(words[0], std::memory_order_release);
  layout_->header.fallback[1].store(words[1], std::memory_order_release);
}

void Channel::read_fallback(std::uint64_t out[2]) const {
  out[0] = layout_->header.fallback[0].load(std::memory_order_acquire);
  out[1] = layout_->header.fallback[1].load(std::memory_order_acquire);
}

void write_size_slot(SizeSlot& slot, const SizeEntry& e) {
  // `| 1`, as publish_allocation: ends even and past every value seen.
  const std::uint64_t odd = slot.seq.load(std::memory_order_relaxed) | 1U;
  slot.seq.store(odd, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  slot.kernel.store(e.kernel, std::memory_order_relaxed);
  slot.grid_xy.store(std::uint64_t{e.grid[0]} | (std::uint64_t{e.grid[1]} << 32), std::memory_order_relaxed);
  slot.grid_z_tpcs.store(std::uint64_t{e.grid[2]} | (std::uint64_t{e.tpcs} << 32), std::memory_order_relaxed);
  slot.seq.store(odd + 1, std::memory_order_release);
}

bool read_size_slot(const SizeSlot& slot, SizeEntry* out) {
  for (int i = 0; i < kSeqlockTries; ++i) {
    const std::uint64_t s1 = slot.seq.load(std::memory_order_acquire);
    if (s1 == 0) return false;
    if ((s1 & 1U) == 0) {
      const std::uint64_t k = slot.kernel.load(std::memory_order_relaxed);
      const std::uint64_t xy = slot.grid_xy.load(std::memory_order_relaxed);
      const std::uint64_t zt = slot.grid_z_tpcs.load(std::memory_order_relaxed);
      std::atomic_thread_fence(std::memory_order_acquire);
      if (slot.seq.load(std::memory_order_relaxed) == s1) {
        out->kernel = k;
        out->grid[0] = static_cast<std::uint32_t>(xy);
        out->grid[1] = static_cast<std::uint32_t>(xy >> 32);
        out->grid[2] = static_cast<std::uint32_t>(zt);
        out->tpcs = static_cast<std::uint32_t>(zt >> 32);
        return true;
      }
    }
    cpu_relax();
  }
  return false;
}

std::uint32_t Channel::read_size(std::uint64_t kernel, const std::uint32_t grid[3]) const {
  if (layout_ == nullptr) return 0;
  const std::uint32_t home = size_slot_home(kernel, grid);
  for (std::uint32_t i = 0; i < kSizeWindow; ++i) {
    const SizeSlot& slot = layout_->sizes[(home + i) & (kSizeSlots - 1)];
    SizeEntry e;
    // Empty (the key was never put: keys fill their window from the home
    // slot) or unstable: no entry.
    if (!read_size_slot(slot, &e)) return 0;
    if (e.kernel == kernel && e.grid[0] == grid[0] && e.grid[1] == grid[1] && e.grid[2] == grid[2]) return e.tpcs;
  }
  return 0;
}

bool SizeTableWriter::put(Channel& ch, const SizeEntry& e) {
  if (!ch.valid()) return false;
  const Key key{e.kernel, {e.grid[0], e.grid[1], e.grid[2]}};
  std::uint32_t slot = 0;
  if (const auto it = slots_.find(key); it != slots_.end()) {
    slot = it->second;
  } else {
    const std::uint32_t home = size_slot_home(e.kernel, e.grid);
    std::uint32_t i = 0;
    for (; i < kSizeWindow; ++i) {
      if (!taken_[(home + i) & (kSizeSlots - 1)]) break;
    }
    if (i == kSizeWindow) {
      ++full_;
      return false;
    }
    slot = (home + i) & (kSizeSlots - 1);
    taken_[slot] = true;
    slots_.emplace(key, slot);
  }
  write_size_slot(ch.layout().sizes[slot], e);
  return true;
}

}  // namespace lithos::ipc
