#include "ipc/safe_file.hpp"

#include <fcntl.h>
#include <limits.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <vector>

namespace lithos::ipc {

namespace {

constexpr int kMaxLinks = 32;

// strerror_r, not strerror: liblithos.so may call this from any thread.
std::string errno_text(const std::string& what, int err) {
  char buf[128];
  return what + ": " + ::strerror_r(err, buf, sizeof buf);
}

std::string octal_mode(mode_t m) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "%04o", static_cast<unsigned>(m & 07777));
  return buf;
}

bool trusted_owner(uid_t u) { return u == 0 || u == ::geteuid(); }

std::string who_may() {
  const uid_t me = ::geteuid();
  return me == 0 ? std::string("root") : "root or uid " + std::to_string(me) + " (this process)";
}

// Why the folder `shown` (its fstat `st`) may not be written through, or ""
// when it may (the rules of safe_file.hpp). `holds`: it is the folder the
// file goes in, not one on the way to it.
std::string folder_problem(const struct stat& st, const std::string& shown, bool holds) {
  if (!trusted_owner(st.st_uid)) {
    return "the folder " + shown + " belongs to uid " + std::to_string(st.st_uid) + ", not to " + who_may() +
           ": its owner could put a link where lithos writes; use a folder owned by " + who_may();
  }
  if ((st.st_mode & S_ISVTX) != 0) return "";
  const bool others = (st.st_mode & S_IWOTH) != 0;
  const bool group = holds && (st.st_mode & S_IWGRP) != 0 && st.st_gid != 0 && st.st_gid != ::getegid();
  if (!others && !group) return "";
  return "the folder " + shown + " is writable by " +
         (others ? std::string("every user") : "group " + std::to_string(st.st_gid)) + " (mode " +
         octal_mode(st.st_mode) + ", not sticky): anyone who can write there could put a link where lithos writes; " +
         "chmod go-w " + shown + ", or use another folder";
}

// Closes the descriptors it holds when it goes.
class FdStack {
 public:
  FdStack() = default;
  FdStack(const FdStack&) = delete;
  FdStack& operator=(const FdStack&) = delete;
  ~FdStack() {
    for (const int fd : fds_) ::close(fd);
  }
  void push(int fd, std::string name) {
    fds_.push_back(fd);
    names_.push_back(std::move(name));
  }
  void pop() {
    ::close(fds_.back());
    fds_.pop_back();
    names_.pop_back();
  }
  std::size_t size() const { return fds_.size(); }
  int top() const { return fds_.back(); }
  int release_top() {
    const int fd = fds_.back();
    fds_.pop_back();
    names_.pop_back();
    return fd;
  }
  // The path walked so far, and `next` under it.
  std::string shown(const std::string& next = {}) const {
    std::string s;
    for (std::size_t i = 1; i < names_.size(); ++i) s += "/" + names_[i];
    if (!next.empty()) s += "/" + next;
    return s.empty() ? "/" : s;
  }

 private:
  std::vector<int> fds_;
  std::vector<std::string> names_;
};

void split_components(const std::string& path, std::deque<std::string>* out, bool front) {
  std::vector<std::string> parts;
  std::size_t at = 0;
  while (at <= path.size()) {
    const std::size_t slash = path.find('/', at);
    const std::size_t end = slash == std::string::npos ? path.size() : slash;
    if (end > at) parts.push_back(path.substr(at, end - at));
    if (slash == std::string::npos) break;
    at = slash + 1;
  }
  if (front) {
    out->insert(out->begin(), parts.begin(), parts.end());
  } else {
    out->insert(out->end(), parts.begin(), parts.end());
  }
}

// 64 unpredictable bits for a temporary name (getrandom; should the kernel
// not give them, the clock and a counter: O_EXCL still keeps the name from
// being anyone else's file).
std::string random_suffix() {
  std::uint64_t v = 0;
  if (::getrandom(&v, sizeof v, GRND_NONBLOCK) != static_cast<ssize_t>(sizeof v)) {
    static std::atomic<std::uint64_t> counter{0};
    timespec t{};
    ::clock_gettime(CLOCK_MONOTONIC, &t);
    v = (static_cast<std::uint64_t>(t.tv_nsec) << 20) ^ static_cast<std::uint64_t>(t.tv_sec) ^
        (static_cast<std::uint64_t>(::getpid()) << 40) ^ counter.fetch_add(1);
  }
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

Status write_all(int fd, std::string_view text, const std::string& shown) {
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::unavailable(errno_text("cannot write " + shown, errno));
    }
    done += static_cast<std::size_t>(n);
  }
  return Status::ok();
}

}  // namespace

SafeDir::SafeDir(SafeDir&& o) noexcept : fd_(o.fd_), path_(std::move(o.path_)) { o.fd_ = -1; }

