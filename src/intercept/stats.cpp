#include "intercept/stats.hpp"

#include <cstdio>

namespace lithos::intercept {

namespace {

std::uint64_t load(const std::atomic<std::uint64_t>& c) { return c.load(std::memory_order_relaxed); }

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (const char ch : s) {
    const auto u = static_cast<unsigned char>(ch);
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += ch;
    } else if (u < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", u);
      out += buf;
    } else {
      out += ch;
    }
  }
  return out + "\"";
}

std::string line(const std::string& text) { return "lithos: " + text + "\n"; }

}  // namespace

const char* skip_reason_name(SkipReason r) {
  switch (r) {
    case SkipReason::kNotRequested: return "not_requested";
    case SkipReason::kRequestRefused: return "request_refused";
    case SkipReason::kNoSlotMap: return "no_slot_map";
    case SkipReason::kOtherDevice: return "other_device";
    case SkipReason::kNoBackend: return "no_backend";
    case SkipReason::kUnknownQmd: return "unknown_descriptor_layout";
    case SkipReason::kWriteFailed: return "layout_refused_mask";
    case SkipReason::kInternalError: return "internal_error";
    case SkipReason::kWholeLiveSet: return "whole_live_set";
  }
  return "unknown";
}

std::uint64_t StatsSnapshot::kernel_launches() const {
  std::uint64_t n = 0;
  for (int i = 0; i < kHookCount; ++i) {
    if (is_kernel_launch(kHookInfo[i].kind)) n += calls[static_cast<std::size_t>(i)];
  }
  return n;
}

bool StatsSnapshot::touched() const {
  if (descriptors() != 0) return true;
  for (const auto c : calls) {
    if (c != 0) return true;
  }
  return false;
}

std::uint64_t StatsSnapshot::graph_launches() const {
  std::uint64_t n = 0;
  for (int i = 0; i < kHookCount; ++i) {
    if (kHookInfo[i].kind == HookKind::kGraphLaunch) n += calls[static_cast<std::size_t>(i)];
  }
  return n;
}

StatsSnapshot Counters::snapshot() const noexcept {
  StatsSnapshot s;
  for (std::size_t i = 0; i < calls.size(); ++i) s.calls[i] = load(calls[i]);
  for (std::size_t i = 0; i < not_applied.size(); ++i) s.not_applied[i] = load(not_applied[i]);
  s.masks_applied = load(masks_applied);
  s.descriptors_in_launch = load(descriptors_in_launch);
  s.descriptors_in_graph = load(descriptors_in_graph);
  s.descriptors_outside = load(descriptors_outside);
  s.launches_without_descriptor = load(launches_without_descriptor);
  s.graph_stale = load(graph_stale);
  s.procaddress_hooked = load(procaddress_hooked);
  s.procaddress_unrecognised = load(procaddress_unrecognised);
  s.dlsym_hooked = load(dlsym_hooked);
  s.green_routed = load(green_routed);
  s.internal_errors = load(internal_errors);
  s.cooperative_launches = load(cooperative_launches);
  s.rightsized_launches = load(rightsized_launches);
  s.graph_nodes_matched = load(graph_nodes_matched);
  s.graph_nodes_unmatched = load(graph_nodes_unmatched);
  s.graph_nodes_rightsized = load(graph_nodes_rightsized);
  s.cluster_descriptors = load(cluster_descriptors);
  s.widened_cluster = load(widened_cluster);
  s.widened_cooperative = load(widened_cooperative);
  s.whole_by_rule = load(whole_by_rule);
  s.green_unrouted = load(green_unrouted);
  return s;
}

bool stats_interposition_failed(const StatsHeader& header, const StatsSnapshot& s) {
  // The driver was used (or built descriptors) but no launch went through a
  // hook: the program reached the driver by a path lithos does not see.
  return (header.driver_used || s.descriptors() > 0) && s.kernel_launches() == 0 && s.graph_launches() == 0;
}

