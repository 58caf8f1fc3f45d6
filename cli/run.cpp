// sqlock command — run: hold a lock while a command runs.
//
// Signals: SIGINT, SIGTERM, SIGHUP and SIGCHLD are blocked before the store and
// locker start their threads, so every thread inherits the mask and they are
// read only through a signalfd. While the lock is being taken a watcher thread
// turns SIGINT/SIGTERM/SIGHUP into a cancellation of the wait (a Ctrl-C never
// leaves a half-written lock row behind); while COMMAND runs the main thread
// poll()s the signalfd (child exit, signals to forward) and eventfds that the
// renewer thread writes when the lease is lost or renewed, and wakes up on its
// own when the lease nears its safe deadline without a renewal (a renewal that
// hangs reports nothing): COMMAND's tree must be dead and reaped before that
// deadline, not merely signalled (see stop_times).
//
// Processes: sqlock -> guardian -> COMMAND -> COMMAND's own processes. sqlock
// and the guardian are child subreapers, so every process of COMMAND's tree,
// orphaned or in a session of its own, stays their descendant and is found by
// walking /proc. sqlock signals that tree (forwarding, loss); the guardian is
// there for when sqlock dies (SIGKILL, OOM): it sees the end of a pipe only
// sqlock holds and takes the tree down, as nobody renews the lock any more.
// sqlock also publishes to it, in shared memory, the deadline by which the tree
// must be dead: should sqlock stop running (SIGSTOP, starved) the guardian
// kills the tree by then on its own.
#include "cli.hpp"
#include "supervisor.hpp"

#include <sqlock/admin.hpp>
#include <sqlock/coordination.hpp>
#include <sqlock/errors.hpp>
#include <sqlock/locker.hpp>
#include <sqlock/majority.hpp>
#include <sqlock/metrics.hpp>

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <random>
#include <span>
#include <sstream>
#include <stop_token>
#include <thread>
#include <utility>

extern char** environ;

namespace sqlock::cli {

namespace {

using steady = std::chrono::steady_clock;
using std::chrono::milliseconds;

/// How COMMAND's tree is stopped: SIGTERM, then SIGKILL `grace` later, and
/// SIGKILL at the latest `margin` before the lease's safe deadline, so that
/// the tree is dead and reaped before the database can grant the lock to
/// another (about 1 % of the TTL after that deadline). Stopping starts when
/// the lease's safe validity falls to grace + margin without a renewal having
/// succeeded (renewals are due every TTL/3, so the lease is then in doubt: a
/// renewal failed or hangs).
struct stop_times {
    milliseconds grace;
    milliseconds margin;
};

stop_times stop_times_for(milliseconds ttl) {
    return {std::min<milliseconds>(std::chrono::seconds(5), ttl / 4),
            std::min<milliseconds>(std::chrono::seconds(1), ttl / 10)};
}

class unique_fd {
public:
    explicit unique_fd(int fd = -1) noexcept : fd_(fd) {}
    unique_fd(unique_fd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
    unique_fd& operator=(unique_fd&& other) noexcept {
        if (this != &other) {
            reset();
            fd_ = std::exchange(other.fd_, -1);
        }
        return *this;
    }
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

    /// The token of the lease supervised now (0: any). elect --repeat leaves a
    /// lost lease behind, whose late events must not count for the next one.
    std::atomic<std::int64_t> token{0};
    bool concerns(std::int64_t t) const noexcept {
        auto const now = token.load();
        return now == 0 || now == t;
    }

    /// A new lease is supervised: forget what was said of the last one.
    void reset(std::int64_t new_token) {
        token.store(new_token);
        std::uint64_t count = 0;
        [[maybe_unused]] auto n = ::read(event.get(), &count, sizeof count);
        n = ::read(renewed.get(), &count, sizeof count);
        std::lock_guard lock(mutex);
        why.clear();
        failed_renewal.clear();
    }

    void report(std::string_view reason) noexcept {
        try {
            std::lock_guard lock(mutex);
            if (why.empty()) why = reason;
        } catch (...) {}
        std::uint64_t one = 1;
        [[maybe_unused]] auto n = ::write(event.get(), &one, sizeof one);
    }
    std::string reason() {
        std::lock_guard lock(mutex);
        return why.empty() ? std::string("renewal refused or validity ran out") : why;
    }

    /// The last renewal that could not reach the database (the lease is then in doubt).
    /// Written on every renewal: the main loop then publishes the new deadline to the guardian.
    unique_fd renewed{::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)};
    void renewal_done() noexcept {
        std::uint64_t one = 1;
        [[maybe_unused]] auto n = ::write(renewed.get(), &one, sizeof one);
    }

    void renewal_failed(std::string_view reason) noexcept {
        try {
            std::lock_guard lock(mutex);
            failed_renewal = reason;
        } catch (...) {}
    }
    std::string why_in_doubt() {
        std::lock_guard lock(mutex);
        return failed_renewal.empty() ? std::string("a renewal has not been answered")
                                      : "the last renewal failed: " + sqlock::tools::one_line(failed_renewal);
    }

private:
    std::string failed_renewal;
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

/// The processes descending from a root, read from /proc with system calls
/// only (open, getdents64, read) into memory reserved beforehand: the guardian,
/// a fork of a threaded process, must not allocate.
class process_tree {
public:
    process_tree() {
        entries_.reserve(capacity);
        members_.reserve(capacity);
    }

    /// Sends `sig` to every live descendant of `root` except `spared`; returns
    /// how many there were (zombies left out). A pid is signalled through a
    /// pidfd taken after checking its parent, so a pid reused meanwhile by an
    /// unrelated process is never signalled.
    std::size_t signal(pid_t root, int sig, pid_t spared = 0) noexcept {
        scan(root);
        std::size_t n = 0;
        for (pid_t pid : members_) {
            if (pid == spared) continue;
            int fd = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
            if (fd < 0) {
                if (errno == ENOSYS && ::kill(pid, sig) == 0) ++n;
                continue;
            }
            entry now{};
            if (read_stat(pid, now) && !now.zombie && (now.ppid == root || member(now.ppid)) &&
                ::syscall(SYS_pidfd_send_signal, fd, sig, nullptr, 0) == 0)
                ++n;
            ::close(fd);
        }
        return n;
    }

private:
    static constexpr std::size_t capacity = 1 << 16;
    struct entry {
        pid_t pid = 0;
        pid_t ppid = 0;
        bool zombie = false;
    };

    bool member(pid_t pid) const noexcept { return std::find(members_.begin(), members_.end(), pid) != members_.end(); }

