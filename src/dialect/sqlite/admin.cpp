#include "dialect/sqlite/sqlite.hpp"

namespace sqlock::detail {

reap_batch sqlite_dialect::reap(soci::session& s, std::int64_t grace_us, std::optional<std::int64_t> max_age_us, int batch,
                                bool dry_run) const {
    long long grace = grace_us, age = max_age_us.value_or(0), limit = batch;
    std::string const now = now_sql();
    std::string cond = "expires_at < " + minus_sql(now, "grace");
    if (max_age_us) cond = "(" + cond + " OR created_at < " + minus_sql(now, "age") + ")";
    std::string const live = "CASE WHEN expires_at >= " + now + " THEN 1 ELSE 0 END";
    std::string const pick =
        "SELECT name FROM " + locks_ + " WHERE " + cond + " ORDER BY expires_at LIMIT :lim";
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
    long long horizon = horizon_us, limit = batch, picked = 0, highest = 0;
    soci::indicator highest_ind = soci::i_null;
    std::string const pick =
        "SELECT name FROM " + tokens_ + " WHERE " + purgeable_tokens_sql() + " ORDER BY token LIMIT :lim";
    s << "BEGIN IMMEDIATE";
    try {
        s << "SELECT COUNT(*), MAX(token) FROM " + tokens_ + " WHERE name IN (" + pick + ")",
            soci::use(horizon, "horizon"), soci::use(limit, "lim"), soci::into(picked),
            soci::into(highest, highest_ind);
        long long deleted = 0;
        if (!dry_run && picked > 0 && highest_ind == soci::i_ok) {
            s << "INSERT INTO " + tokens_ + " (name, token) VALUES ('', :highest)"
                 " ON CONFLICT (name) DO UPDATE SET token = max(token, excluded.token)",
                soci::use(highest, "highest");
            soci::statement st = (s.prepare << "DELETE FROM " + tokens_ + " WHERE name IN (" + pick +
                                                   ") AND token <= :highest",
                                  soci::use(horizon, "horizon"), soci::use(limit, "lim"),
                                  soci::use(highest, "highest"));
            st.execute(true);
            deleted = st.get_affected_rows();
        }
        s << (dry_run ? "ROLLBACK" : "COMMIT");
        return {dry_run ? picked : deleted, picked};
    } catch (...) {
        try {
            s << "ROLLBACK";
        } catch (...) {  // no transaction left to roll back
        }
        throw;
    }
}

}  // namespace sqlock::detail
