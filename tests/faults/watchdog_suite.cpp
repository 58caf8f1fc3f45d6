// sqlock reliability battery — C04: a stalled worker whose watchdog still runs (P10).
//
// Engines/Watchdog.<Test>/<engine>, table lock and row lock: the worker never releases (it is
// "stuck"), the watchdog keeps renewing, and locker_options::max_hold bounds how long: the
// watchdog stops, the lease is lost (stop token, on_lost) and another locker gets the lock.
// Without max_hold the same stuck worker keeps the lock: the test shows both, so the bound is
// what frees the lock, not the TTL. Ordered by what happened (renewals counted, the loss
// signalled, the next grant's token), never by a sleep's length.
#include "test_env.hpp"

#include <atomic>
#include <chrono>
#include <stop_token>

namespace {

using namespace sqlock_test;
using namespace std::chrono_literals;
using sqlock::lease;
using sqlock::lease_state;
using sqlock::locker;
using sqlock::locker_options;
using steady = std::chrono::steady_clock;

enum class strategy { table, row };

class Watchdog : public engine_fixture {
protected:
    locker make(strategy s, locker_options o) {
        return s == strategy::table ? sqlock::table_locker(*db_, std::move(o)) : sqlock::row_locker(*db_, std::move(o));
    }

    // A stuck worker on `s`: acquires and never releases; max_hold bounds it. Returns after
    // checking that the lease was renewed before the bound, was lost because of it, and that
    // another locker then got the lock with a greater token.
    void stuck_worker_is_bounded(strategy s) {
        if (e_ == engine::sqlite && s == strategy::row) GTEST_SKIP() << "SQLite's row lock is the whole file";
        std::atomic<int> lost_calls{0};
        locker stuck =
            make(s,
                 {.ttl = 400ms, .max_hold = 1200ms, .on_lost = [&](std::string_view, std::int64_t) { ++lost_calls; }});
        locker other = make(s, {.ttl = 400ms});
        std::string const name = n(s == strategy::table ? "stuck-table" : "stuck-row");

        lease held = stuck.acquire(name, 10s);
        auto const token = held.token();
        // The loss must come; 60 s is only a guard against hanging forever on a broken build.
        auto const guard = steady::now() + 60s;
        while (!held.stop_token().stop_requested() && steady::now() < guard) std::this_thread::sleep_for(20ms);
        ASSERT_TRUE(held.stop_token().stop_requested())
            << "a lease with max_hold 1200 ms was still held after 60 s: the watchdog kept renewing it";
        EXPECT_EQ(held.state(), lease_state::lost);
        EXPECT_EQ(lost_calls.load(), 1);
        EXPECT_GE(stuck.stats().renewed, 1u) << "the watchdog never renewed: the loss proves nothing about max_hold";

        lease next = other.acquire(name, 30s);
        EXPECT_GT(next.token(), token) << "the next holder's token must be greater than the stuck holder's";
        EXPECT_THROW(held.renew(), sqlock::lease_lost) << "the stuck lease must stay lost";
    }

    // The negative control: without max_hold, the same stuck worker keeps the lock across many TTLs.
    void unbounded_stuck_worker_keeps_the_lock(strategy s) {
        if (e_ == engine::sqlite && s == strategy::row) GTEST_SKIP() << "SQLite's row lock is the whole file";
        locker stuck = make(s, {.ttl = 400ms});
        locker other = make(s, {.ttl = 400ms});
        std::string const name = n("unbounded");
        lease held = stuck.acquire(name, 10s);
        // Wait until the watchdog has renewed the lease well past max_hold's worth of TTLs.
        auto const guard = steady::now() + 60s;
        while (stuck.stats().renewed < 6 && steady::now() < guard) std::this_thread::sleep_for(20ms);
        ASSERT_GE(stuck.stats().renewed, 6u);
        EXPECT_EQ(held.state(), lease_state::held);
        EXPECT_FALSE(other.try_acquire(name).has_value());
        held.release();
    }
};

TEST_P(Watchdog, StuckTableLockHolderLosesTheLeaseAtMaxHold) { stuck_worker_is_bounded(strategy::table); }
TEST_P(Watchdog, StuckRowLockHolderLosesTheLeaseAtMaxHold) { stuck_worker_is_bounded(strategy::row); }
TEST_P(Watchdog, WithoutMaxHoldAStuckHolderKeepsTheLock) { unbounded_stuck_worker_keeps_the_lock(strategy::table); }

TEST_P(Watchdog, MaxHoldBelowTheTtlIsAUsageError) {
    EXPECT_THROW((void)sqlock::table_locker(*db_, {.ttl = 1s, .max_hold = 500ms}), sqlock::usage_error);
    EXPECT_THROW((void)sqlock::table_locker(*db_, {.ttl = 1s, .max_hold = -1ms}), sqlock::usage_error);
    EXPECT_NO_THROW((void)sqlock::table_locker(*db_, {.ttl = 1s, .max_hold = 1s}));
    EXPECT_NO_THROW((void)sqlock::table_locker(*db_, {.ttl = 1s, .max_hold = 0ms}));
}

INSTANTIATE_TEST_SUITE_P(Engines, Watchdog, ::testing::Values(engine::postgresql, engine::mysql, engine::sqlite),
                         engine_param_name{});

}  // namespace
