// Internal: the SQL of the row lock (SELECT ... FOR UPDATE on a row of
// `<prefix>_rows`, in a transaction held open on a dedicated connection). The
// statements that run at every acquire, keep-alive and release are prepared
// once per pooled connection and kept in its statement cache, like the table lock's.
#pragma once

#include "detail/grant.hpp"
#include "dialect/statements.hpp"

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

namespace sqlock::detail {

class row_lock_statements {
public:
    virtual ~row_lock_statements() = default;

    /// Create the lock row of `name` if missing (autocommit, idempotent). If
    /// another client created the row a moment ago and holds it (its lock
    /// transaction is open), the engine's unique check waits for that
    /// transaction: PostgreSQL waits at most `wait` (at least 1 ms), MariaDB
    /// `wait` in whole seconds (0: not at all), MySQL its session's lock wait;
    /// past it the engine's lock-wait error is thrown,
    /// which the caller takes for "the row exists and is held".
    virtual void ensure_row(soci::session& s, std::string const& name, std::chrono::milliseconds wait) const = 0;

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

    /// A statement on the holding transaction (of the row lock of `name`) that
    /// resets the server's idle limit (to `ttl`) and proves the transaction is
    /// alive; the database's now.
    [[nodiscard]] virtual std::int64_t keep_row_lock(pooled_session s, std::string const& name,
                                                     std::chrono::milliseconds ttl) const = 0;

    /// COMMIT (or ROLLBACK) the holding transaction and restore the session.
    virtual void end_row_lock(pooled_session s, bool commit) const = 0;
};

}  // namespace sqlock::detail
