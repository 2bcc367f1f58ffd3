// Host cost of a kernel launch, for the overhead comparison with and without
// liblithos.so: an empty kernel launched in batches, alternately through the
// runtime (<<<>>>, which reaches the driver through cuGetProcAddress) and the
// driver API (cuLaunchKernel, bound to liblithos.so's export when
// preloaded). Each batch's submission loop is timed alone (no
// synchronisation inside it) and divided by its launches.
//   icpt_bench <batches> <launches-per-batch>
// Prints one JSON line with the per-batch values and their medians (us).
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

__global__ void empty_kernel(int* p) {
  if (p != nullptr && threadIdx.x == 1024) *p = 1;
}

static double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int main(int argc, char** argv) {
  const int batches = argc > 1 ? std::atoi(argv[1]) : 40;
  const int per = argc > 2 ? std::atoi(argv[2]) : 200;
  cudaFree(nullptr);
  cudaStream_t s;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  CUfunction f;
  if (cudaGetFuncBySymbol(&f, reinterpret_cast<const void*>(empty_kernel)) != cudaSuccess) return 2;
  int* nullp = nullptr;
  void* args[] = {&nullp};
  for (int i = 0; i < 1000; ++i) empty_kernel<<<1, 32, 0, s>>>(nullptr);  // warm-up
  for (int i = 0; i < 1000; ++i) cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, reinterpret_cast<CUstream>(s), args, nullptr);
  cudaStreamSynchronize(s);
  std::vector<double> rt, drv;
  for (int b = 0; b < batches; ++b) {
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < per; ++i) empty_kernel<<<1, 32, 0, s>>>(nullptr);
    auto t1 = std::chrono::steady_clock::now();
    cudaStreamSynchronize(s);
    rt.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / per);
    t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < per; ++i) cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, reinterpret_cast<CUstream>(s), args, nullptr);
    t1 = std::chrono::steady_clock::now();
    cudaStreamSynchronize(s);
    drv.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / per);
  }
  if (cudaGetLastError() != cudaSuccess) return 1;
  std::printf("{\"runtime_us\":[");
  for (size_t i = 0; i < rt.size(); ++i) std::printf("%s%.4f", i ? "," : "", rt[i]);
  std::printf("],\"driver_us\":[");
  for (size_t i = 0; i < drv.size(); ++i) std::printf("%s%.4f", i ? "," : "", drv[i]);
  std::printf("],\"median_us\":%.4f,\"runtime_median_us\":%.4f,\"driver_median_us\":%.4f}\n",
              median(rt), median(rt), median(drv));
  return 0;
}
