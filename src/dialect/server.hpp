// Internal: which server is behind a store (its flavour and version), the
// oldest version of each that sqlock runs on, the features that need more,
// and the test-only hook that fakes a server's answer.
//
// What needs which version (docs/table-lock.md, "MariaDB and MySQL"):
//   PostgreSQL 12   tcp_user_timeout, set by the row lock for its transaction
//   MariaDB 10.6    FOR UPDATE SKIP LOCKED, the row lock's try (the rest needs
//                   10.3: idle_transaction_timeout in every session's set-up)
//   MySQL 8.0.11    FOR UPDATE SKIP LOCKED (8.0.1), the first GA release of 8.0
//   MySQL 8.0.29    CREATE PROCEDURE IF NOT EXISTS, the schema's procedures:
//                   create_schema only; on 8.0.11-8.0.28 the procedures are
//                   created by hand and the rest runs
//   SQLite 3.35     RETURNING
#pragma once

#include <sqlock/store.hpp>

#include <string>

namespace sqlock::detail {

/// The server a store found, from its answer: `version` as `VERSION()`,
/// `server_version` or `sqlite_version()` wrote it, `comment` MariaDB's and
/// MySQL's `@@version_comment` (else empty). MariaDB says "MariaDB" in one of
/// them; anything else behind a mysql:// URL is MySQL (Percona Server, RDS).
[[nodiscard]] server_info parse_server_answer(sqlock::engine e, std::string const& version, std::string const& comment);

/// The test-only hook: in sqlock_failpoints builds, the environment variable
/// SQLOCK_TEST_SERVER_ANSWER = "<engine>=<version>|<comment>[;...]" (read at
/// each call) replaces the answer of engine `e`'s server, e.g.
/// "mysql=8.4.3|MySQL Community Server - GPL", so that the tests run the
/// MySQL statements, and the refusals, against the MariaDB they have. The
/// library users get never has it.
void fake_server_answer(sqlock::engine e, std::string& version, std::string& comment);

/// "MariaDB 10.11.6", "MySQL 8.4.3 (MySQL Community Server - GPL)", for messages.
[[nodiscard]] std::string describe(server_info const& s);

/// Refuses a server older than sqlock runs on at all.
/// @throws usage_error naming the server found, what needs the newer version, and the minimum.
void require_supported(server_info const& s);

/// Features that need a newer server than the minimum.
enum class server_feature {
    create_schema,  // CREATE PROCEDURE IF NOT EXISTS: MySQL 8.0.29
};

/// @throws usage_error naming the feature, the server found and what to do instead.
void require_feature(server_info const& s, server_feature f);

}  // namespace sqlock::detail
