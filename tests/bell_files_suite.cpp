// sqlock tests — what is planted at SQLite's bell path (issue 38, items 1 and 2): a FIFO, a symbolic link, a
// directory or a file of another owner at `<database>-sqlock-bell` is refused, never waited on and never touched;
// the waiters of a store whose listener does not watch the bell mark no row (they poll); the library says so once;
// `sqlock run` still times out and honours SIGTERM; `sqlock doctor` reports it. SQLite only (the bell is SQLite's).
//
// Every library scenario runs in a forked child (this process has no threads of its own when it forks) with a
// watchdog: a call that blocks for ever (the old bell open of a FIFO) is killed after 20 s and reported, instead
// of hanging the run.
#include "cli_process.hpp"
#include "test_env.hpp"

#include <sqlock/sqlock.hpp>

#include <gtest/gtest.h>

#include <fcntl.h>
#include <pwd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <functional>
#include <iostream>
#include <thread>

namespace {

using namespace sqlock_test;
using namespace std::chrono_literals;

constexpr auto watchdog = std::chrono::seconds(20);
constexpr std::string_view warning = "the SQLite bell";

/// A scenario run in a forked child: its exit status and what it wrote on stderr.
struct child_outcome {
    bool finished = false;  ///< false: still running after the watchdog, killed
    int status = 0;
    std::string err;
    bool passed() const { return finished && WIFEXITED(status) && WEXITSTATUS(status) == 0; }
};

/// Runs `body` in a forked child with its stderr in a file. The child exits with what `body` returns (0: every
/// check held; otherwise it says why on stderr), 2 on an exception. Killed after `limit`.
child_outcome in_child(fs::path const& dir, std::function<int()> const& body,
                       std::chrono::milliseconds limit = watchdog) {
    auto const err = dir / ("child-" + random_hex(8) + ".err");
    pid_t const pid = ::fork();
    if (pid == 0) {
        int const fd = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd >= 0) ::dup2(fd, 2);
        int code = 3;
        try {
            code = body();
        } catch (std::exception const& e) {
            std::cerr << "exception: " << describe(e) << std::endl;
            code = 2;
        }
        std::cerr.flush();
        std::clog.flush();
        ::_exit(code);
    }
    child_outcome r;
    r.finished = eventually([&] { return ::waitpid(pid, &r.status, WNOHANG) == pid; }, limit);
    if (!r.finished) {
        ::kill(pid, SIGKILL);
        ::waitpid(pid, &r.status, 0);
    }
    r.err = slurp(err);
    return r;
}

std::size_t count_of(std::string const& text, std::string_view what) {
    std::size_t n = 0;
    for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + what.size())) ++n;
    return n;
}

/// The `waiters` mark of the lock row `name` (-1: no row).
long long waiters_of(std::string const& url, std::string const& name) {
    auto s = raw_session(engine::sqlite, url);
    long long waiters = -1;
    soci::indicator ind = soci::i_null;
    *s << "SELECT waiters FROM sqlock_locks WHERE name = :n", soci::use(name), soci::into(waiters, ind);
    return ind == soci::i_ok ? waiters : -1;
}

/// A file outside the database's directory whose times and content must never change.
struct outside_file {
    fs::path path;
    struct stat before {};
    explicit outside_file(fs::path p) : path(std::move(p)) {
        std::ofstream(path) << "root-only secret\n";
        ::chmod(path.c_str(), 0600);
        timespec const old[2] = {{1577836800, 0}, {1577836800, 0}};  // 2020-01-01
        ::utimensat(AT_FDCWD, path.c_str(), old, 0);
        ::stat(path.c_str(), &before);
    }
    std::string untouched() const {
        struct stat now {};
        if (::stat(path.c_str(), &now) != 0) return "it is gone";
        if (now.st_mtim.tv_sec != before.st_mtim.tv_sec || now.st_mtim.tv_nsec != before.st_mtim.tv_nsec)
            return "its mtime changed";
        if (now.st_atim.tv_sec != before.st_atim.tv_sec || now.st_atim.tv_nsec != before.st_atim.tv_nsec)
            return "its atime changed";
        if (now.st_ctim.tv_sec != before.st_ctim.tv_sec || now.st_ctim.tv_nsec != before.st_ctim.tv_nsec)
            return "its ctime changed";
        if (slurp(path) != "root-only secret\n") return "its content changed";
        return {};
    }
};

