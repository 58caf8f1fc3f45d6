// The baseline SQL of the token counters and majority mode's counters.
#include "detail/dialect.hpp"

#include <soci/soci.h>

namespace sqlock::detail {

std::string dialect::first_token_sql() const {
    return greatest_sql("COALESCE((SELECT f.token FROM " + tokens_ + " f WHERE f.name = ''), 0) + 1",
                        epoch_us_sql(now_sql()));
}

std::string dialect::majority_read_sql() const {
    return "SELECT i.id, " + epoch_us_sql(now_sql()) + " - " + epoch_us_sql("i.created_at") +
           ", (SELECT COUNT(*) FROM " + majority_members_table() +
           " g WHERE g.id = i.id), COALESCE((SELECT c.token FROM " + majority_table() +
           " c WHERE c.name = :name), 0) FROM " + identity_table() + " i";
}

std::optional<member_counter> dialect::majority_read(soci::session& s, std::string const& name) const {
    member_counter c;
    long long age = 0, joined = 0, token = 0;
    s << majority_read_sql(), soci::use(name, "name"), soci::into(c.identity.id), soci::into(age), soci::into(joined),
        soci::into(token);
    if (!s.got_data()) return std::nullopt;
    c.identity.age_us = age;
    c.identity.joined = joined > 0;
    c.token = token;
    return c;
}

member_write dialect::majority_write_or_read(soci::session& s, std::string const& name, std::int64_t token) const {
    if (majority_write(s, name, token, {})) return {true, std::nullopt};
    return {false, majority_read(s, name)};
}

bool dialect::majority_write(soci::session& s, std::string const& name, std::int64_t token,
                             std::string const& member_id) const {
    // A max-register: only ever raised, and "won" only by the call that raised
    // it to this value, so two clients settling the same token cannot both win
    // on one member. Only on the database the caller read as a joined member: a
    // member recreated since (another identity) or not seeded yet wins nothing.
    long long tok = token, stored = 0;
    std::string const sql = "INSERT INTO " + majority_table() +
                            " AS m (name, token) SELECT CAST(:name AS TEXT), CAST(:token AS BIGINT)"
                            " WHERE EXISTS (SELECT 1 FROM " +
                            identity_table() + " i JOIN " + majority_members_table() + " g ON g.id = i.id" +
                            (member_id.empty() ? "" : " WHERE i.id = :mid") +
                            ") ON CONFLICT (name) DO UPDATE SET token = excluded.token WHERE m.token < "
                            "excluded.token RETURNING token";
    if (member_id.empty()) s << sql, soci::use(name, "name"), soci::use(tok, "token"), soci::into(stored);
    else s << sql, soci::use(name, "name"), soci::use(tok, "token"), soci::use(member_id, "mid"), soci::into(stored);
    return s.got_data();
}

std::optional<member_identity> dialect::majority_identity(soci::session& s) const {
    std::string id;
    long long age = 0, joined = 0;
    s << "SELECT i.id, " + epoch_us_sql(now_sql()) + " - " + epoch_us_sql("i.created_at") + ", (SELECT COUNT(*) FROM " +
             majority_members_table() + " g WHERE g.id = i.id) FROM " + identity_table() + " i",
        soci::into(id), soci::into(age), soci::into(joined);
    if (!s.got_data()) return std::nullopt;
    return member_identity{id, age, joined > 0};
}

std::vector<std::pair<std::string, std::int64_t>> dialect::majority_read_all(soci::session& s) const {
    std::vector<std::pair<std::string, std::int64_t>> out;
    std::string name;
    long long token = 0;
    soci::statement st =
        (s.prepare << "SELECT name, token FROM " + majority_table(), soci::into(name), soci::into(token));
    st.execute();
    while (st.fetch()) out.emplace_back(name, token);
    return out;
}

std::string dialect::majority_raise_sql() const {
    return "INSERT INTO " + majority_table() +
           " AS m (name, token) VALUES (:name, :token)"
           " ON CONFLICT (name) DO UPDATE SET token = excluded.token WHERE m.token < excluded.token";
}

std::string dialect::majority_add_member_sql() const {
    return "INSERT INTO " + majority_members_table() + " (id) VALUES (:id) ON CONFLICT (id) DO NOTHING";
}

bool dialect::majority_join(soci::session& s, std::string const& member_id,
                            std::vector<std::pair<std::string, std::int64_t>> const& counters) const {
    return write_transaction(s, [&] {
        std::string id;
        s << "SELECT id FROM " + identity_table(), soci::into(id);
        if (!s.got_data() || id != member_id) return false;
        std::string name;
        long long token = 0;
        soci::statement raise = (s.prepare << majority_raise_sql(), soci::use(name, "name"), soci::use(token, "token"));
        for (auto const& [n, t] : counters) {
            name = n;
            token = t;
            raise.execute(true);
        }
        s << majority_add_member_sql(), soci::use(member_id, "id");
        return true;
    });
}

}  // namespace sqlock::detail
