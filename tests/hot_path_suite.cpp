// sqlock tests — the hot path (issue 12): what makes a lock cycle cost what its
// SQL costs, checked as behaviour on the real engines, never as timings.
//
//   Engines/HotPath.StatementsArePreparedOncePerConnection/<engine>
//       the hot statements are prepared once on a pooled connection and reused:
//       the engine's own list of prepared statements on that connection does not
//       grow with more cycles, and is not empty
//   Engines/HotPath.RowLockStatementsArePreparedOncePerConnection/<engine>
//       the same for the row lock: its BEGIN, lock (the try, the waiting and the
//       busy paths), token record, keep-alive, COMMIT and ROLLBACK are prepared
//       on the connection it holds, and are the same statements cycle after cycle
//   Engines/HotPathServer.RowLockStatementsArePreparedAgainAfterTheConnectionIsLost/<engine>
//       PostgreSQL and MariaDB: when the server ends the holder's session, the
//       lease is lost, the statements prepared on that session are dropped with
//       it, and the reopened connection prepares them once again and reuses them
//   HotPathMariaDB.RowLockPreparesNothingAfterItsFirstCycles
//       MariaDB (counted through a proxy): after the first cycles, row-lock cycles
//       send no COM_STMT_PREPARE and no statement text (COM_QUERY), only
//       executions of statements prepared before, and an uncontended cycle is at
//       most 5 round trips
//   HotPathSqlite.TheTokenCounterTriggersAreRequired
//       the one-statement acquire relies on the schema's triggers to store each
//       token: a file without them is refused at open, naming the trigger
//   HotPathPostgres.*
//       a release NOTIFYs only when a waiter marked the row; a waiter parked with
//       a 60 s backoff is woken by exactly that; a release commits with
//       synchronous_commit off while grants and renewals commit durably (seen by
//       a deferred trigger of the test's own, at commit time); a lock table from
//       before the waiters column is refused with the ALTER TABLE to run, and
//       create_schema adds the column
#include "../src/detail/access.hpp"
#include "../src/detail/store_impl.hpp"
#include "command_counter.hpp"
#include "test_env.hpp"

#include <libpq-fe.h>

#include <algorithm>
#include <future>

using namespace std::chrono_literals;
using namespace sqlock_test;

namespace {

// The SQL of the statements the engine holds prepared on the one pooled
// connection of `db` (PostgreSQL: pg_prepared_statements; SQLite: sqlite3_next_stmt).
std::vector<std::string> prepared_on(sqlock::store& db, engine e) {
    return sqlock::detail::access::impl(db)->run("probe", [&](sqlock::detail::pooled_session s) {
        std::vector<std::string> out;
        if (e == engine::postgresql) {
            // A one-time query (unnamed): it does not list itself.
            std::string all;
            soci::indicator ind = soci::i_null;
            s.session << "SELECT string_agg(statement, chr(31) ORDER BY statement) FROM pg_prepared_statements",
                soci::into(all, ind);
            for (std::size_t at = 0; ind == soci::i_ok && at <= all.size();) {
                auto end = std::min(all.find('\x1f', at), all.size());
                out.push_back(all.substr(at, end - at));
                at = end + 1;
            }
            return out;
        }
        auto* backend = static_cast<soci::sqlite3_session_backend*>(s.session.get_backend());
        for (auto* st = sqlite_api::sqlite3_next_stmt(backend->conn_, nullptr); st != nullptr;
             st = sqlite_api::sqlite3_next_stmt(backend->conn_, st))
            out.emplace_back(sqlite_api::sqlite3_sql(st));
        std::sort(out.begin(), out.end());
        return out;
    });
}

class HotPath : public engine_fixture {
protected:
    void open_store() override {
        // One connection, so every cycle runs on the connection the probe looks at.
        db_.emplace(url_, sqlock::store_options{.pool_size = 1, .create_schema = true});
    }

    // How many statements the engine holds prepared on the store's one pooled connection.
    long long prepared_on_connection() {
        return sqlock::detail::access::impl(*db_)->run("probe", [&](sqlock::detail::pooled_session s) -> long long {
            EXPECT_NE(s.prepared, nullptr) << "no statement cache on the connection";
            if (e_ == engine::postgresql) {
                long long n = 0;
                s.session << "SELECT COUNT(*) FROM pg_prepared_statements", soci::into(n);
                return n;
            }
            auto* backend = static_cast<soci::sqlite3_session_backend*>(s.session.get_backend());
            long long n = 0;
            for (auto* st = sqlite_api::sqlite3_next_stmt(backend->conn_, nullptr); st != nullptr;
                 st = sqlite_api::sqlite3_next_stmt(backend->conn_, st))
                ++n;
            return n;
        });
    }

