// How lithosd writes files (ipc/safe_file.hpp): never through a link or a
// temporary name someone planted, only into folders no other user can
// change; the socket's lock file; and the peer's supplementary groups
// (SO_PEERGROUPS). Cases that need another user's files or groups run as
// root only and are skipped with the reason otherwise.
#include "ipc/safe_file.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "ipc/socket.hpp"

namespace lithos::ipc {
namespace {

constexpr uid_t kOtherUid = 4242;  // a uid that is neither root nor ours (root-only cases)
constexpr gid_t kOtherGid = 4343;

std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

void write_text(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

std::vector<std::string> names_in(const std::string& dir) {
  std::vector<std::string> out;
  if (DIR* h = ::opendir(dir.c_str())) {
    while (dirent* e = ::readdir(h)) {
      const std::string n = e->d_name;
      if (n != "." && n != "..") out.push_back(n);
    }
    ::closedir(h);
  }
  std::sort(out.begin(), out.end());
  return out;
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// A fresh folder under /tmp per test (0700, ours), removed after.
class SafeFile : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/lithos-safe-file-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    victim_ = dir_ + "/victim";
    write_text(victim_, "precious\n");
  }
  void TearDown() override { remove_tree(dir_); }
  static void remove_tree(const std::string& d) {
    for (const std::string& n : names_in(d)) {
      const std::string p = d + "/" + n;
      struct stat st {};
      if (::lstat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
        remove_tree(p);
      } else {
        ::unlink(p.c_str());
      }
    }
    ::rmdir(d.c_str());
  }
  std::string sub(const std::string& name, mode_t mode) const {
    const std::string p = dir_ + "/" + name;
    EXPECT_EQ(::mkdir(p.c_str(), 0700), 0);
    EXPECT_EQ(::chmod(p.c_str(), mode), 0);
    return p;
  }
  std::string dir_, victim_;
};

TEST_F(SafeFile, WritesAFileWholeAndReplacesIt) {
  const std::string path = dir_ + "/made/here/x.txt";
  ASSERT_TRUE(write_file_safely(path, "one\n", 0640, /*create_folders=*/true, /*sync=*/true).is_ok());
  EXPECT_EQ(read_text(path), "one\n");
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0640U);
  ASSERT_EQ(::stat((dir_ + "/made").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0755U);
  ASSERT_TRUE(write_file_safely(path, "two\n", 0640, true, false).is_ok());
  EXPECT_EQ(read_text(path), "two\n");
  EXPECT_EQ(names_in(dir_ + "/made/here"), std::vector<std::string>{"x.txt"}) << "no temporary file left";
  auto back = read_file_safely(path, 100);
  ASSERT_TRUE(back.is_ok()) << back.status().to_string();
  EXPECT_EQ(*back, "two\n");
  EXPECT_EQ(read_file_safely(path, 2).status().code(), StatusCode::kInvalidArgument);  // larger than asked
  EXPECT_EQ(read_file_safely(dir_ + "/none", 100).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(read_file_safely(dir_ + "/no-folder/none", 100).status().code(), StatusCode::kNotFound);
  // Without create_folders a missing folder is kNotFound.
  EXPECT_EQ(write_file_safely(dir_ + "/missing/x", "", 0600, false, false).code(), StatusCode::kNotFound);
}

TEST_F(SafeFile, FoldersAreMade0755WhateverTheUmask) {
  const mode_t old = ::umask(002);
  const Status s = write_file_safely(dir_ + "/a/b/x", "x", 0644, true, false);
  ::umask(old);
  ASSERT_TRUE(s.is_ok()) << s.to_string();
  struct stat st {};
  ASSERT_EQ(::stat((dir_ + "/a/b").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0755U);
}

TEST_F(SafeFile, ALinkAtTheTargetIsRefusedAndItsTargetUntouched) {
  const std::string path = dir_ + "/trace.jsonl";
  ASSERT_EQ(::symlink(victim_.c_str(), path.c_str()), 0);
  const Status w = write_file_safely(path, "overwritten\n", 0644, false, false);
  EXPECT_EQ(w.code(), StatusCode::kFailedPrecondition) << w.to_string();
  EXPECT_TRUE(contains(w.message(), path + " is a symbolic link")) << w.message();
  auto c = create_file_safely(path, 0644, false);
  ASSERT_FALSE(c.is_ok());
  EXPECT_TRUE(contains(c.status().message(), "symbolic link")) << c.status().message();
  auto r = read_file_safely(path, 100);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition) << r.status().to_string();
  EXPECT_EQ(read_text(victim_), "precious\n");
  struct stat st {};
  ASSERT_EQ(::lstat(path.c_str(), &st), 0);
  EXPECT_TRUE(S_ISLNK(st.st_mode)) << "the link is left as it was";
  EXPECT_EQ(names_in(dir_), (std::vector<std::string>{"trace.jsonl", "victim"})) << "no temporary file left";
}

TEST_F(SafeFile, ANewFileIsPutInPlaceOfAnOldOneNotWrittenThroughIt) {
  // A hard link of the victim at the target: replacing the name leaves the
  // victim's contents alone (truncating in place would not).
  const std::string path = dir_ + "/trace.jsonl";
  ASSERT_EQ(::link(victim_.c_str(), path.c_str()), 0);
  auto fd = create_file_safely(path, 0644, false);
  ASSERT_TRUE(fd.is_ok()) << fd.status().to_string();
  ASSERT_EQ(::write(*fd, "new\n", 4), 4);
  ::close(*fd);
  EXPECT_EQ(read_text(path), "new\n");
  EXPECT_EQ(read_text(victim_), "precious\n");
}

TEST_F(SafeFile, AFolderWritableByOthersIsRefusedUnlessSticky) {
  const std::string open = sub("open", 0777);
  const Status w = write_file_safely(open + "/x", "x", 0644, false, false);
  EXPECT_EQ(w.code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(contains(w.message(), "the folder " + open + " is writable by every user (mode 0777")) << w.message();
  EXPECT_TRUE(contains(w.message(), "chmod go-w " + open)) << w.message();
  EXPECT_TRUE(names_in(open).empty());
  // ...also as a folder on the way.
  ASSERT_EQ(::mkdir((open + "/inner").c_str(), 0755), 0);
  EXPECT_EQ(write_file_safely(open + "/inner/x", "x", 0644, false, false).code(), StatusCode::kFailedPrecondition);
  // Sticky (like /tmp): no one else can remove or rename what is there.
  ASSERT_EQ(::chmod(open.c_str(), 01777), 0);
  EXPECT_TRUE(write_file_safely(open + "/x", "x", 0644, false, false).is_ok());
  EXPECT_TRUE(write_file_safely(open + "/inner/x", "x", 0644, false, false).is_ok());
  // Writable by our own group: ours to share.
  const std::string group = sub("group", 0775);
  EXPECT_TRUE(write_file_safely(group + "/x", "x", 0644, false, false).is_ok());
}

TEST_F(SafeFile, ALinkOnTheWayIsFollowedWhenOursAndDotDotGoesBack) {
  const std::string real = sub("real", 0755);
  ASSERT_EQ(::symlink("real", (dir_ + "/alias").c_str()), 0);  // relative, ours
  ASSERT_TRUE(write_file_safely(dir_ + "/alias/x", "via a link\n", 0644, false, false).is_ok());
  EXPECT_EQ(read_text(real + "/x"), "via a link\n");
  auto d = SafeDir::open(dir_ + "/alias/../real/.", false);
  ASSERT_TRUE(d.is_ok()) << d.status().to_string();
  EXPECT_EQ(d->path(), real) << "resolved without links";
  // A loop is named, not walked forever.
  ASSERT_EQ(::symlink("loop", (dir_ + "/loop").c_str()), 0);
  const Status l = write_file_safely(dir_ + "/loop/x", "x", 0644, false, false);
  EXPECT_TRUE(contains(l.message(), "symbolic links on the way")) << l.to_string();
  // A file where a folder should be.
  const Status f = write_file_safely(victim_ + "/x", "x", 0644, false, false);
  EXPECT_TRUE(contains(f.message(), victim_ + " is not a folder")) << f.to_string();
}

TEST_F(SafeFile, RelativePathsAreWalkedFromTheCurrentFolder) {
  char cwd[4096];
  ASSERT_NE(::getcwd(cwd, sizeof cwd), nullptr);
  ASSERT_EQ(::chdir(dir_.c_str()), 0);
  const Status s = write_file_safely("rel/x", "r", 0644, true, false);
  const Status bare = write_file_safely("y", "y", 0644, false, false);
  ASSERT_EQ(::chdir(cwd), 0);
  EXPECT_TRUE(s.is_ok()) << s.to_string();
  EXPECT_TRUE(bare.is_ok()) << bare.to_string();
  EXPECT_EQ(read_text(dir_ + "/rel/x"), "r");
  EXPECT_EQ(read_text(dir_ + "/y"), "y");
}

TEST_F(SafeFile, NamesThatAreNotFilesAreRefused) {
  std::string d, n;
  EXPECT_TRUE(split_file_path("/a/b", &d, &n).is_ok());
  EXPECT_EQ(d, "/a");
  EXPECT_EQ(n, "b");
  EXPECT_TRUE(split_file_path("b", &d, &n).is_ok());
  EXPECT_EQ(d, ".");
  EXPECT_TRUE(split_file_path("/b", &d, &n).is_ok());
  EXPECT_EQ(d, "/");
  for (const char* bad : {"", "/a/", "/a/..", "."}) {
    EXPECT_EQ(split_file_path(bad, &d, &n).code(), StatusCode::kInvalidArgument) << bad;
  }
  auto dir = SafeDir::open(dir_, false);
  ASSERT_TRUE(dir.is_ok());
  EXPECT_EQ(dir->write_file("a/b", "x", 0644, false).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(dir->write_file("..", "x", 0644, false).code(), StatusCode::kInvalidArgument);
}

TEST_F(SafeFile, ALockFileIsNeverALink) {
  auto dir = SafeDir::open(dir_, false);
  ASSERT_TRUE(dir.is_ok());
  ASSERT_EQ(::symlink(victim_.c_str(), (dir_ + "/s.lock").c_str()), 0);
  auto l = dir->open_lock("s.lock", 0600);
  ASSERT_FALSE(l.is_ok());
  EXPECT_TRUE(contains(l.status().message(), "symbolic link")) << l.status().to_string();
  auto ok = dir->open_lock("t.lock", 0600);
  ASSERT_TRUE(ok.is_ok()) << ok.status().to_string();
  EXPECT_TRUE(check_own_regular_file(*ok, "t.lock").is_ok());
  ::close(*ok);
  // listen_socket's lock: a planted link is not followed (the socket is not
  // set up), and its target stays as it was.
  const std::string sock = dir_ + "/d.sock";
  ASSERT_EQ(::symlink(victim_.c_str(), (sock + ".lock").c_str()), 0);
  auto fd = listen_socket(sock, 0600);
  ASSERT_FALSE(fd.is_ok());
  EXPECT_EQ(read_text(victim_), "precious\n");
}

TEST_F(SafeFile, ASubfolderForAnotherProgramIsAFolderNotALink) {
  auto dir = SafeDir::open(dir_, false);
  ASSERT_TRUE(dir.is_ok());
  EXPECT_EQ(dir->check_subfolder("none").code(), StatusCode::kNotFound);
  sub("mps", 0777);  // its mode is its owner's business
  EXPECT_TRUE(dir->check_subfolder("mps").is_ok());
  ASSERT_EQ(::symlink("mps", (dir_ + "/link").c_str()), 0);
  EXPECT_EQ(dir->check_subfolder("link").code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(dir->check_subfolder("victim").code(), StatusCode::kFailedPrecondition);
}

TEST_F(SafeFile, AnotherUsersFolderLinkOrFileIsRefused) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root: makes files of another uid (chown)";
  // A folder of another user.
  const std::string theirs = sub("theirs", 0755);
  ASSERT_EQ(::chown(theirs.c_str(), kOtherUid, kOtherGid), 0);
  const Status w = write_file_safely(theirs + "/x", "x", 0644, false, false);
  EXPECT_EQ(w.code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(contains(w.message(), "the folder " + theirs + " belongs to uid 4242, not to root")) << w.message();
  // A folder writable by a group that is neither root's nor ours; as a folder
  // on the way it is accepted (a member's link or folder there is theirs).
  const std::string grp = sub("grp", 0775);
  ASSERT_EQ(::chown(grp.c_str(), 0, kOtherGid), 0);
  const Status g = write_file_safely(grp + "/x", "x", 0644, false, false);
  EXPECT_TRUE(contains(g.message(), "is writable by group 4343 (mode 0775")) << g.to_string();
  ASSERT_EQ(::mkdir((grp + "/mine").c_str(), 0755), 0);
  EXPECT_TRUE(write_file_safely(grp + "/mine/x", "x", 0644, false, false).is_ok());
  // A link planted by another user in a sticky folder (as in /tmp) as the
  // state folder: not followed, and nothing is written where it points.
  const std::string sticky = sub("sticky", 01777);
  const std::string target = sub("target", 0755);
  const std::string state = sticky + "/state";
  ASSERT_EQ(::symlink(target.c_str(), state.c_str()), 0);
  ASSERT_EQ(::lchown(state.c_str(), kOtherUid, kOtherGid), 0);
  const Status s = write_file_safely(state + "/predictor.cache", "x", 0644, true, false);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(contains(s.message(), state + " is a symbolic link of uid 4242")) << s.message();
  EXPECT_TRUE(names_in(target).empty());
  // A file of another user at the target: not replaced, not read.
  write_text(dir_ + "/their-file", "theirs\n");
  ASSERT_EQ(::chown((dir_ + "/their-file").c_str(), kOtherUid, kOtherGid), 0);
  const Status r = write_file_safely(dir_ + "/their-file", "mine\n", 0644, false, false);
  EXPECT_TRUE(contains(r.message(), "belongs to uid 4242")) << r.to_string();
  EXPECT_EQ(read_text(dir_ + "/their-file"), "theirs\n");
  EXPECT_EQ(read_file_safely(dir_ + "/their-file", 100).status().code(), StatusCode::kFailedPrecondition);
  auto dir = SafeDir::open(dir_, false);
  ASSERT_TRUE(dir.is_ok());
  EXPECT_EQ(dir->open_lock("their-file", 0600).status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(dir->check_subfolder("theirs").code(), StatusCode::kFailedPrecondition);
  // The socket's lock: another user's file there could be held to keep the
  // daemon from starting; it is refused, not used.
  write_text(dir_ + "/d.sock.lock", "");
  ASSERT_EQ(::chown((dir_ + "/d.sock.lock").c_str(), kOtherUid, kOtherGid), 0);
  auto fd = listen_socket(dir_ + "/d.sock", 0600);
  ASSERT_FALSE(fd.is_ok());
  EXPECT_TRUE(contains(fd.status().message(), "d.sock.lock belongs to uid 4242")) << fd.status().to_string();
  // The folder check can be waived for a folder chosen by an operator (a
  // metrics collector's); files are still never followed.
  EXPECT_TRUE(write_file_safely(theirs + "/x", "x", 0644, false, false, FolderCheck::kAnyOwner).is_ok());
  ASSERT_EQ(::symlink(victim_.c_str(), (theirs + "/y").c_str()), 0);
  EXPECT_FALSE(write_file_safely(theirs + "/y", "x", 0644, false, false, FolderCheck::kAnyOwner).is_ok());
  EXPECT_EQ(read_text(victim_), "precious\n");
}

// ---- SO_PEERGROUPS -----------------------------------------------------------

std::vector<gid_t> sorted(std::vector<gid_t> v) {
  std::sort(v.begin(), v.end());
  return v;
}

std::vector<gid_t> own_groups() {
  std::vector<gid_t> g(static_cast<std::size_t>(std::max(0, ::getgroups(0, nullptr))));
  g.resize(static_cast<std::size_t>(std::max(0, ::getgroups(static_cast<int>(g.size()), g.data()))));
  return g;
}

TEST(IpcPeerGroups, ASocketpairTellsItsCreatorsGroups) {
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0);
  auto g = peer_groups(sv[0]);
  ::close(sv[0]);
  ::close(sv[1]);
  if (!g.is_ok() && contains(g.status().message(), "SO_PEERGROUPS, Linux 4.13")) GTEST_SKIP() << g.status().message();
  ASSERT_TRUE(g.is_ok()) << g.status().to_string();
  EXPECT_EQ(sorted(*g), sorted(own_groups()));
  EXPECT_FALSE(peer_groups(-1).is_ok());
}

TEST(IpcPeerGroups, ManyGroupsAreAllTold) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root: sets a process's supplementary groups (setgroups)";
  // In a child, 100 groups (more than the first guess of 64): the kernel asks
  // for a larger buffer, and every one of them comes back.
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    std::vector<gid_t> want;
    for (gid_t g = 5000; g < 5100; ++g) want.push_back(g);
    if (::setgroups(want.size(), want.data()) != 0) ::_exit(2);
    int sv[2];
    if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) ::_exit(3);
    auto g = peer_groups(sv[0]);
    if (!g.is_ok()) ::_exit(4);
    ::_exit(sorted(*g) == want ? 0 : 5);
  }
  int st = 0;
  ASSERT_EQ(::waitpid(pid, &st, 0), pid);
  ASSERT_TRUE(WIFEXITED(st));
  EXPECT_EQ(WEXITSTATUS(st), 0);
}

}  // namespace
}  // namespace lithos::ipc
