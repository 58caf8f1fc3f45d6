// The baseline dialect: the table names, the table prefix and the embedded schema.
#include "detail/dialect.hpp"

#include "dialect/server.hpp"

#include <sqlock/errors.hpp>

#include <soci/soci.h>

#include <algorithm>

namespace sqlock::detail {

std::unique_ptr<dialect> make_postgresql_dialect(std::string const& prefix, store_options const& options);

std::unique_ptr<dialect> make_mysql_dialect(std::string const& prefix, store_options const& options);

std::unique_ptr<dialect> make_sqlite_dialect(std::string const& prefix, store_options const& options);

namespace {
constexpr std::string_view default_prefix = "sqlock";

// PostgreSQL silently truncates longer names (NAMEDATALEN - 1), so two could
// collide; MariaDB allows 64, SQLite any length.
constexpr std::size_t max_identifier = 63;

// Names made in code rather than in schema/*.sql: the NOTIFY channel (dialect::channel()).
constexpr std::string_view code_names[] = {"sqlock_released"};

bool identifier_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

// The longest name apply_prefix() renames, over every engine's embedded DDL, so
// that a table, index or sequence added to schema/*.sql is covered unchanged.
std::string_view longest_name() noexcept {
    std::string_view longest;
    for (auto name : code_names)
        if (name.size() > longest.size()) longest = name;
    for (auto e : {engine::postgresql, engine::mysql, engine::sqlite}) {
        auto const ddl = embedded_schema(e);
        for (std::size_t i = 0; i < ddl.size();) {
            if (ddl.substr(i, 2) == "--") {
                i = std::min(ddl.find('\n', i), ddl.size());
                continue;
            }
            auto end = i;
            while (end < ddl.size() && identifier_char(ddl[end])) ++end;
            auto const word = ddl.substr(i, end - i);
            if (word.starts_with(default_prefix) && word.size() > default_prefix.size() &&
                word[default_prefix.size()] == '_' && word.size() > longest.size())
                longest = word;
            i = end == i ? i + 1 : end;
        }
    }
    return longest;
}

}  // namespace

void validate_table_prefix(std::string_view prefix) {
    static std::string_view const longest = longest_name();
    static std::size_t const max_prefix =
        max_identifier - std::min(max_identifier, longest.size() - default_prefix.size());
    bool ok = !prefix.empty() && !(prefix[0] >= '0' && prefix[0] <= '9');
    for (char c : prefix) ok = ok && identifier_char(c);
    if (!ok)
        throw usage_error("sqlock: invalid table prefix '" + std::string(prefix) + "': use 1 to " +
                          std::to_string(max_prefix) + " characters from [A-Za-z0-9_], not starting with a digit");
    if (prefix.size() > max_prefix)
        throw usage_error("sqlock: table prefix '" + std::string(prefix) + "' is " + std::to_string(prefix.size()) +
                          " characters long: use at most " + std::to_string(max_prefix) +
                          ", so that every name made from it (the longest is '<prefix>" +
                          std::string(longest.substr(default_prefix.size())) + "') fits in " +
                          std::to_string(max_identifier) + " bytes, PostgreSQL's identifier limit");
}

void validate_param_name(std::string const& key) {
    bool ok = !key.empty();
    for (char c : key) ok = ok && identifier_char(c);
    if (!ok)
        throw usage_error("sqlock: the database URL has a parameter named '" + key +
                          "': parameter names are letters, digits and '_' (the client library's option names)");
}

std::string apply_prefix(std::string_view ddl, std::string_view prefix) {
    std::string const from = std::string(default_prefix) + "_";
    std::string const to = std::string(prefix) + "_";
    std::string out;
    out.reserve(ddl.size());
    for (std::size_t i = 0; i < ddl.size();) {
        bool at_word_start = i == 0 || !identifier_char(ddl[i - 1]);
        if (at_word_start && ddl.substr(i, from.size()) == from) {
            out += to;
            i += from.size();
        } else {
            out += ddl[i++];
        }
    }
    return out;
}

dialect::dialect(std::string const& table_prefix, store_options const& options)
    : options_(options),
      prefix_(table_prefix),
      locks_(table_prefix + "_locks"),
      tokens_(table_prefix + "_tokens"),
      fences_(table_prefix + "_fences") {}

std::unique_ptr<dialect> make_dialect(sqlock::engine e, std::string const& table_prefix, store_options const& options) {
    validate_table_prefix(table_prefix);
    switch (e) {
        case engine::postgresql: return make_postgresql_dialect(table_prefix, options);
        case engine::mysql: return make_mysql_dialect(table_prefix, options);
        case engine::sqlite: return make_sqlite_dialect(table_prefix, options);
    }
    throw usage_error("sqlock: unknown engine");
}

std::string schema_file(sqlock::engine e) { return "schema/" + std::string(to_string(e)) + ".sql"; }

std::optional<server_info> dialect::server() const {
    std::lock_guard lock(server_mutex_);
    return server_;
}

server_info dialect::learn_server(soci::session& s) const {
    if (auto known = server()) return *known;
    std::string version, comment;
    read_server_answer(s, version, comment);
    fake_server_answer(engine(), version, comment);
    auto const found = parse_server_answer(engine(), version, comment);
    if (refuse_unsupported_.load(std::memory_order_relaxed)) require_supported(found);
    std::lock_guard lock(server_mutex_);
    if (!server_) server_ = found;  // two first connections at once: one answer is kept
    return *server_;
}

bool dialect::write_transaction(soci::session& s, std::function<bool()> const& body) const {
    s << begin_write_sql();
    try {
        bool const commit = body();
        s << (commit ? "COMMIT" : "ROLLBACK");
        return commit;
    } catch (...) {
        try {
            s << "ROLLBACK";
        } catch (...) {  // no transaction left to roll back
        }
        throw;
    }
}

}  // namespace sqlock::detail
