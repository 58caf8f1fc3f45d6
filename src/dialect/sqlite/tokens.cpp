// SQLite: the token counters.
#include "dialect/sqlite/sqlite.hpp"

namespace sqlock::detail::sqlite_engine {

std::int64_t sqlite_dialect::draw_token(pooled_session ps, std::string const& name) const {
    auto& c = static_cast<lite_cache&>(cache(ps));
    long long token = 0;
    c.token.start(handle_of(ps), token_sql_).bind(":name", name).run([&](sqlite3_stmt* st) {
        token = sqlite3_column_int64(st, 0);
    });
    return token;
}

}  // namespace sqlock::detail::sqlite_engine
