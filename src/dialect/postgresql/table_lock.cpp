// PostgreSQL: the table lock.
#include "dialect/postgresql/postgresql.hpp"

namespace sqlock::detail::postgresql_engine {

grant postgresql_dialect::acquire(pooled_session s, std::string const& name, std::string const& owner,
                                  std::int64_t attempt, std::int64_t ttl_us, bool waiting, bool retry) const {
    auto& c = cache(s);
    auto& st = waiting ? c.acquire_waiting : c.acquire;
    if (!st)
        st.emplace((s.session.prepare << (waiting ? acquire_waiting_sql_ : acquire_sql_), soci::use(c.name, "name"),
                    soci::use(c.owner, "owner"), soci::use(c.attempt, "attempt"), soci::use(c.ttl, "ttl"),
                    soci::use(c.owner, "owner2"), soci::use(c.retry, "retry"), soci::use(c.attempt, "attempt2"),
                    soci::into(c.flag), soci::into(c.got_token), soci::into(c.created), soci::into(c.expires)));
    c.name = name;
    c.owner = owner;
    c.attempt = attempt;
    c.ttl = ttl_us;
    c.retry = retry ? 1 : 0;
    if (!st->execute(true) || c.flag != 1) return {};
    return {true, c.got_token, c.created, c.expires};
}

bool postgresql_dialect::release(pooled_session s, std::string const& name, std::string const& owner,
                                 std::int64_t token) const {
    auto& c = cache(s);
    if (!c.release)
        c.release.emplace((s.session.prepare << release_sql_, soci::use(c.name, "name"), soci::use(c.owner, "owner"),
                           soci::use(c.token, "token"), soci::into(c.flag)));
    c.name = name;
    c.owner = owner;
    c.token = token;
    return c.release->execute(true);
}

}  // namespace sqlock::detail::postgresql_engine
