// sqlock — a held lock.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

namespace sqlock {

namespace detail {
class lease_state;
}

/// A point in the database's time (UTC, microseconds). It comes from the
/// database's clock, not this host's: compare it with other database times,
/// never with `system_clock::now()`.
using db_time = std::chrono::sys_time<std::chrono::microseconds>;

/// A held lock: an RAII guard that releases on destruction.
///
/// Move-only. A moved-from or released lease does nothing on destruction;
/// move assignment releases the lease it replaces first. The destructor never
/// throws: a failed release there is swallowed (the row expires by its TTL).
///
/// @warning A lease can be lost while you hold it: a pause longer than the TTL
/// (GC, swap, SIGSTOP, a slow disk) lets the row expire and another client take
/// the lock. Check `remaining()` before acting, and pass `token()` to the
/// resource you protect so it can refuse writes from a holder that was
/// overtaken (fencing).
///
/// Thread safety: distinct leases are independent; one lease must not be
/// released from two threads at once. The accessors may be called concurrently.
class lease {
public:
    lease(lease&& other) noexcept = default;
    lease& operator=(lease&& other) noexcept;
    lease(lease const&) = delete;
    lease& operator=(lease const&) = delete;
    ~lease();

    /// The lock's name.
    [[nodiscard]] std::string const& name() const noexcept;
    /// The owner id written in the lock row.
    [[nodiscard]] std::string const& owner() const noexcept;
    /// The fencing token: strictly greater than every earlier token of this
    /// name on this database (tokens are increasing, not consecutive).
    [[nodiscard]] std::int64_t token() const noexcept;
    /// When the database granted the lease (database clock).
    [[nodiscard]] db_time created_at() const noexcept;
    /// When the database will consider the lease expired (database clock).
    [[nodiscard]] db_time expires_at() const noexcept;

    /// How long the lease is still safely ours, on this host's steady clock,
    /// measured from before the acquire was sent, minus a drift margin: it
    /// never overstates. Zero once expired, released or moved from.
    [[nodiscard]] std::chrono::steady_clock::duration remaining() const noexcept;

    /// True until `release()` (or a move) and while `remaining()` is positive.
    [[nodiscard]] bool held() const noexcept;

    /// Delete the lock row (only if it is still ours). Idempotent: a second
    /// call does nothing.
    /// @throws lease_lost           the row was no longer ours (expired and
    ///                              taken over, or force-released)
    /// @throws backend_unavailable  the database could not be reached; the row
    ///                              expires by its TTL
    void release();

    /// Internal: lockers build leases from their state.
    explicit lease(std::shared_ptr<detail::lease_state> state) noexcept;

private:
    std::shared_ptr<detail::lease_state> state_;
};

}  // namespace sqlock
