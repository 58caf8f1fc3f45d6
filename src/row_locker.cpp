// The SELECT ... FOR UPDATE lock: the engine's own row lock, held by a
// transaction that stays open on a pooled connection pinned to the lease.
#include "detail/access.hpp"
#include "detail/failpoint.hpp"
#include "detail/lease_row.hpp"
#include "detail/locker_impl.hpp"
#include "detail/process.hpp"
#include "detail/store_impl.hpp"
#include "detail/text.hpp"

#include <sqlock/errors.hpp>
#include <sqlock/locker.hpp>
#include <sqlock/store.hpp>

#include <soci/soci.h>

#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <thread>
#include <utility>

namespace sqlock {
namespace detail {
namespace {

using std::chrono::duration_cast;
using std::chrono::microseconds;
using std::chrono::milliseconds;

class row_lease final : public lease_row {
public:
    row_lease(std::shared_ptr<locker_impl> locker, std::shared_ptr<store_impl> store, std::string name,
              std::string owner, grant const& g, milliseconds ttl, clock::time_point valid_until, connection conn)
        : lease_row(std::move(locker), std::move(name), std::move(owner), g, ttl, valid_until),
          store_(std::move(store)),
          conn_(std::move(conn)) {
        conn_->pin();
    }

    ~row_lease() override {
        // Lost or abandoned: roll back so the pooled connection goes back clean.
        // Never in a forked child: the socket is the parent's, and a ROLLBACK
        // sent from here would end the parent's lock.
        if (!conn_ || !in_owning_process()) return;
        store_->pinned_sessions().unwatch(std::exchange(watch_, 0));
        try {
            store_impl::io_guard guard(*store_, conn_->session(), deadline_after(store_->options().io_timeout));
            store_->dialect().end_row_lock(conn_->pooled(), false);
            if (guard.disarm()) conn_->mark_broken();
        } catch (...) {
            conn_->mark_broken();
        }
    }

    /// Report the loss of the pinned session the moment the server ends it,
    /// not at the next keep-alive. Called once, right after construction.
    void watch_session() {
        std::weak_ptr<lease_row> self = weak_from_this();
        watch_ = store_->pinned_sessions().watch(conn_->session(), [self](std::string const& why) {
            if (auto row = self.lock()) static_cast<row_lease&>(*row).session_ended(why);
        });
    }

private:
    // On the watch's thread, once: the watch of this session has ended.
    void session_ended(std::string const& why) {
        mark_lost("the database session holding the row lock ended (" + one_line(why) +
                      "): the server ended its transaction and freed the row at once",
                  loss_cause::session_ended);
        // The dead connection goes back to the pool now (reopened on its next
        // use), not when the lease is dropped.
        (void)unless_in_statement([&] {
            watch_ = 0;
            if (!conn_) return;
            note_gone("the database session holding the row lock ended (" + one_line(why) + ")");
            conn_->close();
            conn_.reset();
        });
    }

    // Runs `op` (`what`: for the reason of a loss) on the pinned connection,
    // bounded by `deadline`, with the session watch paused. Any error on the
    // holding transaction means the lock is gone: a broken connection ends it on
    // the server, and on PostgreSQL any failed statement (a cancelled keep-alive,
    // a statement timeout) aborts it and frees the row at once. The result is
    // then `when_gone`, and the connection is given up.
    template <class Op, class T>
    T on_connection(std::string_view what, Op&& op, T when_gone, clock::time_point deadline) {
        if (!conn_) {
            note_gone("its database session had already ended");
            return when_gone;
        }
        auto& watch = store_->pinned_sessions();
        watch.pause(watch_);
        store_impl::io_guard guard(*store_, conn_->session(), deadline);
        try {
            auto result = op(conn_->pooled());
            watch.resume(watch_);
            return result;
        } catch (soci::soci_error const& e) {
            bool const overran = guard.disarm();
            auto const f = store_->exec().classify(e, conn_->session(), overran);
            auto const message = one_line(e.get_error_message());
            if (overran)
                note_gone(std::string(what) +
                          " got no answer within its deadline, so its connection was closed, "
                          "which ends the transaction holding the row lock");
            else if (f == failure::connection)
                note_gone("the database session holding the row lock ended: " + std::string(what) +
                          " found its connection closed (" + message + ")");
            else
                note_gone(std::string(what) + " failed (" + message +
                          "), which ends the transaction holding the row lock");
            // Close the connection rather than trust a ROLLBACK on it: the server
            // then ends the transaction (and its row lock) whatever state it is in.
            watch.unwatch(std::exchange(watch_, 0));
            conn_->close();  // reopened clean on its next use
            conn_.reset();
            return when_gone;
        } catch (...) {
            watch.resume(watch_);
            throw;
        }
    }

