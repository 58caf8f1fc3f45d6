// sqlock reliability battery — B05 and E01 permutations 1–2: deterministic interleavings in
// the style of PostgreSQL's isolation tester (src/test/isolation/specs: nowait.spec,
// insert-conflict-do-nothing.spec, eval-plan-qual.spec).
//
// Engines/Interleaving.<Permutation>/<engine>. Two sessions:
//   raw  a raw SOCI session that plays the other client inside an explicit transaction
//        (BEGIN; one write to the lock row; ... COMMIT or ROLLBACK);
//   lib  the library (table_locker::try_acquire, lease::renew, lease::release,
//        reaper::reap_once), run on a thread of its own.
// A step "waits" when the server says so, never after a sleep: on PostgreSQL an observer
// session sees the library's backend in pg_stat_activity with wait_event_type = 'Lock' and
// the raw session's pid among its pg_blocking_pids(); on MariaDB SHOW ENGINE INNODB STATUS
// lists a transaction waiting for a lock on the test's own lock table (see waiting_on_raw for
// why not information_schema.innodb_trx). Then raw ends its
// transaction and the library call's outcome is compared with the permutation's expected
// output, a transcript like the isolation tester's .out files (it is the failure message).
//
// Each test uses tables of its own (a random table prefix), so a reaper pass counts only the
// rows the test wrote, and drops them at the end.
//
// Why each permutation catches a read-then-write: the library's steps are one conditional
// statement each (an upsert whose update is conditional on expires_at, a DELETE or UPDATE whose
// WHERE names owner, token and expiry). The server evaluates that condition again on the row as
// it stands after the raw transaction ends (PostgreSQL: EvalPlanQual re-check in READ
// COMMITTED; InnoDB: locking reads see the latest committed version). A client that first read
// the row (a plain SELECT does not wait: it sees the last committed version, i.e. the row as it
// was before raw's change) and then wrote by name would act on what it read before the raw
// commit; the comment of each permutation says which outcome that would change.
//
// SQLite has one writer per file: there the raw session holds BEGIN IMMEDIATE and the library
// call must come back within its bound (the store's lock_wait_timeout, 1 s here) with a typed
// sqlock outcome (busy, sqlock::timeout, ...), never hang and never leak a raw SQLITE_BUSY.
#include "test_env.hpp"

#include <chrono>
#include <functional>
#include <future>
#include <optional>
#include <string>

namespace {

using namespace sqlock_test;
using namespace std::chrono_literals;
using sqlock::lease;
using sqlock::locker;
using steady = std::chrono::steady_clock;

constexpr auto wait_bound = 30s;  // how long the server may take to show the library's wait
constexpr char const* other_owner = "raw-session/other-owner";

/// How a library step stood while the raw transaction was open.
enum class seen { waited, returned, neither };

/// A library call's outcome as one word or phrase: "busy", "granted", "lease_lost",
/// "purged=0", or the type and message of anything else it threw.
using outcome = std::string;

template <class F>
outcome describe_call(F&& f) {
    try {
        return f();
    } catch (sqlock::lease_lost const&) {
        return "lease_lost";
    } catch (sqlock::timeout const&) {
        return "timeout";
    } catch (sqlock::backend_unavailable const&) {
        return "backend_unavailable";
    } catch (sqlock::error const& e) {
        return "sqlock error " + describe(e);
    } catch (std::exception const& e) {
        return "UNTYPED " + describe(e);
    }
}

class Interleaving : public engine_fixture {
protected:
    void open_store() override {
        tp_ = "sqlti_" + random_hex(12);
        // Long engine waits (the library must still be waiting when raw commits, however slow
        // the machine); SQLite's is short: there the call must come back busy, not wait.
        auto const engine_wait = e_ == engine::sqlite ? std::chrono::milliseconds(1s) : std::chrono::milliseconds(90s);
        db_.emplace(url_, sqlock::store_options{.create_schema = true,
                                                .table_prefix = tp_,
                                                .lock_wait_timeout = engine_wait,
                                                .io_timeout = 180s});
    }

    void SetUp() override {
        engine_fixture::SetUp();
        if (should_stop()) return;
        if (e_ == engine::postgresql) {
            *raw_ << "SELECT pg_backend_pid()", soci::into(raw_id_);
            observer_ = raw_session(e_, url_);
        } else if (e_ == engine::mysql) {
            observer_ = raw_session(e_, url_);
        }
    }

