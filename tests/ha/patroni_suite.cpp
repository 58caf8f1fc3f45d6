// sqlock on a Patroni-managed PostgreSQL cluster (scripts/ha/patroni.sh: etcd, three nodes, HAProxy routing to
// the leader), reached through a libpq host list with target_session_attrs=read-write or through HAProxy.
// docs/ha/patroni.md says what each test proves.
//
//   PatroniSync.LeaderPostmasterCrashKeepsTheGrantAndHandsTheLockOn (fault-smoke): kill -9 of the leader's
//     postmaster while a client holds a lock and two wait for it; Patroni restarts it in place. The holder's row
//     survives (its renewal succeeds), the waiters get the lock after its release, tokens rise (K1, K7), every
//     error is typed (K9).
//   PatroniSync.RowLockLeaderPostmasterCrashEndsTheHoldAndHandsTheLockOn (fault-smoke): the same crash under a
//     row-lock holder and two waiters queued on its row. The holder's transaction dies with the postmaster: the
//     holder is told so (lost, from the watch on its session) by its safe deadline, and before any waiter is
//     granted (K2); renew() and release() throw lease_lost; the waiters get the lock after the restart with
//     tokens above the holder's (K7 on the row audit and on the history); K1 on the audit, K9.
//   PatroniSync.AStandbyRefusesALockAsBackendUnavailable (fault-smoke): a store on one replica alone: the
//     standby's "read-only transaction" (25006) is backend_unavailable (retry: the cluster moved), never the
//     backend_error of a read-only setting.
//   PatroniSync.FailoverKeepsAcknowledgedGrants (ha): kill -9 of the leader's agent and postmaster: the sync
//     standby takes over. Holders through the host list and through HAProxy keep their leases, waiters get the
//     locks within a bound, K1, K7, K9 on the record.
//   PatroniSync.RowLockFailoverEndsTheHoldsAndHandsTheLocksOn (ha): the row lock across the failover, through
//     the host list and through HAProxy: each holder learns of its loss, the waiters are granted on the
//     promoted standby with greater tokens; checked as in the crash test.
//   PatroniAsync.FailoverToALaggingReplicaLosesAGrant (ha, characterization): with asynchronous replication
//     and both replicas' WAL receivers stopped (SIGSTOP) before a grant, the promoted replica never saw it: a
//     second client is granted the same lock while the first still holds it (its token still greater: a lost
//     counter restarts at the database's clock in µs).
#include "audit.hpp"
#include "checkers.hpp"
#include "ha_env.hpp"
#include "history.hpp"
#include "run_command.hpp"

#include <sqlock/sqlock.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace {

using namespace std::chrono_literals;
using namespace sqlock_test;
using namespace sqlock_battery;
using sqlock::engine;
using sqlock::lease;

constexpr char const* script_name = "patroni.sh";

/// "sqlock::<type>: <what>" as the checkers read errors.
std::string error_text(std::exception const& e) {
    if (dynamic_cast<sqlock::in_doubt const*>(&e)) return std::string("sqlock::in_doubt: ") + e.what();
    if (dynamic_cast<sqlock::backend_unavailable const*>(&e))
        return std::string("sqlock::backend_unavailable: ") + e.what();
    if (dynamic_cast<sqlock::timeout const*>(&e)) return std::string("sqlock::timeout: ") + e.what();
    if (dynamic_cast<sqlock::lease_lost const*>(&e)) return std::string("sqlock::lease_lost: ") + e.what();
    if (dynamic_cast<sqlock::backend_error const*>(&e)) return std::string("sqlock::backend_error: ") + e.what();
    return std::string("raw: ") + e.what();
}

class PatroniTest : public HaTest {
protected:
    void start(std::string const& dir) {
        dir_ = dir;
        require_topology(dir, script_name);
        if (HasFatalFailure() || IsSkipped()) return;
        prefix_ = "ha_" + random_hex(6);
        record_dir_ = dir + "/record-" + prefix_;
        std::filesystem::create_directories(record_dir_);
        leader_ = std::stoi(must("heal", {"120"}));  // an earlier test's failover may have left a node down
        // The tables and the audit, through the leader; the cluster replicates them.
        sqlock::store setup(var("SQLOCK_HA_PG_URL"), opts(true));
        auto raw = raw_session(engine::postgresql, node_url(leader_));
        install_audit(*raw, engine::postgresql, prefix_);
    }

