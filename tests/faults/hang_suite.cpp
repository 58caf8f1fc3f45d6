// sqlock tests — hangs and late answers (issue 9): Engines/Hang.<Test>/<engine>.
//
// Regression tests for the safety fixes where the old code hung, let a late
// answer undo a loss, or mistook a busy database for an outage:
//   - a renewal stuck on a hung server (tests/fault_proxy.hpp stall(): every
//     connection stays open and nothing is relayed) does not delay the loss
//     signal, and no call blocks without limit (#3);
//   - a renewal whose reply arrives after the safe deadline (proxy delay())
//     does not bring a lost lease back (#11a);
//   - SQLite BUSY while a row lock holds the file is "busy" within the
//     caller's deadline (#11d);
//   - acquire(name, milliseconds::max()) waits instead of overflowing (#11f);
//   - a database that cannot be put in WAL mode is refused (#11g);
//   - a forked child never releases its parent's lease (#11h).
// Tests that need a network to stall or delay run on PostgreSQL and MariaDB
// only, the SQLite file-lock and WAL tests on SQLite only: the other instances
// skip, saying why.
//
// What happened is recorded (lease events with sequence numbers, outcomes of
// calls) and checked afterwards. Waits are bounded polls; a call that may hang
// runs on a thread of its own with a bounded wait, so a hang is a failure, not
// a hung test. Nothing asserts how fast something happened, beyond "it
// returned before an absurd bound".
#include "fault_calls.hpp"
#include "fault_proxy.hpp"
#include "test_env.hpp"
#include "test_process.hpp"

#include <sqlock/sqlock.hpp>

#include <gtest/gtest.h>

#include <signal.h>
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
using sqlock::locker_options;
using std::chrono::milliseconds;
using steady = std::chrono::steady_clock;

enum class strategy { table, row };

std::string strategy_name(strategy s) { return s == strategy::table ? "table lock" : "row lock"; }

locker make_locker(strategy s, sqlock::store const& db, locker_options o) {
    return s == strategy::table ? sqlock::table_locker(db, std::move(o)) : sqlock::row_locker(db, std::move(o));
}

class Hang : public engine_fixture {
protected:
    bool server() const { return e_ != engine::sqlite; }

    /// Options of a store that talks through a stalled proxy: every bound short,
    /// so each call ends in seconds.
    static sqlock::store_options stall_options() {
        sqlock::store_options o;
        o.create_schema = true;
        o.connect_timeout = 2s;
        o.lock_wait_timeout = 1s;
#ifndef SQLOCK_HANG_OLD_API
        o.io_timeout = 1s;
#endif
        return o;
    }

    void hung_renewal(strategy s);
    void late_renewal_reply(strategy s);
    void max_wait(strategy s, sqlock::store const& db, std::string const& name,
                  std::function<bool()> const& waiting_in_engine);
    void fork_cannot_release(strategy s);
};

/// Drops the tables (and the row-token sequence) of a test's own table_prefix on scope exit.
struct drop_tables_on_exit {
    engine e;
    std::string url, tables;
    ~drop_tables_on_exit() {
        try {
            auto s = raw_session(e, url);
            for (auto const* t : {"_locks", "_tokens", "_fences", "_rows"}) *s << "DROP TABLE IF EXISTS " + tables + t;
            *s << "DROP SEQUENCE IF EXISTS " + tables + "_row_tokens";
        } catch (std::exception const& x) {
            ADD_FAILURE() << "could not drop the test tables " << tables << "_*: " << describe(x);
        }
    }
};

// Items that need a network connection to stall or delay run on the servers;
// engine-specific items on their engine: each fixture is instantiated only for
// the engines its tests apply to (nothing skips).
class HangServer : public Hang {};
class HangPostgres : public Hang {};
class HangSqlite : public Hang {};

// ============================================================ #3 a hung renewal

