// sqlock tests — server crashes: Engines/Crash.<Test>/<engine>, PostgreSQL and
// MariaDB only (SQLite has no server; a crashed SQLite holder process is
// Engines/RowLock.TokensIncreaseAcrossCrashes).
//
// These tests kill -9 the test servers (`scripts/test-servers.sh crash`, from
// SQLOCK_TEST_PG_CRASH / SQLOCK_TEST_MYSQL_CRASH) or, on PostgreSQL, one
// backend (the postmaster then ends every session and recovers), and check
// what a crash must not undo: a fencing token handed out is never handed out
// again, and a grant the caller was told about is still there afterwards. So
// they run serially (RUN_SERIAL, label "crash") and only against servers of
// their own: every other test on those servers would see its connections cut.
//
// Also here, because it is the same promise: a store refuses to run on a
// MariaDB whose commits are not flushed (innodb_flush_log_at_trx_commit != 1)
// unless told to accept that.
//
// Each test has tables of its own (a random table_prefix, dropped afterwards):
// a fresh row-token sequence makes the first grant refill MariaDB's sequence
// cache, the case a crash must not roll back. Waits are bounded polls; nothing
// asserts how fast anything happened.
#include "test_env.hpp"

#include <sqlock/sqlock.hpp>

#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iostream>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace {

using namespace std::chrono_literals;
using namespace sqlock_test;
using sqlock::engine;
using sqlock::lease;
using sqlock::locker;

char const* crash_var(engine e) { return e == engine::postgresql ? "SQLOCK_TEST_PG_CRASH" : "SQLOCK_TEST_MYSQL_CRASH"; }

/// Tokens in the order they were handed out, with what handed them out.
class token_record {
public:
    void add(std::string what, std::int64_t token) { seen_.emplace_back(std::move(what), token); }

    /// Empty when every token is greater than all before it; else the offenders.
    std::string violations() const {
        std::string out;
        for (std::size_t i = 1; i < seen_.size(); ++i) {
            if (seen_[i].second <= seen_[i - 1].second)
                out += "  token " + std::to_string(seen_[i].second) + " (" + seen_[i].first + ") after " +
                       std::to_string(seen_[i - 1].second) + " (" + seen_[i - 1].first + ")\n";
        }
        return out;
    }

    std::string all() const {
        std::string out;
        for (auto const& [what, token] : seen_) out += "  " + std::to_string(token) + "  " + what + "\n";
        return out;
    }

private:
    std::vector<std::pair<std::string, std::int64_t>> seen_;
};

/// The engine_fixture on tables of the test's own, with the crash command.
class Crash : public engine_fixture {
protected:
    void SetUp() override {
        engine_fixture::SetUp();
        if (should_stop()) return;
        require_env(crash_var(e_), crash_cmd_);
    }

    void open_store() override {
        tables_ = "sqlc_" + random_hex(10);
        db_.emplace(url_, sqlock::store_options{.create_schema = true, .table_prefix = tables_});
    }

    void TearDown() override {
        db_.reset();
        if (tables_.empty() || e_ == engine::sqlite) return;
        try {
            auto s = raw_session(e_, url_);  // raw_ may predate a crash
            for (auto const* t : {"_locks", "_tokens", "_fences", "_rows"}) *s << "DROP TABLE IF EXISTS " + tables_ + t;
            *s << "DROP SEQUENCE IF EXISTS " + tables_ + "_row_tokens";
        } catch (std::exception const& e) {
            ADD_FAILURE() << "could not drop the test tables " << tables_ << "_*: " << describe(e);
        }
    }

    sqlock::store_options options(std::size_t pool = 4) const { return {.pool_size = pool, .table_prefix = tables_}; }

