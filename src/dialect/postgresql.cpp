// PostgreSQL: the whole acquire is one statement (a data-modifying CTE draws the
// token, INSERT ... ON CONFLICT DO UPDATE ... WHERE expired takes the row), so a
// busy lock raises no error in the server log and nothing to roll back.
#include "detail/dialect.hpp"

#include <sqlock/errors.hpp>

#include <soci/postgresql/soci-postgresql.h>
#include <soci/soci.h>

#include <libpq-fe.h>

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <thread>

namespace sqlock::detail {
namespace {

// A libpq conninfo value, single-quoted with backslash escapes.
std::string quote(std::string const& value) {
    std::string out = "'";
    for (char c : value) {
        if (c == '\'' || c == '\\') out += '\\';
        out += c;
    }
    return out + "'";
}

// SOCI has no API for LISTEN/NOTIFY, so the listener owns a raw libpq
// connection. An eventfd wakes its poll() for a prompt shutdown.
class pg_listener final : public release_listener {
public:
    pg_listener(std::string conninfo, std::string channel, std::chrono::milliseconds io_timeout,
                std::function<void(std::string_view)> on_notify)
        : conninfo_(std::move(conninfo)),
          listen_sql_("LISTEN \"" + channel + "\""),
          io_timeout_(io_timeout),
          on_notify_(std::move(on_notify)),
          wake_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)),
          thread_([this](std::stop_token stop) { run(stop); }) {}

    ~pg_listener() override {
        thread_.request_stop();
        std::uint64_t one = 1;
        (void)!::write(wake_, &one, sizeof one);
        thread_.join();
        ::close(wake_);
    }

private:
    void run(std::stop_token const& stop) {
        auto retry = std::chrono::milliseconds(100);
        while (!stop.stop_requested()) {
            PGconn* conn = PQconnectdb(conninfo_.c_str());
            if (PQstatus(conn) == CONNECTION_OK) {
                if (subscribe(conn, stop)) {
                    retry = std::chrono::milliseconds(100);
                    on_notify_("");  // anything released while we were away is unknown
                    pump(conn, stop);
                }
            }
            PQfinish(conn);
            if (stop.stop_requested()) break;
            sleep_unless_woken(retry);
            retry = std::min(retry * 2, std::chrono::milliseconds(5000));
        }
    }

    // LISTEN, waiting for its answer at most io_timeout and never past a stop: a
    // blocking PQexec on a silent server would keep the store from closing.
    bool subscribe(PGconn* conn, std::stop_token const& stop) {
        if (PQsendQuery(conn, listen_sql_.c_str()) == 0) return false;
        auto const deadline = std::chrono::steady_clock::now() + io_timeout_;
        while (PQisBusy(conn) != 0) {
            auto const left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
            if (stop.stop_requested() || left <= std::chrono::milliseconds::zero()) return false;
            pollfd fds[2] = {{PQsocket(conn), POLLIN, 0}, {wake_, POLLIN, 0}};
            if (::poll(fds, 2, static_cast<int>(std::min<long long>(left.count() + 1, 1000))) < 0 && errno != EINTR) return false;
            if (fds[1].revents != 0) return false;
            if (fds[0].revents != 0 && PQconsumeInput(conn) == 0) return false;
        }
        bool listening = true;
        while (PGresult* r = PQgetResult(conn)) {
            listening = listening && PQresultStatus(r) == PGRES_COMMAND_OK;
            PQclear(r);
        }
        return listening;
    }

    // Deliver notifications until the connection drops or we are stopped.
    void pump(PGconn* conn, std::stop_token const& stop) {
        while (!stop.stop_requested()) {
            pollfd fds[2] = {{PQsocket(conn), POLLIN, 0}, {wake_, POLLIN, 0}};
            if (::poll(fds, 2, -1) < 0 && errno != EINTR) return;
            if ((fds[0].revents & (POLLIN | POLLERR | POLLHUP)) != 0) {
                if (PQconsumeInput(conn) == 0) return;
                while (PGnotify* n = PQnotifies(conn)) {
                    std::string name = n->extra;
                    PQfreemem(n);
                    if (!name.empty()) on_notify_(name);
                }
            }
        }
    }

