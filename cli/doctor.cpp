// sqlock command — doctor: what is safe on each database (docs/ha/doctor.md).
#include "cli.hpp"

#include <sqlock/admin.hpp>
#include <sqlock/errors.hpp>
#include <sqlock/version.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <optional>

namespace sqlock::cli {

namespace {

enum class severity { ok, info, warning, error };

std::string_view name_of(severity s) {
    switch (s) {
        case severity::ok: return "ok";
        case severity::info: return "info";
        case severity::warning: return "warning";
        case severity::error: return "error";
    }
    return "error";
}

struct finding {
    std::string check;
    severity level;
    std::string message;
    std::string fix;  ///< empty when nothing is to change
};

struct report {
    std::string url;  ///< redacted
    std::string engine;
    std::string flavour;  ///< mariadb or mysql behind a mysql:// URL, else the engine
    std::optional<std::string> version;
    std::vector<finding> findings;
    int failure = exit_code::ok;  ///< 69 when it could not be asked, 64 for a bad URL
};

// What sqlock does behind a pooler or proxy; adjust here when the library's behaviour there changes.
constexpr severity transaction_pooling_severity = severity::error;
constexpr char const* transaction_pooling_message =
    "two client connections opened at once were served by one server session (backend {pid}): a pooler per "
    "transaction or statement (PgBouncer pool_mode = transaction) is in between. sqlock keeps state per "
    "session (prepared statements, LISTEN, session settings, a row lock's open transaction), so its stores "
    "refuse to open through it";
constexpr char const* transaction_pooling_fix =
    "point the URL at a pool in session mode (PgBouncer pool_mode = session) or at the server itself";
constexpr char const* proxy_message =
    "the server listens on port {server} but the URL says {url}: a proxy or pooler (PgBouncer in session mode, "
    "HAProxy, ProxySQL) is in between. Locks hold as long as it keeps one server session per client "
    "connection; a row lock ends when it drops the connection";

std::string replace_all(std::string text, std::string const& key, std::string const& value) {
    for (auto at = text.find(key); at != std::string::npos; at = text.find(key, at + value.size()))
        text.replace(at, key.size(), value);
    return text;
}

using facts_t = std::map<std::string, std::string>;

std::optional<std::string> fact(facts_t const& f, std::string const& name) {
    if (auto it = f.find(name); it != f.end()) return it->second;
    return std::nullopt;
}

std::string why_unknown(facts_t const& f, std::string const& name) {
    auto w = fact(f, name + "!");
    return w ? sqlock::tools::one_line(*w) : std::string("not reported");
}

bool is_on(std::optional<std::string> const& v) {
    return v && (*v == "on" || *v == "ON" || *v == "1" || *v == "true" || *v == "t");
}

long long number(std::optional<std::string> const& v, long long otherwise = 0) {
    if (!v || v->empty()) return otherwise;
    char* end = nullptr;
    long long n = std::strtoll(v->c_str(), &end, 10);
    return end != nullptr && *end == '\0' ? n : otherwise;
}

void schema_findings(database_facts const& d, std::string const& prefix, std::vector<finding>& out) {
    auto const& f = d.facts;
    auto const missing = fact(f, "schema_missing");
    bool const can_create = is_on(fact(f, "can_create"));
    std::string const schema_file = "schema/" + std::string(to_string(d.engine)) + ".sql";
    if (!missing) {
        out.push_back({"schema", severity::warning,
                       "could not tell whether the lock tables exist: " + why_unknown(f, "schema_missing"),
                       "check the account's privileges"});
    } else if (missing->empty()) {
        out.push_back({"schema", severity::ok, "the lock tables are complete (this sqlock's schema)", ""});
    } else if (auto dot = missing->find('.'); dot != std::string::npos) {
        auto const table = missing->substr(0, dot);
        out.push_back({"schema", severity::error,
                       "table '" + table + "' has no column '" +
                           missing->substr(dot + 1, missing->find(' ') - dot - 1) +
                           "': it was created by an older sqlock, and stores refuse to open",
                       "ALTER TABLE " + table + " ADD COLUMN " + missing->substr(dot + 1)});
    } else {
        out.push_back({"schema", severity::error,
                       "'" + *missing + "' (a table of the lock schema) does not exist: stores refuse to open",
                       prefix != "sqlock" ? "create them with store_options{.create_schema = true, .table_prefix = \"" +
                                                prefix + "\"}, or apply " + schema_file + " with that prefix"
                       : can_create || d.engine == engine::sqlite
                           ? "sqlock schema --apply --db " + d.url
                           : "this account cannot create tables: have the schema's owner apply " + schema_file +
                                 " (sqlock schema --engine " + std::string(to_string(d.engine)) + ")"});
    }
    if (auto const protocol = fact(f, "protocol"); protocol && protocol->empty() && missing && !missing->empty()) {
        // No lock tables (the schema finding says so): nothing speaks a protocol yet.
    } else if (!protocol) {
        out.push_back({"protocol", severity::warning,
                       "could not read the tables' protocol record: " + why_unknown(f, "protocol"),
                       "check the account's privileges"});
    } else if (auto const stored = number(protocol, 1); stored > sqlock::protocol_version()) {
        out.push_back({"protocol", severity::error,
                       "the tables speak sqlock protocol " + std::to_string(stored) + ", newer than this sqlock's " +
                           std::to_string(sqlock::protocol_version()) + ": its stores refuse to open",
                       "upgrade sqlock on this host to a release that speaks protocol " + std::to_string(stored)});
    } else {
        out.push_back(
            {"protocol", severity::ok,
             "the tables speak sqlock protocol " + std::to_string(stored) +
                 (protocol->empty() ? " (made before the protocol was recorded; `sqlock schema --apply` records it)"
                                    : ""),
             ""});
    }
    if (d.engine == engine::sqlite) return;
    if (auto p = fact(f, "privileges_missing")) {
        if (p->empty())
            out.push_back({"privileges", severity::ok,
                           "SELECT, INSERT, UPDATE, DELETE granted on the lock tables (SELECT on the protocol record)" +
                               std::string(missing && !missing->empty() ? (can_create ? "; CREATE granted" : "") : ""),
                           ""});
        else
            out.push_back(
                {"privileges", severity::error, "privileges missing on " + *p,
                 "GRANT SELECT, INSERT, UPDATE, DELETE ON the lock tables TO this account (SELECT only on the "
                 "protocol record, <prefix>_protocol)"});
    } else {
        out.push_back({"privileges", severity::info,
                       "could not read the privileges: " + why_unknown(f, "privileges_missing"), ""});
    }
    if (missing && !missing->empty() && !can_create)
        out.push_back({"privileges", severity::error,
                       "the lock tables are missing and this account may not create tables here",
                       "GRANT CREATE to it, or have the schema's owner apply " + schema_file});
}

void durability_findings(database_facts const& d, std::vector<finding>& out) {
    auto const& f = d.facts;
    if (auto relaxed = fact(f, "relaxed_durability"); relaxed && !relaxed->empty())
        out.push_back({"durability", severity::error,
                       "commits are not durable (" + *relaxed +
                           "): a crash could lose acknowledged grants and hand a fencing token out twice; stores "
                           "refuse to open unless allow_relaxed_durability = true",
                       d.engine == engine::postgresql ? "set fsync = on" : "set innodb_flush_log_at_trx_commit = 1"});
    switch (d.engine) {
        case engine::postgresql: {
            if (fact(f, "fsync") == "on") out.push_back({"durability", severity::ok, "fsync = on", ""});
            if (auto fpw = fact(f, "full_page_writes"); fpw == "off")
                out.push_back({"durability", severity::warning,
                               "full_page_writes = off: a crash during a page write can corrupt the lock tables",
                               "set full_page_writes = on"});
            auto const sc = fact(f, "synchronous_commit");
            if (sc == "off")
                out.push_back({"durability", severity::info,
                               "synchronous_commit = off on the server: sqlock turns it on for its own sessions, so "
                               "its grants stay durable; other applications' commits are not",
                               ""});
            else if (sc) out.push_back({"durability", severity::ok, "synchronous_commit = " + *sc, ""});
            break;
        }
        case engine::mysql: {
            if (fact(f, "innodb_flush_log_at_trx_commit") == "1")
                out.push_back({"durability", severity::ok, "innodb_flush_log_at_trx_commit = 1", ""});
            if (is_on(fact(f, "log_bin"))) {
                auto const sb = fact(f, "sync_binlog");
                if (sb && *sb != "1")
                    out.push_back({"durability", severity::warning,
                                   "sync_binlog = " + *sb +
                                       " with the binary log on: a crash can lose the binlog events of acknowledged "
                                       "grants, and replicas then miss them",
                                   "set sync_binlog = 1"});
            }
            break;
        }
        case engine::sqlite: {
            auto const jm = fact(f, "journal_mode");
            if (jm && *jm != "wal")
                out.push_back({"durability", severity::warning, "journal_mode = " + *jm + ", not WAL",
                               "put the file on a local file system that supports WAL"});
            else out.push_back({"durability", severity::ok, "journal_mode = wal", ""});
            auto const sync = number(fact(f, "synchronous"), -1);
            if (sync >= 2)
                out.push_back(
                    {"durability", severity::ok, std::string("synchronous = ") + (sync == 2 ? "full" : "extra"), ""});
            else
                out.push_back({"durability", severity::warning,
                               std::string("synchronous = ") + (sync == 1 ? "normal" : "off") +
                                   " (set by the URL): a power loss or OS crash can lose the last grants and hand "
                                   "a fencing token out twice",
                               "drop synchronous= from the URL (full is the default)"});
            break;
        }
    }
}

// SQLite's bell beside the database (docs/lease-lifecycle.md): stores refuse anything but a regular
// file of the expected owner there (a FIFO, a link, a directory, a file another user planted), and
// their waiters then poll instead of being woken.
void bell_findings(facts_t const& f, std::vector<finding>& out) {
    auto const bell = fact(f, "bell").value_or("");
    if (bell.empty()) return;  // a URL without a file of its own: no bell, waiters poll
    auto const problem = fact(f, "bell_problem").value_or("");
    if (problem.empty()) {
        out.push_back({"bell", severity::ok, "the bell " + bell + " is usable (or absent: a store makes it)", ""});
        return;
    }
    auto dir = bell.substr(0, bell.find_last_of('/') == std::string::npos ? 0 : bell.find_last_of('/'));
    if (dir.empty()) dir = bell.starts_with("/") ? "/" : ".";
    out.push_back({"bell", severity::warning,
                   "the bell " + bell + " is refused: " + problem +
                       ". Stores never wait on it nor touch it, so releases wake no waiter of another process: "
                       "they poll at their backoff. Whoever may write the directory can plant files beside the "
                       "database",
                   "remove it (rm -- '" + bell +
                       "'; the next store makes a proper one) and let only the users "
                       "that share the database write " +
                       dir + " (chmod o-w, or a group of their own)"});
}

void postgresql_replication(facts_t const& f, std::vector<finding>& out) {
    if (is_on(fact(f, "in_recovery"))) {
        out.push_back({"replication", severity::error,
                       "this server is a standby (pg_is_in_recovery()): it is read-only, locks cannot be taken here",
                       "point --db at the primary, e.g. a multi-host URL with target_session_attrs=read-write"});
        return;
    }
    long long const replicas = number(fact(f, "replicas"));
    long long const visible = number(fact(f, "replicas_visible"));
    auto const names = fact(f, "synchronous_standby_names").value_or("");
    auto const states = fact(f, "sync_states").value_or("");
    if (!fact(f, "replicas")) {
        out.push_back(
            {"replication", severity::info, "could not read pg_stat_replication: " + why_unknown(f, "replicas"), ""});
        return;
    }
    if (replicas == 0) {
        out.push_back({"replication", names.empty() ? severity::ok : severity::warning,
                       names.empty() ? "no standby streams from this server"
                                     : "synchronous_standby_names = '" + names +
                                           "' but no standby is connected: commits wait for one",
                       names.empty() ? "" : "bring a standby back, or clear synchronous_standby_names"});
        return;
    }
    if (visible < replicas)
        out.push_back({"replication", severity::info,
                       std::to_string(replicas) +
                           " standbys stream from this server, but this account cannot see their state (sync or "
                           "async): pg_stat_replication hides it from non-superusers",
                       "grant pg_monitor (or pg_read_all_stats) to this account to see it"});
    if (names.empty()) {
        out.push_back({"replication", severity::warning,
                       "asynchronous replication: " + std::to_string(replicas) +
                           " standbys stream from this server and synchronous_standby_names is empty; a failover can "
                           "lose a granted lock (the new primary may not have it, and grants it again)",
                       "set synchronous_standby_names (Patroni: synchronous_mode: true)"});
        return;
    }
    auto const sc = fact(f, "synchronous_commit").value_or("on");
    if (sc == "local")
        out.push_back({"replication", severity::warning,
                       "synchronous_commit = local: commits do not wait for the synchronous standby, so a failover "
                       "can lose a granted lock",
                       "set synchronous_commit = on (or remote_apply)"});
    if (visible == replicas && states.find("sync") == std::string::npos && states.find("quorum") == std::string::npos)
        out.push_back({"replication", severity::warning,
                       "synchronous_standby_names = '" + names + "' but no standby is in sync now (" + states +
                           "): commits wait until one is",
                       "check the standbys"});
    else
        out.push_back({"replication", severity::ok,
                       "synchronous replication (synchronous_standby_names = '" + names + "'" +
                           (visible == replicas ? ", standbys: " + states : std::string()) + ")",
                       ""});
}

void mysql_replication(facts_t const& f, std::string_view url, std::vector<finding>& out) {
    if (is_on(fact(f, "wsrep_on"))) {
        auto const size = fact(f, "wsrep_cluster_size").value_or("?");
        auto const status = fact(f, "wsrep_cluster_status").value_or("?");
        auto const state = fact(f, "wsrep_local_state_comment").value_or("?");
        if (status != "Primary")
            out.push_back({"galera", severity::error,
                           "wsrep_cluster_status = " + status +
                               ": this node is not in the primary component and refuses statements",
                           "point --db at a node of the primary component"});
        else if (state != "Synced")
            out.push_back({"galera", severity::warning,
                           "wsrep_local_state_comment = " + state + ": this node is not synced with the cluster",
                           "wait until it is Synced, or use another node"});
        else
            out.push_back(
                {"galera", severity::ok, "Galera node, Synced, in the primary component of " + size + " nodes", ""});
        bool const single_writer = url.find("galera_single_writer=true") != std::string_view::npos;
        if (single_writer)
            out.push_back({"galera", severity::info,
                           "galera_single_writer=true: every client must send its locks to this same node", ""});
        else
            out.push_back({"galera", severity::warning,
                           "Galera cluster of " + size +
                               " nodes: a row lock (SELECT ... FOR UPDATE) is local to the node that takes it, so "
                               "two nodes could grant it at once; sqlock refuses the row lock here unless the URL "
                               "declares a single writer node",
                           "use the table lock, or send every lock to one node and add galera_single_writer=true "
                           "to the URL"});
        auto const wait = number(fact(f, "wsrep_sync_wait"), -1);
        if (wait == 0)
            out.push_back({"galera", severity::info,
                           "wsrep_sync_wait = 0 on the server: sqlock sets it on its own sessions, so its reads see "
                           "the other nodes' commits; other clients' reads on this node may not",
                           ""});
        return;
    }
    if (is_on(fact(f, "read_only")))
        out.push_back({"replication", severity::error,
                       "read_only = ON: this server refuses writes (a replica?), locks cannot be taken here",
                       "point --db at the primary"});
    if (auto channels = fact(f, "replica_channels")) {
        if (number(channels) > 0)
            out.push_back({"replication", severity::warning,
                           "this server is a replica (SHOW REPLICA STATUS, IO thread running: " +
                               fact(f, "replica_io_running").value_or("?") +
                               "): locks taken here are not seen on the primary",
                           "point --db at the primary"});
        else out.push_back({"replication", severity::ok, "not a replica", ""});
    } else {
        out.push_back({"replication", severity::info,
                       "could not read SHOW REPLICA STATUS: " + why_unknown(f, "replica_channels"),
                       "grant REPLICA MONITOR (MariaDB) or REPLICATION CLIENT to see it"});
    }
    if (is_on(fact(f, "log_bin")))
        out.push_back({"replication", severity::info,
                       "binary log on: if replicas follow this server asynchronously, a failover to one can lose "
                       "a granted lock",
                       ""});
}

void pooler_findings(facts_t const& f, std::vector<finding>& out) {
    auto const p1 = fact(f, "backend_pid_1");
    auto const p2 = fact(f, "backend_pid_2");
    bool const shared = p1 && p2 && !p1->empty() && *p1 == *p2;
    if (shared)
        out.push_back({"pooler", transaction_pooling_severity, replace_all(transaction_pooling_message, "{pid}", *p1),
                       transaction_pooling_fix});
    auto const server = fact(f, "server_port").value_or("");
    auto const url = fact(f, "url_port").value_or("");
    if (!server.empty() && server != url && !shared)
        out.push_back(
            {"pooler", severity::info, replace_all(replace_all(proxy_message, "{server}", server), "{url}", url), ""});
    if (!shared && (server.empty() || server == url))
        out.push_back(
            {"pooler", severity::ok, "connected to the server directly (one server session per connection)", ""});
}

/// Beyond this the host's and the database's clocks disagree enough to confuse people reading times.
constexpr long long clock_warning_us = 1'000'000;

void clock_findings(facts_t const& f, std::vector<finding>& out) {
    auto const offset = fact(f, "clock_offset_us");
    if (!offset) {
        out.push_back(
            {"clock", severity::info, "could not read the database's clock: " + why_unknown(f, "clock_offset_us"), ""});
        return;
    }
    long long const us = number(offset);
    long long const rtt = number(fact(f, "clock_rtt_us"));
    char text[160];
    std::snprintf(text, sizeof text, "the database's clock is %+.1f ms off this host's (round trip %.1f ms)",
                  static_cast<double>(us) / 1000.0, static_cast<double>(rtt) / 1000.0);
    bool const far = us > clock_warning_us || us < -clock_warning_us;
    out.push_back(
        {"clock", far ? severity::warning : severity::ok,
         std::string(text) + (far ? ": leases are timed by the database's clock and this host's steady clock, so locks "
                                    "still hold, but times in sqlock list, logs and fencing checks that compare "
                                    "timestamps disagree by that much"
                                  : ""),
         far ? "synchronise both clocks (NTP, chrony)" : ""});
}

report examine(std::string const& url, std::string const& table_prefix) {
    report r;
    r.url = redacted_url(url);
    if (auto e = engine_of_url(url)) r.engine = to_string(*e);
    try {
        auto const d = sqlock::inspect_database(url, table_prefix);
        r.engine = to_string(d.engine);
        r.version = fact(d.facts, "version");
        auto& out = r.findings;
        r.flavour = fact(d.facts, "flavour").value_or(r.engine);
        auto const comment = fact(d.facts, "version_comment");
        out.push_back(
            {"engine", severity::ok,
             r.flavour + " " + r.version.value_or("(version unknown)") + (comment ? " (" + *comment + ")" : ""), ""});
        if (auto const unsupported = fact(d.facts, "unsupported"); unsupported && !unsupported->empty())
            out.push_back({"server", severity::error, sqlock::tools::one_line(*unsupported),
                           "upgrade the server; sqlock's stores refuse to open on it"});
        else if (r.flavour == "mysql")
            out.push_back({"server", severity::ok,
                           "MySQL: sqlock supports it from MySQL's manual (8.0.29 or later) and its CI tests MariaDB "
                           "10.11 only; docs/table-lock.md says what differs from MariaDB, feature by feature",
                           ""});
        schema_findings(d, table_prefix, out);
        durability_findings(d, out);
        if (d.engine == engine::sqlite) bell_findings(d.facts, out);
        if (d.engine == engine::postgresql) postgresql_replication(d.facts, out);
        if (d.engine == engine::mysql) mysql_replication(d.facts, url, out);
        if (d.engine != engine::sqlite) {
            pooler_findings(d.facts, out);
            clock_findings(d.facts, out);
        }
    } catch (sqlock::usage_error const& e) {
        r.failure = exit_code::usage;
        r.findings.push_back({"connect", severity::error, sqlock::tools::one_line(e.what()), ""});
    } catch (...) {
        auto const failure = failure_of_current_exception(url);
        r.failure = failure.code;
        // The library's message already says what to check.
        r.findings.push_back({"connect", severity::error, failure.message, ""});
    }
    return r;
}

}  // namespace

int doctor_command(doctor_args const& args) {
    std::vector<std::string> urls = args.dbs;
    if (urls.size() > 1) reject_duplicate_databases(urls);
    else urls = {resolve_database(args.dbs).url};
    std::vector<report> reports(urls.size());
    for_each_in_parallel(urls.size(), [&](std::size_t i) { reports[i] = examine(urls[i], args.table_prefix); });

    severity worst = severity::ok;
    int failure = exit_code::ok;
    for (auto const& r : reports) {
        failure = sqlock::tools::most_serious(failure, r.failure);
        for (auto const& f : r.findings) worst = std::max(worst, f.level);
    }
    if (failure == exit_code::usage)
        for (auto const& r : reports)
            if (r.failure == exit_code::usage) fail(exit_code::usage, r.findings.back().message);

    std::string out;
    if (args.json) {
        nlohmann::ordered_json j;
        j["databases"] = nlohmann::ordered_json::array();
        for (auto const& r : reports) {
            nlohmann::ordered_json d;
            d["url"] = r.url;
            d["engine"] = r.engine;
            d["flavour"] = r.flavour.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(r.flavour);
            d["version"] = r.version ? nlohmann::ordered_json(*r.version) : nlohmann::ordered_json(nullptr);
            d["findings"] = nlohmann::ordered_json::array();
            for (auto const& f : r.findings)
                d["findings"].push_back(
                    {{"check", f.check}, {"severity", name_of(f.level)}, {"message", f.message}, {"fix", f.fix}});
            j["databases"].push_back(std::move(d));
        }
        j["worst"] = name_of(worst);
        out = j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
    } else {
        for (auto const& r : reports) {
            out += r.url + (r.version ? " (" + r.flavour + " " + printable(*r.version) + ")" : std::string()) + "\n";
            for (auto const& f : r.findings) {
                std::string level(name_of(f.level));
                level.resize(8, ' ');
                out += "  " + level + f.check + ": " + printable(f.message) +
                       (f.fix.empty() ? std::string() : " — fix: " + printable(f.fix)) + "\n";
            }
        }
        out += "worst: " + std::string(name_of(worst)) + "\n";
    }
    std::fwrite(out.data(), 1, out.size(), stdout);
    std::fflush(stdout);
    if (failure != exit_code::ok)
        fail(failure, std::to_string(std::count_if(reports.begin(), reports.end(),
                                                   [](report const& r) { return r.failure != exit_code::ok; })) +
                          " of " + std::to_string(reports.size()) +
                          " databases could not be examined (their findings say why)");
    return worst == severity::error ? 2 : worst == severity::warning ? 1 : exit_code::ok;
}

}  // namespace sqlock::cli
