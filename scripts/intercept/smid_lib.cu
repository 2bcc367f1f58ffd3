// The %smid kernel as a stand-alone cubin, loaded by icpt_paths through
// cuLibraryLoadFromFile / cuModuleLoad (the CUkernel and CUmodule paths).
extern "C" __global__ void smid_kernel_c(unsigned* out, long long spin) {
  unsigned s;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(s));
  const long long t0 = clock64();
  while (clock64() - t0 < spin) {
  }
  if (threadIdx.x == 0) out[blockIdx.x + gridDim.x * blockIdx.y] = s + 1;
}
