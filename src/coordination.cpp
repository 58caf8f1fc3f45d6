// Coordination beyond one lock: semaphores, read-write locks and elections,
// built on a locker's leases (docs/coordination.md).
#include "detail/access.hpp"
#include "detail/locker_impl.hpp"
#include "detail/process.hpp"
#include "detail/store_impl.hpp"

#include <sqlock/coordination.hpp>
#include <sqlock/errors.hpp>

#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <unordered_map>

namespace sqlock {
namespace detail {
namespace {

using clock = std::chrono::steady_clock;
constexpr int max_permits = 10000;
// <name> U+001F p U+001F <slot>: at most 2 + 1 + 4 digits.
constexpr std::size_t permit_suffix = 7;
// <name> U+001F r U+001F <16 hex digits>.
constexpr std::size_t reader_suffix = 19;

std::string permit_name(std::string const& name, int slot) {
    return name + reserved_separator + 'p' + reserved_separator + std::to_string(slot);
}

std::string reader_prefix(std::string const& name) { return name + reserved_separator + 'r' + reserved_separator; }

// The end of the range of reader rows: the prefix with its last byte raised.
std::string reader_range_end(std::string const& name) {
    return name + reserved_separator + 'r' + static_cast<char>(reserved_separator + 1);
}

std::string reader_name(std::string const& name) {
    char id[17];
    std::snprintf(id, sizeof id, "%016llx", static_cast<unsigned long long>(random_bits()));
    return reader_prefix(name) + id;
}

std::shared_ptr<locker_impl> const& checked(locker const& l) { return access::impl(l); }

store_impl& database_of(locker_impl& l, char const* what) {
    auto* db = l.database();
    if (!db)
        throw usage_error(std::string("sqlock: ") + what +
                          " needs a table or row locker: a majority locker's members keep no common record of it");
    return *db;
}

// Sleep until `until` or `cancel`, whichever comes first.
void sleep_until(clock::time_point until, std::stop_token const& cancel) {
    std::mutex m;
    std::condition_variable_any cv;
    std::unique_lock lock(m);
    (void)cv.wait_until(lock, cancel, until, [] { return false; });
}

}  // namespace

// ---- semaphore ----------------------------------------------------------

class semaphore_impl {
public:
    semaphore_impl(std::shared_ptr<locker_impl> l, int permits) : locker_(std::move(l)), permits_(permits) {
        if (permits < 1 || permits > max_permits)
            throw usage_error("sqlock: a semaphore of " + std::to_string(permits) +
                              " permits is out of range: use 1 to " + std::to_string(max_permits));
        (void)database_of(*locker_, "a semaphore");
        if (locker_->locks_database())
            throw usage_error(
                "sqlock: a semaphore cannot use a row locker on SQLite, whose row lock locks the whole database "
                "file (one holder at a time): use a table locker");
    }

    int permits() const noexcept { return permits_; }

    std::optional<lease> try_acquire(std::string const& name) {
        check_definition(name);
        auto const start = random_bits() % static_cast<std::uint64_t>(permits_);
        return try_slots(name, static_cast<int>(start), locker_impl::attempt{clock::now(), {}, kind_label::semaphore});
    }

    lease acquire(std::string const& name, std::chrono::milliseconds wait, std::stop_token const& cancel) {
        check_definition(name);
        int start = 0;
        return locker_->wait_for(
            name, "a permit of semaphore '" + name + "'", wait, cancel,
            [&](locker_impl::attempt const& bounds) { return try_slots(name, start, bounds); },
            [&] {
                // A new starting slot per pass; the pass's last slot is the one it waits on.
                start = static_cast<int>(random_bits() % static_cast<std::uint64_t>(permits_));
                return permit_name(name, (start + permits_ - 1) % permits_);
            },
            kind_label::semaphore);
    }

private:
    // The stored N is read at a name's first acquire, then again at most once per TTL, so
    // that a caller asking for another N is refused before it takes anything. What keeps
    // the count is confirm(), after every grant.
    void check_definition(std::string const& name) {
        auto const now = clock::now();
        {
            std::lock_guard lock(checked_mutex_);
            if (auto it = checked_.find(name); it != checked_.end() && now - it->second < locker_->options().ttl)
                return;
        }
        auto& db = *locker_->database();
        int const stored = db.run("reading the permits of semaphore '" + name + "'",
                                  [&](soci::session& s) { return db.dialect().define_semaphore(s, name, permits_); });
        if (stored != permits_) throw mismatch(name, stored);
        std::lock_guard lock(checked_mutex_);
        if (checked_.size() >= 4096) checked_.clear();  // many names: forget them all, read again
        checked_[name] = now;
    }

