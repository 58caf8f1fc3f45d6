// sqlock tests — the counting semaphore's safety edges (issue 38, items 4, 5, 6 and 9):
// Engines/SemaphoreSafety.<Test>/<engine> (every engine, table locker) and
// Engines/SemaphoreSafetyServer.<Test>/<engine> (PostgreSQL, MariaDB: row lockers).
//
//  - forget_semaphore is refused while a permit is live, also a row locker's (a row
//    lock, not a row of the lock table), and atomically with the grants racing it.
//  - A semaphore that read N earlier never hands out a permit once N was forgotten and
//    stored anew, smaller: every permit handed out is one of the stored N.
//  - The table and row strategies of one name exclude each other (through `sqlock run`).
//  - A waiting acquire on a row locker whose pool is lent out honours its wait and its
//    cancel token.
//
// Concurrency is judged from records of what each thread held (taken after its acquire
// returned and before its release), never from timings; waits for an event are bounded
// polls with generous limits.
#include "test_env.hpp"
#ifdef SQLOCK_CLI
#include "cli_process.hpp"
#endif

#include <soci/soci.h>
#include <sqlock/sqlock.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <future>
#include <mutex>
#include <optional>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

namespace {

using namespace std::chrono_literals;
using namespace sqlock_test;
using sqlock::engine;
using sqlock::lease;
using sqlock::locker_options;
using clock_type = std::chrono::steady_clock;

/// A permit as a holder saw it: handed out at `from` (after its acquire returned), given
/// back at `to` (before its release was called), by a semaphore of `permits`.
struct held_permit {
    clock_type::time_point from, to;
    int permits = 0;
};

/// The first moment at which more permits were held than the smallest N among them; empty if none.
std::optional<std::string> overlap(std::vector<held_permit> const& record) {
    for (auto const& p : record) {
        // At p.from: every permit held then (p itself included).
        int live = 0;
        int smallest = p.permits;
        for (auto const& q : record)
            if (q.from <= p.from && p.from < q.to) {
                ++live;
                smallest = std::min(smallest, q.permits);
            }
        if (live > smallest)
            return std::to_string(live) + " permits held at once, one of them from a semaphore of " +
                   std::to_string(smallest);
    }
    return std::nullopt;
}

class SemaphoreSafety : public engine_fixture {
protected:
    sqlock::locker table(locker_options o = {}) { return sqlock::table_locker(*db_, std::move(o)); }
    virtual sqlock::locker permits_locker() { return table(); }

    // Item 5: a semaphore of 4 that read N (its first acquire) keeps no right to grant
    // once N was forgotten and stored as 1: each of its permits is refused (usage_error)
    // or busy, and the record never shows more than one live permit.
    void cached_number_not_granted_past_a_forget() {
        auto const name = n("cached");
        sqlock::semaphore four(permits_locker(), 4);
        {
            auto first = four.try_acquire(name);  // reads and stores N = 4
            ASSERT_TRUE(first);
        }
        ASSERT_TRUE(sqlock::forget_semaphore(*db_, name));
        sqlock::semaphore one(permits_locker(), 1);
        auto only = one.try_acquire(name);  // stores N = 1
        ASSERT_TRUE(only) << "the semaphore of 1 was refused after the forget";
        std::vector<lease> extra;
        for (int i = 0; i < 4; ++i) {
            try {
                if (auto got = four.try_acquire(name)) extra.push_back(std::move(*got));
            } catch (sqlock::usage_error const& e) {
                EXPECT_NE(std::string(e.what()).find("has 1 permits"), std::string::npos) << e.what();
            }
        }
        EXPECT_TRUE(extra.empty()) << 1 + extra.size()
                                   << " live permits under a stored N of 1: a semaphore that read N = 4 before "
                                      "the forget kept granting";
        try {
            (void)four.acquire(name, 300ms);
            ADD_FAILURE() << "a waiting acquire of the semaphore of 4 got a permit under a stored N of 1";
        } catch (sqlock::usage_error const&) {
        } catch (sqlock::timeout const&) {}
    }

