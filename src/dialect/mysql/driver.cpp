// MariaDB / MySQL: the engine driver: session set-up, error classification, the idle-socket read.
#include "dialect/mysql/mysql.hpp"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>

namespace sqlock::detail::mysql_engine {
namespace {

// Parks a connection of its own in the bell statement (a SLEEP); a releaser that saw a waiter's
// mark finds it in the process list and interrupts it with KILL QUERY ID (which hits that
// statement only, never the next one). The ring says no name: every waiter of the store tries
// again. Stopped by shutting its socket down, as the statement deadline does.
class sleep_listener final : public release_listener {
public:
    sleep_listener(mysql_dialect const& dialect, std::string connect_string, std::string bell,
                   dialect::notify_fn on_notify)
        : dialect_(dialect),
          connect_string_(std::move(connect_string)),
          bell_(std::move(bell)),
          on_notify_(std::move(on_notify)),
          wake_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)),
          thread_([this](std::stop_token stop) { run(stop); }) {}

    ~sleep_listener() override {
        thread_.request_stop();
        {
            std::lock_guard lock(mutex_);
            if (fd_ >= 0) ::shutdown(fd_, SHUT_RDWR);
        }
        std::uint64_t one = 1;
        (void)!::write(wake_, &one, sizeof one);
        thread_.join();
        ::close(wake_);
    }

private:
    void run(std::stop_token const& stop) {
        auto retry = std::chrono::milliseconds(100);
        while (!stop.stop_requested()) {
            std::unique_ptr<soci::session> s;
            try {
                // Connected (bounded by connect_timeout), its socket is published before any statement,
                // so a stop never waits for an answer; SLEEP needs none of the pooled sessions' settings.
                s = std::make_unique<soci::session>();
                s->open(*soci::factory_mysql(), connect_string_);
                {
                    std::lock_guard lock(mutex_);
                    fd_ = dialect_.socket_of(*s);
                    if (fd_ >= 0) (void)::fcntl(fd_, F_SETFD, ::fcntl(fd_, F_GETFD) | FD_CLOEXEC);
                }
                auto* backend = static_cast<soci::mysql_session_backend*>(s->get_backend());
                dialect_.set_listener_id(static_cast<long long>(mysql_thread_id(backend->conn_)));
                retry = std::chrono::milliseconds(100);
                on_notify_("", false);  // anything released while we were away is unknown
                while (!stop.stop_requested()) {
                    int interrupted = 0;
                    try {
                        *s << bell_, soci::into(interrupted);
                    } catch (soci::mysql_soci_error const& e) {
                        if (e.err_num_ != 1317) throw;  // ER_QUERY_INTERRUPTED: a ring
                        interrupted = 1;
                    }
                    if (interrupted == 1) on_notify_("", true);
                }
            } catch (std::exception const&) {  // reconnect below; waiters poll meanwhile
            }
            {
                std::lock_guard lock(mutex_);  // never shut down a descriptor number reused meanwhile
                dialect_.set_listener_id(0);
                fd_ = -1;
                s.reset();
            }
            if (stop.stop_requested()) break;
            pollfd fd{wake_, POLLIN, 0};
            ::poll(&fd, 1, static_cast<int>(retry.count()));
            retry = std::min(retry * 2, std::chrono::milliseconds(5000));
        }
    }

    mysql_dialect const& dialect_;
    std::string connect_string_;
    std::string bell_;
    dialect::notify_fn on_notify_;
    int wake_;
    std::mutex mutex_;
    int fd_ = -1;  // guarded by mutex_
    std::jthread thread_;
};

}  // namespace

std::unique_ptr<release_listener> mysql_dialect::listen(std::string const& connect_string, notify_fn on_notify) const {
    return std::make_unique<sleep_listener>(*this, connect_string, bell_sql_, std::move(on_notify));
}

bool galera(soci::session& s) {
    std::string name, value;
    soci::indicator ind = soci::i_null;
    s << "SHOW SESSION VARIABLES LIKE 'wsrep_on'", soci::into(name), soci::into(value, ind);
    return s.got_data() && ind == soci::i_ok && value == "ON";
}