    usage_error mismatch(std::string const& name, int stored) {
        {
            std::lock_guard lock(checked_mutex_);
            checked_.erase(name);
        }
        return usage_error("sqlock: semaphore '" + name + "' has " + std::to_string(stored) +
                           " permits, stored by its first user, and this caller asks for " + std::to_string(permits_) +
                           ": give every user the same number, or, to change it, forget the stored one while "
                           "no permit is held (`sqlock semaphore --name NAME --forget`)");
    }

    // Each slot once, from `start`. Only the last one may mark its row for a
    // wake-up (a table lock's waiting attempt); none waits in the engine. A
    // waiting caller's tries wait for a pooled connection (a row locker's permit
    // pins one) no longer than its deadline, and not once it is cancelled.
    std::optional<lease> try_slots(std::string const& name, int start, locker_impl::attempt const& bounds) {
        auto const now = clock::now();
        auto const once = locker_impl::attempt{now, bounds.cancel, bounds.kind,
                                               bounds.deadline > now ? std::optional<clock::time_point>(bounds.deadline)
                                                                     : std::nullopt};
        for (int i = 0; i < permits_; ++i) {
            bool const last = i == permits_ - 1;
            auto const& how = last && locker_->keeps_lock_rows() ? bounds : once;
            if (auto got = locker_->try_acquire(permit_name(name, (start + i) % permits_), how))
                return confirm(name, std::move(*got));
        }
        return std::nullopt;
    }

    // A granted permit is handed out only once the stored definition, read after
    // the grant (under a share lock: a forget in progress is waited for, and
    // counts this permit if it commits first), is this semaphore's N, and no
    // permit of the name is live through the other strategy (table rows for a row
    // locker, row locks for a table locker: the two exclude each other). So a
    // forget cannot succeed under a handed-out permit, and a permit is never
    // handed out under another N than the one stored.
    std::optional<lease> confirm(std::string const& name, lease got) {
        auto give_back = [&] {
            try {
                got.release();
            } catch (error const&) {  // lost or unreachable: it expires by its TTL, never handed out
            }
        };
        auto& db = *locker_->database();
        auto const lo = name + reserved_separator + 'p' + reserved_separator;
        auto const hi = name + reserved_separator + 'p' + static_cast<char>(reserved_separator + 1);
        permit_check check;
        try {
            check =
                db.run("confirming a permit of semaphore '" + name + "'",
                       [&](soci::session& s) {
                           return db.dialect().confirm_permit(s, name, permits_, lo, hi, !locker_->keeps_lock_rows());
                       },
                       {.pool = connections::main_or_reserved});
        } catch (...) {
            give_back();
            throw;
        }
        if (check.permits != permits_) {
            give_back();
            throw mismatch(name, check.permits);
        }
        if (check.other > 0) {
            give_back();
            return std::nullopt;
        }
        return got;
    }

    std::shared_ptr<locker_impl> locker_;
    int permits_;
    std::mutex checked_mutex_;
    std::unordered_map<std::string, clock::time_point> checked_;  // name -> when N was last read equal
};

// ---- read-write lock ------------------------------------------------------

class rw_locker_impl {
public:
    explicit rw_locker_impl(std::shared_ptr<locker_impl> l) : locker_(std::move(l)) {
        if (!locker_->keeps_lock_rows())
            throw usage_error(
                "sqlock: a read-write lock needs a table locker: it counts the shared leases as rows of the lock "
                "table, which row and majority locks do not keep");
    }

    std::optional<lease> try_acquire_shared(std::string const& name) {
        return locker_->try_acquire_shared(name, reader_name(name), locker_impl::attempt{clock::now(), {}});
    }

    lease acquire_shared(std::string const& name, std::chrono::milliseconds wait, std::stop_token const& cancel) {
        return locker_->wait_for(
            name, "a shared lease of '" + name + "'", wait, cancel,
            [&](locker_impl::attempt const& bounds) {
                return locker_->try_acquire_shared(name, reader_name(name), bounds);
            },
            {}, kind_label::rw_shared);
    }

    std::optional<lease> try_acquire(std::string const& name) {
        auto held = locker_->try_acquire(name, locker_impl::attempt{clock::now(), {}, kind_label::rw_exclusive});
        if (!held) return std::nullopt;
        if (readers(name, *held) > 0) {
            held->release();
            return std::nullopt;
        }
        return held;
    }

