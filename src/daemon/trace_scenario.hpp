// A lithosd trace as a `lithos sim` scenario (docs/scenarios.md, "Traces"):
// the simulator recalibrated from a real run. Each tenant of the trace
// becomes a tenant of the scenario that replays the requests it made, with
// the durations the GPU's completion markers measured:
//  - a request is what one stream launched between two synchronisations
//    (cuStreamSynchronize / cuCtxSynchronize: a training step, a served
//    request); the last, unfinished one of each stream is left out;
//  - a launch's duration is the sum of its atoms' measured durations, each
//    scaled to the whole GPU by its wave count (sched::waves) on the TPCs it
//    had (at least 0.5 us: shorter than the daemon's polling can tell); a
//    CUDA graph (known only as a whole) keeps its duration and is modelled
//    as one wave over every SM;
//  - high-priority tenants arrive at random (Poisson) at the rate they
//    synchronised in the trace; best-effort tenants run closed loop;
//  - the scheduler settings (atom target, throttle) and the GPU's TPCs are
//    the trace header's.
// Kernels are named by their identity hash (k<hex>; graphs g<hex>).
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "common/status.hpp"
#include "daemon/trace.hpp"

namespace lithos::daemon {

struct TraceScenario {
  std::string toml;                                         // scenario.toml
  std::vector<std::pair<std::string, std::string>> traces;  // (file name, JSON lines) per tenant
  std::size_t tenants = 0, requests = 0, launches = 0;
  std::size_t dropped_launches = 0;  // no finished atom, or in an unfinished request
};

// Errors: a trace without any complete request.
Result<TraceScenario> trace_to_scenario(const Trace& trace, const std::string& name, const std::string& source);

}  // namespace lithos::daemon
