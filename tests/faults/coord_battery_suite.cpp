// sqlock reliability battery — semaphores, read-write locks and elections (issue 22) under the battery's fault
// nemeses, judged from the record (coord_checkers.hpp, besides K1–K9):
//
//   Engines/CoordFaults.<Test>/<engine>   all engines              fault-smoke;battery
//     SemaphoreUnderFaults   3 workers × 2 threads on one semaphore of 2 permits and one of 3
//     RwLockUnderFaults      3 workers × 2 threads on 2 rw locks, 30 % writers
//     ElectionUnderFaults    3 campaigners × 2 threads on one election, and an observer process (observe_interval
//                            100 ms): K-observe, after each kill -9 of the leader, asks for "none" or the successor
//                            (a greater term) and for the successor within 20 observe intervals of its grant
//   Engines/CoordFaultsRow.SemaphoreRowLockUnderFaults/<engine>   PostgreSQL, MariaDB   fault-smoke;battery
//     the semaphore on the row locker (each permit a slot row locked by an open transaction)
//   each under nemesis mixed_faults every 1–2 s: kill -9 of a holder (restarted 0.5 s later with new owners),
//   SIGSTOP of a holder for 2 s (past the 1 s TTL), a holder's server session ended (PostgreSQL, MariaDB), with a
//   reaper every 500 ms.
//   Engines/CoordServerCrash.SemaphoreRwLockElection/<engine>   PostgreSQL, MariaDB; a private server
//                                                               fault-smoke;battery;crash (serial)
//     the three kinds in turn, the same load while the whole server is killed with SIGKILL (twice) and restarted
//
// Asserted: K1 on the audit (renames of readers' rows made explicit by audit.hpp), K1-reap-coord, K3 (fenced
// writes of writers, leaders and permit holders, each permit slot its own fence), K5, K7, K8, K9, and the kind's
// checker: K1-permits, K-rw, K-election (and K-observe). K2 and K4 are reported: a stopped holder may overlap its
// successor, which is what fencing is for.
//
// Fixed seeds in CI; SQLOCK_SOAK=1 runs random seeds and 10× durations; a failure prints its replay line:
//     SQLOCK_BATTERY_SEED=<seed> bash scripts/with-servers.sh build/tests/faults/sqlock_coord_battery_tests
//     --gtest_filter='Engines/CoordFaults.<Test>/<engine>'
#include "battery_harness.hpp"
#include "coord_checkers.hpp"
#include "private_server.hpp"

#include <gtest/gtest.h>

