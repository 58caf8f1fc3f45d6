// Internal: everything that differs between engines. All SQL text lives behind
// this interface (src/dialect/); lockers never branch on the engine.
//
// `dialect` is the facade the executor and the lockers hold: the engine driver
// (src/dialect/driver.hpp) and the SQL of each feature, each an interface of its
// own (src/dialect/{schema,table_lock,row_lock,tokens,fence,admin}.hpp), with the
// table names and the SQL fragments they share. The baseline SQL, the same on
// every engine, is in src/dialect/<feature>.cpp; each engine overrides what
// differs in src/dialect/<engine>/<feature>.cpp.
#pragma once

#include "detail/grant.hpp"
#include "detail/url.hpp"
#include "dialect/admin.hpp"
#include "dialect/coordination.hpp"
#include "dialect/driver.hpp"
#include "dialect/fence.hpp"
#include "dialect/row_lock.hpp"
#include "dialect/schema.hpp"
#include "dialect/statements.hpp"
#include "dialect/table_lock.hpp"
#include "dialect/tokens.hpp"

#include <sqlock/options.hpp>
#include <sqlock/store.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace sqlock::detail {

/// The SQL and session handling of one engine. Baseline SQL that is the same
/// everywhere is in src/dialect/*.cpp; each engine overrides what differs.
class dialect : public engine_driver,
                public schema_statements,
                public table_lock_statements,
                public row_lock_statements,
                public token_statements,
                public fence_statements,
                public admin_statements,
                public coordination_statements {
public:
    dialect(std::string const& table_prefix, store_options const& options);
    ~dialect() override = default;
    dialect(dialect const&) = delete;
    dialect& operator=(dialect const&) = delete;

    /// The server, as its first connection learned it (learn_server); empty before.
    [[nodiscard]] std::optional<server_info> server() const;
    /// From now on learn_server refuses a server older than sqlock runs on (a
    /// store's open does this; the doctor, which reports such a server, does not).
    void refuse_unsupported() noexcept { refuse_unsupported_.store(true, std::memory_order_relaxed); }

    /// The statements prepared on `s`'s connection, made (empty) on first use.
    [[nodiscard]] statement_cache& cache(pooled_session s) const {
        if (!s.prepared) s.prepared = make_cache();
        return static_cast<statement_cache&>(*s.prepared);
    }

    // The baseline, overridden where an engine differs.
    [[nodiscard]] std::vector<std::string> required_tables() const override;
    [[nodiscard]] std::vector<std::pair<std::string, std::string>> added_columns() const override;
    [[nodiscard]] std::string missing_table(soci::session& s) const final;
    void create_schema(soci::session& s) const override;
    [[nodiscard]] std::optional<int> stored_protocol(soci::session& s) const final;
    [[nodiscard]] std::string schema_sql() const final;
    [[nodiscard]] std::optional<std::string> relaxed_durability(soci::session& s) const override;
    [[nodiscard]] bool multi_writer_cluster(soci::session& s) const override;

    [[nodiscard]] bool release(pooled_session s, std::string const& name, std::string const& owner,
                               std::int64_t token) const override;
    [[nodiscard]] std::optional<renewal> renew(pooled_session s, std::string const& name, std::string const& owner,
                                               std::int64_t token, std::int64_t ttl_us) const override;
    [[nodiscard]] bool add_hold(soci::session& s, std::string const& name, std::string const& owner,
                                std::int64_t token) const final;
    [[nodiscard]] bool drop_hold(soci::session& s, std::string const& name, std::string const& owner,
                                 std::int64_t token) const final;
    void delete_attempt(soci::session& s, std::string const& name, std::string const& owner,
                        std::int64_t attempt) const override;

    [[nodiscard]] std::optional<member_counter> majority_read(soci::session& s, std::string const& name) const final;
    [[nodiscard]] bool majority_write(soci::session& s, std::string const& name, std::int64_t token,
                                      std::string const& member_id) const override;
    [[nodiscard]] member_write majority_write_or_read(soci::session& s, std::string const& name,
                                                      std::int64_t token) const override;
    [[nodiscard]] std::optional<member_identity> majority_identity(soci::session& s) const final;
    [[nodiscard]] std::vector<std::pair<std::string, std::int64_t>> majority_read_all(soci::session& s) const final;
    [[nodiscard]] bool majority_join(soci::session& s, std::string const& member_id,
                                     std::vector<std::pair<std::string, std::int64_t>> const& counters) const final;

    [[nodiscard]] std::optional<std::int64_t> fence(soci::session& s, std::string const& resource,
                                                    std::int64_t token) const override;

    [[nodiscard]] reap_batch reap(soci::session& s, std::int64_t grace_us, std::optional<std::int64_t> max_age_us,
                                  int batch, bool dry_run) const override;
    [[nodiscard]] token_purge_batch purge_tokens(soci::session& s, std::int64_t horizon_us, int batch,
                                                 bool dry_run) const override;
    [[nodiscard]] bool any_live_lock(soci::session& s) const final;
    [[nodiscard]] std::vector<lock_listing> list_locks(soci::session& s) const final;
    [[nodiscard]] table_counts count_tables(soci::session& s) const final;
    [[nodiscard]] std::optional<lock_listing> find_lock(soci::session& s, std::string const& name) const final;
    [[nodiscard]] std::optional<lock_listing> force_release(soci::session& s, std::string const& name) const final;
    [[nodiscard]] std::vector<long_row_lock> long_row_locks(soci::session& s,
                                                            std::chrono::milliseconds threshold) const override;

    [[nodiscard]] int define_semaphore(soci::session& s, std::string const& name, int permits) const final;
    [[nodiscard]] forgotten forget_semaphore(soci::session& s, std::string const& name, std::string const& lo,
                                             std::string const& hi) const final;
    [[nodiscard]] permit_check confirm_permit(soci::session& s, std::string const& name, int permits,
                                              std::string const& lo, std::string const& hi, bool row) const final;
    [[nodiscard]] live_rows count_live(soci::session& s, std::string const& lo, std::string const& hi,
                                       std::string const& owner) const final;
    [[nodiscard]] reader_count count_readers(soci::session& s, std::string const& lo, std::string const& hi,
                                             std::string const& name, std::string const& owner,
                                             std::int64_t token) const final;
    [[nodiscard]] std::optional<renewal> rename_lock(pooled_session s, std::string const& name,
                                                     std::string const& owner, std::int64_t token,
                                                     std::string const& to, std::int64_t ttl_us) const final;

    /// The LISTEN/NOTIFY channel releases are announced on (PostgreSQL).
    [[nodiscard]] std::string channel() const { return prefix_ + "_released"; }

    [[nodiscard]] std::string const& locks_table() const noexcept { return locks_; }
    [[nodiscard]] std::string const& tokens_table() const noexcept { return tokens_; }
    [[nodiscard]] std::string const& fences_table() const noexcept { return fences_; }
    [[nodiscard]] std::string majority_table() const { return prefix_ + "_majority_tokens"; }
    [[nodiscard]] std::string identity_table() const { return prefix_ + "_identity"; }
    [[nodiscard]] std::string majority_members_table() const { return prefix_ + "_majority_members"; }
    [[nodiscard]] std::string semaphores_table() const { return prefix_ + "_semaphores"; }
    [[nodiscard]] std::string protocol_table() const { return prefix_ + "_protocol"; }

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
    /// Insert (:name, :permits, now) into `<prefix>_semaphores` unless the name is there.
    [[nodiscard]] virtual std::string define_semaphore_sql() const;
    /// Appended to a SELECT of one row so that it waits for, and keeps out while it runs, a
    /// transaction deleting the row (FOR SHARE); empty where writers are serial (SQLite).
    [[nodiscard]] virtual std::string share_lock_sql() const { return ""; }
    /// Appended to a SELECT of `<prefix>_rows` so that it locks the rows no transaction holds and
    /// skips the held ones (FOR UPDATE SKIP LOCKED); empty where the engine has no row locks (SQLite).
    [[nodiscard]] virtual std::string skip_held_rows_sql() const { return ""; }
    /// 1 when a waiter marked the lock row (its `waiters` column), else 0.
    [[nodiscard]] virtual std::string waiters_marked_sql() const { return "CASE WHEN waiters <> 0 THEN 1 ELSE 0 END"; }
    /// The value of `waiters` of an unmarked row.
    [[nodiscard]] virtual std::string waiters_unmarked_sql() const { return "0"; }
    /// Record :id in `<prefix>_majority_members` unless it is there.
    [[nodiscard]] virtual std::string majority_add_member_sql() const;
    /// Announce a release of `name` to other processes (PostgreSQL NOTIFY), if the engine can.
    virtual void notify_release(soci::session& s, std::string const& name) const;
    /// Joined to rename_lock()'s UPDATE as a FROM clause where one statement
    /// can let its own commit go without waiting for the disk (PostgreSQL's
    /// transaction-local synchronous_commit); empty elsewhere.
    [[nodiscard]] virtual std::string unflushed_from_sql() const { return ""; }
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
    /// majority_read's statement: the identity row, its age, whether it has joined, and the counter of :name.
    [[nodiscard]] std::string majority_read_sql() const;
    /// Counters the purge may delete: not the floor, token below now - `:horizon` µs.
    [[nodiscard]] std::string purgeable_tokens_sql() const;

    /// Runs `body` in a write transaction (begin_write_sql()): COMMIT when it
    /// returns true, ROLLBACK when it returns false or throws. What it returned.
    bool write_transaction(soci::session& s, std::function<bool()> const& body) const;

    /// The token purge of engines whose DELETE cannot feed an INSERT in one
    /// statement: in one write transaction, `measure` counts the batch and gives
    /// its highest token (binds :horizon and :lim), `raise_floor` raises the
    /// floor row to :highest, `remove` deletes the batch's counters whose token
    /// (read again under the DELETE's lock) is still at most :highest. A counter
    /// drawn from in between is kept for a later pass.
    struct purge_steps {
        std::string measure, raise_floor, remove;
    };
    [[nodiscard]] token_purge_batch purge_tokens_stepwise(soci::session& s, std::int64_t horizon_us, int batch,
                                                          bool dry_run, purge_steps const& sql) const;

    /// The parts of a reaper batch: `cond` (expired by :grace, or, `max_age`,
    /// created before :age), `live` (1 for a row not yet expired) and `pick` (a
    /// subquery of at most :lim names).
    struct reap_conditions {
        std::string cond, live, pick;
    };
    [[nodiscard]] reap_conditions reap_sql(bool max_age) const;

    /// Called by open() on each new session before its settings: the first
    /// time, the server's answer (read_server_answer, then the test hook), kept
    /// for every later call and for server(); a server older than sqlock runs on
    /// is refused once refuse_unsupported() was called.
    /// @throws usage_error naming the server and the minimum (server.hpp)
    server_info learn_server(soci::session& s) const;

    store_options options_;
    std::string prefix_;
    std::string locks_;
    std::string tokens_;

private:
    mutable std::mutex server_mutex_;
    mutable std::optional<server_info> server_;  // guarded by server_mutex_
    std::atomic<bool> refuse_unsupported_{false};

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

/// "schema/<engine>.sql": the file of the source tree and of share/sqlock/ to apply, for messages.
[[nodiscard]] std::string schema_file(sqlock::engine e);

/// The embedded schema/<engine>.sql, tables named with the default prefix "sqlock".
[[nodiscard]] std::string_view embedded_schema(sqlock::engine e) noexcept;

/// Replace the default prefix in DDL by `prefix`.
[[nodiscard]] std::string apply_prefix(std::string_view ddl, std::string_view prefix);

}  // namespace sqlock::detail
