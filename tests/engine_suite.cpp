// sqlock tests — the engine conformance suite for the table lock, run on every
// engine: Engines/TableLock.<Test>/<engine> and Engines/Restart.<Test>/<engine>.
//
// PostgreSQL and MariaDB come from SQLOCK_TEST_PG_URL / SQLOCK_TEST_MYSQL_URL
// (scripts/test-servers.sh start); SQLite runs on a fresh file per test. Every
// lock name carries a random per-test prefix, so the suite is safe on a shared
// database and can be re-run against the same server.
#include "command_counter.hpp"
#include "test_env.hpp"
#include "test_process.hpp"

#include <sqlock/sqlock.hpp>

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <latch>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <typeinfo>
#include <vector>

#ifndef SQLOCK_TEST_WORKER
#error "SQLOCK_TEST_WORKER (path of sqlock_test_worker) must be defined by the build"
#endif

namespace {

using namespace std::chrono_literals;
using namespace sqlock_test;
using sqlock::engine;
using sqlock::lease;
using sqlock::locker;
using sqlock::locker_options;
using std::chrono::milliseconds;

/// The engine_fixture with a table locker and a check of the PostgreSQL server log.
class EngineTest : public engine_fixture {
protected:
    locker make_locker(locker_options o = {}) { return sqlock::table_locker(*db_, std::move(o)); }

    void expect_no_server_errors(std::optional<pg_log_watch> const& w) {
        if (!w) return;
        // Probe first: an error made on purpose must show up, or the check proves
        // nothing; once it is there, whatever the test caused is there too.
        std::string const marker = "sqlt_log_probe_" + random_hex(12);
        try {
            *raw_ << "SELECT * FROM " + marker;
        } catch (soci::soci_error const&) {}
        bool seen = false;
        for (int i = 0; i < 100 && !seen; ++i) {
            seen = !w->offending({marker}).empty();
            if (!seen) std::this_thread::sleep_for(20ms);
        }
        EXPECT_TRUE(seen) << "a deliberate ERROR did not appear in the server log " << w->path()
                          << ": the log check cannot see errors";

        auto const bad = w->offending({prefix_, "sqlock_locks", "sqlock_tokens"});
        std::string all;
        for (auto const& b : bad) all += b + "\n";
        EXPECT_TRUE(bad.empty()) << "the PostgreSQL server log has " << bad.size()
                                 << " ERROR entries about the lock tables written during this test:\n"
                                 << all;
    }
};

class TableLock : public EngineTest {};
class Restart : public EngineTest {};

// Bytes of UTF-8 padding: `base` followed by 'x' up to exactly `bytes` bytes.
std::string pad_to(std::string base, std::size_t bytes, std::string_view tail = {}) {
    if (base.size() + tail.size() > bytes) throw std::logic_error("pad_to: too long already");
    base.append(bytes - base.size() - tail.size(), 'x');
    base.append(tail);
    return base;
}

// ============================================================ acquire / release

TEST_P(TableLock, AcquireRelease) {
    locker L = make_locker({.ttl = 30s});
    std::string const name = n("acquire-release");
    long long const before_us = db_now_us(*raw_, e_);

    std::optional<lease> l = L.try_acquire(name);
    ASSERT_TRUE(l.has_value()) << "a free lock must be granted";

    auto r = row(name);
    ASSERT_TRUE(r.has_value()) << "the lock row must exist while the lock is held";
    EXPECT_EQ(r->name, name);
    EXPECT_EQ(r->owner, l->owner());
    EXPECT_EQ(r->token, l->token());
    EXPECT_EQ(r->holds, 1);
    EXPECT_TRUE(r->live()) << "expires_at (" << r->expires_us << ") must be after the database's now (" << r->now_us
                           << ")";

    // Lease accessors.
    EXPECT_EQ(l->name(), name);
    EXPECT_FALSE(l->owner().empty());
    EXPECT_GT(l->token(), 0);
    EXPECT_LE(l->created_at(), l->expires_at());
    auto const span = l->expires_at() - l->created_at();
    EXPECT_LE(std::chrono::abs(span - 30s), 5ms) << "expires_at - created_at = " << span.count() << "us, ttl = 30s";
    EXPECT_GT(l->remaining(), 0ns);
    EXPECT_LE(l->remaining(), 30s);
    EXPECT_TRUE(l->held());
    EXPECT_EQ(l->state(), sqlock::lease_state::held);
    EXPECT_FALSE(l->lost());
    EXPECT_FALSE(l->stop_token().stop_requested());

    // The lease's times are the database's (the row's, on the database clock, in UTC).
    EXPECT_LE(std::llabs(r->created_us - us_of(l->created_at())), 1000) << "row created_at vs lease";
    EXPECT_LE(std::llabs(r->expires_us - us_of(l->expires_at())), 1000) << "row expires_at vs lease";
    EXPECT_GE(us_of(l->created_at()), before_us - 2000) << "granted before the acquire was sent?";
    EXPECT_LE(us_of(l->created_at()), r->now_us + 2000) << "granted in the database's future?";
    auto const skew = std::chrono::abs(std::chrono::system_clock::now() - l->created_at());
    EXPECT_LT(skew, 60s) << "created_at is not UTC (or not microseconds): off by "
                         << std::chrono::duration_cast<milliseconds>(skew).count() << "ms from this host";
    sqlock::store_stats const st = db_->stats();
    EXPECT_GE(st.clock_samples, 1u) << "the acquire's database time was not sampled";
    EXPECT_LT(std::chrono::abs(st.clock_skew), 60s)
        << "clock skew against a database on this host: " << st.clock_skew.count() << "us";

    std::int64_t const token = l->token();
    l->release();
    EXPECT_FALSE(l->held());
    EXPECT_EQ(l->state(), sqlock::lease_state::released);
    EXPECT_FALSE(l->lost()) << "a released lease is not lost";
    EXPECT_FALSE(l->stop_token().stop_requested()) << "a normal release must not request stop";
    EXPECT_EQ(l->remaining(), std::chrono::steady_clock::duration::zero());
    EXPECT_FALSE(row(name).has_value()) << "release must delete the lock row";

    // The fencing counter outlives the row.
    auto counter = read_counter(*raw_, name);
    ASSERT_TRUE(counter.has_value()) << "sqlock_tokens must keep the counter of a released name";
    EXPECT_GE(*counter, token);
}

TEST_P(TableLock, SecondTryAcquireOfHeldLockIsEmpty) {
    locker A = make_locker();
    locker B = make_locker();
    std::string const name = n("held");

    std::optional<lease> held = A.try_acquire(name);
    ASSERT_TRUE(held.has_value());

    // The same locker from another thread is another owner.
    std::optional<lease> from_thread;
    std::exception_ptr thread_error;
    std::thread t([&] {
        try {
            from_thread = A.try_acquire(name);
        } catch (...) {
            thread_error = std::current_exception();
        }
    });
    t.join();
    ASSERT_FALSE(thread_error) << "try_acquire from another thread threw";
    EXPECT_FALSE(from_thread.has_value()) << "same locker, other thread: must not get a held lock";

    // Another locker.
    EXPECT_FALSE(B.try_acquire(name).has_value()) << "another locker must not get a held lock";

    // The holder is unaffected.
    auto r = row(name);
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(r->owner, held->owner());
    EXPECT_EQ(r->token, held->token());
    EXPECT_TRUE(held->held());
    EXPECT_NO_THROW(held->release());
    EXPECT_FALSE(row(name).has_value());
}

TEST_P(TableLock, TwoNamesAreIndependent) {
    locker A = make_locker();
    locker B = make_locker();
    std::optional<lease> a = A.try_acquire(n("one"));
    std::optional<lease> b = B.try_acquire(n("two"));
    ASSERT_TRUE(a.has_value());
    ASSERT_TRUE(b.has_value());
    EXPECT_TRUE(row(n("one")).has_value());
    EXPECT_TRUE(row(n("two")).has_value());

    // One locker holding two names; releasing one leaves the other.
    std::optional<lease> c = A.try_acquire(n("three"));
    ASSERT_TRUE(c.has_value());
    a->release();
    EXPECT_FALSE(row(n("one")).has_value());
    EXPECT_TRUE(row(n("three")).has_value()) << "releasing one lock released another of the same locker";
    EXPECT_TRUE(row(n("two")).has_value());
    c->release();
    b->release();
    EXPECT_FALSE(row(n("two")).has_value());
    EXPECT_FALSE(row(n("three")).has_value());
}

TEST_P(TableLock, AcquireReleaseRepeatedTenTimes) {
    locker A = make_locker();
    locker B = make_locker();
    std::string const name = n("repeat");
    std::int64_t last = 0;
    for (int i = 0; i < 10; ++i) {
        SCOPED_TRACE("round " + std::to_string(i));
        lease l = A.acquire(name, 0ms);
        EXPECT_GT(l.token(), last) << "tokens must strictly increase across releases";
        last = l.token();
        EXPECT_FALSE(B.try_acquire(name).has_value());
        ASSERT_TRUE(row(name).has_value());
        l.release();
        EXPECT_FALSE(row(name).has_value());
    }
}

// ============================================================ contention

TEST_P(TableLock, ThreadContentionIsExclusive) {
    auto log = watch_pg_log();
    if (should_stop()) return;

    constexpr int threads = 8;
    constexpr int iterations = 50;
    locker_options const opts{.ttl = 30s, .backoff_min = 1ms, .backoff_max = 20ms};
    // Half the threads share one locker, half another: exclusion must hold
    // between threads of one locker and between lockers.
    locker lockers[2] = {make_locker(opts), make_locker(opts)};
    std::string const name = n("thread-contention");

    long counter = 0;  // deliberately plain: only the lock protects it
    std::vector<std::vector<cs_record>> recs(threads);
    std::vector<std::string> errors(threads);
    std::latch start(threads);

    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) {
        pool.emplace_back([&, t] {
            std::minstd_rand r(static_cast<unsigned>(t) * 7919u + 1u);
            start.arrive_and_wait();
            try {
                for (int i = 0; i < iterations; ++i) {
                    lease l = lockers[t % 2].acquire(name, 60s);
                    cs_record rec{.token = l.token(), .enter_ns = steady_ns(), .exit_ns = 0, .who = t};
                    long v = counter;
                    if (auto us = r() % 200; us == 0) {
                        std::this_thread::yield();
                    } else {
                        std::this_thread::sleep_for(std::chrono::microseconds(us));
                    }
                    counter = v + 1;
                    rec.exit_ns = steady_ns();
                    recs[t].push_back(rec);
                    l.release();
                    // A pause outside the lock, so other contenders get it too
                    // (the releasing thread would otherwise win again at once).
                    std::this_thread::sleep_for(std::chrono::microseconds(r() % 2000));
                }
            } catch (std::exception const& e) {
                errors[t] = describe(e);
            }
        });
    }
    for (auto& th : pool) th.join();

