// Internal: the shared state behind a store — the pool, the dialect, and the
// one place where engine errors become sqlock errors.
#pragma once

#include "detail/dialect.hpp"
#include "detail/process.hpp"
#include "detail/session_watch.hpp"

#include <sqlock/errors.hpp>
#include <sqlock/store.hpp>

#include <soci/connection-pool.h>
#include <soci/session.h>
#include <soci/soci-backend.h>

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stop_token>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

namespace sqlock::detail {

/// A SOCI pool, which of its sessions are open, and the statements prepared on each.
struct slots {
    explicit slots(std::size_t n) : pool(n), open(n, 0), prepared(n) {}
    soci::connection_pool pool;
    std::vector<char> open;  // per slot; touched only by the thread that leased the slot
    // Per slot, like `open`. Declared after the pool: destroyed before its sessions close.
    std::vector<std::unique_ptr<prepared_statements>> prepared;
};

/// A pooled connection borrowed for one operation; given back on destruction.
class connection {
public:
    connection(class store_impl& owner, slots& pool, std::size_t pos) noexcept
        : owner_(&owner), pool_(&pool), pos_(pos) {}
    connection(connection&& other) noexcept
        : owner_(std::exchange(other.owner_, nullptr)), pool_(other.pool_), pos_(other.pos_) {}
    connection& operator=(connection&&) = delete;
    ~connection();

    [[nodiscard]] soci::session& session() const;
    /// The session with the statements prepared on it.
    [[nodiscard]] pooled_session pooled() const { return {session(), pool_->prepared[pos_]}; }
    /// Forget this connection: it is closed and reopened on its next use.
    void mark_broken() noexcept;
    /// Close it now (its prepared statements first, without waiting on the
    /// server), and reopen it on its next use.
    void close() noexcept;

private:
    class store_impl* owner_;
    slots* pool_;
    std::size_t pos_;
};

/// The client-side bound on every statement. libpq has no timeout of its own
/// and a stopped backend still has its socket ACKed by the kernel, so neither
/// keepalives nor tcp_user_timeout notice it: when a statement overruns its
/// deadline, this thread shuts the connection's socket down, the blocked call
/// returns a connection error, and the caller handles it as a broken connection.
class io_deadlines {
public:
    using clock = std::chrono::steady_clock;
    io_deadlines() = default;
    io_deadlines(io_deadlines const&) = delete;
    io_deadlines& operator=(io_deadlines const&) = delete;
    ~io_deadlines();

    /// Shut `fd` down at `deadline` unless disarmed first; a ticket for `disarm`.
    [[nodiscard]] std::uint64_t arm(int fd, clock::time_point deadline);
    /// True when the deadline had fired (the socket is shut down).
    bool disarm(std::uint64_t ticket) noexcept;

private:
    void run(std::stop_token const& stop);
    struct entry {
        int fd;
        clock::time_point deadline;
        bool fired;
    };
    std::mutex mutex_;
    std::condition_variable_any cv_;
    std::map<std::uint64_t, entry> armed_;
    std::uint64_t next_ = 1;
    std::uint64_t generation_ = 0;  // moves when a deadline sooner than planned_ is armed
    clock::time_point planned_ = clock::time_point::min();  // when the thread wakes next
    std::jthread thread_;  // started on first use; last member
};

/// `now + d`, saturating at time_point::max() instead of overflowing.
[[nodiscard]] inline std::chrono::steady_clock::time_point deadline_after(std::chrono::steady_clock::duration d) noexcept {
    auto const now = std::chrono::steady_clock::now();
    if (d >= std::chrono::steady_clock::time_point::max() - now) return std::chrono::steady_clock::time_point::max();
    return now + d;
}

/// `now + d` for any duration type (milliseconds::max() included), saturating.
template <class Rep, class Period>
[[nodiscard]] std::chrono::steady_clock::time_point deadline_after(std::chrono::duration<Rep, Period> d) noexcept {
    using steady_duration = std::chrono::steady_clock::duration;
    if (d <= std::chrono::duration<Rep, Period>::zero()) return std::chrono::steady_clock::now();
    if (std::chrono::duration_cast<std::chrono::duration<double>>(d) >=
        std::chrono::duration_cast<std::chrono::duration<double>>(steady_duration::max() / 2))
        return std::chrono::steady_clock::time_point::max();
    return deadline_after(std::chrono::duration_cast<steady_duration>(d));
}

/// Announcements of releases to the waiters of this process. Names hash into
/// a few generation counters: a waiter wakes when its counter moves (a rare
/// collision costs one extra attempt).
class release_hub {
public:
    using clock = std::chrono::steady_clock;
    [[nodiscard]] std::uint64_t generation(std::string_view name);
    void announce(std::string_view name) noexcept;  // "" wakes everyone
    void wait(std::string_view name, std::uint64_t generation, clock::time_point until, std::stop_token const& cancel);

private:
    static std::size_t bucket(std::string_view name) noexcept;
    std::mutex mutex_;
    std::condition_variable_any cv_;
    std::array<std::uint64_t, 64> generations_{};
};

class store_impl {
public:
    using clock = std::chrono::steady_clock;

