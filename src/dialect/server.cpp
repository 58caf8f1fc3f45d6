// Which server is behind a store, and what each flavour and version can do (server.hpp).
#include "dialect/server.hpp"

#include <sqlock/errors.hpp>

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdlib>
#include <string_view>
#include <tuple>

namespace sqlock {

std::string_view to_string(server_flavour f) noexcept {
    switch (f) {
        case server_flavour::postgresql: return "postgresql";
        case server_flavour::mariadb: return "mariadb";
        case server_flavour::mysql: return "mysql";
        case server_flavour::sqlite: return "sqlite";
    }
    return "unknown";
}

}  // namespace sqlock

namespace sqlock::detail {
namespace {

bool contains_mariadb(std::string_view text) {
    std::string lower(text);
    std::transform(lower.begin(), lower.end(), lower.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    return lower.find("mariadb") != std::string::npos;
}

// The first "major[.minor[.patch]]" of `text`, from position `at`.
void read_numbers(std::string_view text, std::size_t at, server_info& s) {
    std::array<int*, 3> parts{&s.major, &s.minor, &s.patch};
    std::size_t i = at;
    while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i])) == 0) ++i;
    for (int* part : parts) {
        if (i >= text.size() || std::isdigit(static_cast<unsigned char>(text[i])) == 0) return;
        int value = 0;
        while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i])) != 0 && value < 100000)
            value = value * 10 + (text[i++] - '0');
        *part = value;
        if (i >= text.size() || text[i] != '.') return;
        ++i;
    }
}

// The oldest version of each flavour sqlock runs on, and what needs it.
struct minimum {
    int major, minor, patch;
    char const* needs;
};

minimum minimum_of(server_flavour f) {
    switch (f) {
        case server_flavour::postgresql: return {12, 0, 0, "tcp_user_timeout, which the row lock sets"};
        case server_flavour::mariadb:
            return {10, 6, 0, "SELECT ... FOR UPDATE SKIP LOCKED, the row lock's try_acquire"};
        case server_flavour::mysql:
            return {8, 0, 11,
                    "SELECT ... FOR UPDATE SKIP LOCKED, the row lock's try_acquire (8.0.11 is 8.0's first GA)"};
        case server_flavour::sqlite: return {3, 35, 0, "RETURNING, which the reaper and the operator's calls use"};
    }
    return {0, 0, 0, ""};
}

bool older(server_info const& s, int major, int minor, int patch) {
    return std::tie(s.major, s.minor, s.patch) < std::tie(major, minor, patch);
}

std::string version_text(int major, int minor, int patch) {
    return std::to_string(major) + "." + std::to_string(minor) + (patch != 0 ? "." + std::to_string(patch) : "");
}

}  // namespace

server_info parse_server_answer(sqlock::engine e, std::string const& version, std::string const& comment) {
    server_info s;
    s.version = version;
    s.comment = comment;
    switch (e) {
        case engine::postgresql: s.flavour = server_flavour::postgresql; break;
        case engine::sqlite: s.flavour = server_flavour::sqlite; break;
        case engine::mysql:
            s.flavour = contains_mariadb(version) || contains_mariadb(comment) ? server_flavour::mariadb
                                                                               : server_flavour::mysql;
            break;
    }
    std::size_t at = 0;
    // MariaDB before 11 says "5.5.5-10.11.6-MariaDB" to clients that speak the old handshake
    // (a proxy in between, a replication client): the real version follows the prefix.
    if (s.flavour == server_flavour::mariadb && version.starts_with("5.5.5-")) at = 6;
    read_numbers(version, at, s);
    return s;
}

void fake_server_answer(sqlock::engine e, std::string& version, std::string& comment) {
#ifdef SQLOCK_FAILPOINTS
    char const* spec = std::getenv("SQLOCK_TEST_SERVER_ANSWER");
    std::string_view rest = spec != nullptr ? spec : "";
    std::string const key = std::string(to_string(e)) + "=";
    while (!rest.empty()) {
        auto const item = rest.substr(0, rest.find(';'));
        rest.remove_prefix(std::min(rest.size(), item.size() + 1));
        if (!item.starts_with(key)) continue;
        auto const answer = item.substr(key.size());
        auto const bar = answer.find('|');
        version = std::string(answer.substr(0, bar));
        comment = bar == std::string_view::npos ? std::string() : std::string(answer.substr(bar + 1));
    }
#else
    (void)e, (void)version, (void)comment;
#endif
}

std::string describe(server_info const& s) {
    std::string name;
    switch (s.flavour) {
        case server_flavour::postgresql: name = "PostgreSQL"; break;
        case server_flavour::mariadb: name = "MariaDB"; break;
        case server_flavour::mysql: name = "MySQL"; break;
        case server_flavour::sqlite: name = "SQLite"; break;
    }
    name += " " + version_text(s.major, s.minor, s.patch);
    if (!s.comment.empty()) name += " (" + s.comment + ")";
    return name;
}

void require_supported(server_info const& s) {
    auto const m = minimum_of(s.flavour);
    if (!older(s, m.major, m.minor, m.patch)) return;
    std::string const wanted = describe({.flavour = s.flavour, .major = m.major, .minor = m.minor, .patch = m.patch});
    throw usage_error("sqlock: the server is " + describe(s) + " (it says '" + s.version + "'), older than " + wanted +
                      ", the oldest sqlock runs on (" + m.needs + "): upgrade the server to " + wanted +
                      " or later (docs/table-lock.md lists what needs which version)");
}

void require_feature(server_info const& s, server_feature f) {
    switch (f) {
        case server_feature::create_schema:
            if (s.flavour == server_flavour::mysql && older(s, 8, 0, 29))
                throw usage_error(
                    "sqlock: creating the schema needs CREATE PROCEDURE IF NOT EXISTS, which MySQL has from 8.0.29 on, "
                    "and the server is " +
                    describe(s) +
                    ": apply schema/mysql.sql (sqlock schema --engine mysql prints it) with the mysql client after removing "
                    "'IF NOT EXISTS' from its three CREATE PROCEDURE statements, then open the store without "
                    "create_schema; or upgrade the server to MySQL 8.0.29 or later");
            return;
    }
}

}  // namespace sqlock::detail
