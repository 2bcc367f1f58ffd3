#include "sim/scenario.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "sched/policies/settings_table.hpp"

namespace lithos::sim {

namespace test_embed {  // the fixtures of tests/sim/data/embed, embedded like scenarios/
std::size_t embedded_scenario_count();
std::string_view embedded_scenario_name(std::size_t i);
std::string_view embedded_scenario_text(std::size_t i);
}  // namespace test_embed

namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

const std::string kData = LITHOS_SIM_TEST_DATA;

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

Result<Scenario> parse(std::string_view text) { return parse_scenario(text, "t.toml", kData); }

std::string error_of(std::string_view text) {
  auto r = parse(text);
  if (r.is_ok()) return "<parsed without error>";
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  return r.status().message();
}

KernelClass named(std::string name) {
  KernelClass k;
  k.name = std::move(name);
  return k;
}

// ------------------------------------------------------------ a full file

TEST(ScenarioTest, FullFileReadsEveryField) {
  auto r = load_scenario(kData + "/full.toml");
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  const Scenario& s = *r;
  EXPECT_EQ(s.name, "full");
  EXPECT_EQ(s.description, "every field set");
  EXPECT_EQ(s.source, kData + "/full.toml");
  EXPECT_DOUBLE_EQ(s.duration_s, 12.5);
  EXPECT_DOUBLE_EQ(s.warmup_s, 0.5);
  EXPECT_DOUBLE_EQ(s.slo_factor, 2.0);

  EXPECT_EQ(s.gpu.tpcs, 60);
  EXPECT_DOUBLE_EQ(s.gpu.launch_latency_us, 3.5);
  EXPECT_DOUBLE_EQ(s.gpu.stream_gap_us, 0.5);
  EXPECT_DOUBLE_EQ(s.gpu.per_atom_cost_us, 11.0);
  EXPECT_EQ(s.engine.device.tpcs, 60);
  EXPECT_EQ(s.engine.device.sms_per_tpc, 2);  // the rest of the H100 shape is kept

  EXPECT_EQ(s.engine.throttle, us(150));
  EXPECT_EQ(s.engine.atoms.target, us(300));
  EXPECT_EQ(s.engine.atoms.per_atom_cost, us(12.5));
  EXPECT_DOUBLE_EQ(s.engine.atoms.tolerated_overhead, 0.1);
  EXPECT_EQ(s.engine.atoms.max_atoms, 512u);
  EXPECT_EQ(s.policies.lithos.max_stolen_atoms, 3u);
  EXPECT_EQ(s.policies.lithos.steal_lookahead, us(80));
  EXPECT_EQ(s.engine.idle_grace, us(30.5));
  EXPECT_FALSE(s.policies.lithos.lend_surplus);
  EXPECT_FALSE(s.policies.lithos.share_unowned);
  EXPECT_FALSE(s.policies.lithos.hp_holds_unowned);
  EXPECT_TRUE(s.immediate_launches);
  EXPECT_EQ(s.policies.time_slicing.timeslice, ms(4));
  EXPECT_EQ(s.policies.time_slicing.context_switch, us(40));
  EXPECT_DOUBLE_EQ(s.engine.rightsize.slip, 1.25);

  ASSERT_EQ(s.kernels.size(), 3u);
  const KernelClass& g = s.kernels[0];
  EXPECT_EQ(g.name, "gemm");
  EXPECT_EQ(g.function, "sm90_gemm");
  EXPECT_DOUBLE_EQ(g.duration_us, 120.0);
  EXPECT_DOUBLE_EQ(g.cv, 0.05);
  EXPECT_DOUBLE_EQ(g.spread, 0.4);
  EXPECT_EQ(g.grid, (sched::Dim3{384, 1, 1}));
  EXPECT_EQ(g.block, (sched::Dim3{384, 1, 1}));
  EXPECT_EQ(g.regs, 168u);
  EXPECT_EQ(g.smem, 200000u);
  EXPECT_DOUBLE_EQ(g.serial_us, 3.5);
  EXPECT_FALSE(g.cooperative);
  EXPECT_EQ(g.cluster, (sched::Dim3{1, 1, 1}));

  const KernelClass& a = s.kernels[1];
  EXPECT_EQ(a.name, "attn.v2-x");
  EXPECT_EQ(a.function, "attn.v2-x");  // defaults to the name
  EXPECT_DOUBLE_EQ(a.duration_us, 3.0);
  EXPECT_DOUBLE_EQ(a.cv, 0.0);
  EXPECT_DOUBLE_EQ(a.spread, 0.0);
  EXPECT_EQ(a.grid, (sched::Dim3{8, 4, 2}));
  EXPECT_EQ(a.block, (sched::Dim3{32, 4, 1}));
  EXPECT_EQ(a.regs, 32u);
  EXPECT_EQ(a.smem, 0u);
  EXPECT_DOUBLE_EQ(a.serial_us, 1.5);  // min(2, duration / 2)
  EXPECT_EQ(a.cluster, (sched::Dim3{2, 2, 1}));

  const KernelClass& c = s.kernels[2];
  EXPECT_TRUE(c.cooperative);
  EXPECT_EQ(c.block, (sched::Dim3{1024, 1, 1}));
  EXPECT_DOUBLE_EQ(c.serial_us, 2.0);

  ASSERT_EQ(s.tenants.size(), 3u);
  const TenantConfig& svc = s.tenants[0];
  EXPECT_EQ(svc.name, "service");
  EXPECT_EQ(svc.priority, sched::PriorityClass::kHigh);
  EXPECT_EQ(svc.quota, 40);
  EXPECT_EQ(svc.static_tpcs, 30);
  EXPECT_EQ(svc.slo_ms, 12.0);
  EXPECT_EQ(svc.arrival, Arrival::kPoisson);
  EXPECT_EQ(svc.rate_rps, 80.0);
  EXPECT_FALSE(svc.load.has_value());
  EXPECT_EQ(svc.request, (std::vector<std::uint32_t>{0, 1, 0, 1, 0, 2}));
  EXPECT_TRUE(svc.trace_requests.empty());
  EXPECT_EQ(svc.unit, "query");

  const TenantConfig& batch = s.tenants[1];
  EXPECT_FALSE(batch.rate_rps.has_value());
  EXPECT_EQ(batch.load, 0.25);
  EXPECT_FALSE(batch.static_tpcs.has_value());
  EXPECT_FALSE(batch.slo_ms.has_value());
  EXPECT_EQ(batch.unit, "req");

  const TenantConfig& tr = s.tenants[2];
  EXPECT_EQ(tr.priority, sched::PriorityClass::kBestEffort);
  EXPECT_EQ(tr.quota, 0);
  EXPECT_EQ(tr.arrival, Arrival::kClosed);
  EXPECT_DOUBLE_EQ(tr.think_us, 15.5);
  EXPECT_EQ(tr.unit, "it");
  EXPECT_EQ(tr.request, (std::vector<std::uint32_t>{0, 1, 0, 1, 0, 1}));  // multi-line request
}

TEST(ScenarioTest, DefaultsApply) {
  auto r = load_scenario(kData + "/minimal.toml");
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  const Scenario& s = *r;
  const sched::EngineConfig def;
  EXPECT_EQ(s.description, "");
  EXPECT_DOUBLE_EQ(s.duration_s, 20.0);
  EXPECT_DOUBLE_EQ(s.warmup_s, 2.0);
  EXPECT_DOUBLE_EQ(s.slo_factor, 1.5);
  EXPECT_EQ(s.gpu.tpcs, 66);
  EXPECT_DOUBLE_EQ(s.gpu.launch_latency_us, 4.0);
  EXPECT_DOUBLE_EQ(s.gpu.stream_gap_us, 1.0);
  EXPECT_DOUBLE_EQ(s.gpu.per_atom_cost_us, 15.0);
  EXPECT_EQ(s.engine.device.tpcs, 66);
  EXPECT_EQ(s.engine.throttle, def.throttle);
  EXPECT_EQ(s.engine.atoms.target, def.atoms.target);
  EXPECT_EQ(s.engine.atoms.per_atom_cost, us(15));  // follows gpu.per_atom_cost_us
  EXPECT_DOUBLE_EQ(s.engine.atoms.tolerated_overhead, def.atoms.tolerated_overhead);
  EXPECT_EQ(s.engine.atoms.max_atoms, def.atoms.max_atoms);
  EXPECT_EQ(s.policies.lithos.max_stolen_atoms, sched::LithosConfig{}.max_stolen_atoms);
  EXPECT_EQ(s.policies.lithos.steal_lookahead, sched::LithosConfig{}.steal_lookahead);
  EXPECT_EQ(s.engine.idle_grace, def.idle_grace);
  EXPECT_EQ(s.policies.lithos.lend_surplus, sched::LithosConfig{}.lend_surplus);
  EXPECT_EQ(s.policies.lithos.share_unowned, sched::LithosConfig{}.share_unowned);
  EXPECT_EQ(s.policies.lithos.hp_holds_unowned, sched::LithosConfig{}.hp_holds_unowned);
  EXPECT_FALSE(s.immediate_launches);
  EXPECT_EQ(s.policies.time_slicing.timeslice, sched::TimeSlicingConfig{}.timeslice);
  EXPECT_EQ(s.policies.time_slicing.context_switch, sched::TimeSlicingConfig{}.context_switch);
  EXPECT_DOUBLE_EQ(s.engine.rightsize.slip, def.rightsize.slip);
  ASSERT_EQ(s.kernels.size(), 1u);
  EXPECT_EQ(s.kernels[0].block, (sched::Dim3{256, 1, 1}));
  EXPECT_EQ(s.kernels[0].regs, 32u);
  EXPECT_DOUBLE_EQ(s.kernels[0].serial_us, 2.0);
  ASSERT_EQ(s.tenants.size(), 1u);
  EXPECT_EQ(s.tenants[0].quota, 0);
  EXPECT_DOUBLE_EQ(s.tenants[0].think_us, 0.0);
  EXPECT_EQ(s.tenants[0].unit, "req");
}

// Right-sizing: the [scheduler] switch and probe settings, and a tenant's
// own rightsize and rightsize_slip (checked: a slip below 1 is refused).
TEST(ScenarioTest, RightSizingSettings) {
  const std::string head = R"([scenario]
name = "x"
[scheduler]
rightsize = true
rightsize_probe_every = 8
rightsize_probe_budget = 0.02
[[kernel]]
name = "k"
duration_us = 10
blocks = 1
[[tenant]]
name = "t"
class = "high"
quota = 8
arrival = "closed"
request = "k"
rightsize = false
)";
  auto r = parse(head + "rightsize_slip = 1.3\n");
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_TRUE(r->policies.lithos.rightsize);
  EXPECT_EQ(r->engine.rightsize.probe_every, 8u);
  EXPECT_DOUBLE_EQ(r->engine.rightsize.probe_budget, 0.02);
  ASSERT_EQ(r->tenants.size(), 1u);
  EXPECT_EQ(r->tenants[0].rightsize, std::optional<bool>(false));
  EXPECT_EQ(r->tenants[0].rightsize_slip, std::optional<double>(1.3));
  auto bad = parse(head + "rightsize_slip = 0.9\n");
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("rightsize_slip"), std::string::npos) << bad.status().message();
}

