// A client of lithosd for the end-to-end tests (e2e_test.cpp): an
// application that reaches the FAKE driver (tests/intercept/fake_cuda.cpp)
// like PyTorch does (dlopen + dlsym), with liblithos.so preloaded and
// LITHOS_DAEMON / LITHOS_TENANT in its environment.
//
//   daemon_client_app LAUNCHES [PAUSE_MS] [HOLD_MS] [GRID]
//
// Makes LAUNCHES kernel launches (GRID blocks of 256 threads, default 4096)
// on one stream, PAUSE_MS apart, and prints
// one JSON line per launch as it goes:
//   {"i":N,"t_ns":<CLOCK_MONOTONIC>,"rc":<CUresult>,"tpcs":"0-1"|"all","prio":P}
// where tpcs is the set the launch's descriptor enabled (the fake GPU's slot
// map: slots 0,2,3,5 = TPCs 0-3; "all" = no mask written; "none": no
// descriptor in this thread, as for a deferred launch) and prio the stream
// priority it went with (null: the stream's own, never set), and after each
// synchronisation (SYNC_EVERY launches)
//   {"synced":N,"descriptors":<descriptors the fake GPU built so far>}
// With CLIENT_GRAPH=1 it instantiates one CUDA graph before its first launch
// (the fake driver builds its descriptors then) and every launch is a
// cuGraphLaunch of it (tpcs: the mask those descriptors carry).
// CLIENT_GRAPH=2 instantiates the fake driver's graph 0x60000 (two kernels,
// a memset, an empty node and a child graph of one kernel), CLIENT_GRAPH=3
// its graph 0x64000 (a memory allocation node); CLIENT_GRAPH_EDIT=1 changes
// the exec after instantiating it (cuGraphExecMemsetNodeSetParams);
// CLIENT_GRAPH_FLAGS=N instantiates with those flags; CLIENT_GRAPH_UPLOAD=1
// uploads the exec (cuGraphUpload) before its first launch. With
// FAKE_GRAPH_NODE_DESCRIPTORS=1 (the fake builds one descriptor per kernel
// node) it prints, after instantiating,
//   {"node_tpcs":["0","0,1",...]}   each kernel node descriptor's TPCs
// (as "tpcs" below). With
// CLIENT_GRAPH 2 or 3 it synchronises the stream at the end and prints, before the statistics,
//   {"ops":"K16,M,K32,K8,G,..."}   the stream operations the fake GPU saw
// (K<grid x>: cuLaunchKernelEx, M: memset, G: graph launch, W: event wait).
// CLIENT_FUNCTION=H launches function handle H (default 0x10) with
// CLIENT_SMEM bytes of dynamic shared memory (default 0).
// With CLIENT_STREAM_OPS=1, after launch i it makes cuMemsetD8Async(value i)
// and records an event that it destroys at once, and prints the ops the same
// way at the end (S<i>@<cuLaunchKernel calls before it>; X: a record made
// after its event was destroyed).
// With CLIENT_CUBIN=PATH it launches kernel CLIENT_KERNEL (default
// block_ids) of that cubin on a GRID x 3 grid and prints the bounds of
// every launch (atom) the fake GPU saw, as {"params":[[lo,hi],...]}.
// With CLIENT_BURST=N the pause comes after every N launches instead.
// With CLIENT_STOP_FILE=PATH the launches also end, before launch i > 0,
// once PATH exists (LAUNCHES is then a bound).
// With CLIENT_UNTIL=KEY it stops after the first burst (and its pause) at
// whose end its daemon statistics count KEY >= 1 (tracker_wakes,
// doorbells): LAUNCHES is then the most it makes.
// With CLIENT_PTSZ=1 it launches through cuLaunchKernel_ptsz /
// cuGraphLaunch_ptsz on the per-thread default stream.
// With CLIENT_CAPTURE=1 the launches are made inside one stream capture
// (cuStreamBeginCapture_v2 before the first, cuStreamEndCapture after the
// last; with CLIENT_CAPTURE_AFTER=N the capture begins after launch N - 1,
// CLIENT_CAPTURE_GAP_US later), and it prints {"value_writes":N}, the
// stream memory writes the fake driver saw (completion markers), and
// {"captured_value_writes":N}, those made while the capture ran, and
// {"captured_event_records":N}, the event records made while it ran, before
// the statistics.
// With CLIENT_FORK_AT=N, after launch N it forks a child that exits
// normally at once (exit handlers run, in a copy of the parent's lithos),
// waits for it (exit 3 unless it exited 0), prints {"forked":N}, and goes on.
// With CLIENT_DEVICES=N (N > 1) launch i is made on device i % N: with that
// device's primary context current (cuCtxSetCurrent) on a stream of its own
// (0x5100 + 0x100 * device), and its line says "dev":d; synchronisations
// are of that stream. With CLIENT_SYNC_ALL=1 too, at the end, with device
// 0's context current, it synchronises every device's stream (a stream of
// another GPU than the current context's) and prints {"synced_all":N}.
// With CLIENT_GATES="I:PATH[,I:PATH...]", before launch I (I = LAUNCHES:
// after the last launch, before the hold) it prints {"waiting":I} and waits
// until the file PATH exists (at most 120 s, then exits 3): the test opens
// a gate once what it waits for has happened, instead of sleeping.
// With CLIENT_PARAMS=1 every launch passes one parameter {i, i + 1000}
// (overwritten once the launch returns) and, before the statistics, it prints
//   {"params":[[lo,hi],...]}   the values the fake GPU saw, launch by launch.
// Then it sleeps
// HOLD_MS (to be killed, or to keep its registration) and prints
//   {"stats":<lithos_stats_json>}
// and exits 0. Anything unexpected exits 3 with a message on stderr.
#include <cuda.h>
#include <dlfcn.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

