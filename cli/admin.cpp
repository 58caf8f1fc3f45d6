// sqlock command — list, release --force, schema.
#include "cli.hpp"

#include <sqlock/admin.hpp>
#include <sqlock/errors.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <cstdio>
#include <iostream>

namespace sqlock::cli {

namespace {

/// Columns on a terminal: UTF-8 code points (wide characters count as one).
std::size_t display_width(std::string_view s) {
    return static_cast<std::size_t>(
        std::count_if(s.begin(), s.end(), [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; }));
}

void print_table(std::vector<sqlock::lock_info> const& locks) {
    using row = std::array<std::string, 6>;
    std::vector<row> rows{{"NAME", "OWNER", "TOKEN", "CREATED_AT", "EXPIRES_AT", "REMAINING"}};
    for (auto const& l : locks)
        rows.push_back({printable(l.name), printable(l.owner), std::to_string(l.token), iso_utc(l.created_at),
                        iso_utc(l.expires_at), human_remaining(l.remaining)});
    std::array<std::size_t, 6> width{};
    for (auto const& r : rows)
        for (std::size_t c = 0; c < r.size(); ++c) width[c] = std::max(width[c], display_width(r[c]));
    std::string out;
    for (auto const& r : rows) {
        for (std::size_t c = 0; c < r.size(); ++c) {
            out += r[c];
            if (c + 1 < r.size()) out.append(width[c] - display_width(r[c]) + 2, ' ');
        }
        out += '\n';
    }
    std::fwrite(out.data(), 1, out.size(), stdout);
}

void print_json_lines(std::vector<sqlock::lock_info> const& locks) {
    std::string out;
    for (auto const& l : locks) {
        nlohmann::ordered_json j;
        j["name"] = l.name;
        j["owner"] = l.owner;
        j["token"] = l.token;
        j["created_at"] = iso_utc(l.created_at);
        j["expires_at"] = iso_utc(l.expires_at);
        j["remaining_ms"] = std::chrono::duration_cast<std::chrono::milliseconds>(l.remaining).count();
        out += j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
        out += '\n';
    }
    std::fwrite(out.data(), 1, out.size(), stdout);
}

}  // namespace

int list_command(list_args const& args) {
    auto db = resolve_database(args.dbs);
    auto store = open_existing(db);
    auto locks = sqlock::list_locks(store);
    // Expired rows nobody took over or reaped yet are free: not held, not listed.
    std::erase_if(locks, [](sqlock::lock_info const& l) { return l.remaining.count() <= 0; });
    if (args.json)
        print_json_lines(locks);
    else
        print_table(locks);
    std::fflush(stdout);
    return exit_code::ok;
}

int release_command(release_args const& args) {
    if (!args.force)
        fail(exit_code::usage, "release deletes the lock whoever holds it, so it needs --force: sqlock release --name " +
                                   printable(args.name) + " --force");
    auto db = resolve_database(args.dbs);
    auto store = open_existing(db);
    auto row = sqlock::force_release(store, args.name);
    if (!row)
        fail(exit_code::not_found, "no lock named '" + printable(args.name) + "' in " + store.url() + ": nothing released");
    std::string line = "released lock '" + printable(row->name) + "' held by " + printable(row->owner) + " (token " +
                       std::to_string(row->token) + ", taken " + iso_utc(row->created_at) + ", " +
                       (row->remaining.count() > 0 ? "expiring in " + human_remaining(row->remaining)
                                                   : std::string("already expired")) +
                       ")\n";
    std::fwrite(line.data(), 1, line.size(), stdout);
    std::fflush(stdout);
    return exit_code::ok;
}

int schema_command(schema_args const& args) {
    auto db = resolve_database(args.dbs);
    auto url_engine = engine_of_url(db.url);
    std::optional<sqlock::engine> chosen;
    if (!args.engine.empty()) {
        chosen = engine_from_name(args.engine);
        if (!chosen) fail(exit_code::usage, "unknown engine '" + printable(args.engine) + "': use postgresql, mysql or sqlite");
    }
    // With no --db, --engine alone picks the DDL; with both they must agree.
    if (chosen && url_engine && *chosen != *url_engine && (db.explicit_db || args.apply))
        fail(exit_code::usage, "--engine " + args.engine + " does not match the database " + redacted_url(db.url) +
                                   " (" + std::string(to_string(*url_engine)) + "): drop --engine or fix --db");
    if (args.apply) {
        auto store = open_store(db.url, {.create_schema = true});
        std::string line = "the sqlock lock tables are in place in " + store.url() + "\n";
        std::fwrite(line.data(), 1, line.size(), stdout);
        std::fflush(stdout);
        return exit_code::ok;
    }
    if (!chosen) {
        if (!url_engine)
            fail(exit_code::usage, "cannot tell the engine of '" + redacted_url(db.url) +
                                       "': give --engine postgresql, mysql or sqlite, or a URL starting with "
                                       "postgresql://, mysql:// or sqlite:");
        chosen = url_engine;
    }
    auto ddl = sqlock::schema_sql(*chosen);
    if (!ddl.empty() && ddl.back() != '\n') ddl += '\n';
    std::fwrite(ddl.data(), 1, ddl.size(), stdout);
    std::fflush(stdout);
    return exit_code::ok;
}

}  // namespace sqlock::cli
