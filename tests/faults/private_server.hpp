// sqlock fault tests — private PostgreSQL servers and the server-wide faults applied to them.
//
//   private_pg           scripts/test-servers.sh start in a temp dir, PostgreSQL only (SQLOCK_TEST_ENGINES=
//                        postgresql, the SQLOCK_TEST_PG_CONF/HBA/ENV settings); stopped and removed on
//                        destruction, always. crash(): SIGKILL of the postmaster; kill_tree() + start_again():
//                        SIGKILL of the whole server process tree, kept down until restarted (same port, data).
//   private_mariadb      the same for MariaDB only (SQLOCK_TEST_ENGINES=mariadb, the SQLOCK_TEST_MY_ARGS/SQL/ENV
//                        settings); mariadbd() is the server's one process (for the freezer); crash() + start_again():
//                        SIGKILL of it, kept down until restarted (same port, data).
//   freezer              a cgroup v1 freezer group of our own (FROZEN / THAWED), emptied and removed on destruction.
//   faked_clock_server   a private_pg with libfaketime preloaded into the postmaster (FAKETIME_TIMESTAMP_FILE,
//                        FAKETIME_NO_CACHE=1, DONT_FAKE_MONOTONIC=1): offset("+6s") moves its wall clock at once.
//   faked_clock_mariadb  the same for a private_mariadb (libfaketime preloaded into mariadbd).
// Used by server_nemesis_suite.cpp (D03, D04, D07; MariaDB: D03, D07), failover_suite.cpp (D09) and
// majority_nemesis_suite.cpp (F02, F03, F07). Root is needed for the freezer and to run the server as the postgres
// user.
#pragma once

#include "../run_command.hpp"
#include "../test_env.hpp"
#include "../test_process.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <iostream>
#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#ifndef SQLOCK_TEST_SERVERS_SCRIPT
#error "SQLOCK_TEST_SERVERS_SCRIPT (path of scripts/test-servers.sh) must be defined by the build"
#endif

namespace sqlock_test {

namespace server_detail {

using namespace std::chrono_literals;

inline void write_file(fs::path const& p, std::string const& text) {
    int fd = ::open(p.c_str(), O_WRONLY | O_TRUNC | O_CREAT, 0644);
    if (fd < 0) throw std::runtime_error("cannot open " + p.string() + ": " + std::strerror(errno));
    auto n = ::write(fd, text.data(), text.size());
    int const err = errno;
    ::close(fd);
    if (n != static_cast<ssize_t>(text.size()))
        throw std::runtime_error("cannot write '" + text + "' to " + p.string() + ": " + std::strerror(err));
}

inline std::string trim(std::string s) {
    while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
    return s;
}

inline pid_t pid_in(fs::path const& postmaster_pid) {
    std::ifstream in(postmaster_pid);
    long pid = 0;
    in >> pid;
    return static_cast<pid_t>(pid);
}

/// Process `pid` exists and is not a zombie.
inline bool alive(pid_t pid) {
    if (pid <= 0 || ::kill(pid, 0) != 0) return false;
    std::ifstream in("/proc/" + std::to_string(pid) + "/status");
    for (std::string line; std::getline(in, line);)
        if (line.rfind("State:", 0) == 0) return line.find('Z') == std::string::npos;
    return false;
}

/// The direct children of `parent` (from /proc/<pid>/stat).
inline std::vector<pid_t> children_of(pid_t parent) {
    std::vector<pid_t> kids;
    for (auto const& entry : fs::directory_iterator("/proc")) {
        auto const name = entry.path().filename().string();
        if (name.empty() || !std::isdigit(static_cast<unsigned char>(name[0]))) continue;
        auto stat = slurp(entry.path() / "stat");
        auto close = stat.rfind(')');
        if (close == std::string::npos) continue;
        std::istringstream rest(stat.substr(close + 1));
        std::string state;
        long ppid = 0;
        if (rest >> state >> ppid && ppid == parent) kids.push_back(static_cast<pid_t>(std::stol(name)));
    }
    return kids;
}

/// scripts/test-servers.sh for one engine in a temp dir of its own: start (SQLOCK_TEST_DIR first, then
/// `settings`), the values of its env.sh, restart, and stop (by its owner's destructor).
class scripted_server {
public:
    explicit scripted_server(std::vector<std::string> settings) {
        using namespace std::chrono_literals;
        control_ = dir_.path() / "srv";
        settings.insert(settings.begin(), "SQLOCK_TEST_DIR=" + control_.string());
        auto r = run_command({"/bin/bash", SQLOCK_TEST_SERVERS_SCRIPT, "start"}, settings, 120s);
        started_ = true;  // stop even a half-started server
        if (!r.ok())
            throw std::runtime_error("scripts/test-servers.sh start failed (" + exit_text(r.status) + "): " + r.err);
        env_ = slurp(control_ / "env.sh");
    }
    scripted_server(scripted_server const&) = delete;
    scripted_server& operator=(scripted_server const&) = delete;

