// The file-system nemesis (issue 38): whoever may write a database's directory, or a textfile's, plants a FIFO,
// a symbolic link (to a root-only file outside the directory), a directory, a regular file of another owner and
// a hard link at every path that sqlock, its tools or SQLite create or open there:
//   - SQLite's bell `<database>-sqlock-bell` (the library: the listener opens it, a release touches it);
//   - `sqlock run --metrics-textfile PATH`: PATH, and the temporary name an older sqlock wrote first
//     (`PATH.tmp.<pid>`, planted before the run by a shell that then execs sqlock with its own pid);
//   - SQLite's own `<database>-wal`, `-shm` and `-journal`.
// For each plant, every call goes through the CLI binaries and must end within a watchdog (20 s for a 1 s
// wait: a hang is a failure, never a timing assertion) with its documented exit code (75 after its wait, 0 for
// COMMAND's own, 69 with a message when the database cannot be opened), and the planted file, the file a link
// points to and a hard link's file are left untouched (times and content). Deterministic, a few seconds.
//   sqlock_file_nemesis_tests  FileNemesis.<Test> (labels fault-smoke;faults), SQLite only, no server
#include "cli_process.hpp"
#include "run_command.hpp"
#include "test_env.hpp"

#include <gtest/gtest.h>

#include <fcntl.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <functional>

namespace {

using namespace sqlock_test;
using namespace std::chrono_literals;

constexpr auto watchdog = std::chrono::seconds(20);

enum class plant { fifo, symlink, directory, other_owner, hard_link };

std::string name_of(plant p) {
    switch (p) {
        case plant::fifo: return "a FIFO";
        case plant::symlink: return "a symbolic link to a root-only file outside";
        case plant::directory: return "a directory";
        case plant::other_owner: return "a file of nobody's";
        case plant::hard_link: return "a hard link to a root-only file outside";
    }
    return "?";
}

/// The plants this process can make (a file of another owner needs root).
std::vector<plant> plants(bool hard_links) {
    std::vector<plant> out = {plant::fifo, plant::symlink, plant::directory};
    if (::geteuid() == 0 && ::getpwnam("nobody") != nullptr) out.push_back(plant::other_owner);
    if (hard_links) out.push_back(plant::hard_link);
    return out;
}

struct stamp {
    bool exists = false;
    mode_t type = 0;
    timespec mtime{}, ctime{};  // not atime: reading the content (ours too) may set it
    std::string content;
};

stamp stamp_of(fs::path const& p) {
    stamp s;
    struct stat st {};
    if (::lstat(p.c_str(), &st) != 0) return s;
    s.exists = true;
    s.type = st.st_mode & S_IFMT;
    s.mtime = st.st_mtim;
    s.ctime = st.st_ctim;
    if (S_ISREG(st.st_mode)) s.content = slurp(p);
    return s;
}

bool same_time(timespec a, timespec b) { return a.tv_sec == b.tv_sec && a.tv_nsec == b.tv_nsec; }

/// Empty when `now` is `before` (type, times, content); else what changed.
/// (`with_ctime` false: a hard link planted or removed changes the link count, so the ctime, of its file.)
std::string changed(stamp const& before, stamp const& now, bool with_ctime = true) {
    if (before.exists != now.exists) return now.exists ? "it appeared" : "it is gone";
    if (before.type != now.type) return "its type changed";
    if (!same_time(before.mtime, now.mtime)) return "its mtime changed";
    if (with_ctime && !same_time(before.ctime, now.ctime)) return "its ctime changed";
    if (before.content != now.content) return "its content changed";
    return {};
}

/// One database directory, a directory outside it with a root-only file, and the plants.
class FileNemesis : public ::testing::Test {
protected:
    temp_dir dir_, outside_;
    fs::path db_ = dir_.path() / "locks.db";
    std::string url_ = sqlite_url(db_);
    fs::path secret_ = outside_.path() / "root-only";

    void SetUp() override {
        auto r = cli_process({"schema", "--apply", "--db", url_}, dir_.path()).wait(60s);
        ASSERT_EQ(r.code(), 0) << r.describe();
        std::ofstream(secret_) << "root-only secret\n";
        ::chmod(secret_.c_str(), 0600);
        timespec const old[2] = {{1577836800, 0}, {1577836800, 0}};  // 2020-01-01: any touch shows
        ::utimensat(AT_FDCWD, secret_.c_str(), old, 0);
    }

