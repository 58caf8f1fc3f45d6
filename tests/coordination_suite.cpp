// sqlock tests — coordination beyond one lock (issue 22), on every engine:
// Engines/Coordination.<Test>/<engine> and Engines/CoordinationRowLock.<Test>/<engine>.
//
// Counting semaphores (sqlock::semaphore), read-write locks (sqlock::rw_locker)
// and leader election (sqlock::election): what each grants and refuses, what
// an abandoned holder leaves behind (its lease expires by the database's clock),
// who waits for whom, and what an observer is told. Concurrency is judged from
// records of what each thread held, never from timings; waits for an event are
// bounded polls with generous limits. The fault nemeses of these kinds are in
// tests/faults/ (the battery).
#include "test_env.hpp"

#include <soci/soci.h>
#include <sqlock/sqlock.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <future>
#include <mutex>
#include <optional>
#include <set>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

namespace {

using namespace std::chrono_literals;
using namespace sqlock_test;
using sqlock::engine;
using sqlock::lease;
using sqlock::locker_options;

/// Runs election::observe on `name` in a thread of its own and records every report; the thread stops
/// (and observe returns) when the recorder is destroyed, also when an ASSERT returns early.
class observe_record {
public:
    observe_record(sqlock::election& el, std::string const& name)
        : thread_([this, &el, name](std::stop_token stop) {
              el.observe(
                  name,
                  [this](std::optional<sqlock::leader_info> const& now) {
                      std::lock_guard lock(mutex_);
                      seen_.push_back(now);
                  },
                  stop);
          }) {}

    std::size_t count() {
        std::lock_guard lock(mutex_);
        return seen_.size();
    }

    /// Stops the observer and gives what it reported, in order.
    std::vector<std::optional<sqlock::leader_info>> stop() {
        thread_.request_stop();
        thread_.join();
        return seen_;
    }

private:
    std::mutex mutex_;
    std::vector<std::optional<sqlock::leader_info>> seen_;
    std::jthread thread_;  // last: started after, and stopped before, what it writes to
};

class Coordination : public engine_fixture {
protected:
    sqlock::locker table(locker_options o = {}) { return sqlock::table_locker(*db_, std::move(o)); }

    // A lease whose holder is gone without a word: no renewal, no release (as
    // after kill -9). Its row stays until it expires by the database's clock.
    // Kept until the process exits, never released nor destroyed; reachable from
    // a static, so LeakSanitizer does not report it as a leak.
    static void abandon(lease l) {
        static auto* const kept = new std::vector<lease>();  // NOLINT(cppcoreguidelines-owning-memory)
        kept->push_back(std::move(l));
    }

    // A waiter marked the name's row (its release will ring).
    bool marked(std::string const& name) {
        long long count = 0;
        *raw_ << std::string("SELECT COUNT(*) FROM sqlock_locks WHERE name = :name AND ") +
                     (e_ == engine::postgresql ? "waiters" : "waiters <> 0"),  // a boolean on PostgreSQL
            soci::use(name, "name"), soci::into(count);
        return count != 0;
    }

    static locker_options short_lived() { return {.ttl = 400ms, .auto_renew = false}; }

