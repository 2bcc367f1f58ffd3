// A FAKE CUDA driver for the CPU tests: built as libcuda.so.1 in its own
// directory, put first on LD_LIBRARY_PATH, so that liblithos.so and the test
// programs load it instead of (or where there is no) real driver.
//
// It behaves like the real driver in the ways lithos depends on:
//  - cuGetProcAddress(_v2) picks the exported variant from the symbol, the
//    version and the per-thread-stream flags (cuLaunchKernel vs _ptsz,
//    cuGraphInstantiate legacy vs WithFlags, cuGetProcAddress v1 vs v2);
//  - cuGetExportTable hands out the launch-descriptor callback table (entry 3
//    subscribes, entry 6 enables domain 0xb / cbid 1), and every kernel
//    launch builds a 384-byte QMD V04_00 (version byte 0x40 at 72) and calls
//    the subscribed callback on the launching thread before "uploading" it;
//  - graphs build their descriptors at instantiation; a launch of the exec
//    "runs" the descriptors built then (the H100 freezes the mask per exec).
// It records every call (name, arguments) per thread for the tests to read
// through the fake_* functions, and returns a settable result.
//
// Switches (environment, read at each use): FAKE_EVENT_US=<us> (what
// cuEventElapsedTime answers; default 1000), FAKE_CUDA_NO_DEVICE=1 (cuInit
// fails with CUDA_ERROR_NO_DEVICE), FAKE_CUDA_NO_EXPORT_TABLE=1,
// FAKE_QMD_VERSION=<byte> (descriptor version byte), FAKE_CUDA_DEVICES=<n>
// (device d's UUID ends in 0xff - d), FAKE_CUDA_CTX_DEVICE=<d> (the current
// context's device, default 0, for a thread that set none with cuCtxSetCurrent),
// FAKE_CUDA_FAULT_FILE=<path> (a fatal GPU fault: once the file exists,
// launches, synchronisations and stream writes return the CUresult it holds,
// 700 when it holds none, as every call of a lost context does; one file
// shared by several processes is MPS spreading the fault),
// FAKE_CUDA_FAULT_AT=<n> (the n-th kernel launch of this process writes 700
// into that file: the fault comes from its kernel, and the launch itself
// succeeds, as a real one does).
#include "intercept/cuda_abi.hpp"  // first: every ABI variant declared

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#define FAKE_API extern "C" __attribute__((visibility("default")))

// What the tests read back.
struct FakeCall {
  char name[64];
  std::uintptr_t args[12];
  int nargs;
};

