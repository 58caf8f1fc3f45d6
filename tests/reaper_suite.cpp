// sqlock tests — the reaper (issue 6), run on every engine:
//   Engines/Reaper.<Test>/<engine>     sqlock::reaper: what is purged and what never is
//   Engines/ReaperCli.<Test>/<engine>  the sqlock-reaper executable: logs, exit codes, signals
//   ReaperMajority.<Test>              sqlock-reaper over several databases (PostgreSQL, MariaDB, SQLite)
//   ReaperDuration.*                   the command-line duration parser (tools/duration.hpp)
//
// Each test has tables of its own (a random table_prefix, dropped afterwards), so
// a reaper with grace 0 never touches another suite's rows on a shared server.
// Rows are made expired without sleeping: inserted with raw SQL whose times are
// offsets from the database's now, or leased with a short TTL and no renewal.
// Nothing here asserts how fast something happened.
#include "fault_proxy.hpp"
#include "metrics_text.hpp"
#include "test_env.hpp"
#include "test_process.hpp"

#include "duration.hpp"  // tools/

#include <sqlock/sqlock.hpp>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <signal.h>
#include <sys/wait.h>

#include <array>
#include <atomic>
#include <cstring>
#include <fstream>
#include <latch>
#include <limits>
#include <mutex>
#include <regex>
#include <set>
#include <stop_token>
#include <thread>

namespace {

using namespace std::chrono_literals;
using namespace sqlock_test;
using sqlock::engine;
using sqlock::reap_result;
using sqlock::reaper;
using sqlock::reaper_options;
using std::chrono::microseconds;
using std::chrono::milliseconds;
using steady = std::chrono::steady_clock;

constexpr long long hour_us = 3600LL * 1000 * 1000;

/// The database's now plus `offset_us`, as SQL in the lock table's units.
std::string at_sql(engine e, long long offset_us) {
    auto off = std::to_string(offset_us);
    switch (e) {
        case engine::postgresql: return "clock_timestamp() + (" + off + " * interval '1 microsecond')";
        case engine::mysql: return "NOW(6) + INTERVAL " + off + " MICROSECOND";
        case engine::sqlite: {
            // Appended, not `"(" + db_now_us_expr(e)`: GCC 12 -O3 flags operator+(const char*,
            // string&&) with a false -Wrestrict (GCC bug 105329).
            std::string expr = "(";
            expr += db_now_us_expr(e);
            return expr + " + (" + off + "))";
        }
    }
    return {};
}

/// The engine_fixture with a store on tables of this test's own (random table
/// prefix), and helpers to put rows in with database-relative times.
class ReaperTest : public engine_fixture {
protected:
    void open_store() override {
        tables_ = "sqlr_" + random_hex(10);
        db_.emplace(url_, sqlock::store_options{.create_schema = true, .table_prefix = tables_});
    }

    void TearDown() override {
        db_.reset();
        if (!raw_ || e_ == engine::sqlite) return;
        try {
            std::vector<std::string> names(64);
            std::string const like = tables_ + "\\_%";
            if (e_ == engine::postgresql)
                *raw_ << "SELECT tablename FROM pg_tables WHERE schemaname = current_schema() AND tablename LIKE :p",
                    soci::into(names), soci::use(like);
            else
                *raw_ << "SELECT table_name FROM information_schema.tables WHERE table_schema = DATABASE() AND "
                         "table_name LIKE :p",
                    soci::into(names), soci::use(like);
            for (auto const& t : names) *raw_ << "DROP TABLE IF EXISTS " + t;
        } catch (std::exception const& e) {
            ADD_FAILURE() << "could not drop the test tables " << tables_ << "_*: " << e.what();
        }
    }

    std::string locks() const { return tables_ + "_locks"; }

    /// The database's now plus `offset_us`, as SQL in the lock table's units.
    std::string at(long long offset_us) const { return at_sql(e_, offset_us); }

    /// Insert `count` rows `<name_prefix>0..` created `created_us` and expiring
    /// `expires_us` from the database's now (negative: in the past). Each row
    /// expires 1 µs later than the one before.
    void insert_rows(std::string const& name_prefix, int count, long long created_us, long long expires_us) {
        soci::transaction tx(*raw_);
        for (int start = 0; start < count; start += 500) {
            std::string sql = "INSERT INTO " + locks() + " (name, owner, token, holds, created_at, expires_at) VALUES ";
            for (int i = start; i < std::min(count, start + 500); ++i) {
                if (i != start) sql += ",";
                sql += "('" + name_prefix + std::to_string(i) + "', 'test-owner', " + std::to_string(i + 1) + ", 1, " +
                       at(created_us) + ", " + at(expires_us + i) + ")";
            }
            *raw_ << sql;
        }
        tx.commit();
    }
    void insert_expired(std::string const& name_prefix, int count, long long ago_us = hour_us) {
        insert_rows(name_prefix, count, -ago_us - hour_us, -ago_us);
    }
    void insert_live(std::string const& name_prefix, int count) { insert_rows(name_prefix, count, 0, hour_us); }

    long long count(std::string const& where = "1 = 1") {
        long long n = 0;
        *raw_ << "SELECT COUNT(*) FROM " + locks() + " WHERE " + where, soci::into(n);
        return n;
    }
    long long count_prefix(std::string const& name_prefix) {
        return count_rows_with_prefix(*raw_, name_prefix, tables_);
    }
    bool exists(std::string const& name) { return count_rows_named(*raw_, name, tables_) == 1; }
    std::string tokens() const { return tables_ + "_tokens"; }
    /// The floor of the tokens table (its row named ''), if any.
    std::optional<long long> floor_token() { return read_counter(*raw_, "", tables_); }
    /// Counters in the tokens table whose name starts with `name_prefix`.
    long long count_counters(std::string const& name_prefix) {
        long long n = 0;
        *raw_ << "SELECT COUNT(*) FROM " + tokens() + " WHERE substr(name, 1, " + std::to_string(name_prefix.size()) +
                     ") = :p",
            soci::into(n), soci::use(name_prefix);
        return n;
    }

    /// Makes the counters named `<name_prefix>...` look last drawn 3 hours ago (their token, a database
    /// clock reading in µs when a counter starts, less 3 h), so that the smallest horizon purges them.
    void age_counters(std::string const& name_prefix) {
        *raw_ << "UPDATE " + tokens() + " SET token = token - " + std::to_string(3 * hour_us) +
                     " WHERE substr(name, 1, " + std::to_string(name_prefix.size()) + ") = :p",
            soci::use(name_prefix);
    }

    /// The earliest expires_at among the rows named `<name_prefix>...`, as a db_time.
    sqlock::db_time oldest(std::string const& name_prefix) {
        long long us = 0;
        *raw_ << "SELECT MIN(" + col_us_expr(e_, "expires_at") + ") FROM " + locks() + " WHERE substr(name, 1, " +
                     std::to_string(name_prefix.size()) + ") = :p",
            soci::into(us), soci::use(name_prefix);
        return sqlock::db_time(microseconds(us));
    }

    sqlock::locker make_locker(sqlock::locker_options o = {}) { return sqlock::table_locker(*db_, std::move(o)); }