    /// members_ = the descendants of root (zombies included: the walk goes through them).
    void scan(pid_t root) noexcept {
        entries_.clear();
        members_.clear();
        int dir = ::open("/proc", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dir < 0) return;
        alignas(8) char buf[8192];
        for (;;) {
            long n = ::syscall(SYS_getdents64, dir, buf, sizeof buf);
            if (n <= 0) break;
            for (long off = 0; off < n;) {
                struct linux_dirent64 {
                    ino64_t d_ino;
                    off64_t d_off;
                    unsigned short d_reclen;
                    unsigned char d_type;
                    char d_name[1];
                };
                auto const* d = reinterpret_cast<linux_dirent64 const*>(buf + off);
                off += d->d_reclen;
                pid_t pid = 0;
                char const* c = d->d_name;
                for (; *c >= '0' && *c <= '9'; ++c) pid = pid * 10 + (*c - '0');
                entry e{};
                if (*c != '\0' || pid <= 0 || pid == root || entries_.size() == capacity || !read_stat(pid, e))
                    continue;
                entries_.push_back(e);
            }
        }
        ::close(dir);
        for (bool grew = true; grew;) {
            grew = false;
            for (auto const& e : entries_) {
                if ((e.ppid == root || member(e.ppid)) && !member(e.pid)) {
                    members_.push_back(e.pid);
                    grew = true;
                }
            }
        }
        std::erase_if(members_, [&](pid_t pid) {
            return std::any_of(entries_.begin(), entries_.end(),
                               [&](entry const& e) { return e.pid == pid && e.zombie; });
        });
    }

    /// pid, state and parent from /proc/PID/stat ("pid (comm) S ppid ...", comm may hold anything).
    static bool read_stat(pid_t pid, entry& e) noexcept {
        char path[32] = "/proc/";
        char digits[16];
        int nd = 0;
        for (pid_t v = pid; v > 0; v /= 10) digits[nd++] = static_cast<char>('0' + v % 10);
        int len = 6;
        while (nd > 0) path[len++] = digits[--nd];
        for (char const* t = "/stat"; *t != '\0'; ++t) path[len++] = *t;
        path[len] = '\0';
        int fd = ::open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0) return false;
        char buf[512];
        ssize_t n = ::read(fd, buf, sizeof buf - 1);
        ::close(fd);
        if (n <= 0) return false;
        char const* p = nullptr;
        for (ssize_t i = n - 1; i >= 0 && p == nullptr; --i)
            if (buf[i] == ')') p = buf + i;
        if (p == nullptr || p + 4 >= buf + n) return false;
        e.pid = pid;
        e.zombie = p[2] == 'Z' || p[2] == 'X';
        e.ppid = 0;
        for (p += 4; p < buf + n && *p >= '0' && *p <= '9'; ++p) e.ppid = e.ppid * 10 + (*p - '0');
        return true;
    }

    std::vector<entry> entries_;
    std::vector<pid_t> members_;
};

/// The latest moment (CLOCK_MONOTONIC, which steady_clock reads, in ms) COMMAND's
/// tree may live on the lease sqlock last saw, in memory shared with the guardian:
/// should sqlock die, the guardian kills the tree by then rather than after a
/// full grace. sqlock only ever lags behind a renewal, so the guardian's copy is
/// never later than the lease's own deadline.
class shared_deadline {
public:
    shared_deadline() {
        void* p = ::mmap(nullptr, sizeof(std::atomic<std::int64_t>), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                         -1, 0);
        if (p == MAP_FAILED) system_failure("mmap");
        at_ = new (p) std::atomic<std::int64_t>(INT64_MAX);
    }
    shared_deadline(shared_deadline const&) = delete;
    shared_deadline& operator=(shared_deadline const&) = delete;
    ~shared_deadline() { ::munmap(at_, sizeof *at_); }

    void set(steady::time_point t) noexcept {
        at_->store(std::chrono::duration_cast<milliseconds>(t.time_since_epoch()).count());
    }
    std::int64_t ms() const noexcept { return at_->load(); }

private:
    std::atomic<std::int64_t>* at_ = nullptr;
};

struct child_process {
    pid_t guardian = -1;
    pid_t pid = -1;      ///< COMMAND
    int exec_errno = 0;  ///< set when COMMAND could not be started
    unique_fd status;    ///< the guardian writes COMMAND's wait status here when COMMAND exits
    unique_fd life;      ///< the guardian's sign that sqlock lives: closed only by sqlock's death
};

std::int64_t monotonic_ms() noexcept {
    timespec t{};
    ::clock_gettime(CLOCK_MONOTONIC, &t);
    return static_cast<std::int64_t>(t.tv_sec) * 1000 + t.tv_nsec / 1'000'000;
}

/// The guardian, between sqlock and COMMAND: a subreaper that reaps COMMAND's
/// orphans, reports COMMAND's exit status, and takes COMMAND's whole tree down
/// when sqlock dies (SIGTERM, SIGKILL after the grace or at the deadline sqlock
/// last published, whichever comes first). Runs in a fork of a threaded
/// process: system calls only.
[[noreturn]] void guard(int life, int status_out, process_tree& tree, std::int64_t grace_ms,
                        shared_deadline const& deadline, auto start_command) {
    sigset_t chld;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    sigaddset(&chld, SIGPIPE);  // a status write to a dead sqlock must not kill us
    ::sigprocmask(SIG_BLOCK, &chld, nullptr);
    sigdelset(&chld, SIGPIPE);
    int sfd = ::signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);
    pid_t const self = ::getpid();
    pid_t const command = start_command();
    [[maybe_unused]] auto w = ::write(status_out, &command, sizeof command);
    if (command < 0) ::_exit(0);

    auto reap = [&](bool& command_done, int& status) {
        int st = 0;
        pid_t p;
        while ((p = ::waitpid(-1, &st, WNOHANG)) > 0) {
            if (p == command) {
                command_done = true;
                status = st;
            }
        }
        return p;  // 0: children left; -1 (ECHILD): none
    };
    bool command_done = false;
    int status = 0;
    bool past_deadline = false;
    for (;;) {
        // A backstop for an sqlock that is alive but not running (stopped,
        // starved): past the deadline it published, the tree is killed here.
        auto const until = deadline.ms() - monotonic_ms();
        int const timeout =
            past_deadline ? 20 : static_cast<int>(std::clamp<std::int64_t>(until, 0, sfd >= 0 ? INT_MAX : 100));
        pollfd p[2] = {{life, POLLIN, 0}, {sfd, POLLIN, 0}};
        ::poll(p, sfd >= 0 ? 2 : 1, timeout);
        signalfd_siginfo si;
        while (sfd >= 0 && ::read(sfd, &si, sizeof si) == static_cast<ssize_t>(sizeof si)) {}
        pid_t const left = reap(command_done, status);
        if (p[0].revents != 0) break;  // sqlock is gone
        if (!past_deadline && monotonic_ms() >= deadline.ms()) past_deadline = true;
        if (past_deadline) tree.signal(self, SIGKILL);
        if (command_done && (!past_deadline || left < 0)) {
            w = ::write(status_out, &status, sizeof status);
            ::_exit(0);
        }
    }

