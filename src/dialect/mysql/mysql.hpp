// MariaDB and MySQL through MySQL Connector/C (libmariadb).
//
// Acquire and renew are each one round trip: a CALL of a stored procedure of
// schema/mysql.sql (<prefix>_acquire_v2, <prefix>_renew) that runs one short
// transaction on the server. Acquire bumps the name's token row (its row lock is
// held to COMMIT, so grants happen in token order), upserts the lock row with
// INSERT ... ON DUPLICATE KEY UPDATE that changes it only when expired, and
// reads back whether the row now carries the token it drew. The session runs READ
// COMMITTED, which avoids the gap-lock deadlocks REPEATABLE READ has on a hot
// unique key; the deadlocks that remain (errno 1213) are retried by the store.
//
// The CALLs, the release and the token draw are prepared on the server once
// per pooled connection with libmariadb's own statement API (SOCI's MySQL
// backend substitutes parameters into the query text and prepares nothing),
// and kept in this dialect's statement cache.
#pragma once

#include "detail/dialect.hpp"
#include "detail/failpoint.hpp"

#include <sqlock/errors.hpp>

#include <soci/mysql/soci-mysql.h>
#include <soci/soci.h>

#include <errmsg.h>
#include <mysql.h>

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <optional>
#include <string>
#include <utility>

namespace sqlock::detail::mysql_engine {

// A statement prepared on the server with libmariadb's API. Errors, a broken
// connection included, are thrown as SOCI's MySQL error with the server's (or
// client library's) errno (throw_client_error), so that classify() treats them
// as any other.
class server_statement {
public:
    server_statement(MYSQL* conn, std::string sql) : sql_(std::move(sql)), conn_(conn), stmt_(mysql_stmt_init(conn)) {
        if (stmt_ == nullptr) throw_client_error(engine::mysql, mysql_error(conn), static_cast<int>(mysql_errno(conn)));
        if (mysql_stmt_prepare(stmt_, sql_.data(), sql_.size()) != 0) {
            std::string const message = mysql_stmt_error(stmt_);
            int const code = static_cast<int>(mysql_stmt_errno(stmt_));
            mysql_stmt_close(stmt_);
            throw_client_error(engine::mysql, message, code);
        }
    }
    // Sends COM_STMT_CLOSE, which has no answer: on a connection that was shut
    // down the write fails at once. Destroyed before its connection is closed.
    ~server_statement() { mysql_stmt_close(stmt_); }
    server_statement(server_statement const&) = delete;
    server_statement& operator=(server_statement const&) = delete;

    /// Execute with `params` bound and read the whole answer: the first row of
    /// the first result set into `out` (NULL reads as 0), then every further
    /// result, down to the final status a CALL sends, so the connection is
    /// ready for the next statement. True when a row was read.
    template <std::size_t N>
    bool execute(MYSQL_BIND* params, std::array<long long, N>& out) {
        if (mysql_stmt_bind_param(stmt_, params) != 0 || mysql_stmt_execute(stmt_) != 0) fail();
        bool got = false, read = false, misshapen = false;
        for (;;) {
            if (mysql_stmt_field_count(stmt_) > 0) {
                std::array<MYSQL_BIND, N> into{};
                std::array<my_bool, N> null{};
                for (std::size_t i = 0; i < N; ++i) {
                    into[i].buffer_type = MYSQL_TYPE_LONGLONG;
                    into[i].buffer = &out[i];
                    into[i].is_null = &null[i];
                }
                // Only the first result set is ours: a CALL sends nothing else.
                misshapen = misshapen || (!read && mysql_stmt_field_count(stmt_) != N);
                if (!std::exchange(read, true) && !misshapen) {
                    if (mysql_stmt_bind_result(stmt_, into.data()) != 0) fail();
                    int const r = mysql_stmt_fetch(stmt_);
                    if (r == 1) fail();
                    got = r != MYSQL_NO_DATA;
                    for (std::size_t i = 0; i < N; ++i)
                        if (null[i] != 0) out[i] = 0;
                }
                if (mysql_stmt_free_result(stmt_) != 0) fail();  // the rows left, unread
            }
            int const next = mysql_stmt_next_result(stmt_);
            if (next > 0) fail();
            if (next < 0) break;
        }
        // An older or altered procedure (CREATE PROCEDURE IF NOT EXISTS keeps
        // what it finds): say so rather than read its answer wrong.
        if (misshapen)
            throw_client_error(engine::mysql,
                               "sqlock: the answer of '" + sql_ + "' does not have " + std::to_string(N) +
                                   " columns: apply this version's schema/mysql.sql (drop the procedure first)",
                               0);
        return got;
    }

