// sqlock — distributed locks in SQL tables.
// Errors, grouped by what the caller should do about them.
#pragma once

#include <sqlock/export.hpp>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

namespace sqlock {

/// Base of every runtime failure sqlock reports. "Busy" is never an error:
/// try functions return an empty `std::optional` for it.
///
/// `code()` carries the engine's native code where one exists: a PostgreSQL
/// SQLSTATE ("40P01"), a MySQL/MariaDB errno ("1213") or a SQLite extended
/// result code ("5"); it is empty otherwise.
///
/// `what()` starts with "sqlock: "; `message()` is the same text without it,
/// for a caller that puts the message inside one of its own.
///
/// Thread safety: immutable once thrown.
class SQLOCK_EXPORT error : public std::runtime_error {
public:
    explicit error(std::string const& what, std::string code = {}) : std::runtime_error(what), code_(std::move(code)) {}

    /// `what()` without its leading "sqlock: " (all of it when there is none).
    /// Valid as long as the exception object lives.
    [[nodiscard]] std::string_view message() const noexcept {
        std::string_view m = what();
        constexpr std::string_view prefix = "sqlock: ";
        if (m.starts_with(prefix)) m.remove_prefix(prefix.size());
        return m;
    }

    /// The engine's native error code, or an empty string.
    [[nodiscard]] std::string const& code() const noexcept { return code_; }

private:
    std::string code_;
};

/// A waiting acquire did not get the lock before its deadline.
/// What to do: retry later, or give up; nothing was acquired.
class SQLOCK_EXPORT timeout : public error {
    using error::error;
};

/// A waiting acquire was cancelled through its `std::stop_token`; nothing was
/// acquired. What to do: stop (it was your own request).
class SQLOCK_EXPORT cancelled : public error {
    using error::error;
};

/// A fenced write was refused: the resource has already seen a higher token,
/// so the lease that carried this one was overtaken (expired and taken over).
/// What to do: roll back the transaction; do not retry with the same lease.
class SQLOCK_EXPORT stale_token : public error {
public:
    stale_token(std::string const& what, std::int64_t seen) : error(what), seen_(seen) {}
    /// The highest token the resource had already accepted.
    [[nodiscard]] std::int64_t seen() const noexcept { return seen_; }

private:
    std::int64_t seen_;
};

/// The lease is no longer ours: it expired and was taken over, or it was
/// released by someone else. What to do: restart the critical section.
class SQLOCK_EXPORT lease_lost : public error {
    using error::error;
};

/// The lock tables are not there. What to do: apply the schema
/// (`store::schema_sql()` or the files in schema/), or open the store with
/// `create_schema = true`.
class SQLOCK_EXPORT schema_missing : public error {
    using error::error;
};

/// The lock tables speak a newer protocol than this library
/// (sqlock::protocol_version()): a newer sqlock upgraded them, and a client of
/// this one could break exclusion or repeat a fencing token beside it. Raised
/// when a store opens, before it changes anything. What to do: upgrade sqlock
/// in this program; retrying does not help.
class SQLOCK_EXPORT protocol_mismatch : public error {
    using error::error;
};

/// The database could not be reached or refused the connection (wrong
/// credentials, server down, pool exhausted by a dead server).
/// What to do: retry later, or fix the URL.
class SQLOCK_EXPORT backend_unavailable : public error {
    using error::error;
};

/// The outcome of an operation is unknown (the connection broke while the
/// statement was in flight and the clean-up could not run). A row we may have
/// written expires by its TTL. What to do: never retry blindly; treat the lock
/// as not held.
class SQLOCK_EXPORT in_doubt : public error {
    using error::error;
};

/// The database reported an error sqlock does not handle itself; `code()`
/// holds the native code. What to do: look at the message; usually a bug or a
/// misconfigured server. A missing privilege (PostgreSQL 42501, MySQL/MariaDB
/// 1044/1142/1143/1370, SQLite 23) and a read-only database (PostgreSQL 25006,
/// MySQL/MariaDB 1290/1792, SQLite 8) are reported as this too, with a message
/// that says so and what to grant or change: retrying does not help.
class SQLOCK_EXPORT backend_error : public error {
    using error::error;
};

/// The call itself is wrong (empty lock name, TTL out of range, bad URL...).
/// Reported before any I/O, so nothing was changed. What to do: fix the call.
class SQLOCK_EXPORT usage_error : public std::logic_error {
    using std::logic_error::logic_error;
};

}  // namespace sqlock
