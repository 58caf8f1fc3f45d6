// sqlock command — run: hold a lock while a command runs.
//
// Signals: SIGINT, SIGTERM, SIGHUP and SIGCHLD are blocked before the store and
// locker start their threads, so every thread inherits the mask and they are
// read only through a signalfd. While the lock is being taken a watcher thread
// turns SIGINT/SIGTERM/SIGHUP into a cancellation of the wait (a Ctrl-C never
// leaves a half-written lock row behind); while COMMAND runs the main thread
// poll()s the signalfd (child exit, signals to forward) and an eventfd that the
// renewer thread writes when the lease is lost.
#include "cli.hpp"

#include <sqlock/admin.hpp>
#include <sqlock/errors.hpp>
#include <sqlock/locker.hpp>

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <stop_token>
#include <thread>

extern char** environ;

namespace sqlock::cli {

namespace {

using steady = std::chrono::steady_clock;
constexpr auto kill_grace = std::chrono::seconds(5);

class unique_fd {
public:
    explicit unique_fd(int fd = -1) noexcept : fd_(fd) {}
    unique_fd(unique_fd const&) = delete;
    unique_fd& operator=(unique_fd const&) = delete;
    ~unique_fd() { reset(); }
    int get() const noexcept { return fd_; }
    void reset() noexcept {
        if (fd_ >= 0) ::close(fd_);
        fd_ = -1;
    }

private:
    int fd_;
};

std::string errno_text(int err) { return std::strerror(err); }

[[noreturn]] void system_failure(std::string_view what) {
    fail(exit_code::software, std::string(what) + " failed: " + errno_text(errno));
}

sigset_t handled_signals() {
    sigset_t set;
    sigemptyset(&set);
    for (int s : {SIGINT, SIGTERM, SIGHUP, SIGCHLD}) sigaddset(&set, s);
    return set;
}

/// The descriptors open now: the ones sqlock inherited, which COMMAND inherits
/// too (everything opened later — database sockets, the signalfd — is closed
/// in the child, so a child outliving sqlock never keeps a connection open).
std::vector<int> open_descriptors() {
    std::vector<int> fds;
    if (DIR* d = ::opendir("/proc/self/fd")) {
        int own = ::dirfd(d);
        while (dirent* e = ::readdir(d)) {
            if (e->d_name[0] == '.') continue;
            int fd = std::atoi(e->d_name);
            if (fd != own) fds.push_back(fd);
        }
        ::closedir(d);
    } else {
        fds = {0, 1, 2};
    }
    std::sort(fds.begin(), fds.end());
    return fds;
}

/// Set when the lease is lost (on the renewer thread), read by the main loop.
struct loss_report {
    unique_fd event{::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)};
    std::mutex mutex;
    std::string why;

    void report(std::string_view reason) noexcept {
        try {
            std::lock_guard lock(mutex);
            if (why.empty()) why = reason;
        } catch (...) {
        }
        std::uint64_t one = 1;
        [[maybe_unused]] auto n = ::write(event.get(), &one, sizeof one);
    }
    std::string reason() {
        std::lock_guard lock(mutex);
        return why.empty() ? std::string("renewal refused or validity ran out") : why;
    }
};

/// While the lock is being taken: turns the first SIGINT/SIGTERM/SIGHUP into a
/// cancellation of the wait.
class signal_watcher {
public:
    explicit signal_watcher(int sigfd) : wake_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {
        if (wake_.get() < 0) system_failure("eventfd");
        thread_ = std::thread([this, sigfd] { watch(sigfd); });
    }
    signal_watcher(signal_watcher const&) = delete;
    signal_watcher& operator=(signal_watcher const&) = delete;
    ~signal_watcher() { stop(); }

    void stop() noexcept {
        if (!thread_.joinable()) return;
        std::uint64_t one = 1;
        [[maybe_unused]] auto n = ::write(wake_.get(), &one, sizeof one);
        thread_.join();
    }
    std::stop_token token() const noexcept { return cancel_.get_token(); }
    int signal() const noexcept { return signal_.load(); }

private:
    void watch(int sigfd) {
        pollfd p[2] = {{sigfd, POLLIN, 0}, {wake_.get(), POLLIN, 0}};
        for (;;) {
            if (::poll(p, 2, -1) < 0) {
                if (errno == EINTR) continue;
                return;
            }
            if (p[1].revents != 0) return;
            signalfd_siginfo si{};
            while (::read(sigfd, &si, sizeof si) == static_cast<ssize_t>(sizeof si)) {
                if (si.ssi_signo == SIGCHLD) continue;
                int none = 0;
                if (signal_.compare_exchange_strong(none, static_cast<int>(si.ssi_signo))) cancel_.request_stop();
            }
        }
    }

