#include "detail/lease_row.hpp"
#include "detail/locker_impl.hpp"
#include "detail/process.hpp"

#include <sqlock/errors.hpp>
#include <sqlock/lease.hpp>

#include <unistd.h>

namespace sqlock {

std::string_view to_string(lease_state s) noexcept {
    switch (s) {
        case lease_state::held: return "held";
        case lease_state::in_doubt: return "in_doubt";
        case lease_state::lost: return "lost";
        case lease_state::released: return "released";
    }
    return "unknown";
}

namespace detail {

lease_row::lease_row(std::shared_ptr<locker_impl> locker, std::string name, std::string owner, grant const& g,
                     std::chrono::milliseconds ttl, clock::time_point valid_until)
    : locker_(std::move(locker)),
      name_(std::move(name)),
      owner_(std::move(owner)),
      token_(g.token),
      created_at_(std::chrono::microseconds(g.created_us)),
      expires_us_(g.expires_us),
      valid_until_(valid_until.time_since_epoch().count()),
      ttl_ms_(ttl.count()),
      pid_(process_id()) {}

bool lease_row::in_owning_process() const noexcept { return process_id() == pid_; }

lease_state lease_row::state() const noexcept { return state_at(clock::now()); }

lease_state lease_row::state_at(clock::time_point now) const noexcept {
    switch (state_.load(std::memory_order_acquire)) {
        case st_released: return lease_state::released;
        case st_lost: return lease_state::lost;
        default: break;
    }
    if (now >= valid_until()) return lease_state::lost;
    return state_.load(std::memory_order_acquire) == st_in_doubt ? lease_state::in_doubt : lease_state::held;
}

void lease_row::mark_lost(std::string_view why, loss_cause cause) noexcept {
    int s = state_.load();
    do {
        if (s == st_lost || s == st_released) return;
    } while (!state_.compare_exchange_weak(s, st_lost));
    if (series_ != nullptr) series_->losses[static_cast<std::size_t>(cause)].fetch_add(1, std::memory_order_relaxed);
    count_end(s);
    try {
        std::lock_guard lock(why_mutex_);
        lost_why_ = why;
    } catch (...) {  // the reason is a courtesy; the loss is reported regardless
    }
    // Counters, on_lost and the event first: whoever wakes on the stop token
    // finds them already done.
    locker_->on_lost(*this, why);
    stop_.request_stop();
}

std::string lease_row::lost_why() const {
    std::lock_guard lock(why_mutex_);
    return lost_why_;
}

void lease_row::note_in_doubt() noexcept { to_in_doubt(); }

void lease_row::to_in_doubt() noexcept {
    int expected = st_held;
    if (state_.compare_exchange_strong(expected, st_in_doubt) && series_ != nullptr)
        series_->in_doubt.fetch_add(1, std::memory_order_relaxed);
}

void lease_row::to_held() noexcept {
    int expected = st_in_doubt;
    if (state_.compare_exchange_strong(expected, st_held) && series_ != nullptr)
        series_->in_doubt.fetch_sub(1, std::memory_order_relaxed);
}

void lease_row::count_end(int previous) noexcept {
    if (series_ == nullptr) return;
    series_->leases.fetch_sub(1, std::memory_order_relaxed);
    if (previous == st_in_doubt) series_->in_doubt.fetch_sub(1, std::memory_order_relaxed);
    series_->hold.observe(clock::now() - held_since_);
}

bool lease_row::add_hold() {
    std::lock_guard lock(io_);
    if (state_.load() == st_lost || state_.load() == st_released || clock::now() >= valid_until()) return false;
    if (!db_add_hold()) {
        mark_lost(gone_.empty() ? "a reentrant acquire found the row expired or taken over" : gone_, gone_cause());
        return false;
    }
    ++holds_;
    return true;
}

void lease_row::release_hold() {
    auto lost_error = [this](std::string why) {
        if (why.empty()) why = "it expired and was taken over, or was released by someone else";
        return lease_lost("sqlock: lock '" + name_ + "' (token " + std::to_string(token_) +
                          ") was no longer held by this owner at release: " + why + "; restart the critical section");
    };
    std::unique_lock lock(io_);
    if (state_.load() == st_released) return;
    auto const deadline = valid_until();
    // Past the safe deadline the lease ran out, whether or not the deadline
    // thread has already marked it lost: say so rather than "taken over".
    bool const ran_out = clock::now() >= deadline;
    if (state_.load() == st_lost || ran_out) {
        try {
            (void)db_delete();  // polite: free the row at once if it is somehow still ours
        } catch (...) {}
        lock.unlock();
        if (!ran_out) throw lost_error(lost_why());
        auto late = std::chrono::duration_cast<std::chrono::milliseconds>(clock::now() - deadline).count();
        mark_lost("its validity ran out before it was released", loss_cause::expired);
        throw lease_lost("sqlock: lock '" + name_ + "' (token " + std::to_string(token_) +
                         ") had run out before release: its safe validity ended " + std::to_string(late) +
                         " ms ago, so another owner may have held it meanwhile; restart the critical section "
                         "(and renew, or raise the ttl, for work this long)");
    }
    bool last = holds_ == 1;
    bool ours = false;
    try {
        ours = last ? db_delete() : db_drop_hold();
    } catch (error const&) {
        // The outcome is unknown (the DELETE may have run): in doubt, not held,
        // until a renewal settles it or the safe deadline passes.
        to_in_doubt();
        throw;
    }
    if (!ours) {
        auto why = gone_.empty()
                       ? std::string("release found the row expired and taken over, or released by someone else")
                       : gone_;
        auto const cause = gone_cause();
        lock.unlock();
        mark_lost(why, cause);
        throw lost_error(why);
    }
    if (last) {
        // The deadline thread may have marked it lost meanwhile (and counted its end).
        if (auto const previous = state_.exchange(st_released); previous == st_held || previous == st_in_doubt)
            count_end(previous);
    } else {
        --holds_;
    }
    lock.unlock();
    locker_->on_released(*this, last);
}

void lease_row::release_now() {
    if (deletes_beside_renewal()) {
        std::unique_lock lock(io_, std::try_to_lock);
        // Only beside a renewal: a release in flight (an earlier release() that did not return in
        // time) is waited for, and its outcome counts.
        if (!lock.owns_lock() && renewing_.load() && state_.load() != st_released) {
            // A renewal holds the statement lock. Released from here on: a renewal that answers
            // later changes nothing (a loss is not reported for a row let go), and the delete,
            // by owner and token, is right whichever statement the database runs first.
            auto const previous = state_.exchange(st_released);
            if (previous == st_held || previous == st_in_doubt) count_end(previous);
            if (!db_delete())
                throw lease_lost("sqlock: lock '" + name_ + "' (token " + std::to_string(token_) +
                                 ") was no longer held by this owner at release (deleted beside a renewal in "
                                 "flight): it expired and was taken over, or was released by someone else");
            locker_->on_released(*this, true);
            return;
        }
    }
    release_hold();
}

void lease_row::renew(std::chrono::milliseconds ttl) {
    std::unique_lock lock(io_);
    auto s = state_.load();
    if (s == st_released)
        throw usage_error("sqlock: lock '" + name_ + "' was already released: acquire it again instead of renewing");
    if (s == st_lost || clock::now() >= valid_until()) {
        lock.unlock();
        mark_lost("its validity ran out before a renewal succeeded", loss_cause::expired);
        auto why = lost_why();  // empty while another thread is still marking it lost
        throw lease_lost("sqlock: lock '" + name_ + "' (token " + std::to_string(token_) + ") is lost: " +
                         (why.empty() ? std::string("its validity ran out") : why) + "; restart the critical section");
    }
    auto sent = clock::now();
    std::optional<renewal> r;
    struct renewing_flag {
        std::atomic<bool>& flag;
        explicit renewing_flag(std::atomic<bool>& f) : flag(f) { flag.store(true); }
        ~renewing_flag() { flag.store(false); }
        renewing_flag(renewing_flag const&) = delete;
        renewing_flag& operator=(renewing_flag const&) = delete;
    };
    try {
        renewing_flag const renewing(renewing_);
        r = db_renew(ttl);
    } catch (error const& e) {
        // Unreachable: in doubt until the safe deadline, which the renewer watches.
        to_in_doubt();
        lock.unlock();
        locker_->on_renew_failed(*this, e.what());
        throw;
    }
    if (!r) {
        auto why = gone_.empty() ? std::string("the database refused the renewal: the row expired or is someone else's")
                                 : gone_;
        auto const cause = gone_cause();
        lock.unlock();
        mark_lost(why, cause);
        throw lease_lost("sqlock: lock '" + name_ + "' (token " + std::to_string(token_) +
                         ") could not be renewed: " + why + "; restart the critical section");
    }
    if (state_.load() == st_lost || clock::now() >= valid_until()) {
        // A late answer: the lease was already reported lost (or its validity ran
        // out while the renewal was in flight). Lost stays lost.
        lock.unlock();
        mark_lost("its validity ran out before a renewal succeeded", loss_cause::expired);
        throw lease_lost("sqlock: lock '" + name_ + "' (token " + std::to_string(token_) +
                         ") is lost: the renewal answered after its validity had run out; restart the critical "
                         "section");
    }
    expires_us_.store(r->expires_us);
    ttl_ms_.store(ttl.count());
    valid_until_.store(locker_->validity_end(sent, ttl).time_since_epoch().count());
    to_held();
    lock.unlock();
    locker_->on_renewed(*this);
}

}  // namespace detail

namespace {
std::string const empty;
}

lease::lease(std::shared_ptr<detail::lease_row> row) noexcept : row_(std::move(row)) {}

lease::lease(lease&& other) noexcept : row_(std::move(other.row_)), ended_(std::exchange(other.ended_, ending::none)) {}

lease& lease::operator=(lease&& other) noexcept {
    if (this != &other) {
        lease old(std::move(*this));  // releases the lease being replaced
        row_ = std::move(other.row_);
        ended_ = std::exchange(other.ended_, ending::none);
    }
    return *this;
}

lease::~lease() {
    if (!row_ || ended_ != ending::none) return;
    if (!row_->in_owning_process()) return;  // a forked child: the lease is the parent's
    try {
        row_->release_hold();
    } catch (...) {
        // Never throw from a destructor: a row left behind expires by its TTL.
    }
}

std::string const& lease::name() const noexcept { return row_ ? row_->name() : empty; }
std::string const& lease::owner() const noexcept { return row_ ? row_->owner() : empty; }
std::int64_t lease::token() const noexcept { return row_ ? row_->token() : 0; }
db_time lease::created_at() const noexcept { return row_ ? row_->created_at() : db_time{}; }
db_time lease::expires_at() const noexcept { return row_ ? row_->expires_at() : db_time{}; }

lease_state lease::state() const noexcept {
    if (!row_ || ended_ == ending::released) return lease_state::released;
    if (ended_ == ending::lost) return lease_state::lost;
    return row_->state();
}

std::chrono::steady_clock::duration lease::remaining() const noexcept {
    auto s = state();
    if (s != lease_state::held && s != lease_state::in_doubt) return {};
    auto left = row_->valid_until() - std::chrono::steady_clock::now();
    return left > std::chrono::steady_clock::duration::zero() ? left : std::chrono::steady_clock::duration::zero();
}

bool lease::held() const noexcept {
    auto s = state();
    return s == lease_state::held || s == lease_state::in_doubt;
}

bool lease::lost() const noexcept { return state() == lease_state::lost; }

std::stop_token lease::stop_token() const noexcept { return row_ ? row_->stop_token() : std::stop_token{}; }

void lease::renew() {
    if (row_) renew(row_->locker().options().ttl);
    else renew(std::chrono::milliseconds(0));
}

lease lease::reenter() {
    if (!row_ || ended_ == ending::released)
        throw usage_error("sqlock: reenter() on a released or moved-from lease: acquire the lock again");
    if (!row_->in_owning_process())
        throw usage_error("sqlock: lock '" + row_->name() +
                          "' belongs to the process that acquired it, not to "
                          "this forked child: acquire a lock of the child's own");
    if (ended_ == ending::lost || !row_->add_hold())
        throw lease_lost("sqlock: lock '" + row_->name() + "' (token " + std::to_string(row_->token()) +
                         ") is no longer held, so it cannot be re-entered; restart the critical section");
    row_->locker().on_reentered(*row_);
    return lease(row_);
}

void lease::renew(std::chrono::milliseconds ttl) {
    detail::validate_ttl(ttl);
    if (row_ && !row_->in_owning_process())
        throw usage_error("sqlock: lock '" + row_->name() +
                          "' belongs to the process that acquired it, not to "
                          "this forked child: it cannot be renewed here");
    if (ended_ == ending::lost)
        throw lease_lost("sqlock: lock '" + row_->name() + "' was already found lost: acquire it again");
    if (!row_ || ended_ == ending::released)
        throw usage_error("sqlock: renew() on a released or moved-from lease: acquire the lock again");
    row_->renew(ttl);
}

void lease::release() {
    if (!row_ || ended_ != ending::none) return;
    if (!row_->in_owning_process())
        throw usage_error("sqlock: lock '" + row_->name() +
                          "' belongs to the process that acquired it, not to "
                          "this forked child: release it in the parent (the child's copy does nothing)");
    try {
        row_->release_hold();
    } catch (lease_lost const&) {
        ended_ = ending::lost;  // nothing left to release; the lease stays reported lost
        throw;
    }
    ended_ = ending::released;
}

}  // namespace sqlock
