#include "detail/lease_state.hpp"

#include <sqlock/errors.hpp>
#include <sqlock/lease.hpp>

namespace sqlock {

namespace detail {

void lease_state::release() {
    if (released()) return;
    try {
        do_release();
    } catch (lease_lost const&) {
        released_.store(true, std::memory_order_release);
        throw;
    }
    released_.store(true, std::memory_order_release);
}

}  // namespace detail

namespace {
std::string const empty;
}

lease::lease(std::shared_ptr<detail::lease_state> state) noexcept : state_(std::move(state)) {}

lease& lease::operator=(lease&& other) noexcept {
    if (this != &other) {
        lease old(std::move(*this));  // releases the lease being replaced
        state_ = std::move(other.state_);
    }
    return *this;
}

lease::~lease() {
    if (!state_ || state_->released()) return;
    try {
        state_->release();
    } catch (...) {
        // Never throw from a destructor: the row expires by its TTL.
    }
}

std::string const& lease::name() const noexcept { return state_ ? state_->name() : empty; }
std::string const& lease::owner() const noexcept { return state_ ? state_->owner() : empty; }
std::int64_t lease::token() const noexcept { return state_ ? state_->token() : 0; }
db_time lease::created_at() const noexcept { return state_ ? state_->created_at() : db_time{}; }
db_time lease::expires_at() const noexcept { return state_ ? state_->expires_at() : db_time{}; }

std::chrono::steady_clock::duration lease::remaining() const noexcept {
    if (!state_ || state_->released()) return {};
    auto left = state_->valid_until() - std::chrono::steady_clock::now();
    return left > std::chrono::steady_clock::duration::zero() ? left : std::chrono::steady_clock::duration::zero();
}

bool lease::held() const noexcept { return remaining() > std::chrono::steady_clock::duration::zero(); }

void lease::release() {
    if (state_) state_->release();
}

}  // namespace sqlock
