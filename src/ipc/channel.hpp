// One client's shared-memory channel (protocol.hpp's ChannelLayout): a memfd
// created by the daemon, passed to the client over the registration socket,
// and mapped by both.
//
// The daemon creates it (Channel::create), the client maps the descriptor it
// received (Channel::attach). Each side owns its own mapping and descriptor;
// the memory lives until both have closed theirs.
//
// The daemon seals the memfd's size (F_SEAL_SHRINK | F_SEAL_GROW) before it
// hands it out: a client that could shrink the file would make the daemon's
// next access to the mapping raise SIGBUS.
#pragma once

#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "common/status.hpp"
#include "ipc/protocol.hpp"

namespace lithos::ipc {

class Channel {
 public:
  // Bytes of every channel: sizeof(ChannelLayout) rounded up to a page.
  static constexpr std::size_t kBytes = (sizeof(ChannelLayout) + 4095) & ~std::size_t{4095};
  // The completion slots own a whole page (ChannelLayout aligns them to 4 KiB
  // and nothing follows them), so that exactly that page can be registered
  // with the GPU.
  static constexpr std::size_t kCompletionPageBytes = 4096;

  // An empty channel (no mapping, fd() == -1): a placeholder to move into.
  Channel() = default;
  ~Channel();
  Channel(Channel&& other) noexcept;
  Channel& operator=(Channel&& other) noexcept;
  Channel(const Channel&) = delete;
  Channel& operator=(const Channel&) = delete;

  // Daemon side: a new sealed memfd of kBytes, mapped, with a fresh layout
  // whose header names the client, its tenant and the daemon's epoch.
  static Result<Channel> create(std::uint32_t client_id, std::uint32_t tenant_id, std::uint64_t epoch);

  // Client side: maps the channel behind `fd`, which it takes ownership of
  // (closed on failure too). The file must be a memfd sealed with at least
  // F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL (so that it can never shrink
  // under the mapping), exactly kBytes long, and its header must carry
  // kMagic, kVersion and kBytes. kInvalidArgument for a file that is not
  // such a channel, kUnavailable when a system call fails.
  static Result<Channel> attach(int fd);

  bool valid() const { return layout_ != nullptr; }
  int fd() const { return fd_; }
  // Closes this side's descriptor and keeps the mapping (which holds the
  // memory on its own): the daemon's copy once the client has its own, so
  // that a client costs the daemon one descriptor (its socket), not two.
  void close_fd();
  ChannelLayout& layout() { return *layout_; }
  const ChannelLayout& layout() const { return *layout_; }
  std::size_t bytes() const { return layout_ != nullptr ? kBytes : 0; }

  // The tenant's allocation, under the header's seqlock. One writer (the
  // daemon); readers retry a bounded number of times and return false when
  // they never saw a stable value (the writer is stuck, or the peer scribbles
  // on alloc_seq).
  // `lasting`: the set for launches whose set lasts (ChannelHeader::alloc);
  // the one-set forms publish / read the same set for both.
  void publish_allocation(const std::uint64_t words[2]);
  void publish_allocation(const std::uint64_t now[2], const std::uint64_t lasting[2]);
  bool read_allocation(std::uint64_t out[2], bool lasting = false) const;

  // The fallback set: written once before the client is welcomed and rarely
  // after, so two plain atomics are enough (a reader racing a rewrite may see
  // one old and one new word; both sets are safe places to run).
  void publish_fallback(const std::uint64_t words[2]);
  void read_fallback(std::uint64_t out[2]) const;

  // The right-sizing table (ChannelLayout::sizes), client side: the TPC
  // count for a launch of `kernel` with grid `grid`, or 0 when it has no
  // entry, its entry says the whole allocation, or no stable value was seen
  // in a bounded number of tries (the whole allocation is always safe).
  std::uint32_t read_size(std::uint64_t kernel, const std::uint32_t grid[3]) const;

  // The page holding `completed` (page-aligned), for cuMemHostRegister.
  void* completion_page() { return layout_ != nullptr ? static_cast<void*>(layout_->completed) : nullptr; }
  static constexpr std::size_t completion_page_bytes() { return kCompletionPageBytes; }

 private:
  Channel(int fd, ChannelLayout* layout) : fd_(fd), layout_(layout) {}
  void reset();

  int fd_ = -1;
  ChannelLayout* layout_ = nullptr;
};

// One slot's seqlock, both sides: write_size_slot is the only writer's
// (the daemon's); read_size_slot returns false when the slot is empty or no
// stable value was seen in a bounded number of tries.
void write_size_slot(SizeSlot& slot, const SizeEntry& e);
bool read_size_slot(const SizeSlot& slot, SizeEntry* out);

// The daemon's side of one channel's right-sizing table: where each key
// went, kept in the daemon's own memory (it never reads the table back: the
// client can write the page too).
class SizeTableWriter {
 public:
  // Writes `e` into `ch` (its key's slot, or a free one in its window).
  // False when the window is full: the key is not published (the client
  // launches it on its whole allocation).
  bool put(Channel& ch, const SizeEntry& e);
  std::size_t used() const { return slots_.size(); }
  std::uint64_t full() const { return full_; }  // puts refused for a full window

 private:
  struct Key {
    std::uint64_t kernel;
    std::uint32_t grid[3];
    bool operator==(const Key& o) const {
      return kernel == o.kernel && grid[0] == o.grid[0] && grid[1] == o.grid[1] && grid[2] == o.grid[2];
    }
  };
  struct KeyHash {
    std::size_t operator()(const Key& k) const noexcept { return size_slot_home(k.kernel, k.grid); }
  };
  std::unordered_map<Key, std::uint32_t, KeyHash> slots_;
  std::vector<bool> taken_ = std::vector<bool>(kSizeSlots, false);
  std::uint64_t full_ = 0;
};

}  // namespace lithos::ipc