    clock::time_point io_deadline() const { return deadline_after(store_->options().io_timeout); }

    bool db_delete() override {
        // Out of the watch first: the COMMIT needs no pause and resume of it.
        store_->pinned_sessions().unwatch(std::exchange(watch_, 0));
        bool committed = on_connection(
            "the release's COMMIT",
            [&](pooled_session s) {
                // The grant's record (token, owner) is still uncommitted here.
                SQLOCK_FAILPOINT("row.before_commit");
                store_->dialect().end_row_lock(s, true);
                return true;
            },
            false, io_deadline());
        conn_.reset();
        return committed;
    }

    bool db_add_hold() override {
        return on_connection(
            "the reentrant acquire's keep-alive",
            [&](pooled_session s) {
                (void)store_->dialect().keep_row_lock(s, name(), ttl());
                return true;
            },
            false, std::min(io_deadline(), valid_until()));
    }

    bool db_drop_hold() override { return conn_.has_value(); }

    std::optional<renewal> db_renew(milliseconds ttl) override {
        return on_connection(
            "the keep-alive",
            [&](pooled_session s) -> std::optional<renewal> {
                auto now = store_->dialect().keep_row_lock(s, name(), ttl);
                return renewal{now + duration_cast<microseconds>(ttl).count(), now};
            },
            std::optional<renewal>{}, std::min(io_deadline(), valid_until()));
    }

