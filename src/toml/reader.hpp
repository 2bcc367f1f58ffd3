// The one TOML helper of the three readers of TOML files (lithosd's
// configuration, src/daemon/config.cpp; simulator scenarios,
// src/sim/scenario.cpp; bench scenarios, src/bench/scenario.cpp): parsing
// without exceptions, positions, type names, unknown keys and numbers. Each
// reader words its own messages; they all name the file, line and column
// and the key, and say what is wrong.
#pragma once

#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>

#include "common/status.hpp"

// toml++ 3.3.0 asserts on some malformed documents (e.g. "[[[") that its
// parser then rejects with a proper parse_error; with assertions on (Debug
// builds) a typo in a file would abort the program. Its internal assertions
// are therefore off, as they are in NDEBUG builds.
#ifndef TOML_ASSERT
#define TOML_ASSERT(expr) static_assert(true)
#endif
#include <toml++/toml.h>

namespace lithos::tomlio {

// "source:line:column" (a line or column of 0, a place toml++ does not
// know, reads as 1).
std::string position(std::string_view source, const toml::source_region& r);
std::string position(std::string_view source, const toml::node& n);

// The document, or "source:line:column: what toml++ found wrong".
Result<toml::table> parse(std::string_view text, std::string_view source);

// "a string", "an integer", ... for messages.
const char* type_name(toml::node_type t);

// The first key of `t`, in file order, that is not in `known`; nullptr when
// every key is known.
const toml::key* first_unknown_key(const toml::table& t, std::initializer_list<std::string_view> known);
// "a, b, c": the known keys, for messages.
std::string key_list(std::initializer_list<std::string_view> known);

// The value of a number node: an integer, or a floating-point number unless
// `integer`; nullopt for any other node.
std::optional<double> number(const toml::node& n, bool integer);

}  // namespace lithos::tomlio
