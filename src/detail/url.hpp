// Internal: database URLs.
#pragma once

#include <sqlock/store.hpp>

#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace sqlock::detail {

/// A database URL taken apart. `path` is the SQLite file; the other fields are
/// for the server engines. `params` are the `?k=v&...` pairs, decoded.
/// `hosts`/`ports` are a libpq host list (`h1:p1,h2:p2`, PostgreSQL only), one
/// entry per host (port 0: the default); `host`/`port` are its first entry.
struct url_parts {
    sqlock::engine engine = sqlock::engine::sqlite;
    std::string user;
    std::string password;
    std::string host;
    unsigned port = 0;
    std::vector<std::string> hosts;
    std::vector<unsigned> ports;
    std::string database;
    std::string path;
    std::map<std::string, std::string> params;
};

/// @throws usage_error naming what is wrong with the URL and the accepted forms.
[[nodiscard]] url_parts parse_url(std::string_view url);

/// The URL with the userinfo password (after the first ':' up to the URL's last
/// '@', whatever '/', '?' or '@' it holds) and the password=/sslpassword=
/// values replaced by "***". Never throws; on malformed input it masks more,
/// never less.
[[nodiscard]] std::string redact_url(std::string_view url);

}  // namespace sqlock::detail
