// The host time of a kernel launch through whatever libcuda.so.1 the process
// finds (the FAKE driver, tests/intercept/fake_cuda.cpp), with or without
// liblithos.so preloaded: the CPU side of issue 12's "<= 1 us added per hp
// launch" (scripts/daemon/launch_cost_cpu.py compares plain, interposed and
// lithosd tenants).
//
//   lithos_launch_cost_app LAUNCHES BATCHES [CUDA_GRAPH]
//
// Makes BATCHES batches of LAUNCHES cuLaunchKernel calls (function 0x10, 64
// blocks of 256 threads, one stream; with CUDA_GRAPH=1, cuGraphLaunch of one
// instantiated graph instead) and prints one JSON line:
//   {"launches":N,"batches":B,"ns_per_launch":[per batch],"median_ns":M,"min_ns":m}
// Exits 3 with a message on stderr when the driver is missing or a call fails.
#include <cuda.h>
#include <dlfcn.h>
#include <time.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

std::uint64_t now_ns() {
  timespec t{};
  clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<std::uint64_t>(t.tv_sec) * 1'000'000'000ULL + static_cast<std::uint64_t>(t.tv_nsec);
}

int fail(const char* what) {
  std::fprintf(stderr, "launch_cost_app: %s\n", what);
  return 3;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) return fail("usage: lithos_launch_cost_app LAUNCHES BATCHES [CUDA_GRAPH]");
  const long launches = std::atol(argv[1]);
  const long batches = std::atol(argv[2]);
  const bool graph = argc > 3 && std::atol(argv[3]) != 0;
  if (launches <= 0 || batches <= 0) return fail("LAUNCHES and BATCHES must be positive");
  void* drv = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
  if (drv == nullptr) return fail("no libcuda.so.1");
  using InitFn = CUresult (*)(unsigned);
  using LaunchFn = CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                CUstream, void**, void**);
  using InstantiateFn = CUresult (*)(CUgraphExec*, CUgraph, unsigned long long);
  using GraphLaunchFn = CUresult (*)(CUgraphExec, CUstream);
  auto init = reinterpret_cast<InitFn>(::dlsym(drv, "cuInit"));
  auto launch = reinterpret_cast<LaunchFn>(::dlsym(drv, "cuLaunchKernel"));
  auto instantiate = reinterpret_cast<InstantiateFn>(::dlsym(drv, "cuGraphInstantiateWithFlags"));
  auto graph_launch = reinterpret_cast<GraphLaunchFn>(::dlsym(drv, "cuGraphLaunch"));
  auto sync = reinterpret_cast<CUresult (*)(CUstream)>(::dlsym(drv, "cuStreamSynchronize"));
  if (init == nullptr || launch == nullptr || sync == nullptr ||
      (graph && (instantiate == nullptr || graph_launch == nullptr)))
    return fail("the driver lacks an entry point");
  if (init(0) != CUDA_SUCCESS) return fail("cuInit failed");
  const auto stream = reinterpret_cast<CUstream>(0x5100);
  const auto function = reinterpret_cast<CUfunction>(0x10);
  CUgraphExec exec = nullptr;
  if (graph && instantiate(&exec, reinterpret_cast<CUgraph>(0x6000), 0) != CUDA_SUCCESS)
    return fail("cuGraphInstantiateWithFlags failed");
  auto one = [&] {
    return graph ? graph_launch(exec, stream) : launch(function, 64, 1, 1, 256, 1, 1, 0, stream, nullptr, nullptr);
  };
  // Warm-up: the first launches attach lithos, register, open the stream.
  for (int i = 0; i < 1000; ++i) {
    if (one() != CUDA_SUCCESS) return fail("a launch failed");
  }
  if (sync(stream) != CUDA_SUCCESS) return fail("cuStreamSynchronize failed");
  std::vector<double> per;
  for (long b = 0; b < batches; ++b) {
    const std::uint64_t t0 = now_ns();
    for (long i = 0; i < launches; ++i) {
      if (one() != CUDA_SUCCESS) return fail("a launch failed");
    }
    per.push_back(static_cast<double>(now_ns() - t0) / static_cast<double>(launches));
    if (sync(stream) != CUDA_SUCCESS) return fail("cuStreamSynchronize failed");
  }
  std::string list;
  for (double v : per) list += (list.empty() ? "" : ",") + std::to_string(v);
  std::vector<double> sorted = per;
  std::sort(sorted.begin(), sorted.end());
  double median = 0.0;
  double least = 0.0;
  for (std::size_t i = 0; i < sorted.size(); ++i) {
    if (i == 0) least = sorted.at(i);
    if (i == sorted.size() / 2) median = sorted.at(i);
  }
  std::printf(
      "{\"launches\":%ld,\"batches\":%ld,\"graph\":%s,\"ns_per_launch\":[%s],\"median_ns\":%.1f,\"min_ns\":%.1f}\n",
      launches, batches, graph ? "true" : "false", list.c_str(), median, least);
  return 0;
}
