// SQLite: one file, one writer at a time. Acquire is one INSERT ... ON
// CONFLICT statement in autocommit: a write statement takes the write lock
// before it reads (so no SQLITE_BUSY_SNAPSHOT), the token is the counter's next
// value read in that statement, and triggers of the schema store it in the
// counter. busy_timeout waits for the write lock and the store retries the
// SQLITE_BUSY that still comes back now and then.
// Database time is julianday('now'): the clock of whichever process runs the
// statement, so every process sharing the file must share one host clock.
#pragma once

#include "detail/dialect.hpp"

#include <sqlock/errors.hpp>

#include <soci/soci.h>
#include <soci/sqlite3/soci-sqlite3.h>

#include <sqlite3.h>

#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <exception>
#include <thread>

namespace sqlock::detail::sqlite_engine {

// julianday('now') is fixed for the duration of one sqlite3_step().
inline constexpr std::string_view now_us = "CAST((julianday('now') - 2440587.5) * 86400000000.0 AS INTEGER)";

// SOCI declares SQLite's API inside namespace sqlite_api.
using namespace sqlite_api;

inline sqlite3* handle_of(soci::session& s) {
    return static_cast<soci::sqlite3_session_backend*>(s.get_backend())->conn_;
}

[[noreturn]] inline void fail(sqlite3* db, char const* what) {
    throw_client_error(engine::sqlite, std::string("sqlite3 ") + what + ": " + sqlite3_errmsg(db),
                       sqlite3_extended_errcode(db));
}

// A statement prepared once on its connection (SOCI would prepare and finalize
// it at every call), reset after every use so that it never keeps a
// transaction open. Finalizing is local: it never waits on anything.
class lite_statement {
public:
    lite_statement() = default;
    lite_statement(lite_statement const&) = delete;
    lite_statement& operator=(lite_statement const&) = delete;
    ~lite_statement() { sqlite3_finalize(stmt_); }

    // Prepare (first use) and start a run: the caller binds, then steps.
    lite_statement& start(sqlite3* db, std::string const& sql) {
        db_ = db;
        if (stmt_ == nullptr &&
            sqlite3_prepare_v3(db, sql.c_str(), -1, SQLITE_PREPARE_PERSISTENT, &stmt_, nullptr) != SQLITE_OK)
            fail(db, "prepare");
        return *this;
    }
    lite_statement& bind(char const* param, std::string const& text) {
        if (sqlite3_bind_text(stmt_, index(param), text.data(), static_cast<int>(text.size()), SQLITE_STATIC) !=
            SQLITE_OK)
            fail(db_, "bind");
        return *this;
    }
    lite_statement& bind(char const* param, long long value) {
        if (sqlite3_bind_int64(stmt_, index(param), value) != SQLITE_OK) fail(db_, "bind");
        return *this;
    }
    // Run to completion (the implicit transaction of a write commits there);
    // true when it returned a row, whose columns are then read by `row`.
    template <class Row>
    bool run(Row&& row) {
        bool got = false;
        for (;;) {
            int rc = sqlite3_step(stmt_);
            if (rc == SQLITE_ROW) {
                if (!got) row(stmt_);
                got = true;
                continue;
            }
            if (rc != SQLITE_DONE) {
                sqlite3_reset(stmt_);
                fail(db_, "step");
            }
            sqlite3_reset(stmt_);
            return got;
        }
    }
    bool run() {
        return run([](sqlite3_stmt*) {});
    }

private:
    int index(char const* param) const {
        int i = sqlite3_bind_parameter_index(stmt_, param);
        if (i == 0) throw std::logic_error(std::string("sqlock: no parameter ") + param);
        return i;
    }
    sqlite3* db_ = nullptr;
    sqlite3_stmt* stmt_ = nullptr;
};

struct lite_cache final : statement_cache {
    lite_statement token, lock, mark, release, renew, relaxed, durable;
    // The read-write lock's shared lease, granted in one write transaction.
    lite_statement shared_lock, shared_rename;
    // The row lock's.
    lite_statement begin, commit, rollback, current_token, row_lock, now;
};

class sqlite_dialect final : public dialect {
public:
    sqlite_dialect(std::string const& prefix, store_options const& options);

