// sqlock tests — a worker process whose wall clock is off by a known amount, for the client-clock
// tests (Engines/Lifecycle.ClockSkewMatchesAKnownOffset, Engines/ClientClock.*).
//
// The clock is moved with libfaketime (FAKETIME=+Ns, DONT_FAKE_MONOTONIC=1), which moves every
// wall-clock read of the process: libc, the drivers and sqlock. The worker runs with a time limit.
// If it is still running then, libfaketime hung it: that happened once, in CI on this project's own
// machine (all four runs under libfaketime hung for 120 s; never reproduced by hand). Then the hung
// process is described (threads, their wait channels and system calls, gdb's backtrace when gdb is
// installed, the preloads and libfaketime's shared-memory files), the description is printed and kept
// in /var/tmp/sqlock-libfaketime-hang/, and the worker runs again with tests/clock_shift_preload.cpp
// instead: only std::chrono::system_clock moves, which is the only wall clock sqlock reads. The test
// asserts on that run and its output says which clock mover was used. In a sanitizer build
// (sanitizer_build, test_env.hpp) libfaketime is never preloaded: the fallback runs at once.
#pragma once

#include "run_command.hpp"
#include "test_env.hpp"
#include "test_process.hpp"

#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <string_view>
#include <vector>

extern char** environ;

