// sqlock reliability battery — the ground-truth audit of a lock table.
//
// install_audit() adds to a database, for one table prefix, a table
// `<prefix>_audit(seq, lock, owner, token, kind, db_time, expires_at)` and triggers on
// `<prefix>_locks` that write one audit row per change of a lock row, in the same transaction
// as the change (the library knows nothing of them):
//   AFTER INSERT                      -> grant
//   AFTER UPDATE, token changed       -> takeover (the new row's values)
//   AFTER UPDATE, expires_at changed  -> renew
//   AFTER UPDATE, only holds changed  -> hold
//   AFTER DELETE                      -> delete (the deleted row's values)
//   BEFORE UPDATE, name changed       -> delete (the old name's row) and grant (the new name's, same token): a
//                                        reader of an rw lock renames its grant of X to a row of its own
//                                        (DESIGN-22); the AFTER UPDATE row may follow as a renew or hold of it
// (an UPDATE that changes none of these, e.g. PostgreSQL's waiters flag, writes nothing).
// db_time is the database's clock when the trigger runs, after the statement has waited for
// any row lock: PostgreSQL clock_timestamp(), MariaDB SYSDATE(6), SQLite julianday('now') (fixed
// for one sqlite3_step, the lock statement's own time). A statement-start time would date a grant
// that waited for a release before that release. A renewal is the exception: its db_time is the
// time its statement compared expires_at with and extended it from (PostgreSQL
// statement_timestamp(), MariaDB NOW(6) of the UPDATE), so that K1's "renewed after expiry" check
// judges the renewal by the time the library's own condition used, not by a later clock reading. seq is the database's
// own order of the changes (per lock name the changes conflict on its row or unique key, so seq order is their commit
// order).
//
// install_row_audit() adds, for the row lock (row_locker), triggers on `<prefix>_rows` that write
// into the same audit table when a holder records its grant (token, owner, locked_at), inside the
// holding transaction: the audit row commits with the lease's release (COMMIT) and vanishes with
// a lease that was rolled back (lost, or its process killed), like the lease itself.
//   PostgreSQL: AFTER UPDATE OF token            -> grant  (db_time clock_timestamp())
//               deferred constraint trigger,
//               fired at the holder's COMMIT     -> delete (the release; db_time clock_timestamp()
//                                                   at commit)
//               expires_at: row_audit_no_expiry, as a row lock never expires in database time: it
//               ends at its commit. K1 then checks real intervals [grant, commit) per lock.
//   MariaDB:    AFTER UPDATE                     -> takeover (SYSDATE(6))
//   SQLite:     AFTER INSERT / AFTER UPDATE      -> grant / takeover (julianday('now'))
//               expires_at: the row's locked_at. Neither engine can run a trigger at COMMIT, so
//               each grant is a point: K1 only sees the grants in time order there; that a grant
//               came after the previous holder began its release is checked by joining the audit
//               with the history (row_grants_follow_releases in battery_harness.hpp).
// Every audited grant carries the token recorded with it, so K7 reads the row lock's tokens from
// the database's own record (a repeated token is audited too: the triggers don't compare tokens).
//
// dump_audit() reads the audit back as checkers.hpp's audit_rows (times in µs since the Unix
// epoch, UTC); lock_table_rows() reads what is left in `<prefix>_locks` for K8.
// Installed by the harness only, on tables of the run's own prefix; drop_audit() removes it.
#pragma once

#include "checkers.hpp"

#include <sqlock/store.hpp>

#include <soci/soci.h>

#include <cstdint>
#include <fstream>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

