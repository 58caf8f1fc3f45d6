// PostgreSQL: the token counters.
#include "dialect/postgresql/postgresql.hpp"

namespace sqlock::detail::postgresql_engine {

std::int64_t postgresql_dialect::draw_token(pooled_session s, std::string const& name) const {
    auto& c = cache(s);
    if (!c.draw) c.draw.emplace((s.session.prepare << draw_sql_, soci::use(c.name, "name"), soci::into(c.got_token)));
    c.name = name;
    c.draw->execute(true);
    return c.got_token;
}

}  // namespace sqlock::detail::postgresql_engine
