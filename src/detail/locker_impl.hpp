// Internal: what every locker strategy shares — validation, owner ids, the
// waiting loop, the renewer (a deadline thread and, with auto_renew, two
// renewal threads), the majority member interface, counters and hooks.
#pragma once

#include "detail/lease_row.hpp"
#include "detail/metrics.hpp"

#include <sqlock/lease.hpp>
#include <sqlock/options.hpp>
#include <sqlock/stats.hpp>

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <stop_token>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

namespace sqlock::detail {

class locker_impl : public std::enable_shared_from_this<locker_impl> {
public:
    using clock = std::chrono::steady_clock;

    /// Records into `options.metrics`, else into `store_metrics` (its store's),
    /// else into the process's, as `engine` and `kind`.
    /// @throws usage_error when an option is out of range.
    locker_impl(locker_options options, std::shared_ptr<metrics> store_metrics, engine_label engine, kind_label kind);
    virtual ~locker_impl();
    locker_impl(locker_impl const&) = delete;
    locker_impl& operator=(locker_impl const&) = delete;

    /// The bounds of one acquire attempt.
    struct attempt {
        clock::time_point deadline;        ///< the strategy may wait in the engine until then
        std::stop_token cancel;            ///< and must return early once this is requested
        std::optional<kind_label> kind{};  ///< what the attempt is for, in the metrics; the locker's own kind if empty
        /// A try (no wait in the engine) on behalf of a waiting caller (a semaphore's slot): a
        /// pooled connection is waited for until then at most, and not once `cancel` is
        /// requested. Empty: a try waits for one only lent out up to the store's pool_wait.
        std::optional<clock::time_point> connection_deadline{};
    };

    /// One attempt of the strategy's acquire. `name` is already validated.
    [[nodiscard]] std::optional<lease> try_acquire(std::string const& name);
    [[nodiscard]] std::optional<lease> try_acquire(std::string const& name, attempt const& bounds);

    /// Attempts until `wait` runs out, sleeping between them until a release
    /// is announced or the backoff (capped exponential, full jitter) expires.
    [[nodiscard]] lease acquire(std::string const& name, std::chrono::milliseconds wait, std::stop_token cancel);

    /// The waiting loop of `acquire` around any attempt: `attempt_once(bounds)`
    /// returns a lease or empty when busy; between attempts it sleeps until a
    /// release of `wake_on()` is announced or the backoff expires. `what` names
    /// the wait in the timeout and cancel messages ("lock 'x'"); `kind`, in the
    /// metrics (the locker's own kind if empty), and is passed on in each attempt.
    [[nodiscard]] lease wait_for(std::string const& name, std::string const& what, std::chrono::milliseconds wait,
                                 std::stop_token const& cancel,
                                 std::function<std::optional<lease>(attempt const&)> const& attempt_once,
                                 std::function<std::string()> const& wake_on = {}, std::optional<kind_label> kind = {});

    /// One attempt as `owner` (an election's owner carries the leader's value).
    [[nodiscard]] std::optional<lease> try_acquire_as(std::string const& name, std::string const& owner,
                                                      attempt const& bounds);

    /// Watch `row` (renewals, loss) and count it acquired in `s` (its attempt's
    /// series; null when metrics are disabled): a lease on it.
    [[nodiscard]] lease adopt(std::shared_ptr<lease_row> row, series* s);

    /// One attempt at a shared lease of `gate` as `reader` (acquire_shared_row), counted as kind rw_shared.
    [[nodiscard]] std::optional<lease> try_acquire_shared(std::string const& gate, std::string const& reader,
                                                          attempt const& bounds);

    /// The metrics series of `name` as `kind` (the locker's own if empty).
    [[nodiscard]] series* series_for(std::optional<kind_label> kind, std::string_view name) const noexcept {
        return metrics_->impl().find(engine_, kind.value_or(kind_), name);
    }

    /// The owner id for a lock taken by the calling thread.
    [[nodiscard]] std::string owner_for_this_thread() const;

    // ---- Coordination (docs/coordination.md): what a semaphore, a read-write
    // lock and an election ask of the locker beneath them.

    /// True for the table lock, whose rows can be counted, renamed and read.
    [[nodiscard]] virtual bool keeps_lock_rows() const noexcept { return false; }
    /// The database of a table or row locker; null for composite lockers.
    [[nodiscard]] class store_impl* database() noexcept { return member_store(); }
    /// True when a held lease locks its whole database for writing (SQLite's row lock).
    [[nodiscard]] bool locks_database() const noexcept { return locks_whole_database(); }
    /// A shared lease of a read-write lock: take `gate` (the lock of the name)
    /// and turn its row into `reader`, atomically; null when the gate is busy.
    /// Only where keeps_lock_rows().
    [[nodiscard]] virtual std::shared_ptr<lease_row> acquire_shared_row(std::string const& gate,
                                                                        std::string const& reader,
                                                                        attempt const& bounds);

