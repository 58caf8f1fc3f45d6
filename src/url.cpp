#include "detail/url.hpp"

#include <sqlock/errors.hpp>

#include <algorithm>
#include <cctype>
#include <charconv>

namespace sqlock::detail {
namespace {

constexpr std::string_view accepted =
    "use postgresql://user:pass@host:port/db (or host1:port1,host2:port2,... with "
    "?target_session_attrs=read-write), mysql://user:pass@host:port/db, "
    "sqlite:///abs/path.db or sqlite:relative/path.db";

[[noreturn]] void bad(std::string_view url, std::string_view why) {
    throw usage_error("sqlock: bad database URL '" + redact_url(url) + "': " + std::string(why) + "; " +
                      std::string(accepted));
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

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

bool is_scheme(std::string_view s) {
    if (s.empty() || !std::isalpha(static_cast<unsigned char>(s[0]))) return false;
    return std::all_of(s.begin(), s.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || c == '+' || c == '-' || c == '.';
    });
}

// The userinfo is everything between the scheme's "//" and the URL's LAST '@',
// and its password everything after its first ':'. parse_url ends the authority
// at the first '/' or '?', but a password may hold an unencoded '/', '?', '@' or
// ':' (postgresql://app:2024/Secret@db/app), and a message must show none of it:
// an '@' further on (in the query) masks more, never less. With no '@' at all,
// what follows the authority's ':' is masked unless it is a port.
void mask_userinfo_password(std::string& url) {
    auto const colon = url.find(':');
    if (colon == std::string::npos) return;
    std::string scheme = url.substr(0, colon);
    bool const has_scheme = is_scheme(scheme);
    std::transform(scheme.begin(), scheme.end(), scheme.begin(), [](unsigned char c) { return std::tolower(c); });
    if (has_scheme && scheme == "sqlite") return;  // a file path, no userinfo
    std::size_t start = 0;
    if (has_scheme && colon + 1 < url.size() && url[colon + 1] == '/') start = url.find_first_not_of('/', colon + 1);
    if (start == std::string::npos) return;
    auto at = url.rfind('@');
    if (at == std::string::npos || at < start) {
        auto const end = std::min(url.find_first_of("/?", start), url.size());
        auto const authority = std::string_view(url).substr(start, end - start);
        auto const port = authority.rfind(':');
        if (port == std::string_view::npos || authority.ends_with(']')) return;
        auto const digits = authority.substr(port + 1);
        if (!digits.empty() && digits.find_first_not_of("0123456789") == std::string_view::npos) return;
        at = end;
    }
    auto const separator = url.find(':', start);
    if (separator >= at) return;
    url.replace(separator + 1, at - separator - 1, "***");
}

bool is_password_key(std::string_view key) {
    std::string k;
    for (std::size_t i = 0; i < key.size(); ++i) {
        int hi = key[i] == '%' && i + 2 < key.size() ? hex_value(key[i + 1]) : -1;
        int lo = hi >= 0 ? hex_value(key[i + 2]) : -1;
        char c = key[i];
        if (hi >= 0 && lo >= 0) {
            c = static_cast<char>(hi * 16 + lo);
            i += 2;
        }
        k += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    }
    return k == "password" || k == "sslpassword";
}

// Masks password= and sslpassword= in the query, and in a libpq "key=value ..."
// string passed where a URL belongs.
std::string mask_password_params(std::string_view s) {
    std::string out;
    std::size_t i = 0;
    while (i < s.size()) {
        bool const in_query = i > 0 && (s[i - 1] == '?' || s[i - 1] == '&');
        if (!in_query && !(i == 0 || is_space(s[i - 1]))) {
            out += s[i++];
            continue;
        }
        auto key_end = i;
        while (key_end < s.size() && std::string_view("=&?").find(s[key_end]) == std::string_view::npos &&
               !is_space(s[key_end]))
            ++key_end;
        auto eq = key_end;
        while (eq < s.size() && is_space(s[eq])) ++eq;
        if (key_end == i || eq == s.size() || s[eq] != '=' || !is_password_key(s.substr(i, key_end - i))) {
            out += s[i++];
            continue;
        }
        auto value = eq + 1;
        while (!in_query && value < s.size() && is_space(s[value])) ++value;
        std::size_t value_end = s.size();
        if (in_query) {
            value_end = std::min(s.find('&', value), s.size());
        } else if (value < s.size() && s[value] == '\'') {
            for (auto j = value + 1; j < s.size(); ++j) {
                if (s[j] == '\\') {
                    ++j;
                } else if (s[j] == '\'') {
                    value_end = j + 1;
                    break;
                }
            }
        } else {
            while (value < value_end && !is_space(s[value])) ++value;
            value_end = value;
        }
        out += s.substr(i, eq + 1 - i);
        out += "***";
        i = value_end;
    }
    return out;
}

}  // namespace

std::string redact_url(std::string_view url) {
    // The query's passwords first: one holding an '@' would otherwise be cut at it by the userinfo's
    // mask, and its tail shown.
    auto out = mask_password_params(url);
    mask_userinfo_password(out);
    return out;
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

    if (scheme == "postgresql" || scheme == "postgres") parts.engine = engine::postgresql;
    else if (scheme == "mysql" || scheme == "mariadb") parts.engine = engine::mysql;
    else bad(url, "unknown scheme '" + std::string(scheme) + "'");

    if (!rest.starts_with("//")) bad(url, "expected '//' after the scheme");
    rest.remove_prefix(2);
    // The userinfo ends at the host's '/' or '?': an '@' after one is a password holding an unencoded
    // '/' or '?' (postgresql://app:2024/Secret@db/app), whose pieces would otherwise reach the server
    // as a database name or a parameter, and its error messages.
    if (auto const end = rest.find_first_of("/?"); end != std::string_view::npos && rest.find('@', end) != rest.npos)
        bad(url,
            "an '@' follows the host's '/' or '?': percent-encode '/', '?' and '@' in a password (%2F, %3F, %40), "
            "and '@' anywhere after the host");

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

    if (authority.empty()) bad(url, "no host");
    std::size_t n = 0;
    for (;;) {
        ++n;
        auto const comma = authority.find(',');
        auto entry = authority.substr(0, comma);
        auto const which = "host " + std::to_string(n) + " of the host list";
        auto port_colon = entry.rfind(':');
        unsigned port = 0;
        auto const bracket = entry.rfind(']');
        if (port_colon != std::string_view::npos && (bracket == std::string_view::npos || port_colon > bracket)) {
            auto port_text = entry.substr(port_colon + 1);
            auto [end, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
            if (ec != std::errc{} || end != port_text.data() + port_text.size() || port == 0 || port > 65535)
                bad(url, n == 1 && comma == std::string_view::npos
                             ? "the port is not a number in 1..65535"  // its text may be a password
                             : "the port of " + which + " is not a number in 1..65535");
            entry = entry.substr(0, port_colon);
        }
        if (entry.empty())
            bad(url, comma == std::string_view::npos && n == 1
                         ? std::string("no host")
                         : which + " is empty (write host1:port1,host2:port2 with no empty entry)");
        if (entry.size() > 2 && entry.front() == '[' && entry.back() == ']') entry = entry.substr(1, entry.size() - 2);
        parts.hosts.push_back(percent_decode(url, entry));
        if (parts.hosts.back().find(',') != std::string::npos) bad(url, which + " contains an encoded ','");
        parts.ports.push_back(port);
        if (comma == std::string_view::npos) break;
        authority = authority.substr(comma + 1);
    }
    parts.host = parts.hosts.front();
    parts.port = parts.ports.front();
    if (parts.engine == engine::mysql && parts.hosts.size() > 1)
        bad(url, "a MySQL/MariaDB URL takes one host; a host list (h1:p1,h2:p2) is for PostgreSQL (libpq) only");
    if (auto const pooling = parts.params.find("pooling"); pooling != parts.params.end()) {
        if (parts.engine != engine::postgresql) bad(url, "pooling is a PostgreSQL parameter");
        if (pooling->second != "session" && pooling->second != "transaction")
            bad(url, "pooling must be session or transaction (how a pooler such as PgBouncer in between pools)");
    }
    if (parts.engine == engine::mysql) {
        for (auto const& [key, value] : parts.params) {
            if (key != "charset" && key != "sslca" && key != "unix_socket" && key != "galera_single_writer")
                bad(url,
                    "unknown MySQL parameter '" + key + "' (known: charset, sslca, unix_socket, galera_single_writer)");
            if (key == "galera_single_writer" && value != "true" && value != "false")
                bad(url, "galera_single_writer must be true or false (got '" + value + "')");
        }
    }
    return parts;
}

}  // namespace sqlock::detail
