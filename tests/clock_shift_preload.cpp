// sqlock tests — a preload library that moves what sqlock reads as the client's wall clock.
//
// LD_PRELOAD=libsqlock_test_clock_shift.so SQLOCK_TEST_CLOCK_SHIFT_MS=<ms> runs a process whose
// std::chrono::system_clock::now() is <ms> ahead of the host's (behind when negative); with
// SQLOCK_TEST_CLOCK_SHIFT_FILE=<file> instead, the shift is the integer of milliseconds in that file,
// read again at every call (rewrite the file, by a rename, to make the clock jump). sqlock reads
// the client's wall clock only through system_clock (its clock-skew telemetry); its durations use
// steady_clock, and libc, the drivers and the servers keep the true time.
//
// It is the fallback of tests/skewed_process.hpp for the client-clock tests: they run their worker
// under libfaketime, which moves every clock of the process; where libfaketime hangs a process (as
// it did once in CI, tests/skewed_process.hpp keeps the diagnosis), they rerun it with this library,
// which changes nothing but the one function and takes no lock.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>

namespace {

std::chrono::nanoseconds configured_shift() {
    static char const* const file = std::getenv("SQLOCK_TEST_CLOCK_SHIFT_FILE");
    static std::chrono::nanoseconds const fixed = [] {
        char const* v = std::getenv("SQLOCK_TEST_CLOCK_SHIFT_MS");
        return std::chrono::nanoseconds(std::chrono::milliseconds(v != nullptr ? std::atoll(v) : 0));
    }();
    if (file == nullptr) return fixed;
    long long ms = 0;
    if (std::FILE* f = std::fopen(file, "r")) {
        if (std::fscanf(f, "%lld", &ms) != 1) ms = 0;
        std::fclose(f);
    }
    return std::chrono::milliseconds(ms);
}

}  // namespace

// Interposes libstdc++'s definition (std::chrono::_V2::system_clock::now) for the whole process.
std::chrono::system_clock::time_point std::chrono::system_clock::now() noexcept {
    timespec ts{};
    ::clock_gettime(CLOCK_REALTIME, &ts);
    auto const since_epoch =
        std::chrono::seconds(ts.tv_sec) + std::chrono::nanoseconds(ts.tv_nsec) + configured_shift();
    return time_point(std::chrono::duration_cast<duration>(since_epoch));
}
