// mps_cost: where an MPS client's time goes with nothing beside it. A
// service that replays a CUDA graph of small kernels (inference-stacking's
// Llama decode) runs 1.3x slower at P50 as an MPS client than as a plain
// process (docs/results/2026-11-26-h100-daemon-5c1ed07-floors, section 1):
// is that a cost per kernel (launch gaps), per replay, or in the kernels'
// own time (memory, arithmetic)? Run it as a plain process and as an MPS
// client, and compare line by line (scripts/daemon/gpu-daemon.sh, phase
// mpscost).
//
//   mps_cost [REPS]   first one thread's memory latency through 1 GiB at
//                     strides of 4 KiB to 64 MiB (line "chase latency_ns
//                     STRIDE_KIB p50 p90 p50"); then for each kernel kind
//                     (empty: 1 block that does nothing; small: 32 blocks
//                     reading two 16 Ki-float buffers and writing a third,
//                     as PyTorch's elementwise kernels at batch 8;
//                     mixed: the same as eight functions in turn, each
//                     reading what the one before wrote; mem: a grid that streams 32 MiB through
//                     every SM; alu: a grid of dependent FMAs over every
//                     SM; tiny: one block over 8 floats, each kernel
//                     reading the one before's output; param256, bigparam,
//                     param4k: small's work with a 256 B, 2 KiB, 4 KiB
//                     argument;
//                     local: small's work through a local-memory array;
//                     smemmix: small in turn with a kernel that takes
//                     160 KiB of shared memory on every SM; smemmix_pinned:
//                     the same with both preferring the most shared memory
//                     (carveout 100)) and for chains of 1, 16 and 256 kernels: the
//                     chain launched kernel by kernel on a stream, and the
//                     chain captured as one CUDA graph and replayed; each
//                     timed REPS times (default 200) from the first launch
//                     to the stream's completion. Prints one line each:
//                     kind way n p50_us p90_us per_kernel_us
//                     and the GPU's time of one kernel of each kind alone
//                     (events), so that the gaps between kernels can be
//                     read off.
//
// Build: nvcc -O2 -arch=sm_90 -o mps_cost mps_cost.cu
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

__global__ void empty_kernel(int* sink) {
  if (threadIdx.x == 1024) sink[0] = 1;  // never: the kernel does nothing
}

// Streams n floats from src to dst, every SM busy (a memory-bound kernel).
__global__ void mem_kernel(const float4* src, float4* dst, size_t n) {
  for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    dst[i] = src[i];
}

// A small elementwise kernel, as PyTorch's at batch 8 x 2048: 16 Ki
// floats, 32 blocks of 128 threads, three buffers (latency-bound: a few
// dependent memory accesses per thread, no bandwidth to speak of).
__global__ void small_kernel(const float* a, const float* b, float* c, int n) {
  const int i = blockIdx.x * blockDim.x * 4 + threadIdx.x;
  for (int k = 0; k < 4; ++k)
    if (i + k * blockDim.x < n) c[i + k * blockDim.x] = a[i + k * blockDim.x] * 0.5f + b[i + k * blockDim.x];
}

// The same as eight different functions (code of its own each), launched
// in turn by kind "mixed": a PyTorch graph alternates between dozens of
// kernels, where "small" repeats one.
template <int V>
__global__ void small_variant(const float* a, const float* b, float* c, int n) {
  const int i = blockIdx.x * blockDim.x * 4 + threadIdx.x;
  for (int k = 0; k < 4; ++k)
    if (i + k * blockDim.x < n) c[i + k * blockDim.x] = a[i + k * blockDim.x] * (0.5f + V) + b[i + k * blockDim.x];
}

// One thread chasing pointers through a buffer, `stride` bytes apart,
// `hops` dependent loads: the memory latency seen at that stride (at 2 MiB
// and more, every hop may miss the TLB).
__global__ void chase_kernel(const unsigned long long* buf, int hops, unsigned long long* sink) {
  unsigned long long p = 0;
  for (int i = 0; i < hops; ++i) p = buf[p];
  sink[0] = p;
}