    for (int t = 0; t < threads; ++t) EXPECT_EQ(errors[t], "") << "thread " << t;
    EXPECT_EQ(counter, long{threads} * iterations) << "lost updates: the lock let two threads in";
    std::vector<cs_record> all;
    for (auto const& v : recs) all.insert(all.end(), v.begin(), v.end());
    EXPECT_EQ(all.size(), std::size_t{threads} * iterations);
    EXPECT_EQ(check_history(all), "");
    RecordProperty("handoffs", static_cast<int>(count_handoffs(all)));
    EXPECT_FALSE(row(name).has_value()) << "a row is left after every lease was released";
    expect_no_server_errors(log);
}

TEST_P(TableLock, ProcessContentionIsExclusive) {
    auto log = watch_pg_log();
    if (should_stop()) return;

    constexpr int procs = 4;
    constexpr int iterations = 40;
    std::string const name = n("process-contention");
    temp_dir files;
    fs::path const counter_file = files.path() / "counter";
    std::ofstream(counter_file) << 0 << "\n";

    fs::path const go_file = files.path() / "go";

    std::vector<pid_t> pids;
    std::vector<fs::path> record_files, ready_files;
    for (int p = 0; p < procs; ++p) {
        record_files.push_back(files.path() / ("records." + std::to_string(p)));
        ready_files.push_back(files.path() / std::string("ready.").append(std::to_string(p)));
        pids.push_back(
            spawn_process({SQLOCK_TEST_WORKER, url_, name, counter_file.string(), record_files.back().string(),
                           std::to_string(iterations), ready_files.back().string(), go_file.string()}));
    }
    // The start barrier: every worker has connected before any of them starts.
    EXPECT_TRUE(release_start_barrier(ready_files, go_file, 60s)) << "not every worker was ready within 60 s";

    // Wait for all, with a generous bound so a hung worker fails the test
    // instead of hanging it.
    std::vector<int> status(procs, -1);
    std::vector<bool> done(procs, false);
    auto const deadline = std::chrono::steady_clock::now() + 150s;
    int remaining = procs;
    while (remaining > 0 && std::chrono::steady_clock::now() < deadline) {
        for (int p = 0; p < procs; ++p) {
            if (done[p]) continue;
            int st = 0;
            if (::waitpid(pids[p], &st, WNOHANG) == pids[p]) {
                status[p] = st;
                done[p] = true;
                --remaining;
            }
        }
        if (remaining > 0) std::this_thread::sleep_for(20ms);
    }
    for (int p = 0; p < procs; ++p) {
        if (!done[p]) {
            ::kill(pids[p], SIGKILL);
            ::waitpid(pids[p], &status[p], 0);
            ADD_FAILURE() << "worker " << p << " (pid " << pids[p] << ") still running after 150s: killed";
            continue;
        }
        EXPECT_TRUE(WIFEXITED(status[p]) && WEXITSTATUS(status[p]) == 0)
            << "worker " << p << " (pid " << pids[p] << ") failed: " << exit_text(status[p])
            << " (its stderr is above)";
    }

    long long counter = -1;
    std::ifstream(counter_file) >> counter;
    EXPECT_EQ(counter, procs * iterations) << "lost updates: the lock let two processes in";

    std::vector<cs_record> all = read_records(record_files);
    EXPECT_EQ(all.size(), std::size_t{procs} * iterations);
    EXPECT_EQ(check_history(all), "");
    // The processes really contended: some acquire was waiting while another
    // process was inside its critical section, and the lock passed between them.
    auto const contended = count_contended(all);
    auto const handoffs = count_handoffs(all);
    EXPECT_GT(contended, 0u) << "no acquire was ever waiting while another process held the lock: "
                                "the processes did not contend";
    EXPECT_GT(handoffs, 0u) << "the lock never passed from one process to another";
    RecordProperty("contended", static_cast<int>(contended));
    RecordProperty("handoffs", static_cast<int>(handoffs));
    EXPECT_FALSE(row(name).has_value()) << "a row is left after every worker released";
    expect_no_server_errors(log);
}

TEST_P(TableLock, ConcurrentTryAcquireExactlyOneWins) {
    constexpr int contenders = 5;
    std::vector<locker> lockers;
    for (int i = 0; i < contenders; ++i) lockers.push_back(make_locker());
    for (int round = 0; round < 10; ++round) {
        SCOPED_TRACE("round " + std::to_string(round));
        std::string const name = n("try-race-" + std::to_string(round));
        std::vector<std::optional<lease>> got(contenders);
        std::vector<std::string> errors(contenders);
        std::latch start(contenders);
        std::vector<std::thread> ts;
        for (int i = 0; i < contenders; ++i) {
            ts.emplace_back([&, i] {
                start.arrive_and_wait();
                try {
                    got[i] = lockers[i].try_acquire(name);
                } catch (std::exception const& e) {
                    errors[i] = describe(e);
                }
            });
        }
        for (auto& t : ts) t.join();
        int winners = 0;
        for (int i = 0; i < contenders; ++i) {
            EXPECT_EQ(errors[i], "") << "contender " << i << ": busy must be an empty optional, not an error";
            if (got[i]) ++winners;
        }
        EXPECT_EQ(winners, 1);
        for (auto& g : got)
            if (g) g->release();
        EXPECT_FALSE(row(name).has_value());
    }
}