    /// Plants `p` at `path`.
    void make(plant p, fs::path const& path) {
        std::error_code ec;
        fs::remove_all(path, ec);
        switch (p) {
            case plant::fifo: ASSERT_EQ(::mkfifo(path.c_str(), 0666), 0); break;
            case plant::symlink: ASSERT_EQ(::symlink(secret_.c_str(), path.c_str()), 0); break;
            case plant::directory: ASSERT_EQ(::mkdir(path.c_str(), 0777), 0); break;
            case plant::other_owner: {
                std::ofstream(path) << "nobody's\n";
                auto const* nobody = ::getpwnam("nobody");
                ASSERT_EQ(::chown(path.c_str(), nobody->pw_uid, nobody->pw_gid), 0);
                timespec const old[2] = {{1577836800, 0}, {1577836800, 0}};
                ::utimensat(AT_FDCWD, path.c_str(), old, AT_SYMLINK_NOFOLLOW);
                break;
            }
            case plant::hard_link: ASSERT_EQ(::link(secret_.c_str(), path.c_str()), 0); break;
        }
    }

    /// The shell command that plants `p` at `path` (for a name known only in the shell: `$$`).
    std::string make_in_shell(plant p, std::string const& path) {
        std::string const q = "'" + secret_.string() + "'";
        switch (p) {
            case plant::fifo: return "mkfifo " + path;
            case plant::symlink: return "ln -s " + q + " " + path;
            case plant::directory: return "mkdir " + path;
            case plant::other_owner: return "echo nobody > " + path + " && chown nobody " + path;
            case plant::hard_link: return "ln " + q + " " + path;
        }
        return "false";
    }

    cli_result sqlock(std::vector<std::string> args) {
        return cli_process(std::move(args), dir_.path()).wait(watchdog);
    }

