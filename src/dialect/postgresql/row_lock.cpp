// PostgreSQL: the row lock.
#include "dialect/postgresql/postgresql.hpp"

namespace sqlock::detail::postgresql_engine {

std::optional<grant> postgresql_dialect::lock_row(pooled_session ps, std::string const& name, std::string const& owner,
                                                  std::chrono::milliseconds ttl, std::chrono::milliseconds wait,
                                                  std::function<std::int64_t()> const& draw, bool& missing) const {
    auto& c = cache(ps);
    auto& s = ps.session;
    missing = false;
    auto const ms = std::max<long long>(1000, ttl.count());
    c.name = name;
    c.owner = owner;
    c.idle = std::to_string(ms);
    c.probe = std::to_string(std::max<long long>(1, ms / 3000));
    run(c.row_begin, s, "BEGIN");
    bool locked = false;
    if (wait.count() <= 0) {
        if (!c.row_try)
            c.row_try.emplace((s.prepare << try_lock_sql_, soci::use(c.name, "name"), soci::use(c.owner, "owner"),
                               soci::use(c.idle, "idle"), soci::use(c.probe, "probe"), soci::use(c.probe, "probe2"),
                               soci::use(c.idle, "idle2"), soci::into(c.locked)));
        locked = c.row_try->execute(true);
    } else {
        // lock_timeout is an int of milliseconds.
        c.lock_timeout = std::to_string(std::min<long long>(wait.count(), INT32_MAX));
        if (!c.row_wait)
            c.row_wait.emplace((s.prepare << wait_lock_sql_, soci::use(c.name, "name"), soci::use(c.owner, "owner"),
                                soci::use(c.idle, "idle"), soci::use(c.probe, "probe"), soci::use(c.probe, "probe2"),
                                soci::use(c.idle, "idle2"), soci::use(c.lock_timeout, "lock_timeout"),
                                soci::into(c.locked)));
        try {
            locked = c.row_wait->execute(true);
        } catch (soci::soci_error const& e) {
            if (native_code(e) == "55P03") return std::nullopt;  // waited the whole time: busy
            throw;
        }
    }
    if (!locked) {
        if (!c.row_exists)
            c.row_exists.emplace((s.prepare << exists_sql_, soci::use(c.name, "name"), soci::into(c.rows)));
        c.row_exists->execute(true);
        missing = c.rows == 0;
        return std::nullopt;
    }
    auto const at = c.locked;
    c.token = draw();
    if (!c.row_record)
        c.row_record.emplace((s.prepare << record_token_sql_, soci::use(c.token, "token"), soci::use(c.name, "name")));
    c.row_record->execute(true);
    return grant{true, c.token, at, 0};
}

std::int64_t postgresql_dialect::keep_row_lock(pooled_session ps, std::string const&,
                                               std::chrono::milliseconds ttl) const {
    auto& c = cache(ps);
    c.idle = std::to_string(std::max<long long>(1000, ttl.count()));
    if (!c.row_keep)
        c.row_keep.emplace((ps.session.prepare << keep_sql_, soci::use(c.idle, "idle"), soci::into(c.now)));
    c.row_keep->execute(true);
    return c.now;
}

void postgresql_dialect::end_row_lock(pooled_session ps, bool commit) const {
    auto& c = cache(ps);
    if (commit) run(c.row_commit, ps.session, "COMMIT");
    else run(c.row_rollback, ps.session, "ROLLBACK");
}

}  // namespace sqlock::detail::postgresql_engine
