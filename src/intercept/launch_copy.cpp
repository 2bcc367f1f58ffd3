#include "intercept/cuda_abi.hpp"  // first: cuda.h in ABI mode

#include "intercept/launch_copy.hpp"

#include <algorithm>
#include <cstring>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <utility>

#include "intercept/real_driver.hpp"

namespace lithos::intercept {

namespace {

struct Param {
  std::size_t offset = 0;
  std::size_t size = 0;
};
// A function's parameters; `known` false: the driver could not say.
struct Layout {
  bool known = false;
  std::vector<Param> params;
};

// Kernels of thousands of parameters do not exist; the bound keeps a driver
// that never says "no more" from looping.
constexpr std::size_t kMaxParams = 4096;

Layout query_layout(const void* function) {
  const DriverTable& drv = driver();
  // A launched handle is a CUfunction or a CUkernel cast to one: ask with
  // cuFuncGetParamInfo, then cuKernelGetParamInfo.
  using GetParamInfo = CUresult (*)(void*, std::size_t, std::size_t*, std::size_t*);
  for (const GetParamInfo info : {reinterpret_cast<GetParamInfo>(drv.cuFuncGetParamInfo),
                                  reinterpret_cast<GetParamInfo>(drv.cuKernelGetParamInfo)}) {
    if (info == nullptr) continue;
    Layout l;
    for (std::size_t i = 0; i < kMaxParams; ++i) {
      std::size_t off = 0, size = 0;
      const CUresult r = info(const_cast<void*>(function), i, &off, &size);
      if (r == CUDA_SUCCESS) {
        l.params.push_back({off, size});
        continue;
      }
      // Past the last parameter the driver answers CUDA_ERROR_INVALID_VALUE;
      // for a handle it does not know (or a CUkernel), another error.
      if (r == CUDA_ERROR_INVALID_VALUE) l.known = true;
      break;
    }
    if (l.known) return l;
  }
  return {};
}

// Layouts are shared, not copied, by each launch that reads one (a launch
// holds its layout while it copies; an unload may clear the map meanwhile).
std::mutex g_layout_mu;
std::unordered_map<const void*, std::shared_ptr<const Layout>>& layouts() {
  static auto* m = new std::unordered_map<const void*, std::shared_ptr<const Layout>>();
  return *m;
}

std::shared_ptr<const Layout> layout_of(const void* function) {
  {
    const std::lock_guard<std::mutex> lock(g_layout_mu);
    const auto it = layouts().find(function);
    if (it != layouts().end()) return it->second;
  }
  auto l = std::make_shared<const Layout>(query_layout(function));
  const std::lock_guard<std::mutex> lock(g_layout_mu);
  return layouts().emplace(function, std::move(l)).first->second;
}

}  // namespace

bool extra_param_buffer(void** extra, const void** buffer, const std::size_t** size) {
  *buffer = nullptr;
  *size = nullptr;
  for (int i = 0; i < 64; i += 2) {
    const void* key = extra[i];
    if (key == CU_LAUNCH_PARAM_END) return *buffer != nullptr && *size != nullptr;
    if (key == CU_LAUNCH_PARAM_BUFFER_POINTER) {
      *buffer = extra[i + 1];
    } else if (key == CU_LAUNCH_PARAM_BUFFER_SIZE) {
      *size = static_cast<const std::size_t*>(extra[i + 1]);
    } else {
      return false;  // a key this code does not know
    }
  }
  return false;  // no end within 32 pairs
}

void make_extra_list(void* list[5], void* buffer, std::size_t* size) {
  list[0] = CU_LAUNCH_PARAM_BUFFER_POINTER;
  list[1] = buffer;
  list[2] = CU_LAUNCH_PARAM_BUFFER_SIZE;
  list[3] = size;
  list[4] = CU_LAUNCH_PARAM_END;
}

void LaunchCopy::forget_layouts() noexcept {
  const std::lock_guard<std::mutex> lock(g_layout_mu);
  layouts().clear();
}

bool LaunchCopy::copy_params(const void* function, std::uint32_t count_limit, void** kernel_params, void** extra) {
  has_params_ = false;
  has_extra_ = false;
  if (kernel_params != nullptr) {
    if (function == nullptr) return false;
    const std::shared_ptr<const Layout> layout = layout_of(function);
    if (!layout->known) return false;
    const Layout& l = *layout;
    const std::size_t n = std::min<std::size_t>(l.params.size(), count_limit);
    std::size_t total = 0;
    for (std::size_t i = 0; i < n; ++i) total = std::max(total, l.params[i].offset + l.params[i].size);
    buf_.assign(total, 0);
    ptrs_.assign(n + 1, nullptr);  // + 1: never an empty array
    for (std::size_t i = 0; i < n; ++i) {
      if (kernel_params[i] == nullptr) return false;
      std::memcpy(buf_.data() + l.params[i].offset, kernel_params[i], l.params[i].size);
      ptrs_[i] = buf_.data() + l.params[i].offset;
    }
    has_params_ = true;
    return true;
  }
  if (extra == nullptr) return true;  // no parameters at all
  const void* buffer = nullptr;
  const std::size_t* size = nullptr;
  if (!extra_param_buffer(extra, &buffer, &size)) return false;
  buf_size_ = *size;
  buf_.assign(static_cast<const std::uint8_t*>(buffer), static_cast<const std::uint8_t*>(buffer) + buf_size_);
  if (buf_.empty()) buf_.push_back(0);
  make_extra_list(extra_list_, buf_.data(), &buf_size_);
  has_extra_ = true;
  return true;
}

void LaunchCopy::copy_config(const CUlaunchConfig& config) {
  config_ = config;
  if (config.attrs != nullptr && config.numAttrs > 0) {
    attrs_.assign(config.attrs, config.attrs + config.numAttrs);
    config_.attrs = attrs_.data();
  } else {
    config_.attrs = nullptr;
    config_.numAttrs = 0;
  }
}

}  // namespace lithos::intercept
