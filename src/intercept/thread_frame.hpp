// The state that the hooks, the runtime and the daemon client share about
// what is happening now: what this thread is doing inside a hooked call (its
// frame, read by the launch-descriptor callback), and how many stream
// captures are in progress in the process. It sits below all three, so the
// runtime (runtime.hpp) and the client (client.hpp) need not know each other
// to read it.
#pragma once

#include <atomic>
#include <cstdint>

#include "gpu/qmd.hpp"
#include "sched/launch_fit.hpp"
#include "sched/tpc_set.hpp"

namespace lithos::intercept {

// What this thread is doing inside a hooked call. Thread-local because the
// launch-descriptor callback, which the driver calls synchronously on the
// launching thread with no argument of lithos's, must find the mask chosen
// for the launch it is building; everything else is handed down as
// arguments (the grant of a best-effort launch included: launch_info.hpp).
enum class CallKind : std::uint8_t { kNone, kLaunch, kGraph };
struct GpuView;  // runtime.hpp
struct ThreadFrame {
  CallKind kind = CallKind::kNone;
  bool has_mask = false;          // a mask is wanted for descriptors built now
  bool internal = false;          // lithos's own driver calls: hooks forward untouched
  std::uint32_t descriptors = 0;  // descriptors built during the current call
  gpu::SlotMask mask{};
  sched::TpcSet tpcs;             // the set `mask` enables
  sched::LaunchNeeds needs;       // what the launch (or graph) needs of a set not to hang
  const GpuView* view = nullptr;  // the slot map `mask` was made with (has_mask)
  // kLaunch of a high-priority tenant: the TPCs lithosd's right-size table
  // narrowed it to (0: its whole allocation), for its report.
  std::uint32_t narrowed = 0;
  // kGraph of a high-priority tenant: entries of t_node_sizes in use (0: no
  // per-node sizes), and the set they narrow (its lasting set, or every
  // live TPC when that is the whole GPU) on `node_view`'s GPU.
  std::uint32_t node_sizes = 0;
  sched::TpcSet node_base;
  const GpuView* node_view = nullptr;
};

// The kernel nodes of the graph whose descriptors this thread is building
// (ThreadFrame::node_sizes of them): a descriptor is matched to them by its
// grid width (gpu::qmd_grid_width) in the descriptor callback, which may not
// call the driver nor allocate, so they are gathered before the real call.
struct NodeSize {
  std::uint32_t grid_x = 0;
  std::uint32_t tpcs = 0;  // 0: no right size: the node's descriptor keeps the lasting set
};
inline constexpr std::uint32_t kMaxNodeSizes = 64;
extern constinit thread_local NodeSize t_node_sizes[kMaxNodeSizes] __attribute__((tls_model("initial-exec")));

// This thread's frame. initial-exec TLS: liblithos.so is loaded at start-up
// (LD_PRELOAD), so its TLS is static and costs one %fs-relative load;
// constinit: no initialisation wrapper on any access.
extern constinit thread_local ThreadFrame t_frame __attribute__((tls_model("initial-exec")));
inline ThreadFrame& thread_frame() noexcept { return t_frame; }

// A byte per thread whose address names the thread (Stream::key).
extern constinit thread_local char t_stream_thread_tag __attribute__((tls_model("initial-exec")));

// Stream captures in progress in the process, counted by the capture hooks
// (cuStreamBeginCapture*, cuStreamEndCapture*). While there are none, no
// stream is being captured: no launch is captured (deferred launches need
// that), and no launch needs cuStreamIsCapturing.
std::atomic<int>& stream_captures() noexcept;

// Raises this thread's "internal" flag for the lifetime of the object:
// lithos's own driver calls made meanwhile pass through the hooks untouched.
class InternalScope {
 public:
  InternalScope() noexcept : saved_(t_frame.internal) { t_frame.internal = true; }
  ~InternalScope() { t_frame.internal = saved_; }
  InternalScope(const InternalScope&) = delete;
  InternalScope& operator=(const InternalScope&) = delete;

 private:
  bool saved_;
};

}  // namespace lithos::intercept
