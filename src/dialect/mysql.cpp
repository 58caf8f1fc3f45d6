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

#include <array>
#include <chrono>
#include <cstddef>
#include <optional>
#include <string>
#include <utility>

namespace sqlock::detail {
namespace {

// A SOCI MySQL connect-string value, single-quoted.
std::string quote(std::string const& value) {
    std::string out = "'";
    for (char c : value) {
        if (c == '\'' || c == '\\') out += '\\';
        out += c;
    }
    return out + "'";
}

// A statement prepared on the server with libmariadb's API. Errors, a broken
// connection included, are thrown as SOCI's MySQL error with the server's (or
// client library's) errno, so that classify() treats them as any other.
class server_statement {
public:
    server_statement(MYSQL* conn, std::string sql) : sql_(std::move(sql)), conn_(conn), stmt_(mysql_stmt_init(conn)) {
        if (stmt_ == nullptr) throw soci::mysql_soci_error(mysql_error(conn), static_cast<int>(mysql_errno(conn)));
        if (mysql_stmt_prepare(stmt_, sql_.data(), sql_.size()) != 0) {
            auto e = error();
            mysql_stmt_close(stmt_);
            throw e;
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
            throw soci::mysql_soci_error("sqlock: the answer of '" + sql_ + "' does not have " + std::to_string(N) +
                                             " columns: apply this version's schema/mysql.sql (drop the procedure first)",
                                         0);
        return got;
    }

    [[nodiscard]] unsigned long long affected_rows() const { return mysql_stmt_affected_rows(stmt_); }
    [[nodiscard]] unsigned long long insert_id() const { return mysql_stmt_insert_id(stmt_); }

private:
    [[nodiscard]] soci::mysql_soci_error error() const {
        return {mysql_stmt_error(stmt_), static_cast<int>(mysql_stmt_errno(stmt_))};
    }

    // A statement that failed on a live connection may have left a transaction
    // open: the procedures' handlers roll back every SQL error (a deadlock,
    // 1213, or a lock wait that ran out, 1205, the common ones), but a killed or
    // interrupted statement runs no handler. Roll back before the connection is
    // reused; errnos from 2000 up are the client library's (connection trouble).
    [[noreturn]] void fail() {
        auto e = error();
        if (e.err_num_ < CR_MIN_ERROR && e.err_num_ != 1213 && e.err_num_ != 1205 && e.err_num_ != 1927 &&
            e.err_num_ != 1053)
            (void)mysql_rollback(conn_);
        throw e;
    }

    std::string sql_;
    MYSQL* conn_;
    MYSQL_STMT* stmt_;
};

MYSQL_BIND bytes_param(std::string const& value, unsigned long& length) {
    MYSQL_BIND b{};
    // A BLOB parameter is taken as bytes: no conversion from the connection's
    // character set on the way to the VARBINARY columns.
    b.buffer_type = MYSQL_TYPE_BLOB;
    b.buffer = const_cast<char*>(value.data());
    b.buffer_length = length = value.size();
    b.length = &length;
    return b;
}

MYSQL_BIND integer_param(long long& value) {
    MYSQL_BIND b{};
    b.buffer_type = MYSQL_TYPE_LONGLONG;
    b.buffer = &value;
    return b;
}

/// The statements prepared on one connection.
struct mysql_cache final : statement_cache {
    std::optional<server_statement> call_acquire, call_renew, delete_row, draw_token;
    // The row lock's.
    std::optional<server_statement> row_bounds, row_idle, row_begin, row_try, row_wait, row_exists, row_record,
        row_keep, row_commit, row_rollback;
    long long idle_seconds = 0;  // idle_transaction_timeout as the row lock last set it (0: unknown)
};

/// `slot`'s statement, prepared on `s`'s connection if it is not yet.
server_statement& prepared(std::optional<server_statement>& slot, pooled_session s, std::string const& sql) {
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
auto on(std::optional<server_statement>& slot, F&& f) {
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
thread_local engine_wait_note engine_wait_of_call;

class mysql_dialect final : public dialect {
public:
    mysql_dialect(std::string const& prefix, store_options const& options) : dialect(prefix, options) {
        acquire_sql_ = "CALL " + prefix_ + "_acquire_v2(?, ?, ?, ?, ?, ?)";
        renew_sql_ = "CALL " + prefix_ + "_renew(?, ?, ?, ?)";
        release_sql_ = "DELETE FROM " + locks_ + " WHERE name = ? AND owner = ? AND token = ?";
        // Autocommit. LAST_INSERT_ID(expr), on the insert and on the update path,
        // comes back in the statement's OK packet (mysql_stmt_insert_id): the
        // token without a second statement. INSERT ... SELECT: MySQL refuses a
        // subquery on the insert target inside VALUES. Under READ COMMITTED the
        // floor is read without a lock.
        draw_sql_ = "INSERT INTO " + tokens_ + " (name, token) SELECT ?, LAST_INSERT_ID(" + first_token_sql() +
                    ") ON DUPLICATE KEY UPDATE token = LAST_INSERT_ID(token + 1)";
        // Equal tokens pass: one holder may write several times. The read-back is a
        // locking read: a plain one would see the caller's REPEATABLE READ snapshot.
        fence_sql_ = "INSERT INTO " + fences_ + " (resource, token) VALUES (:resource, :token)"
                     " ON DUPLICATE KEY UPDATE token = IF(token <= VALUES(token), VALUES(token), token)";
        fence_seen_sql_ = "SELECT token FROM " + fences_ + " WHERE resource = :resource FOR UPDATE";

        auto const rows = prefix_ + "_rows";
        ensure_row_sql_ = "INSERT IGNORE INTO " + rows + " (name, created_at) VALUES (:name, NOW(6))";
        // The holding transaction's bounds: the server ends a holder idle in it
        // for a TTL, and a waiting lock gives up after innodb_lock_wait_timeout
        // (FOR UPDATE WAIT n takes no parameter: it could not be prepared once).
        // The same statement puts both back to the session's defaults.
        row_bounds_sql_ = "SET SESSION idle_transaction_timeout = ?, SESSION innodb_lock_wait_timeout = ?";
        row_idle_sql_ = "SET SESSION idle_transaction_timeout = ?";
        // SYSDATE(6), unlike NOW(6), is read when the row is returned, so after
        // it was locked: when the lock was granted, recorded by the UPDATE below
        // without reading it back.
        std::string lock = "SELECT token, ";  // appended: GCC 12 warns falsely on "lit" + string&& (bug 105329)
        lock += epoch_us_sql("SYSDATE(6)");
        lock += " FROM " + rows + " WHERE name = ? FOR UPDATE";
        // SKIP LOCKED answers "busy" without an error (MariaDB 10.6+).
        try_lock_sql_ = lock + " SKIP LOCKED";
        wait_lock_sql_ = lock;
        record_sql_ = "UPDATE " + rows + " SET token = ?, owner = ?,"
                      " locked_at = TIMESTAMPADD(MICROSECOND, ?, '1970-01-01 00:00:00') WHERE name = ?";
        exists_sql_ = "SELECT COUNT(*) FROM " + rows + " WHERE name = ?";
        keep_sql_ = "SELECT ";
        keep_sql_ += epoch_us_sql("NOW(6)");
        keep_sql_ += " FROM " + rows + " WHERE name = ?";
    }

    sqlock::engine engine() const noexcept override { return engine::mysql; }

    std::string connect_string(url_parts const& url) const override {
        auto seconds = std::max<long long>(1, (options_.connect_timeout.count() + 999) / 1000);
        // A read must outlast the longest server-side wait of one statement.
        auto read_seconds = seconds + (options_.lock_wait_timeout.count() + 999) / 1000 + 30;
        std::string c = "host=" + quote(url.host) + " dbname=" + quote(url.database) +
                        " connect_timeout=" + std::to_string(seconds) + " read_timeout=" +
                        std::to_string(read_seconds) + " write_timeout=" + std::to_string(read_seconds);
        if (url.port != 0) c += " port=" + std::to_string(url.port);
        if (!url.user.empty()) c += " user=" + quote(url.user);
        if (!url.password.empty()) c += " password=" + quote(url.password);
        auto charset = url.params.find("charset");
        c += " charset=" + quote(charset == url.params.end() ? "utf8mb4" : charset->second);
        for (auto const& [key, value] : url.params) {
            validate_param_name(key);
            if (key != "charset") c += " " + key + "=" + quote(value);
        }
        return c;
    }

    void open(soci::session& s, std::string const& connect_string) const override {
        // Never auto-reconnect (the default): a silent reconnect would drop a
        // transaction without telling us.
        s.open(*soci::factory_mysql(), connect_string);
        // Connector/C opens its socket without close-on-exec (libpq sets it): a
        // program the process starts (system, popen, posix_spawn) would keep the
        // connection open after this process dies, and a row lock held on it
        // would stay held until that program ends or the server's idle limit
        // (the TTL) runs out, not free at the holder's death.
        if (int fd = socket_of(s); fd >= 0) {
            int const flags = ::fcntl(fd, F_GETFD);
            if (flags >= 0) (void)::fcntl(fd, F_SETFD, flags | FD_CLOEXEC);
        }
        auto wait_seconds = std::max<long long>(1, (options_.lock_wait_timeout.count() + 999) / 1000);
        s << "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED";
        // idle_transaction_timeout: a client that stops inside a transaction of
        // several round trips (the reaper's, the row lock's between its
        // statements, a pause, a crash the server has not noticed) may hold row
        // locks other clients wait for; the server ends such a session instead of
        // letting it block them for wait_timeout (hours). The row lock raises it
        // to its TTL while it holds its transaction.
        s << "SET SESSION time_zone = '+00:00', SESSION innodb_lock_wait_timeout = " +
                 std::to_string(wait_seconds) + ", SESSION idle_transaction_timeout = " +
                 std::to_string(wait_seconds) +
                 ", SESSION sql_mode = 'STRICT_ALL_TABLES,NO_ZERO_IN_DATE,NO_ZERO_DATE,"
                 "ERROR_FOR_DIVISION_BY_ZERO,NO_ENGINE_SUBSTITUTION'";
    }

    grant acquire(pooled_session ps, std::string const& name, std::string const& owner, std::int64_t attempt,
                  std::int64_t ttl_us, bool /*waiting*/, bool retry) const override {
        auto& c = cache(ps);
        prepared(c.call_acquire, ps, acquire_sql_);
        long long id = attempt, again = retry ? 1 : 0, ttl = ttl_us, budget = budget_us(ps.session);
        unsigned long name_length = 0, owner_length = 0;
        std::array<MYSQL_BIND, 6> params{bytes_param(name, name_length), bytes_param(owner, owner_length),
                                         integer_param(id), integer_param(again), integer_param(ttl),
                                         integer_param(budget)};
        std::array<long long, 4> row{};  // ours, token, created, expires
        bool const got = on(c.call_acquire, [&](server_statement& st) { return st.execute(params.data(), row); });
        // The pause a client can still take inside an acquire: after the server
        // decided and committed, before the caller hears of it.
        SQLOCK_FAILPOINT("mysql.acquire.after_call");
        if (!got || row[0] != 1) return {};
        return {true, row[1], row[2], row[3]};
    }

    std::int64_t draw_token(pooled_session ps, std::string const& name) const override {
        // Autocommit: the counter is on disk (innodb_flush_log_at_trx_commit = 1,
        // checked at open) before the token is used.
        auto& c = cache(ps);
        prepared(c.draw_token, ps, draw_sql_);
        unsigned long name_length = 0;
        std::array<MYSQL_BIND, 1> params{bytes_param(name, name_length)};
        std::array<long long, 0> none{};
        return on(c.draw_token, [&](server_statement& st) {
            (void)st.execute(params.data(), none);
            return static_cast<std::int64_t>(st.insert_id());
        });
    }

    bool release(pooled_session ps, std::string const& name, std::string const& owner,
                 std::int64_t token) const override {
        auto& c = cache(ps);
        prepared(c.delete_row, ps, release_sql_);
        long long tok = token;
        unsigned long name_length = 0, owner_length = 0;
        std::array<MYSQL_BIND, 3> params{bytes_param(name, name_length), bytes_param(owner, owner_length),
                                         integer_param(tok)};
        std::array<long long, 0> none{};
        return on(c.delete_row, [&](server_statement& st) {
            (void)st.execute(params.data(), none);
            return st.affected_rows() > 0;
        });
    }

    std::optional<renewal> renew(pooled_session ps, std::string const& name, std::string const& owner,
                                 std::int64_t token, std::int64_t ttl_us) const override {
        auto& c = cache(ps);
        prepared(c.call_renew, ps, renew_sql_);
        long long tok = token, ttl = ttl_us;
        unsigned long name_length = 0, owner_length = 0;
        std::array<MYSQL_BIND, 4> params{bytes_param(name, name_length), bytes_param(owner, owner_length),
                                         integer_param(tok), integer_param(ttl)};
        std::array<long long, 3> row{};  // renewed, expires, now
        bool const got = on(c.call_renew, [&](server_statement& st) { return st.execute(params.data(), row); });
        if (!got || row[0] != 1) return std::nullopt;
        return renewal{row[1], row[2]};
    }

    void set_engine_wait(soci::session& s, std::chrono::milliseconds wait) const override {
        engine_wait_of_call = {&s, wait};
    }

    // No RETURNING with ON DUPLICATE KEY: make sure the row exists, then raise
    // it in one conditional UPDATE; it changed a row only for the call that won.
    bool majority_write(soci::session& s, std::string const& name, std::int64_t token) const override {
        long long tok = token;
        s << "INSERT IGNORE INTO " + majority_table() + " (name, token) VALUES (:name, 0)", soci::use(name, "name");
        soci::statement st = (s.prepare << "UPDATE " + majority_table() +
                                               " SET token = :token WHERE name = :name AND token < :below",
                              soci::use(tok, "token"), soci::use(name, "name"), soci::use(tok, "below"));
        st.execute(true);
        return st.get_affected_rows() > 0;
    }

    std::optional<std::string> relaxed_durability(soci::session& s) const override {
        long long flush = 1;
        s << "SELECT @@global.innodb_flush_log_at_trx_commit", soci::into(flush);
        if (flush != 1) return "innodb_flush_log_at_trx_commit = " + std::to_string(flush) + ", not 1";
        return std::nullopt;
    }

    int socket_of(soci::session& s) const override {
        auto* backend = static_cast<soci::mysql_session_backend*>(s.get_backend());
        return backend == nullptr || backend->conn_ == nullptr ? -1 : static_cast<int>(mysql_get_socket(backend->conn_));
    }

    // MySQL has no DELETE ... RETURNING: measure first, then delete the same
    // bounded set, in one READ COMMITTED transaction. The DELETE repeats the
    // condition, so a row renewed in between is kept.
    reap_batch reap(soci::session& s, std::int64_t grace_us, std::optional<std::int64_t> max_age_us, int batch,
                    bool dry_run) const override {
        long long grace = grace_us, age = max_age_us.value_or(0), limit = batch;
        std::string cond = "expires_at < " + minus_sql("NOW(6)", "grace");
        if (max_age_us) cond = "(" + cond + " OR created_at < " + minus_sql("NOW(6)", "age") + ")";
        std::string const measure = "SELECT COUNT(*), MIN(" + epoch_us_sql("expires_at") +
                                    "), COALESCE(SUM(CASE WHEN expires_at >= NOW(6) THEN 1 ELSE 0 END), 0) FROM "
                                    "(SELECT expires_at FROM " + locks_ + " WHERE " + cond +
                                    " ORDER BY expires_at LIMIT :lim) AS picked";
        std::string const remove = "DELETE FROM " + locks_ + " WHERE " + cond + " ORDER BY expires_at LIMIT :lim";
        long long rows = 0, oldest = 0, live = 0;
        soci::indicator oldest_ind = soci::i_null;
        soci::transaction tx(s);
        if (max_age_us)
            s << measure, soci::use(grace, "grace"), soci::use(age, "age"), soci::use(limit, "lim"),
                soci::into(rows), soci::into(oldest, oldest_ind), soci::into(live);
        else
            s << measure, soci::use(grace, "grace"), soci::use(limit, "lim"), soci::into(rows),
                soci::into(oldest, oldest_ind), soci::into(live);
        reap_batch r;
        if (!dry_run && rows > 0) {
            soci::statement st = max_age_us ? (s.prepare << remove, soci::use(grace, "grace"), soci::use(age, "age"),
                                               soci::use(limit, "lim"))
                                            : (s.prepare << remove, soci::use(grace, "grace"), soci::use(limit, "lim"));
            st.execute(true);
            rows = st.get_affected_rows();
        }
        tx.commit();
        r.rows = rows;
        r.live_purged = std::min(live, rows);
        if (oldest_ind == soci::i_ok && rows > 0) r.oldest_expiry_us = oldest;
        return r;
    }

    // No DELETE ... RETURNING: measure the batch, raise the floor to its highest
    // token, then delete the batch's counters whose token (read again under the
    // DELETE's row lock) is still at most that, in one READ COMMITTED
    // transaction. A counter drawn from in between is kept for a later pass.
    token_purge_batch purge_tokens(soci::session& s, std::int64_t horizon_us, int batch,
                                   bool dry_run) const override {
        long long horizon = horizon_us, limit = batch, picked = 0, highest = 0;
        soci::indicator highest_ind = soci::i_null;
        std::string const cond = purgeable_tokens_sql();
        soci::transaction tx(s);
        s << "SELECT COUNT(*), MAX(token) FROM (SELECT token FROM " + tokens_ + " WHERE " + cond +
                 " ORDER BY token LIMIT :lim) AS picked",
            soci::use(horizon, "horizon"), soci::use(limit, "lim"), soci::into(picked),
            soci::into(highest, highest_ind);
        long long deleted = 0;
        if (!dry_run && picked > 0 && highest_ind == soci::i_ok) {
            s << "INSERT INTO " + tokens_ + " (name, token) VALUES ('', :highest)"
                 " ON DUPLICATE KEY UPDATE token = GREATEST(token, VALUES(token))",
                soci::use(highest, "highest");
            soci::statement st = (s.prepare << "DELETE FROM " + tokens_ + " WHERE " + cond +
                                                   " AND token <= :highest ORDER BY token LIMIT :lim",
                                  soci::use(horizon, "horizon"), soci::use(highest, "highest"),
                                  soci::use(limit, "lim"));
            st.execute(true);
            deleted = st.get_affected_rows();
        }
        tx.commit();
        return {dry_run ? picked : deleted, picked};
    }

    std::optional<std::int64_t> fence(soci::session& s, std::string const& resource,
                                      std::int64_t token) const override {
        long long tok = token, stored = 0;
        s << fence_sql_, soci::use(resource, "resource"), soci::use(tok, "token");
        s << fence_seen_sql_, soci::use(resource, "resource"), soci::into(stored);
        if (stored <= tok) return std::nullopt;
        return stored;
    }

    void ensure_row(soci::session& s, std::string const& name) const override {
        s << ensure_row_sql_, soci::use(name, "name");
    }

    std::optional<grant> lock_row(pooled_session ps, std::string const& name, std::string const& owner,
                                  std::chrono::milliseconds ttl, std::chrono::milliseconds wait,
                                  std::function<std::int64_t()> const& draw, bool& missing) const override {
        auto& c = cache(ps);
        missing = false;
        // The server's TCP keepalive settings are global (tcp_keepalive_time):
        // see docs. On our side, probe the connection so a holder learns soon
        // that the server vanished.
        auto* backend = static_cast<soci::mysql_session_backend*>(ps.session.get_backend());
        if (auto fd = mysql_get_socket(backend->conn_); fd >= 0) {
            int on = 1;
            int idle = static_cast<int>(std::max<long long>(1, ttl.count() / 3000));
            int count = 3;
            ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof on);
            ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
            ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &idle, sizeof idle);
            ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof count);
        }
        // A wait is in whole seconds; the caller polls what is left below a
        // second. It also stays below the client's read timeout (see
        // connect_string), or the client would give up on a healthy server: the
        // caller waits again.
        long long const seconds = std::min<long long>(wait.count() / 1000, max_wait_seconds);
        set_bounds(c, ps, idle_seconds(ttl), std::max<long long>(1, seconds));
        run(c.row_begin, ps, "START TRANSACTION");
        unsigned long name_length = 0;
        std::array<MYSQL_BIND, 1> by_name{bytes_param(name, name_length)};
        std::array<long long, 2> row{};  // token, when locked
        bool got = false;
        if (seconds == 0) {
            prepared(c.row_try, ps, try_lock_sql_);
            got = on(c.row_try, [&](server_statement& st) { return st.execute(by_name.data(), row); });
            if (!got) {
                prepared(c.row_exists, ps, exists_sql_);
                std::array<long long, 1> count{};
                (void)on(c.row_exists, [&](server_statement& st) { return st.execute(by_name.data(), count); });
                missing = count[0] == 0;
            }
        } else {
            prepared(c.row_wait, ps, wait_lock_sql_);
            try {
                got = on(c.row_wait, [&](server_statement& st) { return st.execute(by_name.data(), row); });
            } catch (soci::soci_error const& e) {
                if (native_code(e) == "1205") return std::nullopt;  // waited the whole time: busy
                throw;
            }
            missing = !got;
        }
        if (!got) return std::nullopt;
        long long token = draw(), locked = row[1];
        unsigned long owner_length = 0;
        std::array<MYSQL_BIND, 4> params{integer_param(token), bytes_param(owner, owner_length),
                                         integer_param(locked), bytes_param(name, name_length)};
        prepared(c.row_record, ps, record_sql_);
        std::array<long long, 0> none{};
        (void)on(c.row_record, [&](server_statement& st) { return st.execute(params.data(), none); });
        return grant{true, token, locked, 0};
    }