std::uint64_t now_ns() {
  timespec t{};
  clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<std::uint64_t>(t.tv_sec) * 1'000'000'000ULL + static_cast<std::uint64_t>(t.tv_nsec);
}

void sleep_ms(long ms) {
  const timespec t{ms / 1000, (ms % 1000) * 1'000'000L};
  nanosleep(&t, nullptr);
}

// The TPCs the last descriptor enabled: the disable mask is at byte 304,
// its valid bit is bit 31 of the first word (gpu/qmd.hpp).
std::string last_tpcs(const std::uint8_t* q) {
  if (q == nullptr) return "none";
  std::uint32_t dw0 = 0;
  std::memcpy(&dw0, q, sizeof dw0);
  if ((dw0 & 0x80000000U) == 0) return "all";
  std::uint32_t w0 = 0;
  std::memcpy(&w0, q + 304, sizeof w0);
  const int slot_of_tpc[4] = {0, 2, 3, 5};
  std::string out;
  for (int t = 0; t < 4; ++t) {
    if ((w0 & (1U << slot_of_tpc[t])) == 0) out += (out.empty() ? "" : ",") + std::to_string(t);
  }
  return out.empty() ? "empty" : out;
}

int fail(const char* what) {
  std::fprintf(stderr, "daemon_client_app: %s\n", what);
  return 3;
}

struct Gate {
  long at = 0;
  std::string path;
};

// CLIENT_GATES: "I:PATH,I:PATH..." (no commas in the paths).
std::vector<Gate> parse_gates(const char* spec) {
  std::vector<Gate> gates;
  std::string rest = spec != nullptr ? spec : "";
  while (!rest.empty()) {
    const std::size_t comma = rest.find(',');
    const std::string one = rest.substr(0, comma);
    rest = comma == std::string::npos ? "" : rest.substr(comma + 1);
    const std::size_t colon = one.find(':');
    if (colon == std::string::npos) continue;
    gates.push_back({std::atol(one.substr(0, colon).c_str()), one.substr(colon + 1)});
  }
  return gates;
}

