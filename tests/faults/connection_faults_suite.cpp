// sqlock tests — connection and server faults (issue 13, plan §4.D), on the real
// test servers:
//   Engines/ConnFaults.<Test>/<engine> (PostgreSQL, MariaDB)
//     - a server that hangs instead of closing (tests/fault_proxy.hpp: blackhole,
//       swallowed replies, an RST instead of the answer) on acquire, renew and
//       release: every call returns within its bound with a typed error, the
//       lease goes in doubt and is lost at its safe deadline, never believed held
//       while the database no longer holds it for us;
//     - pg_terminate_backend / KILL CONNECTION of a table lock's pooled
//       connection, between renewals and during a renewal: the row stays, the
//       library reconnects and keeps renewing with the same token;
//     - a row lock whose holding session is killed: lost at its next keep-alive
//       (not at its deadline), another client gets the row, and the old holder's
//       fenced write is refused;
//     - `sqlock run` during an outage: in doubt does not stop COMMAND, an outage
//       past the safe deadline does (exit 76).
//     - every connection reset mid-stream while a lease is held: the same as a
//       killed session;
//   Engines/ConnFaultsPostgres.<Test>/postgresql — the LISTEN connection killed
//     under a parked waiter: the hand-off still comes by NOTIFY; and the proxy's
//     modes checked at the socket level.
//   Engines/FenceRace.<Test>/<engine> (every engine) — sqlock::fence under two
//     open transactions driven step by step on raw SOCI sessions.
//   Engines/ConnFaultsCrash.<Test>/<engine> — kill -9 of the server while table
//     locks are held and granted (RUN_SERIAL, label "crash": it kills the shared
//     servers; see connection_faults.cmake).
//
// Sessions are ended only when they are this test's own: a PostgreSQL
// application_name, or a MariaDB user of their own made over
// SQLOCK_TEST_MYSQL_SOCKET (tests/marked_sessions.hpp, shared with tests/faults/safety_suite.cpp).
//
// What happened is recorded (lease events in order, states sampled next to the
// database's own view of the row) and checked afterwards. Waits are bounded
// polls; a call that may hang runs on a thread of its own, and only "it returned
// before an absurd bound" is asserted about time.
#include "fault_calls.hpp"
#include "fault_proxy.hpp"
#include "marked_sessions.hpp"
#include "test_env.hpp"
#include "test_process.hpp"
#ifdef SQLOCK_CLI
#include "cli_process.hpp"
#endif

#include <sqlock/admin.hpp>
#include <sqlock/fence.hpp>
#include <sqlock/sqlock.hpp>

