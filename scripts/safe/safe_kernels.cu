// The safe-mask corpus's own kernels (docs/safe-masks.md), as a shared
// library that scripts/safe/safe_corpus.py loads with ctypes:
//
//   int safe_cluster(int c, int one_per_sm, unsigned long long* digest)
//       clusters of c CTAs (1, 2, 4, 8, 16; 16 with the non-portable
//       attribute) launched with cudaLaunchKernelEx; every block reads its
//       neighbour's shared memory through distributed shared memory and
//       writes a value that depends on it. one_per_sm: 150 KB of dynamic
//       shared memory, so one block per SM (the hardest case for a mask).
//   int safe_cluster_static(unsigned long long* digest)
//       a __cluster_dims__(4,1,1) kernel launched with <<<>>> (cuLaunchKernel:
//       the shape is the kernel's own, not an attribute).
//   int safe_coop(int via, unsigned long long* digest)
//       a grid-synchronising reduction sized the canonical way: blocks per SM
//       from the occupancy query x the device's SM count. via 0:
//       cudaLaunchCooperativeKernel; 1: cudaLaunchKernelEx with the
//       cooperative attribute; 2: captured into a CUDA graph and replayed.
//
// Each returns 0 or a CUDA error code; *digest is a 64-bit FNV-1a hash of
// the output, so runs under different TPC sets compare bit for bit.
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

namespace cg = cooperative_groups;

namespace {

std::uint64_t fnv(const void* p, std::size_t n) {
  const auto* b = static_cast<const unsigned char*>(p);
  std::uint64_t h = 1469598103934665603ULL;
  for (std::size_t i = 0; i < n; ++i) {
    h ^= b[i];
    h *= 1099511628211ULL;
  }
  return h;
}

__global__ void cluster_dsmem(unsigned* out, int rounds) {
  extern __shared__ unsigned smem[];
  cg::cluster_group cl = cg::this_cluster();
  const unsigned rank = cl.block_rank();
  const unsigned n = cl.num_blocks();
  for (unsigned i = threadIdx.x; i < 64; i += blockDim.x) smem[i] = blockIdx.x * 131u + i * 7u;
  cl.sync();
  unsigned acc = 0;
  for (int r = 0; r < rounds; ++r) {
    const unsigned* peer = cl.map_shared_rank(smem, (rank + 1 + r) % n);
    acc = acc * 31u + peer[threadIdx.x % 64];
  }
  cl.sync();  // peers' shared memory must outlive every read
  out[blockIdx.x * blockDim.x + threadIdx.x] = acc;
}

__global__ void __cluster_dims__(4, 1, 1) cluster_static(unsigned* out) {
  __shared__ unsigned smem[64];
  cg::cluster_group cl = cg::this_cluster();
  for (unsigned i = threadIdx.x; i < 64; i += blockDim.x) smem[i] = blockIdx.x * 17u + i;
  cl.sync();
  const unsigned* peer = cl.map_shared_rank(smem, (cl.block_rank() + 1) % cl.num_blocks());
  const unsigned v = peer[threadIdx.x % 64];
  cl.sync();
  out[blockIdx.x * blockDim.x + threadIdx.x] = v;
}

// Phase 1: every block sums its slice; grid.sync; phase 2: every block
// reads every partial (so every block depends on every other one).
__global__ void coop_reduce(const unsigned* in, unsigned* partial, unsigned* out, int n) {
  cg::grid_group g = cg::this_grid();
  __shared__ unsigned s;
  if (threadIdx.x == 0) s = 0;
  __syncthreads();
  unsigned local = 0;
  for (int i = static_cast<int>(g.thread_rank()); i < n; i += static_cast<int>(g.size())) local += in[i] * 2654435761u;
  atomicAdd(&s, local);
  __syncthreads();
  if (threadIdx.x == 0) partial[blockIdx.x] = s;
  g.sync();
  if (threadIdx.x == 0) {
    unsigned total = 0;
    for (unsigned b = 0; b < gridDim.x; ++b) total += partial[b] ^ (b * 0x9e3779b9u);
    out[blockIdx.x] = total;
  }
}

}  // namespace

