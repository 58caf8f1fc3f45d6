// sqlock-account-balance: the lost update, and the paused holder.
//
// Two workers debit 200 and 300 from a balance of 1000 by read-modify-write.
// Unprotected, both read 1000 and the last write wins (700 or 800 instead of 500).
//
//  1. Each worker locks "account:<id>" and does its read-modify-write under the
//     lock: the balance ends at 500.
//  2. Worker A takes the lock with a short TTL and no renewal, reads 1000, and
//     pauses (think GC, swap, SIGSTOP) past its TTL. Worker B takes the lock
//     over and debits 300 (700). A wakes up still believing it holds the lock
//     and writes 800: its fenced write throws sqlock::stale_token and is rolled
//     back, so the balance stays 700.
//
// The locks and the account live in the same database here, but need not: the
// fence table (sqlock_fences) must be in the database of the account.
#include <sqlock/sqlock.hpp>

#include <soci/mysql/soci-mysql.h>
#include <soci/postgresql/soci-postgresql.h>
#include <soci/soci.h>
#include <soci/sqlite3/soci-sqlite3.h>
#include <CLI/CLI.hpp>

#include <atomic>
#include <chrono>
#include <functional>
#include <iostream>
#include <latch>
#include <mutex>
#include <regex>
#include <stdexcept>
#include <string>
#include <thread>

using namespace std::chrono_literals;

namespace {

constexpr int account_id = 12345;
std::string const lock_name = "account:" + std::to_string(account_id);

void say(std::string const& line) {
    static std::mutex m;
    std::lock_guard lock(m);
    std::cout << line << std::endl;
}

// Workers report a failure here rather than terminating the program.
std::atomic<bool> worker_failed{false};
void guarded(std::string const& who, std::function<void()> const& body) {
    try {
        body();
    } catch (std::exception const& e) {
        worker_failed = true;
        say(who + ": " + e.what());
    }
}

// The application's own connection, opened from the same URL as the store.
// PostgreSQL and MySQL take the same keywords. (A sketch: no percent-decoding,
// no URL parameters; SOCI 4.0 does not pass a postgresql:// URL on to libpq.)
void open_session(soci::session& s, std::string const& url) {
    if (url.starts_with("sqlite:")) {
        auto path = url.substr(7, url.find('?') - 7);  // sqlite:rel.db, sqlite:///abs.db
        if (path.starts_with("//")) path.erase(0, 2);
        s.open(*soci::factory_sqlite3(), "db=" + path + " timeout=5");  // busy timeout, seconds
        return;
    }
    static std::regex const re(R"((\w+)://(?:([^:@/]*)(?::([^@/]*))?@)?([^:/?]+)(?::(\d+))?/([^?]+).*)");
    std::smatch m;
    if (!std::regex_match(url, m, re)) throw std::invalid_argument("cannot parse the URL " + url);
    std::string c = "host=" + m[4].str() + " dbname=" + m[6].str();
    if (m[5].matched) c += " port=" + m[5].str();
    if (m[2].matched) c += " user=" + m[2].str();
    if (m[3].matched) c += " password=" + m[3].str();
    if (m[1] == "postgresql" || m[1] == "postgres") {
        s.open(*soci::factory_postgresql(), c);
        s << "SET client_min_messages = warning";  // no NOTICE from CREATE TABLE IF NOT EXISTS
    } else {
        s.open(*soci::factory_mysql(), c);  // mysql:// or mariadb://
    }
}

int balance(soci::session& s) {
    int b = 0;
    s << "SELECT balance FROM accounts WHERE id = :id", soci::use(account_id), soci::into(b);
    return b;
}

void reset_account(soci::session& s) {
    s << "CREATE TABLE IF NOT EXISTS accounts (id INTEGER PRIMARY KEY, balance INTEGER NOT NULL)";
    s << "DELETE FROM accounts WHERE id = :id", soci::use(account_id);
    s << "INSERT INTO accounts (id, balance) VALUES (:id, 1000)", soci::use(account_id);
}

// Read, (maybe pause), then write inside a transaction that first checks the
// lease's token. stale_token leaves the transaction uncommitted: ~transaction
// rolls it back.
void debit(soci::session& s, sqlock::fence const& fence, sqlock::lease const& lease, int amount, std::string const& who,
           std::function<void()> const& pause = {}) {
    int before = balance(s);
    say(who + ": token " + std::to_string(lease.token()) + ", read balance " + std::to_string(before));
    if (pause) {
        say(who + ": pauses");
        pause();
        say(who + ": wakes up; its lease is " + std::string(sqlock::to_string(lease.state())) +
            ", but it writes anyway (it may not have looked)");
    }
    soci::transaction tx(s);
    fence.check_and_set(s, lock_name, lease.token());  // throws sqlock::stale_token
    s << "UPDATE accounts SET balance = :b WHERE id = :id", soci::use(before - amount), soci::use(account_id);
    tx.commit();
    say(who + ": wrote balance " + std::to_string(before - amount));
}

}  // namespace

