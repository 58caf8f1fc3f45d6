// SQLite: the schema.
#include "dialect/sqlite/sqlite.hpp"

namespace sqlock::detail::sqlite_engine {

std::vector<std::string> sqlite_dialect::required_tables() const {
    return {locks_,
            tokens_,
            fences_,
            prefix_ + "_rows",
            majority_table(),
            identity_table(),
            majority_members_table(),
            semaphores_table(),
            locks_ + "_tok_ins",
            locks_ + "_tok_upd"};
}

void sqlite_dialect::create_schema(soci::session& s) const {
    (void)write_transaction(s, [&] {
        dialect::create_schema(s);
        return true;
    });
}

}  // namespace sqlock::detail::sqlite_engine
