// MariaDB / MySQL: the token counters.
#include "dialect/mysql/mysql.hpp"

namespace sqlock::detail::mysql_engine {

std::int64_t mysql_dialect::draw_token(pooled_session ps, std::string const& name) const {
    // Autocommit: the counter is on disk (innodb_flush_log_at_trx_commit = 1,
    // checked at open) before the token is used.
    auto& c = cache(ps);
    prepared(c.draw_token, ps, draw_sql_);
    unsigned long name_length = 0;
    std::array<MYSQL_BIND, 1> params{bytes_param(name, name_length)};
    std::array<long long, 0> none{};
    return on(c.draw_token, [&](server_statement& st) {
        (void)st.execute(params.data(), none);
        return static_cast<std::int64_t>(st.insert_id());
    });
}

std::string mysql_dialect::majority_raise_sql() const {
    return "INSERT INTO " + majority_table() +
           " (name, token) VALUES (:name, :token) ON DUPLICATE KEY UPDATE token = GREATEST(token, VALUES(token))";
}

bool mysql_dialect::majority_write(soci::session& s, std::string const& name, std::int64_t token,
                                   std::string const& member_id) const {
    long long tok = token;
    s << "INSERT IGNORE INTO " + majority_table() + " (name, token) VALUES (:name, 0)", soci::use(name, "name");
    std::string const sql = "UPDATE " + majority_table() +
                            " SET token = :token WHERE name = :name AND token < :below AND EXISTS (SELECT 1 FROM " +
                            identity_table() + " i JOIN " + majority_members_table() + " g ON g.id = i.id" +
                            (member_id.empty() ? "" : " WHERE i.id = :mid") + ")";
    soci::statement st = member_id.empty() ? (s.prepare << sql, soci::use(tok, "token"), soci::use(name, "name"),
                                              soci::use(tok, "below"))
                                           : (s.prepare << sql, soci::use(tok, "token"), soci::use(name, "name"),
                                              soci::use(tok, "below"), soci::use(member_id, "mid"));
    st.execute(true);
    return st.get_affected_rows() > 0;
}

}  // namespace sqlock::detail::mysql_engine
