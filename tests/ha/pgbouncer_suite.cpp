// sqlock behind PgBouncer 1.18 (scripts/ha/pgbouncer.sh, fixture ha_pgbouncer; docs/ha/pgbouncer.md).
//   PgBouncer.SessionPooling*       the basics through pool_mode=session: table lock, waiter wake-up, row lock,
//                                   fence, reaper                                             ha;fault-smoke
//   PgBouncer.TransactionPooling*   pool_mode=transaction is found and refused, before anything is written;
//                                   declared (?pooling=transaction) it is refused without a probe  ha;fault-smoke
//   PgBouncer.SessionCounterStorm   4 worker processes through pool_mode=session, judged by K1 K4 K7 K9 from
//                                   the record (tests/faults/README.md)                       ha;fault-smoke
//   PgBouncer.UncheckedTransactionPoolingBreaks  characterization: with the probe skipped (?pooling=session on
//                                   the transaction pool), the per-connection prepared statements fail   ha
// Every test starts on an empty pool (the script's reset verb: KILL/RESUME on the admin console), so none
// inherits an earlier one's prepared statements, LISTENs or settings.
#include "battery_harness.hpp"
#include "ha_env.hpp"
#include "run_command.hpp"

#include <sqlock/sqlock.hpp>

#include <gtest/gtest.h>
#include <soci/soci.h>

#include <cstdlib>
#include <future>
#include <iostream>

#ifndef SQLOCK_HA_PGBOUNCER_DIR
#error "SQLOCK_HA_PGBOUNCER_DIR (the fixture's SQLOCK_HA_DIR) must be defined by the build"
#endif
#ifndef SQLOCK_HA_PGBOUNCER_SCRIPT
#error "SQLOCK_HA_PGBOUNCER_SCRIPT (scripts/ha/pgbouncer.sh) must be defined by the build"
#endif

namespace {

using namespace std::chrono_literals;
using sqlock_test::random_prefix;

class PgBouncer : public sqlock_test::HaTest {
protected:
    void SetUp() override {
        require_topology(SQLOCK_HA_PGBOUNCER_DIR, "pgbouncer.sh");
        if (sqlock_test::should_stop()) return;
        session_url = var("SQLOCK_HA_PGBOUNCER_SESSION_URL");
        transaction_url = var("SQLOCK_HA_PGBOUNCER_TRANSACTION_URL");
        direct_url = var("SQLOCK_HA_PGBOUNCER_DIRECT_URL");
        auto const reset = sqlock_test::run_command({"/bin/bash", SQLOCK_HA_PGBOUNCER_SCRIPT, "reset"},
                                                    {"SQLOCK_HA_DIR=" SQLOCK_HA_PGBOUNCER_DIR}, 60s);
        ASSERT_TRUE(reset.ok()) << "pgbouncer.sh reset failed: " << reset.err;
        // Every test on tables of its own: nothing an earlier test left can make it pass.
        prefix = "pgb_" + sqlock_test::random_hex(8);
        sqlock::store create(direct_url, {.create_schema = true, .table_prefix = prefix});
    }

    void TearDown() override {
        if (prefix.empty() || direct_url.empty()) return;
        auto s = sqlock_test::raw_session(sqlock::engine::postgresql, direct_url);
        for (auto const* t : {"_locks", "_tokens", "_fences", "_rows", "_majority_tokens", "_identity",
                              "_majority_members", "_semaphores", "_values"})
            *s << "DROP TABLE IF EXISTS " + prefix + t;
    }

    [[nodiscard]] sqlock::store_options options() const {
        return {.pool_size = 4, .create_schema = false, .table_prefix = prefix};
    }

    bool table_exists(std::string const& name) {
        auto s = sqlock_test::raw_session(sqlock::engine::postgresql, direct_url);
        int n = 0;
        *s << "SELECT count(*) FROM pg_tables WHERE tablename = :t", soci::use(name), soci::into(n);
        return n > 0;
    }

