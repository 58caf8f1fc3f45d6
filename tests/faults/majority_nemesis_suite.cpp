// sqlock reliability battery — majority mode (sqlock::majority_locker) with faults on real member servers
// (issue 13; plan reference/reliability-battery.md §4.F: F02, F03, F04, F07). F01, F05, F08, F09, F10 are in
// battery_suite.cpp and majority_battery_suite.cpp, F06 in characterization_suite.cpp.
//
//   BatteryMajorityNemesis.F02_MemberKilledAndRestarted: members pg, pg2 (shared test servers) and a private
//     PostgreSQL (scripts/test-servers.sh) whose whole process tree is killed with SIGKILL, kept down 4 s and
//     started again on its data (crash recovery; it is durable, so it rejoins at once: sqlock has no delayed
//     rejoin, docs/majority.md). Grants go on while it is down, each on rows of the two live members (none is
//     counted on the dead one), and after the restart grants hold rows on it again; K1 per member,
//     K1-majority, K2 = 0, K7, K8.
//   BatteryMajorityNemesis.F03_MemberFrozenBelowTtl: the private member's whole server frozen (cgroup v1
//     freezer) for 1.6 s, TTL 2 s, again and again. No attempt waits for it past the member timeout (each one
//     round: single_try), the reported validity is TTL − elapsed − drift at most, no grant past the window.
//   BatteryMajorityNemesis.F04_MajorityUnreachable: pg2's and mariadb's proxies black-hole everything for
//     1.5 s at a time: attempts then fail promptly (bounded by the member timeout), never OK, and the partial
//     grants they got on pg (the reachable minority) are deleted at once (step 5); K8 after the TTL.
//   BatteryMajorityNemesis.F07_MemberClockJumpTwoHolders (N = 3 form of Kleppmann's scenario): client 1 holds
//     on A and B while C is cut off from it; B's server clock (libfaketime in its postmaster) jumps 3×TTL
//     ahead; client 2 takes over on B and C. Two holders in real time, as expected (K2 reports the overlap);
//     the shared member B makes client 2's majority token larger, so the resource refuses client 1's late
//     write (K3: 0 stale writes accepted, 1 refused). A's own token counter is set far ahead first, so that only
//     the majority token rule — not the members' own counters — can give this order.
// Checks: checkers.hpp (K1–K9) and majority_checks.hpp over the recorded history and every member's audit, plus
// the checks below. The private-server tests need the PostgreSQL binaries (F03 root and the cgroup v1 freezer,
// F07 libfaketime): without them they skip outside CI and fail under CI. RUN_SERIAL, labels
// fault-smoke;majority;nemesis.
#include "battery_harness.hpp"
#include "majority_checks.hpp"
#include "majority_members.hpp"
#include "private_server.hpp"

#include <sqlock/majority.hpp>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <limits>

