// SPDX-License-Identifier: Apache-2.0
// Files Sieve writes beside other users' files (the stats file and its .lock, the hang dump, in a
// metrics directory others may write to): opened so that nobody else's symlink, hard link or file
// can be written through, and never under a directory reached through a symbolic link or one in
// which another user can rename files. Lives in net/, the bottom library, because plugin/ and
// plugin/proxy/ both write.
#pragma once

#include <sys/types.h>

#include <string>
#include <utility>

namespace sieve::net {

// "/a/b/c" -> {"/a/b", "c"}; "c" -> {".", "c"}; "/c" -> {"/", "c"}.
std::pair<std::string, std::string> split_path(const std::string& path);

// Opens directory `dir` one component at a time (openat with O_DIRECTORY|O_NOFOLLOW from "/" or the
// current directory): a symbolic link anywhere on the path is refused, not followed. The directory
// must then be one only this user and root can change names in: owned by this user or root, and
// not writable by its group or others unless it is sticky (as /tmp). Returns the descriptor
// (O_CLOEXEC), or -1 with *error saying why.
int open_safe_directory(const std::string& dir, std::string* error);

// Opens `name` in `dir_fd` (from open_safe_directory; `shown` names it in messages) as a file of
// this user's own: a new one is created with O_EXCL and `mode`; an existing one is used only when
// it is a regular file owned by this user with one link, checked with fstat on what was opened.
// Never follows a symlink (O_NOFOLLOW); O_CLOEXEC. Returns the descriptor, or -1 with *error saying
// why and, when something else holds the name (another user's file, a link, a FIFO), *squatted set.
int open_own_file_at(int dir_fd, const std::string& name, const std::string& shown, int flags, mode_t mode,
                     std::string* error, bool* squatted = nullptr);

// open_own_file_at on the directory of `path`, opened with open_safe_directory.
int open_own_file(const std::string& path, int flags, mode_t mode, std::string* error, bool* squatted = nullptr);

// Creates a new file `prefix` + 8 random characters + `suffix` in `dir_fd` (O_EXCL, O_NOFOLLOW,
// `mode`), for a name nobody can take first. Returns the descriptor with *name set, or -1.
int create_unique_file_at(int dir_fd, const std::string& prefix, const std::string& suffix, mode_t mode,
                          std::string* name);

}  // namespace sieve::net
