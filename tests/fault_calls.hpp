// sqlock tests — calls that may fail or hang under a fault: what a call ended
// with (call_result, run_call, outcome_of), a call on a thread of its own with a
// bounded wait (watched_call, returned_within), and a proxy cut on scope exit
// (cut_on_exit). Shared by the hang, safety and connection-fault suites.
#pragma once

#include "fault_proxy.hpp"
#include "test_env.hpp"

#include <sqlock/errors.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <future>
#include <string>
#include <thread>
#include <utility>

namespace sqlock_test {

/// How a call ended: returned, or which sqlock error (with its text, "<type>: <what>").
struct call_result {
    enum class kind { returned, lease_lost, usage_error, in_doubt, backend_unavailable, timeout, stale_token, other };
    kind what = kind::returned;
    std::string text = "returned";
    /// One of the typed "could not reach the database" outcomes.
    bool typed_unreachable() const {
        return what == kind::in_doubt || what == kind::backend_unavailable || what == kind::timeout;
    }
};

template <class F>
call_result run_call(F&& f) {
    using k = call_result::kind;
    try {
        f();
        return {};
    } catch (sqlock::lease_lost const& e) {
        return {k::lease_lost, describe(e)};
    } catch (sqlock::usage_error const& e) {
        return {k::usage_error, describe(e)};
    } catch (sqlock::in_doubt const& e) {
        return {k::in_doubt, describe(e)};
    } catch (sqlock::backend_unavailable const& e) {
        return {k::backend_unavailable, describe(e)};
    } catch (sqlock::timeout const& e) {
        return {k::timeout, describe(e)};
    } catch (sqlock::stale_token const& e) {
        return {k::stale_token, describe(e)};
    } catch (std::exception const& e) {
        return {k::other, describe(e)};
    }
}

/// What a call ended with, for the record a test checks: "returned" or the
/// exception's type and message.
template <class F>
std::string outcome_of(F&& f) {
    try {
        f();
        return "returned";
    } catch (std::exception const& e) {
        return describe(e);
    }
}

/// A call on a thread of its own, so that a hang is a failure instead of a hung
/// test: finished_within() waits a bounded time. A test whose call did not
/// finish must unstick it (cut the proxy, release the blocker) before this is
/// destroyed; if it still has not returned a minute later, the process aborts
/// (it cannot return from a test whose objects the call still uses).
class watched_call {
public:
    explicit watched_call(std::function<void()> f) : future_(promise_.get_future().share()) {
        thread_ = std::thread([this, f = std::move(f)] {
            try {
                f();
                promise_.set_value();
            } catch (...) {
                promise_.set_exception(std::current_exception());
            }
        });
    }
    watched_call(watched_call const&) = delete;
    watched_call& operator=(watched_call const&) = delete;
    ~watched_call() {
        if (future_.wait_for(std::chrono::seconds(60)) != std::future_status::ready) {
            std::fprintf(stderr,
                         "sqlock tests: a watched call is still blocked a minute after the test gave up on "
                         "it: aborting\n");
            std::abort();
        }
        thread_.join();
    }

    bool finished_within(std::chrono::milliseconds limit) {
        return future_.wait_for(limit) == std::future_status::ready;
    }

    /// What the call threw, as "<type>: <what>", or "returned" (after finished_within() was true).
    std::string outcome() {
        try {
            future_.get();
            return "returned";
        } catch (std::exception const& e) {
            return describe(e);
        } catch (...) {
            return "a non-standard exception";
        }
    }

private:
    std::promise<void> promise_;
    std::shared_future<void> future_;  // get() leaves it valid
    std::thread thread_;
};

/// Runs `f` as a watched_call and waits up to `limit` for it. If it has not
/// returned by then, `unstick()` runs (cut the proxy, release the blocker) and
/// the call is awaited (a minute at most, then the process aborts). Returns
/// whether `f` returned within `limit`; either way it has ended when this returns.
inline bool returned_within(std::chrono::milliseconds limit, std::function<void()> const& unstick,
                            std::function<void()> f) {
    watched_call call(std::move(f));
    bool const returned = call.finished_within(limit);
    if (!returned) unstick();
    return returned;
}

/// The same for a call through `proxy`: unstuck by cutting every connection (block()).
inline bool returned_within(std::chrono::milliseconds limit, fault_proxy& proxy, std::function<void()> f) {
    return returned_within(
        limit, [&proxy] { proxy.block(); }, std::move(f));
}

/// Cuts every connection of a proxy on scope exit (ending any black hole or
/// swallowing first), so destroying what a test left behind cannot hang on a
/// silent "server".
struct cut_on_exit {
    fault_proxy& p;
    ~cut_on_exit() {
        p.restore();
        p.block();
    }
};

}  // namespace sqlock_test
