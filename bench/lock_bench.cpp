// sqlock-bench: what a lock costs next to the SQL it runs, and how fast a
// waiter learns that a lock was released. Results and how to run: docs/benchmarks.md.
//
//   cycle/<engine>[/no-fsync]   one try_acquire + release through sqlock::table_locker,
//                              interleaved with the same acquire/release SQL issued directly
//                              through a SOCI session (the floor); time = sqlock's cycle,
//                              counters floor_us, sqlock_us and ratio = sqlock / floor.
//                              no-fsync: the same with commits that do not wait for the disk
//                              (PostgreSQL synchronous_commit=off; SQLite synchronous=normal,
//                              which in WAL mode syncs only at checkpoints),
//                              so that what remains is CPU and round trips
//   wakeup/<engine>[/no-fsync]/<path>/hold_ms:N
//                              a waiter parked in acquire(); a holder keeps the lock N ms,
//                              then releases; time = from release() returning to the
//                              waiter's acquire() returning. Paths:
//                                notify      PostgreSQL LISTEN/NOTIFY: waiter and holder on
//                                            two stores, the waiter's backoff 60 s
//                                poll        two stores, the default backoff (5 ms .. 500 ms)
//                                in-process  one store (the releasing thread wakes the
//                                            waiter), the waiter's backoff 60 s
//
// Databases: SQLOCK_BENCH_URLS (space- or comma-separated URLs), otherwise
// SQLOCK_TEST_PG_URL and SQLOCK_TEST_MYSQL_URL (scripts/test-servers.sh) plus a
// temporary SQLite file. Lock names start with "bench:<pid>:".
#include <sqlock/sqlock.hpp>

#include <benchmark/benchmark.h>
#include <soci/mysql/soci-mysql.h>
#include <soci/postgresql/soci-postgresql.h>
#include <soci/soci.h>
#include <soci/sqlite3/soci-sqlite3.h>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <regex>
#include <string>
#include <thread>
#include <vector>

using namespace std::chrono_literals;
using bench_clock = std::chrono::steady_clock;

