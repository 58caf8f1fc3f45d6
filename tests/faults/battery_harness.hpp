// sqlock reliability battery — the scenario runner.
//
// One scenario run:
//   1. a run directory (kept when the run fails), tables of the run's own prefix on the lock
//      database(s) with the ground-truth audit installed (audit.hpp), and a fenced resource on a
//      separate database (PostgreSQL's SQLOCK_TEST_PG2_URL, or an SQLite file for SQLite runs);
//   2. P battery_worker processes (history-<name>.jsonl each), plus a reaper process if asked;
//   3. a nemesis applying faults while they run, logged in nemesis.jsonl on the raw monotonic
//      clock (history.hpp): kill -9 and restart with a new owner, SIGSTOP/SIGCONT, a holder's
//      server session killed (mixed_faults draws among these three), a majority
//      member stalled through its fault proxy, or the scenario's own script (nemesis_script: a
//      member's server killed, frozen, black-holed; scenario::members names private members);
//   4. then audit*.jsonl (the audit of every lock database), remaining.jsonl (the lock rows left),
//      final.json (the unfenced counters' final values, the owners of killed or abandoning
//      processes, the scenario's parameters), and the checkers (checkers.hpp) over all of it.
// The scenario says which reports must be ok(); every report's summary is printed. On failure the
// directory stays and one line tells how to re-run the checkers on it, another how to run the
// test again with the same schedule:
//     replay: build/tests/faults/sqlock_battery_check <dir>
//     replay the run: SQLOCK_BATTERY_SEED=<seed> bash scripts/with-servers.sh <test binary> --gtest_filter='<test>'
// on success it is deleted. A safety failure (K1, K3, K4, K5, K7, K8, K9) is never retried; a
// liveness miss alone (K6; a scenario's own timing bound: the majority checks "rows-given-back",
// "F02-liveness", "F03-bounded", "F04-prompt"; a check that says the fault never bit; or a killpoint
// scenario whose failpoint was never reached) is printed, and the scenario reruns once with a new seed: only a miss on
// the rerun fails the test.
//
// Seeds: each scenario has a fixed seed in CI and a random one under SQLOCK_SOAK=1; the seed is
// printed, and SQLOCK_BATTERY_SEED=<n> replays a schedule (nemesis choices and the workers'
// random choices; the interleavings themselves are the machine's). SQLOCK_SOAK=1 also makes
// every duration 10 times longer.
#pragma once

#include "audit.hpp"
#include "checkers.hpp"
#include "coord_checkers.hpp"
#include "history.hpp"

#include "majority_members.hpp"
#include "soak.hpp"

#include "../fault_proxy.hpp"
#include "../proc_net.hpp"
#include "../test_env.hpp"
#include "../test_process.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <stop_token>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#ifndef SQLOCK_BATTERY_WORKER
#error "SQLOCK_BATTERY_WORKER (path of sqlock_battery_worker) must be defined by the build"
#endif

namespace sqlock_battery {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using sqlock::engine;
using std::chrono::milliseconds;

/// The local ports of this machine's TCP sockets connected to `server_port` and still ESTABLISHED:
/// the connections some process holds open. A connection closed or shut down by its client has left
/// that state, even while the server still counts its session.
inline std::set<int> established_ports_to(int server_port) {
    std::set<int> ports;
    for (auto const& s : sqlock_test::tcp_sockets())
        if (s.remote_port == server_port && s.state == sqlock_test::tcp_established) ports.insert(s.local_port);
    return ports;
}

/// Which nemesis a scenario runs.
enum class nemesis_kind {
    none,
    kill_restart,       ///< SIGKILL a random worker every U(interval) and restart it (new owners) after restart_delay
    stop_cont,          ///< SIGSTOP a random worker for stop_for, every U(interval)
    stall_member,       ///< majority: stall a random member's proxy for stop_for, every U(interval)
    stall_two_members,  ///< majority: stall two random members' proxies (a majority of 3) for stop_for
    block_member,       ///< majority: a random member's proxy refuses (closes) connections for stop_for
    /// Each time one of: kill_restart, stop_cont of a holder, or (servers) a session kill: a holder's
    /// backend ended by the server (pg_terminate_backend / KILL CONNECTION), found by tag_connections.
    mixed_faults,
};

struct nemesis_ctl;

/// What a run recorded, for a scenario's own checks (scenario::extra_checks).
struct run_record {
    std::vector<event> history;
    std::vector<audit_row> audit;      ///< every member's (db = its label)
    std::vector<audit_row> remaining;  ///< the lock rows left after the workers stopped
    std::vector<nemesis_event> nemesis;
    std::int64_t realtime_minus_mono_ns = 0;  ///< db_time_us * 1000 - this = the raw monotonic clock
    milliseconds ttl{0};
    int processes = 0;
    int threads = 0;
};

/// What a scenario runs and what it asserts.
struct scenario {
    std::string id;  ///< "B01", ...
    std::uint64_t fixed_seed = 1;
    // load
    int processes = 4;
    int threads = 4;
    int locks = 4;
    milliseconds duration = 10s;  ///< CI value; scaled() under SQLOCK_SOAK
    milliseconds ttl = 10s;
    milliseconds acquire_wait = 5s;
    long long cs_max_us = 5000;
    milliseconds hold_min = 0ms, hold_max = 0ms;
    int abandon_pct = 0;
    bool no_renew = false;
    bool row = false;
    bool fenced = true;
    milliseconds lock_wait_timeout = 1s;
    milliseconds io_timeout = 2s;
    std::vector<std::string> worker_env;  ///< extra "KEY=value" for the workers (SQLOCK_FAILPOINTS=...)
    /// The store's pooled connections in each worker (0: threads + 4); the store adds 2 reserved ones.
    int pool_size = 0;
    /// Thread k of worker slot p takes only lock p * threads + k (locks must be processes × threads).
    bool own_lock = false;
    /// > 0: each worker thread stops after this many critical sections.
    int rounds = 0;
    /// The mixed-operation storm (battery_worker --mixed): TTL U(ttl_min, ttl) per acquire, explicit
    /// renewals, abandoned leases written to after their deadline (abandon_pct).
    bool mixed = false;
    milliseconds ttl_min = 0ms;
    /// Query parameters added to the lock database's URL the workers use (single-database runs),
    /// e.g. PostgreSQL "options=-c%20default_transaction_isolation%3Dserializable".
    std::string url_params;
    /// The lock database's URLs, one per node of a replicated cluster (tests/ha): the run sets up on the first,
    /// and worker slot p connects to worker_urls[p % size]. Empty: the engine's shared test server.
    std::vector<std::string> worker_urls;
    /// Single-database runs: the URL the workers connect to instead of the lock database's own (a pooler
    /// in front of it); the harness itself (tables, audit) still uses the database directly.
    std::string worker_url;
    /// MariaDB server variables set globally (as root) for the run and restored after it:
    /// {"tx_isolation", "'READ-COMMITTED'"}. Such a scenario must run alone (RUN_SERIAL).
    std::map<std::string, std::string> mysql_globals;
    /// Count the workers' connections on the server (tagged: PostgreSQL application_name, MariaDB a
    /// user of the run) whose client end is open, every 50 ms; asserted: never more than the stores'
    /// limit, processes × (pool_size + 2 reserved + the release listener's connection: PostgreSQL's
    /// LISTEN, MariaDB's parked SLEEP), plus the reaper's. Not on SQLite.
    bool count_connections = false;
    /// Tag the workers' connections (as count_connections does) without counting them: the session
    /// kill of nemesis_kind::mixed_faults finds them so.
    bool tag_connections = false;
    /// The randomized operation fuzzer (battery_worker --fuzz, one thread per worker) and the percent of
    /// a holder's steps that fork (--fork-pct).
    bool fuzz = false;
    int fork_pct = 0;
    // reaper process
    bool reaper = false;
    milliseconds reaper_interval = 100ms;
    milliseconds reaper_grace = 0ms;
    int reaper_batch = 100;
    std::optional<milliseconds> token_horizon;
    std::vector<std::string> reaper_env;
    // nemesis
    nemesis_kind nemesis = nemesis_kind::none;
    milliseconds interval_min = 2s, interval_max = 4s;
    milliseconds stop_for = 0ms;
    milliseconds restart_delay = 1s;
    /// Restart a worker that died of SIGKILL by itself (a failpoint's kill), logging it as a kill.
    bool restart_crashed = false;
    /// Faults synchronised on a grant instead of a timer: the worker of slot fault_slot (its first
    /// generation) stops itself after each grant it logged (battery_worker --stop-after-grant). While
    /// it is stopped the harness starts the nemesis fault, if the last one is over, interval_min..max
    /// has passed since it began and the run is not in its quiet end, and then lets the worker go on
    /// (SIGCONT); otherwise it lets it go on at once. So each fault meets a holder whose grant is a
    /// moment old and whose first renewal has not been sent, however loaded the machine is.
    bool fault_after_grant = false;
    int fault_slot = 0;
    // majority
    bool majority = false;
    milliseconds member_timeout = 0ms;
    /// Majority: latency the member's fault proxy adds to every relayed chunk, each way, for the
    /// whole run ("pg", "pg2", "mariadb").
    std::map<std::string, milliseconds> member_delay;
    /// Every worker thread starts its first acquire at the same instant (a start barrier).
    bool start_barrier = false;
    /// Workers log each busy attempt inside a waiting acquire (op "busy", an instant event).
    bool log_busy = false;
    /// Workers call try_acquire (one round: its invoke is the round's start) instead of a waiting acquire.
    bool single_try = false;
    /// With start_barrier: every acquire starts on a multiple of this after the barrier (repeated
    /// simultaneous starts); 0: only the first.
    milliseconds round = 0ms;
    /// Workers stay this long after their threads ended, so that a majority's give-backs of late
    /// member grants (detached threads) finish before the process exits.
    milliseconds linger = 0ms;
    /// Majority: the member databases (each gets a fault proxy); empty: the shared test servers'
    /// (shared_majority_members: pg, pg2, mariadb).
    std::vector<sqlock_test::member_spec> members;
    /// The scenario's own nemesis, run instead of `nemesis` while the workers run (it logs its faults
    /// through nemesis_ctl::log and must have healed everything when it returns).
    std::function<void(nemesis_ctl&)> nemesis_script;
    // what must hold
    bool k1 = true, k2 = false, k3 = true, k4 = true, k5 = true, k6 = false, k7 = true, k8 = true, k9 = true;
    /// K6's faults are the abandoned leases (the worker's `lost` events "abandoned by ..."), written
    /// into nemesis.jsonl as instants: after each, some waiting acquire must succeed within k6_bound_ms.
    bool k6_from_abandons = false;
    /// K4 on the fenced resource's counter: per lock, the resource's final value equals the accepted
    /// fenced writes (write_fenced ok), each value written once.
    bool k4_fenced = false;
    bool k3_needs_rejection = false;  ///< the fault must have bitten: at least one stale write refused
    /// Progress floor: at least this many grants (far below what a healthy run makes), so that a
    /// library that stops granting cannot pass the safety checks by doing nothing.
    std::size_t min_grants = 1;
    std::int64_t k6_bound_ms = 0;
    // kill -9 at an exact place (killpoint_suite.cpp)
    /// A library failpoint (SQLOCK_FAILPOINT) at which the worker of slot killpoint_slot is killed:
    /// its first generation runs with SQLOCK_FAILPOINTS=<killpoint>=stop, the harness sees it stop
    /// there, lets it go on (SIGCONT) the first killpoint_after - 1 times and SIGKILLs it at the
    /// killpoint_after-th, logging the kill in nemesis.jsonl; its restart (after restart_delay,
    /// new owners) runs without the failpoint. Exactly one kill, where the scenario wants it.
    std::string killpoint;
    int killpoint_slot = 0;
    int killpoint_after = 1;
    /// Row runs: audit the row lock's table too (install_row_audit), so that K1 and K7 read the
    /// database's record of the row lock's grants.
    bool row_audit = true;
    /// Each worker pauses U(0, think_max) after each release (0: none), so every process gets turns.
    milliseconds think_max = 0ms;
    /// The scenario's own checks over the run's record: asserted, safety (a failure is never retried).
    std::vector<std::function<report(run_record const&)>> extra_checks;
    /// A semaphore, rw-lock or election run: its kind's checkers (coordination_reports), asserted like
    /// extra_checks, and kept in final.json so that sqlock_battery_check replays them.
    std::optional<coordination_checks> coordination;
};

/// What a scenario's own extra check (battery_run::set_extra_check) gets once the run is over.
struct extra_check_input {
    std::vector<audit_row> const& audit;
    std::vector<event> const& history;
    std::vector<audit_row> const& remaining;
    soci::session& lock_db;  ///< the (first) lock database, raw
    engine e;
    std::string const& tables;                       ///< the run's table prefix
    std::vector<std::string> const& killed_workers;  ///< names of the workers killed (any nemesis)
};

/// One database holding lock tables for the run.
struct lock_db {
    std::string label;  ///< "" for a single database, else the member's name
    engine e{};
    std::string url;         ///< direct
    std::string worker_url;  ///< what workers connect to (the proxy's, in majority runs)
    std::unique_ptr<sqlock_test::fault_proxy> proxy;
    std::unique_ptr<soci::session> raw;
};

/// What a scenario's nemesis_script can do while the workers run.
struct nemesis_ctl {
    /// Logs a fault in nemesis.jsonl (fault, target, phase start|stop|instant, detail).
    std::function<void(std::string, std::string, std::string, std::string)> log;
    /// Waits `d` (cut short at the run's end), reaping exited workers meanwhile.
    std::function<void(milliseconds)> sleep;
    /// The member of that label (its proxy, its direct URL).
    std::function<lock_db&(std::string const&)> member;
    /// Builds the lock table's table-cache entries on a cluster node (a direct URL; see warm_trigger_cache) while
    /// the node's workers are kept off it: a node restarted during the run.
    std::function<void(std::string const&)> warm_node;
    /// The run's end: faults after it are not seen by the workers.
    std::chrono::steady_clock::time_point end;
};

/// A worker process of the run.
struct worker_proc {
    std::string name;
    pid_t pid = -1;
    bool running = false;
    bool stopped = false;
    bool killed = false;
    int slot = 0;
    int generation = 0;
    bool reaper = false;
};

class battery_run {
public:
    battery_run(scenario s, engine e) : s_(std::move(s)), e_(e) {}
    battery_run(battery_run const&) = delete;
    battery_run& operator=(battery_run const&) = delete;

