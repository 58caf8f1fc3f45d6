// sqlock — a held lock.
#pragma once

#include <sqlock/export.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <stop_token>
#include <string>
#include <string_view>

namespace sqlock {

namespace detail {
struct access;
class lease_row;
}  // namespace detail

/// A point in the database's time (UTC, microseconds). It comes from the
/// database's clock, not this host's: compare it with other database times,
/// never with `system_clock::now()`.
using db_time = std::chrono::sys_time<std::chrono::microseconds>;

/// Where a lease stands.
enum class lease_state {
    held,      ///< ours, and its local validity has not run out
    in_doubt,  ///< the last renewal or release could not reach the database (a
               ///< release of unknown outcome may have deleted the row); still
               ///< ours until the local safe deadline passes
    lost,      ///< the database said the row is not ours, or the safe deadline passed
    released,  ///< released by us (or moved from)
};

/// "held", "in_doubt", "lost" or "released".
[[nodiscard]] SQLOCK_EXPORT std::string_view to_string(lease_state s) noexcept;

/// A held lock: an RAII guard that releases on destruction.
///
/// Move-only. A moved-from or released lease does nothing on destruction;
/// move assignment releases the lease it replaces first. The destructor never
/// throws: a failed release there is swallowed (the row expires by its TTL).
///
/// Reentrancy is explicit: `reenter()` on a held lease returns another lease
/// on the same row, with the same token, and the row's `holds` count goes up;
/// each lease releases one hold and the last one deletes the row. A second
/// `acquire` of a held name is busy whoever asks — the same thread, the same
/// locker or the same explicit owner — because a thread id or an owner string
/// cannot tell a nested call from another worker (a lease moved to another
/// thread, a reused thread id, two replicas sharing an owner).
///
/// Fork: a lease belongs to the process that acquired it. In a forked child
/// its destructor does nothing, and `release()`, `renew()` and `reenter()`
/// throw `usage_error`: the child never releases its parent's lock. The child
/// may return through `main` or call `exit()`: its copies of the parent's
/// stores and lockers are left alone too (docs/lease-lifecycle.md, After fork()).
///
/// @warning A lease can be lost while you hold it: a pause longer than the TTL
/// (GC, swap, SIGSTOP, a slow disk) lets the row expire and another client take
/// the lock. Check `state()` or `stop_token()` inside the critical section, and
/// pass `token()` to the resource you protect so it can refuse writes from a
/// holder that was overtaken (see `sqlock::fence`).
///
/// Thread safety: the accessors, `state()` and `stop_token()` may be called
/// from any thread; `renew()` and `release()` of one lease must not race each
/// other from two threads.
class SQLOCK_EXPORT lease {
public:
    lease(lease&& other) noexcept;
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
    /// Reentrant holds share their row's token.
    [[nodiscard]] std::int64_t token() const noexcept;
    /// When the database granted the lease (database clock).
    [[nodiscard]] db_time created_at() const noexcept;
    /// When the database will consider the lease expired (database clock; moves on renewal).
    [[nodiscard]] db_time expires_at() const noexcept;

    /// How long the lease is still safely ours, on this host's steady clock,
    /// measured from before the last successful acquire or renewal was sent,
    /// minus a drift margin: it never overstates. Zero once lost or released.
    [[nodiscard]] std::chrono::steady_clock::duration remaining() const noexcept;

    /// Where the lease stands; see `lease_state`.
    [[nodiscard]] sqlock::lease_state state() const noexcept;

    /// True while `state()` is `held` or `in_doubt` (still safely ours).
    [[nodiscard]] bool held() const noexcept;

    /// True once the lease is lost (not when released).
    [[nodiscard]] bool lost() const noexcept;

    /// Requested at the moment the lease is found lost; never requested by a
    /// normal release. Poll it in long critical sections, or attach a
    /// `std::stop_callback`.
    [[nodiscard]] std::stop_token stop_token() const noexcept;

    /// Extend the lease to `ttl` from now (database clock) in one atomic
    /// statement that matches the owner and token and refuses an expired row.
    /// `ttl` defaults to the locker's.
    /// @throws lease_lost           the row had expired or was no longer ours
    /// @throws usage_error          ttl out of range, or the lease was released
    /// @throws backend_unavailable  the database could not be reached (the lease
    ///                              is in doubt until its safe deadline)
    void renew();
    void renew(std::chrono::milliseconds ttl);

    /// Another hold on this lock, for a nested critical section that takes the
    /// same lock: a lease sharing this one's row and token. The row is deleted
    /// when the last of the leases is released.
    /// @throws lease_lost   this lease is lost or its validity has run out
    /// @throws usage_error  this lease was released or moved from, or this is a forked child
    /// @throws backend_unavailable (table lock) the database could not be reached
    [[nodiscard]] lease reenter();

    /// Release this hold; the last hold deletes the lock row (only if it is
    /// still ours). Idempotent: a second call does nothing.
    /// @throws lease_lost           the row was no longer ours (expired and
    ///                              taken over, or force-released), or the
    ///                              lease's safe validity had already run out
    ///                              (another owner may have held it meanwhile)
    /// @throws usage_error          called in a forked child of the acquiring process
    /// @throws backend_unavailable  the database could not be reached; the row
    ///                              expires by its TTL, and release() may be retried
    /// @throws in_doubt             the connection broke while the DELETE was in
    ///                              flight and the clean-up could not run: the row
    ///                              may be gone or not. After either of these the
    ///                              lease is `in_doubt` (not `held`) until a renewal
    ///                              or a retried release settles it, or its safe
    ///                              deadline passes.
    void release();

private:
    friend struct detail::access;  // the library's way in: src/detail/access.hpp
    // Lockers build leases from their rows.
    SQLOCK_NO_EXPORT explicit lease(std::shared_ptr<detail::lease_row> row) noexcept;

    std::shared_ptr<detail::lease_row> row_;
    enum class ending { none, released, lost };
    ending ended_ = ending::none;  // what became of this hold
};

}  // namespace sqlock
