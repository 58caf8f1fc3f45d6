// Majority mode: a lease on each of N independent lockers, granted when a
// majority (N/2+1) grant it within the validity window, with a fencing token
// settled over the granting members' durable counters.
#include "detail/access.hpp"
#include "detail/failpoint.hpp"
#include "detail/lease_row.hpp"
#include "detail/locker_impl.hpp"
#include "detail/process.hpp"

#include <sqlock/errors.hpp>
#include <sqlock/majority.hpp>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <limits>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <tuple>
#include <unordered_map>
#include <variant>

namespace sqlock {
namespace detail {
namespace {

using std::chrono::duration_cast;
using std::chrono::microseconds;
using std::chrono::milliseconds;
using clock = std::chrono::steady_clock;

/// A thread that ended its pool's life from inside: a worker whose task dropped
/// the last reference to the locker that owns the pool (a late answer's lease,
/// say). It cannot join itself, so it is handed here, and joined by the next
/// hand-off or pool shutdown; by then it has left its loop (it has nothing to
/// do but return). Never detached. Process-wide and never destroyed, so that a
/// thread still running at exit finds it; a forked child leaves its parent's
/// entries alone (those threads do not exist there).
class orphan_threads {
public:
    static orphan_threads& instance() {
        static auto* const all = new orphan_threads;  // reachable for ever: no leak, no exit-time destructor
        return *all;
    }

    /// Keep `t` (a thread about to return) until another thread joins it.
    void hand_off(std::thread t) {
        auto ready = take();
        {
            std::lock_guard lock(mutex_);
            threads_.emplace_back(process_id(), std::move(t));
        }
        for (auto& r : ready) r.join();
    }

    /// Join what was handed off in this process (called from a thread that is not one of them).
    void join() {
        for (auto& r : take()) r.join();
    }

private:
    std::vector<std::thread> take() {
        std::vector<std::thread> ready;
        std::lock_guard lock(mutex_);
        auto const me = std::this_thread::get_id();
        for (auto it = threads_.begin(); it != threads_.end();) {
            if (it->first == process_id() && it->second.get_id() != me) {
                ready.push_back(std::move(it->second));
                it = threads_.erase(it);
            } else {
                ++it;
            }
        }
        return ready;
    }

    std::mutex mutex_;
    std::vector<std::pair<pid_t, std::thread>> threads_;
};

/// The threads that ask the members, owned by one majority locker. A call
/// never waits behind another: when no worker is idle a new one starts, so a
/// member that hangs holds one worker (up to its connect_timeout/io_timeout)
/// and delays no other call. A worker that stays idle for `idle_period` ends.
/// The destructor joins every worker, so it waits for the calls in flight.
class member_pool {
public:
    static constexpr std::chrono::seconds idle_period{5};

    member_pool() = default;
    member_pool(member_pool const&) = delete;
    member_pool& operator=(member_pool const&) = delete;

    /// Stops and joins every worker, after the task each is running (bounded
    /// by a member's connect_timeout/io_timeout). On one of its own workers
    /// (its task dropped the last reference to the owner), that worker is
    /// handed to orphan_threads instead of joining itself. Never runs in a
    /// forked child (make_fork_safe leaks the owner whole there).
    ~member_pool() {
        std::map<std::thread::id, std::thread> threads;
        {
            std::lock_guard lock(state_->mutex);
            state_->stopping = true;
            threads.swap(threads_);
        }
        state_->cv.notify_all();
        auto const me = std::this_thread::get_id();
        std::thread self;
        for (auto& [id, t] : threads) {
            if (id == me) self = std::move(t);
            else t.join();
        }
        if (self.joinable()) orphan_threads::instance().hand_off(std::move(self));
        else orphan_threads::instance().join();
    }

    /// Run `task` on an idle worker, or on a new one when none is idle. `task`
    /// must not throw.
    void run(std::function<void()> task) {
        std::vector<std::thread> ended;
        {
            std::lock_guard lock(state_->mutex);
            for (auto id : state_->ended) {
                auto it = threads_.find(id);
                if (it == threads_.end()) continue;
                ended.push_back(std::move(it->second));
                threads_.erase(it);
            }
            state_->ended.clear();
            state_->tasks.push_back(std::move(task));
            if (state_->tasks.size() > state_->idle) {
                ++state_->idle;  // the new worker counts as idle until it takes a task
                std::thread t(work, state_);
                auto const id = t.get_id();
                threads_.emplace(id, std::move(t));
            }
        }
        state_->cv.notify_one();
        for (auto& t : ended) t.join();  // they have left their loop
    }

private:
    struct state {
        std::mutex mutex;
        std::condition_variable cv;
        std::deque<std::function<void()>> tasks;
        // Workers free to take a queued task (waiting, or started and not yet
        // waiting); never fewer than the tasks queued.
        std::size_t idle = 0;
        bool stopping = false;
        std::vector<std::thread::id> ended;  // workers that left after an idle period, to be joined
    };