std::string bell_of(fs::path const& db) { return db.string() + "-sqlock-bell"; }

class BellFiles : public ::testing::Test {
protected:
    temp_dir dir_;
    fs::path db_ = dir_.path() / "locks.db";
    std::string url_ = sqlite_url(db_);
    std::string bell_ = bell_of(db_);

    void SetUp() override {
        auto r = in_child(dir_.path(), [&] {
            sqlock::store db(url_, {.create_schema = true});
            return 0;
        });
        ASSERT_TRUE(r.passed()) << r.err;
        fs::remove(bell_);
    }
};

// A FIFO planted before the store: the waiting acquire of a held lock times out within its wait (it was
// blocked for ever, in the bell's open), its store says so once, marks no row, and the FIFO stays a FIFO.
TEST_F(BellFiles, AFifoBellIsRefusedAndAWaitingAcquireTimesOut) {
    ASSERT_EQ(::mkfifo(bell_.c_str(), 0666), 0);
    auto r = in_child(dir_.path(), [&] {
        sqlock::store holder_db(url_);
        auto holder = sqlock::table_locker(holder_db);
        auto held = holder.try_acquire("job");
        if (!held) return std::cerr << "the free lock was not granted\n", 1;
        sqlock::store db(url_);
        auto waiter = sqlock::table_locker(db);
        for (int i = 0; i < 2; ++i) {
            try {
                (void)waiter.acquire("job", 1s);
                return std::cerr << "a held lock was granted\n", 1;
            } catch (sqlock::timeout const&) {}
        }
        if (auto w = waiters_of(url_, "job"); w != 0)
            return std::cerr << "the waiter marked the row (waiters = " << w << ") with no listener\n", 1;
        std::cerr << "--- before the release" << std::endl;
        return 0;
    });
    ASSERT_TRUE(r.finished) << "a waiting acquire (wait 1 s) with a FIFO at " << bell_
                            << " was still blocked after 20 s: killed\n"
                            << r.err;
    EXPECT_TRUE(r.passed()) << r.err;
    auto const before_release = r.err.substr(0, r.err.find("--- before the release"));
    EXPECT_EQ(count_of(before_release, warning), 1u) << "the store says once that the bell is refused:\n" << r.err;
    EXPECT_NE(before_release.find("FIFO"), std::string::npos) << r.err;
    struct stat st {};
    ASSERT_EQ(::lstat(bell_.c_str(), &st), 0);
    EXPECT_TRUE(S_ISFIFO(st.st_mode)) << "the planted FIFO is left as it is";
}

// A FIFO renamed over the bell under a running listener: the listener's re-arm does not block, waits still
// end within their wait, and the store's destructor returns (it joined a thread blocked in open for ever).
TEST_F(BellFiles, AFifoSwappedInUnderARunningListenerLetsTheStoreClose) {
    auto r = in_child(dir_.path(), [&] {
        {
            sqlock::store db(url_);
            auto locks = sqlock::table_locker(db);
            locks.acquire("job", 1s).release();  // the listener is armed on a regular bell
            auto const fifo = dir_.path() / "planted";
            if (::mkfifo(fifo.c_str(), 0666) != 0 || ::rename(fifo.c_str(), bell_.c_str()) != 0)
                return std::cerr << "could not plant the FIFO\n", 1;
            std::this_thread::sleep_for(300ms);  // the listener sees its bell go and looks at the new one
            sqlock::store holder_db(url_);
            auto holder = sqlock::table_locker(holder_db);
            auto held = holder.try_acquire("job2");
            try {
                (void)locks.acquire("job2", 500ms);
                return std::cerr << "a held lock was granted\n", 1;
            } catch (sqlock::timeout const&) {}
            std::cerr << "--- closing the stores" << std::endl;
        }
        std::cerr << "--- closed" << std::endl;
        return 0;
    });
    ASSERT_TRUE(r.finished) << "a store whose bell was replaced by a FIFO did not close within 20 s: killed\n" << r.err;
    EXPECT_TRUE(r.passed()) << r.err;
    EXPECT_NE(r.err.find("--- closed"), std::string::npos) << r.err;
}

