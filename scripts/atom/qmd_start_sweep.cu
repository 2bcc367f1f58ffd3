// Can the launch descriptor alone move the start of a grid? (issue 5)
//
// For every 32-bit word of the Hopper QMD (V04_00, 384 bytes) that is zero in
// an ordinary launch, one child process launches a 1000-block kernel whose
// blocks record the smallest and largest blockIdx.x that ran and how many
// ran, with that word set to 0x00640064 (100 in both 16-bit halves) in the
// launch-descriptor callback. A word that moves the start would show a first
// block of 100 (or a count below 1000 with the first block above 0).
// Children that fault or hang (watchdog: 5 s) are reported as such; the GPU's
// settings are never changed.
//
//   nvcc -O2 -arch=sm_90 -o qmd_start_sweep scripts/atom/qmd_start_sweep.cu -lcuda
//   ./qmd_start_sweep > sweep.csv          (parent: every word, one child each;
//                                           SWEEP_VALUE=V sets another value)
//   ./qmd_start_sweep WORD_OFFSET VALUE    (child: one launch)
#include <cuda.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace {

constexpr int kBlocks = 1000;
constexpr int kQmdBytes = 384;

__global__ void record(unsigned* out) {
  if (threadIdx.x != 0) return;
  atomicMin(&out[0], blockIdx.x);
  atomicAdd(&out[1], 1u);
  atomicMax(&out[2], blockIdx.x);
  out[3] = gridDim.x;
}

// The launch-descriptor callback (facts: docs/gpu.md, src/gpu/descriptor_hook.cpp):
// export table 2c8e0ad8-0710-ab4e-90dd-54719fe5f74b, entry 3 subscribes,
// entry 6 enables (domain 0xb, cbid 1); params: u32 size, QMD pointer in
// pointer slot 4.
const CUuuid kTable = {{0x2c, static_cast<char>(0x8e), 0x0a, static_cast<char>(0xd8), 0x07, 0x10,
                        static_cast<char>(0xab), 0x4e, static_cast<char>(0x90), static_cast<char>(0xdd), 0x54, 0x71,
                        static_cast<char>(0x9f), static_cast<char>(0xe5), static_cast<char>(0xf7), 0x4b}};
using Cb = void (*)(void*, int, int, const void*);
using Subscribe = int (*)(std::uint32_t*, Cb, void*);
using Enable = int (*)(std::uint32_t, std::uint32_t, int, int);

volatile int g_armed = 0;
int g_word = -1;
std::uint32_t g_value = 0;
std::uint32_t g_seen[kQmdBytes / 4];
int g_fired = 0;

void on_descriptor(void*, int domain, int cbid, const void* params) {
  if (domain != 0xb || cbid != 1 || !g_armed || params == nullptr) return;
  std::uint8_t* q = static_cast<std::uint8_t* const*>(params)[4];
  if (q == nullptr) return;
  std::memcpy(g_seen, q, sizeof g_seen);
  if (g_word >= 0) std::memcpy(q + g_word, &g_value, 4);
  g_armed = 0;
  ++g_fired;
}

int child(int word, std::uint32_t value) {
  g_word = word;
  g_value = value;
  cudaFree(nullptr);  // context
  const void* table = nullptr;
  if (cuGetExportTable(&table, &kTable) != CUDA_SUCCESS || table == nullptr) {
    std::printf("%d,no-table\n", word);
    return 2;
  }
  const auto* entries = static_cast<const std::uintptr_t*>(table);
  std::uint32_t handle = 0;
  reinterpret_cast<Subscribe>(entries[3])(&handle, on_descriptor, nullptr);
  reinterpret_cast<Enable>(entries[6])(1, handle, 0xb, 1);
  unsigned* d = nullptr;
  cudaMalloc(&d, 16);
  const unsigned init[4] = {0xffffffffu, 0, 0, 0};
  cudaMemcpy(d, init, sizeof init, cudaMemcpyHostToDevice);
  g_armed = 1;
  record<<<kBlocks, 32>>>(d);
  const cudaError_t launch = cudaGetLastError();
  const cudaError_t sync = cudaDeviceSynchronize();
  unsigned out[4] = {};
  cudaMemcpy(out, d, sizeof out, cudaMemcpyDeviceToHost);
  std::uint32_t orig = 0;
  if (word >= 0) orig = g_seen[word / 4];
  std::printf("%d,0x%08x,0x%08x,%d,%s,%u,%u,%u,%u\n", word, orig, value, g_fired,
              launch != cudaSuccess ? cudaGetErrorName(launch) : cudaGetErrorName(sync), out[0], out[1], out[2],
              out[3]);
  if (word < 0) {  // the reference launch: dump the words
    for (int i = 0; i < kQmdBytes / 4; ++i) std::printf("qmd,%d,0x%08x\n", 4 * i, g_seen[i]);
  }
  return 0;
}

// Runs one child with a watchdog; returns its exit status, or -1 on a hang.
int run_child(const char* self, int word, std::uint32_t value) {
  const pid_t pid = fork();
  if (pid == 0) {
    const std::string w = std::to_string(word), v = std::to_string(value);
    execl(self, self, w.c_str(), v.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  for (int waited = 0; waited < 500; ++waited) {
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    usleep(10000);
  }
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  return -1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3) return child(std::atoi(argv[1]), static_cast<std::uint32_t>(std::strtoul(argv[2], nullptr, 0)));
  const char* env = std::getenv("SWEEP_VALUE");
  const std::uint32_t value = env != nullptr ? static_cast<std::uint32_t>(std::strtoul(env, nullptr, 0)) : 0x00640064u;
  std::printf("word,orig,value,fired,result,first_block,blocks_run,last_block,gridDim_x\n");
  std::fflush(stdout);
  // Reference launch, whose words decide which ones are swept.
  char tmpl[] = "/tmp/qmd_ref_XXXXXX";
  const int fd = mkstemp(tmpl);
  if (fd < 0) return 1;
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(fd, 1);
    execl(argv[0], argv[0], "-1", "0", static_cast<char*>(nullptr));
    _exit(127);
  }
  waitpid(pid, nullptr, 0);
  std::uint32_t ref[kQmdBytes / 4] = {};
  bool have[kQmdBytes / 4] = {};
  if (std::FILE* f = std::fopen(tmpl, "r")) {
    char line[256];
    while (std::fgets(line, sizeof line, f) != nullptr) {
      int off = 0;
      unsigned v = 0;
      if (std::sscanf(line, "qmd,%d,0x%x", &off, &v) == 2 && off >= 0 && off < kQmdBytes) {
        ref[off / 4] = v;
        have[off / 4] = true;
      } else {
        std::fputs(line, stdout);
      }
    }
    std::fclose(f);
  }
  unlink(tmpl);
  for (int i = 0; i < kQmdBytes / 4; ++i) std::printf("qmd,%d,0x%08x\n", 4 * i, ref[i]);
  std::fflush(stdout);
  for (int i = 0; i < kQmdBytes / 4; ++i) {
    if (!have[i] || ref[i] != 0) continue;  // only words an ordinary launch leaves zero
    const int rc = run_child(argv[0], 4 * i, value);
    if (rc != 0) std::printf("%d,,0x%08x,,%s\n", 4 * i, value, rc < 0 ? "hang(killed)" : ("exit " + std::to_string(rc)).c_str());
    std::fflush(stdout);
  }
  return 0;
}