namespace {

thread_local FakeCall t_last_call{};
thread_local std::uint8_t t_last_qmd[384];
thread_local bool t_have_qmd = false;
std::atomic<unsigned long> g_descriptors{0};
std::atomic<unsigned long> g_calls{0};
std::atomic<int> g_result{CUDA_SUCCESS};

template <class T>
std::uintptr_t to_word(T v) {
  if constexpr (std::is_pointer_v<T>) {
    return reinterpret_cast<std::uintptr_t>(v);
  } else if constexpr (std::is_enum_v<T>) {
    return static_cast<std::uintptr_t>(v);
  } else {
    return static_cast<std::uintptr_t>(static_cast<std::uint64_t>(v));
  }
}

template <class... A>
void record(const char* name, A... a) {
  FakeCall c{};
  std::strncpy(c.name, name, sizeof c.name - 1);
  const std::uintptr_t v[] = {0, to_word(a)...};
  c.nargs = static_cast<int>(sizeof...(A));
  for (int i = 0; i < c.nargs && i < 12; ++i) c.args[i] = v[i + 1];
  t_last_call = c;
  g_calls.fetch_add(1);
}

CUresult result() { return static_cast<CUresult>(g_result.load()); }

bool env_on(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && std::strcmp(v, "1") == 0;
}

// The launch-descriptor callback table.
using DriverCallback = void (*)(void* user, int domain, int cbid, const void* params);
std::mutex g_cb_mutex;
struct Subscriber {
  DriverCallback cb = nullptr;
  void* user = nullptr;
  bool enabled = false;
};
std::vector<Subscriber> g_subscribers;

int fake_subscribe(std::uint32_t* handle, DriverCallback cb, void* user) {
  const std::lock_guard<std::mutex> lock(g_cb_mutex);
  g_subscribers.push_back({cb, user, false});
  *handle = static_cast<std::uint32_t>(g_subscribers.size());
  return 0;
}
int fake_enable(std::uint32_t on, std::uint32_t handle, int domain, int cbid) {
  const std::lock_guard<std::mutex> lock(g_cb_mutex);
  if (handle == 0 || handle > g_subscribers.size()) return 1;
  if (domain == 0xb && cbid == 1) g_subscribers[handle - 1].enabled = on != 0;
  return 0;
}
int fake_unused_entry() { return 0; }
const void* g_table[8] = {
    reinterpret_cast<const void*>(&fake_unused_entry), reinterpret_cast<const void*>(&fake_unused_entry),
    reinterpret_cast<const void*>(&fake_unused_entry), reinterpret_cast<const void*>(&fake_subscribe),
    reinterpret_cast<const void*>(&fake_unused_entry), reinterpret_cast<const void*>(&fake_unused_entry),
    reinterpret_cast<const void*>(&fake_enable),       reinterpret_cast<const void*>(&fake_unused_entry)};
const unsigned char kDescriptorTableId[16] = {0x2c, 0x8e, 0x0a, 0xd8, 0x07, 0x10, 0xab, 0x4e,
                                              0x90, 0xdd, 0x54, 0x71, 0x9f, 0xe5, 0xf7, 0x4b};

// Builds one descriptor, lets the subscribers edit it, keeps a copy.
// `grid_x` (not 0): its GRID_WIDTH (V04_00: u32 at byte 128).
void build_descriptor(std::uint8_t* out, std::uint32_t grid_x = 0) {
  std::uint8_t qmd[384] = {};
  std::memcpy(qmd + 128, &grid_x, sizeof grid_x);
  const char* v = std::getenv("FAKE_QMD_VERSION");
  qmd[72] = v != nullptr ? static_cast<std::uint8_t>(std::strtoul(v, nullptr, 0)) : 0x40;
  // FAKE_QMD_CLUSTER=<n>: every descriptor carries an n x 1 x 1 cluster
  // shape (V04_00 bytes 268-270), as the driver writes it.
  if (const char* c = std::getenv("FAKE_QMD_CLUSTER")) {
    qmd[268] = static_cast<std::uint8_t>(std::strtoul(c, nullptr, 0));
    qmd[269] = qmd[270] = 1;
  }
  struct {
    std::uint32_t size;
    std::uint32_t pad;
    void* slots[10];
  } params{88, 0, {}};
  params.slots[3] = qmd;  // pointer slot 4 (byte offset 32)
  std::vector<Subscriber> subs;
  {
    const std::lock_guard<std::mutex> lock(g_cb_mutex);
    subs = g_subscribers;
  }
  for (const Subscriber& s : subs) {
    if (s.enabled) s.cb(s.user, 0xb, 1, &params);
  }
  g_descriptors.fetch_add(1);
  std::memcpy(out, qmd, sizeof qmd);
  std::memcpy(t_last_qmd, qmd, sizeof qmd);
  t_have_qmd = true;
}

// A fake GPU for events: launches are counted as queued; the GPU "catches
// up" (every queued launch ends) after g_event_delay NOT_READY answers of
// cuEventQuery, or never with g_events_hang.
std::atomic<std::uint64_t> g_launched{0};
std::atomic<std::uint64_t> g_plain_launches{0};  // cuLaunchKernel calls (memsets note how many came before)
std::atomic<std::uint64_t> g_done{0};
std::atomic<int> g_event_delay{3};
std::atomic<int> g_event_polls{0};
std::atomic<bool> g_events_hang{false};
std::atomic<bool> g_capturing{false};
struct FakeEvent {
  std::uint64_t target = 0;  // launches queued when it was recorded
  unsigned flags = 0;
};

// Stream priorities set through cuStreamSetAttribute, by handle; the
// priority the last launch of this thread went with (kNoPriority: its
// stream's own, never set).
constexpr int kNoPriority = 1000;
std::mutex g_prio_mu;
std::map<std::uintptr_t, int> g_priorities;
thread_local int t_last_priority = kNoPriority;
void note_priority(CUstream s) {
  const std::lock_guard<std::mutex> lock(g_prio_mu);
  const auto it = g_priorities.find(reinterpret_cast<std::uintptr_t>(s));
  t_last_priority = it != g_priorities.end() ? it->second : kNoPriority;
}

// The fatal fault of FAKE_CUDA_FAULT_FILE, once there: CUDA_SUCCESS before.
CUresult lost() {
  const char* path = std::getenv("FAKE_CUDA_FAULT_FILE");
  if (path == nullptr) return CUDA_SUCCESS;
  std::FILE* f = std::fopen(path, "r");
  if (f == nullptr) return CUDA_SUCCESS;
  int code = 700;
  if (std::fscanf(f, "%d", &code) != 1 || code == 0) code = 700;
  std::fclose(f);
  return static_cast<CUresult>(code);
}

CUresult launch() {
  if (const CUresult f = lost(); f != CUDA_SUCCESS) return f;
  const unsigned long n = g_launched.fetch_add(1) + 1;
  if (const char* at = std::getenv("FAKE_CUDA_FAULT_AT"); at != nullptr && n == std::strtoul(at, nullptr, 10)) {
    if (const char* path = std::getenv("FAKE_CUDA_FAULT_FILE")) {
      if (std::FILE* f = std::fopen(path, "w")) {
        std::fputs("700\n", f);
        std::fclose(f);
      }
    }
  }
  std::uint8_t q[384];
  build_descriptor(q);
  return result();
}

// Graph execs: descriptors built at instantiation, replayed at launch.
std::mutex g_graph_mutex;
std::map<std::uintptr_t, std::vector<std::uint8_t>> g_execs;
std::uintptr_t g_next_exec = 0x5000;

// FAKE_GRAPH_BUILD_AT_LAUNCH=1: an exec's descriptors are built at its
// first launch instead (as the H100 does for an exec not uploaded).
// FAKE_GRAPH_NODE_DESCRIPTORS=1: one descriptor per kernel node of the graph
// (child graphs included, in cuGraphGetNodes order), carrying the node's
// grid width, kept for fake_exec_descriptors; otherwise one in all.
std::vector<std::uint32_t> kernel_grids(CUgraph g);
std::map<std::uintptr_t, std::vector<std::uint8_t>> g_node_qmds;  // by exec (g_graph_mutex)
CUresult instantiate(CUgraphExec* out, CUgraph graph = nullptr) {
  std::vector<std::uint8_t> q;
  std::vector<std::uint8_t> nodes;
  if (env_on("FAKE_GRAPH_NODE_DESCRIPTORS")) {
    for (const std::uint32_t x : kernel_grids(graph)) {
      std::uint8_t one[384];
      build_descriptor(one, x);
      nodes.insert(nodes.end(), one, one + 384);
    }
    if (!nodes.empty()) q.assign(nodes.end() - 384, nodes.end());
  } else if (!env_on("FAKE_GRAPH_BUILD_AT_LAUNCH")) {
    q.resize(384);
    build_descriptor(q.data());
  }
  const std::lock_guard<std::mutex> lock(g_graph_mutex);
  const std::uintptr_t id = g_next_exec += 0x10;
  g_execs[id] = q;
  g_node_qmds[id] = nodes;
  if (out != nullptr) *out = reinterpret_cast<CUgraphExec>(id);
  return result();
}

// A launch (`launch`: the descriptors are replayed) or an upload (builds
// them and runs nothing) of an exec: either builds its descriptors if they
// are not yet (FAKE_GRAPH_BUILD_AT_LAUNCH).
CUresult graph_launch(CUgraphExec exec, bool launch = true) {
  if (const CUresult f = lost(); f != CUDA_SUCCESS) return f;
  const std::lock_guard<std::mutex> lock(g_graph_mutex);
  const auto it = g_execs.find(reinterpret_cast<std::uintptr_t>(exec));
  if (it == g_execs.end()) return CUDA_ERROR_INVALID_HANDLE;
  if (it->second.empty()) {
    it->second.resize(384);
    build_descriptor(it->second.data());
  }
  if (launch) {
    std::memcpy(t_last_qmd, it->second.data(), 384);
    t_have_qmd = true;
  }
  return result();
}

// Not exported: cuGetProcAddress hands it out for cuLaunchCooperativeKernel,
// like a driver returning an internal entry point.
CUresult internal_cooperative(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                              CUstream, void**) {
  record("internal_cooperative");
  return launch();
}

CUresult generic_stub() { return CUDA_ERROR_NOT_SUPPORTED; }

}  // namespace

// ---- graphs replayed node by node: the stream operations, in the order made ----
namespace {
std::mutex g_ops_mu;
std::string g_ops;  // "K16,M,G,..." (K<gridX>: cuLaunchKernelEx, M: a 2D memset, G: a graph launch, W: a stream
                    // wait, S<v>@<n>: cuMemsetD8Async, X: a record of a destroyed event)
void note_op(const std::string& op) {
  const std::lock_guard<std::mutex> lock(g_ops_mu);
  g_ops += (g_ops.empty() ? "" : ",") + op;
}
}  // namespace
// Copies the operations log (NUL-terminated, truncated to `n`); returns its length.
FAKE_API int fake_ops(char* out, size_t n) {
  const std::lock_guard<std::mutex> lock(g_ops_mu);
  if (out != nullptr && n > 0) {
    std::strncpy(out, g_ops.c_str(), n - 1);
    out[n - 1] = 0;
  }
  return static_cast<int>(g_ops.size());
}