TEST_P(TableLock, WaiterGetsLockAfterRelease) {
    locker A = make_locker();
    locker B = make_locker({.backoff_min = 1ms, .backoff_max = 50ms});
    std::string const name = n("waiter");
    lease a = A.acquire(name, 0ms);
    std::int64_t const a_token = a.token();

    // Release once B has found the lock busy (its counter says so), not after a
    // sleep: B really waits, however the threads are scheduled.
    std::thread releaser([&] {
        eventually([&] { return B.stats().busy >= 1; }, 30s);
        a.release();
    });
    std::optional<lease> b;
    EXPECT_NO_THROW(b.emplace(B.acquire(name, 60s)));
    releaser.join();
    EXPECT_GE(B.stats().busy, 1u) << "B never found the lock busy: it did not wait";
    ASSERT_TRUE(b.has_value());
    EXPECT_GT(b->token(), a_token);
    auto r = row(name);
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(r->owner, b->owner());
    b->release();
}

// ============================================================ expiry, takeover, owner-only release

TEST_P(TableLock, ExpiredLeaseIsTakenOver) {
    locker A = make_locker({.ttl = 200ms, .auto_renew = false});
    locker B = make_locker({.ttl = 30s});
    std::string const name = n("expiry");

    lease a = A.acquire(name, 0ms);
    auto const a_row = row(name);
    ASSERT_TRUE(a_row.has_value());
    // An early try is busy, unless (on a slow machine) the TTL already ran out:
    // judged by the database's recorded times, not by how fast this thread ran.
    std::optional<lease> b = B.try_acquire(name);
    if (b) {
        auto const b_row = row(name);
        ASSERT_TRUE(b_row.has_value());
        EXPECT_GE(b_row->created_us, a_row->expires_us)
            << "taken over before it expired (by the database's clock): granted at " << b_row->created_us
            << " us, the first lease ran until " << a_row->expires_us << " us";
    }
    // Sleeping lets database time pass; what is asserted is the outcome.
    std::this_thread::sleep_for(2 * 200ms + 50ms);
    EXPECT_FALSE(a.held()) << "a lease must not believe it is held past its TTL";
    EXPECT_EQ(a.state(), sqlock::lease_state::lost);
    EXPECT_EQ(a.remaining(), std::chrono::steady_clock::duration::zero());

    if (!b) b = B.try_acquire(name);
    ASSERT_TRUE(b.has_value()) << "an expired lock must be taken over";
    EXPECT_GT(b->token(), a.token());

    EXPECT_THROW(a.release(), sqlock::lease_lost);
    EXPECT_TRUE(a.lost());
    auto r = row(name);
    ASSERT_TRUE(r.has_value()) << "the old holder's release deleted the new holder's row";
    EXPECT_EQ(r->owner, b->owner());
    EXPECT_EQ(r->token, b->token());

    EXPECT_NO_THROW(b->release());
    EXPECT_FALSE(row(name).has_value());
}

TEST_P(TableLock, BackdatedRowIsTakenOver) {
    locker A = make_locker();
    locker B = make_locker();
    std::string const name = n("backdated");

    std::optional<lease> a = A.try_acquire(name);
    ASSERT_TRUE(a.has_value());
    EXPECT_FALSE(B.try_acquire(name).has_value());
    backdate_row(*raw_, e_, name);

    std::optional<lease> b = B.try_acquire(name);
    ASSERT_TRUE(b.has_value()) << "a row expired by the database's clock must be taken over";
    EXPECT_GT(b->token(), a->token());
    auto r = row(name);
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(r->owner, b->owner());
    EXPECT_EQ(r->token, b->token());
    EXPECT_TRUE(r->live());
    b->release();
    EXPECT_FALSE(row(name).has_value());
    // a's destructor now runs on a lost lease: it must neither throw nor touch anything.
}

TEST_P(TableLock, OnlyTheOwnerReleases) {
    locker A = make_locker();
    locker B = make_locker();
    locker C = make_locker();
    std::string const name = n("owner-only");

    lease a = A.acquire(name, 0ms);
    backdate_row(*raw_, e_, name);
    lease b = B.acquire(name, 0ms);

    EXPECT_THROW(a.release(), sqlock::lease_lost) << "a release by a former owner must report the loss";
    EXPECT_TRUE(a.lost());
    EXPECT_EQ(a.state(), sqlock::lease_state::lost);
    EXPECT_TRUE(a.stop_token().stop_requested()) << "a lost lease must request stop";
    auto r = row(name);
    ASSERT_TRUE(r.has_value()) << "the former owner's release deleted the current owner's row";
    EXPECT_EQ(r->owner, b.owner());
    EXPECT_EQ(r->token, b.token());
    EXPECT_FALSE(C.try_acquire(name).has_value()) << "after a stale release, a third client got the lock";

    // A second release of the lost lease does nothing (and still leaves b alone).
    EXPECT_NO_THROW(a.release());
    EXPECT_FALSE(a.held());
    EXPECT_TRUE(row(name).has_value());

    EXPECT_NO_THROW(b.release());
    EXPECT_FALSE(row(name).has_value());
}

// ============================================================ fencing tokens

TEST_P(TableLock, TokenIncreasesAfterRelease) {
    locker A = make_locker();
    locker B = make_locker();
    std::string const name = n("token-release");
    lease a = A.acquire(name, 0ms);
    std::int64_t const t1 = a.token();
    a.release();
    lease b = B.acquire(name, 0ms);
    EXPECT_GT(b.token(), t1);
    std::int64_t const t2 = b.token();
    b.release();
    lease c = A.acquire(name, 0ms);
    EXPECT_GT(c.token(), t2) << "same locker again";
}

TEST_P(TableLock, TokenIncreasesAfterRowDeletedByOthers) {
    locker A = make_locker();
    locker B = make_locker();
    std::string const name = n("token-deleted");
    lease a = A.acquire(name, 0ms);
    delete_row(*raw_, name);  // a force-break behind the library's back
    ASSERT_FALSE(row(name).has_value());

    lease b = B.acquire(name, 0ms);
    EXPECT_GT(b.token(), a.token()) << "the token counter must not live only in the lock row";

    EXPECT_THROW(a.release(), sqlock::lease_lost);
    auto r = row(name);
    ASSERT_TRUE(r.has_value()) << "the broken lease's release deleted the new holder's row";
    EXPECT_EQ(r->owner, b.owner());
    b.release();
    EXPECT_FALSE(row(name).has_value());
}

// ============================================================ ambient transaction

TEST_P(TableLock, IgnoresCallersOpenTransaction) {
    locker L = make_locker();
    std::string const name = n("ambient");
    auto ambient = raw_session(e_, url_);
    auto other = raw_session(e_, url_);

    ambient->begin();
    long long rows = -1;
    *ambient << "SELECT COUNT(*) FROM sqlock_locks", soci::into(rows);  // the transaction has a snapshot now
    EXPECT_GE(rows, 0);

    std::optional<lease> l = L.try_acquire(name);
    ASSERT_TRUE(l.has_value());
    EXPECT_TRUE(read_row(*other, e_, name).has_value())
        << "another session must see the lock row at once (the library commits on its own connection)";

    ambient->rollback();
    EXPECT_TRUE(read_row(*other, e_, name).has_value()) << "rolling back the caller's transaction undid the lock";
    EXPECT_TRUE(read_row(*ambient, e_, name).has_value());

    l->release();
    EXPECT_FALSE(read_row(*other, e_, name).has_value());
}

// ============================================================ bad input

TEST_P(TableLock, BadNamesAreUsageErrorsAndChangeNothing) {
    locker L = make_locker();
    std::vector<std::pair<std::string, std::string>> const bad = {
        {"empty", ""},
        {"256 bytes", pad_to(prefix_, 256)},
        {"too many bytes in few characters",
         [this] {
             std::string s = prefix_;
             while (s.size() <= 255) s += "\xF0\x9F\x94\x92";  // 4 bytes, 1 character
             return s;
         }()},
        {"1 MiB", pad_to(prefix_, 1 << 20)},
        {"NUL byte", prefix_ + std::string("a\0b", 3)},
        {"trailing NUL byte", prefix_ + std::string("a\0", 2)},
        {"invalid UTF-8 (0xFF)", prefix_ + "\xFF"},
        {"lone continuation byte", prefix_ + "a\x80"
                                             "b"},
        {"truncated sequence", prefix_ + "\xE2\x82"},
        {"overlong encoding", prefix_ + "\xC0\xAF"},
        {"UTF-16 surrogate", prefix_ + "\xED\xA0\x80"},
        {"beyond U+10FFFF", prefix_ + "\xF4\x90\x80\x80"},
    };
    long long const before = count_rows_with_prefix(*raw_, prefix_);
    long long const empty_before = count_rows_named(*raw_, "");
    for (auto const& [what, name] : bad) {
        SCOPED_TRACE(what);
        EXPECT_THROW((void)L.try_acquire(name), sqlock::usage_error);
        EXPECT_THROW((void)L.acquire(name, 1s), sqlock::usage_error);
    }
    EXPECT_EQ(count_rows_with_prefix(*raw_, prefix_), before) << "a rejected name wrote a row";
    EXPECT_EQ(count_rows_named(*raw_, ""), empty_before);

    // The store and locker are fine afterwards.
    std::optional<lease> ok = L.try_acquire(n("after-bad-names"));
    EXPECT_TRUE(ok.has_value());
}

