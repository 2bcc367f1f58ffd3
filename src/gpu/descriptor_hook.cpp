#include "gpu/descriptor_hook.hpp"

#include <atomic>
#include <cstring>
#include <mutex>
#include <string>

namespace lithos::gpu {

namespace {

// Entries of the driver's callback export table (h100-facts.md §1).
using DriverCallback = void (*)(void* user, int domain, int cbid, const void* params);
using SubscribeFn = int (*)(std::uint32_t* handle, DriverCallback cb, void* user);
using EnableFn = int (*)(std::uint32_t on, std::uint32_t handle, int domain, int cbid);
constexpr std::size_t kSubscribeEntry = 3;
constexpr std::size_t kEnableEntry = 6;

// Params layout: u32 size first; the QMD pointer is pointer slot 4.
constexpr std::size_t kQmdPointerSlot = 4;
constexpr std::uint32_t kMinParamsSize = (kQmdPointerSlot + 1) * sizeof(void*);

struct Slot {
  std::atomic<DescriptorCallback> cb{nullptr};
  std::atomic<void*> user{nullptr};
  std::uint32_t handle = 0;
  bool subscribed = false;  // the driver holds this slot's address (guarded by g_mutex)
};

Slot g_slots[kMaxDescriptorCallbacks];
std::mutex g_mutex;
std::atomic<std::uint64_t> g_fired{0};
std::atomic<std::uint64_t> g_ignored{0};
std::atomic<std::uint32_t> g_last_size{0};

struct Entries {
  SubscribeFn subscribe = nullptr;
  EnableFn enable = nullptr;
};

Result<Entries> find_entries(GetExportTableFn get_export_table) {
  const void* table = nullptr;
  const int rc = get_export_table(&table, kDescriptorTableId);
  if (rc != 0 || table == nullptr) {
    return Status::unavailable("the driver has no launch-descriptor callback table (cuGetExportTable returned " +
                               std::to_string(rc) + ")");
  }
  const auto* entries = static_cast<const std::uintptr_t*>(table);
  Entries e;
  e.subscribe = reinterpret_cast<SubscribeFn>(entries[kSubscribeEntry]);
  e.enable = reinterpret_cast<EnableFn>(entries[kEnableEntry]);
  if (e.subscribe == nullptr || e.enable == nullptr) {
    return Status::unavailable("the launch-descriptor callback table lacks its subscribe/enable entries");
  }
  return e;
}

}  // namespace

namespace detail {

void descriptor_trampoline(void* slot_ptr, int domain, int cbid, const void* params) {
  if (domain != kDescriptorDomain || cbid != kDescriptorCbid || slot_ptr == nullptr) return;
  g_fired.fetch_add(1, std::memory_order_relaxed);
  if (params == nullptr) {
    g_ignored.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  std::uint32_t size = 0;
  std::memcpy(&size, params, sizeof size);
  g_last_size.store(size, std::memory_order_relaxed);
  if (size < kMinParamsSize) {
    g_ignored.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  void* qmd = nullptr;
  std::memcpy(&qmd, static_cast<const unsigned char*>(params) + kQmdPointerSlot * sizeof(void*), sizeof qmd);
  if (qmd == nullptr) {
    g_ignored.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  auto* slot = static_cast<Slot*>(slot_ptr);
  const DescriptorCallback cb = slot->cb.load(std::memory_order_acquire);
  if (cb == nullptr) return;
  cb(slot->user.load(std::memory_order_acquire), static_cast<std::uint8_t*>(qmd));
}

void forget_subscriptions_for_tests() {
  const std::lock_guard<std::mutex> lock(g_mutex);
  for (Slot& s : g_slots) {
    s.cb.store(nullptr);
    s.user.store(nullptr);
    s.handle = 0;
    s.subscribed = false;
  }
}

}  // namespace detail

Status install_descriptor_callback(GetExportTableFn get_export_table, DescriptorCallback cb, void* user) {
  if (get_export_table == nullptr || cb == nullptr) {
    return Status::invalid_argument("install_descriptor_callback: null cuGetExportTable or callback");
  }
  const std::lock_guard<std::mutex> lock(g_mutex);
  auto entries = find_entries(get_export_table);
  if (!entries) return entries.status();
  Slot* free_slot = nullptr;
  for (Slot& s : g_slots) {
    if (s.cb.load() == cb && s.user.load() == user) return Status::ok();  // already installed
    if (free_slot == nullptr && s.cb.load() == nullptr) free_slot = &s;
  }
  if (free_slot == nullptr) {
    return Status::failed_precondition("all " + std::to_string(kMaxDescriptorCallbacks) +
                                       " launch-descriptor callback slots are in use");
  }
  // Publish the callback before the driver can call the trampoline.
  free_slot->user.store(user, std::memory_order_release);
  free_slot->cb.store(cb, std::memory_order_release);
  if (!free_slot->subscribed) {
    std::uint32_t handle = 0;
    const int rc = entries->subscribe(&handle, &detail::descriptor_trampoline, free_slot);
    if (rc != 0) {
      free_slot->cb.store(nullptr);
      free_slot->user.store(nullptr);
      return Status::unavailable("the driver refused the launch-descriptor callback subscription (code " +
                                 std::to_string(rc) + ")");
    }
    free_slot->handle = handle;
    free_slot->subscribed = true;
  }
  const int rc = entries->enable(1, free_slot->handle, kDescriptorDomain, kDescriptorCbid);
  if (rc != 0) {
    free_slot->cb.store(nullptr);
    free_slot->user.store(nullptr);
    return Status::unavailable("the driver refused to enable the launch-descriptor callback (code " +
                               std::to_string(rc) + ")");
  }
  return Status::ok();
}

Status remove_descriptor_callback(GetExportTableFn get_export_table, DescriptorCallback cb, void* user) {
  if (get_export_table == nullptr || cb == nullptr) {
    return Status::invalid_argument("remove_descriptor_callback: null cuGetExportTable or callback");
  }
  const std::lock_guard<std::mutex> lock(g_mutex);
  for (Slot& s : g_slots) {
    if (s.cb.load() != cb || s.user.load() != user) continue;
    // Stop calling it at once; then ask the driver to stop firing the slot.
    // The subscription itself stays (the slot is reused by a later install).
    s.cb.store(nullptr, std::memory_order_release);
    s.user.store(nullptr, std::memory_order_release);
    auto entries = find_entries(get_export_table);
    if (!entries) return entries.status();
    const int rc = entries->enable(0, s.handle, kDescriptorDomain, kDescriptorCbid);
    if (rc != 0) {
      return Status::unavailable("the driver refused to disable the launch-descriptor callback (code " +
                                 std::to_string(rc) + "); it is ignored from now on");
    }
    return Status::ok();
  }
  return Status::not_found("remove_descriptor_callback: that callback is not installed");
}

DescriptorHookStats descriptor_hook_stats() {
  DescriptorHookStats s;
  s.fired = g_fired.load(std::memory_order_relaxed);
  s.ignored = g_ignored.load(std::memory_order_relaxed);
  s.last_params_size = g_last_size.load(std::memory_order_relaxed);
  return s;
}

}  // namespace lithos::gpu