    ~battery_run() {
        for (auto& w : workers_)
            if (w.running) {
                if (w.stopped || !s_.killpoint.empty() || s_.fault_after_grant) ::kill(w.pid, SIGCONT);
                ::kill(w.pid, SIGKILL);
                int st = 0;
                ::waitpid(w.pid, &st, 0);
            }
        cleanup_tables();
    }

    /// A check of the scenario's own, run after the checkers; each string it returns is a safety
    /// violation that fails the run (and keeps its directory).
    void set_extra_check(std::function<std::vector<std::string>(extra_check_input const&)> f) {
        extra_check_ = std::move(f);
    }

    /// Extra environment ("KEY=value") for the worker of one slot, its restarts included.
    void set_slot_env(int slot, std::vector<std::string> env) { slot_env_[slot] = std::move(env); }

    /// Runs the scenario and asserts what it says must hold. Call from a TEST body.
    void run_and_check() {
        seed_ = scenario_seed(s_.fixed_seed);
        bool retried = false;
        auto const began = std::chrono::steady_clock::now();
        bool const failed_before = ::testing::Test::HasFailure();  // an earlier scenario of the same test
        // The tier's end-of-run table (soak.hpp): one line however the scenario ends.
        struct summary_line {
            battery_run& r;
            bool const& retried;
            std::chrono::steady_clock::time_point began;
            bool failed_before;
            ~summary_line() {
                // This scenario's own verdict: a failure an earlier scenario of the test recorded is not its.
                std::string verdict = current_test_verdict();
                if (verdict == "FAILED" && failed_before && r.first_failure_.empty()) verdict = "passed";
                if (verdict == "passed" && retried) verdict = "passed-on-rerun (first run: " + r.first_miss_ + ")";
                if (verdict == "FAILED" && !r.first_failure_.empty()) verdict += ": " + r.first_failure_;
                record_scenario_summary(r.s_.id, r.seed_, r.grants_, std::move(verdict),
                                        std::chrono::steady_clock::now() - began);
            }
        } const summary{*this, retried, began, failed_before};
        for (;;) {
            outcome verdict = outcome::failed;
            last_attempt_ = retried;
            try {
                verdict = run_once();
            } catch (std::exception const& ex) {
                ADD_FAILURE() << s_.id << " on " << engine_label()
                              << ": the harness failed: " << sqlock_test::describe(ex);
                first_failure_ = "the harness failed";
                if (!dir_.empty() && fs::exists(dir_))
                    std::cout << "replay: build/tests/faults/sqlock_battery_check " << dir_.string() << std::endl;
                return;
            }
            if (::testing::Test::HasFatalFailure() || ::testing::Test::IsSkipped()) return;
            if (verdict == outcome::flaky_liveness && !retried) {
                std::cout << "[battery] " << s_.id << ": only liveness was missed (K6, or a failpoint never "
                          << "reached): rerunning once, reported as flaky\n";
                retried = true;
                ++seed_;
                reset_for_retry();
                continue;
            }
            return;
        }
    }

private:
    enum class outcome { ok, failed, flaky_liveness };

    std::string engine_label() const { return s_.majority ? "majority" : sqlock_test::engine_name(e_); }

    outcome run_once() {
        using namespace sqlock_test;
        dir_ = fs::temp_directory_path() / "sqlock-battery" /
               (s_.id + "-" + engine_label() + "-" + std::to_string(seed_) + "-" + random_hex(6));
        fs::create_directories(dir_);
        std::cout << "[battery] " << s_.id << " on " << engine_label() << ": seed " << seed_
                  << " (replay the schedule with SQLOCK_BATTERY_SEED=" << seed_ << "), run dir " << dir_.string()
                  << (soak_mode() ? ", soak durations" : "") << "\n";
        rng_.seed(seed_);
        tables_ = "sqlb_" + random_hex(10);
        res_tables_ = tables_ + "_res";
        lock_prefix_ = "b-" + random_hex(8) + "/";
        auto setup_stopped = [&] {
            if (!::testing::Test::HasFatalFailure() && !::testing::Test::IsSkipped()) return false;
            std::error_code ec;
            fs::remove_all(dir_, ec);  // nothing ran: nothing to replay
            return true;
        };
        open_databases();
        if (setup_stopped()) return outcome::failed;
        for (auto& d : dbs_)
            if (auto it = s_.member_delay.find(d.label); it != s_.member_delay.end() && d.proxy)
                d.proxy->delay(it->second);
        open_resource();
        if (setup_stopped()) return outcome::failed;

        nemesis_.open((dir_ / "nemesis.jsonl").string(), std::ios::app);
        realtime_minus_mono_ns_ = measure_realtime_minus_mono();
        duration_ = scaled(s_.duration);
        started_ = std::chrono::steady_clock::now();
        end_ = started_ + duration_;
        // The barrier: late enough for every worker to have started and connected.
        if (s_.start_barrier) start_mono_ns_ = raw_monotonic_ns() + 1'500'000'000;
        std::jthread sampler;
        if (s_.count_connections && !conn_marker_.empty())
            sampler = std::jthread([this](std::stop_token stop) { sample_connections(stop); });
        for (int i = 0; i < s_.processes; ++i) start_worker(i, 0);
        if (s_.reaper) start_reaper();
        drive_nemesis();
        wait_for_workers();
        if (sampler.joinable()) {
            sampler.request_stop();
            sampler.join();
        }
        return check();
    }