    /// `var`'s value in the server's env.sh.
    std::string value(std::string const& var) const {
        std::smatch m;
        if (!std::regex_search(env_, m, std::regex(var + "=([^\\s]+)")))
            throw std::runtime_error(var + " missing from the env.sh of the private server");
        return m[1];
    }

    /// scripts/test-servers.sh restart `engine`: the server again on its data and port.
    void restart(std::string const& engine) {
        using namespace std::chrono_literals;
        auto r = run_command({"/bin/bash", SQLOCK_TEST_SERVERS_SCRIPT, "restart", engine},
                             {"SQLOCK_TEST_DIR=" + control_.string()}, 120s);
        if (!r.ok())
            throw std::runtime_error("scripts/test-servers.sh restart " + engine + " failed (" + exit_text(r.status) +
                                     "): " + r.err);
    }

    /// scripts/test-servers.sh stop; if that fails, SIGKILL of `root` (never leave it running), said on stderr
    /// as "private <server> did not stop (...): killed <process> <root>".
    void stop(pid_t root, char const* server, char const* process) {
        using namespace std::chrono_literals;
        if (!started_) return;
        auto r = run_command({"/bin/bash", SQLOCK_TEST_SERVERS_SCRIPT, "stop"},
                             {"SQLOCK_TEST_DIR=" + control_.string()}, 120s);
        if (!r.ok() && alive(root) && ::kill(root, SIGKILL) == 0)
            std::cerr << "private " << server << " did not stop (" << r.err << "): killed " << process << " " << root
                      << "\n";
    }

    fs::path const& dir() const { return dir_.path(); }

private:
    temp_dir dir_;
    fs::path control_;
    bool started_ = false;
    std::string env_;
};

/// A libfaketime timestamp file ("+0" at first) in a dir of its own, for a server's LD_PRELOAD.
class faketime_file {
public:
    faketime_file() : file_(dir_.path() / "faketime") { write_file(file_, "+0"); }
    /// The postmaster's or mariadbd's environment that preloads libfaketime reading this file.
    std::string preload_env() const {
        return "LD_PRELOAD=" + libfaketime_path().string() + " FAKETIME_TIMESTAMP_FILE=" + file_.string() +
               " FAKETIME_NO_CACHE=1 DONT_FAKE_MONOTONIC=1";
    }
    void offset(std::string const& o) {  // written whole, by rename: libfaketime rereads it on every call
        write_file(file_.string() + ".new", o);
        fs::rename(file_.string() + ".new", file_);
    }
    fs::path const& dir() const { return dir_.path(); }

private:
    temp_dir dir_;
    fs::path file_;
};

}  // namespace server_detail

// ------------------------------------------------------------------ a private PostgreSQL server

/// scripts/test-servers.sh start in a temp dir, PostgreSQL only; stopped (and its dir removed) on destruction.
class private_pg {
public:
    struct settings {
        std::string conf;  // SQLOCK_TEST_PG_CONF
        std::string hba;   // SQLOCK_TEST_PG_HBA
        std::string env;   // SQLOCK_TEST_PG_ENV
    };