    unique_fd wake_;
    std::stop_source cancel_;
    std::atomic<int> signal_{0};
    std::thread thread_;
};

std::string command_text(std::vector<std::string> const& command) { return printable(command.front()); }

struct child_process {
    pid_t pid = -1;
    int exec_errno = 0;  ///< set when COMMAND could not be started
};

/// fork + execvp COMMAND with `env`, an empty signal mask, and only the
/// descriptors in `keep` (sorted) besides the error pipe.
child_process spawn(std::vector<std::string> const& command, std::vector<std::string> const& env,
                    std::vector<int> const& keep) {
    std::vector<char*> argv;
    for (auto const& a : command) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    std::vector<char*> envp;
    for (auto const& e : env) envp.push_back(const_cast<char*>(e.c_str()));
    envp.push_back(nullptr);

    int err_pipe[2];
    if (::pipe2(err_pipe, O_CLOEXEC) != 0) system_failure("pipe2");
    unique_fd err_read(err_pipe[0]);
    unique_fd err_write(err_pipe[1]);

    // Ranges [lo, hi] to close in the child: everything from 3 up except `keep`
    // and the error pipe's write end.
    std::vector<int> kept = keep;
    kept.push_back(err_pipe[1]);
    std::sort(kept.begin(), kept.end());
    std::vector<std::pair<unsigned, unsigned>> close_ranges;
    unsigned next = 3;
    for (int fd : kept) {
        if (fd < 3) continue;
        auto u = static_cast<unsigned>(fd);
        if (u > next) close_ranges.emplace_back(next, u - 1);
        next = std::max(next, u + 1);
    }
    close_ranges.emplace_back(next, ~0U);

    sigset_t none;
    sigemptyset(&none);
    std::fflush(nullptr);

    pid_t const parent = ::getpid();
    pid_t pid = ::fork();
    if (pid < 0) system_failure("fork");
    if (pid == 0) {
        // Only async-signal-safe calls from here on: the parent has threads.
        // If sqlock dies (SIGKILL, OOM) nobody renews the lock any more: COMMAND
        // gets SIGTERM rather than run on unprotected after the lease expires.
        ::prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (::getppid() != parent) ::_exit(128 + SIGTERM);
        ::sigprocmask(SIG_SETMASK, &none, nullptr);
        for (auto [lo, hi] : close_ranges) {
            if (::close_range(lo, hi, 0) != 0) {
                for (unsigned fd = lo; fd <= hi && fd < 65536; ++fd) ::close(static_cast<int>(fd));
            }
        }
        ::execvpe(argv[0], argv.data(), envp.data());
        int err = errno;
        [[maybe_unused]] auto n = ::write(err_pipe[1], &err, sizeof err);
        ::_exit(err == ENOENT ? exit_code::command_not_found : exit_code::cannot_execute);
    }
    err_write.reset();
    child_process child{pid, 0};
    int err = 0;
    ssize_t n;
    do {
        n = ::read(err_read.get(), &err, sizeof err);
    } while (n < 0 && errno == EINTR);
    if (n == static_cast<ssize_t>(sizeof err)) {
        child.exec_errno = err;
        int status = 0;
        while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
        }
        child.pid = -1;
    }
    return child;
}

std::vector<std::string> child_environment(sqlock::lease const& lease) {
    std::vector<std::string> env;
    for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
        std::string_view v(*e);
        if (v.starts_with("SQLOCK_NAME=") || v.starts_with("SQLOCK_OWNER=") || v.starts_with("SQLOCK_TOKEN="))
            continue;
        env.emplace_back(v);
    }
    env.push_back("SQLOCK_NAME=" + lease.name());
    env.push_back("SQLOCK_OWNER=" + lease.owner());
    env.push_back("SQLOCK_TOKEN=" + std::to_string(lease.token()));
    return env;
}

int exit_status_of(int status) {
    if (WIFEXITED(status)) return WEXITSTATUS(status);
    if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
    return exit_code::software;
}

/// On a terminal, says who holds the lock (cron and scripts get no output: a
/// busy lock is the normal outcome on every host but one).
void explain_conflict(sqlock::store const& store, std::string const& name, std::chrono::milliseconds wait) {
    if (::isatty(STDERR_FILENO) == 0) return;
    std::string holder = "another owner";
    try {
        for (auto const& l : sqlock::list_locks(store))
            if (l.name == name && l.remaining.count() > 0)
                holder = printable(l.owner) + " (token " + std::to_string(l.token) + ", " +
                         human_remaining(l.remaining) + " left)";
    } catch (...) {  // only an explanation
    }
    say("lock '" + printable(name) + "' is held by " + holder +
        (wait.count() > 0 ? " and was not released within --wait" : std::string()) + "; COMMAND not started");
}

}  // namespace

