// sqlock tests — shared helpers: where the test databases are, raw SQL access
// to the lock tables behind the library's back, random name prefixes, and the
// per-engine fixture the Engines/<Suite>.<Test>/<engine> suites build on.
#pragma once

#include "worker_common.hpp"

#include <sqlock/sqlock.hpp>

#include <gtest/gtest.h>
#include <soci/mysql/soci-mysql.h>
#include <soci/postgresql/soci-postgresql.h>
#include <soci/soci.h>
#include <soci/sqlite3/soci-sqlite3.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <typeinfo>
#include <vector>

namespace sqlock_test {

namespace fs = std::filesystem;
using sqlock::engine;

// ------------------------------------------------------------------ environment

inline std::string engine_name(engine e) {
    switch (e) {
        case engine::postgresql: return "postgresql";
        case engine::mysql: return "mysql";
        case engine::sqlite: return "sqlite";
    }
    return "unknown";
}

inline std::optional<std::string> getenv_nonempty(char const* var) {
    char const* v = std::getenv(var);
    if (v == nullptr || *v == '\0') return std::nullopt;
    return std::string(v);
}

/// An exception for a failure message: "<type>: <what>".
inline std::string describe(std::exception const& e) { return std::string(typeid(e).name()) + ": " + e.what(); }

inline bool in_ci() { return getenv_nonempty("CI").has_value(); }

#if defined(__SANITIZE_ADDRESS__)
#define SQLOCK_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SQLOCK_TEST_ASAN 1
#endif
#endif
#ifndef SQLOCK_TEST_ASAN
#define SQLOCK_TEST_ASAN 0
#endif

/// True when this program, and so every program of its build (the workers, sqlock, sqlock-reaper), is
/// built with AddressSanitizer (scripts/sanitize.sh). libfaketime is never preloaded into such a
/// process: its constructor calls dlsym("__ftime"), the failed lookup formats its error with malloc
/// before ASan's allocator is initialised, and the process deadlocks on a futex (seen in CI, issue 18).
/// Those builds move a client's clock with tests/clock_shift_preload.cpp (skewed_process.hpp); the main
/// test run covers libfaketime. Servers (not instrumented) still get libfaketime.
inline constexpr bool sanitizer_build = SQLOCK_TEST_ASAN != 0;

/// libfaketime's preload library (Debian's faketime/libfaketime packages; scripts/deps.sh --servers),
/// or SQLOCK_TEST_LIBFAKETIME. May not exist: callers skip outside CI and fail under CI.
inline fs::path libfaketime_path() {
    if (auto set = getenv_nonempty("SQLOCK_TEST_LIBFAKETIME")) return *set;
    for (char const* dir : {"/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib"}) {
        fs::path p = fs::path(dir) / "faketime" / "libfaketime.so.1";
        if (fs::exists(p)) return p;
    }
    return "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";
}

/// THE check for a test-environment variable (server URL, log path, restart
/// command). Sets `out` when the variable is set. Otherwise, under CI (env CI
/// non-empty) the test fails; elsewhere it is skipped. The skip and the CI failure
/// return from this helper only: callers check `IsSkipped() || HasFatalFailure()`
/// (the fixtures do it in SetUp, which keeps the body from running).
inline void require_env(char const* var, std::string& out) {
    if (auto v = getenv_nonempty(var)) {
        out = *v;
        return;
    }
    if (in_ci()) {
        GTEST_FAIL() << var << " is not set and CI is set: start the test servers with "
                     << "`scripts/test-servers.sh start` and source the env.sh it prints "
                     << "(scripts/test.sh does both)";
    }
    GTEST_SKIP()
        << var
        << " is not set (not CI, so skipping; with CI set this fails): run `scripts/test-servers.sh start` and source the env.sh it prints";
}

inline bool should_stop() { return ::testing::Test::IsSkipped() || ::testing::Test::HasFatalFailure(); }

inline char const* url_var(engine e) {
    return e == engine::postgresql ? "SQLOCK_TEST_PG_URL" : "SQLOCK_TEST_MYSQL_URL";
}
inline char const* log_var(engine e) {
    return e == engine::postgresql ? "SQLOCK_TEST_PG_LOG" : "SQLOCK_TEST_MYSQL_LOG";
}
inline char const* restart_var(engine e) {
    return e == engine::postgresql ? "SQLOCK_TEST_PG_RESTART" : "SQLOCK_TEST_MYSQL_RESTART";
}

// ------------------------------------------------------------------ randomness

inline std::mt19937_64& rng() {
    thread_local std::mt19937_64 r{
        std::random_device{}() ^
        static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()) ^
        (static_cast<std::uint64_t>(::getpid()) << 32)};
    return r;
}

