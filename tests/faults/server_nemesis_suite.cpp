// sqlock reliability battery — server-side nemeses D03, D04 and D07 (P2, P4, P6, P8), each on a
// private PostgreSQL or MariaDB server of its own (scripts/test-servers.sh with SQLOCK_TEST_ENGINES=
// postgresql or mariadb),
// never the shared test servers: the faults hit the whole server.
//
//   ServerNemesis.D03FrozenServer...: the whole server (postmaster and every backend) frozen with the
//     cgroup v1 freezer for 3×TTL. The holder's lease is reported lost while the server is frozen
//     (the deadline thread; renewals hang), a call made meanwhile returns by its own bounds, and
//     after the thaw the renewal that was in flight does not revive the row (the server's
//     `expires_at >= now` check), a waiter takes over with a greater token and the old holder's
//     fenced write is refused.
//   ServerNemesis.D04ServerClockJumpsForward...: the server's clock (libfaketime preloaded into the
//     postmaster) jumps 3×TTL ahead: the server sees the lease expired, the holder's renewal is
//     refused (lost), another client takes over with a greater token, the old fenced write is refused.
//   ServerNemesis.D04ServerClockJumpsBackward...: 3×TTL back: leases last longer in real time, the
//     holder keeps renewing, nobody else gets the lock while it holds it.
//   ServerNemesis.D07SilentPartition...: a holder in a network namespace of its own (veth to the
//     root namespace, where the server also listens) is cut off by an nftables drop rule for 3×TTL:
//     it reports the loss before the partition heals, a client in the root namespace takes over after
//     expiry with a greater token, and after healing the old holder's renew, release and fenced write
//     are refused.
//   ServerNemesisEngines.*: the same faults on MariaDB (a private server of SQLOCK_TEST_ENGINES=mariadb)
//     and on the row lock (row_locker: SELECT ... FOR UPDATE in a transaction left open):
//     - D03 on MariaDB, table lock: as on PostgreSQL (mariadbd is one process in the freezer).
//     - D03, row lock (PostgreSQL, MariaDB): the holder reports the loss while the server is frozen
//       (its keep-alive is bounded by io_timeout and the safe deadline, and gives the connection up);
//       after the thaw the server reads the closed connection to its end and rolls the old
//       transaction back, the waiter is granted the row with a greater token, the old token's fenced
//       write is refused, and the row audit (audit.hpp install_row_audit) shows that no transaction
//       but the new holder's committed a grant.
//     - D04 on MariaDB (libfaketime preloaded into mariadbd): forward and backward, as on PostgreSQL.
//     - D01 (kill -9 of the whole server), row lock (PostgreSQL, MariaDB): the holder's lease (TTL 30 s) is
//       reported lost within a few seconds of the crash (the watch on its pinned session), not at its next
//       keep-alive 10 s later, and the lost event says the session ended.
//     - D07 on MariaDB (table lock) and the row lock on both engines: the partitioned holder reports
//       the loss during the partition; the client in the root namespace is granted the lock only
//       after the holder's last safe deadline (the worker prints it: now + remaining()) — for the row
//       lock once the server ended the holder's transaction by the idle-in-transaction bound the
//       library sets (PostgreSQL idle_in_transaction_session_timeout, MariaDB idle_transaction_timeout)
//       — with a greater token; after healing the old holder's renew, release and fenced write are
//       refused.
// Each step is recorded with its steady-clock time; assertions order events ("lost before the thaw"),
// they never rely on a sleep's length. Root is needed (cgroups, netns, running the server as
// postgres): without it these skip outside CI and fail under CI=true.
#include "audit.hpp"
#include "private_server.hpp"
#include "proc_net.hpp"
#include "test_env.hpp"
#include "test_process.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <mutex>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

using namespace sqlock_test;
using namespace std::chrono_literals;
using sqlock::lease;
using sqlock::lease_state;
using steady = std::chrono::steady_clock;

constexpr auto ttl = 2s;
constexpr auto fault_length = 3 * ttl;  // how long each nemesis lasts

// ------------------------------------------------------------------ recorded history

// What happened, in order, with steady-clock times relative to the test's start: printed on failure.
class history {
public:
    std::int64_t add(std::string what) {
        auto const t = steady_ns();
        std::lock_guard lock(mutex_);
        events_.emplace_back(t, std::move(what));
        return t;
    }
    std::string text() const {
        std::lock_guard lock(mutex_);
        std::ostringstream s;
        s << "history (ms since the test started):\n";
        for (auto const& [t, what] : events_) s << "  " << (t - start_) / 1000000 << " " << what << "\n";
        return s.str();
    }

private:
    std::int64_t const start_ = steady_ns();
    mutable std::mutex mutex_;
    std::vector<std::pair<std::int64_t, std::string>> events_;
};

// ------------------------------------------------------------------ commands

std::string join(std::vector<std::string> const& v) {
    std::string s;
    for (auto const& a : v) s.append(s.empty() ? "" : " ").append(a);
    return s;
}

// Runs `args` and throws, naming the command and its output, when it fails.
std::string must(std::vector<std::string> args, std::vector<std::string> const& extra_env = {}) {
    auto const line = join(args);
    auto r = run_command(std::move(args), extra_env);
    if (!r.ok()) throw std::runtime_error("`" + line + "` failed (" + exit_text(r.status) + "): " + r.err + r.out);
    return r.out;
}

fs::path tool(char const* name) {
    for (char const* dir : {"/usr/sbin", "/sbin", "/usr/bin", "/bin"}) {
        fs::path p = fs::path(dir) / name;
        if (fs::exists(p)) return p;
    }
    return fs::path("/usr/sbin") / name;
}

using server_detail::write_file;

// ------------------------------------------------------------------ the fixture

class ServerNemesis : public ::testing::Test {
protected:
    // Root, and the tools of this nemesis: otherwise skipped outside CI, failing under CI.
    void require(bool present, std::string const& what) {
        if (present) return;
        if (in_ci())
            GTEST_FAIL() << what << " and CI is set: run the tests as root with scripts/deps.sh --servers installed";
        GTEST_SKIP() << what << " (not CI, so skipping; with CI set this fails)";
    }
    // Root (cgroups, network namespaces, the postgres user) and the tool `present`; false: the test must stop.
    bool ready(bool present, std::string const& what) {
        require(::geteuid() == 0, "not root (cgroups, network namespaces, the postgres user)");
        if (should_stop()) return false;
        require(present, what);
        return !should_stop();
    }