    // ---------------------------------------------------------------- databases

    void open_databases() {
        using namespace sqlock_test;
        if (s_.majority) {
            auto specs = s_.members;
            if (specs.empty()) specs = shared_majority_members();
            if (should_stop()) return;
            for (auto const& spec : specs) {
                lock_db d;
                d.label = spec.label;
                d.e = spec.e;
                d.url = spec.url;
                d.proxy = fault_proxy::for_url(d.url);
                d.worker_url = d.proxy->proxied_url(d.url);
                dbs_.push_back(std::move(d));
            }
        } else {
            lock_db d;
            d.e = e_;
            if (e_ == engine::sqlite) {
                d.url = sqlite_url(dir_ / "locks.db");
            } else if (!s_.worker_urls.empty()) {
                d.url = s_.worker_urls.front();
            } else {
                require_env(url_var(e_), d.url);
                if (should_stop()) return;
            }
            d.worker_url = worker_url_of(d);
            if (should_stop()) return;
            dbs_.push_back(std::move(d));
        }
        // The stores create the tables (and MariaDB's procedures) of the run's prefix; majority members
        // form their group before any fault and before the audit (docs/majority.md).
        std::vector<std::string> urls;
        for (auto& d : dbs_) {
            sqlock::store create(d.url, {.create_schema = true, .table_prefix = tables_});
            urls.push_back(d.url);
        }
        if (s_.majority) form_majority_group(urls, tables_);
        for (auto& d : dbs_) {
            d.raw = raw_session(d.e, d.url);
            if (d.e == engine::postgresql) *d.raw << "SET client_min_messages = warning";  // IF EXISTS notices
            install_audit(*d.raw, d.e, tables_);
            if (s_.row && s_.row_audit) install_row_audit(*d.raw, d.e, tables_);
            if (s_.coordination && s_.coordination->definitions) install_definitions_audit(*d.raw, d.e, tables_);
        }
        if (!s_.worker_urls.empty() && e_ == engine::mysql) await_triggers_on_every_node();
        if (!s_.mysql_globals.empty()) set_mysql_globals();
    }

    /// A cluster's other nodes create the audit's triggers a moment after the first (Galera applies DDL on each
    /// node in turn): a worker there that opened the lock table meanwhile would read a half-written trigger.
    /// Then every node parses the triggers while nothing else runs (warm_trigger_cache).
    void await_triggers_on_every_node() {
        std::string const count =
            "SELECT COUNT(*) FROM information_schema.TRIGGERS WHERE EVENT_OBJECT_SCHEMA = "
            "DATABASE() AND TRIGGER_NAME LIKE '" +
            tables_ + "%'";
        long long want = 0;
        *dbs_.front().raw << count, soci::into(want);
        for (auto const& url : s_.worker_urls) {
            auto node = sqlock_test::raw_session(e_, url);
            long long seen = -1;
            // Reading the triggers opens the table, which Galera aborts (1213) while the node applies DDL on it.
            bool const there = sqlock_test::eventually(
                [&] {
                    try {
                        *node << count, soci::into(seen);
                    } catch (soci::mysql_soci_error const& ex) {
                        if (ex.err_num_ != 1213) throw;
                        return false;
                    }
                    return seen == want;
                },
                30s);
            ASSERT_TRUE(there) << url << " shows " << seen << " of the run's " << want << " audit triggers after 30 s";
        }
        for (auto const& url : s_.worker_urls) warm_trigger_cache(url);
    }

    /// MariaDB parses a table's triggers each time it builds a table-cache entry for it and keeps that entry, parse
    /// error included, for every later statement. Built during a storm on a fresh cluster, an entry now and then
    /// got its triggers cut short ("Trigger ... has an error in its body", "Query was empty"; docs/ha/galera.md),
    /// and the node's DML failed on it for the rest of the run. So each node builds its entries of the lock table
    /// now, while no worker writes: as many as the node's clients and appliers can use at once, held together
    /// (LOCK TABLES READ) so that each is a separate entry, then checked by a DML that fires nothing. On a node
    /// of a cluster that takes writes (`live`: a node rejoining during the run) LOCK TABLES READ would hold off the
    /// node's appliers and deadlock with the next session's LOCK TABLES queued behind them, so each session holds
    /// its entry by HANDLER ... OPEN, which lets writers through.
    void warm_trigger_cache(std::string const& url, bool live = false) {
        std::size_t const nodes = s_.worker_urls.size();
        std::size_t const workers = (static_cast<std::size_t>(s_.processes) + nodes - 1) / nodes;
        std::size_t const entries =
            workers * static_cast<std::size_t>(s_.pool_size > 0 ? s_.pool_size : s_.threads + 4) + 8;
        std::vector<std::unique_ptr<soci::session>> holders;
        for (std::size_t i = 0; i < entries; ++i) {
            holders.push_back(sqlock_test::raw_session(e_, url));
            if (live) {
                *holders.back() << "SET SESSION lock_wait_timeout = 30";
                *holders.back() << "HANDLER " + tables_ + "_locks OPEN";
            } else {
                *holders.back() << "LOCK TABLES " + tables_ + "_locks READ";
            }
        }
        for (auto& h : holders) *h << (live ? "HANDLER " + tables_ + "_locks CLOSE" : std::string("UNLOCK TABLES"));
        for (auto& h : holders) {
            try {
                *h << "DELETE FROM " + tables_ + "_locks WHERE name = ''";
            } catch (std::exception const& ex) {
                FAIL() << url << ": the run's audit triggers did not load before the workers started: " << ex.what();
            }
        }
    }

    static std::string with_query(std::string url, std::string const& kv) {
        url += url.find('?') == std::string::npos ? "?" : "&";
        url += kv;
        return url;
    }

    /// The workers' URL of the lock database: the scenario's parameters, and the tag its connections
    /// are counted by (count_connections).
    std::string worker_url_of(lock_db const& d) {
        using namespace sqlock_test;
        std::string url = s_.worker_url.empty() ? d.url : s_.worker_url;
        if (!s_.url_params.empty()) url = with_query(url, s_.url_params);
        if (!(s_.count_connections || s_.tag_connections) || d.e == engine::sqlite) return url;
        conn_marker_ = "sqlb_" + random_hex(12);
        if (d.e == engine::postgresql) return with_query(url, "application_name=" + conn_marker_);
        // MariaDB shows no client name: the run's workers log in as a user of their own.
        auto root = mysql_root();
        if (!root) return url;
        std::string const password = random_hex(16);
        *root << "CREATE USER '" + conn_marker_ + "'@'127.0.0.1' IDENTIFIED BY '" + password + "', '" + conn_marker_ +
                     "'@'localhost' IDENTIFIED BY '" + password + "'";
        mysql_user_ = conn_marker_;
        *root << "GRANT ALL ON `" + parse_server_url(d.url).db + "`.* TO '" + conn_marker_ + "'@'127.0.0.1', '" +
                     conn_marker_ + "'@'localhost'";
        return with_password(d.url, conn_marker_, password);
    }

    /// MariaDB's root over the socket (SQLOCK_TEST_MYSQL_SOCKET): users and global variables.
    std::unique_ptr<soci::session> mysql_root() {
        using namespace sqlock_test;
        std::string sock, url;
        require_env("SQLOCK_TEST_MYSQL_SOCKET", sock);
        require_env(url_var(engine::mysql), url);
        if (should_stop()) return nullptr;
        return std::make_unique<soci::session>(*soci::factory_mysql(), "unix_socket=" + mysql_quote_param(sock) +
                                                                           " user='root' dbname=" +
                                                                           mysql_quote_param(parse_server_url(url).db));
    }

    void set_mysql_globals() {
        auto root = mysql_root();
        if (!root) return;
        for (auto const& [name, value] : s_.mysql_globals) {
            std::string before;
            *root << "SELECT CAST(@@GLOBAL." + name + " AS CHAR)", soci::into(before);
            saved_globals_.emplace_back(name, "'" + before + "'");
            *root << "SET GLOBAL " + name + " = " + value;
            std::cout << "[battery] " << s_.id << ": SET GLOBAL " << name << " = " << value << " (was " << before
                      << ")\n";
        }
    }

    /// Counts the tagged connections of the workers every 50 ms until stopped: the server's sessions whose
    /// client end is still open (the stores' connections); the most seen goes to max_connections_. A
    /// statement cut at its deadline closes its connection at once, but the server keeps its session
    /// until that statement ends (a release's KILL QUERY queued 3 s on a loaded server): the most
    /// sessions seen go to max_server_sessions_, reported only.
    void sample_connections(std::stop_token stop) {
        lock_db const& d = dbs_.front();
        try {
            auto s = sqlock_test::raw_session(d.e, d.url);
            int const server_port = std::stoi(sqlock_test::parse_server_url(d.url).port);
            std::string const sql =
                d.e == engine::postgresql
                    ? "SELECT CAST(client_port AS bigint) FROM pg_stat_activity WHERE application_name = :m"
                    : "SELECT CAST(SUBSTRING_INDEX(HOST, ':', -1) AS SIGNED) FROM information_schema.PROCESSLIST"
                      " WHERE USER = :m";
            while (!stop.stop_requested()) {
                std::vector<long long> ports(4096);
                *s << sql, soci::use(conn_marker_), soci::into(ports);
                auto const open = established_ports_to(server_port);
                long long const n = std::count_if(ports.begin(), ports.end(),
                                                  [&](long long p) { return open.count(static_cast<int>(p)) > 0; });
                max_connections_ = std::max<long long>(max_connections_, n);
                max_server_sessions_ = std::max<long long>(max_server_sessions_, static_cast<long long>(ports.size()));
                ++connection_samples_;
                std::this_thread::sleep_for(50ms);
            }
        } catch (std::exception const& ex) {
            connection_error_ = ex.what();
        }
    }

