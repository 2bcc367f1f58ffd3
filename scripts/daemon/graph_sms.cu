// graph_sms: on which SMs a CUDA graph's kernel runs, replay after replay,
// for the set a best-effort graph launched whole is built with
// (docs/daemon.md, "CUDA graphs"; scripts/daemon/gpu-daemon.sh, phase
// graphsms).
//
//   graph_sms [upload|launch] [REPLAYS]
//
// Captures one kernel of 1056 blocks (8 per SM), each writing the SM it
// ran on and spinning 20 us, into a graph; instantiates it; with `upload`
// uploads the exec (cuGraphUpload, which builds its launch descriptors as a
// first launch does) before the first launch; replays it REPLAYS times
// (default 3), and prints one JSON line: the SMs each replay used.
//
// Build: nvcc -O2 -arch=sm_90 -o graph_sms graph_sms.cu
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string>
#include <vector>

namespace {

__global__ void where(unsigned* out) {
  unsigned sm;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
  if (threadIdx.x == 0) out[blockIdx.x] = sm;
  unsigned long long t0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  for (;;) {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    if (t - t0 > 20000) break;
  }
}

#define CHECK(x)                                                                                     \
  do {                                                                                               \
    cudaError_t e_ = (x);                                                                            \
    if (e_ != cudaSuccess) {                                                                         \
      std::fprintf(stderr, "graph_sms: %s: %s (line %d)\n", #x, cudaGetErrorString(e_), __LINE__); \
      return 1;                                                                                      \
    }                                                                                                \
  } while (0)

}  // namespace

int main(int argc, char** argv) {
  const bool upload = argc > 1 && std::strcmp(argv[1], "upload") == 0;
  if (argc > 1 && !upload && std::strcmp(argv[1], "launch") != 0) {
    std::fprintf(stderr, "usage: graph_sms [upload|launch] [REPLAYS]\n");
    return 2;
  }
  const int replays = argc > 2 ? std::atoi(argv[2]) : 3;
  int sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const unsigned blocks = static_cast<unsigned>(sms) * 8;
  unsigned* d = nullptr;
  CHECK(cudaMalloc(&d, blocks * sizeof(unsigned)));
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaGraph_t g;
  cudaGraphExec_t x;
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  where<<<blocks, 64, 0, s>>>(d);
  CHECK(cudaStreamEndCapture(s, &g));
  CHECK(cudaGraphInstantiate(&x, g, 0));
  if (upload) CHECK(cudaGraphUpload(x, s));
  std::string out = std::string("{\"upload\":") + (upload ? "true" : "false") + ",\"sms\":" + std::to_string(sms) +
                    ",\"replays\":[";
  std::vector<unsigned> h(blocks);
  for (int r = 0; r < replays; ++r) {
    CHECK(cudaMemset(d, 0xff, blocks * sizeof(unsigned)));
    CHECK(cudaGraphLaunch(x, s));
    CHECK(cudaStreamSynchronize(s));
    CHECK(cudaMemcpy(h.data(), d, blocks * sizeof(unsigned), cudaMemcpyDeviceToHost));
    std::set<unsigned> used(h.begin(), h.end());
    out += (r ? "," : "") + std::string("{\"count\":") + std::to_string(used.size()) + ",\"ids\":[";
    bool first = true;
    for (unsigned v : used) {
      out += (first ? "" : ",") + std::to_string(v);
      first = false;
    }
    out += "]}";
  }
  out += "]}";
  std::printf("%s\n", out.c_str());
  return 0;
}
