// sqlock reliability battery (issue 13, plan §4.G, G07 "insufficient privileges"): a store whose database user
// may not write the lock tables, a database that is read-only, and a holder whose privileges are revoked while it
// holds. On real servers (SQLOCK_TEST_PG_URL, SQLOCK_TEST_MYSQL_URL with SQLOCK_TEST_MYSQL_SOCKET for root; same CI
// rule as the engine suites: a missing engine fails under CI=true) and on a SQLite file made immutable.
//
//   Engines/BadConfig.SelectOnlyUserIsRefusedWithAGrantHint/{postgresql,mysql}
//       a user with SELECT only on the lock tables: try_acquire and acquire throw backend_error whose message names
//       the refused privilege and says to GRANT it (not "unreachable", not a retryable connection error); no row,
//       no token counter is written; opening a store with create_schema says that CREATE is needed too.
//   Engines/ReadOnlyDatabase.AcquireIsRefusedAsReadOnly/{postgresql,sqlite}
//       PostgreSQL with default_transaction_read_only = on (through the URL's libpq `options`; sqlock does not
//       override it), SQLite on a file made immutable (chattr +i when run as root, which chmod 0444 would not
//       stop; chmod 0444 otherwise): backend_error naming the read-only database and what to do; no row.
//       MariaDB has no such case here: its read_only is global (it would break every other test on the shared
//       server) and a mysql:// URL passes no session settings; the SELECT-only user covers the same refusal there.
//   Engines/BadConfig.RevokedRenewalsLoseTheLeaseByItsDeadline/{postgresql,mysql}
//       a holder whose UPDATE privilege is revoked while it holds: its renewals fail, and it is reported lost by its
//       safe deadline (on_lost, stop_token, state lost), never held past it (every observation after
//       revoke + TTL sees it not held); a client with privileges then gets the lock with a greater token, granted
//       after the old lease's last expiry by the database's clock.
#include "marked_sessions.hpp"
#include "test_env.hpp"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

using namespace sqlock_test;
using namespace std::chrono_literals;
using sqlock::lease;
using sqlock::lease_state;
using steady = std::chrono::steady_clock;

bool contains(std::string const& s, std::string_view part) { return s.find(part) != std::string::npos; }

/// PostgreSQL and MariaDB with database users of the test's own, made with only some privileges on the lock
/// tables, and dropped afterwards (also after a fatal failure of the body).
class BadConfig : public marked_sessions_fixture {
protected:
    // The users are dropped here even after a fatal failure in the body (when mysql_root() and pg_superuser(),
    // which stop a failed test, give no session).
    void TearDown() override {
        for (auto const& r : pg_roles_) {
            try {
                auto su = pg_superuser_session();
                *su << "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = :u", soci::use(r);
                *su << "DROP OWNED BY " + r;
                *su << "DROP ROLE IF EXISTS " + r;
            } catch (std::exception const& e) {
                ADD_FAILURE() << "could not drop the test's PostgreSQL role " << r << ": " << describe(e);
            }
        }
        if (e_ == engine::mysql && !users_.empty() && ::testing::Test::HasFatalFailure()) {
            try {
                auto const socket = getenv_nonempty("SQLOCK_TEST_MYSQL_SOCKET").value();
                soci::session root(*soci::factory_mysql(), "unix_socket=" + mysql_quote_param(socket) + " user='root'");
                for (auto const& u : users_) {
                    end_sessions_quietly(u);
                    root << "DROP USER IF EXISTS '" + u + "'@'127.0.0.1', '" + u + "'@'localhost'";
                }
                users_.clear();
            } catch (std::exception const& e) {
                ADD_FAILURE() << "could not drop the test's MariaDB users: " << describe(e);
            }
        }
        marked_sessions_fixture::TearDown();
    }

    std::unique_ptr<soci::session> pg_superuser_session() const {
        return std::make_unique<soci::session>(
            *soci::factory_postgresql(),
            "host=" + pg_quote_param(getenv_nonempty("SQLOCK_TEST_PG_SOCKET_DIR").value()) +
                " port=" + getenv_nonempty("SQLOCK_TEST_PG_PORT").value() +
                " dbname=" + pg_quote_param(parse_server_url(url_).db) + " user=postgres");
    }