namespace {

using namespace std::chrono_literals;
using namespace sqlock_battery;
using sqlock::engine;

constexpr long long observe_ms = 100;

/// The family: 3 workers × 2 threads, TTL 1 s, holds 50–300 ms, a reaper; the kind's checks.
scenario coord(std::string id, std::uint64_t seed, std::string const& kind) {
    scenario s;
    s.id = std::move(id);
    s.fixed_seed = seed;
    s.processes = 3;
    s.threads = 2;
    s.locks = 1;
    s.duration = 6s;
    s.ttl = 1s;
    s.acquire_wait = 2s;
    s.hold_min = 50ms;
    s.hold_max = 300ms;
    s.think_max = 30ms;
    s.reaper = true;
    s.reaper_interval = 500ms;
    s.worker_env = {"SQLOCK_BATTERY_KIND=" + kind, "SQLOCK_BATTERY_OBSERVE_MS=" + std::to_string(observe_ms)};
    s.k2 = false;
    s.k4 = false;
    s.min_grants = 10;
    // K1 on the audit with the readers' renames and the permit slots: the harness's K1-reap matches a delete's row
    // name with the history's, which names the user's name; K1-reap-coord folds the names.
    s.k1 = kind == "election";
    s.coordination = coordination_checks{kind};
    return s;
}

scenario with_faults(scenario s) {
    s.nemesis = nemesis_kind::mixed_faults;
    s.tag_connections = true;
    s.interval_min = 1s;
    s.interval_max = 2s;
    s.stop_for = 2s;
    s.restart_delay = 500ms;
    return s;
}

/// One semaphore of `permits` (every process agrees on N: a caller with another N is refused).
scenario semaphore_load(scenario s, int permits) {
    s.worker_env.push_back("SQLOCK_BATTERY_PERMITS=" + std::to_string(permits));
    s.coordination->permits = permits;
    return s;
}

scenario rw_load(scenario s) {
    s.locks = 2;
    s.worker_env.push_back("SQLOCK_BATTERY_WRITER_PCT=30");
    return s;
}

/// Slot 0 observes (set_slot_env), the other slots campaign.
scenario election_load(scenario s, bool require_leader_kill) {
    s.processes = 4;
    s.coordination->observe_bound_ms = 20 * observe_ms;
    s.coordination->require_leader_kill = require_leader_kill;
    return s;
}

class CoordFaults : public ::testing::TestWithParam<engine> {};

TEST_P(CoordFaults, SemaphoreUnderFaults) {
    // N = 2 on PostgreSQL and SQLite, 3 on MariaDB: both sizes on every CI run.
    int const permits = GetParam() == engine::mysql ? 3 : 2;
    scenario s = semaphore_load(with_faults(coord("SEM-faults", 2201, "semaphore")), permits);
    s.processes = 4;  // more holders than permits, so that waiters queue behind the slots
    battery_run(s, GetParam()).run_and_check();
}

TEST_P(CoordFaults, RwLockUnderFaults) {
    battery_run(rw_load(with_faults(coord("RW-faults", 2202, "rw"))), GetParam()).run_and_check();
}

TEST_P(CoordFaults, ElectionUnderFaults) {
    scenario s = election_load(with_faults(coord("ELECT-faults", 2203, "election")), true);
    // Three faults or more before the quiet end (the last 2 s), whatever their order (a stop lasts 2 s): mixed_faults
    // draws each kind once per three, so a kill of the leader always comes.
    s.duration = 7s;
    s.interval_min = 800ms;
    s.interval_max = 1200ms;
    battery_run r(s, GetParam());
    r.set_slot_env(0, {"SQLOCK_BATTERY_OBSERVER=1"});
    r.run_and_check();
}

INSTANTIATE_TEST_SUITE_P(Engines, CoordFaults, ::testing::Values(engine::postgresql, engine::mysql, engine::sqlite),
                         sqlock_test::engine_param_name{});

/// A semaphore on the row locker (PostgreSQL and MariaDB; SQLite refuses it): each permit is a slot row locked by
/// an open transaction. The row lock's audit (install_row_audit) dates a PostgreSQL permit from its grant to its
/// commit, so K1-permits counts real intervals there; MariaDB's row audit has grants only (points in time), where
/// the fenced slots (K3), K5, K7, K8 and K9 carry the weight.
class CoordFaultsRow : public ::testing::TestWithParam<engine> {};

TEST_P(CoordFaultsRow, SemaphoreRowLockUnderFaults) {
    scenario s = semaphore_load(with_faults(coord("SEM-row-faults", 2204, "semaphore")), 2);
    s.row = true;
    s.processes = 4;
    battery_run(s, GetParam()).run_and_check();
}

INSTANTIATE_TEST_SUITE_P(Engines, CoordFaultsRow, ::testing::Values(engine::postgresql, engine::mysql),
                         sqlock_test::engine_param_name{});

// ---------------------------------------------------------------- the server crash (private server)

/// A private PostgreSQL or MariaDB (scripts/test-servers.sh in a temp dir), killed with SIGKILL (PostgreSQL: the
/// whole process tree; MariaDB: mariadbd, one process) and restarted by each run's nemesis: crash recovery from the
/// engine's own log. One test runs the three kinds one after the other on it: ctest runs each test in a process of
/// its own, and a private server costs about 10 s to start and stop.
class CoordServerCrash : public ::testing::TestWithParam<engine> {
protected:
    void SetUp() override {
        try {
            if (GetParam() == engine::postgresql) pg_.emplace();
            else my_.emplace();
        } catch (std::exception const& ex) {
            FAIL() << "could not start a private " << (GetParam() == engine::postgresql ? "PostgreSQL" : "MariaDB")
                   << ": " << ex.what();
        }
    }

    /// Two crashes, 1.5 s and 3.5 s into the run, each down for 500 ms.
    scenario crashing(scenario s) {
        s.worker_urls = {pg_ ? pg_->url() : my_->url()};
        s.duration = 5s;
        s.nemesis_script = [this](nemesis_ctl& ctl) {
            auto const server = pg_ ? "postgresql" : "mariadb";
            for (int i = 0; i < 2; ++i) {
                ctl.sleep(1500ms);
                if (std::chrono::steady_clock::now() >= ctl.end - 1s) return;
                ctl.log("crash-server", server, "start", "SIGKILL of the whole server");
                std::size_t killed = 1;
                if (pg_) killed = pg_->kill_tree();
                else my_->crash();
                ctl.sleep(500ms);
                if (pg_) pg_->start_again();
                else my_->start_again();
                ctl.log("crash-server", server, "stop",
                        "restarted after " + std::to_string(killed) + " processes were killed");
            }
        };
        return s;
    }

    std::optional<sqlock_test::private_pg> pg_;
    std::optional<sqlock_test::private_mariadb> my_;
};

TEST_P(CoordServerCrash, SemaphoreRwLockElection) {
    {
        SCOPED_TRACE("semaphore");
        battery_run(crashing(semaphore_load(coord("SEM-crash", 2211, "semaphore"), 2)), GetParam()).run_and_check();
    }
    {
        SCOPED_TRACE("rw lock");
        battery_run(crashing(rw_load(coord("RW-crash", 2212, "rw"))), GetParam()).run_and_check();
    }
    {
        SCOPED_TRACE("election");
        battery_run r(crashing(election_load(coord("ELECT-crash", 2213, "election"), false)), GetParam());
        r.set_slot_env(0, {"SQLOCK_BATTERY_OBSERVER=1"});
        r.run_and_check();
    }
}

INSTANTIATE_TEST_SUITE_P(Engines, CoordServerCrash, ::testing::Values(engine::postgresql, engine::mysql),
                         sqlock_test::engine_param_name{});

}  // namespace
