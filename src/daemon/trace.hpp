// lithosd's trace: every call the daemon made into its Engine, with what the
// Engine decided (sched::EngineEvent), one JSON object per line. Written when
// `trace` is configured (docs/daemon.md, "Trace"). Replaying a trace through
// the Engine make_engine() builds from the same configuration reproduces the
// daemon's decisions exactly (sched::replay); the launches' shapes and the
// atoms' measured start and end times are what the simulator needs to be
// recalibrated from real runs.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.hpp"
#include "sched/engine.hpp"
#include "sched/engine_log.hpp"
#include "sched/policies/catalog.hpp"

namespace lithos::daemon {

inline constexpr const char* kTraceSchema = "lithos.engine-trace/1";

// One line (no newline) for `e`.
std::string trace_line(const sched::EngineEvent& e);
// Parses one line. Errors say which field is missing or wrong.
Result<sched::EngineEvent> parse_trace_line(std::string_view line);
// Blank lines are skipped; errors name `source` and the line number.

struct TraceHeader {
  std::string policy;
  double atom_us = 0;
  double throttle_us = 0;
  double throttle_unborrowed_us = 0;
  std::uint32_t max_stolen_atoms = 2;  // absent in traces written before it existed (always 2 then)
  // Absent in traces written before it existed (nothing paused automatically then).
  double pause_slowdown = sched::LithosConfig{}.pause_slowdown;
  // Absent in traces written before it existed (20 us then).
  double idle_grace_us = to_us(sched::EngineConfig{}.idle_grace);
  double burst_gap_us = 0;             // absent in traces written before it existed (no burst grace then)
  bool best_effort_runs_free = false;  // absent in traces written before it existed (never free then)
  bool share_unowned = true;           // absent in traces written before it existed (the default then)
  bool hp_holds_unowned = true;        // absent in traces written before it existed (always held then)
  std::string predictions;             // the predictor cache the daemon started from ("" = cold)
  std::string socket;
  std::string default_tenant;
  sched::DeviceShape device;  // H100 SXM limits, with the trace's name, TPCs and GPCs
};
struct Trace {
  TraceHeader header;
  std::vector<sched::EngineEvent> events;
};
// A whole trace as TraceWriter writes it.
Result<Trace> parse_trace_file(std::string_view text, std::string_view source);

// Appends events to a file, buffered; write errors are reported once and
// stop the trace (the daemon goes on).
class TraceWriter {
 public:
  TraceWriter() = default;
  ~TraceWriter();
  TraceWriter(const TraceWriter&) = delete;
  TraceWriter& operator=(const TraceWriter&) = delete;

  // Creates (truncates) `path` and writes the header: the configuration
  // (config_json), the device the Engine was built for and the predictor
  // cache it started from (sched::LatencyPredictor::save text, "" = none).
  Status open(const std::string& path, const std::string& config_json, const sched::DeviceShape& device,
              const std::string& predictions = {});
  bool is_open() const { return f_ != nullptr; }
  void write(const std::vector<sched::EngineEvent>& events);
  void flush();
  void close();
  std::uint64_t lines() const { return lines_; }

 private:
  std::FILE* f_ = nullptr;
  std::string path_;
  std::uint64_t lines_ = 0;
};

}  // namespace lithos::daemon