    /// PostgreSQL as the superuser over the server's socket (the test user may not create roles).
    std::unique_ptr<soci::session> pg_superuser() {
        std::string dir, port;
        require_env("SQLOCK_TEST_PG_SOCKET_DIR", dir);
        require_env("SQLOCK_TEST_PG_PORT", port);
        if (should_stop()) return nullptr;
        return pg_superuser_session();
    }

    /// A URL of this test's database for a new user with `privileges` (e.g. "SELECT" or
    /// "SELECT, INSERT, UPDATE, DELETE") on the lock and token tables; on MariaDB also EXECUTE on the
    /// procedures (they run with the caller's privileges, SQL SECURITY INVOKER).
    std::string user_with(std::string const& privileges) {
        user_ = new_marker();
        std::string const password = random_hex(16);
        if (e_ == engine::postgresql) {
            auto su = pg_superuser();
            if (!su) return {};
            *su << "CREATE ROLE " + user_ + " LOGIN PASSWORD '" + password + "'";
            pg_roles_.push_back(user_);
            *su << "GRANT " + privileges + " ON " + locks_table() + ", " + tokens_table() + " TO " + user_;
            // The protocol record, which a store reads as it opens (MariaDB: SELECT on the whole database below).
            *su << "DO $$ BEGIN IF to_regclass('sqlock_protocol') IS NOT NULL THEN GRANT SELECT ON sqlock_protocol TO " +
                       user_ + "; END IF; END $$";
        } else {
            auto root = mysql_root();
            if (!root) return {};
            std::string const db = parse_server_url(url_).db;
            *root << "CREATE USER '" + user_ + "'@'127.0.0.1' IDENTIFIED BY '" + password + "', '" + user_ +
                         "'@'localhost' IDENTIFIED BY '" + password + "'";
            users_.push_back(user_);
            // SELECT on the whole database: opening a store checks every table of the schema, and MariaDB shows
            // a user only the tables it has some privilege on.
            *root << "GRANT SELECT ON `" + db + "`.* TO " + mysql_user();
            for (auto const& t : {locks_table(), tokens_table()})
                *root << "GRANT " + privileges + " ON `" + db + "`.`" + t + "` TO " + mysql_user();
            for (char const* p : {"sqlock_acquire_v2", "sqlock_acquire_shared", "sqlock_renew"})
                *root << "GRANT EXECUTE ON PROCEDURE `" + db + "`.`" + p + "` TO " + mysql_user();
        }
        return with_password(url_, user_, password);
    }

    /// Take `privilege` on the lock table away from the user of user_with(), now.
    void revoke(std::string const& privilege) {
        if (e_ == engine::postgresql) {
            *pg_superuser() << "REVOKE " + privilege + " ON " + locks_table() + " FROM " + user_;
        } else {
            auto root = mysql_root();
            *root << "REVOKE " + privilege + " ON `" + parse_server_url(url_).db + "`.`" + locks_table() + "` FROM " +
                         mysql_user();
        }
    }

    std::string mysql_user() const { return "'" + user_ + "'@'127.0.0.1', '" + user_ + "'@'localhost'"; }

    std::string user_;
    std::vector<std::string> pg_roles_;
};

/// The refusal of a write for lack of privileges: a backend_error (not backend_unavailable: retrying or fixing
/// the network does not help) that names the engine's refusal and says to GRANT the privileges.
void expect_permission_error(engine e, std::function<void()> const& call, std::string const& what) {
    try {
        call();
        ADD_FAILURE() << what << " succeeded for a user that may not write the lock tables";
    } catch (sqlock::backend_error const& err) {
        std::string const m = err.what();
        EXPECT_TRUE(contains(m, e == engine::postgresql ? "permission denied" : "command denied"))
            << what << ": the engine's refusal is missing: " << m;
        EXPECT_TRUE(contains(m, "GRANT")) << what << ": the message does not say what to do (GRANT ...): " << m;
        EXPECT_FALSE(contains(m, "connect")) << what << ": a permission denial reported as a connection problem: " << m;
        EXPECT_EQ(err.code(), e == engine::postgresql ? "42501" : "1142") << m;
    } catch (std::exception const& err) {
        ADD_FAILURE() << what << ": expected sqlock::backend_error, got " << describe(err);
    }
}

