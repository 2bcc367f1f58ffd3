// The registration socket: AF_UNIX SOCK_SEQPACKET, so that every Hello and
// Welcome arrives whole or not at all, and the channel's descriptor travels
// with the Welcome (SCM_RIGHTS).
//
// Every descriptor made here is close-on-exec: liblithos.so lives inside
// applications that fork and exec, and their children must not inherit the
// daemon's connection.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.hpp"

namespace lithos::ipc {

// Where the daemon listens unless told otherwise, and where clients look
// (liblithos.so's LITHOS_DAEMON default through `lithos run`, `lithos
// status`, `lithos daemon`), so that all agree:
//   1. $LITHOS_DAEMON_SOCKET, when set and not empty;
//   2. /run/lithos/lithosd.sock for root (a system-wide daemon);
//   3. for any other user, the same path when a system-wide daemon's
//      socket is there (system_socket_usable), so that a root lithosd
//      schedules every user's processes without settings;
//   4. $XDG_RUNTIME_DIR/lithos/lithosd.sock (a per-user daemon);
//   5. /tmp/lithos-<uid>/lithosd.sock.
std::string default_socket_path();
inline constexpr const char* kSystemSocket = "/run/lithos/lithosd.sock";
// The rule above with its inputs given (tests): `socket_env` and `xdg` as
// $LITHOS_DAEMON_SOCKET and $XDG_RUNTIME_DIR (null: unset), `system` the
// system-wide path.
std::string default_socket_path_for(uid_t euid, const char* socket_env, const char* xdg, const std::string& system);
// Whether `path` is a socket (not a link to one) in a folder that belongs to
// root and that no one else may write to (unless sticky): a system-wide
// daemon's, which no other user can have put there.
bool system_socket_usable(const std::string& path);

// Client side, right after connecting to the daemon at `path` on `fd` and
// before sending it anything (a Hello names the process, its tenant and its
// program): whether it is a daemon this process may trust. The process
// listening there must run as root, as this process's effective uid, or as
// `daemon_uid` (the operator's lithosd user, LITHOS_DAEMON_UID; kNoUid:
// none), by SO_PEERCRED; and the folder holding the socket must belong to
// one of them and not be writable by others unless sticky (whoever can
// write there could have put their own socket in the daemon's place, as
// another user can by making /tmp/lithos-<uid> first).
// kFailedPrecondition saying which check failed otherwise.
inline constexpr uid_t kNoUid = static_cast<uid_t>(-1);
Status check_daemon(int fd, const std::string& path, uid_t daemon_uid);

// "%g" in a socket path (and in lithosd's state_dir and trace) stands for
// the UUID of a GPU as cuDeviceGetUuid names it ("GPU-" and 36 characters):
// lithosd puts in the GPU it schedules, a client the GPU of the context of
// the launch that registers it, so that one setting gives every GPU of a
// node a daemon of its own and every process the daemon of its GPU
// (docs/daemon.md, "Nodes with several GPUs").
inline constexpr std::string_view kGpuToken = "%g";
inline constexpr std::size_t kGpuUuidChars = 40;  // "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"
bool names_gpu(std::string_view path);
std::string with_gpu(std::string_view path, std::string_view gpu_uuid);
// The sockets that a path naming the GPU stands for now: every existing
// socket file at a path it gives for some GPU, sorted; a path without "%g"
// as it is.
std::vector<std::string> sockets_for_every_gpu(const std::string& path);

// mkdir -p of `dir`: the directories made here get 0755 whatever the umask
// (so that clients of other users can reach the socket); an existing
// non-directory is an error.
Status make_directories(const std::string& dir);

// The daemon's listening socket at `path` (non-blocking, close-on-exec),
// with the socket file's permissions set to `mode`.
//  - Missing parent directories are created (0755). The directory holding
//    the socket must belong to this user or to root and must not be
//    writable by others without the sticky bit: whoever controls it could
//    put their own socket in the daemon's place.
//  - An existing socket file is replaced only if nobody accepts connections
//    on it (a daemon that died); if someone answers, kUnavailable "another
//    daemon listens on <path>". A file that is not a socket is never removed.
//  - "<path>.lock" (flock, held only while the socket is set up) keeps two
//    daemons starting at once from both deciding the file is stale.
Result<int> listen_socket(const std::string& path, mode_t mode);

// A connection to the daemon at `path`, close-on-exec and blocking. Waits up
// to `timeout_ms` (< 0: no limit) while the daemon's backlog is full;
// kUnavailable when nobody listens there.
Result<int> connect_socket(const std::string& path, int timeout_ms);

// The next pending connection (non-blocking, close-on-exec), or kUnavailable
// "no pending connection". `error`, when given, is set to the errno of a
// failure (EAGAIN when none was pending; EMFILE or ENFILE when this
// process, or the system, is out of descriptors: the connection then still
// waits in the backlog), 0 on success.
Result<int> accept_client(int listen_fd, int* error = nullptr);

// Sends one packet of `n` bytes (n > 0: a zero-length packet would read as
// the peer's end), passing `pass_fd` along when it is >= 0 (the receiver
// gets its own descriptor of the same file). Never raises SIGPIPE (a closed
// peer is kUnavailable). On a non-blocking socket whose peer does not read,
// kUnavailable "would block" rather than waiting.
Status send_packet(int fd, const void* data, std::size_t n, int pass_fd = -1);

// Receives one packet into `data` (at most `cap` bytes), waiting up to
// `timeout_ms` (0: only what is already there; < 0: no limit). Returns its
// size; 0 means the peer closed the connection. kUnavailable "timed out"
// when nothing came. A packet larger than `cap` is consumed and reported as
// kInvalidArgument (SEQPACKET drops the excess; the caller must not act on
// half a message). If `received_fd` is given it is set to a descriptor that
// came with the packet (close-on-exec), else -1; descriptors beyond the
// first, or any when `received_fd` is null, are closed.
Result<std::size_t> recv_packet(int fd, void* data, std::size_t cap, int* received_fd, int timeout_ms);

// The process at the other end of a connected socket, as the kernel saw it
// when it connected (SO_PEERCRED): not forgeable by the peer.
struct PeerCred {
  pid_t pid;
  uid_t uid;
  gid_t gid;
};
Result<PeerCred> peer_credentials(int fd);

// The supplementary groups of that process, as the kernel saw them when it
// connected (SO_PEERGROUPS, Linux 4.13 and later; for a socketpair, its
// creator's getgroups()). kUnavailable where the kernel does not tell them
// (the message says so: tenants that admit a process by a supplementary
// group then admit it only by its uid or primary gid).
Result<std::vector<gid_t>> peer_groups(int fd);

}  // namespace lithos::ipc