    void sleep_unless_woken(std::chrono::milliseconds d) {
        pollfd fd{wake_, POLLIN, 0};
        ::poll(&fd, 1, static_cast<int>(d.count()));
    }

    std::string conninfo_;
    std::string listen_sql_;
    std::chrono::milliseconds io_timeout_;
    std::function<void(std::string_view)> on_notify_;
    int wake_;
    std::jthread thread_;
};

/// The table lock's statements (statement_cache) and the row lock's, with the
/// buffers they are bound to.
struct pg_cache final : statement_cache {
    std::string idle, probe, lock_timeout;  // in: the holding transaction's settings
    long long locked = 0;                   // out: when the row was locked
    int rows = 0;                           // out
    std::optional<soci::statement> row_begin, row_try, row_wait, row_exists, row_record, row_keep, row_commit,
        row_rollback;
};

class postgresql_dialect final : public dialect {
public:
    postgresql_dialect(std::string const& prefix, store_options const& options) : dialect(prefix, options) {
        // One statement: the CTE draws the name's next token, the upsert takes
        // the row if it is free or expired. `waiting` adds a mark on a live row
        // (its release will NOTIFY) and answers with the row as it stands, ours
        // or not. Acquired only when the row carries the token this very
        // statement drew, and our owner: a random attempt id proves nothing (a
        // forked child draws what its parent draws). A retry after a broken
        // connection also takes the row an earlier call of the same attempt and
        // owner wrote, committed after the clean-up had looked (its token is a
        // grant like any).
        auto const draw = "WITH t AS (INSERT INTO " + tokens_ + " AS t (name, token) VALUES (:name, " +
                          first_token_sql() + ") ON CONFLICT (name) DO UPDATE SET token = t.token + 1"
                          " RETURNING t.name, t.token),"
                          " w AS (INSERT INTO " + locks_ + " AS l (name, owner, token, holds, attempt, created_at, expires_at)"
                          " SELECT t.name, :owner, t.token, 1, :attempt, statement_timestamp(),"
                          " statement_timestamp() + CAST(:ttl AS double precision) * interval '1 microsecond' FROM t"
                          " ON CONFLICT (name) DO UPDATE SET ";
        auto const answer = " RETURNING l.owner, l.token, l.attempt, l.created_at, l.expires_at)"
                            " SELECT CASE WHEN w.owner = :owner2 AND (w.token = t.token OR"
                            " (:retry = 1 AND w.attempt = :attempt2)) THEN 1 ELSE 0 END, w.token, " +
                            epoch_us_sql("w.created_at") + ", " + epoch_us_sql("w.expires_at") + " FROM w CROSS JOIN t";
        acquire_sql_ = draw + "owner = excluded.owner, token = excluded.token, holds = 1, attempt = excluded.attempt,"
                              " created_at = excluded.created_at, expires_at = excluded.expires_at"
                              " WHERE l.expires_at < statement_timestamp()" + answer;
        std::string waiting;
        for (auto column : {"owner", "token", "attempt", "created_at"})
            waiting += std::string(column) + " = CASE WHEN l.expires_at < statement_timestamp() THEN excluded." +
                       column + " ELSE l." + column + " END, ";
        waiting += "holds = CASE WHEN l.expires_at < statement_timestamp() THEN 1 ELSE l.holds END,"
                   " waiters = l.waiters OR l.expires_at >= statement_timestamp(),"
                   " expires_at = CASE WHEN l.expires_at < statement_timestamp() THEN excluded.expires_at"
                   " ELSE l.expires_at END";
        acquire_waiting_sql_ = draw + waiting + answer;
        draw_sql_ = "INSERT INTO " + tokens_ + " AS t (name, token) VALUES (:name, " + first_token_sql() + ")"
                    " ON CONFLICT (name) DO UPDATE SET token = t.token + 1 RETURNING t.token";
        // A release need not wait for the disk: lost in a crash, it only delays
        // the next holder until the row expires (grants and renewals stay
        // durable). It NOTIFYs, at COMMIT in the same round trip, only when a
        // waiter marked the row: uncontended releases skip the notify queue lock.
        release_sql_ = "WITH d AS (DELETE FROM " + locks_ +
                       " WHERE name = :name AND owner = :owner AND token = :token RETURNING name, waiters)"
                       " SELECT 1 FROM d CROSS JOIN LATERAL set_config('synchronous_commit', 'off', true) AS c"
                       " LEFT JOIN LATERAL (SELECT pg_notify('" + channel() + "', d.name) WHERE d.waiters) AS n ON true";

        auto const rows = prefix_ + "_rows";
        ensure_row_sql_ = "INSERT INTO " + rows + " (name, created_at) VALUES (:name, clock_timestamp())"
                          " ON CONFLICT (name) DO NOTHING";
        // The holding transaction's settings travel in the lock statement (its
        // FROM list: evaluated before the row is locked or waited for, and kept
        // there by their volatile functions), so BEGIN, the settings and the lock
        // are two round trips, all prepared. The server ends a holder that stays
        // idle in its transaction for a TTL, and probes the connection so that a
        // vanished host is noticed within about a TTL.
        auto settings = [](bool waits) {
            return std::string(" (SELECT set_config('idle_in_transaction_session_timeout', :idle, true),"
                               " set_config('tcp_keepalives_idle', :probe, true),"
                               " set_config('tcp_keepalives_interval', :probe2, true),"
                               " set_config('tcp_keepalives_count', '3', true),"
                               " set_config('tcp_user_timeout', :idle2, true)") +
                   (waits ? ", set_config('lock_timeout', :lock_timeout, true)" : "") + ") AS settings";
        };
        auto const record = " SET owner = :owner, locked_at = clock_timestamp()";
        auto const returning = " RETURNING " + epoch_us_sql("r.locked_at");
        // SKIP LOCKED answers "busy" without an error: NOWAIT would raise one,
        // abort the transaction and log it on the server.
        try_lock_sql_ = "WITH l AS (SELECT name FROM " + rows + " WHERE name = :name FOR UPDATE SKIP LOCKED)"
                        " UPDATE " + rows + " AS r" + record + " FROM l," + settings(false) +
                        " WHERE r.name = l.name" + returning;
        wait_lock_sql_ = "UPDATE " + rows + " AS r" + record + " FROM" + settings(true) + " WHERE r.name = :name" +
                         returning;
        record_token_sql_ = "UPDATE " + rows + " SET token = :token WHERE name = :name";
        exists_sql_ = "SELECT COUNT(*) FROM " + rows + " WHERE name = :name";
        keep_sql_ = "SELECT ";  // appended: GCC 12 warns falsely on "lit" + string&& (bug 105329)
        keep_sql_ += epoch_us_sql("clock_timestamp()");
        keep_sql_ += " FROM set_config('idle_in_transaction_session_timeout', :idle, true)";
    }