// The proxy stalls after the acquire: the next renewal is sent and never
// answered, on a socket that stays healthy (libpq has no timeout of its own).
// The deadline thread must report the loss at the safe deadline whatever the
// renewal is doing: `lost` is recorded, and before any `renew_failed` (the
// failure of the stuck renewal can only be known later). Then release() and
// the destruction of the lease, the locker and the store must all return.
void Hang::hung_renewal(strategy s) {
    auto events = std::make_shared<event_record>();
    auto proxy = fault_proxy::for_url(url_);
    std::string const name = n("hung-renewal");
    std::optional<sqlock::store> db;
    db.emplace(proxy->proxied_url(url_), stall_options());
    std::optional<locker> L;
    L.emplace(make_locker(s, *db, {.ttl = 2s, .auto_renew = true, .on_event = event_record::hook(events)}));
    std::optional<lease> l = L->try_acquire(name);
    // On any early exit: cut every connection, so destroying what is left cannot hang.
    cut_on_exit guard{*proxy};
    ASSERT_TRUE(l.has_value()) << "could not take the " << strategy_name(s) << " through the proxy";
    ASSERT_GE(proxy->forwarded(), 1u) << "the store did not connect through the proxy";

    proxy->stall();  // the watchdog's renewal at ttl/3 is sent and never answered
    std::stop_token const stop = l->stop_token();
    bool const signalled = eventually([&] { return stop.stop_requested(); }, 30s);
    EXPECT_TRUE(signalled) << "30 s after the server stopped answering (ttl 2 s), the lease's stop_token was not "
                           << "requested: the loss signal waits for the stuck renewal. State " << to_string(l->state())
                           << "; events:\n"
                           << events->dump();
    EXPECT_EQ(l->state(), lease_state::lost);
    auto const lost = events->seqs(lease_event::kind::lost, name);
    auto const failed = events->seqs(lease_event::kind::renew_failed, name);
    EXPECT_EQ(events->count(lease_event::kind::renewed, name), 0u)
        << "a renewal succeeded although the proxy relayed nothing; events:\n"
        << events->dump();
    if (signalled) {
        ASSERT_EQ(lost.size(), 1u) << "events:\n" << events->dump();
        if (!failed.empty()) {
            EXPECT_LT(lost.front(), failed.front())
                << "the stuck renewal's failure was reported before the loss: the deadline waited for the I/O; "
                   "events:\n"
                << events->dump();
        }
    }

    // With the server still silent: release, then destroy the lease, the locker
    // and the store. Each may try the database; none may block without limit.
    std::string released;
    bool const returned = returned_within(30s, *proxy, [&] {  // unstuck by cutting every connection
        released = run_call([&] { l->release(); }).text;
        l.reset();
        L.reset();
        db.reset();
    });
    EXPECT_TRUE(returned) << "release() and destroying the lease, locker and store did not return within 30 s "
                          << "while the server was silent";
    if (returned) {
        EXPECT_NE(released.find("lease_lost"), std::string::npos) << "release() of the lost lease: " << released;
    }
    std::cout << "[ record   ] " << strategy_name(s) << " events:\n"
              << events->dump() << "[ record   ] release(): " << released << "\n";
}

TEST_P(HangServer, HungRenewalIsLostAtTheSafeDeadline) { hung_renewal(strategy::table); }

TEST_P(HangServer, HungRowKeepAliveIsLostAtTheSafeDeadline) { hung_renewal(strategy::row); }

// An explicit keep-alive that gets no answer within io_timeout gives its
// connection up, which ends the holding transaction: the loss says that (issue
// 18, item 7), not "the row expired or is someone else's".
TEST_P(HangServer, RowKeepAliveWithoutAnswerSaysWhatHappened) {
    auto events = std::make_shared<event_record>();
    auto proxy = fault_proxy::for_url(url_);
    std::string const name = n("silent-keep-alive");
    std::optional<sqlock::store> db;
    db.emplace(proxy->proxied_url(url_), stall_options());
    std::optional<locker> L;
    L.emplace(
        make_locker(strategy::row, *db, {.ttl = 30s, .auto_renew = false, .on_event = event_record::hook(events)}));
    std::optional<lease> l = L->try_acquire(name);
    cut_on_exit guard{*proxy};
    ASSERT_TRUE(l.has_value()) << "could not take the row lock through the proxy";

    proxy->stall();  // the keep-alive is sent and never answered
    std::string renewed, released;
    bool const returned = returned_within(30s, *proxy, [&] {
        renewed = run_call([&] { l->renew(); }).text;
        released = run_call([&] { l->release(); }).text;
        l.reset();
        L.reset();
        db.reset();
    });
    ASSERT_TRUE(returned) << "renew(), release() and the destructors did not return within 30 s";
    std::string const said = "the keep-alive got no answer within its deadline, so its connection was closed";
    EXPECT_NE(renewed.find("lease_lost"), std::string::npos) << renewed;
    EXPECT_NE(renewed.find(said), std::string::npos) << renewed;
    EXPECT_NE(released.find("lease_lost"), std::string::npos) << released;
    EXPECT_NE(released.find(said), std::string::npos) << released;
    auto const lost = events->of(lease_event::kind::lost, name);
    ASSERT_EQ(lost.size(), 1u) << events->dump();
    EXPECT_NE(lost.front().detail.find(said), std::string::npos) << lost.front().detail;
    EXPECT_EQ(lost.front().detail.find("someone else"), std::string::npos) << lost.front().detail;
}

