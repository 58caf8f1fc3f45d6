// sqlock command — shared pieces: exit codes, arguments, text helpers.
#pragma once

#include <sqlock/lease.hpp>
#include <sqlock/store.hpp>

#include "tool_support.hpp"  // tools/

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace sqlock::cli {

/// Exit codes: the table both tools share (tools/tool_support.hpp).
namespace exit_code = sqlock::tools::exit_code;

/// Ends the command with `code` after printing `message` (one line, "sqlock: "
/// prefixed) on stderr; an empty message prints nothing.
struct exit_error {
    int code;
    std::string message;
};

[[noreturn]] inline void fail(int code, std::string message) { throw exit_error{code, std::move(message)}; }

/// Where --db came from, for messages.
struct database {
    std::string url;
    bool explicit_db = false;  ///< given with --db (not $SQLOCK_DB or the default)
};

inline constexpr std::string_view default_url = "sqlite:sqlock.db";

/// --db if given, else $SQLOCK_DB if set and non-empty, else the SQLite file ./sqlock.db.
[[nodiscard]] database resolve_database(std::vector<std::string> const& given);

/// The engine a URL names by its scheme, without opening it (the library
/// validates the rest when the store opens); empty for an unknown scheme.
[[nodiscard]] std::optional<sqlock::engine> engine_of_url(std::string_view url);

/// The file of a sqlite: URL (as the library reads it), or empty for other URLs.
[[nodiscard]] std::optional<std::string> sqlite_file_of_url(std::string_view url);

/// Engine names as the command line writes them.
[[nodiscard]] std::optional<sqlock::engine> engine_from_name(std::string_view name);

/// "250ms", "30s", "5m", "1h", "7d", terms run together ("1h30m"), or "0".
/// @throws exit_error (usage) naming `what` and the accepted forms
[[nodiscard]] std::chrono::milliseconds parse_duration(std::string_view what, std::string_view text);

/// A short human form: "850ms", "29.4s", "4m05s", "2h03m", "3d04h"; "expired" when <= 0.
[[nodiscard]] std::string human_remaining(std::chrono::microseconds d);

/// Text made fit for one line: control characters as escapes (\n, \t, \x1b).
[[nodiscard]] std::string printable(std::string_view s);

/// Prints `message` on stderr as one line, "sqlock: " prefixed once
/// (see sqlock::tools::one_line).
void say(std::string_view message);

// ---- commands ----------------------------------------------------------------

struct run_args {
    std::vector<std::string> dbs;
    std::string name;
    std::string ttl = "30s";
    std::string wait = "0";
    std::string strategy = "table";
    std::string member_timeout;  ///< majority mode; empty: ttl / 10
    int conflict_exit_code = exit_code::conflict;
    std::string limit;             ///< --limit N: a permit of a semaphore of N (empty: not given)
    bool shared = false;           ///< --shared: a shared lease of a read-write lock
    std::string metrics_textfile;  ///< --metrics-textfile PATH (empty: none)
    std::vector<std::string> command;
};

struct elect_args {
    std::vector<std::string> dbs;
    std::string name;
    std::string value;  ///< empty: HOST:PID
    bool value_given = false;
    std::string ttl = "30s";
    std::string wait;  ///< empty: until elected
    bool repeat = false;
    std::vector<std::string> command;
};

struct leader_args {
    std::vector<std::string> dbs;
    std::string name;
    bool json = false;
    bool watch = false;
};

struct semaphore_args {
    std::vector<std::string> dbs;
    std::string name;
    bool forget = false;
};

struct list_args {
    std::vector<std::string> dbs;
    bool json = false;
};

struct release_args {
    std::vector<std::string> dbs;
    std::string name;
    bool force = false;
};

struct schema_args {
    std::vector<std::string> dbs;
    std::string engine;
    bool apply = false;
};

struct doctor_args {
    std::vector<std::string> dbs;
    std::string table_prefix = "sqlock";
    bool json = false;
};

/// Each returns the process's exit code or throws exit_error / sqlock errors
/// (mapped to exit codes by main).
int run_command(run_args const& args);
/// elect: COMMAND's exit code as run's; 75 not elected within --wait.
int elect_command(elect_args const& args);
/// leader: 0 there is a leader, 1 (not_found) none; --watch: 0 when stopped by a signal.
int leader_command(leader_args const& args);
/// semaphore --forget: 0 forgotten, 1 (not_found) no such semaphore.
int semaphore_command(semaphore_args const& args);
int list_command(list_args const& args);
int release_command(release_args const& args);
int schema_command(schema_args const& args);
/// doctor: 0 when the worst finding is ok or info, 1 a warning, 2 an error (69/64 as the others).
int doctor_command(doctor_args const& args);

/// Opens the store of `db` for list and release: never creates a SQLite file
/// or tables (exit 78 when they are missing).
[[nodiscard]] sqlock::store open_existing(database const& db,
                                          std::chrono::milliseconds connect_timeout = std::chrono::seconds(5));

/// The exit_error (78) for missing lock tables in the database at `url`.
[[nodiscard]] exit_error schema_missing_error(std::string_view url);

/// The URL with its password masked, for messages.
[[nodiscard]] std::string redacted_url(std::string_view url);

// ---- several --db: the members of a majority ----------------------------------

/// Why a member did not answer: the exit code it would have given alone (69
/// unreachable, 78 tables missing, 64 bad URL, 70 a bug) and the message
/// without the "sqlock: " prefix.
struct member_failure {
    int code = exit_code::unavailable;
    std::string message;
};

/// One --db of several, and what opening it gave: a store or a failure.
struct member {
    std::string url;  ///< as given
    std::optional<sqlock::store> store;
    std::optional<member_failure> failure;
};

/// Runs fn(0) .. fn(n-1) each on a thread of its own and waits for all: a
/// member that is slow to answer costs its own bound, never the sum.
void for_each_in_parallel(std::size_t n, std::function<void(std::size_t)> const& fn);

/// Exits 64 when two --db name the same database (the same URL, a scheme alias
/// or the same SQLite file by another path).
void reject_duplicate_databases(std::vector<std::string> const& urls);

/// Opens a store per URL, side by side. `for_run`: as `run` opens one database
/// (an SQLite member gets its file and tables); else as `open_existing`.
/// A member that cannot be opened gets a failure, not an exception; a bad URL
/// exits 64. `connect_timeout`: the stores' (see store_options).
[[nodiscard]] std::vector<member> open_members(std::vector<std::string> const& urls, bool for_run,
                                               std::chrono::milliseconds connect_timeout = std::chrono::seconds(5));

/// Whether `run` may go on with `open` of its `n` members: when a majority of
/// them is a majority of all n (the library counts the quorum out of all n).
/// With an odd n one member may be missing; with an even n none.
[[nodiscard]] bool enough_members_open(std::size_t open, std::size_t n) noexcept;

/// The members of `run`'s several --db, each opened (as `open_members(urls, true, ...)`
/// does) on a thread of its own that this object owns and its destructor joins.
/// `wait` does not wait for the slowest member: once enough are open, the
/// others get as long again as that took (at least `straggler_grace`), and a
/// member still connecting then is left out of the run. Its thread goes on to
/// the end of its connect bound, and what it opens is closed: the majority
/// locker takes no member after it is built.
/// @warning The destructor waits for a member still connecting (its connect_timeout at most).
class member_opening {
public:
    static constexpr std::chrono::milliseconds straggler_grace{500};

    member_opening(std::vector<std::string> const& urls, std::chrono::milliseconds connect_timeout);
    member_opening(member_opening const&) = delete;
    member_opening& operator=(member_opening const&) = delete;
    ~member_opening();

    /// Once every member answered, or enough are open (enough_members_open) and the others' grace
    /// ran out: the members in --db order, a member left out with a failure
    /// (69) saying so. Call once. A bad URL exits 64.
    [[nodiscard]] std::vector<member> wait();

private:
    void join() noexcept;

    struct state;
    std::shared_ptr<state> state_;
    std::vector<std::thread> threads_;
};

/// The failure the exception being handled stands for (call inside a catch).
[[nodiscard]] member_failure failure_of_current_exception(std::string const& url);

/// Asks every member at once: `results[i] = ask(*members[i].store)`. A member
/// that could not be opened, or whose call threw, gets a failure instead (its
/// result is left as it was); the failures come back by member.
template <class Result, class Ask>
[[nodiscard]] std::vector<std::optional<member_failure>> ask_members(std::vector<member>& members,
                                                                     std::vector<Result>& results, Ask const& ask) {
    std::vector<std::optional<member_failure>> failures(members.size());
    for_each_in_parallel(members.size(), [&](std::size_t i) {
        if (!members[i].store) {
            failures[i] = members[i].failure;
            return;
        }
        try {
            results[i] = ask(*members[i].store);
        } catch (...) {
            failures[i] = failure_of_current_exception(members[i].url);
        }
    });
    return failures;
}

}  // namespace sqlock::cli