    sqlock::engine engine() const noexcept override { return engine::postgresql; }

    std::vector<std::pair<std::string, std::string>> added_columns() const override {
        auto columns = dialect::added_columns();
        columns.emplace_back("waiters", "boolean NOT NULL DEFAULT false");
        return columns;
    }

    std::string connect_string(url_parts const& url) const override {
        auto seconds = std::max<long long>(2, (options_.connect_timeout.count() + 999) / 1000);
        // Client-side keepalives: a holder learns within about a minute that the
        // server vanished, instead of waiting on a dead socket for hours.
        std::string c = "host=" + quote(url.host) + " dbname=" + quote(url.database) +
                        " connect_timeout=" + std::to_string(seconds) + " application_name='sqlock'" +
                        " keepalives=1 keepalives_idle=30 keepalives_interval=10 keepalives_count=3";
        if (url.port != 0) c += " port=" + std::to_string(url.port);
        if (!url.user.empty()) c += " user=" + quote(url.user);
        if (!url.password.empty()) c += " password=" + quote(url.password);
        for (auto const& [key, value] : url.params) {
            validate_param_name(key);
            c += " " + key + "=" + quote(value);
        }
        return c;
    }

    void open(soci::session& s, std::string const& connect_string) const override {
        s.open(*soci::factory_postgresql(), connect_string);
        s << "SET lock_timeout = " + std::to_string(options_.lock_wait_timeout.count());
        // A grant or renewal acknowledged before it is on disk can be lost by a
        // crash and its token handed out again: never let a role's or URL's
        // synchronous_commit = off apply to sqlock's own connections.
        s << "SELECT set_config('synchronous_commit', 'on', false) WHERE current_setting('synchronous_commit') = 'off'";
        // sqlock's statements are written for READ COMMITTED (single conditional
        // statements; the row lock waits for the holder's row and then locks it).
        // A SERIALIZABLE or REPEATABLE READ default (server, database, role or the
        // URL's options) would make them fail with serialization errors (40001)
        // and the row lock's COMMIT report a held lock as lost: never inherit it.
        s << "SET default_transaction_isolation = 'read committed'";
        s << "SET TIME ZONE 'UTC'";
        s << "SET client_min_messages = warning";  // no NOTICEs from idempotent DDL on stderr
    }

