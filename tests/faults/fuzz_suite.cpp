// sqlock reliability battery — the randomized operation fuzzer (issue 18): random interleavings of
// try_acquire, acquire with a wait, renew, reenter, release and fork in several processes, under a
// nemesis that kills a holder (kill -9, restarted with new owners), stops one (SIGSTOP for longer
// than the TTL, then SIGCONT) or ends a holder's server session (pg_terminate_backend, KILL
// CONNECTION), with a reaper purging expired rows. Everything comes from the seed: the workers'
// calls, the forks and the children's ends, the faults and their victims (the interleavings
// themselves are the machine's).
//
// Judged by K1 (and K1-reap, K1-row), K3, K5, K7, K8, K9 and fork_checks.hpp (every child exited 0,
// no token granted to two owners). K2 and K4 are reported: a stopped holder or a killed session
// may overlap its successor, which is what fencing (K3) is for.
//
//   Engines/Fuzz.<Test>/<engine>   table lock, row lock, and the coordination kinds   fault-smoke;battery
//
// CI runs the fixed seeds (about 12 s per test); `bash scripts/battery.sh soak` runs random seeds
// (SQLOCK_SOAK=1: ten times longer) until the first failure, which prints its replay line:
//     SQLOCK_BATTERY_SEED=<seed> build/tests/faults/sqlock_fork_fuzz_tests
//     --gtest_filter='Engines/Fuzz.<Test>/<engine>'
#include "coord_checkers.hpp"
#include "fork_checks.hpp"

#include <gtest/gtest.h>

namespace {

using namespace std::chrono_literals;
using namespace sqlock_battery;
using sqlock::engine;

class Fuzz : public ::testing::TestWithParam<engine> {};

scenario fuzz(std::string id, std::uint64_t seed, bool row) {
    scenario s;
    s.id = std::move(id);
    s.fixed_seed = seed;
    s.row = row;
    s.fuzz = true;
    s.fork_pct = 8;
    s.processes = 4;
    s.threads = 1;
    s.locks = 3;
    s.duration = 10s;
    s.ttl = 1500ms;
    s.acquire_wait = 2s;
    s.hold_min = 0ms;
    s.hold_max = 400ms;
    s.think_max = 50ms;
    s.worker_env = {
        "SQLOCK_FAILPOINTS=renew.before_statement=sleep:30,release.before_statement=sleep:30,"
        "row.before_commit=sleep:30",
        no_leak_check_at_exit()};
    s.reaper = true;
    s.reaper_interval = 300ms;
    s.nemesis = nemesis_kind::mixed_faults;
    s.tag_connections = true;
    s.interval_min = 1s;
    s.interval_max = 2500ms;
    s.stop_for = 2s;
    s.restart_delay = 500ms;
    s.k4 = false;
    s.min_grants = 20;
    s.extra_checks.push_back([](run_record const& rec) { return fork_children(rec, false); });
    s.extra_checks.push_back([](run_record const& rec) { return unique_grant_tokens(rec); });
    return s;
}

TEST_P(Fuzz, TableLock) { battery_run(fuzz("FUZZ-table", 701, false), GetParam()).run_and_check(); }

TEST_P(Fuzz, RowLock) { battery_run(fuzz("FUZZ-row", 702, true), GetParam()).run_and_check(); }

// The coordination kinds (issue 22) under the same fuzzer: a semaphore of 2 permits, an rw lock (30 % writers) and
// an election in turn, 4 s each, judged as the coordination battery judges them (coordination_checks). A child of a
// fork does no work of its own here (battery_worker: its plain locks are writers that readers do not exclude).
// Tokens are unique per name except a semaphore's: each permit slot draws from its own counter.
// Among the semaphore's and the rw lock's idle steps, 10 % are an operator's (issue 38, battery_worker
// admin_action): force_release of a name's row (the writers' lock, a permit slot), and for the semaphore
// forget_semaphore followed by a definition of another N (1 .. 3). The semaphore is judged by K1-permits-defs (the
// N in force at each grant, from the audit of the definitions), the rw lock also by K-rw-forced (no writer's lease
// handed out after its force-release); a force-released lease ends at the force-release. Same durations: no cost
// beyond the operator's few statements.
TEST_P(Fuzz, CoordinationKinds) {
    for (std::string const kind : {"semaphore", "rw", "election"}) {
        SCOPED_TRACE(kind);
        scenario s = fuzz("FUZZ-" + kind, 703, false);
        s.duration = 4s;
        s.min_grants = 10;
        s.worker_env.push_back("SQLOCK_BATTERY_KIND=" + kind);
        s.worker_env.push_back("SQLOCK_BATTERY_PERMITS=2");
        s.worker_env.push_back("SQLOCK_BATTERY_WRITER_PCT=30");
        if (kind != "election") s.worker_env.push_back("SQLOCK_BATTERY_ADMIN_PCT=10");
        // K1 on the audit with the readers' renames and the permit slots: coordination_reports (the harness's
        // K1-reap matches a delete's row name with the history's, which names the user's name).
        s.k1 = kind == "election";
        s.coordination = coordination_checks{kind, 2};
        s.coordination->definitions = kind == "semaphore";
        if (kind == "semaphore") {
            s.extra_checks.clear();
            s.extra_checks.push_back([](run_record const& rec) { return fork_children(rec, false); });
        }
        battery_run(s, GetParam()).run_and_check();
    }
}

INSTANTIATE_TEST_SUITE_P(Engines, Fuzz, ::testing::Values(engine::postgresql, engine::mysql, engine::sqlite),
                         sqlock_test::engine_param_name{});

}  // namespace