    [[nodiscard]] unsigned long long affected_rows() const { return mysql_stmt_affected_rows(stmt_); }
    [[nodiscard]] unsigned long long insert_id() const { return mysql_stmt_insert_id(stmt_); }

private:
    // A statement that failed on a live connection may have left a transaction
    // open: the procedures' handlers roll back every SQL error (a deadlock,
    // 1213, or a lock wait that ran out, 1205, the common ones), but a killed or
    // interrupted statement runs no handler. Roll back before the connection is
    // reused; errnos from 2000 up are the client library's (connection trouble).
    [[noreturn]] void fail() {
        std::string const message = mysql_stmt_error(stmt_);
        int const code = static_cast<int>(mysql_stmt_errno(stmt_));
        if (code < CR_MIN_ERROR && code != 1213 && code != 1205 && code != 1927 && code != 1053)
            (void)mysql_rollback(conn_);
        throw_client_error(engine::mysql, message, code);
    }

    std::string sql_;
    MYSQL* conn_;
    MYSQL_STMT* stmt_;
};

/// Whether the server is a Galera node replicating this session's writes
/// (`wsrep_on` = ON; OFF on a plain MariaDB, absent on MySQL).
bool galera(soci::session& s);

inline MYSQL_BIND bytes_param(std::string const& value, unsigned long& length) {
    MYSQL_BIND b{};
    // A BLOB parameter is taken as bytes: no conversion from the connection's
    // character set on the way to the VARBINARY columns.
    b.buffer_type = MYSQL_TYPE_BLOB;
    b.buffer = const_cast<char*>(value.data());
    b.buffer_length = length = value.size();
    b.length = &length;
    return b;
}

inline MYSQL_BIND integer_param(long long& value) {
    MYSQL_BIND b{};
    b.buffer_type = MYSQL_TYPE_LONGLONG;
    b.buffer = &value;
    return b;
}

/// The statements that differ between MariaDB and MySQL (flavour.cpp, the one
/// place to review for MySQL); the rest of this dialect is the same SQL on both.
struct flavour_statements {
    /// Appended to every session's SET SESSION at open, before the idle bound's seconds (or empty: none).
    std::string session_idle_bound;
    /// The row lock's holding transaction: binds the idle bound's seconds, then innodb_lock_wait_timeout's.
    std::string row_bounds;
    /// Put before the INSERT that creates a row lock's row, followed by its wait in whole seconds and
    /// " FOR ": bounds that INSERT's wait for another client's transaction on the same row by the
    /// caller's (MariaDB's SET STATEMENT, 0 = no wait); empty: the session's innodb_lock_wait_timeout.
    std::string ensure_row_wait;
    /// Its release: autocommit = 1 (a commit) and the session's bounds put back; binds the idle bound
    /// the session had at open (when row_end_binds_idle), then innodb_lock_wait_timeout's.
    std::string row_end;
    bool row_end_binds_idle = true;
    /// A new idle bound during the hold (a TTL changed): binds its seconds.
    std::string row_idle;
    /// The parked listeners to ring: binds :bell (the statement they park in); answers one id each.
    std::string listeners;
    /// One parked listener by its connection: binds :id and :bell; answers its id, or nothing.
    std::string listener;
    /// Followed by an id of the above: interrupts that listener's SLEEP.
    std::string ring;
    /// The row lock's ROLLBACK (a busy try) as a prepared statement; else the client library's
    /// mysql_rollback(), a plain query.
    bool prepares_rollback = true;

