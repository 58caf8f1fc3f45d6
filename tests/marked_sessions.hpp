// sqlock tests — the engine fixture with stores whose server sessions a test
// can find and end without touching anyone else's, so that tests which end
// sessions (pg_terminate_backend, KILL CONNECTION) share the servers safely: on
// PostgreSQL such a store connects with an application_name of its own (URL
// parameters reach libpq after sqlock's default, so the test's wins); on
// MariaDB with a user of its own, created for the test over the server's socket
// as root (SQLOCK_TEST_MYSQL_SOCKET) and dropped afterwards. Shared by the
// safety and connection-fault suites.
#pragma once

#include "test_env.hpp"

#include <algorithm>
#include <chrono>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace sqlock_test {

/// The engine_fixture (PostgreSQL or MariaDB) with sessions marked by tagged_url().
class marked_sessions_fixture : public engine_fixture {
protected:
    void TearDown() override {
        if (e_ != engine::mysql || users_.empty()) return;
        try {
            auto root = mysql_root();
            if (!root) return;
            for (auto const& u : users_) {
                // Sessions first: DROP USER leaves a connected user's sessions running.
                end_sessions_quietly(u);
                *root << "DROP USER IF EXISTS '" + u + "'@'127.0.0.1', '" + u + "'@'localhost'";
            }
        } catch (std::exception const& e) {
            ADD_FAILURE() << "could not drop the test's MariaDB users: " << describe(e);
        }
    }

    /// A URL of this test's database whose sessions carry `marker`'s mark:
    /// PostgreSQL, application_name; MariaDB, a user of their own.
    std::string tagged_url(std::string const& marker) {
        if (e_ == engine::postgresql)
            return url_ + (url_.find('?') == std::string::npos ? "?" : "&") + "application_name=" + marker;
        auto root = mysql_root();
        if (!root) return url_;
        std::string const password = random_hex(16);
        std::string const db = parse_server_url(url_).db;
        *root << "CREATE USER '" + marker + "'@'127.0.0.1' IDENTIFIED BY '" + password + "', '" + marker +
                     "'@'localhost' IDENTIFIED BY '" + password + "'";
        users_.push_back(marker);
        *root << "GRANT ALL ON `" + db + "`.* TO '" + marker + "'@'127.0.0.1', '" + marker + "'@'localhost'";
        return with_password(url_, marker, password);
    }

    /// A fresh marker for tagged_url (a valid application_name and MariaDB user name).
    static std::string new_marker() { return "sqlt_" + random_hex(12); }

    /// The server sessions carrying `marker` (PostgreSQL: also matching the SQL `pg_condition`, " AND ...").
    std::vector<long long> sessions_of(std::string const& marker, std::string const& pg_condition = "") {
        std::vector<long long> ids;
        if (e_ == engine::postgresql) {
            soci::rowset<int> rs =
                (raw_->prepare << "SELECT pid FROM pg_stat_activity WHERE application_name = :a" + pg_condition,
                 soci::use(marker));
            for (int pid : rs) ids.push_back(pid);
        } else {
            soci::rowset<long long> rs =
                (raw_->prepare << "SELECT CAST(ID AS SIGNED) FROM information_schema.PROCESSLIST WHERE USER = :u",
                 soci::use(marker));
            for (long long id : rs) ids.push_back(id);
        }
        return ids;
    }

    /// The id of the session carrying `marker` that the engine's query finds
    /// (`pg_sql` or `mysql_sql`, the marker bound to its one parameter), if any.
    std::optional<long long> session_found_by(std::string const& marker, std::string const& pg_sql,
                                              std::string const& mysql_sql) {
        long long id = 0;
        *raw_ << (e_ == engine::postgresql ? pg_sql : mysql_sql), soci::into(id), soci::use(marker);
        if (!raw_->got_data()) return std::nullopt;
        return id;
    }

    /// The session carrying `marker` that has a transaction open (a row-lock
    /// holder; the test's stores have one at most), if any.
    std::optional<long long> session_in_transaction(std::string const& marker) {
        return session_found_by(marker,
                                "SELECT CAST(pid AS bigint) FROM pg_stat_activity WHERE application_name = :a"
                                " AND xact_start IS NOT NULL",
                                "SELECT CAST(p.ID AS SIGNED) FROM information_schema.PROCESSLIST p"
                                " JOIN information_schema.innodb_trx t ON t.trx_mysql_thread_id = p.ID"
                                " WHERE p.USER = :u");
    }

    /// End server session `id` (pg_terminate_backend, KILL CONNECTION).
    void end_session(long long id) {
        if (e_ == engine::postgresql) {
            int pid = static_cast<int>(id);
            int ok = 0;
            *raw_ << "SELECT CASE WHEN pg_terminate_backend(:p) THEN 1 ELSE 0 END", soci::into(ok), soci::use(pid);
            EXPECT_EQ(ok, 1) << "pg_terminate_backend(" << pid << ") refused";
        } else {
            *raw_ << "KILL CONNECTION " + std::to_string(id);
        }
    }

    /// End every session carrying `marker` and wait until the server shows none
    /// of them (a store may open new ones meanwhile). Returns their ids.
    std::vector<long long> end_sessions(std::string const& marker) {
        auto ids = sessions_of(marker);
        for (long long id : ids) {
            try {
                end_session(id);
            } catch (soci::soci_error const&) {  // gone already
            }
        }
        EXPECT_TRUE(eventually(
            [&] {
                for (long long id : sessions_of(marker))
                    if (std::find(ids.begin(), ids.end(), id) != ids.end()) return false;
                return true;
            },
            std::chrono::seconds(10)))
            << "the server still shows the ended sessions of " << marker;
        return ids;
    }

    void end_sessions_quietly(std::string const& marker) {
        try {
            for (long long id : sessions_of(marker)) *raw_ << "KILL CONNECTION " + std::to_string(id);
        } catch (std::exception const&) {}
    }

    /// MariaDB as root over the server's socket (to create and drop users).
    std::unique_ptr<soci::session> mysql_root() {
        std::string sock;
        require_env("SQLOCK_TEST_MYSQL_SOCKET", sock);
        if (should_stop()) return nullptr;
        return std::make_unique<soci::session>(*soci::factory_mysql(),
                                               "unix_socket=" + mysql_quote_param(sock) + " user='root' dbname=" +
                                                   mysql_quote_param(parse_server_url(url_).db));
    }

    std::vector<std::string> users_;  // MariaDB users made by tagged_url
};

}  // namespace sqlock_test
