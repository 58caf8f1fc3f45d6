// Internal: the SQL of semaphores and read-write locks (docs/coordination.md).
#pragma once

#include "detail/grant.hpp"
#include "dialect/statements.hpp"

#include <cstdint>
#include <optional>
#include <string>

namespace soci {
class session;
}  // namespace soci

namespace sqlock::detail {

/// Live rows of the lock table in a range of names.
struct live_rows {
    std::int64_t count = 0;  ///< rows not yet expired by the database's clock
    std::int64_t mine = 0;   ///< of them, rows of the given owner
};

/// What a semaphore's permit holder reads right after its grant (confirm_permit).
struct permit_check {
    int permits = 0;         ///< the number of permits stored for the name
    std::int64_t other = 0;  ///< live permits of the name held through the other strategy
};

/// What forget_semaphore found.
struct forgotten {
    bool removed = false;   ///< the definition was deleted (and committed)
    std::int64_t live = 0;  ///< live permits (table rows and held row locks): nothing was deleted when > 0
};

/// A read-write lock's writer, holding the name's lock, counts the live readers.
struct reader_count {
    live_rows readers;         ///< the live reader rows, and those of the writer's owner
    bool writer_held = false;  ///< the writer's row (name, owner, token) is still there, unexpired
};

class coordination_statements {
public:
    virtual ~coordination_statements() = default;

    /// Store `permits` as the number of permits of semaphore `name` unless it
    /// has one already; the number stored (this one, or the earlier caller's).
    [[nodiscard]] virtual int define_semaphore(soci::session& s, std::string const& name, int permits) const = 0;

    /// In one write transaction: delete the stored number of permits of `name`
    /// (its row stays locked until the end), then count the name's live permits,
    /// `[lo, hi)`: unexpired rows of the lock table and row locks held on
    /// `<prefix>_rows`; roll back when there is one. A grant's confirm_permit
    /// waits for this transaction, so a permit is either counted here or
    /// confirmed against what it leaves.
    [[nodiscard]] virtual forgotten forget_semaphore(soci::session& s, std::string const& name, std::string const& lo,
                                                     std::string const& hi) const = 0;

    /// Right after a permit of `name` (`[lo, hi)` its permits) was granted, in
    /// autocommit: the stored number of permits, read under a share lock of its
    /// row (a forget in progress is waited for), stored as `permits` first when
    /// there is none; and the live permits of the other strategy: row locks held
    /// on `<prefix>_rows` for a table permit (`row` false), unexpired rows of the
    /// lock table for a row permit.
    [[nodiscard]] virtual permit_check confirm_permit(soci::session& s, std::string const& name, int permits,
                                                      std::string const& lo, std::string const& hi, bool row) const = 0;

    /// Count the unexpired rows of the lock table with names in [lo, hi), and
    /// those of them whose owner is `owner`.
    [[nodiscard]] virtual live_rows count_live(soci::session& s, std::string const& lo, std::string const& hi,
                                               std::string const& owner) const = 0;

    /// count_live() of the reader rows [lo, hi), and, in the same statement,
    /// whether the writer's row of `name` (owner, token) is still there and
    /// unexpired: a count of zero means no reader only while the writer holds
    /// the name (a force-release may have let another writer in meanwhile).
    [[nodiscard]] virtual reader_count count_readers(soci::session& s, std::string const& lo, std::string const& hi,
                                                     std::string const& name, std::string const& owner,
                                                     std::int64_t token) const = 0;

    /// Rename the unexpired row (name, owner, token) to `to` and extend it to
    /// now + ttl, in one statement (UPDATE ... RETURNING, prepared once per
    /// connection; not MariaDB's, which grants shared leases at once); then,
    /// when a waiter had marked it, announce the release of `name` (its waiters
    /// may go on). Empty when the row was expired or not ours.
    [[nodiscard]] virtual std::optional<renewal> rename_lock(pooled_session s, std::string const& name,
                                                             std::string const& owner, std::int64_t token,
                                                             std::string const& to, std::int64_t ttl_us) const = 0;
};

}  // namespace sqlock::detail
