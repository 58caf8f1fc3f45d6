// sqlock reliability battery — load and fault scenarios on recorded histories (issue 13; plan:
// reference/reliability-battery.md §4 B, C, E, F). Each test runs battery_worker processes against
// tables of its own, applies a nemesis, and checks the histories and the database's own audit with
// K1–K9 (checkers.hpp); see battery_harness.hpp for the run, the replay line and the seeds.
//
//   Engines/BatteryConformance.<Test>/<engine>  B01 (table and row lock, L=64), B03, E01, E03   conformance;battery
//   BatteryIsolation.<Test>                     B01 on PostgreSQL SERIALIZABLE / synchronous_commit off
//   conformance;battery BatteryIsolationServer.<Test>               B01 on MariaDB, global READ COMMITTED (runs alone)
//   conformance;battery Engines/BatteryFaults.<Test>/<engine>       B02, B04, C01, C02   fault-smoke;battery
//   BatteryMajority.<Test>                      F01, F05        fault-smoke;battery
//
// CI durations are 5–20 s each. The soak tier is the same tests with SQLOCK_SOAK=1 (durations ×10,
// random seeds):
//     SQLOCK_SOAK=1 ctest --test-dir build -L battery --output-on-failure
// and a failed schedule replays with SQLOCK_BATTERY_SEED=<seed printed by the run>.
#include "battery_harness.hpp"

#include <gtest/gtest.h>

