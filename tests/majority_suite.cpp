// sqlock tests — majority mode (issue 11) on three independent databases:
// Majority.<Test>. The members are the PostgreSQL database `sqlock`
// (SQLOCK_TEST_PG_URL), a second PostgreSQL database `sqlock2` on the same
// server (SQLOCK_TEST_PG2_URL) and MariaDB (SQLOCK_TEST_MYSQL_URL); each is
// reached through a fault proxy of its own (tests/fault_proxy.hpp), so a member
// that refuses (block()) or goes silent (stall()) is a real one. The checks
// read each member's lock table with raw SQL on a direct connection, behind the
// proxies.
//
// Each test has tables of its own on every member (a random table_prefix,
// created by the stores, dropped afterwards), so a run is safe on shared
// servers. Outcomes are recorded (what a call returned or threw, the member
// lockers' lease events, the rows) and the record is checked; waits for
// background work are bounded polls. The only timing assertions are coarse
// upper bounds, each explained where it is made.
#include "command_counter.hpp"
#include "fault_calls.hpp"
#include "fault_proxy.hpp"
#include "faults/majority_members.hpp"
#include "test_env.hpp"
#include "test_process.hpp"

#include <sqlock/majority.hpp>
#include <sqlock/sqlock.hpp>

#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#ifndef SQLOCK_MAJORITY_WORKER
#error "SQLOCK_MAJORITY_WORKER (path of sqlock_majority_worker) must be defined by the build"
#endif

namespace {

using namespace std::chrono_literals;
using namespace sqlock_test;
using sqlock::engine;
using sqlock::lease;
using sqlock::locker;
using std::chrono::milliseconds;
using std::chrono::steady_clock;
using event_kind = sqlock::lease_event::kind;

long long ms_of(steady_clock::duration d) { return std::chrono::duration_cast<milliseconds>(d).count(); }

/// The lease events of one locker, kept for the test to check. Shared with the
/// hook, which may still be called by a member's late answer after the test body.
class event_log {
public:
    std::function<void(sqlock::lease_event const&)> hook() const {
        return [s = state_](sqlock::lease_event const& e) {
            std::lock_guard lock(s->mutex);
            s->events.push_back({e.what, std::string(e.name), e.token});
        };
    }

    std::size_t count(event_kind what, std::string const& name) const {
        std::lock_guard lock(state_->mutex);
        std::size_t n = 0;
        for (auto const& e : state_->events)
            if (e.what == what && e.name == name) ++n;
        return n;
    }

    std::string all() const {
        std::lock_guard lock(state_->mutex);
        std::string out;
        for (auto const& e : state_->events)
            out += "  " + std::string(to_string(e.what)) + " " + e.name + " token " + std::to_string(e.token) + "\n";
        return out.empty() ? "  (none)\n" : out;
    }

private:
    struct event {
        event_kind what;
        std::string name;
        std::int64_t token;
    };
    struct state {
        std::mutex mutex;
        std::vector<event> events;
    };
    std::shared_ptr<state> state_ = std::make_shared<state>();
};

/// One member database (faults/majority_members.hpp: its server, the proxy the library reaches it
/// through, a store on the proxy, a direct raw session for the checks), and the lease events of its
/// member lockers.
struct member_db : sqlock_test::member_db {
    event_log events;
};

/// Three member databases with tables of the test's own.
class Majority : public ::testing::Test {
protected:
    void SetUp() override {
        auto const specs = shared_majority_members();
        if (should_stop()) return;
        for (auto const& spec : specs) {
            member_db m;
            m.label = spec.label;
            m.e = spec.e;
            m.url = spec.url;
            members_.push_back(std::move(m));
        }
        tables_ = "sqlm_" + random_hex(10);
        prefix_ = random_prefix();
        for (auto& m : members_) {
            m.proxy = fault_proxy::for_url(m.url);
            // io_timeout well above anything a test waits for a member, so a stalled
            // member's statement is still waiting when the test resumes it.
            m.store.emplace(m.proxy->proxied_url(m.url), sqlock::store_options{.pool_size = 4,
                                                                               .create_schema = true,
                                                                               .table_prefix = tables_,
                                                                               .connect_timeout = 5s,
                                                                               .io_timeout = 20s});
            m.raw = raw_session(m.e, m.url);
        }
        // New members form their group the first time all three answer (docs/majority.md): before any
        // test takes one down.
        auto formed = majority(10s, {.auto_renew = false}).try_acquire(n("form-group"));
        ASSERT_TRUE(formed.has_value()) << "the three members did not form a majority group";
        formed->release();
    }

    void TearDown() override {
        for (auto& m : members_) {
            if (!m.proxy) continue;
            m.proxy->resume();
            m.proxy->unblock();
        }
        for (auto& m : members_) {
            m.store.reset();
            m.proxy.reset();  // cuts what is left: the servers end those sessions and their transactions
        }
        if (tables_.empty()) return;
        for (auto& m : members_) drop_member_tables(m, tables_);
    }

    /// A lock name under this test's prefix.
    std::string n(std::string_view s) const { return prefix_ + std::string(s); }

    member_db& at(std::size_t i) { return members_.at(i); }

    /// A table locker on member i (through its proxy), its events recorded.
    locker member_locker(std::size_t i, milliseconds ttl) {
        return sqlock::table_locker(*at(i).store, {.ttl = ttl, .auto_renew = false, .on_event = at(i).events.hook()});
    }

    /// The majority of a table locker on each member.
    locker majority(milliseconds ttl, sqlock::majority_options options = {}) {
        std::vector<locker> ms;
        for (std::size_t i = 0; i < members_.size(); ++i) ms.push_back(member_locker(i, ttl));
        return sqlock::majority_locker(std::move(ms), std::move(options));
    }

    /// The lock row of `name` on member i (raw SQL, direct), if any.
    std::optional<lock_row> row_on(std::size_t i, std::string const& name) {
        return read_row(*at(i).raw, at(i).e, name, tables_);
    }

    /// Which members have a row of `name`, e.g. "pg pg2" (for messages).
    std::string holders_of(std::string const& name) {
        std::string out;
        for (std::size_t i = 0; i < members_.size(); ++i)
            if (row_on(i, name)) out += (out.empty() ? "" : " ") + at(i).label;
        return out.empty() ? "none" : out;
    }

    /// A store straight on member i's database (no proxy), for a holder from outside.
    sqlock::store direct_store(std::size_t i) {
        return sqlock::store(at(i).url, {.pool_size = 2, .table_prefix = tables_});
    }

