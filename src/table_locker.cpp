// The unique-index INSERT lock: a row per name in <prefix>_locks.
#include "detail/access.hpp"
#include "detail/failpoint.hpp"
#include "detail/lease_row.hpp"
#include "detail/locker_impl.hpp"
#include "detail/process.hpp"
#include "detail/store_impl.hpp"

#include <sqlock/errors.hpp>
#include <sqlock/locker.hpp>
#include <sqlock/store.hpp>

#include <algorithm>

namespace sqlock {
namespace detail {
namespace {

using sys_clock = std::chrono::system_clock;

class table_row final : public lease_row {
public:
    table_row(std::shared_ptr<locker_impl> locker, std::shared_ptr<store_impl> store, std::string name,
              std::string owner, grant const& g, std::chrono::milliseconds ttl, clock::time_point valid_until)
        : lease_row(std::move(locker), std::move(name), std::move(owner), g, ttl, valid_until),
          store_(std::move(store)) {}

private:
    // One conditional DELETE by owner and token on a pooled connection: independent of a renewal.
    bool deletes_beside_renewal() const noexcept override { return true; }

    bool db_delete() override {
        SQLOCK_FAILPOINT("release.before_statement");
        bool reconnected = false;
        bool deleted = store_->run("releasing lock '" + name() + "'",
                                   [&](pooled_session s) {
                                       if (store_->dialect().release(s, name(), owner(), token())) return true;
                                       if (!reconnected) return false;
                                       // After a broken connection the first DELETE may have gone through.
                                       // No row of ours now: released, unless the row is someone else's,
                                       // or the lease ran out meanwhile (then another owner may have
                                       // taken it and released it since).
                                       auto row = store_->dialect().find_lock(s, name());
                                       return !row && clock::now() < valid_until();
                                   },
                                   // A free main connection, else a reserved one: a pool busy with
                                   // acquires (a herd of waiters on this very lock) must not keep its
                                   // holder from letting it go.
                                   {.on_reconnect = [&](soci::session&) { reconnected = true; },
                                    .pool = connections::main_or_reserved});
        return deleted;
    }

    bool db_add_hold() override {
        return store_->run("re-entering lock '" + name() + "'",
                           [&](soci::session& s) { return store_->dialect().add_hold(s, name(), owner(), token()); });
    }

    bool db_drop_hold() override {
        return store_->run("releasing a hold on lock '" + name() + "'",
                           [&](soci::session& s) { return store_->dialect().drop_hold(s, name(), owner(), token()); });
    }

    std::optional<renewal> db_renew(std::chrono::milliseconds ttl) override {
        auto ttl_us = std::chrono::duration_cast<std::chrono::microseconds>(ttl).count();
        SQLOCK_FAILPOINT("renew.before_statement");
        auto before = sys_clock::now();
        auto r =
            store_->run("renewing lock '" + name() + "'",
                        [&](pooled_session s) { return store_->dialect().renew(s, name(), owner(), token(), ttl_us); },
                        // Retry a busy database only briefly: the lease then shows in doubt, and
                        // the renewer (one thread for all leases) moves on and retries soon.
                        // A renewal never waits past the lease's safe deadline, and uses the
                        // reserved connections: a pool busy with acquires cannot delay it.
                        {.deadline = std::min(valid_until(), clock::now() + ttl / 10),
                         .io_deadline = valid_until(),
                         .pool_wait = std::chrono::duration_cast<std::chrono::milliseconds>(
                             std::max(clock::duration::zero(), valid_until() - clock::now())),
                         .pool = connections::reserved,
                         // The attempt broke or got no answer in time: in doubt now, not only
                         // once the reconnect (bounded by connect_timeout) has failed too.
                         .on_broken = [this] { note_in_doubt(); }});
        if (r) store_->record_clock(r->now_us, before, sys_clock::now());
        return r;
    }