// Waits at every gate for launch index i; false when one stays shut for 120 s.
bool pass_gates(const std::vector<Gate>& gates, long i) {
  for (const Gate& g : gates) {
    if (g.at != i) continue;
    std::printf("{\"waiting\":%ld}\n", i);
    std::fflush(stdout);
    for (int tries = 0; ::access(g.path.c_str(), F_OK) != 0; ++tries) {
      if (tries >= 60'000) return false;
      sleep_ms(2);
    }
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return fail("usage: daemon_client_app LAUNCHES [PAUSE_MS] [HOLD_MS] [GRID] [SYNC_EVERY] [HANG_AFTER]");
  const int launches = std::atoi(argv[1]);
  const long pause_ms = argc > 2 ? std::atol(argv[2]) : 0;
  const long hold_ms = argc > 3 ? std::atol(argv[3]) : 0;
  const auto grid = static_cast<unsigned>(argc > 4 ? std::atol(argv[4]) : 4096);
  const long sync_every = argc > 5 ? std::atol(argv[5]) : 0;   // cuStreamSynchronize after every N launches
  const long hang_after = argc > 6 ? std::atol(argv[6]) : -1;  // from launch N on, the fake GPU's markers never land
  void* drv = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
  if (drv == nullptr) return fail("no libcuda.so.1");
  using InitFn = CUresult (*)(unsigned);
  using LaunchFn = CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                CUstream, void**, void**);
  auto init = reinterpret_cast<InitFn>(::dlsym(drv, "cuInit"));
  // CLIENT_PTSZ=1: launches through the per-thread-stream entry points on
  // the per-thread default stream (as code built with
  // --default-stream per-thread does).
  const bool ptsz = std::getenv("CLIENT_PTSZ") != nullptr;
  auto launch = reinterpret_cast<LaunchFn>(::dlsym(drv, ptsz ? "cuLaunchKernel_ptsz" : "cuLaunchKernel"));
  auto sync = reinterpret_cast<CUresult (*)(CUstream)>(::dlsym(drv, "cuStreamSynchronize"));
  auto last_qmd = reinterpret_cast<const std::uint8_t* (*)()>(::dlsym(drv, "fake_last_qmd"));
  auto descriptors = reinterpret_cast<unsigned long (*)()>(::dlsym(drv, "fake_descriptors"));
  auto last_priority = reinterpret_cast<int (*)(int*)>(::dlsym(drv, "fake_last_priority"));
  auto stats = reinterpret_cast<int (*)(char*, size_t)>(::dlsym(RTLD_DEFAULT, "lithos_stats_json"));
  if (init == nullptr || launch == nullptr || last_qmd == nullptr || last_priority == nullptr || stats == nullptr)
    return fail("the fake driver or liblithos.so is missing");
  if (init(0) != CUDA_SUCCESS) return fail("cuInit failed");
  const int devices =
      std::max(1, std::getenv("CLIENT_DEVICES") != nullptr ? std::atoi(std::getenv("CLIENT_DEVICES")) : 1);
  std::vector<CUcontext> contexts(static_cast<std::size_t>(devices));
  if (devices > 1) {
    auto retain = reinterpret_cast<CUresult (*)(CUcontext*, CUdevice)>(::dlsym(drv, "cuDevicePrimaryCtxRetain"));
    if (retain == nullptr) return fail("the fake driver lacks cuDevicePrimaryCtxRetain");
    for (int d = 0; d < devices; ++d)
      if (retain(&contexts[static_cast<std::size_t>(d)], d) != CUDA_SUCCESS)
        return fail("cuDevicePrimaryCtxRetain failed");
  }
  auto set_current = reinterpret_cast<CUresult (*)(CUcontext)>(::dlsym(drv, "cuCtxSetCurrent"));
  if (devices > 1 && set_current == nullptr) return fail("the fake driver lacks cuCtxSetCurrent");
  auto stream_of = [&](int d) { return ptsz ? CUstream{} : reinterpret_cast<CUstream>(0x5100 + 0x100 * d); };
  auto stream = stream_of(0);
  // CLIENT_PARAMS=1: each launch passes one 8-byte parameter {i, i + 1000},
  // overwritten as soon as the launch returns; the fake GPU records what it
  // saw (a deferred launch must have copied it).
  const bool with_params = std::getenv("CLIENT_PARAMS") != nullptr;
  auto record_bounds = reinterpret_cast<void (*)(int)>(::dlsym(drv, "fake_record_bounds"));
  auto bounds = reinterpret_cast<int (*)(std::uint32_t*, int)>(::dlsym(drv, "fake_bounds"));
  if (with_params && (record_bounds == nullptr || bounds == nullptr)) return fail("the fake driver lacks fake_bounds");
  if (with_params) record_bounds(0);
  CUgraphExec exec = nullptr;
  using GraphLaunchFn = CUresult (*)(CUgraphExec, CUstream);
  auto graph_launch = reinterpret_cast<GraphLaunchFn>(::dlsym(drv, ptsz ? "cuGraphLaunch_ptsz" : "cuGraphLaunch"));
  if (std::getenv("CLIENT_GRAPH") != nullptr) {
    using InstantiateFn = CUresult (*)(CUgraphExec*, CUgraph, unsigned long long);
    auto instantiate = reinterpret_cast<InstantiateFn>(::dlsym(drv, "cuGraphInstantiateWithFlags"));
    if (instantiate == nullptr || graph_launch == nullptr) return fail("the fake driver lacks graphs");
    const long which = std::atol(std::getenv("CLIENT_GRAPH"));
    const std::uintptr_t graph = which == 2 ? 0x60000 : which == 3 ? 0x64000 : 0x6000;
    const char* flags = std::getenv("CLIENT_GRAPH_FLAGS");  // CUDA_GRAPH_INSTANTIATE_FLAG_*
    if (instantiate(&exec, reinterpret_cast<CUgraph>(graph), flags != nullptr ? std::strtoull(flags, nullptr, 0) : 0) !=
        CUDA_SUCCESS)
      return fail("instantiate failed");
    if (std::getenv("FAKE_GRAPH_NODE_DESCRIPTORS") != nullptr) {
      // The mask of each kernel node's descriptor, in the fake's node order.
      using ExecQmdsFn = int (*)(CUgraphExec, std::uint8_t*, int);
      auto exec_qmds = reinterpret_cast<ExecQmdsFn>(::dlsym(drv, "fake_exec_descriptors"));
      if (exec_qmds == nullptr) return fail("the fake driver lacks fake_exec_descriptors");
      std::vector<std::uint8_t> q(384 * 16);
      const int n = std::min(exec_qmds(exec, q.data(), 16), 16);
      std::string list;
      for (int i = 0; i < n; ++i) list += std::string(i > 0 ? "," : "") + "\"" + last_tpcs(q.data() + 384 * i) + "\"";
      std::printf("{\"node_tpcs\":[%s]}\n", list.c_str());
      std::fflush(stdout);
    }
    if (std::getenv("CLIENT_GRAPH_UPLOAD") != nullptr) {
      using UploadFn = CUresult (*)(CUgraphExec, CUstream);
      auto upload = reinterpret_cast<UploadFn>(::dlsym(drv, ptsz ? "cuGraphUpload_ptsz" : "cuGraphUpload"));
      if (upload == nullptr || upload(exec, stream) != CUDA_SUCCESS) return fail("cuGraphUpload failed");
    }
    if (std::getenv("CLIENT_GRAPH_EDIT") != nullptr) {
      using EditFn = CUresult (*)(CUgraphExec, CUgraphNode, const CUDA_MEMSET_NODE_PARAMS*, CUcontext);
      auto edit = reinterpret_cast<EditFn>(::dlsym(drv, "cuGraphExecMemsetNodeSetParams"));
      CUDA_MEMSET_NODE_PARAMS p{};
      if (edit == nullptr || edit(exec, reinterpret_cast<CUgraphNode>(graph + 2), &p, nullptr) != CUDA_SUCCESS)
        return fail("cuGraphExecMemsetNodeSetParams failed");
    }
  }
  // CLIENT_FUNCTION=0x14: launch the fake's heavy kernel (128 registers, 4
  // KiB static shared memory) with CLIENT_SMEM bytes of dynamic shared memory.
  auto function = reinterpret_cast<CUfunction>(
      std::getenv("CLIENT_FUNCTION") != nullptr ? std::strtoull(std::getenv("CLIENT_FUNCTION"), nullptr, 0) : 0x10);
  // CLIENT_CUBIN=PATH: launch kernel CLIENT_KERNEL (default block_ids, one
  // pointer parameter) of that cubin instead, on a GRID x 3 grid of 64
  // threads, and print the atom bounds the fake GPU saw (as "params").
  const char* cubin = std::getenv("CLIENT_CUBIN");
  CUdeviceptr cubin_out = 0x1000;
  void* cubin_params[1] = {&cubin_out};
  if (cubin != nullptr) {
    std::FILE* f = std::fopen(cubin, "rb");
    if (f == nullptr) return fail("cannot open CLIENT_CUBIN");
    std::vector<char> img;
    char buf[65536];
    for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) img.insert(img.end(), buf, buf + n);
    std::fclose(f);
    auto load = reinterpret_cast<CUresult (*)(CUmodule*, const void*)>(::dlsym(drv, "cuModuleLoadData"));
    auto get = reinterpret_cast<CUresult (*)(CUfunction*, CUmodule, const char*)>(::dlsym(drv, "cuModuleGetFunction"));
    CUmodule mod = nullptr;
    const char* name = std::getenv("CLIENT_KERNEL") != nullptr ? std::getenv("CLIENT_KERNEL") : "block_ids";
    if (load == nullptr || get == nullptr || img.empty() || load(&mod, img.data()) != CUDA_SUCCESS ||
        get(&function, mod, name) != CUDA_SUCCESS)
      return fail("cannot load CLIENT_CUBIN's kernel");
    if (bounds == nullptr || record_bounds == nullptr) return fail("the fake driver lacks fake_bounds");
    record_bounds(1);
  }
  const auto smem =
      static_cast<unsigned>(std::getenv("CLIENT_SMEM") != nullptr ? std::atol(std::getenv("CLIENT_SMEM")) : 0);
  // CLIENT_STREAM_OPS=1: stream operations between the launches (below).
  const bool stream_ops = std::getenv("CLIENT_STREAM_OPS") != nullptr;
  auto memset8 =
      reinterpret_cast<CUresult (*)(CUdeviceptr, unsigned char, size_t, CUstream)>(::dlsym(drv, "cuMemsetD8Async"));
  auto event_create = reinterpret_cast<CUresult (*)(CUevent*, unsigned)>(::dlsym(drv, "cuEventCreate"));
  auto event_record = reinterpret_cast<CUresult (*)(CUevent, CUstream)>(::dlsym(drv, "cuEventRecord"));
  auto event_destroy = reinterpret_cast<CUresult (*)(CUevent)>(::dlsym(drv, "cuEventDestroy_v2"));
  if (stream_ops &&
      (memset8 == nullptr || event_create == nullptr || event_record == nullptr || event_destroy == nullptr))
    return fail("the fake driver lacks memsets or events");
  const bool capture = std::getenv("CLIENT_CAPTURE") != nullptr;
  // CLIENT_BURST=N: the pause comes after every N launches (bursts of N).
  const long burst = std::max(1L, std::getenv("CLIENT_BURST") != nullptr ? std::atol(std::getenv("CLIENT_BURST")) : 1L);
  const std::string until = std::getenv("CLIENT_UNTIL") != nullptr ? std::getenv("CLIENT_UNTIL") : "";
  auto counted = [&] {
    std::vector<char> text(1 << 16);
    stats(text.data(), text.size());
    const std::string key = "\"" + until + "\":";
    const char* at = std::strstr(text.data(), key.c_str());
    return at != nullptr && std::atol(at + key.size()) >= 1;
  };
  const long fork_at = std::getenv("CLIENT_FORK_AT") != nullptr ? std::atol(std::getenv("CLIENT_FORK_AT")) : -1;
  auto value_writes = reinterpret_cast<unsigned long (*)()>(::dlsym(drv, "fake_value_writes"));
  const unsigned long writes_before = value_writes != nullptr ? value_writes() : 0;
  // CLIENT_CAPTURE_AFTER=N (with CLIENT_CAPTURE): the capture begins after
  // launch N - 1, CLIENT_CAPTURE_GAP_US later (default 1000), not before
  // the first launch.
  const long capture_after =
      std::getenv("CLIENT_CAPTURE_AFTER") != nullptr ? std::atol(std::getenv("CLIENT_CAPTURE_AFTER")) : 0;
  const long capture_gap_us =
      std::getenv("CLIENT_CAPTURE_GAP_US") != nullptr ? std::atol(std::getenv("CLIENT_CAPTURE_GAP_US")) : 1000;
  auto captured_writes = reinterpret_cast<unsigned long (*)()>(::dlsym(drv, "fake_captured_value_writes"));
  auto captured_events = reinterpret_cast<unsigned long (*)()>(::dlsym(drv, "fake_captured_event_records"));
  auto begin_capture = [&] {
    auto begin = reinterpret_cast<CUresult (*)(CUstream, CUstreamCaptureMode)>(::dlsym(drv, "cuStreamBeginCapture_v2"));
    return begin != nullptr && begin(stream, CU_STREAM_CAPTURE_MODE_GLOBAL) == CUDA_SUCCESS;
  };
  if (capture && capture_after <= 0 && !begin_capture()) return fail("capture failed");
  const char* stop_file = std::getenv("CLIENT_STOP_FILE");
  const std::vector<Gate> gates = parse_gates(std::getenv("CLIENT_GATES"));
  for (int i = 0; i < launches; ++i) {
    if (stop_file != nullptr && i > 0 && ::access(stop_file, F_OK) == 0) break;
    if (!pass_gates(gates, i)) return fail("a gate stayed shut for 120 s");
    if (capture && capture_after > 0 && i == capture_after) {
      std::this_thread::sleep_for(std::chrono::microseconds(capture_gap_us));
      if (!begin_capture()) return fail("capture failed");
    }
    if (i == hang_after) ::setenv("FAKE_MARKERS_HANG", "1", 1);
    const int dev = i % devices;
    if (devices > 1) {
      if (set_current(contexts[static_cast<std::size_t>(dev)]) != CUDA_SUCCESS) return fail("cuCtxSetCurrent failed");
      stream = stream_of(dev);
    }
    const std::uint64_t t = now_ns();
    std::uint32_t value[2] = {static_cast<std::uint32_t>(i), static_cast<std::uint32_t>(i) + 1000};
    void* params[1] = {value};
    const CUresult rc = exec != nullptr    ? graph_launch(exec, stream)
                        : cubin != nullptr ? launch(function, grid, 3, 1, 64, 1, 1, 0, stream, cubin_params, nullptr)
                                           : launch(function, grid, 1, 1, 256, 1, 1, smem, stream,
                                                    with_params ? params : nullptr, nullptr);
    value[0] = value[1] = 0xdeadU;
    if (stream_ops) {
      // A memset of value i after launch i, then an event recorded and
      // destroyed at once (cuEventDestroy must not overtake the record).
      CUevent ev = nullptr;
      if (memset8(0x1000, static_cast<unsigned char>(i), 16, stream) != CUDA_SUCCESS ||
          event_create(&ev, 0) != CUDA_SUCCESS || event_record(ev, stream) != CUDA_SUCCESS ||
          event_destroy(ev) != CUDA_SUCCESS)
        return fail("a stream operation failed");
    }
    int prio = 0;
    const std::string prio_text = last_priority(&prio) != 0 ? std::to_string(prio) : "null";
    std::printf("{\"i\":%d,\"t_ns\":%llu,\"rc\":%d,\"tpcs\":\"%s\",\"prio\":%s,\"dev\":%d}\n", i,
                static_cast<unsigned long long>(t), static_cast<int>(rc), last_tpcs(last_qmd()).c_str(),
                prio_text.c_str(), dev);
    std::fflush(stdout);
    if (sync_every > 0 && (i + 1) % sync_every == 0) {
      if (sync == nullptr || sync(stream) != CUDA_SUCCESS) return fail("cuStreamSynchronize failed");
      // Launches the (fake) GPU has seen when the synchronisation returned:
      // with deferred launches, every one made before it.
      std::printf("{\"synced\":%d,\"descriptors\":%lu}\n", i + 1, descriptors != nullptr ? descriptors() : 0UL);
      std::fflush(stdout);
    }
    if (fork_at == i) {
      std::fflush(nullptr);
      const pid_t child = ::fork();
      if (child < 0) return fail("fork failed");
      if (child == 0) std::exit(0);
      int status = 0;
      if (::waitpid(child, &status, 0) != child || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
        return fail("the forked child did not exit 0");
      std::printf("{\"forked\":%d}\n", i);
      std::fflush(stdout);
    }
    if (pause_ms > 0 && (i + 1) % burst == 0) sleep_ms(pause_ms);
    if (!until.empty() && (i + 1) % burst == 0 && counted()) break;
  }
  if (capture) {
    auto end = reinterpret_cast<CUresult (*)(CUstream, CUgraph*)>(::dlsym(drv, "cuStreamEndCapture"));
    CUgraph g = nullptr;
    if (end == nullptr || end(stream, &g) != CUDA_SUCCESS) return fail("capture failed");
    std::printf("{\"value_writes\":%lu}\n", value_writes != nullptr ? value_writes() - writes_before : 0UL);
    std::printf("{\"captured_value_writes\":%lu}\n", captured_writes != nullptr ? captured_writes() : 0UL);
    std::printf("{\"captured_event_records\":%lu}\n", captured_events != nullptr ? captured_events() : 0UL);
  }
  if (devices > 1 && std::getenv("CLIENT_SYNC_ALL") != nullptr) {
    if (set_current(contexts[0]) != CUDA_SUCCESS) return fail("cuCtxSetCurrent failed");
    for (int d = 0; d < devices; ++d)
      if (sync == nullptr || sync(stream_of(d)) != CUDA_SUCCESS) return fail("cuStreamSynchronize failed");
    std::printf("{\"synced_all\":%d}\n", devices);
    std::fflush(stdout);
  }
  if (!pass_gates(gates, launches)) return fail("a gate stayed shut for 120 s");
  if (hold_ms > 0) sleep_ms(hold_ms);
  if (with_params || cubin != nullptr) {
    const int most = cubin != nullptr ? 64 * launches : launches + 1;  // atoms of rewritten kernels
    std::vector<std::uint32_t> b(2 * static_cast<std::size_t>(most));
    const int n = bounds(b.data(), most);
    std::string out = "{\"params\":[";
    for (std::size_t k = 0; static_cast<int>(k) < n && static_cast<int>(k) < most; ++k)
      out +=
          (k != 0 ? "," : "") + std::string("[") + std::to_string(b[2 * k]) + "," + std::to_string(b[2 * k + 1]) + "]";
    std::printf("%s]}\n", out.c_str());
  }
  if (stream_ops || (exec != nullptr && std::atol(std::getenv("CLIENT_GRAPH")) >= 2)) {
    // The stream operations are made by lithos's worker: wait for them.
    if (sync == nullptr || sync(stream) != CUDA_SUCCESS) return fail("cuStreamSynchronize failed");
    auto ops = reinterpret_cast<int (*)(char*, size_t)>(::dlsym(drv, "fake_ops"));
    std::vector<char> text(1 << 14);
    if (ops == nullptr) return fail("the fake driver lacks fake_ops");
    ops(text.data(), text.size());
    std::printf("{\"ops\":\"%s\"}\n", text.data());
  }
  std::vector<char> buf(1 << 16);
  stats(buf.data(), buf.size());
  std::string js(buf.data());
  while (!js.empty() && (js.back() == '\n' || js.back() == ' ')) js.pop_back();
  std::printf("{\"stats\":%s}\n", js.c_str());
  std::fflush(stdout);
  if (const char* now = std::getenv("CLIENT_REPORT_NOW"); now != nullptr) {
    // As a program that ends with _exit (PyTorch harnesses do): the exit
    // report written on request, then (1) _exit, or (2) a normal exit,
    // which must not write it again.
    auto report = reinterpret_cast<int (*)()>(::dlsym(RTLD_DEFAULT, "lithos_report_now"));
    if (report == nullptr || report() != 0) return fail("lithos_report_now failed");
    if (std::atoi(now) == 1) ::_exit(0);
  }
  return 0;
}
