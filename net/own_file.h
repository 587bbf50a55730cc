// SPDX-License-Identifier: Apache-2.0
// Files Sieve writes beside other users' files (the stats file's .lock, the hang dump, in a metrics
// directory others may write to): opened so that nobody else's symlink, hard link or file can be
// written through. Lives in net/, the bottom library, because plugin/ and plugin/proxy/ both write.
#pragma once

#include <sys/types.h>

#include <string>

namespace sieve::net {

// Opens `path` (flags: O_WRONLY|O_APPEND or O_RDWR) as a file of this user's own: a new one is
// created with O_EXCL and `mode`; an existing one is used only when it is a regular file owned by
// this user with one link, checked with fstat on what was opened. Never follows a symlink in the
// last component (O_NOFOLLOW); O_CLOEXEC. Returns the descriptor, or -1 with *error saying why.
int open_own_file(const std::string& path, int flags, mode_t mode, std::string* error);

}  // namespace sieve::net