extern "C" int safe_cluster(int c, int one_per_sm, unsigned long long* digest) {
  const int threads = 128;
  const int clusters = 48;
  const int grid = c * clusters;
  const int smem = one_per_sm ? 150 * 1024 : 1024;
  unsigned* out = nullptr;
  cudaError_t e = cudaMalloc(&out, static_cast<std::size_t>(grid) * threads * 4);
  if (e != cudaSuccess) return e;
  if ((e = cudaFuncSetAttribute(cluster_dsmem, cudaFuncAttributeNonPortableClusterSizeAllowed, 1)) != cudaSuccess ||
      (e = cudaFuncSetAttribute(cluster_dsmem, cudaFuncAttributeMaxDynamicSharedMemorySize, smem)) != cudaSuccess) {
    cudaFree(out);
    return e;
  }
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(grid);
  cfg.blockDim = dim3(threads);
  cfg.dynamicSmemBytes = smem;
  cudaLaunchAttribute at[1];
  at[0].id = cudaLaunchAttributeClusterDimension;
  at[0].val.clusterDim.x = c;
  at[0].val.clusterDim.y = 1;
  at[0].val.clusterDim.z = 1;
  cfg.attrs = at;
  cfg.numAttrs = c > 1 ? 1 : 0;
  e = cudaLaunchKernelEx(&cfg, cluster_dsmem, out, c > 1 ? 4 : 1);
  if (e == cudaSuccess) e = cudaDeviceSynchronize();
  std::vector<unsigned> h(static_cast<std::size_t>(grid) * threads);
  if (e == cudaSuccess) e = cudaMemcpy(h.data(), out, h.size() * 4, cudaMemcpyDeviceToHost);
  cudaFree(out);
  if (e == cudaSuccess) *digest = fnv(h.data(), h.size() * 4);
  return e;
}

extern "C" int safe_cluster_static(unsigned long long* digest) {
  const int threads = 64, grid = 4 * 64;
  unsigned* out = nullptr;
  cudaError_t e = cudaMalloc(&out, static_cast<std::size_t>(grid) * threads * 4);
  if (e != cudaSuccess) return e;
  cluster_static<<<grid, threads>>>(out);
  e = cudaGetLastError();
  if (e == cudaSuccess) e = cudaDeviceSynchronize();
  std::vector<unsigned> h(static_cast<std::size_t>(grid) * threads);
  if (e == cudaSuccess) e = cudaMemcpy(h.data(), out, h.size() * 4, cudaMemcpyDeviceToHost);
  cudaFree(out);
  if (e == cudaSuccess) *digest = fnv(h.data(), h.size() * 4);
  return e;
}

extern "C" int safe_coop(int via, unsigned long long* digest) {
  const int threads = 256;
  int bps = 0, sms = 0, dev = 0;
  cudaError_t e = cudaGetDevice(&dev);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  if (e == cudaSuccess) e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&bps, coop_reduce, threads, 0);
  if (e != cudaSuccess) return e;
  const int grid = bps * sms;  // the canonical size: every block resident on the whole GPU
  const int n = 1 << 22;
  unsigned *in = nullptr, *partial = nullptr, *out = nullptr;
  if ((e = cudaMalloc(&in, n * 4u)) != cudaSuccess) return e;
  cudaMalloc(&partial, static_cast<std::size_t>(grid) * 4);
  cudaMalloc(&out, static_cast<std::size_t>(grid) * 4);
  std::vector<unsigned> hin(n);
  for (int i = 0; i < n; ++i) hin[static_cast<std::size_t>(i)] = static_cast<unsigned>(i) * 2246822519u + 7u;
  cudaMemcpy(in, hin.data(), n * 4u, cudaMemcpyHostToDevice);
  int nn = n;
  void* args[] = {&in, &partial, &out, &nn};
  if (via == 0) {
    e = cudaLaunchCooperativeKernel(reinterpret_cast<void*>(coop_reduce), dim3(grid), dim3(threads), args, 0, nullptr);
  } else if (via == 1) {
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = dim3(grid);
    cfg.blockDim = dim3(threads);
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeCooperative;
    at[0].val.cooperative = 1;
    cfg.attrs = at;
    cfg.numAttrs = 1;
    e = cudaLaunchKernelEx(&cfg, coop_reduce, static_cast<const unsigned*>(in), partial, out, nn);
  } else {
    cudaStream_t s;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    e = cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
    if (e == cudaSuccess)
      e = cudaLaunchCooperativeKernel(reinterpret_cast<void*>(coop_reduce), dim3(grid), dim3(threads), args, 0, s);
    const cudaError_t end = cudaStreamEndCapture(s, &graph);
    if (e == cudaSuccess) e = end;
    if (e == cudaSuccess) e = cudaGraphInstantiate(&exec, graph, 0);
    for (int r = 0; e == cudaSuccess && r < 2; ++r) e = cudaGraphLaunch(exec, s);
    if (e == cudaSuccess) e = cudaStreamSynchronize(s);
    if (exec != nullptr) cudaGraphExecDestroy(exec);
    if (graph != nullptr) cudaGraphDestroy(graph);
    cudaStreamDestroy(s);
  }
  if (e == cudaSuccess) e = cudaDeviceSynchronize();
  std::vector<unsigned> h(static_cast<std::size_t>(grid));
  if (e == cudaSuccess) e = cudaMemcpy(h.data(), out, h.size() * 4, cudaMemcpyDeviceToHost);
  cudaFree(in);
  cudaFree(partial);
  cudaFree(out);
  if (e == cudaSuccess) *digest = fnv(h.data(), h.size() * 4);
  return e;
}
