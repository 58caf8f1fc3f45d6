// sqlock-reaper-bench: how fast the reaper purges a large backlog of expired
// rows, and what that costs the lock traffic running next to it.
//
//   1. empty:   T threads (default 4) try_acquire + release names of their own for a
//               window (default 10 s) on empty tables of the benchmark's own: acquire latency
//   2. insert N expired rows (default 1,000,000), then let the server settle (default 20 s)
//   3. backlog: the same traffic with the backlog in the table and no reaper (the baseline)
//   4. reaper:  the same traffic while one sqlock::reaper pass purges the backlog:
//               purge rate, and acquire latency meanwhile       -> JSON variant "live-traffic"
//   5. clean:   the same traffic again on the purged table
//   6. insert N expired rows again, settle, and purge them with no traffic at all
//                                                               -> JSON variant "idle"
//
// stdout: the two JSON lines of bench/results-format.md (suite "reaper", impl "sqlock-reaper"):
// rows (purged), rows_per_s, seconds (the pass's duration), acquire_p50_us / acquire_p99_us (each
// try_acquire of the traffic during the purge; null when idle), baseline_p99_us (the backlog
// phase's p99; null when idle), errors (the traffic's exceptions, plus 1 if the pass threw).
// stderr: a human line per phase.
//
// Usage: sqlock-reaper-bench [URL] [--rows N] [--batch N] [--idle-batch N|off] [--duty-cycle F]
//                            [--threads N] [--window SECONDS] [--settle SECONDS]
// --batch, --idle-batch and --duty-cycle are reaper_options' (defaults: the library's), so that
// bench/run.sh measures what a user gets and a pacing can be compared with another.
// URL defaults to $SQLOCK_BENCH_URL, then $SQLOCK_TEST_PG_URL (scripts/test-servers.sh).
// Its tables are named sqlbench_<random>_* and dropped at the end. Not a test:
// nothing is asserted.
#include <sqlock/sqlock.hpp>

#include <soci/mysql/soci-mysql.h>
#include <soci/postgresql/soci-postgresql.h>
#include <soci/soci.h>
#include <soci/sqlite3/soci-sqlite3.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace {

using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;

struct config {
    std::string url;
    long long rows = 1000000;
    std::size_t batch = 1000;
    std::optional<std::size_t> idle_batch = sqlock::reaper_options{}.idle_batch_size;
    double duty_cycle = sqlock::reaper_options{}.duty_cycle;
    int threads = 4;
    std::chrono::seconds window{10};
    std::chrono::seconds settle{20};
};

std::string random_hex(std::size_t n) {
    static constexpr char digits[] = "0123456789abcdef";
    std::mt19937_64 rng{std::random_device{}()};
    std::string s(n, '0');
    for (auto& c : s) c = digits[rng() % 16];
    return s;
}

// -------------------------------------------------------------------- raw SQL (setup only)

/// `scheme://user:pass@host:port/db` taken apart (enough for the benchmark's URLs).
struct server {
    std::string user, password, host, port, db;
};

server parse_server(std::string const& url) {
    server s;
    auto rest = url.substr(url.find("://") + 3);
    if (auto q = rest.find('?'); q != std::string::npos) rest.resize(q);
    auto slash = rest.find('/');
    auto authority = rest.substr(0, slash);
    s.db = slash == std::string::npos ? "" : rest.substr(slash + 1);
    if (auto at = authority.rfind('@'); at != std::string::npos) {
        auto userinfo = authority.substr(0, at);
        authority = authority.substr(at + 1);
        auto colon = userinfo.find(':');
        s.user = userinfo.substr(0, colon);
        if (colon != std::string::npos) s.password = userinfo.substr(colon + 1);
    }
    auto colon = authority.rfind(':');
    s.host = authority.substr(0, colon);
    if (colon != std::string::npos) s.port = authority.substr(colon + 1);
    return s;
}

std::unique_ptr<soci::session> raw_session(sqlock::engine e, std::string const& url) {
    if (e == sqlock::engine::sqlite) {
        auto path = url.substr(url.rfind("sqlite://", 0) == 0 ? 9 : 7);
        return std::make_unique<soci::session>(*soci::factory_sqlite3(), "db=" + path + " timeout=30");
    }
    auto s = parse_server(url);
    std::string cs = "host=" + s.host + " dbname=" + s.db + " user=" + s.user + " password=" + s.password;
    if (!s.port.empty()) cs += " port=" + s.port;
    if (e == sqlock::engine::postgresql) return std::make_unique<soci::session>(*soci::factory_postgresql(), cs);
    auto m = std::make_unique<soci::session>(*soci::factory_mysql(), cs);
    *m << "SET time_zone = '+00:00'";
    return m;
}

