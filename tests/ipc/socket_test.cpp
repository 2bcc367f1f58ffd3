// The registration socket: listening (directories, permissions, a second
// daemon, a stale file), connecting, packets with a passed descriptor,
// credentials, the peer's end and timeouts.
#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "ipc/channel.hpp"
#include "ipc/socket.hpp"
#include "ipc/validate.hpp"

namespace lithos::ipc {
namespace {

// A fresh directory under /tmp per test, removed with its contents after.
class IpcSocket : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/lithos-ipc-test-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    path_ = dir_ + "/lithosd.sock";
  }
  void TearDown() override {
    for (int fd : fds_) ::close(fd);
    remove_tree(dir_);
  }
  static void remove_tree(const std::string& d) {
    if (DIR* h = ::opendir(d.c_str())) {
      while (dirent* e = ::readdir(h)) {
        const std::string n = e->d_name;
        if (n == "." || n == "..") continue;
        const std::string p = d + "/" + n;
        struct stat st {};
        if (::lstat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
          remove_tree(p);
        } else {
          ::unlink(p.c_str());
        }
      }
      ::closedir(h);
    }
    ::rmdir(d.c_str());
  }
  // Keeps a descriptor to close at the end of the test.
  int keep(int fd) {
    fds_.push_back(fd);
    return fd;
  }
  // A listening socket, a connected client and the daemon's end of it.
  void connect_pair(int* listener, int* client, int* server) {
    auto l = listen_socket(path_, 0600);
    ASSERT_TRUE(l.is_ok()) << l.status().to_string();
    *listener = keep(l.value());
    auto c = connect_socket(path_, 1000);
    ASSERT_TRUE(c.is_ok()) << c.status().to_string();
    *client = keep(c.value());
    auto s = accept_client(*listener);
    ASSERT_TRUE(s.is_ok()) << s.status().to_string();
    *server = keep(s.value());
  }

  std::string dir_, path_;
  std::vector<int> fds_;
};

// "%g" in a path is a GPU's UUID (one lithosd per GPU): replaced
// everywhere it stands, and a pattern finds the sockets of every GPU that
// exist (not the lock files beside them, not other files of that form).
TEST_F(IpcSocket, PathsNameTheGpuWithPercentG) {
  EXPECT_TRUE(names_gpu("/run/lithos/lithosd-%g.sock"));
  EXPECT_FALSE(names_gpu("/run/lithos/lithosd.sock"));
  EXPECT_EQ(with_gpu("/a/%g/lithosd-%g.sock", "GPU-1"), "/a/GPU-1/lithosd-GPU-1.sock");
  EXPECT_EQ(with_gpu("/a/lithosd.sock", "GPU-1"), "/a/lithosd.sock");
  EXPECT_EQ(with_gpu("%g", "GPU-x"), "GPU-x");

  const std::string pattern = dir_ + "/l*-%g.sock";  // a '*' of the path is not a wildcard
  EXPECT_TRUE(sockets_for_every_gpu(pattern).empty());
  std::vector<std::string> made;
  for (const char* gpu : {"GPU-b", "GPU-a"}) {
    const std::string p = with_gpu(pattern, gpu);
    auto l = listen_socket(p, 0600);
    ASSERT_TRUE(l.is_ok()) << l.status().to_string();
    keep(l.value());
    made.push_back(p);
  }
  std::ofstream(with_gpu(pattern, "GPU-c")) << "not a socket";
  std::ofstream(dir_ + "/lx-GPU-d.sock") << "";  // another name: not the pattern's
  EXPECT_EQ(sockets_for_every_gpu(pattern), (std::vector<std::string>{made[1], made[0]}));
  EXPECT_EQ(sockets_for_every_gpu(path_), std::vector<std::string>{path_}) << "no %g: the path as it is";
}

int open_fd_count() {
  int n = 0;
  if (DIR* h = ::opendir("/proc/self/fd")) {
    while (::readdir(h) != nullptr) ++n;
    ::closedir(h);
  }
  return n;
}

