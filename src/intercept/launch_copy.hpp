// A kernel launch's arguments copied so that the launch can be made later,
// on another thread (the deferred-launch queue, deferred.hpp): the parameter
// values behind `kernelParams` (or the `extra` buffer) and a cuLaunchKernelEx
// configuration with its attributes. Include intercept/cuda_abi.hpp first.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace lithos::intercept {

// The parameter buffer of a launch's `extra` list
// (CU_LAUNCH_PARAM_BUFFER_POINTER / _SIZE pairs ended by _END). False when
// the list holds a key this code does not know, or lacks either entry.
bool extra_param_buffer(void** extra, const void** buffer, const std::size_t** size);
// Writes the `extra` list naming `buffer` of `*size` bytes into list[0..4].
void make_extra_list(void* list[5], void* buffer, std::size_t* size);

class LaunchCopy {
 public:
  // Copies the parameters of a launch of `function`. `count_limit`: the
  // parameters the caller passes (a rewritten kernel has one more, its atom
  // bounds, which the launch path adds). False when they cannot be copied:
  // their layout is unknown (the driver cannot say), or `extra` holds keys
  // this code does not know.
  bool copy_params(const void* function, std::uint32_t count_limit, void** kernel_params, void** extra);
  // A cuLaunchKernelEx configuration (attributes included).
  void copy_config(const CUlaunchConfig& config);

  void** params() noexcept { return has_params_ ? ptrs_.data() : nullptr; }
  void** extra() noexcept { return has_extra_ ? extra_list_ : nullptr; }
  const CUlaunchConfig* config() const noexcept { return &config_; }

  // Forgets every cached parameter layout (a module was unloaded: its
  // handles may be reused).
  static void forget_layouts() noexcept;

 private:
  std::vector<std::uint8_t> buf_;
  std::vector<void*> ptrs_;
  std::size_t buf_size_ = 0;
  void* extra_list_[5] = {};
  bool has_params_ = false;
  bool has_extra_ = false;
  CUlaunchConfig config_{};
  std::vector<CUlaunchAttribute> attrs_;
};

}  // namespace lithos::intercept