    lease acquire(std::string const& name, std::chrono::milliseconds wait, std::stop_token const& cancel) {
        auto const deadline = deadline_after(wait);
        auto held = locker_->wait_for(
            name, "lock '" + name + "'", wait, cancel,
            [&](locker_impl::attempt const& bounds) { return locker_->try_acquire(name, bounds); }, {},
            kind_label::rw_exclusive);
        // Holding the name's lock, wait for the readers to leave; new readers wait for the lock.
        auto ceiling = std::chrono::duration_cast<clock::duration>(locker_->options().backoff_min);
        auto const cap = std::chrono::duration_cast<clock::duration>(locker_->options().backoff_max);
        for (;;) {
            auto const left = readers(name, held);
            if (left == 0) return held;
            auto const now = clock::now();
            if (now >= deadline) {
                held.release();
                throw timeout("sqlock: " + std::to_string(left) + " shared lease(s) of '" + name +
                              "' were still held after waiting " + std::to_string(wait.count()) +
                              " ms for the exclusive lease: retry later or wait longer");
            }
            if (cancel.stop_requested()) {
                held.release();
                throw cancelled("sqlock: waiting for the exclusive lease of '" + name + "' was cancelled");
            }
            if (!held.held())
                throw lease_lost("sqlock: the lock of '" + name +
                                 "' was lost while waiting for its shared leases to end: try again");
            auto const pause = std::chrono::microseconds(
                random_bits() %
                static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(ceiling).count() + 1));
            sleep_until(std::min<clock::time_point>(now + pause, deadline), cancel);
            ceiling = std::min(ceiling * 2, cap);
        }
    }

private:
    // The live shared leases of `name`; usage_error (after letting `held` go)
    // when this locker holds one of them for this owner, held or in doubt: an
    // upgrade. A live row of this owner that this locker does not hold (its
    // grant committed as the server died, and the answer never came) is waited
    // for like any reader: it ends at its TTL. lease_lost when the name's row
    // is no longer `held`'s (force-released, expired): counted in the same
    // statement, so a count of zero is never taken from after another writer
    // came in.
    std::int64_t readers(std::string const& name, lease& held) {
        auto& db = *locker_->database();
        reader_count live;
        auto let_go = [&] {
            try {
                held.release();
            } catch (error const&) {}
        };
        try {
            live = db.run("counting the shared leases of '" + name + "'", [&](soci::session& s) {
                return db.dialect().count_readers(s, reader_prefix(name), reader_range_end(name), name, held.owner(),
                                                  held.token());
            });
        } catch (...) {
            let_go();
            throw;
        }
        if (live.readers.mine > 0 && locker_->holds_with_prefix(reader_prefix(name), held.owner())) {
            let_go();
            throw usage_error("sqlock: owner '" + held.owner() + "' holds a shared lease of '" + name +
                              "' (held or in doubt) and asked for the exclusive one: a read-write lock has no upgrade "
                              "(two upgraders would wait for each other for ever); release the shared lease first");
        }
        if (!live.writer_held) {
            let_go();  // finds the row gone: the lease is marked lost
            throw lease_lost("sqlock: the lock of '" + name +
                             "' was lost (force-released, or expired) while the exclusive lease waited for its shared "
                             "leases to end: try again");
        }
        return live.readers.count;
    }

    std::shared_ptr<locker_impl> locker_;
};

// ---- election ---------------------------------------------------------------

class election_impl {
public:
    election_impl(std::shared_ptr<locker_impl> l, election_options options) : locker_(std::move(l)), options_(options) {
        if (!locker_->keeps_lock_rows())
            throw usage_error(
                "sqlock: an election needs a table locker: the leader's value and term are read from its lock row, "
                "which row and majority locks do not keep where other processes can read it");
        if (options_.observe_interval < std::chrono::milliseconds(10) ||
            options_.observe_interval > std::chrono::minutes(1))
            throw usage_error("sqlock: observe_interval " + std::to_string(options_.observe_interval.count()) +
                              " ms is out of range: use 10 ms to 1 min");
    }

    std::string owner_with(std::string const& value) const {
        validate_name(value, 0, "leader value");
        if (value.size() > 200)
            throw usage_error("sqlock: the leader value is " + std::to_string(value.size()) +
                              " bytes long: at most 200 are allowed (store more elsewhere, keyed by the term)");
        auto owner = locker_->owner_for_this_thread() + reserved_separator + value;
        if (owner.size() > 255)
            throw usage_error("sqlock: the owner id and the leader value together are " + std::to_string(owner.size()) +
                              " bytes long: at most 254 are allowed; shorten the value or the locker's owner");
        return owner;
    }