    /// kill -9 the server and start it again (crash recovery); waits until it
    /// serves, then reopens raw_.
    void crash_server() {
        int const rc = std::system(crash_cmd_.c_str());
        ASSERT_TRUE(rc != -1 && WIFEXITED(rc) && WEXITSTATUS(rc) == 0)
            << "the crash command failed (" << (rc == -1 ? std::string("not run") : exit_status(rc))
            << "): " << crash_cmd_;
        raw_ = raw_session(e_, url_);
    }

    /// PostgreSQL: kill -9 the backend `pid`. The postmaster then ends every
    /// session and runs crash recovery, as after a crash of the server; waits
    /// until a session opened before the kill is gone and a new one works.
    void crash_backend(int pid) {
        ASSERT_EQ(::kill(pid, SIGKILL), 0) << "kill -9 " << pid << ": " << std::strerror(errno);
        auto const before = std::move(raw_);
        ASSERT_TRUE(eventually(
            [&] {
                try {
                    *before << "SELECT 1";
                    return false;
                } catch (std::exception const&) {
                    return true;
                }
            },
            30s))
            << "a session opened before backend " << pid << " was killed still works after 30s: the postmaster "
            << "did not reinitialize";
        ASSERT_TRUE(eventually(
            [&] {
                try {
                    raw_ = raw_session(e_, url_);
                    *raw_ << "SELECT 1";
                    return true;
                } catch (std::exception const&) {
                    raw_.reset();
                    return false;
                }
            },
            60s))
            << "PostgreSQL did not accept connections within 60s of a backend crash";
    }

    /// PostgreSQL: the backend whose open transaction holds a row lock on this
    /// test's rows table (the test holds one at a time).
    std::optional<int> row_lock_backend() {
        int pid = 0;
        std::string const rows = tables_ + "_rows";
        *raw_ << "SELECT a.pid FROM pg_stat_activity a WHERE a.state LIKE 'idle in transaction%' AND EXISTS"
                 " (SELECT 1 FROM pg_locks l WHERE l.pid = a.pid AND l.relation = to_regclass(:r))",
            soci::into(pid), soci::use(rows);
        if (!raw_->got_data()) return std::nullopt;
        return pid;
    }

    /// PostgreSQL: CHECKPOINT, as the superuser over the server's socket (the
    /// test user may not). The next nextval() of a sequence then writes WAL that
    /// only a commit flushes.
    void checkpoint() {
        if (auto su = superuser()) *su << "CHECKPOINT";
    }

    /// PostgreSQL: ALTER SYSTEM `change`, then reload the configuration.
    void alter_system(std::string const& change) {
        if (auto su = superuser()) {
            *su << "ALTER SYSTEM " + change;
            *su << "SELECT pg_reload_conf()";
        }
    }

    /// PostgreSQL: a session as the superuser over the server's socket; empty
    /// when the environment lacks the socket (the test then stops).
    std::optional<soci::session> superuser() {
        std::string dir, port;
        require_env("SQLOCK_TEST_PG_SOCKET_DIR", dir);
        require_env("SQLOCK_TEST_PG_PORT", port);
        if (should_stop()) return std::nullopt;
        url_parts p = parse_server_url(url_);
        return std::optional<soci::session>(std::in_place, *soci::factory_postgresql(),
                                            "host=" + pg_quote_param(dir) + " port=" + port +
                                                " dbname=" + pg_quote_param(p.db) + " user=postgres");
    }

    static std::string exit_status(int rc) {
        if (WIFEXITED(rc)) return "exit " + std::to_string(WEXITSTATUS(rc));
        if (WIFSIGNALED(rc)) return "signal " + std::to_string(WTERMSIG(rc));
        return "status " + std::to_string(rc);
    }

    /// After a crash, the lease from before it is not held any more: its
    /// renewal reports it lost.
    static void expect_lost(lease& l, std::string const& when) {
        try {
            l.renew();
            ADD_FAILURE() << when << ": the renewal of the lease (token " << l.token()
                          << ") from before the crash succeeded; state " << to_string(l.state());
        } catch (sqlock::lease_lost const&) {
        } catch (std::exception const& e) {
            ADD_FAILURE() << when << ": renewing the lease from before the crash threw " << describe(e)
                          << " instead of sqlock::lease_lost";
        }
        EXPECT_EQ(l.state(), sqlock::lease_state::lost) << when;
    }