    void TearDown() override {
        if (!raw_ || e_ == engine::sqlite) return;
        try {
            if (open_) *raw_ << "ROLLBACK";
            for (auto t : {"_locks", "_tokens", "_fences", "_rows", "_majority_tokens", "_identity",
                           "_majority_members", "_semaphores"})
                *raw_ << "DROP TABLE IF EXISTS " + tp_ + t;
            if (e_ == engine::mysql)
                for (auto p : {"_acquire_v2", "_acquire_shared", "_acquire", "_renew"})
                    *raw_ << "DROP PROCEDURE IF EXISTS " + tp_ + p;
        } catch (std::exception const& e) {
            ADD_FAILURE() << "dropping the test's tables " << tp_ << "_*: " << describe(e);
        }
    }

    locker make_locker() { return sqlock::table_locker(*db_, {.ttl = 60s, .auto_renew = false}); }

    std::optional<lock_row> row_of(std::string const& name) { return read_row(*raw_, e_, name, tp_); }

    /// SQL for the database's now plus `seconds`, in the lock table's units.
    std::string now_plus(int seconds) const {
        switch (e_) {
            case engine::postgresql: return "clock_timestamp() + interval '" + std::to_string(seconds) + " seconds'";
            case engine::mysql: return "NOW(6) + INTERVAL " + std::to_string(seconds) + " SECOND";
            case engine::sqlite: return "(" + db_now_us_expr(e_) + " + " + std::to_string(seconds * 1000000LL) + ")";
        }
        return {};
    }
    std::string locks() const { return tp_ + "_locks"; }

    /// Draw the name's next fencing token from the counter table, committed, as a grant would
    /// (so raw's takeover carries a token no later grant can reuse).
    long long draw_token(std::string const& name) {
        *raw_ << "UPDATE " + tp_ + "_tokens SET token = token + 1 WHERE name = :n", soci::use(name);
        long long t = 0;
        *raw_ << "SELECT token FROM " + tp_ + "_tokens WHERE name = :n", soci::into(t), soci::use(name);
        return t;
    }

    /// Make the row look expired a minute ago (committed), as if its TTL had run out.
    void expire(std::string const& name) {
        *raw_ << "UPDATE " + locks() + " SET expires_at = " + now_plus(-60) + " WHERE name = :n", soci::use(name);
    }

    void raw_begin() {
        *raw_ << (e_ == engine::sqlite ? "BEGIN IMMEDIATE" : "BEGIN");
        open_ = true;
    }
    void raw_end(bool commit) {
        open_ = false;
        *raw_ << (commit ? "COMMIT" : "ROLLBACK");
    }

    /// Does the server show a transaction waiting for a lock that the raw session holds?
    bool waiting_on_raw() {
        long long n = 0;
        if (e_ == engine::postgresql) {
            *observer_ << "SELECT COUNT(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                          " AND CAST(:pid AS integer) = ANY(pg_blocking_pids(pid))",
                soci::use(raw_id_), soci::into(n);
            return n > 0;
        }
        // InnoDB's monitor lists each transaction's lock wait ("------- TRX HAS BEEN WAITING ...")
        // followed by the lock it waits for: "... of table `db`.`<prefix>_locks` ... waiting". The
        // tables are this test's own and raw never waits, so such a line is the library waiting
        // on raw. (Not information_schema.innodb_trx/innodb_lock_waits: InnoDB refreshes that
        // cache only when nobody has read it for 100 ms, so parallel tests polling it read it
        // stale for ever.)
        soci::rowset<soci::row> status = (observer_->prepare << "SHOW ENGINE INNODB STATUS");
        std::string const table = "`." + std::string("`") + tp_ + "_locks`";
        for (auto const& r : status) {
            std::istringstream text(r.get<std::string>(2));
            bool after_wait = false;
            for (std::string line; std::getline(text, line);) {
                if (line.find("TRX HAS BEEN WAITING") != std::string::npos) after_wait = true;
                else if (after_wait && line.find(table) != std::string::npos &&
                         line.find("waiting") != std::string::npos)
                    return true;
                else if (line.starts_with("---TRANSACTION")) after_wait = false;
            }
        }
        return false;
    }

    /// Until the library step waits on raw's lock (server-observed) or returns; SQLite: until it
    /// returns (one writer per file: it may not wait past its bound).
    seen watch(std::future<outcome>& step) {
        auto const until = steady::now() + wait_bound;
        for (;;) {
            if (step.wait_for(0s) == std::future_status::ready) return seen::returned;
            if (e_ != engine::sqlite && waiting_on_raw()) return seen::waited;
            if (steady::now() >= until) return seen::neither;
            std::this_thread::sleep_for(e_ == engine::mysql ? 50ms : 10ms);
        }
    }

