// The baseline dialect: SQL that is the same on every engine, and the schema.
#include "detail/dialect.hpp"

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

std::string dialect::schema_sql() const { return apply_prefix(embedded_schema(engine()), prefix_); }

std::vector<std::string> dialect::required_tables() const {
    return {locks_, tokens_, fences_, prefix_ + "_rows", majority_table()};
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
        } catch (soci::soci_error const&) {
            return locks_ + "." + column + " " + type;
        }
    }
    return {};
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
}

bool dialect::release(pooled_session s, std::string const& name, std::string const& owner, std::int64_t token) const {
    auto& c = cache(s);
    if (!c.release)
        c.release.emplace((s.session.prepare << "DELETE FROM " + locks_ + " WHERE name = :name AND owner = :owner AND token = :token",
                           soci::use(c.name, "name"), soci::use(c.owner, "owner"), soci::use(c.token, "token")));
    c.name = name;
    c.owner = owner;
    c.token = token;
    c.release->execute(true);
    return c.release->get_affected_rows() > 0;
}

std::optional<renewal> dialect::renew(pooled_session s, std::string const& name, std::string const& owner,
                                      std::int64_t token, std::int64_t ttl_us) const {
    auto& c = cache(s);
    if (!c.renew)
        c.renew.emplace((s.session.prepare << "UPDATE " + locks_ + " SET expires_at = " + plus_ttl_sql(now_sql()) +
                                                  " WHERE name = :name AND owner = :owner AND token = :token AND expires_at >= " +
                                                  now_sql() + " RETURNING " + epoch_us_sql("expires_at") + ", " +
                                                  epoch_us_sql(now_sql()),
                         soci::use(c.ttl, "ttl"), soci::use(c.name, "name"), soci::use(c.owner, "owner"),
                         soci::use(c.token, "token"), soci::into(c.expires), soci::into(c.now)));
    c.name = name;
    c.owner = owner;
    c.token = token;
    c.ttl = ttl_us;
    bool const got = c.renew->execute(true);
    finish(*c.renew);
    if (!got) return std::nullopt;
    return renewal{c.expires, c.now};
}

bool dialect::add_hold(soci::session& s, std::string const& name, std::string const& owner, std::int64_t token) const {
    long long tok = token;
    soci::statement st = (s.prepare << "UPDATE " + locks_ + " SET holds = holds + 1 WHERE name = :name AND owner = "
                                       ":owner AND token = :token AND expires_at >= " + now_sql(),
                          soci::use(name, "name"), soci::use(owner, "owner"), soci::use(tok, "token"));
    st.execute(true);
    return st.get_affected_rows() > 0;
}

bool dialect::drop_hold(soci::session& s, std::string const& name, std::string const& owner,
                        std::int64_t token) const {
    long long tok = token;
    soci::statement st = (s.prepare << "UPDATE " + locks_ + " SET holds = holds - 1 WHERE name = :name AND owner = "
                                       ":owner AND token = :token AND holds > 1",
                          soci::use(name, "name"), soci::use(owner, "owner"), soci::use(tok, "token"));
    st.execute(true);
    return st.get_affected_rows() > 0;
}

reap_batch dialect::reap(soci::session& s, std::int64_t grace_us, std::optional<std::int64_t> max_age_us, int batch,
                        bool dry_run) const {
    // Baseline (PostgreSQL, SQLite): a bounded set chosen by a subquery, the
    // condition repeated on the DELETE so a row renewed meanwhile is kept.
    long long grace = grace_us, age = max_age_us.value_or(0), limit = batch;
    std::string const now = now_sql();
    std::string cond = "expires_at < " + minus_sql(now, "grace");
    if (max_age_us) cond = "(" + cond + " OR created_at < " + minus_sql(now, "age") + ")";
    std::string const live = "CASE WHEN expires_at >= " + now + " THEN 1 ELSE 0 END";
    std::string pick = "SELECT name FROM " + locks_ + " WHERE " + cond + " ORDER BY expires_at LIMIT :lim" +
                       skip_locked_sql();
    std::string sql =
        dry_run ? "SELECT COUNT(*), MIN(" + epoch_us_sql("expires_at") + "), COALESCE(SUM(" + live + "), 0) FROM " +
                      locks_ + " WHERE name IN (" + pick + ")"
                : "WITH d AS (DELETE FROM " + locks_ + " WHERE name IN (" + pick + ") AND " + cond +
                      " RETURNING expires_at, " + live + " AS live) SELECT COUNT(*), MIN(" +
                      epoch_us_sql("expires_at") + "), COALESCE(SUM(live), 0) FROM d";
    long long rows = 0, oldest = 0, live_rows = 0;
    soci::indicator oldest_ind = soci::i_null;
    if (max_age_us)
        s << sql, soci::use(grace, "grace"), soci::use(age, "age"), soci::use(limit, "lim"), soci::into(rows),
            soci::into(oldest, oldest_ind), soci::into(live_rows);
    else
        s << sql, soci::use(grace, "grace"), soci::use(limit, "lim"), soci::into(rows),
            soci::into(oldest, oldest_ind), soci::into(live_rows);
    reap_batch r;
    r.rows = rows;
    r.live_purged = live_rows;
    if (oldest_ind == soci::i_ok && rows > 0) r.oldest_expiry_us = oldest;
    return r;
}