// A symbolic link planted at the bell path: no release, neither a holder's after a waiter nor the operator's
// force_release (which always rings), changes the times of the file it points to; the waiter marks nothing.
TEST_F(BellFiles, ASymlinkBellIsNeverFollowed) {
    temp_dir elsewhere;
    outside_file target(elsewhere.path() / "root-only");
    ASSERT_EQ(::symlink(target.path.c_str(), bell_.c_str()), 0);
    auto r = in_child(dir_.path(), [&] {
        sqlock::store holder_db(url_);
        auto holder = sqlock::table_locker(holder_db);
        auto held = holder.try_acquire("job");
        if (!held) return std::cerr << "the free lock was not granted\n", 1;
        sqlock::store db(url_);
        auto waiter = sqlock::table_locker(db);
        try {
            (void)waiter.acquire("job", 300ms);
            return std::cerr << "a held lock was granted\n", 1;
        } catch (sqlock::timeout const&) {}
        if (auto w = waiters_of(url_, "job"); w != 0)
            return std::cerr << "the waiter marked the row (waiters = " << w << ") with no listener\n", 1;
        held->release();
        auto again = holder.try_acquire("job");
        (void)sqlock::force_release(holder_db, "job");  // the operator's release rings whatever the mark
        return 0;
    });
    ASSERT_TRUE(r.finished) << r.err;
    EXPECT_TRUE(r.passed()) << r.err;
    EXPECT_EQ(target.untouched(), "") << "a release rang through the link planted at " << bell_ << "\n" << r.err;
    struct stat st {};
    ASSERT_EQ(::lstat(bell_.c_str(), &st), 0);
    EXPECT_TRUE(S_ISLNK(st.st_mode));
}

// A regular file of another owner (nobody) at the bell path: refused like the rest, and never touched.
TEST_F(BellFiles, ABellOfAnotherOwnerIsRefusedAndNeverTouched) {
    if (::geteuid() != 0) {
        if (in_ci()) GTEST_FAIL() << "not root and CI is set: run the tests as root (a file of another owner)";
        GTEST_SKIP() << "needs root to make a file of another owner (not CI, so skipping)";
    }
    auto const* nobody = ::getpwnam("nobody");
    ASSERT_NE(nobody, nullptr);
    { std::ofstream(bell_) << ""; }
    ASSERT_EQ(::chown(bell_.c_str(), nobody->pw_uid, nobody->pw_gid), 0);
    outside_file planted(bell_);  // its times are what must not change
    auto r = in_child(dir_.path(), [&] {
        sqlock::store holder_db(url_);
        auto holder = sqlock::table_locker(holder_db);
        auto held = holder.try_acquire("job");
        sqlock::store db(url_);
        auto waiter = sqlock::table_locker(db);
        try {
            (void)waiter.acquire("job", 300ms);
            return std::cerr << "a held lock was granted\n", 1;
        } catch (sqlock::timeout const&) {}
        if (auto w = waiters_of(url_, "job"); w != 0)
            return std::cerr << "the waiter marked the row (waiters = " << w << ")\n", 1;
        (void)sqlock::force_release(holder_db, "job");
        return 0;
    });
    ASSERT_TRUE(r.finished) << r.err;
    EXPECT_TRUE(r.passed()) << r.err;
    EXPECT_NE(r.err.find("owned by uid " + std::to_string(nobody->pw_uid)), std::string::npos) << r.err;
    EXPECT_EQ(planted.untouched(), "") << "the bell of another owner was touched\n" << r.err;
}