inline std::string random_hex(std::size_t n) {
    static constexpr char digits[] = "0123456789abcdef";
    std::string s(n, '0');
    for (auto& c : s) c = digits[rng()() % 16];
    return s;
}

/// A per-test lock-name prefix: random, so re-runs and concurrent runs on one
/// server never meet each other's rows.
inline std::string random_prefix() { return "sqlt-" + random_hex(12) + "/"; }

// ------------------------------------------------------------------ temp dir

class temp_dir {
public:
    temp_dir() {
        path_ = fs::temp_directory_path() / ("sqlock-test-" + random_hex(16));
        fs::create_directories(path_);
    }
    ~temp_dir() {
        std::error_code ec;
        fs::remove_all(path_, ec);
    }
    temp_dir(temp_dir const&) = delete;
    temp_dir& operator=(temp_dir const&) = delete;
    fs::path const& path() const { return path_; }

private:
    fs::path path_;
};

/// Restores the working directory on scope exit.
class cwd_guard {
public:
    cwd_guard() : old_(fs::current_path()) {}
    ~cwd_guard() {
        std::error_code ec;
        fs::current_path(old_, ec);
    }
    cwd_guard(cwd_guard const&) = delete;
    cwd_guard& operator=(cwd_guard const&) = delete;

private:
    fs::path old_;
};

/// A TCP port on 127.0.0.1 that nothing listens on (bound, then closed).
inline int closed_port() {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) throw std::runtime_error("socket() failed");
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = 0;
    socklen_t len = sizeof a;
    if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
        ::close(fd);
        throw std::runtime_error("bind()/getsockname() failed");
    }
    int port = ntohs(a.sin_port);
    ::close(fd);
    return port;
}

// ------------------------------------------------------------------ URLs

struct url_parts {
    std::string scheme, user, password, host, port, db;
};

inline std::string percent_decode(std::string_view s) {
    std::string out;
    for (std::size_t i = 0; i < s.size(); ++i) {
        if (s[i] == '%' && i + 2 < s.size() && std::isxdigit(static_cast<unsigned char>(s[i + 1])) &&
            std::isxdigit(static_cast<unsigned char>(s[i + 2]))) {
            out += static_cast<char>(std::stoi(std::string(s.substr(i + 1, 2)), nullptr, 16));
            i += 2;
        } else {
            out += s[i];
        }
    }
    return out;
}

/// scheme://[user[:password]@]host[:port]/db[?...] (enough for the test URLs).
inline url_parts parse_server_url(std::string const& url) {
    url_parts p;
    auto sep = url.find("://");
    if (sep == std::string::npos) throw std::invalid_argument("not a server URL: " + url);
    p.scheme = url.substr(0, sep);
    std::string rest = url.substr(sep + 3);
    if (auto q = rest.find('?'); q != std::string::npos) rest.resize(q);
    auto slash = rest.find('/');
    std::string authority = rest.substr(0, slash);
    p.db = slash == std::string::npos ? "" : rest.substr(slash + 1);
    if (auto at = authority.rfind('@'); at != std::string::npos) {
        std::string userinfo = authority.substr(0, at);
        authority = authority.substr(at + 1);
        auto colon = userinfo.find(':');
        p.user = percent_decode(userinfo.substr(0, colon));
        if (colon != std::string::npos) p.password = percent_decode(userinfo.substr(colon + 1));
    }
    auto colon = authority.rfind(':');
    p.host = authority.substr(0, colon);
    if (colon != std::string::npos) p.port = authority.substr(colon + 1);
    return p;
}