    explicit private_pg(settings s = {})
        : server_({"SQLOCK_TEST_ENGINES=postgresql", "SQLOCK_TEST_PG_CONF=" + s.conf, "SQLOCK_TEST_PG_HBA=" + s.hba,
                   "SQLOCK_TEST_PG_ENV=" + s.env}) {
        port_ = server_.value("SQLOCK_TEST_PG_PORT");
        data_ = server_.value("SQLOCK_TEST_PG_DATA");
        socket_dir_ = server_.value("SQLOCK_TEST_PG_SOCKET_DIR");
        postmaster_ = postmaster();
    }
    ~private_pg() { server_.stop(postmaster_, "PostgreSQL", "its postmaster"); }
    private_pg(private_pg const&) = delete;
    private_pg& operator=(private_pg const&) = delete;

    std::string url(std::string const& host = "127.0.0.1", std::string const& db = "sqlock") const {
        return "postgresql://sqlock:sqlock@" + host + ":" + port_ + "/" + db;
    }
    std::string conninfo(std::string const& host) const {
        return "host=" + host + " port=" + port_ + " dbname=sqlock user=sqlock password=sqlock connect_timeout=2";
    }
    std::string const& port() const { return port_; }
    fs::path const& dir() const { return server_.dir(); }
    fs::path socket_dir() const { return socket_dir_; }

    /// The postmaster's pid (first line of postmaster.pid).
    pid_t postmaster() const {
        pid_t const pid = server_detail::pid_in(fs::path(data_) / "postmaster.pid");
        if (pid <= 0) throw std::runtime_error("no postmaster.pid in " + data_);
        return pid;
    }

    /// kill -9 of the postmaster (its backends end when they notice). Its postmaster.pid is removed once it is
    /// dead (it may stay a zombie nobody reaps), so that the teardown's stop sees a stopped server.
    void crash() {
        using namespace std::chrono_literals;
        if (::kill(postmaster_, SIGKILL) != 0)
            throw std::runtime_error("cannot kill the postmaster " + std::to_string(postmaster_) + ": " +
                                     std::strerror(errno));
        if (!eventually([&] { return !server_detail::alive(postmaster_); }, 60s))
            throw std::runtime_error("the postmaster " + std::to_string(postmaster_) + " survived SIGKILL");
        auto const pidfile = fs::path(data_) / "postmaster.pid";
        if (server_detail::pid_in(pidfile) == postmaster_) fs::remove(pidfile);
    }

    /// kill -9 of the whole server: the postmaster and every process under it at once (backends, checkpointer,
    /// walwriter, ...), then waits until all are gone and removes the lock files that name the dead postmaster.
    /// The server stays down until start_again(). Returns how many processes were killed.
    std::size_t kill_tree() {
        using namespace std::chrono_literals;
        std::vector<pid_t> tree{postmaster_};
        for (std::size_t i = 0; i < tree.size(); ++i)
            for (pid_t child : server_detail::children_of(tree[i])) tree.push_back(child);
        if (::kill(postmaster_, SIGKILL) != 0)
            throw std::runtime_error("cannot kill the postmaster " + std::to_string(postmaster_) + ": " +
                                     std::strerror(errno));
        for (std::size_t i = 1; i < tree.size(); ++i) ::kill(tree[i], SIGKILL);  // one may have exited meanwhile
        // Children forked in between are orphans of a dead postmaster: they exit when they notice it.
        if (!eventually(
                [&] {
                    for (pid_t p : tree)
                        if (server_detail::alive(p)) return false;
                    for (pid_t p : server_detail::children_of(postmaster_))
                        if (server_detail::alive(p)) return false;
                    return true;
                },
                60s))
            throw std::runtime_error("the server tree of postmaster " + std::to_string(postmaster_) +
                                     " survived SIGKILL for 60 s");
        for (auto const& f : {fs::path(data_) / "postmaster.pid", socket_dir_ / (".s.PGSQL." + port_ + ".lock")})
            if (fs::exists(f) && server_detail::pid_in(f) == postmaster_) fs::remove(f);
        return tree.size();
    }

