// sqlock tests — regressions for the safety faults of issue 9, each reproduced
// for real on the test servers: Engines/Safety.<Test>/<engine> (PostgreSQL and
// MariaDB), Engines/SafetyEveryEngine.<Test>/<engine> (SQLite too, where the
// fault has nothing to do with a server) and Engines/SafetyMariaDB.<Test>/mysql
// (a fault of MariaDB's acquire only).
//
// Several tests end server sessions (pg_terminate_backend, pg_cancel_backend,
// KILL CONNECTION, KILL QUERY). They end only sessions of this test's own
// stores, so they are safe on a server shared with other tests: on PostgreSQL
// such a store connects with an application_name of its own (URL parameters
// reach libpq after sqlock's default, so the test's wins); on MariaDB with a
// user of its own, created for the test over the server's socket as root
// (SQLOCK_TEST_MYSQL_SOCKET) and dropped afterwards.
//
// Every wait is a bounded poll, and nothing asserts how fast something
// happened beyond "it returned, well before an absurd bound".
#include "fault_calls.hpp"
#include "fault_proxy.hpp"
#include "marked_sessions.hpp"
#include "test_env.hpp"
#include "test_process.hpp"

#include <sqlock/admin.hpp>
#include <sqlock/sqlock.hpp>

#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#ifndef SQLOCK_SAFETY_WORKER
#error "SQLOCK_SAFETY_WORKER (path of sqlock_safety_worker) must be defined by the build"
#endif