    /// The statements of `flavour` (mariadb or mysql).
    static flavour_statements of(server_flavour flavour);
};

/// The statements prepared on one connection.
struct mysql_cache final : statement_cache {
    std::optional<server_statement> call_acquire, call_acquire_shared, call_renew, delete_row, read_marked,
        delete_marked, mark_waiting, mark_seen, draw_token;
    // The row lock's.
    std::optional<server_statement> row_bounds, row_end, row_idle, row_try, row_wait, row_exists, row_record, row_keep,
        row_rollback;
    long long idle_seconds = 0;  // the idle bound as the row lock last set it (0: unknown)
    int keepalive_seconds = 0;   // the TCP keepalive the row lock last set on the socket (0: none)
};

/// `slot`'s statement, prepared on `s`'s connection if it is not yet.
inline server_statement& prepared(std::optional<server_statement>& slot, pooled_session s, std::string const& sql) {
    if (!slot) {
        auto* backend = static_cast<soci::mysql_session_backend*>(s.session.get_backend());
        slot.emplace(backend->conn_, sql);
    }
    return *slot;
}

/// Run `f` on `slot`'s statement. After a failure of the client library (not an
/// error the server answered) the statement's state is unknown: it is dropped,
/// and prepared again on its next use (on a reopened connection, as a rule).
template <class F>
inline auto on(std::optional<server_statement>& slot, F&& f) {
    try {
        return f(*slot);
    } catch (soci::mysql_soci_error const& e) {
        if (e.err_num_ >= CR_MIN_ERROR) slot.reset();
        throw;
    }
}

/// What store_impl::run last let the engine wait on this thread (set_engine_wait),
/// and for which session: run() sets it, then calls the operation on the same thread.
struct engine_wait_note {
    soci::session const* session = nullptr;
    std::chrono::milliseconds wait{0};
};
inline thread_local engine_wait_note engine_wait_of_call;

class mysql_dialect final : public dialect {
public:
    mysql_dialect(std::string const& prefix, store_options const& options);

    // ---- the engine driver (driver.cpp) ----
    sqlock::engine engine() const noexcept override { return engine::mysql; }
    std::string connect_string(url_parts const& url) const override;
    void open(soci::session& s, std::string const& connect_string) const override;
    void read_server_answer(soci::session& s, std::string& version, std::string& comment) const override;
    void set_engine_wait(soci::session& s, std::chrono::milliseconds wait) const override {
        engine_wait_of_call = {&s, wait};
    }
    int socket_of(soci::session& s) const override;
    idle_news read_idle(soci::session& s, bool hung_up) const override;
    failure classify(soci::soci_error const& e, soci::session&) const override;
    std::string native_code(soci::soci_error const& e) const override;
    // A connection of its own parked in bell_sql_ (a SLEEP), which a release that a waiter
    // marked interrupts with KILL QUERY ID: MariaDB has no NOTIFY.
    std::unique_ptr<release_listener> listen(std::string const& connect_string, notify_fn on_notify) const override;
    // The connection id of this store's listener while it is connected, else 0 (set by the listener).
    void set_listener_id(long long id) const noexcept { listener_id_.store(id, std::memory_order_relaxed); }

    // ---- the schema (schema.cpp) ----
    // Refused on MySQL before 8.0.29 (no CREATE PROCEDURE IF NOT EXISTS): usage_error saying what to do.
    void create_schema(soci::session& s) const override;
    std::vector<std::pair<std::string, std::string>> added_columns() const override {
        auto columns = dialect::added_columns();
        columns.emplace_back("waiters", "BIGINT NOT NULL DEFAULT 0");
        return columns;
    }
    std::optional<std::string> relaxed_durability(soci::session& s) const override;
    bool multi_writer_cluster(soci::session& s) const override;
    // The procedures are part of the schema: a store on tables without them
    // says to apply schema/mysql.sql (or, with create_schema, creates them).
    std::vector<std::string> required_tables() const override;