// A try on a silent server returns within io_timeout (plus the engine's own
// wait and a reconnect), and says what it knows:
//  - table lock: the INSERT was sent on an open connection and never answered,
//    so it may have been applied; the clean-up of the attempt (a DELETE by
//    attempt id on a fresh connection) cannot run either, because reconnecting
//    fails. store_impl::run: "If reopening or this clean-up fails ... the
//    outcome is unknown and in_doubt is thrown" -> sqlock::in_doubt.
//  - row lock: the lock lives in a transaction on that connection, which died
//    with it, so nothing can be held; acquire_row reopens once, that fails ->
//    sqlock::backend_unavailable.
TEST_P(HangServer, TryAcquireOnASilentServerIsBounded) {
    auto proxy = fault_proxy::for_url(url_);
    std::vector<std::string> record;
    for (strategy s : {strategy::table, strategy::row}) {
        SCOPED_TRACE(strategy_name(s));
        proxy->unblock();
        proxy->resume();
        // Opening the store opens one pooled connection: the try below is sent on it.
        std::optional<sqlock::store> db;
        db.emplace(proxy->proxied_url(url_), [] {
            auto o = stall_options();
            o.pool_size = 1;
            return o;
        }());
        std::optional<locker> L;
        L.emplace(make_locker(s, *db, {.ttl = 10s}));
        cut_on_exit guard{*proxy};
        proxy->stall();
        call_result got;
        bool const returned = returned_within(30s, *proxy, [&] {
            got = run_call([&] {
                auto l = L->try_acquire(n(s == strategy::table ? "silent-table" : "silent-row"));
                if (l) l->release();
            });
            L.reset();
            db.reset();
        });
        EXPECT_TRUE(returned) << "try_acquire() on a silent server (io_timeout 1 s) did not return within 30 s";
        if (!returned) continue;
        record.push_back(strategy_name(s) + ": " + got.text);
        auto const want = s == strategy::table ? call_result::kind::in_doubt : call_result::kind::backend_unavailable;
        EXPECT_EQ(got.what, want) << "expected sqlock::" << (s == strategy::table ? "in_doubt" : "backend_unavailable")
                                  << ", got " << got.text;
    }
    for (auto const& r : record) std::cout << "[ record   ] " << r << "\n";
}

// PostgreSQL's LISTEN connection (started by the first waiting acquire) is a
// connection too: if the server goes silent while it subscribes, closing the
// store must still return. Each relayed chunk is held 300 ms; once the server
// shows the LISTEN (pg_stat_activity), its answer is still held in the proxy,
// and the proxy stalls.
TEST_P(HangPostgres, StoreClosesWhileItsListenerSubscribesOnASilentServer) {
    std::string const tables = "sqlh_" + random_hex(10);  // own channel: <tables>_released
    drop_tables_on_exit cleanup{e_, url_, tables};
    auto proxy = fault_proxy::for_url(url_);
    auto o = stall_options();
    o.connect_timeout = 20s;  // the listener's handshake goes through the latency
    o.table_prefix = tables;
    std::optional<sqlock::store> db;
    db.emplace(proxy->proxied_url(url_), o);
    std::optional<locker> L;
    L.emplace(sqlock::table_locker(*db, {.ttl = 10s}));
    cut_on_exit guard{*proxy};
    proxy->delay(300ms);
    {
        lease l = L->acquire(n("listen"), 0ms);  // a waiting acquire: starts the listener
        l.release();
    }
    std::string const listen = "LISTEN \"" + tables + "_released\"";
    bool const seen = eventually(
        [&] {
            long long k = 0;
            *raw_ << "SELECT COUNT(*) FROM pg_stat_activity WHERE query = :q", soci::into(k), soci::use(listen);
            return k > 0;
        },
        30s);
    ASSERT_TRUE(seen) << "the server never showed the listener's " << listen;
    proxy->stall();  // the answer to LISTEN is held for good

    bool const returned = returned_within(30s, *proxy, [&] {
        L.reset();
        db.reset();
    });
    EXPECT_TRUE(returned) << "destroying the store did not return within 30 s: its LISTEN connection waits for "
                             "an answer from a silent server";
}

