#include "sched/types.hpp"

namespace lithos::sched {

DeviceShape DeviceShape::h100_sxm() {
  DeviceShape d;
  // Eight GPCs of 4-9 TPCs and four TPCs that are cluster domains of their
  // own (measured 2026-11-24, docs/results/2026-11-24-h100-safe/topo).
  auto t = Topology::parse(
      "0,8,16,24;1,9,17,25,32,39,46,53;2,10,18,26,33,40,47,54;3,11,19,27,34,41,48,55;4,12,20,28,35,42,49,56;"
      "5,13,21,29,36,43,50,57;6,14,22,30,37,44,51,58,60;7,15,23,31,38,45,52,59,61;62;63;64;65");
  if (t) d.topology = t.value();
  return d;
}

const char* priority_class_name(PriorityClass c) {
  switch (c) {
    case PriorityClass::kHigh: return "high";
    case PriorityClass::kBestEffort: return "best-effort";
  }
  return "?";
}

const char* best_effort_pause_name(BestEffortPause p) {
  switch (p) {
    case BestEffortPause::kNever: return "false";
    case BestEffortPause::kAlways: return "true";
    case BestEffortPause::kAuto: return "auto";
  }
  return "?";
}

const char* best_effort_pause_literal(BestEffortPause p) {
  return p == BestEffortPause::kAuto ? "\"auto\"" : best_effort_pause_name(p);
}

std::optional<BestEffortPause> best_effort_pause_of(std::optional<bool> boolean, std::optional<std::string_view> text) {
  if (boolean) return *boolean ? BestEffortPause::kAlways : BestEffortPause::kNever;
  if (text && *text == "auto") return BestEffortPause::kAuto;
  return std::nullopt;
}

}  // namespace lithos::sched
