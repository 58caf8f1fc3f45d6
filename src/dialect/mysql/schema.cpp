// MariaDB / MySQL: the schema.
#include "dialect/mysql/mysql.hpp"
#include "dialect/server.hpp"

namespace sqlock::detail::mysql_engine {

std::optional<std::string> mysql_dialect::relaxed_durability(soci::session& s) const {
    long long flush = 1;
    s << "SELECT @@global.innodb_flush_log_at_trx_commit", soci::into(flush);
    if (flush != 1) return "innodb_flush_log_at_trx_commit = " + std::to_string(flush) + ", not 1";
    return std::nullopt;
}

void mysql_dialect::create_schema(soci::session& s) const {
    require_feature(learn_server(s), server_feature::create_schema);
    dialect::create_schema(s);
}

bool mysql_dialect::multi_writer_cluster(soci::session& s) const { return galera(s); }

std::vector<std::string> mysql_dialect::required_tables() const {
    auto names = dialect::required_tables();
    names.push_back(prefix_ + "_acquire_v2");
    names.push_back(prefix_ + "_acquire_shared");
    names.push_back(prefix_ + "_renew");
    return names;
}

std::string mysql_dialect::table_exists_sql() const {
    return "SELECT (SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = DATABASE() AND "
           "table_name = :t) + (SELECT COUNT(*) FROM information_schema.routines WHERE routine_schema = "
           "DATABASE() AND routine_type = 'PROCEDURE' AND routine_name = :t)";
}

}  // namespace sqlock::detail::mysql_engine
