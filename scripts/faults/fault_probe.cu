// What a fatal GPU fault does to the processes of a GPU, plain and under MPS
// (scripts/faults/fault-probe.sh runs it; docs/daemon.md "GPU faults" cites
// what it found). One program, three roles:
//
//   fault_probe victim SECONDS LINGER_S  a process that runs ~1 ms kernels
//       and synchronises, until SECONDS have passed or a call fails; after a
//       failure it asks several cheap calls what they answer, then stays
//       alive LINGER_S seconds (asking cudaStreamQuery once a second), as a
//       process that catches the error and does not exit would
//   fault_probe faulter DELAY_MS        a process whose kernel writes to an
//       address it does not own, DELAY_MS after it started
//   fault_probe newclient               a process that makes a context
//       (cudaFree(0)) and one kernel, and says how long each took
//
// Every line is JSON with "t" (CLOCK_REALTIME seconds, comparable across
// processes) and "pid".
#include <cuda.h>
#include <cuda_runtime.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {

double now_s() {
  timespec t{};
  clock_gettime(CLOCK_REALTIME, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) / 1e9;
}

void say(const char* fmt_event, int rc, const char* extra = "") {
  std::printf("{\"t\":%.6f,\"pid\":%d,\"event\":\"%s\",\"rc\":%d%s}\n", now_s(), static_cast<int>(getpid()), fmt_event,
              rc, extra);
  std::fflush(stdout);
}

__global__ void spin(long long cycles) {
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
}

__global__ void bad_write(int* p) { p[threadIdx.x] = 42; }

int victim(double seconds, double linger) {
  cudaStream_t s;
  int rc = cudaStreamCreate(&s);
  say("started", rc);
  cudaEvent_t never;  // created, never recorded
  cudaEventCreateWithFlags(&never, cudaEventDisableTiming);
  const double t0 = now_s();
  long iters = 0;
  int err = 0;
  while (now_s() - t0 < seconds) {
    spin<<<132, 128, 0, s>>>(1'800'000);  // ~1 ms at 1.98 GHz
    rc = cudaGetLastError();
    if (rc != 0) {
      err = rc;
      say("launch_error", rc);
      break;
    }
    rc = cudaStreamSynchronize(s);
    if (rc != 0) {
      err = rc;
      say("sync_error", rc);
      break;
    }
    ++iters;
  }
  char buf[96];
  std::snprintf(buf, sizeof buf, ",\"iters\":%ld", iters);
  say("loop_end", err, buf);
  if (err == 0) return 0;
  // What other calls answer once the context is lost.
  say("q_stream_query", cudaStreamQuery(s));
  say("q_event_query_unrecorded", cudaEventQuery(never));
  size_t f = 0, t = 0;
  say("q_mem_get_info", cudaMemGetInfo(&f, &t));
  say("q_get_last_error", cudaGetLastError());
  CUcontext ctx = nullptr;
  say("q_drv_ctx_get_current", cuCtxGetCurrent(&ctx));
  unsigned int ver = 0;
  say("q_drv_ctx_get_api_version", cuCtxGetApiVersion(ctx, &ver));
  CUstream ds = nullptr;
  say("q_drv_stream_create", cuStreamCreate(&ds, CU_STREAM_NON_BLOCKING));
  say("q_drv_stream_query", cuStreamQuery(reinterpret_cast<CUstream>(s)));
  const double l0 = now_s();
  while (now_s() - l0 < linger) {
    sleep(1);
    say("lingering", cudaStreamQuery(s));
  }
  say("exit", 0);
  return 0;
}

int faulter(int delay_ms) {
  int rc = cudaFree(nullptr);
  say("started", rc);
  usleep(static_cast<useconds_t>(delay_ms) * 1000);
  say("faulting", 0);
  bad_write<<<1, 32>>>(reinterpret_cast<int*>(0x10));
  rc = cudaDeviceSynchronize();
  say("fault_seen", rc);
  return 0;
}

int newclient() {
  const double t0 = now_s();
  int rc = cudaFree(nullptr);
  char buf[96];
  std::snprintf(buf, sizeof buf, ",\"seconds\":%.3f", now_s() - t0);
  say("context", rc, buf);
  if (rc != 0) return 1;
  const double t1 = now_s();
  spin<<<1, 32>>>(1000);
  rc = cudaDeviceSynchronize();
  std::snprintf(buf, sizeof buf, ",\"seconds\":%.3f", now_s() - t1);
  say("kernel", rc, buf);
  return rc == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 4 && std::strcmp(argv[1], "victim") == 0) return victim(std::atof(argv[2]), std::atof(argv[3]));
  if (argc >= 3 && std::strcmp(argv[1], "faulter") == 0) return faulter(std::atoi(argv[2]));
  if (argc >= 2 && std::strcmp(argv[1], "newclient") == 0) return newclient();
  std::fprintf(stderr, "usage: fault_probe victim SECONDS LINGER_S | faulter DELAY_MS | newclient\n");
  return 2;
}