    static sqlock::store_options store_opts(bool create) {
        return {
            .pool_size = 4, .create_schema = create, .connect_timeout = 2s, .lock_wait_timeout = 1s, .io_timeout = 1s};
    }

    // A fenced write to `resource` with `token`, in its own transaction on `s`.
    static void fenced_write(sqlock::store const& db, soci::session& s, std::string const& resource,
                             std::int64_t token) {
        soci::transaction tx(s);
        sqlock::fence(db).check_and_set(s, resource, token);
        tx.commit();
    }

    // Waits until the server runs no client statement but ours (an in-flight one has finished).
    static bool server_quiet(soci::session& s) {
        return eventually(
            [&] {
                long long busy = 0;
                s << "SELECT count(*) FROM pg_stat_activity WHERE state = 'active' AND pid <> pg_backend_pid()"
                     " AND backend_type = 'client backend'",
                    soci::into(busy);
                return busy == 0;
            },
            10s);
    }

    // Waits until no server socket of `port` is in CLOSE_WAIT: every connection whose client hung up (a
    // statement cut off by its deadline while the server was frozen) has been read to its end by its
    // backend, which ran whatever statement was still in its input first.
    static bool hung_up_connections_drained(std::string const& port) {
        int const server_port = std::stoi(port);
        return eventually(
            [&] {
                for (auto const& s : tcp_sockets())
                    if (s.local_port == server_port && s.state == tcp_close_wait) return false;
                return true;
            },
            10s);
    }

    // D04 on `e`: the clock of `server` (faked_clock_server or faked_clock_mariadb), reached at `url`, jumps
    // 3×TTL forward or back while the table lock is held (see the file's comment).
    template <class clocked_server>
    void clock_jumps_forward(engine e, clocked_server& server, std::string const& url);
    template <class clocked_server>
    void clock_jumps_backward(engine e, clocked_server& server, std::string const& url);

    void TearDown() override { std::cout << h_.text() << std::flush; }  // the run's story, also when it passed

    history h_;
    std::string const name_ = random_prefix() + "nemesis";
};

// ------------------------------------------------------------------ D03

TEST_F(ServerNemesis, D03FrozenServerLeaseIsLostByItsDeadlineAndStaysLost) {
    if (!ready(fs::exists(freezer_root / "cgroup.procs"), "no cgroup v1 freezer at " + freezer_root.string())) return;
    private_pg pg;
    std::string const url = pg.url();
    sqlock::store holder_db(url, store_opts(true));
    sqlock::store waiter_db(url, store_opts(false));
    auto raw = raw_session(engine::postgresql, url);  // opened now: no new connection while frozen

    std::atomic<int> lost_calls{0};
    auto holder = sqlock::table_locker(holder_db, {.ttl = ttl, .on_lost = [&](std::string_view, std::int64_t t) {
                                                       ++lost_calls;
                                                       h_.add("holder on_lost token " + std::to_string(t));
                                                   }});
    auto waiter = sqlock::table_locker(waiter_db, {.ttl = ttl});
    lease held = holder.acquire(name_, 10s);
    h_.add("holder acquired token " + std::to_string(held.token()));
    ASSERT_TRUE(eventually([&] { return holder.stats().renewed >= 1; }, 20s)) << "the watchdog never renewed";

    freezer fz;
    fz.adopt_tree(pg.postmaster());
    std::size_t const frozen_members = fz.members();
    auto const frozen_at = steady::now();
    fz.set("FROZEN");
    h_.add("server frozen (" + std::to_string(frozen_members) + " processes)");
    auto const thaw_at = frozen_at + fault_length;

    // A call made while the server is frozen returns by its own bounds (io_timeout, connect_timeout).
    std::atomic<std::int64_t> call_returned{0};
    std::jthread caller([&] {
        std::string what;
        try {
            auto got = waiter.try_acquire(name_);
            what = got ? "UNEXPECTED grant token " + std::to_string(got->token()) : "busy";
        } catch (sqlock::error const& e) {
            what = describe(e);
        }
        call_returned = h_.add("waiter's try_acquire during the freeze returned: " + what);
    });

    // The holder's deadline thread reports the loss while every renewal hangs on the frozen server.
    bool const lost_while_frozen =
        eventually([&] { return held.stop_token().stop_requested(); },
                   std::chrono::duration_cast<std::chrono::milliseconds>(thaw_at - steady::now()));
    h_.add(std::string("lost while frozen: ") + (lost_while_frozen ? "yes" : "no") + ", state " +
           std::string(sqlock::to_string(held.state())));
    std::this_thread::sleep_until(thaw_at);  // the fault's length, not an assertion
    caller.join();                           // bounded: the call has its own deadlines
    auto const thawed = h_.add("thawing");
    fz.set("THAWED");
    long long const db_after_thaw = db_now_us(*raw, engine::postgresql);
    h_.add("thawed");

    EXPECT_TRUE(lost_while_frozen) << "the lease was not reported lost during a freeze of 3×TTL\n" << h_.text();
    EXPECT_LT(call_returned.load(), thawed) << "a call blocked until the thaw\n" << h_.text();

    // The renewal in flight at the freeze runs now, on the server: it must not revive the row.
    ASSERT_TRUE(hung_up_connections_drained(pg.port()))
        << "connections whose clients hung up during the freeze were not drained 10 s after the thaw\n"
        << h_.text();
    ASSERT_TRUE(server_quiet(*raw)) << "statements still running 10 s after the thaw\n" << h_.text();
    h_.add("server drained: no hung-up connection left, no statement running");
    auto row = read_row(*raw, engine::postgresql, name_);
    ASSERT_TRUE(row.has_value()) << h_.text();
    EXPECT_EQ(row->token, held.token()) << "nobody took the lock yet\n" << h_.text();
    EXPECT_LT(row->expires_us, db_after_thaw)
        << "the old holder's row was extended after the thaw: a renewal in flight during the freeze ran after the thaw and revived the row, "
        << (row->expires_us - db_after_thaw) / 1000 << " ms past the thaw\n"
        << h_.text();
    EXPECT_EQ(held.state(), lease_state::lost);
    EXPECT_THROW(held.renew(), sqlock::lease_lost);
    EXPECT_EQ(lost_calls.load(), 1);

    lease next = waiter.acquire(name_, 30s);
    h_.add("waiter acquired token " + std::to_string(next.token()));
    EXPECT_GT(next.token(), held.token()) << h_.text();
    EXPECT_EQ(held.state(), lease_state::lost) << "lost stays lost";

    fenced_write(waiter_db, *raw, name_, next.token());
    EXPECT_THROW(fenced_write(holder_db, *raw, name_, held.token()), sqlock::stale_token)
        << "the old holder's fenced write was accepted after the new holder's\n"
        << h_.text();
    next.release();
}

