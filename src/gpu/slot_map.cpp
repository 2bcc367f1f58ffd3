#include "gpu/slot_map.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>

#include "ipc/safe_file.hpp"

namespace lithos::gpu {

namespace {

// strerror is not guaranteed thread-safe; this library runs inside
// multithreaded hosts.
std::string errno_text(int e) {
  char buf[128];
  return ::strerror_r(e, buf, sizeof buf);  // GNU variant: returns the message
}

constexpr std::string_view kMagic = "lithos-slot-map";
constexpr int kFormatVersion = 2;  // 1 is still read (no topology)
constexpr int kMaxSms = 2 * sched::kMaxTpcs;

std::string live_range_text(const SlotMap& map) {
  const sched::TpcSet live = map.live_set();
  if (live.empty()) return "this slot map has no live TPC (calibrate first: `lithos calibrate`)";
  return "live TPCs on " + (map.gpu_name.empty() ? std::string("this GPU") : map.gpu_name) + ": " + live.to_string();
}

bool parse_int(std::string_view s, int& out) {
  if (s.empty()) return false;
  const auto* end = s.data() + s.size();
  const auto [ptr, ec] = std::from_chars(s.data(), end, out);
  return ec == std::errc() && ptr == end;
}

std::string sanitize(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    const bool ok =
        (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
    if (!ok) c = '_';
  }
  return out.empty() ? std::string("unknown") : out;
}

bool has_space(std::string_view s) {
  for (char c : s) {
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') return true;
  }
  return false;
}

}  // namespace

int SlotMap::live_tpcs() const {
  int n = 0;
  for (const std::int16_t t : tpc_of_slot) n += t >= 0 ? 1 : 0;
  return n;
}

std::optional<int> SlotMap::slot_of_tpc(int tpc) const {
  if (tpc < 0) return std::nullopt;
  for (int s = 0; s < kMaxSlots; ++s) {
    if (tpc_of_slot[static_cast<std::size_t>(s)] == tpc) return s;
  }
  return std::nullopt;
}

sched::TpcSet SlotMap::live_set() const {
  sched::TpcSet out;
  for (const std::int16_t t : tpc_of_slot) {
    if (t >= 0) out.set(t);
  }
  return out;
}

Result<SlotMask> mask_for(const SlotMap& map, const sched::TpcSet& tpcs) {
  if (tpcs.empty()) {
    return Status::invalid_argument("an empty TPC set would run the launch nowhere; " + live_range_text(map));
  }
  SlotMask mask = SlotMask::all();
  sched::TpcSet reached;
  for (int s = 0; s < kMaxSlots; ++s) {
    const int t = map.tpc_of_slot[static_cast<std::size_t>(s)];
    if (t >= 0 && tpcs.test(t)) {
      mask.set_disabled(s, false);
      reached.set(t);
    }
  }
  const sched::TpcSet missing = tpcs - reached;
  if (!missing.empty()) {
    return Status::invalid_argument("TPC(s) " + missing.to_string() + " are not controlled by any live slot; " +
                                    live_range_text(map));
  }
  // Every member of a non-empty `tpcs` was reached through a live slot, so at
  // least one live slot is enabled.
  return mask;
}

std::string slot_map_serialize(const SlotMap& map) {
  std::string out;
  out += std::string(kMagic) + " " + std::to_string(kFormatVersion) + "\n";
  out += "gpu_uuid " + map.gpu_uuid + "\n";
  out += "gpu_name " + map.gpu_name + "\n";
  out += "driver_version " + map.driver_version + "\n";
  out += "sm_count " + std::to_string(map.sm_count) + "\n";
  out += "slot_count " + std::to_string(map.slot_count) + "\n";
  for (int s = 0; s < kMaxSlots; ++s) {
    const int t = map.tpc_of_slot[static_cast<std::size_t>(s)];
    if (t >= 0) out += "slot " + std::to_string(s) + " " + std::to_string(t) + "\n";
  }
  for (int g = 0; g < map.topology.count(); ++g) out += "gpc " + map.topology.gpc(g).to_string() + "\n";
  out += "end\n";
  return out;
}

Result<SlotMap> slot_map_parse(std::string_view text) {
  SlotMap map;
  bool seen_magic = false, seen_end = false;
  bool seen_uuid = false, seen_name = false, seen_driver = false, seen_sms = false, seen_slots = false;
  std::array<int, kMaxSlots> pending_tpc{};
  pending_tpc.fill(-1);
  std::array<int, kMaxSlots> pending_line{};
  std::array<sched::TpcSet, sched::kMaxGpcs> gpcs{};
  int gpc_count = 0;
  int first_gpc_line = 0;
  int version = 0;
  int line_no = 0;
  auto bad = [&](const std::string& why) {
    return Status::invalid_argument("slot map line " + std::to_string(line_no) + ": " + why);
  };
  while (!text.empty()) {
    const std::size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty() || line.front() == '#') continue;
    if (seen_end) return bad("content after 'end'");
    const std::size_t sp = line.find(' ');
    const std::string_view key = line.substr(0, sp);
    const std::string_view value = sp == std::string_view::npos ? std::string_view{} : line.substr(sp + 1);
    if (!seen_magic) {
      if (key != kMagic) return bad("not a lithos slot map (expected '" + std::string(kMagic) + " 1')");
      if (!parse_int(value, version) || version < 1 || version > kFormatVersion) {
        return bad("unsupported format version '" + std::string(value) + "' (this lithos reads versions 1-2)");
      }
      seen_magic = true;
      continue;
    }
    auto once = [&](bool& seen) -> Status {
      if (seen) return bad("duplicate key '" + std::string(key) + "'");
      seen = true;
      return Status::ok();
    };
    if (key == "gpu_uuid") {
      LITHOS_RETURN_IF_ERROR(once(seen_uuid));
      if (value.empty() || has_space(value)) return bad("gpu_uuid must be one non-empty word");
      map.gpu_uuid = std::string(value);
    } else if (key == "gpu_name") {
      LITHOS_RETURN_IF_ERROR(once(seen_name));
      map.gpu_name = std::string(value);
    } else if (key == "driver_version") {
      LITHOS_RETURN_IF_ERROR(once(seen_driver));
      if (value.empty() || has_space(value)) return bad("driver_version must be one non-empty word");
      map.driver_version = std::string(value);
    } else if (key == "sm_count") {
      LITHOS_RETURN_IF_ERROR(once(seen_sms));
      if (!parse_int(value, map.sm_count) || map.sm_count < 2 || map.sm_count > kMaxSms) {
        return bad("sm_count must be an integer in 2-" + std::to_string(kMaxSms));
      }
    } else if (key == "slot_count") {
      LITHOS_RETURN_IF_ERROR(once(seen_slots));
      if (!parse_int(value, map.slot_count) || map.slot_count < 1 || map.slot_count > kMaxSlots) {
        return bad("slot_count must be an integer in 1-" + std::to_string(kMaxSlots));
      }
    } else if (key == "slot") {
      const std::size_t sp2 = value.find(' ');
      int s = 0, t = 0;
      if (sp2 == std::string_view::npos || !parse_int(value.substr(0, sp2), s) ||
          !parse_int(value.substr(sp2 + 1), t)) {
        return bad("expected 'slot <slot> <tpc>'");
      }
      if (s < 0 || s >= kMaxSlots) return bad("slot " + std::to_string(s) + " is outside 0-127");
      if (t < 0 || t >= sched::kMaxTpcs) return bad("TPC " + std::to_string(t) + " is outside 0-127");
      if (pending_tpc[static_cast<std::size_t>(s)] >= 0) return bad("slot " + std::to_string(s) + " listed twice");
      pending_tpc[static_cast<std::size_t>(s)] = t;
      pending_line[static_cast<std::size_t>(s)] = line_no;
    } else if (key == "gpc") {
      if (version < 2) return bad("'gpc' lines need format version 2");
      if (gpc_count == sched::kMaxGpcs) return bad("more than " + std::to_string(sched::kMaxGpcs) + " GPCs");
      auto set = sched::TpcSet::parse(value);
      if (!set) return bad("gpc: " + set.status().message());
      if (set.value().empty()) return bad("a GPC must name at least one TPC");
      if (gpc_count == 0) first_gpc_line = line_no;
      gpcs[static_cast<std::size_t>(gpc_count++)] = set.value();
    } else if (key == "end") {
      if (!value.empty()) return bad("'end' takes no value");
      seen_end = true;
    } else {
      return bad("unknown key '" + std::string(key) + "'");
    }
  }
  if (!seen_magic) return Status::invalid_argument("slot map is empty");
  if (!seen_end) return Status::invalid_argument("slot map is truncated (no 'end' line)");
  if (!(seen_uuid && seen_name && seen_driver && seen_sms && seen_slots)) {
    return Status::invalid_argument("slot map lacks one of gpu_uuid, gpu_name, driver_version, sm_count, slot_count");
  }
  sched::TpcSet claimed;
  for (int s = 0; s < kMaxSlots; ++s) {
    const int t = pending_tpc[static_cast<std::size_t>(s)];
    if (t < 0) continue;
    line_no = pending_line[static_cast<std::size_t>(s)];
    if (s >= map.slot_count) {
      return bad("slot " + std::to_string(s) + " is beyond slot_count " + std::to_string(map.slot_count));
    }
    if (t >= map.sm_count / 2) {
      return bad("TPC " + std::to_string(t) + " does not exist on a GPU with " + std::to_string(map.sm_count) + " SMs");
    }
    if (claimed.test(t)) return bad("TPC " + std::to_string(t) + " is claimed by two slots");
    claimed.set(t);
    map.tpc_of_slot[static_cast<std::size_t>(s)] = static_cast<std::int16_t>(t);
  }
  if (claimed.empty()) return Status::invalid_argument("slot map has no live slot");
  if (gpc_count > 0) {
    line_no = first_gpc_line;
    auto topology = sched::Topology::from_gpcs(gpcs.data(), gpc_count);
    if (!topology) return bad(topology.status().message());
    const sched::TpcSet stray = topology.value().tpcs() - claimed;
    if (!stray.empty()) return bad("GPC TPC(s) " + stray.to_string() + " are controlled by no slot");
    map.topology = topology.value();
  }
  return map;
}

