// sqlock tests — the `sqlock` command (issue 5), as real processes on every
// engine: Engines/Cli.<Test>/<engine>, Engines/CliCoordination.<Test>/<engine> (issue 22: run --limit,
// run --shared, elect, leader, semaphore --forget, list of permits, readers and leaders), CliMajority.<Test>
// (several --db: PostgreSQL, MariaDB and an SQLite file as the members of a majority), plus
// CliBasics.<Test> (no server).
//
// Every test runs the built binary (SQLOCK_CLI) with posix_spawn, stdout and
// stderr captured to files, and asserts exit codes, output and what COMMAND
// recorded in marker files. Nothing is timed: waits for an event are bounded
// polls (a hung process fails the test instead of hanging it).
//
// PostgreSQL and MariaDB come from SQLOCK_TEST_PG_URL / SQLOCK_TEST_MYSQL_URL
// (scripts/test-servers.sh start); SQLite runs on a fresh file per test. Lock
// names carry a random per-test prefix.
#include "cli_process.hpp"
#include "fault_proxy.hpp"
#include "metrics_text.hpp"
#include "test_env.hpp"
#include "test_process.hpp"

#include <sqlock/sqlock.hpp>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#ifndef SQLOCK_CLI
#error "SQLOCK_CLI (path of the sqlock binary) must be defined by the build"
#endif

namespace {

using namespace std::chrono_literals;
using namespace sqlock_test;
using sqlock::engine;

// ------------------------------------------------------------------ running the binary

std::string trim(std::string s) {
    while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
    return s;
}

/// One line on stderr, prefixed, without library or SOCI internals.
void expect_one_error_line(cli_result const& r) {
    EXPECT_EQ(r.err.rfind("sqlock: ", 0), 0u) << r.describe();
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.describe();
    for (char const* internal : {"soci", "SOCI", "Cannot establish", "std::", "terminate", "what()"})
        EXPECT_EQ(r.err.find(internal), std::string::npos) << internal << " in " << r.describe();
}

/// Exactly one line of sqlock's own on stderr, which COMMAND shares: a shell
/// whose child was signalled may add its own ("Terminated").
void expect_one_line_of_ours(cli_result const& r) {
    std::istringstream lines(r.err);
    int ours = 0;
    for (std::string line; std::getline(lines, line);) ours += line.rfind("sqlock: ", 0) == 0 ? 1 : 0;
    EXPECT_EQ(ours, 1) << r.describe();
}

/// A shell snippet for COMMAND: sh -c SCRIPT sh DIR, so scripts name files "$1/...".
std::vector<std::string> sh(std::string const& script, fs::path const& dir) {
    return {"sh", "-c", script, "sh", dir.string()};
}

/// "sqlock run" arguments: the run flags, `--`, then COMMAND.
std::vector<std::string> run_args(std::vector<std::string> flags, std::vector<std::string> const& command) {
    flags.insert(flags.begin(), "run");
    flags.push_back("--");
    flags.insert(flags.end(), command.begin(), command.end());
    return flags;
}

/// COMMAND for a holder: records its environment in $1/<tag>.env, marks
/// $1/<tag>.started, waits for $1/<tag>.go, marks $1/<tag>.done.
std::string holder_script(std::string const& tag) {
    return "printf '%s\\n%s\\n%s\\n' \"$SQLOCK_NAME\" \"$SQLOCK_OWNER\" \"$SQLOCK_TOKEN\" > \"$1/" + tag +
           ".env.tmp\" && mv \"$1/" + tag + ".env.tmp\" \"$1/" + tag + ".env\"; touch \"$1/" + tag +
           ".started\"; while [ ! -e \"$1/" + tag + ".go\" ]; do sleep 0.02; done; touch \"$1/" + tag + ".done\"";
}

struct holder_env {
    std::string name, owner;
    long long token = 0;
};

holder_env read_env(fs::path const& file) {
    std::ifstream in(file);
    holder_env e;
    std::getline(in, e.name);
    std::getline(in, e.owner);
    in >> e.token;
    return e;
}

bool present(fs::path const& p) { return fs::exists(p); }

/// The pid a COMMAND's process wrote into `file` (0 if none).
pid_t read_pid(fs::path const& file) {
    pid_t pid = 0;
    std::ifstream(file) >> pid;
    return pid;
}

/// `pid` exists and is not a zombie (a dead process nobody reaped yet).
bool running(pid_t pid) {
    if (pid <= 0 || ::kill(pid, 0) != 0) return false;
    std::string stat = slurp("/proc/" + std::to_string(pid) + "/stat");
    auto paren = stat.rfind(')');
    return paren == std::string::npos || paren + 2 >= stat.size() || stat[paren + 2] != 'Z';
}

/// Shell text that starts `sh -c BODY sh "$1"` in the background; BODY first
/// writes its own pid to "$1/<tag>.pid" (atomically).
std::string background(std::string const& tag, std::string const& body) {
    std::string script =
        "echo $$ > \"$1/" + tag + ".pid.tmp\"; mv \"$1/" + tag + ".pid.tmp\" \"$1/" + tag + ".pid\"; " + body;
    std::string quoted = "'";
    for (char c : script) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
    quoted += "'";
    return "sh -c " + quoted + " sh \"$1\" &";
}

/// Kills the processes whose pids were recorded, at scope exit (what a failed
/// test leaves running).
struct pid_files_killer {
    std::vector<fs::path> files;
    ~pid_files_killer() {
        for (auto const& f : files)
            if (pid_t pid = read_pid(f); pid > 0 && running(pid)) ::kill(pid, SIGKILL);
    }
};

// ------------------------------------------------------------------ the per-engine fixture

/// The engine_fixture, without a store of its own (SetUp creates the lock
/// tables and closes it), and a directory for the processes' files.
class Cli : public engine_fixture {
protected:
    void open_store() override { sqlock::store(url_, {.create_schema = true}); }

    fs::path const& dir() const { return files_.path(); }
    fs::path file(std::string const& leaf) const { return files_.path() / leaf; }

    std::unique_ptr<cli_process> start(std::vector<std::string> args, env_changes env = {}) {
        return std::make_unique<cli_process>(std::move(args), dir(), std::move(env));
    }
    cli_result cli(std::vector<std::string> args, env_changes env = {}) {
        return cli_process(std::move(args), dir(), std::move(env)).wait();
    }
    /// `sqlock run --db URL --name NAME <flags> -- COMMAND`
    std::vector<std::string> run(std::string const& name, std::vector<std::string> const& command,
                                 std::vector<std::string> flags = {}) {
        flags.insert(flags.begin(), {"--db", url_, "--name", name});
        return run_args(std::move(flags), command);
    }

    /// Starts a holder of `name` (see holder_script) and waits until COMMAND runs.
    std::unique_ptr<cli_process> start_holder(std::string const& name, std::string const& tag,
                                              std::vector<std::string> flags = {}) {
        auto p = start(run(name, sh(holder_script(tag), dir()), std::move(flags)));
        bool started = eventually([&] { return present(file(tag + ".started")) || p->finished(); }, 30s);
        EXPECT_TRUE(started && present(file(tag + ".started")))
            << "holder " << tag << " did not start COMMAND: " << p->wait(1s).describe();
        return p;
    }

    /// Lets the holder's COMMAND finish and checks sqlock exits 0.
    void finish_holder(cli_process& p, std::string const& tag) {
        std::ofstream(file(tag + ".go")).put('\n');
        auto r = p.wait();
        EXPECT_EQ(r.code(), 0) << r.describe();
        EXPECT_TRUE(present(file(tag + ".done")));
    }

