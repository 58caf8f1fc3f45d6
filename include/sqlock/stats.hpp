// sqlock — what lockers and stores report about themselves.
#pragma once

#include <sqlock/export.hpp>

#include <array>
#include <chrono>
#include <cstdint>
#include <string_view>

namespace sqlock {

/// Something that happened to a lease, for logging. Delivered synchronously
/// to `locker_options::on_event` from the thread where it happened (the
/// caller's, or the locker's renewer thread): keep the hook short, and never
/// call back into the same lease from it.
struct SQLOCK_EXPORT lease_event {
    enum class kind {
        acquired,      ///< a new lease (or a reentrant hold) was granted
        busy,          ///< an attempt found the lock held (also each attempt inside a waiting acquire)
        timeout,       ///< a waiting acquire ran out of time
        cancelled,     ///< a waiting acquire was cancelled by its stop_token
        renewed,       ///< the renewer (or renew()) extended a lease
        renew_failed,  ///< a renewal could not reach the database: the lease is in doubt
        lost,          ///< the lease is lost (refused, validity gone, or released by someone else)
        released,      ///< a hold (or the lease) was released
    };
    kind what;
    std::string_view name;    ///< the lock's name
    std::int64_t token;       ///< the lease's fencing token (0 when none)
    std::string_view detail;  ///< a human-readable reason, may be empty
};

/// "acquired", "busy", ...
[[nodiscard]] SQLOCK_EXPORT std::string_view to_string(lease_event::kind k) noexcept;

/// Counters of one locker since it was made. A snapshot: each field is read
/// atomically, the set is not.
struct SQLOCK_EXPORT locker_stats {
    std::uint64_t acquired = 0;        ///< leases granted (including reentrant holds)
    std::uint64_t busy = 0;            ///< attempts that found the lock held (each attempt of a waiting acquire counts)
    std::uint64_t timeouts = 0;        ///< waiting acquires that ran out of time
    std::uint64_t cancelled = 0;       ///< waiting acquires cancelled by their stop_token
    std::uint64_t renewed = 0;         ///< successful renewals
    std::uint64_t renew_failures = 0;  ///< renewals that could not reach the database
    std::uint64_t lost = 0;            ///< leases lost
    std::uint64_t released = 0;        ///< holds released

    /// Upper bounds of the wait-time histogram buckets; the last bucket is unbounded.
    static constexpr std::array<std::chrono::milliseconds, 6> wait_bounds{
        std::chrono::milliseconds(1),    std::chrono::milliseconds(10),    std::chrono::milliseconds(100),
        std::chrono::milliseconds(1000), std::chrono::milliseconds(10000), std::chrono::milliseconds(60000)};
    /// Waiting acquires (granted or not) by how long they waited:
    /// wait_histogram[i] counts waits below wait_bounds[i]; the last entry, the rest.
    std::array<std::uint64_t, wait_bounds.size() + 1> wait_histogram{};
};

/// What a store has learned about its database.
struct SQLOCK_EXPORT store_stats {
    /// Estimate of (database time - this host's system time), from the
    /// database timestamps each acquire and renewal returns, taken at the
    /// midpoint of the round trip. Watch it drift to see clocks diverge.
    std::chrono::microseconds clock_skew{0};
    /// How many round trips the estimate is built from.
    std::uint64_t clock_samples = 0;
    /// Release notifications received by the PostgreSQL LISTEN connection
    /// (always 0 on other engines).
    std::uint64_t notifications = 0;
};

}  // namespace sqlock
