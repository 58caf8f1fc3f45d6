#include "detail/access.hpp"
#include "detail/locker_impl.hpp"
#include "detail/store_impl.hpp"

#include <sqlock/admin.hpp>

namespace sqlock {
namespace {

lock_info to_info(detail::lock_listing const& r) {
    lock_info info;
    info.name = r.name;
    info.owner = r.owner;
    info.token = r.token;
    info.holds = r.holds;
    info.created_at = db_time(std::chrono::microseconds(r.created_us));
    info.expires_at = db_time(std::chrono::microseconds(r.expires_us));
    info.remaining = std::chrono::microseconds(r.expires_us - r.now_us);
    info.lock = r.name;
    // The library's own rows: <name> U+001F p U+001F <slot> and <name> U+001F r U+001F <id>.
    constexpr char sep = detail::reserved_separator;
    if (auto at = r.name.find(sep); at != std::string::npos && at + 2 < r.name.size() && r.name[at + 2] == sep) {
        info.lock = r.name.substr(0, at);
        if (r.name[at + 1] == 'p') {
            info.kind = "permit";
            try {
                info.slot = std::stoi(r.name.substr(at + 3));
            } catch (std::exception const&) {  // not one of ours after all
            }
        } else if (r.name[at + 1] == 'r') {
            info.kind = "shared";
        }
    }
    // A leader's owner carries its value.
    if (auto at = r.owner.find(sep); at != std::string::npos) {
        info.value = r.owner.substr(at + 1);
        info.owner = r.owner.substr(0, at);
    }
    return info;
}

}  // namespace

std::vector<lock_info> list_locks(store const& db) {
    auto const& impl = detail::access::impl(db);
    auto rows = impl->run("listing locks", [&](soci::session& s) { return impl->dialect().list_locks(s); });
    std::vector<lock_info> out;
    out.reserve(rows.size());
    for (auto const& r : rows) out.push_back(to_info(r));
    return out;
}

table_state read_table_state(store const& db) {
    auto const& impl = detail::access::impl(db);
    auto c = impl->run("counting the rows of the lock tables",
                       [&](soci::session& s) { return impl->dialect().count_tables(s); });
    table_state t;
    t.rows = static_cast<std::uint64_t>(c.rows);
    t.expired_rows = static_cast<std::uint64_t>(c.expired);
    t.token_rows = static_cast<std::uint64_t>(c.token_rows);
    if (c.oldest_expiry_us) t.oldest_expired_age = std::chrono::microseconds(c.now_us - *c.oldest_expiry_us);
    return t;
}

std::optional<lock_info> force_release(store const& db, std::string_view name) {
    detail::validate_row_name(name);
    auto const& impl = detail::access::impl(db);
    std::string n(name);
    auto row = impl->run("force-releasing lock '" + n + "'",
                         [&](soci::session& s) { return impl->dialect().force_release(s, n); });
    if (!row) return std::nullopt;
    impl->announce(n);
    return to_info(*row);
}

}  // namespace sqlock
