#include "sched/types.hpp"

namespace lithos::sched {

DeviceShape DeviceShape::h100_sxm() { return DeviceShape{}; }

const char* priority_class_name(PriorityClass c) {
  switch (c) {
    case PriorityClass::kHigh: return "high";
    case PriorityClass::kBestEffort: return "best-effort";
  }
  return "?";
}

}  // namespace lithos::sched
