// sqlock tests — unit tests that need no database server: the schema DDL, URL
// parsing and option validation (checked before any I/O), SQLite URL forms,
// unreachable servers, and store/locker/lease lifetimes on SQLite.
#include "../src/detail/url.hpp"
#include "test_env.hpp"

#include <sqlock/sqlock.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
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

/// The longest table prefix schema_sql() accepts, found by trying.
std::size_t longest_prefix() {
    std::size_t n = 1;
    while (n < 200) {
        try {
            (void)sqlock::schema_sql(engine::sqlite, std::string(n + 1, 'p'));
        } catch (sqlock::usage_error const&) {
            break;
        }
        ++n;
    }
    return n;
}

/// The names in `ddl` that start with `prefix` + "_".
std::vector<std::string> names_with_prefix(std::string const& ddl, std::string const& prefix) {
    auto identifier_char = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
    std::vector<std::string> names;
    for (std::size_t i = 0; i < ddl.size();) {
        std::size_t end = i;
        while (end < ddl.size() && identifier_char(ddl[end])) ++end;
        if (end == i) {
            ++i;
            continue;
        }
        if (ddl.compare(i, prefix.size() + 1, prefix + "_") == 0) names.push_back(ddl.substr(i, end - i));
        i = end;
    }
    return names;
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
        for (std::string p :
             {std::string("a"), std::string("_"), std::string("A1_b"), std::string(longest_prefix(), 'p')}) {
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

TEST(SchemaSql, LongestPrefixFitsEveryIdentifierLimit) {
    // PostgreSQL truncates names beyond 63 bytes (MariaDB rejects them beyond 64):
    // every derived name, indexes and sequences included, must fit.
    std::size_t const n = longest_prefix();
    std::string const p(n, 'p');
    std::size_t longest = 0;
    for (engine e : all_engines) {
        SCOPED_TRACE(engine_name(e) + " prefix of " + std::to_string(n));
        std::string ddl;
        ASSERT_NO_THROW(ddl = sqlock::schema_sql(e, p));
        auto const names = names_with_prefix(ddl, p);
        EXPECT_FALSE(names.empty()) << ddl;
        for (auto const& name : names) {
            EXPECT_LE(name.size(), 63u) << name;
            longest = std::max(longest, name.size());
        }
    }
    EXPECT_EQ(longest, 63u) << "the limit is stricter than it needs to be";
    try {
        (void)sqlock::schema_sql(engine::postgresql, p + "p");
        ADD_FAILURE() << "a prefix of " << n + 1 << " characters was accepted";
    } catch (sqlock::usage_error const& e) {
        EXPECT_TRUE(contains(e.what(), "at most " + std::to_string(n))) << e.what();
    }
}

// The library linked and the headers agree, and the macros agree with each
// other (CMakeLists.txt takes the project version from the same header).
TEST(Version, LibraryAndHeadersAgree) {
    std::string const composed = std::to_string(SQLOCK_VERSION_MAJOR) + "." + std::to_string(SQLOCK_VERSION_MINOR) +
                                 "." + std::to_string(SQLOCK_VERSION_PATCH);
    EXPECT_EQ(composed, SQLOCK_VERSION_STRING);
    EXPECT_EQ(sqlock::version(), SQLOCK_VERSION_STRING);
    EXPECT_EQ(SQLOCK_VERSION, SQLOCK_VERSION_MAJOR * 10000 + SQLOCK_VERSION_MINOR * 100 + SQLOCK_VERSION_PATCH);
}

TEST(Engine, Names) {
    EXPECT_EQ(sqlock::to_string(engine::postgresql), "postgresql");
    EXPECT_EQ(sqlock::to_string(engine::mysql), "mysql");
    EXPECT_EQ(sqlock::to_string(engine::sqlite), "sqlite");
}

// ------------------------------------------------------------------ URL passwords

TEST(RedactUrl, MasksTheUserinfoPassword) {
    EXPECT_EQ(sqlock::redact_url("postgresql://app:secret@db.example:5432/locks"),
              "postgresql://app:***@db.example:5432/locks");
    EXPECT_EQ(sqlock::redact_url("mysql://app:se%3Acret@db.example/locks"), "mysql://app:***@db.example/locks");
    EXPECT_EQ(sqlock::redact_url("postgresql://app@db.example/locks"), "postgresql://app@db.example/locks");
    EXPECT_EQ(sqlock::redact_url("postgresql://db.example:5432/locks"), "postgresql://db.example:5432/locks");
    EXPECT_EQ(sqlock::redact_url("sqlite:///var/lib/a@b:c.db"), "sqlite:///var/lib/a@b:c.db");
    EXPECT_EQ(sqlock::redact_url("sqlite:rel/a@b:c.db"), "sqlite:rel/a@b:c.db");
}

TEST(RedactUrl, PasswordWithAnAtSign) {
    EXPECT_EQ(sqlock::redact_url("postgresql://app:p@ss@host/db"), "postgresql://app:***@host/db");
    EXPECT_EQ(sqlock::redact_url("mysql://app:a@b@c@host:3306/db?charset=utf8mb4"),
              "mysql://app:***@host:3306/db?charset=utf8mb4");
    EXPECT_EQ(sqlock::redact_url("postgresql://app:p#ss@host/db"), "postgresql://app:***@host/db");
}

TEST(ParseUrl, SplitsTheUserinfoAtTheLastAtSign) {
    for (std::string const url : {"postgresql://app:p@ss@host:5432/db", "postgresql://app:p%40ss@host:5432/db"}) {
        SCOPED_TRACE(url);
        auto parts = sqlock::detail::parse_url(url);
        EXPECT_EQ(parts.user, "app");
        EXPECT_EQ(parts.password, "p@ss");
        EXPECT_EQ(parts.host, "host");
        EXPECT_EQ(parts.port, 5432u);
        EXPECT_EQ(parts.database, "db");
    }
    // redact_url masks exactly what parse_url takes for the password.
    for (std::string const url : {"postgresql://a:b@c@d@host/db", "mysql://a:x:y@host/db", "postgresql://:pw@host/db",
                                  "postgresql://u:1#2@host/db?application_name=me"}) {
        SCOPED_TRACE(url);
        auto parts = sqlock::detail::parse_url(url);
        ASSERT_FALSE(parts.password.empty());
        auto redacted = sqlock::redact_url(url);
        EXPECT_FALSE(contains(redacted, parts.password)) << redacted;
        EXPECT_TRUE(contains(redacted, parts.user + ":***@" + parts.host + "/db")) << redacted;
    }
}

TEST(RedactUrl, MasksUpToTheLastAtSign) {
    // A password of digits then '/' looked like a port (issue 38): everything between the scheme and the
    // last '@' is the userinfo; an '@' in the query masks more, never less.
    EXPECT_EQ(sqlock::redact_url("postgresql://app:2024/Secret@db/app"), "postgresql://app:***@db/app");
    EXPECT_EQ(sqlock::redact_url("mysql://app:8/kQz+a/b==@db:3306/app"), "mysql://app:***@db:3306/app");
    EXPECT_EQ(sqlock::redact_url("postgresql://app:1?x@db/app"), "postgresql://app:***@db/app");
    EXPECT_EQ(sqlock::redact_url("postgresql://u:1#2@host/db?application_name=me@there"), "postgresql://u:***@there");
    EXPECT_EQ(sqlock::redact_url("postgresql://app:2024/app"), "postgresql://app:2024/app");  // host:port/db
}

TEST(ParseUrl, RefusesAnAtSignAfterTheHost) {
    // Else the password's tail reached the server as a database name or a parameter (and its errors).
    for (std::string const url : {"postgresql://app:2024/Secret@db/app", "postgresql://app:2024/Secret@127.0.0.1",
                                  "mysql://app:1?Secret=x@db/app", "postgresql://h/db?application_name=a@b"}) {
        SCOPED_TRACE(url);
        try {
            (void)sqlock::detail::parse_url(url);
            ADD_FAILURE() << "accepted";
        } catch (sqlock::usage_error const& e) {
            EXPECT_TRUE(contains(e.what(), "percent-encode")) << e.what();
            EXPECT_FALSE(contains(e.what(), "Secret")) << e.what();
        }
    }
    EXPECT_EQ(sqlock::detail::parse_url("postgresql://app:2024%2FSecret@db/app").password, "2024/Secret");
    EXPECT_EQ(sqlock::detail::parse_url("postgresql://h/db?application_name=a%40b").params.at("application_name"),
              "a@b");
}

TEST(RedactUrl, MasksPasswordQueryParameters) {
    EXPECT_EQ(sqlock::redact_url("postgresql://host/db?password=secret"), "postgresql://host/db?password=***");
    EXPECT_EQ(sqlock::redact_url("postgresql://u@host/db?sslmode=require&sslpassword=k3y&application_name=a@b"),
              "postgresql://u@host/db?sslmode=require&sslpassword=***&application_name=a@b");
    EXPECT_EQ(sqlock::redact_url("postgresql://host/db?PassWord=a&SSLPASSWORD=b"),
              "postgresql://host/db?PassWord=***&SSLPASSWORD=***");
    EXPECT_EQ(sqlock::redact_url("postgresql://host/db?%70assword=a%26b%40c&x=1"),
              "postgresql://host/db?%70assword=***&x=1");
    EXPECT_EQ(sqlock::redact_url("postgresql://u:pw@host/db?password=p%40ss&password=again"),
              "postgresql://u:***@host/db?password=***&password=***");
    EXPECT_EQ(sqlock::redact_url("postgresql://host/db?passwords=shown&mypassword=shown"),
              "postgresql://host/db?passwords=shown&mypassword=shown");
}

TEST(RedactUrl, NeverLeaksFromMalformedUrls) {
    std::string const secret = "S3cr3t";
    std::vector<std::string> const urls = {
        "postgresql://app:S3cr3t/x@host/db",    // an unencoded '/' in the password
        "postgresql://app:S3cr3t/x@127.0.0.1",  // ... which parse_url takes for a port
        "postgresql://app:S3cr3t?x@host/db",    // an unencoded '?'
        "postgresql://app:S3cr3t@",
        "postgresql://app:S3cr3t",
        "postgresql:/app:S3cr3t@host/db",
        "postgresql:app:S3cr3t@host/db",
        "app:S3cr3t@host/db",
        "foo://app:S3cr3t@host/db",
        "postgresql://127.0.0.1:1/db?password=S3cr3t#frag",
        "postgresql://127.0.0.1:1/db?password=S3cr3t x",
        "postgresql://host/db?password",
        "postgresql://host/db?sslpassword = S3cr3t",
        "host=h password=S3cr3t user=u",
        "host=h password = 'S3 cr3t' user=u",
        "postgresql://host/db?password=%S3cr3t%",
        "postgresql://:@/?=&=%",
        "",
        ":",
        "@",
        "?",
        "://",
    };
    for (auto const& url : urls) {
        SCOPED_TRACE("URL '" + url + "'");
        std::string redacted;
        ASSERT_NO_THROW(redacted = sqlock::redact_url(url));
        EXPECT_FALSE(contains(redacted, secret)) << redacted;
        EXPECT_FALSE(contains(redacted, "S3 ")) << redacted;
        try {
            sqlock::store s(url, {.connect_timeout = 2s});
            ADD_FAILURE() << "accepted";
        } catch (std::exception const& e) {
            EXPECT_FALSE(contains(e.what(), secret)) << describe(e);
        }
    }
}

TEST(RedactUrl, StoreErrorsShowTheRedactedUrl) {
    std::string const port = std::to_string(closed_port());
    std::string const url = "postgresql://app:p@ss@127.0.0.1:" + port + "/db?sslpassword=k3y";
    try {
        sqlock::store s(url, {.connect_timeout = 2s});
        ADD_FAILURE() << "connected to a closed port";
    } catch (sqlock::backend_unavailable const& e) {
        EXPECT_TRUE(contains(e.what(), "postgresql://app:***@127.0.0.1:" + port + "/db?sslpassword=***")) << e.what();
        EXPECT_FALSE(contains(e.what(), "ss@")) << e.what();
        EXPECT_FALSE(contains(e.what(), "k3y")) << e.what();
    } catch (std::exception const& e) {
        ADD_FAILURE() << "expected sqlock::backend_unavailable, got " << describe(e);
    }
    try {
        sqlock::store s("mysql://app:p@ss@127.0.0.1:" + port + "/db?password=k3y", {.connect_timeout = 2s});
        ADD_FAILURE() << "accepted an unknown MySQL parameter";
    } catch (sqlock::usage_error const& e) {
        EXPECT_TRUE(contains(e.what(), "mysql://app:***@127.0.0.1:" + port + "/db?password=***")) << e.what();
        EXPECT_FALSE(contains(e.what(), "k3y")) << e.what();
    }
}

TEST(ParseUrl, TakesALibpqHostList) {
    auto parts = sqlock::detail::parse_url(
        "postgresql://u:p%2Cw@127.0.0.1:5001,db-2:5002,[::1]:5003,db-4/app?target_session_attrs=read-write");
    EXPECT_EQ(parts.hosts, (std::vector<std::string>{"127.0.0.1", "db-2", "::1", "db-4"}));
    EXPECT_EQ(parts.ports, (std::vector<unsigned>{5001, 5002, 5003, 0}));
    EXPECT_EQ(parts.host, "127.0.0.1");
    EXPECT_EQ(parts.port, 5001u);
    EXPECT_EQ(parts.password, "p,w");
    EXPECT_EQ(parts.database, "app");
    EXPECT_EQ(parts.params.at("target_session_attrs"), "read-write");
    auto one = sqlock::detail::parse_url("postgresql://u@h/app");
    EXPECT_EQ(one.hosts, std::vector<std::string>{"h"});
    EXPECT_EQ(one.ports, std::vector<unsigned>{0});
    EXPECT_EQ(sqlock::redact_url("postgresql://u:S3cr3t@h1:1,h2:2,h3:3/db?target_session_attrs=read-write"),
              "postgresql://u:***@h1:1,h2:2,h3:3/db?target_session_attrs=read-write");
}

TEST(BadUrl, AHostListWithAnEmptyOrBadEntryIsAUsageErrorNamingIt) {
    for (auto const& [url, says] : std::vector<std::pair<std::string, std::string>>{
             {"postgresql://u:p@h1:5432,,h3:5434/db", "host 2 of the host list is empty"},
             {"postgresql://u:p@h1:5432,/db", "host 2 of the host list is empty"},
             {"postgresql://u:p@,h2/db", "host 1 of the host list is empty"},
             {"postgresql://u:p@h1:5432,h2:x/db", "the port of host 2 of the host list is not a number"},
             {"postgresql://u:p@h1,h2:0/db", "the port of host 2 of the host list is not a number"},
             {"postgresql://u:p@h1,h%2C2/db", "host 2 of the host list contains an encoded ','"},
             {"mysql://u:S3cr3t@h1:3306,h2:3306/db", "a MySQL/MariaDB URL takes one host"},
         }) {
        SCOPED_TRACE(url);
        try {
            sqlock::store s(url, {.connect_timeout = 2s});
            ADD_FAILURE() << "accepted";
        } catch (sqlock::usage_error const& e) {
            EXPECT_TRUE(contains(e.what(), says)) << e.what();
            EXPECT_FALSE(contains(e.what(), "S3cr3t")) << e.what();
        } catch (std::exception const& e) {
            ADD_FAILURE() << "expected sqlock::usage_error, got " << describe(e);
        }
    }
}

TEST(Unreachable, AHostListOfClosedPortsIsBackendUnavailable) {
    std::string const p1 = std::to_string(closed_port());
    std::string const url =
        "postgresql://u:S3cr3t@127.0.0.1:" + p1 + ",127.0.0.1:" + p1 + "/db?target_session_attrs=read-write";
    try {
        sqlock::store s(url, {.connect_timeout = 2s});
        ADD_FAILURE() << "connected to closed ports";
    } catch (sqlock::backend_unavailable const& e) {
        EXPECT_TRUE(contains(e.what(), "postgresql://u:***@127.0.0.1:" + p1 + ",127.0.0.1:" + p1 + "/db")) << e.what();
        EXPECT_FALSE(contains(e.what(), "S3cr3t")) << e.what();
    } catch (std::exception const& e) {
        ADD_FAILURE() << "expected sqlock::backend_unavailable, got " << describe(e);
    }
}

// ------------------------------------------------------------------ bad URLs and options (before any I/O)

TEST(ParseUrl, PoolingIsDeclaredForPostgresql) {
    for (std::string const mode : {"session", "transaction"}) {
        auto parts = sqlock::detail::parse_url("postgresql://u:p@host/db?pooling=" + mode);
        EXPECT_EQ(parts.params.at("pooling"), mode);
    }
}

TEST(BadUrl, IsAUsageError) {
    std::vector<std::string> const bad = {
        "",
        "nonsense",
        "foo://u:p@127.0.0.1:5432/db",                      // unknown scheme
        "http://127.0.0.1/db",                              // unknown scheme
        "postgresql://",                                    // nothing
        "postgresql://u:p@/db",                             // missing host
        "mysql://u:p@/db",                                  // missing host
        "postgresql://u:p@127.0.0.1:abc/db",                // port not a number
        "mysql://u:p@127.0.0.1:5x/db",                      // port not a number
        "sqlite::memory:",                                  // in-memory: a lock nobody else can see
        "sqlite:",                                          // no path
        "sqlite://",                                        // no path
        "postgresql://u:p@127.0.0.1/db?pooling=sometimes",  // pooling: session or transaction
        "mysql://u:p@127.0.0.1/db?pooling=session",         // pooling: PostgreSQL only
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

// galera_single_writer (MySQL only): true or false, accepted and not passed on to Connector/C (which would refuse it).
TEST(MysqlUrl, GaleraSingleWriterIsTrueOrFalse) {
    std::string const base = "mysql://u:p@127.0.0.1:" + std::to_string(closed_port()) + "/db?galera_single_writer=";
    for (std::string const v : {"true", "false"}) {
        try {
            sqlock::store s(base + v, {.connect_timeout = 2s});
            ADD_FAILURE() << "connected to a closed port";
        } catch (sqlock::backend_unavailable const&) {
        } catch (std::exception const& e) {
            ADD_FAILURE() << v << ": expected sqlock::backend_unavailable (the URL accepted), got " << describe(e);
        }
    }
    for (std::string const& url : {base + "yes", base, std::string("sqlite:/tmp/x.db?galera_single_writer=true")}) {
        try {
            sqlock::store s(url, {.connect_timeout = 2s});
            ADD_FAILURE() << url << ": accepted";
        } catch (sqlock::usage_error const& e) {
            if (url.starts_with("mysql")) {
                EXPECT_TRUE(contains(e.what(), "galera_single_writer")) << e.what();
            }
        } catch (std::exception const& e) {
            ADD_FAILURE() << url << ": expected sqlock::usage_error, got " << describe(e);
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

// Opening a store on a file another connection holds for a moment waits for it
// (up to lock_wait_timeout) instead of failing at once with SQLITE_BUSY: a
// connection in WAL mode with locking_mode=EXCLUSIVE that has written keeps
// every other connection out until it closes.
TEST(SqliteUrl, OpenWaitsForAFileBusyForAMoment) {
    temp_dir dir;
    auto const file = dir.path() / "busy.db";
    { sqlock::store seed("sqlite://" + file.string(), {.create_schema = true}); }
    namespace lite = sqlite_api;  // SOCI's headers hold sqlite3.h in this namespace
    lite::sqlite3* raw = nullptr;
    ASSERT_EQ(lite::sqlite3_open(file.c_str(), &raw), SQLITE_OK);
    for (char const* sql : {"PRAGMA journal_mode = WAL", "PRAGMA locking_mode = EXCLUSIVE",
                            "CREATE TABLE IF NOT EXISTS busy_test (x INTEGER)", "INSERT INTO busy_test VALUES (1)"})
        ASSERT_EQ(lite::sqlite3_exec(raw, sql, nullptr, nullptr, nullptr), SQLITE_OK)
            << sql << ": " << lite::sqlite3_errmsg(raw);
    std::thread holder([raw] {
        std::this_thread::sleep_for(300ms);
        lite::sqlite3_close(raw);
    });
    try {
        sqlock::store db("sqlite://" + file.string(), {.lock_wait_timeout = 10s});
        EXPECT_TRUE(sqlock::table_locker(db).try_acquire("busy-open").has_value());
    } catch (std::exception const& e) {
        ADD_FAILURE() << "the store did not wait for the file: " << e.what();
    }
    holder.join();
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

// ------------------------------------------------------------------ errors

TEST(Error, MessageIsWhatWithoutThePrefix) {
    sqlock::backend_unavailable e("sqlock: cannot connect to sqlite:x.db (opening the store): busy", "5");
    EXPECT_STREQ(e.what(), "sqlock: cannot connect to sqlite:x.db (opening the store): busy");
    EXPECT_EQ(e.message(), "cannot connect to sqlite:x.db (opening the store): busy");
    EXPECT_EQ(e.code(), "5");
    sqlock::error bare("no prefix here");
    EXPECT_EQ(bare.message(), "no prefix here");
    EXPECT_STREQ(bare.what(), "no prefix here");
    sqlock::error only("sqlock: ");
    EXPECT_EQ(only.message(), "");
}

// A URL parameter name goes into the client library's connection string as is:
// one that is not a plain option name could smuggle in other options.
TEST(ParseUrl, ParameterNamesCannotInjectConnectionOptions) {
    for (std::string url : {"postgresql://u@127.0.0.1:1/db?sslmode%20host=evil", "mysql://u@127.0.0.1:1/db?a%3Db=1",
                            "postgresql://u@127.0.0.1:1/db?x'y=1"}) {
        try {
            sqlock::store s(url);
            ADD_FAILURE() << url << ": opened";
        } catch (sqlock::usage_error const& e) {
            EXPECT_NE(std::string(e.what()).find("parameter"), std::string::npos) << e.what();
        } catch (std::exception const& e) {
            ADD_FAILURE() << url << ": expected usage_error before any I/O, got " << e.what();
        }
    }
}