    std::int64_t keep_row_lock(pooled_session ps, std::string const& name,
                               std::chrono::milliseconds ttl) const override {
        auto& c = cache(ps);
        // Any statement resets the idle limit: it is set again only when the TTL changed.
        if (long long idle = idle_seconds(ttl); idle != c.idle_seconds) {
            prepared(c.row_idle, ps, row_idle_sql_);
            std::array<MYSQL_BIND, 1> params{integer_param(idle)};
            std::array<long long, 0> none{};
            (void)on(c.row_idle, [&](server_statement& st) { return st.execute(params.data(), none); });
            c.idle_seconds = idle;
        }
        // It reads the locked row, so that it proves the transaction on its
        // table and a KILL QUERY can interrupt it like any statement of the
        // holder (a prepared table-less SELECT was never interrupted in
        // 500,000 tries: the server had no point at which to look).
        prepared(c.row_keep, ps, keep_sql_);
        unsigned long name_length = 0;
        std::array<MYSQL_BIND, 1> params{bytes_param(name, name_length)};
        std::array<long long, 1> now{};
        (void)on(c.row_keep, [&](server_statement& st) { return st.execute(params.data(), now); });
        return now[0];
    }

    void end_row_lock(pooled_session ps, bool commit) const override {
        auto& c = cache(ps);
        if (commit)
            run(c.row_commit, ps, "COMMIT");
        else
            run(c.row_rollback, ps, "ROLLBACK");
        auto const wait_seconds = std::max<long long>(1, (options_.lock_wait_timeout.count() + 999) / 1000);
        set_bounds(c, ps, wait_seconds, wait_seconds);  // the session's defaults (see open)
    }

