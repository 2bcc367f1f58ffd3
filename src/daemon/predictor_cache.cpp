#include "daemon/predictor_cache.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "ipc/socket.hpp"

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
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    if (errno == ENOENT) return Status::not_found(path + ": no cache yet");
    return Status::invalid_argument(path + ": " + std::strerror(errno));
  }
  std::string first;
  std::getline(f, first);
  const std::string want = header_of(device);
  if (first.rfind("# " + std::string(kPredictorCacheSchema) + " ", 0) != 0) {
    return Status::invalid_argument(path + ": not a predictor cache (first line '" + first.substr(0, 80) + "')");
  }
  if (first != want) {
    return Status::invalid_argument(path + ": a cache of another GPU ('" + first.substr(2) + "'; this one: '" +
                                    want.substr(2) + "')");
  }
  std::stringstream rest;
  rest << f.rdbuf();
  return rest.str();
}

Status write_predictor_cache(const std::string& path, const sched::DeviceShape& device, std::string_view entries) {
  const std::size_t slash = path.rfind('/');
  if (slash != std::string::npos && slash > 0) LITHOS_RETURN_IF_ERROR(ipc::make_directories(path.substr(0, slash)));
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  std::FILE* f = std::fopen(tmp.c_str(), "we");
  if (f == nullptr) return Status::invalid_argument("cannot write " + tmp + ": " + std::strerror(errno));
  const std::string head = header_of(device) + "\n";
  bool ok = std::fwrite(head.data(), 1, head.size(), f) == head.size() &&
            std::fwrite(entries.data(), 1, entries.size(), f) == entries.size();
  ok = std::fflush(f) == 0 && ok;
  ok = ::fsync(::fileno(f)) == 0 && ok;
  ok = std::fclose(f) == 0 && ok;
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    std::remove(tmp.c_str());
    return Status::invalid_argument("cannot write " + path + ": " + why);
  }
  return Status::ok();
}

}  // namespace lithos::daemon