    temp_dir files_;
};

// ------------------------------------------------------------------ run: exclusion

TEST_P(Cli, OfTwoConcurrentRunsOneRunsTheOtherExits75) {
    for (int round = 0; round < 3; ++round) {
        std::string const name = n("nightly-report");
        std::string const a = "a" + std::to_string(round), b = "b" + std::to_string(round);
        auto pa = start(run(name, sh(holder_script(a), dir())));
        auto pb = start(run(name, sh(holder_script(b), dir())));

        // The loser exits 75 while the winner's COMMAND waits for its go file.
        ASSERT_TRUE(eventually([&] { return pa->finished() || pb->finished(); }, 60s)) << "neither run exited";
        bool const a_lost = pa->finished();
        auto& loser = a_lost ? *pa : *pb;
        auto& winner = a_lost ? *pb : *pa;
        std::string const lt = a_lost ? a : b, wt = a_lost ? b : a;
        auto lr = loser.wait();
        EXPECT_EQ(lr.code(), 75) << lr.describe();
        EXPECT_EQ(lr.out, "") << lr.describe();
        EXPECT_EQ(lr.err, "") << "a busy lock is silent when stderr is not a terminal: " << lr.describe();
        EXPECT_FALSE(present(file(lt + ".started"))) << "the loser's COMMAND ran";

        ASSERT_TRUE(eventually([&] { return present(file(wt + ".started")); }, 30s)) << winner.wait(1s).describe();
        EXPECT_FALSE(winner.finished());
        auto held = row(name);
        ASSERT_TRUE(held.has_value());
        EXPECT_EQ(held->owner, read_env(file(wt + ".env")).owner);
        finish_holder(winner, wt);
        EXPECT_FALSE(row(name).has_value()) << "the lock row is left after COMMAND exited";
    }
}

TEST_P(Cli, ConflictExitCodeReplaces75) {
    std::string const name = n("conflict-code");
    auto holder = start_holder(name, "h");
    for (std::string code : {"0", "3", "255"}) {
        auto r = cli(run(name, sh("touch \"$1/ran\"", dir()), {"--conflict-exit-code", code}));
        EXPECT_EQ(r.code(), std::stoi(code)) << r.describe();
        EXPECT_EQ(r.err, "");
        EXPECT_FALSE(present(file("ran")));
    }
    finish_holder(*holder, "h");
    auto r = cli(run(name, sh("touch \"$1/ran\"", dir()), {"--conflict-exit-code", "3"}));
    EXPECT_EQ(r.code(), 0) << r.describe();
    EXPECT_TRUE(present(file("ran")));
}

TEST_P(Cli, WaitHandsTheLockOverWhenTheHolderExits) {
    std::string const name = n("hand-off");
    auto holder = start_holder(name, "a");
    auto waiter = start(run(name,
                            sh("printf '%s\\n' \"$SQLOCK_TOKEN\" > \"$1/b.token\"; "
                               "if [ -e \"$1/a.done\" ]; then touch \"$1/b.after-a\"; fi",
                               dir()),
                            {"--wait", "60s"}));
    // While the holder's COMMAND runs, the waiter's COMMAND has not started.
    EXPECT_FALSE(waiter->finished());
    EXPECT_FALSE(present(file("b.token")));
    finish_holder(*holder, "a");
    auto r = waiter->wait();
    EXPECT_EQ(r.code(), 0) << r.describe();
    EXPECT_TRUE(present(file("b.after-a"))) << "the waiter's COMMAND ran before the holder's had finished";
    long long token_b = 0;
    std::ifstream(file("b.token")) >> token_b;
    EXPECT_GT(token_b, read_env(file("a.env")).token) << "fencing tokens must increase across the hand-off";
    EXPECT_FALSE(row(name).has_value());
}

TEST_P(Cli, WaitRunsOutWithTheConflictExitCode) {
    std::string const name = n("wait-runs-out");
    auto holder = start_holder(name, "h");
    auto r = cli(run(name, sh("touch \"$1/ran\"", dir()), {"--wait", "300ms"}));
    EXPECT_EQ(r.code(), 75) << r.describe();
    EXPECT_FALSE(present(file("ran")));
    auto r2 = cli(run(name, sh("touch \"$1/ran\"", dir()), {"--wait", "250ms", "--conflict-exit-code", "9"}));
    EXPECT_EQ(r2.code(), 9) << r2.describe();
    finish_holder(*holder, "h");
}

TEST_P(Cli, MetricsTextfileSaysHowEachRunEnded) {
    std::string const name = n("textfile");
    auto const prom = file("job.prom");
    auto const flags = [&](std::vector<std::string> more = {}) {
        more.insert(more.begin(), {"--metrics-textfile", prom.string()});
        return more;
    };
    // The outcome's series is 1, the others 0; exit code, duration and wait as measured.
    auto const outcome = [&](std::string const& expected, int code) {
        auto const text = slurp(prom);
        auto const s = parse_exposition(text);
        for (char const* o : {"ok", "failed", "busy", "timeout", "lost", "error"})
            EXPECT_EQ(value_of(s, "sqlock_run_outcome", {{"name", name}, {"outcome", o}}), o == expected ? 1 : 0)
                << o << " in:\n"
                << text;
        EXPECT_EQ(value_of(s, "sqlock_run_exit_code", {{"name", name}}), code) << text;
        EXPECT_GT(value_of(s, "sqlock_run_duration_seconds", {{"name", name}}).value_or(0), 0) << text;
        EXPECT_GT(value_of(s, "sqlock_run_last_timestamp_seconds", {{"name", name}}).value_or(0), 1.7e9) << text;
        return value_of(s, "sqlock_run_lock_wait_seconds", {{"name", name}}).value_or(-1);
    };

    auto holder = start_holder(name, "h");
    auto r = cli(run(name, sh("touch \"$1/ran\"", dir()), flags()));
    EXPECT_EQ(r.code(), 75) << r.describe();
    EXPECT_EQ(outcome("busy", 75), 0);
    r = cli(run(name, sh("touch \"$1/ran\"", dir()), flags({"--wait", "300ms"})));
    EXPECT_EQ(r.code(), 75) << r.describe();
    EXPECT_EQ(outcome("timeout", 75), 0);
    finish_holder(*holder, "h");

    r = cli(run(name, sh("exit 3", dir()), flags()));
    EXPECT_EQ(r.code(), 3) << r.describe();
    EXPECT_GE(outcome("failed", 3), 0);
    r = cli(run(name, sh("true", dir()), flags()));
    EXPECT_EQ(r.code(), 0) << r.describe();
    EXPECT_GE(outcome("ok", 0), 0);

    // Lost while COMMAND ran: an operator breaks the lock.
    auto lost = start(run(name, sh(holder_script("l"), dir()), flags({"--ttl", "1s"})));
    ASSERT_TRUE(eventually([&] { return present(file("l.started")); }, 30s)) << lost->wait(1s).describe();
    EXPECT_EQ(cli({"release", "--db", url_, "--name", name, "--force"}).code(), 0);
    EXPECT_EQ(lost->wait().code(), 76);
    EXPECT_GE(outcome("lost", 76), 0);

    // Written aside and renamed: nothing else is left in the directory.
    for (auto const& entry : fs::directory_iterator(dir()))
        EXPECT_EQ(entry.path().filename().string().find("job.prom.tmp"), std::string::npos) << entry.path();

    // A path node-exporter would not read, or cannot be written: exit 64 before anything runs, no file.
    fs::remove(prom);
    for (auto const& bad : {file("job.txt"), file("no/such/dir/job.prom")}) {
        r = cli(run(name, sh("touch \"$1/ran\"", dir()), {"--metrics-textfile", bad.string()}));
        EXPECT_EQ(r.code(), 64) << r.describe();
        EXPECT_NE(r.err.find("--metrics-textfile"), std::string::npos) << r.describe();
        EXPECT_FALSE(present(bad));
    }
    EXPECT_FALSE(present(file("ran")));
    EXPECT_FALSE(row(name).has_value());
}

// ------------------------------------------------------------------ run: COMMAND's environment and exit

TEST_P(Cli, CommandGetsNameOwnerAndTokenInItsEnvironment) {
    std::string const name = n("env");
    auto p = start(run(name, sh("printf '%s\\n' \"$EXTRA\" > \"$1/extra\"; " + holder_script("h"), dir())),
                   {{"EXTRA", "passed through"}, {"SQLOCK_TOKEN", "stale-from-the-caller"}});
    ASSERT_TRUE(eventually([&] { return present(file("h.started")) || p->finished(); }, 30s));
    ASSERT_TRUE(present(file("h.started"))) << p->wait(1s).describe();
    auto env = read_env(file("h.env"));
    EXPECT_EQ(env.name, name);
    EXPECT_FALSE(env.owner.empty());
    EXPECT_GT(env.token, 0);
    auto held = row(name);
    ASSERT_TRUE(held.has_value()) << "no lock row while COMMAND runs";
    EXPECT_EQ(held->owner, env.owner);
    EXPECT_EQ(held->token, env.token);
    EXPECT_EQ(trim(slurp(file("extra"))), "passed through");
    finish_holder(*p, "h");
    EXPECT_FALSE(row(name).has_value());
}

TEST_P(Cli, ExitCodeIsTheCommands) {
    std::string const name = n("exit-code");
    struct tcase {
        std::vector<std::string> command;
        int code;
    };
    for (auto const& [command, code] : std::vector<tcase>{{{"true"}, 0},
                                                          {{"false"}, 1},
                                                          {{"sh", "-c", "exit 7"}, 7},
                                                          {{"sh", "-c", "echo out; echo err >&2; exit 255"}, 255}}) {
        auto r = cli(run(name, command));
        EXPECT_EQ(r.code(), code) << command.back() << ": " << r.describe();
        EXPECT_FALSE(row(name).has_value()) << "lock left after " << command.back();
        if (code == 255) {
            EXPECT_EQ(r.out, "out\n");
            EXPECT_EQ(r.err, "err\n") << "sqlock prints nothing of its own on success";
        }
    }
    auto missing = cli(run(name, {"sqlock-test-no-such-command-" + random_hex(8)}));
    EXPECT_EQ(missing.code(), 127) << missing.describe();
    expect_one_error_line(missing);
    EXPECT_FALSE(row(name).has_value());
    std::ofstream(file("not-executable")) << "#!/bin/sh\n";
    auto denied = cli(run(name, {file("not-executable").string()}));
    EXPECT_EQ(denied.code(), 126) << denied.describe();
    expect_one_error_line(denied);
    EXPECT_FALSE(row(name).has_value());
}

TEST_P(Cli, CommandKilledBySignalExits128PlusSignal) {
    std::string const name = n("killed");
    auto r9 = cli(run(name, {"sh", "-c", "kill -KILL $$"}));
    EXPECT_EQ(r9.code(), 128 + SIGKILL) << r9.describe();
    auto r15 = cli(run(name, {"sh", "-c", "kill -TERM $$"}));
    EXPECT_EQ(r15.code(), 128 + SIGTERM) << r15.describe();
    EXPECT_FALSE(row(name).has_value());
}

TEST_P(Cli, SigtermAndSigintAreForwardedToTheCommand) {
    std::string const name = n("forward");
    struct tcase {
        int sig;
        char const* trap;
        int code;
    };
    for (auto [sig, trap, code] : {tcase{SIGTERM, "TERM", 42}, tcase{SIGINT, "INT", 43}}) {
        std::string tag = std::string("s") + trap;
        std::string script = std::string("trap 'touch \"$1/") + tag + ".trapped\"; exit " + std::to_string(code) +
                             "' " + trap + "; touch \"$1/" + tag + ".started\"; while :; do sleep 0.02; done";
        auto p = start(run(name, sh(script, dir())));
        ASSERT_TRUE(eventually([&] { return present(file(tag + ".started")) || p->finished(); }, 30s));
        ASSERT_TRUE(present(file(tag + ".started"))) << p->wait(1s).describe();
        ::kill(p->pid(), sig);
        auto r = p->wait();
        EXPECT_EQ(r.code(), code) << trap << ": " << r.describe();
        EXPECT_TRUE(present(file(tag + ".trapped"))) << "COMMAND did not get SIG" << trap;
        EXPECT_FALSE(row(name).has_value()) << "lock left after SIG" << trap;
    }
    // A COMMAND that does not handle the signal dies of it: 128 + signal.
    auto p = start(run(name, sh("touch \"$1/plain.started\"; while :; do sleep 0.02; done", dir())));
    ASSERT_TRUE(eventually([&] { return present(file("plain.started")) || p->finished(); }, 30s));
    ::kill(p->pid(), SIGTERM);
    auto r = p->wait();
    EXPECT_EQ(r.code(), 128 + SIGTERM) << r.describe();
    EXPECT_FALSE(row(name).has_value());
}

TEST_P(Cli, CommandGetsSigtermWhenSqlockItselfDies) {
    // Nobody renews the lock once sqlock is gone: COMMAND must not run on unprotected.
    std::string const name = n("orphan");
    auto p = start(run(name, sh("trap 'touch \"$1/orphan.term\"; exit 0' TERM; touch \"$1/orphan.started\"; "
                                "while :; do sleep 0.02; done",
                                dir())));
    ASSERT_TRUE(eventually([&] { return present(file("orphan.started")) || p->finished(); }, 30s));
    ASSERT_TRUE(present(file("orphan.started"))) << p->wait(1s).describe();
    ::kill(p->pid(), SIGKILL);
    auto r = p->wait();
    EXPECT_TRUE(WIFSIGNALED(r.status)) << r.describe();
    EXPECT_TRUE(eventually([&] { return present(file("orphan.term")); }, 30s)) << "COMMAND outlived sqlock";
}

// ------------------------------------------------------------------ run: the lock is lost

TEST_P(Cli, LostLockStopsTheCommandAndExits76) {
    std::string const name = n("lost");
    auto p = start_holder(name, "h", {"--ttl", "1s"});
    auto env = read_env(file("h.env"));

    // An operator breaks the lock from another process.
    auto rel = cli({"release", "--db", url_, "--name", name, "--force"});
    EXPECT_EQ(rel.code(), 0) << rel.describe();
    EXPECT_NE(rel.out.find(env.owner), std::string::npos) << "release must say whose lock it was: " << rel.out;

    // The next renewal is refused: COMMAND gets SIGTERM (its default: it dies) and sqlock exits 76.
    auto r = p->wait();
    EXPECT_EQ(r.code(), 76) << r.describe();
    expect_one_error_line(r);
    EXPECT_NE(r.err.find("lost"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(name), std::string::npos) << r.err;
    EXPECT_FALSE(present(file("h.done"))) << "COMMAND went on after the lock was lost";
}

TEST_P(Cli, LostLockKillsACommandThatIgnoresSigterm) {
    std::string const name = n("lost-stubborn");
    auto p = start(run(name,
                       sh("trap 'echo TERM >> \"$1/terms\"' TERM; echo $$ > \"$1/pid.tmp\"; mv \"$1/pid.tmp\" "
                          "\"$1/pid\"; while :; do sleep 0.02; done",
                          dir()),
                       {"--ttl", "1s"}));
    ASSERT_TRUE(eventually([&] { return present(file("pid")) || p->finished(); }, 30s));
    ASSERT_TRUE(present(file("pid"))) << p->wait(1s).describe();
    pid_t child = 0;
    std::ifstream(file("pid")) >> child;

    auto rel = cli({"release", "--db", url_, "--name", name, "--force"});
    EXPECT_EQ(rel.code(), 0) << rel.describe();
    auto r = p->wait();
    EXPECT_EQ(r.code(), 76) << r.describe();
    expect_one_line_of_ours(r);  // the whole tree got SIGTERM: sh may report its killed `sleep`
    EXPECT_NE(slurp(file("terms")).find("TERM"), std::string::npos) << "SIGTERM was not sent first";
    ASSERT_GT(child, 0);
    EXPECT_NE(::kill(child, 0), 0) << "COMMAND (pid " << child << ") survived: SIGKILL was not sent";
}

TEST_P(Cli, LostLockStopsTheWholeProcessTree) {
    // The wrapper pattern of docs/cli.md: COMMAND is a shell whose work runs in
    // processes of its own. One of them shrugs SIGTERM off, one left COMMAND's
    // process group and session and was orphaned (its parent exited).
    std::string const name = n("lost-tree");
    pid_files_killer cleanup{{file("stubborn.pid"), file("orphan.pid")}};
    std::string const script =
        background("stubborn",
                   "trap 'echo TERM >> \"$1/stubborn.terms\"' TERM; " +
                       std::string("while [ ! -e \"$1/go\" ]; do sleep 0.02; done; touch \"$1/stubborn.late\"")) +
        " ( " +
        background(
            "orphan",
            "exec setsid sh -c 'while [ ! -e \"$1/go\" ]; do sleep 0.02; done; touch \"$1/orphan.late\"' sh \"$1\"") +
        " ); touch \"$1/started\"; wait";
    auto p = start(run(name, sh(script, dir()), {"--ttl", "1s"}));
    ASSERT_TRUE(eventually(
        [&] {
            return (present(file("started")) && present(file("stubborn.pid")) && present(file("orphan.pid"))) ||
                   p->finished();
        },
        30s));
    ASSERT_FALSE(p->finished()) << p->wait(1s).describe();
    pid_t const stubborn = read_pid(file("stubborn.pid")), orphan = read_pid(file("orphan.pid"));
    ASSERT_TRUE(running(stubborn) && running(orphan));

    auto rel = cli({"release", "--db", url_, "--name", name, "--force"});
    EXPECT_EQ(rel.code(), 0) << rel.describe();
    auto r = p->wait();
    EXPECT_EQ(r.code(), 76) << r.describe();
    // The shell may print "Terminated" for its killed job before or after our line.
    EXPECT_TRUE(r.err.rfind("sqlock: lost lock", 0) == 0 || r.err.find("\nsqlock: lost lock") != std::string::npos)
        << r.describe();
    expect_one_line_of_ours(r);
    EXPECT_NE(slurp(file("stubborn.terms")).find("TERM"), std::string::npos)
        << "SIGTERM was not sent to the tree first";

    // Killed and reaped before sqlock returned: no such process any more.
    errno = 0;
    EXPECT_TRUE(::kill(stubborn, 0) != 0 && errno == ESRCH)
        << "a process of COMMAND (pid " << stubborn << ") outlived the lost lock";
    errno = 0;
    EXPECT_TRUE(::kill(orphan, 0) != 0 && errno == ESRCH)
        << "an orphaned process of COMMAND (pid " << orphan << ", own session) outlived the lost lock";
    // Whatever is left would now go on; nothing may.
    std::ofstream(file("go")).put('\n');
    EXPECT_FALSE(eventually([&] { return running(stubborn) || running(orphan); }, 200ms));
    EXPECT_FALSE(present(file("stubborn.late")));
    EXPECT_FALSE(present(file("orphan.late")));
}

TEST_P(Cli, WholeProcessTreeStopsWhenSqlockItselfDies) {
    std::string const name = n("orphan-tree");
    pid_files_killer cleanup{{file("gc.pid"), file("orphan.pid")}};
    std::string const script = background("gc", "while :; do sleep 0.02; done") + " ( " +
                               background("orphan", "exec setsid sh -c 'while :; do sleep 0.02; done'") +
                               " ); touch \"$1/started\"; wait";
    auto p = start(run(name, sh(script, dir())));
    ASSERT_TRUE(eventually(
        [&] {
            return (present(file("started")) && present(file("gc.pid")) && present(file("orphan.pid"))) ||
                   p->finished();
        },
        30s));
    ASSERT_FALSE(p->finished()) << p->wait(1s).describe();
    pid_t const gc = read_pid(file("gc.pid")), orphan = read_pid(file("orphan.pid"));
    ASSERT_TRUE(running(gc) && running(orphan));

    ::kill(p->pid(), SIGKILL);
    auto r = p->wait();
    EXPECT_TRUE(WIFSIGNALED(r.status)) << r.describe();
    EXPECT_TRUE(eventually([&] { return !running(gc); }, 10s))
        << "a process of COMMAND (pid " << gc << ") outlived sqlock";
    EXPECT_TRUE(eventually([&] { return !running(orphan); }, 10s))
        << "an orphaned process of COMMAND (pid " << orphan << ", own session) outlived sqlock";
}

TEST_P(Cli, ForwardedSignalsReachTheWholeProcessTree) {
    // SIGTERM to sqlock (systemd's stop) reaches the work of a wrapper shell,
    // not only the shell: the lock is not released while the work goes on.
    std::string const name = n("forward-tree");
    pid_files_killer cleanup{{file("gc.pid")}};
    std::string const script =
        background("gc",
                   "trap 'touch \"$1/gc.term\"; exit 0' TERM; touch \"$1/gc.ready\"; while :; do sleep 0.02; done") +
        " touch \"$1/started\"; wait";
    auto p = start(run(name, sh(script, dir())));
    // gc.ready, not gc.pid: the pid is written before the trap is set.
    ASSERT_TRUE(
        eventually([&] { return (present(file("started")) && present(file("gc.ready"))) || p->finished(); }, 30s));
    ASSERT_FALSE(p->finished()) << p->wait(1s).describe();
    ::kill(p->pid(), SIGTERM);
    auto r = p->wait();
    EXPECT_EQ(r.code(), 128 + SIGTERM) << r.describe();
    EXPECT_TRUE(eventually([&] { return present(file("gc.term")); }, 10s)) << "the wrapper's work never got SIGTERM";
    EXPECT_FALSE(row(name).has_value());
}

// ------------------------------------------------------------------ list, release, schema

TEST_P(Cli, ListShowsHeldLeasesAsATableAndAsJsonLines) {
    std::string const name = n("listed");
    auto p = start_holder(name, "h", {"--ttl", "1h"});
    auto env = read_env(file("h.env"));

    auto table = cli({"list", "--db", url_});
    EXPECT_EQ(table.code(), 0) << table.describe();
    std::istringstream lines(table.out);
    std::string header, line, ours;
    std::getline(lines, header);
    EXPECT_EQ(std::regex_replace(header, std::regex(" +"), " "),
              "NAME OWNER TOKEN CREATED_AT EXPIRES_AT REMAINING VALUE");
    std::size_t owner_col = header.find("OWNER"), token_col = header.find("TOKEN");
    while (std::getline(lines, line))
        if (line.rfind(name + " ", 0) == 0) ours = line;
    ASSERT_FALSE(ours.empty()) << table.out;
    EXPECT_EQ(ours.substr(owner_col, env.owner.size()), env.owner) << "columns are not aligned:\n" << table.out;
    EXPECT_EQ(ours.substr(token_col, std::to_string(env.token).size()), std::to_string(env.token));
    std::regex iso(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z)");
    EXPECT_TRUE(std::regex_search(ours, iso)) << ours;
    EXPECT_TRUE(std::regex_search(ours, std::regex(R"((59m\d\ds|1h00m)$)"))) << ours;

    auto json = cli({"list", "--db", url_, "--json"});
    EXPECT_EQ(json.code(), 0) << json.describe();
    std::istringstream jl(json.out);
    bool found = false;
    while (std::getline(jl, line)) {
        auto j = nlohmann::ordered_json::parse(line);  // every line is one JSON object, keys in order
        ASSERT_TRUE(j.is_object()) << line;
        if (j.at("name") != name) continue;
        found = true;
        EXPECT_EQ(j.at("owner"), env.owner);
        EXPECT_EQ(j.at("token").get<long long>(), env.token);
        EXPECT_TRUE(std::regex_match(j.at("created_at").get<std::string>(), iso)) << line;
        EXPECT_TRUE(std::regex_match(j.at("expires_at").get<std::string>(), iso)) << line;
        EXPECT_LT(j.at("created_at").get<std::string>(), j.at("expires_at").get<std::string>());
        auto ms = j.at("remaining_ms").get<long long>();
        EXPECT_GT(ms, 0);
        EXPECT_LE(ms, 3'600'000);
        std::vector<std::string> keys;
        for (auto it = j.begin(); it != j.end(); ++it) keys.push_back(it.key());
        EXPECT_EQ(keys, (std::vector<std::string>{"name", "owner", "token", "created_at", "expires_at", "remaining_ms",
                                                  "kind", "lock", "slot", "value", "server"}));
        EXPECT_EQ(j.at("kind"), "lock");
        EXPECT_EQ(j.at("lock"), name);
        EXPECT_TRUE(j.at("slot").is_null());
        EXPECT_TRUE(j.at("value").is_null());
        // The server the line was read from: MariaDB behind the mysql:// URL here.
        EXPECT_EQ(j.at("server").at("flavour"), e_ == engine::mysql ? "mariadb" : std::string(sqlock::to_string(e_)))
            << line;
        EXPECT_FALSE(j.at("server").at("version").get<std::string>().empty()) << line;
    }
    EXPECT_TRUE(found) << json.out;

    finish_holder(*p, "h");
    auto after = cli({"list", "--db", url_, "--json"});
    EXPECT_EQ(after.code(), 0);
    EXPECT_EQ(after.out.find(name), std::string::npos) << "a released lock is still listed: " << after.out;
}

TEST_P(Cli, ReleaseForceDeletesTheLockAndSaysWhoseItWas) {
    std::string const name = n("released");
    auto p = start_holder(name, "h", {"--ttl", "1h"});
    auto env = read_env(file("h.env"));

    auto without = cli({"release", "--db", url_, "--name", name});
    EXPECT_EQ(without.code(), 64) << without.describe();
    expect_one_error_line(without);
    EXPECT_NE(without.err.find("--force"), std::string::npos);
    EXPECT_TRUE(row(name).has_value()) << "release without --force changed something";

    auto r = cli({"release", "--db", url_, "--name", name, "--force"});
    EXPECT_EQ(r.code(), 0) << r.describe();
    EXPECT_NE(r.out.find(env.owner), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("token " + std::to_string(env.token)), std::string::npos) << r.out;
    EXPECT_EQ(r.err, "");
    EXPECT_FALSE(row(name).has_value());

    auto again = cli({"release", "--db", url_, "--name", name, "--force"});
    EXPECT_EQ(again.code(), 1) << again.describe();
    expect_one_error_line(again);
    EXPECT_NE(again.err.find("no lock named"), std::string::npos) << again.err;

    std::ofstream(file("h.go")).put('\n');
    auto holder = p->wait();
    EXPECT_EQ(holder.code(), 76) << "the holder's lock was broken: " << holder.describe();
}

TEST_P(Cli, SchemaPrintsTheEnginesDdl) {
    auto by_engine = cli({"schema", "--engine", engine_name(e_)});
    EXPECT_EQ(by_engine.code(), 0) << by_engine.describe();
    EXPECT_EQ(trim(by_engine.out), trim(sqlock::schema_sql(e_)));
    EXPECT_NE(by_engine.out.find("sqlock_locks"), std::string::npos);

    auto by_url = cli({"schema", "--db", url_});
    EXPECT_EQ(by_url.code(), 0) << by_url.describe();
    EXPECT_EQ(by_url.out, by_engine.out);

    auto by_env = cli({"schema"}, {{"SQLOCK_DB", url_}});
    EXPECT_EQ(by_env.out, by_engine.out) << by_env.describe();

    std::string other = e_ == engine::sqlite ? "postgresql" : "sqlite";
    auto mismatch = cli({"schema", "--db", url_, "--engine", other});
    EXPECT_EQ(mismatch.code(), 64) << mismatch.describe();
    expect_one_error_line(mismatch);
}

TEST_P(Cli, MissingSchemaExits78AndSchemaApplyCreatesIt) {
    std::string bare;  // a database without the lock tables
    std::optional<temp_dir> sqlite_dir;
    std::string pg_schema;
    switch (e_) {
        case engine::sqlite:
            sqlite_dir.emplace();
            bare = sqlite_url(sqlite_dir->path() / "fresh.db");
            break;
        case engine::postgresql:
            pg_schema = "sqlt_cli_" + random_hex(10);
            *raw_ << "CREATE SCHEMA " + pg_schema;
            bare = url_ + "?options=-csearch_path%3D" + pg_schema;
            break;
        case engine::mysql:
            // The test user can create no database; information_schema has no lock tables.
            bare = url_.substr(0, url_.rfind('/')) + "/information_schema";
            break;
    }
    std::string const name = n("schema");
    std::vector<std::vector<std::string>> commands{{"list", "--db", bare},
                                                   {"release", "--db", bare, "--name", name, "--force"}};
    if (e_ != engine::sqlite)
        commands.push_back(run_args({"--db", bare, "--name", name}, sh("touch \"$1/ran\"", dir())));
    for (auto const& args : commands) {
        auto r = cli(args);
        EXPECT_EQ(r.code(), 78) << args.front() << ": " << r.describe();
        expect_one_error_line(r);
        EXPECT_NE(r.err.find("sqlock schema --apply"), std::string::npos) << r.err;
    }
    EXPECT_FALSE(present(file("ran")));
    if (sqlite_dir) {
        EXPECT_FALSE(present(sqlite_dir->path() / "fresh.db")) << "list or release created the SQLite file";
    }

    std::string const target = e_ == engine::mysql ? url_ : bare;  // MariaDB: idempotent on the test database
    for (int i = 0; i < 2; ++i) {
        auto apply = cli({"schema", "--db", target, "--apply"});
        EXPECT_EQ(apply.code(), 0) << apply.describe();
    }
    auto list = cli({"list", "--db", target});
    EXPECT_EQ(list.code(), 0) << list.describe();
    auto ran = cli(run_args({"--db", target, "--name", name}, sh("touch \"$1/ran\"", dir())));
    EXPECT_EQ(ran.code(), 0) << ran.describe();
    EXPECT_TRUE(present(file("ran")));

    if (!pg_schema.empty()) {
        *raw_ << "SET client_min_messages = warning";  // no NOTICE per dropped table
        *raw_ << "DROP SCHEMA " + pg_schema + " CASCADE";
    }
}

TEST_P(Cli, SqlockDbVariableIsTheDefaultDatabase) {
    std::string const name = n("from-env");
    auto p = std::make_unique<cli_process>(run_args({"--name", name}, sh(holder_script("h"), dir())), dir(),
                                           env_changes{{"SQLOCK_DB", url_}});
    ASSERT_TRUE(eventually([&] { return present(file("h.started")) || p->finished(); }, 30s));
    ASSERT_TRUE(present(file("h.started"))) << p->wait(1s).describe();
    EXPECT_TRUE(row(name).has_value()) << "run without --db did not use $SQLOCK_DB";
    auto listed = cli({"list", "--json"}, {{"SQLOCK_DB", url_}});
    EXPECT_NE(listed.out.find(name), std::string::npos) << listed.describe();
    finish_holder(*p, "h");
}

// ------------------------------------------------------------------ error exit codes

TEST_P(Cli, UnreachableOrMisconfiguredDatabaseExits69) {
    std::vector<std::string> urls;
    switch (e_) {
        case engine::sqlite: urls = {"sqlite:///nonexistent-dir-" + random_hex(8) + "/locks.db"}; break;
        case engine::postgresql:
        case engine::mysql: {
            auto p = parse_server_url(url_);
            std::string base = p.scheme + "://" + p.user + ":" + p.password + "@" + p.host + ":";
            urls = {base + std::to_string(closed_port()) + "/" + p.db,                           // nothing listens
                    base + p.port + "/sqlt_no_such_db_" + random_hex(6),                         // no such database
                    p.scheme + "://sqlt_no_such_user:x@" + p.host + ":" + p.port + "/" + p.db};  // no such user
            break;
        }
    }
    for (auto const& url : urls) {
        for (auto const& args :
             std::vector<std::vector<std::string>>{run_args({"--db", url, "--name", n("x")},
                                                            sh("touch \"$1/ran\"", dir())),
                                                   {"list", "--db", url},
                                                   {"release", "--db", url, "--name", n("x"), "--force"},
                                                   {"schema", "--db", url, "--apply"}}) {
            if (e_ == engine::sqlite && (args[0] == "list" || args[0] == "release")) continue;  // 78: no file
            auto r = cli(args);
            EXPECT_EQ(r.code(), 69) << args[0] << " " << url << ": " << r.describe();
            expect_one_error_line(r);
            if (url.find(":x@") != std::string::npos) {
                EXPECT_EQ(r.err.find(":x@"), std::string::npos) << "password shown: " << r.err;
            }
        }
    }
    EXPECT_FALSE(present(file("ran")));
}

TEST_P(Cli, UsageErrorsExit64AndStartNothing) {
    std::string const name = n("usage");
    auto cmd = sh("touch \"$1/ran\"", dir());
    std::vector<std::vector<std::string>> cases{
        run_args({"--db", url_, "--name", ""}, cmd),                                   // library: empty name
        run_args({"--db", url_, "--name", std::string(256, 'x')}, cmd),                // library: too long
        run_args({"--db", url_, "--name", name, "--ttl", "5ms"}, cmd),                 // library: ttl range
        run_args({"--db", url_, "--name", name, "--ttl", "30"}, cmd),                  // no unit
        run_args({"--db", url_, "--name", name, "--wait", "soon"}, cmd),               // not a duration
        run_args({"--db", url_, "--db", url_, "--name", name}, cmd),                   // the same database twice
        run_args({"--db", url_, "--name", name, "--member-timeout", "1s"}, cmd),       // majority only
        run_args({"--db", url_, "--name", name, "--strategy", "queue"}, cmd),          // unknown strategy
        run_args({"--db", url_, "--name", name, "--conflict-exit-code", "256"}, cmd),  // out of range
        run_args({"--db", url_, "--name", name, "--bogus"}, cmd),                      // unknown option
        run_args({"--db", url_}, cmd),                                                 // no --name
        {"run", "--db", url_, "--name", name},                                         // no COMMAND
        {"run", "--db", url_, "--name", name, "sh", "-c", "touch ran"},                // COMMAND without --
        run_args({"--db", "redis://127.0.0.1/0", "--name", name}, cmd),                // unknown scheme
        {"list", "--db", url_, "--db", url_},
        {"list", "--db", url_, "--", "x"},
        {"release", "--db", url_, "--name", name},  // no --force
        {"release", "--db", url_, "--force"},       // no --name
        {"schema", "--engine", "oracle"},
        {"frobnicate"},
        {},
    };
    for (auto const& args : cases) {
        auto r = cli(args);
        std::string shown;
        for (auto const& a : args) shown += (a.size() > 40 ? a.substr(0, 40) + "..." : a) + " ";
        EXPECT_EQ(r.code(), 64) << shown << ": " << r.describe();
        expect_one_error_line(r);
        EXPECT_EQ(r.out, "") << shown;
    }
    EXPECT_FALSE(present(file("ran"))) << "a usage error started COMMAND";
    auto majority = cli(run_args({"--db", url_, "--db", url_, "--name", name}, cmd));
    EXPECT_NE(majority.err.find("is given twice"), std::string::npos) << majority.err;
    EXPECT_FALSE(row(name).has_value());
}

// ------------------------------------------------------------------ --strategy row (last: newest)

TEST_P(Cli, RowStrategyOfTwoConcurrentRunsOneRuns) {
    std::string const name = n("row-strategy");
    auto holder = start_holder(name, "a", {"--strategy", "row"});
    auto env = read_env(file("a.env"));
    EXPECT_EQ(env.name, name);
    EXPECT_GT(env.token, 0);
    auto r = cli(run(name, sh("touch \"$1/ran\"", dir()), {"--strategy", "row"}));
    EXPECT_EQ(r.code(), 75) << r.describe();
    EXPECT_FALSE(present(file("ran")));
    finish_holder(*holder, "a");
    auto again = cli(run(name, {"sh", "-c", "exit 5"}, {"--strategy", "row"}));
    EXPECT_EQ(again.code(), 5) << again.describe();
}

TEST_P(Cli, RowStrategyWaitHandsOver) {
    std::string const name = n("row-hand-off");
    auto holder = start_holder(name, "a", {"--strategy", "row"});
    auto waiter = start(run(name, sh("if [ -e \"$1/a.done\" ]; then touch \"$1/b.after-a\"; fi", dir()),
                            {"--strategy", "row", "--wait", "60s"}));
    EXPECT_FALSE(waiter->finished());
    finish_holder(*holder, "a");
    auto r = waiter->wait();
    EXPECT_EQ(r.code(), 0) << r.describe();
    EXPECT_TRUE(present(file("b.after-a")));
}

INSTANTIATE_TEST_SUITE_P(Engines, Cli, ::testing::Values(engine::postgresql, engine::mysql, engine::sqlite),
                         engine_param_name{});

// ------------------------------------------------------------------ issue 22: --limit, --shared, elect, leader

/// Lines of `text`.
std::vector<std::string> lines_of(std::string const& text) {
    std::vector<std::string> out;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) out.push_back(line);
    return out;
}

/// `sqlock elect --db URL --name NAME <flags> -- COMMAND`
std::vector<std::string> elect_args_for(std::string const& url, std::string const& name,
                                        std::vector<std::string> const& command, std::vector<std::string> flags = {}) {
    flags.insert(flags.begin(), {"elect", "--db", url, "--name", name});
    flags.push_back("--");
    flags.insert(flags.end(), command.begin(), command.end());
    return flags;
}

class CliCoordination : public Cli {
protected:
    std::vector<std::string> elect(std::string const& name, std::vector<std::string> const& command,
                                   std::vector<std::string> flags = {}) {
        return elect_args_for(url_, name, command, std::move(flags));
    }
    /// `sqlock list --json`: the entries of the user's name `lock` (its permits, readers or lock row).
    std::vector<nlohmann::json> listed(std::string const& lock) {
        auto r = cli({"list", "--db", url_, "--json"});
        EXPECT_EQ(r.code(), 0) << r.describe();
        std::vector<nlohmann::json> out;
        for (auto const& line : lines_of(r.out)) {
            auto j = nlohmann::json::parse(line);
            if (j.at("lock") == lock) out.push_back(j);
        }
        return out;
    }
    /// `sqlock leader --json` (exit code, object).
    std::pair<int, nlohmann::json> leader(std::string const& name) {
        auto r = cli({"leader", "--db", url_, "--name", name, "--json"});
        EXPECT_EQ(lines_of(r.out).size(), 1u) << r.describe();
        return {r.code(), r.out.empty() ? nlohmann::json() : nlohmann::json::parse(r.out)};
    }
};

TEST_P(CliCoordination, BadInputExits64AndStartsNothing) {
    std::string const name = n("coord-usage");
    auto cmd = sh("touch \"$1/ran\"", dir());
    std::string const other = sqlite_url(dir() / "other.db");
    std::vector<std::vector<std::string>> cases{
        run(name, cmd, {"--limit", "0"}),
        run(name, cmd, {"--limit", "-1"}),
        run(name, cmd, {"--limit", "two"}),
        run(name, cmd, {"--limit", "10001"}),
        run(name, cmd, {"--limit", "2", "--shared"}),
        run(name, cmd, {"--db", other, "--limit", "2"}),  // a majority
        run(name, cmd, {"--db", other, "--shared"}),
        run(name, cmd, {"--shared", "--strategy", "row"}),
        {"elect", "--db", url_, "--name", name},  // no COMMAND
        elect(name, cmd, {"--repeat", "--wait", "1s"}),
        elect(name, cmd, {"--db", other}),
        elect(name, cmd, {"--value", ""}),  // library: a value is 1..200 bytes
        elect(name, cmd, {"--wait", "soon"}),
        {"leader", "--db", url_},  // no --name
        {"leader", "--db", url_, "--name", name, "--", "x"},
        {"semaphore", "--db", url_, "--name", name},  // no --forget
    };
    for (auto const& args : cases) {
        auto r = cli(args);
        std::string shown;
        for (auto const& a : args) shown += a + " ";
        EXPECT_EQ(r.code(), 64) << shown << ": " << r.describe();
        expect_one_error_line(r);
        EXPECT_EQ(r.out, "") << shown;
    }
    EXPECT_FALSE(present(file("ran"))) << "a usage error started COMMAND";
    auto both = cli(run(name, cmd, {"--limit", "2", "--shared"}));
    EXPECT_NE(both.err.find("--limit and --shared"), std::string::npos) << both.err;
    EXPECT_TRUE(listed(name).empty());
}

TEST_P(CliCoordination, LimitDifferentFromTheStoredOneExits64NamingBoth) {
    std::string const name = n("sem-n");
    auto holder = start_holder(name, "h", {"--limit", "2"});
    auto r = cli(run(name, sh("touch \"$1/ran\"", dir()), {"--limit", "3"}));
    EXPECT_EQ(r.code(), 64) << r.describe();
    expect_one_error_line(r);
    EXPECT_TRUE(std::regex_search(r.err, std::regex(R"(\b2\b)")) && std::regex_search(r.err, std::regex(R"(\b3\b)")))
        << "the message must name both numbers of permits: " << r.err;
    EXPECT_FALSE(present(file("ran")));

    // The stored number cannot be forgotten while a permit is held.
    auto refused = cli({"semaphore", "--db", url_, "--name", name, "--forget"});
    EXPECT_EQ(refused.code(), 64) << refused.describe();
    expect_one_error_line(refused);
    finish_holder(*holder, "h");

    auto forgot = cli({"semaphore", "--db", url_, "--name", name, "--forget"});
    EXPECT_EQ(forgot.code(), 0) << forgot.describe();
    EXPECT_NE(forgot.out.find(name), std::string::npos) << forgot.out;
    auto again = cli({"semaphore", "--db", url_, "--name", name, "--forget"});
    EXPECT_EQ(again.code(), 1) << again.describe();
    expect_one_error_line(again);
    EXPECT_NE(again.err.find("no semaphore named"), std::string::npos) << again.err;
    auto three = cli(run(name, sh("touch \"$1/ran\"", dir()), {"--limit", "3"}));
    EXPECT_EQ(three.code(), 0) << three.describe();
    EXPECT_TRUE(present(file("ran")));
}

TEST_P(CliCoordination, LimitTwoRunsAtMostTwoCommandsAtOnce) {
    std::string const name = n("limit2");
    // Each COMMAND records its start (with its permit and token), waits for $1/go, records its end.
    auto script = [&](std::string const& tag) {
        return "echo \"start " + tag +
               " $SQLOCK_PERMIT $SQLOCK_TOKEN\" >> \"$1/record\"; "
               "while [ ! -e \"$1/go\" ]; do sleep 0.02; done; echo \"end " +
               tag + "\" >> \"$1/record\"";
    };
    std::vector<std::unique_ptr<cli_process>> runs;
    for (std::string tag : {"a", "b", "c"})
        runs.push_back(start(run(name, sh(script(tag), dir()), {"--limit", "2", "--wait", "60s"})));
    auto starts = [&] {
        auto lines = lines_of(slurp(file("record")));
        return std::count_if(lines.begin(), lines.end(), [](auto const& l) { return l.rfind("start ", 0) == 0; });
    };
    ASSERT_TRUE(eventually([&] { return starts() >= 2; }, 30s)) << runs[0]->report();

    // While two hold a permit, list shows them as permits of NAME.
    auto permits = listed(name);
    ASSERT_EQ(permits.size(), 2u);
    std::set<int> slots;
    for (auto const& j : permits) {
        EXPECT_EQ(j.at("kind"), "permit") << j;
        EXPECT_NE(j.at("name"), name) << "a permit's row has a name of its own";
        slots.insert(j.at("slot").get<int>());
    }
    EXPECT_EQ(slots, (std::set<int>{0, 1}));
    auto table = cli({"list", "--db", url_});
    EXPECT_NE(table.out.find(name + " permit 0"), std::string::npos) << table.out;
    EXPECT_NE(table.out.find(name + " permit 1"), std::string::npos) << table.out;

    std::ofstream(file("go")).put('\n');
    for (auto& p : runs) {
        auto r = p->wait();
        EXPECT_EQ(r.code(), 0) << r.describe();
    }
    // The record: at most two running at any point, on different permits; the third started after an end.
    std::map<std::string, std::string> permit_of;
    std::set<std::string> running_permits;
    std::size_t most = 0, started = 0, ended = 0;
    bool third_after_an_end = false;
    for (auto const& line : lines_of(slurp(file("record")))) {
        std::istringstream words(line);
        std::string what, tag, permit;
        words >> what >> tag >> permit;
        if (what == "start") {
            EXPECT_TRUE(permit == "0" || permit == "1") << line;
            EXPECT_FALSE(running_permits.count(permit)) << "permit " << permit << " held twice: " << line;
            running_permits.insert(permit);
            permit_of[tag] = permit;
            most = std::max(most, running_permits.size());
            if (++started == 3) third_after_an_end = ended > 0;
        } else {
            running_permits.erase(permit_of[tag]);
            ++ended;
        }
    }
    EXPECT_EQ(started, 3u);
    EXPECT_EQ(ended, 3u);
    EXPECT_EQ(most, 2u) << slurp(file("record"));
    EXPECT_TRUE(third_after_an_end) << slurp(file("record"));
    EXPECT_TRUE(listed(name).empty());
}

TEST_P(CliCoordination, SharedRunsOverlapAndAPlainRunExcludesThem) {
    std::string const name = n("rw");
    // Two readers at once.
    auto a = start_holder(name, "a", {"--shared"});
    auto b = start_holder(name, "b", {"--shared"});
    auto readers = listed(name);
    EXPECT_EQ(readers.size(), 2u);
    for (auto const& j : readers) EXPECT_EQ(j.at("kind"), "shared") << j;
    auto table = cli({"list", "--db", url_});
    EXPECT_NE(table.out.find(name + " shared"), std::string::npos) << table.out;

    // A plain run is the writer: busy while they read.
    auto busy = cli(run(name, sh("touch \"$1/ran\"", dir())));
    EXPECT_EQ(busy.code(), 75) << busy.describe();
    EXPECT_FALSE(present(file("ran")));

    // A waiting writer holds the name's lock; new readers wait behind it.
    auto w = start(run(name,
                       sh("if [ -e \"$1/a.done\" ] && [ -e \"$1/b.done\" ]; then touch \"$1/w.after-readers\"; fi; " +
                              holder_script("w"),
                          dir()),
                       {"--wait", "60s"}));
    ASSERT_TRUE(eventually(
        [&] {
            auto l = listed(name);
            return std::any_of(l.begin(), l.end(), [](auto const& j) { return j.at("kind") == "lock"; }) ||
                   w->finished();
        },
        30s));
    ASSERT_FALSE(w->finished()) << w->wait(1s).describe();
    auto late_reader = cli(run(name, sh("touch \"$1/ran\"", dir()), {"--shared"}));
    EXPECT_EQ(late_reader.code(), 75) << "a new reader got in while a writer waited: " << late_reader.describe();
    EXPECT_FALSE(present(file("w.started")));

    finish_holder(*a, "a");
    finish_holder(*b, "b");
    ASSERT_TRUE(eventually([&] { return present(file("w.started")) || w->finished(); }, 30s));
    EXPECT_TRUE(present(file("w.after-readers"))) << "the writer ran while a reader still ran";
    auto while_writing = cli(run(name, sh("touch \"$1/ran\"", dir()), {"--shared"}));
    EXPECT_EQ(while_writing.code(), 75) << while_writing.describe();
    EXPECT_FALSE(present(file("ran")));
    finish_holder(*w, "w");

    auto reader = cli(run(name, sh("touch \"$1/ran\"", dir()), {"--shared"}));
    EXPECT_EQ(reader.code(), 0) << reader.describe();
    EXPECT_TRUE(present(file("ran")));
    EXPECT_TRUE(listed(name).empty());
}

TEST_P(CliCoordination, ElectRunsCommandWhileLeaderAndTermsIncrease) {
    std::string const name = n("elect");
    auto none = cli({"leader", "--db", url_, "--name", name});
    EXPECT_EQ(none.code(), 1) << none.describe();
    EXPECT_EQ(none.out, "no leader\n");
    auto [none_code, none_json] = leader(name);
    EXPECT_EQ(none_code, 1);
    EXPECT_EQ(none_json, (nlohmann::json{{"name", name}, {"leader", false}}));

    auto watch = start({"leader", "--db", url_, "--name", name, "--watch", "--json"});
    auto watched = [&] {
        std::vector<nlohmann::json> out;
        for (auto const& line : lines_of(watch->out_so_far())) out.push_back(nlohmann::json::parse(line));
        return out;
    };
    ASSERT_TRUE(eventually([&] { return !watched().empty() || watch->finished(); }, 30s)) << watch->report();

    std::vector<long long> terms;
    for (std::string value : {"first", "second"}) {
        std::string const tag = "e" + std::to_string(terms.size());
        auto e = start(elect(name, sh(holder_script(tag), dir()), {"--value", value}));
        ASSERT_TRUE(eventually([&] { return present(file(tag + ".started")) || e->finished(); }, 30s))
            << e->wait(1s).describe();
        ASSERT_FALSE(e->finished()) << e->wait(1s).describe();
        auto env = read_env(file(tag + ".env"));
        EXPECT_EQ(env.name, name);
        // --watch reports the leader while it leads (within its observe interval).
        EXPECT_TRUE(eventually(
            [&] {
                auto w = watched();
                return (!w.empty() && w.back().at("leader") == true && w.back().at("value") == value &&
                        w.back().at("term").get<long long>() == env.token) ||
                       watch->finished();
            },
            30s))
            << "leader --watch did not report " << value << ": " << watch->report();

        auto [code, j] = leader(name);
        EXPECT_EQ(code, 0);
        EXPECT_EQ(j.at("leader"), true) << j;
        EXPECT_EQ(j.at("value"), value) << j;
        EXPECT_EQ(j.at("term").get<long long>(), env.token) << "the term is COMMAND's SQLOCK_TOKEN";
        EXPECT_EQ(j.at("owner"), env.owner) << j;
        auto text = cli({"leader", "--db", url_, "--name", name});
        EXPECT_EQ(text.code(), 0);
        EXPECT_EQ(text.out.rfind("leader " + value + " (term " + std::to_string(env.token) + ", ", 0), 0u) << text.out;
        auto rows = listed(name);
        ASSERT_EQ(rows.size(), 1u);
        EXPECT_EQ(rows[0].at("value"), value);
        EXPECT_EQ(rows[0].at("token").get<long long>(), env.token);

        // Another campaigner is not elected while this one leads.
        auto other = cli(elect(name, sh("touch \"$1/ran\"", dir()), {"--wait", "0", "--value", "other"}));
        EXPECT_EQ(other.code(), 75) << other.describe();
        EXPECT_FALSE(present(file("ran")));

        finish_holder(*e, tag);  // COMMAND exits: sqlock resigns
        EXPECT_EQ(leader(name).first, 1) << "leadership not resigned when COMMAND exited";
        EXPECT_TRUE(eventually(
            [&] {
                auto w = watched();
                return (!w.empty() && w.back().at("leader") == false) || watch->finished();
            },
            30s))
            << "leader --watch did not report the resignation: " << watch->report();
        terms.push_back(env.token);
    }
    EXPECT_LT(terms[0], terms[1]) << "terms must strictly increase across elections";

    // --watch saw both leaders, in order, and that there is none now; SIGTERM ends it with 0.
    ASSERT_FALSE(watch->finished()) << watch->report();
    ::kill(watch->pid(), SIGTERM);
    auto wr = watch->wait();
    EXPECT_EQ(wr.code(), 0) << wr.describe();
    std::vector<std::pair<std::string, long long>> leaders;
    for (auto const& line : lines_of(wr.out)) {
        auto j = nlohmann::json::parse(line);
        if (j.at("leader") == true)
            leaders.emplace_back(j.at("value").get<std::string>(), j.at("term").get<long long>());
    }
    leaders.erase(std::unique(leaders.begin(), leaders.end()), leaders.end());
    EXPECT_EQ(leaders, (std::vector<std::pair<std::string, long long>>{{"first", terms[0]}, {"second", terms[1]}}))
        << wr.out;
}

TEST_P(CliCoordination, ElectStopsTheCommandsTreeWhenLeadershipIsLost) {
    std::string const name = n("elect-lost");
    pid_files_killer cleanup{{file("gc.pid")}};
    std::string const script =
        background("gc",
                   "trap 'echo TERM >> \"$1/gc.terms\"' TERM; touch \"$1/gc.ready\"; while :; do sleep 0.02; done") +
        " touch \"$1/started\"; wait";
    auto p = start(elect(name, sh(script, dir()), {"--ttl", "1s"}));
    ASSERT_TRUE(eventually(
        [&] {
            return (present(file("started")) && present(file("gc.pid")) && present(file("gc.ready"))) || p->finished();
        },
        30s));
    ASSERT_FALSE(p->finished()) << p->wait(1s).describe();
    pid_t const gc = read_pid(file("gc.pid"));

    auto rel = cli({"release", "--db", url_, "--name", name, "--force"});
    EXPECT_EQ(rel.code(), 0) << rel.describe();
    auto r = p->wait();
    EXPECT_EQ(r.code(), 76) << r.describe();
    expect_one_line_of_ours(r);
    // "lost leadership of ...", or "... is about to be lost" when a renewal was slow to come back (a loaded host).
    EXPECT_NE(r.err.find("leadership of '" + name + "'"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("lost"), std::string::npos) << r.err;
    EXPECT_NE(slurp(file("gc.terms")).find("TERM"), std::string::npos) << "SIGTERM was not sent to the tree first";
    errno = 0;
    EXPECT_TRUE(::kill(gc, 0) != 0 && errno == ESRCH) << "a process of COMMAND (pid " << gc << ") outlived leadership";
}

TEST_P(CliCoordination, ElectRepeatCampaignsAgainUntilASignal) {
    std::string const name = n("elect-repeat");
    // The third term's COMMAND waits; SIGTERM to sqlock reaches it, and sqlock campaigns no more.
    std::string const script =
        "echo \"$SQLOCK_TOKEN\" >> \"$1/terms\"; if [ \"$(wc -l < \"$1/terms\")\" -ge 3 ]; then "
        "trap 'touch \"$1/stopped\"; exit 0' TERM; touch \"$1/third\"; while :; do sleep 0.02; done; fi";
    auto p = start(elect(name, sh(script, dir()), {"--repeat"}));
    ASSERT_TRUE(eventually([&] { return present(file("third")) || p->finished(); }, 30s)) << p->report();
    ::kill(p->pid(), SIGTERM);
    auto r = p->wait();
    EXPECT_EQ(r.code(), 0) << r.describe();
    EXPECT_TRUE(present(file("stopped")));
    std::vector<long long> terms;
    for (auto const& line : lines_of(slurp(file("terms")))) terms.push_back(std::stoll(line));
    ASSERT_EQ(terms.size(), 3u) << "campaigned again after the signal";
    EXPECT_TRUE(terms[0] < terms[1] && terms[1] < terms[2]) << slurp(file("terms"));
    EXPECT_EQ(leader(name).first, 1);
}

INSTANTIATE_TEST_SUITE_P(Engines, CliCoordination, ::testing::Values(engine::postgresql, engine::mysql, engine::sqlite),
                         engine_param_name{});

// ------------------------------------------------------------------ run: a renewal that hangs (servers only)

/// A TCP relay to a database server that can be frozen: it then stops moving
/// bytes but keeps every connection open, so a query sent through it waits for
/// an answer that does not come (a stopped server, a black-holed network).
class freezing_proxy {
public:
    explicit freezing_proxy(std::string const& url) {
        auto [host_start, end] = host_port_span(url);
        std::string hp = url.substr(host_start, end - host_start);
        target_host_ = hp.substr(0, hp.rfind(':'));
        target_port_ = hp.substr(hp.rfind(':') + 1);
        listen_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        socklen_t len = sizeof a;
        if (listen_ < 0 || ::bind(listen_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
            ::getsockname(listen_, reinterpret_cast<sockaddr*>(&a), &len) != 0 || ::listen(listen_, 16) != 0)
            throw std::runtime_error(std::string("freezing_proxy: ") + std::strerror(errno));
        url_ = replace_host_port(url, "127.0.0.1", ntohs(a.sin_port));
        acceptor_ = std::thread([this] { accept_loop(); });
    }
    freezing_proxy(freezing_proxy const&) = delete;
    freezing_proxy& operator=(freezing_proxy const&) = delete;
    ~freezing_proxy() {
        stopping_ = true;  // every thread polls with a timeout and sees it
        acceptor_.join();
        for (auto& t : relays_) t.join();
        ::close(listen_);
    }

    std::string const& url() const { return url_; }
    void freeze() { frozen_ = true; }

private:
    void accept_loop() {
        while (!stopping_) {
            pollfd p{listen_, POLLIN, 0};
            if (::poll(&p, 1, 50) <= 0) continue;
            int client = ::accept4(listen_, nullptr, nullptr, SOCK_CLOEXEC);
            if (client < 0) continue;
            addrinfo hints{};
            hints.ai_socktype = SOCK_STREAM;
            addrinfo* res = nullptr;
            int server = -1;
            if (::getaddrinfo(target_host_.c_str(), target_port_.c_str(), &hints, &res) == 0) {
                server = ::socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
                if (server >= 0 && ::connect(server, res->ai_addr, res->ai_addrlen) != 0) {
                    ::close(server);
                    server = -1;
                }
                ::freeaddrinfo(res);
            }
            if (server < 0) {
                ::close(client);
                continue;
            }
            relays_.emplace_back([this, client, server] { relay(client, server); });
        }
    }
    void relay(int client, int server) {
        char buf[16384];
        for (bool open = true; open && !stopping_;) {
            if (frozen_) {
                std::this_thread::sleep_for(50ms);
                continue;
            }
            pollfd p[2] = {{client, POLLIN, 0}, {server, POLLIN, 0}};
            if (::poll(p, 2, 50) <= 0) continue;
            for (int i = 0; i < 2 && open; ++i) {
                if (p[i].revents == 0) continue;
                ssize_t n = ::recv(p[i].fd, buf, sizeof buf, 0);
                open = n > 0 && ::send(p[1 - i].fd, buf, static_cast<std::size_t>(n), MSG_NOSIGNAL) == n;
            }
        }
        ::close(client);
        ::close(server);
    }

    std::string target_host_, target_port_, url_;
    int listen_ = -1;
    std::atomic<bool> stopping_{false}, frozen_{false};
    std::thread acceptor_;
    std::vector<std::thread> relays_;  // added by the acceptor only, joined after it
};

/// The per-engine Cli tests that need a server (no SQLite).
class CliServer : public Cli {};

TEST_P(CliServer, LeaseRunningOutStopsTheCommandWhileTheRenewalHangs) {
    // The renewal never returns, so no loss is reported: run must still stop
    // COMMAND when the lease's own validity runs out, and exit 76.
    std::string const name = n("renewal-hangs");
    freezing_proxy proxy(url_);
    pid_files_killer cleanup{{file("cmd.pid")}};
    auto p = start(run_args({"--db", proxy.url(), "--name", name, "--ttl", "2s"},
                            sh("echo $$ > \"$1/cmd.pid.tmp\"; mv \"$1/cmd.pid.tmp\" \"$1/cmd.pid\"; "
                               "while :; do sleep 0.02; done",
                               dir())));
    ASSERT_TRUE(eventually([&] { return present(file("cmd.pid")) || p->finished(); }, 30s));
    ASSERT_FALSE(p->finished()) << p->wait(1s).describe();
    pid_t const command = read_pid(file("cmd.pid"));
    ASSERT_TRUE(running(command));

    proxy.freeze();
    auto r = p->wait(30s);  // a 2 s lease: anything near this limit is a hang
    EXPECT_EQ(r.code(), 76) << r.describe();
    expect_one_error_line(r);
    EXPECT_NE(r.err.find("lost"), std::string::npos) << r.err;
    errno = 0;
    EXPECT_TRUE(::kill(command, 0) != 0 && errno == ESRCH) << "COMMAND (pid " << command << ") outlived the lease";
}

INSTANTIATE_TEST_SUITE_P(Engines, CliServer, ::testing::Values(engine::postgresql, engine::mysql), engine_param_name{});

// ------------------------------------------------------------------ several --db: majority mode

/// Three members, one per engine: the PostgreSQL and MariaDB test servers and
/// an SQLite file of the test's own (require_env: skipped when a server is not
/// configured, failing under CI). An unreachable member is a closed port.
class CliMajority : public ::testing::Test {
protected:
    void SetUp() override {
        require_env("SQLOCK_TEST_PG_URL", pg_);
        if (should_stop()) return;
        require_env("SQLOCK_TEST_MYSQL_URL", my_);
        if (should_stop()) return;
        // One SQLite member for the whole suite, like the servers' tables: a majority member's
        // database is never created by `run`, and a new one counts only once it has been seeded
        // from the others (docs/majority.md), which its identity must be older than the ttl for.
        static temp_dir const member_dir;
        member_file_ = member_dir.path() / "member.db";
        sqlite_ = sqlite_url(member_file_);
        for (auto const& url : {pg_, my_, sqlite_}) sqlock::store(url, {.create_schema = true});
        prefix_ = random_prefix();
        raw_.push_back(raw_session(engine::postgresql, pg_));
        raw_.push_back(raw_session(engine::mysql, my_));
        static bool joined = false;
        if (!joined)
            joined = eventually(
                [&] {
                    (void)cli(run(n("join"), {"true"}, {"--ttl", "1s"}));
                    long long k = 0;
                    *raw_session(engine::sqlite, sqlite_)
                        << "SELECT COUNT(*) FROM sqlock_majority_members g JOIN sqlock_identity i ON g.id = i.id",
                        soci::into(k);
                    return k > 0;
                },
                60s);
        ASSERT_TRUE(joined) << "the SQLite member never joined the servers' majority group";
    }

    std::string n(std::string_view s) const { return prefix_ + std::string(s); }
    fs::path const& dir() const { return files_.path(); }
    fs::path file(std::string const& leaf) const { return files_.path() / leaf; }

    /// PostgreSQL, MariaDB, SQLite.
    std::vector<std::string> members() const { return {pg_, my_, sqlite_}; }
    static std::string down_pg() { return "postgresql://u:secret@127.0.0.1:" + std::to_string(closed_port()) + "/x"; }
    static std::string down_my() { return "mysql://u:secret@127.0.0.1:" + std::to_string(closed_port()) + "/x"; }

    static std::vector<std::string> with_dbs(std::vector<std::string> args, std::vector<std::string> const& urls) {
        for (auto const& u : urls) args.insert(args.end(), {"--db", u});
        return args;
    }
    /// `sqlock run --db A --db B ... --name NAME <flags> -- COMMAND`
    std::vector<std::string> run(std::string const& name, std::vector<std::string> const& command,
                                 std::vector<std::string> flags = {},
                                 std::optional<std::vector<std::string>> urls = {}) {
        auto args = with_dbs({}, urls.value_or(members()));
        args.insert(args.end(), {"--name", name});
        args.insert(args.end(), flags.begin(), flags.end());
        return run_args(std::move(args), command);
    }

    std::unique_ptr<cli_process> start(std::vector<std::string> args) {
        return std::make_unique<cli_process>(std::move(args), dir());
    }
    cli_result cli(std::vector<std::string> args) { return cli_process(std::move(args), dir()).wait(); }

    std::unique_ptr<cli_process> start_holder(std::string const& name, std::string const& tag,
                                              std::vector<std::string> flags = {}) {
        auto p = start(run(name, sh(holder_script(tag), dir()), std::move(flags)));
        bool started = eventually([&] { return present(file(tag + ".started")) || p->finished(); }, 30s);
        EXPECT_TRUE(started && present(file(tag + ".started")))
            << "holder " << tag << " did not start COMMAND: " << p->wait(1s).describe();
        return p;
    }
    cli_result finish_holder(cli_process& p, std::string const& tag) {
        std::ofstream(file(tag + ".go")).put('\n');
        return p.wait();
    }

    /// The lock row of `name` on each member, in members() order.
    std::vector<std::optional<lock_row>> rows(std::string const& name) {
        auto sqlite = raw_session(engine::sqlite, sqlite_);
        return {read_row(*raw_[0], engine::postgresql, name), read_row(*raw_[1], engine::mysql, name),
                read_row(*sqlite, engine::sqlite, name)};
    }
    std::size_t held_on(std::string const& name) {
        std::size_t k = 0;
        for (auto const& r : rows(name)) k += r && r->live() ? 1 : 0;
        return k;
    }

    temp_dir files_;
    fs::path member_file_;
    std::string pg_, my_, sqlite_, prefix_;
    std::vector<std::unique_ptr<soci::session>> raw_;
};

TEST_F(CliMajority, RunHoldsTheLockOnEveryMemberAndGivesTheMajorityToken) {
    std::string const name = n("majority");
    auto p = start_holder(name, "a");
    auto env = read_env(file("a.env"));
    EXPECT_EQ(env.name, name);
    EXPECT_GT(env.token, 0);
    // One owner on every member's row: the one COMMAND sees. The grant settles on the first majority
    // (docs/majority.md): the third member's row may land, and be adopted, just after COMMAND started.
    EXPECT_TRUE(eventually([&] { return held_on(name) == 3; }, 10s)) << "a member has no row while COMMAND runs";
    for (auto const& r : rows(name)) {
        ASSERT_TRUE(r.has_value()) << "a member has no row while COMMAND runs";
        EXPECT_EQ(r->owner, env.owner);
    }
    auto r = finish_holder(*p, "a");
    EXPECT_EQ(r.code(), 0) << r.describe();
    EXPECT_EQ(r.out + r.err, "") << "nothing of sqlock's own on success";
    EXPECT_EQ(held_on(name), 0u) << "rows left after COMMAND exited";

    // The next majority token of the name is greater.
    auto b = cli(run(name, sh("printf '%s\\n' \"$SQLOCK_TOKEN\" > \"$1/b.token\"", dir())));
    EXPECT_EQ(b.code(), 0) << b.describe();
    long long token_b = 0;
    std::ifstream(file("b.token")) >> token_b;
    EXPECT_GT(token_b, env.token);
}

TEST_F(CliMajority, SecondRunOnTheSameMembersExits75WhileTheFirstHolds) {
    std::string const name = n("busy");
    auto holder = start_holder(name, "h");
    auto r = cli(run(name, sh("touch \"$1/ran\"", dir())));
    EXPECT_EQ(r.code(), 75) << r.describe();
    EXPECT_EQ(r.out + r.err, "") << "a busy lock is silent when stderr is not a terminal: " << r.describe();
    // The members in another order are the same majority.
    auto reordered = cli(run(name, sh("touch \"$1/ran\"", dir()), {"--conflict-exit-code", "9"},
                             std::vector<std::string>{sqlite_, pg_, my_}));
    EXPECT_EQ(reordered.code(), 9) << reordered.describe();
    // A --wait that runs out is busy too.
    auto waited = cli(run(name, sh("touch \"$1/ran\"", dir()), {"--wait", "300ms"}));
    EXPECT_EQ(waited.code(), 75) << waited.describe();
    EXPECT_FALSE(present(file("ran")));
    EXPECT_EQ(held_on(name), 3u) << "the losers' attempts disturbed the holder's rows";
    auto done = finish_holder(*holder, "h");
    EXPECT_EQ(done.code(), 0) << done.describe();
}

TEST_F(CliMajority, RowStrategyAppliesToEveryMember) {
    // The two servers (N = 2: both must grant); an SQLite member is refused with
    // row locks, which lock its whole file, the majority's token counter with it.
    std::string const name = n("row");
    std::vector<std::string> const servers{pg_, my_};
    auto holder = start(run(name, sh(holder_script("h"), dir()), {"--strategy", "row"}, servers));
    ASSERT_TRUE(eventually([&] { return present(file("h.started")) || holder->finished(); }, 30s));
    ASSERT_TRUE(present(file("h.started"))) << holder->wait(1s).describe();
    EXPECT_GT(read_env(file("h.env")).token, 0);
    auto r = cli(run(name, sh("touch \"$1/ran\"", dir()), {"--strategy", "row"}, servers));
    EXPECT_EQ(r.code(), 75) << r.describe();
    auto done = finish_holder(*holder, "h");
    EXPECT_EQ(done.code(), 0) << done.describe();
    auto again = cli(run(name, {"sh", "-c", "exit 5"}, {"--strategy", "row"}, servers));
    EXPECT_EQ(again.code(), 5) << again.describe();

    auto with_sqlite = cli(run(name, sh("touch \"$1/ran\"", dir()), {"--strategy", "row"}));
    EXPECT_EQ(with_sqlite.code(), 64) << with_sqlite.describe();
    expect_one_error_line(with_sqlite);
    EXPECT_NE(with_sqlite.err.find("--strategy table"), std::string::npos) << with_sqlite.err;
    EXPECT_FALSE(present(file("ran")));
}

TEST_F(CliMajority, OneMemberUnreachableStillRunsTheCommand) {
    std::string const name = n("one-down");
    auto const down = down_my();
    std::vector<std::string> const urls{pg_, down, sqlite_};
    auto p = start(run(name, sh(holder_script("h"), dir()), {}, urls));
    ASSERT_TRUE(eventually([&] { return present(file("h.started")) || p->finished(); }, 30s));
    ASSERT_TRUE(present(file("h.started"))) << p->wait(1s).describe();
    auto r1 = rows(name);
    EXPECT_TRUE(r1[0] && r1[0]->live()) << "no row on PostgreSQL";
    EXPECT_TRUE(r1[2] && r1[2]->live()) << "no row on SQLite";
    EXPECT_FALSE(r1[1].has_value()) << "a row on MariaDB, which was not a member";
    // While it holds, the same majority is busy for anyone else.
    auto busy = cli(run(name, {"true"}, {}, urls));
    EXPECT_EQ(busy.code(), 75) << busy.describe();

    auto r = finish_holder(*p, "h");
    EXPECT_EQ(r.code(), 0) << r.describe();
    expect_one_line_of_ours(r);
    EXPECT_NE(r.err.find("cannot be reached"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("u:***@127.0.0.1"), std::string::npos) << "the member is not named: " << r.err;
    EXPECT_EQ(r.err.find("secret"), std::string::npos) << "password shown: " << r.err;
    EXPECT_EQ(held_on(name), 0u);
}

TEST_F(CliMajority, AFrozenMemberDoesNotHoldUpTheStart) {
    // A member that accepts connections and never answers, as a stopped postmaster does (the
    // kernel completes the handshake): its connect runs to its bound (5 s with a 60 s TTL).
    auto frozen = fault_proxy::for_url(pg_);
    frozen->blackhole();
    std::string const name = n("frozen");
    auto const frozen_url = frozen->proxied_url(pg_);
    std::vector<std::string> const urls{frozen_url, my_, sqlite_};
    auto p = start(run(name, sh(holder_script("h"), dir()), {"--ttl", "60s"}, urls));
    ASSERT_TRUE(eventually([&] { return present(file("h.started")) || p->finished(); }, 60s));
    ASSERT_TRUE(present(file("h.started"))) << p->wait(1s).describe();
    // COMMAND runs while sqlock's connection to the frozen member still waits for an answer: sqlock
    // went on with the majority that was open, it did not wait for the member's connect to give up.
    EXPECT_EQ(frozen->client_hangups(), 0u) << "COMMAND started only after the frozen member's connect gave up";
    EXPECT_TRUE(eventually([&] { return frozen->blackholed() > 0; }, 30s)) << "the frozen member was never asked";
    auto r1 = rows(name);
    EXPECT_FALSE(r1[0].has_value()) << "a row on PostgreSQL, the frozen member";
    EXPECT_TRUE(r1[1] && r1[1]->live()) << "no row on MariaDB";
    EXPECT_TRUE(r1[2] && r1[2]->live()) << "no row on SQLite";

    auto r = finish_holder(*p, "h");
    EXPECT_EQ(r.code(), 0) << r.describe();
    expect_one_line_of_ours(r);
    EXPECT_NE(r.err.find("majority member " + sqlock::redact_url(frozen_url) + " cannot be reached"), std::string::npos)
        << r.err;
    EXPECT_NE(r.err.find("not waited for"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("going on with 2 of 3 databases"), std::string::npos) << r.err;
    EXPECT_EQ(held_on(name), 0u);
}

TEST_F(CliMajority, TwoMembersUnreachableDoNotRunTheCommand) {
    std::string const name = n("two-down");
    for (auto const& urls :
         std::vector<std::vector<std::string>>{{pg_, down_my(), down_pg()},      // 1 of 3
                                               {down_pg(), down_my(), sqlite_},  // 1 of 3, another mix
                                               {pg_, my_, sqlite_,
                                                down_pg()}}) {  // 3 of 4: an even N needs every member at start
        auto r = cli(run(name, sh("touch \"$1/ran\"", dir()), {}, urls));
        EXPECT_EQ(r.code(), 69) << r.describe();
        expect_one_error_line(r);
        EXPECT_NE(r.err.find("COMMAND not started"), std::string::npos) << r.err;
        EXPECT_EQ(r.err.find("secret"), std::string::npos) << "password shown: " << r.err;
        EXPECT_EQ(r.out, "");
    }
    EXPECT_FALSE(present(file("ran")));
    EXPECT_EQ(held_on(name), 0u) << "a row was left behind";
}

TEST_F(CliMajority, ListShowsTheLockOnEachMemberAndNamesTheUnreachableOne) {
    std::string const name = n("listed");
    auto p = start_holder(name, "h", {"--ttl", "1h"});
    auto env = read_env(file("h.env"));
    auto shown = [](std::string const& url) { return sqlock::redact_url(url); };

    auto table = cli(with_dbs({"list"}, members()));
    EXPECT_EQ(table.code(), 0) << table.describe();
    EXPECT_EQ(table.err, "");
    std::istringstream lines(table.out);
    std::string header, line;
    std::getline(lines, header);
    EXPECT_EQ(std::regex_replace(header, std::regex(" +"), " "),
              "MEMBER NAME OWNER TOKEN CREATED_AT EXPIRES_AT REMAINING VALUE");
    std::size_t name_col = header.find("NAME"), owner_col = header.find("OWNER");
    std::map<std::string, int> ours;  // member -> rows of ours
    std::vector<std::string> status;
    bool in_status = false;
    while (std::getline(lines, line)) {
        if (line.empty()) {
            in_status = true;
            continue;
        }
        if (in_status) {
            status.push_back(line);
            continue;
        }
        if (line.compare(name_col, name.size() + 1, name + " ") != 0) continue;
        EXPECT_EQ(line.substr(owner_col, env.owner.size()), env.owner) << "columns are not aligned:\n" << table.out;
        ++ours[line.substr(0, line.find(' '))];
    }
    EXPECT_EQ(ours, (std::map<std::string, int>{{shown(pg_), 1}, {shown(my_), 1}, {shown(sqlite_), 1}})) << table.out;
    ASSERT_EQ(status.size(), 4u) << table.out;
    EXPECT_EQ(std::regex_replace(status[0], std::regex(" +"), " "), "MEMBER ANSWERED");
    for (std::size_t i = 1; i < status.size(); ++i)
        EXPECT_TRUE(std::regex_search(status[i], std::regex(" yes, \\d+ leases?$"))) << status[i];

    auto json = cli(with_dbs({"list", "--json"}, members()));
    EXPECT_EQ(json.code(), 0) << json.describe();
    std::istringstream jl(json.out);
    std::map<std::string, int> json_ours;
    while (std::getline(jl, line)) {
        auto j = nlohmann::ordered_json::parse(line);
        ASSERT_TRUE(j.is_object()) << line;
        EXPECT_EQ(j.begin().key(), "member") << line;
        if (j.at("name") != name) continue;
        EXPECT_EQ(j.at("owner"), env.owner);
        ++json_ours[j.at("member").get<std::string>()];
    }
    EXPECT_EQ(json_ours, ours) << json.out;

    // One member down: the others' leases, the member named, exit 69.
    auto const down = down_pg();
    auto partial = cli(with_dbs({"list"}, {pg_, down, sqlite_}));
    EXPECT_EQ(partial.code(), 69) << partial.describe();
    expect_one_error_line(partial);
    EXPECT_NE(partial.err.find(shown(down)), std::string::npos) << partial.err;
    bool down_said = false;
    std::set<std::string> listed_on;
    std::istringstream partial_lines(partial.out);
    while (std::getline(partial_lines, line)) {
        auto first = line.substr(0, line.find(' '));
        auto rest = line.substr(std::min(line.size(), line.find_first_not_of(' ', first.size())));
        if (rest.rfind(name + " ", 0) == 0) listed_on.insert(first);
        down_said = down_said || (first == shown(down) && rest.rfind("no: ", 0) == 0);
    }
    EXPECT_EQ(listed_on, (std::set<std::string>{shown(pg_), shown(sqlite_)})) << partial.out;
    EXPECT_TRUE(down_said) << "the members' status does not say the unreachable one did not answer:\n" << partial.out;
    EXPECT_EQ(partial.out.find("secret"), std::string::npos) << "password shown: " << partial.out;
    EXPECT_EQ(partial.err.find("secret"), std::string::npos) << "password shown: " << partial.err;
    auto partial_json = cli(with_dbs({"list", "--json"}, {pg_, down, sqlite_}));
    EXPECT_EQ(partial_json.code(), 69) << partial_json.describe();
    std::istringstream pj(partial_json.out);
    int listed = 0;
    while (std::getline(pj, line)) listed += nlohmann::json::parse(line).at("name") == name ? 1 : 0;
    EXPECT_EQ(listed, 2) << partial_json.out;

    auto done = finish_holder(*p, "h");
    EXPECT_EQ(done.code(), 0) << done.describe();
}

TEST_F(CliMajority, ReleaseForceReleasesOnEveryMemberAndSaysWhatEachSaid) {
    std::string const name = n("released");
    auto p = start_holder(name, "h", {"--ttl", "1h"});
    auto env = read_env(file("h.env"));

    // A member down: released on the others, named, exit 69.
    auto const down = down_my();
    auto partial = cli(with_dbs({"release", "--name", name, "--force"}, {pg_, down, sqlite_}));
    EXPECT_EQ(partial.code(), 69) << partial.describe();
    expect_one_error_line(partial);
    EXPECT_NE(partial.err.find(sqlock::redact_url(down)), std::string::npos) << partial.err;
    EXPECT_NE(partial.out.find(sqlock::redact_url(pg_) + ": released lock '" + name + "' held by " + env.owner),
              std::string::npos)
        << partial.out;
    EXPECT_NE(partial.out.find(sqlock::redact_url(down) + ": did not answer"), std::string::npos) << partial.out;
    auto after = rows(name);
    EXPECT_FALSE(after[0].has_value());
    EXPECT_TRUE(after[1].has_value()) << "MariaDB was not given, its row must stay";
    EXPECT_FALSE(after[2].has_value());

    // Every member: released where held, "no lock" elsewhere, exit 0.
    auto all = cli(with_dbs({"release", "--name", name, "--force"}, members()));
    EXPECT_EQ(all.code(), 0) << all.describe();
    EXPECT_EQ(all.err, "");
    EXPECT_NE(all.out.find(sqlock::redact_url(my_) + ": released lock '" + name + "'"), std::string::npos) << all.out;
    EXPECT_NE(all.out.find(sqlock::redact_url(pg_) + ": no lock named '" + name + "'"), std::string::npos) << all.out;
    EXPECT_NE(all.out.find(sqlock::redact_url(sqlite_) + ": no lock named '" + name + "'"), std::string::npos)
        << all.out;
    EXPECT_EQ(held_on(name), 0u);

    // Nothing held anywhere: exit 1.
    auto none = cli(with_dbs({"release", "--name", name, "--force"}, members()));
    EXPECT_EQ(none.code(), 1) << none.describe();
    expect_one_error_line(none);
    EXPECT_NE(none.err.find("no lock named"), std::string::npos) << none.err;

    auto holder = finish_holder(*p, "h");
    EXPECT_EQ(holder.code(), 76) << "the holder's lock was broken: " << holder.describe();
}

TEST_F(CliMajority, LosingTheMajorityStopsTheCommandAndExits76) {
    std::string const name = n("lost");
    // One member's row broken alone costs nothing: the majority renews, and the
    // member is taken again in a later round. A TTL of 6 s leaves the renewals
    // room on a loaded machine: with 2 s, a renewal round slowed past the safe
    // validity stopped COMMAND as "about to be lost" before the loss was seen.
    auto p = start_holder(name, "h", {"--ttl", "6s"});
    auto sqlite = raw_session(engine::sqlite, sqlite_);
    delete_row(*sqlite, name);
    EXPECT_TRUE(eventually([&] { return held_on(name) == 3; }, 30s)) << "the SQLite member was not taken again";
    EXPECT_FALSE(p->finished());

    // Broken on every member: lost.
    auto rel = cli(with_dbs({"release", "--name", name, "--force"}, members()));
    EXPECT_EQ(rel.code(), 0) << rel.describe();
    auto r = p->wait();
    EXPECT_EQ(r.code(), 76) << r.describe();
    EXPECT_FALSE(present(file("h.done"))) << "COMMAND ran to its end";
    expect_one_line_of_ours(r);
    EXPECT_NE(r.err.find("lost lock"), std::string::npos) << r.err;
}

TEST_F(CliMajority, TheSameDatabaseTwiceExits64) {
    std::string const name = n("twice");
    auto cmd = sh("touch \"$1/ran\"", dir());
    auto other_spelling = "sqlite:" + (member_file_.parent_path() / "." / "member.db").string();
    auto pg_alias = "postgres" + pg_.substr(pg_.find(':'));
    for (auto const& urls : std::vector<std::vector<std::string>>{{pg_, pg_, sqlite_},
                                                                  {pg_, my_, sqlite_, other_spelling},
                                                                  {pg_alias, my_, pg_}}) {
        for (auto const& args :
             std::vector<std::vector<std::string>>{run(name, cmd, {}, urls), with_dbs({"list"}, urls),
                                                   with_dbs({"release", "--name", name, "--force"}, urls)}) {
            auto r = cli(args);
            EXPECT_EQ(r.code(), 64) << args[0] << ": " << r.describe();
            expect_one_error_line(r);
            EXPECT_TRUE(r.err.find("given twice") != std::string::npos ||
                        r.err.find("are the same database") != std::string::npos)
                << r.err;
            EXPECT_EQ(r.out, "");
        }
    }
    EXPECT_FALSE(present(file("ran")));
    // --member-timeout must be below the TTL (the library says so).
    auto mt = cli(run(name, cmd, {"--ttl", "1s", "--member-timeout", "2s"}));
    EXPECT_EQ(mt.code(), 64) << mt.describe();
    expect_one_error_line(mt);
    EXPECT_FALSE(present(file("ran")));
    EXPECT_EQ(held_on(name), 0u);
}

// ------------------------------------------------------------------ no server needed

class CliBasics : public ::testing::Test {
protected:
    cli_result cli(std::vector<std::string> args, fs::path const& cwd, env_changes env = {}) {
        return cli_process(std::move(args), files_.path(), std::move(env), cwd).wait();
    }
    temp_dir files_;
};

TEST_F(CliBasics, HelpAndVersion) {
    temp_dir cwd;
    auto version = cli({"--version"}, cwd.path());
    EXPECT_EQ(version.code(), 0) << version.describe();
    EXPECT_EQ(version.out, "sqlock " SQLOCK_VERSION_STRING " (lock tables: protocol " +
                               std::to_string(sqlock::protocol_version()) + ")\n")
        << version.out;
    auto help = cli({"--help"}, cwd.path());
    EXPECT_EQ(help.code(), 0) << help.describe();
    for (char const* word : {"run", "list", "release", "schema", "elect", "leader", "semaphore"})
        EXPECT_NE(help.out.find(word), std::string::npos);
    for (char const* sub : {"run", "list", "release", "schema", "elect", "leader", "semaphore"}) {
        auto r = cli({sub, "--help"}, cwd.path());
        EXPECT_EQ(r.code(), 0) << sub << ": " << r.describe();
        EXPECT_NE(r.out.find("--db"), std::string::npos) << sub;
    }
    EXPECT_NE(cli({"run", "--help"}, cwd.path()).out.find("--conflict-exit-code"), std::string::npos);
    auto run_help = cli({"run", "--help"}, cwd.path()).out;
    EXPECT_NE(run_help.find("--limit"), std::string::npos);
    EXPECT_NE(run_help.find("--shared"), std::string::npos);
    EXPECT_TRUE(fs::is_empty(cwd.path())) << "help created files";
}

TEST_F(CliBasics, RunCreatesASqliteFileAndItsTables) {
    // On SQLite run creates the file and the tables by itself; on a server the
    // schema is the operator's (Engines/Cli.MissingSchemaExits78AndSchemaApplyCreatesIt).
    temp_dir cwd;
    auto r = cli({"run", "--db", sqlite_url(cwd.path() / "new.db"), "--name", "x", "--", "true"}, cwd.path());
    EXPECT_EQ(r.code(), 0) << r.describe();
    EXPECT_TRUE(present(cwd.path() / "new.db"));
    auto list = cli({"list", "--db", "sqlite:new.db"}, cwd.path());
    EXPECT_EQ(list.code(), 0) << list.describe();
}

// Issue 18 item 9 through the CLI: `sqlock run` over three SQLite members
// prints tokens 1, 2, 3; with c.db unusable (a directory in its place) 4; then
// a.db is deleted and b.db made unusable. The run must neither create a.db nor
// hand out 4 again: it names a.db and `sqlock schema --apply`. Once applied,
// a.db has a new identity and does not count (with b.db still unusable: no
// token); with all three back it is seeded once its identity is older than the
// ttl, and then a and c alone hand out a token above every earlier one.
// (Before the fix the run created a.db and its tables and printed 4 again.)
TEST_F(CliBasics, MajorityMemberThatLostItsDataIsNotRecreatedAndRepeatsNoToken) {
    temp_dir cwd;
    auto const dir = cwd.path();
    std::vector<std::string> const dbs{"--db", "sqlite:a.db", "--db", "sqlite:b.db", "--db", "sqlite:c.db"};
    for (auto const* f : {"sqlite:a.db", "sqlite:b.db", "sqlite:c.db"}) {
        auto r = cli({"schema", "--apply", "--db", f}, dir);
        ASSERT_EQ(r.code(), 0) << r.describe();
    }
    auto run = [&] {
        auto args = dbs;
        args.insert(args.end(), {"--name", "x", "--ttl", "1s"});
        return cli(run_args(args, {"sh", "-c", "printf '%s\\n' \"$SQLOCK_TOKEN\""}), dir);
    };
    auto token = [](cli_result const& r) { return r.code() == 0 ? trim(r.out) : "failed: " + r.describe(); };
    auto unusable = [&](char const* f) {
        fs::rename(dir / f, dir / (std::string(f) + ".away"));
        fs::create_directory(dir / f);
    };
    auto usable = [&](char const* f) {
        fs::remove(dir / f);
        fs::rename(dir / (std::string(f) + ".away"), dir / f);
    };
    for (int k = 1; k <= 3; ++k) ASSERT_EQ(token(run()), std::to_string(k));
    unusable("c.db");
    ASSERT_EQ(token(run()), "4");
    usable("c.db");
    for (auto const* f : {"a.db", "a.db-wal", "a.db-shm"}) fs::remove(dir / f);
    unusable("b.db");
    auto lost = run();
    EXPECT_NE(trim(lost.out), "4") << "token 4 handed out a second time";
    EXPECT_EQ(lost.code(), 78) << lost.describe();
    EXPECT_NE(lost.err.find("a.db does not exist"), std::string::npos) << lost.err;
    EXPECT_NE(lost.err.find("sqlock schema --apply --db sqlite:a.db"), std::string::npos) << lost.err;
    EXPECT_FALSE(present(dir / "a.db")) << "the member's database was created implicitly";

    auto apply = cli({"schema", "--apply", "--db", "sqlite:a.db"}, dir);
    ASSERT_EQ(apply.code(), 0) << apply.describe();
    auto unjoined = run();
    EXPECT_NE(trim(unjoined.out), "4") << "token 4 handed out a second time";
    EXPECT_NE(unjoined.code(), 0) << unjoined.describe();
    EXPECT_NE(unjoined.err.find("a.db has not joined"), std::string::npos) << unjoined.err;

    usable("b.db");
    long long last = 4;
    bool const joined = eventually(
        [&] {
            auto const t = token(run());
            EXPECT_EQ(t, std::to_string(last + 1));
            last = std::atoll(t.c_str());
            long long n = 0;
            *raw_session(engine::sqlite, sqlite_url(dir / "a.db"))
                << "SELECT COUNT(*) FROM sqlock_majority_members g JOIN sqlock_identity i ON g.id = i.id",
                soci::into(n);
            return n > 0;
        },
        30s);
    ASSERT_TRUE(joined) << "a.db was never seeded";
    unusable("b.db");
    EXPECT_EQ(token(run()), std::to_string(last + 1)) << "a.db and c.db, a.db seeded";
}

TEST_F(CliBasics, EmbeddedSqliteFileWorksOutOfTheBox) {
    temp_dir cwd;
    // list in an empty directory creates nothing and names the fix.
    auto early = cli({"list"}, cwd.path());
    EXPECT_EQ(early.code(), 78) << early.describe();
    EXPECT_NE(early.err.find("sqlock schema --apply"), std::string::npos);
    EXPECT_FALSE(present(cwd.path() / "sqlock.db"));

    auto r = cli({"run", "--name", "x", "--", "true"}, cwd.path());
    EXPECT_EQ(r.code(), 0) << r.describe();
    EXPECT_EQ(r.out + r.err, "");
    EXPECT_TRUE(present(cwd.path() / "sqlock.db"));
    auto list = cli({"list"}, cwd.path());
    EXPECT_EQ(list.code(), 0) << list.describe();
    auto ddl = cli({"schema"}, cwd.path());
    EXPECT_EQ(trim(ddl.out), trim(sqlock::schema_sql(engine::sqlite)));
}

}  // namespace
