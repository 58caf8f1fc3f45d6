// `inspect_database`: what `sqlock doctor` judges. Read-only diagnostic queries,
// one engine at a time; the lock paths never run them, so they stay out of the dialect.
#include "detail/store_impl.hpp"
#include "detail/url.hpp"
#include "dialect/server.hpp"
#include "dialect/sqlite/bell.hpp"

#include <sqlock/admin.hpp>
#include <sqlock/errors.hpp>

#include <soci/soci.h>

#include <sys/stat.h>

#include <chrono>
#include <string>
#include <utility>
#include <vector>

namespace sqlock {
namespace {

using facts_t = std::map<std::string, std::string>;

/// A one-value query into `facts[name]` ("" for NULL), or its error into "<name>!".
void ask(soci::session& s, facts_t& facts, std::string const& name, std::string const& sql) {
    try {
        std::string value;
        soci::indicator ind = soci::i_ok;
        s << sql, soci::into(value, ind);
        facts[name] = ind == soci::i_ok ? value : std::string();
    } catch (std::exception const& e) {
        std::string why = e.what();
        while (!why.empty() && (why.back() == '\n' || why.back() == ' ')) why.pop_back();
        facts[name + "!"] = why;
    }
}

/// Database time minus this host's, at the midpoint of the quickest of several round trips.
void clock_offset(soci::session& s, facts_t& facts, std::string const& now_us_sql) {
    using std::chrono::duration_cast;
    using std::chrono::microseconds;
    long long best_rtt = -1;
    long long best_offset = 0;
    try {
        for (int i = 0; i < 7; ++i) {
            std::string db_us;
            auto const t0 = std::chrono::system_clock::now();
            s << now_us_sql, soci::into(db_us);
            auto const t1 = std::chrono::system_clock::now();
            auto const rtt = duration_cast<microseconds>(t1 - t0).count();
            auto const mid = duration_cast<microseconds>((t0 + (t1 - t0) / 2).time_since_epoch()).count();
            if (best_rtt < 0 || rtt < best_rtt) {
                best_rtt = rtt;
                best_offset = std::stoll(db_us) - mid;
            }
        }
        facts["clock_offset_us"] = std::to_string(best_offset);
        facts["clock_rtt_us"] = std::to_string(best_rtt);
    } catch (std::exception const& e) {
        facts["clock_offset_us!"] = e.what();
    }
}

std::string quoted(std::string const& identifier) { return "'" + identifier + "'"; }  // validated identifiers

/// The tables a store's user needs privileges on, and which: the DML on every table of the schema,
/// SELECT on the protocol record (read when a store opens; it is only written by the schema).
std::vector<std::pair<std::string, std::vector<std::string>>> privileges_needed(detail::dialect const& d) {
    std::vector<std::pair<std::string, std::vector<std::string>>> out;
    for (auto const& t : d.required_tables()) out.push_back({t, {"SELECT", "INSERT", "UPDATE", "DELETE"}});
    out.push_back({d.protocol_table(), {"SELECT"}});
    return out;
}

void postgresql_facts(detail::store_impl& impl, detail::url_parts const& url, facts_t& facts) {
    {
        auto c1 = impl.borrow("inspecting the database");
        auto c2 = impl.borrow("inspecting the database");
        // Two client connections open at once: one server backend behind both is a transaction pooler.
        ask(c1.session(), facts, "backend_pid_1", "SELECT pg_backend_pid()::text");
        ask(c2.session(), facts, "backend_pid_2", "SELECT pg_backend_pid()::text");
    }
    impl.run("inspecting the database", [&](soci::session& s) {
        ask(s, facts, "version", "SELECT current_setting('server_version')");
        for (char const* name : {"fsync", "full_page_writes", "synchronous_standby_names"})
            ask(s, facts, name, std::string("SELECT current_setting('") + name + "')");
        // The server's value: sqlock's own sessions turn an `off` on (dialect open).
        ask(s, facts, "synchronous_commit", "SELECT reset_val FROM pg_settings WHERE name = 'synchronous_commit'");
        ask(s, facts, "in_recovery", "SELECT pg_is_in_recovery()::text");
        ask(s, facts, "replicas", "SELECT count(*)::text FROM pg_stat_replication");
        ask(s, facts, "replicas_visible", "SELECT count(state)::text FROM pg_stat_replication");
        ask(s, facts, "sync_states",
            "SELECT coalesce(string_agg(sync_state, ',' ORDER BY sync_state), '') FROM pg_stat_replication");
        ask(s, facts, "server_port", "SELECT inet_server_port()::text");
        facts["url_port"] = std::to_string(url.port == 0 ? 5432 : url.port);
        clock_offset(s, facts, "SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint::text");
        std::string missing;
        for (auto const& [t, privileges] : privileges_needed(impl.dialect())) {
            std::string lacking;
            soci::indicator ind = soci::i_ok;
            try {
                std::string list;
                for (auto const& p : privileges) list += (list.empty() ? "'" : ", '") + p + "'";
                s << "SELECT string_agg(p, ',') FROM unnest(ARRAY[" + list +
                         "]) p "
                         "WHERE to_regclass(" +
                         quoted(t) + ") IS NOT NULL AND NOT has_table_privilege(" + quoted(t) + ", p)",
                    soci::into(lacking, ind);
            } catch (std::exception const& e) {
                facts["privileges_missing!"] = e.what();
                break;
            }
            if (ind == soci::i_ok && !lacking.empty()) missing += (missing.empty() ? "" : "; ") + t + ": " + lacking;
        }
        if (!facts.contains("privileges_missing!")) facts["privileges_missing"] = missing;
        ask(s, facts, "can_create", "SELECT has_schema_privilege(current_schema(), 'CREATE')::text");
    });
}

void mysql_facts(detail::store_impl& impl, detail::url_parts const& url, facts_t& facts) {
    {
        auto c1 = impl.borrow("inspecting the database");
        auto c2 = impl.borrow("inspecting the database");
        ask(c1.session(), facts, "backend_pid_1", "SELECT CAST(CONNECTION_ID() AS CHAR)");
        ask(c2.session(), facts, "backend_pid_2", "SELECT CAST(CONNECTION_ID() AS CHAR)");
    }
    impl.run("inspecting the database", [&](soci::session& s) {
        ask(s, facts, "version", "SELECT VERSION()");
        for (char const* v : {"innodb_flush_log_at_trx_commit", "sync_binlog", "log_bin", "read_only", "port"})
            ask(s, facts, v, std::string("SELECT CAST(@@global.") + v + " AS CHAR)");
        facts["url_port"] = std::to_string(url.port == 0 ? 3306 : url.port);
        facts["server_port"] = facts["port"];
        facts.erase("port");
        // MariaDB has these variables with or without Galera; MySQL has none (absent: not Galera).
        for (char const* v : {"wsrep_on", "wsrep_sync_wait"})
            ask(s, facts, v, std::string("SELECT CAST(@@global.") + v + " AS CHAR)");
        for (char const* v : {"wsrep_cluster_size", "wsrep_cluster_status", "wsrep_local_state_comment"})
            ask(s, facts, v,
                std::string("SELECT variable_value FROM information_schema.global_status WHERE variable_name = '") + v +
                    "'");
        try {
            soci::rowset<soci::row> rows = (s.prepare << "SHOW REPLICA STATUS");
            int channels = 0;
            for (auto const& r : rows) {
                ++channels;
                for (std::size_t i = 0; i < r.size(); ++i) {
                    auto const& name = r.get_properties(i).get_name();
                    if ((name == "Slave_IO_Running" || name == "Replica_IO_Running") &&
                        r.get_indicator(i) == soci::i_ok)
                        facts["replica_io_running"] = r.get<std::string>(i);
                }
            }
            facts["replica_channels"] = std::to_string(channels);
        } catch (std::exception const& e) {
            facts["replica_channels!"] = e.what();
        }
        clock_offset(s, facts, "SELECT CAST(FLOOR(UNIX_TIMESTAMP(SYSDATE(6)) * 1000000) AS CHAR)");
        // Grants of the current account, global, on the database and on each table (roles not followed).
        std::string const grantee =
            "CONCAT('''', SUBSTRING_INDEX(CURRENT_USER(), '@', 1), '''@''', SUBSTRING_INDEX(CURRENT_USER(), '@', "
            "-1), '''')";
        auto lacking_sql = [&](std::string const& privileges, std::string const& table) {
            return "SELECT COALESCE(GROUP_CONCAT(p.p ORDER BY p.p), '') FROM (" + privileges +
                   ") p WHERE NOT EXISTS (SELECT 1 FROM information_schema.user_privileges u WHERE u.grantee = " +
                   grantee +
                   " AND u.privilege_type = p.p) AND NOT EXISTS (SELECT 1 FROM information_schema.schema_privileges "
                   "d WHERE d.grantee = " +
                   grantee +
                   " AND d.table_schema = DATABASE() AND d.privilege_type = p.p) AND NOT EXISTS (SELECT 1 FROM "
                   "information_schema.table_privileges t WHERE t.grantee = " +
                   grantee + " AND t.table_schema = DATABASE() AND t.table_name = " + quoted(table) +
                   " AND t.privilege_type = p.p) AND EXISTS (SELECT 1 FROM information_schema.tables x WHERE "
                   "x.table_schema = DATABASE() AND x.table_name = " +
                   quoted(table) + ")";
        };
        std::string missing;
        for (auto const& [t, privileges] : privileges_needed(impl.dialect())) {
            std::string list;
            for (auto const& p : privileges)
                list += (list.empty() ? "SELECT '" + p + "' AS p" : " UNION ALL SELECT '" + p + "'");
            std::string lacking;
            try {
                s << lacking_sql(list, t), soci::into(lacking);
            } catch (std::exception const& e) {
                facts["privileges_missing!"] = e.what();
                break;
            }
            if (!lacking.empty()) missing += (missing.empty() ? "" : "; ") + t + ": " + lacking;
        }
        if (!facts.contains("privileges_missing!")) facts["privileges_missing"] = missing;
        ask(s, facts, "can_create",
            "SELECT IF(EXISTS (SELECT 1 FROM information_schema.user_privileges u WHERE u.grantee = " + grantee +
                " AND u.privilege_type = 'CREATE') OR EXISTS (SELECT 1 FROM information_schema.schema_privileges d "
                "WHERE d.grantee = " +
                grantee + " AND d.table_schema = DATABASE() AND d.privilege_type = 'CREATE'), 'true', 'false')");
    });
}

void sqlite_facts(detail::store_impl& impl, facts_t& facts) {
    impl.run("inspecting the database", [&](soci::session& s) {
        ask(s, facts, "version", "SELECT sqlite_version()");
        ask(s, facts, "journal_mode", "PRAGMA journal_mode");
        ask(s, facts, "synchronous", "PRAGMA synchronous");
    });
}

}  // namespace

database_facts inspect_database(std::string_view url, std::string_view table_prefix,
                                std::chrono::milliseconds connect_timeout) {
    auto const parts = detail::parse_url(url);
    if (parts.engine == engine::sqlite) {
        struct stat st {};
        if (::stat(parts.path.c_str(), &st) != 0)
            throw backend_unavailable("sqlock: the SQLite file " + parts.path + " of " + redact_url(url) +
                                          " does not exist: check the path (sqlock schema --apply creates it)",
                                      "");
    }
    auto impl = std::make_shared<detail::store_impl>(url,
                                                     store_options{.pool_size = 2,
                                                                   .table_prefix = std::string(table_prefix),
                                                                   .connect_timeout = connect_timeout,
                                                                   .allow_relaxed_durability = true},
                                                     detail::store_impl::unchecked_t{});
    database_facts out{impl->engine(), impl->url(), {}};
    auto& facts = out.facts;
    switch (impl->engine()) {
        case engine::postgresql: postgresql_facts(*impl, parts, facts); break;
        case engine::mysql: mysql_facts(*impl, parts, facts); break;
        case engine::sqlite: sqlite_facts(*impl, facts); break;
    }
    if (impl->engine() == engine::sqlite) {  // the bell beside the file: what a planted one would do (bell.hpp)
        facts["bell"] = detail::sqlite_engine::bell_path_of(parts.path, std::string(table_prefix));
        facts["bell_problem"] = detail::sqlite_engine::bell_problem(facts["bell"], parts.path);
    }
    // Learned by the store's first connection (without refusing a server too old: reported here).
    if (auto const server = impl->dialect().server()) {
        facts["flavour"] = std::string(to_string(server->flavour));
        if (!server->comment.empty()) facts["version_comment"] = server->comment;
        try {
            detail::require_supported(*server);
            facts["unsupported"] = "";
        } catch (usage_error const& e) {
            facts["unsupported"] = e.what();
        }
    }
    impl->run("inspecting the database", [&](soci::session& s) {
        try {
            facts["schema_missing"] = impl->dialect().missing_table(s);
        } catch (std::exception const& e) {
            facts["schema_missing!"] = e.what();
        }
        try {
            auto const protocol = impl->dialect().stored_protocol(s);
            facts["protocol"] = protocol ? std::to_string(*protocol) : "";
        } catch (std::exception const& e) {
            facts["protocol!"] = e.what();
        }
        try {
            facts["relaxed_durability"] = impl->dialect().relaxed_durability(s).value_or("");
        } catch (std::exception const& e) {
            facts["relaxed_durability!"] = e.what();
        }
    });
    return out;
}

}  // namespace sqlock
