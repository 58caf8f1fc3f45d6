// PostgreSQL: the whole acquire is one statement (a data-modifying CTE draws the
// token, INSERT ... ON CONFLICT DO UPDATE ... WHERE expired takes the row), so a
// busy lock raises no error in the server log and nothing to roll back.
#include "detail/dialect.hpp"

#include <sqlock/errors.hpp>

#include <soci/postgresql/soci-postgresql.h>
#include <soci/soci.h>

#include <libpq-fe.h>

namespace sqlock::detail {
namespace {

// A libpq conninfo value, single-quoted with backslash escapes.
std::string quote(std::string const& value) {
    std::string out = "'";
    for (char c : value) {
        if (c == '\'' || c == '\\') out += '\\';
        out += c;
    }
    return out + "'";
}

std::string epoch_us(std::string const& column) {
    return "CAST(EXTRACT(EPOCH FROM " + column + ") * 1000000 AS bigint)";
}

class postgresql_dialect final : public dialect {
public:
    postgresql_dialect(std::string const& prefix, store_options const& options) : dialect(prefix, options) {
        // statement_timestamp() is fixed for the statement and our connection is in
        // autocommit, so it never lags behind by a caller's transaction (ShedLock #3577).
        acquire_sql_ =
            "WITH t AS (INSERT INTO " + tokens_ + " AS t (name, token) VALUES (:name, 1)"
            " ON CONFLICT (name) DO UPDATE SET token = t.token + 1 RETURNING t.name, t.token)"
            " INSERT INTO " + locks_ + " AS l (name, owner, token, holds, created_at, expires_at)"
            " SELECT t.name, :owner, t.token, 1, statement_timestamp(),"
            " statement_timestamp() + CAST(:ttl AS double precision) * interval '1 microsecond' FROM t"
            " ON CONFLICT (name) DO UPDATE SET owner = excluded.owner, token = excluded.token, holds = 1,"
            " created_at = excluded.created_at, expires_at = excluded.expires_at"
            " WHERE l.expires_at < statement_timestamp()"
            " RETURNING l.token, " + epoch_us("l.created_at") + ", " + epoch_us("l.expires_at");
    }

    sqlock::engine engine() const noexcept override { return engine::postgresql; }

    std::string connect_string(url_parts const& url) const override {
        auto seconds = std::max<long long>(2, (options_.connect_timeout.count() + 999) / 1000);
        std::string c = "host=" + quote(url.host) + " dbname=" + quote(url.database) +
                        " connect_timeout=" + std::to_string(seconds) + " application_name='sqlock'";
        if (url.port != 0) c += " port=" + std::to_string(url.port);
        if (!url.user.empty()) c += " user=" + quote(url.user);
        if (!url.password.empty()) c += " password=" + quote(url.password);
        for (auto const& [key, value] : url.params) c += " " + key + "=" + quote(value);
        return c;
    }

    void open(soci::session& s, std::string const& connect_string) const override {
        s.open(*soci::factory_postgresql(), connect_string);
        s << "SET lock_timeout = " + std::to_string(options_.lock_wait_timeout.count());
        s << "SET TIME ZONE 'UTC'";
    }

    grant acquire(soci::session& s, std::string const& name, std::string const& owner,
                  std::int64_t ttl_us) const override {
        long long ttl = ttl_us, token = 0, created = 0, expires = 0;
        s << acquire_sql_, soci::use(name, "name"), soci::use(owner, "owner"), soci::use(ttl, "ttl"),
            soci::into(token), soci::into(created), soci::into(expires);
        if (!s.got_data()) return {};
        return {true, token, created, expires};
    }

    failure classify(soci::soci_error const& e, soci::session& s) const override {
        // Every session of this dialect was opened with the PostgreSQL backend.
        auto* backend = static_cast<soci::postgresql_session_backend*>(s.get_backend());
        if (backend == nullptr || backend->conn_ == nullptr || PQstatus(backend->conn_) == CONNECTION_BAD)
            return failure::connection;
        auto code = native_code(e);
        if (code == "40001" || code == "40P01") return failure::transient;
        if (code == "55P03") return failure::lock_wait;
        if (code == "42P01") return failure::schema;
        if (code.starts_with("08") || code.starts_with("57P")) return failure::connection;
        return failure::other;
    }

    std::string native_code(soci::soci_error const& e) const override {
        if (auto* pg = dynamic_cast<soci::postgresql_soci_error const*>(&e)) return pg->sqlstate();
        return {};
    }

protected:
    std::string table_exists_sql() const override {
        return "SELECT CASE WHEN to_regclass(:t) IS NULL THEN 0 ELSE 1 END";
    }

private:
    std::string acquire_sql_;
};

}  // namespace

std::unique_ptr<dialect> make_postgresql_dialect(std::string const& prefix, store_options const& options) {
    return std::make_unique<postgresql_dialect>(prefix, options);
}

}  // namespace sqlock::detail
