// MariaDB / MySQL: the table lock.
#include "dialect/mysql/mysql.hpp"

namespace sqlock::detail::mysql_engine {

grant mysql_dialect::acquire(pooled_session ps, std::string const& name, std::string const& owner, std::int64_t attempt,
                             std::int64_t ttl_us, bool /*waiting*/, bool retry) const {
    auto& c = cache(ps);
    prepared(c.call_acquire, ps, acquire_sql_);
    long long id = attempt, again = retry ? 1 : 0, ttl = ttl_us, budget = budget_us(ps.session);
    unsigned long name_length = 0, owner_length = 0;
    std::array<MYSQL_BIND, 6> params{bytes_param(name, name_length),
                                     bytes_param(owner, owner_length),
                                     integer_param(id),
                                     integer_param(again),
                                     integer_param(ttl),
                                     integer_param(budget)};
    std::array<long long, 4> row{};  // ours, token, created, expires
    bool const got = on(c.call_acquire, [&](server_statement& st) { return st.execute(params.data(), row); });
    // The pause a client can still take inside an acquire: after the server
    // decided and committed, before the caller hears of it.
    SQLOCK_FAILPOINT("mysql.acquire.after_call");
    if (!got || row[0] != 1) return {};
    return {true, row[1], row[2], row[3]};
}

bool mysql_dialect::release(pooled_session ps, std::string const& name, std::string const& owner,
                            std::int64_t token) const {
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

std::optional<renewal> mysql_dialect::renew(pooled_session ps, std::string const& name, std::string const& owner,
                                            std::int64_t token, std::int64_t ttl_us) const {
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

}  // namespace sqlock::detail::mysql_engine