TEST(ScenarioTest, GpuPerAtomCostIsOverriddenBySchedulerSetting) {
  auto r = parse(R"([scenario]
name = "x"
[gpu]
tpcs = 8
per_atom_cost_us = 9
[scheduler]
per_atom_cost_us = 30
[[kernel]]
name = "k"
duration_us = 10
blocks = 1
[[tenant]]
name = "t"
class = "high"
quota = 8
arrival = "closed"
request = "k"
)");
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_DOUBLE_EQ(r->gpu.per_atom_cost_us, 9.0);
  EXPECT_EQ(r->engine.atoms.per_atom_cost, us(30));
  EXPECT_EQ(r->engine.device.tpcs, 8);
}

// ------------------------------------------------------------ errors

struct ErrorCase {
  const char* what;
  const char* text;
  const char* message;  // the exact message
};

// Line numbers in the messages count from the first line of `text`.
const ErrorCase kErrorCases[] = {
    {"unknown field", R"toml([scenario]
name = "x"
[[kernel]]
name = "gemm"
    durations_us = 10
blocks = 1
[[tenant]]
name = "t"
class = "high"
arrival = "closed"
request = "gemm"
)toml",
     "t.toml:5:5: kernel 'gemm': unknown field 'durations_us'"},

    {"wrong type", R"toml([scenario]
name = "x"
[[kernel]]
name = "gemm"
duration_us = "10"
blocks = 1
[[tenant]]
name = "t"
class = "high"
arrival = "closed"
request = "gemm"
)toml",
     "t.toml:5:1: kernel 'gemm': field 'duration_us' must be a number, not a string"},

    {"integer field given a float", R"toml([scenario]
name = "x"
[[kernel]]
name = "gemm"
duration_us = 10
blocks = 1
regs = 64.0
[[tenant]]
name = "t"
class = "high"
arrival = "closed"
request = "gemm"
)toml",
     "t.toml:7:1: kernel 'gemm': field 'regs' must be an integer, not a floating-point number"},

    {"missing required field", R"toml([scenario]
name = "x"
[[kernel]]
name = "k"
duration_us = 10
blocks = 1

[[tenant]]
name = "t"
class = "high"
request = "k"
)toml",
     "t.toml:8:1: tenant 't': missing required field 'arrival'"},

    {"missing kernel duration", R"toml([scenario]
name = "x"
[[kernel]]
name = "k"
blocks = 1
[[tenant]]
name = "t"
class = "high"
arrival = "closed"
request = "k"
)toml",
     "t.toml:3:1: kernel 'k': missing required field 'duration_us'"},

    {"missing scenario name", R"toml(
[scenario]
duration_s = 3
)toml",
     "t.toml:2:1: scenario: missing required field 'name'"},

    {"quota out of range", R"toml([scenario]
name = "x"
[gpu]
tpcs = 66
[[kernel]]
name = "k"
duration_us = 10
blocks = 1
[[tenant]]
name = "t"
class = "high"
quota = 70
arrival = "closed"
request = "k"
)toml",
     "t.toml:12:1: tenant 't': field 'quota' must be an integer in 0..66"},

    {"negative rate", R"toml([scenario]
name = "x"
[[kernel]]
name = "k"
duration_us = 10
blocks = 1
[[tenant]]
name = "svc"
class = "high"
arrival = "poisson"
rate_rps = -3
request = "k"
)toml",
     "t.toml:11:1: tenant 'svc': field 'rate_rps' must be a positive number"},

    {"load of 1", R"toml([scenario]
name = "x"
[[kernel]]
name = "k"
duration_us = 10
blocks = 1
[[tenant]]
name = "svc"
class = "high"
arrival = "poisson"
load = 1.0
request = "k"
)toml",
     "t.toml:11:1: tenant 'svc': field 'load' must be a number in (0, 1)"},

    {"both rate and load", R"toml([scenario]
name = "x"
[[kernel]]
name = "k"
duration_us = 10
blocks = 1
[[tenant]]
name = "svc"
class = "high"
arrival = "poisson"
rate_rps = 5
load = 0.5
request = "k"
)toml",
     "t.toml:12:1: tenant 'svc': field 'load' cannot be given together with 'rate_rps': give one of them"},

    {"neither rate nor load", R"toml([scenario]
name = "x"
[[kernel]]
name = "k"
duration_us = 10
blocks = 1
[[tenant]]
name = "svc"
class = "high"
arrival = "poisson"
request = "k"
)toml",
     "t.toml:7:1: tenant 'svc': missing required field 'rate_rps' (or 'load'): arrival = \"poisson\" needs one of "
     "them"},

    {"rate for a closed tenant", R"toml([scenario]
name = "x"
[[kernel]]
name = "k"
duration_us = 10
blocks = 1
[[tenant]]
name = "svc"
class = "high"
arrival = "closed"
rate_rps = 5
request = "k"
)toml",
     "t.toml:11:1: tenant 'svc': field 'rate_rps' is only for arrival = \"poisson\""},

    {"think time for a poisson tenant", R"toml([scenario]
name = "x"
[[kernel]]
name = "k"
duration_us = 10
blocks = 1
[[tenant]]
name = "svc"
class = "high"
arrival = "poisson"
rate_rps = 5
think_us = 5
request = "k"
)toml",
     "t.toml:12:1: tenant 'svc': field 'think_us' is only for arrival = \"closed\""},

    {"request names an unknown kernel", R"toml([scenario]
name = "x"
[[kernel]]
name = "k"
duration_us = 10
blocks = 1
[[tenant]]
name = "t"
class = "high"
arrival = "closed"
request = "k, 2 * (k, nope)"
)toml",
     "t.toml:11:1: tenant 't': field 'request' is invalid: at character 12: unknown kernel 'nope'"},

    {"duplicate tenant", R"toml([scenario]
name = "x"
[[kernel]]
name = "k"
duration_us = 10
blocks = 1
[[tenant]]
name = "t"
class = "high"
arrival = "closed"
request = "k"
[[tenant]]
name = "t"
class = "best-effort"
arrival = "closed"
request = "k"
)toml",
     "t.toml:13:1: tenant 't': field 'name' is already used by the tenant at line 7"},

    {"duplicate kernel", R"toml([scenario]
name = "x"
[[kernel]]
name = "k"
duration_us = 10
blocks = 1
[[kernel]]
name = "k"
duration_us = 10
blocks = 1
)toml",
     "t.toml:8:1: kernel 'k': field 'name' is already used by the kernel at line 3"},

    {"cluster not dividing the grid", R"toml([scenario]
name = "x"
[[kernel]]
name = "k"
duration_us = 10
grid = [66, 4]
cluster = [2, 3]
)toml",
     "t.toml:7:1: kernel 'k': field 'cluster': cluster y = 3 does not divide grid y = 4"},

    {"cluster too large", R"toml([scenario]
name = "x"
[[kernel]]
name = "k"
duration_us = 10
grid = [64, 4]
cluster = [8, 4]
)toml",
     "t.toml:7:1: kernel 'k': field 'cluster' [8, 4, 1] has 32 blocks; at most 16"},

    {"threads over 1024", R"toml([scenario]
name = "x"
[[kernel]]
name = "k"
duration_us = 10
blocks = 1
threads = 2048
)toml",
     "t.toml:7:1: kernel 'k': field 'threads' must be an integer in 1..1024"},

    {"block over 1024 threads", R"toml([scenario]
name = "x"
[[kernel]]
name = "k"
duration_us = 10
blocks = 1
block = [32, 64]
)toml",
     "t.toml:7:1: kernel 'k': field 'block' gives 2048 threads per block; at most 1024"},

    {"grid element out of range", R"toml([scenario]
name = "x"
[[kernel]]
name = "k"
duration_us = 10
grid = [1, 70000]
)toml",
     "t.toml:6:12: kernel 'k': field 'grid' element y must be an integer in 1..65535"},

    {"blocks and grid", R"toml([scenario]
name = "x"
[[kernel]]
name = "k"
duration_us = 10
blocks = 4
grid = [4]
)toml",
     "t.toml:7:1: kernel 'k': field 'grid' cannot be given together with 'blocks'"},

    {"block does not fit on an SM", R"toml([scenario]
name = "x"
[[kernel]]
name = "k"
duration_us = 10
blocks = 4
threads = 1024
regs = 128
)toml",
     "t.toml:3:1: kernel 'k': one block (1024 threads x 128 registers, 0 bytes of shared memory) does not fit "
     "on an SM"},

    {"serial time not below the duration", R"toml([scenario]
name = "x"
[[kernel]]
name = "k"
duration_us = 10
blocks = 4
serial_us = 10
)toml",
     "t.toml:7:1: kernel 'k': field 'serial_us' must be less than duration_us (10)"},

    {"bad kernel name", R"toml([scenario]
name = "x"
[[kernel]]
name = "a b"
duration_us = 10
blocks = 4
)toml",
     "t.toml:4:1: kernel 'a b': field 'name' must consist of letters, digits, '_', '.' and '-', not 'a b'"},

    {"warmup not below duration", R"toml([scenario]
name = "x"
duration_s = 1
warmup_s = 1
)toml",
     "t.toml:4:1: scenario: field 'warmup_s' must be less than duration_s (1)"},

    {"default warmup not below duration", R"toml([scenario]
name = "x"
duration_s = 1.5
)toml",
     "t.toml:3:1: scenario: field 'duration_s' must be more than warmup_s (default 2); set warmup_s"},

    {"syntax error", R"toml([scenario]
name = "x"
duration_s = = 3
)toml",
     "t.toml:3:14: Error while parsing value: could not determine value type"},

    {"unknown top-level table", R"toml([scenario]
name = "x"
[tenants]
name = "t"
)toml",
     "t.toml:3:2: top level: unknown table or key 'tenants' (expected [scenario], [gpu], [scheduler], [[kernel]] "
     "and [[tenant]])"},

    {"kernel as a plain table", R"toml([scenario]
name = "x"
[kernel]
name = "k"
)toml",
     "t.toml:3:2: top level: 'kernel' must be an array of tables ([[kernel]]), not a table"},

    {"missing scenario table", R"toml(
[[tenant]]
name = "t"
)toml",
     "t.toml:1:1: top level: missing required table [scenario]"},

    {"no tenants", R"toml([scenario]
name = "x"
[[kernel]]
name = "k"
duration_us = 10
blocks = 1
)toml",
     "t.toml:1:1: top level: missing [[tenant]]: a scenario needs at least one tenant"},

    {"bad class", R"toml([scenario]
name = "x"
[[kernel]]
name = "k"
duration_us = 10
blocks = 1
[[tenant]]
name = "t"
class = "low"
arrival = "closed"
request = "k"
)toml",
     "t.toml:9:1: tenant 't': field 'class' must be \"high\" or \"best-effort\", not \"low\""},

    {"best-effort with a quota", R"toml([scenario]
name = "x"
[[kernel]]
name = "k"
duration_us = 10
blocks = 1
[[tenant]]
name = "t"
class = "best-effort"
quota = 3
arrival = "closed"
request = "k"
)toml",
     "t.toml:10:1: tenant 't': field 'quota' must be 0 for a best-effort tenant"},

    {"neither request nor trace", R"toml([scenario]
name = "x"
[[kernel]]
name = "k"
duration_us = 10
blocks = 1
[[tenant]]
name = "t"
class = "high"
arrival = "closed"
)toml",
     "t.toml:7:1: tenant 't': missing required field 'request' (or 'trace')"},

    {"both request and trace", R"toml([scenario]
name = "x"
[[kernel]]
name = "k"
duration_us = 10
blocks = 1
[[tenant]]
name = "t"
class = "high"
arrival = "closed"
request = "k"
trace = "traces/basic.jsonl"
)toml",
     "t.toml:12:1: tenant 't': field 'trace' cannot be given together with 'request': give one of them"},

    {"request without kernel classes", R"toml([scenario]
name = "x"
[[tenant]]
name = "t"
class = "high"
arrival = "closed"
request = "k"
)toml",
     "t.toml:7:1: tenant 't': field 'request' names kernels, but the scenario has no [[kernel]] tables"},

    {"boolean given an integer", R"toml([scenario]
name = "x"
[scheduler]
lend_surplus = 1
)toml",
     "t.toml:4:1: scheduler: field 'lend_surplus' must be a boolean (true or false), not an integer"},

    {"tolerated overhead of 1", R"toml([scenario]
name = "x"
[scheduler]
tolerated_overhead = 1
)toml",
     "t.toml:4:1: scheduler: field 'tolerated_overhead' must be a number in (0, 1)"},

    {"gpu tpcs out of range", R"toml([scenario]
name = "x"
[gpu]
tpcs = 0
)toml",
     "t.toml:4:1: gpu: field 'tpcs' must be an integer in 1..128"},

    {"nan duration", R"toml([scenario]
name = "x"
[[kernel]]
name = "k"
duration_us = nan
blocks = 1
)toml",
     "t.toml:5:1: kernel 'k': field 'duration_us' must be a finite number"},

    {"huge time", R"toml([scenario]
name = "x"
[scheduler]
throttle_us = 1e300
)toml",
     "t.toml:4:1: scheduler: field 'throttle_us' must be at most 1000000000"},

    {"cooperative grid larger than the GPU", R"toml([scenario]
name = "x"
[gpu]
tpcs = 10
[[kernel]]
name = "k"
duration_us = 10
blocks = 21
threads = 1024
regs = 64
cooperative = true
)toml",
     "t.toml:5:1: kernel 'k': a cooperative launch of 21 blocks cannot be co-resident: at most 20 blocks of this "
     "shape fit on 10 TPCs"},

    {"trace_cv with a request", R"toml([scenario]
name = "x"
[[kernel]]
name = "k"
duration_us = 10
blocks = 1
[[tenant]]
name = "t"
class = "high"
arrival = "closed"
request = "k"
trace_cv = 0.1
)toml",
     "t.toml:12:1: tenant 't': field 'trace_cv' is only for tenants with a 'trace'"},

    {"mps_slowdown under 1", R"toml([scenario]
name = "x"
[[kernel]]
name = "k"
duration_us = 10
blocks = 1
[[tenant]]
name = "t"
class = "high"
arrival = "closed"
request = "k"
mps_slowdown = 0.9
)toml",
     "t.toml:12:1: tenant 't': field 'mps_slowdown' must be a number in [1, 10]"},

    {"unnamed tenant", R"toml([scenario]
name = "x"
[[kernel]]
name = "k"
duration_us = 10
blocks = 1
[[tenant]]
class = "high"
)toml",
     "t.toml:7:1: tenant #1: missing required field 'name'"},
};

