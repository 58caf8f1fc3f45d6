// PostgreSQL: the reaper and the operator's calls.
#include "dialect/postgresql/postgresql.hpp"

namespace sqlock::detail::postgresql_engine {

std::vector<long_row_lock> postgresql_dialect::long_row_locks(soci::session& s,
                                                              std::chrono::milliseconds threshold) const {
    long long ms = threshold.count();
    std::string const table = prefix_ + "_rows";
    soci::rowset<soci::row> rows =
        (s.prepare << "SELECT CAST(a.pid AS bigint), CAST(EXTRACT(EPOCH FROM (clock_timestamp() - a.xact_start)) "
                      "* 1000 AS bigint), COALESCE(CAST(a.client_addr AS text), 'local') FROM pg_stat_activity a "
                      "WHERE a.state LIKE 'idle in transaction%' AND a.xact_start < clock_timestamp() - "
                      "CAST(:ms AS double precision) * interval '1 millisecond' AND EXISTS (SELECT 1 FROM "
                      "pg_locks l WHERE l.pid = a.pid AND l.relation = to_regclass(:rows)) ORDER BY a.xact_start",
         soci::use(ms, "ms"), soci::use(table, "rows"));
    std::vector<long_row_lock> out;
    for (auto const& r : rows) out.push_back({r.get<long long>(0), r.get<long long>(1), r.get<std::string>(2)});
    return out;
}

}  // namespace sqlock::detail::postgresql_engine