    // Nobody renews the lock any more: nothing of COMMAND may go on.
    auto const kill_at = std::min(monotonic_ms() + grace_ms, deadline.ms());
    tree.signal(self, SIGTERM);
    for (;;) {
        if (reap(command_done, status) < 0) ::_exit(0);
        auto const now = monotonic_ms();
        bool const grace_over = now >= kill_at;
        if (grace_over) tree.signal(self, SIGKILL);
        pollfd p{sfd, POLLIN, 0};
        ::poll(&p, sfd >= 0 ? 1 : 0, grace_over ? 20 : static_cast<int>(std::min<std::int64_t>(kill_at - now, 100)));
        signalfd_siginfo si;
        while (sfd >= 0 && ::read(sfd, &si, sizeof si) == static_cast<ssize_t>(sizeof si)) {}
    }
}

/// Starts the guardian, which starts COMMAND (execvp) with `env`, an empty
/// signal mask, and only the descriptors in `keep` (sorted) besides the error pipe.
child_process spawn(std::vector<std::string> const& command, std::vector<std::string> const& env,
                    std::vector<int> const& keep, process_tree& tree, stop_times times,
                    shared_deadline const& deadline) {
    std::vector<char*> argv;
    for (auto const& a : command) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    std::vector<char*> envp;
    for (auto const& e : env) envp.push_back(const_cast<char*>(e.c_str()));
    envp.push_back(nullptr);

    auto make_pipe = [](unique_fd& r, unique_fd& w) {
        int fds[2];
        if (::pipe2(fds, O_CLOEXEC) != 0) system_failure("pipe2");
        r = unique_fd(fds[0]);
        w = unique_fd(fds[1]);
    };
    unique_fd err_read, err_write, status_read, status_write, life_read, life_write;
    make_pipe(err_read, err_write);
    make_pipe(status_read, status_write);
    make_pipe(life_read, life_write);

    // Ranges [lo, hi] to close in COMMAND: everything from 3 up except `keep`
    // and the error pipe's write end.
    std::vector<int> kept = keep;
    kept.push_back(err_write.get());
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

    // sqlock is a subreaper too: once the guardian is gone (killed on a loss),
    // what is left of the tree comes to sqlock rather than to init.
    if (::prctl(PR_SET_CHILD_SUBREAPER, 1) != 0) system_failure("prctl(PR_SET_CHILD_SUBREAPER)");
    int const err_fd = err_write.get();
    pid_t const guardian = ::fork();
    if (guardian < 0) system_failure("fork");
    if (guardian == 0) {
        // Only async-signal-safe calls from here on: the parent has threads.
        ::prctl(PR_SET_CHILD_SUBREAPER, 1);
        ::close(life_write.get());
        ::close(status_read.get());
        ::close(err_read.get());
        guard(life_read.get(), status_write.get(), tree, times.grace.count(), deadline, [&]() -> pid_t {
            pid_t const parent = ::getpid();
            pid_t pid = ::fork();
            if (pid < 0) {
                int err = errno;
                [[maybe_unused]] auto n = ::write(err_fd, &err, sizeof err);
                return -1;
            }
            if (pid == 0) {
                // Should the guardian be killed, COMMAND is not left unguarded.
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
                [[maybe_unused]] auto n = ::write(err_fd, &err, sizeof err);
                ::_exit(err == ENOENT ? exit_code::command_not_found : exit_code::cannot_execute);
            }
            ::close(err_fd);
            return pid;
        });
    }
    err_write.reset();
    status_write.reset();
    life_read.reset();
    child_process child;
    child.guardian = guardian;
    child.status = std::move(status_read);
    child.life = std::move(life_write);
    int err = 0;
    ssize_t n;
    do {
        n = ::read(err_read.get(), &err, sizeof err);
    } while (n < 0 && errno == EINTR);
    if (n == static_cast<ssize_t>(sizeof err)) child.exec_errno = err;
    pid_t pid = -1;
    do {
        n = ::read(child.status.get(), &pid, sizeof pid);
    } while (n < 0 && errno == EINTR);
    if (child.exec_errno == 0 && (n != static_cast<ssize_t>(sizeof pid) || pid < 0)) child.exec_errno = ECHILD;
    if (child.exec_errno != 0) {
        int status = 0;
        while (::waitpid(guardian, &status, 0) < 0 && errno == EINTR) {}
        child.guardian = -1;
        return child;
    }
    child.pid = pid;
    return child;
}

/// The environment COMMAND gets: sqlock's, without the SQLOCK_* variables sqlock sets, and `vars`.
std::vector<std::string> child_environment(command_variables const& vars) {
    std::vector<std::string> env;
    for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
        std::string_view v(*e);
        bool const ours = std::any_of(vars.begin(), vars.end(), [&](auto const& kv) {
            return v.starts_with(kv.first) && v.size() > kv.first.size() && v[kv.first.size()] == '=';
        });
        if (ours || v.starts_with("SQLOCK_NAME=") || v.starts_with("SQLOCK_OWNER=") || v.starts_with("SQLOCK_TOKEN=") ||
            v.starts_with("SQLOCK_PERMIT="))
            continue;
        env.emplace_back(v);
    }
    for (auto const& [k, v] : vars) env.push_back(k + "=" + v);
    return env;
}

int exit_status_of(int status) {
    if (WIFEXITED(status)) return WEXITSTATUS(status);
    if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
    return exit_code::software;
}

/// How run takes its lease: a plain lock, a permit (--limit), a shared lease
/// (--shared), or the exclusive lease of a read-write lock (plain run with a
/// table lock on one database).
enum class lease_kind { lock, permit, shared, exclusive };