TEST(ScenarioTest, ErrorsNameLineColumnAndField) {
  for (const ErrorCase& c : kErrorCases) {
    SCOPED_TRACE(c.what);
    EXPECT_EQ(error_of(c.text), c.message);
  }
}

TEST(ScenarioTest, GarbageNeverThrows) {
  const std::string inputs[] = {std::string("\xff\xfe\x00\x01", 4), "[[[",          "a = [1, 2",   "= 3",
                                "[scenario]\nname = 5\n",           "scenario = 3", "tenant = [1]"};
  for (const std::string& in : inputs) {
    auto r = parse(in);
    EXPECT_FALSE(r.is_ok());
    EXPECT_THAT(r.status().message(), StartsWith("t.toml:"));
  }
}

// ------------------------------------------------------------ request grammar

class RequestTest : public ::testing::Test {
 protected:
  std::vector<KernelClass> kernels{named("a"), named("b"), named("c"), named("qkv.v2-x")};
  std::vector<std::uint32_t> ok(std::string_view text) {
    auto r = parse_request(text, kernels);
    EXPECT_TRUE(r.is_ok()) << text << ": " << r.status().to_string();
    return r.is_ok() ? *r : std::vector<std::uint32_t>{};
  }
  std::string error(std::string_view text) {
    auto r = parse_request(text, kernels);
    return r.is_ok() ? "<parsed>" : r.status().message();
  }
};