    /// Starts the server again on its data and port (scripts/test-servers.sh restart postgresql: crash recovery
    /// after kill_tree), with the postmaster environment it was started with.
    void start_again() {
        server_.restart("postgresql");
        postmaster_ = postmaster();
    }

private:
    server_detail::scripted_server server_;
    std::string port_, data_;
    fs::path socket_dir_;
    pid_t postmaster_ = 0;
};

// ------------------------------------------------------------------ a private MariaDB server

/// scripts/test-servers.sh start in a temp dir, MariaDB only; stopped (and its dir removed) on destruction.
class private_mariadb {
public:
    struct settings {
        std::string args;  // SQLOCK_TEST_MY_ARGS: extra mariadbd options
        std::string sql;   // SQLOCK_TEST_MY_SQL: extra setup SQL, run as root
        std::string env;   // SQLOCK_TEST_MY_ENV
    };

    explicit private_mariadb(settings s = {})
        : server_({"SQLOCK_TEST_ENGINES=mariadb", "SQLOCK_TEST_MY_ARGS=" + s.args, "SQLOCK_TEST_MY_SQL=" + s.sql,
                   "SQLOCK_TEST_MY_ENV=" + s.env}) {
        port_ = server_.value("SQLOCK_TEST_MYSQL_PORT");
        pid_file_ = server_.value("SQLOCK_TEST_MYSQL_PID_FILE");
        mariadbd_ = mariadbd();
    }
    ~private_mariadb() { server_.stop(mariadbd_, "MariaDB", "mariadbd"); }
    private_mariadb(private_mariadb const&) = delete;
    private_mariadb& operator=(private_mariadb const&) = delete;

    std::string url(std::string const& host = "127.0.0.1", std::string const& db = "sqlock") const {
        return "mysql://sqlock:sqlock@" + host + ":" + port_ + "/" + db;
    }
    std::string const& port() const { return port_; }
    fs::path const& dir() const { return server_.dir(); }

    /// mariadbd's pid (its pid file): the whole server, one process.
    pid_t mariadbd() const {
        pid_t const pid = server_detail::pid_in(pid_file_);
        if (pid <= 0) throw std::runtime_error("no pid in " + pid_file_);
        return pid;
    }

    /// kill -9 of mariadbd (the whole server: one process), then waits until it is gone. It stays down until
    /// start_again().
    void crash() {
        using namespace std::chrono_literals;
        pid_t const pid = mariadbd();
        if (::kill(pid, SIGKILL) != 0)
            throw std::runtime_error("cannot kill mariadbd " + std::to_string(pid) + ": " + std::strerror(errno));
        if (!eventually([&] { return !server_detail::alive(pid); }, 60s))
            throw std::runtime_error("mariadbd " + std::to_string(pid) + " survived SIGKILL for 60 s");
    }

    /// Starts the server again on its data and port (scripts/test-servers.sh restart mariadb: InnoDB's crash
    /// recovery after crash()).
    void start_again() {
        server_.restart("mariadb");
        mariadbd_ = mariadbd();
    }

private:
    server_detail::scripted_server server_;
    std::string port_, pid_file_;
    pid_t mariadbd_ = 0;
};

// ------------------------------------------------------------------ the cgroup v1 freezer

inline fs::path const freezer_root = "/sys/fs/cgroup/freezer";

/// A freezer cgroup of our own; on destruction: thawed, emptied into the root cgroup, removed.
class freezer {
public:
    freezer() : dir_(freezer_root / ("sqlock-nemesis-" + std::to_string(::getpid()) + "-" + random_hex(8))) {
        remove_stale();
        fs::create_directory(dir_);
    }
    ~freezer() { empty_and_remove(dir_); }
    freezer(freezer const&) = delete;
    freezer& operator=(freezer const&) = delete;

