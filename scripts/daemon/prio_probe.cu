// prio_probe: what CUDA priorities do on this GPU, for lithos's hardware
// priority of high-priority tenants (docs/daemon.md, "Hardware priority").
//
//   prio_probe info              priority range; which streams take a
//                                priority attribute (null, legacy, per-thread,
//                                a created stream)
//   prio_probe flood SECONDS [STREAMS [WAVES [BLOCK_US [THREADS [ATOMS]]]]]
//                                best-effort stand-in: keeps up to 4 grids of
//                                WAVES waves (default 1) of BLOCK_US blocks
//                                (default 200) of THREADS threads (default
//                                128; 2048 / THREADS blocks fill an SM)
//                                (ATOMS > 1: each grid is ATOMS x WAVES
//                                waves, of which one atom's WAVES run and
//                                the other blocks leave at once, as lithos's
//                                atomizer launches atoms; the atoms in turn)
//                                queued on each of STREAMS
//                                streams (default 1: the null stream) at the
//                                default priority. WAVES > 1 is an atom: its
//                                later waves' blocks are pending while the
//                                first runs, as a best-effort atom's are
//   prio_probe replay N WHEN     a 64-kernel graph replayed N times on the null
//                                stream, its priority raised never, before
//                                capture, or after 5 replays (WHEN: none,
//                                before, after): launch-call time and latency
//   prio_probe probe N MODE      N short requests (132 blocks of 20 us each),
//                                2 ms apart, each timed launch to completion;
//                                MODE: default (null stream), stream (a stream
//                                created with the greatest priority), attr (a
//                                created stream raised by the stream attribute,
//                                as lithos raises an hp tenant's), nullattr
//                                (the null stream raised by the attribute),
//                                launch (launch attribute on the null stream),
//                                graph (a graph with node priorities, launched
//                                on the null stream); prints p50 / p99 in us.
//                                PROBE_KERNEL=alu: the request's kernel is
//                                arithmetic (dependent FMAs) instead of a
//                                clock spin (launch attribute and graph
//                                modes keep the spin), and so are a flood's
//                                blocks (BLOCK_US then approximate)
//
// Build: nvcc -O2 -arch=sm_90 -o prio_probe prio_probe.cu -lcuda
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