    std::string tables_;
    std::string crash_cmd_;
};

// ============================================================ row-lock tokens

// A row lock draws its token from a sequence inside the transaction it holds
// open, so nothing commits it: PostgreSQL flushes that WAL only when some
// transaction commits, and MariaDB's sequence-cache refill reaches the disk
// about a second later. A crash right after the grant must not roll the
// sequence back: the next grant of the name gets a greater token, and the old
// holder learns that its lease is gone.
//
// A few released grants, then: grant, crash within milliseconds, grant again,
// crash again: the grant after each recovery is the next one crashed (on
// MariaDB the first grant after a start refills the sequence cache, the case
// that repeats; the first crash, after a refill that a commit flushed, may
// not). PostgreSQL alternates between killing the server and killing the
// holder's backend (the postmaster then reinitializes: a real fault too; the
// test runs as root or as the servers' user, so it may); each grant follows a
// CHECKPOINT.
TEST_P(Crash, RowTokensIncreaseAcrossServerCrashes) {
    std::string const name = n("row-token");
    int const crashes = 4;
    token_record tokens;
    {
        // Committed grants first, so the sequence is not at its start (on
        // PostgreSQL the first crash then needs the CHECKPOINT to lose WAL).
        sqlock::store s(url_, options());
        locker L = sqlock::row_locker(s, {.ttl = 30s});
        for (int i = 0; i < 3; ++i) {
            lease l = L.acquire(name, 20s);
            tokens.add("released grant " + std::to_string(i), l.token());
            l.release();
        }
    }
    for (int i = 0; i <= crashes; ++i) {
        // A store per round: the previous one's connections died in the crash.
        sqlock::store s(url_, options());
        locker L = sqlock::row_locker(s, {.ttl = 30s});
        if (e_ == engine::postgresql) checkpoint();
        if (should_stop()) return;
        lease held = L.acquire(name, 20s);
        if (i == crashes) {
            tokens.add("grant after the last crash", held.token());
            break;
        }
        bool const by_backend = e_ == engine::postgresql && i % 2 == 1;
        std::string const how = by_backend ? "backend kill -9" : "server kill -9";
        tokens.add("grant " + std::to_string(i) + ", then " + how, held.token());
        if (by_backend) {
            auto pid = row_lock_backend();
            ASSERT_TRUE(pid.has_value()) << "no PostgreSQL backend holds a row lock on " << tables_ << "_rows";
            crash_backend(*pid);
        } else {
            crash_server();
        }
        if (HasFatalFailure()) return;
        expect_lost(held, "after " + how + " " + std::to_string(i));
    }
    std::string const bad = tokens.violations();
    EXPECT_TRUE(bad.empty()) << "a row-lock token was handed out again after a crash:\n"
                             << bad << "every grant, in order:\n"
                             << tokens.all();
}

