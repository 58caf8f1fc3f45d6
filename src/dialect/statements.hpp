// Internal: the statements a dialect keeps prepared on each pooled connection.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include <soci/statement.h>

namespace soci {
class session;
}  // namespace soci

namespace sqlock::detail {

/// Statements a dialect keeps prepared on one pooled connection: SOCI statement
/// objects bound to buffers kept next to them, or a client library's own
/// handles where SOCI has none. Made on first use, reused by every later call
/// on that connection, and destroyed before the connection is closed or reopened.
class prepared_statements {
public:
    prepared_statements() = default;
    prepared_statements(prepared_statements const&) = delete;
    prepared_statements& operator=(prepared_statements const&) = delete;
    virtual ~prepared_statements() = default;
};

/// A pooled session together with the statements prepared on it. Converts to
/// the session, so code that needs no prepared statement takes `soci::session&`.
struct pooled_session {
    soci::session& session;
    std::unique_ptr<prepared_statements>& prepared;
    operator soci::session&() const noexcept { return session; }  // NOLINT(google-explicit-constructor)
};

/// The hot statements of the table lock, prepared on first use on each
/// connection, and the buffers they are bound to (a SOCI statement reads its
/// `use` variables and writes its `into` variables at every execute). An
/// engine may derive from it to keep more.
struct statement_cache : prepared_statements {
    std::string name, owner, to;
    long long token = 0, attempt = 0, ttl = 0;                   // in
    int retry = 0;                                               // in
    long long got_token = 0, created = 0, expires = 0, now = 0;  // out
    int flag = 0;                                                // out
    std::optional<soci::statement> acquire, acquire_waiting, release, renew, draw, rename;
};

}  // namespace sqlock::detail
