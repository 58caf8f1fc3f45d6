// sqlock fault tests — the member databases of a majority (sqlock::majority_locker) under test.
//
//   shared_majority_members()  the three members on the shared test servers: PostgreSQL `sqlock`
//                              (SQLOCK_TEST_PG_URL, "pg"), PostgreSQL `sqlock2` (SQLOCK_TEST_PG2_URL, "pg2"),
//                              MariaDB (SQLOCK_TEST_MYSQL_URL, "mariadb"); a missing variable skips the test
//                              outside CI and fails it under CI (require_env), returning what was found.
//   majority_members           opens members (shared or private servers) each behind a fault proxy of its own:
//                              a store through the proxy (tables of a random prefix, created), a direct raw
//                              session for the checks; on destruction the proxies relay again and the tables
//                              are dropped.
//   drop_member_tables         drops a member's tables of a prefix (majority_members, tests/majority_suite.cpp).
// Used by battery_harness.hpp (the majority scenarios), characterization_suite.cpp (F06),
// majority_nemesis_suite.cpp (F07) and tests/majority_suite.cpp (its members, with their lease events).
#pragma once

#include "../fault_proxy.hpp"
#include "../test_env.hpp"

#include <sqlock/majority.hpp>
#include <sqlock/sqlock.hpp>

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace sqlock_test {

/// Where one member database is: its label in histories and messages, engine, direct URL.
struct member_spec {
    std::string label;
    sqlock::engine e{};
    std::string url;
};

/// The three members on the shared test servers, in order pg, pg2, mariadb. When a variable is missing the
/// test is skipped (failed under CI) and the list is cut short: check should_stop() after the call.
inline std::vector<member_spec> shared_majority_members() {
    struct source {
        char const* var;
        char const* label;
        sqlock::engine e;
    };
    std::vector<member_spec> out;
    for (auto const& src : {source{"SQLOCK_TEST_PG_URL", "pg", sqlock::engine::postgresql},
                            source{"SQLOCK_TEST_PG2_URL", "pg2", sqlock::engine::postgresql},
                            source{"SQLOCK_TEST_MYSQL_URL", "mariadb", sqlock::engine::mysql}}) {
        member_spec m{src.label, src.e, {}};
        require_env(src.var, m.url);
        if (should_stop()) return out;
        out.push_back(std::move(m));
    }
    return out;
}

/// One member database: its server, the proxy the library reaches it through,
/// a store on the proxy and a direct raw session for the checks (tests/majority_suite.cpp adds lease events).
struct member_db {
    std::string label;
    sqlock::engine e{};
    std::string url;  // direct
    std::unique_ptr<fault_proxy> proxy;
    std::optional<sqlock::store> store;  // through the proxy
    std::unique_ptr<soci::session> raw;  // direct
};

/// Drops the tables `tables`_* on member `m` (a failure to drop is a test failure).
inline void drop_member_tables(member_db const& m, std::string const& tables) {
    try {
        auto s = raw_session(m.e, m.url);
        std::vector<std::string> names(64);
        std::string const like = tables + "\\_%";
        if (m.e == sqlock::engine::postgresql)
            *s << "SELECT tablename FROM pg_tables WHERE schemaname = current_schema() AND tablename LIKE :p",
                soci::into(names), soci::use(like);
        else
            *s << "SELECT table_name FROM information_schema.tables WHERE table_schema = DATABASE() AND "
                  "table_name LIKE :p",
                soci::into(names), soci::use(like);
        for (auto const& t : names) *s << "DROP TABLE IF EXISTS " + t;
    } catch (std::exception const& e) {
        ADD_FAILURE() << "could not drop the test tables " << tables << "_* on " << m.label << ": " << describe(e);
    }
}

/// New members form a group (and seed their majority counters) the first time all of them answer
/// together (docs/majority.md): a test that takes a member down before its first grant does this first.
/// `urls` direct, tables of prefix `tables` in place; a failure is a test failure.
inline void form_majority_group(std::vector<std::string> const& urls, std::string const& tables) {
    try {
        std::vector<sqlock::store> stores;
        stores.reserve(urls.size());
        for (auto const& url : urls)
            stores.emplace_back(url, sqlock::store_options{.pool_size = 1, .table_prefix = tables});
        std::vector<sqlock::locker> lockers;
        for (auto& st : stores) lockers.push_back(sqlock::table_locker(st, {.ttl = std::chrono::seconds(10)}));
        auto majority = sqlock::majority_locker(std::move(lockers), {.auto_renew = false});
        auto l = majority.try_acquire("sqlock-test-form-group");
        if (!l) ADD_FAILURE() << "the majority members did not form their group: busy";
        else l->release();
    } catch (std::exception const& e) {
        ADD_FAILURE() << "the majority members did not form their group: " << describe(e);
    }
}

/// Members with tables of their own (`tables`_*), each through its own fault proxy.
class majority_members {
public:
    majority_members() = default;
    majority_members(majority_members const&) = delete;
    majority_members& operator=(majority_members const&) = delete;
    ~majority_members() { close(); }

    /// Opens each member: proxy, store through it (creating the tables; `opts.table_prefix` is set to
    /// `tables`), raw session.
    void open(std::vector<member_spec> const& specs, std::string tables, sqlock::store_options opts) {
        tables_ = std::move(tables);
        opts.create_schema = true;
        opts.table_prefix = tables_;
        for (auto const& spec : specs) {
            member_db m;
            m.label = spec.label;
            m.e = spec.e;
            m.url = spec.url;
            m.proxy = fault_proxy::for_url(m.url);
            members_.push_back(std::move(m));
            auto& added = members_.back();
            added.store.emplace(added.proxy->proxied_url(added.url), opts);
            added.raw = raw_session(added.e, added.url);
        }
        form_group();
    }

    void form_group() {
        std::vector<std::string> urls;
        for (auto& m : members_) urls.push_back(m.url);
        form_majority_group(urls, tables_);
    }

    /// Proxies relay again, stores closed, the tables dropped (a failure to drop is a test failure).
    void close() {
        for (auto& m : members_)
            if (m.proxy) m.proxy->unblock();
        for (auto& m : members_) {
            m.store.reset();
            m.proxy.reset();
            m.raw.reset();
        }
        if (!tables_.empty())
            for (auto& m : members_) drop_member_tables(m, tables_);
        members_.clear();
        tables_.clear();
    }

    std::size_t size() const { return members_.size(); }
    member_db& at(std::size_t i) { return members_.at(i); }
    std::string const& tables() const { return tables_; }

    std::optional<lock_row> row_on(std::size_t i, std::string const& name) {
        return read_row(*at(i).raw, at(i).e, name, tables_);
    }

    /// "pg: A token 3, pg2: none, ..." (for messages).
    std::string rows_of(std::string const& name) {
        std::string out;
        for (std::size_t i = 0; i < members_.size(); ++i) {
            std::string what;
            try {
                auto r = row_on(i, name);
                what = r ? r->owner + " token " + std::to_string(r->token) : std::string("none");
            } catch (std::exception const& e) {
                what = "unreadable (" + std::string(e.what()) + ")";
            }
            out += (out.empty() ? "" : ", ") + at(i).label + ": " + what;
        }
        return out;
    }

private:
    std::vector<member_db> members_;
    std::string tables_;
};

}  // namespace sqlock_test