SafeDir& SafeDir::operator=(SafeDir&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = o.fd_;
    path_ = std::move(o.path_);
    o.fd_ = -1;
  }
  return *this;
}

SafeDir::~SafeDir() {
  if (fd_ >= 0) ::close(fd_);
}

Result<SafeDir> SafeDir::open(const std::string& path_in, bool create, FolderCheck check) {
  std::string path = path_in.empty() ? "." : path_in;
  if (check == FolderCheck::kAnyOwner) {
    SafeDir d;
    d.fd_ = ::open(path.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (d.fd_ < 0) {
      const int e = errno;
      if (e == ENOENT) return Status::not_found("the folder " + path + " does not exist");
      return Status::unavailable(errno_text("the folder " + path, e));
    }
    d.path_ = path;
    return d;
  }
  if (path[0] != '/') {
    char cwd[PATH_MAX];
    if (::getcwd(cwd, sizeof cwd) == nullptr)
      return Status::unavailable(errno_text("getcwd (for " + path + ")", errno));
    path = std::string(cwd) + "/" + path;
  }
  std::deque<std::string> todo;
  split_components(path, &todo, false);

  FdStack walked;
  const auto open_root = [&]() -> Status {
    const int root = ::open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (root < 0) return Status::unavailable(errno_text("open /", errno));
    walked.push(root, "");
    struct stat st {};
    if (::fstat(root, &st) != 0) return Status::unavailable(errno_text("stat /", errno));
    if (std::string why = folder_problem(st, "/", false); !why.empty())
      return Status::failed_precondition(path + ": " + why);
    return Status::ok();
  };
  LITHOS_RETURN_IF_ERROR(open_root());
  int links = 0, made = 0;
  while (!todo.empty()) {
    const std::string name = todo.front();
    todo.pop_front();
    if (name == ".") continue;
    if (name == "..") {
      if (walked.size() > 1) walked.pop();
      continue;
    }
    const std::string here = walked.shown(name);
    const int fd = ::openat(walked.top(), name.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
      const int e = errno;
      struct stat ls {};
      if (e == ENOENT) {
        if (!create) return Status::not_found(path + ": the folder " + here + " does not exist");
        if (++made > 256) return Status::unavailable(path + ": " + here + " keeps disappearing");
        if (::mkdirat(walked.top(), name.c_str(), 0755) == 0) {
          // 0755 whatever the umask (a group-writable folder of its own would
          // fail the checks above).
          const int made_fd = ::openat(walked.top(), name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
          if (made_fd >= 0) {
            (void)::fchmod(made_fd, 0755);
            ::close(made_fd);
          }
        } else if (errno != EEXIST) {
          return Status::unavailable(errno_text(path + ": cannot create the folder " + here, errno));
        }
        todo.push_front(name);  // look again at what is there now
        continue;
      }
      if ((e == ENOTDIR || e == ELOOP) && ::fstatat(walked.top(), name.c_str(), &ls, AT_SYMLINK_NOFOLLOW) == 0 &&
          S_ISLNK(ls.st_mode)) {
        if (!trusted_owner(ls.st_uid)) {
          return Status::failed_precondition(path + ": " + here + " is a symbolic link of uid " +
                                             std::to_string(ls.st_uid) + ", not of " + who_may() +
                                             ": not followed (whoever made it chooses where lithos would write); "
                                             "remove it, or name the folder it points to");
        }
        if (++links > kMaxLinks) {
          return Status::failed_precondition(path + ": more than " + std::to_string(kMaxLinks) +
                                             " symbolic links on the way (a loop?)");
        }
        char target[PATH_MAX];
        const ssize_t n = ::readlinkat(walked.top(), name.c_str(), target, sizeof target - 1);
        if (n < 0) return Status::unavailable(errno_text(path + ": readlink " + here, errno));
        const std::string to(target, static_cast<std::size_t>(n));
        if (!to.empty() && to[0] == '/') {
          while (walked.size() > 1) walked.pop();
        }
        split_components(to, &todo, true);
        continue;
      }
      if (e == ENOTDIR) return Status::failed_precondition(path + ": " + here + " is not a folder");
      return Status::unavailable(errno_text(path + ": " + here, e));
    }
    walked.push(fd, name);
    struct stat st {};
    if (::fstat(fd, &st) != 0) return Status::unavailable(errno_text(path + ": stat " + here, errno));
    if (std::string why = folder_problem(st, here, false); !why.empty())
      return Status::failed_precondition(path + ": " + why);
  }
  // The folder itself, by the stricter rule (a ".." or a link may have
  // ended the walk on a folder checked only as one on the way).
  struct stat st {};
  if (::fstat(walked.top(), &st) != 0) return Status::unavailable(errno_text(path + ": stat", errno));
  if (std::string why = folder_problem(st, walked.shown(), true); !why.empty())
    return Status::failed_precondition(path + ": " + why);
  SafeDir d;
  d.path_ = walked.shown();
  d.fd_ = walked.release_top();
  return d;
}

std::string SafeDir::shown(std::string_view name) const {
  return path_ == "/" ? "/" + std::string(name) : path_ + "/" + std::string(name);
}

Status SafeDir::check_name(std::string_view name) const {
  if (name.empty() || name == "." || name == ".." || name.find('/') != std::string_view::npos)
    return Status::invalid_argument("'" + std::string(name) + "' in " + path_ + " is not a file name");
  if (fd_ < 0) return Status::internal("SafeDir: not open");
  return Status::ok();
}

// What is at `name` now may be replaced: nothing, or a regular file of this uid.
Status SafeDir::check_target(std::string_view name) const {
  const std::string n(name);
  struct stat st {};
  if (::fstatat(fd_, n.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    if (errno == ENOENT) return Status::ok();
    return Status::unavailable(errno_text("stat " + shown(name), errno));
  }
  if (S_ISLNK(st.st_mode)) {
    return Status::failed_precondition(shown(name) +
                                       " is a symbolic link: lithos does not follow links where it writes (one "
                                       "planted there would redirect the write); remove it, or name the file it "
                                       "points to");
  }
  if (!S_ISREG(st.st_mode)) {
    return Status::failed_precondition(shown(name) +
                                       " exists and is not a regular file; remove it or use another name");
  }
  if (st.st_uid != ::geteuid()) {
    return Status::failed_precondition(shown(name) + " belongs to uid " + std::to_string(st.st_uid) +
                                       ", not to this process's (uid " + std::to_string(::geteuid()) +
                                       "): not replaced; remove it, or use another name");
  }
  return Status::ok();
}

Result<int> SafeDir::create_temp(std::string_view name, mode_t mode, std::string* tmp) const {
  for (int tries = 0; tries < 16; ++tries) {
    *tmp = "." + std::string(name) + ".tmp-" + random_suffix();
    const int fd = ::openat(fd_, tmp->c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
    if (fd >= 0) {
      (void)::fchmod(fd, mode);  // as asked, whatever the umask
      return fd;
    }
    if (errno != EEXIST) return Status::unavailable(errno_text("cannot create a file in " + path_, errno));
  }
  return Status::unavailable("cannot create a temporary file in " + path_ + ": every name tried exists");
}

Status SafeDir::put_in_place(const std::string& tmp, std::string_view name) const {
  Status s = check_target(name);
  if (s.is_ok() && ::renameat(fd_, tmp.c_str(), fd_, std::string(name).c_str()) != 0)
    s = Status::unavailable(errno_text("cannot rename " + shown(tmp) + " to " + shown(name), errno));
  if (!s.is_ok()) (void)::unlinkat(fd_, tmp.c_str(), 0);
  return s;
}

Status SafeDir::write_file(std::string_view name, std::string_view text, mode_t mode, bool sync) const {
  LITHOS_RETURN_IF_ERROR(check_name(name));
  LITHOS_RETURN_IF_ERROR(check_target(name));  // said before anything is written
  std::string tmp;
  auto fd = create_temp(name, mode, &tmp);
  if (!fd) return fd.status();
  Status s = write_all(*fd, text, shown(tmp));
  if (s.is_ok() && sync && ::fsync(*fd) != 0) s = Status::unavailable(errno_text("cannot write " + shown(tmp), errno));
  if (::close(*fd) != 0 && s.is_ok()) s = Status::unavailable(errno_text("cannot write " + shown(tmp), errno));
  if (!s.is_ok()) {
    (void)::unlinkat(fd_, tmp.c_str(), 0);
    return s;
  }
  return put_in_place(tmp, name);
}

Result<int> SafeDir::create_file(std::string_view name, mode_t mode) const {
  LITHOS_RETURN_IF_ERROR(check_name(name));
  LITHOS_RETURN_IF_ERROR(check_target(name));
  std::string tmp;
  auto fd = create_temp(name, mode, &tmp);
  if (!fd) return fd.status();
  if (Status s = put_in_place(tmp, name); !s.is_ok()) {
    ::close(*fd);
    return s;
  }
  return fd;
}

Result<int> SafeDir::open_to_read(std::string_view name) const {
  LITHOS_RETURN_IF_ERROR(check_name(name));
  const int fd = ::openat(fd_, std::string(name).c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    const int e = errno;
    if (e == ENOENT) return Status::not_found(shown(name) + " does not exist");
    if (e == ELOOP) return Status::failed_precondition(shown(name) + " is a symbolic link: not followed; remove it");
    return Status::unavailable(errno_text("cannot read " + shown(name), e));
  }
  struct stat st {};
  std::string why;
  if (::fstat(fd, &st) != 0) {
    why = errno_text("stat", errno);
  } else if (!S_ISREG(st.st_mode)) {
    why = "not a regular file";
  } else if (!trusted_owner(st.st_uid)) {
    why = "it belongs to uid " + std::to_string(st.st_uid) + ", not to " + who_may();
  }
  if (!why.empty()) {
    ::close(fd);
    return Status::failed_precondition(shown(name) + ": " + why + "; not read");
  }
  return fd;
}

Result<int> SafeDir::open_lock(std::string_view name, mode_t mode) const {
  LITHOS_RETURN_IF_ERROR(check_name(name));
  const int fd = ::openat(fd_, std::string(name).c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, mode);
  if (fd < 0) {
    if (errno == ELOOP)
      return Status::failed_precondition(shown(name) + " is a symbolic link: not followed; remove it");
    return Status::unavailable(errno_text("open " + shown(name), errno));
  }
  if (Status s = check_own_regular_file(fd, shown(name)); !s.is_ok()) {
    ::close(fd);
    return s;
  }
  return fd;
}

Status SafeDir::check_subfolder(std::string_view name) const {
  LITHOS_RETURN_IF_ERROR(check_name(name));
  struct stat st {};
  if (::fstatat(fd_, std::string(name).c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    if (errno == ENOENT) return Status::not_found(shown(name) + " does not exist");
    return Status::unavailable(errno_text("stat " + shown(name), errno));
  }
  if (S_ISLNK(st.st_mode))
    return Status::failed_precondition(shown(name) +
                                       " is a symbolic link: not used (whoever made it chooses the "
                                       "folder); remove it");
  if (!S_ISDIR(st.st_mode)) return Status::failed_precondition(shown(name) + " is not a folder; remove it");
  if (!trusted_owner(st.st_uid)) {
    return Status::failed_precondition(shown(name) + " belongs to uid " + std::to_string(st.st_uid) + ", not to " +
                                       who_may() + ": not used; remove it");
  }
  return Status::ok();
}

Status split_file_path(const std::string& path, std::string* dir, std::string* name) {
  const std::size_t slash = path.rfind('/');
  *dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  *name = slash == std::string::npos ? path : path.substr(slash + 1);
  if (name->empty() || *name == "." || *name == "..")
    return Status::invalid_argument("'" + path + "' does not name a file");
  return Status::ok();
}

Status write_file_safely(const std::string& path, std::string_view text, mode_t mode, bool create_folders, bool sync,
                         FolderCheck check) {
  std::string dir, name;
  LITHOS_RETURN_IF_ERROR(split_file_path(path, &dir, &name));
  auto d = SafeDir::open(dir, create_folders, check);
  if (!d) return d.status();
  return d->write_file(name, text, mode, sync);
}

Result<int> create_file_safely(const std::string& path, mode_t mode, bool create_folders) {
  std::string dir, name;
  LITHOS_RETURN_IF_ERROR(split_file_path(path, &dir, &name));
  auto d = SafeDir::open(dir, create_folders);
  if (!d) return d.status();
  return d->create_file(name, mode);
}

Result<std::string> read_file_safely(const std::string& path, std::size_t max_bytes) {
  std::string dir, name;
  LITHOS_RETURN_IF_ERROR(split_file_path(path, &dir, &name));
  auto d = SafeDir::open(dir, false);
  if (!d) return d.status();
  auto fd = d->open_to_read(name);
  if (!fd) return fd.status();
  std::string text;
  char buf[65536];
  while (true) {
    const ssize_t n = ::read(*fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      const int e = errno;
      ::close(*fd);
      return Status::unavailable(errno_text("cannot read " + path, e));
    }
    if (n == 0) break;
    text.append(buf, static_cast<std::size_t>(n));
    if (text.size() > max_bytes) {
      ::close(*fd);
      return Status::invalid_argument(path + " is larger than " + std::to_string(max_bytes) + " bytes");
    }
  }
  ::close(*fd);
  return text;
}

Status check_own_regular_file(int fd, const std::string& path) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return Status::unavailable(errno_text("stat " + path, errno));
  if (!S_ISREG(st.st_mode)) return Status::failed_precondition(path + " is not a regular file; remove it");
  if (st.st_uid != ::geteuid()) {
    return Status::failed_precondition(path + " belongs to uid " + std::to_string(st.st_uid) +
                                       ", not to this process's (uid " + std::to_string(::geteuid()) + "); remove it");
  }
  return Status::ok();
}

}  // namespace lithos::ipc
