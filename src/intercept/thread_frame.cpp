#include "intercept/thread_frame.hpp"

namespace lithos::intercept {

constinit thread_local ThreadFrame t_frame __attribute__((tls_model("initial-exec")));

std::atomic<int>& stream_captures() noexcept {
  static constinit std::atomic<int> n{0};
  return n;
}

}  // namespace lithos::intercept