    std::string tables_;
};

class Reaper : public ReaperTest {};

// ============================================================ what is purged

TEST_P(Reaper, PurgesExpiredRowsAndKeepsLiveOnes) {
    insert_expired("old/", 50);
    insert_live("live/", 10);
    auto L = make_locker({.ttl = 30s});
    auto held = L.try_acquire("held");
    ASSERT_TRUE(held);
    auto const expected_oldest = oldest("old/");

    reaper R(*db_);
    auto r = R.reap_once();
    EXPECT_EQ(r.purged, 50u);
    EXPECT_EQ(r.live_purged, 0u);
    EXPECT_EQ(r.batches, 1u);
    EXPECT_TRUE(r.complete);
    EXPECT_FALSE(r.stopped);
    EXPECT_FALSE(r.dry_run);
    ASSERT_TRUE(r.oldest_expiry);
    EXPECT_EQ(r.oldest_expiry->time_since_epoch().count(), expected_oldest.time_since_epoch().count());

    EXPECT_EQ(count_prefix("old/"), 0);
    EXPECT_EQ(count_prefix("live/"), 10);
    EXPECT_TRUE(exists("held"));
    EXPECT_NO_THROW(held->renew());

    // A clean table: one batch, nothing purged, no oldest expiry.
    auto again = R.reap_once();
    EXPECT_EQ(again.purged, 0u);
    EXPECT_EQ(again.batches, 1u);
    EXPECT_TRUE(again.complete);
    EXPECT_FALSE(again.oldest_expiry);
}

TEST_P(Reaper, RowLocksAreLeftAloneAndLongOnesReported) {
    // Row locks are released by their transactions, never by the reaper; where
    // the engine can tell (PostgreSQL), one held longer than the threshold is
    // reported as a warning.
    auto rows = sqlock::row_locker(*db_, {.ttl = 30s});
    auto held = rows.try_acquire("row-held");
    ASSERT_TRUE(held);
    std::this_thread::sleep_for(1200ms);  // let the transaction age past the 1 s threshold

    std::vector<std::string> warnings;
    reaper R(*db_, {.grace = 0ms, .row_lock_warning = 1s, .on_warning = [&](std::string_view m) {
                        warnings.emplace_back(m);
                    }});
    if (e_ == engine::sqlite) {
        // A SQLite "row lock" holds the whole file's write lock: no reaper (no
        // writer at all) gets through until it is released, as documented.
        sqlock::store quick(url_, {.table_prefix = tables_, .lock_wait_timeout = 100ms});
        EXPECT_THROW((void)reaper(quick, {.grace = 0ms}).reap_once(), sqlock::backend_unavailable);
        EXPECT_NO_THROW(held->release());
        EXPECT_EQ(R.reap_once().long_row_locks, 0u);
        EXPECT_TRUE(warnings.empty());
        return;
    }
    auto r = R.reap_once();
    if (e_ == engine::postgresql) {
        EXPECT_EQ(r.long_row_locks, 1u);
        ASSERT_EQ(warnings.size(), 1u);
        EXPECT_NE(warnings[0].find("row lock"), std::string::npos) << warnings[0];
        EXPECT_NE(warnings[0].find("pg_terminate_backend"), std::string::npos) << warnings[0];
    } else {
        EXPECT_EQ(r.long_row_locks, 0u);  // the engine cannot tell: nothing reported
        EXPECT_TRUE(warnings.empty());
    }
    EXPECT_EQ(held->state(), sqlock::lease_state::held);
    EXPECT_NO_THROW(held->release());
    // With the row lock gone there is nothing to report.
    warnings.clear();
    EXPECT_EQ(R.reap_once().long_row_locks, 0u);
    EXPECT_TRUE(warnings.empty());
}

TEST_P(Reaper, ExpiredLeaseIsPurgedAndTokensKeepIncreasing) {
    auto L = make_locker({.ttl = 50ms, .auto_renew = false});
    auto lease = L.try_acquire("short");
    ASSERT_TRUE(lease);
    auto const first = lease->token();

    // Let a little database time pass: the row is purged once it has expired.
    reaper R(*db_, {.grace = 0ms});
    std::uint64_t purged = 0;
    EXPECT_TRUE(eventually([&] { return (purged += R.reap_once().purged) > 0; }));
    EXPECT_EQ(purged, 1u);
    EXPECT_FALSE(exists("short"));
    EXPECT_THROW(lease->renew(), sqlock::lease_lost);

    // The token counter is not the lock row: the next holder still gets a higher token.
    auto next = L.try_acquire("short");
    ASSERT_TRUE(next);
    EXPECT_GT(next->token(), first);
}

TEST_P(Reaper, GraceIsHonoured) {
    insert_expired("recent/", 5, 10LL * 1000 * 1000);  // expired 10 s ago
    insert_expired("old/", 7, 2 * hour_us);            // expired 2 h ago

    auto r = reaper(*db_, {.grace = 1h}).reap_once();  // only rows expired more than an hour ago
    EXPECT_EQ(r.purged, 7u);
    EXPECT_EQ(count_prefix("recent/"), 5);
    EXPECT_EQ(count_prefix("old/"), 0);

    r = reaper(*db_, {.grace = 1min}).reap_once();
    EXPECT_EQ(r.purged, 0u);
    EXPECT_EQ(count_prefix("recent/"), 5);

    r = reaper(*db_, {.grace = 5s}).reap_once();  // the default
    EXPECT_EQ(r.purged, 5u);
    EXPECT_EQ(count(), 0);
}

TEST_P(Reaper, RowsExpiringWithinTheGraceAreKept) {
    insert_rows("fresh/", 4, -2 * hour_us, -1000);  // expired a millisecond ago
    auto r = reaper(*db_, {.grace = 1h}).reap_once();
    EXPECT_EQ(r.purged, 0u);
    EXPECT_EQ(count_prefix("fresh/"), 4);
}

TEST_P(Reaper, PurgesInBatches) {
    // No lease is live here: without idle_batch_size the pass would purge in batches of 10000.
    insert_expired("a/", 2500);
    reaper R(*db_, {.batch_size = 1000, .idle_batch_size = std::nullopt});
    auto r = R.reap_once();
    EXPECT_EQ(r.purged, 2500u);
    EXPECT_EQ(r.batches, 3u);  // 1000, 1000, 500
    EXPECT_TRUE(r.complete);
    EXPECT_EQ(count(), 0);

    insert_expired("b/", 2000);
    r = R.reap_once();
    EXPECT_EQ(r.purged, 2000u);
    EXPECT_EQ(r.batches, 3u);  // 1000, 1000, then an empty batch that proves the table clean
    EXPECT_EQ(count(), 0);

    insert_expired("c/", 5);
    r = reaper(*db_, {.batch_size = 1, .idle_batch_size = std::nullopt}).reap_once();
    EXPECT_EQ(r.purged, 5u);
    EXPECT_EQ(r.batches, 6u);
}

TEST_P(Reaper, BatchesTakeTheOldestFirst) {
    insert_expired("newer/", 10, hour_us);
    insert_expired("older/", 10, 3 * hour_us);
    auto const older = oldest("older/");
    // The first batch is the ten oldest rows.
    auto r = reaper(*db_, {.batch_size = 10, .dry_run = true}).reap_once();
    EXPECT_EQ(r.purged, 10u);
    ASSERT_TRUE(r.oldest_expiry);
    EXPECT_EQ(r.oldest_expiry->time_since_epoch().count(), older.time_since_epoch().count());
    r = reaper(*db_, {.batch_size = 10, .idle_batch_size = std::nullopt}).reap_once();
    EXPECT_EQ(r.purged, 20u);
    EXPECT_EQ(r.batches, 3u);
    ASSERT_TRUE(r.oldest_expiry);
    EXPECT_EQ(r.oldest_expiry->time_since_epoch().count(), older.time_since_epoch().count());
    EXPECT_EQ(count(), 0);
}

// ============================================================ pacing (issue 40)

TEST_P(Reaper, AnIdleTableIsPurgedInLargerBatchesAndALiveLeaseBringsBackTheSmallOnes) {
    insert_expired("idle/", 2500);
    reaper R(*db_, {.batch_size = 100, .idle_batch_size = 1000});
    auto r = R.reap_once();
    EXPECT_EQ(r.purged, 2500u);
    EXPECT_EQ(r.batches, 3u) << "no lease was live: 1000, 1000, 500";
    EXPECT_EQ(r.idle_batches, 3u + r.token_batches) << r.token_batches << " token batches";
    EXPECT_EQ(r.paused.count(), 0) << "a pass with no live lease paused";
    EXPECT_EQ(count(), 0);

    // One live lease: every batch is batch_size again, and the duty cycle (0.5 by default) pauses.
    auto held = make_locker({.ttl = 60s, .auto_renew = false}).try_acquire("live");
    ASSERT_TRUE(held);
    insert_expired("busy/", 250);
    r = R.reap_once();
    EXPECT_EQ(r.purged, 250u);
    EXPECT_EQ(r.batches, 3u) << "a live lease: 100, 100, 50";
    EXPECT_EQ(r.idle_batches, 0u);
    EXPECT_GT(r.paused.count(), 0) << "two full batches beside a live lease and no pause";
    EXPECT_LE(r.paused, r.duration);
    EXPECT_TRUE(exists("live"));
    EXPECT_NO_THROW(held->renew());

    // An idle batch size below batch_size is raised to it, never the other way round.
    held->release();
    insert_expired("small/", 250);
    r = reaper(*db_, {.batch_size = 100, .idle_batch_size = 10}).reap_once();
    EXPECT_EQ(r.batches, 3u) << "idle batches smaller than batch_size";
    EXPECT_EQ(r.idle_batches, 3u + r.token_batches) << r.token_batches << " token batches, " << r.tokens_purged;
}

TEST_P(Reaper, ADutyCycleOfOneNeverPausesAndAnExpiredLeaseIsNotLive) {
    auto held = make_locker({.ttl = 60s, .auto_renew = false}).try_acquire("live");
    ASSERT_TRUE(held);
    insert_expired("a/", 250);
    auto r = reaper(*db_, {.batch_size = 100, .duty_cycle = 1.0}).reap_once();
    EXPECT_EQ(r.purged, 250u);
    EXPECT_EQ(r.batches, 3u);
    EXPECT_EQ(r.paused.count(), 0) << "duty_cycle 1 paused";

    // Expired rows within the grace are not live: the table counts as idle.
    held->release();
    insert_rows("recent/", 3, -2 * hour_us, -1000);  // expired a millisecond ago, kept by the grace
    insert_expired("b/", 250, 3 * hour_us);
    r = reaper(*db_, {.grace = 1h, .batch_size = 100, .idle_batch_size = 1000, .token_horizon = std::nullopt})
            .reap_once();
    EXPECT_EQ(r.batches, 1u) << "rows expired within the grace counted as live leases";
    EXPECT_EQ(r.idle_batches, 1u);
    EXPECT_EQ(count_prefix("recent/"), 3);
}

TEST_P(Reaper, AStopEndsADutyCyclePause) {
    // duty_cycle 0.01: after its first batch the pass would pause 99 times that batch's time. A stop
    // requested as soon as the batch has committed must end the pause, not wait it out.
    int const batch = 20000;
    insert_expired("old/", 2 * batch);
    auto held = make_locker({.ttl = 300s, .auto_renew = false}).try_acquire("live");
    ASSERT_TRUE(held);
    std::stop_source stop;
    reaper R(*db_, {.batch_size = static_cast<std::size_t>(batch), .duty_cycle = 0.01});
    std::jthread stopper([&] {
        auto watch = raw_session(e_, url_);
        auto rows = [&] {
            long long n = 0;
            *watch << "SELECT COUNT(*) FROM " + locks(), soci::into(n);
            return n;
        };
        eventually([&] { return rows() <= batch + 1; }, 120s);
        stop.request_stop();
    });
    auto r = R.reap_once(stop.get_token());
    stopper.join();
    EXPECT_TRUE(r.stopped);
    EXPECT_EQ(r.batches, 1u);
    EXPECT_EQ(r.purged, static_cast<std::uint64_t>(batch));
    auto const worked = r.duration - r.paused;
    EXPECT_LT(r.paused, worked * 50) << "the pause ran past the stop request: it lasted " << r.paused.count()
                                     << " us after " << worked.count() << " us of work (the full pause is 99x)";
    EXPECT_EQ(count_prefix("old/"), batch);
}

TEST_P(Reaper, MaxAgePurgesLiveRowsOnlyWhenAskedAndSaysSo) {
    insert_rows("stuck/", 6, -3 * hour_us, hour_us);  // created 3 h ago, renewed forever: live
    insert_expired("dead/", 4);
    auto L = make_locker({.ttl = 30s, .auto_renew = false});
    auto young = L.try_acquire("young");  // created just now: too young for max_age
    auto old = L.try_acquire("old-lease");
    ASSERT_TRUE(young && old);
    *raw_ << "UPDATE " + locks() + " SET created_at = " + at(-3 * hour_us) + " WHERE name = 'old-lease'";

    // Without max_age, live rows are never purged.
    auto r = reaper(*db_).reap_once();
    EXPECT_EQ(r.purged, 4u);
    EXPECT_EQ(r.live_purged, 0u);
    EXPECT_EQ(count_prefix("stuck/"), 6);

    insert_expired("dead/", 4);
    std::vector<std::string> warnings;
    reaper R(*db_, {.max_age = 1h, .on_warning = [&](std::string_view m) { warnings.emplace_back(m); }});
    r = R.reap_once();
    EXPECT_EQ(r.purged, 4u + 6u + 1u);
    EXPECT_EQ(r.live_purged, 7u);
    EXPECT_EQ(count_prefix("stuck/"), 0);
    EXPECT_FALSE(exists("old-lease"));
    EXPECT_TRUE(exists("young"));
    ASSERT_EQ(warnings.size(), 1u) << "one loud warning per pass that purged live rows";
    EXPECT_NE(warnings[0].find("WARNING"), std::string::npos) << warnings[0];
    EXPECT_NE(warnings[0].find("7 live"), std::string::npos) << warnings[0];
    EXPECT_EQ(warnings[0].find(":sqlock@"), std::string::npos) << "a password leaked: " << warnings[0];

    // The holder of the purged live row finds out on its next renewal.
    EXPECT_THROW(old->renew(), sqlock::lease_lost);
    EXPECT_NO_THROW(young->renew());

    // A pass with nothing live to purge says nothing.
    r = R.reap_once();
    EXPECT_EQ(r.live_purged, 0u);
    EXPECT_EQ(warnings.size(), 1u);
}

TEST_P(Reaper, DryRunCountsAndDeletesNothing) {
    insert_expired("old/", 30);
    insert_live("live/", 3);
    auto const expected_oldest = oldest("old/");

    auto r = reaper(*db_, {.dry_run = true}).reap_once();
    EXPECT_TRUE(r.dry_run);
    EXPECT_EQ(r.purged, 30u);
    EXPECT_EQ(r.batches, 1u);
    EXPECT_TRUE(r.complete);
    ASSERT_TRUE(r.oldest_expiry);
    EXPECT_EQ(r.oldest_expiry->time_since_epoch().count(), expected_oldest.time_since_epoch().count());
    EXPECT_EQ(count(), 33);

    // A dry run looks at one batch: a full one says there may be more.
    r = reaper(*db_, {.batch_size = 10, .dry_run = true}).reap_once();
    EXPECT_EQ(r.purged, 10u);
    EXPECT_EQ(r.batches, 1u);
    EXPECT_FALSE(r.complete);
    EXPECT_EQ(count(), 33);

    // Live rows that max_age would purge are counted and warned about, and kept.
    std::vector<std::string> warnings;
    insert_rows("stuck/", 2, -3 * hour_us, hour_us);
    r = reaper(*db_,
               {.max_age = 1h, .dry_run = true, .on_warning = [&](std::string_view m) { warnings.emplace_back(m); }})
            .reap_once();
    EXPECT_EQ(r.purged, 32u);
    EXPECT_EQ(r.live_purged, 2u);
    EXPECT_EQ(count(), 35);
    ASSERT_EQ(warnings.size(), 1u);
    EXPECT_NE(warnings[0].find("would"), std::string::npos) << warnings[0];
}

TEST_P(Reaper, BadOptionsAreUsageErrorsAndChangeNothing) {
    insert_expired("old/", 3);
    auto bad = [&](reaper_options o) {
        EXPECT_THROW(sqlock::validate(o), sqlock::usage_error);
        EXPECT_THROW({ reaper r(*db_, o); }, sqlock::usage_error);
    };
    bad({.grace = -1ms});
    bad({.grace = std::chrono::days(8)});
    bad({.batch_size = 0});
    bad({.batch_size = 100001});
    bad({.idle_batch_size = 0});
    bad({.idle_batch_size = 100001});
    bad({.duty_cycle = 0.0});
    bad({.duty_cycle = 0.009});
    bad({.duty_cycle = 1.01});
    bad({.duty_cycle = -0.5});
    bad({.duty_cycle = std::numeric_limits<double>::quiet_NaN()});
    bad({.max_age = 0ms});
    bad({.max_age = 999ms});
    bad({.max_age = std::chrono::days(3651)});
    bad({.token_horizon = -1ms});
    bad({.token_horizon = 0ms});  // issue 18: shorter than a statement, a purge repeats tokens
    bad({.token_horizon = 1ms});
    bad({.token_horizon = std::chrono::duration_cast<milliseconds>(sqlock::min_token_horizon) - 1ms});
    bad({.token_horizon = std::chrono::days(3651)});
    EXPECT_EQ(count(), 3);

    EXPECT_NO_THROW(sqlock::validate({.grace = 0ms, .batch_size = 1, .max_age = 1s}));
    EXPECT_NO_THROW(sqlock::validate({.grace = std::chrono::days(7), .batch_size = 100000}));
    EXPECT_NO_THROW(sqlock::validate({.token_horizon = sqlock::min_token_horizon}));
    EXPECT_NO_THROW(sqlock::validate({.idle_batch_size = 1, .duty_cycle = 0.01}));
    EXPECT_NO_THROW(sqlock::validate({.idle_batch_size = 100000, .duty_cycle = 1.0}));
    EXPECT_NO_THROW(sqlock::validate({.idle_batch_size = std::nullopt}));
    try {
        sqlock::validate({.duty_cycle = 2.0});
        ADD_FAILURE() << "duty_cycle 2 was accepted";
    } catch (sqlock::usage_error const& e) {
        EXPECT_NE(std::string(e.what()).find("0.01 .. 1"), std::string::npos)
            << "the error does not name the range: " << e.what();
    }
    EXPECT_EQ(sqlock::min_token_horizon, std::chrono::hours(2));
    try {
        sqlock::validate({.token_horizon = 1ms});
    } catch (sqlock::usage_error const& e) {
        EXPECT_NE(std::string(e.what()).find("2 h"), std::string::npos)
            << "the error does not name the minimum: " << e.what();
    }
    EXPECT_NO_THROW(sqlock::validate({.token_horizon = std::chrono::days(3650)}));
    EXPECT_NO_THROW(sqlock::validate({.token_horizon = std::nullopt}));
    reaper R(*db_, {.grace = 2s, .batch_size = 7});
    EXPECT_EQ(R.options().grace, 2s);
    EXPECT_EQ(R.options().batch_size, 7u);
    EXPECT_FALSE(R.options().max_age);
    EXPECT_EQ(R.options().token_horizon, std::chrono::milliseconds(std::chrono::hours(24)));
}

// ============================================================ fencing-token counters

TEST_P(Reaper, PurgesTokenCountersOfNamesNobodyAsksForAgain) {
    // One counter per distinct name (refund:<order>): the table must not keep them forever.
    auto L = make_locker({.ttl = 30s, .auto_renew = false});
    int const names = 40;
    for (int i = 0; i < names; ++i) {
        auto l = L.try_acquire("refund:" + std::to_string(i));
        ASSERT_TRUE(l);
        l->release();
    }
    EXPECT_EQ(count_counters("refund:"), names);
    EXPECT_EQ(reaper(*db_, {.grace = 0ms, .token_horizon = sqlock::min_token_horizon}).reap_once().tokens_purged, 0u)
        << "counters younger than the horizon were purged";

    age_counters("refund:");
    auto const purged =
        reaper(*db_, {.grace = 0ms, .token_horizon = sqlock::min_token_horizon}).reap_once().tokens_purged;
    EXPECT_EQ(purged, static_cast<std::uint64_t>(names));
    EXPECT_EQ(count_counters("refund:"), 0) << "the counters of released names are still in " << tables_ << "_tokens";
}

TEST_P(Reaper, TokensKeepIncreasingAcrossAPurgedCounter) {
    auto L = make_locker({.ttl = 30s, .auto_renew = false});
    std::string const name = "account:7";
    std::vector<std::int64_t> seen;
    for (int i = 0; i < 5; ++i) {
        auto l = L.try_acquire(name);
        ASSERT_TRUE(l);
        if (!seen.empty()) {
            EXPECT_GT(l->token(), seen.back()) << "tokens of one name must increase";
        }
        seen.push_back(l->token());
        l->release();
    }
    age_counters(name);  // drawn 3 h ago, as far as the horizon can tell
    reaper R(*db_, {.token_horizon = sqlock::min_token_horizon});
    (void)R.reap_once();
    ASSERT_EQ(count_counters(name), 0) << "the counter was never purged";
    ASSERT_TRUE(floor_token());
    EXPECT_GE(*floor_token(), seen.back() - 3 * hour_us) << "the floor is below a purged counter";

    auto again = L.try_acquire(name);
    ASSERT_TRUE(again);
    EXPECT_GT(again->token(), *std::max_element(seen.begin(), seen.end()))
        << "a name whose counter was purged repeated a token";
}

TEST_P(Reaper, TakeoverAfterAPurgedCounterGetsAGreaterToken) {
    // A live lock row outlives its counter (purged by the horizon); the holder
    // dies, the row expires and is taken over: the new holder's token is greater.
    auto L = make_locker({.ttl = 30s, .auto_renew = false});
    std::string const name = "report:nightly";
    auto held = L.try_acquire(name);
    ASSERT_TRUE(held);
    auto const token = held->token();
    reaper R(*db_, {.token_horizon = sqlock::min_token_horizon});
    age_counters(name);
    (void)R.reap_once();
    ASSERT_EQ(count_counters(name), 0);
    EXPECT_TRUE(exists(name)) << "a live lock row was purged";
    auto other = make_locker({.ttl = 30s});
    EXPECT_FALSE(other.try_acquire(name)) << "a live lock was granted twice";  // draws a counter again
    age_counters(name);
    (void)R.reap_once();
    ASSERT_EQ(count_counters(name), 0);
    backdate_row(*raw_, e_, name, tables_);  // the holder is gone: its row expired an hour ago
    auto taken = other.try_acquire(name);
    ASSERT_TRUE(taken);
    EXPECT_GT(taken->token(), token);
    EXPECT_THROW(held->renew(), sqlock::lease_lost);
}

TEST_P(Reaper, TheFloorIsNeverPurgedAndOnlyRises) {
    // Counters an older sqlock left behind start at 1: any horizon purges them.
    *raw_ << "INSERT INTO " + tokens() + " (name, token) VALUES ('legacy:a', 5), ('legacy:b', 900), ('legacy:c', 40)";
    auto r = reaper(*db_, {.token_horizon = sqlock::min_token_horizon}).reap_once();
    EXPECT_EQ(r.tokens_purged, 3u);
    EXPECT_EQ(r.token_batches, 1u);
    EXPECT_EQ(count_counters("legacy:"), 0);
    ASSERT_TRUE(floor_token());
    EXPECT_EQ(*floor_token(), 900);

    // A lower batch later does not lower the floor; the floor row itself is never a candidate.
    *raw_ << "INSERT INTO " + tokens() + " (name, token) VALUES ('legacy:d', 7)";
    r = reaper(*db_, {.token_horizon = sqlock::min_token_horizon}).reap_once();
    EXPECT_EQ(r.tokens_purged, 1u);
    EXPECT_EQ(*floor_token(), 900);
    for (int i = 0; i < 3; ++i)
        EXPECT_EQ(reaper(*db_, {.token_horizon = sqlock::min_token_horizon}).reap_once().tokens_purged, 0u);
    ASSERT_TRUE(floor_token()) << "the floor row was purged";
    EXPECT_EQ(*floor_token(), 900);

    // A new counter starts above the floor and at the database's clock.
    auto const before = db_now_us(*raw_, e_);
    auto l = make_locker().try_acquire("legacy:a");
    ASSERT_TRUE(l);
    EXPECT_GT(l->token(), 900);
    EXPECT_GE(l->token(), before - 1000000) << "a new counter does not start at the database's clock";

    // Batches: the highest token of every batch raises the floor.
    std::string sql = "INSERT INTO " + tokens() + " (name, token) VALUES ";
    for (int i = 0; i < 25; ++i)
        sql += std::string(i ? "," : "") + "('old:" + std::to_string(i) + "', " + std::to_string(1000 + i) + ")";
    *raw_ << sql;
    r = reaper(*db_, {.batch_size = 10, .idle_batch_size = std::nullopt, .token_horizon = sqlock::min_token_horizon})
            .reap_once();
    EXPECT_EQ(r.tokens_purged, 25u);
    EXPECT_EQ(r.token_batches, 3u);
    EXPECT_TRUE(r.complete);
    EXPECT_EQ(*floor_token(), 1024);
    EXPECT_EQ(count_counters("legacy:a"), 1) << "a counter younger than the horizon was purged";
}

TEST_P(Reaper, TokenPurgeDryRunDeletesNothingAndNoHorizonKeepsAll) {
    *raw_ << "INSERT INTO " + tokens() + " (name, token) VALUES ('legacy:a', 5), ('legacy:b', 6), ('legacy:c', 7)";
    auto r = reaper(*db_, {.token_horizon = sqlock::min_token_horizon, .dry_run = true}).reap_once();
    EXPECT_EQ(r.tokens_purged, 3u);
    EXPECT_TRUE(r.complete);
    EXPECT_EQ(count_counters("legacy:"), 3);
    EXPECT_FALSE(floor_token()) << "a dry run raised the floor";

    r = reaper(*db_, {.batch_size = 2, .token_horizon = sqlock::min_token_horizon, .dry_run = true}).reap_once();
    EXPECT_EQ(r.tokens_purged, 2u);
    EXPECT_FALSE(r.complete) << "a full dry batch says there may be more";
    EXPECT_EQ(count_counters("legacy:"), 3);

    r = reaper(*db_, {.token_horizon = std::nullopt}).reap_once();
    EXPECT_EQ(r.tokens_purged, 0u);
    EXPECT_EQ(r.token_batches, 0u);
    EXPECT_EQ(count_counters("legacy:"), 3);
}

// ============================================================ stopping

TEST_P(Reaper, StopRequestedBeforehandRunsNoBatch) {
    insert_expired("old/", 5);
    std::stop_source stop;
    stop.request_stop();
    auto r = reaper(*db_).reap_once(stop.get_token());
    EXPECT_TRUE(r.stopped);
    EXPECT_FALSE(r.complete);
    EXPECT_EQ(r.batches, 0u);
    EXPECT_EQ(r.purged, 0u);
    EXPECT_EQ(count(), 5);
}

TEST_P(Reaper, StopEndsThePassBetweenBatches) {
    int const total = 20000;
    insert_expired("old/", total);
    std::stop_source stop;
    reaper R(*db_, {.batch_size = 2, .idle_batch_size = std::nullopt});
    std::jthread stopper([&] {
        // As soon as the pass has made progress, ask it to stop.
        auto watch = raw_session(e_, url_);
        auto rows = [&] {
            long long n = 0;
            *watch << "SELECT COUNT(*) FROM " + locks(), soci::into(n);
            return n;
        };
        eventually([&] { return rows() < total; }, 60s);
        stop.request_stop();
    });
    auto r = R.reap_once(stop.get_token());
    stopper.join();
    EXPECT_TRUE(r.stopped);
    EXPECT_FALSE(r.complete);
    EXPECT_GT(r.purged, 0u);
    EXPECT_LT(r.purged, static_cast<std::uint64_t>(total));
    EXPECT_EQ(r.batches * 2, r.purged);
    EXPECT_EQ(count() + static_cast<long long>(r.purged), total) << "every batch counted exactly what it deleted";
}

// ============================================================ concurrency

TEST_P(Reaper, TwoReapersOnOneDatabaseCountEachRowOnce) {
    auto log = watch_pg_log();
    if (should_stop()) return;
    // Two stores: two hosts as far as the database can tell.
    sqlock::store other(url_, {.table_prefix = tables_});
    for (int round = 0; round < 3; ++round) {
        int const total = 3000;
        insert_expired("r" + std::to_string(round) + "/", total);
        reaper A(*db_, {.batch_size = 100, .idle_batch_size = std::nullopt});
        reaper B(other, {.batch_size = 100, .idle_batch_size = std::nullopt});
        std::latch go(2);
        reap_result ra, rb;
        std::exception_ptr ea, eb;
        std::thread ta([&] {
            go.arrive_and_wait();
            try {
                ra = A.reap_once();
            } catch (...) {
                ea = std::current_exception();
            }
        });
        std::thread tb([&] {
            go.arrive_and_wait();
            try {
                rb = B.reap_once();
            } catch (...) {
                eb = std::current_exception();
            }
        });
        ta.join();
        tb.join();
        for (auto const& ep : {ea, eb}) {
            if (!ep) continue;
            try {
                std::rethrow_exception(ep);
            } catch (std::exception const& e) {
                ADD_FAILURE() << "a reaper failed: " << e.what();
            }
        }
        EXPECT_EQ(ra.purged + rb.purged, static_cast<std::uint64_t>(total)) << "round " << round;
        EXPECT_EQ(count(), 0) << "round " << round;
    }
    if (log) {
        auto const bad = log->offending({tables_});
        std::string all;
        for (auto const& b : bad) all += b + "\n";
        EXPECT_TRUE(bad.empty()) << "PostgreSQL logged errors about the lock table (deadlocks?):\n" << all;
    }
}

// One thread keeps renewing a short lease, another reaps with grace 0 in a loop
// (deleting freshly expired filler rows each time). The lease's row must never be
// deleted while it is live: whenever a renewal is refused, the row's absence is
// checked against what the client can prove, namely that the database set its
// expiry no earlier than (send time of the last successful renewal + ttl).
TEST_P(Reaper, RenewedLeaseIsNeverPurged) {
    auto const ttl = 200ms;
    auto L = make_locker({.ttl = ttl, .auto_renew = false});
    auto check = raw_session(e_, url_);
    std::atomic<bool> done{false};
    std::atomic<long> passes{0}, filler_purged{0};
    std::string reaper_error;

    std::thread reaping([&] {
        try {
            auto filler = raw_session(e_, url_);
            std::mt19937 pause{std::random_device{}()};
            reaper R(*db_, {.grace = 0ms, .batch_size = 50});
            for (int i = 0; !done.load(); ++i) {
                std::string sql =
                    "INSERT INTO " + locks() + " (name, owner, token, holds, created_at, expires_at) VALUES ";
                for (int k = 0; k < 5; ++k)
                    sql += std::string(k ? "," : "") + "('filler/" + std::to_string(i) + "/" + std::to_string(k) +
                           "', 'o', 1, 1, " + at(-1000) + ", " + at(-1) + ")";
                *filler << sql;
                filler_purged += static_cast<long>(R.reap_once().purged);
                ++passes;
                // SQLite's write lock is not fair: a writer in a tight loop starves a
                // renewer waiting in its busy handler. Leave it gaps to get in.
                std::this_thread::sleep_for(
                    microseconds(std::uniform_int_distribution<int>(0, e_ == engine::sqlite ? 20000 : 2000)(pause)));
            }
        } catch (std::exception const& e) {
            reaper_error = e.what();
        }
    });

    std::string const name = "hot";
    std::mt19937 rng{std::random_device{}()};
    std::vector<std::string> violations;
    long renewals = 0, inconclusive = 0;
    auto sent = steady::now();
    auto lease = L.acquire(name, 10s);
    auto last_ok = sent;
    auto const until = steady::now() + 2s;
    while (steady::now() < until && violations.empty()) {
        // Up to just short of the TTL: some renewals land a moment before the row expires.
        std::this_thread::sleep_for(milliseconds(std::uniform_int_distribution<int>(0, 190)(rng)));
        sent = steady::now();
        try {
            lease.renew();
            last_ok = sent;
            ++renewals;
            continue;
        } catch (sqlock::lease_lost const&) {
        } catch (sqlock::backend_unavailable const&) {  // in doubt, not refused
            ++inconclusive;
            continue;
        }
        auto row = read_row(*check, e_, name, tables_);
        auto checked = steady::now();
        bool gone = !row || row->token != lease.token();
        if (gone && checked + 2ms < last_ok + ttl)
            violations.push_back("the row of a lease renewed " +
                                 std::to_string(std::chrono::duration_cast<milliseconds>(checked - last_ok).count()) +
                                 " ms before (ttl " + std::to_string(ttl.count()) + " ms) was gone");
        else ++inconclusive;  // the renewer was starved past its TTL: a legitimate expiry
        sent = steady::now();
        lease = L.acquire(name, 10s);
        last_ok = sent;
    }
    done = true;
    reaping.join();
    RecordProperty("renewals", std::to_string(renewals));
    RecordProperty("reaper_passes", std::to_string(passes.load()));
    RecordProperty("filler_purged", std::to_string(filler_purged.load()));
    RecordProperty("inconclusive", std::to_string(inconclusive));
    EXPECT_EQ(reaper_error, "");
    EXPECT_TRUE(violations.empty()) << violations.front();
    EXPECT_GT(renewals, 0);
    EXPECT_GT(passes.load(), 0);
    EXPECT_GT(filler_purged.load(), 0) << "the reaper never deleted anything: the race was not exercised";
    EXPECT_LE(inconclusive, renewals) << "the renewer was starved most of the time: the test proved little";
}

INSTANTIATE_TEST_SUITE_P(Engines, Reaper, ::testing::Values(engine::postgresql, engine::mysql, engine::sqlite),
                         engine_param_name{});

// ============================================================ the executable

#ifdef SQLOCK_REAPER_BIN

/// sqlock-reaper (or `program`) run as a child process, stdout and stderr in files.
class child {
public:
    child(std::vector<std::string> args, fs::path const& dir, std::vector<std::string> env_extra = {},
          char const* program = SQLOCK_REAPER_BIN) {
        static std::atomic<int> serial{0};
        auto tag = std::to_string(serial++);
        out_ = dir / ("out" + tag);
        err_ = dir / ("err" + tag);
        args.insert(args.begin(), program);
        std::vector<std::string> env;
        for (char** e = environ; *e != nullptr; ++e)
            if (std::string_view(*e).rfind("SQLOCK_DB=", 0) != 0) env.emplace_back(*e);
        for (auto& e : env_extra) env.push_back(e);
        spawn_file_actions fa;
        fa.capture_to_files(out_, err_);
        pid_ = spawn_process(std::move(args), std::move(env), fa.get());
    }
    ~child() {
        if (pid_ > 0) {
            ::kill(pid_, SIGKILL);
            int st = 0;
            ::waitpid(pid_, &st, 0);
        }
    }
    child(child const&) = delete;
    child& operator=(child const&) = delete;

