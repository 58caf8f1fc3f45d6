// PostgreSQL: the schema.
#include "dialect/postgresql/postgresql.hpp"

namespace sqlock::detail::postgresql_engine {

std::vector<std::pair<std::string, std::string>> postgresql_dialect::added_columns() const {
    auto columns = dialect::added_columns();
    columns.emplace_back("waiters", "boolean NOT NULL DEFAULT false");
    return columns;
}

std::optional<std::string> postgresql_dialect::relaxed_durability(soci::session& s) const {
    std::string fsync;
    s << "SELECT current_setting('fsync')", soci::into(fsync);
    if (fsync == "off") return "fsync = off";
    return std::nullopt;
}

void postgresql_dialect::create_schema(soci::session& s) const {
    std::string const key = "sqlock schema " + prefix_;
    s << "SELECT 1 FROM pg_advisory_lock(hashtext(:k))", soci::use(key, "k");
    try {
        dialect::create_schema(s);
    } catch (...) {
        try {
            s << "SELECT 1 FROM pg_advisory_unlock(hashtext(:k))", soci::use(key, "k");
        } catch (...) {  // the session ends the lock when it closes
        }
        throw;
    }
    s << "SELECT 1 FROM pg_advisory_unlock(hashtext(:k))", soci::use(key, "k");
}

}  // namespace sqlock::detail::postgresql_engine