    std::string session_url, transaction_url, direct_url, prefix;
};

TEST_F(PgBouncer, SessionPoolingTableLockAndWakeUp) {
    sqlock::store db(session_url, options());
    auto locks = sqlock::table_locker(db, {.ttl = 30s});
    auto const name = random_prefix() + "table";
    auto first = locks.try_acquire(name);
    ASSERT_TRUE(first.has_value());
    EXPECT_FALSE(locks.try_acquire(name).has_value()) << "a second holder through the session pool";
    auto const token = first->token();

    sqlock::store other_db(session_url, options());
    auto other = sqlock::table_locker(other_db, {.ttl = 30s});
    auto waiter = std::async(std::launch::async, [&] { return other.acquire(name, 60s); });
    // The waiter marks the row before it waits (acquire_waiting_sql_): its release then NOTIFYs.
    ASSERT_TRUE(sqlock_test::eventually(
        [&] {
            auto s = sqlock_test::raw_session(sqlock::engine::postgresql, direct_url);
            int marked = 0;
            *s << "SELECT count(*) FROM " + prefix + "_locks WHERE name = :n AND waiters", soci::use(name),
                soci::into(marked);
            return marked == 1;
        },
        30s))
        << "the waiter never marked the row";
    first->release();
    auto second = waiter.get();
    EXPECT_TRUE(second.held());
    EXPECT_GT(second.token(), token);
}

TEST_F(PgBouncer, SessionPoolingRowLockFenceAndReaper) {
    sqlock::store db(session_url, options());
    auto rows = sqlock::row_locker(db, {.ttl = 30s});
    auto const name = random_prefix() + "row";
    auto held = rows.try_acquire(name);
    ASSERT_TRUE(held.has_value());
    EXPECT_FALSE(rows.try_acquire(name).has_value()) << "a second row-lock holder through the session pool";
    held->release();
    auto again = rows.try_acquire(name);
    ASSERT_TRUE(again.has_value());
    again->release();

    // The fence, on the caller's own session through the pool.
    auto app = sqlock_test::raw_session(sqlock::engine::postgresql, session_url);
    sqlock::fence fence(db);
    {
        soci::transaction tx(*app);
        fence.check_and_set(*app, name, 10);
        tx.commit();
    }
    {
        soci::transaction tx(*app);
        EXPECT_THROW(fence.check_and_set(*app, name, 9), sqlock::stale_token);
    }

    // The reaper purges an expired row, and only it.
    auto direct = sqlock_test::raw_session(sqlock::engine::postgresql, direct_url);
    auto const expired = name + "/expired";  // soci::use binds a reference
    *direct << "INSERT INTO " + prefix +
                   "_locks (name, owner, token, created_at, expires_at)"
                   " VALUES (:n, 'gone', 1, now() - interval '1 hour', now() - interval '1 hour')",
        soci::use(expired);
    auto live = sqlock::table_locker(db, {.ttl = 30s}).try_acquire(name + "/live");
    ASSERT_TRUE(live.has_value());
    sqlock::reaper reaper(db, {.grace = 0ms});
    auto const reaped = reaper.reap_once();
    EXPECT_EQ(reaped.purged, 1U);
    int left = 0;
    *direct << "SELECT count(*) FROM " + prefix + "_locks", soci::into(left);
    EXPECT_EQ(left, 1) << "the live lease's row must stay";
}

TEST_F(PgBouncer, TransactionPoolingIsFoundAndRefused) {
    auto const fresh = "pgb_" + sqlock_test::random_hex(8);
    try {
        sqlock::store db(transaction_url, {.create_schema = true, .table_prefix = fresh});
        ADD_FAILURE() << "a store opened through PgBouncer in transaction pooling";
    } catch (sqlock::backend_error const& e) {
        std::string const what = e.what();
        EXPECT_NE(what.find("pooler per transaction or statement"), std::string::npos) << what;
        EXPECT_NE(what.find("pool_mode=session"), std::string::npos) << what;  // what to do
    }
    EXPECT_FALSE(table_exists(fresh + "_locks")) << "the refused store created its tables";
}

TEST_F(PgBouncer, TransactionPoolingDeclaredIsRefused) {
    try {
        sqlock::store db(direct_url + "?pooling=transaction", options());
        ADD_FAILURE() << "a store declared pooling=transaction opened";
    } catch (sqlock::backend_error const& e) {
        EXPECT_NE(std::string(e.what()).find("declared to pool per transaction (pooling=transaction)"),
                  std::string::npos)
            << e.what();
    }
    EXPECT_THROW(sqlock::store(direct_url + "?pooling=sometimes", options()), sqlock::usage_error);
    // Declared session pooling is taken at its word; the direct URL passes the probe without a second connection.
    sqlock::store declared(direct_url + "?pooling=session", options());
    sqlock::store direct(direct_url, options());
    EXPECT_TRUE(sqlock::table_locker(direct).try_acquire(random_prefix() + "direct").has_value());
}

// What the refusal prevents: two stores through the transaction pool, the probe skipped. Each store's
// connections prepare their statements under the same names (SOCI numbers them per connection), on whichever
// server session PgBouncer hands out, so one of them meets the other's or misses its own.
TEST_F(PgBouncer, UncheckedTransactionPoolingBreaks) {
    sqlock::store a(transaction_url + "?pooling=session", options());
    sqlock::store b(transaction_url + "?pooling=session", options());
    auto la = sqlock::table_locker(a, {.ttl = 30s});
    auto lb = sqlock::table_locker(b, {.ttl = 30s});
    std::string failure;
    for (int i = 0; i < 20 && failure.empty(); ++i) {
        try {
            auto x = la.try_acquire(random_prefix() + "a");
            auto y = lb.try_acquire(random_prefix() + "b");
        } catch (sqlock::error const& e) {
            failure = e.what();
        }
    }
    std::cout << "through the transaction pool, unchecked: " << failure << "\n";
    EXPECT_NE(failure.find("prepared statement"), std::string::npos)
        << "expected the per-connection prepared statements to break through transaction pooling; got: '" << failure
        << "'";
}

// K1 (the database's record of grants never overlaps), K4 (the unfenced counter exact), K7 (tokens strictly
// increasing), K9 (typed errors only): 4 worker processes × 2 threads on 2 locks through the session pool.
TEST_F(PgBouncer, SessionCounterStorm) {
    // The harness reads the database it audits from the test servers' variables.
    ::setenv("SQLOCK_TEST_PG_URL", direct_url.c_str(), 1);
    auto const pg2 = direct_url.substr(0, direct_url.rfind('/')) + "/sqlock2";
    ::setenv("SQLOCK_TEST_PG2_URL", pg2.c_str(), 1);
    sqlock_battery::scenario s;
    s.id = "PGB01";
    s.fixed_seed = 2001;
    s.processes = 4;
    s.threads = 2;
    s.locks = 2;
    s.pool_size = 4;
    s.duration = 6s;
    s.ttl = 10s;
    s.acquire_wait = 10s;
    s.min_grants = 50;
    s.worker_url = session_url;
    sqlock_battery::battery_run(s, sqlock::engine::postgresql).run_and_check();
}

}  // namespace
