// sqlock reliability battery — C05: a client whose clock is off (P1, P2, P12), and the SQLite limit.
//
// A worker process (sqlock_test_worker skew) whose clock runs 90 s ahead tries to take a lock this
// test holds with a 30 s TTL:
//   - Engines/ClientClock.ClockAheadCannotTakeOverALiveLease/{postgresql,mysql} (fault-smoke): the
//     worker runs under libfaketime (tests/skewed_process.hpp: with a fallback if it hangs); expiry is the server's clock, so the worker waits and times
//     out, and this test's lease stays held. A library comparing the client's clock with
//     expires_at (ShedLock #231) would fail here.
//   - Engines/Characterization.SqliteProcessWithAClockAheadTakesOverALiveLease/sqlite (characterization): on
//     SQLite the database's clock IS the calling process's (a VFS shifts the worker's SQLite clock
//     90 s ahead), so the worker sees the row as expired and takes it over while this test still
//     holds it. The test asserts that double grant happens: it documents why SQLite needs one host
//     clock for every process (docs/guarantees.md, "Not promised").
#include "skewed_process.hpp"
#include "test_env.hpp"
#include "test_process.hpp"

#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <string>
#include <vector>

namespace {

using namespace sqlock_test;
using namespace std::chrono_literals;
using sqlock::lease;
using sqlock::lease_state;

constexpr auto ahead = 90s;

// Runs `sqlock_test_worker skew URL NAME_PREFIX 1 [SHIFT_MS]` (it acquires NAME_PREFIX0, waiting up
// to 10 s, then releases it) with this process's environment; killed after 60 s.
bounded_run run_worker(std::vector<std::string> args) { return run_bounded(std::move(args), environment_with({}, {}), 60s); }

class ClientClock : public engine_fixture {};

TEST_P(ClientClock, ClockAheadCannotTakeOverALiveLease) {
    if (e_ == engine::sqlite) GTEST_SKIP() << "SQLite's database clock is the client's: see Engines/Characterization.*";
    fs::path const faketime = libfaketime_path();
    if (!fs::exists(faketime)) {
        if (in_ci()) FAIL() << faketime << " is missing and CI is set: run scripts/deps.sh --servers";
        GTEST_SKIP() << faketime << " is missing (not CI, so skipping): install faketime (scripts/deps.sh --servers)";
    }
    auto holder = sqlock::table_locker(*db_, {.ttl = 30s});
    std::string const prefix = n("clock-ahead-");
    lease held = holder.acquire(prefix + "0", 10s);

    auto skewed = run_with_clock_ahead(
        [&](int) { return std::vector<std::string>{SQLOCK_TEST_WORKER, "skew", url_, prefix, "1"}; }, ahead, 60s);
    RecordProperty("clock_mover", skewed.clock_mover);
    auto const& r = skewed.run;
    ASSERT_TRUE(r.finished) << "the skewed worker still ran after 60 s (it waits 10 s), killed; it was:\n"
                            << r.diagnosis;
    EXPECT_FALSE(r.exited_ok()) << "a client 90 s ahead got a lock held for another 30 s: expiry was judged by the "
                                   "client's clock; worker stdout: "
                                << r.out;
    EXPECT_NE(r.err.find("timeout"), std::string::npos)
        << "the skewed worker should have waited its 10 s and timed out; it said: " << r.err;
    EXPECT_EQ(held.state(), lease_state::held);
    auto row_now = row(prefix + "0");
    ASSERT_TRUE(row_now.has_value());
    EXPECT_EQ(row_now->token, held.token()) << "the row changed hands";
    held.release();
}

INSTANTIATE_TEST_SUITE_P(Engines, ClientClock, ::testing::Values(engine::postgresql, engine::mysql, engine::sqlite),
                         engine_param_name{});

// The documented limit, asserted: on SQLite a process whose clock is ahead takes over a live lease.
class Characterization : public engine_fixture {};

TEST_P(Characterization, SqliteProcessWithAClockAheadTakesOverALiveLease) {
    auto holder = sqlock::table_locker(*db_, {.ttl = 30s});
    std::string const prefix = n("sqlite-clock-ahead-");
    lease held = holder.acquire(prefix + "0", 10s);
    auto const token = held.token();

    auto r = run_worker(
        {SQLOCK_TEST_WORKER, "skew", url_, prefix, "1", std::to_string(std::chrono::milliseconds(ahead).count())});
    ASSERT_TRUE(r.finished) << "the worker still ran after 60 s (it waits 10 s at most), killed; it was:\n"
                            << r.diagnosis;

    // The worker got the lock (and released it) while this lease, 30 s long, was still ours.
    ASSERT_TRUE(r.exited_ok()) << "expected the limit to show: a SQLite process 90 s ahead takes over a live lease; "
                                  "the worker said: "
                               << r.err;
    EXPECT_EQ(held.state(), lease_state::held) << "this lease was still valid by its own clock when the worker took it";
    // Our next renewal finds the row gone: the loss is detected, late.
    EXPECT_THROW(held.renew(), sqlock::lease_lost);
    EXPECT_EQ(held.state(), lease_state::lost);
    // And the worker's grant had a greater token (P3 holds even here).
    auto next = sqlock::table_locker(*db_).acquire(prefix + "0", 10s);
    EXPECT_GT(next.token(), token);
}

INSTANTIATE_TEST_SUITE_P(Engines, Characterization, ::testing::Values(engine::sqlite), engine_param_name{});

}  // namespace
