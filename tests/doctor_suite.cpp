// sqlock tests — `sqlock doctor` (issue 20) as a real process: Engines/Doctor.<Test>/<engine> on the test
// servers (each check seen ok), and DoctorFires.<Test> on servers set up to trip a check (a private
// PostgreSQL with fsync = off, a private MariaDB with innodb_flush_log_at_trx_commit = 2, the binary log
// unsynced and read_only; a TCP relay in front of a server; an SQLite URL with synchronous=normal).
// The topologies (standby, asynchronous replicas, Galera, PgBouncer) are tests/ha/doctor_suite.cpp.
// --json is parsed with nlohmann and checked field by field.
#include "cli_process.hpp"
#include "fault_proxy.hpp"
#include "faults/private_server.hpp"
#include "test_env.hpp"
#include "test_process.hpp"

#include <sqlock/sqlock.hpp>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <soci/soci.h>

#include <fstream>

#include <unistd.h>

#include <string>
#include <vector>

namespace {

using namespace std::chrono_literals;
using namespace sqlock_test;
using sqlock::engine;
using json = nlohmann::json;

/// `sqlock doctor ARGS --json`, its output parsed and its shape checked.
struct doctor_run {
    cli_result result;
    json out;

    /// The findings of database `db` whose check is `check`.
    std::vector<json> findings(std::string const& check, std::size_t db = 0) const {
        std::vector<json> found;
        for (auto const& f : out["databases"][db]["findings"])
            if (f["check"] == check) found.push_back(f);
        return found;
    }
    /// Whether a finding of `check` has `severity` and its message holds `text`.
    bool has(std::string const& check, std::string const& severity, std::string const& text = "",
             std::size_t db = 0) const {
        for (auto const& f : findings(check, db))
            if (f["severity"] == severity && f["message"].get<std::string>().find(text) != std::string::npos)
                return true;
        return false;
    }
    std::string describe() const { return result.describe(); }
};

doctor_run doctor(fs::path const& dir, std::vector<std::string> args) {
    args.insert(args.begin(), "doctor");
    args.push_back("--json");
    doctor_run r{cli_process(args, dir).wait(), {}};
    try {
        r.out = json::parse(r.result.out);
    } catch (json::exception const& e) {
        ADD_FAILURE() << "doctor --json printed no JSON object (" << e.what() << "): " << r.describe();
        return r;
    }
    EXPECT_TRUE(r.out.is_object() && r.out.contains("databases") && r.out.contains("worst")) << r.describe();
    for (auto const& d : r.out["databases"]) {
        for (char const* key : {"url", "engine", "flavour", "version", "findings"})
            EXPECT_TRUE(d.contains(key)) << key << " missing: " << r.describe();
        for (auto const& f : d["findings"]) {
            for (char const* key : {"check", "severity", "message", "fix"})
                EXPECT_TRUE(f.contains(key) && f[key].is_string()) << key << " in " << f.dump();
            EXPECT_TRUE(f["severity"] == "ok" || f["severity"] == "info" || f["severity"] == "warning" ||
                        f["severity"] == "error")
                << f.dump();
            EXPECT_FALSE(f["message"].get<std::string>().empty()) << f.dump();
        }
    }
    return r;
}

/// The exit code doctor owes for a worst severity.
/// Private servers need root (PostgreSQL runs as the postgres user): skipped otherwise, failing under CI.
/// Callers check should_stop() after it.
void require_root() {
    if (::geteuid() == 0) return;
    if (in_ci()) GTEST_FAIL() << "not root and CI is set: run the tests as root (private servers)";
    GTEST_SKIP() << "not root (private servers run PostgreSQL as the postgres user; not CI, so skipping)";
}

int code_for(std::string const& worst) { return worst == "error" ? 2 : worst == "warning" ? 1 : 0; }

class Doctor : public engine_fixture {
protected:
    void open_store() override { sqlock::store(url_, {.create_schema = true}); }
    fs::path const& dir() const { return files_.path(); }
    temp_dir files_;
};

TEST_P(Doctor, TestServerIsHealthyAndEveryCheckSaysOk) {
    auto r = doctor(dir(), {"--db", url_});
    ASSERT_EQ(r.out["databases"].size(), 1u) << r.describe();
    auto const& d = r.out["databases"][0];
    EXPECT_EQ(d["url"], sqlock::redact_url(url_));
    EXPECT_EQ(d["engine"], std::string(sqlock::to_string(e_)));
    // MariaDB behind the mysql:// URL here; a MySQL server would add a "server" finding saying it is untested.
    EXPECT_EQ(d["flavour"], e_ == engine::mysql ? "mariadb" : std::string(sqlock::to_string(e_))) << r.describe();
    EXPECT_FALSE(r.has("server", "error")) << r.describe();
    ASSERT_TRUE(d["version"].is_string()) << r.describe();
    EXPECT_FALSE(d["version"].get<std::string>().empty());
    EXPECT_EQ(r.result.out.find(":sqlock@"), std::string::npos) << "password shown: " << r.describe();
    EXPECT_TRUE(r.has("engine", "ok")) << r.describe();
    EXPECT_TRUE(r.has("schema", "ok", "complete")) << r.describe();
    EXPECT_TRUE(r.has("protocol", "ok", "speak sqlock protocol " + std::to_string(sqlock::protocol_version())))
        << r.describe();
    EXPECT_TRUE(r.has("durability", "ok")) << r.describe();
    if (e_ != engine::sqlite) {
        EXPECT_TRUE(r.has("privileges", "ok")) << r.describe();
        EXPECT_TRUE(r.has("pooler", "ok", "directly")) << r.describe();
        EXPECT_TRUE(r.has("clock", "ok", "off this host's")) << r.describe();
        EXPECT_FALSE(r.findings("replication").empty()) << r.describe();
    }
    if (e_ == engine::postgresql) {
        EXPECT_TRUE(r.has("replication", "ok", "no standby")) << r.describe();
    }
    EXPECT_TRUE(r.out["worst"] == "ok" || r.out["worst"] == "info") << r.describe();
    EXPECT_EQ(r.result.code(), 0) << r.describe();

    // The text form: the database, one line per finding, the worst.
    auto t = cli_process({"doctor", "--db", url_}, dir()).wait();
    EXPECT_EQ(t.code(), 0) << t.describe();
    EXPECT_EQ(t.out.rfind(sqlock::redact_url(url_), 0), 0u) << t.describe();
    EXPECT_NE(t.out.find("\n  ok      schema: "), std::string::npos) << t.describe();
    EXPECT_NE(t.out.find("\nworst: " + r.out["worst"].get<std::string>() + "\n"), std::string::npos) << t.describe();
}

TEST_P(Doctor, MissingLockTablesAreAnErrorAndExit2) {
    auto r = doctor(dir(), {"--db", url_, "--table-prefix", "sqlt_doc_" + random_hex(6)});
    EXPECT_TRUE(r.has("schema", "error", "does not exist")) << r.describe();
    EXPECT_EQ(r.out["worst"], "error");
    EXPECT_EQ(r.result.code(), 2) << r.describe();
}

// Tables of a newer protocol than this sqlock's: its stores refuse them, and the doctor says so and what to do.
TEST_P(Doctor, TablesOfANewerProtocolAreAnErrorAndExit2) {
    auto const prefix = "sqlt_doc_" + random_hex(6);
    sqlock::store(url_, {.create_schema = true, .table_prefix = prefix});
    auto const newer = std::to_string(sqlock::protocol_version() + 1);
    *raw_ << "UPDATE " + prefix + "_protocol SET version = " + newer;
    auto r = doctor(dir(), {"--db", url_, "--table-prefix", prefix});
    EXPECT_TRUE(r.has("protocol", "error", "speak sqlock protocol " + newer + ", newer")) << r.describe();
    EXPECT_EQ(r.out["worst"], "error");
    EXPECT_EQ(r.result.code(), 2) << r.describe();
    auto const fix = r.findings("protocol");
    ASSERT_EQ(fix.size(), 1u) << r.describe();
    EXPECT_NE(fix[0]["fix"].get<std::string>().find("upgrade sqlock"), std::string::npos) << r.describe();
    if (e_ != engine::sqlite) {
        std::vector<std::string> tables(64);
        *raw_ << "SELECT table_name FROM information_schema.tables WHERE table_name LIKE '" + prefix + "%'",
            soci::into(tables);
        for (auto const& t : tables) *raw_ << "DROP TABLE IF EXISTS " + t;
    }
}

TEST_P(Doctor, UnreachableDatabaseExits69AndIsStillReported) {
    std::string url;
    if (e_ == engine::sqlite) {
        url = sqlite_url(dir() / ("absent-" + random_hex(6) + ".db"));
    } else {
        auto p = parse_server_url(url_);
        url = p.scheme + "://" + p.user + ":x@" + p.host + ":" + std::to_string(closed_port()) + "/" + p.db;
    }
    auto r = doctor(dir(), {"--db", url, "--db", url_});
    EXPECT_EQ(r.result.code(), 69) << r.describe();
    EXPECT_TRUE(r.has("connect", "error", "", 0)) << r.describe();
    EXPECT_TRUE(r.has("schema", "ok", "", 1)) << "the reachable database is still examined: " << r.describe();
    EXPECT_EQ(r.result.out.find(":x@"), std::string::npos) << "password shown: " << r.describe();
    EXPECT_EQ(r.result.err.rfind("sqlock: ", 0), 0u) << r.describe();
    if (e_ == engine::sqlite) {
        EXPECT_FALSE(fs::exists(dir() / url.substr(url.rfind('/') + 1))) << "doctor created the SQLite file";
    }
}

TEST_P(Doctor, BadUrlExits64) {
    auto r = cli_process({"doctor", "--db", "nosuch://x"}, dir()).wait();
    EXPECT_EQ(r.code(), 64) << r.describe();
    auto p = cli_process({"doctor", "--db", url_, "--table-prefix", "no-such prefix"}, dir()).wait();
    EXPECT_EQ(p.code(), 64) << p.describe();
}

INSTANTIATE_TEST_SUITE_P(Engines, Doctor, ::testing::Values(engine::postgresql, engine::mysql, engine::sqlite),
                         engine_param_name{});

// ------------------------------------------------------------------ checks seen firing

TEST(DoctorFires, SqliteSynchronousNormalIsAWarning) {
    temp_dir dir;
    auto const url = sqlite_url(dir.path() / "locks.db") + "?synchronous=normal";
    sqlock::store(url, {.create_schema = true});
    auto r = doctor(dir.path(), {"--db", url});
    EXPECT_TRUE(r.has("durability", "warning", "synchronous = normal")) << r.describe();
    EXPECT_TRUE(r.has("durability", "ok", "journal_mode = wal")) << r.describe();
    EXPECT_EQ(r.out["worst"], "warning");
    EXPECT_EQ(r.result.code(), 1) << r.describe();
}

TEST(DoctorFires, ARelayInFrontOfTheServerIsSeen) {
    for (engine e : {engine::postgresql, engine::mysql}) {
        std::string url;
        require_env(url_var(e), url);
        if (should_stop()) return;
        sqlock::store(url, {.create_schema = true});
        auto relay = fault_proxy::for_url(url);
        temp_dir dir;
        auto r = doctor(dir.path(), {"--db", relay->proxied_url(url)});
        EXPECT_TRUE(r.has("pooler", "info", "proxy or pooler")) << r.describe();
        EXPECT_FALSE(r.has("pooler", "ok")) << r.describe();
        EXPECT_EQ(r.result.code(), code_for(r.out["worst"])) << r.describe();
    }
}

TEST(DoctorFires, HostClockOffByAMinuteIsAWarning) {
    std::string url;
    require_env(url_var(engine::postgresql), url);
    if (should_stop()) return;
    sqlock::store(url, {.create_schema = true});
    temp_dir dir;
    // tests/clock_shift_preload.cpp: this host's std::chrono::system_clock, the one wall clock sqlock reads, 60 s
    // ahead in doctor's process.
    auto const shift = dir.path() / "shift";
    std::ofstream(shift) << 60000 << "\n";
    auto const inherited = getenv_nonempty("LD_PRELOAD");
    env_changes env{{"LD_PRELOAD", std::string(SQLOCK_TEST_CLOCK_SHIFT_LIB) + (inherited ? ":" + *inherited : "")},
                    {"SQLOCK_TEST_CLOCK_SHIFT_FILE", shift.string()}};
    auto r = cli_process({"doctor", "--db", url, "--json"}, dir.path(), env).wait();
    auto const out = json::parse(r.out, nullptr, false);
    ASSERT_FALSE(out.is_discarded()) << r.describe();
    bool warned = false;
    for (auto const& f : out["databases"][0]["findings"])
        if (f["check"] == "clock") {
            warned = f["severity"] == "warning" && f["message"].get<std::string>().find("-6") != std::string::npos;
            EXPECT_TRUE(warned) << "the database's clock is about 60 s behind doctor's: " << f.dump();
        }
    EXPECT_TRUE(warned) << r.describe();
    EXPECT_EQ(r.code(), code_for(out["worst"])) << r.describe();
    EXPECT_GE(r.code(), 1) << r.describe();
}

TEST(DoctorFires, PostgresqlMissingPrivilegeIsAnError) {
    std::string url;
    require_env(url_var(engine::postgresql), url);
    if (should_stop()) return;
    auto const prefix = "sqlt_doc_" + random_hex(6);
    sqlock::store(url, {.create_schema = true, .table_prefix = prefix});
    auto raw = raw_session(engine::postgresql, url);
    *raw << "REVOKE DELETE ON " + prefix + "_locks FROM CURRENT_USER";
    temp_dir dir;
    auto r = doctor(dir.path(), {"--db", url, "--table-prefix", prefix});
    EXPECT_TRUE(r.has("privileges", "error", prefix + "_locks: DELETE")) << r.describe();
    EXPECT_EQ(r.result.code(), 2) << r.describe();
    std::vector<std::string> tables(64);
    *raw << "SELECT tablename FROM pg_tables WHERE tablename LIKE '" + prefix + "%'", soci::into(tables);
    for (auto const& t : tables) *raw << "DROP TABLE IF EXISTS " + t + " CASCADE";
}

TEST(DoctorFires, PostgresqlWithoutFsyncIsAnError) {
    require_root();
    if (should_stop()) return;
    private_pg pg({.conf = "fsync = off\nfull_page_writes = off\nsynchronous_commit = off"});
    sqlock::store(pg.url(), {.create_schema = true, .allow_relaxed_durability = true});
    temp_dir dir;
    auto r = doctor(dir.path(), {"--db", pg.url()});
    EXPECT_TRUE(r.has("durability", "error", "fsync = off")) << r.describe();
    EXPECT_TRUE(r.has("durability", "warning", "full_page_writes = off")) << r.describe();
    EXPECT_TRUE(r.has("durability", "info", "synchronous_commit = off")) << r.describe();
    EXPECT_FALSE(r.has("durability", "ok")) << r.describe();
    EXPECT_EQ(r.result.code(), 2) << r.describe();
}

TEST(DoctorFires, MariadbRelaxedFlushUnsyncedBinlogAndReadOnlyAreSeen) {
    require_root();
    if (should_stop()) return;
    private_mariadb my({.args = "--innodb-flush-log-at-trx-commit=2 --log-bin=doctor-bin --sync-binlog=0 "
                                "--read-only=1"});
    temp_dir dir;
    auto r = doctor(dir.path(), {"--db", my.url()});
    EXPECT_TRUE(r.has("durability", "error", "innodb_flush_log_at_trx_commit = 2")) << r.describe();
    EXPECT_TRUE(r.has("durability", "warning", "sync_binlog = 0")) << r.describe();
    EXPECT_TRUE(r.has("replication", "error", "read_only = ON")) << r.describe();
    EXPECT_TRUE(r.has("replication", "info", "binary log on")) << r.describe();
    EXPECT_EQ(r.result.code(), 2) << r.describe();
}

}  // namespace