/// On a terminal, says who holds the lock (cron and scripts get no output: a
/// busy lock is the normal outcome on every host but one).
void explain_conflict(std::vector<sqlock::store const*> const& stores, std::string const& name, lease_kind kind,
                      std::chrono::milliseconds wait) {
    if (::isatty(STDERR_FILENO) == 0) return;
    std::vector<std::string> holders(stores.size());
    std::vector<std::size_t> permits(stores.size()), readers(stores.size());
    for_each_in_parallel(stores.size(), [&](std::size_t i) {
        try {
            for (auto const& l : sqlock::list_locks(*stores[i])) {
                if (l.remaining.count() <= 0) continue;
                if (l.kind == "permit" && l.lock == name) ++permits[i];
                if (l.kind == "shared" && l.lock == name) ++readers[i];
                if (l.name == name)
                    holders[i] = printable(l.owner) + " (token " + std::to_string(l.token) + ", " +
                                 human_remaining(l.remaining) + " left" +
                                 (stores.size() > 1 ? " on " + stores[i]->url() : std::string()) + ")";
            }
        } catch (...) {  // only an explanation
        }
    });
    std::string holder = "another owner";
    for (auto const& h : holders)
        if (!h.empty()) {
            holder = h;
            break;
        }
    std::string const within = wait.count() > 0 ? " within --wait" : "";
    if (kind == lease_kind::permit && !permits.empty())
        say("every permit of lock '" + printable(name) + "' is held (" + std::to_string(permits[0]) +
            " held) and none was free" + within + "; COMMAND not started");
    else if (kind == lease_kind::exclusive && !readers.empty() && readers[0] > 0 && holders[0].empty())
        say("lock '" + printable(name) + "' is held shared by " + std::to_string(readers[0]) + " run(s) --shared" +
            (wait.count() > 0 ? " that did not end within --wait" : std::string()) + "; COMMAND not started");
    else
        say("lock '" + printable(name) + "' is held by " + holder +
            (wait.count() > 0 ? " and was not released within --wait" : std::string()) + "; COMMAND not started");
}

/// An owner id for every member's row and the majority lease alike, so that
/// `sqlock list` shows the one SQLOCK_OWNER on each member:
/// host/pid/instance/thread, as the library makes them.
std::string majority_owner() {
    char host[256] = {};
    if (::gethostname(host, sizeof host - 1) != 0 || host[0] == '\0') std::strcpy(host, "unknown-host");
    std::random_device rd;
    char id[17];
    std::snprintf(id, sizeof id, "%08x%08x", rd(), rd());
    return std::string(host) + "/" + std::to_string(::getpid()) + "/" + id + "/" + std::to_string(::gettid());
}

/// The majority locker over the members of several --db, or an exit_error.
/// Each member that cannot be opened is said on stderr. The library's quorum
/// counts the lockers it is given, so one it cannot be given (a database down
/// when sqlock starts: a store connects when it opens) may be left out only
/// while the quorum of the rest is still a majority of all --db: N/2+1 of N.
sqlock::locker majority_of(std::vector<member> const& members, run_args const& args, std::chrono::milliseconds ttl,
                           sqlock::majority_options options) {
    std::size_t const n = members.size();
    std::size_t const quorum = n / 2 + 1;
    std::vector<member const*> opened, failed;
    int code = exit_code::ok;
    for (auto const& m : members) {
        if (m.store) {
            opened.push_back(&m);
        } else {
            failed.push_back(&m);
            code = sqlock::tools::most_serious(code, m.failure->code);
        }
    }
    std::string failures;
    for (auto const* m : failed)
        failures += (failures.empty() ? "" : "; ") + redacted_url(m->url) + ": " + m->failure->message;
    // Tables missing or a bug is for someone to fix, not a member being down.
    if (code != exit_code::ok && code != exit_code::unavailable)
        fail(code, "majority lock '" + printable(args.name) + "' not taken: " + failures);
    if (!enough_members_open(opened.size(), n))
        fail(exit_code::unavailable,
             "majority lock '" + printable(args.name) + "' not taken: " + std::to_string(failed.size()) + " of " +
                 std::to_string(n) + " databases cannot be reached (" + failures + "); " +
                 (n % 2 == 1 ? "with " + std::to_string(n) + " databases one may be down when sqlock starts"
                             : "with an even number of databases (" + std::to_string(n) +
                                   ") every one must be reachable when sqlock starts") +
                 "; COMMAND not started");
    for (auto const* m : failed)
        say("majority member " + redacted_url(m->url) + " cannot be reached (" + m->failure->message +
            "); going on with " + std::to_string(opened.size()) + " of " + std::to_string(n) + " databases, " +
            std::to_string(quorum) + " of which must grant the lock");

    sqlock::locker_options const member_options{
        .ttl = ttl,
        .owner = options.owner,
        .auto_renew = false,  // the majority renews its members' rows itself
    };
    std::vector<sqlock::locker> lockers;
    for (auto const* m : opened)
        lockers.push_back(args.strategy == "row" ? sqlock::row_locker(*m->store, member_options)
                                                 : sqlock::table_locker(*m->store, member_options));
    options.configured_members = n;  // a new group forms only when every --db answers
    return sqlock::majority_locker(std::move(lockers), std::move(options));
}

/// How supervise ended.
struct supervised {
    int guardian_status = 0;
    bool lost = false;
    bool signalled = false;  ///< SIGINT, SIGTERM or SIGHUP came meanwhile
};