    sqlock::store_options opts(bool create = false) const {
        return {
            .pool_size = 4, .create_schema = create, .table_prefix = prefix_, .connect_timeout = 5s, .io_timeout = 10s};
    }

    std::string node_url(int n) const { return var("SQLOCK_HA_PG_NODE_URL" + std::to_string(n)); }

    /// The script's verb, its stdout trimmed; fails the test (throwing) when it fails.
    std::string must(std::string const& verb, std::vector<std::string> const& args = {}) const {
        std::vector<std::string> cmd = {"/bin/bash", std::string(SQLOCK_HA_SCRIPTS) + "/" + script_name, verb};
        cmd.insert(cmd.end(), args.begin(), args.end());
        auto r = run_command(cmd, {"SQLOCK_HA_DIR=" + dir_}, 180s);
        if (!r.ok()) throw std::runtime_error(script_name + (" " + verb) + " failed: " + r.err + r.out);
        auto out = r.out;
        while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
        return out;
    }

    /// Renews until the database answers (the leader is back) or the lease's safe deadline passes.
    static void renew_through_outage(lease& l, history_writer& h) {
        while (l.state() == sqlock::lease_state::held || l.state() == sqlock::lease_state::in_doubt) {
            h.write({.op = "renew", .type = "invoke", .lock = l.name(), .owner = l.owner(), .token = l.token()});
            try {
                l.renew();
                h.write({.op = "renew",
                         .type = "ok",
                         .lock = l.name(),
                         .owner = l.owner(),
                         .token = l.token(),
                         .validity_ms = std::chrono::duration_cast<std::chrono::milliseconds>(l.remaining()).count()});
                return;
            } catch (std::exception const& e) {
                h.write({.op = "renew",
                         .type = "info",
                         .lock = l.name(),
                         .owner = l.owner(),
                         .token = l.token(),
                         .error = error_text(e)});
                std::this_thread::sleep_for(300ms);
            }
        }
    }

    /// A waiter: acquire (recorded; backend_unavailable and in_doubt while the cluster moves are retried, as an
    /// application would, for at most 120 s), hold briefly, release (recorded).
    static std::thread waiter(sqlock::locker& locks, std::string name, history_writer& h, int thread,
                              std::atomic<int>& granted) {
        return std::thread([&locks, name, &h, thread, &granted] {
            auto const until = std::chrono::steady_clock::now() + 120s;
            while (std::chrono::steady_clock::now() < until) {
                h.write({.thread = thread, .op = "acquire", .type = "invoke", .lock = name});
                try {
                    auto l = locks.acquire(name, std::chrono::duration_cast<std::chrono::milliseconds>(
                                                     until - std::chrono::steady_clock::now()));
                    h.write(
                        {.thread = thread,
                         .op = "acquire",
                         .type = "ok",
                         .lock = name,
                         .owner = l.owner(),
                         .token = l.token(),
                         .validity_ms = std::chrono::duration_cast<std::chrono::milliseconds>(l.remaining()).count()});
                    ++granted;
                    h.write({.thread = thread,
                             .op = "release",
                             .type = "invoke",
                             .lock = name,
                             .owner = l.owner(),
                             .token = l.token()});
                    l.release();
                    h.write({.thread = thread, .op = "release", .type = "ok", .lock = name, .owner = l.owner()});
                    return;
                } catch (sqlock::timeout const& e) {
                    h.write({.thread = thread, .op = "acquire", .type = "fail", .lock = name, .error = error_text(e)});
                    return;
                } catch (std::exception const& e) {
                    h.write({.thread = thread, .op = "acquire", .type = "info", .lock = name, .error = error_text(e)});
                    if (!dynamic_cast<sqlock::backend_unavailable const*>(&e) &&
                        !dynamic_cast<sqlock::in_doubt const*>(&e))
                        return;
                    std::this_thread::sleep_for(300ms);
                }
            }
        });
    }