// On PostgreSQL a row lock's release (the holding transaction's COMMIT) does
// not wait for the disk: a crash right after it may lose it, and with it the
// grant's record in <prefix>_rows (owner, token, locked_at). That is all it may
// lose: the token was committed durably by its draw before the grant was
// returned, so the next grant of the name, after recovery, still gets a
// greater token than every grant before the crash. MariaDB runs the same
// rounds (its release commits durably).
//
// Each round: a released grant, one more grant and its release, and at once
// kill -9 the server. On PostgreSQL the test also guards the gain: at least
// one crash must have lost a release (its grant's record is not in the row
// after recovery); a release that waited for the disk would survive every
// crash. Nothing but the WAL writer flushes it before the crash, and the test
// sets wal_writer_delay to its maximum (10 s, restored at the end) so that it
// does not win that race by chance.
TEST_P(Crash, RowTokensIncreaseAfterACrashRightAfterARelease) {
    std::string const name = n("row-release");
    std::string const rows = tables_ + "_rows";
    int const rounds = 3;
    if (e_ == engine::postgresql) alter_system("SET wal_writer_delay = '10s'");
    struct at_exit {
        std::function<void()> f;
        ~at_exit() { f(); }
    } const restore_wal_writer{[this] {
        if (e_ == engine::postgresql) alter_system("RESET wal_writer_delay");
    }};
    if (should_stop()) return;
    token_record tokens;
    int lost_releases = 0;
    for (int round = 0; round < rounds; ++round) {
        SCOPED_TRACE("round " + std::to_string(round));
        std::int64_t released = 0;
        {
            sqlock::store s(url_, options());
            locker L = sqlock::row_locker(s, {.ttl = 30s});
            lease first = L.acquire(name, 20s);
            tokens.add("round " + std::to_string(round) + " grant", first.token());
            first.release();
            lease last = L.acquire(name, 20s);
            released = last.token();
            tokens.add("round " + std::to_string(round) + " grant released right before the crash", released);
            last.release();
            crash_server();  // the store's connections die with the server
        }
        if (HasFatalFailure()) return;
        std::int64_t recorded = 0;
        soci::indicator ind = soci::i_null;
        *raw_ << "SELECT token FROM " + rows + " WHERE name = :n", soci::into(recorded, ind), soci::use(name);
        if (ind != soci::i_ok || recorded != released) ++lost_releases;
    }
    sqlock::store s(url_, options());
    locker L = sqlock::row_locker(s, {.ttl = 30s});
    lease after = L.acquire(name, 20s);
    tokens.add("grant after the last crash", after.token());
    after.release();
    std::string const bad = tokens.violations();
    EXPECT_TRUE(bad.empty()) << "a row-lock token was handed out again after a crash that followed a release:\n"
                             << bad << "every grant, in order:\n"
                             << tokens.all();
    if (e_ == engine::postgresql) {
        EXPECT_GE(lost_releases, 1) << "every release survived a kill -9 of the server right after it: the row "
                                       "lock's COMMIT waited for the disk (synchronous_commit)";
    }
    RecordProperty("lost_releases", lost_releases);
    std::cout << "[ record   ] the crashes lost " << lost_releases << " of " << rounds << " releases (their grants'"
              << " record in " << rows << ")\n";
}

// ============================================================ durability of grants