inline std::string with_password(std::string const& url, std::string const& user, std::string const& password) {
    url_parts p = parse_server_url(url);
    return p.scheme + "://" + user + ":" + password + "@" + p.host + (p.port.empty() ? "" : ":" + p.port) + "/" + p.db;
}

inline std::string sqlite_url(fs::path const& file) { return "sqlite://" + file.string(); }

inline std::string sqlite_path_of(std::string const& url) {
    if (url.rfind("sqlite://", 0) == 0) return url.substr(9);
    if (url.rfind("sqlite:", 0) == 0) return url.substr(7);
    throw std::invalid_argument("not a sqlite URL: " + url);
}

/// A value for a keyword=value connect string (libpq's, and SOCI's MySQL
/// backend's, which quote alike): in single quotes, ' and \ escaped by a backslash.
inline std::string pg_quote_param(std::string const& v) {
    std::string out = "'";
    for (char c : v) {
        if (c == '\'' || c == '\\') out += '\\';
        out += c;
    }
    return out + "'";
}

inline std::string mysql_quote_param(std::string const& v) { return pg_quote_param(v); }

// ------------------------------------------------------------------ raw SQL

/// A raw SOCI session on the database behind a sqlock URL, for checks the
/// library's API does not offer. MariaDB sessions run in UTC (as sqlock's do).
inline std::unique_ptr<soci::session> raw_session(engine e, std::string const& url) {
    switch (e) {
        case engine::postgresql: {
            // SOCI 4.0 rewrites the connect string, so hand it libpq keywords, not the URL.
            url_parts p = parse_server_url(url);
            std::string cs = "host=" + pg_quote_param(p.host) + " dbname=" + pg_quote_param(p.db) +
                             " user=" + pg_quote_param(p.user) + " password=" + pg_quote_param(p.password);
            if (!p.port.empty()) cs += " port=" + p.port;
            return std::make_unique<soci::session>(*soci::factory_postgresql(), cs);
        }
        case engine::mysql: {
            url_parts p = parse_server_url(url);
            std::string cs = "host=" + mysql_quote_param(p.host) + " dbname=" + mysql_quote_param(p.db) +
                             " user=" + mysql_quote_param(p.user) + " password=" + mysql_quote_param(p.password) +
                             " charset=utf8mb4";
            if (!p.port.empty()) cs += " port=" + p.port;
            auto s = std::make_unique<soci::session>(*soci::factory_mysql(), cs);
            *s << "SET time_zone = '+00:00'";
            return s;
        }
        case engine::sqlite:
            return std::make_unique<soci::session>(*soci::factory_sqlite3(),
                                                   "db=" + sqlite_path_of(url) + " timeout=10");
    }
    throw std::invalid_argument("engine");
}

/// SQL for "the database's now" in the lock tables' units.
inline std::string db_now_us_expr(engine e) {
    switch (e) {
        case engine::postgresql: return "CAST(extract(epoch FROM clock_timestamp()) * 1000000 AS BIGINT)";
        case engine::mysql: return "CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED)";
        case engine::sqlite: return "CAST((julianday('now') - 2440587.5) * 86400000000.0 AS INTEGER)";
    }
    return {};
}

/// SQL turning the `col` of a lock row into microseconds since the Unix epoch.
inline std::string col_us_expr(engine e, std::string const& col) {
    switch (e) {
        case engine::postgresql: return "CAST(extract(epoch FROM " + col + ") * 1000000 AS BIGINT)";
        case engine::mysql: return "CAST(UNIX_TIMESTAMP(" + col + ") * 1000000 AS SIGNED)";
        case engine::sqlite: return col;
    }
    return {};
}

/// The database's current time, microseconds since the Unix epoch.
inline long long db_now_us(soci::session& s, engine e) {
    long long v = 0;
    s << "SELECT " + db_now_us_expr(e), soci::into(v);
    return v;
}

