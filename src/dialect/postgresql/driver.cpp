// PostgreSQL: the engine driver: session set-up, error classification, the idle-socket read.
#include "dialect/postgresql/postgresql.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <memory>
#include <set>

namespace sqlock::detail::postgresql_engine {
namespace {

// SOCI has no API for LISTEN/NOTIFY, so the listener owns a raw libpq
// connection. An eventfd wakes its poll() for a prompt shutdown.
class pg_listener final : public release_listener {
public:
    pg_listener(std::string conninfo, std::string const& channel, std::chrono::milliseconds io_timeout,
                dialect::notify_fn on_notify)
        : conninfo_(std::move(conninfo)),
          listen_sql_("LISTEN \"" + channel + "\""),
          io_timeout_(io_timeout),
          on_notify_(std::move(on_notify)),
          wake_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)),
          thread_([this](std::stop_token stop) { run(stop); }) {}

    ~pg_listener() override {
        thread_.request_stop();
        std::uint64_t one = 1;
        (void)!::write(wake_, &one, sizeof one);
        thread_.join();
        ::close(wake_);
    }

private:
    void run(std::stop_token const& stop) {
        auto retry = std::chrono::milliseconds(100);
        while (!stop.stop_requested()) {
            PGconn* conn = PQconnectdb(conninfo_.c_str());
            if (PQstatus(conn) == CONNECTION_OK) {
                if (subscribe(conn, stop)) {
                    retry = std::chrono::milliseconds(100);
                    on_notify_("", false);  // anything released while we were away is unknown
                    pump(conn, stop);
                }
            }
            PQfinish(conn);
            if (stop.stop_requested()) break;
            sleep_unless_woken(retry);
            retry = std::min(retry * 2, std::chrono::milliseconds(5000));
        }
    }

    // LISTEN, waiting for its answer at most io_timeout and never past a stop: a
    // blocking PQexec on a silent server would keep the store from closing.
    bool subscribe(PGconn* conn, std::stop_token const& stop) {
        if (PQsendQuery(conn, listen_sql_.c_str()) == 0) return false;
        auto const deadline = std::chrono::steady_clock::now() + io_timeout_;
        while (PQisBusy(conn) != 0) {
            auto const left =
                std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
            if (stop.stop_requested() || left <= std::chrono::milliseconds::zero()) return false;
            pollfd fds[2] = {{PQsocket(conn), POLLIN, 0}, {wake_, POLLIN, 0}};

            if (::poll(fds, 2, static_cast<int>(std::min<long long>(left.count() + 1, 1000))) < 0 && errno != EINTR)
                return false;
            if (fds[1].revents != 0) return false;
            if (fds[0].revents != 0 && PQconsumeInput(conn) == 0) return false;
        }
        bool listening = true;
        while (PGresult* r = PQgetResult(conn)) {
            listening = listening && PQresultStatus(r) == PGRES_COMMAND_OK;
            PQclear(r);
        }
        return listening;
    }

    // Deliver notifications until the connection drops or we are stopped.
    void pump(PGconn* conn, std::stop_token const& stop) {
        while (!stop.stop_requested()) {
            pollfd fds[2] = {{PQsocket(conn), POLLIN, 0}, {wake_, POLLIN, 0}};
            if (::poll(fds, 2, -1) < 0 && errno != EINTR) return;
            if ((fds[0].revents & (POLLIN | POLLERR | POLLHUP)) != 0) {
                if (PQconsumeInput(conn) == 0) return;
                while (PGnotify* n = PQnotifies(conn)) {
                    std::string name = n->extra;
                    PQfreemem(n);
                    if (!name.empty()) on_notify_(name, true);
                }
            }
        }
    }

    void sleep_unless_woken(std::chrono::milliseconds d) {
        pollfd fd{wake_, POLLIN, 0};
        ::poll(&fd, 1, static_cast<int>(d.count()));
    }

    std::string conninfo_;
    std::string listen_sql_;
    std::chrono::milliseconds io_timeout_;
    dialect::notify_fn on_notify_;
    int wake_;
    std::jthread thread_;
};

}  // namespace

std::string postgresql_dialect::connect_string(url_parts const& url) const {
    auto seconds = std::max<long long>(2, (options_.connect_timeout.count() + 999) / 1000);
    // Client-side keepalives: a holder learns within about a minute that the
    // server vanished, instead of waiting on a dead socket for hours.
    // A host list (a Patroni cluster's nodes) goes to libpq as host=h1,h2 port=p1,p2: it tries
    // them in turn, and target_session_attrs=read-write from the URL makes it keep the primary.
    std::string hosts;
    std::string ports;
    bool any_port = false;
    auto const& list = url.hosts.empty() ? std::vector<std::string>{url.host} : url.hosts;
    for (std::size_t i = 0; i < list.size(); ++i) {
        auto const port = i < url.ports.size() ? url.ports[i] : url.port;
        if (i > 0) {
            hosts += ',';
            ports += ',';
        }
        hosts += list[i];
        if (port != 0) ports += std::to_string(port);
        any_port = any_port || port != 0;
    }
    std::string c = "host=" + quote_connect_value(hosts) + " dbname=" + quote_connect_value(url.database) +
                    " connect_timeout=" + std::to_string(seconds) + " application_name='sqlock'" +
                    " keepalives=1 keepalives_idle=30 keepalives_interval=10 keepalives_count=3";
    if (any_port) c += " port=" + quote_connect_value(ports);
    if (!url.user.empty()) c += " user=" + quote_connect_value(url.user);
    if (!url.password.empty()) c += " password=" + quote_connect_value(url.password);
    for (auto const& [key, value] : url.params) {
        if (key == "pooling") continue;  // sqlock's own (check_pooling), not libpq's
        validate_param_name(key);
        c += " " + key + "=" + quote_connect_value(value);
    }
    return c;
}