    failure classify(soci::soci_error const& e, soci::session&) const override {
        auto* my = dynamic_cast<soci::mysql_soci_error const*>(&e);
        if (my == nullptr) return failure::other;
        switch (my->err_num_) {
            case 1213: return failure::transient;   // ER_LOCK_DEADLOCK: the transaction was rolled back
            case 1205: return failure::lock_wait;   // ER_LOCK_WAIT_TIMEOUT
            case 1146:                              // ER_NO_SUCH_TABLE
            case 1305:                              // ER_SP_DOES_NOT_EXIST: <prefix>_acquire_v2 or _renew
                return failure::schema;
            case 1044:                              // ER_DBACCESS_DENIED_ERROR
            case 1142:                              // ER_TABLEACCESS_DENIED_ERROR
            case 1143:                              // ER_COLUMNACCESS_DENIED_ERROR
            case 1370:                              // ER_PROCACCESS_DENIED_ERROR: EXECUTE on a procedure
                return failure::permission;
            case 1290:                              // ER_OPTION_PREVENTS_STATEMENT: --read-only
            case 1792:                              // ER_CANT_EXECUTE_IN_READ_ONLY_TRANSACTION
                return failure::read_only;
            case 1053:                              // ER_SERVER_SHUTDOWN
            case 1927:                              // ER_CONNECTION_KILLED
            case 2002: case 2003: case 2006: case 2013: case 2055:
            case 4031:                              // ER_CLIENT_INTERACTION_TIMEOUT
                return failure::connection;
            default: return my->get_error_category() == soci::soci_error::connection_error ? failure::connection
                                                                                            : failure::other;
        }
    }