    // ---- the table lock (table_lock.cpp) ----
    // `waiting` and busy: the live row is marked with this store's listener (its release will ring
    // that listener), in a second statement; a row another waiter marked first is left as it is.
    // No live row to mark (released since the busy answer): the acquire is tried once more at once.
    grant acquire(pooled_session ps, std::string const& name, std::string const& owner, std::int64_t attempt,
                  std::int64_t ttl_us, bool waiting, bool retry) const override;
    // <prefix>_acquire_shared: the grant and the rename in one transaction (one flush, where the
    // server's innodb_flush_log_at_trx_commit cannot be relaxed for one statement); the listener
    // the name's row was marked by is rung after the commit.
    bool grants_shared_at_once() const noexcept override { return true; }
    grant acquire_shared(pooled_session ps, std::string const& name, std::string const& reader,
                         std::string const& owner, std::int64_t attempt, std::int64_t ttl_us, bool waiting,
                         bool retry) const override;
    // One DELETE of an unmarked row. A marked one is read, deleted, and KILL QUERY ID sent to the
    // parked SLEEP of the listener the mark names, if this user can see it (its own threads); else
    // its waiters keep to their back-off.
    bool release(pooled_session ps, std::string const& name, std::string const& owner,
                 std::int64_t token) const override;
    // Marked for this store's listener, as a waiter marks (none parked: nothing to ring).
    bool mark_watched(pooled_session ps, std::string const& name) const override {
        auto const listener = listener_id_.load(std::memory_order_relaxed);
        if (listener == 0) return false;
        (void)mark(ps, name, listener);
        return true;
    }
    // The operator's force_release rings every listener, as PostgreSQL's NOTIFYs always.
    void notify_release(soci::session& s, std::string const&) const override { ring(s, 0); }
    std::optional<renewal> renew(pooled_session ps, std::string const& name, std::string const& owner,
                                 std::int64_t token, std::int64_t ttl_us) const override;

    // ---- the row lock (row_lock.cpp) ----
    void ensure_row(soci::session& s, std::string const& name, std::chrono::milliseconds wait) const override {
        auto const& f = flavoured();
        if (f.ensure_row_wait.empty()) {
            s << ensure_row_sql_, soci::use(name, "name");
            return;
        }
        auto const seconds = std::max<long long>(0, (wait.count() + 999) / 1000);
        s << f.ensure_row_wait + std::to_string(seconds) + " FOR " + ensure_row_sql_, soci::use(name, "name");
    }
    std::optional<grant> lock_row(pooled_session ps, std::string const& name, std::string const& owner,
                                  std::chrono::milliseconds ttl, std::chrono::milliseconds wait,
                                  std::function<std::int64_t()> const& draw, bool& missing) const override;
    std::int64_t keep_row_lock(pooled_session ps, std::string const& name,
                               std::chrono::milliseconds ttl) const override;
    void end_row_lock(pooled_session ps, bool commit) const override;

    // ---- the token counters (tokens.cpp) ----
    std::int64_t draw_token(pooled_session ps, std::string const& name) const override;
    // No RETURNING with ON DUPLICATE KEY: make sure the row exists, then raise
    // it in one conditional UPDATE; it changed a row only for the call that won.
    bool majority_write(soci::session& s, std::string const& name, std::int64_t token,
                        std::string const& member_id) const override;
    std::string majority_raise_sql() const override;
    std::string define_semaphore_sql() const override {
        return "INSERT IGNORE INTO " + semaphores_table() + " (name, permits, created_at) VALUES (:name, :permits, " +
               now_sql() + ")";
    }
    std::string share_lock_sql() const override { return " LOCK IN SHARE MODE"; }
    std::string skip_held_rows_sql() const override { return " FOR UPDATE SKIP LOCKED"; }
    std::string majority_add_member_sql() const override {
        return "INSERT IGNORE INTO " + majority_members_table() + " (id) VALUES (:id)";
    }

    // ---- the fence (fence.cpp) ----
    std::optional<std::int64_t> fence(soci::session& s, std::string const& resource, std::int64_t token) const override;

