// Internal: the SQL of the table lock (a row of `<prefix>_locks`, unique on name).
#pragma once

#include "detail/grant.hpp"
#include "dialect/statements.hpp"

#include <cstdint>
#include <optional>
#include <string>

namespace sqlock::detail {

class table_lock_statements {
public:
    virtual ~table_lock_statements() = default;

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
                                        std::int64_t attempt, std::int64_t ttl_us, bool waiting, bool retry) const = 0;

    /// True where acquire_shared() grants a shared lease in one transaction (MariaDB, SQLite); elsewhere a
    /// shared lease is acquire() followed by rename_lock().
    [[nodiscard]] virtual bool grants_shared_at_once() const noexcept { return false; }

    /// As acquire() of `name`, then, in the same transaction, the row renamed to `reader` (its
    /// expiry now + ttl, as rename_lock() sets it): a read-write lock's shared lease, whose grant waits
    /// for the disk once. A waiter's mark on `name`'s row is announced after the commit. Only
    /// where grants_shared_at_once().
    [[nodiscard]] virtual grant acquire_shared(pooled_session s, std::string const& name, std::string const& reader,
                                               std::string const& owner, std::int64_t attempt, std::int64_t ttl_us,
                                               bool waiting, bool retry) const;

    /// Delete the row if (name, owner, token) still match; true when deleted.
    /// Does not wait for the disk where the engine allows that per transaction
    /// (a release lost in a crash only delays the next holder until the TTL).
    /// PostgreSQL also notifies waiters (NOTIFY on `channel()`) in the same
    /// statement, when a waiter marked the row.
    [[nodiscard]] virtual bool release(pooled_session s, std::string const& name, std::string const& owner,
                                       std::int64_t token) const = 0;

    /// Extend an unexpired row of (name, owner, token) to now + ttl. Empty when
    /// the row is expired or not ours; otherwise the new expiry and the database's now.
    [[nodiscard]] virtual std::optional<renewal> renew(pooled_session s, std::string const& name,
                                                       std::string const& owner, std::int64_t token,
                                                       std::int64_t ttl_us) const = 0;

    /// One more hold on an unexpired row of ours (reentrancy); false when the row is not ours.
    [[nodiscard]] virtual bool add_hold(soci::session& s, std::string const& name, std::string const& owner,
                                        std::int64_t token) const = 0;

    /// One hold fewer on a row of ours that has more than one; false when nothing matched.
    [[nodiscard]] virtual bool drop_hold(soci::session& s, std::string const& name, std::string const& owner,
                                         std::int64_t token) const = 0;

    /// Mark the live row of `name`, if any, as a waiter's acquire does, so that
    /// its release is announced to this store's listener (an election's
    /// observer). False when it could not be marked yet (no listener is parked
    /// yet): the caller may try again later.
    [[nodiscard]] virtual bool mark_watched(pooled_session s, std::string const& name) const = 0;

    /// Delete the row written by acquire attempt `attempt` of `owner`, if any
    /// (clean-up after an unknown outcome). Another attempt's row is never
    /// touched, nor another owner's that drew the same attempt id.
    virtual void delete_attempt(soci::session& s, std::string const& name, std::string const& owner,
                                std::int64_t attempt) const = 0;
};

}  // namespace sqlock::detail