namespace sqlock_battery {

/// The name of the lock-time column in microseconds since the Unix epoch, as SQL.
inline std::string audit_us_sql(sqlock::engine e, std::string const& col) {
    switch (e) {
        case sqlock::engine::postgresql: return "CAST(floor(extract(epoch FROM " + col + ") * 1000000) AS BIGINT)";
        case sqlock::engine::mysql: return "TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', " + col + ")";
        case sqlock::engine::sqlite: return col;  // the SQLite schema stores µs since the epoch
    }
    return col;
}

/// The database's now in µs since the Unix epoch, as SQL.
inline std::string audit_now_us_sql(sqlock::engine e) {
    switch (e) {
        case sqlock::engine::postgresql: return audit_us_sql(e, "clock_timestamp()");
        case sqlock::engine::mysql: return audit_us_sql(e, "SYSDATE(6)");
        case sqlock::engine::sqlite: return "CAST((julianday('now') - 2440587.5) * 86400000000.0 AS INTEGER)";
    }
    return {};
}

/// The statements that install the audit of `<prefix>_locks` (run each on its own).
inline std::vector<std::string> audit_ddl(sqlock::engine e, std::string const& prefix) {
    std::string const locks = prefix + "_locks";
    std::string const audit = prefix + "_audit";
    std::vector<std::string> out;
    switch (e) {
        case sqlock::engine::postgresql: {
            out.push_back("CREATE TABLE IF NOT EXISTS " + audit +
                          " (seq bigserial PRIMARY KEY, \"lock\" text COLLATE \"C\" NOT NULL, owner text NOT NULL,"
                          " token bigint NOT NULL, kind text NOT NULL, db_time timestamptz NOT NULL,"
                          " expires_at timestamptz NOT NULL)");
            std::string const ins =
                "INSERT INTO " + audit + " (\"lock\", owner, token, kind, db_time, expires_at) VALUES ";
            out.push_back("CREATE OR REPLACE FUNCTION " + audit +
                          "_fn() RETURNS trigger LANGUAGE plpgsql AS $f$\n"
                          "BEGIN\n"
                          "  IF TG_OP = 'INSERT' THEN\n"
                          "    " +
                          ins +
                          "(NEW.name, NEW.owner, NEW.token, 'grant', clock_timestamp(), NEW.expires_at);\n"
                          "  ELSIF TG_OP = 'UPDATE' THEN\n"
                          "    IF NEW.token <> OLD.token THEN\n"
                          "      " +
                          ins +
                          "(NEW.name, NEW.owner, NEW.token, 'takeover', clock_timestamp(), NEW.expires_at);\n"
                          "    ELSIF NEW.expires_at <> OLD.expires_at THEN\n"
                          "      " +
                          ins +
                          "(NEW.name, NEW.owner, NEW.token, 'renew', statement_timestamp(), NEW.expires_at);\n"
                          "    ELSIF NEW.holds <> OLD.holds THEN\n"
                          "      " +
                          ins +
                          "(NEW.name, NEW.owner, NEW.token, 'hold', clock_timestamp(), NEW.expires_at);\n"
                          "    END IF;\n"
                          "  ELSE\n"
                          "    " +
                          ins +
                          "(OLD.name, OLD.owner, OLD.token, 'delete', clock_timestamp(), OLD.expires_at);\n"
                          "  END IF;\n"
                          "  RETURN NULL;\n"
                          "END\n$f$");
            out.push_back("DROP TRIGGER IF EXISTS " + audit + "_trg ON " + locks);
            out.push_back("CREATE TRIGGER " + audit + "_trg AFTER INSERT OR UPDATE OR DELETE ON " + locks +
                          " FOR EACH ROW EXECUTE FUNCTION " + audit + "_fn()");
            out.push_back("CREATE OR REPLACE FUNCTION " + audit +
                          "_rnm_fn() RETURNS trigger LANGUAGE plpgsql AS $f$\n"
                          "BEGIN\n"
                          "  " +
                          ins + "(OLD.name, OLD.owner, OLD.token, 'delete', clock_timestamp(), OLD.expires_at);\n  " +
                          ins +
                          "(NEW.name, NEW.owner, NEW.token, 'grant', clock_timestamp(), NEW.expires_at);\n"
                          "  RETURN NEW;\n"
                          "END\n$f$");
            out.push_back("DROP TRIGGER IF EXISTS " + audit + "_rnm ON " + locks);
            out.push_back("CREATE TRIGGER " + audit + "_rnm BEFORE UPDATE ON " + locks +
                          " FOR EACH ROW WHEN (OLD.name IS DISTINCT FROM NEW.name) EXECUTE FUNCTION " + audit +
                          "_rnm_fn()");
            break;
        }
        case sqlock::engine::mysql: {
            out.push_back("CREATE TABLE IF NOT EXISTS " + audit +
                          " (seq BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY, `lock` VARBINARY(255) NOT NULL,"
                          " owner VARBINARY(255) NOT NULL, token BIGINT NOT NULL, kind VARCHAR(16) NOT NULL,"
                          " db_time DATETIME(6) NOT NULL, expires_at DATETIME(6) NOT NULL) ENGINE = InnoDB");
            std::string const ins =
                "INSERT INTO " + audit + " (`lock`, owner, token, kind, db_time, expires_at) VALUES ";
            out.push_back("DROP TRIGGER IF EXISTS " + audit + "_ins");
            out.push_back("CREATE TRIGGER " + audit + "_ins AFTER INSERT ON " + locks + " FOR EACH ROW " + ins +
                          "(NEW.name, NEW.owner, NEW.token, 'grant', SYSDATE(6), NEW.expires_at)");
            out.push_back("DROP TRIGGER IF EXISTS " + audit + "_upd");
            out.push_back("CREATE TRIGGER " + audit + "_upd AFTER UPDATE ON " + locks +
                          " FOR EACH ROW BEGIN\n"
                          "  IF NEW.token <> OLD.token THEN\n"
                          "    " +
                          ins +
                          "(NEW.name, NEW.owner, NEW.token, 'takeover', SYSDATE(6), NEW.expires_at);\n"
                          "  ELSEIF NEW.expires_at <> OLD.expires_at THEN\n"
                          "    " +
                          ins +
                          "(NEW.name, NEW.owner, NEW.token, 'renew', NOW(6), NEW.expires_at);\n"
                          "  ELSEIF NEW.holds <> OLD.holds THEN\n"
                          "    " +
                          ins +
                          "(NEW.name, NEW.owner, NEW.token, 'hold', SYSDATE(6), NEW.expires_at);\n"
                          "  END IF;\n"
                          "END");
            out.push_back("DROP TRIGGER IF EXISTS " + audit + "_del");
            out.push_back("CREATE TRIGGER " + audit + "_del AFTER DELETE ON " + locks + " FOR EACH ROW " + ins +
                          "(OLD.name, OLD.owner, OLD.token, 'delete', SYSDATE(6), OLD.expires_at)");
            out.push_back("DROP TRIGGER IF EXISTS " + audit + "_rnm");
            out.push_back("CREATE TRIGGER " + audit + "_rnm BEFORE UPDATE ON " + locks +
                          " FOR EACH ROW BEGIN\n"
                          "  IF NEW.name <> OLD.name THEN\n"
                          "    " +
                          ins +
                          "(OLD.name, OLD.owner, OLD.token, 'delete', SYSDATE(6), OLD.expires_at);\n"
                          "    " +
                          ins +
                          "(NEW.name, NEW.owner, NEW.token, 'grant', SYSDATE(6), NEW.expires_at);\n"
                          "  END IF;\n"
                          "END");
            break;
        }
        case sqlock::engine::sqlite: {
            std::string const now = audit_now_us_sql(e);
            out.push_back(
                "CREATE TABLE IF NOT EXISTS " + audit +
                " (seq INTEGER PRIMARY KEY AUTOINCREMENT, \"lock\" TEXT NOT NULL, owner TEXT NOT NULL,"
                " token BIGINT NOT NULL, kind TEXT NOT NULL, db_time BIGINT NOT NULL, expires_at BIGINT NOT NULL)");
            std::string const ins =
                "INSERT INTO " + audit + " (\"lock\", owner, token, kind, db_time, expires_at) VALUES ";
            auto trigger = [&](std::string const& suffix, std::string const& when, std::string const& values) {
                out.push_back("DROP TRIGGER IF EXISTS " + audit + "_" + suffix);
                out.push_back("CREATE TRIGGER " + audit + "_" + suffix + " " + when + " BEGIN " + ins + values +
                              "; END");
            };
            trigger("ins", "AFTER INSERT ON " + locks,
                    "(NEW.name, NEW.owner, NEW.token, 'grant', " + now + ", NEW.expires_at)");
            trigger("tko", "AFTER UPDATE ON " + locks + " WHEN NEW.token <> OLD.token",
                    "(NEW.name, NEW.owner, NEW.token, 'takeover', " + now + ", NEW.expires_at)");
            trigger("ren",
                    "AFTER UPDATE ON " + locks + " WHEN NEW.token = OLD.token AND NEW.expires_at <> OLD.expires_at",
                    "(NEW.name, NEW.owner, NEW.token, 'renew', " + now + ", NEW.expires_at)");
            trigger("hld",
                    "AFTER UPDATE ON " + locks +
                        " WHEN NEW.token = OLD.token AND NEW.expires_at = OLD.expires_at AND NEW.holds <> OLD.holds",
                    "(NEW.name, NEW.owner, NEW.token, 'hold', " + now + ", NEW.expires_at)");
            trigger("del", "AFTER DELETE ON " + locks,
                    "(OLD.name, OLD.owner, OLD.token, 'delete', " + now + ", OLD.expires_at)");
            out.push_back("DROP TRIGGER IF EXISTS " + audit + "_rnm");
            out.push_back("CREATE TRIGGER " + audit + "_rnm BEFORE UPDATE OF name ON " + locks +
                          " WHEN NEW.name <> OLD.name BEGIN " + ins + "(OLD.name, OLD.owner, OLD.token, 'delete', " +
                          now + ", OLD.expires_at); " + ins + "(NEW.name, NEW.owner, NEW.token, 'grant', " + now +
                          ", NEW.expires_at); END");
            break;
        }
    }
    return out;
}

/// Installs the audit of `<prefix>_locks` (which must exist: open a store with create_schema first).
inline void install_audit(soci::session& s, sqlock::engine e, std::string const& prefix) {
    for (auto const& sql : audit_ddl(e, prefix)) s << sql;
}

inline void drop_row_audit(soci::session& s, sqlock::engine e, std::string const& prefix);

/// Removes the audit's triggers (the row lock's too), function and table.
inline void drop_audit(soci::session& s, sqlock::engine e, std::string const& prefix) {
    std::string const audit = prefix + "_audit";
    drop_row_audit(s, e, prefix);
    switch (e) {
        case sqlock::engine::postgresql:
            s << "DROP TRIGGER IF EXISTS " + audit + "_trg ON " + prefix + "_locks";
            s << "DROP FUNCTION IF EXISTS " + audit + "_fn()";
            s << "DROP FUNCTION IF EXISTS " + audit + "_rnm_fn() CASCADE";
            break;
        case sqlock::engine::mysql:
        case sqlock::engine::sqlite:
            for (auto const* t : {"_ins", "_upd", "_del", "_tko", "_ren", "_hld", "_rnm"})
                s << "DROP TRIGGER IF EXISTS " + audit + t;
            break;
    }
    s << "DROP TABLE IF EXISTS " + audit;
}

/// The audit in seq order; `db` labels the database (majority runs audit every member).
inline std::vector<audit_row> dump_audit(soci::session& s, sqlock::engine e, std::string const& prefix,
                                         std::string const& db = {}) {
    std::string const q = e == sqlock::engine::mysql ? "`lock`" : "\"lock\"";
    soci::rowset<soci::row> rows =
        (s.prepare << "SELECT seq, " + q + ", owner, token, kind, " + audit_us_sql(e, "db_time") + ", " +
                          audit_us_sql(e, "expires_at") + " FROM " + prefix + "_audit ORDER BY seq");
    std::vector<audit_row> out;
    for (auto const& r : rows) {
        audit_row a;
        auto num = [&](std::size_t i) -> std::int64_t {
            switch (r.get_properties(i).get_data_type()) {
                case soci::dt_integer: return r.get<int>(i);
                case soci::dt_long_long: return r.get<long long>(i);
                case soci::dt_unsigned_long_long: return static_cast<std::int64_t>(r.get<unsigned long long>(i));
                case soci::dt_double: return static_cast<std::int64_t>(r.get<double>(i));
                case soci::dt_string: return std::stoll(r.get<std::string>(i));
                default: throw std::runtime_error("audit: unexpected column type in " + prefix + "_audit");
            }
        };
        a.seq = num(0);
        a.lock = r.get<std::string>(1);
        a.owner = r.get<std::string>(2);
        a.token = num(3);
        a.kind = r.get<std::string>(4);
        a.db_time_us = num(5);
        a.expires_at_us = num(6);
        a.db = db;
        out.push_back(std::move(a));
    }
    return out;
}

/// What is left in `<prefix>_locks`, as audit rows of kind "row" whose db_time is the database's now.
inline std::vector<audit_row> lock_table_rows(soci::session& s, sqlock::engine e, std::string const& prefix,
                                              std::string const& db = {}) {
    soci::rowset<soci::row> rows = (s.prepare << "SELECT name, owner, token, " + audit_us_sql(e, "expires_at") + ", " +
                                                     audit_now_us_sql(e) + " FROM " + prefix + "_locks ORDER BY name");
    std::vector<audit_row> out;
    for (auto const& r : rows) {
        auto num = [&](std::size_t i) -> std::int64_t {
            switch (r.get_properties(i).get_data_type()) {
                case soci::dt_integer: return r.get<int>(i);
                case soci::dt_long_long: return r.get<long long>(i);
                case soci::dt_unsigned_long_long: return static_cast<std::int64_t>(r.get<unsigned long long>(i));
                case soci::dt_double: return static_cast<std::int64_t>(r.get<double>(i));
                case soci::dt_string: return std::stoll(r.get<std::string>(i));
                default: throw std::runtime_error("audit: unexpected column type in " + prefix + "_locks");
            }
        };
        audit_row a;
        a.lock = r.get<std::string>(0);
        a.owner = r.get<std::string>(1);
        a.token = num(2);
        a.kind = "row";
        a.expires_at_us = num(3);
        a.db_time_us = num(4);
        a.db = db;
        out.push_back(std::move(a));
    }
    return out;
}

/// Writes audit rows as JSON lines (checkers.hpp's to_json(audit_row)), appending.
inline void write_audit(std::string const& path, std::vector<audit_row> const& rows) {
    std::ofstream out(path, std::ios::app);
    if (!out) throw std::runtime_error("audit: cannot write " + path);
    for (auto const& r : rows) out << to_json(r).dump() << '\n';
}

// ------------------------------------------------------------------------- the row lock's audit

/// The expires_at of a row lock's audit rows on PostgreSQL, in µs since the epoch: 2999-01-01
/// UTC. A row lock has no expiry in database time; it ends at its commit (the audited delete).
inline constexpr std::int64_t row_audit_no_expiry_us = 32472144000000000;

/// The statements that install the row lock's audit of `<prefix>_rows` (run each on its own).
/// The audit table itself comes from audit_ddl().
inline std::vector<std::string> row_audit_ddl(sqlock::engine e, std::string const& prefix) {
    std::string const rows = prefix + "_rows";
    std::string const audit = prefix + "_audit";
    std::vector<std::string> out;
    switch (e) {
        case sqlock::engine::postgresql: {
            out.push_back("CREATE OR REPLACE FUNCTION " + audit +
                          "_row_fn() RETURNS trigger LANGUAGE plpgsql AS $f$\n"
                          "BEGIN\n"
                          "  INSERT INTO " +
                          audit +
                          " (\"lock\", owner, token, kind, db_time, expires_at) VALUES "
                          "(NEW.name, NEW.owner, NEW.token, TG_ARGV[0], clock_timestamp(), "
                          "TIMESTAMPTZ '2999-01-01 00:00:00+00');\n"
                          "  RETURN NULL;\n"
                          "END\n$f$");
            // The grant: the statement that records the drawn token (the lock statement before it sets
            // only owner and locked_at).
            out.push_back("DROP TRIGGER IF EXISTS " + audit + "_rgrant ON " + rows);
            out.push_back("CREATE TRIGGER " + audit + "_rgrant AFTER UPDATE OF token ON " + rows +
                          " FOR EACH ROW EXECUTE FUNCTION " + audit + "_row_fn('grant')");
            // The release: the same event, fired when the holding transaction commits.
            out.push_back("DROP TRIGGER IF EXISTS " + audit + "_rend ON " + rows);
            out.push_back("CREATE CONSTRAINT TRIGGER " + audit + "_rend AFTER UPDATE OF token ON " + rows +
                          " DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION " + audit +
                          "_row_fn('delete')");
            break;
        }
        case sqlock::engine::mysql: {
            std::string const ins =
                "INSERT INTO " + audit + " (`lock`, owner, token, kind, db_time, expires_at) VALUES ";
            out.push_back("DROP TRIGGER IF EXISTS " + audit + "_rgrant");
            out.push_back(
                "CREATE TRIGGER " + audit + "_rgrant AFTER UPDATE ON " + rows + " FOR EACH ROW " + ins +
                "(NEW.name, NEW.owner, NEW.token, 'takeover', SYSDATE(6), COALESCE(NEW.locked_at, SYSDATE(6)))");
            break;
        }
        case sqlock::engine::sqlite: {
            std::string const now = audit_now_us_sql(e);
            std::string const ins =
                "INSERT INTO " + audit + " (\"lock\", owner, token, kind, db_time, expires_at) VALUES ";
            auto trigger = [&](std::string const& suffix, std::string const& when, std::string const& kind) {
                out.push_back("DROP TRIGGER IF EXISTS " + audit + "_" + suffix);
                out.push_back("CREATE TRIGGER " + audit + "_" + suffix + " " + when + " BEGIN " + ins +
                              "(NEW.name, NEW.owner, NEW.token, '" + kind + "', " + now + ", COALESCE(NEW.locked_at, " +
                              now + ")); END");
            };
            trigger("rins", "AFTER INSERT ON " + rows, "grant");
            trigger("rgrant", "AFTER UPDATE ON " + rows, "takeover");
            break;
        }
    }
    return out;
}

/// Installs the row lock's audit of `<prefix>_rows` (the table must exist: open a store with
/// create_schema first). Creates the audit table if install_audit() has not.
inline void install_row_audit(soci::session& s, sqlock::engine e, std::string const& prefix) {
    s << audit_ddl(e, prefix).front();  // CREATE TABLE IF NOT EXISTS <prefix>_audit
    for (auto const& sql : row_audit_ddl(e, prefix)) s << sql;
}

/// Removes the row lock's audit triggers (and PostgreSQL's function); drop_audit() calls it.
inline void drop_row_audit(soci::session& s, sqlock::engine e, std::string const& prefix) {
    std::string const audit = prefix + "_audit";
    if (e == sqlock::engine::postgresql) {
        s << "DROP FUNCTION IF EXISTS " + audit + "_row_fn() CASCADE";  // and its triggers
        return;
    }
    for (auto const* t : {"_rgrant", "_rins"}) s << "DROP TRIGGER IF EXISTS " + audit + t;
}

// ------------------------------------------------------------------------- semaphore definitions

// install_definitions_audit() adds a table `<prefix>_defs_audit(seq, name, permits, kind, db_time)` and triggers
// on `<prefix>_semaphores` (a semaphore's stored N) that write one row per change, in the same transaction:
//   AFTER INSERT, AFTER UPDATE -> define (the row's name and permits after the change)
//   AFTER DELETE               -> forget (the deleted row's)
// db_time as the lock audit's (clock_timestamp(), SYSDATE(6), julianday('now')). The checker of a run that forgets
// and redefines N (K1-permits-defs, coord_checkers.hpp) reads which N was in force at each permit's grant from it.
// dump_definitions() reads it back as audit rows: lock = the semaphore's name, token = its permits, kind define or
// forget, expires_at_us = db_time_us, owner empty. Kept apart from `<prefix>_audit`, whose kinds K1 checks.

/// The statements that install the audit of `<prefix>_semaphores` (run each on its own).
inline std::vector<std::string> definitions_audit_ddl(sqlock::engine e, std::string const& prefix) {
    std::string const sems = prefix + "_semaphores";
    std::string const audit = prefix + "_defs_audit";
    std::vector<std::string> out;
    switch (e) {
        case sqlock::engine::postgresql: {
            out.push_back("CREATE TABLE IF NOT EXISTS " + audit +
                          " (seq bigserial PRIMARY KEY, name text COLLATE \"C\" NOT NULL, permits bigint NOT NULL,"
                          " kind text NOT NULL, db_time timestamptz NOT NULL)");
            std::string const ins = "INSERT INTO " + audit + " (name, permits, kind, db_time) VALUES ";
            out.push_back("CREATE OR REPLACE FUNCTION " + audit +
                          "_fn() RETURNS trigger LANGUAGE plpgsql AS $f$\n"
                          "BEGIN\n"
                          "  IF TG_OP = 'DELETE' THEN\n"
                          "    " +
                          ins +
                          "(OLD.name, OLD.permits, 'forget', clock_timestamp());\n"
                          "  ELSE\n"
                          "    " +
                          ins +
                          "(NEW.name, NEW.permits, 'define', clock_timestamp());\n"
                          "  END IF;\n"
                          "  RETURN NULL;\n"
                          "END\n$f$");
            out.push_back("DROP TRIGGER IF EXISTS " + audit + "_trg ON " + sems);
            out.push_back("CREATE TRIGGER " + audit + "_trg AFTER INSERT OR UPDATE OR DELETE ON " + sems +
                          " FOR EACH ROW EXECUTE FUNCTION " + audit + "_fn()");
            break;
        }
        case sqlock::engine::mysql: {
            out.push_back("CREATE TABLE IF NOT EXISTS " + audit +
                          " (seq BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY, name VARBINARY(255) NOT NULL,"
                          " permits BIGINT NOT NULL, kind VARCHAR(16) NOT NULL, db_time DATETIME(6) NOT NULL)"
                          " ENGINE = InnoDB");
            std::string const ins = "INSERT INTO " + audit + " (name, permits, kind, db_time) VALUES ";
            for (auto const& [suffix, when, row, kind] : {std::tuple{"_ins", "AFTER INSERT", "NEW", "define"},
                                                          std::tuple{"_upd", "AFTER UPDATE", "NEW", "define"},
                                                          std::tuple{"_del", "AFTER DELETE", "OLD", "forget"}}) {
                out.push_back("DROP TRIGGER IF EXISTS " + audit + suffix);
                out.push_back("CREATE TRIGGER " + audit + suffix + " " + when + " ON " + sems + " FOR EACH ROW " + ins +
                              "(" + row + ".name, " + row + ".permits, '" + kind + "', SYSDATE(6))");
            }
            break;
        }
        case sqlock::engine::sqlite: {
            std::string const now = audit_now_us_sql(e);
            out.push_back("CREATE TABLE IF NOT EXISTS " + audit +
                          " (seq INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT NOT NULL, permits BIGINT NOT NULL,"
                          " kind TEXT NOT NULL, db_time BIGINT NOT NULL)");
            std::string const ins = "INSERT INTO " + audit + " (name, permits, kind, db_time) VALUES ";
            for (auto const& [suffix, when, row, kind] : {std::tuple{"_ins", "AFTER INSERT", "NEW", "define"},
                                                          std::tuple{"_upd", "AFTER UPDATE", "NEW", "define"},
                                                          std::tuple{"_del", "AFTER DELETE", "OLD", "forget"}}) {
                out.push_back("DROP TRIGGER IF EXISTS " + audit + suffix);
                out.push_back("CREATE TRIGGER " + audit + suffix + " " + when + " ON " + sems + " BEGIN " + ins + "(" +
                              row + ".name, " + row + ".permits, '" + kind + "', " + now + "); END");
            }
            break;
        }
    }
    return out;
}

/// Installs the audit of `<prefix>_semaphores` (the table must exist: open a store with create_schema first).
inline void install_definitions_audit(soci::session& s, sqlock::engine e, std::string const& prefix) {
    for (auto const& sql : definitions_audit_ddl(e, prefix)) s << sql;
}

/// Removes the definitions' audit (its triggers, PostgreSQL's function, its table); harmless when absent.
inline void drop_definitions_audit(soci::session& s, sqlock::engine e, std::string const& prefix) {
    std::string const audit = prefix + "_defs_audit";
    if (e == sqlock::engine::postgresql) s << "DROP FUNCTION IF EXISTS " + audit + "_fn() CASCADE";  // and its trigger
    else
        for (auto const* t : {"_ins", "_upd", "_del"}) s << "DROP TRIGGER IF EXISTS " + audit + t;
    s << "DROP TABLE IF EXISTS " + audit;
}

/// The definitions' audit in seq order, as audit rows (see above).
inline std::vector<audit_row> dump_definitions(soci::session& s, sqlock::engine e, std::string const& prefix,
                                               std::string const& db = {}) {
    soci::rowset<soci::row> rows = (s.prepare << "SELECT seq, name, permits, kind, " + audit_us_sql(e, "db_time") +
                                                     " FROM " + prefix + "_defs_audit ORDER BY seq");
    std::vector<audit_row> out;
    for (auto const& r : rows) {
        auto num = [&](std::size_t i) -> std::int64_t {
            switch (r.get_properties(i).get_data_type()) {
                case soci::dt_integer: return r.get<int>(i);
                case soci::dt_long_long: return r.get<long long>(i);
                case soci::dt_unsigned_long_long: return static_cast<std::int64_t>(r.get<unsigned long long>(i));
                case soci::dt_double: return static_cast<std::int64_t>(r.get<double>(i));
                case soci::dt_string: return std::stoll(r.get<std::string>(i));
                default: throw std::runtime_error("audit: unexpected column type in " + prefix + "_defs_audit");
            }
        };
        audit_row a;
        a.seq = num(0);
        a.lock = r.get<std::string>(1);
        a.token = num(2);
        a.kind = r.get<std::string>(3);
        a.db_time_us = num(4);
        a.expires_at_us = a.db_time_us;
        a.db = db;
        out.push_back(std::move(a));
    }
    return out;
}

}  // namespace sqlock_battery