    // ---- the engine driver (driver.cpp) ----
    sqlock::engine engine() const noexcept override { return engine::sqlite; }
    // Only the path goes to SOCI: it would run a synchronous= pragma before any
    // busy timeout is set, and fail at once while another process checkpoints.
    std::string connect_string(url_parts const& url) const override;
    void open(soci::session& s, std::string const& connect_string) const override;
    void read_server_answer(soci::session& s, std::string& version, std::string& comment) const override;
    void set_engine_wait(soci::session& s, std::chrono::milliseconds wait) const override;
    // BUSY after the whole busy_timeout: another connection holds the write lock
    // (a row lock's BEGIN IMMEDIATE, or a long writer) — the lock is busy.
    bool busy_is_lock_wait() const noexcept override { return true; }
    failure classify(soci::soci_error const& e, soci::session&) const override;
    std::string native_code(soci::soci_error const& e) const override;
    // The bell file next to the database (inotify, bell.hpp); null for a URL without a file of its own
    // or a directory where the bell cannot be made. A bell refused (a FIFO, a link, a file of another
    // owner planted there) is said once on std::clog and watched for again at the listener's backoff.
    std::unique_ptr<release_listener> listen(std::string const& connect_string, notify_fn on_notify) const override;
    // This store's listener watches the bell now: only then do its waiters mark rows.
    bool listening() const noexcept { return listening_.load(std::memory_order_acquire); }
    void set_listening(bool on) const noexcept { listening_.store(on, std::memory_order_release); }
    // Once per store, on std::clog: the bell is refused and this store's waiters poll.
    void bell_refused(std::string const& why) const noexcept;

    // ---- the schema (schema.cpp) ----
    // The triggers that keep the token counter are as necessary as the tables:
    // without them the acquire would hand the same token out again.
    std::vector<std::string> required_tables() const override;
    std::vector<std::pair<std::string, std::string>> added_columns() const override {
        auto columns = dialect::added_columns();
        columns.emplace_back("waiters", "INTEGER NOT NULL DEFAULT 0");
        return columns;
    }
    // In one write transaction: another process opening the file meanwhile sees
    // the whole schema or none of it, never a part it would call missing.
    void create_schema(soci::session& s) const override;

    // ---- the table lock (table_lock.cpp) ----
    // Granted only when RETURNING answers: this very statement inserted the row
    // or took it over, with the token it computed, never a row another wrote.
    // `waiting` and busy, while this store's listener watches the bell: the live row is marked (its
    // release will ring), in a second statement;
    // when that finds the row gone, the acquire is tried once more.
    grant acquire(pooled_session ps, std::string const& name, std::string const& owner, std::int64_t attempt,
                  std::int64_t ttl_us, bool waiting, bool /*retry*/) const override;
    // The grant of the name's lock and its rename to `reader` in one BEGIN IMMEDIATE transaction:
    // one write (and, at synchronous = FULL, one sync) instead of two, and no other connection ever
    // sees the name's lock taken by a reader. Busy and `waiting`: the live row is marked in that
    // same transaction, so no release can slip between the try and the mark.
    bool grants_shared_at_once() const noexcept override { return true; }
    grant acquire_shared(pooled_session ps, std::string const& name, std::string const& reader,
                         std::string const& owner, std::int64_t attempt, std::int64_t ttl_us, bool waiting,
                         bool retry) const override;
    // With synchronous = FULL the release alone commits at NORMAL, which in WAL
    // mode does not sync: lost in a power cut, a release only delays the next
    // holder until the row expires; the next durable commit syncs it anyway.
    bool release(pooled_session ps, std::string const& name, std::string const& owner,
                 std::int64_t token) const override;
    // Marks only while this store's listener watches the bell: a ring would reach nobody here.
    bool mark_watched(pooled_session ps, std::string const& name) const override {
        if (listening()) ps.session << mark_sql_ + " AND waiters = 0", soci::use(name, "name");
        return true;
    }
    // Touches the bell (driver.cpp: never through a link, never anything but a bell file). The
    // release rings when a waiter marked the row; the operator's force_release always, as
    // PostgreSQL's NOTIFYs always.
    void notify_release(soci::session&, std::string const&) const override { ring(); }
    // A cached statement that answered a row (UPDATE ... RETURNING) stays active, and its write
    // transaction open, until it is reset: reset it as soon as its row is read.
    void finish(soci::statement& st) const override {
        // (SOCI resets it again before its next execution: harmless.)
        auto* backend = static_cast<soci::sqlite3_statement_backend*>(st.get_backend());
        (void)sqlite3_reset(backend->stmt_);
    }
    std::optional<renewal> renew(pooled_session ps, std::string const& name, std::string const& owner,
                                 std::int64_t token, std::int64_t ttl_us) const override;