// A table-lock grant is one committed statement: once acquire() returns, the
// row and its token must survive a crash of the server. The store must make
// sure of it rather than assume it: on PostgreSQL a connection may ask for
// synchronous_commit = off (here through the URL, whose parameters reach
// libpq), and then a commit is acknowledged before its WAL is flushed. The
// library must commit durably anyway.
//
// Each round: a burst of grants kept on distinct names, interleaved with
// acquire+release of one hot name, then at once kill -9 the server. After
// recovery every kept grant must still have its row, and the hot name's next
// token must be greater than every one handed out before. MariaDB runs the
// same rounds with its default, durable settings (the store's refusal of
// relaxed ones is RelaxedDurabilityIsRefused).
TEST_P(Crash, AcknowledgedGrantsSurviveACrash) {
    std::string const url = e_ == engine::postgresql ? url_ + "?options=-c%20synchronous_commit%3Doff" : url_;
    std::string const hot = n("hot");
    int const rounds = 3;
    int const burst = 40;
    token_record hot_tokens;
    std::int64_t last_hot_token = 0;
    std::string last_hot_owner;
    int bad_rounds = 0;
    for (int round = 0; round < rounds; ++round) {
        SCOPED_TRACE("round " + std::to_string(round));
        {
            std::vector<std::string> kept_names;
            sqlock::store s(url, options(2));
            std::vector<lease> kept;  // destroyed before their store: released (or given up) quietly
            locker L = sqlock::table_locker(s, {.ttl = 10min});
            for (int k = 0; k < burst; ++k) {
                kept_names.push_back(n("kept-" + std::to_string(round) + "-" + std::to_string(k)));
                kept.push_back(L.acquire(kept_names.back(), 10s));
                lease h = L.acquire(hot, 10s);
                hot_tokens.add("round " + std::to_string(round) + " grant " + std::to_string(k), h.token());
                last_hot_token = h.token();
                last_hot_owner = h.owner();
                h.release();
            }
            crash_server();
            if (HasFatalFailure()) return;

            std::string missing;
            int lost = 0;
            for (std::size_t k = 0; k < kept.size(); ++k) {
                auto r = read_row(*raw_, e_, kept_names[k], tables_);
                if (!r || r->owner != kept[k].owner() || r->token != kept[k].token()) {
                    ++lost;
                    if (lost <= 5)
                        missing += "  " + kept_names[k] + " (token " + std::to_string(kept[k].token()) + "): " +
                                   (r ? "row of owner " + r->owner + ", token " + std::to_string(r->token)
                                      : std::string("no row")) +
                                   "\n";
                }
            }
            EXPECT_EQ(lost, 0) << lost << " of " << burst
                               << " granted and never released locks lost their row in the crash:\n"
                               << missing;

            sqlock::store fresh(url_, options(2));
            // A release does not wait for the disk (docs/table-lock.md, Durability):
            // the crash may have lost the last one, leaving the hot name held by its
            // last grant until the TTL. Then it must be exactly that grant's row
            // (owner and token), never an older one; an operator's force-release
            // frees it, as it would in production.
            if (auto left = read_row(*raw_, e_, hot, tables_)) {
                EXPECT_EQ(left->token, last_hot_token) << "the hot name's row after the crash is not its last grant's";
                EXPECT_EQ(left->owner, last_hot_owner);
                (void)sqlock::force_release(fresh, hot);
            }
            lease again = sqlock::table_locker(fresh, {.ttl = 30s}).acquire(hot, 10s);
            hot_tokens.add("round " + std::to_string(round) + " after the crash", again.token());
            std::string const repeats = hot_tokens.violations();
            EXPECT_TRUE(repeats.empty()) << "the hot name's token went back in the crash:\n" << repeats;
            if (lost != 0 || !repeats.empty()) ++bad_rounds;
            again.release();
            // Later rounds compare against the hot name's counter as it is now.
            hot_tokens = token_record{};
            hot_tokens.add("round " + std::to_string(round) + " after the crash", again.token());
        }
    }
    EXPECT_EQ(bad_rounds, 0) << bad_rounds << " of " << rounds << " crash rounds lost acknowledged grants";
}