    /// Groups left by a run that was killed mid-freeze (its pid, in the name, is gone): thawed and removed,
    /// so their server is not left frozen for ever.
    static void remove_stale() {
        std::error_code ec;
        for (auto const& entry : fs::directory_iterator(freezer_root, ec)) {
            std::smatch m;
            auto const name = entry.path().filename().string();
            if (std::regex_match(name, m, std::regex("sqlock-nemesis-([0-9]+)-[0-9a-f]+")) &&
                ::kill(static_cast<pid_t>(std::stol(m[1])), 0) != 0 && errno == ESRCH)
                empty_and_remove(entry.path());
        }
    }

    /// Moves `root` and then all its descendants here. A child forked after `root` moved is born here.
    std::size_t adopt_tree(pid_t root) {
        server_detail::write_file(dir_ / "cgroup.procs", std::to_string(root));
        std::vector<pid_t> todo{root};
        std::size_t moved = 1;
        while (!todo.empty()) {
            pid_t parent = todo.back();
            todo.pop_back();
            for (pid_t child : server_detail::children_of(parent)) {
                try {
                    server_detail::write_file(dir_ / "cgroup.procs", std::to_string(child));
                    ++moved;
                } catch (...) {  // exited meanwhile
                }
                todo.push_back(child);
            }
        }
        return moved;
    }

    /// Writes FROZEN or THAWED and waits until the kernel reports it done (FREEZING is transitional).
    void set(std::string const& state) {
        using namespace std::chrono_literals;
        server_detail::write_file(dir_ / "freezer.state", state);
        if (!eventually([&] { return server_detail::trim(slurp(dir_ / "freezer.state")) == state; }, 10s))
            throw std::runtime_error("the freezer cgroup " + dir_.string() + " did not reach " + state +
                                     " within 10 s: it says " + slurp(dir_ / "freezer.state"));
    }

    std::size_t members() const {
        std::istringstream procs(slurp(dir_ / "cgroup.procs"));
        std::size_t n = 0;
        for (std::string pid; procs >> pid;) ++n;
        return n;
    }

private:
    static void empty_and_remove(fs::path const& dir_) {
        using namespace std::chrono_literals;
        try {
            server_detail::write_file(dir_ / "freezer.state", "THAWED");
            std::istringstream procs(slurp(dir_ / "cgroup.procs"));
            for (std::string pid; procs >> pid;) {
                try {
                    server_detail::write_file(freezer_root / "cgroup.procs", pid);
                } catch (...) {  // it exited meanwhile
                }
            }
        } catch (...) {}
        for (int i = 0; i < 100 && ::rmdir(dir_.c_str()) != 0; ++i) std::this_thread::sleep_for(50ms);
    }

    fs::path dir_;
};

// ------------------------------------------------------------------ a server with a faked clock

/// A private server whose clock libfaketime moves: `offset("+6s")` jumps it at once (no restart).
class faked_clock_server {
public:
    faked_clock_server() : pg_(private_pg::settings{.env = clock_.preload_env()}) {}
    void offset(std::string const& o) { clock_.offset(o); }
    private_pg& pg() { return pg_; }

private:
    server_detail::faketime_file clock_;  // first: outlives the server
    private_pg pg_;
};

/// A private MariaDB whose clock libfaketime moves (preloaded into mariadbd only): `offset("+6s")` jumps it at once.
class faked_clock_mariadb {
public:
    faked_clock_mariadb() {
        fs::permissions(clock_.dir(), fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                                          fs::perms::others_read | fs::perms::others_exec);  // mariadbd runs as mysql
        my_.emplace(private_mariadb::settings{.env = clock_.preload_env()});
    }
    void offset(std::string const& o) { clock_.offset(o); }
    private_mariadb& server() { return *my_; }

private:
    server_detail::faketime_file clock_;  // first: outlives the server
    std::optional<private_mariadb> my_;
};

}  // namespace sqlock_test
