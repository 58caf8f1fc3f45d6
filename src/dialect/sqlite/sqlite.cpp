// SQLite: the text of the statements, built once per dialect.
#include "dialect/sqlite/sqlite.hpp"

namespace sqlock::detail::sqlite_engine {

sqlite_dialect::sqlite_dialect(std::string const& prefix, store_options const& options) : dialect(prefix, options) {
    auto const now = std::string(now_us);
    token_sql_ = "INSERT INTO " + tokens_ + " (name, token) VALUES (:name, " + first_token_sql() +
                 ")"
                 " ON CONFLICT (name) DO UPDATE SET token = token + 1 RETURNING token";
    // The token: the counter's next value, or a new counter's first (see the
    // triggers in schema/sqlite.sql, which store it).
    lock_sql_ = "INSERT INTO " + locks_ +
                " (name, owner, token, holds, attempt, created_at, expires_at)"
                " VALUES (:name, :owner, COALESCE((SELECT c.token + 1 FROM " +
                tokens_ + " c WHERE c.name = :name), " + first_token_sql() + "), 1, :attempt, " + now + ", " + now +
                " + :ttl)"
                " ON CONFLICT (name) DO UPDATE SET owner = excluded.owner, token = excluded.token, holds = 1,"
                " attempt = excluded.attempt, created_at = excluded.created_at, expires_at = excluded.expires_at"
                " WHERE expires_at < " +
                now + " RETURNING token, created_at, expires_at";
    shared_lock_sql_ = lock_sql_ + ", waiters";
    // The grant's expiry is kept: the shared lease is valid from the grant.
    shared_rename_sql_ =
        "UPDATE " + locks_ + " SET name = :to, waiters = 0 WHERE name = :name AND owner = :owner AND token = :token";
    release_sql_ =
        "DELETE FROM " + locks_ + " WHERE name = :name AND owner = :owner AND token = :token RETURNING waiters";
    mark_sql_ = "UPDATE " + locks_ + " SET waiters = 1 WHERE name = :name AND expires_at >= " + now;
    renew_sql_ = "UPDATE " + locks_ + " SET expires_at = " + now +
                 " + :ttl"
                 " WHERE name = :name AND owner = :owner AND token = :token AND expires_at >= " +
                 now + " RETURNING expires_at, " + now;
    current_token_sql_ = "SELECT token FROM " + tokens_ + " WHERE name = :name";
    keep_sql_ = "SELECT " + now;
    row_lock_sql_ = "INSERT INTO " + prefix_ +
                    "_rows (name, token, owner, locked_at, created_at)"
                    " VALUES (:name, :token, :owner, " +
                    now + ", " + now +
                    ")"
                    " ON CONFLICT (name) DO UPDATE SET token = excluded.token,"
                    " owner = excluded.owner, locked_at = excluded.locked_at RETURNING locked_at";
}

}  // namespace sqlock::detail::sqlite_engine

namespace sqlock::detail {

std::unique_ptr<dialect> make_sqlite_dialect(std::string const& prefix, store_options const& options) {
    return std::make_unique<sqlite_engine::sqlite_dialect>(prefix, options);
}

}  // namespace sqlock::detail
