// Majority mode: a lease on each of N independent lockers, granted when a
// majority (N/2+1) grant it within the validity window, with a fencing token
// settled over the granting members' durable counters.
#include "detail/failpoint.hpp"
#include "detail/lease_row.hpp"
#include "detail/locker_impl.hpp"
#include "detail/process.hpp"
#include "detail/store_impl.hpp"

#include <sqlock/errors.hpp>
#include <sqlock/majority.hpp>

#include <algorithm>
#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <set>
#include <thread>
#include <tuple>

namespace sqlock {
namespace detail {
namespace {

using std::chrono::duration_cast;
using std::chrono::microseconds;
using std::chrono::milliseconds;
using clock = std::chrono::steady_clock;

/// Runs one call per member, each on a thread of its own, and lets the caller
/// wait for them no longer than a deadline. A call that answers after the
/// caller settled is handed to `late` (which cleans up after it): a member that
/// is down or slow costs its timeout, never more, and the sum never.
template <class R>
class fanout : public std::enable_shared_from_this<fanout<R>> {
public:
    using late_handler = std::function<void(std::size_t, R&&)>;

    static std::shared_ptr<fanout> start(std::size_t n, std::function<R(std::size_t)> call, late_handler late = {}) {
        auto f = std::shared_ptr<fanout>(new fanout(n, std::move(late)));
        for (std::size_t i = 0; i < n; ++i) {
            std::thread([f, i, call] {
                R r = call(i);
                std::unique_lock lock(f->mutex_);
                if (f->settled_) {
                    auto late_call = f->late_;
                    lock.unlock();
                    if (late_call) late_call(i, std::move(r));
                    return;
                }
                f->results_[i] = std::move(r);
                ++f->answered_;
                lock.unlock();
                f->cv_.notify_all();
            }).detach();
        }
        return f;
    }

    /// Wait until every call answered, `enough(results)` holds, or `deadline`;
    /// then settle: the results so far, and later answers go to `late`.
    std::vector<std::optional<R>> settle(clock::time_point deadline,
                                         std::function<bool(std::vector<std::optional<R>> const&)> const& enough) {
        std::unique_lock lock(mutex_);
        cv_.wait_until(lock, deadline, [&] { return answered_ == results_.size() || (enough && enough(results_)); });
        settled_ = true;
        return std::move(results_);
    }

private:
    fanout(std::size_t n, late_handler late) : results_(n), late_(std::move(late)) {}
    std::mutex mutex_;
    std::condition_variable cv_;
    std::vector<std::optional<R>> results_;
    std::size_t answered_ = 0;
    bool settled_ = false;
    late_handler late_;
};

/// What one member said.
struct answer {
    enum class kind { ok, busy, lost, failed } what = kind::failed;
    std::shared_ptr<lease_row> row;  // acquire: the member's row
    std::int64_t value = 0;          // token rounds: the counter read, or 1 when the write won
    std::string why;                 // failed: the member's error
    std::shared_ptr<void> in_flight;  // acquire: the member's claim (majority_locker_impl::claim_member) until given back
};

answer failure_of(std::exception_ptr e) {
    try {
        std::rethrow_exception(e);
    } catch (lease_lost const& x) {
        return {answer::kind::lost, nullptr, 0, x.what()};
    } catch (std::exception const& x) {
        return {answer::kind::failed, nullptr, 0, x.what()};
    } catch (...) {
        return {answer::kind::failed, nullptr, 0, "unknown error"};
    }
}

/// Give a member's row back, best effort (its TTL covers what fails).
void give_back(std::shared_ptr<lease_row> const& row) noexcept {
    if (!row) return;
    try {
        row->release_hold();
    } catch (...) {
    }
}

struct member {
    std::shared_ptr<locker_impl> locker;
    std::string label;  // for messages: the member's database
};

class majority_locker_impl;

class majority_row final : public lease_row {
public:
    majority_row(std::shared_ptr<locker_impl> locker, std::shared_ptr<majority_locker_impl> majority, std::string name,
                 std::string owner, grant const& g, milliseconds ttl, clock::time_point valid_until,
                 std::vector<std::shared_ptr<lease_row>> rows)
        : lease_row(std::move(locker), std::move(name), std::move(owner), g, ttl, valid_until),
          majority_(std::move(majority)),
          rows_(std::move(rows)) {}