namespace {

using namespace std::chrono_literals;
using namespace sqlock_battery;
using namespace sqlock_battery::majority;
using sqlock::engine;
using sqlock_test::member_spec;
using sqlock_test::private_pg;
using steady = std::chrono::steady_clock;

/// Skipped outside CI, failed under CI, when a tool or privilege the test needs is missing.
void require(bool present, std::string const& what) {
    if (present) return;
    if (sqlock_test::in_ci())
        GTEST_FAIL() << what << " and CI is set: run the tests as root with scripts/deps.sh --servers installed";
    GTEST_SKIP() << what << " (not CI, so skipping; with CI set this fails)";
}
bool ready(bool present, std::string const& what) {
    require(present, what);
    return !sqlock_test::should_stop();
}

bool have_pg_binaries() {
    auto dir = sqlock_test::getenv_nonempty("SQLOCK_PG_BIN");
    return fs::exists((dir ? fs::path(*dir) : fs::path("/usr/lib/postgresql/15/bin")) / "initdb");
}

/// The shared test servers' two PostgreSQL members (of `shared`) and a private one labelled `label`.
std::vector<member_spec> with_private_member(std::vector<member_spec> const& shared, private_pg const& pg,
                                             std::string const& label) {
    std::vector<member_spec> out;
    for (auto const& m : shared)
        if (m.label != "mariadb") out.push_back(m);
    out.push_back({label, engine::postgresql, pg.url()});
    return out;
}

// ---------------------------------------------------------------------------------------------- the checks

/// Rows of `owner` on `lock` granted during [from, to] (± slack) and not ended before `to`, per member.
std::set<std::string> support_of(digest const& d, call const& a) {
    std::int64_t const slack = 5 * ms_ns;
    std::set<std::string> members;
    for (auto const& row : d.rows)
        if (row.owner == a.owner && row.lock == a.lock && row.grant_ns >= a.invoke_ns - slack &&
            row.grant_ns <= a.complete_ns + slack && row.end_ns >= a.complete_ns - slack)
            members.insert(row.db);
    return members;
}

/// K1-majority: per lock, the intervals in which one owner's rows are live on a majority (2 of 3) of the
/// members never overlap another owner's, on the audit's times (every member's clock is this host's; a
/// row lives from its grant to the earlier of its end and its expiry).
report k1_majority(run_record const& r, std::size_t quorum = 2) {
    report rep{"K1-majority", {}, {}};
    auto const d = digest_of(r);
    std::map<std::string, std::vector<member_row const*>> by_lock;
    for (auto const& row : d.rows) by_lock[row.lock].push_back(&row);
    std::int64_t segments = 0;
    for (auto const& [lock, rows] : by_lock) {
        std::vector<std::int64_t> cuts;
        for (auto const* row : rows) {
            cuts.push_back(row->grant_ns);
            cuts.push_back(std::min(row->end_ns, row->expires_ns));
        }
        std::sort(cuts.begin(), cuts.end());
        cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
        std::int64_t reported_until = std::numeric_limits<std::int64_t>::min();
        for (std::size_t i = 0; i + 1 < cuts.size(); ++i) {
            std::int64_t const t = cuts[i] + (cuts[i + 1] - cuts[i]) / 2;  // inside the segment
            std::map<std::string, std::set<std::string>> live;             // owner -> members
            for (auto const* row : rows)
                if (row->grant_ns <= t && t < std::min(row->end_ns, row->expires_ns)) live[row->owner].insert(row->db);
            std::vector<std::string> majority_owners;
            for (auto const& [owner, members] : live)
                if (members.size() >= quorum) majority_owners.push_back(owner);
            ++segments;
            if (majority_owners.size() > 1 && cuts[i] > reported_until) {
                reported_until = cuts[i + 1];
                rep.violations.push_back(
                    {"K1-majority",
                     fmt::format("lock '{}': owners {} and {} each had live rows on a "
                                 "majority at once ({} ms long)",
                                 lock, majority_owners[0], majority_owners[1], (cuts[i + 1] - cuts[i]) / ms_ns)});
            }
        }
    }
    rep.counts = {{"locks", static_cast<std::int64_t>(by_lock.size())}, {"segments", segments}};
    return rep;
}

/// F02: while `target` was down (its `fault` windows, from `settle` after the kill to the restart), grants go
/// on (at least `min_grants`), each with rows of its owner on a majority of the *live* members: none counted
/// on the dead one, which holds no row granted meanwhile; after its restart (`rejoin_fault`, an instant)
/// grants hold rows on it again. Reports the acquire latency (waiting acquires) while it was down.
report grants_continue_while_down(run_record const& r, std::string const& fault, std::string const& rejoin_fault,
                                  std::string const& target, std::size_t min_grants, std::chrono::milliseconds settle) {
    report rep{"F02-liveness", {}, {}};
    auto const d = digest_of(r);
    std::int64_t down_grants = 0, max_latency_ms = 0, windows = 0;
    std::vector<std::int64_t> latencies;
    for (auto const& [t, from, to] : windows_of(r, fault)) {
        if (t != target) continue;
        ++windows;
        for (auto const& row : d.rows)
            if (row.db == target && row.grant_ns > from && row.grant_ns < to)
                rep.violations.push_back(
                    {"F02", fmt::format("member {} granted lock '{}' to {} {} ms into its "
                                        "downtime: the kill did not take it down",
                                        target, row.lock, row.owner, (row.grant_ns - from) / ms_ns)});
        for (auto const& g : d.grants) {
            auto const& a = *g.acquire;
            if (a.complete_ns < from + settle.count() * ms_ns || a.complete_ns > to) continue;
            ++down_grants;
            latencies.push_back((a.complete_ns - a.invoke_ns) / ms_ns);
            auto members = support_of(d, a);
            members.erase(target);
            if (members.size() < 2)
                rep.violations.push_back(
                    {"F02", fmt::format("lock '{}': owner {} reported OK (token {}) while member "
                                        "{} was down, with rows on only {} live member(s): the "
                                        "dead member was counted",
                                        a.lock, a.owner, a.token.value_or(0), target, members.size())});
        }
    }
    // Rejoin: grants after the restart are held on the restarted member again (it is durable, and sqlock has no
    // delayed rejoin: it takes part at once).
    std::int64_t rejoined = 0, restarted_at = never;
    for (auto const& n : r.nemesis)
        if (n.target == target && n.fault == rejoin_fault) restarted_at = std::min(restarted_at, n.mono_ns);
    for (auto const& g : d.grants)
        if (g.acquire->complete_ns > restarted_at && support_of(d, *g.acquire).count(target) != 0) ++rejoined;
    if (restarted_at == never || rejoined == 0)
        rep.violations.push_back(
            {"F02", "no grant after the restart of member " + target + " had a row on it: the member did not rejoin"});
    if (windows == 0) rep.violations.push_back({"F02", "member " + target + " was never down: the fault never ran"});
    if (static_cast<std::size_t>(down_grants) < min_grants)
        rep.violations.push_back({"F02", fmt::format("only {} grants while member {} was down (at least {}): grants "
                                                     "did not go on with two of three members (liveness B)",
                                                     down_grants, target, min_grants)});
    std::sort(latencies.begin(), latencies.end());
    if (!latencies.empty()) max_latency_ms = latencies.back();
    rep.counts = {{"down_windows", windows},
                  {"grants_while_down", down_grants},
                  {"grants_on_it_after_restart", rejoined},
                  {"acquire_ms_p99_while_down",
                   latencies.empty() ? -1 : latencies[std::min(latencies.size() - 1, latencies.size() * 99 / 100)]},
                  {"acquire_ms_max_while_down", max_latency_ms}};
    return rep;
}

/// F03: every attempt (one round each: single_try) invoked while a member was frozen ends within `bound`
/// (the member timeout's rounds plus slack), well before the thaw; at least one of them was granted (the
/// frozen member cost it time and the grant still came: the fault bit).
report attempts_do_not_wait_for_a_frozen_member(run_record const& r, std::string const& fault,
                                                std::chrono::milliseconds bound) {
    report rep{"F03-bounded", {}, {}};
    auto const d = digest_of(r);
    std::int64_t in_window = 0, granted = 0, max_ms = 0;
    for (auto const& [t, from, to] : windows_of(r, fault)) {
        for (auto const& c : d.calls) {
            if (c.op != "acquire" || c.invoke_ns < from || c.invoke_ns > to - bound.count() * ms_ns) continue;
            ++in_window;
            std::int64_t const took = c.complete_ns == never ? never : (c.complete_ns - c.invoke_ns) / ms_ns;
            if (took != never) max_ms = std::max(max_ms, took);
            if (c.type == "ok") ++granted;
            if (took == never || took > bound.count())
                rep.violations.push_back(
                    {"F03", fmt::format("lock '{}': owner {}'s attempt invoked {} ms into member "
                                        "{}'s freeze took {}: more than the bound {} ms (it "
                                        "waited for the frozen member)",
                                        c.lock, c.owner, (c.invoke_ns - from) / ms_ns, t,
                                        took == never ? std::string("for ever") : std::to_string(took) + " ms",
                                        bound.count())});
        }
    }
    if (granted == 0)
        rep.violations.push_back({"F03", "no attempt was granted while a member was frozen: the fault never bit"});
    rep.counts = {{"attempts_while_frozen", in_window}, {"granted_while_frozen", granted}, {"max_attempt_ms", max_ms}};
    return rep;
}

/// F04: while `down` (two of the three members) were black-holed together, every attempt (single_try)
/// invoked from `settle` into the window (and `bound` before its end) fails, within `bound`; the partial
/// grants the failed attempts of the window got on the reachable member were rows deleted live
/// (member_rows_are_given_back bounds how fast), and there was at least one (the fault bit).
report majority_unreachable_fails_promptly(run_record const& r, std::string const& fault, std::string const& reachable,
                                           std::chrono::milliseconds settle, std::chrono::milliseconds bound) {
    report rep{"F04-prompt", {}, {}};
    auto const d = digest_of(r);
    auto const majority_down = overlaps_of(r, fault);
    std::int64_t attempts = 0, max_ms = 0, partial = 0, partial_deleted = 0;
    for (auto const& [from, to] : majority_down) {
        for (auto const& c : d.calls) {
            if (c.op != "acquire" || c.invoke_ns < from + settle.count() * ms_ns || c.invoke_ns > to) continue;
            // Its grant on the reachable member, when it was not granted: a partial grant.
            for (auto const& row : d.rows)
                if (c.type != "ok" && row.db == reachable && row.owner == c.owner && row.lock == c.lock &&
                    row.grant_ns >= c.invoke_ns && row.grant_ns <= c.complete_ns) {
                    ++partial;
                    if (row.live_delete) ++partial_deleted;
                }
            if (c.invoke_ns > to - bound.count() * ms_ns) continue;  // it may end after the black hole did
            ++attempts;
            std::int64_t const took = c.complete_ns == never ? never : (c.complete_ns - c.invoke_ns) / ms_ns;
            if (took != never) max_ms = std::max(max_ms, took);
            if (c.type == "ok")
                rep.violations.push_back({"F04", fmt::format("lock '{}': owner {} was granted (token {}) while two of "
                                                             "the three members were unreachable",
                                                             c.lock, c.owner, c.token.value_or(0))});
            else if (took == never || took > bound.count())
                rep.violations.push_back(
                    {"F04", fmt::format("lock '{}': owner {}'s attempt with a majority "
                                        "unreachable took {}: more than the bound {} ms",
                                        c.lock, c.owner,
                                        took == never ? std::string("for ever") : std::to_string(took) + " ms",
                                        bound.count())});
        }
    }
    if (majority_down.empty()) rep.violations.push_back({"F04", "two members were never unreachable together"});
    if (partial == 0)
        rep.violations.push_back(
            {"F04", "no attempt got a partial grant on the reachable member: the fault never bit"});
    if (partial_deleted < partial)
        rep.violations.push_back({"F04", fmt::format("{} of the {} partial grants on member {} were left to expire, "
                                                     "not deleted (the step-5 cleanup)",
                                                     partial - partial_deleted, partial, reachable)});
    rep.counts = {{"majority_down_windows", static_cast<std::int64_t>(majority_down.size())},
                  {"attempts", attempts},
                  {"max_attempt_ms", max_ms},
                  {"partial_rows", partial},
                  {"partial_rows_deleted", partial_deleted}};
    return rep;
}

// What F02, F03 and F04 share: majority mode, 2 processes × 2 threads on 2 locks for 10 s, TTL 2 s, acquire wait
// 3 s, holds of 20-60 ms, K2 checked.
scenario majority_scenario(std::string id, std::uint64_t seed) {
    scenario s;
    s.id = std::move(id);
    s.fixed_seed = seed;
    s.majority = true;
    s.processes = 2;
    s.threads = 2;
    s.locks = 2;
    s.duration = 10s;
    s.ttl = 2s;
    s.acquire_wait = 3s;
    s.hold_min = 20ms;  // a few hundred grants: enough, and the checks stay quick
    s.hold_max = 60ms;
    s.k2 = true;
    return s;
}

// ---------------------------------------------------------------------------------------------- F02

// F02 — one member's whole server killed with SIGKILL 2 s into the run, kept down 4 s, started again on its data.
// 2 processes × 2 threads on 2 locks, TTL 2 s (member timeout 200 ms). While it is down, at least 5 grants (far
// below the usual ~100), each on the two live members; after the restart, grants on it again (it rejoins). K1 per
// member and K1-majority (an owner's rows on a majority never overlap another's), K2 = 0 (no pause in this run:
// nobody believes in a lease a majority gave to someone else), K7 (members' and majority tokens), K8 once the run
// is over (the restarted member's rows of grants made before the kill are expired by then).
TEST(BatteryMajorityNemesis, F02_MemberKilledAndRestarted) {
    if (!ready(have_pg_binaries(), "no PostgreSQL 15 binaries (initdb)")) return;
    auto const shared = sqlock_test::shared_majority_members();  // before starting a server: they may be missing
    if (sqlock_test::should_stop()) return;
    private_pg pg;
    scenario s = majority_scenario("F02", 402);
    s.members = with_private_member(shared, pg, "pgk");
    s.linger = 1s;
    s.min_grants = 20;
    s.nemesis_script = [&pg](nemesis_ctl& ctl) {
        ctl.sleep(2s);
        auto const killed = pg.kill_tree();
        ctl.log("kill-server", "pgk", "start", "SIGKILL of the server tree (" + std::to_string(killed) + " processes)");
        ctl.sleep(4s);
        ctl.log("kill-server", "pgk", "stop", "starting it again");  // down until here, at least
        pg.start_again();
        ctl.log("restart-server", "pgk", "instant", "up again (crash recovery done)");
    };
    s.extra_checks = {[](run_record const& r) {
                          return grants_continue_while_down(r, "kill-server", "restart-server", "pgk", 5, 500ms);
                      },
                      [](run_record const& r) { return grants_have_majority_support(r); },
                      [](run_record const& r) { return k1_majority(r); }};
    battery_run(s, engine::postgresql).run_and_check();
}

// ---------------------------------------------------------------------------------------------- F03

// F03 — one member slow: its whole server (postmaster and every backend) frozen by the cgroup v1 freezer for
// 1.6 s (< TTL 2 s) twice, 1.5 s apart. Each call is one round (single_try), member timeout 200 ms: an attempt
// invoked during a freeze ends within 1 s (3 member timeouts — acquire, token read, token write — plus 400 ms of
// slack), not at the thaw; the reported validity is never above TTL − elapsed, and no grant whose elapsed reached the
// TTL is OK (validity_is_never_above_truth, drift 22 ms); the frozen member's late grants are given back.
// K1 per member, K1-majority, K2 = 0, K7, K8.
TEST(BatteryMajorityNemesis, F03_MemberFrozenBelowTtl) {
    if (!ready(::geteuid() == 0, "not root (the cgroup v1 freezer)")) return;
    if (!ready(fs::exists(sqlock_test::freezer_root / "cgroup.procs"),
               "no cgroup v1 freezer at " + sqlock_test::freezer_root.string()))
        return;
    if (!ready(have_pg_binaries(), "no PostgreSQL 15 binaries (initdb)")) return;
    auto const shared = sqlock_test::shared_majority_members();  // before starting a server: they may be missing
    if (sqlock_test::should_stop()) return;
    private_pg pg;
    sqlock_test::freezer fz;
    scenario s = majority_scenario("F03", 403);
    s.members = with_private_member(shared, pg, "pgf");
    s.single_try = true;
    s.member_timeout = 200ms;
    s.linger = 2s;
    s.min_grants = 20;
    s.nemesis_script = [&pg, &fz](nemesis_ctl& ctl) {
        auto const moved = fz.adopt_tree(pg.postmaster());  // backends forked later are born in the group
        ctl.log("adopt", "pgf", "instant", std::to_string(moved) + " server processes in the freezer group");
        while (steady::now() < ctl.end - 5s) {
            ctl.sleep(1500ms);
            fz.set("FROZEN");
            ctl.log("freeze", "pgf", "start", "cgroup v1 freezer FROZEN");
            ctl.sleep(1600ms);
            fz.set("THAWED");
            ctl.log("freeze", "pgf", "stop", "THAWED");
        }
    };
    s.extra_checks = {[](run_record const& r) { return attempts_do_not_wait_for_a_frozen_member(r, "freeze", 1000ms); },
                      [](run_record const& r) { return validity_is_never_above_truth(r, 22ms); },
                      [](run_record const& r) { return grants_have_majority_support(r); },
                      [](run_record const& r) { return k1_majority(r); },
                      // A row is given back within 800 ms (far below the TTL) of its attempt's end, or of the thaw
                      // when the frozen member could not act on it before (a late grant, a delete sent meanwhile).
                      [](run_record const& r) {
                          return member_rows_are_given_back(r, 800ms, unreachable_during(r, "freeze"));
                      }};
    battery_run(s, engine::postgresql).run_and_check();
}

// ---------------------------------------------------------------------------------------------- F04

// F04 — a majority unreachable from the clients: pg2's and mariadb's proxies black-hole every byte (connections
// stay open, nothing answers) for 1.5 s, twice, 1.5 s apart; pg stays reachable. Each call is one round
// (single_try), member timeout 200 ms, TTL 2 s. Attempts invoked 100 ms or more into such a window fail (never
// OK) within 1 s; each got pg's grant when the lock was free there, and that partial row is deleted live (step 5,
// within 600 ms of its attempt's end: member_rows_are_given_back; a black-holed member's rows within 600 ms of the
// black hole's end), not left to expire; K8 after quiescence: no leaked row. K1 per member, K1-majority, K2 = 0, K7.
TEST(BatteryMajorityNemesis, F04_MajorityUnreachable) {
    scenario s = majority_scenario("F04", 404);
    s.single_try = true;
    s.member_timeout = 200ms;
    s.linger = 2s;
    s.min_grants = 10;
    s.nemesis_script = [](nemesis_ctl& ctl) {
        while (steady::now() < ctl.end - 5s) {
            ctl.sleep(1500ms);
            for (auto const* m : {"pg2", "mariadb"}) {
                ctl.member(m).proxy->blackhole();
                ctl.log("blackhole", m, "start", "fault proxy drops everything");
            }
            ctl.sleep(1500ms);
            for (auto const* m : {"pg2", "mariadb"}) {
                ctl.member(m).proxy->restore();
                ctl.log("blackhole", m, "stop", "fault proxy relays again");
            }
        }
    };
    s.extra_checks = {[](run_record const& r) {
                          return majority_unreachable_fails_promptly(r, "blackhole", "pg", 100ms, 1000ms);
                      },
                      // Within 600 ms of the attempt's end (of the black hole's end for a delete it swallowed).
                      [](run_record const& r) {
                          return member_rows_are_given_back(r, 600ms, unreachable_during(r, "blackhole"));
                      },
                      [](run_record const& r) { return grants_have_majority_support(r); },
                      [](run_record const& r) { return k1_majority(r); }};
    battery_run(s, engine::postgresql).run_and_check();
}

// ---------------------------------------------------------------------------------------------- F07

/// An in-process history (history.hpp's events) of the two clients of F07.
class recorder {
public:
    void add(event e) {
        e.pid = ::getpid();
        e.mono_ns = raw_monotonic_ns();
        events_.push_back(std::move(e));
    }
    event base(std::string const& proc, std::string const& op, std::string const& type, std::string const& lock,
               std::string const& owner) const {
        event e;
        e.proc = proc;
        e.thread = 0;
        e.op = op;
        e.type = type;
        e.lock = lock;
        e.owner = owner;
        return e;
    }
    std::vector<event> const& events() const { return events_; }
    std::string text() const {
        std::string out = "history:\n";
        for (auto const& e : events_) out += "  " + to_json(e).dump() + "\n";
        return out;
    }

private:
    std::vector<event> events_;
};

// F07, N = 3. Members A (shared pg), B (a private PostgreSQL whose clock libfaketime moves) and C (shared pg2).
// Client 1 reaches C only through a fault proxy that black-holes it; client 2 reaches every member directly.
// 1. A's own token counter for the name (a plain table locker's) is set 10^12 ahead of B's and C's, so that
//    a token made of the members' own counters (the one-round shortcut of docs/majority.md) would rank client 1
//    first.
// 2. Client 1 acquires on A and B (C unreachable), TTL 4 s, no renewal: majority token T1.
// 3. B's clock jumps 3×TTL ahead: on B, client 1's row has expired.
// 4. Client 2 acquires: A refuses (client 1's row is live there), B (a takeover: expired in B's time) and C
//    grant. T2 is settled over B and C; B carries T1, so T2 > T1. Client 1 still believes it holds the lock
//    (its validity has not run out): two holders in real time, expected (K2 reports it).
// 5. Both write to a fenced resource: client 2 with T2 (accepted), then client 1 with T1: refused (K3 = 0
//    stale writes accepted, 1 refused).
// Asserted: T2 > T1; K3; K1 per member on the audit (P1 holds in each member's own time); K7 per member and in
// grant order of the history; K2 counts the overlap (at least one: the fault bit).
TEST(BatteryMajorityNemesis, F07_MemberClockJumpTwoHolders) {
    if (!ready(fs::exists(sqlock_test::libfaketime_path()), sqlock_test::libfaketime_path().string() + " is missing"))
        return;
    if (!ready(have_pg_binaries(), "no PostgreSQL 15 binaries (initdb)")) return;
    constexpr auto ttl = 4s;
    auto const shared = sqlock_test::shared_majority_members();
    if (sqlock_test::should_stop()) return;
    sqlock_test::faked_clock_server b_server;
    std::vector<member_spec> specs{shared.at(0), {"B", engine::postgresql, b_server.pg().url()}, shared.at(1)};
    specs[0].label = "A";
    specs[2].label = "C";
    std::string const tables = "sqlmn_" + sqlock_test::random_hex(10);
    // Client 1's members, each through a proxy; raw sessions (direct) for the audit.
    sqlock_test::majority_members client1_members;
    client1_members.open(specs, tables, {.pool_size = 2, .connect_timeout = 2s, .io_timeout = 5s});
    for (std::size_t i = 0; i < client1_members.size(); ++i) {
        *client1_members.at(i).raw << "SET client_min_messages = warning";  // IF EXISTS notices
        install_audit(*client1_members.at(i).raw, engine::postgresql, tables);
    }
    // Client 2's members: direct.
    std::vector<std::optional<sqlock::store>> client2_stores(specs.size());
    for (std::size_t i = 0; i < specs.size(); ++i)
        client2_stores[i].emplace(specs[i].url, sqlock::store_options{.pool_size = 2,
                                                                      .table_prefix = tables,
                                                                      .connect_timeout = 2s,
                                                                      .io_timeout = 5s});
    // The fenced resource: tables of its own on the shared pg2 database.
    std::string const res_tables = tables + "_res";
    sqlock::store resource(shared.at(1).url, {.pool_size = 1, .create_schema = true, .table_prefix = res_tables});
    auto res_raw = sqlock_test::raw_session(engine::postgresql, shared.at(1).url);

    std::string const name = sqlock_test::random_prefix() + "f07";
    recorder h;
    auto majority_of = [&](std::vector<sqlock::store*> stores, std::string const& owner) {
        std::vector<sqlock::locker> ms;
        for (auto* st : stores)
            ms.push_back(sqlock::table_locker(*st, {.ttl = ttl, .owner = owner, .auto_renew = false}));
        return sqlock::majority_locker(std::move(ms), {.member_timeout = 500ms, .owner = owner, .auto_renew = false});
    };
    auto acquire = [&](sqlock::locker& l, std::string const& proc, std::string const& owner) {
        h.add(h.base(proc, "acquire", "invoke", name, owner));
        auto got = l.try_acquire(name);
        auto e = h.base(proc, "acquire", got ? "ok" : "fail", name, owner);
        if (got) {
            e.token = got->token();
            e.validity_ms = std::chrono::duration_cast<std::chrono::milliseconds>(got->remaining()).count();
        } else {
            e.error = "busy";
        }
        h.add(e);
        return got;
    };
    auto fenced_write = [&](std::string const& proc, std::string const& owner, std::int64_t token) {
        auto e = h.base(proc, "write_fenced", "invoke", name, owner);
        e.token = token;
        h.add(e);
        std::string error;
        try {
            soci::transaction tx(*res_raw);
            sqlock::fence(resource).check_and_set(*res_raw, name, token);
            tx.commit();
        } catch (sqlock::stale_token const& ex) {
            error = sqlock_test::describe(ex);
        }
        e.type = error.empty() ? "ok" : "fail";
        e.error = error;
        h.add(e);
        return error.empty();
    };

    // 1. A's own counter far ahead of B's and C's (as after a reaper floor, or a member whose clock ran ahead
    //    when the counter was created: own counters start at the database's clock).
    {
        auto a_only = sqlock::table_locker(*client2_stores[0], {.ttl = ttl, .owner = "warm-up", .auto_renew = false});
        a_only.acquire(name, 10s).release();
        *client1_members.at(0).raw << "UPDATE " + tables + "_tokens SET token = token + 1000000000000 WHERE name = :n",
            soci::use(name);
    }
    // 2. Client 1 on A and B.
    client1_members.at(2).proxy->blackhole();
    auto c1 = majority_of({&*client1_members.at(0).store, &*client1_members.at(1).store, &*client1_members.at(2).store},
                          "client-1");
    auto l1 = acquire(c1, "client-1", "client-1");
    ASSERT_TRUE(l1.has_value()) << "client 1 was not granted on A and B; rows: " << client1_members.rows_of(name)
                                << "\n"
                                << h.text();
    ASSERT_TRUE(client1_members.row_on(0, name) && client1_members.row_on(1, name) && !client1_members.row_on(2, name))
        << "client 1's grant is not on A and B only: " << client1_members.rows_of(name);
    ASSERT_TRUE(fenced_write("client-1", "client-1", l1->token())) << h.text();
    // 3. B's clock 3×TTL ahead.
    b_server.offset("+12s");
    // 4. Client 2 on B and C (A refuses: client 1's row is live there).
    auto c2 = majority_of({&*client2_stores[0], &*client2_stores[1], &*client2_stores[2]}, "client-2");
    auto l2 = acquire(c2, "client-2", "client-2");
    ASSERT_TRUE(l2.has_value()) << "client 2 was not granted on B and C after B's clock jumped; rows: "
                                << client1_members.rows_of(name) << "\n"
                                << h.text();
    bool const two_holders = l1->state() == sqlock::lease_state::held;
    std::cout << "[F07] client 1 token " << l1->token() << " (" << sqlock::to_string(l1->state())
              << "), client 2 token " << l2->token() << "; rows: " << client1_members.rows_of(name) << "\n";
    // 5. Fenced writes: the newer holder, then the stale one.
    EXPECT_TRUE(fenced_write("client-2", "client-2", l2->token())) << h.text();
    EXPECT_FALSE(fenced_write("client-1", "client-1", l1->token()))
        << "the resource accepted client 1's write after client 2's: the majority token did not order them\n"
        << h.text();
    EXPECT_GT(l2->token(), l1->token()) << "client 2's majority token is not above client 1's (shared member B)\n"
                                        << h.text();
    // Releases: client 2's on B and C; client 1's (its rows on A; B's is client 2's now) may report the loss.
    for (auto* l : {&*l2, &*l1}) {
        auto const proc = l == &*l1 ? "client-1" : "client-2";
        h.add(h.base(proc, "release", "invoke", name, proc));
        std::string error;
        try {
            l->release();
        } catch (std::exception const& ex) {
            error = sqlock_test::describe(ex);
        }
        auto e = h.base(proc, "release", error.empty() ? "ok" : "fail", name, proc);
        e.error = error;
        h.add(e);
    }
    client1_members.at(2).proxy->restore();
    b_server.offset("+0");

    std::vector<audit_row> audit;
    for (std::size_t i = 0; i < client1_members.size(); ++i) {
        auto a = dump_audit(*client1_members.at(i).raw, engine::postgresql, tables, specs[i].label);
        audit.insert(audit.end(), a.begin(), a.end());
    }
    std::vector<report> reports{k1_db_disjoint(audit), k2_belief_overlap(h.events(), false), k3_fenced(h.events()),
                                k7_tokens(audit, h.events())};
    for (auto const& r : reports) std::cout << "[F07]   " << r.summary() << "\n";
    EXPECT_TRUE(reports[0].ok()) << reports[0].summary();
    EXPECT_TRUE(reports[2].ok()) << reports[2].summary() << "\n" << h.text();
    EXPECT_TRUE(reports[3].ok()) << reports[3].summary();
    EXPECT_GE(reports[2].counts["rejected"], 1) << "no stale write was refused: " << reports[2].summary();
    // The expected limit, reported: two holders in real time.
    EXPECT_TRUE(two_holders) << "client 1's lease was no longer held when client 2 got the lock: the scenario did "
                                "not produce two holders\n"
                             << h.text();
    EXPECT_GE(reports[1].counts["overlaps"], 1) << "K2 saw no overlap of the two holders: " << reports[1].summary();
    RecordProperty("two_holders", two_holders ? 1 : 0);

    for (std::size_t i = 0; i < client1_members.size(); ++i) {
        try {
            drop_audit(*client1_members.at(i).raw, engine::postgresql, tables);
        } catch (std::exception const& ex) {
            ADD_FAILURE() << "could not drop the audit on " << specs[i].label << ": " << ex.what();
        }
    }
    try {
        for (auto const* t :
             {"_locks", "_tokens", "_fences", "_rows", "_majority_tokens", "_identity", "_majority_members"})
            *res_raw << "DROP TABLE IF EXISTS " + res_tables + t;
    } catch (std::exception const& ex) {
        ADD_FAILURE() << "could not drop the resource tables " << res_tables << "_*: " << ex.what();
    }
}

}  // namespace