// ---- test access --------------------------------------------------------------
FAKE_API const FakeCall* fake_last_call() { return &t_last_call; }
FAKE_API const std::uint8_t* fake_last_qmd() { return t_have_qmd ? t_last_qmd : nullptr; }
FAKE_API unsigned long fake_descriptors() { return g_descriptors.load(); }
// The descriptors built for `exec`'s kernel nodes (FAKE_GRAPH_NODE_DESCRIPTORS),
// at most `max` of 384 bytes each into `out`; returns how many it has.
FAKE_API int fake_exec_descriptors(CUgraphExec exec, std::uint8_t* out, int max) {
  const std::lock_guard<std::mutex> lock(g_graph_mutex);
  const auto it = g_node_qmds.find(reinterpret_cast<std::uintptr_t>(exec));
  if (it == g_node_qmds.end()) return 0;
  const int n = static_cast<int>(it->second.size() / 384);
  for (int i = 0; i < n && i < max; ++i) std::memcpy(out + 384 * i, it->second.data() + 384 * i, 384);
  return n;
}
FAKE_API unsigned long fake_calls() { return g_calls.load(); }
FAKE_API void fake_set_result(int r) { g_result.store(r); }
FAKE_API int fake_subscribers() {
  const std::lock_guard<std::mutex> lock(g_cb_mutex);
  return static_cast<int>(g_subscribers.size());
}

// ---- atomizer tests: images the driver received, bounds of launches -----------
namespace {
std::mutex g_atom_mu;
std::vector<std::pair<std::uint32_t, std::uint32_t>> g_bounds;  // (lo, hi) per launch
std::vector<std::uint64_t> g_outstanding;                       // launches not ended when each was made
int g_bounds_index = -1;  // kernelParams[index] holds the bounds (set by the test)
std::atomic<int> g_refuse_loads{0};
std::atomic<std::uintptr_t> g_next_module{0x7000};
void note_bounds(void** params) {
  if (params == nullptr) return;
  const std::lock_guard<std::mutex> lock(g_atom_mu);
  if (g_bounds_index < 0) return;
  std::uint32_t b[2] = {};
  std::memcpy(b, params[g_bounds_index], sizeof b);
  g_bounds.emplace_back(b[0], b[1]);
  g_outstanding.push_back(g_launched.load() - g_done.load());
}
}  // namespace
FAKE_API void fake_record_bounds(int index) {
  const std::lock_guard<std::mutex> lock(g_atom_mu);
  g_bounds_index = index;
  g_bounds.clear();
  g_outstanding.clear();
  if (!g_events_hang.load()) g_done.store(g_launched.load());  // the GPU starts idle
}
// Like fake_bounds, for how many launches had not ended when each recorded launch was made.
FAKE_API int fake_outstanding(std::uint64_t* out, int max) {
  const std::lock_guard<std::mutex> lock(g_atom_mu);
  for (int i = 0; i < max && i < static_cast<int>(g_outstanding.size()); ++i)
    out[i] = g_outstanding[static_cast<std::size_t>(i)];
  return static_cast<int>(g_outstanding.size());
}
// Events: `delay` NOT_READY answers before queued launches end; `hang`: they never end.
FAKE_API void fake_events(int delay, int hang) {
  g_event_delay.store(delay);
  g_events_hang.store(hang != 0);
  g_event_polls.store(0);
  if (hang == 0) g_done.store(g_launched.load());
}
// cuStreamIsCapturing answers "active" for every stream while on.
FAKE_API void fake_capturing(int on) { g_capturing.store(on != 0); }
// Copies up to `max` recorded (lo, hi) pairs into out[2*i], out[2*i+1]; returns how many there are.
FAKE_API int fake_bounds(std::uint32_t* out, int max) {
  const std::lock_guard<std::mutex> lock(g_atom_mu);
  for (int i = 0; i < max && i < static_cast<int>(g_bounds.size()); ++i) {
    out[2 * i] = g_bounds[static_cast<std::size_t>(i)].first;
    out[2 * i + 1] = g_bounds[static_cast<std::size_t>(i)].second;
  }
  return static_cast<int>(g_bounds.size());
}
// Every function takes one 8-byte parameter at offset 0 (deferred launches
// copy kernelParams by this layout).
FAKE_API CUresult cuFuncGetParamInfo(CUfunction, size_t index, size_t* offset, size_t* size) {
  if (index > 0) return CUDA_ERROR_INVALID_VALUE;
  if (offset != nullptr) *offset = 0;
  if (size != nullptr) *size = 8;
  return CUDA_SUCCESS;
}
// The next `n` module loads fail with CUDA_ERROR_INVALID_IMAGE.
FAKE_API void fake_refuse_loads(int n) { g_refuse_loads.store(n); }

