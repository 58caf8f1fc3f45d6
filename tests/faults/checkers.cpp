// sqlock reliability battery — the checkers K1–K9 (tests/faults/checkers.hpp).
#include "checkers.hpp"

#include "coord_checkers.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <stdexcept>
#include <tuple>
#include <utility>

namespace sqlock_battery {

// ---------------------------------------------------------------------------------------------------------------
// JSON of the audit, the nemesis log and final.json
// ---------------------------------------------------------------------------------------------------------------

nlohmann::json to_json(audit_row const& r) {
    nlohmann::json j{{"seq", r.seq},
                     {"lock", r.lock},
                     {"owner", r.owner},
                     {"token", r.token},
                     {"kind", r.kind},
                     {"db_time_us", r.db_time_us},
                     {"expires_at_us", r.expires_at_us}};
    if (!r.db.empty()) j["db"] = r.db;
    return j;
}

audit_row audit_from_json(nlohmann::json const& j) {
    audit_row r;
    r.seq = j.value("seq", std::int64_t{0});
    r.lock = j.at("lock").get<std::string>();
    r.owner = j.value("owner", "");
    r.token = j.value("token", std::int64_t{0});
    r.kind = j.at("kind").get<std::string>();
    r.db_time_us = j.at("db_time_us").get<std::int64_t>();
    r.expires_at_us = j.value("expires_at_us", std::int64_t{0});
    r.db = j.value("db", "");
    return r;
}

nlohmann::json to_json(nemesis_event const& e) {
    nlohmann::json j{{"fault", e.fault}, {"target", e.target}, {"phase", e.phase}, {"mono_ns", e.mono_ns}};
    if (!e.detail.empty()) j["detail"] = e.detail;
    return j;
}

namespace {

nemesis_event nemesis_from_json(nlohmann::json const& j) {
    nemesis_event e;
    e.fault = j.at("fault").get<std::string>();
    e.target = j.value("target", "");
    e.phase = j.value("phase", "instant");
    e.mono_ns = j.at("mono_ns").get<std::int64_t>();
    e.detail = j.value("detail", "");
    return e;
}

// JSON lines written by one process (the audit dump, the nemesis log): every line must be complete, except a torn
// last one when the writer was killed.
template <class T, class F>
std::vector<T> read_json_lines(std::string const& path, char const* what, F from) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw std::invalid_argument(fmt::format("{}: cannot open {} for reading", what, path));
    std::vector<T> out;
    std::string line;
    std::size_t number = 0;
    while (std::getline(in, line)) {
        ++number;
        bool const terminated = !in.eof();
        if (line.empty()) continue;
        auto j = nlohmann::json::parse(line, nullptr, false);
        try {
            if (j.is_discarded()) throw std::invalid_argument("not JSON");
            out.push_back(from(j));
        } catch (std::exception const& e) {
            if (!terminated) break;  // a torn last line
            throw std::invalid_argument(fmt::format("{}: {}:{} is not a valid line ({}); see tests/faults/README.md",
                                                    what, path, number, e.what()));
        }
    }
    return out;
}

}  // namespace

std::vector<audit_row> read_audit(std::string const& path) {
    return read_json_lines<audit_row>(path, "audit", [](nlohmann::json const& j) { return audit_from_json(j); });
}

std::vector<nemesis_event> read_nemesis(std::string const& path) {
    return read_json_lines<nemesis_event>(path, "nemesis log",
                                          [](nlohmann::json const& j) { return nemesis_from_json(j); });
}

nlohmann::json to_json(run_final const& f) {
    nlohmann::json j{{"counters", f.counters}, {"live_owners", f.live_owners}, {"k2_expect_zero", f.k2_expect_zero}};
    j["remaining"] = nlohmann::json::array();
    for (auto const& r : f.remaining) j["remaining"].push_back(to_json(r));
    if (f.k6_bound_ms) j["k6_bound_ms"] = *f.k6_bound_ms;
    if (f.asserted) j["asserted"] = *f.asserted;
    if (f.realtime_minus_mono_ns != 0) j["realtime_minus_mono_ns"] = f.realtime_minus_mono_ns;
    if (f.coordination) j["coordination"] = *f.coordination;
    return j;
}

