// Green-context backend: confine work to a set of logical TPCs with the
// documented green-context API, for GPUs or drivers where the launch-
// descriptor hook is unavailable (h100-facts.md §2).
//
// The device's SM resource is split into one-TPC groups (2 SMs each, flag
// CU_DEV_SM_RESOURCE_SPLIT_IGNORE_SM_COSCHEDULING); which SMs a group holds is
// learnt by running the %smid kernel on a stream of a green context made of
// that one group. A partition for a TpcSet joins the wanted groups into one
// green context; kernels launched on its streams run on exactly those SMs.
// Partitions are fixed per context: a different TpcSet needs another context
// (keep a pool and order work with events).
#pragma once

#include <cuda.h>

#include <memory>
#include <string>
#include <vector>

#include "common/status.hpp"
#include "gpu/driver.hpp"
#include "gpu/smid_kernel.hpp"
#include "sched/tpc_set.hpp"

namespace lithos::gpu {

// Which mechanism confines launches to TPCs; callers log it.
enum class TpcBackend : std::uint8_t { kNone, kDescriptorHook, kGreenContext };
const char* tpc_backend_name(TpcBackend b);  // "none", "descriptor-hook", "green-context"

// The one-TPC groups of a device and the logical TPC each holds.
class GreenTpcCatalog {
 public:
  // Splits the device's SM resource and identifies every group (one short
  // green context and one %smid launch per group). Retains the device's
  // primary context (kept for the life of the process) and makes it current
  // on the calling thread. kUnavailable when the driver lacks green contexts;
  // kFailedPrecondition when a group is not one whole TPC. `api` must outlive
  // the catalog and every partition made from it.
  static Result<GreenTpcCatalog> build(const DriverApi& api, int ordinal, const SmidLaunch& launch = {});

  int sm_count() const { return sm_count_; }
  int group_count() const { return static_cast<int>(groups_.size()); }
  // Logical TPCs some group holds.
  sched::TpcSet tpcs() const;
  // The SM ids group g ran on (for diagnostics).
  const std::vector<int>& sms_of_group(int g) const { return sms_[static_cast<std::size_t>(g)]; }
  int tpc_of_group(int g) const { return tpc_[static_cast<std::size_t>(g)]; }
  double build_ms() const { return build_ms_; }

 private:
  friend class GreenPartition;
  friend Result<ConfinementCheck> check_green_confinement(const GreenTpcCatalog&, const sched::TpcSet&,
                                                          const SmidLaunch&);
  const DriverApi* api_ = nullptr;
  CUdevice device_ = 0;
  int sm_count_ = 0;
  std::vector<CUdevResource> groups_;
  std::vector<std::vector<int>> sms_;
  std::vector<int> tpc_;
  double build_ms_ = 0;
  std::shared_ptr<SmidKernel> kernel_;  // loaded in the primary context, reused by checks
};

// A green context holding exactly the SMs of a TpcSet.
class GreenPartition {
 public:
  // kInvalidArgument when `tpcs` is empty or names a TPC no group holds.
  static Result<std::unique_ptr<GreenPartition>> create(const GreenTpcCatalog& catalog, const sched::TpcSet& tpcs);
  ~GreenPartition();
  GreenPartition(const GreenPartition&) = delete;
  GreenPartition& operator=(const GreenPartition&) = delete;

  // A new stream whose launches run only on this partition's SMs. The caller
  // owns it (cuStreamDestroy). Flags/priority as for cuGreenCtxStreamCreate
  // (flags must include CU_STREAM_NON_BLOCKING).
  Result<CUstream> create_stream(unsigned flags = CU_STREAM_NON_BLOCKING, int priority = 0);

  const sched::TpcSet& tpcs() const { return tpcs_; }
  CUgreenCtx handle() const { return green_; }
  // The context view of the green context (for cuCtxSetCurrent).
  CUcontext context() const { return ctx_; }
  double creation_ms() const { return creation_ms_; }

 private:
  GreenPartition() = default;
  const DriverApi* api_ = nullptr;
  CUgreenCtx green_ = nullptr;
  CUcontext ctx_ = nullptr;
  sched::TpcSet tpcs_;
  double creation_ms_ = 0;
};

// Builds a partition for `tpcs` from `catalog`, runs the %smid kernel on a
// stream of it and reports the SMs it ran on and the creation time (in the
// calling process: run it under run_in_child()).
Result<ConfinementCheck> check_green_confinement(const GreenTpcCatalog& catalog, const sched::TpcSet& tpcs,
                                                 const SmidLaunch& launch);

}  // namespace lithos::gpu