TEST_P(TableLock, BadOptionsAreUsageErrors) {
    long long const before = count_rows_with_prefix(*raw_, prefix_);
    EXPECT_THROW((void)sqlock::table_locker(*db_, {.ttl = 0ms}), sqlock::usage_error) << "ttl 0";
    EXPECT_THROW((void)sqlock::table_locker(*db_, {.ttl = -1ms}), sqlock::usage_error) << "negative ttl";
    EXPECT_THROW((void)sqlock::table_locker(*db_, {.ttl = 9ms}), sqlock::usage_error) << "ttl 9ms (minimum 10ms)";
    EXPECT_THROW((void)sqlock::table_locker(*db_, {.ttl = std::chrono::hours(24 * 8)}), sqlock::usage_error)
        << "ttl 8 days";
    EXPECT_THROW((void)sqlock::table_locker(*db_, {.ttl = std::chrono::hours(24 * 7) + 1ms}), sqlock::usage_error)
        << "ttl 7 days + 1ms";
    EXPECT_THROW((void)sqlock::table_locker(*db_, {.owner = std::string(256, 'o')}), sqlock::usage_error)
        << "owner of 256 bytes";

    locker L = make_locker();
    EXPECT_THROW((void)L.acquire(n("negative-wait"), -1ms), sqlock::usage_error) << "negative wait";
    EXPECT_EQ(count_rows_with_prefix(*raw_, prefix_), before);
}

TEST_P(TableLock, TtlBoundsAreAccepted) {
    std::string const name = n("ttl-7-days");
    {
        locker L = make_locker({.ttl = std::chrono::hours(24 * 7)});
        lease l = L.acquire(name, 0ms);
        EXPECT_LE(std::chrono::abs((l.expires_at() - l.created_at()) - std::chrono::hours(24 * 7)), 5ms);
        auto r = row(name);
        ASSERT_TRUE(r.has_value());
        EXPECT_TRUE(r->live());
        EXPECT_LE(std::llabs(r->expires_us - us_of(l.expires_at())), 1000);
    }
    EXPECT_FALSE(row(name).has_value());
    {
        // 10 ms is the smallest ttl: accepted. An attempt may still come back
        // empty when the round trip eats the whole lease (a grant must have
        // validity left), so only "not a usage error" is asserted here.
        std::optional<locker> L;
        ASSERT_NO_THROW(L.emplace(make_locker({.ttl = 10ms, .auto_renew = false})));
        try {
            lease l = L->acquire(n("ttl-10ms"), 2s);
        } catch (sqlock::timeout const&) {
        } catch (sqlock::backend_unavailable const& e) {
            // The documented outcome of a grant whose round trip ate the lease.
            EXPECT_NE(std::string(e.what()).find("longer than its ttl"), std::string::npos) << e.what();
        } catch (std::exception const& e) {
            ADD_FAILURE() << "acquire with ttl 10ms threw " << describe(e);
        }
    }
}

TEST_P(TableLock, TrickyNamesAreOrdinaryNames) {
    locker A = make_locker();
    locker B = make_locker();
    std::vector<std::string> const names = {
        n("x'); DROP TABLE sqlock_locks; --"),
        n("'"),
        n("''"),
        n("\""),
        n("\\"),
        n("\\'"),
        n("O'Brien said \"hi\" \\ bye"),
        n("%"),
        n("_"),
        n("line\nbreak\ttab"),
        n(" leading and trailing "),
        n("\xC3\xA9 \xE9\x94\x81 \xF0\x9F\x94\x92 \xD0\xBA\xD0\xBB\xD1\x8E\xD1\x87"),  // é 锁 🔒 ключ
        n("sqlock_locks"),
        pad_to(prefix_, 255),
        pad_to(prefix_, 255, "\xF0\x9F\x94\x92"),  // ends in a 4-byte character
    };
    for (auto const& name : names) {
        SCOPED_TRACE("name: " + name.substr(0, 80) + " (" + std::to_string(name.size()) + " bytes)");
        std::optional<lease> l;
        ASSERT_NO_THROW(l = A.try_acquire(name));
        ASSERT_TRUE(l.has_value());
        EXPECT_EQ(l->name(), name);
        auto r = row(name);
        ASSERT_TRUE(r.has_value()) << "no row under the exact name";
        EXPECT_EQ(r->name, name) << "the stored name differs from the name given";
        EXPECT_EQ(r->owner, l->owner());
        EXPECT_FALSE(B.try_acquire(name).has_value());
        l->release();
        EXPECT_FALSE(row(name).has_value());
    }
    // The table is still there.
    long long rows = -1;
    EXPECT_NO_THROW((*raw_ << "SELECT COUNT(*) FROM sqlock_locks", soci::into(rows)));
    EXPECT_GE(rows, 0);
}

TEST_P(TableLock, DistinctByteStringsAreDistinctLocks) {
    locker A = make_locker();
    locker B = make_locker();
    std::vector<std::pair<std::string, std::string>> const pairs = {
        {"Lock", "lock"},   {"a", "a "}, {"a", "A"}, {"\xC3\xA9", "e\xCC\x81"},  // é: NFC vs NFD
        {"ss", "\xC3\x9F"},                                                      // ß
        {"a", "\xC3\xA1"},                                                       // á (accent-insensitive collations)
    };
    for (auto const& [x, y] : pairs) {
        std::string const nx = n("distinct/" + x), ny = n("distinct/" + y);
        SCOPED_TRACE("'" + x + "' vs '" + y + "'");
        std::optional<lease> lx = A.try_acquire(nx);
        ASSERT_TRUE(lx.has_value());
        std::optional<lease> ly = B.try_acquire(ny);
        EXPECT_TRUE(ly.has_value()) << "two different byte strings share one lock";
        auto rx = row(nx);
        ASSERT_TRUE(rx.has_value());
        EXPECT_EQ(rx->name, nx);
        EXPECT_EQ(rx->owner, lx->owner());
        if (ly) {
            auto ry = row(ny);
            ASSERT_TRUE(ry.has_value());
            EXPECT_EQ(ry->name, ny);
            EXPECT_EQ(ry->owner, ly->owner());
            ly->release();
        }
        lx->release();
        EXPECT_FALSE(row(nx).has_value());
        EXPECT_FALSE(row(ny).has_value());
    }
}

// ============================================================ timeouts

TEST_P(TableLock, AcquireTimesOutOnHeldLock) {
    locker A = make_locker();
    std::string const waiter_owner = n("waiter-owner");
    locker W = make_locker({.owner = waiter_owner});
    std::string const name = n("timeout");

    lease a = A.acquire(name, 0ms);
    EXPECT_THROW((void)W.acquire(name, 300ms), sqlock::timeout);
    EXPECT_EQ(count_rows_owned_by(*raw_, waiter_owner), 0) << "the timed-out waiter left a row";
    EXPECT_THROW((void)W.acquire(name, 0ms), sqlock::timeout);
    EXPECT_EQ(count_rows_owned_by(*raw_, waiter_owner), 0);
    EXPECT_FALSE(W.try_acquire(name).has_value());

    auto r = row(name);
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(r->owner, a.owner());
    EXPECT_EQ(r->token, a.token());
    a.release();

    // An explicit owner is the one written in the row.
    lease w = W.acquire(name, 0ms);
    EXPECT_EQ(w.owner(), waiter_owner);
    EXPECT_EQ(count_rows_owned_by(*raw_, waiter_owner), 1);
}

// ============================================================ lease RAII