std::string stats_text(const StatsHeader& h, const StatsSnapshot& s) {
  std::string out;
  char buf[512];
  std::snprintf(buf, sizeof buf, "statistics of pid %d (%s)", h.pid, h.program.c_str());
  out += line(buf);
  out += line("  backend: " + h.backend + (h.qmd_version.empty() ? "" : ", descriptor layout " + h.qmd_version) +
              "; process mask: " + h.process_mask);
  if (!h.slot_map.empty()) out += line("  slot map: " + h.slot_map);
  std::snprintf(buf, sizeof buf, "  kernel launches seen: %llu; graph launches: %llu",
                static_cast<unsigned long long>(s.kernel_launches()),
                static_cast<unsigned long long>(s.graph_launches()));
  out += line(buf);
  for (int i = 0; i < kHookCount; ++i) {
    const auto n = s.calls[static_cast<std::size_t>(i)];
    if (n == 0) continue;
    std::snprintf(buf, sizeof buf, "    %-38s %12llu  [%s]", kHookInfo[i].name, static_cast<unsigned long long>(n),
                  kHookInfo[i].path);
    out += line(buf);
  }
  std::snprintf(
      buf, sizeof buf, "  launch descriptors: %llu in hooked launches, %llu in graph calls, %llu outside hooked calls",
      static_cast<unsigned long long>(s.descriptors_in_launch), static_cast<unsigned long long>(s.descriptors_in_graph),
      static_cast<unsigned long long>(s.descriptors_outside));
  out += line(buf);
  std::snprintf(buf, sizeof buf, "  masks applied: %llu; launches without a descriptor (capture/error): %llu",
                static_cast<unsigned long long>(s.masks_applied),
                static_cast<unsigned long long>(s.launches_without_descriptor));
  out += line(buf);
  std::string skipped;
  for (int r = 0; r < kSkipReasonCount; ++r) {
    const auto n = s.not_applied[static_cast<std::size_t>(r)];
    if (n == 0) continue;
    std::snprintf(buf, sizeof buf, "%s%s %llu", skipped.empty() ? "" : ", ",
                  skip_reason_name(static_cast<SkipReason>(r)), static_cast<unsigned long long>(n));
    skipped += buf;
  }
  out += line("  masks not applied: " + (skipped.empty() ? std::string("none") : skipped));
  std::snprintf(buf, sizeof buf,
                "  graph launches with a stale mask: %llu; entry points hooked via cuGetProcAddress %llu "
                "(unrecognised %llu), via dlsym %llu; internal errors %llu",
                static_cast<unsigned long long>(s.graph_stale), static_cast<unsigned long long>(s.procaddress_hooked),
                static_cast<unsigned long long>(s.procaddress_unrecognised),
                static_cast<unsigned long long>(s.dlsym_hooked), static_cast<unsigned long long>(s.internal_errors));
  out += line(buf);
  if (s.green_routed > 0) {
    std::snprintf(buf, sizeof buf, "  launches routed to the green-context partition: %llu",
                  static_cast<unsigned long long>(s.green_routed));
    out += line(buf);
  }
  if (s.cooperative_launches + s.cluster_descriptors + s.whole_by_rule + s.green_unrouted > 0) {
    std::snprintf(
        buf, sizeof buf,
        "  safe masks: %llu cooperative launches, %llu masked cluster descriptors; widened for clusters "
        "%llu, for cooperative grids %llu; left on the whole GPU %llu; green launches not routed %llu",
        static_cast<unsigned long long>(s.cooperative_launches), static_cast<unsigned long long>(s.cluster_descriptors),
        static_cast<unsigned long long>(s.widened_cluster), static_cast<unsigned long long>(s.widened_cooperative),
        static_cast<unsigned long long>(s.whole_by_rule), static_cast<unsigned long long>(s.green_unrouted));
    out += line(buf);
  }
  if (!h.daemon_json.empty()) out += line("lithosd client: " + h.daemon_json);
  if (stats_interposition_failed(h, s)) {
    out += line(
        "WARNING: the CUDA driver was used but lithos saw NO kernel launch: interposition failed, "
        "this program's launches are not confined (see docs/interposer.md, \"Coverage\")");
  }
  return out;
}