    /// K1 and K7 on the audit (read from the current leader), K9 on the history. `row`: the row lock's runs,
    /// whose lost holders left no audit (their transaction rolled back): also K2 on the history (a holder's
    /// interval ends at its lost signal, and no grant may be believed before it) and K7 on the history (a lost
    /// holder's token against the grants invoked after it).
    void judge(bool row = false) {
        int const leader = std::stoi(must("wait-leader", {"90"}));
        auto raw = raw_session(engine::postgresql, node_url(leader));
        auto const audit = dump_audit(*raw, engine::postgresql, prefix_);
        auto const history = read_history(record_dir_ + "/history.jsonl");
        std::vector<report> reports = {k1_db_disjoint(audit), k7_tokens(audit, history), k9_typed_errors(history)};
        if (row) {
            reports.push_back(k2_belief_overlap(history));
            reports.push_back(k7_tokens({}, history));
        }
        for (auto const& r : reports) EXPECT_TRUE(r.ok()) << r.summary() << " (history in " << record_dir_ << ")";
        EXPECT_GE(audit.size(), 3u) << "the audit saw fewer grants than the test made";
    }

    /// The row lock (row_locker) across `fault`, a verb of the script that ends the leader's transactions
    /// (crash-postmaster, failover), on each URL of `urls`: a holder and two waiters (queued in the engine) per
    /// URL. Each holder must be told it lost the lock by its safe deadline (the lost event, its stop token;
    /// renew() and release() then throw lease_lost), the waiters get the lock once the cluster is back, with
    /// tokens above the holder's. Judged on the record by judge(true), the row lock's audit installed.
    void row_lock_across(std::string const& fault, std::vector<std::string> const& urls) {
        install_row_audit(*raw_session(engine::postgresql, node_url(leader_)), engine::postgresql, prefix_);
        history_writer h(record_dir_ + "/history.jsonl", "row-" + fault);
        struct path {
            std::string name;
            std::string owner;
            int thread = 0;
            std::unique_ptr<sqlock::store> holder_db;
            std::unique_ptr<sqlock::store> waiter_db;
            std::optional<sqlock::locker> holder_locks;
            std::optional<sqlock::locker> waiter_locks;
            std::optional<lease> held;
            std::chrono::steady_clock::time_point safe_deadline;
            std::mutex m;
            std::string lost_detail;
        };
        std::vector<std::unique_ptr<path>> paths;
        std::atomic<int> granted{0};
        std::vector<std::thread> waiters;
        for (std::size_t i = 0; i < urls.size(); ++i) {
            auto& p = *paths.emplace_back(std::make_unique<path>());
            p.name = "ha:row:" + fault + ":" + std::to_string(i);
            p.owner = "row-holder-" + std::to_string(i);
            p.thread = 100 * static_cast<int>(i + 1);
            p.holder_db = std::make_unique<sqlock::store>(urls[i], opts());
            p.waiter_db = std::make_unique<sqlock::store>(urls[i], opts());
            p.holder_locks.emplace(
                sqlock::row_locker(*p.holder_db,
                                   {.ttl = 60s, .owner = p.owner, .on_event = [&h, &p](sqlock::lease_event const& ev) {
                                        if (ev.what != sqlock::lease_event::kind::lost) return;
                                        h.write({.thread = p.thread,
                                                 .op = "lost",
                                                 .type = "ok",
                                                 .lock = std::string(ev.name),
                                                 .owner = p.owner,
                                                 .token = ev.token,
                                                 .error = "sqlock::lease_lost: " + std::string(ev.detail)});
                                        std::lock_guard lock(p.m);
                                        p.lost_detail = ev.detail;
                                    }}));
            p.waiter_locks.emplace(sqlock::row_locker(*p.waiter_db, {.ttl = 60s}));
            // Granted and released once first, so that the holder's token is drawn from a committed counter
            // (the first draw of a name starts at the clock, which would hide a draw lost with the crash).
            for (bool const keep : {false, true}) {
                h.write({.thread = p.thread, .op = "acquire", .type = "invoke", .lock = p.name});
                p.held.emplace(p.holder_locks->acquire(p.name, 10s));
                h.write({.thread = p.thread,
                         .op = "acquire",
                         .type = "ok",
                         .lock = p.name,
                         .owner = p.owner,
                         .token = p.held->token(),
                         .validity_ms =
                             std::chrono::duration_cast<std::chrono::milliseconds>(p.held->remaining()).count()});
                if (keep) break;
                h.write({.thread = p.thread,
                         .op = "release",
                         .type = "invoke",
                         .lock = p.name,
                         .owner = p.owner,
                         .token = p.held->token()});
                p.held->release();
                h.write({.thread = p.thread, .op = "release", .type = "ok", .lock = p.name, .owner = p.owner});
            }
            for (int t = 1; t <= 2; ++t) waiters.push_back(waiter(*p.waiter_locks, p.name, h, p.thread + t, granted));
        }
        // The waiters queue on the holders' rows in the engine before the fault.
        auto leader = raw_session(engine::postgresql, node_url(leader_));
        int queued = 0;
        bool const all_queued = eventually(
            [&] {
                *leader << "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                           " AND wait_event_type = 'Lock'",
                    soci::into(queued);
                return queued >= 2 * static_cast<int>(urls.size());
            },
            60s);
        EXPECT_TRUE(all_queued) << "only " << queued << " waiters queued on the rows before the fault";
        leader.reset();
        EXPECT_EQ(granted.load(), 0) << "a waiter was granted a lock while its holder held it";
        for (auto& p : paths) p->safe_deadline = std::chrono::steady_clock::now() + p->held->remaining();

        EXPECT_EQ(must(fault), std::to_string(leader_)) << "the leader moved before the " << fault;
        for (auto& p : paths) {
            auto const left = std::chrono::duration_cast<std::chrono::milliseconds>(p->safe_deadline -
                                                                                    std::chrono::steady_clock::now());
            EXPECT_TRUE(eventually([&] { return p->held->stop_token().stop_requested(); }, std::max(left, 0ms)))
                << p->name << ": the holder was not told it lost the lock by its safe deadline";
            EXPECT_TRUE(p->held->lost()) << p->name << ": " << sqlock::to_string(p->held->state());
            {
                std::lock_guard lock(p->m);
                EXPECT_NE(p->lost_detail.find("the database session holding the row lock ended"), std::string::npos)
                    << p->name << ": the loss does not say the session ended: " << p->lost_detail;
            }
            for (std::string const op : {"renew", "release"}) {
                h.write({.thread = p->thread,
                         .op = op,
                         .type = "invoke",
                         .lock = p->name,
                         .owner = p->owner,
                         .token = p->held->token()});
                try {
                    if (op == "renew") p->held->renew();
                    else p->held->release();
                    ADD_FAILURE() << p->name << ": " << op << "() of the lost lease did not throw lease_lost";
                    h.write({.thread = p->thread, .op = op, .type = "ok", .lock = p->name, .owner = p->owner});
                } catch (std::exception const& e) {
                    EXPECT_NE(dynamic_cast<sqlock::lease_lost const*>(&e), nullptr)
                        << p->name << ": " << op << "() of the lost lease threw " << error_text(e);
                    h.write({.thread = p->thread,
                             .op = op,
                             .type = "fail",
                             .lock = p->name,
                             .owner = p->owner,
                             .token = p->held->token(),
                             .error = error_text(e)});
                }
            }
        }
        for (auto& w : waiters) w.join();
        EXPECT_EQ(granted.load(), 2 * static_cast<int>(urls.size()))
            << "the waiters did not all get their lock within 120 s of waiting";
        for (auto const& ev : read_history(record_dir_ + "/history.jsonl"))
            for (auto const& p : paths) {
                if (ev.op != "acquire" || ev.type != "ok" || ev.lock != p->name || ev.owner == p->owner) continue;
                // Strictly greater: a token drawn again after the crash equals the lost holder's.
                EXPECT_GT(ev.token.value_or(0), p->held->token())
                    << p->name << ": a grant after the " << fault << " did not get a token above the lost holder's";
            }
        judge(true);
    }