/// `rows` rows that expired an hour ago or more, one statement per engine.
void insert_expired(soci::session& s, sqlock::engine e, std::string const& locks, long long rows) {
    auto n = std::to_string(rows);
    switch (e) {
        case sqlock::engine::postgresql:
            s << "INSERT INTO " + locks +
                     " (name, owner, token, holds, created_at, expires_at)"
                     " SELECT 'backlog/' || g, 'bench', g, 1, now() - interval '2 hours',"
                     " now() - interval '1 hour' - g * interval '1 microsecond' FROM generate_series(1, " +
                     n + ") g";
            break;
        case sqlock::engine::mysql: {
            // Numbers 1..rows from a cross join of as many digit tables as rows has digits.
            std::string const digit =
                "(SELECT 0 d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3"
                " UNION ALL SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7"
                " UNION ALL SELECT 8 UNION ALL SELECT 9)";
            std::string number = "1", from;
            long long scale = 1;
            for (int k = 0; scale < rows; ++k, scale *= 10) {
                // Appended rather than `"t" + std::to_string(k)`: GCC 12 at -O2/-O3 flags that
                // operator+(const char*, string&&) with a false -Wrestrict (GCC bug 105329).
                std::string t = "t";
                t += std::to_string(k);
                number += " + " + std::to_string(scale) + " * " + t + ".d";
                from += (k == 0 ? "" : " CROSS JOIN ") + digit + " " + t;
            }
            if (from.empty()) from = "(SELECT 0 d) t0";
            s << "INSERT INTO " + locks +
                     " (name, owner, token, holds, created_at, expires_at)"
                     " SELECT CONCAT('backlog/', g), 'bench', g, 1, NOW(6) - INTERVAL 2 HOUR,"
                     " NOW(6) - INTERVAL 1 HOUR - INTERVAL g MICROSECOND FROM (SELECT " +
                     number + " AS g FROM " + from + ") AS numbers WHERE g <= " + n;
            break;
        }
        case sqlock::engine::sqlite: {
            std::string now = "CAST((julianday('now') - 2440587.5) * 86400000000.0 AS INTEGER)";
            s << "WITH RECURSIVE g(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM g WHERE i < " + n +
                     ")"
                     " INSERT INTO " +
                     locks +
                     " (name, owner, token, holds, created_at, expires_at)"
                     " SELECT 'backlog/' || i, 'bench', i, 1, " +
                     now + " - 7200000000, " + now + " - 3600000000 - i FROM g";
            break;
        }
    }
}

void drop_tables(soci::session& s, sqlock::engine e, std::string const& prefix) {
    if (e == sqlock::engine::sqlite) return;  // a temporary file
    std::vector<std::string> names(64);
    std::string like = prefix + "\\_%";
    if (e == sqlock::engine::postgresql)
        s << "SELECT tablename FROM pg_tables WHERE schemaname = current_schema() AND tablename LIKE :p",
            soci::into(names), soci::use(like);
    else
        s << "SELECT table_name FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name LIKE :p",
            soci::into(names), soci::use(like);
    for (auto const& t : names) s << "DROP TABLE IF EXISTS " + t;
}

// -------------------------------------------------------------------- lock traffic

struct latencies {
    std::vector<double> us;  // each try_acquire, microseconds
    long long acquired = 0, busy = 0, errors = 0;

    double pct(double p) const {
        if (us.empty()) return 0;
        auto v = us;
        auto k = static_cast<std::size_t>(p * static_cast<double>(v.size() - 1));
        std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(k), v.end());
        return v[k];
    }
    double max() const { return us.empty() ? 0 : *std::max_element(us.begin(), us.end()); }
};