namespace {

__device__ unsigned long long global_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// An atom as lithos's atomizer launches it: the whole grid, the blocks
// outside [lo, hi) leaving at once.
__global__ void spin_range(unsigned long long ns, unsigned lo, unsigned hi) {
  if (blockIdx.x < lo || blockIdx.x >= hi) return;
  const unsigned long long t0 = global_ns();
  while (global_ns() - t0 < ns) {
  }
}

// The request's kernel when PROBE_KERNEL=alu: dependent FMAs instead of a
// clock, so that it takes longer when it shares its SMs' issue slots with
// another process's blocks (as an arithmetic kernel does); the count
// ns / 4 lasts about ns alone on an H100 at its usual clocks.
__global__ void alu(unsigned long long ns, float* sink) {
  float x = threadIdx.x;
  for (unsigned long long i = 0; i < ns / 4; ++i) x = x * 0.999f + 1.0f;
  if (x == 12345.0f) sink[0] = x;
}

// The flood's kernel when PROBE_KERNEL=alu: the same arithmetic, over
// [lo, hi) of the grid (the whole grid when hi is 0).
__global__ void alu_range(unsigned long long ns, unsigned lo, unsigned hi, float* sink) {
  if (hi != 0 && (blockIdx.x < lo || blockIdx.x >= hi)) return;
  float x = threadIdx.x;
  for (unsigned long long i = 0; i < ns / 4; ++i) x = x * 0.999f + 1.0f;
  if (x == 12345.0f) sink[0] = x;
}

__global__ void spin(unsigned long long ns) {
  const unsigned long long t0 = global_ns();
  while (global_ns() - t0 < ns) {
  }
}

#define CHECK(x)                                                                   \
  do {                                                                             \
    cudaError_t e_ = (x);                                                          \
    if (e_ != cudaSuccess) {                                                       \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                                \
    }                                                                              \
  } while (0)

double now_us() {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void try_stream(const char* name, cudaStream_t s, int prio) {
  cudaStreamAttrValue v{};
  v.priority = prio;
  cudaError_t set = cudaStreamSetAttribute(s, cudaStreamAttributePriority, &v);
  cudaGetLastError();
  cudaStreamAttrValue got{};
  cudaError_t get = cudaStreamGetAttribute(s, cudaStreamAttributePriority, &got);
  cudaGetLastError();
  int sp = 0;
  cudaError_t gp = cudaStreamGetPriority(s, &sp);
  cudaGetLastError();
  std::printf("%-10s set=%s get=%s (%d) cudaStreamGetPriority=%s (%d)\n", name, cudaGetErrorName(set),
              cudaGetErrorName(get), got.priority, cudaGetErrorName(gp), sp);
}

int info() {
  int least = 0, greatest = 0;
  CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  std::printf("priority range: least %d greatest %d\n", least, greatest);
  try_stream("null", nullptr, greatest);
  try_stream("legacy", cudaStreamLegacy, greatest);
  try_stream("perthread", cudaStreamPerThread, greatest);
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  try_stream("created", s, greatest);
  spin<<<1, 32, 0, s>>>(1000);
  CHECK(cudaStreamSynchronize(s));
  std::printf("a launch on the re-prioritised stream: ok\n");
  return 0;
}

int flood(double seconds, int streams, int waves, int block_us, int threads, int atoms) {
  int sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const double end = now_us() + seconds * 1e6;
  streams = std::max(1, std::min(streams, 16));
  std::vector<cudaStream_t> st(streams, nullptr);  // stream 0: the null stream
  for (int k = 1; k < streams; ++k) CHECK(cudaStreamCreateWithFlags(&st[k], cudaStreamNonBlocking));
  std::vector<cudaEvent_t> ev(4 * streams);
  for (auto& e : ev) CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  const char* kernel = std::getenv("PROBE_KERNEL");
  float* sink = nullptr;  // set: arithmetic blocks (PROBE_KERNEL=alu)
  if (kernel != nullptr && std::strcmp(kernel, "alu") == 0) CHECK(cudaMalloc(&sink, sizeof(float)));
  unsigned grids = 0;
  for (unsigned i = 0; now_us() < end; ++i) {
    for (int k = 0; k < streams; ++k) {
      cudaEvent_t e = ev[4 * k + i % 4];
      if (i >= 4) CHECK(cudaEventSynchronize(e));  // at most 4 grids queued per stream
      const unsigned atom = sms * (2048 / threads) * waves;  // blocks
      if (sink != nullptr) {
        const unsigned a = i % atoms;
        alu_range<<<atom * atoms, threads, 0, st[k]>>>(1000ULL * block_us, a * atom, atoms > 1 ? (a + 1) * atom : 0,
                                                       sink);
      } else if (atoms > 1) {
        const unsigned a = i % atoms;
        spin_range<<<atom * atoms, threads, 0, st[k]>>>(1000ULL * block_us, a * atom, (a + 1) * atom);
      } else {
        spin<<<atom, threads, 0, st[k]>>>(1000ULL * block_us);
      }
      CHECK(cudaEventRecord(e, st[k]));
      ++grids;
    }
  }
  CHECK(cudaDeviceSynchronize());
  std::printf("flood: %u grids of %d waves (x %d atoms) of %d us blocks of %d threads on %d streams\n", grids, waves,
              atoms, block_us, threads, streams);
  return 0;
}

int probe(int n, const char* mode) {
  int least = 0, greatest = 0, sms = 0;
  CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  cudaStream_t s = nullptr;
  cudaGraphExec_t exec = nullptr;
  const unsigned long long ns = 20'000;
  auto raise = [&](cudaStream_t st) {
    cudaStreamAttrValue v{};
    v.priority = greatest;
    CHECK(cudaStreamSetAttribute(st, cudaStreamAttributePriority, &v));
  };
  if (std::strcmp(mode, "stream") == 0) {
    CHECK(cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, greatest));
  } else if (std::strcmp(mode, "attr") == 0) {
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    spin<<<1, 32, 0, s>>>(1000);  // the stream in use before it is raised, as an application's is
    CHECK(cudaStreamSynchronize(s));
    raise(s);
  } else if (std::strcmp(mode, "nullattr") == 0) {
    spin<<<1, 32>>>(1000);
    CHECK(cudaDeviceSynchronize());
    raise(cudaStreamLegacy);
  } else if (std::strcmp(mode, "graph") == 0) {
    cudaStream_t cap;
    CHECK(cudaStreamCreateWithFlags(&cap, cudaStreamNonBlocking));
    cudaGraph_t g;
    CHECK(cudaStreamBeginCapture(cap, cudaStreamCaptureModeThreadLocal));
    spin<<<sms, 128, 0, cap>>>(ns);
    CHECK(cudaStreamEndCapture(cap, &g));
    size_t count = 0;
    CHECK(cudaGraphGetNodes(g, nullptr, &count));
    std::vector<cudaGraphNode_t> nodes(count);
    CHECK(cudaGraphGetNodes(g, nodes.data(), &count));
    for (auto node : nodes) {
      cudaKernelNodeAttrValue v{};
      v.priority = greatest;
      CHECK(cudaGraphKernelNodeSetAttribute(node, cudaKernelNodeAttributePriority, &v));
    }
    CHECK(cudaGraphInstantiateWithFlags(&exec, g, cudaGraphInstantiateFlagUseNodePriority));
  } else if (std::strcmp(mode, "default") != 0 && std::strcmp(mode, "launch") != 0 &&
             std::strcmp(mode, "nullattr") != 0) {
    std::fprintf(stderr, "unknown mode %s\n", mode);
    return 2;
  }
  const char* kernel = std::getenv("PROBE_KERNEL");
  const bool use_alu = kernel != nullptr && std::strcmp(kernel, "alu") == 0;
  float* sink = nullptr;
  if (use_alu) CHECK(cudaMalloc(&sink, sizeof(float)));
  std::vector<double> lat;
  for (int i = 0; i < n + 5; ++i) {
    const double t0 = now_us();
    if (exec != nullptr) {
      CHECK(cudaGraphLaunch(exec, nullptr));
    } else if (std::strcmp(mode, "launch") == 0) {
      cudaLaunchConfig_t cfg{};
      cfg.gridDim = dim3(sms);
      cfg.blockDim = dim3(128);
      cudaLaunchAttribute at{};
      at.id = cudaLaunchAttributePriority;
      at.val.priority = greatest;
      cfg.attrs = &at;
      cfg.numAttrs = 1;
      CHECK(cudaLaunchKernelEx(&cfg, spin, ns));
    } else if (use_alu) {
      alu<<<sms, 128, 0, s>>>(ns, sink);
    } else {
      spin<<<sms, 128, 0, s>>>(ns);
    }
    CHECK(s != nullptr ? cudaStreamSynchronize(s) : cudaDeviceSynchronize());
    if (i >= 5) lat.push_back(now_us() - t0);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  std::sort(lat.begin(), lat.end());
  auto q = [&](double p) { return lat[std::min(lat.size() - 1, static_cast<size_t>(p * lat.size()))]; };
  std::printf("probe %-8s%s n=%d p50 %.0f us p99 %.0f us max %.0f us\n", mode, use_alu ? " (alu)" : "", n, q(0.5), q(0.99),
              lat.back());
  return 0;
}

// A graph of 64 short kernels (132 blocks of 5 us each) replayed N times on
// the null stream, each timed (host time of the launch call; launch to
// completion). WHEN: none (the null stream keeps priority 0), before (it
// is raised to the greatest before capture and instantiation, as lithos does
// for an hp process at its first launch), after (raised after 5 replays).
int replay(int n, const char* when) {
  int least = 0, greatest = 0, sms = 0;
  CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  auto raise = [&] {
    cudaStreamAttrValue v{};
    v.priority = greatest;
    CHECK(cudaStreamSetAttribute(cudaStreamLegacy, cudaStreamAttributePriority, &v));
  };
  if (std::strcmp(when, "before") == 0) raise();
  spin<<<sms, 128>>>(1000);  // warm-up on the null stream
  CHECK(cudaDeviceSynchronize());
  cudaStream_t cap;
  CHECK(cudaStreamCreateWithFlags(&cap, cudaStreamNonBlocking));
  cudaGraph_t g;
  CHECK(cudaStreamBeginCapture(cap, cudaStreamCaptureModeThreadLocal));
  for (int k = 0; k < 64; ++k) spin<<<sms, 128, 0, cap>>>(5'000);
  CHECK(cudaStreamEndCapture(cap, &g));
  cudaGraphExec_t exec;
  CHECK(cudaGraphInstantiateWithFlags(&exec, g, 0));
  for (int i = 0; i < 5; ++i) CHECK(cudaGraphLaunch(exec, nullptr));
  CHECK(cudaDeviceSynchronize());
  if (std::strcmp(when, "after") == 0) raise();
  std::vector<double> host, lat;
  for (int i = 0; i < n; ++i) {
    const double t0 = now_us();
    CHECK(cudaGraphLaunch(exec, nullptr));
    const double t1 = now_us();
    CHECK(cudaDeviceSynchronize());
    host.push_back(t1 - t0);
    lat.push_back(now_us() - t0);
  }
  std::sort(host.begin(), host.end());
  std::sort(lat.begin(), lat.end());
  auto q = [](const std::vector<double>& v, double p) {
    return v[std::min(v.size() - 1, static_cast<size_t>(p * v.size()))];
  };
  int prio = 0;
  CHECK(cudaStreamGetPriority(cudaStreamLegacy, &prio));
  std::printf("replay %-6s (null stream priority %d) n=%d launch call p50 %.1f us p99 %.1f us; latency p50 %.0f us p99 %.0f us\n",
              when, prio, n, q(host, 0.5), q(host, 0.99), q(lat, 0.5), q(lat, 0.99));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 2 && std::strcmp(argv[1], "info") == 0) return info();
  if (argc >= 3 && std::strcmp(argv[1], "flood") == 0)
    return flood(std::atof(argv[2]), argc >= 4 ? std::atoi(argv[3]) : 1, argc >= 5 ? std::max(1, std::atoi(argv[4])) : 1,
                 argc >= 6 ? std::max(1, std::atoi(argv[5])) : 200,
                 argc >= 7 ? std::clamp(std::atoi(argv[6]), 32, 1024) : 128,
                 argc >= 8 ? std::clamp(std::atoi(argv[7]), 1, 64) : 1);
  if (argc >= 4 && std::strcmp(argv[1], "probe") == 0) return probe(std::atoi(argv[2]), argv[3]);
  if (argc >= 4 && std::strcmp(argv[1], "replay") == 0) return replay(std::atoi(argv[2]), argv[3]);
  std::fprintf(stderr,
               "usage: prio_probe info | flood SECONDS [STREAMS [WAVES [BLOCK_US [THREADS [ATOMS]]]]] | "
               "probe N default|stream|attr|nullattr|launch|graph | "
               "replay N none|before|after\n");
  return 2;
}
