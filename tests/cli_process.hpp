// sqlock tests — running the `sqlock` command (SQLOCK_CLI, defined by the
// build) as a child process with a clean environment, stdout and stderr
// captured to files, default signal dispositions and an empty signal mask:
//
//     cli_process p(args, dir, env);   // starts `sqlock args...` in `dir`
//     p.finished();                    // exited already? (reaps it)
//     cli_result r = p.wait(60s);      // bounded: still running at the limit fails the test
//
// Shared by tests/cli_suite.cpp, tests/faults/cli_realtime_suite.cpp and
// tests/faults/connection_faults_suite.cpp.
#pragma once

#include "test_env.hpp"
#include "test_process.hpp"

#include <gtest/gtest.h>

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

#ifndef SQLOCK_CLI
#error "SQLOCK_CLI (path of the sqlock binary) must be defined by the build"
#endif

extern char** environ;

namespace sqlock_test {

struct cli_result {
    int status = -1;  // raw waitpid status
    std::string out;
    std::string err;

    bool exited() const { return WIFEXITED(status); }
    int code() const { return WIFEXITED(status) ? WEXITSTATUS(status) : -1; }
    std::string describe() const {
        std::string how = WIFEXITED(status)     ? "exit " + std::to_string(WEXITSTATUS(status))
                          : WIFSIGNALED(status) ? "killed by signal " + std::to_string(WTERMSIG(status))
                                                : "status " + std::to_string(status);
        return how + "\n--- stdout:\n" + out + "--- stderr:\n" + err;
    }
};

/// Environment changes for a spawned sqlock: a value sets, nullopt removes.
using env_changes = std::map<std::string, std::optional<std::string>>;

/// A running `sqlock` process.
class cli_process {
public:
    cli_process(std::vector<std::string> args, fs::path const& dir, env_changes env = {},
                std::optional<fs::path> cwd = std::nullopt) {
        static int serial = 0;
        auto stem = "cli." + std::to_string(::getpid()) + "." + std::to_string(++serial);
        out_ = dir / (stem + ".out");
        err_ = dir / (stem + ".err");

        // A clean environment: no SQLOCK_* from the caller's shell unless asked for.
        std::map<std::string, std::string> vars;
        for (char** e = environ; *e != nullptr; ++e) {
            std::string v(*e);
            auto eq = v.find('=');
            if (eq == std::string::npos) continue;
            auto key = v.substr(0, eq);
            if (key.rfind("SQLOCK_", 0) == 0 && key.rfind("SQLOCK_TEST_", 0) != 0) continue;
            vars[key] = v.substr(eq + 1);
        }
        for (auto const& [k, v] : env) {
            if (v) vars[k] = *v;
            else vars.erase(k);
        }
        std::vector<std::string> env_strings;
        for (auto const& [k, v] : vars) env_strings.push_back(k + "=" + v);

        args.insert(args.begin(), SQLOCK_CLI);

        spawn_file_actions fa;
        fa.capture_to_files(out_, err_);
        std::string cwd_s = cwd ? cwd->string() : dir.string();
        posix_spawn_file_actions_addchdir_np(fa.get(), cwd_s.c_str());
        // Default dispositions and an empty mask whatever ctest's shell left us
        // (a non-interactive shell cannot trap a signal ignored on entry).
        posix_spawnattr_t attr;
        posix_spawnattr_init(&attr);
        sigset_t defaults, none;
        sigemptyset(&defaults);
        sigemptyset(&none);
        for (int s : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE, SIGCHLD}) sigaddset(&defaults, s);
        posix_spawnattr_setsigdefault(&attr, &defaults);
        posix_spawnattr_setsigmask(&attr, &none);
        posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);
        try {
            pid_ = spawn_process(std::move(args), std::move(env_strings), fa.get(), &attr);
        } catch (...) {
            posix_spawnattr_destroy(&attr);
            throw;
        }
        posix_spawnattr_destroy(&attr);
    }
    cli_process(cli_process const&) = delete;
    cli_process& operator=(cli_process const&) = delete;
    ~cli_process() {
        if (!done_) {
            ::kill(pid_, SIGKILL);
            int st = 0;
            ::waitpid(pid_, &st, 0);
        }
    }

    pid_t pid() const { return pid_; }

    /// Exited already? (reaps it if so)
    bool finished() {
        if (done_) return true;
        int st = 0;
        if (::waitpid(pid_, &st, WNOHANG) == pid_) {
            done_ = true;
            status_ = st;
        }
        return done_;
    }

    /// Waits for the exit (bounded); a process still running after `limit` is
    /// killed and the test fails.
    cli_result wait(std::chrono::milliseconds limit = std::chrono::seconds(60)) {
        if (!eventually([&] { return finished(); }, limit)) {
            ::kill(pid_, SIGKILL);
            ::waitpid(pid_, &status_, 0);
            done_ = true;
            ADD_FAILURE() << "sqlock (pid " << pid_ << ") still running after " << limit.count() << " ms: killed";
        }
        return {status_, slurp(out_), slurp(err_)};
    }

    /// What it printed on stdout so far (it may still be running).
    std::string out_so_far() const { return slurp(out_); }

    /// What it printed so far, for a failure message while it may still run.
    std::string report() const {
        return std::string(done_ ? "exited" : "still running") + "\n--- stdout:\n" + slurp(out_) + "--- stderr:\n" +
               slurp(err_);
    }

private:
    pid_t pid_ = -1;
    bool done_ = false;
    int status_ = -1;
    fs::path out_, err_;
};

}  // namespace sqlock_test
