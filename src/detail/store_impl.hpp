// Internal: the shared state behind a store — the pool, the dialect, and the
// one place where engine errors become sqlock errors.
#pragma once

#include "detail/dialect.hpp"

#include <sqlock/errors.hpp>
#include <sqlock/store.hpp>

#include <soci/connection-pool.h>
#include <soci/session.h>
#include <soci/soci-backend.h>

#include <functional>
#include <memory>
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

    /// Run `op(session)` on a pooled connection. Deadlocks, serialization
    /// failures and SQLITE_BUSY are retried. A broken connection is reopened
    /// once; `on_reconnect(session)` (if set) then runs on the fresh connection
    /// before `op` is tried again — it must make the retry safe, and if it
    /// fails the outcome is reported as `in_doubt`. A bounded row-lock wait
    /// that ran out is thrown as `row_busy` when `lock_wait_is_busy`.
    template <class Op>
    auto run(std::string_view what, Op&& op, std::function<void(soci::session&)> const& on_reconnect = {},
             bool lock_wait_is_busy = false) -> decltype(op(std::declval<soci::session&>()));

    /// Turn an engine error into the sqlock error for `failure`.
    [[noreturn]] void raise(soci::soci_error const& e, failure f, std::string_view what) const;

    void create_schema();

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
};

/// Thrown by `store_impl::run` when a bounded row-lock wait ran out.
struct row_busy {};

inline connection::~connection() {
    if (owner_ != nullptr) owner_->give_back(pos_);
}
inline soci::session& connection::session() const { return owner_->pool_.at(pos_); }
inline void connection::mark_broken() noexcept { owner_->open_[pos_] = 0; }

template <class Op>
auto store_impl::run(std::string_view what, Op&& op, std::function<void(soci::session&)> const& on_reconnect,
                     bool lock_wait_is_busy) -> decltype(op(std::declval<soci::session&>())) {
    constexpr int max_transient = 100;
    int transient = 0;
    bool reconnected = false;
    for (;;) {
        auto c = borrow(what);
        bool broken = false;
        try {
            if (reconnected && on_reconnect) {
                try {
                    on_reconnect(c.session());
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
            if (f == failure::lock_wait && !lock_wait_is_busy) f = failure::transient;
            if (f == failure::transient && ++transient < max_transient) {
                pause_before_retry(transient);
                continue;
            }
            if (f == failure::lock_wait) throw row_busy{};
            if (f == failure::connection) {
                c.mark_broken();
                broken = true;
                if (reconnected) raise(e, f, what);
            } else {
                raise(e, f, what);
            }
        }
        if (broken) reconnected = true;
    }
}

}  // namespace sqlock::detail