std::string uuid_text(const void* bytes16) {
  static constexpr char kHex[] = "0123456789abcdef";
  const auto* b = static_cast<const unsigned char*>(bytes16);
  std::string out = "GPU-";
  for (int i = 0; i < 16; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) out += '-';
    out += kHex[b[i] >> 4];
    out += kHex[b[i] & 0xFU];
  }
  return out;
}

std::string slot_map_cache_path(std::string_view cache_dir, std::string_view uuid, std::string_view driver) {
  std::string dir(cache_dir);
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  if (dir.empty()) dir = ".";
  return dir + "/slot-map-" + sanitize(uuid) + "-" + sanitize(driver) + ".txt";
}

Result<SlotMap> slot_map_load(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int e = errno;
    if (e == ENOENT) return Status::not_found("no slot map cached at " + path);
    return Status::unavailable("cannot read " + path + ": " + errno_text(e));
  }
  std::string text;
  char buf[4096];
  while (true) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      const int e = errno;
      ::close(fd);
      return Status::unavailable("cannot read " + path + ": " + errno_text(e));
    }
    if (n == 0) break;
    text.append(buf, static_cast<std::size_t>(n));
    if (text.size() > (1U << 20)) {
      ::close(fd);
      return Status::invalid_argument(path + " is too large to be a slot map");
    }
  }
  ::close(fd);
  auto map = slot_map_parse(text);
  if (!map) return map.status().with_context(path);
  return map;
}

