// sqlock fault tests — a fleet mid-upgrade (issue 40): clients of an older sqlock and of this tree on the
// same tables at once.
//
// The older clients are tests/mixed_version/mixed_client.cpp built by scripts/old-client.sh against the library
// of issue 40's baseline (e66d7d0, a release of protocol 1 from before the protocol was recorded); the newer are
// the same source built against this tree (sqlock_mixed_client). Each test, per engine and lock kind:
//   1. an older client creates the tables (its own schema: no protocol record) and takes locks alone;
//   2. the database's audit of the lock rows is installed (audit.hpp: triggers the library knows nothing of),
//      and two older clients take three names for a while;
//   3. the upgrade: this tree's schema is applied on those tables (the protocol record is added), beside
//      nothing running;
//   4. two older and two newer clients take the same three names at once.
// The audit of 2-4 is judged by K1 (lease intervals disjoint in database time, takeovers only after expiry) and
// K7 (tokens strictly increase in grant order, across the upgrade); both versions must have been granted in 4,
// and the audit must show a name handed from an older client to a newer one and back, so that the checks judge
// a real mix. Both versions speak protocol 1 (docs/operations.md, "Upgrading sqlock"); a release that changes
// the protocol keeps this test to show its upgrade refuses the older clients instead.
#include "audit.hpp"
#include "checkers.hpp"
#include "test_env.hpp"
#include "test_process.hpp"

#include <sqlock/sqlock.hpp>

#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#ifndef SQLOCK_OLD_CLIENT
#error "SQLOCK_OLD_CLIENT (where scripts/old-client.sh puts the older client) must be defined by the build"
#endif
#ifndef SQLOCK_NEW_CLIENT
#error "SQLOCK_NEW_CLIENT (path of sqlock_mixed_client) must be defined by the build"
#endif

namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using namespace sqlock_test;
using sqlock::engine;

/// One mixed_client process, its output in files; killed if still running when dropped.
class client {
public:
    client(std::string const& program, std::vector<std::string> args, fs::path const& log_base,
           std::vector<std::string> extra_env = {}) {
        args.insert(args.begin(), program);
        std::vector<std::string> env;
        for (char** e = environ; *e != nullptr; ++e) env.emplace_back(*e);
        for (auto& e : extra_env) env.push_back(std::move(e));
        out_ = log_base.string() + ".out";
        err_ = log_base.string() + ".err";
        spawn_file_actions fa;
        fa.capture_to_files(out_, err_);
        pid_ = spawn_process(std::move(args), env, fa.get());
    }
    client(client const&) = delete;
    client& operator=(client const&) = delete;
    ~client() {
        if (pid_ > 0) {
            ::kill(pid_, SIGKILL);
            int st = 0;
            ::waitpid(pid_, &st, 0);
        }
    }

    /// Waits up to `limit` for the end; "exit 0" when it ended well, else how it ended and its stderr.
    std::string wait(std::chrono::milliseconds limit) {
        auto const deadline = std::chrono::steady_clock::now() + limit;
        while (pid_ > 0) {
            int st = 0;
            if (::waitpid(pid_, &st, WNOHANG) == pid_) {
                pid_ = -1;
                auto const how = exit_text(st);
                return how == "exit 0" ? how : how + ": " + slurp(err_);
            }
            if (std::chrono::steady_clock::now() > deadline) return "still running after its limit";
            std::this_thread::sleep_for(20ms);
        }
        return "not started";
    }
    /// The grants its summary line counts (-1 without one).
    long grants() const {
        long n = -1;
        if (std::sscanf(slurp(out_).c_str(), "grants %ld", &n) != 1) return -1;
        return n;
    }

private:
    pid_t pid_ = -1;
    std::string out_, err_;
};

class MixedVersion : public ::testing::TestWithParam<std::tuple<engine, std::string>> {
protected:
    void SetUp() override {
        e_ = std::get<0>(GetParam());
        kind_ = std::get<1>(GetParam());
        if (e_ == engine::sqlite) {
            url_ = sqlite_url(dir_.path() / "locks.db");
        } else {
            require_env(url_var(e_), url_);
            if (should_stop()) return;
        }
        if (!fs::exists(SQLOCK_OLD_CLIENT)) {
            std::string const why = std::string("no older client at ") + SQLOCK_OLD_CLIENT +
                                    ": ctest builds it first (the fixture test MixedVersion.BuildOldClient), or run "
                                    "bash scripts/old-client.sh " +
                                    fs::path(SQLOCK_OLD_CLIENT).parent_path().string();
            if (in_ci()) GTEST_FAIL() << why;
            GTEST_SKIP() << why;
        }
    }
    void TearDown() override {
        if (!raw_ || e_ == engine::sqlite) return;
        try {
            sqlock_battery::drop_audit(*raw_, e_, tables_);
            std::vector<std::string> names(64);
            *raw_ << "SELECT table_name FROM information_schema.tables WHERE table_name LIKE '" + tables_ + "%'",
                soci::into(names);
            for (auto const& t : names) *raw_ << "DROP TABLE IF EXISTS " + t;
            if (e_ == engine::mysql)
                for (auto const& r : {"_acquire_v2", "_acquire_shared", "_acquire", "_renew"})
                    *raw_ << "DROP PROCEDURE IF EXISTS " + tables_ + r;
        } catch (std::exception const& e) {
            ADD_FAILURE() << "could not drop the tables of prefix " << tables_ << ": " << e.what();
        }
    }

