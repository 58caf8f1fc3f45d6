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

class coordination_statements {
public:
    virtual ~coordination_statements() = default;

    /// Store `permits` as the number of permits of semaphore `name` unless it
    /// has one already; the number stored (this one, or the earlier caller's).
    [[nodiscard]] virtual int define_semaphore(soci::session& s, std::string const& name, int permits) const = 0;

    /// Delete the stored number of permits of `name`; false when there was none.
    [[nodiscard]] virtual bool forget_semaphore(soci::session& s, std::string const& name) const = 0;

    /// Count the unexpired rows of the lock table with names in [lo, hi), and
    /// those of them whose owner is `owner`.
    [[nodiscard]] virtual live_rows count_live(soci::session& s, std::string const& lo, std::string const& hi,
                                               std::string const& owner) const = 0;

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
