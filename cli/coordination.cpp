// sqlock command — elect (run a command while leader), leader (show or follow
// the leader of an election), semaphore --forget (issue 22).
#include "cli.hpp"
#include "supervisor.hpp"

#include <sqlock/coordination.hpp>
#include <sqlock/errors.hpp>
#include <sqlock/locker.hpp>

#include <nlohmann/json.hpp>

#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <optional>

namespace sqlock::cli {

namespace {

using std::chrono::milliseconds;

void print(std::string const& text) {
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
}

/// The default value of `elect`: HOST:PID.
std::string default_value() {
    char host[256] = {};
    if (::gethostname(host, sizeof host - 1) != 0 || host[0] == '\0') std::strcpy(host, "unknown-host");
    return std::string(host) + ":" + std::to_string(::getpid());
}

/// elect, leader and semaphore take one --db: the library's coordination works on one database.
void one_database(std::vector<std::string> const& dbs, std::string_view command) {
    if (dbs.size() > 1)
        fail(exit_code::usage, std::string(command) +
                                   " takes one --db: elections and semaphores live in one database, not in the "
                                   "members of a majority");
}

/// The store `elect` campaigns in: on SQLite the file and its tables are created, as run does.
sqlock::store open_for_run(database const& db) {
    bool const sqlite = engine_of_url(db.url) == sqlock::engine::sqlite;
    try {
        return sqlock::store(db.url, sqlock::store_options{.pool_size = 4, .create_schema = sqlite});
    } catch (sqlock::schema_missing const&) {
        throw schema_missing_error(db.url);
    }
}

std::string leader_text(std::optional<sqlock::leader_info> const& l) {
    if (!l) return "no leader\n";
    return "leader " + printable(l->value) + " (term " + std::to_string(l->term) + ", owner " + printable(l->owner) +
           ", elected " + sqlock::tools::iso8601(l->elected_at) + ", expires " + sqlock::tools::iso8601(l->expires_at) +
           ")\n";
}

std::string leader_json(std::string const& name, std::optional<sqlock::leader_info> const& l) {
    nlohmann::ordered_json j;
    j["name"] = name;
    j["leader"] = l.has_value();
    if (l) {
        j["value"] = l->value;
        j["owner"] = l->owner;
        j["term"] = l->term;
        j["elected_at"] = sqlock::tools::iso8601(l->elected_at);
        j["expires_at"] = sqlock::tools::iso8601(l->expires_at);
    }
    return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

}  // namespace

int elect_command(elect_args const& args) {
    if (args.command.empty())
        fail(exit_code::usage, "elect needs a command after `--`: sqlock elect --name NAME -- COMMAND [ARG]...");
    one_database(args.dbs, "elect");
    auto const ttl = parse_duration("--ttl", args.ttl);
    std::optional<milliseconds> wait;  // empty: until elected
    if (!args.wait.empty()) {
        if (args.repeat) fail(exit_code::usage, "--repeat campaigns until a signal stops it: it takes no --wait");
        wait = parse_duration("--wait", args.wait);
    }
    std::string const value = args.value_given ? args.value : default_value();
    if (value.empty())
        fail(exit_code::usage,
             "--value must not be empty: it is what `sqlock leader` shows for this leader (default "
             "HOST:PID)");
    auto db = resolve_database(args.dbs);

    supervisor sup;
    auto store = open_for_run(db);
    auto locker = sqlock::table_locker(store, {.ttl = ttl, .auto_renew = true, .on_event = sup.on_event()});
    sqlock::election election(locker);

    for (;;) {
        std::optional<sqlock::leadership> lead;
        int const sig = sup.while_taking([&](std::stop_token cancel) {
            if (wait && wait->count() == 0) {
                lead = election.try_campaign(args.name, value);
                return lead.has_value();
            }
            try {
                if (wait) {
                    lead.emplace(election.campaign(args.name, value, *wait, cancel));
                } else {
                    // Until elected: campaigns of a day each (a deadline of "never" is no time point).
                    while (!lead) {
                        try {
                            lead.emplace(election.campaign(args.name, value, std::chrono::hours(24), cancel));
                        } catch (sqlock::timeout const&) {}
                    }
                }
            } catch (sqlock::timeout const&) {}
            return lead.has_value();
        });
        if (sig != 0) {
            if (lead) lead->resign();
            if (args.repeat) return exit_code::ok;  // the normal way to stop a service that campaigns
            fail(128 + sig, "interrupted by signal " + std::to_string(sig) + " (" + strsignal(sig) +
                                ") while campaigning for '" + printable(args.name) + "'; COMMAND not started");
        }
        if (!lead) return exit_code::conflict;  // not elected within --wait: as a busy lock, silently

        auto const term = lead->term();
        std::string const what = "leadership of '" + printable(args.name) + "' (term " + std::to_string(term) + ")";
        auto const out = sup.run(args.command, lease_variables(args.name, lead->lease()), lead->lease(), ttl, what,
                                 args.repeat, "campaigning again once they are gone");
        if (!args.repeat || out.signalled) return out.code;
        if (out.code == exit_code::cannot_execute || out.code == exit_code::command_not_found) return out.code;
        if (!out.lost)
            say("COMMAND exited (code " + std::to_string(out.code) + ") and " + what +
                " was resigned; campaigning again");
    }
}

int leader_command(leader_args const& args) {
    one_database(args.dbs, "leader");
    auto db = resolve_database(args.dbs);
    std::optional<stop_on_signals> stop;
    if (args.watch) stop.emplace();  // before the store's threads: they inherit the blocked signals
    auto store = open_existing(db);
    auto locker = sqlock::table_locker(store);
    sqlock::election election(locker);

    auto show = [&](std::optional<sqlock::leader_info> const& l) {
        print(args.json ? leader_json(args.name, l) : leader_text(l));
    };
    if (!args.watch) {
        auto const l = election.leader(args.name);
        show(l);
        return l ? exit_code::ok : exit_code::not_found;
    }
    election.observe(args.name, show, stop->token());
    return exit_code::ok;
}

int semaphore_command(semaphore_args const& args) {
    if (!args.forget)
        fail(exit_code::usage, "semaphore needs --forget: sqlock semaphore --name " + printable(args.name) +
                                   " --forget removes its stored number of permits");
    one_database(args.dbs, "semaphore");
    auto db = resolve_database(args.dbs);
    auto store = open_existing(db);
    if (!sqlock::forget_semaphore(store, args.name))
        fail(exit_code::not_found,
             "no semaphore named '" + printable(args.name) + "' in " + store.url() + ": nothing forgotten");
    print("forgot semaphore '" + printable(args.name) + "': the next `sqlock run --limit N --name " +
          printable(args.name) + "` sets its number of permits again\n");
    return exit_code::ok;
}

}  // namespace sqlock::cli