run_final read_final(std::string const& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw std::invalid_argument("final.json: cannot open " + path + " for reading");
    try {
        auto j = nlohmann::json::parse(in);
        run_final f;
        if (auto it = j.find("counters"); it != j.end()) f.counters = it->get<std::map<std::string, std::int64_t>>();
        if (auto it = j.find("remaining"); it != j.end()) {
            f.has_remaining = true;
            for (auto const& r : *it) f.remaining.push_back(audit_from_json(r));
        }
        if (auto it = j.find("live_owners"); it != j.end()) f.live_owners = it->get<std::vector<std::string>>();
        if (auto it = j.find("k6_bound_ms"); it != j.end()) f.k6_bound_ms = it->get<std::int64_t>();
        f.k2_expect_zero = j.value("k2_expect_zero", true);
        if (auto it = j.find("asserted"); it != j.end()) f.asserted = it->get<std::vector<std::string>>();
        f.realtime_minus_mono_ns = j.value("realtime_minus_mono_ns", std::int64_t{0});
        if (auto it = j.find("coordination"); it != j.end()) f.coordination = *it;
        return f;
    } catch (nlohmann::json::exception const& e) {
        throw std::invalid_argument("final.json: " + path + " is not valid (" + e.what() +
                                    "); tests/faults/README.md describes the format");
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Reports
// ---------------------------------------------------------------------------------------------------------------

std::string report::summary() const {
    std::string counted;
    for (auto const& [k, v] : counts) {
        if (!counted.empty()) counted += ", ";
        counted += fmt::format("{}={}", k, v);
    }
    if (ok()) return fmt::format("{} ok ({})", checker, counted);
    std::string s = fmt::format("{} FAILED: {} violation{} ({})", checker, violations.size(),
                                violations.size() == 1 ? "" : "s", counted);
    std::size_t const shown = std::min<std::size_t>(violations.size(), 3);
    for (std::size_t i = 0; i < shown; ++i) {
        s += i == 0 ? ": " : "; ";
        s += violations[i].what;
    }
    if (violations.size() > shown) s += fmt::format("; ... {} more", violations.size() - shown);
    return s;
}

namespace {

constexpr std::int64_t never = std::numeric_limits<std::int64_t>::max();

double ms(std::int64_t ns) { return static_cast<double>(ns) / 1e6; }
double ms_us(std::int64_t us) { return static_cast<double>(us) / 1e3; }
std::int64_t ms_ceil(std::int64_t ns) { return (ns + 999'999) / 1'000'000; }

void add(report& r, std::string what) { r.violations.push_back({r.checker, std::move(what)}); }

std::string tok(std::optional<std::int64_t> t) { return t ? std::to_string(*t) : std::string("?"); }

// The library's error type at the head of an error string: "sqlock::lease_lost: ..." or "lease_lost: ..." both
// give "lease_lost".
std::string error_type(std::string_view e) {
    if (e.substr(0, 8) == "sqlock::") e.remove_prefix(8);
    std::size_t n = 0;
    while (n < e.size() && (std::isalnum(static_cast<unsigned char>(e[n])) || e[n] == '_')) ++n;
    return std::string(e.substr(0, n));
}

bool is_loss(std::string const& error) { return error_type(error) == "lease_lost"; }

// ---- operations: invokes paired with their completions ----------------------------------------------------------

struct op {
    std::string proc;
    std::int64_t pid = 0;
    std::int64_t thread = 0;
    std::string name;  // the event's op
    std::string lock;
    std::string owner;
    std::optional<std::int64_t> token;
    std::string type;                  // ok | fail | info (info also for an invoke that never completed)
    std::int64_t invoke_ns = 0;        // without an invoke event: the completion's time (see `invoked`)
    std::int64_t complete_ns = never;  // never: no completion was written
    bool invoked = true;               // false: no invoke was written (the renewer's renew, lost), so when the
                                       // operation began is unknown: checks that need it leave it out
    std::optional<std::int64_t> validity_ms;
    std::optional<std::int64_t> value;
    std::string error;

    [[nodiscard]] bool ok() const { return type == "ok"; }
    [[nodiscard]] bool completed() const { return complete_ns != never; }
    [[nodiscard]] std::string who() const { return fmt::format("{}(pid {}, thread {})", proc, pid, thread); }
};

using proc_key = std::tuple<std::string, std::int64_t, std::int64_t>;  // proc, pid, thread

struct ops_view {
    std::vector<op> ops;
    std::map<std::pair<std::string, std::int64_t>, std::int64_t> last_event_ns;  // (proc, pid) -> last sign of life
    std::int64_t end_ns = 0;                                                     // the last event of the history
};

// Jepsen's pairing: a completion belongs to the latest outstanding invoke of the same op and lock on the same
// (proc, pid, thread); an invoke left without completion is `info`, concurrent with everything after it; an event
// without invoke (`lost`, a completion whose invoke was not written) is an operation of its own instant.
ops_view pair_ops(std::vector<event> const& history) {
    std::vector<event const*> sorted;
    sorted.reserve(history.size());
    for (auto const& e : history) sorted.push_back(&e);
    std::stable_sort(sorted.begin(), sorted.end(), [](auto a, auto b) { return a->mono_ns < b->mono_ns; });

    ops_view v;
    std::map<proc_key, std::vector<op>> pending;
    auto fill = [](op& o, event const& e) {
        if (!e.owner.empty()) o.owner = e.owner;
        if (e.token) o.token = e.token;
        if (e.validity_ms) o.validity_ms = e.validity_ms;
        if (e.value) o.value = e.value;
        if (!e.error.empty()) o.error = e.error;
    };
    for (auto const* e : sorted) {
        auto& last = v.last_event_ns[{e->proc, e->pid}];
        last = std::max(last, e->mono_ns);
        v.end_ns = std::max(v.end_ns, e->mono_ns);
        proc_key key{e->proc, e->pid, e->thread};
        if (e->type == "invoke") {
            op o{e->proc, e->pid, e->thread, e->op, e->lock, {}, {}, "info", e->mono_ns};
            fill(o, *e);
            pending[key].push_back(std::move(o));
            continue;
        }
        auto& open = pending[key];
        auto it =
            std::find_if(open.rbegin(), open.rend(), [&](op const& o) { return o.name == e->op && o.lock == e->lock; });
        op o;
        if (it != open.rend()) {
            o = std::move(*it);
            open.erase(std::next(it).base());
        } else {
            o = op{e->proc, e->pid, e->thread, e->op, e->lock, {}, {}, {}, e->mono_ns};
            o.invoked = false;
        }
        o.type = e->type;
        o.complete_ns = e->mono_ns;
        fill(o, *e);
        v.ops.push_back(std::move(o));
    }
    for (auto& [key, open] : pending)
        for (auto& o : open) v.ops.push_back(std::move(o));
    return v;
}

bool is_acquire(op const& o) { return o.name == "acquire" || o.name == "try_acquire"; }

// ---- grants as the clients saw them (K2, K5) ---------------------------------------------------------------------

struct segment {
    std::int64_t start = 0;
    std::int64_t end = 0;
    std::size_t grant = 0;
};

struct grant {
    std::size_t acquire = 0;           // index into ops
    std::vector<std::size_t> later;    // renew/release/lost ops attached to it, in invoke order
    std::int64_t released_ns = never;  // the first release ok completed
    std::int64_t lost_ns = never;      // the first loss reported (lost, or a lease_lost renew/release)
    std::vector<segment> believed;     // known-held intervals (K2)
};

struct grants_view {
    std::vector<grant> grants;
    std::vector<std::size_t> orphans;  // renew/release/lost ops that match no grant of their process
};

// A renew, release or lost op belongs to the grant of the same process and lock that carries its token (the
// library's renewer thread may write it), else to the latest grant of the same thread acquired before it.
grants_view build_grants(ops_view const& v) {
    grants_view g;
    std::map<std::tuple<std::string, std::int64_t, std::string>, std::vector<std::size_t>> by_process_lock;
    std::vector<std::size_t> order(v.ops.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(),
                     [&](std::size_t a, std::size_t b) { return v.ops[a].complete_ns < v.ops[b].complete_ns; });
    for (auto i : order) {
        auto const& o = v.ops[i];
        if (!is_acquire(o) || !o.ok()) continue;
        by_process_lock[{o.proc, o.pid, o.lock}].push_back(g.grants.size());
        g.grants.push_back(grant{i});
    }
    std::vector<std::size_t> by_invoke(v.ops.size());
    for (std::size_t i = 0; i < by_invoke.size(); ++i) by_invoke[i] = i;
    std::stable_sort(by_invoke.begin(), by_invoke.end(),
                     [&](std::size_t a, std::size_t b) { return v.ops[a].invoke_ns < v.ops[b].invoke_ns; });
    for (auto i : by_invoke) {
        auto const& o = v.ops[i];
        if (o.name != "renew" && o.name != "release" && o.name != "lost") continue;
        auto it = by_process_lock.find({o.proc, o.pid, o.lock});
        std::optional<std::size_t> found;
        if (it != by_process_lock.end()) {
            std::int64_t const when = o.completed() ? o.complete_ns : o.invoke_ns;
            for (auto gi : it->second) {  // acquire-complete order: keep the latest that fits
                auto const& a = v.ops[g.grants[gi].acquire];
                if (a.complete_ns > when) break;
                bool const fits =
                    o.token ? (a.token == o.token && (o.owner.empty() || a.owner.empty() || o.owner == a.owner))
                            : a.thread == o.thread;
                if (fits) found = gi;
            }
        }
        if (!found) {
            g.orphans.push_back(i);
            continue;
        }
        auto& gr = g.grants[*found];
        gr.later.push_back(i);
        if (o.name == "release" && o.ok()) gr.released_ns = std::min(gr.released_ns, o.complete_ns);
        if (o.name == "lost") gr.lost_ns = std::min(gr.lost_ns, o.complete_ns);
        if ((o.name == "renew" || o.name == "release") && o.type == "fail" && is_loss(o.error))
            gr.lost_ns = std::min(gr.lost_ns, o.complete_ns);
    }

    // Known-held intervals: from ok(acquire) to ok.mono + validity_ms, extended by each renew ok invoked while the
    // belief lasted (a renew invoked after it ended opens a new interval at its ok), cut at the first release
    // invoke, `lost`, or lease_lost answer. A belief with no validity_ms recorded has no deadline: it ends at the
    // process's last event (a process killed while holding believes nothing afterwards).
    for (std::size_t gi = 0; gi < g.grants.size(); ++gi) {
        auto& gr = g.grants[gi];
        auto const& a = v.ops[gr.acquire];
        std::int64_t cut = never;
        for (auto i : gr.later) {
            auto const& o = v.ops[i];
            if (o.name == "release") cut = std::min(cut, o.invoke_ns);
            if (o.name == "lost") cut = std::min(cut, o.complete_ns);
            if (o.type == "fail" && is_loss(o.error)) cut = std::min(cut, o.complete_ns);
        }
        auto until = [](op const& x) { return x.validity_ms ? x.complete_ns + *x.validity_ms * 1'000'000 : never; };
        segment cur{a.complete_ns, until(a), gi};
        for (auto i : gr.later) {
            auto const& o = v.ops[i];
            if (o.name != "renew" || !o.ok() || o.invoke_ns >= cut) continue;
            if (o.invoke_ns < cur.end) {
                cur.end = std::max(cur.end, until(o));
            } else {
                gr.believed.push_back(cur);
                cur = segment{o.complete_ns, until(o), gi};
            }
        }
        gr.believed.push_back(cur);
        std::int64_t const last_sign_of_life = v.last_event_ns.at({a.proc, a.pid});
        std::erase_if(gr.believed, [&](segment& s) {
            s.end = std::min(s.end, cut);
            if (s.end == never) s.end = last_sign_of_life;
            return s.start >= s.end;
        });
    }
    return g;
}

bool same_grant(ops_view const& v, grants_view const& g, std::size_t x, std::size_t y) {
    if (x == y) return true;
    auto const& a = v.ops[g.grants[x].acquire];
    auto const& b = v.ops[g.grants[y].acquire];
    return a.token && b.token && *a.token == *b.token && a.owner == b.owner;  // one grant reported twice
}

}  // namespace

// ---------------------------------------------------------------------------------------------------------------
// K1 — lease intervals disjoint in database time
// ---------------------------------------------------------------------------------------------------------------

report k1_db_disjoint(std::vector<audit_row> const& audit) {
    report r{"K1"};
    std::int64_t grants = 0, takeovers = 0, renews = 0, releases = 0, expired_deletes = 0, clock_jumps = 0,
                 late_renews = 0, audit_gaps = 0, unknown_start = 0;
    std::map<std::string, std::vector<audit_row const*>> by_db;
    for (auto const& a : audit) {
        static std::set<std::string> const kinds{"grant", "takeover", "renew", "hold", "delete"};
        if (!kinds.contains(a.kind))
            throw std::invalid_argument(
                fmt::format("K1: audit row seq {} has kind '{}', not one of grant, takeover, "
                            "renew, hold, delete",
                            a.seq, a.kind));
        by_db[a.db].push_back(&a);
    }
    for (auto& [db, rows] : by_db) {
        std::stable_sort(rows.begin(), rows.end(), [](auto a, auto b) { return a->seq < b->seq; });
        std::string const where = db.empty() ? std::string() : fmt::format(" on db '{}'", db);
        struct row_state {
            bool present = false;
            std::string owner;
            std::int64_t token = 0;
            std::int64_t expires = 0;  // the row's expires_at as last written
        };
        std::map<std::string, row_state> locks;
        std::optional<std::int64_t> previous_time;
        for (auto const* a : rows) {
            if (previous_time && a->db_time_us < *previous_time) ++clock_jumps;
            previous_time = a->db_time_us;
            auto& st = locks[a->lock];
            auto describe = [&] {
                return fmt::format("lock '{}'{}: token {} (owner '{}', expires_at {})", a->lock, where, st.token,
                                   st.owner, st.expires);
            };
            if (a->kind == "grant" || a->kind == "takeover") {
                ++grants;
                if (a->kind == "takeover") ++takeovers;
                if (st.present) {
                    if (a->kind == "grant") ++audit_gaps;  // an insert over a row the audit never saw deleted
                    if (a->db_time_us < st.expires)
                        add(r, fmt::format("{} was taken over by token {} (owner '{}', seq {}) at db time {}, {} ms "
                                           "before its expiry: two leases at once in database time",
                                           describe(), a->token, a->owner, a->seq, a->db_time_us,
                                           ms_us(st.expires - a->db_time_us)));
                } else if (a->kind == "takeover") {
                    ++unknown_start;  // the audit began after the row was written
                }
                st = row_state{true, a->owner, a->token, a->expires_at_us};
            } else if (a->kind == "renew" || a->kind == "hold") {
                if (!st.present) {
                    ++unknown_start;
                    st = row_state{true, a->owner, a->token, a->expires_at_us};
                    continue;
                }
                if (a->token != st.token) {
                    ++audit_gaps;  // K7 reports the token change; here it counts as a takeover
                    if (a->db_time_us < st.expires)
                        add(r, fmt::format("{} changed to token {} (owner '{}', seq {}, kind {}) at db time {}, "
                                           "before its expiry",
                                           describe(), a->token, a->owner, a->seq, a->kind, a->db_time_us));
                    st = row_state{true, a->owner, a->token, a->expires_at_us};
                    continue;
                }
                if (a->kind == "renew") {
                    ++renews;
                    // The trigger reads the clock after the statement waited for the row lock; the renew's own
                    // condition used its statement time (MariaDB NOW(6)), which may still have been before the
                    // expiry. Counted, not judged: a takeover is judged against the expiry this renew wrote.
                    if (a->db_time_us >= st.expires) ++late_renews;
                }
                st.expires = a->expires_at_us;  // the row's expiry, whatever it extends: later takeovers compare to it
            } else {                            // delete
                if (!st.present) {
                    ++unknown_start;
                } else if (a->token != st.token || a->expires_at_us != st.expires) {
                    ++audit_gaps;
                }
                if (a->db_time_us < a->expires_at_us) {
                    ++releases;
                } else {
                    ++expired_deletes;
                }
                st = row_state{};
            }
        }
    }
    r.counts = {{"grants", grants},
                {"takeovers", takeovers},
                {"renews", renews},
                {"releases", releases},
                {"expired_deletes", expired_deletes},
                {"clock_jumps", clock_jumps},
                {"late_renews", late_renews},
                {"audit_gaps", audit_gaps},
                {"unknown_start", unknown_start}};
    return r;
}

// ---------------------------------------------------------------------------------------------------------------
// K2 — client-belief overlap
// ---------------------------------------------------------------------------------------------------------------

report k2_belief_overlap(std::vector<event> const& history, bool expect_zero) {
    report r{"K2"};
    auto v = pair_ops(history);
    auto g = build_grants(v);
    std::map<std::string, std::vector<segment>> by_lock;
    for (auto const& gr : g.grants)
        for (auto const& s : gr.believed) by_lock[v.ops[gr.acquire].lock].push_back(s);

    std::int64_t overlaps = 0, overlap_max_ns = 0, covered = 0, segments = 0;
    auto name = [&](std::size_t gi) {
        auto const& a = v.ops[g.grants[gi].acquire];
        return fmt::format("{} token {} (acquired ok at {})", a.who(), tok(a.token), a.complete_ns);
    };
    for (auto& [lock, segs] : by_lock) {
        segments += static_cast<std::int64_t>(segs.size());
        std::sort(segs.begin(), segs.end(), [](auto const& a, auto const& b) { return a.start < b.start; });
        std::vector<segment> active;
        for (auto const& s : segs) {
            std::erase_if(active, [&](segment const& a) { return a.end <= s.start; });
            for (auto const& a : active) {
                if (same_grant(v, g, a.grant, s.grant)) continue;
                std::int64_t const length = std::min(a.end, s.end) - s.start;
                ++overlaps;
                overlap_max_ns = std::max(overlap_max_ns, length);
                if (expect_zero)
                    add(r, fmt::format("lock '{}': {} and {} both believed they held it for {} ms from mono {}", lock,
                                       name(a.grant), name(s.grant), ms(length), s.start));
            }
            active.push_back(s);
        }
        // atlasdb's LockCorrectness: a granted acquire had a moment in [invoke, ok] when no one else was known to
        // hold the lock. Intervals are merged only where they overlap, so one's own belief, starting at its ok,
        // never joins the others'.
        std::vector<segment> merged;
        for (auto const& s : segs) {
            if (!merged.empty() && s.start < merged.back().end) {
                merged.back().end = std::max(merged.back().end, s.end);
            } else {
                merged.push_back(s);
            }
        }
        for (auto const& gr : g.grants) {
            auto const& a = v.ops[gr.acquire];
            if (a.lock != lock || !a.invoked) continue;
            auto it = std::upper_bound(merged.begin(), merged.end(), a.invoke_ns,
                                       [](std::int64_t t, segment const& m) { return t < m.start; });
            if (it == merged.begin()) continue;
            --it;
            if (it->end > a.complete_ns) {
                ++covered;
                if (expect_zero)
                    add(r, fmt::format("lock '{}': {} was granted while others held it throughout its acquire "
                                       "window [{}, {}] (held from {} to {})",
                                       lock, name(static_cast<std::size_t>(&gr - g.grants.data())), a.invoke_ns,
                                       a.complete_ns, it->start, it->end));
            }
        }
    }
    r.counts = {{"grants", static_cast<std::int64_t>(g.grants.size())},
                {"intervals", segments},
                {"overlaps", overlaps},
                {"overlap_max_ms", ms_ceil(overlap_max_ns)},
                {"covered_windows", covered}};
    return r;
}

// ---------------------------------------------------------------------------------------------------------------
// K3 — fencing
// ---------------------------------------------------------------------------------------------------------------

namespace {

// Ops whose token must never fall below one that completed before they were invoked (real-time order, so two
// concurrent ops are never ordered by when their completions happened to be written).
template <class Report>
void check_real_time_increase(std::vector<op const*> ops, bool strict, Report&& bad) {
    std::vector<op const*> by_complete = ops;
    std::sort(by_complete.begin(), by_complete.end(), [](auto a, auto b) { return a->complete_ns < b->complete_ns; });
    std::sort(ops.begin(), ops.end(), [](auto a, auto b) { return a->invoke_ns < b->invoke_ns; });
    std::size_t next = 0;
    op const* highest = nullptr;
    for (auto const* b : ops) {
        while (next < by_complete.size() && by_complete[next]->complete_ns < b->invoke_ns) {
            auto const* a = by_complete[next++];
            if (highest == nullptr || *a->token > *highest->token) highest = a;
        }
        if (!b->invoked) continue;  // it may have begun before any of them completed
        if (highest != nullptr && (strict ? *b->token <= *highest->token : *b->token < *highest->token))
            bad(*highest, *b);
    }
}

}  // namespace

report k3_fenced(std::vector<event> const& history) {
    report r{"K3"};
    auto v = pair_ops(history);
    std::map<std::string, std::vector<op const*>> accepted;
    std::int64_t n_accepted = 0, rejected = 0, info = 0, untokened = 0, stale = 0;
    for (auto const& o : v.ops) {
        if (o.name != "write_fenced") continue;
        if (o.type == "fail") {
            ++rejected;
        } else if (o.type == "info") {
            ++info;
        } else if (o.ok()) {
            ++n_accepted;
            if (!o.token) {
                ++untokened;
                add(r, fmt::format("lock '{}': {} wrote to the fenced resource at {} without a token", o.lock, o.who(),
                                   o.complete_ns));
                continue;
            }
            accepted[o.lock].push_back(&o);
        }
    }
    for (auto& [lock, ops] : accepted) {
        check_real_time_increase(ops, /*strict=*/false, [&, &lock = lock](op const& high, op const& b) {
            ++stale;
            add(r, fmt::format("lock '{}': the resource accepted {}'s write with token {} (invoked at {}) after it "
                               "had accepted token {} from {} (ok at {}): a stale holder's write got through",
                               lock, b.who(), *b.token, b.invoke_ns, *high.token, high.who(), high.complete_ns));
        });
    }
    r.counts = {{"accepted", n_accepted},
                {"rejected", rejected},
                {"info", info},
                {"stale_accepted", stale},
                {"untokened", untokened}};
    return r;
}

// ---------------------------------------------------------------------------------------------------------------
// K4 — lost updates on the unfenced counter
// ---------------------------------------------------------------------------------------------------------------

report k4_counter(std::vector<event> const& history, std::map<std::string, std::int64_t> const& final_values) {
    report r{"K4"};
    auto v = pair_ops(history);
    struct per_lock {
        std::int64_t ok = 0, maybe = 0;
        std::map<std::int64_t, std::vector<op const*>> values;
    };
    std::map<std::string, per_lock> locks;
    for (auto const& [lock, value] : final_values) locks[lock];
    std::int64_t total_ok = 0, total_maybe = 0, duplicates = 0;
    for (auto const& o : v.ops) {
        if (o.name != "write_unfenced") continue;
        auto& l = locks[o.lock];
        if (o.ok()) {
            ++l.ok;
            ++total_ok;
            if (o.value) l.values[*o.value].push_back(&o);
        } else if (o.type == "info") {
            ++l.maybe;  // the write may have happened (killed before its ok was written)
            ++total_maybe;
        }
    }
    for (auto const& [lock, l] : locks) {
        for (auto const& [value, writers] : l.values) {
            if (writers.size() < 2) continue;
            ++duplicates;
            std::string who;
            for (auto const* w : writers)
                who += fmt::format("{}{} at {}", who.empty() ? "" : ", ", w->who(), w->complete_ns);
            add(r, fmt::format("lock '{}': {} critical sections wrote the same counter value {} ({}): a lost update",
                               lock, writers.size(), value, who));
        }
        auto it = final_values.find(lock);
        if (it == final_values.end()) {
            add(r, fmt::format("lock '{}': {} completed unfenced writes but no final counter value (final.json "
                               "\"counters\" must list every lock the run wrote)",
                               lock, l.ok));
            continue;
        }
        if (it->second < l.ok)
            add(r, fmt::format("lock '{}': the counter ends at {} but {} critical sections completed: {} lost "
                               "update(s)",
                               lock, it->second, l.ok, l.ok - it->second));
        else if (it->second > l.ok + l.maybe)
            add(r, fmt::format("lock '{}': the counter ends at {} but only {} critical sections completed and {} "
                               "may have: writes nobody made",
                               lock, it->second, l.ok, l.maybe));
    }
    r.counts = {{"locks", static_cast<std::int64_t>(locks.size())},
                {"completed", total_ok},
                {"indeterminate", total_maybe},
                {"duplicate_values", duplicates}};
    return r;
}

// ---------------------------------------------------------------------------------------------------------------
// K5 — per-process API sequencing
// ---------------------------------------------------------------------------------------------------------------

report k5_sequencing(std::vector<event> const& history) {
    report r{"K5"};
    auto v = pair_ops(history);
    auto g = build_grants(v);
    std::int64_t renew_ok = 0, release_ok = 0, double_release = 0, losses = 0;
    for (auto i : g.orphans) {
        auto const& o = v.ops[i];
        if (!o.ok() || o.name == "lost") continue;  // a failed call by a non-holder is what should happen
        add(r, fmt::format("lock '{}': {} got {} ok (token {}, at {}) without holding a grant: no acquire ok of that "
                           "lock{} in this process before it",
                           o.lock, o.who(), o.name, tok(o.token), o.complete_ns,
                           o.token ? " and token" : " on this thread"));
    }
    for (auto const& gr : g.grants) {
        auto const& a = v.ops[gr.acquire];
        if (gr.lost_ns != never) ++losses;
        std::int64_t first_release = never;  // the first release ok of this grant
        for (auto i : gr.later) {
            auto const& o = v.ops[i];
            if (!o.ok() || o.name == "lost") continue;
            (o.name == "renew" ? renew_ok : release_ok) += 1;
            if (!o.invoked) {
                // the renewer's report: when it began is unknown, so it is not ordered against the release or loss
            } else if (first_release != never && first_release < o.invoke_ns) {
                if (o.name == "release") {
                    ++double_release;  // release() is idempotent: the second call does nothing
                } else {
                    add(r, fmt::format("lock '{}': {} renewed token {} (ok at {}) after releasing it (ok at {})",
                                       o.lock, o.who(), tok(a.token), o.complete_ns, first_release));
                }
            } else if (gr.lost_ns < o.invoke_ns) {
                add(r, fmt::format("lock '{}': {} got {} ok for token {} (invoked at {}) after the loss of that "
                                   "lease was reported at {}",
                                   o.lock, o.who(), o.name, tok(a.token), o.invoke_ns, gr.lost_ns));
            }
            if (o.name == "release") first_release = std::min(first_release, o.complete_ns);
        }
    }
    // One thread never holds two grants of one lock at once: each grant ends (release ok, loss, or the end of the
    // belief the library reported) before the same thread's next acquire of that lock is invoked.
    std::map<std::tuple<std::string, std::int64_t, std::int64_t, std::string>, std::vector<grant const*>> per_thread;
    for (auto const& gr : g.grants) {
        auto const& a = v.ops[gr.acquire];
        per_thread[{a.proc, a.pid, a.thread, a.lock}].push_back(&gr);
    }
    for (auto const& [key, list] : per_thread) {
        for (std::size_t k = 1; k < list.size(); ++k) {
            auto const& prev = *list[k - 1];
            auto const& a = v.ops[list[k]->acquire];
            std::int64_t end = std::min(prev.released_ns, prev.lost_ns);
            std::int64_t believed = v.ops[prev.acquire].complete_ns;
            for (auto const& s : prev.believed) believed = std::max(believed, s.end);
            end = std::min(end, believed);
            if (end > a.invoke_ns)
                add(r, fmt::format("lock '{}': {} got acquire ok twice without a release or loss between: token {} "
                                   "(ok at {}) still held when token {} was invoked at {}",
                                   a.lock, a.who(), tok(v.ops[prev.acquire].token), v.ops[prev.acquire].complete_ns,
                                   tok(a.token), a.invoke_ns));
        }
    }
    r.counts = {{"grants", static_cast<std::int64_t>(g.grants.size())},
                {"renew_ok", renew_ok},
                {"release_ok", release_ok},
                {"double_release", double_release},
                {"losses", losses}};
    return r;
}

// ---------------------------------------------------------------------------------------------------------------
// K6 — availability after faults
// ---------------------------------------------------------------------------------------------------------------

report k6_availability(std::vector<event> const& history, std::vector<nemesis_event> const& nemesis,
                       std::int64_t bound_ms) {
    report r{"K6"};
    auto v = pair_ops(history);
    std::map<std::string, std::vector<op const*>> acquires;  // per lock
    std::map<std::string, std::vector<std::int64_t>> granted;
    for (auto const& o : v.ops) {
        if (!is_acquire(o)) continue;
        acquires[o.lock].push_back(&o);
        if (o.ok()) granted[o.lock].push_back(o.complete_ns);
    }
    for (auto& [lock, times] : granted) std::sort(times.begin(), times.end());
    std::int64_t const bound_ns = bound_ms * 1'000'000;
    std::int64_t ended = 0, checked = 0, undecided = 0, gave_up = 0, max_gap = 0;
    for (auto const& f : nemesis) {
        if (f.phase != "stop" && f.phase != "instant") continue;
        ++ended;
        std::int64_t const t = f.mono_ns;
        for (auto const& [lock, list] : acquires) {
            // A waiter at `when`: an acquire invoked by then and not yet answered, by a process alive afterwards.
            // (Structured bindings are captured by name: Clang 14 cannot capture them implicitly.)
            auto waiting_at = [&, &list = list](std::int64_t when) {
                std::int64_t n = 0;
                for (auto const* o : list) {
                    if (o->invoke_ns > when || o->complete_ns <= when) continue;
                    if (o->completed() || v.last_event_ns.at({o->proc, o->pid}) > when) ++n;
                }
                return n;
            };
            std::int64_t const waiters = waiting_at(t);
            if (waiters == 0) continue;
            ++checked;
            auto const& times = granted[lock];
            auto next = std::lower_bound(times.begin(), times.end(), t);
            if (next != times.end()) max_gap = std::max(max_gap, *next - t);
            if (next != times.end() && *next - t <= bound_ns) continue;
            if (v.end_ns < t + bound_ns) {
                ++undecided;  // the history ends before the bound: no evidence either way
                continue;
            }
            // Late or never: a liveness failure only if someone still waited when the bound ran out; waiters that
            // gave up (their own timeout) and were not replaced asked nothing of the lock then.
            std::int64_t const still = waiting_at(t + bound_ns);
            if (still == 0) {
                ++gave_up;
                continue;
            }
            std::string const fault = fmt::format("{} {} of {}", f.fault, f.phase, f.target);
            if (next == times.end())
                add(r, fmt::format("lock '{}': no acquire succeeded after the {} at {}, though {} acquire(s) still "
                                   "waited when the bound of {} ms ran out; the history goes on for {} ms",
                                   lock, fault, t, still, bound_ms, ms(v.end_ns - t)));
            else
                add(r, fmt::format("lock '{}': the first acquire after the {} at {} succeeded {} ms later, over the "
                                   "bound of {} ms, with {} acquire(s) still waiting when the bound ran out",
                                   lock, fault, t, ms(*next - t), bound_ms, still));
        }
    }
    r.counts = {{"faults_ended", ended}, {"waits_checked", checked},       {"undecided", undecided},
                {"gave_up", gave_up},    {"max_gap_ms", ms_ceil(max_gap)}, {"bound_ms", bound_ms}};
    return r;
}

// ---------------------------------------------------------------------------------------------------------------
// K7 — token monotonicity in grant order
// ---------------------------------------------------------------------------------------------------------------

report k7_tokens(std::vector<audit_row> const& audit, std::vector<event> const& history) {
    report r{"K7"};
    std::int64_t grants = 0, checked_rows = 0;
    if (!audit.empty()) {
        std::map<std::pair<std::string, std::string>, std::vector<audit_row const*>> per_lock;  // (db, lock)
        for (auto const& a : audit) per_lock[{a.db, a.lock}].push_back(&a);
        for (auto& [key, rows] : per_lock) {
            std::stable_sort(rows.begin(), rows.end(), [](auto a, auto b) { return a->seq < b->seq; });
            std::string const where = key.first.empty() ? std::string() : fmt::format(" on db '{}'", key.first);
            std::optional<std::int64_t> highest, current;
            audit_row const* highest_row = nullptr;
            for (auto const* a : rows) {
                ++checked_rows;
                if (a->kind == "grant" || a->kind == "takeover") {
                    ++grants;
                    if (highest && a->token <= *highest)
                        add(r, fmt::format("lock '{}'{}: token {} granted (seq {}, {}) after token {} (seq {}): tokens "
                                           "must strictly increase across grants, releases, reaps and restarts",
                                           key.second, where, a->token, a->seq, a->kind, *highest, highest_row->seq));
                    if (!highest || a->token > *highest) {
                        highest = a->token;
                        highest_row = a;
                    }
                    current = a->token;
                } else {
                    if (current && a->token != *current)
                        add(r, fmt::format("lock '{}'{}: a {} row (seq {}) carries token {}, but the grant it belongs "
                                           "to has token {}",
                                           key.second, where, a->kind, a->seq, a->token, *current));
                    current = a->kind == "delete" ? std::nullopt : std::optional<std::int64_t>(a->token);
                }
            }
        }
        r.counts = {{"grants", grants}, {"audit_rows", checked_rows}, {"from_history", 0}};
        return r;
    }
    // No audit: acquire ok events, each compared only with those that completed before it was invoked.
    auto v = pair_ops(history);
    std::map<std::string, std::vector<op const*>> per_lock;
    for (auto const& o : v.ops)
        if (is_acquire(o) && o.ok() && o.token) per_lock[o.lock].push_back(&o);
    for (auto& [lock, ops] : per_lock) {
        grants += static_cast<std::int64_t>(ops.size());
        check_real_time_increase(ops, /*strict=*/true, [&, &lock = lock](op const& high, op const& b) {
            add(r, fmt::format("lock '{}': {} was granted token {} (invoked at {}) after {} had been granted token {} "
                               "(ok at {})",
                               lock, b.who(), *b.token, b.invoke_ns, high.who(), *high.token, high.complete_ns));
        });
    }
    r.counts = {{"grants", grants}, {"audit_rows", 0}, {"from_history", 1}};
    return r;
}

// ---------------------------------------------------------------------------------------------------------------
// K8 — the lock table after quiescence
// ---------------------------------------------------------------------------------------------------------------

report k8_leftovers(std::vector<audit_row> const& remaining, std::vector<std::string> const& live_owners) {
    report r{"K8"};
    std::set<std::string> const live(live_owners.begin(), live_owners.end());
    std::map<std::pair<std::string, std::string>, std::int64_t> seen;
    std::int64_t expired = 0, live_rows = 0;
    for (auto const& row : remaining) {
        std::string const where = row.db.empty() ? std::string() : fmt::format(" on db '{}'", row.db);
        if (++seen[{row.db, row.lock}] == 2)
            add(r, fmt::format("lock '{}'{} has more than one row in the lock table", row.lock, where));
        if (row.expires_at_us <= row.db_time_us) {
            ++expired;
        } else if (live.contains(row.owner)) {
            ++live_rows;
        } else {
            add(r, fmt::format("lock '{}'{}: a row of owner '{}' (token {}) is still valid for {} ms after every "
                               "worker stopped, and no live holder owns it: an orphaned lease",
                               row.lock, where, row.owner, row.token, ms_us(row.expires_at_us - row.db_time_us)));
        }
    }
    r.counts = {{"rows", static_cast<std::int64_t>(remaining.size())}, {"expired", expired}, {"live", live_rows}};
    return r;
}

// ---------------------------------------------------------------------------------------------------------------
// K9 — typed errors only
// ---------------------------------------------------------------------------------------------------------------

namespace {

// A raw engine error in a message. The engines' texts match anywhere, case-insensitively. The codes match as
// whole words: the SQLSTATEs with a letter (40P01, 55P03) alone; the bare numbers (40001, 1205, 1213) only in
// parentheses or brackets or after "sqlstate", "error", "errno" or "code", so that a wait of 1205 ms, a lock
// named "job-1213" or a port ":40001" is not taken for one.
std::optional<std::string> raw_engine_error(std::string const& message) {
    std::string lower(message);
    std::transform(lower.begin(), lower.end(), lower.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    static char const* const texts[] = {"sqlite_busy",
                                        "database is locked",
                                        "could not serialize access",
                                        "deadlock",
                                        "lock wait timeout exceeded",
                                        "could not obtain lock",
                                        "canceling statement due to lock timeout"};
    for (auto const* t : texts)
        if (lower.find(t) != std::string::npos) return std::string(t);
    auto word_char = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_'; };
    struct code_rule {
        std::string_view code;
        bool alone;  // distinctive enough without context
    };
    static code_rule const codes[] = {
        {"40p01", true}, {"55p03", true}, {"40001", false}, {"1205", false}, {"1213", false}};
    for (auto const& [code, alone] : codes) {
        for (auto p = lower.find(code); p != std::string::npos; p = lower.find(code, p + 1)) {
            char const before = p == 0 ? ' ' : lower[p - 1];
            char const after = p + code.size() < lower.size() ? lower[p + code.size()] : ' ';
            if (word_char(before) || before == '.' || before == ':' || word_char(after) || after == '.') continue;
            bool raw = alone || (before == '(' && after == ')') || (before == '[' && after == ']');
            if (!raw) {
                auto head = std::string_view(lower).substr(0, p);
                while (!head.empty() && std::string_view(" :=#").find(head.back()) != std::string_view::npos)
                    head.remove_suffix(1);
                for (std::string_view marker : {"sqlstate", "error", "errno", "code"})
                    raw = raw || head.ends_with(marker);
            }
            if (raw) return std::string(code);
        }
    }
    return std::nullopt;
}

}  // namespace

report k9_typed_errors(std::vector<event> const& history) {
    report r{"K9"};
    static std::set<std::string> const typed{"timeout",    "cancelled",      "stale_token",
                                             "lease_lost", "schema_missing", "backend_unavailable",
                                             "in_doubt",   "usage_error",    "busy"};
    std::int64_t errors = 0;
    for (auto const& e : history) {
        if (e.type != "fail" && e.type != "info") continue;
        ++errors;
        auto const where = fmt::format("{}(pid {}, thread {}) {} {} of lock '{}' at {}", e.proc, e.pid, e.thread, e.op,
                                       e.type, e.lock, e.mono_ns);
        if (e.error.empty()) {
            add(r, where + " carries no error: every fail/info must say which typed error the library reported");
            continue;
        }
        auto const type = error_type(e.error);
        r.counts[type.empty() ? "untyped" : type] += 1;
        if (!typed.contains(type)) {
            add(r, fmt::format("{} surfaced an error that is not one of the library's typed outcomes: \"{}\"", where,
                               e.error));
        } else if (auto raw = raw_engine_error(e.error)) {
            add(r, fmt::format("{} carries a raw engine error ({}) in \"{}\"", where, *raw, e.error));
        }
    }
    r.counts["errors"] = errors;
    return r;
}

// ---------------------------------------------------------------------------------------------------------------
// The replay of a run's directory
// ---------------------------------------------------------------------------------------------------------------

std::vector<report> check_directory(std::string const& dir) {
    namespace fs = std::filesystem;
    std::error_code ec;
    if (!fs::is_directory(dir, ec))
        throw std::invalid_argument("check_directory: " + dir +
                                    " is not a directory (give the run directory a "
                                    "failed test printed)");
    std::vector<std::string> histories, audits, nemeses, remainders, definitions_paths;
    std::optional<std::string> final_path;
    for (auto const& entry : fs::directory_iterator(dir)) {
        if (!entry.is_regular_file()) continue;
        auto const name = entry.path().filename().string();
        auto matches = [&](std::string_view prefix) { return name.starts_with(prefix) && name.ends_with(".jsonl"); };
        if (matches("history")) histories.push_back(entry.path().string());
        else if (matches("audit")) audits.push_back(entry.path().string());
        else if (matches("nemesis")) nemeses.push_back(entry.path().string());
        else if (matches("remaining")) remainders.push_back(entry.path().string());
        else if (matches("definitions")) definitions_paths.push_back(entry.path().string());
        else if (name == "final.json") final_path = entry.path().string();
    }
    if (histories.empty() && audits.empty())
        throw std::invalid_argument("check_directory: " + dir + " holds no history*.jsonl and no audit*.jsonl");
    std::sort(histories.begin(), histories.end());
    std::sort(audits.begin(), audits.end());
    std::sort(nemeses.begin(), nemeses.end());

    std::vector<event> history;
    for (auto const& p : histories) {
        auto h = read_history(p);
        history.insert(history.end(), std::make_move_iterator(h.begin()), std::make_move_iterator(h.end()));
    }
    std::vector<audit_row> audit;
    for (auto const& p : audits) {
        auto a = read_audit(p);
        audit.insert(audit.end(), a.begin(), a.end());
    }
    std::vector<audit_row> definitions;  // coord_checkers.hpp: a semaphore's N as stored, forgotten, stored anew
    for (auto const& p : definitions_paths) {
        auto d = read_audit(p);
        definitions.insert(definitions.end(), d.begin(), d.end());
    }
    std::vector<nemesis_event> nemesis;
    for (auto const& p : nemeses) {
        auto n = read_nemesis(p);
        nemesis.insert(nemesis.end(), n.begin(), n.end());
    }
    run_final final_state = final_path ? read_final(*final_path) : run_final{};
    std::sort(remainders.begin(), remainders.end());
    for (auto const& p : remainders) {
        auto rows = read_audit(p);
        final_state.remaining.insert(final_state.remaining.end(), rows.begin(), rows.end());
        final_state.has_remaining = true;
    }
    auto asserted = [&](std::string const& checker) {
        return !final_state.asserted || std::find(final_state.asserted->begin(), final_state.asserted->end(),
                                                  checker) != final_state.asserted->end();
    };
    bool const k2_expect_zero = final_state.asserted ? asserted("K2") : final_state.k2_expect_zero;

    auto has_op = [&](std::string_view op) {
        return std::any_of(history.begin(), history.end(), [&](event const& e) { return e.op == op; });
    };
    std::vector<report> reports;
    if (!audit.empty()) reports.push_back(k1_db_disjoint(audit));
    if (!history.empty()) reports.push_back(k2_belief_overlap(history, k2_expect_zero));
    if (has_op("write_fenced")) reports.push_back(k3_fenced(history));
    if (has_op("write_unfenced") || !final_state.counters.empty())
        reports.push_back(k4_counter(history, final_state.counters));
    if (!history.empty()) reports.push_back(k5_sequencing(history));
    if (!nemeses.empty() && final_state.k6_bound_ms)
        reports.push_back(k6_availability(history, nemesis, *final_state.k6_bound_ms));
    reports.push_back(k7_tokens(audit, history));
    if (final_state.has_remaining) reports.push_back(k8_leftovers(final_state.remaining, final_state.live_owners));
    if (!history.empty()) reports.push_back(k9_typed_errors(history));
    for (auto& r : reports) r.asserted = asserted(r.checker);
    if (final_state.coordination)
        for (auto& r : coordination_reports(coordination_from_json(*final_state.coordination), audit, history, nemesis,
                                            final_state.realtime_minus_mono_ns, definitions))
            reports.push_back(std::move(r));  // asserted, as the run asserted them
    return reports;
}

}  // namespace sqlock_battery