std::string stats_json(const StatsHeader& h, const StatsSnapshot& s) {
  auto num = [](std::uint64_t v) { return std::to_string(v); };
  std::string out = "{";
  out += "\"pid\":" + std::to_string(h.pid);
  out += ",\"program\":" + json_string(h.program);
  out += ",\"backend\":" + json_string(h.backend);
  out += ",\"qmd_version\":" + json_string(h.qmd_version);
  out += ",\"process_mask\":" + json_string(h.process_mask);
  out += ",\"slot_map\":" + json_string(h.slot_map);
  out += ",\"driver_used\":" + std::string(h.driver_used ? "true" : "false");
  out += ",\"kernel_launches\":" + num(s.kernel_launches());
  out += ",\"graph_launches\":" + num(s.graph_launches());
  out += ",\"calls\":{";
  bool first = true;
  for (int i = 0; i < kHookCount; ++i) {
    const auto n = s.calls[static_cast<std::size_t>(i)];
    if (n == 0) continue;
    out += (first ? "" : ",") + json_string(kHookInfo[i].name) + ":" + num(n);
    first = false;
  }
  out += "},\"paths\":{";
  // Launch counts summed per API-path label.
  first = true;
  for (int i = 0; i < kHookCount; ++i) {
    bool seen_before = false;
    for (int j = 0; j < i; ++j) seen_before = seen_before || std::string(kHookInfo[j].path) == kHookInfo[i].path;
    if (seen_before) continue;
    std::uint64_t n = 0;
    for (int j = i; j < kHookCount; ++j) {
      if (std::string(kHookInfo[j].path) == kHookInfo[i].path) n += s.calls[static_cast<std::size_t>(j)];
    }
    if (n == 0) continue;
    out += (first ? "" : ",") + json_string(kHookInfo[i].path) + ":" + num(n);
    first = false;
  }
  out += "},\"masks_applied\":" + num(s.masks_applied);
  out += ",\"not_applied\":{";
  for (int r = 0; r < kSkipReasonCount; ++r) {
    out += (r == 0 ? "" : ",") + json_string(skip_reason_name(static_cast<SkipReason>(r))) + ":" +
           num(s.not_applied[static_cast<std::size_t>(r)]);
  }
  out += "},\"descriptors\":{\"in_launch\":" + num(s.descriptors_in_launch) +
         ",\"in_graph\":" + num(s.descriptors_in_graph) + ",\"outside\":" + num(s.descriptors_outside) + "}";
  out += ",\"launches_without_descriptor\":" + num(s.launches_without_descriptor);
  out += ",\"graph_stale\":" + num(s.graph_stale);
  out += ",\"procaddress_hooked\":" + num(s.procaddress_hooked);
  out += ",\"procaddress_unrecognised\":" + num(s.procaddress_unrecognised);
  out += ",\"dlsym_hooked\":" + num(s.dlsym_hooked);
  out += ",\"green_routed\":" + num(s.green_routed);
  out += ",\"internal_errors\":" + num(s.internal_errors);
  out += ",\"safe\":{\"cooperative_launches\":" + num(s.cooperative_launches) +
         ",\"cluster_descriptors\":" + num(s.cluster_descriptors) + ",\"widened_cluster\":" + num(s.widened_cluster) +
         ",\"widened_cooperative\":" + num(s.widened_cooperative) + ",\"whole_by_rule\":" + num(s.whole_by_rule) +
         ",\"green_unrouted\":" + num(s.green_unrouted) + "}";
  out += ",\"right_size\":{\"launches\":" + num(s.rightsized_launches) +
         ",\"graph_nodes_matched\":" + num(s.graph_nodes_matched) +
         ",\"graph_nodes_unmatched\":" + num(s.graph_nodes_unmatched) +
         ",\"graph_nodes_rightsized\":" + num(s.graph_nodes_rightsized) + "}";
  if (!h.daemon_json.empty()) out += ",\"daemon\":" + h.daemon_json;
  out += ",\"interposition_failed\":" + std::string(stats_interposition_failed(h, s) ? "true" : "false");
  out += "}\n";
  return out;
}

}  // namespace lithos::intercept