std::string mysql_dialect::connect_string(url_parts const& url) const {
    auto seconds = std::max<long long>(1, (options_.connect_timeout.count() + 999) / 1000);
    // A read must outlast the longest server-side wait of one statement.
    auto read_seconds = seconds + (options_.lock_wait_timeout.count() + 999) / 1000 + 30;
    std::string c = "host=" + quote_connect_value(url.host) + " dbname=" + quote_connect_value(url.database) +
                    " connect_timeout=" + std::to_string(seconds) + " read_timeout=" + std::to_string(read_seconds) +
                    " write_timeout=" + std::to_string(read_seconds);
    if (url.port != 0) c += " port=" + std::to_string(url.port);
    if (!url.user.empty()) c += " user=" + quote_connect_value(url.user);
    if (!url.password.empty()) c += " password=" + quote_connect_value(url.password);
    auto charset = url.params.find("charset");
    c += " charset=" + quote_connect_value(charset == url.params.end() ? "utf8mb4" : charset->second);
    for (auto const& [key, value] : url.params) {
        validate_param_name(key);
        if (key != "charset" && key != "galera_single_writer") c += " " + key + "=" + quote_connect_value(value);
    }
    return c;
}

void mysql_dialect::open(soci::session& s, std::string const& connect_string) const {
    // Never auto-reconnect (the default): a silent reconnect would drop a
    // transaction without telling us.
    s.open(*soci::factory_mysql(), connect_string);
    // Connector/C opens its socket without close-on-exec (libpq sets it): a
    // program the process starts (system, popen, posix_spawn) would keep the
    // connection open after this process dies, and a row lock held on it
    // would stay held until that program ends or the server's idle limit
    // (the TTL) runs out, not free at the holder's death.
    if (int fd = socket_of(s); fd >= 0) {
        int const flags = ::fcntl(fd, F_GETFD);
        if (flags >= 0) (void)::fcntl(fd, F_SETFD, flags | FD_CLOEXEC);
    }
    // MariaDB or MySQL: the first session asks; the statements that differ (flavour.cpp) follow the answer.
    on_mysql_.store(learn_server(s).flavour == server_flavour::mysql, std::memory_order_relaxed);
    auto const& flavour = flavoured();
    auto wait_seconds = std::max<long long>(1, (options_.lock_wait_timeout.count() + 999) / 1000);
    s << "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED";
    // The idle bound (MariaDB's idle_transaction_timeout; MySQL has none, see
    // flavour.cpp): a client that stops inside a transaction of several round
    // trips (the reaper's, the row lock's between its statements, a pause, a
    // crash the server has not noticed) may hold row locks other clients wait
    // for; the server ends such a session instead of letting it block them for
    // wait_timeout (hours). The row lock raises it to its TTL while it holds its
    // transaction.
    std::string const idle_bound =
        flavour.session_idle_bound.empty() ? "" : flavour.session_idle_bound + std::to_string(wait_seconds);
    s << "SET SESSION time_zone = '+00:00', SESSION innodb_lock_wait_timeout = " + std::to_string(wait_seconds) +
             idle_bound +
             ", SESSION sql_mode = 'STRICT_ALL_TABLES,NO_ZERO_IN_DATE,NO_ZERO_DATE,"
             "ERROR_FOR_DIVISION_BY_ZERO,NO_ENGINE_SUBSTITUTION'";
    // On Galera a node applies other nodes' commits asynchronously: without a
    // causality wait a read (the acquire's look at the lock row, a renewal's,
    // `sqlock list`) can see a row another node already released, renewed or
    // replaced. Certification still aborts a write decided on such a stale row
    // (1213, retried), so exclusion does not depend on it; the wait makes
    // reads, inserts, updates and deletes see every commit the cluster made
    // before they started: fewer certification conflicts, no stale "busy".
    if (galera(s)) s << "SET SESSION wsrep_sync_wait = 7";
}

void mysql_dialect::read_server_answer(soci::session& s, std::string& version, std::string& comment) const {
    s << "SELECT VERSION(), @@version_comment", soci::into(version), soci::into(comment);
}

