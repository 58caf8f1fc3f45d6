// sqlock reliability battery — checkers for semaphores, read-write locks and elections (coord_checkers.hpp).
#include "coord_checkers.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <optional>
#include <set>
#include <stdexcept>
#include <tuple>
#include <utility>

namespace sqlock_battery {

namespace {

constexpr char unit_separator = '\x1f';
constexpr std::int64_t never = std::numeric_limits<std::int64_t>::max();

void add(report& r, std::string what) { r.violations.push_back({r.checker, std::move(what)}); }

// Names in messages: U+001F shown as '|'.
std::string shown(std::string s) {
    std::replace(s.begin(), s.end(), unit_separator, '|');
    return s;
}

double ms_us(std::int64_t us) { return static_cast<double>(us) / 1e3; }

std::string where_db(std::string const& db) { return db.empty() ? std::string() : fmt::format(" on db '{}'", db); }

}  // namespace

coord_name split_coord_name(std::string const& lock) {
    coord_name n;
    auto const first = lock.find(unit_separator);
    if (first == std::string::npos || first + 2 >= lock.size() || lock[first + 2] != unit_separator) {
        n.base = lock;
        return n;
    }
    n.base = lock.substr(0, first);
    n.kind = lock[first + 1];
    n.suffix = lock.substr(first + 3);
    return n;
}

std::vector<lease_interval> audit_intervals(std::vector<audit_row> const& audit) {
    std::map<std::string, std::vector<audit_row const*>> by_db;
    for (auto const& a : audit) by_db[a.db].push_back(&a);
    std::vector<lease_interval> out;
    for (auto& [db, rows] : by_db) {
        std::stable_sort(rows.begin(), rows.end(), [](auto a, auto b) { return a->seq < b->seq; });
        std::map<std::string, lease_interval> open;  // lock -> its current lease (end_us: the expiry so far)
        auto close = [&](std::string const& lock) {
            if (auto it = open.find(lock); it != open.end()) {
                out.push_back(it->second);
                open.erase(it);
            }
        };
        for (auto const* a : rows) {
            auto it = open.find(a->lock);
            bool const same = it != open.end() && it->second.token == a->token;
            if (a->kind == "grant" || a->kind == "takeover" || ((a->kind == "renew" || a->kind == "hold") && !same)) {
                close(a->lock);  // ends at its expiry as last written (K1 judges a takeover before it)
                open[a->lock] =
                    lease_interval{db, a->lock, a->owner, a->token, a->db_time_us, a->expires_at_us, a->seq};
            } else if (a->kind == "renew" || a->kind == "hold") {
                it->second.end_us = a->expires_at_us;
            } else if (a->kind == "delete") {
                if (it == open.end()) continue;  // a row first seen at its delete: no interval to speak of
                it->second.end_us = std::min(it->second.end_us, a->db_time_us);
                close(a->lock);
            }
        }
        for (auto& [lock, iv] : open) out.push_back(iv);
    }
    std::stable_sort(out.begin(), out.end(),
                     [](auto const& a, auto const& b) { return std::tie(a.db, a.seq) < std::tie(b.db, b.seq); });
    return out;
}

// ---------------------------------------------------------------------------------------------------------------
// K1-permits
// ---------------------------------------------------------------------------------------------------------------

report k1_permits(std::vector<audit_row> const& audit, std::map<std::string, int> const& permits, int default_permits) {
    report r{"K1-permits"};
    std::map<std::pair<std::string, std::string>, std::vector<lease_interval>> per_sem;  // (db, base)
    std::int64_t granted = 0, max_holders = 0;
    for (auto& iv : audit_intervals(audit)) {
        auto n = split_coord_name(iv.lock);
        if (n.kind != 'p') continue;
        ++granted;
        per_sem[{iv.db, n.base}].push_back(std::move(iv));
    }
    for (auto& [key, ivs] : per_sem) {
        auto const& [db, base] = key;
        auto const pit = permits.find(base);
        int const limit = pit == permits.end() ? default_permits : pit->second;
        std::set<std::string> bad_slots;
        for (auto const& iv : ivs) {
            auto const slot = split_coord_name(iv.lock).suffix;
            bool numeric =
                !slot.empty() && std::all_of(slot.begin(), slot.end(), [](char c) { return c >= '0' && c <= '9'; });
            if ((!numeric || slot.size() > 6 || std::stoi(slot) >= limit) && bad_slots.insert(slot).second)
                add(r,
                    fmt::format("semaphore '{}'{}: permit slot '{}' was granted (token {}, owner '{}'), but the "
                                "semaphore has {} permits (slots 0 .. {})",
                                shown(base), where_db(db), shown(slot), iv.token, shown(iv.owner), limit, limit - 1));
        }
        // The sweep: ends before starts at one instant ([start, end) intervals).
        std::vector<std::tuple<std::int64_t, int, std::size_t>> edges;
        for (std::size_t i = 0; i < ivs.size(); ++i) {
            if (ivs[i].end_us <= ivs[i].start_us) continue;
            edges.emplace_back(ivs[i].start_us, 1, i);
            edges.emplace_back(ivs[i].end_us, 0, i);
        }
        std::sort(edges.begin(), edges.end());
        std::set<std::size_t> active;
        bool over = false;
        int reported = 0;
        for (auto const& [t, starts, i] : edges) {
            if (starts == 0) {
                active.erase(i);
                if (static_cast<int>(active.size()) <= limit) over = false;
                continue;
            }
            active.insert(i);
            max_holders = std::max<std::int64_t>(max_holders, static_cast<std::int64_t>(active.size()));
            if (static_cast<int>(active.size()) <= limit || over) continue;
            over = true;  // one report per excursion above N
            if (++reported > 5) continue;
            std::string who;
            for (auto j : active)
                who += fmt::format("{}slot {} token {} owner '{}' [{}, {})", who.empty() ? "" : "; ",
                                   shown(split_coord_name(ivs[j].lock).suffix), ivs[j].token, shown(ivs[j].owner),
                                   ivs[j].start_us, ivs[j].end_us);
            add(r, fmt::format("semaphore '{}'{}: {} permits held at once at db time {}, above its {} permits: {}",
                               shown(base), where_db(db), active.size(), t, limit, who));
        }
    }
    r.counts = {{"semaphores", static_cast<std::int64_t>(per_sem.size())},
                {"permits_granted", granted},
                {"max_holders", max_holders}};
    return r;
}

// ---------------------------------------------------------------------------------------------------------------
// K-rw
// ---------------------------------------------------------------------------------------------------------------

report k_rw_exclusion(std::vector<audit_row> const& audit, std::vector<event> const& history,
                      std::int64_t realtime_minus_mono_ns, std::int64_t slack_ms) {
    report r{"K-rw"};
    auto const ivs = audit_intervals(audit);
    struct reader {
        lease_interval const* row;
        std::int64_t start_us;  // its grant of X's lock
    };
    std::map<std::pair<std::string, std::string>, std::vector<reader>> readers;  // (db, base)
    std::set<std::tuple<std::string, std::string, std::int64_t>> reader_tokens;  // (db, base, token)
    std::map<std::tuple<std::string, std::string, std::int64_t>, lease_interval const*> plain;
    for (auto const& iv : ivs) {
        auto n = split_coord_name(iv.lock);
        if (n.kind == 0) plain[{iv.db, iv.lock, iv.token}] = &iv;
    }
    for (auto const& iv : ivs) {
        auto n = split_coord_name(iv.lock);
        if (n.kind != 'r') continue;
        reader_tokens.insert({iv.db, n.base, iv.token});
        auto it = plain.find({iv.db, n.base, iv.token});
        readers[{iv.db, n.base}].push_back({&iv, it == plain.end() ? iv.start_us : it->second->start_us});
    }
    // The writers' acquire ok on the raw monotonic clock, by (lock, token): the first one logged.
    std::map<std::pair<std::string, std::int64_t>, std::int64_t> writer_ok;
    for (auto const& e : history)
        if (e.op == "acquire" && e.type == "ok" && e.token && !e.value) {
            auto [it, fresh] = writer_ok.try_emplace({e.lock, *e.token}, e.mono_ns);
            if (!fresh) it->second = std::min(it->second, e.mono_ns);
        }
    std::int64_t const slack_us = slack_ms * 1000;
    std::int64_t writers = 0, unmatched = 0, reads = 0, max_readers = 0;
    std::map<std::pair<std::string, std::string>, std::vector<lease_interval const*>> writes;
    for (auto const& [key, iv] : plain) {
        auto const& [db, lock, token] = key;
        if (reader_tokens.contains({db, lock, token})) continue;  // a reader's grant of X, renamed
        ++writers;
        writes[{db, lock}].push_back(iv);
        auto ok = writer_ok.find({lock, token});
        if (ok == writer_ok.end()) {
            ++unmatched;  // its acquire never logged ok (killed, or lost before returning): no exclusive part known
            continue;
        }
        std::int64_t const returned_us = (ok->second + realtime_minus_mono_ns) / 1000;
        std::int64_t const from = std::max(iv->start_us, returned_us);
        if (from >= iv->end_us) continue;  // returned after its lease had ended: held nothing exclusive
        if (auto rit = readers.find({db, lock}); rit != readers.end())
            for (auto const& rd : rit->second)
                if (rd.start_us < iv->end_us && rd.row->end_us > from + slack_us)
                    add(r, fmt::format("rw lock '{}'{}: the writer token {} (owner '{}') held it exclusively from db "
                                       "time {} (its acquire returned; granted at {}) to {}, while the reader token {} "
                                       "(owner '{}', row '{}') held it from {} to {}: {} ms of overlap",
                                       shown(lock), where_db(db), token, shown(iv->owner), from, iv->start_us,
                                       iv->end_us, rd.row->token, shown(rd.row->owner), shown(rd.row->lock),
                                       rd.start_us, rd.row->end_us,
                                       ms_us(std::min(iv->end_us, rd.row->end_us) - std::max(from, rd.start_us))));
    }
    for (auto& [key, ws] : writes) {
        std::sort(ws.begin(), ws.end(), [](auto a, auto b) { return a->start_us < b->start_us; });
        for (std::size_t i = 1; i < ws.size(); ++i)
            if (ws[i]->start_us < ws[i - 1]->end_us)
                add(r, fmt::format("rw lock '{}'{}: writers token {} (owner '{}', [{}, {})) and token {} (owner '{}', "
                                   "[{}, {})) overlap in database time",
                                   shown(key.second), where_db(key.first), ws[i - 1]->token, shown(ws[i - 1]->owner),
                                   ws[i - 1]->start_us, ws[i - 1]->end_us, ws[i]->token, shown(ws[i]->owner),
                                   ws[i]->start_us, ws[i]->end_us));
    }
    for (auto& [key, rs] : readers) {
        reads += static_cast<std::int64_t>(rs.size());
        std::vector<std::pair<std::int64_t, int>> edges;
        for (auto const& rd : rs) {
            edges.emplace_back(rd.start_us, 1);
            edges.emplace_back(rd.row->end_us, -1);
        }
        std::sort(edges.begin(), edges.end());
        std::int64_t n = 0;
        for (auto const& [t, d] : edges) max_readers = std::max(max_readers, n += d);
    }
    r.counts = {{"writers", writers},
                {"writers_unmatched", unmatched},
                {"readers", reads},
                {"max_concurrent_readers", max_readers}};
    return r;
}

// ---------------------------------------------------------------------------------------------------------------
// K-election
// ---------------------------------------------------------------------------------------------------------------

report k_election(std::vector<audit_row> const& audit, std::vector<event> const& history) {
    report r{"K-election"};
    std::map<std::pair<std::string, std::string>, std::vector<lease_interval>> per_election;
    for (auto& iv : audit_intervals(audit))
        if (split_coord_name(iv.lock).kind == 0) per_election[{iv.db, iv.lock}].push_back(std::move(iv));
    std::int64_t leaders = 0;
    for (auto& [key, ivs] : per_election) {
        auto const& [db, name] = key;
        leaders += static_cast<std::int64_t>(ivs.size());
        std::stable_sort(ivs.begin(), ivs.end(), [](auto const& a, auto const& b) {
            return std::tie(a.start_us, a.seq) < std::tie(b.start_us, b.seq);
        });
        std::map<std::int64_t, lease_interval const*> by_term;
        lease_interval const* latest_end = nullptr;
        for (std::size_t i = 0; i < ivs.size(); ++i) {
            auto const& iv = ivs[i];
            if (auto [it, fresh] = by_term.try_emplace(iv.token, &iv); !fresh)
                add(r, fmt::format("election '{}'{}: term {} has two leaders: owner '{}' elected at db time {} and "
                                   "owner '{}' elected at {}",
                                   shown(name), where_db(db), iv.token, shown(it->second->owner), it->second->start_us,
                                   shown(iv.owner), iv.start_us));
            if (i > 0 && iv.token <= ivs[i - 1].token)
                add(r, fmt::format("election '{}'{}: term {} (owner '{}') was elected at db time {}, after term {} "
                                   "(owner '{}', elected at {}): terms must strictly increase with election time",
                                   shown(name), where_db(db), iv.token, shown(iv.owner), iv.start_us, ivs[i - 1].token,
                                   shown(ivs[i - 1].owner), ivs[i - 1].start_us));
            if (latest_end != nullptr && iv.start_us < latest_end->end_us)
                add(r, fmt::format("election '{}'{}: two leaders at once in database time: term {} (owner '{}') "
                                   "elected at {}, while term {} (owner '{}') led until {}",
                                   shown(name), where_db(db), iv.token, shown(iv.owner), iv.start_us, latest_end->token,
                                   shown(latest_end->owner), latest_end->end_us));
            if (latest_end == nullptr || iv.end_us > latest_end->end_us) latest_end = &iv;
        }
    }
    // The clients: one owner per term of an election.
    std::map<std::pair<std::string, std::int64_t>, std::string> term_owner;
    std::int64_t campaigns = 0;
    for (auto const& e : history) {
        if (e.op != "acquire" || e.type != "ok" || !e.token) continue;
        ++campaigns;
        auto [it, fresh] = term_owner.try_emplace({e.lock, *e.token}, e.owner);
        if (!fresh && it->second != e.owner)
            add(r, fmt::format("election '{}': term {} was won by owner '{}' and by owner '{}' ({})", shown(e.lock),
                               *e.token, shown(it->second), shown(e.owner), e.proc));
    }
    r.counts = {{"elections", static_cast<std::int64_t>(per_election.size())},
                {"leaders", leaders},
                {"campaigns_won", campaigns}};
    return r;
}

// ---------------------------------------------------------------------------------------------------------------
// K-observe
// ---------------------------------------------------------------------------------------------------------------

report k_observe(std::vector<event> const& history, std::vector<nemesis_event> const& nemesis, std::int64_t bound_ms,
                 bool require_leader_kill) {
    report r{"K-observe"};
    std::vector<event const*> sorted;
    for (auto const& e : history) sorted.push_back(&e);
    std::stable_sort(sorted.begin(), sorted.end(), [](auto a, auto b) { return a->mono_ns < b->mono_ns; });
    std::int64_t const end_ns = sorted.empty() ? 0 : sorted.back()->mono_ns;

    // 1. Per observer (proc, pid) and election: the terms reported never go back.
    std::map<std::tuple<std::string, std::int64_t, std::string>, std::int64_t> last_term;
    std::int64_t reports = 0, nones = 0;
    std::vector<event const*> observed;
    for (auto const* e : sorted) {
        if (e->op != "observe" || e->type != "ok") continue;
        ++reports;
        observed.push_back(e);
        if (!e->token) {
            ++nones;
            continue;
        }
        auto& last = last_term[{e->proc, e->pid, e->lock}];
        if (*e->token < last)
            add(r, fmt::format("election '{}': {}(pid {}) observed term {} (owner '{}') at {} after it had observed "
                               "term {}: an older leader reported after a newer one",
                               shown(e->lock), e->proc, e->pid, *e->token, shown(e->owner), e->mono_ns, last));
        last = std::max(last, *e->token);
    }

    // 2. Each kill of a leader: what the observers reported after it.
    std::int64_t kills = 0, leader_kills = 0, seen = 0, undecided = 0, max_delay_ns = 0;
    for (auto const& k : nemesis) {
        if (k.fault != "kill") continue;
        ++kills;
        // The victim's grants (its history's proc is the worker's name) not released before the kill.
        std::map<std::string, event const*> held;  // election -> the grant
        for (auto const* e : sorted) {
            if (e->mono_ns > k.mono_ns) break;
            if (e->proc != k.target) continue;
            if (e->op == "acquire" && e->type == "ok" && e->token) held[e->lock] = e;
            if ((e->op == "release" && e->type == "invoke") || e->op == "lost") held.erase(e->lock);
        }
        for (auto const& [name, grant] : held) {
            ++leader_kills;
            std::int64_t const term = *grant->token;
            // The successor: the first grant of a greater term after the kill.
            event const* successor = nullptr;
            for (auto const* e : sorted)
                if (e->mono_ns > k.mono_ns && e->op == "acquire" && e->type == "ok" && e->lock == name && e->token &&
                    *e->token > term) {
                    successor = e;
                    break;
                }
            // Every report after the kill: the killed term, none, or a greater one.
            event const* first_successor_report = nullptr;
            for (auto const* o : observed) {
                if (o->mono_ns <= k.mono_ns || o->lock != name) continue;
                if (o->token && *o->token < term)
                    add(r, fmt::format("election '{}': {} observed term {} at {}, after the leader of term {} ({}) "
                                       "was killed at {}: neither that leader, none, nor a successor",
                                       shown(name), o->proc, *o->token, o->mono_ns, term, k.target, k.mono_ns));
                if (successor != nullptr && o->token && *o->token >= *successor->token &&
                    first_successor_report == nullptr)
                    first_successor_report = o;
            }
            if (successor == nullptr) {
                ++undecided;  // no successor in the history (K6 judges availability)
                continue;
            }
            std::int64_t const due = successor->mono_ns + bound_ms * 1'000'000;
            if (first_successor_report != nullptr && first_successor_report->mono_ns <= due) {
                ++seen;
                max_delay_ns = std::max(max_delay_ns, first_successor_report->mono_ns - successor->mono_ns);
                continue;
            }
            if (first_successor_report == nullptr && end_ns < due) {
                ++undecided;  // the history ends before the bound
                continue;
            }
            add(r, fmt::format(
                       "election '{}': after the leader of term {} ({}) was killed at {}, the successor of "
                       "term {} ({}) was elected at {}, but no observer reported it {}",
                       shown(name), term, k.target, k.mono_ns, *successor->token, successor->proc, successor->mono_ns,
                       first_successor_report == nullptr
                           ? fmt::format("(the history goes on for {} ms)",
                                         static_cast<double>(end_ns - successor->mono_ns) / 1e6)
                           : fmt::format("within {} ms (it did {} ms later)", bound_ms,
                                         static_cast<double>(first_successor_report->mono_ns - successor->mono_ns) /
                                             1e6)));
        }
    }
    if (require_leader_kill && seen == 0 && r.violations.empty())
        add(r, fmt::format("no observer saw a killed leader's successor ({} kills, {} of a leader, {} undecided): the "
                           "fault never bit",
                           kills, leader_kills, undecided));
    r.counts = {{"reports", reports},
                {"none_reports", nones},
                {"kills", kills},
                {"leader_kills", leader_kills},
                {"successors_seen", seen},
                {"undecided", undecided},
                {"max_delay_ms", (max_delay_ns + 999'999) / 1'000'000},
                {"bound_ms", bound_ms}};
    return r;
}

// ---------------------------------------------------------------------------------------------------------------
// K1-reap-coord
// ---------------------------------------------------------------------------------------------------------------

report k1_reap_coord(std::vector<audit_row> const& audit, std::vector<event> const& history,
                     std::int64_t realtime_minus_mono_ns, std::int64_t slack_ms) {
    report r{"K1-reap-coord"};
    // The owner's acquire and release windows [invoke, completion] per (user's name, owner); no completion: open.
    std::map<std::pair<std::string, std::string>, std::vector<std::pair<std::int64_t, std::int64_t>>> windows;
    std::map<std::tuple<std::string, std::int64_t, std::int64_t, std::string, std::string>, std::size_t> open;
    std::vector<event const*> sorted;
    for (auto const& e : history) sorted.push_back(&e);
    std::stable_sort(sorted.begin(), sorted.end(), [](auto a, auto b) { return a->mono_ns < b->mono_ns; });
    for (auto const* e : sorted) {
        if (e->op != "release" && e->op != "acquire") continue;
        auto const base = split_coord_name(e->lock).base;
        auto key = std::make_tuple(e->proc, e->pid, e->thread, base, e->op);
        if (e->type == "invoke") {
            auto& w = windows[{base, e->owner}];
            w.push_back({e->mono_ns, never});
            open[key] = w.size() - 1;
        } else if (auto it = open.find(key); it != open.end()) {
            windows[{base, e->owner}][it->second].second = e->mono_ns;
            open.erase(it);
        }
    }
    // An operator's force_release of a row (lock: the row's exact name), [invoke, completion]: its delete is no
    // owner's.
    std::map<std::string, std::vector<std::pair<std::int64_t, std::int64_t>>> forced;
    std::map<std::tuple<std::string, std::int64_t, std::int64_t, std::string>, std::size_t> forcing;
    for (auto const* e : sorted) {
        if (e->op != "force_release") continue;
        auto key = std::make_tuple(e->proc, e->pid, e->thread, e->lock);
        if (e->type == "invoke") {
            forced[e->lock].push_back({e->mono_ns, never});
            forcing[key] = forced[e->lock].size() - 1;
        } else if (auto it = forcing.find(key); it != forcing.end()) {
            forced[e->lock][it->second].second = e->mono_ns;
            forcing.erase(it);
        }
    }
    std::int64_t const slack_ns = slack_ms * 1'000'000;
    std::int64_t live = 0, expired = 0, by_operator = 0;
    // A reader's rename is audited as a delete of X and a grant of its own row: the delete comes inside the reader's
    // acquire, and is judged as any live delete.
    for (auto const& a : audit) {
        if (a.kind != "delete") continue;
        if (a.db_time_us >= a.expires_at_us) {
            ++expired;
            continue;
        }
        ++live;
        std::int64_t const at = a.db_time_us * 1000 - realtime_minus_mono_ns;
        bool inside = false;
        auto within = [&](std::vector<std::pair<std::int64_t, std::int64_t>> const& spans) {
            for (auto const& [from, to] : spans)
                inside = inside || (at >= from - slack_ns && (to == never || at <= to + slack_ns));
        };
        if (auto it = forced.find(a.lock); it != forced.end()) within(it->second);
        if (inside) {
            ++by_operator;
            continue;
        }
        if (auto it = windows.find({split_coord_name(a.lock).base, a.owner}); it != windows.end()) within(it->second);
        if (!inside)
            add(r, fmt::format("'{}': the unexpired row of token {} (owner '{}') was deleted at db time {}, {} ms "
                               "before its expiry (audit seq {}), while its owner was neither acquiring nor releasing "
                               "that name",
                               shown(a.lock), a.token, shown(a.owner), a.db_time_us,
                               ms_us(a.expires_at_us - a.db_time_us), a.seq));
    }
    r.counts = {{"live_deletes", live}, {"expired_deletes", expired}, {"force_released", by_operator}};
    return r;
}

// ---------------------------------------------------------------------------------------------------------------
// K1-permits-defs
// ---------------------------------------------------------------------------------------------------------------

report k1_permits_defined(std::vector<audit_row> const& audit, std::vector<audit_row> const& definitions,
                          std::vector<event> const& history) {
    report r{"K1-permits-defs"};
    // Each semaphore's definitions in seq order: (db time, N; 0 = forgotten).
    std::map<std::pair<std::string, std::string>, std::vector<std::pair<std::int64_t, std::int64_t>>> defs;
    std::vector<audit_row const*> sorted_defs;
    for (auto const& d : definitions) sorted_defs.push_back(&d);
    std::stable_sort(sorted_defs.begin(), sorted_defs.end(), [](auto a, auto b) { return a->seq < b->seq; });
    std::int64_t defines = 0, forgets = 0;
    for (auto const* d : sorted_defs) {
        bool const forget = d->kind == "forget";
        (forget ? forgets : defines) += 1;
        defs[{d->db, d->lock}].push_back({d->db_time_us, forget ? 0 : d->token});
    }
    // The N in force at db time t (the last change at or before t; 0: none stored).
    auto in_force = [&](std::string const& db, std::string const& base, std::int64_t t) -> std::int64_t {
        std::int64_t n = 0;
        if (auto it = defs.find({db, base}); it != defs.end())
            for (auto const& [at, permits] : it->second) {
                if (at > t) break;
                n = permits;
            }
        return n;
    };
    // A grant is confirmed against the stored N after its row is written (src/coordination.cpp): a row whose
    // confirmation found another N is given back before its acquire returns, and one written while nothing was
    // stored is confirmed by storing its semaphore's N. So the permits are the rows a client's acquire returned
    // (history: acquire ok); a row no client was handed is a grant given back (or never reported) and is judged by
    // the row checkers (K1-permits, K1-reap-coord), not here.
    std::set<std::tuple<std::string, std::string, std::int64_t>> handed_out;  // (base, owner, token)
    for (auto const& e : history)
        if (e.op == "acquire" && e.type == "ok" && e.token && e.value) handed_out.insert({e.lock, e.owner, *e.token});
    // The N a grant at db time t was confirmed under: the one in force, or, when none was stored, the first one
    // stored after t (its own confirmation's, or another's it then had to match).
    auto confirmed_under = [&](std::string const& db, std::string const& base, std::int64_t t, std::int64_t until) {
        auto n = in_force(db, base, t);
        if (n != 0) return n;
        if (auto it = defs.find({db, base}); it != defs.end())
            for (auto const& [at, permits] : it->second)
                if (at > t && at <= until && permits != 0) return permits;
        return std::int64_t{0};
    };
    std::map<std::pair<std::string, std::string>, std::vector<lease_interval>> per_sem;  // (db, base)
    std::int64_t granted = 0, given_back = 0, max_holders = 0;
    for (auto& iv : audit_intervals(audit)) {
        auto n = split_coord_name(iv.lock);
        if (n.kind != 'p') continue;
        if (!handed_out.contains({n.base, iv.owner, iv.token})) {
            ++given_back;
            continue;
        }
        ++granted;
        per_sem[{iv.db, n.base}].push_back(std::move(iv));
    }
    int reported = 0;
    auto report_one = [&](std::string what) {
        if (++reported <= 20) add(r, std::move(what));
    };
    // (base, owner, token) -> the grant's db time and the N then in force, for the clients' check below.
    std::map<std::tuple<std::string, std::string, std::int64_t>, std::pair<std::int64_t, std::int64_t>> grants;
    for (auto const& [key, ivs] : per_sem) {
        auto const& [db, base] = key;
        for (auto const& iv : ivs) {
            std::int64_t const n = confirmed_under(db, base, iv.start_us, iv.end_us);
            grants[{base, iv.owner, iv.token}] = {iv.start_us, n};
            auto const slot = split_coord_name(iv.lock).suffix;
            std::int64_t live = 0;
            for (auto const& other : ivs)
                if (other.start_us <= iv.start_us && iv.start_us < other.end_us) ++live;
            max_holders = std::max(max_holders, live);
            if (n == 0) {
                report_one(
                    fmt::format("semaphore '{}'{}: permit slot {} granted at db time {} (token {}, owner '{}') "
                                "while no number of permits was stored (forgotten), and none stored while it lived",
                                shown(base), where_db(db), shown(slot), iv.start_us, iv.token, shown(iv.owner)));
                continue;
            }
            bool const numeric = !slot.empty() && slot.size() <= 6 &&
                                 std::all_of(slot.begin(), slot.end(), [](char c) { return c >= '0' && c <= '9'; });
            if (!numeric || std::stoll(slot) >= n)
                report_one(
                    fmt::format("semaphore '{}'{}: permit slot {} granted at db time {} (token {}, owner '{}'), "
                                "but the N in force then was {} (slots 0 .. {})",
                                shown(base), where_db(db), shown(slot), iv.start_us, iv.token, shown(iv.owner), n,
                                n - 1));
            if (live > n) {
                std::string who;
                for (auto const& other : ivs)
                    if (other.start_us <= iv.start_us && iv.start_us < other.end_us)
                        who += fmt::format("{}slot {} token {} owner '{}' [{}, {})", who.empty() ? "" : "; ",
                                           shown(split_coord_name(other.lock).suffix), other.token, shown(other.owner),
                                           other.start_us, other.end_us);
                report_one(
                    fmt::format("semaphore '{}'{}: the grant at db time {} (token {}) made {} permits live, "
                                "above the N of {} in force then: {}",
                                shown(base), where_db(db), iv.start_us, iv.token, live, n, who));
            }
        }
        // A forget while a permit is live: forget refuses then. A permit granted at the forget's own db time
        // came after it (a forget that committed saw no permit, or it would have refused): SQLite's clock ticks
        // in milliseconds, so a forget, the next grant and the N its confirmation stores often share one
        // (the soak tier met it, issue 39: Fuzz.CoordinationKinds/sqlite, seed 3821684724).
        if (auto it = defs.find(key); it != defs.end())
            for (auto const& [at, permits] : it->second) {
                if (permits != 0) continue;
                std::int64_t live = 0;
                for (auto const& iv : ivs)
                    if (iv.start_us < at && at < iv.end_us) ++live;
                if (live > 0)
                    report_one(
                        fmt::format("semaphore '{}'{}: its number of permits was forgotten at db time {} while "
                                    "{} permit(s) were live: forget must refuse while any permit is held",
                                    shown(base), where_db(db), at, live));
            }
    }
    // The clients: a permit is granted by a semaphore of the N in force (acquire ok, value = its N).
    std::int64_t matched = 0;
    for (auto const& e : history) {
        if (e.op != "acquire" || e.type != "ok" || !e.token || !e.value) continue;
        auto it = grants.find({e.lock, e.owner, *e.token});
        if (it == grants.end()) continue;
        ++matched;
        auto const [at, n] = it->second;
        if (n != 0 && n != *e.value)
            report_one(
                fmt::format("semaphore '{}': {} was granted a permit (token {}, db time {}) by a semaphore of "
                            "{} permits, while the N in force was {}: a grant under a superseded N",
                            shown(e.lock), e.proc, *e.token, at, *e.value, n));
    }
    if (reported > 20) add(r, fmt::format("... and {} more", reported - 20));
    r.counts = {{"semaphores", static_cast<std::int64_t>(per_sem.size())},
                {"permits_granted", granted},
                {"given_back", given_back},
                {"defines", defines},
                {"forgets", forgets},
                {"clients_matched", matched},
                {"max_holders", max_holders}};
    return r;
}

// ---------------------------------------------------------------------------------------------------------------
// K-rw-forced
// ---------------------------------------------------------------------------------------------------------------

report k_rw_forced(std::vector<audit_row> const& audit, std::vector<event> const& history,
                   std::vector<nemesis_event> const& nemesis, std::int64_t realtime_minus_mono_ns,
                   std::int64_t slack_ms) {
    report r{"K-rw-forced"};
    // The rows an operator force-released: (lock, token) of each force_release ok.
    std::set<std::pair<std::string, std::int64_t>> forced;
    for (auto const& e : history)
        if (e.op == "force_release" && e.type == "ok" && e.token) forced.insert({e.lock, *e.token});
    // Their deletes, in database time.
    std::map<std::pair<std::string, std::int64_t>, std::int64_t> deleted_us;
    for (auto const& a : audit)
        if (a.kind == "delete" && forced.contains({a.lock, a.token}))
            deleted_us.try_emplace({a.lock, a.token}, a.db_time_us);
    // Each process's stops by the nemesis, [SIGSTOP, SIGCONT] on the raw monotonic clock.
    std::map<std::string, std::vector<std::pair<std::int64_t, std::int64_t>>> stops;
    for (auto const& n : nemesis) {
        if (n.fault != "stop") continue;
        auto& s = stops[n.target];
        if (n.phase == "start") s.push_back({n.mono_ns, never});
        else if (!s.empty() && s.back().second == never) s.back().second = n.mono_ns;
    }
    std::int64_t const slack_ns = slack_ms * 1'000'000;
    std::int64_t writers = 0, checked = 0, excused = 0;
    for (auto const& e : history) {
        if (e.op != "acquire" || e.type != "ok" || !e.token || e.value) continue;  // writers: no value
        ++writers;
        auto it = deleted_us.find({e.lock, *e.token});
        if (it == deleted_us.end()) continue;
        ++checked;
        std::int64_t const deleted = it->second * 1000 - realtime_minus_mono_ns;  // on the raw monotonic clock
        if (e.mono_ns <= deleted + slack_ns) continue;                            // lost after it was handed out
        bool stopped = false;
        if (auto st = stops.find(e.proc); st != stops.end())
            for (auto const& [from, to] : st->second) stopped = stopped || (from <= e.mono_ns && to >= deleted);
        if (stopped) {
            ++excused;
            continue;
        }
        add(r, fmt::format("rw lock '{}': the writer token {} ({}, owner '{}') was force-released at db time {}, and "
                           "its acquire returned the lease {} ms later: an exclusive lease already lost when handed "
                           "out (lease_lost expected)",
                           shown(e.lock), *e.token, e.proc, shown(e.owner), it->second,
                           static_cast<double>(e.mono_ns - deleted) / 1e6));
    }
    r.counts = {{"writers", writers}, {"force_released_writers", checked}, {"excused_by_stop", excused}};
    return r;
}

nlohmann::json to_json(coordination_checks const& c) {
    return {{"kind", c.kind},
            {"permits", c.permits},
            {"observe_bound_ms", c.observe_bound_ms},
            {"require_leader_kill", c.require_leader_kill},
            {"definitions", c.definitions}};
}

coordination_checks coordination_from_json(nlohmann::json const& j) {
    coordination_checks c{j.at("kind").get<std::string>(), j.value("permits", 0),
                          j.value("observe_bound_ms", std::int64_t{0}), j.value("require_leader_kill", false),
                          j.value("definitions", false)};
    if (c.kind != "semaphore" && c.kind != "rw" && c.kind != "election")
        throw std::invalid_argument("final.json: coordination kind '" + c.kind +
                                    "' is not one of semaphore, rw, election");
    if (c.kind == "semaphore" && c.permits < 1)
        throw std::invalid_argument("final.json: a semaphore run without its number of permits (\"permits\")");
    return c;
}

std::vector<report> coordination_reports(coordination_checks const& c, std::vector<audit_row> const& audit,
                                         std::vector<event> const& history, std::vector<nemesis_event> const& nemesis,
                                         std::int64_t realtime_minus_mono_ns,
                                         std::vector<audit_row> const& definitions) {
    std::vector<report> out;
    if (c.kind != "election") {
        out.push_back(k1_db_disjoint(audit));
        out.push_back(k1_reap_coord(audit, history, realtime_minus_mono_ns));
    }
    if (c.kind == "semaphore")
        out.push_back(c.definitions ? k1_permits_defined(audit, definitions, history)
                                    : k1_permits(audit, {}, c.permits));
    if (c.kind == "rw") {
        out.push_back(k_rw_exclusion(audit, history, realtime_minus_mono_ns));
        out.push_back(k_rw_forced(audit, history, nemesis, realtime_minus_mono_ns));
    }
    if (c.kind == "election") {
        out.push_back(k_election(audit, history));
        if (c.observe_bound_ms > 0)
            out.push_back(k_observe(history, nemesis, c.observe_bound_ms, c.require_leader_kill));
    }
    return out;
}

}  // namespace sqlock_battery
