#include "daemon/metrics.hpp"

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "sched/tpc_set.hpp"

namespace lithos::daemon {

namespace {

using nlohmann::json;

// A label value with backslash, double quote and line feed escaped, as the
// format requires.
std::string escaped(const std::string& v) {
  std::string out;
  out.reserve(v.size());
  for (const char c : v) {
    if (c == '\\' || c == '"') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string number(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

// A number member of `o`, 0 when absent or not a number (a daemon of
// another version may lack it).
double num(const json& o, const char* key) {
  if (!o.is_object()) return 0;
  const auto it = o.find(key);
  return it != o.end() && it->is_number() ? it->get<double>() : 0;
}

// The TPCs a TpcSet string names, 0 when it does not parse.
double tpcs(const json& o, const char* key) {
  if (!o.is_object() || !o.contains(key) || !o[key].is_string()) return 0;
  const auto s = sched::TpcSet::parse(o[key].get<std::string>());
  return s ? static_cast<double>(s->count()) : 0;
}

class Writer {
 public:
  // One metric family: its HELP and TYPE lines, then its samples.
  void family(const std::string& name, const char* type, const char* help,
              const std::vector<std::pair<std::string, double>>& samples) {
    if (samples.empty()) return;
    out_ += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
    for (const auto& [labels, v] : samples) out_ += name + labels + " " + number(v) + "\n";
  }
  void one(const std::string& name, const char* type, const char* help, double v) {
    family(name, type, help, {{"", v}});
  }
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
};

void up(Writer& w, bool answered) {
  w.one("lithos_up", "gauge", "1: lithosd answered; 0: it did not.", answered ? 1 : 0);
}

}  // namespace

std::string prometheus_down() {
  Writer w;
  up(w, false);
  return w.take();
}

Result<std::string> prometheus_text(std::string_view status_json) {
  const json j = json::parse(status_json, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return Status::invalid_argument("lithosd's status answer is not JSON");
  if (!j.contains("schema") || j["schema"] != "lithos.status/1")
    return Status::invalid_argument("lithosd's status answer is not of schema lithos.status/1");
  Writer w;
  up(w, true);
  w.one("lithos_uptime_seconds", "gauge", "Seconds since lithosd started.", num(j, "uptime_s"));
  w.one("lithos_cpu_seconds_total", "counter", "lithosd's own CPU time since it started.", num(j, "cpu_s"));
  const json device = j.value("device", json::object());
  w.one("lithos_device_tpcs", "gauge", "TPCs of the GPU lithosd serves.", num(device, "tpcs"));
  // Which GPU (one lithosd per GPU: docs/daemon.md, "Nodes with several GPUs").
  if (device.contains("uuid") && device["uuid"].is_string()) {
    const std::string name =
        device.contains("name") && device["name"].is_string() ? device["name"].get<std::string>() : std::string();
    w.family("lithos_device_info", "gauge", "Always 1: the GPU lithosd serves, by its UUID and name.",
             {{"{uuid=\"" + escaped(device["uuid"].get<std::string>()) + "\",name=\"" + escaped(name) + "\"}", 1}});
  }

  // Per tenant: labels tenant and class.
  struct Column {
    const char* name;
    const char* help;
    double (*get)(const json&);
  };
  static const Column columns[] = {
      {"lithos_tenant_quota_tpcs", "TPCs guaranteed to the tenant.", [](const json& t) { return num(t, "quota"); }},
      {"lithos_tenant_active", "1: the tenant has work or had some within the idle grace.",
       [](const json& t) { return t.value("active", false) ? 1.0 : 0.0; }},
      {"lithos_tenant_clients", "Processes of the tenant registered now.",
       [](const json& t) { return num(t, "clients"); }},
      {"lithos_tenant_pending_launches", "Launches waiting for their grant.",
       [](const json& t) { return num(t, "pending_launches"); }},
      {"lithos_tenant_inflight_atoms", "Atoms granted and not yet seen complete.",
       [](const json& t) { return num(t, "inflight_atoms"); }},
      {"lithos_tenant_stolen_inflight_atoms", "Atoms in flight on TPCs the tenant borrowed.",
       [](const json& t) { return num(t, "stolen_inflight"); }},
      {"lithos_tenant_held_tpcs", "TPCs the tenant's work in flight holds now.",
       [](const json& t) { return tpcs(t, "held"); }},
      {"lithos_tenant_allocation_tpcs", "TPCs the tenant's launches may use now.",
       [](const json& t) { return tpcs(t, "allocation"); }},
      {"lithos_tenant_runs_free", "1: the tenant's launches go out without grants (no service connected).",
       [](const json& t) { return t.value("runs_free", false) ? 1.0 : 0.0; }},
  };
  const json tenants = j.value("tenants", json::array());
  std::vector<std::string> labels;
  for (const json& t : tenants) {
    labels.push_back("{tenant=\"" + escaped(t.value("name", std::string())) + "\",class=\"" +
                     escaped(t.value("class", std::string())) + "\"}");
  }
  for (const Column& c : columns) {
    std::vector<std::pair<std::string, double>> samples;
    for (std::size_t i = 0; i < labels.size(); ++i) samples.emplace_back(labels[i], c.get(tenants[i]));
    w.family(c.name, "gauge", c.help, samples);
  }
  {
    std::vector<std::pair<std::string, double>> slo;
    for (std::size_t i = 0; i < labels.size(); ++i) {
      if (tenants[i].contains("slo_ms")) slo.emplace_back(labels[i], num(tenants[i], "slo_ms") / 1e3);
    }
    w.family("lithos_tenant_slo_seconds", "gauge", "The tenant's configured latency objective.", slo);
  }
  {
    // Tenants that pause best-effort work (pauses_best_effort true or
    // "auto"): whether best effort is held for them now, and what "auto"
    // measured.
    std::vector<std::pair<std::string, double>> paused, slowdown, pauses;
    for (std::size_t i = 0; i < labels.size(); ++i) {
      if (!tenants[i].contains("pause") || !tenants[i]["pause"].is_object()) continue;
      const json& p = tenants[i]["pause"];
      paused.emplace_back(labels[i], p.value("phase", std::string()) == "sharing" ? 0.0 : 1.0);
      if (p.contains("slowdown")) slowdown.emplace_back(labels[i], num(p, "slowdown"));
      pauses.emplace_back(labels[i], num(p, "pauses"));
    }
    w.family("lithos_tenant_pausing_best_effort", "gauge",
             "1: best effort is held back while the tenant works (paused or probing); 0: it runs beside it.", paused);
    w.family("lithos_tenant_pause_slowdown", "gauge",
             "The tenant's work beside best effort over the same work without it, at the last verdict (\"auto\").",
             slowdown);
    w.family("lithos_tenant_pauses_total", "counter", "Times a verdict paused best effort for the tenant (\"auto\").",
             pauses);
  }
  {
    // Right-sized tenants (rightsize): what it left to others and cost.
    std::vector<std::pair<std::string, double>> saved, slowdown, occupancy, model, probes, probe_cost;
    for (std::size_t i = 0; i < labels.size(); ++i) {
      if (!tenants[i].contains("rightsize") || !tenants[i]["rightsize"].is_object()) continue;
      const json& r = tenants[i]["rightsize"];
      saved.emplace_back(labels[i], num(r, "saved_tpc_us") / 1e6);
      if (r.contains("slowdown")) slowdown.emplace_back(labels[i], num(r, "slowdown"));
      occupancy.emplace_back(labels[i], num(r, "by_occupancy"));
      model.emplace_back(labels[i], num(r, "by_model"));
      probes.emplace_back(labels[i], num(r, "probes"));
      probe_cost.emplace_back(labels[i], num(r, "probe_cost_us") / 1e6);
    }
    w.family("lithos_tenant_rightsize_saved_tpc_seconds_total", "counter",
             "TPC-seconds right-sizing left to others: (allocation - TPCs used) x duration, summed.", saved);
    w.family("lithos_tenant_rightsize_slowdown", "gauge",
             "Right-sized kernels' measured time over the fit's prediction on what they can use.", slowdown);
    w.family("lithos_tenant_rightsize_by_occupancy_total", "counter",
             "Kernel executions whose TPC count the occupancy bound decided.", occupancy);
    w.family("lithos_tenant_rightsize_by_model_total", "counter",
             "Kernel executions whose TPC count the fitted model decided.", model);
    w.family("lithos_tenant_rightsize_probes_total", "counter",
             "Probes: executions at a reduced TPC count to learn the fit.", probes);
    w.family("lithos_tenant_rightsize_probe_cost_seconds_total", "counter", "The probes' predicted extra time.",
             probe_cost);
  }

  {
    // Registered processes by whether their contexts are MPS clients: a
    // process outside MPS beside MPS clients time-slices with them.
    double inside = 0, outside = 0;
    for (const json& c : j.value("clients", json::array())) {
      const json m = c.value("mps", json());
      if (m.is_boolean()) (m.get<bool>() ? inside : outside) += 1;
    }
    w.family("lithos_clients", "gauge",
             "Registered processes, by whether their CUDA contexts are MPS clients (mps=\"no\" beside mps=\"yes\": "
             "they time-slice with them).",
             {{"{mps=\"yes\"}", inside}, {"{mps=\"no\"}", outside}});
  }

  const json k = j.value("counters", json::object());
  static const std::pair<const char*, const char*> counters[] = {
      {"clients_accepted", "Client registrations accepted."},
      {"clients_refused", "Connections refused (lithos_client_drops_total says why)."},
      {"clients_dropped", "Registered clients the daemon dropped (lithos_client_drops_total says why)."},
      {"clients_gone", "Clients that exited or were killed."},
      {"submits", "Launches submitted by clients."},
      {"running_launches", "High-priority launches accounted (they never wait for a grant)."},
      {"grants", "Atoms granted."},
      {"completions", "Completions seen."},
      {"reclaimed_atoms", "Atoms released because their client went away."},
      {"doorbells", "Clients waking the daemon from its idle poll."},
      {"doorbell_mutes", "Times a client rang far more than it submitted and its socket was not read for a while."},
      {"throttles", "Times a client went over one of its bounds and was not read until under again."},
      {"accept_errors", "Times accept() found the daemon out of file descriptors."},
      {"steps_over_100ms", "Turns of the daemon's loop whose own work took over 100 ms of CPU time."},
  };
  for (const auto& [key, help] : counters) w.one(std::string("lithos_") + key + "_total", "counter", help, num(k, key));
  {
    // Drops and refusals by reason (a fixed set of words: docs/daemon.md,
    // "Hostile clients").
    std::vector<std::pair<std::string, double>> samples;
    const json reasons = k.value("drop_reasons", json::object());
    for (const auto& [reason, n] : reasons.items()) {
      if (n.is_number()) samples.emplace_back("{reason=\"" + escaped(reason) + "\"}", n.get<double>());
    }
    w.family("lithos_client_drops_total", "counter", "Clients dropped and connections refused, by reason.", samples);
  }
  w.one("lithos_throttled_clients", "gauge", "Clients over one of their bounds now (not read until under again).",
        num(k, "throttled_clients"));
  {
    // Fatal GPU faults (docs/daemon.md, "GPU faults").
    const json f = j.value("fault", json::object());
    const std::string state = f.is_object() ? f.value("state", std::string("ok")) : "ok";
    w.one("lithos_gpu_faulted", "gauge",
          "1 while a fatal GPU fault reached every MPS client and the GPU takes no new MPS client.",
          state == "gpu_faulted" ? 1 : 0);
    w.one("lithos_fault_open", "gauge", "1 while a fault episode is open (a process's context lost, or an Xid).",
          state != "ok" ? 1 : 0);
    w.one("lithos_fault_episodes_total", "counter", "Fault episodes (a client's lost context, or an Xid event).",
          num(f, "episodes"));
    w.one("lithos_gpu_faults_total", "counter", "Faults confirmed to have reached every MPS client of the GPU.",
          num(f, "gpu_faults"));
    w.one("lithos_xid_events_total", "counter", "NVML critical Xid events of the GPU.", num(f, "xid_events"));
    w.one("lithos_fault_signals_total", "counter",
          "SIGTERM and SIGKILL sent to MPS client processes that lingered after a fault.",
          num(f, "processes_signalled"));
    w.one("lithos_faulted_clients_total", "counter", "Clients whose work a fatal GPU fault destroyed.",
          num(f, "faulted_clients"));
    if (const json last = f.value("last", json()); last.is_object() && last.contains("closed_after_ms"))
      w.one("lithos_last_fault_recovery_seconds", "gauge", "How long the last fault episode lasted.",
            num(last, "closed_after_ms") / 1e3);
  }
  {
    // Power management (docs/efficiency.md, "Power"); zeros while it is off.
    const json p = j.value("power", json::object());
    const std::string mode = p.is_object() ? p.value("mode", std::string("off")) : "off";
    w.family("lithos_power_mode", "gauge", "1 for the power management mode in effect (off, dry-run, on).",
             {{"{mode=\"off\"}", mode == "off" ? 1 : 0},
              {"{mode=\"dry-run\"}", mode == "dry-run" ? 1 : 0},
              {"{mode=\"on\"}", mode == "on" ? 1 : 0}});
    w.one("lithos_power_chosen_mhz", "gauge",
          "The SM clock the governor chose for the work in flight (set when on, would be set in dry-run).",
          num(p, "chosen_mhz"));
    w.one("lithos_power_sm_clock_mhz", "gauge", "The SM clock NVML reports.", num(p, "sm_clock_mhz"));
    w.one("lithos_power_sensitivity", "gauge", "The runtime-weighted clock sensitivity S of the work.",
          num(p, "sensitivity"));
    w.one("lithos_power_changes_total", "counter", "Changes of the chosen clock.", num(p, "changes"));
    w.one("lithos_power_watts", "gauge", "The GPU's power draw (NVML).", num(p, "power_w"));
    w.one("lithos_power_energy_joules_total", "counter", "The GPU's energy while lithosd measured it (NVML).",
          num(p, "energy_j"));
    w.one("lithos_power_modelled_saving_joules_total", "counter",
          "Energy the chosen clocks save by the stated model (docs/efficiency.md, \"Power\").",
          num(p, "modelled_saving_j"));
  }
  w.one("lithos_max_spin_gap_seconds", "gauge", "Longest gap between two turns of the daemon's loop since it started.",
        num(k, "max_spin_gap_us") / 1e6);
  w.one("lithos_max_step_seconds", "gauge", "Longest single turn of the daemon's loop since it started.",
        num(k, "max_step_us") / 1e6);

  const json e = j.value("engine", json::object());
  static const std::pair<const char*, const char*> engine[] = {
      {"launches", "Launches the Engine placed."},
      {"atoms", "Atoms the Engine dispatched."},
      {"split_launches", "Launches split into more than one atom."},
      {"stolen_atoms", "Atoms placed on borrowed TPCs."},
      {"throttled", "Times a queue waited for the outstanding-work throttle."},
      {"widened", "Placements widened by the safe-mask rule (clusters, cooperative grids)."},
      {"deferred", "Placements deferred for want of TPCs."},
  };
  for (const auto& [key, help] : engine)
    w.one(std::string("lithos_engine_") + key + "_total", "counter", help, num(e, key));

  const json p = j.value("predictor", json::object());
  std::vector<std::pair<std::string, double>> obs, miss, mean, p99;
  for (const char* cls : {"high", "best-effort"}) {
    if (!p.contains(cls)) continue;
    const json& c = p[cls];
    const std::string l = std::string("{class=\"") + cls + "\"}";
    obs.emplace_back(l, num(c, "observations"));
    miss.emplace_back(l, num(c, "miss_share"));
    mean.emplace_back(l, num(c, "mean_abs_error_us") / 1e6);
    p99.emplace_back(l, num(c, "p99_abs_error_us") / 1e6);
  }
  w.family("lithos_predictor_observations_total", "counter", "Completions the predictor learnt from.", obs);
  w.family("lithos_predictor_miss_ratio", "gauge", "Share of predictions off by more than 50 us.", miss);
  w.family("lithos_predictor_mean_abs_error_seconds", "gauge", "Mean absolute prediction error.", mean);
  w.family("lithos_predictor_p99_abs_error_seconds", "gauge", "99th percentile of the absolute prediction error.", p99);
  const json ht = p.value("high_timed", json::object());
  w.one("lithos_predictor_hp_samples_total", "counter", "High-priority launches timed one by one and learnt.",
        num(ht, "samples"));
  w.one("lithos_predictor_hp_timed_miss_ratio", "gauge",
        "Share of high-priority predictions off by more than 50 us, checked against timed launches alone.",
        num(ht, "miss_share"));
  w.one("lithos_predictor_entries", "gauge", "Kernels (and ordinals) the predictor knows.", num(p, "entries"));
  return w.take();
}

}  // namespace lithos::daemon
