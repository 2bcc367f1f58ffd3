// Scenarios: what the simulator runs. A scenario names kernel classes (how a
// kind of kernel behaves on the modelled GPU), tenants (who launches which
// sequence of kernels, how often, with which priority and quota), and the
// settings of the GPU model and the scheduler. Scenarios are TOML files
// (format: docs/scenarios.md); the built-in ones are the files in
// scenarios/, compiled into the binary.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.hpp"
#include "common/time.hpp"
#include "sched/engine.hpp"
#include "sched/policies/catalog.hpp"
#include "sched/types.hpp"

namespace lithos::sim {

// A kind of kernel. Its duration when it runs alone on the whole GPU varies
// two ways, both log-normal around duration_us: `spread` across the places a
// class occurs in a tenant's request (layer 3's convolution is not layer
// 40's, but it is the same at every step: drawn once per place), and `cv`
// from launch to launch (jitter). On t TPCs the model runs its blocks in
// waves (see gpu_model.hpp), which gives l(t) ~ m/t + b.
struct KernelClass {
  std::string name;
  // The function this class is an instance of: launches of classes with the
  // same function share a KernelId (and so a predictor entry per ordinal),
  // as launches of one CUfunction with different shapes do. Defaults to name.
  std::string function;
  double duration_us = 0.0;  // mean, alone on the whole GPU, launch latency excluded
  double cv = 0.0;           // launch-to-launch coefficient of variation
  double spread = 0.0;       // coefficient of variation across places in a request
  sched::Dim3 grid;          // blocks
  sched::Dim3 block{256, 1, 1};
  std::uint32_t regs = 32;  // registers per thread
  std::uint32_t smem = 0;   // shared memory per block, bytes
  double serial_us = 2.0;   // b: time that does not shrink with more TPCs
  bool cooperative = false;
  sched::Dim3 cluster;  // {1,1,1}: not a cluster launch
  // The share of the device's memory bandwidth the kernel uses alone on the
  // whole GPU (0: none modelled). Kernels running at once that ask for more
  // than the device has all slow down (GpuModel, "memory").
  double mem_share = 0.0;
};

// One kernel of a recorded trace, replayed as recorded. Trace lines add
// kernel classes to the scenario: one per distinct (kernel name, grid,
// block, regs, smem, cluster, cooperative, serial_us), named after the
// kernel (with "#2", "#3", ... for further shapes), function = kernel name.
struct TraceKernel {
  std::uint32_t kernel_class = 0;  // index into Scenario::kernels
  double duration_us = 0.0;
};

enum class Arrival : std::uint8_t {
  kPoisson,  // open loop: requests arrive at random, served by one worker in order
  kClosed,   // closed loop: the next request starts think_us after the last one finished
};

struct TenantConfig {
  std::string name;
  sched::PriorityClass priority = sched::PriorityClass::kBestEffort;
  int quota = 0;
  std::optional<int> static_tpcs;
  std::optional<double> slo_ms;  // explicit SLO; else Scenario::slo_factor x alone P99
  // High only: sched::TenantSpec::pauses_best_effort (true, false or "auto";
  // a scenario file's high-priority tenants default to "auto").
  sched::BestEffortPause pauses_best_effort = sched::BestEffortPause::kNever;
  // sched::TenantSpec::rightsize and rightsize_slip (unset: the policy's).
  std::optional<bool> rightsize;
  std::optional<double> rightsize_slip;
  Arrival arrival = Arrival::kClosed;
  std::optional<double> rate_rps;  // kPoisson: fixed rate ...
  std::optional<double> load;      // ... or this fraction of the tenant's capacity alone
  double think_us = 0.0;           // kClosed: host time between requests
  // The kernel sequence of one request, as indices into Scenario::kernels
  // (from `request = "..."`), or empty when `trace_requests` is used.
  std::vector<std::uint32_t> request;
  // From `trace = "file.jsonl"`: recorded requests, replayed round robin.
  std::vector<std::vector<TraceKernel>> trace_requests;
  double trace_cv = 0.0;     // jitter applied to recorded durations
  std::string unit = "req";  // what one request is called in reports ("req", "it")
  // How many times as long the tenant's kernels run as an MPS client as in
  // a plain process, with nothing beside it (measured on the GPU with
  // `lithos bench --modes mps-alone`: a decode graph of short PyTorch
  // kernels pays 1.14x, long kernels ~1.0x). Applied in runs whose tenants
  // share the GPU through MPS (RunOptions::mps_clients: every policy but
  // time slicing), never in the alone and capacity runs, which model a
  // plain process.
  double mps_slowdown = 1.0;
};

// Settings of the modelled GPU (see gpu_model.hpp for their meaning).
struct GpuModelConfig {
  int tpcs = 66;
  double launch_latency_us = 4.0;  // launch to first block on an idle stream
  double stream_gap_us = 1.0;      // between consecutive kernels of one stream
  double per_atom_cost_us = 15.0;  // extra fixed time of each atom of a split launch
  // Whether the GPU serves ready kernels by the hardware priority the policy
  // gave them (stream priorities). false: every kernel at the same priority,
  // in the order it became ready, as under lithosd with stream_priorities
  // off (its default), which sets no stream priority on the GPU.
  bool priorities = true;
};

struct Scenario {
  std::string name;
  std::string description;
  std::string source;        // file path, or "built-in:<name>"
  double duration_s = 20.0;  // simulated time
  double warmup_s = 2.0;     // excluded from every metric
  double slo_factor = 1.5;   // SLO = this x alone P99 where no slo_ms is given
  GpuModelConfig gpu;
  sched::EngineConfig engine;  // device.tpcs follows gpu.tpcs
  sched::PolicySettings policies;
  // How launches reach the Engine. false: every launch is submitted and
  // waits for its dispatch. true: as lithosd drives it, a high-priority
  // tenant's launches (and a best-effort tenant's while it runs free) go out
  // at once on the policy's immediate_set and are accounted with
  // Engine::submit_running; the others wait for their dispatch.
  bool immediate_launches = false;
  std::vector<KernelClass> kernels;
  std::vector<TenantConfig> tenants;
};

// Parses scenario TOML. `source` names the text in error messages, which read
// "<source>:<line>:<column>: <where>: <what>", e.g.
//   "my.toml:12:1: tenant 'svc': field 'rate_rps' must be a positive number".
// `base_dir` resolves relative trace paths.
Result<Scenario> parse_scenario(std::string_view toml_text, std::string_view source, std::string_view base_dir);

// A built-in scenario name or a path to a TOML file. Unknown names give an
// error listing the built-in names.
Result<Scenario> load_scenario(std::string_view name_or_path);

std::vector<std::string> builtin_scenario_names();
// TOML text of a built-in scenario (empty if none has that name).
std::string_view builtin_scenario_text(std::string_view name);

// Parses "embed, 24 * (qkv, attn, proj), pool" into kernel class indices.
// Names are looked up in `kernels`. Grammar:
//   seq  := item (',' item)*
//   item := [INT '*'] (NAME | '(' seq ')')
Result<std::vector<std::uint32_t>> parse_request(std::string_view text, const std::vector<KernelClass>& kernels);

}  // namespace lithos::sim