    std::shared_ptr<store_impl> store_;
    std::optional<connection> conn_;
    std::uint64_t watch_ = 0;  // the session watch's ticket of conn_
};

class row_locker_impl final : public locker_impl {
public:
    row_locker_impl(std::shared_ptr<store_impl> store, locker_options options)
        : locker_impl(std::move(options), store->metrics(), engine_label_of(store->engine()), kind_label::row),
          store_(std::move(store)) {}

protected:
    std::shared_ptr<lease_row> acquire_row(std::string const& name, std::string const& owner,
                                           attempt const& bounds) override {
        std::string const what = "acquiring row lock '" + name + "'";
        auto left = [&] {
            return std::max(milliseconds(0), duration_cast<milliseconds>(bounds.deadline - clock::now()));
        };
        auto const& opts = store_->options();
        // The pool is the limit: waiting for a connection shares the caller's
        // deadline, save that a try waits for one lent out for a moment.
        std::optional<connection> c =
            store_->borrow_to_pin(what, std::min(left(), opts.pool_wait), bounds.cancel, bounds.connection_deadline);
        if (!c) return nullptr;  // cancelled
        auto const& d = store_->dialect();
        // Once the row is locked, the token is drawn and committed on another
        // connection: durable before the lease exists, and ordered by the row lock.
        // A free main connection if there is one, so that concurrent draws share
        // their flushes (the two reserved connections would serialize them), else
        // a reserved one, which holders pinning the main pool cannot take.
        auto const draw = [&] {
            // The row is locked by our open transaction; no token drawn yet.
            SQLOCK_FAILPOINT("row.after_lock_before_token");
            return store_->run("drawing a token for row lock '" + name + "'",
                               [&](pooled_session s) { return d.draw_token(s, name); },
                               {.pool = connections::main_or_reserved});
        };
        auto const& exec = store_->exec();
        bool ensured = false;
        bool reconnected = false;
        executor::retries retry;
        for (;;) {
            if (bounds.cancel.stop_requested()) return nullptr;
            // With a cancel token, wait in slices of a second so cancellation is seen.
            auto wait = bounds.cancel.stop_possible() ? std::min(left(), milliseconds(1000)) : left();
            auto sent = clock::now();
            bool missing = false;
            store_impl::io_guard guard(*store_, c->session(), deadline_after(wait + opts.io_timeout));
            try {
                auto g = d.lock_row(c->pooled(), name, owner, options_.ttl, wait, draw, missing);
                if (g) {
                    if (clock::now() - sent > options_.ttl / 10) {
                        // We queued a while: count validity from a fresh round trip.
                        sent = clock::now();
                        (void)d.keep_row_lock(c->pooled(), name, options_.ttl);
                    }
                    if (guard.disarm())
                        throw backend_unavailable("sqlock: " + what + " on " + store_->url() +
                                                  " got no answer within its deadline");
                    g->expires_us = g->created_us + duration_cast<microseconds>(options_.ttl).count();
                    auto row = std::make_shared<row_lease>(shared_from_this(), store_, name, owner, *g, options_.ttl,
                                                           valid_until(sent, options_.ttl), std::move(*c));
                    row->watch_session();
                    return row;
                }
                d.end_row_lock(c->pooled(), false);
            } catch (soci::soci_error const& e) {
                bool const overran = guard.disarm();
                auto const f = exec.classify(e, c->session(), overran);
                if (f != failure::connection) {
                    try {
                        d.end_row_lock(c->pooled(), false);
                    } catch (...) {
                        c->mark_broken();
                    }
                }
                if (f == failure::transient || f == failure::lock_wait) {
                    if (retry.again()) continue;
                    exec.give_up(e, what, retry);
                }
                if (f == failure::connection) {
                    c->mark_broken();
                    // A pooled connection the server closed while idle (restart,
                    // pg_terminate_backend, KILL, a firewall): nothing was held on
                    // it, so reopen it once and try again, like the table lock.
                    if (!reconnected) {
                        reconnected = true;
                        c.reset();
                        c.emplace(store_->borrow(what, std::min(left(), opts.pool_wait)));
                        continue;
                    }
                    if (overran) exec.raise_overrun(what);
                }
                // The transaction died with the error: nothing is held.
                exec.raise(e, f, what);
            } catch (...) {
                // The token draw failed (its own error says why): nothing is held.
                guard.disarm();
                try {
                    d.end_row_lock(c->pooled(), false);
                } catch (...) {
                    c->mark_broken();
                }
                throw;
            }
            if (missing && !ensured) {
                // On the connection we already have (back in autocommit): a second
                // one could wait on a pool exhausted by holders.
                ensured = true;
                SQLOCK_FAILPOINT("row.before_ensure");  // the row seen missing, not created yet
                try {
                    d.ensure_row(c->session(), name, left());
                } catch (soci::soci_error const& e) {
                    auto const f = exec.classify(e, c->session(), false);
                    // Another client created the row since we looked, and holds it:
                    // the engine's unique check waited for its transaction and gave
                    // up (a lock wait), or chose us as a deadlock's victim. The row
                    // exists: go round and wait for it, or answer busy, in the lock
                    // statement, like any waiter (issue 39: the soak tier's fork
                    // nemesis met this as an untyped backend_error).
                    if (f == failure::lock_wait || f == failure::transient) continue;
                    if (f == failure::connection) c->mark_broken();
                    exec.raise(e, f, "creating row lock '" + name + "'");
                }
                continue;
            }
            if (clock::now() >= bounds.deadline) return nullptr;
            // Engines that wait in whole seconds (MariaDB's WAIT n) leave a
            // remainder below a second: poll it with a short jittered pause.
            thread_local std::minstd_rand rng{std::random_device{}()};
            auto poll_jitter = milliseconds(std::uniform_int_distribution<int>(1, 20)(rng));
            std::this_thread::sleep_for(std::min(poll_jitter, left()));
        }
    }

    // Waiters queue in the engine; between slices there is nothing to wait for.
    std::uint64_t release_generation(std::string const&) override { return 0; }
    void wait_for_release(std::string const&, std::uint64_t, clock::time_point, std::stop_token const&) override {}
    void announce_release(std::string const& name) noexcept override { store_->announce(name); }

public:
    store_impl* member_store() noexcept override { return store_.get(); }
    bool locks_whole_database() const noexcept override { return store_->engine() == sqlock::engine::sqlite; }

private:
    std::shared_ptr<store_impl> store_;
};

}  // namespace
}  // namespace detail

locker row_locker(store const& db, locker_options options) {
    auto const& impl = *detail::access::impl(db);
    if (impl.multi_writer_cluster() && !impl.options().galera_single_writer)
        throw usage_error("sqlock: row_locker refused: " + impl.url() +
                          " is a node of a Galera cluster, where a row lock taken on one node does not block "
                          "clients of another (each node would grant the row at once; the loser learns only at "
                          "COMMIT). Use table_locker, which is exclusive across the nodes; or, if every client "
                          "writes through this one node, declare it: store_options::galera_single_writer = true "
                          "or the URL parameter galera_single_writer=true");
    return detail::access::make_locker(
        detail::make_fork_safe<detail::row_locker_impl>(detail::access::impl(db), std::move(options)));
}

}  // namespace sqlock