    ~majority_row() override {
        // Abandoned without release (lost, or a forked child's copy): the member
        // rows expire by their TTL; in the acquiring process, free them now.
        if (!in_owning_process()) return;
        for (auto& r : rows_snapshot()) give_back(r);
    }

    /// A member that answered after the grant: one more member that holds it.
    bool adopt(std::size_t i, std::shared_ptr<lease_row> row) {
        std::lock_guard lock(rows_mutex_);
        auto s = state();
        if (closed_ || (s != lease_state::held && s != lease_state::in_doubt)) return false;
        if (rows_[i]) return false;
        rows_[i] = std::move(row);
        return true;
    }

private:
    std::vector<std::shared_ptr<lease_row>> rows_snapshot() {
        std::lock_guard lock(rows_mutex_);
        return rows_;
    }

    bool db_delete() override;
    bool db_add_hold() override { return true; }  // holds are counted here; members keep one
    bool db_drop_hold() override { return true; }
    std::optional<renewal> db_renew(milliseconds ttl) override;

    std::shared_ptr<majority_locker_impl> majority_;
    std::mutex rows_mutex_;
    std::vector<std::shared_ptr<lease_row>> rows_;  // per member; null where not held
    bool closed_ = false;  // guarded by rows_mutex_: released (or being released), adopts nothing more
};

class majority_locker_impl final : public locker_impl {
public:
    majority_locker_impl(std::vector<member> members, locker_options options, milliseconds member_timeout,
                         milliseconds drift)
        : locker_impl(std::move(options)),
          members_(std::move(members)),
          quorum_(members_.size() / 2 + 1),
          member_timeout_(member_timeout),
          drift_(drift) {}

    std::size_t size() const noexcept { return members_.size(); }
    std::size_t quorum() const noexcept { return quorum_; }
    milliseconds member_timeout() const noexcept { return member_timeout_; }
    member const& at(std::size_t i) const { return members_[i]; }

    clock::time_point validity_end(clock::time_point sent, milliseconds ttl) const noexcept override {
        return sent + ttl - drift_;
    }

    /// Acquire `name` on member i (one try), for the background retries of a held lease.
    std::shared_ptr<lease_row> try_member(std::size_t i, std::string const& name) {
        return members_[i].locker->acquire_unwatched(name, attempt{clock::now(), {}});
    }

    /// The right to send `owner`'s acquire of `name` to member i: empty while an earlier one has
    /// not answered (and, if granted late, been given back). Without it, a waiting acquire's
    /// rounds pile requests up behind a slow member's connection pool, and a late grant's
    /// give-back waits behind them: its row stays for seconds (up to its TTL). The claim ends
    /// when the returned pointer (and its copies) are gone.
    std::shared_ptr<void> claim_member(std::size_t i, std::string const& name, std::string const& owner) {
        auto key = std::make_tuple(i, name, owner);
        {
            std::lock_guard lock(in_flight_mutex_);
            if (!in_flight_.insert(key).second) return nullptr;
        }
        auto self = std::static_pointer_cast<majority_locker_impl>(shared_from_this());
        // Non-null (the locker itself) so that the claim tests true; the deleter only ends it.
        return std::shared_ptr<void>(self.get(), [self, key](void*) {
            std::lock_guard lock(self->in_flight_mutex_);
            self->in_flight_.erase(key);
        });
    }

protected:
    std::shared_ptr<lease_row> acquire_row(std::string const& name, std::string const& owner,
                                           attempt const& bounds) override;

