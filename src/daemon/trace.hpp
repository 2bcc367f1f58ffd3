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
#include "daemon/config.hpp"
#include "sched/engine.hpp"
#include "sched/engine_log.hpp"
#include "sched/policies/catalog.hpp"
#include "sched/power.hpp"

namespace lithos::daemon {

inline constexpr const char* kTraceSchema = "lithos.engine-trace/1";

// One line (no newline) for `e`.
std::string trace_line(const sched::EngineEvent& e);
// Parses one line. Errors say which field is missing or wrong.
Result<sched::EngineEvent> parse_trace_line(std::string_view line);
// Blank lines are skipped; errors name `source` and the line number.

struct TraceHeader {
  // The settings the daemon ran with: those of the settings table marked
  // traced (settings.hpp), the others as in DaemonConfig{}; no tenants.
  DaemonConfig config;
  std::string predictions;    // the predictor cache the daemon started from ("" = cold)
  sched::DeviceShape device;  // H100 SXM limits, with the trace's name, TPCs and GPCs
};
struct Trace {
  TraceHeader header;
  std::vector<sched::EngineEvent> events;
};
// The first bytes of a power governor's decision (power_trace_line).
inline constexpr std::string_view kPowerRecordPrefix = "{\"e\":\"power\"";
// One line for a decision of the power governor at `now_ns`, with the SM
// clock and power NVML reported then.
std::string power_trace_line(std::uint64_t now_ns, const sched::PowerDecision& d, const std::string& mode,
                             int sm_clock_mhz, double power_w);
// A whole trace as TraceWriter writes it (power records skipped).
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
  // A record outside the Engine's events (a line starting {"e":"power", a
  // decision of the power governor): kept in the file, skipped by
  // parse_trace_file.
  void write_record(const std::string& line);
  void flush();
  void close();
  std::uint64_t lines() const { return lines_; }

 private:
  std::FILE* f_ = nullptr;
  std::string path_;
  std::uint64_t lines_ = 0;
};

}  // namespace lithos::daemon