    std::vector<member_db> members_;
    std::string tables_;
    std::string prefix_;
};

// ============================================================ 1. one member down, two down

// Redlock's liveness B: with one of three members refusing connections the
// lock is granted (on the other two); with two refusing it is not, and since
// no member said the lock is held, the majority says so: backend_unavailable
// (src/majority_locker.cpp, "too few members reachable and none busy"), with
// nothing left on the member that did grant.
TEST_F(Majority, GrantedWithOneMemberDownRefusedWithTwoDown) {
    locker M = majority(10s, {.member_timeout = 1s, .auto_renew = false});
    std::string const one_down = n("one-down");
    at(2).proxy->block();

    std::optional<lease> l;
    std::string what = outcome_of([&] { l = M.try_acquire(one_down); });
    ASSERT_EQ(what, "returned") << "try_acquire with one of three members down";
    ASSERT_TRUE(l.has_value()) << "not granted with two of three members up; rows on: " << holders_of(one_down);
    EXPECT_TRUE(l->held());
    EXPECT_GT(l->token(), 0);
    EXPECT_TRUE(row_on(0, one_down).has_value()) << "member pg holds no row of the granted lock";
    EXPECT_TRUE(row_on(1, one_down).has_value()) << "member pg2 holds no row of the granted lock";
    EXPECT_FALSE(row_on(2, one_down).has_value()) << "the blocked member holds a row";
    EXPECT_GT(at(2).proxy->refused(), 0u) << "the blocked member was never tried";
    EXPECT_EQ(outcome_of([&] { l->release(); }), "returned");
    EXPECT_EQ(holders_of(one_down), "none") << "rows left after the release";

    std::string const two_down = n("two-down");
    at(1).proxy->block();
    std::optional<lease> refused;
    what = outcome_of([&] { refused = M.try_acquire(two_down); });
    EXPECT_NE(what.find("backend_unavailable"), std::string::npos)
        << "with two of three members down and none saying the lock is held, try_acquire must throw "
           "sqlock::backend_unavailable; it: "
        << what << (refused ? " (and granted!)" : "");
    EXPECT_FALSE(refused.has_value()) << "granted with one member of three";
    // The one member that granted gave its row back (within the attempt, or
    // shortly after if that release answered late).
    EXPECT_TRUE(eventually([&] { return at(0).events.count(event_kind::released, two_down) == 1; }, 10s))
        << "member pg's grant of the refused attempt was not released; pg's events:\n"
        << at(0).events.all();
    EXPECT_FALSE(row_on(0, two_down).has_value()) << "member pg keeps a row of the refused attempt";
}

// ============================================================ 2. a stalled member costs its timeout

// A member that goes silent (connections open, nothing relayed: a stopped
// server or a silent network) must cost the majority no more than the
// per-member timeout. The grant comes from the other two; the silent member's
// grant, once it answers, is adopted by the lease and released with it.
TEST_F(Majority, StalledMemberCostsOnlyItsTimeout) {
    constexpr milliseconds member_timeout = 200ms;
    locker M = majority(10s, {.member_timeout = member_timeout, .auto_renew = false});

    // The other members' round trips: a full cycle with every member healthy
    // (this also opens each member's pooled connection).
    steady_clock::duration round_trip{};
    {
        auto const start = steady_clock::now();
        auto warm = M.try_acquire(n("warm-up"));
        round_trip = steady_clock::now() - start;
        ASSERT_TRUE(warm.has_value());
        warm->release();
    }

    std::string const name = n("stalled");
    at(2).proxy->stall();
    auto const start = steady_clock::now();
    std::optional<lease> l;
    std::string const what = outcome_of([&] { l = M.try_acquire(name); });
    auto const took = steady_clock::now() - start;
    ASSERT_EQ(what, "returned");
    ASSERT_TRUE(l.has_value()) << "not granted with one of three members stalled; rows on: " << holders_of(name);
    // Coarse: the attempt waits for the stalled member up to member_timeout
    // (200 ms), then settles the token on the two others (two more round trips,
    // each like the healthy cycle's). 5 x member_timeout plus 4 healthy cycles
    // leaves room for a loaded 2-core CI machine; waiting for the stalled
    // member's own statement bound (io_timeout, 20 s) would be far beyond it.
    auto const bound = 5 * member_timeout + 4 * round_trip;
    EXPECT_LT(took, bound) << "try_acquire with a stalled member took " << ms_of(took) << " ms (healthy cycle "
                           << ms_of(round_trip) << " ms, member_timeout " << member_timeout.count() << " ms)";
    EXPECT_LT(took, 20s) << "try_acquire waited for the stalled member's io_timeout";
    RecordProperty("stalled_acquire_ms", static_cast<int>(ms_of(took)));
    RecordProperty("healthy_cycle_ms", static_cast<int>(ms_of(round_trip)));
    EXPECT_TRUE(row_on(0, name).has_value());
    EXPECT_TRUE(row_on(1, name).has_value());
    EXPECT_FALSE(row_on(2, name).has_value()) << "the stalled member holds a row: the stall relayed the insert";

    // Resumed, the silent member's insert lands and answers late: one more
    // member that holds the lease, released with it.
    at(2).proxy->resume();
    EXPECT_TRUE(eventually([&] { return row_on(2, name).has_value(); }, 15s))
        << "the late grant of the resumed member never showed up on it";
    EXPECT_TRUE(l->held()) << to_string(l->state());
    EXPECT_EQ(outcome_of([&] { l->release(); }), "returned");
    EXPECT_TRUE(eventually([&] { return holders_of(name) == "none"; }, 10s))
        << "rows left after the release on: " << holders_of(name) << "; mariadb's events:\n"
        << at(2).events.all();
}

// Issue 21: an attempt settles as soon as a majority of the members granted
// (and gave their token counters); it does not wait out member_timeout for the
// rest, whose grants the lease adopts when they answer. mariadb is stalled
// (nothing relayed; member_timeout 50 s). Checked by order, not time: the lease
// is returned while mariadb is still stalled, so before its call could answer.
// A watchdog resumes mariadb only if try_acquire has not returned 10 s after it
// began (so that the old behaviour ends instead of hanging), and records that it
// did. Then that very call's insert lands and answers, and the lease returned
// before adopts it and releases it with the others. (Before: the attempt waited
// for every member up to member_timeout; it returned only once the watchdog had
// resumed mariadb and mariadb had answered.)
TEST_F(Majority, SettlesOnAMajorityWhileAMemberIsStalled) {
    locker M = majority(60s, {.member_timeout = 50s, .auto_renew = false});
    {
        auto warm = M.try_acquire(n("warm-up"));  // every member has an open pooled connection
        ASSERT_TRUE(warm.has_value());
        warm->release();
    }
    std::string const name = n("settle-early");
    at(2).proxy->stall();
    std::mutex m;
    std::condition_variable cv;
    bool returned = false, resumed = false;
    std::thread watchdog([&] {
        std::unique_lock lock(m);
        if (cv.wait_for(lock, 10s, [&] { return returned; })) return;
        resumed = true;
        at(2).proxy->resume();
    });
    std::optional<lease> l;
    std::string const what = outcome_of([&] { l = M.try_acquire(name); });
    bool resumed_first = false;
    {
        std::lock_guard lock(m);
        returned = true;
        resumed_first = resumed;
    }
    cv.notify_all();
    watchdog.join();
    ASSERT_EQ(what, "returned");
    ASSERT_TRUE(l.has_value()) << "not granted with one of three members stalled; rows on: " << holders_of(name);
    EXPECT_FALSE(resumed_first) << "try_acquire returned only after the stalled member was resumed: it waited for "
                                   "that member instead of settling on the majority that had granted";
    EXPECT_TRUE(row_on(0, name).has_value());
    EXPECT_TRUE(row_on(1, name).has_value());
    if (resumed_first) return;
    EXPECT_FALSE(row_on(2, name).has_value()) << "the stalled member holds a row: the stall relayed the insert";

    at(2).proxy->resume();
    EXPECT_TRUE(eventually([&] { return row_on(2, name).has_value(); }, 15s))
        << "the stalled member's insert never landed";
    EXPECT_TRUE(l->held()) << to_string(l->state());
    EXPECT_EQ(outcome_of([&] { l->release(); }), "returned");
    EXPECT_TRUE(eventually([&] { return at(2).events.count(event_kind::released, name) == 1; }, 10s))
        << "mariadb's late grant was not released once; its events:\n"
        << at(2).events.all();
    EXPECT_TRUE(eventually([&] { return holders_of(name) == "none"; }, 10s))
        << "rows left after the release on: " << holders_of(name);
}

/// How many threads this process has now (/proc/self/task), but the fault
/// proxies' (one per connection, which the members' stores may open meanwhile).
std::size_t thread_count() {
    std::size_t n = 0;
    for (auto const& e : std::filesystem::directory_iterator("/proc/self/task")) {
        std::ifstream comm(e.path() / "comm");
        std::string name;
        std::getline(comm, name);
        if (name != fault_proxy::thread_name) ++n;
    }
    return n;
}

// Issue 19: the members are asked on a pool of workers that the majority locker
// owns and joins, so once the locker is destroyed no thread it started runs on,
// even when a member's call was still hanging: the destructor waits for that
// call (bounded by the member's connect_timeout/io_timeout; here the member is
// resumed 3 s after the destruction began). mariadb is stalled through an
// acquire and a release, so its insert hangs in a worker. (Before: each call
// ran on a detached thread; the destructor returned at once and the stalled
// call's thread ran on until the resume, one thread more than allowed here.)
TEST_F(Majority, DestroyedLockerLeavesNoThreadRunning) {
    std::string const name = n("threads");
    auto const before = thread_count();
    std::optional<locker> M = majority(10s, {.member_timeout = 200ms, .auto_renew = false});
    at(2).proxy->stall();
    {
        auto l = M->try_acquire(name);
        ASSERT_TRUE(l.has_value()) << "not granted with one of three members stalled";
        EXPECT_EQ(outcome_of([&] { l->release(); }), "returned");
    }
    std::jthread resumer([this] {
        std::this_thread::sleep_for(3s);
        at(2).proxy->resume();
    });
    auto const start = steady_clock::now();
    M.reset();
    auto const took = steady_clock::now() - start;
    // The resumer may still be running: one thread more at most. A second more
    // for anything else of the locker's to finish (the stalled call, if it were
    // still running, would run until the resume, later than that).
    auto now = thread_count();
    bool const gone = eventually([&] { return (now = thread_count()) <= before + 1; }, 1s);
    EXPECT_TRUE(gone) << now << " threads after the majority locker was destroyed (" << ms_of(took) << " ms), "
                      << before << " before it was made, plus the resumer";
    resumer.join();
    RecordProperty("destroy_ms", static_cast<int>(ms_of(took)));
    // Coarse: the wait is for the stalled call, which answers once resumed, never the io_timeout (20 s).
    EXPECT_LT(took, 15s) << "the destructor waited for more than the stalled member's call";
    // mariadb's late grant (its insert landed at the resume) was given back.
    EXPECT_TRUE(eventually([&] { return !row_on(2, name).has_value(); }, 10s)) << "a row is left on mariadb";
}

// The last reference to a majority locker can be dropped on one of its own
// workers (a late answer's handler briefly holds the lease, which holds the
// locker): that worker cannot join itself. mariadb is stalled through an
// acquire and a release; resumed, its late grant finds the released lease and
// is given back, and mariadb's member locker reports that release from inside
// the handler: its hook holds the worker there while the test drops the lease
// and the locker, so the worker's reference is the last. The locker and its
// pool are then destroyed on that worker, which must not join itself (that
// throws, and std::terminate ends the process) and must end, like every other
// thread of the locker.
TEST_F(Majority, LockerDestroyedOnItsOwnWorker) {
    std::string const name = n("own-worker");
    struct gate {
        std::mutex mutex;
        std::condition_variable cv;
        bool entered = false;
        bool go = false;
        std::thread::id where;
    };
    auto g = std::make_shared<gate>();
    std::vector<locker> ms;
    for (std::size_t i = 0; i < 2; ++i) ms.push_back(member_locker(i, 10s));
    ms.push_back(
        sqlock::table_locker(*at(2).store,
                             {.ttl = 10s, .auto_renew = false, .on_event = [g, name](sqlock::lease_event const& e) {
                                  if (e.what != event_kind::released || e.name != name) return;
                                  std::unique_lock lock(g->mutex);
                                  if (g->entered) return;
                                  g->entered = true;
                                  g->where = std::this_thread::get_id();
                                  g->cv.notify_all();
                                  g->cv.wait_for(lock, 20s, [&] { return g->go; });
                              }}));
    auto const before = thread_count();
    std::optional<locker> M = sqlock::majority_locker(std::move(ms), {.member_timeout = 200ms, .auto_renew = false});
    at(2).proxy->stall();
    std::optional<lease> l = M->try_acquire(name);
    ASSERT_TRUE(l.has_value()) << "not granted with one of three members stalled";
    EXPECT_EQ(outcome_of([&] { l->release(); }), "returned");
    at(2).proxy->resume();
    {
        std::unique_lock lock(g->mutex);
        ASSERT_TRUE(g->cv.wait_for(lock, 15s, [&] { return g->entered; }))
            << "mariadb's late grant was not given back (its member locker reported no release)";
        EXPECT_NE(g->where, std::this_thread::get_id());
    }
    l.reset();  // neither is the last reference: the held worker's is
    M.reset();
    {
        std::lock_guard lock(g->mutex);
        g->go = true;
    }
    g->cv.notify_all();
    auto now = thread_count();
    EXPECT_TRUE(eventually([&] { return (now = thread_count()) <= before; }, 10s))
        << now << " threads after the majority locker was destroyed on its worker, " << before << " before it was made";
    EXPECT_FALSE(row_on(2, name).has_value()) << "mariadb's late grant was left";
}

// ============================================================ 3. partial grants are cleaned up

// Member pg is held from outside (a plain table lock on that database), member
// pg2 refuses connections: the majority gets one grant of three (mariadb's),
// so the attempt is busy and mariadb's row must be given back. The outside
// holder is untouched.
TEST_F(Majority, PartialGrantIsReleasedWhenNoMajority) {
    std::string const name = n("partial");
    sqlock::store outside_db = direct_store(0);
    locker outside = sqlock::table_locker(outside_db, {.ttl = 60s, .auto_renew = false});
    auto held = outside.try_acquire(name);
    ASSERT_TRUE(held.has_value());

    locker M = majority(10s, {.member_timeout = 1s, .auto_renew = false});
    at(1).proxy->block();
    std::optional<lease> l;
    std::string const what = outcome_of([&] { l = M.try_acquire(name); });
    EXPECT_EQ(what, "returned") << "one member said the lock is held: the attempt is busy, not an error";
    EXPECT_FALSE(l.has_value()) << "granted with one member of three (token " << (l ? l->token() : 0) << ")";

    EXPECT_TRUE(eventually([&] { return at(2).events.count(event_kind::released, name) == 1; }, 10s))
        << "mariadb's grant (one of three) was never released; mariadb's events:\n"
        << at(2).events.all();
    EXPECT_FALSE(row_on(2, name).has_value()) << "the partial grant's row is left on mariadb";
    EXPECT_FALSE(row_on(1, name).has_value()) << "a row on the blocked member";
    auto r = row_on(0, name);
    ASSERT_TRUE(r.has_value()) << "the outside holder's row on pg is gone";
    EXPECT_EQ(r->token, held->token()) << "the outside holder's row on pg changed";
    EXPECT_EQ(r->owner, held->owner());
    EXPECT_TRUE(held->held());
}

// As above, with the third member silent instead of refusing: pg is held from
// outside, mariadb is stalled, pg2 grants. Not granted; pg2's row is given
// back. Resumed after the attempt settled, mariadb's insert lands and answers
// late: that late grant belongs to no lease and must be released too.
TEST_F(Majority, LateGrantOfAStalledMemberIsReleased) {
    std::string const name = n("late");
    locker M = majority(10s, {.member_timeout = 300ms, .auto_renew = false});
    {
        auto warm = M.try_acquire(n("warm-up"));  // every member has an open pooled connection
        ASSERT_TRUE(warm.has_value());
        warm->release();
    }
    sqlock::store outside_db = direct_store(0);
    locker outside = sqlock::table_locker(outside_db, {.ttl = 60s, .auto_renew = false});
    auto held = outside.try_acquire(name);
    ASSERT_TRUE(held.has_value());

    at(2).proxy->stall();
    std::optional<lease> l;
    std::string const what = outcome_of([&] { l = M.try_acquire(name); });
    EXPECT_EQ(what, "returned");
    EXPECT_FALSE(l.has_value()) << "granted with one member of three (token " << (l ? l->token() : 0) << ")";
    EXPECT_TRUE(eventually([&] { return at(1).events.count(event_kind::released, name) == 1; }, 10s))
        << "pg2's grant was never released; pg2's events:\n"
        << at(1).events.all();
    EXPECT_FALSE(row_on(1, name).has_value()) << "the partial grant's row is left on pg2";
    EXPECT_FALSE(row_on(2, name).has_value()) << "the stalled member holds a row: the stall relayed the insert";
    EXPECT_EQ(at(2).events.count(event_kind::released, name), 0u) << "mariadb answered while stalled";

    at(2).proxy->resume();
    EXPECT_TRUE(eventually([&] { return at(2).events.count(event_kind::released, name) == 1; }, 15s))
        << "the late grant of the resumed member was not released; mariadb's events:\n"
        << at(2).events.all() << "row on mariadb: " << (row_on(2, name) ? "yes" : "no");
    EXPECT_FALSE(row_on(2, name).has_value()) << "the late grant's row is left on mariadb";
    // Evidence that the late insert really ran on mariadb (its token counter).
    EXPECT_TRUE(read_counter(*at(2).raw, name, tables_).has_value())
        << "mariadb never ran the stalled insert: the late path was not exercised";
    auto r = row_on(0, name);
    ASSERT_TRUE(r.has_value()) << "the outside holder's row on pg is gone";
    EXPECT_EQ(r->token, held->token());
}

// A member that answers late while the lease is being released: its grant
// must be released too, never kept by the released lease nor dropped (which
// leaves its row until the TTL). mariadb is stalled at the grant; before the
// release pg2 is stalled too, so the release waits member_timeout (300 ms) for
// pg2, and mariadb is resumed: its late grant answers within that window (the
// proxy relays again within ~20 ms), while the release is in progress. Each
// round must end with every member's grant released once. (Before the fix, the
// late grant was adopted into the rows the release had already taken, then
// dropped unreleased.)
TEST_F(Majority, LateGrantDuringReleaseIsReleased) {
    locker M = majority(10s, {.member_timeout = 300ms, .auto_renew = false});
    {
        auto warm = M.try_acquire(n("warm-up"));
        ASSERT_TRUE(warm.has_value());
        warm->release();
    }
    std::string failures;
    for (int k = 0; k < 3; ++k) {
        std::string const name = n("race-" + std::to_string(k));
        at(2).proxy->stall();
        std::optional<lease> l;
        std::string const what = outcome_of([&] { l = M.try_acquire(name); });
        ASSERT_EQ(what, "returned") << "round " << k;
        ASSERT_TRUE(l.has_value()) << "round " << k << ": not granted with one member stalled";
        at(1).proxy->stall();
        at(2).proxy->resume();
        // Released when mariadb's late grant was adopted before the release began (pg and mariadb
        // confirm); in doubt when it landed during the release (only pg confirmed in time).
        std::string const outcome = outcome_of([&] { l->release(); });
        EXPECT_TRUE(outcome == "returned" || outcome.find("in_doubt") != std::string::npos)
            << "round " << k << ": " << outcome;
        at(1).proxy->resume();
        for (std::size_t i : {std::size_t{1}, std::size_t{2}}) {
            bool const released = eventually([&] { return at(i).events.count(event_kind::released, name) == 1; }, 10s);
            if (!released || row_on(i, name))
                failures += "  round " + std::to_string(k) + ", " + at(i).label + ": released " +
                            std::to_string(at(i).events.count(event_kind::released, name)) + " times, row " +
                            (row_on(i, name) ? "left" : "gone") + "\n";
        }
    }
    EXPECT_EQ(failures, "") << "grants not released after the lease was:\n" << failures;
}

// Issue 18 item 5 (P7): a release is reported only when a majority confirmed
// its delete. Every member stalled (the proxies hold every byte, nothing is
// answered): release() must throw (in_doubt: the deletes may land) and the
// lease must not read released; once the members answer, a second release()
// completes it and no row is left. With one member stalled, the other two
// confirm: released. (Before the fix the first release returned after the
// member timeout and the lease read released.)
TEST_F(Majority, ReleaseNeedsAMajorityToConfirm) {
    locker M = majority(10s, {.member_timeout = 300ms, .auto_renew = false});
    std::string const name = n("release-unanswered");
    auto l = M.try_acquire(name);
    ASSERT_TRUE(l.has_value());
    for (auto& m : members_) m.proxy->stall();
    std::string const what = outcome_of([&] { l->release(); });
    EXPECT_NE(what.find("in_doubt"), std::string::npos)
        << "release() with every member silent must throw sqlock::in_doubt; it: " << what;
    EXPECT_NE(l->state(), sqlock::lease_state::released) << "reported released with no member answering";
    EXPECT_EQ(M.stats().released, 0u) << "counted as released";
    for (auto& m : members_) m.proxy->resume();
    EXPECT_EQ(outcome_of([&] { l->release(); }), "returned") << "the second release, with every member back";
    EXPECT_EQ(l->state(), sqlock::lease_state::released);
    EXPECT_EQ(holders_of(name), "none") << "rows left after the release";

    std::string const one_silent = n("release-majority");
    auto k = M.try_acquire(one_silent);
    ASSERT_TRUE(k.has_value());
    at(2).proxy->stall();
    EXPECT_EQ(outcome_of([&] { k->release(); }), "returned") << "release() with two of three members answering";
    EXPECT_EQ(k->state(), sqlock::lease_state::released);
    at(2).proxy->resume();
    EXPECT_TRUE(eventually([&] { return holders_of(one_silent) == "none"; }, 10s))
        << "rows left after the release: " << holders_of(one_silent);
}

// ============================================================ 4. mutual exclusion between processes

// Four processes loop majority try_acquire/release on one name over the three
// members (through the proxies), each until granted 10 times, behind a start
// barrier. Every critical section bumps a shared file counter and records
// "token enter exit pid" on the monotonic clock: no two overlap, tokens
// strictly increase in grant order, no update is lost, and the processes did
// contend (busy attempts, hand-offs between processes).
TEST_F(Majority, ProcessContentionIsExclusive) {
    constexpr int procs = 4;
    constexpr int grants = 10;
    std::string const name = n("contention");
    temp_dir files;
    fs::path const counter_file = files.path() / "counter";
    std::ofstream(counter_file) << 0 << "\n";
    fs::path const go_file = files.path() / "go";

    std::vector<pid_t> pids;
    std::vector<fs::path> record_files, ready_files, out_files;
    for (int p = 0; p < procs; ++p) {
        auto const tag = std::to_string(p);
        record_files.push_back(files.path() / ("records." + tag));
        ready_files.push_back(files.path() / ("ready." + tag));
        out_files.push_back(files.path() / ("out." + tag));
        std::vector<std::string> args{SQLOCK_MAJORITY_WORKER,
                                      tables_,
                                      name,
                                      counter_file.string(),
                                      record_files.back().string(),
                                      std::to_string(grants),
                                      ready_files.back().string(),
                                      go_file.string()};
        for (auto& m : members_) args.push_back(m.proxy->proxied_url(m.url));
        spawn_file_actions actions;
        actions.capture_to_files(out_files.back(), files.path() / ("err." + tag));
        pids.push_back(spawn_process(args, std::nullopt, actions.get()));
    }
    EXPECT_TRUE(release_start_barrier(ready_files, go_file, 60s)) << "not every worker connected within 60 s";

    // A generous bound, so a hung worker fails the test instead of hanging it.
    std::vector<int> status(procs, -1);
    std::vector<bool> done(procs, false);
    int remaining = procs;
    auto const deadline = steady_clock::now() + 150s;
    while (remaining > 0 && steady_clock::now() < deadline) {
        for (int p = 0; p < procs; ++p) {
            int st = 0;
            if (!done[p] && ::waitpid(pids[p], &st, WNOHANG) == pids[p]) {
                status[p] = st;
                done[p] = true;
                --remaining;
            }
        }
        if (remaining > 0) std::this_thread::sleep_for(20ms);
    }
    long busy = 0;
    for (int p = 0; p < procs; ++p) {
        if (!done[p]) {
            ::kill(pids[p], SIGKILL);
            ::waitpid(pids[p], &status[p], 0);
            ADD_FAILURE() << "worker " << p << " still running after 150 s: killed";
            continue;
        }
        EXPECT_TRUE(WIFEXITED(status[p]) && WEXITSTATUS(status[p]) == 0)
            << "worker " << p << " failed: " << exit_text(status[p])
            << "; stderr: " << slurp(files.path() / ("err." + std::to_string(p)));
        std::ifstream out(out_files[p]);
        std::string w1, w2;
        long g = 0, b = 0;
        if (out >> w1 >> g >> w2 >> b) busy += b;
    }

    long long counter = -1;
    std::ifstream(counter_file) >> counter;
    EXPECT_EQ(counter, procs * grants) << "lost updates: the majority lock let two processes in";
    std::vector<cs_record> all = read_records(record_files);
    EXPECT_EQ(all.size(), std::size_t{procs} * grants);
    EXPECT_EQ(check_history(all), "");
    auto const handoffs = count_handoffs(all);
    auto const contended = count_contended(all);
    EXPECT_GT(busy, 0) << "no attempt was ever busy: the processes did not contend";
    EXPECT_GT(contended, 0u) << "no grant was tried for while another process held the lock: "
                                "the processes did not contend";
    EXPECT_GT(handoffs, 0u) << "the lock never passed from one process to another";
    RecordProperty("busy_attempts", static_cast<int>(busy));
    RecordProperty("contended", static_cast<int>(contended));
    RecordProperty("handoffs", static_cast<int>(handoffs));
    EXPECT_EQ(holders_of(name), "none") << "rows left after every worker released";
}

// ============================================================ 5. tokens across member failures

// Twelve successive grants of one name, each with a different member (or
// none) refusing connections, so consecutive majorities differ: the token must
// still strictly increase. Member pg's majority counter starts ahead (50, as
// after a token write that reached only that member): a grant that counts it
// jumps, and the grants after it, without pg, must not fall back.
// member_timeout 3 s (of a 10 s TTL): a blocked member refuses at once, so the
// bound only decides how long a loaded machine may keep a live member's answer
// (at 1 s, under two CPU hogs, pg2 missed it once and the grant was refused).
TEST_F(Majority, TokensIncreaseWhileMembersFail) {
    std::string const name = n("tokens");
    *at(0).raw << "INSERT INTO " + tables_ + "_majority_tokens (name, token) VALUES (:n, 50)", soci::use(name);
    locker M = majority(10s, {.member_timeout = 3s, .auto_renew = false});

    int const down_in_turn[] = {-1, 0, 1, 2, 0, 2, 1, -1, 1, 0, 2, 0};
    std::vector<std::pair<std::string, std::int64_t>> seen;  // (which member was down, token), in grant order
    for (int down : down_in_turn) {
        std::string const label = down < 0 ? "none down" : at(down).label + " down";
        SCOPED_TRACE(label + ", grant " + std::to_string(seen.size()));
        if (down >= 0) at(down).proxy->block();
        std::optional<lease> l;
        std::string const what = outcome_of([&] { l = M.try_acquire(name); });
        ASSERT_EQ(what, "returned");
        ASSERT_TRUE(l.has_value()) << "not granted with a majority up; rows on: " << holders_of(name);
        seen.emplace_back(label, l->token());
        EXPECT_EQ(outcome_of([&] { l->release(); }), "returned");
        if (down >= 0) at(down).proxy->unblock();
    }

    std::string record, violations;
    for (std::size_t i = 0; i < seen.size(); ++i) {
        record += "  " + std::to_string(seen[i].second) + "  " + seen[i].first + "\n";
        if (i > 0 && seen[i].second <= seen[i - 1].second)
            violations += "  token " + std::to_string(seen[i].second) + " (" + seen[i].first + ") after " +
                          std::to_string(seen[i - 1].second) + "\n";
    }
    EXPECT_EQ(violations, "") << "tokens in grant order:\n" << record;
    EXPECT_GT(seen.back().second, 50) << "member pg's counter (50) never counted:\n" << record;
}

// ============================================================ 6. loss when a majority stops renewing

// A renewed lease (ttl 2 s) whose members pg and pg2 start refusing after the
// grant: renewals reach one member of three, so the lease must be reported
// lost (stop_token fired, state lost, on_lost once) by its safe deadline.
TEST_F(Majority, LostWhenAMajorityStopsRenewing) {
    auto lost_calls = std::make_shared<std::atomic<int>>(0);
    locker M = majority(2s, {.member_timeout = 200ms,
                             .auto_renew = true,
                             .on_lost = [lost_calls](std::string_view, std::int64_t) { ++*lost_calls; }});
    std::string const name = n("loses-majority");
    auto l = M.try_acquire(name);
    ASSERT_TRUE(l.has_value());
    auto const stop = l->stop_token();
    EXPECT_FALSE(stop.stop_requested());

    at(0).proxy->block();
    at(1).proxy->block();
    // Coarse: the validity is below the ttl (2 s) from the grant; 10 s means never.
    EXPECT_TRUE(eventually([&] { return stop.stop_requested(); }, 10s))
        << "the stop_token did not fire after two of three members stopped renewing; state " << to_string(l->state());
    EXPECT_EQ(l->state(), sqlock::lease_state::lost);
    EXPECT_TRUE(eventually([&] { return lost_calls->load() >= 1; }, 5s)) << "on_lost was not called";

    std::string const what = outcome_of([&] { l->release(); });
    EXPECT_NE(what.find("lease_lost"), std::string::npos) << "release of a lost lease: " << what;
    EXPECT_EQ(lost_calls->load(), 1) << "on_lost must be called once";
    EXPECT_EQ(M.stats().lost, 1u);
}

// ============================================================ 7. renewal with a member down

// Granted while mariadb refused connections; once it is back, the lease's
// renewals take the lock there too (a member that missed the grant rejoins
// while the lease lives). Then pg refuses: renewals on two of three keep the
// lease held.
TEST_F(Majority, RenewalAddsAMissingMemberAndKeepsTheLeaseWithOneDown) {
    locker M = majority(2s, {.member_timeout = 200ms, .auto_renew = true});
    std::string const name = n("renewed");
    at(2).proxy->block();
    auto l = M.try_acquire(name);
    ASSERT_TRUE(l.has_value());
    EXPECT_FALSE(row_on(2, name).has_value()) << "a row on the blocked member";

    at(2).proxy->unblock();
    // Renewals run every ttl/3; the lease must stay held meanwhile.
    EXPECT_TRUE(eventually([&] { return row_on(2, name).has_value() || !l->held(); }, 10s) && l->held())
        << "the renewals did not take the lock on the member that was down at the grant; lease "
        << to_string(l->state()) << ", rows on: " << holders_of(name);

    at(0).proxy->block();
    auto const base = M.stats().renewed;
    // Three renewals at ttl/3 span more than a ttl: the lease lived on two members.
    EXPECT_TRUE(eventually([&] { return M.stats().renewed >= base + 3 || l->lost(); }, 20s))
        << "renewals with pg down: " << M.stats().renewed - base;
    EXPECT_TRUE(l->held()) << "lost with two of three members renewing: " << to_string(l->state());
    EXPECT_EQ(M.stats().lost, 0u);

    EXPECT_EQ(outcome_of([&] { l->release(); }), "returned");
    EXPECT_FALSE(row_on(1, name).has_value()) << "pg2's row is left after the release";
    EXPECT_FALSE(row_on(2, name).has_value()) << "mariadb's row is left after the release";
}

// ============================================================ 7a. the lease's database times

// lease::expires_at() is a database time (include/sqlock/lease.hpp): for a
// majority lease, the earliest expiry its members' databases hold, at the grant
// and after each renewal, never the client's clock plus the ttl. Each member's
// expiry is read from its lock table (raw SQL), so a client-clock value differs
// from it (at microsecond resolution) and fails the equality. A member whose
// grant is adopted after the lease was handed out counts once adopted.
// A renewal settles once a majority renewed (issue 40): with one member stalled and a member timeout
// as long as the TTL allows (2999 ms of 3 s: the round's deadline is then the lease's validity),
// waiting for every member ran the renewal to the validity's end and lost a lease a majority held
// (found by BatteryMajorityF.F09; seen failing with the settle on a majority removed).
TEST_F(Majority, ARenewalSettlesOnAMajorityWhileAMemberStalls) {
    locker M = majority(3s, {.member_timeout = 2999ms, .auto_renew = false});
    std::string const name = n("renew-stalled");
    auto l = M.try_acquire(name);
    ASSERT_TRUE(l.has_value());
    ASSERT_TRUE(eventually(
        [&] {
            for (std::size_t i = 0; i < members_.size(); ++i)
                if (!row_on(i, name)) return false;
            return true;
        },
        10s))
        << "rows on " << holders_of(name);
    // A first renewal waits for the grant's calls still running (a member's token write after its
    // grant): stalled in one of them, the member would hold the renewal back before it starts.
    ASSERT_NO_THROW(l->renew());
    at(2).proxy->stall();
    std::string const what = outcome_of([&] { l->renew(); });
    at(2).proxy->resume();
    EXPECT_EQ(what, "returned") << "a renewal that two of three members confirmed";
    EXPECT_EQ(l->state(), sqlock::lease_state::held);
    EXPECT_NO_THROW(l->release());
}

TEST_F(Majority, ExpiryIsTheEarliestOfTheMembersDatabases) {
    locker M = majority(10s, {.auto_renew = false});
    std::string const name = n("db-expiry");
    auto l = M.try_acquire(name);
    ASSERT_TRUE(l.has_value());
    auto earliest_on_members = [&] {
        std::optional<long long> earliest;
        for (std::size_t i = 0; i < members_.size(); ++i)
            if (auto r = row_on(i, name)) earliest = std::min(earliest.value_or(r->expires_us), r->expires_us);
        return earliest;
    };
    auto us = [](sqlock::db_time t) { return static_cast<long long>(t.time_since_epoch().count()); };
    // The grant settles on the first majority; a member that grants after it is adopted, and
    // its expiry counts from then on (its row lands just before its answer is adopted).
    auto const all_granted = eventually(
        [&] {
            for (std::size_t i = 0; i < members_.size(); ++i)
                if (!row_on(i, name)) return false;
            return true;
        },
        10s);
    EXPECT_TRUE(all_granted) << "a healthy member did not grant; rows on " << holders_of(name);
    auto const at_grant = earliest_on_members();
    ASSERT_TRUE(at_grant.has_value()) << "no member has a row of " << name;
    ASSERT_TRUE(eventually([&] { return us(l->expires_at()) == *at_grant; }, 5s))
        << "at the grant: " << us(l->expires_at()) << ", the members' earliest " << *at_grant << "; rows on "
        << holders_of(name);

    l->renew();
    // The renewal settles on the first majority renewed (issue 40): the lease's expiry is the
    // earliest of the members that answered by then. The third member's renewal may have run
    // first and answered last, so the lease's expiry is one member's, and no later than the
    // moment a majority stops holding (the second earliest of three), never the client's clock.
    std::string seen;
    EXPECT_TRUE(eventually(
        [&] {
            std::vector<long long> at;
            for (std::size_t i = 0; i < members_.size(); ++i)
                if (auto r = row_on(i, name)) at.push_back(r->expires_us);
            std::sort(at.begin(), at.end());
            auto const lease = us(l->expires_at());
            seen = "the lease says " + std::to_string(lease) + ", the members' (sorted)";
            for (auto t : at) seen += " " + std::to_string(t);
            return at.size() == members_.size() && at.front() > *at_grant &&
                   std::find(at.begin(), at.end(), lease) != at.end() && lease <= at[(members_.size() - 1) / 2];
        },
        5s))
        << "after a renewal: " << seen << " (at the grant " << *at_grant << "); rows on " << holders_of(name);
    l->release();
}

// ============================================================ 7b. a member that lost its data

/// "N" (the token of a grant, released at once), "busy", or the error.
std::string token_of(locker& M, std::string const& name) {
    try {
        auto l = M.try_acquire(name);
        if (!l) return "busy";
        auto const t = l->token();
        l->release();
        return std::to_string(t);
    } catch (std::exception const& e) {
        return describe(e);
    }
}

/// Whether the member's counters were seeded under its present identity (raw SQL on its own tables).
bool member_joined(soci::session& s, std::string const& tables) {
    long long joined = 0;
    s << "SELECT COUNT(*) FROM " + tables + "_majority_members g JOIN " + tables + "_identity i ON g.id = i.id",
        soci::into(joined);
    return joined > 0;
}

// Issue 18 item 9, through the library: three SQLite members hand out 1, 2, 3;
// with c unusable (the majority built from the two that open) a and b hand out
// 4; a is lost (its files deleted, created again: a new identity); with b
// unusable, a and c must not hand out 4 again: a has not joined, so it does
// not count, and the attempt fails saying so. Once all three answer and a's
// identity is older than the ttl, a is seeded from the others and counts
// again: with b unusable, a and c hand out a token above every earlier one.
// (Before the fix: the fourth grant was 4 again, from a's empty counter and c's 3.)
TEST(MajorityMemberLoss, RecreatedSqliteMemberNeverRepeatsAToken) {
    temp_dir dir;
    auto open = [&](char const* file) {
        return std::make_unique<sqlock::store>(sqlite_url(dir.path() / file),
                                               sqlock::store_options{.create_schema = true});
    };
    auto majority_of = [](std::vector<sqlock::store*> const& stores) {
        std::vector<locker> lockers;
        for (auto* st : stores) lockers.push_back(sqlock::table_locker(*st, {.ttl = 1s, .auto_renew = false}));
        return sqlock::majority_locker(std::move(lockers), {.auto_renew = false});
    };
    auto a = open("a.db"), b = open("b.db"), c = open("c.db");
    {
        auto all = majority_of({a.get(), b.get(), c.get()});
        for (int k = 1; k <= 3; ++k) ASSERT_EQ(token_of(all, "x"), std::to_string(k));
    }
    {
        auto without_c = majority_of({a.get(), b.get()});
        ASSERT_EQ(token_of(without_c, "x"), "4");
    }
    a.reset();
    for (auto const* f : {"a.db", "a.db-wal", "a.db-shm"}) fs::remove(dir.path() / f);
    a = open("a.db");
    {
        auto without_b = majority_of({a.get(), c.get()});
        std::string const what = token_of(without_b, "x");
        EXPECT_NE(what, "4") << "token 4 handed out a second time, through the recreated member";
        EXPECT_NE(what.find("backend_unavailable"), std::string::npos) << what;
        EXPECT_NE(what.find("a.db has not joined"), std::string::npos) << "the member is not named: " << what;
    }
    std::int64_t last = 4;
    auto all = majority_of({a.get(), b.get(), c.get()});
    auto raw_a = raw_session(engine::sqlite, sqlite_url(dir.path() / "a.db"));
    // Grants go on over b and c meanwhile; a joins once its identity is older than the ttl (1 s) and drift.
    bool const joined = eventually(
        [&] {
            auto const t = token_of(all, "x");
            EXPECT_EQ(t, std::to_string(last + 1)) << "a grant of all three members";
            last = std::atoll(t.c_str());
            return member_joined(*raw_a, "sqlock");
        },
        20s);
    ASSERT_TRUE(joined) << "the recreated member was never seeded";
    auto without_b = majority_of({a.get(), c.get()});
    EXPECT_EQ(token_of(without_b, "x"), std::to_string(last + 1)) << "a and c, a seeded";
}

// The same on server members: pg2's tables are dropped and created again (a
// new identity) after a grant on pg and pg2 while mariadb was down; with pg
// down, pg2 and mariadb must not hand out that token again. (Before the fix
// they did: pg2's counter was empty, mariadb's one behind.)
TEST_F(Majority, RecreatedMemberNeverRepeatsAToken) {
    locker M = majority(1s, {.auto_renew = false});
    std::string const name = n("recreated");
    std::string t;
    for (int k = 0; k < 3; ++k) t = token_of(M, name);
    at(2).proxy->block();
    std::string const last_before = token_of(M, name);
    ASSERT_EQ(last_before, std::to_string(std::atoll(t.c_str()) + 1)) << "granted on pg and pg2";
    at(2).proxy->unblock();
    drop_member_tables(at(1), tables_);
    sqlock::store recreated(at(1).url, {.pool_size = 1, .create_schema = true, .table_prefix = tables_});
    at(0).proxy->block();
    std::string const what = token_of(M, name);
    EXPECT_NE(what, last_before) << "token " << last_before << " handed out a second time through the recreated member";
    EXPECT_NE(what.find("backend_unavailable"), std::string::npos) << what;
    EXPECT_NE(what.find("has not joined"), std::string::npos) << what;
    at(0).proxy->unblock();
    std::int64_t last = std::atoll(last_before.c_str());
    // The refused attempt may have moved some counters on (the token written with the grants,
    // issue 40): the next token is only greater.
    bool after_a_miss = true;
    bool const joined = eventually(
        [&] {
            auto const got = token_of(M, name);
            // A member that misses member_timeout (100 ms here) on a loaded machine fails the attempt, typed;
            // the attempt may have moved some counters on, so the next token is then only greater. A release in
            // doubt leaves the lock held until its 1 s TTL: busy meanwhile. The recreated member is refused until
            // its identity is older than the ttl plus drift (typed, nothing held).
            if (got.find("no answer in time") != std::string::npos || got.find("has not joined") != std::string::npos ||
                got == "busy") {
                after_a_miss = true;
                return false;
            }
            if (after_a_miss) EXPECT_GT(std::atoll(got.c_str()), last) << got;
            else EXPECT_EQ(got, std::to_string(last + 1));
            after_a_miss = false;
            last = std::atoll(got.c_str());
            return member_joined(*at(1).raw, tables_);
        },
        20s);
    ASSERT_TRUE(joined) << "the recreated member was never seeded";
    at(0).proxy->block();
    EXPECT_EQ(token_of(M, name), std::to_string(last + 1)) << "pg2 and mariadb, pg2 seeded";
}

// ============================================================ 7b. two rounds per cycle (issue 40)

// Design 3 (tests/spin/majority_token.pml -DTWOROUNDS): a locker writes the token it expects (one more
// than the last it handed out for the name) with its grants, and hands it out when that write won on a
// majority: no read round and no write round. When the hint is stale (another locker took a token on
// the name meanwhile) the write misses, and the cycle reads and writes as before: a greater token, more
// round trips. Counted on three MariaDB members (three table prefixes on one server), each behind a
// proxy that counts the commands sent to it.
TEST(MajorityRounds, AHintedCycleWritesItsTokenWithTheGrantsAndAStaleHintFallsBackToTheRounds) {
    std::string url;
    require_env("SQLOCK_TEST_MYSQL_URL", url);
    if (::testing::Test::IsSkipped() || ::testing::Test::HasFatalFailure()) return;
    std::vector<std::unique_ptr<command_counter>> proxies;
    std::vector<std::unique_ptr<sqlock::store>> stores;
    std::vector<std::string> prefixes;
    for (int i = 0; i < 3; ++i) {
        prefixes.push_back("sqlmr" + std::to_string(i) + "_" + random_hex(8));
        proxies.push_back(std::make_unique<command_counter>(url));
        stores.push_back(std::make_unique<sqlock::store>(proxies.back()->proxied_url(),
                                                         sqlock::store_options{.create_schema = true,
                                                                               .table_prefix = prefixes.back()}));
    }
    auto majority_of_all = [&] {
        std::vector<locker> lockers;
        for (auto& st : stores) lockers.push_back(sqlock::table_locker(*st, {.ttl = 30s, .auto_renew = false}));
        return sqlock::majority_locker(std::move(lockers), {.auto_renew = false});
    };
    auto sent = [&] {
        std::size_t n = 0;
        for (auto& p : proxies) n += p->commands().size();
        return n;
    };
    // One cycle: its token and the commands it sent (the release waits for every member's calls).
    auto cycle = [&](locker& M) {
        auto const before = sent();
        auto const t = token_of(M, "x");
        return std::make_pair(t, sent() - before);
    };
    locker other = majority_of_all();
    locker mine = majority_of_all();
    ASSERT_EQ(token_of(other, "x"), "1") << "a new name: the token written with the grants";
    ASSERT_EQ(token_of(other, "x"), "2");

    auto const [t1, stale] = cycle(mine);  // mine has no hint: it writes 1, misses, reads, writes 3
    ASSERT_EQ(t1, "3");
    auto const [t2, hinted] = cycle(mine);  // mine wrote 3: it writes 4 with the grants and wins
    ASSERT_EQ(t2, "4");
    EXPECT_LT(hinted, stale) << "a cycle whose hint was current sent as many commands as one whose hint missed: "
                             << hinted << " vs " << stale;
    ASSERT_EQ(token_of(other, "x"), "5") << "other's hint (3) is stale: it reads and writes";
    auto const [t3, stale_again] = cycle(mine);  // mine's hint (5) is stale now
    ASSERT_EQ(t3, "6");
    EXPECT_GT(stale_again, hinted) << "a stale hint took the short path";
    auto const [t4, hinted_again] = cycle(mine);
    ASSERT_EQ(t4, "7");
    // (A member that grants after a majority won sends no write: a hinted cycle sends 10 to 12.)
    EXPECT_LT(hinted_again, stale_again) << "a hinted cycle sent as many commands as a stale one";
    stores.clear();
    member_db m;
    m.e = engine::mysql;
    m.url = url;
    for (auto const& p : prefixes) drop_member_tables(m, p);
}

// ============================================================ 8. construction

// Bad member lists and options are usage errors, found before any I/O; a
// majority of one member works like that member.
TEST_F(Majority, ConstructionIsChecked) {
    auto const usage = [](auto&& make) {
        try {
            (void)make();
            return std::string("constructed");
        } catch (sqlock::usage_error const&) {
            return std::string("usage_error");
        } catch (std::exception const& e) {
            return describe(e);
        }
    };
    EXPECT_EQ(usage([] { return sqlock::majority_locker({}); }), "usage_error") << "an empty member list";
    EXPECT_EQ(usage([&] {
                  return sqlock::majority_locker({member_locker(0, 10s), member_locker(0, 10s)});
              }),
              "usage_error")
        << "the same database (one store) twice";
    sqlock::store again(at(1).proxy->proxied_url(at(1).url), {.pool_size = 1, .table_prefix = tables_});
    EXPECT_EQ(usage([&] {
                  return sqlock::majority_locker(
                      {member_locker(0, 10s), member_locker(1, 10s), sqlock::table_locker(again, {.ttl = 10s})});
              }),
              "usage_error")
        << "the same database (same URL and table prefix, another store) twice";
    EXPECT_EQ(usage([&] {
                  return sqlock::majority_locker({member_locker(0, 2s), member_locker(1, 2s), member_locker(2, 2s)},
                                                 {.member_timeout = 2s});
              }),
              "usage_error")
        << "member_timeout equal to the ttl";
    EXPECT_EQ(usage([&] {
                  return sqlock::majority_locker({member_locker(0, 2s), member_locker(1, 2s), member_locker(2, 2s)},
                                                 {.member_timeout = 5s});
              }),
              "usage_error")
        << "member_timeout above the ttl";
    EXPECT_EQ(usage([&] {
                  return sqlock::majority_locker({member_locker(0, 2s), member_locker(1, 2s), member_locker(2, 2s)},
                                                 {.member_timeout = 0ms});
              }),
              "usage_error")
        << "member_timeout zero";
    EXPECT_EQ(usage([&] {
                  return sqlock::majority_locker({majority(10s), member_locker(0, 10s)});
              }),
              "usage_error")
        << "a majority locker as a member";
    EXPECT_EQ(
        usage([&] {
            return sqlock::majority_locker({member_locker(0, 2s), member_locker(1, 2s)}, {.configured_members = 5});
        }),
        "usage_error")
        << "two lockers given of five configured: not a majority";
    EXPECT_EQ(usage([&] {
                  return sqlock::majority_locker({member_locker(0, 2s), member_locker(1, 2s), member_locker(2, 2s)},
                                                 {.configured_members = 2});
              }),
              "usage_error")
        << "more lockers given than configured";

    // N = 1: granted while the member is up (a row there, tokens increasing),
    // backend_unavailable while it refuses.
    locker one = sqlock::majority_locker({member_locker(1, 10s)}, {.auto_renew = false});
    std::string const name = n("one-member");
    std::int64_t first = 0;
    {
        auto l = one.try_acquire(name);
        ASSERT_TRUE(l.has_value());
        first = l->token();
        EXPECT_TRUE(row_on(1, name).has_value());
        EXPECT_EQ(outcome_of([&] { l->release(); }), "returned");
        EXPECT_FALSE(row_on(1, name).has_value());
    }
    {
        auto l = one.try_acquire(name);
        ASSERT_TRUE(l.has_value());
        EXPECT_GT(l->token(), first);
        auto busy = one.try_acquire(name);
        EXPECT_FALSE(busy.has_value()) << "a held lock granted again";
        l->release();
    }
    at(1).proxy->block();
    std::string const what = outcome_of([&] { (void)one.try_acquire(name); });
    EXPECT_NE(what.find("backend_unavailable"), std::string::npos) << "N = 1 with its member down: " << what;
}

}  // namespace