    // Item 4 (and 5) under load: holders of a semaphore of 2 take and give back permits
    // while another thread forgets the name and, each time the forget succeeds, takes a
    // permit with a semaphore of 1 and forgets again. Every permit handed out is recorded;
    // more permits at once than the smallest N among them is a violation.
    void forget_racing_grants(std::chrono::milliseconds run_for) {
        auto const name = n("race");
        std::mutex m;
        std::vector<held_permit> record;
        std::atomic<int> forgets{0}, refusals{0}, grants{0};
        std::atomic<bool> stop{false};
        std::vector<std::string> errors;
        auto note = [&](std::string const& e) {
            std::lock_guard lock(m);
            if (errors.size() < 5) errors.push_back(e);
        };
        auto hold = [&](sqlock::semaphore& sem) {
            try {
                auto got = sem.try_acquire(name);
                if (!got) return;
                auto const from = clock_type::now();
                ++grants;
                std::this_thread::sleep_for(2ms);
                auto const to = clock_type::now();
                got->release();
                std::lock_guard lock(m);
                record.push_back({from, to, sem.permits()});
            } catch (sqlock::usage_error const&) {  // the other N is stored now
            } catch (std::exception const& e) {
                note(e.what());
            }
        };
        std::vector<std::thread> threads;
        for (int t = 0; t < 3; ++t)
            threads.emplace_back([&] {
                sqlock::semaphore two(permits_locker(), 2);
                while (!stop) {
                    hold(two);
                    std::this_thread::sleep_for(3ms);  // leave the forgets a moment with no permit held
                }
            });
        threads.emplace_back([&] {
            sqlock::semaphore one(permits_locker(), 1);
            while (!stop) {
                try {
                    if (!sqlock::forget_semaphore(*db_, name)) continue;
                    ++forgets;
                    hold(one);
                    (void)sqlock::forget_semaphore(*db_, name);
                } catch (sqlock::usage_error const&) {
                    ++refusals;
                } catch (std::exception const& e) {
                    note(e.what());
                }
            }
        });
        std::this_thread::sleep_for(run_for);
        stop = true;
        for (auto& t : threads) t.join();
        EXPECT_TRUE(errors.empty()) << errors.front();
        EXPECT_GT(forgets.load(), 0) << "no forget succeeded: the race was not run";
        EXPECT_GT(grants.load(), 0) << "no permit was granted: the race was not run";
        auto const bad = overlap(record);
        EXPECT_FALSE(bad) << *bad << " (" << forgets << " forgets, " << refusals << " refused, " << grants
                          << " grants)";
    }
};

TEST_P(SemaphoreSafety, ACachedNumberIsNotGrantedPastAForgetAndASmallerNumber) {
    cached_number_not_granted_past_a_forget();
}

TEST_P(SemaphoreSafety, ForgetRacingGrantsNeverLetsTwoNumbersOverlap) { forget_racing_grants(4s); }

TEST_P(SemaphoreSafety, ForgetIsRefusedWhileATablePermitIsHeld) {
    auto const name = n("forget-table");
    sqlock::semaphore sem(table(), 2);
    auto a = sem.try_acquire(name);
    ASSERT_TRUE(a);
    EXPECT_THROW((void)sqlock::forget_semaphore(*db_, name), sqlock::usage_error);
    a->release();
    EXPECT_TRUE(sqlock::forget_semaphore(*db_, name));
    EXPECT_FALSE(sqlock::forget_semaphore(*db_, name)) << "nothing left to forget";
}

INSTANTIATE_TEST_SUITE_P(Engines, SemaphoreSafety, ::testing::Values(engine::postgresql, engine::mysql, engine::sqlite),
                         engine_param_name{});

// ---- row lockers (servers only: a semaphore cannot use SQLite's row lock) ----

class SemaphoreSafetyServer : public SemaphoreSafety {
protected:
    sqlock::locker permits_locker() override { return sqlock::row_locker(*db_); }