    void open_resource() {
        using namespace sqlock_test;
        if (!s_.fenced) return;
        if (e_ == engine::sqlite && !s_.majority) {
            res_engine_ = engine::sqlite;
            res_url_ = sqlite_url(dir_ / "resource.db");
            res_backend_ = "sqlite3";
            res_connect_ = "db=" + (dir_ / "resource.db").string() + " timeout=30";
        } else {
            res_engine_ = engine::postgresql;
            require_env("SQLOCK_TEST_PG2_URL", res_url_);
            if (should_stop()) return;
            res_backend_ = "postgresql";
            auto p = parse_server_url(res_url_);
            res_connect_ = "host=" + pg_quote_param(p.host) + " dbname=" + pg_quote_param(p.db) +
                           " user=" + pg_quote_param(p.user) + " password=" + pg_quote_param(p.password);
            if (!p.port.empty()) res_connect_ += " port=" + p.port;
        }
        sqlock::store create(res_url_, {.create_schema = true, .table_prefix = res_tables_});
        res_raw_ = raw_session(res_engine_, res_url_);
        *res_raw_ << "CREATE TABLE IF NOT EXISTS " + res_tables_ +
                         "_values (lock_name TEXT PRIMARY KEY, value BIGINT NOT NULL)";
    }

    void drop_prefix(soci::session& s, engine e, std::string const& prefix, bool audited) {
        if (e == engine::sqlite) return;                                        // the file goes with the run dir
        if (e == engine::postgresql) s << "SET client_min_messages = warning";  // no NOTICE per missing object
        if (audited) drop_audit(s, e, prefix);
        if (audited && s_.coordination && s_.coordination->definitions) drop_definitions_audit(s, e, prefix);
        for (auto const* t : {"_locks", "_tokens", "_fences", "_rows", "_majority_tokens", "_identity",
                              "_majority_members", "_semaphores", "_values"})
            s << "DROP TABLE IF EXISTS " + prefix + t;
        if (e == engine::mysql)
            for (auto const* r : {"_acquire_v2", "_acquire_shared", "_acquire", "_renew"})
                s << "DROP PROCEDURE IF EXISTS " + prefix + r;
    }

    void cleanup_tables() {
        if (!saved_globals_.empty() || !mysql_user_.empty()) {
            try {
                auto root = mysql_root();
                for (auto const& [name, value] : saved_globals_) *root << "SET GLOBAL " + name + " = " + value;
                if (!mysql_user_.empty())
                    *root << "DROP USER IF EXISTS '" + mysql_user_ + "'@'127.0.0.1', '" + mysql_user_ + "'@'localhost'";
            } catch (std::exception const& ex) {
                ADD_FAILURE() << "could not restore MariaDB's global variables or drop the run's user " << mysql_user_
                              << ": " << ex.what();
            }
            saved_globals_.clear();
            mysql_user_.clear();
        }
        for (auto& d : dbs_) {
            if (!d.raw) continue;
            try {
                drop_prefix(*d.raw, d.e, tables_, true);
            } catch (std::exception const& ex) {
                ADD_FAILURE() << "could not drop the run's tables " << tables_ << "_* on " << d.url << ": "
                              << ex.what();
            }
        }
        if (res_raw_) {
            try {
                drop_prefix(*res_raw_, res_engine_, res_tables_, false);
            } catch (std::exception const& ex) {
                ADD_FAILURE() << "could not drop the resource tables " << res_tables_ << "_*: " << ex.what();
            }
        }
    }

    void reset_for_retry() {
        cleanup_tables();
        for (auto& d : dbs_) d.raw.reset();
        dbs_.clear();
        res_raw_.reset();
        workers_.clear();
        exits_.clear();
        killpoint_hits_ = 0;
        fault_bag_.clear();
        max_connections_ = 0;
        max_server_sessions_ = 0;
        connection_samples_ = 0;
        connection_error_.clear();
        nemesis_.close();
    }

    // ---------------------------------------------------------------- processes

    std::vector<std::string> worker_args(worker_proc const& w) {
        auto ms = [](milliseconds d) { return std::to_string(d.count()); };
        auto left = std::chrono::duration_cast<milliseconds>(end_ - std::chrono::steady_clock::now());
        if (left < 0ms) left = 0ms;
        std::vector<std::string> a{SQLOCK_BATTERY_WORKER,
                                   "--name",
                                   w.name,
                                   "--history",
                                   (dir_ / ("history-" + w.name + ".jsonl")).string(),
                                   "--run-dir",
                                   dir_.string(),
                                   "--tables",
                                   tables_,
                                   "--lock-prefix",
                                   lock_prefix_,
                                   "--duration-ms",
                                   ms(left),
                                   "--seed",
                                   std::to_string(seed_ * 131 + static_cast<std::uint64_t>(w.slot) * 17 +
                                                  static_cast<std::uint64_t>(w.generation)),
                                   "--lock-wait-timeout-ms",
                                   ms(s_.lock_wait_timeout),
                                   "--io-timeout-ms",
                                   ms(s_.io_timeout)};
        for (auto const& d : dbs_) {
            a.push_back("--url");
            a.push_back(s_.worker_urls.empty()
                            ? d.worker_url
                            : s_.worker_urls[static_cast<std::size_t>(w.slot) % s_.worker_urls.size()]);
        }
        if (w.reaper) {
            a.insert(a.end(), {"--mode", "reaper", "--reaper-interval-ms", ms(s_.reaper_interval), "--reaper-grace-ms",
                               ms(s_.reaper_grace), "--reaper-batch", std::to_string(s_.reaper_batch),
                               "--token-horizon-ms", s_.token_horizon ? ms(*s_.token_horizon) : "-1"});
            return a;
        }
        a.insert(a.end(), {"--threads", std::to_string(s_.threads), "--locks", std::to_string(s_.locks), "--ttl-ms",
                           ms(s_.ttl), "--acquire-wait-ms", ms(s_.acquire_wait), "--cs-max-us",
                           std::to_string(s_.cs_max_us), "--hold-min-ms", ms(s_.hold_min), "--hold-max-ms",
                           ms(s_.hold_max), "--abandon-pct", std::to_string(s_.abandon_pct)});
        if (s_.no_renew) a.push_back("--no-renew");
        if (s_.pool_size > 0) a.insert(a.end(), {"--pool-size", std::to_string(s_.pool_size)});
        if (s_.own_lock) a.insert(a.end(), {"--own-lock", "--lock-offset", std::to_string(w.slot * s_.threads)});
        if (s_.rounds > 0) a.insert(a.end(), {"--rounds", std::to_string(s_.rounds)});
        if (s_.mixed) a.insert(a.end(), {"--mixed", "--ttl-min-ms", ms(s_.ttl_min)});
        if (s_.fuzz) a.insert(a.end(), {"--fuzz", "--fork-pct", std::to_string(s_.fork_pct)});
        if (s_.think_max > 0ms) a.insert(a.end(), {"--think-max-ms", ms(s_.think_max)});
        if (s_.log_busy) a.push_back("--log-busy");
        if (s_.fault_after_grant && w.slot == s_.fault_slot && w.generation == 0) a.push_back("--stop-after-grant");
        if (s_.single_try) a.push_back("--single-try");
        if (s_.round > 0ms) a.insert(a.end(), {"--round-ms", ms(s_.round)});
        if (s_.linger > 0ms) a.insert(a.end(), {"--linger-ms", ms(s_.linger)});
        if (start_mono_ns_ > 0) {
            a.push_back("--start-mono-ns");
            a.push_back(std::to_string(start_mono_ns_));
        }
        if (s_.row) a.push_back("--row");
        if (s_.majority && s_.member_timeout > 0ms) {
            a.push_back("--member-timeout-ms");
            a.push_back(ms(s_.member_timeout));
        }
        if (s_.fenced) {
            a.insert(a.end(), {"--resource-backend", res_backend_, "--resource-connect", res_connect_,
                               "--resource-tables", res_tables_});
        }
        return a;
    }

    void spawn(worker_proc& w, std::vector<std::string> const& extra_env) {
        std::vector<std::string> env;
        for (char** e = environ; *e != nullptr; ++e) {
            std::string kv = *e;
            if (kv.rfind("SQLOCK_FAILPOINTS=", 0) == 0) continue;
            // A variable the scenario sets replaces this process's own.
            auto const key = kv.substr(0, kv.find('=') + 1);
            if (std::any_of(extra_env.begin(), extra_env.end(), [&](auto const& x) { return x.rfind(key, 0) == 0; }))
                continue;
            env.push_back(kv);
        }
        env.insert(env.end(), extra_env.begin(), extra_env.end());
        sqlock_test::spawn_file_actions fa;
        fa.capture_to_files(dir_ / (w.name + ".out"), dir_ / (w.name + ".err"));
        w.pid = sqlock_test::spawn_process(worker_args(w), env, fa.get());
        w.running = true;
    }

    void start_worker(int slot, int generation) {
        worker_proc w;
        w.slot = slot;
        w.generation = generation;
        w.name = "w" + std::to_string(slot) + (generation > 0 ? "." + std::to_string(generation) : "");
        auto env = s_.worker_env;
        if (auto it = slot_env_.find(slot); it != slot_env_.end())
            env.insert(env.end(), it->second.begin(), it->second.end());
        if (!s_.killpoint.empty() && slot == s_.killpoint_slot && generation == 0)
            env.push_back("SQLOCK_FAILPOINTS=" + s_.killpoint + "=stop");
        spawn(w, env);
        workers_.push_back(w);
    }

    void start_reaper() {
        worker_proc w;
        w.name = "reaper";
        w.reaper = true;
        spawn(w, s_.reaper_env);
        workers_.push_back(w);
    }

