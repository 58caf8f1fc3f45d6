// MariaDB / MySQL: the row lock.
#include "dialect/mysql/mysql.hpp"

namespace sqlock::detail::mysql_engine {

std::optional<grant> mysql_dialect::lock_row(pooled_session ps, std::string const& name, std::string const& owner,
                                             std::chrono::milliseconds ttl, std::chrono::milliseconds wait,
                                             std::function<std::int64_t()> const& draw, bool& missing) const {
    auto& c = cache(ps);
    missing = false;
    // The server's TCP keepalive settings are global (tcp_keepalive_time):
    // see docs. On our side, probe the connection so a holder learns soon
    // that the server vanished.
    // Set once per connection and TTL: the socket keeps them.
    auto* backend = static_cast<soci::mysql_session_backend*>(ps.session.get_backend());
    if (int idle = static_cast<int>(std::max<long long>(1, ttl.count() / 3000)); idle != c.keepalive_seconds) {
        if (auto fd = mysql_get_socket(backend->conn_); fd >= 0) {
            int on = 1;
            int count = 3;
            bool const set = ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof on) == 0 &&
                             ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle) == 0 &&
                             ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &idle, sizeof idle) == 0 &&
                             ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof count) == 0;
            c.keepalive_seconds = set ? idle : 0;
        }
    }
    // A wait is in whole seconds; the caller polls what is left below a
    // second. It also stays below the client's read timeout (see
    // connect_string), or the client would give up on a healthy server: the
    // caller waits again.
    long long const seconds = std::min<long long>(wait.count() / 1000, max_wait_seconds);
    set_bounds(c, ps, idle_seconds(ttl), std::max<long long>(1, seconds));  // the lock statement begins the transaction
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
    std::array<MYSQL_BIND, 4> params{integer_param(token), bytes_param(owner, owner_length), integer_param(locked),
                                     bytes_param(name, name_length)};
    prepared(c.row_record, ps, record_sql_);
    std::array<long long, 0> none{};
    (void)on(c.row_record, [&](server_statement& st) { return st.execute(params.data(), none); });
    return grant{true, token, locked, 0};
}

std::int64_t mysql_dialect::keep_row_lock(pooled_session ps, std::string const& name,
                                          std::chrono::milliseconds ttl) const {
    auto& c = cache(ps);
    // Any statement resets the idle limit: it is set again only when the TTL changed.
    if (long long idle = idle_seconds(ttl); idle != c.idle_seconds) {
        prepared(c.row_idle, ps, flavoured().row_idle);
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

void mysql_dialect::end_row_lock(pooled_session ps, bool commit) const {
    auto& c = cache(ps);
    if (!commit && flavoured().prepares_rollback) {
        prepared(c.row_rollback, ps, "ROLLBACK");
        std::array<long long, 0> none{};
        (void)on(c.row_rollback, [&](server_statement& st) { return st.execute(nullptr, none); });
    } else if (!commit) {
        auto* conn = static_cast<soci::mysql_session_backend*>(ps.session.get_backend())->conn_;
        if (mysql_rollback(conn) != 0)
            throw_client_error(engine::mysql, mysql_error(conn), static_cast<int>(mysql_errno(conn)));
    }
    // autocommit = 1 commits what is open; the bounds go back to the session's defaults (see open).
    auto const& flavour = flavoured();
    long long wait_seconds = std::max<long long>(1, (options_.lock_wait_timeout.count() + 999) / 1000);
    prepared(c.row_end, ps, flavour.row_end);
    std::array<MYSQL_BIND, 2> params{integer_param(wait_seconds), integer_param(wait_seconds)};
    std::array<long long, 0> none{};
    c.idle_seconds = 0;
    (void)on(c.row_end, [&](server_statement& st) {
        return st.execute(flavour.row_end_binds_idle ? params.data() : params.data() + 1, none);
    });
    // MySQL: the server's wait_timeout, not a bound of sqlock's (0: set again at the next hold).
    if (flavour.row_end_binds_idle) c.idle_seconds = wait_seconds;
}

void mysql_dialect::set_bounds(mysql_cache& c, pooled_session ps, long long idle, long long lock_wait) const {
    prepared(c.row_bounds, ps, flavoured().row_bounds);
    std::array<MYSQL_BIND, 2> params{integer_param(idle), integer_param(lock_wait)};
    std::array<long long, 0> none{};
    c.idle_seconds = 0;  // unknown until the SET succeeded
    (void)on(c.row_bounds, [&](server_statement& st) { return st.execute(params.data(), none); });
    c.idle_seconds = idle;
}

}  // namespace sqlock::detail::mysql_engine
