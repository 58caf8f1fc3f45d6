// sqlock reliability battery — the soak tier's knobs (scripts/battery.sh soak), and one summary line
// per scenario run for the end of a long run.
//
// SQLOCK_SOAK=1 makes a scenario's durations ten times longer (scaled) and its seed random
// (scenario_seed); SQLOCK_BATTERY_SEED=<n> fixes the seed, to replay a schedule.
//
// When SQLOCK_BATTERY_SUMMARY names a file (scripts/battery.sh sets one per round), every battery
// scenario appends one tab-separated line to it when it ends (a test that runs several scenarios, such
// as Fuzz.CoordinationKinds, writes one line each):
//     <ctest name>\t<scenario>\t<seed or ->\t<grants or ->\t<verdict>\t<seconds>
// and battery.sh joins these with ctest's own verdicts into the table it prints at the end of the
// tier (a test killed by ctest's timeout writes no line: the table says so). Without the variable
// nothing is written. Each line is written by one write(2) on an O_APPEND descriptor, well under
// PIPE_BUF bytes, so the lines of tests running side by side (ctest -j) never interleave.
#pragma once

#include "../test_env.hpp"

#include <gtest/gtest.h>

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <iomanip>
#include <iostream>
#include <optional>
#include <random>
#include <sstream>
#include <string>

namespace sqlock_battery {

inline bool soak_mode() { return sqlock_test::getenv_nonempty("SQLOCK_SOAK").value_or("0") != "0"; }

/// A CI duration, ×10 under SQLOCK_SOAK=1.
inline std::chrono::milliseconds scaled(std::chrono::milliseconds ci) { return soak_mode() ? ci * 10 : ci; }

/// The seed of a scenario: SQLOCK_BATTERY_SEED, else random under SQLOCK_SOAK=1, else `fixed`.
inline std::uint64_t scenario_seed(std::uint64_t fixed) {
    if (auto s = sqlock_test::getenv_nonempty("SQLOCK_BATTERY_SEED")) return std::stoull(*s);
    if (soak_mode()) return std::random_device{}() ^ (static_cast<std::uint64_t>(std::random_device{}()) << 32);
    return fixed;
}

/// The ctest name of the running test ("Engines/ForkNemesis.TableLock/sqlite"), or "" outside a test.
inline std::string current_test_name() {
    auto const* t = ::testing::UnitTest::GetInstance()->current_test_info();
    return t ? std::string(t->test_suite_name()) + "." + t->name() : std::string();
}

/// Appends this scenario's line to $SQLOCK_BATTERY_SUMMARY, if set. `verdict` is one word or a short
/// phrase without tabs or newlines ("passed", "passed-on-rerun", "FAILED: K1 ...").
inline void record_scenario_summary(std::string const& scenario, std::optional<std::uint64_t> seed,
                                    std::optional<std::size_t> grants, std::string verdict,
                                    std::chrono::steady_clock::duration took) {
    auto const path = sqlock_test::getenv_nonempty("SQLOCK_BATTERY_SUMMARY");
    if (!path) return;
    for (char& c : verdict)
        if (c == '\t' || c == '\n' || c == '\r') c = ' ';
    if (verdict.size() > 200) verdict = verdict.substr(0, 197) + "...";
    std::ostringstream line;
    line << current_test_name() << '\t' << (scenario.empty() ? "-" : scenario) << '\t'
         << (seed ? std::to_string(*seed) : "-") << '\t' << (grants ? std::to_string(*grants) : "-") << '\t' << verdict
         << '\t' << std::fixed << std::setprecision(1) << std::chrono::duration<double>(took).count() << '\n';
    std::string const s = line.str();
    int const fd = ::open(path->c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0 || ::write(fd, s.data(), s.size()) != static_cast<ssize_t>(s.size()))
        std::cerr << "[battery] warning: could not append the scenario's summary line to " << *path
                  << " (SQLOCK_BATTERY_SUMMARY): the tier's end-of-run table will lack it\n";
    if (fd >= 0) ::close(fd);
}

/// The verdict word of the running test so far: "passed", or "FAILED" when gtest recorded a failure.
inline std::string current_test_verdict() {
    if (::testing::Test::IsSkipped()) return "skipped";
    return ::testing::Test::HasFailure() ? "FAILED" : "passed";
}

/// For a battery test without the scenario runner (battery_harness.hpp): its line, written when the
/// test body ends however it ends. Set `grants` (and `seed`, if it draws one) as the test learns them.
struct scenario_summary_on_exit {
    std::optional<std::uint64_t> seed;
    std::optional<std::size_t> grants;
    std::chrono::steady_clock::time_point began = std::chrono::steady_clock::now();

    scenario_summary_on_exit() = default;
    scenario_summary_on_exit(scenario_summary_on_exit const&) = delete;
    scenario_summary_on_exit& operator=(scenario_summary_on_exit const&) = delete;
    ~scenario_summary_on_exit() {
        record_scenario_summary({}, seed, grants, current_test_verdict(), std::chrono::steady_clock::now() - began);
    }
};

}  // namespace sqlock_battery