    /// Reaps exited children without blocking; records how they ended.
    void poll_children() {
        for (auto& w : workers_) {
            if (!w.running) continue;
            int st = 0;
            if (::waitpid(w.pid, &st, WNOHANG) == w.pid) {
                w.running = false;
                exits_[w.name] = st;
            }
        }
    }

    void log_nemesis(std::string fault, std::string target, std::string phase, std::string detail = {}) {
        nemesis_event ev{std::move(fault), std::move(target), std::move(phase), raw_monotonic_ns(), std::move(detail)};
        nemesis_ << to_json(ev).dump() << '\n' << std::flush;
    }

    milliseconds pick_interval() {
        return milliseconds(
            std::uniform_int_distribution<long long>(s_.interval_min.count(), s_.interval_max.count())(rng_));
    }

    worker_proc* pick_running_worker() {
        std::vector<worker_proc*> live;
        for (auto& w : workers_)
            if (w.running && !w.reaper && !w.stopped) live.push_back(&w);
        if (live.empty()) return nullptr;
        return live[std::uniform_int_distribution<std::size_t>(0, live.size() - 1)(rng_)];
    }

    /// A running worker that holds a lock right now (by the lock table: owners are
    /// "<worker>.<pid>.t<k>"), so that a pause catches a holder; else any running worker.
    worker_proc* pick_holder() {
        std::vector<worker_proc*> holders;
        try {
            auto& d = dbs_.front();
            std::vector<std::string> owners(256);
            *d.raw << "SELECT owner FROM " + tables_ + "_locks WHERE expires_at > " +
                          (d.e == engine::postgresql ? std::string("clock_timestamp()")
                           : d.e == engine::mysql    ? std::string("NOW(6)")
                                                     : audit_now_us_sql(d.e)),
                soci::into(owners);
            for (auto const& o : owners)
                for (auto& w : workers_)
                    if (w.running && !w.reaper && !w.stopped &&
                        o.rfind(w.name + "." + std::to_string(w.pid) + ".", 0) == 0)
                        holders.push_back(&w);
        } catch (std::exception const& ex) {
            std::cout << "[battery] could not read the holders (" << ex.what() << "): pausing a random worker\n";
        }
        if (holders.empty()) return pick_running_worker();
        return holders[std::uniform_int_distribution<std::size_t>(0, holders.size() - 1)(rng_)];
    }

    void sleep_until(std::chrono::steady_clock::time_point t) {
        while (std::chrono::steady_clock::now() < t) {
            if (auto* w = stopped_after_grant()) ::kill(w->pid, SIGCONT);  // a fault is under way already
            poll_children();
            std::this_thread::sleep_for(
                std::min<std::chrono::steady_clock::duration>(20ms, t - std::chrono::steady_clock::now()));
        }
    }

    void drive_nemesis() {
        using clock = std::chrono::steady_clock;
        if (s_.nemesis_script) {
            nemesis_ctl ctl;
            ctl.log = [this](std::string f, std::string t, std::string p, std::string d) {
                log_nemesis(std::move(f), std::move(t), std::move(p), std::move(d));
            };
            ctl.sleep = [this](milliseconds d) { sleep_until(std::min(clock::now() + d, end_)); };
            ctl.member = [this](std::string const& label) -> lock_db& {
                for (auto& d : dbs_)
                    if (d.label == label) return d;
                throw std::invalid_argument("the nemesis script names no member of the run: " + label);
            };
            ctl.warm_node = [this](std::string const& url) { warm_trigger_cache(url, true); };
            ctl.end = end_;
            s_.nemesis_script(ctl);
            // The members may have restarted: the checks and the cleanup read them on new sessions.
            for (auto& d : dbs_) {
                d.raw = sqlock_test::raw_session(d.e, d.url);
                if (d.e == engine::postgresql) *d.raw << "SET client_min_messages = warning";  // IF EXISTS notices
            }
            sleep_until(end_);
            return;
        }
        if (s_.nemesis == nemesis_kind::none && !s_.restart_crashed && s_.killpoint.empty() && !s_.fault_after_grant)
            return;
        // Faults only in the first part of the run, so that the last part shows recovery.
        auto const quiet = end_ - std::max<clock::duration>(s_.ttl * 2, duration_ / 5);
        struct pending_restart {
            clock::time_point at;
            int slot;
            int generation;
        };
        std::vector<pending_restart> restarts;
        auto next = clock::now() + pick_interval() / 2;
        while (clock::now() < end_) {
            if (!s_.killpoint.empty())
                if (auto gen = watch_killpoint())
                    restarts.push_back({clock::now() + s_.restart_delay, s_.killpoint_slot, *gen});
            auto now = clock::now();
            if (s_.restart_crashed) {
                for (std::size_t i = 0; i < workers_.size(); ++i) {
                    auto& w = workers_[i];
                    if (w.running || w.killed || w.reaper || exits_.count(w.name) == 0) continue;
                    int st = exits_[w.name];
                    if (!(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL)) continue;
                    w.killed = true;
                    log_nemesis("kill", w.name, "instant", "died at a failpoint (SIGKILL)");
                    restarts.push_back({now + s_.restart_delay, w.slot, w.generation + 1});
                }
            }
            for (auto it = restarts.begin(); it != restarts.end();) {
                if (it->at <= now && now < end_ - 1s) {
                    start_worker(it->slot, it->generation);
                    log_nemesis("restart", workers_.back().name, "instant");
                    it = restarts.erase(it);
                } else {
                    ++it;
                }
            }
            // With fault_after_grant, a fault starts only while the worker is stopped after a grant.
            worker_proc* synced = s_.fault_after_grant ? stopped_after_grant() : nullptr;
            if (synced != nullptr && !(now >= next && now < quiet)) {
                ::kill(synced->pid, SIGCONT);
                synced = nullptr;
            }
            if (now >= next && now < quiet && (!s_.fault_after_grant || synced != nullptr)) {
                next = now + pick_interval();
                // The fault is in place: let the worker that was just granted go on into it.
                auto const fault_begun = [&] {
                    auto* w = std::exchange(synced, nullptr);
                    if (w != nullptr && w->running && !w->stopped)
                        ::kill(w->pid, SIGCONT);  // not one the fault stopped or killed
                };
                switch (s_.nemesis) {
                    case nemesis_kind::kill_restart: kill_and_schedule_restart(pick_running_worker(), restarts); break;
                    case nemesis_kind::mixed_faults: {
                        // Each kind once per round, in a random order: every run meets all of them.
                        if (fault_bag_.empty()) {
                            fault_bag_ = {0, 1};
                            if (dbs_.front().e != engine::sqlite) fault_bag_.push_back(2);
                            std::shuffle(fault_bag_.begin(), fault_bag_.end(), rng_);
                        }
                        int const kind = fault_bag_.back();
                        fault_bag_.pop_back();
                        switch (kind) {
                            case 0: kill_and_schedule_restart(pick_holder(), restarts); break;
                            case 1: stop_holder(); break;
                            default: kill_session(); break;
                        }
                        break;
                    }
                    case nemesis_kind::stop_cont: stop_holder(fault_begun); break;
                    case nemesis_kind::stall_member: {
                        auto& d = dbs_[std::uniform_int_distribution<std::size_t>(0, dbs_.size() - 1)(rng_)];
                        d.proxy->stall();
                        log_nemesis("stall", d.label, "start", "fault proxy stalled");
                        fault_begun();
                        sleep_until(std::min(clock::now() + s_.stop_for, end_));
                        d.proxy->resume();
                        log_nemesis("stall", d.label, "stop", "fault proxy resumed");
                        break;
                    }
                    case nemesis_kind::stall_two_members: {
                        std::vector<std::size_t> idx(dbs_.size());
                        for (std::size_t i = 0; i < idx.size(); ++i) idx[i] = i;
                        std::shuffle(idx.begin(), idx.end(), rng_);
                        idx.resize(std::min<std::size_t>(2, idx.size()));
                        for (auto i : idx) {
                            dbs_[i].proxy->stall();
                            log_nemesis("stall", dbs_[i].label, "start", "fault proxy stalled");
                        }
                        fault_begun();
                        sleep_until(std::min(clock::now() + s_.stop_for, end_));
                        for (auto i : idx) {
                            dbs_[i].proxy->resume();
                            log_nemesis("stall", dbs_[i].label, "stop", "fault proxy resumed");
                        }
                        break;
                    }
                    case nemesis_kind::block_member: {
                        auto& d = dbs_[std::uniform_int_distribution<std::size_t>(0, dbs_.size() - 1)(rng_)];
                        d.proxy->block();
                        log_nemesis("block", d.label, "start", "fault proxy refuses connections");
                        fault_begun();
                        sleep_until(std::min(clock::now() + s_.stop_for, end_));
                        d.proxy->unblock();
                        log_nemesis("block", d.label, "stop", "fault proxy forwards again");
                        break;
                    }
                    case nemesis_kind::none: break;
                }
                fault_begun();
            }
            sleep_until(std::min(clock::now() + 20ms, end_));
        }
    }

    /// The fault_after_grant worker (generation 0 of fault_slot) if it is stopped after a grant right
    /// now (its stop is consumed: the caller must let it go on); records its exit if it ended.
    worker_proc* stopped_after_grant() {
        if (!s_.fault_after_grant) return nullptr;
        for (auto& w : workers_) {
            if (w.reaper || w.slot != s_.fault_slot || w.generation != 0 || !w.running) continue;
            int st = 0;
            if (::waitpid(w.pid, &st, WNOHANG | WUNTRACED) != w.pid) return nullptr;
            if (WIFSTOPPED(st)) return &w;
            w.running = false;
            exits_[w.name] = st;
            return nullptr;
        }
        return nullptr;
    }