/// Waits for COMMAND while the lease is renewed; forwards the signals sent to
/// sqlock to COMMAND's processes. Returns the guardian's wait status. When the
/// lock is lost, or about to be, stops COMMAND's tree and, once it is gone,
/// exits 76 without returning, or returns `lost` with `return_on_loss`.
supervised supervise(std::vector<std::string> const& command, std::string const& lock_text, sqlock::lease& lease,
                     loss_report& loss, int sigfd, process_tree& tree, child_process const& child, stop_times times,
                     shared_deadline& tree_deadline, bool return_on_loss, std::string const& after_loss) {
    pid_t const self = ::getpid();
    bool stopping = false;  // COMMAND's tree is being stopped: the lease is in doubt near its end, or lost
    bool guardian_done = false;
    bool signalled = false;
    int guardian_status = 0;
    steady::time_point kill_at{};
    steady::time_point kill_by = steady::now() + lease.remaining() - times.margin;  // as of the last look
    auto stop_tree = [&](steady::time_point by, std::string const& why) {
        if (stopping) {
            kill_at = std::min(kill_at, by);
            return;
        }
        stopping = true;
        kill_at = by;
        tree.signal(self, SIGTERM, child.guardian);
        auto in_ms = std::max<long long>(0, std::chrono::ceil<milliseconds>(kill_at - steady::now()).count());
        say(why + "; sent SIGTERM to '" + command_text(command) + "' (pid " + std::to_string(child.pid) +
            ") and all its processes, SIGKILL in " + std::to_string(in_ms) + " ms; " +
            (return_on_loss ? after_loss : std::string("exit 76")));
    };
    for (;;) {
        // Our children: the guardian, and after it what is left of COMMAND's tree.
        pid_t reaped = 0;
        int st = 0;
        while ((reaped = ::waitpid(-1, &st, WNOHANG)) > 0) {
            if (reaped == child.guardian) {
                guardian_done = true;
                guardian_status = st;
            }
        }
        if (stopping ? reaped < 0 : guardian_done) break;  // stopping: until nothing of the tree is left

        int timeout_ms = -1;
        if (!stopping) {
            // Our own deadline: a renewal that hangs reports nothing. The tree
            // must be dead `margin` before the safe deadline, and gets `grace`
            // after SIGTERM before that.
            auto const left = lease.remaining();
            kill_by = steady::now() + left - times.margin;
            tree_deadline.set(kill_by);
            if (left <= times.grace + times.margin) {
                if (left == steady::duration::zero()) loss.report("its validity ran out before a renewal succeeded");
                auto left_ms = std::chrono::floor<milliseconds>(left).count();
                stop_tree(kill_by, left_ms > 0 ? lock_text + " is about to be lost while COMMAND is running: " +
                                                     loss.why_in_doubt() + ", and its safe validity ends in " +
                                                     std::to_string(left_ms) + " ms"
                                               : "lost " + lock_text + " while COMMAND was running: " + loss.reason());
            } else {
                timeout_ms = static_cast<int>(
                    std::min<long long>(std::chrono::ceil<milliseconds>(left - times.grace - times.margin).count(),
                                        INT_MAX));
            }
        }
        if (stopping) {
            auto left = std::chrono::ceil<milliseconds>(kill_at - steady::now()).count();
            timeout_ms = left > 0 ? static_cast<int>(left) : 20;  // after the grace: kill until none is left
        }
        pollfd p[3] = {{sigfd, POLLIN, 0}, {loss.event.get(), POLLIN, 0}, {loss.renewed.get(), POLLIN, 0}};
        if (::poll(p, 3, timeout_ms) < 0 && errno != EINTR) system_failure("poll");
        if (p[2].revents != 0) {
            std::uint64_t count = 0;
            [[maybe_unused]] auto n = ::read(loss.renewed.get(), &count, sizeof count);  // the loop's top publishes it
        }
        if (p[0].revents != 0) {
            signalfd_siginfo si{};
            while (::read(sigfd, &si, sizeof si) == static_cast<ssize_t>(sizeof si)) {
                if (si.ssi_signo == SIGCHLD) continue;
                signalled = true;
                // A terminal's Ctrl-C (si_code SI_KERNEL) already reached COMMAND's
                // processes in our process group: forward only signals sent to us.
                if (si.ssi_code != SI_KERNEL) tree.signal(self, static_cast<int>(si.ssi_signo), child.guardian);
            }
        }
        if (p[1].revents != 0) {
            std::uint64_t count = 0;
            [[maybe_unused]] auto n = ::read(loss.event.get(), &count, sizeof count);  // drain
            // The lock may be someone else's already: SIGKILL after the grace at the latest.
            stop_tree(std::min(kill_by, steady::now() + times.grace),
                      "lost " + lock_text + " while COMMAND was running: " + loss.reason());
        }
        if (stopping && steady::now() >= kill_at)
            tree.signal(self, SIGKILL);  // the guardian too: its orphans come to us
    }
    bool const lost = stopping;
    if (lost && return_on_loss) return {guardian_status, true, signalled};
    if (lost) {
        // COMMAND's tree is gone. Nothing is left to release, and a lease whose
        // renewal hangs would hang its own destruction (the renewer cannot be
        // joined): leave without it.
        std::fflush(nullptr);
        std::_Exit(exit_code::lost);
    }

    return {guardian_status, false, signalled};
}

/// COMMAND has exited: releases the lock and returns the exit code of run.
int finish_run(std::string const& lock_text, sqlock::lease& lease, loss_report& loss, child_process const& child,
               int guardian_status) {
    int status = 0;
    ssize_t n;
    do {
        n = ::read(child.status.get(), &status, sizeof status);
    } while (n < 0 && errno == EINTR);
    if (n != static_cast<ssize_t>(sizeof status)) status = guardian_status;  // the guardian was killed
    int const code = exit_status_of(status);
    try {
        lease.release();
    } catch (sqlock::lease_lost const&) {
        say("lost " + lock_text + " before COMMAND finished: " + loss.reason() +
            "; another holder may have run at the same time");
        return exit_code::lost;
    } catch (sqlock::error const& e) {
        say("COMMAND finished but " + lock_text + " could not be released (" + sqlock::tools::one_line(e.message()) +
            "): it expires by its TTL");
    }
    return code;
}

}  // namespace

command_variables lease_variables(std::string const& name, sqlock::lease const& lease, command_variables extra) {
    std::string owner = lease.owner();
    owner = owner.substr(0, owner.find('\x1f'));  // an election's row: owner id, U+001F, value
    command_variables vars{{"SQLOCK_NAME", name},
                           {"SQLOCK_OWNER", owner},
                           {"SQLOCK_TOKEN", std::to_string(lease.token())}};
    for (auto& kv : extra) vars.push_back(std::move(kv));
    return vars;
}

// ---- supervisor ----------------------------------------------------------------

struct supervisor::state {
    std::vector<int> inherited;
    unique_fd sigfd;
    std::shared_ptr<loss_report> loss = std::make_shared<loss_report>();
    std::optional<signal_watcher> watcher;
};

supervisor::supervisor() : state_(std::make_unique<state>()) {
    auto& s = *state_;
    s.inherited = open_descriptors();
    sigset_t signals = handled_signals();
    if (::pthread_sigmask(SIG_BLOCK, &signals, nullptr) != 0) system_failure("pthread_sigmask");
    s.sigfd = unique_fd(::signalfd(-1, &signals, SFD_CLOEXEC | SFD_NONBLOCK));
    if (s.sigfd.get() < 0) system_failure("signalfd");
    if (s.loss->event.get() < 0 || s.loss->renewed.get() < 0) system_failure("eventfd");
    // A signal while the database is being opened cancels the first wait.
    s.watcher.emplace(s.sigfd.get());
}

