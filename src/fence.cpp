#include "detail/access.hpp"
#include "detail/dialect.hpp"
#include "detail/locker_impl.hpp"
#include "detail/store_impl.hpp"

#include <sqlock/errors.hpp>
#include <sqlock/fence.hpp>

#include <soci/soci.h>

namespace sqlock {

fence::fence(store const& db) : engine_(db.engine()), prefix_(detail::access::impl(db)->options().table_prefix) {}

fence::fence(sqlock::engine e, std::string_view table_prefix) : engine_(e), prefix_(table_prefix) {
    detail::validate_table_prefix(prefix_);
}

void fence::check_and_set(soci::session& session, std::string_view resource, std::int64_t token) const {
    detail::validate_name(resource);
    if (token <= 0) throw usage_error("sqlock: fencing token " + std::to_string(token) + " is not a lease's token");
    static constexpr std::string_view backend_names[] = {"postgresql", "mysql", "sqlite3"};
    if (session.get_backend_name() != backend_names[static_cast<int>(engine_)])
        throw usage_error("sqlock: fence for " + std::string(to_string(engine_)) + " used on a " +
                          session.get_backend_name() + " session: build the fence for that engine");
    // The dialect only builds SQL here: the session and its transaction are the caller's.
    static thread_local std::unique_ptr<detail::dialect> cached;
    if (!cached || cached->engine() != engine_ || cached->fences_table() != prefix_ + "_fences")
        cached = detail::make_dialect(engine_, prefix_, {});
    std::string res(resource);
    std::optional<std::int64_t> seen;
    try {
        seen = cached->fence(session, res, token);
    } catch (soci::soci_error const& e) {
        auto message = e.get_error_message();
        if (cached->classify(e, session) == detail::failure::schema)
            throw schema_missing("sqlock: the fence table " + cached->fences_table() + " is missing (" + message +
                                     "): apply schema/" + std::string(to_string(engine_)) + ".sql",
                                 cached->native_code(e));
        throw backend_error("sqlock: fencing '" + res + "' failed: " + message, cached->native_code(e));
    }
    if (seen)
        throw stale_token("sqlock: stale fencing token " + std::to_string(token) + " for '" + res +
                              "': token " + std::to_string(*seen) +
                              " was already seen, so this lease was overtaken; roll back the transaction",
                          *seen);
}

}  // namespace sqlock