    grant acquire(pooled_session s, std::string const& name, std::string const& owner, std::int64_t attempt,
                  std::int64_t ttl_us, bool waiting, bool retry) const override {
        auto& c = cache(s);
        auto& st = waiting ? c.acquire_waiting : c.acquire;
        if (!st)
            st.emplace((s.session.prepare << (waiting ? acquire_waiting_sql_ : acquire_sql_), soci::use(c.name, "name"),
                        soci::use(c.owner, "owner"), soci::use(c.attempt, "attempt"), soci::use(c.ttl, "ttl"),
                        soci::use(c.owner, "owner2"), soci::use(c.retry, "retry"), soci::use(c.attempt, "attempt2"),
                        soci::into(c.flag), soci::into(c.got_token),
                        soci::into(c.created), soci::into(c.expires)));
        c.name = name;
        c.owner = owner;
        c.attempt = attempt;
        c.ttl = ttl_us;
        c.retry = retry ? 1 : 0;
        if (!st->execute(true) || c.flag != 1) return {};
        return {true, c.got_token, c.created, c.expires};
    }

    std::int64_t draw_token(pooled_session s, std::string const& name) const override {
        auto& c = cache(s);
        if (!c.draw)
            c.draw.emplace((s.session.prepare << draw_sql_, soci::use(c.name, "name"), soci::into(c.got_token)));
        c.name = name;
        c.draw->execute(true);
        return c.got_token;
    }

    std::optional<std::string> relaxed_durability(soci::session& s) const override {
        std::string fsync;
        s << "SELECT current_setting('fsync')", soci::into(fsync);
        if (fsync == "off") return "fsync = off";
        return std::nullopt;
    }

    int socket_of(soci::session& s) const override {
        auto* backend = static_cast<soci::postgresql_session_backend*>(s.get_backend());
        return backend == nullptr || backend->conn_ == nullptr ? -1 : PQsocket(backend->conn_);
    }

    bool release(pooled_session s, std::string const& name, std::string const& owner,
                 std::int64_t token) const override {
        auto& c = cache(s);
        if (!c.release)
            c.release.emplace((s.session.prepare << release_sql_, soci::use(c.name, "name"), soci::use(c.owner, "owner"),
                               soci::use(c.token, "token"), soci::into(c.flag)));
        c.name = name;
        c.owner = owner;
        c.token = token;
        return c.release->execute(true);
    }

    // pg_stat_activity shows the sessions of our own role; a row-lock holder is
    // idle in a transaction that holds a lock on the rows table.
    std::vector<long_row_lock> long_row_locks(soci::session& s, std::chrono::milliseconds threshold) const override {
        long long ms = threshold.count();
        std::string const table = prefix_ + "_rows";
        soci::rowset<soci::row> rows =
            (s.prepare << "SELECT CAST(a.pid AS bigint), CAST(EXTRACT(EPOCH FROM (clock_timestamp() - a.xact_start)) "
                          "* 1000 AS bigint), COALESCE(CAST(a.client_addr AS text), 'local') FROM pg_stat_activity a "
                          "WHERE a.state LIKE 'idle in transaction%' AND a.xact_start < clock_timestamp() - "
                          "CAST(:ms AS double precision) * interval '1 millisecond' AND EXISTS (SELECT 1 FROM "
                          "pg_locks l WHERE l.pid = a.pid AND l.relation = to_regclass(:rows)) ORDER BY a.xact_start",
             soci::use(ms, "ms"), soci::use(table, "rows"));
        std::vector<long_row_lock> out;
        for (auto const& r : rows) out.push_back({r.get<long long>(0), r.get<long long>(1), r.get<std::string>(2)});
        return out;
    }

