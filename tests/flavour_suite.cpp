// sqlock tests — which server is behind a store, and MySQL's statements.
//
// Engines/ServerInfo: store::server() reports the real servers (PostgreSQL 15,
// MariaDB 10.11, the SQLite library).
//
// Flavour.*: no MySQL server runs here (Debian 12 ships none), so these feed a
// store the answer of another server through the test-only hook of
// sqlock_failpoints (SQLOCK_TEST_SERVER_ANSWER, src/dialect/server.hpp) and
// run against the MariaDB the tests have:
//   - with MySQL 8.4's answer the store uses MySQL's statements
//     (src/dialect/mysql/flavour.cpp), which MariaDB also runs. Recorded at a
//     proxy in between, what the clients sent names nothing MariaDB-only, and
//     the mechanisms they carry hold on the server: a release wakes a waiter
//     of another store through KILL QUERY <connection>, and the row lock's
//     wait_timeout ends a holder that hangs past its TTL;
//   - with the answers of servers too old, the store refuses with a
//     usage_error naming the server and what to do, and creates nothing.
// Same server variables and CI rule as sqlock_engine_tests.
#include "fault_proxy.hpp"
#include "parked_waiter.hpp"
#include "test_env.hpp"

#include <sqlock/sqlock.hpp>

#include <soci/soci.h>

#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <regex>
#include <string>

namespace {

using namespace std::chrono_literals;
using namespace sqlock_test;
using sqlock::engine;
using sqlock::lease;
using sqlock::locker;
using sqlock::server_flavour;

// ============================================================ the real servers

class ServerInfo : public engine_fixture {};

TEST_P(ServerInfo, ReportsTheServer) {
    auto const s = db_->server();
    switch (e_) {
        case engine::postgresql:
            EXPECT_EQ(s.flavour, server_flavour::postgresql);
            EXPECT_EQ(s.major, 15) << s.version << ": the test servers run PostgreSQL 15";
            EXPECT_TRUE(s.comment.empty());
            break;
        case engine::mysql:
            EXPECT_EQ(s.flavour, server_flavour::mariadb) << s.version << " | " << s.comment;
            EXPECT_EQ(s.major, 10) << s.version << ": the test servers run MariaDB 10.11";
            EXPECT_EQ(s.minor, 11) << s.version;
            EXPECT_NE(s.version.find("MariaDB"), std::string::npos) << s.version;
            break;
        case engine::sqlite:
            EXPECT_EQ(s.flavour, server_flavour::sqlite);
            EXPECT_EQ(s.major, 3);
            EXPECT_GE(s.minor, 35) << s.version;
            break;
    }
    std::string version;
    *raw_ << (e_ == engine::postgresql ? "SELECT current_setting('server_version')"
              : e_ == engine::mysql    ? "SELECT VERSION()"
                                       : "SELECT sqlite_version()"),
        soci::into(version);
    EXPECT_EQ(s.version, version) << "the server's own words";
}

INSTANTIATE_TEST_SUITE_P(Engines, ServerInfo, ::testing::Values(engine::postgresql, engine::mysql, engine::sqlite),
                         engine_param_name{});

// ============================================================ faked answers

/// Sets SQLOCK_TEST_SERVER_ANSWER while in scope: the stores opened meanwhile take it for their server's answer.
class faked_answer {
public:
    explicit faked_answer(std::string const& spec) { ::setenv("SQLOCK_TEST_SERVER_ANSWER", spec.c_str(), 1); }
    ~faked_answer() { ::unsetenv("SQLOCK_TEST_SERVER_ANSWER"); }
    faked_answer(faked_answer const&) = delete;
    faked_answer& operator=(faked_answer const&) = delete;
};

constexpr char const* mysql_84 = "mysql=8.4.3|MySQL Community Server - GPL";

class Flavour : public ::testing::Test {
protected:
    void SetUp() override {
        require_env("SQLOCK_TEST_MYSQL_URL", url_);
        if (should_stop()) return;
        raw_ = raw_session(engine::mysql, url_);
        tables_ = "sqlf" + random_hex(8);
    }
    void TearDown() override {
        if (raw_ == nullptr) return;
        try {
            drop_tables();
        } catch (std::exception const&) {  // the next run uses other names
        }
    }

