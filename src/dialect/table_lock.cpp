// The baseline SQL of the table lock.
#include "detail/dialect.hpp"

#include <soci/soci.h>

#include <stdexcept>

namespace sqlock::detail {

grant table_lock_statements::acquire_shared(pooled_session, std::string const&, std::string const&, std::string const&,
                                            std::int64_t, std::int64_t, bool, bool) const {
    throw std::logic_error(
        "sqlock: acquire_shared() on an engine that grants a shared lease in two steps "
        "(grants_shared_at_once() is false)");
}

bool dialect::release(pooled_session s, std::string const& name, std::string const& owner, std::int64_t token) const {
    auto& c = cache(s);
    if (!c.release)
        c.release.emplace(
            (s.session.prepare << "DELETE FROM " + locks_ + " WHERE name = :name AND owner = :owner AND token = :token",
             soci::use(c.name, "name"), soci::use(c.owner, "owner"), soci::use(c.token, "token")));
    c.name = name;
    c.owner = owner;
    c.token = token;
    c.release->execute(true);
    return c.release->get_affected_rows() > 0;
}

std::optional<renewal> dialect::renew(pooled_session s, std::string const& name, std::string const& owner,
                                      std::int64_t token, std::int64_t ttl_us) const {
    auto& c = cache(s);
    if (!c.renew)
        c.renew.emplace(
            (s.session.prepare << "UPDATE " + locks_ + " SET expires_at = " + plus_ttl_sql(now_sql()) +
                                      " WHERE name = :name AND owner = :owner AND token = :token AND expires_at >= " +
                                      now_sql() + " RETURNING " + epoch_us_sql("expires_at") + ", " +
                                      epoch_us_sql(now_sql()),
             soci::use(c.ttl, "ttl"), soci::use(c.name, "name"), soci::use(c.owner, "owner"),
             soci::use(c.token, "token"), soci::into(c.expires), soci::into(c.now)));
    c.name = name;
    c.owner = owner;
    c.token = token;
    c.ttl = ttl_us;
    bool const got = c.renew->execute(true);
    finish(*c.renew);
    if (!got) return std::nullopt;
    return renewal{c.expires, c.now};
}

bool dialect::add_hold(soci::session& s, std::string const& name, std::string const& owner, std::int64_t token) const {
    long long tok = token;
    soci::statement st = (s.prepare << "UPDATE " + locks_ +
                                           " SET holds = holds + 1 WHERE name = :name AND owner = "
                                           ":owner AND token = :token AND expires_at >= " +
                                           now_sql(),
                          soci::use(name, "name"), soci::use(owner, "owner"), soci::use(tok, "token"));
    st.execute(true);
    return st.get_affected_rows() > 0;
}

bool dialect::drop_hold(soci::session& s, std::string const& name, std::string const& owner, std::int64_t token) const {
    long long tok = token;
    soci::statement st = (s.prepare << "UPDATE " + locks_ +
                                           " SET holds = holds - 1 WHERE name = :name AND owner = "
                                           ":owner AND token = :token AND holds > 1",
                          soci::use(name, "name"), soci::use(owner, "owner"), soci::use(tok, "token"));
    st.execute(true);
    return st.get_affected_rows() > 0;
}

void dialect::notify_release(soci::session&, std::string const&) const {}

void dialect::delete_attempt(soci::session& s, std::string const& name, std::string const& owner,
                             std::int64_t attempt) const {
    long long id = attempt;
    s << "DELETE FROM " + locks_ + " WHERE name = :name AND owner = :owner AND attempt = :attempt",
        soci::use(name, "name"), soci::use(owner, "owner"), soci::use(id, "attempt");
}

}  // namespace sqlock::detail
