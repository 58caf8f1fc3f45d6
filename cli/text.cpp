// sqlock command — URLs, durations, times and messages.
#include "cli.hpp"
#include "duration.hpp"  // tools/

#include <sqlock/errors.hpp>
#include <sqlock/store.hpp>

#include <cstdio>
#include <cstdlib>
#include <filesystem>

namespace sqlock::cli {

namespace {

int hex_value(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

}  // namespace

database resolve_database(std::vector<std::string> const& given) {
    if (!given.empty()) return {given.front(), true};
    if (char const* env = std::getenv("SQLOCK_DB"); env != nullptr && *env != '\0') return {env, false};
    return {std::string(default_url), false};
}

std::optional<sqlock::engine> engine_of_url(std::string_view url) {
    auto colon = url.find(':');
    if (colon == std::string_view::npos) return std::nullopt;
    auto scheme = url.substr(0, colon);
    if (scheme == "sqlite") return engine::sqlite;
    if (scheme == "postgresql" || scheme == "postgres") return engine::postgresql;
    if (scheme == "mysql" || scheme == "mariadb") return engine::mysql;
    return std::nullopt;
}

std::optional<std::string> sqlite_file_of_url(std::string_view url) {
    if (!url.starts_with("sqlite:")) return std::nullopt;
    auto rest = url.substr(7);
    if (auto q = rest.find('?'); q != std::string_view::npos) rest = rest.substr(0, q);
    if (rest.starts_with("//")) rest.remove_prefix(2);
    std::string out;
    for (std::size_t i = 0; i < rest.size(); ++i) {
        int hi = rest[i] == '%' && i + 2 < rest.size() ? hex_value(rest[i + 1]) : -1;
        int lo = hi >= 0 ? hex_value(rest[i + 2]) : -1;
        if (hi >= 0 && lo >= 0) {
            out += static_cast<char>(hi * 16 + lo);
            i += 2;
        } else {
            out += rest[i];
        }
    }
    return out;
}

std::optional<sqlock::engine> engine_from_name(std::string_view name) {
    if (name == "postgresql") return engine::postgresql;
    if (name == "mysql") return engine::mysql;
    if (name == "sqlite") return engine::sqlite;
    return std::nullopt;
}

std::chrono::milliseconds parse_duration(std::string_view what, std::string_view text) {
    std::chrono::milliseconds d{};
    try {
        d = sqlock::tools::parse_duration(text);  // the same forms as sqlock-reaper's
    } catch (sqlock::usage_error const& e) {
        fail(exit_code::usage, std::string(what) + ": " + e.what());
    }
    // At most a year: a deadline that far on the steady clock stays representable.
    if (d > std::chrono::days(365))
        fail(exit_code::usage, std::string(what) + " '" + printable(text) +
                                   "' is longer than a year: write it like 250ms, 30s, 5m or 1h");
    return d;
}

std::string human_remaining(std::chrono::microseconds d) {
    auto ms = d.count() / 1000;
    if (d.count() <= 0) return "expired";
    char buf[64];
    if (ms < 1000) {
        std::snprintf(buf, sizeof buf, "%lldms", static_cast<long long>(ms));
    } else if (ms < 60'000) {
        std::snprintf(buf, sizeof buf, "%lld.%llds", static_cast<long long>(ms / 1000),
                      static_cast<long long>(ms % 1000 / 100));
    } else if (ms < 3'600'000) {
        std::snprintf(buf, sizeof buf, "%lldm%02llds", static_cast<long long>(ms / 60'000),
                      static_cast<long long>(ms % 60'000 / 1000));
    } else if (ms < 86'400'000) {
        std::snprintf(buf, sizeof buf, "%lldh%02lldm", static_cast<long long>(ms / 3'600'000),
                      static_cast<long long>(ms % 3'600'000 / 60'000));
    } else {
        std::snprintf(buf, sizeof buf, "%lldd%02lldh", static_cast<long long>(ms / 86'400'000),
                      static_cast<long long>(ms % 86'400'000 / 3'600'000));
    }
    return buf;
}

std::string printable(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    for (char ch : s) {
        auto c = static_cast<unsigned char>(ch);
        if (c == '\n') out += "\\n";
        else if (c == '\t') out += "\\t";
        else if (c == '\r') out += "\\r";
        else if (c < 0x20 || c == 0x7f) {
            char buf[8];
            std::snprintf(buf, sizeof buf, "\\x%02x", c);
            out += buf;
        } else {
            out += ch;
        }
    }
    return out;
}

void say(std::string_view message) { sqlock::tools::print_error("sqlock", message); }

exit_error schema_missing_error(std::string_view url) {
    return {exit_code::config, "the sqlock lock tables are missing in " + sqlock::redact_url(url) +
                                   ": create them with `sqlock schema --apply` (with the same --db), or ask the "
                                   "database's owner to apply the DDL that `sqlock schema` prints"};
}

sqlock::store open_existing(database const& db, std::chrono::milliseconds connect_timeout) {
    if (auto file = sqlite_file_of_url(db.url)) {
        std::error_code ec;
        if (!file->empty() && !std::filesystem::exists(*file, ec) && !ec)
            fail(exit_code::config, "there is no lock database at " + sqlock::redact_url(db.url) + " (no file '" +
                                        printable(*file) +
                                        "'): check the directory or --db; `sqlock run` or `sqlock schema "
                                        "--apply` creates it");
    }
    try {
        return sqlock::store(db.url, {.connect_timeout = connect_timeout});
    } catch (sqlock::schema_missing const&) {
        throw schema_missing_error(db.url);
    }
}

std::string redacted_url(std::string_view url) { return sqlock::redact_url(url); }

}  // namespace sqlock::cli
