// Internal: everything that differs between engines. All SQL text lives behind
// this interface (src/dialect/*.cpp); lockers never branch on the engine.
#pragma once

#include "detail/grant.hpp"
#include "detail/url.hpp"

#include <sqlock/options.hpp>
#include <sqlock/store.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <soci/statement.h>

namespace soci {
class session;
class soci_error;
}  // namespace soci

namespace sqlock::detail {

/// One row of the lock table, as an operator sees it.
struct lock_listing {
    std::string name;
    std::string owner;
    std::int64_t token = 0;
    int holds = 0;
    std::int64_t created_us = 0;
    std::int64_t expires_us = 0;
    std::int64_t now_us = 0;  // the database's clock when read
};

/// A row-lock transaction that has been open a long time.
struct long_row_lock {
    std::int64_t session_id = 0;   // backend pid
    std::int64_t held_ms = 0;      // how long its transaction has been open
    std::string client;            // client address, or "local"
};

/// What one reaper batch did.
struct reap_batch {
    std::int64_t rows = 0;                       // deleted (or, dry, that would be)
    std::optional<std::int64_t> oldest_expiry_us;  // the earliest expires_at among them
    std::int64_t live_purged = 0;                // of them, rows purged by max_age that had not expired
};

/// What one batch of the token-counter purge did.
struct token_purge_batch {
    std::int64_t counters = 0;  // deleted (or, dry, that would be)
    std::int64_t picked = 0;    // candidates looked at: a batch with picked < batch was the last
};

/// Statements a dialect keeps prepared on one pooled connection: SOCI statement
/// objects bound to buffers kept next to them, or a client library's own
/// handles where SOCI has none. Made on first use, reused by every later call
/// on that connection, and destroyed before the connection is closed or reopened.
class prepared_statements {
public:
    prepared_statements() = default;
    prepared_statements(prepared_statements const&) = delete;
    prepared_statements& operator=(prepared_statements const&) = delete;
    virtual ~prepared_statements() = default;
};

/// A pooled session together with the statements prepared on it. Converts to
/// the session, so code that needs no prepared statement takes `soci::session&`.
/// A database as a majority member (dialect::majority_identity).
struct member_identity {
    std::string id;
    std::int64_t age_us = 0;  // since the identity was created, on the database's clock
    bool joined = false;      // its counters were seeded under this identity
};

struct pooled_session {
    soci::session& session;
    std::unique_ptr<prepared_statements>& prepared;
    operator soci::session&() const noexcept { return session; }  // NOLINT(google-explicit-constructor)
};

/// The hot statements of the table lock, prepared on first use on each
/// connection, and the buffers they are bound to (a SOCI statement reads its
/// `use` variables and writes its `into` variables at every execute). An
/// engine may derive from it to keep more.
struct statement_cache : prepared_statements {
    std::string name, owner;
    long long token = 0, attempt = 0, ttl = 0;        // in
    int retry = 0;                                   // in
    long long got_token = 0, created = 0, expires = 0, now = 0;  // out
    int flag = 0;                                    // out
    std::optional<soci::statement> acquire, acquire_waiting, release, renew, draw;
};

/// How a failed statement should be handled.
enum class failure {
    transient,   // deadlock, serialization failure, SQLITE_BUSY: retry inside the library
    lock_wait,   // a bounded row-lock wait ran out: the row is busy
    connection,  // the connection is broken: reconnect, the outcome may be unknown
    schema,      // a lock table is missing
    permission,  // the database user may not do it (a missing GRANT): report as backend_error, saying so
    read_only,   // the database refuses writes (read-only mode, a standby, a read-only file): likewise
    other,       // report as backend_error
};

/// Listens for release announcements on a connection of its own (PostgreSQL
/// LISTEN/NOTIFY) and hands each announced lock name to a callback, from its
/// own thread, until destroyed. Reconnects by itself when the connection drops.
class release_listener {
public:
    virtual ~release_listener() = default;
};

/// The SQL and session handling of one engine. Baseline SQL that is the same
/// everywhere is in dialect.cpp; each engine overrides what differs.
class dialect {
public:
    dialect(std::string const& table_prefix, store_options const& options);
    virtual ~dialect() = default;
    dialect(dialect const&) = delete;
    dialect& operator=(dialect const&) = delete;

