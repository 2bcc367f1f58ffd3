// Runs one mode of a benchmark scenario on the GPU: starts the tenants (and
// a private MPS daemon where the mode needs one), holds them at a common
// start instant, samples NVML over every measurement window, collects their
// results and stops everything again. The protocol with the tenant
// processes is docs/bench-protocol.md.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "bench/modes.hpp"
#include "bench/nvml.hpp"
#include "bench/scenario.hpp"

namespace lithos::bench {

struct RunnerOptions {
  std::string repo_root;  // tenants run here: scripts/bench/tenant.py
  std::string python = "python3";
  std::string lithos_exe;  // this program, for `lithos run --tpc-set` (lithos modes)
  std::string mps_control = "nvidia-cuda-mps-control";
  std::string out_dir;  // logs go to out_dir/logs/<run id>/
  int device = 0;
  int total_tpcs = 66;
  double ready_timeout_s = 300.0;  // building models, capturing graphs, calibrating
  double result_grace_s = 60.0;    // after the drain, for the results to arrive
  std::string commit;
  double daemon_atom_us = 0;                         // mode lithos: lithosd's atom target (0: its default)
  std::vector<std::string> daemon_set;               // daemon modes: "key = value" lines for lithosd's [daemon]
  std::string command;                               // the invocation, recorded with each run
  const std::atomic<bool>* interrupted = nullptr;    // set by SIGINT/SIGTERM
  std::function<void(const std::string&)> progress;  // one line at a time
};

// The id a run is stored under: the mode name, or "alone-<tenant>".
std::string run_id(const ModeInfo& mode, const std::optional<std::string>& alone_tenant);

// Runs `mode` (mode "alone": only `alone_tenant`, which must be set) and
// returns its record, schema lithos.bench.run/1 (docs/bench-protocol.md 2.1).
// Never throws; a failure gives status "failed" and an "error" text.
// `calib` maps tenant names to what their alone runs measured; `nvml` may
// be null (no energy or utilisation then).
nlohmann::json run_mode(const BenchScenario& sc, const ModeInfo& mode, const std::optional<std::string>& alone_tenant,
                        const std::map<std::string, nlohmann::json>& calib, const RunnerOptions& opt, Nvml* nvml);

// The configuration line a tenant receives (docs/bench-protocol.md 1.1).
nlohmann::json tenant_config(const BenchScenario& sc, const BenchTenant& t, const nlohmann::json& calib, bool calibrate,
                             int device);

}  // namespace lithos::bench
