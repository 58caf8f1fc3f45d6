// The baseline SQL of the fence.
#include "detail/dialect.hpp"

#include <soci/soci.h>

namespace sqlock::detail {

std::optional<std::int64_t> dialect::fence(soci::session& s, std::string const& resource, std::int64_t token) const {
    // Equal tokens pass: one holder may write several times. The upsert locks
    // the resource's row until the caller's transaction ends.
    long long tok = token, stored = 0;
    s << "INSERT INTO " + fences_ +
             " AS f (resource, token) VALUES (:resource, :token)"
             " ON CONFLICT (resource) DO UPDATE SET token = excluded.token WHERE f.token <= excluded.token"
             " RETURNING token",
        soci::use(resource, "resource"), soci::use(tok, "token"), soci::into(stored);
    if (s.got_data()) return std::nullopt;
    s << "SELECT token FROM " + fences_ + " WHERE resource = :resource", soci::use(resource, "resource"),
        soci::into(stored);
    return stored;
}

}  // namespace sqlock::detail