    void notify_release(soci::session& s, std::string const& name) const override {
        s << "SELECT 1 FROM pg_notify('" + channel() + "', :name)", soci::use(name, "name");
    }

    std::unique_ptr<release_listener> listen(std::string const& connect_string,
                                             std::function<void(std::string_view)> on_notify) const override {
        return std::make_unique<pg_listener>(connect_string, channel(), options_.io_timeout, std::move(on_notify));
    }

    // Services starting together would race on CREATE ... IF NOT EXISTS and log
    // unique violations from the catalog: one at a time, under an advisory lock.
    void create_schema(soci::session& s) const override {
        std::string const key = "sqlock schema " + prefix_;
        s << "SELECT 1 FROM pg_advisory_lock(hashtext(:k))", soci::use(key, "k");
        try {
            dialect::create_schema(s);
        } catch (...) {
            try {
                s << "SELECT 1 FROM pg_advisory_unlock(hashtext(:k))", soci::use(key, "k");
            } catch (...) {  // the session ends the lock when it closes
            }
            throw;
        }
        s << "SELECT 1 FROM pg_advisory_unlock(hashtext(:k))", soci::use(key, "k");
    }

    void ensure_row(soci::session& s, std::string const& name) const override {
        s << ensure_row_sql_, soci::use(name, "name");
    }

    std::optional<grant> lock_row(pooled_session ps, std::string const& name, std::string const& owner,
                                  std::chrono::milliseconds ttl, std::chrono::milliseconds wait,
                                  std::function<std::int64_t()> const& draw, bool& missing) const override {
        auto& c = cache(ps);
        auto& s = ps.session;
        missing = false;
        auto const ms = std::max<long long>(1000, ttl.count());
        c.name = name;
        c.owner = owner;
        c.idle = std::to_string(ms);
        c.probe = std::to_string(std::max<long long>(1, ms / 3000));
        run(c.row_begin, s, "BEGIN");
        bool locked = false;
        if (wait.count() <= 0) {
            if (!c.row_try)
                c.row_try.emplace((s.prepare << try_lock_sql_, soci::use(c.name, "name"), soci::use(c.owner, "owner"),
                                   soci::use(c.idle, "idle"), soci::use(c.probe, "probe"), soci::use(c.probe, "probe2"),
                                   soci::use(c.idle, "idle2"), soci::into(c.locked)));
            locked = c.row_try->execute(true);
        } else {
            // lock_timeout is an int of milliseconds.
            c.lock_timeout = std::to_string(std::min<long long>(wait.count(), INT32_MAX));
            if (!c.row_wait)
                c.row_wait.emplace((s.prepare << wait_lock_sql_, soci::use(c.name, "name"),
                                    soci::use(c.owner, "owner"), soci::use(c.idle, "idle"),
                                    soci::use(c.probe, "probe"), soci::use(c.probe, "probe2"),
                                    soci::use(c.idle, "idle2"), soci::use(c.lock_timeout, "lock_timeout"),
                                    soci::into(c.locked)));
            try {
                locked = c.row_wait->execute(true);
            } catch (soci::soci_error const& e) {
                if (native_code(e) == "55P03") return std::nullopt;  // waited the whole time: busy
                throw;
            }
        }
        if (!locked) {
            if (!c.row_exists)
                c.row_exists.emplace((s.prepare << exists_sql_, soci::use(c.name, "name"), soci::into(c.rows)));
            c.row_exists->execute(true);
            missing = c.rows == 0;
            return std::nullopt;
        }
        auto const at = c.locked;
        c.token = draw();
        if (!c.row_record)
            c.row_record.emplace((s.prepare << record_token_sql_, soci::use(c.token, "token"), soci::use(c.name, "name")));
        c.row_record->execute(true);
        return grant{true, c.token, at, 0};
    }

