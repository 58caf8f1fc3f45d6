// PostgreSQL: the text of the statements, built once per dialect.
#include "dialect/postgresql/postgresql.hpp"

namespace sqlock::detail::postgresql_engine {

postgresql_dialect::postgresql_dialect(std::string const& prefix, store_options const& options)
    : dialect(prefix, options) {
    // One statement: the CTE draws the name's next token, the upsert takes
    // the row if it is free or expired. `waiting` adds a mark on a live row
    // (its release will NOTIFY) and answers with the row as it stands, ours
    // or not. Acquired only when the row carries the token this very
    // statement drew, and our owner: a random attempt id proves nothing (a
    // forked child draws what its parent draws). A retry after a broken
    // connection also takes the row an earlier call of the same attempt and
    // owner wrote, committed after the clean-up had looked (its token is a
    // grant like any).
    auto const draw = "WITH t AS (INSERT INTO " + tokens_ + " AS t (name, token) VALUES (:name, " + first_token_sql() +
                      ") ON CONFLICT (name) DO UPDATE SET token = t.token + 1"
                      " RETURNING t.name, t.token),"
                      " w AS (INSERT INTO " +
                      locks_ +
                      " AS l (name, owner, token, holds, attempt, created_at, expires_at)"
                      " SELECT t.name, :owner, t.token, 1, :attempt, statement_timestamp(),"
                      " statement_timestamp() + CAST(:ttl AS double precision) * interval '1 microsecond' FROM t"
                      " ON CONFLICT (name) DO UPDATE SET ";
    auto const answer =
        " RETURNING l.owner, l.token, l.attempt, l.created_at, l.expires_at)"
        " SELECT CASE WHEN w.owner = :owner2 AND (w.token = t.token OR"
        " (:retry = 1 AND w.attempt = :attempt2)) THEN 1 ELSE 0 END, w.token, " +
        epoch_us_sql("w.created_at") + ", " + epoch_us_sql("w.expires_at") + " FROM w CROSS JOIN t";
    acquire_sql_ = draw +
                   "owner = excluded.owner, token = excluded.token, holds = 1, attempt = excluded.attempt,"
                   " created_at = excluded.created_at, expires_at = excluded.expires_at"
                   " WHERE l.expires_at < statement_timestamp()" +
                   answer;
    std::string waiting;
    for (auto column : {"owner", "token", "attempt", "created_at"})
        waiting += std::string(column) + " = CASE WHEN l.expires_at < statement_timestamp() THEN excluded." + column +
                   " ELSE l." + column + " END, ";
    waiting +=
        "holds = CASE WHEN l.expires_at < statement_timestamp() THEN 1 ELSE l.holds END,"
        " waiters = l.waiters OR l.expires_at >= statement_timestamp(),"
        " expires_at = CASE WHEN l.expires_at < statement_timestamp() THEN excluded.expires_at"
        " ELSE l.expires_at END";
    acquire_waiting_sql_ = draw + waiting + answer;
    draw_sql_ = "INSERT INTO " + tokens_ + " AS t (name, token) VALUES (:name, " + first_token_sql() +
                ")"
                " ON CONFLICT (name) DO UPDATE SET token = t.token + 1 RETURNING t.token";
    // A release need not wait for the disk: lost in a crash, it only delays
    // the next holder until the row expires (grants and renewals stay
    // durable). It NOTIFYs, at COMMIT in the same round trip, only when a
    // waiter marked the row: uncontended releases skip the notify queue lock.
    release_sql_ = "WITH d AS (DELETE FROM " + locks_ +
                   " WHERE name = :name AND owner = :owner AND token = :token RETURNING name, waiters)"
                   " SELECT 1 FROM d CROSS JOIN LATERAL set_config('synchronous_commit', 'off', true) AS c"
                   " LEFT JOIN LATERAL (SELECT pg_notify('" +
                   channel() + "', d.name) WHERE d.waiters) AS n ON true";

    auto const rows = prefix_ + "_rows";
    // The unique check waits for a transaction that inserted the same name (or
    // holds its row, updated): another client's, which created the row a moment
    // ago and locked it. That wait is bounded by the caller's (lock_timeout, set
    // for this statement's own transaction in its FROM list, evaluated first).
    ensure_row_sql_ = "INSERT INTO " + rows +
                      " (name, created_at) SELECT :name, clock_timestamp()"
                      " FROM set_config('lock_timeout', :wait, true) AS w"
                      " ON CONFLICT (name) DO NOTHING";
    // The holding transaction's settings travel in the lock statement (its
    // FROM list: evaluated before the row is locked or waited for, and kept
    // there by their volatile functions), and BEGIN travels with it in one
    // round trip (libpq's pipeline mode; the parameters are $n, for libpq's
    // own prepared statement, see row_lock.cpp). The server ends a holder that stays
    // idle in its transaction for a TTL, and probes the connection so that a
    // vanished host is noticed within about a TTL. Its COMMIT (the release)
    // need not wait for the disk nor a synchronous standby: a crash or a
    // failover aborts the transaction, which releases the row lock anyway;
    // the token is durable by the draw's own commit on another connection,
    // and that commit also flushes the previous holder's COMMIT record (WAL
    // is flushed in order), so the next holder never sees a release a crash
    // could undo. Lost, a release only loses the informational record
    // (owner, token, locked_at) of its grant.
    auto settings = [](bool waits) {
        return std::string(
                   " (SELECT set_config('synchronous_commit', 'off', true),"
                   " set_config('idle_in_transaction_session_timeout', $3, true),"
                   " set_config('tcp_keepalives_idle', $4, true),"
                   " set_config('tcp_keepalives_interval', $4, true),"
                   " set_config('tcp_keepalives_count', '3', true),"
                   " set_config('tcp_user_timeout', $3, true)") +
               (waits ? ", set_config('lock_timeout', $5, true)" : "") + ") AS settings";
    };
    auto const record = " SET owner = $2, locked_at = clock_timestamp()";
    auto const returning = " RETURNING " + epoch_us_sql("r.locked_at");
    // SKIP LOCKED answers "busy" without an error: NOWAIT would raise one,
    // abort the transaction and log it on the server.
    try_lock_sql_ = "WITH l AS (SELECT name FROM " + rows +
                    " WHERE name = $1 FOR UPDATE SKIP LOCKED)"
                    " UPDATE " +
                    rows + " AS r" + record + " FROM l," + settings(false) + " WHERE r.name = l.name" + returning;
    wait_lock_sql_ = "UPDATE " + rows + " AS r" + record + " FROM" + settings(true) + " WHERE r.name = $1" + returning;
    record_token_sql_ = "UPDATE " + rows + " SET token = :token WHERE name = :name";
    exists_sql_ = "SELECT COUNT(*) FROM " + rows + " WHERE name = :name";
    keep_sql_ = "SELECT ";  // appended: GCC 12 warns falsely on "lit" + string&& (bug 105329)
    keep_sql_ += epoch_us_sql("clock_timestamp()");
    keep_sql_ += " FROM set_config('idle_in_transaction_session_timeout', :idle, true)";
}

}  // namespace sqlock::detail::postgresql_engine

namespace sqlock::detail {

std::unique_ptr<dialect> make_postgresql_dialect(std::string const& prefix, store_options const& options) {
    return std::make_unique<postgresql_engine::postgresql_dialect>(prefix, options);
}

}  // namespace sqlock::detail