supervisor::~supervisor() = default;

std::function<void(sqlock::lease_event const&)> supervisor::on_event() const {
    // on_event, not on_lost: it carries the reason, and runs right after on_lost on the same thread.
    return [loss = state_->loss](sqlock::lease_event const& e) {
        if (!loss->concerns(e.token)) return;
        if (e.what == sqlock::lease_event::kind::lost) loss->report(e.detail);
        if (e.what == sqlock::lease_event::kind::renew_failed) loss->renewal_failed(e.detail);
        if (e.what == sqlock::lease_event::kind::renewed) loss->renewal_done();
    };
}

int supervisor::while_taking(std::function<bool(std::stop_token)> const& take) {
    auto& s = *state_;
    if (!s.watcher) s.watcher.emplace(s.sigfd.get());
    int sig = s.watcher->signal();
    if (sig == 0) {
        try {
            take(s.watcher->token());
        } catch (sqlock::cancelled const&) {}
        s.watcher->stop();
        sig = s.watcher->signal();
    }
    s.watcher.reset();
    return sig;
}

supervisor::outcome supervisor::run(std::vector<std::string> const& command, command_variables const& vars,
                                    sqlock::lease& lease, milliseconds ttl, std::string const& what,
                                    bool return_on_loss, std::string const& after_loss) {
    auto& s = *state_;
    s.loss->reset(lease.token());
    process_tree tree;
    auto const times = stop_times_for(ttl);
    shared_deadline tree_deadline;
    tree_deadline.set(steady::now() + lease.remaining() - times.margin);
    auto child = spawn(command, child_environment(vars), s.inherited, tree, times, tree_deadline);
    if (child.pid < 0) {
        lease.release();
        fail(child.exec_errno == ENOENT ? exit_code::command_not_found : exit_code::cannot_execute,
             "cannot run '" + command_text(command) + "': " + errno_text(child.exec_errno));
    }
    auto const done = supervise(command, what, lease, *s.loss, s.sigfd.get(), tree, child, times, tree_deadline,
                                return_on_loss, after_loss);
    if (done.lost) {
        // Neither released nor destroyed: a lease whose renewal hangs would hang both.
        static auto* const left_behind = new std::vector<sqlock::lease>();  // never destroyed, on purpose
        left_behind->push_back(std::move(lease));
        return {exit_code::lost, true, done.signalled};
    }
    int const code = finish_run(what, lease, *s.loss, child, done.guardian_status);
    return {code, lease.state() == sqlock::lease_state::lost, done.signalled};
}

// ---- stop_on_signals -----------------------------------------------------------

struct stop_on_signals::state {
    unique_fd sigfd;
    std::optional<signal_watcher> watcher;
};

stop_on_signals::stop_on_signals() : state_(std::make_unique<state>()) {
    sigset_t signals = handled_signals();
    sigdelset(&signals, SIGCHLD);
    if (::pthread_sigmask(SIG_BLOCK, &signals, nullptr) != 0) system_failure("pthread_sigmask");
    state_->sigfd = unique_fd(::signalfd(-1, &signals, SFD_CLOEXEC | SFD_NONBLOCK));
    if (state_->sigfd.get() < 0) system_failure("signalfd");
    state_->watcher.emplace(state_->sigfd.get());
}

stop_on_signals::~stop_on_signals() = default;

std::stop_token stop_on_signals::token() const noexcept { return state_->watcher->token(); }

// ---- run -----------------------------------------------------------------------