namespace {

using namespace std::chrono_literals;
using namespace sqlock_test;
using sqlock::engine;
using sqlock::lease;
using sqlock::locker;
using std::chrono::milliseconds;
using std::chrono::steady_clock;

/// The engine_fixture on a PostgreSQL or MariaDB server, with stores whose
/// server sessions the test can find and end without touching anyone else's.
class Safety : public marked_sessions_fixture {
protected:
    /// Cancel the statement `id` is running (none if it is idle).
    void cancel_statement(soci::session& s, long long id) {
        if (e_ == engine::postgresql) {
            int pid = static_cast<int>(id);
            s << "SELECT pg_cancel_backend(:p)", soci::use(pid);
        } else {
            s << "KILL QUERY " + std::to_string(id);
        }
    }
};

// ============================================================ #2: clean-up after a broken connection

// Two stores whose lockers share an explicit owner (two replicas of one
// service configured alike). A holds the name. B's idle pooled connection is
// ended by the server, so B's acquire breaks and reconnects; the clean-up that
// makes its retry safe must delete only what B's own broken attempt may have
// written, not "the owner's row" — that is A's. B must find the lock busy,
// A's row must be untouched, and A still renews.
TEST_P(Safety, CleanUpAfterABrokenConnectionSparesAnotherHoldersRow) {
    std::string const name = n("shared-owner");
    std::string const owner = "sqlt-owner-" + random_hex(8);
    locker A = sqlock::table_locker(*db_, {.ttl = 60s, .owner = owner, .auto_renew = false});
    auto a = A.try_acquire(name);
    ASSERT_TRUE(a.has_value()) << "A could not take a free lock";

    std::string const marker = new_marker();
    std::string const url_b = tagged_url(marker);
    if (should_stop()) return;
    sqlock::store sb(url_b, {.pool_size = 1});
    locker B = sqlock::table_locker(sb, {.ttl = 60s, .owner = owner, .auto_renew = false});
    {
        auto warm = B.try_acquire(n("warm-up"));  // B's pooled connection is open and has been used
        ASSERT_TRUE(warm.has_value());
        warm->release();
    }
    ASSERT_FALSE(end_sessions(marker).empty()) << "B's store has no session on the server";

    std::optional<lease> b;
    std::string const what = outcome_of([&] { b = B.try_acquire(name); });
    EXPECT_EQ(what, "returned") << "B's acquire after its connection was ended must reconnect and report busy";
    EXPECT_FALSE(b.has_value()) << "B acquired '" << name << "' (token " << (b ? b->token() : 0)
                                << ") while A held it (token " << a->token() << "): both hold the lock";

    auto r = row(name);
    ASSERT_TRUE(r.has_value()) << "A's row of '" << name << "' is gone: B's clean-up deleted it";
    EXPECT_EQ(r->owner, owner);
    EXPECT_EQ(r->token, a->token()) << "the row of '" << name << "' is not A's any more";
    EXPECT_EQ(outcome_of([&] { a->renew(); }), "returned") << "A can no longer renew its lease";
    EXPECT_TRUE(a->held()) << to_string(a->state());
}

// ============================================================ #5: an error on the holding transaction

// A row lock lives in the transaction its connection holds open. When a
// statement on that transaction fails (here: its keep-alive is cancelled from
// another session), the lease must be reported lost, the transaction ended,
// and the row free for the next client at once — not "in doubt" with the row
// held by an aborted (PostgreSQL) or still-open (MariaDB) transaction.
//
// A keep-alive is short, so the test renews in a loop on one thread and
// cancels in a loop on another until a renewal fails (bounded: 20 s).
TEST_P(Safety, ErrorOnTheHoldingTransactionMeansLost) {
    std::string const name = n("cancelled-keepalive");
    std::string const marker = new_marker();
    std::string const url_h = tagged_url(marker);
    if (should_stop()) return;
    sqlock::store sh(url_h, {.pool_size = 1});
    locker H = sqlock::row_locker(sh, {.ttl = 60s, .auto_renew = false});
    auto held = H.try_acquire(name);
    ASSERT_TRUE(held.has_value()) << "could not take a free row lock";
    std::optional<long long> holder;
    // MariaDB refreshes information_schema.innodb_trx only after 100 ms without
    // a reader: polled every 10 ms it would show the same stale snapshot for ever.
    ASSERT_TRUE(eventually(
        [&] {
            if (e_ == engine::mysql) std::this_thread::sleep_for(150ms);
            return (holder = session_in_transaction(marker)).has_value();
        },
        10s))
        << "the server shows no open transaction of the holder's store";

    auto killer = raw_session(e_, url_);
    std::atomic<bool> done{false};
    std::atomic<long> cancels{0};
    std::string cancel_error;
    std::thread canceller([&] {
        try {
            while (!done.load()) {
                cancel_statement(*killer, *holder);
                ++cancels;
            }
        } catch (std::exception const& e) {
            // The holder's session may already be gone: after a failed keep-alive
            // the library closes that connection (MariaDB: "Unknown thread id").
            if (std::string(e.what()).find("Unknown thread id") == std::string::npos) cancel_error = describe(e);
        }
    });
    long renewals = 0;
    std::optional<std::string> failure;  // what the failed renewal threw
    auto const limit = steady_clock::now() + 20s;
    while (!failure && steady_clock::now() < limit && cancel_error.empty()) {
        try {
            held->renew();
            ++renewals;
        } catch (std::exception const& e) {
            failure = describe(e);
        }
    }
    done = true;
    canceller.join();
    ASSERT_TRUE(cancel_error.empty()) << "cancelling the holder's statement failed: " << cancel_error;
    ASSERT_TRUE(failure.has_value()) << "no renewal failed in 20 s: " << renewals << " renewals, " << cancels.load()
                                     << " cancels (the cancel never met a keep-alive in flight)";

    EXPECT_NE(failure->find("lease_lost"), std::string::npos)
        << "the failed renewal must report the lease lost; it threw " << *failure;
    EXPECT_EQ(held->state(), sqlock::lease_state::lost) << "after the renewal threw " << *failure;
    EXPECT_FALSE(held->held());
    // The loss says what happened (issue 18, item 7): the keep-alive failed with
    // the server's error, and that ended the holding transaction; not a guess
    // about the row.
    EXPECT_NE(failure->find("the keep-alive failed ("), std::string::npos) << *failure;
    EXPECT_NE(failure->find("which ends the transaction holding the row lock"), std::string::npos) << *failure;
    EXPECT_EQ(failure->find("someone else"), std::string::npos) << *failure;

    // The library closed the holder's connection; the server ends its
    // transaction when it reads the close, a moment later (not within the TTL
    // of 60 s, which is what would happen if the failed holder were kept).
    locker other = sqlock::row_locker(*db_, {.ttl = 10s});
    std::optional<lease> next;
    std::string const what = outcome_of([&] { next = other.acquire(name, 5s); });
    EXPECT_TRUE(next.has_value()) << "another client could not take the row lock within 5 s after the holder's "
                                     "transaction failed ("
                                  << what << "): the failed holder still blocks it";
}

// ============================================================ #7: unknown outcomes

// (a) A release whose connection broke reconnects and finds no row of its
// own: that is a success only if the row is nobody else's. Here an operator
// force-released A's lock and B took it meanwhile: A's release must say the
// lease was lost, not that it released.
TEST_P(Safety, ReleaseAfterReconnectFindsTheLockTakenOver) {
    std::string const name = n("taken-over");
    std::string const marker = new_marker();
    std::string const url_a = tagged_url(marker);
    if (should_stop()) return;
    sqlock::store sa(url_a, {.pool_size = 1});
    locker A = sqlock::table_locker(sa, {.ttl = 60s, .auto_renew = false});
    auto a = A.try_acquire(name);
    ASSERT_TRUE(a.has_value());

    auto forced = sqlock::force_release(*db_, name);
    ASSERT_TRUE(forced.has_value()) << "force_release found no row of '" << name << "'";
    locker B = sqlock::table_locker(*db_, {.ttl = 60s, .auto_renew = false});
    auto b = B.try_acquire(name);
    ASSERT_TRUE(b.has_value()) << "B could not take the force-released lock";
    ASSERT_FALSE(end_sessions(marker).empty()) << "A's store has no session on the server";

    std::string const what = outcome_of([&] { a->release(); });
    EXPECT_NE(what.find("lease_lost"), std::string::npos)
        << "A's release after a reconnect, with the lock held by B, must throw sqlock::lease_lost; it: " << what;
    auto r = row(name);
    ASSERT_TRUE(r.has_value()) << "B's row is gone";
    EXPECT_EQ(r->token, b->token()) << "B's row changed";
    EXPECT_EQ(r->owner, b->owner());
}

// (b) A connection that breaks during an acquire, and cannot be reopened to
// clean up, leaves the outcome unknown: the acquire may have written its row.
// That is in_doubt, not "the database is unavailable" (which invites a blind
// retry). The store goes through a proxy that closes every connection and
// refuses new ones.
TEST_P(Safety, FailedReconnectDuringAcquireIsInDoubt) {
    auto proxy = fault_proxy::for_url(url_);
    sqlock::store sp(proxy->proxied_url(url_),
                     {.pool_size = 1, .connect_timeout = 2s, .lock_wait_timeout = 2s, .io_timeout = 1s});
    locker L = sqlock::table_locker(sp, {.ttl = 30s, .auto_renew = false});
    {
        auto warm = L.try_acquire(n("warm-up"));  // the pooled connection is open and has been used
        ASSERT_TRUE(warm.has_value());
        warm->release();
    }
    proxy->block();

    auto const start = steady_clock::now();
    std::string const what = outcome_of([&] { (void)L.try_acquire(n("cut-off")); });
    auto const took = steady_clock::now() - start;
    EXPECT_NE(what.find("in_doubt"), std::string::npos)
        << "an acquire whose connection broke and could not be reopened must throw sqlock::in_doubt; it: " << what;
    // Coarse: connect_timeout 2 s and io_timeout 1 s; a minute means a hang.
    EXPECT_LT(took, 60s) << "the acquire hung";
    EXPECT_GT(proxy->refused(), 0u) << "the store never tried to reconnect";
}

/// As Safety, on every engine: the faults that need no server.
class SafetyEveryEngine : public engine_fixture {};

// (c) A release after the lease's safe validity ran out cannot know whether
// another owner held the lock meanwhile: it must say the lease had run out,
// not report a clean release.
TEST_P(SafetyEveryEngine, ReleaseAfterTheSafeDeadlineSaysItRanOut) {
    locker L = sqlock::table_locker(*db_, {.ttl = 200ms, .auto_renew = false});
    auto l = L.try_acquire(n("ran-out"));
    ASSERT_TRUE(l.has_value());
    // Spin (yielding), not sleep: release as soon as the validity is gone, before or
    // after the locker's deadline thread notices; both must give the same answer.
    auto const limit = steady_clock::now() + 10s;
    while (l->remaining() != steady_clock::duration::zero() && steady_clock::now() < limit) std::this_thread::yield();
    ASSERT_EQ(l->remaining(), steady_clock::duration::zero()) << "remaining() never reached zero";
    std::string what;
    try {
        l->release();
        what = "returned";
    } catch (sqlock::lease_lost const& e) {
        what = e.what();
        EXPECT_NE(what.find("run out"), std::string::npos) << "lease_lost must say the lease had run out: " << what;
    } catch (std::exception const& e) {
        what = describe(e);
        ADD_FAILURE() << "expected sqlock::lease_lost, got " << what;
    }
    EXPECT_NE(what, "returned") << "release() after the safe deadline reported success";
    EXPECT_EQ(l->state(), sqlock::lease_state::lost);
}

// ============================================================ #8: a paused acquire (MariaDB)

/// The MariaDB instance only: its acquire is a stored procedure.
class SafetyMariaDB : public Safety {};

/// /proc/PID/stat's state letter ('T' once stopped), or 0 when it cannot be read.
char process_state(pid_t pid) {
    std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
    std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    auto paren = stat.rfind(')');
    if (paren == std::string::npos || paren + 2 >= stat.size()) return 0;
    return stat[paren + 2];
}

/// A child process, SIGKILLed and reaped on destruction.
class child_process {
public:
    explicit child_process(pid_t pid) : pid_(pid) {}
    child_process(child_process const&) = delete;
    child_process& operator=(child_process const&) = delete;
    ~child_process() {
        ::kill(pid_, SIGKILL);
        ::waitpid(pid_, nullptr, 0);
    }
    pid_t pid() const { return pid_; }

private:
    pid_t pid_;
};

/// Starts sqlock_safety_worker with `args`, its stdout and stderr in `dir`/out
/// and `dir`/err, and SQLOCK_FAILPOINTS=`failpoint` in place of the caller's.
child_process start_safety_worker(std::string const& failpoint, std::vector<std::string> args, fs::path const& dir) {
    std::vector<std::string> env;
    for (char** e = environ; *e != nullptr; ++e)
        if (std::string_view(*e).rfind("SQLOCK_FAILPOINTS=", 0) != 0) env.emplace_back(*e);
    env.emplace_back("SQLOCK_FAILPOINTS=" + failpoint);
    spawn_file_actions actions;
    actions.capture_to_files(dir / "out", dir / "err");
    args.insert(args.begin(), SQLOCK_SAFETY_WORKER);
    return child_process(spawn_process(std::move(args), env, actions.get()));
}

// A client that stops inside an acquire (a GC pause, SIGSTOP, a debugger) must
// not hold the name's token row, or every other acquire of the name would wait
// on it. MariaDB's acquire used to be several statements in one transaction, so
// a client stopped between them held the token row lock until the server ended
// its session (idle_transaction_timeout). It is now one CALL, which the server
// runs to its COMMIT whatever the client does: the last place a client can stop
// inside an acquire is after the server decided, before the caller hears of it.
// The holder stops itself there (failpoint mysql.acquire.after_call). Its grant
// stands: another client finds the name busy, at once and without an error, and
// the token row and the lock row are not locked. Resumed, the holder gets the
// very grant the row shows.
TEST_P(SafetyMariaDB, PausedAcquireDoesNotBlockTheName) {
    std::string const name = n("paused");
    std::string const lock_wait_ms = "2000";
    fs::path const dir = fs::temp_directory_path() / ("sqlt-safety-" + random_hex(8));
    fs::create_directories(dir);
    child_process worker = start_safety_worker("mysql.acquire.after_call=stop", {url_, name, lock_wait_ms}, dir);

    bool const stopped = eventually([&] { return process_state(worker.pid()) == 'T'; }, 30s);
    ASSERT_TRUE(stopped) << "the worker did not stop at the failpoint within 30 s (state '"
                         << process_state(worker.pid()) << "'; stdout: " << slurp(dir / "out")
                         << "; stderr: " << slurp(dir / "err") << ")";

    // Neither row is locked: NOWAIT fails at once on a locked row (errno 1205).
    auto probe = raw_session(e_, url_);
    long long counter = 0, granted = 0;
    std::string const what = outcome_of([&] {
        soci::transaction tx(*probe);
        *probe << "SELECT token FROM sqlock_tokens WHERE name = :n FOR UPDATE NOWAIT", soci::use(name, "n"),
            soci::into(counter);
        *probe << "SELECT token FROM sqlock_locks WHERE name = :n FOR UPDATE NOWAIT", soci::use(name, "n"),
            soci::into(granted);
        tx.rollback();
    });
    EXPECT_EQ(what, "returned") << "a row of '" << name << "' is locked while its acquirer is paused";
    EXPECT_GT(granted, 0) << "the paused acquire's grant is not in the lock table";
    EXPECT_EQ(granted, counter) << "the grant does not carry the name's latest token";

    sqlock::store s(url_, {.pool_size = 2, .lock_wait_timeout = 2s});
    locker L = sqlock::table_locker(s, {.ttl = 30s, .auto_renew = false});
    std::optional<lease> got;
    std::string const other = outcome_of([&] { got = L.try_acquire(name); });
    EXPECT_EQ(other, "returned") << "a try of '" << name << "' behind a paused acquire failed";
    EXPECT_FALSE(got.has_value()) << "another client took a lock granted to the paused one";
    EXPECT_EQ(process_state(worker.pid()), 'T') << "the worker was not paused all along";

    ::kill(worker.pid(), SIGCONT);
    bool const ended = eventually([&] { return process_state(worker.pid()) == 'Z'; }, 30s);
    EXPECT_TRUE(ended) << "the resumed worker did not exit within 30 s";
    EXPECT_EQ(slurp(dir / "out"), "acquired " + std::to_string(granted) + "\n") << "stderr: " << slurp(dir / "err");
    fs::remove_all(dir);
}

// A release between a waiter's busy answer and its mark of the row: the mark finds no live row,
// and no release will ring for this waiter. It must try again at once rather than sleep its
// back-off (8 hours here, full jitter: the chance it wakes by itself within the 30 s asked is
// 1/1000). The waiter, in another process, stops itself at the failpoint between the two
// statements (mysql.acquire.before_mark); the holder releases while it is stopped. The waiter's
// listener is parked before its acquire starts: a listener just up wakes its store's waiters.
TEST_P(SafetyMariaDB, ReleaseBeforeTheMarkIsNotMissed) {
    std::string const tables = "sqls" + random_hex(8);
    std::string const name = n("released-before-mark");
    fs::path const dir = fs::temp_directory_path() / ("sqlt-safety-" + random_hex(8));
    fs::create_directories(dir);
    sqlock::store s(url_, {.pool_size = 2, .create_schema = true, .table_prefix = tables});
    locker L = sqlock::table_locker(s, {.ttl = 60s, .auto_renew = false});
    lease held = *L.try_acquire(name);
    std::string const hours8 = std::to_string(std::chrono::milliseconds(8h).count());
    child_process worker =
        start_safety_worker("mysql.acquire.before_mark=stop",
                            {url_, name, "2000", "60000", hours8, hours8, tables, (dir / "go").string()}, dir);

    std::string const bell = "SELECT SLEEP(20) AS " + tables + "_bell";
    ASSERT_TRUE(eventually(
        [&] {
            int parked = 0;
            *raw_ << "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE INFO = :b", soci::use(bell, "b"),
                soci::into(parked);
            return parked == 1;
        },
        30s))
        << "the worker's listener never parked (stdout: " << slurp(dir / "out") << "; stderr: " << slurp(dir / "err")
        << ")";
    std::ofstream(dir / "go").close();
    bool const stopped = eventually([&] { return process_state(worker.pid()) == 'T'; }, 30s);
    ASSERT_TRUE(stopped) << "the worker did not stop at the failpoint within 30 s (state '"
                         << process_state(worker.pid()) << "'; stdout: " << slurp(dir / "out")
                         << "; stderr: " << slurp(dir / "err") << ")";
    held.release();
    ::kill(worker.pid(), SIGCONT);
    bool const ended = eventually([&] { return process_state(worker.pid()) == 'Z'; }, 30s);
    EXPECT_TRUE(ended) << "the waiter was still waiting 30 s after the release: its mark found the row gone "
                          "and it went to sleep its back-off";
    EXPECT_EQ(slurp(dir / "out").rfind("warm\nacquired ", 0), 0U)
        << "stdout: " << slurp(dir / "out") << "; stderr: " << slurp(dir / "err");
    fs::remove_all(dir);
}

// P6, "a waiting acquire never returns a lease that already ran out": the
// grant commits, then the acquirer stops (failpoint
// acquire.after_commit_before_return: a GC pause, SIGSTOP) until the
// database's clock is past the row's expiry. Resumed, acquire() must not hand
// out that lease: it gives the row back and throws backend_unavailable, which
// says the round trip took longer than the ttl. The name is free afterwards.
TEST_P(SafetyEveryEngine, WaitingAcquireNeverReturnsALeaseThatRanOut) {
    std::string const name = n("ran-out-before-return");
    fs::path const dir = fs::temp_directory_path() / ("sqlt-safety-" + random_hex(8));
    fs::create_directories(dir);
    // ttl 1 s, a waiting acquire of up to 5 s.
    child_process worker =
        start_safety_worker("acquire.after_commit_before_return=stop", {url_, name, "2000", "1000", "5000"}, dir);

    bool const stopped = eventually([&] { return process_state(worker.pid()) == 'T'; }, 30s);
    ASSERT_TRUE(stopped) << "the worker did not stop at the failpoint within 30 s (state '"
                         << process_state(worker.pid()) << "'; stdout: " << slurp(dir / "out")
                         << "; stderr: " << slurp(dir / "err") << ")";
    auto const granted = read_row(*raw_, e_, name);
    ASSERT_TRUE(granted.has_value()) << "the stopped acquire's grant is not in the lock table";
    // The fault bites when the database says the grant has expired.
    ASSERT_TRUE(eventually([&] { return db_now_us(*raw_, e_) > granted->expires_us; }, 30s))
        << "the database's clock did not pass the grant's expiry within 30 s";
    ASSERT_EQ(process_state(worker.pid()), 'T') << "the worker was not paused all along";

    ::kill(worker.pid(), SIGCONT);
    bool const ended = eventually([&] { return process_state(worker.pid()) == 'Z'; }, 30s);
    ASSERT_TRUE(ended) << "the resumed worker did not exit within 30 s";
    std::string const out = slurp(dir / "out"), err = slurp(dir / "err");
    EXPECT_EQ(out.find("acquired"), std::string::npos)
        << "acquire() returned a lease whose ttl ran out before it returned: " << out;
    EXPECT_NE(err.find("backend_unavailable"), std::string::npos) << "stdout: " << out << "; stderr: " << err;
    EXPECT_NE(err.find("longer than its ttl"), std::string::npos) << "stdout: " << out << "; stderr: " << err;

    locker L = sqlock::table_locker(*db_, {.ttl = 10s, .auto_renew = false});
    EXPECT_TRUE(L.try_acquire(name).has_value()) << "the name is not free after the expired grant was given back";
    fs::remove_all(dir);
}

// A deadline that fires while the server runs the acquire's CALL (here: the
// token table is locked with LOCK TABLES, so the CALL waits on a metadata lock
// the server does not bound) cuts the connection, but cannot stop the server:
// once the table is unlocked, that CALL and the one retried after reconnecting
// would go on and commit a lock row nobody holds. The CALL is bounded on the
// server too (p_budget_us, below the client's deadline): it rolls back instead.
// The caller hears in_doubt (or unavailable), and no row and no token counter
// remain. The test has tables of its own: the lock stops nobody else.
TEST_P(SafetyMariaDB, DeadlineInsideTheAcquireLeavesNoRow) {
    std::string const prefix = "sqlt_" + random_hex(10);
    std::string const marker = new_marker();
    std::string const url = tagged_url(marker);
    struct drop_on_exit {
        soci::session& s;
        std::string prefix;
        ~drop_on_exit() {
            try {
                s << "UNLOCK TABLES";
                for (auto const& t : {"_locks", "_tokens", "_fences", "_rows", "_majority_tokens", "_identity",
                                      "_majority_members", "_semaphores"})
                    s << "DROP TABLE IF EXISTS " + prefix + t;
                for (auto const& r : {"_acquire_v2", "_acquire_shared", "_acquire", "_renew"})
                    s << "DROP PROCEDURE IF EXISTS " + prefix + r;
            } catch (std::exception const& e) {
                ADD_FAILURE() << "could not drop the tables of prefix " << prefix << ": " << describe(e);
            }
        }
    };
    auto blocker = raw_session(e_, url_);
    drop_on_exit cleanup{*blocker, prefix};
    sqlock::store s(url, {.pool_size = 1,
                          .create_schema = true,
                          .table_prefix = prefix,
                          .connect_timeout = 2s,
                          .lock_wait_timeout = 1s,
                          .io_timeout = 1s});
    locker L = sqlock::table_locker(s, {.ttl = 30s, .auto_renew = false});
    {
        auto warm = L.try_acquire(n("warm-up"));  // the CALL is prepared and has run
        ASSERT_TRUE(warm.has_value());
        warm->release();
    }
    std::string const name = n("deadline");
    *blocker << "LOCK TABLES " + prefix + "_tokens WRITE";
    std::string const what = outcome_of([&] { (void)L.try_acquire(name); });
    *blocker << "UNLOCK TABLES";
    EXPECT_TRUE(what.find("in_doubt") != std::string::npos || what.find("backend_unavailable") != std::string::npos)
        << "an acquire whose deadline fired inside the CALL must throw in_doubt or backend_unavailable; it: " << what;

    // The cut sessions end once their CALLs have finished (answering a closed socket). The store's
    // reserved connections, opened with it, stay: idle (Sleep), never running a statement.
    auto const running = [&] {
        long long c = -1;
        *blocker << "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE USER = :u AND COMMAND <> 'Sleep'",
            soci::use(marker, "u"), soci::into(c);
        return c;
    };
    bool const gone = eventually([&] { return running() == 0; }, 30s);
    EXPECT_TRUE(gone) << "the store's server sessions still run a statement 30 s after the table was unlocked ("
                      << running() << ")";
    long long rows = -1, counters = -1;
    *blocker << "SELECT COUNT(*) FROM " + prefix + "_locks WHERE name = :n", soci::use(name, "n"), soci::into(rows);
    *blocker << "SELECT COUNT(*) FROM " + prefix + "_tokens WHERE name = :n", soci::use(name, "n"),
        soci::into(counters);
    EXPECT_EQ(rows, 0) << "a lock row was committed after the caller had been told the outcome: " << what;
    EXPECT_EQ(counters, 0) << "the token draw of an acquire that was given up was committed";
    std::cout << "[ record   ] " << what << "\n";
}

// The acquire, renew and release statements are prepared on the server per
// pooled connection, and closed (COM_STMT_CLOSE) when the store drops the
// connection. Closing them on a connection that is silent (a hung network) or
// cut must neither wait for the server nor crash (no SIGPIPE): closing the
// store returns.
TEST_P(SafetyMariaDB, PreparedStatementsOnADeadConnectionCloseQuietly) {
    for (bool cut : {false, true}) {
        SCOPED_TRACE(cut ? "cut" : "silent");
        auto proxy = fault_proxy::for_url(url_);
        std::optional<sqlock::store> db;
        db.emplace(proxy->proxied_url(url_), sqlock::store_options{.pool_size = 1,
                                                                   .connect_timeout = 2s,
                                                                   .lock_wait_timeout = 1s,
                                                                   .io_timeout = 1s});
        {
            locker L = sqlock::table_locker(*db, {.ttl = 30s, .auto_renew = false});
            auto l = L.try_acquire(n(cut ? "cut" : "silent"));
            ASSERT_TRUE(l.has_value());
            l->renew();
            l->release();
        }
        if (cut) proxy->block();
        else proxy->stall();
        std::atomic<bool> closed{false};
        std::thread closer([&] {
            db.reset();
            closed = true;
        });
        bool const returned = eventually([&] { return closed.load(); }, 30s);
        EXPECT_TRUE(returned) << "closing a store whose connection is " << (cut ? "cut" : "silent")
                              << " did not return within 30 s";
        if (!returned) proxy->block();
        closer.join();
    }
}

// ============================================================ #9: renewals and a pinned pool

// Every pooled connection is pinned by a held row lock. A table lease of the
// same store must still be renewed (renewals have connections of their own),
// and a waiting acquire must give up at its own deadline, not wait pool_wait
// for a connection.
TEST_P(Safety, RenewalsAndWaitsSurviveAPinnedPool) {
    sqlock::store s(url_, {.pool_size = 2, .pool_wait = 60s});
    locker T = sqlock::table_locker(s, {.ttl = 1500ms});
    lease t = T.acquire(n("renewed"), 10s);
    locker R = sqlock::row_locker(s, {.ttl = 60s});
    lease pin1 = R.acquire(n("pin-1"), 10s);
    lease pin2 = R.acquire(n("pin-2"), 10s);

    auto const base = T.stats().renewed;
    bool const renewed = eventually([&] { return T.stats().renewed >= base + 3 || t.lost(); }, 30s);
    EXPECT_TRUE(renewed && !t.lost()) << "renewals while the pool was pinned: " << T.stats().renewed - base
                                      << ", lease " << to_string(t.state());
    EXPECT_EQ(T.stats().lost, 0u);
    EXPECT_TRUE(t.held()) << to_string(t.state());

    auto const start = steady_clock::now();
    std::string what;
    try {
        (void)T.acquire(n("second"), 1s);
        what = "returned";
        ADD_FAILURE() << "an acquire got a connection from a pool pinned by row locks";
    } catch (sqlock::timeout const& e) {
        what = e.what();
        EXPECT_NE(what.find("pooled connections"), std::string::npos) << "the timeout must name the pool: " << what;
    } catch (std::exception const& e) {
        what = describe(e);
        ADD_FAILURE() << "expected sqlock::timeout naming the pool, got " << what;
    }
    // Coarse: the acquire waits 1 s and pool_wait is 60 s; half a minute can only
    // mean it waited for pool_wait.
    EXPECT_LT(steady_clock::now() - start, 30s) << "the waiting acquire waited for the pool past its deadline";
    EXPECT_TRUE(pin1.held() && pin2.held());
}

// ============================================================ #11: a stale pooled connection

// The server ended the row locker's idle pooled connection (restart, idle
// limit, an operator): the next acquire must reopen it once, as the table lock
// does, instead of failing.
TEST_P(Safety, RowLockerRetriesAStaleConnection) {
    std::string const marker = new_marker();
    std::string const url_r = tagged_url(marker);
    if (should_stop()) return;
    sqlock::store sr(url_r, {.pool_size = 1});
    locker R = sqlock::row_locker(sr, {.ttl = 30s});
    {
        auto first = R.try_acquire(n("first"));
        ASSERT_TRUE(first.has_value());
        first->release();
    }
    ASSERT_FALSE(end_sessions(marker).empty()) << "the row locker's store has no session on the server";

    std::optional<lease> l;
    std::string const what = outcome_of([&] { l = R.try_acquire(n("after-kill")); });
    EXPECT_EQ(what, "returned") << "the row locker did not reopen its stale connection";
    EXPECT_TRUE(l.has_value()) << "a free row lock was reported busy";
}

INSTANTIATE_TEST_SUITE_P(Engines, Safety, ::testing::Values(engine::postgresql, engine::mysql), engine_param_name{});
INSTANTIATE_TEST_SUITE_P(Engines, SafetyEveryEngine,
                         ::testing::Values(engine::postgresql, engine::mysql, engine::sqlite), engine_param_name{});
INSTANTIATE_TEST_SUITE_P(Engines, SafetyMariaDB, ::testing::Values(engine::mysql), engine_param_name{});

}  // namespace