    /// The killpoint worker (generation 0 of killpoint_slot): if it stopped at its failpoint, let it
    /// go on or kill it (see scenario::killpoint). Returns the generation to restart after a kill.
    /// After the run's end (may_kill false) it is only let go on, so that it can finish.
    std::optional<int> watch_killpoint(bool may_kill = true) {
        for (auto& w : workers_) {
            if (w.reaper || w.slot != s_.killpoint_slot || w.generation != 0 || !w.running) continue;
            int st = 0;
            pid_t const r = ::waitpid(w.pid, &st, WNOHANG | WUNTRACED);
            if (r != w.pid) return std::nullopt;
            if (!WIFSTOPPED(st)) {  // it ended: as poll_children would record it
                w.running = false;
                exits_[w.name] = st;
                return std::nullopt;
            }
            if (!may_kill || ++killpoint_hits_ < s_.killpoint_after) {
                ::kill(w.pid, SIGCONT);
                return std::nullopt;
            }
            log_nemesis("kill", w.name, "instant",
                        "SIGKILL pid " + std::to_string(w.pid) + " stopped at failpoint " + s_.killpoint + " (hit " +
                            std::to_string(killpoint_hits_) + ")");
            ::kill(w.pid, SIGKILL);
            ::waitpid(w.pid, &st, 0);
            w.running = false;
            w.killed = true;
            exits_[w.name] = st;
            std::cout << "[battery] " << s_.id << ": killed " << w.name << " at failpoint " << s_.killpoint << " (hit "
                      << killpoint_hits_ << ")\n";
            return 1;
        }
        return std::nullopt;
    }

    void wait_for_workers() {
        // Workers stop on their own at the end of the duration; an acquire in flight may take up to
        // its wait, a hold its hold, a release its io bound. Counted from the scenario's end, not from
        // this call: a scenario without a nemesis loop (the fork nemesis) calls it long before its end,
        // and under SQLOCK_SOAK=1 (ten times the duration) the limit fell before the workers' own end
        // (issue 39).
        auto const limit = std::max(std::chrono::steady_clock::now(), end_) + s_.acquire_wait + s_.hold_max +
                           s_.io_timeout * 3 + s_.linger + 60s;
        for (;;) {
            if (!s_.killpoint.empty()) (void)watch_killpoint(false);
            if (auto* w = stopped_after_grant()) ::kill(w->pid, SIGCONT);
            poll_children();
            bool any = false;
            for (auto const& w : workers_) any = any || w.running;
            if (!any) break;
            if (std::chrono::steady_clock::now() > limit) {
                for (auto& w : workers_)
                    if (w.running) {
                        ADD_FAILURE() << "worker " << w.name << " (pid " << w.pid
                                      << ") did not finish in time: killed; see "
                                      << (dir_ / (w.name + ".err")).string();
                        ::kill(w.pid, SIGKILL);
                        int st = 0;
                        ::waitpid(w.pid, &st, 0);
                        w.running = false;
                    }
                break;
            }
            std::this_thread::sleep_for(50ms);
        }
    }

    /// SIGKILLs `w` (none: nothing) and schedules its restart, new owners, after restart_delay.
    template <class Restarts>
    void kill_and_schedule_restart(worker_proc* w, Restarts& restarts) {
        if (w == nullptr) return;
        ::kill(w->pid, SIGKILL);
        log_nemesis("kill", w->name, "instant", "SIGKILL pid " + std::to_string(w->pid));
        int st = 0;
        ::waitpid(w->pid, &st, 0);
        w->running = false;
        w->killed = true;
        exits_[w->name] = st;
        int gen = 0;
        for (auto const& o : workers_)
            if (!o.reaper && o.slot == w->slot) gen = std::max(gen, o.generation + 1);
        restarts.push_back({std::chrono::steady_clock::now() + s_.restart_delay, w->slot, gen});
    }

    /// SIGSTOPs a holder (pick_holder) for stop_for, then SIGCONTs it.
    /// `begun`, when given, is called once the holder is stopped (scenario::fault_after_grant).
    void stop_holder(std::function<void()> const& begun = {}) {
        auto* w = pick_holder();
        if (w == nullptr) return;
        ::kill(w->pid, SIGSTOP);
        w->stopped = true;
        log_nemesis("stop", w->name, "start", "SIGSTOP pid " + std::to_string(w->pid));
        if (begun) begun();
        sleep_until(std::min(std::chrono::steady_clock::now() + s_.stop_for, end_));
        ::kill(w->pid, SIGCONT);
        w->stopped = false;
        log_nemesis("stop", w->name, "stop", "SIGCONT pid " + std::to_string(w->pid));
    }

    /// Ends one server session of the run's workers (tag_connections), a holder's when one is in a
    /// transaction (a row lock's): PostgreSQL pg_terminate_backend, MariaDB KILL CONNECTION as root.
    void kill_session() {
        auto& d = dbs_.front();
        if (conn_marker_.empty() || d.e == engine::sqlite) return;
        try {
            std::vector<long long> ids(512);
            std::unique_ptr<soci::session> root;
            soci::session* s = d.raw.get();
            if (d.e == engine::postgresql) {
                *s << "SELECT pid FROM pg_stat_activity WHERE application_name = :m ORDER BY "
                      "(state = 'idle in transaction') DESC, random() LIMIT 512",
                    soci::use(conn_marker_), soci::into(ids);
            } else {
                root = mysql_root();
                s = root.get();
                *s << "SELECT p.ID FROM information_schema.PROCESSLIST p LEFT JOIN information_schema.INNODB_TRX t "
                      "ON t.trx_mysql_thread_id = p.ID WHERE p.USER = :m ORDER BY t.trx_id IS NULL, RAND() LIMIT 512",
                    soci::use(conn_marker_), soci::into(ids);
            }
            if (ids.empty()) return;
            // The first is a holder's when any session is in a transaction; otherwise any session.
            long long const id = ids.front();
            if (d.e == engine::postgresql) *s << "SELECT pg_terminate_backend(" + std::to_string(id) + ")";
            else *s << "KILL CONNECTION " + std::to_string(id);
            log_nemesis("session-kill", sqlock_test::engine_name(d.e), "instant",
                        "server session " + std::to_string(id));
        } catch (std::exception const& ex) {
            std::cout << "[battery] session kill failed (" << ex.what() << "): skipped\n";
        }
    }

    // ---------------------------------------------------------------- the checks