    void signal(int sig) { ::kill(pid_, sig); }

    /// The exit code, or -1 when it did not exit within `limit` (it is then killed).
    int wait(milliseconds limit = 60s) {
        int st = 0;
        bool exited = eventually([&] { return ::waitpid(pid_, &st, WNOHANG) == pid_; }, limit);
        if (!exited) {
            ::kill(pid_, SIGKILL);
            ::waitpid(pid_, &st, 0);
            pid_ = -1;
            return -1;
        }
        pid_ = -1;
        if (WIFEXITED(st)) return WEXITSTATUS(st);
        return 128 + WTERMSIG(st);
    }

    std::string out() const { return slurp(out_); }
    std::string err() const { return slurp(err_); }
    std::vector<std::string> out_lines() const { return lines(out()); }
    std::vector<std::string> err_lines() const { return lines(err()); }

private:
    static std::vector<std::string> lines(std::string const& text) {
        std::vector<std::string> v;
        std::istringstream in(text);
        for (std::string line; std::getline(in, line);) v.push_back(line);
        return v;
    }

    pid_t pid_ = -1;
    fs::path out_, err_;
};

class ReaperCli : public ReaperTest {
protected:
    /// Run to completion; returns the exit code.
    int run(std::vector<std::string> args, std::vector<std::string> env = {}) {
        last_.emplace(std::move(args), files_.path(), std::move(env));
        return last_->wait();
    }
    std::vector<std::string> with_db(std::vector<std::string> args) {
        args.insert(args.end(), {"--db", url_, "--table-prefix", tables_});
        return args;
    }
    /// A URL of this engine that nothing answers on.
    std::string unreachable_url() {
        switch (e_) {
            case engine::postgresql: return "postgresql://u:secret@127.0.0.1:" + std::to_string(closed_port()) + "/x";
            case engine::mysql: return "mysql://u:secret@127.0.0.1:" + std::to_string(closed_port()) + "/x";
            case engine::sqlite: return sqlite_url(files_.path() / "no" / "such" / "dir" / "x.db");
        }
        return {};
    }
    std::string diag() const { return last_ ? "\nstdout:\n" + last_->out() + "stderr:\n" + last_->err() : ""; }