    [[nodiscard]] virtual sqlock::engine engine() const noexcept = 0;

    /// The statements prepared on `s`'s connection, made (empty) on first use.
    [[nodiscard]] statement_cache& cache(pooled_session s) const {
        if (!s.prepared) s.prepared = make_cache();
        return static_cast<statement_cache&>(*s.prepared);
    }

    /// The SOCI connect string for a parsed URL.
    [[nodiscard]] virtual std::string connect_string(url_parts const& url) const = 0;

    /// Open a session and apply per-connection settings (isolation, time zone,
    /// lock-wait bound, WAL...).
    virtual void open(soci::session& s, std::string const& connect_string) const = 0;

    /// Every table (and sequence) the schema creates.
    [[nodiscard]] virtual std::vector<std::string> required_tables() const;

    /// Columns of the lock table added after its first release, with their
    /// types: a store on older tables says which ALTER TABLE to run.
    [[nodiscard]] virtual std::vector<std::pair<std::string, std::string>> added_columns() const;

    /// The name of the first lock table that is missing, or "<table>.<column> <type>"
    /// for a missing column of the lock table, or empty.
    [[nodiscard]] std::string missing_table(soci::session& s) const;

    /// Create the tables (idempotent).
    virtual void create_schema(soci::session& s) const;

    /// Insert the lock row, or take over an expired one, and draw a fencing
    /// token, atomically. Not acquired when a live row exists. Acquired only
    /// when the row now carries the token this very call drew and `owner`,
    /// never on a random id alone. `attempt` is a random id of this very
    /// attempt, stored in the row, so that a clean-up after a broken connection
    /// removes only what this attempt may have written. `retry`: the call
    /// repeats one whose connection broke; a row of `owner` and `attempt` that
    /// the broken call committed after the clean-up is then ours too.
    /// `waiting`: the caller will wait for a release if the lock is busy; where
    /// releases are announced (PostgreSQL), a busy answer then marks the row so
    /// that its release announces itself (releases nobody waits for announce nothing).
    [[nodiscard]] virtual grant acquire(pooled_session s, std::string const& name, std::string const& owner,
                                        std::int64_t attempt, std::int64_t ttl_us, bool waiting,
                                        bool retry) const = 0;

    /// The lock row of `name`, or empty.
    [[nodiscard]] std::optional<lock_listing> find_lock(soci::session& s, std::string const& name) const;

    /// Why commits on this server may not be durable (a setting and its value),
    /// or empty when they are.
    [[nodiscard]] virtual std::optional<std::string> relaxed_durability(soci::session& s) const;

    /// The socket of a session (for the client-side statement deadline), or -1.
    [[nodiscard]] virtual int socket_of(soci::session& s) const;

    /// What an idle session's socket said (readable or hung up while no
    /// statement was in flight on it): the row lock's session watch.
    struct idle_news {
        bool ended = false;        ///< the session is gone: the server ended it or the connection closed
        bool watch_reads = true;   ///< false: data came that cannot be read here; watch for hang-ups only
        std::string why;           ///< when ended: what the server or the socket said
    };
    /// Reads what arrived on the idle session `s` without disturbing its
    /// protocol state (notices and parameter changes are consumed where the
    /// client library can; the server's last error message is kept as `why`).
    /// `hung_up`: poll() reported a hang-up or an error on the socket.
    [[nodiscard]] virtual idle_news read_idle(soci::session& s, bool hung_up) const;

    /// Bound the engine's own wait inside the next statements where that costs
    /// no round trip (SQLite's busy handler; MySQL's acquire, a CALL that takes
    /// its bound as a parameter); elsewhere nothing.
    virtual void set_engine_wait(soci::session& s, std::chrono::milliseconds wait) const;

    /// True when a "transient" failure after the whole engine wait means the
    /// lock is held (SQLite: BUSY while another connection holds the file).
    [[nodiscard]] virtual bool busy_is_lock_wait() const noexcept { return false; }

