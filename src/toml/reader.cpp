#include "toml/reader.hpp"

#include <algorithm>
#include <exception>

namespace lithos::tomlio {

std::string position(std::string_view source, const toml::source_region& r) {
  const auto line = r.begin.line == 0 ? 1u : r.begin.line;
  const auto col = r.begin.column == 0 ? 1u : r.begin.column;
  return std::string(source) + ":" + std::to_string(line) + ":" + std::to_string(col);
}

std::string position(std::string_view source, const toml::node& n) { return position(source, n.source()); }

Result<toml::table> parse(std::string_view text, std::string_view source) {
  try {
    return toml::parse(text, source);
  } catch (const toml::parse_error& e) {
    return Status::invalid_argument(position(source, e.source()) + ": " + std::string(e.description()));
  } catch (const std::exception& e) {
    return Status::internal(std::string(source) + ": " + e.what());
  }
}

const char* type_name(toml::node_type t) {
  switch (t) {
    case toml::node_type::none: return "nothing";
    case toml::node_type::table: return "a table";
    case toml::node_type::array: return "an array";
    case toml::node_type::string: return "a string";
    case toml::node_type::integer: return "an integer";
    case toml::node_type::floating_point: return "a floating-point number";
    case toml::node_type::boolean: return "a boolean";
    case toml::node_type::date: return "a date";
    case toml::node_type::time: return "a time";
    case toml::node_type::date_time: return "a date-time";
  }
  return "an unknown type";
}

const toml::key* first_unknown_key(const toml::table& t, std::initializer_list<std::string_view> known) {
  const toml::key* bad = nullptr;
  for (auto&& [k, v] : t) {
    (void)v;
    if (std::find(known.begin(), known.end(), k.str()) != known.end()) continue;
    if (bad == nullptr || k.source().begin < bad->source().begin) bad = &k;
  }
  return bad;
}

std::string key_list(std::initializer_list<std::string_view> known) {
  std::string list;
  for (std::string_view k : known) list += (list.empty() ? "" : ", ") + std::string(k);
  return list;
}

std::optional<double> number(const toml::node& n, bool integer) {
  if (const auto* i = n.as_integer()) return static_cast<double>(i->get());
  if (const auto* f = n.as_floating_point(); f != nullptr && !integer) return f->get();
  return std::nullopt;
}

}  // namespace lithos::tomlio