TEST_F(RequestTest, Sequences) {
  using V = std::vector<std::uint32_t>;
  EXPECT_EQ(ok("a"), (V{0}));
  EXPECT_EQ(ok("a, b ,c"), (V{0, 1, 2}));
  EXPECT_EQ(ok("qkv.v2-x,a"), (V{3, 0}));
  EXPECT_EQ(ok(" 2*(a,b) , c "), (V{0, 1, 0, 1, 2}));
  EXPECT_EQ(ok("2 * (a, 3 * (b), c)"), (V{0, 1, 1, 1, 2, 0, 1, 1, 1, 2}));
  EXPECT_EQ(ok("3*a"), (V{0, 0, 0}));
  EXPECT_EQ(ok("\n\ta,\r\n  2 *\n(b)\n"), (V{0, 1, 1}));
  EXPECT_EQ(ok("((a))"), (V{0}));
  EXPECT_EQ(ok("a, 2 * (b, 2 * (c, a))"), (V{0, 1, 2, 0, 2, 0, 1, 2, 0, 2, 0}));
  EXPECT_EQ(ok("100000 * a").size(), 100000u);
  EXPECT_EQ(ok("10 * (100000 * a)").size(), 1000000u);  // exactly the cap
}

TEST_F(RequestTest, ErrorsNamePositions) {
  EXPECT_EQ(error(""), "at character 1: expected a kernel name or '(', found the end of the request");
  EXPECT_EQ(error("   "), "at character 4: expected a kernel name or '(', found the end of the request");
  EXPECT_EQ(error("a, x"), "at character 4: unknown kernel 'x'");
  EXPECT_EQ(error("a, 2 * (b, zz)"), "at character 12: unknown kernel 'zz'");
  EXPECT_EQ(error("a,,b"), "at character 3: expected a kernel name or '(', found ','");
  EXPECT_EQ(error("a,"), "at character 3: expected a kernel name or '(', found the end of the request");
  EXPECT_EQ(error("()"), "at character 2: expected a kernel name or '(', found ')'");
  EXPECT_EQ(error("2 * (a, b"), "at character 10: missing ')' for the '(' at character 5");
  EXPECT_EQ(error("(a b)"), "at character 4: expected ',' or ')', found 'b'");
  EXPECT_EQ(error("a)"), "at character 2: unmatched ')'");
  EXPECT_EQ(error("a b"), "at character 3: expected ',' or the end of the request, found 'b'");
  EXPECT_EQ(error("0 * a"), "at character 1: repeat count 0 is outside 1..100000");
  EXPECT_EQ(error("b, 100001 * a"), "at character 4: repeat count 100001 is outside 1..100000");
  EXPECT_EQ(error("99999999999999999999999 * a"),
            "at character 1: repeat count 99999999999999999999999 is outside 1..100000");
  EXPECT_EQ(error("1.5 * a"), "at character 1: repeat count '1.5' is not a whole number");
  EXPECT_EQ(error("a * 2"), "at character 1: repeat count 'a' is not a whole number");
  EXPECT_EQ(error("2 * "), "at character 5: expected a kernel name or '(', found the end of the request");
  EXPECT_EQ(error("a; b"), "at character 2: expected ',' or the end of the request, found ';'");
}

