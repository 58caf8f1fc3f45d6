// Internal: one held lock row, shared by every hold on it (lease::reenter),
// watched by its locker's renewer through a weak reference.
#pragma once

#include "detail/grant.hpp"
#include "detail/metrics.hpp"

#include <sqlock/lease.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <stop_token>
#include <string>

namespace sqlock::detail {

class locker_impl;

class lease_row : public std::enable_shared_from_this<lease_row> {
public:
    using clock = std::chrono::steady_clock;

    lease_row(std::shared_ptr<locker_impl> locker, std::string name, std::string owner, grant const& g,
              std::chrono::milliseconds ttl, clock::time_point valid_until);
    virtual ~lease_row() = default;
    lease_row(lease_row const&) = delete;
    lease_row& operator=(lease_row const&) = delete;

    std::string const& name() const noexcept { return name_; }
    std::string const& owner() const noexcept { return owner_; }
    std::int64_t token() const noexcept { return token_; }
    db_time created_at() const noexcept { return created_at_; }
    db_time expires_at() const noexcept { return db_time(std::chrono::microseconds(expires_us_.load())); }
    clock::time_point valid_until() const noexcept { return clock::time_point(clock::duration(valid_until_.load())); }
    std::chrono::milliseconds ttl() const noexcept { return std::chrono::milliseconds(ttl_ms_.load()); }

    /// Lost when the safe deadline has passed, even before the renewer notices.
    lease_state state() const noexcept;
    /// state() as of `now` (the renewer reads the clock once for all its rows).
    lease_state state_at(clock::time_point now) const noexcept;
    std::stop_token stop_token() const noexcept { return stop_.get_token(); }

    /// Another hold on this row (lease::reenter). False when the lease is no
    /// longer held (the database says the row is not ours: it is then marked lost).
    bool add_hold();

    /// True in the process that acquired the row; false in a forked child,
    /// which must never release, renew or touch the parent's connections.
    bool in_owning_process() const noexcept;

    /// Drop one hold; the last one deletes the row.
    /// As release_hold() for the last hold, but without waiting for a renewal of this row in flight on
    /// another thread where the row's delete is a conditional statement of its own
    /// (deletes_beside_renewal(): the table lock): it deletes beside it, and the renewal, when it
    /// answers, finds the row released. A majority's member rows: a slow member's renewal can run past
    /// the row's expiry, and a release that queued behind it would leave the row to expire.
    void release_now();
    void release_hold();

    /// Extend to `ttl` from now. Throws lease_lost (and marks the row lost) when
    /// refused; backend_unavailable (and marks it in doubt) when unreachable.
    void renew(std::chrono::milliseconds ttl);

    /// Idempotent; fires the stop token, the on_lost hook and the event once.
    void mark_lost(std::string_view why, loss_cause cause = loss_cause::refused) noexcept;

    /// Record this lease in `s` (its grant; later its state, renewals and end). Before it is watched.
    void count_in(series* s) noexcept {
        series_ = s;
        held_since_ = clock::now();
        s->leases.fetch_add(1, std::memory_order_relaxed);
    }
    /// The metrics series this lease records into; null for a row no lease was made of.
    series* metric_series() const noexcept { return series_; }
    /// The reason given when the row was first marked lost (empty until then).
    std::string lost_why() const;

    /// The locker this row belongs to.
    locker_impl& locker() const noexcept { return *locker_; }

    /// The renewer's schedule of this row, guarded by its locker's watch mutex.
    struct renewal_schedule {
        clock::time_point next;                                    // when the next renewal is due
        bool queued = false;                                       // handed to the renewal thread, not finished yet
        clock::time_point renew_until = clock::time_point::max();  // locker_options::max_hold
    };
    renewal_schedule& schedule() const noexcept { return schedule_; }

protected:
    // The strategy's statements. Each returns false when the row was not ours.
    virtual bool db_delete() = 0;
    /// Whether db_delete() may run while db_renew() is in flight on another thread.
    [[nodiscard]] virtual bool deletes_beside_renewal() const noexcept { return false; }
    virtual bool db_add_hold() = 0;
    virtual bool db_drop_hold() = 0;
    /// The new expiry (and the database's now), or empty when refused.
    virtual std::optional<renewal> db_renew(std::chrono::milliseconds ttl) = 0;

    /// A renewal in flight lost its connection or its answer: in doubt (if held)
    /// until it succeeds or the safe deadline passes.
    void note_in_doubt() noexcept;
    /// The cause of a loss found by a statement: the database refused, or (note_gone) the session ended.
    loss_cause gone_cause() const noexcept { return gone_.empty() ? loss_cause::refused : loss_cause::session_ended; }

    /// Why a statement of the strategy (returning "not ours") found the row
    /// gone, when that was not the database refusing it (a row lock's failed
    /// keep-alive or closed session). Called with the row's statement lock held.
    void note_gone(std::string why) { gone_ = std::move(why); }

    /// A majority lease's member that granted after the lease was handed out: the
    /// lease's expiry is the earliest of its members', so it only moves earlier here.
    void lower_expiry(std::int64_t expires_us) noexcept {
        auto now = expires_us_.load();
        while (expires_us < now && !expires_us_.compare_exchange_weak(now, expires_us)) {}
    }

    /// Runs `f` under the row's statement lock unless a statement holds it
    /// now (that statement then finds out for itself); true when `f` ran.
    template <class F>
    bool unless_in_statement(F&& f) {
        std::unique_lock lock(io_, std::try_to_lock);
        if (!lock.owns_lock()) return false;
        f();
        return true;
    }

    std::shared_ptr<locker_impl> locker_;

private:
    enum : int { st_held, st_in_doubt, st_lost, st_released };
    /// The state moves from held to in doubt, or back; counted in the metrics.
    void to_in_doubt() noexcept;
    void to_held() noexcept;
    /// The lease ended (released or lost) from state `previous`: counted in the metrics.
    void count_end(int previous) noexcept;

    std::string name_;
    std::string owner_;
    std::int64_t token_;
    db_time created_at_;
    std::atomic<std::int64_t> expires_us_;
    std::atomic<clock::rep> valid_until_;
    std::atomic<std::int64_t> ttl_ms_;
    std::atomic<int> state_{st_held};
    std::stop_source stop_;
    std::mutex io_;                      // one statement at a time per row: renewals never race a release
    std::atomic<bool> renewing_{false};  // a renewal's statement is in flight (release_now)
    std::string gone_;                   // guarded by io_: see note_gone
    mutable std::mutex why_mutex_;       // only for lost_why_: mark_lost must not wait on I/O
    std::string lost_why_;               // the first reason given to mark_lost
    int holds_ = 1;                      // guarded by io_
    int pid_;                            // the acquiring process
    mutable renewal_schedule schedule_;  // guarded by the locker's watch mutex
    series* series_ = nullptr;           // set once, before the row is shared
    clock::time_point held_since_;
};

}  // namespace sqlock::detail