namespace {

using namespace std::chrono_literals;
using namespace sqlock_battery;
using sqlock::engine;

class BatteryConformance : public ::testing::TestWithParam<engine> {};
class BatteryFaults : public ::testing::TestWithParam<engine> {};

// ---------------------------------------------------------------- the families
// Each builder gives a family's common parameters; a test reads as what it changes. The harness
// (battery_harness.hpp) does the rest: run dir, tables and audit, workers, nemesis, checkers.

/// B01 — counter storm, no faults: 4 processes × 4 threads on 4 locks, the unfenced counter read,
/// paused U(0, 5 ms) and written back inside the lock. TTL 10 s: nothing expires. Exclusion end to
/// end (K4 exact), in DB time (K1), in the clients' belief (K2 = 0), fencing (K3), the API contract
/// (K5), tokens (K7), no rows left (K8), typed errors only (K9). And no lease is lost: nothing
/// expires and nothing fails, so every release succeeds (a release reporting lease_lost here is
/// the library misreading its own state).
scenario counter_storm(std::string id, std::uint64_t seed, milliseconds duration = 10s) {
    scenario s;
    s.id = std::move(id);
    s.fixed_seed = seed;
    s.processes = 4;
    s.threads = 4;
    s.locks = 4;
    s.duration = duration;
    s.ttl = 10s;
    s.acquire_wait = 10s;
    s.k2 = true;
    s.min_grants = 100;  // a healthy run makes hundreds (SQLite row lock: one holder at a time) to thousands
    s.extra_checks.push_back([](run_record const& rec) {
        report r{"no-loss", {}, {}};
        for (auto const& ev : rec.history)
            if (ev.op == "lost" || (ev.op == "release" && (ev.type == "fail" || ev.type == "info")))
                r.violations.push_back({"no-loss", ev.owner + ": " + ev.op + " " + ev.type + " of lock " + ev.lock +
                                                       " in a fault-free run with a 10 s TTL: " + ev.error});
        return r;
    });
    return s;
}

/// PostgreSQL's options parameter in the workers' URL: `-c name=value` for every session of the library.
std::string pg_options(std::string const& name, std::string const& value) {
    return "options=-c%20" + name + "%3D" + value;
}

/// Leases that expire on purpose, with a reaper process deleting expired rows (grace 0). The
/// unfenced counter is only reported: a holder whose lease ran out no longer protects it.
scenario expiry_storm(std::string id, std::uint64_t seed) {
    scenario s;
    s.id = std::move(id);
    s.fixed_seed = seed;
    s.duration = 10s;
    s.acquire_wait = 3s;
    s.reaper = true;
    s.reaper_grace = 0ms;
    s.k4 = false;
    return s;
}

/// A fault on the holders' processes (s.nemesis) every interval_min–interval_max: 15 s.
scenario holder_fault(std::string id, std::uint64_t seed, nemesis_kind nemesis) {
    scenario s;
    s.id = std::move(id);
    s.fixed_seed = seed;
    s.duration = 15s;
    s.nemesis = nemesis;
    return s;
}

/// Majority mode over PostgreSQL, a second PostgreSQL database and MariaDB, each behind a fault
/// proxy: 3 processes × 2 threads on 2 locks, TTL 2 s.
scenario majority_storm(std::string id, std::uint64_t seed) {
    scenario s;
    s.id = std::move(id);
    s.fixed_seed = seed;
    s.majority = true;
    s.processes = 3;
    s.threads = 2;
    s.locks = 2;
    s.duration = 10s;
    s.ttl = 2s;
    s.acquire_wait = 5s;
    return s;
}

/// Each worker thread's acquire waits: from its invoke to its ok (ms), over the record's history.
std::vector<std::int64_t> acquire_waits_ms(run_record const& rec) {
    std::map<std::tuple<std::string, std::int64_t, std::int64_t>, std::int64_t> invoked;
    std::vector<event const*> sorted;
    for (auto const& ev : rec.history) sorted.push_back(&ev);
    std::stable_sort(sorted.begin(), sorted.end(), [](auto a, auto b) { return a->mono_ns < b->mono_ns; });
    std::vector<std::int64_t> waits;
    for (auto const* ev : sorted) {
        if (ev->op != "acquire") continue;
        auto key = std::make_tuple(ev->proc, ev->pid, ev->thread);
        if (ev->type == "invoke") {
            invoked[key] = ev->mono_ns;
        } else if (auto it = invoked.find(key); it != invoked.end()) {
            if (ev->type == "ok") waits.push_back((ev->mono_ns - it->second) / 1'000'000);
            invoked.erase(it);
        }
    }
    std::sort(waits.begin(), waits.end());
    return waits;
}

/// B02 — thundering herd on one lock: 4 processes × 64 threads (SQLite 4 × 8), acquire then release
/// at once, looping; the unfenced counter written inside (no pause), no fenced resource. Each
/// worker's store has 16 pooled connections (+ 2 reserved) for its 64 threads. K9: no serialization
/// failure, deadlock or busy error leaks; K1, K4 exact; the workers' connections counted on the
/// server never exceed the stores' limit. Progress: the herd must not starve the holder's release
/// of a connection (it once queued behind the waiters for the pool: 34–52 grants in 5 s on
/// PostgreSQL, most threads timing out; now hundreds), so at least 120 grants on the servers
/// (beside two CPU hogs on a busy machine, `battery.sh fault-smoke --under-load`, PostgreSQL made
/// 191: a floor of 200 failed there; a miss is rerun once, as progress, not safety).
/// The acquire waits (p50, p99, max) are reported, not asserted: fairness is not promised.
scenario thundering_herd(engine e) {
    scenario s;
    s.id = "B02";
    s.fixed_seed = 111;
    s.processes = 4;
    s.threads = e == engine::sqlite ? 8 : 64;
    s.locks = 1;
    s.duration = 5s;
    s.ttl = 10s;
    s.acquire_wait = 10s;
    s.cs_max_us = 0;
    s.fenced = false;
    s.pool_size = 16;
    s.count_connections = true;
    s.min_grants = e == engine::sqlite ? 100 : 120;
    s.extra_checks.push_back([](run_record const& rec) {
        report r{"B02-waits", {}, {}};  // reported: fairness is not promised
        auto waits = acquire_waits_ms(rec);
        r.counts["grants"] = static_cast<std::int64_t>(waits.size());
        if (!waits.empty()) {
            r.counts["p50_ms"] = waits[waits.size() / 2];
            r.counts["p99_ms"] = waits[waits.size() * 99 / 100];
            r.counts["max_wait_ms"] = waits.back();
        }
        std::int64_t timeouts = 0;
        for (auto const& ev : rec.history)
            if (ev.op == "acquire" && ev.type == "fail" && ev.error.rfind("sqlock::timeout", 0) == 0) ++timeouts;
        r.counts["timeouts"] = timeouts;
        return r;
    });
    return s;
}

/// B03 — many locks, long holds: 2 processes × 50 threads, each thread one lock of its own (unfenced),
/// held 5 s with a TTL of 2 s (so the watchdog must renew it, every ~TTL/3), then released; one round
/// (10 under SQLOCK_SOAK). Every acquire is granted and every release succeeds; each grant was
/// renewed at least hold/TTL times (fewer and it would have expired; the watchdog's schedule gives
/// about hold/(TTL/3)); no row left after the releases (K8, and the table is empty).
scenario long_holds() {
    scenario s;
    s.id = "B03";
    s.fixed_seed = 121;
    s.processes = 2;
    s.threads = 50;
    s.locks = s.processes * s.threads;
    s.own_lock = true;
    s.rounds = soak_mode() ? 10 : 1;
    s.duration = 60s;  // never reached: each thread stops after its rounds
    s.ttl = 2s;
    s.acquire_wait = 10s;
    s.hold_min = s.hold_max = 5s;
    s.pool_size = 16;
    // What is checked here is the watchdog, not fencing (every other scenario fences): no resource
    // session per thread, whose 100 connects at the start (a server that forks its sessions slowly
    // takes seconds for them) would compete with the grants and first renewals of 2 s leases.
    s.fenced = false;
    s.min_grants = static_cast<std::size_t>(s.locks * s.rounds);
    s.extra_checks.push_back([rounds = s.rounds, hold = s.hold_min](run_record const& rec) {
        report r{"B03", {}, {}};
        std::map<std::pair<std::string, std::int64_t>, std::int64_t> renewals;  // (owner, token) -> renew ok
        std::int64_t grants = 0, refused = 0, released = 0;
        for (auto const& ev : rec.history) {
            if (ev.op == "acquire" && ev.type == "ok") {
                ++grants;
                renewals[{ev.owner, *ev.token}];
            } else if (ev.op == "acquire" && ev.type != "invoke") {
                ++refused;
                r.violations.push_back({"B03", ev.owner + ": acquire of " + ev.lock + " " + ev.type + ": " + ev.error});
            } else if (ev.op == "renew" && ev.type == "ok" && ev.token) {
                ++renewals[{ev.owner, *ev.token}];
            } else if (ev.op == "release" && ev.type == "ok") {
                ++released;
            }
        }
        std::int64_t const need = hold / rec.ttl;  // below this the lease would have run out
        std::int64_t const expected = rec.processes * rec.threads * rounds;
        if (grants != expected)
            r.violations.push_back(
                {"B03", std::to_string(grants) + " grants of " + std::to_string(expected) + " acquires"});
        if (released != grants)
            r.violations.push_back(
                {"B03", std::to_string(released) + " releases succeeded of " + std::to_string(grants)});
        std::int64_t min_renewals = std::numeric_limits<std::int64_t>::max(), total = 0;
        for (auto const& [grant, n] : renewals) {
            min_renewals = std::min(min_renewals, n);
            total += n;
            if (n < need)
                r.violations.push_back({"B03", grant.first + " token " + std::to_string(grant.second) + ": " +
                                                   std::to_string(n) + " renewals in a " +
                                                   std::to_string(hold.count()) + " ms hold, at least " +
                                                   std::to_string(need) + " expected"});
        }
        for (auto const& row : rec.remaining)
            r.violations.push_back({"B03", "row left after every release: " + row.lock + " (owner " + row.owner + ")"});
        r.counts["grants"] = grants;
        r.counts["refused"] = refused;
        r.counts["min_renewals"] = renewals.empty() ? 0 : min_renewals;
        r.counts["renewals_per_grant_x10"] =
            renewals.empty() ? 0 : total * 10 / static_cast<std::int64_t>(renewals.size());
        return r;
    });
    return s;
}

/// B04 — mixed-operation storm with short TTLs: 4 processes × 8 threads on 8 locks; each acquire
/// takes a TTL of U(200 ms, 2 s), the holder renews explicitly or writes the fenced resource up to
/// three times, then releases, or (30 %) abandons the lease and, past its local deadline, writes
/// the resource once more with its stale token, on purpose; a reaper every 250 ms. K1; K3: no
/// stale write accepted, and some refused (the abandoned holders' writes bit); K4 on the fenced
/// counter; K5; K6: after each abandon some waiting acquire succeeds within TTL + reaper period +
/// backoff + slack (5.3 s); K7; K8.
scenario mixed_storm() {
    scenario s;
    s.id = "B04";
    s.fixed_seed = 131;
    s.processes = 4;
    s.threads = 8;
    s.locks = 8;
    s.duration = 6s;
    s.mixed = true;
    s.ttl_min = 200ms;
    s.ttl = 2s;
    s.acquire_wait = 3s;
    s.hold_max = 1s;  // the mixed loop's steps (up to 3 × TTL/2), for the harness's wait at the end
    s.no_renew = true;
    s.abandon_pct = 30;
    s.reaper = true;
    s.reaper_interval = 250ms;
    s.k4 = false;  // the unfenced counter: an abandoned holder's lease runs out, reported
    s.k4_fenced = true;
    s.k3_needs_rejection = true;
    s.k6 = true;
    s.k6_from_abandons = true;
    // P8's bound B = the longest TTL + reaper period + max backoff (500 ms), with the noisy-CI
    // slack of the plan (§3.3: +20 %), and 2 s rather than 1 s on top: 32 threads and a reaper on
    // two shared cores (gaps up to 3.5 s were seen while other tests ran).
    s.k6_bound_ms = (2000 + 250 + 500) * 12 / 10 + 2000;
    s.min_grants = 50;
    return s;
}

// ---------------------------------------------------------------- B: contention storms

TEST_P(BatteryConformance, B01_CounterStorm) { battery_run(counter_storm("B01", 101), GetParam()).run_and_check(); }

// B01 with the row lock (row_locker, --row): the same storm, exclusion by the engine's row lock
// held in an open transaction. The row lock's audit (install_row_audit) records each grant in the
// holding transaction, so K7 reads the committed grants' tokens from the database, and K1 from it
// too: on PostgreSQL each grant's interval up to its COMMIT (a deferred trigger), on every engine
// that each grant came after the previous holder began its release (K1-row, battery_harness.hpp).
// K8 has no table rows to read here (row locks leave their rows).
TEST_P(BatteryConformance, B01_CounterStormRowLock) {
    scenario s = counter_storm("B01-row", 102);
    s.row = true;
    battery_run(s, GetParam()).run_and_check();
}

// B01 on 64 lock names (L=64): many names, little contention on each, the counters of all of them exact.
TEST_P(BatteryConformance, B01_CounterStormManyLocks) {
    scenario s = counter_storm("B01-L64", 103, 5s);
    s.locks = 64;
    battery_run(s, GetParam()).run_and_check();
}

TEST_P(BatteryConformance, B03_ManyLocksLongHolds) { battery_run(long_holds(), GetParam()).run_and_check(); }

TEST_P(BatteryFaults, B02_ThunderingHerd) { battery_run(thundering_herd(GetParam()), GetParam()).run_and_check(); }

TEST_P(BatteryFaults, B04_MixedShortTtls) { battery_run(mixed_storm(), GetParam()).run_and_check(); }

// B01 under the isolation settings of the plan (§4.B01 variants), set for every session of the
// library by the workers' URL (PostgreSQL options=-c ...) or globally on the server (MariaDB, as
// root, restored after the run; so those tests run alone). K9: no serialization failure (40001),
// deadlock (40P01, 1213) or lock timeout (55P03, 1205) leaks out of the library.
TEST(BatteryIsolation, B01_PostgresqlSerializable) {
    scenario s = counter_storm("B01-pg-serializable", 104, 5s);
    s.url_params = pg_options("default_transaction_isolation", "serializable");
    battery_run(s, engine::postgresql).run_and_check();
}

TEST(BatteryIsolation, B01_PostgresqlSerializableRowLock) {
    scenario s = counter_storm("B01-row-pg-serializable", 105, 5s);
    s.row = true;
    s.url_params = pg_options("default_transaction_isolation", "serializable");
    battery_run(s, engine::postgresql).run_and_check();
}

// synchronous_commit off in the sessions' options: the library sets it back on for its own
// connections (a crash must not lose an acknowledged grant); the storm must be as exact.
TEST(BatteryIsolation, B01_PostgresqlSynchronousCommitOff) {
    scenario s = counter_storm("B01-pg-async-commit", 106, 5s);
    s.url_params = pg_options("synchronous_commit", "off");
    battery_run(s, engine::postgresql).run_and_check();
}

// MariaDB 10.11 names it tx_isolation. The library sets READ COMMITTED on each of its sessions, so
// the server's global level must change nothing: READ COMMITTED as the plan asks, and SERIALIZABLE
// (every plain read a locking read) on the row lock, whose transaction stays open while held.
TEST(BatteryIsolationServer, B01_MariadbGlobalReadCommitted) {
    scenario s = counter_storm("B01-mariadb-read-committed", 107, 5s);
    s.mysql_globals = {{"tx_isolation", "'READ-COMMITTED'"}};
    battery_run(s, engine::mysql).run_and_check();
}

TEST(BatteryIsolationServer, B01_MariadbGlobalSerializableRowLock) {
    scenario s = counter_storm("B01-row-mariadb-serializable", 108, 5s);
    s.row = true;
    s.mysql_globals = {{"tx_isolation", "'SERIALIZABLE'"}};
    battery_run(s, engine::mysql).run_and_check();
}

// ---------------------------------------------------------------- E: expiry and tokens

// E01 — the reaper racing renewals: holders hold U(1, 3)×TTL with a TTL of 300 ms, so the
// watchdog renews them every ~100 ms, while a reaper process deletes expired rows (grace 0)
// every 10 ms, one row per batch with a pause between batches (failpoint
// reaper.between_batches). Worker 1's renewals are held back 180 ms before their statement
// (failpoint renew.before_statement), so they reach the database around the expiry: some in
// time, some after it, racing the reaper's delete of the same row. K1: no lease is taken over or deleted before its
// expiry, and no unexpired row is deleted by anyone but its owner (K1-reap); K3: a holder that lost its lease meanwhile
// has its late writes refused. The unfenced counter is only reported: a lease can be lost to a slow renewal on a loaded
// machine, and then the counter is not protected.
TEST_P(BatteryConformance, E01_ReaperRacesRenewals) {
    scenario s = expiry_storm("E01", 201);
    s.processes = 4;
    s.threads = 2;
    s.locks = 6;
    s.ttl = 300ms;
    s.hold_min = 300ms;
    s.hold_max = 900ms;
    s.reaper_interval = 10ms;
    s.reaper_batch = 1;
    s.reaper_env = {"SQLOCK_FAILPOINTS=reaper.between_batches=sleep:5"};
    battery_run r(s, GetParam());
    r.set_slot_env(1, {"SQLOCK_FAILPOINTS=renew.before_statement=sleep:180"});
    r.run_and_check();
}

// E03 — token monotonicity across reap and reinsert: TTL 200 ms, no renewals, half the leases
// abandoned (never released), a reaper deleting expired rows every 50 ms and passing over the token
// counters (at the smallest horizon, sqlock::min_token_horizon: no counter of the run is that old, so
// none is purged; purge-then-insert is Engines/Reaper.TokensKeepIncreasingAcrossAPurgedCounter and
// TheFloorIsNeverPurgedAndOnlyRises), so names are freed by takeover and by
// reap-then-insert. K7: every grant's token is above every earlier grant's of its name. K4 is
// reported: an abandoned holder's section may overlap a later one's only if it ran past its lease.
TEST_P(BatteryConformance, E03_TokensAcrossReapAndReinsert) {
    scenario s = expiry_storm("E03", 203);
    s.processes = 3;
    s.threads = 2;
    s.locks = 2;
    s.ttl = 200ms;
    s.cs_max_us = 2000;
    s.no_renew = true;
    s.abandon_pct = 50;
    s.reaper_interval = 50ms;
    s.token_horizon = std::chrono::duration_cast<milliseconds>(sqlock::min_token_horizon);
    battery_run(s, GetParam()).run_and_check();
}

// ---------------------------------------------------------------- C: holder faults

// C01 — kill -9 of holders: every 2–4 s a random worker is killed and restarted 1 s later
// (new owner ids); worker 0 also dies at the failpoint acquire.after_commit_before_return
// after every grant it gets, leaving a committed row nobody holds. TTL 2 s, reaper every 1 s.
// K1, K4 exact (a section cut by the kill never wrote), K6: after each kill some acquire
// succeeds within TTL + reaper period + backoff + slack, K7, K8 (the rows left are expired or a
// killed owner's).
TEST_P(BatteryFaults, C01_KillHolders) {
    scenario s = holder_fault("C01", 301, nemesis_kind::kill_restart);
    s.processes = 4;
    s.threads = 4;
    s.locks = 4;
    s.ttl = 2s;
    s.acquire_wait = 5s;
    s.hold_min = 50ms;
    s.hold_max = 300ms;
    s.reaper = true;
    s.reaper_interval = 1s;
    s.interval_min = 2s;
    s.interval_max = 4s;
    s.restart_delay = 1s;
    s.restart_crashed = true;
    s.k6 = true;
    // P8's bound B = TTL + reaper period + max backoff (500 ms) + ε, with the noisy-CI slack of
    // the plan (§3.3: +20 % and +1 s).
    s.k6_bound_ms = (2000 + 1000 + 500) * 12 / 10 + 1000;
    battery_run r(s, GetParam());
    r.set_slot_env(0, {"SQLOCK_FAILPOINTS=acquire.after_commit_before_return=kill"});
    r.run_and_check();
}

// C02 — "GC pause": every 2–3 s a random worker process is stopped (SIGSTOP) for 2.5 × TTL
// (TTL 1 s), then continued. Holders write the fenced resource, hold 200–600 ms, and write it
// again: a holder stopped mid-hold wakes up overtaken and writes with its stale token. K3: no
// stale write is ever accepted, and at least one was refused (the fault bit); K1 = 0. K2 and the
// unfenced counter (K4) are reported, not asserted: a paused holder overlapping its successor is
// exactly the limit fencing exists for.
TEST_P(BatteryFaults, C02_PausedHolderIsFenced) {
    scenario s = holder_fault("C02", 302, nemesis_kind::stop_cont);
    s.processes = 3;
    s.threads = 2;
    s.locks = 2;
    s.ttl = 1s;
    s.acquire_wait = 3s;
    s.hold_min = 200ms;
    s.hold_max = 600ms;
    s.interval_min = 2s;
    s.interval_max = 3s;
    s.stop_for = 2500ms;
    s.k4 = false;
    s.k3_needs_rejection = true;
    battery_run(s, GetParam()).run_and_check();
}

INSTANTIATE_TEST_SUITE_P(Engines, BatteryConformance,
                         ::testing::Values(engine::postgresql, engine::mysql, engine::sqlite),
                         sqlock_test::engine_param_name{});
INSTANTIATE_TEST_SUITE_P(Engines, BatteryFaults, ::testing::Values(engine::postgresql, engine::mysql, engine::sqlite),
                         sqlock_test::engine_param_name{});

// F01 — majority mode over PostgreSQL, a second PostgreSQL database and MariaDB (each behind a
// fault proxy), under contention, no faults: 3 processes × 2 threads on 2 locks. K3 on the
// majority tokens, K4 exact, K1 and K7 on every member's audit.
TEST(BatteryMajority, F01_Contention) {
    scenario s = majority_storm("F01", 401);
    s.k8 = false;       // a member's late grant given back after the run ended may still be in flight: reported
    s.min_grants = 50;  // a healthy run makes well over 1000
    battery_run(s, engine::postgresql).run_and_check();
}

// F05 — majority with one member stalled through its fault proxy (silent: statements hang) for
// 2 × TTL every 3–5 s. Holders hold 0.5–1.5 s (TTL 2 s), so renewals run while a member is
// stalled. The majority goes on with the other two; the stalled member's renewals and grants
// time out (member timeout ttl/10), its rows expire and are cleaned up or taken over later. K3: no stale write accepted
// (majority tokens keep increasing whatever member fails); K1 and K7 on every member; K9 typed errors. K4 and K5 are
// reported.
TEST(BatteryMajority, F05_MemberStalled) {
    scenario s = majority_storm("F05", 405);
    s.duration = 15s;
    s.hold_min = 500ms;
    s.hold_max = 1500ms;
    s.io_timeout = 5s;
    s.nemesis = nemesis_kind::stall_member;
    s.interval_min = 3s;
    s.interval_max = 5s;
    s.stop_for = 4s;
    s.k4 = false;
    s.k5 = false;
    s.k8 = false;
    s.min_grants = 5;  // a healthy run makes 20-30 (long holds)
    battery_run(s, engine::postgresql).run_and_check();
}

}  // namespace
