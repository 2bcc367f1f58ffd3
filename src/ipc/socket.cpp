#include "ipc/socket.hpp"

#include <fcntl.h>
#include <glob.h>
#include <poll.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "ipc/safe_file.hpp"

namespace lithos::ipc {

namespace {

// strerror_r, not strerror: liblithos.so calls this from the application's
// threads. (GNU strerror_r returns the text, in `buf` or a static string.)
std::string errno_text(const std::string& what, int err) {
  char buf[128];
  return what + ": " + ::strerror_r(err, buf, sizeof buf);
}

// Closes a descriptor at scope exit unless released.
class FdGuard {
 public:
  explicit FdGuard(int fd) : fd_(fd) {}
  ~FdGuard() {
    if (fd_ >= 0) ::close(fd_);
  }
  FdGuard(const FdGuard&) = delete;
  FdGuard& operator=(const FdGuard&) = delete;
  int get() const { return fd_; }
  int release() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }

 private:
  int fd_;
};

// sockaddr_un for `path`; false when it does not fit sun_path with its NUL.
bool make_address(const std::string& path, sockaddr_un* addr) {
  std::memset(addr, 0, sizeof *addr);
  addr->sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof addr->sun_path) return false;
  std::memcpy(addr->sun_path, path.data(), path.size());
  return true;
}

Status bad_path(const std::string& path) {
  return Status::invalid_argument("socket path '" + path + "' is empty or longer than " +
                                  std::to_string(sizeof(sockaddr_un{}.sun_path) - 1) + " bytes");
}

// The sockaddr casts the socket API asks for, in one place.
const sockaddr* as_sockaddr(const sockaddr_un* a) { return reinterpret_cast<const sockaddr*>(a); }

// The directory holding the socket decides who can replace the socket file.
Status check_directory(const std::string& dir) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) return Status::unavailable(errno_text("stat " + dir, errno));
  if (st.st_uid != ::geteuid() && st.st_uid != 0)
    return Status::failed_precondition("socket directory " + dir + " belongs to uid " + std::to_string(st.st_uid) +
                                       ", not to this user or root");
  if ((st.st_mode & S_IWOTH) != 0 && (st.st_mode & S_ISVTX) == 0)
    return Status::failed_precondition("socket directory " + dir + " is writable by everyone (and not sticky)");
  return Status::ok();
}

// Whether someone accepts connections at `addr`: true when a connect
// succeeds or the backlog is full (EAGAIN: a live listener that is busy).
Result<bool> somebody_listens(const sockaddr_un& addr, const std::string& path) {
  const FdGuard fd(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (fd.get() < 0) return Status::unavailable(errno_text("socket", errno));
  int r;
  do {
    r = ::connect(fd.get(), as_sockaddr(&addr), sizeof addr);
  } while (r != 0 && errno == EINTR);
  if (r == 0 || errno == EAGAIN) return true;
  // Refused: the file is a dead daemon's. Gone: someone removed it meanwhile.
  // Anything else (EACCES; EPROTOTYPE, a socket of another kind) leaves the
  // file alone: it is not known to be dead.
  if (errno == ECONNREFUSED || errno == ENOENT) return false;
  return Status::unavailable(errno_text("connect " + path, errno));
}

// Remaining milliseconds until `deadline` for poll(), or -1 for no deadline.
int remaining_ms(bool bounded, std::chrono::steady_clock::time_point deadline) {
  if (!bounded) return -1;
  const auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
  return left <= 0 ? 0 : static_cast<int>(left);
}

// Room for a few descriptors: one is expected, the rest are closed.
constexpr int kMaxFds = 4;

}  // namespace

Status make_directories(const std::string& dir) {
  if (dir.empty()) return Status::ok();
  std::size_t pos = 0;
  while (pos != std::string::npos) {
    pos = dir.find('/', pos + 1);
    const std::string part = dir.substr(0, pos);
    if (part.empty()) continue;
    if (::mkdir(part.c_str(), 0755) == 0) {
      if (::chmod(part.c_str(), 0755) != 0) return Status::unavailable(errno_text("chmod " + part, errno));
      continue;
    }
    if (errno != EEXIST) return Status::unavailable(errno_text("mkdir " + part, errno));
    struct stat st {};
    if (::stat(part.c_str(), &st) != 0) return Status::unavailable(errno_text("stat " + part, errno));
    if (!S_ISDIR(st.st_mode)) return Status::failed_precondition(part + " exists and is not a directory");
  }
  return Status::ok();
}