TEST_F(IpcSocket, HelloWelcomeWithChannel) {
  int listener = -1, client = -1, server = -1;
  ASSERT_NO_FATAL_FAILURE(connect_pair(&listener, &client, &server));

  // Client -> daemon: Hello.
  Hello hello;
  hello.pid = static_cast<std::int32_t>(::getpid());
  std::strcpy(hello.tenant, "inference");
  std::strcpy(hello.program, "ipc_test");
  ASSERT_TRUE(send_packet(client, &hello, sizeof hello).is_ok());
  Hello got_hello;
  int none = -2;
  auto n = recv_packet(server, &got_hello, sizeof got_hello, &none, 1000);
  ASSERT_TRUE(n.is_ok()) << n.status().to_string();
  EXPECT_EQ(n.value(), sizeof hello);
  EXPECT_EQ(none, -1);  // no descriptor came
  ASSERT_TRUE(validate_hello(got_hello).is_ok());
  EXPECT_STREQ(got_hello.tenant, "inference");

  // Daemon -> client: Welcome with the channel's descriptor.
  auto ch = Channel::create(4, 1, 77);
  ASSERT_TRUE(ch.is_ok());
  Welcome w;
  w.client_id = 4;
  w.channel_bytes = static_cast<std::uint32_t>(ch->bytes());
  ASSERT_TRUE(send_packet(server, &w, sizeof w, ch->fd()).is_ok());
  Welcome got_w;
  int chfd = -1;
  n = recv_packet(client, &got_w, sizeof got_w, &chfd, 1000);
  ASSERT_TRUE(n.is_ok()) << n.status().to_string();
  EXPECT_EQ(n.value(), sizeof w);
  ASSERT_GE(chfd, 0);
  EXPECT_NE(chfd, ch->fd());
  EXPECT_NE(::fcntl(chfd, F_GETFD) & FD_CLOEXEC, 0);  // MSG_CMSG_CLOEXEC
  EXPECT_EQ(got_w.client_id, 4U);
  EXPECT_EQ(got_w.channel_bytes, ch->bytes());

  // The passed descriptor maps the same memory, both ways.
  auto mine = Channel::attach(chfd);
  ASSERT_TRUE(mine.is_ok()) << mine.status().to_string();
  EXPECT_EQ(mine->layout().header.daemon_epoch, 77U);
  ch->layout().header.heartbeat_ns.store(123456);
  EXPECT_EQ(mine->layout().header.heartbeat_ns.load(), 123456U);
  mine->layout().completed[17].store(99);
  EXPECT_EQ(ch->layout().completed[17].load(), 99U);
  SubmitMsg m;
  m.seq = 5;
  ASSERT_TRUE(mine->layout().submit.push(m));
  SubmitMsg popped;
  ASSERT_TRUE(ch->layout().submit.pop(&popped));
  EXPECT_EQ(popped.seq, 5U);
}

TEST_F(IpcSocket, PeerCredentialsAreOurs) {
  int listener = -1, client = -1, server = -1;
  ASSERT_NO_FATAL_FAILURE(connect_pair(&listener, &client, &server));
  for (int fd : {server, client}) {
    auto cred = peer_credentials(fd);
    ASSERT_TRUE(cred.is_ok()) << cred.status().to_string();
    EXPECT_EQ(cred->pid, ::getpid());
    EXPECT_EQ(cred->uid, ::geteuid());
    EXPECT_EQ(cred->gid, ::getegid());
  }
  EXPECT_FALSE(peer_credentials(-1).is_ok());
}

TEST_F(IpcSocket, EndOfConnection) {
  int listener = -1, client = -1, server = -1;
  ASSERT_NO_FATAL_FAILURE(connect_pair(&listener, &client, &server));
  const char hi[] = "hi";
  ASSERT_TRUE(send_packet(client, hi, sizeof hi).is_ok());
  ::shutdown(client, SHUT_RDWR);
  char buf[16];
  auto n = recv_packet(server, buf, sizeof buf, nullptr, 1000);
  ASSERT_TRUE(n.is_ok());
  EXPECT_EQ(n.value(), sizeof hi);  // what was sent before the end still arrives
  n = recv_packet(server, buf, sizeof buf, nullptr, 1000);
  ASSERT_TRUE(n.is_ok()) << n.status().to_string();
  EXPECT_EQ(n.value(), 0U);
  // Writing to a closed peer is an error, not SIGPIPE.
  const Status s = send_packet(server, hi, sizeof hi);
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.to_string();
}

