// SQLite: the schema.
#include "dialect/sqlite/sqlite.hpp"

namespace sqlock::detail::sqlite_engine {

std::vector<std::string> sqlite_dialect::required_tables() const {
    auto names = dialect::required_tables();
    // The triggers that keep the token counters (schema/sqlite.sql).
    names.push_back(locks_ + "_tok_ins");
    names.push_back(locks_ + "_tok_upd");
    return names;
}

void sqlite_dialect::create_schema(soci::session& s) const {
    (void)write_transaction(s, [&] {
        dialect::create_schema(s);
        return true;
    });
}

}  // namespace sqlock::detail::sqlite_engine