    // Uses only `s`: a task may drop the last reference to the locker, and with it the pool.
    static void work(std::shared_ptr<state> s) noexcept {
        std::unique_lock lock(s->mutex);
        for (;;) {
            bool const woken = s->cv.wait_for(lock, idle_period, [&] { return s->stopping || !s->tasks.empty(); });
            if (!woken || s->tasks.empty()) {
                --s->idle;
                s->ended.push_back(std::this_thread::get_id());
                return;
            }
            auto task = std::move(s->tasks.front());
            s->tasks.pop_front();
            --s->idle;
            lock.unlock();
            try {
                task();
            } catch (...) {}
            // Its captures are destroyed here, unlocked: that may drop the last reference to the
            // locker (a late grant's lease), whose destructor then hands this thread off.
            task = nullptr;
            lock.lock();
            ++s->idle;
        }
    }

    std::shared_ptr<state> state_ = std::make_shared<state>();
    std::map<std::thread::id, std::thread> threads_;  // guarded by state_->mutex
};

/// Runs one call per member, each on a worker of the locker's member_pool, and
/// lets the caller wait for them no longer than a deadline. A call that answers
/// after the caller settled is handed to `late` (which cleans up after it): a
/// member that is down or slow costs its timeout, never more, and the sum never.
/// The calls hold no reference to the locker (its destructor joins the pool
/// first, so what they use lives while they run).
template <class R>
class fanout : public std::enable_shared_from_this<fanout<R>> {
public:
    using late_handler = std::function<void(std::size_t, R&&)>;

    static std::shared_ptr<fanout> start(member_pool& pool, std::size_t n, std::function<R(std::size_t)> call,
                                         late_handler late = {}) {
        auto f = std::shared_ptr<fanout>(new fanout(n, std::move(late)));
        for (std::size_t i = 0; i < n; ++i) {
            pool.run([f, i, call]() noexcept {
                R r = call(i);
                std::unique_lock lock(f->mutex_);
                if (f->settled_) {
                    auto late_call = f->late_;
                    lock.unlock();
                    if (late_call) late_call(i, std::move(r));
                    lock.lock();
                } else {
                    f->results_[i] = std::move(r);
                    ++f->answered_;
                }
                ++f->finished_;
                lock.unlock();
                f->cv_.notify_all();
            });
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

    /// Wait until every call returned and a late answer's handler ran, or `deadline`.
    void drain(clock::time_point deadline) {
        std::unique_lock lock(mutex_);
        cv_.wait_until(lock, deadline, [&] { return finished_ == calls_; });
    }

private:
    fanout(std::size_t n, late_handler late) : calls_(n), results_(n), late_(std::move(late)) {}
    std::mutex mutex_;
    std::condition_variable cv_;
    std::size_t const calls_;
    std::vector<std::optional<R>> results_;
    std::size_t answered_ = 0;
    std::size_t finished_ = 0;  // calls returned, their late handler (if any) run
    bool settled_ = false;
    late_handler late_;
};

/// What one member said.
struct answer {
    enum class kind { ok, busy, lost, failed } what = kind::failed;
    std::shared_ptr<lease_row> row;  // acquire: the member's row
    std::int64_t value = 0;          // token rounds: the counter read, or 1 when the write won
    std::string why;                 // failed: the member's error
    std::shared_ptr<void>
        in_flight;             // acquire: the member's claim (majority_locker_impl::claim_member) until given back
    member_identity identity;  // token read: the member's identity and whether it has joined
    bool read = false;         // acquire: the member's counter was read in the same call (value, identity)
    bool won = false;          // acquire: the attempt's token was written here in the same call (a strict win)
};

/// How many answered ok with the attempt's token written in the same call.
std::size_t fast_wins(std::vector<std::optional<answer>> const& r) {
    return static_cast<std::size_t>(
        std::count_if(r.begin(), r.end(), [](auto const& a) { return a && a->what == answer::kind::ok && a->won; }));
}

/// How many answered ok with a counter read from a member that has joined: the reads a token may be settled on.
std::size_t joined_reads(std::vector<std::optional<answer>> const& r) {
    return static_cast<std::size_t>(std::count_if(r.begin(), r.end(), [](auto const& a) {
        return a && a->what == answer::kind::ok && a->read && a->identity.joined;
    }));
}

answer failure_of(std::exception_ptr const& e) {
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
        row->release_now();
    } catch (...) {}
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
                 std::vector<std::shared_ptr<lease_row>> rows, std::shared_ptr<fanout<answer>> acquiring)
        : lease_row(std::move(locker), std::move(name), std::move(owner), g, ttl, valid_until),
          majority_(std::move(majority)),
          acquiring_(std::move(acquiring)),
          rows_(std::move(rows)),
          confirmed_(rows_.size(), false) {}

    ~majority_row() override {
        // Abandoned without release (lost, or a forked child's copy): the member
        // rows expire by their TTL; in the acquiring process, free them now.
        if (!in_owning_process()) return;
        for (auto& r : rows_snapshot()) give_back(r);
    }