int run_command(run_args const& args) {
    if (args.dbs.size() > 1) fail(exit_code::usage, "majority mode is not available yet: give one --db");
    if (args.command.empty())
        fail(exit_code::usage, "run needs a command after `--`: sqlock run --name NAME -- COMMAND [ARG]...");
    auto ttl = parse_duration("--ttl", args.ttl);
    auto wait = parse_duration("--wait", args.wait);
    auto db = resolve_database(args.dbs);

    auto inherited = open_descriptors();
    sigset_t signals = handled_signals();
    if (::pthread_sigmask(SIG_BLOCK, &signals, nullptr) != 0) system_failure("pthread_sigmask");
    unique_fd sigfd(::signalfd(-1, &signals, SFD_CLOEXEC | SFD_NONBLOCK));
    if (sigfd.get() < 0) system_failure("signalfd");
    auto loss = std::make_shared<loss_report>();
    if (loss->event.get() < 0) system_failure("eventfd");

    std::optional<signal_watcher> watcher(std::in_place, sigfd.get());

    // The embedded SQLite file works out of the box: run creates it and its
    // tables. On a server the schema is the operator's: missing tables are exit 78.
    bool const sqlite = engine_of_url(db.url) == sqlock::engine::sqlite;
    std::optional<sqlock::store> store;
    try {
        store.emplace(open_store(db.url, {.pool_size = 4, .create_schema = sqlite}));
    } catch (sqlock::schema_missing const&) {
        throw schema_missing_error(db.url);
    }

    sqlock::locker_options options{
        .ttl = ttl,
        .auto_renew = true,
        // on_event, not on_lost: it carries the reason, and runs right after on_lost on the same thread.
        .on_event =
            [loss](sqlock::lease_event const& e) {
                if (e.what == sqlock::lease_event::kind::lost) loss->report(e.detail);
            },
    };
    auto locks = args.strategy == "row" ? sqlock::row_locker(*store, options) : sqlock::table_locker(*store, options);

    auto interrupted = [&](int sig) {
        return exit_error{128 + sig, "interrupted by signal " + std::to_string(sig) + " (" + strsignal(sig) +
                                         ") while taking lock '" + printable(args.name) + "'; COMMAND not started"};
    };
    if (watcher->signal() != 0) throw interrupted(watcher->signal());

    std::optional<sqlock::lease> lease;
    try {
        if (wait.count() == 0) {
            lease = locks.try_acquire(args.name);
        } else {
            lease.emplace(locks.acquire(args.name, wait, watcher->token()));
        }
    } catch (sqlock::timeout const&) {
    } catch (sqlock::cancelled const&) {
        throw interrupted(watcher->signal());
    }
    watcher->stop();
    if (!lease) {
        explain_conflict(*store, args.name, wait);
        fail(args.conflict_exit_code, "");
    }
    if (int sig = watcher->signal(); sig != 0) {
        lease->release();
        throw interrupted(sig);
    }
    watcher.reset();

    auto child = spawn(args.command, child_environment(*lease), inherited);
    if (child.pid < 0) {
        lease->release();
        fail(child.exec_errno == ENOENT ? exit_code::command_not_found : exit_code::cannot_execute,
             "cannot run '" + command_text(args.command) + "': " + errno_text(child.exec_errno));
    }

    bool lost = false;
    bool killed = false;
    steady::time_point kill_at{};
    int status = 0;
    for (;;) {
        if (::waitpid(child.pid, &status, WNOHANG) == child.pid) break;
        int timeout_ms = -1;
        if (lost && !killed) {
            auto left = std::chrono::ceil<std::chrono::milliseconds>(kill_at - steady::now()).count();
            timeout_ms = static_cast<int>(std::max<long long>(0, left));
        }
        pollfd p[2] = {{sigfd.get(), POLLIN, 0}, {loss->event.get(), POLLIN, 0}};
        if (::poll(p, 2, timeout_ms) < 0 && errno != EINTR) system_failure("poll");
        if (p[0].revents != 0) {
            signalfd_siginfo si{};
            while (::read(sigfd.get(), &si, sizeof si) == static_cast<ssize_t>(sizeof si)) {
                if (si.ssi_signo == SIGCHLD) continue;
                // A terminal's Ctrl-C (si_code SI_KERNEL) already reached COMMAND,
                // which shares our process group: forward only signals sent to us.
                if (si.ssi_code != SI_KERNEL) ::kill(child.pid, static_cast<int>(si.ssi_signo));
            }
        }
        bool lost_now = false;
        if (p[1].revents != 0) {
            std::uint64_t count = 0;
            [[maybe_unused]] auto n = ::read(loss->event.get(), &count, sizeof count);  // drain
            lost_now = !lost;
        }
        if (lost_now) {
            lost = true;
            kill_at = steady::now() + kill_grace;
            ::kill(child.pid, SIGTERM);
            say("lost lock '" + printable(args.name) + "' (token " + std::to_string(lease->token()) +
                ") while COMMAND was running: " + loss->reason() + "; sent SIGTERM to '" + command_text(args.command) +
                "' (pid " + std::to_string(child.pid) + "), SIGKILL in 5 s; exit 76");
        }
        if (lost && !killed && steady::now() >= kill_at) {
            ::kill(child.pid, SIGKILL);
            killed = true;
        }
    }
    if (lost) return exit_code::lost;

    int const code = exit_status_of(status);
    try {
        lease->release();
    } catch (sqlock::lease_lost const&) {
        say("lost lock '" + printable(args.name) + "' (token " + std::to_string(lease->token()) +
            ") before COMMAND finished: " + loss->reason() + "; another holder may have run at the same time");
        return exit_code::lost;
    } catch (sqlock::error const& e) {
        say("COMMAND finished but lock '" + printable(args.name) + "' could not be released (" + one_line(e.what()).substr(8) +
            "): it expires by its TTL");
    }
    return code;
}

}  // namespace sqlock::cli
