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

member_write postgresql_dialect::majority_write_or_read(soci::session& s, std::string const& name,
                                                        std::int64_t token) const {
    // The counter read after a miss is the statement's snapshot: it may be older than the row the
    // write found (a concurrent write committed meanwhile). A read only makes the next write likely
    // to win; the strict write on a majority alone carries the token's safety.
    long long tok = token, age = 0, joined = 0, won = 0, counter = 0;
    member_write w;
    member_counter c;
    s << "WITH i AS (SELECT i.id, " + epoch_us_sql(now_sql()) + " - " + epoch_us_sql("i.created_at") +
             " AS age, EXISTS (SELECT 1 FROM " + majority_members_table() + " g WHERE g.id = i.id) AS joined FROM " +
             identity_table() + " i), w AS (INSERT INTO " + majority_table() +
             " AS m (name, token) SELECT CAST(:name AS TEXT), CAST(:token AS BIGINT) FROM i WHERE i.joined"
             " ON CONFLICT (name) DO UPDATE SET token = excluded.token WHERE m.token < excluded.token RETURNING token)"
             " SELECT i.id, i.age, CASE WHEN i.joined THEN 1 ELSE 0 END, (SELECT COUNT(*) FROM w), COALESCE((SELECT "
             "c.token FROM " +
             majority_table() + " c WHERE c.name = :name2), 0) FROM i",
        soci::use(name, "name"), soci::use(tok, "token"), soci::use(name, "name2"), soci::into(c.identity.id),
        soci::into(age), soci::into(joined), soci::into(won), soci::into(counter);
    if (!s.got_data()) return w;  // no identity row: nothing written
    if (won > 0) {
        w.won = true;
        return w;
    }
    c.identity.age_us = age;
    c.identity.joined = joined > 0;
    c.token = counter;
    w.read = std::move(c);
    return w;
}

}  // namespace sqlock::detail::postgresql_engine