namespace {

std::string const prefix = "bench:" + std::to_string(::getpid()) + ":";

// ---- the raw-SQL floor --------------------------------------------------
// The statements of src/dialect/*.cpp with the default table prefix and the
// same per-connection settings. Keep them in step with the dialects.

struct floor_sql {
    virtual ~floor_sql() = default;
    // One acquire of a free lock; returns the token (0 when busy).
    virtual long long acquire(soci::session& s, std::string const& name, std::string const& owner,
                              long long ttl_us) = 0;
    virtual void release(soci::session& s, std::string const& name, std::string const& owner, long long token) = 0;
};

struct pg_floor final : floor_sql {
    long long acquire(soci::session& s, std::string const& name, std::string const& owner, long long ttl) override {
        long long token = 0, created = 0, expires = 0;
        s << "WITH t AS (INSERT INTO sqlock_tokens AS t (name, token) VALUES (:name, 1)"
             " ON CONFLICT (name) DO UPDATE SET token = t.token + 1 RETURNING t.name, t.token)"
             " INSERT INTO sqlock_locks AS l (name, owner, token, holds, created_at, expires_at)"
             " SELECT t.name, :owner, t.token, 1, statement_timestamp(),"
             " statement_timestamp() + CAST(:ttl AS double precision) * interval '1 microsecond' FROM t"
             " ON CONFLICT (name) DO UPDATE SET owner = excluded.owner, token = excluded.token, holds = 1,"
             " created_at = excluded.created_at, expires_at = excluded.expires_at"
             " WHERE l.expires_at < statement_timestamp()"
             " RETURNING l.token, CAST(EXTRACT(EPOCH FROM l.created_at) * 1000000 AS bigint),"
             " CAST(EXTRACT(EPOCH FROM l.expires_at) * 1000000 AS bigint)",
            soci::use(name, "name"), soci::use(owner, "owner"), soci::use(ttl, "ttl"), soci::into(token),
            soci::into(created), soci::into(expires);
        return s.got_data() ? token : 0;
    }
    void release(soci::session& s, std::string const& name, std::string const& owner, long long token) override {
        int deleted = 0;
        s << "WITH d AS (DELETE FROM sqlock_locks WHERE name = :name AND owner = :owner AND token = :token"
             " RETURNING name) SELECT 1 FROM d, LATERAL pg_notify('sqlock_released', d.name)",
            soci::use(name, "name"), soci::use(owner, "owner"), soci::use(token, "token"), soci::into(deleted);
    }
};

struct mysql_floor final : floor_sql {
    long long acquire(soci::session& s, std::string const& name, std::string const& owner, long long ttl) override {
        int ours = 0;
        long long token = 0, created = 0, expires = 0;
        soci::transaction tx(s);
        s << "INSERT INTO sqlock_tokens (name, token) VALUES (:name, LAST_INSERT_ID(1))"
             " ON DUPLICATE KEY UPDATE token = LAST_INSERT_ID(token + 1)",
            soci::use(name, "name");
        s << "INSERT INTO sqlock_locks (name, owner, token, holds, created_at, expires_at)"
             " VALUES (:name, :owner, LAST_INSERT_ID(), 1, NOW(6), NOW(6) + INTERVAL :ttl MICROSECOND)"
             " ON DUPLICATE KEY UPDATE"
             " owner = IF(expires_at < NOW(6), VALUES(owner), owner),"
             " token = IF(expires_at < NOW(6), VALUES(token), token),"
             " holds = IF(expires_at < NOW(6), 1, holds),"
             " created_at = IF(expires_at < NOW(6), VALUES(created_at), created_at),"
             " expires_at = IF(expires_at < NOW(6), VALUES(expires_at), expires_at)",
            soci::use(name, "name"), soci::use(owner, "owner"), soci::use(ttl, "ttl");
        s << "SELECT CASE WHEN token = LAST_INSERT_ID() AND owner = :owner THEN 1 ELSE 0 END, token,"
             " TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', created_at),"
             " TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', expires_at) FROM sqlock_locks WHERE name = :name",
            soci::use(owner, "owner"), soci::use(name, "name"), soci::into(ours), soci::into(token),
            soci::into(created), soci::into(expires);
        tx.commit();
        return ours == 1 ? token : 0;
    }
    void release(soci::session& s, std::string const& name, std::string const& owner, long long token) override {
        soci::statement st = (s.prepare << "DELETE FROM sqlock_locks WHERE name = :name AND owner = :owner"
                                           " AND token = :token",
                              soci::use(name, "name"), soci::use(owner, "owner"), soci::use(token, "token"));
        st.execute(true);
    }
};

struct sqlite_floor final : floor_sql {
    long long acquire(soci::session& s, std::string const& name, std::string const& owner, long long ttl) override {
        static std::string const now = "CAST((julianday('now') - 2440587.5) * 86400000000.0 AS INTEGER)";
        long long token = 0, row_token = 0, created = 0, expires = 0;
        s << "BEGIN IMMEDIATE";
        s << "INSERT INTO sqlock_tokens (name, token) VALUES (:name, 1)"
             " ON CONFLICT (name) DO UPDATE SET token = token + 1 RETURNING token",
            soci::use(name, "name"), soci::into(token);
        s << "INSERT INTO sqlock_locks (name, owner, token, holds, created_at, expires_at)"
             " VALUES (:name, :owner, :token, 1, " + now + ", " + now + " + :ttl)"
             " ON CONFLICT (name) DO UPDATE SET owner = excluded.owner, token = excluded.token, holds = 1,"
             " created_at = excluded.created_at, expires_at = excluded.expires_at"
             " WHERE expires_at < " + now + " RETURNING token, created_at, expires_at",
            soci::use(name, "name"), soci::use(owner, "owner"), soci::use(token, "token"), soci::use(ttl, "ttl"),
            soci::into(row_token), soci::into(created), soci::into(expires);
        bool acquired = s.got_data();
        s << "COMMIT";
        return acquired ? row_token : 0;
    }
    void release(soci::session& s, std::string const& name, std::string const& owner, long long token) override {
        soci::statement st = (s.prepare << "DELETE FROM sqlock_locks WHERE name = :name AND owner = :owner"
                                           " AND token = :token",
                              soci::use(name, "name"), soci::use(owner, "owner"), soci::use(token, "token"));
        st.execute(true);
    }
};

// URL query parameters, percent-decoded.
std::vector<std::pair<std::string, std::string>> url_params(std::string const& url) {
    auto decode = [](std::string const& in) {
        std::string out;
        for (std::size_t i = 0; i < in.size(); ++i) {
            if (in[i] == '%' && i + 2 < in.size()) {
                out += static_cast<char>(std::stoi(in.substr(i + 1, 2), nullptr, 16));
                i += 2;
            } else {
                out += in[i];
            }
        }
        return out;
    };
    std::vector<std::pair<std::string, std::string>> params;
    auto q = url.find('?');
    for (std::size_t i = q; i != std::string::npos && i < url.size();) {
        auto end = url.find('&', i + 1);
        auto pair = url.substr(i + 1, end == std::string::npos ? std::string::npos : end - i - 1);
        if (auto eq = pair.find('='); eq != std::string::npos)
            params.emplace_back(decode(pair.substr(0, eq)), decode(pair.substr(eq + 1)));
        i = end;
    }
    return params;
}

// A SOCI session with the settings sqlock's dialects apply to their connections
// (and the URL's parameters, as sqlock passes them on).
void open_floor_session(soci::session& s, std::string const& url) {
    auto const params = url_params(url);
    if (url.starts_with("sqlite:")) {
        auto path = url.substr(7, url.find('?') - 7);
        if (path.starts_with("//")) path.erase(0, 2);
        std::string sync = "full";
        for (auto const& [key, value] : params)
            if (key == "synchronous") sync = value;
        s.open(*soci::factory_sqlite3(), "db=\"" + path + "\" synchronous=" + sync);
        s << "PRAGMA busy_timeout = 5000";
        std::string mode;
        s << "PRAGMA journal_mode = WAL", soci::into(mode);
        return;
    }
    static std::regex const re(R"((\w+)://(?:([^:@/]*)(?::([^@/]*))?@)?([^:/?]+)(?::(\d+))?/([^?]+).*)");
    std::smatch m;
    if (!std::regex_match(url, m, re)) throw std::invalid_argument("cannot parse the URL " + url);
    std::string c = "host=" + m[4].str() + " dbname=" + m[6].str();
    if (m[5].matched) c += " port=" + m[5].str();
    if (m[2].matched) c += " user=" + m[2].str();
    if (m[3].matched) c += " password=" + m[3].str();
    for (auto const& [key, value] : params) c += " " + key + "='" + value + "'";
    if (m[1] == "postgresql" || m[1] == "postgres") {
        s.open(*soci::factory_postgresql(), c);
        s << "SET lock_timeout = 5000";
        s << "SET TIME ZONE 'UTC'";
    } else {
        s.open(*soci::factory_mysql(), c + " charset=utf8mb4");
        s << "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED";
        s << "SET SESSION time_zone = '+00:00', SESSION innodb_lock_wait_timeout = 5";
    }
}

// ---- the databases ------------------------------------------------------

struct database {
    std::string label;  // "postgresql", "postgresql/no-fsync", ...
    std::string url;
    sqlock::engine engine;
    std::unique_ptr<sqlock::store> opened;  // on first use, so filtered-out engines are never contacted

