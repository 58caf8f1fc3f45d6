// Internal: the executor, the one path from the lockers, fences, the reaper and
// the admin calls to an engine. It borrows the connection, bounds each attempt
// on the client side, classifies failures, retries the transient ones, reconnects
// once, decides when an outcome is in doubt, and turns engine errors into
// sqlock's errors (the one mapping).
#pragma once

#include "detail/dialect.hpp"

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string_view>
#include <type_traits>
#include <utility>

namespace sqlock::detail {

class store_impl;

/// A non-owning reference to a callable: what the executor runs, without an
/// allocation per call. The callable must outlive the call it is passed to.
template <class Signature>
class function_ref;

template <class R, class... Args>
class function_ref<R(Args...)> {
public:
    // Implicit, like std::function; the constraint keeps it off copies and moves of function_ref.
    // clang-format 14 breaks a requires-clause apart:
    // clang-format off
    // NOLINTBEGIN(google-explicit-constructor,bugprone-forwarding-reference-overload)
    template <class F>
        requires(!std::is_same_v<std::remove_cvref_t<F>, function_ref> && std::is_invocable_r_v<R, F&, Args...>)
    function_ref(F&& f) noexcept
        : object_(static_cast<void const*>(std::addressof(f))),
          call_([](void const* object, Args... args) -> R {
              return (*static_cast<std::remove_reference_t<F>*>(const_cast<void*>(object)))(
                  std::forward<Args>(args)...);
          }) {}
    // NOLINTEND(google-explicit-constructor,bugprone-forwarding-reference-overload)
    // clang-format on

    R operator()(Args... args) const { return call_(object_, std::forward<Args>(args)...); }

private:
    void const* object_;
    R (*call_)(void const*, Args...);
};

/// Which pooled connections an operation may use.
enum class connections {
    main,              ///< the main pool (acquires, admin calls, the reaper)
    reserved,          ///< the small pool kept for renewals and token draws, which nothing else can exhaust
    main_or_reserved,  ///< a free main connection at once, else a reserved one (a release: a pool busy with
                       ///< acquires, a herd of waiters on the very lock, must not keep its holder from letting go)
};

/// How the executor treats one operation; the defaults suit a short idempotent statement.
struct run_options {
    using clock = std::chrono::steady_clock;
    /// After a broken connection is reopened, run this on the fresh connection
    /// before trying `op` again: it must make the retry safe (delete what the
    /// broken attempt may have written). If reopening or this clean-up fails, or
    /// the retry breaks too, the outcome is unknown and `in_doubt` is thrown.
    /// Without it, `op` is simply tried again once. (Acquire, release.)
    std::function<void(soci::session&)> on_reconnect;
    /// `op` may be repeated whatever engine error stopped it (idempotent DDL that
    /// services starting together race on): an error that is not about the
    /// connection, privileges, a read-only database or the schema is retried
    /// like a deadlock. (Creating the schema.)
    bool idempotent = false;
    /// Stop retrying deadlocks and busy errors at this point (default: two
    /// `lock_wait_timeout`s from the start). (Acquire, renewal.)
    clock::time_point deadline = clock::time_point::max();
    /// How long the engine itself may wait inside one statement (row locks,
    /// SQLite's busy handler); default `lock_wait_timeout`. Each attempt's
    /// client-side bound is this plus `io_timeout`. When set, a wait that ran
    /// out is the operation's answer, thrown as `row_busy`; otherwise a lock-wait
    /// failure is retried like a deadlock. (Acquire.)
    std::optional<std::chrono::milliseconds> engine_wait;
    /// A tighter client-side bound for every attempt (a renewal's is its lease's
    /// safe deadline, a majority member's its member timeout).
    clock::time_point io_deadline = clock::time_point::max();
    /// How long to wait for a pooled connection (default `pool_wait`). (Acquire, renewal.)
    std::optional<std::chrono::milliseconds> pool_wait;
    /// Which pool to borrow from.
    connections pool = connections::main;
    /// Called when an attempt's connection broke or got no answer within its
    /// bound, before reconnecting (a renewal's lease is in doubt from then on).
    std::function<void()> on_broken;
};

/// Thrown by the executor when a row-lock wait bounded by `run_options::engine_wait` ran out.
struct row_busy {};

/// The one mapping of engine errors to sqlock's errors. `where`: the store's
/// redacted URL, or a description of the session (a fence's is the caller's).
[[noreturn]] void raise_engine_error(dialect const& d, std::string_view where, soci::soci_error const& e, failure f,
                                     std::string_view what);

/// Runs `op` on the caller's own session (a fence, inside the caller's
/// transaction): never retried nor reconnected, since the transaction is the
/// caller's to restart, and its errors raised through the one mapping.
void run_on_callers_session(dialect const& d, std::string_view what, soci::session& s,
                            function_ref<void(soci::session&)> op);

class executor {
public:
    using clock = std::chrono::steady_clock;

    explicit executor(store_impl& store) noexcept : store_(&store) {}

    /// Run `op` on a pooled connection under a client-side deadline. Deadlocks,
    /// serialization failures and SQLITE_BUSY are retried with jitter (see
    /// `retries`). A broken connection is reopened once (see `run_options::on_reconnect`).
    void run(std::string_view what, function_ref<void(pooled_session&)> op, run_options const& how) const;

    /// The retry budget of one operation: transient and lock-wait failures are
    /// tried again, after a jittered pause, up to 100 tries and until a deadline.
    class retries {
    public:
        explicit retries(clock::time_point until = clock::time_point::max()) noexcept : until_(until) {}
        /// After a transient failure: true (once paused) when another try is allowed.
        [[nodiscard]] bool again();
        [[nodiscard]] int failed() const noexcept { return failed_; }

    private:
        int failed_ = 0;
        clock::time_point until_;
    };

    /// What failed an attempt on `s`; `overran`: its client-side deadline fired
    /// (the connection is shut down).
    [[nodiscard]] failure classify(soci::soci_error const& e, soci::session& s, bool overran) const;
    /// `retries` ran out: `backend_unavailable`, typed without the engine's text.
    [[noreturn]] void give_up(soci::soci_error const& e, std::string_view what, retries const& r) const;
    /// Turn an engine error into the sqlock error for `f`.
    [[noreturn]] void raise(soci::soci_error const& e, failure f, std::string_view what) const;
    /// The same for a statement that ran past its client-side deadline.
    [[noreturn]] void raise_overrun(std::string_view what) const;

private:
    store_impl* store_;
};

}  // namespace sqlock::detail
