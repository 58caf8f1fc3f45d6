// SQLite: one file, one writer at a time. Acquire is one INSERT ... ON
// CONFLICT statement in autocommit: a write statement takes the write lock
// before it reads (so no SQLITE_BUSY_SNAPSHOT), the token is the counter's next
// value read in that statement, and triggers of the schema store it in the
// counter. busy_timeout waits for the write lock and the store retries the
// SQLITE_BUSY that still comes back now and then.
// Database time is julianday('now'): the clock of whichever process runs the
// statement, so every process sharing the file must share one host clock.
#include "detail/dialect.hpp"

#include <sqlock/errors.hpp>

#include <soci/soci.h>
#include <soci/sqlite3/soci-sqlite3.h>

#include <sqlite3.h>

#include <algorithm>
#include <climits>
#include <exception>
#include <thread>

namespace sqlock::detail {
namespace {

// julianday('now') is fixed for the duration of one sqlite3_step().
constexpr std::string_view now_us = "CAST((julianday('now') - 2440587.5) * 86400000000.0 AS INTEGER)";

// SOCI declares SQLite's API inside namespace sqlite_api.
using namespace sqlite_api;

sqlite3* handle_of(soci::session& s) { return static_cast<soci::sqlite3_session_backend*>(s.get_backend())->conn_; }

[[noreturn]] void fail(sqlite3* db, char const* what) {
    throw soci::sqlite3_soci_error(std::string("sqlite3 ") + what + ": " + sqlite3_errmsg(db), sqlite3_extended_errcode(db));
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
        if (stmt_ == nullptr && sqlite3_prepare_v3(db, sql.c_str(), -1, SQLITE_PREPARE_PERSISTENT, &stmt_, nullptr) != SQLITE_OK)
            fail(db, "prepare");
        return *this;
    }
    lite_statement& bind(char const* param, std::string const& text) {
        if (sqlite3_bind_text(stmt_, index(param), text.data(), static_cast<int>(text.size()), SQLITE_STATIC) != SQLITE_OK)
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
    lite_statement token, lock, release, renew, relaxed, durable;
    // The row lock's.
    lite_statement begin, commit, rollback, current_token, row_lock, now;
};

class sqlite_dialect final : public dialect {
public:
    sqlite_dialect(std::string const& prefix, store_options const& options) : dialect(prefix, options) {
        auto const now = std::string(now_us);
        token_sql_ = "INSERT INTO " + tokens_ + " (name, token) VALUES (:name, " + first_token_sql() + ")"
                     " ON CONFLICT (name) DO UPDATE SET token = token + 1 RETURNING token";
        // The token: the counter's next value, or a new counter's first (see the
        // triggers in schema/sqlite.sql, which store it).
        lock_sql_ = "INSERT INTO " + locks_ + " (name, owner, token, holds, attempt, created_at, expires_at)"
                    " VALUES (:name, :owner, COALESCE((SELECT c.token + 1 FROM " + tokens_ + " c WHERE c.name = :name), " +
                    first_token_sql() + "), 1, :attempt, " + now + ", " + now + " + :ttl)"
                    " ON CONFLICT (name) DO UPDATE SET owner = excluded.owner, token = excluded.token, holds = 1,"
                    " attempt = excluded.attempt, created_at = excluded.created_at, expires_at = excluded.expires_at"
                    " WHERE expires_at < " + now +
                    " RETURNING token, created_at, expires_at";
        release_sql_ = "DELETE FROM " + locks_ + " WHERE name = :name AND owner = :owner AND token = :token";
        renew_sql_ = "UPDATE " + locks_ + " SET expires_at = " + now + " + :ttl"
                     " WHERE name = :name AND owner = :owner AND token = :token AND expires_at >= " + now +
                     " RETURNING expires_at, " + now;
        current_token_sql_ = "SELECT token FROM " + tokens_ + " WHERE name = :name";
        keep_sql_ = "SELECT " + now;
        row_lock_sql_ = "INSERT INTO " + prefix_ + "_rows (name, token, owner, locked_at, created_at)"
                        " VALUES (:name, :token, :owner, " + now + ", " + now + ")"
                        " ON CONFLICT (name) DO UPDATE SET token = excluded.token,"
                        " owner = excluded.owner, locked_at = excluded.locked_at RETURNING locked_at";
    }

    sqlock::engine engine() const noexcept override { return engine::sqlite; }

