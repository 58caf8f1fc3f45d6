// Internal: the SQL of the reaper and of the operator's calls (list, release by
// force, long-held row locks).
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace soci {
class session;
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
    std::int64_t session_id = 0;  // backend pid
    std::int64_t held_ms = 0;     // how long its transaction has been open
    std::string client;           // client address, or "local"
};

/// What one reaper batch did.
struct reap_batch {
    std::int64_t rows = 0;                         // deleted (or, dry, that would be)
    std::optional<std::int64_t> oldest_expiry_us;  // the earliest expires_at among them
    std::int64_t live_purged = 0;                  // of them, rows purged by max_age that had not expired
};

/// What one batch of the token-counter purge did.
struct token_purge_batch {
    std::int64_t counters = 0;  // deleted (or, dry, that would be)
    std::int64_t picked = 0;    // candidates looked at: a batch with picked < batch was the last
};

/// The lock table's size, for the reaper's metrics.
struct table_counts {
    std::int64_t rows = 0, expired = 0, token_rows = 0;
    std::optional<std::int64_t> oldest_expiry_us;  // of the expired rows
    std::int64_t now_us = 0;                       // the database's
};

class admin_statements {
public:
    virtual ~admin_statements() = default;

    /// One reaper batch: delete (or, dry, count) at most `batch` rows of the
    /// lock table whose expires_at is older than now - grace (database clock),
    /// and, when `max_age_us` is set, rows created before now - max_age. One
    /// atomic statement: a row renewed a moment before is never deleted.
    [[nodiscard]] virtual reap_batch reap(soci::session& s, std::int64_t grace_us,
                                          std::optional<std::int64_t> max_age_us, int batch, bool dry_run) const = 0;

    /// One batch of the fencing-counter purge: delete (or, dry, count) at most
    /// `batch` counters of the tokens table whose token is below the database's
    /// now in microseconds minus `horizon_us`, never the floor row (name ''),
    /// after raising the floor to at least the highest token deleted, in the
    /// same statement or transaction.
    [[nodiscard]] virtual token_purge_batch purge_tokens(soci::session& s, std::int64_t horizon_us, int batch,
                                                         bool dry_run) const = 0;

    /// True when some row of the lock table is live (expires_at >= now, database clock): one indexed
    /// read of the first such row, for the reaper's choice of batch size.
    [[nodiscard]] virtual bool any_live_lock(soci::session& s) const = 0;

    /// Every row of the lock table (held or expired-but-not-reaped), by name.
    [[nodiscard]] virtual std::vector<lock_listing> list_locks(soci::session& s) const = 0;

    /// How many rows the lock table has, how many of them expired, and the
    /// tokens table's rows: two aggregate queries, read-only.
    [[nodiscard]] virtual table_counts count_tables(soci::session& s) const = 0;

    /// The lock row of `name`, or empty.
    [[nodiscard]] virtual std::optional<lock_listing> find_lock(soci::session& s, std::string const& name) const = 0;

    /// Delete the row of `name` whoever owns it; the row as it was, or empty.
    [[nodiscard]] virtual std::optional<lock_listing> force_release(soci::session& s,
                                                                    std::string const& name) const = 0;

    /// Row-lock transactions (on `<prefix>_rows`) open longer than `threshold`,
    /// where the engine can tell (PostgreSQL); empty elsewhere.
    [[nodiscard]] virtual std::vector<long_row_lock> long_row_locks(soci::session& s,
                                                                    std::chrono::milliseconds threshold) const = 0;
};

}  // namespace sqlock::detail
