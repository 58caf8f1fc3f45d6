// sqlock — operators' view of the lock table.
#pragma once

#include <sqlock/export.hpp>
#include <sqlock/lease.hpp>
#include <sqlock/store.hpp>

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sqlock {

/// A row of the table lock, as an operator sees it. Times are the database's.
struct SQLOCK_EXPORT lock_info {
    /// The row's name: the lock name, or, for a semaphore's permit or a shared
    /// lease, the name followed by sqlock's suffix (U+001F ...). Give this to
    /// `force_release`.
    std::string name;
    /// The owner id (for a leader, without its value).
    std::string owner;
    std::int64_t token = 0;
    int holds = 0;
    db_time created_at;
    db_time expires_at;
    /// expires_at minus the database's now when read; negative once expired
    /// (a row not yet taken over or reaped).
    std::chrono::microseconds remaining{0};
    /// "lock" (a lock or a leader, or the exclusive lease of a read-write lock),
    /// "permit" (a semaphore's) or "shared" (a read-write lock's shared lease).
    std::string kind = "lock";
    /// The name the user gave: the lock's, semaphore's or read-write lock's.
    std::string lock;
    /// A permit's slot (0 .. permits - 1); -1 otherwise.
    int slot = -1;
    /// A leader's value (sqlock::election); empty otherwise.
    std::string value;
};

/// Every row of the table lock (`<prefix>_locks`), ordered by name, including
/// expired rows nobody has taken over or reaped yet. Row locks (`row_locker`)
/// live in open transactions and are not listed.
/// @throws backend_unavailable, backend_error, schema_missing
/// Thread safety: any thread.
[[nodiscard]] SQLOCK_EXPORT std::vector<lock_info> list_locks(store const& db);

/// How full the lock tables are, for an operator's dashboard.
struct SQLOCK_EXPORT table_state {
    std::uint64_t rows = 0;          ///< rows of `<prefix>_locks`, live or expired
    std::uint64_t expired_rows = 0;  ///< of those, expired (not yet taken over or reaped)
    /// The database's now minus the oldest expired row's `expires_at`; empty
    /// when no row has expired. Growing while a reaper runs: it is behind or stopped.
    std::optional<std::chrono::microseconds> oldest_expired_age;
    std::uint64_t token_rows = 0;  ///< fencing-token counters (`<prefix>_tokens`, without its floor row)
};

/// Counts the rows of the lock tables: two aggregate queries (each reads the
/// whole table; for a scrape every few seconds, not for every lock operation).
/// @throws backend_unavailable, backend_error, schema_missing
/// Thread safety: any thread.
[[nodiscard]] SQLOCK_EXPORT table_state read_table_state(store const& db);

/// Delete the table-lock row of `name` (a `lock_info::name`) whoever owns it — an operator's tool for
/// a holder that is stuck. Waiters are woken. The holder's next renewal or
/// release reports `lease_lost`.
/// @return the row as it was, or empty when no row existed.
/// @throws usage_error (bad name), backend_unavailable, backend_error, schema_missing
/// @warning The holder may still be inside its critical section: only fencing
/// tokens protect the resource from it.
[[nodiscard]] SQLOCK_EXPORT std::optional<lock_info> force_release(store const& db, std::string_view name);

/// What a database says about itself, for `sqlock doctor` (docs/ha/doctor.md):
/// facts by name ("version", "fsync", "wsrep_cluster_size", ...), each as the
/// database wrote it. A fact it would not give (no privilege, no such
/// setting) is absent, and "<name>!" holds why.
struct SQLOCK_EXPORT database_facts {
    sqlock::engine engine = sqlock::engine::sqlite;
    std::string url;  ///< redacted
    std::map<std::string, std::string> facts;
};

/// Asks the database at `url` how it is set up: engine and version, whether
/// the lock tables are complete and the privileges they need, durability,
/// replication, a pooler in between, and its clock against this host's.
/// Read-only: creates no table (nor an SQLite file: it must exist) and opens
/// even where a `store` would refuse (relaxed durability, tables missing).
/// `table_prefix`: that of the lock tables (store_options::table_prefix).
/// @throws usage_error (bad URL or prefix), backend_unavailable (cannot connect
/// within `connect_timeout`)
/// Thread safety: any thread.
[[nodiscard]] SQLOCK_EXPORT database_facts
inspect_database(std::string_view url, std::string_view table_prefix = "sqlock",
                 std::chrono::milliseconds connect_timeout = std::chrono::seconds(5));

}  // namespace sqlock
