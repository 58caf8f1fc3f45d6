// sqlock reliability battery — the majority-mode record and checks (plan §4.F), over a run's history and every
// member's audit (battery_harness.hpp's run_record). Used by majority_battery_suite.cpp (F08, F09, F10, the slow
// member) and majority_nemesis_suite.cpp (F02, F03, F04):
//
//   digest_of                     calls (invoke -> completion), grants and what ended them, member rows from the audit
//   member_rows_are_given_back    no member row outlives its attempt by more than a bound
//   grants_have_majority_support  an acquire ok had rows of its owner on a majority of members
//   validity_is_never_above_truth validity_ms <= TTL − (ok − invoke), every grant inside TTL − drift
//   renew_on_minority_is_lost     F10: a renewal reaching one member is not OK; lost by the deadline
//   release_clears_reachable_members  F10: a release deletes the rows of every member it can reach
//   windows_of                    a nemesis fault's [start, stop) windows per target
//   overlaps_of                   where the windows of two targets overlap (two of three members down together)
#pragma once

#include "battery_harness.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <limits>

namespace sqlock_battery::majority {

inline constexpr std::int64_t never = std::numeric_limits<std::int64_t>::max();
inline constexpr std::int64_t ms_ns = 1'000'000;

// ---------------------------------------------------------------------------------------------- the record

/// One client call (acquire or release), paired invoke -> completion on its thread.
struct call {
    std::string owner, lock, op;
    std::string type = "info";  // ok | fail | info (no completion)
    std::int64_t invoke_ns = 0, complete_ns = never;
    std::optional<std::int64_t> validity_ms;
    std::optional<std::int64_t> token;
    std::string error;
};

/// A grant as its holder saw it: acquire ok until the release completed (or the loss, or never).
struct held {
    call const* acquire = nullptr;
    std::int64_t end_ns = never;  // release completion, lost event, or never
    std::int64_t release_invoke_ns = never;
    call const* release = nullptr;
    std::int64_t lost_ns = never;
    std::vector<event const*> renews;  // renew ok of this grant
};

/// A member's row, from its audit: granted (insert or takeover) at grant_ns until it ended
/// (deleted or taken over) at end_ns, both on the raw monotonic clock.
struct member_row {
    std::string db, lock, owner;
    std::int64_t token = 0;
    std::int64_t grant_ns = 0, end_ns = never, expires_ns = never;
    bool live_delete = false;  // ended by a delete before its expiry (a release or give-back)
};

struct digest {
    std::vector<call> calls;
    std::vector<held> grants;
    std::vector<member_row> rows;
    std::vector<event const*> busy;
};

inline std::int64_t mono_of(run_record const& r, std::int64_t db_us) { return db_us * 1000 - r.realtime_minus_mono_ns; }

inline digest digest_of(run_record const& r) {
    digest d;
    std::vector<event const*> sorted;
    for (auto const& e : r.history) sorted.push_back(&e);
    std::stable_sort(sorted.begin(), sorted.end(), [](auto a, auto b) { return a->mono_ns < b->mono_ns; });
    std::map<std::tuple<std::string, std::int64_t, std::int64_t, std::string, std::string>, std::size_t> open;
    d.calls.reserve(r.history.size());
    for (auto const* e : sorted) {
        if (e->op == "busy") d.busy.push_back(e);
        if (e->op != "acquire" && e->op != "release") continue;
        auto key = std::make_tuple(e->proc, e->pid, e->thread, e->lock, e->op);
        if (e->type == "invoke") {
            d.calls.push_back({e->owner, e->lock, e->op, "info", e->mono_ns, never, {}, {}, {}});
            open[key] = d.calls.size() - 1;
        } else if (auto it = open.find(key); it != open.end()) {
            auto& c = d.calls[it->second];
            c.type = e->type;
            c.complete_ns = e->mono_ns;
            c.validity_ms = e->validity_ms;
            c.token = e->token;
            c.error = e->error;
            open.erase(it);
        }
    }
    // Grants and what ended them (the owner's next release, or a loss of its token).
    for (auto const& c : d.calls)
        if (c.op == "acquire" && c.type == "ok") d.grants.push_back({&c});
    for (auto& g : d.grants) {
        for (auto const& c : d.calls)
            if (c.op == "release" && c.owner == g.acquire->owner && c.lock == g.acquire->lock &&
                c.invoke_ns >= g.acquire->complete_ns && c.invoke_ns < g.release_invoke_ns) {
                g.release_invoke_ns = c.invoke_ns;
                g.release = &c;
            }
        for (auto const* e : sorted) {
            if (e->owner != g.acquire->owner || e->lock != g.acquire->lock || e->token != g.acquire->token) continue;
            if (e->op == "lost" && e->mono_ns < g.lost_ns) g.lost_ns = e->mono_ns;
            if (e->op == "renew" && e->type == "ok") g.renews.push_back(e);
        }
        g.end_ns = std::min(g.release ? g.release->complete_ns : never, g.lost_ns);
    }
    // Member rows from the audit, per (db, lock) in seq order.
    std::map<std::pair<std::string, std::string>, std::vector<audit_row const*>> by_lock;
    for (auto const& a : r.audit) by_lock[{a.db, a.lock}].push_back(&a);
    for (auto& [key, list] : by_lock) {
        std::stable_sort(list.begin(), list.end(), [](auto a, auto b) { return a->seq < b->seq; });
        std::optional<member_row> cur;
        for (auto const* a : list) {
            if (a->kind == "grant" || a->kind == "takeover") {
                if (cur) {
                    cur->end_ns = mono_of(r, a->db_time_us);
                    d.rows.push_back(*cur);
                }
                cur = member_row{
                    a->db, a->lock, a->owner, a->token, mono_of(r, a->db_time_us), never, mono_of(r, a->expires_at_us),
                    false};
            } else if (a->kind == "renew" && cur) {
                cur->expires_ns = mono_of(r, a->expires_at_us);
            } else if (a->kind == "delete" && cur) {
                cur->end_ns = mono_of(r, a->db_time_us);
                cur->live_delete = a->db_time_us < a->expires_at_us;
                d.rows.push_back(*cur);
                cur.reset();
            }
        }
        if (cur) d.rows.push_back(*cur);
    }
    return d;
}

/// The latest acquire of (owner, lock) invoked at or before `at` (slack for the clocks' reading).
inline call const* attempt_at(digest const& d, std::string const& owner, std::string const& lock, std::int64_t at) {
    call const* best = nullptr;
    for (auto const& c : d.calls)
        if (c.op == "acquire" && c.owner == owner && c.lock == lock && c.invoke_ns <= at + 5 * ms_ns &&
            (best == nullptr || c.invoke_ns > best->invoke_ns))
            best = &c;
    return best;
}

// ---------------------------------------------------------------------------------------------- the checks

/// Late and partial member grants are given back: every member row ends (deleted, or taken
/// over) no later than `bound` after the end of the attempt that asked for it — the attempt's
/// completion when it did not get the lock, the grant's release or loss when it did, or the row's
/// own grant when it came after that (a late grant). A row left to expire ends at its expiry: a
/// TTL longer than the bound fails. Reports the largest excess and the rows past the bound.
/// `answers_from(db, t)`, when given: the earliest time from `t` at which member `db` could act on a
/// request (the end of a freeze or black hole covering t, for a scenario that makes a member unreachable);
/// a row's bound then counts from there.
inline report member_rows_are_given_back(
    run_record const& r, std::chrono::milliseconds bound,
    std::function<std::int64_t(std::string const&, std::int64_t)> const& answers_from = {}) {
    report rep{"rows-given-back", {}, {}};
    auto const d = digest_of(r);
    std::int64_t orphans = 0, max_orphan_ms = 0, max_excess_ms = 0, open_rows = 0;
    for (auto const& row : d.rows) {
        auto const* a = attempt_at(d, row.owner, row.lock, row.grant_ns);
        if (a == nullptr) continue;  // not a worker's (no such attempt)
        std::int64_t attempt_end = a->complete_ns;
        if (a->type == "ok") {
            for (auto const& g : d.grants)
                if (g.acquire == a) attempt_end = g.end_ns;
        }
        if (attempt_end == never) {
            ++open_rows;  // its attempt or grant never ended in the history (the run ended): K8 judges it
            continue;
        }
        // A waiting acquire runs rounds; one that failed ends with a busy event (log_busy): a row
        // granted before it, inside the call, belonged to that round (or came late to it).
        std::int64_t round_end = never;
        for (auto const* b : d.busy)
            if (b->owner == row.owner && b->lock == row.lock && b->mono_ns >= row.grant_ns &&
                b->mono_ns <= a->complete_ns && b->mono_ns < round_end)
                round_end = b->mono_ns;
        bool const orphan = a->type != "ok" || row.grant_ns > attempt_end || round_end != never;
        if (round_end != never) attempt_end = round_end;
        std::int64_t due = std::max(attempt_end, row.grant_ns);
        if (answers_from) due = answers_from(row.db, due);
        std::int64_t const ended = std::min(row.end_ns, row.expires_ns);
        if (ended == never) continue;
        std::int64_t const excess_ms = (ended - due) / ms_ns;
        if (orphan) {
            ++orphans;
            max_orphan_ms = std::max(max_orphan_ms, (ended - row.grant_ns) / ms_ns);
        }
        max_excess_ms = std::max(max_excess_ms, excess_ms);
        if (excess_ms > bound.count())
            rep.violations.push_back(
                {"rows-given-back",
                 fmt::format(
                     "lock '{}' on member {}: the row of owner {} (member token {}) granted {} ended {} ms after "
                     "its attempt ({}, invoked at {}) ended, more than the bound {} ms ({}{})",
                     row.lock, row.db, row.owner, row.token, orphan ? "to no lease" : "to a lease", excess_ms, a->type,
                     a->invoke_ns, bound.count(),
                     row.end_ns == never || row.end_ns > row.expires_ns ? "left to expire" : "deleted late",
                     orphan ? ", a late or partial grant kept" : "")});
    }
    rep.counts = {{"member_rows", static_cast<std::int64_t>(d.rows.size())},
                  {"orphan_rows", orphans},
                  {"max_orphan_life_ms", max_orphan_ms},
                  {"max_excess_ms", max_excess_ms},
                  {"bound_ms", bound.count()},
                  {"open_at_end", open_rows}};
    return rep;
}

/// Nobody reports OK on a minority: at each acquire ok, rows of its owner granted during the
/// call and not ended before the ok exist on a majority (2 of 3) of the members. Also reports
/// rounds-to-grant (busy attempts inside the acquire, + 1).
inline report grants_have_majority_support(run_record const& r) {
    report rep{"majority-support", {}, {}};
    auto const d = digest_of(r);
    std::int64_t const slack = 5 * ms_ns;
    std::int64_t max_rounds = 0, total_rounds = 0, multi_round = 0;
    for (auto const& g : d.grants) {
        auto const* a = g.acquire;
        std::set<std::string> members;
        for (auto const& row : d.rows)
            if (row.owner == a->owner && row.lock == a->lock && row.grant_ns >= a->invoke_ns - slack &&
                row.grant_ns <= a->complete_ns + slack && row.end_ns >= a->complete_ns - slack)
                members.insert(row.db);
        if (members.size() < 2)
            rep.violations.push_back(
                {"majority-support",
                 fmt::format("lock '{}': owner {} reported OK (token {}) at {} "
                             "with rows on only {} member(s)",
                             a->lock, a->owner, a->token.value_or(0), a->complete_ns, members.size())});
        std::int64_t rounds = 1;
        for (auto const* b : d.busy)
            if (b->owner == a->owner && b->lock == a->lock && b->mono_ns >= a->invoke_ns &&
                b->mono_ns <= a->complete_ns)
                ++rounds;
        max_rounds = std::max(max_rounds, rounds);
        total_rounds += rounds;
        if (rounds > 1) ++multi_round;
    }
    std::int64_t const n = static_cast<std::int64_t>(d.grants.size());
    rep.counts = {{"grants", n},
                  {"rounds_to_grant_max", max_rounds},
                  {"rounds_to_grant_mean_x100", n > 0 ? total_rounds * 100 / n : 0},
                  {"grants_after_retry", multi_round},
                  {"busy_attempts", static_cast<std::int64_t>(d.busy.size())}};
    return rep;
}

/// F09: the validity a grant reports is never above the truth: validity_ms <= TTL − (ok − invoke)
/// (the invoke was logged before the request was sent, the ok after the validity was read, so
/// the elapsed time measured here is at least the library's); and no grant is OK once its
/// elapsed time reached TTL − drift (its validity would be gone).
inline report validity_is_never_above_truth(run_record const& r, std::chrono::milliseconds drift) {
    report rep{"validity", {}, {}};
    auto const d = digest_of(r);
    std::int64_t const ttl = r.ttl.count();
    std::int64_t max_elapsed = 0, min_margin = never, refused = 0;
    for (auto const& c : d.calls) {
        if (c.op != "acquire") continue;
        if (c.type == "fail" && c.complete_ns != never) ++refused;
        if (c.type != "ok" || !c.validity_ms) continue;
        std::int64_t const elapsed = (c.complete_ns - c.invoke_ns) / ms_ns;
        max_elapsed = std::max(max_elapsed, elapsed);
        std::int64_t const margin = ttl - elapsed - *c.validity_ms;
        min_margin = std::min(min_margin, margin);
        if (margin < 0)
            rep.violations.push_back(
                {"validity", fmt::format("lock '{}': owner {} was granted (token {}) {} ms after its "
                                         "invoke with validity {} ms reported: above the truth "
                                         "TTL {} − {} = {} ms",
                                         c.lock, c.owner, c.token.value_or(0), elapsed, *c.validity_ms, ttl, elapsed,
                                         ttl - elapsed)});
        if (*c.validity_ms <= 0 || elapsed >= ttl)
            rep.violations.push_back(
                {"validity", fmt::format("lock '{}': owner {} was granted after {} ms (TTL {}, drift "
                                         "{}) with {} ms left: a grant past the window is OK",
                                         c.lock, c.owner, elapsed, ttl, drift.count(), *c.validity_ms)});
    }
    rep.counts = {{"max_elapsed_ms", max_elapsed},
                  {"min_margin_ms", min_margin == never ? -1 : min_margin},
                  {"acquires_failed", refused}};
    return rep;
}

/// The stall windows of the nemesis log: per member, [start, stop).
inline std::vector<std::tuple<std::string, std::int64_t, std::int64_t>> windows_of(run_record const& r,
                                                                                   std::string const& fault) {
    std::vector<std::tuple<std::string, std::int64_t, std::int64_t>> out;
    std::map<std::string, std::int64_t> started;
    for (auto const& n : r.nemesis) {
        if (n.fault != fault) continue;
        if (n.phase == "start") started[n.target] = n.mono_ns;
        else if (n.phase == "stop" && started.count(n.target)) {
            out.emplace_back(n.target, started[n.target], n.mono_ns);
            started.erase(n.target);
        }
    }
    for (auto const& [t, s] : started) out.emplace_back(t, s, never);
    return out;
}

/// Where the `fault` windows of two different targets overlap, [from, to): a majority of three members down.
inline std::vector<std::pair<std::int64_t, std::int64_t>> overlaps_of(run_record const& r, std::string const& fault) {
    auto const w = windows_of(r, fault);
    std::vector<std::pair<std::int64_t, std::int64_t>> majority_down;
    for (std::size_t i = 0; i < w.size(); ++i)
        for (std::size_t j = i + 1; j < w.size(); ++j) {
            if (std::get<0>(w[i]) == std::get<0>(w[j])) continue;
            auto from = std::max(std::get<1>(w[i]), std::get<1>(w[j]));
            auto to = std::min(std::get<2>(w[i]), std::get<2>(w[j]));
            if (from < to) majority_down.emplace_back(from, to);
        }
    return majority_down;
}

/// For member_rows_are_given_back: a member is unreachable during its `fault` windows, so a request it
/// gets then is acted on at the window's end at the earliest.
inline std::function<std::int64_t(std::string const&, std::int64_t)> unreachable_during(run_record const& r,
                                                                                        std::string const& fault) {
    auto w = windows_of(r, fault);
    return [w](std::string const& db, std::int64_t t) {
        for (auto const& [target, from, to] : w)
            if (target == db && t >= from && t < to) return to;
        return t;
    };
}

/// F10, renewal on a minority: while two of three members are stalled, no renewal is reported OK
/// (one that began before the stall may finish within the member timeout, plus `slack`), and a
/// grant whose safe deadline (its last acquire or renew ok + the validity it reported) passed
/// while its holder still held it is reported lost (op lost, or a release that fails with
/// lease_lost) by that deadline + slack, never released OK after it. At least one grant must have
/// run past its deadline this way (the fault bit).
inline report renew_on_minority_is_lost(run_record const& r, std::chrono::milliseconds member_timeout,
                                        std::chrono::milliseconds slack) {
    report rep{"F10-minority-renew", {}, {}};
    auto const d = digest_of(r);
    // Majority stall windows: where two members' stalls overlap.
    auto const majority_down = overlaps_of(r, "stall");
    std::int64_t lost_in_time = 0, renew_ok_total = 0;
    for (auto const& g : d.grants) {
        for (auto const* e : g.renews) {
            ++renew_ok_total;
            for (auto const& [from, to] : majority_down)
                if (e->mono_ns > from + (member_timeout + slack).count() * ms_ns && e->mono_ns < to)
                    rep.violations.push_back(
                        {"F10",
                         fmt::format("lock '{}': owner {} (token {}) logged a renewal OK {} ms into a stall of two "
                                     "of the three members: renewed on a minority",
                                     g.acquire->lock, g.acquire->owner, g.acquire->token.value_or(0),
                                     (e->mono_ns - from) / ms_ns)});
        }
        // The safe deadline as the holder was told it.
        std::int64_t deadline = g.acquire->complete_ns + g.acquire->validity_ms.value_or(0) * ms_ns;
        for (auto const* e : g.renews)
            if (e->validity_ms) deadline = std::max(deadline, e->mono_ns + *e->validity_ms * ms_ns);
        bool const held_past = g.release_invoke_ns > deadline + slack.count() * ms_ns;
        if (!held_past) continue;
        bool const release_lost =
            g.release && g.release->type == "fail" && g.release->error.find("lease_lost") != std::string::npos;
        if (g.release && g.release->type == "ok")
            rep.violations.push_back(
                {"F10", fmt::format("lock '{}': owner {} (token {}) released OK {} ms after its safe "
                                    "deadline: the lease was not reported lost",
                                    g.acquire->lock, g.acquire->owner, g.acquire->token.value_or(0),
                                    (g.release_invoke_ns - deadline) / ms_ns)});
        else if (g.lost_ns > deadline + slack.count() * ms_ns && !release_lost)
            rep.violations.push_back(
                {"F10", fmt::format("lock '{}': owner {} (token {}) held past its safe deadline "
                                    "and was not reported lost by deadline + {} ms",
                                    g.acquire->lock, g.acquire->owner, g.acquire->token.value_or(0), slack.count())});
        else ++lost_in_time;
    }
    if (lost_in_time == 0)
        rep.violations.push_back({"F10",
                                  "no holder ran past its safe deadline during a stall of two members: the fault "
                                  "never bit, the scenario proves nothing"});
    rep.counts = {{"majority_stalls", static_cast<std::int64_t>(majority_down.size())},
                  {"renew_ok", renew_ok_total},
                  {"lost_by_deadline", lost_in_time}};
    return rep;
}

/// F10, release with one member down: each release OK deletes the grant's rows on every member
/// that was reachable during the release (a live delete by then + slack); a row on the member that
/// was down (refusing connections) meanwhile is left to expire by its TTL — not deleted live by
/// anyone else (K1 also checks that it is not taken over early). At least one release must have
/// found a member down holding a row of its grant (the fault bit).
inline report release_clears_reachable_members(run_record const& r, std::chrono::milliseconds slack) {
    report rep{"F10-release", {}, {}};
    auto const d = digest_of(r);
    auto const down = windows_of(r, "block");
    auto was_down = [&](std::string const& db, std::int64_t from, std::int64_t to) {
        for (auto const& [t, s, e] : down)
            if (t == db && s < to && e > from) return true;
        return false;
    };
    std::int64_t cleared = 0, left_to_expire = 0;
    for (auto const& g : d.grants) {
        if (!g.release || g.release->type != "ok" || g.release->complete_ns == never) continue;
        auto const from = g.release->invoke_ns, to = g.release->complete_ns;
        for (auto const& row : d.rows) {
            if (row.owner != g.acquire->owner || row.lock != g.acquire->lock) continue;
            if (row.grant_ns > from || row.end_ns < from - 5 * ms_ns) continue;  // not this grant's row at release
            if (was_down(row.db, g.acquire->invoke_ns, to)) {
                ++left_to_expire;
                if (row.live_delete && row.end_ns > to + slack.count() * ms_ns)
                    rep.violations.push_back(
                        {"F10", fmt::format("lock '{}' on member {}: the row of owner {} was deleted "
                                            "live {} ms after its release ended",
                                            row.lock, row.db, row.owner, (row.end_ns - to) / ms_ns)});
                continue;
            }
            if (row.live_delete && row.end_ns <= to + slack.count() * ms_ns) {
                ++cleared;
                continue;
            }
            rep.violations.push_back(
                {"F10", fmt::format("lock '{}' on member {}: the release of owner {} (token {}) "
                                    "returned OK but its row on that reachable member {}",
                                    row.lock, row.db, row.owner, g.acquire->token.value_or(0),
                                    row.live_delete ? "was deleted only later" : "was not deleted (left to expire)")});
        }
    }
    if (left_to_expire == 0)
        rep.violations.push_back({"F10", "no release found a member down holding its row: the fault never bit"});
    rep.counts = {{"rows_cleared", cleared}, {"rows_left_on_down_member", left_to_expire}};
    return rep;
}

}  // namespace sqlock_battery::majority
