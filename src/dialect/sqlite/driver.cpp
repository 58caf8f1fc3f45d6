// SQLite: the engine driver: session set-up, error classification, the idle-socket read.
#include "dialect/sqlite/sqlite.hpp"

namespace sqlock::detail::sqlite_engine {

std::string sqlite_dialect::connect_string(url_parts const& url) const {
    auto sync = url.params.find("synchronous");
    synchronous_ = sync == url.params.end() ? "full" : sync->second;
    relax_release_ = synchronous_ != "normal" && synchronous_ != "off" && synchronous_ != "1" && synchronous_ != "0";
    durable_sql_ = "PRAGMA synchronous = " + synchronous_;
    path_ = url.path;
    return "db=\"" + url.path + "\"";
}

void sqlite_dialect::open(soci::session& s, std::string const& connect_string) const {
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
                throw usage_error("sqlock: the SQLite database " + path_ +
                                  " cannot use WAL mode (journal_mode "
                                  "stayed '" +
                                  mode +
                                  "'): put the file on a local file system that supports "
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

void sqlite_dialect::set_engine_wait(soci::session& s, std::chrono::milliseconds wait) const {
    auto* backend = static_cast<soci::sqlite3_session_backend*>(s.get_backend());
    if (backend != nullptr && backend->conn_ != nullptr)
        sqlite3_busy_timeout(backend->conn_, static_cast<int>(std::clamp<long long>(wait.count(), 0, INT32_MAX)));
}

failure sqlite_dialect::classify(soci::soci_error const& e, soci::session&) const {
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

std::string sqlite_dialect::native_code(soci::soci_error const& e) const {
    if (auto* lite = dynamic_cast<soci::sqlite3_soci_error const*>(&e)) return std::to_string(lite->result());
    return {};
}

}  // namespace sqlock::detail::sqlite_engine