    /// A member that answered after the grant: one more member that holds it (its expiry counts).
    bool adopt(std::size_t i, std::shared_ptr<lease_row> row) {
        std::lock_guard lock(rows_mutex_);
        auto s = state();
        if (closed_ || (s != lease_state::held && s != lease_state::in_doubt)) return false;
        if (rows_[i]) return false;
        lower_expiry(duration_cast<microseconds>(row->expires_at().time_since_epoch()).count());
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

    /// Wait (up to the member timeout) for the grant's calls that had not answered when it
    /// settled: a member's grant that lands meanwhile is adopted, so that a release or renewal
    /// covers it rather than leave it to be given back (and busy) after the release returned.
    void await_late_grants();

    std::shared_ptr<majority_locker_impl> majority_;
    std::shared_ptr<fanout<answer>> acquiring_;  // the acquire's calls
    std::mutex rows_mutex_;
    std::vector<std::shared_ptr<lease_row>> rows_;  // per member; null where not held
    std::vector<bool> confirmed_;  // guarded by rows_mutex_: per member, its delete confirmed by a release
    bool closed_ = false;          // guarded by rows_mutex_: released (or being released), adopts nothing more
};

class majority_locker_impl final : public locker_impl {
public:
    majority_locker_impl(std::vector<member> members, std::size_t configured, locker_options options,
                         milliseconds member_timeout, milliseconds drift)
        : locker_impl(std::move(options), nullptr, engine_label::majority, kind_label::majority),
          members_(std::move(members)),
          configured_(configured),
          quorum_(configured / 2 + 1),
          member_timeout_(member_timeout),
          drift_(drift) {}