// ------------------------------------------------------------------ D04

// The server's clock minus this host's, in ms (midpoint of the round trip), either engine.
long long server_ahead_ms(soci::session& s, engine e) {
    auto const before = std::chrono::system_clock::now();
    long long const db = db_now_us(s, e);
    auto const after = std::chrono::system_clock::now();
    auto const mid =
        std::chrono::duration_cast<std::chrono::microseconds>((before + (after - before) / 2).time_since_epoch())
            .count();
    return (db - mid) / 1000;
}

template <class clocked_server>
void ServerNemesis::clock_jumps_forward(engine e, clocked_server& server, std::string const& url) {
    sqlock::store holder_db(url, store_opts(true));
    sqlock::store other_db(url, store_opts(false));
    auto raw = raw_session(e, url);
    long long const skew0 = server_ahead_ms(*raw, e);
    if (e == engine::postgresql) {  // (MariaDB's D04 does not check this)
        ASSERT_LT(std::abs(skew0), 1000) << "the server's clock should start with this host's (offset +0)";
    }

    std::atomic<int> lost_calls{0};
    auto holder = sqlock::table_locker(holder_db, {.ttl = ttl, .on_lost = [&](std::string_view, std::int64_t) {
                                                       ++lost_calls;
                                                       h_.add("holder on_lost");
                                                   }});
    auto other = sqlock::table_locker(other_db, {.ttl = ttl});
    lease held = holder.acquire(name_, 10s);
    h_.add("holder acquired token " + std::to_string(held.token()));
    ASSERT_TRUE(eventually([&] { return holder.stats().renewed >= 1; }, 20s)) << "the watchdog never renewed";
    ASSERT_FALSE(other.try_acquire(name_).has_value()) << "the lock is held";

    server.offset("+" + std::to_string(std::chrono::seconds(fault_length).count()) + "s");
    long long const skew1 = server_ahead_ms(*raw, e);
    h_.add("server clock jumped: now " + std::to_string(skew1) + " ms ahead");
    ASSERT_GT(skew1 - skew0, std::chrono::milliseconds(fault_length).count() - 1000)
        << "the jump is not visible in " << (e == engine::postgresql ? "clock_timestamp()" : "SYSDATE(6)");

    // The server sees the lease expired, though the holder's own validity has not run out.
    auto row = read_row(*raw, e, name_);
    ASSERT_TRUE(row.has_value());
    EXPECT_FALSE(row->live()) << "after a jump of 3×TTL the server should see the row expired";
    // The holder's next renewal (its own or the watchdog's, whichever comes first) is refused: lost.
    EXPECT_THROW(held.renew(), sqlock::lease_lost) << h_.text();
    EXPECT_EQ(held.state(), lease_state::lost);
    EXPECT_EQ(lost_calls.load(), 1);

    auto next = other.try_acquire(name_);
    ASSERT_TRUE(next.has_value()) << "another client could not take over the expired lease\n" << h_.text();
    h_.add("other acquired token " + std::to_string(next->token()));
    EXPECT_GT(next->token(), held.token());

    fenced_write(other_db, *raw, name_, next->token());
    EXPECT_THROW(fenced_write(holder_db, *raw, name_, held.token()), sqlock::stale_token)
        << "the old holder's fenced write was accepted after the new holder's\n"
        << h_.text();
    next->release();
    server.offset("+0");
}

TEST_F(ServerNemesis, D04ServerClockJumpsForwardTheLeaseExpiresAndIsTakenOver) {
    if (!ready(fs::exists(libfaketime_path()), libfaketime_path().string() + " is missing")) return;
    faked_clock_server server;
    clock_jumps_forward(engine::postgresql, server, server.pg().url());
}

template <class clocked_server>
void ServerNemesis::clock_jumps_backward(engine e, clocked_server& server, std::string const& url) {
    sqlock::store holder_db(url, store_opts(true));
    sqlock::store other_db(url, store_opts(false));
    auto raw = raw_session(e, url);
    long long const skew0 = server_ahead_ms(*raw, e);

    std::atomic<int> lost_calls{0};
    auto holder = sqlock::table_locker(holder_db, {.ttl = ttl, .on_lost = [&](std::string_view, std::int64_t) {
                                                       ++lost_calls;
                                                       h_.add("holder on_lost");
                                                   }});
    auto other = sqlock::table_locker(other_db, {.ttl = ttl});
    lease held = holder.acquire(name_, 10s);
    ASSERT_TRUE(eventually([&] { return holder.stats().renewed >= 1; }, 20s)) << "the watchdog never renewed";

    server.offset("-" + std::to_string(std::chrono::seconds(fault_length).count()) + "s");
    long long const skew1 = server_ahead_ms(*raw, e);
    h_.add("server clock jumped: now " + std::to_string(skew1) + " ms ahead");
    ASSERT_LT(skew1 - skew0, -(std::chrono::milliseconds(fault_length).count() - 1000))
        << "the jump is not visible in " << (e == engine::postgresql ? "clock_timestamp()" : "SYSDATE(6)");

    // For six renewals (2×TTL of real time) after the jump, the holder keeps the lock and nobody else gets it.
    auto const renewed0 = holder.stats().renewed;
    int tries = 0, grants = 0;
    while (holder.stats().renewed < renewed0 + 6 && held.held()) {
        if (auto got = other.try_acquire(name_)) {
            ++grants;
            h_.add("UNEXPECTED: other acquired token " + std::to_string(got->token()) + " while the holder held");
        }
        ++tries;
        std::this_thread::sleep_for(50ms);
    }
    h_.add("holder renewed " + std::to_string(holder.stats().renewed - renewed0) + " times; other tried " +
           std::to_string(tries) + " times");
    EXPECT_EQ(grants, 0) << "a second holder while the first held the lock\n" << h_.text();
    EXPECT_GE(holder.stats().renewed, renewed0 + 6) << "the holder lost the lease after a backward jump\n" << h_.text();
    EXPECT_EQ(held.state(), lease_state::held);
    EXPECT_EQ(lost_calls.load(), 0);
    EXPECT_GT(tries, 0);

    auto const token = held.token();
    held.release();
    lease next = other.acquire(name_, 10s);
    EXPECT_GT(next.token(), token);
    next.release();
    server.offset("+0");
}

