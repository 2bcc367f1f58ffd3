// The right-size table of one client's channel (ChannelLayout::sizes): how
// many TPCs the daemon chose for a kernel at a grid shape, for the launches
// a high-priority tenant makes at once (docs/efficiency.md, "Right-sizing").
//
// Fixed size (kSizeTableSlots entries), in the channel's shared memory.
// Written only by the daemon (SizeTableWriter, which keeps its own copy of
// the keys: it never reads back what the client could have scribbled on),
// read lock-free by the client (size_lookup). Open addressing with linear
// probing from a hash of the key (kernel identity as the client reports it
// in SubmitMsg::kernel, and the grid's three dimensions); entries are never
// removed one by one, only all at once (clear), so a probe may stop at the
// first empty entry. Each entry has a seqlock of its own: an odd `seq`
// while the daemon rewrites it; a reader that sees the same even value
// before and after reading the fields read one whole entry, never half of
// one and half of another. A full table refuses new keys (counted by the
// writer); nothing is evicted.
#pragma once

#include <atomic>
#include <cstdint>
#include <vector>

namespace lithos::ipc {

inline constexpr std::uint32_t kSizeTableSlots = 512;  // a power of two

struct SizeEntry {                     // 32 bytes
  std::atomic<std::uint32_t> seq{0};   // odd: being written
  std::atomic<std::uint32_t> tpcs{0};  // 0: empty (never written since the last clear)
  std::atomic<std::uint64_t> kernel{0};
  std::atomic<std::uint32_t> grid[3] = {0, 0, 0};
  std::uint32_t reserved = 0;
};
static_assert(sizeof(SizeEntry) == 32);

struct SizeTable {
  // Entries in use (0: nothing to look up; a reader then probes nothing).
  alignas(64) std::atomic<std::uint32_t> used{0};
  std::uint32_t reserved[15] = {};
  SizeEntry entries[kSizeTableSlots];
};

// Where the probe for a key starts (the same on both sides).
std::uint32_t size_slot(std::uint64_t kernel, const std::uint32_t grid[3]);

// Client side: the TPC count published for (kernel, grid), or 0 when there
// is none (or no stable read of an entry came within a bounded number of
// tries: the launch then keeps its allocation). Never blocks, allocates or
// throws: the launch path calls it.
std::uint32_t size_lookup(const SizeTable& t, std::uint64_t kernel, const std::uint32_t grid[3]) noexcept;

// Daemon side: the one writer of a client's table.
class SizeTableWriter {
 public:
  SizeTableWriter() = default;
  explicit SizeTableWriter(SizeTable* t);

  enum class Result : std::uint8_t { kAdded, kUpdated, kFull, kInvalid };
  // Publishes `tpcs` (>= 1) for (kernel, grid): rewrites the key's entry
  // when it has one, else takes the first free entry of its probe. kFull:
  // no free entry (counted in refused()); kInvalid: tpcs 0 or no table.
  Result publish(std::uint64_t kernel, const std::uint32_t grid[3], std::uint32_t tpcs);
  // Empties every entry (the client's launches go back to their allocation).
  void clear();

  std::uint32_t size() const { return used_; }
  std::uint64_t refused() const { return refused_; }

 private:
  struct Key {
    std::uint64_t kernel = 0;
    std::uint32_t grid[3] = {0, 0, 0};
    bool used = false;
  };
  void write(std::uint32_t slot, std::uint64_t kernel, const std::uint32_t grid[3], std::uint32_t tpcs);

  SizeTable* table_ = nullptr;
  std::vector<Key> keys_;  // this process's copy of what each entry holds
  std::uint32_t used_ = 0;
  std::uint64_t refused_ = 0;
};

}  // namespace lithos::ipc