    outcome check() {
        // The audit of every lock database, the rows left, the counters.
        std::vector<audit_row> audit;
        std::vector<audit_row> remaining;
        std::vector<audit_row> definitions;  // a semaphore's N as stored, forgotten and stored anew
        for (auto& d : dbs_) {
            auto a = dump_audit(*d.raw, d.e, tables_, d.label);
            write_audit((dir_ / ("audit" + (d.label.empty() ? "" : "-" + d.label) + ".jsonl")).string(), a);
            audit.insert(audit.end(), a.begin(), a.end());
            auto r = lock_table_rows(*d.raw, d.e, tables_, d.label);
            write_audit((dir_ / "remaining.jsonl").string(), r);
            remaining.insert(remaining.end(), r.begin(), r.end());
            if (s_.coordination && s_.coordination->definitions) {
                auto defs = dump_definitions(*d.raw, d.e, tables_, d.label);
                write_audit((dir_ / "definitions.jsonl").string(), defs);
                definitions.insert(definitions.end(), defs.begin(), defs.end());
            }
        }
        std::vector<event> history;
        for (auto const& entry : fs::directory_iterator(dir_)) {
            auto const fname = entry.path().filename().string();
            if (fname.rfind("history-", 0) == 0 && entry.path().extension() == ".jsonl") {
                auto h = read_history(entry.path().string());
                history.insert(history.end(), h.begin(), h.end());
            }
        }
        std::map<std::string, std::int64_t> fenced_values;
        if (s_.k4_fenced && res_raw_) {
            soci::rowset<soci::row> rows =
                (res_raw_->prepare << "SELECT lock_name, value FROM " + res_tables_ + "_values");
            for (auto const& row : rows) fenced_values[row.get<std::string>(0)] = row.get<long long>(1);
            for (int i = 0; i < s_.locks; ++i) fenced_values.try_emplace(lock_prefix_ + "L" + std::to_string(i), 0);
        }
        std::map<std::string, std::int64_t> counters;
        for (int i = 0; i < s_.locks; ++i) {
            std::ifstream in(dir_ / ("counter-" + std::to_string(i)));
            long long v = 0;
            if (in) in >> v;
            counters[lock_prefix_ + "L" + std::to_string(i)] = v;
        }
        // A worker that died of SIGKILL at a failpoint after the nemesis stopped watching is a kill too.
        if (s_.restart_crashed)
            for (auto& w : workers_)
                if (auto it = exits_.find(w.name);
                    it != exits_.end() && WIFSIGNALED(it->second) && WTERMSIG(it->second) == SIGKILL)
                    w.killed = true;
        // Owners whose rows may legitimately outlive the run: killed processes' and abandoned leases'.
        std::set<std::string> killed_procs;
        for (auto const& w : workers_)
            if (w.killed) killed_procs.insert(w.name);
        std::set<std::string> excused;
        for (auto const& ev : history)
            if (killed_procs.count(ev.proc) != 0 || ev.op == "abandon" || ev.op == "lost")
                if (!ev.owner.empty()) excused.insert(ev.owner);
        std::vector<std::string> live_owners(excused.begin(), excused.end());

        nlohmann::json final{{"scenario", s_.id},
                             {"engine", engine_label()},
                             {"seed", seed_},
                             {"counters", counters},
                             {"live_owners", live_owners},
                             {"ttl_ms", s_.ttl.count()},
                             {"k2_expect_zero", s_.k2},
                             {"realtime_minus_mono_ns", realtime_minus_mono_ns_},
                             {"asserted", asserted_list()}};
        // The rows left are in remaining.jsonl (check_directory adds final.json's "remaining" to them: not both).
        if (s_.k6) final["k6_bound_ms"] = s_.k6_bound_ms;
        if (s_.coordination) final["coordination"] = to_json(*s_.coordination);
        std::ofstream(dir_ / "final.json") << final.dump(2) << '\n';

        std::vector<std::string> worker_failures;
        for (auto const& [name, st] : exits_) {
            bool killed = false;
            for (auto const& w : workers_)
                if (w.name == name && w.killed) killed = true;
            if (!killed && !(WIFEXITED(st) && WEXITSTATUS(st) == 0))
                worker_failures.push_back(name + ": " + sqlock_test::exit_text(st) + ": " +
                                          sqlock_test::slurp(dir_ / (name + ".err")));
        }

        struct item {
            report r;
            bool asserted;
            bool safety;
        };
        std::vector<item> reports;
        reports.push_back({k1_db_disjoint(audit), s_.k1, true});
        reports.push_back({k2_belief_overlap(history, s_.k2), s_.k2, true});
        reports.push_back({k3_fenced(history), s_.k3, true});
        if (s_.k4 || !counters.empty()) reports.push_back({k4_counter(history, counters), s_.k4, true});
        reports.push_back({k5_sequencing(history), s_.k5, true});
        if (s_.k4_fenced) {
            // K4 over the fenced resource's own counter: the accepted writes stand in for the sections.
            std::vector<event> fenced;
            for (auto const& ev : history)
                if (ev.op == "write_fenced") {
                    fenced.push_back(ev);
                    fenced.back().op = "write_unfenced";
                }
            auto k4f = k4_counter(fenced, fenced_values);
            k4f.checker = "K4-fenced";
            reports.push_back({std::move(k4f), true, true});
        }
        if (s_.k6_from_abandons) {
            for (auto const& ev : history)
                if (ev.op == "lost" && ev.error.rfind("abandoned by the worker", 0) == 0)
                    nemesis_ << to_json(nemesis_event{"abandon", ev.proc, "instant", ev.mono_ns, ev.lock}).dump()
                             << '\n';
            nemesis_ << std::flush;
        }
        if (s_.count_connections) {
            report conn{"connections", {}, {}};
            if (e_ == engine::sqlite || s_.majority) {
                conn.counts["not_counted"] = 1;  // no server to ask
            } else {
                // Each worker's store: its pool, 2 reserved connections, and the release listener's
                // connection (PostgreSQL's LISTEN; MariaDB's parked SLEEP since issue 21).
                long long const per_worker = (s_.pool_size > 0 ? s_.pool_size : s_.threads + 4) + 2 + 1;
                long long const limit = s_.processes * per_worker + (s_.reaper ? 4 + 1 : 0);
                conn.counts["max"] = max_connections_;
                conn.counts["server_sessions_max"] = max_server_sessions_;
                conn.counts["limit"] = limit;
                conn.counts["samples"] = connection_samples_;
                if (!connection_error_.empty() || connection_samples_ == 0)
                    conn.violations.push_back({"connections", "the server's connections could not be counted: " +
                                                                  (connection_error_.empty() ? std::string("no sample")
                                                                                             : connection_error_)});
                else if (max_server_sessions_ > 0 && max_connections_ == 0)
                    conn.violations.push_back(
                        {"connections", "the workers' " + std::to_string(max_server_sessions_) +
                                            " server sessions matched no socket of this machine "
                                            "(/proc/net/tcp): their connections were not counted"});
                else if (max_connections_ > limit)
                    conn.violations.push_back(
                        {"connections", std::to_string(max_connections_) +
                                            " connections of the run's workers open on the server, "
                                            "above the stores' limit " +
                                            std::to_string(limit) + " (processes × (pool_size + 2 reserved" +
                                            " + 1 listener)" + (s_.reaper ? " + the reaper's)" : ")")});
            }
            reports.push_back({std::move(conn), true, true});
        }
        if (s_.k6) {
            std::vector<nemesis_event> nem = read_nemesis((dir_ / "nemesis.jsonl").string());
            reports.push_back({k6_availability(history, nem, s_.k6_bound_ms), true, false});
        }
        reports.push_back({k7_tokens(audit, history), s_.k7, true});
        if (s_.majority) {
            // The audit holds the members' own tokens; the majority tokens the clients got are in the
            // history: each grant's above every grant that completed before it was asked for.
            auto majority_tokens = k7_tokens({}, history);
            majority_tokens.checker = "K7-majority";
            reports.push_back({std::move(majority_tokens), s_.k7, true});
        }
        reports.push_back({k8_leftovers(remaining, live_owners), s_.k8, true});
        reports.push_back({k9_typed_errors(history), s_.k9, true});
        if (!s_.majority)
            reports.push_back({live_deletes_are_releases(audit, history, realtime_minus_mono_ns_), s_.k1, true});
        if (s_.row && s_.row_audit && !s_.majority)
            reports.push_back({row_grants_follow_releases(audit, history, realtime_minus_mono_ns_), s_.k1, true});
        if (extra_check_) {
            std::vector<std::string> killed_workers;
            for (auto const& w : workers_)
                if (w.killed) killed_workers.push_back(w.name);
            report extra{"extra-" + s_.id, {}, {}};
            if (!s_.killpoint.empty() && killed_workers.empty()) {
                // The worker carrying the failpoint never reached it (it got too few turns): the run
                // tested nothing and violated nothing. Like a liveness miss: rerun once, new seed.
                extra.violations.push_back(
                    {"extra", "the failpoint " + s_.killpoint + " was never reached: the run tested nothing"});
                reports.push_back({std::move(extra), true, false});
            } else {
                for (auto& v : extra_check_(
                         {audit, history, remaining, *dbs_.front().raw, dbs_.front().e, tables_, killed_workers}))
                    extra.violations.push_back({"extra", std::move(v)});
                reports.push_back({std::move(extra), true, true});
            }
        }
        if (!s_.extra_checks.empty() || s_.coordination) {
            run_record rec{history,
                           audit,
                           remaining,
                           read_nemesis((dir_ / "nemesis.jsonl").string()),
                           realtime_minus_mono_ns_,
                           s_.ttl,
                           s_.processes,
                           s_.threads};
            std::vector<report> own;
            for (auto const& f : s_.extra_checks) own.push_back(f(rec));
            if (s_.coordination)
                for (auto& r : coordination_reports(*s_.coordination, audit, history, rec.nemesis,
                                                    realtime_minus_mono_ns_, definitions))
                    own.push_back(std::move(r));
            for (auto& r : own) {
                // Bounds in hundreds of milliseconds on a shared 2-core machine: a miss is rerun once.
                bool const timing = r.checker == "rows-given-back" || r.checker == "F02-liveness" ||
                                    r.checker == "F03-bounded" || r.checker == "F04-prompt";
                // "The fault never bit": the run tested nothing and violated nothing (like a
                // failpoint never reached), so it is rerun once too.
                bool const inconclusive =
                    !r.violations.empty() && std::all_of(r.violations.begin(), r.violations.end(), [](auto const& v) {
                        return v.what.find("the fault never bit") != std::string::npos;
                    });
                reports.push_back({std::move(r), true, !(timing || inconclusive)});
            }
        }

        bool safety_failed = !worker_failures.empty();
        bool liveness_failed = false;
        std::size_t acquired = 0;
        for (auto const& ev : history)
            if (ev.op == "acquire" && ev.type == "ok") ++acquired;
        grants_ = acquired;
        std::cout << "[battery] " << s_.id << " on " << engine_label() << ": " << history.size() << " events, "
                  << acquired << " grants, " << audit.size() << " audit rows\n";
        for (auto const& it : reports) {
            std::cout << "[battery]   " << (it.asserted ? "" : "(reported) ") << it.r.summary() << "\n";
            if (!it.asserted || it.r.ok()) continue;
            (it.safety ? safety_failed : liveness_failed) = true;
            // A liveness miss on the first attempt is reported and rerun once (run_and_check); only a
            // safety failure, or a liveness miss again on the rerun, fails the test.
            if (it.safety || last_attempt_) {
                ADD_FAILURE() << s_.id << " on " << engine_label() << ": " << it.r.summary();
                if (first_failure_.empty()) first_failure_ = it.r.checker;
            } else {
                if (first_miss_.empty()) first_miss_ = it.r.checker;
                std::cout << "[battery] " << s_.id << " on " << engine_label()
                          << ": liveness miss (rerun once): " << it.r.summary() << "\n";
            }
        }
        for (auto const& f : worker_failures) {
            ADD_FAILURE() << s_.id << ": worker failed: " << f;
            if (first_failure_.empty()) first_failure_ = "worker failed";
        }
        if (acquired < s_.min_grants) {
            // Progress, not safety: a loaded machine makes fewer grants (B02 beside two CPU hogs), so a
            // first miss is rerun once like the other liveness misses.
            liveness_failed = true;
            if (first_miss_.empty()) first_miss_ = "min-grants";
            if (last_attempt_) {
                if (first_failure_.empty()) first_failure_ = "min-grants";
                ADD_FAILURE() << s_.id << ": only " << acquired << " grants (at least " << s_.min_grants
                              << " expected): the run exercised next to nothing; see the workers' *.err and K9";
            } else {
                std::cout << "[battery] " << s_.id << " on " << engine_label() << ": liveness miss (rerun once): only "
                          << acquired << " grants (at least " << s_.min_grants << " expected)\n";
            }
        }
        if (s_.k3_needs_rejection) {
            auto k3 = k3_fenced(history);
            auto it = k3.counts.find("rejected");
            if (it == k3.counts.end() || it->second < 1) {
                safety_failed = true;
                if (first_failure_.empty()) first_failure_ = "K3 never bit";
                ADD_FAILURE() << s_.id << ": the fault never bit: no stale fenced write was refused (" << k3.summary()
                              << "); the scenario proves nothing";
            }
        }
        if (safety_failed || liveness_failed) {
            std::cout << "replay: build/tests/faults/sqlock_battery_check " << dir_.string() << std::endl;
            if (auto const* t = ::testing::UnitTest::GetInstance()->current_test_info()) {
                std::error_code ec;
                std::cout << "replay the run: SQLOCK_BATTERY_SEED=" << seed_ << (soak_mode() ? " SQLOCK_SOAK=1" : "")
                          << " bash scripts/with-servers.sh " << fs::read_symlink("/proc/self/exe", ec).string()
                          << " --gtest_filter='" << t->test_suite_name() << "." << t->name() << "'" << std::endl;
            }
            if (!safety_failed) return outcome::flaky_liveness;
            return outcome::failed;
        }
        std::error_code ec;
        if (sqlock_test::getenv_nonempty("SQLOCK_BATTERY_KEEP").value_or("0") != "0") {
            std::cout << "[battery] kept (SQLOCK_BATTERY_KEEP): " << dir_.string() << "\n";
            return outcome::ok;
        }
        fs::remove_all(dir_, ec);
        return outcome::ok;
    }

