// Self-tests of the battery's checkers (tests/faults/checkers.hpp), no database: for each of K1–K9 a known-good
// synthetic history that must pass and known-bad ones that must be reported, as atlasdb tests its Jepsen lock
// checkers. A checker that cannot fail is caught here, before a fault run trusts its silence.
#include "checkers.hpp"
#include "coord_checkers.hpp"

#include <gtest/gtest.h>

#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <random>
#include <set>

#include <unistd.h>

namespace sb = sqlock_battery;
namespace fs = std::filesystem;

namespace {

constexpr std::int64_t ms = 1'000'000;  // mono_ns per millisecond

// A history written by hand: times in milliseconds on the monotonic clock.
struct history {
    std::vector<sb::event> events;

    sb::event& put(std::string const& proc, std::int64_t thread, std::string op, std::string type, std::string lock,
                   std::int64_t at_ms) {
        sb::event e;
        e.proc = proc;
        e.pid = 1000 + static_cast<std::int64_t>(proc.size());
        e.thread = thread;
        e.op = std::move(op);
        e.type = std::move(type);
        e.lock = std::move(lock);
        e.owner = proc + "/" + std::to_string(thread);
        e.mono_ns = at_ms * ms;
        events.push_back(e);
        return events.back();
    }
    // invoke at `at`, completion `type` at `done`
    sb::event& call(std::string const& proc, std::string op, std::string type, std::string lock, std::int64_t at,
                    std::int64_t done, std::optional<std::int64_t> token = {}, std::int64_t thread = 0) {
        put(proc, thread, op, "invoke", lock, at).token = token;
        auto& e = put(proc, thread, std::move(op), std::move(type), std::move(lock), done);
        e.token = token;
        return e;
    }
    void acquire(std::string const& proc, std::string lock, std::int64_t at, std::int64_t done, std::int64_t token,
                 std::int64_t validity_ms, std::int64_t thread = 0) {
        call(proc, "acquire", "ok", std::move(lock), at, done, token, thread).validity_ms = validity_ms;
    }
    void renew(std::string const& proc, std::string lock, std::int64_t at, std::int64_t done, std::int64_t token,
               std::int64_t validity_ms, std::int64_t thread = 0) {
        call(proc, "renew", "ok", std::move(lock), at, done, token, thread).validity_ms = validity_ms;
    }
    void release(std::string const& proc, std::string lock, std::int64_t at, std::int64_t done, std::int64_t token,
                 std::int64_t thread = 0) {
        call(proc, "release", "ok", std::move(lock), at, done, token, thread);
    }
};

sb::audit_row row(std::int64_t seq, std::string kind, std::string owner, std::int64_t token, std::int64_t db_ms,
                  std::int64_t expires_ms, std::string lock = "L", std::string db = "") {
    return sb::audit_row{seq,          std::move(lock),   std::move(owner), token, std::move(kind),
                         db_ms * 1000, expires_ms * 1000, std::move(db)};
}

bool mentions(sb::report const& r, std::string const& text) {
    for (auto const& v : r.violations)
        if (v.what.find(text) != std::string::npos) return true;
    return false;
}

// ---- K1 ---------------------------------------------------------------------------------------------------------

TEST(K1, DisjointLeasesPass) {
    std::vector<sb::audit_row> audit{
        row(1, "grant", "a", 1, 0, 10),  row(2, "renew", "a", 1, 5, 15),      // extended while valid
        row(3, "delete", "a", 1, 8, 15),                                      // released
        row(4, "grant", "b", 2, 9, 19),  row(5, "takeover", "c", 3, 20, 30),  // b expired at 19
        row(6, "hold", "c", 3, 21, 30),  row(7, "delete", "c", 3, 35, 30),    // purged after expiry
    };
    auto r = sb::k1_db_disjoint(audit);
    EXPECT_TRUE(r.ok()) << r.summary();
    EXPECT_EQ(r.counts["grants"], 3);
    EXPECT_EQ(r.counts["takeovers"], 1);
    EXPECT_EQ(r.counts["releases"], 1);
    EXPECT_EQ(r.counts["expired_deletes"], 1);
}

TEST(K1, TakeoverBeforeExpiryIsReported) {
    auto r = sb::k1_db_disjoint({row(1, "grant", "a", 1, 0, 10), row(2, "takeover", "b", 2, 5, 15)});
    EXPECT_FALSE(r.ok());
    EXPECT_TRUE(mentions(r, "before its expiry")) << r.summary();
}

TEST(K1, OverlappingGrantsInDbTimeAreReported) {
    // An insert over a row the audit never saw deleted, while that row was still valid.
    auto r = sb::k1_db_disjoint({row(1, "grant", "a", 1, 0, 10), row(2, "grant", "b", 2, 3, 13)});
    EXPECT_FALSE(r.ok()) << r.summary();
    EXPECT_EQ(r.counts["audit_gaps"], 1);
}

TEST(K1, RenewOfAnEndedLeaseDoesNotHideAnOverlap) {
    // a's row said 10, a renew audited at 11 (its statement waited for the row lock) wrote 21, and b took over at
    // 15: the row's expiry as last written (21) is what the takeover must respect.
    auto r = sb::k1_db_disjoint(
        {row(1, "grant", "a", 1, 0, 10), row(2, "renew", "a", 1, 11, 21), row(3, "takeover", "b", 2, 15, 25)});
    EXPECT_TRUE(mentions(r, "taken over")) << r.summary();
    EXPECT_EQ(r.counts["late_renews"], 1);
    auto fine = sb::k1_db_disjoint(
        {row(1, "grant", "a", 1, 0, 10), row(2, "renew", "a", 1, 11, 21), row(3, "takeover", "b", 2, 21, 31)});
    EXPECT_TRUE(fine.ok()) << fine.summary();
}

TEST(K1, ClockJumpsAreCountedNotReported) {
    // The database clock went back 100 ms between seq 2 and 3; in its own time nothing overlaps.
    auto r = sb::k1_db_disjoint({row(1, "grant", "a", 1, 1000, 1010), row(2, "delete", "a", 1, 1005, 1010),
                                 row(3, "grant", "b", 2, 905, 915), row(4, "takeover", "c", 3, 916, 926)});
    EXPECT_TRUE(r.ok()) << r.summary();
    EXPECT_EQ(r.counts["clock_jumps"], 1);
}

TEST(K1, EachDatabaseIsItsOwnTimeline) {
    auto r = sb::k1_db_disjoint({row(1, "grant", "a", 1, 0, 10, "L", "pg1"), row(1, "grant", "b", 7, 5, 15, "L", "pg2"),
                                 row(2, "takeover", "b", 2, 11, 21, "L", "pg1")});
    EXPECT_TRUE(r.ok()) << r.summary();
    auto bad =
        sb::k1_db_disjoint({row(1, "grant", "a", 1, 0, 10, "L", "pg1"), row(2, "takeover", "b", 2, 9, 19, "L", "pg1"),
                            row(1, "grant", "c", 1, 0, 10, "L", "pg2")});
    EXPECT_FALSE(bad.ok());
    EXPECT_TRUE(mentions(bad, "on db 'pg1'")) << bad.summary();
}

TEST(K1, UnknownKindIsUnreadableInput) {
    EXPECT_THROW(sb::k1_db_disjoint({row(1, "granted", "a", 1, 0, 10)}), std::invalid_argument);
}

// ---- K2 ---------------------------------------------------------------------------------------------------------

TEST(K2, HandOffWithoutOverlapPasses) {
    history h;
    h.acquire("w1", "L", 0, 1, 1, 1000);      // believes [1, 1001)
    h.release("w1", "L", 500, 510, 1);        // ... until its release invoke at 500
    h.acquire("w2", "L", 400, 600, 2, 1000);  // granted after 500: its window had a free moment
    h.release("w2", "L", 700, 710, 2);
    h.acquire("w1", "L", 800, 900, 3, 50);    // believes [900, 950): validity ran out, not released yet
    h.acquire("w2", "L", 920, 960, 4, 1000);  // acquired after w1's deadline
    h.release("w2", "L", 990, 995, 4);
    h.call("w1", "release", "fail", "L", 1100, 1101, 3).error = "sqlock::lease_lost: validity ran out";
    auto r = sb::k2_belief_overlap(h.events);
    EXPECT_TRUE(r.ok()) << r.summary();
    EXPECT_EQ(r.counts["grants"], 4);
}

TEST(K2, TwoOwnersBelievingAtOnceAreReported) {
    history h;
    h.acquire("w1", "L", 0, 1, 1, 1000);
    h.acquire("w2", "L", 100, 200, 2, 1000);
    h.release("w1", "L", 300, 301, 1);
    h.release("w2", "L", 400, 401, 2);
    auto r = sb::k2_belief_overlap(h.events);
    EXPECT_TRUE(mentions(r, "both believed they held it for 100 ms")) << r.summary();
    EXPECT_EQ(r.counts["overlaps"], 1);
    EXPECT_EQ(r.counts["overlap_max_ms"], 100);
    // Report-only runs (pauses, partitions) count it without failing.
    auto counted = sb::k2_belief_overlap(h.events, /*expect_zero=*/false);
    EXPECT_TRUE(counted.ok()) << counted.summary();
    EXPECT_EQ(counted.counts["overlaps"], 1);
}

TEST(K2, RenewExtendsTheBelief) {
    history h;
    h.acquire("w1", "L", 0, 1, 1, 100);  // until 101
    h.renew("w1", "L", 50, 60, 1, 100);  // invoked while valid: until 160
    h.acquire("w2", "L", 110, 120, 2, 100);
    auto r = sb::k2_belief_overlap(h.events);
    EXPECT_EQ(r.counts["overlaps"], 1) << r.summary();
    EXPECT_TRUE(mentions(r, "both believed")) << r.summary();
}

TEST(K2, AcquireWindowCoveredByAnotherHolderIsReported) {
    history h;
    h.acquire("w1", "L", 0, 1, 1, 10'000);
    h.release("w1", "L", 5000, 5001, 1);
    h.acquire("w2", "L", 100, 200, 2, 0);  // no belief of its own (validity 0), yet granted while w1 held
    auto r = sb::k2_belief_overlap(h.events);
    EXPECT_EQ(r.counts["overlaps"], 0);
    EXPECT_EQ(r.counts["covered_windows"], 1);
    EXPECT_TRUE(mentions(r, "throughout its acquire window")) << r.summary();
}

TEST(K2, AKilledHolderBelievesUntilItsDeadlineOrItsLastEvent) {
    history h;
    h.acquire("w1", "L", 0, 1, 1, 1000);  // then killed: nothing more from w1
    h.acquire("w2", "L", 100, 1500, 2, 1000);
    h.call("w3", "acquire", "ok", "L", 2600, 2700, 3);  // no validity recorded: believes until its last event
    h.acquire("w4", "L", 2800, 2900, 4, 1000);
    auto r = sb::k2_belief_overlap(h.events);
    EXPECT_TRUE(r.ok()) << r.summary();
    h.acquire("w5", "L", 2000, 2010, 5, 100);  // while w2 (validity to 2500) still believed
    EXPECT_EQ(sb::k2_belief_overlap(h.events).counts["overlaps"], 1);
}

TEST(K2, LostEndsTheBelief) {
    history h;
    h.acquire("w1", "L", 0, 1, 1, 10'000);
    auto& lost = h.put("w1", 7, "lost", "ok", "L", 50);  // written by the renewer thread, matched by token
    lost.token = 1;
    lost.owner = "w1/0";
    h.acquire("w2", "L", 40, 100, 2, 1000);
    h.release("w1", "L", 200, 201, 1);
    auto r = sb::k2_belief_overlap(h.events);
    EXPECT_TRUE(r.ok()) << r.summary();
}

// ---- K3 ---------------------------------------------------------------------------------------------------------

TEST(K3, IncreasingTokensAndRejectedStaleWritesPass) {
    history h;
    h.call("w1", "write_fenced", "ok", "L", 0, 1, 1);
    h.call("w1", "write_fenced", "ok", "L", 2, 3, 1);  // the same grant writes again with its token
    h.call("w2", "write_fenced", "ok", "L", 4, 5, 2);
    h.call("w1", "write_fenced", "fail", "L", 6, 7, 1).error = "sqlock::stale_token: 2 already seen";
    // concurrent writes: 4 committed first but its ok was written after 3's
    h.call("w3", "write_fenced", "ok", "L", 10, 20, 3);
    h.call("w4", "write_fenced", "ok", "L", 11, 15, 4);
    auto r = sb::k3_fenced(h.events);
    EXPECT_TRUE(r.ok()) << r.summary();
    EXPECT_EQ(r.counts["accepted"], 5);
    EXPECT_EQ(r.counts["rejected"], 1);
}

TEST(K3, AcceptedLowerTokenIsReported) {
    history h;
    h.call("w2", "write_fenced", "ok", "L", 0, 1, 5);
    h.call("w1", "write_fenced", "ok", "L", 2, 3, 4);  // the paused holder's write got through
    auto r = sb::k3_fenced(h.events);
    EXPECT_FALSE(r.ok());
    EXPECT_EQ(r.counts["stale_accepted"], 1);
    EXPECT_TRUE(mentions(r, "stale holder")) << r.summary();
}

// ---- K4 ---------------------------------------------------------------------------------------------------------

TEST(K4, ExactCounterPasses) {
    history h;
    for (std::int64_t i = 1; i <= 3; ++i) {
        std::string proc = "w";
        proc += std::to_string(i);  // appended: GCC 12 warns falsely on "lit" + string&& (-Wrestrict, bug 105329)
        h.call(proc, "write_unfenced", "ok", "L", i * 10, i * 10 + 5).value = i;
    }
    h.put("w4", 0, "write_unfenced", "invoke", "L", 100);  // killed inside: may have written
    auto r = sb::k4_counter(h.events, {{"L", 3}});
    EXPECT_TRUE(r.ok()) << r.summary();
    EXPECT_TRUE(sb::k4_counter(h.events, {{"L", 4}}).ok());
    EXPECT_EQ(r.counts["indeterminate"], 1);
}

TEST(K4, LostUpdateIsReported) {
    history h;
    h.call("w1", "write_unfenced", "ok", "L", 0, 10).value = 1;
    h.call("w2", "write_unfenced", "ok", "L", 5, 12).value = 2;
    h.call("w3", "write_unfenced", "ok", "L", 6, 14).value = 2;  // read 1 together with w2
    auto r = sb::k4_counter(h.events, {{"L", 2}});
    EXPECT_FALSE(r.ok());
    EXPECT_TRUE(mentions(r, "same counter value 2")) << r.summary();
    EXPECT_TRUE(mentions(r, "lost update(s)")) << r.summary();
}

TEST(K4, PhantomWritesAndMissingFinalValuesAreReported) {
    history h;
    h.call("w1", "write_unfenced", "ok", "L", 0, 10).value = 1;
    EXPECT_TRUE(mentions(sb::k4_counter(h.events, {{"L", 2}}), "writes nobody made"));
    EXPECT_TRUE(mentions(sb::k4_counter(h.events, {}), "no final counter value"));
}

// ---- K5 ---------------------------------------------------------------------------------------------------------

TEST(K5, ProperSequencePasses) {
    history h;
    h.acquire("w1", "L", 0, 1, 1, 1000);
    h.renew("w1", "L", 300, 301, 1, 1000);
    auto& renewed = h.put("w1", 9, "renew", "ok", "L", 600);  // the renewer thread, matched by token
    renewed.token = 1;
    renewed.owner = "w1/0";
    h.release("w1", "L", 700, 701, 1);
    h.release("w1", "L", 710, 711, 1);  // idempotent second release
    h.acquire("w1", "L", 800, 801, 2, 1000);
    h.call("w2", "release", "fail", "L", 810, 811, 2).error = "sqlock::lease_lost: not ours";     // non-holder: refused
    h.call("w1", "renew", "fail", "L", 900, 901, 2).error = "sqlock::backend_unavailable: down";  // not a loss
    h.renew("w1", "L", 950, 951, 2, 1000);
    h.release("w1", "L", 1000, 1001, 2);
    auto r = sb::k5_sequencing(h.events);
    EXPECT_TRUE(r.ok()) << r.summary();
    EXPECT_EQ(r.counts["double_release"], 1);
    EXPECT_EQ(r.counts["renew_ok"], 3);
}

TEST(K5, RenewAfterReleaseIsReported) {
    history h;
    h.acquire("w1", "L", 0, 1, 1, 1000);
    h.release("w1", "L", 10, 11, 1);
    h.renew("w1", "L", 20, 21, 1, 1000);
    auto r = sb::k5_sequencing(h.events);
    EXPECT_TRUE(mentions(r, "after releasing it")) << r.summary();
}

TEST(K5, ARenewerReportWrittenAfterTheReleaseIsNotOrdered) {
    // The renewer thread renewed, then the worker released; the renewer's event (no invoke) was written last.
    history h;
    h.acquire("w1", "L", 0, 1, 1, 1000);
    h.release("w1", "L", 10, 11, 1);
    auto& renewed = h.put("w1", 9, "renew", "ok", "L", 12);
    renewed.token = 1;
    renewed.owner = "w1/0";
    auto r = sb::k5_sequencing(h.events);
    EXPECT_TRUE(r.ok()) << r.summary();
}

TEST(K5, ReleaseByANonHolderIsReported) {
    history h;
    h.acquire("w1", "L", 0, 1, 1, 1000);
    h.release("w2", "L", 10, 11, 1);  // w2 never held token 1
    auto r = sb::k5_sequencing(h.events);
    EXPECT_TRUE(mentions(r, "without holding a grant")) << r.summary();
}

TEST(K5, RenewAfterReportedLossIsReported) {
    history h;
    h.acquire("w1", "L", 0, 1, 1, 1000);
    h.call("w1", "renew", "fail", "L", 300, 301, 1).error = "sqlock::lease_lost: expired";
    h.renew("w1", "L", 400, 401, 1, 1000);
    auto r = sb::k5_sequencing(h.events);
    EXPECT_TRUE(mentions(r, "after the loss")) << r.summary();
}

TEST(K5, SecondAcquireWithoutReleaseIsReported) {
    history h;
    h.acquire("w1", "L", 0, 1, 1, 10'000);
    h.acquire("w1", "L", 10, 11, 2, 10'000);
    auto r = sb::k5_sequencing(h.events);
    EXPECT_TRUE(mentions(r, "acquire ok twice")) << r.summary();
}

// ---- K6 ---------------------------------------------------------------------------------------------------------

std::vector<sb::nemesis_event> kill_at(std::int64_t at_ms) {
    return {sb::nemesis_event{"kill", "w1", "instant", at_ms * ms, "holder"}};
}

TEST(K6, GrantWithinTheBoundPasses) {
    history h;
    h.acquire("w1", "L", 0, 1, 1, 2000);
    h.acquire("w2", "L", 500, 2500, 2, 2000);  // waiting when w1 is killed at 1000
    auto r = sb::k6_availability(h.events, kill_at(1000), 3000);
    EXPECT_TRUE(r.ok()) << r.summary();
    EXPECT_EQ(r.counts["waits_checked"], 1);
    EXPECT_EQ(r.counts["max_gap_ms"], 1500);
}

TEST(K6, GapLongerThanTheBoundIsReported) {
    history h;
    h.acquire("w1", "L", 0, 1, 1, 2000);
    h.acquire("w2", "L", 500, 5000, 2, 2000);
    auto r = sb::k6_availability(h.events, kill_at(1000), 3000);
    EXPECT_FALSE(r.ok());
    EXPECT_TRUE(mentions(r, "over the bound")) << r.summary();
}

TEST(K6, NoGrantAtAllIsReportedOnlyWhenTheHistoryOutlastsTheBound) {
    history h;
    h.acquire("w1", "L", 0, 1, 1, 2000);
    h.put("w2", 0, "acquire", "invoke", "L", 500);
    h.put("w2", 1, "read", "ok", "other", 2000);  // w2 is alive, its acquire still waiting
    EXPECT_EQ(sb::k6_availability(h.events, kill_at(1000), 3000).counts["undecided"], 1);
    h.put("w2", 1, "read", "ok", "other", 9000);
    auto r = sb::k6_availability(h.events, kill_at(1000), 3000);
    EXPECT_TRUE(mentions(r, "no acquire succeeded")) << r.summary();
}

TEST(K6, WaitersThatGaveUpAskNothingOfTheLock) {
    history h;
    h.acquire("w1", "L", 0, 1, 1, 2000);
    h.call("w2", "acquire", "fail", "L", 500, 2000).error = "sqlock::timeout: gave up";  // its own deadline
    h.put("w2", 0, "read", "ok", "other", 9000);
    auto r = sb::k6_availability(h.events, kill_at(1000), 3000);
    EXPECT_TRUE(r.ok()) << r.summary();
    EXPECT_EQ(r.counts["gave_up"], 1);
}

TEST(K6, AKilledWaiterIsNotWaiting) {
    history h;
    h.put("w2", 0, "acquire", "invoke", "L", 500);  // w2 was killed at 1000 while it waited
    h.put("w3", 0, "read", "ok", "other", 9000);
    auto r = sb::k6_availability(h.events, kill_at(1000), 3000);
    EXPECT_TRUE(r.ok()) << r.summary();
    EXPECT_EQ(r.counts["waits_checked"], 0);
}

// ---- K7 ---------------------------------------------------------------------------------------------------------

TEST(K7, IncreasingTokensPass) {
    auto r = sb::k7_tokens({row(1, "grant", "a", 1, 0, 10), row(2, "renew", "a", 1, 5, 15),
                            row(3, "delete", "a", 1, 8, 15), row(4, "grant", "b", 2, 9, 19),
                            row(5, "takeover", "c", 7, 20, 30), row(6, "grant", "x", 1, 0, 10, "M")},
                           {});
    EXPECT_TRUE(r.ok()) << r.summary();
    EXPECT_EQ(r.counts["grants"], 4);
}

TEST(K7, RepeatedTokenAfterDeleteIsReported) {
    // SQLite rowid reuse: the maximum rowid deleted, then handed out again.
    auto r = sb::k7_tokens({row(1, "grant", "a", 1, 0, 10), row(2, "grant", "b", 2, 1, 11, "M"),
                            row(3, "delete", "a", 1, 5, 10), row(4, "grant", "c", 1, 6, 16)},
                           {});
    EXPECT_FALSE(r.ok());
    EXPECT_TRUE(mentions(r, "token 1 granted")) << r.summary();
}

TEST(K7, RenewWithAnotherTokenIsReported) {
    auto r = sb::k7_tokens({row(1, "grant", "a", 3, 0, 10), row(2, "renew", "a", 4, 5, 15)}, {});
    EXPECT_TRUE(mentions(r, "carries token 4")) << r.summary();
}

TEST(K7, HistoryIsUsedWithoutAnAudit) {
    history good;
    good.acquire("w1", "L", 0, 10, 5, 100);
    good.acquire("w2", "L", 5, 30, 4, 100);  // concurrent with w1's acquire: not ordered
    good.acquire("w3", "L", 40, 50, 6, 100);
    EXPECT_TRUE(sb::k7_tokens({}, good.events).ok());
    history bad = good;
    bad.acquire("w4", "L", 60, 70, 6, 100);  // repeats w3's token after w3's grant returned
    auto r = sb::k7_tokens({}, bad.events);
    EXPECT_FALSE(r.ok()) << r.summary();
    EXPECT_EQ(r.counts["from_history"], 1);
}

// ---- K8 ---------------------------------------------------------------------------------------------------------

TEST(K8, ExpiredAndLiveRowsPass) {
    auto r = sb::k8_leftovers({row(0, "row", "dead", 1, 100, 90), row(0, "row", "alive", 2, 100, 200, "M")}, {"alive"});
    EXPECT_TRUE(r.ok()) << r.summary();
    EXPECT_EQ(r.counts["expired"], 1);
    EXPECT_EQ(r.counts["live"], 1);
}

TEST(K8, UnexpiredRowOfADeadOwnerIsReported) {
    auto r = sb::k8_leftovers({row(0, "row", "dead", 1, 100, 200)}, {"alive"});
    EXPECT_TRUE(mentions(r, "orphaned lease")) << r.summary();
}

TEST(K8, TwoRowsOfOneLockAreReported) {
    auto r = sb::k8_leftovers({row(0, "row", "a", 1, 100, 90), row(0, "row", "b", 2, 100, 90)}, {});
    EXPECT_TRUE(mentions(r, "more than one row")) << r.summary();
}

// ---- K9 ---------------------------------------------------------------------------------------------------------

TEST(K9, TypedErrorsPass) {
    history h;
    h.call("w1", "try_acquire", "fail", "L", 0, 1).error = "busy";
    h.call("w1", "acquire", "fail", "L", 2, 3).error = "sqlock::timeout: lock 'L' was still held after 1000 ms";
    h.call("w1", "renew", "fail", "L", 4, 5).error = "lease_lost: expired";
    h.call("w1", "acquire", "info", "L", 6, 7).error =
        "sqlock::in_doubt: lost the connection to postgresql://127.0.0.1:40001/db during acquire";
    h.call("w1", "acquire", "fail", "job-1213", 8, 9).error =
        "sqlock::timeout: lock 'job-1213' was still held by another owner after waiting 1205 ms";
    auto r = sb::k9_typed_errors(h.events);
    EXPECT_TRUE(r.ok()) << r.summary();
    EXPECT_EQ(r.counts["errors"], 5);
}

TEST(K9, RawEngineErrorsAreReported) {
    for (std::string raw :
         {"ERROR: could not serialize access due to concurrent update", "std::runtime_error: SQLITE_BUSY",
          "soci_error: database is locked", "sqlock::backend_error: deadlock detected",
          "sqlock::timeout: failed (SQLSTATE 40001)", "sqlock::backend_unavailable: MySQL error 1213",
          "sqlock::in_doubt: failed (1205)", "sqlock::in_doubt: ERROR 40P01", "sqlock::lease_lost: [40001] retry",
          "sqlock::timeout: canceling statement due to lock timeout",
          "sqlock::in_doubt: the clean-up failed too (could not serialize access)", ""}) {
        history h;
        h.call("w1", "acquire", "fail", "L", 0, 1).error = raw;
        EXPECT_FALSE(sb::k9_typed_errors(h.events).ok()) << "not reported: \"" << raw << '"';
    }
}

// ---- reading, the run directory and the replay tool ------------------------------------------------------------

class RunDirectory : public ::testing::Test {
protected:
    void SetUp() override {
        std::string name = "sqlock-checkers-";
        name += std::to_string(::getpid());
        name += '-';
        name += std::to_string(std::random_device{}());
        dir_ = fs::temp_directory_path() / name;
        fs::create_directories(dir_);
    }
    void TearDown() override { fs::remove_all(dir_); }
    void write(std::string const& name, std::string const& text) {
        std::ofstream(dir_ / name, std::ios::binary) << text;
    }
    static std::string lines(std::vector<sb::event> const& events) {
        std::string s;
        for (auto const& e : events) s += sb::to_json(e).dump() + '\n';
        return s;
    }
    fs::path dir_;
};

TEST_F(RunDirectory, ReadHistoryIgnoresATornLastLine) {
    history h;
    h.acquire("w1", "L", 0, 1, 1, 1000);
    auto text = lines(h.events);
    auto torn = sb::to_json(h.events.front()).dump();
    write("history-w1.jsonl", text + torn.substr(0, torn.size() / 2));
    auto got = sb::read_history((dir_ / "history-w1.jsonl").string());
    ASSERT_EQ(got.size(), 2u);
    EXPECT_EQ(got[1].type, "ok");
    EXPECT_EQ(got[1].token, 1);
    EXPECT_EQ(got[1].validity_ms, 1000);
}

TEST_F(RunDirectory, ReadHistoryKeepsTheLineAfterATornFragment) {
    history h;
    h.acquire("w1", "L", 0, 1, 1, 1000);
    auto first = sb::to_json(h.events[0]).dump();
    auto second = sb::to_json(h.events[1]).dump();
    write("history.jsonl", first.substr(0, 20) + second + "\n");  // a restarted writer appended after the fragment
    auto got = sb::read_history((dir_ / "history.jsonl").string());
    ASSERT_EQ(got.size(), 1u);
    EXPECT_EQ(got[0].type, "ok");
}

TEST_F(RunDirectory, ReadHistoryRefusesAFileThatIsNotAHistory) {
    write("history.jsonl", "hello\n{\"op\":\"acquire\"}\n");
    EXPECT_THROW(sb::read_history((dir_ / "history.jsonl").string()), std::invalid_argument);
    EXPECT_THROW(sb::read_history((dir_ / "missing.jsonl").string()), std::invalid_argument);
}

TEST_F(RunDirectory, HistoryWriterLinesReadBack) {
    {
        sb::history_writer w((dir_ / "history-w9.jsonl").string(), "w9");
        sb::event e;
        e.op = "acquire";
        e.type = "invoke";
        e.lock = "L";
        w.write(e);
        e.type = "ok";
        e.token = 42;
        e.db_time_us = 1;
        e.expires_at_us = 2;
        e.validity_ms = 3;
        w.write(e);
    }
    auto got = sb::read_history((dir_ / "history-w9.jsonl").string());
    ASSERT_EQ(got.size(), 2u);
    EXPECT_EQ(got[1].proc, "w9");
    EXPECT_EQ(got[1].pid, ::getpid());
    EXPECT_EQ(got[1].token, 42);
    EXPECT_EQ(got[1].expires_at_us, 2);
    EXPECT_LE(got[0].mono_ns, got[1].mono_ns);
}

// A small run: w1 holds and is killed, w2 takes over after expiry and writes; the reaper purges w1's row.
struct small_run {
    history h;
    std::vector<sb::audit_row> audit;
    std::vector<sb::nemesis_event> nemesis = kill_at(500);
    sb::run_final final_state;
    small_run() {
        h.acquire("w1", "L", 0, 10, 1, 1000);
        h.call("w1", "write_fenced", "ok", "L", 20, 30, 1);
        h.call("w1", "write_unfenced", "ok", "L", 31, 40).value = 1;
        h.put("w2", 0, "acquire", "invoke", "L", 100);
        auto& ok = h.put("w2", 0, "acquire", "ok", "L", 1200);
        ok.token = 2;
        ok.validity_ms = 1000;
        h.call("w2", "write_fenced", "ok", "L", 1210, 1220, 2);
        h.call("w2", "write_unfenced", "ok", "L", 1221, 1230).value = 2;
        h.release("w2", "L", 1300, 1310, 2);
        audit = {row(1, "grant", "w1/0", 1, 0, 1000), row(2, "delete", "w1/0", 1, 1050, 1000),
                 row(3, "grant", "w2/0", 2, 1100, 2100), row(4, "delete", "w2/0", 2, 1305, 2100)};
        final_state.counters = {{"L", 2}};
        final_state.has_remaining = true;
        final_state.k6_bound_ms = 3000;
    }
    void save(fs::path const& dir) const {
        std::ofstream hist(dir / "history-all.jsonl");
        for (auto const& e : h.events) hist << sb::to_json(e).dump() << '\n';
        std::ofstream a(dir / "audit.jsonl");
        for (auto const& r : audit) a << sb::to_json(r).dump() << '\n';
        std::ofstream n(dir / "nemesis.jsonl");
        for (auto const& e : nemesis) n << sb::to_json(e).dump() << '\n';
        std::ofstream(dir / "final.json") << sb::to_json(final_state).dump(2);
    }
};

int run_tool(fs::path const& dir) {
    auto const command = std::string(SQLOCK_BATTERY_CHECK) + " " + dir.string() + " > " + (dir / "out.txt").string();
    int const status = std::system(command.c_str());
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST_F(RunDirectory, CheckDirectoryRunsEveryCheckerOnAGoodRun) {
    small_run run;
    run.save(dir_);
    auto reports = sb::check_directory(dir_.string());
    std::vector<std::string> names;
    for (auto const& r : reports) {
        EXPECT_TRUE(r.ok()) << r.summary();
        names.push_back(r.checker);
    }
    EXPECT_EQ(names, (std::vector<std::string>{"K1", "K2", "K3", "K4", "K5", "K6", "K7", "K8", "K9"}));
    EXPECT_EQ(run_tool(dir_), 0);
    std::ifstream out(dir_ / "out.txt");
    std::string first;
    std::getline(out, first);
    EXPECT_EQ(first.rfind("K1 ok (", 0), 0u) << first;
}

TEST_F(RunDirectory, CheckDirectoryReportsABadRun) {
    small_run run;
    run.audit[2] = row(3, "takeover", "w2/0", 2, 900, 1900);  // taken over before w1's expiry at 1000
    run.audit.erase(run.audit.begin() + 1);
    run.final_state.counters["L"] = 1;  // and an update lost
    run.save(dir_);
    auto reports = sb::check_directory(dir_.string());
    std::set<std::string> failed;
    for (auto const& r : reports)
        if (!r.ok()) failed.insert(r.checker);
    EXPECT_EQ(failed, (std::set<std::string>{"K1", "K4"}));
    EXPECT_EQ(run_tool(dir_), 1);
}

TEST_F(RunDirectory, CheckDirectoryReadsRemainingRowsAndHonoursAsserted) {
    small_run run;
    run.final_state.has_remaining = false;
    run.final_state.counters["L"] = 1;  // a lost update, but the run asserts only K1, K7 and K8
    run.final_state.asserted = std::vector<std::string>{"K1", "K7", "K8"};
    run.h.acquire("w3", "L", 1400, 1410, 3, 1000);
    run.h.acquire("w4", "L", 1405, 1420, 4, 1000);  // believed together with w3: K2 only counts it
    run.save(dir_);
    std::ofstream(dir_ / "remaining.jsonl") << sb::to_json(row(0, "row", "w9/0", 9, 5000, 6000)).dump() << '\n';
    std::map<std::string, sb::report> by_name;
    for (auto const& r : sb::check_directory(dir_.string())) by_name.emplace(r.checker, r);
    ASSERT_TRUE(by_name.contains("K8"));
    EXPECT_TRUE(mentions(by_name.at("K8"), "orphaned lease")) << by_name.at("K8").summary();
    EXPECT_TRUE(by_name.at("K8").asserted);
    EXPECT_FALSE(by_name.at("K4").ok());
    EXPECT_FALSE(by_name.at("K4").asserted);
    EXPECT_TRUE(by_name.at("K2").ok()) << by_name.at("K2").summary();
    EXPECT_EQ(by_name.at("K2").counts.at("overlaps"), 1);
    EXPECT_EQ(run_tool(dir_), 1);  // K8 is asserted
    fs::remove(dir_ / "remaining.jsonl");
    EXPECT_EQ(run_tool(dir_), 0);  // only K4 fails, and it is only reported
    std::ifstream out(dir_ / "out.txt");
    std::string text((std::istreambuf_iterator<char>(out)), std::istreambuf_iterator<char>());
    EXPECT_NE(text.find("(reported) K4 FAILED"), std::string::npos) << text;
}

TEST_F(RunDirectory, CheckDirectoryRefusesUnreadableInput) {
    EXPECT_THROW(sb::check_directory((dir_ / "nope").string()), std::invalid_argument);
    EXPECT_THROW(sb::check_directory(dir_.string()), std::invalid_argument);  // nothing to check
    write("history-w1.jsonl", "not json\n{}\n");
    EXPECT_THROW(sb::check_directory(dir_.string()), std::invalid_argument);
    EXPECT_EQ(run_tool(dir_), 2);
}

// ---- the coordination checkers (coord_checkers.hpp) -----------------------------------------------------------

std::string const slot0 =
    "S\x1fp\x1f"
    "0";
std::string const slot1 =
    "S\x1fp\x1f"
    "1";
std::string const slot2 =
    "S\x1fp\x1f"
    "2";
std::string reader_row(std::string const& hex) { return "X\x1fr\x1f" + hex; }

TEST(CoordNames, SplitTheLibrarysRowNames) {
    auto p = sb::split_coord_name(slot1);
    EXPECT_EQ(p.base, "S");
    EXPECT_EQ(p.kind, 'p');
    EXPECT_EQ(p.suffix, "1");
    EXPECT_EQ(sb::split_coord_name(reader_row("00ff")).kind, 'r');
    EXPECT_EQ(sb::split_coord_name("plain/name").kind, 0);
    EXPECT_EQ(sb::split_coord_name("plain/name").base, "plain/name");
}

TEST(K1Permits, AtMostNHoldersPass) {
    // N = 2: two slots held together, a hand-off on slot 0 after its expiry, a release and a regrant on slot 1.
    auto r = sb::k1_permits({row(1, "grant", "a", 1, 0, 10, slot0), row(2, "grant", "b", 1, 2, 12, slot1),
                             row(3, "takeover", "c", 2, 10, 20, slot0), row(4, "delete", "b", 1, 11, 12, slot1),
                             row(5, "grant", "d", 3, 11, 21, slot1), row(6, "delete", "d", 3, 15, 21, slot1)},
                            {}, 2);
    EXPECT_TRUE(r.ok()) << r.summary();
    EXPECT_EQ(r.counts["max_holders"], 2);
    EXPECT_EQ(r.counts["permits_granted"], 4);
}

TEST(K1Permits, AHolderBeyondNIsReported) {
    // A semaphore that skipped its N check: a third slot of a 2-permit semaphore, held beside the other two.
    auto r = sb::k1_permits({row(1, "grant", "a", 1, 0, 10, slot0), row(2, "grant", "b", 1, 2, 12, slot1),
                             row(3, "grant", "c", 1, 4, 14, slot2)},
                            {}, 2);
    EXPECT_FALSE(r.ok());
    EXPECT_TRUE(mentions(r, "3 permits held at once")) << r.summary();
    EXPECT_TRUE(mentions(r, "permit slot '2'")) << r.summary();
    // The per-name N wins over the default.
    EXPECT_TRUE(sb::k1_permits({row(1, "grant", "a", 1, 0, 10, slot0), row(2, "grant", "b", 1, 2, 12, slot1),
                                row(3, "grant", "c", 1, 4, 14, slot2)},
                               {{"S", 3}}, 2)
                    .ok());
}

TEST(K1Permits, ASlotTakenOverBeforeItsExpiryCountsBothHolders) {
    // N = 2: slot 0 taken over at 5 while valid until 10, slot 1 held: three holders in database time.
    auto r = sb::k1_permits({row(1, "grant", "a", 1, 0, 10, slot0), row(2, "grant", "b", 1, 1, 11, slot1),
                             row(3, "takeover", "c", 2, 5, 15, slot0)},
                            {}, 2);
    EXPECT_TRUE(mentions(r, "3 permits held at once")) << r.summary();
}

TEST_F(RunDirectory, CheckDirectoryReplaysACoordinationRunsOwnCheckers) {
    // A 2-permit semaphore whose third slot was held beside the other two: only K1-permits sees it, and only when
    // final.json names the run's kind and N (the battery writes them: scenario::coordination).
    {
        std::ofstream a(dir_ / "audit.jsonl");
        for (auto const& r : {row(1, "grant", "a", 1, 0, 10, slot0), row(2, "grant", "b", 1, 2, 12, slot1),
                              row(3, "grant", "c", 1, 4, 14, slot2)})
            a << sb::to_json(r).dump() << '\n';
    }
    sb::run_final f;
    f.asserted = std::vector<std::string>{"K7"};
    std::ofstream(dir_ / "final.json") << sb::to_json(f).dump(2);
    EXPECT_EQ(run_tool(dir_), 0);  // nothing asserted sees it

    f.coordination = sb::to_json(sb::coordination_checks{"semaphore", 2});
    std::ofstream(dir_ / "final.json") << sb::to_json(f).dump(2);
    std::map<std::string, sb::report> by_name;
    for (auto const& r : sb::check_directory(dir_.string())) by_name.emplace(r.checker, r);
    ASSERT_TRUE(by_name.contains("K1-permits"));
    EXPECT_TRUE(by_name.at("K1-permits").asserted);
    EXPECT_TRUE(mentions(by_name.at("K1-permits"), "3 permits held at once")) << by_name.at("K1-permits").summary();
    EXPECT_TRUE(by_name.contains("K1-reap-coord"));
    EXPECT_EQ(run_tool(dir_), 1);

    // The same N as the run's: a 3-permit semaphore allows it.
    f.coordination = sb::to_json(sb::coordination_checks{"semaphore", 3});
    std::ofstream(dir_ / "final.json") << sb::to_json(f).dump(2);
    EXPECT_EQ(run_tool(dir_), 0);

    // An unknown kind, or a semaphore without its N, is unreadable input.
    for (auto const& bad : {nlohmann::json{{"kind", "mutex"}}, nlohmann::json{{"kind", "semaphore"}}}) {
        f.coordination = bad;
        std::ofstream(dir_ / "final.json") << sb::to_json(f).dump(2);
        EXPECT_THROW(sb::check_directory(dir_.string()), std::invalid_argument) << bad.dump();
        EXPECT_EQ(run_tool(dir_), 2) << bad.dump();
    }
}

// rw: readers r1 and r2 take X's lock and rename it (audit.hpp: a delete of X and a grant of the reader's row), a
// writer takes X at 20 and its acquire returns once both readers are gone (history, realtime − mono = 0).
std::vector<sb::audit_row> rw_audit(std::int64_t r2_release_ms) {
    return {row(1, "grant", "r1", 1, 0, 100, "X"),
            row(2, "delete", "r1", 1, 1, 100, "X"),
            row(3, "grant", "r1", 1, 1, 101, reader_row("a1")),
            row(4, "grant", "r2", 2, 2, 102, "X"),
            row(5, "delete", "r2", 2, 3, 102, "X"),
            row(6, "grant", "r2", 2, 3, 103, reader_row("b2")),
            row(7, "grant", "w", 3, 20, 120, "X"),
            row(8, "delete", "r1", 1, 25, 101, reader_row("a1")),
            row(9, "delete", "r2", 2, r2_release_ms, 103, reader_row("b2")),
            row(10, "delete", "w", 3, 60, 120, "X")};
}

TEST(KRw, ReadersTogetherAndAWriterAlonePass) {
    history h;
    h.call("w", "acquire", "ok", "X", 19, 31, 3);
    h.call("r1", "acquire", "ok", "X", 0, 1, 1).value = 1;
    auto r = sb::k_rw_exclusion(rw_audit(30), h.events, 0, 0);
    EXPECT_TRUE(r.ok()) << r.summary();
    EXPECT_EQ(r.counts["writers"], 1);
    EXPECT_EQ(r.counts["readers"], 2);
    EXPECT_EQ(r.counts["max_concurrent_readers"], 2);
}

TEST(KRw, AWriterThatSkippedTheDrainIsReported) {
    // The writer's acquire returned at 21, while reader r2 held until 40.
    history h;
    h.call("w", "acquire", "ok", "X", 19, 21, 3);
    auto r = sb::k_rw_exclusion(rw_audit(40), h.events, 0, 0);
    EXPECT_FALSE(r.ok());
    EXPECT_TRUE(mentions(r, "while the reader token 2")) << r.summary();
    EXPECT_TRUE(mentions(r, "while the reader token 1")) << r.summary();
}

TEST(KRw, AReaderGrantedWhileAWriterHoldsIsReported) {
    // r3 renamed a grant of X's lock dated inside the writer's interval (X's lock taken over early).
    auto audit = rw_audit(30);
    audit.push_back(row(11, "takeover", "r3", 4, 40, 140, "X"));
    audit.push_back(row(12, "delete", "r3", 4, 41, 140, "X"));
    audit.push_back(row(13, "grant", "r3", 4, 41, 141, reader_row("c3")));
    history h;
    h.call("w", "acquire", "ok", "X", 19, 31, 3);
    auto r = sb::k_rw_exclusion(audit, h.events, 0, 0);
    EXPECT_TRUE(mentions(r, "reader token 4")) << r.summary();
}

TEST(KRw, OverlappingWritersAreReported) {
    auto r = sb::k_rw_exclusion({row(1, "grant", "w1", 1, 0, 10, "X"), row(2, "takeover", "w2", 2, 5, 15, "X")}, {}, 0);
    EXPECT_TRUE(mentions(r, "overlap in database time")) << r.summary();
}

TEST(KElection, IncreasingTermsOneLeaderAtATimePass) {
    history h;
    h.acquire("a", "E", 0, 1, 1, 10);
    h.acquire("b", "E", 2, 12, 2, 10);
    auto r = sb::k_election({row(1, "grant", "a", 1, 0, 10, "E"), row(2, "takeover", "b", 2, 11, 21, "E"),
                             row(3, "renew", "b", 2, 15, 25, "E"), row(4, "delete", "b", 2, 20, 25, "E"),
                             row(5, "grant", "c", 5, 22, 32, "E")},
                            h.events);
    EXPECT_TRUE(r.ok()) << r.summary();
    EXPECT_EQ(r.counts["leaders"], 3);
}

TEST(KElection, TwoLeadersAtOnceAreReported) {
    auto r = sb::k_election({row(1, "grant", "a", 1, 0, 10, "E"), row(2, "takeover", "b", 2, 5, 15, "E")}, {});
    EXPECT_TRUE(mentions(r, "two leaders at once")) << r.summary();
}

TEST(KElection, ARepeatedOrDecreasingTermIsReported) {
    auto repeated = sb::k_election({row(1, "grant", "a", 4, 0, 10, "E"), row(2, "delete", "a", 4, 5, 10, "E"),
                                    row(3, "grant", "b", 4, 6, 16, "E")},
                                   {});
    EXPECT_TRUE(mentions(repeated, "term 4 has two leaders")) << repeated.summary();
    auto decreasing =
        sb::k_election({row(1, "grant", "a", 4, 0, 10, "E"), row(2, "takeover", "b", 3, 10, 20, "E")}, {});
    EXPECT_TRUE(mentions(decreasing, "must strictly increase")) << decreasing.summary();
    history h;
    h.acquire("a", "E", 0, 1, 7, 10);
    h.acquire("b", "E", 0, 2, 7, 10);
    EXPECT_TRUE(mentions(sb::k_election({}, h.events), "term 7 was won by owner"));
}

// The observer's reports (op observe), a kill of the leader w1 (term 5) at 100, the successor w2 (term 6) at 1200.
history observed(std::vector<std::pair<std::int64_t, std::optional<std::int64_t>>> const& reports,
                 std::int64_t end_ms = 3000) {
    history h;
    h.acquire("w1", "E", 0, 10, 5, 1000);
    h.acquire("w2", "E", 20, 1200, 6, 1000);
    for (auto const& [at, term] : reports) h.put("obs", 0, "observe", "ok", "E", at).token = term;
    h.put("w2", 0, "release", "invoke", "E", end_ms).token = 6;
    return h;
}
std::vector<sb::nemesis_event> kill_of_w1() { return {{"kill", "w1", "instant", 100 * ms, "SIGKILL"}}; }

TEST(KObserve, NoneThenTheSuccessorPasses) {
    auto h = observed({{5, std::nullopt}, {15, 5}, {1050, std::nullopt}, {1250, 6}});
    auto r = sb::k_observe(h.events, kill_of_w1(), 2000, true);
    EXPECT_TRUE(r.ok()) << r.summary();
    EXPECT_EQ(r.counts["leader_kills"], 1);
    EXPECT_EQ(r.counts["successors_seen"], 1);
    EXPECT_EQ(r.counts["max_delay_ms"], 50);
}

TEST(KObserve, AnOlderLeaderAfterTheKillIsReported) {
    history h = observed({{15, 5}, {1250, 6}});
    h.put("obs", 0, "observe", "ok", "E", 1300).token = 4;
    auto r = sb::k_observe(h.events, kill_of_w1(), 2000, true);
    EXPECT_TRUE(mentions(r, "an older leader reported after a newer one")) << r.summary();
    EXPECT_TRUE(mentions(r, "neither that leader, none, nor a successor")) << r.summary();
}

TEST(KObserve, ASuccessorNeverOrLateReportedIsReported) {
    auto never = sb::k_observe(observed({{15, 5}, {1050, std::nullopt}}).events, kill_of_w1(), 500, true);
    EXPECT_TRUE(mentions(never, "no observer reported it")) << never.summary();
    auto late = sb::k_observe(observed({{15, 5}, {2500, 6}}).events, kill_of_w1(), 500, true);
    EXPECT_TRUE(mentions(late, "within 500 ms")) << late.summary();
    // The history ends before the bound: undecided, not a violation (but the fault never bit).
    auto undecided = sb::k_observe(observed({{15, 5}}, 1300).events, kill_of_w1(), 500, false);
    EXPECT_TRUE(undecided.ok()) << undecided.summary();
    EXPECT_EQ(undecided.counts["undecided"], 1);
}

TEST(KObserve, NoKilledLeaderMeansTheFaultNeverBit) {
    auto h = observed({{15, 5}, {1250, 6}});
    auto r = sb::k_observe(h.events, {{"kill", "w9", "instant", 100 * ms, "SIGKILL"}}, 2000, true);
    EXPECT_TRUE(mentions(r, "the fault never bit")) << r.summary();
    EXPECT_TRUE(sb::k_observe(h.events, {}, 2000, false).ok());
}

TEST(K1ReapCoord, DeletesInsideTheOwnersCallsPassOthersAreReported) {
    history h;
    h.call("r1", "acquire", "ok", "X", 0, 2, 1).owner = "r1";
    h.call("r1", "release", "ok", "X", 24, 26, 1).owner = "r1";
    for (auto& e : h.events) e.owner = "r1";
    std::vector<sb::audit_row> audit{row(1, "grant", "r1", 1, 0, 100, "X"), row(2, "delete", "r1", 1, 1, 100, "X"),
                                     row(3, "grant", "r1", 1, 1, 101, reader_row("a1")),
                                     row(4, "delete", "r1", 1, 25, 101, reader_row("a1"))};
    auto r = sb::k1_reap_coord(audit, h.events, 0);
    EXPECT_TRUE(r.ok()) << r.summary();
    EXPECT_EQ(r.counts["live_deletes"], 2);
    audit.push_back(row(5, "grant", "r1", 7, 30, 130, reader_row("b2")));
    audit.push_back(row(6, "delete", "r1", 7, 50, 130, reader_row("b2")));  // nobody was releasing at 50
    EXPECT_TRUE(mentions(sb::k1_reap_coord(audit, h.events, 0), "neither acquiring nor releasing"));
}

TEST(K1ReapCoord, ADeleteByAnOperatorsForceReleaseIsNoOwnersAndPasses) {
    // The writer's row of X deleted at 40, before its expiry, by an operator's force_release of X (issue 38).
    history h;
    h.call("w", "acquire", "ok", "X", 19, 21, 3);
    std::vector<sb::audit_row> audit{row(1, "grant", "w", 3, 20, 120, "X"), row(2, "delete", "w", 3, 40, 120, "X")};
    EXPECT_TRUE(mentions(sb::k1_reap_coord(audit, h.events, 0), "neither acquiring nor releasing"));
    h.call("op", "force_release", "ok", "X", 39, 41, 3).value = 1;
    auto r = sb::k1_reap_coord(audit, h.events, 0);
    EXPECT_TRUE(r.ok()) << r.summary();
    EXPECT_EQ(r.counts["force_released"], 1);
    // Another row's force-release excuses nothing.
    h.events.back().lock = h.events[h.events.size() - 2].lock = "Y";
    EXPECT_FALSE(sb::k1_reap_coord(audit, h.events, 0).ok());
}

// ---- K1-permits-defs (issue 38: forget and redefinition of N) --------------------------------------------------

sb::audit_row define(std::int64_t seq, std::int64_t permits, std::int64_t db_ms, std::string kind = "define") {
    return row(seq, std::move(kind), "", permits, db_ms, db_ms, "S");
}

// The clients' acquires that returned the permits of `grants` (owner, token, the semaphore's N): the checker judges
// only permits handed out (a row written, then given back by its grant's confirmation, is none).
history handed_out(std::vector<std::tuple<std::string, std::int64_t, std::int64_t>> const& grants) {
    history h;
    for (auto const& [owner, token, n] : grants) {
        h.call(owner, "acquire", "ok", "S", 0, 1, token).value = n;
        h.events.back().owner = h.events[h.events.size() - 2].owner = owner;
    }
    return h;
}

TEST(K1PermitsDefs, GrantsUnderTheNInForcePass) {
    // N = 2 from 0, forgotten at 20 once both permits were released, N = 1 from 21; a force-released permit ends
    // at its force-release (slot 0 of c, deleted at 25, before its expiry), so d's grant at 26 is the only one live.
    std::vector<sb::audit_row> defs{define(1, 2, 0), define(2, 2, 20, "forget"), define(3, 1, 21)};
    std::vector<sb::audit_row> audit{row(1, "grant", "a", 1, 1, 100, slot0),   row(2, "grant", "b", 1, 2, 100, slot1),
                                     row(3, "delete", "a", 1, 10, 100, slot0), row(4, "delete", "b", 1, 12, 100, slot1),
                                     row(5, "grant", "c", 2, 22, 100, slot0),  row(6, "delete", "c", 2, 25, 100, slot0),
                                     row(7, "grant", "d", 3, 26, 100, slot0)};
    auto const h = handed_out({{"a", 1, 2}, {"b", 1, 2}, {"c", 2, 1}, {"d", 3, 1}});
    auto r = sb::k1_permits_defined(audit, defs, h.events);
    EXPECT_TRUE(r.ok()) << r.summary();
    EXPECT_EQ(r.counts["permits_granted"], 4);
    EXPECT_EQ(r.counts["forgets"], 1);
    EXPECT_EQ(r.counts["defines"], 2);
    EXPECT_EQ(r.counts["clients_matched"], 4);
    EXPECT_EQ(r.counts["max_holders"], 2);
}

TEST(K1PermitsDefs, AForgetWhilePermitsAreLiveAndTheGrantsAfterItAreReported) {
    // N = 3 with three permits live, forgotten at 5 (forget should have refused), N = 1 stored at 6, and a grant at
    // 7 by a semaphore that still believed N = 3: slot 1 of 1, four permits live under N = 1, a superseded N.
    std::vector<sb::audit_row> defs{define(1, 3, 0), define(2, 3, 5, "forget"), define(3, 1, 6)};
    std::vector<sb::audit_row> audit{row(1, "grant", "a", 1, 1, 100, slot0), row(2, "grant", "b", 1, 2, 100, slot1),
                                     row(3, "grant", "c", 1, 3, 100, slot2), row(4, "delete", "b", 1, 4, 100, slot1),
                                     row(5, "grant", "d", 2, 7, 100, slot1)};
    auto const h = handed_out({{"a", 1, 3}, {"b", 1, 3}, {"c", 1, 3}, {"d", 2, 3}});
    auto r = sb::k1_permits_defined(audit, defs, h.events);
    EXPECT_TRUE(mentions(r, "forgotten at db time 5000 while 2 permit(s) were live")) << r.summary();
    EXPECT_TRUE(mentions(r, "the N in force then was 1 (slots 0 .. 0)")) << r.summary();
    EXPECT_TRUE(mentions(r, "made 3 permits live, above the N of 1")) << r.summary();
    EXPECT_TRUE(mentions(r, "a grant under a superseded N")) << r.summary();
}

TEST(K1PermitsDefs, AGrantWhileNoNIsStoredIsJudgedByTheNItsConfirmationFound) {
    std::vector<sb::audit_row> defs{define(1, 2, 0), define(2, 2, 5, "forget")};
    std::vector<sb::audit_row> const grant{row(1, "grant", "a", 1, 6, 100, slot0)};
    // Handed out, and no N stored while it lived: reported.
    auto const a = handed_out({{"a", 1, 2}});
    EXPECT_TRUE(mentions(sb::k1_permits_defined(grant, defs, a.events), "while no number of permits was stored"));
    // Granted before the forget: fine.
    EXPECT_TRUE(sb::k1_permits_defined({row(1, "grant", "a", 1, 4, 5, slot0)}, defs, a.events).ok());
    // Granted at the forget's own db time (SQLite's clock ticks in milliseconds) and confirmed by storing N = 2
    // at that time too: after the forget, which saw no permit. Granted a tick before it and still live: reported.
    {
        auto tie_defs = defs;
        tie_defs.push_back(define(3, 2, 5));
        EXPECT_TRUE(sb::k1_permits_defined({row(1, "grant", "a", 1, 5, 100, slot0)}, tie_defs, a.events).ok());
        EXPECT_TRUE(mentions(sb::k1_permits_defined({row(1, "grant", "a", 1, 4, 100, slot0)}, tie_defs, a.events),
                             "forgotten at db time 5000 while 1 permit(s) were live"));
    }
    // Never handed out (its confirmation gave it back): no permit, nothing to judge.
    auto r = sb::k1_permits_defined(grant, defs, {});
    EXPECT_TRUE(r.ok()) << r.summary();
    EXPECT_EQ(r.counts["given_back"], 1);
    // Confirmed by storing its own N right after its row was written: a permit under N = 2.
    defs.push_back(define(3, 2, 7));
    r = sb::k1_permits_defined(grant, defs, a.events);
    EXPECT_TRUE(r.ok()) << r.summary();
    // Another caller stored N = 1 first, and the confirmation handed it out anyway: a superseded N.
    defs.back() = define(3, 1, 7);
    EXPECT_TRUE(mentions(sb::k1_permits_defined(grant, defs, a.events), "a grant under a superseded N"));
}

TEST_F(RunDirectory, CheckDirectoryReplaysTheDefinitions) {
    // A run whose N changed: final.json says so, definitions.jsonl holds the audit of the stored N.
    {
        std::ofstream a(dir_ / "audit.jsonl");
        for (auto const& r : {row(1, "grant", "a", 1, 1, 100, slot0), row(2, "grant", "b", 1, 7, 100, slot1)})
            a << sb::to_json(r).dump() << '\n';
        std::ofstream d(dir_ / "definitions.jsonl");
        for (auto const& r : {define(1, 2, 0), define(2, 2, 5, "forget"), define(3, 1, 6)})
            d << sb::to_json(r).dump() << '\n';
        std::ofstream hist(dir_ / "history.jsonl");
        for (auto const& e : handed_out({{"a", 1, 2}, {"b", 1, 1}}).events) hist << sb::to_json(e).dump() << '\n';
    }
    sb::run_final f;
    f.asserted = std::vector<std::string>{"K7"};
    sb::coordination_checks c{"semaphore", 2};
    c.definitions = true;
    f.coordination = sb::to_json(c);
    std::ofstream(dir_ / "final.json") << sb::to_json(f).dump(2);
    std::map<std::string, sb::report> by_name;
    for (auto const& r : sb::check_directory(dir_.string())) by_name.emplace(r.checker, r);
    ASSERT_TRUE(by_name.contains("K1-permits-defs"));
    EXPECT_FALSE(by_name.contains("K1-permits"));
    EXPECT_TRUE(mentions(by_name.at("K1-permits-defs"), "while 1 permit(s) were live"))
        << by_name.at("K1-permits-defs").summary();
    EXPECT_EQ(run_tool(dir_), 1);
}

// ---- K-rw-forced (issue 38: a writer's lease force-released while it waited for readers) -----------------------

TEST(KRwForced, ALeaseForceReleasedAfterItWasHandedOutPasses) {
    // w's acquire returned at 31; the operator force-released X (token 3) at 40: a loss after the grant.
    history h;
    h.call("w", "acquire", "ok", "X", 19, 31, 3);
    h.call("op", "force_release", "ok", "X", 39, 41, 3).value = 1;
    auto r = sb::k_rw_forced({row(1, "grant", "w", 3, 20, 120, "X"), row(2, "delete", "w", 3, 40, 120, "X")}, h.events,
                             {}, 0, 1);
    EXPECT_TRUE(r.ok()) << r.summary();
    EXPECT_EQ(r.counts["force_released_writers"], 1);
}

TEST(KRwForced, ALeaseHandedOutAfterItsForceReleaseIsReported) {
    // X (token 3) force-released at 25 while w waited for its readers; w's acquire still returned it at 31.
    history h;
    h.call("w", "acquire", "ok", "X", 19, 31, 3);
    h.call("op", "force_release", "ok", "X", 24, 26, 3).value = 1;
    std::vector<sb::audit_row> audit{row(1, "grant", "w", 3, 20, 120, "X"), row(2, "delete", "w", 3, 25, 120, "X")};
    auto r = sb::k_rw_forced(audit, h.events, {}, 0, 1);
    EXPECT_TRUE(mentions(r, "already lost when handed out")) << r.summary();
    // A reader's grant (value 1) is no writer's; a stop of w's process between the delete and the return excuses it.
    EXPECT_TRUE(sb::k_rw_forced(audit, h.events,
                                {{"stop", "w", "start", 24 * ms, "SIGSTOP"}, {"stop", "w", "stop", 30 * ms, "SIGCONT"}},
                                0, 1)
                    .ok());
    h.events[1].value = 1;
    EXPECT_TRUE(sb::k_rw_forced(audit, h.events, {}, 0, 1).ok());
}

}  // namespace
