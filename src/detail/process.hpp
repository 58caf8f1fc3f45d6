// Internal: this process's and thread's ids without a system call on the hot
// path (glibc no longer caches getpid()), kept right across fork().
#pragma once

#include <sys/types.h>

namespace sqlock::detail {

/// getpid(), cached; a forked child sees its own.
[[nodiscard]] pid_t process_id() noexcept;

/// gettid(), cached per thread; a forked child's thread sees its own.
[[nodiscard]] pid_t thread_id() noexcept;

}  // namespace sqlock::detail