TEST_F(IpcSocket, Timeouts) {
  int listener = -1, client = -1, server = -1;
  ASSERT_NO_FATAL_FAILURE(connect_pair(&listener, &client, &server));
  char buf[16];
  const auto t0 = std::chrono::steady_clock::now();
  auto n = recv_packet(client, buf, sizeof buf, nullptr, 100);
  const auto waited = std::chrono::steady_clock::now() - t0;
  ASSERT_FALSE(n.is_ok());
  EXPECT_EQ(n.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(n.status().message().find("timed out"), std::string::npos);
  // Never early; late by any amount on a loaded machine, but it returns
  // (the bound only catches a wait that never ends).
  EXPECT_GE(waited, std::chrono::milliseconds(90));
  EXPECT_LT(waited, std::chrono::seconds(60));
  // 0: only what is there already.
  n = recv_packet(server, buf, sizeof buf, nullptr, 0);
  EXPECT_EQ(n.status().code(), StatusCode::kUnavailable);
  const char x[] = "x";
  ASSERT_TRUE(send_packet(client, x, sizeof x).is_ok());
  n = recv_packet(server, buf, sizeof buf, nullptr, 0);
  ASSERT_TRUE(n.is_ok());
  EXPECT_EQ(n.value(), sizeof x);
  // Nothing pending on the listener.
  auto a = accept_client(listener);
  ASSERT_FALSE(a.is_ok());
  EXPECT_EQ(a.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(a.status().message().find("no pending connection"), std::string::npos);
}

TEST_F(IpcSocket, TruncatedPacketAndExtraDescriptors) {
  int listener = -1, client = -1, server = -1;
  ASSERT_NO_FATAL_FAILURE(connect_pair(&listener, &client, &server));
  const int passed = keep(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  ASSERT_GE(passed, 0);
  const int before = open_fd_count();
  char big[100] = {};
  ASSERT_TRUE(send_packet(server, big, sizeof big, passed).is_ok());
  char small[10];
  int got = -1;
  auto n = recv_packet(client, small, sizeof small, &got, 1000);
  ASSERT_FALSE(n.is_ok());
  EXPECT_EQ(n.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(n.status().message().find("truncated"), std::string::npos) << n.status().message();
  EXPECT_EQ(got, -1);
  EXPECT_EQ(open_fd_count(), before);  // the passed descriptor was closed
  // A descriptor nobody asked for is closed too.
  ASSERT_TRUE(send_packet(server, big, sizeof big, passed).is_ok());
  n = recv_packet(client, big, sizeof big, nullptr, 1000);
  ASSERT_TRUE(n.is_ok());
  EXPECT_EQ(open_fd_count(), before);
  // An empty packet would read as the end of the connection.
  EXPECT_EQ(send_packet(server, big, 0).code(), StatusCode::kInvalidArgument);
}

TEST_F(IpcSocket, SecondListenerRefused) {
  auto first = listen_socket(path_, 0600);
  ASSERT_TRUE(first.is_ok()) << first.status().to_string();
  keep(first.value());
  auto second = listen_socket(path_, 0600);
  ASSERT_FALSE(second.is_ok());
  EXPECT_EQ(second.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(second.status().message().find("another daemon listens on " + path_), std::string::npos)
      << second.status().message();
  // The first one still works.
  auto c = connect_socket(path_, 1000);
  ASSERT_TRUE(c.is_ok());
  keep(c.value());
  EXPECT_TRUE(accept_client(first.value()).is_ok());
}

TEST_F(IpcSocket, StaleSocketReplaced) {
  // A daemon that died: its socket file is left, nobody listens.
  const int dead = ::socket(AF_UNIX, SOCK_SEQPACKET, 0);
  ASSERT_GE(dead, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strcpy(addr.sun_path, path_.c_str());
  ASSERT_EQ(::bind(dead, reinterpret_cast<const sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(::listen(dead, 1), 0);
  ::close(dead);
  struct stat st {};
  ASSERT_EQ(::lstat(path_.c_str(), &st), 0);
  auto l = listen_socket(path_, 0600);
  ASSERT_TRUE(l.is_ok()) << l.status().to_string();
  keep(l.value());
  auto c = connect_socket(path_, 1000);
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  keep(c.value());
  EXPECT_TRUE(accept_client(l.value()).is_ok());
}

TEST_F(IpcSocket, NonSocketFileKept) {
  const int f = ::open(path_.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
  ASSERT_GE(f, 0);
  ::close(f);
  auto l = listen_socket(path_, 0600);
  ASSERT_FALSE(l.is_ok());
  EXPECT_NE(l.status().message().find("not a socket"), std::string::npos) << l.status().message();
  struct stat st {};
  ASSERT_EQ(::lstat(path_.c_str(), &st), 0);
  EXPECT_TRUE(S_ISREG(st.st_mode));
}

TEST_F(IpcSocket, DirectoriesModeAndFlags) {
  const std::string deep = dir_ + "/a/b/lithosd.sock";
  const mode_t old = ::umask(077);  // directories are 0755 whatever the umask
  auto l = listen_socket(deep, 0666);
  ::umask(old);
  ASSERT_TRUE(l.is_ok()) << l.status().to_string();
  keep(l.value());
  struct stat st {};
  ASSERT_EQ(::stat((dir_ + "/a/b").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0755U);
  ASSERT_EQ(::lstat(deep.c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_mode & 07777, 0666U);
  EXPECT_NE(::fcntl(l.value(), F_GETFD) & FD_CLOEXEC, 0);
  EXPECT_NE(::fcntl(l.value(), F_GETFL) & O_NONBLOCK, 0);

  auto c = connect_socket(deep, 1000);
  ASSERT_TRUE(c.is_ok());
  keep(c.value());
  EXPECT_NE(::fcntl(c.value(), F_GETFD) & FD_CLOEXEC, 0);
  EXPECT_EQ(::fcntl(c.value(), F_GETFL) & O_NONBLOCK, 0);  // the client's end blocks
  auto s = accept_client(l.value());
  ASSERT_TRUE(s.is_ok());
  keep(s.value());
  EXPECT_NE(::fcntl(s.value(), F_GETFD) & FD_CLOEXEC, 0);
  EXPECT_NE(::fcntl(s.value(), F_GETFL) & O_NONBLOCK, 0);  // the daemon's never blocks
}

TEST_F(IpcSocket, UnsafeDirectoryRefused) {
  const std::string open_dir = dir_ + "/open";
  ASSERT_EQ(::mkdir(open_dir.c_str(), 0700), 0);
  ASSERT_EQ(::chmod(open_dir.c_str(), 0777), 0);  // anyone could swap the socket
  auto l = listen_socket(open_dir + "/lithosd.sock", 0600);
  ASSERT_FALSE(l.is_ok());
  EXPECT_NE(l.status().message().find("writable by everyone"), std::string::npos) << l.status().message();
  ASSERT_EQ(::chmod(open_dir.c_str(), 01777), 0);  // sticky, like /tmp: fine
  l = listen_socket(open_dir + "/lithosd.sock", 0600);
  ASSERT_TRUE(l.is_ok()) << l.status().to_string();
  keep(l.value());
}

TEST_F(IpcSocket, ConnectFailures) {
  auto c = connect_socket(dir_ + "/nobody.sock", 100);
  ASSERT_FALSE(c.is_ok());
  EXPECT_EQ(c.status().code(), StatusCode::kUnavailable);
  const std::string too_long(200, 'x');
  EXPECT_EQ(connect_socket("/tmp/" + too_long, 100).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(listen_socket("/tmp/" + too_long, 0600).status().code(), StatusCode::kInvalidArgument);
}

// Restores an environment variable at scope exit.
class EnvGuard {
 public:
  explicit EnvGuard(const char* name) : name_(name) {
    if (const char* v = std::getenv(name)) {
      had_ = true;
      value_ = v;
    }
  }
  ~EnvGuard() {
    if (had_) {
      ::setenv(name_, value_.c_str(), 1);
    } else {
      ::unsetenv(name_);
    }
  }
  EnvGuard(const EnvGuard&) = delete;
  EnvGuard& operator=(const EnvGuard&) = delete;

 private:
  const char* name_;
  bool had_ = false;
  std::string value_;
};

TEST(IpcSocketPath, Default) {
  const EnvGuard a("LITHOS_DAEMON_SOCKET"), b("XDG_RUNTIME_DIR");
  ::setenv("LITHOS_DAEMON_SOCKET", "/somewhere/d.sock", 1);
  EXPECT_EQ(default_socket_path(), "/somewhere/d.sock");
  ::setenv("LITHOS_DAEMON_SOCKET", "", 1);  // empty: as if unset
  ::setenv("XDG_RUNTIME_DIR", "/run/user/4242", 1);
  if (::geteuid() == 0 || system_socket_usable(kSystemSocket)) {
    EXPECT_EQ(default_socket_path(), "/run/lithos/lithosd.sock");
  } else {
    EXPECT_EQ(default_socket_path(), "/run/user/4242/lithos/lithosd.sock");
    ::unsetenv("XDG_RUNTIME_DIR");
    EXPECT_EQ(default_socket_path(), "/tmp/lithos-" + std::to_string(::geteuid()) + "/lithosd.sock");
  }
}

// A socket file bound at `path` (nobody needs to listen for the path rule);
// the descriptor, or -1.
int bound_socket(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof addr.sun_path) return -1;
  std::memcpy(addr.sun_path, path.c_str(), path.size());
  const int fd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (fd >= 0 && ::bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// A user other than root and this one (nobody), for ownership checks.
constexpr uid_t kOtherUid = 65534;

// A non-root user finds a system-wide daemon's socket first, without
// settings, when it is a socket (not a link to one) in a folder of root's
// that no one else may write to; else the per-user paths. Root always
// takes the system path, and $LITHOS_DAEMON_SOCKET wins over everything.
TEST_F(IpcSocket, ASystemDaemonsSocketIsFoundFirst) {
  const std::string sys = dir_ + "/sys.sock";
  const std::string xdg_path = "/run/user/4242/lithos/lithosd.sock";
  EXPECT_EQ(default_socket_path_for(4242, "/x/d.sock", "/run/user/4242", sys), "/x/d.sock");
  EXPECT_EQ(default_socket_path_for(0, nullptr, "/run/user/0", sys), sys);
  // No socket there: the per-user paths.
  EXPECT_FALSE(system_socket_usable(sys));
  EXPECT_EQ(default_socket_path_for(4242, nullptr, "/run/user/4242", sys), xdg_path);
  EXPECT_EQ(default_socket_path_for(4242, "", nullptr, sys), "/tmp/lithos-4242/lithosd.sock");
  // A file that is not a socket, and a link to a socket, are not taken.
  std::ofstream(dir_ + "/file.sock") << "x";
  EXPECT_FALSE(system_socket_usable(dir_ + "/file.sock"));
  const int fd = keep(bound_socket(sys));
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::symlink(sys.c_str(), (dir_ + "/link.sock").c_str()), 0);
  EXPECT_FALSE(system_socket_usable(dir_ + "/link.sock"));
  if (::geteuid() != 0) {
    // This user's folder is not root's: not a system daemon's socket.
    EXPECT_FALSE(system_socket_usable(sys));
    GTEST_SKIP() << "the rest needs root (a folder of root's, chown)";
  }
  ASSERT_EQ(::chmod(dir_.c_str(), 0755), 0);
  EXPECT_TRUE(system_socket_usable(sys));
  EXPECT_EQ(default_socket_path_for(4242, nullptr, "/run/user/4242", sys), sys);
  ASSERT_EQ(::chmod(dir_.c_str(), 0777), 0);  // anyone could have put it there
  EXPECT_FALSE(system_socket_usable(sys));
  EXPECT_EQ(default_socket_path_for(4242, nullptr, "/run/user/4242", sys), xdg_path);
  ASSERT_EQ(::chmod(dir_.c_str(), 01777), 0);  // sticky, as /tmp: only its owner can replace it
  EXPECT_TRUE(system_socket_usable(sys));
  ASSERT_EQ(::chmod(dir_.c_str(), 0755), 0);
  ASSERT_EQ(::chown(dir_.c_str(), kOtherUid, kOtherUid), 0);  // another user's folder
  EXPECT_FALSE(system_socket_usable(sys));
  EXPECT_EQ(default_socket_path_for(4242, nullptr, "/run/user/4242", sys), xdg_path);
}

// A client checks the daemon before it sends anything: the folder holding
// the socket must belong to root, to this user or to the daemon's uid, and
// not be writable by everyone unless sticky.
TEST_F(IpcSocket, ClientChecksTheDaemonsFolder) {
  int listener = -1, client = -1, server = -1;
  connect_pair(&listener, &client, &server);
  ASSERT_TRUE(check_daemon(client, path_, kNoUid).is_ok()) << check_daemon(client, path_, kNoUid).to_string();
  ASSERT_EQ(::chmod(dir_.c_str(), 0777), 0);
  Status st = check_daemon(client, path_, kNoUid);
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(st.message().find("writable by everyone"), std::string::npos) << st.message();
  ASSERT_EQ(::chmod(dir_.c_str(), 01777), 0);
  EXPECT_TRUE(check_daemon(client, path_, kNoUid).is_ok());
  ASSERT_EQ(::chmod(dir_.c_str(), 0755), 0);
  if (::geteuid() != 0) GTEST_SKIP() << "a folder of another user needs root (chown)";
  ASSERT_EQ(::chown(dir_.c_str(), kOtherUid, kOtherUid), 0);
  st = check_daemon(client, path_, kNoUid);
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(st.message().find("belongs to uid 65534"), std::string::npos) << st.message();
  EXPECT_TRUE(check_daemon(client, path_, kOtherUid).is_ok());  // the daemon's configured uid
}

// ... and the process listening there (SO_PEERCRED) must run as root, as
// this user or as the daemon's uid: a daemon of another uid is refused.
TEST_F(IpcSocket, ClientChecksWhoListens) {
  if (::geteuid() != 0) GTEST_SKIP() << "a listener of another uid needs root (setuid)";
  ASSERT_EQ(::chmod(dir_.c_str(), 0755), 0);
  int ready[2];
  ASSERT_EQ(::pipe2(ready, O_CLOEXEC), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // Bound as root in root's folder, listening as another uid: the
    // credentials a client sees are those of the listen().
    const int fd = bound_socket(path_);
    if (fd < 0 || ::setgid(kOtherUid) != 0 || ::setuid(kOtherUid) != 0 || ::listen(fd, 4) != 0) ::_exit(1);
    const char c = 'r';
    if (::write(ready[1], &c, 1) != 1) ::_exit(1);
    ::pause();
    ::_exit(0);
  }
  ::close(ready[1]);
  char c = 0;
  const bool up = ::read(ready[0], &c, 1) == 1;
  ::close(ready[0]);
  Status mine, configured;
  if (up) {
    auto fd = connect_socket(path_, 1000);
    if (fd) {
      mine = check_daemon(fd.value(), path_, kNoUid);
      configured = check_daemon(fd.value(), path_, kOtherUid);
      ::close(fd.value());
    }
  }
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  ASSERT_TRUE(up) << "the listener of uid 65534 did not start";
  EXPECT_EQ(mine.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(mine.message().find("runs as uid 65534"), std::string::npos) << mine.message();
  EXPECT_TRUE(configured.is_ok()) << configured.to_string();
}

}  // namespace
}  // namespace lithos::ipc