void postgresql_dialect::open(soci::session& s, std::string const& connect_string) const {
    s.open(*soci::factory_postgresql(), connect_string);
    (void)learn_server(s);
    s << "SET lock_timeout = " + std::to_string(options_.lock_wait_timeout.count());
    // A grant or renewal acknowledged before it is on disk can be lost by a
    // crash and its token handed out again: never let a role's or URL's
    // synchronous_commit = off apply to sqlock's own connections.
    s << "SELECT set_config('synchronous_commit', 'on', false) WHERE current_setting('synchronous_commit') = 'off'";
    // sqlock's statements are written for READ COMMITTED (single conditional
    // statements; the row lock waits for the holder's row and then locks it).
    // A SERIALIZABLE or REPEATABLE READ default (server, database, role or the
    // URL's options) would make them fail with serialization errors (40001)
    // and the row lock's COMMIT report a held lock as lost: never inherit it.
    s << "SET default_transaction_isolation = 'read committed'";
    s << "SET TIME ZONE 'UTC'";
    s << "SET client_min_messages = warning";  // no NOTICEs from idempotent DDL on stderr
}

void postgresql_dialect::read_server_answer(soci::session& s, std::string& version, std::string&) const {
    s << "SELECT current_setting('server_version')", soci::into(version);
}

void postgresql_dialect::check_pooling(soci::session& s, std::string const& connect_string, std::string_view declared,
                                       std::string const& url) const {
    if (declared == "session") return;
    auto const refuse = [&](std::string const& how) {
        throw backend_error(
            "sqlock: " + url + " " + how +
                ": sqlock needs one server session per connection (its statements are prepared once per "
                "connection, its waiters LISTEN for releases, its connections SET lock_timeout and the isolation "
                "level, a row lock holds a transaction open), and a pooler in transaction or statement mode "
                "shares server sessions between connections; point the URL at a pool in session mode "
                "(PgBouncer pool_mode=session) or at the server itself",
            "");
    };
    if (declared == "transaction") refuse("is declared to pool per transaction (pooling=transaction)");
    // Connected straight to the server (TCP), the server sees our socket's own port: nothing to probe.
    long long pid = 0;
    int server_sees = 0;
    soci::indicator seen = soci::i_null;
    s << "SELECT pg_backend_pid(), inet_client_port()", soci::into(pid), soci::into(server_sees, seen);
    sockaddr_storage ours{};
    socklen_t length = sizeof ours;
    int const fd = socket_of(s);
    if (fd >= 0 && ::getsockname(fd, reinterpret_cast<sockaddr*>(&ours), &length) == 0 && seen == soci::i_ok) {
        int port = -1;
        if (ours.ss_family == AF_INET) port = ntohs(reinterpret_cast<sockaddr_in const&>(ours).sin_port);
        if (ours.ss_family == AF_INET6) port = ntohs(reinterpret_cast<sockaddr_in6 const&>(ours).sin6_port);
        if (port == server_sees) return;
    }
    // Something in between, or a Unix socket. A session pooler, a TCP proxy and the server itself give
    // each connection one server session for its life, always another than any other connection's. A
    // pooler per transaction gives each statement an idle one: PgBouncer the most recently freed first
    // (so the other connection's at once), or in turn with server_round_robin (so our second statement
    // gets a third session, or, with one session, the other connection gets ours). One turn each is
    // enough, and keeps the probe to one connection and two round trips behind a slow proxy.
    std::unique_ptr<PGconn, void (*)(PGconn*)> other(PQconnectdb(connect_string.c_str()), PQfinish);
    if (PQstatus(other.get()) != CONNECTION_OK) return;  // the store's own connections will say what is wrong
    // Never longer than io_timeout for an answer: a silent server must not hold the store's opening.
    auto const backend_of_other = [&]() -> long long {
        if (PQsendQuery(other.get(), "SELECT pg_backend_pid()") == 0) return -1;
        auto const deadline = std::chrono::steady_clock::now() + options_.io_timeout;
        while (PQisBusy(other.get()) != 0) {
            auto const left =
                std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
            pollfd readable{PQsocket(other.get()), POLLIN, 0};
            if (left.count() <= 0 || (::poll(&readable, 1, static_cast<int>(left.count()) + 1) < 0 && errno != EINTR) ||
                PQconsumeInput(other.get()) == 0)
                return -1;
        }
        long long backend = -1;
        while (PGresult* r = PQgetResult(other.get())) {
            if (PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1) backend = std::stoll(PQgetvalue(r, 0, 0));
            PQclear(r);
        }
        return backend;
    };
    std::set<long long> mine{pid}, theirs;
    auto const other_backend = backend_of_other();
    if (other_backend < 0) return;  // the probe's own failure: the store's connections report theirs
    theirs.insert(other_backend);
    s << "SELECT pg_backend_pid()", soci::into(pid);
    mine.insert(pid);
    bool const shared = mine.size() > 1 || theirs.size() > 1 || mine == theirs;
    if (shared)
        refuse(
            "is reached through a pooler per transaction or statement (PgBouncer pool_mode=transaction): "
            "sqlock's connections were served by changing or shared server sessions");
}