// ============================================================ #11a a late renewal reply

// The renewal is sent shortly before the safe deadline through a proxy that
// holds each chunk 200 ms: the server accepts it in time, but its reply comes
// after the safe deadline. The lease was lost at that deadline and stays lost:
// renew() does not report success, no `renewed` event follows the `lost` one,
// and a second renew() throws lease_lost.
void Hang::late_renewal_reply(strategy s) {
    auto events = std::make_shared<event_record>();
    auto proxy = fault_proxy::for_url(url_);
    std::string const name = n("late-reply");
    sqlock::store db(proxy->proxied_url(url_), sqlock::store_options{.create_schema = true});
    locker L = make_locker(s, db, {.ttl = 2s, .auto_renew = false, .on_event = event_record::hook(events)});
    std::optional<lease> l = L.try_acquire(name);
    ASSERT_TRUE(l.has_value());
    ASSERT_NO_THROW(l->renew()) << "a renewal without latency failed";  // opens the renewal's connection
    ASSERT_EQ(events->count(lease_event::kind::renewed, name), 1u) << events->dump();

    bool const near = eventually([&] { return l->remaining() < 300ms; }, 10s);
    ASSERT_TRUE(near) << "remaining() never fell below 300 ms";
    ASSERT_EQ(l->state(), lease_state::held);
    proxy->delay(200ms);  // request +200 ms (accepted in time), reply +200 ms more (after the deadline)
    call_result const late = run_call([&] { l->renew(); });
    proxy->delay(0ms);

    EXPECT_NE(late.what, call_result::kind::returned)
        << "renew() reported success although its reply came after the lease's safe deadline";
    EXPECT_EQ(l->state(), lease_state::lost) << "after a renewal answered too late; renew(): " << late.text;
    EXPECT_TRUE(l->stop_token().stop_requested());
    auto const lost = events->seqs(lease_event::kind::lost, name);
    auto const renewed = events->seqs(lease_event::kind::renewed, name);
    EXPECT_EQ(lost.size(), 1u) << events->dump();
    EXPECT_EQ(renewed.size(), 1u) << "the late reply was taken as a renewal; events:\n" << events->dump();
    if (!lost.empty() && !renewed.empty()) {
        EXPECT_LT(renewed.back(), lost.front()) << "a renewal was reported after the loss; events:\n" << events->dump();
    }

    // Later, without latency: still lost, and renew() says so.
    call_result const again = run_call([&] { l->renew(); });
    EXPECT_EQ(again.what, call_result::kind::lease_lost) << "a second renew(): " << again.text;
    EXPECT_EQ(l->state(), lease_state::lost);
    EXPECT_EQ(l->remaining(), steady::duration::zero());
    std::cout << "[ record   ] " << strategy_name(s) << ": late renew(): " << late.text
              << "\n[ record   ] second renew(): " << again.text << "\n[ record   ] events:\n"
              << events->dump();
}

TEST_P(HangServer, LateRenewalReplyDoesNotReviveALostLease) { late_renewal_reply(strategy::table); }

TEST_P(HangServer, LateKeepAliveReplyDoesNotReviveALostRowLease) { late_renewal_reply(strategy::row); }

