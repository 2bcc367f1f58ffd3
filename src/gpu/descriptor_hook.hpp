// The launch-descriptor callback: a driver-internal hook that fires on the
// launching thread just before a kernel's launch descriptor (QMD) is uploaded,
// with a pointer to the descriptor, so it can be edited in place (TPC mask,
// grid width). Measured on the H100 with driver 580 (h100-facts.md §1).
//
// How it is reached: cuGetExportTable with table id
// 2c8e0ad8-0710-ab4e-90dd-54719fe5f74b returns a table of function pointers;
// entry 3 subscribes a callback `void (void* user, int domain, int cbid,
// const void* params)` and returns a handle, entry 6 enables one
// (on, handle, domain, cbid). Domain 0xb, cbid 0x1 is "QMD about to be
// uploaded"; its params begin with a u32 size (88 on driver 580) and the QMD
// pointer is pointer slot 4 (byte offset 32).
//
// Nothing here links libcuda: the caller passes the driver's cuGetExportTable.
#pragma once

#include <cstdint>

#include "common/status.hpp"

namespace lithos::gpu {

// The shape of cuGetExportTable (CUresult is an int-sized enum; CUuuid is 16
// bytes). Both arguments are passed through unchanged.
using GetExportTableFn = int (*)(const void** table, const void* table_id);

// Called synchronously on the launching thread just before the descriptor is
// uploaded; may edit `qmd` in place (at least kQmdMaxBytes bytes, see qmd.hpp).
// Must not throw, block for long, or call back into the driver.
using DescriptorCallback = void (*)(void* user, std::uint8_t* qmd);

// The table id above, as the 16 bytes cuGetExportTable expects.
inline constexpr unsigned char kDescriptorTableId[16] = {0x2c, 0x8e, 0x0a, 0xd8, 0x07, 0x10, 0xab, 0x4e,
                                                         0x90, 0xdd, 0x54, 0x71, 0x9f, 0xe5, 0xf7, 0x4b};
inline constexpr int kDescriptorDomain = 0xb;
inline constexpr int kDescriptorCbid = 0x1;

// Subscribes `cb` (with `user`) and enables it for domain 0xb / cbid 0x1.
// Returns:
//  - kInvalidArgument for a null get_export_table or cb;
//  - kUnavailable when the export table or its entries 3/6 are missing, or
//    when the driver refuses the subscription (with the driver's code);
//  - kFailedPrecondition when all kMaxDescriptorCallbacks slots are in use.
// The callback stays installed for the life of the process unless removed.
// Thread-safe. Params that are null, shorter than 40 bytes, or carry a null
// QMD pointer are ignored; other domains/cbids are ignored.
inline constexpr int kMaxDescriptorCallbacks = 4;
Status install_descriptor_callback(GetExportTableFn get_export_table, DescriptorCallback cb, void* user);

// Disables a callback installed with the same (cb, user): it is no longer
// called. kNotFound if it was not installed.
Status remove_descriptor_callback(GetExportTableFn get_export_table, DescriptorCallback cb, void* user);

// Diagnostics: the number of times the driver fired the hook (any installed
// callback) and the last params size it reported. For tests and `--stats`.
struct DescriptorHookStats {
  std::uint64_t fired = 0;
  std::uint64_t ignored = 0;  // params too small / null QMD pointer
  std::uint32_t last_params_size = 0;
};
DescriptorHookStats descriptor_hook_stats();

namespace detail {
// The trampoline the driver calls (exposed for CPU tests with a fake table).
void descriptor_trampoline(void* slot, int domain, int cbid, const void* params);
// Forgets every slot and subscription (CPU tests that swap fake drivers).
void forget_subscriptions_for_tests();
}  // namespace detail

}  // namespace lithos::gpu
