// Internal: the shared state behind a store — the pools, the dialect, and the
// executor every statement goes through (detail/executor.hpp).
#pragma once

#include "detail/dialect.hpp"
#include "detail/executor.hpp"
#include "detail/metrics.hpp"
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
    // How many slots are pinned by held leases (`connection::pin`), as opposed to lent for one statement.
    std::atomic<std::size_t> pinned{0};
};

/// A pooled connection borrowed for one operation; given back on destruction.
class connection {
public:
    connection(class store_impl& owner, slots& pool, std::size_t pos) noexcept
        : owner_(&owner), pool_(&pool), pos_(pos) {}
    connection(connection&& other) noexcept
        : owner_(std::exchange(other.owner_, nullptr)),
          pool_(other.pool_),
          pos_(other.pos_),
          pinned_(std::exchange(other.pinned_, false)) {}
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
    /// Held by a lease until it is given back (counted in `slots::pinned`).
    void pin() noexcept;

private:
    class store_impl* owner_;
    slots* pool_;
    std::size_t pos_;
    bool pinned_ = false;
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
    std::uint64_t generation_ = 0;                          // moves when a deadline sooner than planned_ is armed
    clock::time_point planned_ = clock::time_point::min();  // when the thread wakes next
    std::jthread thread_;                                   // started on first use; last member
};

/// `now + d`, saturating at time_point::max() instead of overflowing.
[[nodiscard]] inline std::chrono::steady_clock::time_point deadline_after(
    std::chrono::steady_clock::duration d) noexcept {
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
    /// Opens nothing and checks nothing (no durability or schema check): for
    /// `inspect_database`, which reports what those checks would refuse.
    struct unchecked_t {};
    store_impl(std::string_view url, store_options const& options, unchecked_t);
    ~store_impl();
    store_impl(store_impl const&) = delete;
    store_impl& operator=(store_impl const&) = delete;

    [[nodiscard]] sqlock::engine engine() const noexcept { return dialect_->engine(); }
    [[nodiscard]] std::string const& url() const noexcept { return url_; }
    [[nodiscard]] class dialect const& dialect() const noexcept { return *dialect_; }
    [[nodiscard]] store_options const& options() const noexcept { return options_; }
    /// The server was a node of a multi-writer cluster (Galera) when the store opened.
    [[nodiscard]] bool multi_writer_cluster() const noexcept { return multi_writer_cluster_; }

    /// Borrow a connection, opening (or reopening) it if needed, waiting at most
    /// `wait` (default `pool_wait`) for a free one. `reserved`: from the small
    /// pool kept for renewals and token draws, which nothing else can exhaust.
    /// @throws timeout when the pool stays exhausted; backend_unavailable when connecting fails.
    [[nodiscard]] connection borrow(std::string_view what);
    [[nodiscard]] connection borrow(std::string_view what, std::chrono::milliseconds wait, bool reserved = false);
    /// A main connection for a lease to pin, waiting up to `wait`. With no time
    /// left (a try) it still waits, up to `pool_wait`, while some connection is
    /// only lent out (a token draw, a statement), and gives up at once when every
    /// one is pinned by a held lease; a try for a waiting caller (`try_until`, a
    /// semaphore's slot) waits for one until then, pinned or not. Empty once
    /// `cancel` is requested.
    [[nodiscard]] std::optional<connection> borrow_to_pin(std::string_view what, std::chrono::milliseconds wait,
                                                          std::stop_token const& cancel = {},
                                                          std::optional<clock::time_point> try_until = {});
    /// A free main connection at once, else a reserved one (waiting up to `wait`).
    [[nodiscard]] connection borrow_main_or_reserved(std::string_view what, std::chrono::milliseconds wait);
    /// @throws timeout naming the pool that stayed busy for `waited_ms` during `what`.
    [[noreturn]] void pool_exhausted(std::string_view what, long long waited_ms, bool reserved) const;

    using run_options = detail::run_options;

    /// Run `op(session)` through the executor (`executor::run`); returns what `op` returns.
    template <class Op>
    auto run(std::string_view what, Op&& op, run_options const& how = {})
        -> decltype(op(std::declval<pooled_session&>()));

    /// The one path to the engine: retries, reconnects and sqlock's errors.
    [[nodiscard]] executor const& exec() const noexcept { return executor_; }

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
    /// Where this store's lockers, fences and reapers record (store_options::metrics, or the process's).
    [[nodiscard]] std::shared_ptr<sqlock::metrics> const& metrics() const noexcept { return metrics_; }

private:
    friend class connection;
    void open_slot(slots& pool, std::size_t pos, std::string_view what);
    /// The connection of a slot just leased from `pool`, opened if it is not.
    connection leased(slots& pool, std::size_t pos, std::string_view what);
    /// Drop the statements prepared on a slot's session; `dead`: shut its socket
    /// down first, so that no deallocation waits on a server that stopped answering.
    void drop_prepared(slots& pool, std::size_t pos, bool dead) noexcept;

    pid_t pid_;  // the process that opened the store (a forked child must not touch its connections)
    store_options options_;
    std::string url_;
    std::unique_ptr<class dialect> dialect_;
    std::string connect_string_;
    bool multi_writer_cluster_ = false;
    io_deadlines deadlines_;
    session_watch pinned_{*dialect_};
    executor executor_{*this};
    slots main_;
    slots reserved_;

    release_hub hub_;
    std::atomic<std::uint64_t> notifications_{0};
    std::shared_ptr<sqlock::metrics> metrics_;
    std::uint64_t metrics_store_id_ = 0;  // its clock offset's entry, once opened
    mutable std::mutex skew_mutex_;
    std::int64_t skew_us_ = 0;        // guarded by skew_mutex_
    std::uint64_t skew_samples_ = 0;  // guarded by skew_mutex_
    std::once_flag listener_once_;
    std::unique_ptr<release_listener> listener_;  // last: stopped first
};

inline connection::~connection() {
    // In a forked child the pool is the parent's copy, its mutex perhaps held by a parent's thread: leave it.
    if (owner_ == nullptr || forked_from(owner_->pid_)) return;
    if (pinned_) pool_->pinned.fetch_sub(1, std::memory_order_relaxed);
    pool_->pool.give_back(pos_);
}
inline void connection::pin() noexcept {
    if (!std::exchange(pinned_, true)) pool_->pinned.fetch_add(1, std::memory_order_relaxed);
}
inline soci::session& connection::session() const { return pool_->pool.at(pos_); }
inline void connection::mark_broken() noexcept { pool_->open[pos_] = 0; }

template <class Op>
auto store_impl::run(std::string_view what, Op&& op, run_options const& how)
    -> decltype(op(std::declval<pooled_session&>())) {
    using result = decltype(op(std::declval<pooled_session&>()));
    if constexpr (std::is_void_v<result>) {
        executor_.run(
            what, [&](pooled_session& s) { op(s); }, how);
    } else {
        std::optional<result> out;
        executor_.run(
            what, [&](pooled_session& s) { out.emplace(op(s)); }, how);
        return std::move(*out);
    }
}

}  // namespace sqlock::detail