struct lock_row {
    std::string name;
    std::string owner;
    long long token = 0;
    int holds = 0;
    long long created_us = 0;
    long long expires_us = 0;
    long long now_us = 0;  // the database's time when the row was read
    bool live() const { return expires_us > now_us; }
};

inline std::string locks_table(std::string const& prefix = "sqlock") { return prefix + "_locks"; }
inline std::string tokens_table(std::string const& prefix = "sqlock") { return prefix + "_tokens"; }

/// The lock row of `name`, read with raw SQL, or empty if there is none.
inline std::optional<lock_row> read_row(soci::session& s, engine e, std::string const& name,
                                        std::string const& prefix = "sqlock") {
    lock_row r;
    soci::indicator ind_owner = soci::i_ok;
    s << "SELECT name, owner, token, holds, " + col_us_expr(e, "created_at") + ", " + col_us_expr(e, "expires_at") +
             ", " + db_now_us_expr(e) + " FROM " + locks_table(prefix) + " WHERE name = :n",
        soci::into(r.name), soci::into(r.owner, ind_owner), soci::into(r.token), soci::into(r.holds),
        soci::into(r.created_us), soci::into(r.expires_us), soci::into(r.now_us), soci::use(name);
    if (!s.got_data()) return std::nullopt;
    return r;
}

/// The per-name fencing counter in `<prefix>_tokens`, if any.
inline std::optional<long long> read_counter(soci::session& s, std::string const& name,
                                             std::string const& prefix = "sqlock") {
    long long t = 0;
    s << "SELECT token FROM " + tokens_table(prefix) + " WHERE name = :n", soci::into(t), soci::use(name);
    if (!s.got_data()) return std::nullopt;
    return t;
}

/// Rows whose name starts with `name_prefix` (ASCII).
inline long long count_rows_with_prefix(soci::session& s, std::string const& name_prefix,
                                        std::string const& prefix = "sqlock") {
    long long n = 0;
    int len = static_cast<int>(name_prefix.size());
    s << "SELECT COUNT(*) FROM " + locks_table(prefix) + " WHERE substr(name, 1, " + std::to_string(len) + ") = :p",
        soci::into(n), soci::use(name_prefix);
    return n;
}

inline long long count_rows_named(soci::session& s, std::string const& name, std::string const& prefix = "sqlock") {
    long long n = 0;
    s << "SELECT COUNT(*) FROM " + locks_table(prefix) + " WHERE name = :n", soci::into(n), soci::use(name);
    return n;
}

inline long long count_rows_owned_by(soci::session& s, std::string const& owner, std::string const& prefix = "sqlock") {
    long long n = 0;
    s << "SELECT COUNT(*) FROM " + locks_table(prefix) + " WHERE owner = :o", soci::into(n), soci::use(owner);
    return n;
}

