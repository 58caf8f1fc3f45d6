// sqlock — the reaper: purges lock rows nobody asks for again.
#pragma once

#include <sqlock/export.hpp>
#include <sqlock/lease.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stop_token>
#include <string>
#include <string_view>

namespace sqlock {

class store;

namespace detail {
class store_impl;
}

/// The shortest `reaper_options::token_horizon` a reaper accepts: 2 hours.
///
/// A counter may be purged only when no acquire statement that started before
/// its last draw can still be running: such a statement computed its new
/// counter's first token from the database's clock when it started, and would
/// insert it below the purged token. The longest a sqlock statement runs is
/// bounded by the store's options: it waits for a row lock at most
/// `store_options::lock_wait_timeout` (at most 10 min), and its client gives it
/// up after `io_timeout` more (at most 1 h). 2 h is that 1 h 10 min plus a
/// margin for a server that stalls a statement past its client or a clock that
/// steps forward. See docs/operations.md, "Fencing-token counters".
inline constexpr std::chrono::hours min_token_horizon{2};

/// How a reaper purges. Validated once, when the reaper is constructed.
///
///     sqlock::reaper r(db, {.grace = 10s, .batch_size = 500});
struct SQLOCK_EXPORT reaper_options {
    /// A row is purged once its `expires_at` is older than the database's now
    /// minus `grace` (0 .. 7 days). Not a safety margin: an expired lease is
    /// over whether or not its row is still there (a renewal refuses an expired
    /// row). The grace keeps just-expired rows visible for a while, for
    /// debugging a lost lease, and leaves them to takeover on acquire meanwhile.
    /// See docs/operations.md for sizing it with the TTL and the interval.
    std::chrono::milliseconds grace = std::chrono::seconds(5);

    /// Rows deleted per statement (1 .. 100000). Each batch is one short
    /// statement (one short transaction on MariaDB/MySQL), so row locks are
    /// held only for one batch and acquire/renew traffic goes on in between.
    std::size_t batch_size = 1000;

    /// Rows (and counters) per statement while no row of the lock table is
    /// live: with no lease to protect, a pass purges in larger batches (at
    /// least `batch_size`; 1 .. 100000). Checked before each batch, on the
    /// database's clock, by one indexed read (`expires_at >= now`, first row
    /// only), until the pass first sees a live row: from then on it keeps
    /// `batch_size` and the `duty_cycle` to its end (short leases leave
    /// moments with no live row). An acquire that arrives during an idle
    /// batch may wait for it (tens of milliseconds for 10000 rows). Empty:
    /// always `batch_size`.
    std::optional<std::size_t> idle_batch_size = 10000;

    /// The share of a pass's time spent in batches while some row of the
    /// lock table is live (0.01 .. 1): after each such batch the pass pauses
    /// for the batch's own time × (1 - duty_cycle) / duty_cycle, so that a
    /// long purge next to live traffic leaves the table to it in between
    /// (0.5: a pause as long as the batch). 1: no pause. Passes with no live
    /// row, and the last batch of a pass, never pause. A stop request ends a
    /// pause at once.
    double duty_cycle = 0.5;

    /// Off by default. When set (1 s .. 3650 days), rows whose `created_at` is
    /// older than the database's now minus `max_age` are purged too, *even
    /// while their holders keep renewing them*: those holders lose their
    /// leases. For locks that are renewed forever by a holder that is stuck.
    /// Every pass that purges such live rows reports it through `on_warning`.
    std::optional<std::chrono::milliseconds> max_age;

    /// Fencing-token counters (`<prefix>_tokens`, one per name ever locked by
    /// the table lock, and by the row lock on SQLite) whose token is below the
    /// database's now in microseconds minus this are purged, after the table's
    /// floor (its row named '') is raised to their highest token: a name whose
    /// counter was purged starts again above the floor and at the database's
    /// clock, so its tokens keep increasing. Range `min_token_horizon` (2 h) ..
    /// 3650 days: a shorter horizon could purge a counter under an acquire
    /// statement still running and repeat a token, and is refused. Empty: never
    /// purge counters (while clients of sqlock older than this version still
    /// acquire on the database: they would start a purged name again at 1).
    /// @warning the horizon must also be longer than any forward step of the
    /// database clock; see docs/operations.md.
    std::optional<std::chrono::milliseconds> token_horizon = std::chrono::hours(24);

    /// Count instead of deleting. A dry pass looks at one batch only (the
    /// `batch_size` rows that the next pass would delete first, and one batch of
    /// counters): see `reap_result::complete`.
    bool dry_run = false;

