// The baseline SQL of the schema.
#include "detail/dialect.hpp"

#include <soci/soci.h>

namespace sqlock::detail {

std::string dialect::schema_sql() const { return apply_prefix(embedded_schema(engine()), prefix_); }

std::vector<std::string> dialect::required_tables() const {
    return {locks_,
            tokens_,
            fences_,
            prefix_ + "_rows",
            majority_table(),
            identity_table(),
            majority_members_table(),
            semaphores_table()};
}

std::string dialect::missing_table(soci::session& s) const {
    for (auto const& table : required_tables()) {
        int found = 0;
        s << table_exists_sql(), soci::use(table, "t"), soci::into(found);
        if (found == 0) return table;
    }
    // Columns added since the first release (a statement naming a missing
    // column fails, and changes nothing).
    for (auto const& [column, type] : added_columns()) {
        try {
            s << "SELECT COUNT(" + column + ") FROM " + locks_ + " WHERE 1 = 0";
        } catch (soci::soci_error const& e) {
            // A connection that broke (or was closed at the run's deadline) says nothing of the
            // column: let the run report it (or reconnect), never as an older schema.
            if (auto const f = classify(e, s); f == failure::connection || f == failure::transient) throw;
            return locks_ + "." + column + " " + type;
        }
    }
    return {};
}

std::optional<int> dialect::stored_protocol(soci::session& s) const {
    // Two statements: a SELECT of a table that is not there would be an error the server logs.
    auto const table = protocol_table();
    int found = 0;
    s << table_exists_sql(), soci::use(table, "t"), soci::into(found);
    if (found == 0) return std::nullopt;
    int version = 0;
    soci::indicator ind = soci::i_null;
    s << "SELECT version FROM " + table + " WHERE one = 1", soci::into(version, ind);
    if (!s.got_data() || ind != soci::i_ok) return std::nullopt;
    return version;
}

std::vector<std::pair<std::string, std::string>> dialect::added_columns() const {
    return {{"attempt", "BIGINT NOT NULL DEFAULT 0"}};
}

void dialect::create_schema(soci::session& s) const {
    // The schema files are plain statements separated by ';' with '--' comment
    // lines. MySQL's stored procedures end with another delimiter, set by a
    // `DELIMITER $$` line as in the mariadb and mysql clients; SQLite's triggers
    // end at a line "END;", as its shell knows. Each statement end becomes
    // '\x01' here.
    std::string sql, delimiter = ";";
    bool in_trigger = false;
    for (auto text = schema_sql(); !text.empty();) {
        auto eol = text.find('\n');
        auto line = text.substr(0, eol);
        text = eol == std::string::npos ? std::string{} : text.substr(eol + 1);
        auto first = line.find_first_not_of(" \t");
        if (first == std::string::npos || line.compare(first, 2, "--") == 0) continue;
        if (line.compare(first, 10, "DELIMITER ") == 0) {
            delimiter = line.substr(first + 10, line.find_first_of(" \t\r", first + 10) - first - 10);
            continue;
        }
        if (line.compare(first, 14, "CREATE TRIGGER") == 0) in_trigger = true;
        if (in_trigger && line.compare(first, 4, "END;") != 0) {
            sql += line + "\n";  // a statement of the trigger's body
            continue;
        }
        in_trigger = false;
        // Appended piece by piece (GCC 12 warns falsely about string::replace here, bug 105329).
        for (std::size_t at = 0;;) {
            auto const hit = line.find(delimiter, at);
            sql.append(line, at, hit == std::string::npos ? std::string::npos : hit - at);
            if (hit == std::string::npos) break;
            sql += '\x01';
            at = hit + delimiter.size();
        }
        sql += '\n';
    }
    for (std::size_t start = 0; start < sql.size();) {
        auto end = sql.find('\x01', start);
        auto statement = sql.substr(start, end == std::string::npos ? std::string::npos : end - start);
        if (statement.find_first_not_of(" \t\n") != std::string::npos) s << statement;
        if (end == std::string::npos) break;
        start = end + 1;
    }
    // A lock table made by an older sqlock: CREATE TABLE IF NOT EXISTS kept it as it was, and
    // neither SQLite nor MySQL 8 has ADD COLUMN IF NOT EXISTS.
    for (auto const& [column, type] : added_columns()) {
        try {
            s << "SELECT COUNT(" + column + ") FROM " + locks_ + " WHERE 1 = 0";
        } catch (soci::soci_error const&) {
            s << "ALTER TABLE " + locks_ + " ADD COLUMN " + column + " " + type;
        }
    }
}

std::optional<std::string> dialect::relaxed_durability(soci::session&) const { return std::nullopt; }
bool dialect::multi_writer_cluster(soci::session&) const { return false; }

}  // namespace sqlock::detail