    static leadership make(lease l, std::string value) { return leadership(std::move(l), std::move(value)); }

    leadership campaign(std::string const& name, std::string const& value, std::chrono::milliseconds wait,
                        std::stop_token const& cancel) {
        auto const owner = owner_with(value);
        return make(locker_->wait_for(
                        name, "the leadership of '" + name + "'", wait, cancel,
                        [&](locker_impl::attempt const& bounds) {
                            return locker_->try_acquire_as(name, owner, bounds);
                        },
                        {}, kind_label::election),
                    value);
    }

    std::optional<leadership> try_campaign(std::string const& name, std::string const& value) {
        auto got = locker_->try_acquire_as(name, owner_with(value),
                                           locker_impl::attempt{clock::now(), {}, kind_label::election});
        if (!got) return std::nullopt;
        return make(std::move(*got), value);
    }

    std::optional<leader_info> leader(std::string const& name) {
        auto& db = *locker_->database();
        auto row = db.run("reading the leader of '" + name + "'",
                          [&](soci::session& s) { return db.dialect().find_lock(s, name); });
        if (!row || row->expires_us < row->now_us) return std::nullopt;
        leader_info info;
        auto const sep = row->owner.find(reserved_separator);
        info.owner = row->owner.substr(0, sep);
        if (sep != std::string::npos) info.value = row->owner.substr(sep + 1);
        info.term = row->token;
        info.elected_at = db_time(std::chrono::microseconds(row->created_us));
        info.expires_at = db_time(std::chrono::microseconds(row->expires_us));
        return info;
    }

    void observe(std::string const& name, std::function<void(std::optional<leader_info> const&)> const& on_change,
                 std::stop_token const& stop) {
        auto& db = *locker_->database();
        auto same = [](std::optional<leader_info> const& a, std::optional<leader_info> const& b) {
            if (a.has_value() != b.has_value()) return false;
            return !a || (a->term == b->term && a->owner == b->owner && a->value == b->value);
        };
        std::optional<leader_info> last;
        bool first = true;
        std::int64_t marked_term = 0;
        while (!stop.stop_requested()) {
            // Read the generation first, so a release announced during the read is not missed.
            auto const generation = db.hub().generation(name);
            auto next = clock::now() + options_.observe_interval;
            std::optional<leader_info> now;
            try {
                now = leader(name);
            } catch (error const&) {  // unreachable for now: report nothing, read again
                db.hub().wait(name, generation, next, stop);
                continue;
            }
            if (first || !same(now, last)) {
                first = false;
                last = now;
                on_change(now);
            }
            if (now && now->term != marked_term) {
                // Once per term: mark the leader's row as a waiter does, so its
                // resignation is announced to this store (NOTIFY, a ring, the bell)
                // before the next read. Best effort, bounded by the interval: a mark
                // that fails leaves the reads to report the change; one that cannot
                // be made yet (MariaDB: the listener is still connecting) is tried
                // again on the next pass.
                bool done = true;
                try {
                    done = db.run("watching the leader of '" + name + "'",
                                  [&](pooled_session s) { return db.dialect().mark_watched(s, name); },
                                  {.deadline = next,
                                   .engine_wait = options_.observe_interval,
                                   .pool_wait = options_.observe_interval});
                } catch (error const&) {
                } catch (row_busy const&) {}
                if (done) {
                    marked_term = now->term;
                } else {
                    next = std::min(next, clock::now() + std::chrono::milliseconds(100));
                }
            }
            db.hub().wait(name, generation, next, stop);
        }
    }

private:
    std::shared_ptr<locker_impl> locker_;
    election_options options_;
};

}  // namespace detail

// ---- the public classes ---------------------------------------------------------

semaphore::semaphore(locker const& l, int permits)
    : impl_(std::make_shared<detail::semaphore_impl>(detail::checked(l), permits)) {}

std::optional<lease> semaphore::try_acquire(std::string_view name) {
    detail::validate_name(name, detail::permit_suffix, "semaphore name");
    return impl_->try_acquire(std::string(name));
}

lease semaphore::acquire(std::string_view name, std::chrono::milliseconds wait, std::stop_token cancel) {
    detail::validate_name(name, detail::permit_suffix, "semaphore name");
    if (wait < std::chrono::milliseconds::zero())
        throw usage_error("sqlock: the wait for semaphore '" + std::string(name) + "' is negative: use 0 or more");
    return impl_->acquire(std::string(name), wait, cancel);
}

