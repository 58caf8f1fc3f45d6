// Internal: the engine driver, the part of an engine that is not SQL text:
// opening and setting up a session, the socket for the client-side deadline,
// bounding the engine's own wait, reading an idle session, LISTEN, and the
// classification of engine errors. One implementation per engine
// (src/dialect/<engine>/driver.cpp); the SQL is grouped by feature next to it
// (schema.hpp, table_lock.hpp, row_lock.hpp, tokens.hpp, fence.hpp, admin.hpp).
//
// Raw client calls. Everything goes through SOCI except where SOCI costs a
// measured round trip or has no API, and there the engine's own client is
// called on the handle SOCI holds:
//   - MariaDB: the hot statements (the acquire and renew CALLs, the release, the
//     token draw, the row lock's statements) are prepared on the server with
//     libmariadb's statement API, because SOCI's MySQL backend substitutes the
//     parameters into the text and prepares nothing;
//   - SQLite: the hot statements are sqlite3_prepare_v3(PERSISTENT) statements
//     kept per connection, and the busy handler is set per call;
//   - PostgreSQL: LISTEN/NOTIFY (a listener on its own libpq connection) and
//     reading an idle session's socket (read_idle), which SOCI cannot do.
// Their errors are classified like SOCI's: a failed raw call throws the very
// exception SOCI's backend throws for that engine, with the client's native
// code (MySQL errno, SQLite extended result code), made by throw_client_error()
// below, so classify() and native_code() see one kind of error per engine and
// the executor never knows which path a statement took.
#pragma once

#include "detail/url.hpp"

#include <sqlock/store.hpp>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

namespace soci {
class session;
class soci_error;
}  // namespace soci

namespace sqlock::detail {

/// How a failed statement should be handled.
enum class failure {
    transient,   // deadlock, serialization failure, SQLITE_BUSY: retry inside the library
    lock_wait,   // a bounded row-lock wait ran out: the row is busy
    connection,  // the connection is broken: reconnect, the outcome may be unknown
    schema,      // a lock table is missing
    permission,  // the database user may not do it (a missing GRANT): report as backend_error, saying so
    read_only,   // the database refuses writes (read-only mode, a standby, a read-only file): likewise
    other,       // report as backend_error
};

/// Listens for release announcements from other processes (PostgreSQL: LISTEN/NOTIFY on a
/// connection of its own; MariaDB: a parked SLEEP that a releaser interrupts; SQLite: inotify on
/// a bell file) and hands them to a callback, from its own thread, until destroyed. Reconnects
/// (re-arms) by itself when its connection drops (its file goes).
class release_listener {
public:
    virtual ~release_listener() = default;
};

class engine_driver {
public:
    virtual ~engine_driver() = default;

    [[nodiscard]] virtual sqlock::engine engine() const noexcept = 0;

    /// The SOCI connect string for a parsed URL.
    [[nodiscard]] virtual std::string connect_string(url_parts const& url) const = 0;

    /// Open a session and apply per-connection settings (isolation, time zone,
    /// lock-wait bound, WAL...). The first one also learns which server it is
    /// (dialect::learn_server), before the settings, which may depend on it.
    virtual void open(soci::session& s, std::string const& connect_string) const = 0;

    /// What the server says it is, in one query: `version` (`VERSION()`,
    /// `server_version`, `sqlite_version()`) and `comment` (`@@version_comment`
    /// on MariaDB and MySQL, else left empty).
    virtual void read_server_answer(soci::session& s, std::string& version, std::string& comment) const = 0;

    /// Refuses a connection pooler that hands one client connection's statements to different server
    /// sessions (PgBouncer's transaction or statement pooling), where sqlock's per-connection state cannot
    /// hold. `s` is a fresh session of the store, `connect_string` opens another, `declared` is the URL's
    /// `pooling` parameter ("session", "transaction" or empty), `url` the redacted URL for the message.
    /// @throws backend_error when such a pooler is declared or found.
    virtual void check_pooling(soci::session& s, std::string const& connect_string, std::string_view declared,
                               std::string const& url) const;

    /// The socket of a session (for the client-side statement deadline), or -1.
    [[nodiscard]] virtual int socket_of(soci::session& s) const;

    /// What an idle session's socket said (readable or hung up while no
    /// statement was in flight on it): the row lock's session watch.
    struct idle_news {
        bool ended = false;       ///< the session is gone: the server ended it or the connection closed
        bool watch_reads = true;  ///< false: data came that cannot be read here; watch for hang-ups only
        std::string why;          ///< when ended: what the server or the socket said
    };
    /// Reads what arrived on the idle session `s` without disturbing its
    /// protocol state (notices and parameter changes are consumed where the
    /// client library can; the server's last error message is kept as `why`).
    /// `hung_up`: poll() reported a hang-up or an error on the socket.
    [[nodiscard]] virtual idle_news read_idle(soci::session& s, bool hung_up) const;

    /// Bound the engine's own wait inside the next statements where that costs
    /// no round trip (SQLite's busy handler; MySQL's acquire, a CALL that takes
    /// its bound as a parameter); elsewhere nothing.
    virtual void set_engine_wait(soci::session& s, std::chrono::milliseconds wait) const;

    /// True when a "transient" failure after the whole engine wait means the
    /// lock is held (SQLite: BUSY while another connection holds the file).
    [[nodiscard]] virtual bool busy_is_lock_wait() const noexcept { return false; }

    /// Classify a failure; `s` is the session it happened on.
    [[nodiscard]] virtual failure classify(soci::soci_error const& e, soci::session& s) const = 0;

    /// The engine's native error code ("40P01", "1213", "5"), or empty.
    [[nodiscard]] virtual std::string native_code(soci::soci_error const& e) const = 0;

    /// A listener for releases announced by other processes, or null where the
    /// engine or the URL has no such thing (then waiters poll). `on_notify(name, true)`
    /// is called for each release heard (name empty where the engine does not say
    /// which lock: every waiter tries again), and `on_notify("", false)` after
    /// (re)connecting, since announcements may have been missed meanwhile.
    using notify_fn = std::function<void(std::string_view name, bool heard)>;
    [[nodiscard]] virtual std::unique_ptr<release_listener> listen(std::string const& connect_string,
                                                                   notify_fn on_notify) const;
};

/// Throws what SOCI's backend for `e` throws for a failed statement
/// (soci::mysql_soci_error with the errno, soci::sqlite3_soci_error with the
/// extended result code), for a failure of a raw client call: see above.
[[noreturn]] void throw_client_error(sqlock::engine e, std::string const& message, int code);

/// A connect-string value, single-quoted with backslash escapes (libpq's
/// conninfo and SOCI's MySQL connect string read the same quoting).
[[nodiscard]] std::string quote_connect_value(std::string const& value);

}  // namespace sqlock::detail