    /// True when this locker holds, in this process, a live lease (held or in
    /// doubt) of `owner` whose name starts with `prefix`: the rows a database count calls "mine"
    /// may include one whose grant committed but never reached this process
    /// (the server died before answering), which nobody here holds.
    [[nodiscard]] bool holds_with_prefix(std::string_view prefix, std::string const& owner) const;

    [[nodiscard]] locker_options const& options() const noexcept { return options_; }
    [[nodiscard]] locker_stats stats() const noexcept;

    // ---- As a majority member (docs/majority.md, "The member interface"): all
    // that a majority locker asks of the lockers it is made of. It grants with
    // acquire_unwatched(), renews and releases through the granted row's own
    // renew() and release_hold(), and settles fencing tokens with the counter
    // operations below. Table and row lockers provide them on their database
    // (src/majority_member.cpp, through member_store()); a locker without one
    // says why in member_refusal() and is refused as a member.

    /// One attempt of the strategy's acquire whose row nobody renews but its
    /// caller (a majority locker renews its members' rows itself). Null when busy.
    [[nodiscard]] std::shared_ptr<lease_row> acquire_unwatched(std::string const& name, attempt const& bounds) {
        return acquire_row(name, owner_for_this_thread(), bounds);
    }

    /// A member's identity and its counter of one lock.
    struct member_token {
        member_identity identity;
        std::int64_t value = 0;  ///< 0 when the lock has no counter there yet
    };
    /// A member's identity and every counter it holds.
    struct member_counters {
        member_identity identity;
        std::vector<std::pair<std::string, std::int64_t>> counters;
    };

    /// Why this locker cannot be a majority member (a sentence for a usage_error); empty when it can.
    [[nodiscard]] virtual std::optional<std::string> member_refusal();
    /// The member's database, for messages.
    [[nodiscard]] virtual std::string member_label();
    /// Equal for two lockers on the same database and tables (a majority needs different ones).
    [[nodiscard]] virtual std::string member_key();

    // The counter operations wait for the member no later than `deadline`.
    // They throw sqlock's errors: schema_missing when the member has no
    // identity row (its tables were not applied), backend_unavailable,
    // timeout or in_doubt when it could not answer.

    /// The member's identity and its counter of `name`.
    [[nodiscard]] virtual member_token read_token(std::string const& name, clock::time_point deadline);
    /// Raise the counter of `name` to `token`, on the member whose identity is
    /// `member_id` only; true when this call raised it (false when it was
    /// already there or higher, or the identity changed).
    [[nodiscard]] virtual bool write_token(std::string const& name, std::int64_t token, std::string const& member_id,
                                           clock::time_point deadline);
    /// The write that comes with a grant: raise the counter of `name` to `token` where the member's
    /// present identity has joined; when that did not win, the identity and the counter (a read).
    struct member_fast_write {
        bool won = false;
        member_token read;  // when not won
    };
    [[nodiscard]] virtual member_fast_write write_or_read_token(std::string const& name, std::int64_t token,
                                                                clock::time_point deadline);
    /// Every counter of the member, with its identity.
    [[nodiscard]] virtual member_counters read_counters(clock::time_point deadline);
    /// Seed the member whose identity is `member_id` with the counters `seed` (each
    /// raised, never lowered) and record it as joined; false when it was not
    /// (the identity changed, or it had joined meanwhile).
    [[nodiscard]] virtual bool join(std::string const& member_id,
                                    std::vector<std::pair<std::string, std::int64_t>> const& seed,
                                    clock::time_point deadline);

    /// The end of the local validity of a renewal sent at `sent` with `ttl`.
    [[nodiscard]] virtual clock::time_point validity_end(clock::time_point sent,
                                                         std::chrono::milliseconds ttl) const noexcept {
        return valid_until(sent, ttl);
    }

    // Called by lease rows.
    void on_released(lease_row const& row, bool last) noexcept;  // last: wake waiters
    void on_reentered(lease_row const& row) noexcept;
    void on_renewed(lease_row const& row) noexcept;
    void on_renew_failed(lease_row const& row, std::string_view why) noexcept;
    void on_lost(lease_row const& row, std::string_view why) noexcept;  // after the row counted its end
    void emit(lease_event::kind what, std::string_view name, std::int64_t token, std::string_view detail = {}) noexcept;

    /// The local validity of a lease whose acquire (or renewal) was sent at
    /// `sent` with `ttl`: the TTL less a drift margin for clock-rate differences.
    [[nodiscard]] static clock::time_point valid_until(clock::time_point sent, std::chrono::milliseconds ttl) noexcept;

protected:
    /// The strategy's acquire of a lock this owner does not hold; null when
    /// busy. A strategy whose engine queues waiters may wait until
    /// `bounds.deadline`; others try once.
    [[nodiscard]] virtual std::shared_ptr<lease_row> acquire_row(std::string const& name, std::string const& owner,
                                                                 attempt const& bounds) = 0;

