// Internal: the SQL of the schema: which tables exist, creating them, and
// whether the server makes commits durable.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace soci {
class session;
}  // namespace soci

namespace sqlock::detail {

class schema_statements {
public:
    virtual ~schema_statements() = default;

    /// Every table (and sequence) the schema creates.
    [[nodiscard]] virtual std::vector<std::string> required_tables() const = 0;

    /// Columns of the lock table added after its first release, with their
    /// types: a store on older tables says which ALTER TABLE to run.
    [[nodiscard]] virtual std::vector<std::pair<std::string, std::string>> added_columns() const = 0;

    /// The name of the first lock table that is missing, or "<table>.<column> <type>"
    /// for a missing column of the lock table, or empty.
    [[nodiscard]] virtual std::string missing_table(soci::session& s) const = 0;

    /// Create the tables (idempotent).
    virtual void create_schema(soci::session& s) const = 0;

    /// The protocol the tables speak, as `<prefix>_protocol` records it: empty
    /// when they have no record (made before protocol 1 was recorded: they speak 1).
    [[nodiscard]] virtual std::optional<int> stored_protocol(soci::session& s) const = 0;

    /// The engine's DDL with this dialect's table names.
    [[nodiscard]] virtual std::string schema_sql() const = 0;

    /// Why commits on this server may not be durable (a setting and its value),
    /// or empty when they are.
    [[nodiscard]] virtual std::optional<std::string> relaxed_durability(soci::session& s) const = 0;

    /// Whether the server is a node of a cluster where every node takes writes
    /// and row locks are local to a node (MariaDB Galera: `wsrep_on`), so that
    /// a row lock taken on one node does not block another.
    [[nodiscard]] virtual bool multi_writer_cluster(soci::session& s) const = 0;
};

}  // namespace sqlock::detail