/// `threads` threads doing try_acquire + release on names of their own until `stop`.
latencies traffic(sqlock::store& db, int threads, std::atomic<bool> const& stop) {
    std::vector<latencies> per(static_cast<std::size_t>(threads));
    std::vector<std::thread> workers;
    auto locks = sqlock::table_locker(db, {.ttl = 30s, .auto_renew = false});
    for (int t = 0; t < threads; ++t) {
        workers.emplace_back([&, t] {
            auto& mine = per[static_cast<std::size_t>(t)];
            for (long long i = 0; !stop.load(std::memory_order_relaxed); ++i) {
                auto name = "traffic/" + std::to_string(t) + "/" + std::to_string(i % 64);
                try {
                    auto start = steady::now();
                    auto lease = locks.try_acquire(name);
                    mine.us.push_back(std::chrono::duration<double, std::micro>(steady::now() - start).count());
                    if (lease) {
                        ++mine.acquired;
                        lease->release();
                    } else {
                        ++mine.busy;
                    }
                } catch (std::exception const&) {
                    ++mine.errors;
                }
            }
        });
    }
    for (auto& w : workers) w.join();
    latencies all;
    for (auto& p : per) {
        all.us.insert(all.us.end(), p.us.begin(), p.us.end());
        all.acquired += p.acquired;
        all.busy += p.busy;
        all.errors += p.errors;
    }
    return all;
}

void report(char const* phase, latencies const& l, double seconds) {
    std::fprintf(stderr,
                 "%-8s acquires %8lld (%7.0f/s)  p50 %8.0f us  p99 %8.0f us  max %8.0f us  busy %lld  errors %lld\n",
                 phase, l.acquired, static_cast<double>(l.acquired) / seconds, l.pct(0.50), l.pct(0.99), l.max(),
                 l.busy, l.errors);
}

/// Traffic for `window`, reported as `phase`.
latencies measure(char const* phase, sqlock::store& db, config const& c) {
    std::atomic<bool> stop{false};
    auto start = steady::now();
    std::thread timer([&] {
        std::this_thread::sleep_for(c.window);
        stop = true;
    });
    auto l = traffic(db, c.threads, stop);
    timer.join();
    report(phase, l, std::chrono::duration<double>(steady::now() - start).count());
    return l;
}

/// Insert `c.rows` expired rows and let the server settle.
void make_backlog(soci::session& raw, sqlock::store const& db, std::string const& prefix, config const& c) {
    auto t0 = steady::now();
    insert_expired(raw, db.engine(), prefix + "_locks", c.rows);
    std::fprintf(stderr, "backlog  inserted in %.1f s\n", std::chrono::duration<double>(steady::now() - t0).count());
    // Let the insert's after-effects settle (visibility map, statistics, dirty pages) so
    // that the next phase measures the backlog, not the bulk load.
    if (db.engine() == sqlock::engine::postgresql) raw << "VACUUM ANALYZE " + prefix + "_locks";
    if (db.engine() == sqlock::engine::mysql) raw << "ANALYZE TABLE " + prefix + "_locks";
    std::this_thread::sleep_for(c.settle);
}

/// One reaper pass; `errors` counts a pass that threw.
sqlock::reap_result purge(sqlock::store& db, config const& c, long long& errors) {
    try {
        sqlock::reaper r(db, {.batch_size = c.batch, .idle_batch_size = c.idle_batch, .duty_cycle = c.duty_cycle});
        auto result = r.reap_once();
        double const secs = static_cast<double>(result.duration.count()) / 1e6;
        std::fprintf(stderr,
                     "purge    %llu rows in %llu batches (%llu idle) in %.2f s, %.2f s of it paused: %.0f rows/s\n",
                     static_cast<unsigned long long>(result.purged), static_cast<unsigned long long>(result.batches),
                     static_cast<unsigned long long>(result.idle_batches), secs,
                     static_cast<double>(result.paused.count()) / 1e6, static_cast<double>(result.purged) / secs);
        return result;
    } catch (std::exception const& e) {
        std::fprintf(stderr, "purge    failed: %s\n", e.what());
        ++errors;
        return {};
    }
}

/// The JSON line of one purge; the traffic fields are null without traffic.
void print_line(sqlock::store const& db, char const* variant, sqlock::reap_result const& r, latencies const* during,
                latencies const* baseline, long long errors) {
    double const secs = static_cast<double>(r.duration.count()) / 1e6;
    auto number = [](latencies const* l, double p) {
        if (l == nullptr) return std::string("null");
        char buf[32];
        std::snprintf(buf, sizeof buf, "%.1f", l->pct(p));
        return std::string(buf);
    };
    std::printf(
        "{\"suite\":\"reaper\",\"engine\":\"%s\",\"impl\":\"sqlock-reaper\",\"variant\":\"%s\","
        "\"seconds\":%.3f,\"rows\":%llu,\"rows_per_s\":%.1f,\"acquire_p50_us\":%s,\"acquire_p99_us\":%s,"
        "\"baseline_p99_us\":%s,\"errors\":%lld}\n",
        std::string(sqlock::to_string(db.engine())).c_str(), variant, secs, static_cast<unsigned long long>(r.purged),
        secs > 0 ? static_cast<double>(r.purged) / secs : 0.0, number(during, 0.50).c_str(),
        number(during, 0.99).c_str(), number(baseline, 0.99).c_str(), errors);
    std::fflush(stdout);
}

