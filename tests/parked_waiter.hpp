// sqlock tests — a waiter parked for hours, and the check that an event woke it.
//
// A waiter's poll interval (backoff_min = backoff_max, and its deadline) is
// parked_poll. Each sleep between polls is drawn from [0, poll) (full jitter),
// so a poll lands in any window of length w with probability w / poll: with
// `prompt` = poll / 1000, a waiter that answers within `prompt` of an event was
// woken by it, not by a poll, with a chance of error below 1/1000. The bound is
// relative to the poll interval, not a budget for how fast the machine is
// (28.8 s).
//
//     parked_waiter w(waiter_locker, name);      // acquire(name, parked_poll) on its own thread
//     ... wait until it is parked ...
//     auto const released_ns = steady_ns();
//     holder.release();
//     std::optional<lease> l = w.woken_after(released_ns, "the release");   // a test failure if not
#pragma once

#include "test_env.hpp"
#include "worker_common.hpp"

#include <sqlock/sqlock.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <future>
#include <optional>
#include <stop_token>
#include <string>

namespace sqlock_test {

inline constexpr std::chrono::milliseconds parked_poll = std::chrono::hours(8);
inline constexpr std::chrono::milliseconds prompt = parked_poll / 1000;

class parked_waiter {
public:
    /// Starts `waiter.acquire(name, parked_poll)`, cancellable, on a thread of its own.
    parked_waiter(sqlock::locker waiter, std::string name)
        : got_(std::async(std::launch::async, [this, waiter, name = std::move(name)]() mutable {
              struct stamp {
                  std::atomic<std::int64_t>& at;
                  ~stamp() { at = steady_ns(); }
              } const returned{returned_ns_};
              return waiter.acquire(name, parked_poll, give_up_.get_token());
          })) {}
    /// Cancels a waiter still parked, then waits for it: never left parked for hours.
    ~parked_waiter() {
        give_up_.request_stop();
        if (got_.valid()) got_.wait();
    }
    parked_waiter(parked_waiter const&) = delete;
    parked_waiter& operator=(parked_waiter const&) = delete;

    [[nodiscard]] bool finished() const { return got_.wait_for(std::chrono::seconds(0)) == std::future_status::ready; }

    /// The lease the waiter got within `prompt` of `event_ns` (steady_ns() just before the event), which only
    /// a wake-up explains; otherwise a test failure naming `event` (the waiter is cancelled) and nothing.
    std::optional<sqlock::lease> woken_after(std::int64_t event_ns, std::string const& event) {
        if (got_.wait_for(prompt) != std::future_status::ready) {
            give_up_.request_stop();
            got_.wait_for(std::chrono::seconds(60));
            ADD_FAILURE() << "the waiter was still parked " << prompt.count() << " ms (its poll interval / 1000) after "
                          << event << ": no wake-up reached it";
            return std::nullopt;
        }
        std::optional<sqlock::lease> l;
        try {
            l.emplace(got_.get());
        } catch (std::exception const& e) {
            ADD_FAILURE() << "the woken waiter did not get the lock: " << describe(e);
            return std::nullopt;
        }
        handoff_ns_ = returned_ns_.load() - event_ns;
        EXPECT_LT(handoff_ns_, std::chrono::nanoseconds(prompt).count())
            << "the hand-off took " << handoff_ns_ / 1000000 << " ms: a poll (every " << parked_poll.count()
            << " ms, full jitter) may explain that, not only a wake-up";
        return l;
    }

    /// From the event to the waiter's return, once woken_after() saw it.
    [[nodiscard]] std::int64_t handoff_ns() const { return handoff_ns_; }

private:
    std::stop_source give_up_;
    std::atomic<std::int64_t> returned_ns_{0};
    std::int64_t handoff_ns_ = 0;
    std::future<sqlock::lease> got_;  // last: its thread uses the members above
};

}  // namespace sqlock_test