TEST_F(RequestTest, ExpansionIsCapped) {
  EXPECT_EQ(error("100000 * (100000 * a)"), "at character 11: the request expands to more than 1000000 kernels");
  EXPECT_EQ(error("10 * (100000 * a), b"), "at character 20: the request expands to more than 1000000 kernels");
  EXPECT_EQ(error("2 * (100000 * (10 * a))"), "at character 16: the request expands to more than 1000000 kernels");
}

TEST_F(RequestTest, NestingIsBounded) {
  const std::string deep = std::string(64, '(') + "a" + std::string(64, ')');
  EXPECT_EQ(ok(deep).size(), 1u);
  const std::string deeper = std::string(65, '(') + "a" + std::string(65, ')');
  EXPECT_EQ(error(deeper), "at character 65: parentheses nested more than 64 deep");
  const std::string very_deep(100000, '(');  // must not overflow the stack
  EXPECT_THAT(error(very_deep), HasSubstr("nested more than 64 deep"));
}

// ------------------------------------------------------------ traces

TEST(TraceTest, ClassesAndRequests) {
  auto r = load_scenario(kData + "/traced.toml");
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  const Scenario& s = *r;
  // [[kernel]] gemm, then one class per distinct shape in trace order.
  std::vector<std::string> names;
  for (const KernelClass& k : s.kernels) names.push_back(k.name);
  EXPECT_EQ(names, (std::vector<std::string>{"gemm", "gemm#2", "ln", "gemm#3", "ln#2", "c"}));

  const KernelClass& g2 = s.kernels[1];
  EXPECT_EQ(g2.function, "gemm");
  EXPECT_EQ(g2.grid, (sched::Dim3{264, 1, 1}));
  EXPECT_EQ(g2.block, (sched::Dim3{256, 1, 1}));
  EXPECT_DOUBLE_EQ(g2.duration_us, 20.0);  // mean of 10 and 30
  EXPECT_DOUBLE_EQ(g2.serial_us, 2.0);
  EXPECT_DOUBLE_EQ(g2.cv, 0.0);
  const KernelClass& ln = s.kernels[2];
  EXPECT_EQ(ln.function, "ln");
  EXPECT_EQ(ln.grid, (sched::Dim3{8, 2, 1}));
  EXPECT_EQ(ln.block, (sched::Dim3{128, 1, 1}));
  EXPECT_DOUBLE_EQ(ln.serial_us, 2.0);  // min(2, mean 4 / 2)
  const KernelClass& g3 = s.kernels[3];
  EXPECT_EQ(g3.grid, (sched::Dim3{128, 1, 1}));
  EXPECT_EQ(g3.regs, 64u);
  EXPECT_EQ(g3.smem, 1024u);
  const KernelClass& ln2 = s.kernels[4];  // same shape as ln but an explicit serial time
  EXPECT_EQ(ln2.grid, ln.grid);
  EXPECT_EQ(ln2.block, ln.block);
  EXPECT_DOUBLE_EQ(ln2.serial_us, 0.5);
  const KernelClass& c = s.kernels[5];
  EXPECT_TRUE(c.cooperative);
  EXPECT_EQ(c.cluster, (sched::Dim3{2, 1, 1}));

  const TenantConfig& t = s.tenants[0];
  EXPECT_TRUE(t.request.empty());
  EXPECT_DOUBLE_EQ(t.trace_cv, 0.1);
  EXPECT_EQ(t.unit, "it");
  ASSERT_EQ(t.trace_requests.size(), 2u);
  ASSERT_EQ(t.trace_requests[0].size(), 3u);
  ASSERT_EQ(t.trace_requests[1].size(), 3u);
  EXPECT_EQ(t.trace_requests[0][0].kernel_class, 1u);
  EXPECT_DOUBLE_EQ(t.trace_requests[0][0].duration_us, 10.0);
  EXPECT_EQ(t.trace_requests[0][1].kernel_class, 2u);
  EXPECT_EQ(t.trace_requests[0][2].kernel_class, 1u);
  EXPECT_DOUBLE_EQ(t.trace_requests[0][2].duration_us, 30.0);
  EXPECT_EQ(t.trace_requests[1][0].kernel_class, 3u);
  EXPECT_EQ(t.trace_requests[1][1].kernel_class, 4u);
  EXPECT_EQ(t.trace_requests[1][2].kernel_class, 5u);
  EXPECT_DOUBLE_EQ(t.trace_requests[1][2].duration_us, 9.0);

  // A second tenant replaying the same trace shares its classes.
  const TenantConfig& again = s.tenants[1];
  ASSERT_EQ(again.trace_requests.size(), 2u);
  for (std::size_t i = 0; i < 2; ++i) {
    for (std::size_t j = 0; j < 3; ++j) {
      EXPECT_EQ(again.trace_requests[i][j].kernel_class, t.trace_requests[i][j].kernel_class);
    }
  }
  EXPECT_DOUBLE_EQ(again.trace_cv, 0.0);
  EXPECT_EQ(s.tenants[2].request, (std::vector<std::uint32_t>{0}));
}