    // The SQL of the statements the engine holds prepared on the store's one pooled connection.
    std::vector<std::string> prepared_sql() { return prepared_on(*db_, e_); }

    void cycles(sqlock::locker& locks, int n) {
        for (int i = 0; i < n; ++i) {
            auto l = locks.try_acquire(this->n("cycle" + std::to_string(i % 4)));
            ASSERT_TRUE(l.has_value());
            l->renew();
            l->release();
        }
    }
};

TEST_P(HotPath, StatementsArePreparedOncePerConnection) {
    auto locks = sqlock::table_locker(*db_, {.ttl = 30s, .auto_renew = false});
    cycles(locks, 10);
    auto const first = prepared_on_connection();
    cycles(locks, 50);
    auto const later = prepared_on_connection();
    // acquire and release at least (renewals run on the store's reserved connections;
    // SQLite adds BEGIN, COMMIT, the token draw and the pragmas)
    EXPECT_GE(first, 2);
    EXPECT_EQ(later, first) << "statements were prepared again (or leaked) on the same connection";
}

std::string joined(std::vector<std::string> const& statements) {
    std::string out;
    for (auto const& s : statements) out += "\n  " + s;
    return out.empty() ? " (none)" : out;
}

// Row-lock cycles through every per-acquire path: the try (SKIP LOCKED), the
// keep-alive, the COMMIT, the waiting acquire (PostgreSQL: its lock_timeout),
// and the busy try against a holder on another store (the existence check, the
// ROLLBACK).
void row_cycles(sqlock::locker& locks, sqlock::locker& other, std::string const& prefix, int n) {
    for (int i = 0; i < n; ++i) {
        auto const name = prefix + "row" + std::to_string(i % 4);
        auto l = locks.try_acquire(name);
        ASSERT_TRUE(l.has_value());
        l->renew();
        l->release();
        auto waited = locks.acquire(name, 5s);
        waited.release();
        auto held = other.try_acquire(name);
        ASSERT_TRUE(held.has_value());
        EXPECT_FALSE(locks.try_acquire(name).has_value());
        held->release();
    }
}

TEST_P(HotPath, RowLockStatementsArePreparedOncePerConnection) {
    auto locks = sqlock::row_locker(*db_, {.ttl = 30s, .auto_renew = false});
    sqlock::store other_db(url_, {.pool_size = 1});
    auto other = sqlock::row_locker(other_db, {.ttl = 30s, .auto_renew = false});
    row_cycles(locks, other, prefix_, 4);
    auto const first = prepared_sql();
    row_cycles(locks, other, prefix_, 30);
    auto const later = prepared_sql();
    // Only the row lock ran on this connection (it is the one main connection
    // and the holder pins it: token draws run on the reserved connections). PostgreSQL: BEGIN, the try and the waiting
    // lock, the existence check, the token record, the keep-alive, COMMIT,
    // ROLLBACK. SQLite: BEGIN IMMEDIATE, the token draw, COMMIT, the token
    // check, the row upsert, the keep-alive, ROLLBACK.
    EXPECT_GE(first.size(), e_ == engine::postgresql ? 8U : 7U) << "prepared on the connection:" << joined(first);
    for (std::string_view step : {"BEGIN", "COMMIT", "ROLLBACK"})
        EXPECT_TRUE(std::any_of(first.begin(), first.end(), [&](auto const& sql) { return sql.starts_with(step); }))
            << step << " is not prepared on the connection:" << joined(first);
    EXPECT_TRUE(std::any_of(first.begin(), first.end(),
                            [&](auto const& sql) { return sql.find("_rows") != std::string::npos; }))
        << "no statement on the rows table is prepared on the connection:" << joined(first);
    EXPECT_EQ(later, first) << "statements were prepared again (or leaked) on the same connection";
}

INSTANTIATE_TEST_SUITE_P(Engines, HotPath, ::testing::Values(engine::postgresql, engine::sqlite), engine_param_name{});

// ---- PostgreSQL and MariaDB: a lost connection ----

class HotPathServer : public engine_fixture {
protected:
    void open_store() override {}  // each test opens its own (MariaDB: through a proxy)
};

TEST_P(HotPathServer, RowLockStatementsArePreparedAgainAfterTheConnectionIsLost) {
    std::optional<command_counter> proxy;
    if (e_ == engine::mysql) proxy.emplace(url_);
    sqlock::store db(proxy ? proxy->proxied_url() : url_, {.pool_size = 1, .create_schema = true});
    sqlock::store other_db(url_, {.pool_size = 1});
    auto locks = sqlock::row_locker(db, {.ttl = 30s, .auto_renew = false});
    auto other = sqlock::row_locker(other_db, {.ttl = 30s, .auto_renew = false});
    auto const session_id = [&] {
        return sqlock::detail::access::impl(db)->run("probe", [&](sqlock::detail::pooled_session s) {
            long long id = 0;
            s.session << (e_ == engine::postgresql ? "SELECT pg_backend_pid()" : "SELECT CONNECTION_ID()"),
                soci::into(id);
            return id;
        });
    };
    row_cycles(locks, other, prefix_, 4);
    auto const before = e_ == engine::postgresql ? prepared_on(db, e_) : std::vector<std::string>{};
    auto const lost_session = session_id();  // the one pooled connection: the next lease holds it
    auto held = locks.try_acquire(n("lost"));
    ASSERT_TRUE(held.has_value());
    if (e_ == engine::postgresql) {
        int pid = static_cast<int>(lost_session);
        *raw_ << "SELECT pg_terminate_backend(:p)", soci::use(pid, "p");
    } else {
        *raw_ << "KILL CONNECTION " + std::to_string(lost_session);
    }
    EXPECT_THROW(held->renew(), sqlock::lease_lost);
    EXPECT_FALSE(held->held());

    // The next acquires reopen the connection and prepare the statements on it.
    row_cycles(locks, other, prefix_, 4);
    EXPECT_NE(session_id(), lost_session) << "the connection of the lost lease was not reopened";
    auto const at = proxy ? proxy->commands().size() : 0;
    auto const first = e_ == engine::postgresql ? prepared_on(db, e_) : std::vector<std::string>{};
    row_cycles(locks, other, prefix_, 20);
    if (e_ == engine::postgresql) {
        EXPECT_GE(before.size(), 8U) << "the row lock's statements are not prepared:" << joined(before);
        EXPECT_EQ(first, before) << "the new session does not hold the row lock's statements once each";
        EXPECT_EQ(prepared_on(db, e_), first) << "statements were prepared again (or leaked) on the new session";
    } else {
        auto const all = proxy->commands();
        std::vector<int> const sent(all.begin() + static_cast<std::ptrdiff_t>(at), all.end());
        ASSERT_FALSE(sent.empty());
        EXPECT_EQ(std::count(sent.begin(), sent.end(), 0x17), static_cast<std::ptrdiff_t>(sent.size()))
            << "commands other than COM_STMT_EXECUTE on the reopened connection:" << command_list(sent);
    }
}

INSTANTIATE_TEST_SUITE_P(Engines, HotPathServer, ::testing::Values(engine::postgresql, engine::mysql),
                         engine_param_name{});

// ---- MariaDB ----

// SOCI's MySQL backend prepares nothing: every statement it sends is a
// COM_QUERY with its text. The row lock's statements are libmariadb prepared
// statements, so once they exist a cycle sends only COM_STMT_EXECUTE.
TEST(HotPathMariaDB, RowLockPreparesNothingAfterItsFirstCycles) {
    std::string url;
    require_env(url_var(engine::mysql), url);
    if (should_stop()) return;
    auto const prefix = random_prefix();
    command_counter proxy(url);
    sqlock::store db(proxy.proxied_url(), {.pool_size = 1, .create_schema = true});
    sqlock::store other_db(url, {.pool_size = 1});
    auto locks = sqlock::row_locker(db, {.ttl = 30s, .auto_renew = false});
    auto other = sqlock::row_locker(other_db, {.ttl = 30s, .auto_renew = false});
    row_cycles(locks, other, prefix, 4);  // first use on each connection prepares the statements
    auto const before = proxy.commands().size();
    row_cycles(locks, other, prefix, 20);
    auto const all = proxy.commands();
    std::vector<int> const sent(all.begin() + static_cast<std::ptrdiff_t>(before), all.end());
    ASSERT_FALSE(sent.empty());
    EXPECT_EQ(std::count(sent.begin(), sent.end(), 0x16), 0) << "COM_STMT_PREPARE sent:" << command_list(sent);
    EXPECT_EQ(std::count(sent.begin(), sent.end(), 0x03), 0)
        << "statement text (COM_QUERY) sent:" << command_list(sent);
    EXPECT_EQ(std::count(sent.begin(), sent.end(), 0x17), static_cast<std::ptrdiff_t>(sent.size()))
        << "commands other than COM_STMT_EXECUTE:" << command_list(sent);

    // Round trips of an uncontended cycle: the transaction's bounds with
    // autocommit off, the lock (it opens the transaction), the token draw, the
    // record; autocommit on (the COMMIT) with the bounds back.
    auto const at = proxy.commands().size();
    auto l = locks.try_acquire(prefix + "row0");
    ASSERT_TRUE(l.has_value());
    l->release();
    auto const cycle = proxy.commands();
    EXPECT_LE(cycle.size() - at, 5U) << "commands of one cycle:"
                                     << command_list(std::vector<int>(cycle.begin() + static_cast<std::ptrdiff_t>(at),
                                                                      cycle.end()));
}

// ---- SQLite ----

TEST(HotPathSqlite, TheTokenCounterTriggersAreRequired) {
    temp_dir dir;
    auto const url = sqlite_url(dir.path() / "locks.db");
    std::int64_t first = 0;
    {
        sqlock::store db(url, {.create_schema = true});
        auto locks = sqlock::table_locker(db, {.ttl = 30s});
        first = locks.try_acquire("hot:token")->token();
        EXPECT_GT(locks.try_acquire("hot:token")->token(), first);  // the first lease was released
    }
    auto raw = raw_session(engine::sqlite, url);
    *raw << "DROP TRIGGER sqlock_locks_tok_upd";
    try {
        sqlock::store db(url);
        FAIL() << "a file without the token trigger was accepted";
    } catch (sqlock::schema_missing const& e) {
        EXPECT_NE(std::string(e.what()).find("sqlock_locks_tok_upd"), std::string::npos) << e.what();
    }
    sqlock::store db(url, {.create_schema = true});  // puts it back
    auto locks = sqlock::table_locker(db, {.ttl = 30s});
    long long stored = 0;
    auto l = locks.try_acquire("hot:token");
    ASSERT_TRUE(l.has_value());
    *raw << "SELECT token FROM sqlock_tokens WHERE name = 'hot:token'", soci::into(stored);
    EXPECT_EQ(stored, l->token()) << "the counter does not hold the token just granted";
}

// ---- PostgreSQL ----

class HotPathPostgres : public ::testing::Test {
protected:
    void SetUp() override {
        require_env(url_var(engine::postgresql), url_);
        if (should_stop()) return;
        prefix_ = "hp_" + random_hex(10);
        raw_ = raw_session(engine::postgresql, url_);
    }