    /// Delete the row if (name, owner, token) still match; true when deleted.
    /// Does not wait for the disk where the engine allows that per transaction
    /// (a release lost in a crash only delays the next holder until the TTL).
    /// PostgreSQL also notifies waiters (NOTIFY on `channel()`) in the same
    /// statement, when a waiter marked the row.
    [[nodiscard]] virtual bool release(pooled_session s, std::string const& name, std::string const& owner,
                                       std::int64_t token) const;

    /// Extend an unexpired row of (name, owner, token) to now + ttl. Empty when
    /// the row is expired or not ours; otherwise the new expiry and the database's now.
    [[nodiscard]] virtual std::optional<renewal> renew(pooled_session s, std::string const& name,
                                                       std::string const& owner, std::int64_t token,
                                                       std::int64_t ttl_us) const;

    /// One more hold on an unexpired row of ours (reentrancy); false when the row is not ours.
    [[nodiscard]] bool add_hold(soci::session& s, std::string const& name, std::string const& owner,
                                std::int64_t token) const;

    /// One hold fewer on a row of ours that has more than one; false when nothing matched.
    [[nodiscard]] bool drop_hold(soci::session& s, std::string const& name, std::string const& owner,
                                 std::int64_t token) const;

    /// Record `token` as the highest seen for `resource` unless a higher one was
    /// seen: returns the higher token that refuses it, or empty when accepted.
    /// Runs on the caller's session, inside the caller's transaction.
    [[nodiscard]] virtual std::optional<std::int64_t> fence(soci::session& s, std::string const& resource,
                                                            std::int64_t token) const;

    /// One reaper batch: delete (or, dry, count) at most `batch` rows of the
    /// lock table whose expires_at is older than now - grace (database clock),
    /// and, when `max_age_us` is set, rows created before now - max_age. One
    /// atomic statement: a row renewed a moment before is never deleted.
    [[nodiscard]] virtual reap_batch reap(soci::session& s, std::int64_t grace_us,
                                          std::optional<std::int64_t> max_age_us, int batch, bool dry_run) const;

    /// One batch of the fencing-counter purge: delete (or, dry, count) at most
    /// `batch` counters of the tokens table whose token is below the database's
    /// now in microseconds minus `horizon_us`, never the floor row (name ''),
    /// after raising the floor to at least the highest token deleted, in the
    /// same statement or transaction. See first_token_sql().
    [[nodiscard]] virtual token_purge_batch purge_tokens(soci::session& s, std::int64_t horizon_us, int batch,
                                                         bool dry_run) const;

    /// Every row of the lock table (held or expired-but-not-reaped), by name.
    [[nodiscard]] std::vector<lock_listing> list_locks(soci::session& s) const;

    /// Delete the row of `name` whoever owns it; the row as it was, or empty.
    [[nodiscard]] std::optional<lock_listing> force_release(soci::session& s, std::string const& name) const;

    // ---- the row lock (SELECT ... FOR UPDATE in a transaction held open) ----
    // The statements that run at every acquire, keep-alive and release are
    // prepared once per pooled connection and kept in its statement cache (see
    // cache()), like the table lock's.

    /// Create the lock row of `name` if missing (autocommit, idempotent).
    virtual void ensure_row(soci::session& s, std::string const& name) const = 0;

    /// Open the holding transaction with the server-side bounds derived from
    /// `ttl` (an idle-in-transaction limit and TCP keepalives, where the engine
    /// has them), then lock the row of `name`, waiting up to `wait` in the
    /// engine's own queue (zero: do not wait), obtain a token that is durable
    /// before it is returned, and record the owner. Engines with row locks call
    /// `draw` once the row is locked: it commits the name's next token on
    /// another connection (the row lock orders the draws). Empty when the row is
    /// locked by someone else (or, `missing` set, when it does not exist). The
    /// caller ends the transaction in either case (end_row_lock).
    [[nodiscard]] virtual std::optional<grant> lock_row(pooled_session s, std::string const& name,
                                                        std::string const& owner, std::chrono::milliseconds ttl,
                                                        std::chrono::milliseconds wait,
                                                        std::function<std::int64_t()> const& draw,
                                                        bool& missing) const = 0;

