// Internal: what every locker strategy shares.
#pragma once

#include <sqlock/lease.hpp>
#include <sqlock/options.hpp>

#include <chrono>
#include <optional>
#include <string>
#include <string_view>

namespace sqlock::detail {

class locker_impl {
public:
    /// @throws usage_error when an option is out of range.
    explicit locker_impl(locker_options options);
    virtual ~locker_impl() = default;
    locker_impl(locker_impl const&) = delete;
    locker_impl& operator=(locker_impl const&) = delete;

    /// `name` is already validated.
    [[nodiscard]] virtual std::optional<lease> try_acquire(std::string const& name) = 0;

    /// Retry `try_acquire` with capped exponential backoff and full jitter until
    /// `deadline`. `name` is already validated.
    [[nodiscard]] virtual lease acquire_until(std::string const& name, std::chrono::milliseconds wait);

    [[nodiscard]] locker_options const& options() const noexcept { return options_; }

protected:
    /// The owner id for a lock taken by the calling thread.
    [[nodiscard]] std::string owner_for_this_thread() const;

    /// The local validity of a lease whose acquire was sent at `sent`: the TTL
    /// less a drift margin for clock-rate differences.
    [[nodiscard]] std::chrono::steady_clock::time_point valid_until(
        std::chrono::steady_clock::time_point sent) const noexcept;

    locker_options options_;

private:
    std::string owner_prefix_;  // host, with the instance id appended per process
    std::string instance_;
};

/// @throws usage_error unless `name` is 1..255 bytes of valid UTF-8 without NUL.
void validate_name(std::string_view name);

}  // namespace sqlock::detail