    temp_dir files_;
    std::optional<child> last_;
};

std::regex const plain_line(
    R"(^sqlock-reaper: (\S+) purged (\d+) expired rows in (\d+) batches \(oldest expiry (none|\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z)\) in [0-9.]+ ms(.*)$)");

TEST_P(ReaperCli, OncePurgesAndLogsOneLinePerPass) {
    insert_expired("old/", 25);
    insert_live("live/", 2);
    ASSERT_EQ(run(with_db({"--once"})), 0) << diag();
    auto lines = last_->out_lines();
    ASSERT_EQ(lines.size(), 1u) << diag();
    std::smatch m;
    ASSERT_TRUE(std::regex_match(lines[0], m, plain_line)) << lines[0];
    EXPECT_EQ(m[2], "25");
    EXPECT_EQ(m[3], "1");
    EXPECT_NE(m[4], "none");
    EXPECT_EQ(last_->err(), "");
    EXPECT_EQ(count_prefix("old/"), 0);
    EXPECT_EQ(count_prefix("live/"), 2);
    if (e_ != engine::sqlite) {
        EXPECT_NE(lines[0].find(":***@"), std::string::npos) << "password not masked: " << lines[0];
        EXPECT_EQ(lines[0].find(":sqlock@"), std::string::npos) << "password leaked: " << lines[0];
    }

    // Flags: grace, batch.
    insert_expired("recent/", 3, 10LL * 1000 * 1000);
    insert_expired("older/", 1200);
    ASSERT_EQ(run(with_db({"--grace", "1m", "--batch", "500"})), 0) << diag();  // --once is the default
    lines = last_->out_lines();
    ASSERT_EQ(lines.size(), 1u) << diag();
    ASSERT_TRUE(std::regex_match(lines[0], m, plain_line)) << lines[0];
    EXPECT_EQ(m[2], "1200");
    EXPECT_EQ(m[3], "3");
    EXPECT_EQ(count_prefix("recent/"), 3);
}

TEST_P(ReaperCli, TokenHorizonPurgesCountersAndSaysSo) {
    *raw_ << "INSERT INTO " + tokens() + " (name, token) VALUES ('legacy:a', 5), ('legacy:b', 6), ('legacy:c', 7)";
    auto L = make_locker();
    ASSERT_TRUE(L.try_acquire("fresh"));  // a counter at the database's clock: younger than 2h

    ASSERT_EQ(run(with_db({"--token-horizon", "2h", "--dry-run"})), 0) << diag();
    EXPECT_NE(last_->out().find("would purge 3 token counters"), std::string::npos) << diag();
    EXPECT_EQ(count_counters("legacy:"), 3);

    ASSERT_EQ(run(with_db({"--token-horizon", "2h"})), 0) << diag();
    auto lines = last_->out_lines();
    ASSERT_EQ(lines.size(), 1u) << diag();
    EXPECT_TRUE(std::regex_match(lines[0], plain_line)) << lines[0];
    EXPECT_NE(lines[0].find("; purged 3 token counters in 1 batches"), std::string::npos) << lines[0];
    EXPECT_EQ(count_counters("legacy:"), 0);
    EXPECT_EQ(count_counters("fresh"), 1);

    *raw_ << "INSERT INTO " + tokens() + " (name, token) VALUES ('legacy:d', 8)";
    ASSERT_EQ(run(with_db({"--token-horizon", "off", "--json"})), 0) << diag();
    auto j = nlohmann::json::parse(last_->out_lines().at(0));
    EXPECT_EQ(j["tokens_purged"], 0);
    EXPECT_EQ(j["token_batches"], 0);
    EXPECT_EQ(count_counters("legacy:"), 1);
    ASSERT_EQ(run(with_db({"--token-horizon", "2h", "--json"})), 0) << diag();
    j = nlohmann::json::parse(last_->out_lines().at(0));
    EXPECT_GE(j["tokens_purged"], 1);
    EXPECT_EQ(count_counters("legacy:"), 0);

    // Issue 18: shorter than an acquire statement can run, a purge can repeat a token.
    *raw_ << "INSERT INTO " + tokens() + " (name, token) VALUES ('legacy:e', 9)";
    for (char const* h : {"0", "1ms", "1h59m"}) {
        EXPECT_EQ(run(with_db({"--token-horizon", h})), 64) << h << ": " << diag();
        EXPECT_NE(last_->err().find("2 h"), std::string::npos) << "the error does not name the minimum: " << diag();
    }
    EXPECT_EQ(count_counters("legacy:e"), 1) << "a refused horizon purged counters";
    EXPECT_EQ(run(with_db({"--token-horizon", "-1s"})), 64) << diag();
    EXPECT_EQ(run(with_db({"--token-horizon", "3651d"})), 64) << diag();
}

TEST_P(ReaperCli, JsonLinesCarryTheSameFields) {
    insert_expired("old/", 4);
    insert_rows("stuck/", 2, -3 * hour_us, hour_us);
    ASSERT_EQ(run(with_db({"--once", "--json", "--max-age", "1h"})), 0) << diag();
    auto lines = last_->out_lines();
    ASSERT_EQ(lines.size(), 1u) << diag();
    auto j = nlohmann::json::parse(lines[0]);
    EXPECT_EQ(j["event"], "pass");
    EXPECT_EQ(j["purged"], 6);
    EXPECT_EQ(j["live_purged"], 2);
    EXPECT_EQ(j["batches"], 1);
    EXPECT_TRUE(j["oldest_expiry"].is_string());
    EXPECT_TRUE(j["duration_ms"].is_number());
    // The stuck rows were live when the pass sized its first batch: the pass stays paced to its end,
    // its token batch included, although that batch ran after they were purged.
    EXPECT_EQ(j["idle_batches"], 0);
    EXPECT_EQ(j["paused_ms"], 0.0) << "a pass that ended on its first batch paused";
    EXPECT_EQ(j["dry_run"], false);
    EXPECT_EQ(j["complete"], true);
    EXPECT_EQ(j["stopped"], false);
    EXPECT_TRUE(j["url"].is_string());
    // The loud warning about live rows, as JSON on stderr.
    auto err = last_->err_lines();
    ASSERT_EQ(err.size(), 1u) << diag();
    auto w = nlohmann::json::parse(err[0]);
    EXPECT_EQ(w["event"], "warning");
    EXPECT_NE(w["warning"].get<std::string>().find("2 live"), std::string::npos) << err[0];
    EXPECT_EQ(count(), 0);
}

TEST_P(ReaperCli, IdleBatchAndDutyCyclePaceAPass) {
    // No live lease: --idle-batch sets the batch size (and 'off' gives --batch back).
    insert_expired("old/", 25);
    ASSERT_EQ(run(with_db({"--once", "--json", "--batch", "5", "--idle-batch", "10", "--token-horizon", "off"})), 0)
        << diag();
    auto j = nlohmann::json::parse(last_->out_lines().at(0));
    EXPECT_EQ(j["batches"], 3) << "10, 10, 5";
    EXPECT_EQ(j["idle_batches"], 3);
    EXPECT_EQ(j["paused_ms"], 0.0);
    insert_expired("old/", 25);
    ASSERT_EQ(run(with_db({"--once", "--json", "--batch", "5", "--idle-batch", "off", "--token-horizon", "off"})), 0)
        << diag();
    j = nlohmann::json::parse(last_->out_lines().at(0));
    EXPECT_EQ(j["batches"], 6) << "5 x 5 and an empty batch";
    EXPECT_EQ(j["idle_batches"], 0);

    // A live lease: batches of --batch, each but the last followed by a pause; --duty-cycle 1: none.
    insert_live("live/", 1);
    insert_expired("old/", 25);
    ASSERT_EQ(run(with_db({"--once", "--json", "--batch", "10", "--duty-cycle", "0.2"})), 0) << diag();
    j = nlohmann::json::parse(last_->out_lines().at(0));
    EXPECT_EQ(j["batches"], 3);
    EXPECT_EQ(j["idle_batches"], 0);
    EXPECT_GT(j["paused_ms"].get<double>(), 0.0) << "no pause beside a live lease";
    insert_expired("old/", 25);
    ASSERT_EQ(run(with_db({"--once", "--batch", "10", "--duty-cycle", "0.2"})), 0) << diag();
    EXPECT_NE(last_->out().find("ms beside live leases"), std::string::npos) << diag();
    insert_expired("old/", 25);
    ASSERT_EQ(run(with_db({"--once", "--json", "--batch", "10", "--duty-cycle", "1"})), 0) << diag();
    j = nlohmann::json::parse(last_->out_lines().at(0));
    EXPECT_EQ(j["paused_ms"], 0.0);
    EXPECT_EQ(count_prefix("live/"), 1);

    // A bad value is a usage error that names the option and its range.
    EXPECT_EQ(run(with_db({"--duty-cycle", "2"})), 64);
    EXPECT_NE(last_->err().find("0.01 .. 1"), std::string::npos) << diag();
    EXPECT_EQ(run(with_db({"--idle-batch", "many"})), 64);
    EXPECT_NE(last_->err().find("--idle-batch"), std::string::npos) << diag();
}

TEST_P(ReaperCli, DryRunDeletesNothing) {
    insert_expired("old/", 12);
    ASSERT_EQ(run(with_db({"--dry-run"})), 0) << diag();
    auto out = last_->out();
    EXPECT_NE(out.find("would purge 12 expired rows"), std::string::npos) << out;
    EXPECT_NE(out.find("dry run"), std::string::npos) << out;
    EXPECT_EQ(count(), 12);
}

TEST_P(ReaperCli, SeveralDatabasesAreReapedInTurnAndSqlockDbIsTheDefault) {
    temp_dir other_dir;
    auto other = sqlite_url(other_dir.path() / "other.db");
    { sqlock::store o(other, {.create_schema = true, .table_prefix = tables_}); }
    auto other_raw = raw_session(engine::sqlite, other);
    *other_raw << "INSERT INTO " + locks() +
                      " (name, owner, token, holds, created_at, expires_at) VALUES ('x', 'o', 1, "
                      "1, 0, 1)";
    insert_expired("old/", 3);
    ASSERT_EQ(run({"--db", url_, "--db", other, "--table-prefix", tables_}), 0) << diag();
    auto lines = last_->out_lines();
    ASSERT_EQ(lines.size(), 2u) << diag();
    std::smatch m;
    ASSERT_TRUE(std::regex_match(lines[0], m, plain_line)) << lines[0];
    EXPECT_EQ(m[2], "3");
    ASSERT_TRUE(std::regex_match(lines[1], m, plain_line)) << lines[1];
    EXPECT_EQ(m[1], other);
    EXPECT_EQ(m[2], "1");

    // Without --db: $SQLOCK_DB.
    insert_expired("env/", 2);
    ASSERT_EQ(run({"--table-prefix", tables_}, {"SQLOCK_DB=" + url_}), 0) << diag();
    lines = last_->out_lines();
    ASSERT_EQ(lines.size(), 1u) << diag();
    ASSERT_TRUE(std::regex_match(lines[0], m, plain_line)) << lines[0];
    EXPECT_EQ(m[2], "2");
}

TEST_P(ReaperCli, ExitCodes) {
    // 64: usage, before anything is deleted.
    insert_expired("old/", 2);
    for (auto args : std::vector<std::vector<std::string>>{{"--bogus"},
                                                           {"--grace", "5x"},
                                                           {"--grace", "-1s"},
                                                           {"--batch", "0"},
                                                           {"--batch", "many"},
                                                           {"--max-age", "0"},
                                                           {"--idle-batch", "0"},
                                                           {"--idle-batch", "lots"},
                                                           {"--idle-batch", "-5"},
                                                           {"--duty-cycle", "0"},
                                                           {"--duty-cycle", "1.5"},
                                                           {"--duty-cycle", "half"},
                                                           {"--interval", "0"},
                                                           {"--once", "--interval", "1s"},
                                                           {"--table-prefix", "1bad"}}) {
        auto full = with_db(args);
        EXPECT_EQ(run(full), 64) << args[0] << diag();
        auto err = last_->err_lines();
        EXPECT_EQ(err.size(), 1u) << args[0] << diag();
        EXPECT_EQ(last_->out(), "") << args[0];
    }
    EXPECT_EQ(run({"--db", "nosuch://x", "--db", url_, "--table-prefix", tables_}), 64) << diag();
    EXPECT_EQ(count(), 2) << "a usage error deleted rows";

    // 78: the lock tables are missing (here: another prefix), in both modes.
    EXPECT_EQ(run({"--db", url_, "--table-prefix", "sqlr_missing_" + random_hex(6)}), 78) << diag();
    EXPECT_NE(last_->err().find("does not exist"), std::string::npos) << diag();
    EXPECT_EQ(run({"--db", url_, "--table-prefix", "sqlr_missing_" + random_hex(6), "--interval", "1s"}), 78) << diag();

    // 78: tables of a newer protocol (docs/operations.md, "Upgrading sqlock"), in both modes; an older
    // reaper's rules could delete what the newer protocol keeps: nothing is deleted.
    *raw_ << "UPDATE " + tables_ + "_protocol SET version = " + std::to_string(sqlock::protocol_version() + 1);
    EXPECT_EQ(run(with_db({})), 78) << diag();
    EXPECT_NE(last_->err().find("upgrade sqlock"), std::string::npos) << diag();
    EXPECT_EQ(last_->err_lines().size(), 1u) << diag();
    EXPECT_EQ(run(with_db({"--interval", "1s"})), 78) << diag();
    EXPECT_EQ(count(), 2) << "a reaper deleted rows of tables of a newer protocol";
    *raw_ << "UPDATE " + tables_ + "_protocol SET version = " + std::to_string(sqlock::protocol_version());

    // 69: unreachable (--once); the other database is still reaped.
    auto down = unreachable_url();
    EXPECT_EQ(run({"--db", down, "--db", url_, "--table-prefix", tables_}), 69) << diag();
    auto err = last_->err_lines();
    ASSERT_EQ(err.size(), 1u) << diag();
    EXPECT_EQ(err[0].find("secret"), std::string::npos) << "password leaked: " << err[0];
    EXPECT_EQ(err[0].find("soci"), std::string::npos) << err[0];
    EXPECT_EQ(count(), 0);

    // 0: help, version.
    EXPECT_EQ(run({"--help"}), 0);
    EXPECT_NE(last_->out().find("--interval"), std::string::npos);
    EXPECT_EQ(run({"--version"}), 0);
    EXPECT_EQ(last_->out(), "sqlock-reaper " SQLOCK_VERSION_STRING " (lock tables: protocol " +
                                std::to_string(sqlock::protocol_version()) + ")\n");
}

#ifdef SQLOCK_CLI_BIN
// sqlock-reaper and the sqlock command share one exit-code table: the same
// failure gives the same code from both (docs/cli.md, "Exit codes").
TEST_P(ReaperCli, SameExitCodesAsTheSqlockCommand) {
    auto sqlock_command = [&](std::vector<std::string> args) {
        last_.emplace(std::move(args), files_.path(), std::vector<std::string>{}, SQLOCK_CLI_BIN);
        return last_->wait();
    };
    // A database that does not answer: 69.
    if (e_ != engine::sqlite) {
        auto down = unreachable_url();
        EXPECT_EQ(run({"--db", down}), 69) << diag();
        EXPECT_EQ(sqlock_command({"list", "--db", down}), 69) << diag();
        EXPECT_EQ(sqlock_command({"release", "--name", "x", "--force", "--db", down}), 69) << diag();
    }
    // A database without the lock tables (an empty SQLite file): 78.
    auto const empty = files_.path() / ("empty-" + random_hex(6) + ".db");
    { std::ofstream touch(empty); }
    EXPECT_EQ(run({"--db", sqlite_url(empty)}), 78) << diag();
    EXPECT_EQ(sqlock_command({"list", "--db", sqlite_url(empty)}), 78) << diag();
    EXPECT_EQ(sqlock_command({"release", "--name", "x", "--force", "--db", sqlite_url(empty)}), 78) << diag();
    // A bad URL: 64.
    EXPECT_EQ(run({"--db", "nosuch://x"}), 64) << diag();
    EXPECT_EQ(sqlock_command({"list", "--db", "nosuch://x"}), 64) << diag();
}
#endif  // SQLOCK_CLI_BIN

// A database that refuses the statement (here a read-only session; a missing
// privilege is reported the same way, as sqlock::backend_error): 69, the code
// the sqlock command gives for it (the reaper exited 70 before issue 19).
/// ReaperCli on PostgreSQL only: the read-only session is asked for in its URL.
class ReaperCliPostgres : public ReaperCli {};

TEST_P(ReaperCliPostgres, RefusedStatementIs69) {
    insert_expired("old/", 2);
    auto const read_only =
        url_ + (url_.find('?') == std::string::npos ? "?" : "&") + "options=-c%20default_transaction_read_only%3Don";
    EXPECT_EQ(run({"--once", "--db", read_only, "--table-prefix", tables_}), 69) << diag();
    EXPECT_NE(last_->err().find("read-only"), std::string::npos) << diag();
    EXPECT_EQ(count(), 2);
}

TEST_P(ReaperCli, DaemonRetriesWhileUnreachableThenRecovers) {
    // PostgreSQL/MariaDB: through a proxy that refuses connections, then lets them
    // through. SQLite: a file in a directory that does not exist yet.
    std::unique_ptr<fault_proxy> proxy;
    std::string target = url_;
    fs::path sqlite_dir = files_.path() / "later";
    if (e_ == engine::sqlite) {
        target = sqlite_url(sqlite_dir / "locks.db");
    } else {
        proxy = fault_proxy::for_url(url_);
        proxy->block();
        target = proxy->proxied_url(url_);
    }
    child daemon({"--db", target, "--table-prefix", tables_, "--interval", "50ms"}, files_.path());
    auto retries = [&] {
        auto err = daemon.err();
        std::size_t n = 0;
        for (auto p = err.find("retrying in"); p != std::string::npos; p = err.find("retrying in", p + 1)) ++n;
        return n;
    };
    ASSERT_TRUE(eventually([&] { return retries() >= 2; }, 60s)) << daemon.err();
    EXPECT_EQ(daemon.out(), "");

    if (e_ == engine::sqlite) {
        fs::create_directories(sqlite_dir);
        sqlock::store s(target, {.create_schema = true, .table_prefix = tables_});
    } else {
        proxy->unblock();
    }
    ASSERT_TRUE(eventually([&] { return daemon.out_lines().size() >= 2; }, 90s)) << daemon.err();
    daemon.signal(SIGTERM);
    EXPECT_EQ(daemon.wait(), 0) << daemon.err();
    for (auto const& line : daemon.out_lines()) EXPECT_TRUE(std::regex_match(line, plain_line)) << line;
    EXPECT_NE(daemon.err().find("stopped cleanly"), std::string::npos) << daemon.err();
}

TEST_P(ReaperCli, SigtermStopsTheDaemonMidPass) {
    int const total = 20000;
    insert_expired("old/", total);
    child daemon(with_db({"--interval", "1h", "--batch", "2", "--idle-batch", "off"}), files_.path());
    ASSERT_TRUE(eventually([&] { return count() < total; }, 60s)) << daemon.err();
    daemon.signal(SIGTERM);
    ASSERT_EQ(daemon.wait(), 0) << daemon.err();
    auto left = count();
    EXPECT_GT(left, 0) << "the pass ran to the end instead of stopping";
    auto lines = daemon.out_lines();
    ASSERT_EQ(lines.size(), 1u) << daemon.out() << daemon.err();
    std::smatch m;
    ASSERT_TRUE(std::regex_match(lines[0], m, plain_line)) << lines[0];
    EXPECT_EQ(std::stoll(m[2]) + left, total) << "the log line counts exactly the rows deleted";
    EXPECT_NE(lines[0].find("stopped"), std::string::npos) << lines[0];
    EXPECT_NE(daemon.err().find("SIGTERM"), std::string::npos) << daemon.err();
}

#if SQLOCK_REAPER_METRICS
TEST_P(ReaperCli, MetricsEndpointShowsThePassesAndTheTable) {
    insert_expired("old/", 2);
    auto locks = make_locker({.ttl = 60s});
    auto live = locks.try_acquire(prefix_ + "live");
    ASSERT_TRUE(live);
    child daemon(with_db({"--interval", "1h", "--grace", "0s", "--metrics-listen", "127.0.0.1:0"}), files_.path());
    std::smatch m;
    std::string err;  // outlives the match, which points into it
    std::regex const serving(R"(serving metrics on (http://127\.0\.0\.1:\d+/metrics))");
    ASSERT_TRUE(eventually([&] { return std::regex_search(err = daemon.err(), m, serving); }, 60s)) << err;
    std::string const endpoint = m[1];
    std::string const engine = engine_name(e_);
    std::vector<text_sample> s;
    // The first pass runs at start: it purges the two expired rows and keeps the live one.
    ASSERT_TRUE(eventually(
        [&] {
            s = parse_exposition(http_get(endpoint));
            return value_of(s, "sqlock_reaper_passes_total", {{"engine", engine}, {"outcome", "ok"}}) == 1.0;
        },
        60s))
        << daemon.err();
    EXPECT_EQ(value_of(s, "sqlock_reaper_rows_purged_total", {{"engine", engine}}), 2);
    EXPECT_EQ(value_of(s, "sqlock_reaper_passes_total", {{"engine", engine}, {"outcome", "failed"}}), 0);
    EXPECT_EQ(value_of(s, "sqlock_reaper_pass_duration_seconds_count", {{"engine", engine}}), 1);
    EXPECT_GT(value_of(s, "sqlock_reaper_last_success_timestamp_seconds", {{"engine", engine}}).value_or(0), 1.7e9);

    // The table, counted at each scrape: the live row, then the same row expired an hour ago.
    std::string const db = sqlock::redact_url(url_);
    EXPECT_EQ(value_of(s, "sqlock_table_up", {{"database", db}}), 1);
    EXPECT_EQ(value_of(s, "sqlock_table_rows", {{"database", db}, {"state", "live"}}), 1);
    EXPECT_EQ(value_of(s, "sqlock_table_rows", {{"database", db}, {"state", "expired"}}), 0);
    EXPECT_EQ(value_of(s, "sqlock_table_oldest_expired_age_seconds", {{"database", db}}), 0);
    backdate_row(*raw_, e_, prefix_ + "live", tables_);
    s = parse_exposition(http_get(endpoint));
    EXPECT_EQ(value_of(s, "sqlock_table_rows", {{"database", db}, {"state", "live"}}), 0);
    EXPECT_EQ(value_of(s, "sqlock_table_rows", {{"database", db}, {"state", "expired"}}), 1);
    EXPECT_GE(value_of(s, "sqlock_table_oldest_expired_age_seconds", {{"database", db}}).value_or(0), 3500);
    EXPECT_GE(value_of(s, "sqlock_token_counters", {{"database", db}}).value_or(0), 1);

    daemon.signal(SIGTERM);
    EXPECT_EQ(daemon.wait(), 0) << daemon.err();
}

TEST_P(ReaperCli, MetricsListenIsRefusedWithoutADaemonOrAFreePort) {
    EXPECT_EQ(run(with_db({"--once", "--metrics-listen", "127.0.0.1:0"})), 64) << diag();
    EXPECT_NE(last_->err().find("add --interval"), std::string::npos) << diag();
    // A port already taken: the daemon does not start.
    int const fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    ASSERT_EQ(::listen(fd, 1), 0);
    socklen_t len = sizeof a;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    auto const taken = "127.0.0.1:" + std::to_string(ntohs(a.sin_port));
    EXPECT_EQ(run(with_db({"--interval", "1h", "--metrics-listen", taken})), 64) << diag();
    EXPECT_NE(last_->err().find("cannot listen there"), std::string::npos) << diag();
    ::close(fd);
}
#endif

TEST_P(ReaperCli, SigintStopsTheDaemonBetweenPasses) {
    child daemon(with_db({"--interval", "1h", "--json"}), files_.path());
    ASSERT_TRUE(eventually([&] { return daemon.out_lines().size() == 1; }, 60s)) << daemon.err();
    daemon.signal(SIGINT);
    EXPECT_EQ(daemon.wait(), 0) << daemon.err();
    auto j = nlohmann::json::parse(daemon.out_lines().at(0));
    EXPECT_EQ(j["purged"], 0);
    EXPECT_EQ(j["complete"], true);
    for (auto const& line : daemon.err_lines()) EXPECT_TRUE(nlohmann::json::accept(line)) << line;
}

INSTANTIATE_TEST_SUITE_P(Engines, ReaperCli, ::testing::Values(engine::postgresql, engine::mysql, engine::sqlite),
                         engine_param_name{});
INSTANTIATE_TEST_SUITE_P(Engines, ReaperCliPostgres, ::testing::Values(engine::postgresql), engine_param_name{});

// ---------------------------------------------------------- several databases: the members of a majority

/// PostgreSQL, MariaDB and an SQLite file as the members of a majority, each
/// with tables of this test's own prefix (dropped afterwards).
class ReaperMajority : public ::testing::Test {
protected:
    struct db {
        engine e;
        std::string url;
        std::unique_ptr<soci::session> raw;
    };

