#include "daemon/predictor_cache.hpp"

#include "ipc/safe_file.hpp"

namespace lithos::daemon {

namespace {

std::string header_of(const sched::DeviceShape& device) {
  return "# " + std::string(kPredictorCacheSchema) + " tpcs=" + std::to_string(device.tpcs) + " device=" + device.name;
}

}  // namespace

std::string predictor_cache_path(const std::string& state_dir) {
  if (state_dir.empty()) return "predictor.cache";
  return state_dir.back() == '/' ? state_dir + "predictor.cache" : state_dir + "/predictor.cache";
}

Result<std::string> read_predictor_cache(const std::string& path, const sched::DeviceShape& device) {
  // Not followed through a link, and only a file of root or this daemon's
  // user in a folder no one else can change (ipc/safe_file.hpp).
  auto text = ipc::read_file_safely(path, kMaxPredictorCacheBytes);
  if (!text) {
    if (text.status().code() == StatusCode::kNotFound) return Status::not_found(path + ": no cache yet");
    return Status::invalid_argument(text.status().message());
  }
  const std::size_t eol = text->find('\n');
  const std::string first = text->substr(0, eol);
  const std::string want = header_of(device);
  if (first.rfind("# " + std::string(kPredictorCacheSchema) + " ", 0) != 0) {
    return Status::invalid_argument(path + ": not a predictor cache (first line '" + first.substr(0, 80) + "')");
  }
  if (first != want) {
    return Status::invalid_argument(path + ": a cache of another GPU ('" + first.substr(2) + "'; this one: '" +
                                    want.substr(2) + "')");
  }
  return eol == std::string::npos ? std::string() : text->substr(eol + 1);
}

Status write_predictor_cache(const std::string& path, const sched::DeviceShape& device, std::string_view entries) {
  // A temporary file of an unpredictable name, synced and renamed over the
  // old one, in the state folder (made when missing) once it is checked.
  std::string text = header_of(device) + "\n";
  text.append(entries);
  return ipc::write_file_safely(path, text, 0644, /*create_folders=*/true, /*sync=*/true);
}

}  // namespace lithos::daemon
