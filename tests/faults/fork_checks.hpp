// sqlock reliability battery — the checks of the fork nemesis and the operation fuzzer
// (fork_nemesis_suite.cpp, fuzz_suite.cpp), over the record of a battery_worker --fuzz run.
//
// A worker logs each fork as op "fork" (owner: the child's name "<worker>.f<n>-<point>-<end>[-lock]",
// value: its pid) and the child's end as op "fork_end": ok when it exited 0, fail with how it ended.
// The child logs its own critical sections under its own name (history-<child>.jsonl).
#pragma once

#include "battery_harness.hpp"

#include <map>
#include <set>
#include <string>
#include <vector>

namespace sqlock_battery {

/// The workers' environment for a run with forks: leak checking off (LLVM 14's LeakSanitizer takes its
/// allocator's lock at exit, which a thread of the parent may have held at the fork, so a forked child
/// of a threaded process can hang there: a limit of the sanitizer, not of sqlock; the other suites check
/// the library for leaks).
inline std::string no_leak_check_at_exit() {
    auto const asan = sqlock_test::getenv_nonempty("ASAN_OPTIONS").value_or("");
    return "ASAN_OPTIONS=" + asan + (asan.empty() ? "" : ":") + "detect_leaks=0";
}

/// "fork-children": every forked child ended with exit 0 (no crash, no hang, no failed call of its
/// own), unless its worker was killed by the nemesis (the child dies with it). With `need_coverage`,
/// every fork point (acquired, renewing, releasing) and every end (_exit, return, exit) happened at
/// least once, else the fault never bit (a rerun, like a failpoint never reached).
inline report fork_children(run_record const& rec, bool need_coverage) {
    report r{"fork-children", {}, {}};
    std::set<std::string> killed;
    for (auto const& n : rec.nemesis)
        if (n.fault == "kill") killed.insert(n.target);
    std::map<std::string, std::string> forked;  // child name -> its worker
    std::set<std::string> ended;
    for (auto const& ev : rec.history) {
        if (ev.op == "fork" && ev.type == "ok") forked[ev.owner] = ev.proc;
        if (ev.op != "fork_end") continue;
        ended.insert(ev.owner);
        if (ev.type == "ok") ++r.counts["ended_ok"];
        else r.violations.push_back({"fork-children", ev.error});
    }
    std::map<std::string, std::int64_t> points, ends;
    for (auto const& [child, parent] : forked) {
        auto const dash = child.find('-');
        auto const dash2 = child.find('-', dash + 1);
        if (dash != std::string::npos && dash2 != std::string::npos) {
            ++points[child.substr(dash + 1, dash2 - dash - 1)];
            auto const dash3 = child.find('-', dash2 + 1);
            ++ends[child.substr(dash2 + 1, dash3 == std::string::npos ? std::string::npos : dash3 - dash2 - 1)];
        }
        if (ended.count(child) == 0 && killed.count(parent) == 0)
            r.violations.push_back({"fork-children", "fork child " + child + " of " + parent +
                                                         ": no end recorded, although its worker was never killed"});
    }
    r.counts["forks"] = static_cast<std::int64_t>(forked.size());
    for (auto const& [p, n] : points) r.counts["at_" + p] = n;
    for (auto const& [e, n] : ends) r.counts["end_" + e] = n;
    if (need_coverage && r.violations.empty()) {
        for (auto const* p : {"acquired", "renewing", "releasing"})
            if (points.count(p) == 0)
                r.violations.push_back({"fork-children", std::string("no fork while ") + p +
                                                             ": the fault never bit there, the run proves nothing"});
        for (auto const* e : {"_exit", "return", "exit"})
            if (ends.count(e) == 0)
                r.violations.push_back({"fork-children", std::string("no child ended by ") + e +
                                                             ": the fault never bit there, the run proves nothing"});
    }
    return r;
}

/// "unique-tokens": a fencing token names one grant, so two owners never get an acquire ok of one lock
/// with the same token (two processes granted one lease: what a repeated attempt id gave after fork).
inline report unique_grant_tokens(run_record const& rec) {
    report r{"unique-tokens", {}, {}};
    std::map<std::pair<std::string, std::int64_t>, std::set<std::string>> owners;
    for (auto const& ev : rec.history)
        if ((ev.op == "acquire" || ev.op == "try_acquire") && ev.type == "ok" && ev.token)
            owners[{ev.lock, *ev.token}].insert(ev.owner);
    for (auto const& [key, who] : owners) {
        if (who.size() < 2) continue;
        std::string list;
        for (auto const& o : who) list += (list.empty() ? "" : ", ") + o;
        r.violations.push_back({"unique-tokens", "lock " + key.first + ": token " + std::to_string(key.second) +
                                                     " granted to " + std::to_string(who.size()) + " owners: " + list});
    }
    r.counts["grants"] = static_cast<std::int64_t>(owners.size());
    return r;
}

}  // namespace sqlock_battery
