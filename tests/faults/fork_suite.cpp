// sqlock tests — fork() (issue 18, items 1 and 2): Engines/Fork.<Test>/<engine>.
//
// A process that acquired once and then forked must not hand out one lock
// twice: the child (with a store of its own, as the docs ask) and the parent
// (through a new store) contend for one name, with try_acquire and with a
// waiting acquire, and exactly one of them is granted; also when a failpoint
// forces both processes to draw the same attempt id, and when both lockers
// carry the same owner. And a child whose copies of the parent's store,
// lockers and leases are destroyed (it returns through main, or calls exit())
// exits normally and leaves the parent's table and row locks held and renewable.
// The forking happens in tests/faults/fork_worker.cpp, never in this test process.
// The rule itself is checked on the dialect's acquire statement: a live row
// that carries the caller's attempt id is not a grant (only a retry after a
// broken connection takes it, and only for the same owner).
#include "detail/access.hpp"
#include "detail/store_impl.hpp"
#include "run_command.hpp"
#include "test_env.hpp"

#include <sqlock/sqlock.hpp>

#include <gtest/gtest.h>

#include <soci/soci.h>

#include <sstream>
#include <string>
#include <vector>

namespace {

using namespace std::chrono_literals;
using namespace sqlock_test;
using sqlock::engine;

constexpr long long forced_attempt = 4242;

/// Runs the fork worker. Leak checking is off in it: LLVM 14's LeakSanitizer
/// takes its allocator's lock at exit, which a thread of the parent may have
/// held at the fork, so a forked child of a threaded process can hang there (a
/// limit of the sanitizer runtime, not of sqlock; the other suites check the
/// library for leaks). The child's own malloc and free can hang on that lock as
/// well: the worker forks once its threads sleep (sanitized_fork.hpp).
command_result run_worker(std::vector<std::string> args, std::vector<std::string> env) {
    auto const asan = getenv_nonempty("ASAN_OPTIONS").value_or("");
    env.push_back("ASAN_OPTIONS=" + asan + (asan.empty() ? "" : ":") + "detect_leaks=0");
    return run_in_env(std::move(args), environment_with(env, {"ASAN_OPTIONS="}), 120s);
}

class Fork : public engine_fixture {
protected:
    struct answer {
        bool granted = false;
        long long token = 0;
    };

    /// Runs the worker's "grant" scenario; what the child and the parent got.
    void contend(std::string const& how, std::string const& owner, bool forced) {
        std::string const name = n("fork-" + how + "-" + owner + (forced ? "-forced" : ""));
        std::vector<std::string> env;
        if (forced) env.push_back("SQLOCK_FAILPOINTS=acquire.attempt_id=value:" + std::to_string(forced_attempt));
        auto r = run_worker({SQLOCK_FORK_WORKER, "grant", url_, name, how, owner}, env);
        SCOPED_TRACE("worker output:\n" + r.out + r.err);
        ASSERT_TRUE(r.finished) << "the worker did not finish within 120 s";
        EXPECT_TRUE(r.ok()) << "the worker " << exit_text(r.status);
        std::vector<answer> grants;
        std::istringstream lines(r.out);
        for (std::string who, what; lines >> who >> what;) {
            if (what == "granted") {
                long long token = 0;
                lines >> token;
                grants.push_back({true, token});
            }
            lines.ignore(1 << 20, '\n');
        }
        EXPECT_EQ(grants.size(), 1u) << "parent and child must not both hold '" << name << "'";
        if (grants.size() == 2) {
            EXPECT_NE(grants[0].token, grants[1].token) << "one fencing token handed out twice";
        }
        // Writes fenced with each grant's token, in grant order: both accepted
        // means two holders wrote through the fence.
        sqlock::fence fence(*db_);
        int accepted = 0;
        for (auto const& g : grants) {
            try {
                fence.check_and_set(*raw_, name, g.token);
                ++accepted;
            } catch (sqlock::stale_token const&) {}
        }
        EXPECT_LE(accepted, 1) << "sqlock::fence accepted the writes of two holders";
        if (forced) {
            // The child's row (it never released it) carries the forced id: the collision happened.
            long long attempt = 0;
            *raw_ << "SELECT attempt FROM sqlock_locks WHERE name = :n", soci::use(name), soci::into(attempt);
            EXPECT_EQ(attempt, forced_attempt) << "the failpoint acquire.attempt_id did not fix the attempt id "
                                                  "(a build without SQLOCK_FAILPOINTS?)";
        }
    }