    // Only the path goes to SOCI: it would run a synchronous= pragma before any
    // busy timeout is set, and fail at once while another process checkpoints.
    std::string connect_string(url_parts const& url) const override {
        auto sync = url.params.find("synchronous");
        synchronous_ = sync == url.params.end() ? "full" : sync->second;
        relax_release_ = synchronous_ != "normal" && synchronous_ != "off" && synchronous_ != "1" && synchronous_ != "0";
        durable_sql_ = "PRAGMA synchronous = " + synchronous_;
        path_ = url.path;
        return "db=\"" + url.path + "\"";
    }

    void open(soci::session& s, std::string const& connect_string) const override {
        s.open(*soci::factory_sqlite3(), connect_string);
        s << "PRAGMA busy_timeout = " + std::to_string(options_.lock_wait_timeout.count());
        // Switching to WAL needs the file to itself for a moment; busy_timeout
        // does not always cover it, so retry SQLITE_BUSY within the same bound.
        auto const until = std::chrono::steady_clock::now() + options_.lock_wait_timeout;
        for (;;) {
            try {
                std::string mode;
                s << "PRAGMA journal_mode = WAL", soci::into(mode);
                // The pragma answers with the mode it could set: an in-memory database
                // or a file system without shared memory stays in another mode.
                if (mode != "wal")
                    throw usage_error("sqlock: the SQLite database " + path_ + " cannot use WAL mode (journal_mode "
                                      "stayed '" + mode + "'): put the file on a local file system that supports "
                                      "shared memory (not an in-memory database or a network share)");
                s << "PRAGMA synchronous = " + synchronous_;
                return;
            } catch (soci::soci_error const& e) {
                auto* lite = dynamic_cast<soci::sqlite3_soci_error const*>(&e);
                bool busy = lite != nullptr && ((lite->result() & 0xff) == 5 || (lite->result() & 0xff) == 6);
                if (!busy || std::chrono::steady_clock::now() >= until) throw;
                std::this_thread::sleep_for(std::chrono::milliseconds(5));  // busy: wait a moment, then retry
            }
        }
    }

    // Granted only when RETURNING answers: this very statement inserted the row
    // or took it over, with the token it computed, never a row another wrote.
    grant acquire(pooled_session ps, std::string const& name, std::string const& owner, std::int64_t attempt,
                  std::int64_t ttl_us, bool /*waiting*/, bool /*retry*/) const override {
        auto& c = static_cast<lite_cache&>(cache(ps));
        grant g;
        g.acquired = c.lock.start(handle_of(ps), lock_sql_)
                         .bind(":name", name)
                         .bind(":owner", owner)
                         .bind(":attempt", static_cast<long long>(attempt))
                         .bind(":ttl", static_cast<long long>(ttl_us))
                         .run([&](sqlite3_stmt* st) {
                             g.token = sqlite3_column_int64(st, 0);
                             g.created_us = sqlite3_column_int64(st, 1);
                             g.expires_us = sqlite3_column_int64(st, 2);
                         });
        return g.acquired ? g : grant{};
    }

    // With synchronous = FULL the release alone commits at NORMAL, which in WAL
    // mode does not sync: lost in a power cut, a release only delays the next
    // holder until the row expires; the next durable commit syncs it anyway.
    bool release(pooled_session ps, std::string const& name, std::string const& owner,
                 std::int64_t token) const override {
        auto& c = static_cast<lite_cache&>(cache(ps));
        auto* db = handle_of(ps);
        if (relax_release_) c.relaxed.start(db, relaxed_sql_).run();
        bool deleted = false;
        std::exception_ptr failed;
        try {
            c.release.start(db, release_sql_)
                .bind(":name", name)
                .bind(":owner", owner)
                .bind(":token", static_cast<long long>(token))
                .run();
            deleted = sqlite3_changes(db) > 0;
        } catch (...) {
            failed = std::current_exception();
        }
        if (relax_release_) c.durable.start(db, durable_sql_).run();  // back to the URL's setting, whatever happened
        if (failed) std::rethrow_exception(failed);
        return deleted;
    }

