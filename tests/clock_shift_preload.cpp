// sqlock tests — a preload library that moves what sqlock reads as the client's wall clock.
//
// LD_PRELOAD=libsqlock_test_clock_shift.so SQLOCK_TEST_CLOCK_SHIFT_MS=<ms> runs a process whose
// std::chrono::system_clock::now() is <ms> ahead of the host's (behind when negative). sqlock reads
// the client's wall clock only through system_clock (its clock-skew telemetry); its durations use
// steady_clock, and libc, the drivers and the servers keep the true time.
//
// It is the fallback of tests/skewed_process.hpp for the client-clock tests: they run their worker
// under libfaketime, which moves every clock of the process; where libfaketime hangs a process (as
// it did once in CI, tests/skewed_process.hpp keeps the diagnosis), they rerun it with this library,
// which changes nothing but the one function and takes no lock.
#include <chrono>
#include <cstdlib>
#include <ctime>

namespace {

std::chrono::nanoseconds configured_shift() {
    static std::chrono::nanoseconds const shift = [] {
        char const* v = std::getenv("SQLOCK_TEST_CLOCK_SHIFT_MS");
        return std::chrono::nanoseconds(std::chrono::milliseconds(v != nullptr ? std::atoll(v) : 0));
    }();
    return shift;
}

}  // namespace

// Interposes libstdc++'s definition (std::chrono::_V2::system_clock::now) for the whole process.
std::chrono::system_clock::time_point std::chrono::system_clock::now() noexcept {
    timespec ts{};
    ::clock_gettime(CLOCK_REALTIME, &ts);
    auto const since_epoch = std::chrono::seconds(ts.tv_sec) + std::chrono::nanoseconds(ts.tv_nsec) + configured_shift();
    return time_point(std::chrono::duration_cast<duration>(since_epoch));
}
