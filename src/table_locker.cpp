// The unique-index INSERT lock: a row per name in <prefix>_locks.
#include "detail/lease_state.hpp"
#include "detail/locker_impl.hpp"
#include "detail/store_impl.hpp"

#include <sqlock/errors.hpp>
#include <sqlock/locker.hpp>
#include <sqlock/store.hpp>

namespace sqlock {
namespace detail {
namespace {

db_time from_us(std::int64_t us) { return db_time(std::chrono::microseconds(us)); }

class table_lease final : public lease_state {
public:
    table_lease(std::shared_ptr<store_impl> store, std::string name, std::string owner, grant const& g,
                std::chrono::steady_clock::time_point valid_until)
        : lease_state(std::move(name), std::move(owner), g.token, from_us(g.created_us), from_us(g.expires_us),
                      valid_until),
          store_(std::move(store)) {}

private:
    void do_release() override {
        bool reconnected = false;
        bool deleted = store_->run(
            "releasing lock '" + name() + "'",
            [&](soci::session& s) { return store_->dialect().release(s, name(), owner(), token()); },
            [&](soci::session&) { reconnected = true; });
        // After a broken connection the first DELETE may have gone through:
        // finding no row of ours then means it is released either way.
        if (!deleted && !reconnected)
            throw lease_lost("sqlock: lock '" + name() + "' (token " + std::to_string(token()) +
                             ") was no longer held by this owner at release: it expired and was taken over, "
                             "or was released by someone else; restart the critical section");
    }

    std::shared_ptr<store_impl> store_;
};

class table_locker_impl final : public locker_impl {
public:
    table_locker_impl(std::shared_ptr<store_impl> store, locker_options options)
        : locker_impl(std::move(options)), store_(std::move(store)) {}

    std::optional<lease> try_acquire(std::string const& name) override {
        auto owner = owner_for_this_thread();
        auto ttl_us = std::chrono::duration_cast<std::chrono::microseconds>(options_.ttl).count();
        auto sent = std::chrono::steady_clock::now();
        grant g;
        try {
            g = store_->run(
                "acquiring lock '" + name + "'",
                [&](soci::session& s) { return store_->dialect().acquire(s, name, owner, ttl_us); },
                // The broken attempt may have inserted our row: delete it before retrying.
                [&](soci::session& s) { store_->dialect().delete_owned(s, name, owner); },
                /*lock_wait_is_busy=*/true);
        } catch (row_busy const&) {
            return std::nullopt;
        }
        if (!g.acquired) return std::nullopt;
        auto state = std::make_shared<table_lease>(store_, name, std::move(owner), g, valid_until(sent));
        if (std::chrono::steady_clock::now() >= state->valid_until()) {
            // Granted, but the round trip ate the whole lease: not a success.
            try {
                state->release();
            } catch (error const&) {  // expired anyway
            }
            return std::nullopt;
        }
        return lease(std::move(state));
    }

private:
    std::shared_ptr<store_impl> store_;
};

}  // namespace
}  // namespace detail

locker table_locker(store const& db, locker_options options) {
    return locker(std::make_shared<detail::table_locker_impl>(db.impl(), std::move(options)));
}

}  // namespace sqlock