TEST_P(BadConfig, SelectOnlyUserIsRefusedWithAGrantHint) {
    std::string const url = user_with("SELECT");
    if (should_stop()) return;
    std::string const name = n("select-only");
    {
        sqlock::store s(url);  // opening needs only SELECT: the schema is there
        auto locks = sqlock::table_locker(s, {.ttl = 2s});
        expect_permission_error(
            e_, [&] { (void)locks.try_acquire(name); }, "try_acquire");
        expect_permission_error(
            e_, [&] { (void)locks.acquire(name, 1s); }, "acquire");
    }
    EXPECT_FALSE(row(name).has_value()) << "a refused acquire left a lock row";
    EXPECT_FALSE(read_counter(*raw_, name).has_value()) << "a refused acquire left a token counter";
    // The same name is free for a user with privileges.
    auto fresh = sqlock::table_locker(*db_, {.ttl = 2s}).try_acquire(name);
    EXPECT_TRUE(fresh.has_value()) << "the name is not free after the refused attempts";

    // Creating the schema needs CREATE, which this user lacks either: the message says so.
    std::string const prefix = "sqlt_" + random_hex(8);
    try {
        sqlock::store s(url, {.create_schema = true, .table_prefix = prefix});
        ADD_FAILURE() << "a user with SELECT only created the schema " << prefix;
    } catch (sqlock::backend_error const& err) {
        std::string const m = err.what();
        EXPECT_TRUE(contains(m, "denied")) << "the engine's refusal is missing: " << m;
        EXPECT_TRUE(contains(m, "CREATE") && contains(m, "GRANT")) << "the message does not say what to do: " << m;
    } catch (std::exception const& err) {
        ADD_FAILURE() << "opening a store with create_schema: expected sqlock::backend_error, got " << describe(err);
    }
}

TEST_P(BadConfig, RevokedRenewalsLoseTheLeaseByItsDeadline) {
    std::string const url = user_with("SELECT, INSERT, UPDATE, DELETE");
    if (should_stop()) return;
    std::string const name = n("revoked");
    auto const ttl = 2s;
    auto events = std::make_shared<event_record>();
    std::atomic<int> on_lost_calls{0};
    sqlock::store s(url);
    auto holder = sqlock::table_locker(s, {.ttl = ttl,
                                           .on_lost = [&](std::string_view, std::int64_t) { ++on_lost_calls; },
                                           .on_event = event_record::hook(events)});
    auto held = holder.try_acquire(name);
    ASSERT_TRUE(held.has_value()) << "the holder with privileges did not get a free lock";
    // A renewal before the revocation shows the watchdog renews with these privileges.
    ASSERT_TRUE(eventually([&] { return events->count(sqlock::lease_event::kind::renewed, name) > 0; }))
        << "the watchdog never renewed:\n"
        << events->dump();

    revoke("UPDATE");
    // Any renewal that succeeds was sent before REVOKE returned, so the lease's safe deadline is at most one TTL
    // after this moment: from then on the lease must never be seen held (state() is checked against the local
    // deadline at every read, so this bound needs no slack).
    auto const bound = steady::now() + ttl;
    std::vector<std::string> held_past_deadline;
    bool lost = eventually(
        [&] {
            auto const t = steady::now();
            auto const st = held->state();
            if (t >= bound && (st == lease_state::held || st == lease_state::in_doubt))
                held_past_deadline.push_back(std::string(sqlock::to_string(st)) + " " +
                                             std::to_string((t - bound) / 1ms) + " ms past the deadline");
            // on_lost runs before the stop token is requested (lease_row::mark_lost): wait for both.
            return st == lease_state::lost && on_lost_calls.load() > 0 && held->stop_token().stop_requested();
        },
        20s);
    EXPECT_TRUE(lost) << "the lease was not reported lost (state " << sqlock::to_string(held->state())
                      << ", on_lost calls " << on_lost_calls.load() << "):\n"
                      << events->dump();
    EXPECT_TRUE(held_past_deadline.empty()) << "held past its safe deadline: " << held_past_deadline.front();
    EXPECT_TRUE(held->stop_token().stop_requested()) << "the lost lease's stop_token was not requested";
    EXPECT_EQ(on_lost_calls.load(), 1);
    // The failed renewals were refusals for privileges, reported as such.
    bool denial_seen = false;
    for (auto const& ev : events->of(sqlock::lease_event::kind::renew_failed, name))
        denial_seen = denial_seen || contains(ev.detail, "GRANT");
    EXPECT_TRUE(denial_seen) << "no renew_failed event names the missing privilege:\n" << events->dump();

    // A client with privileges gets the lock once the old row has expired by the database's clock.
    auto fresh = sqlock::table_locker(*db_, {.ttl = ttl}).acquire(name, 15s);
    EXPECT_GT(fresh.token(), held->token());
    EXPECT_GE(fresh.created_at(), held->expires_at())
        << "granted before the lost lease's last known expiry (database clock)";
}

