// SQLite: the table lock.
#include "dialect/sqlite/sqlite.hpp"

namespace sqlock::detail::sqlite_engine {

namespace {

// One run of a grant statement (lock_sql_, or shared_lock_sql_ with `marked`, its 4th column):
// acquired with the row it answered, else an empty grant.
grant run_grant(lite_statement& st, sqlite3* db, std::string const& sql, std::string const& name,
                std::string const& owner, std::int64_t attempt, std::int64_t ttl_us, bool* marked) {
    grant g;
    g.acquired = st.start(db, sql)
                     .bind(":name", name)
                     .bind(":owner", owner)
                     .bind(":attempt", static_cast<long long>(attempt))
                     .bind(":ttl", static_cast<long long>(ttl_us))
                     .run([&](sqlite3_stmt* row) {
                         g.token = sqlite3_column_int64(row, 0);
                         g.created_us = sqlite3_column_int64(row, 1);
                         g.expires_us = sqlite3_column_int64(row, 2);
                         if (marked != nullptr) *marked = sqlite3_column_int64(row, 3) != 0;
                     });
    return g;
}

}  // namespace

grant sqlite_dialect::acquire(pooled_session ps, std::string const& name, std::string const& owner,
                              std::int64_t attempt, std::int64_t ttl_us, bool waiting, bool /*retry*/) const {
    auto& c = static_cast<lite_cache&>(cache(ps));
    auto* db = handle_of(ps);
    grant g;
    auto const once = [&] { g = run_grant(c.lock, db, lock_sql_, name, owner, attempt, ttl_us, nullptr); };
    once();
    // Released between the two statements: nobody would ring for us, so try again now.
    if (!g.acquired && waiting && listening()) {
        c.mark.start(db, mark_sql_).bind(":name", name).run();
        if (sqlite3_changes(db) == 0) once();
    }
    return g.acquired ? g : grant{};
}

grant sqlite_dialect::acquire_shared(pooled_session ps, std::string const& name, std::string const& reader,
                                     std::string const& owner, std::int64_t attempt, std::int64_t ttl_us, bool waiting,
                                     bool /*retry*/) const {
    auto& c = static_cast<lite_cache&>(cache(ps));
    auto* db = handle_of(ps);
    grant g;
    bool marked = false;
    auto const take = [&] {
        g = run_grant(c.shared_lock, db, shared_lock_sql_, name, owner, attempt, ttl_us, &marked);
        if (g.acquired)
            c.shared_rename.start(db, shared_rename_sql_)
                .bind(":to", reader)
                .bind(":name", name)
                .bind(":owner", owner)
                .bind(":token", static_cast<long long>(g.token))
                .run();
    };
    // BUSY here, after the engine wait, is the busy lock (busy_is_lock_wait): no transaction is open.
    c.begin.start(db, "BEGIN IMMEDIATE").run();
    try {
        take();
        if (!g.acquired && waiting && listening()) {
            // Held: mark it, so that its release rings. Gone between the two statements
            // (expired meanwhile): try once more.
            c.mark.start(db, mark_sql_).bind(":name", name).run();
            if (sqlite3_changes(db) == 0) take();
        }
        c.commit.start(db, "COMMIT").run();
    } catch (...) {
        try {
            c.rollback.start(db, "ROLLBACK").run();
        } catch (soci::soci_error const&) {  // the failure ended the transaction already
        }
        throw;
    }
    if (!g.acquired) return grant{};
    // The name's lock was never seen taken, but an expired holder's waiters wait for it.
    if (marked) notify_release(ps.session, name);
    return g;
}

bool sqlite_dialect::release(pooled_session ps, std::string const& name, std::string const& owner,
                             std::int64_t token) const {
    auto& c = static_cast<lite_cache&>(cache(ps));
    auto* db = handle_of(ps);
    if (relax_release_) c.relaxed.start(db, relaxed_sql_).run();
    bool waited = false;
    bool deleted = false;
    std::exception_ptr failed;
    try {
        deleted = c.release.start(db, release_sql_)
                      .bind(":name", name)
                      .bind(":owner", owner)
                      .bind(":token", static_cast<long long>(token))
                      .run([&](sqlite3_stmt* st) { waited = sqlite3_column_int64(st, 0) != 0; });
    } catch (...) {
        failed = std::current_exception();
    }
    if (relax_release_) c.durable.start(db, durable_sql_).run();  // back to the URL's setting, whatever happened
    if (failed) std::rethrow_exception(failed);
    // Committed: ring. The listeners watch the file's inode; no file, nobody listens.
    if (waited) notify_release(ps.session, name);
    return deleted;
}

std::optional<renewal> sqlite_dialect::renew(pooled_session ps, std::string const& name, std::string const& owner,
                                             std::int64_t token, std::int64_t ttl_us) const {
    auto& c = static_cast<lite_cache&>(cache(ps));
    renewal r;
    bool got = c.renew.start(handle_of(ps), renew_sql_)
                   .bind(":ttl", static_cast<long long>(ttl_us))
                   .bind(":name", name)
                   .bind(":owner", owner)
                   .bind(":token", static_cast<long long>(token))
                   .run([&](sqlite3_stmt* st) {
                       r.expires_us = sqlite3_column_int64(st, 0);
                       r.now_us = sqlite3_column_int64(st, 1);
                   });
    if (!got) return std::nullopt;
    return r;
}

}  // namespace sqlock::detail::sqlite_engine
