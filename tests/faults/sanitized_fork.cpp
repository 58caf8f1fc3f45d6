// Forking under AddressSanitizer (sanitized_fork.hpp); linked into sqlock_fork_worker.
#include "sanitized_fork.hpp"

#include <sys/syscall.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#if defined(__SANITIZE_ADDRESS__)
#define SQLOCK_FORK_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SQLOCK_FORK_ASAN 1
#endif
#endif

namespace sqlock_test {
namespace {

// True when every thread of this process but the caller is in interruptible sleep (a condition
// variable, poll(), a sleep): none is running inside the allocator.
[[maybe_unused]] bool others_asleep() {
    auto const self = std::to_string(::syscall(SYS_gettid));
    std::error_code ec;
    for (auto const& task : std::filesystem::directory_iterator("/proc/self/task", ec)) {
        if (task.path().filename() == self) continue;
        std::ifstream stat(task.path() / "stat");
        std::string line;
        if (!std::getline(stat, line)) continue;  // the thread ended
        auto const close = line.rfind(')');       // "pid (comm) S ...": comm may hold spaces and ')'
        if (close == std::string::npos || close + 2 >= line.size() || line[close + 2] != 'S') return false;
    }
    return !ec;
}

}  // namespace

bool settle_before_fork(std::chrono::milliseconds limit) {
#ifdef SQLOCK_FORK_ASAN
    auto const until = std::chrono::steady_clock::now() + limit;
    while (!others_asleep()) {
        if (std::chrono::steady_clock::now() >= until) return false;
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
#else
    (void)limit;
#endif
    return true;
}

}  // namespace sqlock_test
