// sqlock reliability battery — the checkers K1–K9 over recorded histories.
//
// Each checker takes what a run recorded (client histories, the database's own audit of the
// lock table, the nemesis log, the fenced resource's log) and returns a report: the violations
// it found, each with enough context to find the events, and the counts it measured. A checker
// never throws on a violation; it throws std::invalid_argument only for input it cannot read.
// Every checker has self-tests on a known-good and a known-bad synthetic history
// (tests/faults/checker_selftest.cpp), so a checker that cannot fail is caught.
//
// Operations. The client-history checkers (K2–K7, K9) pair each completion (ok/fail/info) with the latest
// outstanding invoke of the same op and lock on the same (proc, pid, thread), as Jepsen does; an invoke left
// without completion is `info`: it may have happened, concurrent with everything after it. An event written
// without an invoke (`lost`, the renewer's renew, a completion whose invoke is missing) is an operation of its own
// instant, whose start is unknown: checks that order an operation by its invoke leave it out (K3/K7 real-time
// order, K2's acquire windows, K5's renew-after-release and after-loss).
// renew/release/lost events belong to the grant (an acquire ok) of the same proc, pid and lock that carries their
// token, so the library's renewer thread may write them; without a token, to the latest grant of the same thread.
//
// Changes to the first version of this interface (names unchanged):
// - K1 compares a takeover with the row's expiry as last written, also when a renew audited at or after the
//   previous expiry wrote it: such a renew is counted ("late_renews"), not reported, because the audit's db_time
//   is read after the statement waited for the row lock, while the renew's condition used its statement time.
// - K4 follows Jepsen's `info`: final >= completed and final <= completed + indeterminate writes.
// - K5 counts a second release ok of one grant ("double_release") instead of reporting it: the library's
//   release() is idempotent (a second call does nothing). A renew ok after a release ok is reported.
// - K7 reads the history only when the audit is empty (a majority run audits member rows, whose tokens are not
//   the majority token the history records).
// - K6 reports a late or missing grant only if an acquire still waited when the bound ran out ("gave_up"
//   otherwise), and not when the history ends before the bound ("undecided").
// - K9: sqlock::backend_error (an engine error the library does not handle) is not a typed outcome.
// - run_final / read_final: the format of final.json, for check_directory; report::asserted (final.json's
//   "asserted" list: the others are only reported); check_directory also reads remaining*.jsonl for K8.
#pragma once