    std::string dir_;
    std::string prefix_;
    std::string record_dir_;
    int leader_ = 0;
};

class PatroniSync : public PatroniTest {
protected:
    void SetUp() override { start(SQLOCK_HA_DIR_PATRONI); }
};

class PatroniAsync : public PatroniTest {
protected:
    void SetUp() override { start(SQLOCK_HA_DIR_PATRONI_ASYNC); }
};

TEST_F(PatroniSync, LeaderPostmasterCrashKeepsTheGrantAndHandsTheLockOn) {
    sqlock::store db(var("SQLOCK_HA_PG_URL"), opts());
    auto locks = sqlock::table_locker(db, {.ttl = 30s});
    history_writer h(record_dir_ + "/history.jsonl", "smoke");
    std::string const name = "ha:crash";
    h.write({.op = "acquire", .type = "invoke", .lock = name});
    auto held = locks.acquire(name, 10s);
    h.write({.op = "acquire",
             .type = "ok",
             .lock = name,
             .owner = held.owner(),
             .token = held.token(),
             .validity_ms = std::chrono::duration_cast<std::chrono::milliseconds>(held.remaining()).count()});
    std::atomic<int> granted{0};
    std::vector<std::thread> waiters;
    for (int t = 1; t <= 2; ++t) waiters.push_back(waiter(locks, name, h, t, granted));

    EXPECT_EQ(must("crash-postmaster"), std::to_string(leader_)) << "the leader moved before the crash";
    renew_through_outage(held, h);
    EXPECT_EQ(held.state(), sqlock::lease_state::held)
        << "the acknowledged grant did not survive a crash-restart of the leader's postmaster";
    EXPECT_EQ(granted.load(), 0) << "a waiter was granted the lock while its holder held it";
    h.write({.op = "release", .type = "invoke", .lock = name, .owner = held.owner(), .token = held.token()});
    held.release();
    h.write({.op = "release", .type = "ok", .lock = name, .owner = held.owner()});
    for (auto& w : waiters) w.join();
    EXPECT_EQ(granted.load(), 2) << "the waiters did not both get the lock within 120 s of waiting";
    judge();
}

