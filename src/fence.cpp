#include "detail/access.hpp"
#include "detail/dialect.hpp"
#include "detail/executor.hpp"
#include "detail/locker_impl.hpp"
#include "detail/store_impl.hpp"

#include <sqlock/errors.hpp>
#include <sqlock/fence.hpp>

#include <soci/soci.h>

#include <map>
#include <memory>
#include <mutex>
#include <utility>

namespace sqlock {
namespace {

// The fence's statements and classification for one engine and table prefix,
// built on first use and shared by every fence and thread of the process: the
// session and its transaction are the caller's, so nothing here holds a connection.
detail::dialect const& fence_sql(sqlock::engine e, std::string const& prefix) {
    static std::mutex mutex;
    static std::map<std::pair<sqlock::engine, std::string>, std::unique_ptr<detail::dialect const>> built;
    std::lock_guard lock(mutex);
    auto& d = built[{e, prefix}];
    if (!d) d = detail::make_dialect(e, prefix, {});
    return *d;
}

}  // namespace

fence::fence(store const& db)
    : engine_(db.engine()),
      prefix_(detail::access::impl(db)->options().table_prefix),
      metrics_(detail::access::impl(db)->metrics()) {}

fence::fence(sqlock::engine e, std::string_view table_prefix, std::shared_ptr<metrics> m)
    : engine_(e), prefix_(table_prefix), metrics_(std::move(m)) {
    detail::validate_table_prefix(prefix_);
    if (!metrics_) metrics_ = metrics::global();
}

void fence::check_and_set(soci::session& session, std::string_view resource, std::int64_t token) const {
    detail::validate_name(resource);
    if (token <= 0) throw usage_error("sqlock: fencing token " + std::to_string(token) + " is not a lease's token");
    static constexpr std::string_view backend_names[] = {"postgresql", "mysql", "sqlite3"};
    if (session.get_backend_name() != backend_names[static_cast<int>(engine_)])
        throw usage_error("sqlock: fence for " + std::string(to_string(engine_)) + " used on a " +
                          session.get_backend_name() + " session: build the fence for that engine");
    auto const& sql = fence_sql(engine_, prefix_);
    std::string res(resource);
    std::optional<std::int64_t> seen;
    detail::run_on_callers_session(sql, "fencing '" + res + "' in " + sql.fences_table(), session,
                                   [&](soci::session& s) { seen = sql.fence(s, res, token); });
    metrics_->impl().fence_checked(detail::engine_label_of(engine_), !seen);
    if (seen)
        throw stale_token("sqlock: stale fencing token " + std::to_string(token) + " for '" + res + "': token " +
                              std::to_string(*seen) +
                              " was already seen, so this lease was overtaken; roll back the transaction",
                          *seen);
}

}  // namespace sqlock