// innodb_flush_log_at_trx_commit is global on MariaDB: a session cannot ask
// for durable commits. With 0 or 2 a commit is acknowledged before the log is
// flushed (0: lost even in a mere crash of the server), so a store must refuse
// such a server with a clear error naming the setting, unless the caller
// accepts it with store_options::allow_relaxed_durability.
//
// PostgreSQL's synchronous_commit is per session (the store forces it on:
// AcknowledgedGrantsSurviveACrash); fsync = off is the server's and is refused.
TEST_P(Crash, RelaxedDurabilityIsRefused) {
    if (e_ == engine::postgresql) {
        std::string dir, port;
        require_env("SQLOCK_TEST_PG_SOCKET_DIR", dir);
        require_env("SQLOCK_TEST_PG_PORT", port);
        if (should_stop()) return;
        url_parts p = parse_server_url(url_);
        auto su = [&] {
            return std::make_unique<soci::session>(*soci::factory_postgresql(),
                                                   "host=" + pg_quote_param(dir) + " port=" + port +
                                                       " dbname=" + pg_quote_param(p.db) + " user=postgres");
        };
        struct restore_fsync {
            decltype(su)& open;
            ~restore_fsync() {
                try {
                    auto s = open();
                    *s << "ALTER SYSTEM RESET fsync";
                    *s << "SELECT pg_reload_conf()";
                } catch (std::exception const& e) {
                    ADD_FAILURE() << "could not restore fsync: " << describe(e);
                }
            }
        } guard{su};
        {
            auto s = su();
            *s << "ALTER SYSTEM SET fsync = off";
            *s << "SELECT pg_reload_conf()";
        }
        // The reload reaches new backends once the postmaster has read it: poll.
        std::string seen;
        for (int i = 0; i < 200 && seen != "off"; ++i) {
            *su() << "SELECT current_setting('fsync')", soci::into(seen);
            if (seen != "off") std::this_thread::sleep_for(50ms);
        }
        ASSERT_EQ(seen, "off") << "the server did not take fsync = off";
        try {
            sqlock::store s(url_, options(1));
            ADD_FAILURE() << "a store opened on a server with fsync = off";
        } catch (sqlock::backend_error const& e) {
            EXPECT_NE(std::string(e.what()).find("fsync"), std::string::npos)
                << "the refusal must name the setting: " << e.what();
        } catch (std::exception const& e) {
            ADD_FAILURE() << "expected sqlock::backend_error naming fsync, got " << describe(e);
        }
        auto o = options(1);
        o.allow_relaxed_durability = true;
        EXPECT_NO_THROW(sqlock::store(url_, o)) << "with allow_relaxed_durability the store must open";
        return;
    }
    std::string sock;
    require_env("SQLOCK_TEST_MYSQL_SOCKET", sock);
    if (should_stop()) return;
    auto root = [&] {
        url_parts p = parse_server_url(url_);
        return std::make_unique<soci::session>(*soci::factory_mysql(),
                                               "unix_socket=" + mysql_quote_param(sock) +
                                                   " user='root' dbname=" + mysql_quote_param(p.db));
    };
    // Restores the durable setting whatever happens in between.
    struct restore_flush {
        decltype(root)& open;
        ~restore_flush() {
            try {
                *open() << "SET GLOBAL innodb_flush_log_at_trx_commit = 1";
            } catch (std::exception const& e) {
                ADD_FAILURE() << "could not restore innodb_flush_log_at_trx_commit = 1: " << describe(e);
            }
        }
    } guard{root};

    for (int value : {2, 0}) {
        SCOPED_TRACE("innodb_flush_log_at_trx_commit = " + std::to_string(value));
        *root() << "SET GLOBAL innodb_flush_log_at_trx_commit = " + std::to_string(value);
        try {
            sqlock::store s(url_, options(1));
            (void)sqlock::table_locker(s).acquire(n("relaxed-" + std::to_string(value)), 5s);
            ADD_FAILURE() << "a store opened and granted a lock on a server with innodb_flush_log_at_trx_commit = "
                          << value;
        } catch (sqlock::backend_error const& e) {
            EXPECT_NE(std::string(e.what()).find("innodb_flush_log_at_trx_commit"), std::string::npos)
                << "the refusal must name the setting: " << e.what();
        } catch (std::exception const& e) {
            ADD_FAILURE() << "expected sqlock::backend_error naming innodb_flush_log_at_trx_commit, got "
                          << describe(e);
        }
        try {
            auto o = options(1);
            o.allow_relaxed_durability = true;
            sqlock::store s(url_, o);
            lease l = sqlock::table_locker(s).acquire(n("allowed-" + std::to_string(value)), 5s);
            EXPECT_TRUE(l.held());
        } catch (std::exception const& e) {
            ADD_FAILURE() << "with allow_relaxed_durability the store must open: " << describe(e);
        }
    }
}

INSTANTIATE_TEST_SUITE_P(Engines, Crash, ::testing::Values(engine::postgresql, engine::mysql), engine_param_name{});

}  // namespace