config parse(int argc, char** argv) {
    config c;
    for (int i = 1; i < argc; ++i) {
        std::string a = argv[i];
        auto value = [&]() -> std::string {
            if (i + 1 >= argc) throw std::invalid_argument(a + " needs a value");
            return argv[++i];
        };
        if (a == "--rows") c.rows = std::stoll(value());
        else if (a == "--batch") c.batch = std::stoul(value());
        else if (a == "--idle-batch") {
            auto v = value();
            c.idle_batch = v == "off" ? std::nullopt : std::optional<std::size_t>(std::stoul(v));
        } else if (a == "--duty-cycle") c.duty_cycle = std::stod(value());
        else if (a == "--threads") c.threads = std::stoi(value());
        else if (a == "--window") c.window = std::chrono::seconds(std::stoi(value()));
        else if (a == "--settle") c.settle = std::chrono::seconds(std::stoi(value()));
        else if (!a.empty() && a[0] != '-') c.url = a;
        else throw std::invalid_argument("unknown argument " + a);
    }
    if (c.url.empty()) {
        for (auto var : {"SQLOCK_BENCH_URL", "SQLOCK_TEST_PG_URL"}) {
            if (auto v = std::getenv(var); v != nullptr && *v != '\0') {
                c.url = v;
                break;
            }
        }
    }
    if (c.url.empty()) throw std::invalid_argument("no database: pass a URL or set SQLOCK_BENCH_URL");
    return c;
}

}  // namespace

int main(int argc, char** argv) {
    config c;
    try {
        c = parse(argc, argv);
    } catch (std::exception const& e) {
        std::cerr << "sqlock-reaper-bench: " << e.what()
                  << "\nusage: sqlock-reaper-bench [URL] [--rows N] [--batch N] [--idle-batch N|off] [--duty-cycle F] "
                     "[--threads N] [--window SECONDS] [--settle SECONDS]\n";
        return 64;
    }
    std::string const prefix = "sqlbench_" + random_hex(8);
    sqlock::store db(c.url, {.pool_size = static_cast<std::size_t>(c.threads) + 2,
                             .create_schema = true,
                             .table_prefix = prefix});
    auto raw = raw_session(db.engine(), c.url);
    int rc = 0;
    try {
        std::fprintf(stderr,
                     "sqlock-reaper-bench: %s, %lld expired rows, batch %zu (idle %s), duty cycle %.2f, %d traffic "
                     "threads, window %lld s, settle %lld s\n",
                     db.url().c_str(), c.rows, c.batch, c.idle_batch ? std::to_string(*c.idle_batch).c_str() : "off",
                     c.duty_cycle, c.threads, static_cast<long long>(c.window.count()),
                     static_cast<long long>(c.settle.count()));
        measure("empty", db, c);
        make_backlog(*raw, db, prefix, c);
        auto const baseline = measure("backlog", db, c);

        // live-traffic: the same traffic while one pass purges the backlog.
        std::atomic<bool> stop{false};
        sqlock::reap_result live;
        long long live_errors = 0;
        auto start = steady::now();
        std::thread reaping([&] {
            live = purge(db, c, live_errors);
            stop = true;
        });
        auto during = traffic(db, c.threads, stop);
        reaping.join();
        report("reaper", during, std::chrono::duration<double>(steady::now() - start).count());
        print_line(db, "live-traffic", live, &during, &baseline, live_errors + during.errors);

        measure("clean", db, c);

        // idle: a second backlog, purged with nothing else running.
        make_backlog(*raw, db, prefix, c);
        long long idle_errors = 0;
        auto const idle = purge(db, c, idle_errors);
        print_line(db, "idle", idle, nullptr, nullptr, idle_errors);
    } catch (std::exception const& e) {
        std::cerr << "sqlock-reaper-bench: " << e.what() << "\n";
        rc = 1;
    }
    try {
        drop_tables(*raw, db.engine(), prefix);
    } catch (std::exception const& e) {
        std::cerr << "sqlock-reaper-bench: could not drop " << prefix << "_*: " << e.what() << "\n";
    }
    return rc;
}
