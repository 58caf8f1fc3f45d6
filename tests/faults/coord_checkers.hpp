// sqlock reliability battery — checkers for the coordination kinds of issue 22 (semaphores, read-write locks,
// elections; docs/coordination.md), over the same records as K1–K9 (checkers.hpp): the audit of the lock table in
// database time, the client histories and the nemesis log.
//
// The kinds keep their rows in `<prefix>_locks` under names derived from the user's name X (DESIGN-22):
//   X U+001F "p" U+001F k      permit slot k of semaphore X, an ordinary lease with its own token counter;
//   X U+001F "r" U+001F hex    a shared (read) lease of rw lock X: X's row, renamed by the reader after its grant
//                              (the audit records the rename as a delete of X and a grant of the new name, same
//                              token: audit.hpp);
//   X                          a plain lock, a write lease of rw lock X, or the leader of election X.
//
//   K1-permits  at most N permits of a semaphore held at any database time (K1 generalised: per semaphore, the
//               slots' intervals [grant, end) in database time never number more than N at once, and no slot has
//               a number >= N)
//   K-rw        a write interval overlaps no other write interval and no read interval, in database time. A
//               writer holds X from its grant, while it waits for the readers to leave (writer preference), so
//               its exclusive interval starts when its acquire returned (its ok in the history, placed in database
//               time by the host's real-time − monotonic offset, as K1-reap does), and ends with X's row
//   K-election  per election: terms (the leaders' tokens) strictly increase with grant time, no two leader
//               intervals share a term, no two overlap in database time, and no term was reported to two owners
//   K-observe   a follower's election::observe (op "observe" in the history: token = the term reported, none when
//               absent) never reports a term older than one it reported before; after a leader is killed (kill
//               -9, nemesis "kill"), it reports nothing older than that leader, and reports the successor (a term
//               greater than the killed leader's) within a bound of the successor's grant
//   K1-reap-coord  K1-reap (battery_harness.hpp) with names folded to X: a row deleted before its expiry was
//               deleted while its owner was acquiring or releasing that name (the history names the user's name,
//               the audit the slot's or reader's row), or while an operator force-released that very row (op
//               force_release in the history, lock = the row's name)
//   K1-permits-defs  runs that forget a semaphore's N and define it anew (definitions.jsonl: the audit of
//               `<prefix>_semaphores`, audit.hpp): at each permit's grant, in database time, the N stored then is in
//               force; the grant is a violation when no N was stored, when its slot is >= N, or when it makes more
//               than N permits live; a forget while a permit is live is a violation (forget refuses then); a grant
//               whose client's semaphore had another N than the one in force (its acquire ok's `value`) was granted
//               under a superseded N. A force-released permit ends at the force-release (its audited delete)
//   K-rw-forced a writer's exclusive lease whose row was force-released (op force_release ok in the history,
//               token = the row's) before its acquire returned is a lease already lost when handed out: the
//               acquire must throw lease_lost. Judged on the raw monotonic clock (the delete's database time
//               placed there as K1-reap does) with a slack, and excused when the writer's process was stopped by
//               the nemesis in between (a pause after the last check is a loss after the grant)
#pragma once

#include "checkers.hpp"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace sqlock_battery {

/// A lock row's name taken apart: `base` the user's name, `kind` 'p' (permit slot), 'r' (reader) or 0 (plain),
/// `suffix` the slot number or the reader's random part.
struct coord_name {
    std::string base;
    char kind = 0;
    std::string suffix;
};
coord_name split_coord_name(std::string const& lock);

/// One lease's interval in database time, from the audit: [start_us, end_us). end_us: the delete's time if the
/// row was deleted before its expiry, else the row's expiry as last written (by the grant or a renew).
struct lease_interval {
    std::string db;
    std::string lock;
    std::string owner;
    std::int64_t token = 0;
    std::int64_t start_us = 0;
    std::int64_t end_us = 0;
    std::int64_t seq = 0;  ///< the grant's audit seq
};
/// Every lease of the audit (each database its own timeline), in seq order of their grants.
std::vector<lease_interval> audit_intervals(std::vector<audit_row> const& audit);

/// K1-permits. `permits`: each semaphore's N (by its user name); names not in it use `default_permits`.
report k1_permits(std::vector<audit_row> const& audit, std::map<std::string, int> const& permits, int default_permits);

/// K-rw. Writers' acquire ok events (op acquire, type ok, no `value`; a shared grant is logged with value 1) give
/// each write interval its start; `slack_ms` absorbs the clocks' reading jitter, as K1-reap's.
report k_rw_exclusion(std::vector<audit_row> const& audit, std::vector<event> const& history,
                      std::int64_t realtime_minus_mono_ns, std::int64_t slack_ms = 10);

/// K-election, from the audit (leases of plain names) and the history (campaign ok: op acquire, type ok).
report k_election(std::vector<audit_row> const& audit, std::vector<event> const& history);

/// K-observe. `bound_ms`: the successor must be reported within this long after its grant (its acquire ok).
/// `require_leader_kill`: a run in which no leader was killed reports "the fault never bit".
report k_observe(std::vector<event> const& history, std::vector<nemesis_event> const& nemesis, std::int64_t bound_ms,
                 bool require_leader_kill);

/// K1-reap-coord (see the file comment).
report k1_reap_coord(std::vector<audit_row> const& audit, std::vector<event> const& history,
                     std::int64_t realtime_minus_mono_ns, std::int64_t slack_ms = 10);

/// K1-permits-defs (see the file comment). `definitions`: define/forget rows (dump_definitions in audit.hpp).
report k1_permits_defined(std::vector<audit_row> const& audit, std::vector<audit_row> const& definitions,
                          std::vector<event> const& history);

/// K-rw-forced (see the file comment). `slack_ms` covers the end of the writer's last count after the delete.
report k_rw_forced(std::vector<audit_row> const& audit, std::vector<event> const& history,
                   std::vector<nemesis_event> const& nemesis, std::int64_t realtime_minus_mono_ns,
                   std::int64_t slack_ms = 100);

/// What a coordination run asserts besides K1–K9. The battery keeps it in final.json ("coordination"), so that
/// sqlock_battery_check replays the same checkers over a kept run directory.
struct coordination_checks {
    std::string kind;                   ///< "semaphore", "rw" or "election"
    int permits = 0;                    ///< semaphore: N
    std::int64_t observe_bound_ms = 0;  ///< election: K-observe's bound (0: no observer ran, no K-observe)
    bool require_leader_kill = false;   ///< election: without a kill of the leader K-observe says the fault never bit
    /// semaphore: N is forgotten and defined anew during the run; the harness audits `<prefix>_semaphores`
    /// (definitions.jsonl) and K1-permits-defs judges the permits by the N in force, instead of K1-permits by `permits`
    bool definitions = false;
};
nlohmann::json to_json(coordination_checks const& c);
/// @throws std::invalid_argument an unknown kind, or a semaphore without permits
coordination_checks coordination_from_json(nlohmann::json const& j);

/// The kind's checkers over a run's record: K1 on the audit and K1-reap-coord for semaphores and rw locks (whose
/// slot and reader rows the plain K1-reap cannot match with the history), then K1-permits (K1-permits-defs with
/// `c.definitions`), K-rw and K-rw-forced, or K-election and K-observe.
std::vector<report> coordination_reports(coordination_checks const& c, std::vector<audit_row> const& audit,
                                         std::vector<event> const& history, std::vector<nemesis_event> const& nemesis,
                                         std::int64_t realtime_minus_mono_ns,
                                         std::vector<audit_row> const& definitions = {});

}  // namespace sqlock_battery