    void SetUp() override {
        std::string pg, my;
        require_env("SQLOCK_TEST_PG_URL", pg);
        if (should_stop()) return;
        require_env("SQLOCK_TEST_MYSQL_URL", my);
        if (should_stop()) return;
        tables_ = "sqlr_" + random_hex(10);
        for (auto [e, url] : std::vector<std::pair<engine, std::string>>{
                 {engine::postgresql, pg}, {engine::mysql, my}, {engine::sqlite, sqlite_url(files_.path() / "m.db")}}) {
            sqlock::store(url, {.create_schema = true, .table_prefix = tables_});
            dbs_.push_back({e, url, raw_session(e, url)});
        }
    }
    void TearDown() override {
        for (auto& d : dbs_) {
            if (d.e == engine::sqlite) continue;
            try {
                for (auto const& t : {"_locks", "_tokens", "_fences", "_rows", "_majority_tokens", "_identity",
                                      "_majority_members", "_semaphores"})
                    *d.raw << "DROP TABLE IF EXISTS " + tables_ + t;
            } catch (std::exception const& e) {
                ADD_FAILURE() << "could not drop the test tables " << tables_ << "_*: " << e.what();
            }
        }
    }

    /// `count` rows named `<name_prefix>N` on `d`, expired an hour ago (`live`: expiring in an hour).
    void insert(db& d, std::string const& name_prefix, int count, bool live = false) {
        std::string sql =
            "INSERT INTO " + tables_ + "_locks (name, owner, token, holds, created_at, expires_at) VALUES ";
        for (int i = 0; i < count; ++i) {
            if (i != 0) sql += ",";
            sql += "('" + name_prefix + std::to_string(i) + "', 'test-owner', " + std::to_string(i + 1) + ", 1, " +
                   at_sql(d.e, -2 * hour_us) + ", " + at_sql(d.e, live ? hour_us : -hour_us) + ")";
        }
        *d.raw << sql;
    }
    long long count_prefix(db& d, std::string const& name_prefix) {
        return count_rows_with_prefix(*d.raw, name_prefix, tables_);
    }
    std::vector<std::string> args(std::vector<std::string> const& urls, std::vector<std::string> extra = {}) {
        std::vector<std::string> a;
        for (auto const& u : urls) a.insert(a.end(), {"--db", u});
        a.insert(a.end(), {"--table-prefix", tables_});
        a.insert(a.end(), extra.begin(), extra.end());
        return a;
    }

