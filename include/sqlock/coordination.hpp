// sqlock — coordination beyond one lock: counting semaphores, read-write locks
// and leader election, built on a locker's leases (docs/coordination.md).
#pragma once

#include <sqlock/export.hpp>
#include <sqlock/lease.hpp>
#include <sqlock/locker.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stop_token>
#include <string>
#include <string_view>

namespace sqlock {

namespace detail {
class semaphore_impl;
class rw_locker_impl;
class election_impl;
}  // namespace detail

/// A counting semaphore: at most `permits` holders of a name at any moment of
/// the database's time. Each permit is a lease of its own (renewed by the
/// locker's watchdog, lost by its safe deadline, expired and reaped when its
/// holder is gone) on one of the name's `permits` slots, with that slot's
/// increasing fencing token.
///
/// The number of permits is stored with the name (`<prefix>_semaphores`) by the
/// first caller; a caller that asks for another number gets `usage_error`
/// naming both, so processes cannot disagree on N. Every permit is confirmed
/// against the stored N right after its grant (one more round trip), under a
/// share lock of the definition that a forget contends on: a permit is never
/// handed out under another N than the one stored, also just after a forget and
/// a redefinition. `sqlock semaphore --forget` (or `forget_semaphore`) removes
/// the definition while no permit is live. The permits of one name taken through
/// a table locker and through a row locker exclude each other (one strategy
/// holds permits at a time).
///
/// Lockers: a table locker on every engine; a row locker on PostgreSQL and
/// MariaDB (each permit pins a pooled connection). Refused with `usage_error`:
/// a majority locker (its members keep no common definition of N) and a
/// row locker on SQLite (one holder per database file).
///
/// Thread safety: one semaphore may be used from any number of threads.
class SQLOCK_EXPORT semaphore {
public:
    /// @throws usage_error `permits` outside 1 .. 10000, or a locker kind that is refused (no I/O is done)
    semaphore(locker const& l, int permits);

    /// A permit if one of the name's slots is free, else empty at once.
    /// Names: as for `locker`, 1 .. 248 bytes (the slot suffix needs the rest).
    /// @throws usage_error the name's stored number of permits differs from this semaphore's
    /// @throws schema_missing the semaphores table is absent (apply the schema)
    /// @throws as `locker::try_acquire`
    [[nodiscard]] std::optional<lease> try_acquire(std::string_view name);

    /// A permit, waiting up to `wait` for one (`wait == 0` tries once).
    /// Waiters poll the slots with the locker's backoff and wake on the release
    /// of the slot they last tried. On a row locker, a pooled connection is
    /// waited for no longer than `wait` and not once `cancel` is requested.
    /// @throws timeout, cancelled, and as `try_acquire`
    [[nodiscard]] lease acquire(std::string_view name, std::chrono::milliseconds wait, std::stop_token cancel = {});

    /// The number of permits this semaphore grants per name.
    [[nodiscard]] int permits() const noexcept;

private:
    std::shared_ptr<detail::semaphore_impl> impl_;
};

/// Removes the stored number of permits of semaphore `name`, so a caller may
/// define it again with another number. Refused while a permit is live (a
/// table locker's unexpired permit row, a row locker's held row lock), in one
/// transaction with the deletion: a permit granted meanwhile is either counted
/// or confirmed against what the forget left.
/// @return true when a definition was removed
/// @throws usage_error a permit of `name` is still held (its message names how many)
/// @throws backend_unavailable, backend_error, schema_missing
[[nodiscard]] SQLOCK_EXPORT bool forget_semaphore(store const& db, std::string_view name);

/// A read-write lock on a table locker: many shared (read) leases of a name, or
/// one exclusive (write) lease.
///
/// The exclusive lease is the table lock of the name itself, so a plain
/// `locker::acquire(name)` on the same table locker is a writer too; the
/// exclusive side of this class also waits until no shared lease is left.
/// A shared lease takes the name's lock for one statement and turns it into a
/// row of its own (`<name>` U+001F `r` U+001F `<random>`), so:
///   - writer preference: a waiting writer holds the name's lock while it
///     waits for the readers to leave, and new readers wait behind it;
///   - the token of a shared lease is drawn from the name's counter: greater
///     than every write token it may observe, smaller than every later one. A
///     resource fenced with write tokens serves a read safely when its fence is
///     at most the read's token (`sqlock::fence::check`, docs/coordination.md);
///   - each shared lease expires, renews and is reaped like any lease.
/// No upgrade: asking for the exclusive lease while this owner holds a shared
/// one of the name through the same locker (held or in doubt) throws `usage_error` (two upgraders
/// would wait for each other for ever). Release the shared lease first. Any
/// other live reader row, even one carrying this owner id (another locker or
/// process with the same explicit owner, a grant whose answer was lost), is
/// waited for like any reader.
///
/// Thread safety: one rw_locker may be used from any number of threads.
class SQLOCK_EXPORT rw_locker {
public:
    /// @throws usage_error unless `l` is a table locker (row and majority locks keep no rows to count readers by)
    explicit rw_locker(locker const& l);

