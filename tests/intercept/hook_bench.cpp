// The host cost of lithos's own work around one launch, isolated from the
// driver: over the FAKE driver, alternating batches of cuLaunchKernel through
// the hook (dlsym on the driver's handle, as PyTorch gets it) and straight to
// the fake's function. Both fire the fake's descriptor callback when one is
// subscribed, so the difference is the hook: frame, mask choice, counters.
// Not a test (timings); run it by hand:
//   LD_PRELOAD=lib/liblithos.so LD_LIBRARY_PATH=tests/intercept/fake_driver
//     [LITHOS_SLOT_MAP=.../fake-slot-map.txt LITHOS_TPC_SET=1-2] bin/intercept_hook_bench
#include <cuda.h>
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

using LaunchFn = CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                              CUstream, void**, void**);

int main() {
  void* h = dlopen("libcuda.so.1", RTLD_NOW);
  if (h == nullptr) return 1;
  auto hooked = reinterpret_cast<LaunchFn>(dlsym(h, "cuLaunchKernel"));
  auto address_of = reinterpret_cast<void* (*)(const char*)>(dlsym(h, "fake_address_of"));
  auto direct = reinterpret_cast<LaunchFn>(address_of("cuLaunchKernel"));
  constexpr int kBatches = 41, kPer = 20000;
  std::vector<double> a, b;
  for (int r = 0; r < kBatches; ++r) {
    for (int which = 0; which < 2; ++which) {
      LaunchFn fn = which == 0 ? hooked : direct;
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < kPer; ++i) fn(nullptr, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr);
      const auto t1 = std::chrono::steady_clock::now();
      (which == 0 ? a : b).push_back(std::chrono::duration<double, std::nano>(t1 - t0).count() / kPer);
    }
  }
  std::sort(a.begin(), a.end());
  std::sort(b.begin(), b.end());
  std::printf("{\"hooked_ns\":%.1f,\"direct_ns\":%.1f,\"added_ns\":%.1f,\"same_hook\":%s}\n", a[a.size() / 2],
              b[b.size() / 2], a[a.size() / 2] - b[b.size() / 2], hooked != direct ? "false" : "true");
  return 0;
}
