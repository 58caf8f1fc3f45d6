// sqlock tests — the CLI real-time checker (issue 18, item 3): under `sqlock run`,
// a process of the old holder's COMMAND alive while the new holder's COMMAND
// runs is a violation.
//
// Engines/CliRealtime.<Test>/{postgresql,mysql}: the first `sqlock run --ttl 2s`
// reaches its database through tests/fault_proxy.hpp; once the lock row shows a
// first renewal (its expiry moved), the proxy stalls every connection of that
// sqlock (a stopped server: renewals are sent and never answered). A second
// `sqlock run --wait` on the same name, straight to the database, gets the lock
// when the row expires. Every process of the first COMMAND's tree ignores
// SIGTERM and records "pid starttime" in first.pids when it starts (starttime
// from /proc/PID/stat, so a reused pid is not mistaken for it); the second
// COMMAND, as its very first act, looks each of them up in /proc and writes
// the ones still alive (not zombies) to second.alive. The checker: second.alive
// is empty. The fault bit when the first sqlock exits 76 (it stopped COMMAND)
// and the second ran its COMMAND.
//
// The first COMMAND's tree: COMMAND itself ignoring SIGTERM; COMMAND (which
// dies of SIGTERM) with a child that ignores it; COMMAND with a daemon that
// left its session (setsid, double fork: the daemon's parent exited, so it is
// re-parented to sqlock's guardian, a child subreaper); and the first sqlock
// killed (SIGKILL) or stopped (SIGSTOP) once stalled, leaving its guardian to
// stop the tree.
//
// SQLite is not run: it has no server session to stall (a test holding the
// file's write lock would keep the second holder out as well).
#include "cli_process.hpp"
#include "fault_proxy.hpp"
#include "test_env.hpp"

#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace {

using namespace std::chrono_literals;
using namespace sqlock_test;
using sqlock::engine;

/// Sourced by every process of the first tree (`. "$D/reg.sh"`): appends
/// "$$ starttime" to $D/first.pids. One short append: atomic with O_APPEND.
constexpr char const* reg_script = R"sh(read -r stat < /proc/$$/stat
rest=${stat##*) }
set -- $rest
echo "$$ ${20}" >> "$D/first.pids"
)sh";

/// The second COMMAND's first act: which recorded processes of the first tree
/// are alive now (same pid and start time, not a zombie). Then it marks its run.
constexpr char const* probe_script = R"sh(D=$1
alive=
while read -r pid start; do
  [ -r "/proc/$pid/stat" ] || continue
  read -r stat < "/proc/$pid/stat" || continue
  rest=${stat##*) }
  set -- $rest
  if [ "${20}" = "$start" ] && [ "$1" != Z ] && [ "$1" != X ]; then alive="$alive $pid($1)"; fi
done < "$D/first.pids"
echo "$alive" > "$D/second.alive.tmp"
mv "$D/second.alive.tmp" "$D/second.alive"
)sh";

/// A process of the first tree that ignores SIGTERM: sh stubborn.sh DIR.
constexpr char const* stubborn_script = R"sh(trap '' TERM
D=$1
. "$D/reg.sh"
exec sleep 1000
)sh";

struct tree_shape {
    char const* name;
    char const* script;  ///< the first COMMAND: sh -c SCRIPT sh DIR, D set to DIR
    int processes;       ///< how many register in first.pids
    int to_sqlock = 0;   ///< a signal for the first sqlock once stalled: SIGKILL (dead) or SIGSTOP (not running)
};

class CliRealtime : public engine_fixture {
protected:
    void open_store() override { sqlock::store(url_, {.create_schema = true}); }

