// Sharing one observed busy interval among the launches a completion marker
// covers.
//
// A stream's completion slot holds the highest sequence number the GPU has
// reached on it, and one value covers every earlier launch. High-priority
// launches in a burst are marked together (docs/daemon.md, "Completions come
// from the GPU"), so one poll can see k launches finish at once. The daemon
// knows only that the stream was busy from `busy_from` until `now`; each
// launch's own run time is not observable. Crediting the first launch with
// all of it and the others with nothing teaches the predictor that most of a
// service's kernels take no time, and the per-TPC timers then lend the TPCs
// under them as if they were free. Instead the interval is shared in the
// proportion of the launches' predicted run times (a launch with no
// prediction weighs as the mean of those that have one, or all weigh alike),
// so the launches' sum is what the GPU took and the predictor keeps the
// ratios it learned from launches measured alone.
#pragma once

#include <cstdint>
#include <span>

namespace lithos::daemon {

struct CoveredLaunch {
  std::uint64_t since_ns = 0;  // it cannot have started before this (its launch or grant)
  double predicted_ns = 0;     // its predicted run time; <= 0: none
  std::uint64_t start_ns = 0;  // out
  std::uint64_t end_ns = 0;    // out
};

// Fills start_ns / end_ns of `covered` (in stream order): consecutive pieces
// of [busy_from, now], each starting no earlier than its launch's since_ns
// (the stream was idle before it), the last ending at `now`. Pieces never
// overlap and never run backwards; an empty span is left as it is.
void share_busy_interval(std::uint64_t busy_from, std::uint64_t now, std::span<CoveredLaunch> covered);

}  // namespace lithos::daemon