TEST_P(TableLock, LeaseDestructorReleases) {
    locker L = make_locker();
    std::string const name = n("raii");
    {
        lease l = L.acquire(name, 0ms);
        EXPECT_TRUE(row(name).has_value());
    }
    EXPECT_FALSE(row(name).has_value()) << "~lease must release";
    {
        std::optional<lease> l = L.try_acquire(name);
        ASSERT_TRUE(l.has_value());
    }
    EXPECT_FALSE(row(name).has_value()) << "~optional<lease> must release";
}

TEST_P(TableLock, MovedFromLeaseDoesNothing) {
    locker L = make_locker();
    std::string const name = n("moved-from");
    std::optional<lease> target;
    {
        lease source = L.acquire(name, 0ms);
        std::int64_t const token = source.token();
        target.emplace(std::move(source));
        EXPECT_FALSE(source.held());  // NOLINT(bugprone-use-after-move): moved-from state is specified
        EXPECT_EQ(source.state(), sqlock::lease_state::released);
        EXPECT_EQ(source.remaining(), std::chrono::steady_clock::duration::zero());
        EXPECT_EQ(target->token(), token);
        EXPECT_TRUE(target->held());
    }  // the moved-from lease is destroyed here
    auto r = row(name);
    ASSERT_TRUE(r.has_value()) << "destroying a moved-from lease released the lock";
    EXPECT_EQ(r->owner, target->owner());
    target->release();
    EXPECT_FALSE(row(name).has_value());
}

TEST_P(TableLock, MoveAssignmentReleasesTheOldLease) {
    locker L = make_locker();
    std::string const first = n("move-assign-1"), second = n("move-assign-2");
    lease x = L.acquire(first, 0ms);
    lease y = L.acquire(second, 0ms);
    x = std::move(y);
    EXPECT_FALSE(row(first).has_value()) << "move assignment must release the replaced lease";
    EXPECT_TRUE(row(second).has_value());
    EXPECT_EQ(x.name(), second);
    EXPECT_TRUE(x.held());
    x.release();
    EXPECT_FALSE(row(second).has_value());
}

TEST_P(TableLock, ReleaseTwiceIsANoop) {
    locker L = make_locker();
    std::string const name = n("release-twice");
    lease l = L.acquire(name, 0ms);
    l.release();
    EXPECT_FALSE(row(name).has_value());
    // Someone else takes the name; the second release must not touch their row.
    locker B = make_locker();
    lease b = B.acquire(name, 0ms);
    EXPECT_NO_THROW(l.release());
    EXPECT_FALSE(l.held());
    auto r = row(name);
    ASSERT_TRUE(r.has_value()) << "a second release deleted another owner's row";
    EXPECT_EQ(r->owner, b.owner());
}

// ============================================================ renewal (more in lifecycle_suite.cpp)

TEST_P(TableLock, RenewOfAnExpiredLeaseFailsEvenWithoutACompetitor) {
    locker L = make_locker({.ttl = 30s, .auto_renew = false});
    std::string const name = n("renew-expired");
    lease l = L.acquire(name, 0ms);
    backdate_row(*raw_, e_, name);

    EXPECT_THROW(l.renew(), sqlock::lease_lost) << "an expired lease must not be resurrected";
    EXPECT_TRUE(l.lost());
    EXPECT_TRUE(l.stop_token().stop_requested());
    auto r = row(name);
    if (r) {
        EXPECT_FALSE(r->live()) << "the refused renewal extended an expired row";
    }

    locker B = make_locker();
    std::optional<lease> b = B.try_acquire(name);
    ASSERT_TRUE(b.has_value());
    EXPECT_GT(b->token(), l.token());
}

// ============================================================ fencing on the resource side

TEST_P(TableLock, FenceRefusesStaleTokens) {
    sqlock::fence const f(*db_);
    std::string const resource = n("resource");
    auto s = raw_session(e_, url_);
    {
        soci::transaction tx(*s);
        ASSERT_NO_THROW(f.check_and_set(*s, resource, 5));
        tx.commit();
    }
    {
        soci::transaction tx(*s);
        EXPECT_NO_THROW(f.check_and_set(*s, resource, 5)) << "an equal token is the same holder: it passes";
        tx.commit();
    }
    {
        soci::transaction tx(*s);
        try {
            f.check_and_set(*s, resource, 4);
            ADD_FAILURE() << "a lower token passed the fence";
        } catch (sqlock::stale_token const& e) {
            EXPECT_EQ(e.seen(), 5);
        }
        tx.rollback();
    }
    {
        soci::transaction tx(*s);
        EXPECT_NO_THROW(f.check_and_set(*s, resource, 9));
        tx.commit();
    }
    {
        soci::transaction tx(*s);
        EXPECT_THROW(f.check_and_set(*s, resource, 6), sqlock::stale_token);
        tx.rollback();
    }
    EXPECT_THROW(f.check_and_set(*s, "", 1), sqlock::usage_error);
    EXPECT_THROW(f.check_and_set(*s, resource, 0), sqlock::usage_error);
    EXPECT_THROW(f.check_and_set(*s, resource, -1), sqlock::usage_error);
    EXPECT_THROW(f.check_and_set(*s, pad_to(prefix_, 256), 1), sqlock::usage_error);
}

// ============================================================ counters

TEST_P(TableLock, StatsCountWhatHappened) {
    locker A = make_locker();
    locker B = make_locker();
    std::string const name = n("stats");
    lease a = A.acquire(name, 0ms);
    EXPECT_FALSE(B.try_acquire(name).has_value());
    EXPECT_THROW((void)B.acquire(name, 50ms), sqlock::timeout);
    a.release();

    sqlock::locker_stats const sa = A.stats();
    sqlock::locker_stats const sb = B.stats();
    EXPECT_EQ(sa.acquired, 1u);
    EXPECT_EQ(sa.released, 1u);
    EXPECT_EQ(sa.lost, 0u);
    EXPECT_EQ(sb.acquired, 0u);
    EXPECT_GE(sb.busy, 1u);
    EXPECT_EQ(sb.timeouts, 1u);
    std::uint64_t waits = 0;
    for (auto w : sb.wait_histogram) waits += w;
    EXPECT_GE(waits, 1u) << "the waiting acquire is not in the wait histogram";
}

// ============================================================ store-level errors

TEST_P(TableLock, SchemaMissing) {
    std::string missing_prefix = "sqlock_missing_" + random_hex(10);
    std::string url = url_;
    std::optional<temp_dir> fresh;
    if (e_ == engine::sqlite) {  // a fresh file has no tables at all
        fresh.emplace();
        url = sqlite_url(fresh->path() / "empty.db");
        missing_prefix = "sqlock";
    }
    std::string const table = missing_prefix + "_locks";
    try {
        sqlock::store s(url, {.table_prefix = missing_prefix});
        ADD_FAILURE() << "opening a store without its tables (and without create_schema) must throw";
    } catch (sqlock::schema_missing const& e) {
        std::string what = e.what();
        EXPECT_NE(what.find(table), std::string::npos) << "the message must name the table: " << what;
        std::string lower = what;
        std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
        EXPECT_NE(lower.find("schema"), std::string::npos) << "the message must mention the schema: " << what;
    } catch (std::exception const& e) {
        ADD_FAILURE() << "expected sqlock::schema_missing, got " << describe(e);
    }

    // Nothing was created behind our back.
    auto s = raw_session(e_, url);
    long long n_tables = -1;
    switch (e_) {
        case engine::sqlite:
            *s << "SELECT COUNT(*) FROM sqlite_master WHERE name = :t", soci::use(table), soci::into(n_tables);
            break;
        case engine::postgresql:
        case engine::mysql:
            *s << "SELECT COUNT(*) FROM information_schema.tables WHERE table_name = :t", soci::use(table),
                soci::into(n_tables);
            break;
    }
    EXPECT_EQ(n_tables, 0) << "a store without create_schema created " << table;
}

TEST_P(TableLock, CreateSchemaIsIdempotent) {
    EXPECT_NO_THROW(db_->create_schema());
    EXPECT_NO_THROW(db_->create_schema());
    EXPECT_EQ(db_->schema_sql(), sqlock::schema_sql(e_, "sqlock"));
    // The tables exist now: a store without create_schema opens.
    std::optional<sqlock::store> again;
    EXPECT_NO_THROW(again.emplace(url_));
    if (again) {
        EXPECT_EQ(again->engine(), e_);
        locker L = sqlock::table_locker(*again);
        EXPECT_TRUE(L.try_acquire(n("after-reopen")).has_value());
    }
}