    /// `tree` as the first holder's COMMAND, the lease frozen after its first
    /// renewal; then the checker.
    void run_scenario(tree_shape const& tree) {
        std::string const name = n(std::string("realtime-") + tree.name);
        fs::path const dir = files_.path();
        std::ofstream(dir / "reg.sh") << reg_script;
        std::ofstream(dir / "probe.sh") << probe_script;
        std::ofstream(dir / "stubborn.sh") << stubborn_script;
        kill_leftovers_ = dir / "first.pids";

        auto proxy = fault_proxy::for_url(url_);
        cli_process first({"run", "--db", proxy->proxied_url(url_), "--name", name, "--ttl", "2s", "--", "sh", "-c",
                           std::string("D=$1; ") + tree.script, "sh", dir.string()},
                          dir);
        ASSERT_TRUE(eventually([&] { return registered() == tree.processes || first.finished(); }, 30s));
        ASSERT_EQ(registered(), tree.processes) << first.wait(1s).describe();
        auto const granted = row(name);
        ASSERT_TRUE(granted.has_value()) << "no lock row for the first holder";

        // The first renewal went through: from here on nothing of this sqlock reaches the server.
        bool const renewed = eventually(
            [&] {
                auto r = row(name);
                return (r && r->token == granted->token && r->expires_us > granted->expires_us) || first.finished();
            },
            30s);
        proxy->stall();
        ASSERT_TRUE(renewed && !first.finished()) << "the first holder did not renew: " << first.wait(1s).describe();
        if (tree.to_sqlock != 0) ::kill(first.pid(), tree.to_sqlock);

        cli_process second({"run", "--db", url_, "--name", name, "--wait", "60s", "--", "sh",
                            (dir / "probe.sh").string(), dir.string()},
                           dir);
        auto const r2 = second.wait(90s);
        proxy->resume();
        if (tree.to_sqlock == SIGSTOP) ::kill(first.pid(), SIGCONT);
        auto const r1 = first.wait(60s);

        // The fault bit: the first sqlock stopped its COMMAND for the lease, and the second ran.
        if (tree.to_sqlock == SIGKILL) {
            EXPECT_TRUE(WIFSIGNALED(r1.status) && WTERMSIG(r1.status) == SIGKILL) << r1.describe();
        } else {
            EXPECT_EQ(r1.code(), 76) << "the first sqlock: " << r1.describe();
        }
        ASSERT_EQ(r2.code(), 0) << "the second sqlock: " << r2.describe();
        ASSERT_TRUE(fs::exists(dir / "second.alive")) << "the second COMMAND did not run: " << r2.describe();
        auto alive = slurp(dir / "second.alive");
        while (!alive.empty() && (alive.back() == '\n' || alive.back() == ' ')) alive.pop_back();
        EXPECT_EQ(alive, "") << "processes of the first holder's COMMAND (pid(state), of " << slurp(dir / "first.pids")
                             << ") were alive when the second holder's COMMAND started; first sqlock: "
                             << r1.describe();
    }

    int registered() const {
        std::istringstream in(slurp(files_.path() / "first.pids"));
        int lines = 0;
        for (std::string line; std::getline(in, line);) lines += line.empty() ? 0 : 1;
        return lines;
    }

    void TearDown() override {
        // What a failed run leaves behind.
        std::istringstream in(slurp(kill_leftovers_));
        pid_t pid = 0;
        std::string start;
        while (in >> pid >> start) {
            std::istringstream stat(slurp("/proc/" + std::to_string(pid) + "/stat"));
            std::string s = stat.str();
            auto paren = s.rfind(')');
            std::istringstream rest(paren == std::string::npos ? std::string() : s.substr(paren + 2));
            std::vector<std::string> fields;
            for (std::string f; rest >> f;) fields.push_back(f);
            if (fields.size() > 19 && fields[19] == start) ::kill(pid, SIGKILL);
        }
        engine_fixture::TearDown();
    }

    temp_dir files_;
    fs::path kill_leftovers_;
};

TEST_P(CliRealtime, CommandIgnoringSigtermIsGoneBeforeTheNextHolderRuns) {
    run_scenario({"ignores-term", "exec sh \"$D/stubborn.sh\" \"$D\"", 1});
}

TEST_P(CliRealtime, ChildIgnoringSigtermIsGoneBeforeTheNextHolderRuns) {
    // COMMAND itself dies of SIGTERM; its child shrugs it off and is orphaned.
    run_scenario({"child-ignores-term", "sh \"$D/stubborn.sh\" \"$D\" & . \"$D/reg.sh\"; wait", 2});
}

TEST_P(CliRealtime, DaemonInANewSessionIsGoneBeforeTheNextHolderRuns) {
    // A daemon's double fork: setsid, a background child, its parent exits.
    run_scenario({"daemon",
                  "setsid sh -c 'sh \"$1/stubborn.sh\" \"$1\" </dev/null >/dev/null 2>&1 &' sh \"$D\"; "
                  ". \"$D/reg.sh\"; exec sleep 1000",
                  2});
}

TEST_P(CliRealtime, TreeOfAKilledSqlockIsGoneBeforeTheNextHolderRuns) {
    // sqlock dies (SIGKILL, the OOM killer) while its lease is in doubt: its
    // guardian stops the tree by the deadline sqlock last saw, not 5 s later.
    run_scenario({"sqlock-killed", "sh \"$D/stubborn.sh\" \"$D\" & . \"$D/reg.sh\"; wait", 2, SIGKILL});
}

TEST_P(CliRealtime, TreeOfAStoppedSqlockIsGoneBeforeTheNextHolderRuns) {
    // sqlock stops running (SIGSTOP, a starved process) while its lease is in
    // doubt: its guardian kills the tree by the deadline sqlock published.
    run_scenario({"sqlock-stopped", "sh \"$D/stubborn.sh\" \"$D\" & . \"$D/reg.sh\"; wait", 2, SIGSTOP});
}

INSTANTIATE_TEST_SUITE_P(Engines, CliRealtime, ::testing::Values(engine::postgresql, engine::mysql),
                         engine_param_name{});

}  // namespace