// The same with the watchdog's own renewal: ttl 3 s, renewed at ~1 s with
// ~2 s of safe validity left; each chunk is held 1.4 s, so the server accepts
// the renewal in time and its reply comes after the safe deadline. The old
// watchdog did the renewal itself, so nothing reported the loss meanwhile and
// the late reply made the lease held again.
TEST_P(HangServer, LateAutoRenewalReplyDoesNotReviveALostLease) {
    auto events = std::make_shared<event_record>();
    auto proxy = fault_proxy::for_url(url_);
    std::string const name = n("late-auto");
    sqlock::store db(proxy->proxied_url(url_), sqlock::store_options{.create_schema = true});
    locker L = sqlock::table_locker(db, {.ttl = 3s, .auto_renew = true, .on_event = event_record::hook(events)});
    std::optional<lease> l = L.try_acquire(name);
    ASSERT_TRUE(l.has_value());
    proxy->delay(1400ms);
    struct no_delay_on_exit {
        fault_proxy& p;
        ~no_delay_on_exit() { p.delay(0ms); }
    } guard{*proxy};

    // Until the renewal has an outcome (renewed, renew_failed or lost), and the lease is lost.
    auto outcome = [&] {
        return events->count(lease_event::kind::renewed, name) + events->count(lease_event::kind::renew_failed, name) +
               events->count(lease_event::kind::lost, name);
    };
    ASSERT_TRUE(eventually([&] { return outcome() > 0; }, 30s)) << events->dump();
    // The old watchdog's late renewal: it reports `renewed`; wait for the reply to be taken in.
    bool const lost = eventually([&] { return l->state() == lease_state::lost; }, 30s);
    EXPECT_TRUE(lost) << "the lease is " << to_string(l->state())
                      << " although its renewal was answered after the safe deadline; events:\n"
                      << events->dump();
    EXPECT_EQ(events->count(lease_event::kind::renewed, name), 0u)
        << "a reply that came after the safe deadline was taken as a renewal; events:\n"
        << events->dump();
    proxy->delay(0ms);
    call_result const again = run_call([&] { l->renew(); });
    EXPECT_EQ(again.what, call_result::kind::lease_lost) << "renew() of the lost lease: " << again.text;
    EXPECT_EQ(l->state(), lease_state::lost);
    std::cout << "[ record   ] renew() afterwards: " << again.text << "\n[ record   ] events:\n" << events->dump();
}

// ============================================================ #11d SQLite busy under a row lock

// A row lock on SQLite is BEGIN IMMEDIATE: it holds the whole file. A table
// lock on another store of the same file then finds the database busy: that is
// "the lock is busy" (an empty try, a timeout for a waiting acquire within its
// own deadline), not an outage after retrying for two lock-wait bounds.
TEST_P(HangSqlite, SqliteBusyUnderARowLockIsBusyWithinTheDeadline) {
    locker rows = sqlock::row_locker(*db_, {.ttl = 5min});
    std::optional<lease> holder = rows.try_acquire(n("holds-the-file"));
    ASSERT_TRUE(holder.has_value());
    std::string const name = n("table");

    // try_acquire: busy after the store's lock wait (1 s), not an error.
    {
        sqlock::store other(url_, {.lock_wait_timeout = 1s});
        locker T = sqlock::table_locker(other);
        call_result got;
        bool busy = false;
        bool const returned = returned_within(
            60s, [&] { holder.reset(); },  // unstick: the file is free again
            [&] { got = run_call([&] { busy = !T.try_acquire(name).has_value(); }); });
        EXPECT_TRUE(returned) << "try_acquire() did not return within 60 s";
        EXPECT_EQ(got.what, call_result::kind::returned)
            << "try_acquire() while a row lock holds the file threw " << got.text << " instead of returning empty";
        if (got.what == call_result::kind::returned) {
            EXPECT_TRUE(busy) << "try_acquire() got the lock";
        }
        std::cout << "[ record   ] try_acquire(): "
                  << (got.what == call_result::kind::returned ? (busy ? std::string("empty") : std::string("a lease"))
                                                              : got.text)
                  << "\n";
    }
    if (!holder) return;

    // acquire(name, 500 ms) on a store that would let the engine wait 30 s: the
    // caller's deadline wins, and the outcome is timeout. The bound (15 s) is
    // only there to tell "its own deadline" from "the store's 30 s".
    {
        sqlock::store patient(url_, {.lock_wait_timeout = 30s});
        locker T = sqlock::table_locker(patient);
        call_result got;
        bool const returned = returned_within(
            15s, [&] { holder.reset(); }, [&] { got = run_call([&] { (void)T.acquire(name, 500ms); }); });
        EXPECT_TRUE(returned) << "acquire(name, 500ms) did not return within 15 s while a row lock held the file";
        EXPECT_EQ(got.what, call_result::kind::timeout)
            << "acquire(name, 500ms) while a row lock holds the file: expected sqlock::timeout, got " << got.text;
        std::cout << "[ record   ] acquire(500ms): " << got.text << "\n";
    }
}

