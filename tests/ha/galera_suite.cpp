// sqlock on a 3-node MariaDB Galera cluster (scripts/ha/galera.sh; docs/ha/galera.md).
//
//   GaleraTest.CounterStormAcrossNodes           the table lock's counter storm, workers spread over the 3 nodes,
//                                                judged by K1-K9; certification conflicts did happen   fault-smoke
//   GaleraTest.RowLockRefusedByDefault           row_locker on a Galera node: usage_error saying why and what
//                                                to use instead (also with galera_single_writer=false)   fault-smoke
//   GaleraTest.RowLockGrantedWhenSingleWriterDeclared  store_options::galera_single_writer or the URL parameter:
//                                                the row lock works with every client on one node      fault-smoke
//   GaleraTest.TableLockWaitersPollWithoutMarks   a waiter on node 2 of a lock held on node 1: its store parks no
//                                                listener, the row's waiters column stays 0, the release is
//                                                found by the waiter's poll                            fault-smoke
//   GaleraTest.CliNineRunsOverThreeNodes          the experiment: 9 `sqlock run` loops over 3 nodes, 5
//                                                sections each, a shared counter file: table 45/45; row refused
//                                                (exit 64, the message)                                 fault-smoke
//   GaleraTest.CounterStormWhileNodeKilledAndRejoins  the storm while node 2, then node 3, is killed -9 and
//                                                rejoins by IST; its workers kept off it until it is warm  ha
#include "battery_harness.hpp"
#include "cli_process.hpp"
#include "fault_proxy.hpp"
#include "ha_env.hpp"
#include "run_command.hpp"

#include <sqlock/sqlock.hpp>

#include <gtest/gtest.h>

#include <fstream>
#include <thread>

#ifndef SQLOCK_HA_GALERA_DIR
#error "SQLOCK_HA_GALERA_DIR (the galera topology's directory) must be defined by the build"
#endif

namespace {

using namespace std::chrono_literals;
using namespace sqlock_battery;
using sqlock::engine;
namespace fs = std::filesystem;

class GaleraTest : public sqlock_test::HaTest {
protected:
    void SetUp() override { require_topology(SQLOCK_HA_GALERA_DIR, "galera.sh"); }

    std::vector<std::string> node_urls() const {
        return {var("SQLOCK_HA_GALERA_URL1"), var("SQLOCK_HA_GALERA_URL2"), var("SQLOCK_HA_GALERA_URL3")};
    }

    /// Certification failures and brute-force aborts the nodes counted so far: conflicts between nodes.
    std::int64_t conflicts() const {
        std::int64_t n = 0;
        for (auto const& url : node_urls()) {
            auto s = sqlock_test::raw_session(engine::mysql, url);
            for (char const* v : {"wsrep_local_cert_failures", "wsrep_local_bf_aborts"}) {
                std::string name;
                std::int64_t value = 0;
                *s << "SHOW GLOBAL STATUS LIKE '" + std::string(v) + "'", soci::into(name), soci::into(value);
                n += value;
            }
        }
        return n;
    }

