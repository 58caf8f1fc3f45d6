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
//   CoordServerCrash.SemaphoreRwLockElection   PostgreSQL, private server  fault-smoke;battery;crash (serial)
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
    if (kind != "election") {
        s.extra_checks.push_back([](run_record const& rec) { return k1_db_disjoint(rec.audit); });
        s.extra_checks.push_back(
            [](run_record const& rec) { return k1_reap_coord(rec.audit, rec.history, rec.realtime_minus_mono_ns); });
    }
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
    s.extra_checks.push_back([permits](run_record const& rec) { return k1_permits(rec.audit, {}, permits); });
    return s;
}

scenario rw_load(scenario s) {
    s.locks = 2;
    s.worker_env.push_back("SQLOCK_BATTERY_WRITER_PCT=30");
    s.extra_checks.push_back(
        [](run_record const& rec) { return k_rw_exclusion(rec.audit, rec.history, rec.realtime_minus_mono_ns); });
    return s;
}

/// Slot 0 observes (set_slot_env), the other slots campaign.
scenario election_load(scenario s, bool require_leader_kill) {
    s.processes = 4;
    s.extra_checks.push_back([](run_record const& rec) { return k_election(rec.audit, rec.history); });
    s.extra_checks.push_back([require_leader_kill](run_record const& rec) {
        return k_observe(rec.history, rec.nemesis, 20 * observe_ms, require_leader_kill);
    });
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

// ---------------------------------------------------------------- the server crash (PostgreSQL, private server)

/// A private PostgreSQL (scripts/test-servers.sh in a temp dir), killed with SIGKILL (the whole process tree) and
/// restarted by each run's nemesis. One test runs the three kinds one after the other on it: ctest runs each test in
/// a process of its own, and a private server costs about 10 s to start and stop.
class CoordServerCrash : public ::testing::Test {
protected:
    void SetUp() override {
        try {
            pg_ = std::make_unique<sqlock_test::private_pg>();
        } catch (std::exception const& ex) {
            FAIL() << "could not start a private PostgreSQL: " << ex.what();
        }
    }

    /// Two crashes, 1.5 s and 3.5 s into the run, each down for 500 ms.
    scenario crashing(scenario s) {
        s.worker_urls = {pg_->url()};
        s.duration = 5s;
        s.nemesis_script = [pg = pg_.get()](nemesis_ctl& ctl) {
            for (int i = 0; i < 2; ++i) {
                ctl.sleep(1500ms);
                if (std::chrono::steady_clock::now() >= ctl.end - 1s) return;
                ctl.log("crash-server", "postgresql", "start", "SIGKILL of the whole server");
                auto const killed = pg->kill_tree();
                ctl.sleep(500ms);
                pg->start_again();
                ctl.log("crash-server", "postgresql", "stop",
                        "restarted after " + std::to_string(killed) + " processes were killed");
            }
        };
        return s;
    }

    std::unique_ptr<sqlock_test::private_pg> pg_;
};

TEST_F(CoordServerCrash, SemaphoreRwLockElection) {
    {
        SCOPED_TRACE("semaphore");
        battery_run(crashing(semaphore_load(coord("SEM-crash", 2211, "semaphore"), 2)), engine::postgresql)
            .run_and_check();
    }
    {
        SCOPED_TRACE("rw lock");
        battery_run(crashing(rw_load(coord("RW-crash", 2212, "rw"))), engine::postgresql).run_and_check();
    }
    {
        SCOPED_TRACE("election");
        battery_run r(crashing(election_load(coord("ELECT-crash", 2213, "election"), false)), engine::postgresql);
        r.set_slot_env(0, {"SQLOCK_BATTERY_OBSERVER=1"});
        r.run_and_check();
    }
}

}  // namespace
