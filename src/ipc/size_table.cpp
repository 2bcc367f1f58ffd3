#include "ipc/size_table.hpp"

namespace lithos::ipc {

static_assert((kSizeTableSlots & (kSizeTableSlots - 1)) == 0, "kSizeTableSlots must be a power of two");
static_assert(std::atomic<std::uint32_t>::is_always_lock_free && std::atomic<std::uint64_t>::is_always_lock_free);

namespace {

// Tries per entry before a reader gives up on it: the writer's critical
// section is five stores.
constexpr int kTries = 64;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

std::uint64_t mix(std::uint64_t h) {
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdULL;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ULL;
  h ^= h >> 33;
  return h;
}

bool same(std::uint64_t k, const std::uint32_t* g, std::uint64_t kernel, const std::uint32_t grid[3]) {
  return k == kernel && g[0] == grid[0] && g[1] == grid[1] && g[2] == grid[2];
}

}  // namespace

std::uint32_t size_slot(std::uint64_t kernel, const std::uint32_t grid[3]) {
  std::uint64_t h = mix(kernel);
  h = mix(h ^ (std::uint64_t{grid[0]} | (std::uint64_t{grid[1]} << 32)));
  h = mix(h ^ grid[2]);
  return static_cast<std::uint32_t>(h) & (kSizeTableSlots - 1);
}

std::uint32_t size_lookup(const SizeTable& t, std::uint64_t kernel, const std::uint32_t grid[3]) noexcept {
  if (t.used.load(std::memory_order_acquire) == 0) return 0;
  const std::uint32_t start = size_slot(kernel, grid);
  for (std::uint32_t i = 0; i < kSizeTableSlots; ++i) {
    const SizeEntry& e = t.entries[(start + i) & (kSizeTableSlots - 1)];
    bool stable = false;
    std::uint32_t tpcs = 0;
    std::uint64_t k = 0;
    std::uint32_t g[3] = {0, 0, 0};
    for (int tries = 0; tries < kTries && !stable; ++tries) {
      const std::uint32_t s1 = e.seq.load(std::memory_order_acquire);
      if ((s1 & 1U) != 0) {
        cpu_relax();
        continue;
      }
      tpcs = e.tpcs.load(std::memory_order_relaxed);
      k = e.kernel.load(std::memory_order_relaxed);
      g[0] = e.grid[0].load(std::memory_order_relaxed);
      g[1] = e.grid[1].load(std::memory_order_relaxed);
      g[2] = e.grid[2].load(std::memory_order_relaxed);
      // Orders the field loads before the second sequence load.
      std::atomic_thread_fence(std::memory_order_acquire);
      stable = e.seq.load(std::memory_order_relaxed) == s1;
      if (!stable) cpu_relax();
    }
    if (!stable) return 0;    // a writer stuck half-way: no answer, the allocation
    if (tpcs == 0) return 0;  // the probe's end: the key is not in the table
    if (same(k, g, kernel, grid)) return tpcs;
  }
  return 0;
}

SizeTableWriter::SizeTableWriter(SizeTable* t) : table_(t), keys_(kSizeTableSlots) {}

// Seqlock writer, as Channel::publish_allocation: the sequence goes odd,
// the fields change, the sequence goes even past every value seen before.
void SizeTableWriter::write(std::uint32_t slot, std::uint64_t kernel, const std::uint32_t grid[3], std::uint32_t tpcs) {
  SizeEntry& e = table_->entries[slot];
  const std::uint32_t odd = e.seq.load(std::memory_order_relaxed) | 1U;
  e.seq.store(odd, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  e.tpcs.store(tpcs, std::memory_order_relaxed);
  e.kernel.store(kernel, std::memory_order_relaxed);
  e.grid[0].store(grid[0], std::memory_order_relaxed);
  e.grid[1].store(grid[1], std::memory_order_relaxed);
  e.grid[2].store(grid[2], std::memory_order_relaxed);
  e.seq.store(odd + 1, std::memory_order_release);
}

SizeTableWriter::Result SizeTableWriter::publish(std::uint64_t kernel, const std::uint32_t grid[3],
                                                 std::uint32_t tpcs) {
  if (table_ == nullptr || tpcs == 0) return Result::kInvalid;
  const std::uint32_t start = size_slot(kernel, grid);
  for (std::uint32_t i = 0; i < kSizeTableSlots; ++i) {
    const std::uint32_t slot = (start + i) & (kSizeTableSlots - 1);
    Key& k = keys_[slot];
    if (k.used && same(k.kernel, k.grid, kernel, grid)) {
      write(slot, kernel, grid, tpcs);
      return Result::kUpdated;
    }
    if (!k.used) {
      k = {kernel, {grid[0], grid[1], grid[2]}, true};
      write(slot, kernel, grid, tpcs);
      ++used_;
      table_->used.store(used_, std::memory_order_release);
      return Result::kAdded;
    }
  }
  ++refused_;
  return Result::kFull;
}

void SizeTableWriter::clear() {
  if (table_ == nullptr) return;
  // Readers stop looking first; an entry read meanwhile is still whole.
  table_->used.store(0, std::memory_order_release);
  const std::uint32_t none[3] = {0, 0, 0};
  for (std::uint32_t slot = 0; slot < kSizeTableSlots; ++slot) {
    if (!keys_[slot].used) continue;
    write(slot, 0, none, 0);
    keys_[slot] = {};
  }
  used_ = 0;
}

}  // namespace lithos::ipc