    std::size_t size() const noexcept { return members_.size(); }
    std::size_t quorum() const noexcept { return quorum_; }
    milliseconds member_timeout() const noexcept { return member_timeout_; }
    member const& at(std::size_t i) const { return members_[i]; }
    std::vector<member> const& members() const noexcept { return members_; }
    member_pool& pool() noexcept { return pool_; }

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
        // Non-null (the locker itself) so that the claim tests true; the deleter only ends it. No
        // claim outlives this locker: the calls that hold one are joined before the set goes.
        return std::shared_ptr<void>(this, [this, key](void*) {
            std::lock_guard lock(in_flight_mutex_);
            in_flight_.erase(key);
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
    /// largest (a majority must take it). `first` (per member of `granted`)
    /// holds the counters read with the grants, used as the first read when a
    /// majority of them is there. Empty when that did not happen; `contended`
    /// then tells whether another client's token got in the way (rather than
    /// members failing to answer).
    std::optional<std::int64_t> settle_token(std::string const& name, std::vector<std::size_t> const& granted,
                                             std::vector<std::optional<answer>> first, clock::time_point valid_until,
                                             std::string& why, bool& contended);

    /// Seed the members that have not joined (a new identity) from the others'
    /// counters and record them as joined, where the rules allow (docs/majority.md,
    /// "A member that lost its data"); true when at least one joined. `why` says
    /// who could not join and why.
    bool join_members(clock::time_point valid_until, std::string& why);

    /// The token the next attempt on `name` writes with its grants: one more than the last this
    /// locker handed out or saw for it (1 for a name it has not seen). Any value is safe (the write
    /// is a strict max-register write that must win on a majority); a stale one only misses.
    std::int64_t next_token_hint(std::string const& name) {
        std::lock_guard lock(hints_mutex_);
        auto it = hints_.find(name);
        return it == hints_.end() ? 1 : it->second + 1;
    }
    void remember_token(std::string const& name, std::int64_t token) {
        std::lock_guard lock(hints_mutex_);
        // Bounded: a locker that sees many names forgets them all at once, and their next
        // attempts take the read round again.
        if (hints_.size() >= max_hints && !hints_.contains(name)) hints_.clear();
        auto& h = hints_[name];
        h = std::max(h, token);
    }
    static constexpr std::size_t max_hints = 4096;

    std::vector<member> members_;
    std::size_t configured_;  // majority_options::configured_members
    std::size_t quorum_;
    milliseconds member_timeout_;
    milliseconds drift_;
    std::mutex wait_mutex_;
    std::condition_variable_any wait_cv_;
    std::uint64_t generation_ = 0;
    std::mutex in_flight_mutex_;
    std::set<std::tuple<std::size_t, std::string, std::string>> in_flight_;  // claim_member
    std::atomic<bool> seed_wanted_{false};  // a member's read showed it may be seeded (acquire_row)
    std::mutex hints_mutex_;
    std::unordered_map<std::string, std::int64_t> hints_;  // next_token_hint
    // Last, so destroyed first: its destructor joins the member calls still running, which use
    // the members and the claims above (they hold no reference to this locker).
    member_pool pool_;
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
            case answer::kind::busy: out += answers[i]->why.empty() ? "busy" : answers[i]->why; break;
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
                                                               std::vector<std::optional<answer>> first,
                                                               clock::time_point valid_until, std::string& why,
                                                               bool& contended) {
    contended = false;
    // The calls may outlive this function (a member that answers late): they
    // hold what they use, but the locker only by pointer (its destructor joins them).
    auto* self = this;
    auto read_call = [self, granted, name](std::size_t k) -> answer {
        try {
            auto read = self->members_[granted[k]].locker->read_token(name, clock::now() + self->member_timeout_);
            answer a{answer::kind::ok, nullptr, read.value, {}};
            a.identity = std::move(read.identity);
            a.read = true;
            return a;
        } catch (...) {
            return failure_of(std::current_exception());
        }
    };
    auto count_ok = [](std::vector<std::optional<answer>> const& r) {
        return static_cast<std::size_t>(
            std::count_if(r.begin(), r.end(), [](auto const& a) { return a && a->what == answer::kind::ok; }));
    };
    bool joined_some = false;
    // The first read comes with the grants when a majority of joined members gave one.
    std::optional<std::vector<std::optional<answer>>> carried;
    if (joined_reads(first) >= quorum_) carried = std::move(first);
    for (int round = 0; round < 3 && clock::now() < valid_until; ++round) {
        // A majority of joined members' counters is enough: it shares a member with the majority
        // the last token was won on, and the write round alone carries the safety.
        std::vector<std::optional<answer>> reads;
        if (carried) {
            reads = std::move(*carried);
            carried.reset();
        } else {
            reads = fanout<answer>::start(pool_, granted.size(), read_call)
                        ->settle(std::min(valid_until, clock::now() + member_timeout_),
                                 [&](auto const& r) { return joined_reads(r) >= quorum_; });
        }
        // Only members whose counters were seeded under their present identity count.
        std::vector<std::size_t> counted;  // indexes into granted
        std::vector<std::string> ids;
        std::int64_t highest = 0;
        bool unjoined = false, seedable = false;
        auto const min_age = duration_cast<microseconds>(options_.ttl + drift_).count();
        for (std::size_t k = 0; k < reads.size(); ++k) {
            auto const& a = reads[k];
            if (!a || a->what != answer::kind::ok) continue;
            if (!a->identity.joined) {
                unjoined = true;
                seedable = seedable || a->identity.age_us >= min_age;
                continue;
            }
            counted.push_back(k);
            ids.push_back(a->identity.id);
            highest = std::max(highest, a->value);
        }
        // A member that has not joined is seeded as soon as it may be (not only when it is needed).
        if (seedable && counted.size() >= quorum_ && !joined_some) {
            joined_some = true;
            std::string ignored;
            if (join_members(valid_until, ignored)) {
                --round;
                continue;
            }
        }
        if (counted.size() < quorum_) {
            if (unjoined && !joined_some && join_members(valid_until, why)) {
                joined_some = true;
                --round;  // the members seeded now count from the next read
                continue;
            }
            auto const said = majority_locker_impl_summary(reads, members_, granted);
            why = "fewer than " + std::to_string(quorum_) +
                  " members that have joined this majority answered the token read (" + said + ")" +
                  (why.empty() ? "" : "; " + why);
            return std::nullopt;
        }
        std::int64_t const token = highest + 1;
        auto write_call = [self, granted, counted, ids, name, token](std::size_t j) -> answer {
            try {
                bool const won =
                    self->members_[granted[counted[j]]].locker->write_token(name, token, ids[j],
                                                                            clock::now() + self->member_timeout_);
                return {won ? answer::kind::ok : answer::kind::busy, nullptr, won ? 1 : 0, {}};
            } catch (...) {
                return failure_of(std::current_exception());
            }
        };
        // Settled once a majority won (a write still in flight only raises a counter, which is
        // safe at any time) or can no longer win.
        auto writes = fanout<answer>::start(pool_, counted.size(), write_call)
                          ->settle(std::min(valid_until, clock::now() + member_timeout_), [&](auto const& r) {
                              auto const won = count_ok(r);
                              auto const answered = static_cast<std::size_t>(
                                  std::count_if(r.begin(), r.end(), [](auto const& a) { return a.has_value(); }));
                              return won >= quorum_ || answered - won > counted.size() - quorum_;
                          });
        if (count_ok(writes) >= quorum_) return token;
        // Another client settled this token (or a higher one) meanwhile, or a
        // member was recreated since the read: read again. Members that failed
        // to answer: give up.
        contended =
            std::any_of(writes.begin(), writes.end(), [](auto const& a) { return a && a->what == answer::kind::busy; });
        std::vector<std::size_t> written;
        for (auto k : counted) written.push_back(granted[k]);
        why = "the token could not be written to a majority (" +
              majority_locker_impl_summary(writes, members_, written) + ")";
        if (!contended) return std::nullopt;
    }
    return std::nullopt;
}

bool majority_locker_impl::join_members(clock::time_point valid_until, std::string& why) {
    // Every member, not only those that granted: the counters are read from as
    // many as answer, and the group is formed only when all N answer.
    auto* self = this;
    struct view {
        member_identity identity;
        std::vector<std::pair<std::string, std::int64_t>> counters;
    };
    using result = std::variant<view, std::string>;
    auto reads = fanout<result>::start(pool_, members_.size(), [self](std::size_t i) -> result {
                     try {
                         auto read = self->members_[i].locker->read_counters(clock::now() + self->member_timeout_);
                         return view{std::move(read.identity), std::move(read.counters)};
                     } catch (std::exception const& e) {
                         return std::string(e.what());
                     }
                 })->settle(std::min(valid_until, clock::now() + member_timeout_), {});
    std::size_t answered = 0, joined = 0;
    std::string unanswered;
    for (std::size_t i = 0; i < reads.size(); ++i) {
        if (reads[i] && std::holds_alternative<view>(*reads[i])) {
            ++answered;
            joined += std::get<view>(*reads[i]).identity.joined ? 1 : 0;
        } else {
            unanswered += (unanswered.empty() ? "" : "; ") + members_[i].label + ": " +
                          (reads[i] ? std::get<std::string>(*reads[i]) : std::string("no answer in time"));
        }
    }
    // Formed: every member of the configured N answered and none has joined (a
    // new group). Otherwise a member that has not joined is seeded from a
    // majority of joined members, once its identity is older than the ttl: by
    // then every lease and token its former data took part in is over, so the
    // counters read hold every token a majority could have handed out.
    bool const forming = answered == configured_ && answered == members_.size() && joined == 0;
    auto const min_age = duration_cast<microseconds>(options_.ttl + drift_).count();
    std::string refused;
    std::vector<std::size_t> seed;
    for (std::size_t i = 0; i < reads.size(); ++i) {
        if (!reads[i] || !std::holds_alternative<view>(*reads[i])) continue;
        auto const& v = std::get<view>(*reads[i]);
        if (v.identity.joined) continue;
        if (!forming && joined < quorum_) {
            refused += (refused.empty() ? "" : "; ") + members_[i].label +
                       " has not joined this majority (a new identity: the database was created, recreated or "
                       "restored since); it is seeded with the other members' counters once " +
                       std::to_string(quorum_) + " members that have joined answer together (" +
                       std::to_string(joined) + " did" + (unanswered.empty() ? "" : "; " + unanswered) + ")";
        } else if (!forming && v.identity.age_us < min_age) {
            refused += (refused.empty() ? "" : "; ") + members_[i].label +
                       " has not joined this majority (a new identity, " + std::to_string(v.identity.age_us / 1000) +
                       " ms old); it is seeded once its identity is older than the ttl plus drift (" +
                       std::to_string(min_age / 1000) + " ms), when no lease of its former data can still be live";
        } else {
            seed.push_back(i);
        }
    }
    why = refused;
    if (seed.empty()) return false;
    std::map<std::string, std::int64_t> highest;
    for (auto const& r : reads)
        if (r && std::holds_alternative<view>(*r))
            for (auto const& [n, t] : std::get<view>(*r).counters) highest[n] = std::max(highest[n], t);
    auto seeded = std::make_shared<std::vector<std::pair<std::string, std::int64_t>>>(highest.begin(), highest.end());
    std::vector<std::string> ids;
    for (auto i : seed) ids.push_back(std::get<view>(*reads[i]).identity.id);
    auto writes = fanout<answer>::start(pool_, seed.size(), [self, seed, ids, seeded](std::size_t k) -> answer {
                      try {
                          bool const done = self->members_[seed[k]].locker->join(ids[k], *seeded,
                                                                                 clock::now() + self->member_timeout_);
                          return {done ? answer::kind::ok : answer::kind::busy, nullptr, 0, {}};
                      } catch (...) {
                          return failure_of(std::current_exception());
                      }
                  })->settle(clock::now() + member_timeout_, {});
    return std::any_of(writes.begin(), writes.end(), [](auto const& a) { return a && a->what == answer::kind::ok; });
}

std::shared_ptr<lease_row> majority_locker_impl::acquire_row(std::string const& name, std::string const& owner,
                                                             attempt const&) {
    auto const start = clock::now();  // validity counts from before the first request
    auto const ttl = options_.ttl;
    auto const valid_until = start + ttl - drift_;
    auto self = std::static_pointer_cast<majority_locker_impl>(shared_from_this());

    // Who takes a member's grant that answers after the round settled: while
    // the attempt goes on it waits here; then the lease adopts it, or (no
    // lease, or one released meanwhile) it is given back.
    struct shared_outcome {
        std::mutex mutex;
        bool open = true;
        std::vector<std::pair<std::size_t, answer>> parked;
        std::weak_ptr<majority_row> lease;
    };
    auto outcome = std::make_shared<shared_outcome>();
    auto late = [outcome](std::size_t i, answer&& a) {
        if (a.what != answer::kind::ok) return;
        std::shared_ptr<majority_row> lease;
        {
            std::lock_guard lock(outcome->mutex);
            if (outcome->open) {
                outcome->parked.emplace_back(i, std::move(a));
                return;
            }
            lease = outcome->lease.lock();
        }
        if (!lease || !lease->adopt(i, a.row)) give_back(a.row);
        // The claim ends while `lease` still holds the locker: dropping `lease` may destroy it.
        a.in_flight.reset();
    };
    // Ends the attempt: the parked grants are adopted by `lease`, or given back on the pool.
    auto close = [this, outcome](std::shared_ptr<majority_row> const& lease) noexcept {
        std::vector<std::pair<std::size_t, answer>> parked;
        {
            std::lock_guard lock(outcome->mutex);
            if (!outcome->open) return;
            outcome->open = false;
            outcome->lease = lease;
            parked.swap(outcome->parked);
        }
        for (auto& p : parked) {
            auto& a = p.second;
            if (lease && lease->adopt(p.first, a.row)) continue;  // its claim ends with `parked`
            try {
                pool_.run([a]() mutable noexcept {
                    give_back(a.row);
                    a.in_flight.reset();
                });
            } catch (...) {
                give_back(a.row);
            }
        }
    };
    struct closer {
        std::function<void()> f;
        ~closer() { f(); }
    } closing{[&close] { close(nullptr); }};  // any path that hands out no lease

    auto* me = this;
    auto settled = std::make_shared<std::atomic<bool>>(false);
    // Two rounds per cycle (issue 40, design 3; tests/spin/majority_token.pml -DTWOROUNDS): every
    // member that grants writes this one token in the same call, a strict max-register write only
    // where its present identity has joined, and the token is handed out when that won on a majority
    // of the configured members. Elsewhere the call reads the counter, as before, for the rounds.
    auto const fast_token = next_token_hint(name);
    auto acquires = fanout<answer>::start(
        pool_, members_.size(),
        [me, name, owner, settled, fast_token](std::size_t i) -> answer {
            // Still on this owner's previous attempt: busy, as the member itself would say once
            // that attempt's grant lands (this attempt is another), and the wait goes on.
            auto claim = me->claim_member(i, name, owner);
            if (!claim) return {answer::kind::busy, nullptr, 0, {}};
            std::shared_ptr<lease_row> row;
            try {
                row = me->try_member(i, name);
                if (!row) return {answer::kind::busy, nullptr, 0, {}};
            } catch (...) {
                return failure_of(std::current_exception());
            }
            // Claimed until the row is kept by a lease or given back (a late answer's handler).
            answer a{answer::kind::ok, std::move(row), 0, {}, std::move(claim)};
            // The token's first write, or else its first read, in the same call: no round of its
            // own. Safe before any exclusion: the write alone carries the token's safety
            // (docs/majority.md). A grant after the round settled needs neither, and its give-back
            // no delay.
            if (settled->load()) return a;
            try {
                auto w =
                    me->members_[i].locker->write_or_read_token(name, fast_token, clock::now() + me->member_timeout_);
                a.read = true;
                if (w.won) {
                    // Also a read, for the rounds when too few won: the counter is now the token,
                    // and the member's present identity (whichever it is: empty id) has joined. It
                    // stays the same for the attempt: another would join only once older than the TTL.
                    a.won = true;
                    a.value = fast_token;
                    a.identity = member_identity{{}, 0, true};
                    return a;
                }
                a.value = w.read.value;
                a.identity = std::move(w.read.identity);
                // A member that may be seeded now: this answer may come too late for the rounds to
                // see it (a majority of wins settles them first), so the locker remembers it.
                if (!a.identity.joined &&
                    a.identity.age_us >= duration_cast<microseconds>(me->options_.ttl + me->drift_).count())
                    me->seed_wanted_.store(true);
            } catch (...) {}  // read again in a round of its own
            return a;
        },
        late);
    auto refused_count = [](std::vector<std::optional<answer>> const& r) {
        return static_cast<std::size_t>(
            std::count_if(r.begin(), r.end(), [](auto const& a) { return a && a->what != answer::kind::ok; }));
    };
    // Settle as soon as the outcome is known: a majority of joined members
    // granted and read (the token can be settled on them; the others' grants
    // are adopted when they answer), so many refused that no majority is
    // possible, or every member answered.
    auto answers = acquires->settle(std::min(valid_until, clock::now() + member_timeout_), [&](auto const& r) {
        return fast_wins(r) >= quorum_ || joined_reads(r) >= quorum_ || refused_count(r) > members_.size() - quorum_;
    });
    settled->store(true);

    std::vector<std::shared_ptr<lease_row>> rows(members_.size());
    std::vector<std::size_t> granted;
    std::vector<std::optional<answer>> reads;  // per member of `granted`: its counter read with the grant
    for (std::size_t i = 0; i < answers.size(); ++i)
        if (answers[i] && answers[i]->what == answer::kind::ok) {
            rows[i] = answers[i]->row;
            granted.push_back(i);
            auto& a = *answers[i];
            if (a.read) reads.push_back(answer{answer::kind::ok, nullptr, a.value, {}, nullptr, a.identity, true});
            else reads.emplace_back();
        }
    auto give_all_back = [&] {
        close(nullptr);
        auto releases = fanout<answer>::start(pool_, granted.size(), [rows, granted](std::size_t k) -> answer {
            give_back(rows[granted[k]]);
            return {answer::kind::ok, nullptr, 0, {}};
        });
        (void)releases->settle(clock::now() + member_timeout_, {});
    };
    if (granted.size() < quorum_) {
        give_all_back();
        // Busy when some member says the lock is held there; when no member
        // says so and too few could be reached, say that instead.
        if (std::any_of(answers.begin(), answers.end(),
                        [](auto const& a) { return a && a->what == answer::kind::busy; }))
            return nullptr;
        throw backend_unavailable("sqlock: majority lock '" + name + "' reached only " +
                                  std::to_string(granted.size()) + " of its " + std::to_string(members_.size()) +
                                  " members, fewer than the " + std::to_string(quorum_) + " it needs (" +
                                  summary(answers, members_) + "); nothing is held: retry later");
    }

    std::string why;
    bool contended = false;
    SQLOCK_FAILPOINT("majority.between_members");  // members granted, the token not settled yet
    // Only answered wins count, each a strict win of the one token of this attempt.
    std::optional<std::int64_t> token;
    if (fast_wins(answers) >= quorum_) token = fast_token;
    // With too few wins, the rounds go on from the wins and reads (a win reads as the token).
    else token = settle_token(name, granted, std::move(reads), valid_until, why, contended);
    if (token) {
        remember_token(name, *token);
        // A member that has not joined is seeded as soon as it may be, not only once it is needed
        // (settle_token does the same when its reads show one).
        if (seed_wanted_.exchange(false)) {
            std::string ignored;
            (void)join_members(valid_until, ignored);
        }
    }
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
    // The lease's database times: the first granting member's creation, the earliest expiry among
    // the granting members (each on its own database's clock; as on renewal).
    g.created_us = duration_cast<microseconds>(rows[granted.front()]->created_at().time_since_epoch()).count();
    g.expires_us = std::numeric_limits<std::int64_t>::max();
    for (auto i : granted)
        g.expires_us =
            std::min(g.expires_us, duration_cast<microseconds>(rows[i]->expires_at().time_since_epoch()).count());
    auto lease =
        std::make_shared<majority_row>(shared_from_this(), self, name, owner, g, ttl, valid_until, rows, acquires);
    close(lease);
    return lease;
}

void majority_row::await_late_grants() {
    if (acquiring_) acquiring_->drain(std::min(valid_until(), clock::now() + majority_->member_timeout()));
}

bool majority_row::db_delete() {
    await_late_grants();
    // Adopt no more: a late grant that arrives while the releases run is given
    // back by its handler, not kept by a released lease.
    std::vector<std::shared_ptr<lease_row>> rows;
    {
        std::lock_guard lock(rows_mutex_);
        closed_ = true;
        rows = rows_;
    }
    auto const n = rows.size();
    auto releases = fanout<answer>::start(majority_->pool(), n, [rows](std::size_t i) -> answer {
        if (!rows[i]) return {answer::kind::busy, nullptr, 0, "not held there"};
        try {
            rows[i]->release_now();
            return {answer::kind::ok, nullptr, 0, {}};
        } catch (...) {
            return failure_of(std::current_exception());
        }
    });
    auto answers = releases->settle(clock::now() + majority_->member_timeout(), {});
    std::size_t confirmed = 0, lost = 0;
    bool unanswered = false;
    {
        std::lock_guard lock(rows_mutex_);
        for (std::size_t i = 0; i < n; ++i) {
            if (!rows[i]) continue;
            if (!answers[i]) {
                unanswered = true;
                continue;
            }
            if (answers[i]->what == answer::kind::ok) {
                confirmed_[i] = true;
                rows_[i].reset();
            } else if (answers[i]->what == answer::kind::lost) {
                ++lost;
                rows_[i].reset();
            }
        }
        confirmed = static_cast<std::size_t>(std::count(confirmed_.begin(), confirmed_.end(), true));
    }
    auto const quorum = majority_->quorum();
    // Released only when a majority confirmed its delete; someone else's when a
    // majority said so. Anything else is not known: the rows that may be left
    // stay with the lease (a second release() tries them again) and end by their TTL.
    if (confirmed >= quorum) return true;
    if (lost >= quorum) return false;
    std::string const what = "sqlock: majority lock '" + name() + "' (token " + std::to_string(token()) +
                             "): the release was confirmed by " + std::to_string(confirmed) + " of " +
                             std::to_string(n) + " members, fewer than the " + std::to_string(quorum) + " it needs (" +
                             summary(answers, majority_->members()) +
                             "); the lease is in doubt, not released: call release() again to retry, or treat the "
                             "lock as not held; the rows left end by their TTL";
    if (unanswered) throw in_doubt(what);
    throw backend_unavailable(what);
}

std::optional<renewal> majority_row::db_renew(milliseconds ttl) {
    {
        // A release that was not confirmed: no member is asked to grant it again.
        std::lock_guard lock(rows_mutex_);
        if (closed_)
            throw backend_unavailable("sqlock: majority lock '" + name() +
                                      "' is not renewed: its release was not confirmed by a majority");
    }
    await_late_grants();
    auto rows = rows_snapshot();
    auto const n = rows.size();
    // The late handler holds the lease weakly: a lease dropped meanwhile gives the grant back.
    auto self = std::weak_ptr<majority_row>(std::static_pointer_cast<majority_row>(shared_from_this()));
    auto* majority = majority_.get();  // lives while the calls run (its destructor joins them)
    std::string const lock_name = name();
    // Members that hold the lease renew it; the others are tried again, so a
    // member that failed at the grant (or since) can rejoin while the lease lives.
    auto renewals = fanout<answer>::start(
        majority_->pool(), n,
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
            if (a.what != answer::kind::ok || !a.row) return;
            auto lease = self.lock();
            if (!lease || !lease->adopt(i, a.row)) give_back(a.row);
        });
    // Settled once a majority renewed (or a majority is someone else's), as the acquire: a slow
    // member's renewal still in flight only extends its row, and waiting for it could run the
    // lease past its validity although a majority holds it.
    auto const quorum = majority_->quorum();
    auto answers =
        renewals->settle(std::min(valid_until(), clock::now() + majority_->member_timeout()), [&](auto const& r) {
            std::size_t ok = 0, refused = 0;
            for (auto const& a : r) {
                if (!a) continue;
                if (a->what == answer::kind::ok) ++ok;
                else if (a->what == answer::kind::lost) ++refused;
            }
            return ok >= quorum || refused > n - quorum;
        });
    std::size_t renewed = 0, lost = 0;
    // The lease's expiry is the earliest its members' databases gave (each on its own clock): the
    // moment a majority still holds it, or earlier; never the client's clock.
    std::optional<renewal> earliest;
    for (std::size_t i = 0; i < n; ++i) {
        if (!answers[i]) continue;
        auto& a = *answers[i];
        if (a.what == answer::kind::ok) {
            ++renewed;
            auto const& row = a.row ? a.row : rows[i];
            auto const expires_us = duration_cast<microseconds>(row->expires_at().time_since_epoch()).count();
            if (!earliest || expires_us < earliest->expires_us)
                earliest = renewal{expires_us, expires_us - duration_cast<microseconds>(row->ttl()).count()};
            if (a.row && !adopt(i, a.row)) give_back(a.row);
        } else if (a.what == answer::kind::lost) {
            ++lost;
            std::lock_guard lock(rows_mutex_);
            rows_[i].reset();  // that member's row is someone else's now
        }
    }
    if (renewed >= quorum) return earliest;
    if (lost > n - quorum) return std::nullopt;  // a majority is someone else's: lost
    throw backend_unavailable("sqlock: majority lock '" + name() + "' was renewed on only " + std::to_string(renewed) +
                              " of " + std::to_string(n) + " members (needs " + std::to_string(quorum) + ")");
}

}  // namespace
}  // namespace detail

locker majority_locker(std::vector<locker> const& members, majority_options options) {
    using namespace std::chrono;
    if (members.empty())
        throw usage_error("sqlock: majority_locker needs at least one member locker (3 or more recommended)");
    std::vector<detail::member> list;
    std::set<std::string> seen;
    milliseconds ttl = milliseconds::max();
    for (auto const& m : members) {
        auto const& impl = detail::access::impl(m);
        if (!impl) throw usage_error("sqlock: a member of a majority locker is an empty (moved-from) locker");
        if (auto why = impl->member_refusal()) throw usage_error("sqlock: " + *why);
        auto label = impl->member_label();
        if (!seen.insert(impl->member_key()).second)
            throw usage_error("sqlock: majority_locker got the database " + label +
                              " (same URL and table prefix) "
                              "twice: each member must be a different database");
        ttl = std::min(ttl, impl->options().ttl);
        list.push_back({impl, std::move(label)});
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
    auto const configured = options.configured_members.value_or(list.size());
    if (configured < list.size() || list.size() < configured / 2 + 1)
        throw usage_error("sqlock: majority configured_members " + std::to_string(configured) +
                          " must be at least the " + std::to_string(list.size()) +
                          " member lockers given, and they must be a majority of it (" +
                          std::to_string(configured / 2 + 1) + " or more)");
    return detail::access::make_locker(detail::make_fork_safe<detail::majority_locker_impl>(std::move(list), configured,
                                                                                            std::move(base),
                                                                                            member_timeout, drift));
}

}  // namespace sqlock