    /// `sqlock run --name NAME -- sleep 120`, once it holds NAME.
    std::unique_ptr<cli_process> holder(std::string const& name) {
        auto h = std::make_unique<cli_process>(std::vector<std::string>{"run", "--db", url_, "--name", name, "--",
                                                                        "sleep", "120"},
                                               dir_.path());
        bool const held = eventually(
            [&] {
                auto r = cli_process({"list", "--db", url_}, dir_.path()).wait(watchdog);
                return r.out.find(name) != std::string::npos;
            },
            20s);
        if (!held) ADD_FAILURE() << "the holder of " << name << " never held it";
        return h;
    }
};

// The bell: a waiting run of a held lock ends after its wait (75), the operator's release (which always
// rings) and the holder's touch nothing, doctor names the plant; a hard link (nlink 2) is refused too.
TEST_F(FileNemesis, BellPlants) {
    auto const bell = fs::path(db_.string() + "-sqlock-bell");
    for (auto p : plants(true)) {
        SCOPED_TRACE(name_of(p) + " at " + bell.string());
        make(p, bell);
        auto const planted = stamp_of(bell);
        auto const secret = stamp_of(secret_);
        {
            auto h = holder("bell-job");
            auto waiter = sqlock({"run", "--db", url_, "--name", "bell-job", "--wait", "1s", "--", "true"});
            EXPECT_EQ(waiter.code(), 75) << "a waiting run ends after its wait: " << waiter.describe();
            auto released = sqlock({"release", "--db", url_, "--name", "bell-job", "--force"});
            EXPECT_EQ(released.code(), 0) << released.describe();
        }  // the holder is killed
        auto doctor = sqlock({"doctor", "--db", url_});
        EXPECT_EQ(doctor.code(), 1) << doctor.describe();
        EXPECT_NE(doctor.out.find("is refused"), std::string::npos) << doctor.describe();
        EXPECT_EQ(changed(planted, stamp_of(bell)), "") << "the planted " << name_of(p) << " was touched";
        EXPECT_EQ(changed(secret, stamp_of(secret_), p != plant::hard_link), "")
            << "the root-only file outside was touched";
    }
}

// `--metrics-textfile PATH` with a plant at PATH: the run's exit code stays COMMAND's, PATH is replaced by the
// metrics (rename replaces the plant itself, never what a link points to) or, over a directory, a warning
// says it could not be written; nothing outside is touched.
TEST_F(FileNemesis, TextfilePlants) {
    auto const textfile = dir_.path() / "metrics" / "run.prom";
    fs::create_directories(textfile.parent_path());
    for (auto p : plants(true)) {
        SCOPED_TRACE(name_of(p) + " at " + textfile.string());
        make(p, textfile);
        auto const secret = stamp_of(secret_);
        auto r =
            sqlock({"run", "--db", url_, "--name", "tf-job", "--metrics-textfile", textfile.string(), "--", "true"});
        EXPECT_EQ(r.code(), 0) << "COMMAND's exit code: " << r.describe();
        if (p == plant::directory) {
            EXPECT_NE(r.err.find("could not write --metrics-textfile"), std::string::npos) << r.describe();
        } else {
            auto const now = stamp_of(textfile);
            EXPECT_EQ(now.type, S_IFREG) << r.describe();
            EXPECT_NE(now.content.find("sqlock_run_outcome"), std::string::npos) << r.describe();
        }
        EXPECT_EQ(changed(secret, stamp_of(secret_), p != plant::hard_link), "")
            << "the root-only file outside was touched";
        std::error_code ec;
        fs::remove_all(textfile, ec);
    }
}

// `PATH.tmp.<pid>`, the temporary name of an older sqlock, planted by a shell that then becomes the run (exec
// keeps its pid): the run ends, writes PATH, and neither the plant nor the file outside is touched.
TEST_F(FileNemesis, TextfileTemporaryNamePlants) {
    auto const textfile = dir_.path() / "metrics" / "run.prom";
    fs::create_directories(textfile.parent_path());
    for (auto p : plants(true)) {
        SCOPED_TRACE(name_of(p) + " at " + textfile.string() + ".tmp.<pid>");
        auto const secret = stamp_of(secret_);
        std::string const tmp = "'" + textfile.string() + "'.tmp.$$";
        std::string const script = make_in_shell(p, tmp) + " && exec '" + std::string(SQLOCK_CLI) + "' run --db '" +
                                   url_ + "' --name tf-tmp-job --metrics-textfile '" + textfile.string() + "' -- true";
        auto r = run_command({"/bin/sh", "-c", script}, {}, watchdog);
        ASSERT_TRUE(r.finished) << "the run was still going after 20 s (killed): " << r.err;
        EXPECT_TRUE(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0) << exit_text(r.status) << "\n" << r.err;
        auto const now = stamp_of(textfile);
        EXPECT_EQ(now.type, S_IFREG) << r.err;
        EXPECT_NE(now.content.find("sqlock_run_outcome"), std::string::npos) << r.err;
        EXPECT_EQ(changed(secret, stamp_of(secret_), p != plant::hard_link), "")
            << "the root-only file outside was written through the plant";
        std::vector<stamp> left;  // the plant, as planted; no temporary file of the run
        for (auto const& e : fs::directory_iterator(textfile.parent_path()))
            if (e.path().filename().string().starts_with("run.prom.tmp.")) left.push_back(stamp_of(e.path()));
        mode_t const type = p == plant::fifo        ? S_IFIFO
                            : p == plant::symlink   ? S_IFLNK
                            : p == plant::directory ? S_IFDIR
                                                    : S_IFREG;
        EXPECT_EQ(left.size(), 1u) << r.err;
        if (left.size() == 1) {
            EXPECT_EQ(left[0].type, type) << r.err;
        }
        std::error_code ec;
        fs::remove_all(textfile.parent_path(), ec);
        fs::create_directories(textfile.parent_path());
    }
}

// SQLite's own files beside the database: SQLite opens them itself. The run ends within its wait, either
// working (a file of another owner: root may use it) or exiting 69 with a message; nothing outside is touched.
TEST_F(FileNemesis, SqliteFilePlants) {
    for (std::string suffix : {"-wal", "-shm", "-journal"}) {
        auto const path = fs::path(db_.string() + suffix);
        for (auto p : plants(false)) {
            SCOPED_TRACE(name_of(p) + " at " + path.string());
            make(p, path);
            auto const secret = stamp_of(secret_);
            auto r = sqlock({"run", "--db", url_, "--name", "sq-job", "--wait", "1s", "--", "true"});
            EXPECT_TRUE(r.code() == 0 || r.code() == 69) << r.describe();
            if (r.code() == 69) {
                EXPECT_NE(r.err.find("sqlock:"), std::string::npos) << r.describe();
            }
            EXPECT_EQ(changed(secret, stamp_of(secret_), p != plant::hard_link), "")
                << "the root-only file outside was touched";
            std::error_code ec;
            fs::remove_all(path, ec);
        }
    }
}

}  // namespace
