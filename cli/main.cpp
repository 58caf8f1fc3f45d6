// sqlock — run a command under a lock kept in a SQL database; list and break locks; print the schema.
//
//   sqlock run     [--db URL]... --name NAME [--ttl DUR] [--wait DUR] [--strategy table|row]
//                  [--member-timeout DUR] [--conflict-exit-code N] [--limit N | --shared] -- COMMAND [ARG]...
//   sqlock elect   [--db URL] --name NAME [--value TEXT] [--ttl DUR] [--wait DUR | --repeat] -- COMMAND [ARG]...
//   sqlock leader  [--db URL] --name NAME [--json] [--watch]
//   sqlock semaphore [--db URL] --name NAME --forget
//   sqlock list    [--db URL]... [--json]
//   sqlock release [--db URL]... --name NAME --force
//
// Several --db: majority mode over independent databases (sqlock::majority_locker).
//   sqlock schema  [--db URL] [--engine postgresql|mysql|sqlite] [--apply]
//   sqlock doctor  [--db URL]... [--json]
//
// Exit codes and behaviour: docs/cli.md.
#include "cli.hpp"

#include <sqlock/errors.hpp>

#include <CLI/CLI.hpp>

#include <algorithm>
#include <iostream>

namespace {

using namespace sqlock::cli;

constexpr char const* db_help =
    "database URL: postgresql://user:pass@host:port/db, mysql://user:pass@host:port/db, sqlite:path.db "
    "or sqlite:///abs/path.db (default: $SQLOCK_DB, else sqlite:sqlock.db in the current directory)";

constexpr char const* dbs_help =
    "database URL: postgresql://user:pass@host:port/db, mysql://user:pass@host:port/db, sqlite:path.db "
    "or sqlite:///abs/path.db (default: $SQLOCK_DB, else sqlite:sqlock.db in the current directory); "
    "repeat it for the members of a majority (each a different database)";

constexpr char const* exit_codes_help =
    "Exit codes: COMMAND's own (128+N when killed by signal N); 75 lock busy (--conflict-exit-code); "
    "76 lock lost (or about to be) while COMMAND ran, or before it started (COMMAND not started); 64 usage; 69 database unreachable or misconfigured "
    "(several --db: too few reachable for a majority; list/release: a database did not answer); "
    "78 lock tables missing; 126/127 COMMAND not executable / not found; "
    "leader: 0 a leader, 1 none; semaphore --forget: 1 no such semaphore.";

int dispatch(int argc, char** argv) {
    // Everything after the first `--` is run's COMMAND; CLI11 sees only what is before it.
    std::vector<std::string> before;
    std::vector<std::string> command;
    bool separator = false;
    for (int i = 1; i < argc; ++i) {
        std::string a = argv[i];
        if (!separator && a == "--") {
            separator = true;
            continue;
        }
        (separator ? command : before).push_back(std::move(a));
    }

    CLI::App app{"sqlock: run a command under a lock kept in a SQL database (PostgreSQL, MariaDB/MySQL, SQLite)",
                 "sqlock"};
    app.set_version_flag("--version", sqlock::tools::version_text("sqlock"));
    app.require_subcommand(1);
    app.footer(exit_codes_help);

    run_args run;
    auto* run_cmd = app.add_subcommand(
        "run", "Run COMMAND while holding the lock NAME: sqlock run --name NAME [OPTIONS] -- COMMAND [ARG]...");
    run_cmd->add_option("--db", run.dbs, dbs_help)->type_name("URL");
    run_cmd->add_option("--name", run.name, "lock name (1..255 bytes of UTF-8)")->required();
    run_cmd->add_option("--ttl", run.ttl, "lease length, renewed at a third of it (250ms, 30s, 5m, 1h)")
        ->type_name("DUR")
        ->capture_default_str();
    run_cmd->add_option("--wait", run.wait, "how long to wait for a busy lock; 0 tries once")
        ->type_name("DUR")
        ->capture_default_str();
    run_cmd->add_option("--strategy", run.strategy, "table (a lock row) or row (SELECT ... FOR UPDATE)")
        ->check(CLI::IsMember({"table", "row"}))
        ->capture_default_str();
    run_cmd
        ->add_option("--member-timeout", run.member_timeout,
                     "several --db: how long each database may take to answer in each round (default: TTL/10)")
        ->type_name("DUR");
    run_cmd->add_option("--conflict-exit-code", run.conflict_exit_code, "exit code when the lock is busy")
        ->check(CLI::Range(0, 255))
        ->type_name("N")
        ->capture_default_str();
    run_cmd
        ->add_option("--limit", run.limit,
                     "hold one of N permits of NAME (a counting semaphore: at most N runs at once); every run of "
                     "NAME must give the same N")
        ->type_name("N");
    run_cmd->add_flag("--shared", run.shared,
                      "hold a shared (read) lease of NAME: runs --shared overlap, a plain run of NAME excludes them");
    run_cmd
        ->add_option("--metrics-textfile", run.metrics_textfile,
                     "when run ends, write its outcome, duration and lock wait to PATH (a .prom file) in the "
                     "Prometheus text format, for node-exporter's textfile collector (written aside, then renamed)")
        ->type_name("PATH");
    run_cmd->allow_extras();  // a COMMAND without `--` gets a clear message below
    run_cmd->footer(
        "COMMAND runs with SQLOCK_NAME, SQLOCK_OWNER and SQLOCK_TOKEN (the fencing token) added to its environment "
        "while the lock is renewed every TTL/3; the lock is released when COMMAND exits. SIGINT, SIGTERM and SIGHUP "
        "sent to sqlock are forwarded to every process of COMMAND. If the lock is lost, or no renewal has succeeded "
        "and the lease nears its end (a renewal fails or hangs), COMMAND and all its processes get SIGTERM, then "
        "SIGKILL min(5s, TTL/4) later, and are dead min(1s, TTL/10) before the lease's safe deadline; so they are "
        "if sqlock itself dies or stops. "
        "On SQLite the file and its tables are created if missing.\n\n"
        "Majority mode: with several --db (3 or 5 recommended, each a different database; engines may be mixed) "
        "the lock is held while a majority of them (N/2+1) grant and renew it, asked in parallel, each bounded "
        "by --member-timeout; SQLOCK_TOKEN is the majority's fencing token. With an odd number of databases one "
        "may be unreachable when sqlock starts (it says so on stderr); with an even number none may. A member's "
        "database and tables are never created by run: `sqlock schema --apply --db URL` creates them. "
        "See docs/cli.md.\n\n"
        "--limit N: at most N runs of NAME at once, each holding one permit (SQLOCK_PERMIT: 0..N-1, SQLOCK_TOKEN its "
        "token); N is stored with NAME and a run giving another N exits 64 (`sqlock semaphore --forget`). "
        "--shared: runs --shared of NAME overlap; a plain run of NAME (one --db, table lock) is the write lock: it "
        "waits for them, and new runs --shared wait behind it. Both take one --db.\n\n" +
        std::string(exit_codes_help));

    elect_args elect;
    auto* elect_cmd = app.add_subcommand(
        "elect", "Campaign to lead NAME and run COMMAND while leader: sqlock elect --name NAME [OPTIONS] -- COMMAND");
    elect_cmd->add_option("--db", elect.dbs, db_help)->type_name("URL");
    elect_cmd->add_option("--name", elect.name, "election name (1..255 bytes of UTF-8)")->required();
    auto* value_opt =
        elect_cmd->add_option("--value", elect.value,
                              "what `sqlock leader` shows for this leader, e.g. an address (default: HOST:PID)");
    value_opt->type_name("TEXT");
    elect_cmd->add_option("--ttl", elect.ttl, "lease length, renewed at a third of it")
        ->type_name("DUR")
        ->capture_default_str();
    elect_cmd->add_option("--wait", elect.wait, "how long to campaign (default: until elected); 0 tries once")
        ->type_name("DUR");
    elect_cmd->add_flag("--repeat", elect.repeat,
                        "campaign again after COMMAND exits or leadership is lost, until SIGINT/SIGTERM/SIGHUP");
    elect_cmd->allow_extras();
    elect_cmd->footer(
        "COMMAND runs while this process leads NAME, with SQLOCK_NAME, SQLOCK_OWNER and SQLOCK_TOKEN (the term: "
        "strictly increasing across leaders) in its environment, supervised as by `sqlock run`: signals are "
        "forwarded, and if leadership is lost its whole process tree is stopped before the lease's safe deadline "
        "(exit 76; with --repeat, campaign again). Leadership is resigned when COMMAND exits. Exit codes as run's; "
        "75 when not elected within --wait. With --repeat a signal while campaigning exits 0.");

    leader_args leader;
    auto* leader_cmd = app.add_subcommand("leader", "Show the leader of the election NAME, or follow it (--watch)");
    leader_cmd->add_option("--db", leader.dbs, db_help)->type_name("URL");
    leader_cmd->add_option("--name", leader.name, "election name")->required();
    leader_cmd->add_flag("--json", leader.json, "one JSON object per line: name, leader, value, owner, term, times");
    leader_cmd->add_flag("--watch", leader.watch,
                         "print the leader now and again on every change, until SIGINT/SIGTERM (exit 0)");
    leader_cmd->footer("Exit 0 when there is a leader, 1 when there is none (--watch: 0 when stopped by a signal).");

    semaphore_args semaphore;
    auto* semaphore_cmd =
        app.add_subcommand("semaphore",
                           "Forget the stored number of permits of the semaphore NAME (sqlock run --limit)");
    semaphore_cmd->add_option("--db", semaphore.dbs, db_help)->type_name("URL");
    semaphore_cmd->add_option("--name", semaphore.name, "semaphore name")->required();
    semaphore_cmd->add_flag("--forget", semaphore.forget, "required: remove the stored number of permits");
    semaphore_cmd->footer(
        "Refused (64) while a permit is held. Exit 0 when forgotten, 1 when NAME had no stored number.");

    list_args list;
    auto* list_cmd = app.add_subcommand(
        "list", "Print the held leases (name, owner, token, created_at, expires_at, remaining), times in UTC");
    list_cmd->add_option("--db", list.dbs, dbs_help)->type_name("URL");
    list_cmd->add_flag("--json", list.json,
                       "JSON lines, one lease per line, with remaining_ms, kind, lock, slot and value (and member)");
    list_cmd->footer(
        "Permits of `run --limit` show as 'NAME permit N', leases of `run --shared` as 'NAME shared', and a leader's "
        "value (sqlock elect) in the VALUE column. "
        "With several --db, each database's leases with a MEMBER column, then which databases answered; exit 0 "
        "when all answered, 69 (78: tables missing) when some did not, after printing what the others said.");

    release_args release;
    auto* release_cmd =
        app.add_subcommand("release",
                           "Delete the lock NAME whoever holds it (an operator's tool) and say whose it was");
    release_cmd->add_option("--db", release.dbs, dbs_help)->type_name("URL");
    release_cmd->add_option("--name", release.name, "lock name")->required();
    release_cmd->add_flag("--force", release.force, "required: the holder may still be running");
    release_cmd->footer(
        "With several --db, releases NAME on each database and says, per database, released / not held / did not "
        "answer. Exit 0 when every database answered and one or more released it; 1 when every database answered "
        "and none held it; 69 (78: tables missing) when some did not answer.");

    schema_args schema;
    auto* schema_cmd =
        app.add_subcommand("schema", "Print the DDL of the lock tables, or create them in the database with --apply");
    schema_cmd->add_option("--db", schema.dbs, db_help)->type_name("URL");
    schema_cmd->add_option("--engine", schema.engine, "the engine whose DDL to print (default: that of --db)")
        ->check(CLI::IsMember({"postgresql", "mysql", "sqlite"}));
    schema_cmd->add_flag("--apply", schema.apply, "create the tables (idempotent) instead of printing the DDL");

    doctor_args doctor;
    auto* doctor_cmd =
        app.add_subcommand("doctor",
                           "Inspect each database and say what is safe: schema, privileges, durability, replication, "
                           "poolers, clock");
    doctor_cmd->add_option("--db", doctor.dbs, dbs_help)->type_name("URL");
    doctor_cmd->add_option("--table-prefix", doctor.table_prefix, "prefix of the lock tables")
        ->type_name("NAME")
        ->capture_default_str();
    doctor_cmd->add_flag("--json", doctor.json, "one JSON object: databases, their findings, the worst severity");
    doctor_cmd->footer(
        "One line per finding (check, severity ok|info|warning|error, what was found, what to change), grouped "
        "per database. Exit 0 when the worst finding is ok or info, 1 for a warning, 2 for an error; 69 when a "
        "database could not be reached (the others are still examined), 64 for a bad URL. See docs/ha/doctor.md.");

    if (before.empty() && !separator)
        fail(exit_code::usage,
             "give a command: run, elect, leader, semaphore, list, release, schema or doctor (see `sqlock --help`)");
    std::vector<std::string> reversed(before.rbegin(), before.rend());  // CLI11 parses a reversed vector
    try {
        app.parse(reversed);
    } catch (CLI::Success const& e) {  // --help, --help-all, --version
        return app.exit(e);
    } catch (CLI::ParseError const& e) {
        std::string where = app.get_subcommands().empty()
                                ? std::string("sqlock --help")
                                : "sqlock " + app.get_subcommands().front()->get_name() + " --help";
        fail(exit_code::usage, std::string(e.what()) + ": see `" + where + "`");
    }

    if (run_cmd->parsed()) {
        if (!run_cmd->remaining().empty())
            fail(exit_code::usage, "unexpected '" + printable(run_cmd->remaining().front()) +
                                       "': put the command after `--`: sqlock run --name NAME -- COMMAND [ARG]...");
        run.command = std::move(command);
        return run_command(run);
    }
    if (elect_cmd->parsed()) {
        if (!elect_cmd->remaining().empty())
            fail(exit_code::usage, "unexpected '" + printable(elect_cmd->remaining().front()) +
                                       "': put the command after `--`: sqlock elect --name NAME -- COMMAND [ARG]...");
        elect.value_given = value_opt->count() > 0;
        elect.command = std::move(command);
        return elect_command(elect);
    }
    if (separator) fail(exit_code::usage, "unexpected `--`: only `sqlock run` and `sqlock elect` take a command");
    if (schema.dbs.size() > 1) fail(exit_code::usage, "schema takes one --db: run it once per database");
    if (list_cmd->parsed()) return list_command(list);
    if (release_cmd->parsed()) return release_command(release);
    if (schema_cmd->parsed()) return schema_command(schema);
    if (doctor_cmd->parsed()) return doctor_command(doctor);
    if (leader_cmd->parsed()) return leader_command(leader);
    if (semaphore_cmd->parsed()) return semaphore_command(semaphore);
    fail(exit_code::usage,
         "give a command: run, elect, leader, semaphore, list, release, schema or doctor (see `sqlock --help`)");
}

}  // namespace

int main(int argc, char** argv) {
    try {
        return dispatch(argc, argv);
    } catch (exit_error const& e) {
        if (!e.message.empty()) say(e.message);
        return e.code;
    } catch (sqlock::error const& e) {
        // schema_missing: the commands' stores turn it into their own message; this is the fallback.
        say(e.what());
        return sqlock::tools::exit_code_of_current_exception();
    } catch (sqlock::usage_error const& e) {
        say(e.what());
        return exit_code::usage;
    } catch (std::exception const& e) {
        say(std::string("internal error: ") + e.what());
        return exit_code::software;
    }
}
