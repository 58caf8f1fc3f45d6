// Internal: this process's and thread's ids without a system call on the hot
// path (glibc no longer caches getpid()), kept right across fork().
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <utility>

namespace sqlock::detail {

/// getpid(), cached; a forked child sees its own.
[[nodiscard]] pid_t process_id() noexcept;

/// gettid(), cached per thread; a forked child's thread sees its own.
[[nodiscard]] pid_t thread_id() noexcept;

/// True in a process forked from `creator` (a pid recorded by process_id()
/// when an object was made): there the object is a copy of the parent's, its
/// threads do not exist and its connections are the parent's.
[[nodiscard]] inline bool forked_from(pid_t creator) noexcept { return process_id() != creator; }

/// Keep `p` reachable until the process ends (what a forked child leaks on
/// purpose is no leak for a leak checker).
void keep_forever(void const* p) noexcept;

/// A shared T that a forked child never destroys: when the last reference is
/// dropped in another process than the one that made it, the object is leaked
/// whole. There its threads do not exist (stopping or joining them crashes or
/// waits for ever), a mutex or condition variable one of them held or waited
/// on at the fork stays so (destroying it waits for ever), and its connections
/// are the parent's (closing them would send the server a goodbye that ends the
/// parent's sessions, its row-lock transactions with them, or roll back the
/// parent's SQLite transaction). The kernel closes the child's copies of the
/// sockets and files when it exits, which leaves the parent's open.
template <class T, class... Args>
[[nodiscard]] std::shared_ptr<T> make_fork_safe(Args&&... args) {
    return std::shared_ptr<T>(new T(std::forward<Args>(args)...), [creator = process_id()](T* p) noexcept {
        if (forked_from(creator)) keep_forever(p);
        else delete p;
    });
}

/// 64 random bits from the kernel (getrandom), fresh at every call: no
/// generator state that a forked child or another thread could repeat.
[[nodiscard]] std::uint64_t random_bits() noexcept;

}  // namespace sqlock::detail