    /// Majority mode's durable counter of `name` in `<prefix>_majority_tokens` (0 when none).
    [[nodiscard]] virtual std::int64_t majority_read(soci::session& s, std::string const& name) const;

    /// Set that counter to `token` if it is below it and this database is still
    /// the member `member_id` and has joined (below), in one atomic statement
    /// (autocommit); true when this call set it (it was strictly below).
    [[nodiscard]] virtual bool majority_write(soci::session& s, std::string const& name, std::int64_t token,
                                              std::string const& member_id) const;

    /// This database as a majority member: its identity (`<prefix>_identity`,
    /// created with the schema), how old that identity is on the database's
    /// clock, and whether its counters were seeded under it (its own identity
    /// is in `<prefix>_majority_members`). Empty when the identity row is missing.
    [[nodiscard]] std::optional<member_identity> majority_identity(soci::session& s) const;

    /// Every majority counter: (name, token).
    [[nodiscard]] std::vector<std::pair<std::string, std::int64_t>> majority_read_all(soci::session& s) const;

    /// Seed this database's counters (each raised to at least the given value)
    /// and record `member_id` as joined, in one transaction, when its identity
    /// is still `member_id`; false (nothing changed) when it is not.
    [[nodiscard]] bool majority_join(soci::session& s, std::string const& member_id,
                                     std::vector<std::pair<std::string, std::int64_t>> const& counters) const;

    /// Draw the next fencing token of `name` from the token counter, in autocommit
    /// (a durable commit), on a connection of its own.
    [[nodiscard]] virtual std::int64_t draw_token(pooled_session s, std::string const& name) const = 0;

    /// A statement on the holding transaction (of the row lock of `name`) that
    /// resets the server's idle limit (to `ttl`) and proves the transaction is
    /// alive; the database's now.
    [[nodiscard]] virtual std::int64_t keep_row_lock(pooled_session s, std::string const& name,
                                                     std::chrono::milliseconds ttl) const = 0;

    /// COMMIT (or ROLLBACK) the holding transaction and restore the session.
    virtual void end_row_lock(pooled_session s, bool commit) const = 0;

    /// Row-lock transactions (on `<prefix>_rows`) open longer than `threshold`,
    /// where the engine can tell (PostgreSQL); empty elsewhere.
    [[nodiscard]] virtual std::vector<long_row_lock> long_row_locks(soci::session& s,
                                                                    std::chrono::milliseconds threshold) const;

    /// The LISTEN/NOTIFY channel releases are announced on (PostgreSQL).
    [[nodiscard]] std::string channel() const { return prefix_ + "_released"; }

    /// A listener for releases announced by other processes, or null where the
    /// engine has no such thing (then waiters poll). `on_notify(name)` is called
    /// for each release, and `on_notify("")` after (re)connecting, since
    /// announcements may have been missed meanwhile.
    [[nodiscard]] virtual std::unique_ptr<release_listener> listen(
        std::string const& connect_string, std::function<void(std::string_view)> on_notify) const;

    /// Delete the row written by acquire attempt `attempt` of `owner`, if any
    /// (clean-up after an unknown outcome). Another attempt's row is never
    /// touched, nor another owner's that drew the same attempt id.
    virtual void delete_attempt(soci::session& s, std::string const& name, std::string const& owner,
                                std::int64_t attempt) const;

    /// Classify a failure; `s` is the session it happened on.
    [[nodiscard]] virtual failure classify(soci::soci_error const& e, soci::session& s) const = 0;

    /// The engine's native error code ("40P01", "1213", "5"), or empty.
    [[nodiscard]] virtual std::string native_code(soci::soci_error const& e) const = 0;

    /// The engine's DDL with this dialect's table names.
    [[nodiscard]] std::string schema_sql() const;

    [[nodiscard]] std::string const& locks_table() const noexcept { return locks_; }
    [[nodiscard]] std::string const& tokens_table() const noexcept { return tokens_; }