    /// Every table and procedure named <tables_>_*, for the checks that nothing was created.
    long long schema_objects() {
        long long n = 0;
        *raw_ << "SELECT (SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = DATABASE() AND "
                 "table_name LIKE :p) + (SELECT COUNT(*) FROM information_schema.routines WHERE routine_schema = "
                 "DATABASE() AND routine_name LIKE :p)",
            soci::use(tables_ + "\\_%", "p"), soci::into(n);
        return n;
    }

    void drop_tables() {
        std::vector<std::string> names(100);
        *raw_ << "SELECT table_name FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name "
                 "LIKE :p",
            soci::use(tables_ + "\\_%", "p"), soci::into(names);
        for (auto const& t : names) *raw_ << "DROP TABLE IF EXISTS " + t;
        for (char const* p : {"_acquire", "_acquire_v2", "_acquire_shared", "_renew"})
            *raw_ << "DROP PROCEDURE IF EXISTS " + tables_ + p;
    }

    std::string url_;
    std::string tables_;
    std::unique_ptr<soci::session> raw_;
};

// The statements a store sends on MySQL: none of MariaDB's own (idle_transaction_timeout, the process list's
// QUERY_ID, KILL QUERY ID, a prepared ROLLBACK), each of MySQL's (flavour.cpp) where its feature ran, and
// they work: a table lock
// and a row lock are taken, renewed and released, a release wakes a parked waiter of another store through
// KILL QUERY <connection> within poll / 1000, and the reaper runs its pass.
TEST_F(Flavour, MysqlStatementsWorkAndNameNothingOfMariadb) {
    auto proxy = fault_proxy::for_url(url_);
    proxy->record_requests();
    std::string const url = proxy->proxied_url(url_);
    faked_answer const fake(mysql_84);
    sqlock::store_options const opts{.create_schema = true, .table_prefix = tables_};
    sqlock::store holder_store(url, opts);
    sqlock::store waiter_store(url, opts);
    ASSERT_EQ(holder_store.server().flavour, server_flavour::mysql) << "the faked answer was not taken";
    EXPECT_EQ(holder_store.server().version, "8.4.3");
    EXPECT_EQ(holder_store.server().comment, "MySQL Community Server - GPL");
    std::string const name = random_prefix() + "wake";

    // The row lock: its bounds (wait_timeout), a keep-alive with a new TTL, a busy try, its release.
    {
        locker rows = sqlock::row_locker(holder_store, {.ttl = 5s});
        lease r = rows.acquire(name + "-row", 5s);
        EXPECT_FALSE(sqlock::row_locker(waiter_store, {.ttl = 5s}).try_acquire(name + "-row").has_value())
            << "the row lock is not exclusive under MySQL's statements";
        r.renew(7s);
        r.release();
        lease again = rows.acquire(name + "-row", 5s);
        EXPECT_GT(again.token(), r.token());
        again.release();
    }

    // The table lock and the ring.
    locker holder = sqlock::table_locker(holder_store, {.ttl = 60s});
    locker waiter =
        sqlock::table_locker(waiter_store, {.ttl = 60s, .backoff_min = parked_poll, .backoff_max = parked_poll});
    lease h = *holder.try_acquire(name);
    h.renew(30s);
    parked_waiter parked(waiter, name);
    ASSERT_TRUE(eventually([&] { return waiter.stats().busy >= 1; }, 30s)) << "the waiter never tried";
    std::string const bell = "SELECT SLEEP(20) AS " + tables_ + "_bell";
    ASSERT_TRUE(eventually(
        [&] {
            int marked = 0, sleeping = 0;
            *raw_ << "SELECT COUNT(*) FROM " + tables_ + "_locks WHERE name = :n AND waiters <> 0",
                soci::use(name, "n"), soci::into(marked);
            *raw_ << "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE INFO = :b", soci::use(bell, "b"),
                soci::into(sleeping);
            return marked == 1 && sleeping >= 1;
        },
        30s))
        << "the waiter did not mark the row, or its store did not park its listener";
    ASSERT_FALSE(parked.finished()) << "the waiter finished before the release";
    std::uint64_t const notifications_before = waiter_store.stats().notifications;

    std::int64_t const released_ns = steady_ns();
    h.release();
    std::optional<lease> w = parked.woken_after(released_ns, "the release (KILL QUERY <connection> of the listener)");
    ASSERT_TRUE(w.has_value());
    EXPECT_GT(w->token(), h.token());
    // The interrupted SLEEP is what counts: the wake-up the listener gives when it connects could also have
    // reached the waiter late (tests/lifecycle_suite.cpp, ReleaseWakesAParkedWaiterOfAnotherStore).
    EXPECT_TRUE(eventually([&] { return waiter_store.stats().notifications > notifications_before; }, 10s))
        << "the waiter's store never heard the ring: KILL QUERY <connection> did not interrupt its SLEEP";
    w->release();

    auto const reaped = sqlock::reaper(holder_store).reap_once();
    EXPECT_GE(reaped.batches, 1) << "the reaper ran no batch";

    std::string const sent = proxy->requests();
    ASSERT_NE(sent.find(tables_ + "_acquire_v2"), std::string::npos) << "the proxy recorded nothing of the store";
    for (char const* mariadb_only : {"idle_transaction_timeout", "QUERY_ID", "KILL QUERY ID"})
        EXPECT_EQ(sent.find(mariadb_only), std::string::npos)
            << "a store on MySQL sent '" << mariadb_only << "', which MySQL does not know";
    for (char const* mysql_own : {"SESSION wait_timeout = ?", "SESSION wait_timeout = @@GLOBAL.wait_timeout",
                                  "SELECT ID FROM information_schema.PROCESSLIST"})
        EXPECT_NE(sent.find(mysql_own), std::string::npos) << "MySQL's statement '" << mysql_own << "' was not sent";
    EXPECT_TRUE(std::regex_search(sent, std::regex("KILL QUERY [0-9]+"))) << "no ring: KILL QUERY <connection>";
    // The busy try's ROLLBACK: a plain query (COM_QUERY, 0x03), never prepared (COM_STMT_PREPARE, 0x16).
    EXPECT_NE(sent.find("\x03ROLLBACK"), std::string::npos) << "the busy try's ROLLBACK was not sent as a query";
    EXPECT_EQ(sent.find("\x16ROLLBACK"), std::string::npos) << "ROLLBACK was prepared, which MySQL does not list";
}

// MySQL has no idle_transaction_timeout: the row lock bounds its holding session with wait_timeout, set to
// the TTL for the hold. A holder that stops (no renewal) past its TTL is ended by the server, and a waiter of
// another store gets the row with a greater token; the hung holder's lease is lost. Without the bound the
// server would keep the session for its wait_timeout (hours) and the waiter would time out.
TEST_F(Flavour, MysqlRowLockIdleBoundEndsAHungHolder) {
    faked_answer const fake(mysql_84);
    sqlock::store_options const opts{.create_schema = true, .table_prefix = tables_};
    sqlock::store holder_store(url_, opts);
    sqlock::store waiter_store(url_, opts);
    ASSERT_EQ(holder_store.server().flavour, server_flavour::mysql);
    std::string const name = random_prefix() + "idle";
    locker hung = sqlock::row_locker(holder_store, {.ttl = 2s, .auto_renew = false});
    locker waiting = sqlock::row_locker(waiter_store, {.ttl = 30s});
    std::optional<lease> a = hung.try_acquire(name);
    ASSERT_TRUE(a.has_value());
    std::optional<lease> b;
    try {
        b.emplace(waiting.acquire(name, 30s));
    } catch (std::exception const& e) {
        FAIL() << "the server did not end the hung holder's session within 30 s (TTL 2 s): " << describe(e);
    }
    EXPECT_GT(b->token(), a->token());
    EXPECT_TRUE(eventually([&] { return a->lost(); }, 10s)) << "state " << sqlock::to_string(a->state());
    EXPECT_THROW(a->release(), sqlock::lease_lost);
    EXPECT_NO_THROW(b->release());
}

/// The usage_error a store opened on `url` with `options` throws, or "" when it opened.
std::string refusal(std::string const& url, sqlock::store_options const& options) {
    try {
        sqlock::store s(url, options);
    } catch (sqlock::usage_error const& e) {
        return e.what();
    }
    return "";
}

// MySQL before 8.0.29 has no CREATE PROCEDURE IF NOT EXISTS: creating the schema is refused, saying how to
// create it by hand, and creates nothing; on tables made already, the store opens and locks.
TEST_F(Flavour, SchemaCreationOnMysqlBefore8029IsRefusedAndCreatesNothing) {
    std::string const message = [&] {
        faked_answer const fake("mysql=8.0.28|MySQL Community Server - GPL");
        return refusal(url_, {.create_schema = true, .table_prefix = tables_});
    }();
    ASSERT_FALSE(message.empty()) << "create_schema on MySQL 8.0.28 was not refused";
    EXPECT_NE(message.find("CREATE PROCEDURE IF NOT EXISTS"), std::string::npos) << message;
    EXPECT_NE(message.find("MySQL 8.0.28 (MySQL Community Server - GPL)"), std::string::npos) << message;
    EXPECT_NE(message.find("removing 'IF NOT EXISTS'"), std::string::npos) << message;
    EXPECT_EQ(schema_objects(), 0) << "the refused store created tables or procedures";

    sqlock::store made(url_, {.create_schema = true, .table_prefix = tables_});  // as by hand
    faked_answer const fake("mysql=8.0.28|MySQL Community Server - GPL");
    sqlock::store old(url_, {.table_prefix = tables_});
    EXPECT_EQ(old.server().flavour, server_flavour::mysql);
    EXPECT_THROW(old.create_schema(), sqlock::usage_error);
    lease l = sqlock::table_locker(old, {.ttl = 30s}).acquire(random_prefix() + "old", 5s);
    EXPECT_TRUE(l.held());
    l.release();
}

// A server older than sqlock runs on is refused at open, naming it, what needs the newer version and the
// version to upgrade to; nothing is created. The doctor still examines it and reports the same.
TEST_F(Flavour, ServersTooOldAreRefusedAtOpen) {
    struct old_server {
        char const* answer;
        char const* named;
        char const* needs;
    };
    for (auto const& o : {old_server{"mysql=10.5.23-MariaDB|MariaDB Server", "MariaDB 10.5.23", "MariaDB 10.6"},
                          old_server{"mysql=5.7.44|MySQL Community Server (GPL)", "MySQL 5.7.44", "MySQL 8.0.11"}}) {
        SCOPED_TRACE(o.answer);
        faked_answer const fake(o.answer);
        auto const message = refusal(url_, {.create_schema = true, .table_prefix = tables_});
        ASSERT_FALSE(message.empty()) << "not refused";
        EXPECT_NE(message.find(o.named), std::string::npos) << message;
        EXPECT_NE(message.find("SKIP LOCKED"), std::string::npos) << message;
        EXPECT_NE(message.find("upgrade the server to " + std::string(o.needs)), std::string::npos) << message;
        EXPECT_EQ(schema_objects(), 0) << "the refused store created tables or procedures";
        auto const facts = sqlock::inspect_database(url_, tables_);
        ASSERT_TRUE(facts.facts.contains("unsupported"));
        EXPECT_NE(facts.facts.at("unsupported").find(o.named), std::string::npos) << facts.facts.at("unsupported");
    }
    // The other engines' minimums, on the servers here (SQLite: a file of this test).
    temp_dir dir;
    std::string const sqlite = sqlite_url(dir.path() / "locks.db");
    {
        faked_answer const fake("sqlite=3.34.1|");
        auto const message = refusal(sqlite, {.create_schema = true});
        EXPECT_NE(message.find("SQLite 3.34.1"), std::string::npos) << message;
        EXPECT_NE(message.find("RETURNING"), std::string::npos) << message;
    }
    EXPECT_EQ(refusal(sqlite, {.create_schema = true}), "") << "the real SQLite library was refused";
    std::string pg;
    require_env("SQLOCK_TEST_PG_URL", pg);
    if (should_stop()) return;
    faked_answer const fake("postgresql=11.22|");
    auto const message = refusal(pg, {.create_schema = true});
    EXPECT_NE(message.find("PostgreSQL 11.22"), std::string::npos) << message;
    EXPECT_NE(message.find("tcp_user_timeout"), std::string::npos) << message;
}

}  // namespace