TEST_P(TableLock, ConcurrentCreateSchemaIsSafe) {
    // Several services starting at once against a database without the tables.
    std::string const prefix = "sqlt_cs_" + random_hex(10);
    constexpr int starters = 4;
    std::vector<std::string> errors(starters);
    std::latch start(starters);
    std::vector<std::thread> ts;
    for (int i = 0; i < starters; ++i) {
        ts.emplace_back([&, i] {
            start.arrive_and_wait();
            try {
                sqlock::store s(url_, {.create_schema = true, .table_prefix = prefix});
                std::optional<lease> l = sqlock::table_locker(s).try_acquire(n("cs-" + std::to_string(i)));
                if (!l) errors[i] = "try_acquire of a free name returned empty";
            } catch (std::exception const& e) {
                errors[i] = describe(e);
            }
        });
    }
    for (auto& t : ts) t.join();
    for (int i = 0; i < starters; ++i) EXPECT_EQ(errors[i], "") << "starter " << i;

    // Clean up the tables made for this test.
    std::vector<std::string> tables;
    if (e_ == engine::sqlite) {
        soci::rowset<std::string> rs = (raw_->prepare << "SELECT name FROM sqlite_master WHERE type = 'table'");
        for (auto const& t : rs) tables.push_back(t);
    } else {
        std::string const schema_expr = e_ == engine::postgresql ? "current_schema()" : "DATABASE()";
        soci::rowset<std::string> rs =
            (raw_->prepare << "SELECT table_name FROM information_schema.tables WHERE table_schema = " + schema_expr);
        for (auto const& t : rs) tables.push_back(t);
    }
    int mine = 0;
    for (auto const& t : tables) {
        if (t.rfind(prefix + "_", 0) != 0) continue;
        ++mine;
        *raw_ << "DROP TABLE IF EXISTS " + t;
    }
    EXPECT_GE(mine, 2) << "expected at least " << prefix << "_locks and " << prefix << "_tokens";
}

TEST_P(TableLock, UrlMasksPassword) {
    EXPECT_EQ(db_->engine(), e_);
    std::string const shown = db_->url();
    if (e_ == engine::sqlite) {
        EXPECT_EQ(shown, url_) << "a SQLite URL has no password to mask";
        return;
    }
    url_parts const p = parse_server_url(url_);
    ASSERT_FALSE(p.password.empty());
    EXPECT_EQ(shown.find(":" + p.password + "@"), std::string::npos) << "password shown in " << shown;
    EXPECT_NE(shown.find(p.host), std::string::npos) << shown;
    EXPECT_NE(shown.find(p.user), std::string::npos) << shown;
}

TEST_P(TableLock, WrongCredentialsAreBackendUnavailable) {
    if (e_ == engine::sqlite) {
        // SQLite has no credentials; its equivalent is a file that cannot be opened.
        try {
            sqlock::store s("sqlite:///nonexistent-dir-" + random_hex(8) + "/locks.db");
            ADD_FAILURE() << "opening a SQLite file in a missing directory succeeded";
        } catch (sqlock::backend_unavailable const& e) {
            EXPECT_NE(std::string(e.what()).find("unable to open"), std::string::npos) << e.what();
        }
        return;
    }
    // The test servers trust PostgreSQL's local connections, so a wrong password
    // alone would be accepted there: use an unknown role (and a wrong password).
    url_parts const p = parse_server_url(url_);
    std::string const secret = "wrong-" + random_hex(8);
    std::string const user = e_ == engine::postgresql ? "sqlock_nobody_" + random_hex(6) : p.user;
    std::string const bad = with_password(url_, user, secret);
    try {
        sqlock::store s(bad, {.connect_timeout = 3s});
        ADD_FAILURE() << "connecting with wrong credentials succeeded";
    } catch (sqlock::backend_unavailable const& e) {
        std::string what = e.what();
        if (e_ == engine::postgresql) {
            EXPECT_TRUE(what.find("does not exist") != std::string::npos ||
                        what.find("authentication failed") != std::string::npos)
                << "the engine's message is missing: " << what;
        } else {
            EXPECT_NE(what.find("Access denied"), std::string::npos) << "the engine's message is missing: " << what;
        }
        EXPECT_EQ(what.find(secret), std::string::npos) << "the password leaked into the message: " << what;
    } catch (std::exception const& e) {
        ADD_FAILURE() << "expected sqlock::backend_unavailable, got " << describe(e);
    }
}

// ============================================================ restart (separate suite: may be excluded)

/// A holds `name`, a waiter on the same store waits for it, A releases: the
/// waiter must get it.
void release_with_a_waiter(sqlock::store& db, std::string const& name) {
    locker A = sqlock::table_locker(db);
    locker W = sqlock::table_locker(db, {.backoff_min = 5ms, .backoff_max = 500ms});
    lease a = A.acquire(name, 0ms);
    std::optional<lease> w;
    std::string error;
    std::thread waiter([&] {
        try {
            w.emplace(W.acquire(name, 30s));
        } catch (std::exception const& e) {
            error = e.what();
        }
    });
    std::this_thread::sleep_for(100ms);  // let the waiter start waiting
    a.release();
    waiter.join();
    EXPECT_EQ(error, "");
    EXPECT_TRUE(w.has_value()) << "the waiter did not get the released lock";
}

TEST_P(Restart, TokensIncreaseAndTheStoreReconnects) {
    locker L = make_locker();
    std::string const name = n("restart");
    std::string const held_name = n("restart-held");

    lease first = L.acquire(name, 0ms);
    std::int64_t const t1 = first.token();
    first.release();

    if (e_ == engine::sqlite) {
        // SQLite's "restart": close every connection to the file, open it again.
        db_.reset();
        db_.emplace(url_);
        locker L2 = make_locker();
        lease again = L2.acquire(name, 0ms);
        EXPECT_GT(again.token(), t1) << "token repeated after reopening the database file";
        return;
    }

    std::string cmd;
    require_env(restart_var(e_), cmd);
    if (should_stop()) return;

    // Open several pooled connections, so the restart breaks more than one.
    {
        std::vector<std::thread> ts;
        std::vector<std::string> errors(4);
        for (int i = 0; i < 4; ++i) {
            ts.emplace_back([&, i] {
                try {
                    lease l = L.acquire(n("warm-" + std::to_string(i)), 5s);
                    std::this_thread::sleep_for(50ms);
                } catch (std::exception const& e) {
                    errors[i] = e.what();
                }
            });
        }
        for (auto& t : ts) t.join();
        for (auto const& e : errors) EXPECT_EQ(e, "");
    }
    lease held = L.acquire(held_name, 0ms);

    auto const before = std::move(raw_);
    int const rc = std::system(cmd.c_str());
    ASSERT_TRUE(rc != -1 && WIFEXITED(rc) && WEXITSTATUS(rc) == 0) << "restart command failed: " << cmd;
    raw_ = raw_session(e_, url_);
    // Evidence that the restart broke existing connections (the store's pooled ones too).
    EXPECT_ANY_THROW((*before << "SELECT 1")) << "a connection opened before the restart still works: "
                                                 "did the server really restart?";

    // The same store keeps working: its broken pooled connections are
    // reconnected on their next use, transparently.
    std::optional<lease> after;
    try {
        after = L.try_acquire(name);
    } catch (sqlock::backend_unavailable const& e) {
        ADD_FAILURE() << "the first acquire after the restart threw backend_unavailable (the store must "
                         "reconnect transparently): "
                      << e.what();
        after = L.try_acquire(name);  // at most one call may fail
    }
    ASSERT_TRUE(after.has_value());
    EXPECT_GT(after->token(), t1) << "token repeated after a server restart";

    // Every pooled connection recovers.
    {
        std::vector<std::thread> ts;
        std::vector<std::string> errors(4);
        for (int i = 0; i < 4; ++i) {
            ts.emplace_back([&, i] {
                try {
                    lease l = L.acquire(n("after-" + std::to_string(i)), 10s);
                    std::this_thread::sleep_for(50ms);
                } catch (std::exception const& e) {
                    errors[i] = describe(e);
                }
            });
        }
        for (auto& t : ts) t.join();
        for (int i = 0; i < 4; ++i) EXPECT_EQ(errors[i], "") << "pooled acquire " << i << " after restart";
    }

    // Waiters are still woken. On PostgreSQL the store's LISTEN connection
    // comes back (it may take a moment: a release before that is announced to
    // nobody, and waiters poll meanwhile), so try a few release cycles.
    {
        std::uint64_t const notes_before = db_->stats().notifications;
        int cycle = 0;
        bool notified = eventually(
            [&] {
                release_with_a_waiter(*db_, n("wake-after-restart-" + std::to_string(cycle++)));
                return e_ != engine::postgresql ||
                       eventually([&] { return db_->stats().notifications > notes_before; }, 1000ms);
            },
            15000ms);
        EXPECT_TRUE(notified) << "no release notification reached the store within 15s of the restart "
                                 "("
                              << cycle << " release cycles): LISTEN not re-established";
    }

    // A lease held across the restart survived it (durable) and releases.
    auto r = row(held_name);
    ASSERT_TRUE(r.has_value()) << "a committed lock row was lost in the restart";
    EXPECT_EQ(r->owner, held.owner());
    EXPECT_NO_THROW(held.release());
    EXPECT_FALSE(row(held_name).has_value());

    // A new store agrees.
    std::int64_t const t2 = after->token();
    after->release();
    sqlock::store fresh(url_);
    lease again = sqlock::table_locker(fresh).acquire(name, 0ms);
    EXPECT_GT(again.token(), t2);
}

