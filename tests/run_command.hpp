// sqlock tests — running a program to its end (or to a time limit) and reading what it printed.
//
//   run_in_env(args, env, limit[, describe])  args[0] (a path) with exactly `env`; killed (SIGKILL)
//                                             if still running after `limit`, after `describe(pid)`
//                                             has said what it was doing (command_result::diagnosis)
//   run_command(args, extra_env, limit)       the same with this process's environment plus `extra_env`
//   environment_with(add, drop)               this process's environment without the variables that
//                                             start with one of `drop`, plus `add`
//   require_program(program, package)         throws "<program> not found: install Debian package <package>
//                                             (scripts/deps.sh installs it)" unless `program` is on PATH
#pragma once

#include "test_env.hpp"
#include "test_process.hpp"

#include <signal.h>
#include <sys/wait.h>

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <functional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

extern char** environ;

namespace sqlock_test {

/// A program that ran to its end, or was killed at its time limit.
struct command_result {
    bool finished = false;  ///< false: still running at the limit, killed
    int status = 0;         ///< the waitpid status
    std::string out, err;
    std::string diagnosis;  ///< when not finished: what the process was doing (run_in_env's `describe`)
    bool ok() const { return finished && WIFEXITED(status) && WEXITSTATUS(status) == 0; }
};

inline command_result run_in_env(std::vector<std::string> args, std::vector<std::string> env,
                                 std::chrono::milliseconds limit,
                                 std::function<std::string(pid_t)> const& describe = {}) {
    temp_dir files;
    spawn_file_actions actions;
    actions.capture_to_files(files.path() / "out", files.path() / "err");
    pid_t const pid = spawn_process(std::move(args), std::move(env), actions.get());
    command_result r;
    r.finished = eventually([&] { return ::waitpid(pid, &r.status, WNOHANG) == pid; }, limit);
    if (!r.finished) {
        if (describe) r.diagnosis = describe(pid);
        ::kill(pid, SIGKILL);
        ::waitpid(pid, &r.status, 0);
    }
    r.out = slurp(files.path() / "out");
    r.err = slurp(files.path() / "err");
    return r;
}

inline std::vector<std::string> environment_with(std::vector<std::string> const& add,
                                                 std::vector<std::string_view> const& drop = {}) {
    std::vector<std::string> env;
    for (char** e = environ; *e != nullptr; ++e) {
        std::string_view const entry(*e);
        bool dropped = false;
        for (auto prefix : drop) dropped = dropped || entry.starts_with(prefix);
        if (!dropped) env.emplace_back(entry);
    }
    env.insert(env.end(), add.begin(), add.end());
    return env;
}

/// The path of `program` on PATH, or empty.
inline std::string find_program(std::string_view program) {
    char const* path = std::getenv("PATH");
    std::string_view dirs = path != nullptr ? path : "/usr/bin:/bin";
    while (true) {
        auto const colon = dirs.find(':');
        std::string dir(dirs.substr(0, colon));
        auto const candidate = (dir.empty() ? std::string(".") : dir) + "/" + std::string(program);
        if (::access(candidate.c_str(), X_OK) == 0) return candidate;
        if (colon == std::string_view::npos) return {};
        dirs.remove_prefix(colon + 1);
    }
}

/// A test that needs a tool says which package is missing, not "nothing answered": throws (a failure
/// of the test that calls it) unless `program` is on PATH.
inline void require_program(std::string_view program, std::string_view package) {
    if (find_program(program).empty())
        throw std::runtime_error(std::string(program) + " not found: install Debian package " + std::string(package) +
                                 " (scripts/deps.sh installs it)");
}

inline command_result run_command(std::vector<std::string> args, std::vector<std::string> const& extra_env = {},
                                  std::chrono::milliseconds limit = std::chrono::seconds(120)) {
    return run_in_env(std::move(args), environment_with(extra_env), limit);
}

}  // namespace sqlock_test
