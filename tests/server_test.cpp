// sqlock tests — no server: which server a version answer names (flavour and
// version), the oldest version of each that sqlock runs on, and the features
// that need more. The answers are the ones the servers' manuals and release
// notes show; tests/flavour_suite.cpp feeds faked answers to a real store.
#include "../src/dialect/server.hpp"

#include <sqlock/errors.hpp>
#include <sqlock/store.hpp>

#include <gtest/gtest.h>

#include <string>

namespace {

using sqlock::engine;
using sqlock::server_flavour;
using sqlock::server_info;
using sqlock::detail::parse_server_answer;
using sqlock::detail::require_feature;
using sqlock::detail::require_supported;
using sqlock::detail::server_feature;

struct answer {
    engine e;
    char const* version;
    char const* comment;
    server_flavour flavour;
    int major, minor, patch;
};

// What VERSION() / @@version_comment, server_version and sqlite_version() say on the servers users run.
constexpr answer answers[] = {
    {engine::mysql, "10.11.6-MariaDB-0+deb12u1", "Debian 12", server_flavour::mariadb, 10, 11, 6},
    {engine::mysql, "10.6.18-MariaDB-log", "MariaDB Server", server_flavour::mariadb, 10, 6, 18},
    {engine::mysql, "11.4.2-MariaDB", "mariadb.org binary distribution", server_flavour::mariadb, 11, 4, 2},
    // MariaDB before 11 behind a proxy or to an old client: the 5.5.5- prefix of the handshake.
    {engine::mysql, "5.5.5-10.11.6-MariaDB", "MariaDB Server", server_flavour::mariadb, 10, 11, 6},
    // A MariaDB build that names itself in the comment only.
    {engine::mysql, "10.6.16", "MariaDB Server", server_flavour::mariadb, 10, 6, 16},
    {engine::mysql, "8.0.36", "MySQL Community Server - GPL", server_flavour::mysql, 8, 0, 36},
    {engine::mysql, "8.4.3", "MySQL Community Server - GPL", server_flavour::mysql, 8, 4, 3},
    {engine::mysql, "8.0.36-28", "Percona Server (GPL), Release 28, Revision 47601f19", server_flavour::mysql, 8, 0,
     36},
    {engine::mysql, "8.0.35", "Source distribution", server_flavour::mysql, 8, 0, 35},
    {engine::mysql, "5.7.44-log", "MySQL Community Server (GPL)", server_flavour::mysql, 5, 7, 44},
    {engine::postgresql, "15.8 (Debian 15.8-0+deb12u1)", "", server_flavour::postgresql, 15, 8, 0},
    {engine::postgresql, "17.2", "", server_flavour::postgresql, 17, 2, 0},
    {engine::postgresql, "11.22", "", server_flavour::postgresql, 11, 22, 0},
    {engine::sqlite, "3.40.1", "", server_flavour::sqlite, 3, 40, 1},
};

TEST(ServerAnswer, NamesTheFlavourAndVersion) {
    for (auto const& a : answers) {
        SCOPED_TRACE(std::string(a.version) + " | " + a.comment);
        auto const s = parse_server_answer(a.e, a.version, a.comment);
        EXPECT_EQ(s.flavour, a.flavour) << sqlock::to_string(s.flavour);
        EXPECT_EQ(s.major, a.major);
        EXPECT_EQ(s.minor, a.minor);
        EXPECT_EQ(s.patch, a.patch);
        EXPECT_EQ(s.version, a.version) << "the server's own words are kept";
        EXPECT_EQ(s.comment, a.comment);
    }
}

TEST(ServerAnswer, AnAnswerWithoutNumbersReadsAsVersionZero) {
    auto const s = parse_server_answer(engine::mysql, "unknown", "");
    EXPECT_EQ(s.flavour, server_flavour::mysql);
    EXPECT_EQ(s.major, 0);
    EXPECT_THROW(require_supported(s), sqlock::usage_error) << "version 0 is older than any minimum";
}

std::string refusal(server_info const& s) {
    try {
        require_supported(s);
    } catch (sqlock::usage_error const& e) {
        return e.what();
    }
    return "";
}

// The minimum of each flavour is what the code uses (src/dialect/server.hpp): one below it is refused, naming
// the server found, what needs the newer version and the version to upgrade to; the minimum itself opens.
TEST(ServerAnswer, TheOldestSupportedVersionIsTheFirstThatOpens) {
    struct edge {
        engine e;
        char const* below;
        char const* comment;
        char const* at;
        char const* names;  // what needs the minimum
        char const* wanted;
    };
    constexpr edge edges[] = {
        {engine::mysql, "10.5.23-MariaDB", "MariaDB Server", "10.6.0-MariaDB", "SKIP LOCKED", "MariaDB 10.6"},
        {engine::mysql, "8.0.10", "MySQL Community Server - GPL", "8.0.11", "SKIP LOCKED", "MySQL 8.0.11"},
        {engine::mysql, "5.7.44", "MySQL Community Server (GPL)", "8.0.11", "SKIP LOCKED", "MySQL 8.0.11"},
        {engine::postgresql, "11.22", "", "12.0", "tcp_user_timeout", "PostgreSQL 12.0"},
        {engine::sqlite, "3.34.1", "", "3.35.0", "RETURNING", "SQLite 3.35"},
    };
    for (auto const& e : edges) {
        SCOPED_TRACE(e.below);
        auto const message = refusal(parse_server_answer(e.e, e.below, e.comment));
        ASSERT_FALSE(message.empty()) << "not refused";
        EXPECT_NE(message.find(std::string("it says '") + e.below + "'"), std::string::npos) << message;
        EXPECT_NE(message.find(e.names), std::string::npos) << message;
        EXPECT_NE(message.find("upgrade the server to " + std::string(e.wanted)), std::string::npos) << message;
        EXPECT_EQ(refusal(parse_server_answer(e.e, e.at, e.comment)), "") << "the minimum itself is refused";
    }
    for (auto const& a : answers) {
        bool const too_old = std::string(a.version).starts_with("5.7.") || std::string(a.version) == "11.22";
        EXPECT_EQ(refusal(parse_server_answer(a.e, a.version, a.comment)).empty(), !too_old) << a.version;
    }
}

// CREATE PROCEDURE IF NOT EXISTS is MySQL 8.0.29's: before it, the schema is not created, and the message says
// how to create it by hand. MariaDB has it (10.1.3) and every other engine has no procedures.
TEST(ServerAnswer, SchemaCreationOnMysqlNeeds8029) {
    auto const old = parse_server_answer(engine::mysql, "8.0.28", "MySQL Community Server - GPL");
    try {
        require_feature(old, server_feature::create_schema);
        ADD_FAILURE() << "create_schema on MySQL 8.0.28 was not refused";
    } catch (sqlock::usage_error const& e) {
        std::string const m = e.what();
        EXPECT_NE(m.find("CREATE PROCEDURE IF NOT EXISTS"), std::string::npos) << m;
        EXPECT_NE(m.find("MySQL 8.0.28"), std::string::npos) << m;
        EXPECT_NE(m.find("removing 'IF NOT EXISTS'"), std::string::npos) << m;
        EXPECT_NE(m.find("8.0.29 or later"), std::string::npos) << m;
    }
    for (auto const* v : {"8.0.29", "8.4.3", "9.1.0"})
        EXPECT_NO_THROW(require_feature(parse_server_answer(engine::mysql, v, "MySQL Community Server - GPL"),
                                        server_feature::create_schema))
            << v;
    EXPECT_NO_THROW(
        require_feature(parse_server_answer(engine::mysql, "10.6.0-MariaDB", ""), server_feature::create_schema));
}

}  // namespace