TEST_F(ServerNemesis, D04ServerClockJumpsBackwardTheHolderKeepsTheLock) {
    if (!ready(fs::exists(libfaketime_path()), libfaketime_path().string() + " is missing")) return;
    faked_clock_server server;
    clock_jumps_backward(engine::postgresql, server, server.pg().url());
}

// ------------------------------------------------------------------ D07

// A network namespace of our own with a veth pair to the root namespace (a /30 in 10.x), removed on
// destruction, rules and all.
class net_namespace {
public:
    net_namespace() : name_("sqlock-nem-" + std::to_string(::getpid()) + "-" + random_hex(4)) {
        auto const tag = random_hex(6);
        outer_ = "sqn" + tag + "a";
        inner_ = "sqn" + tag + "b";
        remove_stale();
        pick_subnet();
        must({ip_, "netns", "add", name_});
        created_ = true;
        must({ip_, "link", "add", outer_, "type", "veth", "peer", "name", inner_});
        must({ip_, "link", "set", inner_, "netns", name_});
        must({ip_, "addr", "add", root_addr_ + "/30", "dev", outer_});
        must({ip_, "link", "set", outer_, "up"});
        in_ns({ip_, "addr", "add", ns_addr_ + "/30", "dev", inner_});
        in_ns({ip_, "link", "set", inner_, "up"});
        in_ns({ip_, "link", "set", "lo", "up"});
    }
    ~net_namespace() {
        if (!created_) return;
        (void)run_command(
            {ip_, "netns", "del", name_});  // takes its end of the veth, its nftables and the pair with it
        (void)run_command({ip_, "link", "del", outer_});  // in case the pair outlived it
    }
    net_namespace(net_namespace const&) = delete;
    net_namespace& operator=(net_namespace const&) = delete;

    std::string in_ns(std::vector<std::string> args) {
        args.insert(args.begin(), {ip_, "netns", "exec", name_});
        return must(std::move(args));
    }
    // Drops every packet to and from `port`, both directions, inside the namespace.
    void partition(std::string const& port) {
        in_ns({nft_, "add table inet sqlock_nemesis"});
        in_ns({nft_, "add chain inet sqlock_nemesis out { type filter hook output priority 0 ; policy accept ; }"});
        in_ns({nft_, "add chain inet sqlock_nemesis in { type filter hook input priority 0 ; policy accept ; }"});
        in_ns({nft_, "add rule inet sqlock_nemesis out tcp dport " + port + " drop"});
        in_ns({nft_, "add rule inet sqlock_nemesis in tcp sport " + port + " drop"});
    }
    void heal() { in_ns({nft_, "delete table inet sqlock_nemesis"}); }

    std::string const& name() const { return name_; }
    std::string const& root_addr() const { return root_addr_; }
    std::string const& ns_addr() const { return ns_addr_; }
    std::string subnet() const { return net_ + "/30"; }
    std::string const& ip() const { return ip_; }

private:
    // Namespaces left by a run that was killed (its pid, in the name, is gone): deleted with their veth.
    void remove_stale() {
        std::istringstream list(run_command({ip_, "netns", "list"}).out);
        for (std::string line; std::getline(list, line);) {
            std::smatch m;
            if (std::regex_search(line, m, std::regex("^(sqlock-nem-([0-9]+)-[0-9a-f]{4})\\b")) &&
                ::kill(static_cast<pid_t>(std::stol(m[2])), 0) != 0 && errno == ESRCH)
                (void)run_command({ip_, "netns", "del", m[1]});
        }
    }

    // A random /30 in 10.0.0.0/8 whose /16 no address or route of this host uses.
    void pick_subnet() {
        auto const used = must({ip_, "-4", "addr"}) + must({ip_, "-4", "route"});
        for (int i = 0; i < 100; ++i) {
            auto const a = 64 + rng()() % 190, b = rng()() % 256, c = (rng()() % 64) * 4;
            std::string const sixteen = "10." + std::to_string(a) + ".";
            if (used.find(sixteen) != std::string::npos) continue;
            std::string const base = sixteen + std::to_string(b) + ".";
            net_ = base + std::to_string(c);
            root_addr_ = base + std::to_string(c + 1);
            ns_addr_ = base + std::to_string(c + 2);
            return;
        }
        throw std::runtime_error("found no unused 10.x.0.0/16 for the veth pair");
    }

    std::string const ip_ = tool("ip").string(), nft_ = tool("nft").string();
    std::string name_, outer_, inner_, net_, root_addr_, ns_addr_;
    bool created_ = false;
};

// The worker's stdout lines: "<steady ns> <what> ...".
struct worker_line {
    std::int64_t t = 0;
    std::string what, rest;
};
std::vector<worker_line> read_worker(fs::path const& out) {
    std::vector<worker_line> lines;
    std::istringstream in(slurp(out));
    for (std::string line; std::getline(in, line);) {
        std::istringstream l(line);
        worker_line w;
        if (!(l >> w.t >> w.what)) continue;
        std::getline(l, w.rest);
        if (!w.rest.empty() && w.rest[0] == ' ') w.rest.erase(0, 1);
        lines.push_back(std::move(w));
    }
    return lines;
}
std::optional<worker_line> first(std::vector<worker_line> const& lines, std::string const& what,
                                 std::string const& rest_prefix = {}) {
    for (auto const& l : lines)
        if (l.what == what && l.rest.compare(0, rest_prefix.size(), rest_prefix) == 0) return l;
    return std::nullopt;
}