namespace sqlock_test {

/// LD_PRELOAD=`lib`, ahead of any preload this process was given (kept, after it).
inline std::string preload_first(std::string const& lib) {
    auto const inherited = getenv_nonempty("LD_PRELOAD");
    return "LD_PRELOAD=" + lib + (inherited ? ":" + *inherited : std::string());
}

/// What a running process `pid` is doing, in words, for a failure message.
inline std::string describe_running_process(pid_t pid) {
    std::string d;
    fs::path const proc = fs::path("/proc") / std::to_string(pid);
    std::error_code ec;
    for (auto const& task : fs::directory_iterator(proc / "task", ec)) {
        auto line = [&](char const* f) {
            auto s = slurp(task.path() / f);
            while (!s.empty() && (s.back() == '\n' || s.back() == '\0')) s.pop_back();
            return s;
        };
        d += "  thread " + task.path().filename().string() + " (" + line("comm") + "): wchan " + line("wchan") +
             ", syscall " + line("syscall") + "\n";
    }
    std::string const environ_text = slurp(proc / "environ");
    for (std::size_t at = 0; at < environ_text.size();) {
        auto end = environ_text.find('\0', at);
        if (end == std::string::npos) end = environ_text.size();
        std::string_view const entry(environ_text.data() + at, end - at);
        if (entry.starts_with("LD_") || entry.starts_with("FAKETIME") || entry.starts_with("DONT_FAKE"))
            d += "  env " + std::string(entry) + "\n";
        at = end + 1;
    }
    d += "  /etc/ld.so.preload: " + (fs::exists("/etc/ld.so.preload") ? slurp("/etc/ld.so.preload") : "(none)") + "\n";
    d += "  libfaketime files in /dev/shm:";
    for (auto const& f : fs::directory_iterator("/dev/shm", ec))
        if (f.path().filename().string().find("faketime") != std::string::npos) d += " " + f.path().filename().string();
    d += "\n";
    for (char const* gdb : {"/usr/bin/gdb"}) {
        if (!fs::exists(gdb)) continue;
        temp_dir files;
        spawn_file_actions actions;
        actions.capture_to_files(files.path() / "out", files.path() / "err");
        pid_t const g = spawn_process({"/usr/bin/timeout", "30", gdb, "-p", std::to_string(pid), "-batch", "-nx", "-ex",
                                       "thread apply all bt 25"},
                                      std::nullopt, actions.get());
        int st = 0;
        ::waitpid(g, &st, 0);
        d += "  gdb backtrace:\n" + slurp(files.path() / "out");
    }
    return d;
}

/// How a test moves a worker's wall clock: libfaketime (every clock read of the process), or
/// tests/clock_shift_preload.cpp (std::chrono::system_clock only: the fallback).
enum class clock_mover { libfaketime, system_clock_preload };

inline std::string to_string(clock_mover m) {
    return m == clock_mover::libfaketime ? "libfaketime" : "system_clock preload";
}

/// The first clock mover to try for an instrumented client process: libfaketime, except in a
/// sanitizer build, where it deadlocks in its constructor (test_env.hpp, sanitizer_build).
inline clock_mover client_clock_mover() {
    return sanitizer_build ? clock_mover::system_clock_preload : clock_mover::libfaketime;
}

/// Variables this helper sets: dropped from the inherited environment first.
inline std::vector<std::string_view> const& clock_variables() {
    static std::vector<std::string_view> const v{"LD_PRELOAD=", "FAKETIME",
                                                 "DONT_FAKE_MONOTONIC=", "SQLOCK_TEST_CLOCK_SHIFT_"};
    return v;
}

/// Makes the wall clock of processes started with clock_file_environment(m, file) run `offset`
/// from the host's, at once (the file is replaced by a rename, read at every clock call).
inline void set_clock_file(clock_mover m, fs::path const& file, std::chrono::seconds offset) {
    fs::path const next = file.string() + ".new";
    {
        std::ofstream out(next);
        if (m == clock_mover::libfaketime) out << (offset.count() >= 0 ? "+" : "") << offset.count() << "s\n";
        else out << std::chrono::milliseconds(offset).count() << "\n";
    }
    fs::rename(next, file);
}

/// This process's environment, for a child whose wall clock follows `file` (set_clock_file).
inline std::vector<std::string> clock_file_environment(clock_mover m, fs::path const& file) {
    if (m == clock_mover::libfaketime)
        return environment_with({preload_first(libfaketime_path().string()), "FAKETIME_TIMESTAMP_FILE=" + file.string(),
                                 "FAKETIME_NO_CACHE=1", "DONT_FAKE_MONOTONIC=1"},
                                clock_variables());
    return environment_with({preload_first(SQLOCK_TEST_CLOCK_SHIFT_LIB),
                             "SQLOCK_TEST_CLOCK_SHIFT_FILE=" + file.string()},
                            clock_variables());
}

/// Prints a libfaketime hang (`what` hung, `state` from describe_running_process) and keeps it in
/// /var/tmp/sqlock-libfaketime-hang/<test>.txt; the caller then reruns with the fallback.
inline void report_libfaketime_hang(std::string const& what, std::string const& state) {
    auto const* test = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string file_name = test != nullptr ? std::string(test->test_suite_name()) + "." + test->name() : "unknown";
    for (auto& c : file_name)
        if (c == '/') c = '_';
    std::string const report =
        "libfaketime (" + libfaketime_path().string() + ") hung " + what + "; its state:\n" + state;
    std::error_code ec;
    fs::path const keep = "/var/tmp/sqlock-libfaketime-hang";
    fs::create_directories(keep, ec);
    std::ofstream(keep / (file_name + ".txt")) << report;
    std::cerr << report << "rerunning with the system_clock preload (" << SQLOCK_TEST_CLOCK_SHIFT_LIB << ")\n";
    ::testing::Test::RecordProperty("libfaketime_hang", report);
}

/// A run of a worker whose wall clock was `ahead` of the host's, and how the clock was moved.
struct skewed_run {
    command_result run;
    std::string clock_mover;       ///< "libfaketime", or "system_clock preload" after libfaketime hung
    std::string libfaketime_hang;  ///< the hung process's description, when the fallback ran
};

/// Runs `args_for(attempt)` with its wall clock `ahead` (whole seconds, either sign) of the host's:
/// attempt 1 under libfaketime; attempt 2, only if libfaketime hung the first past `limit`, under
/// tests/clock_shift_preload.cpp. The libfaketime hang is printed and kept in
/// /var/tmp/sqlock-libfaketime-hang/<test>.txt.
template <class ArgsFor>
skewed_run run_with_clock_ahead(ArgsFor args_for, std::chrono::seconds ahead, std::chrono::seconds limit) {
    skewed_run s;
    int attempt = 1;
    if (client_clock_mover() == clock_mover::libfaketime) {
        s.clock_mover = to_string(clock_mover::libfaketime);
        std::string const offset = (ahead.count() >= 0 ? "+" : "") + std::to_string(ahead.count()) + "s";
        std::vector<std::string> const args = args_for(attempt++);
        s.run = run_in_env(args,
                           environment_with({preload_first(libfaketime_path().string()), "FAKETIME=" + offset,
                                             "DONT_FAKE_MONOTONIC=1"},
                                            clock_variables()),
                           limit, describe_running_process);
        if (s.run.finished) return s;

        s.libfaketime_hang = s.run.diagnosis;
        report_libfaketime_hang(args.front() + " (FAKETIME=" + offset + ") for " + std::to_string(limit.count()) + " s",
                                s.libfaketime_hang);
    }
    s.clock_mover = to_string(clock_mover::system_clock_preload);
    s.run = run_in_env(args_for(attempt),
                       environment_with({preload_first(SQLOCK_TEST_CLOCK_SHIFT_LIB),
                                         "SQLOCK_TEST_CLOCK_SHIFT_MS=" +
                                             std::to_string(std::chrono::milliseconds(ahead).count())},
                                        clock_variables()),
                       limit, describe_running_process);
    return s;
}

}  // namespace sqlock_test
