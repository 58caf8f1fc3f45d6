// MariaDB / MySQL: the fence.
#include "dialect/mysql/mysql.hpp"

namespace sqlock::detail::mysql_engine {

std::optional<std::int64_t> mysql_dialect::fence(soci::session& s, std::string const& resource,
                                                 std::int64_t token) const {
    long long tok = token, stored = 0;
    s << fence_sql_, soci::use(resource, "resource"), soci::use(tok, "token");
    s << fence_seen_sql_, soci::use(resource, "resource"), soci::into(stored);
    if (stored <= tok) return std::nullopt;
    return stored;
}

}  // namespace sqlock::detail::mysql_engine