    std::int64_t keep_row_lock(pooled_session ps, std::string const&, std::chrono::milliseconds ttl) const override {
        auto& c = cache(ps);
        c.idle = std::to_string(std::max<long long>(1000, ttl.count()));
        if (!c.row_keep)
            c.row_keep.emplace((ps.session.prepare << keep_sql_, soci::use(c.idle, "idle"), soci::into(c.now)));
        c.row_keep->execute(true);
        return c.now;
    }

    void end_row_lock(pooled_session ps, bool commit) const override {
        auto& c = cache(ps);
        if (commit)
            run(c.row_commit, ps.session, "COMMIT");
        else
            run(c.row_rollback, ps.session, "ROLLBACK");
    }

    failure classify(soci::soci_error const& e, soci::session& s) const override {
        // Every session of this dialect was opened with the PostgreSQL backend.
        auto* backend = static_cast<soci::postgresql_session_backend*>(s.get_backend());
        if (backend == nullptr || backend->conn_ == nullptr || PQstatus(backend->conn_) == CONNECTION_BAD)
            return failure::connection;
        auto code = native_code(e);
        if (code == "40001" || code == "40P01") return failure::transient;
        if (code == "55P03") return failure::lock_wait;
        if (code == "42P01") return failure::schema;
        if (code == "42501") return failure::permission;  // insufficient_privilege
        if (code == "25006") return failure::read_only;   // read_only_sql_transaction (also a hot standby)
        if (code.starts_with("08") || code.starts_with("57P")) return failure::connection;
        return failure::other;
    }

    std::string native_code(soci::soci_error const& e) const override {
        if (auto* pg = dynamic_cast<soci::postgresql_soci_error const*>(&e)) return pg->sqlstate();
        return {};
    }

protected:
    std::unique_ptr<statement_cache> make_cache() const override { return std::make_unique<pg_cache>(); }

    std::string table_exists_sql() const override {
        return "SELECT CASE WHEN to_regclass(:t) IS NULL THEN 0 ELSE 1 END";
    }
    // statement_timestamp() is fixed for the statement and our connections are in
    // autocommit, so it never lags behind by a caller's transaction (ShedLock #3577).
    std::string now_sql() const override { return "statement_timestamp()"; }
    std::string plus_ttl_sql(std::string const& timestamp) const override {
        return timestamp + " + CAST(:ttl AS double precision) * interval '1 microsecond'";
    }
    std::string epoch_us_sql(std::string const& column) const override {
        return "CAST(EXTRACT(EPOCH FROM " + column + ") * 1000000 AS bigint)";
    }
    std::string minus_sql(std::string const& timestamp, std::string const& param) const override {
        return "(" + timestamp + " - CAST(:" + param + " AS double precision) * interval '1 microsecond')";
    }
    // Rows a renewal or takeover is updating right now are left for the next pass.
    std::string skip_locked_sql() const override { return " FOR UPDATE SKIP LOCKED"; }

private:
    [[nodiscard]] pg_cache& cache(pooled_session s) const { return static_cast<pg_cache&>(dialect::cache(s)); }

    // A statement without parameters or results, prepared on first use.
    static void run(std::optional<soci::statement>& st, soci::session& s, char const* sql) {
        if (!st) st.emplace((s.prepare << sql));
        st->execute(true);
    }

    std::string acquire_sql_;
    std::string acquire_waiting_sql_;
    std::string draw_sql_;
    std::string record_token_sql_;
    std::string release_sql_;
    std::string ensure_row_sql_;
    std::string try_lock_sql_;
    std::string wait_lock_sql_;
    std::string exists_sql_;
    std::string keep_sql_;
};

}  // namespace

std::unique_ptr<dialect> make_postgresql_dialect(std::string const& prefix, store_options const& options) {
    return std::make_unique<postgresql_dialect>(prefix, options);
}

}  // namespace sqlock::detail
