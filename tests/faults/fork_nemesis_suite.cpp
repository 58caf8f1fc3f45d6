// sqlock reliability battery — the fork nemesis (issue 18): holders fork at random points and
// their children end in every way a program can, judged by K1–K9 over every process's history.
//
// Each worker (battery_worker --fuzz, one thread, on its main thread) makes random calls from its
// seed, and in 25 % of a holder's steps forks: right after its grant, while another thread of the
// worker is inside renew() on the lease, or while it is inside release() (the failpoints
// renew.before_statement, release.before_statement and row.before_commit sleep 60 ms, so the fork
// lands inside the call). The child draws from the random stream it inherited, as a real child
// does, and then either goes on to take locks through a store and locker of its own (one or two
// critical sections, logged under its own name) or not, and ends by _exit(), by exit(), or by
// returning through main() (unwinding the parent's locker, lease and stores it inherited).
//
// No other fault: K1, K2 (zero overlaps), K3, K4 (exact), K5, K7, K8, K9, and the checks of
// fork_checks.hpp: every child exited 0 (fork-children; and each point and each end happened at
// least once) and no token was granted to two owners (unique-tokens).
//
//   Engines/ForkNemesis.<Test>/<engine>   table lock and row lock   fault-smoke;battery
//
// A failure prints the seed and a replay line (SQLOCK_BATTERY_SEED=<seed> <binary> --gtest_filter=...);
// scripts/battery.sh soak runs it with random seeds.
#include "fork_checks.hpp"

#include <gtest/gtest.h>

namespace {

using namespace std::chrono_literals;
using namespace sqlock_battery;
using sqlock::engine;

class ForkNemesis : public ::testing::TestWithParam<engine> {};

scenario fork_nemesis(std::string id, std::uint64_t seed, bool row) {
    scenario s;
    s.id = std::move(id);
    s.fixed_seed = seed;
    s.row = row;
    s.fuzz = true;
    s.fork_pct = 25;
    s.processes = 3;
    s.threads = 1;
    s.locks = 2;
    s.duration = 8s;
    s.ttl = 5s;  // no lease runs out on a loaded machine: K4 stays exact
    s.acquire_wait = 3s;
    s.hold_min = 20ms;
    s.hold_max = 300ms;
    s.think_max = 50ms;
    s.worker_env = {
        "SQLOCK_FAILPOINTS=renew.before_statement=sleep:60,release.before_statement=sleep:60,"
        "row.before_commit=sleep:60",
        no_leak_check_at_exit()};
    s.k2 = true;
    s.min_grants = 20;
    s.extra_checks.push_back([](run_record const& rec) { return fork_children(rec, true); });
    s.extra_checks.push_back([](run_record const& rec) { return unique_grant_tokens(rec); });
    return s;
}

TEST_P(ForkNemesis, TableLock) { battery_run(fork_nemesis("FORK-table", 601, false), GetParam()).run_and_check(); }

TEST_P(ForkNemesis, RowLock) { battery_run(fork_nemesis("FORK-row", 602, true), GetParam()).run_and_check(); }

INSTANTIATE_TEST_SUITE_P(Engines, ForkNemesis, ::testing::Values(engine::postgresql, engine::mysql, engine::sqlite),
                         sqlock_test::engine_param_name{});

}  // namespace
