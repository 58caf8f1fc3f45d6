// PostgreSQL: the whole acquire is one statement (a data-modifying CTE draws the
// token, INSERT ... ON CONFLICT DO UPDATE ... WHERE expired takes the row), so a
// busy lock raises no error in the server log and nothing to roll back.
#pragma once

#include "detail/dialect.hpp"

#include <sqlock/errors.hpp>

#include <soci/postgresql/soci-postgresql.h>
#include <soci/soci.h>

#include <libpq-fe.h>

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <string_view>
#include <thread>

namespace sqlock::detail::postgresql_engine {

/// The table lock's statements (statement_cache) and the row lock's, with the
/// buffers they are bound to.
struct pg_cache final : statement_cache {
    std::string idle, probe, lock_timeout;  // in: the holding transaction's settings
    long long locked = 0;                   // out: when the row was locked
    int rows = 0;                           // out
    std::optional<soci::statement> row_exists, row_record, row_keep, row_commit, row_rollback;
    bool row_begin_prepared = false, row_try_prepared = false, row_wait_prepared = false;  // libpq's own (lock_row)
};

class postgresql_dialect final : public dialect {
public:
    postgresql_dialect(std::string const& prefix, store_options const& options);

    // ---- the engine driver (driver.cpp) ----
    sqlock::engine engine() const noexcept override { return engine::postgresql; }
    std::string connect_string(url_parts const& url) const override;
    void open(soci::session& s, std::string const& connect_string) const override;
    void read_server_answer(soci::session& s, std::string& version, std::string& comment) const override;
    void check_pooling(soci::session& s, std::string const& connect_string, std::string_view declared,
                       std::string const& url) const override;
    int socket_of(soci::session& s) const override;
    idle_news read_idle(soci::session& s, bool hung_up) const override;
    std::unique_ptr<release_listener> listen(std::string const& connect_string, notify_fn on_notify) const override;
    failure classify(soci::soci_error const& e, soci::session& s) const override;
    std::string native_code(soci::soci_error const& e) const override;

    // ---- the schema (schema.cpp) ----
    std::vector<std::pair<std::string, std::string>> added_columns() const override;
    std::optional<std::string> relaxed_durability(soci::session& s) const override;
    // Services starting together would race on CREATE ... IF NOT EXISTS and log
    // unique violations from the catalog: one at a time, under an advisory lock.
    void create_schema(soci::session& s) const override;

    // ---- the table lock (table_lock.cpp) ----
    grant acquire(pooled_session s, std::string const& name, std::string const& owner, std::int64_t attempt,
                  std::int64_t ttl_us, bool waiting, bool retry) const override;
    bool release(pooled_session s, std::string const& name, std::string const& owner,
                 std::int64_t token) const override;
    bool mark_watched(pooled_session s, std::string const& name) const override {
        s.session
            << "UPDATE " + locks_ +
                   " SET waiters = true WHERE name = :name AND NOT waiters AND expires_at >= statement_timestamp()",
            soci::use(name, "name");
        return true;
    }
    void notify_release(soci::session& s, std::string const& name) const override {
        s << "SELECT 1 FROM pg_notify('" + channel() + "', :name)", soci::use(name, "name");
    }
    std::string unflushed_from_sql() const override {
        return " FROM (SELECT set_config('synchronous_commit', 'off', true)) AS unflushed";
    }

    // ---- the row lock (row_lock.cpp) ----
    void ensure_row(soci::session& s, std::string const& name, std::chrono::milliseconds wait) const override {
        // lock_timeout is an int of milliseconds, and 0 would mean no limit.
        std::string const ms = std::to_string(std::clamp<long long>(wait.count(), 1, INT32_MAX));
        s << ensure_row_sql_, soci::use(name, "name"), soci::use(ms, "wait");
    }
    std::optional<grant> lock_row(pooled_session ps, std::string const& name, std::string const& owner,
                                  std::chrono::milliseconds ttl, std::chrono::milliseconds wait,
                                  std::function<std::int64_t()> const& draw, bool& missing) const override;
    std::int64_t keep_row_lock(pooled_session ps, std::string const&, std::chrono::milliseconds ttl) const override;
    void end_row_lock(pooled_session ps, bool commit) const override;
    // BEGIN and the lock statement in one round trip; true with `locked` set when it locked the row.
    bool begin_and_lock(pooled_session ps, bool waits) const;

    // ---- the token counters (tokens.cpp) ----
    std::int64_t draw_token(pooled_session s, std::string const& name) const override;
    // One statement: the identity, the write for the present identity (if it has joined), and the
    // counter as the statement's snapshot saw it when the write did not win.
    member_write majority_write_or_read(soci::session& s, std::string const& name, std::int64_t token) const override;

    // ---- the reaper and the operator's calls (admin.cpp) ----
    // pg_stat_activity shows the sessions of our own role; a row-lock holder is
    // idle in a transaction that holds a lock on the rows table.
    std::vector<long_row_lock> long_row_locks(soci::session& s, std::chrono::milliseconds threshold) const override;

protected:
    std::unique_ptr<statement_cache> make_cache() const override { return std::make_unique<pg_cache>(); }
    std::string table_exists_sql() const override {
        return "SELECT CASE WHEN to_regclass(:t) IS NULL THEN 0 ELSE 1 END";
    }
    // statement_timestamp() is fixed for the statement and our connections are in
    // autocommit, so it never lags behind by a caller's transaction (ShedLock #3577).
    std::string now_sql() const override { return "statement_timestamp()"; }
    std::string waiters_marked_sql() const override { return "CASE WHEN waiters THEN 1 ELSE 0 END"; }
    std::string waiters_unmarked_sql() const override { return "false"; }
    std::string plus_ttl_sql(std::string const& timestamp) const override {
        return timestamp + " + CAST(:ttl AS double precision) * interval '1 microsecond'";
    }
    std::string epoch_us_sql(std::string const& column) const override {
        return "CAST(EXTRACT(EPOCH FROM " + column + ") * 1000000 AS bigint)";
    }
    std::string minus_sql(std::string const& timestamp, std::string const& param) const override {
        return "(" + timestamp + " - CAST(:" + param + " AS double precision) * interval '1 microsecond')";
    }
    // Rows a renewal or takeover is updating right now are left for the next pass.
    std::string skip_locked_sql() const override { return " FOR UPDATE SKIP LOCKED"; }
    // A semaphore's permit confirms the definition row under FOR SHARE (docs/coordination.md).
    std::string share_lock_sql() const override { return " FOR SHARE"; }
    std::string skip_held_rows_sql() const override { return " FOR UPDATE SKIP LOCKED"; }

private:
    [[nodiscard]] pg_cache& cache(pooled_session s) const { return static_cast<pg_cache&>(dialect::cache(s)); }
    // A statement without parameters or results, prepared on first use.
    static void run(std::optional<soci::statement>& st, soci::session& s, char const* sql) {
        if (!st) st.emplace((s.prepare << sql));
        st->execute(true);
    }
    std::string acquire_sql_;
    std::string acquire_waiting_sql_;
    std::string draw_sql_;
    std::string record_token_sql_;
    std::string release_sql_;
    std::string ensure_row_sql_;
    std::string try_lock_sql_;   // $1 name, $2 owner, $3 idle limit, $4 probe interval
    std::string wait_lock_sql_;  // the same and $5 lock_timeout
    std::string exists_sql_;
    std::string keep_sql_;
};

}  // namespace sqlock::detail::postgresql_engine