    /// The isolation tester's loop for one permutation: raw BEGIN and `raw_step` (named
    /// `raw_label`), then `lib_step` (named `lib_label`) on its own thread, watched until it
    /// waits or returns, then raw COMMIT or ROLLBACK, then the library step's outcome. Returns
    /// the transcript, in the expected-output format:
    ///   raw: BEGIN / raw: <raw_label> / lib: <lib_label> <waiting...> | -> <outcome>
    ///   raw: COMMIT / lib: <lib_label> -> <outcome>
    std::string permute(std::string const& raw_label, std::function<void()> const& raw_step,
                        std::string const& lib_label, std::function<outcome()> lib_step, bool commit) {
        std::string out = "raw: BEGIN\nraw: " + raw_label + "\n";
        raw_begin();
        raw_step();
        auto step = std::async(std::launch::async, [f = std::move(lib_step)] { return describe_call(f); });
        seen const s = watch(step);
        std::string early;
        if (s == seen::returned) early = step.get();
        out += "lib: " + lib_label;
        out += s == seen::waited     ? " <waiting on raw's row lock>\n"
               : s == seen::returned ? " -> " + early + "\n"
                                     : " <neither waited nor returned within 30 s>\n";
        raw_end(commit);
        out += std::string("raw: ") + (commit ? "COMMIT" : "ROLLBACK") + "\n";
        if (s != seen::returned) {
            if (step.wait_for(wait_bound) != std::future_status::ready) {
                out += "lib: " + lib_label + " <still running 30 s after raw's end>\n";
                return out;  // the future's destructor waits out the store's io_timeout
            }
            out += "lib: " + lib_label + " -> " + step.get() + "\n";
        }
        return out;
    }

    /// The expected transcript: the library step waits on raw's lock when `waits` and answers
    /// `after` once raw's transaction ends; otherwise it answers `after` while raw's is open.
    std::string expect(std::string const& raw_label, std::string const& lib_label, bool waits, std::string const& after,
                       bool commit) const {
        std::string out = "raw: BEGIN\nraw: " + raw_label + "\n";
        std::string const end = std::string("raw: ") + (commit ? "COMMIT" : "ROLLBACK") + "\n";
        if (waits)
            return out + "lib: " + lib_label + " <waiting on raw's row lock>\n" + end + "lib: " + lib_label + " -> " +
                   after + "\n";
        return out + "lib: " + lib_label + " -> " + after + "\n" + end;
    }

