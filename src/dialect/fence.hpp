// Internal: the SQL of the fence (`<prefix>_fences`: the highest token seen per resource).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace soci {
class session;
}  // namespace soci

namespace sqlock::detail {

class fence_statements {
public:
    virtual ~fence_statements() = default;

    /// Record `token` as the highest seen for `resource` unless a higher one was
    /// seen: returns the higher token that refuses it, or empty when accepted.
    /// Runs on the caller's session, inside the caller's transaction.
    [[nodiscard]] virtual std::optional<std::int64_t> fence(soci::session& s, std::string const& resource,
                                                            std::int64_t token) const = 0;
};

}  // namespace sqlock::detail