    /// A client of `program` ("old" or "new") taking the test's names for `seconds`.
    std::unique_ptr<client> start(std::string const& version, int i, int seconds,
                                  std::vector<std::string> extra_env = {}) {
        std::vector<std::string> args{url_, tables_, kind_, version + "-" + std::to_string(i) + "-" + random_hex(6),
                                      std::to_string(seconds)};
        args.insert(args.end(), names_.begin(), names_.end());
        return std::make_unique<client>(version == "old" ? SQLOCK_OLD_CLIENT : SQLOCK_NEW_CLIENT, std::move(args),
                                        dir_.path() / (version + "-" + std::to_string(i) + "-" + random_hex(4)),
                                        std::move(extra_env));
    }

    engine e_{};
    std::string kind_;
    temp_dir dir_;
    std::string url_;
    std::string const tables_ = "sqlt_mv" + random_hex(10);
    std::vector<std::string> const names_{random_prefix() + "a", random_prefix() + "b", random_prefix() + "c"};
    std::unique_ptr<soci::session> raw_;
};

TEST_P(MixedVersion, OlderAndNewerClientsKeepExclusionAndTokenOrderAcrossTheUpgrade) {
    // 1. The older sqlock makes the tables as it always did: no protocol record.
    {
        auto maker = start("old", 0, 1, {"SQLOCK_MIXED_CREATE_SCHEMA=1"});
        ASSERT_EQ(maker->wait(60s), "exit 0");
        EXPECT_GT(maker->grants(), 0) << "the older client took no lock alone";
    }
    raw_ = raw_session(e_, url_);
    if (e_ == engine::postgresql) *raw_ << "SET client_min_messages = warning";
    auto const facts = sqlock::inspect_database(url_, tables_).facts;
    ASSERT_EQ(facts.count("protocol"), 1u) << "the doctor's facts say nothing of the protocol";
    ASSERT_EQ(facts.at("protocol"), "") << "the older schema has a protocol record: is " << SQLOCK_OLD_CLIENT
                                        << " a client of an older sqlock?";
    sqlock_battery::install_audit(*raw_, e_, tables_);
    if (kind_ == "row") sqlock_battery::install_row_audit(*raw_, e_, tables_);

    // 2. Older clients alone.
    {
        std::vector<std::unique_ptr<client>> olds;
        for (int i = 1; i <= 2; ++i) olds.push_back(start("old", i, 2));
        for (auto& c : olds) EXPECT_EQ(c->wait(60s), "exit 0");
    }
    // 3. The upgrade: this tree's schema on the older tables.
    {
        sqlock::store upgraded(url_, {.create_schema = true, .table_prefix = tables_});
        upgraded.create_schema();
    }
    int recorded = -1;
    *raw_ << "SELECT version FROM " + tables_ + "_protocol WHERE one = 1", soci::into(recorded);
    EXPECT_EQ(recorded, sqlock::protocol_version());

    // 4. Both at once.
    std::vector<std::unique_ptr<client>> olds, news;
    for (int i = 1; i <= 2; ++i) {
        olds.push_back(start("old", 10 + i, 4));
        news.push_back(start("new", 10 + i, 4));
    }
    long old_grants = 0, new_grants = 0;
    for (auto& c : olds) {
        EXPECT_EQ(c->wait(60s), "exit 0");
        old_grants += std::max(0L, c->grants());
    }
    for (auto& c : news) {
        EXPECT_EQ(c->wait(60s), "exit 0");
        new_grants += std::max(0L, c->grants());
    }
    EXPECT_GT(old_grants, 0) << "no older client was granted beside the newer ones";
    EXPECT_GT(new_grants, 0) << "no newer client was granted beside the older ones";

    auto const audit = sqlock_battery::dump_audit(*raw_, e_, tables_);
    auto const k1 = sqlock_battery::k1_db_disjoint(audit);
    auto const k7 = sqlock_battery::k7_tokens(audit, {});
    EXPECT_TRUE(k1.ok()) << k1.summary();
    EXPECT_TRUE(k7.ok()) << k7.summary();
    // A real mix: per name, grants in the database's order pass from an older owner to a newer one and back.
    std::map<std::string, std::string> last;  // name -> "old" or "new" of its latest grant
    int old_to_new = 0, new_to_old = 0, grants = 0;
    for (auto const& r : audit) {
        if (r.kind != "grant" && r.kind != "takeover") continue;
        ++grants;
        auto const version = r.owner.substr(0, 3);
        if (auto it = last.find(r.lock); it != last.end()) {
            old_to_new += it->second == "old" && version == "new";
            new_to_old += it->second == "new" && version == "old";
        }
        last[r.lock] = version;
    }
    EXPECT_GT(old_to_new, 0) << grants << " grants audited, none handed from an older client to a newer one";
    EXPECT_GT(new_to_old, 0) << grants << " grants audited, none handed from a newer client to an older one";
}

std::string mixed_name(::testing::TestParamInfo<std::tuple<engine, std::string>> const& info) {
    return std::string(sqlock::to_string(std::get<0>(info.param))) + "_" + std::get<1>(info.param);
}

INSTANTIATE_TEST_SUITE_P(Engines, MixedVersion,
                         ::testing::Combine(::testing::Values(engine::postgresql, engine::mysql, engine::sqlite),
                                            ::testing::Values(std::string("table"), std::string("row"))),
                         mixed_name);

}  // namespace