// ---- the driver ---------------------------------------------------------------
// The thread that first initialised the driver (the application's).
std::atomic<bool> g_init_seen{false};
std::thread::id g_init_thread;
FAKE_API CUresult cuInit(unsigned int flags) {
  record("cuInit", flags);
  if (!g_init_seen.exchange(true)) g_init_thread = std::this_thread::get_id();
  return env_on("FAKE_CUDA_NO_DEVICE") ? CUDA_ERROR_NO_DEVICE : CUDA_SUCCESS;
}
FAKE_API CUresult cuDriverGetVersion(int* v) {
  if (v != nullptr) *v = 13000;
  return CUDA_SUCCESS;
}
FAKE_API CUresult cuDeviceGetCount(int* n) {
  const char* v = std::getenv("FAKE_CUDA_DEVICES");
  if (env_on("FAKE_CUDA_NO_DEVICE")) return CUDA_ERROR_NO_DEVICE;
  if (n != nullptr) *n = v != nullptr ? std::atoi(v) : 1;
  return CUDA_SUCCESS;
}
FAKE_API CUresult cuDeviceGet(CUdevice* d, int ordinal) {
  if (d != nullptr) *d = ordinal;
  return CUDA_SUCCESS;
}
FAKE_API CUresult cuDeviceGetUuid_v2(CUuuid* u, CUdevice dev) {
  if (u == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const unsigned char b[16] = {0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77,
                               0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, static_cast<unsigned char>(0xff - dev)};
  std::memcpy(u->bytes, b, 16);
  return CUDA_SUCCESS;
}
FAKE_API CUresult cuDeviceGetUuid(CUuuid* u, CUdevice dev) { return cuDeviceGetUuid_v2(u, dev); }
// Device d's primary context is the handle 0xc0de + (d << 20). A thread's
// current context is the one it set (cuCtxSetCurrent), else that of
// FAKE_CUDA_CTX_DEVICE (default 0).
namespace {
thread_local int t_ctx_device = -1;
CUcontext context_of(int dev) {
  return reinterpret_cast<CUcontext>(0xc0deUL + (static_cast<unsigned long>(dev) << 20));
}
int current_device() {
  if (t_ctx_device >= 0) return t_ctx_device;
  const char* v = std::getenv("FAKE_CUDA_CTX_DEVICE");
  return v != nullptr ? std::atoi(v) : 0;
}
}  // namespace
FAKE_API CUresult cuCtxGetDevice(CUdevice* d) {
  if (d != nullptr) *d = current_device();
  return CUDA_SUCCESS;
}
FAKE_API CUresult cuCtxGetCurrent(CUcontext* ctx) {
  if (ctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *ctx = context_of(current_device());
  return CUDA_SUCCESS;
}
FAKE_API CUresult cuCtxSetCurrent(CUcontext ctx) {
  const auto v = reinterpret_cast<unsigned long>(ctx);
  if (v < 0xc0deUL || ((v - 0xc0deUL) & 0xfffffUL) != 0) return CUDA_ERROR_INVALID_CONTEXT;
  t_ctx_device = static_cast<int>((v - 0xc0deUL) >> 20);
  return CUDA_SUCCESS;
}
FAKE_API CUresult cuDevicePrimaryCtxRetain(CUcontext* ctx, CUdevice dev) {
  record("cuDevicePrimaryCtxRetain", ctx, dev);
  if (ctx != nullptr) *ctx = context_of(dev);
  return result();
}
FAKE_API CUresult cuGetExportTable(const void** table, const CUuuid* id) {
  if (table == nullptr || id == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!env_on("FAKE_CUDA_NO_EXPORT_TABLE") && std::memcmp(id->bytes, kDescriptorTableId, 16) == 0) {
    *table = g_table;
    return CUDA_SUCCESS;
  }
  *table = nullptr;
  return CUDA_ERROR_INVALID_VALUE;
}

FAKE_API CUresult cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
                                 unsigned int by, unsigned int bz, unsigned int shmem, CUstream s, void** params,
                                 void** extra) {
  record("cuLaunchKernel", f, gx, gy, gz, bx, by, bz, shmem, s, params, extra);
  g_plain_launches.fetch_add(1);
  note_bounds(params);
  note_priority(s);
  return launch();
}
FAKE_API CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
                                      unsigned int by, unsigned int bz, unsigned int shmem, CUstream s, void** params,
                                      void** extra) {
  record("cuLaunchKernel_ptsz", f, gx, gy, gz, bx, by, bz, shmem, s, params, extra);
  return launch();
}
FAKE_API CUresult cuLaunchKernelEx(const CUlaunchConfig* c, CUfunction f, void** params, void** extra) {
  record("cuLaunchKernelEx", c, f, params, extra);
  if (c != nullptr) note_op("K" + std::to_string(c->gridDimX));
  return launch();
}
FAKE_API CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig* c, CUfunction f, void** params, void** extra) {
  record("cuLaunchKernelEx_ptsz", c, f, params, extra);
  return launch();
}
// Exported without its _ptsz twin: lithos's cuLaunchCooperativeKernel_ptsz
// hook must then answer CUDA_ERROR_NOT_FOUND rather than call null.
FAKE_API CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                                            unsigned int bx, unsigned int by, unsigned int bz, unsigned int shmem,
                                            CUstream s, void** params) {
  record("cuLaunchCooperativeKernel", f, gx, gy, gz, bx, by, bz, shmem, s, params);
  return launch();
}
FAKE_API CUresult cuGraphInstantiate(CUgraphExec* e, CUgraph g, CUgraphNode* err, char* log, size_t n) {
  record("cuGraphInstantiate", e, g, err, log, n);
  return instantiate(e, g);
}
FAKE_API CUresult cuGraphInstantiateWithFlags(CUgraphExec* e, CUgraph g, unsigned long long flags) {
  record("cuGraphInstantiateWithFlags", e, g, flags);
  return instantiate(e, g);
}
FAKE_API CUresult cuGraphLaunch(CUgraphExec e, CUstream s) {
  record("cuGraphLaunch", e, s);
  note_op("G");
  return graph_launch(e);
}
FAKE_API CUresult cuGraphLaunch_ptsz(CUgraphExec e, CUstream s) {
  record("cuGraphLaunch_ptsz", e, s);
  return graph_launch(e);
}
FAKE_API CUresult cuGraphUpload(CUgraphExec e, CUstream s) {
  record("cuGraphUpload", e, s);
  return graph_launch(e, false);
}
FAKE_API CUresult cuGraphUpload_ptsz(CUgraphExec e, CUstream s) {
  record("cuGraphUpload_ptsz", e, s);
  return graph_launch(e, false);
}
FAKE_API CUresult cuGraphExecDestroy(CUgraphExec e) {
  record("cuGraphExecDestroy", e);
  const std::lock_guard<std::mutex> lock(g_graph_mutex);
  g_execs.erase(reinterpret_cast<std::uintptr_t>(e));
  return result();
}
FAKE_API CUresult cuStreamDestroy_v2(CUstream s) {
  record("cuStreamDestroy_v2", s);
  return result();
}
FAKE_API CUresult cuModuleGetFunction(CUfunction* f, CUmodule m, const char* name) {
  record("cuModuleGetFunction", f, m, name);
  // 0xf00 for the tests' made-up modules; one handle per (module, name) for
  // modules cuModuleLoadData created.
  std::uintptr_t h = 0xf00;
  const auto mod = reinterpret_cast<std::uintptr_t>(m);
  if (mod >= 0x7000 && name != nullptr) h = mod * 0x100 + (std::hash<std::string>{}(name)&0xf0);
  if (f != nullptr) *f = reinterpret_cast<CUfunction>(h);
  return result();
}
FAKE_API CUresult cuLibraryGetKernel(CUkernel* k, CUlibrary lib, const char* name) {
  record("cuLibraryGetKernel", k, lib, name);
  if (k != nullptr) *k = reinterpret_cast<CUkernel>(0xbee);
  return result();
}
FAKE_API CUresult cuKernelGetFunction(CUfunction* f, CUkernel k) {
  record("cuKernelGetFunction", f, k);
  if (f != nullptr) *f = reinterpret_cast<CUfunction>(0xf01);
  return result();
}
FAKE_API CUresult cuMemAlloc_v2(CUdeviceptr* p, size_t n) {
  record("cuMemAlloc_v2", p, n);
  if (p != nullptr) *p = 0x1000;
  return result();
}

FAKE_API CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int version, cuuint64_t flags,
                                      CUdriverProcAddressQueryResult* status);

FAKE_API CUresult cuGetProcAddress(const char* symbol, void** pfn, int version, cuuint64_t flags) {
  record("cuGetProcAddress", symbol, pfn, version, flags);
  CUdriverProcAddressQueryResult st{};
  const CUresult r = cuGetProcAddress_v2(symbol, pfn, version, flags, &st);
  record("cuGetProcAddress", symbol, pfn, version, flags);
  return r;
}

