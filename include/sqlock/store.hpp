// sqlock — a database to keep locks in.
#pragma once

#include <sqlock/export.hpp>
#include <sqlock/options.hpp>
#include <sqlock/stats.hpp>

#include <memory>
#include <string>
#include <string_view>

namespace sqlock {

namespace detail {
struct access;
class store_impl;
}  // namespace detail

/// The database engines sqlock speaks to.
enum class engine { postgresql, mysql, sqlite };

/// "postgresql", "mysql" or "sqlite".
[[nodiscard]] SQLOCK_EXPORT std::string_view to_string(engine e) noexcept;

/// Which server is behind a store: `engine::mysql` is MariaDB or Oracle MySQL
/// (and its builds: Percona Server, Amazon RDS), which differ in places
/// (docs/table-lock.md, "MariaDB and MySQL").
enum class server_flavour { postgresql, mariadb, mysql, sqlite };

/// "postgresql", "mariadb", "mysql" or "sqlite".
[[nodiscard]] SQLOCK_EXPORT std::string_view to_string(server_flavour f) noexcept;

/// What the server said it is when the store opened: `SELECT VERSION(), @@version_comment`
/// (MariaDB, MySQL), `server_version` (PostgreSQL), `sqlite_version()` (SQLite).
struct server_info {
    server_flavour flavour = server_flavour::sqlite;
    std::string
        version;  ///< as the server wrote it: "10.11.6-MariaDB-0+deb12u1", "8.4.3", "15.8 (Debian 15.8-0+deb12u1)"
    int major = 0, minor = 0, patch = 0;  ///< read from `version` (10, 11, 6)
    std::string comment;                  ///< `@@version_comment` (MariaDB, MySQL), else empty
};

/// `url` with its password replaced by "***", for logs and messages (the form
/// `store::url()` returns). Parses nothing else: safe on malformed URLs.
[[nodiscard]] SQLOCK_EXPORT std::string redact_url(std::string_view url);

/// The DDL of the lock tables for an engine (the embedded schema/<engine>.sql),
/// with its tables named by `table_prefix`.
/// @throws usage_error when the prefix is not a valid identifier.
[[nodiscard]] SQLOCK_EXPORT std::string schema_sql(engine e, std::string_view table_prefix = "sqlock");

/// A database that holds locks: its engine, a pool of connections and the
/// names of the lock tables.
///
/// URLs:
///   - `postgresql://user:pass@host:port/db[?libpq-param=value...]` (also `postgres://`); sqlock's own
///     parameter `pooling=session|transaction` says how a pooler in between pools (docs/ha.md, PgBouncer)
///   - `postgresql://user:pass@h1:p1,h2:p2,h3:p3/db?target_session_attrs=read-write`: libpq's
///     host list, tried in turn; with `read-write` it keeps a cluster's primary (docs/ha.md)
///   - `mysql://user:pass@host:port/db` (MariaDB and MySQL; also `mariadb://`; one host)
///   - `sqlite:///abs/path.db` or `sqlite:relative/path.db` (WAL mode, synchronous=FULL)
/// User and password are percent-decoded.
///
/// Opening connects once and checks that the lock tables exist (or creates
/// them with `create_schema`). On PostgreSQL it first refuses a pooler that
/// shares server sessions between connections (PgBouncer in transaction or
/// statement pooling), where sqlock's per-connection state cannot hold: when
/// something is in between, a second connection is opened for a moment to
/// find out. It also opens the two connections kept for renewals, so that a
/// renewal never waits for a connect. Further connections open on first use; a pooled
/// connection found broken (server restarted) is reconnected on its next use.
///
/// Lockers and leases keep the store's internals alive, so a store may be
/// destroyed before them.
///
/// Thread safety: a store may be used from any number of threads.
class SQLOCK_EXPORT store {
public:
    /// @throws usage_error          bad URL or options (before any I/O); a server older than sqlock
    ///                              needs (see server()); `create_schema` on MySQL before 8.0.29
    /// @throws backend_unavailable  cannot connect within `connect_timeout`
    /// @throws schema_missing       tables absent and `create_schema` is false
    /// @throws backend_error        a pooler per transaction or statement in between (PostgreSQL), or
    ///                              commits not durable (without `allow_relaxed_durability`)
    explicit store(std::string_view url, store_options const& options = {});

    store(store&&) noexcept = default;
    store& operator=(store&&) noexcept = default;
    store(store const&) = delete;
    store& operator=(store const&) = delete;
    ~store();

    /// The engine behind the URL.
    [[nodiscard]] sqlock::engine engine() const noexcept;

    /// The URL with its password masked, for logs.
    [[nodiscard]] std::string const& url() const noexcept;

    /// This store's DDL (engine and table prefix applied).
    [[nodiscard]] std::string schema_sql() const;

    /// The server's flavour and version, read when the store opened. A server
    /// older than sqlock needs was refused then (`usage_error`): PostgreSQL 12,
    /// MariaDB 10.6, MySQL 8.0.11, SQLite 3.35 (docs/table-lock.md).
    [[nodiscard]] server_info server() const;

    /// What the store has learned: clock skew against the database, notifications.
    [[nodiscard]] store_stats stats() const noexcept;

    /// Apply the DDL (idempotent).
    /// @throws usage_error on MySQL before 8.0.29 (no CREATE PROCEDURE IF NOT EXISTS: apply
    ///         schema/mysql.sql by hand, see docs/table-lock.md)
    /// @throws backend_unavailable, backend_error
    void create_schema();

private:
    friend struct detail::access;  // the library's way in: src/detail/access.hpp
    std::shared_ptr<detail::store_impl> impl_;
};

}  // namespace sqlock