    std::optional<renewal> renew(pooled_session ps, std::string const& name, std::string const& owner,
                                 std::int64_t token, std::int64_t ttl_us) const override {
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

    // SQLite has no DELETE inside a WITH: the deleted rows come back through
    // RETURNING and are summed here. One statement, one write transaction.
    reap_batch reap(soci::session& s, std::int64_t grace_us, std::optional<std::int64_t> max_age_us, int batch,
                    bool dry_run) const override {
        long long grace = grace_us, age = max_age_us.value_or(0), limit = batch;
        std::string const now = now_sql();
        std::string cond = "expires_at < " + minus_sql(now, "grace");
        if (max_age_us) cond = "(" + cond + " OR created_at < " + minus_sql(now, "age") + ")";
        std::string const live = "CASE WHEN expires_at >= " + now + " THEN 1 ELSE 0 END";
        std::string const pick =
            "SELECT name FROM " + locks_ + " WHERE " + cond + " ORDER BY expires_at LIMIT :lim";
        std::string const sql = dry_run ? "SELECT expires_at, " + live + " FROM " + locks_ + " WHERE name IN (" + pick + ")"
                                        : "DELETE FROM " + locks_ + " WHERE name IN (" + pick + ") AND " + cond +
                                              " RETURNING expires_at, " + live;
        // Vectors sized to the batch take every returned row in one fetch (at least
        // two: SOCI 4.0 fetches nothing into vectors of size 1 here).
        auto const size = std::max<std::size_t>(2, static_cast<std::size_t>(batch));
        std::vector<long long> expires(size);
        std::vector<int> live_flags(size);
        soci::statement st = max_age_us ? (s.prepare << sql, soci::use(grace, "grace"), soci::use(age, "age"),
                                           soci::use(limit, "lim"), soci::into(expires), soci::into(live_flags))
                                        : (s.prepare << sql, soci::use(grace, "grace"), soci::use(limit, "lim"),
                                           soci::into(expires), soci::into(live_flags));
        if (!st.execute(true)) {
            expires.clear();
            live_flags.clear();
        }
        reap_batch r;
        for (std::size_t i = 0; i < expires.size(); ++i) {
            ++r.rows;
            r.live_purged += live_flags[i];
            r.oldest_expiry_us = std::min<std::int64_t>(r.oldest_expiry_us.value_or(expires[i]), expires[i]);
        }
        return r;
    }


    // No DELETE inside a WITH: measure the batch, raise the floor to its highest
    // token, delete it, all in one write transaction (nobody writes in between).
    token_purge_batch purge_tokens(soci::session& s, std::int64_t horizon_us, int batch,
                                   bool dry_run) const override {
        long long horizon = horizon_us, limit = batch, picked = 0, highest = 0;
        soci::indicator highest_ind = soci::i_null;
        std::string const pick =
            "SELECT name FROM " + tokens_ + " WHERE " + purgeable_tokens_sql() + " ORDER BY token LIMIT :lim";
        s << "BEGIN IMMEDIATE";
        try {
            s << "SELECT COUNT(*), MAX(token) FROM " + tokens_ + " WHERE name IN (" + pick + ")",
                soci::use(horizon, "horizon"), soci::use(limit, "lim"), soci::into(picked),
                soci::into(highest, highest_ind);
            long long deleted = 0;
            if (!dry_run && picked > 0 && highest_ind == soci::i_ok) {
                s << "INSERT INTO " + tokens_ + " (name, token) VALUES ('', :highest)"
                     " ON CONFLICT (name) DO UPDATE SET token = max(token, excluded.token)",
                    soci::use(highest, "highest");
                soci::statement st = (s.prepare << "DELETE FROM " + tokens_ + " WHERE name IN (" + pick +
                                                       ") AND token <= :highest",
                                      soci::use(horizon, "horizon"), soci::use(limit, "lim"),
                                      soci::use(highest, "highest"));
                st.execute(true);
                deleted = st.get_affected_rows();
            }
            s << (dry_run ? "ROLLBACK" : "COMMIT");
            return {dry_run ? picked : deleted, picked};
        } catch (...) {
            try {
                s << "ROLLBACK";
            } catch (...) {  // no transaction left to roll back
            }
            throw;
        }
    }

    // The triggers that keep the token counter are as necessary as the tables:
    // without them the acquire would hand the same token out again.
    std::vector<std::string> required_tables() const override {
        return {locks_, tokens_, fences_, prefix_ + "_rows", majority_table(), locks_ + "_tok_ins", locks_ + "_tok_upd"};
    }

    void ensure_row(soci::session&, std::string const&) const override {}  // lock_row upserts it

    // No row locks: BEGIN IMMEDIATE takes the database's write lock, for every
    // name at once. A token drawn inside the holding transaction would be rolled
    // back by a crash and handed out again, so it is drawn and committed first;
    // the holding transaction then checks that nobody drew after us (else: busy).
    std::int64_t draw_token(pooled_session ps, std::string const& name) const override {
        auto& c = static_cast<lite_cache&>(cache(ps));
        long long token = 0;
        c.token.start(handle_of(ps), token_sql_).bind(":name", name).run([&](sqlite3_stmt* st) {
            token = sqlite3_column_int64(st, 0);
        });
        return token;
    }

    void set_engine_wait(soci::session& s, std::chrono::milliseconds wait) const override {
        auto* backend = static_cast<soci::sqlite3_session_backend*>(s.get_backend());
        if (backend != nullptr && backend->conn_ != nullptr)
            sqlite3_busy_timeout(backend->conn_, static_cast<int>(std::clamp<long long>(wait.count(), 0, INT32_MAX)));
    }

    // BUSY after the whole busy_timeout: another connection holds the write lock
    // (a row lock's BEGIN IMMEDIATE, or a long writer) — the lock is busy.
    bool busy_is_lock_wait() const noexcept override { return true; }

    // The token is drawn and committed here, before the holding transaction (a
    // second connection could not commit while this one holds the file).
    std::optional<grant> lock_row(pooled_session ps, std::string const& name, std::string const& owner,
                                  std::chrono::milliseconds, std::chrono::milliseconds wait,
                                  std::function<std::int64_t()> const&, bool& missing) const override {
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

    std::int64_t keep_row_lock(pooled_session ps, std::string const&, std::chrono::milliseconds) const override {
        auto& c = static_cast<lite_cache&>(cache(ps));
        long long now = 0;
        c.now.start(handle_of(ps), keep_sql_).run([&](sqlite3_stmt* st) { now = sqlite3_column_int64(st, 0); });
        return now;
    }

    void end_row_lock(pooled_session ps, bool commit) const override {
        auto& c = static_cast<lite_cache&>(cache(ps));
        auto* db = handle_of(ps);
        try {
            (commit ? c.commit.start(db, "COMMIT") : c.rollback.start(db, "ROLLBACK")).run();
        } catch (soci::soci_error const&) {
            if (commit) throw;  // a ROLLBACK without a transaction (BEGIN was busy) is fine
        }
        set_engine_wait(ps.session, options_.lock_wait_timeout);
    }

    failure classify(soci::soci_error const& e, soci::session&) const override {
        auto* lite = dynamic_cast<soci::sqlite3_soci_error const*>(&e);
        std::string_view what = e.what();
        if (what.find("no such table") != std::string_view::npos) return failure::schema;
        if (lite == nullptr) return failure::other;
        switch (lite->result() & 0xff) {
            case 5:  // SQLITE_BUSY
            case 6:  // SQLITE_LOCKED
                return failure::transient;
            case 14:  // SQLITE_CANTOPEN
                return failure::connection;
            case 8:  // SQLITE_READONLY: the file (or its directory) may not be written
                return failure::read_only;
            case 23:  // SQLITE_AUTH: an authorizer refused the statement
                return failure::permission;
            default: return failure::other;
        }
    }

    std::string native_code(soci::soci_error const& e) const override {
        if (auto* lite = dynamic_cast<soci::sqlite3_soci_error const*>(&e)) return std::to_string(lite->result());
        return {};
    }

protected:
    std::unique_ptr<statement_cache> make_cache() const override { return std::make_unique<lite_cache>(); }

    std::string table_exists_sql() const override {
        return "SELECT COUNT(*) FROM sqlite_master WHERE type IN ('table', 'trigger') AND name = :t";
    }
    std::string now_sql() const override { return std::string(now_us); }
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
    std::string row_lock_sql_;
    std::string current_token_sql_;
    std::string keep_sql_;
    mutable std::string synchronous_ = "full";  // set with the connect string, before any open
    // The release's switch to NORMAL and back, when the URL's setting syncs every commit.
    mutable bool relax_release_ = true;
    mutable std::string durable_sql_ = "PRAGMA synchronous = full";
    std::string const relaxed_sql_ = "PRAGMA synchronous = NORMAL";
    std::string release_sql_;
    std::string renew_sql_;
    mutable std::string path_;
};

}  // namespace

std::unique_ptr<dialect> make_sqlite_dialect(std::string const& prefix, store_options const& options) {
    return std::make_unique<sqlite_dialect>(prefix, options);
}

}  // namespace sqlock::detail
