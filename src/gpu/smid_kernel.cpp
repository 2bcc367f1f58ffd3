#include "gpu/smid_kernel.hpp"

#include <time.h>

#include <array>
#include <chrono>
#include <cstdint>

namespace lithos::gpu {

namespace {

// Bitmap words: one bit per SM id, room for 1024 SMs.
constexpr unsigned kBitmapWords = 32;

// lithos_smid(u32* bitmap, s64 spin_cycles): every thread spins for
// spin_cycles clocks (so that blocks occupy their SMs long enough for the
// launch to spread over every SM it may use), then thread 0 of each block
// sets bit %smid of the bitmap. PTX ISA 7.0 for sm_75 and newer; the driver
// JIT-compiles it for the device at load time.
constexpr char kSmidPtx[] = R"PTX(
.version 7.0
.target sm_75
.address_size 64

.visible .entry lithos_smid(
    .param .u64 lithos_smid_bitmap,
    .param .u64 lithos_smid_spin
)
{
    .reg .pred %p<4>;
    .reg .b32 %r<8>;
    .reg .b64 %rd<9>;

    ld.param.u64 %rd1, [lithos_smid_bitmap];
    ld.param.u64 %rd2, [lithos_smid_spin];
    mov.u64 %rd3, %clock64;
$L_spin:
    mov.u64 %rd4, %clock64;
    sub.s64 %rd5, %rd4, %rd3;
    setp.lt.s64 %p1, %rd5, %rd2;
    @%p1 bra $L_spin;
    mov.u32 %r1, %tid.x;
    setp.ne.s32 %p2, %r1, 0;
    @%p2 bra $L_done;
    mov.u32 %r2, %smid;
    setp.ge.u32 %p3, %r2, 1024;
    @%p3 bra $L_done;
    shr.u32 %r3, %r2, 5;
    and.b32 %r4, %r2, 31;
    mov.u32 %r5, 1;
    shl.b32 %r6, %r5, %r4;
    cvta.to.global.u64 %rd6, %rd1;
    mul.wide.u32 %rd7, %r3, 4;
    add.s64 %rd8, %rd6, %rd7;
    atom.global.or.b32 %r7, [%rd8], %r6;
$L_done:
    ret;
}
)PTX";

}  // namespace

Result<SmidKernel> SmidKernel::load(const DriverApi& api, int sm_count) {
  SmidKernel k;
  k.api_ = &api;
  k.sm_count_ = sm_count;
  if (CUresult r = api.cuLibraryLoadData(&k.library_, kSmidPtx, nullptr, nullptr, 0, nullptr, nullptr, 0);
      r != CUDA_SUCCESS) {
    return api.check(r, "cuLibraryLoadData(%smid kernel PTX)");
  }
  if (CUresult r = api.cuLibraryGetKernel(&k.kernel_, k.library_, "lithos_smid"); r != CUDA_SUCCESS) {
    return api.check(r, "cuLibraryGetKernel(lithos_smid)");
  }
  if (CUresult r = api.cuMemAlloc(&k.bitmap_, kBitmapWords * sizeof(std::uint32_t)); r != CUDA_SUCCESS) {
    return api.check(r, "cuMemAlloc(SM bitmap)");
  }
  return k;
}

SmidKernel::SmidKernel(SmidKernel&& o) noexcept
    : api_(o.api_),
      library_(o.library_),
      kernel_(o.kernel_),
      bitmap_(o.bitmap_),
      sm_count_(o.sm_count_),
      hung_(o.hung_) {
  o.library_ = nullptr;
  o.kernel_ = nullptr;
  o.bitmap_ = 0;
}

SmidKernel::~SmidKernel() {
  // After a hung launch the context is wedged: leave everything to process exit.
  if (api_ == nullptr || hung_) return;
  if (bitmap_ != 0) api_->cuMemFree(bitmap_);
  if (library_ != nullptr) api_->cuLibraryUnload(library_);
}

Result<std::set<int>> SmidKernel::run(CUstream stream, const SmidLaunch& launch,
                                      const std::function<void(bool)>& around_launch) {
  if (hung_) return Status::failed_precondition("an earlier %smid launch never finished; the context is unusable");
  if (api_ == nullptr || kernel_ == nullptr) return Status::failed_precondition("%smid kernel not loaded");
  const DriverApi& api = *api_;
  const int blocks = launch.blocks > 0 ? launch.blocks : 16 * (sm_count_ > 0 ? sm_count_ : 1);
  if (CUresult r = api.cuMemsetD32Async(bitmap_, 0, kBitmapWords, stream); r != CUDA_SUCCESS) {
    return api.check(r, "cuMemsetD32Async(SM bitmap)");
  }
  CUdeviceptr bitmap = bitmap_;
  long long spin = launch.spin_cycles;
  void* args[] = {&bitmap, &spin};
  if (around_launch) around_launch(true);
  const CUresult launched =
      api.cuLaunchKernel(reinterpret_cast<CUfunction>(kernel_), static_cast<unsigned>(blocks), 1, 1,
                         static_cast<unsigned>(launch.threads), 1, 1, 0, stream, args, nullptr);
  if (around_launch) around_launch(false);
  if (launched != CUDA_SUCCESS) return api.check(launched, "cuLaunchKernel(%smid kernel)");

  // Never wait blindly: a launch whose enabled slots are all dead never ends.
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::duration<double>(launch.timeout_s > 0 ? launch.timeout_s : 2.0);
  while (true) {
    const CUresult q = api.cuStreamQuery(stream);
    if (q == CUDA_SUCCESS) break;
    if (q != CUDA_ERROR_NOT_READY) return api.check(q, "%smid kernel");
    if (std::chrono::steady_clock::now() > deadline) {
      hung_ = true;
      return Status::unavailable("the %smid launch did not finish within " + std::to_string(launch.timeout_s) +
                                 " s (a mask with no live slot hangs forever); the context is unusable");
    }
    const timespec pause{0, 20000};  // 20 us
    nanosleep(&pause, nullptr);
  }
  std::array<std::uint32_t, kBitmapWords> words{};
  if (CUresult r = api.cuMemcpyDtoH(words.data(), bitmap_, sizeof words); r != CUDA_SUCCESS) {
    return api.check(r, "cuMemcpyDtoH(SM bitmap)");
  }
  std::set<int> sms;
  for (unsigned w = 0; w < kBitmapWords; ++w) {
    for (unsigned b = 0; b < 32; ++b) {
      if (((words[w] >> b) & 1U) != 0) sms.insert(static_cast<int>(w * 32 + b));
    }
  }
  return sms;
}

}  // namespace lithos::gpu