    std::shared_ptr<store_impl> store_;
};

class table_locker_impl final : public locker_impl {
public:
    table_locker_impl(std::shared_ptr<store_impl> store, locker_options options)
        : locker_impl(std::move(options), store->metrics(), engine_label_of(store->engine()), kind_label::table),
          store_(std::move(store)) {}

protected:
    std::shared_ptr<lease_row> acquire_row(std::string const& name, std::string const& owner,
                                           attempt const& bounds) override {
        return grant_row(name, owner, bounds, nullptr);
    }

private:
    // The lock of `name`; with `reader` (where the dialect grants_shared_at_once()), a shared lease
    // of it: the row renamed to `reader` in the grant's own transaction.
    std::shared_ptr<lease_row> grant_row(std::string const& name, std::string const& owner, attempt const& bounds,
                                         std::string const* reader) {
        auto ttl_us = std::chrono::duration_cast<std::chrono::microseconds>(options_.ttl).count();
        auto const& opts = store_->options();
        auto sent = clock::now();
        auto before = sys_clock::now();
        // A waiting acquire waits for a pooled connection, and for a lock held in
        // the engine (SQLite's whole-file lock), no longer than its own deadline;
        // a single try waits up to the store's bounds.
        auto const left = std::chrono::duration_cast<std::chrono::milliseconds>(bounds.deadline - sent);
        bool const waiting = left > std::chrono::milliseconds::zero();
        auto attempt_id = new_attempt_id();
        bool retry = false;
        grant g;
        try {
            g = store_->run((reader ? "taking a shared lease of '" : "acquiring lock '") + name + "'",
                            [&](pooled_session s) {
                                return reader ? store_->dialect().acquire_shared(s, name, *reader, owner, attempt_id,
                                                                                 ttl_us, waiting, retry)
                                              : store_->dialect().acquire(s, name, owner, attempt_id, ttl_us, waiting,
                                                                          retry);
                            },
                            // The broken attempt may have written our row: delete it (only it) before retrying.
                            {.on_reconnect =
                                 [&](soci::session& s) {
                                     retry = true;
                                     store_->dialect().delete_attempt(s, name, owner, attempt_id);
                                     if (reader) store_->dialect().delete_attempt(s, *reader, owner, attempt_id);
                                 },
                             .deadline = waiting ? bounds.deadline : clock::time_point::max(),
                             .engine_wait = waiting ? std::min(left, opts.lock_wait_timeout) : opts.lock_wait_timeout,
                             .pool_wait = waiting ? std::min(left, opts.pool_wait) : try_pool_wait(bounds, sent)});
        } catch (row_busy const&) {
            return nullptr;
        }
        if (!g.acquired) return nullptr;
        SQLOCK_FAILPOINT("acquire.after_commit_before_return");
        store_->record_clock(g.created_us, before, sys_clock::now());
        auto row = std::make_shared<table_row>(shared_from_this(), store_, reader ? *reader : name, owner, g,
                                               options_.ttl, valid_until(sent, options_.ttl));
        if (auto now = clock::now(); now >= row->valid_until()) {
            // Granted, but the round trip ate the whole lease: not a success.
            try {
                row->release_hold();
            } catch (error const&) {  // expired anyway
            }
            throw backend_unavailable(
                "sqlock: acquiring lock '" + name + "' took " +
                std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(now - sent).count()) +
                " ms, longer than its ttl of " + std::to_string(options_.ttl.count()) +
                " ms: the lease was given back; raise the ttl well above the database's round trip");
        }
        return row;
    }

    // A try waits for a pooled connection up to the store's pool_wait; a try on behalf of a
    // waiting caller (a semaphore's slot) no longer than that caller's deadline.
    std::chrono::milliseconds try_pool_wait(attempt const& bounds, clock::time_point now) const {
        auto const pool_wait = store_->options().pool_wait;
        if (!bounds.connection_deadline) return pool_wait;
        auto const left = std::chrono::ceil<std::chrono::milliseconds>(*bounds.connection_deadline - now);
        return std::clamp(left, std::chrono::milliseconds(1), pool_wait);
    }

protected:
    std::uint64_t release_generation(std::string const& name) override { return store_->hub().generation(name); }

    void wait_for_release(std::string const& name, std::uint64_t generation, clock::time_point until,
                          std::stop_token const& cancel) override {
        store_->hub().wait(name, generation, until, cancel);
    }

    void announce_release(std::string const& name) noexcept override { store_->announce(name); }

public:
    store_impl* member_store() noexcept override { return store_.get(); }
    bool keeps_lock_rows() const noexcept override { return true; }

    std::shared_ptr<lease_row> acquire_shared_row(std::string const& gate, std::string const& reader,
                                                  attempt const& bounds) override {
        auto const owner = owner_for_this_thread();
        // In one transaction where the engine can (MariaDB, whose flushing is server-wide): the grant and
        // the rename wait for the disk once. No other caller ever sees the name's lock taken.
        if (store_->dialect().grants_shared_at_once()) return grant_row(gate, owner, bounds, &reader);
        auto held = acquire_row(gate, owner, bounds);
        if (!held) return nullptr;
        auto const ttl_us = std::chrono::duration_cast<std::chrono::microseconds>(options_.ttl).count();
        auto const before = sys_clock::now();
        std::optional<renewal> moved;
        try {
            moved = store_->run("taking a shared lease of '" + gate + "'", [&](pooled_session s) {
                return store_->dialect().rename_lock(s, gate, owner, held->token(), reader, ttl_us);
            });
        } catch (...) {
            // Not renamed, or not known: give the lock of the name back (a row
            // renamed after all expires by its TTL, and only delays writers).
            try {
                held->release_hold();
            } catch (error const&) {}
            throw;
        }
        // The lock of the name is free again for the next reader or writer.
        store_->announce(gate);
        if (!moved) return nullptr;  // it expired before the rename: busy, try again
        store_->record_clock(moved->now_us, before, sys_clock::now());
        grant const g{
            true, held->token(),
            std::chrono::duration_cast<std::chrono::microseconds>(held->created_at().time_since_epoch()).count(),
            moved->expires_us};
        // Valid from the lock's own grant, not from the rename: were the rename
        // lost (a crash), the name's row would stay held until then, no longer.
        return std::make_shared<table_row>(shared_from_this(), store_, reader, owner, g, options_.ttl,
                                           held->valid_until());
    }

private:
    std::shared_ptr<store_impl> store_;
};

}  // namespace
}  // namespace detail

locker table_locker(store const& db, locker_options options) {
    return detail::access::make_locker(
        detail::make_fork_safe<detail::table_locker_impl>(detail::access::impl(db), std::move(options)));
}

}  // namespace sqlock