std::string default_socket_path() {
  // getenv races only with setenv, which lithos never calls.
  // NOLINTNEXTLINE(concurrency-mt-unsafe)
  const char* socket_env = std::getenv("LITHOS_DAEMON_SOCKET");
  // NOLINTNEXTLINE(concurrency-mt-unsafe)
  const char* xdg = std::getenv("XDG_RUNTIME_DIR");
  return default_socket_path_for(::geteuid(), socket_env, xdg, kSystemSocket);
}

std::string default_socket_path_for(uid_t euid, const char* socket_env, const char* xdg, const std::string& system) {
  if (socket_env != nullptr && *socket_env != '\0') return socket_env;
  if (euid == 0 || system_socket_usable(system)) return system;
  if (xdg != nullptr && *xdg != '\0') return std::string(xdg) + "/lithos/lithosd.sock";
  return "/tmp/lithos-" + std::to_string(euid) + "/lithosd.sock";
}

namespace {
// The folder holding socket `path` ("." for a bare name).
std::string folder_of(const std::string& path) {
  const std::size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
}
}  // namespace

bool system_socket_usable(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0 || !S_ISSOCK(st.st_mode)) return false;
  struct stat dir {};
  return ::stat(folder_of(path).c_str(), &dir) == 0 && S_ISDIR(dir.st_mode) && dir.st_uid == 0 &&
         ((dir.st_mode & S_IWOTH) == 0 || (dir.st_mode & S_ISVTX) != 0);
}

Status check_daemon(int fd, const std::string& path, uid_t daemon_uid) {
  const uid_t me = ::geteuid();
  auto trusted = [&](uid_t uid) { return uid == 0 || uid == me || (daemon_uid != kNoUid && uid == daemon_uid); };
  const std::string whom =
      "root, this user (uid " + std::to_string(me) + ")" +
      (daemon_uid != kNoUid ? " or the daemon's uid " + std::to_string(daemon_uid) : std::string(""));
  const std::string dir = folder_of(path);
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) return Status::failed_precondition(errno_text("stat " + dir, errno));
  if (!trusted(st.st_uid))
    return Status::failed_precondition("its folder " + dir + " belongs to uid " + std::to_string(st.st_uid) +
                                       ", not to " + whom);
  if ((st.st_mode & S_IWOTH) != 0 && (st.st_mode & S_ISVTX) == 0)
    return Status::failed_precondition("its folder " + dir + " is writable by everyone (and not sticky)");
  auto peer = peer_credentials(fd);
  if (!peer) return Status::failed_precondition(peer.status().message());
  if (!trusted(peer->uid))
    return Status::failed_precondition("the process listening there (pid " + std::to_string(peer->pid) +
                                       ") runs as uid " + std::to_string(peer->uid) + ", not as " + whom);
  return Status::ok();
}

bool names_gpu(std::string_view path) { return path.find(kGpuToken) != std::string_view::npos; }

std::string with_gpu(std::string_view path, std::string_view gpu_uuid) {
  std::string out;
  for (std::size_t at = 0;;) {
    const std::size_t next = path.find(kGpuToken, at);
    out.append(path.substr(at, next == std::string_view::npos ? std::string_view::npos : next - at));
    if (next == std::string_view::npos) return out;
    out.append(gpu_uuid);
    at = next + kGpuToken.size();
  }
}

std::vector<std::string> sockets_for_every_gpu(const std::string& path) {
  if (!names_gpu(path)) return {path};
  // glob(3) with every "%g" as "GPU-*", the pattern's other characters
  // escaped, so that only a GPU's UUID varies.
  std::string pattern;
  for (std::size_t i = 0; i < path.size(); ++i) {
    if (path.compare(i, kGpuToken.size(), kGpuToken) == 0) {
      pattern += "GPU-*";
      i += kGpuToken.size() - 1;
    } else {
      if (path[i] == '*' || path[i] == '?' || path[i] == '[' || path[i] == '\\') pattern += '\\';
      pattern += path[i];
    }
  }
  std::vector<std::string> out;
  glob_t g{};
  if (::glob(pattern.c_str(), GLOB_NOSORT, nullptr, &g) == 0) {
    for (std::size_t i = 0; i < g.gl_pathc; ++i) {
      struct stat st {};
      if (::stat(g.gl_pathv[i], &st) == 0 && S_ISSOCK(st.st_mode)) out.emplace_back(g.gl_pathv[i]);
    }
  }
  ::globfree(&g);
  std::sort(out.begin(), out.end());
  return out;
}