    store_impl(std::string_view url, store_options const& options);
    ~store_impl();
    store_impl(store_impl const&) = delete;
    store_impl& operator=(store_impl const&) = delete;

    [[nodiscard]] sqlock::engine engine() const noexcept { return dialect_->engine(); }
    [[nodiscard]] std::string const& url() const noexcept { return url_; }
    [[nodiscard]] class dialect const& dialect() const noexcept { return *dialect_; }
    [[nodiscard]] store_options const& options() const noexcept { return options_; }

    /// Borrow a connection, opening (or reopening) it if needed, waiting at most
    /// `wait` (default `pool_wait`) for a free one. `reserved`: from the small
    /// pool kept for renewals and token draws, which nothing else can exhaust.
    /// @throws timeout when the pool stays exhausted; backend_unavailable when connecting fails.
    [[nodiscard]] connection borrow(std::string_view what);
    [[nodiscard]] connection borrow(std::string_view what, std::chrono::milliseconds wait, bool reserved = false);
    /// A free main connection at once, else a reserved one (waiting up to `wait`).
    [[nodiscard]] connection borrow_main_or_reserved(std::string_view what, std::chrono::milliseconds wait);

    /// How `run` treats failures.
    struct run_options {
        /// After a broken connection is reopened, run this on the fresh
        /// connection before trying `op` again: it must make the retry safe
        /// (delete what the broken attempt may have written). If reopening or
        /// this clean-up fails, or the retry breaks too, the outcome is unknown
        /// and `in_doubt` is thrown. Without it, `op` is simply tried again once.
        std::function<void(soci::session&)> on_reconnect;
        /// A bounded row-lock wait that ran out is thrown as `row_busy`
        /// (otherwise it is retried like a deadlock).
        bool lock_wait_is_busy = false;
        /// Stop retrying deadlocks and busy errors at this point (default: two
        /// `lock_wait_timeout`s from the start).
        clock::time_point deadline = clock::time_point::max();
        /// How long the engine itself may wait inside one statement (row locks,
        /// SQLite's busy handler); default `lock_wait_timeout`. Each attempt's
        /// client-side bound is this plus `io_timeout`.
        std::optional<std::chrono::milliseconds> engine_wait;
        /// A tighter client-side bound for every attempt (a renewal's is its lease's safe deadline).
        clock::time_point io_deadline = clock::time_point::max();
        /// How long to wait for a pooled connection (default `pool_wait`).
        std::optional<std::chrono::milliseconds> pool_wait;
        /// Use the reserved pool (renewals, token draws).
        bool reserved = false;
        /// Use the main pool if one of its connections is free at once, else the
        /// reserved pool (a release: a pool busy with acquires, a herd of waiters
        /// on the very lock, must not keep its holder from letting it go).
        bool reserved_when_busy = false;
        /// Called when an attempt's connection broke or got no answer within its
        /// bound, before reconnecting (a renewal's lease is in doubt from then on).
        std::function<void()> on_broken;
    };

