// PostgreSQL: the row lock.
#include "dialect/postgresql/postgresql.hpp"

#include <array>
#include <cstdlib>
#include <memory>

namespace sqlock::detail::postgresql_engine {

namespace {

struct result_deleter {
    void operator()(PGresult* r) const noexcept { PQclear(r); }
};
using result_ptr = std::unique_ptr<PGresult, result_deleter>;

// A failed raw call, thrown as SOCI's backend throws it, with the SQLSTATE.
[[noreturn]] void fail(PGconn* conn, PGresult const* r) {
    std::string message = r != nullptr ? PQresultErrorMessage(r) : "";
    if (message.empty()) message = PQerrorMessage(conn);
    char const* code = r != nullptr ? PQresultErrorField(r, PG_DIAG_SQLSTATE) : nullptr;
    throw soci::postgresql_soci_error(message, code != nullptr ? code : "08006");
}

}  // namespace

bool postgresql_dialect::begin_and_lock(pooled_session ps, bool waits) const {
    auto& c = cache(ps);
    PGconn* conn = static_cast<soci::postgresql_session_backend*>(ps.session.get_backend())->conn_;
    auto const prepare = [&](bool& done, char const* name, char const* sql) {
        if (done) return;
        result_ptr r(PQprepare(conn, name, sql, 0, nullptr));
        if (PQresultStatus(r.get()) != PGRES_COMMAND_OK) fail(conn, r.get());
        done = true;
    };
    char const* const name = waits ? "sqlock_row_wait" : "sqlock_row_try";
    prepare(c.row_begin_prepared, "sqlock_row_begin", "BEGIN");
    prepare(waits ? c.row_wait_prepared : c.row_try_prepared, name, (waits ? wait_lock_sql_ : try_lock_sql_).c_str());
    std::array<char const*, 5> values{c.name.c_str(), c.owner.c_str(), c.idle.c_str(), c.probe.c_str(),
                                      c.lock_timeout.c_str()};
    // SOCI has no pipelining: BEGIN and the lock go out together, their answers are read after.
    if (PQenterPipelineMode(conn) != 1 ||
        PQsendQueryPrepared(conn, "sqlock_row_begin", 0, nullptr, nullptr, nullptr, 0) != 1 ||
        PQsendQueryPrepared(conn, name, waits ? 5 : 4, values.data(), nullptr, nullptr, 0) != 1 ||
        PQpipelineSync(conn) != 1) {
        (void)PQexitPipelineMode(conn);
        fail(conn, nullptr);
    }
    result_ptr error;
    bool locked = false;
    int query = 0, nulls = 0;  // which answer is read (0 BEGIN, 1 the lock); a null ends each one
    for (;;) {
        result_ptr r(PQgetResult(conn));
        if (!r) {
            if (PQstatus(conn) == CONNECTION_BAD || ++nulls > 1) break;
            ++query;
            continue;
        }
        nulls = 0;
        auto const status = PQresultStatus(r.get());
        if (status == PGRES_PIPELINE_SYNC) break;
        if (status == PGRES_FATAL_ERROR || status == PGRES_NONFATAL_ERROR || status == PGRES_BAD_RESPONSE) {
            if (!error) error = std::move(r);
        } else if (query == 1 && status == PGRES_TUPLES_OK && PQntuples(r.get()) == 1) {
            locked = true;
            c.locked = std::strtoll(PQgetvalue(r.get(), 0, 0), nullptr, 10);
        }
    }
    if (PQstatus(conn) == CONNECTION_BAD) fail(conn, error.get());
    if (PQexitPipelineMode(conn) != 1) fail(conn, nullptr);
    if (error) fail(conn, error.get());
    return locked;
}

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
    bool locked = false;
    if (wait.count() <= 0) {
        locked = begin_and_lock(ps, false);
    } else {
        // lock_timeout is an int of milliseconds.
        c.lock_timeout = std::to_string(std::min<long long>(wait.count(), INT32_MAX));
        try {
            locked = begin_and_lock(ps, true);
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