#include <gtest/gtest.h>

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace {

using namespace std::chrono_literals;
using namespace sqlock_test;
using sqlock::engine;
using sqlock::lease;
using sqlock::lease_event;
using sqlock::lease_state;
using sqlock::locker;
using std::chrono::milliseconds;
using steady = std::chrono::steady_clock;

// ------------------------------------------------------------------ fixtures

/// The engine fixture with stores whose server sessions the test can find and
/// end (a PostgreSQL application_name, a MariaDB user of their own).
class ConnFaults : public marked_sessions_fixture {
protected:
    /// Bounds short enough that every call through a hung proxy ends in seconds.
    static sqlock::store_options fast_options() {
        sqlock::store_options o;
        o.pool_size = 2;
        o.create_schema = true;
        o.connect_timeout = 2s;  // PostgreSQL's minimum
        o.lock_wait_timeout = 500ms;
        o.io_timeout = 500ms;
        return o;
    }

    /// The session of `marker` waiting for a row lock (a statement blocked by
    /// another transaction; the test's own stores run nothing else that waits).
    /// (MariaDB: a locking read on a unique key waits inside the optimizer,
    /// state "Statistics", before information_schema.innodb_trx lists its
    /// transaction: look for the statement itself.)
    std::optional<long long> session_waiting_for_a_lock(std::string const& marker) {
        return session_found_by(marker,
                                "SELECT CAST(pid AS bigint) FROM pg_stat_activity WHERE application_name = :a"
                                " AND wait_event_type = 'Lock'",
                                "SELECT CAST(ID AS SIGNED) FROM information_schema.PROCESSLIST"
                                " WHERE USER = :u AND COMMAND <> 'Sleep' AND INFO LIKE '%FOR UPDATE%'");
    }

    /// Sessions and their transactions, for failure messages.
    std::string server_view() {
        std::string out;
        try {
            std::string const sql =
                e_ == engine::postgresql
                    ? "SELECT CONCAT_WS(' | ', pid, application_name, state, wait_event_type, wait_event, query)"
                      " FROM pg_stat_activity WHERE datname = current_database()"
                    : "SELECT CONCAT_WS(' | ', p.ID, p.USER, p.COMMAND, p.STATE, t.trx_state, p.INFO)"
                      " FROM information_schema.PROCESSLIST p"
                      " LEFT JOIN information_schema.innodb_trx t ON t.trx_mysql_thread_id = p.ID";
            soci::rowset<std::string> rs = (raw_->prepare << sql);
            for (auto const& line : rs) out += "  " + line + "\n";
        } catch (std::exception const& e) {
            out += "  (cannot read it: " + describe(e) + ")\n";
        }
        return out;
    }

    /// Samples `l` next to the database's view of its row until `until()` holds
    /// or `limit` passes: whenever the lease says held or in doubt *after* the
    /// row was read, the database must still have held the row for it (same
    /// token and owner, unexpired by the database's clock). Returns the states seen.
    std::set<lease_state> sample_belief(lease const& l, std::function<bool()> const& until, milliseconds limit) {
        std::set<lease_state> seen;
        auto const end = steady::now() + limit;
        int violations = 0;
        while (!until() && steady::now() < end) {
            auto r = read_row(*raw_, e_, l.name());
            auto const s = l.state();
            seen.insert(s);
            if ((s == lease_state::held || s == lease_state::in_doubt) && violations < 3) {
                bool const db_holds = r && r->token == l.token() && r->owner == l.owner() && r->live();
                if (!db_holds) {
                    ++violations;
                    ADD_FAILURE() << "the lease (token " << l.token() << ") said " << to_string(s)
                                  << " after the database showed "
                                  << (r ? "a row of token " + std::to_string(r->token) + ", owner " + r->owner +
                                              (r->live() ? ", live"
                                                         : ", expired " + std::to_string(r->now_us - r->expires_us) +
                                                               " us ago")
                                        : std::string("no row"));
                }
            }
            std::this_thread::sleep_for(15ms);
        }
        seen.insert(l.state());
        return seen;
    }

    /// The checks of a table lease whose connections broke while it was held
    /// (`how`, at `broken_at`): `renewals` renewals succeeded since, it is held
    /// and was never lost, and its row is still its own (same token and owner),
    /// with an expiry past `before`'s when that is given.
    void expect_the_lease_kept(lease const& l, event_record const& events, steady::time_point broken_at,
                               std::size_t renewals, std::string const& how,
                               std::optional<lock_row> const& before = std::nullopt) {
        std::string const& name = l.name();
        auto const renewed_since = [&] { return events.count_after(lease_event::kind::renewed, name, broken_at); };
        EXPECT_TRUE(eventually([&] { return renewed_since() >= renewals; }, 20s))
            << "fewer than " << renewals << " renewals succeeded after " << how << "; events:\n"
            << events.dump();
        EXPECT_EQ(l.state(), lease_state::held) << events.dump();
        EXPECT_EQ(events.count(lease_event::kind::lost, name), 0u) << events.dump();
        auto const now = read_row(*raw_, e_, name);
        ASSERT_TRUE(now.has_value()) << "the lock row is gone after " << how;
        EXPECT_EQ(now->token, l.token()) << "the renewals after " << how << " changed the token";
        EXPECT_EQ(now->owner, l.owner());
        if (before) {
            EXPECT_GT(now->expires_us, before->expires_us) << "the row's expiry did not move after " << how;
        }
    }
};

class ConnFaultsPostgres : public ConnFaults {};
class ConnFaultsCrash : public engine_fixture {};

std::string states_text(std::set<lease_state> const& s) {
    std::string out;
    for (auto st : s) out += (out.empty() ? "" : ", ") + std::string(sqlock::to_string(st));
    return out;
}

// ============================================================ 1. a server that hangs instead of closing

// Acquire into a black hole: the pooled connection is open, the statement is
// sent and never answered; the reconnect is accepted and never answered
// either. try_acquire returns within its bounds (io_timeout beyond the lock
// wait, then connect_timeout) with a typed error, and nothing reached the
// server: no row. After restore() the store works again.
TEST_P(ConnFaults, BlackholedAcquireIsBoundedAndTyped) {
    auto proxy = fault_proxy::for_url(url_);
    cut_on_exit cut{*proxy};
    sqlock::store db(proxy->proxied_url(url_), fast_options());
    locker L = sqlock::table_locker(db, {.ttl = 5s});
    std::string const name = n("blackholed-acquire");
    L.try_acquire(n("warm-up"))->release();  // the pooled connection is open, its statements prepared

    proxy->blackhole();
    call_result r;
    bool const returned = returned_within(30s, *proxy, [&] { r = run_call([&] { (void)L.try_acquire(name); }); });
    ASSERT_TRUE(returned) << "try_acquire() into a black hole did not return within 30 s (bounds: lock wait 0.5 s + "
                             "io_timeout 0.5 s, connect_timeout 2 s)";
    EXPECT_TRUE(r.typed_unreachable()) << "try_acquire() into a black hole: " << r.text;
    EXPECT_GE(proxy->dropped_requests(), 1u) << "the acquire never went into the black hole";
    EXPECT_GE(proxy->blackholed(), 1u) << "the store did not try to reconnect (the hole accepts and never answers)";
    EXPECT_EQ(count_rows_named(*raw_, name), 0) << "a statement the black hole swallowed reached the server";

    proxy->restore();
    std::optional<lease> again;
    EXPECT_NO_THROW(again = L.try_acquire(name)) << "the store did not recover after the black hole";
    EXPECT_TRUE(again.has_value());
}

// The server executes the acquire, its answer is swallowed, and so is the
// reconnect's: the outcome is unknown, so try_acquire must say in_doubt — never
// "busy", never a lease — within its bounds. The row it wrote is there (the
// request did reach the server) and expires by its TTL: another client then
// takes the name with a greater token.
TEST_P(ConnFaults, SwallowedAcquireReplyIsInDoubtAndTheRowExpires) {
    auto proxy = fault_proxy::for_url(url_);
    cut_on_exit cut{*proxy};
    sqlock::store db(proxy->proxied_url(url_), fast_options());
    milliseconds const ttl = 2s;
    locker L = sqlock::table_locker(db, {.ttl = ttl});
    std::string const name = n("swallowed-acquire");
    L.try_acquire(n("warm-up"))->release();

    proxy->swallow_replies();
    call_result r;
    bool got_lease = false;
    bool const returned = returned_within(30s, *proxy, [&] {
        r = run_call([&] {
            auto l = L.try_acquire(name);
            got_lease = l.has_value();
            if (l) l->release();
        });
    });
    ASSERT_TRUE(returned) << "try_acquire() with its answer swallowed did not return within 30 s";
    EXPECT_EQ(r.what, call_result::kind::in_doubt)
        << "try_acquire() whose statement ran but whose answer never came: " << r.text
        << (r.what == call_result::kind::returned ? (got_lease ? " (a lease)" : " (busy)") : "");
    EXPECT_GE(proxy->dropped_replies(), 1u);

    auto row = read_row(*raw_, e_, name);
    ASSERT_TRUE(row.has_value()) << "the swallowed acquire did not reach the server (no row): the proxy mode is wrong";
    EXPECT_LE(row->expires_us - row->created_us, std::chrono::duration_cast<std::chrono::microseconds>(ttl).count())
        << "the unacknowledged row does not expire by its TTL";
    locker other = sqlock::table_locker(*db_, {.ttl = 5s});
    std::optional<lease> taken;
    EXPECT_TRUE(eventually([&] { return (taken = other.try_acquire(name)).has_value(); }, 30s))
        << "nobody could take the name after the unacknowledged row's TTL";
    if (taken) {
        EXPECT_GT(taken->token(), row->token);
    }
}

// The server executes the acquire and the connection is reset instead of
// answering. The store reconnects and tries again: one lease, one row, its own.
// On PostgreSQL the retry is safe because the reconnect first deletes what the
// broken attempt may have written (by attempt id); MariaDB's acquire procedure
// also recognises its own attempt's row. Without them the retry finds its own
// row and says "busy", leaving a row nobody knows about.
TEST_P(ConnFaults, ResetInsteadOfTheAcquireReplyIsCleanedUpAndRetried) {
    auto proxy = fault_proxy::for_url(url_);
    cut_on_exit cut{*proxy};
    sqlock::store db(proxy->proxied_url(url_), fast_options());
    locker L = sqlock::table_locker(db, {.ttl = 10s});
    std::string const name = n("reset-acquire");
    L.try_acquire(n("warm-up"))->release();

    proxy->reset_next_reply();
    std::optional<lease> l;
    auto const r = run_call([&] { l = L.try_acquire(name); });
    EXPECT_EQ(proxy->resets(), 1u) << "the acquire's answer was not replaced by an RST";
    ASSERT_EQ(r.what, call_result::kind::returned) << r.text;
    ASSERT_TRUE(l.has_value()) << "after an RST in place of its answer, the acquire said busy: it found the row its "
                                  "own broken attempt wrote";
    auto row = read_row(*raw_, e_, name);
    ASSERT_TRUE(row.has_value());
    EXPECT_EQ(row->owner, l->owner());
    EXPECT_EQ(row->token, l->token());
    EXPECT_NO_THROW(l->release());
    EXPECT_EQ(count_rows_named(*raw_, name), 0);
}

// A held, auto-renewed lease whose server turns into a black hole: the renewal
// is sent and never answered. The lease goes in doubt when the renewal fails
// (its bound), then lost at its safe deadline, and is never believed held after
// the database stopped holding it. An explicit renew() of another lease meets
// the same hole: it returns within its bound with a typed error and leaves that
// lease in doubt.
TEST_P(ConnFaults, BlackholedRenewalGoesInDoubtThenLost) {
    auto events = std::make_shared<event_record>();
    auto proxy = fault_proxy::for_url(url_);
    cut_on_exit cut{*proxy};
    std::optional<sqlock::store> db;
    db.emplace(proxy->proxied_url(url_), fast_options());
    std::optional<locker> L, M;
    L.emplace(sqlock::table_locker(*db, {.ttl = 4s, .on_event = event_record::hook(events)}));
    M.emplace(sqlock::table_locker(*db, {.ttl = 30s, .auto_renew = false}));
    std::string const name = n("blackholed-renewal");
    std::optional<lease> l = L->try_acquire(name);
    std::optional<lease> m = M->try_acquire(n("explicit-renew"));
    ASSERT_TRUE(l && m);
    ASSERT_TRUE(eventually([&] { return events->count(lease_event::kind::renewed, name) >= 1; }, 20s))
        << "no renewal before the fault; events:\n"
        << events->dump();

    proxy->blackhole();
    auto const hole = steady::now();
    std::stop_token const stop = l->stop_token();
    auto seen = sample_belief(
        *l, [&] { return stop.stop_requested(); }, 30s);
    EXPECT_TRUE(stop.stop_requested()) << "the lease was not reported lost 30 s into the black hole (ttl 4 s); "
                                       << "states seen: " << states_text(seen) << "; events:\n"
                                       << events->dump();
    EXPECT_EQ(l->state(), lease_state::lost);
    EXPECT_TRUE(seen.count(lease_state::in_doubt) == 1)
        << "the lease was never in doubt between the failed renewal and its safe deadline; states seen: "
        << states_text(seen) << "; events:\n"
        << events->dump();
    EXPECT_EQ(events->count_after(lease_event::kind::renewed, name, hole), 0u)
        << "a renewal succeeded through the black hole; events:\n"
        << events->dump();
    EXPECT_EQ(events->count(lease_event::kind::lost, name), 1u) << events->dump();

    call_result renewed;
    bool const returned = returned_within(30s, *proxy, [&] { renewed = run_call([&] { m->renew(); }); });
    ASSERT_TRUE(returned) << "renew() into a black hole did not return within 30 s";
    EXPECT_TRUE(renewed.typed_unreachable()) << "renew() into a black hole: " << renewed.text;
    EXPECT_EQ(m->state(), lease_state::in_doubt) << "after a renewal that could not reach the database";

    call_result released;
    bool const torn_down = returned_within(30s, *proxy, [&] {
        released = run_call([&] { l->release(); });
        l.reset();
        L.reset();
    });
    ASSERT_TRUE(torn_down) << "releasing and destroying the lost lease blocked on the black hole";
    EXPECT_EQ(released.what, call_result::kind::lease_lost) << released.text;
    proxy->block();  // what is left (m's release) fails at once instead of waiting on the hole
}

// The release's DELETE reaches the server and its answer is swallowed, as is
// the reconnect's. release() returns within its bound with a typed error; the
// lease is then in doubt (the row may or may not be gone), never "held", and
// lost at its safe deadline. The row is in fact gone (the request went through).
TEST_P(ConnFaults, SwallowedReleaseIsInDoubtThenLost) {
    auto proxy = fault_proxy::for_url(url_);
    cut_on_exit cut{*proxy};
    std::optional<sqlock::store> db;
    db.emplace(proxy->proxied_url(url_), fast_options());
    std::optional<locker> L;
    L.emplace(sqlock::table_locker(*db, {.ttl = 5s, .auto_renew = false}));
    std::string const name = n("swallowed-release");
    L->try_acquire(n("warm-up"))->release();  // the release statement is prepared: one round trip, no PREPARE
    std::optional<lease> l = L->try_acquire(name);
    ASSERT_TRUE(l.has_value());

    proxy->swallow_replies();
    call_result r;
    bool const returned = returned_within(30s, *proxy, [&] { r = run_call([&] { l->release(); }); });
    ASSERT_TRUE(returned) << "release() with its answer swallowed did not return within 30 s";
    auto const after = l->state();
    EXPECT_TRUE(r.typed_unreachable()) << "release() whose answer never came: " << r.text;
    EXPECT_NE(after, lease_state::held) << "after a release of unknown outcome the lease says held";
    EXPECT_NE(after, lease_state::released) << "a release of unknown outcome was taken for a release";
    EXPECT_EQ(count_rows_named(*raw_, name), 0) << "the swallowed DELETE did not reach the server";

    std::stop_token const stop = l->stop_token();
    EXPECT_TRUE(eventually([&] { return stop.stop_requested(); }, 30s))
        << "the lease of unknown fate was not lost at its safe deadline (ttl 5 s); state " << to_string(l->state());
    EXPECT_EQ(l->state(), lease_state::lost);
    (void)returned_within(30s, *proxy, [&] {
        l.reset();
        L.reset();
        db.reset();
    });
}

// ============================================================ 2. sessions killed by the server

// The table lock's pooled connections are ended by the server between
// renewals. The lease lives in its row, which is still there; the next renewal
// reopens the connection and goes on with the same token, without even going
// in doubt.
TEST_P(ConnFaults, KilledPooledConnectionBetweenRenewalsKeepsTheLease) {
    auto events = std::make_shared<event_record>();
    std::string const marker = new_marker();
    sqlock::store db(tagged_url(marker), {.pool_size = 2});
    locker L = sqlock::table_locker(db, {.ttl = 3s, .on_event = event_record::hook(events)});
    std::string const name = n("killed-between");
    auto l = L.try_acquire(name);
    ASSERT_TRUE(l.has_value());
    ASSERT_TRUE(eventually([&] { return events->count(lease_event::kind::renewed, name) >= 1; }, 20s))
        << events->dump();
    auto const before = read_row(*raw_, e_, name);
    ASSERT_TRUE(before.has_value());

    auto const killed = end_sessions(marker);
    auto const kill_done = steady::now();
    ASSERT_FALSE(killed.empty()) << "no session of the store to end";
    auto const right_after = read_row(*raw_, e_, name);
    ASSERT_TRUE(right_after.has_value()) << "the lock row went with the session";
    EXPECT_EQ(right_after->token, l->token());

    expect_the_lease_kept(*l, *events, kill_done, 2, "its connections were killed", before);
    EXPECT_EQ(events->count(lease_event::kind::renew_failed, name), 0u)
        << "a killed idle connection should be reopened transparently; events:\n"
        << events->dump();
    for (long long id : sessions_of(marker))
        EXPECT_EQ(std::count(killed.begin(), killed.end(), id), 0) << "session " << id << " was ended, yet shown";
    EXPECT_NO_THROW(l->release());
}

// Every connection is reset mid-stream (an RST to both ends, as from a
// middlebox or a restarted load balancer) while a lease is held. Like a killed
// session: the row is there, the next renewal reconnects, same token.
TEST_P(ConnFaults, ResetConnectionsWhileHeldKeepTheLease) {
    auto events = std::make_shared<event_record>();
    auto proxy = fault_proxy::for_url(url_);
    cut_on_exit cut{*proxy};
    sqlock::store db(proxy->proxied_url(url_), fast_options());
    locker L = sqlock::table_locker(db, {.ttl = 3s, .on_event = event_record::hook(events)});
    std::string const name = n("reset-held");
    auto l = L.try_acquire(name);
    ASSERT_TRUE(l.has_value());
    ASSERT_TRUE(eventually([&] { return events->count(lease_event::kind::renewed, name) >= 1; }, 20s))
        << events->dump();

    proxy->reset();
    auto const reset_at = steady::now();
    EXPECT_TRUE(eventually([&] { return proxy->resets() >= 1; }, 10s)) << "no connection was reset";
    expect_the_lease_kept(*l, *events, reset_at, 2, "its connections were reset");
    EXPECT_NO_THROW(l->release());
}

// The renewal is executing on the server (blocked behind a test transaction's
// row lock on the lock row) when its session is killed. The renewal reconnects
// and runs again; the lease goes on with the same token.
TEST_P(ConnFaults, KilledDuringARenewalKeepsTheLease) {
    auto events = std::make_shared<event_record>();
    std::string const marker = new_marker();
    sqlock::store db(tagged_url(marker), {.pool_size = 2, .lock_wait_timeout = 3s});
    locker L = sqlock::table_locker(db, {.ttl = 6s, .on_event = event_record::hook(events)});
    std::string const name = n("killed-during");
    auto l = L.try_acquire(name);
    ASSERT_TRUE(l.has_value());
    auto const before = read_row(*raw_, e_, name);
    ASSERT_TRUE(before.has_value());

    auto blocker = raw_session(e_, url_);
    std::optional<soci::transaction> tx;
    tx.emplace(*blocker);
    std::string tok;
    *blocker << "SELECT name FROM " + locks_table() + " WHERE name = :n FOR UPDATE", soci::into(tok), soci::use(name);
    ASSERT_TRUE(blocker->got_data());

    std::optional<long long> renewing;
    bool const blocked = eventually([&] { return (renewing = session_waiting_for_a_lock(marker)).has_value(); }, 20s);
    if (!blocked) tx->rollback();
    ASSERT_TRUE(blocked) << "the renewal never queued behind the test's row lock; the server's view:\n"
                         << server_view() << "events:\n"
                         << events->dump();
    end_session(*renewing);
    auto const killed_at = steady::now();
    tx->rollback();

    expect_the_lease_kept(*l, *events, killed_at, 1, "the renewing session was killed", before);
    EXPECT_NO_THROW(l->release());
}

// A server that starts no new session any more (a postmaster swamped by a
// connect storm, a proxy that accepts slowly: here the proxy accepts new
// connections and never answers them) while a lease with a short TTL is held:
// the renewals go on, on the connections the store opened for them when it
// opened, and the lease is kept. Were those opened at the first renewal, it
// would wait for a connect (up to connect_timeout, 2 s) and the 2 s lease
// would run out.
TEST_P(ConnFaults, ServerThatStartsNoNewSessionKeepsRenewing) {
    auto events = std::make_shared<event_record>();
    auto proxy = fault_proxy::for_url(url_);
    cut_on_exit cut{*proxy};
    sqlock::store db(proxy->proxied_url(url_), fast_options());
    locker L = sqlock::table_locker(db, {.ttl = 2s, .on_event = event_record::hook(events)});
    std::string const name = n("no-new-session");
    auto l = L.try_acquire(name);
    ASSERT_TRUE(l.has_value());
    auto const before = read_row(*raw_, e_, name);
    ASSERT_TRUE(before.has_value());

    proxy->hang_new_connections();
    auto const hung_at = steady::now();
    expect_the_lease_kept(*l, *events, hung_at, 3, "the server stopped starting sessions", before);
    EXPECT_EQ(proxy->blackholed(), 0u) << "a renewal (or the release's wake-up) asked for a new connection";
    proxy->restore();
    EXPECT_NO_THROW(l->release());
}

// The LISTEN connection of a waiter's store is killed while the waiter is
// parked (its backoff is ten minutes: only a notification can wake it in time).
// The listener reconnects and LISTENs again, and the holder's release reaches
// the waiter by NOTIFY: the hand-off happens.
TEST_P(ConnFaultsPostgres, KilledListenConnectionStillHandsOff) {
    std::string const marker = new_marker();
    sqlock::store waiter_db(tagged_url(marker));
    locker H = sqlock::table_locker(*db_, {.ttl = 30s});
    locker W = sqlock::table_locker(waiter_db, {.ttl = 30s, .backoff_min = 10min, .backoff_max = 10min});
    std::string const name = n("listen-killed");
    auto h = H.try_acquire(name);
    ASSERT_TRUE(h.has_value());

    std::atomic<bool> done{false};
    std::optional<lease> got;
    std::string failure;
    std::stop_source cancel;
    std::thread waiter([&] {
        try {
            got.emplace(W.acquire(name, 15min, cancel.get_token()));
        } catch (std::exception const& e) {
            failure = describe(e);
        }
        done = true;
    });
    struct join_on_exit {
        std::thread& t;
        std::stop_source& cancel;
        ~join_on_exit() {
            cancel.request_stop();  // a waiter still parked (the test failed) gives up at once
            t.join();
        }
    } joiner{waiter, cancel};

    std::string const listening = " AND query LIKE 'LISTEN%'";
    std::vector<long long> first;
    ASSERT_TRUE(eventually([&] { return !(first = sessions_of(marker, listening)).empty(); }, 20s))
        << "the waiter's store never LISTENed";
    ASSERT_TRUE(eventually([&] { return W.stats().busy >= 1; }, 20s)) << "the waiter never tried";
    for (long long id : first) end_session(id);
    std::vector<long long> second;
    ASSERT_TRUE(eventually(
        [&] {
            second = sessions_of(marker, listening);
            return !second.empty() && std::find(first.begin(), first.end(), second.front()) == first.end();
        },
        30s))
        << "the listener did not LISTEN again after its connection was killed";
    // The reconnect wakes every waiter once (a release may have been missed): wait
    // until the waiter has tried again and parked again.
    ASSERT_TRUE(eventually([&] { return W.stats().busy >= 2; }, 20s)) << "the waiter was not woken by the re-LISTEN";
    auto const notified_before = waiter_db.stats().notifications;

    h->release();
    h.reset();
    EXPECT_TRUE(eventually([&] { return done.load(); }, 60s))
        << "the parked waiter was not woken by the release after its LISTEN connection was killed (backoff 10 min)";
    if (!done) return;
    ASSERT_TRUE(got.has_value()) << failure;
    EXPECT_GT(waiter_db.stats().notifications, notified_before) << "the hand-off did not come by NOTIFY";
}

// The proxy's modes at the socket level, against PostgreSQL (which answers an
// 8-byte SSLRequest with one byte, 'S' or 'N'). "Nothing arrives" is checked as
// "not within 300 ms": a wrong mode can slip through, a right one never fails.
class raw_client {
public:
    explicit raw_client(int port) {
        fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        a.sin_port = htons(static_cast<std::uint16_t>(port));
        connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    }
    ~raw_client() { ::close(fd_); }
    raw_client(raw_client const&) = delete;
    raw_client& operator=(raw_client const&) = delete;
    bool connected() const { return connected_; }
    bool send_ssl_request() {
        unsigned char const req[8] = {0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f};
        return ::send(fd_, req, sizeof req, MSG_NOSIGNAL) == static_cast<ssize_t>(sizeof req);
    }
    /// "answer <c>", "eof", "reset", "error <errno>" or "nothing" (within `wait`).
    std::string next(milliseconds wait) {
        pollfd p{fd_, POLLIN, 0};
        if (::poll(&p, 1, static_cast<int>(wait.count())) == 0) return "nothing";
        char c = 0;
        ssize_t r = ::recv(fd_, &c, 1, 0);
        if (r == 1) return std::string("answer ") + c;
        if (r == 0) return "eof";
        return errno == ECONNRESET ? "reset" : "error " + std::to_string(errno);
    }

private:
    int fd_ = -1;
    bool connected_ = false;
};

TEST_P(ConnFaultsPostgres, ProxyModesAtTheSocketLevel) {
    auto proxy = fault_proxy::for_url(url_);
    cut_on_exit cut{*proxy};
    {
        raw_client c(proxy->port());
        ASSERT_TRUE(c.connected() && c.send_ssl_request());
        auto const a = c.next(10s);
        EXPECT_TRUE(a == "answer N" || a == "answer S") << "relayed: " << a;
    }
    proxy->blackhole();
    raw_client hole(proxy->port());
    ASSERT_TRUE(hole.connected()) << "the black hole must accept";
    ASSERT_TRUE(hole.send_ssl_request());
    EXPECT_EQ(hole.next(300ms), "nothing") << "the black hole answered or closed";
    EXPECT_TRUE(eventually([&] { return proxy->dropped_requests() >= 1; }, 10s));
    EXPECT_EQ(proxy->blackholed(), 1u);
    EXPECT_EQ(proxy->forwarded(), 1u) << "a black-holed connection reached the server";
    proxy->restore();
    EXPECT_EQ(hole.next(10s), "reset") << "a connection that lost bytes must be reset when the hole closes";

    proxy->swallow_replies();
    raw_client swallowed(proxy->port());
    ASSERT_TRUE(swallowed.connected() && swallowed.send_ssl_request());
    EXPECT_TRUE(eventually([&] { return proxy->dropped_replies() >= 1; }, 10s)) << "the server's answer never came";
    EXPECT_EQ(swallowed.next(300ms), "nothing") << "a swallowed answer arrived, or the connection closed";
    proxy->restore();
    EXPECT_EQ(swallowed.next(10s), "reset");

    proxy->reset_next_reply();
    raw_client reset(proxy->port());
    ASSERT_TRUE(reset.connected() && reset.send_ssl_request());
    EXPECT_EQ(reset.next(10s), "reset") << "the answer was not replaced by an RST";
    {
        raw_client c(proxy->port());
        ASSERT_TRUE(c.connected() && c.send_ssl_request());
        auto const a = c.next(10s);
        EXPECT_TRUE(a == "answer N" || a == "answer S") << "reset_next_reply() is one-shot: " << a;
    }
}

// ============================================================ 5. row-strategy loss

// A row lock's holding session is killed by the server. The holder reports the
// loss at its next keep-alive (the lost event says the database refused it, not
// that the validity ran out), another client gets the row with a greater token,
// and a fenced write by the old holder after the new one's is refused.
TEST_P(ConnFaults, KilledRowLockHolderIsLostAndItsFencedWriteRefused) {
    auto events = std::make_shared<event_record>();
    std::string const marker = new_marker();
    sqlock::store holder_db(tagged_url(marker), {.pool_size = 2});
    locker A = sqlock::row_locker(holder_db, {.ttl = 6s, .on_event = event_record::hook(events)});
    locker B = sqlock::row_locker(*db_, {.ttl = 30s});
    sqlock::fence const fence(*db_);
    std::string const name = n("row-killed");
    std::string const resource = n("resource");
    auto fenced_write = [&](std::int64_t token) {
        return run_call([&] {
            auto s = raw_session(e_, url_);
            soci::transaction tx(*s);
            fence.check_and_set(*s, resource, token);
            tx.commit();
        });
    };

    auto a = A.try_acquire(name);
    ASSERT_TRUE(a.has_value());
    EXPECT_EQ(fenced_write(a->token()).what, call_result::kind::returned);
    std::optional<long long> holder;
    ASSERT_TRUE(eventually([&] { return (holder = session_in_transaction(marker)).has_value(); }, 10s));
    end_session(*holder);

    std::optional<lease> b;
    EXPECT_NO_THROW(b = B.acquire(name, 20s)) << "another client could not take the killed holder's row";
    ASSERT_TRUE(b.has_value());
    EXPECT_GT(b->token(), a->token());
    EXPECT_EQ(fenced_write(b->token()).what, call_result::kind::returned);
    auto const stale = fenced_write(a->token());
    EXPECT_EQ(stale.what, call_result::kind::stale_token) << "the old holder's fenced write: " << stale.text;

    std::stop_token const stop = a->stop_token();
    EXPECT_TRUE(eventually([&] { return stop.stop_requested(); }, 20s))
        << "the killed holder's lease was not reported lost; events:\n"
        << events->dump();
    EXPECT_EQ(a->state(), lease_state::lost);
    auto const lost = events->of(lease_event::kind::lost, name);
    ASSERT_EQ(lost.size(), 1u) << events->dump();
    EXPECT_EQ(lost.front().detail.find("validity ran out"), std::string::npos)
        << "the loss was found only when the validity ran out, not by the keep-alive: " << lost.front().detail;
    EXPECT_THROW(a->release(), sqlock::lease_lost);
    EXPECT_NO_THROW(b->release());
}

// The fence runs on the caller's session, through the executor's one mapping of
// engine errors: a session the server ended is backend_unavailable ("retry
// later"), typed as the store's own statements are, not a generic backend_error.
TEST_P(ConnFaults, FenceOnAnEndedSessionIsBackendUnavailable) {
    sqlock::fence const fence(*db_);
    std::string const resource = n("resource");
    auto s = raw_session(e_, url_);
    ASSERT_NO_THROW(fence.check_and_set(*s, resource, 1));
    long long id = 0;
    *s << (e_ == engine::postgresql ? "SELECT pg_backend_pid()" : "SELECT CONNECTION_ID()"), soci::into(id);
    end_session(id);
    ASSERT_TRUE(eventually(
        [&] {
            long long left = 0;
            *raw_ << (e_ == engine::postgresql ? "SELECT COUNT(*) FROM pg_stat_activity WHERE pid = :id"
                                               : "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = :id"),
                soci::into(left), soci::use(id);
            return left == 0;
        },
        10s))
        << "the server still shows the ended session " << id;
    try {
        fence.check_and_set(*s, resource, 2);
        ADD_FAILURE() << "a fence on an ended session passed";
    } catch (sqlock::backend_unavailable const& e) {
        EXPECT_NE(std::string(e.what()).find("retry later"), std::string::npos) << e.what();
    } catch (std::exception const& e) {
        ADD_FAILURE() << "a fence on an ended session threw " << describe(e) << ", not backend_unavailable";
    }
}

// ============================================================ 3. fence atomicity

// Two holders' fenced writes in two open transactions, driven step by step on
// raw SOCI sessions. The lower token's transaction may start first; whatever the
// interleaving, the lower token is never accepted after the higher one.
class fence_steps {
public:
    fence_steps(engine e, std::string const& url, sqlock::fence const& f, std::string resource)
        : e_(e), url_(url), fence_(f), resource_(std::move(resource)) {}

    /// A session with a transaction open.
    struct side {
        std::unique_ptr<soci::session> s;
        std::unique_ptr<soci::transaction> tx;
    };
    side open() {
        side x{raw_session(e_, url_), nullptr};
        x.tx = std::make_unique<soci::transaction>(*x.s);
        return x;
    }
    call_result write(side& x, std::int64_t token) {
        return run_call([&] { fence_.check_and_set(*x.s, resource_, token); });
    }
    /// The token the fence holds, read on a fresh session.
    long long stored() {
        auto s = raw_session(e_, url_);
        long long t = 0;
        *s << "SELECT token FROM sqlock_fences WHERE resource = :r", soci::into(t), soci::use(resource_);
        return s->got_data() ? t : -1;
    }

private:
    engine e_;
    std::string url_;
    sqlock::fence const& fence_;
    std::string resource_;
};

class FenceRace : public engine_fixture {
protected:
    /// Two real tokens of one name: the lower from a released lease, the higher from the next grant.
    std::pair<std::int64_t, std::int64_t> two_tokens() {
        locker L = sqlock::table_locker(*db_, {.ttl = 10s, .auto_renew = false});
        auto a = L.try_acquire(n("tokens"));
        auto const low = a->token();
        a->release();
        auto b = L.try_acquire(n("tokens"));
        auto const high = b->token();
        b->release();
        return {low, high};
    }

    /// Is the session of `x` blocked on a lock inside the server? (SQLite: unknown.)
    bool blocked_in_server(soci::session& probe, long long id) {
        long long n = 0;
        if (e_ == engine::postgresql) {
            int pid = static_cast<int>(id);
            probe << "SELECT COUNT(*) FROM pg_stat_activity WHERE pid = :p AND wait_event_type = 'Lock'", soci::into(n),
                soci::use(pid);
        } else {
            // Executing a statement (not idle): the fenced write, waiting for the row.
            probe << "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = :i AND COMMAND <> 'Sleep'",
                soci::into(n), soci::use(id);
        }
        return n > 0;
    }

    long long session_id(soci::session& s) {
        long long id = 0;
        if (e_ == engine::postgresql) s << "SELECT CAST(pg_backend_pid() AS bigint)", soci::into(id);
        else if (e_ == engine::mysql) s << "SELECT CAST(CONNECTION_ID() AS SIGNED)", soci::into(id);
        return id;
    }

    /// The lower token's write `r` once the higher token has committed: refused
    /// (stale_token; SQLite may refuse the stale snapshot's write otherwise), its
    /// transaction rolled back, and the fence still at the higher token.
    void expect_refused_after_the_higher(fence_steps& st, fence_steps::side& lo, call_result const& r, std::int64_t low,
                                         std::int64_t high) {
        EXPECT_NE(r.what, call_result::kind::returned)
            << "token " << low << " was accepted after " << high << " committed";
        if (e_ != engine::sqlite) {
            EXPECT_EQ(r.what, call_result::kind::stale_token) << r.text;
        }
        try {
            lo.tx->rollback();
        } catch (std::exception const&) {}
        EXPECT_EQ(st.stored(), high);
    }

    /// Runs `f` on a thread; waits until `x` blocks in the server (or, on
    /// SQLite, a moment), then runs `unblock`; returns f's result.
    call_result blocked_write(fence_steps& st, fence_steps::side& x, std::int64_t token,
                              std::function<void()> const& unblock, bool& finished_early) {
        long long const id = session_id(*x.s);
        std::promise<call_result> p;
        auto fut = p.get_future();
        std::thread t([&] { p.set_value(st.write(x, token)); });
        if (e_ == engine::sqlite) {
            finished_early = fut.wait_for(300ms) == std::future_status::ready;
        } else {
            auto probe = raw_session(e_, url_);
            bool const waits = eventually([&] { return blocked_in_server(*probe, id); }, 20s);
            finished_early = fut.wait_for(0s) == std::future_status::ready;
            EXPECT_TRUE(waits || finished_early) << "the second fenced write neither blocked nor finished";
        }
        unblock();
        t.join();
        return fut.get();
    }
};

// The lower token's transaction starts first and reads (its snapshot is taken);
// the higher token's transaction writes and commits; then the lower one
// writes: refused (MariaDB's REPEATABLE READ snapshot must not hide the higher
// token; SQLite refuses the stale snapshot's write).
TEST_P(FenceRace, LowerTokenStartedFirstIsRefusedAfterTheHigherCommits) {
    auto const [low, high] = two_tokens();
    sqlock::fence const f(*db_);
    fence_steps st(e_, url_, f, n("resource"));
    {
        auto seed = st.open();
        ASSERT_EQ(st.write(seed, low - 1 > 0 ? low - 1 : low).what, call_result::kind::returned);
        seed.tx->commit();
    }
    auto lo = st.open();
    long long seen = 0;
    *lo.s << "SELECT COUNT(*) FROM sqlock_fences", soci::into(seen);  // the lower transaction's snapshot
    auto hi = st.open();
    ASSERT_EQ(st.write(hi, high).what, call_result::kind::returned);
    hi.tx->commit();
    auto const r = st.write(lo, low);
    expect_refused_after_the_higher(st, lo, r, low, high);
}

// The higher token writes first and keeps its transaction open; the lower
// token's write (on a resource the fence has never seen: the insert path)
// blocks on it, and is refused once the higher commits.
TEST_P(FenceRace, LowerTokenBlockedBehindTheHigherIsRefused) {
    auto const [low, high] = two_tokens();
    sqlock::fence const f(*db_);
    fence_steps st(e_, url_, f, n("resource"));
    auto hi = st.open();
    ASSERT_EQ(st.write(hi, high).what, call_result::kind::returned);
    auto lo = st.open();
    bool early = false;
    auto const r = blocked_write(
        st, lo, low, [&] { hi.tx->commit(); }, early);
    EXPECT_FALSE(early && r.what == call_result::kind::returned)
        << "token " << low << " was accepted while " << high << " held the resource";
    expect_refused_after_the_higher(st, lo, r, low, high);
}

// The control: the lower token writes first; the higher one blocks, and passes
// once the lower commits. Both are accepted, in token order; a late write of
// the lower token afterwards is refused.
TEST_P(FenceRace, HigherTokenBlockedBehindTheLowerPassesAfterIt) {
    auto const [low, high] = two_tokens();
    sqlock::fence const f(*db_);
    fence_steps st(e_, url_, f, n("resource"));
    auto lo = st.open();
    ASSERT_EQ(st.write(lo, low).what, call_result::kind::returned);
    auto hi = st.open();
    bool early = false;
    auto const r = blocked_write(
        st, hi, high, [&] { lo.tx->commit(); }, early);
    if (e_ == engine::sqlite && r.what != call_result::kind::returned) {
        // SQLite: a writer waiting on another's write lock may get SQLITE_BUSY; it is not accepted either.
        EXPECT_EQ(st.stored(), low);
        return;
    }
    EXPECT_EQ(r.what, call_result::kind::returned) << r.text;
    hi.tx->commit();
    EXPECT_EQ(st.stored(), high);
    auto late = st.open();
    EXPECT_EQ(st.write(late, low).what, call_result::kind::stale_token);
    late.tx->rollback();
    EXPECT_EQ(st.stored(), high);
}

// ============================================================ 4. the CLI during an outage

#ifdef SQLOCK_CLI
// `sqlock run` through a proxy that refuses the database for a while, less than
// the TTL: the renewals fail (the lease is in doubt), then succeed again. COMMAND
// is not stopped: it finishes on its own and its exit code is sqlock's.
TEST_P(ConnFaults, CliOutageShorterThanTheTtlDoesNotStopTheCommand) {
    auto proxy = fault_proxy::for_url(url_);
    cut_on_exit cut{*proxy};
    temp_dir dir;
    std::string const name = n("cli-short-outage");
    std::string const script =
        "touch \"$1/started\"; trap 'touch \"$1/term\"' TERM; while [ ! -e \"$1/go\" ]; do sleep 0.02; done; "
        "touch \"$1/done\"; exit 42";
    cli_process cli({"run", "--db", proxy->proxied_url(url_), "--name", name, "--ttl", "6s", "--", "sh", "-c", script,
                     "sh", dir.path().string()},
                    dir.path());
    ASSERT_TRUE(eventually([&] { return fs::exists(dir.path() / "started") || cli.finished(); }, 30s));
    ASSERT_TRUE(fs::exists(dir.path() / "started")) << cli.report();

    proxy->block();  // every connection cut, new ones closed at once
    auto const refused_before = proxy->refused();
    bool const tried = eventually([&] { return proxy->refused() > refused_before; }, 20s);
    auto const during = read_row(*raw_, e_, name);
    proxy->unblock();
    ASSERT_TRUE(tried) << "sqlock run did not try the database during the outage; " << cli.report();
    ASSERT_TRUE(during.has_value()) << "the lock row is gone";
    EXPECT_TRUE(eventually(
        [&] {
            auto r = read_row(*raw_, e_, name);
            return r && r->token == during->token && r->expires_us > during->expires_us;
        },
        20s))
        << "no renewal succeeded after the outage; " << cli.report();
    EXPECT_FALSE(fs::exists(dir.path() / "term")) << "COMMAND was signalled while the lease was only in doubt";

    { std::ofstream(dir.path() / "go"); }
    cli_result const r = cli.wait(60s);
    EXPECT_EQ(r.code(), 42) << "sqlock run should exit with COMMAND's code; " << r.describe();
    EXPECT_TRUE(fs::exists(dir.path() / "done")) << cli.report();
    EXPECT_FALSE(fs::exists(dir.path() / "term")) << cli.report();
    EXPECT_EQ(count_rows_named(*raw_, name), 0) << "the lock was not released";
}

// The database turns into a black hole while COMMAND runs and stays one past
// the lease's safe deadline: sqlock signals COMMAND (SIGTERM) and exits 76,
// the lease-lost code, without waiting on the silent server.
TEST_P(ConnFaults, CliOutagePastTheSafeDeadlineStopsTheCommand) {
    auto proxy = fault_proxy::for_url(url_);
    cut_on_exit cut{*proxy};
    temp_dir dir;
    std::string const name = n("cli-long-outage");
    std::string const script =
        "touch \"$1/started\"; trap 'touch \"$1/term\"; exit 0' TERM; while :; do sleep 0.02; done";
    cli_process cli({"run", "--db", proxy->proxied_url(url_), "--name", name, "--ttl", "3s", "--", "sh", "-c", script,
                     "sh", dir.path().string()},
                    dir.path());
    ASSERT_TRUE(eventually([&] { return fs::exists(dir.path() / "started") || cli.finished(); }, 30s));
    ASSERT_TRUE(fs::exists(dir.path() / "started")) << cli.report();
    ASSERT_FALSE(fs::exists(dir.path() / "term"));

    proxy->blackhole();
    cli_result const r = cli.wait(60s);
    EXPECT_EQ(r.code(), 76) << "sqlock run should exit 76 (lock lost) when the outage outlasts the lease; "
                            << r.describe();
    EXPECT_TRUE(fs::exists(dir.path() / "term")) << "COMMAND was not sent SIGTERM; " << cli.report();
    EXPECT_GE(proxy->dropped_requests() + proxy->blackholed(), 1u) << "sqlock never met the black hole";
}
#endif

// ============================================================ 6. server crash: table-lock tokens and holders

// Table locks held (auto-renewed) and granted in a loop while the server is
// killed with SIGKILL and recovers. Every token granted after the crash is
// greater than every token acknowledged before it; each holder either renews
// after recovery with its own token (its row is there, unexpired) or reports
// the lease lost — never held without its row. (Engines/Crash.* covers a burst
// of grants before a crash and relaxed durability; this is the live holders
// and a grant loop running through the crash.)
TEST_P(ConnFaultsCrash, HoldersAndGrantsAcrossAServerCrash) {
    std::string crash_cmd;
    require_env(e_ == engine::postgresql ? "SQLOCK_TEST_PG_CRASH" : "SQLOCK_TEST_MYSQL_CRASH", crash_cmd);
    if (should_stop()) return;
    auto events = std::make_shared<event_record>();
    // PostgreSQL: the URL asks for synchronous_commit = off; the store's own
    // connections must commit grants durably anyway.
    std::string const url = e_ == engine::postgresql ? url_ + "?options=-c%20synchronous_commit%3Doff" : url_;
    sqlock::store s(url, {.pool_size = 4, .connect_timeout = 2s, .io_timeout = 2s});
    locker H = sqlock::table_locker(s, {.ttl = 10s, .on_event = event_record::hook(events)});
    locker C = sqlock::table_locker(s, {.ttl = 4s, .backoff_max = 100ms});
    std::vector<std::string> names;
    std::vector<lease> held;
    for (int i = 0; i < 3; ++i) {
        names.push_back(n("holder-" + std::to_string(i)));
        held.push_back(H.acquire(names.back(), 10s));
    }

    struct grant {
        std::int64_t token;
        steady::time_point invoked, ok;
    };
    std::mutex m;
    std::vector<grant> grants;
    std::vector<std::string> errors;
    std::atomic<bool> stop{false};
    std::string const hot = n("hot");
    std::thread churn([&] {
        while (!stop) {
            auto const invoked = steady::now();
            try {
                lease l = C.acquire(hot, 2s);
                auto const ok = steady::now();
                {
                    std::lock_guard lock(m);
                    grants.push_back({l.token(), invoked, ok});
                }
                try {
                    l.release();
                } catch (sqlock::error const&) {}
            } catch (std::exception const& e) {
                std::lock_guard lock(m);
                errors.push_back(describe(e));
                std::this_thread::sleep_for(50ms);
            }
        }
    });
    struct stop_churn {
        std::atomic<bool>& stop;
        std::thread& t;
        ~stop_churn() {
            stop = true;
            if (t.joinable()) t.join();
        }
    } stopper{stop, churn};
    auto grants_where = [&](auto pred) {
        std::lock_guard lock(m);
        std::size_t k = 0;
        for (auto const& g : grants) k += pred(g) ? 1 : 0;
        return k;
    };
    ASSERT_TRUE(eventually([&] { return grants_where([](grant const&) { return true; }) >= 20; }, 30s));

    auto const crash_start = steady::now();
    int const rc = std::system(crash_cmd.c_str());
    auto const crash_end = steady::now();
    ASSERT_TRUE(rc != -1 && WIFEXITED(rc) && WEXITSTATUS(rc) == 0) << "the crash command failed: " << crash_cmd;
    raw_ = raw_session(e_, url_);

    EXPECT_TRUE(
        eventually([&] { return grants_where([&](grant const& g) { return g.invoked > crash_end; }) >= 10; }, 60s))
        << "fewer than 10 grants after the crash";
    stop = true;
    churn.join();

    // Tokens: strictly increasing in grant order (one sequential client), and
    // every grant after the crash above every grant acknowledged before it.
    std::int64_t before_max = 0, after_min = INT64_MAX;
    std::string order;
    for (std::size_t i = 0; i < grants.size(); ++i) {
        if (grants[i].ok < crash_start) before_max = std::max(before_max, grants[i].token);
        if (grants[i].invoked > crash_end) after_min = std::min(after_min, grants[i].token);
        if (i > 0 && grants[i].token <= grants[i - 1].token && order.size() < 500)
            order += " " + std::to_string(grants[i - 1].token) + "->" + std::to_string(grants[i].token);
    }
    EXPECT_TRUE(order.empty()) << "tokens not increasing in grant order:" << order;
    EXPECT_LT(before_max, after_min) << "a token granted after the crash is not above every token acknowledged before";

    // Holders: renewed after recovery with their own row, or lost.
    for (std::size_t i = 0; i < held.size(); ++i) {
        auto& l = held[i];
        bool const settled = eventually(
            [&] { return l.lost() || events->count_after(lease_event::kind::renewed, names[i], crash_end) >= 1; }, 30s);
        EXPECT_TRUE(settled) << names[i] << " neither renewed after recovery nor was lost; events:\n" << events->dump();
        auto const r = read_row(*raw_, e_, names[i]);
        auto const st = l.state();
        if (st == lease_state::held || st == lease_state::in_doubt) {
            ASSERT_TRUE(r.has_value()) << names[i] << " says " << to_string(st) << " but its row is gone";
            EXPECT_EQ(r->token, l.token()) << names[i];
            EXPECT_EQ(r->owner, l.owner()) << names[i];
            EXPECT_TRUE(r->live()) << names[i] << " says " << to_string(st) << " but its row expired";
        }
        std::cout << "[ record   ] " << names[i] << " after the crash: " << to_string(st) << "\n";
    }
    std::cout << "[ record   ] " << grants.size() << " grants, " << errors.size()
              << " failed acquires during the crash\n";
}

INSTANTIATE_TEST_SUITE_P(Engines, ConnFaults, ::testing::Values(engine::postgresql, engine::mysql),
                         engine_param_name{});
INSTANTIATE_TEST_SUITE_P(Engines, ConnFaultsPostgres, ::testing::Values(engine::postgresql), engine_param_name{});
INSTANTIATE_TEST_SUITE_P(Engines, FenceRace, ::testing::Values(engine::postgresql, engine::mysql, engine::sqlite),
                         engine_param_name{});
INSTANTIATE_TEST_SUITE_P(Engines, ConnFaultsCrash, ::testing::Values(engine::postgresql, engine::mysql),
                         engine_param_name{});

}  // namespace
