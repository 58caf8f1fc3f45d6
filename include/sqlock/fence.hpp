// sqlock — fencing on the resource side.
#pragma once

#include <sqlock/export.hpp>
#include <sqlock/store.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace soci {
class session;
}

namespace sqlock {

class metrics;

/// Checks fencing tokens where the protected write happens.
///
/// A lease can be lost while its holder is paused; when the holder wakes up it
/// still believes it holds the lock. Its token, though, is lower than the one
/// the new holder got. Call `check_and_set` inside the transaction that
/// performs the protected write, on that transaction's own session: it records
/// the highest token seen for the resource (table `<prefix>_fences`) and throws
/// `stale_token` if a higher one was already seen, so the overtaken holder's
/// transaction can roll back instead of committing.
///
/// ```cpp
/// soci::transaction tx(app_session);
/// fence.check_and_set(app_session, "account:12345", lease.token());  // throws stale_token
/// app_session << "UPDATE accounts SET balance = :b WHERE id = :id", ...;
/// tx.commit();
/// ```
///
/// The row of the resource stays locked until the caller's transaction ends,
/// so concurrent writers are ordered by it. Equal tokens pass (a holder may
/// write several times).
///
/// Thread safety: a fence is immutable; use one from any number of threads,
/// each with its own session.
class SQLOCK_EXPORT fence {
public:
    /// A fence for the tables of `db`'s engine and table prefix; it counts its
    /// checks in `db`'s metrics (sqlock_fence_checks_total).
    explicit fence(store const& db);
    /// A fence for a database of engine `e` whose fence table is `<prefix>_fences`;
    /// it counts its checks in `m`, or in `metrics::global()` when empty.
    /// @throws usage_error when the prefix is not a valid identifier.
    explicit fence(sqlock::engine e, std::string_view table_prefix = "sqlock", std::shared_ptr<metrics> m = {});

    /// @param session  the caller's SOCI session, opened on an engine of this
    ///                 fence's kind, normally inside a transaction
    /// @param resource what is being written (1..255 bytes of UTF-8)
    /// @param token    the lease's token
    /// @throws stale_token  a higher token was already recorded for `resource`
    /// @throws usage_error  bad resource name or token <= 0
    /// @throws backend_unavailable  the session's connection broke (the transaction is gone)
    /// @throws backend_error, schema_missing
    void check_and_set(soci::session& session, std::string_view resource, std::int64_t token) const;

private:
    sqlock::engine engine_;
    std::string prefix_;
    std::shared_ptr<metrics> metrics_;
};

}  // namespace sqlock