int mysql_dialect::socket_of(soci::session& s) const {
    auto* backend = static_cast<soci::mysql_session_backend*>(s.get_backend());
    return backend == nullptr || backend->conn_ == nullptr ? -1 : static_cast<int>(mysql_get_socket(backend->conn_));
}

dialect::idle_news mysql_dialect::read_idle(soci::session& s, bool hung_up) const {
    // Nothing is due on an idle connection: what comes is the server's
    // error packet before it closes the session (a KILL, a shutdown, the
    // idle limit). Read in place, it stays for the connection's next reader.
    auto* backend = static_cast<soci::mysql_session_backend*>(s.get_backend());
    int const fd = socket_of(s);
    if (fd >= 0 && mysql_get_ssl_cipher(backend->conn_) == nullptr) {
        std::array<unsigned char, 512> packet{};
        auto const n = ::recv(fd, packet.data(), packet.size(), MSG_PEEK | MSG_DONTWAIT);
        if (n >= 7 && packet[4] == 0xFF) {
            auto const length =
                std::min<std::size_t>(static_cast<std::size_t>(n), 4 + (packet[0] | packet[1] << 8 | packet[2] << 16));
            std::string why = "ERROR " + std::to_string(packet[5] | packet[6] << 8);
            std::size_t at = 7;
            if (length >= 13 && packet[7] == '#') {
                why += " (" + std::string(packet.begin() + 8, packet.begin() + 13) + ")";
                at = 13;
            }
            if (length > at)
                why += ": " + std::string(packet.begin() + static_cast<std::ptrdiff_t>(at),
                                          packet.begin() + static_cast<std::ptrdiff_t>(length));
            return {true, false, why};
        }
    }
    return dialect::read_idle(s, hung_up);
}

failure mysql_dialect::classify(soci::soci_error const& e, soci::session&) const {
    auto* my = dynamic_cast<soci::mysql_soci_error const*>(&e);
    if (my == nullptr) return failure::other;
    switch (my->err_num_) {
        // Galera: a certification conflict at COMMIT comes as 1213; a write set
        // aborted by a conflicting one may come as 1180 (ER_ERROR_DURING_COMMIT,
        // "Deadlock: wsrep aborted transaction"), and a node outside the primary
        // component (joining, partitioned) refuses statements with 1047
        // (ER_UNKNOWN_COM_ERROR, "WSREP has not yet prepared node for application
        // use"). Nothing was committed in any of them: retry.
        case 1180:
        case 1047:
        case 1213: return failure::transient;  // ER_LOCK_DEADLOCK: the transaction was rolled back
        case 1205: return failure::lock_wait;  // ER_LOCK_WAIT_TIMEOUT
        case 1146:                             // ER_NO_SUCH_TABLE
        case 1305:                             // ER_SP_DOES_NOT_EXIST: <prefix>_acquire_v2 or _renew
            return failure::schema;
        case 1044:  // ER_DBACCESS_DENIED_ERROR
        case 1142:  // ER_TABLEACCESS_DENIED_ERROR
        case 1143:  // ER_COLUMNACCESS_DENIED_ERROR
        case 1370:  // ER_PROCACCESS_DENIED_ERROR: EXECUTE on a procedure
            return failure::permission;
        case 1290:  // ER_OPTION_PREVENTS_STATEMENT: --read-only
        case 1792:  // ER_CANT_EXECUTE_IN_READ_ONLY_TRANSACTION
            return failure::read_only;
        case 1053:  // ER_SERVER_SHUTDOWN
        case 1927:  // ER_CONNECTION_KILLED
        case 2002:
        case 2003:
        case 2006:
        case 2013:
        case 2055:
        case 4031:  // ER_CLIENT_INTERACTION_TIMEOUT
            return failure::connection;
        default:
            return my->get_error_category() == soci::soci_error::connection_error ? failure::connection
                                                                                  : failure::other;
    }
}

std::string mysql_dialect::native_code(soci::soci_error const& e) const {
    if (auto* my = dynamic_cast<soci::mysql_soci_error const*>(&e)) return std::to_string(my->err_num_);
    return {};
}

}  // namespace sqlock::detail::mysql_engine