// A kernel that takes a W-word argument (kinds param256, bigparam, param4k:
// 256 B, 2 KiB, 4 KiB) and reads a word of it chosen at run time (PyTorch's TensorIterator kernels take offset calculators of
// hundreds of bytes to kilobytes; "small" takes 28 bytes).
template <int W>
struct BigArgs {
  int words[W];
};
template <int W>
__global__ void bigparam_kernel(const float* a, const float* b, float* c, int n, BigArgs<W> args) {
  const int i = blockIdx.x * blockDim.x * 4 + threadIdx.x;
  const float w = static_cast<float>(args.words[(threadIdx.x * 37) & (W - 1)]);
  for (int k = 0; k < 4; ++k)
    if (i + k * blockDim.x < n) c[i + k * blockDim.x] = a[i + k * blockDim.x] * w + b[i + k * blockDim.x];
}
template <int W>
void launch_bigparam(const float* a, const float* b, float* c, cudaStream_t s) {
  static const BigArgs<W> args = [] {
    BigArgs<W> x{};
    for (int i = 0; i < W; ++i) x.words[i] = i & 3;
    return x;
  }();
  bigparam_kernel<W><<<32, 128, 0, s>>>(a, b, c, 16384, args);
}

// One block of 128 threads over 8 floats, reading what the kernel before
// wrote (as RMSNorm's rsqrt and + eps at batch 8).
__global__ void tiny_kernel(const float* a, float* c) {
  if (threadIdx.x < 8) c[threadIdx.x] = a[threadIdx.x] * 0.5f + 1.0f;
}

// The same work through a thread-local array indexed at run time (local
// memory: the compiler cannot keep it in registers), as kernels that index
// an argument array by a runtime dimension do.
__global__ void local_kernel(const float* a, const float* b, float* c, int n, int pick) {
  volatile float scratch[16];  // volatile: kept in local memory
  const int i = blockIdx.x * blockDim.x * 4 + threadIdx.x;
  for (int k = 0; k < 16; ++k) scratch[k] = (i + k * blockDim.x < n) ? a[(i + k * blockDim.x) % n] : 0.0f;
  for (int k = 0; k < 4; ++k)
    if (i + k * blockDim.x < n) c[i + k * blockDim.x] = scratch[(pick + k * 5 + threadIdx.x) & 15] + b[i + k * blockDim.x];
}

// A kernel that wants most of an SM's shared memory (as the GEMMs and
// attention between a PyTorch graph's small kernels do): kind "smemmix"
// alternates smem_kernel<0> with "small", so every SM's L1/shared split
// changes between consecutive kernels; "smemmix_pinned" runs
// smem_kernel<1>, a function of its own whose carveout main() pins.
template <int Pinned>
__global__ void smem_kernel(float* c, int n) {
  extern __shared__ float tile[];
  tile[threadIdx.x] = static_cast<float>(threadIdx.x);
  __syncthreads();
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = tile[(threadIdx.x + 1) % blockDim.x];
}
constexpr int kSmemBytes = 160 << 10;

// Dependent FMAs on every SM (an arithmetic kernel).
__global__ void alu_kernel(int iters, float* sink) {
  float x = threadIdx.x;
  for (int i = 0; i < iters; ++i) x = x * 0.999f + 1.0f;
  if (x == 12345.0f) sink[0] = x;
}

