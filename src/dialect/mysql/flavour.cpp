// MariaDB / MySQL: every statement that differs between the two, in one place.
//
// CI runs MariaDB 10.11; Debian 12 ships no MySQL server, so MySQL (8.0.29 and
// later) is supported from its manual, and what differs is kept here, small
// enough to review against it. Everything else in this dialect and in
// schema/mysql.sql is the same SQL on both (docs/table-lock.md, feature by
// feature). Every MySQL statement here is valid on MariaDB too: the tests run
// them against MariaDB under a faked server answer (dialect/server.hpp).
//
// MySQL has no idle_transaction_timeout. A session whose client stops inside
// a transaction keeps its row locks until the server's wait_timeout (hours by
// default) ends the session. The row lock, which holds a transaction on purpose,
// bounds its session with wait_timeout instead: the server ends a session idle
// for that long, in a transaction or not, which on the holding session is the
// same bound (a keep-alive is due well within the TTL), and MySQL 8.0.24+
// tells the client why before it closes (ER_CLIENT_INTERACTION_TIMEOUT, 4031).
// The release puts the server's default back. Other sessions get no idle bound
// of sqlock's on MySQL: their transactions are single statements or short
// (the reaper's two statements), so only a client stopped between those holds
// what they locked, for wait_timeout.
//
// MySQL prepares COMMIT and SET, but its manual does not list ROLLBACK: the
// row lock's ROLLBACK (after a busy try) is libmariadb's mysql_rollback(), a
// plain query, where MariaDB's is prepared like the rest.
//
// MySQL's process list has no QUERY_ID and MySQL has no KILL QUERY ID: a ring
// interrupts the listener's connection with KILL QUERY <connection id>. That
// connection runs nothing but its SLEEP, so a ring that lands between two
// SLEEPs interrupts the next one: a wake-up, never a lost one. (On MariaDB,
// KILL QUERY ID of a SLEEP that has just ended is refused, 1957, and that ring
// is lost: its waiters fall back to their back-off.)
#include "dialect/mysql/mysql.hpp"

namespace sqlock::detail::mysql_engine {

flavour_statements flavour_statements::of(server_flavour flavour) {
    // The holding transaction's bounds: the server ends a holder idle in it
    // for a TTL, and a waiting lock gives up after innodb_lock_wait_timeout
    // (FOR UPDATE WAIT n takes no parameter: it could not be prepared once).
    // autocommit = 0 opens the transaction at the lock statement: no START
    // TRANSACTION round trip. The release's autocommit = 1 commits it (an
    // implicit commit) and puts the bounds back to the session's defaults in
    // the same round trip, so that no other statement on the pooled connection
    // (a table lock's CALL waiting for a row, the reaper's transaction) runs
    // under the row lock's bounds.
    flavour_statements f;
    if (flavour == server_flavour::mysql) {
        f.row_bounds = "SET SESSION wait_timeout = ?, SESSION innodb_lock_wait_timeout = ?, SESSION autocommit = 0";
        f.row_end =
            "SET SESSION autocommit = 1, SESSION wait_timeout = @@GLOBAL.wait_timeout, "
            "SESSION innodb_lock_wait_timeout = ?";
        f.row_end_binds_idle = false;
        f.row_idle = "SET SESSION wait_timeout = ?";
        f.listeners =
            "SELECT ID FROM information_schema.PROCESSLIST"
            " WHERE INFO = :bell AND DB = DATABASE() AND ID <> CONNECTION_ID()";
        f.listener = "SELECT ID FROM information_schema.PROCESSLIST WHERE ID = :id AND INFO = :bell";
        f.ring = "KILL QUERY ";
        // MySQL's manual lists COMMIT and SET among the statements it prepares, not ROLLBACK.
        f.prepares_rollback = false;
        return f;
    }
    f.session_idle_bound = ", SESSION idle_transaction_timeout = ";
    // MariaDB bounds the INSERT that creates a row lock's row by the caller's wait. (MySQL has no SET
    // STATEMENT, and innodb_lock_wait_timeout is not a SET_VAR hint: there it waits the session's.)
    f.ensure_row_wait = "SET STATEMENT innodb_lock_wait_timeout = ";
    f.row_bounds =
        "SET SESSION idle_transaction_timeout = ?, SESSION innodb_lock_wait_timeout = ?, SESSION autocommit = 0";
    f.row_end =
        "SET SESSION autocommit = 1, SESSION idle_transaction_timeout = ?, SESSION innodb_lock_wait_timeout = ?";
    f.row_idle = "SET SESSION idle_transaction_timeout = ?";
    f.listeners =
        "SELECT QUERY_ID FROM information_schema.PROCESSLIST"
        " WHERE INFO = :bell AND DB = DATABASE() AND ID <> CONNECTION_ID()";
    // By connection id and statement: an id from before a server restart may name another connection.
    f.listener = "SELECT QUERY_ID FROM information_schema.PROCESSLIST WHERE ID = :id AND INFO = :bell";
    // The query, not the connection: never the listener's next statement.
    f.ring = "KILL QUERY ID ";
    return f;
}

}  // namespace sqlock::detail::mysql_engine
