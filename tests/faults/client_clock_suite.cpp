// sqlock reliability battery — C05: a client whose clock is off (P1, P2, P12), and the SQLite limit.
//
// A worker process (sqlock_test_worker skew) whose clock runs 90 s ahead tries to take a lock this
// test holds with a 30 s TTL:
//   - Engines/ClientClock.ClockAheadCannotTakeOverALiveLease/{postgresql,mysql} (fault-smoke): the
//     worker runs under libfaketime (tests/skewed_process.hpp: with a fallback if it hangs); expiry is the server's
//     clock, so the worker waits and times out, and this test's lease stays held. A library comparing the client's
//     clock with expires_at (ShedLock #231) would fail here.
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
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

using namespace sqlock_test;
using namespace std::chrono_literals;
using sqlock::lease;
using sqlock::lease_state;

constexpr auto ahead = 90s;

class ClientClock : public engine_fixture {};

TEST_P(ClientClock, ClockAheadCannotTakeOverALiveLease) {
    if (e_ == engine::sqlite) GTEST_SKIP() << "SQLite's database clock is the client's: see Engines/Characterization.*";
    fs::path const faketime = libfaketime_path();
    if (client_clock_mover() == clock_mover::libfaketime && !fs::exists(faketime)) {
        if (in_ci()) FAIL() << faketime << " is missing and CI is set: run scripts/deps.sh --servers";
        GTEST_SKIP() << faketime << " is missing (not CI, so skipping): install faketime (scripts/deps.sh --servers)";
    }
    auto holder = sqlock::table_locker(*db_, {.ttl = 30s});
    std::string const prefix = n("clock-ahead-");
    lease held = holder.acquire(prefix + "0", 10s);

    auto skewed = run_with_clock_ahead(
        [&](int) {
            return std::vector<std::string>{SQLOCK_TEST_WORKER, "skew", url_, prefix, "1"};
        },
        ahead, 60s);
    RecordProperty("clock_mover", skewed.clock_mover);
    auto const& r = skewed.run;
    ASSERT_TRUE(r.finished) << "the skewed worker still ran after 60 s (it waits 10 s), killed; it was:\n"
                            << r.diagnosis;
    EXPECT_FALSE(r.ok()) << "a client 90 s ahead got a lock held for another 30 s: expiry was judged by the "
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

// C06: a holder's wall clock jumps an hour ahead and then an hour back while its watchdog renews a
// 2 s lease (sqlock_test_worker hold). Renewals are scheduled on the steady clock, so neither jump
// may lose the lease (an early "lost", a missed renewal) nor make the watchdog renew in a storm.
// Checked from outside: the worker's own report (held to the end, its renewal count) and the row,
// read every 100 ms from this process, with the database's clock: the worker's token, never
// expired. PostgreSQL and MariaDB only: SQLite's database clock is the holder's own clock, so a jump
// moves expiry itself (the documented one-host-clock limit, see Characterization below).
TEST_P(ClientClock, WallClockJumpsDoNotMoveTheRenewalSchedule) {
    if (e_ == engine::sqlite)
        GTEST_SKIP() << "SQLite's database clock is the client's own: see Engines/Characterization.*";
    fs::path const faketime = libfaketime_path();
    if (client_clock_mover() == clock_mover::libfaketime && !fs::exists(faketime)) {
        if (in_ci()) FAIL() << faketime << " is missing and CI is set: run scripts/deps.sh --servers";
        GTEST_SKIP() << faketime << " is missing (not CI, so skipping): install faketime (scripts/deps.sh --servers)";
    }
    constexpr auto ttl = 2s;
    constexpr auto hold_for = 7s;
    constexpr auto jump = std::chrono::seconds(std::chrono::hours(1));

    struct outcome {
        bool hung = false;         // no "held" within 30 s, or not exited 60 s after: the worker hung
        std::string diagnosis;     // what the hung worker was doing
        bool jumped_back = false;  // both jumps were made while the worker held the lease
        int status = 0;
        std::string out, err;
        std::vector<std::string> bad_samples;  // row reads that were not the worker's live row
    };
    auto run_once = [&](clock_mover mover, std::string const& name) {
        outcome o;
        temp_dir files;
        fs::path const clock_file = files.path() / "clock";
        set_clock_file(mover, clock_file, 0s);
        spawn_file_actions actions;
        actions.capture_to_files(files.path() / "out", files.path() / "err");
        pid_t const pid = spawn_process({SQLOCK_TEST_WORKER, "hold", url_, name,
                                         std::to_string(std::chrono::milliseconds(ttl).count()),
                                         std::to_string(std::chrono::milliseconds(hold_for).count())},
                                        clock_file_environment(mover, clock_file), actions.get());
        bool exited = false;
        auto reap = [&] { return exited || (exited = ::waitpid(pid, &o.status, WNOHANG) == pid); };
        if (!eventually([&] { return reap() || slurp(files.path() / "out").starts_with("held "); }, 30s)) {
            o.hung = true;
            o.diagnosis = describe_running_process(pid);
            ::kill(pid, SIGKILL);
            ::waitpid(pid, &o.status, 0);
            return o;
        }
        long long token = 0;
        std::istringstream(slurp(files.path() / "out").substr(5)) >> token;
        auto const held_at = std::chrono::steady_clock::now();
        bool jumped_ahead = false;
        while (!reap() && std::chrono::steady_clock::now() - held_at < 60s) {
            auto const since = std::chrono::steady_clock::now() - held_at;
            if (!jumped_ahead && since >= 1500ms) {
                set_clock_file(mover, clock_file, jump);
                jumped_ahead = true;
            }
            if (jumped_ahead && !o.jumped_back && since >= 4000ms) {
                set_clock_file(mover, clock_file, -jump);
                o.jumped_back = true;
            }
            auto r = row(name);
            bool const releasing = slurp(files.path() / "out").find("renewed ") != std::string::npos;
            if (!releasing && (!r || r->token != token || !r->live()))
                o.bad_samples.push_back(!r ? "no row"
                                           : "token " + std::to_string(r->token) + (r->live() ? "" : ", expired"));
            std::this_thread::sleep_for(100ms);
        }
        if (!exited) {  // still running 60 s after it held: hung (its hold ends at 7 s)
            o.hung = true;
            o.diagnosis = describe_running_process(pid);
            ::kill(pid, SIGKILL);
            ::waitpid(pid, &o.status, 0);
        }
        o.out = slurp(files.path() / "out");
        o.err = slurp(files.path() / "err");
        return o;
    };

    clock_mover mover = client_clock_mover();
    outcome o = run_once(mover, n("clock-jumps-1"));
    if (o.hung && mover == clock_mover::libfaketime) {
        report_libfaketime_hang("the holder (FAKETIME_TIMESTAMP_FILE)", o.diagnosis);
        mover = clock_mover::system_clock_preload;
        o = run_once(mover, n("clock-jumps-2"));
    }
    ASSERT_FALSE(o.hung) << "the holder hung under the " << to_string(mover)
                         << " (no lock within 30 s, or no exit): " << o.out << "\n"
                         << o.diagnosis;
    RecordProperty("clock_mover", to_string(mover));
    ASSERT_TRUE(o.jumped_back) << "the holder ended before both clock jumps were made: " << o.out << o.err;
    EXPECT_TRUE(WIFEXITED(o.status) && WEXITSTATUS(o.status) == 0)
        << "the holder (" << to_string(mover) << ") did not keep its lease through the jumps: " << exit_text(o.status)
        << "; it said: " << o.out << o.err << o.diagnosis;
    EXPECT_EQ(o.bad_samples, std::vector<std::string>{}) << "the row was not the holder's live row at every read";
    long long renewed = -1;
    auto const at = o.out.find("renewed ");
    if (at != std::string::npos) std::istringstream(o.out.substr(at + 8)) >> renewed;
    // A 2 s lease kept 7 s needs at least 3 renewals; on schedule (every TTL/3) about 10; a storm, hundreds.
    EXPECT_GE(renewed, 3) << o.out;
    EXPECT_LE(renewed, 60) << "the watchdog renewed in a storm after a wall-clock jump";
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

    auto r = run_in_env({SQLOCK_TEST_WORKER, "skew", url_, prefix, "1",
                         std::to_string(std::chrono::milliseconds(ahead).count())},
                        environment_with({}), 60s, describe_running_process);
    ASSERT_TRUE(r.finished) << "the worker still ran after 60 s (it waits 10 s at most), killed; it was:\n"
                            << r.diagnosis;

    // The worker got the lock (and released it) while this lease, 30 s long, was still ours.
    ASSERT_TRUE(r.ok()) << "expected the limit to show: a SQLite process 90 s ahead takes over a live lease; "
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