    /// A number that changes whenever a release of `name` is announced.
    [[nodiscard]] virtual std::uint64_t release_generation(std::string const& name) = 0;

    /// Sleep until `until`, a release of `name` announced after `generation`,
    /// or `cancel`.
    virtual void wait_for_release(std::string const& name, std::uint64_t generation, clock::time_point until,
                                  std::stop_token const& cancel) = 0;

    /// Announce a release of `name` to this process's waiters.
    virtual void announce_release(std::string const& name) noexcept = 0;

    /// A random id for one acquire attempt (stored in the row it may write).
    [[nodiscard]] static std::int64_t new_attempt_id();

    /// The database of a table or row locker, which serves the member
    /// interface above; null for composite lockers.
    [[nodiscard]] virtual class store_impl* member_store() noexcept { return nullptr; }
    /// True when a held lease locks its whole database for writing (SQLite's
    /// row lock): the member's token counter could then not be written.
    [[nodiscard]] virtual bool locks_whole_database() const noexcept { return false; }

    locker_options options_;

private:
    // The renewer is threads sharing this state (so they can outlive a
    // locker whose last reference they dropped themselves): the deadline thread
    // schedules renewals and reports a lease lost the moment its safe deadline
    // passes, and never does I/O; the renewal thread performs the renewals, so
    // a renewal stuck on a hung server delays no loss signal.
    // A watched lease's schedule lives in the row itself (lease_row::schedule,
    // guarded by `mutex`), so a renewal reschedules it without a search.
    struct watched {
        std::weak_ptr<lease_row> row;
    };
    struct watch_state {
        std::mutex mutex;
        std::condition_variable_any cv;        // the deadline thread
        std::condition_variable_any renew_cv;  // the renewal thread
        std::vector<watched> rows;
        std::deque<std::weak_ptr<lease_row>> renewals;  // queue for the renewal thread
        bool changed = false;
        bool auto_renew = true;
        clock::time_point sleeping_until = clock::time_point::min();  // the deadline thread's next wake-up
    };
    void watch(std::shared_ptr<lease_row> const& row);
    /// How late past its due time a renewal may be queued, so that one wake-up
    /// of the deadline thread serves the renewals due close together.
    static clock::duration renewal_slack(std::chrono::milliseconds ttl) noexcept;
    /// Under `mutex`: wake the deadline thread if it sleeps past `due`.
    static bool wake_for(watch_state& state, clock::time_point due) noexcept;
    /// When `row`'s next renewal is due, its grant or renewal having answered at `now`.
    static clock::time_point next_renewal(lease_row const& row, clock::time_point now) noexcept;
    static void run_deadlines(std::shared_ptr<watch_state> const& state, std::stop_token const& stop);
    static void run_renewals(std::shared_ptr<watch_state> const& state, std::stop_token const& stop);

    std::string host_;
    std::string instance_;
    std::shared_ptr<metrics> metrics_;
    engine_label engine_;
    kind_label kind_;

    /// One attempt through `grant` (a row, or null when busy), counted in the metrics as `kind`.
    template <class Grant>
    std::optional<lease> counted_attempt(std::string const& name, std::optional<kind_label> kind, Grant&& grant);

    struct counters {
        std::atomic<std::uint64_t> acquired{0}, busy{0}, timeouts{0}, cancelled{0}, renewed{0}, renew_failures{0},
            lost{0}, released{0};
        std::array<std::atomic<std::uint64_t>, locker_stats::wait_bounds.size() + 1> waits{};
    } counters_;

    std::shared_ptr<watch_state> watch_ = std::make_shared<watch_state>();
    std::mutex watchdog_mutex_;
    // Two renewal threads: a renewal waits for its commit, and two in flight
    // share the server's group commit (the store keeps two reserved connections).
    static constexpr std::size_t renewal_threads = 2;
    std::array<std::jthread, renewal_threads> renewers_;  // stopped and joined after the deadline thread
    std::jthread watchdog_;                               // last member: stopped and joined first

    void record_wait(clock::duration waited) noexcept;
};

/// The separator of the library's own rows in the lock table (semaphore
/// permits, shared leases) and of an election owner's value: never in a name
/// or an owner a user gives.
inline constexpr char reserved_separator = '\x1f';

/// @throws usage_error unless `name` is 1..255 bytes of valid UTF-8 without NUL or U+001F.
void validate_name(std::string_view name);
/// As validate_name, for a name that gets a suffix of `suffix_bytes` (at most
/// 255 - suffix_bytes bytes); `what` names it in messages ("semaphore name").
void validate_name(std::string_view name, std::size_t suffix_bytes, std::string_view what);
/// As validate_name, but U+001F is allowed: a row of the lock table as listed
/// (a semaphore's permit, a shared lease), for the operator's force_release.
void validate_row_name(std::string_view name);
/// @throws usage_error unless ttl is within 10 ms .. 7 days.
void validate_ttl(std::chrono::milliseconds ttl);

}  // namespace sqlock::detail
