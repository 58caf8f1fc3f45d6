// SQLite: the reaper and the operator's calls.
#include "dialect/sqlite/sqlite.hpp"

namespace sqlock::detail::sqlite_engine {

reap_batch sqlite_dialect::reap(soci::session& s, std::int64_t grace_us, std::optional<std::int64_t> max_age_us,
                                int batch, bool dry_run) const {
    long long grace = grace_us, age = max_age_us.value_or(0), limit = batch;
    auto const [cond, live, pick] = reap_sql(max_age_us.has_value());
    std::string const sql = dry_run ? "SELECT expires_at, " + live + " FROM " + locks_ + " WHERE name IN (" + pick + ")"
                                    : "DELETE FROM " + locks_ + " WHERE name IN (" + pick + ") AND " + cond +
                                          " RETURNING expires_at, " + live;
    // Vectors sized to the batch take every returned row in one fetch (at least
    // two: SOCI 4.0 fetches nothing into vectors of size 1 here).
    auto const size = std::max<std::size_t>(2, static_cast<std::size_t>(batch));
    std::vector<long long> expires(size);
    std::vector<int> live_flags(size);
    soci::statement st = max_age_us ? (s.prepare << sql, soci::use(grace, "grace"), soci::use(age, "age"),
                                       soci::use(limit, "lim"), soci::into(expires), soci::into(live_flags))
                                    : (s.prepare << sql, soci::use(grace, "grace"), soci::use(limit, "lim"),
                                       soci::into(expires), soci::into(live_flags));
    if (!st.execute(true)) {
        expires.clear();
        live_flags.clear();
    }
    reap_batch r;
    for (std::size_t i = 0; i < expires.size(); ++i) {
        ++r.rows;
        r.live_purged += live_flags[i];
        r.oldest_expiry_us = std::min<std::int64_t>(r.oldest_expiry_us.value_or(expires[i]), expires[i]);
    }
    return r;
}

token_purge_batch sqlite_dialect::purge_tokens(soci::session& s, std::int64_t horizon_us, int batch,
                                               bool dry_run) const {
    std::string const pick =
        "SELECT name FROM " + tokens_ + " WHERE " + purgeable_tokens_sql() + " ORDER BY token LIMIT :lim";
    return purge_tokens_stepwise(
        s, horizon_us, batch, dry_run,
        {.measure = "SELECT COUNT(*), MAX(token) FROM " + tokens_ + " WHERE name IN (" + pick + ")",
         .raise_floor = "INSERT INTO " + tokens_ +
                        " (name, token) VALUES ('', :highest)"
                        " ON CONFLICT (name) DO UPDATE SET token = max(token, excluded.token)",
         .remove = "DELETE FROM " + tokens_ + " WHERE name IN (" + pick + ") AND token <= :highest"});
}

}  // namespace sqlock::detail::sqlite_engine