    /// Run `op(session)` on a pooled connection under a client-side deadline.
    /// Deadlocks, serialization failures and SQLITE_BUSY are retried with
    /// jitter (until `deadline`, then `backend_unavailable`). A broken
    /// connection is reopened once (see `run_options::on_reconnect`).
    template <class Op>
    auto run(std::string_view what, Op&& op, run_options const& how)
        -> decltype(op(std::declval<pooled_session&>()));
    /// `run` with the default `run_options`. An overload rather than `= {}`: Clang rejects a
    /// default argument that needs a nested class's default member initializers inside the
    /// enclosing class.
    template <class Op>
    auto run(std::string_view what, Op&& op) -> decltype(op(std::declval<pooled_session&>())) {
        return run(what, std::forward<Op>(op), run_options{});
    }

    /// Arms the client-side deadline of statements on `s` for its lifetime.
    class io_guard {
    public:
        io_guard(store_impl& store, soci::session& s, clock::time_point deadline);
        io_guard(io_guard const&) = delete;
        io_guard& operator=(io_guard const&) = delete;
        ~io_guard() { (void)disarm(); }
        /// Stop watching; true when the deadline fired (the connection is dead).
        bool disarm() noexcept;

    private:
        io_deadlines* deadlines_;
        std::uint64_t ticket_;
    };

    /// Turn an engine error into the sqlock error for `failure`.
    [[noreturn]] void raise(soci::soci_error const& e, failure f, std::string_view what) const;
    /// The same for a statement that ran past its client-side deadline.
    [[noreturn]] void raise_overrun(std::string_view what) const;

    void create_schema();

    /// Waiters of this process; on PostgreSQL fed by a LISTEN connection too,
    /// started on first use.
    [[nodiscard]] release_hub& hub();

    /// The watch on sessions pinned by row locks (their loss is reported at once).
    [[nodiscard]] session_watch& pinned_sessions() noexcept { return pinned_; }

    /// Tell this process's waiters that `name` was released.
    void announce(std::string_view name) noexcept { hub_.announce(name); }

    /// Fold one database timestamp into the clock-skew estimate: `db_us` was
    /// read between `before` and `after` on this host's system clock.
    void record_clock(std::int64_t db_us, std::chrono::system_clock::time_point before,
                      std::chrono::system_clock::time_point after) noexcept;

    [[nodiscard]] store_stats stats() const noexcept;

    /// The client-side bound of one attempt of `how`.
    [[nodiscard]] clock::time_point io_deadline(run_options const& how) const noexcept;

private:
    friend class connection;
    void open_slot(slots& pool, std::size_t pos, std::string_view what);
    /// The connection of a slot just leased from `pool`, opened if it is not.
    connection leased(slots& pool, std::size_t pos, std::string_view what);
    /// Drop the statements prepared on a slot's session; `dead`: shut its socket
    /// down first, so that no deallocation waits on a server that stopped answering.
    void drop_prepared(slots& pool, std::size_t pos, bool dead) noexcept;
    static void pause_before_retry(int attempt);

    pid_t pid_;  // the process that opened the store (a forked child must not touch its connections)
    store_options options_;
    std::string url_;
    std::unique_ptr<class dialect> dialect_;
    std::string connect_string_;
    io_deadlines deadlines_;
    session_watch pinned_{*dialect_};
    slots main_;
    slots reserved_;