TEST_F(ServerNemesis, D07SilentPartitionHolderReportsLossAndIsRefusedAfterHealing) {
    if (!ready(fs::exists(tool("ip")) && fs::exists(tool("nft")), "ip or nft is missing")) return;
    net_namespace ns;
    h_.add("namespace " + ns.name() + " with " + ns.ns_addr() + ", server side " + ns.root_addr());
    private_pg pg({.conf = "listen_addresses = '127.0.0.1," + ns.root_addr() + "'",
                   .hba = "host all all " + ns.subnet() + " trust"});
    sqlock::store taker_db(pg.url(), store_opts(true));  // creates the tables
    auto raw = raw_session(engine::postgresql, pg.url());
    auto taker = sqlock::table_locker(taker_db, {.ttl = ttl});
    h_.add("server started");

    temp_dir files;
    fs::path const out = files.path() / "worker.out", heal_file = files.path() / "healed";
    spawn_file_actions actions;
    actions.capture_to_files(out, files.path() / "worker.err");
    pid_t worker = spawn_process({ns.ip(), "netns", "exec", ns.name(), SQLOCK_NEMESIS_WORKER, pg.url(ns.root_addr()),
                                  pg.conninfo(ns.root_addr()), name_, heal_file.string()},
                                 std::nullopt, actions.get());
    struct reap {
        pid_t& pid;
        ~reap() {
            if (pid > 0 && ::waitpid(pid, nullptr, WNOHANG) == 0) {
                ::kill(pid, SIGKILL);
                ::waitpid(pid, nullptr, 0);
            }
        }
    } reaper{worker};
    auto worker_text = [&] {
        return "worker stdout:\n" + slurp(out) + "worker stderr:\n" + slurp(files.path() / "worker.err");
    };

    // The worker holds the lock from inside the namespace, and renews through the veth.
    ASSERT_TRUE(eventually([&] { return first(read_worker(out), "event", "renewed").has_value(); }, 30s))
        << "the worker never acquired and renewed\n"
        << worker_text();
    auto const acquired = first(read_worker(out), "acquired");
    ASSERT_TRUE(acquired.has_value()) << worker_text();
    std::int64_t const old_token = std::stoll(acquired->rest);
    h_.add("worker holds token " + std::to_string(old_token) + " and has renewed");
    ASSERT_FALSE(taker.try_acquire(name_).has_value()) << "the lock is held by the worker";

    ns.partition(pg.port());
    auto const partitioned = h_.add("partitioned (nft drop, both directions, port " + pg.port() + ")");
    auto const heal_at = steady::now() + fault_length;

    // The client in the root namespace takes over once the row expires on the server.
    std::optional<lease> next;
    std::int64_t sent_before_grant = 0;
    while (!next && steady::now() < heal_at) {
        sent_before_grant = steady_ns();
        next = taker.try_acquire(name_);
        if (!next) std::this_thread::sleep_for(20ms);
    }
    if (next) h_.add("taker acquired token " + std::to_string(next->token()));
    std::this_thread::sleep_until(heal_at);  // the fault's length, not an assertion
    ASSERT_TRUE(next.has_value()) << "nobody could take over a lease whose holder was cut off for 3×TTL\n"
                                  << h_.text() << worker_text();
    EXPECT_GT(next->token(), old_token);
    fenced_write(taker_db, *raw, name_, next->token());

    auto const healed = h_.add("healing");
    ns.heal();
    write_file(heal_file, "healed");
    ASSERT_TRUE(eventually([&] { return first(read_worker(out), "done").has_value(); }, 60s))
        << "the worker did not finish after healing\n"
        << h_.text() << worker_text();
    int status = 0;
    ASSERT_TRUE(eventually([&] { return ::waitpid(worker, &status, WNOHANG) == worker; }, 30s));
    worker = 0;
    h_.add("worker exited");
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << exit_text(status) << "\n" << worker_text();

    auto const lines = read_worker(out);
    auto const lost = first(lines, "event", "lost");
    ASSERT_TRUE(lost.has_value()) << "the partitioned holder never reported the loss\n" << worker_text();
    EXPECT_GT(lost->t, partitioned) << worker_text();
    EXPECT_LT(lost->t, healed) << "the partitioned holder reported the loss only after the partition healed\n"
                               << h_.text() << worker_text();
    // Its renewals were bounded: they failed (timed out) instead of hanging until the heal.
    auto const failed = first(lines, "event", "renew_failed");
    if (failed) {
        EXPECT_LT(failed->t, healed) << worker_text();
    }
    h_.add("worker lost at +" + std::to_string((lost->t - partitioned) / 1000000) +
           " ms after the partition; taker's "
           "granting attempt sent at +" +
           std::to_string((sent_before_grant - partitioned) / 1000000) + " ms");

    auto const renew = first(lines, "renew"), release = first(lines, "release"), fence = first(lines, "fence");
    ASSERT_TRUE(renew && release && fence) << worker_text();
    EXPECT_EQ(renew->rest, "lease_lost") << worker_text();
    EXPECT_EQ(release->rest, "lease_lost") << worker_text();
    EXPECT_EQ(fence->rest.rfind("stale", 0), 0u) << "the old holder's fenced write was not refused\n" << worker_text();
    auto row = read_row(*raw, engine::postgresql, name_);
    ASSERT_TRUE(row.has_value()) << "the old holder's release deleted the new holder's row";
    EXPECT_EQ(row->token, next->token());
    EXPECT_TRUE(next->held());
    next->release();
}

// ------------------------------------------------------------------ either engine, either lock

// A private server of one engine: PostgreSQL (private_pg) or MariaDB (private_mariadb). `ns`: a network
// namespace whose clients must reach it on its root-side address (D07).
class any_server {
public:
    explicit any_server(engine e, class net_namespace const* ns = nullptr);
    engine kind() const { return e_; }
    std::string url(std::string const& host = "127.0.0.1") const { return pg_ ? pg_->url(host) : my_->url(host); }
    std::string const& port() const { return pg_ ? pg_->port() : my_->port(); }
    // The server's root process: the postmaster, or mariadbd (one process).
    pid_t root_pid() const { return pg_ ? pg_->postmaster() : my_->mariadbd(); }
    // kill -9 of the whole server (PostgreSQL: the postmaster and every backend at once); returns once all
    // are gone. It stays down.
    void crash() {
        if (pg_) {
            (void)pg_->kill_tree();
            return;
        }
        my_->crash();
    }
    // SOCI connect string of a fence session from `host` (libpq or SOCI MySQL keywords).
    std::string fence_conninfo(std::string const& host) const {
        return pg_ ? pg_->conninfo(host)
                   : "host=" + host + " port=" + my_->port() +
                         " dbname=sqlock user=sqlock password=sqlock"
                         " charset=utf8mb4 connect_timeout=2";
    }

private:
    engine e_;
    std::optional<private_pg> pg_;
    std::optional<private_mariadb> my_;
};

any_server::any_server(engine e, net_namespace const* ns) : e_(e) {
    if (e == engine::postgresql) {
        if (ns == nullptr) pg_.emplace();
        else
            pg_.emplace(private_pg::settings{.conf = "listen_addresses = '127.0.0.1," + ns->root_addr() + "'",
                                             .hba = "host all all " + ns->subnet() + " trust"});
        return;
    }
    if (ns == nullptr) {
        my_.emplace();
        return;
    }
    std::string const user = "'sqlock'@'" + ns->ns_addr() + "'";
    my_.emplace(private_mariadb::settings{.args = "--bind-address=127.0.0.1," + ns->root_addr(),
                                          .sql = "CREATE USER " + user +
                                                 " IDENTIFIED BY 'sqlock'; GRANT ALL ON sqlock.* TO " + user + ";"});
}

