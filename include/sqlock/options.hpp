// sqlock — options, as aggregates with in-class defaults:
//     sqlock::store db{url, {.pool_size = 4, .create_schema = true}};
//     auto locks = sqlock::table_locker(db, {.ttl = 10s});
// Every field is validated once, when the store or locker is constructed. (The `10s` above is the
// caller's `using namespace std::chrono_literals;`: sqlock's headers bring no using-directive.)
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include <sqlock/export.hpp>
#include <sqlock/stats.hpp>

namespace sqlock {

class metrics;

/// How a `store` opens and manages its connections.
struct SQLOCK_EXPORT store_options {
    /// Pooled connections (1..1024). Each concurrent lock operation borrows one
    /// for the length of one statement or short transaction.
    std::size_t pool_size = 8;

    /// Create the lock tables when they are missing (idempotent DDL from
    /// schema/<engine>.sql). Otherwise a missing table throws `schema_missing`.
    bool create_schema = false;

    /// Prefix of every table sqlock uses: `<prefix>_locks`, `<prefix>_tokens`.
    /// An identifier: [A-Za-z_][A-Za-z0-9_]*, at most 42 characters, so that every
    /// table and index name made from it fits PostgreSQL's 63-byte limit (the
    /// `usage_error` states the limit, which follows the longest name in schema/).
    std::string table_prefix = "sqlock";

    /// Bound on establishing one connection (PostgreSQL's minimum is 2 s).
    std::chrono::milliseconds connect_timeout = std::chrono::seconds(5);

    /// Bound on waiting for a row lock inside one lock statement (another
    /// client holding the row mid-statement); past it the attempt counts as busy.
    std::chrono::milliseconds lock_wait_timeout = std::chrono::seconds(5);

    /// How long an operation waits for a free pooled connection. A waiting
    /// `acquire` never waits past its own deadline for one; a row lock's
    /// `try_acquire` waits for one only lent out for a moment, and gives up at
    /// once when every connection is pinned by a held row lock.
    std::chrono::milliseconds pool_wait = std::chrono::seconds(30);

    /// The client-side bound on one statement, beyond any wait the engine is
    /// allowed inside it (`lock_wait_timeout`, or a row lock's wait). Past it
    /// the connection is closed and the operation fails: an acquire reports
    /// `in_doubt` (or cleans up and retries), a renewal leaves the lease in doubt,
    /// a release throws `backend_unavailable`. A hung server (a stopped backend,
    /// a silent network) therefore never blocks a call without limit.
    /// 100 ms .. 1 h.
    std::chrono::milliseconds io_timeout = std::chrono::seconds(10);

    /// Open even when the server does not make commits durable (PostgreSQL
    /// `fsync = off`; MariaDB/MySQL `innodb_flush_log_at_trx_commit` other than 1).
    /// A crash of such a server can lose acknowledged grants and hand a fencing
    /// token out twice. PostgreSQL's per-session `synchronous_commit = off` is
    /// always overridden on sqlock's own connections.
    bool allow_relaxed_durability = false;

    /// Declare that every client of this MariaDB Galera cluster writes through
    /// one node (a single-writer topology: all URLs name the same node, or a
    /// proxy that sends all writes to one). Galera's row locks are local to a
    /// node, so `row_locker` on a Galera node is refused (`usage_error`) unless
    /// this is set: clients on two nodes would both hold the row. The table
    /// lock is exclusive across nodes either way (docs/ha.md). The MySQL URL
    /// parameter `galera_single_writer=true` sets it too. No effect elsewhere.
    bool galera_single_writer = false;

    /// Where this store, and the lockers, fences and reapers made on it, record
    /// their metrics (<sqlock/metrics.hpp>); empty: the process's `metrics::global()`.
    std::shared_ptr<sqlock::metrics> metrics;
};

/// How a locker takes and holds locks.
struct SQLOCK_EXPORT locker_options {
    /// Lease length, measured by the database's clock (10 ms .. 7 days).
    std::chrono::milliseconds ttl = std::chrono::seconds(30);

    /// Owner id written into each lock row, for operators (`sqlock list`) and
    /// as a guard on release and renewal. Empty (the default) means
    /// "host/pid/instance/thread": a random instance id per locker plus the
    /// acquiring thread's id. Set it to give a stable identity (at most 255
    /// bytes). The owner never makes an acquire reentrant: a second acquire of
    /// a held name is busy, whoever asks; see `lease::reenter()`.
    std::string owner;

    /// Backoff between attempts of a waiting `acquire`: capped exponential with
    /// full jitter, from `backoff_min` doubling up to `backoff_max`.
    std::chrono::milliseconds backoff_min = std::chrono::milliseconds(5);
    std::chrono::milliseconds backoff_max = std::chrono::milliseconds(500);

    /// The watchdog renews every held lease at about ttl/3. It is one deadline
    /// thread per locker (shared by all its leases; it schedules renewals and
    /// reports a lease lost when its validity runs out) and two renewal threads
    /// that run the renewals (started with the first lease when this is true;
    /// never when false: the deadline thread alone then watches for loss).
    /// A renewal that cannot reach the database is retried until the lease's
    /// local validity runs out. docs/architecture.md lists every thread.
    bool auto_renew = true;

    /// The longest the watchdog keeps a lease, from its grant. Once the next
    /// renewal would be due past `max_hold`, the watchdog stops renewing it:
    /// the lease runs out at its deadline and is lost (stop token, `on_lost`),
    /// and its row expires by the TTL. So a worker that is stuck (a deadlock,
    /// an endless loop) while the watchdog thread still runs cannot hold the
    /// lock forever: it holds it at most about `max_hold` plus one TTL.
    /// Explicit `lease::renew()` calls are not limited: they
    /// come from the worker itself. 0 (the default): no limit; otherwise at
    /// least the TTL.
    std::chrono::milliseconds max_hold = std::chrono::milliseconds::zero();

    /// Called once when a lease is lost (renewal refused, validity gone, or a
    /// release found another owner), with its name and token. Runs on the
    /// thread that noticed (often the renewer): keep it short and non-throwing.
    std::function<void(std::string_view name, std::int64_t token)> on_lost;

    /// Called for every lease event (for logging and metrics); see lease_event.
    std::function<void(lease_event const&)> on_event;

    /// Where this locker records its metrics; empty: its store's (a majority
    /// locker: the process's `metrics::global()`).
    std::shared_ptr<sqlock::metrics> metrics;
};

}  // namespace sqlock
