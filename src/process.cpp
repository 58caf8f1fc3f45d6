#include "detail/process.hpp"

#include <pthread.h>
#include <sys/random.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <vector>

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

void keep_forever(void const* p) noexcept {
    static auto* const kept = new std::vector<void const*>;
    try {
        kept->push_back(p);
    } catch (...) {  // out of memory: then a leak checker may see it
    }
}

std::uint64_t random_bits() noexcept {
    std::uint64_t bits = 0;
    auto* out = reinterpret_cast<unsigned char*>(&bits);
    std::size_t got = 0;
    while (got < sizeof bits) {
        auto n = ::getrandom(out + got, sizeof bits - got, 0);
        if (n > 0) {
            got += static_cast<std::size_t>(n);
        } else if (errno != EINTR) {
            // No getrandom (a kernel before 3.17): still unique per process, thread and moment.
            auto const now = static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
            return now * 0x9E3779B97F4A7C15ull ^ (static_cast<std::uint64_t>(process_id()) << 32) ^
                   static_cast<std::uint64_t>(thread_id());
        }
    }
    return bits;
}

}  // namespace sqlock::detail