#define CHECK(x)                                                                          \
  do {                                                                                    \
    cudaError_t e_ = (x);                                                                 \
    if (e_ != cudaSuccess) {                                                              \
      std::fprintf(stderr, "mps_cost: %s: %s (line %d)\n", #x, cudaGetErrorString(e_), __LINE__); \
      std::exit(1);                                                                       \
    }                                                                                     \
  } while (0)

struct Buffers {
  float4* src = nullptr;
  float4* dst = nullptr;
  size_t n = 0;
  int* isink = nullptr;
  float* fsink = nullptr;
  float *sa = nullptr, *sb = nullptr, *sc = nullptr;  // small_kernel's, 16 Ki floats each, far apart
};

enum class Kind {
  kEmpty,
  kSmall,
  kMixed,
  kMem,
  kAlu,
  kTiny,
  kParam256,
  kBigParam,
  kParam4k,
  kLocal,
  kSmemMix,
  kSmemMixPinned
};
const char* name_of(Kind k) {
  switch (k) {
    case Kind::kEmpty: return "empty";
    case Kind::kSmall: return "small";
    case Kind::kMixed: return "mixed";
    case Kind::kMem: return "mem";
    case Kind::kAlu: return "alu";
    case Kind::kTiny: return "tiny";
    case Kind::kParam256: return "param256";
    case Kind::kBigParam: return "bigparam";
    case Kind::kParam4k: return "param4k";
    case Kind::kSmemMixPinned: return "smemmix_pinned";
    case Kind::kLocal: return "local";
    default: return "smemmix";
  }
}

void launch(Kind k, const Buffers& b, int sms, cudaStream_t s) {
  static unsigned turn = 0;
  switch (k) {
    case Kind::kMixed:
      switch (turn++ % 8) {
        case 0: small_variant<0><<<32, 128, 0, s>>>(b.sa, b.sb, b.sc, 16384); break;
        case 1: small_variant<1><<<32, 128, 0, s>>>(b.sb, b.sc, b.sa, 16384); break;
        case 2: small_variant<2><<<32, 128, 0, s>>>(b.sc, b.sa, b.sb, 16384); break;
        case 3: small_variant<3><<<32, 128, 0, s>>>(b.sa, b.sb, b.sc, 16384); break;
        case 4: small_variant<4><<<32, 128, 0, s>>>(b.sb, b.sc, b.sa, 16384); break;
        case 5: small_variant<5><<<32, 128, 0, s>>>(b.sc, b.sa, b.sb, 16384); break;
        case 6: small_variant<6><<<32, 128, 0, s>>>(b.sa, b.sb, b.sc, 16384); break;
        default: small_variant<7><<<32, 128, 0, s>>>(b.sb, b.sc, b.sa, 16384); break;
      }
      break;
    case Kind::kEmpty:
      empty_kernel<<<1, 32, 0, s>>>(b.isink);
      break;
    case Kind::kSmall:
      small_kernel<<<32, 128, 0, s>>>(b.sa, b.sb, b.sc, 16384);
      break;
    case Kind::kMem:
      mem_kernel<<<sms * 4, 512, 0, s>>>(b.src, b.dst, b.n);
      break;
    case Kind::kAlu:
      alu_kernel<<<sms * 4, 256, 0, s>>>(2000, b.fsink);
      break;
    case Kind::kTiny:
      if (turn++ % 2 == 0)
        tiny_kernel<<<1, 128, 0, s>>>(b.sa, b.sb);
      else
        tiny_kernel<<<1, 128, 0, s>>>(b.sb, b.sa);
      break;
    case Kind::kParam256: launch_bigparam<64>(b.sa, b.sb, b.sc, s); break;
    case Kind::kBigParam: launch_bigparam<512>(b.sa, b.sb, b.sc, s); break;
    case Kind::kParam4k: launch_bigparam<1024>(b.sa, b.sb, b.sc, s); break;
    case Kind::kLocal:
      local_kernel<<<32, 128, 0, s>>>(b.sa, b.sb, b.sc, 16384, static_cast<int>(turn++ & 7));
      break;
    case Kind::kSmemMix:
      if (turn++ % 2 == 0)
        smem_kernel<0><<<sms, 256, kSmemBytes, s>>>(b.sc, 16384);
      else
        small_kernel<<<32, 128, 0, s>>>(b.sa, b.sb, b.sc, 16384);
      break;
    case Kind::kSmemMixPinned:
      if (turn++ % 2 == 0)
        smem_kernel<1><<<sms, 256, kSmemBytes, s>>>(b.sc, 16384);
      else
        small_variant<100><<<32, 128, 0, s>>>(b.sa, b.sb, b.sc, 16384);
      break;
  }
}

double pct(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(q * (v.size() - 1) + 0.5))];
}