    [[nodiscard]] std::string const& fences_table() const noexcept { return fences_; }
    [[nodiscard]] std::string majority_table() const { return prefix_ + "_majority_tokens"; }
    [[nodiscard]] std::string identity_table() const { return prefix_ + "_identity"; }
    [[nodiscard]] std::string majority_members_table() const { return prefix_ + "_majority_members"; }

protected:
    /// After a cached statement has returned what it returns: let go of it where
    /// the engine needs that (SQLite keeps a statement that is not reset inside
    /// its transaction).
    virtual void finish(soci::statement&) const {}
    /// A new, empty cache of this engine's prepared statements (see cache()).
    [[nodiscard]] virtual std::unique_ptr<statement_cache> make_cache() const {
        return std::make_unique<statement_cache>();
    }
    /// SQL that tells whether a table exists; binds `:t`, returns one integer.
    [[nodiscard]] virtual std::string table_exists_sql() const = 0;
    /// The database's current time as a value comparable with expires_at.
    [[nodiscard]] virtual std::string now_sql() const = 0;
    /// `timestamp` plus the microseconds bound to `:ttl`.
    [[nodiscard]] virtual std::string plus_ttl_sql(std::string const& timestamp) const = 0;
    /// `timestamp` minus the microseconds bound to `:<param>`.
    [[nodiscard]] virtual std::string minus_sql(std::string const& timestamp, std::string const& param) const = 0;
    /// Start a write transaction (SQLite: BEGIN IMMEDIATE).
    [[nodiscard]] virtual std::string begin_write_sql() const { return "BEGIN"; }
    /// Raise counter :name to at least :token (no answer needed).
    [[nodiscard]] virtual std::string majority_raise_sql() const;
    /// Record :id in `<prefix>_majority_members` unless it is there.
    [[nodiscard]] virtual std::string majority_add_member_sql() const;
    /// Announce a release of `name` to other processes (PostgreSQL NOTIFY), if the engine can.
    virtual void notify_release(soci::session& s, std::string const& name) const;
    /// Appended to a row-picking subquery so that rows locked by others are skipped.
    [[nodiscard]] virtual std::string skip_locked_sql() const { return ""; }
    /// A timestamp column as bigint microseconds since the Unix epoch.
    [[nodiscard]] virtual std::string epoch_us_sql(std::string const& column) const = 0;
    /// The larger of two integer expressions.
    [[nodiscard]] virtual std::string greatest_sql(std::string const& a, std::string const& b) const {
        return "GREATEST(" + a + ", " + b + ")";
    }
    /// The first token of a counter created for a name that has none: above the
    /// floor (the tokens row named '', raised by every purge) and at least the
    /// database's now in microseconds (which covers an acquire that read the
    /// floor just before a purge committed). Existing counters add 1.
    [[nodiscard]] std::string first_token_sql() const;
    /// Counters the purge may delete: not the floor, token below now - `:horizon` µs.
    [[nodiscard]] std::string purgeable_tokens_sql() const;

    store_options options_;
    std::string prefix_;
    std::string locks_;
    std::string tokens_;

private:
    std::vector<lock_listing> read_locks(soci::session& s, std::string const* name) const;

protected:
    std::string fences_;
};

/// @throws usage_error when the prefix is not a valid identifier.
[[nodiscard]] std::unique_ptr<dialect> make_dialect(sqlock::engine e, std::string const& table_prefix,
                                                    store_options const& options);

/// @throws usage_error naming the rule.
void validate_table_prefix(std::string_view prefix);

/// A URL query parameter name passed on to the client library's connection
/// string: [A-Za-z0-9_]+ only, so a crafted name cannot add other options.
/// @throws usage_error naming the parameter.
void validate_param_name(std::string const& key);

/// The embedded schema/<engine>.sql, tables named with the default prefix "sqlock".
[[nodiscard]] std::string_view embedded_schema(sqlock::engine e) noexcept;

/// Replace the default prefix in DDL by `prefix`.
[[nodiscard]] std::string apply_prefix(std::string_view ddl, std::string_view prefix);

}  // namespace sqlock::detail
