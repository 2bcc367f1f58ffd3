#pragma once
// lithosd's statistics in the Prometheus text exposition format (version
// 0.0.4): what `lithos status --prometheus` prints, for node_exporter's
// textfile collector or any scraper that runs a command. The input is the
// daemon's status answer (schema lithos.status/1, Daemon::status_json), so
// the metrics are exactly the numbers `lithos status` shows; nothing is
// computed twice. Metric names, types and labels: docs/daemon.md, "Metrics".
#include <string>
#include <string_view>

#include "common/status.hpp"

namespace lithos::daemon {

// The exposition text of one status answer; an error if `status_json` is
// not a lithos.status/1 object.
Result<std::string> prometheus_text(std::string_view status_json);

// What a collector should read when no daemon answers: lithos_up 0.
std::string prometheus_down();

}  // namespace lithos::daemon