int main(int argc, char** argv) {
    CLI::App app{"sqlock-account-balance: a lock and a fencing token around a read-modify-write"};
    std::string url = "sqlite:account.db";
    app.add_option("--db", url, "database URL")->capture_default_str();
    CLI11_PARSE(app, argc, argv);

    try {
        sqlock::store db{url, {.create_schema = true}};
        sqlock::fence fence{db};
        soci::session setup;
        open_session(setup, url);
        std::cout << "sqlock-account-balance on " << db.url() << "\n";

        // 1. Two workers, each with its own session, take turns under the lock.
        std::cout << "\n1. Two workers debit 200 and 300 from 1000 under the lock\n";
        reset_account(setup);
        auto locks = sqlock::table_locker(db, {.ttl = 10s});
        auto worker = [&](int amount, std::string const& who) {
            guarded(who, [&] {
                soci::session s;
                open_session(s, url);
                auto lease = locks.acquire(lock_name, 10s);  // another thread is another owner: it waits
                debit(s, fence, lease, amount, who);
            });  // ~lease releases
        };
        std::jthread w1(worker, 200, "worker 1");
        std::jthread w2(worker, 300, "worker 2");
        w1.join();
        w2.join();
        int first = balance(setup);
        std::cout << "balance: " << first << " (expected 500)\n";

        // 2. A pauses past its lease; B takes over; A's late write is refused.
        std::cout << "\n2. Worker A pauses past its lease while worker B takes over\n";
        reset_account(setup);
        auto short_locks = sqlock::table_locker(db, {.ttl = 300ms, .auto_renew = false});
        std::latch a_has_read{1}, b_done{1};
        bool refused = false;
        std::jthread a([&] {
            bool has_read = false;
            guarded("worker A", [&] {
                soci::session s;
                open_session(s, url);
                auto lease = short_locks.acquire(lock_name, 10s);
                try {
                    debit(s, fence, lease, 200, "worker A", [&] {
                        has_read = true;
                        a_has_read.count_down();
                        b_done.wait();  // the "pause": well past A's 300 ms lease
                    });
                } catch (sqlock::stale_token const& e) {
                    refused = true;
                    say("worker A: write refused and rolled back: " + std::string(e.what()));
                }
            });  // ~lease: the release finds the row gone (lease_lost, swallowed by the destructor)
            if (!has_read) a_has_read.count_down();  // A failed early: let B go on
        });
        std::jthread b([&] {
            a_has_read.wait();
            guarded("worker B", [&] {
                soci::session s;
                open_session(s, url);
                auto lease = locks.acquire(lock_name, 10s);  // waits until A's row expires (database clock)
                say("worker B: took the lock over once A's lease expired");
                debit(s, fence, lease, 300, "worker B");
            });
            b_done.count_down();
        });
        a.join();
        b.join();
        int second = balance(setup);
        std::cout << "balance: " << second << " (expected 700; A's write of 800 " << (refused ? "was" : "was NOT")
                  << " refused)\n";

        bool ok = first == 500 && second == 700 && refused && !worker_failed;
        std::cout << "\n" << (ok ? "OK" : "FAILED") << "\n";
        return ok ? 0 : 1;
    } catch (std::exception const& e) {
        std::cerr << "error: " << e.what() << "\n";
        return 2;
    }
}