    temp_dir files_;
    std::string tables_;
    std::vector<db> dbs_;
};

TEST_F(ReaperMajority, ReapsEachMemberAndKeepsGoingPastAnUnreachableOne) {
    for (auto& d : dbs_) {
        insert(d, "old/", 3 + static_cast<int>(&d - dbs_.data()));  // 3, 4, 5: each line tells its own count
        insert(d, "live/", 2, true);
    }
    auto const down = "postgresql://u:secret@127.0.0.1:" + std::to_string(closed_port()) + "/x";
    // The unreachable member in the middle: those after it are still reaped.
    child once(args({dbs_[0].url, down, dbs_[1].url, dbs_[2].url}), files_.path());
    EXPECT_EQ(once.wait(), 69) << once.err();
    auto lines = once.out_lines();
    ASSERT_EQ(lines.size(), 3u) << once.out() << once.err();
    for (std::size_t i = 0; i < 3; ++i) {
        std::smatch m;
        ASSERT_TRUE(std::regex_match(lines[i], m, plain_line)) << lines[i];
        EXPECT_EQ(m[1], sqlock::redact_url(dbs_[i].url));
        EXPECT_EQ(m[2], std::to_string(3 + i));
        EXPECT_EQ(count_prefix(dbs_[i], "old/"), 0) << dbs_[i].url;
        EXPECT_EQ(count_prefix(dbs_[i], "live/"), 2) << dbs_[i].url;
    }
    auto err = once.err_lines();
    ASSERT_EQ(err.size(), 1u) << once.err();
    EXPECT_NE(err[0].find("u:***@127.0.0.1"), std::string::npos) << "the member is not named: " << err[0];
    EXPECT_EQ(err[0].find("secret"), std::string::npos) << "password leaked: " << err[0];

    // JSON: one pass object per member, the error object names the unreachable one.
    for (auto& d : dbs_) insert(d, "again/", 2);
    child json(args({down, dbs_[0].url, dbs_[1].url, dbs_[2].url}, {"--json"}), files_.path());
    EXPECT_EQ(json.wait(), 69) << json.err();
    std::set<std::string> reaped;
    for (auto const& line : json.out_lines()) {
        auto j = nlohmann::json::parse(line);
        EXPECT_EQ(j["event"], "pass");
        EXPECT_EQ(j["purged"], 2) << line;
        reaped.insert(j["url"].get<std::string>());
    }
    EXPECT_EQ(reaped.size(), 3u) << json.out();
    ASSERT_EQ(json.err_lines().size(), 1u) << json.err();
    auto e = nlohmann::json::parse(json.err_lines()[0]);
    EXPECT_EQ(e["event"], "error");
    EXPECT_EQ(e["url"], sqlock::redact_url(down));
    EXPECT_EQ(e["exit_code"], 69);
}

TEST_F(ReaperMajority, DaemonKeepsReapingTheOthersWhileAMemberIsDownOrHasNoTables) {
    // A member refusing connections (through a proxy) and one whose tables are
    // missing (an SQLite file without them) stop neither the daemon nor the others.
    auto proxy = fault_proxy::for_url(dbs_[1].url);
    proxy->block();
    auto const bare = sqlite_url(files_.path() / "bare.db");
    {
        auto s = raw_session(engine::sqlite, bare);
        *s << "CREATE TABLE unrelated (x INTEGER)";
    }
    child daemon(args({dbs_[0].url, proxy->proxied_url(dbs_[1].url), bare, dbs_[2].url}, {"--interval", "50ms"}),
                 files_.path());
    insert(dbs_[0], "old/", 2);
    insert(dbs_[2], "old/", 2);
    ASSERT_TRUE(
        eventually([&] { return count_prefix(dbs_[0], "old/") == 0 && count_prefix(dbs_[2], "old/") == 0; }, 60s))
        << daemon.out() << daemon.err();
    // Reaped again on the next passes, while the two others still fail.
    insert(dbs_[0], "later/", 1);
    ASSERT_TRUE(eventually([&] { return count_prefix(dbs_[0], "later/") == 0; }, 60s)) << daemon.err();
    auto err = daemon.err();
    EXPECT_NE(err.find("retrying in"), std::string::npos) << err;
    EXPECT_NE(err.find("does not exist"), std::string::npos) << "the member without tables is not reported: " << err;

    // The member comes back: reaped too.
    insert(dbs_[1], "old/", 2);
    proxy->unblock();
    EXPECT_TRUE(eventually([&] { return count_prefix(dbs_[1], "old/") == 0; }, 90s)) << daemon.err();
    daemon.signal(SIGTERM);
    EXPECT_EQ(daemon.wait(), 0) << daemon.err();
}

TEST_F(ReaperMajority, DaemonExitsWhenNoDatabaseHasItsTables) {
    auto const missing = "sqlr_missing_" + random_hex(6);
    child daemon({"--db", dbs_[0].url, "--db", dbs_[2].url, "--table-prefix", missing, "--interval", "50ms"},
                 files_.path());
    EXPECT_EQ(daemon.wait(), 78) << daemon.err();
}

#endif  // SQLOCK_REAPER_BIN

// ============================================================ durations

TEST(ReaperDuration, ParsesTheAcceptedForms) {
    using sqlock::tools::parse_duration;
    EXPECT_EQ(parse_duration("250ms"), 250ms);
    EXPECT_EQ(parse_duration("30s"), 30s);
    EXPECT_EQ(parse_duration("5m"), 5min);
    EXPECT_EQ(parse_duration("1h"), 1h);
    EXPECT_EQ(parse_duration("7d"), std::chrono::days(7));
    EXPECT_EQ(parse_duration("1h30m"), 90min);
    EXPECT_EQ(parse_duration("1m500ms"), 60500ms);
    EXPECT_EQ(parse_duration("0"), 0ms);
    EXPECT_EQ(parse_duration("0s"), 0ms);
}

TEST(ReaperDuration, RejectsEverythingElse) {
    using sqlock::tools::parse_duration;
    for (auto text : {"", "5", "s", "5x", "-1s", "1.5s", " 5s", "5s ", "5 s", "1h-5m", "ms5", "99999999999999d"})
        EXPECT_THROW((void)parse_duration(text), sqlock::usage_error) << "'" << text << "'";
}

TEST(ReaperDuration, FormatsWhatItParses) {
    using sqlock::tools::format_duration;
    using sqlock::tools::parse_duration;
    EXPECT_EQ(format_duration(0ms), "0s");
    EXPECT_EQ(format_duration(250ms), "250ms");
    EXPECT_EQ(format_duration(90min), "1h30m");
    EXPECT_EQ(format_duration(1600ms), "1s600ms");
    for (auto d : {1ms, 999ms, 1000ms, 61000ms, 3600000ms, 90061001ms})
        EXPECT_EQ(parse_duration(format_duration(d)), d);
}

}  // namespace
