// Internal: what a lease knows, shared by every locker strategy.
#pragma once

#include <sqlock/lease.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>

namespace sqlock::detail {

class lease_state {
public:
    lease_state(std::string name, std::string owner, std::int64_t token, db_time created_at, db_time expires_at,
                std::chrono::steady_clock::time_point valid_until)
        : name_(std::move(name)),
          owner_(std::move(owner)),
          token_(token),
          created_at_(created_at),
          expires_at_(expires_at),
          valid_until_(valid_until) {}
    virtual ~lease_state() = default;
    lease_state(lease_state const&) = delete;
    lease_state& operator=(lease_state const&) = delete;

    /// Release once. A lease found lost counts as released; a release that
    /// could not reach the database does not (it may be tried again).
    void release();

    [[nodiscard]] bool released() const noexcept { return released_.load(std::memory_order_acquire); }

    std::string const& name() const noexcept { return name_; }
    std::string const& owner() const noexcept { return owner_; }
    std::int64_t token() const noexcept { return token_; }
    db_time created_at() const noexcept { return created_at_; }
    db_time expires_at() const noexcept { return expires_at_; }
    std::chrono::steady_clock::time_point valid_until() const noexcept { return valid_until_; }

protected:
    /// Delete the lock; throw lease_lost when it was no longer ours.
    virtual void do_release() = 0;

private:
    std::string name_;
    std::string owner_;
    std::int64_t token_;
    db_time created_at_;
    db_time expires_at_;
    std::chrono::steady_clock::time_point valid_until_;
    std::atomic<bool> released_{false};
};

}  // namespace sqlock::detail