std::string traced_scenario(const std::string& trace) {
  return "[scenario]\nname = \"x\"\n[[tenant]]\nname = \"t\"\nclass = \"high\"\narrival = \"closed\"\ntrace = \"" +
         trace + "\"\n";
}

// Writes `lines` to a temporary trace file and returns the error of a
// scenario that replays it (with "<path>" for the file's path).
std::string trace_error(const std::string& name, const std::string& lines) {
  const std::string path = ::testing::TempDir() + "/lithos_scenario_test_" + name + ".jsonl";
  {
    std::ofstream out(path, std::ios::binary);
    out << lines;
  }
  auto r = parse(traced_scenario(path));
  std::filesystem::remove(path);
  if (r.is_ok()) return "<parsed>";
  std::string m = r.status().message();
  const std::string normal = std::filesystem::path(path).lexically_normal().string();
  if (m.compare(0, normal.size(), normal) == 0) m = "<path>" + m.substr(normal.size());
  return m;
}

TEST(TraceTest, ErrorsNameTraceLines) {
  const std::string base = kData + "/traces/";
  EXPECT_EQ(error_of(traced_scenario("traces/reappear.jsonl")),
            base +
                "reappear.jsonl:3: request 0 appears again after other requests started (first request lines "
                "must be consecutive)");
  EXPECT_THAT(error_of(traced_scenario("traces/bad_json.jsonl")),
              StartsWith(base + "bad_json.jsonl:4: invalid JSON: "));
  EXPECT_EQ(error_of(traced_scenario("traces/empty.jsonl")),
            "t.toml:7:1: tenant 't': field 'trace' names a file with no kernel launches: '" + base + "empty.jsonl'");
  EXPECT_EQ(error_of(traced_scenario("traces/missing.jsonl")),
            "t.toml:7:1: tenant 't': field 'trace' names a file that cannot be read: '" + base + "missing.jsonl'");
  EXPECT_EQ(error_of(traced_scenario("traces")),
            "t.toml:7:1: tenant 't': field 'trace' names a file that cannot be read: '" + kData + "/traces'");

  const std::string ok_line = R"({"request": 0, "kernel": "a", "duration_us": 1, "blocks": 1})";
  EXPECT_EQ(trace_error("unknown", ok_line + "\n" + R"({"request": 0, "kernel": "a", "duration": 1, "blocks": 1})"),
            "<path>:2: unknown field 'duration'");
  EXPECT_EQ(trace_error("missing", R"({"request": 0, "kernel": "a", "blocks": 1})"),
            "<path>:1: missing required field 'duration_us'");
  EXPECT_EQ(trace_error("noblocks", R"({"request": 0, "kernel": "a", "duration_us": 1})"),
            "<path>:1: missing required field 'blocks' (or 'grid')");
  EXPECT_EQ(trace_error("type", R"({"request": 0, "kernel": "a", "duration_us": "1", "blocks": 1})"),
            "<path>:1: field 'duration_us' must be a number, not a string");
  EXPECT_EQ(trace_error("negative", R"({"request": 0, "kernel": "a", "duration_us": -1, "blocks": 1})"),
            "<path>:1: field 'duration_us' must be a positive number");
  EXPECT_EQ(trace_error("threads", R"({"request": 0, "kernel": "a", "duration_us": 1, "blocks": 1, "threads": 1025})"),
            "<path>:1: field 'threads' must be an integer in 1..1024");
  EXPECT_EQ(trace_error("blocks", R"({"request": 0, "kernel": "a", "duration_us": 1, "blocks": 1.5})"),
            "<path>:1: field 'blocks' must be an integer in 1..2147483647, not a floating-point number");
  EXPECT_EQ(trace_error("cluster", R"({"request": 0, "kernel": "a", "duration_us": 1, "blocks": 3, "cluster": [2]})"),
            "<path>:1: field 'cluster': cluster x = 2 does not divide grid x = 3");
  EXPECT_EQ(trace_error("serial", R"({"request": 0, "kernel": "a", "duration_us": 1, "blocks": 3, "serial_us": 1})"),
            "<path>:1: field 'serial_us' must be less than duration_us (1)");
  EXPECT_EQ(trace_error("array", "[1, 2]"), "<path>:1: expected a JSON object, not an array");
  EXPECT_EQ(trace_error("reqtype", R"({"request": [0], "kernel": "a", "duration_us": 1, "blocks": 1})"),
            "<path>:1: field 'request' must be an integer or a string, not an array");
  EXPECT_EQ(trace_error("strids", ok_line + "\n" + R"({"request": "x", "kernel": "a", "duration_us": 1, "blocks": 1})" +
                                      "\n" + R"({"request": 0, "kernel": "a", "duration_us": 1, "blocks": 1})"),
            "<path>:3: request 0 appears again after other requests started (first request lines must be "
            "consecutive)");
}

