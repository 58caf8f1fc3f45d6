// MariaDB / MySQL: the reaper and the operator's calls.
#include "dialect/mysql/mysql.hpp"

namespace sqlock::detail::mysql_engine {

reap_batch mysql_dialect::reap(soci::session& s, std::int64_t grace_us, std::optional<std::int64_t> max_age_us,
                               int batch, bool dry_run) const {
    long long grace = grace_us, age = max_age_us.value_or(0), limit = batch;
    std::string cond = "expires_at < " + minus_sql("NOW(6)", "grace");
    if (max_age_us) cond = "(" + cond + " OR created_at < " + minus_sql("NOW(6)", "age") + ")";
    std::string const measure = "SELECT COUNT(*), MIN(" + epoch_us_sql("expires_at") +
                                "), COALESCE(SUM(CASE WHEN expires_at >= NOW(6) THEN 1 ELSE 0 END), 0) FROM "
                                "(SELECT expires_at FROM " +
                                locks_ + " WHERE " + cond + " ORDER BY expires_at LIMIT :lim) AS picked";
    std::string const remove = "DELETE FROM " + locks_ + " WHERE " + cond + " ORDER BY expires_at LIMIT :lim";
    long long rows = 0, oldest = 0, live = 0;
    soci::indicator oldest_ind = soci::i_null;
    soci::transaction tx(s);
    if (max_age_us)
        s << measure, soci::use(grace, "grace"), soci::use(age, "age"), soci::use(limit, "lim"), soci::into(rows),
            soci::into(oldest, oldest_ind), soci::into(live);
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

token_purge_batch mysql_dialect::purge_tokens(soci::session& s, std::int64_t horizon_us, int batch,
                                              bool dry_run) const {
    std::string const cond = purgeable_tokens_sql();
    return purge_tokens_stepwise(s, horizon_us, batch, dry_run,
                                 {.measure = "SELECT COUNT(*), MAX(token) FROM (SELECT token FROM " + tokens_ +
                                             " WHERE " + cond + " ORDER BY token LIMIT :lim) AS picked",
                                  .raise_floor = "INSERT INTO " + tokens_ +
                                                 " (name, token) VALUES ('', :highest)"
                                                 " ON DUPLICATE KEY UPDATE token = GREATEST(token, VALUES(token))",
                                  .remove = "DELETE FROM " + tokens_ + " WHERE " + cond +
                                            " AND token <= :highest ORDER BY token LIMIT :lim"});
}

}  // namespace sqlock::detail::mysql_engine