sqlock::locker make_locker(bool row, sqlock::store const& db, sqlock::locker_options o) {
    return row ? sqlock::row_locker(db, std::move(o)) : sqlock::table_locker(db, std::move(o));
}

// Waits until the server runs no client statement but ours (an in-flight one has finished), either engine.
// On MariaDB each store's listener stays parked in its bell statement (SELECT SLEEP(20) AS <prefix>_bell,
// tables prefix "sqlock" here): that is waiting, not a statement still running.
bool server_quiet_on(soci::session& s, engine e) {
    if (e == engine::postgresql)
        return eventually(
            [&] {
                long long busy = 0;
                s << "SELECT count(*) FROM pg_stat_activity WHERE state = 'active' AND pid <> pg_backend_pid()"
                     " AND backend_type = 'client backend'",
                    soci::into(busy);
                return busy == 0;
            },
            10s);
    return eventually(
        [&] {
            long long busy = 0;
            s << "SELECT count(*) FROM information_schema.PROCESSLIST WHERE COMMAND NOT IN ('Sleep', 'Daemon')"
                 " AND ID <> CONNECTION_ID() AND USER = 'sqlock' AND NOT (INFO <=> 'SELECT SLEEP(20) AS sqlock_bell')",
                soci::into(busy);
            return busy == 0;
        },
        10s);
}

// What the server still runs for user sqlock (MariaDB; the failure message of server_quiet_on).
std::string running_on(soci::session& s, engine e) {
    if (e != engine::mysql) return {};
    std::ostringstream out;
    soci::rowset<soci::row> rows =
        (s.prepare << "SELECT ID, COMMAND, TIME_MS, COALESCE(STATE, ''), COALESCE(LEFT(INFO, 120), '')"
                      " FROM information_schema.PROCESSLIST WHERE USER = 'sqlock' AND ID <> CONNECTION_ID()");
    for (auto const& r : rows)
        out << "  session " << r.get<long long>(0) << ": " << r.get<std::string>(1) << ", " << r.get<double>(2)
            << " ms, [" << r.get<std::string>(3) << "] " << r.get<std::string>(4) << "\n";
    return out.str();
}

// The row lock's audit (install_row_audit): every committed grant. A lease that was lost (its transaction
// rolled back) leaves none, so every row must carry `token`, and one at least (the release's commit).
std::string row_audit_problem(soci::session& s, engine e, std::int64_t token) {
    auto const rows = sqlock_battery::dump_audit(s, e, "sqlock");
    std::ostringstream out;
    for (auto const& r : rows)
        if (r.token != token)
            out << "an audited " << r.kind << " of token " << r.token << " (seq " << r.seq
                << "): a transaction other than the new holder's committed a grant\n";
    if (rows.empty()) out << "no audited grant: the new holder's release did not commit\n";
    return out.str();
}

class ServerNemesisEngines : public ServerNemesis {
protected:
    // D01 (crash), row lock, on `e`: kill -9 of the whole server while a row lock is held with a TTL of
    // 30 s. The holder's lease is reported lost at once (the watch on its pinned session sees the
    // connection close), not at its next keep-alive 10 s after the acquire, and the loss says what
    // happened (issue 18, items 4 and 7).
    void row_lock_server_crash(engine e) {
        if (!ready(true, "")) return;
        any_server srv(e);
        sqlock::store db(srv.url(), store_opts(true));
        std::mutex m;
        std::int64_t lost_at = 0;
        std::string detail;
        auto holder = sqlock::row_locker(db, {.ttl = 30s,
                                              .on_lost =
                                                  [&](std::string_view, std::int64_t t) {
                                                      auto const at =
                                                          h_.add("holder on_lost token " + std::to_string(t));
                                                      std::lock_guard lock(m);
                                                      if (lost_at == 0) lost_at = at;
                                                  },
                                              .on_event =
                                                  [&](sqlock::lease_event const& ev) {
                                                      if (ev.what != sqlock::lease_event::kind::lost) return;
                                                      h_.add("lost: " + std::string(ev.detail));
                                                      std::lock_guard lock(m);
                                                      detail = ev.detail;
                                                  }});
        lease held = holder.acquire(name_, 10s);
        h_.add("holder acquired token " + std::to_string(held.token()));
        auto const crashed = h_.add("kill -9 of the server");
        srv.crash();
        h_.add("the server's processes are gone");
        ASSERT_TRUE(eventually([&] { return held.stop_token().stop_requested(); }, 20s))
            << "the holder's lease was not reported lost within 20 s of the crash\n"
            << h_.text();
        std::lock_guard lock(m);
        ASSERT_NE(lost_at, 0) << "the stop token fired without on_lost\n" << h_.text();
        // A liveness bound far below the keep-alive's 10 s: the watch reports in milliseconds.
        EXPECT_LT(lost_at - crashed, std::chrono::nanoseconds(3s).count())
            << "the holder learnt of the crash " << (lost_at - crashed) / 1000000 << " ms after it\n"
            << h_.text();
        EXPECT_NE(detail.find("the database session holding the row lock ended ("), std::string::npos)
            << "the lost event does not say the session ended: " << detail;
        EXPECT_EQ(detail.find("someone else"), std::string::npos) << detail;
        EXPECT_TRUE(held.lost());
        EXPECT_THROW(held.release(), sqlock::lease_lost);
    }