// ============================================================ #11f milliseconds::max()

/// Waiting for ever: the waiter's first attempt finds the lock held (its
/// `busy` event, or, for a row lock that waits inside the engine,
/// `waiting_in_engine()`), then the holder releases; the waiter gets the lock.
void Hang::max_wait(strategy s, sqlock::store const& db, std::string const& name,
                    std::function<bool()> const& waiting_in_engine) {
    auto events = std::make_shared<event_record>();
    locker holder_locker = make_locker(s, db, {.ttl = 60s});
    locker waiter_locker = make_locker(s, db, {.ttl = 60s, .on_event = event_record::hook(events)});
    std::optional<lease> holder = holder_locker.try_acquire(name);
    ASSERT_TRUE(holder.has_value());
    std::optional<lease> got;
    watched_call waiter([&] { got.emplace(waiter_locker.acquire(name, milliseconds::max())); });
    std::string seen;
    bool const waiting = eventually(
        [&] {
            if (events->count(lease_event::kind::busy, name) > 0) seen = "a busy event";
            else if (waiting_in_engine && waiting_in_engine()) seen = "the engine showing the waiter";
            else if (waiter.finished_within(0ms)) seen = "the waiter returning";
            return !seen.empty();
        },
        30s);
    std::cout << "[ record   ] before the release: " << seen << "\n";
    ASSERT_TRUE(waiting) << "the waiter was not seen waiting (a busy attempt"
                         << (waiting_in_engine ? ", or the engine showing it" : "") << ") within 30 s";
    holder->release();
    bool const returned = waiter.finished_within(30s);
    EXPECT_TRUE(returned) << "the waiter did not get the released " << strategy_name(s) << " within 30 s";
    if (!returned) return;  // it waits for ever; nothing to unstick: the lock is free (the destructor aborts)
    std::string const outcome = waiter.outcome();
    EXPECT_EQ(outcome, "returned") << "acquire(name, milliseconds::max()) failed; events:\n" << events->dump();
    if (got) {
        EXPECT_TRUE(got->held());
        got->release();
    }
    std::cout << "[ record   ] acquire(max): " << outcome << "\n[ record   ] events:\n" << events->dump();
}

TEST_P(Hang, AcquireWithMaxWaitDoesNotOverflow) { max_wait(strategy::table, *db_, n("forever"), nullptr); }

/// A row lock waits inside the engine, so there is no busy event to wait for:
/// the engine shows the waiter (own tables, so the statement is ours).
TEST_P(HangServer, RowAcquireWithMaxWaitDoesNotOverflow) {
    std::string const tables = "sqlh_" + random_hex(10);
    drop_tables_on_exit cleanup{e_, url_, tables};
    sqlock::store db(url_, {.create_schema = true, .table_prefix = tables});
    std::string const rows = tables + "_rows";
    max_wait(strategy::row, db, n("forever-row"), [&] {
        long long k = 0;
        if (e_ == engine::postgresql) {
            *raw_
                << "SELECT COUNT(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND position(:t in query) > 0",
                soci::into(k), soci::use(rows);
        } else {
            // The waiting lock is a prepared statement (COMMAND 'Execute'), bounded
            // by innodb_lock_wait_timeout: its text ends with FOR UPDATE.
            std::string const pattern = "%" + rows + "% FOR UPDATE";
            *raw_ << "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE COMMAND IN ('Query', 'Execute') AND "
                     "INFO LIKE :p",
                soci::into(k), soci::use(pattern);
        }
        return k > 0;
    });
}

// ============================================================ #11g WAL