int postgresql_dialect::socket_of(soci::session& s) const {
    auto* backend = static_cast<soci::postgresql_session_backend*>(s.get_backend());
    return backend == nullptr || backend->conn_ == nullptr ? -1 : PQsocket(backend->conn_);
}

dialect::idle_news postgresql_dialect::read_idle(soci::session& s, bool hung_up) const {
    auto* backend = static_cast<soci::postgresql_session_backend*>(s.get_backend());
    PGconn* conn = backend == nullptr ? nullptr : backend->conn_;
    if (conn == nullptr || PQstatus(conn) == CONNECTION_BAD) return {true, false, "its connection was already closed"};
    // Parse what came, in libpq (notices, parameter changes, the server's
    // FATAL before it closes): a message received outside a query goes to
    // the notice receiver, which keeps it here instead of on stderr.
    struct heard {
        std::string said;
        bool fatal = false;
    } h;
    auto const keep = [](void* arg, PGresult const* r) {
        auto& into = *static_cast<heard*>(arg);
        char const* m = PQresultErrorMessage(r);
        char const* severity = PQresultErrorField(r, PG_DIAG_SEVERITY_NONLOCALIZED);
        bool const fatal =
            severity != nullptr && (std::string_view(severity) == "FATAL" || std::string_view(severity) == "PANIC");
        if (m != nullptr && (fatal || !into.fatal)) into.said = m;
        into.fatal = into.fatal || fatal;
    };
    auto const previous = PQsetNoticeReceiver(conn, keep, &h);
    bool const read = PQconsumeInput(conn) == 1;
    (void)PQisBusy(conn);
    PQsetNoticeReceiver(conn, previous, nullptr);  // sqlock's sessions keep libpq's default (argument null)
    if (!read || PQstatus(conn) == CONNECTION_BAD || hung_up || h.fatal) {
        if (!h.fatal) h.said = PQerrorMessage(conn);
        while (!h.said.empty() && (h.said.back() == '\n' || h.said.back() == ' ')) h.said.pop_back();
        if (h.said.empty()) h.said = "the server closed the connection";
        return {true, false, h.said};
    }
    return {};
}

std::unique_ptr<release_listener> postgresql_dialect::listen(std::string const& connect_string,
                                                             dialect::notify_fn on_notify) const {
    return std::make_unique<pg_listener>(connect_string, channel(), options_.io_timeout, std::move(on_notify));
}

failure postgresql_dialect::classify(soci::soci_error const& e, soci::session& s) const {
    // Every session of this dialect was opened with the PostgreSQL backend.
    auto* backend = static_cast<soci::postgresql_session_backend*>(s.get_backend());
    if (backend == nullptr || backend->conn_ == nullptr || PQstatus(backend->conn_) == CONNECTION_BAD)
        return failure::connection;
    auto code = native_code(e);
    if (code == "40001" || code == "40P01") return failure::transient;
    if (code == "55P03") return failure::lock_wait;
    if (code == "42P01") return failure::schema;
    if (code == "42501") return failure::permission;  // insufficient_privilege
    if (code == "25006") {                            // read_only_sql_transaction
        // On a hot standby (a replica, or a primary demoted by a failover) the refusal is the cluster's
        // state, not its settings: drop the connection, and the reconnect (a host list with
        // target_session_attrs=read-write) finds the primary. A read-only setting stays a backend_error.
        char const* standby = PQparameterStatus(backend->conn_, "in_hot_standby");
        return standby != nullptr && std::string_view(standby) == "on" ? failure::connection : failure::read_only;
    }
    if (code.starts_with("08") || code.starts_with("57P")) return failure::connection;
    return failure::other;
}

std::string postgresql_dialect::native_code(soci::soci_error const& e) const {
    if (auto* pg = dynamic_cast<soci::postgresql_soci_error const*>(&e)) return pg->sqlstate();
    return {};
}

}  // namespace sqlock::detail::postgresql_engine
