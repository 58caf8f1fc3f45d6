// MariaDB and MySQL through MySQL Connector/C (libmariadb).
//
// Acquire is one short READ COMMITTED transaction: bump the name's token row
// (its row lock is held to COMMIT, so grants happen in token order), upsert the
// lock row with INSERT ... ON DUPLICATE KEY UPDATE that changes it only when
// expired, and read back which token the row now carries. READ COMMITTED avoids
// the gap-lock deadlocks REPEATABLE READ has on a hot unique key; the deadlocks
// that remain (errno 1213) are retried by the store.
#include "detail/dialect.hpp"
#include "detail/failpoint.hpp"

#include <sqlock/errors.hpp>

#include <soci/mysql/soci-mysql.h>
#include <soci/soci.h>

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

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

class mysql_dialect final : public dialect {
public:
    mysql_dialect(std::string const& prefix, store_options const& options) : dialect(prefix, options) {
        // LAST_INSERT_ID(expr) remembers the drawn token for the next statement on
        // this connection, on both the insert and the update path (the update's
        // call runs last).
        // INSERT ... SELECT: MySQL refuses a subquery on the insert target inside
        // VALUES. Under READ COMMITTED the floor is read without a lock.
        token_sql_ = "INSERT INTO " + tokens_ + " (name, token) SELECT :name, LAST_INSERT_ID(" + first_token_sql() +
                     ") ON DUPLICATE KEY UPDATE token = LAST_INSERT_ID(token + 1)";
        // Assignments run left to right and see earlier ones, so expires_at, which
        // every condition reads, is assigned last.
        auto expired = std::string("expires_at < NOW(6)");
        lock_sql_ = "INSERT INTO " + locks_ + " (name, owner, token, holds, attempt, created_at, expires_at)"
                    " VALUES (:name, :owner, LAST_INSERT_ID(), 1, :attempt, NOW(6), NOW(6) + INTERVAL :ttl MICROSECOND)"
                    " ON DUPLICATE KEY UPDATE"
                    " owner = IF(" + expired + ", VALUES(owner), owner),"
                    " token = IF(" + expired + ", VALUES(token), token),"
                    " holds = IF(" + expired + ", 1, holds),"
                    " attempt = IF(" + expired + ", VALUES(attempt), attempt),"
                    " created_at = IF(" + expired + ", VALUES(created_at), created_at),"
                    " expires_at = IF(" + expired + ", VALUES(expires_at), expires_at)";
        check_sql_ = "SELECT CASE WHEN token = LAST_INSERT_ID() AND owner = :owner THEN 1 ELSE 0 END, token, " +
                     epoch_us_sql("created_at") + ", " + epoch_us_sql("expires_at") + " FROM " + locks_ +
                     " WHERE name = :name";
        renew_sql_ = "UPDATE " + locks_ + " SET expires_at = NOW(6) + INTERVAL :ttl MICROSECOND"
                     " WHERE name = :name AND owner = :owner AND token = :token AND expires_at >= NOW(6)";
        renewed_sql_ = "SELECT " + epoch_us_sql("expires_at") + ", " + epoch_us_sql("NOW(6)") + " FROM " + locks_ +
                       " WHERE name = :name AND token = :token";
        // Equal tokens pass: one holder may write several times. The read-back is a
        // locking read: a plain one would see the caller's REPEATABLE READ snapshot.
        fence_sql_ = "INSERT INTO " + fences_ + " (resource, token) VALUES (:resource, :token)"
                     " ON DUPLICATE KEY UPDATE token = IF(token <= VALUES(token), VALUES(token), token)";
        fence_seen_sql_ = "SELECT token FROM " + fences_ + " WHERE resource = :resource FOR UPDATE";

        auto const rows = prefix_ + "_rows";
        ensure_row_sql_ = "INSERT IGNORE INTO " + rows + " (name, created_at) VALUES (:name, NOW(6))";
        // SKIP LOCKED answers "busy" without an error (MariaDB 10.6+).
        try_lock_sql_ = "SELECT token FROM " + rows + " WHERE name = :name FOR UPDATE SKIP LOCKED";
        wait_lock_sql_ = "SELECT token FROM " + rows + " WHERE name = :name FOR UPDATE WAIT ";
        record_sql_ = "UPDATE " + rows + " SET token = :token, owner = :owner, locked_at = NOW(6) WHERE name = :name";
        recorded_sql_ = "SELECT token, " + epoch_us_sql("locked_at") + " FROM " + rows + " WHERE name = :name";
        exists_sql_ = "SELECT COUNT(*) FROM " + rows + " WHERE name = :name";
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
        auto wait_seconds = std::max<long long>(1, (options_.lock_wait_timeout.count() + 999) / 1000);
        s << "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED";
        // idle_transaction_timeout: a client that stops between the statements of
        // an acquire (a pause, a crash the server has not noticed) holds the name's
        // token row; the server ends such a session instead of letting it block
        // the name for wait_timeout (hours).
        s << "SET SESSION time_zone = '+00:00', SESSION innodb_lock_wait_timeout = " +
                 std::to_string(wait_seconds) + ", SESSION idle_transaction_timeout = " +
                 std::to_string(wait_seconds) +
                 ", SESSION sql_mode = 'STRICT_ALL_TABLES,NO_ZERO_IN_DATE,NO_ZERO_DATE,"
                 "ERROR_FOR_DIVISION_BY_ZERO,NO_ENGINE_SUBSTITUTION'";
    }

