// The predictor's cache file: lithosd keeps what its online latency
// predictor learnt (sched::LatencyPredictor::save) in
// <state_dir>/predictor.cache, loads it when it starts and writes it while
// it runs and when it stops, so that a restarted daemon predicts from its
// first launch. The first line names the format and the GPU:
//   # lithos.predictor-cache/1 tpcs=66 device=NVIDIA H100 80GB HBM3
// A cache of another GPU (name or TPC count) is not loaded.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "common/status.hpp"
#include "sched/types.hpp"

namespace lithos::daemon {

inline constexpr std::string_view kPredictorCacheSchema = "lithos.predictor-cache/1";

std::string predictor_cache_path(const std::string& state_dir);

// The entries of the cache at `path` (the text after its first line):
// kNotFound when there is no file; invalid_argument when its first line is
// not this format or names another device (the message says which), or the
// file or its folder may not be trusted (a link, another user's).
Result<std::string> read_predictor_cache(const std::string& path, const sched::DeviceShape& device);

// A cache larger than this is not read (a few MiB hold every kernel of a
// busy node).
inline constexpr std::size_t kMaxPredictorCacheBytes = 256U << 20;

// Writes `entries` under the header for `device`, creating the directory
// (0755) when missing; atomic (a temporary file of an unpredictable name
// renamed over the old one), never through a link, and only into a folder
// that belongs to root or the daemon's user and no one else can write
// (ipc/safe_file.hpp).
Status write_predictor_cache(const std::string& path, const sched::DeviceShape& device, std::string_view entries);

}  // namespace lithos::daemon
