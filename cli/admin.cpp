// sqlock command — list, release --force, schema.
#include "cli.hpp"

#include <sqlock/admin.hpp>
#include <sqlock/errors.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <cstdio>
#include <iostream>
#include <optional>

namespace sqlock::cli {

namespace {

/// Columns on a terminal: UTF-8 code points (wide characters count as one).
std::size_t display_width(std::string_view s) {
    return static_cast<std::size_t>(
        std::count_if(s.begin(), s.end(), [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; }));
}

/// Rows of cells in aligned columns, two spaces apart (the first row is the header), without trailing blanks.
void print_columns(std::vector<std::vector<std::string>> const& rows) {
    std::vector<std::size_t> width;
    for (auto const& r : rows) {
        if (width.size() < r.size()) width.resize(r.size());
        for (std::size_t c = 0; c < r.size(); ++c) width[c] = std::max(width[c], display_width(r[c]));
    }
    std::string out;
    for (auto const& r : rows) {
        for (std::size_t c = 0; c < r.size(); ++c) {
            out += r[c];
            if (c + 1 < r.size()) out.append(width[c] - display_width(r[c]) + 2, ' ');
        }
        while (!out.empty() && out.back() == ' ') out.pop_back();  // an empty last cell (VALUE)
        out += '\n';
    }
    std::fwrite(out.data(), 1, out.size(), stdout);
}

/// The NAME column: the user's name, and for a semaphore's permit "NAME permit N", for a reader of a
/// read-write lock "NAME shared" (the rows' own names carry U+001F and a suffix).
std::string shown_name(sqlock::lock_info const& l) {
    std::string const lock = printable(l.lock.empty() ? l.name : l.lock);
    if (l.kind == "permit") return lock + " permit " + std::to_string(l.slot);
    if (l.kind == "shared") return lock + " shared";
    if (l.kind == "lock" || l.kind.empty()) return printable(l.name);
    return printable(l.name) + " (" + printable(l.kind) + ")";  // a kind this tool does not know yet
}

/// A lease as table cells; `member` first when given. VALUE: a leader's value (sqlock elect).
std::vector<std::string> cells(sqlock::lock_info const& l, std::optional<std::string> const& member = std::nullopt) {
    std::vector<std::string> r;
    if (member) r.push_back(*member);
    for (auto&& c : {shown_name(l), printable(l.owner), std::to_string(l.token), sqlock::tools::iso8601(l.created_at),
                     sqlock::tools::iso8601(l.expires_at), human_remaining(l.remaining), printable(l.value)})
        r.push_back(c);
    return r;
}

void print_table(std::vector<sqlock::lock_info> const& locks) {
    std::vector<std::vector<std::string>> rows{
        {"NAME", "OWNER", "TOKEN", "CREATED_AT", "EXPIRES_AT", "REMAINING", "VALUE"}};
    for (auto const& l : locks) rows.push_back(cells(l));
    print_columns(rows);
}

/// The server a lock was read from, in each line of `list --json`: the lines are read one by one.
nlohmann::ordered_json server_json(sqlock::store const& db) {
    auto const s = db.server();
    return {{"flavour", std::string(to_string(s.flavour))}, {"version", s.version}};
}

std::string json_line(sqlock::lock_info const& l, nlohmann::ordered_json const& server,
                      std::optional<std::string> const& member = std::nullopt) {
    nlohmann::ordered_json j;
    if (member) j["member"] = *member;
    j["name"] = l.name;
    j["owner"] = l.owner;
    j["token"] = l.token;
    j["created_at"] = sqlock::tools::iso8601(l.created_at);
    j["expires_at"] = sqlock::tools::iso8601(l.expires_at);
    j["remaining_ms"] = std::chrono::duration_cast<std::chrono::milliseconds>(l.remaining).count();
    j["kind"] = l.kind.empty() ? std::string("lock") : l.kind;
    j["lock"] = l.lock.empty() ? l.name : l.lock;
    j["slot"] = l.kind == "permit" ? nlohmann::ordered_json(l.slot) : nlohmann::ordered_json(nullptr);
    j["value"] = l.value.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(l.value);
    j["server"] = server;
    return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

void print_json_lines(std::vector<sqlock::lock_info> const& locks, sqlock::store const& db) {
    std::string out;
    auto const server = server_json(db);
    for (auto const& l : locks) out += json_line(l, server);
    std::fwrite(out.data(), 1, out.size(), stdout);
}

void print(std::string const& text) { std::fwrite(text.data(), 1, text.size(), stdout); }

std::string plural(std::size_t n, std::string const& one, std::string const& many) {
    return std::to_string(n) + " " + (n == 1 ? one : many);
}

/// The members that did not answer, for one line: "URL: why; URL: why".
std::string failures_text(std::vector<member> const& members,
                          std::vector<std::optional<member_failure>> const& failures) {
    std::string out;
    for (std::size_t i = 0; i < members.size(); ++i)
        if (failures[i]) out += (out.empty() ? "" : "; ") + redacted_url(members[i].url) + ": " + failures[i]->message;
    return out;
}

/// list over several --db: every member's leases, then which members answered.
int list_members(list_args const& args) {
    reject_duplicate_databases(args.dbs);
    auto members = open_members(args.dbs, false);
    std::size_t const n = members.size();
    std::vector<std::vector<sqlock::lock_info>> locks(n);
    auto const failures = ask_members(members, locks, [](sqlock::store const& db) {
        auto held = sqlock::list_locks(db);
        // Expired rows nobody took over or reaped yet are free: not held, not listed.
        std::erase_if(held, [](sqlock::lock_info const& l) { return l.remaining.count() <= 0; });
        return held;
    });

    // By name, then in --db order: a majority lock's rows come together.
    struct entry {
        std::size_t member;
        sqlock::lock_info const* lock;
    };
    std::vector<entry> all;
    for (std::size_t i = 0; i < n; ++i)
        for (auto const& l : locks[i]) all.push_back({i, &l});
    std::stable_sort(all.begin(), all.end(),
                     [](entry const& a, entry const& b) { return a.lock->name < b.lock->name; });

    std::size_t answered = 0;
    int code = exit_code::ok;
    for (auto const& f : failures) {
        if (f) code = sqlock::tools::most_serious(code, f->code);
        else ++answered;
    }
    if (args.json) {
        std::string out;
        for (auto const& e : all)
            out += json_line(*e.lock, server_json(*members[e.member].store), redacted_url(members[e.member].url));
        print(out);
    } else {
        std::vector<std::vector<std::string>> rows{
            {"MEMBER", "NAME", "OWNER", "TOKEN", "CREATED_AT", "EXPIRES_AT", "REMAINING", "VALUE"}};
        for (auto const& e : all) rows.push_back(cells(*e.lock, redacted_url(members[e.member].url)));
        print_columns(rows);
        print("\n");
        std::vector<std::vector<std::string>> status{{"MEMBER", "ANSWERED"}};
        for (std::size_t i = 0; i < n; ++i)
            status.push_back(
                {redacted_url(members[i].url),
                 failures[i] ? "no: " + failures[i]->message : "yes, " + plural(locks[i].size(), "lease", "leases")});
        print_columns(status);
    }
    std::fflush(stdout);
    if (code != exit_code::ok)
        fail(code, std::to_string(n - answered) + " of " + std::to_string(n) + " databases did not answer (" +
                       failures_text(members, failures) + "): their leases are not listed");
    return exit_code::ok;
}

/// release --force over several --db: on every member, and what each said.
int release_members(release_args const& args) {
    reject_duplicate_databases(args.dbs);
    auto members = open_members(args.dbs, false);
    std::size_t const n = members.size();
    std::vector<std::optional<sqlock::lock_info>> released(n);
    auto const failures =
        ask_members(members, released, [&](sqlock::store const& db) { return sqlock::force_release(db, args.name); });
    std::string out;
    std::size_t count = 0;
    int code = exit_code::ok;
    for (std::size_t i = 0; i < n; ++i) {
        out += redacted_url(members[i].url) + ": ";
        if (failures[i]) {
            code = sqlock::tools::most_serious(code, failures[i]->code);
            out += "did not answer (" + failures[i]->message + ")\n";
        } else if (auto const& row = released[i]) {
            ++count;
            out += "released lock '" + printable(row->name) + "' held by " + printable(row->owner) + " (token " +
                   std::to_string(row->token) + ", taken " + sqlock::tools::iso8601(row->created_at) + ", " +
                   (row->remaining.count() > 0 ? "expiring in " + human_remaining(row->remaining)
                                               : std::string("already expired")) +
                   ")\n";
        } else {
            out += "no lock named '" + printable(args.name) + "'\n";
        }
    }
    print(out);
    std::fflush(stdout);
    std::size_t const failed = static_cast<std::size_t>(
        std::count_if(failures.begin(), failures.end(), [](auto const& f) { return f.has_value(); }));
    if (code != exit_code::ok)
        fail(code, "lock '" + printable(args.name) + "' released on " + std::to_string(count) + " of " +
                       std::to_string(n) + " databases; " + std::to_string(failed) + " did not answer (" +
                       failures_text(members, failures) +
                       "): release it there when it is back, or let its row expire by its TTL");
    if (count == 0)
        fail(exit_code::not_found, "no lock named '" + printable(args.name) + "' in any of the " + std::to_string(n) +
                                       " databases: nothing released");
    return exit_code::ok;
}

}  // namespace

int list_command(list_args const& args) {
    if (args.dbs.size() > 1) return list_members(args);
    auto db = resolve_database(args.dbs);
    auto store = open_existing(db);
    auto locks = sqlock::list_locks(store);
    // Expired rows nobody took over or reaped yet are free: not held, not listed.
    std::erase_if(locks, [](sqlock::lock_info const& l) { return l.remaining.count() <= 0; });
    if (args.json) print_json_lines(locks, store);
    else print_table(locks);
    std::fflush(stdout);
    return exit_code::ok;
}

int release_command(release_args const& args) {
    if (!args.force)
        fail(exit_code::usage,
             "release deletes the lock whoever holds it, so it needs --force: sqlock release --name " +
                 printable(args.name) + " --force");
    if (args.dbs.size() > 1) return release_members(args);
    auto db = resolve_database(args.dbs);
    auto store = open_existing(db);
    auto row = sqlock::force_release(store, args.name);
    if (!row)
        fail(exit_code::not_found,
             "no lock named '" + printable(args.name) + "' in " + store.url() + ": nothing released");
    std::string line = "released lock '" + printable(row->name) + "' held by " + printable(row->owner) + " (token " +
                       std::to_string(row->token) + ", taken " + sqlock::tools::iso8601(row->created_at) + ", " +
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
        if (!chosen)
            fail(exit_code::usage, "unknown engine '" + printable(args.engine) + "': use postgresql, mysql or sqlite");
    }
    // With no --db, --engine alone picks the DDL; with both they must agree.
    if (chosen && url_engine && *chosen != *url_engine && (db.explicit_db || args.apply))
        fail(exit_code::usage, "--engine " + args.engine + " does not match the database " + redacted_url(db.url) +
                                   " (" + std::string(to_string(*url_engine)) + "): drop --engine or fix --db");
    if (args.apply) {
        sqlock::store store(db.url, {.create_schema = true});
        // Again where nothing was missing: what an older schema lacks without a store refusing it
        // (the protocol record) is added too. Idempotent.
        store.create_schema();
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