    grant acquire(pooled_session ps, std::string const& name, std::string const& owner, std::int64_t attempt,
                  std::int64_t ttl_us, bool /*waiting*/) const override {
        soci::session& s = ps;
        long long ttl = ttl_us, id = attempt;
        int ours = 0;
        long long token = 0, created = 0, expires = 0;
        soci::transaction tx(s);
        s << token_sql_, soci::use(name, "name");
        SQLOCK_FAILPOINT("mysql.acquire.after_token");
        s << lock_sql_, soci::use(name, "name"), soci::use(owner, "owner"), soci::use(id, "attempt"),
            soci::use(ttl, "ttl");
        s << check_sql_, soci::use(owner, "owner"), soci::use(name, "name"), soci::into(ours), soci::into(token),
            soci::into(created), soci::into(expires);
        tx.commit();
        if (ours != 1) return {};
        return {true, token, created, expires};
    }

    std::int64_t draw_token(pooled_session ps, std::string const& name) const override {
        soci::session& s = ps;
        // Autocommit: the counter is on disk (innodb_flush_log_at_trx_commit = 1,
        // checked at open) before the token is used.
        long long token = 0;
        s << token_sql_, soci::use(name, "name");
        s << "SELECT LAST_INSERT_ID()", soci::into(token);
        return token;
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

    std::optional<renewal> renew(pooled_session ps, std::string const& name, std::string const& owner,
                                 std::int64_t token, std::int64_t ttl_us) const override {
        soci::session& s = ps;
        long long tok = token, ttl = ttl_us, expires = 0, now = 0;
        soci::statement st = (s.prepare << renew_sql_, soci::use(ttl, "ttl"), soci::use(name, "name"),
                              soci::use(owner, "owner"), soci::use(tok, "token"));
        st.execute(true);
        if (st.get_affected_rows() == 0) return std::nullopt;
        s << renewed_sql_, soci::use(name, "name"), soci::use(tok, "token"), soci::into(expires), soci::into(now);
        if (!s.got_data()) return std::nullopt;  // renewed, then expired and taken over at once
        return renewal{expires, now};
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

    void begin_row_lock(soci::session& s, std::chrono::milliseconds ttl) const override {
        // The server ends a holder idle in its transaction for a TTL. Its TCP
        // keepalive settings are global (tcp_keepalive_time): see docs. On our
        // side, probe the connection so a holder learns soon that the server vanished.
        auto* backend = static_cast<soci::mysql_session_backend*>(s.get_backend());
        if (auto fd = mysql_get_socket(backend->conn_); fd >= 0) {
            int on = 1;
            int idle = static_cast<int>(std::max<long long>(1, ttl.count() / 3000));
            int count = 3;
            ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof on);
            ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
            ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &idle, sizeof idle);
            ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof count);
        }
        s << "SET SESSION idle_transaction_timeout = " + std::to_string(idle_seconds(ttl));
        s.begin();
    }

    std::optional<grant> lock_row(soci::session& s, std::string const& name, std::string const& owner,
                                  std::chrono::milliseconds wait, std::function<std::int64_t()> const& draw,
                                  bool& missing) const override {
        missing = false;
        long long token = 0, locked = 0;
        // WAIT takes whole seconds; the caller polls what is left below a second.
        // A wait also stays below the client's read timeout (see connect_string),
        // or the client would give up on a healthy server: the caller waits again.
        auto seconds = std::min<long long>(wait.count() / 1000, max_wait_seconds);
        bool got = false;
        if (seconds == 0) {
            s << try_lock_sql_, soci::use(name, "name"), soci::into(token);
            got = s.got_data();
            if (!got) {
                int rows = 0;
                s << exists_sql_, soci::use(name, "name"), soci::into(rows);
                missing = rows == 0;
            }
        } else {
            try {
                s << wait_lock_sql_ + std::to_string(seconds), soci::use(name, "name"), soci::into(token);
            } catch (soci::soci_error const& e) {
                if (native_code(e) == "1205") return std::nullopt;  // waited the whole time: busy
                throw;
            }
            got = s.got_data();
            missing = !got;
        }
        if (!got) return std::nullopt;
        token = draw();
        s << record_sql_, soci::use(token, "token"), soci::use(owner, "owner"), soci::use(name, "name");
        s << recorded_sql_, soci::use(name, "name"), soci::into(token), soci::into(locked);
        return grant{true, token, locked, 0};
    }

    std::int64_t keep_row_lock(soci::session& s, std::chrono::milliseconds ttl) const override {
        long long now = 0;
        s << "SET SESSION idle_transaction_timeout = " + std::to_string(idle_seconds(ttl));
        s << "SELECT " + epoch_us_sql("NOW(6)"), soci::into(now);
        return now;
    }

    void end_row_lock(soci::session& s, bool commit) const override {
        if (commit)
            s.commit();
        else
            s.rollback();
        s << "SET SESSION idle_transaction_timeout = " +
                 std::to_string(std::max<long long>(1, (options_.lock_wait_timeout.count() + 999) / 1000));
    }

    failure classify(soci::soci_error const& e, soci::session&) const override {
        auto* my = dynamic_cast<soci::mysql_soci_error const*>(&e);
        if (my == nullptr) return failure::other;
        switch (my->err_num_) {
            case 1213: return failure::transient;   // ER_LOCK_DEADLOCK: the transaction was rolled back
            case 1205: return failure::lock_wait;   // ER_LOCK_WAIT_TIMEOUT
            case 1146: return failure::schema;      // ER_NO_SUCH_TABLE
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

protected:
    std::string table_exists_sql() const override {
        return "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = :t";
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
    std::string token_sql_;
    std::string lock_sql_;
    std::string check_sql_;
    std::string renew_sql_;
    std::string renewed_sql_;
    std::string fence_sql_;
    std::string fence_seen_sql_;
    std::string ensure_row_sql_;
    std::string try_lock_sql_;
    std::string wait_lock_sql_;
    std::string record_sql_;
    std::string recorded_sql_;
    std::string exists_sql_;

    static constexpr long long max_wait_seconds = 30;  // read_timeout is at least 31 s
    static long long idle_seconds(std::chrono::milliseconds ttl) { return std::max<long long>(1, (ttl.count() + 999) / 1000); }
};

}  // namespace

std::unique_ptr<dialect> make_mysql_dialect(std::string const& prefix, store_options const& options) {
    return std::make_unique<mysql_dialect>(prefix, options);
}

}  // namespace sqlock::detail
