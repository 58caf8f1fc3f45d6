// Internal: the shared state behind a store — the pool, the dialect, and the
// one place where engine errors become sqlock errors.
#pragma once

#include "detail/dialect.hpp"

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
#include <memory>
#include <mutex>
#include <stop_token>
#include <string>
#include <vector>

namespace sqlock::detail {

/// A pooled connection borrowed for one operation; given back on destruction.
class connection {
public:
    connection(class store_impl& owner, std::size_t pos) noexcept : owner_(&owner), pos_(pos) {}
    connection(connection&& other) noexcept : owner_(std::exchange(other.owner_, nullptr)), pos_(other.pos_) {}
    connection& operator=(connection&&) = delete;
    ~connection();

    [[nodiscard]] soci::session& session() const;
    /// Forget this connection: it is closed and reopened on its next use.
    void mark_broken() noexcept;

private:
    class store_impl* owner_;
    std::size_t pos_;
};

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
    store_impl(std::string_view url, store_options const& options);

    [[nodiscard]] sqlock::engine engine() const noexcept { return dialect_->engine(); }
    [[nodiscard]] std::string const& url() const noexcept { return url_; }
    [[nodiscard]] class dialect const& dialect() const noexcept { return *dialect_; }
    [[nodiscard]] store_options const& options() const noexcept { return options_; }

    /// Borrow a connection, opening (or reopening) it if needed.
    /// @throws timeout when the pool stays exhausted for `pool_wait`;
    ///         backend_unavailable when connecting fails.
    [[nodiscard]] connection borrow(std::string_view what);
    /// The same, waiting at most `wait` for a free connection.
    [[nodiscard]] connection borrow(std::string_view what, std::chrono::milliseconds wait);

    /// How `run` treats failures.
    struct run_options {
        /// After a broken connection is reopened, run this on the fresh
        /// connection before trying `op` again: it must make the retry safe. If
        /// it fails, the outcome is reported as `in_doubt`. Without it, `op` is
        /// simply tried again.
        std::function<void(soci::session&)> on_reconnect;
        /// A bounded row-lock wait that ran out is thrown as `row_busy`
        /// (otherwise it is retried like a deadlock).
        bool lock_wait_is_busy = false;
        /// Stop retrying deadlocks and busy errors at this point (default: two
        /// `lock_wait_timeout`s from the start).
        std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
    };

    /// Run `op(session)` on a pooled connection. Deadlocks, serialization
    /// failures and SQLITE_BUSY are retried with jitter (until `deadline`, then
    /// `backend_unavailable`). A broken connection is reopened once.
    template <class Op>
    auto run(std::string_view what, Op&& op, run_options const& how = {})
        -> decltype(op(std::declval<soci::session&>()));

    /// Turn an engine error into the sqlock error for `failure`.
    [[noreturn]] void raise(soci::soci_error const& e, failure f, std::string_view what) const;

    void create_schema();

    /// Waiters of this process; on PostgreSQL fed by a LISTEN connection too,
    /// started on first use.
    [[nodiscard]] release_hub& hub();

    /// Tell this process's waiters that `name` was released.
    void announce(std::string_view name) noexcept { hub_.announce(name); }

    /// Fold one database timestamp into the clock-skew estimate: `db_us` was
    /// read between `before` and `after` on this host's system clock.
    void record_clock(std::int64_t db_us, std::chrono::system_clock::time_point before,
                      std::chrono::system_clock::time_point after) noexcept;

    [[nodiscard]] store_stats stats() const noexcept;

private:
    friend class connection;
    void give_back(std::size_t pos) noexcept { pool_.give_back(pos); }
    void open_slot(std::size_t pos, std::string_view what);
    static void pause_before_retry(int attempt);

    store_options options_;
    std::string url_;
    std::unique_ptr<class dialect> dialect_;
    std::string connect_string_;
    soci::connection_pool pool_;
    std::vector<char> open_;  // per slot; touched only by the thread that leased the slot

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
    if (owner_ != nullptr) owner_->give_back(pos_);
}
inline soci::session& connection::session() const { return owner_->pool_.at(pos_); }
inline void connection::mark_broken() noexcept { owner_->open_[pos_] = 0; }

template <class Op>
auto store_impl::run(std::string_view what, Op&& op, run_options const& how)
    -> decltype(op(std::declval<soci::session&>())) {
    constexpr int max_transient = 100;
    int transient = 0;
    bool reconnected = false;
    // Unless told otherwise, give a busy database two lock-wait bounds: on SQLite
    // each attempt already waited one busy_timeout.
    auto const deadline = how.deadline != std::chrono::steady_clock::time_point::max()
                              ? how.deadline
                              : std::chrono::steady_clock::now() + 2 * options_.lock_wait_timeout;
    for (;;) {
        auto c = borrow(what);
        try {
            if (reconnected && how.on_reconnect) {
                try {
                    how.on_reconnect(c.session());
                } catch (soci::soci_error const& e) {
                    if (dialect_->classify(e, c.session()) == failure::connection) c.mark_broken();
                    throw in_doubt("sqlock: the connection to " + url_ + " broke during " + std::string(what) +
                                       " and the clean-up failed too (" + e.get_error_message() +
                                       "): the outcome is unknown; any row written expires by its TTL",
                                   dialect_->native_code(e));
                }
            }
            return op(c.session());
        } catch (soci::soci_error const& e) {
            auto f = dialect_->classify(e, c.session());
            if (f == failure::lock_wait && how.lock_wait_is_busy) throw row_busy{};
            if (f == failure::lock_wait || f == failure::transient) {
                if (++transient < max_transient && std::chrono::steady_clock::now() < deadline) {
                    pause_before_retry(transient);
                    continue;
                }
                throw backend_unavailable("sqlock: " + std::string(what) + " on " + url_ +
                                              " kept failing (deadlocks or a busy database): " +
                                              e.get_error_message() + "; retry later",
                                          dialect_->native_code(e));
            }
            if (f != failure::connection || reconnected) {
                if (f == failure::connection) c.mark_broken();
                raise(e, f, what);
            }
            c.mark_broken();
        }
        reconnected = true;
    }
}

}  // namespace sqlock::detail