TEST(TraceTest, RelativePathsFollowBaseDir) {
  // The same text with another base directory does not find the trace.
  auto r = parse_scenario(traced_scenario("traces/basic.jsonl"), "t.toml", kData + "/traces");
  ASSERT_FALSE(r.is_ok());
  EXPECT_THAT(r.status().message(), HasSubstr("cannot be read: '" + kData + "/traces/traces/basic.jsonl'"));
  auto ok = parse_scenario(traced_scenario("traces/basic.jsonl"), "t.toml", kData);
  EXPECT_TRUE(ok.is_ok()) << ok.status().to_string();
}

// ------------------------------------------------------------ loading and built-ins

TEST(LoadScenarioTest, UnknownNameListsBuiltins) {
  auto r = load_scenario("no-such-scenario");
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  std::string list;
  for (const std::string& n : builtin_scenario_names()) list += (list.empty() ? "" : ", ") + n;
  if (list.empty()) list = "(none)";
  EXPECT_EQ(r.status().message(),
            "unknown scenario 'no-such-scenario'; built-in scenarios: " + list + "; or give the path of a .toml file");
  EXPECT_FALSE(load_scenario(kData).is_ok());  // a directory
  EXPECT_FALSE(load_scenario("").is_ok());
}

TEST(LoadScenarioTest, FilePathSetsSourceAndErrorsUseIt) {
  const std::string path = ::testing::TempDir() + "/lithos_scenario_test_bad.toml";
  {
    std::ofstream out(path);
    out << "[scenario]\nname = \"x\"\nbogus = 1\n";
  }
  auto r = load_scenario(path);
  std::filesystem::remove(path);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().message(), path + ":3:1: scenario: unknown field 'bogus'");
}