    sqlock::store& store() {
        if (!opened) opened = std::make_unique<sqlock::store>(url, sqlock::store_options{.create_schema = true});
        return *opened;
    }
    std::unique_ptr<floor_sql> floor() const {
        switch (engine) {
            case sqlock::engine::postgresql: return std::make_unique<pg_floor>();
            case sqlock::engine::mysql: return std::make_unique<mysql_floor>();
            case sqlock::engine::sqlite: return std::make_unique<sqlite_floor>();
        }
        return nullptr;
    }
};

sqlock::engine engine_of(std::string const& url) {
    if (url.starts_with("postgres")) return sqlock::engine::postgresql;
    if (url.starts_with("mysql") || url.starts_with("mariadb")) return sqlock::engine::mysql;
    return sqlock::engine::sqlite;
}

std::vector<std::unique_ptr<database>> databases;
std::filesystem::path temp_dir;

void find_databases() {
    std::vector<std::string> urls;
    if (char const* list = std::getenv("SQLOCK_BENCH_URLS"); list != nullptr && *list != '\0') {
        std::string all = list;
        std::replace(all.begin(), all.end(), ',', ' ');
        for (std::size_t i = 0; i < all.size();) {
            auto end = all.find(' ', i);
            if (end == std::string::npos) end = all.size();
            if (end > i) urls.push_back(all.substr(i, end - i));
            i = end + 1;
        }
    } else {
        for (char const* var : {"SQLOCK_TEST_PG_URL", "SQLOCK_TEST_MYSQL_URL"})
            if (char const* u = std::getenv(var); u != nullptr && *u != '\0') urls.emplace_back(u);
        char dir[] = "/tmp/sqlock-bench.XXXXXX";
        if (::mkdtemp(dir) != nullptr) {
            temp_dir = dir;
            urls.push_back("sqlite://" + (temp_dir / "bench.db").string());
        }
    }
    for (auto const& u : urls) {
        auto e = engine_of(u);
        databases.push_back(std::make_unique<database>(database{std::string(sqlock::to_string(e)), u, e, nullptr}));
    }
    // The same cycle without waiting for the disk at each commit, where a
    // session can ask for that: what is left is CPU and round trips.
    for (std::size_t i = 0, n = databases.size(); i < n; ++i) {
        auto const& d = *databases[i];
        auto sep = d.url.find('?') == std::string::npos ? "?" : "&";
        std::string url;
        if (d.engine == sqlock::engine::postgresql) url = d.url + sep + "options=-c%20synchronous_commit%3Doff";
        if (d.engine == sqlock::engine::sqlite) {
            auto q = d.url.find('?');
            auto base = d.url.substr(0, q);
            if (base.ends_with(".db")) base.insert(base.size() - 3, "-no-fsync");  // its own file
            url = base + (q == std::string::npos ? "" : d.url.substr(q)) + sep + "synchronous=normal";
        }
        if (!url.empty())
            databases.push_back(std::make_unique<database>(database{d.label + "/no-fsync", url, d.engine, nullptr}));
    }
}

// ---- (a) + (b): one lock cycle, sqlock against the floor ----------------

void bm_cycle(benchmark::State& state, database* db) {
    try {
        auto locks = sqlock::table_locker(db->store(), {.ttl = 30s});
        auto floor = db->floor();
        soci::session raw;
        open_floor_session(raw, db->url);
        std::string const floor_name = prefix + "floor", lock_name = prefix + "sqlock";
        std::string const owner = "bench/" + std::to_string(::getpid()) + "/floor";
        long long const ttl_us = 30'000'000;
        double floor_s = 0, sqlock_s = 0;
        for (auto _ : state) {
            auto t0 = bench_clock::now();
            long long token = floor->acquire(raw, floor_name, owner, ttl_us);
            floor->release(raw, floor_name, owner, token);
            auto t1 = bench_clock::now();
            auto lease = locks.try_acquire(lock_name);
            if (lease) lease->release();
            auto t2 = bench_clock::now();
            if (token == 0 || !lease) {
                state.SkipWithError("a lock of this benchmark was busy: is another run using the same names?");
                break;
            }
            floor_s += std::chrono::duration<double>(t1 - t0).count();
            sqlock_s += std::chrono::duration<double>(t2 - t1).count();
            state.SetIterationTime(std::chrono::duration<double>(t2 - t1).count());
        }
        using benchmark::Counter;
        state.counters["floor_us"] = Counter(floor_s * 1e6, Counter::kAvgIterations);
        state.counters["sqlock_us"] = Counter(sqlock_s * 1e6, Counter::kAvgIterations);
        state.counters["ratio"] = floor_s > 0 ? sqlock_s / floor_s : 0;
    } catch (std::exception const& e) {
        state.SkipWithError(e.what());
    }
}

// ---- (c): wake-up latency -----------------------------------------------

enum class wake_path { notify, poll, in_process };

// A waiter thread that, on each request, waits for the lock and reports when
// acquire() returned.
class waiter {
public:
    // `backoff`: the waiter's backoff_min = backoff_max; empty: the defaults.
    waiter(sqlock::store& db, std::string name, std::optional<std::chrono::milliseconds> backoff)
        : name_(std::move(name)), locks_(sqlock::table_locker(db, options(backoff))) {
        thread_ = std::jthread([this](std::stop_token stop) { run(stop); });
    }