    /// Row locks (`row_locker`) are released by their transactions, never by
    /// the reaper; it reports those whose transaction has been open longer than
    /// this, where the engine can tell (PostgreSQL: pg_stat_activity/pg_locks;
    /// elsewhere nothing is reported). Empty: no check.
    std::optional<std::chrono::milliseconds> row_lock_warning = std::chrono::minutes(15);
    /// Receives the loud warnings (live rows purged, or in a dry run that
    /// would be purged, by `max_age`; row locks held longer than
    /// `row_lock_warning`), one line each. Empty: they go to
    /// `std::clog`. Called on the thread that runs `reap_once`; must not throw.
    std::function<void(std::string_view message)> on_warning;
};

/// What one pass of the reaper found and did.
struct SQLOCK_EXPORT reap_result {
    /// Rows deleted (in a dry run: rows that would be deleted).
    std::uint64_t purged = 0;
    /// Of `purged`, rows that had not expired: purged by `max_age` (their
    /// holders lose their leases). Always 0 without `max_age`.
    std::uint64_t live_purged = 0;
    /// Statements run (a pass over a clean table runs one).
    std::uint64_t batches = 0;
    /// Fencing-token counters deleted by `reaper_options::token_horizon` (in a
    /// dry run: that would be deleted). Always 0 without a horizon.
    std::uint64_t tokens_purged = 0;
    /// Batches (statements or transactions) of the counter purge; 0 without a horizon.
    std::uint64_t token_batches = 0;
    /// The earliest `expires_at` among the purged rows (database clock);
    /// empty when nothing was purged. How far behind the reaper is.
    std::optional<db_time> oldest_expiry;
    /// Batches (lock rows and counters) run at `reaper_options::idle_batch_size`
    /// because no row of the lock table was live.
    std::uint64_t idle_batches = 0;
    /// How long the pass took (this host's steady clock), its pauses included.
    std::chrono::microseconds duration{0};
    /// Of `duration`, the time spent in `reaper_options::duty_cycle` pauses.
    std::chrono::microseconds paused{0};
    /// True when the pass ended on a batch smaller than `batch_size`, for the
    /// lock rows and for the counters: at that moment no more were due. False when it was stopped through its
    /// `std::stop_token`, and for a dry run that filled its one batch (there
    /// may be more).
    bool complete = false;
    /// True when the pass ended because its `std::stop_token` was requested.
    bool stopped = false;
    /// The pass only counted (`reaper_options::dry_run`).
    bool dry_run = false;
    /// Row-lock transactions open longer than `reaper_options::row_lock_warning`
    /// (PostgreSQL only; each one is also reported through `on_warning`).
    std::uint64_t long_row_locks = 0;
};

/// Checks `options` as the `reaper` constructor does, without a store: for
/// tools that reject bad flags before connecting to anything.
/// @throws usage_error naming the option that is out of range and its range
SQLOCK_EXPORT void validate(reaper_options const& options);

/// Purges expired rows from a store's lock table (`<prefix>_locks`).
///
/// Taking over an expired row on acquire already frees a dead holder's lock
/// after its TTL; the reaper removes the rows of names nobody asks for again,
/// so the table stays small, and tells how far behind it was.
///
/// Each batch is one atomic conditional DELETE on the database's clock
/// (`expires_at < now - grace`, the condition checked again on every row as it
/// is deleted), so a lease renewed a moment before can never be deleted. On
/// PostgreSQL rows are picked with `FOR UPDATE SKIP LOCKED`: a row being
/// renewed or taken over at that moment is left for the next pass.
///
/// The reaper takes no lock of its own: two reapers on one database (two hosts,
/// or a cron job and a daemon) are safe; each row is deleted and counted by
/// exactly one of them.
///
/// Then it purges fencing-token counters (`<prefix>_tokens`) older than
/// `reaper_options::token_horizon`, batch by batch; each batch raises the table's
/// floor to the highest token it deletes, atomically with the delete, and a
/// counter created later starts above the floor and at the database's clock, so
/// tokens keep increasing after a counter is purged.
///
/// Thread safety: `reap_once` may be called from several threads at once (each
/// call borrows its own pooled connection for each batch); the options are
/// immutable.
class SQLOCK_EXPORT reaper {
public:
    /// A reaper for `db`'s lock table. Keeps the store's internals alive.
    /// @throws usage_error an option is out of range (no I/O is done)
    explicit reaper(store const& db, reaper_options options = {});

    /// One pass: delete batches of due rows until a batch comes back smaller
    /// than `batch_size`, then batches of due counters the same way.
    /// @throws backend_unavailable the database could not be reached (batches
    ///         deleted before that stay deleted)
    /// @throws schema_missing      the lock table is missing
    /// @throws backend_error       the database refused the statement
    /// @throws timeout             no pooled connection became free within the
    ///         store's `pool_wait`
    [[nodiscard]] reap_result reap_once();

    /// As `reap_once()`, but checks `stop` before every batch and ends the
    /// pass early (`reap_result::stopped`) once it is requested: stopping
    /// never waits for more than the batch in flight. A stop already requested
    /// runs no batch at all.
    /// @throws as `reap_once()`
    [[nodiscard]] reap_result reap_once(std::stop_token stop);

    /// The options this reaper was built with.
    [[nodiscard]] reaper_options const& options() const noexcept { return options_; }

private:
    reap_result pass(std::stop_token const& stop);  // reap_once, without its metrics
    void warn(std::string const& message) const;

    std::shared_ptr<detail::store_impl> store_;
    reaper_options options_;
};

}  // namespace sqlock