// ============================================================ MariaDB: procedures and round trips

/// The table lock on MariaDB only: its acquire and renew are stored procedures.
class TableLockMariaDB : public EngineTest {
protected:
    void TearDown() override {
        for (auto const& p : prefixes_) {
            try {
                for (auto const& t : {"_locks", "_tokens", "_fences", "_rows", "_majority_tokens", "_identity",
                                      "_majority_members", "_semaphores"})
                    *raw_ << "DROP TABLE IF EXISTS " + p + t;
                for (auto const& r : {"_acquire_v2", "_acquire_shared", "_acquire", "_renew"})
                    *raw_ << "DROP PROCEDURE IF EXISTS " + p + r;
            } catch (std::exception const& e) {
                ADD_FAILURE() << "could not drop the tables of prefix " << p << ": " << describe(e);
            }
        }
    }

    /// A table prefix of this test's own, whose tables and procedures TearDown drops.
    std::string own_prefix() { return prefixes_.emplace_back("sqlt_" + random_hex(10)); }

    long long procedures(std::string const& prefix) {
        long long n = -1;
        std::string const acquire = prefix + "_acquire_v2", renew = prefix + "_renew";
        *raw_ << "SELECT COUNT(*) FROM information_schema.routines WHERE routine_schema = DATABASE()"
                 " AND routine_name IN (:a, :r)",
            soci::use(acquire, "a"), soci::use(renew, "r"), soci::into(n);
        return n;
    }

    std::vector<std::string> prefixes_;
};

// The tables without the procedures (an older sqlock's schema, or a partial
// apply): the store must refuse to open with schema_missing naming the missing
// procedure and the file to apply, not fail later on the first acquire; with
// create_schema it adds them.
TEST_P(TableLockMariaDB, TablesWithoutTheProceduresAreSchemaMissing) {
    std::string const p = own_prefix();
    { sqlock::store made(url_, {.create_schema = true, .table_prefix = p}); }
    ASSERT_EQ(procedures(p), 2) << "create_schema made no procedures";
    *raw_ << "DROP PROCEDURE " + p + "_acquire_v2";
    *raw_ << "DROP PROCEDURE " + p + "_renew";
    try {
        sqlock::store s(url_, {.table_prefix = p});
        ADD_FAILURE() << "a store opened on tables without their procedures";
    } catch (sqlock::schema_missing const& e) {
        std::string const what = e.what();
        EXPECT_NE(what.find(p + "_acquire_v2"), std::string::npos) << "the message must name the procedure: " << what;
        EXPECT_NE(what.find("schema/mysql.sql"), std::string::npos) << "the message must say what to apply: " << what;
    } catch (std::exception const& e) {
        ADD_FAILURE() << "expected sqlock::schema_missing, got " << describe(e);
    }
    EXPECT_EQ(procedures(p), 0) << "a store without create_schema created procedures";

    sqlock::store s(url_, {.create_schema = true, .table_prefix = p});
    EXPECT_EQ(procedures(p), 2);
    locker L = sqlock::table_locker(s, {.ttl = 30s, .auto_renew = false});
    auto l = L.try_acquire(n("after-create"));
    ASSERT_TRUE(l.has_value());
    EXPECT_NO_THROW(l->renew());

    // Dropped under an open store: the next acquire says which procedure is missing.
    l->release();
    *raw_ << "DROP PROCEDURE " + p + "_acquire_v2";
    try {
        (void)L.try_acquire(n("dropped"));
        ADD_FAILURE() << "an acquire without its procedure returned";
    } catch (sqlock::schema_missing const& e) {
        std::string const what = e.what();
        EXPECT_NE(what.find(p + "_acquire_v2"), std::string::npos) << what;
        EXPECT_EQ(e.code(), "1305") << what;
    } catch (std::exception const& e) {
        ADD_FAILURE() << "expected sqlock::schema_missing, got " << describe(e);
    }
}

// A database made by a sqlock before issue 18 has <prefix>_acquire (which took a
// row carrying the caller's attempt id as granted) and no <prefix>_acquire_v2: a
// store says to apply the schema, create_schema adds the new procedure, and the
// old one stays for older clients still running.
TEST_P(TableLockMariaDB, AnOlderSchemaGetsTheNewAcquireProcedure) {
    std::string const p = own_prefix();
    { sqlock::store made(url_, {.create_schema = true, .table_prefix = p}); }
    *raw_ << "DROP PROCEDURE " + p + "_acquire_v2";
    *raw_ << "CREATE PROCEDURE " + p +
                 "_acquire(IN p_name VARBINARY(255), IN p_owner VARBINARY(255),"
                 " IN p_attempt BIGINT, IN p_ttl_us BIGINT, IN p_budget_us BIGINT) SELECT 1, 0, 0, 0";
    try {
        sqlock::store s(url_, {.table_prefix = p});
        ADD_FAILURE() << "a store opened on a schema without " << p << "_acquire_v2";
    } catch (sqlock::schema_missing const& e) {
        std::string const what = e.what();
        EXPECT_NE(what.find(p + "_acquire_v2"), std::string::npos) << "the message must name the procedure: " << what;
    } catch (std::exception const& e) {
        ADD_FAILURE() << "expected sqlock::schema_missing, got " << describe(e);
    }
    sqlock::store s(url_, {.create_schema = true, .table_prefix = p});
    long long old_kept = 0;
    std::string const old_name = p + "_acquire";
    *raw_ << "SELECT COUNT(*) FROM information_schema.routines WHERE routine_schema = DATABASE()"
             " AND routine_name = :a",
        soci::use(old_name, "a"), soci::into(old_kept);
    EXPECT_EQ(old_kept, 1) << "create_schema dropped the older procedure that older clients call";
    locker L = sqlock::table_locker(s, {.ttl = 30s, .auto_renew = false});
    auto l = L.try_acquire(n("upgraded"));
    ASSERT_TRUE(l.has_value());
    EXPECT_FALSE(sqlock::table_locker(s, {.ttl = 30s}).try_acquire(n("upgraded")).has_value());
    l->release();
}