double now_us() {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::atoi(argv[1]) : 200;
  if (reps < 1) {
    std::fprintf(stderr, "usage: mps_cost [REPS]\n");
    return 2;
  }
  int sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  int mps = 0;
  cudaDeviceGetAttribute(&mps, static_cast<cudaDeviceAttr>(133), 0);  // CU_DEVICE_ATTRIBUTE_MPS_ENABLED
  const char* conns = std::getenv("CUDA_DEVICE_MAX_CONNECTIONS");
  std::printf("# mps_cost: %d SMs, MPS client %s, CUDA_DEVICE_MAX_CONNECTIONS=%s, reps %d\n", sms, mps ? "yes" : "no",
              conns ? conns : "(unset)", reps);
  Buffers b;
  b.n = (32u << 20) / sizeof(float4);
  CHECK(cudaMalloc(&b.src, b.n * sizeof(float4)));
  CHECK(cudaMalloc(&b.dst, b.n * sizeof(float4)));
  CHECK(cudaMemset(b.src, 0, b.n * sizeof(float4)));
  CHECK(cudaMalloc(&b.isink, 64));
  CHECK(cudaMalloc(&b.fsink, 64));
  // small_kernel's buffers 64 MiB apart (as PyTorch's activations and
  // weights sit in separate segments).
  float* small_pool = nullptr;
  CHECK(cudaMalloc(&small_pool, 3 * (64u << 20)));
  CHECK(cudaMemset(small_pool, 0, 3 * (64u << 20)));
  b.sa = small_pool;
  b.sb = small_pool + (64u << 20) / sizeof(float);
  b.sc = small_pool + 2 * ((64u << 20) / sizeof(float));
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaEvent_t e0, e1;
  CHECK(cudaEventCreate(&e0));
  CHECK(cudaEventCreate(&e1));

  // Memory latency: one thread's dependent loads through 1 GiB at strides
  // of 4 KiB to 64 MiB (ns per load, the kernel's GPU time by events).
  {
    const size_t bytes = size_t(1) << 30;
    unsigned long long* buf = nullptr;
    unsigned long long* sink = nullptr;
    CHECK(cudaMalloc(&buf, bytes));
    CHECK(cudaMalloc(&sink, 64));
    for (size_t stride : {size_t(4) << 10, size_t(64) << 10, size_t(2) << 20, size_t(64) << 20}) {
      const size_t words = bytes / sizeof(unsigned long long), step = stride / sizeof(unsigned long long);
      std::vector<unsigned long long> host(words / step);
      // A ring through every stride-th word, in a scrambled order.
      const size_t m = host.size();
      std::vector<size_t> order(m);
      for (size_t i = 0; i < m; ++i) order[i] = (i * 7919) % m;
      std::vector<unsigned long long> next(words, 0);
      for (size_t i = 0; i < m; ++i) next[order[i] * step] = order[(i + 1) % m] * step;
      CHECK(cudaMemcpy(buf, next.data(), bytes, cudaMemcpyHostToDevice));
      const int hops = 4096;
      std::vector<double> ns;
      for (int r = 0; r < 13; ++r) {
        CHECK(cudaEventRecord(e0, s));
        chase_kernel<<<1, 1, 0, s>>>(buf, hops, sink);
        CHECK(cudaEventRecord(e1, s));
        CHECK(cudaEventSynchronize(e1));
        float ms = 0;
        CHECK(cudaEventElapsedTime(&ms, e0, e1));
        if (r >= 3) ns.push_back(ms * 1e6 / hops);
      }
      std::printf("chase latency_ns %zu %.1f %.1f %.1f\n", stride >> 10, pct(ns, 0.5), pct(ns, 0.9), pct(ns, 0.5));
    }
    CHECK(cudaFree(buf));
    CHECK(cudaFree(sink));
  }

  CHECK(cudaFuncSetAttribute(smem_kernel<0>, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
  CHECK(cudaFuncSetAttribute(smem_kernel<1>, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
  // smemmix_pinned: both kernels prefer the most shared memory, so no SM
  // changes its L1/shared split between them.
  CHECK(cudaFuncSetAttribute(smem_kernel<1>, cudaFuncAttributePreferredSharedMemoryCarveout, 100));
  CHECK(cudaFuncSetAttribute(small_variant<100>, cudaFuncAttributePreferredSharedMemoryCarveout, 100));
  const char* only = std::getenv("MPS_COST_KINDS");  // e.g. "tiny,smemmix": these kinds only
  for (Kind k : {Kind::kEmpty, Kind::kSmall, Kind::kMixed, Kind::kMem, Kind::kAlu, Kind::kTiny, Kind::kParam256,
                 Kind::kBigParam, Kind::kParam4k, Kind::kLocal, Kind::kSmemMix, Kind::kSmemMixPinned}) {
    if (only != nullptr && std::strstr(only, name_of(k)) == nullptr) continue;
    // One kernel's GPU time, by events around it (after a warm-up).
    std::vector<double> one;
    for (int r = 0; r < 50 + reps; ++r) {
      CHECK(cudaEventRecord(e0, s));
      launch(k, b, sms, s);
      CHECK(cudaEventRecord(e1, s));
      CHECK(cudaEventSynchronize(e1));
      float ms = 0;
      CHECK(cudaEventElapsedTime(&ms, e0, e1));
      if (r >= 50) one.push_back(ms * 1000.0);
    }
    std::printf("%s kernel_gpu 1 %.1f %.1f %.2f\n", name_of(k), pct(one, 0.5), pct(one, 0.9), pct(one, 0.5));
    for (int n : {1, 16, 256}) {
      // Kernel by kernel on the stream.
      std::vector<double> t;
      for (int r = 0; r < 10 + reps; ++r) {
        const double a = now_us();
        for (int i = 0; i < n; ++i) launch(k, b, sms, s);
        CHECK(cudaStreamSynchronize(s));
        if (r >= 10) t.push_back(now_us() - a);
      }
      std::printf("%s stream %d %.1f %.1f %.2f\n", name_of(k), n, pct(t, 0.5), pct(t, 0.9), pct(t, 0.5) / n);
      // The same chain as one graph.
      cudaGraph_t g;
      cudaGraphExec_t x;
      CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
      for (int i = 0; i < n; ++i) launch(k, b, sms, s);
      CHECK(cudaStreamEndCapture(s, &g));
      CHECK(cudaGraphInstantiate(&x, g, 0));
      CHECK(cudaGraphUpload(x, s));
      t.clear();
      std::vector<double> gpu;
      for (int r = 0; r < 10 + reps; ++r) {
        const double a = now_us();
        CHECK(cudaEventRecord(e0, s));
        CHECK(cudaGraphLaunch(x, s));
        CHECK(cudaEventRecord(e1, s));
        CHECK(cudaStreamSynchronize(s));
        if (r >= 10) {
          t.push_back(now_us() - a);
          float ms = 0;
          CHECK(cudaEventElapsedTime(&ms, e0, e1));
          gpu.push_back(ms * 1000.0);
        }
      }
      std::printf("%s graph %d %.1f %.1f %.2f\n", name_of(k), n, pct(t, 0.5), pct(t, 0.9), pct(t, 0.5) / n);
      std::printf("%s graph_gpu %d %.1f %.1f %.2f\n", name_of(k), n, pct(gpu, 0.5), pct(gpu, 0.9),
                  pct(gpu, 0.5) / n);
      CHECK(cudaGraphExecDestroy(x));
      CHECK(cudaGraphDestroy(g));
    }
  }
  return 0;
}
