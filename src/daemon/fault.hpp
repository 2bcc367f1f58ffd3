// Fatal GPU faults (docs/daemon.md, "GPU faults"): what lithosd knows of
// one, and how it brings the GPU back into service.
//
// What happens on the GPU (measured on the H100, scripts/faults/):
//  - a process whose kernel makes an illegal access loses its CUDA context:
//    every later call returns the same error (ipc::is_sticky_cuda_error);
//  - outside MPS that is the end of it: other processes go on untouched;
//  - under MPS the fault reaches every MPS client of the GPU within a
//    millisecond, and the MPS server refuses every new client
//    (CUDA_ERROR_MPS_SERVER_NOT_READY) until all of them have exited.
//    `nvidia-cuda-mps-control terminate_client` does not end a client that
//    lingers after the fault: it returns only once that process has exited.
//  - NVML reports the fault as a critical Xid event (31: an MMU fault) at
//    the same moment.
//
// FaultMonitor keeps one fault episode at a time:
//  - it opens on the first sticky error a client reports (its channel's
//    client_fault) or on an Xid event; it names the error, the Xid, who
//    reported it and the tenants and processes whose work was in flight;
//  - a client's report is a claim about its own process only (any local
//    user can write anything into its channel): that process is affected
//    (lithosd schedules nothing more of it) and, if it is an MPS client, it
//    holds the MPS server and is ended when it lingers (below);
//  - the fault becomes the GPU's (every MPS client affected, the GPU out of
//    service until they are all gone) only when an MPS client reported it
//    and something a client cannot forge agrees: NVML's Xid event, or a
//    report from a process of another uid. A lone report cannot make lithosd
//    act on anyone else's process;
//  - affected MPS client processes (registered with lithosd, or listed by
//    MPS control once the fault is the GPU's) get exit_grace to exit on
//    their own (a PyTorch process raises and exits at once), then SIGTERM,
//    then after term_grace SIGKILL (with end_processes; each is checked
//    against its start time first, so a pid used again is never signalled).
//    Once none is left the episode closes: the GPU is back in service;
//  - a process outside MPS that faulted is named and left alone: its fault
//    is its own (other processes go on), and the episode closes when it is
//    gone;
//  - an Xid with no client report names what was in flight and ends nothing
//    (it may be a process lithos does not know): it closes after a second
//    unless a client report comes.
//
// Single-threaded: the daemon's loop calls everything. Time is the
// daemon's CLOCK_MONOTONIC in ns.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace lithos::daemon {

// The processes of this machine, as the fault monitor needs them; a fake in
// the tests.
class ProcessControl {
 public:
  virtual ~ProcessControl() = default;
  // The process's start time (clock ticks after boot, /proc/<pid>/stat), or
  // nullopt when no such process runs (a zombie counts as gone: it holds no
  // CUDA context any more).
  virtual std::optional<std::uint64_t> start_time(int pid) = 0;
  // kill(pid, sig): 0, or the errno.
  virtual int signal(int pid, int sig) = 0;
  // The machine's own.
  static std::unique_ptr<ProcessControl> system();
};

struct FaultSettings {
  std::uint64_t exit_grace_ns = 2'000'000'000;  // affected processes exit on their own meanwhile
  std::uint64_t term_grace_ns = 2'000'000'000;  // after SIGTERM, before SIGKILL
  bool end_processes = true;                    // false: wait for them as long as it takes
};

// A registered client as the fault found it.
struct FaultParty {
  std::uint32_t client = 0;
  int pid = 0;  // 0: not visible to lithosd (another pid namespace)
  unsigned uid = 0;
  std::string program;
  std::string tenant;
  bool mps = false;            // its contexts are MPS clients
  std::uint64_t inflight = 0;  // its atoms and launches on the GPU at the fault
  std::uint64_t waiting = 0;   // its best-effort launches waiting for grants
};

class FaultMonitor {
 public:
  FaultMonitor(FaultSettings settings, std::unique_ptr<ProcessControl> processes);

  // Client `reporter` saw sticky result `code` (first seen `seen_ns` ago,
  // by its clock: 0 if not known). `everyone`: every registered client now,
  // with what each has in flight. Returns the log lines to print.
  std::vector<std::string> client_fault(std::uint64_t now, const FaultParty& reporter, std::uint32_t code,
                                        const std::vector<FaultParty>& everyone);
  // NVML's critical Xid event `xid`.
  std::vector<std::string> xid(std::uint64_t now, std::uint64_t xid, const std::vector<FaultParty>& everyone);
  // More MPS client processes (MPS control's get_client_list), affected when
  // the GPU is faulted.
  void add_mps_processes(const std::vector<int>& pids);
  // Moves recovery on: who is gone, who is told to go. Log lines out.
  std::vector<std::string> tick(std::uint64_t now);

  // An MPS-wide fault (confirmed) whose processes are not all gone yet.
  bool gpu_faulted() const { return open_ && scope_ == Scope::kGpu; }
  bool open() const { return open_; }
  // Whether client `id` was affected by the open episode (its work is lost).
  bool affected(std::uint32_t client) const;
  std::uint64_t episodes() const { return episodes_; }

  // The "fault" member of the status JSON (schema in docs/daemon.md).
  std::string status_json(std::uint64_t now) const;

 private:
  enum class Scope { kXid, kProcess, kGpu };
  struct Affected {
    int pid = 0;
    bool may_end = false;                // an MPS client: it holds the MPS server while it lives
    std::optional<std::uint64_t> start;  // as first seen; nullopt: already gone
    std::string who;                     // "pid 12 (python3, tenant svc)"
    bool gone = false;
    bool termed = false, killed = false;
    int signal_error = 0;
  };
  struct Episode {
    std::uint64_t since_ns = 0;
    std::uint64_t detected_ns = 0;  // first report of a client, or the Xid
    std::uint32_t code = 0;
    std::optional<std::uint64_t> xid;
    std::vector<FaultParty> reporters;
    std::vector<FaultParty> in_flight;
    std::vector<Affected> affected;
    std::optional<std::uint64_t> recovered_ns;
    std::string outcome;  // "recovered", "contained", "xid only"
  };
  void open_episode(std::uint64_t now, const std::vector<FaultParty>& everyone);
  void widen_to_gpu(const std::vector<FaultParty>& everyone, std::vector<std::string>& log);
  // Whether the reports so far can be believed for other processes: an Xid
  // came, or reporters of two uids.
  bool confirmed() const;
  void add_affected(int pid, const std::string& who, bool may_end);
  void affect_client(std::uint32_t client);
  std::string describe(const Episode& e) const;

  FaultSettings settings_;
  std::unique_ptr<ProcessControl> processes_;
  bool open_ = false;
  Scope scope_ = Scope::kXid;
  Episode cur_;
  std::optional<Episode> last_;  // the last closed episode
  std::vector<std::uint32_t> affected_clients_;
  std::uint64_t episodes_ = 0, gpu_faults_ = 0, xids_ = 0, ended_ = 0;
  static constexpr std::uint64_t kXidAloneNs = 1'000'000'000;
};

}  // namespace lithos::daemon