// ------------------------------------------------------------------ through the CLI

// `sqlock run --wait 1s` with a FIFO at the bell path and the lock held: exits 75 after its wait (it stayed
// 605 s); a run waiting longer leaves at SIGTERM (128 + 15), as the docs say of a signal during the wait.
TEST_F(BellFiles, RunWithAFifoBellTimesOutAndHonoursSigterm) {
    ASSERT_EQ(::mkfifo(bell_.c_str(), 0666), 0);
    cli_process holder({"run", "--db", url_, "--name", "job", "--", "sleep", "120"}, dir_.path());
    ASSERT_TRUE(eventually([&] { return waiters_of(url_, "job") >= 0; }, 20s)) << "the holder never held the lock";

    cli_process waiter({"run", "--db", url_, "--name", "job", "--wait", "1s", "--", "true"}, dir_.path());
    auto r = waiter.wait(watchdog);
    EXPECT_EQ(r.code(), 75) << r.describe();
    EXPECT_EQ(count_of(r.err, warning), 1u) << r.describe();

    cli_process patient({"run", "--db", url_, "--name", "job", "--wait", "60s", "--", "true"}, dir_.path());
    std::this_thread::sleep_for(1500ms);  // inside its wait (not asserted: a late signal cancels it just the same)
    ::kill(patient.pid(), SIGTERM);
    auto p = patient.wait(watchdog);
    EXPECT_TRUE(WIFEXITED(p.status)) << p.describe();
    EXPECT_EQ(p.code(), 128 + SIGTERM) << p.describe();
    ::kill(holder.pid(), SIGTERM);
    (void)holder.wait(watchdog);
}

// `sqlock doctor` names a bell that stores refuse, and what to do; a usable or absent one is ok.
TEST_F(BellFiles, DoctorReportsABadBell) {
    auto doctor = [&] { return cli_process({"doctor", "--db", url_}, dir_.path()).wait(60s); };
    {
        auto r = doctor();
        EXPECT_NE(r.out.find("bell: the bell " + bell_ + " is usable"), std::string::npos) << r.describe();
    }
    temp_dir elsewhere;
    outside_file target(elsewhere.path() / "root-only");
    struct plant {
        std::string kind;
        std::function<int()> make;
        std::string said;
    };
    std::vector<plant> plants = {
        {"fifo", [&] { return ::mkfifo(bell_.c_str(), 0666); }, "FIFO"},
        {"symlink", [&] { return ::symlink(target.path.c_str(), bell_.c_str()); }, "symbolic link"},
        {"directory", [&] { return ::mkdir(bell_.c_str(), 0755); }, "directory"},
    };
    if (::geteuid() == 0)
        plants.push_back({"another owner",
                          [&] {
                              std::ofstream(bell_) << "";
                              auto const* nobody = ::getpwnam("nobody");
                              return nobody == nullptr ? -1 : ::chown(bell_.c_str(), nobody->pw_uid, nobody->pw_gid);
                          },
                          "owned by uid"});
    for (auto const& p : plants) {
        SCOPED_TRACE(p.kind);
        std::error_code ec;
        fs::remove_all(bell_, ec);
        ASSERT_EQ(p.make(), 0);
        auto r = doctor();
        EXPECT_EQ(r.code(), 1) << "a warning: " << r.describe();
        EXPECT_NE(r.out.find("warning bell: the bell " + bell_ + " is refused"), std::string::npos) << r.describe();
        EXPECT_NE(r.out.find(p.said), std::string::npos) << r.describe();
        EXPECT_NE(r.out.find("fix: remove it (rm -- '" + bell_ + "'"), std::string::npos) << r.describe();
        EXPECT_EQ(r.out.find("worst: ok"), std::string::npos) << r.describe();
    }
    EXPECT_EQ(target.untouched(), "");
}

}  // namespace