    std::string tp_;
    long long raw_id_ = 0;  // PostgreSQL: the raw session's backend pid
    bool open_ = false;
    std::unique_ptr<soci::session> observer_;
};

// ----------------------------------------------------------------- 1. insert vs insert

// Two acquirers on a free name (insert-conflict-do-nothing.spec). Raw inserts the row as an
// uncommitted grant to another owner (live expiry); the library's upsert waits on the unique
// key. COMMIT: the conflicting row is live, so the upsert's conditional update does nothing:
// busy, no error (no duplicate-key error leaks). ROLLBACK: the insert goes through: granted.
// Raw leaves the counter alone on purpose: a grant that also drew the name's counter would make
// the library wait on the counter row first, and the lock row's own conflict handling (what this
// permutation checks) would never be reached.
// A read-then-write acquire (SELECT the row, see none — raw's insert is invisible — then a plain
// INSERT) would fail the COMMIT variant with a duplicate-key error instead of "busy".
class InsertVsInsert : public Interleaving {
protected:
    void run(bool commit) {
        std::string const name = n("insert-vs-insert");
        locker L = make_locker();
        std::optional<lease> got;
        std::string const raw_label = "INSERT lock row (owner other, live expiry)";
        std::string const lib_label = "try_acquire";
        std::string const transcript = permute(
            raw_label,
            [&] {
                long long token = 1;
                std::string owner = other_owner;
                *raw_ << "INSERT INTO " + locks() +
                             " (name, owner, token, holds, attempt, created_at, expires_at)"
                             " VALUES (:n, :o, :t, 1, -7, " +
                             now_plus(0) + ", " + now_plus(3600) + ")",
                    soci::use(name), soci::use(owner), soci::use(token);
            },
            lib_label,
            [&]() -> outcome {
                got = L.try_acquire(name);
                return got ? "granted" : "busy";
            },
            commit);
        auto const r = row_of(name);
        // SQLite: BEGIN IMMEDIATE holds the file's write lock; the library's bounded wait
        // (busy_timeout) runs out while raw's transaction is open: busy, never SQLITE_BUSY.
        auto const expected = e_ == engine::sqlite
                                  ? expect(raw_label, lib_label, false, "busy", commit)
                                  : expect(raw_label, lib_label, true, commit ? "busy" : "granted", commit);
        EXPECT_EQ(transcript, expected) << "permutation insert-vs-insert/" << (commit ? "commit" : "rollback")
                                        << "\n  expected:\n"
                                        << expected << "  got:\n"
                                        << transcript;
        if (e_ == engine::sqlite && !commit) {
            EXPECT_FALSE(r.has_value()) << "raw rolled back and the library was busy: no row may be left";
            return;
        }
        ASSERT_TRUE(r.has_value()) << "no lock row after the permutation";
        if (commit) {
            EXPECT_EQ(r->owner, other_owner) << "raw's committed grant must stand";
        } else {
            ASSERT_TRUE(got.has_value());
            EXPECT_EQ(r->owner, got->owner());
            EXPECT_EQ(r->token, got->token());
            EXPECT_TRUE(r->live());
        }
    }
};

TEST_P(InsertVsInsert, CommitLeavesTheLibraryBusy) { run(true); }
TEST_P(InsertVsInsert, RollbackGrantsTheLibrary) { run(false); }

// ----------------------------------------------------------------- 2. takeover vs takeover

// Two clients take over one expired row at once (eval-plan-qual.spec). Raw draws the name's next
// token (committed, as a grant does) and takes the expired row over, uncommitted, with a live
// expiry; the library's upsert waits on the row. COMMIT: re-checked, the row is live now: busy.
// ROLLBACK: the row is expired again: the library takes it over with a token above the old one.
// A read-then-write takeover (SELECT the row, see it expired — the plain read sees the last
// committed version — then UPDATE by name) would also take the row over in the COMMIT variant:
// two grants of one lock at once, which "busy" rules out.
// Tried for real on PostgreSQL: the upsert's "WHERE l.expires_at < statement_timestamp()" made a
// snapshot read ("WHERE l.name IN (SELECT name ... WHERE expires_at < statement_timestamp())",
// which the EvalPlanQual re-check does not re-run): the COMMIT variant failed with "granted".
class TakeoverVsTakeover : public Interleaving {
protected:
    void run(bool commit) {
        std::string const name = n("takeover-vs-takeover");
        locker old_holder = make_locker();
        locker L = make_locker();
        std::optional<lease> old = old_holder.try_acquire(name);
        ASSERT_TRUE(old.has_value());
        auto const old_token = old->token();
        expire(name);
        long long const raw_token = draw_token(name);
        std::optional<lease> got;
        std::string const raw_label = "UPDATE expired row: takeover by other owner (next token, live expiry)";
        std::string const lib_label = "try_acquire";
        std::string const transcript = permute(
            raw_label,
            [&] {
                std::string owner = other_owner;
                long long token = raw_token;
                *raw_ << "UPDATE " + locks() +
                             " SET owner = :o, token = :t, holds = 1, attempt = -7, created_at = " + now_plus(0) +
                             ", expires_at = " + now_plus(3600) + " WHERE name = :n AND expires_at < " + now_plus(0),
                    soci::use(owner), soci::use(token), soci::use(name);
            },
            lib_label,
            [&]() -> outcome {
                got = L.try_acquire(name);
                return got ? "granted" : "busy";
            },
            commit);
        auto const r = row_of(name);
        auto const expected = e_ == engine::sqlite
                                  ? expect(raw_label, lib_label, false, "busy", commit)
                                  : expect(raw_label, lib_label, true, commit ? "busy" : "granted", commit);
        EXPECT_EQ(transcript, expected) << "permutation takeover-vs-takeover/" << (commit ? "commit" : "rollback")
                                        << "\n  expected:\n"
                                        << expected << "  got:\n"
                                        << transcript;
        ASSERT_TRUE(r.has_value()) << "no lock row after the permutation";
        if (e_ == engine::sqlite && !commit) {
            EXPECT_EQ(r->token, old_token) << "raw rolled back and the library was busy: the expired row stays";
            return;
        }
        if (commit) {
            EXPECT_EQ(r->owner, other_owner) << "raw's committed takeover must stand";
            EXPECT_EQ(r->token, raw_token);
        } else {
            ASSERT_TRUE(got.has_value());
            EXPECT_GT(got->token(), old_token) << "a takeover must carry a token above the expired grant's";
            EXPECT_GT(got->token(), raw_token) << "the rolled-back takeover's drawn token must not be reused";
            EXPECT_EQ(r->owner, got->owner());
            EXPECT_EQ(r->token, got->token());
        }
    }
};

TEST_P(TakeoverVsTakeover, CommitLeavesTheLibraryBusy) { run(true); }
TEST_P(TakeoverVsTakeover, RollbackLetsTheLibraryTakeOver) { run(false); }

// ----------------------------------------------------------------- 3. reaper vs renewal (E01 p1)

// The library holds a lease (auto_renew off); its row expires in the database; raw deletes the
// expired row as the reaper does (conditional on expires_at), uncommitted; then the library
// renews. COMMIT: the renewal must report lease_lost and must not bring the row back (P6, no
// resurrection). MariaDB: the renewal's locking read waits on the row, then finds none.
// PostgreSQL: the renewal's UPDATE sees the row expired in its snapshot and skips it without
// waiting (its WHERE refuses an expired row): lease_lost at once.
// A read-then-write renewal (read the row: ours; then write expires_at back with an upsert by
// name) would recreate the deleted row: a lease alive after the reaper ended it.
class ReaperVsRenewal : public Interleaving {};

TEST_P(ReaperVsRenewal, RenewAfterTheReapersDeleteIsLost) {
    std::string const name = n("reaper-vs-renewal");
    locker L = make_locker();
    std::optional<lease> held = L.try_acquire(name);
    ASSERT_TRUE(held.has_value());
    expire(name);
    std::string const raw_label = "DELETE expired row (the reaper)";
    std::string const lib_label = "renew";
    std::string const transcript = permute(
        raw_label,
        [&] {
            *raw_ << "DELETE FROM " + locks() + " WHERE name = :n AND expires_at < " + now_plus(0), soci::use(name);
        },
        lib_label,
        [&]() -> outcome {
            held->renew();
            return "renewed";
        },
        true);
    // SQLite: the renewal cannot write while raw holds BEGIN IMMEDIATE: backend_unavailable
    // (typed, "retry later"; the lease is in doubt) once its bounded retries run out.
    auto const expected = expect(raw_label, lib_label, e_ == engine::mysql,
                                 e_ == engine::sqlite ? "backend_unavailable" : "lease_lost", true);
    EXPECT_EQ(transcript, expected) << "permutation reaper-vs-renewal (E01 permutation 1)\n  expected:\n"
                                    << expected << "  got:\n"
                                    << transcript;
    EXPECT_FALSE(row_of(name).has_value()) << "the renewal resurrected the reaped row";
    if (e_ == engine::sqlite) {
        EXPECT_THROW(held->renew(), sqlock::lease_lost) << "a renewal after the reap";
    }
    EXPECT_TRUE(held->lost());
}

// ----------------------------------------------------------------- 4. renewal vs reaper (E01 p2)

// The library holds a lease whose row has expired in the database (committed); raw extends it as
// a renewal that got there first would (same owner and token, live expiry), uncommitted; then
// one reaper pass. COMMIT: the re-checked row is live: nothing purged, the row stays, with its
// token. MariaDB: the reaper's measuring read (a consistent read) counts the row, its DELETE
// waits on it and then re-checks expires_at on the committed renewal: 0 rows. PostgreSQL: the
// reaper picks rows FOR UPDATE SKIP LOCKED, so it passes over the row being renewed without
// waiting (documented in reaper.hpp): 0 purged.
// A read-then-write reaper (pick the expired names with a plain read, then DELETE by name) would
// delete the renewed row on MariaDB: tried for real by making the DELETE delete the measured names
// without the expiry condition; this test then failed with "purged=1" and the row gone.
class RenewalVsReaper : public Interleaving {};

TEST_P(RenewalVsReaper, ReaperKeepsTheRenewedRow) {
    std::string const name = n("renewal-vs-reaper");
    locker L = make_locker();
    std::optional<lease> held = L.try_acquire(name);
    ASSERT_TRUE(held.has_value());
    expire(name);
    sqlock::reaper R(*db_, {.grace = 0ms, .token_horizon = std::nullopt, .row_lock_warning = std::nullopt});
    std::string const raw_label = "UPDATE row's expires_at into the future (a renewal, same owner and token)";
    std::string const lib_label = "reap_once";
    std::string const transcript = permute(
        raw_label,
        [&] {
            std::string owner = held->owner();
            long long token = held->token();
            *raw_ << "UPDATE " + locks() + " SET expires_at = " + now_plus(3600) +
                         " WHERE name = :n AND owner = :o AND token = :t",
                soci::use(name), soci::use(owner), soci::use(token);
        },
        lib_label, [&]() -> outcome { return "purged=" + std::to_string(R.reap_once().purged); }, true);
    auto const r = row_of(name);
    auto const expected = expect(raw_label, lib_label, e_ == engine::mysql,
                                 e_ == engine::sqlite ? "backend_unavailable" : "purged=0", true);
    EXPECT_EQ(transcript, expected) << "permutation renewal-vs-reaper (E01 permutation 2)\n  expected:\n"
                                    << expected << "  got:\n"
                                    << transcript;
    ASSERT_TRUE(r.has_value()) << "the reaper deleted a row that a committed renewal had made live";
    EXPECT_TRUE(r->live());
    EXPECT_EQ(r->token, held->token());
    EXPECT_EQ(r->owner, held->owner());
}

// ----------------------------------------------------------------- 5. release vs takeover

// The library's lease has expired in the database; raw takes the row over for another owner
// (next token, live expiry), uncommitted; the library releases. COMMIT: the release's DELETE,
// re-checked, no longer matches its owner and token: it deletes nothing and reports lease_lost
// (lease.hpp: "the row was no longer ours"); the other owner's row stays.
// A read-then-write release (read the row: ours; then DELETE by name) would delete the new
// owner's row: a lock freed under its holder. Tried for real on PostgreSQL: the release's DELETE
// matched "name IN (SELECT name ... WHERE owner = :owner AND token = :token)" (a snapshot read the
// re-check does not re-run): this test failed with "released" and the new owner's row gone.
class ReleaseVsTakeover : public Interleaving {};

TEST_P(ReleaseVsTakeover, ReleaseLeavesTheNewOwnersRow) {
    std::string const name = n("release-vs-takeover");
    locker L = make_locker();
    std::optional<lease> held = L.try_acquire(name);
    ASSERT_TRUE(held.has_value());
    expire(name);
    long long const raw_token = draw_token(name);
    std::string const raw_label = "UPDATE expired row: takeover by other owner (next token, live expiry)";
    std::string const lib_label = "release";
    std::string const transcript = permute(
        raw_label,
        [&] {
            std::string owner = other_owner;
            long long token = raw_token;
            *raw_ << "UPDATE " + locks() +
                         " SET owner = :o, token = :t, holds = 1, attempt = -7, created_at = " + now_plus(0) +
                         ", expires_at = " + now_plus(3600) + " WHERE name = :n AND expires_at < " + now_plus(0),
                soci::use(owner), soci::use(token), soci::use(name);
        },
        lib_label,
        [&]() -> outcome {
            held->release();
            return "released";
        },
        true);
    auto const r = row_of(name);
    auto const expected = expect(raw_label, lib_label, e_ != engine::sqlite,
                                 e_ == engine::sqlite ? "backend_unavailable" : "lease_lost", true);
    EXPECT_EQ(transcript, expected) << "permutation release-vs-takeover\n  expected:\n"
                                    << expected << "  got:\n"
                                    << transcript;
    ASSERT_TRUE(r.has_value()) << "the release deleted the row another owner had taken over";
    EXPECT_EQ(r->owner, other_owner);
    EXPECT_EQ(r->token, raw_token);
    if (e_ == engine::sqlite) {
        EXPECT_THROW(held->release(), sqlock::lease_lost) << "the retried release";
    }
    EXPECT_TRUE(held->lost());
}

auto const engines = ::testing::Values(engine::postgresql, engine::mysql, engine::sqlite);
INSTANTIATE_TEST_SUITE_P(Engines, InsertVsInsert, engines, engine_param_name{});
INSTANTIATE_TEST_SUITE_P(Engines, TakeoverVsTakeover, engines, engine_param_name{});
INSTANTIATE_TEST_SUITE_P(Engines, ReaperVsRenewal, engines, engine_param_name{});
INSTANTIATE_TEST_SUITE_P(Engines, RenewalVsReaper, engines, engine_param_name{});
INSTANTIATE_TEST_SUITE_P(Engines, ReleaseVsTakeover, engines, engine_param_name{});

}  // namespace