    // D03 on `e` with the table lock or the row lock (see the file's comment).
    void frozen_server(engine e, bool row) {
        if (!ready(fs::exists(freezer_root / "cgroup.procs"), "no cgroup v1 freezer at " + freezer_root.string()))
            return;
        any_server srv(e);
        std::string const url = srv.url();
        sqlock::store holder_db(url, store_opts(true));
        sqlock::store waiter_db(url, store_opts(false));
        auto raw = raw_session(e, url);  // opened now: no new connection while frozen
        if (row) sqlock_battery::install_row_audit(*raw, e, "sqlock");

        std::atomic<int> lost_calls{0};
        auto holder = make_locker(row, holder_db, {.ttl = ttl, .on_lost = [&](std::string_view, std::int64_t t) {
                                                       ++lost_calls;
                                                       h_.add("holder on_lost token " + std::to_string(t));
                                                   }});
        auto waiter = make_locker(row, waiter_db, {.ttl = ttl});
        lease held = holder.acquire(name_, 10s);
        h_.add("holder acquired token " + std::to_string(held.token()));
        ASSERT_TRUE(eventually([&] { return holder.stats().renewed >= 1; }, 20s)) << "the watchdog never renewed";

        freezer fz;
        fz.adopt_tree(srv.root_pid());
        std::size_t const frozen_members = fz.members();
        auto const frozen_at = steady::now();
        fz.set("FROZEN");
        auto const frozen = h_.add("server frozen (" + std::to_string(frozen_members) + " processes)");
        auto const deadline_at_freeze = steady_ns() + std::chrono::nanoseconds(held.remaining()).count();
        auto const thaw_at = frozen_at + fault_length;

        std::atomic<std::int64_t> call_returned{0};
        std::jthread caller([&] {
            std::string what;
            try {
                auto got = waiter.try_acquire(name_);
                what = got ? "UNEXPECTED grant token " + std::to_string(got->token()) : "busy";
            } catch (sqlock::error const& err) {
                what = describe(err);
            }
            call_returned = h_.add("waiter's try_acquire during the freeze returned: " + what);
        });

        bool const lost_while_frozen =
            eventually([&] { return held.stop_token().stop_requested(); },
                       std::chrono::duration_cast<std::chrono::milliseconds>(thaw_at - steady::now()));
        auto const lost_seen =
            h_.add(std::string("lost while frozen: ") + (lost_while_frozen ? "yes" : "no") + ", state " +
                   std::string(sqlock::to_string(held.state())) + "; its safe deadline was +" +
                   std::to_string((deadline_at_freeze - frozen) / 1000000) + " ms after the freeze");
        std::this_thread::sleep_until(thaw_at);  // the fault's length, not an assertion
        caller.join();
        auto const thawed = h_.add("thawing");
        fz.set("THAWED");
        long long const db_after_thaw = db_now_us(*raw, e);
        h_.add("thawed");

        EXPECT_TRUE(lost_while_frozen) << "the lease was not reported lost during a freeze of 3×TTL\n" << h_.text();
        EXPECT_LT(lost_seen, thawed);
        EXPECT_LT(call_returned.load(), thawed) << "a call blocked until the thaw\n" << h_.text();

        if (!row) {
            // The renewal in flight at the freeze runs now, on the server: it must not revive the row.
            ASSERT_TRUE(hung_up_connections_drained(srv.port()))
                << "connections whose clients hung up during the freeze were not drained 10 s after the thaw\n"
                << h_.text();
            if (!server_quiet_on(*raw, e))
                FAIL() << "statements still running 10 s after the thaw\n" << running_on(*raw, e) << h_.text();
            h_.add("server drained: no hung-up connection left, no statement running");
            auto r = read_row(*raw, e, name_);
            ASSERT_TRUE(r.has_value()) << h_.text();
            // The waiter's try_acquire during the freeze ended in doubt when its statement had been sent: run
            // after the thaw, it may take over the expired row. Then the old holder's row is gone, not revived.
            if (r->token != held.token()) {
                h_.add("the row has token " + std::to_string(r->token) +
                       ": the waiter's in-doubt try_acquire, run after the thaw, took over");
                EXPECT_GT(r->token, held.token()) << h_.text();
            } else {
                EXPECT_LT(r->expires_us, db_after_thaw)
                    << "the old holder's row was extended after the thaw: a renewal in flight during the freeze ran "
                       "after the thaw and revived the row, "
                    << (r->expires_us - db_after_thaw) / 1000 << " ms past the thaw\n"
                    << h_.text();
            }
        }
        EXPECT_EQ(held.state(), lease_state::lost);
        EXPECT_THROW(held.renew(), sqlock::lease_lost);
        EXPECT_EQ(lost_calls.load(), 1);

        // Row lock: the waiter queues on the row until the old holder's transaction is gone (its connection,
        // closed by the holder during the freeze, is read to its end after the thaw).
        lease next = waiter.acquire(name_, 30s);
        h_.add("waiter acquired token " + std::to_string(next.token()));
        EXPECT_GT(next.token(), held.token()) << h_.text();
        EXPECT_EQ(held.state(), lease_state::lost) << "lost stays lost";

        fenced_write(waiter_db, *raw, name_, next.token());
        EXPECT_THROW(fenced_write(holder_db, *raw, name_, held.token()), sqlock::stale_token)
            << "the old holder's fenced write was accepted after the new holder's\n"
            << h_.text();
        next.release();
        if (row) {
            auto const problem = row_audit_problem(*raw, e, next.token());
            EXPECT_EQ(problem, "") << h_.text();
        }
    }

