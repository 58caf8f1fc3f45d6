// SQLite: the row lock.
#include "dialect/sqlite/sqlite.hpp"

namespace sqlock::detail::sqlite_engine {

std::optional<grant> sqlite_dialect::lock_row(pooled_session ps, std::string const& name, std::string const& owner,
                                              std::chrono::milliseconds, std::chrono::milliseconds wait,
                                              std::function<std::int64_t()> const&, bool& missing) const {
    auto& c = static_cast<lite_cache&>(cache(ps));
    auto* db = handle_of(ps);
    missing = false;
    set_engine_wait(ps.session, wait);
    auto begin = [&] {
        try {
            c.begin.start(db, "BEGIN IMMEDIATE").run();
            return true;
        } catch (soci::sqlite3_soci_error const& e) {
            if ((e.result() & 0xff) == 5) return false;  // SQLITE_BUSY
            throw;
        }
    };
    long long drawn = 0, current = 0, locked = 0;
    if (!begin()) return std::nullopt;
    c.token.start(db, token_sql_).bind(":name", name).run([&](sqlite3_stmt* st) {
        drawn = sqlite3_column_int64(st, 0);
    });
    c.commit.start(db, "COMMIT").run();
    if (!begin()) return std::nullopt;
    c.current_token.start(db, current_token_sql_).bind(":name", name).run([&](sqlite3_stmt* st) {
        current = sqlite3_column_int64(st, 0);
    });
    if (current != drawn) return std::nullopt;  // another contender drew later: it goes first
    c.row_lock.start(db, row_lock_sql_)
        .bind(":name", name)
        .bind(":token", drawn)
        .bind(":owner", owner)
        .run([&](sqlite3_stmt* st) { locked = sqlite3_column_int64(st, 0); });
    return grant{true, drawn, locked, 0};
}

std::int64_t sqlite_dialect::keep_row_lock(pooled_session ps, std::string const&, std::chrono::milliseconds) const {
    auto& c = static_cast<lite_cache&>(cache(ps));
    long long now = 0;
    c.now.start(handle_of(ps), keep_sql_).run([&](sqlite3_stmt* st) { now = sqlite3_column_int64(st, 0); });
    return now;
}

void sqlite_dialect::end_row_lock(pooled_session ps, bool commit) const {
    auto& c = static_cast<lite_cache&>(cache(ps));
    auto* db = handle_of(ps);
    try {
        (commit ? c.commit.start(db, "COMMIT") : c.rollback.start(db, "ROLLBACK")).run();
    } catch (soci::soci_error const&) {
        if (commit) throw;  // a ROLLBACK without a transaction (BEGIN was busy) is fine
    }
    set_engine_wait(ps.session, options_.lock_wait_timeout);
}

}  // namespace sqlock::detail::sqlite_engine
