#include "daemon/trace.hpp"

#include <stdio.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <utility>

#include "daemon/settings.hpp"
#include "ipc/safe_file.hpp"

namespace lithos::daemon {

namespace {

using json = nlohmann::json;
using Kind = sched::EngineEvent::Kind;

constexpr std::pair<Kind, const char*> kKinds[] = {
    {Kind::kAddTenant, "add_tenant"},
    {Kind::kAddQueue, "add_queue"},
    {Kind::kSubmit, "submit"},
    {Kind::kSubmitRunning, "submit_running"},
    {Kind::kDispatch, "dispatch"},
    {Kind::kAtomFinished, "atom_finished"},
    {Kind::kSync, "sync"},
    {Kind::kCloseQueue, "close_queue"},
    {Kind::kHpSample, "hp_sample"},
};

std::int64_t ns(Time t) { return since_start(t).count(); }
Time at(std::int64_t v) { return time_at(Duration(v)); }

json dim(const sched::Dim3& d) { return json::array({d.x, d.y, d.z}); }

json launch_json(const sched::LaunchDesc& l) {
  char kernel[19];
  std::snprintf(kernel, sizeof kernel, "%016llx", static_cast<unsigned long long>(l.kernel));
  json j = {{"kernel", kernel},          {"grid", dim(l.grid)},          {"block", dim(l.block)},
            {"regs", l.regs_per_thread}, {"smem", l.smem_per_block},     {"cluster", dim(l.cluster)},
            {"coop", l.cooperative},     {"indivisible", l.indivisible}, {"wave_blocks", l.wave_blocks}};
  j["hint_ns"] = l.duration_hint ? json(l.duration_hint->count()) : json(nullptr);
  if (!l.pinned.empty()) j["pinned"] = l.pinned.to_string();
  if (l.whole_device) j["whole_device"] = true;
  return j;
}

json atom_json(const sched::AtomDispatch& d) {
  json j = {{"atom", d.atom},
            {"launch", d.launch},
            {"queue", d.queue},
            {"tenant", d.tenant},
            {"lo", d.blocks.lo},
            {"hi", d.blocks.hi},
            {"index", d.index},
            {"last", d.last},
            {"split", d.split},
            {"tpcs", d.tpcs.to_string()},
            {"prio", static_cast<int>(d.priority)}};
  j["pred_ns"] = d.predicted ? json(d.predicted->count()) : json(nullptr);
  return j;
}

// Reading: every accessor throws std::runtime_error naming the field.
struct Reader {
  const json& j;
  const json& at(const char* k) const {
    const auto it = j.find(k);
    if (it == j.end()) throw std::runtime_error(std::string("missing '") + k + "'");
    return *it;
  }
  template <class T>
  T num(const char* k) const {
    const json& v = at(k);
    if (!v.is_number_integer()) throw std::runtime_error(std::string("'") + k + "' must be an integer");
    return v.get<T>();
  }
  bool flag(const char* k) const {
    const json& v = at(k);
    if (!v.is_boolean()) throw std::runtime_error(std::string("'") + k + "' must be true or false");
    return v.get<bool>();
  }
  std::string str(const char* k) const {
    const json& v = at(k);
    if (!v.is_string()) throw std::runtime_error(std::string("'") + k + "' must be a string");
    return v.get<std::string>();
  }
  sched::Dim3 dim3(const char* k) const {
    const json& v = at(k);
    if (!v.is_array() || v.size() != 3 || !v[0].is_number_unsigned() || !v[1].is_number_unsigned() ||
        !v[2].is_number_unsigned()) {
      throw std::runtime_error(std::string("'") + k + "' must be [x, y, z]");
    }
    return sched::Dim3{v[0].get<std::uint32_t>(), v[1].get<std::uint32_t>(), v[2].get<std::uint32_t>()};
  }
  sched::TpcSet tpcs(const char* k) const {
    auto s = sched::TpcSet::parse(str(k));
    if (!s) throw std::runtime_error(std::string("'") + k + "': " + s.status().message());
    return *s;
  }
  std::optional<Duration> opt_ns(const char* k) const {
    const json& v = at(k);
    if (v.is_null()) return std::nullopt;
    if (!v.is_number_integer()) throw std::runtime_error(std::string("'") + k + "' must be an integer or null");
    return Duration(v.get<std::int64_t>());
  }
};

sched::LaunchDesc read_launch(const Reader& r) {
  sched::LaunchDesc l;
  const std::string k = r.str("kernel");
  char* end = nullptr;
  errno = 0;
  l.kernel = std::strtoull(k.c_str(), &end, 16);
  if (k.empty() || *end != '\0' || errno != 0) throw std::runtime_error("'kernel' must be hexadecimal");
  l.grid = r.dim3("grid");
  l.block = r.dim3("block");
  l.regs_per_thread = r.num<std::uint32_t>("regs");
  l.smem_per_block = r.num<std::uint32_t>("smem");
  l.cluster = r.dim3("cluster");
  l.cooperative = r.flag("coop");
  l.indivisible = r.flag("indivisible");
  l.wave_blocks = r.num<std::uint64_t>("wave_blocks");
  l.duration_hint = r.opt_ns("hint_ns");
  if (r.j.contains("pinned")) l.pinned = r.tpcs("pinned");  // absent: none (and in traces from before it existed)
  if (r.j.contains("whole_device")) l.whole_device = r.flag("whole_device");
  return l;
}

sched::AtomDispatch read_atom(const json& j) {
  if (!j.is_object()) throw std::runtime_error("an atom must be an object");
  const Reader r{j};
  sched::AtomDispatch d;
  d.atom = r.num<sched::AtomId>("atom");
  d.launch = r.num<sched::LaunchId>("launch");
  d.queue = r.num<sched::QueueId>("queue");
  d.tenant = r.num<sched::TenantId>("tenant");
  d.blocks.lo = r.num<std::uint64_t>("lo");
  d.blocks.hi = r.num<std::uint64_t>("hi");
  d.index = r.num<std::uint32_t>("index");
  d.last = r.flag("last");
  d.split = r.flag("split");
  d.tpcs = r.tpcs("tpcs");
  const int prio = r.num<int>("prio");
  if (prio < 0 || prio > 2) throw std::runtime_error("'prio' must be 0, 1 or 2");
  d.priority = static_cast<sched::HwPriority>(prio);
  d.predicted = r.opt_ns("pred_ns");
  return d;
}

}  // namespace

std::string trace_line(const sched::EngineEvent& e) {
  json j;
  for (const auto& [k, name] : kKinds) {
    if (k == e.kind) j["e"] = name;
  }
  switch (e.kind) {
    case Kind::kAddTenant:
      j["tenant"] = e.result;
      j["ok"] = e.ok;
      j["name"] = e.spec.name;
      j["class"] = e.spec.priority == sched::PriorityClass::kHigh ? "high" : "best-effort";
      j["quota"] = e.spec.quota;
      j["static"] = e.spec.static_tpcs ? json(*e.spec.static_tpcs) : json(nullptr);
      j["slo_ns"] = e.spec.slo ? json(e.spec.slo->count()) : json(nullptr);
      // Absent: false (older traces); true; or "auto".
      if (e.spec.pauses_best_effort == sched::BestEffortPause::kAlways) j["pauses_best_effort"] = true;
      if (e.spec.pauses_best_effort == sched::BestEffortPause::kAuto) j["pauses_best_effort"] = "auto";
      if (e.spec.rightsize) j["rightsize"] = *e.spec.rightsize;
      if (e.spec.rightsize_slip) j["rightsize_slip"] = *e.spec.rightsize_slip;
      break;
    case Kind::kAddQueue:
      j["tenant"] = e.id;
      j["queue"] = e.result;
      j["ok"] = e.ok;
      break;
    case Kind::kSubmit:
    case Kind::kSubmitRunning:
      j["t"] = ns(e.now);
      j["queue"] = e.id;
      j["ok"] = e.ok;
      j["l"] = launch_json(e.launch);
      if (e.kind == Kind::kSubmit) {
        j["launch"] = e.result;
      } else {
        j["tpcs"] = e.tpcs.to_string();
        j["atoms"] = json::array();
        for (const auto& d : e.decided) j["atoms"].push_back(atom_json(d));
      }
      break;
    case Kind::kDispatch:
      j["t"] = ns(e.now);
      j["atoms"] = json::array();
      for (const auto& d : e.decided) j["atoms"].push_back(atom_json(d));
      break;
    case Kind::kAtomFinished:
      j["atom"] = e.id;
      j["start"] = ns(e.start);
      j["t"] = ns(e.now);
      break;
    case Kind::kSync: j["queue"] = e.id; break;
    case Kind::kCloseQueue:
      j["queue"] = e.id;
      j["t"] = ns(e.now);
      break;
    case Kind::kHpSample:
      j["tenant"] = e.id;
      j["kernel"] = e.sample.key.kernel;
      j["ordinal"] = e.sample.key.ordinal;
      j["blocks"] = e.sample.blocks;
      j["per_tpc"] = e.sample.blocks_per_tpc;
      j["tpcs"] = e.sample.tpcs;
      j["ns"] = e.sample.ran.count();
      break;
  }
  return j.dump();
}

Result<sched::EngineEvent> parse_trace_line(std::string_view line) {
  const json j = json::parse(line, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return Status::invalid_argument("not a JSON object");
  try {
    const Reader r{j};
    const std::string name = r.str("e");
    sched::EngineEvent e;
    bool known = false;
    for (const auto& [k, n] : kKinds) {
      if (name == n) {
        e.kind = k;
        known = true;
      }
    }
    if (!known) return Status::invalid_argument("unknown event '" + name + "'");
    switch (e.kind) {
      case Kind::kAddTenant: {
        e.result = r.num<std::uint64_t>("tenant");
        e.ok = r.flag("ok");
        e.spec.name = r.str("name");
        const std::string cls = r.str("class");
        if (cls != "high" && cls != "best-effort") throw std::runtime_error("'class' must be high or best-effort");
        e.spec.priority = cls == "high" ? sched::PriorityClass::kHigh : sched::PriorityClass::kBestEffort;
        e.spec.quota = r.num<int>("quota");
        if (!r.at("static").is_null()) e.spec.static_tpcs = r.num<int>("static");
        e.spec.slo = r.opt_ns("slo_ns");
        if (r.j.contains("pauses_best_effort") && r.j["pauses_best_effort"].is_string()) {
          if (r.str("pauses_best_effort") != "auto")
            throw std::runtime_error("'pauses_best_effort' must be true, false or \"auto\"");
          e.spec.pauses_best_effort = sched::BestEffortPause::kAuto;
        } else if (r.j.contains("pauses_best_effort") && r.flag("pauses_best_effort")) {
          e.spec.pauses_best_effort = sched::BestEffortPause::kAlways;
        }
        if (r.j.contains("rightsize")) e.spec.rightsize = r.flag("rightsize");
        if (r.j.contains("rightsize_slip")) {
          const json& v = r.at("rightsize_slip");
          if (!v.is_number() || !(v.get<double>() >= 1.0) || !(v.get<double>() <= 1e3))
            throw std::runtime_error("'rightsize_slip' must be a number in [1, 1000]");
          e.spec.rightsize_slip = v.get<double>();
        }
        break;
      }
      case Kind::kAddQueue:
        e.id = r.num<std::uint32_t>("tenant");
        e.result = r.num<std::uint64_t>("queue");
        e.ok = r.flag("ok");
        break;
      case Kind::kSubmit:
      case Kind::kSubmitRunning: {
        e.now = at(r.num<std::int64_t>("t"));
        e.id = r.num<std::uint32_t>("queue");
        e.ok = r.flag("ok");
        const json& l = r.at("l");
        if (!l.is_object()) throw std::runtime_error("'l' must be an object");
        e.launch = read_launch(Reader{l});
        if (e.kind == Kind::kSubmit) {
          e.result = r.num<std::uint64_t>("launch");
        } else {
          e.tpcs = r.tpcs("tpcs");
          const json& atoms = r.at("atoms");
          if (!atoms.is_array()) throw std::runtime_error("'atoms' must be an array");
          for (const json& a : atoms) e.decided.push_back(read_atom(a));
        }
        break;
      }
      case Kind::kDispatch: {
        e.now = at(r.num<std::int64_t>("t"));
        const json& atoms = r.at("atoms");
        if (!atoms.is_array()) throw std::runtime_error("'atoms' must be an array");
        for (const json& a : atoms) e.decided.push_back(read_atom(a));
        break;
      }
      case Kind::kAtomFinished:
        e.id = r.num<std::uint32_t>("atom");
        e.start = at(r.num<std::int64_t>("start"));
        e.now = at(r.num<std::int64_t>("t"));
        break;
      case Kind::kSync: e.id = r.num<std::uint32_t>("queue"); break;
      case Kind::kCloseQueue:
        e.id = r.num<std::uint32_t>("queue");
        e.now = at(r.num<std::int64_t>("t"));
        break;
      case Kind::kHpSample:
        e.id = r.num<std::uint32_t>("tenant");
        e.sample.key.kernel = r.num<std::uint64_t>("kernel");
        e.sample.key.ordinal = r.num<std::uint32_t>("ordinal");
        e.sample.blocks = r.num<std::uint64_t>("blocks");
        e.sample.blocks_per_tpc = r.num<int>("per_tpc");
        e.sample.tpcs = r.num<int>("tpcs");
        e.sample.ran = Duration(r.num<std::int64_t>("ns"));
        break;
    }
    return e;
  } catch (const std::exception& ex) {  // Reader's messages, and json's type errors
    return Status::invalid_argument(ex.what());
  }
}

namespace {

Result<TraceHeader> parse_header(std::string_view line) {
  const json j = json::parse(line, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("schema") || j["schema"] != kTraceSchema) {
    return Status::invalid_argument(std::string("not a lithosd trace (the first line must name schema ") +
                                    kTraceSchema + ")");
  }
  try {
    const Reader r{j};
    const json& c = r.at("config");
    const json& d = r.at("device");
    if (!c.is_object() || !d.is_object()) throw std::runtime_error("'config' and 'device' must be objects");
    const Reader rd{d};
    TraceHeader h;
    for (const Setting& s : settings()) {
      if (!s.traced) continue;
      const std::string key(s.key);
      std::string text(s.trace_absent);
      if (c.contains(key)) {
        const json& v = c.at(key);
        switch (s.type) {
          case SettingType::kBool:
            if (!v.is_boolean()) throw std::runtime_error("'" + key + "' must be true or false");
            text = v.get<bool>() ? "true" : "false";
            break;
          case SettingType::kInteger:
            if (!v.is_number_unsigned()) throw std::runtime_error("'" + key + "' must be a non-negative integer");
            text = v.dump();
            break;
          case SettingType::kNumber:
            if (!v.is_number()) throw std::runtime_error("'" + key + "' must be a number");
            text = v.dump();
            break;
          case SettingType::kString:
            if (!v.is_string()) throw std::runtime_error("'" + key + "' must be a string");
            text = v.get<std::string>();
            break;
        }
      } else if (s.trace_absent.empty()) {
        throw std::runtime_error("missing '" + key + "'");
      }
      s.set(h.config, text);  // checked by type only, as written: make_engine validates a replay's
    }
    if (j.contains("predictions")) {
      if (!j.at("predictions").is_string()) throw std::runtime_error("'predictions' must be a string");
      h.predictions = j.at("predictions").get<std::string>();
    }
    h.device = sched::DeviceShape::h100_sxm();
    h.device.name = rd.str("name");
    h.device.tpcs = rd.num<int>("tpcs");
    auto topo = sched::Topology::parse(rd.str("topology"));
    if (!topo) throw std::runtime_error("'topology': " + topo.status().message());
    h.device.topology = *topo;
    return h;
  } catch (const std::exception& ex) {
    return Status::invalid_argument(std::string("header: ") + ex.what());
  }
}

}  // namespace

Result<Trace> parse_trace_file(std::string_view text, std::string_view source) {
  Trace out;
  std::size_t line_no = 0;
  bool header = false;
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t nl = text.find('\n', pos);
    if (nl == std::string_view::npos) nl = text.size();
    const std::string_view line = text.substr(pos, nl - pos);
    pos = nl + 1;
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    auto where = [&] { return std::string(source) + ":" + std::to_string(line_no) + ": "; };
    if (!header) {
      auto h = parse_header(line);
      if (!h) return Status::invalid_argument(where() + h.status().message());
      out.header = std::move(h).value();
      header = true;
      continue;
    }
    if (line.substr(0, kPowerRecordPrefix.size()) == kPowerRecordPrefix) continue;
    auto e = parse_trace_line(line);
    if (!e) return Status::invalid_argument(where() + e.status().message());
    out.events.push_back(std::move(e).value());
  }
  if (!header) return Status::invalid_argument(std::string(source) + ": empty trace");
  return out;
}

std::string power_trace_line(std::uint64_t now_ns, const sched::PowerDecision& d, const std::string& mode,
                             int sm_clock_mhz, double power_w) {
  json j;
  j["now"] = now_ns;
  j["mode"] = mode;
  j["chosen_mhz"] = d.chosen_mhz;
  j["changed"] = d.changed;
  j["sensitivity"] = d.sensitivity;
  j["unseen_kernel"] = d.unseen_kernel;
  j["kernels"] = d.kernels;
  j["sm_clock_mhz"] = sm_clock_mhz;
  j["power_w"] = power_w;
  const std::string rest = j.dump();  // "{...}": its fields after the prefix
  return std::string(kPowerRecordPrefix) + "," + rest.substr(1);
}

void TraceWriter::write_record(const std::string& line) {
  if (f_ == nullptr) return;
  const std::string l = line + "\n";
  if (std::fwrite(l.data(), 1, l.size(), f_) != l.size()) {
    std::fprintf(stderr, "lithosd: trace %s: write failed (%s); tracing stops\n", path_.c_str(), std::strerror(errno));
    close();
    return;
  }
  ++lines_;
}

TraceWriter::~TraceWriter() { close(); }

Status TraceWriter::open(const std::string& path, const std::string& config_json, const sched::DeviceShape& device,
                         const std::string& predictions) {
  close();
  // A new file put in place of any old one, never opened through a link,
  // in a folder no other user can change (ipc/safe_file.hpp).
  auto fd = ipc::create_file_safely(path, 0644, /*create_folders=*/false);
  if (!fd) return Status(fd.status().code(), "trace: " + fd.status().message());
  f_ = ::fdopen(*fd, "w");
  if (f_ == nullptr) {
    const int e = errno;
    ::close(*fd);
    return Status::invalid_argument("trace " + path + ": " + std::strerror(e));
  }
  path_ = path;
  json header = {{"schema", kTraceSchema}};
  header["config"] = json::parse(config_json, nullptr, false);
  header["device"] = {{"name", device.name}, {"tpcs", device.tpcs}, {"topology", device.topology.to_string()}};
  if (!predictions.empty()) header["predictions"] = predictions;
  const std::string h = header.dump() + "\n";
  if (std::fwrite(h.data(), 1, h.size(), f_) != h.size()) {
    close();
    return Status::invalid_argument("trace " + path + ": cannot write");
  }
  return Status::ok();
}

void TraceWriter::write(const std::vector<sched::EngineEvent>& events) {
  if (f_ == nullptr) return;
  for (const auto& e : events) {
    const std::string line = trace_line(e) + "\n";
    if (std::fwrite(line.data(), 1, line.size(), f_) != line.size()) {
      std::fprintf(stderr, "lithosd: trace %s: write failed (%s); tracing stops\n", path_.c_str(),
                   std::strerror(errno));
      close();
      return;
    }
    ++lines_;
  }
}

void TraceWriter::flush() {
  if (f_ != nullptr) std::fflush(f_);
}

void TraceWriter::close() {
  if (f_ != nullptr) std::fclose(f_);
  f_ = nullptr;
}

}  // namespace lithos::daemon