    // Start one acquire() and return once it has found the lock held.
    void start() {
        std::unique_lock lock(m_);
        auto busy = busy_;
        done_ = false;
        ++requests_;
        cv_.notify_all();
        cv_.wait(lock, [&] { return busy_ != busy || done_; });
    }

    // Wait until that acquire() returned; its time (or the error).
    bench_clock::time_point finish() {
        std::unique_lock lock(m_);
        cv_.wait(lock, [&] { return done_; });
        if (!error_.empty()) throw std::runtime_error(error_);
        return returned_;
    }

private:
    sqlock::locker_options options(std::optional<std::chrono::milliseconds> backoff) {
        sqlock::locker_options o;
        if (backoff) o.backoff_min = o.backoff_max = *backoff;
        o.on_event = [this](sqlock::lease_event const& e) {
            if (e.what != sqlock::lease_event::kind::busy) return;
            std::lock_guard lock(m_);
            ++busy_;
            cv_.notify_all();
        };
        return o;
    }

    void run(std::stop_token const& stop) {
        std::uint64_t served = 0;
        for (;;) {
            {
                std::unique_lock lock(m_);
                cv_.wait(lock, stop, [&] { return requests_ != served; });
                if (stop.stop_requested()) return;
                served = requests_;
            }
            std::string error;
            bench_clock::time_point returned;
            try {
                auto lease = locks_.acquire(name_, 60s);
                returned = bench_clock::now();
                lease.release();
            } catch (std::exception const& e) {
                error = e.what();
            }
            std::lock_guard lock(m_);
            returned_ = returned;
            error_ = error;
            done_ = true;
            cv_.notify_all();
        }
    }

