#include "gpu/green_context.hpp"

#include <chrono>

namespace lithos::gpu {

namespace {

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

std::string sms_text(const std::vector<int>& sms) {
  std::string out = "{";
  for (std::size_t i = 0; i < sms.size(); ++i) out += (i > 0 ? "," : "") + std::to_string(sms[i]);
  return out + "}";
}

}  // namespace

const char* tpc_backend_name(TpcBackend b) {
  switch (b) {
    case TpcBackend::kDescriptorHook: return "descriptor-hook";
    case TpcBackend::kGreenContext: return "green-context";
    case TpcBackend::kNone: break;
  }
  return "none";
}

sched::TpcSet GreenTpcCatalog::tpcs() const {
  sched::TpcSet out;
  for (int t : tpc_) {
    if (t >= 0) out.set(t);
  }
  return out;
}

Result<GreenTpcCatalog> GreenTpcCatalog::build(const DriverApi& api, int ordinal, const SmidLaunch& launch) {
  if (!api.has_green_contexts()) {
    return Status::unavailable(
        "this CUDA driver has no green contexts (needs 12.5+): green-context backend unavailable");
  }
  const auto t0 = std::chrono::steady_clock::now();
  GreenTpcCatalog cat;
  cat.api_ = &api;
  if (CUresult r = api.cuDeviceGet(&cat.device_, ordinal); r != CUDA_SUCCESS) return api.check(r, "cuDeviceGet");
  CUcontext primary = nullptr;
  if (CUresult r = api.cuDevicePrimaryCtxRetain(&primary, cat.device_); r != CUDA_SUCCESS) {
    return api.check(r, "cuDevicePrimaryCtxRetain");
  }
  if (CUresult r = api.cuCtxSetCurrent(primary); r != CUDA_SUCCESS) return api.check(r, "cuCtxSetCurrent");
  if (CUresult r = api.cuDeviceGetAttribute(&cat.sm_count_, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, cat.device_);
      r != CUDA_SUCCESS) {
    return api.check(r, "cuDeviceGetAttribute(MULTIPROCESSOR_COUNT)");
  }
  CUdevResource all{};
  if (CUresult r = api.cuDeviceGetDevResource(cat.device_, &all, CU_DEV_RESOURCE_TYPE_SM); r != CUDA_SUCCESS) {
    return api.check(r, "cuDeviceGetDevResource(SM)");
  }
  const unsigned flags = CU_DEV_SM_RESOURCE_SPLIT_IGNORE_SM_COSCHEDULING;
  unsigned n = 0;
  if (CUresult r = api.cuDevSmResourceSplitByCount(nullptr, &n, &all, nullptr, flags, 2); r != CUDA_SUCCESS) {
    return api.check(r, "cuDevSmResourceSplitByCount(count)");
  }
  if (n == 0) return Status::unavailable("the SM resource cannot be split into one-TPC groups");
  cat.groups_.resize(n);
  CUdevResource remaining{};
  if (CUresult r = api.cuDevSmResourceSplitByCount(cat.groups_.data(), &n, &all, &remaining, flags, 2);
      r != CUDA_SUCCESS) {
    return api.check(r, "cuDevSmResourceSplitByCount");
  }
  cat.groups_.resize(n);
  auto kernel = SmidKernel::load(api, cat.sm_count_);
  if (!kernel) return kernel.status();
  cat.kernel_ = std::make_shared<SmidKernel>(std::move(*kernel));

  sched::TpcSet seen_tpcs;
  for (unsigned g = 0; g < n; ++g) {
    if (cat.groups_[g].sm.smCount != 2) {
      return Status::failed_precondition("green-context group " + std::to_string(g) + " holds " +
                                         std::to_string(cat.groups_[g].sm.smCount) + " SMs, not one TPC (2)");
    }
    CUdevResourceDesc desc = nullptr;
    if (CUresult r = api.cuDevResourceGenerateDesc(&desc, &cat.groups_[g], 1); r != CUDA_SUCCESS) {
      return api.check(r, "cuDevResourceGenerateDesc");
    }
    CUgreenCtx green = nullptr;
    if (CUresult r = api.cuGreenCtxCreate(&green, desc, cat.device_, CU_GREEN_CTX_DEFAULT_STREAM); r != CUDA_SUCCESS) {
      return api.check(r, "cuGreenCtxCreate");
    }
    CUstream stream = nullptr;
    if (CUresult r = api.cuGreenCtxStreamCreate(&stream, green, CU_STREAM_NON_BLOCKING, 0); r != CUDA_SUCCESS) {
      api.cuGreenCtxDestroy(green);
      return api.check(r, "cuGreenCtxStreamCreate");
    }
    auto sms = cat.kernel_->run(stream, launch);
    if (!sms) return sms.status().with_context("%smid launch on green-context group " + std::to_string(g));
    api.cuStreamDestroy(stream);
    api.cuGreenCtxDestroy(green);
    const std::vector<int> list(sms->begin(), sms->end());
    if (list.size() != 2 || list[0] % 2 != 0 || list[1] != list[0] + 1) {
      return Status::failed_precondition("green-context group " + std::to_string(g) + " ran on SMs " + sms_text(list) +
                                         ", which is not one TPC (SMs 2t, 2t+1)");
    }
    const int tpc = list[0] / 2;
    if (seen_tpcs.test(tpc)) {
      return Status::failed_precondition("two green-context groups hold TPC " + std::to_string(tpc));
    }
    seen_tpcs.set(tpc);
    cat.sms_.push_back(list);
    cat.tpc_.push_back(tpc);
  }
  cat.build_ms_ = ms_since(t0);
  return cat;
}

Result<std::unique_ptr<GreenPartition>> GreenPartition::create(const GreenTpcCatalog& catalog,
                                                               const sched::TpcSet& tpcs) {
  if (catalog.api_ == nullptr) return Status::failed_precondition("green-context catalog not built");
  const DriverApi& api = *catalog.api_;
  if (tpcs.empty()) return Status::invalid_argument("an empty TPC set cannot hold a green context");
  const sched::TpcSet missing = tpcs - catalog.tpcs();
  if (!missing.empty()) {
    return Status::invalid_argument("TPC(s) " + missing.to_string() +
                                    " are in no green-context group (available: " + catalog.tpcs().to_string() + ")");
  }
  std::vector<CUdevResource> wanted;
  for (std::size_t g = 0; g < catalog.groups_.size(); ++g) {
    if (tpcs.test(catalog.tpc_[g])) wanted.push_back(catalog.groups_[g]);
  }
  const auto t0 = std::chrono::steady_clock::now();
  CUdevResourceDesc desc = nullptr;
  if (CUresult r = api.cuDevResourceGenerateDesc(&desc, wanted.data(), static_cast<unsigned>(wanted.size()));
      r != CUDA_SUCCESS) {
    return api.check(r, "cuDevResourceGenerateDesc");
  }
  std::unique_ptr<GreenPartition> p(new GreenPartition());
  p->api_ = &api;
  p->tpcs_ = tpcs;
  if (CUresult r = api.cuGreenCtxCreate(&p->green_, desc, catalog.device_, CU_GREEN_CTX_DEFAULT_STREAM);
      r != CUDA_SUCCESS) {
    return api.check(r, "cuGreenCtxCreate");
  }
  p->creation_ms_ = ms_since(t0);
  if (CUresult r = api.cuCtxFromGreenCtx(&p->ctx_, p->green_); r != CUDA_SUCCESS) {
    return api.check(r, "cuCtxFromGreenCtx");
  }
  return p;
}

GreenPartition::~GreenPartition() {
  if (api_ != nullptr && green_ != nullptr) api_->cuGreenCtxDestroy(green_);
}

Result<CUstream> GreenPartition::create_stream(unsigned flags, int priority) {
  if (api_ == nullptr || green_ == nullptr) return Status::failed_precondition("green partition not created");
  CUstream s = nullptr;
  if (CUresult r = api_->cuGreenCtxStreamCreate(&s, green_, flags | CU_STREAM_NON_BLOCKING, priority);
      r != CUDA_SUCCESS) {
    return api_->check(r, "cuGreenCtxStreamCreate");
  }
  return s;
}

Result<ConfinementCheck> check_green_confinement(const GreenTpcCatalog& catalog, const sched::TpcSet& tpcs,
                                                 const SmidLaunch& launch) {
  if (catalog.kernel_ == nullptr) return Status::failed_precondition("green-context catalog not built");
  ConfinementCheck check;
  check.backend = tpc_backend_name(TpcBackend::kGreenContext);
  check.tpcs = tpcs.to_string();
  tpcs.for_each([&](int t) {
    check.expected.insert(2 * t);
    check.expected.insert(2 * t + 1);
  });
  auto part = GreenPartition::create(catalog, tpcs);
  if (!part) return part.status();
  check.setup_ms = (*part)->creation_ms();
  auto stream = (*part)->create_stream();
  if (!stream) return stream.status();
  auto seen = catalog.kernel_->run(*stream, launch);
  if (!seen) return seen.status();
  catalog.api_->cuStreamDestroy(*stream);
  check.seen = std::move(*seen);
  return check;
}

}  // namespace lithos::gpu