namespace {

/// run's durations, read from its arguments.
struct run_times {
    milliseconds ttl;
    milliseconds wait;
    std::optional<milliseconds> member_timeout;  ///< majority mode
    int limit = 0;                               ///< --limit: the semaphore's permits (0: none)
};

/// Checks run's arguments before anything is opened; exits 64 when they are wrong.
run_times check_run_args(run_args const& args) {
    if (args.command.empty())
        fail(exit_code::usage, "run needs a command after `--`: sqlock run --name NAME -- COMMAND [ARG]...");
    run_times t{.ttl = parse_duration("--ttl", args.ttl), .wait = parse_duration("--wait", args.wait)};
    bool const majority = args.dbs.size() > 1;
    if (!args.member_timeout.empty()) {
        if (!majority) fail(exit_code::usage, "--member-timeout is for majority mode: give it with several --db");
        t.member_timeout = parse_duration("--member-timeout", args.member_timeout);
    }
    if (!args.limit.empty()) {
        int n = 0;
        auto const* end = args.limit.data() + args.limit.size();
        auto [p, ec] = std::from_chars(args.limit.data(), end, n);
        if (ec != std::errc() || p != end || n < 1 || n > 10000)
            fail(exit_code::usage, "--limit takes the number of permits, 1 to 10000, not '" + printable(args.limit) +
                                       "': sqlock run --limit N --name NAME -- COMMAND");
        if (args.shared)
            fail(exit_code::usage,
                 "--limit and --shared do not go together: --limit N holds one of N permits "
                 "(a semaphore), --shared a shared lease of a read-write lock");
        if (majority)
            fail(exit_code::usage,
                 "--limit takes one --db: a semaphore keeps its permits in one database, not in "
                 "the members of a majority");
        t.limit = n;
    }
    if (args.shared) {
        if (majority)
            fail(exit_code::usage,
                 "--shared takes one --db: a read-write lock keeps its readers in one database, not "
                 "in the members of a majority");
        if (args.strategy == "row")
            fail(exit_code::usage,
                 "--shared needs --strategy table (the default): readers are counted by their lock "
                 "rows, which a row lock does not keep");
    }
    if (majority) {
        reject_duplicate_databases(args.dbs);
        // Which lockers can be members (not an SQLite row lock, say) is the library's rule:
        // sqlock::majority_locker refuses the others with a usage_error, reported as exit 64.
    }
    return t;
}

/// What run takes the lock with: one store, or the members of a majority, and
/// the locker over them. Filled in place: the locker refers to the stores.
struct lock_setup {
    std::optional<member_opening> opening;  // joins its threads last: a member left out may still be connecting
    std::optional<sqlock::store> store;
    std::vector<member> members;
    std::vector<sqlock::store const*> stores;  // to say who holds a busy lock
    std::optional<sqlock::locker> locker;
};

/// Opens the database (or the members) of `db` and makes the locker into `to`.
void open_locker(run_args const& args, run_times const& t, database const& db,
                 std::function<void(sqlock::lease_event const&)> on_event, lock_setup& to) {
    if (args.dbs.size() <= 1) {
        // The embedded SQLite file works out of the box: run creates it and its
        // tables. On a server the schema is the operator's: missing tables are exit 78.
        bool const sqlite = engine_of_url(db.url) == sqlock::engine::sqlite;
        try {
            to.store.emplace(db.url, sqlock::store_options{.pool_size = 4, .create_schema = sqlite});
        } catch (sqlock::schema_missing const&) {
            throw schema_missing_error(db.url);
        }
        to.stores.push_back(&*to.store);
        sqlock::locker_options options{.ttl = t.ttl, .auto_renew = true, .on_event = on_event};
        to.locker.emplace(args.strategy == "row" ? sqlock::row_locker(*to.store, options)
                                                 : sqlock::table_locker(*to.store, options));
    } else {
        // A member that cannot connect in the time it would have to answer
        // counts as down: it costs its member timeout at start, not the default
        // 5 s (PostgreSQL's connect timeout is 2 s at least).
        auto const answer_within = t.member_timeout.value_or(t.ttl / 10);
        to.opening.emplace(args.dbs, std::clamp<std::chrono::milliseconds>(answer_within, std::chrono::seconds(2),
                                                                           std::chrono::seconds(5)));
        to.members = to.opening->wait();
        for (auto const& m : to.members)
            if (m.store) to.stores.push_back(&*m.store);
        to.locker.emplace(majority_of(
            to.members, args, t.ttl,
            {.member_timeout = t.member_timeout, .owner = majority_owner(), .auto_renew = true, .on_event = on_event}));
    }
}

/// How run takes its lease, from its arguments.
lease_kind kind_of(run_args const& args, run_times const& t) {
    if (t.limit > 0) return lease_kind::permit;
    if (args.shared) return lease_kind::shared;
    // Plain run on one database with a table lock is the write lock of a name used with --shared.
    if (args.dbs.size() <= 1 && args.strategy == "table") return lease_kind::exclusive;
    return lease_kind::lock;
}

/// The permit number of a semaphore's lease (its slot's row is NAME U+001F p U+001F N), or empty.
std::optional<std::string> permit_of(sqlock::lease const& lease) {
    auto const& n = lease.name();
    auto const at = n.rfind('\x1f');
    if (at == std::string::npos || at < 2 || n.compare(at - 2, 2, "\x1fp") != 0) return std::nullopt;
    return n.substr(at + 1);
}

/// Takes run's lease with `to`'s locker, waiting up to `wait`. Exits with
/// --conflict-exit-code when it is busy, and 128+N when signal N came before
/// the lease was taken.
sqlock::lease take_lock(run_args const& args, run_times const& t, lock_setup& to, supervisor& sup) {
    auto const kind = kind_of(args, t);
    std::optional<sqlock::semaphore> semaphore;
    std::optional<sqlock::rw_locker> rw;
    if (kind == lease_kind::permit) semaphore.emplace(*to.locker, t.limit);
    if (kind == lease_kind::shared || kind == lease_kind::exclusive) rw.emplace(*to.locker);
    bool const once = t.wait.count() == 0;

    std::optional<sqlock::lease> lease;
    std::optional<std::string> lost;
    int const sig = sup.while_taking([&](std::stop_token cancel) {
        try {
            switch (kind) {
                case lease_kind::permit:
                    lease = once ? semaphore->try_acquire(args.name)
                                 : std::optional(semaphore->acquire(args.name, t.wait, cancel));
                    break;
                case lease_kind::shared:
                    lease = once ? rw->try_acquire_shared(args.name)
                                 : std::optional(rw->acquire_shared(args.name, t.wait, cancel));
                    break;
                case lease_kind::exclusive:
                    lease = once ? rw->try_acquire(args.name) : std::optional(rw->acquire(args.name, t.wait, cancel));
                    break;
                case lease_kind::lock:
                    lease = once ? to.locker->try_acquire(args.name)
                                 : std::optional(to.locker->acquire(args.name, t.wait, cancel));
                    break;
            }
        } catch (sqlock::timeout const&) {
        } catch (sqlock::lease_lost const& e) {  // the name's lock, lost while the writer waited for readers
            lost = sqlock::tools::one_line(e.message());
        }
        return lease.has_value();
    });
    if (sig != 0) {
        if (lease) lease->release();
        fail(128 + sig, "interrupted by signal " + std::to_string(sig) + " (" + strsignal(sig) + ") while taking " +
                            (kind == lease_kind::permit ? "a permit of " : "") + "lock '" + printable(args.name) + "'" +
                            (kind == lease_kind::shared ? " (shared)" : "") + "; COMMAND not started");
    }
    if (lost) fail(exit_code::lost, *lost + "; COMMAND not started");
    if (!lease) {
        explain_conflict(to.stores, args.name, kind, t.wait);
        fail(args.conflict_exit_code, "");
    }
    return std::move(*lease);
}

/// What --metrics-textfile reports of one run.
struct run_record {
    std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
    std::optional<std::chrono::steady_clock::duration> lock_wait;  // set once the lease was taken
    bool lost = false;
};

/// --metrics-textfile: checked before anything is opened (exit 64, nothing written).
void check_textfile(std::string const& path) {
    if (path.empty()) return;
    namespace fs = std::filesystem;
    fs::path const p(path);
    if (p.extension() != ".prom")
        fail(exit_code::usage, "--metrics-textfile " + printable(path) +
                                   ": node-exporter's textfile collector reads only files named *.prom; give a path "
                                   "ending in .prom");
    auto const dir = p.has_parent_path() ? p.parent_path() : fs::path(".");
    std::error_code ec;
    if (!fs::is_directory(dir, ec))
        fail(exit_code::usage, "--metrics-textfile " + printable(path) + ": its directory " + printable(dir.string()) +
                                   " does not exist: create it, or give another path");
    if (::access(dir.c_str(), W_OK | X_OK) != 0)
        fail(exit_code::usage, "--metrics-textfile " + printable(path) + ": its directory " + printable(dir.string()) +
                                   " is not writable (" + errno_text(errno) +
                                   "): give a directory this user can write");
}

/// Writes the run's metrics to args.metrics_textfile: beside it first, then
/// renamed over it, so that a scrape never reads half a file. A failure is
/// reported on stderr and does not change the exit code.
void write_textfile(run_args const& args, run_times const& t, run_record const& rec, int code) noexcept {
    try {
        using sqlock::metric_family;
        using sqlock::metric_type;
        auto const seconds = [](std::chrono::steady_clock::duration d) {
            return std::chrono::duration<double>(d).count();
        };
        std::string outcome;
        if (!rec.lock_wait)
            outcome = code == args.conflict_exit_code ? (t.wait.count() > 0 ? "timeout" : "busy") : "error";
        else if (rec.lost) outcome = "lost";
        else outcome = code == 0 ? "ok" : "failed";
        std::vector<std::pair<std::string, std::string>> const name{{"name", args.name}};
        auto gauge = [&](std::string n, std::string help, double v) {
            return metric_family{std::move(n), std::move(help), metric_type::gauge, {}, {{name, v, {}, 0, 0}}};
        };
        std::vector<metric_family> families{
            gauge("sqlock_run_duration_seconds", "Time the last sqlock run took, from its start to its exit.",
                  seconds(std::chrono::steady_clock::now() - rec.start)),
            gauge("sqlock_run_lock_wait_seconds", "Time the last sqlock run waited for its lock (0 when not taken).",
                  rec.lock_wait ? seconds(*rec.lock_wait) : 0.0),
            gauge("sqlock_run_exit_code", "Exit code of the last sqlock run.", code),
            gauge("sqlock_run_last_timestamp_seconds", "Unix time at which the last sqlock run ended.",
                  std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count()),
            metric_family{"sqlock_run_outcome",
                          "Outcome of the last sqlock run (1 for it, 0 for the others): ok, failed (COMMAND exited "
                          "non-zero), busy or timeout (the lock was held), lost (the lease was lost while COMMAND "
                          "ran), error (sqlock could not take the lock: database, usage, signal).",
                          metric_type::gauge,
                          {},
                          {}}};
        for (char const* o : {"ok", "failed", "busy", "timeout", "lost", "error"}) {
            auto labels = name;
            labels.emplace_back("outcome", o);
            families.back().samples.push_back({labels, outcome == o ? 1.0 : 0.0, {}, 0, 0});
        }
        std::ostringstream text;
        sqlock::write_text(text, families);
        auto const body = std::move(text).str();
        // A new file of a name nobody could plant (mkstemp: O_CREAT|O_EXCL, which never follows a
        // symlink), in PATH's directory so that the rename stays on one file system; 0644, for
        // node-exporter's textfile collector runs as another user.
        std::string aside = args.metrics_textfile + ".tmp.XXXXXX";
        int const fd = ::mkstemp(aside.data());
        if (fd < 0) throw std::runtime_error("creating a file beside it failed: " + errno_text(errno));
        auto const discard = [&](std::string const& what) {
            auto const err = errno;
            ::close(fd);
            ::unlink(aside.c_str());
            throw std::runtime_error(what + " " + printable(aside) + " failed: " + errno_text(err));
        };
        if (::fchmod(fd, 0644) != 0) discard("making readable");
        for (std::size_t done = 0; done < body.size();) {
            auto const n = ::write(fd, body.data() + done, body.size() - done);
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) discard("writing");
            done += static_cast<std::size_t>(n);
        }
        if (::fsync(fd) != 0) discard("flushing");
        if (::close(fd) != 0) {
            auto const err = errno;
            ::unlink(aside.c_str());
            throw std::runtime_error("writing " + printable(aside) + " failed: " + errno_text(err));
        }
        // rename replaces PATH itself (a symlink planted there, not what it points to); over a
        // directory it fails, and the run's exit code stays COMMAND's.
        if (std::rename(aside.c_str(), args.metrics_textfile.c_str()) != 0) {
            auto const err = errno;
            ::unlink(aside.c_str());
            throw std::runtime_error("renaming it into place failed: " + errno_text(err));
        }
    } catch (std::exception const& e) {
        std::fprintf(stderr,
                     "sqlock: warning: could not write --metrics-textfile %s (%s); the exit code is "
                     "COMMAND's as ever: check the path's directory and free space\n",
                     printable(args.metrics_textfile).c_str(), e.what());
    }
}