    /// Runs the worker's "survive" scenario: the child ends `how` ("return" or "exit").
    void survive(std::string const& how) {
        std::string row_url = url_;
        if (e_ == engine::sqlite) row_url = sqlite_url(dir_->path() / "rows.db");  // SQLite's row lock takes the file
        auto r = run_worker({SQLOCK_FORK_WORKER, "survive", url_, row_url, n("fork-table-" + how), n("fork-row-" + how),
                             how},
                            {});
        SCOPED_TRACE("worker output:\n" + r.out + r.err);
        ASSERT_TRUE(r.finished) << "the worker did not finish within 120 s";
        EXPECT_NE(r.out.find("child exited 0"), std::string::npos) << "the forked child did not exit normally";
        EXPECT_NE(r.out.find("parent ok"), std::string::npos) << "the parent's locks did not survive the child";
        EXPECT_TRUE(r.ok()) << "the worker " << exit_text(r.status);
    }
};

TEST_P(Fork, TryAcquireAfterForkGrantsOnce) { contend("try", "own", false); }
TEST_P(Fork, WaitingAcquireAfterForkGrantsOnce) { contend("wait", "own", false); }
TEST_P(Fork, ForcedAttemptCollisionGrantsOnce) {
    contend("try", "own", true);
    contend("wait", "own", true);
}
TEST_P(Fork, ForcedAttemptCollisionWithOneOwnerGrantsOnce) {
    contend("try", "shared-owner", true);
    contend("wait", "shared-owner", true);
}

// The statement, not the test scenario: a live row of the same attempt id.
TEST_P(Fork, ARowCarryingTheSameAttemptIdIsNoGrant) {
    std::string const name = n("same-attempt");
    sqlock::locker L = sqlock::table_locker(*db_, {.ttl = 30s, .auto_renew = false});
    auto held = L.try_acquire(name);
    ASSERT_TRUE(held.has_value());
    *raw_ << "UPDATE sqlock_locks SET attempt = :a WHERE name = :n", soci::use(forced_attempt, "a"),
        soci::use(name, "n");
    auto acquire = [&](std::string const& owner, bool retry) {
        return sqlock::detail::access::impl(*db_)->run("probe", [&](sqlock::detail::pooled_session s) {
            return sqlock::detail::access::impl(*db_)->dialect().acquire(s, name, owner, forced_attempt, 30'000'000,
                                                                         true, retry);
        });
    };
    for (bool retry : {false, true}) {
        SCOPED_TRACE(retry ? "a retry" : "a first call");
        auto other = acquire("another-process", retry);
        EXPECT_FALSE(other.acquired) << "another owner got a live row because it carries its attempt id";
    }
    auto same = acquire(held->owner(), false);
    EXPECT_FALSE(same.acquired) << "a first call took a live row because it carries its owner and attempt id";
    // A retry after a broken connection takes the row its broken call committed
    // late (same owner and attempt id); SQLite's statement never commits late
    // (no server runs it after the client gave up) and answers only for what it wrote.
    auto retried = acquire(held->owner(), true);
    if (e_ == engine::sqlite) {
        EXPECT_FALSE(retried.acquired);
    } else {
        EXPECT_TRUE(retried.acquired) << "a retry did not take the row its own broken call wrote";
        EXPECT_EQ(retried.token, held->token());
    }
    EXPECT_EQ(row(name)->token, held->token()) << "the held row changed";
    held->release();
}

TEST_P(Fork, ChildReturningThroughMainLeavesTheParentsLocks) { survive("return"); }
TEST_P(Fork, ChildCallingExitLeavesTheParentsLocks) { survive("exit"); }

INSTANTIATE_TEST_SUITE_P(Engines, Fork, ::testing::Values(engine::postgresql, engine::mysql, engine::sqlite),
                         engine_param_name{});

}  // namespace
