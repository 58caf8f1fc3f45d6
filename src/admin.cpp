#include "detail/access.hpp"
#include "detail/locker_impl.hpp"
#include "detail/store_impl.hpp"

#include <sqlock/admin.hpp>

namespace sqlock {
namespace {

lock_info to_info(detail::lock_listing const& r) {
    return {r.name,
            r.owner,
            r.token,
            r.holds,
            db_time(std::chrono::microseconds(r.created_us)),
            db_time(std::chrono::microseconds(r.expires_us)),
            std::chrono::microseconds(r.expires_us - r.now_us)};
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

std::optional<lock_info> force_release(store const& db, std::string_view name) {
    detail::validate_name(name);
    auto const& impl = detail::access::impl(db);
    std::string n(name);
    auto row = impl->run("force-releasing lock '" + n + "'",
                         [&](soci::session& s) { return impl->dialect().force_release(s, n); });
    if (!row) return std::nullopt;
    impl->announce(n);
    return to_info(*row);
}

}  // namespace sqlock