    std::string native_code(soci::soci_error const& e) const override {
        if (auto* my = dynamic_cast<soci::mysql_soci_error const*>(&e)) return std::to_string(my->err_num_);
        return {};
    }

    // The procedures are part of the schema: a store on tables without them
    // says to apply schema/mysql.sql (or, with create_schema, creates them).
    std::vector<std::string> required_tables() const override {
        auto names = dialect::required_tables();
        names.push_back(prefix_ + "_acquire_v2");
        names.push_back(prefix_ + "_renew");
        return names;
    }

protected:
    std::unique_ptr<statement_cache> make_cache() const override { return std::make_unique<mysql_cache>(); }

    // A table or a stored procedure of that name.
    std::string table_exists_sql() const override {
        return "SELECT (SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = DATABASE() AND "
               "table_name = :t) + (SELECT COUNT(*) FROM information_schema.routines WHERE routine_schema = "
               "DATABASE() AND routine_type = 'PROCEDURE' AND routine_name = :t)";
    }
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
    std::string renew_sql_;
    std::string release_sql_;
    std::string draw_sql_;
    std::string fence_sql_;
    std::string fence_seen_sql_;
    std::string ensure_row_sql_;
    std::string try_lock_sql_;
    std::string wait_lock_sql_;
    std::string record_sql_;
    std::string exists_sql_;
    std::string row_bounds_sql_;
    std::string row_idle_sql_;
    std::string keep_sql_;