    // ---- the reaper and the operator's calls (admin.cpp) ----
    // MySQL has no DELETE ... RETURNING: measure first, then delete the same
    // bounded set, in one READ COMMITTED transaction. The DELETE repeats the
    // condition, so a row renewed in between is kept.
    reap_batch reap(soci::session& s, std::int64_t grace_us, std::optional<std::int64_t> max_age_us, int batch,
                    bool dry_run) const override;
    // No DELETE ... RETURNING: the purge in steps (purge_tokens_stepwise), in one
    // READ COMMITTED transaction.
    token_purge_batch purge_tokens(soci::session& s, std::int64_t horizon_us, int batch, bool dry_run) const override;

protected:
    std::unique_ptr<statement_cache> make_cache() const override { return std::make_unique<mysql_cache>(); }
    // A table or a stored procedure of that name.
    std::string table_exists_sql() const override;
    std::string now_sql() const override { return "NOW(6)"; }
    std::string plus_ttl_sql(std::string const& timestamp) const override {
        return timestamp + " + INTERVAL :ttl MICROSECOND";
    }
    std::string epoch_us_sql(std::string const& column) const override {
        return "TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', " + column + ")";
    }
    std::string minus_sql(std::string const& timestamp, std::string const& param) const override {
        return "(" + timestamp + " - INTERVAL :" + param + " MICROSECOND)";
    }

private:
    [[nodiscard]] mysql_cache& cache(pooled_session s) const { return static_cast<mysql_cache&>(dialect::cache(s)); }
    // How long the server may spend inside one acquire on `s` (p_budget_us of
    // <prefix>_acquire_v2) before it rolls back: the engine wait store_impl::run gave
    // this call, plus half of io_timeout. The client gives up at that wait plus
    // io_timeout, counted from before it sent the CALL; the server counts from
    // when it starts the CALL, so it stops first unless the CALL took more than
    // half of io_timeout to reach it. At most 15 s more than the wait: the
    // client library's read_timeout (see connect_string) ends a call too.
    [[nodiscard]] long long budget_us(soci::session const& s) const {
        auto const wait = engine_wait_of_call.session == &s ? engine_wait_of_call.wait : options_.lock_wait_timeout;
        auto const slack = std::min<std::chrono::milliseconds>(options_.io_timeout / 2, std::chrono::seconds(15));
        return std::chrono::duration_cast<std::chrono::microseconds>(wait + slack).count();
    }
    std::string acquire_sql_;
    std::string acquire_shared_sql_;
    std::string renew_sql_;
    std::string release_sql_;         // the row, if ours and unmarked
    std::string marked_sql_;          // its mark, if ours
    std::string release_marked_sql_;  // the row, if ours
    std::string mark_sql_;
    std::string mark_seen_sql_;  // the live row's mark
    // Mark the live row of `name` with `listener`: false when there is no live marked row (it was
    // released or ran out since the busy answer), so the caller tries again at once.
    bool mark(pooled_session ps, std::string const& name, long long listener) const;
    // `call` (true: granted), and while `waiting` and busy, mark() and `call` once more when there
    // was no live row to mark (acquire, acquire_shared; defined in table_lock.cpp, which uses it).
    template <class Call>
    bool granting(pooled_session ps, std::string const& name, bool waiting, Call const& call) const;
    std::string bell_sql_;  // the listeners' parked statement; releasers find it in the process list
    flavour_statements mariadb_;
    flavour_statements mysql_;
    // MySQL's statements rather than MariaDB's: set by open() from the server's answer.
    mutable std::atomic<bool> on_mysql_{false};
    [[nodiscard]] flavour_statements const& flavoured() const noexcept {
        return on_mysql_.load(std::memory_order_relaxed) ? mysql_ : mariadb_;
    }
    mutable std::atomic<long long> listener_id_{0};
    // KILL QUERY ID to the parked SLEEP of listener `connection`, or of every listener (0).
    void ring(soci::session& s, long long connection) const;
    std::string draw_sql_;
    std::string fence_sql_;
    std::string fence_seen_sql_;
    std::string ensure_row_sql_;
    std::string try_lock_sql_;
    std::string wait_lock_sql_;
    std::string record_sql_;
    std::string exists_sql_;
    std::string keep_sql_;
    // The idle bound and innodb_lock_wait_timeout of the session, and autocommit off.
    void set_bounds(mysql_cache& c, pooled_session ps, long long idle, long long lock_wait) const;
    static constexpr long long max_wait_seconds = 30;  // read_timeout is at least 31 s
    static long long idle_seconds(std::chrono::milliseconds ttl) {
        return std::max<long long>(1, (ttl.count() + 999) / 1000);
    }
};

}  // namespace sqlock::detail::mysql_engine
