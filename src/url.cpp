#include "detail/url.hpp"

#include <sqlock/errors.hpp>

#include <charconv>

namespace sqlock::detail {
namespace {

constexpr std::string_view accepted =
    "use postgresql://user:pass@host:port/db, mysql://user:pass@host:port/db, "
    "sqlite:///abs/path.db or sqlite:relative/path.db";

[[noreturn]] void bad(std::string_view url, std::string_view why) {
    throw usage_error("sqlock: bad database URL '" + redact_url(url) + "': " + std::string(why) +
                      "; " + std::string(accepted));
}

int hex_value(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

std::string percent_decode(std::string_view url, std::string_view s) {
    std::string out;
    out.reserve(s.size());
    for (std::size_t i = 0; i < s.size(); ++i) {
        if (s[i] != '%') {
            out += s[i];
            continue;
        }
        int hi = i + 2 < s.size() ? hex_value(s[i + 1]) : -1;
        int lo = i + 2 < s.size() ? hex_value(s[i + 2]) : -1;
        if (hi < 0 || lo < 0) bad(url, "a '%' is not followed by two hex digits");
        out += static_cast<char>(hi * 16 + lo);
        i += 2;
    }
    return out;
}

void parse_params(std::string_view url, std::string_view query, url_parts& parts) {
    while (!query.empty()) {
        auto amp = query.find('&');
        auto pair = query.substr(0, amp);
        query = amp == std::string_view::npos ? std::string_view{} : query.substr(amp + 1);
        if (pair.empty()) continue;
        auto eq = pair.find('=');
        if (eq == std::string_view::npos || eq == 0) bad(url, "a query parameter is not key=value");
        parts.params[percent_decode(url, pair.substr(0, eq))] = percent_decode(url, pair.substr(eq + 1));
    }
}

}  // namespace

std::string redact_url(std::string_view url) {
    auto scheme_end = url.find("://");
    if (scheme_end == std::string_view::npos) return std::string(url);
    auto authority = scheme_end + 3;
    auto at = url.find('@', authority);
    auto slash = url.find('/', authority);
    if (at == std::string_view::npos || (slash != std::string_view::npos && slash < at)) return std::string(url);
    auto colon = url.find(':', authority);
    if (colon == std::string_view::npos || colon > at) return std::string(url);
    return std::string(url.substr(0, colon + 1)) + "***" + std::string(url.substr(at));
}

url_parts parse_url(std::string_view url) {
    url_parts parts;
    auto colon = url.find(':');
    if (colon == std::string_view::npos) bad(url, "no scheme");
    auto scheme = url.substr(0, colon);
    auto rest = url.substr(colon + 1);

    if (scheme == "sqlite") {
        parts.engine = engine::sqlite;
        auto q = rest.find('?');
        if (q != std::string_view::npos) {
            parse_params(url, rest.substr(q + 1), parts);
            rest = rest.substr(0, q);
        }
        if (rest.starts_with("//")) {
            rest.remove_prefix(2);
            if (!rest.starts_with('/')) bad(url, "sqlite:// must be followed by an absolute path (three slashes)");
        }
        if (rest.empty()) bad(url, "no SQLite file path");
        if (rest == ":memory:" || rest.starts_with("file:"))
            bad(url, "in-memory and file: URI databases are not shared between pooled connections; give a file path");
        parts.path = percent_decode(url, rest);
        for (auto const& [key, value] : parts.params) {
            if (key != "synchronous") bad(url, "unknown SQLite parameter '" + key + "' (known: synchronous)");
            if (value != "full" && value != "normal" && value != "extra")
                bad(url, "synchronous must be full, normal or extra");
        }
        return parts;
    }

    if (scheme == "postgresql" || scheme == "postgres")
        parts.engine = engine::postgresql;
    else if (scheme == "mysql" || scheme == "mariadb")
        parts.engine = engine::mysql;
    else
        bad(url, "unknown scheme '" + std::string(scheme) + "'");

    if (!rest.starts_with("//")) bad(url, "expected '//' after the scheme");
    rest.remove_prefix(2);

    auto q = rest.find('?');
    if (q != std::string_view::npos) {
        parse_params(url, rest.substr(q + 1), parts);
        rest = rest.substr(0, q);
    }
    auto slash = rest.find('/');
    auto authority = rest.substr(0, slash);
    if (slash == std::string_view::npos || slash + 1 == rest.size()) bad(url, "no database name after the host");
    parts.database = percent_decode(url, rest.substr(slash + 1));
    if (parts.database.find('/') != std::string::npos) bad(url, "the database name contains '/'");

    auto at = authority.rfind('@');
    if (at != std::string_view::npos) {
        auto userinfo = authority.substr(0, at);
        authority = authority.substr(at + 1);
        auto c = userinfo.find(':');
        parts.user = percent_decode(url, userinfo.substr(0, c));
        if (c != std::string_view::npos) parts.password = percent_decode(url, userinfo.substr(c + 1));
    }

    auto port_colon = authority.rfind(':');
    if (port_colon != std::string_view::npos && authority.find(']') == std::string_view::npos) {
        auto port_text = authority.substr(port_colon + 1);
        unsigned port = 0;
        auto [end, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
        if (ec != std::errc{} || end != port_text.data() + port_text.size() || port == 0 || port > 65535)
            bad(url, "the port '" + std::string(port_text) + "' is not a number in 1..65535");
        parts.port = port;
        authority = authority.substr(0, port_colon);
    }
    if (authority.empty()) bad(url, "no host");
    parts.host = percent_decode(url, authority);
    if (parts.engine == engine::mysql) {
        for (auto const& [key, value] : parts.params)
            if (key != "charset" && key != "sslca" && key != "unix_socket")
                bad(url, "unknown MySQL parameter '" + key + "' (known: charset, sslca, unix_socket)");
    }
    return parts;
}

}  // namespace sqlock::detail