// The exported address of a fake function (what the real driver exports).
FAKE_API void* fake_address_of(const char* name);

FAKE_API CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int version, cuuint64_t flags,
                                      CUdriverProcAddressQueryResult* status) {
  record("cuGetProcAddress_v2", symbol, pfn, version, flags, status);
  if (symbol == nullptr || pfn == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const bool ptds = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
  const std::string s = symbol;
  void* out = nullptr;
  if (s == "cuLaunchKernel" || s == "cuLaunchKernelEx" || s == "cuGraphLaunch") {
    out = fake_address_of((s + (ptds ? "_ptsz" : "")).c_str());
  } else if (s == "cuGraphInstantiate") {
    out = fake_address_of(version >= 12000 ? "cuGraphInstantiateWithFlags" : "cuGraphInstantiate");
  } else if (s == "cuGetProcAddress") {
    out = fake_address_of(version >= 12000 ? "cuGetProcAddress_v2" : "cuGetProcAddress");
  } else if (s == "cuMemAlloc" || s == "cuDeviceGetUuid") {
    out = fake_address_of((s + "_v2").c_str());
  } else if (s == "cuLaunchCooperativeKernel") {
    out = reinterpret_cast<void*>(&internal_cooperative);
  } else if (s.rfind("cuFakeMissing", 0) == 0) {
    out = nullptr;
  } else {
    out = fake_address_of(symbol);
    // Entry points the fake does not implement resolve to a stub that
    // answers CUDA_ERROR_NOT_SUPPORTED (lithos's own driver loader only
    // needs them to exist).
    if (out == nullptr && s.rfind("cu", 0) == 0) out = reinterpret_cast<void*>(&generic_stub);
  }
  *pfn = out;
  if (status != nullptr) *status = out != nullptr ? CU_GET_PROC_ADDRESS_SUCCESS : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  return out != nullptr ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

// Host memory mapped for the device (lithosd's completion page): the fake
// GPU's device address of host memory is the host address, and a stream's
// memory write lands at once (the fake GPU has always caught up). With
// FAKE_MARKERS_HANG=1 no write ever lands (a GPU that never reaches them).
std::atomic<unsigned long> g_value_writes{0};
FAKE_API unsigned long fake_value_writes() { return g_value_writes.load(); }
// Registering host memory is a call a stream capture forbids: while one
// runs, it fails and invalidates the capture (its end then fails), unless
// the calling thread's capture mode is relaxed (as the driver does; the fake
// does not tell global from thread-local captures).
thread_local CUstreamCaptureMode t_capture_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;
std::atomic<bool> g_capture_invalidated{false};
FAKE_API CUresult cuMemHostRegister_v2(void* p, size_t bytes, unsigned) {
  record("cuMemHostRegister_v2", p, bytes);
  if (g_capturing.load() && t_capture_mode != CU_STREAM_CAPTURE_MODE_RELAXED) {
    g_capture_invalidated.store(true);
    return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  }
  return p != nullptr && bytes > 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
FAKE_API CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr* d, void* p, unsigned) {
  if (d == nullptr || p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *d = reinterpret_cast<CUdeviceptr>(p);
  return CUDA_SUCCESS;
}
// Writes made while a capture runs: on a GPU they would be taken into the
// graph being captured (the fake's capture is of every stream).
std::atomic<unsigned long> g_captured_writes{0};
FAKE_API unsigned long fake_captured_value_writes() { return g_captured_writes.load(); }
FAKE_API CUresult cuStreamWriteValue64_v2(CUstream, CUdeviceptr addr, cuuint64_t value, unsigned) {
  if (addr == 0) return CUDA_ERROR_INVALID_VALUE;
  if (const CUresult f = lost(); f != CUDA_SUCCESS) return f;
  g_value_writes.fetch_add(1);
  if (g_capturing.load()) g_captured_writes.fetch_add(1);
  if (!env_on("FAKE_MARKERS_HANG"))
    reinterpret_cast<std::atomic<std::uint64_t>*>(addr)->store(value, std::memory_order_release);
  return CUDA_SUCCESS;
}

// Synchronisation: nothing runs, so nothing to wait for; counted.
std::atomic<unsigned long> g_syncs{0};
FAKE_API unsigned long fake_syncs() { return g_syncs.load(); }
FAKE_API CUresult cuStreamSynchronize(CUstream) {
  g_syncs.fetch_add(1);
  return lost();
}
FAKE_API CUresult cuCtxSynchronize() {
  g_syncs.fetch_add(1);
  return lost();
}

FAKE_API void* fake_address_of(const char* name) {
  static const std::map<std::string, void*> table = {
      {"cuInit", reinterpret_cast<void*>(&cuInit)},
      {"cuDriverGetVersion", reinterpret_cast<void*>(&cuDriverGetVersion)},
      {"cuDeviceGetCount", reinterpret_cast<void*>(&cuDeviceGetCount)},
      {"cuDeviceGet", reinterpret_cast<void*>(&cuDeviceGet)},
      {"cuDeviceGetUuid", reinterpret_cast<void*>(&cuDeviceGetUuid)},
      {"cuDeviceGetUuid_v2", reinterpret_cast<void*>(&cuDeviceGetUuid_v2)},
      {"cuCtxGetDevice", reinterpret_cast<void*>(&cuCtxGetDevice)},
      {"cuCtxGetCurrent", reinterpret_cast<void*>(&cuCtxGetCurrent)},
      {"cuCtxSetCurrent", reinterpret_cast<void*>(&cuCtxSetCurrent)},
      {"cuDevicePrimaryCtxRetain", reinterpret_cast<void*>(&cuDevicePrimaryCtxRetain)},
      {"cuGetExportTable", reinterpret_cast<void*>(&cuGetExportTable)},
      {"cuLaunchKernel", reinterpret_cast<void*>(&cuLaunchKernel)},
      {"cuLaunchKernel_ptsz", reinterpret_cast<void*>(&cuLaunchKernel_ptsz)},
      {"cuLaunchKernelEx", reinterpret_cast<void*>(&cuLaunchKernelEx)},
      {"cuLaunchKernelEx_ptsz", reinterpret_cast<void*>(&cuLaunchKernelEx_ptsz)},
      {"cuLaunchCooperativeKernel", reinterpret_cast<void*>(&cuLaunchCooperativeKernel)},
      {"cuGraphInstantiate", reinterpret_cast<void*>(&cuGraphInstantiate)},
      {"cuGraphInstantiateWithFlags", reinterpret_cast<void*>(&cuGraphInstantiateWithFlags)},
      {"cuGraphLaunch", reinterpret_cast<void*>(&cuGraphLaunch)},
      {"cuGraphLaunch_ptsz", reinterpret_cast<void*>(&cuGraphLaunch_ptsz)},
      {"cuGraphUpload", reinterpret_cast<void*>(&cuGraphUpload)},
      {"cuGraphUpload_ptsz", reinterpret_cast<void*>(&cuGraphUpload_ptsz)},
      {"cuGraphExecDestroy", reinterpret_cast<void*>(&cuGraphExecDestroy)},
      {"cuStreamDestroy", reinterpret_cast<void*>(&cuStreamDestroy_v2)},
      {"cuStreamDestroy_v2", reinterpret_cast<void*>(&cuStreamDestroy_v2)},
      {"cuModuleGetFunction", reinterpret_cast<void*>(&cuModuleGetFunction)},
      {"cuLibraryGetKernel", reinterpret_cast<void*>(&cuLibraryGetKernel)},
      {"cuKernelGetFunction", reinterpret_cast<void*>(&cuKernelGetFunction)},
      {"cuMemAlloc_v2", reinterpret_cast<void*>(&cuMemAlloc_v2)},
      {"cuMemHostRegister_v2", reinterpret_cast<void*>(&cuMemHostRegister_v2)},
      {"cuMemHostGetDevicePointer_v2", reinterpret_cast<void*>(&cuMemHostGetDevicePointer_v2)},
      {"cuStreamWriteValue64_v2", reinterpret_cast<void*>(&cuStreamWriteValue64_v2)},
      {"cuStreamSynchronize", reinterpret_cast<void*>(&cuStreamSynchronize)},
      {"cuCtxSynchronize", reinterpret_cast<void*>(&cuCtxSynchronize)},
      {"cuGetProcAddress", reinterpret_cast<void*>(&cuGetProcAddress)},
      {"cuGetProcAddress_v2", reinterpret_cast<void*>(&cuGetProcAddress_v2)},
  };
  const auto it = table.find(name != nullptr ? name : "");
  return it != table.end() ? it->second : nullptr;
}

// Live events: recording one that was destroyed is CUDA_ERROR_INVALID_HANDLE
// (as the driver may say; here always), so that a record made after its
// event's destruction (a deferred record not drained by cuEventDestroy) is seen.
std::mutex g_events_mu;
std::set<const void*> g_live_events;
FAKE_API CUresult cuEventCreate(CUevent* e, unsigned flags) {
  if (e == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto* ev = new FakeEvent{0, flags};
  {
    const std::lock_guard<std::mutex> lock(g_events_mu);
    g_live_events.insert(ev);
  }
  *e = reinterpret_cast<CUevent>(ev);
  return CUDA_SUCCESS;
}
FAKE_API CUresult cuEventDestroy_v2(CUevent e) {
  {
    const std::lock_guard<std::mutex> lock(g_events_mu);
    if (g_live_events.erase(e) == 0) return CUDA_ERROR_INVALID_HANDLE;
  }
  delete reinterpret_cast<FakeEvent*>(e);
  return CUDA_SUCCESS;
}
// Event records made while a capture ran (an event recorded into a stream
// being captured becomes a node of its graph).
std::atomic<unsigned long> g_captured_event_records{0};
FAKE_API unsigned long fake_captured_event_records() { return g_captured_event_records.load(); }
FAKE_API CUresult cuEventRecord(CUevent e, CUstream) {
  if (e == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (g_capturing.load()) g_captured_event_records.fetch_add(1);
  const std::lock_guard<std::mutex> lock(g_events_mu);
  if (g_live_events.count(e) == 0) {
    note_op("X");  // a record of a destroyed event
    return CUDA_ERROR_INVALID_HANDLE;
  }
  reinterpret_cast<FakeEvent*>(e)->target = g_launched.load();
  return CUDA_SUCCESS;
}
// A memset: noted as S<value>@<cuLaunchKernel calls made before it>.
FAKE_API CUresult cuMemsetD8Async(CUdeviceptr dst, unsigned char v, size_t n, CUstream s) {
  record("cuMemsetD8Async", dst, v, n, s);
  note_op("S" + std::to_string(v) + "@" + std::to_string(g_plain_launches.load()));
  return CUDA_SUCCESS;
}
FAKE_API CUresult cuEventQuery(CUevent e) {
  if (e == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (reinterpret_cast<FakeEvent*>(e)->target <= g_done.load()) return CUDA_SUCCESS;
  if (!g_events_hang.load() && g_event_polls.fetch_add(1) + 1 >= g_event_delay.load()) {
    g_event_polls.store(0);
    g_done.store(g_launched.load());
  }
  return CUDA_ERROR_NOT_READY;
}
FAKE_API CUresult cuEventSynchronize(CUevent e) {
  if (e == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (g_events_hang.load()) return CUDA_ERROR_LAUNCH_TIMEOUT;  // instead of blocking forever
  g_done.store(g_launched.load());
  return CUDA_SUCCESS;
}
FAKE_API CUresult cuEventElapsedTime_v2(float* ms, CUevent start, CUevent end) {
  if (ms == nullptr || start == nullptr || end == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if ((reinterpret_cast<FakeEvent*>(start)->flags & CU_EVENT_DISABLE_TIMING) != 0) return CUDA_ERROR_INVALID_HANDLE;
  // Every timed launch "takes" FAKE_EVENT_US microseconds (default 1 ms).
  const char* us = std::getenv("FAKE_EVENT_US");
  *ms = us != nullptr ? static_cast<float>(std::strtod(us, nullptr) / 1e3) : 1.0f;
  return CUDA_SUCCESS;
}
// Priorities: least 0, greatest -5 (as on the H100).
FAKE_API CUresult cuCtxGetStreamPriorityRange(int* least, int* greatest) {
  if (least != nullptr) *least = 0;
  if (greatest != nullptr) *greatest = -5;
  return CUDA_SUCCESS;
}
FAKE_API CUresult cuStreamSetAttribute(CUstream s, CUstreamAttrID id, const CUstreamAttrValue* v) {
  record("cuStreamSetAttribute", s, id, v);
  if (v == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (id != CU_STREAM_ATTRIBUTE_PRIORITY) return CUDA_ERROR_NOT_SUPPORTED;
  if (v->priority > 0 || v->priority < -5) return CUDA_ERROR_INVALID_VALUE;
  const std::lock_guard<std::mutex> lock(g_prio_mu);
  g_priorities[reinterpret_cast<std::uintptr_t>(s)] = v->priority;
  return CUDA_SUCCESS;
}
// The priority this thread's last cuLaunchKernel went with: 1 and *out, or
// 0 when its stream's priority was never set.
FAKE_API int fake_last_priority(int* out) {
  if (t_last_priority == kNoPriority) return 0;
  if (out != nullptr) *out = t_last_priority;
  return 1;
}
// A capture: every stream reads as capturing until it ends (as fake_capturing).
FAKE_API CUresult cuStreamBeginCapture_v2(CUstream s, CUstreamCaptureMode mode) {
  record("cuStreamBeginCapture_v2", s, mode);
  g_capturing.store(true);
  return CUDA_SUCCESS;
}
FAKE_API CUresult cuStreamEndCapture(CUstream s, CUgraph* g) {
  record("cuStreamEndCapture", s, g);
  g_capturing.store(false);
  if (g_capture_invalidated.exchange(false)) {
    if (g != nullptr) *g = nullptr;
    return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
  }
  if (g != nullptr) *g = reinterpret_cast<CUgraph>(0x6000);
  return CUDA_SUCCESS;
}
// FAKE_ISCAPTURING_DELAY_US=N: each answer to a thread other than the one
// that initialised the driver (lithos's own threads) takes N us: a caller
// that looks, then acts, leaves that long for the application to begin a
// capture in between.
FAKE_API CUresult cuStreamIsCapturing(CUstream, CUstreamCaptureStatus* status) {
  if (status == nullptr) return CUDA_ERROR_INVALID_VALUE;
  static const long delay_us = [] {
    const char* v = std::getenv("FAKE_ISCAPTURING_DELAY_US");
    return v != nullptr ? std::atol(v) : 0L;
  }();
  if (delay_us > 0 && g_init_seen.load() && std::this_thread::get_id() != g_init_thread)
    std::this_thread::sleep_for(std::chrono::microseconds(delay_us));
  *status = g_capturing.load() ? CU_STREAM_CAPTURE_STATUS_ACTIVE : CU_STREAM_CAPTURE_STATUS_NONE;
  return CUDA_SUCCESS;
}
FAKE_API CUresult cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode* mode) {
  if (mode == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::swap(*mode, t_capture_mode);
  return CUDA_SUCCESS;
}

// Compile-time cluster shapes: functions 0xc4 and 0xc8 were built with
// __cluster_dims__(4,1,1) and (8,1,1); every other function has none.
FAKE_API CUresult cuFuncGetAttribute(int* v, CUfunction_attribute attr, CUfunction f) {
  if (v == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const auto h = reinterpret_cast<std::uintptr_t>(f);
  *v = 0;
  if (attr == CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH && (h == 0xc4 || h == 0xc8)) *v = static_cast<int>(h - 0xc0);
  if ((attr == CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT || attr == CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH) &&
      (h == 0xc4 || h == 0xc8)) {
    *v = 1;
  }
  // Function 0x14: a heavy kernel (128 registers per thread, 4 KiB of static
  // shared memory); every other one reads 0 (unknown).
  if (h == 0x14 && attr == CU_FUNC_ATTRIBUTE_NUM_REGS) *v = 128;
  if (h == 0x14 && attr == CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES) *v = 4096;
  return CUDA_SUCCESS;
}

// Graph contents for the safe-mask tests: graph 0x6c00 holds one cooperative
// kernel node of 16 blocks (node 0x6c01); graph 0x6c10 one node with a
// 4-CTA cluster attribute (node 0x6c11); graph 0x6c20 a child graph node
// (0x6c21) whose graph is 0x6c00. Other graphs have no nodes.
//
// Graphs replayed node by node (graph_replay.hpp): graph 0x60000 and its
// clones (0x60100, 0x60200, ...; base g) list five nodes in the order g+4,
// g+2, g+5, g+1, g+3 with edges 1->2, 1->3, 2->4, 3->4, 4->5: node 1 a
// kernel of 16 blocks, 2 a memset of 64 words, 3 empty, 4 a kernel of 32
// blocks, 5 a child graph node whose graph g+0x80 holds one kernel of 8
// blocks (node g+0x81). Graph 0x64000 (and clones) holds one memory
// allocation node. Other graphs cannot be cloned.
namespace {
bool replay_family(std::uintptr_t h) { return h >= 0x60000 && h < 0x70000; }
std::atomic<std::uintptr_t> g_next_clone{0x60000};
}  // namespace
FAKE_API CUresult cuGraphClone(CUgraph* out, CUgraph g) {
  record("cuGraphClone", out, g);
  const auto h = reinterpret_cast<std::uintptr_t>(g);
  if (out == nullptr || !replay_family(h) || (h & 0xff) != 0) return CUDA_ERROR_NOT_SUPPORTED;
  const std::uintptr_t c = g_next_clone.fetch_add(0x100) + 0x100;
  *out = reinterpret_cast<CUgraph>(h >= 0x64000 ? c + 0x4000 : c);
  return CUDA_SUCCESS;
}
FAKE_API CUresult cuGraphDestroy(CUgraph g) {
  record("cuGraphDestroy", g);
  return CUDA_SUCCESS;
}
FAKE_API CUresult cuGraphGetEdges_v2(CUgraph g, CUgraphNode* from, CUgraphNode* to, CUgraphEdgeData* data, size_t* n) {
  if (n == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const auto h = reinterpret_cast<std::uintptr_t>(g);
  const std::uintptr_t edges[5][2] = {{1, 2}, {1, 3}, {2, 4}, {3, 4}, {4, 5}};
  const size_t count = replay_family(h) && h < 0x64000 && (h & 0xff) == 0 ? 5 : 0;
  if (from == nullptr) {
    *n = count;
    return CUDA_SUCCESS;
  }
  for (size_t i = 0; i < count && i < *n; ++i) {
    from[i] = reinterpret_cast<CUgraphNode>(h + edges[i][0]);
    to[i] = reinterpret_cast<CUgraphNode>(h + edges[i][1]);
    if (data != nullptr) data[i] = {};
  }
  *n = count;
  return CUDA_SUCCESS;
}
FAKE_API CUresult cuGraphMemsetNodeGetParams(CUgraphNode, CUDA_MEMSET_NODE_PARAMS* p) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *p = {};
  p->dst = 0x1000;
  p->elementSize = 4;
  p->width = 64;
  p->height = 1;
  p->value = 7;
  return CUDA_SUCCESS;
}
FAKE_API CUresult cuMemsetD2D32Async(CUdeviceptr dst, size_t pitch, unsigned int v, size_t w, size_t h, CUstream s) {
  record("cuMemsetD2D32Async", dst, pitch, v, w, h, s);
  note_op("M");
  return CUDA_SUCCESS;
}
FAKE_API CUresult cuStreamWaitEvent(CUstream s, CUevent e, unsigned int flags) {
  record("cuStreamWaitEvent", s, e, flags);
  note_op("W");
  return CUDA_SUCCESS;
}
FAKE_API CUresult cuGraphExecMemsetNodeSetParams(CUgraphExec e, CUgraphNode n, const CUDA_MEMSET_NODE_PARAMS* p,
                                                 CUcontext ctx) {
  record("cuGraphExecMemsetNodeSetParams", e, n, p, ctx);
  return CUDA_SUCCESS;
}
FAKE_API CUresult cuGraphGetNodes(CUgraph g, CUgraphNode* nodes, size_t* n) {
  if (n == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const auto h = reinterpret_cast<std::uintptr_t>(g);
  if (replay_family(h)) {
    std::vector<std::uintptr_t> listed;
    if (h >= 0x64000)
      listed = {1};
    else if ((h & 0xff) == 0x80)
      listed = {1};
    else
      listed = {4, 2, 5, 1, 3};
    if (nodes != nullptr) {
      for (size_t i = 0; i < listed.size() && i < *n; ++i) nodes[i] = reinterpret_cast<CUgraphNode>(h + listed[i]);
    }
    *n = listed.size();
    return CUDA_SUCCESS;
  }
  const bool known = h == 0x6c00 || h == 0x6c10 || h == 0x6c20;
  if (nodes == nullptr) {
    *n = known ? 1 : 0;
    return CUDA_SUCCESS;
  }
  if (known && *n >= 1) nodes[0] = reinterpret_cast<CUgraphNode>(h + 1);
  *n = known ? 1 : 0;
  return CUDA_SUCCESS;
}
FAKE_API CUresult cuGraphNodeGetType(CUgraphNode node, CUgraphNodeType* type) {
  if (type == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (const auto h = reinterpret_cast<std::uintptr_t>(node); replay_family(h)) {
    switch (h >= 0x64000 ? 0 : h & 0xff) {
      case 0: *type = CU_GRAPH_NODE_TYPE_MEM_ALLOC; break;
      case 2: *type = CU_GRAPH_NODE_TYPE_MEMSET; break;
      case 3: *type = CU_GRAPH_NODE_TYPE_EMPTY; break;
      case 5: *type = CU_GRAPH_NODE_TYPE_GRAPH; break;
      default: *type = CU_GRAPH_NODE_TYPE_KERNEL; break;
    }
    return CUDA_SUCCESS;
  }
  *type = reinterpret_cast<std::uintptr_t>(node) == 0x6c21 ? CU_GRAPH_NODE_TYPE_GRAPH : CU_GRAPH_NODE_TYPE_KERNEL;
  return CUDA_SUCCESS;
}
FAKE_API CUresult cuGraphChildGraphNodeGetGraph(CUgraphNode node, CUgraph* g) {
  if (const auto h = reinterpret_cast<std::uintptr_t>(node); g != nullptr && replay_family(h) && (h & 0xff) == 5) {
    *g = reinterpret_cast<CUgraph>(h - 5 + 0x80);
    return CUDA_SUCCESS;
  }
  if (g == nullptr || reinterpret_cast<std::uintptr_t>(node) != 0x6c21) return CUDA_ERROR_INVALID_VALUE;
  *g = reinterpret_cast<CUgraph>(0x6c00);
  return CUDA_SUCCESS;
}
FAKE_API CUresult cuGraphKernelNodeGetParams_v2(CUgraphNode node, CUDA_KERNEL_NODE_PARAMS* p) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  static std::uint64_t value = 42;
  static void* params[1] = {&value};
  *p = {};
  p->func = reinterpret_cast<CUfunction>(0x10);
  p->kernelParams = params;
  p->gridDimX = 16;
  if (const auto h = reinterpret_cast<std::uintptr_t>(node); replay_family(h))
    p->gridDimX = (h & 0xff) == 4 ? 32 : (h & 0xff) == 0x81 ? 8 : 16;
  p->gridDimY = p->gridDimZ = 1;
  p->blockDimX = 32;
  p->blockDimY = p->blockDimZ = 1;
  return CUDA_SUCCESS;
}
FAKE_API CUresult cuGraphKernelNodeGetAttribute(CUgraphNode node, CUkernelNodeAttrID id, CUkernelNodeAttrValue* v) {
  if (v == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *v = {};
  const auto h = reinterpret_cast<std::uintptr_t>(node);
  if (id == CU_LAUNCH_ATTRIBUTE_COOPERATIVE && h == 0x6c01) v->cooperative = 1;
  if (id == CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION && h == 0x6c11) {
    v->clusterDim.x = 4;
    v->clusterDim.y = v->clusterDim.z = 1;
  }
  return CUDA_SUCCESS;
}

// Blocks per SM: FAKE_OCCUPANCY, else "not supported" (no wave-aligned atoms).
FAKE_API CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(int* n, CUfunction, int, size_t) {
  const char* v = std::getenv("FAKE_OCCUPANCY");
  if (n == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (v == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  *n = std::atoi(v);
  return CUDA_SUCCESS;
}

FAKE_API CUresult cuDeviceGetAttribute(int* v, CUdevice_attribute attr, CUdevice dev) {
  record("cuDeviceGetAttribute", v, attr, dev);
  if (v == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *v = attr == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR ? 9 : 0;  // an H100: 9.0
  if (attr == CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT) *v = 4;       // a very small one
  // CU_DEVICE_ATTRIBUTE_MPS_ENABLED: FAKE_CUDA_MPS=1 makes this process an MPS client.
  if (static_cast<int>(attr) == 133) *v = std::getenv("FAKE_CUDA_MPS") != nullptr ? 1 : 0;
  return CUDA_SUCCESS;
}
FAKE_API CUresult cuModuleLoadData(CUmodule* m, const void* image) {
  record("cuModuleLoadData", m, image);
  if (g_refuse_loads.load() > 0) {
    g_refuse_loads.fetch_sub(1);
    return CUDA_ERROR_INVALID_IMAGE;
  }
  if (m != nullptr) *m = reinterpret_cast<CUmodule>(g_next_module.fetch_add(0x10));
  return result();
}
FAKE_API CUresult cuModuleUnload(CUmodule m) {
  record("cuModuleUnload", m);
  return result();
}

namespace {
// The grid widths of graph g's kernel nodes, child graphs included.
std::vector<std::uint32_t> kernel_grids(CUgraph g) {
  std::vector<std::uint32_t> out;
  size_t n = 0;
  if (g == nullptr || cuGraphGetNodes(g, nullptr, &n) != CUDA_SUCCESS || n == 0) return out;
  std::vector<CUgraphNode> nodes(n);
  if (cuGraphGetNodes(g, nodes.data(), &n) != CUDA_SUCCESS) return out;
  for (CUgraphNode node : nodes) {
    CUgraphNodeType type{};
    if (cuGraphNodeGetType(node, &type) != CUDA_SUCCESS) continue;
    if (type == CU_GRAPH_NODE_TYPE_GRAPH) {
      CUgraph child = nullptr;
      if (cuGraphChildGraphNodeGetGraph(node, &child) == CUDA_SUCCESS) {
        const auto more = kernel_grids(child);
        out.insert(out.end(), more.begin(), more.end());
      }
    } else if (type == CU_GRAPH_NODE_TYPE_KERNEL) {
      CUDA_KERNEL_NODE_PARAMS p{};
      if (cuGraphKernelNodeGetParams_v2(node, &p) == CUDA_SUCCESS) out.push_back(p.gridDimX);
    }
  }
  return out;
}
}  // namespace
