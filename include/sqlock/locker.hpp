// sqlock — lockers: the strategies that take and hold locks.
#pragma once

#include <sqlock/export.hpp>
#include <sqlock/lease.hpp>
#include <sqlock/options.hpp>
#include <sqlock/stats.hpp>

#include <chrono>
#include <memory>
#include <optional>
#include <stop_token>
#include <string_view>

namespace sqlock {

class store;

namespace detail {
struct access;
class locker_impl;
}  // namespace detail

/// Takes named locks. A cheap handle: copies share one implementation.
///
/// Lock names are byte strings of 1..255 bytes of valid UTF-8 without NUL;
/// they are always bound as parameters, so any such text is an ordinary name.
///
/// Thread safety: one locker may be used from any number of threads; each call
/// borrows its own pooled connection and never touches the caller's
/// transaction.
class SQLOCK_EXPORT locker {
public:
    /// Take the lock if it is free (or its holder's lease has expired by the
    /// database's clock); otherwise return empty at once. A lock already held
    /// is busy whoever asks — this thread and this owner included: reentrancy
    /// is `lease::reenter()`.
    /// @throws usage_error, backend_unavailable, backend_error, schema_missing,
    ///         in_doubt (the connection broke, or gave no answer within
    ///         `io_timeout`, mid-statement, and reconnecting, the clean-up of
    ///         this attempt's row or the retry failed too: never retry blindly),
    ///         timeout (every pooled connection stayed busy — e.g. pinned by
    ///         held row locks; the message names the pool)
    [[nodiscard]] std::optional<lease> try_acquire(std::string_view name);

    /// Take the lock, waiting up to `wait`. `wait == 0` tries once.
    ///
    /// Waiters wake up when the lock is released: on PostgreSQL through
    /// LISTEN/NOTIFY (one listening connection per store, for every process);
    /// elsewhere the releasing thread wakes waiters of the same process and
    /// other processes poll. Between wake-ups: capped exponential backoff with
    /// full jitter, which also covers a lost notification. The deadline is
    /// honoured exactly.
    /// @throws timeout   the lock was not free within `wait`
    /// @throws cancelled `cancel` was requested while waiting
    /// @throws as `try_acquire`
    [[nodiscard]] lease acquire(std::string_view name, std::chrono::milliseconds wait, std::stop_token cancel = {});

    /// A snapshot of this locker's counters.
    [[nodiscard]] locker_stats stats() const noexcept;

    /// The options this locker was built with (`owner` stays empty when the
    /// owner id is the default per-thread one).
    [[nodiscard]] locker_options const& options() const noexcept;

private:
    friend struct detail::access;  // the library's way in: src/detail/access.hpp
    // Built by the factories below.
    SQLOCK_NO_EXPORT explicit locker(std::shared_ptr<detail::locker_impl> impl) noexcept;

    std::shared_ptr<detail::locker_impl> impl_;
};

/// The unique-index INSERT lock: a row per name in `<prefix>_locks`, inserted
/// on acquire, taken over only once its `expires_at` has passed by the
/// database's clock, deleted by its owner on release.
/// @throws usage_error when an option is out of range (no I/O is done).
[[nodiscard]] SQLOCK_EXPORT locker table_locker(store const& db, locker_options options = {});

/// The SELECT ... FOR UPDATE lock: the engine's own row lock on a row of
/// `<prefix>_rows`, held in a transaction that stays open on a dedicated pooled
/// connection while the lease lives. Released by COMMIT, by the holder's
/// connection dropping (a crashed holder releases at once), or by a
/// server-enforced idle bound set from the TTL. Waiters queue inside the
/// engine. On SQLite the "row lock" is `BEGIN IMMEDIATE`, which locks the whole
/// database file: one holder at a time across all names.
///
/// Each held lease pins one pooled connection: size the pool for the most
/// leases held at once plus the concurrent short operations.
/// @throws usage_error when an option is out of range (no I/O is done).
[[nodiscard]] SQLOCK_EXPORT locker row_locker(store const& db, locker_options options = {});

}  // namespace sqlock
