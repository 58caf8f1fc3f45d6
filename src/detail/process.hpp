// Internal: this process's and thread's ids without a system call on the hot
// path (glibc no longer caches getpid()), kept right across fork().
#pragma once

#include <sys/types.h>

#include <cstdint>

namespace sqlock::detail {

/// getpid(), cached; a forked child sees its own.
[[nodiscard]] pid_t process_id() noexcept;

/// gettid(), cached per thread; a forked child's thread sees its own.
[[nodiscard]] pid_t thread_id() noexcept;

/// 64 random bits from the kernel (getrandom), fresh at every call: no
/// generator state that a forked child or another thread could repeat.
[[nodiscard]] std::uint64_t random_bits() noexcept;

}  // namespace sqlock::detail
