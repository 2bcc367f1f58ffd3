// Files written by a process that may run as root (lithosd, its calibration
// child, `lithos status --out` under a service), never through a path another
// user could have planted (docs/daemon.md, "Security model").
//
// Folders. A file is written only into a *trusted folder*, reached by
// walking its path from / one component at a time with
// openat(O_PATH | O_DIRECTORY | O_NOFOLLOW):
//  - every folder on the way, the last included, belongs to root or to this
//    process's effective uid;
//  - none is writable by others unless it has the sticky bit (/tmp): there
//    no one else can remove or rename what lithos made, and lithos opens
//    nothing there by a fixed name for writing (below);
//  - the last one (the folder the file goes in) is not writable by a group
//    either, unless sticky or the group is root's (gid 0) or this process's
//    effective gid. Folders on the way may be (/var/log belongs to group
//    syslog on Ubuntu): a link or folder a member plants there is not
//    followed, being theirs (below);
//  - a symbolic link on the way is followed only when root or this uid owns
//    it (in a sticky folder anyone may plant one), 32 at most; ".." goes
//    back to the folder the walk came from, as the kernel resolves it.
// A relative path is taken from the current folder (getcwd) and walked the
// same way from /. Missing folders are made (0755) only when asked.
//
// Files. In a trusted folder:
//  - a file is written under an unpredictable temporary name
//    (".NAME.tmp-<64 random bits>", openat O_CREAT | O_EXCL | O_NOFOLLOW |
//    O_CLOEXEC) and renamed over NAME (renameat), so no name someone else
//    chose is ever opened for writing;
//  - an existing NAME that is not a regular file of this uid (a symbolic
//    link, a folder, another user's file) is refused, not replaced;
//  - a file opened for reading or locking is opened O_NOFOLLOW and must be
//    a regular file of root or this uid (fstat after the open).
// Errors name the path and why, and say what to do.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <string>
#include <string_view>

#include "common/status.hpp"

namespace lithos::ipc {

// How a folder is checked.
enum class FolderCheck {
  kTrusted,  // the rules above (everything lithosd writes)
  // Only the files' rules: the folder is opened as named, whoever owns it.
  // For `lithos status --out`, whose folder is the metrics collector's.
  kAnyOwner,
};

class SafeDir {
 public:
  // The folder at `path` (the rules above); missing folders are made when
  // `create`. kNotFound: it (or a folder above it) does not exist;
  // kFailedPrecondition: it is not trusted (the message says which folder,
  // why and what to do); kUnavailable: another error.
  static Result<SafeDir> open(const std::string& path, bool create, FolderCheck check = FolderCheck::kTrusted);

  SafeDir() = default;
  SafeDir(SafeDir&& o) noexcept;
  SafeDir& operator=(SafeDir&& o) noexcept;
  SafeDir(const SafeDir&) = delete;
  SafeDir& operator=(const SafeDir&) = delete;
  ~SafeDir();

  int fd() const { return fd_; }                     // O_PATH, close-on-exec
  const std::string& path() const { return path_; }  // as resolved (no links)

  // `name` (one path component) written whole with `text` and `mode`
  // (fsync'd when `sync`), then renamed over `name`.
  Status write_file(std::string_view name, std::string_view text, mode_t mode, bool sync) const;
  // A new empty file with `mode`, put in place as `name` at once; returns
  // its descriptor (write-only, close-on-exec) for writing over time.
  Result<int> create_file(std::string_view name, mode_t mode) const;
  // The existing regular file `name` of root or this uid, read-only
  // (kNotFound when there is none).
  Result<int> open_to_read(std::string_view name) const;
  // `name` opened read-write (made with `mode` when missing) for flock():
  // a regular file of this uid. Nothing is written to it.
  Result<int> open_lock(std::string_view name, mode_t mode) const;
  // The folder `name` in this one, for another program to use (an MPS pipe
  // folder): when it exists it must be a folder (not a link) of root or
  // this uid; its mode is its owner's business. A missing one is left
  // missing (kNotFound).
  Status check_subfolder(std::string_view name) const;

 private:
  std::string shown(std::string_view name) const;
  Status check_name(std::string_view name) const;
  Status check_target(std::string_view name) const;
  Result<int> create_temp(std::string_view name, mode_t mode, std::string* tmp) const;
  Status put_in_place(const std::string& tmp, std::string_view name) const;

  int fd_ = -1;
  std::string path_;
};

// `path` split into its folder and its last component ("a/b" -> "a", "b";
// "b" -> ".", "b"; "/b" -> "/", "b"); invalid_argument when it names no file
// (empty, ending in '/', ".", "..").
Status split_file_path(const std::string& path, std::string* dir, std::string* name);

// SafeDir::write_file for a whole path (folders made when `create_folders`).
Status write_file_safely(const std::string& path, std::string_view text, mode_t mode, bool create_folders, bool sync,
                         FolderCheck check = FolderCheck::kTrusted);
// SafeDir::create_file for a whole path.
Result<int> create_file_safely(const std::string& path, mode_t mode, bool create_folders);
// The text of a regular file of root or this uid in a trusted folder, at
// most `max_bytes` (larger: invalid_argument); kNotFound when it, or its
// folder, does not exist.
Result<std::string> read_file_safely(const std::string& path, std::size_t max_bytes);
// A descriptor opened O_NOFOLLOW is a regular file of this uid; else why not
// (naming `path`).
Status check_own_regular_file(int fd, const std::string& path);

}  // namespace lithos::ipc
