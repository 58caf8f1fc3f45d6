// Internal: the SQL of the fencing-token counters (`<prefix>_tokens`) and of
// majority mode's durable counters and member identity.
#pragma once

#include "detail/grant.hpp"
#include "dialect/statements.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace sqlock::detail {

class token_statements {
public:
    virtual ~token_statements() = default;

    /// Draw the next fencing token of `name` from the token counter, in autocommit
    /// (a durable commit), on a connection of its own.
    [[nodiscard]] virtual std::int64_t draw_token(pooled_session s, std::string const& name) const = 0;

    /// Majority mode's durable counter of `name` in `<prefix>_majority_tokens` (0 when none), with this
    /// database's identity (majority_identity), in one statement. Empty when the identity row is missing.
    [[nodiscard]] virtual std::optional<member_counter> majority_read(soci::session& s,
                                                                      std::string const& name) const = 0;

    /// Set that counter to `token` if it is below it and this database is still
    /// the member `member_id` and has joined (below), in one atomic statement
    /// (autocommit); true when this call set it (it was strictly below). An
    /// empty `member_id`: whatever this database's present identity is, it must
    /// have joined (the write that comes with a grant, before any read: issue
    /// 40's design 3, tests/spin/majority_token.pml -DTWOROUNDS).
    [[nodiscard]] virtual bool majority_write(soci::session& s, std::string const& name, std::int64_t token,
                                              std::string const& member_id) const = 0;

    /// The write that comes with a grant: majority_write(name, token) for the present identity
    /// (empty member id); when it did not win, majority_read(name) on the same connection (PostgreSQL:
    /// in the same statement), so that a miss costs the rounds no read of their own.
    [[nodiscard]] virtual member_write majority_write_or_read(soci::session& s, std::string const& name,
                                                              std::int64_t token) const = 0;

    /// This database as a majority member: its identity (`<prefix>_identity`,
    /// created with the schema), how old that identity is on the database's
    /// clock, and whether its counters were seeded under it (its own identity
    /// is in `<prefix>_majority_members`). Empty when the identity row is missing.
    [[nodiscard]] virtual std::optional<member_identity> majority_identity(soci::session& s) const = 0;

    /// Every majority counter: (name, token).
    [[nodiscard]] virtual std::vector<std::pair<std::string, std::int64_t>> majority_read_all(
        soci::session& s) const = 0;

    /// Seed this database's counters (each raised to at least the given value)
    /// and record `member_id` as joined, in one transaction, when its identity
    /// is still `member_id`; false (nothing changed) when it is not.
    [[nodiscard]] virtual bool majority_join(
        soci::session& s, std::string const& member_id,
        std::vector<std::pair<std::string, std::int64_t>> const& counters) const = 0;
};

}  // namespace sqlock::detail