    // Sessions of this database waiting for a lock in the engine.
    long long lock_waiters() {
        long long count = 0;
        if (e_ == engine::postgresql)
            *raw_ << "SELECT COUNT(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                     " AND datname = current_database()",
                soci::into(count);
        else
            *raw_ << "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE INFO LIKE '%FOR UPDATE%'"
                     " AND ID <> CONNECTION_ID()",
                soci::into(count);
        return count;
    }
};

TEST_P(SemaphoreSafetyServer, ForgetIsRefusedWhileRowLockerPermitsAreHeld) {
    auto const name = n("forget-row");
    sqlock::semaphore sem(permits_locker(), 3);
    std::vector<lease> held;
    for (int i = 0; i < 3; ++i) {
        auto got = sem.try_acquire(name);
        ASSERT_TRUE(got) << "permit " << i << " of 3";
        held.push_back(std::move(*got));
    }
    try {
        bool const forgot = sqlock::forget_semaphore(*db_, name);
        ADD_FAILURE() << "forget_semaphore returned " << forgot << " while 3 row-locker permits were held";
    } catch (sqlock::usage_error const& e) {
        EXPECT_NE(std::string(e.what()).find("3 permit(s) held"), std::string::npos) << e.what();
    }
    sqlock::semaphore one(permits_locker(), 1);
    EXPECT_THROW((void)one.try_acquire(name), sqlock::usage_error) << "N = 3 must still be stored";
    held.clear();
    EXPECT_TRUE(sqlock::forget_semaphore(*db_, name)) << "all permits were released";
}

TEST_P(SemaphoreSafetyServer, ACachedNumberIsNotGrantedPastAForgetAndASmallerNumber) {
    cached_number_not_granted_past_a_forget();
}

TEST_P(SemaphoreSafetyServer, ForgetRacingGrantsNeverLetsTwoNumbersOverlap) { forget_racing_grants(4s); }

// The table and row strategies of one name exclude each other: a permit of one is
// never handed out while a permit of the other is held.
TEST_P(SemaphoreSafetyServer, TableAndRowPermitsOfOneNameExcludeEachOther) {
    auto const name = n("strategies");
    sqlock::semaphore by_table(table(), 1);
    sqlock::semaphore by_row(sqlock::row_locker(*db_), 1);
    {
        auto t = by_table.try_acquire(name);
        ASSERT_TRUE(t);
        EXPECT_FALSE(by_row.try_acquire(name)) << "a row permit beside a held table permit of a semaphore of 1";
    }
    auto r = by_row.try_acquire(name);
    ASSERT_TRUE(r) << "the row permit once the table permit was released";
    EXPECT_FALSE(by_table.try_acquire(name)) << "a table permit beside a held row permit of a semaphore of 1";
    r->release();
    EXPECT_TRUE(by_table.try_acquire(name));
}

// Item 9: a semaphore's waiting acquire on a row locker whose only pooled connection is
// lent to a waiter parked in the engine's queue: acquire(200 ms) throws timeout, and an
// acquire for a minute returns `cancelled` once its token is requested, each long before
// the store's pool_wait (30 s). A guard of 10 s bounds each.
TEST_P(SemaphoreSafetyServer, AWaitingPermitOnALentPoolHonoursItsWaitAndCancel) {
    sqlock::store one(url_, {.pool_size = 1});  // pool_wait: the default 30 s
    auto const held = n("lent-held"), sem_name = n("lent-sem");
    sqlock::locker waiter_locker = sqlock::row_locker(one, {.ttl = 30s});
    sqlock::semaphore sem(sqlock::row_locker(one, {.ttl = 30s}), 2);
    (void)waiter_locker.acquire(held, 5s);  // the rows exist: first use needs no second connection
    { auto warm = sem.acquire(sem_name, 5s); }
    lease h = sqlock::row_locker(*db_).acquire(held, 5s);
    auto const before = lock_waiters();

    std::stop_source stop_waiter;
    auto waiting = std::async(std::launch::async, [&]() -> std::string {
        try {
            (void)waiter_locker.acquire(held, 60s, stop_waiter.get_token());
            return "acquired";
        } catch (sqlock::cancelled const&) {
            return "cancelled";
        } catch (std::exception const& e) {
            return e.what();
        }
    });
    bool const parked = eventually([&] { return lock_waiters() > before; }, 20s);
    if (!parked) {
        stop_waiter.request_stop();
        ADD_FAILURE() << "the waiter: " << waiting.get();
    }
    ASSERT_TRUE(parked) << "the waiter did not park in the engine's lock queue (" << before << " waiters before, "
                        << lock_waiters() << " now)";

    auto timed = std::async(std::launch::async, [&]() -> std::string {
        try {
            (void)sem.acquire(sem_name, 200ms);
            return "acquired";
        } catch (sqlock::timeout const&) {
            return "timeout";
        } catch (std::exception const& e) {
            return e.what();
        }
    });
    bool const timed_returned = timed.wait_for(10s) == std::future_status::ready;
    std::stop_source stop_permit;
    std::optional<std::future<std::string>> cancelled;
    if (timed_returned) {
        cancelled = std::async(std::launch::async, [&]() -> std::string {
            try {
                (void)sem.acquire(sem_name, 60s, stop_permit.get_token());
                return "acquired";
            } catch (sqlock::cancelled const&) {
                return "cancelled";
            } catch (std::exception const& e) {
                return e.what();
            }
        });
        std::this_thread::sleep_for(300ms);
        stop_permit.request_stop();
    }
    bool const cancel_returned = cancelled && cancelled->wait_for(10s) == std::future_status::ready;
    stop_waiter.request_stop();
    EXPECT_TRUE(timed_returned) << "acquire(200 ms) of a permit still blocked after 10 s (the pool's wait)";
    if (timed_returned) {
        EXPECT_EQ(timed.get(), "timeout");
    }
    if (cancelled) {
        EXPECT_TRUE(cancel_returned) << "a cancelled acquire of a permit still blocked 10 s after its cancel";
        EXPECT_EQ(cancelled->get(), "cancelled");
    }
    EXPECT_EQ(waiting.get(), "cancelled");
}

#ifdef SQLOCK_CLI

// Item 6 through the command: `sqlock run --limit 1 --strategy table` and `--strategy row`
// on one name, started together, each waiting: their commands never run at the same time.
// Each command marks that it runs, looks for the other's mark, holds a moment, unmarks.
TEST_P(SemaphoreSafetyServer, RunWithTableAndRowStrategiesOfOneNameNeverHoldsBoth) {
    auto const name = n("run-strategies");
    temp_dir files;
    auto const both = files.path() / "both";
    auto run = [&](std::string const& strategy, std::string const& other) {
        return std::make_unique<cli_process>(
            std::vector<std::string>{"run", "--db", url_, "--name", name, "--limit", "1", "--strategy", strategy,
                                     "--wait", "2m", "--", "sh", "-c",
                                     "touch \"$1\"; if [ -e \"$2\" ]; then touch \"$3\"; fi; sleep 2; "
                                     "if [ -e \"$2\" ]; then touch \"$3\"; fi; rm \"$1\"",
                                     "sh", (files.path() / strategy).string(), (files.path() / other).string(),
                                     both.string()},
            files.path());
    };
    for (int round = 0; round < 2; ++round) {
        auto by_table = run("table", "row");
        auto by_row = run("row", "table");
        auto t = by_table->wait(180s);
        auto r = by_row->wait(180s);
        EXPECT_EQ(t.code(), 0) << t.describe();
        EXPECT_EQ(r.code(), 0) << r.describe();
        EXPECT_FALSE(fs::exists(both)) << "both strategies held permit of a semaphore of 1 at once (round " << round
                                       << ")";
    }
}

#endif

INSTANTIATE_TEST_SUITE_P(Engines, SemaphoreSafetyServer, ::testing::Values(engine::postgresql, engine::mysql),
                         engine_param_name{});

}  // namespace
