// sqlock — majority mode: one lock over N independent databases.
#pragma once

#include <sqlock/export.hpp>
#include <sqlock/locker.hpp>
#include <sqlock/stats.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sqlock {

/// How a majority locker takes and holds locks. The lease length is the
/// members' TTL (the smallest, if they differ); everything else is here.
struct SQLOCK_EXPORT majority_options {
    /// Bound on one member's answer in each round (acquire, token rounds,
    /// renewal, release). Empty: ttl / 10. A member that does not answer in
    /// time counts as refusing; its late answer is cleaned up (or, while the
    /// lease lives, kept as one more member that holds it).
    std::optional<std::chrono::milliseconds> member_timeout;

    /// Clock-rate drift margin subtracted from the validity. Empty: ttl / 100 + 2 ms
    /// (the Redlock specification's).
    std::optional<std::chrono::milliseconds> drift;

    /// How many member databases the lock has in all, when some could not be
    /// given (a store that did not open while its database was down). Empty:
    /// the lockers given. The quorum is a majority of this N, and a new group
    /// of members is formed only when all N answer (docs/majority.md, "A member
    /// that lost its data"); the lockers given must be at least a majority of it.
    std::optional<std::size_t> configured_members;

    /// Owner id reported by the majority lease (each member writes its own
    /// locker's owner into its row). Empty: "host/pid/instance/thread".
    std::string owner;

    /// Pause between rounds of a waiting `acquire`: capped exponential with
    /// full jitter, as for the other lockers.
    std::chrono::milliseconds backoff_min = std::chrono::milliseconds(20);
    std::chrono::milliseconds backoff_max = std::chrono::milliseconds(500);

    /// Renew on every member at about ttl/3 while the lease lives; the lease
    /// stays held only while a majority renews within its validity.
    bool auto_renew = true;

    /// As `locker_options::max_hold`: the watchdog stops renewing a lease
    /// held that long (0: no limit; otherwise at least the ttl).
    std::chrono::milliseconds max_hold = std::chrono::milliseconds::zero();

    /// As `locker_options::on_lost` and `on_event`.
    std::function<void(std::string_view name, std::int64_t token)> on_lost;
    std::function<void(lease_event const&)> on_event;
};

/// A lock held on a majority of N independent lockers (Redlock's scheme over
/// SQL databases). The result is a `locker` like any other, with the same
/// `lease` type: `try_acquire`, `acquire`, `reenter`, renewal, `stop_token`.
///
/// Acquire: on the steady clock from before the first request, ask all N
/// members in parallel (each bounded by `member_timeout`); granted when at
/// least N/2+1 grant it and a fencing token is settled (below) while time is
/// left; the lease's validity is ttl − elapsed − drift. Otherwise every member
/// is released — those that timed out too, since their insert may have landed:
/// they are released when they answer — and the attempt is busy when some
/// member said the lock is held (or another client's token got in the way), or
/// throws `backend_unavailable` when too few members could be reached. The
/// quorum comes from the configured N, never from the members that happen to
/// answer.
///
/// Fencing: each grant's token is strictly greater than every earlier majority
/// token of the name, whatever members fail in between: two rounds over the
/// granting members' `<prefix>_majority_tokens` counters — read a majority,
/// then write max + 1 where it is still the largest, on a majority — and any
/// two majorities share a member. See docs/majority.md.
///
/// A member counts only when its counters were seeded under its present
/// identity (`<prefix>_identity`, created with the schema): new members form a
/// group the first time all N answer; a member created again (it lost its
/// data) is seeded from a majority of the others once its identity is older
/// than the ttl plus drift, and until then attempts that need it throw
/// `backend_unavailable` naming it. See docs/majority.md, "A member that lost
/// its data".
///
/// Members may mix engines and strategies (table or row lockers; on SQLite
/// only table lockers: a row lock there locks the whole file); each must be a
/// different database. A member's store connects when it is opened, so a
/// database that is down when the members are built cannot be one: build the
/// majority from the stores that opened (a quorum of the configured N). N ≥ 3 is recommended; N = 1 or 2 work but
/// tolerate no failure (N = 2 needs both).
///
/// The members are asked on worker threads that the locker owns (a pool that
/// grows whenever no worker is idle, so one member's hung call never delays
/// another's); destroying the locker (its last copy and last lease) joins them.
/// @warning The locker's destructor may wait for member calls still in flight,
///          each bounded by its member's `connect_timeout` and `io_timeout`.
///
/// @throws usage_error when `members` is empty, holds the same database twice
///         (same URL and table prefix), a majority locker or an SQLite
///         row_locker, or an option is out of range. No I/O is done.
///
/// Thread safety: as any locker.
[[nodiscard]] SQLOCK_EXPORT locker majority_locker(std::vector<locker> const& members, majority_options options = {});

}  // namespace sqlock