TEST_F(PatroniSync, RowLockLeaderPostmasterCrashEndsTheHoldAndHandsTheLockOn) {
    row_lock_across("crash-postmaster", {var("SQLOCK_HA_PG_URL")});
}

TEST_F(PatroniSync, AStandbyRefusesALockAsBackendUnavailable) {
    int const replica = leader_ % 3 + 1;
    sqlock::store db(node_url(replica), opts());
    auto locks = sqlock::table_locker(db, {.ttl = 30s});
    try {
        auto l = locks.try_acquire("ha:standby");
        ADD_FAILURE() << "a standby granted a lock";
    } catch (sqlock::backend_unavailable const& e) {
        // It says what the server is and what to do.
        EXPECT_NE(std::string(e.what()).find("read-only"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("hot standby"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("target_session_attrs=read-write"), std::string::npos) << e.what();
    } catch (sqlock::in_doubt const& e) {
        EXPECT_NE(std::string(e.what()).find("read-only"), std::string::npos) << e.what();
    } catch (std::exception const& e) {
        ADD_FAILURE() << "expected backend_unavailable (a standby: retry, the cluster moved), got " << error_text(e);
    }
}

TEST_F(PatroniSync, FailoverKeepsAcknowledgedGrants) {
    sqlock::store via_hosts(var("SQLOCK_HA_PG_URL"), opts());
    sqlock::store via_haproxy(var("SQLOCK_HA_HAPROXY_URL"), opts());
    auto hosts_locks = sqlock::table_locker(via_hosts, {.ttl = 40s});
    auto haproxy_locks = sqlock::table_locker(via_haproxy, {.ttl = 40s});
    history_writer h(record_dir_ + "/history.jsonl", "failover");
    std::atomic<int> granted{0};
    std::vector<lease> held;
    std::vector<std::thread> waiters;
    int thread = 10;
    for (auto* locks : {&hosts_locks, &haproxy_locks}) {
        std::string const name = locks == &hosts_locks ? "ha:failover:hosts" : "ha:failover:haproxy";
        h.write({.thread = thread, .op = "acquire", .type = "invoke", .lock = name});
        held.push_back(locks->acquire(name, 10s));
        h.write(
            {.thread = thread,
             .op = "acquire",
             .type = "ok",
             .lock = name,
             .owner = held.back().owner(),
             .token = held.back().token(),
             .validity_ms = std::chrono::duration_cast<std::chrono::milliseconds>(held.back().remaining()).count()});
        ++thread;
        waiters.push_back(waiter(*locks, name, h, thread++, granted));
    }

    int const old_leader = std::stoi(must("failover"));
    EXPECT_EQ(old_leader, leader_);
    for (auto& l : held) {
        renew_through_outage(l, h);
        EXPECT_EQ(l.state(), sqlock::lease_state::held)
            << l.name() << ": the acknowledged grant did not survive the failover to the sync standby";
    }
    EXPECT_EQ(granted.load(), 0) << "a waiter was granted a lock while its holder held it";
    for (auto& l : held) {
        h.write({.op = "release", .type = "invoke", .lock = l.name(), .owner = l.owner(), .token = l.token()});
        l.release();
        h.write({.op = "release", .type = "ok", .lock = l.name(), .owner = l.owner()});
    }
    for (auto& w : waiters) w.join();
    EXPECT_EQ(granted.load(), 2) << "the waiters did not both get their lock within 120 s of waiting";
    judge();
    must("heal", {"120"});
}

TEST_F(PatroniSync, RowLockFailoverEndsTheHoldsAndHandsTheLocksOn) {
    row_lock_across("failover", {var("SQLOCK_HA_PG_URL"), var("SQLOCK_HA_HAPROXY_URL")});
    must("heal", {"120"});
}

// Characterization: asynchronous replication acknowledges a grant the promoted replica never saw.
TEST_F(PatroniAsync, FailoverToALaggingReplicaLosesAGrant) {
    std::string const name = "ha:async";
    int const r1 = leader_ % 3 + 1;
    int const r2 = r1 % 3 + 1;
    sqlock::store a_db(var("SQLOCK_HA_PG_URL"), opts());
    auto a_locks = sqlock::table_locker(a_db, {.ttl = 120s, .auto_renew = false});
    // The replicas have the tables and the audit before the stall: wait for their replay of the leader's WAL.
    std::string lsn;
    *raw_session(engine::postgresql, node_url(leader_)) << "SELECT pg_current_wal_lsn()::text", soci::into(lsn);
    for (int r : {r1, r2}) {
        auto const until = std::chrono::steady_clock::now() + 60s;
        for (;;) {
            auto raw = raw_session(engine::postgresql, node_url(r));
            int caught_up = 0;
            *raw << "SELECT (pg_last_wal_replay_lsn() >= '" + lsn + "'::pg_lsn)::int", soci::into(caught_up);
            if (caught_up != 0) break;
            ASSERT_LT(std::chrono::steady_clock::now(), until) << "node" << r << " did not replay the schema";
            std::this_thread::sleep_for(200ms);
        }
    }
    // The leader's WAL senders stopped: the grant's commit is acknowledged (async) and sent to no replica.
    EXPECT_EQ(must("pause-replication"), std::to_string(leader_));
    auto a = a_locks.acquire(name, 10s);
    int const old_leader = std::stoi(must("failover"));
    EXPECT_EQ(old_leader, leader_);
    int const new_leader = std::stoi(must("wait-leader", {"90"}));
    EXPECT_NE(new_leader, old_leader);

    sqlock::store b_db(var("SQLOCK_HA_PG_URL"), opts());
    auto b_locks = sqlock::table_locker(b_db, {.ttl = 30s});
    std::optional<lease> b;
    auto const until = std::chrono::steady_clock::now() + 60s;
    while (!b && std::chrono::steady_clock::now() < until) {
        try {
            b = b_locks.try_acquire(name);
            break;
        } catch (sqlock::backend_unavailable const&) {
            std::this_thread::sleep_for(300ms);
        }
    }
    ASSERT_TRUE(b.has_value()) << "the promoted replica had A's grant: the async loss did not show";
    EXPECT_GT(a.remaining(), 0ms) << "A's lease ran out: the overlap is not shown";
    // A's counter row was lost with its grant; B's new counter starts at the database's clock in µs, so B's
    // token still exceeds A's here (one host, one clock): fencing orders them although both hold.
    EXPECT_GT(b->token(), a.token()) << "a lost counter did not restart above A's token from the clock";
    // A learns it at its next renewal: the row it renews is B's.
    EXPECT_THROW(a.renew(), sqlock::lease_lost);
    EXPECT_EQ(a.state(), sqlock::lease_state::lost);
    must("heal", {"120"});
}

}  // namespace