    std::optional<sqlock::lock_info> listed(std::string const& name) {
        for (auto& info : sqlock::list_locks(*db_))
            if (info.name == name) return info;
        return std::nullopt;
    }
};

// ---- semaphores ------------------------------------------------------------------

TEST_P(Coordination, SemaphoreGrantsExactlyItsPermits) {
    sqlock::semaphore sem(table(), 3);
    auto const name = n("sem");
    std::vector<lease> held;
    std::set<std::string> rows;
    for (int i = 0; i < 3; ++i) {
        auto got = sem.try_acquire(name);
        ASSERT_TRUE(got) << "permit " << i << " of 3 was refused";
        rows.insert(got->name());
        held.push_back(std::move(*got));
    }
    EXPECT_EQ(rows.size(), 3U) << "two permits share a slot row";
    EXPECT_FALSE(sem.try_acquire(name)) << "a fourth permit was granted by a semaphore of 3";
    auto const freed = held.front().token();
    auto const freed_row = held.front().name();
    held.front().release();
    auto again = sem.try_acquire(name);
    ASSERT_TRUE(again) << "a released permit was not granted again";
    // The slot freed is the only one free: the new permit is on it, with a greater token.
    EXPECT_EQ(again->name(), freed_row);
    EXPECT_GT(again->token(), freed);
}

TEST_P(Coordination, SemaphoreConcurrentHoldersNeverExceedPermits) {
    constexpr int permits = 2;
    constexpr int threads = 6;
    constexpr int rounds = 15;
    auto const name = n("sem-storm");
    auto locker = table();
    // Each holder records its permit while it holds it; the record is checked after.
    std::mutex m;
    std::set<std::string> holding;
    std::size_t most = 0;
    std::atomic<int> granted{0};
    std::vector<std::string> errors;
    std::vector<std::jthread> workers;
    for (int t = 0; t < threads; ++t)
        workers.emplace_back([&] {
            try {
                sqlock::semaphore sem(locker, permits);
                for (int r = 0; r < rounds; ++r) {
                    auto l = sem.acquire(name, 60s);
                    {
                        std::lock_guard lock(m);
                        if (!holding.insert(l.name()).second) errors.push_back("slot " + l.name() + " held twice");
                        most = std::max(most, holding.size());
                    }
                    granted.fetch_add(1);
                    std::this_thread::yield();
                    {
                        std::lock_guard lock(m);
                        holding.erase(l.name());
                    }
                    l.release();
                }
            } catch (std::exception const& e) {
                std::lock_guard lock(m);
                errors.push_back(e.what());
            }
        });
    workers.clear();
    EXPECT_TRUE(errors.empty()) << errors.front();
    EXPECT_EQ(granted.load(), threads * rounds);
    EXPECT_LE(most, static_cast<std::size_t>(permits));
    EXPECT_GE(most, 1U);
}

TEST_P(Coordination, SemaphoreRefusesAnotherNumberOfPermitsAndChangesNothing) {
    auto const name = n("sem-n");
    auto locker = table();
    sqlock::semaphore three(locker, 3);
    auto held = three.try_acquire(name);
    ASSERT_TRUE(held);
    sqlock::semaphore five(locker, 5);
    try {
        (void)five.try_acquire(name);
        FAIL() << "a semaphore of 5 took a permit of one stored with 3";
    } catch (sqlock::usage_error const& e) {
        std::string const what = e.what();
        EXPECT_NE(what.find("has 3 permits"), std::string::npos) << what;
        EXPECT_NE(what.find("asks for 5"), std::string::npos) << what;
        EXPECT_NE(what.find("--forget"), std::string::npos) << what;
    }
    // Still 3: two more permits, then none.
    auto b = three.try_acquire(name);
    auto c = three.try_acquire(name);
    EXPECT_TRUE(b && c);
    EXPECT_FALSE(three.try_acquire(name));
    // Forgetting is refused while permits are held, and works once they are gone.
    EXPECT_THROW((void)sqlock::forget_semaphore(*db_, name), sqlock::usage_error);
    held->release();
    b->release();
    c->release();
    EXPECT_TRUE(sqlock::forget_semaphore(*db_, name));
    EXPECT_FALSE(sqlock::forget_semaphore(*db_, name));
    std::vector<lease> now_five;
    for (int i = 0; i < 5; ++i) {
        auto got = five.try_acquire(name);
        ASSERT_TRUE(got) << "permit " << i << " of the redefined 5";
        now_five.push_back(std::move(*got));
    }
    // A new semaphore of 3 reads the stored 5 at its first acquire.
    EXPECT_THROW((void)sqlock::semaphore(locker, 3).try_acquire(name), sqlock::usage_error);
}

TEST_P(Coordination, SemaphoreNoticesARedefinitionWithinItsTtl) {
    // The stored N is read at a name's first acquire and again at most once per TTL (400 ms here).
    auto const name = n("sem-redef");
    auto locker = table(short_lived());
    sqlock::semaphore three(locker, 3);
    {
        auto held = three.try_acquire(name);
        ASSERT_TRUE(held);
        held->release();
    }
    ASSERT_TRUE(sqlock::forget_semaphore(*db_, name));
    sqlock::semaphore five(locker, 5);
    auto fifth = five.try_acquire(name);  // stores 5
    ASSERT_TRUE(fifth);
    fifth->release();
    // Within the TTL `three` may still take a permit by its own N; past it, it reads 5 and refuses.
    std::this_thread::sleep_for(450ms);
    EXPECT_THROW((void)three.try_acquire(name), sqlock::usage_error);
}

TEST_P(Coordination, SemaphorePermitOfAGoneHolderExpiresAndIsTakenOver) {
    auto const name = n("sem-gone");
    sqlock::semaphore gone(table(short_lived()), 1);
    auto abandoned = gone.try_acquire(name);
    ASSERT_TRUE(abandoned);
    auto const old_token = abandoned->token();
    abandon(std::move(*abandoned));
    sqlock::semaphore sem(table(), 1);
    EXPECT_FALSE(sem.try_acquire(name)) << "the permit was free before it expired";
    auto taken = sem.acquire(name, 30s);
    EXPECT_GT(taken.token(), old_token);
}

TEST_P(Coordination, SemaphoreWaiterGetsAReleasedPermit) {
    auto const name = n("sem-wait");
    auto locker = table({.backoff_max = 200ms});
    sqlock::semaphore sem(locker, 2);
    auto a = sem.try_acquire(name);
    auto b = sem.try_acquire(name);
    ASSERT_TRUE(a && b);
    auto waiter = std::async(std::launch::async, [&] {
        sqlock::semaphore mine(locker, 2);
        return mine.acquire(name, 60s);
    });
    EXPECT_EQ(waiter.wait_for(300ms), std::future_status::timeout) << "a permit was granted while both were held";
    auto const slot = b->name();
    b->release();
    auto got = waiter.get();
    EXPECT_EQ(got.name(), slot);
}

TEST_P(Coordination, SemaphoreListsItsPermits) {
    auto const name = n("sem-list");
    sqlock::semaphore sem(table(), 4);
    auto held = sem.try_acquire(name);
    ASSERT_TRUE(held);
    auto info = listed(held->name());
    ASSERT_TRUE(info);
    EXPECT_EQ(info->kind, "permit");
    EXPECT_EQ(info->lock, name);
    EXPECT_GE(info->slot, 0);
    EXPECT_LT(info->slot, 4);
    // The operator can free a stuck permit by its listed name.
    EXPECT_TRUE(sqlock::force_release(*db_, info->name));
    EXPECT_THROW(held->release(), sqlock::lease_lost);
}

TEST_P(Coordination, BadInputIsRefusedBeforeAnyIo) {
    auto locker = table();
    EXPECT_THROW(sqlock::semaphore(locker, 0), sqlock::usage_error);
    EXPECT_THROW(sqlock::semaphore(locker, 10001), sqlock::usage_error);
    sqlock::semaphore sem(locker, 2);
    EXPECT_THROW((void)sem.try_acquire(std::string(250, 'x')), sqlock::usage_error);
    EXPECT_THROW((void)sem.try_acquire(n("a\x1f"
                                         "b")),
                 sqlock::usage_error);
    EXPECT_THROW((void)locker.try_acquire(n("a\x1f"
                                            "p\x1f"
                                            "0")),
                 sqlock::usage_error)
        << "a plain lock could take a semaphore's permit row";
    sqlock::rw_locker rw(locker);
    EXPECT_THROW((void)rw.try_acquire_shared(std::string(240, 'x')), sqlock::usage_error);
    sqlock::election el(locker);
    EXPECT_THROW((void)el.try_campaign(n("e"), ""), sqlock::usage_error);
    EXPECT_THROW((void)el.try_campaign(n("e"),
                                       "a\x1f"
                                       "b"),
                 sqlock::usage_error);
    EXPECT_THROW((void)el.try_campaign(n("e"), std::string(201, 'v')), sqlock::usage_error);
    EXPECT_THROW(sqlock::election(locker, {.observe_interval = 1ms}), sqlock::usage_error);
    EXPECT_THROW((void)sqlock::table_locker(*db_, {.owner = "a\x1f"
                                                            "b"}),
                 sqlock::usage_error);
    auto const rows = sqlock::list_locks(*db_);
    EXPECT_TRUE(std::none_of(rows.begin(), rows.end(), [&](sqlock::lock_info const& i) {
        return i.lock.starts_with(prefix_);
    })) << "refused input wrote a row";
}

TEST_P(Coordination, KindsThatCannotWorkAreRefused) {
    auto rows = sqlock::row_locker(*db_);
    EXPECT_THROW(sqlock::rw_locker{rows}, sqlock::usage_error);
    EXPECT_THROW(sqlock::election{rows}, sqlock::usage_error);
    if (e_ == engine::sqlite) {
        EXPECT_THROW(sqlock::semaphore(rows, 2), sqlock::usage_error);
    }
}

// ---- read-write locks ---------------------------------------------------------

TEST_P(Coordination, SharedLeasesOverlapAndExcludeTheWriter) {
    auto const name = n("rw");
    sqlock::rw_locker rw(table());
    // Another owner writes (this thread's own exclusive request would be an upgrade).
    sqlock::rw_locker writer(table({.owner = "writer"}));
    auto first = rw.try_acquire_shared(name);
    auto second = rw.try_acquire_shared(name);
    ASSERT_TRUE(first && second) << "two readers could not share";
    EXPECT_NE(first->name(), second->name());
    EXPECT_FALSE(writer.try_acquire(name)) << "a writer got in beside two readers";
    first->release();
    EXPECT_FALSE(writer.try_acquire(name)) << "a writer got in beside one reader";
    second->release();
    auto w = writer.try_acquire(name);
    ASSERT_TRUE(w);
    EXPECT_FALSE(rw.try_acquire_shared(name)) << "a reader got in beside the writer";
}

TEST_P(Coordination, APlainLockOfTheNameIsAWriter) {
    auto const name = n("rw-plain");
    auto locker = table();
    sqlock::rw_locker rw(locker);
    auto plain = locker.try_acquire(name);
    ASSERT_TRUE(plain);
    EXPECT_FALSE(rw.try_acquire_shared(name));
    plain->release();
    auto reader = rw.try_acquire_shared(name);
    ASSERT_TRUE(reader);
    // A reader leaves the plain lock of the name free: only rw_locker's writers wait for readers.
    auto info = listed(reader->name());
    ASSERT_TRUE(info);
    EXPECT_EQ(info->kind, "shared");
    EXPECT_EQ(info->lock, name);
}

TEST_P(Coordination, ReadTokensLieBetweenWriteTokens) {
    auto const name = n("rw-tokens");
    sqlock::rw_locker rw(table());
    auto w1 = rw.try_acquire(name);
    ASSERT_TRUE(w1);
    auto const t1 = w1->token();
    w1->release();
    auto r = rw.try_acquire_shared(name);
    ASSERT_TRUE(r);
    auto const tr = r->token();
    r->release();
    auto w2 = rw.try_acquire(name);
    ASSERT_TRUE(w2);
    EXPECT_LT(t1, tr);
    EXPECT_LT(tr, w2->token());
}

TEST_P(Coordination, AWaitingWriterHoldsNewReadersBack) {
    auto const name = n("rw-pref");
    auto locker = table({.backoff_max = 100ms});
    sqlock::rw_locker rw(locker);
    auto reader = rw.try_acquire_shared(name);
    ASSERT_TRUE(reader);
    std::string writer_owner;
    auto writer = std::async(std::launch::async, [&] {
        sqlock::rw_locker mine(locker);
        return mine.acquire(name, 60s);
    });
    // The writer holds the name's lock while it waits for the reader.
    ASSERT_TRUE(eventually([&] { return listed(name).has_value(); })) << "the writer never took the name's lock";
    EXPECT_EQ(writer.wait_for(0ms), std::future_status::timeout) << "the writer got in beside a reader";
    EXPECT_FALSE(rw.try_acquire_shared(name)) << "a new reader passed a waiting writer";
    auto const reader_token = reader->token();
    reader->release();
    auto w = writer.get();
    EXPECT_GT(w.token(), reader_token);
    EXPECT_FALSE(rw.try_acquire_shared(name));
}

TEST_P(Coordination, NoUpgradeFromSharedToExclusive) {
    auto const name = n("rw-up");
    auto locker = table();
    sqlock::rw_locker rw(locker);
    auto reader = rw.try_acquire_shared(name);
    ASSERT_TRUE(reader);
    try {
        (void)rw.acquire(name, 10s);
        FAIL() << "an upgrade was granted (or waited)";
    } catch (sqlock::usage_error const& e) {
        EXPECT_NE(std::string(e.what()).find("no upgrade"), std::string::npos) << e.what();
    }
    EXPECT_THROW((void)rw.try_acquire(name), sqlock::usage_error);
    // The refusal gave the name's lock back and left the shared lease alone.
    EXPECT_EQ(reader->state(), sqlock::lease_state::held);
    EXPECT_FALSE(listed(name).has_value()) << "the refused writer kept the name's lock";
    reader->renew();
    reader->release();
    EXPECT_TRUE(rw.try_acquire(name));
}

// A live reader row of this owner that this locker does not hold: its grant
// committed as the server died, and the answer never came (seen in
// CoordServerCrash, seed 2212), or another locker of the same owner took it.
// It is no upgrade: the writer waits for it like for any reader, and gets the
// lock when it expires.
TEST_P(Coordination, AReaderRowOfTheSameOwnerNotHeldHereIsWaitedFor) {
    auto const name = n("rw-orphan");
    std::string const owner = "rw-orphan-owner";
    auto opts = short_lived();
    opts.owner = owner;
    sqlock::rw_locker gone(table(opts));
    auto reader = gone.try_acquire_shared(name);
    ASSERT_TRUE(reader);
    auto const rt = reader->token();
    abandon(std::move(*reader));
    sqlock::rw_locker rw(table({.owner = owner, .backoff_max = 100ms}));
    std::optional<lease> early;
    EXPECT_NO_THROW(early = rw.try_acquire(name)) << "a reader row this locker does not hold was taken for an upgrade";
    EXPECT_FALSE(early) << "the exclusive lease was granted beside a live reader";
    auto writer = rw.acquire(name, 30s);
    EXPECT_GT(writer.token(), rt);
}

TEST_P(Coordination, AnAbandonedReaderExpiresAndTheWriterGoesOn) {
    auto const name = n("rw-gone");
    sqlock::rw_locker gone(table(short_lived()));
    auto reader = gone.try_acquire_shared(name);
    ASSERT_TRUE(reader);
    auto const rt = reader->token();
    abandon(std::move(*reader));
    sqlock::rw_locker rw(table({.backoff_max = 100ms}));
    EXPECT_FALSE(rw.try_acquire(name));
    auto writer = rw.acquire(name, 30s);
    EXPECT_GT(writer.token(), rt);
}

TEST_P(Coordination, AWriterThatTimesOutLetsReadersIn) {
    auto const name = n("rw-timeout");
    auto locker = table();
    sqlock::rw_locker rw(locker);
    auto reader = rw.try_acquire_shared(name);
    ASSERT_TRUE(reader);
    auto writer = std::async(std::launch::async, [&] {
        sqlock::rw_locker mine(locker);
        return mine.acquire(name, 300ms);
    });
    EXPECT_THROW(writer.get(), sqlock::timeout);
    EXPECT_TRUE(rw.try_acquire_shared(name)) << "the writer kept the name's lock after giving up";
}

// A reader waiting for a writer marks the name's row in its attempt, so the writer's
// release wakes it, from another store, long before its backoff would (its first
// retry is drawn from a day: one in 1440 would come within the minute allowed).
TEST_P(Coordination, AWaitingReaderIsWokenByTheWritersRelease) {
    auto const name = n("rw-wake");
    sqlock::rw_locker rw(table());
    auto writer = rw.acquire(name, 0ms);
    auto const wt = writer.token();
    sqlock::store other(url_);
    auto readers = sqlock::table_locker(other, {.backoff_min = 24h, .backoff_max = 24h});
    std::stop_source stop;
    auto reader = std::async(std::launch::async,
                             [&] { return sqlock::rw_locker(readers).acquire_shared(name, 10min, stop.get_token()); });
    ASSERT_TRUE(eventually([&] { return marked(name); }, 30000ms)) << "the waiting reader never marked the row";
    writer.release();
    bool const woken = reader.wait_for(60s) == std::future_status::ready;
    if (!woken) stop.request_stop();
    ASSERT_TRUE(woken) << "the writer's release did not wake the waiting reader";
    EXPECT_GT(reader.get().token(), wt);
}

// A reader that takes over an expired writer's row, marked by a waiting writer,
// rings for the name: the waiter is woken (its backoff is drawn from a day, and it
// is allowed a minute) and gets the name's lock, which no reader keeps.
TEST_P(Coordination, AReaderTakingOverAMarkedRowWakesItsWaiter) {
    auto const name = n("rw-takeover");
    auto gone = table(short_lived());
    auto abandoned = gone.acquire(name, 0ms);
    auto const at = abandoned.token();
    abandon(std::move(abandoned));
    sqlock::store other(url_);
    auto waiting = sqlock::table_locker(other, {.backoff_min = 24h, .backoff_max = 24h});
    std::stop_source stop;
    auto waiter = std::async(std::launch::async, [&] { return waiting.acquire(name, 10min, stop.get_token()); });
    ASSERT_TRUE(eventually([&] { return marked(name); }, 30000ms)) << "the waiter never marked the row";
    ASSERT_TRUE(eventually([&] { return !row(name) || !row(name)->live(); }, 30000ms)) << "the row never expired";
    sqlock::rw_locker rw(table());
    auto reader = rw.try_acquire_shared(name);
    ASSERT_TRUE(reader) << "the expired writer's row was not taken over";
    EXPECT_GT(reader->token(), at);
    bool const woken = waiter.wait_for(60s) == std::future_status::ready;
    if (!woken) stop.request_stop();
    ASSERT_TRUE(woken) << "the reader's takeover of the marked row did not wake its waiter";
    EXPECT_GT(waiter.get().token(), reader->token());
}

// ---- elections ----------------------------------------------------------------

TEST_P(Coordination, CampaignLeaderAndResign) {
    auto const name = n("el");
    sqlock::election el(table());
    EXPECT_FALSE(el.leader(name));
    auto a = el.campaign(name, "10.0.0.1:8080", 10s);
    auto who = el.leader(name);
    ASSERT_TRUE(who);
    EXPECT_EQ(who->value, "10.0.0.1:8080");
    EXPECT_EQ(who->term, a.term());
    EXPECT_EQ(who->owner, a.lease().owner().substr(0, who->owner.size()));
    EXPECT_EQ(a.lease().owner(), who->owner + "\x1f" + who->value);
    EXPECT_GE(who->expires_at, who->elected_at);
    auto info = listed(name);
    ASSERT_TRUE(info);
    EXPECT_EQ(info->value, "10.0.0.1:8080");
    EXPECT_EQ(info->owner, who->owner);

    sqlock::election other(table());
    EXPECT_FALSE(other.try_campaign(name, "10.0.0.2:8080")) << "two leaders at once";
    auto const first_term = a.term();
    a.resign();
    EXPECT_FALSE(el.leader(name));
    auto b = other.try_campaign(name, "10.0.0.2:8080");
    ASSERT_TRUE(b);
    EXPECT_GT(b->term(), first_term);
    EXPECT_EQ(el.leader(name)->value, "10.0.0.2:8080");
}

TEST_P(Coordination, ObserveReportsEveryChange) {
    auto const name = n("el-watch");
    sqlock::election el(table(), {.observe_interval = 50ms});
    observe_record observer(el, name);
    auto count = [&] { return observer.count(); };
    ASSERT_TRUE(eventually([&] { return count() == 1; }));
    auto a = el.campaign(name, "a", 10s);
    ASSERT_TRUE(eventually([&] { return count() == 2; })) << "the new leader was not reported";
    a.resign();
    ASSERT_TRUE(eventually([&] { return count() == 3; })) << "the resignation was not reported";
    // A leader that stops renewing is reported gone once its lease expires.
    sqlock::election quiet(table(short_lived()));
    auto b = quiet.campaign(name, "b", 10s);
    auto const b_term = b.term();
    std::optional<sqlock::leadership> kept(std::move(b));
    ASSERT_TRUE(eventually([&] { return count() == 5; })) << "the expiry of a silent leader was not reported";
    auto const seen = observer.stop();
    ASSERT_EQ(seen.size(), 5U);
    EXPECT_FALSE(seen[0]);
    ASSERT_TRUE(seen[1]);
    EXPECT_EQ(seen[1]->value, "a");
    EXPECT_FALSE(seen[2]);
    ASSERT_TRUE(seen[3]);
    EXPECT_EQ(seen[3]->value, "b");
    EXPECT_EQ(seen[3]->term, b_term);
    EXPECT_GT(seen[3]->term, seen[1]->term);
    EXPECT_FALSE(seen[4]);
}

TEST_P(Coordination, ObserverInAnotherStoreHearsAResignationBeforeItsNextRead) {
    auto const name = n("el-ring");
    sqlock::election el(table());
    auto a = el.campaign(name, "a", 10s);
    // Another store, as another process would have: no in-process wake-up reaches it.
    sqlock::store other(url_);
    sqlock::election watcher(sqlock::table_locker(other), {.observe_interval = std::chrono::minutes(1)});
    observe_record observer(watcher, name);
    auto count = [&] { return observer.count(); };
    ASSERT_TRUE(eventually([&] { return count() == 1; }));
    // The observer has read the leader and marks its row (after reporting it, at the latest on its next pass).
    std::string const marked = e_ == engine::postgresql ? "waiters" : "waiters <> 0";
    ASSERT_TRUE(eventually([&] {
        int found = 0;
        *raw_ << "SELECT COUNT(*) FROM sqlock_locks WHERE name = :name AND " + marked, soci::use(name, "name"),
            soci::into(found);
        return found == 1;
    })) << "the observer did not mark the leader's row";
    a.resign();
    // Its next read is a minute away: only the announced release can report this in time.
    EXPECT_TRUE(eventually([&] { return count() == 2; }, 20s)) << "the resignation was not announced to the observer";
    auto const seen = observer.stop();
    ASSERT_GE(seen.size(), 2U);
    ASSERT_TRUE(seen[0]);
    EXPECT_EQ(seen[0]->value, "a");
    EXPECT_FALSE(seen[1]);
}

TEST_P(Coordination, LeadResignsOnlyAfterTheWorkReturns) {
    auto const name = n("el-lead");
    sqlock::election el(table());
    std::stop_source cancel;
    bool leader_while_cancelled = false;
    bool told_to_stop = false;
    el.lead(
        name, "worker", 10s,
        [&](sqlock::leadership& me, std::stop_token stop) {
            cancel.request_stop();
            told_to_stop = stop.stop_requested();
            auto who = el.leader(name);
            leader_while_cancelled = who && who->term == me.term();
        },
        cancel.get_token());
    EXPECT_TRUE(told_to_stop) << "the work's stop token did not follow the cancel";
    EXPECT_TRUE(leader_while_cancelled) << "the leadership was given up before the work returned";
    EXPECT_FALSE(el.leader(name)) << "lead() returned still leading";
}

TEST_P(Coordination, LeadPassesTheWorksExceptionOnAfterResigning) {
    auto const name = n("el-throw");
    sqlock::election el(table());
    EXPECT_THROW(el.lead(name, "w", 10s, [](sqlock::leadership&, std::stop_token) { throw std::runtime_error("x"); }),
                 std::runtime_error);
    EXPECT_FALSE(el.leader(name));
}

INSTANTIATE_TEST_SUITE_P(Engines, Coordination, ::testing::Values(engine::postgresql, engine::mysql, engine::sqlite),
                         engine_param_name{});

// ---- a semaphore over the row lock (servers only: SQLite's row lock locks the file) ----

class CoordinationRowLock : public Coordination {};

TEST_P(CoordinationRowLock, SemaphoreOverRowLocksGrantsExactlyItsPermits) {
    auto const name = n("row-sem");
    sqlock::semaphore sem(sqlock::row_locker(*db_), 2);
    auto a = sem.try_acquire(name);
    auto b = sem.try_acquire(name);
    ASSERT_TRUE(a && b);
    EXPECT_NE(a->name(), b->name());
    EXPECT_FALSE(sem.try_acquire(name));
    b->release();
    EXPECT_TRUE(sem.try_acquire(name));
}

INSTANTIATE_TEST_SUITE_P(Engines, CoordinationRowLock, ::testing::Values(engine::postgresql, engine::mysql),
                         engine_param_name{});

}  // namespace
