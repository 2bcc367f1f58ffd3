// Scenario files: TOML parsing and validation, the request mini-language,
// JSON-lines traces and the built-in scenarios compiled into the binary.
// The format is documented in docs/scenarios.md. (Over 600 lines: every
// table of a scenario file and its checks, with messages that name the key.)
//
// Nothing here throws: toml++ (built with exceptions) and nlohmann::json
// errors are caught and turned into Status, and every public function wraps
// its body in a last-resort catch.
#include "sim/scenario.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstddef>
#include <exception>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <map>
#include <set>
#include <sstream>
#include <tuple>
#include <unordered_map>
#include <utility>

#include <nlohmann/json.hpp>

#include "sched/occupancy.hpp"
#include "sched/policies/settings_table.hpp"
#include "toml/reader.hpp"

namespace lithos::sim {

// Defined in the file cmake/EmbedScenarios.cmake generates from scenarios/*.toml.
namespace detail {
std::size_t embedded_scenario_count();
std::string_view embedded_scenario_name(std::size_t i);
std::string_view embedded_scenario_text(std::size_t i);
}  // namespace detail

namespace {

// ---------------------------------------------------------------- limits

constexpr std::size_t kMaxRequestKernels = 1'000'000;
constexpr std::uint64_t kMaxRepeat = 100'000;
constexpr int kMaxRequestNesting = 64;
constexpr std::int64_t kMaxTpcs = 128;
constexpr double kMaxUs = 1e9;       // any time in microseconds: 1000 s
constexpr double kMaxMs = 1e6;       // any time in milliseconds: 1000 s
constexpr double kMaxSeconds = 1e6;  // simulated duration
constexpr double kMaxRate = 1e9;     // requests per second
constexpr double kMaxFactor = 1e3;   // cv, spread, slo_factor, trace_cv
constexpr std::uint32_t kMaxGridX = 2'147'483'647u;
constexpr std::uint32_t kMaxGridYZ = 65'535u;
constexpr std::uint32_t kMaxThreads = 1024;
constexpr std::uint32_t kMaxClusterBlocks = 16;
constexpr std::int64_t kMaxRegs = 255;
constexpr std::int64_t kMaxSmem = std::int64_t{227} * 1024;
constexpr double kDefaultSerialUs = 2.0;

// ---------------------------------------------------------------- helpers

std::string num_text(double v) {
  if (std::isfinite(v) && v == std::floor(v) && std::fabs(v) < 1e15) {
    return std::to_string(static_cast<std::int64_t>(v));
  }
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

std::string squote(std::string_view s) { return "'" + std::string(s) + "'"; }

bool is_name_char(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '.' || c == '-';
}

bool is_valid_name(std::string_view s) { return !s.empty() && std::all_of(s.begin(), s.end(), is_name_char); }

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

std::string_view trim(std::string_view s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

std::string join(const std::vector<std::string>& v, std::string_view sep) {
  std::string out;
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (i > 0) out += sep;
    out += v[i];
  }
  return out;
}

const char* toml_type_name(toml::node_type t) { return tomlio::type_name(t); }

const char* json_type_name(const nlohmann::json& v) {
  if (v.is_null()) return "null";
  if (v.is_boolean()) return "a boolean";
  if (v.is_number_integer()) return "an integer";
  if (v.is_number()) return "a floating-point number";
  if (v.is_string()) return "a string";
  if (v.is_array()) return "an array";
  if (v.is_object()) return "an object";
  return "an unknown type";
}

// An allowed interval for a number. `text` describes the lower bound (and the
// upper one when `text_has_hi`), e.g. "a positive number", "a number in (0, 1)".
struct NumRange {
  double lo;
  bool lo_open;
  double hi;
  bool hi_open;
  const char* text;
  bool text_has_hi = false;
};

// "" when v lies in r, else what it must be ("must be a positive number").
std::string check_range(double v, const NumRange& r) {
  if (!std::isfinite(v)) return "must be a finite number";
  const bool lo_ok = r.lo_open ? v > r.lo : v >= r.lo;
  const bool hi_ok = r.hi_open ? v < r.hi : v <= r.hi;
  if (lo_ok && hi_ok) return {};
  if (!lo_ok || r.text_has_hi) return std::string("must be ") + r.text;
  return std::string("must be ") + (r.hi_open ? "less than " : "at most ") + num_text(r.hi);
}

constexpr NumRange positive(double hi) { return {0.0, true, hi, false, "a positive number"}; }
constexpr NumRange non_negative(double hi) { return {0.0, false, hi, false, "a number >= 0"}; }
constexpr NumRange kFraction{0.0, true, 1.0, true, "a number in (0, 1)", true};
constexpr NumRange kShare{0.0, false, 1.0, false, "a number in [0, 1]", true};
constexpr NumRange kMpsSlowdown{1.0, false, 10.0, false, "a number in [1, 10]", true};

struct Dim3Limits {
  std::uint32_t x, y, z;
};
constexpr Dim3Limits kGridLimits{kMaxGridX, kMaxGridYZ, kMaxGridYZ};
constexpr Dim3Limits kBlockLimits{1024, 1024, 64};
constexpr Dim3Limits kClusterLimits{kMaxClusterBlocks, kMaxClusterBlocks, kMaxClusterBlocks};

const char* axis_name(std::size_t i) { return i == 0 ? "x" : (i == 1 ? "y" : "z"); }

std::uint32_t& axis(sched::Dim3& d, std::size_t i) { return i == 0 ? d.x : (i == 1 ? d.y : d.z); }
std::uint32_t axis(const sched::Dim3& d, std::size_t i) { return i == 0 ? d.x : (i == 1 ? d.y : d.z); }

std::string dim3_text(const sched::Dim3& d) {
  return "[" + std::to_string(d.x) + ", " + std::to_string(d.y) + ", " + std::to_string(d.z) + "]";
}

// Launch-shape checks shared by [[kernel]] tables and trace lines. Each
// returns "" when fine, else a message naming the offending field.
std::string check_block(const sched::Dim3& block, const char* field) {
  if (block.count() > kMaxThreads) {
    return "field '" + std::string(field) + "' gives " + std::to_string(block.count()) +
           " threads per block; at most 1024";
  }
  return {};
}

std::string check_cluster(const sched::Dim3& cluster, const sched::Dim3& grid) {
  if (cluster.count() > kMaxClusterBlocks) {
    return "field 'cluster' " + dim3_text(cluster) + " has " + std::to_string(cluster.count()) + " blocks; at most 16";
  }
  for (std::size_t i = 0; i < 3; ++i) {
    if (axis(grid, i) % axis(cluster, i) != 0) {
      return "field 'cluster': cluster " + std::string(axis_name(i)) + " = " + std::to_string(axis(cluster, i)) +
             " does not divide grid " + axis_name(i) + " = " + std::to_string(axis(grid, i));
    }
  }
  return {};
}

// Whether the launch can run at all on `dev` (a block fits on an SM; a
// cooperative grid fits on the whole device at once).
std::string check_fits(const sched::DeviceShape& dev, const KernelClass& k) {
  sched::LaunchDesc d;
  d.grid = k.grid;
  d.block = k.block;
  d.regs_per_thread = k.regs;
  d.smem_per_block = k.smem;
  d.cluster = k.cluster;
  d.cooperative = k.cooperative;
  const int per_sm = sched::blocks_per_sm(dev, d);
  if (per_sm <= 0) {
    return "one block (" + std::to_string(k.block.count()) + " threads x " + std::to_string(k.regs) + " registers, " +
           std::to_string(k.smem) + " bytes of shared memory) does not fit on an SM";
  }
  if (k.cooperative) {
    const std::uint64_t resident = static_cast<std::uint64_t>(per_sm) * static_cast<std::uint64_t>(dev.sms_per_tpc) *
                                   static_cast<std::uint64_t>(dev.tpcs);
    if (k.grid.count() > resident) {
      return "a cooperative launch of " + std::to_string(k.grid.count()) + " blocks cannot be co-resident: at most " +
             std::to_string(resident) + " blocks of this shape fit on " + std::to_string(dev.tpcs) + " TPCs";
    }
  }
  return {};
}

// ---------------------------------------------------------------- TOML access

// Formats positions and errors for one document.
class Doc {
 public:
  explicit Doc(std::string source) : source_(std::move(source)) {}
  const std::string& source() const { return source_; }

  std::string position(const toml::source_region& r) const { return tomlio::position(source_, r); }
  Status error(const toml::source_region& at, std::string_view where, std::string_view what) const {
    return Status::invalid_argument(position(at) + ": " + std::string(where) + ": " + std::string(what));
  }

 private:
  std::string source_;
};

// Typed reads of the fields of one table. Absent optional fields leave the
// output untouched (so it keeps its default). Errors point at the key.
class Fields {
 public:
  Fields(const Doc& doc, const toml::table& table, std::string where)
      : doc_(doc), table_(table), where_(std::move(where)) {}

  const std::string& where() const { return where_; }

  bool has(std::string_view key) const { return table_.contains(key); }
  const toml::node* node(std::string_view key) const { return table_.get(key); }

  const toml::source_region& key_source(std::string_view key) const {
    const auto it = table_.find(key);
    return it == table_.end() ? table_.source() : it->first.source();
  }

  // The first key (in file order) not in `allowed`.
  Status check_keys(std::initializer_list<std::string_view> allowed) const {
    const toml::key* bad = tomlio::first_unknown_key(table_, allowed);
    if (bad == nullptr) return Status::ok();
    return doc_.error(bad->source(), where_, "unknown field " + squote(bad->str()));
  }

  Status missing(std::string_view key, std::string_view extra = {}) const {
    return doc_.error(table_.source(), where_, "missing required field " + squote(key) + std::string(extra));
  }
  Status error(std::string_view key, std::string_view what) const {
    return doc_.error(key_source(key), where_, "field " + squote(key) + " " + std::string(what));
  }
  Status error_at(const toml::node& n, std::string_view key, std::string_view what) const {
    return doc_.error(n.source(), where_, "field " + squote(key) + std::string(what));
  }
  Status type_error(std::string_view key, const char* expected) const {
    const toml::node* n = node(key);
    const std::string got = n != nullptr ? std::string(", not ") + toml_type_name(n->type()) : std::string();
    return error(key, std::string("must be ") + expected + got);
  }

  Status require(std::string_view key) const { return has(key) ? Status::ok() : missing(key); }

  Status string(std::string_view key, std::string& out, bool allow_empty = false) const {
    const toml::node* n = node(key);
    if (n == nullptr) return Status::ok();
    const auto* s = n->as_string();
    if (s == nullptr) return type_error(key, "a string");
    if (!allow_empty && s->get().empty()) return error(key, "must not be empty");
    out = s->get();
    return Status::ok();
  }

  Status boolean(std::string_view key, bool& out) const {
    const toml::node* n = node(key);
    if (n == nullptr) return Status::ok();
    const auto* b = n->as_boolean();
    if (b == nullptr) return type_error(key, "a boolean (true or false)");
    out = b->get();
    return Status::ok();
  }

  // Integers and floats are both numbers.
  Status number(std::string_view key, double& out, const NumRange& r) const {
    const toml::node* n = node(key);
    if (n == nullptr) return Status::ok();
    const std::optional<double> read = tomlio::number(*n, /*integer=*/false);
    if (!read) return type_error(key, "a number");
    const double v = *read;
    if (std::string why = check_range(v, r); !why.empty()) return error(key, why);
    out = v;
    return Status::ok();
  }

  Status number(std::string_view key, std::optional<double>& out, const NumRange& r) const {
    if (!has(key)) return Status::ok();
    double v = 0.0;
    LITHOS_RETURN_IF_ERROR(number(key, v, r));
    out = v;
    return Status::ok();
  }

  template <class T>
  Status integer(std::string_view key, T& out, std::int64_t lo, std::int64_t hi) const {
    const toml::node* n = node(key);
    if (n == nullptr) return Status::ok();
    const auto* i = n->as_integer();
    if (i == nullptr) return type_error(key, "an integer");
    const std::int64_t v = i->get();
    if (v < lo || v > hi) {
      return error(key, "must be an integer in " + std::to_string(lo) + ".." + std::to_string(hi));
    }
    out = static_cast<T>(v);
    return Status::ok();
  }

  // [x], [x, y] or [x, y, z] (missing dimensions are 1).
  Status dim3(std::string_view key, sched::Dim3& out, const Dim3Limits& lim) const {
    const toml::node* n = node(key);
    if (n == nullptr) return Status::ok();
    const auto* arr = n->as_array();
    if (arr == nullptr) return type_error(key, "an array of 1 to 3 integers");
    if (arr->empty() || arr->size() > 3) {
      return error(key, "must have 1 to 3 elements, not " + std::to_string(arr->size()));
    }
    sched::Dim3 d{1, 1, 1};
    const std::uint32_t limits[3] = {lim.x, lim.y, lim.z};
    for (std::size_t i = 0; i < arr->size(); ++i) {
      const toml::node& el = *arr->get(i);
      const auto* iv = el.as_integer();
      const std::string which =
          std::string(" element ") + axis_name(i) + " must be an integer in 1.." + std::to_string(limits[i]);
      if (iv == nullptr) return error_at(el, key, which + ", not " + toml_type_name(el.type()));
      if (iv->get() < 1 || iv->get() > static_cast<std::int64_t>(limits[i])) return error_at(el, key, which);
      axis(d, i) = static_cast<std::uint32_t>(iv->get());
    }
    out = d;
    return Status::ok();
  }

 private:
  const Doc& doc_;
  const toml::table& table_;
  std::string where_;
};

// An optional [name] table of the root. nullptr when absent.
Result<const toml::table*> section(const Doc& doc, const toml::table& root, std::string_view name) {
  const toml::node* n = root.get(name);
  if (n == nullptr) return static_cast<const toml::table*>(nullptr);
  const toml::table* t = n->as_table();
  if (t == nullptr) {
    return doc.error(root.find(name)->first.source(), "top level",
                     squote(name) + " must be a table ([" + std::string(name) + "]), not " + toml_type_name(n->type()));
  }
  return t;
}

// An optional [[name]] array of tables of the root (empty when absent).
Result<std::vector<const toml::table*>> table_array(const Doc& doc, const toml::table& root, std::string_view name) {
  std::vector<const toml::table*> out;
  const toml::node* n = root.get(name);
  if (n == nullptr) return out;
  const auto& key_src = root.find(name)->first.source();
  const std::string must = squote(name) + " must be an array of tables ([[" + std::string(name) + "]])";
  const toml::array* arr = n->as_array();
  if (arr == nullptr) return doc.error(key_src, "top level", must + ", not " + toml_type_name(n->type()));
  for (const toml::node& el : *arr) {
    const toml::table* t = el.as_table();
    if (t == nullptr)
      return doc.error(el.source(), "top level", must + ", not an array of " + toml_type_name(el.type()));
    out.push_back(t);
  }
  return out;
}

// Pre-reads a table's name for the "<where>" of its messages.
std::string element_where(const toml::table& t, std::string_view kind, std::size_t index) {
  if (const toml::node* n = t.get("name")) {
    if (const auto* s = n->as_string(); s != nullptr && !s->get().empty())
      return std::string(kind) + " " + squote(s->get());
  }
  return std::string(kind) + " #" + std::to_string(index + 1);
}

// ---------------------------------------------------------------- request grammar

class RequestParser {
 public:
  RequestParser(std::string_view text, const std::vector<KernelClass>& kernels) : text_(text) {
    for (std::size_t i = 0; i < kernels.size(); ++i) {
      names_.emplace(kernels[i].name, static_cast<std::uint32_t>(i));  // first of a duplicated name wins
    }
  }

  Result<std::vector<std::uint32_t>> parse() {
    std::vector<std::uint32_t> out;
    LITHOS_RETURN_IF_ERROR(seq(out, 0, kMaxRequestKernels));
    skip_ws();
    if (pos_ < text_.size()) {
      if (text_[pos_] == ')') return error(pos_, "unmatched ')'");
      return error(pos_, "expected ',' or the end of the request, found " + found());
    }
    return out;
  }

 private:
  Status error(std::size_t at, std::string_view what) const {
    return Status::invalid_argument("at character " + std::to_string(at + 1) + ": " + std::string(what));
  }

  std::string found() const {
    if (pos_ >= text_.size()) return "the end of the request";
    return "'" + std::string(1, text_[pos_]) + "'";
  }

  void skip_ws() {
    while (pos_ < text_.size() && is_space(text_[pos_])) ++pos_;
  }

  std::string_view name_token() {
    const std::size_t start = pos_;
    while (pos_ < text_.size() && is_name_char(text_[pos_])) ++pos_;
    return text_.substr(start, pos_ - start);
  }

  // seq := item (',' item)* ; appends to `out`, which may hold at most `limit` ids.
  Status seq(std::vector<std::uint32_t>& out, int depth, std::size_t limit) {
    for (;;) {
      LITHOS_RETURN_IF_ERROR(item(out, depth, limit));
      skip_ws();
      if (pos_ < text_.size() && text_[pos_] == ',') {
        ++pos_;
        continue;
      }
      return Status::ok();
    }
  }

  // item := [INT '*'] (NAME | '(' seq ')')
  Status item(std::vector<std::uint32_t>& out, int depth, std::size_t limit) {
    skip_ws();
    const std::size_t start = pos_;
    std::uint64_t count = 1;
    std::string_view tok = name_token();
    if (!tok.empty()) {
      const std::size_t after = pos_;
      skip_ws();
      if (pos_ < text_.size() && text_[pos_] == '*') {
        if (!std::all_of(tok.begin(), tok.end(), [](char c) { return c >= '0' && c <= '9'; })) {
          return error(start, "repeat count '" + std::string(tok) + "' is not a whole number");
        }
        count = 0;
        for (char c : tok) {
          count = count * 10 + static_cast<std::uint64_t>(c - '0');
          if (count > kMaxRepeat) break;
        }
        if (count < 1 || count > kMaxRepeat) {
          return error(start, "repeat count " + std::string(tok) + " is outside 1..100000");
        }
        ++pos_;
        skip_ws();
        tok = name_token();
      } else {
        pos_ = after;
      }
    }
    const std::size_t room = limit - out.size();
    const std::size_t unit_start = pos_ - tok.size();
    std::vector<std::uint32_t> unit;
    if (!tok.empty()) {
      const auto it = names_.find(tok);
      if (it == names_.end()) return error(unit_start, "unknown kernel '" + std::string(tok) + "'");
      unit.push_back(it->second);
    } else if (pos_ < text_.size() && text_[pos_] == '(') {
      if (depth + 1 > kMaxRequestNesting) return error(pos_, "parentheses nested more than 64 deep");
      const std::size_t open = pos_;
      ++pos_;
      LITHOS_RETURN_IF_ERROR(seq(unit, depth + 1, static_cast<std::size_t>(room / count)));
      skip_ws();
      if (pos_ >= text_.size()) {
        return error(pos_, "missing ')' for the '(' at character " + std::to_string(open + 1));
      }
      if (text_[pos_] != ')') return error(pos_, "expected ',' or ')', found " + found());
      ++pos_;
    } else {
      return error(pos_, "expected a kernel name or '(', found " + found());
    }
    if (static_cast<std::uint64_t>(unit.size()) * count > room) {
      return error(start, "the request expands to more than " + std::to_string(kMaxRequestKernels) + " kernels");
    }
    for (std::uint64_t i = 0; i < count; ++i) out.insert(out.end(), unit.begin(), unit.end());
    return Status::ok();
  }

  std::string_view text_;
  std::size_t pos_ = 0;
  std::unordered_map<std::string_view, std::uint32_t> names_;
};

// ---------------------------------------------------------------- traces

// Adds kernel classes for trace lines, one per distinct shape.
class TraceClasses {
 public:
  explicit TraceClasses(std::vector<KernelClass>& kernels) : kernels_(kernels) {
    for (const KernelClass& k : kernels_) used_names_.insert(k.name);
  }

  // `serial` empty: not given on the line (the class default applies).
  std::uint32_t add(const KernelClass& shape, std::optional<double> serial, double duration_us) {
    const Key key{shape.function,  shape.grid.x,    shape.grid.y,      shape.grid.z,       shape.block.x,
                  shape.block.y,   shape.block.z,   shape.regs,        shape.smem,         shape.cluster.x,
                  shape.cluster.y, shape.cluster.z, shape.cooperative, serial.has_value(), serial.value_or(0.0)};
    auto [it, inserted] = index_.try_emplace(key, 0u);
    if (inserted) {
      KernelClass k = shape;
      k.name = free_name(shape.function);
      k.serial_us = serial.value_or(-1.0);  // resolved in finish()
      it->second = static_cast<std::uint32_t>(kernels_.size());
      kernels_.push_back(std::move(k));
      stats_.emplace_back();
    }
    Stat& s = stats_[it->second - first_];
    s.sum += duration_us;
    s.count += 1;
    return it->second;
  }

  void set_first(std::size_t first) { first_ = first; }

  // Class durations: the mean of their recorded launches; default serial
  // times: min(2, mean / 2).
  void finish() {
    for (std::size_t i = 0; i < stats_.size(); ++i) {
      KernelClass& k = kernels_[first_ + i];
      const double mean = stats_[i].count > 0 ? stats_[i].sum / static_cast<double>(stats_[i].count) : 0.0;
      k.duration_us = mean;
      k.cv = 0.0;
      if (k.serial_us < 0.0) k.serial_us = std::min(kDefaultSerialUs, mean / 2.0);
    }
  }

 private:
  using Key =
      std::tuple<std::string, std::uint32_t, std::uint32_t, std::uint32_t, std::uint32_t, std::uint32_t, std::uint32_t,
                 std::uint32_t, std::uint32_t, std::uint32_t, std::uint32_t, std::uint32_t, bool, bool, double>;
  struct Stat {
    double sum = 0.0;
    std::uint64_t count = 0;
  };

  std::string free_name(const std::string& base) {
    std::string name = base;
    for (int n = 2; used_names_.count(name) > 0; ++n) name = base + "#" + std::to_string(n);
    used_names_.insert(name);
    return name;
  }

  std::vector<KernelClass>& kernels_;
  std::size_t first_ = 0;
  std::set<std::string> used_names_;
  std::map<Key, std::uint32_t> index_;
  std::vector<Stat> stats_;
};

class TraceReader {
 public:
  TraceReader(std::string path_text, const sched::DeviceShape& dev, TraceClasses& classes)
      : path_(std::move(path_text)), dev_(dev), classes_(classes) {}

  Result<std::vector<std::vector<TraceKernel>>> read(std::istream& in) {
    std::string raw;
    std::size_t line_no = 0;
    while (std::getline(in, raw)) {
      ++line_no;
      const std::string_view line = trim(raw);
      if (line.empty() || line.front() == '#') continue;
      LITHOS_RETURN_IF_ERROR(read_line(line, line_no));
    }
    if (in.bad()) return Status::unavailable(path_ + ": read error");
    return std::move(requests_);
  }

 private:
  Status error(std::size_t line, std::string_view what) const {
    return Status::invalid_argument(path_ + ":" + std::to_string(line) + ": " + std::string(what));
  }

  static std::string field_must(std::string_view key, std::string_view what) {
    return "field " + squote(key) + " must be " + std::string(what);
  }

  Result<std::uint32_t> uint_field(const nlohmann::json& v, std::string_view key, std::int64_t lo, std::int64_t hi,
                                   std::size_t line) const {
    const std::string range = "an integer in " + std::to_string(lo) + ".." + std::to_string(hi);
    if (!v.is_number_integer()) return error(line, field_must(key, range + ", not " + json_type_name(v)));
    if (v.is_number_unsigned()) {
      const auto u = v.get<std::uint64_t>();
      if (u > static_cast<std::uint64_t>(hi) || static_cast<std::int64_t>(u) < lo)
        return error(line, field_must(key, range));
      return static_cast<std::uint32_t>(u);
    }
    const auto s = v.get<std::int64_t>();
    if (s < lo || s > hi) return error(line, field_must(key, range));
    return static_cast<std::uint32_t>(s);
  }

  Result<double> number_field(const nlohmann::json& v, std::string_view key, const NumRange& r,
                              std::size_t line) const {
    if (!v.is_number()) return error(line, field_must(key, std::string("a number, not ") + json_type_name(v)));
    const double d = v.get<double>();
    if (std::string why = check_range(d, r); !why.empty()) return error(line, "field " + squote(key) + " " + why);
    return d;
  }

  Result<sched::Dim3> dim3_field(const nlohmann::json& v, std::string_view key, const Dim3Limits& lim,
                                 std::size_t line) const {
    if (!v.is_array() || v.empty() || v.size() > 3) {
      return error(line, field_must(key, "an array of 1 to 3 integers"));
    }
    const std::uint32_t limits[3] = {lim.x, lim.y, lim.z};
    sched::Dim3 d{1, 1, 1};
    for (std::size_t i = 0; i < v.size(); ++i) {
      auto r = uint_field(v[i], std::string(key) + "[" + std::to_string(i) + "]", 1, limits[i], line);
      if (!r) return r.status();
      axis(d, i) = *r;
    }
    return d;
  }

  Status read_line(std::string_view line, std::size_t line_no) {
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      return error(line_no, std::string("invalid JSON: ") + e.what());
    }
    if (!j.is_object()) return error(line_no, std::string("expected a JSON object, not ") + json_type_name(j));
    static constexpr std::string_view kAllowed[] = {"request", "kernel",    "duration_us", "blocks",
                                                    "grid",    "threads",   "block",       "regs",
                                                    "smem",    "serial_us", "cluster",     "cooperative"};
    for (const auto& [k, v] : j.items()) {
      (void)v;
      if (std::find(std::begin(kAllowed), std::end(kAllowed), k) == std::end(kAllowed)) {
        return error(line_no, "unknown field " + squote(k));
      }
    }
    for (const char* req : {"request", "kernel", "duration_us"}) {
      if (!j.contains(req)) return error(line_no, "missing required field " + squote(req));
    }

    // Request id: an integer or a string.
    const nlohmann::json& rq = j["request"];
    std::string id;
    std::string id_text;
    if (rq.is_number_integer()) {
      id = "i" + rq.dump();
      id_text = "request " + rq.dump();
    } else if (rq.is_string()) {
      id = "s" + rq.get<std::string>();
      id_text = "request " + rq.dump();
    } else {
      return error(line_no, field_must("request", std::string("an integer or a string, not ") + json_type_name(rq)));
    }

    KernelClass k;
    const nlohmann::json& kn = j["kernel"];
    if (!kn.is_string() || kn.get<std::string>().empty()) {
      return error(line_no, field_must("kernel", "a non-empty string"));
    }
    k.function = kn.get<std::string>();
    auto dur = number_field(j["duration_us"], "duration_us", positive(kMaxUs), line_no);
    if (!dur) return dur.status();

    const bool has_blocks = j.contains("blocks");
    const bool has_grid = j.contains("grid");
    if (has_blocks == has_grid) {
      return error(line_no, has_blocks ? "give either 'blocks' or 'grid', not both"
                                       : "missing required field 'blocks' (or 'grid')");
    }
    if (has_blocks) {
      auto b = uint_field(j["blocks"], "blocks", 1, kMaxGridX, line_no);
      if (!b) return b.status();
      k.grid = {*b, 1, 1};
    } else {
      auto g = dim3_field(j["grid"], "grid", kGridLimits, line_no);
      if (!g) return g.status();
      k.grid = *g;
    }
    if (j.contains("threads") && j.contains("block"))
      return error(line_no, "give either 'threads' or 'block', not both");
    if (j.contains("threads")) {
      auto t = uint_field(j["threads"], "threads", 1, kMaxThreads, line_no);
      if (!t) return t.status();
      k.block = {*t, 1, 1};
    } else if (j.contains("block")) {
      auto b = dim3_field(j["block"], "block", kBlockLimits, line_no);
      if (!b) return b.status();
      k.block = *b;
      if (std::string why = check_block(k.block, "block"); !why.empty()) return error(line_no, why);
    }
    if (j.contains("regs")) {
      auto r = uint_field(j["regs"], "regs", 1, kMaxRegs, line_no);
      if (!r) return r.status();
      k.regs = *r;
    }
    if (j.contains("smem")) {
      auto s = uint_field(j["smem"], "smem", 0, kMaxSmem, line_no);
      if (!s) return s.status();
      k.smem = *s;
    }
    std::optional<double> serial;
    if (j.contains("serial_us")) {
      auto s = number_field(j["serial_us"], "serial_us", non_negative(kMaxUs), line_no);
      if (!s) return s.status();
      if (*s >= *dur) {
        return error(line_no, "field 'serial_us' must be less than duration_us (" + num_text(*dur) + ")");
      }
      serial = *s;
    }
    if (j.contains("cooperative")) {
      const nlohmann::json& c = j["cooperative"];
      if (!c.is_boolean())
        return error(line_no, field_must("cooperative", std::string("a boolean, not ") + json_type_name(c)));
      k.cooperative = c.get<bool>();
    }
    if (j.contains("cluster")) {
      auto c = dim3_field(j["cluster"], "cluster", kClusterLimits, line_no);
      if (!c) return c.status();
      k.cluster = *c;
      if (std::string why = check_cluster(k.cluster, k.grid); !why.empty()) return error(line_no, why);
    }
    if (std::string why = check_fits(dev_, k); !why.empty()) return error(line_no, why);

    // Group consecutive lines of one request.
    if (requests_.empty() || id != current_) {
      if (!seen_.insert(id).second) {
        return error(line_no,
                     id_text + " appears again after other requests started (first request lines must be consecutive)");
      }
      current_ = id;
      requests_.emplace_back();
    }
    TraceKernel tk;
    tk.kernel_class = classes_.add(k, serial, *dur);
    tk.duration_us = *dur;
    requests_.back().push_back(tk);
    return Status::ok();
  }

  std::string path_;
  const sched::DeviceShape& dev_;
  TraceClasses& classes_;
  std::vector<std::vector<TraceKernel>> requests_;
  std::set<std::string> seen_;
  std::string current_;
};

// ---------------------------------------------------------------- sections

Status parse_scenario_table(const Doc& doc, const toml::table& root, Scenario& sc) {
  auto sec = section(doc, root, "scenario");
  if (!sec) return sec.status();
  if (*sec == nullptr) return doc.error(root.source(), "top level", "missing required table [scenario]");
  Fields f(doc, **sec, "scenario");
  LITHOS_RETURN_IF_ERROR(f.check_keys({"name", "description", "duration_s", "warmup_s", "slo_factor"}));
  LITHOS_RETURN_IF_ERROR(f.require("name"));
  LITHOS_RETURN_IF_ERROR(f.string("name", sc.name));
  LITHOS_RETURN_IF_ERROR(f.string("description", sc.description, /*allow_empty=*/true));
  LITHOS_RETURN_IF_ERROR(f.number("duration_s", sc.duration_s, positive(kMaxSeconds)));
  LITHOS_RETURN_IF_ERROR(f.number("warmup_s", sc.warmup_s, non_negative(kMaxSeconds)));
  LITHOS_RETURN_IF_ERROR(f.number("slo_factor", sc.slo_factor, positive(kMaxFactor)));
  if (sc.warmup_s >= sc.duration_s) {
    if (f.has("warmup_s")) {
      return f.error("warmup_s", "must be less than duration_s (" + num_text(sc.duration_s) + ")");
    }
    return f.error("duration_s", "must be more than warmup_s (default " + num_text(sc.warmup_s) + "); set warmup_s");
  }
  return Status::ok();
}

Status parse_gpu_table(const Doc& doc, const toml::table& root, Scenario& sc) {
  auto sec = section(doc, root, "gpu");
  if (!sec) return sec.status();
  if (*sec != nullptr) {
    Fields f(doc, **sec, "gpu");
    LITHOS_RETURN_IF_ERROR(
        f.check_keys({"tpcs", "launch_latency_us", "stream_gap_us", "per_atom_cost_us", "priorities"}));
    LITHOS_RETURN_IF_ERROR(f.integer("tpcs", sc.gpu.tpcs, 1, kMaxTpcs));
    LITHOS_RETURN_IF_ERROR(f.number("launch_latency_us", sc.gpu.launch_latency_us, non_negative(kMaxUs)));
    LITHOS_RETURN_IF_ERROR(f.number("stream_gap_us", sc.gpu.stream_gap_us, non_negative(kMaxUs)));
    LITHOS_RETURN_IF_ERROR(f.number("per_atom_cost_us", sc.gpu.per_atom_cost_us, non_negative(kMaxUs)));
    LITHOS_RETURN_IF_ERROR(f.boolean("priorities", sc.gpu.priorities));
  }
  sc.engine.device.tpcs = sc.gpu.tpcs;
  sc.engine.atoms.per_atom_cost = us(sc.gpu.per_atom_cost_us);
  return Status::ok();
}

// Every key is a row of the Engine's and the policies' settings table
// (sched/policies/settings_table.hpp): its type, unit, range and field come
// from there; what a scenario leaves out keeps the core's default.
Status parse_scheduler_table(const Doc& doc, const toml::table& root, Scenario& sc) {
  auto sec = section(doc, root, "scheduler");
  if (!sec) return sec.status();
  if (*sec == nullptr) return Status::ok();
  Fields f(doc, **sec, "scheduler");
  const toml::key* bad = nullptr;  // the first key of no row, in file order
  for (auto&& [k, v] : **sec) {
    (void)v;
    if (sched::find_scheduler_setting(k.str()) != nullptr) continue;
    if (bad == nullptr || k.source().begin < bad->source().begin) bad = &k;
  }
  if (bad != nullptr) return doc.error(bad->source(), f.where(), "unknown field " + squote(bad->str()));
  sched::SchedulerTarget target{&sc.engine, &sc.policies, &sc.immediate_launches};
  for (const sched::SchedSetting& s : sched::scheduler_settings()) {
    if (!f.has(s.key)) continue;
    switch (s.type) {
      case sched::SchedSettingType::kBool: {
        bool b = false;
        LITHOS_RETURN_IF_ERROR(f.boolean(s.key, b));
        s.set(target, b ? 1.0 : 0.0);
        break;
      }
      case sched::SchedSettingType::kInteger: {
        std::int64_t n = 0;
        LITHOS_RETURN_IF_ERROR(f.integer(s.key, n, static_cast<std::int64_t>(s.lo), static_cast<std::int64_t>(s.hi)));
        s.set(target, static_cast<double>(n));
        break;
      }
      case sched::SchedSettingType::kNumber: {
        const std::string text(s.range_text);
        const NumRange r{s.lo, s.lo_open, s.hi, s.hi_open, text.c_str(), s.range_text_has_hi};
        double x = 0.0;
        LITHOS_RETURN_IF_ERROR(f.number(s.key, x, r));
        s.set(target, x);
        break;
      }
    }
  }
  return Status::ok();
}

Status parse_kernel_tables(const Doc& doc, const toml::table& root, Scenario& sc) {
  auto tables = table_array(doc, root, "kernel");
  if (!tables) return tables.status();
  std::map<std::string, std::uint32_t, std::less<>> lines;  // name -> line of its table
  for (std::size_t i = 0; i < tables->size(); ++i) {
    const toml::table& t = *(*tables)[i];
    Fields f(doc, t, element_where(t, "kernel", i));
    LITHOS_RETURN_IF_ERROR(f.check_keys({"name", "function", "duration_us", "cv", "spread", "blocks", "grid", "threads",
                                         "block", "regs", "smem", "serial_us", "cooperative", "cluster", "mem_share"}));
    KernelClass k;
    LITHOS_RETURN_IF_ERROR(f.require("name"));
    LITHOS_RETURN_IF_ERROR(f.string("name", k.name));
    if (!is_valid_name(k.name)) {
      return f.error("name", "must consist of letters, digits, '_', '.' and '-', not " + squote(k.name));
    }
    if (const auto it = lines.find(k.name); it != lines.end()) {
      return f.error("name", "is already used by the kernel at line " + std::to_string(it->second));
    }
    lines.emplace(k.name, t.source().begin.line);
    k.function = k.name;
    LITHOS_RETURN_IF_ERROR(f.string("function", k.function));
    LITHOS_RETURN_IF_ERROR(f.require("duration_us"));
    LITHOS_RETURN_IF_ERROR(f.number("duration_us", k.duration_us, positive(kMaxUs)));
    LITHOS_RETURN_IF_ERROR(f.number("cv", k.cv, non_negative(kMaxFactor)));
    LITHOS_RETURN_IF_ERROR(f.number("spread", k.spread, non_negative(kMaxFactor)));

    if (f.has("blocks") && f.has("grid")) return f.error("grid", "cannot be given together with 'blocks'");
    if (!f.has("blocks") && !f.has("grid")) return f.missing("blocks", " (or 'grid')");
    if (f.has("blocks")) {
      std::uint32_t b = 1;
      LITHOS_RETURN_IF_ERROR(f.integer("blocks", b, 1, kMaxGridX));
      k.grid = {b, 1, 1};
    }
    LITHOS_RETURN_IF_ERROR(f.dim3("grid", k.grid, kGridLimits));

    if (f.has("threads") && f.has("block")) return f.error("block", "cannot be given together with 'threads'");
    if (f.has("threads")) {
      std::uint32_t n = 1;
      LITHOS_RETURN_IF_ERROR(f.integer("threads", n, 1, kMaxThreads));
      k.block = {n, 1, 1};
    }
    LITHOS_RETURN_IF_ERROR(f.dim3("block", k.block, kBlockLimits));
    if (std::string why = check_block(k.block, "block"); !why.empty()) {
      return doc.error(f.key_source("block"), f.where(), why);
    }
    LITHOS_RETURN_IF_ERROR(f.integer("regs", k.regs, 1, kMaxRegs));
    LITHOS_RETURN_IF_ERROR(f.integer("smem", k.smem, 0, kMaxSmem));
    k.serial_us = std::min(kDefaultSerialUs, k.duration_us / 2.0);
    LITHOS_RETURN_IF_ERROR(f.number("serial_us", k.serial_us, non_negative(kMaxUs)));
    if (k.serial_us >= k.duration_us) {
      return f.error("serial_us", "must be less than duration_us (" + num_text(k.duration_us) + ")");
    }
    LITHOS_RETURN_IF_ERROR(f.boolean("cooperative", k.cooperative));
    LITHOS_RETURN_IF_ERROR(f.number("mem_share", k.mem_share, kShare));
    LITHOS_RETURN_IF_ERROR(f.dim3("cluster", k.cluster, kClusterLimits));
    if (f.has("cluster")) {
      if (std::string why = check_cluster(k.cluster, k.grid); !why.empty()) {
        return doc.error(f.key_source("cluster"), f.where(), why);
      }
    }
    if (std::string why = check_fits(sc.engine.device, k); !why.empty()) {
      return doc.error(t.source(), f.where(), why);
    }
    sc.kernels.push_back(std::move(k));
  }
  return Status::ok();
}

// What pass 2 and 3 need to know about a tenant's request or trace.
struct TenantSource {
  const toml::table* table = nullptr;
  std::string where;
  std::string request;
  std::optional<std::string> trace;
};

Status parse_tenant_tables(const Doc& doc, const toml::table& root, Scenario& sc, std::vector<TenantSource>& sources) {
  auto tables = table_array(doc, root, "tenant");
  if (!tables) return tables.status();
  if (tables->empty()) {
    return doc.error(root.source(), "top level", "missing [[tenant]]: a scenario needs at least one tenant");
  }
  std::map<std::string, std::uint32_t, std::less<>> lines;
  for (std::size_t i = 0; i < tables->size(); ++i) {
    const toml::table& t = *(*tables)[i];
    Fields f(doc, t, element_where(t, "tenant", i));
    LITHOS_RETURN_IF_ERROR(f.check_keys({"name", "class", "quota", "static_tpcs", "slo_ms", "pauses_best_effort",
                                         "arrival", "rate_rps", "load", "think_us", "request", "trace", "trace_cv",
                                         "unit", "mps_slowdown", "rightsize", "rightsize_slip"}));
    TenantConfig tc;
    LITHOS_RETURN_IF_ERROR(f.require("name"));
    LITHOS_RETURN_IF_ERROR(f.string("name", tc.name));
    if (const auto it = lines.find(tc.name); it != lines.end()) {
      return f.error("name", "is already used by the tenant at line " + std::to_string(it->second));
    }
    lines.emplace(tc.name, t.source().begin.line);

    LITHOS_RETURN_IF_ERROR(f.require("class"));
    std::string cls;
    LITHOS_RETURN_IF_ERROR(f.string("class", cls, true));
    if (cls == "high") {
      tc.priority = sched::PriorityClass::kHigh;
    } else if (cls == "best-effort") {
      tc.priority = sched::PriorityClass::kBestEffort;
    } else {
      return f.error("class", "must be \"high\" or \"best-effort\", not \"" + cls + "\"");
    }
    LITHOS_RETURN_IF_ERROR(f.integer("quota", tc.quota, 0, sc.gpu.tpcs));
    if (tc.priority == sched::PriorityClass::kBestEffort && tc.quota != 0) {
      return f.error("quota", "must be 0 for a best-effort tenant");
    }
    if (f.has("static_tpcs")) {
      int n = 1;
      LITHOS_RETURN_IF_ERROR(f.integer("static_tpcs", n, 1, sc.gpu.tpcs));
      tc.static_tpcs = n;
    }
    LITHOS_RETURN_IF_ERROR(f.number("slo_ms", tc.slo_ms, positive(kMaxMs)));
    // Unset: "auto" for a high-priority tenant, as in lithosd's configuration.
    if (tc.priority == sched::PriorityClass::kHigh) tc.pauses_best_effort = sched::BestEffortPause::kAuto;
    if (const toml::node* n = f.node("pauses_best_effort")) {
      const auto mode = sched::best_effort_pause_of(n->value_exact<bool>(), n->value_exact<std::string_view>());
      if (!mode) return f.error("pauses_best_effort", sched::kBestEffortPauseRule);
      tc.pauses_best_effort = *mode;
    }
    if (tc.pauses_best_effort != sched::BestEffortPause::kNever && tc.priority != sched::PriorityClass::kHigh) {
      return f.error("pauses_best_effort", "is for a high-priority tenant");
    }
    if (f.has("rightsize")) {
      bool on = false;
      LITHOS_RETURN_IF_ERROR(f.boolean("rightsize", on));
      tc.rightsize = on;
    }
    LITHOS_RETURN_IF_ERROR(f.number("rightsize_slip", tc.rightsize_slip, {1.0, false, 1e3, false, "a number >= 1"}));

    LITHOS_RETURN_IF_ERROR(f.require("arrival"));
    std::string arrival;
    LITHOS_RETURN_IF_ERROR(f.string("arrival", arrival, true));
    if (arrival == "poisson") {
      tc.arrival = Arrival::kPoisson;
      if (f.has("think_us")) return f.error("think_us", "is only for arrival = \"closed\"");
      if (f.has("rate_rps") && f.has("load")) {
        const bool load_later = f.key_source("load").begin > f.key_source("rate_rps").begin;
        return f.error(
            load_later ? "load" : "rate_rps",
            "cannot be given together with '" + std::string(load_later ? "rate_rps" : "load") + "': give one of them");
      }
      if (!f.has("rate_rps") && !f.has("load")) {
        return f.missing("rate_rps", " (or 'load'): arrival = \"poisson\" needs one of them");
      }
      LITHOS_RETURN_IF_ERROR(f.number("rate_rps", tc.rate_rps, positive(kMaxRate)));
      LITHOS_RETURN_IF_ERROR(f.number("load", tc.load, kFraction));
    } else if (arrival == "closed") {
      tc.arrival = Arrival::kClosed;
      for (const char* key : {"rate_rps", "load"}) {
        if (f.has(key)) return f.error(key, "is only for arrival = \"poisson\"");
      }
      LITHOS_RETURN_IF_ERROR(f.number("think_us", tc.think_us, non_negative(kMaxUs)));
    } else {
      return f.error("arrival", "must be \"poisson\" or \"closed\", not \"" + arrival + "\"");
    }

    TenantSource src;
    src.table = &t;
    src.where = f.where();
    if (f.has("request") && f.has("trace")) {
      const bool trace_later = f.key_source("trace").begin > f.key_source("request").begin;
      return f.error(
          trace_later ? "trace" : "request",
          "cannot be given together with '" + std::string(trace_later ? "request" : "trace") + "': give one of them");
    }
    if (!f.has("request") && !f.has("trace")) return f.missing("request", " (or 'trace')");
    if (f.has("request")) {
      LITHOS_RETURN_IF_ERROR(f.string("request", src.request, true));
      if (f.has("trace_cv")) return f.error("trace_cv", "is only for tenants with a 'trace'");
    } else {
      std::string path;
      LITHOS_RETURN_IF_ERROR(f.string("trace", path));
      src.trace = path;
      LITHOS_RETURN_IF_ERROR(f.number("trace_cv", tc.trace_cv, non_negative(kMaxFactor)));
    }
    LITHOS_RETURN_IF_ERROR(f.string("unit", tc.unit));
    LITHOS_RETURN_IF_ERROR(f.number("mps_slowdown", tc.mps_slowdown, kMpsSlowdown));
    sc.tenants.push_back(std::move(tc));
    sources.push_back(std::move(src));
  }
  return Status::ok();
}

Status resolve_requests(const Doc& doc, Scenario& sc, const std::vector<TenantSource>& sources) {
  for (std::size_t i = 0; i < sources.size(); ++i) {
    const TenantSource& src = sources[i];
    if (src.trace) continue;
    Fields f(doc, *src.table, src.where);
    if (sc.kernels.empty()) return f.error("request", "names kernels, but the scenario has no [[kernel]] tables");
    auto seq = parse_request(src.request, sc.kernels);
    if (!seq) return f.error("request", "is invalid: " + seq.status().message());
    sc.tenants[i].request = std::move(seq).value();
  }
  return Status::ok();
}

Status load_traces(const Doc& doc, Scenario& sc, const std::vector<TenantSource>& sources, std::string_view base_dir,
                   bool builtin) {
  TraceClasses classes(sc.kernels);
  classes.set_first(sc.kernels.size());
  for (std::size_t i = 0; i < sources.size(); ++i) {
    const TenantSource& src = sources[i];
    if (!src.trace) continue;
    Fields f(doc, *src.table, src.where);
    if (builtin) {
      return f.error("trace",
                     "cannot be used in a built-in scenario (trace files are not embedded); copy the "
                     "scenario and its trace into files and give the path of the .toml file");
    }
    std::filesystem::path path(*src.trace);
    if (path.is_relative() && !base_dir.empty()) path = std::filesystem::path(base_dir) / path;
    path = path.lexically_normal();
    std::ifstream in(path, std::ios::binary);
    std::error_code ec;
    if (!in || std::filesystem::is_directory(path, ec)) {
      return f.error("trace", "names a file that cannot be read: " + squote(path.string()));
    }
    TraceReader reader(path.string(), sc.engine.device, classes);
    auto requests = reader.read(in);
    if (!requests) return requests.status();
    if (requests->empty()) return f.error("trace", "names a file with no kernel launches: " + squote(path.string()));
    sc.tenants[i].trace_requests = std::move(requests).value();
  }
  classes.finish();
  return Status::ok();
}

Result<Scenario> parse_impl(std::string_view text, std::string_view source, std::string_view base_dir, bool builtin) {
  const Doc doc{std::string(source)};
  auto parsed = tomlio::parse(text, doc.source());
  if (!parsed) return parsed.status();
  const toml::table& root = *parsed;
  Scenario sc;
  sc.source = std::string(source);
  {
    const toml::key* bad = tomlio::first_unknown_key(root, {"scenario", "gpu", "scheduler", "kernel", "tenant"});
    if (bad != nullptr) {
      return doc.error(bad->source(), "top level",
                       "unknown table or key " + squote(bad->str()) +
                           " (expected [scenario], [gpu], [scheduler], [[kernel]] and [[tenant]])");
    }
  }
  LITHOS_RETURN_IF_ERROR(parse_scenario_table(doc, root, sc));
  LITHOS_RETURN_IF_ERROR(parse_gpu_table(doc, root, sc));
  LITHOS_RETURN_IF_ERROR(parse_scheduler_table(doc, root, sc));
  LITHOS_RETURN_IF_ERROR(parse_kernel_tables(doc, root, sc));
  std::vector<TenantSource> sources;
  LITHOS_RETURN_IF_ERROR(parse_tenant_tables(doc, root, sc, sources));
  LITHOS_RETURN_IF_ERROR(resolve_requests(doc, sc, sources));
  LITHOS_RETURN_IF_ERROR(load_traces(doc, sc, sources, base_dir, builtin));
  return sc;
}

std::optional<std::size_t> find_builtin(std::string_view name) {
  for (std::size_t i = 0; i < detail::embedded_scenario_count(); ++i) {
    if (detail::embedded_scenario_name(i) == name) return i;
  }
  return std::nullopt;
}

}  // namespace

Result<Scenario> parse_scenario(std::string_view toml_text, std::string_view source, std::string_view base_dir) {
  try {
    return parse_impl(toml_text, source, base_dir, /*builtin=*/false);
  } catch (const std::exception& e) {
    return Status::internal(std::string(source) + ": unexpected error while reading the scenario: " + e.what());
  }
}

Result<Scenario> load_scenario(std::string_view name_or_path) {
  try {
    if (const auto i = find_builtin(name_or_path)) {
      return parse_impl(detail::embedded_scenario_text(*i), "built-in:" + std::string(name_or_path), "",
                        /*builtin=*/true);
    }
    const std::filesystem::path path{std::string(name_or_path)};
    std::error_code ec;
    if (!name_or_path.empty() && std::filesystem::is_regular_file(path, ec)) {
      std::ifstream in(path, std::ios::binary);
      if (!in) return Status::not_found("cannot read scenario file " + squote(name_or_path));
      std::ostringstream text;
      text << in.rdbuf();
      if (in.bad()) return Status::not_found("cannot read scenario file " + squote(name_or_path));
      return parse_impl(text.str(), name_or_path, path.parent_path().string(), /*builtin=*/false);
    }
    const std::vector<std::string> names = builtin_scenario_names();
    return Status::not_found("unknown scenario " + squote(name_or_path) +
                             "; built-in scenarios: " + (names.empty() ? std::string("(none)") : join(names, ", ")) +
                             "; or give the path of a .toml file");
  } catch (const std::exception& e) {
    return Status::internal("loading scenario " + squote(name_or_path) + ": unexpected error: " + e.what());
  }
}

std::vector<std::string> builtin_scenario_names() {
  std::vector<std::string> names;
  for (std::size_t i = 0; i < detail::embedded_scenario_count(); ++i) {
    names.emplace_back(detail::embedded_scenario_name(i));
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::string_view builtin_scenario_text(std::string_view name) {
  const auto i = find_builtin(name);
  return i ? detail::embedded_scenario_text(*i) : std::string_view();
}

Result<std::vector<std::uint32_t>> parse_request(std::string_view text, const std::vector<KernelClass>& kernels) {
  try {
    return RequestParser(text, kernels).parse();
  } catch (const std::exception& e) {
    return Status::internal(std::string("parsing a request: unexpected error: ") + e.what());
  }
}

}  // namespace lithos::sim