// Each decision is one round trip once the connection has prepared its
// statements: an acquire (a CALL: token draw and lock upsert in one server-side
// transaction), a busy try, a renewal and a release each send one command.
TEST_P(TableLockMariaDB, EachDecisionIsOneRoundTrip) {
    command_counter proxy(url_);
    sqlock::store s(proxy.proxied_url(), {.pool_size = 1});
    locker L = sqlock::table_locker(s, {.ttl = 30s, .auto_renew = false});
    locker other = sqlock::table_locker(s, {.ttl = 30s, .auto_renew = false});
    {  // first use on each connection prepares the statements
        auto warm = L.try_acquire(n("warm-up"));
        ASSERT_TRUE(warm.has_value());
        warm->renew();
        warm->release();
    }
    auto const commands_of = [&](auto&& step) {
        auto const before = proxy.commands().size();
        step();
        auto all = proxy.commands();
        return std::vector<int>(all.begin() + static_cast<std::ptrdiff_t>(before), all.end());
    };
    std::optional<lease> l;
    auto acquire = commands_of([&] { l = L.try_acquire(n("counted")); });
    ASSERT_TRUE(l.has_value());
    EXPECT_EQ(acquire.size(), 1u) << "commands sent by one acquire:" << command_list(acquire);
    auto busy = commands_of([&] { EXPECT_FALSE(other.try_acquire(n("counted")).has_value()); });
    EXPECT_EQ(busy.size(), 1u) << "commands sent by one busy try:" << command_list(busy);
    auto renew = commands_of([&] { l->renew(); });
    EXPECT_EQ(renew.size(), 1u) << "commands sent by one renewal:" << command_list(renew);
    auto release = commands_of([&] { l->release(); });
    EXPECT_EQ(release.size(), 1u) << "commands sent by one release:" << command_list(release);
    EXPECT_FALSE(row(n("counted")).has_value());
}

// The row lock's token draw is one autocommit statement whose LAST_INSERT_ID(expr)
// comes back in its answer: on the insert path (a new counter) and on the update
// path, the token handed out is the counter's value.
TEST_P(TableLockMariaDB, RowLockTokenIsTheCountersValue) {
    locker R = sqlock::row_locker(*db_, {.ttl = 30s});
    std::string const name = n("row-token");
    std::int64_t previous = 0;
    for (int i = 0; i < 3; ++i) {
        lease l = R.acquire(name, 10s);
        long long counter = 0;
        *raw_ << "SELECT token FROM sqlock_tokens WHERE name = :n", soci::use(name, "n"), soci::into(counter);
        EXPECT_EQ(l.token(), counter) << "grant " << i;
        EXPECT_GT(l.token(), previous);
        previous = l.token();
        l.release();
    }
}

// ============================================================ the protocol the tables speak

/// Tables of a prefix of this test's own (docs/operations.md, "Upgrading sqlock"), dropped after it.
class Protocol : public EngineTest {
protected:
    void TearDown() override {
        try {
            for (auto const& t : tables_of_prefix()) *raw_ << "DROP TABLE IF EXISTS " + t;
            if (e_ == engine::mysql)
                for (auto const& r : {"_acquire_v2", "_acquire_shared", "_acquire", "_renew"})
                    *raw_ << "DROP PROCEDURE IF EXISTS " + tables_ + r;
        } catch (std::exception const& e) {
            ADD_FAILURE() << "could not drop the tables of prefix " << tables_ << ": " << describe(e);
        }
    }

    sqlock::store_options options(bool create) const { return {.create_schema = create, .table_prefix = tables_}; }

    /// Makes the tables (create_schema) and takes `name` once; its token.
    std::int64_t make_tables_and_take(std::string const& name) {
        sqlock::store made(url_, options(true));
        auto l = sqlock::table_locker(made).acquire(name, 0ms);
        l.release();
        return l.token();
    }

    /// The tables whose names start with this test's prefix, sorted.
    std::vector<std::string> tables_of_prefix() {
        std::string const sql = e_ == engine::sqlite
                                    ? "SELECT name FROM sqlite_master WHERE type = 'table'"
                                    : "SELECT table_name FROM information_schema.tables WHERE table_schema = " +
                                          std::string(e_ == engine::postgresql ? "current_schema()" : "DATABASE()");
        std::vector<std::string> out;
        soci::rowset<std::string> rs = (raw_->prepare << sql);
        for (auto const& t : rs)
            if (t.rfind(tables_ + "_", 0) == 0) out.push_back(t);
        std::sort(out.begin(), out.end());
        return out;
    }

    /// The record's version; -1 when the table has no row.
    int recorded() {
        int v = -1;
        *raw_ << "SELECT version FROM " + tables_ + "_protocol WHERE one = 1", soci::into(v);
        return v;
    }

    std::int64_t counter(std::string const& name) {
        long long t = -1;
        *raw_ << "SELECT token FROM " + tables_ + "_tokens WHERE name = :n", soci::use(name, "n"), soci::into(t);
        return t;
    }

    std::string const tables_ = "sqlt_p" + random_hex(10);
};

TEST_P(Protocol, ANewSchemaRecordsThisLibrarysProtocol) {
    { sqlock::store made(url_, options(true)); }
    EXPECT_EQ(sqlock::protocol_version(), 1);
    EXPECT_EQ(recorded(), sqlock::protocol_version());
    // Applied again, the record stays one row.
    sqlock::store again(url_, options(false));
    again.create_schema();
    long long rows = 0;
    *raw_ << "SELECT COUNT(*) FROM " + tables_ + "_protocol", soci::into(rows);
    EXPECT_EQ(rows, 1);
}

// A client that does not know the rules of newer tables must not use them: the
// store refuses before it changes anything (not even create_schema's DDL), with an
// error that says to upgrade; the same tables open again once they speak this protocol.
TEST_P(Protocol, TablesOfANewerProtocolAreRefusedBeforeAnythingChanges) {
    std::string const name = n("upgraded");
    std::int64_t const token = make_tables_and_take(name);
    int const newer = sqlock::protocol_version() + 1;
    *raw_ << "UPDATE " + tables_ + "_protocol SET version = " + std::to_string(newer);
    // A table the newer protocol might have done without: create_schema must not put it back.
    *raw_ << "DROP TABLE " + tables_ + "_semaphores";
    auto const before = tables_of_prefix();
    for (bool create : {false, true}) {
        try {
            sqlock::store s(url_, options(create));
            ADD_FAILURE() << "a store (create_schema = " << create << ") opened tables of protocol " << newer;
        } catch (sqlock::protocol_mismatch const& e) {
            std::string const what = e.what();
            EXPECT_NE(what.find("speak sqlock protocol " + std::to_string(newer)), std::string::npos) << what;
            EXPECT_NE(what.find("upgrade sqlock"), std::string::npos) << what;
            EXPECT_NE(what.find("'" + tables_ + "'"), std::string::npos) << what;
            EXPECT_NE(what.find("nothing was changed"), std::string::npos) << what;
        } catch (std::exception const& e) {
            ADD_FAILURE() << "create_schema = " << create << ": not a protocol_mismatch: " << describe(e);
        }
    }
    EXPECT_EQ(tables_of_prefix(), before) << "a refused store changed the tables";
    EXPECT_EQ(recorded(), newer);
    EXPECT_EQ(counter(name), token);

    *raw_ << "UPDATE " + tables_ + "_protocol SET version = " + std::to_string(sqlock::protocol_version());
    sqlock::store back(url_, options(true));
    auto l = sqlock::table_locker(back).acquire(name, 0ms);
    EXPECT_GT(l.token(), token);
    l.release();
}

// Tables made before the record existed speak protocol 1: they open as they are, and
// applying the schema again records it.
TEST_P(Protocol, TablesWithoutTheRecordSpeakProtocolOne) {
    std::string const name = n("before-the-record");
    std::int64_t const token = make_tables_and_take(name);
    *raw_ << "DROP TABLE " + tables_ + "_protocol";
    sqlock::store old(url_, options(false));
    auto l = sqlock::table_locker(old).acquire(name, 0ms);
    EXPECT_GT(l.token(), token);
    l.release();
    auto const tables = tables_of_prefix();
    EXPECT_EQ(std::count(tables.begin(), tables.end(), tables_ + "_protocol"), 0);
    old.create_schema();
    EXPECT_EQ(recorded(), 1);
}

INSTANTIATE_TEST_SUITE_P(Engines, TableLockMariaDB, ::testing::Values(engine::mysql), engine_param_name{});

INSTANTIATE_TEST_SUITE_P(Engines, TableLock, ::testing::Values(engine::postgresql, engine::mysql, engine::sqlite),
                         engine_param_name{});
INSTANTIATE_TEST_SUITE_P(Engines, Protocol, ::testing::Values(engine::postgresql, engine::mysql, engine::sqlite),
                         engine_param_name{});
INSTANTIATE_TEST_SUITE_P(Engines, Restart, ::testing::Values(engine::postgresql, engine::mysql, engine::sqlite),
                         engine_param_name{});

}  // namespace
