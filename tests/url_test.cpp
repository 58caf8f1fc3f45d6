// sqlock tests — unit tests that need no database server: the schema DDL, URL
// parsing and option validation (checked before any I/O), SQLite URL forms,
// unreachable servers, and store/locker/lease lifetimes on SQLite.
#include "test_env.hpp"

#include <sqlock/sqlock.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

namespace {

using namespace std::chrono_literals;
using namespace sqlock_test;
using sqlock::engine;

constexpr engine all_engines[] = {engine::postgresql, engine::mysql, engine::sqlite};

std::string lower(std::string s) {
    std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
    return s;
}

bool contains(std::string const& hay, std::string const& needle) { return hay.find(needle) != std::string::npos; }

/// A URL per engine that cannot connect (nothing listens on port 1; no such directory).
std::string unreachable_url(engine e) {
    switch (e) {
    case engine::postgresql: return "postgresql://u:p@127.0.0.1:1/db";
    case engine::mysql: return "mysql://u:p@127.0.0.1:1/db";
    case engine::sqlite: return "sqlite:///nonexistent-sqlock-dir-" + random_hex(8) + "/x.db";
    }
    return {};
}

std::vector<std::string> const bad_prefixes = {
    "bad-prefix", "1abc", "x; DROP TABLE y", "", std::string(49, 'p'), "a b", "a.b", "\xC3\xA4", "a\"b", "a'b",
};

// ------------------------------------------------------------------ schema_sql

TEST(SchemaSql, CreatesBothTablesOnEveryEngine) {
    for (engine e : all_engines) {
        SCOPED_TRACE(engine_name(e));
        std::string ddl;
        ASSERT_NO_THROW(ddl = sqlock::schema_sql(e));
        std::string l = lower(ddl);
        EXPECT_TRUE(contains(l, "create table")) << ddl;
        EXPECT_TRUE(contains(ddl, "sqlock_locks")) << ddl;
        EXPECT_TRUE(contains(ddl, "sqlock_tokens")) << ddl;
    }
}

TEST(SchemaSql, UsesTheTablePrefix) {
    for (engine e : all_engines) {
        SCOPED_TRACE(engine_name(e));
        std::string ddl = sqlock::schema_sql(e, "myapp_x");
        EXPECT_TRUE(contains(ddl, "myapp_x_locks")) << ddl;
        EXPECT_TRUE(contains(ddl, "myapp_x_tokens")) << ddl;
        EXPECT_FALSE(contains(ddl, "sqlock_locks")) << "the default table name survived the prefix:\n" << ddl;
        EXPECT_FALSE(contains(ddl, "sqlock_tokens")) << ddl;
        EXPECT_EQ(sqlock::schema_sql(e, "sqlock"), sqlock::schema_sql(e));
    }
}

TEST(SchemaSql, AcceptsValidPrefixes) {
    for (engine e : all_engines) {
        for (std::string p : {std::string("a"), std::string("_"), std::string("A1_b"), std::string(48, 'p')}) {
            SCOPED_TRACE(engine_name(e) + " prefix '" + p + "'");
            std::string ddl;
            EXPECT_NO_THROW(ddl = sqlock::schema_sql(e, p));
            EXPECT_TRUE(contains(ddl, p + "_locks"));
        }
    }
}

TEST(SchemaSql, RejectsBadPrefixes) {
    for (engine e : all_engines) {
        for (auto const& p : bad_prefixes) {
            SCOPED_TRACE(engine_name(e) + " prefix '" + p + "'");
            EXPECT_THROW((void)sqlock::schema_sql(e, p), sqlock::usage_error);
        }
    }
}

TEST(Engine, Names) {
    EXPECT_EQ(sqlock::to_string(engine::postgresql), "postgresql");
    EXPECT_EQ(sqlock::to_string(engine::mysql), "mysql");
    EXPECT_EQ(sqlock::to_string(engine::sqlite), "sqlite");
}

// ------------------------------------------------------------------ bad URLs and options (before any I/O)

TEST(BadUrl, IsAUsageError) {
    std::vector<std::string> const bad = {
        "",
        "nonsense",
        "foo://u:p@127.0.0.1:5432/db",      // unknown scheme
        "http://127.0.0.1/db",               // unknown scheme
        "postgresql://",                     // nothing
        "postgresql://u:p@/db",              // missing host
        "mysql://u:p@/db",                   // missing host
        "postgresql://u:p@127.0.0.1:abc/db", // port not a number
        "mysql://u:p@127.0.0.1:5x/db",       // port not a number
        "sqlite::memory:",                   // in-memory: a lock nobody else can see
        "sqlite:",                           // no path
        "sqlite://",                         // no path
    };
    for (auto const& url : bad) {
        SCOPED_TRACE("URL '" + url + "'");
        try {
            sqlock::store s(url, {.connect_timeout = 2s});
            ADD_FAILURE() << "accepted";
        } catch (sqlock::usage_error const&) {
            // expected
        } catch (std::exception const& e) {
            ADD_FAILURE() << "expected sqlock::usage_error, got " << describe(e);
        }
    }
}

TEST(BadOptions, TablePrefixIsCheckedBeforeConnecting) {
    // The URLs cannot connect: a usage_error (not backend_unavailable) proves
    // the prefix was checked before any I/O.
    for (engine e : all_engines) {
        for (auto const& p : bad_prefixes) {
            std::string const url = unreachable_url(e);
            SCOPED_TRACE(url + " prefix '" + p + "'");
            try {
                sqlock::store s(url, {.table_prefix = p, .connect_timeout = 2s});
                ADD_FAILURE() << "accepted";
            } catch (sqlock::usage_error const&) {
            } catch (std::exception const& ex) {
                ADD_FAILURE() << "expected sqlock::usage_error before any I/O, got " << describe(ex);
            }
        }
    }
}

TEST(BadOptions, PoolSizeIsCheckedBeforeConnecting) {
    for (engine e : all_engines) {
        for (std::size_t size : {std::size_t{0}, std::size_t{1025}}) {
            std::string const url = unreachable_url(e);
            SCOPED_TRACE(url + " pool_size " + std::to_string(size));
            try {
                sqlock::store s(url, {.pool_size = size, .connect_timeout = 2s});
                ADD_FAILURE() << "accepted";
            } catch (sqlock::usage_error const&) {
            } catch (std::exception const& ex) {
                ADD_FAILURE() << "expected sqlock::usage_error before any I/O, got " << describe(ex);
            }
        }
    }
}

// ------------------------------------------------------------------ unreachable servers

TEST(Unreachable, ClosedPortIsBackendUnavailable) {
    int const port = closed_port();
    std::string const secret = "s3cret-" + random_hex(8);
    for (std::string scheme : {"postgresql", "mysql"}) {
        std::string const url = scheme + "://sqlock:" + secret + "@127.0.0.1:" + std::to_string(port) + "/sqlock";
        SCOPED_TRACE(scheme + " on closed port " + std::to_string(port));
        try {
            sqlock::store s(url, {.connect_timeout = 2s});
            ADD_FAILURE() << "connected to a closed port";
        } catch (sqlock::backend_unavailable const& e) {
            std::string what = e.what();
            EXPECT_FALSE(contains(what, secret)) << "the password leaked into the message: " << what;
            EXPECT_FALSE(what.empty());
        } catch (std::exception const& e) {
            ADD_FAILURE() << "expected sqlock::backend_unavailable, got " << describe(e);
        }
    }
}

// ------------------------------------------------------------------ SQLite URL forms

TEST(SqliteUrl, AbsolutePath) {
    temp_dir dir;
    auto const file = dir.path() / "abs.db";
    std::string const url = "sqlite://" + file.string();  // sqlite:///tmp/.../abs.db
    ASSERT_EQ(url.rfind("sqlite:///", 0), 0u);
    sqlock::store db(url, {.create_schema = true});
    EXPECT_EQ(db.engine(), engine::sqlite);
    EXPECT_TRUE(fs::exists(file));
    EXPECT_EQ(db.schema_sql(), sqlock::schema_sql(engine::sqlite));
    auto l = sqlock::table_locker(db).try_acquire("abs");
    EXPECT_TRUE(l.has_value());
}

TEST(SqliteUrl, RelativePath) {
    temp_dir dir;
    cwd_guard restore;
    fs::current_path(dir.path());
    fs::create_directories(dir.path() / "sub");
    {
        sqlock::store db("sqlite:relative.db", {.create_schema = true});
        EXPECT_EQ(db.engine(), engine::sqlite);
        EXPECT_TRUE(fs::exists(dir.path() / "relative.db")) << "not created relative to the working directory";
        EXPECT_TRUE(sqlock::table_locker(db).try_acquire("rel").has_value());
    }
    {
        sqlock::store db("sqlite:sub/nested.db", {.create_schema = true});
        EXPECT_TRUE(fs::exists(dir.path() / "sub" / "nested.db"));
        EXPECT_TRUE(sqlock::table_locker(db).try_acquire("rel").has_value());
    }
}

TEST(SqliteUrl, TablePrefixNamesTheTables) {
    temp_dir dir;
    std::string const url = sqlite_url(dir.path() / "prefixed.db");
    sqlock::store db(url, {.create_schema = true, .table_prefix = "myapp"});
    EXPECT_EQ(db.schema_sql(), sqlock::schema_sql(engine::sqlite, "myapp"));
    auto l = sqlock::table_locker(db).try_acquire("p");
    ASSERT_TRUE(l.has_value());

    auto raw = raw_session(engine::sqlite, url);
    long long locks = -1, tokens = -1, defaults = -1;
    *raw << "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = 'myapp_locks'", soci::into(locks);
    *raw << "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = 'myapp_tokens'", soci::into(tokens);
    *raw << "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name LIKE 'sqlock%'", soci::into(defaults);
    EXPECT_EQ(locks, 1);
    EXPECT_EQ(tokens, 1);
    EXPECT_EQ(defaults, 0);
    auto r = read_row(*raw, engine::sqlite, "p", "myapp");
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(r->token, l->token());
}

TEST(SqliteUrl, ReopenWithoutCreateSchema) {
    temp_dir dir;
    std::string const url = sqlite_url(dir.path() / "reopen.db");
    { sqlock::store db(url, {.create_schema = true}); }
    std::optional<sqlock::store> db;
    ASSERT_NO_THROW(db.emplace(url));
    EXPECT_TRUE(sqlock::table_locker(*db).try_acquire("x").has_value());
}

TEST(SqliteUrl, FreshFileWithoutCreateSchemaIsSchemaMissing) {
    temp_dir dir;
    std::string const url = sqlite_url(dir.path() / "fresh.db");
    try {
        sqlock::store db(url);
        ADD_FAILURE() << "a store on a database without the tables opened";
    } catch (sqlock::schema_missing const& e) {
        std::string what = e.what();
        EXPECT_TRUE(contains(what, "sqlock_locks")) << what;
        EXPECT_TRUE(contains(lower(what), "schema")) << what;
    }
}

// ------------------------------------------------------------------ lifetimes (SQLite)

TEST(Lifetime, LockersAndLeasesOutliveTheStore) {
    temp_dir dir;
    std::string const url = sqlite_url(dir.path() / "lifetime.db");
    std::optional<sqlock::store> db;
    db.emplace(url, sqlock::store_options{.create_schema = true});
    sqlock::locker locks = sqlock::table_locker(*db);
    std::optional<sqlock::lease> held = locks.try_acquire("outlive");
    ASSERT_TRUE(held.has_value());
    db.reset();  // the store goes first

    EXPECT_TRUE(held->held());
    EXPECT_NO_THROW(held->release());
    auto again = locks.try_acquire("outlive");
    ASSERT_TRUE(again.has_value()) << "a locker whose store was destroyed stopped working";
    EXPECT_GT(again->token(), 0);
}

TEST(Lifetime, MovedStoreKeepsWorking) {
    temp_dir dir;
    sqlock::store a(sqlite_url(dir.path() / "move.db"), {.create_schema = true});
    sqlock::store b = std::move(a);
    EXPECT_EQ(b.engine(), engine::sqlite);
    auto l = sqlock::table_locker(b).try_acquire("moved");
    EXPECT_TRUE(l.has_value());
}

TEST(Lifetime, LockerCopiesShareTheOwnerAndOptions) {
    temp_dir dir;
    sqlock::store db(sqlite_url(dir.path() / "copy.db"), {.create_schema = true});
    sqlock::locker a = sqlock::table_locker(db, {.ttl = 12s, .owner = "fixed-owner"});
    sqlock::locker b = a;  // NOLINT(performance-unnecessary-copy-initialization): copies are the point
    EXPECT_EQ(b.options().ttl, 12s);
    EXPECT_EQ(b.options().owner, "fixed-owner");
    auto l = a.try_acquire("copy");
    ASSERT_TRUE(l.has_value());
    EXPECT_EQ(l->owner(), "fixed-owner");
    EXPECT_LE(std::chrono::abs((l->expires_at() - l->created_at()) - 12s), 5ms);
    // Default owner: per thread, so options() leaves it empty and each lease carries
    // host/pid/instance/thread.
    sqlock::locker d = sqlock::table_locker(db);
    EXPECT_TRUE(d.options().owner.empty());
    auto dl = d.try_acquire("copy-default");
    ASSERT_TRUE(dl.has_value());
    EXPECT_EQ(std::count(dl->owner().begin(), dl->owner().end(), '/'), 3) << dl->owner();
}

// ------------------------------------------------------------------ the tests' own checkers

TEST(HistoryChecker, AcceptsDisjointSectionsWithIncreasingTokens) {
    std::vector<cs_record> h = {{3, 300, 350, 1}, {1, 100, 150, 2}, {2, 200, 250, 1}};  // any order
    EXPECT_EQ(check_history(h), "");
    EXPECT_EQ(count_handoffs(h), 1u);  // by 2, then by 1 twice
}

TEST(HistoryChecker, FindsOverlaps) {
    std::vector<cs_record> h = {{1, 100, 210, 1}, {2, 200, 250, 2}};
    EXPECT_TRUE(contains(check_history(h), "overlap")) << check_history(h);
}

TEST(HistoryChecker, FindsRepeatedAndDecreasingTokens) {
    std::vector<cs_record> repeated = {{5, 100, 150, 1}, {5, 200, 250, 2}};
    EXPECT_TRUE(contains(check_history(repeated), "token not increasing"));
    std::vector<cs_record> decreasing = {{5, 100, 150, 1}, {4, 200, 250, 2}};
    EXPECT_TRUE(contains(check_history(decreasing), "token not increasing"));
}

TEST(PgLogWatch, FindsErrorEntriesWrittenAfterItStarted) {
    temp_dir dir;
    auto const log = dir.path() / "postgresql.log";
    std::string const pre = "2026-11-22 10:00:00.000 UTC [11] sqlock@sqlock ";
    std::ofstream(log) << pre << "ERROR:  duplicate key value violates unique constraint \"sqlock_locks_pkey\"\n";
    pg_log_watch watch(log.string());  // the line above is older: not reported
    {
        std::ofstream out(log, std::ios::app);
        out << pre << "LOG:  checkpoint starting: time\n"
            << pre << "ERROR:  relation \"foo\" does not exist at character 15\n"
            << pre << "STATEMENT:  SELECT * FROM foo\n"
            << pre << "ERROR:  canceling statement due to lock timeout\n"
            << pre << "STATEMENT:  INSERT INTO sqlock_locks (name) VALUES ($1)\n"
            << "\tON CONFLICT DO NOTHING\n"
            << pre << "LOG:  unrelated\n";
    }
    auto found = watch.offending({"sqlock_locks"});
    ASSERT_EQ(found.size(), 1u);
    EXPECT_TRUE(contains(found[0], "lock timeout"));
    EXPECT_TRUE(contains(found[0], "ON CONFLICT"));
    EXPECT_EQ(watch.offending({"foo"}).size(), 1u);
    EXPECT_TRUE(watch.offending({"unrelated"}).empty()) << "a LOG line is not an error";
}

}  // namespace
