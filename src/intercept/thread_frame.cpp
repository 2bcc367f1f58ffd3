#include "intercept/thread_frame.hpp"

namespace lithos::intercept {

constinit thread_local ThreadFrame t_frame __attribute__((tls_model("initial-exec")));
constinit thread_local NodeSize t_node_sizes[kMaxNodeSizes] __attribute__((tls_model("initial-exec")));
constinit thread_local char t_stream_thread_tag __attribute__((tls_model("initial-exec")));

std::atomic<int>& stream_captures() noexcept {
  static constinit std::atomic<int> n{0};
  return n;
}

}  // namespace lithos::intercept
