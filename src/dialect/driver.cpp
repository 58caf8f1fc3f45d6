// The engine driver's baseline, and the errors of raw client calls (see driver.hpp).
#include "dialect/driver.hpp"

#include <soci/mysql/soci-mysql.h>
#include <soci/soci.h>
#include <soci/sqlite3/soci-sqlite3.h>

#include <sys/socket.h>

#include <cerrno>
#include <system_error>

namespace sqlock::detail {

void throw_client_error(sqlock::engine e, std::string const& message, int code) {
    switch (e) {
        case engine::mysql: throw soci::mysql_soci_error(message, code);
        case engine::sqlite: throw soci::sqlite3_soci_error(message, code);
        case engine::postgresql: break;
    }
    throw soci::soci_error(message);  // PostgreSQL's raw calls (LISTEN, read_idle) report no statement errors
}

std::string quote_connect_value(std::string const& value) {
    std::string out = "'";
    for (char c : value) {
        if (c == '\'' || c == '\\') out += '\\';
        out += c;
    }
    return out + "'";
}

// By value for the engines that keep it.
// NOLINTBEGIN(performance-unnecessary-value-param)
std::unique_ptr<release_listener> engine_driver::listen(std::string const&, notify_fn) const { return nullptr; }
// NOLINTEND(performance-unnecessary-value-param)

// NOLINTNEXTLINE(bugprone-easily-swappable-parameters): the interface's order
void engine_driver::check_pooling(soci::session&, std::string const&, std::string_view, std::string const&) const {}

int engine_driver::socket_of(soci::session&) const { return -1; }

engine_driver::idle_news engine_driver::read_idle(soci::session& s, bool hung_up) const {
    int const fd = socket_of(s);
    if (fd < 0) return {true, false, "its connection was already closed"};
    char byte = 0;
    auto const n = ::recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    int const err = errno;
    if (n == 0) return {true, false, "the server closed the connection"};
    if (n < 0 && err != EAGAIN && err != EWOULDBLOCK && err != EINTR)
        return {true, false, "the connection failed: " + std::generic_category().message(err)};
    if (hung_up) {
        int so_error = 0;
        socklen_t len = sizeof so_error;
        if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &so_error, &len) == 0 && so_error != 0)
            return {true, false, "the connection failed: " + std::generic_category().message(so_error)};
        return {true, false, "the server closed the connection"};
    }
    // Data this layer cannot parse stays readable until a statement reads it.
    return {false, n < 0, {}};
}

void engine_driver::set_engine_wait(soci::session&, std::chrono::milliseconds) const {}

}  // namespace sqlock::detail