Result<int> listen_socket(const std::string& path, mode_t mode) {
  sockaddr_un addr{};
  if (!make_address(path, &addr)) return bad_path(path);
  const std::size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  LITHOS_RETURN_IF_ERROR(make_directories(slash == std::string::npos ? "" : dir));
  LITHOS_RETURN_IF_ERROR(check_directory(dir));

  // Serialise the look-at-the-old-file / bind sequence between daemons
  // starting together; released when this function returns.
  const std::string lock_path = path + ".lock";
  const FdGuard lock(::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (lock.get() < 0) return Status::unavailable(errno_text("open " + lock_path, errno));
  // Opened without following a link; whatever is there must be this user's
  // own file (another user's, in a sticky folder, could be held to block us).
  LITHOS_RETURN_IF_ERROR(check_own_regular_file(lock.get(), lock_path));
  // Whoever holds it only checks a file and binds: a few milliseconds. Wait
  // a bounded time rather than forever behind a stopped process.
  for (int tries = 0;; ++tries) {
    if (::flock(lock.get(), LOCK_EX | LOCK_NB) == 0) break;
    if (errno != EWOULDBLOCK && errno != EINTR) return Status::unavailable(errno_text("flock " + lock_path, errno));
    if (tries == 2000) return Status::unavailable("another daemon is starting on " + path + ", holding its lock");
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }

  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) return Status::failed_precondition(path + " exists and is not a socket");
    auto live = somebody_listens(addr, path);
    if (!live) return live.status();
    if (live.value()) return Status::unavailable("another daemon listens on " + path);
    if (::unlink(path.c_str()) != 0 && errno != ENOENT)
      return Status::unavailable(errno_text("removing the stale socket " + path, errno));
  } else if (errno != ENOENT) {
    return Status::unavailable(errno_text("lstat " + path, errno));
  }

  FdGuard fd(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (fd.get() < 0) return Status::unavailable(errno_text("socket", errno));
  if (::bind(fd.get(), as_sockaddr(&addr), sizeof addr) != 0)
    return Status::unavailable(errno_text("bind " + path, errno));
  // bind() made the file with the umask's permissions; clients of other
  // users need the ones asked for.
  if (::chmod(path.c_str(), mode) != 0) {
    const int err = errno;
    ::unlink(path.c_str());
    return Status::unavailable(errno_text("chmod " + path, err));
  }
  if (::listen(fd.get(), 128) != 0) {
    const int err = errno;
    ::unlink(path.c_str());
    return Status::unavailable(errno_text("listen " + path, err));
  }
  return fd.release();
}

Result<int> connect_socket(const std::string& path, int timeout_ms) {
  sockaddr_un addr{};
  if (!make_address(path, &addr)) return bad_path(path);
  FdGuard fd(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (fd.get() < 0) return Status::unavailable(errno_text("socket", errno));
  // A Unix-domain connect completes at once or fails at once, except when
  // the listener's backlog is full (EAGAIN on a non-blocking socket): then
  // retry until the deadline. Non-blocking keeps the wait bounded and safe
  // against signals.
  const bool bounded = timeout_ms >= 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(bounded ? timeout_ms : 0);
  while (::connect(fd.get(), as_sockaddr(&addr), sizeof addr) != 0) {
    if (errno == EINTR) continue;
    if (errno != EAGAIN) return Status::unavailable(errno_text("connect " + path, errno));
    if (remaining_ms(bounded, deadline) == 0)
      return Status::unavailable("connect " + path + ": timed out (the daemon's backlog is full)");
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  // Blocking from here: the caller bounds its reads with recv_packet's
  // timeout, and a short Hello always fits the socket's buffer.
  const int flags = ::fcntl(fd.get(), F_GETFL);
  if (flags < 0 || ::fcntl(fd.get(), F_SETFL, flags & ~O_NONBLOCK) != 0)
    return Status::unavailable(errno_text("fcntl", errno));
  return fd.release();
}

Result<int> accept_client(int listen_fd, int* error) {
  while (true) {
    const int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    const int err = fd >= 0 ? 0 : errno;
    if (error != nullptr) *error = err == EWOULDBLOCK ? EAGAIN : err;
    if (fd >= 0) return fd;
    // ECONNABORTED: that client gave up before we got to it; try the next.
    if (err == EINTR || err == ECONNABORTED) continue;
    if (err == EAGAIN || err == EWOULDBLOCK) return Status::unavailable("no pending connection");
    return Status::unavailable(errno_text("accept", err));
  }
}

Status send_packet(int fd, const void* data, std::size_t n, int pass_fd) {
  if (n == 0) return Status::invalid_argument("send_packet: empty packet (reads as the end of the connection)");
  iovec iov{};
  iov.iov_base = const_cast<void*>(data);  // sendmsg does not write through it
  iov.iov_len = n;
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  // Control buffer aligned for cmsghdr, as CMSG_* expect.
  alignas(cmsghdr) unsigned char control[CMSG_SPACE(sizeof(int))] = {};
  if (pass_fd >= 0) {
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &pass_fd, sizeof(int));
  }
  ssize_t r;
  do {
    r = ::sendmsg(fd, &msg, MSG_NOSIGNAL);
  } while (r < 0 && errno == EINTR);
  if (r < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK)
      return Status::unavailable("send: would block (the peer does not read)");
    return Status::unavailable(errno_text("send", errno));
  }
  // SEQPACKET sends whole packets or fails; anything else is a kernel surprise.
  if (static_cast<std::size_t>(r) != n)
    return Status::internal("send: " + std::to_string(r) + " of " + std::to_string(n) + " bytes sent");
  return Status::ok();
}

