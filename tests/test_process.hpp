// sqlock tests — starting the programs under test (sqlock, sqlock-reaper, the
// worker programs) as child processes: posix_spawn with an argument vector and
// an environment, stdout and stderr captured to files, exit statuses in words.
#pragma once

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

extern char** environ;

namespace sqlock_test {

/// The whole content of a file (empty if it cannot be read).
inline std::string slurp(std::filesystem::path const& p) {
    std::ifstream in(p, std::ios::binary);
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
}

/// A waitpid status in words: "exit N", "signal N" or "status N".
inline std::string exit_text(int st) {
    if (WIFEXITED(st)) return "exit " + std::to_string(WEXITSTATUS(st));
    if (WIFSIGNALED(st)) return "signal " + std::to_string(WTERMSIG(st));
    return "status " + std::to_string(st);
}

/// posix_spawn_file_actions_t, destroyed on scope exit.
class spawn_file_actions {
public:
    spawn_file_actions() { posix_spawn_file_actions_init(&fa_); }
    ~spawn_file_actions() { posix_spawn_file_actions_destroy(&fa_); }
    spawn_file_actions(spawn_file_actions const&) = delete;
    spawn_file_actions& operator=(spawn_file_actions const&) = delete;

    /// stdin from /dev/null; stdout and stderr to `out` and `err` (created or truncated).
    void capture_to_files(std::filesystem::path const& out, std::filesystem::path const& err) {
        posix_spawn_file_actions_addopen(&fa_, 0, "/dev/null", O_RDONLY, 0);
        posix_spawn_file_actions_addopen(&fa_, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        posix_spawn_file_actions_addopen(&fa_, 2, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    }

    posix_spawn_file_actions_t* get() { return &fa_; }

private:
    posix_spawn_file_actions_t fa_;
};

/// Starts `args[0]` (a path) with arguments `args` and, as its environment,
/// `env` ("KEY=value" strings) or, without it, this process's own. Throws
/// std::runtime_error when posix_spawn fails.
inline pid_t spawn_process(std::vector<std::string> args, std::optional<std::vector<std::string>> env = std::nullopt,
                           posix_spawn_file_actions_t const* actions = nullptr,
                           posix_spawnattr_t const* attr = nullptr) {
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    std::vector<char*> envp;
    if (env) {
        for (auto& e : *env) envp.push_back(e.data());
        envp.push_back(nullptr);
    }
    pid_t pid = -1;
    int rc = ::posix_spawn(&pid, argv[0], actions, attr, argv.data(), env ? envp.data() : environ);
    if (rc != 0) throw std::runtime_error("posix_spawn " + args[0] + ": " + std::strerror(rc));
    return pid;
}

}  // namespace sqlock_test