    /// A shared lease if no writer holds or waits for the name, else empty at once.
    /// Names: 1 .. 236 bytes (the reader suffix needs the rest).
    [[nodiscard]] std::optional<lease> try_acquire_shared(std::string_view name);
    /// A shared lease, waiting up to `wait` behind writers.
    /// @throws timeout, cancelled, and as `locker::acquire`
    [[nodiscard]] lease acquire_shared(std::string_view name, std::chrono::milliseconds wait,
                                       std::stop_token cancel = {});

    /// The exclusive lease if the name is free of writers and readers, else empty at once.
    /// @throws usage_error this owner holds a shared lease of the name through this locker, held or in
    ///                     doubt (no upgrade)
    /// @throws lease_lost  the name's row was no longer this lease's when the readers were counted
    ///                     (force-released right after the grant)
    [[nodiscard]] std::optional<lease> try_acquire(std::string_view name);
    /// The exclusive lease, waiting up to `wait` for the writer before it and
    /// then for the readers to leave (new readers wait meanwhile). Each count of
    /// the readers also checks that the name's row is still this lease's.
    /// @throws usage_error this owner holds a shared lease of the name through this locker, held or in
    ///                     doubt (no upgrade)
    /// @throws lease_lost  the name's lock was lost while waiting for the readers (force-released,
    ///                     or expired): never a lease the database no longer holds
    /// @throws timeout, cancelled, and as `locker::acquire`
    [[nodiscard]] lease acquire(std::string_view name, std::chrono::milliseconds wait, std::stop_token cancel = {});

private:
    std::shared_ptr<detail::rw_locker_impl> impl_;
};

/// Who leads an election, as the database says.
struct SQLOCK_EXPORT leader_info {
    std::string value;      ///< what the leader campaigned with (an address, an id)
    std::string owner;      ///< the leader's owner id
    std::int64_t term = 0;  ///< the leader's fencing token: strictly increasing across leaders
    db_time elected_at;     ///< database clock
    db_time expires_at;     ///< database clock; moves on with every renewal
    friend bool operator==(leader_info const&, leader_info const&) = default;
};

/// Leadership won by `election::campaign`: a lease on the election's name whose
/// token is the term. Move-only; resigns (releases) on destruction.
///
/// @warning Leadership can be lost while held, as any lease: check `state()` or
/// `stop_token()`, and fence the leader's writes with `term()` (docs/coordination.md).
/// Thread safety: as `lease`.
class SQLOCK_EXPORT leadership {
public:
    leadership(leadership&&) noexcept = default;
    leadership& operator=(leadership&&) noexcept = default;
    ~leadership() = default;