    std::uint64_t release_generation(std::string const&) override {
        std::lock_guard lock(wait_mutex_);
        return generation_;
    }
    void wait_for_release(std::string const&, std::uint64_t generation, clock::time_point until,
                          std::stop_token const& cancel) override {
        std::unique_lock lock(wait_mutex_);
        wait_cv_.wait_until(lock, cancel, until, [&] { return generation_ != generation; });
    }
    void announce_release(std::string const&) noexcept override {
        {
            std::lock_guard lock(wait_mutex_);
            ++generation_;
        }
        wait_cv_.notify_all();
    }

private:
    /// Settle a fencing token on the members in `granted`: read their counters
    /// (a majority must answer), then write max + 1 where it is still the
    /// largest (a majority must take it). Empty when that did not happen;
    /// `contended` then tells whether another client's token got in the way
    /// (rather than members failing to answer).
    std::optional<std::int64_t> settle_token(std::string const& name, std::vector<std::size_t> const& granted,
                                             clock::time_point valid_until, std::string& why, bool& contended);

    std::vector<member> members_;
    std::size_t quorum_;
    milliseconds member_timeout_;
    milliseconds drift_;
    std::mutex wait_mutex_;
    std::condition_variable_any wait_cv_;
    std::uint64_t generation_ = 0;
    std::mutex in_flight_mutex_;
    std::set<std::tuple<std::size_t, std::string, std::string>> in_flight_;  // claim_member
};

std::string summary(std::vector<std::optional<answer>> const& answers, std::vector<member> const& members) {
    std::string out;
    for (std::size_t i = 0; i < answers.size(); ++i) {
        if (!out.empty()) out += "; ";
        out += members[i].label + ": ";
        if (!answers[i]) {
            out += "no answer in time";
            continue;
        }
        switch (answers[i]->what) {
            case answer::kind::ok: out += "ok"; break;
            case answer::kind::busy: out += "busy"; break;
            case answer::kind::lost: out += "not ours"; break;
            case answer::kind::failed: out += answers[i]->why; break;
        }
    }
    return out;
}

// The same for answers of a subset of the members (`which` maps answer k to its member).
std::string majority_locker_impl_summary(std::vector<std::optional<answer>> const& answers,
                                         std::vector<member> const& members, std::vector<std::size_t> const& which) {
    std::vector<std::optional<answer>> full(members.size());
    std::vector<member> named;
    for (std::size_t k = 0; k < which.size() && k < answers.size(); ++k) {
        full[k] = answers[k];
        named.push_back(members[which[k]]);
    }
    full.resize(named.size());
    return summary(full, named);
}

std::optional<std::int64_t> majority_locker_impl::settle_token(std::string const& name,
                                                               std::vector<std::size_t> const& granted,
                                                               clock::time_point valid_until, std::string& why,
                                                               bool& contended) {
    contended = false;
    // The calls may outlive this function (a member that answers late): they
    // hold what they use.
    auto self = std::static_pointer_cast<majority_locker_impl>(shared_from_this());
    auto counter_call = [self, &granted, name](bool write, std::int64_t token) {
        return [self, granted, name, write, token](std::size_t k) -> answer {
            auto const& member_locker = self->members_[granted[k]].locker;
            auto* store = member_locker->member_store();
            auto const member_timeout = self->member_timeout_;
            try {
                if (write) {
                    bool won = store->run("settling majority token of lock '" + name + "'", [&](soci::session& s) {
                        return store->dialect().majority_write(s, name, token);
                    }, {.io_deadline = deadline_after(member_timeout)});
                    return {won ? answer::kind::ok : answer::kind::busy, nullptr, won ? 1 : 0, {}};
                }
                auto value = store->run("reading majority token of lock '" + name + "'", [&](soci::session& s) {
                    return store->dialect().majority_read(s, name);
                }, {.io_deadline = deadline_after(member_timeout)});
                return {answer::kind::ok, nullptr, value, {}};
            } catch (...) {
                return failure_of(std::current_exception());
            }
        };
    };
    auto count_ok = [](std::vector<std::optional<answer>> const& r) {
        return static_cast<std::size_t>(
            std::count_if(r.begin(), r.end(), [](auto const& a) { return a && a->what == answer::kind::ok; }));
    };
    for (int round = 0; round < 3 && clock::now() < valid_until; ++round) {
        auto reads = fanout<answer>::start(granted.size(), counter_call(false, 0))
                         ->settle(std::min(valid_until, deadline_after(member_timeout_)),
                                  [&](auto const& r) { return count_ok(r) == granted.size(); });
        if (count_ok(reads) < quorum_) {
            why = "fewer than " + std::to_string(quorum_) + " members answered the token read (" +
                  majority_locker_impl_summary(reads, members_, granted) + ")";
            return std::nullopt;
        }
        std::int64_t highest = 0;
        for (auto const& a : reads)
            if (a && a->what == answer::kind::ok) highest = std::max(highest, a->value);
        std::int64_t const token = highest + 1;
        auto writes = fanout<answer>::start(granted.size(), counter_call(true, token))
                          ->settle(std::min(valid_until, deadline_after(member_timeout_)),
                                   [&](auto const& r) { return count_ok(r) == granted.size(); });
        if (count_ok(writes) >= quorum_) return token;
        // Another client settled this token (or a higher one) meanwhile: read
        // again. Members that failed to answer: give up.
        contended = std::any_of(writes.begin(), writes.end(), [](auto const& a) { return a && a->what == answer::kind::busy; });
        why = "the token could not be written to a majority (" + majority_locker_impl_summary(writes, members_, granted) + ")";
        if (!contended) return std::nullopt;
    }
    return std::nullopt;
}

std::shared_ptr<lease_row> majority_locker_impl::acquire_row(std::string const& name, std::string const& owner,
                                                             attempt const&) {
    auto const start = clock::now();  // validity counts from before the first request
    auto const ttl = options_.ttl;
    auto const valid_until = start + ttl - drift_;
    auto self = std::static_pointer_cast<majority_locker_impl>(shared_from_this());

    // Who takes a member's late grant: the lease, once there is one; else nobody.
    struct shared_outcome {
        std::mutex mutex;
        std::weak_ptr<majority_row> lease;
    };
    auto outcome = std::make_shared<shared_outcome>();
    auto late = [outcome](std::size_t i, answer&& a) {
        if (a.what != answer::kind::ok) return;
        std::shared_ptr<majority_row> lease;
        {
            std::lock_guard lock(outcome->mutex);
            lease = outcome->lease.lock();
        }
        if (!lease || !lease->adopt(i, a.row)) give_back(a.row);
    };
    auto acquires = fanout<answer>::start(
        members_.size(),
        [self, name, owner](std::size_t i) -> answer {
            // Still on this owner's previous attempt: busy, as the member itself would say once
            // that attempt's grant lands (this attempt is another), and the wait goes on.
            auto claim = self->claim_member(i, name, owner);
            if (!claim) return {answer::kind::busy, nullptr, 0, {}};
            try {
                auto row = self->try_member(i, name);
                if (!row) return {answer::kind::busy, nullptr, 0, {}};
                // Claimed until the row is kept by a lease or given back (a late answer's handler).
                return {answer::kind::ok, std::move(row), 0, {}, std::move(claim)};
            } catch (...) {
                return failure_of(std::current_exception());
            }
        },
        late);
    auto refused_count = [](std::vector<std::optional<answer>> const& r) {
        return static_cast<std::size_t>(
            std::count_if(r.begin(), r.end(), [](auto const& a) { return a && a->what != answer::kind::ok; }));
    };
    // Settle as soon as the outcome is known: every member answered, or so many
    // refused that no majority is possible. A majority granted early still waits
    // (up to the member timeout) for the rest, so the lease starts on as many
    // members as answer in time.
    auto answers = acquires->settle(std::min(valid_until, deadline_after(member_timeout_)), [&](auto const& r) {
        return refused_count(r) > members_.size() - quorum_;
    });

    std::vector<std::shared_ptr<lease_row>> rows(members_.size());
    std::vector<std::size_t> granted;
    for (std::size_t i = 0; i < answers.size(); ++i)
        if (answers[i] && answers[i]->what == answer::kind::ok) {
            rows[i] = answers[i]->row;
            granted.push_back(i);
        }
    auto give_all_back = [&] {
        // Members that did not answer in time are released by `late` when they do.
        auto releases = fanout<answer>::start(granted.size(), [rows, granted](std::size_t k) -> answer {
            give_back(rows[granted[k]]);
            return {answer::kind::ok, nullptr, 0, {}};
        });
        (void)releases->settle(deadline_after(member_timeout_), {});
    };
    if (granted.size() < quorum_) {
        give_all_back();
        // Busy when some member says the lock is held there; when no member
        // says so and too few could be reached, say that instead.
        if (std::any_of(answers.begin(), answers.end(), [](auto const& a) { return a && a->what == answer::kind::busy; }))
            return nullptr;
        throw backend_unavailable("sqlock: majority lock '" + name + "' reached only " + std::to_string(granted.size()) +
                                  " of its " + std::to_string(members_.size()) + " members, fewer than the " +
                                  std::to_string(quorum_) + " it needs (" + summary(answers, members_) +
                                  "); nothing is held: retry later");
    }

    std::string why;
    bool contended = false;
    SQLOCK_FAILPOINT("majority.between_members");  // members granted, the token not settled yet
    auto token = settle_token(name, granted, valid_until, why, contended);
    if (!token && !contended && clock::now() < valid_until) {
        give_all_back();
        throw backend_unavailable("sqlock: majority lock '" + name + "' was granted by " +
                                  std::to_string(granted.size()) + " of " + std::to_string(members_.size()) +
                                  " members, but " + why + "; nothing is held: retry later");
    }
    if (!token || clock::now() >= valid_until) {
        give_all_back();
        return nullptr;
    }
    grant g{true, *token, 0, 0};
    // The database times of the first granting member stand for the lease's.
    g.created_us = duration_cast<microseconds>(rows[granted.front()]->created_at().time_since_epoch()).count();
    g.expires_us = duration_cast<microseconds>(rows[granted.front()]->expires_at().time_since_epoch()).count();
    auto lease = std::make_shared<majority_row>(shared_from_this(), self, name, owner, g, ttl, valid_until, rows);
    {
        std::lock_guard lock(outcome->mutex);
        outcome->lease = lease;
    }
    return lease;
}

bool majority_row::db_delete() {
    // Take the rows out and adopt no more: a late grant that arrives while the
    // releases run is given back by its handler, not kept by a released lease.
    std::vector<std::shared_ptr<lease_row>> rows;
    {
        std::lock_guard lock(rows_mutex_);
        closed_ = true;
        rows.resize(rows_.size());
        rows.swap(rows_);
    }
    auto const n = rows.size();
    auto releases = fanout<answer>::start(n, [rows](std::size_t i) -> answer {
        if (!rows[i]) return {answer::kind::busy, nullptr, 0, {}};  // not held there
        try {
            rows[i]->release_hold();
            return {answer::kind::ok, nullptr, 0, {}};
        } catch (...) {
            return failure_of(std::current_exception());
        }
    });
    auto answers = releases->settle(deadline_after(majority_->member_timeout()), {});
    // Ours unless a majority said the row was someone else's.
    auto lost = static_cast<std::size_t>(std::count_if(answers.begin(), answers.end(), [](auto const& a) {
        return a && a->what == answer::kind::lost;
    }));
    return lost < majority_->quorum();
}

std::optional<renewal> majority_row::db_renew(milliseconds ttl) {
    auto rows = rows_snapshot();
    auto const n = rows.size();
    auto self = std::static_pointer_cast<majority_row>(shared_from_this());
    auto majority = majority_;
    std::string const lock_name = name();
    // Members that hold the lease renew it; the others are tried again, so a
    // member that failed at the grant (or since) can rejoin while the lease lives.
    auto renewals = fanout<answer>::start(
        n,
        [rows, ttl, majority, lock_name](std::size_t i) -> answer {
            try {
                if (rows[i]) {
                    rows[i]->renew(std::min(ttl, rows[i]->ttl()));
                    return {answer::kind::ok, nullptr, 0, {}};
                }
                auto row = majority->try_member(i, lock_name);
                if (!row) return {answer::kind::busy, nullptr, 0, {}};
                return {answer::kind::ok, std::move(row), 0, {}};
            } catch (...) {
                return failure_of(std::current_exception());
            }
        },
        [self](std::size_t i, answer&& a) {
            if (a.what == answer::kind::ok && a.row && !self->adopt(i, a.row)) give_back(a.row);
        });
    auto answers = renewals->settle(std::min(valid_until(), deadline_after(majority_->member_timeout())), {});
    std::size_t renewed = 0, lost = 0;
    for (std::size_t i = 0; i < n; ++i) {
        if (!answers[i]) continue;
        auto& a = *answers[i];
        if (a.what == answer::kind::ok) {
            ++renewed;
            if (a.row && !adopt(i, a.row)) give_back(a.row);
        } else if (a.what == answer::kind::lost) {
            ++lost;
            std::lock_guard lock(rows_mutex_);
            rows_[i].reset();  // that member's row is someone else's now
        }
    }
    auto const quorum = majority_->quorum();
    if (renewed >= quorum) {
        auto now_us = duration_cast<microseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
        return renewal{now_us + duration_cast<microseconds>(ttl).count(), now_us};
    }
    if (lost > n - quorum) return std::nullopt;  // a majority is someone else's: lost
    throw backend_unavailable("sqlock: majority lock '" + name() + "' was renewed on only " + std::to_string(renewed) +
                              " of " + std::to_string(n) + " members (needs " + std::to_string(quorum) + ")");
}

}  // namespace
}  // namespace detail

locker majority_locker(std::vector<locker> members, majority_options options) {
    using namespace std::chrono;
    if (members.empty()) throw usage_error("sqlock: majority_locker needs at least one member locker (3 or more recommended)");
    std::vector<detail::member> list;
    std::set<std::pair<std::string, std::string>> seen;
    milliseconds ttl = milliseconds::max();
    for (auto const& m : members) {
        auto const& impl = m.impl();
        auto* store = impl ? impl->member_store() : nullptr;
        if (store == nullptr)
            throw usage_error("sqlock: a member of a majority locker must be a table_locker or row_locker "
                              "(a majority of majorities is not supported)");
        if (impl->locks_whole_database())
            throw usage_error("sqlock: a row_locker on SQLite (" + store->url() +
                              ") cannot be a majority member: its lease locks the whole file, so the member's token "
                              "counter could not be written; use a table_locker for SQLite members");
        auto key = std::make_pair(store->url(), store->options().table_prefix);
        if (!seen.insert(key).second)
            throw usage_error("sqlock: majority_locker got the database " + store->url() + " (table prefix '" +
                              key.second + "') twice: each member must be a different database");
        ttl = std::min(ttl, impl->options().ttl);
        list.push_back({impl, store->url()});
    }
    auto member_timeout = options.member_timeout.value_or(ttl / 10);
    auto drift = options.drift.value_or(ttl / 100 + milliseconds(2));
    if (member_timeout <= milliseconds::zero() || member_timeout >= ttl)
        throw usage_error("sqlock: majority member_timeout " + std::to_string(member_timeout.count()) +
                          " ms must be positive and below the members' ttl (" + std::to_string(ttl.count()) +
                          " ms); much below: the default is ttl/10");
    if (drift < milliseconds::zero() || drift >= ttl / 2)
        throw usage_error("sqlock: majority drift " + std::to_string(drift.count()) +
                          " ms must be at least 0 and below half the ttl");
    locker_options base{.ttl = ttl,
                        .owner = std::move(options.owner),
                        .backoff_min = options.backoff_min,
                        .backoff_max = options.backoff_max,
                        .auto_renew = options.auto_renew,
                        .max_hold = options.max_hold,
                        .on_lost = std::move(options.on_lost),
                        .on_event = std::move(options.on_event)};
    return locker(detail::make_fork_safe<detail::majority_locker_impl>(std::move(list), std::move(base), member_timeout, drift));
}

}  // namespace sqlock