// A database where WAL cannot be set answers the pragma with another mode. The
// URL parser refuses "sqlite::memory:" itself; percent-encoded, the same path
// reaches SQLite, which opens a private in-memory database per connection: the
// pooled connections would not share the locks. The store must refuse it.
TEST_P(HangSqlite, SqliteWithoutWalIsRefused) {
    for (std::string const url : {"sqlite::memory:", "sqlite:%3Amemory%3A"}) {
        SCOPED_TRACE(url);
        call_result got = run_call([&] { sqlock::store s(url, {.create_schema = true}); });
        EXPECT_EQ(got.what, call_result::kind::usage_error) << "expected sqlock::usage_error, got " << got.text;
        if (url.find('%') != std::string::npos) {
            EXPECT_NE(got.text.find("WAL"), std::string::npos) << "the refusal must name WAL: " << got.text;
        }
        std::cout << "[ record   ] " << url << ": " << got.text << "\n";
    }
}

// ============================================================ #11h fork

// The child's copy of a lease is not the child's: release() throws
// usage_error, and destroying it does nothing (no DELETE of the parent's row,
// no ROLLBACK on the parent's connection). The child reports through its exit
// code; the parent then finds its lock intact and releases it normally.
void Hang::fork_cannot_release(strategy s) {
    std::string const name = n(s == strategy::table ? "fork-table" : "fork-row");
    locker L = make_locker(s, *db_, {.ttl = 60s});
    std::optional<lease> l = L.try_acquire(name);
    ASSERT_TRUE(l.has_value());
    enum : int { refused = 10, released_by_child = 11, other_sqlock_error = 12, other_exception = 13 };
    std::fflush(nullptr);
    pid_t const pid = ::fork();
    ASSERT_GE(pid, 0) << "fork() failed";
    if (pid == 0) {
        int code = refused;
        try {
            l->release();
            code = released_by_child;
        } catch (sqlock::usage_error const&) {
            code = refused;
        } catch (sqlock::error const&) {
            code = other_sqlock_error;
        } catch (...) {
            code = other_exception;
        }
        l.reset();  // the child's copy: must do nothing
        ::_exit(code);
    }
    int st = 0;
    bool const exited = eventually([&] { return ::waitpid(pid, &st, WNOHANG) == pid; }, 30s);
    if (!exited) {
        ::kill(pid, SIGKILL);
        ::waitpid(pid, &st, 0);
    }
    ASSERT_TRUE(exited) << "the child did not exit within 30 s";
    std::string const child = !WIFEXITED(st)                          ? exit_text(st)
                              : WEXITSTATUS(st) == refused            ? "release() threw usage_error"
                              : WEXITSTATUS(st) == released_by_child  ? "release() returned"
                              : WEXITSTATUS(st) == other_sqlock_error ? "release() threw another sqlock::error"
                              : WEXITSTATUS(st) == other_exception    ? "release() threw something else"
                                                                      : exit_text(st);
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == refused) << "in the forked child: " << child;

    if (s == strategy::table) {
        auto r = row(name);
        ASSERT_TRUE(r.has_value()) << "the parent's lock row is gone after the child ran";
        EXPECT_EQ(r->owner, l->owner());
        EXPECT_EQ(r->token, l->token());
    } else {
        sqlock::store other(url_, {.lock_wait_timeout = 200ms});
        auto taken = sqlock::row_locker(other, {.ttl = 10s}).try_acquire(name);
        EXPECT_FALSE(taken.has_value()) << "another store took the row lock the parent still holds";
    }
    EXPECT_EQ(l->state(), lease_state::held);
    EXPECT_NO_THROW(l->release()) << "the parent's release";
    std::cout << "[ record   ] " << strategy_name(s) << ", child: " << child << "\n";
}

TEST_P(Hang, ForkedChildCannotReleaseTheParentsTableLock) { fork_cannot_release(strategy::table); }

TEST_P(Hang, ForkedChildCannotReleaseTheParentsRowLock) { fork_cannot_release(strategy::row); }

INSTANTIATE_TEST_SUITE_P(Engines, Hang, ::testing::Values(engine::postgresql, engine::mysql, engine::sqlite),
                         engine_param_name{});
INSTANTIATE_TEST_SUITE_P(Engines, HangServer, ::testing::Values(engine::postgresql, engine::mysql),
                         engine_param_name{});
INSTANTIATE_TEST_SUITE_P(Engines, HangPostgres, ::testing::Values(engine::postgresql), engine_param_name{});
INSTANTIATE_TEST_SUITE_P(Engines, HangSqlite, ::testing::Values(engine::sqlite), engine_param_name{});

}  // namespace
