// The baseline SQL of the reaper and the operator's calls.
#include "detail/dialect.hpp"

#include <soci/soci.h>

namespace sqlock::detail {

reap_batch dialect::reap(soci::session& s, std::int64_t grace_us, std::optional<std::int64_t> max_age_us, int batch,
                         bool dry_run) const {
    // Baseline (PostgreSQL, SQLite): a bounded set chosen by a subquery, the
    // condition repeated on the DELETE so a row renewed meanwhile is kept.
    long long grace = grace_us, age = max_age_us.value_or(0), limit = batch;
    auto const [cond, live, pick] = reap_sql(max_age_us.has_value());
    std::string const sql = dry_run ? "SELECT COUNT(*), MIN(" + epoch_us_sql("expires_at") + "), COALESCE(SUM(" + live +
                                          "), 0) FROM " + locks_ + " WHERE name IN (" + pick + ")"
                                    : "WITH d AS (DELETE FROM " + locks_ + " WHERE name IN (" + pick + ") AND " + cond +
                                          " RETURNING expires_at, " + live + " AS live) SELECT COUNT(*), MIN(" +
                                          epoch_us_sql("expires_at") + "), COALESCE(SUM(live), 0) FROM d";
    long long rows = 0, oldest = 0, live_rows = 0;
    soci::indicator oldest_ind = soci::i_null;
    if (max_age_us)
        s << sql, soci::use(grace, "grace"), soci::use(age, "age"), soci::use(limit, "lim"), soci::into(rows),
            soci::into(oldest, oldest_ind), soci::into(live_rows);
    else
        s << sql, soci::use(grace, "grace"), soci::use(limit, "lim"), soci::into(rows), soci::into(oldest, oldest_ind),
            soci::into(live_rows);
    reap_batch r;
    r.rows = rows;
    r.live_purged = live_rows;
    if (oldest_ind == soci::i_ok && rows > 0) r.oldest_expiry_us = oldest;
    return r;
}

std::string dialect::purgeable_tokens_sql() const {
    return "name <> '' AND token < " + epoch_us_sql(now_sql()) + " - :horizon";
}

token_purge_batch dialect::purge_tokens(soci::session& s, std::int64_t horizon_us, int batch, bool dry_run) const {
    // Baseline (PostgreSQL): one statement. The floor is raised to the highest
    // token actually deleted (RETURNING gives the rows as deleted), in the same
    // transaction as the DELETE, so nobody sees a counter gone and the floor low.
    long long horizon = horizon_us, limit = batch, picked = 0, deleted = 0;
    std::string const cond = purgeable_tokens_sql();
    std::string const pick =
        "SELECT name FROM " + tokens_ + " WHERE " + cond + " ORDER BY token LIMIT :lim" + skip_locked_sql();
    if (dry_run) {
        s << "SELECT COUNT(*) FROM " + tokens_ + " WHERE name IN (" + pick + ")", soci::use(horizon, "horizon"),
            soci::use(limit, "lim"), soci::into(picked);
        return {picked, picked};
    }
    s << "WITH d AS (DELETE FROM " + tokens_ + " WHERE name IN (" + pick + ") AND " + cond +
             " RETURNING token),"
             " f AS (INSERT INTO " +
             tokens_ +
             " AS t (name, token) SELECT '', MAX(token) FROM d HAVING COUNT(*) > 0"
             " ON CONFLICT (name) DO UPDATE SET token = GREATEST(t.token, excluded.token))"
             " SELECT COUNT(*) FROM d",
        soci::use(horizon, "horizon"), soci::use(limit, "lim"), soci::into(deleted);
    return {deleted, deleted};
}

std::vector<lock_listing> dialect::list_locks(soci::session& s) const { return read_locks(s, nullptr); }

namespace {

// Integer columns (and aggregates: MariaDB's SUM is a DECIMAL) come back as
// int, long long, double or text depending on the engine.
std::int64_t integer_at(soci::row const& r, std::size_t i) {
    if (r.get_indicator(i) == soci::i_null) return 0;
    switch (r.get_properties(i).get_data_type()) {
        case soci::dt_integer: return r.get<int>(i);
        case soci::dt_long_long: return r.get<long long>(i);
        case soci::dt_unsigned_long_long: return static_cast<std::int64_t>(r.get<unsigned long long>(i));
        case soci::dt_double: return static_cast<std::int64_t>(r.get<double>(i));
        case soci::dt_string: return std::stoll(r.get<std::string>(i));
        default: return 0;
    }
}

}  // namespace

bool dialect::any_live_lock(soci::session& s) const {
    int one = 0;
    s << "SELECT 1 FROM " + locks_ + " WHERE expires_at >= " + now_sql() + " LIMIT 1", soci::into(one);
    return s.got_data();
}

table_counts dialect::count_tables(soci::session& s) const {
    std::string const now = now_sql();
    table_counts c;
    soci::row r;
    s << "SELECT COUNT(*), SUM(CASE WHEN expires_at < " + now + " THEN 1 ELSE 0 END), MIN(CASE WHEN expires_at < " +
             now + " THEN " + epoch_us_sql("expires_at") + " END), " + epoch_us_sql(now) + " FROM " + locks_,
        soci::into(r);
    c.rows = integer_at(r, 0);
    c.expired = integer_at(r, 1);
    if (r.get_indicator(2) == soci::i_ok) c.oldest_expiry_us = integer_at(r, 2);
    c.now_us = integer_at(r, 3);
    soci::row t;
    s << "SELECT COUNT(*) FROM " + tokens_ + " WHERE name <> ''", soci::into(t);
    c.token_rows = integer_at(t, 0);
    return c;
}

std::vector<lock_listing> dialect::read_locks(soci::session& s, std::string const* name) const {
    std::vector<lock_listing> out;
    std::string const sql = "SELECT name, owner, " + epoch_us_sql("created_at") + ", " + epoch_us_sql("expires_at") +
                            ", " + epoch_us_sql(now_sql()) + ", token, holds FROM " + locks_ +
                            (name != nullptr ? " WHERE name = :name" : " ORDER BY name");
    soci::rowset<soci::row> rows = name != nullptr ? (s.prepare << sql, soci::use(*name, "name")) : (s.prepare << sql);
    for (auto const& r : rows) {
        out.push_back({r.get<std::string>(0), r.get<std::string>(1), integer_at(r, 5),
                       static_cast<int>(integer_at(r, 6)), integer_at(r, 2), integer_at(r, 3), integer_at(r, 4)});
    }
    return out;
}

std::optional<lock_listing> dialect::force_release(soci::session& s, std::string const& name) const {
    // An operator's tool: read the row, then delete exactly that grant (its token).
    for (auto const& r : read_locks(s, &name)) {
        long long tok = r.token;
        soci::statement st = (s.prepare << "DELETE FROM " + locks_ + " WHERE name = :name AND token = :token",
                              soci::use(name, "name"), soci::use(tok, "token"));
        st.execute(true);
        if (st.get_affected_rows() == 0) return std::nullopt;
        notify_release(s, name);
        return r;
    }
    return std::nullopt;
}

std::vector<long_row_lock> dialect::long_row_locks(soci::session&, std::chrono::milliseconds) const { return {}; }

std::optional<lock_listing> dialect::find_lock(soci::session& s, std::string const& name) const {
    auto rows = read_locks(s, &name);
    if (rows.empty()) return std::nullopt;
    return rows.front();
}

token_purge_batch dialect::purge_tokens_stepwise(soci::session& s, std::int64_t horizon_us, int batch, bool dry_run,
                                                 purge_steps const& sql) const {
    long long horizon = horizon_us, limit = batch, picked = 0, highest = 0, deleted = 0;
    soci::indicator highest_ind = soci::i_null;
    write_transaction(s, [&] {
        s << sql.measure, soci::use(horizon, "horizon"), soci::use(limit, "lim"), soci::into(picked),
            soci::into(highest, highest_ind);
        if (dry_run || picked == 0 || highest_ind != soci::i_ok) return false;
        s << sql.raise_floor, soci::use(highest, "highest");
        soci::statement st = (s.prepare << sql.remove, soci::use(horizon, "horizon"), soci::use(limit, "lim"),
                              soci::use(highest, "highest"));
        st.execute(true);
        deleted = st.get_affected_rows();
        return true;
    });
    return {dry_run ? picked : deleted, picked};
}

dialect::reap_conditions dialect::reap_sql(bool max_age) const {
    std::string const now = now_sql();
    std::string cond = "expires_at < " + minus_sql(now, "grace");
    if (max_age) cond = "(" + cond + " OR created_at < " + minus_sql(now, "age") + ")";
    std::string pick =
        "SELECT name FROM " + locks_ + " WHERE " + cond + " ORDER BY expires_at LIMIT :lim" + skip_locked_sql();
    return {cond, "CASE WHEN expires_at >= " + now + " THEN 1 ELSE 0 END", pick};
}

}  // namespace sqlock::detail