std::string dialect::first_token_sql() const {
    return greatest_sql("COALESCE((SELECT f.token FROM " + tokens_ + " f WHERE f.name = ''), 0) + 1",
                        epoch_us_sql(now_sql()));
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
    std::string const pick = "SELECT name FROM " + tokens_ + " WHERE " + cond + " ORDER BY token LIMIT :lim" +
                             skip_locked_sql();
    if (dry_run) {
        s << "SELECT COUNT(*) FROM " + tokens_ + " WHERE name IN (" + pick + ")", soci::use(horizon, "horizon"),
            soci::use(limit, "lim"), soci::into(picked);
        return {picked, picked};
    }
    s << "WITH d AS (DELETE FROM " + tokens_ + " WHERE name IN (" + pick + ") AND " + cond + " RETURNING token),"
         " f AS (INSERT INTO " + tokens_ + " AS t (name, token) SELECT '', MAX(token) FROM d HAVING COUNT(*) > 0"
         " ON CONFLICT (name) DO UPDATE SET token = GREATEST(t.token, excluded.token))"
         " SELECT COUNT(*) FROM d",
        soci::use(horizon, "horizon"), soci::use(limit, "lim"), soci::into(deleted);
    return {deleted, deleted};
}

std::optional<std::int64_t> dialect::fence(soci::session& s, std::string const& resource, std::int64_t token) const {
    // Equal tokens pass: one holder may write several times. The upsert locks
    // the resource's row until the caller's transaction ends.
    long long tok = token, stored = 0;
    s << "INSERT INTO " + fences_ + " AS f (resource, token) VALUES (:resource, :token)"
         " ON CONFLICT (resource) DO UPDATE SET token = excluded.token WHERE f.token <= excluded.token"
         " RETURNING token",
        soci::use(resource, "resource"), soci::use(tok, "token"), soci::into(stored);
    if (s.got_data()) return std::nullopt;
    s << "SELECT token FROM " + fences_ + " WHERE resource = :resource", soci::use(resource, "resource"),
        soci::into(stored);
    return stored;
}

std::vector<lock_listing> dialect::list_locks(soci::session& s) const { return read_locks(s, nullptr); }

std::vector<lock_listing> dialect::read_locks(soci::session& s, std::string const* name) const {
    std::vector<lock_listing> out;
    std::string const sql = "SELECT name, owner, " + epoch_us_sql("created_at") + ", " + epoch_us_sql("expires_at") +
                            ", " + epoch_us_sql(now_sql()) + ", token, holds FROM " + locks_ +
                            (name != nullptr ? " WHERE name = :name" : " ORDER BY name");
    soci::rowset<soci::row> rows = name != nullptr ? (s.prepare << sql, soci::use(*name, "name")) : (s.prepare << sql);
    for (auto const& r : rows) {
        // Integer columns come back as int or long long depending on the engine.
        auto integer = [&](std::size_t i) -> std::int64_t {
            switch (r.get_properties(i).get_data_type()) {
                case soci::dt_integer: return r.get<int>(i);
                case soci::dt_long_long: return r.get<long long>(i);
                case soci::dt_unsigned_long_long: return static_cast<std::int64_t>(r.get<unsigned long long>(i));
                case soci::dt_double: return static_cast<std::int64_t>(r.get<double>(i));
                case soci::dt_string: return std::stoll(r.get<std::string>(i));
                default: return 0;
            }
        };
        out.push_back({r.get<std::string>(0), r.get<std::string>(1), integer(5), static_cast<int>(integer(6)),
                       integer(2), integer(3), integer(4)});
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

void dialect::notify_release(soci::session&, std::string const&) const {}

std::unique_ptr<release_listener> dialect::listen(std::string const&,
                                                  std::function<void(std::string_view)>) const {
    return nullptr;
}

void dialect::delete_attempt(soci::session& s, std::string const& name, std::string const& owner,
                             std::int64_t attempt) const {
    long long id = attempt;
    s << "DELETE FROM " + locks_ + " WHERE name = :name AND owner = :owner AND attempt = :attempt",
        soci::use(name, "name"), soci::use(owner, "owner"), soci::use(id, "attempt");
}

std::optional<lock_listing> dialect::find_lock(soci::session& s, std::string const& name) const {
    auto rows = read_locks(s, &name);
    if (rows.empty()) return std::nullopt;
    return rows.front();
}

std::optional<std::string> dialect::relaxed_durability(soci::session&) const { return std::nullopt; }

std::int64_t dialect::majority_read(soci::session& s, std::string const& name) const {
    long long token = 0;
    s << "SELECT token FROM " + majority_table() + " WHERE name = :name", soci::use(name, "name"), soci::into(token);
    return s.got_data() ? token : 0;
}

bool dialect::majority_write(soci::session& s, std::string const& name, std::int64_t token) const {
    // A max-register: only ever raised, and "won" only by the call that raised
    // it to this value, so two clients settling the same token cannot both win
    // on one member.
    long long tok = token, stored = 0;
    s << "INSERT INTO " + majority_table() + " AS m (name, token) VALUES (:name, :token)"
         " ON CONFLICT (name) DO UPDATE SET token = excluded.token WHERE m.token < excluded.token RETURNING token",
        soci::use(name, "name"), soci::use(tok, "token"), soci::into(stored);
    return s.got_data();
}

int dialect::socket_of(soci::session&) const { return -1; }

void dialect::set_engine_wait(soci::session&, std::chrono::milliseconds) const {}

std::unique_ptr<dialect> make_dialect(sqlock::engine e, std::string const& table_prefix, store_options const& options) {
    validate_table_prefix(table_prefix);
    switch (e) {
        case engine::postgresql: return make_postgresql_dialect(table_prefix, options);
        case engine::mysql: return make_mysql_dialect(table_prefix, options);
        case engine::sqlite: return make_sqlite_dialect(table_prefix, options);
    }
    throw usage_error("sqlock: unknown engine");
}

}  // namespace sqlock::detail