Result<std::size_t> recv_packet(int fd, void* data, std::size_t cap, int* received_fd, int timeout_ms) {
  if (received_fd != nullptr) *received_fd = -1;
  const bool bounded = timeout_ms >= 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(bounded ? timeout_ms : 0);
  while (true) {
    pollfd p{};
    p.fd = fd;
    p.events = POLLIN;
    const int ready = ::poll(&p, 1, remaining_ms(bounded, deadline));
    if (ready < 0) {
      if (errno == EINTR) continue;
      return Status::unavailable(errno_text("poll", errno));
    }
    if (ready == 0) return Status::unavailable("timed out");
    if ((p.revents & POLLNVAL) != 0) return Status::invalid_argument("recv: not an open descriptor");

    iovec iov{};
    iov.iov_base = data;
    iov.iov_len = cap;
    alignas(cmsghdr) unsigned char control[CMSG_SPACE(kMaxFds * sizeof(int))] = {};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    // MSG_DONTWAIT: poll's readiness may be stale (another reader); then
    // wait again rather than block past the deadline.
    const ssize_t r = ::recvmsg(fd, &msg, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
    if (r < 0) {
      if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) {
        if (bounded && remaining_ms(bounded, deadline) == 0) return Status::unavailable("timed out");
        continue;
      }
      return Status::unavailable(errno_text("recv", errno));
    }

    // Take the first descriptor passed (if the caller wants one); close the rest.
    int kept = -1;
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
      const std::size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (std::size_t i = 0; i < count; ++i) {
        int got = -1;
        std::memcpy(&got, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
        if (kept < 0 && received_fd != nullptr) {
          kept = got;
        } else {
          ::close(got);
        }
      }
    }
    const bool truncated = (msg.msg_flags & MSG_TRUNC) != 0;
    const bool ctruncated = (msg.msg_flags & MSG_CTRUNC) != 0;
    if (truncated || ctruncated) {
      if (kept >= 0) ::close(kept);
      if (truncated)
        return Status::invalid_argument("recv: packet larger than " + std::to_string(cap) + " bytes (truncated)");
      return Status::invalid_argument("recv: more than " + std::to_string(kMaxFds) + " descriptors in one packet");
    }
    if (received_fd != nullptr) *received_fd = kept;
    return static_cast<std::size_t>(r);
  }
}

Result<PeerCred> peer_credentials(int fd) {
  ucred c{};
  socklen_t len = sizeof c;
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &c, &len) != 0)
    return Status::unavailable(errno_text("getsockopt(SO_PEERCRED)", errno));
  if (len != sizeof c) return Status::internal("SO_PEERCRED returned " + std::to_string(len) + " bytes");
  return PeerCred{c.pid, c.uid, c.gid};
}

Result<std::vector<gid_t>> peer_groups(int fd) {
#ifndef SO_PEERGROUPS
  constexpr int SO_PEERGROUPS = 59;  // Linux 4.13 (asm-generic/socket.h); older headers lack it
#endif
  // A guess that holds most processes' groups; the kernel says how many
  // bytes it needs when it does not (ERANGE), up to NGROUPS_MAX (65536).
  std::vector<gid_t> groups(64);
  for (int tries = 0; tries < 4; ++tries) {
    auto len = static_cast<socklen_t>(groups.size() * sizeof(gid_t));
    if (::getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups.data(), &len) == 0) {
      groups.resize(len / sizeof(gid_t));
      return groups;
    }
    if (errno == ERANGE && len > groups.size() * sizeof(gid_t) && len <= 65536 * sizeof(gid_t)) {
      groups.resize(len / sizeof(gid_t));
      continue;
    }
    if (errno == ENOPROTOOPT) {
      return Status::unavailable(
          "this kernel does not tell a socket's peer's supplementary groups (SO_PEERGROUPS, Linux 4.13)");
    }
    return Status::unavailable(errno_text("getsockopt(SO_PEERGROUPS)", errno));
  }
  return Status::unavailable("getsockopt(SO_PEERGROUPS): the peer's groups kept growing");
}

}  // namespace lithos::ipc