#include "history.hpp"

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace sqlock_battery {

/// One row of the ground-truth audit a harness trigger writes in the same transaction as every
/// change of a lock row (tests/faults/audit.hpp installs it; the library knows nothing of it).
/// kind: "grant" (a row inserted), "takeover" (the row's token changed: the old grant ended and a
/// new one began at db_time), "renew" (same token, expires_at moved), "hold" (same token and
/// expiry, holds changed: reentrancy), "delete" (the row deleted: a release if db_time <
/// expires_at, else an expired row purged by the reaper or a release after expiry).
/// For "delete", owner/token/expires_at are the deleted row's.
struct audit_row {
    std::int64_t seq = 0;  ///< the database's serialisation order
    std::string lock;
    std::string owner;
    std::int64_t token = 0;
    std::string kind;
    std::int64_t db_time_us = 0;
    std::int64_t expires_at_us = 0;
    std::string db;  ///< which database (majority runs audit every member); "" for one
};
nlohmann::json to_json(audit_row const& r);
audit_row audit_from_json(nlohmann::json const& j);
/// Reads an audit dump (JSON lines).
std::vector<audit_row> read_audit(std::string const& path);

/// A fault the nemesis applied: start and stop on the raw monotonic clock.
struct nemesis_event {
    std::string fault;   ///< "kill", "stop", "cont", "crash-server", "partition", "heal", "skew", ...
    std::string target;  ///< a worker name, "postgresql", "mysql", ...
    std::string phase;   ///< "start" | "stop" | "instant"
    std::int64_t mono_ns = 0;
    std::string detail;
};
nlohmann::json to_json(nemesis_event const& e);
std::vector<nemesis_event> read_nemesis(std::string const& path);

struct violation {
    std::string checker;  ///< "K1" ... "K9"
    std::string what;     ///< one line: which lock, which grants/events, what is wrong
};

struct report {
    std::string checker;
    std::vector<violation> violations;
    std::map<std::string, std::int64_t> counts;  ///< what was measured (grants, overlaps, max gap ms, ...)
    /// false: the run only reports this checker (final.json's "asserted" leaves it out), so its
    /// violations do not fail the run. ok() still says whether it found any.
    bool asserted = true;
    [[nodiscard]] bool ok() const noexcept { return violations.empty(); }
    /// "K1 ok (grants=120, ...)" or "K1 FAILED: 2 violations: ..." (first few listed).
    [[nodiscard]] std::string summary() const;
};

/// K1 — lease intervals are disjoint in database time, per lock, from the audit in seq order
/// (per db). Also: a takeover or expired-row delete of grant g happens at db_time >= g's
/// effective expiry. A db_time that goes backwards against seq is counted as "clock_jumps"
/// (reported, not a violation: P1 then holds in the database's own jumped time).
report k1_db_disjoint(std::vector<audit_row> const& audit);

/// K2 — client-belief overlap: per process and lock, a known-held interval runs from ok(acquire)
/// to the earliest of invoke(release), a `lost` event, or ok(acquire/renew).mono + validity_ms.
/// Intervals of different owners must not intersect. `expect_zero` false: overlaps are counted
/// ("overlaps", "overlap_max_ms") but are not violations (pause/partition runs, where only K3 counts).
report k2_belief_overlap(std::vector<event> const& history, bool expect_zero = true);

/// K3 — fencing: the resource's accepted writes (op write_fenced, type ok) for each lock never
/// have a token below the highest token accepted before them (mono order). Counts "accepted",
/// "rejected" (type fail): a fault test asserts rejected >= 1 to prove the fault bit.
report k3_fenced(std::vector<event> const& history);

/// K4 — lost updates on the unfenced counter: per lock, the final value equals the number of
/// completed critical sections (write_unfenced ok), and no two write_unfenced ok events wrote the
/// same value. `final_values`: lock -> the counter read after the run.
report k4_counter(std::vector<event> const& history, std::map<std::string, std::int64_t> const& final_values);

/// K5 — per-process API sequencing: renew/release ok only for a grant this process holds (after
/// its acquire ok, before its release ok or lost), never after a failed renew reported loss;
/// never two acquire ok of one lock by one process without a release/lost between.
report k5_sequencing(std::vector<event> const& history);

/// K6 — availability after faults: for each nemesis fault that ends (stop phase, or instant), the
/// next acquire ok of any lock that had waiters happens within `bound_ms` of the fault ending;
/// counts "max_gap_ms". Waiting is known from acquire invokes outstanding at the fault's end, by
/// processes alive afterwards. A late or missing grant is reported only if an acquire still waited
/// when the bound ran out (waiters that gave up are counted "gave_up"), and not when the history
/// ends before the bound ("undecided").
report k6_availability(std::vector<event> const& history, std::vector<nemesis_event> const& nemesis,
                       std::int64_t bound_ms);

/// K7 — token monotonicity in grant order: per lock (and db), tokens of grants/takeovers in the
/// audit's seq order strictly increase; renew/hold rows keep their grant's token. With an empty
/// audit, acquire ok events in mono order are used instead (only non-overlapping ones compared).
report k7_tokens(std::vector<audit_row> const& audit, std::vector<event> const& history);

/// K8 — database invariants after quiescence: `remaining` is the lock table's rows once every
/// worker stopped (as audit_row with kind "row", db_time_us = the database's now). A row may remain
/// only if it is expired or its owner is in `live_owners` (a holder still running).
report k8_leftovers(std::vector<audit_row> const& remaining, std::vector<std::string> const& live_owners);

/// K9 — typed errors only: every fail/info event's `error` starts with one of the library's error
/// types (sqlock::timeout, cancelled, stale_token, lease_lost, schema_missing,
/// backend_unavailable, in_doubt, usage_error; "busy" for a try that found the lock held) and
/// never carries a raw engine error (40001, 40P01, 55P03, 1205, 1213, SQLITE_BUSY, "database is
/// locked", "could not serialize access", "deadlock").
report k9_typed_errors(std::vector<event> const& history);

/// What a run measured once every worker stopped: final.json of the run directory.
/// {"counters": {"lock": value, ...}, "remaining": [audit rows of kind "row"], "live_owners": [...],
///  "k6_bound_ms": 4200, "k2_expect_zero": true, "asserted": ["K1", "K3", ...]}; every key is
/// optional, other keys (scenario, seed, ...) are ignored.
struct run_final {
    std::map<std::string, std::int64_t> counters;  ///< K4: each unfenced counter read after the run
    std::vector<audit_row> remaining;              ///< K8: the lock table's rows after quiescence
    bool has_remaining = false;                    ///< "remaining" was present (K8 runs on an empty table too)
    std::vector<std::string> live_owners;          ///< K8: holders still running
    std::optional<std::int64_t> k6_bound_ms;       ///< K6 runs only with a bound
    bool k2_expect_zero = true;                    ///< false for pause/partition/clock runs
    /// The checkers the run asserts; the others are only reported (report::asserted false), and K2
    /// then counts overlaps without reporting them. Absent: every checker is asserted.
    std::optional<std::vector<std::string>> asserted;
    /// The host's real-time clock minus its monotonic clock during the run (K1-reap's placement of client events).
    std::int64_t realtime_minus_mono_ns = 0;
    /// A coordination run's own checkers (coord_checkers.hpp: coordination_checks), replayed and asserted.
    std::optional<nlohmann::json> coordination;
};
nlohmann::json to_json(run_final const& f);
/// @throws std::invalid_argument the file cannot be read or is not in this format
run_final read_final(std::string const& path);

/// Runs every checker that applies to what is in `dir` (history*.jsonl, audit*.jsonl,
/// nemesis*.jsonl, remaining*.jsonl, final.json) and returns their reports: the replay of a failed
/// run. K1 runs on an audit; K2, K5, K9 on a history; K3 when it has write_fenced events; K4 when
/// it has write_unfenced events or final.json has counters; K6 with a nemesis log and final.json's
/// k6_bound_ms; K7 always; K8 when there is a remaining*.jsonl (the lock table's rows, as audit
/// rows of kind "row") or final.json has "remaining". With final.json's "coordination", the kind's
// checkers too (coord_checkers.hpp: coordination_reports), asserted.
/// @throws std::invalid_argument `dir` is not a directory, holds neither a history nor an audit,
///         or a file in it cannot be read
std::vector<report> check_directory(std::string const& dir);

}  // namespace sqlock_battery
