// MariaDB / MySQL: the text of the statements, built once per dialect.
#include "dialect/mysql/mysql.hpp"

namespace sqlock::detail::mysql_engine {

mysql_dialect::mysql_dialect(std::string const& prefix, store_options const& options) : dialect(prefix, options) {
    acquire_sql_ = "CALL " + prefix_ + "_acquire_v2(?, ?, ?, ?, ?, ?)";
    acquire_shared_sql_ = "CALL " + prefix_ + "_acquire_shared(?, ?, ?, ?, ?, ?, ?)";
    renew_sql_ = "CALL " + prefix_ + "_renew(?, ?, ?, ?)";
    // MySQL has no DELETE ... RETURNING. An unmarked row goes in one statement; a marked one (or
    // none of ours) is read, then deleted, and its waiter rung (release()).
    std::string const ours = " WHERE name = ? AND owner = ? AND token = ?";
    release_sql_ = "DELETE FROM " + locks_ + ours + " AND waiters = 0";
    marked_sql_ = "SELECT waiters FROM " + locks_ + ours;
    release_marked_sql_ = "DELETE FROM " + locks_ + ours;
    // Only an unmarked row is written: a herd of waiters would otherwise queue on the row's lock
    // (READ COMMITTED's semi-consistent read skips a marked row without waiting for it). The
    // mark reads the live row first (mark_seen_sql_): marked already, gone, or to be written.
    // The mark is the marking store's listener connection: its release wakes that store's waiters
    // only. Waking every listening store made each release a herd of busy acquires (each a durable
    // transaction), which starved the holders' releases (B02: a third of the grants).
    mark_sql_ = "UPDATE " + locks_ + " SET waiters = ? WHERE name = ? AND expires_at >= NOW(6) AND waiters = 0";
    mark_seen_sql_ = "SELECT waiters FROM " + locks_ + " WHERE name = ? AND expires_at >= NOW(6)";
    // Shorter than the connection's read timeout (at least 32 s, connect_string).
    bell_sql_ = "SELECT SLEEP(20) AS " + prefix_ + "_bell";
    mariadb_ = flavour_statements::of(server_flavour::mariadb);
    mysql_ = flavour_statements::of(server_flavour::mysql);
    // Autocommit. LAST_INSERT_ID(expr), on the insert and on the update path,
    // comes back in the statement's OK packet (mysql_stmt_insert_id): the
    // token without a second statement. INSERT ... SELECT: MySQL refuses a
    // subquery on the insert target inside VALUES. Under READ COMMITTED the
    // floor is read without a lock.
    draw_sql_ = "INSERT INTO " + tokens_ + " (name, token) SELECT ?, LAST_INSERT_ID(" + first_token_sql() +
                ") ON DUPLICATE KEY UPDATE token = LAST_INSERT_ID(token + 1)";
    // Equal tokens pass: one holder may write several times. The read-back is a
    // locking read: a plain one would see the caller's REPEATABLE READ snapshot.
    fence_sql_ = "INSERT INTO " + fences_ +
                 " (resource, token) VALUES (:resource, :token)"
                 " ON DUPLICATE KEY UPDATE token = IF(token <= VALUES(token), VALUES(token), token)";
    fence_seen_sql_ = "SELECT token FROM " + fences_ + " WHERE resource = :resource FOR UPDATE";

    auto const rows = prefix_ + "_rows";
    ensure_row_sql_ = "INSERT IGNORE INTO " + rows + " (name, created_at) VALUES (:name, NOW(6))";
    // SYSDATE(6), unlike NOW(6), is read when the row is returned, so after
    // it was locked: when the lock was granted, recorded by the UPDATE below
    // without reading it back.
    std::string lock = "SELECT token, ";  // appended: GCC 12 warns falsely on "lit" + string&& (bug 105329)
    lock += epoch_us_sql("SYSDATE(6)");
    lock += " FROM " + rows + " WHERE name = ? FOR UPDATE";
    // SKIP LOCKED answers "busy" without an error (MariaDB 10.6+).
    try_lock_sql_ = lock + " SKIP LOCKED";
    wait_lock_sql_ = lock;
    record_sql_ = "UPDATE " + rows +
                  " SET token = ?, owner = ?,"
                  " locked_at = TIMESTAMPADD(MICROSECOND, ?, '1970-01-01 00:00:00') WHERE name = ?";
    exists_sql_ = "SELECT COUNT(*) FROM " + rows + " WHERE name = ?";
    keep_sql_ = "SELECT ";
    keep_sql_ += epoch_us_sql("NOW(6)");
    keep_sql_ += " FROM " + rows + " WHERE name = ?";
}

}  // namespace sqlock::detail::mysql_engine

namespace sqlock::detail {

std::unique_ptr<dialect> make_mysql_dialect(std::string const& prefix, store_options const& options) {
    return std::make_unique<mysql_engine::mysql_dialect>(prefix, options);
}

}  // namespace sqlock::detail