int semaphore::permits() const noexcept { return impl_->permits(); }

bool forget_semaphore(store const& db, std::string_view name) {
    detail::validate_name(name, detail::permit_suffix, "semaphore name");
    auto const& impl = detail::access::impl(db);
    std::string const n(name);
    auto const lo = n + detail::reserved_separator + 'p' + detail::reserved_separator;
    auto const hi = n + detail::reserved_separator + 'p' + static_cast<char>(detail::reserved_separator + 1);
    // One transaction: the definition's row is locked by the DELETE before the
    // permits (table rows and held row locks) are counted, and the DELETE is rolled
    // back if one is live; a grant confirms its permit against the definition under
    // a share lock of that row (semaphore_impl::confirm).
    auto const result = impl->run("forgetting semaphore '" + n + "'",
                                  [&](soci::session& s) { return impl->dialect().forget_semaphore(s, n, lo, hi); });
    if (result.live > 0)
        throw usage_error("sqlock: semaphore '" + n + "' has " + std::to_string(result.live) +
                          " permit(s) held: forget its number of permits only once they are released or expired");
    return result.removed;
}

rw_locker::rw_locker(locker const& l) : impl_(std::make_shared<detail::rw_locker_impl>(detail::checked(l))) {}

std::optional<lease> rw_locker::try_acquire_shared(std::string_view name) {
    detail::validate_name(name, detail::reader_suffix, "read-write lock name");
    return impl_->try_acquire_shared(std::string(name));
}

lease rw_locker::acquire_shared(std::string_view name, std::chrono::milliseconds wait, std::stop_token cancel) {
    detail::validate_name(name, detail::reader_suffix, "read-write lock name");
    if (wait < std::chrono::milliseconds::zero())
        throw usage_error("sqlock: the wait for '" + std::string(name) + "' is negative: use 0 or more");
    return impl_->acquire_shared(std::string(name), wait, cancel);
}

std::optional<lease> rw_locker::try_acquire(std::string_view name) {
    detail::validate_name(name, detail::reader_suffix, "read-write lock name");
    return impl_->try_acquire(std::string(name));
}

lease rw_locker::acquire(std::string_view name, std::chrono::milliseconds wait, std::stop_token cancel) {
    detail::validate_name(name, detail::reader_suffix, "read-write lock name");
    if (wait < std::chrono::milliseconds::zero())
        throw usage_error("sqlock: the wait for '" + std::string(name) + "' is negative: use 0 or more");
    return impl_->acquire(std::string(name), wait, cancel);
}

election::election(locker const& l, election_options options)
    : impl_(std::make_shared<detail::election_impl>(detail::checked(l), options)) {}

leadership election::campaign(std::string_view name, std::string_view value, std::chrono::milliseconds wait,
                              std::stop_token cancel) {
    detail::validate_name(name);
    if (wait < std::chrono::milliseconds::zero())
        throw usage_error("sqlock: the wait for the leadership of '" + std::string(name) +
                          "' is negative: use 0 or more");
    return impl_->campaign(std::string(name), std::string(value), wait, cancel);
}

std::optional<leadership> election::try_campaign(std::string_view name, std::string_view value) {
    detail::validate_name(name);
    return impl_->try_campaign(std::string(name), std::string(value));
}

void election::lead(std::string_view name, std::string_view value, std::chrono::milliseconds wait,
                    std::function<void(leadership&, std::stop_token)> const& work, std::stop_token cancel) {
    auto held = campaign(name, value, wait, cancel);
    std::stop_source stop;
    {
        std::stop_callback on_lost(held.stop_token(), [&] { stop.request_stop(); });
        std::stop_callback on_cancel(cancel, [&] { stop.request_stop(); });
        try {
            work(held, stop.get_token());
        } catch (...) {
            try {
                held.resign();
            } catch (error const&) {  // lost, or unreachable: the row expires by its TTL
            }
            throw;
        }
    }
    // Resigned only now that the work has returned. A leadership already lost
    // has nothing to give back: the work was told through its stop token.
    try {
        held.resign();
    } catch (lease_lost const&) {}
}

std::optional<leader_info> election::leader(std::string_view name) {
    detail::validate_name(name);
    return impl_->leader(std::string(name));
}

void election::observe(std::string_view name, std::function<void(std::optional<leader_info> const&)> const& on_change,
                       std::stop_token stop) {
    detail::validate_name(name);
    impl_->observe(std::string(name), on_change, stop);
}

}  // namespace sqlock
