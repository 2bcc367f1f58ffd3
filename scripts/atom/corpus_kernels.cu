// Kernels of the atomizer's correctness corpus that PyTorch does not cover:
// 1-D/2-D/3-D grids, a grid-stride loop, dynamic shared memory, many
// parameters of mixed sizes (a struct by value), launched through the driver
// API by scripts/atom/corpus.py from a cubin, a Zstandard-compressed fatbin,
// PTX (JIT) and a file. Every kernel writes something that changes if a
// block runs twice, not at all, or sees another blockIdx/gridDim.
#include <cstdint>

// One record per block: its blockIdx, gridDim and how often it ran.
extern "C" __global__ void block_ids(uint32_t* out) {
  const uint32_t lin = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  if (threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0) {
    uint32_t* r = out + 8u * lin;
    r[0] = blockIdx.x;
    r[1] = blockIdx.y;
    r[2] = blockIdx.z;
    r[3] = gridDim.x;
    r[4] = gridDim.y;
    r[5] = gridDim.z;
    r[6] += 1;  // one writer per block: 1 after one launch
    r[7] = lin;
  }
}

// y = a*x + y over n elements with a grid-stride loop: a block that runs
// twice adds twice.
extern "C" __global__ void saxpy_stride(float* y, const float* x, float a, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) y[i] = a * x[i] + y[i];
}

// Per-block sum in dynamic shared memory (blockDim.x floats), accumulated.
extern "C" __global__ void block_sum_dyn(float* out, const float* in, int n) {
  extern __shared__ float s[];
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  s[threadIdx.x] = i < n ? in[i] : 0.0f;
  __syncthreads();
  for (unsigned w = blockDim.x / 2; w > 0; w >>= 1) {
    if (threadIdx.x < w) s[threadIdx.x] += s[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] += s[0];
}

struct Mixed {
  double d;
  int i;
  char c;
  float f[3];
};

// Many parameters of mixed sizes and alignments, a struct by value; 2-D grid.
extern "C" __global__ void many_params(float* out, Mixed m, char c, short s, long long l, double d, float f, int w,
                                      const float* in) {
  const int x = blockIdx.x * blockDim.x + threadIdx.x;
  const int y = blockIdx.y * blockDim.y + threadIdx.y;
  const int k = y * w + x;
  out[k] += in[k] * f + static_cast<float>(m.d) + m.i + m.c + m.f[0] + m.f[1] + m.f[2] + c + s +
            static_cast<float>(l) + static_cast<float>(d) + 0.001f * static_cast<float>(blockIdx.y);
}