    [[nodiscard]] std::string const& name() const noexcept { return lease_.name(); }
    /// The term: this leadership's fencing token.
    [[nodiscard]] std::int64_t term() const noexcept { return lease_.token(); }
    /// The value campaigned with.
    [[nodiscard]] std::string const& value() const noexcept { return value_; }
    [[nodiscard]] sqlock::lease_state state() const noexcept { return lease_.state(); }
    [[nodiscard]] bool held() const noexcept { return lease_.held(); }
    /// Requested when the leadership is lost (not on resign).
    [[nodiscard]] std::stop_token stop_token() const noexcept { return lease_.stop_token(); }
    /// The lease behind the leadership (renew, remaining, expires_at).
    [[nodiscard]] sqlock::lease& lease() noexcept { return lease_; }
    [[nodiscard]] sqlock::lease const& lease() const noexcept { return lease_; }

    /// Step down: release the lease, so the next campaigner wins at once.
    /// @throws as `lease::release`
    void resign() { lease_.release(); }

private:
    friend class detail::election_impl;
    leadership(sqlock::lease l, std::string value) noexcept : lease_(std::move(l)), value_(std::move(value)) {}
    sqlock::lease lease_;
    std::string value_;
};

/// How an election observes.
struct SQLOCK_EXPORT election_options {
    /// `observe` reads the leader at least this often (10 ms .. 1 min). A
    /// change is reported within this bound plus one query after the database
    /// saw it; an expired leader within it after its `expires_at`. A
    /// resignation is reported sooner: the observer marks each new leader's
    /// row, so its release is announced (PostgreSQL NOTIFY, the MariaDB ring,
    /// the SQLite bell; not on Galera, where only this bound holds).
    std::chrono::milliseconds observe_interval = std::chrono::milliseconds(250);
};

/// Leader election on a table locker: the leader holds the election name's
/// lock, its value is stored in the lock row with its owner id, and its term is
/// the lock's fencing token (strictly increasing across leaders; one leader per
/// term). A leader that crashes is succeeded once its lease expires.
///
/// Thread safety: one election may be used from any number of threads.
class SQLOCK_EXPORT election {
public:
    /// @throws usage_error unless `l` is a table locker, or an option is out of range (no I/O is done)
    explicit election(locker const& l, election_options options = {});

    /// Become the leader of `name`, waiting up to `wait`.
    /// `value`: 1 .. 200 bytes of UTF-8 without NUL or U+001F; together with the
    /// owner id at most 254 bytes.
    /// @throws timeout, cancelled, usage_error, and as `locker::acquire`
    [[nodiscard]] leadership campaign(std::string_view name, std::string_view value, std::chrono::milliseconds wait,
                                      std::stop_token cancel = {});
    /// Become the leader if there is none, else empty at once.
    [[nodiscard]] std::optional<leadership> try_campaign(std::string_view name, std::string_view value);

    /// Campaign, then run `work` while leader and resign after it has returned
    /// (never before, whatever happens to `cancel`). `work` gets the leadership
    /// and a stop token requested when the leadership is lost or `cancel` is
    /// requested: it should return soon after. Exceptions from `work` are
    /// passed on after resigning.
    /// @throws as `campaign`
    void lead(std::string_view name, std::string_view value, std::chrono::milliseconds wait,
              std::function<void(leadership&, std::stop_token)> const& work, std::stop_token cancel = {});

    /// The current leader of `name`, or empty when none holds an unexpired lease.
    /// @throws backend_unavailable, backend_error, schema_missing
    [[nodiscard]] std::optional<leader_info> leader(std::string_view name);

    /// Call `on_change` with the current leader (or none) at once, and again
    /// every time it changes — a new leader, a new term, a resignation, an
    /// expiry — until `stop` is requested. Blocks the calling thread. A
    /// database that cannot be reached is retried every `observe_interval`;
    /// nothing is reported meanwhile.
    /// @throws usage_error (bad name); exceptions from `on_change` are passed on
    void observe(std::string_view name, std::function<void(std::optional<leader_info> const&)> const& on_change,
                 std::stop_token stop);

private:
    std::shared_ptr<detail::election_impl> impl_;
};

}  // namespace sqlock