Status slot_map_save(const std::string& path, const SlotMap& map) {
  if (path.empty()) return Status::invalid_argument("slot_map_save: empty path");
  // lithosd's calibration child runs as root: a temporary file of an
  // unpredictable name, renamed into place, in a folder (made when missing)
  // that no other user can change (ipc/safe_file.hpp).
  return ipc::write_file_safely(path, slot_map_serialize(map), 0644, /*create_folders=*/true, /*sync=*/true);
}

Result<SlotMap> slot_map_load_cached(const std::string& path) {
  auto text = ipc::read_file_safely(path, 1U << 20);
  if (!text) {
    if (text.status().code() == StatusCode::kNotFound) return Status::not_found("no slot map cached at " + path);
    return text.status();
  }
  auto map = slot_map_parse(*text);
  if (!map) return map.status().with_context(path);
  return map;
}

std::string default_cache_dir() {
  const char* v = std::getenv("LITHOS_CACHE_DIR");
  if (v != nullptr && *v != '\0') return v;
  v = std::getenv("XDG_CACHE_HOME");
  if (v != nullptr && *v != '\0') return std::string(v) + "/lithos";
  v = std::getenv("HOME");
  if (v != nullptr && *v != '\0') return std::string(v) + "/.cache/lithos";
  return "/tmp/lithos-cache";
}

}  // namespace lithos::gpu
