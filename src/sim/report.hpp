// Output of `lithos sim`: a side-by-side text table for people and a JSON
// document for tools. The JSON schema ("lithos.sim/1") is documented in
// docs/sim-json.md; fields are only ever added, never renamed.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "sim/compare.hpp"

namespace lithos::sim {

inline constexpr const char* kSimJsonSchema = "lithos.sim/1";

std::string format_table(const Comparison& cmp);
nlohmann::json to_json(const Comparison& cmp);

}  // namespace lithos::sim