    // ---- the row lock (row_lock.cpp) ----
    // lock_row upserts it
    void ensure_row(soci::session&, std::string const&, std::chrono::milliseconds) const override {}
    // The token is drawn and committed here, before the holding transaction (a
    // second connection could not commit while this one holds the file).
    std::optional<grant> lock_row(pooled_session ps, std::string const& name, std::string const& owner,
                                  std::chrono::milliseconds, std::chrono::milliseconds wait,
                                  std::function<std::int64_t()> const&, bool& missing) const override;
    std::int64_t keep_row_lock(pooled_session ps, std::string const&, std::chrono::milliseconds) const override;
    void end_row_lock(pooled_session ps, bool commit) const override;

    // ---- the token counters (tokens.cpp) ----
    // No row locks: BEGIN IMMEDIATE takes the database's write lock, for every
    // name at once. A token drawn inside the holding transaction would be rolled
    // back by a crash and handed out again, so it is drawn and committed first;
    // the holding transaction then checks that nobody drew after us (else: busy).
    std::int64_t draw_token(pooled_session ps, std::string const& name) const override;

    // ---- the reaper and the operator's calls (admin.cpp) ----
    // SQLite has no DELETE inside a WITH: the deleted rows come back through
    // RETURNING and are summed here. One statement, one write transaction.
    reap_batch reap(soci::session& s, std::int64_t grace_us, std::optional<std::int64_t> max_age_us, int batch,
                    bool dry_run) const override;
    // No DELETE inside a WITH: the purge in steps (purge_tokens_stepwise), in one
    // write transaction (nobody writes in between).
    token_purge_batch purge_tokens(soci::session& s, std::int64_t horizon_us, int batch, bool dry_run) const override;

protected:
    std::unique_ptr<statement_cache> make_cache() const override { return std::make_unique<lite_cache>(); }
    std::string table_exists_sql() const override {
        return "SELECT COUNT(*) FROM sqlite_master WHERE type IN ('table', 'trigger') AND name = :t";
    }
    std::string now_sql() const override { return std::string(now_us); }
    std::string begin_write_sql() const override { return "BEGIN IMMEDIATE"; }
    std::string plus_ttl_sql(std::string const& timestamp) const override { return timestamp + " + :ttl"; }
    std::string epoch_us_sql(std::string const& column) const override { return column; }
    std::string greatest_sql(std::string const& a, std::string const& b) const override {
        return "max(" + a + ", " + b + ")";
    }
    std::string minus_sql(std::string const& timestamp, std::string const& param) const override {
        return "(" + timestamp + " - :" + param + ")";
    }

private:
    std::string token_sql_;
    std::string lock_sql_;
    std::string shared_lock_sql_;  // lock_sql_, answering the row's waiters flag too
    std::string shared_rename_sql_;
    std::string row_lock_sql_;
    std::string current_token_sql_;
    std::string keep_sql_;
    mutable std::string synchronous_ = "full";  // set with the connect string, before any open
    // The release's switch to NORMAL and back, when the URL's setting syncs every commit.
    mutable bool relax_release_ = true;
    mutable std::string durable_sql_ = "PRAGMA synchronous = full";
    std::string const relaxed_sql_ = "PRAGMA synchronous = NORMAL";
    std::string release_sql_;
    std::string mark_sql_;
    std::string renew_sql_;
    mutable std::string path_;
    // `<database>-<prefix>-bell`, touched by a release that a waiter marked; empty when the URL
    // names no file of its own (":memory:", a "file:" URI): waiters of other processes then poll.
    mutable std::string bell_path_;
    mutable std::atomic<bool> listening_{false};
    mutable std::atomic<bool> refusal_said_{false};
    void ring() const noexcept;
};

}  // namespace sqlock::detail::sqlite_engine
