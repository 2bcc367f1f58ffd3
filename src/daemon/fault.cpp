#include "daemon/fault.hpp"

#include <signal.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <utility>

#include "ipc/cuda_faults.hpp"

namespace lithos::daemon {

namespace {

class SystemProcesses final : public ProcessControl {
 public:
  std::optional<std::uint64_t> start_time(int pid) override {
    if (pid <= 0) return std::nullopt;
    std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
    std::string line;
    if (!f || !std::getline(f, line)) return std::nullopt;
    // "pid (comm) state ppid ...": comm may hold spaces and parentheses, so
    // the fields are counted from the last ')'. State is field 3, the start
    // time field 22.
    const std::size_t close = line.rfind(')');
    if (close == std::string::npos) return std::nullopt;
    std::istringstream rest(line.substr(close + 1));
    std::string field;
    for (int i = 3; i <= 22 && rest >> field; ++i) {
      if (i == 3 && (field == "Z" || field == "X" || field == "x")) return std::nullopt;
      if (i == 22) {
        char* end = nullptr;
        const unsigned long long v = std::strtoull(field.c_str(), &end, 10);
        if (end == field.c_str()) return std::nullopt;
        return static_cast<std::uint64_t>(v);
      }
    }
    return std::nullopt;
  }
  int signal(int pid, int sig) override { return ::kill(pid, sig) == 0 ? 0 : errno; }
};

std::string who_of(const FaultParty& p) {
  return "pid " + std::to_string(p.pid) + " (" + (p.program.empty() ? "?" : p.program) + ", tenant " + p.tenant + ")";
}

double ms(std::uint64_t ns) { return static_cast<double>(ns) / 1e6; }

std::string errno_name(int e) {
  char buf[128];
  return ::strerror_r(e, buf, sizeof buf);
}

nlohmann::json party_json(const FaultParty& p) {
  return {{"client", p.client}, {"pid", p.pid}, {"uid", p.uid},           {"program", p.program},
          {"tenant", p.tenant}, {"mps", p.mps}, {"inflight", p.inflight}, {"waiting", p.waiting}};
}

// The names of the tenants in `parties`, each once, in order.
std::string tenants_of(const std::vector<FaultParty>& parties) {
  std::vector<std::string> seen;
  for (const FaultParty& p : parties) {
    if (std::find(seen.begin(), seen.end(), p.tenant) == seen.end()) seen.push_back(p.tenant);
  }
  std::string out;
  for (const std::string& t : seen) out += (out.empty() ? "" : ", ") + t;
  return out.empty() ? "none" : out;
}

}  // namespace

std::unique_ptr<ProcessControl> ProcessControl::system() { return std::make_unique<SystemProcesses>(); }

FaultMonitor::FaultMonitor(FaultSettings settings, std::unique_ptr<ProcessControl> processes)
    : settings_(settings), processes_(std::move(processes)) {}

bool FaultMonitor::affected(std::uint32_t client) const {
  return open_ && std::find(affected_clients_.begin(), affected_clients_.end(), client) != affected_clients_.end();
}

void FaultMonitor::affect_client(std::uint32_t client) {
  if (std::find(affected_clients_.begin(), affected_clients_.end(), client) == affected_clients_.end())
    affected_clients_.push_back(client);
}

void FaultMonitor::open_episode(std::uint64_t now, const std::vector<FaultParty>& everyone) {
  open_ = true;
  ++episodes_;
  cur_ = Episode{};
  cur_.since_ns = now;
  cur_.detected_ns = now;
  for (const FaultParty& p : everyone) {
    if (p.inflight > 0 || p.waiting > 0) cur_.in_flight.push_back(p);
  }
  affected_clients_.clear();
}

void FaultMonitor::add_affected(int pid, const std::string& who, bool may_end) {
  if (pid <= 0) return;  // not visible from here: nothing to wait for or end
  for (Affected& a : cur_.affected) {
    if (a.pid == pid) {
      a.may_end = a.may_end || may_end;
      return;
    }
  }
  Affected a;
  a.pid = pid;
  a.may_end = may_end;
  a.who = who;
  a.start = processes_->start_time(pid);
  a.gone = !a.start.has_value();
  cur_.affected.push_back(std::move(a));
}

bool FaultMonitor::confirmed() const {
  if (cur_.xid) return true;
  for (const FaultParty& p : cur_.reporters) {
    if (p.uid != cur_.reporters.front().uid) return true;
  }
  return false;
}

void FaultMonitor::widen_to_gpu(const std::vector<FaultParty>& everyone, std::vector<std::string>& log) {
  scope_ = Scope::kGpu;
  ++gpu_faults_;
  for (const FaultParty& p : everyone) {
    if (!p.mps) continue;
    add_affected(p.pid, who_of(p), true);
    affect_client(p.client);
  }
  std::size_t waiting = 0;
  for (const Affected& a : cur_.affected) waiting += a.gone || !a.may_end ? 0 : 1;
  log.push_back("MPS spreads it to every MPS client of this GPU and takes no new client until they have all exited (" +
                std::string(cur_.xid ? "confirmed by NVML's Xid" : "reported by processes of two users") +
                "): " + std::to_string(waiting) + " process(es) to go" +
                (settings_.end_processes ? "; those left after " + std::to_string(settings_.exit_grace_ns / 1'000'000) +
                                               " ms are sent SIGTERM, then SIGKILL " +
                                               std::to_string(settings_.term_grace_ns / 1'000'000) + " ms later"
                                         : "; lithosd waits for them (fault_ends_processes = false)"));
}

std::vector<std::string> FaultMonitor::client_fault(std::uint64_t now, const FaultParty& reporter, std::uint32_t code,
                                                    const std::vector<FaultParty>& everyone) {
  std::vector<std::string> log;
  const bool fresh = !open_;
  if (fresh) open_episode(now, everyone);
  if (cur_.code == 0) cur_.code = code;
  const bool known = std::any_of(cur_.reporters.begin(), cur_.reporters.end(),
                                 [&](const FaultParty& p) { return p.client == reporter.client; });
  if (!known && cur_.reporters.size() < 64) cur_.reporters.push_back(reporter);
  if (fresh || scope_ == Scope::kXid) {
    log.push_back("GPU fault: " + ipc::cuda_error_name(code) +
                  (cur_.xid ? " (Xid " + std::to_string(*cur_.xid) + ")" : std::string()) + " seen by client " +
                  std::to_string(reporter.client) + ", " + who_of(reporter) + "; work in flight of tenant(s) " +
                  tenants_of(cur_.in_flight) + describe(cur_));
    scope_ = Scope::kProcess;
  }
  // Its own process in any case: it says its context is lost.
  add_affected(reporter.pid, who_of(reporter), reporter.mps);
  affect_client(reporter.client);
  if (scope_ == Scope::kGpu) return log;
  const bool mps = std::any_of(cur_.reporters.begin(), cur_.reporters.end(), [](const FaultParty& p) { return p.mps; });
  if (mps && confirmed()) {
    widen_to_gpu(everyone, log);
  } else if (fresh) {
    log.push_back(reporter.mps ? "an MPS client: if the fault is real it reaches every MPS client of the GPU; lithosd "
                                 "acts on other processes once NVML's Xid or a process of another user confirms it"
                               : "it ran outside MPS: the fault is its own, and other processes go on");
  }
  return log;
}

std::vector<std::string> FaultMonitor::xid(std::uint64_t now, std::uint64_t xid,
                                           const std::vector<FaultParty>& everyone) {
  std::vector<std::string> log;
  ++xids_;
  if (!open_) {
    open_episode(now, everyone);
    scope_ = Scope::kXid;
    cur_.xid = xid;
    log.push_back("Xid " + std::to_string(xid) + " (NVML) on this GPU; work in flight of tenant(s) " +
                  tenants_of(cur_.in_flight) + describe(cur_));
    return log;
  }
  if (!cur_.xid) {
    cur_.xid = xid;
    log.push_back("the fault is Xid " + std::to_string(xid) + " (NVML)");
  }
  const bool mps = std::any_of(cur_.reporters.begin(), cur_.reporters.end(), [](const FaultParty& p) { return p.mps; });
  if (scope_ == Scope::kProcess && mps) widen_to_gpu(everyone, log);
  return log;
}

void FaultMonitor::add_mps_processes(const std::vector<int>& pids) {
  if (!gpu_faulted()) return;
  for (const int pid : pids)
    add_affected(pid, "pid " + std::to_string(pid) + " (an MPS client lithosd does not serve)", true);
}

std::vector<std::string> FaultMonitor::tick(std::uint64_t now) {
  std::vector<std::string> log;
  if (!open_) return log;
  const std::uint64_t age = now - cur_.detected_ns;
  auto close = [&](const char* outcome) {
    cur_.outcome = outcome;
    cur_.recovered_ns = now;
    last_ = cur_;
    open_ = false;
    affected_clients_.clear();
  };
  if (scope_ == Scope::kXid) {
    if (age >= kXidAloneNs) {
      log.push_back("Xid " + std::to_string(cur_.xid.value_or(0)) +
                    ": no client of lithosd reported a fault (a process lithosd does not serve, or an idle one)");
      close("xid only");
    }
    return log;
  }
  std::size_t left = 0, holding = 0;
  for (Affected& a : cur_.affected) {
    if (a.gone) continue;
    const auto st = processes_->start_time(a.pid);
    if (!st || (a.start && *st != *a.start)) {
      a.gone = true;
      continue;
    }
    ++left;
    holding += a.may_end ? 1 : 0;
  }
  if (left == 0) {
    // Under MPS the server took no new client until now.
    const bool mps = scope_ == Scope::kGpu || std::any_of(cur_.affected.begin(), cur_.affected.end(),
                                                          [](const Affected& a) { return a.may_end; });
    if (mps) {
      log.push_back("GPU back in service " + std::to_string(static_cast<long long>(ms(age))) +
                    " ms after the fault: every affected MPS client has exited; new clients are scheduled");
    }
    close(mps ? "recovered" : "contained");
    return log;
  }
  if (!settings_.end_processes || holding == 0) return log;
  const bool term = age >= settings_.exit_grace_ns;
  const bool kill = age >= settings_.exit_grace_ns + settings_.term_grace_ns;
  for (Affected& a : cur_.affected) {
    if (a.gone || !a.may_end || !term || (a.termed && !kill) || a.killed) continue;
    const int sig = kill ? SIGKILL : SIGTERM;
    const int err = processes_->signal(a.pid, sig);
    (kill ? a.killed : a.termed) = true;
    if (err == 0) {
      ++ended_;
      log.push_back(std::string(kill ? "SIGKILL" : "SIGTERM") + " to " + a.who +
                    ": its CUDA context is lost and it still holds the MPS server " +
                    std::to_string(static_cast<long long>(ms(age))) + " ms after the fault");
    } else if (a.signal_error == 0) {
      a.signal_error = err;
      log.push_back("cannot end " + a.who + " (" + errno_name(err) +
                    "): the GPU stays out of service for new MPS clients until it exits");
    }
  }
  return log;
}

std::string FaultMonitor::describe(const Episode& e) const {
  std::string out;
  for (const FaultParty& p : e.in_flight) {
    out += (out.empty() ? " [" : ", ") + who_of(p) + ": " + std::to_string(p.inflight) + " in flight";
    if (p.waiting > 0) out += ", " + std::to_string(p.waiting) + " waiting";
  }
  return out.empty() ? out : out + "]";
}

std::string FaultMonitor::status_json(std::uint64_t now) const {
  using nlohmann::json;
  auto episode = [&](const Episode& e, bool current) {
    json j;
    j["scope"] = current ? (scope_ == Scope::kGpu ? "gpu" : scope_ == Scope::kProcess ? "process" : "xid") : "closed";
    j["age_s"] = static_cast<double>(now - e.detected_ns) / 1e9;
    j["error"] = e.code == 0 ? json(nullptr) : json(e.code);
    j["error_name"] = e.code == 0 ? json(nullptr) : json(ipc::cuda_error_name(e.code));
    j["xid"] = e.xid ? json(*e.xid) : json(nullptr);
    json rep = json::array(), fl = json::array(), aff = json::array();
    for (const FaultParty& p : e.reporters) rep.push_back(party_json(p));
    for (const FaultParty& p : e.in_flight) fl.push_back(party_json(p));
    for (const Affected& a : e.affected) {
      json o = {{"pid", a.pid},   {"who", a.who},        {"mps", a.may_end},
                {"gone", a.gone}, {"sigterm", a.termed}, {"sigkill", a.killed}};
      if (a.signal_error != 0) o["signal_error"] = errno_name(a.signal_error);
      aff.push_back(o);
    }
    j["reported_by"] = rep;
    j["in_flight"] = fl;
    j["affected"] = aff;
    if (e.recovered_ns) {
      j["outcome"] = e.outcome;
      j["closed_after_ms"] = ms(*e.recovered_ns - e.detected_ns);
    }
    return j;
  };
  json j;
  j["state"] = !open_                      ? "ok"
               : scope_ == Scope::kGpu     ? "gpu_faulted"
               : scope_ == Scope::kProcess ? "process_fault"
                                           : "xid";
  j["episodes"] = episodes_;
  j["gpu_faults"] = gpu_faults_;
  j["xid_events"] = xids_;
  j["processes_signalled"] = ended_;
  j["current"] = open_ ? episode(cur_, true) : json(nullptr);
  j["last"] = last_ ? episode(*last_, false) : json(nullptr);
  j["settings"] = {{"exit_grace_ms", ms(settings_.exit_grace_ns)},
                   {"term_grace_ms", ms(settings_.term_grace_ns)},
                   {"ends_processes", settings_.end_processes}};
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace lithos::daemon