    /// K1's other half, which the audit alone cannot decide: a row deleted before its expiry must
    /// have been deleted by its owner, i.e. while that owner was releasing it (or inside its own
    /// acquire, which gives back a grant that came too late). The audit's db_time is placed on the
    /// raw monotonic clock of the histories by the offset between the host's real-time and
    /// monotonic clocks measured at the start of the run (every database of a run is on this host,
    /// so its clock is this host's real-time clock); `slack_ms` absorbs the clocks' reading jitter
    /// (and SQLite's millisecond 'now'). A live row deleted outside every such window (by the
    /// reaper, or by anyone else) is a violation.
    static report live_deletes_are_releases(std::vector<audit_row> const& audit, std::vector<event> const& history,
                                            std::int64_t realtime_minus_mono_ns, std::int64_t slack_ms = 10) {
        report r{"K1-reap", {}, {}};
        // The owner's release and acquire windows [invoke, completion] per (lock, owner); no completion:
        // open to the end.
        std::map<std::pair<std::string, std::string>, std::vector<std::pair<std::int64_t, std::int64_t>>> windows;
        std::map<std::tuple<std::string, std::int64_t, std::int64_t, std::string, std::string>, std::size_t> open;
        std::vector<event const*> sorted;
        for (auto const& ev : history) sorted.push_back(&ev);
        std::stable_sort(sorted.begin(), sorted.end(), [](auto a, auto b) { return a->mono_ns < b->mono_ns; });
        for (auto const* ev : sorted) {
            if (ev->op != "release" && ev->op != "acquire") continue;
            auto key = std::make_tuple(ev->proc, ev->pid, ev->thread, ev->lock, ev->op);
            if (ev->type == "invoke") {
                auto& w = windows[{ev->lock, ev->owner}];
                w.push_back({ev->mono_ns, std::numeric_limits<std::int64_t>::max()});
                open[key] = w.size() - 1;
            } else if (auto it = open.find(key); it != open.end()) {
                windows[{ev->lock, ev->owner}][it->second].second = ev->mono_ns;
                open.erase(it);
            }
        }
        std::int64_t const slack_ns = slack_ms * 1'000'000;
        r.counts["live_deletes"] = 0;
        r.counts["expired_deletes"] = 0;
        for (auto const& a : audit) {
            if (a.kind != "delete") continue;
            if (a.db_time_us >= a.expires_at_us) {
                ++r.counts["expired_deletes"];
                continue;
            }
            ++r.counts["live_deletes"];
            std::int64_t const at = a.db_time_us * 1000 - realtime_minus_mono_ns;  // on the raw monotonic clock
            bool during_release = false;
            if (auto it = windows.find({a.lock, a.owner}); it != windows.end())
                for (auto const& [from, to] : it->second)
                    if (at >= from - slack_ns &&
                        (to == std::numeric_limits<std::int64_t>::max() || at <= to + slack_ns))
                        during_release = true;
            if (!during_release)
                r.violations.push_back({"K1", "lock " + a.lock + ": the unexpired row of token " +
                                                  std::to_string(a.token) + " (owner " + a.owner +
                                                  ") was deleted at db time " + std::to_string(a.db_time_us) + ", " +
                                                  std::to_string((a.expires_at_us - a.db_time_us) / 1000) +
                                                  " ms before its expiry (audit seq " + std::to_string(a.seq) +
                                                  "), while its owner was neither releasing nor acquiring it"});
        }
        return r;
    }

    /// The row lock's K1 from the database's record (install_row_audit) joined with the history: an
    /// audited grant was committed, and a row lock commits only in its owner's release, so the next
    /// audited grant of that lock must come after that release began (its invoke, on the raw
    /// monotonic clock, placed as in live_deletes_are_releases, with the same slack). A grant
    /// earlier than that means two holders of the row at once. Grants whose release the history
    /// doesn't show (a worker killed before logging it) are counted as `unmatched`.
    static report row_grants_follow_releases(std::vector<audit_row> const& audit, std::vector<event> const& history,
                                             std::int64_t realtime_minus_mono_ns, std::int64_t slack_ms = 10) {
        report r{"K1-row", {}, {}};
        // The first release invoke per (lock, owner, token).
        std::map<std::tuple<std::string, std::string, std::int64_t>, std::int64_t> release_invoke;
        for (auto const& ev : history)
            if (ev.op == "release" && ev.type == "invoke" && ev.token) {
                auto key = std::make_tuple(ev.lock, ev.owner, *ev.token);
                auto it = release_invoke.find(key);
                if (it == release_invoke.end() || ev.mono_ns < it->second) release_invoke[key] = ev.mono_ns;
            }
        std::map<std::pair<std::string, std::string>, std::vector<audit_row const*>> grants;  // (db, lock)
        for (auto const& a : audit)
            if (a.kind == "grant" || a.kind == "takeover") grants[{a.db, a.lock}].push_back(&a);
        std::int64_t checked = 0, unmatched = 0;
        std::int64_t const slack_ns = slack_ms * 1'000'000;
        for (auto& [key, g] : grants) {
            std::stable_sort(g.begin(), g.end(), [](auto a, auto b) { return a->seq < b->seq; });
            for (std::size_t i = 1; i < g.size(); ++i) {
                auto const* prev = g[i - 1];
                auto const* next = g[i];
                auto it = release_invoke.find({prev->lock, prev->owner, prev->token});
                if (it == release_invoke.end()) {
                    ++unmatched;
                    continue;
                }
                ++checked;
                std::int64_t const at = next->db_time_us * 1000 - realtime_minus_mono_ns;
                if (at < it->second - slack_ns)
                    r.violations.push_back(
                        {"K1", "lock " + prev->lock + ": token " + std::to_string(next->token) + " (owner " +
                                   next->owner + ", audit seq " + std::to_string(next->seq) + ") was granted " +
                                   std::to_string((it->second - at) / 1'000'000) +
                                   " ms before the previous holder (token " + std::to_string(prev->token) + ", owner " +
                                   prev->owner + ") began to release the row: two holders of the row at once"});
            }
        }
        r.counts["checked"] = checked;
        r.counts["unmatched"] = unmatched;
        return r;
    }

    /// CLOCK_REALTIME minus the raw CLOCK_MONOTONIC, from the tightest of a few back-to-back readings.
    static std::int64_t measure_realtime_minus_mono() {
        std::int64_t best = 0, best_gap = std::numeric_limits<std::int64_t>::max();
        for (int i = 0; i < 20; ++i) {
            auto m1 = raw_monotonic_ns();
            timespec ts{};
            ::syscall(SYS_clock_gettime, CLOCK_REALTIME, &ts);
            auto m2 = raw_monotonic_ns();
            std::int64_t const real = std::int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
            if (m2 - m1 < best_gap) {
                best_gap = m2 - m1;
                best = real - (m1 + m2) / 2;
            }
        }
        return best;
    }

    std::vector<std::string> asserted_list() const {
        std::vector<std::string> out;
        bool const flags[] = {s_.k1, s_.k2, s_.k3, s_.k4, s_.k5, s_.k6, s_.k7, s_.k8, s_.k9};
        for (int i = 0; i < 9; ++i)
            if (flags[i]) out.push_back("K" + std::to_string(i + 1));
        return out;
    }

    scenario s_;
    engine e_;
    std::uint64_t seed_ = 0;
    std::optional<std::size_t> grants_;  ///< the last attempt's grants, for the summary line
    std::string first_failure_;          ///< the first failed check's name, for the summary line
    std::string first_miss_;             ///< the first liveness miss's, when the scenario was rerun
    bool last_attempt_ = false;          // the rerun after a liveness miss: a miss now fails the test
    std::mt19937_64 rng_;
    fs::path dir_;
    std::string tables_, res_tables_, lock_prefix_;
    std::vector<lock_db> dbs_;
    engine res_engine_ = engine::postgresql;
    std::string res_url_, res_backend_, res_connect_;
    std::unique_ptr<soci::session> res_raw_;
    std::vector<worker_proc> workers_;
    std::map<std::string, int> exits_;
    std::map<int, std::vector<std::string>> slot_env_;
    std::function<std::vector<std::string>(extra_check_input const&)> extra_check_;
    int killpoint_hits_ = 0;
    std::vector<int> fault_bag_;  ///< mixed_faults: the kinds left in this round
    std::ofstream nemesis_;
    milliseconds duration_{0};
    std::int64_t realtime_minus_mono_ns_ = 0;
    std::int64_t start_mono_ns_ = 0;  ///< the start barrier on the raw monotonic clock; 0: none
    std::string conn_marker_;         ///< count_connections: the workers' application_name (PG) or user (MariaDB)
    std::string mysql_user_;          ///< the MariaDB user of the run, dropped at cleanup
    std::vector<std::pair<std::string, std::string>> saved_globals_;  ///< MariaDB globals to restore
    std::atomic<long long> max_connections_{0};
    std::atomic<long long> max_server_sessions_{0};
    std::atomic<long long> connection_samples_{0};
    std::string connection_error_;
    std::chrono::steady_clock::time_point started_, end_;
};

}  // namespace sqlock_battery