int run_locked(run_args const& args, run_times const& t, run_record& rec) {
    auto db = resolve_database(args.dbs);

    supervisor sup;
    lock_setup locks;
    open_locker(args, t, db, sup.on_event(), locks);
    auto const asked = std::chrono::steady_clock::now();
    auto lease = take_lock(args, t, locks, sup);
    rec.lock_wait = std::chrono::steady_clock::now() - asked;
    // Right before COMMAND starts, the database says whether the lease is still
    // ours (a renewal): one lost meanwhile (force-released, expired) starts
    // nothing. A renewal that cannot reach the database leaves the lease in
    // doubt: COMMAND starts, and is stopped before the safe deadline as ever.
    try {
        lease.renew();
    } catch (sqlock::lease_lost const& e) {
        rec.lost = true;
        fail(exit_code::lost, "lost lock '" + printable(args.name) + "' (token " + std::to_string(lease.token()) +
                                  ") before COMMAND started: " + sqlock::tools::one_line(e.message()) +
                                  "; COMMAND not started");
    } catch (sqlock::error const&) {}

    command_variables extra;
    std::string what = "lock '" + printable(args.name) + "' (token " + std::to_string(lease.token()) + ")";
    if (auto permit = permit_of(lease)) {
        extra.emplace_back("SQLOCK_PERMIT", *permit);
        what = "permit " + *permit + " of " + what;
    } else if (args.shared) {
        what = "shared " + what;
    }
    bool const report = !args.metrics_textfile.empty();
    auto const out = sup.run(args.command, lease_variables(args.name, lease, std::move(extra)), lease, t.ttl, what,
                             report, "exit 76");
    rec.lost = out.lost;
    if (out.lost && report) {
        // As the supervisor leaves on a loss, once the textfile says so: without
        // the lease, whose renewal may hang (it would hang its destruction).
        write_textfile(args, t, rec, exit_code::lost);
        std::fflush(nullptr);
        std::_Exit(exit_code::lost);
    }
    return out.code;
}

}  // namespace

int run_command(run_args const& args) {
    auto const t = check_run_args(args);
    check_textfile(args.metrics_textfile);
    run_record rec;
    if (args.metrics_textfile.empty()) return run_locked(args, t, rec);
    int code = exit_code::ok;
    try {
        code = run_locked(args, t, rec);
    } catch (exit_error const& e) {
        write_textfile(args, t, rec, e.code);
        throw;
    } catch (...) {
        write_textfile(args, t, rec, sqlock::tools::exit_code_of_current_exception());
        throw;
    }
    write_textfile(args, t, rec, code);
    return code;
}

}  // namespace sqlock::cli