    // idle_transaction_timeout and innodb_lock_wait_timeout of the session.
    void set_bounds(mysql_cache& c, pooled_session ps, long long idle, long long lock_wait) const {
        prepared(c.row_bounds, ps, row_bounds_sql_);
        std::array<MYSQL_BIND, 2> params{integer_param(idle), integer_param(lock_wait)};
        std::array<long long, 0> none{};
        c.idle_seconds = 0;  // unknown until the SET succeeded
        (void)on(c.row_bounds, [&](server_statement& st) { return st.execute(params.data(), none); });
        c.idle_seconds = idle;
    }

    // A statement without parameters or results, prepared on first use.
    static void run(std::optional<server_statement>& slot, pooled_session ps, char const* sql) {
        prepared(slot, ps, sql);
        std::array<long long, 0> none{};
        (void)on(slot, [&](server_statement& st) { return st.execute(nullptr, none); });
    }

    static constexpr long long max_wait_seconds = 30;  // read_timeout is at least 31 s
    static long long idle_seconds(std::chrono::milliseconds ttl) { return std::max<long long>(1, (ttl.count() + 999) / 1000); }
};

}  // namespace

std::unique_ptr<dialect> make_mysql_dialect(std::string const& prefix, store_options const& options) {
    return std::make_unique<mysql_dialect>(prefix, options);
}

}  // namespace sqlock::detail