    sqlock::store open(bool create = true) {
        return sqlock::store(url_, {.create_schema = create, .table_prefix = prefix_});
    }

    std::string url_;
    std::string prefix_;
    std::unique_ptr<soci::session> raw_;
};

// A LISTEN connection of the test's own on the store's channel.
class listener {
public:
    listener(std::string const& url, std::string const& channel) {
        auto p = parse_server_url(url);
        std::string cs = "host=" + pg_quote_param(p.host) + " dbname=" + pg_quote_param(p.db) +
                         " user=" + pg_quote_param(p.user) + " password=" + pg_quote_param(p.password);
        if (!p.port.empty()) cs += " port=" + p.port;
        conn_ = PQconnectdb(cs.c_str());
        PQclear(PQexec(conn_, ("LISTEN \"" + channel + "\"").c_str()));
    }
    ~listener() { PQfinish(conn_); }
    listener(listener const&) = delete;
    listener& operator=(listener const&) = delete;

    bool ok() const { return PQstatus(conn_) == CONNECTION_OK; }

    // Notifications received so far (a round trip makes the server flush what it has queued).
    std::vector<std::string> drain() {
        PQclear(PQexec(conn_, "SELECT 1"));
        PQconsumeInput(conn_);
        while (PGnotify* n = PQnotifies(conn_)) {
            seen_.emplace_back(n->extra);
            PQfreemem(n);
        }
        return seen_;
    }

private:
    PGconn* conn_ = nullptr;
    std::vector<std::string> seen_;
};

TEST_F(HotPathPostgres, ReleaseNotifiesOnlyWhenAWaiterMarkedTheRow) {
    auto holder_db = open();
    auto waiter_db = open();
    listener listen(url_, prefix_ + "_released");
    ASSERT_TRUE(listen.ok());
    auto holder = sqlock::table_locker(holder_db, {.ttl = 30s});
    // A backoff of a minute: within the 20 s the waiter waits, only a NOTIFY can wake it.
    auto waiter = sqlock::table_locker(waiter_db, {.ttl = 30s, .backoff_min = 60s, .backoff_max = 60s});
    std::string const name = "hot:notify";

    for (int i = 0; i < 20; ++i) {
        auto l = holder.try_acquire(name);
        ASSERT_TRUE(l.has_value());
        // A busy try_acquire from elsewhere does not mark the row either: it will not wait.
        EXPECT_FALSE(waiter.try_acquire(name).has_value());
        l->release();
    }
    EXPECT_TRUE(listen.drain().empty()) << "releases nobody waited for sent NOTIFYs";

    auto held = holder.try_acquire(name);
    ASSERT_TRUE(held.has_value());
    auto waiting = std::async(std::launch::async, [&] { return waiter.acquire(name, 20s); });
    // The waiter's busy answer marked the row (recorded state, not a sleep).
    ASSERT_TRUE(eventually([&] {
        int marked = 0;
        *raw_ << "SELECT CASE WHEN waiters THEN 1 ELSE 0 END FROM " + prefix_ + "_locks WHERE name = :n",
            soci::use(name, "n"), soci::into(marked);
        return marked == 1;
    })) << "a waiting acquire did not mark the row";
    held->release();
    auto got = waiting.get();  // a timeout here: the release did not wake the waiter
    EXPECT_TRUE(got.held());
    EXPECT_GT(got.token(), held->token());
    auto seen = listen.drain();
    ASSERT_EQ(seen.size(), 1U);
    EXPECT_EQ(seen[0], name);
    got.release();
    EXPECT_EQ(listen.drain().size(), 1U) << "the waiter's own release had nobody waiting";
}

TEST_F(HotPathPostgres, ReleaseCommitsWithoutWaitingForTheDiskAndGrantsDurably) {
    auto db = open();
    // At COMMIT (a deferred constraint trigger), record the synchronous_commit the commit runs under.
    auto const log = prefix_ + "_commit_log";
    *raw_ << "CREATE TABLE " + log + " (id serial PRIMARY KEY, op text, sync text)";
    *raw_ << "CREATE FUNCTION " + prefix_ +
                 "_record() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
                 "INSERT INTO " +
                 log +
                 " (op, sync) VALUES (TG_OP, current_setting('synchronous_commit')); "
                 "RETURN NULL; END $$";
    *raw_ << "CREATE CONSTRAINT TRIGGER " + prefix_ + "_at_commit AFTER INSERT OR UPDATE OR DELETE ON " + prefix_ +
                 "_locks DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION " + prefix_ + "_record()";
    auto locks = sqlock::table_locker(db, {.ttl = 30s, .auto_renew = false});
    auto l = locks.try_acquire("hot:durability");
    ASSERT_TRUE(l.has_value());
    l->renew();
    l->release();
    soci::rowset<soci::row> rows = (raw_->prepare << "SELECT op, sync FROM " + log + " ORDER BY id");
    std::vector<std::string> seen;
    for (auto const& r : rows) seen.push_back(r.get<std::string>(0) + ":" + r.get<std::string>(1));
    EXPECT_EQ(seen, (std::vector<std::string>{"INSERT:on", "UPDATE:on", "DELETE:off"}));
}

TEST_F(HotPathPostgres, LockTableWithoutTheWaitersColumnIsRefusedOrUpgraded) {
    { auto db = open(); }
    *raw_ << "ALTER TABLE " + prefix_ + "_locks DROP COLUMN waiters";
    try {
        auto db = open(false);
        FAIL() << "a lock table without the waiters column was accepted";
    } catch (sqlock::schema_missing const& e) {
        std::string const what = e.what();
        EXPECT_NE(what.find("ALTER TABLE " + prefix_ + "_locks ADD COLUMN waiters boolean"), std::string::npos) << what;
    }
    auto db = open(true);  // create_schema adds it
    auto locks = sqlock::table_locker(db, {.ttl = 30s});
    EXPECT_TRUE(locks.try_acquire("hot:upgraded").has_value());
}

}  // namespace
