// Turns the per-mode run records of one output folder into the merged
// results (schema lithos.bench/1), the markdown report and the summary
// table `lithos bench` prints last. Runs of several invocations merge: the
// report is always rebuilt from every OUT/runs/*.json of the scenario.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/scenario.hpp"
#include "common/status.hpp"

namespace lithos::bench {

// Reads OUT/runs/*.json. Files of another scenario (name or file hash) are
// skipped with a warning, as are unreadable ones.
std::vector<nlohmann::json> load_runs(const std::string& out_dir, const BenchScenario& sc,
                                      std::vector<std::string>& warnings);

// Writes OUT/runs/<run>.json atomically (temporary file, then rename).
Status save_run(const std::string& out_dir, const nlohmann::json& run);

// The merged results of `runs` for `sc` (docs/bench-protocol.md 2.2).
// Malformed runs are reported in `warnings` and left out.
nlohmann::json build_results(const BenchScenario& sc, const std::vector<nlohmann::json>& runs,
                             std::vector<std::string>& warnings);

// report.md: what ran where, the tables per phase, and the definitions.
std::string markdown_report(const nlohmann::json& results);

// The compact table printed at the end of a run (plain text).
std::string summary_table(const nlohmann::json& results);

}  // namespace lithos::bench