TEST(BuiltinScenarioTest, EveryBuiltinParses) {
  const std::vector<std::string> names = builtin_scenario_names();
  EXPECT_TRUE(std::is_sorted(names.begin(), names.end()));
  for (const std::string& name : names) {
    SCOPED_TRACE(name);
    EXPECT_FALSE(builtin_scenario_text(name).empty());
    auto r = load_scenario(name);
    ASSERT_TRUE(r.is_ok()) << r.status().to_string();
    EXPECT_EQ(r->source, "built-in:" + name);
    EXPECT_FALSE(r->tenants.empty());
  }
  EXPECT_TRUE(builtin_scenario_text("no-such-scenario").empty());
}

TEST(BuiltinScenarioTest, EmbeddingKeepsEveryByte) {
  ASSERT_EQ(test_embed::embedded_scenario_count(), 2u);
  EXPECT_EQ(test_embed::embedded_scenario_name(0), "awkward");
  EXPECT_EQ(test_embed::embedded_scenario_name(1), "empty");
  const std::string awkward = read_file(kData + "/embed/awkward.toml");
  ASSERT_GT(awkward.size(), 100u);
  EXPECT_EQ(test_embed::embedded_scenario_text(0), awkward);
  EXPECT_EQ(test_embed::embedded_scenario_text(1), "");
  EXPECT_EQ(test_embed::embedded_scenario_text(2), "");
}

// ---------------------------------------------------------------- [scheduler] and the settings table

std::string scheduler_scenario(const std::string& lines) {
  return "[scenario]\nname = \"x\"\n[scheduler]\n" + lines +
         "[[kernel]]\nname = \"k\"\nduration_us = 10\nblocks = 1\n[[tenant]]\nname = \"t\"\n"
         "class = \"best-effort\"\narrival = \"closed\"\nrequest = \"k\"\n";
}

std::string toml_number(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

sched::SchedulerTarget target_of(Scenario& sc) { return {&sc.engine, &sc.policies, &sc.immediate_launches}; }

// Every row of the Engine's and the policies' settings table is a key the
// reader takes, and sets the row's own field and no other: a row the reader
// ignores, or two rows on one field, fail here.
TEST(SchedulerSettingsTable, EveryRowIsReadAndSetsItsOwnField) {
  auto base = parse(scheduler_scenario(""));
  ASSERT_TRUE(base.is_ok()) << base.status().message();
  const auto& rows = sched::scheduler_settings();
  ASSERT_FALSE(rows.empty());
  for (const sched::SchedSetting& s : rows) {
    SCOPED_TRACE(std::string(s.key));
    const double def = s.get(target_of(*base));
    double v = 0;
    std::string text;
    if (s.type == sched::SchedSettingType::kBool) {
      v = def != 0 ? 0 : 1;
      text = v != 0 ? "true" : "false";
    } else {
      v = def * 2;
      if (v == def || !sched::scheduler_setting_in_range(s, v)) v = def + 1;
      if (!sched::scheduler_setting_in_range(s, v)) v = (s.lo + s.hi) / 2;
      if (s.type == sched::SchedSettingType::kInteger) v = std::floor(v);
      ASSERT_TRUE(sched::scheduler_setting_in_range(s, v) && v != def) << v;
      text = s.type == sched::SchedSettingType::kInteger ? std::to_string(static_cast<long long>(v)) : toml_number(v);
    }
    auto r = parse(scheduler_scenario(std::string(s.key) + " = " + text + "\n"));
    ASSERT_TRUE(r.is_ok()) << r.status().message();
    EXPECT_NEAR(s.get(target_of(*r)), v, 1e-9 * std::max(1.0, std::fabs(v))) << "the reader ignores the row";
    for (const sched::SchedSetting& o : rows) {
      if (o.key == s.key) continue;
      EXPECT_EQ(o.get(target_of(*r)), o.get(target_of(*base))) << "setting " << s.key << " changed " << o.key;
    }
    // A value of the wrong type is refused, naming the key.
    const std::string wrong = s.type == sched::SchedSettingType::kBool ? "\"yes\"" : "true";
    EXPECT_THAT(error_of(scheduler_scenario(std::string(s.key) + " = " + wrong + "\n")),
                HasSubstr("scheduler: field '" + std::string(s.key) + "' must be "));
  }
}

// The reader takes no key the table lacks: lithosd's keys that are not also
// rows (atom_us, hp_poll_us, ...) and unknown ones are refused.
TEST(SchedulerSettingsTable, ReaderTakesNoKeyTheTableLacks) {
  for (const char* key : {"atom_us", "hp_poll_us", "best_effort_runs_free", "policy", "throttle", "bogus"}) {
    SCOPED_TRACE(key);
    ASSERT_EQ(sched::find_scheduler_setting(key), nullptr);
    EXPECT_THAT(error_of(scheduler_scenario(std::string(key) + " = 1\n")),
                HasSubstr("scheduler: unknown field '" + std::string(key) + "'"));
  }
  // The first unknown key in file order is the one named.
  EXPECT_THAT(error_of(scheduler_scenario("throttle_us = 50\nzz = 1\naa = 2\n")),
              HasSubstr("t.toml:5:1: scheduler: unknown field 'zz'"));
}

}  // namespace
}  // namespace lithos::sim