    release_hub hub_;
    std::atomic<std::uint64_t> notifications_{0};
    mutable std::mutex skew_mutex_;
    std::int64_t skew_us_ = 0;         // guarded by skew_mutex_
    std::uint64_t skew_samples_ = 0;   // guarded by skew_mutex_
    std::once_flag listener_once_;
    std::unique_ptr<release_listener> listener_;  // last: stopped first
};

/// Thrown by `store_impl::run` when a bounded row-lock wait ran out.
struct row_busy {};

inline connection::~connection() {
    // In a forked child the pool is the parent's copy, its mutex perhaps held by a parent's thread: leave it.
    if (owner_ != nullptr && !forked_from(owner_->pid_)) pool_->pool.give_back(pos_);
}
inline soci::session& connection::session() const { return pool_->pool.at(pos_); }
inline void connection::mark_broken() noexcept { pool_->open[pos_] = 0; }

template <class Op>
auto store_impl::run(std::string_view what, Op&& op, run_options const& how)
    -> decltype(op(std::declval<pooled_session&>())) {
    constexpr int max_transient = 100;
    int transient = 0;
    bool reconnected = false;
    // Unless told otherwise, give a busy database two lock-wait bounds: on SQLite
    // each attempt already waited one busy_timeout.
    auto const deadline = how.deadline != clock::time_point::max() ? how.deadline
                                                                  : clock::now() + 2 * options_.lock_wait_timeout;
    auto const engine_wait = how.engine_wait.value_or(options_.lock_wait_timeout);
    auto const in_doubt_error = [&](std::string const& why, std::string code) {
        return in_doubt("sqlock: the connection to " + url_ + " broke during " + std::string(what) + " and " + why +
                            ": the outcome is unknown; any row written expires by its TTL",
                        std::move(code));
    };
    for (;;) {
        std::optional<connection> borrowed;
        try {
            auto const wait = how.pool_wait.value_or(options_.pool_wait);
            borrowed.emplace(how.reserved_when_busy ? borrow_main_or_reserved(what, wait) : borrow(what, wait, how.reserved));
        } catch (backend_unavailable const& e) {
            if (reconnected && how.on_reconnect) throw in_doubt_error(std::string("reconnecting failed (") + e.what() + ")", e.code());
            throw;
        }
        auto& c = *borrowed;
        io_guard guard(*this, c.session(), std::min(io_deadline(how), how.io_deadline));
        auto const started = clock::now();
        try {
            if (reconnected && how.on_reconnect) {
                try {
                    how.on_reconnect(c.session());
                } catch (soci::soci_error const& e) {
                    if (guard.disarm() || dialect_->classify(e, c.session()) == failure::connection) c.mark_broken();
                    throw in_doubt_error("the clean-up failed too (" + e.get_error_message() + ")", dialect_->native_code(e));
                }
            }
            if (how.engine_wait) dialect_->set_engine_wait(c.session(), engine_wait);
            auto restore = [&] {
                if (how.engine_wait) dialect_->set_engine_wait(c.session(), options_.lock_wait_timeout);
            };
            auto pooled = c.pooled();
            try {
                if constexpr (std::is_void_v<decltype(op(pooled))>) {
                    op(pooled);
                    restore();
                    return;
                } else {
                    auto result = op(pooled);
                    restore();
                    return result;
                }
            } catch (...) {
                restore();
                throw;
            }
        } catch (soci::soci_error const& e) {
            bool const overran = guard.disarm();
            auto f = overran ? failure::connection : dialect_->classify(e, c.session());
            // SQLite reports a lock held longer than its busy handler waited as
            // SQLITE_BUSY, like the rare spurious one: only the first is "busy".
            if (f == failure::transient && how.lock_wait_is_busy && how.engine_wait &&
                clock::now() - started >= engine_wait * 9 / 10 && dialect_->busy_is_lock_wait())
                f = failure::lock_wait;
            if (f == failure::lock_wait && how.lock_wait_is_busy) throw row_busy{};
            if (f == failure::lock_wait || f == failure::transient) {
                if (++transient < max_transient && clock::now() < deadline) {
                    pause_before_retry(transient);
                    continue;
                }
                // Typed, without the engine's text (the battery's K9 reads that as a raw error leaking);
                // code() keeps the engine's code.
                throw backend_unavailable("sqlock: " + std::string(what) + " on " + url_ +
                                              " gave up: other transactions kept holding what it needed (" +
                                              std::to_string(transient) +
                                              " tries met a lock conflict or a busy database); retry later",
                                          dialect_->native_code(e));
            }
            if (f == failure::connection) c.mark_broken();
            if (f != failure::connection) raise(e, f, what);
            if (how.on_broken) how.on_broken();
            if (reconnected && how.on_reconnect)
                throw in_doubt_error(overran ? "the retry got no answer within its deadline too"
                                             : "broke again after reconnecting (" + e.get_error_message() + ")",
                                     dialect_->native_code(e));
            if (reconnected) {
                if (overran) raise_overrun(what);
                raise(e, f, what);
            }
        }
        reconnected = true;
    }
}

}  // namespace sqlock::detail