    // D07 on `e` with the table lock or the row lock (see the file's comment).
    void silent_partition(engine e, bool row) {
        if (!ready(fs::exists(tool("ip")) && fs::exists(tool("nft")), "ip or nft is missing")) return;
        net_namespace ns;
        h_.add("namespace " + ns.name() + " with " + ns.ns_addr() + ", server side " + ns.root_addr());
        any_server srv(e, &ns);
        sqlock::store taker_db(srv.url(), store_opts(true));  // creates the tables
        auto raw = raw_session(e, srv.url());
        if (row) sqlock_battery::install_row_audit(*raw, e, "sqlock");
        auto taker = make_locker(row, taker_db, {.ttl = ttl});
        h_.add("server started");

        temp_dir files;
        fs::path const out = files.path() / "worker.out", heal_file = files.path() / "healed";
        spawn_file_actions actions;
        actions.capture_to_files(out, files.path() / "worker.err");
        pid_t worker =
            spawn_process({ns.ip(), "netns", "exec", ns.name(), SQLOCK_NEMESIS_WORKER, srv.url(ns.root_addr()),
                           srv.fence_conninfo(ns.root_addr()), name_, heal_file.string(), row ? "row" : "table"},
                          std::nullopt, actions.get());
        struct reap {
            pid_t& pid;
            ~reap() {
                if (pid > 0 && ::waitpid(pid, nullptr, WNOHANG) == 0) {
                    ::kill(pid, SIGKILL);
                    ::waitpid(pid, nullptr, 0);
                }
            }
        } reaper{worker};
        auto worker_text = [&] {
            return "worker stdout:\n" + slurp(out) + "worker stderr:\n" + slurp(files.path() / "worker.err");
        };

        ASSERT_TRUE(eventually([&] { return first(read_worker(out), "event", "renewed").has_value(); }, 30s))
            << "the worker never acquired and renewed\n"
            << worker_text();
        auto const acquired = first(read_worker(out), "acquired");
        ASSERT_TRUE(acquired.has_value()) << worker_text();
        std::int64_t const old_token = std::stoll(acquired->rest);
        h_.add("worker holds token " + std::to_string(old_token) + " and has renewed");
        ASSERT_FALSE(taker.try_acquire(name_).has_value()) << "the lock is held by the worker";

        ns.partition(srv.port());
        auto const partitioned = h_.add("partitioned (nft drop, both directions, port " + srv.port() + ")");
        auto const heal_at = steady::now() + fault_length;

        // The client in the root namespace takes over once the server ends the old hold: the table lock's
        // row expires; the row lock's transaction is ended by the server's idle-in-transaction bound.
        std::optional<lease> next;
        std::int64_t sent_before_grant = 0, granted_seen = 0;
        while (!next && steady::now() < heal_at) {
            sent_before_grant = steady_ns();
            next = taker.try_acquire(name_);
            if (!next) std::this_thread::sleep_for(20ms);
        }
        if (next) granted_seen = h_.add("taker acquired token " + std::to_string(next->token()));
        std::this_thread::sleep_until(heal_at);  // the fault's length, not an assertion
        ASSERT_TRUE(next.has_value()) << "nobody could take over a lease whose holder was cut off for 3×TTL\n"
                                      << h_.text() << worker_text();
        EXPECT_GT(next->token(), old_token);
        fenced_write(taker_db, *raw, name_, next->token());

        auto const healed = h_.add("healing");
        ns.heal();
        write_file(heal_file, "healed");
        ASSERT_TRUE(eventually([&] { return first(read_worker(out), "done").has_value(); }, 60s))
            << "the worker did not finish after healing\n"
            << h_.text() << worker_text();
        int status = 0;
        ASSERT_TRUE(eventually([&] { return ::waitpid(worker, &status, WNOHANG) == worker; }, 30s));
        worker = 0;
        h_.add("worker exited");
        EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << exit_text(status) << "\n" << worker_text();

        auto const lines = read_worker(out);
        auto const lost = first(lines, "event", "lost");
        ASSERT_TRUE(lost.has_value()) << "the partitioned holder never reported the loss\n" << worker_text();
        EXPECT_GT(lost->t, partitioned) << worker_text();
        EXPECT_LT(lost->t, healed) << "the partitioned holder reported the loss only after the partition healed\n"
                                   << h_.text() << worker_text();
        // Its last safe deadline passed before anyone else was granted the lock: the holder's own
        // validity never overlapped the new holder's.
        std::int64_t deadline = 0;
        for (auto const& l : lines)
            if (l.what == "deadline" && l.t < lost->t) deadline = std::stoll(l.rest);
        ASSERT_NE(deadline, 0) << "the worker printed no safe deadline\n" << worker_text();
        h_.add("worker's safe deadline +" + std::to_string((deadline - partitioned) / 1000000) +
               " ms after the partition, its loss reported at +" + std::to_string((lost->t - partitioned) / 1000000) +
               " ms; the taker's granting attempt sent at +" +
               std::to_string((sent_before_grant - partitioned) / 1000000) + " ms, returned at +" +
               std::to_string((granted_seen - partitioned) / 1000000) + " ms");
        EXPECT_LT(deadline, granted_seen)
            << "the taker was granted the lock before the partitioned holder's safe deadline: two holders at once\n"
            << h_.text() << worker_text();

        auto const renew = first(lines, "renew"), release = first(lines, "release"), fence = first(lines, "fence");
        ASSERT_TRUE(renew && release && fence) << worker_text();
        EXPECT_EQ(renew->rest, "lease_lost") << worker_text();
        EXPECT_EQ(release->rest, "lease_lost") << worker_text();
        EXPECT_EQ(fence->rest.rfind("stale", 0), 0u) << "the old holder's fenced write was not refused\n"
                                                     << worker_text();
        if (!row) {
            auto r = read_row(*raw, e, name_);
            ASSERT_TRUE(r.has_value()) << "the old holder's release deleted the new holder's row";
            EXPECT_EQ(r->token, next->token());
        }
        EXPECT_TRUE(next->held());
        auto const new_token = next->token();
        next->release();
        if (row) {
            auto const problem = row_audit_problem(*raw, e, new_token);
            EXPECT_EQ(problem, "") << h_.text() << worker_text();
        }
    }
};

// D04 (a) on MariaDB: its clock (libfaketime in mariadbd) jumps 3×TTL ahead while the table lock is held.
TEST_F(ServerNemesisEngines, D04MariaDBServerClockJumpsForwardTheLeaseExpiresAndIsTakenOver) {
    if (!ready(fs::exists(libfaketime_path()), libfaketime_path().string() + " is missing")) return;
    faked_clock_mariadb server;
    clock_jumps_forward(engine::mysql, server, server.server().url());
}

// D04 (b) on MariaDB: 3×TTL back: the holder keeps renewing, nobody else gets the lock meanwhile.
TEST_F(ServerNemesisEngines, D04MariaDBServerClockJumpsBackwardTheHolderKeepsTheLock) {
    if (!ready(fs::exists(libfaketime_path()), libfaketime_path().string() + " is missing")) return;
    faked_clock_mariadb server;
    clock_jumps_backward(engine::mysql, server, server.server().url());
}

TEST_F(ServerNemesisEngines, D03MariaDBFrozenServerLeaseIsLostByItsDeadlineAndStaysLost) {
    frozen_server(engine::mysql, false);
}
TEST_F(ServerNemesisEngines, D03RowLockFrozenPostgreSQLLostByItsDeadlineThenTakenOver) {
    frozen_server(engine::postgresql, true);
}
TEST_F(ServerNemesisEngines, D03RowLockFrozenMariaDBLostByItsDeadlineThenTakenOver) {
    frozen_server(engine::mysql, true);
}
TEST_F(ServerNemesisEngines, D01RowLockPostgreSQLServerCrashLossReportedAtOnce) {
    row_lock_server_crash(engine::postgresql);
}
TEST_F(ServerNemesisEngines, D01RowLockMariaDBServerCrashLossReportedAtOnce) { row_lock_server_crash(engine::mysql); }
TEST_F(ServerNemesisEngines, D07MariaDBSilentPartitionHolderReportsLossAndIsRefusedAfterHealing) {
    silent_partition(engine::mysql, false);
}
TEST_F(ServerNemesisEngines, D07RowLockPostgreSQLSilentPartitionServerEndsTheHoldAfterTheLossReport) {
    silent_partition(engine::postgresql, true);
}
TEST_F(ServerNemesisEngines, D07RowLockMariaDBSilentPartitionServerEndsTheHoldAfterTheLossReport) {
    silent_partition(engine::mysql, true);
}

}  // namespace