    std::string name_;
    sqlock::locker locks_;
    std::mutex m_;
    std::condition_variable_any cv_;
    std::uint64_t requests_ = 0, busy_ = 0;
    bool done_ = false;
    bench_clock::time_point returned_;
    std::string error_;
    std::jthread thread_;  // last: joined first
};

void bm_wakeup(benchmark::State& state, database* db, wake_path path) {
    try {
        auto const hold = std::chrono::milliseconds(state.range(0));
        auto const name = prefix + "wakeup";
        // Two stores are two processes as far as waking up goes.
        std::optional<sqlock::store> second;
        if (path != wake_path::in_process) second.emplace(db->url);
        sqlock::store& waiter_db = db->store();
        sqlock::store& holder_db = second ? *second : db->store();
        waiter w(waiter_db, name, path == wake_path::poll ? std::nullopt : std::optional(60'000ms));
        auto holder = sqlock::table_locker(holder_db, {.ttl = 30s});

        // Warm up: the waiter's store starts its LISTEN connection (PostgreSQL)
        // on its first wait, and a fresh listener wakes every waiter once.
        if (auto lease = holder.try_acquire(name)) {
            w.start();
            std::this_thread::sleep_for(300ms);
            lease->release();
            (void)w.finish();
        }
        std::uint64_t early = 0;
        for (auto _ : state) {
            auto lease = holder.try_acquire(name);
            if (!lease) {
                state.SkipWithError("the holder could not take the lock");
                break;
            }
            w.start();
            std::this_thread::sleep_for(hold);
            lease->release();
            auto released = bench_clock::now();
            auto woke = w.finish();
            if (woke < released) ++early;  // the wake-up beat release()'s own return
            state.SetIterationTime(std::max(0.0, std::chrono::duration<double>(woke - released).count()));
        }
        if (early != 0) state.counters["early"] = static_cast<double>(early);
    } catch (std::exception const& e) {
        state.SkipWithError(e.what());
    }
}

}  // namespace

int main(int argc, char** argv) {
    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
    find_databases();

    std::string described;
    for (auto& db : databases) {
        auto* d = db.get();
        described += (described.empty() ? "" : " ") + d->label;
        benchmark::RegisterBenchmark(("cycle/" + d->label).c_str(), bm_cycle, d)
            ->UseManualTime()
            ->Unit(benchmark::kMicrosecond);
    }
    for (auto& db : databases) {
        auto* d = db.get();
        auto e = d->label;
        auto wake = [&](std::string const& path_name, wake_path path) {
            benchmark::RegisterBenchmark(("wakeup/" + e + "/" + path_name).c_str(), bm_wakeup, d, path)
                ->ArgName("hold_ms")
                ->Arg(20)
                ->Arg(200)
                ->Iterations(20)  // each iteration holds the lock hold_ms: bound the run time
                ->UseManualTime()
                ->Unit(benchmark::kMicrosecond);
        };
        if (d->engine == sqlock::engine::postgresql) {
            wake("notify", wake_path::notify);
        } else {
            wake("poll", wake_path::poll);
            wake("in-process", wake_path::in_process);
        }
    }
    benchmark::AddCustomContext("sqlock_engines", described.empty() ? "none" : described);
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    databases.clear();
    if (!temp_dir.empty()) std::filesystem::remove_all(temp_dir);
    return 0;
}