/// Poll `cond` every 10 ms until it holds or `limit` passes; returns its last
/// value. For outcomes that take database or background-thread time (not a
/// timing assertion: the limit is generous).
template <class Cond>
bool eventually(Cond cond, std::chrono::milliseconds limit = std::chrono::milliseconds(10000)) {
    auto const deadline = std::chrono::steady_clock::now() + limit;
    while (!cond()) {
        if (std::chrono::steady_clock::now() >= deadline) return cond();
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return true;
}

/// Make the row of `name` look expired an hour ago (by the database's clock).
inline void backdate_row(soci::session& s, engine e, std::string const& name, std::string const& prefix = "sqlock") {
    std::string set;
    switch (e) {
        case engine::postgresql:
            set = "created_at = now() - interval '2 hours', expires_at = now() - interval '1 hour'";
            break;
        case engine::mysql: set = "created_at = NOW(6) - INTERVAL 2 HOUR, expires_at = NOW(6) - INTERVAL 1 HOUR"; break;
        case engine::sqlite:
            set = "created_at = " + db_now_us_expr(e) + " - 7200000000, expires_at = " + db_now_us_expr(e) +
                  " - 3600000000";
            break;
    }
    s << "UPDATE " + locks_table(prefix) + " SET " + set + " WHERE name = :n", soci::use(name);
}

/// Delete the row of `name` behind the library's back (a "force break").
inline void delete_row(soci::session& s, std::string const& name, std::string const& prefix = "sqlock") {
    s << "DELETE FROM " + locks_table(prefix) + " WHERE name = :n", soci::use(name);
}

// ------------------------------------------------------------------ time helpers

inline long long us_of(sqlock::db_time t) { return t.time_since_epoch().count(); }

// steady_ns() is in worker_common.hpp (the worker programs use it too).

// ------------------------------------------------------------------ critical-section records

/// One critical section: the token it ran under and when it entered and left
/// (steady clock, ns; CLOCK_MONOTONIC, so comparable across processes).
struct cs_record {
    std::int64_t token = 0;
    std::int64_t enter_ns = 0;
    std::int64_t exit_ns = 0;
    long who = 0;                 // thread index or pid
    std::int64_t invoke_ns = -1;  // when its acquire was invoked (-1: not recorded)
};

/// Sorts by entry and checks that no two critical sections overlap and that
/// tokens strictly increase in entry order. Returns a description of the
/// first few violations (empty when all is well).
inline std::string check_history(std::vector<cs_record> recs) {
    std::sort(recs.begin(), recs.end(), [](cs_record const& a, cs_record const& b) { return a.enter_ns < b.enter_ns; });
    std::ostringstream out;
    int bad = 0;
    for (std::size_t i = 0; i < recs.size(); ++i) {
        if (recs[i].exit_ns < recs[i].enter_ns) {
            out << "record " << i << " exits before it enters\n";
            ++bad;
        }
        if (i == 0) continue;
        auto const& p = recs[i - 1];
        auto const& c = recs[i];
        if (c.enter_ns < p.exit_ns) {
            out << "overlap: [" << p.enter_ns << ", " << p.exit_ns << "] token " << p.token << " by " << p.who
                << " and [" << c.enter_ns << ", " << c.exit_ns << "] token " << c.token << " by " << c.who << "\n";
            ++bad;
        }
        if (c.token <= p.token) {
            out << "token not increasing: " << p.token << " (by " << p.who << ") then " << c.token << " (by " << c.who
                << ")\n";
            ++bad;
        }
        if (bad >= 10) {
            out << "...\n";
            break;
        }
    }
    return out.str();
}

/// The records the worker programs appended to `files` (write_record's lines).
inline std::vector<cs_record> read_records(std::vector<fs::path> const& files) {
    std::vector<cs_record> all;
    for (auto const& f : files) {
        std::ifstream in(f);
        std::string line;
        while (std::getline(in, line)) {
            std::istringstream fields(line);
            cs_record r;
            if (!(fields >> r.token >> r.enter_ns >> r.exit_ns >> r.who)) continue;
            if (!(fields >> r.invoke_ns)) r.invoke_ns = -1;  // the invoke time is optional
            all.push_back(r);
        }
    }
    return all;
}

/// Evidence that contenders really contended: the records whose attempt (from
/// its acquire's invocation to its entry) overlapped another contender's
/// critical section, i.e. the lock was held by someone else while it was
/// asked for, so that acquire had to wait or was busy. Records without an
/// invoke time count for nothing.
inline std::size_t count_contended(std::vector<cs_record> const& recs) {
    std::size_t n = 0;
    for (auto const& r : recs) {
        if (r.invoke_ns < 0) continue;
        for (auto const& o : recs) {
            if (o.who != r.who && r.invoke_ns < o.exit_ns && o.enter_ns < r.enter_ns) {
                ++n;
                break;
            }
        }
    }
    return n;
}

/// The test's side of a start barrier (worker_common.hpp's start_barrier()):
/// wait until every file of `ready_files` exists, at most `limit`, then create
/// `go_file`, releasing all workers at once. Returns false (and still creates
/// `go_file`, so no worker waits for ever) when some worker was not ready.
inline bool release_start_barrier(std::vector<fs::path> const& ready_files, fs::path const& go_file,
                                  std::chrono::milliseconds limit) {
    auto const until = std::chrono::steady_clock::now() + limit;
    bool ready = false;
    for (;;) {
        ready = std::all_of(ready_files.begin(), ready_files.end(), [](fs::path const& f) { return fs::exists(f); });
        if (ready || std::chrono::steady_clock::now() >= until) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    std::ofstream(go_file) << "go\n";
    return ready;
}

/// How often the lock passed from one contender to another (in entry order):
/// evidence that a contention run really interleaved.
inline std::size_t count_handoffs(std::vector<cs_record> recs) {
    std::sort(recs.begin(), recs.end(), [](cs_record const& a, cs_record const& b) { return a.enter_ns < b.enter_ns; });
    std::size_t n = 0;
    for (std::size_t i = 1; i < recs.size(); ++i)
        if (recs[i].who != recs[i - 1].who) ++n;
    return n;
}

// ------------------------------------------------------------------ PostgreSQL server log

/// Watches the part of the PostgreSQL server log written while it lives:
/// `offending()` returns the ERROR / "duplicate key" entries (with their
/// DETAIL/STATEMENT/CONTEXT continuation lines) that mention any of `needles`.
class pg_log_watch {
public:
    explicit pg_log_watch(std::string path) : path_(std::move(path)) {
        std::error_code ec;
        start_ = fs::file_size(path_, ec);
        if (ec) start_ = 0;
    }

    std::vector<std::string> offending(std::vector<std::string> const& needles) const {
        std::ifstream in(path_, std::ios::binary);
        std::vector<std::string> found;
        if (!in) {
            found.push_back("cannot read server log " + path_);
            return found;
        }
        in.seekg(static_cast<std::streamoff>(start_));
        std::vector<std::string> entries;  // each: an ERROR-ish line plus its continuation lines
        std::string line;
        bool in_entry = false;
        while (std::getline(in, line)) {
            bool continuation = !line.empty() && (line[0] == '\t' || line.find(" DETAIL:  ") != std::string::npos ||
                                                  line.find(" STATEMENT:  ") != std::string::npos ||
                                                  line.find(" CONTEXT:  ") != std::string::npos ||
                                                  line.find(" HINT:  ") != std::string::npos);
            bool starts = line.find("ERROR:") != std::string::npos || line.find("duplicate key") != std::string::npos;
            if (starts && !(continuation && in_entry)) {
                entries.push_back(line);
                in_entry = true;
            } else if (continuation && in_entry) {
                entries.back() += "\n" + line;
            } else {
                in_entry = false;
            }
        }
        for (auto const& e : entries) {
            for (auto const& n : needles) {
                if (e.find(n) != std::string::npos) {
                    found.push_back(e);
                    break;
                }
            }
        }
        return found;
    }

    std::string const& path() const { return path_; }

private:
    std::string path_;
    std::uintmax_t start_ = 0;
};

// ------------------------------------------------------------------ the per-engine fixture

// ------------------------------------------------------------------ lease events

/// Every lease event a locker reported (locker_options::on_event), in order, each with a sequence
/// number and the steady time it was seen; safe to feed from the renewer threads.
class event_record {
public:
    using clock = std::chrono::steady_clock;
    struct entry {
        std::uint64_t seq;
        clock::time_point at;
        sqlock::lease_event::kind what;
        std::string name;
        std::int64_t token;
        std::string detail;
    };

    /// A hook for locker_options::on_event. It keeps the record alive, so it may outlive the test's scope.
    static std::function<void(sqlock::lease_event const&)> hook(std::shared_ptr<event_record> const& r) {
        return [r](sqlock::lease_event const& e) {
            std::lock_guard lock(r->mutex_);
            r->entries_.push_back(
                {r->next_++, clock::now(), e.what, std::string(e.name), e.token, std::string(e.detail)});
        };
    }

    /// The events of `k` for `name` (for any name: of(k)), in order.
    std::vector<entry> of(sqlock::lease_event::kind k, std::optional<std::string> const& name = std::nullopt) const {
        std::lock_guard lock(mutex_);
        std::vector<entry> out;
        for (auto const& e : entries_)
            if (e.what == k && (!name || e.name == *name)) out.push_back(e);
        return out;
    }

    /// Sequence numbers of the events of `k` for `name`, in order.
    std::vector<std::uint64_t> seqs(sqlock::lease_event::kind k, std::string const& name) const {
        std::vector<std::uint64_t> out;
        for (auto const& e : of(k, name)) out.push_back(e.seq);
        return out;
    }

    std::size_t count(sqlock::lease_event::kind k, std::string const& name) const { return of(k, name).size(); }

    /// Events of `k` for `name` seen after `t`.
    std::size_t count_after(sqlock::lease_event::kind k, std::string const& name, clock::time_point t) const {
        std::size_t n = 0;
        for (auto const& e : of(k, name)) n += e.at > t ? 1 : 0;
        return n;
    }

    std::string dump() const {
        std::lock_guard lock(mutex_);
        std::string out;
        for (auto const& e : entries_) {
            out.append("  #").append(std::to_string(e.seq)).append(" ").append(sqlock::to_string(e.what));
            out.append(" ").append(e.name).append(" token ").append(std::to_string(e.token));
            if (!e.detail.empty()) out.append(" (").append(e.detail).append(")");
            out.append("\n");
        }
        return out.empty() ? "  (no events)\n" : out;
    }

private:
    mutable std::mutex mutex_;
    std::uint64_t next_ = 1;
    std::vector<entry> entries_;
};

/// Names the instances of an engine-parameterized suite by engine:
/// Engines/<Suite>.<Test>/postgresql, .../mysql, .../sqlite.
struct engine_param_name {
    std::string operator()(::testing::TestParamInfo<engine> const& info) const { return engine_name(info.param); }
};

/// The database of the parameter's engine: a fresh SQLite file per test, or the
/// server from SQLOCK_TEST_PG_URL / SQLOCK_TEST_MYSQL_URL (require_env: skipped
/// when unset, failing under CI); a random lock-name prefix; the store of
/// open_store(); a raw SOCI session on the same database.
class engine_fixture : public ::testing::TestWithParam<engine> {
protected:
    void SetUp() override {
        e_ = GetParam();
        if (e_ == engine::sqlite) {
            dir_.emplace();
            url_ = sqlite_url(dir_->path() / "locks.db");
        } else {
            require_env(url_var(e_), url_);
            if (should_stop()) return;
        }
        prefix_ = random_prefix();
        open_store();
        raw_ = raw_session(e_, url_);
    }

    /// Opens db_ on url_ (with the lock tables); a fixture may open it otherwise.
    virtual void open_store() { db_.emplace(url_, sqlock::store_options{.create_schema = true}); }

    /// A lock name under this test's prefix.
    std::string n(std::string_view s) const { return prefix_ + std::string(s); }

    std::optional<lock_row> row(std::string const& name) { return read_row(*raw_, e_, name); }

    /// For PostgreSQL: a watch on the server log (nullopt on other engines).
    std::optional<pg_log_watch> watch_pg_log() {
        if (e_ != engine::postgresql) return std::nullopt;
        std::string path;
        require_env(log_var(e_), path);
        if (should_stop()) return std::nullopt;
        return pg_log_watch(path);
    }

    engine e_{};
    std::optional<temp_dir> dir_;
    std::string url_;
    std::string prefix_;
    std::optional<sqlock::store> db_;
    std::unique_ptr<soci::session> raw_;
};

}  // namespace sqlock_test

namespace sqlock {
// Test names and failure messages show the engine by name.
inline void PrintTo(engine e, std::ostream* os) { *os << sqlock_test::engine_name(e); }
inline void PrintTo(lease_state s, std::ostream* os) { *os << to_string(s); }
}  // namespace sqlock
