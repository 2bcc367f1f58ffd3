// An empty folder to name as CUDA_MPS_PIPE_DIRECTORY: the driver finds no
// MPS control daemon there, so a process given it makes plain CUDA contexts
// even where an MPS control daemon runs (at /tmp/nvidia-mps or the caller's
// CUDA_MPS_PIPE_DIRECTORY). Used by the calibration child (%smid names real
// SMs only outside MPS) and by lithos bench's modes without MPS.
#pragma once

#include <stdlib.h>
#include <unistd.h>

#include <string>
#include <utility>

namespace lithos {

class NoMpsDir {
 public:
  // Makes /tmp/lithos-no-mps-XXXXXX; path() is empty when that failed.
  NoMpsDir() {
    std::string tmpl = "/tmp/lithos-no-mps-XXXXXX";
    if (::mkdtemp(tmpl.data()) != nullptr) path_ = std::move(tmpl);
  }
  // Removes the folder (if it is still empty).
  ~NoMpsDir() {
    if (!path_.empty()) ::rmdir(path_.c_str());
  }
  NoMpsDir(const NoMpsDir&) = delete;
  NoMpsDir& operator=(const NoMpsDir&) = delete;

  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace lithos