INSTANTIATE_TEST_SUITE_P(Engines, BadConfig, ::testing::Values(engine::postgresql, engine::mysql), engine_param_name{});

/// A read-only database: PostgreSQL through default_transaction_read_only, SQLite through an immutable file.
class ReadOnlyDatabase : public engine_fixture {};

/// chattr on a file (SQLite variant); true when it worked.
bool chattr(std::string const& flag, fs::path const& file) {
    std::string const cmd = "chattr " + flag + " '" + file.string() + "'";
    return std::system(cmd.c_str()) == 0;
}

TEST_P(ReadOnlyDatabase, AcquireIsRefusedAsReadOnly) {
    std::string const name = n("read-only");
    std::string url = url_;
    fs::path file;
    struct undo_read_only {
        fs::path file;
        ~undo_read_only() {
            if (file.empty()) return;
            if (::geteuid() == 0) chattr("-i", file);
            std::error_code ec;
            fs::permissions(file, fs::perms::owner_write, fs::perm_options::add, ec);
        }
    } undo;
    if (e_ == engine::postgresql) {
        url += std::string(url.find('?') == std::string::npos ? "?" : "&") +
               "options=-c%20default_transaction_read_only%3Don";
    } else {
        file = sqlite_path_of(url_);
        db_.reset();  // the schema is in the file; the test's own store closes its connections
        undo.file = file;
        if (::geteuid() == 0) {  // root writes a file whatever its mode says
            ASSERT_TRUE(chattr("+i", file)) << "chattr +i " << file << " failed (needs ext4, xfs or btrfs)";
        } else {
            fs::permissions(file, fs::perms::owner_read | fs::perms::group_read | fs::perms::others_read);
        }
    }
    {
        sqlock::store s(url);
        auto locks = sqlock::table_locker(s, {.ttl = 2s});
        for (bool waiting : {false, true}) {
            std::string const what = waiting ? "acquire" : "try_acquire";
            try {
                if (waiting) (void)locks.acquire(name, 1s);
                else (void)locks.try_acquire(name);
                ADD_FAILURE() << what << " succeeded on a read-only database";
            } catch (sqlock::backend_error const& err) {
                std::string const m = err.what();
                EXPECT_TRUE(contains(m, e_ == engine::postgresql ? "read-only transaction" : "readonly database"))
                    << what << ": the engine's refusal is missing: " << m;
                EXPECT_TRUE(contains(m, "writable")) << what << ": the message does not say what to do: " << m;
                EXPECT_FALSE(contains(m, "connect")) << what << ": a read-only database reported as unreachable: " << m;
            } catch (std::exception const& err) {
                ADD_FAILURE() << what << ": expected sqlock::backend_error, got " << describe(err);
            }
        }
    }
    EXPECT_FALSE(row(name).has_value()) << "a refused acquire left a lock row";
}

INSTANTIATE_TEST_SUITE_P(Engines, ReadOnlyDatabase, ::testing::Values(engine::postgresql, engine::sqlite),
                         engine_param_name{});

}  // namespace
