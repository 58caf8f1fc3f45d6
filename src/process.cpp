#include "detail/process.hpp"

#include <pthread.h>
#include <unistd.h>

#include <atomic>

namespace sqlock::detail {
namespace {

// Moves in every forked child, so caches made before the fork are stale there.
std::atomic<unsigned> fork_generation{1};
std::atomic<pid_t> cached_pid{0};

void forked_child() noexcept {
    cached_pid.store(0, std::memory_order_relaxed);
    fork_generation.fetch_add(1, std::memory_order_relaxed);
}

[[maybe_unused]] int const registered = ::pthread_atfork(nullptr, nullptr, forked_child);

}  // namespace

pid_t process_id() noexcept {
    pid_t pid = cached_pid.load(std::memory_order_relaxed);
    if (pid == 0) {
        pid = ::getpid();
        cached_pid.store(pid, std::memory_order_relaxed);
    }
    return pid;
}

pid_t thread_id() noexcept {
    thread_local unsigned generation = 0;
    thread_local pid_t tid = 0;
    unsigned const now = fork_generation.load(std::memory_order_relaxed);
    if (generation != now) {
        tid = ::gettid();
        generation = now;
    }
    return tid;
}

}  // namespace sqlock::detail