    /// A node's fault verb of scripts/ha/galera.sh (kill N, restart N), on this topology's directory. A restart under
    /// the storm on a loaded machine took more than the script's default 90 s to reach Synced.
    void galera(std::string const& verb, int node) {
        auto r =
            sqlock_test::run_command({"/bin/bash", var("SQLOCK_HA_GALERA_SCRIPT"), verb, std::to_string(node)},
                                     {"SQLOCK_HA_DIR=" + std::string(SQLOCK_HA_GALERA_DIR), "SQLOCK_HA_TIMEOUT=150"},
                                     240s);
        ASSERT_TRUE(r.ok()) << "galera.sh " << verb << " " << node << ": " << r.err << r.diagnosis;
    }
};

/// A counter storm with the table lock: 6 processes × 3 threads on 2 locks, process p on node p % 3 + 1, the
/// unfenced counter (a file) read, paused and written back inside the lock. Exclusion end to end (K4), in DB
/// time (K1), tokens (K7), typed errors only (K9).
scenario storm(std::string id, std::vector<std::string> urls, milliseconds duration) {
    scenario s;
    s.id = std::move(id);
    s.fixed_seed = 2001;
    s.processes = 6;
    s.threads = 3;
    s.locks = 2;
    s.duration = duration;
    s.ttl = 10s;
    s.acquire_wait = 10s;
    s.lock_wait_timeout = 5s;  // a loaded machine: the storm is about conflicts between nodes, not timeouts
    s.io_timeout = 10s;
    s.fenced = false;  // the fenced resource lives on the shared test servers, not started for this topology
    s.worker_urls = std::move(urls);
    s.min_grants = 30;
    return s;
}

TEST_F(GaleraTest, CounterStormAcrossNodes) {
    auto const before = conflicts();
    scenario s = storm("galera-storm", node_urls(), 8s);
    s.k2 = true;
    battery_run(s, engine::mysql).run_and_check();
    if (HasFailure()) return;
    // The contenders met on different nodes: the conflicts were there to be mapped, and were.
    EXPECT_GT(conflicts() - before, 0) << "no certification conflict in the storm: it did not test their mapping";
}

TEST_F(GaleraTest, RowLockRefusedByDefault) {
    for (auto const& url :
         {var("SQLOCK_HA_GALERA_URL1"), var("SQLOCK_HA_GALERA_URL2") + "?galera_single_writer=false"}) {
        sqlock::store db(url, {.create_schema = true});
        try {
            (void)sqlock::row_locker(db, {.ttl = 5s});
            ADD_FAILURE() << "row_locker on a Galera node (" << url << ") was not refused";
        } catch (sqlock::usage_error const& e) {
            std::string const what = e.what();
            EXPECT_NE(what.find("Galera"), std::string::npos) << what;
            EXPECT_NE(what.find("table_locker"), std::string::npos) << what;
            EXPECT_NE(what.find("galera_single_writer"), std::string::npos) << what;
        }
    }
}

TEST_F(GaleraTest, RowLockGrantedWhenSingleWriterDeclared) {
    auto const url = var("SQLOCK_HA_GALERA_URL1");
    sqlock::store by_option(url, {.create_schema = true, .galera_single_writer = true});
    sqlock::store by_url(url + "?galera_single_writer=true");
    auto first = sqlock::row_locker(by_option, {.ttl = 10s});
    auto second = sqlock::row_locker(by_url, {.ttl = 10s});
    std::string const name = "galera-single-writer-" + sqlock_test::random_hex(6);
    auto held = first.try_acquire(name);
    ASSERT_TRUE(held);
    auto const token = held->token();
    EXPECT_FALSE(second.try_acquire(name)) << "two row-lock holders on one node";
    held->release();
    auto next = second.try_acquire(name);
    ASSERT_TRUE(next);
    EXPECT_GT(next->token(), token);
}

/// On Galera a waiter polls: a mark would be a write on the busy row that certification aborts against releases on
/// other nodes, and a release's KILL QUERY reaches its own node only. The waiter's store parks no listener (no
/// bell statement on any node), its busy answers leave the row unmarked, and it gets the lock once it is released.
TEST_F(GaleraTest, TableLockWaitersPollWithoutMarks) {
    auto const urls = node_urls();
    std::string const tables = "sqlg" + sqlock_test::random_hex(8);
    sqlock::store holder_store(urls[0], {.create_schema = true, .table_prefix = tables});
    sqlock::store waiter_store(urls[1], {.table_prefix = tables});
    auto holder = sqlock::table_locker(holder_store, {.ttl = 30s});
    auto waiter = sqlock::table_locker(waiter_store, {.ttl = 30s, .backoff_min = 50ms, .backoff_max = 200ms});
    std::string const name = "galera-poll-" + sqlock_test::random_hex(6);
    auto held = holder.try_acquire(name);
    ASSERT_TRUE(held);
    EXPECT_THROW((void)waiter.acquire(name, 2s), sqlock::timeout);
    ASSERT_GE(waiter.stats().busy, 2) << "the waiter did not wait: nothing was tested";
    std::string const bell = "SELECT SLEEP(20) AS " + tables + "_bell";
    for (auto const& url : urls) {
        auto s = sqlock_test::raw_session(engine::mysql, url);
        long long parked = -1;
        *s << "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE INFO = :b", soci::use(bell, "b"),
            soci::into(parked);
        EXPECT_EQ(parked, 0) << "a store on Galera parked its release listener (" << url << ")";
    }
    auto s = sqlock_test::raw_session(engine::mysql, urls[0]);
    long long waiters = -1;
    *s << "SELECT waiters FROM " + tables + "_locks WHERE name = :n", soci::use(name, "n"), soci::into(waiters);
    EXPECT_EQ(waiters, 0) << "a waiter on Galera marked the busy row";
    auto const token = held->token();
    held->release();
    auto next = waiter.acquire(name, 30s);
    EXPECT_GT(next.token(), token);
    next.release();
}

/// The CLI experiment: 9 loops of `sqlock run` (3 per node), 5 critical sections each, around a
/// read-pause-write of one counter file.
TEST_F(GaleraTest, CliNineRunsOverThreeNodes) {
    auto const urls = node_urls();
    auto const dir = fs::temp_directory_path() / ("sqlock-galera-cli-" + sqlock_test::random_hex(6));
    fs::create_directories(dir);
    auto const counter = dir / "counter";
    std::ofstream(counter) << 0 << "\n";
    std::string const section = "n=$(cat " + counter.string() + "); sleep 0.02; echo $((n + 1)) > " + counter.string() +
                                ".tmp && mv " + counter.string() + ".tmp " + counter.string();
    std::string const name = "galera-cli-" + sqlock_test::random_hex(6);
    { sqlock::store create(urls[0], {.create_schema = true}); }
    std::vector<std::vector<sqlock_test::cli_result>> results(9);
    std::vector<std::thread> loops;
    for (std::size_t i = 0; i < 9; ++i)
        loops.emplace_back([&, i] {
            for (int k = 0; k < 5; ++k) {
                sqlock_test::cli_process p({"run", "--db", urls[i % 3], "--name", name, "--ttl", "30s", "--wait",
                                            "120s", "--", "/bin/sh", "-c", section},
                                           dir);
                results[i].push_back(p.wait(180s));
            }
        });
    for (auto& t : loops) t.join();
    for (auto const& loop : results)
        for (auto const& r : loop) EXPECT_EQ(r.code(), 0) << r.describe();
    std::ifstream in(counter);
    int value = -1;
    in >> value;
    EXPECT_EQ(value, 45) << "the counter file after 45 critical sections under the table lock";

    auto refused =
        sqlock_test::cli_process({"run", "--db", urls[1], "--name", name, "--strategy", "row", "--", "/bin/true"}, dir)
            .wait(60s);
    EXPECT_EQ(refused.code(), 64) << refused.describe();
    EXPECT_NE(refused.err.find("Galera"), std::string::npos) << refused.describe();
    EXPECT_NE(refused.err.find("galera_single_writer"), std::string::npos) << refused.describe();
    if (!HasFailure()) fs::remove_all(dir);
}

/// The storm while node 2, then node 3, is killed with SIGKILL and rejoins by IST (galera.sh restart: --wsrep-recover,
/// then --wsrep-start-position). Nodes 2 and 3 are reached through fault proxies: the killed node's proxy refuses its
/// workers (typed errors, K9) from before the kill until the rejoined node is Synced and has built its entries of the
/// lock table (warm_trigger_cache), which a fresh server building them under the storm now and then got broken
/// (docs/ha/galera.md, "Rejoined nodes"). Exclusion and tokens hold throughout.
TEST_F(GaleraTest, CounterStormWhileNodeKilledAndRejoins) {
    auto const direct = node_urls();
    std::vector<std::unique_ptr<sqlock_test::fault_proxy>> proxies;
    std::vector<std::string> urls{direct[0]};
    for (std::size_t i = 1; i < direct.size(); ++i) {
        proxies.push_back(sqlock_test::fault_proxy::for_url(direct[i]));
        urls.push_back(proxies.back()->proxied_url(direct[i]));
    }
    scenario s = storm("galera-kill", urls, 60s);  // a restart takes about 20 s: both kills fit, with 20 s after
    s.min_grants = 20;
    s.nemesis_script = [this, &direct, &proxies](nemesis_ctl& n) {
        for (int node : {2, 3}) {
            n.sleep(3s);
            if (std::chrono::steady_clock::now() > n.end - 20s) return;
            auto const target = "node" + std::to_string(node);
            auto& proxy = *proxies[static_cast<std::size_t>(node) - 2];
            proxy.block();
            n.log("block", target, "start", "fault proxy refuses the node's workers");
            n.log("kill", target, "start", "SIGKILL mariadbd");
            galera("kill", node);
            n.sleep(1s);
            galera("restart", node);
            n.log("kill", target, "stop", "rejoined by IST, Synced");
            n.warm_node(direct[static_cast<std::size_t>(node) - 1]);
            n.log("warm", target, "instant", "the lock table's table-cache entries built, no worker on the node");
            proxy.unblock();
            n.log("block", target, "stop", "fault proxy forwards again");
        }
    };
    battery_run(s, engine::mysql).run_and_check();
}

}  // namespace
